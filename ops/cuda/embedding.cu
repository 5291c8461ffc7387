/* Embedding lookup and its backward, as ops/embedding.c.
 *
 * The backward is a scatter-add: dtable[id - offset] += dy[t] in token order, in
 * float, on the CPU. Here tokens are grouped by row with a stable radix sort of
 * (row, token) pairs (CUB), then one block per row adds its tokens' gradients in
 * token order: the same float additions in the same order, so the result equals the
 * CPU's bit for bit, with no atomics.
 */
#include <cub/device/device_radix_sort.cuh>

#include "ops/cuda/cuda_common.h"

__global__ void k_embedding(const int32_t *__restrict__ ids, const float *__restrict__ table, float *y, int64_t n,
                            int64_t h, int64_t V, int64_t off) {
    MG_GRID_STRIDE(i, n) {
        int64_t t = i / h, j = i - t * h, r = (int64_t)ids[t] - off;
        y[i] = (r >= 0 && r < V) ? table[r * h + j] : 0.0f;
    }
}

extern "C" int mg_cuda_embedding(const mg_kernel_args *a, mg_error *err) {
    const mg_node *n = a->node;
    int64_t T = mg_numel(n->in[0]), V = n->in[1]->shape[0], h = n->in[1]->shape[1];
    if (T * h == 0) return MG_OK;
    k_embedding<<<mg_cuda_blocks(T * h, MG_CUDA_THREADS), MG_CUDA_THREADS, 0, mg_cuda_stream()>>>(
        (const int32_t *)a->in[0], (const float *)a->in[1], (float *)a->out[0], T * h, h, V,
        n->attrs.embedding.vocab_offset);
    return mg_cuda_check_launch("embedding", err);
}

/* key = row in [0, V) for this block's rows, V for every other id (sorted last) */
__global__ void k_emb_keys(const int32_t *__restrict__ ids, uint32_t *keys, int32_t *tok, int64_t T, int64_t V,
                           int64_t off) {
    MG_GRID_STRIDE(t, T) {
        int64_t r = (int64_t)ids[t] - off;
        keys[t] = (r >= 0 && r < V) ? (uint32_t)r : (uint32_t)V;
        tok[t] = (int32_t)t;
    }
}

/* Block b handles the run of sorted position b if a run starts there. */
__global__ void k_emb_rows(const uint32_t *__restrict__ keys, const int32_t *__restrict__ tok,
                           const float *__restrict__ dy, float *dt, int64_t T, int64_t V, int64_t h) {
    int64_t s = blockIdx.x;
    uint32_t r = keys[s];
    if (r >= (uint32_t)V || (s > 0 && keys[s - 1] == r)) return;
    int64_t e = s;
    while (e < T && keys[e] == r) e++;
    for (int64_t j = threadIdx.x; j < h; j += blockDim.x) {
        float acc = 0.0f; /* the CPU starts from the zeroed row and adds in token order */
        for (int64_t k = s; k < e; k++) acc += dy[(int64_t)tok[k] * h + j];
        dt[(int64_t)r * h + j] = acc;
    }
}

extern "C" int mg_cuda_embedding_bwd(const mg_kernel_args *a, mg_error *err) {
    const mg_node *n = a->node;
    int64_t T = mg_numel(n->in[1]), V = n->in[2]->shape[0], h = n->in[2]->shape[1];
    cudaStream_t st = mg_cuda_stream();
    int rc = mg_cuda_check(cudaMemsetAsync(a->out[0], 0, (size_t)(V * h) * sizeof(float), st), "embedding_bwd", err);
    if (rc || T == 0) return rc;
    if (T > INT32_MAX || V >= UINT32_MAX)
        return mg_error_set(err, MG_ERR_UNSUPPORTED, "embedding_bwd: %lld tokens / %lld rows is too many", (long long)T,
                            (long long)V);
    int bits = 1;
    while (bits < 32 && ((uint64_t)1 << bits) <= (uint64_t)V) bits++;
    size_t temp = 0;
    cub::DeviceRadixSort::SortPairs(NULL, temp, (const uint32_t *)NULL, (uint32_t *)NULL, (const int32_t *)NULL,
                                    (int32_t *)NULL, (int)T, 0, bits, st);
    size_t pairs = (size_t)T * (2 * sizeof(uint32_t) + 2 * sizeof(int32_t));
    char *mem;
    if ((rc = mg_cuda_scratch((void **)&mem, pairs + temp + 256, "embedding_bwd", err))) return rc;
    uint32_t *k_in = (uint32_t *)mem, *k_out = k_in + T;
    int32_t *t_in = (int32_t *)(k_out + T), *t_out = t_in + T;
    void *tmp = (void *)(((uintptr_t)(t_out + T) + 255) & ~(uintptr_t)255);
    k_emb_keys<<<mg_cuda_blocks(T, MG_CUDA_THREADS), MG_CUDA_THREADS, 0, st>>>((const int32_t *)a->in[1], k_in, t_in, T,
                                                                               V, n->attrs.embedding.vocab_offset);
    cudaError_t ce = cub::DeviceRadixSort::SortPairs(tmp, temp, k_in, k_out, t_in, t_out, (int)T, 0, bits, st);
    if (ce == cudaSuccess)
        k_emb_rows<<<(unsigned)T, 128, 0, st>>>(k_out, t_out, (const float *)a->in[0], (float *)a->out[0], T, V, h);
    rc = ce != cudaSuccess ? mg_cuda_check(ce, "embedding_bwd: radix sort", err) : mg_cuda_check_launch("embedding_bwd", err);
    mg_cuda_scratch_free(mem);
    return rc;
}

/* MoE balancing ops on the GPU (ops/moe_router.c defines them): sigmoid_norm and its
 * backward (one block per row, sums in double as the CPU kernel), moe_map_count (one
 * thread per output count, tokens in order: exact in float below 2^24), and the expert
 * biases' sign step. The router itself, the dispatch and the grouped matmuls run on CPU
 * workers (ops/cuda/registry.c). */
#include <math.h>

#include "ops/cuda/cuda_common.h"

#define NT 128

__device__ inline float sig(float x) { return 1.0f / (1.0f + expf(-x)); }

__global__ void k_sigmoid_norm(const float *__restrict__ x, float *y, int64_t N) {
    __shared__ double sh[32];
    const float *xr = x + (int64_t)blockIdx.x * N;
    float *yr = y + (int64_t)blockIdx.x * N;
    double sum = 0;
    for (int64_t j = threadIdx.x; j < N; j += blockDim.x) sum += sig(xr[j]);
    double inv = 1.0 / (mg_block_sum(sum, sh) + 1e-20);
    for (int64_t j = threadIdx.x; j < N; j += blockDim.x) yr[j] = (float)(sig(xr[j]) * inv);
}

/* dx_j = s_j (1 - s_j) (dy_j - Σ_i dy_i y_i) / S */
__global__ void k_sigmoid_norm_bwd(const float *__restrict__ dy, const float *__restrict__ x, float *dx, int64_t N) {
    __shared__ double sh[32];
    int64_t o = (int64_t)blockIdx.x * N;
    double sum = 0, dot = 0;
    for (int64_t j = threadIdx.x; j < N; j += blockDim.x) sum += sig(x[o + j]);
    double S = mg_block_sum(sum, sh) + 1e-20;
    for (int64_t j = threadIdx.x; j < N; j += blockDim.x) dot += (double)dy[o + j] * sig(x[o + j]) / S;
    dot = mg_block_sum(dot, sh);
    for (int64_t j = threadIdx.x; j < N; j += blockDim.x) {
        double s = sig(x[o + j]);
        dx[o + j] = (float)(s * (1.0 - s) * ((double)dy[o + j] - dot) / S);
    }
}

static int rows_of(const mg_tensor *t, int64_t *N, int64_t *rows, const char *op, mg_error *err) {
    *N = t->shape[t->ndim - 1];
    *rows = *N ? mg_numel(t) / *N : 0;
    if (*rows > 2147483647) return mg_error_set(err, MG_ERR_UNSUPPORTED, "%s: more than 2^31 rows", op);
    return MG_OK;
}

extern "C" int mg_cuda_sigmoid_norm(const mg_kernel_args *a, mg_error *err) {
    int64_t N, rows;
    int rc = rows_of(a->node->in[0], &N, &rows, "sigmoid_norm", err);
    if (rc || !rows) return rc;
    k_sigmoid_norm<<<(unsigned)rows, NT, 0, mg_cuda_stream()>>>((const float *)a->in[0], (float *)a->out[0], N);
    return mg_cuda_check_launch("sigmoid_norm", err);
}

extern "C" int mg_cuda_sigmoid_norm_bwd(const mg_kernel_args *a, mg_error *err) {
    int64_t N, rows;
    int rc = rows_of(a->node->in[1], &N, &rows, "sigmoid_norm_bwd", err);
    if (rc || !rows) return rc;
    k_sigmoid_norm_bwd<<<(unsigned)rows, NT, 0, mg_cuda_stream()>>>((const float *)a->in[0], (const float *)a->in[1],
                                                                     (float *)a->out[0], N);
    return mg_cuda_check_launch("sigmoid_norm_bwd", err);
}

/* count[b, e] = Σ over tokens t = b, b + B, ... of map[t, e] */
__global__ void k_map_count(const int32_t *__restrict__ map, float *cnt, int64_t T, int64_t E, int64_t B) {
    MG_GRID_STRIDE(i, B * E) {
        int64_t b = i / E, e = i % E;
        float c = 0.0f;
        for (int64_t t = b; t < T; t += B) c += (float)map[t * E + e];
        cnt[i] = c;
    }
}

extern "C" int mg_cuda_moe_map_count(const mg_kernel_args *a, mg_error *err) {
    const mg_tensor *m = a->node->in[0];
    int64_t T = m->shape[0], E = m->shape[1], B = a->node->attrs.moe.samples > 0 ? a->node->attrs.moe.samples : 1;
    k_map_count<<<mg_cuda_blocks(B * E, MG_CUDA_THREADS), MG_CUDA_THREADS, 0, mg_cuda_stream()>>>(
        (const int32_t *)a->in[0], (float *)a->out[0], T, E, B);
    return mg_cuda_check_launch("moe_map_count", err);
}

/* one block: the mean count in double, rounded to float as the CPU kernel, then each bias */
__global__ void k_bias_update(const float *__restrict__ b, const float *__restrict__ c, float *o, int64_t E, float rate) {
    __shared__ double sh[32];
    double sum = 0;
    for (int64_t e = threadIdx.x; e < E; e += blockDim.x) sum += c[e];
    float mean = (float)(mg_block_sum(sum, sh) / (double)E);
    for (int64_t e = threadIdx.x; e < E; e += blockDim.x) {
        float off = mean - c[e];
        o[e] = b[e] + (off > 0 ? rate : off < 0 ? -rate : 0.0f);
    }
}

extern "C" int mg_cuda_moe_expert_bias_update(const mg_kernel_args *a, mg_error *err) {
    int64_t E = a->node->in[0]->shape[0];
    k_bias_update<<<1, NT, 0, mg_cuda_stream()>>>((const float *)a->in[0], (const float *)a->in[1], (float *)a->out[0], E,
                                                  a->node->attrs.moe.rate);
    return mg_cuda_check_launch("moe_expert_bias_update", err);
}

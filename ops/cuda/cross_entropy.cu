/* Softmax, softmax cross-entropy and the vocab-parallel pieces, as ops/softmax.c and
 * ops/cross_entropy.c: one block per row (token); row sums in double; the loss is
 * the mean of per-token terms summed by one block in token order (deterministic).
 *
 * A target outside the vocabulary is a run-time error on the CPU; here the kernels
 * count such tokens in a device flag, and the op waits for its stream to read it
 * (once per micro-batch: the loss ops are few).
 */
#include <math.h>

#include "ops/cuda/cuda_common.h"

#define NT 256

__device__ inline float row_max(const float *xr, int64_t V, float *sh) {
    float m = -INFINITY;
    for (int64_t j = threadIdx.x; j < V; j += blockDim.x) m = fmaxf(m, xr[j]);
    return mg_block_max(m, sh);
}

__global__ void k_softmax(const float *__restrict__ x, float *y, int64_t N) {
    __shared__ float shf[32];
    __shared__ double shd[32];
    const float *xr = x + blockIdx.x * N;
    float *yr = y + blockIdx.x * N;
    float m = row_max(xr, N, shf);
    double s = 0;
    for (int64_t j = threadIdx.x; j < N; j += blockDim.x) {
        float e = expf(xr[j] - m);
        yr[j] = e;
        s += e;
    }
    float inv = (float)(1.0 / mg_block_sum(s, shd));
    for (int64_t j = threadIdx.x; j < N; j += blockDim.x) yr[j] *= inv;
}

__global__ void k_softmax_bwd(const float *__restrict__ dy, const float *__restrict__ y, float *dx, int64_t N) {
    __shared__ double sh[32];
    int64_t o = blockIdx.x * N;
    double s = 0;
    for (int64_t j = threadIdx.x; j < N; j += blockDim.x) s += (double)dy[o + j] * y[o + j];
    float sf = (float)mg_block_sum(s, sh);
    for (int64_t j = threadIdx.x; j < N; j += blockDim.x) dx[o + j] = y[o + j] * (dy[o + j] - sf);
}

static int rows_of(const mg_tensor *t, int64_t *N, int64_t *rows, const char *what, mg_error *err) {
    *N = t->shape[t->ndim - 1];
    *rows = *N ? mg_numel(t) / *N : 0;
    if (*rows > INT32_MAX) return mg_error_set(err, MG_ERR_UNSUPPORTED, "%s: too many rows", what);
    return MG_OK;
}

extern "C" int mg_cuda_softmax(const mg_kernel_args *a, mg_error *err) {
    int64_t N, rows;
    int rc = rows_of(a->node->in[0], &N, &rows, "softmax", err);
    if (rc || !rows) return rc;
    k_softmax<<<(unsigned)rows, NT, 0, mg_cuda_stream()>>>((const float *)a->in[0], (float *)a->out[0], N);
    return mg_cuda_check_launch("softmax", err);
}

extern "C" int mg_cuda_softmax_bwd(const mg_kernel_args *a, mg_error *err) {
    int64_t N, rows;
    int rc = rows_of(a->node->in[1], &N, &rows, "softmax_bwd", err);
    if (rc || !rows) return rc;
    k_softmax_bwd<<<(unsigned)rows, NT, 0, mg_cuda_stream()>>>((const float *)a->in[0], (const float *)a->in[1],
                                                              (float *)a->out[0], N);
    return mg_cuda_check_launch("softmax_bwd", err);
}

/* ---- cross_entropy ------------------------------------------------------------------- */
/* Per token: lse, and term = lse - x[target] (0 for ignored); bad targets counted. */
__global__ void k_xent_rows(const float *__restrict__ x, const int32_t *__restrict__ tg, float *lse, double *term,
                            int *bad, int64_t V, int32_t ign) {
    __shared__ float shf[32];
    __shared__ double shd[32];
    int64_t t = blockIdx.x;
    const float *xr = x + t * V;
    float m = row_max(xr, V, shf);
    double s = 0;
    for (int64_t j = threadIdx.x; j < V; j += blockDim.x) s += expf(xr[j] - m);
    s = mg_block_sum(s, shd);
    if (threadIdx.x == 0) {
        double l = (double)m + log(s);
        lse[t] = (float)l;
        int32_t g = tg[t];
        bool ok = g != ign && g >= 0 && g < V;
        if (g != ign && !ok) atomicAdd(bad, 1);
        term[t] = ok ? l - (double)xr[g] : 0.0;
    }
}

/* One block: loss = sum(term) / count (the op's count input) in token order. */
__global__ void k_mean_terms(const double *__restrict__ term, const float *__restrict__ count, float *loss, int64_t T) {
    __shared__ double sh[32];
    double s = 0;
    for (int64_t t = threadIdx.x; t < T; t += blockDim.x) s += term[t];
    s = mg_block_sum(s, sh);
    double c = count[0];
    if (threadIdx.x == 0) loss[0] = c > 0 ? (float)(s / c) : 0.0f;
}

/* xent_count: the tokens whose target is not ignore_index, as a float; one block. */
__global__ void k_xent_count(const int32_t *__restrict__ tg, int64_t T, int32_t ign, float *count) {
    __shared__ double sh[32];
    double c = 0;
    for (int64_t t = threadIdx.x; t < T; t += blockDim.x) c += tg[t] != ign;
    c = mg_block_sum(c, sh);
    if (threadIdx.x == 0) count[0] = (float)c;
}

extern "C" int mg_cuda_xent_count(const mg_kernel_args *a, mg_error *err) {
    k_xent_count<<<1, 1024, 0, mg_cuda_stream()>>>((const int32_t *)a->in[0], mg_numel(a->node->in[0]),
                                                   a->node->attrs.xent.ignore_index, (float *)a->out[0]);
    return mg_cuda_check_launch("xent_count", err);
}

/* Waits for the stream and reports bad targets counted in *bad_dev. */
static int check_targets(const mg_node *n, int *bad_dev, int64_t V, mg_error *err) {
    int bad = 0;
    int rc = mg_cuda_check(cudaMemcpyAsync(&bad, bad_dev, sizeof bad, cudaMemcpyDeviceToHost, mg_cuda_stream()),
                           mg_op_name(n->op), err);
    if (!rc) rc = mg_cuda_check(cudaStreamSynchronize(mg_cuda_stream()), mg_op_name(n->op), err);
    if (!rc && bad)
        rc = mg_error_set(err, MG_ERR_INVALID, "%s: %d targets outside [0, %lld) and not ignore_index %d", mg_op_name(n->op),
                          bad, (long long)V, (int)n->attrs.xent.ignore_index);
    return rc;
}

typedef struct xent_scratch {
    void *mem;
    double *term;
    int *bad;
} xent_scratch;

static int scratch_tokens(xent_scratch *s, int64_t T, const char *what, mg_error *err) {
    size_t bytes = (size_t)T * sizeof(double) + 64;
    int rc = mg_cuda_scratch(&s->mem, bytes, what, err);
    if (rc) return rc;
    s->term = (double *)s->mem;
    s->bad = (int *)(s->term + T);
    return mg_cuda_check(cudaMemsetAsync(s->bad, 0, sizeof(int), mg_cuda_stream()), what, err);
}

extern "C" int mg_cuda_cross_entropy(const mg_kernel_args *a, mg_error *err) {
    const mg_node *n = a->node;
    int64_t V, T;
    int rc = rows_of(n->in[0], &V, &T, "cross_entropy", err);
    if (rc) return rc;
    xent_scratch s;
    if ((rc = scratch_tokens(&s, T, "cross_entropy", err))) return rc;
    if (T)
        k_xent_rows<<<(unsigned)T, NT, 0, mg_cuda_stream()>>>((const float *)a->in[0], (const int32_t *)a->in[1],
                                                             (float *)a->out[1], s.term, s.bad, V,
                                                             n->attrs.xent.ignore_index);
    k_mean_terms<<<1, 1024, 0, mg_cuda_stream()>>>(s.term, (const float *)a->in[2], (float *)a->out[0], T);
    rc = mg_cuda_check_launch("cross_entropy", err);
    if (!rc) rc = check_targets(n, s.bad, V, err);
    mg_cuda_scratch_free(s.mem);
    return rc;
}

/* targets outside the vocabulary that are not ignored, one block */
__global__ void k_bad_targets(const int32_t *__restrict__ tg, int64_t T, int32_t ign, int64_t Vt, int *bad) {
    __shared__ double sh[32];
    double b = 0;
    for (int64_t t = threadIdx.x; t < T; t += blockDim.x) {
        int32_t g = tg[t];
        if (g != ign && (g < 0 || g >= Vt)) b += 1;
    }
    b = mg_block_sum(b, sh);
    if (threadIdx.x == 0) *bad = (int)b;
}

__global__ void k_xent_bwd(const float *__restrict__ dl, const float *__restrict__ x, const int32_t *__restrict__ tg,
                           const float *__restrict__ lse, const float *__restrict__ count, float *dx, int64_t V,
                           int64_t off, int32_t ign) {
    int64_t t = blockIdx.x;
    const float *xr = x + t * V;
    float *dr = dx + t * V;
    int32_t g = tg[t];
    if (g == ign) {
        for (int64_t j = threadIdx.x; j < V; j += blockDim.x) dr[j] = 0.0f;
        return;
    }
    double c = count[0];
    float s = c > 0 ? (float)((double)dl[0] / c) : 0.0f, l = lse[t];
    int64_t col = (int64_t)g - off;
    for (int64_t j = threadIdx.x; j < V; j += blockDim.x) {
        float v = expf(xr[j] - l) * s;
        dr[j] = j == col ? v - s : v;
    }
}

extern "C" int mg_cuda_cross_entropy_bwd(const mg_kernel_args *a, mg_error *err) {
    const mg_node *n = a->node;
    const mg_tensor *lt = n->in[1];
    int64_t V, T;
    int rc = rows_of(lt, &V, &T, "cross_entropy_bwd", err);
    if (rc) return rc;
    int64_t Vt = lt->logical.shape[lt->logical.ndim - 1];
    int *bad;
    if ((rc = mg_cuda_scratch((void **)&bad, sizeof(int), "cross_entropy_bwd", err))) return rc;
    k_bad_targets<<<1, 1024, 0, mg_cuda_stream()>>>((const int32_t *)a->in[2], T, n->attrs.xent.ignore_index, Vt, bad);
    if (T)
        k_xent_bwd<<<(unsigned)T, NT, 0, mg_cuda_stream()>>>(
            (const float *)a->in[0], (const float *)a->in[1], (const int32_t *)a->in[2], (const float *)a->in[3],
            (const float *)a->in[4], (float *)a->out[0], V, n->attrs.xent.vocab_offset, n->attrs.xent.ignore_index);
    rc = mg_cuda_check_launch("cross_entropy_bwd", err);
    if (!rc) rc = check_targets(n, bad, Vt, err);
    mg_cuda_scratch_free(bad);
    return rc;
}

/* ---- vocab-parallel pieces ------------------------------------------------------------- */
__global__ void k_vp_max(const float *__restrict__ x, float *m, int64_t V) {
    __shared__ float sh[32];
    float v = row_max(x + blockIdx.x * V, V, sh);
    if (threadIdx.x == 0) m[blockIdx.x] = v;
}

extern "C" int mg_cuda_xent_vp_max(const mg_kernel_args *a, mg_error *err) {
    int64_t V, T;
    int rc = rows_of(a->node->in[0], &V, &T, "xent_vp_max", err);
    if (rc || !T) return rc;
    k_vp_max<<<(unsigned)T, NT, 0, mg_cuda_stream()>>>((const float *)a->in[0], (float *)a->out[0], V);
    return mg_cuda_check_launch("xent_vp_max", err);
}

__global__ void k_vp_parts(const float *__restrict__ x, const int32_t *__restrict__ tg, const float *__restrict__ m,
                           float *st, int64_t V, int64_t off) {
    __shared__ double sh[32];
    int64_t t = blockIdx.x;
    const float *xr = x + t * V;
    float mt = m[t];
    double s = 0;
    for (int64_t j = threadIdx.x; j < V; j += blockDim.x) s += expf(xr[j] - mt);
    s = mg_block_sum(s, sh);
    if (threadIdx.x == 0) {
        int64_t col = (int64_t)tg[t] - off;
        st[2 * t] = (float)s;
        st[2 * t + 1] = (col >= 0 && col < V) ? xr[col] : 0.0f;
    }
}

extern "C" int mg_cuda_xent_vp_parts(const mg_kernel_args *a, mg_error *err) {
    int64_t V, T;
    int rc = rows_of(a->node->in[0], &V, &T, "xent_vp_parts", err);
    if (rc || !T) return rc;
    k_vp_parts<<<(unsigned)T, NT, 0, mg_cuda_stream()>>>((const float *)a->in[0], (const int32_t *)a->in[1],
                                                        (const float *)a->in[2], (float *)a->out[0], V,
                                                        a->node->attrs.xent.vocab_offset);
    return mg_cuda_check_launch("xent_vp_parts", err);
}

__global__ void k_vp_terms(const float *__restrict__ st, const float *__restrict__ m, const int32_t *__restrict__ tg,
                           float *lse, double *term, int64_t T, int32_t ign) {
    MG_GRID_STRIDE(t, T) {
        double l = (double)m[t] + log((double)st[2 * t]);
        lse[t] = (float)l;
        bool ok = tg[t] != ign;
        term[t] = ok ? l - (double)st[2 * t + 1] : 0.0;
    }
}

extern "C" int mg_cuda_xent_vp_loss(const mg_kernel_args *a, mg_error *err) {
    const mg_node *n = a->node;
    int64_t T = mg_numel(n->in[2]);
    xent_scratch s;
    int rc = scratch_tokens(&s, T, "xent_vp_loss", err);
    if (rc) return rc;
    if (T)
        k_vp_terms<<<mg_cuda_blocks(T, NT), NT, 0, mg_cuda_stream()>>>(
            (const float *)a->in[0], (const float *)a->in[1], (const int32_t *)a->in[2], (float *)a->out[1], s.term,
            T, n->attrs.xent.ignore_index);
    k_mean_terms<<<1, 1024, 0, mg_cuda_stream()>>>(s.term, (const float *)a->in[3], (float *)a->out[0], T);
    rc = mg_cuda_check_launch("xent_vp_loss", err);
    mg_cuda_scratch_free(s.mem);
    return rc;
}

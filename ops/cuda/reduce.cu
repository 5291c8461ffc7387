/* sum / mean over one dimension or all, and sumsq over any number of tensors
 * (ops/reduce.c). Double accumulation in a fixed order (partial sums per chunk,
 * then the partials in chunk order): deterministic, no atomics. */
#include "ops/cuda/cuda_common.h"

#define NT 256
#define CHUNK 8192 /* elements per partial sum of a long reduction */

/* x viewed as [outer, len, inner]; one thread per (o, i) (inner >= 32: coalesced). */
__global__ void k_reduce_cols(const float *__restrict__ x, float *y, int64_t outer, int64_t len, int64_t inner,
                              double scale) {
    MG_GRID_STRIDE(oi, outer * inner) {
        int64_t o = oi / inner, i = oi - o * inner;
        const float *p = x + o * len * inner + i;
        double acc = 0;
        for (int64_t l = 0; l < len; l++) acc += p[l * inner];
        y[oi] = (float)(acc * scale);
    }
}

/* Partial sums of contiguous rows of length len (inner == 1): part[o * nch + c]. */
/* mode 0: the values, 1: their squares, 2: 1 for each zero (sumsq's count of zeros) */
__global__ void k_reduce_rows_part(const float *__restrict__ x, double *part, int64_t len, int64_t nch, int mode) {
    __shared__ double sh[32];
    int64_t o = blockIdx.y, c = blockIdx.x;
    const float *p = x + o * len;
    int64_t b = c * CHUNK, e = min(len, b + CHUNK);
    double acc = 0;
    for (int64_t j = b + threadIdx.x; j < e; j += blockDim.x) acc += mode == 1 ? (double)p[j] * p[j] : mode == 2 ? (double)(p[j] == 0.0f) : (double)p[j];
    acc = mg_block_sum(acc, sh);
    if (threadIdx.x == 0) part[o * nch + c] = acc;
}

__global__ void k_reduce_final(const double *__restrict__ part, float *y, int64_t outer, int64_t nch, double scale) {
    MG_GRID_STRIDE(o, outer) {
        double acc = 0;
        for (int64_t c = 0; c < nch; c++) acc += part[o * nch + c];
        y[o] = (float)(acc * scale);
    }
}

static int reduce(const mg_kernel_args *a, bool mean, mg_error *err) {
    const mg_node *n = a->node;
    const mg_tensor *x = n->in[0];
    int d = n->attrs.axis.dim;
    int64_t outer, len, inner;
    if (d == MG_ALL_AXES) {
        outer = 1;
        len = mg_numel(x);
        inner = 1;
    } else {
        outer = mg_dims_prod(x->shape, 0, d);
        len = x->shape[d];
        inner = mg_dims_prod(x->shape, d + 1, x->ndim);
    }
    double scale = mean ? 1.0 / (double)len : 1.0;
    const char *what = mg_op_name(n->op);
    if (outer * inner == 0) return MG_OK;
    if (inner > 1 || len < 4 * NT) {
        k_reduce_cols<<<mg_cuda_blocks(outer * inner, NT), NT, 0, mg_cuda_stream()>>>(
            (const float *)a->in[0], (float *)a->out[0], outer, len, inner, scale);
        return mg_cuda_check_launch(what, err);
    }
    int64_t nch = (len + CHUNK - 1) / CHUNK;
    if (outer > 65535 || nch > INT32_MAX) return mg_error_set(err, MG_ERR_UNSUPPORTED, "%s: too large", what);
    double *part;
    int rc = mg_cuda_scratch((void **)&part, (size_t)(outer * nch) * sizeof(double), what, err);
    if (rc) return rc;
    k_reduce_rows_part<<<dim3((unsigned)nch, (unsigned)outer), NT, 0, mg_cuda_stream()>>>((const float *)a->in[0], part,
                                                                                          len, nch, 0);
    k_reduce_final<<<mg_cuda_blocks(outer, NT), NT, 0, mg_cuda_stream()>>>(part, (float *)a->out[0], outer, nch, scale);
    rc = mg_cuda_check_launch(what, err);
    mg_cuda_scratch_free(part);
    return rc;
}

extern "C" int mg_cuda_sum(const mg_kernel_args *a, mg_error *err) { return reduce(a, false, err); }
extern "C" int mg_cuda_mean(const mg_kernel_args *a, mg_error *err) { return reduce(a, true, err); }

/* sumsq: every input's chunks into one partial array (inputs in order), then one sum. */
extern "C" int mg_cuda_sumsq(const mg_kernel_args *a, mg_error *err) {
    const mg_node *n = a->node;
    int64_t total = 0;
    for (int k = 0; k < n->n_in; k++) total += (mg_numel(n->in[k]) + CHUNK - 1) / CHUNK;
    double *part;
    int rc = mg_cuda_scratch((void **)&part, (size_t)(total ? total : 1) * sizeof(double), "sumsq", err);
    if (rc) return rc;
    int64_t at = 0;
    for (int k = 0; k < n->n_in; k++) {
        int64_t len = mg_numel(n->in[k]), nch = (len + CHUNK - 1) / CHUNK;
        if (nch == 0) continue;
        k_reduce_rows_part<<<dim3((unsigned)nch, 1), NT, 0, mg_cuda_stream()>>>((const float *)a->in[k], part + at, len,
                                                                                nch, n->attrs.sumsq.zeros ? 2 : 1);
        at += nch;
    }
    k_reduce_final<<<1, 1, 0, mg_cuda_stream()>>>(part, (float *)a->out[0], 1, total, 1.0);
    rc = mg_cuda_check_launch("sumsq", err);
    mg_cuda_scratch_free(part);
    return rc;
}

/* Data movement ops (ops/shape.c): reshape and slice (copies unless views in place), transpose (a
 * gather kernel), split / concat / slice / pad as pitched 2-D copies (one per part),
 * zeros as a memset, recompute_gate as a copy. All dtypes and storages: only element sizes matter (a concat
 * of parts stored differently converts them, ops/cuda/convert.cu). */
#include <string.h>

#include "ops/cuda/cuda_common.h"

static size_t bytes_of(const mg_tensor *t) { return mg_tensor_bytes(t); /* in its storage */ }

extern "C" int mg_cuda_zeros(const mg_kernel_args *a, mg_error *err) {
    size_t b = bytes_of(a->node->out[0]);
    if (!b) return MG_OK;
    return mg_cuda_check(cudaMemsetAsync(a->out[0], 0, b, mg_cuda_stream()), "zeros", err);
}

extern "C" int mg_cuda_reshape(const mg_kernel_args *a, mg_error *err) {
    size_t b = bytes_of(a->node->out[0]);
    if (!b || a->out[0] == a->in[0]) return MG_OK;
    return mg_cuda_check(cudaMemcpyAsync(a->out[0], a->in[0], b, cudaMemcpyDeviceToDevice, mg_cuda_stream()), "reshape",
                         err);
}

/* recompute_gate: a copy of its first input; the other inputs only order it (ops/recompute_gate.c) */
extern "C" int mg_cuda_recompute_gate(const mg_kernel_args *a, mg_error *err) {
    size_t b = bytes_of(a->node->in[0]);
    if (!b || a->out[0] == a->in[0]) return MG_OK;
    return mg_cuda_check(cudaMemcpyAsync(a->out[0], a->in[0], b, cudaMemcpyDeviceToDevice, mg_cuda_stream()),
                         "recompute_gate", err);
}

/* rows x width bytes, each from src (pitch sp) to dst (pitch dp) */
static int copy2d(void *dst, size_t dp, const void *src, size_t sp, size_t width, size_t rows, const char *what,
                  mg_error *err) {
    if (!width || !rows) return MG_OK;
    return mg_cuda_check(cudaMemcpy2DAsync(dst, dp, src, sp, width, rows, cudaMemcpyDeviceToDevice, mg_cuda_stream()),
                         what, err);
}

static void outer_inner(const mg_tensor *t, int dim, int64_t *outer, int64_t *inner) {
    *outer = mg_dims_prod(t->shape, 0, dim);
    *inner = mg_dims_prod(t->shape, dim + 1, t->ndim);
}

extern "C" int mg_cuda_split(const mg_kernel_args *a, mg_error *err) {
    const mg_tensor *x = a->node->in[0];
    const mg_attr_split *s = &a->node->attrs.split;
    size_t es = mg_tensor_esize(x);
    int64_t outer, inner;
    outer_inner(x, s->dim, &outer, &inner);
    size_t row = (size_t)(x->shape[s->dim] * inner) * es, off = 0;
    for (int i = 0; i < s->n; i++) {
        size_t blk = (size_t)(s->sizes[i] * inner) * es;
        int rc = copy2d(a->out[i], blk, (const char *)a->in[0] + off, row, blk, (size_t)outer, "split", err);
        if (rc) return rc;
        off += blk;
    }
    return MG_OK;
}

extern "C" int mg_cuda_concat(const mg_kernel_args *a, mg_error *err) {
    const mg_node *nd = a->node;
    const mg_tensor *y = nd->out[0];
    int d = nd->attrs.axis.dim;
    size_t es = mg_tensor_esize(y);
    for (int i = 0; i < nd->n_in; i++) /* (graph/precision.c stores a concat of mixed parts in f32) */
        if (mg_tensor_storage(nd->in[i]) != mg_tensor_storage(y))
            return mg_cuda_concat_converting(a, err);
    int64_t outer, inner;
    outer_inner(y, d, &outer, &inner);
    size_t row = (size_t)(y->shape[d] * inner) * es, off = 0;
    for (int i = 0; i < nd->n_in; i++) {
        size_t blk = (size_t)(nd->in[i]->shape[d] * inner) * es;
        if ((char *)a->out[0] + off == a->in[i]) { /* placed there by the memory plan (ops/shape.c concat_part) */
            off += blk;
            continue;
        }
        int rc = copy2d((char *)a->out[0] + off, row, a->in[i], blk, blk, (size_t)outer, "concat", err);
        if (rc) return rc;
        off += blk;
    }
    return MG_OK;
}

extern "C" int mg_cuda_slice(const mg_kernel_args *a, mg_error *err) {
    const mg_tensor *x = a->node->in[0];
    const mg_attr_slice *s = &a->node->attrs.slice;
    size_t es = mg_tensor_esize(x);
    int64_t outer, inner;
    outer_inner(x, s->dim, &outer, &inner);
    size_t src_blk = (size_t)(x->shape[s->dim] * inner) * es, dst_blk = (size_t)(s->len * inner) * es;
    const char *src = (const char *)a->in[0] + (size_t)(s->start * inner) * es;
    if (a->out[0] == src) return MG_OK; /* a view (ops/shape.c slice_view): the bytes are in place */
    return copy2d(a->out[0], dst_blk, src, src_blk, dst_blk, (size_t)outer, "slice", err);
}

extern "C" int mg_cuda_pad(const mg_kernel_args *a, mg_error *err) {
    const mg_tensor *x = a->node->in[0];
    const mg_attr_slice *s = &a->node->attrs.slice;
    size_t es = mg_tensor_esize(x);
    int64_t outer, inner;
    outer_inner(x, s->dim, &outer, &inner);
    size_t src_blk = (size_t)(x->shape[s->dim] * inner) * es, dst_blk = (size_t)(s->len * inner) * es;
    size_t head = (size_t)(s->start * inner) * es;
    int rc = mg_cuda_check(cudaMemsetAsync(a->out[0], 0, dst_blk * (size_t)outer, mg_cuda_stream()), "pad", err);
    return rc ? rc : copy2d((char *)a->out[0] + head, dst_blk, a->in[0], src_blk, src_blk, (size_t)outer, "pad", err);
}

/* Output element i: unravel over the output shape, dot with the input strides of the
 * permuted dims. */
typedef struct perm_map {
    int n;
    int64_t shape[MG_MAX_DIMS], istride[MG_MAX_DIMS];
} perm_map;

template <typename T>
__global__ void k_transpose(const T *__restrict__ x, T *y, int64_t n, perm_map m) {
    MG_GRID_STRIDE(i, n) {
        int64_t r = i, off = 0;
        for (int d = m.n - 1; d >= 0; d--) {
            off += (r % m.shape[d]) * m.istride[d];
            r /= m.shape[d];
        }
        y[i] = x[off];
    }
}

extern "C" int mg_cuda_transpose(const mg_kernel_args *a, mg_error *err) {
    const mg_tensor *x = a->node->in[0];
    const int *perm = a->node->attrs.transpose.perm;
    int64_t n = mg_numel(x);
    if (n == 0) return MG_OK;
    int64_t st[MG_MAX_DIMS];
    st[x->ndim - 1] = 1;
    for (int i = x->ndim - 2; i >= 0; i--) st[i] = st[i + 1] * x->shape[i + 1];
    perm_map m;
    memset(&m, 0, sizeof m);
    m.n = x->ndim;
    for (int i = 0; i < x->ndim; i++) {
        m.shape[i] = x->shape[perm[i]];
        m.istride[i] = st[perm[i]];
    }
    unsigned blocks = mg_cuda_blocks(n, MG_CUDA_THREADS);
    switch (mg_tensor_esize(x)) {
    case 4: k_transpose<uint32_t><<<blocks, MG_CUDA_THREADS, 0, mg_cuda_stream()>>>((const uint32_t *)a->in[0], (uint32_t *)a->out[0], n, m); break;
    case 2: k_transpose<uint16_t><<<blocks, MG_CUDA_THREADS, 0, mg_cuda_stream()>>>((const uint16_t *)a->in[0], (uint16_t *)a->out[0], n, m); break;
    case 1: k_transpose<uint8_t><<<blocks, MG_CUDA_THREADS, 0, mg_cuda_stream()>>>((const uint8_t *)a->in[0], (uint8_t *)a->out[0], n, m); break;
    default: return mg_error_set(err, MG_ERR_UNSUPPORTED, "transpose: element size %zu", mg_tensor_esize(x));
    }
    return mg_cuda_check_launch("transpose", err);
}

/* shift (ops/shift.c): element (o, i, k) of [outer, n, inner] takes (o, i + by, k), or the
 * fill bits, elements of 2 or 4 bytes */
template <typename T>
__global__ void k_shift(const T *__restrict__ x, T *y, int64_t outer, int64_t n, int64_t inner, int64_t by, T fill) {
    MG_GRID_STRIDE(e, outer * n * inner) {
        int64_t k = e % inner, i = (e / inner) % n, o = e / (inner * n), j = i + by;
        y[e] = j >= 0 && j < n ? x[(o * n + j) * inner + k] : fill;
    }
}

extern "C" int mg_cuda_shift(const mg_kernel_args *a, mg_error *err) {
    const mg_tensor *x = a->node->in[0];
    const mg_attr_shift *s = &a->node->attrs.shift;
    int64_t n = x->shape[s->dim], inner = 1, outer = 1;
    for (int d = s->dim + 1; d < x->ndim; d++) inner *= x->shape[d];
    for (int d = 0; d < s->dim; d++) outer *= x->shape[d];
    int64_t ne = outer * n * inner;
    if (!ne) return MG_OK;
    unsigned blocks = mg_cuda_blocks(ne, MG_CUDA_THREADS);
    if (mg_dtype_size(x->dtype) == 4) {
        uint32_t fill;
        if (x->dtype == MG_I32) {
            int32_t v = (int32_t)s->fill;
            memcpy(&fill, &v, 4);
        } else {
            float v = (float)s->fill;
            memcpy(&fill, &v, 4);
        }
        k_shift<uint32_t><<<blocks, MG_CUDA_THREADS, 0, mg_cuda_stream()>>>((const uint32_t *)a->in[0],
                                                                           (uint32_t *)a->out[0], outer, n, inner,
                                                                           s->by, fill);
    } else {
        k_shift<uint16_t><<<blocks, MG_CUDA_THREADS, 0, mg_cuda_stream()>>>((const uint16_t *)a->in[0],
                                                                           (uint16_t *)a->out[0], outer, n, inner,
                                                                           s->by, (uint16_t)0);
    }
    return mg_cuda_check_launch("shift", err);
}

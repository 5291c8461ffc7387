/* Narrow storage on the device: conversions with the roundings of ops/narrow.h (the CPU's,
 * bit for bit), the converting wrapper every op without MG_OPF_STORAGE runs through (as
 * ops/registry.c does on the CPU: the op's f32 kernel on f32 copies of narrow inputs, its
 * outputs rounded into their storage), the cast op, and a concat of parts stored
 * differently. Scratch is stream-ordered (mg_cuda_scratch). */
#include "ops/cuda/cuda_common.h"
#include "ops/narrow.h"

/* one element through f32 */
__device__ static inline float load_as_f32(const void *p, int dt, int64_t i) {
    const mg_narrow f16 = MG_NARROW_F16, e4 = MG_NARROW_E4M3, e5 = MG_NARROW_E5M2;
    uint32_t u;
    switch (dt) {
    case MG_BF16: u = (uint32_t)((const uint16_t *)p)[i] << 16; break;
    case MG_F16: u = mg_narrow_widen(((const uint16_t *)p)[i], &f16); break;
    case MG_F8E4M3: u = mg_narrow_widen(((const uint8_t *)p)[i], &e4); break;
    case MG_F8E5M2: u = mg_narrow_widen(((const uint8_t *)p)[i], &e5); break;
    default: return ((const float *)p)[i];
    }
    return __uint_as_float(u);
}

__device__ static inline void store_from_f32(void *p, int dt, int64_t i, float x) {
    const mg_narrow f16 = MG_NARROW_F16, e4 = MG_NARROW_E4M3, e5 = MG_NARROW_E5M2;
    uint32_t u = __float_as_uint(x);
    switch (dt) {
    case MG_BF16: ((uint16_t *)p)[i] = mg_narrow_bf16(u); break;
    case MG_F16: ((uint16_t *)p)[i] = (uint16_t)mg_narrow_round(u, &f16); break;
    case MG_F8E4M3: ((uint8_t *)p)[i] = (uint8_t)mg_narrow_round(u, &e4); break;
    case MG_F8E5M2: ((uint8_t *)p)[i] = (uint8_t)mg_narrow_round(u, &e5); break;
    default: ((float *)p)[i] = x; break;
    }
}

__global__ static void k_convert(void *dst, int dt, const void *src, int st, int64_t n) {
    MG_GRID_STRIDE(i, n) store_from_f32(dst, dt, i, load_as_f32(src, st, i));
}

extern "C" int mg_cuda_convert(void *dst, mg_dtype dst_dt, const void *src, mg_dtype src_dt, int64_t n, mg_error *err) {
    if (n <= 0) return MG_OK;
    if (dst_dt == src_dt)
        return dst == src ? MG_OK
                          : mg_cuda_check(cudaMemcpyAsync(dst, src, (size_t)n * mg_dtype_size(dst_dt),
                                                          cudaMemcpyDeviceToDevice, mg_cuda_stream()),
                                          "convert", err);
    k_convert<<<mg_cuda_blocks(n, MG_CUDA_THREADS), MG_CUDA_THREADS, 0, mg_cuda_stream()>>>(dst, (int)dst_dt, src,
                                                                                           (int)src_dt, n);
    return mg_cuda_check_launch("convert", err);
}

static size_t f32_bytes(const mg_tensor *t) { return ((size_t)mg_numel(t) * sizeof(float) + 255) / 256 * 256; }

extern "C" int mg_cuda_converting(const mg_kernel_args *a, mg_error *err) {
    const mg_node *n = a->node;
    mg_kernel_fn k = mg_cuda_kernels[n->op];
    if (!mg_node_needs_convert(n)) return k(a, err);
    int np = n->n_in + n->n_out;
    size_t total = 0;
    for (int i = 0; i < np; i++) {
        const mg_tensor *t = i < n->n_in ? n->in[i] : n->out[i - n->n_in];
        if (mg_tensor_storage(t) != t->dtype) total += f32_bytes(t);
    }
    void *ptr[2 * MG_MAX_OUT + 64];
    if (np > (int)(sizeof ptr / sizeof *ptr))
        return mg_error_set(err, MG_ERR_UNSUPPORTED, "%s: %d tensors to convert", mg_op_name(n->op), np);
    char *s = NULL, *base;
    int rc = mg_cuda_scratch((void **)&s, total, "narrow storage", err);
    if (rc) return rc;
    base = s;
    for (int i = 0; i < n->n_in && !rc; i++) {
        const mg_tensor *t = n->in[i];
        ptr[i] = a->in[i];
        if (mg_tensor_storage(t) == t->dtype) continue;
        ptr[i] = s;
        s += f32_bytes(t);
        rc = mg_cuda_convert(ptr[i], MG_F32, a->in[i], mg_tensor_storage(t), mg_numel(t), err);
    }
    for (int o = 0; o < n->n_out && !rc; o++) {
        const mg_tensor *t = n->out[o];
        void **p = &ptr[n->n_in + o];
        *p = a->out[o];
        if (mg_tensor_storage(t) == t->dtype) continue;
        for (int i = 0; i < n->n_in; i++) /* an in-place update sees its input's copy */
            if (a->in[i] == a->out[o] && mg_tensor_storage(n->in[i]) == mg_tensor_storage(t)) *p = ptr[i];
        if (*p == a->out[o]) {
            *p = s;
            s += f32_bytes(t);
        }
    }
    if (!rc) {
        mg_kernel_args b = {n, ptr, ptr + n->n_in, a->info};
        rc = k(&b, err);
    }
    for (int o = 0; o < n->n_out && !rc; o++) {
        const mg_tensor *t = n->out[o];
        if (mg_tensor_storage(t) != t->dtype)
            rc = mg_cuda_convert(a->out[o], mg_tensor_storage(t), ptr[n->n_in + o], MG_F32, mg_numel(t), err);
    }
    mg_cuda_scratch_free(base);
    return rc;
}

extern "C" int mg_cuda_cast(const mg_kernel_args *a, mg_error *err) {
    const mg_node *n = a->node;
    return mg_cuda_convert(a->out[0], mg_tensor_storage(n->out[0]), a->in[0], mg_tensor_storage(n->in[0]),
                           mg_numel(n->in[0]), err);
}

/* concat along dim of parts stored otherwise than the output: row blocks converted one
 * part at a time (outer rows x the part's block) */
__global__ static void k_concat_part(void *dst, int dt, int64_t dst_row, int64_t at, const void *src, int st,
                                     int64_t blk, int64_t rows) {
    MG_GRID_STRIDE(i, rows * blk) {
        int64_t r = i / blk, c = i % blk;
        store_from_f32(dst, dt, r * dst_row + at + c, load_as_f32(src, st, i));
    }
}

extern "C" int mg_cuda_concat_converting(const mg_kernel_args *a, mg_error *err) {
    const mg_node *nd = a->node;
    const mg_tensor *y = nd->out[0];
    int d = nd->attrs.axis.dim;
    int64_t outer = mg_dims_prod(y->shape, 0, d), inner = mg_dims_prod(y->shape, d + 1, y->ndim);
    int64_t row = y->shape[d] * inner, at = 0;
    for (int i = 0; i < nd->n_in; i++) {
        int64_t blk = nd->in[i]->shape[d] * inner;
        if (blk * outer > 0)
            k_concat_part<<<mg_cuda_blocks(blk * outer, MG_CUDA_THREADS), MG_CUDA_THREADS, 0, mg_cuda_stream()>>>(
                a->out[0], (int)mg_tensor_storage(y), row, at, a->in[i], (int)mg_tensor_storage(nd->in[i]), blk, outer);
        int rc = mg_cuda_check_launch("concat", err);
        if (rc) return rc;
        at += blk;
    }
    return MG_OK;
}

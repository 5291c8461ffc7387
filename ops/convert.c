/* Conversions between f32 and the narrow float storage types (ops/convert.h): the
 * roundings of ops/narrow.h, which the CUDA kernels share, in loops. */
#include "ops/convert.h"

#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "ops/gemm.h"
#include "ops/narrow.h"
#include "ops/simd.h"

static const mg_narrow F16 = MG_NARROW_F16, E4M3 = MG_NARROW_E4M3, E5M2 = MG_NARROW_E5M2;

static inline uint32_t bits_of(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}
static inline float float_of(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

uint16_t mg_f16_round(float f) { return (uint16_t)mg_narrow_round(bits_of(f), &F16); }
float mg_f16_to_float(uint16_t h) { return float_of(mg_narrow_widen(h, &F16)); }

static const mg_narrow *f8_format(mg_dtype fmt) { return fmt == MG_F8E5M2 ? &E5M2 : &E4M3; }

uint8_t mg_f8_round(float f, mg_dtype fmt) { return (uint8_t)mg_narrow_round(bits_of(f), f8_format(fmt)); }
float mg_f8_to_float(uint8_t v, mg_dtype fmt) { return float_of(mg_narrow_widen(v, f8_format(fmt))); }

float mg_dtype_max(mg_dtype dt) {
    switch (dt) {
    case MG_BF16: return mg_bf16_to_float(0x7f7f);
    case MG_F16: return 65504.0f;
    case MG_F8E4M3: return 448.0f;
    case MG_F8E5M2: return 57344.0f;
    default: return FLT_MAX;
    }
}

float mg_round_to(float x, mg_dtype dt) {
    switch (dt) {
    case MG_BF16: return mg_bf16_to_float(mg_bf16_round(x));
    case MG_F16: return mg_f16_to_float(mg_f16_round(x));
    case MG_F8E4M3:
    case MG_F8E5M2: return mg_f8_to_float(mg_f8_round(x, dt), dt);
    default: return x;
    }
}

/* ---- the loops ------------------------------------------------------------------------------ */
MG_SIMD static void bf16_from_f32(uint16_t *restrict d, const float *restrict s, int64_t n) {
    for (int64_t i = 0; i < n; i++) d[i] = mg_bf16_round(s[i]);
}
MG_SIMD static void f32_from_bf16(float *restrict d, const uint16_t *restrict s, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        uint32_t u = (uint32_t)s[i] << 16;
        memcpy(&d[i], &u, sizeof u);
    }
}
static void f16_from_f32(uint16_t *d, const float *s, int64_t n) {
    for (int64_t i = 0; i < n; i++) d[i] = mg_f16_round(s[i]);
}
static void f32_from_f16(float *d, const uint16_t *s, int64_t n) {
    for (int64_t i = 0; i < n; i++) d[i] = mg_f16_to_float(s[i]);
}

/* one element through f32 (narrow -> narrow, rare: casts between storage types) */
static float load(const void *p, mg_dtype dt, int64_t i) {
    switch (dt) {
    case MG_BF16: return mg_bf16_to_float(((const uint16_t *)p)[i]);
    case MG_F16: return mg_f16_to_float(((const uint16_t *)p)[i]);
    case MG_F8E4M3:
    case MG_F8E5M2: return mg_f8_to_float(((const uint8_t *)p)[i], dt);
    default: return ((const float *)p)[i];
    }
}
static void store(void *p, mg_dtype dt, int64_t i, float x) {
    switch (dt) {
    case MG_BF16: ((uint16_t *)p)[i] = mg_bf16_round(x); break;
    case MG_F16: ((uint16_t *)p)[i] = mg_f16_round(x); break;
    case MG_F8E4M3:
    case MG_F8E5M2: ((uint8_t *)p)[i] = mg_f8_round(x, dt); break;
    default: ((float *)p)[i] = x; break;
    }
}

void mg_convert(void *dst, mg_dtype dst_dt, const void *src, mg_dtype src_dt, int64_t n) {
    if (dst_dt == src_dt) {
        if (dst != src) memmove(dst, src, (size_t)n * mg_dtype_size(dst_dt));
        return;
    }
    if (src_dt == MG_F32 && dst_dt == MG_BF16) return bf16_from_f32(dst, src, n);
    if (src_dt == MG_BF16 && dst_dt == MG_F32) return f32_from_bf16(dst, src, n);
    if (src_dt == MG_F32 && dst_dt == MG_F16) return f16_from_f32(dst, src, n);
    if (src_dt == MG_F16 && dst_dt == MG_F32) return f32_from_f16(dst, src, n);
    /* same-size in place would overwrite what it reads only with the element it has read */
    for (int64_t i = 0; i < n; i++) store(dst, dst_dt, i, load(src, src_dt, i));
}

/* ---- the cast op ------------------------------------------------------------------------------ */
#include "ops/op.h"
#include "ops/shard.h"

static int infer_cast(const mg_node *n, mg_tensor_desc *out, mg_error *err) {
    const mg_tensor *x = n->in[0];
    mg_dtype to = n->attrs.cast.to;
    if (x->dtype != MG_F32) return mg_shape_error(err, n, "input must be f32 (a real-valued tensor)");
    if (to != MG_F32 && !mg_dtype_is_low(to)) return mg_shape_error(err, n, "target %s is not a float storage", mg_dtype_name(to));
    mg_desc_of(x, &out[0]);
    out[0].storage = to;
    return 1;
}

static int cast_cpu(const mg_kernel_args *a, mg_error *err) {
    (void)err;
    const mg_node *n = a->node;
    mg_convert(a->out[0], mg_tensor_storage(n->out[0]), a->in[0], mg_tensor_storage(n->in[0]), mg_numel(n->in[0]));
    return MG_OK;
}

static int cast_grad(mg_graph *g, const mg_node *n, mg_tensor *const *dout, const bool *need, mg_tensor **din) {
    (void)g, (void)n;
    if (need[0]) din[0] = dout[0]; /* straight through */
    return MG_OK;
}

const mg_op_def mg_opdef_CAST = {"cast", 1, 1, MG_OPF_STORAGE, infer_cast, cast_grad, NULL, cast_cpu, NULL,
                                 .shard = mg_shard_rule_pointwise};

mg_tensor *mg_cast(mg_graph *g, mg_tensor *x, mg_dtype to) {
    if (!x) return NULL;
    mg_attrs at = {.cast = {to}};
    mg_node *n = mg_node_new(g, MG_OP_CAST, &at, 1, &x, NULL);
    return n ? n->out[0] : NULL;
}

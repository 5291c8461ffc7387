/* Activations: gelu (tanh approximation, as GPT-2 and Megatron's fused bias-GELU),
 * gelu_erf (the exact x Φ(x), torch's F.gelu: Megatron's unfused MLP), silu, swiglu
 * (Megatron's gated layout: x [..., 2F] -> silu(x[..., :F]) * x[..., F:]), squared_relu
 * (Megatron's --squared-relu: relu(x)², Nemotron), and their fused backward ops
 * gelu_bwd(dy, x), gelu_erf_bwd(dy, x), silu_bwd(dy, x), swiglu_bwd(dy, x),
 * squared_relu_bwd(dy, x) -> dx. */
#include <math.h>

#include "ops/fastmath.h"
#include "ops/shard.h"
#include "ops/op.h"
#include "ops/simd.h"

#define GELU_K 0.7978845608028654f /* sqrt(2 / pi) */
#define GELU_C 0.044715f

/* 0.5 x (1 + tanh(u)) = x · sigmoid(2u), u = K (x + C x³): one exp (mg_expf, which
 * vectorises; ops/fastmath.h) instead of
 * tanhf (glibc's is several times slower) and no cancellation in 1 + tanh(u) for
 * negative x. d/dx = s + 2 x s (1 - s) u',  s = sigmoid(2u), u' = K (1 + 3 C x²). */
static inline float gelu_f(float x) {
    float u = GELU_K * (x + GELU_C * x * x * x);
    return x / (1.0f + mg_expf(-2.0f * u));
}
static inline float gelu_df(float x) {
    float x2 = x * x, u = GELU_K * (x + GELU_C * x2 * x);
    float s = 1.0f / (1.0f + mg_expf(-2.0f * u));
    return s + 2.0f * x * s * (1.0f - s) * GELU_K * (1.0f + 3.0f * GELU_C * x2);
}
static inline float sigmoid_f(float x) { return 1.0f / (1.0f + mg_expf(-x)); }
/* x Φ(x) = x (1 + erf(x / sqrt 2)) / 2, and d/dx = Φ(x) + x φ(x), in double (libm's erf
 * does not vectorise either way), so that CPU and CUDA agree to a rounding of the float
 * result whatever their erff. */
#define GELU_RSQRT2 0.70710678118654752440
#define GELU_RSQRT2PI 0.39894228040143267794 /* 1 / sqrt(2 pi) */
static inline float gelu_erf_f(float x) { return (float)(0.5 * x * (1.0 + erf(x * GELU_RSQRT2))); }
static inline float gelu_erf_df(float x) {
    double d = x;
    return (float)(0.5 * (1.0 + erf(d * GELU_RSQRT2)) + d * GELU_RSQRT2PI * exp(-0.5 * d * d));
}

static void cost_act(const mg_node *n, double *flops, double *bytes, double per_elem) {
    double b = 0;
    for (int i = 0; i < n->n_in; i++) b += (double)mg_numel(n->in[i]);
    for (int i = 0; i < n->n_out; i++) b += (double)mg_numel(n->out[i]);
    *flops = per_elem * (double)mg_numel(n->in[n->n_in - 1]);
    *bytes = 4.0 * b;
}
static void cost_fwd(const mg_node *n, double *flops, double *bytes) { cost_act(n, flops, bytes, 8.0); }
static void cost_bwd(const mg_node *n, double *flops, double *bytes) { cost_act(n, flops, bytes, 16.0); }

/* ---- shape rules ------------------------------------------------------------------ */
static int infer_unary(const mg_node *n, mg_tensor_desc *out, mg_error *err) {
    if (n->in[0]->dtype != MG_F32) return mg_shape_error(err, n, "input must be f32");
    mg_desc_of(n->in[0], &out[0]);
    return 1;
}

/* dy, x -> dx (dy shaped like x) */
static int infer_unary_bwd(const mg_node *n, mg_tensor_desc *out, mg_error *err) {
    const mg_tensor *dy = n->in[0], *x = n->in[1];
    if (dy->dtype != MG_F32 || x->dtype != MG_F32) return mg_shape_error(err, n, "inputs must be f32");
    if (!mg_same_shape(dy, x)) return mg_shape_error(err, n, "dy must have x's shape");
    mg_desc_of(x, &out[0]);
    return 1;
}

static int infer_swiglu(const mg_node *n, mg_tensor_desc *out, mg_error *err) {
    const mg_tensor *x = n->in[0];
    if (x->dtype != MG_F32) return mg_shape_error(err, n, "input must be f32");
    int64_t last = x->shape[x->ndim - 1];
    if (last < 2 || last % 2) return mg_shape_error(err, n, "last dimension must be even (gate and value halves)");
    mg_desc_of(x, &out[0]);
    out[0].shape[x->ndim - 1] = last / 2;
    return 1;
}

static int infer_swiglu_bwd(const mg_node *n, mg_tensor_desc *out, mg_error *err) {
    const mg_tensor *dy = n->in[0], *x = n->in[1];
    if (dy->dtype != MG_F32 || x->dtype != MG_F32) return mg_shape_error(err, n, "inputs must be f32");
    int64_t last = x->shape[x->ndim - 1];
    bool ok = last >= 2 && last % 2 == 0 && dy->ndim == x->ndim && dy->shape[x->ndim - 1] * 2 == last;
    for (int i = 0; ok && i < x->ndim - 1; i++) ok = dy->shape[i] == x->shape[i];
    if (!ok) return mg_shape_error(err, n, "need x [..., 2F] and dy [..., F]");
    mg_desc_of(x, &out[0]);
    return 1;
}

/* ---- kernels ---------------------------------------------------------------------- */
MG_SIMD static int gelu_cpu(const mg_kernel_args *a, mg_error *err) {
    (void)err;
    const float *x = a->in[0];
    float *y = a->out[0];
    int64_t ne = mg_numel(a->node->out[0]);
    for (int64_t i = 0; i < ne; i++) y[i] = gelu_f(x[i]);
    return MG_OK;
}

MG_SIMD static int gelu_bwd_cpu(const mg_kernel_args *a, mg_error *err) {
    (void)err;
    const float *dy = a->in[0], *x = a->in[1];
    float *dx = a->out[0];
    int64_t ne = mg_numel(a->node->out[0]);
    for (int64_t i = 0; i < ne; i++) dx[i] = dy[i] * gelu_df(x[i]);
    return MG_OK;
}

static int gelu_erf_cpu(const mg_kernel_args *a, mg_error *err) {
    (void)err;
    const float *x = a->in[0];
    float *y = a->out[0];
    int64_t ne = mg_numel(a->node->out[0]);
    for (int64_t i = 0; i < ne; i++) y[i] = gelu_erf_f(x[i]);
    return MG_OK;
}

static int gelu_erf_bwd_cpu(const mg_kernel_args *a, mg_error *err) {
    (void)err;
    const float *dy = a->in[0], *x = a->in[1];
    float *dx = a->out[0];
    int64_t ne = mg_numel(a->node->out[0]);
    for (int64_t i = 0; i < ne; i++) dx[i] = dy[i] * gelu_erf_df(x[i]);
    return MG_OK;
}

MG_SIMD static int silu_cpu(const mg_kernel_args *a, mg_error *err) {
    (void)err;
    const float *x = a->in[0];
    float *y = a->out[0];
    int64_t ne = mg_numel(a->node->out[0]);
    for (int64_t i = 0; i < ne; i++) y[i] = x[i] * sigmoid_f(x[i]);
    return MG_OK;
}

MG_SIMD static int silu_bwd_cpu(const mg_kernel_args *a, mg_error *err) {
    (void)err;
    const float *dy = a->in[0], *x = a->in[1];
    float *dx = a->out[0];
    int64_t ne = mg_numel(a->node->out[0]);
    for (int64_t i = 0; i < ne; i++) {
        float s = sigmoid_f(x[i]);
        dx[i] = dy[i] * s * (1.0f + x[i] * (1.0f - s));
    }
    return MG_OK;
}

/* relu(x)² and its derivative 2 relu(x) (0 at x = 0 from both sides) */
MG_SIMD static int squared_relu_cpu(const mg_kernel_args *a, mg_error *err) {
    (void)err;
    const float *x = a->in[0];
    float *y = a->out[0];
    int64_t ne = mg_numel(a->node->out[0]);
    for (int64_t i = 0; i < ne; i++) {
        float r = x[i] > 0.0f ? x[i] : 0.0f;
        y[i] = r * r;
    }
    return MG_OK;
}

MG_SIMD static int squared_relu_bwd_cpu(const mg_kernel_args *a, mg_error *err) {
    (void)err;
    const float *dy = a->in[0], *x = a->in[1];
    float *dx = a->out[0];
    int64_t ne = mg_numel(a->node->out[0]);
    for (int64_t i = 0; i < ne; i++) dx[i] = x[i] > 0.0f ? 2.0f * x[i] * dy[i] : 0.0f;
    return MG_OK;
}

MG_SIMD static int swiglu_cpu(const mg_kernel_args *a, mg_error *err) {
    (void)err;
    const mg_tensor *xt = a->node->in[0];
    const float *x = a->in[0];
    float *y = a->out[0];
    int64_t F = xt->shape[xt->ndim - 1] / 2, rows = mg_numel(xt) / (2 * F);
    for (int64_t r = 0; r < rows; r++) {
        const float *gate = x + r * 2 * F, *val = gate + F;
        float *yr = y + r * F;
        for (int64_t j = 0; j < F; j++) yr[j] = gate[j] * sigmoid_f(gate[j]) * val[j];
    }
    return MG_OK;
}

MG_SIMD static int swiglu_bwd_cpu(const mg_kernel_args *a, mg_error *err) {
    (void)err;
    const mg_tensor *xt = a->node->in[1];
    const float *dy = a->in[0], *x = a->in[1];
    float *dx = a->out[0];
    int64_t F = xt->shape[xt->ndim - 1] / 2, rows = mg_numel(xt) / (2 * F);
    for (int64_t r = 0; r < rows; r++) {
        const float *gate = x + r * 2 * F, *val = gate + F, *dyr = dy + r * F;
        float *dgate = dx + r * 2 * F, *dval = dgate + F;
        for (int64_t j = 0; j < F; j++) {
            float s = sigmoid_f(gate[j]), silu = gate[j] * s;
            dgate[j] = dyr[j] * val[j] * s * (1.0f + gate[j] * (1.0f - s));
            dval[j] = dyr[j] * silu;
        }
    }
    return MG_OK;
}

/* ---- gradient rules: one fused bwd node reading dy and the forward input ---------- */
static int act_grad(mg_graph *g, const mg_node *n, mg_tensor *const *dout, const bool *need, mg_tensor **din,
                    mg_op bwd) {
    if (!need[0] || !dout[0]) return MG_OK;
    mg_tensor *in[2] = {dout[0], n->in[0]};
    mg_node *b = mg_node_new(g, bwd, NULL, 2, in, NULL);
    if (!b) return mg_graph_error(g)->code;
    din[0] = b->out[0];
    return MG_OK;
}
static int gelu_grad(mg_graph *g, const mg_node *n, mg_tensor *const *dout, const bool *need, mg_tensor **din) {
    return act_grad(g, n, dout, need, din, MG_OP_GELU_BWD);
}
static int gelu_erf_grad(mg_graph *g, const mg_node *n, mg_tensor *const *dout, const bool *need, mg_tensor **din) {
    return act_grad(g, n, dout, need, din, MG_OP_GELU_ERF_BWD);
}
static int silu_grad(mg_graph *g, const mg_node *n, mg_tensor *const *dout, const bool *need, mg_tensor **din) {
    return act_grad(g, n, dout, need, din, MG_OP_SILU_BWD);
}
static int swiglu_grad(mg_graph *g, const mg_node *n, mg_tensor *const *dout, const bool *need, mg_tensor **din) {
    return act_grad(g, n, dout, need, din, MG_OP_SWIGLU_BWD);
}
static int squared_relu_grad(mg_graph *g, const mg_node *n, mg_tensor *const *dout, const bool *need,
                             mg_tensor **din) {
    return act_grad(g, n, dout, need, din, MG_OP_SQUARED_RELU_BWD);
}

const mg_op_def mg_opdef_GELU = {"gelu", 1, 1, 0, infer_unary, gelu_grad, cost_fwd, gelu_cpu, NULL, .shard = mg_shard_rule_pointwise};
const mg_op_def mg_opdef_SILU = {"silu", 1, 1, 0, infer_unary, silu_grad, cost_fwd, silu_cpu, NULL, .shard = mg_shard_rule_pointwise};
const mg_op_def mg_opdef_SWIGLU = {"swiglu", 1, 1, 0, infer_swiglu, swiglu_grad, cost_fwd, swiglu_cpu, NULL, .shard = mg_shard_rule_rowwise};
const mg_op_def mg_opdef_GELU_BWD = {"gelu_bwd", 2, 2, MG_OPF_NO_GRAD, infer_unary_bwd, NULL, cost_bwd, gelu_bwd_cpu,
                                     NULL, .shard = mg_shard_rule_pointwise};
const mg_op_def mg_opdef_SILU_BWD = {"silu_bwd", 2, 2, MG_OPF_NO_GRAD, infer_unary_bwd, NULL, cost_bwd, silu_bwd_cpu,
                                     NULL, .shard = mg_shard_rule_pointwise};
const mg_op_def mg_opdef_SWIGLU_BWD = {"swiglu_bwd", 2, 2, MG_OPF_NO_GRAD, infer_swiglu_bwd, NULL, cost_bwd,
                                       swiglu_bwd_cpu, NULL, .shard = mg_shard_rule_rowwise};
const mg_op_def mg_opdef_SQUARED_RELU = {"squared_relu", 1, 1, 0, infer_unary, squared_relu_grad, cost_fwd,
                                         squared_relu_cpu, NULL, .shard = mg_shard_rule_pointwise};
const mg_op_def mg_opdef_SQUARED_RELU_BWD = {"squared_relu_bwd", 2, 2, MG_OPF_NO_GRAD, infer_unary_bwd, NULL, cost_bwd,
                                             squared_relu_bwd_cpu, NULL, .shard = mg_shard_rule_pointwise};
const mg_op_def mg_opdef_GELU_ERF = {"gelu_erf", 1, 1, 0, infer_unary, gelu_erf_grad, cost_fwd, gelu_erf_cpu, NULL,
                                     .shard = mg_shard_rule_pointwise};
const mg_op_def mg_opdef_GELU_ERF_BWD = {"gelu_erf_bwd", 2, 2, MG_OPF_NO_GRAD, infer_unary_bwd, NULL, cost_bwd,
                                         gelu_erf_bwd_cpu, NULL, .shard = mg_shard_rule_pointwise};

static mg_tensor *unary(mg_graph *g, mg_op op, mg_tensor *x) {
    mg_node *n = mg_node_new(g, op, NULL, 1, &x, NULL);
    return n ? n->out[0] : NULL;
}
mg_tensor *mg_gelu(mg_graph *g, mg_tensor *x) { return unary(g, MG_OP_GELU, x); }
mg_tensor *mg_silu(mg_graph *g, mg_tensor *x) { return unary(g, MG_OP_SILU, x); }
mg_tensor *mg_swiglu(mg_graph *g, mg_tensor *x) { return unary(g, MG_OP_SWIGLU, x); }
mg_tensor *mg_squared_relu(mg_graph *g, mg_tensor *x) { return unary(g, MG_OP_SQUARED_RELU, x); }
mg_tensor *mg_gelu_erf(mg_graph *g, mg_tensor *x) { return unary(g, MG_OP_GELU_ERF, x); }

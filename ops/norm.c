/* Normalisations over the last dimension: layernorm (x, w, b) and rmsnorm (x, w),
 * each with a fused backward op.
 *
 * The forward ops save per-row statistics (layernorm: mean and rstd, rmsnorm: rstd)
 * as extra outputs of shape x.shape without its last dimension ([1] for a vector x),
 * so the backward needs no recomputation of the reductions. Row statistics are
 * accumulated in double; the parameter-gradient reductions over rows accumulate in
 * double in row order, so they are deterministic.
 *
 *   layernorm:     y = (x - mean) * rstd * w + b,      rstd = 1 / sqrt(var + eps)
 *   layernorm_bwd: dy, x, w, mean, rstd -> dx, dw, db
 *   rmsnorm:       y = x * rstd * w,                   rstd = 1 / sqrt(mean(x^2) + eps)
 *   rmsnorm_bwd:   dy, x, w, rstd -> dx, dw
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops/fastmath.h"
#include "ops/op.h"
#include "ops/shard.h"
#include "ops/simd.h"

/* Shape of the per-row statistics: x without its last dimension. */
static void stat_desc(const mg_tensor *x, mg_tensor_desc *d) {
    d->dtype = MG_F32;
    for (int i = 0; i < MG_MAX_DIMS; i++) d->shape[i] = 1;
    if (x->ndim == 1) {
        d->ndim = 1;
        return;
    }
    d->ndim = x->ndim - 1;
    for (int i = 0; i < x->ndim - 1; i++) d->shape[i] = x->shape[i];
}

static bool is_stat_of(const mg_tensor *s, const mg_tensor *x) {
    mg_tensor_desc d;
    stat_desc(x, &d);
    if (s->dtype != MG_F32 || s->ndim != d.ndim) return false;
    for (int i = 0; i < d.ndim; i++)
        if (s->shape[i] != d.shape[i]) return false;
    return true;
}

/* x f32 of rank >= 1 with a non-empty last dimension; a vector parameter [N]. */
static int check_x_param(const mg_node *n, const mg_tensor *x, const mg_tensor *p, const char *what, mg_error *err) {
    if (x->dtype != MG_F32) return mg_shape_error(err, n, "x must be f32");
    if (x->ndim < 1 || x->shape[x->ndim - 1] < 1) return mg_shape_error(err, n, "x needs a non-empty last dimension");
    if (p->dtype != MG_F32 || p->ndim != 1 || p->shape[0] != x->shape[x->ndim - 1])
        return mg_shape_error(err, n, "%s must be f32 [N] with N the last dimension of x", what);
    return MG_OK;
}

static void cost_norm(const mg_node *n, double *flops, double *bytes, double per_elem) {
    double e = (double)mg_numel(n->in[0]), b = 0;
    for (int i = 0; i < n->n_in; i++) b += (double)mg_numel(n->in[i]);
    for (int i = 0; i < n->n_out; i++) b += (double)mg_numel(n->out[i]);
    *flops = per_elem * e;
    *bytes = 4.0 * b;
}
static void cost_fwd(const mg_node *n, double *flops, double *bytes) { cost_norm(n, flops, bytes, 8.0); }
static void cost_bwd(const mg_node *n, double *flops, double *bytes) { cost_norm(n, flops, bytes, 12.0); }

/* ==== layernorm ===================================================================== */
static int infer_layernorm(const mg_node *n, mg_tensor_desc *out, mg_error *err) {
    const mg_tensor *x = n->in[0];
    int rc = check_x_param(n, x, n->in[1], "weight", err);
    if (rc) return rc;
    if (n->n_in > 2 && (rc = check_x_param(n, x, n->in[2], "bias", err))) return rc;
    if (!(n->attrs.norm.eps >= 0.0f)) return mg_shape_error(err, n, "eps must be >= 0");
    mg_desc_of(x, &out[0]);
    stat_desc(x, &out[1]);
    stat_desc(x, &out[2]);
    return 3;
}

MG_SIMD static int layernorm_cpu(const mg_kernel_args *a, mg_error *err) {
    (void)err;
    const mg_node *n = a->node;
    const mg_tensor *xt = n->in[0];
    const float *x = a->in[0], *w = a->in[1], *b = n->n_in > 2 ? a->in[2] : NULL;
    float *y = a->out[0], *mean = a->out[1], *rstd = a->out[2];
    int64_t N = xt->shape[xt->ndim - 1], rows = mg_numel(xt) / N;
    double eps = n->attrs.norm.eps;
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * N;
        float *yr = y + r * N;
        double mu = mg_sum_f(xr, N) / (double)N, v = mg_sumsq_dev(xr, N, mu);
        double rs = 1.0 / sqrt(v / (double)N + eps);
        float m = (float)mu, rf = (float)rs;
        mean[r] = m;
        rstd[r] = rf;
        if (b)
            for (int64_t j = 0; j < N; j++) yr[j] = (xr[j] - m) * rf * w[j] + b[j];
        else
            for (int64_t j = 0; j < N; j++) yr[j] = (xr[j] - m) * rf * w[j];
    }
    return MG_OK;
}

static int infer_layernorm_bwd(const mg_node *n, mg_tensor_desc *out, mg_error *err) {
    const mg_tensor *dy = n->in[0], *x = n->in[1], *w = n->in[2];
    int rc = check_x_param(n, x, w, "weight", err);
    if (rc) return rc;
    if (!mg_same_shape(dy, x) || dy->dtype != MG_F32) return mg_shape_error(err, n, "dy must be f32 shaped like x");
    if (!is_stat_of(n->in[3], x) || !is_stat_of(n->in[4], x))
        return mg_shape_error(err, n, "mean and rstd must be f32 with x's shape without its last dimension");
    mg_desc_of(x, &out[0]);
    mg_desc_of(w, &out[1]);
    mg_desc_of(w, &out[2]);
    return 3;
}

MG_SIMD static int layernorm_bwd_cpu(const mg_kernel_args *a, mg_error *err) {
    const mg_node *n = a->node;
    const mg_tensor *xt = n->in[1];
    const float *dy = a->in[0], *x = a->in[1], *w = a->in[2], *mean = a->in[3], *rstd = a->in[4];
    float *dx = a->out[0], *dw = a->out[1], *db = a->out[2];
    int64_t N = xt->shape[xt->ndim - 1], rows = mg_numel(xt) / N;
    double *acc = calloc((size_t)(2 * N), sizeof *acc);
    float *xh = malloc((size_t)(2 * N) * sizeof *xh);
    if (!acc || !xh) {
        free(acc);
        free(xh);
        return mg_error_set(err, MG_ERR_NOMEM, "layernorm_bwd: out of memory");
    }
    double *adw = acc, *adb = acc + N;
    float *gw = xh + N; /* g = dy * w */
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * N, *dyr = dy + r * N;
        float *dxr = dx + r * N;
        float m = mean[r], rs = rstd[r];
        /* elementwise first, the row's two sums (of g and g * xhat) apart: each loop vectorises */
        for (int64_t j = 0; j < N; j++) {
            float xhat = (xr[j] - m) * rs;
            xh[j] = xhat;
            gw[j] = dyr[j] * w[j];
            adw[j] += (double)dyr[j] * xhat;
            adb[j] += dyr[j];
        }
        float mg = (float)(mg_sum_f(gw, N) / (double)N), mgx = (float)(mg_dot_f(gw, xh, N) / (double)N);
        for (int64_t j = 0; j < N; j++) dxr[j] = rs * (gw[j] - mg - xh[j] * mgx);
    }
    for (int64_t j = 0; j < N; j++) {
        dw[j] = (float)adw[j];
        db[j] = (float)adb[j];
    }
    free(acc);
    free(xh);
    return MG_OK;
}

/* Gradients flow only through y: the saved statistics are not differentiable
 * outputs (nothing in a model reads them but layernorm_bwd). */
static int stats_have_grad(mg_graph *g, const mg_node *n, mg_tensor *const *dout) {
    for (int j = 1; j < n->n_out; j++)
        if (dout[j])
            return mg_graph_fail(g, MG_ERR_UNSUPPORTED, "%s: no gradient through the saved statistic '%s'",
                                 mg_op_name(n->op), n->out[j]->name);
    return MG_OK;
}

static int layernorm_grad(mg_graph *g, const mg_node *n, mg_tensor *const *dout, const bool *need, mg_tensor **din) {
    int rc = stats_have_grad(g, n, dout);
    if (rc || !dout[0]) return rc;
    mg_tensor *in[5] = {dout[0], n->in[0], n->in[1], n->out[1], n->out[2]};
    mg_node *b = mg_node_new(g, MG_OP_LAYERNORM_BWD, &n->attrs, 5, in, NULL);
    if (!b) return mg_graph_error(g)->code;
    for (int i = 0; i < n->n_in && i < 3; i++)
        if (need[i]) din[i] = b->out[i];
    return MG_OK;
}

/* Sharding (ops/op.h): rows must be whole; splits along token dims pass (sequence
 * parallelism); the weights stay replicated. Backward: dy follows x; the weight
 * gradients of a token shard are partial sums. */
static int shard_norm(const mg_node *n, const mg_shard_ctx *c, mg_shard_io *io, mg_error *err) {
    (void)err;
    mg_sharding s = mg_shard_whole(c, n, io, 0, true);
    if (mg_sh_is_split(s) && s.dim == n->in[0]->ndim - 1) s = mg_sh_full();
    io->want[0] = s;
    for (int i = 1; i < n->n_in; i++) io->want[i] = mg_sh_full();
    for (int j = 0; j < n->n_out; j++) io->out[j] = s; /* stats: x's shape minus last dim */
    return MG_OK;
}

static int shard_norm_bwd(const mg_node *n, const mg_shard_ctx *c, mg_shard_io *io, mg_error *err) {
    (void)err;
    /* x in the state the forward rule gave it: a partial x (a vocab-parallel embedding
     * with no position table added to it, as under RoPE) was resolved there */
    mg_sharding s = mg_shard_whole(c, n, io, 1, true);
    if (mg_sh_is_split(s) && s.dim == n->in[1]->ndim - 1) s = mg_sh_full();
    io->want[0] = io->want[1] = s;
    io->want[2] = mg_sh_full(); /* w */
    for (int i = 3; i < n->n_in; i++) io->want[i] = s;
    io->out[0] = s;
    for (int j = 1; j < n->n_out; j++) io->out[j] = mg_sh_is_split(s) ? mg_sh_partial() : mg_sh_full();
    return MG_OK;
}

const mg_op_def mg_opdef_LAYERNORM = {"layernorm", 2, 3, 0, infer_layernorm, layernorm_grad, cost_fwd, layernorm_cpu,
                                      NULL, .shard = shard_norm, .f32_out = 3u << 1};
const mg_op_def mg_opdef_LAYERNORM_BWD = {"layernorm_bwd", 5, 5, MG_OPF_NO_GRAD, infer_layernorm_bwd, NULL, cost_bwd,
                                          layernorm_bwd_cpu, NULL, .shard = shard_norm_bwd};

mg_tensor *mg_layernorm(mg_graph *g, mg_tensor *x, mg_tensor *w, mg_tensor *b, float eps) {
    mg_attrs at = {.norm = {eps}};
    mg_tensor *in[3] = {x, w, b};
    mg_node *n = mg_node_new(g, MG_OP_LAYERNORM, &at, b ? 3 : 2, in, NULL);
    return n ? n->out[0] : NULL;
}

/* ==== rmsnorm ======================================================================= */
static int infer_rmsnorm(const mg_node *n, mg_tensor_desc *out, mg_error *err) {
    const mg_tensor *x = n->in[0];
    int rc = check_x_param(n, x, n->in[1], "weight", err);
    if (rc) return rc;
    if (!(n->attrs.norm.eps >= 0.0f)) return mg_shape_error(err, n, "eps must be >= 0");
    mg_desc_of(x, &out[0]);
    stat_desc(x, &out[1]);
    return 2;
}

MG_SIMD static int rmsnorm_cpu(const mg_kernel_args *a, mg_error *err) {
    (void)err;
    const mg_node *n = a->node;
    const mg_tensor *xt = n->in[0];
    const float *x = a->in[0], *w = a->in[1];
    float *y = a->out[0], *rstd = a->out[1];
    int64_t N = xt->shape[xt->ndim - 1], rows = mg_numel(xt) / N;
    double eps = n->attrs.norm.eps;
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * N;
        float *yr = y + r * N;
        float rs = (float)(1.0 / sqrt(mg_dot_f(xr, xr, N) / (double)N + eps));
        rstd[r] = rs;
        for (int64_t j = 0; j < N; j++) yr[j] = xr[j] * rs * w[j];
    }
    return MG_OK;
}

static int infer_rmsnorm_bwd(const mg_node *n, mg_tensor_desc *out, mg_error *err) {
    const mg_tensor *dy = n->in[0], *x = n->in[1], *w = n->in[2];
    int rc = check_x_param(n, x, w, "weight", err);
    if (rc) return rc;
    if (!mg_same_shape(dy, x) || dy->dtype != MG_F32) return mg_shape_error(err, n, "dy must be f32 shaped like x");
    if (!is_stat_of(n->in[3], x))
        return mg_shape_error(err, n, "rstd must be f32 with x's shape without its last dimension");
    mg_desc_of(x, &out[0]);
    mg_desc_of(w, &out[1]);
    return 2;
}

MG_SIMD static int rmsnorm_bwd_cpu(const mg_kernel_args *a, mg_error *err) {
    const mg_node *n = a->node;
    const mg_tensor *xt = n->in[1];
    const float *dy = a->in[0], *x = a->in[1], *w = a->in[2], *rstd = a->in[3];
    float *dx = a->out[0], *dw = a->out[1];
    int64_t N = xt->shape[xt->ndim - 1], rows = mg_numel(xt) / N;
    double *adw = calloc((size_t)N, sizeof *adw);
    float *xh = malloc((size_t)(2 * N) * sizeof *xh);
    if (!adw || !xh) {
        free(adw);
        free(xh);
        return mg_error_set(err, MG_ERR_NOMEM, "rmsnorm_bwd: out of memory");
    }
    float *gw = xh + N; /* g = dy * w */
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * N, *dyr = dy + r * N;
        float *dxr = dx + r * N;
        float rs = rstd[r];
        /* elementwise first, the row's sum of g * xhat apart: each loop vectorises */
        for (int64_t j = 0; j < N; j++) {
            float xhat = xr[j] * rs;
            xh[j] = xhat;
            gw[j] = dyr[j] * w[j];
            adw[j] += (double)dyr[j] * xhat;
        }
        float mgx = (float)(mg_dot_f(gw, xh, N) / (double)N);
        for (int64_t j = 0; j < N; j++) dxr[j] = rs * (gw[j] - xr[j] * rs * mgx);
    }
    for (int64_t j = 0; j < N; j++) dw[j] = (float)adw[j];
    free(adw);
    free(xh);
    return MG_OK;
}

static int rmsnorm_grad(mg_graph *g, const mg_node *n, mg_tensor *const *dout, const bool *need, mg_tensor **din) {
    int rc = stats_have_grad(g, n, dout);
    if (rc || !dout[0]) return rc;
    mg_tensor *in[4] = {dout[0], n->in[0], n->in[1], n->out[1]};
    mg_node *b = mg_node_new(g, MG_OP_RMSNORM_BWD, &n->attrs, 4, in, NULL);
    if (!b) return mg_graph_error(g)->code;
    if (need[0]) din[0] = b->out[0];
    if (need[1]) din[1] = b->out[1];
    return MG_OK;
}

const mg_op_def mg_opdef_RMSNORM = {"rmsnorm", 2, 2, 0, infer_rmsnorm, rmsnorm_grad, cost_fwd, rmsnorm_cpu, NULL, .shard = shard_norm,
                                    .f32_out = 1u << 1};
const mg_op_def mg_opdef_RMSNORM_BWD = {"rmsnorm_bwd", 4, 4, MG_OPF_NO_GRAD, infer_rmsnorm_bwd, NULL, cost_bwd,
                                        rmsnorm_bwd_cpu, NULL, .shard = shard_norm_bwd};

mg_tensor *mg_rmsnorm(mg_graph *g, mg_tensor *x, mg_tensor *w, float eps) {
    mg_attrs at = {.norm = {eps}};
    mg_tensor *in[2] = {x, w};
    mg_node *n = mg_node_new(g, MG_OP_RMSNORM, &at, 2, in, NULL);
    return n ? n->out[0] : NULL;
}

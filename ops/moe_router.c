/* MoE router ops (Megatron-LM core/transformer/moe/router.py, moe_utils.py).
 *
 * moe_route:      logits [T, E] -> probs [T, E] f32, map [T, E] i32.
 *                 top-k by logit (ties to the lower expert), weights softmax over the
 *                 k (default) or the selected entries of the softmax over all E
 *                 (pre_softmax); then Megatron's capacity mask
 *                 (apply_router_token_dropping): an expert keeps at most
 *                 min(capacity, T) of its tokens, the most probable ("probs") or the
 *                 earliest ("position"); pad_to_capacity fills every expert up to
 *                 exactly that many rows with unrouted tokens of weight 0.
 * moe_route_bwd:  (dprobs, logits, map) -> dlogits. The selection and the capacity
 *                 mask are piecewise constant: only the softmax is differentiated.
 * moe_topk_count: logits [T, E] -> tokens per expert [E] f32 by top-k before any
 *                 capacity mask (what Megatron's aux loss counts). Stops gradients.
 * logsumexp / logsumexp_bwd: over the last dimension (router z-loss).
 * Sums are accumulated in double.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mgraph/moe.h"
#include "ops/moe_common.h"
#include "ops/op.h"
#include "ops/shard.h"

static void desc2(mg_tensor_desc *d, mg_dtype dt, int64_t a, int64_t b) {
    memset(d, 0, sizeof *d);
    d->dtype = dt;
    d->ndim = 2;
    for (int i = 0; i < MG_MAX_DIMS; i++) d->shape[i] = 1;
    d->shape[0] = a;
    d->shape[1] = b;
}

static int check_logits(const mg_node *n, const mg_tensor *x, mg_error *err) {
    if (x->dtype != MG_F32 || x->ndim != 2) return mg_shape_error(err, n, "logits must be f32 [tokens, experts]");
    int k = n->attrs.moe.topk;
    if (k < 1 || k > x->shape[1])
        return mg_shape_error(err, n, "top-k %d must be in [1, experts = %lld]", k, (long long)x->shape[1]);
    return MG_OK;
}

/* ---- moe_route ------------------------------------------------------------------------ */
static int infer_route(const mg_node *n, mg_tensor_desc *out, mg_error *err) {
    const mg_tensor *x = n->in[0];
    int rc = check_logits(n, x, err);
    if (rc) return rc;
    if (n->attrs.moe.capacity < 0) return mg_shape_error(err, n, "capacity must be >= 0 (0: dropless)");
    desc2(&out[0], MG_F32, x->shape[0], x->shape[1]);
    desc2(&out[1], MG_I32, x->shape[0], x->shape[1]);
    return 2;
}

/* Routing weights of row x over the selection sel[0..k) into w[0..k). */
static void route_weights(const float *x, int64_t E, const int32_t *sel, int k, bool pre_softmax, float *w) {
    if (pre_softmax) {
        float m = x[0];
        for (int64_t e = 1; e < E; e++) m = x[e] > m ? x[e] : m;
        double s = 0;
        for (int64_t e = 0; e < E; e++) s += exp((double)x[e] - m);
        for (int j = 0; j < k; j++) w[j] = (float)(exp((double)x[sel[j]] - m) / s);
    } else {
        float m = x[sel[0]]; /* sel[0] is the largest */
        double s = 0;
        for (int j = 0; j < k; j++) s += exp((double)x[sel[j]] - m);
        for (int j = 0; j < k; j++) w[j] = (float)(exp((double)x[sel[j]] - m) / s);
    }
}

typedef struct cand { float p; int32_t t; } cand;
static int by_prob_then_token(const void *a, const void *b) {
    const cand *x = a, *y = b;
    if (x->p != y->p) return x->p > y->p ? -1 : 1;
    return (x->t > y->t) - (x->t < y->t);
}

/* Megatron's capacity mask, applied in place to probs and map. */
static int apply_capacity(const mg_attr_moe *at, int64_t T, int64_t E, float *probs, int32_t *map, mg_error *err) {
    int64_t cap = at->capacity < T ? at->capacity : T;
    cand *c = malloc((size_t)T * sizeof *c);
    if (!c) return mg_error_set(err, MG_ERR_NOMEM, "moe_route: out of memory");
    for (int64_t e = 0; e < E; e++) {
        int64_t n = 0;
        for (int64_t t = 0; t < T; t++)
            if (map[t * E + e]) c[n++] = (cand){probs[t * E + e], (int32_t)t};
        if (at->drop_policy == MG_MOE_DROP_PROBS) qsort(c, (size_t)n, sizeof *c, by_prob_then_token);
        /* position: c is already in token order */
        for (int64_t i = cap; i < n; i++) {
            map[(int64_t)c[i].t * E + e] = 0;
            probs[(int64_t)c[i].t * E + e] = 0;
        }
        if (at->pad_to_capacity) /* fill with the earliest unrouted tokens, weight 0 */
            for (int64_t t = 0; t < T && n < cap; t++)
                if (!map[t * E + e]) {
                    map[t * E + e] = 1;
                    n++;
                }
    }
    free(c);
    return MG_OK;
}

static int route_cpu(const mg_kernel_args *a, mg_error *err) {
    const mg_attr_moe *at = &a->node->attrs.moe;
    const mg_tensor *xt = a->node->in[0];
    int64_t T = xt->shape[0], E = xt->shape[1];
    int k = at->topk;
    const float *x = a->in[0];
    float *probs = a->out[0];
    int32_t *map = a->out[1];
    memset(probs, 0, (size_t)(T * E) * sizeof *probs);
    memset(map, 0, (size_t)(T * E) * sizeof *map);
    int32_t sel[256];
    float w[256];
    if (k > 256) return mg_error_set(err, MG_ERR_UNSUPPORTED, "moe_route: top-k %d above 256", k);
    for (int64_t t = 0; t < T; t++) {
        mg_moe_topk_row(x + t * E, E, k, sel);
        route_weights(x + t * E, E, sel, k, at->pre_softmax, w);
        for (int j = 0; j < k; j++) {
            probs[t * E + sel[j]] = w[j];
            map[t * E + sel[j]] = 1;
        }
    }
    return at->capacity > 0 ? apply_capacity(at, T, E, probs, map, err) : MG_OK;
}

/* ---- moe_route_bwd: (dprobs, logits, map) -> dlogits ------------------------------------ */
static int infer_route_bwd(const mg_node *n, mg_tensor_desc *out, mg_error *err) {
    const mg_tensor *dp = n->in[0], *x = n->in[1], *m = n->in[2];
    int rc = check_logits(n, x, err);
    if (rc) return rc;
    if (!mg_same_shape(dp, x) || !mg_same_shape(m, x) || dp->dtype != MG_F32 || m->dtype != MG_I32)
        return mg_shape_error(err, n, "dprobs (f32) and map (i32) must have the logits' shape");
    mg_desc_of(x, &out[0]);
    return 1;
}

static int route_bwd_cpu(const mg_kernel_args *a, mg_error *err) {
    const mg_attr_moe *at = &a->node->attrs.moe;
    const mg_tensor *xt = a->node->in[1];
    int64_t T = xt->shape[0], E = xt->shape[1];
    int k = at->topk;
    const float *dp = a->in[0], *x = a->in[1];
    const int32_t *map = a->in[2];
    float *dx = a->out[0];
    if (k > 256) return mg_error_set(err, MG_ERR_UNSUPPORTED, "moe_route_bwd: top-k %d above 256", k);
    int32_t sel[256];
    float w[256];
    for (int64_t t = 0; t < T; t++) {
        const float *xr = x + t * E, *dr = dp + t * E;
        const int32_t *mr = map + t * E;
        float *dxr = dx + t * E;
        mg_moe_topk_row(xr, E, k, sel);
        /* g_j: the output gradient of the selected, kept entries (the capacity mask
         * multiplies the weights by a constant 0 or 1) */
        double dot = 0;
        memset(dxr, 0, (size_t)E * sizeof *dxr);
        if (at->pre_softmax) {
            float m = xr[0];
            for (int64_t e = 1; e < E; e++) m = xr[e] > m ? xr[e] : m;
            double s = 0;
            for (int64_t e = 0; e < E; e++) s += exp((double)xr[e] - m);
            for (int j = 0; j < k; j++) {
                int32_t e = sel[j];
                double g = mr[e] ? dr[e] : 0.0;
                dot += g * (exp((double)xr[e] - m) / s);
            }
            for (int64_t e = 0; e < E; e++) {
                double p = exp((double)xr[e] - m) / s, g = 0;
                for (int j = 0; j < k; j++)
                    if (sel[j] == (int32_t)e && mr[e]) g = dr[e];
                dxr[e] = (float)(p * (g - dot));
            }
        } else {
            route_weights(xr, E, sel, k, false, w);
            for (int j = 0; j < k; j++) dot += (mr[sel[j]] ? (double)dr[sel[j]] : 0.0) * w[j];
            for (int j = 0; j < k; j++) {
                double g = mr[sel[j]] ? (double)dr[sel[j]] : 0.0;
                dxr[sel[j]] = (float)(w[j] * (g - dot));
            }
        }
    }
    return MG_OK;
}

static int route_grad(mg_graph *g, const mg_node *n, mg_tensor *const *dout, const bool *need, mg_tensor **din) {
    if (!need[0] || !dout[0]) return MG_OK;
    mg_tensor *in[3] = {dout[0], n->in[0], n->out[1]};
    mg_node *b = mg_node_new(g, MG_OP_MOE_ROUTE_BWD, &n->attrs, 3, in, NULL);
    din[0] = b ? b->out[0] : NULL;
    return b ? MG_OK : mg_graph_error(g)->code;
}

static void cost_route(const mg_node *n, double *flops, double *bytes) {
    const mg_tensor *x = n->in[0];
    double te = (double)mg_numel(x);
    *flops = te * (double)(n->attrs.moe.topk + 4); /* selection passes, exp, normalise */
    *bytes = 4.0 * te * (double)(n->n_in + n->n_out);
}

/* ---- moe_topk_count ------------------------------------------------------------------- */
static int infer_topk_count(const mg_node *n, mg_tensor_desc *out, mg_error *err) {
    const mg_tensor *x = n->in[0];
    int rc = check_logits(n, x, err);
    if (rc) return rc;
    memset(&out[0], 0, sizeof out[0]);
    out[0].dtype = MG_F32;
    out[0].ndim = 1;
    for (int i = 0; i < MG_MAX_DIMS; i++) out[0].shape[i] = 1;
    out[0].shape[0] = x->shape[1];
    return 1;
}

static int topk_count_cpu(const mg_kernel_args *a, mg_error *err) {
    const mg_tensor *xt = a->node->in[0];
    int64_t T = xt->shape[0], E = xt->shape[1];
    int k = a->node->attrs.moe.topk;
    if (k > 256) return mg_error_set(err, MG_ERR_UNSUPPORTED, "moe_topk_count: top-k %d above 256", k);
    const float *x = a->in[0];
    float *cnt = a->out[0];
    memset(cnt, 0, (size_t)E * sizeof *cnt);
    int32_t sel[256];
    for (int64_t t = 0; t < T; t++) {
        mg_moe_topk_row(x + t * E, E, k, sel);
        for (int j = 0; j < k; j++) cnt[sel[j]] += 1.0f; /* exact below 2^24 tokens */
    }
    return MG_OK;
}

/* ---- logsumexp ------------------------------------------------------------------------ */
static int infer_lse(const mg_node *n, mg_tensor_desc *out, mg_error *err) {
    const mg_tensor *x = n->in[0];
    if (x->dtype != MG_F32) return mg_shape_error(err, n, "input must be f32");
    mg_desc_of(x, &out[0]);
    if (x->ndim == 1) out[0].shape[0] = 1;
    else out[0].ndim = x->ndim - 1, out[0].shape[x->ndim - 1] = 1;
    return 1;
}

static int lse_cpu(const mg_kernel_args *a, mg_error *err) {
    (void)err;
    const mg_tensor *t = a->node->in[0];
    int64_t N = t->shape[t->ndim - 1], rows = mg_numel(t) / N;
    const float *x = a->in[0];
    float *y = a->out[0];
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * N;
        float m = xr[0];
        for (int64_t j = 1; j < N; j++) m = xr[j] > m ? xr[j] : m;
        double s = 0;
        for (int64_t j = 0; j < N; j++) s += exp((double)xr[j] - m);
        y[r] = (float)(m + log(s));
    }
    return MG_OK;
}

static int infer_lse_bwd(const mg_node *n, mg_tensor_desc *out, mg_error *err) {
    const mg_tensor *dy = n->in[0], *x = n->in[1];
    if (dy->dtype != MG_F32 || x->dtype != MG_F32) return mg_shape_error(err, n, "inputs must be f32");
    if (mg_numel(dy) * x->shape[x->ndim - 1] != mg_numel(x))
        return mg_shape_error(err, n, "dy must have one element per row of x");
    mg_desc_of(x, &out[0]);
    return 1;
}

/* dx = dy · softmax(x) */
static int lse_bwd_cpu(const mg_kernel_args *a, mg_error *err) {
    (void)err;
    const mg_tensor *t = a->node->in[1];
    int64_t N = t->shape[t->ndim - 1], rows = mg_numel(t) / N;
    const float *dy = a->in[0], *x = a->in[1];
    float *dx = a->out[0];
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * N;
        float m = xr[0];
        for (int64_t j = 1; j < N; j++) m = xr[j] > m ? xr[j] : m;
        double s = 0;
        for (int64_t j = 0; j < N; j++) s += exp((double)xr[j] - m);
        for (int64_t j = 0; j < N; j++) dx[r * N + j] = (float)(dy[r] * exp((double)xr[j] - m) / s);
    }
    return MG_OK;
}

static int lse_grad(mg_graph *g, const mg_node *n, mg_tensor *const *dout, const bool *need, mg_tensor **din) {
    if (!need[0]) return MG_OK;
    mg_tensor *in[2] = {dout[0], n->in[0]};
    mg_node *b = mg_node_new(g, MG_OP_LOGSUMEXP_BWD, NULL, 2, in, NULL);
    din[0] = b ? b->out[0] : NULL;
    return b ? MG_OK : mg_graph_error(g)->code;
}

static void cost_lse(const mg_node *n, double *flops, double *bytes) {
    const mg_tensor *x = n->op == MG_OP_LOGSUMEXP ? n->in[0] : n->in[1];
    *flops = 3.0 * (double)mg_numel(x);
    *bytes = 8.0 * (double)mg_numel(x);
}

const mg_op_def mg_opdef_MOE_ROUTE = {"moe_route", 1, 1, 0, infer_route, route_grad, cost_route, route_cpu, NULL, .shard = mg_shard_rule_replicated};
const mg_op_def mg_opdef_MOE_ROUTE_BWD = {"moe_route_bwd", 3, 3, MG_OPF_NO_GRAD, infer_route_bwd, NULL,
                                          cost_route, route_bwd_cpu, NULL, .shard = mg_shard_rule_replicated};
const mg_op_def mg_opdef_MOE_TOPK_COUNT = {"moe_topk_count", 1, 1, MG_OPF_NO_GRAD, infer_topk_count, NULL,
                                           cost_route, topk_count_cpu, NULL, .shard = mg_shard_rule_replicated};
const mg_op_def mg_opdef_LOGSUMEXP = {"logsumexp", 1, 1, 0, infer_lse, lse_grad, cost_lse, lse_cpu, NULL, .shard = mg_shard_rule_replicated};
const mg_op_def mg_opdef_LOGSUMEXP_BWD = {"logsumexp_bwd", 2, 2, MG_OPF_NO_GRAD, infer_lse_bwd, NULL,
                                          cost_lse, lse_bwd_cpu, NULL, .shard = mg_shard_rule_replicated};

/* ---- builders ------------------------------------------------------------------------- */
int64_t mg_moe_capacity(int64_t tokens, int topk, int experts, double factor) {
    return (int64_t)ceil((double)tokens * topk / experts * factor);
}

int64_t mg_moe_dispatch_rows(int64_t tokens, int experts, const mg_moe_route_opts *o) {
    int64_t rows = tokens * o->topk;
    if (o->capacity > 0 && o->pad_to_capacity) {
        int64_t cap = o->capacity < tokens ? o->capacity : tokens;
        if (cap * experts > rows) rows = cap * experts;
    }
    return rows;
}

int mg_moe_route(mg_graph *g, mg_tensor *logits, const mg_moe_route_opts *o, mg_tensor **probs, mg_tensor **map) {
    *probs = *map = NULL;
    if (!logits) return mg_graph_error(g)->code ? mg_graph_error(g)->code : MG_ERR_INVALID;
    mg_attrs at;
    memset(&at, 0, sizeof at);
    at.moe.topk = o->topk;
    at.moe.pre_softmax = o->pre_softmax;
    at.moe.capacity = o->capacity;
    at.moe.drop_policy = o->drop_policy;
    at.moe.pad_to_capacity = o->pad_to_capacity;
    mg_node *n = mg_node_new(g, MG_OP_MOE_ROUTE, &at, 1, &logits, NULL);
    if (!n) return mg_graph_error(g)->code;
    *probs = n->out[0];
    *map = n->out[1];
    return MG_OK;
}

mg_tensor *mg_moe_topk_count(mg_graph *g, mg_tensor *logits, int topk) {
    mg_attrs at;
    memset(&at, 0, sizeof at);
    at.moe.topk = topk;
    mg_node *n = mg_node_new(g, MG_OP_MOE_TOPK_COUNT, &at, 1, &logits, NULL);
    return n ? n->out[0] : NULL;
}

mg_tensor *mg_logsumexp(mg_graph *g, mg_tensor *x) {
    mg_node *n = mg_node_new(g, MG_OP_LOGSUMEXP, NULL, 1, &x, NULL);
    return n ? n->out[0] : NULL;
}

mg_tensor *mg_moe_aux_loss(mg_graph *g, mg_tensor *logits, int topk) {
    if (!logits) return NULL;
    if (logits->ndim != 2) {
        mg_graph_fail(g, MG_ERR_SHAPE, "moe aux loss: logits must be [tokens, experts]");
        return NULL;
    }
    double T = (double)logits->shape[0], E = (double)logits->shape[1];
    mg_tensor *p_sum = mg_sum(g, mg_softmax(g, logits), 0, false); /* [E]: T · P_i */
    mg_tensor *count = mg_moe_topk_count(g, logits, topk);          /* [E]: T · k · f_i */
    mg_tensor *s = mg_sum(g, mg_mul(g, p_sum, count), MG_ALL_AXES, false);
    return mg_scale(g, s, (float)(E / ((double)topk * T * T)));
}

mg_tensor *mg_moe_z_loss(mg_graph *g, mg_tensor *logits) {
    mg_tensor *z = mg_logsumexp(g, logits);
    return mg_mean(g, mg_mul(g, z, z), MG_ALL_AXES, false);
}

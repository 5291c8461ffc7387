/* MoE router ops (Megatron-LM core/transformer/moe/router.py, moe_utils.py).
 *
 * moe_route:      logits [T, E] (, expert_bias [E]) -> probs [T, E] f32, map [T, E] i32.
 *                 The selection ranks the logits (softmax scores, default), the softmax
 *                 over all E (pre_softmax), or sigmoid(logits) + expert_bias (sigmoid
 *                 scores); group-limited routing keeps only the experts of the
 *                 group_topk groups whose top-(k / group_topk) selection scores sum
 *                 highest; top-k, ties to the lower expert. Weights: softmax over the k
 *                 logits, the selected softmax entries (pre_softmax), or the selected
 *                 sigmoid scores normalised over the k (k > 1); times `scaling`; then
 *                 Megatron's capacity mask (apply_router_token_dropping): an expert
 *                 keeps at most min(capacity, T) of its tokens, the most probable
 *                 ("probs") or the earliest ("position"); pad_to_capacity fills every
 *                 expert up to exactly that many rows with unrouted tokens of weight 0.
 * moe_route_bwd:  (dprobs, logits, map [, expert_bias]) -> dlogits. The selection and
 *                 the capacity mask are piecewise constant: only the weights' function
 *                 of the selected scores is differentiated.
 * moe_topk_count: logits [T, E] -> tokens per expert [E] (or per sample [B, E]) f32 by
 *                 top-k before any capacity mask (what Megatron's aux losses count).
 * moe_map_count:  map [T, E] -> [E] f32, the tokens routed to each expert (the expert
 *                 bias's balance). Both stop gradients.
 * sigmoid_norm / sigmoid_norm_bwd: sigmoid(x) / (Σ sigmoid(x) + 1e-20) per row (the aux
 *                 losses' scores with sigmoid routing).
 * moe_expert_bias_update: bias + rate · sign(mean(counts) - counts) (aux-loss-free).
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
static int check_route_attrs(const mg_node *n, const mg_tensor *x, const mg_tensor *bias, mg_error *err) {
    const mg_attr_moe *at = &n->attrs.moe;
    int64_t E = x->shape[1];
    if (at->score != MG_MOE_SOFTMAX && at->score != MG_MOE_SIGMOID) return mg_shape_error(err, n, "unknown score function");
    if (bias && (bias->dtype != MG_F32 || bias->ndim != 1 || bias->shape[0] != E))
        return mg_shape_error(err, n, "expert_bias must be f32 [experts]");
    if (bias && at->score != MG_MOE_SIGMOID) return mg_shape_error(err, n, "an expert bias needs sigmoid scores");
    if (at->num_groups || at->group_topk) {
        if (at->num_groups < 1 || E % at->num_groups || at->group_topk < 1 || at->group_topk > at->num_groups ||
            at->topk % at->group_topk || at->topk > at->group_topk * (E / at->num_groups))
            return mg_shape_error(err, n,
                                  "groups: %d groups must divide %lld experts, 1 <= group top-k %d <= groups, and the "
                                  "group top-k must divide top-k %d within the chosen groups' experts",
                                  at->num_groups, (long long)E, at->group_topk, at->topk);
    }
    if (!(at->scaling >= 0) || !isfinite(at->scaling)) return mg_shape_error(err, n, "scaling must be >= 0");
    return MG_OK;
}

static int infer_route(const mg_node *n, mg_tensor_desc *out, mg_error *err) {
    const mg_tensor *x = n->in[0];
    int rc = check_logits(n, x, err);
    if (!rc) rc = check_route_attrs(n, x, n->n_in > 1 ? n->in[1] : NULL, err);
    if (rc) return rc;
    if (n->attrs.moe.capacity < 0) return mg_shape_error(err, n, "capacity must be >= 0 (0: dropless)");
    desc2(&out[0], MG_F32, x->shape[0], x->shape[1]);
    desc2(&out[1], MG_I32, x->shape[0], x->shape[1]);
    return 2;
}

#define ROUTE_MAX_K 256

/* One row's routing: the selection sel[0..k) and the unscaled weights w[0..k), with the
 * scores the weights come from (softmax: the selected logits; pre_softmax: the whole
 * softmax; sigmoid: sigmoid of every logit) in s[0..E) and the selection scores in c[0..E)
 * (scratch). Returns the normaliser (softmax's sum, sigmoid's sum + 1e-20). */
static double route_row(const mg_attr_moe *at, const float *x, const float *bias, int64_t E, int32_t *sel, float *w,
                        float *s, float *c) {
    int k = at->topk;
    double norm = 1.0;
    if (at->score == MG_MOE_SIGMOID) {
        for (int64_t e = 0; e < E; e++) {
            s[e] = 1.0f / (1.0f + expf(-x[e]));
            c[e] = bias ? s[e] + bias[e] : s[e];
        }
    } else if (at->pre_softmax) {
        float m = x[0];
        for (int64_t e = 1; e < E; e++) m = x[e] > m ? x[e] : m;
        double sum = 0;
        for (int64_t e = 0; e < E; e++) sum += exp((double)x[e] - m);
        for (int64_t e = 0; e < E; e++) c[e] = s[e] = (float)(exp((double)x[e] - m) / sum);
    } else {
        for (int64_t e = 0; e < E; e++) c[e] = x[e];
    }
    if (at->num_groups > 0 && at->group_topk > 0) { /* Megatron's group_limited_topk */
        int G = at->num_groups, per = (int)(E / G), kg = at->topk / at->group_topk;
        float gs[ROUTE_MAX_K];
        int32_t tsel[ROUTE_MAX_K], gsel[ROUTE_MAX_K];
        for (int g = 0; g < G; g++) {
            mg_moe_topk_row(c + (int64_t)g * per, per, kg, tsel);
            double sum = 0;
            for (int j = 0; j < kg; j++) sum += c[(int64_t)g * per + tsel[j]];
            gs[g] = (float)sum;
        }
        mg_moe_topk_row(gs, G, at->group_topk, gsel);
        for (int g = 0; g < G; g++) {
            bool kept = false;
            for (int j = 0; j < at->group_topk; j++) kept |= gsel[j] == g;
            if (!kept)
                for (int e = 0; e < per; e++) c[(int64_t)g * per + e] = -INFINITY;
        }
    }
    mg_moe_topk_row(c, E, k, sel);
    if (at->score == MG_MOE_SIGMOID) {
        double sum = 0;
        for (int j = 0; j < k; j++) sum += s[sel[j]];
        norm = k > 1 ? sum + 1e-20 : 1.0;
        for (int j = 0; j < k; j++) w[j] = (float)(s[sel[j]] / norm);
    } else if (at->pre_softmax) {
        for (int j = 0; j < k; j++) w[j] = s[sel[j]];
    } else {
        float m = x[sel[0]];
        for (int j = 1; j < k; j++) m = x[sel[j]] > m ? x[sel[j]] : m;
        double sum = 0;
        for (int j = 0; j < k; j++) sum += exp((double)x[sel[j]] - m);
        for (int j = 0; j < k; j++) w[j] = (float)(exp((double)x[sel[j]] - m) / sum);
        norm = sum;
    }
    return norm;
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

static float route_scale(const mg_attr_moe *at) { return at->scaling > 0 ? at->scaling : 1.0f; }

static int route_cpu(const mg_kernel_args *a, mg_error *err) {
    const mg_attr_moe *at = &a->node->attrs.moe;
    const mg_tensor *xt = a->node->in[0];
    int64_t T = xt->shape[0], E = xt->shape[1];
    int k = at->topk;
    const float *x = a->in[0], *bias = a->node->n_in > 1 ? a->in[1] : NULL;
    float *probs = a->out[0];
    int32_t *map = a->out[1];
    if (k > ROUTE_MAX_K || (at->num_groups > ROUTE_MAX_K))
        return mg_error_set(err, MG_ERR_UNSUPPORTED, "moe_route: top-k %d or %d groups above %d", k, at->num_groups,
                            ROUTE_MAX_K);
    memset(probs, 0, (size_t)(T * E) * sizeof *probs);
    memset(map, 0, (size_t)(T * E) * sizeof *map);
    float *sc = malloc((size_t)(2 * E) * sizeof *sc);
    if (!sc) return mg_error_set(err, MG_ERR_NOMEM, "moe_route: out of memory");
    int32_t sel[ROUTE_MAX_K];
    float w[ROUTE_MAX_K], f = route_scale(at);
    for (int64_t t = 0; t < T; t++) {
        route_row(at, x + t * E, bias, E, sel, w, sc, sc + E);
        for (int j = 0; j < k; j++) {
            probs[t * E + sel[j]] = w[j] * f;
            map[t * E + sel[j]] = 1;
        }
    }
    free(sc);
    return at->capacity > 0 ? apply_capacity(at, T, E, probs, map, err) : MG_OK;
}

/* ---- moe_route_bwd: (dprobs, logits, map [, expert_bias]) -> dlogits ------------------------ */
static int infer_route_bwd(const mg_node *n, mg_tensor_desc *out, mg_error *err) {
    const mg_tensor *dp = n->in[0], *x = n->in[1], *m = n->in[2];
    int rc = check_logits(n, x, err);
    if (!rc) rc = check_route_attrs(n, x, n->n_in > 3 ? n->in[3] : NULL, err);
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
    const float *dp = a->in[0], *x = a->in[1], *bias = a->node->n_in > 3 ? a->in[3] : NULL;
    const int32_t *map = a->in[2];
    float *dx = a->out[0];
    if (k > ROUTE_MAX_K || at->num_groups > ROUTE_MAX_K)
        return mg_error_set(err, MG_ERR_UNSUPPORTED, "moe_route_bwd: top-k %d or %d groups above %d", k,
                            at->num_groups, ROUTE_MAX_K);
    float *sc = malloc((size_t)(2 * E) * sizeof *sc);
    if (!sc) return mg_error_set(err, MG_ERR_NOMEM, "moe_route_bwd: out of memory");
    int32_t sel[ROUTE_MAX_K];
    float w[ROUTE_MAX_K];
    double f = route_scale(at);
    for (int64_t t = 0; t < T; t++) {
        const float *xr = x + t * E, *dr = dp + t * E;
        const int32_t *mr = map + t * E;
        float *dxr = dx + t * E, *s = sc;
        double norm = route_row(at, xr, bias, E, sel, w, sc, sc + E);
        memset(dxr, 0, (size_t)E * sizeof *dxr);
        /* g_j: the gradient of the unscaled weight j: the output gradient of the selected,
         * kept entries times the scaling (the capacity mask multiplies by a constant 0 or 1) */
        double g[ROUTE_MAX_K], dot = 0;
        for (int j = 0; j < k; j++) {
            g[j] = mr[sel[j]] ? (double)dr[sel[j]] * f : 0.0;
            dot += g[j] * w[j];
        }
        if (at->score == MG_MOE_SIGMOID) { /* w_j = s_j / N: dL/ds_j = (g_j - Σ g w) / N, ds/dx = s (1 - s) */
            for (int j = 0; j < k; j++) {
                double sj = s[sel[j]], ds = k > 1 ? (g[j] - dot) / norm : g[j];
                dxr[sel[j]] = (float)(ds * sj * (1.0 - sj));
            }
        } else if (at->pre_softmax) { /* w_j = p_{sel j} of the softmax over all E */
            for (int64_t e = 0; e < E; e++) {
                double ge = 0;
                for (int j = 0; j < k; j++)
                    if (sel[j] == (int32_t)e) ge = g[j];
                dxr[e] = (float)((double)s[e] * (ge - dot));
            }
        } else { /* softmax over the k selected logits */
            for (int j = 0; j < k; j++) dxr[sel[j]] = (float)(w[j] * (g[j] - dot));
        }
    }
    free(sc);
    return MG_OK;
}

static int route_grad(mg_graph *g, const mg_node *n, mg_tensor *const *dout, const bool *need, mg_tensor **din) {
    if (!need[0] || !dout[0]) return MG_OK; /* (the expert bias gets none: it only selects) */
    mg_tensor *in[4] = {dout[0], n->in[0], n->out[1], n->n_in > 1 ? n->in[1] : NULL};
    mg_node *b = mg_node_new(g, MG_OP_MOE_ROUTE_BWD, &n->attrs, n->n_in > 1 ? 4 : 3, in, NULL);
    din[0] = b ? b->out[0] : NULL;
    return b ? MG_OK : mg_graph_error(g)->code;
}

static void cost_route(const mg_node *n, double *flops, double *bytes) {
    const mg_tensor *x = n->in[0];
    double te = (double)mg_numel(x);
    *flops = te * (double)(n->attrs.moe.topk + 4); /* selection passes, exp, normalise */
    *bytes = 4.0 * te * (double)(n->n_in + n->n_out);
}

/* ---- moe_topk_count, moe_map_count ----------------------------------------------------- */
/* [E] or, per sample, [samples, E] (token t counts for sample t % samples). */
static int count_desc(const mg_node *n, int64_t T, int64_t E, mg_tensor_desc *out, mg_error *err) {
    int64_t B = n->attrs.moe.samples;
    if (B < 0 || (B > 0 && T % B)) return mg_shape_error(err, n, "samples %lld must divide the %lld tokens", (long long)B, (long long)T);
    memset(&out[0], 0, sizeof out[0]);
    out[0].dtype = MG_F32;
    for (int i = 0; i < MG_MAX_DIMS; i++) out[0].shape[i] = 1;
    out[0].ndim = B > 0 ? 2 : 1;
    out[0].shape[0] = B > 0 ? B : E;
    out[0].shape[1] = B > 0 ? E : 1;
    return 1;
}

static int infer_topk_count(const mg_node *n, mg_tensor_desc *out, mg_error *err) {
    const mg_tensor *x = n->in[0];
    int rc = check_logits(n, x, err);
    return rc ? rc : count_desc(n, x->shape[0], x->shape[1], out, err);
}

static int topk_count_cpu(const mg_kernel_args *a, mg_error *err) {
    const mg_tensor *xt = a->node->in[0];
    int64_t T = xt->shape[0], E = xt->shape[1], B = a->node->attrs.moe.samples > 0 ? a->node->attrs.moe.samples : 1;
    int k = a->node->attrs.moe.topk;
    if (k > ROUTE_MAX_K) return mg_error_set(err, MG_ERR_UNSUPPORTED, "moe_topk_count: top-k %d above %d", k, ROUTE_MAX_K);
    const float *x = a->in[0];
    float *cnt = a->out[0];
    memset(cnt, 0, (size_t)(B * E) * sizeof *cnt);
    int32_t sel[ROUTE_MAX_K];
    for (int64_t t = 0; t < T; t++) {
        mg_moe_topk_row(x + t * E, E, k, sel);
        for (int j = 0; j < k; j++) cnt[(t % B) * E + sel[j]] += 1.0f; /* exact below 2^24 tokens */
    }
    return MG_OK;
}

static int infer_map_count(const mg_node *n, mg_tensor_desc *out, mg_error *err) {
    const mg_tensor *m = n->in[0];
    if (m->dtype != MG_I32 || m->ndim != 2) return mg_shape_error(err, n, "map must be i32 [tokens, experts]");
    return count_desc(n, m->shape[0], m->shape[1], out, err);
}

static int map_count_cpu(const mg_kernel_args *a, mg_error *err) {
    (void)err;
    const mg_tensor *mt = a->node->in[0];
    int64_t T = mt->shape[0], E = mt->shape[1], B = a->node->attrs.moe.samples > 0 ? a->node->attrs.moe.samples : 1;
    const int32_t *m = a->in[0];
    float *cnt = a->out[0];
    memset(cnt, 0, (size_t)(B * E) * sizeof *cnt);
    for (int64_t t = 0; t < T; t++)
        for (int64_t e = 0; e < E; e++) cnt[(t % B) * E + e] += (float)m[t * E + e];
    return MG_OK;
}

static void cost_count(const mg_node *n, double *flops, double *bytes) {
    double te = (double)mg_numel(n->in[0]);
    *flops = n->op == MG_OP_MOE_TOPK_COUNT ? te * (double)n->attrs.moe.topk : te;
    *bytes = 4.0 * (te + (double)mg_numel(n->out[0]));
}

/* Sharding: the counts of a block of tokens (rows: a sequence shard, whole samples'
 * interleaving kept) are a term of the sum over the group; anything else counts whole. */
static int shard_count(const mg_node *n, const mg_shard_ctx *c, mg_shard_io *io, mg_error *err) {
    (void)n, (void)c, (void)err;
    mg_sharding s = io->in[0];
    bool rows = mg_sh_is_split(s) && s.dim == 0;
    io->want[0] = rows ? s : mg_sh_full();
    io->out[0] = rows ? mg_sh_partial() : mg_sh_full();
    return MG_OK;
}

/* ---- sigmoid_norm ------------------------------------------------------------------------ */
static int infer_sigmoid_norm(const mg_node *n, mg_tensor_desc *out, mg_error *err) {
    const mg_tensor *x = n->in[n->op == MG_OP_SIGMOID_NORM_BWD];
    if (x->dtype != MG_F32 || x->ndim < 1) return mg_shape_error(err, n, "x must be f32 [..., E]");
    if (n->op == MG_OP_SIGMOID_NORM_BWD && (!mg_same_shape(n->in[0], x) || n->in[0]->dtype != MG_F32))
        return mg_shape_error(err, n, "dy must be shaped like x");
    mg_desc_of(x, &out[0]);
    return 1;
}

static int sigmoid_norm_cpu(const mg_kernel_args *a, mg_error *err) {
    (void)err;
    const mg_tensor *t = a->node->in[0];
    int64_t N = t->shape[t->ndim - 1], rows = N ? mg_numel(t) / N : 0;
    const float *x = a->in[0];
    float *y = a->out[0];
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * N;
        float *yr = y + r * N;
        double sum = 0;
        for (int64_t j = 0; j < N; j++) sum += yr[j] = 1.0f / (1.0f + expf(-xr[j]));
        double inv = 1.0 / (sum + 1e-20);
        for (int64_t j = 0; j < N; j++) yr[j] = (float)(yr[j] * inv);
    }
    return MG_OK;
}

/* y_i = s_i / S (S = Σ s + 1e-20): dx_j = s_j (1 - s_j) (dy_j - Σ_i dy_i y_i) / S */
static int sigmoid_norm_bwd_cpu(const mg_kernel_args *a, mg_error *err) {
    (void)err;
    const mg_tensor *t = a->node->in[1];
    int64_t N = t->shape[t->ndim - 1], rows = N ? mg_numel(t) / N : 0;
    const float *dy = a->in[0], *x = a->in[1];
    float *dx = a->out[0];
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * N, *dr = dy + r * N;
        float *o = dx + r * N;
        double sum = 0, dot = 0;
        for (int64_t j = 0; j < N; j++) sum += 1.0f / (1.0f + expf(-xr[j]));
        double S = sum + 1e-20;
        for (int64_t j = 0; j < N; j++) dot += (double)dr[j] * (1.0f / (1.0f + expf(-xr[j]))) / S;
        for (int64_t j = 0; j < N; j++) {
            double sj = 1.0f / (1.0f + expf(-xr[j]));
            o[j] = (float)(sj * (1.0 - sj) * ((double)dr[j] - dot) / S);
        }
    }
    return MG_OK;
}

static int sigmoid_norm_grad(mg_graph *g, const mg_node *n, mg_tensor *const *dout, const bool *need, mg_tensor **din) {
    if (!need[0] || !dout[0]) return MG_OK;
    mg_tensor *in[2] = {dout[0], n->in[0]};
    mg_node *b = mg_node_new(g, MG_OP_SIGMOID_NORM_BWD, NULL, 2, in, NULL);
    din[0] = b ? b->out[0] : NULL;
    return b ? MG_OK : mg_graph_error(g)->code;
}

static void cost_sigmoid_norm(const mg_node *n, double *flops, double *bytes) {
    double e = (double)mg_numel(n->out[0]);
    *flops = (n->op == MG_OP_SIGMOID_NORM ? 6.0 : 14.0) * e;
    *bytes = 4.0 * e * (double)(n->n_in + 1);
}

/* ---- moe_expert_bias_update ------------------------------------------------------------- */
static int infer_bias_update(const mg_node *n, mg_tensor_desc *out, mg_error *err) {
    const mg_tensor *b = n->in[0], *c = n->in[1];
    if (b->dtype != MG_F32 || b->ndim != 1 || !mg_same_shape(b, c) || c->dtype != MG_F32)
        return mg_shape_error(err, n, "bias and counts must be f32 [experts]");
    if (!(n->attrs.moe.rate >= 0) || !isfinite(n->attrs.moe.rate)) return mg_shape_error(err, n, "rate must be >= 0");
    mg_desc_of(b, &out[0]);
    return 1;
}

static int bias_update_cpu(const mg_kernel_args *a, mg_error *err) {
    (void)err;
    int64_t E = a->node->in[0]->shape[0];
    const float *b = a->in[0], *c = a->in[1];
    float *o = a->out[0], rate = a->node->attrs.moe.rate;
    double sum = 0;
    for (int64_t e = 0; e < E; e++) sum += c[e];
    float mean = (float)(sum / (double)E); /* Megatron: tokens.sum(-1) / E, in fp32 */
    for (int64_t e = 0; e < E; e++) {
        float off = mean - c[e];
        o[e] = b[e] + (off > 0 ? rate : off < 0 ? -rate : 0.0f);
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

const mg_op_def mg_opdef_MOE_ROUTE = {"moe_route", 1, 2, 0, infer_route, route_grad, cost_route, route_cpu, NULL, .shard = mg_shard_rule_replicated};
const mg_op_def mg_opdef_MOE_ROUTE_BWD = {"moe_route_bwd", 3, 4, MG_OPF_NO_GRAD, infer_route_bwd, NULL,
                                          cost_route, route_bwd_cpu, NULL, .shard = mg_shard_rule_replicated};
const mg_op_def mg_opdef_MOE_TOPK_COUNT = {"moe_topk_count", 1, 1, MG_OPF_NO_GRAD, infer_topk_count, NULL,
                                           cost_count, topk_count_cpu, NULL, .shard = shard_count};
const mg_op_def mg_opdef_MOE_MAP_COUNT = {"moe_map_count", 1, 1, MG_OPF_NO_GRAD, infer_map_count, NULL,
                                          cost_count, map_count_cpu, NULL, .shard = shard_count};
const mg_op_def mg_opdef_SIGMOID_NORM = {"sigmoid_norm", 1, 1, 0, infer_sigmoid_norm, sigmoid_norm_grad,
                                         cost_sigmoid_norm, sigmoid_norm_cpu, NULL, .shard = mg_shard_rule_rowwise};
const mg_op_def mg_opdef_SIGMOID_NORM_BWD = {"sigmoid_norm_bwd", 2, 2, MG_OPF_NO_GRAD, infer_sigmoid_norm, NULL,
                                             cost_sigmoid_norm, sigmoid_norm_bwd_cpu, NULL, .shard = mg_shard_rule_rowwise};
const mg_op_def mg_opdef_MOE_EXPERT_BIAS_UPDATE = {"moe_expert_bias_update", 2, 2, MG_OPF_NO_GRAD, infer_bias_update,
                                                   NULL, NULL, bias_update_cpu, NULL,
                                                   .shard = mg_shard_rule_replicated};
const mg_op_def mg_opdef_LOGSUMEXP = {"logsumexp", 1, 1, 0, infer_lse, lse_grad, cost_lse, lse_cpu, NULL,
                                     .shard = mg_shard_rule_replicated, .f32_out = 1u};
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
    at.moe.score = o->score;
    at.moe.num_groups = o->num_groups;
    at.moe.group_topk = o->group_topk;
    at.moe.scaling = o->scaling;
    mg_tensor *in[2] = {logits, o->expert_bias};
    mg_node *n = mg_node_new(g, MG_OP_MOE_ROUTE, &at, o->expert_bias ? 2 : 1, in, NULL);
    if (!n) return mg_graph_error(g)->code;
    *probs = n->out[0];
    *map = n->out[1];
    return MG_OK;
}

static mg_tensor *count_node(mg_graph *g, mg_op op, mg_tensor *x, int topk, int64_t samples) {
    mg_attrs at;
    memset(&at, 0, sizeof at);
    at.moe.topk = topk;
    at.moe.samples = samples;
    mg_node *n = mg_node_new(g, op, &at, 1, &x, NULL);
    return n ? n->out[0] : NULL;
}

mg_tensor *mg_moe_topk_count(mg_graph *g, mg_tensor *logits, int topk) {
    return count_node(g, MG_OP_MOE_TOPK_COUNT, logits, topk, 0);
}

mg_tensor *mg_moe_topk_count_samples(mg_graph *g, mg_tensor *logits, int topk, int64_t samples) {
    return count_node(g, MG_OP_MOE_TOPK_COUNT, logits, topk, samples);
}

mg_tensor *mg_moe_map_count(mg_graph *g, mg_tensor *map) { return count_node(g, MG_OP_MOE_MAP_COUNT, map, 0, 0); }

mg_tensor *mg_sigmoid_norm(mg_graph *g, mg_tensor *x) {
    mg_node *n = mg_node_new(g, MG_OP_SIGMOID_NORM, NULL, 1, &x, NULL);
    return n ? n->out[0] : NULL;
}

mg_tensor *mg_moe_expert_bias_update(mg_graph *g, mg_tensor *bias, mg_tensor *counts, float rate) {
    mg_attrs at;
    memset(&at, 0, sizeof at);
    at.moe.rate = rate;
    mg_tensor *in[2] = {bias, counts};
    mg_node *n = mg_node_new(g, MG_OP_MOE_EXPERT_BIAS_UPDATE, &at, 2, in, NULL);
    return n ? n->out[0] : NULL;
}

mg_tensor *mg_logsumexp(mg_graph *g, mg_tensor *x) {
    mg_node *n = mg_node_new(g, MG_OP_LOGSUMEXP, NULL, 1, &x, NULL);
    return n ? n->out[0] : NULL;
}

mg_tensor *mg_moe_aux_loss_scores(mg_graph *g, mg_tensor *scores, mg_tensor *logits, int topk) {
    if (!scores || !logits) return NULL;
    if (logits->ndim != 2 || !mg_same_shape(scores, logits)) {
        mg_graph_fail(g, MG_ERR_SHAPE, "moe aux loss: scores and logits must be [tokens, experts]");
        return NULL;
    }
    double T = (double)logits->shape[0], E = (double)logits->shape[1];
    mg_tensor *p_sum = mg_sum(g, scores, 0, false);                 /* [E]: T · P_i */
    mg_tensor *count = mg_moe_topk_count(g, logits, topk);          /* [E]: T · k · f_i */
    mg_tensor *s = mg_sum(g, mg_mul(g, p_sum, count), MG_ALL_AXES, false);
    return mg_scale(g, s, (float)(E / ((double)topk * T * T)));
}

mg_tensor *mg_moe_aux_loss(mg_graph *g, mg_tensor *logits, int topk) {
    return logits ? mg_moe_aux_loss_scores(g, mg_softmax(g, logits), logits, topk) : NULL;
}

mg_tensor *mg_moe_seq_aux_loss(mg_graph *g, mg_tensor *scores, mg_tensor *logits, int topk, int64_t samples) {
    if (!scores || !logits) return NULL;
    if (logits->ndim != 2 || !mg_same_shape(scores, logits) || samples < 1 || logits->shape[0] % samples) {
        mg_graph_fail(g, MG_ERR_SHAPE, "moe sequence aux loss: scores and logits [tokens, experts] of %lld samples",
                      (long long)samples);
        return NULL;
    }
    int64_t E = logits->shape[1], S = logits->shape[0] / samples;
    /* per sample b: E/(k S²) Σ_i (Σ_{t of b} P_ti) · count_bi, then the mean over samples */
    mg_tensor *p = mg_sum(g, mg_reshape(g, scores, 3, (int64_t[]){S, samples, E}), 0, false); /* [B, E] */
    mg_tensor *count = mg_moe_topk_count_samples(g, logits, topk, samples);                       /* [B, E] */
    mg_tensor *s = mg_sum(g, mg_mul(g, p, count), MG_ALL_AXES, false);
    return mg_scale(g, s, (float)((double)E / ((double)topk * (double)S * (double)S) / (double)samples));
}

mg_tensor *mg_moe_z_loss(mg_graph *g, mg_tensor *logits) {
    mg_tensor *z = mg_logsumexp(g, logits);
    return mg_mean(g, mg_mul(g, z, z), MG_ALL_AXES, false);
}

/* Softmax cross-entropy over the last dimension, fused with its reduction.
 *
 * cross_entropy(logits f32 [..., V], targets i32 [...]) -> two outputs:
 *   0: loss [1] = mean over tokens with target != ignore_index of lse - logits[target]
 *      (0 when every token is ignored); accumulated in double;
 *   1: lse [...] f32, log-sum-exp of each token's logits (every token, ignored or
 *      not), saved for the backward.
 * A target outside [0, V) that is not ignore_index is a run-time error (MG_ERR_INVALID).
 *
 * cross_entropy_bwd(dloss [1], logits, targets, lse) -> dlogits [..., V]:
 *   (softmax(logits) - onehot(target)) * dloss / count; zero rows for ignored tokens.
 * Only output 0 is differentiable: a gradient flowing into lse is refused.
 */
#include <math.h>
#include <string.h>

#include "ops/op.h"

static int check_logits_targets(const mg_node *n, const mg_tensor *x, const mg_tensor *t, mg_error *err) {
    if (x->dtype != MG_F32) return mg_shape_error(err, n, "logits must be f32");
    if (t->dtype != MG_I32) return mg_shape_error(err, n, "targets must be i32");
    bool ok = x->ndim >= 2 && t->ndim == x->ndim - 1;
    for (int i = 0; ok && i < t->ndim; i++) ok = t->shape[i] == x->shape[i];
    if (!ok) return mg_shape_error(err, n, "logits must be [..., V] and targets [...] with the same leading dimensions");
    return MG_OK;
}

static int infer_xent(const mg_node *n, mg_tensor_desc *out, mg_error *err) {
    const mg_tensor *x = n->in[0], *t = n->in[1];
    int rc = check_logits_targets(n, x, t, err);
    if (rc) return rc;
    out[0].dtype = MG_F32;
    out[0].ndim = 1;
    for (int i = 0; i < MG_MAX_DIMS; i++) out[0].shape[i] = 1;
    mg_desc_of(t, &out[1]);
    out[1].dtype = MG_F32;
    return 2;
}

static int infer_xent_bwd(const mg_node *n, mg_tensor_desc *out, mg_error *err) {
    const mg_tensor *dl = n->in[0], *x = n->in[1], *t = n->in[2], *lse = n->in[3];
    int rc = check_logits_targets(n, x, t, err);
    if (rc) return rc;
    if (dl->dtype != MG_F32 || mg_numel(dl) != 1) return mg_shape_error(err, n, "dloss must be an f32 scalar");
    if (lse->dtype != MG_F32 || !mg_same_shape(lse, t)) return mg_shape_error(err, n, "lse must be f32 shaped like targets");
    mg_desc_of(x, &out[0]);
    return 1;
}

static int bad_target(mg_error *err, const mg_node *n, int64_t tok, int32_t tgt, int64_t V) {
    return mg_error_set(err, MG_ERR_INVALID, "%s: target %d of token %lld outside [0, %lld) and not ignore_index %d",
                        mg_op_name(n->op), (int)tgt, (long long)tok, (long long)V, (int)n->attrs.xent.ignore_index);
}

static int xent_cpu(const mg_kernel_args *a, mg_error *err) {
    const mg_node *n = a->node;
    const mg_tensor *lt = n->in[0];
    int64_t V = lt->shape[lt->ndim - 1], T = mg_numel(lt) / V;
    int32_t ign = n->attrs.xent.ignore_index;
    const float *x = a->in[0];
    const int32_t *tg = a->in[1];
    float *loss = a->out[0], *lse = a->out[1];
    double total = 0;
    int64_t count = 0;
    for (int64_t t = 0; t < T; t++) {
        const float *xr = x + t * V;
        float m = xr[0];
        for (int64_t j = 1; j < V; j++) m = xr[j] > m ? xr[j] : m;
        double s = 0;
        for (int64_t j = 0; j < V; j++) s += expf(xr[j] - m);
        double l = (double)m + log(s);
        lse[t] = (float)l;
        if (tg[t] == ign) continue;
        if (tg[t] < 0 || tg[t] >= V) return bad_target(err, n, t, tg[t], V);
        total += l - (double)xr[tg[t]];
        count++;
    }
    loss[0] = count ? (float)(total / (double)count) : 0.0f;
    return MG_OK;
}

static int xent_bwd_cpu(const mg_kernel_args *a, mg_error *err) {
    const mg_node *n = a->node;
    const mg_tensor *lt = n->in[1];
    int64_t V = lt->shape[lt->ndim - 1], T = mg_numel(lt) / V;
    int32_t ign = n->attrs.xent.ignore_index;
    const float *dl = a->in[0], *x = a->in[1], *lse = a->in[3];
    const int32_t *tg = a->in[2];
    float *dx = a->out[0];
    int64_t count = 0;
    for (int64_t t = 0; t < T; t++) {
        if (tg[t] == ign) continue;
        if (tg[t] < 0 || tg[t] >= V) return bad_target(err, n, t, tg[t], V);
        count++;
    }
    float s = count ? (float)((double)dl[0] / (double)count) : 0.0f;
    for (int64_t t = 0; t < T; t++) {
        const float *xr = x + t * V;
        float *dr = dx + t * V;
        if (tg[t] == ign) {
            memset(dr, 0, (size_t)V * sizeof *dr);
            continue;
        }
        float l = lse[t];
        for (int64_t j = 0; j < V; j++) dr[j] = expf(xr[j] - l) * s;
        dr[tg[t]] -= s;
    }
    return MG_OK;
}

static void cost_xent(const mg_node *n, double *flops, double *bytes) {
    const mg_tensor *x = n->in[n->op == MG_OP_CROSS_ENTROPY ? 0 : 1];
    double e = (double)mg_numel(x);
    *flops = 3.0 * e;
    *bytes = (n->op == MG_OP_CROSS_ENTROPY ? 4.0 : 8.0) * e;
}

static int xent_grad(mg_graph *g, const mg_node *n, mg_tensor *const *dout, const bool *need, mg_tensor **din) {
    if (n->n_out > 1 && dout[1])
        return mg_graph_fail(g, MG_ERR_UNSUPPORTED, "cross_entropy: its lse output is not differentiable");
    if (!need[0] || !dout[0]) return MG_OK; /* targets (need[1]) are integers: no gradient */
    mg_tensor *in[4] = {dout[0], n->in[0], n->in[1], n->out[1]};
    mg_node *b = mg_node_new(g, MG_OP_CROSS_ENTROPY_BWD, &n->attrs, 4, in, NULL);
    din[0] = b ? b->out[0] : NULL;
    return MG_OK;
}

const mg_op_def mg_opdef_CROSS_ENTROPY = {"cross_entropy", 2, 2, 0, infer_xent, xent_grad, cost_xent, xent_cpu, NULL};
const mg_op_def mg_opdef_CROSS_ENTROPY_BWD = {"cross_entropy_bwd", 4, 4, MG_OPF_NO_GRAD, infer_xent_bwd, NULL,
                                              cost_xent, xent_bwd_cpu, NULL};

mg_tensor *mg_cross_entropy(mg_graph *g, mg_tensor *logits, mg_tensor *targets, int32_t ignore_index) {
    mg_attrs at;
    memset(&at, 0, sizeof at);
    at.xent.ignore_index = ignore_index;
    mg_tensor *in[2] = {logits, targets};
    mg_node *n = mg_node_new(g, MG_OP_CROSS_ENTROPY, &at, 2, in, NULL);
    return n ? n->out[0] : NULL;
}

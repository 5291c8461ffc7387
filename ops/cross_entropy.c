/* Softmax cross-entropy over the last dimension, fused with its reduction.
 *
 * xent_count(targets i32 [...]) -> count f32 [1]: the tokens whose target is not
 *   ignore_index, the denominator of the loss's mean.
 * cross_entropy(logits f32 [..., V], targets i32 [...], count f32 [1]) -> two outputs:
 *   0: loss [1] = sum over tokens with target != ignore_index of lse - logits[target],
 *      divided by count (0 when count is 0); accumulated in double;
 *   1: lse [...] f32, log-sum-exp of each token's logits (every token, ignored or
 *      not), saved for the backward.
 * A target outside [0, V) that is not ignore_index is a run-time error (MG_ERR_INVALID).
 *
 * cross_entropy_bwd(dloss [1], logits, targets, lse, count) -> dlogits [..., V]:
 *   (softmax(logits) - onehot(target)) * dloss / count; zero rows for ignored tokens.
 * Only output 0 is differentiable: a gradient flowing into lse is refused.
 *
 * Why the count is an input (mg_cross_entropy builds both nodes): the mean is over the
 * tokens kept in the whole micro-batch, and a partitioner that gives a rank part of
 * the tokens (context parallelism) must divide that rank's sum by the count of all of
 * them, not of its own. As a node of its own, the count follows the sharding rules:
 * counted on the whole replicated labels it is whole; counted on a sequence split it
 * is a partial sum, and the conversion to whole is an all-reduce like any other. With
 * an ignore index the ranks' counts differ, so the mean of the ranks' means would not
 * be the serial loss.
 */
#include <math.h>
#include <string.h>

#include "ops/fastmath.h"
#include "ops/op.h"
#include "ops/shard.h"
#include "ops/simd.h"

/* The row loops below run over the vocabulary (50K logits per token for GPT-2) and
 * are written so that they vectorise (MG_SIMD clones): the maximum through the floats'
 * order-preserving integer keys (an integer max reduction vectorises, a float one does
 * not without -ffast-math; a NaN logit's key is above every finite key, so the maximum
 * and the loss become NaN, as they did), the exponentials through mg_expf into a
 * scratch chunk, and their sum in eight interleaved double partial sums combined in a
 * fixed order: the same order on every machine and in every clone. */

/* (chunks of the row on the stack: a multiple of 8, so each value meets the same
 * partial sum as in one pass over the row) */
#define XENT_CHUNK 1024
static inline double row_sumexp(const float *x, int64_t V, float m) {
    float e[XENT_CHUNK];
    double acc[8] = {0}, tail = 0;
    for (int64_t j0 = 0; j0 < V; j0 += XENT_CHUNK) {
        int64_t n = V - j0 < XENT_CHUNK ? V - j0 : XENT_CHUNK, j = 0;
        for (int64_t i = 0; i < n; i++) e[i] = mg_expf(x[j0 + i] - m);
        for (; j + 8 <= n; j += 8)
            for (int l = 0; l < 8; l++) acc[l] += (double)e[j + l];
        for (; j < n; j++) tail += (double)e[j]; /* (the row's last V % 8) */
    }
    return (((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]))) + tail;
}

static int check_logits_targets(const mg_node *n, const mg_tensor *x, const mg_tensor *t, mg_error *err) {
    if (x->dtype != MG_F32) return mg_shape_error(err, n, "logits must be f32");
    if (t->dtype != MG_I32) return mg_shape_error(err, n, "targets must be i32");
    bool ok = x->ndim >= 2 && t->ndim == x->ndim - 1;
    for (int i = 0; ok && i < t->ndim; i++) ok = t->shape[i] == x->shape[i];
    if (!ok) return mg_shape_error(err, n, "logits must be [..., V] and targets [...] with the same leading dimensions");
    return MG_OK;
}

static int check_count(const mg_node *n, const mg_tensor *c, mg_error *err) {
    if (c->dtype != MG_F32 || mg_numel(c) != 1) return mg_shape_error(err, n, "count must be an f32 scalar");
    return MG_OK;
}

/* x over the count input, in double; a count of 0 (no token kept) gives 0. */
static float over_count(double x, const float *count) { return count[0] > 0 ? (float)(x / (double)count[0]) : 0.0f; }

static int infer_xent(const mg_node *n, mg_tensor_desc *out, mg_error *err) {
    const mg_tensor *x = n->in[0], *t = n->in[1];
    int rc = check_logits_targets(n, x, t, err);
    if (!rc) rc = check_count(n, n->in[2], err);
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
    if (!rc) rc = check_count(n, n->in[4], err);
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

MG_SIMD static int xent_cpu(const mg_kernel_args *a, mg_error *err) {
    const mg_node *n = a->node;
    const mg_tensor *lt = n->in[0];
    int64_t V = lt->shape[lt->ndim - 1], T = mg_numel(lt) / V;
    int32_t ign = n->attrs.xent.ignore_index;
    const float *x = a->in[0];
    const int32_t *tg = a->in[1];
    float *loss = a->out[0], *lse = a->out[1];
    double total = 0;
    for (int64_t t = 0; t < T; t++) {
        const float *xr = x + t * V;
        float m = mg_row_max(xr, V);
        double l = (double)m + log(row_sumexp(xr, V, m));
        lse[t] = (float)l;
        if (tg[t] == ign) continue;
        if (tg[t] < 0 || tg[t] >= V) return bad_target(err, n, t, tg[t], V);
        total += l - (double)xr[tg[t]];
    }
    loss[0] = over_count(total, a->in[2]);
    return MG_OK;
}

/* Full vocabulary size: the logits' logical last dimension (the local block's when
 * the logits are not vocab-parallel). */
static int64_t vocab_total(const mg_tensor *logits) { return logits->logical.shape[logits->logical.ndim - 1]; }

MG_SIMD static int xent_bwd_cpu(const mg_kernel_args *a, mg_error *err) {
    const mg_node *n = a->node;
    const mg_tensor *lt = n->in[1];
    int64_t V = lt->shape[lt->ndim - 1], T = mg_numel(lt) / V, Vt = vocab_total(lt);
    int64_t off = n->attrs.xent.vocab_offset;
    int32_t ign = n->attrs.xent.ignore_index;
    const float *dl = a->in[0], *x = a->in[1], *lse = a->in[3];
    const int32_t *tg = a->in[2];
    float *dx = a->out[0];
    for (int64_t t = 0; t < T; t++)
        if (tg[t] != ign && (tg[t] < 0 || tg[t] >= Vt)) return bad_target(err, n, t, tg[t], Vt);
    float s = over_count(dl[0], a->in[4]);
    for (int64_t t = 0; t < T; t++) {
        const float *xr = x + t * V;
        float *dr = dx + t * V;
        if (tg[t] == ign) {
            memset(dr, 0, (size_t)V * sizeof *dr);
            continue;
        }
        float l = lse[t];
        for (int64_t j = 0; j < V; j++) {
            float d = xr[j] - l; /* (below -87, where mg_expf clamps, the softmax is 0 in float) */
            dr[j] = d < -87.0f ? 0.0f : mg_expf(d) * s;
        }
        int64_t col = (int64_t)tg[t] - off; /* the one-hot lands on this block only if it owns the target */
        if (col >= 0 && col < V) dr[col] -= s;
    }
    return MG_OK;
}

/* ---- vocab-parallel pieces (Megatron's VocabParallelCrossEntropy) ----------------------
 * xent_vp_max(logits [..., Vl]) -> m [...]: the local row maximum (then all-reduce MAX).
 * xent_vp_parts(logits, targets, gmax) -> stats [..., 2]: per token the local sum of
 *   exp(logit - gmax) and the target's logit if this block owns it, else 0 (then one
 *   all-reduce SUM of both).
 * xent_vp_loss(stats, gmax, targets, count) -> loss [1], lse [...]: lse = gmax + log(sum),
 *   loss the sum of lse - target logit over non-ignored tokens divided by count; the
 *   backward is the local cross_entropy_bwd with the global lse. */
static int infer_vp_max(const mg_node *n, mg_tensor_desc *out, mg_error *err) {
    const mg_tensor *x = n->in[0];
    if (x->dtype != MG_F32 || x->ndim < 2) return mg_shape_error(err, n, "logits must be f32 [..., V]");
    out[0].dtype = MG_F32;
    out[0].ndim = x->ndim - 1;
    for (int i = 0; i < MG_MAX_DIMS; i++) out[0].shape[i] = i < x->ndim - 1 ? x->shape[i] : 1;
    return 1;
}

MG_SIMD static int vp_max_cpu(const mg_kernel_args *a, mg_error *err) {
    (void)err;
    const mg_tensor *lt = a->node->in[0];
    int64_t V = lt->shape[lt->ndim - 1], T = mg_numel(lt) / V;
    const float *x = a->in[0];
    float *m = a->out[0];
    for (int64_t t = 0; t < T; t++) m[t] = mg_row_max(x + t * V, V);
    return MG_OK;
}

static int infer_vp_parts(const mg_node *n, mg_tensor_desc *out, mg_error *err) {
    const mg_tensor *x = n->in[0], *t = n->in[1], *m = n->in[2];
    int rc = check_logits_targets(n, x, t, err);
    if (rc) return rc;
    if (m->dtype != MG_F32 || !mg_same_shape(m, t)) return mg_shape_error(err, n, "gmax must be f32 shaped like targets");
    out[0].dtype = MG_F32;
    out[0].ndim = t->ndim + 1;
    for (int i = 0; i < MG_MAX_DIMS; i++) out[0].shape[i] = i < t->ndim ? t->shape[i] : 1;
    out[0].shape[t->ndim] = 2;
    return 1;
}

MG_SIMD static int vp_parts_cpu(const mg_kernel_args *a, mg_error *err) {
    (void)err;
    const mg_node *n = a->node;
    const mg_tensor *lt = n->in[0];
    int64_t V = lt->shape[lt->ndim - 1], T = mg_numel(lt) / V, off = n->attrs.xent.vocab_offset;
    const float *x = a->in[0], *m = a->in[2];
    const int32_t *tg = a->in[1];
    float *st = a->out[0];
    for (int64_t t = 0; t < T; t++) {
        const float *xr = x + t * V;
        double s = row_sumexp(xr, V, m[t]);
        int64_t col = (int64_t)tg[t] - off;
        st[2 * t] = (float)s;
        st[2 * t + 1] = (col >= 0 && col < V) ? xr[col] : 0.0f;
    }
    return MG_OK;
}

static int infer_vp_loss(const mg_node *n, mg_tensor_desc *out, mg_error *err) {
    const mg_tensor *st = n->in[0], *m = n->in[1], *t = n->in[2];
    int rc = check_count(n, n->in[3], err);
    if (rc) return rc;
    if (t->dtype != MG_I32 || m->dtype != MG_F32 || !mg_same_shape(m, t))
        return mg_shape_error(err, n, "gmax (f32) and targets (i32) must share a shape");
    bool ok = st->dtype == MG_F32 && st->ndim == t->ndim + 1 && st->shape[t->ndim] == 2;
    for (int i = 0; ok && i < t->ndim; i++) ok = st->shape[i] == t->shape[i];
    if (!ok) return mg_shape_error(err, n, "stats must be f32 [..., 2] over the targets' shape");
    out[0].dtype = MG_F32;
    out[0].ndim = 1;
    for (int i = 0; i < MG_MAX_DIMS; i++) out[0].shape[i] = 1;
    mg_desc_of(t, &out[1]);
    out[1].dtype = MG_F32;
    return 2;
}

static int vp_loss_cpu(const mg_kernel_args *a, mg_error *err) {
    (void)err;
    const mg_node *n = a->node;
    int64_t T = mg_numel(n->in[2]);
    const float *st = a->in[0], *m = a->in[1];
    const int32_t *tg = a->in[2];
    float *loss = a->out[0], *lse = a->out[1];
    double total = 0;
    for (int64_t t = 0; t < T; t++) {
        double l = (double)m[t] + log((double)st[2 * t]);
        lse[t] = (float)l;
        if (tg[t] == n->attrs.xent.ignore_index) continue;
        total += l - (double)st[2 * t + 1];
    }
    loss[0] = over_count(total, a->in[3]);
    return MG_OK;
}

const mg_op_def mg_opdef_XENT_VP_MAX = {"xent_vp_max", 1, 1, MG_OPF_NO_GRAD, infer_vp_max, NULL, NULL, vp_max_cpu, NULL, .shard = NULL,
                                        .f32_out = 1u};
const mg_op_def mg_opdef_XENT_VP_PARTS = {"xent_vp_parts", 3, 3, MG_OPF_NO_GRAD, infer_vp_parts, NULL, NULL,
                                          vp_parts_cpu, NULL, .shard = NULL, .f32_out = ~0u};
const mg_op_def mg_opdef_XENT_VP_LOSS = {"xent_vp_loss", 4, 4, MG_OPF_NO_GRAD, infer_vp_loss, NULL, NULL, vp_loss_cpu,
                                         NULL, .shard = NULL, .f32_out = ~0u};

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
    mg_tensor *in[5] = {dout[0], n->in[0], n->in[1], n->out[1], n->in[2]};
    mg_node *b = mg_node_new(g, MG_OP_CROSS_ENTROPY_BWD, &n->attrs, 5, in, NULL);
    din[0] = b ? b->out[0] : NULL;
    return MG_OK;
}

/* Sharding (ops/op.h): logits split over the vocabulary run as Megatron's
 * VocabParallelCrossEntropy: local max, all-reduce MAX, local sum-exp and target
 * logit, all-reduce SUM, loss. That is several nodes with collectives between them, so
 * the rule asks the partitioner to expand the op; otherwise everything is whole. */
static int shard_xent(const mg_node *n, const mg_shard_ctx *c, mg_shard_io *io, mg_error *err) {
    (void)c, (void)err;
    int last = n->in[0]->ndim - 1;
    if (mg_sh_is_split(io->in[0]) && io->in[0].dim == last) {
        io->expand = true;
        io->want[0] = io->in[0];
        io->want[1] = mg_sh_full();
    } else {
        io->want[0] = io->want[1] = mg_sh_full();
    }
    io->want[2] = mg_sh_full(); /* the count of every kept token */
    io->out[0] = io->out[1] = mg_sh_full();
    return MG_OK;
}

/* Backward (dloss, logits, targets, stats, count): the logits gradient follows the
 * logits' vocabulary split (offset derived from the placement). */
static int shard_xent_bwd(const mg_node *n, const mg_shard_ctx *c, mg_shard_io *io, mg_error *err) {
    (void)c, (void)err;
    mg_sharding s = io->in[1];
    io->want[0] = io->want[2] = io->want[3] = io->want[4] = mg_sh_full();
    if (mg_sh_is_split(s) && s.dim == n->in[1]->ndim - 1) io->want[1] = io->out[0] = s;
    else io->want[1] = io->out[0] = mg_sh_full();
    return MG_OK;
}

const mg_op_def mg_opdef_CROSS_ENTROPY = {"cross_entropy", 3, 3, 0, infer_xent, xent_grad, cost_xent, xent_cpu, NULL, .shard = shard_xent,
                                          .f32_out = ~0u};
const mg_op_def mg_opdef_CROSS_ENTROPY_BWD = {"cross_entropy_bwd", 5, 5, MG_OPF_NO_GRAD, infer_xent_bwd, NULL,
                                              cost_xent, xent_bwd_cpu, NULL, .shard = shard_xent_bwd};

/* ---- xent_count ------------------------------------------------------------------------ */
static int infer_xent_count(const mg_node *n, mg_tensor_desc *out, mg_error *err) {
    if (n->in[0]->dtype != MG_I32) return mg_shape_error(err, n, "targets must be i32");
    out[0].dtype = MG_F32;
    out[0].ndim = 1;
    for (int i = 0; i < MG_MAX_DIMS; i++) out[0].shape[i] = 1;
    return 1;
}

static int xent_count_cpu(const mg_kernel_args *a, mg_error *err) {
    (void)err;
    const int32_t *tg = a->in[0];
    int64_t T = mg_numel(a->node->in[0]), count = 0;
    for (int64_t t = 0; t < T; t++) count += tg[t] != a->node->attrs.xent.ignore_index;
    ((float *)a->out[0])[0] = (float)count; /* exact below 2^24 tokens per micro-batch */
    return MG_OK;
}

/* Counting a share of the tokens gives a term of the whole count. */
static int shard_xent_count(const mg_node *n, const mg_shard_ctx *c, mg_shard_io *io, mg_error *err) {
    (void)n, (void)c, (void)err;
    io->want[0] = io->in[0];
    io->out[0] = mg_sh_is_split(io->in[0]) ? mg_sh_partial() : mg_sh_full();
    return MG_OK;
}

const mg_op_def mg_opdef_XENT_COUNT = {"xent_count", 1, 1, MG_OPF_NO_GRAD, infer_xent_count, NULL, NULL,
                                       xent_count_cpu, NULL, .shard = shard_xent_count};

mg_tensor *mg_cross_entropy(mg_graph *g, mg_tensor *logits, mg_tensor *targets, int32_t ignore_index) {
    mg_attrs at;
    memset(&at, 0, sizeof at);
    at.xent.ignore_index = ignore_index;
    if (logits && targets && targets->dtype != MG_I32) { /* named as the op the caller asked for */
        mg_graph_fail(g, MG_ERR_SHAPE, "cross_entropy: targets must be i32");
        return NULL;
    }
    mg_node *c = mg_node_new(g, MG_OP_XENT_COUNT, &at, 1, &targets, NULL);
    mg_tensor *in[3] = {logits, targets, c ? c->out[0] : NULL};
    mg_node *n = c ? mg_node_new(g, MG_OP_CROSS_ENTROPY, &at, 3, in, NULL) : NULL;
    return n ? n->out[0] : NULL;
}

/* Tensor and sequence parallelism: one sharding rule per op.
 *
 * States over the tp group: FULL (replicated), SPLIT(d) (contiguous block d of tp),
 * PARTIAL (a term of a sum over tp). Parameters start in the state the plan's shard
 * rules give (Megatron's GPT: column-parallel c_attn / c_fc split on output features,
 * row-parallel c_proj split on input features, vocab-parallel wte). Every op then
 * follows its inputs, and where two states meet that an op cannot combine, the
 * input is converted (partition.c). Megatron's collectives fall out of that:
 *
 *  - row-parallel linear: matmul(SPLIT(last), W SPLIT on K) is PARTIAL; its bias_add
 *    needs a whole input, so the all-reduce (or, with sequence parallelism, the
 *    reduce-scatter along the sequence) is inserted right there, before the bias:
 *    see rule_bias_add and part_resolve_target;
 *  - column-parallel linear: matmul(FULL, W SPLIT on N) is SPLIT(last); under sequence
 *    parallelism its input is SPLIT(0), which an all-gather along the sequence turns
 *    FULL first (rule_matmul); in backward, the partial input gradient is all-reduced
 *    (or reduce-scattered) where the layer norm backward needs it;
 *  - vocab-parallel embedding: masked lookups (vocab_offset) give PARTIAL, all-reduced
 *    (reduce-scattered with SP) where the position embedding is added;
 *  - vocab-parallel cross-entropy: expanded into local max, all-reduce MAX, local
 *    sum-exp and target logit, all-reduce SUM, loss (rule_cross_entropy);
 *  - norms with SP: LayerNorm weight gradients of a sequence shard are PARTIAL and
 *    all-reduced over tp before the optimizer uses them.
 */
#include <fnmatch.h>
#include <string.h>

#include "partitioners/partition_internal.h"

mg_sharding tp_param_state(const part_ctx *c, const mg_tensor *lt) {
    for (int i = c->plan->n_rules - 1; i >= 0; i--) {
        const mg_shard_rule *r = &c->plan->rules[i];
        if (fnmatch(r->pattern, lt->name, 0) == 0) {
            if (r->dim < lt->ndim && lt->shape[r->dim] % c->tp == 0) return sh_split(r->dim);
            return sh_full(); /* a rule that does not divide leaves the tensor whole */
        }
    }
    return sh_full();
}

/* ---- helpers ----------------------------------------------------------------------------- */
#define MAXIN 16

typedef struct rule_io {
    mg_sharding in[MAXIN];   /* states the inputs have */
    mg_sharding want[MAXIN]; /* states the op needs */
    mg_sharding out[MAXIN];  /* states of the outputs */
    mg_attrs attrs;
} rule_io;

static bool is_split(mg_sharding s) { return s.kind == MG_SHARD_SPLIT; }
static bool is_partial(mg_sharding s) { return s.kind == MG_SHARD_PARTIAL; }
static bool is_full(mg_sharding s) { return s.kind == MG_SHARD_FULL; }

/* Whole (non-partial) target for input i: its own state when it is not partial. */
static mg_sharding whole(part_ctx *c, const mg_node *n, rule_io *r, int i, bool allow_seq) {
    if (!is_partial(r->in[i])) return r->in[i];
    return part_resolve_target(c, n->in[i], allow_seq);
}

/* ---- rules ------------------------------------------------------------------------------------ */
/* Ops applied elementwise to inputs of one shape (activations and their backward,
 * dropout, scale): every input in one state; partial only when the op is linear in
 * all its inputs. Splits along the last dimension are fine unless the op mixes
 * elements of a row (softmax, swiglu). */
static int rule_same_state(part_ctx *c, const mg_node *n, rule_io *r, bool linear, bool row_local) {
    mg_sharding t = sh_full();
    bool all_partial = true;
    for (int i = 0; i < n->n_in; i++) all_partial &= is_partial(r->in[i]);
    if (linear && all_partial) {
        t = sh_partial();
    } else {
        for (int i = 0; i < n->n_in; i++)
            if (is_split(r->in[i]) && !(row_local && r->in[i].dim == n->in[i]->ndim - 1)) {
                t = r->in[i];
                break;
            }
        if (is_full(t))
            for (int i = 0; i < n->n_in; i++)
                if (is_partial(r->in[i])) {
                    t = part_resolve_target(c, n->in[i], true);
                    break;
                }
    }
    for (int i = 0; i < n->n_in; i++) r->want[i] = t;
    for (int j = 0; j < n->n_out; j++) r->out[j] = t;
    return MG_OK;
}

/* Maps output dim d of a broadcast op to input i's dim (-1 when broadcast there). */
static int bcast_dim(const mg_node *n, int i, int d) {
    const mg_tensor *x = n->in[i], *y = n->out[0];
    int k = d - (y->ndim - x->ndim);
    if (k < 0 || x->shape[k] == 1) return -1;
    return k;
}

/* add / sub / mul with broadcasting. */
static int rule_binary(part_ctx *c, const mg_node *n, rule_io *r) {
    bool linear_both = n->op != MG_OP_MUL;
    if (is_partial(r->in[0]) && is_partial(r->in[1]) && linear_both) {
        r->want[0] = r->want[1] = r->out[0] = sh_partial();
        return MG_OK;
    }
    if (n->op == MG_OP_MUL && (is_partial(r->in[0]) != is_partial(r->in[1]))) {
        int p = is_partial(r->in[0]) ? 0 : 1, q = 1 - p;
        if (is_full(r->in[q])) { /* partial * replicated stays a partial sum */
            r->want[p] = sh_partial();
            r->want[q] = sh_full();
            r->out[0] = sh_partial();
            return MG_OK;
        }
    }
    /* choose the output state: the first input split on a non-broadcast dim */
    mg_sharding t = sh_full();
    for (int i = 0; i < 2 && is_full(t); i++) {
        mg_sharding s = whole(c, n, r, i, true);
        if (is_split(s)) {
            int od = s.dim + (n->out[0]->ndim - n->in[i]->ndim);
            t = sh_split(od);
        }
    }
    for (int i = 0; i < 2; i++) {
        if (is_split(t)) {
            int k = bcast_dim(n, i, t.dim);
            r->want[i] = k < 0 ? sh_full() : sh_split(k);
        } else {
            r->want[i] = sh_full();
        }
    }
    r->out[0] = t;
    return MG_OK;
}

/* x [..., N] + b [N]: the bias of a row-parallel layer meets a partial x here, and the
 * reduction happens before the bias is added (Megatron). */
static int rule_bias_add(part_ctx *c, const mg_node *n, rule_io *r) {
    mg_sharding sx = whole(c, n, r, 0, true);
    int last = n->in[0]->ndim - 1;
    r->want[0] = sx;
    r->want[1] = is_split(sx) && sx.dim == last ? sh_split(0) : sh_full();
    r->out[0] = sx;
    return MG_OK;
}

static int rule_matmul(part_ctx *c, const mg_node *n, rule_io *r) {
    (void)c;
    const mg_tensor *A = n->in[0], *B = n->in[1];
    bool ta = n->attrs.matmul.trans_a, tb = n->attrs.matmul.trans_b;
    int aK = ta ? A->ndim - 2 : A->ndim - 1;
    int bK = tb ? B->ndim - 1 : B->ndim - 2, bN = tb ? B->ndim - 2 : B->ndim - 1;
    int on = n->out[0]->ndim;
    bool batched = B->ndim > 2;
    mg_sharding sa = r->in[0], sb = r->in[1];
    /* a partial factor times a replicated one stays partial (matmul is bilinear) */
    if (is_partial(sa) && is_full(sb)) {
        r->want[0] = sa, r->want[1] = sb, r->out[0] = sh_partial();
        return MG_OK;
    }
    if (is_partial(sb) && is_full(sa)) {
        r->want[0] = sa, r->want[1] = sb, r->out[0] = sh_partial();
        return MG_OK;
    }
    if (is_partial(sa)) sa = sh_full();
    if (is_partial(sb)) sb = sh_full();
    bool aK_split = is_split(sa) && sa.dim == aK, bK_split = is_split(sb) && sb.dim == bK;
    bool bN_split = is_split(sb) && sb.dim == bN;
    bool aR_split = is_split(sa) && sa.dim != aK; /* a row / batch dim of A */
    /* A's row dims map to the output: batch dims keep their index; A's M dim is on-2 */
    int a_out = -1;
    if (aR_split) a_out = sa.dim < A->ndim - 2 ? sa.dim : on - 2;
    if (batched) {
        bool bB_split = is_split(sb) && sb.dim < B->ndim - 2;
        if (aR_split && sa.dim < A->ndim - 2 && bB_split && sb.dim == sa.dim) {
            r->want[0] = sa, r->want[1] = sb, r->out[0] = sh_split(sa.dim);
            return MG_OK;
        }
        if (bB_split) sb = sh_full(), bB_split = false, bK_split = bN_split = false;
        if (aR_split && sa.dim < A->ndim - 2) { /* A split on a batch dim: split B alike */
            r->want[0] = sa, r->want[1] = sh_split(sa.dim), r->out[0] = sh_split(sa.dim);
            return MG_OK;
        }
    }
    if (aK_split && bK_split) {
        r->want[0] = sa, r->want[1] = sb, r->out[0] = sh_partial();
    } else if (is_full(sa) && bN_split) {
        r->want[0] = sa, r->want[1] = sb, r->out[0] = sh_split(on - 1);
    } else if (aR_split && is_full(sb)) {
        r->want[0] = sa, r->want[1] = sb, r->out[0] = sh_split(a_out);
    } else if (aK_split && is_full(sb)) {
        r->want[0] = sa, r->want[1] = sh_split(bK), r->out[0] = sh_partial();
    } else if (is_full(sa) && bK_split) {
        r->want[0] = sh_split(aK), r->want[1] = sb, r->out[0] = sh_partial();
    } else if ((aR_split || aK_split) && bN_split) {
        /* sequence-parallel input entering a column-parallel layer: all-gather it */
        r->want[0] = sh_full(), r->want[1] = sb, r->out[0] = sh_split(on - 1);
    } else if (aR_split && bK_split) {
        /* e.g. a weight gradient under sequence parallelism: gather the activation */
        r->want[0] = sa, r->want[1] = sh_full(), r->out[0] = sh_split(a_out);
    } else {
        r->want[0] = sh_full(), r->want[1] = sh_full(), r->out[0] = sh_full();
    }
    return MG_OK;
}

/* reshape: a split dim survives when the dims before it hold as many elements in
 * both shapes and the target dim divides. */
static int rule_reshape(part_ctx *c, const mg_node *n, rule_io *r) {
    const mg_tensor *x = n->in[0], *y = n->out[0];
    mg_sharding s = r->in[0];
    r->want[0] = s;
    r->out[0] = s;
    if (!is_split(s)) return MG_OK;
    int64_t before = mg_dims_prod(x->shape, 0, s.dim), acc = 1;
    for (int e = 0; e < y->ndim; e++) {
        if (acc == before && y->shape[e] % c->tp == 0 && y->shape[e] > 1) {
            r->out[0] = sh_split(e);
            return MG_OK;
        }
        acc *= y->shape[e];
        if (acc > before) break;
    }
    r->want[0] = sh_full();
    r->out[0] = sh_full();
    return MG_OK;
}

/* split / concat / slice / pad / transpose: splits along other dims pass through;
 * partial passes (all are linear). */
static int rule_structural(part_ctx *c, const mg_node *n, rule_io *r, int op_dim) {
    (void)c;
    mg_sharding t = r->in[0];
    if (n->op == MG_OP_CONCAT) {
        bool all_partial = true;
        for (int i = 0; i < n->n_in; i++) all_partial &= is_partial(r->in[i]);
        t = all_partial ? sh_partial() : sh_full();
        for (int i = 0; i < n->n_in && !all_partial; i++)
            if (is_split(r->in[i]) && r->in[i].dim != op_dim) {
                t = r->in[i];
                break;
            }
    } else if (is_split(t) && t.dim == op_dim) {
        t = sh_full();
    }
    for (int i = 0; i < n->n_in; i++) r->want[i] = t;
    mg_sharding o = t;
    if (n->op == MG_OP_TRANSPOSE && is_split(t))
        for (int i = 0; i < n->out[0]->ndim; i++)
            if (n->attrs.transpose.perm[i] == t.dim) o = sh_split(i);
    for (int j = 0; j < n->n_out; j++) r->out[j] = o;
    return MG_OK;
}

/* sum / mean over a dim; sum_to (gradient of broadcasting); expand. */
static int rule_reduce(part_ctx *c, const mg_node *n, rule_io *r) {
    (void)c;
    const mg_tensor *x = n->in[0], *y = n->out[0];
    mg_sharding s = r->in[0];
    r->want[0] = s;
    r->out[0] = s; /* partial stays partial: all are linear */
    if (!is_split(s)) return MG_OK;
    if (n->op == MG_OP_SUM || n->op == MG_OP_MEAN) {
        int d = n->attrs.axis.dim;
        if (d == MG_ALL_AXES || d == s.dim) {
            if (n->op == MG_OP_MEAN) r->want[0] = r->out[0] = sh_full();
            else r->out[0] = sh_partial();
        } else {
            r->out[0] = sh_split(n->attrs.axis.keepdim || s.dim < d ? s.dim : s.dim - 1);
        }
        return MG_OK;
    }
    if (n->op == MG_OP_SUM_TO) {
        int k = s.dim - (x->ndim - y->ndim);
        if (k < 0 || y->shape[k] == 1) {
            r->out[0] = sh_partial();
        } else {
            r->out[0] = sh_split(k);
        }
        return MG_OK;
    }
    /* expand */
    int od = s.dim + (y->ndim - x->ndim);
    r->out[0] = sh_split(od);
    return MG_OK;
}

/* layernorm / rmsnorm: rows must be whole; splits along token dims pass (sequence
 * parallelism); the weights stay replicated. */
static int rule_norm(part_ctx *c, const mg_node *n, rule_io *r) {
    int last = n->in[0]->ndim - 1;
    mg_sharding s = whole(c, n, r, 0, true);
    if (is_split(s) && s.dim == last) s = sh_full();
    r->want[0] = s;
    for (int i = 1; i < n->n_in; i++) r->want[i] = sh_full();
    for (int j = 0; j < n->n_out; j++) r->out[j] = s; /* stats: x's shape minus last dim */
    return MG_OK;
}

/* norm backward: dy follows x; weight gradients of a token shard are partial. */
static int rule_norm_bwd(part_ctx *c, const mg_node *n, rule_io *r) {
    /* x in the state rule_norm gave the forward: a partial x (a vocab-parallel
     * embedding with no position table added to it, as under RoPE) was resolved there */
    mg_sharding s = whole(c, n, r, 1, true);
    if (is_split(s) && s.dim == n->in[1]->ndim - 1) s = sh_full();
    r->want[0] = s;
    r->want[1] = s;
    r->want[2] = sh_full(); /* w */
    for (int i = 3; i < n->n_in; i++) r->want[i] = s;
    r->out[0] = s;
    for (int j = 1; j < n->n_out; j++) r->out[j] = is_split(s) ? sh_partial() : sh_full();
    return MG_OK;
}

/* rope(x, pos): x split anywhere but its last dim (heads under tp, tokens under sp);
 * the positions follow a token split, else stay whole. */
static int rule_rope(part_ctx *c, const mg_node *n, rule_io *r) {
    mg_sharding s = whole(c, n, r, 0, true);
    if (is_split(s) && s.dim == n->in[0]->ndim - 1) s = sh_full();
    r->want[0] = s;
    r->want[1] = is_split(s) && s.dim == 0 ? s : sh_full();
    r->out[0] = s;
    return MG_OK;
}

/* attention: heads (dim 2) or batch (dim 1) split; lse [b, nh, s] follows. */
static mg_sharding attn_state(part_ctx *c, const mg_node *n, rule_io *r) {
    for (int i = 0; i < 3; i++) {
        mg_sharding s = r->in[i + (n->op == MG_OP_ATTENTION_BWD)];
        if (is_split(s) && (s.dim == 1 || s.dim == 2)) return s;
    }
    (void)c;
    return sh_full();
}

static mg_sharding lse_of(mg_sharding s) {
    if (!is_split(s)) return s;
    return sh_split(s.dim == 2 ? 1 : 0);
}

static int rule_attention(part_ctx *c, const mg_node *n, rule_io *r) {
    mg_sharding s = attn_state(c, n, r);
    if (n->op == MG_OP_ATTENTION) {
        for (int i = 0; i < 3; i++) r->want[i] = s;
        r->out[0] = s;
        r->out[1] = lse_of(s);
    } else { /* dy, q, k, v, y, lse */
        for (int i = 0; i < 5; i++) r->want[i] = s;
        r->want[5] = lse_of(s);
        for (int j = 0; j < 3; j++) r->out[j] = s;
    }
    return MG_OK;
}

static int rule_embedding(part_ctx *c, const mg_node *n, rule_io *r) {
    (void)c;
    mg_sharding st = r->in[1];
    r->want[0] = sh_full();
    if (is_split(st) && st.dim == 0) { /* vocab-parallel: masked lookup, partial sum */
        r->want[1] = st;
        r->out[0] = sh_partial();
    } else if (is_split(st) && st.dim == 1) {
        r->want[1] = st;
        r->out[0] = sh_split(n->out[0]->ndim - 1);
    } else {
        r->want[1] = sh_full();
        r->out[0] = sh_full();
    }
    return MG_OK;
}

/* embedding_bwd(dy, ids, table): the table's state decides. */
static int rule_embedding_bwd(part_ctx *c, const mg_node *n, rule_io *r) {
    mg_sharding st = part_state(c, n->in[2]);
    r->want[1] = sh_full();
    r->want[2] = st;
    if (is_split(st) && st.dim == 0) {
        r->want[0] = sh_full();
        r->out[0] = st;
    } else if (is_split(st) && st.dim == 1) {
        r->want[0] = sh_split(n->in[0]->ndim - 1);
        r->out[0] = st;
    } else if (is_partial(r->in[0])) {
        r->want[0] = sh_partial();
        r->out[0] = sh_partial();
    } else if (is_split(r->in[0]) && r->in[0].dim < n->in[0]->ndim - 1) {
        r->want[0] = r->in[0]; /* a token shard: this rank's tokens' rows, a partial sum */
        r->want[1] = r->in[0]; /* the ids of those tokens */
        r->out[0] = sh_partial();
    } else {
        r->want[0] = sh_full();
        r->out[0] = sh_full();
    }
    return MG_OK;
}

/* Vocab-parallel cross-entropy (Megatron's VocabParallelCrossEntropy). */
static int vocab_parallel_xent(part_ctx *c, const mg_node *n) {
    const mg_tensor *lx = n->in[0], *lt = n->in[1];
    int last = lx->ndim - 1;
    mg_tensor *x = part_get(c, lx, sh_split(last)), *tg = part_get(c, lt, sh_full());
    if (!x || !tg) return c->err->code;
    mg_attrs at = n->attrs;
    at.xent.vocab_offset = x->logical.offset[last]; /* this rank's first vocabulary column */
    char nm[512];
    snprintf(nm, sizeof nm, "%s@vp_max", n->out[0]->name);
    mg_node *mx = part_emit_aux(c, n, MG_OP_XENT_VP_MAX, &at, 1, &x, nm);
    if (!mx) return c->err->code;
    mg_tensor *gmax = mg_allreduce(c->P, mx->out[0], MG_GROUP_TP, c->tp, MG_REDUCE_MAX, c->seq++);
    mg_tensor *pin[3] = {x, tg, gmax};
    snprintf(nm, sizeof nm, "%s@vp_parts", n->out[0]->name);
    mg_node *parts = gmax ? part_emit_aux(c, n, MG_OP_XENT_VP_PARTS, &at, 3, pin, nm) : NULL;
    if (!parts) return c->err->code ? c->err->code : part_graph_error(c);
    mg_tensor *stats = mg_allreduce(c->P, parts->out[0], MG_GROUP_TP, c->tp, MG_REDUCE_SUM, c->seq++);
    mg_tensor *lin[3] = {stats, gmax, tg};
    mg_node tmp = *n; /* the loss node stands for the logical cross_entropy node */
    tmp.op = MG_OP_XENT_VP_LOSS;
    tmp.n_in = 3;
    if (!stats) return part_graph_error(c);
    mg_sharding outs[2] = {sh_full(), sh_full()};
    return part_emit(c, &tmp, lin, &at, outs) ? MG_OK : c->err->code;
}

static int rule_xent_bwd(part_ctx *c, const mg_node *n, rule_io *r) {
    (void)c;
    mg_sharding s = r->in[1];
    int last = n->in[1]->ndim - 1;
    r->want[0] = sh_full();
    r->want[2] = sh_full();
    r->want[3] = sh_full();
    if (is_split(s) && s.dim == last) {
        r->want[1] = s;
        r->out[0] = s;
    } else {
        r->want[1] = sh_full();
        r->out[0] = sh_full();
    }
    return MG_OK;
}

/* sum of squares for the gradient norm: shares of split tensors are partial sums;
 * a replicated tensor is counted on tp rank 0 only, so the sum over tp counts it once. */
static int sumsq_node(part_ctx *c, const mg_node *n) {
    mg_tensor *in[MAXIN];
    int k = 0;
    if (n->n_in > MAXIN) return part_fail(c, MG_ERR_UNSUPPORTED, "sumsq over more than %d tensors", MAXIN);
    for (int i = 0; i < n->n_in; i++) {
        mg_sharding s = part_state(c, n->in[i]);
        if (is_partial(s)) s = sh_full();
        /* every rank converts (collectives must match across the group); only rank 0
         * counts a replicated tensor */
        mg_tensor *t = part_get(c, n->in[i], s);
        if (!t) return c->err->code;
        if (is_full(s) && c->tp_rank != 0) continue;
        in[k++] = t;
    }
    mg_sharding out = sh_partial();
    if (k == 0) { /* nothing to count here: a zero term */
        mg_tensor *z = mg_zeros(c->P, MG_F32, 1, (int64_t[]){1});
        if (!z) return part_graph_error(c);
        mg_placement pl = part_node_pl(c, out);
        c->st[n->out[0]->id] = (pt){z, pl};
        part_set_identity(c, z, n->out[0], &pl);
        return MG_OK;
    }
    mg_node tmp = *n;
    tmp.n_in = k;
    return part_emit(c, &tmp, in, NULL, &out) ? MG_OK : c->err->code;
}

/* adamw(p, g, m, v, lr, coef): everything in p's state. */
static int rule_adamw(part_ctx *c, const mg_node *n, rule_io *r) {
    mg_sharding s = part_state(c, n->in[0]);
    for (int i = 0; i < 4; i++) r->want[i] = s;
    r->want[4] = r->want[5] = sh_full();
    for (int j = 0; j < 3; j++) r->out[j] = s;
    return MG_OK;
}

/* Adam moments are leaves created on first use: in their parameter's state. */
static int adamw_moments(part_ctx *c, const mg_node *n) {
    mg_sharding s = part_state(c, n->in[0]);
    for (int i = 2; i < 4; i++) {
        pt *p = &c->st[n->in[i]->id];
        if (p->t || n->in[i]->src) continue;
        p->pl = mg_placement_full();
        p->pl.ax[MG_GROUP_TP] = c->tp > 1 ? s : sh_full();
        p->t = part_make_leaf(c, n->in[i], &p->pl);
        if (!p->t) return c->err->code ? c->err->code : mg_graph_error(c->P)->code;
    }
    return MG_OK;
}

/* An accumulator is a leaf created on first use in the state of what it accumulates:
 * a gradient that is a partial sum over tp (norm weights under sequence parallelism)
 * accumulates as one, and is reduced once per step instead of once per micro-batch. */
static int accumulator_leaf(part_ctx *c, const mg_node *n) {
    const mg_tensor *acc = n->in[0];
    pt *p = &c->st[acc->id];
    if (p->t || acc->src) return MG_OK;
    mg_sharding s = part_state(c, n->in[1]);
    p->pl = mg_placement_full();
    p->pl.ax[MG_GROUP_TP] = c->tp > 1 ? s : sh_full();
    p->t = part_make_leaf(c, acc, &p->pl);
    if (!p->t) return c->err->code ? c->err->code : mg_graph_error(c->P)->code;
    return MG_OK;
}

int tp_partition_node(part_ctx *c, const mg_node *n) {
    if (n->n_in > MAXIN || n->n_out > MAXIN)
        return part_fail(c, MG_ERR_UNSUPPORTED, "partitioning: %s has too many inputs", mg_op_name(n->op));
    if (c->tp > 1 && n->op == MG_OP_SUMSQ) return sumsq_node(c, n);
    if (n->op == MG_OP_ADAMW || n->op == MG_OP_ACCUMULATE) {
        int rc = n->op == MG_OP_ADAMW ? adamw_moments(c, n) : accumulator_leaf(c, n);
        if (rc) return rc;
    }
    rule_io r;
    memset(&r, 0, sizeof r);
    r.attrs = n->attrs;
    for (int i = 0; i < n->n_in; i++) r.in[i] = c->tp > 1 ? part_state(c, n->in[i]) : sh_full();
    if (c->err->code) return c->err->code;
    int rc = MG_OK;
    if (c->tp == 1) {
        for (int i = 0; i < n->n_in; i++) r.want[i] = sh_full();
        for (int j = 0; j < n->n_out; j++) r.out[j] = sh_full();
        if (n->op == MG_OP_ADAMW) rc = rule_adamw(c, n, &r);
    } else {
        switch (n->op) {
        case MG_OP_MATMUL: rc = rule_matmul(c, n, &r); break;
        case MG_OP_ADD:
        case MG_OP_SUB:
        case MG_OP_MUL: rc = rule_binary(c, n, &r); break;
        case MG_OP_BIAS_ADD: rc = rule_bias_add(c, n, &r); break;
        case MG_OP_SCALE:
        case MG_OP_ACCUMULATE:
        case MG_OP_DROPOUT: rc = rule_same_state(c, n, &r, true, false); break;
        case MG_OP_GELU:
        case MG_OP_SILU:
        case MG_OP_GELU_BWD:
        case MG_OP_SILU_BWD: rc = rule_same_state(c, n, &r, false, false); break;
        case MG_OP_SWIGLU:
        case MG_OP_SWIGLU_BWD:
        case MG_OP_SOFTMAX:
        case MG_OP_SOFTMAX_BWD: rc = rule_same_state(c, n, &r, false, true); break;
        case MG_OP_ROPE: rc = rule_rope(c, n, &r); break;
        case MG_OP_RESHAPE: rc = rule_reshape(c, n, &r); break;
        case MG_OP_SPLIT: rc = rule_structural(c, n, &r, n->attrs.split.dim); break;
        case MG_OP_CONCAT: rc = rule_structural(c, n, &r, n->attrs.axis.dim); break;
        case MG_OP_SLICE:
        case MG_OP_PAD: rc = rule_structural(c, n, &r, n->attrs.slice.dim); break;
        case MG_OP_TRANSPOSE: rc = rule_structural(c, n, &r, -1); break;
        case MG_OP_SUM:
        case MG_OP_MEAN:
        case MG_OP_SUM_TO:
        case MG_OP_EXPAND: rc = rule_reduce(c, n, &r); break;
        case MG_OP_LAYERNORM:
        case MG_OP_RMSNORM: rc = rule_norm(c, n, &r); break;
        case MG_OP_LAYERNORM_BWD:
        case MG_OP_RMSNORM_BWD: rc = rule_norm_bwd(c, n, &r); break;
        case MG_OP_ATTENTION:
        case MG_OP_ATTENTION_BWD: rc = rule_attention(c, n, &r); break;
        case MG_OP_EMBEDDING: rc = rule_embedding(c, n, &r); break;
        case MG_OP_EMBEDDING_BWD: rc = rule_embedding_bwd(c, n, &r); break;
        case MG_OP_CROSS_ENTROPY:
            if (is_split(r.in[0]) && r.in[0].dim == n->in[0]->ndim - 1) return vocab_parallel_xent(c, n);
            r.want[0] = sh_full(), r.want[1] = sh_full(), r.out[0] = r.out[1] = sh_full();
            break;
        case MG_OP_CROSS_ENTROPY_BWD: rc = rule_xent_bwd(c, n, &r); break;
        case MG_OP_ADAMW: rc = rule_adamw(c, n, &r); break;
        case MG_OP_ZEROS:
        case MG_OP_LR_SCHEDULE:
        case MG_OP_CLIP_COEF: /* scalars of the optimizer step: replicated */
            for (int i = 0; i < n->n_in; i++) r.want[i] = sh_full();
            for (int j = 0; j < n->n_out; j++) r.out[j] = sh_full();
            break;
        default:
            /* never a silent gather: an op the partitioner cannot place is an error */
            return part_fail(c, MG_ERR_UNSUPPORTED,
                             "partitioning: op %s (node '%s') has no tensor-parallel sharding rule "
                             "(partitioners/tp_rules.c)",
                             mg_op_name(n->op), n->out[0]->name);
        }
    }
    if (rc) return rc;
    mg_tensor *in[MAXIN];
    for (int i = 0; i < n->n_in; i++) {
        in[i] = part_get(c, n->in[i], r.want[i]);
        if (!in[i]) return c->err->code ? c->err->code : MG_ERR_RUNTIME;
    }
    part_local_attrs(c, n, in, r.out, &r.attrs);
    if (n->op == MG_OP_MATMUL) {
        int h = tile_matmul(c, n, in, r.out[0]);
        if (h) return h < 0 ? h : MG_OK;
    }
    return part_emit(c, n, in, &r.attrs, r.out) ? MG_OK : (c->err->code ? c->err->code : MG_ERR_RUNTIME);
}

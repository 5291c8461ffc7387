/* Tensor and sequence parallelism: each op's sharding rule applied over the tp axis.
 *
 * States over the tp group: FULL (replicated), SPLIT(d) (contiguous block d of tp),
 * PARTIAL (a term of a sum over tp). Parameters start in the state their layout role
 * gives (mg_tensor.layout, declared by the model builder: column-parallel weights and
 * biases split on output features, row-parallel weights on input features, the vocab-
 * parallel embedding and output layer on the vocabulary), unless a plan's shard rule
 * names them. Every op then
 * follows its inputs by its rule (mg_op_def.shard, next to the op in ops/<family>.c),
 * and where two states meet that an op cannot combine, the input is converted
 * (partition.c). Megatron's collectives fall out of that:
 *
 *  - row-parallel linear: matmul(SPLIT(last), W SPLIT on K) is PARTIAL; its bias_add
 *    needs a whole input, so the all-reduce (or, with sequence parallelism, the
 *    reduce-scatter along the sequence) is inserted right there, before the bias
 *    (ops/elementwise.c shard_bias_add, ops/shard.c mg_shard_resolve);
 *  - column-parallel linear: matmul(FULL, W SPLIT on N) is SPLIT(last); under sequence
 *    parallelism its input is SPLIT(0), which an all-gather along the sequence turns
 *    FULL first (ops/matmul.c); in backward, the partial input gradient is all-reduced
 *    (or reduce-scattered) where the layer norm backward needs it;
 *  - vocab-parallel embedding: masked lookups give PARTIAL, all-reduced (reduce-
 *    scattered with SP) where the position embedding is added;
 *  - vocab-parallel cross-entropy: the rule asks for an expansion, done here: local
 *    max, all-reduce MAX, local sum-exp and target logit, all-reduce SUM, loss;
 *  - norms with SP: LayerNorm weight gradients of a sequence shard are PARTIAL and
 *    all-reduced over tp before the optimizer uses them.
 */
#include <fnmatch.h>
#include <string.h>

#include "partitioners/partition_internal.h"

mg_sharding tp_param_state(const part_ctx *c, const mg_tensor *lt) {
    int dim = -1;
    bool ruled = false;
    for (int i = c->plan->n_rules - 1; i >= 0 && !ruled; i--) { /* a plan's rule by name wins (the last that matches) */
        const mg_shard_rule *r = &c->plan->rules[i];
        if (fnmatch(r->pattern, lt->name, 0) == 0) dim = r->dim, ruled = true;
    }
    if (!ruled) /* else the role the model declared */
        switch (lt->layout) {
        case MG_LAYOUT_COLUMN: case MG_LAYOUT_VOCAB: dim = 0; break;
        case MG_LAYOUT_ROW: dim = lt->ndim - 1; break;
        default: break; /* replicated; expert weights are ep.c's */
        }
    if (dim >= 0 && dim < lt->ndim && lt->shape[dim] % c->tp == 0) return sh_split(dim);
    return sh_full(); /* what does not divide stays whole */
}

#define MAXIN MG_SHARD_MAX_IO

/* Vocab-parallel cross-entropy (Megatron's VocabParallelCrossEntropy). */
static int vocab_parallel_xent(part_ctx *c, const mg_node *n) {
    const mg_tensor *lx = n->in[0], *lt = n->in[1];
    int last = lx->ndim - 1;
    mg_tensor *x = cp_get(c, lx, sh_split(last), 0), *tg = cp_get(c, lt, sh_full(), 1);
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
    mg_tensor *count = stats ? cp_get(c, n->in[2], sh_full(), 2) : NULL;
    mg_tensor *lin[4] = {stats, gmax, tg, count};
    mg_node tmp = *n; /* the loss node stands for the logical cross_entropy node */
    tmp.op = MG_OP_XENT_VP_LOSS;
    tmp.n_in = 4;
    if (!stats) return part_graph_error(c);
    if (!count) return c->err->code;
    mg_sharding outs[2] = {sh_full(), sh_full()};
    return part_emit(c, &tmp, lin, &at, outs) ? MG_OK : c->err->code;
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

/* Inputs the rule counts once (count_once): replicated copies contribute on tp index
 * 0 only; elsewhere they are left out, and a node left with no inputs is a zero term. */
static int drop_count_once(part_ctx *c, const mg_node *n, const mg_shard_io *io, mg_tensor **in, int *n_in) {
    int k = 0;
    for (int i = 0; i < n->n_in; i++)
        if (!(io->count_once >> i & 1) || c->tp_rank == 0) in[k++] = in[i];
    *n_in = k;
    if (k) return MG_OK;
    mg_placement pl = part_node_pl(c, io->out[0]);
    mg_tensor *z = mg_zeros(c->P, n->out[0]->dtype, n->out[0]->ndim, n->out[0]->shape);
    if (!z) return part_graph_error(c);
    c->st[n->out[0]->id] = (pt){z, pl};
    part_set_identity(c, z, n->out[0], &pl);
    return 1;
}

int tp_partition_node(part_ctx *c, const mg_node *n) {
    if (n->n_in > MAXIN || n->n_out > MAXIN)
        return part_fail(c, MG_ERR_UNSUPPORTED, "partitioning: %s has too many inputs", mg_op_name(n->op));
    if (n->op == MG_OP_ADAMW || n->op == MG_OP_ACCUMULATE) {
        int rc = n->op == MG_OP_ADAMW ? adamw_moments(c, n) : accumulator_leaf(c, n);
        if (rc) return rc;
    }
    mg_shard_io io;
    memset(&io, 0, sizeof io);
    for (int i = 0; i < n->n_in; i++) io.in[i] = c->tp > 1 ? part_state(c, n->in[i]) : sh_full();
    if (c->err->code) return c->err->code;
    if (c->tp == 1) {
        for (int i = 0; i < n->n_in; i++) io.want[i] = sh_full();
        for (int j = 0; j < n->n_out; j++) io.out[j] = sh_full();
    } else {
        const mg_op_def *def = mg_op_def_get(n->op);
        if (!def->shard) /* never a silent gather: an op the partitioner cannot place is an error */
            return part_fail(c, MG_ERR_UNSUPPORTED,
                             "partitioning: op %s (node '%s') has no sharding rule (mg_op_def.shard in ops/)",
                             mg_op_name(n->op), n->out[0]->name);
        mg_shard_ctx sc = {c->tp, c->plan->sequence_parallel};
        int rc = def->shard(n, &sc, &io, c->err);
        if (rc) return rc;
        for (int i = 0; i < n->n_in; i++) io.want[i].group = MG_GROUP_TP;
        for (int j = 0; j < n->n_out; j++) io.out[j].group = MG_GROUP_TP;
        if (io.expand) {
            if (n->op == MG_OP_CROSS_ENTROPY) return vocab_parallel_xent(c, n);
            return part_fail(c, MG_ERR_UNSUPPORTED, "partitioning: no expansion of op %s", mg_op_name(n->op));
        }
    }
    mg_tensor *in[MAXIN];
    for (int i = 0; i < n->n_in; i++) {
        in[i] = cp_get(c, n->in[i], io.want[i], i);
        if (!in[i]) return c->err->code ? c->err->code : MG_ERR_RUNTIME;
    }
    mg_attrs attrs = n->attrs;
    part_local_attrs(c, n, in, io.out, &attrs);
    if (n->op == MG_OP_MATMUL) {
        int h = tile_matmul(c, n, in, io.out[0]);
        if (h) return h < 0 ? h : MG_OK;
    }
    int n_in = n->n_in;
    if (io.count_once) {
        int h = drop_count_once(c, n, &io, in, &n_in);
        if (h) return h < 0 ? h : MG_OK;
    }
    mg_node tmp = *n;
    tmp.n_in = n_in;
    return part_emit(c, &tmp, in, &attrs, io.out) ? MG_OK : (c->err->code ? c->err->code : MG_ERR_RUNTIME);
}

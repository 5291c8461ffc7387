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

#include "mgraph/precision.h"
#include "ops/shard.h"
#include "partitioners/partition_internal.h"

mg_sharding tp_param_state(const part_ctx *c, const mg_tensor *lt) {
    /* a model copy is placed as its parameter (mgraph/precision.h: the typed binding) */
    const char *name = lt->copy_of ? lt->copy_of->name : lt->name;
    int dim = -1;
    bool ruled = false;
    for (int i = c->plan->n_rules - 1; i >= 0 && !ruled; i--) { /* a plan's rule by name wins (the last that matches) */
        const mg_shard_rule *r = &c->plan->rules[i];
        if (fnmatch(r->pattern, name, 0) == 0) dim = r->dim, ruled = true;
    }
    if (!ruled) /* else the role the model declared */
        switch (lt->layout) {
        case MG_LAYOUT_COLUMN: case MG_LAYOUT_VOCAB: dim = 0; break;
        case MG_LAYOUT_ROW: dim = lt->ndim - 1; break;
        /* experts over the tp group (without expert parallelism: ep.c places them with it) */
        case MG_LAYOUT_EXPERT_COLUMN: dim = mg_plan_expert_tp(c->plan) && part_size(c, MG_GROUP_EP) == 1 ? 1 : -1; break;
        case MG_LAYOUT_EXPERT_ROW: dim = mg_plan_expert_tp(c->plan) && part_size(c, MG_GROUP_EP) == 1 ? 2 : -1; break;
        default: break; /* replicated; expert weights are ep.c's */
        }
    if (dim >= 0 && dim < lt->ndim && lt->shape[dim] % part_size(c, MG_GROUP_TP) == 0) return sh_split(dim);
    return sh_full(); /* what does not divide stays whole */
}

/* Parameters start split as their layout role (or a plan rule) says. */
static void tp_leaf(const part_ctx *c, const mg_tensor *lt, mg_placement *p) {
    if (part_size(c, MG_GROUP_TP) > 1 && lt->role == MG_ROLE_PARAM) p->ax[MG_GROUP_TP] = tp_param_state(c, lt);
}

/* Vocab-parallel cross-entropy (Megatron's VocabParallelCrossEntropy). */
static int vocab_parallel_xent(part_ctx *c, const mg_node *n) {
    const mg_tensor *lx = n->in[0];
    int last = lx->ndim - 1, tp = part_size(c, MG_GROUP_TP);
    part_want(c, 0, MG_GROUP_TP, sh_split(last));
    part_want(c, 1, MG_GROUP_TP, sh_full());
    part_want(c, 2, MG_GROUP_TP, sh_full());
    mg_tensor *x = part_input(c, n, 0), *tg = part_input(c, n, 1);
    if (!x || !tg) return part_status(c);
    mg_attrs at = n->attrs;
    at.xent.vocab_offset = x->logical.offset[last]; /* this rank's first vocabulary column */
    char nm[512];
    snprintf(nm, sizeof nm, "%s@vp_max", n->out[0]->name);
    mg_node *mx = part_emit_aux(c, n, MG_OP_XENT_VP_MAX, &at, 1, &x, nm);
    if (!mx) return part_status(c);
    mg_tensor *gmax = mg_allreduce(c->P, mx->out[0], MG_GROUP_TP, tp, MG_REDUCE_MAX, c->seq++);
    mg_tensor *pin[3] = {x, tg, gmax};
    snprintf(nm, sizeof nm, "%s@vp_parts", n->out[0]->name);
    mg_node *parts = gmax ? part_emit_aux(c, n, MG_OP_XENT_VP_PARTS, &at, 3, pin, nm) : NULL;
    if (!parts) return part_status(c);
    mg_tensor *stats = mg_allreduce(c->P, parts->out[0], MG_GROUP_TP, tp, MG_REDUCE_SUM, c->seq++);
    mg_tensor *count = stats ? part_input(c, n, 2) : NULL;
    mg_tensor *lin[4] = {stats, gmax, tg, count};
    mg_node tmp = *n; /* the loss node stands for the logical cross_entropy node */
    tmp.op = MG_OP_XENT_VP_LOSS;
    tmp.n_in = 4;
    if (!stats || !count) return part_status(c);
    part_out(c, 0, MG_GROUP_TP, sh_full());
    part_out(c, 1, MG_GROUP_TP, sh_full());
    return part_emit(c, &tmp, lin, &at) ? PART_DONE : part_status(c);
}

/* Sequence parallelism is this axis' way of resolving partial values (the rule
 * context's resolve): where an op needs a partial value whole and takes its rows
 * split, the rows (the sequence) are split when they divide, a reduce-scatter instead
 * of an all-reduce; the next op that needs them whole all-gathers them. */
static mg_sharding sp_resolve(const mg_shard_ctx *sc, const mg_tensor *t, bool allow_row_split) {
    if (allow_row_split && t->ndim >= 2 && t->shape[0] % sc->size == 0) return mg_sh_split(0);
    return mg_sh_full();
}

static mg_shard_resolve_fn tp_resolver(const part_ctx *c) { return c->plan->sequence_parallel ? sp_resolve : NULL; }

mg_sharding tp_resolve_partial(const part_ctx *c, const mg_tensor *lt, bool allow_row_split) {
    mg_shard_ctx sc = {part_size(c, MG_GROUP_TP), tp_resolver(c)};
    mg_sharding s = mg_shard_resolve(&sc, lt, allow_row_split);
    s.group = MG_GROUP_TP;
    return s;
}

/* Every node: its rule over tp (a partial value needed whole resolved as above); the
 * vocab-parallel loss expanded here. */
static int tp_node(part_ctx *c, const mg_node *n) {
    if (part_size(c, MG_GROUP_TP) == 1) return PART_NEXT; /* everything whole over tp */
    int rc = part_state_leaves(c, n);
    mg_shard_io io;
    if (!rc) rc = part_apply_rule(c, n, MG_GROUP_TP, NULL, tp_resolver(c), &io);
    if (rc) return rc;
    if (!io.expand) return PART_NEXT;
    if (n->op == MG_OP_CROSS_ENTROPY) return vocab_parallel_xent(c, n);
    return part_fail(c, MG_ERR_UNSUPPORTED, "partitioning: no expansion of op %s", mg_op_name(n->op));
}

const part_axis part_axis_tp = {.name = "tp", .leaf = tp_leaf, .node = tp_node};

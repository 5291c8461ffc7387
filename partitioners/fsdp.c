/* Megatron-FSDP: parameters, gradients and optimizer state sharded over data
 * parallelism (--use-megatron-fsdp --data-parallel-sharding-strategy, ZeRO-3 / ZeRO-2),
 * as one axis plug-in: a leaf hook and a node hook.
 *
 * Shards. Every parameter with a gradient is cut over the dp group along one dimension:
 * the first that no other axis splits (tensor parallelism's column weights are split on
 * their rows, so FSDP cuts their columns) and that dp divides, as PyTorch's FSDP2
 * shards each parameter on a dimension of its own rather than Megatron-FSDP's flat
 * buffer (the same bytes per rank, and a shard is a block of the logical tensor, which
 * checkpoints, the counter RNG and every other axis already understand). A parameter
 * with no such dimension (a tensor-parallel bias, a size dp does not divide) stays whole
 * and takes plain data parallelism (dp.c).
 *
 * optim_grads_params (ZeRO-3, Megatron's default): the parameter itself is the shard
 * (placement dp SPLIT(d)). Every node of the micro-batch that reads it wants it whole,
 * so the conversion that falls out is an all-gather over dp right before its first
 * reader in forward, and another in backward (the conversion cache is per phase and per
 * micro-batch): nothing keeps the gathered copy between them, and the memory plan frees
 * it after its last reader (gather before use, free after). A micro-batch's weight
 * gradient is this rank's term of the sum over dp; its accumulator is the shard, so the
 * accumulation wants the term SPLIT(d): a reduce-scatter per micro-batch (Megatron-
 * FSDP's). AdamW, its moments and the updated parameter are shards, by adamw's own rule
 * over dp; the gradient norm sums each shard's squares (a partial sum over dp, the
 * whole parameters counted by dp rank 0 only), all-reduced once.
 * optim_grads (ZeRO-2): parameters whole, gradients and optimizer state sharded as
 * above; AdamW updates the rank's slice and the new slices are all-gathered into the
 * parameter.
 * (optim, ZeRO-1, is Megatron's distributed optimizer: dist_opt.c; no_shard is dp.c.)
 * Pipeline stages: each stage shards the parameters it holds over its own dp group;
 * nothing here changes (pp.c sends activations; its sum of a tied embedding's gradient
 * over the embedding group adds shards of one dp index: the first and last stages'
 * members agree on every other axis).
 * Expert parallelism: an expert weight (its block of experts over ep) is sharded over its
 * own replicas, the expert-data-parallel group edp (Megatron-FSDP's expert data-parallel
 * sharding), along a dimension past the experts' (dim 0 is ep's); its per-micro-batch
 * gradient is a share over edp (the dispatch brought the ep group's tokens), reduce-
 * scattered over edp; ep.c's expert ops read the weight gathered over edp, and its gradient
 * norm sums a sharded block's squares over edp. With experts split over an expert tensor
 * group: not yet (plan.c).
 * Context parallelism: dense parameters are sharded over dp x cp, as Megatron-FSDP shards
 * over its data-parallel group with cp: dp's block cut again over cp (placement.h's
 * nesting). A cp SPLIT elsewhere means cp.c's zigzag chunks of the sequence; an FSDP
 * shard is a plain block of its dimension, so this file converts its shards over cp
 * itself (fsdp_convert: the plain collective over the cp group). The micro-batch's weight
 * gradient is a partial sum over dp and cp (the op rules make it one over cp), reduce-
 * scattered over dp, then over cp; a parameter is gathered over cp, then dp. Pipeline
 * stages shard over their own dp x cp group as over dp; with expert parallelism the
 * expert weights are over edp (which spans dp x cp / ep ranks) as above.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "partitioners/partition_internal.h"

struct fsdp_state {
    bool params;   /* optim_grads_params: the parameters are sharded too */
    int *dim;      /* [n logical tensors]: the dimension parameter i is sharded along, -1: whole */
    unsigned char *contig; /* [n logical tensors]: a gradient term or sum converted on cp as plain blocks */
};

static struct fsdp_state *fs(const part_ctx *c) { return c->axis[PART_FSDP]; }

/* Dense shards are cut over dp x cp (Megatron-FSDP's data-parallel group with context
 * parallelism): dp's blocks, each cut over cp (placement.h's nesting, cp inner, as the
 * dp_cp group numbers its ranks). */
static bool cp_split(const part_ctx *c) { return part_size(c, MG_GROUP_CP) > 1; }

/* Whether the expert axes place parameter p (an expert weight under expert parallelism). */
static bool on_expert_axes(const part_ctx *c, const mg_tensor *p) { return ep_places_experts(c) && ep_is_expert_param(p); }

/* The mesh axis parameter p is sharded over: its replicas' (edp for an expert weight
 * placed on the expert axes, else dp). */
static int shard_axis(const part_ctx *c, const mg_tensor *p) { return on_expert_axes(c, p) ? MG_GROUP_EDP : MG_GROUP_DP; }

/* The dimension a parameter is sharded along: the first that tensor and expert
 * parallelism leave whole (dim 0 of an expert weight is ep's) and its replicas divide
 * (-1: none, or one replica). */
static int shard_dim(const part_ctx *c, const mg_tensor *p) {
    int n = part_size(c, (mg_group)shard_axis(c, p));
    if (!on_expert_axes(c, p)) n *= part_size(c, MG_GROUP_CP); /* dense: over dp x cp */
    if (n == 1) return -1;
    mg_sharding t = part_size(c, MG_GROUP_TP) > 1 ? tp_param_state(c, p) : sh_full();
    for (int d = on_expert_axes(c, p) ? 1 : 0; d < p->ndim; d++)
        if (!(t.kind == MG_SHARD_SPLIT && t.dim == d) && p->shape[d] % n == 0 && p->shape[d] >= n) return d;
    return -1;
}

static int fsdp_init(part_ctx *c, mg_node *const *ord, int n_ord) {
    (void)ord, (void)n_ord;
    bool edp = ep_places_experts(c) && part_size(c, MG_GROUP_EDP) > 1;
    if (c->plan->fsdp == MG_FSDP_NONE || (part_size(c, MG_GROUP_DP) * part_size(c, MG_GROUP_CP) == 1 && !edp))
        return MG_OK;
    struct fsdp_state *s = calloc(1, sizeof *s);
    int nt = mg_graph_n_tensors(c->L);
    if (s) s->dim = malloc(((size_t)nt + 1) * sizeof *s->dim), s->contig = calloc((size_t)nt + 1, 1);
    if (!s || !s->dim || !s->contig) {
        if (s) free(s->dim), free(s->contig);
        free(s);
        return part_fail(c, MG_ERR_NOMEM, "fsdp: out of memory");
    }
    c->axis[PART_FSDP] = s;
    s->params = c->plan->fsdp == MG_FSDP_OPTIM_GRADS_PARAMS;
    for (int i = 0; i < nt; i++) {
        const mg_tensor *t = mg_graph_tensor(c->L, i);
        s->dim[i] = t->role == MG_ROLE_PARAM && t->requires_grad && t->grad ? shard_dim(c, t) : -1;
    }
    return MG_OK;
}

static void fsdp_release(part_ctx *c) {
    struct fsdp_state *s = fs(c);
    if (!s) return;
    free(s->dim);
    free(s->contig);
    free(s);
    c->axis[PART_FSDP] = NULL;
}

/* The dimension the logical parameter p is sharded along (-1: whole, or FSDP off). */
static int dim_of(const part_ctx *c, const mg_tensor *p) {
    const struct fsdp_state *s = fs(c);
    return s && p ? s->dim[p->id] : -1;
}

/* Shards at rest: the parameter (ZeRO-3), its gradient accumulator and Adam moments. */
static void fsdp_leaf(const part_ctx *c, const mg_tensor *lt, mg_placement *p) {
    const struct fsdp_state *s = fs(c);
    if (!s) return;
    const mg_tensor *w = lt->role == MG_ROLE_PARAM ? (s->params ? lt : NULL) : lt->state_of;
    int d = dim_of(c, w), a = d >= 0 ? shard_axis(c, w) : -1;
    if (d < 0) return;
    if (part_size(c, (mg_group)a) > 1) p->ax[a] = mg_place_split((mg_group)a, d);
    if (a == MG_GROUP_DP && cp_split(c)) p->ax[MG_GROUP_CP] = mg_place_split(MG_GROUP_CP, d); /* (nested inside dp's) */
}

/* Whether FSDP tensor lt (a sharded parameter, its state, a gradient term or sum of one)
 * is converted on cp as plain blocks of its dimension, not as cp.c's zigzag blocks of the
 * sequence. */
static bool contiguous(const part_ctx *c, const mg_tensor *lt) {
    const struct fsdp_state *s = fs(c);
    return s && (s->contig[lt->id] || (lt->role == MG_ROLE_PARAM && dim_of(c, lt) >= 0) || dim_of(c, lt->state_of) >= 0);
}

/* Conversions of FSDP shards over cp: the collective over the cp group on plain blocks
 * (cp.c's own conversion reorders zigzag chunks of the sequence). */
static mg_tensor *fsdp_convert(part_ctx *c, const mg_tensor *lt, mg_tensor *x, mg_placement *cur, int a, mg_sharding to,
                               bool *handled) {
    if (a != MG_GROUP_CP || !cp_split(c) || !contiguous(c, lt)) return NULL;
    *handled = true;
    return part_convert_on(c, lt, x, cur, a, to, MG_GROUP_CP, part_size(c, MG_GROUP_CP));
}

/* The axis input lt is an FSDP shard over (dp, or edp), -1: none. */
static int split_axis(part_ctx *c, const mg_tensor *lt) {
    /* (a parameter not made yet is made here, in its shard; state leaves are made by
     * part_state_leaves, like what they hold state for) */
    if (!c->st[lt->id].t && lt->role != MG_ROLE_PARAM) return -1;
    const mg_placement *p = part_placement(c, lt);
    return p->ax[MG_GROUP_DP].kind == MG_SHARD_SPLIT ? MG_GROUP_DP : p->ax[MG_GROUP_EDP].kind == MG_SHARD_SPLIT ? MG_GROUP_EDP : -1;
}

/* ZeRO-2's AdamW, once emitted on the rank's slice of the parameter with its gradient and
 * moment shards: the new slices all-gathered into the parameter (written in its place). */
static int gather_slices(part_ctx *c, const mg_node *n, int a, int d) {
    const mg_tensor *lo = n->out[0];
    pt *q = &c->st[lo->id];
    mg_tensor *param = c->st[n->in[0]->id].t, *slice = q->t;
    mg_placement whole = q->pl;
    whole.ax[a] = mg_place_full((mg_group)a);
    mg_tensor *g = slice;
    if (a == MG_GROUP_DP && cp_split(c)) { /* the inner blocks first */
        whole.ax[MG_GROUP_CP] = mg_place_full(MG_GROUP_CP);
        g = mg_allgather(c->P, g, MG_GROUP_CP, part_size(c, MG_GROUP_CP), d, c->seq++);
    }
    if (g && part_size(c, (mg_group)a) > 1) g = mg_allgather(c->P, g, (mg_group)a, part_size(c, (mg_group)a), d, c->seq++);
    if (!g) return part_graph_error(c);
    slice->updates = NULL; /* the gathered parameter is what is written back */
    char nm[512];
    snprintf(nm, sizeof nm, "%s@slice", lo->name);
    part_rename(c, slice, nm);
    part_rename(c, g, lo->name);
    part_set_identity(c, g, lo, &whole);
    g->role = lo->role;
    g->updates = param;
    *q = (pt){g, whole};
    return MG_OK;
}

static int fsdp_node(part_ctx *c, const mg_node *n) {
    const struct fsdp_state *s = fs(c);
    if (!s) return PART_NEXT;
    if (n->op == MG_OP_ACCUMULATE && n->n_in == 2 && dim_of(c, n->in[0]->state_of) >= 0) {
        /* a micro-batch's weight gradient into its shard: its term of the sum over dp,
         * reduce-scattered */
        int rc = part_state_leaves(c, n);
        if (rc) return rc;
        int a = shard_axis(c, n->in[0]->state_of);
        mg_sharding sp = c->st[n->in[0]->id].pl.ax[a];
        if (part_size(c, (mg_group)a) > 1) {
            c->st[n->in[1]->id].pl.ax[a] = mg_place_partial((mg_group)a);
            part_want(c, 0, a, sp);
            part_want(c, 1, a, sp);
            part_out(c, 0, a, sp);
        }
        if (a == MG_GROUP_DP && cp_split(c)) { /* a partial sum over cp too (the rules say so): reduce-scattered */
            mg_sharding sc = c->st[n->in[0]->id].pl.ax[MG_GROUP_CP];
            fs(c)->contig[n->in[1]->id] = fs(c)->contig[n->out[0]->id] = 1;
            part_want(c, 0, MG_GROUP_CP, sc);
            part_want(c, 1, MG_GROUP_CP, sc);
            part_out(c, 0, MG_GROUP_CP, sc);
        }
        return PART_NEXT;
    }
    if (n->mb >= 0) { /* compute reads whole parameters: gathered right before */
        for (int i = 0; i < n->n_in; i++) {
            int a = split_axis(c, n->in[i]);
            if (a >= 0) part_want(c, i, a, mg_place_full((mg_group)a));
            if (cp_split(c) && contiguous(c, n->in[i]) && (c->st[n->in[i]->id].t || n->in[i]->role == MG_ROLE_PARAM) &&
                part_placement(c, n->in[i])->ax[MG_GROUP_CP].kind == MG_SHARD_SPLIT)
                part_want(c, i, MG_GROUP_CP, mg_place_full(MG_GROUP_CP));
        }
        return PART_NEXT;
    }
    if (n->op == MG_OP_ADAMW && dim_of(c, n->in[0]) >= 0) {
        int rc = part_state_leaves(c, n);
        if (rc) return rc;
        if (!s->params) { /* ZeRO-2: the rank's slice of the whole parameter */
            int a = shard_axis(c, n->in[0]), d = dim_of(c, n->in[0]);
            mg_sharding sp = mg_place_split((mg_group)a, d);
            if (part_size(c, (mg_group)a) > 1) {
                for (int i = 0; i < 4; i++) part_want(c, i, a, sp);
                part_out_all(c, n, a, sp);
            }
            if (a == MG_GROUP_DP && cp_split(c)) {
                for (int i = 0; i < 4; i++) part_want(c, i, MG_GROUP_CP, mg_place_split(MG_GROUP_CP, d));
                part_out_all(c, n, MG_GROUP_CP, mg_place_split(MG_GROUP_CP, d));
                fs(c)->contig[n->out[0]->id] = 1;
            }
            return PART_NEXT;
        }
    }
    int a = -1;
    bool expert = false;
    for (int i = 0; i < n->n_in; i++) {
        int ai = split_axis(c, n->in[i]);
        if (ai >= 0 && a >= 0 && ai != a)
            return part_fail(c, MG_ERR_UNSUPPORTED, "fsdp: op %s (node '%s') mixes dense and expert parameter shards",
                             mg_op_name(n->op), n->out[0]->name);
        if (ai >= 0) a = ai;
        /* (as placed now: asking part_placement would make a state leaf here, not like its parameter) */
        const pt *q = &c->st[n->in[i]->id];
        expert |= q->t && mg_placement_expert(&q->pl);
    }
    if (c->err->code) return c->err->code;
    /* an expert block's sum of squares is ep.c's (summed over ep, and over edp where the
     * block is a shard) */
    if (n->op == MG_OP_SUMSQ && expert) return PART_NEXT;
    if (a < 0 && n->op != MG_OP_SUMSQ) return PART_NEXT;
    if (a < 0 && part_size(c, MG_GROUP_DP) == 1) return PART_NEXT; /* (shards over cp only: cp.c's rules) */
    /* the step part on shards (AdamW, the norms' sums of squares): each op by its own rule
     * over dp (edp for expert shards); every dense sum of squares is a partial sum over dp,
     * whole inputs counted by dp rank 0, so the norm is one all-reduce whatever mix of
     * shards it sums */
    mg_shard_io io;
    int rc = part_apply_rule(c, n, a < 0 ? MG_GROUP_DP : a, NULL, NULL, &io);
    if (rc) return rc;
    if (io.expand) return part_fail(c, MG_ERR_UNSUPPORTED, "fsdp: op %s (node '%s') on parameter shards is not supported",
                                    mg_op_name(n->op), n->out[0]->name);
    return PART_NEXT;
}

static int fsdp_after(part_ctx *c, const mg_node *n) {
    const struct fsdp_state *s = fs(c);
    if (!s || s->params || n->op != MG_OP_ADAMW || dim_of(c, n->in[0]) < 0 || !c->st[n->out[0]->id].t) return MG_OK;
    return gather_slices(c, n, shard_axis(c, n->in[0]), dim_of(c, n->in[0]));
}

const part_axis part_axis_fsdp = {.name = "fsdp",
                                  .init = fsdp_init,
                                  .release = fsdp_release,
                                  .leaf = fsdp_leaf,
                                  .node = fsdp_node,
                                  .convert = fsdp_convert,
                                  .after = fsdp_after};

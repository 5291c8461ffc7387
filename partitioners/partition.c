/* The partitioner's walk: logical graph -> this rank's physical graph.
 *
 * Nodes are visited in the logical graph's deterministic topological order, which
 * every rank shares, so collectives get the same relative order on every rank of a
 * group by construction (their `seq`). Each node is offered to the axes of the table
 * below in turn (partitioners/README.md): each chooses the node's states on its axis
 * (most by applying the op's sharding rule, part_apply_rule), or takes the node over.
 * Then the inputs are converted to the states chosen (collectives over the axes that
 * differ, outer to inner), and the physical node is emitted with the logical node's
 * names, scope, phase and micro-batch. The axes' after hooks run last (reductions of
 * finished gradients).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "partitioners/partition_internal.h"

/* The axes, in the order they see each node (part_axis_id): the pipeline decides
 * whether the node is this rank's at all, the optimizers take their nodes over, data,
 * context and expert parallelism choose their states, tensor parallelism last. */
static const part_axis *const axes[PART_N_AXES] = {
    [PART_PP] = &part_axis_pp, [PART_DOPT] = &part_axis_dopt, [PART_FSDP] = &part_axis_fsdp, [PART_DP] = &part_axis_dp,
    [PART_CP] = &part_axis_cp, [PART_EP] = &part_axis_ep,     [PART_TP] = &part_axis_tp,
};

int part_fail(part_ctx *c, int code, const char *fmt, ...) {
    if (c->err && c->err->code == MG_OK) {
        va_list ap;
        va_start(ap, fmt);
        c->err->code = code;
        vsnprintf(c->err->msg, sizeof c->err->msg, fmt, ap);
        va_end(ap);
    }
    return code;
}

int part_graph_error(part_ctx *c) {
    const mg_error *e = mg_graph_error(c->P);
    if (!e->code) return part_fail(c, MG_ERR_RUNTIME, "partitioning: a node could not be built");
    return part_fail(c, e->code, "partitioning: %s", e->msg);
}

/* The per-node check: OK unless building the physical graph failed. */
static int graph_failed(part_ctx *c) { return mg_graph_error(c->P)->code ? part_graph_error(c) : MG_OK; }

int part_status(part_ctx *c) { return c->err->code ? c->err->code : part_graph_error(c); }

/* ---- identities and shapes ------------------------------------------------------------ */
/* Local shape of logical tensor lt placed as p (rules only choose placements that
 * divide: a failure here is the partitioner's bug, reported by part_bind's check). */
void part_local_shape(const part_ctx *c, const mg_tensor *lt, const mg_placement *p, int64_t *shape) {
    for (int i = 0; i < MG_MAX_DIMS; i++) shape[i] = lt->shape[i];
    mg_error e = {0};
    if (mg_placement_local(p, c->mesh, lt->ndim, lt->shape, shape, NULL, &e))
        for (int i = 0; i < lt->ndim; i++) shape[i] = -1;
}

void part_set_identity(part_ctx *c, mg_tensor *t, const mg_tensor *lt, const mg_placement *p) {
    t->logical = lt->logical;
    t->storage = lt->storage; /* stored (rounded) as the logical tensor is: graph/precision.c */
    for (int i = 0; i < MG_MAX_DIMS; i++) t->logical.offset[i] = 0;
    mg_error e = {0};
    mg_placement_local(p, c->mesh, lt->ndim, lt->shape, NULL, t->logical.offset, &e);
    t->place = *p;
}

/* Runs `body` with no scope on the physical graph, so that names are absolute (the
 * logical names), then restores the scope of the node being partitioned. */
#define WITH_ABSOLUTE_NAMES(c, body)                                                    \
    do {                                                                                \
        char *saved_ = strdup(mg_scope_current((c)->P));                                \
        mg_scope_set((c)->P, "");                                                       \
        body;                                                                           \
        mg_scope_set((c)->P, saved_);                                                   \
        free(saved_);                                                                   \
    } while (0)

void part_rename(part_ctx *c, mg_tensor *t, const char *name) { WITH_ABSOLUTE_NAMES(c, mg_set_name(c->P, t, name)); }

mg_tensor *part_new_leaf(part_ctx *c, const char *name, mg_dtype dt, mg_role role, int ndim, const int64_t *shape) {
    mg_tensor *t = NULL;
    WITH_ABSOLUTE_NAMES(c, t = mg_input(c->P, name, dt, ndim, shape));
    if (t) {
        t->role = role;
        t->persistent = false; /* the caller decides */
    }
    return t;
}

/* Aux and conversion nodes land in the scope, phase, micro-batch and model layer of
 * the logical node being partitioned. */
void part_enter_node_context(part_ctx *c, const mg_node *n) {
    for (int i = 0; i < MAXIO; i++) {
        c->want_set[i] = 0;
        c->out[i] = mg_placement_full();
    }
    for (int a = 0; a < MG_MESH_AXES; a++) c->count_once[a] = 0;
    mg_scope_set(c->P, n ? n->scope : "");
    c->cur_phase = n ? n->phase : MG_PHASE_FORWARD;
    mg_graph_set_phase(c->P, c->cur_phase);
    c->cur_mb = n ? n->mb : -1;
    mg_graph_set_mb(c->P, c->cur_mb);
    mg_graph_set_layer(c->P, n ? n->layer : MG_LAYER_NONE);
}

void part_enter_step_context(part_ctx *c) {
    c->cur_phase = MG_PHASE_OPTIMIZER;
    mg_graph_set_phase(c->P, MG_PHASE_OPTIMIZER);
    c->cur_mb = -1;
    mg_graph_set_mb(c->P, -1);
    mg_graph_set_layer(c->P, MG_LAYER_NONE);
}

/* ---- what the axes choose for the node being partitioned --------------------------------------- */
void part_want(part_ctx *c, int i, int a, mg_sharding s) {
    if (i < 0 || i >= MAXIO || a < 0 || a >= MG_MESH_AXES) return;
    s.group = (mg_group)a;
    c->want[i].ax[a] = s;
    c->want_set[i] |= 1u << a;
}

void part_out(part_ctx *c, int j, int a, mg_sharding s) {
    if (j < 0 || j >= MAXIO || a < 0 || a >= MG_MESH_AXES) return;
    s.group = (mg_group)a;
    c->out[j].ax[a] = s;
}

void part_out_all(part_ctx *c, const mg_node *n, int a, mg_sharding s) {
    for (int j = 0; j < n->n_out; j++) part_out(c, j, a, s);
}

int part_apply_rule(part_ctx *c, const mg_node *n, int a, const mg_sharding *in, mg_shard_resolve_fn resolve,
                    mg_shard_io *io) {
    if (n->n_in > MAXIO || n->n_out > MAXIO)
        return part_fail(c, MG_ERR_UNSUPPORTED, "partitioning: %s has too many inputs", mg_op_name(n->op));
    memset(io, 0, sizeof *io);
    for (int i = 0; i < n->n_in; i++) {
        io->in[i] = in ? in[i] : part_placement(c, n->in[i])->ax[a];
        io->in[i].group = MG_GROUP_NONE;
    }
    if (c->err->code) return c->err->code;
    const mg_op_def *def = mg_op_def_get(n->op);
    if (!def->shard) /* never a silent gather: an op the partitioner cannot place is an error */
        return part_fail(c, MG_ERR_UNSUPPORTED,
                         "partitioning over %s: op %s (node '%s') has no sharding rule (mg_op_def.shard in ops/)",
                         mg_group_name((mg_group)a), mg_op_name(n->op), n->out[0]->name);
    mg_shard_ctx sc = {part_size(c, (mg_group)a), resolve};
    int rc = def->shard(n, &sc, io, c->err);
    if (rc) return rc;
    for (int i = 0; i < n->n_in; i++) part_want(c, i, a, io->want[i]);
    for (int j = 0; j < n->n_out; j++) part_out(c, j, a, io->out[j]);
    c->count_once[a] = io->count_once;
    return MG_OK;
}

bool part_op_linear(const mg_node *n) {
    const mg_op_def *def = mg_op_def_get(n->op);
    if (!def->shard || n->n_in > MAXIO || n->n_out > MAXIO || n->n_in == 0) return false;
    mg_shard_io io;
    memset(&io, 0, sizeof io);
    for (int i = 0; i < n->n_in; i++) io.in[i] = mg_place_partial(MG_GROUP_NONE);
    mg_shard_ctx sc = {2, NULL};
    mg_error e = {0};
    if (def->shard(n, &sc, &io, &e) || io.expand || io.count_once) return false;
    for (int i = 0; i < n->n_in; i++)
        if (io.want[i].kind != MG_SHARD_PARTIAL) return false;
    for (int j = 0; j < n->n_out; j++)
        if (io.out[j].kind != MG_SHARD_PARTIAL) return false;
    return true;
}

/* ---- leaves ---------------------------------------------------------------------------------- */
mg_tensor *part_make_leaf(part_ctx *c, const mg_tensor *lt, const mg_placement *p) {
    int64_t shape[MG_MAX_DIMS];
    part_local_shape(c, lt, p, shape);
    mg_tensor *t = part_new_leaf(c, lt->name, lt->dtype, lt->role, lt->ndim, shape);
    if (!t) return NULL;
    t->init = lt->init;
    t->requires_grad = lt->requires_grad;
    t->no_weight_decay = lt->no_weight_decay;
    t->persistent = lt->persistent;
    t->per_microbatch = lt->per_microbatch;
    t->layout = lt->layout;
    t->embedding_or_output = lt->embedding_or_output;
    /* a moment or accumulator's parameter, as this rank holds it (made before its state) */
    if (lt->state_of) t->state_of = c->st[lt->state_of->id].t;
    t->model_copy = lt->model_copy;
    part_set_identity(c, t, lt, p);
    return t;
}

/* A leaf's natural placement: replicated, then each axis' say (parameters split by
 * their layout roles, experts over ep...). */
static mg_placement leaf_placement(part_ctx *c, const mg_tensor *lt) {
    mg_placement p = mg_placement_full();
    for (int a = 0; a < PART_N_AXES; a++)
        if (axes[a]->leaf) axes[a]->leaf(c, lt, &p);
    return p;
}

const mg_placement *part_placement(part_ctx *c, const mg_tensor *lt) {
    pt *p = &c->st[lt->id];
    if (!p->t && !lt->src) {
        p->pl = leaf_placement(c, lt);
        p->t = part_make_leaf(c, lt, &p->pl);
        if (!p->t) graph_failed(c);
    }
    return &p->pl;
}

mg_sharding part_state(part_ctx *c, const mg_tensor *lt, int a) {
    mg_sharding s = part_placement(c, lt)->ax[a];
    return part_size(c, (mg_group)a) > 1 ? s : sh_full_on(a);
}

int part_state_leaf(part_ctx *c, const mg_tensor *leaf, const mg_tensor *like) {
    pt *p = &c->st[leaf->id];
    if (p->t || leaf->src) return MG_OK;
    /* in the placement of what it holds state for (a partial sum accumulates as one and
     * is reduced once per step), not the pipeline's (each stage its own), then the axes'
     * own say on state leaves (FSDP shards a parameter's state with it) */
    p->pl = *part_placement(c, like);
    p->pl.ax[MG_GROUP_PP] = mg_place_full(MG_GROUP_PP);
    for (int a = 0; a < PART_N_AXES; a++)
        if (axes[a]->leaf) axes[a]->leaf(c, leaf, &p->pl);
    p->t = part_make_leaf(c, leaf, &p->pl);
    return p->t ? MG_OK : part_status(c);
}

int part_state_leaves(part_ctx *c, const mg_node *n) {
    if (n->op == MG_OP_ACCUMULATE && n->n_in == 2) return part_state_leaf(c, n->in[0], n->in[1]);
    if (n->op != MG_OP_ADAMW || n->n_in < 4) return MG_OK;
    int rc = part_state_leaf(c, n->in[2], n->in[0]);
    return rc ? rc : part_state_leaf(c, n->in[3], n->in[0]);
}

/* ---- conversions ------------------------------------------------------------------------------- */
/* Conversions are cached per part of the schedule: a tensor made in the per-micro-batch
 * part lives in a slot and cannot serve the once-per-step part, and the step part's
 * results cannot serve the micro-batches that run before it. And per phase, as
 * Megatron does: backward gathers its sequence-parallel inputs again instead of
 * keeping the forward's gathered copies alive until the weight gradients (one more
 * all-gather per layer input, tp-fold less activation memory: Korthikanti et al.). */
static mg_tensor *cache_find(part_ctx *c, int lid, const mg_placement *want) {
    bool per_mb = c->cur_mb >= 0;
    for (int i = c->n_conv - 1; i >= 0; i--)
        if (c->conv[i].lid == lid && mg_placement_eq(&c->conv[i].want, want) && c->conv[i].per_mb == per_mb &&
            c->conv[i].phase == c->cur_phase)
            return c->conv[i].t;
    return NULL;
}

static void cache_put(part_ctx *c, int lid, const mg_placement *want, mg_tensor *t) {
    if (c->n_conv == c->cap_conv) {
        int cap = c->cap_conv ? 2 * c->cap_conv : 256;
        conv_entry *e = realloc(c->conv, (size_t)cap * sizeof *e);
        if (!e) return; /* a cache miss later only costs a duplicate conversion */
        c->conv = e;
        c->cap_conv = cap;
    }
    c->conv[c->n_conv++] = (conv_entry){lid, *want, c->cur_mb >= 0, c->cur_phase, t};
}

mg_tensor *part_named(part_ctx *c, mg_tensor *t, const mg_tensor *lt, const char *what, const mg_placement *p) {
    if (!t) return NULL;
    char nm[512];
    snprintf(nm, sizeof nm, "%s@%s", lt->name, what);
    for (int k = 1; mg_graph_find(c->P, nm); k++) snprintf(nm, sizeof nm, "%s@%s%d", lt->name, what, k);
    part_rename(c, t, nm);
    part_set_identity(c, t, lt, p);
    return t;
}

/* A mesh group spanning several axes (the mesh's derived groups: dp x cp) that spans
 * axis a and only axes in `sums` (the sums a conversion owes from a inwards): one
 * all-reduce over it instead of one per axis. The widest such group wins. */
static mg_group combined_group(int a, unsigned sums) {
    mg_group best = MG_GROUP_NONE;
    int best_n = 1;
    for (int g = 0; g < MG_GROUP_COUNT; g++) {
        bool expert;
        unsigned m = mg_mesh_group_axes((mg_group)g, &expert); /* (dense axes number as placement axes; WORLD: 0) */
        int n = __builtin_popcount(m);
        if (!expert && (m >> a & 1) && (m & sums) == m && n > best_n) best = (mg_group)g, best_n = n;
    }
    return best;
}

mg_tensor *part_convert_on(part_ctx *c, const mg_tensor *lt, mg_tensor *x, mg_placement *cur, int a, mg_sharding to,
                           mg_group g, int n) {
    mg_graph *P = c->P;
    int rank = c->mesh->coord[g];
    mg_sharding from = cur->ax[a];
    char what[32];
    cur->ax[a] = to;
    mg_tensor *y = NULL;
    if (from.kind == MG_SHARD_PARTIAL && to.kind == MG_SHARD_FULL) {
        snprintf(what, sizeof what, "%s_allreduce", mg_group_name(g));
        y = mg_allreduce(P, x, g, n, MG_REDUCE_SUM, c->seq++);
    } else if (from.kind == MG_SHARD_PARTIAL && to.kind == MG_SHARD_SPLIT) {
        snprintf(what, sizeof what, "%s_reduce_scatter", mg_group_name(g));
        y = mg_reduce_scatter(P, x, g, n, to.dim, c->seq++);
    } else if (from.kind == MG_SHARD_SPLIT && to.kind == MG_SHARD_FULL) {
        snprintf(what, sizeof what, "%s_allgather", mg_group_name(g));
        y = mg_allgather(P, x, g, n, from.dim, c->seq++);
    } else if (from.kind == MG_SHARD_FULL && to.kind == MG_SHARD_SPLIT) {
        int64_t len = x->shape[to.dim] / n;
        snprintf(what, sizeof what, "%s_slice", mg_group_name(g));
        y = mg_slice(P, x, to.dim, (int64_t)rank * len, len);
    } else { /* full -> partial: the whole value on index 0, zero elsewhere, sums to it once */
        if (rank == 0) return x;
        snprintf(what, sizeof what, "%s_zero", mg_group_name(g));
        y = mg_zeros(P, x->dtype, x->ndim, x->shape);
    }
    return part_named(c, y, lt, what, cur);
}

/* Converts x (placed as *cur) on one axis to state `to`, updating *cur: an axis' own
 * conversion (cp's zigzag blocks, a pipeline sum over the stages that hold it), else the
 * collective over the axis' group (or a local slice). */
static mg_tensor *convert_axis(part_ctx *c, const mg_tensor *lt, mg_tensor *x, mg_placement *cur, int a,
                               mg_sharding to) {
    mg_sharding from = cur->ax[a];
    if (sh_eq(from, to)) return x;
    if (from.kind == MG_SHARD_SPLIT && to.kind != MG_SHARD_FULL) { /* split -> other: through full */
        x = convert_axis(c, lt, x, cur, a, mg_place_full((mg_group)a));
        return x ? convert_axis(c, lt, x, cur, a, to) : NULL;
    }
    for (int k = 0; k < PART_N_AXES; k++) {
        bool handled = false;
        if (!axes[k]->convert) continue;
        mg_tensor *y = axes[k]->convert(c, lt, x, cur, a, to, &handled);
        if (handled) return y;
    }
    return part_convert_on(c, lt, x, cur, a, to, (mg_group)a, c->mesh->size[a]);
}

/* One axis step of a conversion, served from the cache when an earlier conversion
 * made the same intermediate (a dp-summed gradient is reused by every tp state). */
static mg_tensor *step(part_ctx *c, const mg_tensor *lt, mg_tensor *x, mg_placement *cur, int a, mg_sharding to) {
    mg_placement next = *cur;
    next.ax[a] = to;
    mg_tensor *t = cache_find(c, lt->id, &next);
    if (!t) {
        t = convert_axis(c, lt, x, cur, a, to);
        if (t && t != x) cache_put(c, lt->id, &next, t);
    }
    *cur = next;
    return t;
}

/* Converts x from placement `from` to `to`, axis by axis from the outermost in: a dp
 * share is summed before tp converts (the bytes tp moves are then whole values). Sums
 * over several axes that one mesh group spans (dp and cp: Megatron's gradient reduction
 * under context parallelism) are one all-reduce over it. Where axes split the same
 * dimension, the blocks nest (placement.h), so before an outer axis gathers or slices
 * that dimension, the inner axes splitting it gather first; they reach their target
 * when the walk gets to them. */
static mg_tensor *convert(part_ctx *c, const mg_tensor *lt, mg_tensor *x, const mg_placement *from,
                          const mg_placement *to) {
    mg_placement cur = *from;
    for (int a = MG_MESH_AXES - 1; a >= 0 && x; a--) {
        if (sh_eq(cur.ax[a], to->ax[a])) continue;
        int dims[2] = {cur.ax[a].kind == MG_SHARD_SPLIT ? cur.ax[a].dim : -1,
                       to->ax[a].kind == MG_SHARD_SPLIT ? to->ax[a].dim : -1};
        for (int b = 0; b < a && x; b++)
            if (cur.ax[b].kind == MG_SHARD_SPLIT && (cur.ax[b].dim == dims[0] || cur.ax[b].dim == dims[1]))
                x = step(c, lt, x, &cur, b, mg_place_full((mg_group)b));
        if (!x) break;
        unsigned sums = 0;
        for (int b = 0; b <= a; b++)
            if (cur.ax[b].kind == MG_SHARD_PARTIAL && to->ax[b].kind == MG_SHARD_FULL) sums |= 1u << b;
        mg_group g = sums >> a & 1 ? combined_group(a, sums) : MG_GROUP_NONE;
        if (g == MG_GROUP_NONE) {
            x = step(c, lt, x, &cur, a, to->ax[a]);
            continue;
        }
        mg_placement next = cur;
        unsigned m = mg_mesh_group_axes(g, NULL);
        for (int b = 0; b <= a; b++)
            if (m >> b & 1) next.ax[b] = mg_place_full((mg_group)b);
        mg_tensor *t = cache_find(c, lt->id, &next);
        if (!t) {
            char what[32];
            snprintf(what, sizeof what, "%s_allreduce", mg_group_name(g));
            t = part_named(c, mg_allreduce(c->P, x, g, c->mesh->size[g], MG_REDUCE_SUM, c->seq++), lt, what, &next);
            if (t) cache_put(c, lt->id, &next, t);
        }
        x = t;
        cur = next;
    }
    return x;
}

/* A reshaped copy of a split tensor is gathered by reshaping the gathered original:
 * the original's gather is usually needed anyway (a gradient feeds both the input-
 * gradient matmul and, reshaped to 2-D, the weight-gradient matmul), and the cache
 * then serves both with one all-gather. NULL when this does not apply. */
static mg_tensor *gather_through_reshape(part_ctx *c, const mg_tensor *lt, const mg_placement *want) {
    const pt *p = &c->st[lt->id];
    mg_placement whole = p->pl;
    whole.ax[MG_GROUP_TP] = sh_full();
    if (!mg_placement_eq(want, &whole) || p->pl.ax[MG_GROUP_TP].kind != MG_SHARD_SPLIT || pl_dp_partial(&p->pl) ||
        !lt->src || lt->src->op != MG_OP_RESHAPE)
        return NULL;
    const mg_tensor *src = lt->src->in[0];
    const pt *q = &c->st[src->id];
    if (!q->t || pl_dp_partial(&q->pl) || q->pl.ax[MG_GROUP_TP].kind != MG_SHARD_SPLIT) return NULL;
    mg_tensor *full = part_get(c, src, MG_GROUP_TP, sh_full());
    if (!full) return NULL;
    int64_t shape[MG_MAX_DIMS]; /* whole over tp; other axes (cp) may still split it */
    part_local_shape(c, lt, want, shape);
    return part_named(c, mg_reshape(c->P, full, lt->ndim, shape), lt, "tp_gathered", want);
}

mg_tensor *part_get_pl(part_ctx *c, const mg_tensor *lt, const mg_placement *want) {
    pt *p = &c->st[lt->id];
    part_placement(c, lt);
    if (!p->t) {
        if (!c->err->code)
            part_fail(c, MG_ERR_RUNTIME, "partitioning: tensor '%s' is used before it is produced on rank %d", lt->name,
                      c->mesh->rank);
        return NULL;
    }
    if (mg_placement_eq(&p->pl, want)) return p->t;
    mg_tensor *t = cache_find(c, lt->id, want);
    if (t) return t;
    t = gather_through_reshape(c, lt, want);
    if (t) cache_put(c, lt->id, want, t);
    else if (!c->err->code) t = convert(c, lt, p->t, &p->pl, want); /* caches each step */
    if (!t) graph_failed(c);
    return t;
}

mg_tensor *part_get(part_ctx *c, const mg_tensor *lt, int a, mg_sharding want) {
    mg_placement w = *part_placement(c, lt);
    w.ax[a] = part_size(c, (mg_group)a) > 1 ? want : sh_full_on(a);
    return part_get_pl(c, lt, &w);
}

mg_tensor *part_get_summed(part_ctx *c, const mg_tensor *lt, int a, mg_sharding want, unsigned sum_axes) {
    mg_placement w = *part_placement(c, lt);
    w.ax[a] = part_size(c, (mg_group)a) > 1 ? want : sh_full_on(a);
    /* (sums over axes that one mesh group spans, dp x cp, are one all-reduce: convert) */
    for (int b = 0; b < MG_MESH_AXES; b++)
        if ((sum_axes >> b & 1) && w.ax[b].kind == MG_SHARD_PARTIAL) w.ax[b] = sh_full_on(b);
    return part_get_pl(c, lt, &w);
}

/* ---- per-rank attributes ----------------------------------------------------------------- */
/* The attributes that differ per rank (target shapes, vocabulary offsets) of the
 * physical copy of n with physical inputs `in`, derived from the placements: the one
 * place they are, so rules only choose placements. */
static void local_attrs(part_ctx *c, const mg_node *n, mg_tensor *const *in, mg_attrs *at) {
    switch (n->op) {
    case MG_OP_RESHAPE:
    case MG_OP_EXPAND:
    case MG_OP_SUM_TO:
    case MG_OP_ZEROS: { /* a target shape: the output's block */
        int64_t sh[MG_MAX_DIMS];
        part_local_shape(c, n->out[0], &c->out[0], sh);
        for (int d = 0; d < n->out[0]->ndim; d++) at->shape.shape[d] = sh[d];
        break;
    }
    case MG_OP_EMBEDDING: /* the first vocabulary row of this rank's block of the table */
        at->embedding.vocab_offset = in[1]->logical.offset[0];
        break;
    case MG_OP_EMBEDDING_BWD:
        at->embedding.vocab_offset = in[2]->logical.offset[0];
        break;
    case MG_OP_CROSS_ENTROPY_BWD: /* the first vocabulary column of this rank's logits */
        at->xent.vocab_offset = in[1]->logical.offset[in[1]->ndim - 1];
        break;
    default:
        break;
    }
}

/* ---- emission ------------------------------------------------------------------------------------ */
mg_tensor *part_input(part_ctx *c, const mg_node *n, int i) {
    const mg_tensor *lt = n->in[i];
    mg_placement w = *part_placement(c, lt);
    for (int a = 0; a < MG_MESH_AXES; a++)
        if (c->want_set[i] >> a & 1) w.ax[a] = c->want[i].ax[a];
    return part_get_pl(c, lt, &w);
}

mg_node *part_emit_aux(part_ctx *c, const mg_node *n, mg_op op, const mg_attrs *attrs, int n_in, mg_tensor *const *in,
                       const char *name) {
    (void)n;
    mg_node *nd = mg_node_new(c->P, op, attrs, n_in, in, name);
    if (!nd) graph_failed(c);
    return nd;
}

mg_node *part_emit(part_ctx *c, const mg_node *n, mg_tensor *const *in, const mg_attrs *attrs) {
    mg_node *nd = NULL; /* output names are the logical (absolute) names */
    WITH_ABSOLUTE_NAMES(c, nd = mg_node_new(c->P, n->op, attrs ? attrs : &n->attrs, n->n_in, in, n->out[0]->name));
    if (!nd) {
        graph_failed(c);
        return NULL;
    }
    free(nd->scope);
    nd->scope = strdup(n->scope);
    for (int j = 0; j < n->n_out; j++)
        if (part_bind(c, n, n->out[j], nd->out[j], &c->out[j])) return NULL;
    return nd;
}

/* Inputs some axis counts once (count_once): replicated copies contribute on index 0 of
 * that axis only; elsewhere they are left out, and a node left with no inputs is a zero
 * term. Returns 1 when it bound the zero. */
static int drop_count_once(part_ctx *c, const mg_node *n, mg_tensor **in, int *n_in) {
    int k = 0;
    for (int i = 0; i < n->n_in; i++) {
        bool keep = true;
        for (int a = 0; a < MG_MESH_AXES; a++)
            if ((c->count_once[a] >> i & 1) && c->mesh->coord[a] != 0) keep = false;
        if (keep) in[k++] = in[i];
    }
    *n_in = k;
    if (k) return MG_OK;
    mg_tensor *z = mg_zeros(c->P, n->out[0]->dtype, n->out[0]->ndim, n->out[0]->shape);
    if (!z) return part_graph_error(c);
    c->st[n->out[0]->id] = (pt){z, c->out[0]};
    part_set_identity(c, z, n->out[0], &c->out[0]);
    return 1;
}

int part_emit_node(part_ctx *c, const mg_node *n) {
    if (n->n_in > MAXIO || n->n_out > MAXIO)
        return part_fail(c, MG_ERR_UNSUPPORTED, "partitioning: %s has too many inputs", mg_op_name(n->op));
    int rc = part_state_leaves(c, n);
    if (rc) return rc;
    mg_tensor *in[MAXIO];
    for (int i = 0; i < n->n_in; i++)
        if (!(in[i] = part_input(c, n, i))) return part_status(c);
    mg_attrs attrs = n->attrs;
    local_attrs(c, n, in, &attrs);
    if (n->op == MG_OP_MATMUL) {
        int h = tile_matmul(c, n, in);
        if (h) return h < 0 ? h : MG_OK;
    }
    int n_in = n->n_in;
    bool once = false;
    for (int a = 0; a < MG_MESH_AXES; a++) once |= c->count_once[a] != 0;
    if (once) {
        int h = drop_count_once(c, n, in, &n_in);
        if (h) return h < 0 ? h : MG_OK;
    }
    mg_node tmp = *n;
    tmp.n_in = n_in;
    return part_emit(c, &tmp, in, &attrs) ? MG_OK : part_status(c);
}

int part_bind(part_ctx *c, const mg_node *n, const mg_tensor *lo, mg_tensor *po, const mg_placement *pl) {
    if (strcmp(po->name, lo->name)) {
        /* Logical names win: a helper tensor that took this name by chance (builders
         * name outputs after their op and scope) moves aside. */
        mg_tensor *other = mg_graph_find(c->P, lo->name);
        if (other) {
            char nm[512];
            snprintf(nm, sizeof nm, "%s@aux", lo->name);
            for (int k = 1; mg_graph_find(c->P, nm); k++) snprintf(nm, sizeof nm, "%s@aux%d", lo->name, k);
            part_rename(c, other, nm);
        }
        part_rename(c, po, lo->name);
    }
    /* the op's shape rule must agree with the placement the rule claims */
    int64_t want[MG_MAX_DIMS];
    part_local_shape(c, lo, pl, want);
    for (int d = 0; d < lo->ndim; d++)
        if (po->ndim != lo->ndim || po->shape[d] != want[d]) {
            char b1[96], b2[96], b3[96];
            return part_fail(c, MG_ERR_RUNTIME, "partitioning %s '%s': physical shape %s, expected %s for placement %s",
                             mg_op_name(n->op), lo->name, mg_shape_str(po, b1, sizeof b1),
                             mg_dims_str(lo->ndim, want, b2, sizeof b2), mg_placement_str(pl, b3, sizeof b3));
        }
    part_set_identity(c, po, lo, pl);
    po->role = lo->role;
    po->persistent = lo->persistent;
    if (lo->updates) po->updates = c->st[lo->updates->id].t;
    c->st[lo->id] = (pt){po, *pl};
    return MG_OK;
}

/* ---- the walk ---------------------------------------------------------------------------------------- */
/* Host-read outputs (loss) that ended as partial sums are reduced, keeping their name. */
static int finish_outputs(part_ctx *c) {
    for (int i = 0; i < mg_graph_n_tensors(c->L); i++) {
        const mg_tensor *lt = mg_graph_tensor(c->L, i);
        pt *p = &c->st[i];
        bool partial = false;
        for (int a = 0; a < MG_MESH_AXES; a++) partial |= p->pl.ax[a].kind == MG_SHARD_PARTIAL;
        if (!lt->persistent || !lt->src || !p->t || !partial) continue;
        part_enter_node_context(c, lt->src);
        char nm[512];
        snprintf(nm, sizeof nm, "%s@partial", lt->name);
        part_rename(c, p->t, nm);
        p->t->persistent = false;
        mg_placement whole = mg_placement_full();
        mg_tensor *t = part_get_pl(c, lt, &whole);
        if (!t) return c->err->code ? c->err->code : MG_ERR_RUNTIME;
        part_rename(c, t, lt->name);
        t->persistent = true;
        t->role = lt->role;
        *p = (pt){t, whole}; /* the value the host reads */
    }
    return MG_OK;
}

/* A recompute gate (graph/recompute.c) computes nothing: its output is its first input as
 * this rank holds it, available once whatever else it waits for is (on this rank). So
 * no axis places it, and it waits for as many tensors as the rewrite asks. */
static int emit_gate(part_ctx *c, const mg_node *n) {
    const mg_placement pl = *part_placement(c, n->in[0]);
    mg_tensor *x = c->st[n->in[0]->id].t;
    if (!x) return part_fail(c, MG_ERR_RUNTIME, "partitioning: '%s' gates a tensor this rank lacks", n->out[0]->name);
    mg_tensor **in = malloc((size_t)n->n_in * sizeof *in);
    if (!in) return part_fail(c, MG_ERR_NOMEM, "partitioning: out of memory");
    int k = 0;
    in[k++] = x;
    for (int i = 1; i < n->n_in; i++)
        if (c->st[n->in[i]->id].t) in[k++] = c->st[n->in[i]->id].t;
    mg_node *nd = k > 1 ? part_emit_aux(c, n, n->op, &n->attrs, k, in, n->out[0]->name) : NULL;
    free(in);
    if (k == 1) { /* nothing of what it waits for is here: the value itself */
        c->st[n->out[0]->id] = (pt){x, pl};
        return PART_DONE;
    }
    if (!nd) return part_status(c);
    return part_bind(c, n, n->out[0], nd->out[0], &pl) ? part_status(c) : PART_DONE;
}

/* One node through the axes' hooks, then (unless an axis took it over) emitted, then the
 * after hooks. */
static int partition_node(part_ctx *c, const mg_node *n) {
    part_enter_node_context(c, n);
    int v = PART_NEXT, rc = MG_OK;
    for (int a = 0; a < PART_N_AXES && v == PART_NEXT; a++) {
        if (a > PART_PP && n->op == MG_OP_RECOMPUTE_GATE) { /* (the pipeline places it with its layer) */
            v = emit_gate(c, n);
            break;
        }
        if (!axes[a]->node) continue;
        v = axes[a]->node(c, n);
        if (v < 0) return v;
        if (c->err->code) return c->err->code;
    }
    if (v == PART_ELSEWHERE) return MG_OK;
    if (v == PART_NEXT) rc = part_emit_node(c, n);
    for (int a = 0; a < PART_N_AXES && !rc; a++)
        if (axes[a]->after) rc = axes[a]->after(c, n);
    return rc ? rc : graph_failed(c);
}

/* The walk's order: the logical graph's topological order with the once-per-step
 * optimizer nodes after every other node. The plain order takes the lowest-numbered
 * ready node first; after a recompute rewrite (graph/recompute.c), whose clones are
 * numbered after the optimizer's nodes, a gradient norm's sum of squares for the last
 * layers' parameters is ready, and taken, before the first layers' backward: the
 * distributed optimizer, which reduce-scatters a bucket once all its gradients are
 * final (dist_opt.c), then met the sum of squares of a bucket not reduced yet. Within
 * each part the order is the plain one, so a graph whose step part already came last
 * walks as before. The step part depends on the micro-batches, never the reverse
 * (parameters are updated in place: an update follows every reader); where that fails
 * (a graph built by hand, or one holding collectives already) the plain order is kept.
 * Returns ord itself, or a new array the caller frees (NULL: out of memory). */
static mg_node **walk_order(const mg_graph *L, mg_node **ord, int n) {
    int n_nodes = mg_graph_n_nodes(L), n_t = mg_graph_n_tensors(L), k = 0;
    bool later = false, step = false;
    for (int i = 0; i < n; i++) {
        bool opt = ord[i]->phase == MG_PHASE_OPTIMIZER;
        later |= step && !opt; /* a micro-batch node after a step node */
        step |= opt;
        if (mg_op_def_get(ord[i]->op)->flags & MG_OPF_COMM) return ord;
    }
    if (!later) return ord;
    mg_node **w = malloc((size_t)n * sizeof *w);
    int *pos = malloc(((size_t)n_nodes + 1) * sizeof *pos), *writer = malloc(((size_t)n_t + 1) * sizeof *writer);
    if (!w || !pos || !writer) {
        free(w), free(pos), free(writer);
        return NULL;
    }
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < n; i++)
            if ((ord[i]->phase == MG_PHASE_OPTIMIZER) == (pass == 1)) w[k++] = ord[i];
    for (int i = 0; i < n; i++) pos[w[i]->id] = i;
    for (int t = 0; t < n_t; t++) writer[t] = -1;
    for (int i = 0; i < n; i++)
        for (int o = 0; o < w[i]->n_out; o++)
            if (w[i]->out[o]->updates) writer[w[i]->out[o]->updates->id] = w[i]->id;
    bool ok = true; /* every input made before its reader; every reader of a value before its update */
    for (int i = 0; i < n && ok; i++)
        for (int j = 0; j < w[i]->n_in && ok; j++) {
            const mg_tensor *t = w[i]->in[j];
            if (t->src && pos[t->src->id] >= i) ok = false;
            if (writer[t->id] >= 0 && writer[t->id] != w[i]->id && pos[writer[t->id]] <= i) ok = false;
        }
    free(pos);
    free(writer);
    if (ok) return w;
    free(w);
    return ord;
}

int mg_partition(const mg_graph *L, const mg_plan *plan, const mg_mesh *mesh, mg_rank_graph *out, mg_error *err) {
    memset(out, 0, sizeof *out);
    /* what would otherwise pass silently (a rule that does nothing, every data-parallel
     * rank computing the whole batch) is an error here, for every caller, not only the
     * trainer's */
    int crc = mg_plan_check_graph(plan, mesh->world, L, err);
    if (crc) return crc;
    part_ctx c;
    memset(&c, 0, sizeof c);
    c.L = L;
    c.plan = plan;
    c.mesh = mesh;
    c.err = err;
    int nt = mg_graph_n_tensors(L), rc = MG_OK;
    mg_node **topo = NULL, **ord = NULL;
    c.cur_mb = -1;
    c.P = mg_graph_new();
    c.st = calloc((size_t)nt + 1, sizeof *c.st);
    c.final_grad_of = malloc(((size_t)nt + 1) * sizeof *c.final_grad_of);
    if (!c.P || !c.st || !c.final_grad_of) {
        rc = mg_error_set(err, MG_ERR_NOMEM, "partitioning: out of memory");
        goto done;
    }
    for (int i = 0; i < nt; i++) c.final_grad_of[i] = -1;
    for (int i = 0; i < nt; i++) {
        const mg_tensor *t = mg_graph_tensor(L, i);
        if (t->requires_grad && t->grad) c.final_grad_of[t->grad->id] = i;
    }
    int n_ord;
    if ((rc = mg_graph_topo((mg_graph *)L, &topo, &n_ord, err))) goto done;
    if (!(ord = walk_order(L, topo, n_ord))) {
        rc = mg_error_set(err, MG_ERR_NOMEM, "partitioning: out of memory");
        goto done;
    }
    for (int a = 0; a < PART_N_AXES && !rc; a++)
        if (axes[a]->init) rc = axes[a]->init(&c, ord, n_ord);
    if (rc) goto done;
    for (int i = 0; i < n_ord && !rc; i++) rc = partition_node(&c, ord[i]);
    if (!rc) rc = finish_outputs(&c);
    for (int a = 0; a < PART_N_AXES && !rc; a++)
        if (axes[a]->finish) rc = axes[a]->finish(&c);
    for (int i = 0; i < nt && !rc; i++) { /* model copies' bindings, once both sides are made */
        const mg_tensor *lt = mg_graph_tensor(L, i);
        if (lt->copy_of && c.st[i].t) c.st[i].t->copy_of = c.st[lt->copy_of->id].t;
    }
    part_enter_node_context(&c, NULL);
    if (!rc) rc = mg_graph_validate(c.P, err);
    if (!rc && !(out->local = calloc((size_t)nt + 1, sizeof *out->local)))
        rc = mg_error_set(err, MG_ERR_NOMEM, "partitioning: out of memory");
    for (int i = 0; i < nt && !rc; i++) out->local[i] = c.st[i].t;
done:
    if (ord != topo) free(ord); /* (the graph's own order is the graph's) */
    for (int a = PART_N_AXES - 1; a >= 0; a--)
        if (axes[a]->release) axes[a]->release(&c);
    free(c.st);
    free(c.final_grad_of);
    free(c.conv);
    if (rc) {
        if (err && !err->code) mg_error_set(err, rc, "partitioning failed");
        mg_graph_free(c.P);
        free(out->local);
        memset(out, 0, sizeof *out);
        return rc;
    }
    out->graph = c.P;
    out->logical = L;
    out->n_logical = nt;
    out->owns_graph = true;
    return MG_OK;
}

int mg_rank_graph_serial(mg_graph *L, mg_rank_graph *out, mg_error *err) {
    memset(out, 0, sizeof *out);
    int nt = mg_graph_n_tensors(L);
    if (!(out->local = calloc((size_t)nt + 1, sizeof *out->local)))
        return mg_error_set(err, MG_ERR_NOMEM, "out of memory binding the graph");
    for (int i = 0; i < nt; i++) out->local[i] = mg_graph_tensor(L, i);
    out->graph = L;
    out->logical = L;
    out->n_logical = nt;
    return MG_OK;
}

mg_tensor *mg_rank_tensor(const mg_rank_graph *r, const mg_tensor *lt) {
    if (!r || !lt || !r->local || lt->id < 0 || lt->id >= r->n_logical || mg_graph_tensor(r->logical, lt->id) != lt)
        return NULL;
    return r->local[lt->id];
}

void mg_rank_graph_release(mg_rank_graph *r) {
    if (!r) return;
    if (r->owns_graph) mg_graph_free(r->graph);
    free(r->local);
    memset(r, 0, sizeof *r);
}

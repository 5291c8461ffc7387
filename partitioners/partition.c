/* The partitioner's walk: logical graph -> this rank's physical graph.
 *
 * Nodes are visited in the logical graph's deterministic topological order, which
 * every rank shares, so collectives get the same relative order on every rank of a
 * group by construction (their `seq`). For each node: data parallelism first (is the
 * node this rank's? are its inputs partial sums over dp?), then the tensor-parallel
 * rules choose states, conversions are inserted, and the physical node is emitted
 * with the logical node's names, scope, phase and micro-batch.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "partitioners/partition_internal.h"

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

/* ---- identities and shapes ------------------------------------------------------------ */
/* Local shape of logical tensor lt placed as p (rules only choose placements that
 * divide: a failure here is the partitioner's bug, reported by part_bind's check). */
static void local_shape(const part_ctx *c, const mg_tensor *lt, const mg_placement *p, int64_t *shape) {
    for (int i = 0; i < MG_MAX_DIMS; i++) shape[i] = lt->shape[i];
    mg_error e = {0};
    if (mg_placement_local(p, c->mesh, lt->ndim, lt->shape, shape, NULL, &e))
        for (int i = 0; i < lt->ndim; i++) shape[i] = -1;
}

void part_set_identity(part_ctx *c, mg_tensor *t, const mg_tensor *lt, const mg_placement *p) {
    t->logical = lt->logical;
    for (int i = 0; i < MG_MAX_DIMS; i++) t->logical.offset[i] = 0;
    mg_error e = {0};
    mg_placement_local(p, c->mesh, lt->ndim, lt->shape, NULL, t->logical.offset, &e);
    t->place = *p;
}

mg_placement part_node_pl(const part_ctx *c, mg_sharding s) {
    mg_placement p = c->node_pl;
    p.ax[MG_GROUP_TP] = c->tp > 1 ? s : sh_full();
    if (c->cp_node) p.ax[MG_GROUP_CP] = c->cp_out[0]; /* the first output's (part_emit sets each) */
    return p;
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
    c->node_pl = mg_placement_full();
    c->cp_node = false;
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

/* ---- leaves ---------------------------------------------------------------------------------- */
mg_tensor *part_make_leaf(part_ctx *c, const mg_tensor *lt, const mg_placement *p) {
    int64_t shape[MG_MAX_DIMS];
    local_shape(c, lt, p, shape);
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
    part_set_identity(c, t, lt, p);
    return t;
}

/* A leaf's natural placement: parameters as the plan's shard rules say over tp,
 * everything replicated otherwise. */
static mg_placement leaf_placement(part_ctx *c, const mg_tensor *lt) {
    mg_placement p = mg_placement_full();
    if (c->tp > 1 && lt->role == MG_ROLE_PARAM) p.ax[MG_GROUP_TP] = tp_param_state(c, lt);
    ep_leaf_placement(c, lt, &p);
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

mg_sharding part_state(part_ctx *c, const mg_tensor *lt) { return part_placement(c, lt)->ax[MG_GROUP_TP]; }

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

static mg_tensor *named(part_ctx *c, mg_tensor *t, const mg_tensor *lt, const char *what, const mg_placement *p) {
    if (!t) return NULL;
    char nm[512];
    snprintf(nm, sizeof nm, "%s@%s", lt->name, what);
    for (int k = 1; mg_graph_find(c->P, nm); k++) snprintf(nm, sizeof nm, "%s@%s%d", lt->name, what, k);
    part_rename(c, t, nm);
    part_set_identity(c, t, lt, p);
    return t;
}

/* Converts x (placed as *cur) on one axis to state `to`, updating *cur: the collective
 * over that axis' group, or a local slice. */
static mg_tensor *convert_axis(part_ctx *c, const mg_tensor *lt, mg_tensor *x, mg_placement *cur, int a,
                               mg_sharding to) {
    mg_graph *P = c->P;
    mg_group g = (mg_group)a;
    int n = c->mesh->size[a];
    /* a sum over pipeline stages runs over the stages that hold the tensor */
    if (a == MG_GROUP_PP && c->pp && pp_group_of(c, lt, &g, &n)) return NULL;
    int rank = c->mesh->coord[g];
    mg_sharding from = cur->ax[a];
    char what[32];
    if (sh_eq(from, to)) return x;
    if (from.kind == MG_SHARD_SPLIT && to.kind != MG_SHARD_FULL) { /* split -> other: through full */
        x = convert_axis(c, lt, x, cur, a, mg_place_full(g));
        return x ? convert_axis(c, lt, x, cur, a, to) : NULL;
    }
    cur->ax[a] = to;
    mg_tensor *y = NULL;
    if (g == MG_GROUP_CP && n > 1 && (from.kind == MG_SHARD_SPLIT || to.kind == MG_SHARD_SPLIT))
        return named(c, cp_convert_axis(c, x, from, to, &c->seq, what, sizeof what), lt, what, cur); /* zigzag */
    if (from.kind == MG_SHARD_PARTIAL && to.kind == MG_SHARD_FULL) {
        snprintf(what, sizeof what, "%s_allreduce", mg_group_name((mg_group)a));
        y = mg_allreduce(P, x, g, n, MG_REDUCE_SUM, c->seq++);
        if (g == MG_GROUP_EMB) snprintf(what, sizeof what, "emb_allreduce");
    } else if (from.kind == MG_SHARD_PARTIAL && to.kind == MG_SHARD_SPLIT) {
        snprintf(what, sizeof what, "%s_reduce_scatter", mg_group_name((mg_group)a));
        y = mg_reduce_scatter(P, x, g, n, to.dim, c->seq++);
    } else if (from.kind == MG_SHARD_SPLIT && to.kind == MG_SHARD_FULL) {
        snprintf(what, sizeof what, "%s_allgather", mg_group_name((mg_group)a));
        y = mg_allgather(P, x, g, n, from.dim, c->seq++);
    } else if (from.kind == MG_SHARD_FULL && to.kind == MG_SHARD_SPLIT) {
        int64_t len = x->shape[to.dim] / n;
        snprintf(what, sizeof what, "%s_slice", mg_group_name((mg_group)a));
        y = mg_slice(P, x, to.dim, (int64_t)rank * len, len);
    } else { /* full -> partial: the whole value on index 0, zero elsewhere, sums to it once */
        if (rank == 0) return x;
        snprintf(what, sizeof what, "%s_zero", mg_group_name((mg_group)a));
        y = mg_zeros(P, x->dtype, x->ndim, x->shape);
    }
    return named(c, y, lt, what, cur);
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

/* Converts x from placement `from` to `to`, axis by axis from the outermost (pp) in:
 * a dp share is summed before tp converts (the bytes tp moves are then whole values).
 * Where axes split the same dimension, the blocks nest (placement.h), so before an
 * outer axis gathers or slices that dimension, the inner axes splitting it gather
 * first; they reach their target when the walk gets to them. */
static mg_tensor *convert(part_ctx *c, const mg_tensor *lt, mg_tensor *x, const mg_placement *from,
                          const mg_placement *to) {
    mg_placement cur = *from;
    if (ep_sums_over_edp(c, &cur, to)) {
        mg_placement next = cur;
        next.ax[MG_GROUP_DP] = mg_place_full(MG_GROUP_DP);
        mg_tensor *t = cache_find(c, lt->id, &next);
        if (!t && (t = ep_edp_sum(c, lt, x, &next)) && t != x) cache_put(c, lt->id, &next, t);
        if (!(x = t)) return NULL;
        cur = next;
    }
    /* A sum over both dp and cp is one all-reduce over the combined dp x cp group
     * (Megatron's gradient reduction under context parallelism), not two. */
    if (c->grad_group == MG_GROUP_DP_CP && cur.ax[MG_GROUP_DP].kind == MG_SHARD_PARTIAL &&
        cur.ax[MG_GROUP_CP].kind == MG_SHARD_PARTIAL && to->ax[MG_GROUP_DP].kind == MG_SHARD_FULL &&
        to->ax[MG_GROUP_CP].kind == MG_SHARD_FULL) {
        mg_placement next = cur;
        next.ax[MG_GROUP_DP] = mg_place_full(MG_GROUP_DP);
        next.ax[MG_GROUP_CP] = mg_place_full(MG_GROUP_CP);
        mg_tensor *t = cache_find(c, lt->id, &next);
        if (!t) {
            t = named(c, mg_allreduce(c->P, x, MG_GROUP_DP_CP, c->gdp, MG_REDUCE_SUM, c->seq++), lt, "dp_cp_allreduce",
                      &next);
            if (t) cache_put(c, lt->id, &next, t);
        }
        x = t;
        cur = next;
    }
    for (int a = MG_MESH_AXES - 1; a >= 0 && x; a--) {
        if (sh_eq(cur.ax[a], to->ax[a])) continue;
        int dims[2] = {cur.ax[a].kind == MG_SHARD_SPLIT ? cur.ax[a].dim : -1,
                       to->ax[a].kind == MG_SHARD_SPLIT ? to->ax[a].dim : -1};
        for (int b = 0; b < a && x; b++)
            if (cur.ax[b].kind == MG_SHARD_SPLIT && (cur.ax[b].dim == dims[0] || cur.ax[b].dim == dims[1]))
                x = step(c, lt, x, &cur, b, mg_place_full((mg_group)b));
        if (x) x = step(c, lt, x, &cur, a, to->ax[a]);
    }
    return x;
}

mg_sharding part_resolve_target(part_ctx *c, const mg_tensor *lt, bool allow_seq_split) {
    if (c->plan->sequence_parallel && allow_seq_split && lt->ndim >= 2 && lt->shape[0] % c->tp == 0)
        return sh_split(0);
    return sh_full();
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
    mg_tensor *full = part_get(c, src, sh_full());
    if (!full) return NULL;
    int64_t shape[MG_MAX_DIMS]; /* whole over tp; other axes (cp) may still split it */
    local_shape(c, lt, want, shape);
    return named(c, mg_reshape(c->P, full, lt->ndim, shape), lt, "tp_gathered", want);
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

mg_tensor *part_get(part_ctx *c, const mg_tensor *lt, mg_sharding want) {
    mg_placement w = *part_placement(c, lt);
    w.ax[MG_GROUP_TP] = c->tp > 1 ? want : sh_full();
    return part_get_pl(c, lt, &w);
}

mg_tensor *part_get_dp_full(part_ctx *c, const mg_tensor *lt, mg_sharding want) {
    mg_placement w = *part_placement(c, lt);
    w.ax[MG_GROUP_TP] = c->tp > 1 ? want : sh_full();
    w.ax[MG_GROUP_DP] = mg_place_full(MG_GROUP_DP);
    /* under context parallelism a gradient is also a partial sum over cp: one
     * all-reduce over dp x cp (convert) */
    if (w.ax[MG_GROUP_CP].kind == MG_SHARD_PARTIAL) w.ax[MG_GROUP_CP] = mg_place_full(MG_GROUP_CP);
    return part_get_pl(c, lt, &w);
}

/* ---- per-rank attributes ----------------------------------------------------------------- */
void part_local_attrs(part_ctx *c, const mg_node *n, mg_tensor *const *in, const mg_sharding *out_tp, mg_attrs *at) {
    switch (n->op) {
    case MG_OP_RESHAPE:
    case MG_OP_EXPAND:
    case MG_OP_SUM_TO:
    case MG_OP_ZEROS: { /* a target shape: the output's block */
        mg_placement pl = part_node_pl(c, out_tp[0]);
        int64_t sh[MG_MAX_DIMS];
        local_shape(c, n->out[0], &pl, sh);
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
mg_node *part_emit_aux(part_ctx *c, const mg_node *n, mg_op op, const mg_attrs *attrs, int n_in, mg_tensor *const *in,
                       const char *name) {
    (void)n;
    mg_node *nd = mg_node_new(c->P, op, attrs, n_in, in, name);
    if (!nd) graph_failed(c);
    return nd;
}

mg_node *part_emit(part_ctx *c, const mg_node *n, mg_tensor *const *in, const mg_attrs *attrs,
                   const mg_sharding *out_tp) {
    mg_node *nd = NULL; /* output names are the logical (absolute) names */
    WITH_ABSOLUTE_NAMES(c, nd = mg_node_new(c->P, n->op, attrs ? attrs : &n->attrs, n->n_in, in, n->out[0]->name));
    if (!nd) {
        graph_failed(c);
        return NULL;
    }
    free(nd->scope);
    nd->scope = strdup(n->scope);
    for (int j = 0; j < n->n_out; j++) {
        mg_placement pl = part_node_pl(c, out_tp[j]);
        if (c->cp_node) pl.ax[MG_GROUP_CP] = c->cp_out[j];
        if (part_bind(c, n, n->out[j], nd->out[j], &pl)) return NULL;
    }
    return nd;
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
    local_shape(c, lo, pl, want);
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

int mg_partition(const mg_graph *L, const mg_plan *plan, const mg_mesh *mesh, mg_rank_graph *out, mg_error *err) {
    memset(out, 0, sizeof *out);
    part_ctx c;
    memset(&c, 0, sizeof c);
    c.L = L;
    c.plan = plan;
    c.mesh = mesh;
    c.err = err;
    c.tp = mesh->size[MG_GROUP_TP];
    c.tp_rank = mesh->coord[MG_GROUP_TP];
    c.dp = mesh->size[MG_GROUP_DP];
    c.dp_rank = mesh->coord[MG_GROUP_DP];
    c.grad_group = mesh->size[MG_GROUP_CP] > 1 ? MG_GROUP_DP_CP : MG_GROUP_DP;
    c.gdp = mesh->size[c.grad_group];
    c.gdp_rank = mesh->coord[c.grad_group];
    int nt = mg_graph_n_tensors(L), rc = MG_OK;
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
    mg_node **ord;
    int n_ord;
    if ((rc = mg_graph_topo((mg_graph *)L, &ord, &n_ord, err))) goto done;
    if (mesh->size[MG_GROUP_PP] > 1 && (rc = pp_init(&c, ord, n_ord))) goto done;
    if (plan->distributed_optimizer && c.gdp > 1 && (rc = dopt_init(&c))) goto done;
    if ((rc = ep_init(&c))) goto done;
    for (int i = 0; i < n_ord && !rc; i++) {
        const mg_node *n = ord[i];
        part_enter_node_context(&c, n);
        int h = c.pp ? pp_partition_node(&c, n) : 0;
        if (h < 0) rc = h;
        if (h == 1) continue; /* another pipeline stage's node */
        if (!rc && h == 0 && c.dopt) h = dopt_partition_node(&c, n);
        if (!rc && h == 0) h = dp_partition_node(&c, n);
        if (!rc && h == 0) h = cp_partition_node(&c, n);
        if (h < 0) rc = h;
        if (!rc && h == 0 && c.ep) rc = ep_partition_node(&c, n, &h);
        if (!rc && h == 0) rc = tp_partition_node(&c, n);
        if (!rc && c.pp) rc = pp_after_node(&c, n);
        if (!rc) rc = dp_after_node(&c, n);
        if (!rc) rc = cp_after_node(&c, n);
        if (!rc && c.dopt) rc = dopt_after_node(&c, n);
        if (!rc) rc = graph_failed(&c);
    }
    if (!rc) rc = finish_outputs(&c);
    for (int i = 0; c.pp && i < nt && !rc; i++) rc = pp_finish_output(&c, mg_graph_tensor(L, i));
    part_enter_node_context(&c, NULL);
    if (!rc) rc = mg_graph_validate(c.P, err);
    if (!rc && !(out->local = calloc((size_t)nt + 1, sizeof *out->local)))
        rc = mg_error_set(err, MG_ERR_NOMEM, "partitioning: out of memory");
    for (int i = 0; i < nt && !rc; i++) out->local[i] = c.st[i].t;
done:
    if (c.dopt) dopt_free(&c);
    ep_free(&c);
    cp_free(&c);
    pp_free(&c);
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

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
static void local_shape(const part_ctx *c, const mg_tensor *lt, mg_sharding s, int64_t *shape) {
    for (int i = 0; i < MG_MAX_DIMS; i++) shape[i] = lt->shape[i];
    if (s.kind == MG_SHARD_SPLIT) shape[s.dim] /= c->tp;
}

void part_set_identity(part_ctx *c, mg_tensor *t, const mg_tensor *lt, mg_sharding s) {
    t->logical = lt->logical;
    for (int i = 0; i < MG_MAX_DIMS; i++) t->logical.offset[i] = 0;
    if (s.kind == MG_SHARD_SPLIT) t->logical.offset[s.dim] = (int64_t)c->tp_rank * t->shape[s.dim];
    t->shard = s;
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

/* Aux and conversion nodes land in the scope, phase and micro-batch of the logical
 * node being partitioned. */
static void enter_node_context(part_ctx *c, const mg_node *n) {
    mg_scope_set(c->P, n ? n->scope : "");
    c->cur_phase = n ? n->phase : MG_PHASE_FORWARD;
    mg_graph_set_phase(c->P, c->cur_phase);
    c->cur_mb = n ? n->mb : -1;
    mg_graph_set_mb(c->P, c->cur_mb);
}

void part_enter_step_context(part_ctx *c) {
    c->cur_phase = MG_PHASE_OPTIMIZER;
    mg_graph_set_phase(c->P, MG_PHASE_OPTIMIZER);
    c->cur_mb = -1;
    mg_graph_set_mb(c->P, -1);
}

/* ---- leaves ---------------------------------------------------------------------------------- */
mg_tensor *part_make_leaf(part_ctx *c, const mg_tensor *lt, mg_sharding s) {
    int64_t shape[MG_MAX_DIMS];
    local_shape(c, lt, s, shape);
    mg_tensor *t = part_new_leaf(c, lt->name, lt->dtype, lt->role, lt->ndim, shape);
    if (!t) return NULL;
    t->init = lt->init;
    t->requires_grad = lt->requires_grad;
    t->no_weight_decay = lt->no_weight_decay;
    t->persistent = lt->persistent;
    t->per_microbatch = lt->per_microbatch;
    part_set_identity(c, t, lt, s);
    return t;
}

static int materialize_leaf(part_ctx *c, const mg_tensor *lt, mg_sharding s) {
    pt *p = &c->st[lt->id];
    p->tp = c->tp > 1 ? s : sh_full();
    p->t = part_make_leaf(c, lt, p->tp);
    p->dp_partial = false;
    return p->t ? MG_OK : graph_failed(c);
}

mg_sharding part_state(part_ctx *c, const mg_tensor *lt) {
    pt *p = &c->st[lt->id];
    if (!p->t && !p->absent && !lt->src) {
        mg_sharding s = lt->role == MG_ROLE_PARAM ? tp_param_state(c, lt) : sh_full();
        materialize_leaf(c, lt, s);
    }
    return p->tp;
}

/* ---- conversions ------------------------------------------------------------------------------- */
/* Conversions are cached per part of the schedule: a tensor made in the per-micro-batch
 * part lives in a slot and cannot serve the once-per-step part, and the step part's
 * results cannot serve the micro-batches that run before it. And per phase, as
 * Megatron does: backward gathers its sequence-parallel inputs again instead of
 * keeping the forward's gathered copies alive until the weight gradients (one more
 * all-gather per layer input, tp-fold less activation memory: Korthikanti et al.). */
static mg_tensor *cache_find(part_ctx *c, int lid, mg_sharding want, bool dp_full) {
    bool per_mb = c->cur_mb >= 0;
    for (int i = c->n_conv - 1; i >= 0; i--)
        if (c->conv[i].lid == lid && sh_eq(c->conv[i].want, want) && c->conv[i].dp_full == dp_full &&
            c->conv[i].per_mb == per_mb && c->conv[i].phase == c->cur_phase)
            return c->conv[i].t;
    return NULL;
}

static void cache_put(part_ctx *c, int lid, mg_sharding want, bool dp_full, mg_tensor *t) {
    if (c->n_conv == c->cap_conv) {
        int cap = c->cap_conv ? 2 * c->cap_conv : 256;
        conv_entry *e = realloc(c->conv, (size_t)cap * sizeof *e);
        if (!e) return; /* a cache miss later only costs a duplicate conversion */
        c->conv = e;
        c->cap_conv = cap;
    }
    c->conv[c->n_conv++] = (conv_entry){lid, want, dp_full, c->cur_mb >= 0, c->cur_phase, t};
}

static mg_tensor *named(part_ctx *c, mg_tensor *t, const mg_tensor *lt, const char *what, mg_sharding s) {
    if (!t) return NULL;
    char nm[512];
    snprintf(nm, sizeof nm, "%s@%s", lt->name, what);
    for (int k = 1; mg_graph_find(c->P, nm); k++) snprintf(nm, sizeof nm, "%s@%s%d", lt->name, what, k);
    part_rename(c, t, nm);
    part_set_identity(c, t, lt, s);
    return t;
}

static mg_tensor *convert_tp(part_ctx *c, const mg_tensor *lt, mg_tensor *x, mg_sharding from, mg_sharding to) {
    mg_graph *P = c->P;
    int tp = c->tp;
    if (sh_eq(from, to)) return x;
    if (from.kind == MG_SHARD_PARTIAL && to.kind == MG_SHARD_FULL)
        return named(c, mg_allreduce(P, x, MG_GROUP_TP, tp, MG_REDUCE_SUM, c->seq++), lt, "tp_allreduce", to);
    if (from.kind == MG_SHARD_PARTIAL && to.kind == MG_SHARD_SPLIT)
        return named(c, mg_reduce_scatter(P, x, MG_GROUP_TP, tp, to.dim, c->seq++), lt, "tp_reduce_scatter", to);
    if (from.kind == MG_SHARD_SPLIT && to.kind == MG_SHARD_FULL)
        return named(c, mg_allgather(P, x, MG_GROUP_TP, tp, from.dim, c->seq++), lt, "tp_allgather", to);
    if (from.kind == MG_SHARD_FULL && to.kind == MG_SHARD_SPLIT) {
        int64_t len = x->shape[to.dim] / tp;
        return named(c, mg_slice(P, x, to.dim, (int64_t)c->tp_rank * len, len), lt, "tp_slice", to);
    }
    if (from.kind == MG_SHARD_FULL && to.kind == MG_SHARD_PARTIAL) {
        /* the whole value on tp rank 0, zero elsewhere: summing over tp gives it once */
        if (c->tp_rank == 0) return x;
        return named(c, mg_zeros(P, x->dtype, x->ndim, x->shape), lt, "tp_zero", to);
    }
    /* split -> other split, split -> partial: through full */
    mg_tensor *full = convert_tp(c, lt, x, from, sh_full());
    return convert_tp(c, lt, full, sh_full(), to);
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
static mg_tensor *gather_through_reshape(part_ctx *c, const mg_tensor *lt, mg_sharding want) {
    const pt *p = &c->st[lt->id];
    if (want.kind != MG_SHARD_FULL || p->tp.kind != MG_SHARD_SPLIT || p->dp_partial || !lt->src ||
        lt->src->op != MG_OP_RESHAPE)
        return NULL;
    const mg_tensor *src = lt->src->in[0];
    const pt *q = &c->st[src->id];
    if (!q->t || q->absent || q->dp_partial || q->tp.kind != MG_SHARD_SPLIT) return NULL;
    mg_tensor *full = part_get(c, src, sh_full());
    if (!full) return NULL;
    return named(c, mg_reshape(c->P, full, lt->ndim, lt->shape), lt, "tp_gathered", want);
}

mg_tensor *part_get(part_ctx *c, const mg_tensor *lt, mg_sharding want) {
    pt *p = &c->st[lt->id];
    part_state(c, lt);
    if (!p->t) {
        part_fail(c, MG_ERR_RUNTIME, "partitioning: tensor '%s' is used before it is produced on rank %d", lt->name,
                  c->mesh->rank);
        return NULL;
    }
    if (c->tp == 1) want = sh_full();
    if (sh_eq(p->tp, want)) return p->t;
    mg_tensor *t = cache_find(c, lt->id, want, !p->dp_partial);
    if (t) return t;
    t = gather_through_reshape(c, lt, want);
    if (!t && !c->err->code) t = convert_tp(c, lt, p->t, p->tp, want);
    if (!t) {
        graph_failed(c);
        return NULL;
    }
    cache_put(c, lt->id, want, !p->dp_partial, t);
    return t;
}

mg_tensor *part_get_dp_full(part_ctx *c, const mg_tensor *lt, mg_sharding want) {
    pt *p = &c->st[lt->id];
    part_state(c, lt);
    if (!p->dp_partial) return part_get(c, lt, want);
    /* reduce over dp in the current tp state, then convert over tp */
    mg_tensor *t = cache_find(c, lt->id, p->tp, true);
    if (!t) {
        t = named(c, mg_allreduce(c->P, p->t, MG_GROUP_DP, c->dp, MG_REDUCE_SUM, c->seq++), lt, "dp_allreduce", p->tp);
        if (!t) {
            graph_failed(c);
            return NULL;
        }
        cache_put(c, lt->id, p->tp, true, t);
    }
    if (c->tp == 1) want = sh_full();
    if (sh_eq(p->tp, want)) return t;
    mg_tensor *u = cache_find(c, lt->id, want, true);
    if (u) return u;
    u = convert_tp(c, lt, t, p->tp, want);
    if (u) cache_put(c, lt->id, want, true, u);
    else graph_failed(c);
    return u;
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
                   const mg_sharding *out_state, bool dp_partial) {
    mg_node *nd = NULL; /* output names are the logical (absolute) names */
    WITH_ABSOLUTE_NAMES(c, nd = mg_node_new(c->P, n->op, attrs ? attrs : &n->attrs, n->n_in, in, n->out[0]->name));
    if (!nd) {
        graph_failed(c);
        return NULL;
    }
    free(nd->scope);
    nd->scope = strdup(n->scope);
    for (int j = 0; j < n->n_out; j++)
        if (part_bind(c, n, n->out[j], nd->out[j], out_state[j], dp_partial)) return NULL;
    return nd;
}

int part_bind(part_ctx *c, const mg_node *n, const mg_tensor *lo, mg_tensor *po, mg_sharding s, bool dp_partial) {
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
    if (c->tp == 1) s = sh_full();
    /* the op's shape rule must agree with the state the rule claims */
    int64_t want[MG_MAX_DIMS];
    local_shape(c, lo, s, want);
    for (int d = 0; d < lo->ndim; d++)
        if (po->ndim != lo->ndim || po->shape[d] != want[d]) {
            char b1[96], b2[96];
            return part_fail(c, MG_ERR_RUNTIME, "partitioning %s '%s': physical shape %s, expected %s for state %d/%d",
                             mg_op_name(n->op), lo->name, mg_shape_str(po, b1, sizeof b1),
                             mg_dims_str(lo->ndim, want, b2, sizeof b2), s.kind, s.dim);
        }
    part_set_identity(c, po, lo, s);
    po->role = lo->role;
    po->persistent = lo->persistent;
    if (lo->updates) po->updates = c->st[lo->updates->id].t;
    c->st[lo->id] = (pt){po, false, s, dp_partial};
    return MG_OK;
}

/* ---- the walk ---------------------------------------------------------------------------------------- */
/* Host-read outputs (loss) that ended as partial sums are reduced, keeping their name. */
static int finish_outputs(part_ctx *c) {
    for (int i = 0; i < mg_graph_n_tensors(c->L); i++) {
        const mg_tensor *lt = mg_graph_tensor(c->L, i);
        pt *p = &c->st[i];
        if (!lt->persistent || !lt->src || !p->t || (!p->dp_partial && p->tp.kind != MG_SHARD_PARTIAL)) continue;
        enter_node_context(c, lt->src);
        char nm[512];
        snprintf(nm, sizeof nm, "%s@partial", lt->name);
        part_rename(c, p->t, nm);
        p->t->persistent = false;
        mg_tensor *t = part_get_dp_full(c, lt, sh_full());
        if (!t) return c->err->code ? c->err->code : MG_ERR_RUNTIME;
        part_rename(c, t, lt->name);
        t->persistent = true;
        t->role = lt->role;
    }
    return MG_OK;
}

int mg_partition(const mg_graph *L, const mg_plan *plan, const mg_mesh *mesh, mg_graph **out, mg_error *err) {
    *out = NULL;
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
    if (plan->distributed_optimizer && c.dp > 1 && (rc = dopt_init(&c))) goto done;
    mg_node **ord;
    int n_ord;
    if ((rc = mg_graph_topo((mg_graph *)L, &ord, &n_ord, err))) goto done;
    for (int i = 0; i < n_ord && !rc; i++) {
        const mg_node *n = ord[i];
        enter_node_context(&c, n);
        bool dp_partial = false;
        int h = c.dopt ? dopt_partition_node(&c, n) : 0;
        if (h == 0) h = dp_partition_node(&c, n, &dp_partial);
        if (h < 0) rc = h;
        if (!rc && h == 0) rc = tp_partition_node(&c, n, dp_partial);
        if (!rc) rc = dp_after_node(&c, n);
        if (!rc && c.dopt) rc = dopt_after_node(&c, n);
        if (!rc) rc = graph_failed(&c);
    }
    if (!rc) rc = finish_outputs(&c);
    enter_node_context(&c, NULL);
    if (!rc) rc = mg_graph_validate(c.P, err);
done:
    if (c.dopt) dopt_free(&c);
    free(c.st);
    free(c.final_grad_of);
    free(c.conv);
    if (rc) {
        if (err && !err->code) mg_error_set(err, rc, "partitioning failed");
        mg_graph_free(c.P);
        return rc;
    }
    *out = c.P;
    return MG_OK;
}

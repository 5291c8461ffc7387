/* Expert parallelism: experts split over the ep group, tokens exchanged by all-to-all
 * (Megatron-LM's expert model parallelism with the alltoall token dispatcher).
 *
 * Placement. An expert weight [E, ., .] (a parameter whose layout role is an expert one) is SPLIT(0)
 * over ep: rank j of the ep group holds experts [j E/ep, (j+1) E/ep), and so do its
 * gradient, gradient accumulator and Adam moments. Tokens are not split over ep: the ep
 * group is made of data-parallel ranks (mesh.c), each running its own micro-batches.
 *
 * The expert region. Between moe_permute and moe_unpermute the serial layer holds the
 * routed rows in expert-major order ([R, h] with counts [E]). Under ep, each rank permutes
 * its own tokens, exchanges counts (alltoall_counts) and sends each expert's rows to
 * the expert's owner (alltoall, dispatch), which runs its local experts on the rows of
 * the whole ep group ([R_d, h] with local counts [E/ep]); the inverse exchange (combine)
 * takes the results back before unpermute. A dispatched tensor holds rows of several
 * ranks' micro-batches, so it is no block of a logical tensor: this file keeps it out
 * of the placement machinery (side[] marks it) and handles every node that reads one:
 *   - moe_permute (forward, and the backward of unpermute): local permute + dispatch;
 *     the counts are exchanged once per layer and micro-batch (keyed by the routing
 *     map) and reused by the backward, whose exchanges are the reverse ones;
 *   - moe_unpermute, moe_row_dot reading a dispatched tensor: combine first (the
 *     forward's combined expert outputs serve the backward's router-weight gradient);
 *   - expert ops (grouped matmuls, activations, their gradients, sums): run on the
 *     dispatched rows; the weight gradient (moe_grouped_matmul_dw) is the local
 *     experts' block, SPLIT(0) over ep again.
 * Variable token counts: static row bounds, run-time counts, as the serial layer
 * (include/mgraph/moe.h). The dispatched bound is ep x min(R, T x E/ep) rows: each source
 * sends at most all its R routed rows, and at most one row per token per local expert;
 * dropless routing never exceeds it, and only real rows are sent or multiplied.
 *
 * Gradients of expert weights are sums over the micro-batches of the whole ep group
 * already (the dispatch brought their tokens); what remains is the sum over the ranks
 * holding the same experts: the expert-data-parallel group edp (dp x cp / ep ranks),
 * not dp (ep_convert). The gradient norm adds the expert blocks' sum of squares over ep
 * (ep_sumsq). With the distributed optimizer, only dense parameters go into its buckets
 * (dist_opt.c); expert weights keep the plain step (edp all-reduce, AdamW on the block,
 * moments whole on each edp replica). Expert tensor parallelism is 1: under tp, every tp rank runs the whole
 * experts on the same (replicated) tokens.
 */
#include <stdlib.h>
#include <string.h>

#include "partitioners/partition_internal.h"

typedef struct ep_route {
    int map_lid;                   /* the routing map (logical) the exchange belongs to */
    mg_tensor *counts, *splits, *local;
    bool local_bound;              /* local is the value of logical local_lid */
    int local_lid;
} ep_route;

struct ep_state {
    int ep, ep_rank, edp;
    unsigned char *side;           /* [n logical]: held dispatched (expert side) */
    mg_tensor **combined;          /* [n logical]: the token-side copy of a dispatched tensor */
    ep_route *routes;
    int n_routes, cap_routes;
};

static mg_sharding ep_split(int d) { return mg_place_split(MG_GROUP_EP, d); }

bool ep_is_expert_param(const mg_tensor *lt) {
    return lt->role == MG_ROLE_PARAM && lt->ndim == 3 && mg_layout_is_expert(lt->layout);
}

int ep_init(part_ctx *c) {
    int ep = c->mesh->size[MG_GROUP_EP];
    if (ep <= 1) return MG_OK;
    if (c->mesh->size[MG_GROUP_CP] > 1)
        return part_fail(c, MG_ERR_UNSUPPORTED, "expert parallelism with context parallelism is not supported yet");
    struct ep_state *s = calloc(1, sizeof *s);
    int nt = mg_graph_n_tensors(c->L);
    if (s) {
        s->side = calloc((size_t)nt + 1, 1);
        s->combined = calloc((size_t)nt + 1, sizeof *s->combined);
    }
    if (!s || !s->side || !s->combined) {
        if (s) free(s->side), free(s->combined);
        free(s);
        return part_fail(c, MG_ERR_NOMEM, "partitioning: out of memory");
    }
    s->ep = ep;
    s->ep_rank = c->mesh->coord[MG_GROUP_EP];
    s->edp = c->mesh->size[MG_GROUP_EDP];
    c->ep = s;
    /* every expert weight must split evenly */
    for (int i = 0; i < nt; i++) {
        const mg_tensor *t = mg_graph_tensor(c->L, i);
        if (ep_is_expert_param(t) && t->shape[0] % ep)
            return part_fail(c, MG_ERR_INVALID,
                             "--num-experts %lld is not divisible by --expert-model-parallel-size %d (parameter %s)",
                             (long long)t->shape[0], ep, t->name);
    }
    return MG_OK;
}

void ep_free(part_ctx *c) {
    if (!c->ep) return;
    free(c->ep->side);
    free(c->ep->combined);
    free(c->ep->routes);
    free(c->ep);
    c->ep = NULL;
}

void ep_leaf_placement(const part_ctx *c, const mg_tensor *lt, mg_placement *p) {
    if (c->ep && ep_is_expert_param(lt)) p->ax[MG_GROUP_EP] = ep_split(0);
}

/* The sum of an expert gradient over the data-parallel ranks is its sum over edp: the
 * ranks of dp that hold other experts contributed to this block through the dispatch
 * already. convert() asks ep_sums_over_edp first and caches what ep_edp_sum returns. */
bool ep_sums_over_edp(const part_ctx *c, const mg_placement *cur, const mg_placement *to) {
    return c->ep && cur->ax[MG_GROUP_EP].kind == MG_SHARD_SPLIT && cur->ax[MG_GROUP_DP].kind == MG_SHARD_PARTIAL &&
           to->ax[MG_GROUP_DP].kind == MG_SHARD_FULL;
}

mg_tensor *ep_edp_sum(part_ctx *c, const mg_tensor *lt, mg_tensor *x, const mg_placement *summed) {
    if (c->ep->edp == 1) return x; /* the ep group is the whole of dp: nothing left to sum */
    mg_tensor *y = mg_allreduce(c->P, x, MG_GROUP_EDP, c->ep->edp, MG_REDUCE_SUM, c->seq++);
    if (!y) return NULL;
    char nm[512];
    snprintf(nm, sizeof nm, "%s@edp_allreduce", lt->name);
    for (int k = 1; mg_graph_find(c->P, nm); k++) snprintf(nm, sizeof nm, "%s@edp_allreduce%d", lt->name, k);
    part_rename(c, y, nm);
    part_set_identity(c, y, lt, summed);
    return y;
}

/* ---- binding dispatched tensors ------------------------------------------------------- */
/* Makes po (dispatched rows or local counts) the value of logical lo on this rank. Its
 * placement only says "expert side" (ep split on dim 0); its shape is the dispatched
 * bound, which no placement derives. */
static void bind_side(part_ctx *c, const mg_tensor *lo, mg_tensor *po) {
    mg_tensor *other = mg_graph_find(c->P, lo->name);
    if (other && other != po) {
        char nm[512];
        snprintf(nm, sizeof nm, "%s@aux", lo->name);
        for (int k = 1; mg_graph_find(c->P, nm); k++) snprintf(nm, sizeof nm, "%s@aux%d", lo->name, k);
        part_rename(c, other, nm);
    }
    part_rename(c, po, lo->name);
    mg_placement pl = mg_placement_full();
    pl.ax[MG_GROUP_EP] = ep_split(0);
    po->logical = lo->logical;
    for (int i = 0; i < MG_MAX_DIMS; i++) po->logical.offset[i] = 0;
    po->place = pl;
    po->role = lo->role;
    po->persistent = false;
    c->st[lo->id] = (pt){po, pl};
    c->ep->side[lo->id] = 1;
}

static ep_route *find_route(part_ctx *c, int map_lid) {
    for (int i = 0; i < c->ep->n_routes; i++)
        if (c->ep->routes[i].map_lid == map_lid) return &c->ep->routes[i];
    return NULL;
}

/* moe_permute: the local permutation, then the rows go to their experts' owners. */
static int dispatch_node(part_ctx *c, const mg_node *n) {
    struct ep_state *s = c->ep;
    mg_tensor *in[3];
    for (int i = 0; i < n->n_in; i++)
        if (!(in[i] = part_get(c, n->in[i], sh_full()))) return c->err->code ? c->err->code : MG_ERR_RUNTIME;
    char nm[512];
    snprintf(nm, sizeof nm, "%s@local", n->out[0]->name);
    mg_node *lp = part_emit_aux(c, n, MG_OP_MOE_PERMUTE, &n->attrs, n->n_in, in, nm);
    if (!lp) return c->err->code ? c->err->code : part_graph_error(c);
    const mg_tensor *map = n->in[1];
    ep_route *r = find_route(c, map->id);
    if (!r) { /* the first permute of this map (the forward): exchange the counts */
        if (s->n_routes == s->cap_routes) {
            int cap = s->cap_routes ? 2 * s->cap_routes : 16;
            ep_route *nr = realloc(s->routes, (size_t)cap * sizeof *nr);
            if (!nr) return part_fail(c, MG_ERR_NOMEM, "partitioning: out of memory");
            s->routes = nr;
            s->cap_routes = cap;
        }
        r = &s->routes[s->n_routes++];
        r->map_lid = map->id;
        r->counts = lp->out[1];
        r->local_bound = false;
        r->local_lid = n->out[1]->id;
        if (mg_alltoall_counts(c->P, r->counts, MG_GROUP_EP, s->ep, c->seq++, &r->splits, &r->local))
            return part_graph_error(c);
    }
    int64_t T = map->shape[0], El = map->shape[1] / s->ep, R = n->attrs.moe.rows;
    int64_t rows = (int64_t)s->ep * (R < T * El ? R : T * El);
    mg_tensor *xd = mg_alltoallv(c->P, lp->out[0], r->counts, r->splits, MG_GROUP_EP, s->ep, false, rows, c->seq++);
    if (!xd) return part_graph_error(c);
    bind_side(c, n->out[0], xd);
    if (!r->local_bound) {
        bind_side(c, n->out[1], r->local);
        r->local_bound = true;
    } else { /* a later permute of the same routing (the backward): the same local counts */
        c->st[n->out[1]->id] = c->st[r->local_lid];
        s->side[n->out[1]->id] = 1;
    }
    return MG_OK;
}

/* The token-side copy of dispatched logical tensor lt (routed by map): the combine. */
static mg_tensor *combined(part_ctx *c, const mg_tensor *lt, const mg_tensor *map) {
    struct ep_state *s = c->ep;
    if (s->combined[lt->id]) return s->combined[lt->id];
    ep_route *r = find_route(c, map->id);
    if (!r) {
        part_fail(c, MG_ERR_UNSUPPORTED, "expert parallelism: '%s' is combined before its routing map '%s' dispatched",
                  lt->name, map->name);
        return NULL;
    }
    mg_tensor *y = mg_alltoallv(c->P, c->st[lt->id].t, r->counts, r->splits, MG_GROUP_EP, s->ep, true, lt->shape[0],
                                c->seq++);
    if (!y) {
        part_graph_error(c);
        return NULL;
    }
    char nm[512];
    snprintf(nm, sizeof nm, "%s@ep_combined", lt->name);
    for (int k = 1; mg_graph_find(c->P, nm); k++) snprintf(nm, sizeof nm, "%s@ep_combined%d", lt->name, k);
    part_rename(c, y, nm);
    part_set_identity(c, y, lt, &(mg_placement){0}); /* offsets 0: the whole logical tensor */
    y->place = mg_placement_full();
    s->combined[lt->id] = y;
    return y;
}

/* moe_unpermute / moe_row_dot reading dispatched rows: combine them, then run as serial. */
static int combine_node(part_ctx *c, const mg_node *n) {
    mg_tensor *in[3];
    for (int i = 0; i < n->n_in; i++) {
        in[i] = c->ep->side[n->in[i]->id] ? combined(c, n->in[i], n->in[1]) : part_get(c, n->in[i], sh_full());
        if (!in[i]) return c->err->code ? c->err->code : MG_ERR_RUNTIME;
    }
    mg_sharding outs[MG_SHARD_MAX_IO];
    for (int j = 0; j < n->n_out; j++) outs[j] = sh_full();
    return part_emit(c, n, in, &n->attrs, outs) ? MG_OK : (c->err->code ? c->err->code : MG_ERR_RUNTIME);
}

/* An op of the expert region: on the dispatched rows and the local experts' weights. */
static int expert_node(part_ctx *c, const mg_node *n) {
    switch (n->op) {
    case MG_OP_MOE_GROUPED_MATMUL: case MG_OP_MOE_GROUPED_MATMUL_DW: case MG_OP_GELU: case MG_OP_GELU_BWD:
    case MG_OP_SILU: case MG_OP_SILU_BWD: case MG_OP_SWIGLU: case MG_OP_SWIGLU_BWD: case MG_OP_SQUARED_RELU:
    case MG_OP_SQUARED_RELU_BWD: case MG_OP_GELU_ERF: case MG_OP_GELU_ERF_BWD: case MG_OP_ADD: case MG_OP_SUB:
    case MG_OP_MUL: case MG_OP_SCALE:
        break;
    default:
        return part_fail(c, MG_ERR_UNSUPPORTED,
                         "expert parallelism: op %s (node '%s') inside the expert region is not supported",
                         mg_op_name(n->op), n->out[0]->name);
    }
    mg_tensor *in[MG_SHARD_MAX_IO];
    for (int i = 0; i < n->n_in; i++) {
        const mg_tensor *lt = n->in[i];
        if (c->ep->side[lt->id]) {
            in[i] = c->st[lt->id].t;
            continue;
        }
        const mg_placement *pl = part_placement(c, lt);
        if (pl->ax[MG_GROUP_EP].kind != MG_SHARD_SPLIT)
            return part_fail(c, MG_ERR_UNSUPPORTED,
                             "expert parallelism: node '%s' (%s) mixes dispatched rows with '%s', which is not an "
                             "expert weight",
                             n->out[0]->name, mg_op_name(n->op), lt->name);
        mg_placement w = *pl;
        w.ax[MG_GROUP_TP] = sh_full(); /* expert tensor parallelism 1 */
        if (!(in[i] = part_get_pl(c, lt, &w))) return c->err->code ? c->err->code : MG_ERR_RUNTIME;
    }
    mg_node *nd = part_emit_aux(c, n, n->op, &n->attrs, n->n_in, in, n->out[0]->name);
    if (!nd) return c->err->code ? c->err->code : part_graph_error(c);
    for (int j = 0; j < n->n_out; j++) {
        if (n->op == MG_OP_MOE_GROUPED_MATMUL_DW) { /* the local experts' weight gradient */
            mg_placement pl = c->node_pl;
            pl.ax[MG_GROUP_TP] = sh_full();
            pl.ax[MG_GROUP_EP] = ep_split(0);
            if (part_bind(c, n, n->out[j], nd->out[j], &pl)) return c->err->code;
        } else {
            bind_side(c, n->out[j], nd->out[j]);
        }
    }
    return MG_OK;
}

/* ---- the expert weights' optimizer step and gradient norm ------------------------------- */
/* A leaf created on first use (accumulator, Adam moment) in the placement of `like`. */
static int leaf_like(part_ctx *c, const mg_tensor *leaf, const mg_tensor *like) {
    pt *p = &c->st[leaf->id];
    if (p->t || leaf->src) return MG_OK;
    p->pl = mg_placement_full();
    const mg_placement *lp = part_placement(c, like);
    p->pl.ax[MG_GROUP_TP] = lp->ax[MG_GROUP_TP];
    p->pl.ax[MG_GROUP_EP] = lp->ax[MG_GROUP_EP];
    p->t = part_make_leaf(c, leaf, &p->pl);
    if (!p->t) return c->err->code ? c->err->code : part_graph_error(c);
    return MG_OK;
}

/* The gradient norm's sum of squares: the expert blocks' part summed over ep, the rest
 * as the tensor-parallel rule says (partial over tp, replicated inputs counted by tp
 * index 0). */
static int ep_sumsq(part_ctx *c, const mg_node *n) {
    mg_tensor *dense[MG_SHARD_MAX_IO], *expert[MG_SHARD_MAX_IO];
    int nd = 0, ne = 0;
    if (n->n_in > MG_SHARD_MAX_IO) return part_fail(c, MG_ERR_UNSUPPORTED, "partitioning: sumsq has too many inputs");
    for (int i = 0; i < n->n_in; i++) {
        const mg_tensor *lt = n->in[i];
        mg_placement w = *part_placement(c, lt);
        if (c->err->code) return c->err->code;
        if (w.ax[MG_GROUP_TP].kind == MG_SHARD_PARTIAL) w.ax[MG_GROUP_TP] = sh_full();
        if (c->tp > 1 && w.ax[MG_GROUP_TP].kind == MG_SHARD_FULL && c->tp_rank != 0) continue; /* counted once */
        bool ex = w.ax[MG_GROUP_EP].kind == MG_SHARD_SPLIT;
        if (!ex) w.ax[MG_GROUP_EP] = mg_place_full(MG_GROUP_EP);
        mg_tensor *t = part_get_pl(c, lt, &w);
        if (!t) return c->err->code ? c->err->code : MG_ERR_RUNTIME;
        if (ex) expert[ne++] = t;
        else dense[nd++] = t;
    }
    char nm[512];
    mg_tensor *sum = NULL, *se = NULL;
    if (nd) {
        snprintf(nm, sizeof nm, "%s@dense", n->out[0]->name);
        mg_node *a = part_emit_aux(c, n, MG_OP_SUMSQ, &n->attrs, nd, dense, nm);
        if (!a) return c->err->code ? c->err->code : part_graph_error(c);
        sum = a->out[0];
    }
    if (ne) {
        snprintf(nm, sizeof nm, "%s@experts", n->out[0]->name);
        mg_node *b = part_emit_aux(c, n, MG_OP_SUMSQ, &n->attrs, ne, expert, nm);
        if (!b || !(se = mg_allreduce(c->P, b->out[0], MG_GROUP_EP, c->ep->ep, MG_REDUCE_SUM, c->seq++)))
            return c->err->code ? c->err->code : part_graph_error(c);
        sum = sum ? mg_add(c->P, sum, se) : se;
    }
    if (!sum) sum = mg_zeros(c->P, n->out[0]->dtype, n->out[0]->ndim, n->out[0]->shape);
    if (!sum) return part_graph_error(c);
    mg_placement pl = part_node_pl(c, c->tp > 1 ? sh_partial() : sh_full());
    pl.ax[MG_GROUP_EP] = mg_place_full(MG_GROUP_EP);
    return part_bind(c, n, n->out[0], sum, &pl);
}

static bool ep_split_in(part_ctx *c, const mg_tensor *lt) {
    /* leaves made on first use (accumulators, moments) are not made here */
    if (!c->st[lt->id].t) return !lt->src && ep_is_expert_param(lt);
    return part_placement(c, lt)->ax[MG_GROUP_EP].kind != MG_SHARD_FULL;
}

/* Nodes outside the expert region that touch expert weights: the gradient accumulation,
 * its reduction, AdamW (all on the block: ep state of the output = the block's) and the
 * gradient norm. Anything else mixing a block with other values is refused. */
static int ep_axis_node(part_ctx *c, const mg_node *n, int *handled) {
    if (n->op == MG_OP_ACCUMULATE && n->n_in == 2 && ep_split_in(c, n->in[1])) {
        int rc = leaf_like(c, n->in[0], n->in[1]);
        if (rc) return rc;
        c->node_pl.ax[MG_GROUP_EP] = part_placement(c, n->in[1])->ax[MG_GROUP_EP];
        return MG_OK;
    }
    if (n->op == MG_OP_ADAMW && ep_split_in(c, n->in[0])) {
        int rc = leaf_like(c, n->in[2], n->in[0]);
        if (!rc) rc = leaf_like(c, n->in[3], n->in[0]);
        if (rc) return rc;
        c->node_pl.ax[MG_GROUP_EP] = part_placement(c, n->in[0])->ax[MG_GROUP_EP];
        return MG_OK;
    }
    bool any = false;
    for (int i = 0; i < n->n_in; i++) any |= ep_split_in(c, n->in[i]);
    if (!any) return c->err->code;
    if (n->op == MG_OP_SUMSQ) {
        *handled = 1;
        return ep_sumsq(c, n);
    }
    /* elementwise on blocks of one shape (scalars replicated): the output is a block too */
    mg_sharding s = mg_place_full(MG_GROUP_EP);
    for (int i = 0; i < n->n_in; i++) {
        mg_sharding si = part_placement(c, n->in[i])->ax[MG_GROUP_EP];
        bool scalar = mg_numel(n->in[i]) == 1 && si.kind == MG_SHARD_FULL;
        if (scalar) continue;
        if (si.kind != MG_SHARD_SPLIT || !mg_same_shape(n->in[i], n->out[0]) || (s.kind == MG_SHARD_SPLIT && !sh_eq(s, si)))
            return part_fail(c, MG_ERR_UNSUPPORTED,
                             "expert parallelism: op %s (node '%s') on expert weight blocks is not supported",
                             mg_op_name(n->op), n->out[0]->name);
        s = si;
    }
    c->node_pl.ax[MG_GROUP_EP] = s;
    return MG_OK;
}

int ep_partition_node(part_ctx *c, const mg_node *n, int *handled) {
    *handled = 0;
    if (!c->ep) return MG_OK;
    bool side = false;
    for (int i = 0; i < n->n_in; i++) side |= c->ep->side[n->in[i]->id] != 0;
    int rc;
    if (n->op == MG_OP_MOE_PERMUTE) rc = dispatch_node(c, n);
    else if (side && (n->op == MG_OP_MOE_UNPERMUTE || n->op == MG_OP_MOE_ROW_DOT)) rc = combine_node(c, n);
    else if (side) rc = expert_node(c, n);
    else return ep_axis_node(c, n, handled);
    *handled = 1;
    return rc;
}

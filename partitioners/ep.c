/* Expert parallelism: experts split over the ep group, tokens exchanged by all-to-all
 * (Megatron-LM's expert model parallelism with the alltoall token dispatcher).
 *
 * Placement. An expert weight [E, ., .] (a parameter whose layout role is an expert one) is SPLIT(0)
 * over ep: rank j of the ep group holds experts [j E/ep, (j+1) E/ep), and so do its
 * gradient, gradient accumulator and Adam moments. Tokens are not split over ep: the ep
 * group is made of data-parallel (and context-parallel) ranks (mesh.c), each running its
 * own micro-batches (or its block of one).
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
 * not dp: their placement is on the experts' axes (ep split, etp, edp), and data
 * parallelism sums their shares over edp (dp.c). The gradient norm adds the expert blocks' sum of squares over ep
 * (ep_sumsq). With the distributed optimizer, only dense parameters go into its buckets
 * (dist_opt.c); expert weights keep the plain step (edp all-reduce, AdamW on the block,
 * moments whole on each edp replica).
 *
 * Context parallelism: each cp rank dispatches its own zigzag block of the sequence's
 * rows (token_get), as Megatron's dispatcher its local tokens; the router before the
 * permute runs whole on every cp rank (its op rules are replicated), so routing, drops
 * and auxiliary losses are the serial ones. The ep group comes out of dp x cp.
 *
 * Expert tensor parallelism (the expert generator's tensor axis etp): every expert's fc1
 * rows and fc2 columns split over it, the expert ops applying their own sharding rules
 * over it (expert_node). With etp = tp the etp ranks hold the same tokens (whole over
 * tp, or gathered by the rules under sequence parallelism); with an expert tensor group
 * of its own (etp > 1, tp 1) they hold other tokens, and the group's token-side operands
 * are all-gathered over etp first (token_get) and each rank keeps its own rows of the
 * results (token_bind). Without either, every tp rank runs the whole experts on the same
 * (replicated) tokens.
 */
#include <stdlib.h>
#include <string.h>

#include "partitioners/partition_internal.h"

typedef struct ep_route {
    int map_lid;                   /* the routing map (logical) the exchange belongs to */
    int64_t rows;                  /* the rank's permuted rows (its local permute's bound) */
    mg_tensor *counts, *splits, *local;
    bool local_bound;              /* local is the value of logical local_lid */
    int local_lid;
} ep_route;

struct ep_state {
    int ep, ep_rank, edp;
    int etp;                       /* expert tensor parallelism: the experts' rows / columns over etp (1: whole) */
    bool gather;                   /* etp other than tp: the etp group's tokens are gathered (Megatron's dispatcher) */
    int cp;                        /* context parallelism: each cp rank dispatches its own rows */
    unsigned char *side;           /* [n logical]: held dispatched (expert side) */
    mg_sharding *side_etp;         /* [n logical]: a dispatched tensor's state over etp */
    mg_tensor **side_full;         /* [n logical]: its whole copy over etp, once made */
    mg_tensor **combined;          /* [n logical]: the token-side copy of a dispatched tensor */
    mg_tensor **tok;               /* [n logical]: a token-side operand's rows of the etp group (gather) */
    ep_route *routes;
    int n_routes, cap_routes;
};

static mg_sharding ep_split(int d) { return mg_place_split(MG_GROUP_EP, d); }

bool ep_is_expert_param(const mg_tensor *lt) {
    return lt->role == MG_ROLE_PARAM && lt->ndim == 3 && mg_layout_is_expert(lt->layout);
}

static struct ep_state *eps(const part_ctx *c) { return c->axis[PART_EP]; }

/* An expert tensor group other than the tensor-parallel group (the plan's etp > 1,
 * not tp): its ranks hold other tokens. */
static bool etp_own_group(const part_ctx *c) { return c->plan->etp > 1 && c->plan->etp != c->plan->tp; }

bool ep_places_experts(const part_ctx *c) { return c->mesh->size[MG_GROUP_EP] > 1 || etp_own_group(c); }

static int ep_init(part_ctx *c, mg_node *const *ord, int n_ord) {
    (void)ord, (void)n_ord;
    int ep = c->mesh->size[MG_GROUP_EP];
    if (!ep_places_experts(c)) return MG_OK;
    struct ep_state *s = calloc(1, sizeof *s);
    int nt = mg_graph_n_tensors(c->L);
    if (s) {
        s->side = calloc((size_t)nt + 1, 1);
        s->combined = calloc((size_t)nt + 1, sizeof *s->combined);
        s->side_etp = calloc((size_t)nt + 1, sizeof *s->side_etp);
        s->side_full = calloc((size_t)nt + 1, sizeof *s->side_full);
        s->tok = calloc((size_t)nt + 1, sizeof *s->tok);
    }
    if (!s || !s->side || !s->combined || !s->side_etp || !s->side_full || !s->tok) {
        if (s) free(s->side), free(s->combined), free(s->side_etp), free(s->side_full), free(s->tok);
        free(s);
        return part_fail(c, MG_ERR_NOMEM, "partitioning: out of memory");
    }
    s->ep = ep;
    s->ep_rank = c->mesh->coord[MG_GROUP_EP];
    s->edp = c->mesh->size[MG_GROUP_EDP];
    s->gather = etp_own_group(c);
    s->etp = mg_plan_expert_tp(c->plan) || s->gather ? c->mesh->size[MG_GROUP_ETP] : 1;
    s->cp = c->mesh->size[MG_GROUP_CP];
    c->axis[PART_EP] = s;
    if (s->gather && c->mesh->size[MG_GROUP_TP] > 1)
        return part_fail(c, MG_ERR_UNSUPPORTED,
                         "--expert-tensor-parallel-size %d with --tensor-model-parallel-size %d: an expert tensor "
                         "group other than the tensor-parallel group is supported with tp 1 (or etp = tp, or etp 1)",
                         s->etp, c->mesh->size[MG_GROUP_TP]);
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

static void ep_release(part_ctx *c) {
    struct ep_state *s = eps(c);
    if (!s) return;
    free(s->side);
    free(s->combined);
    free(s->side_etp);
    free(s->side_full);
    free(s->tok);
    free(s->routes);
    free(s);
    c->axis[PART_EP] = NULL;
}

static void ep_leaf(const part_ctx *c, const mg_tensor *lt, mg_placement *p) {
    const struct ep_state *s = eps(c);
    /* an expert weight, or its gradient accumulator or Adam moment: the weight's block,
     * whichever axis makes the state leaf first (cp's node hook may, before this file's) */
    const mg_tensor *w = !s ? NULL
                         : ep_is_expert_param(lt) ? lt
                         : lt->state_of && ep_is_expert_param(lt->state_of) && mg_same_shape(lt, lt->state_of)
                             ? lt->state_of
                             : NULL;
    if (!w) return;
    p->ax[MG_GROUP_EP] = ep_split(0);
    if (s->etp > 1) /* Megatron's grouped column- / row-parallel linears over the expert tensor group */
        p->ax[MG_GROUP_ETP] = mg_place_split(MG_GROUP_ETP, w->layout == MG_LAYOUT_EXPERT_COLUMN ? 1 : 2);
}

/* ---- binding dispatched tensors ------------------------------------------------------- */
/* Makes po (dispatched rows or local counts) the value of logical lo on this rank. Its
 * placement only says "expert side" (ep split on dim 0); its shape is the dispatched
 * bound, which no placement derives. */
static void bind_side_as(part_ctx *c, const mg_tensor *lo, mg_tensor *po, mg_sharding etp) {
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
    pl.ax[MG_GROUP_ETP] = etp;
    po->logical = lo->logical;
    for (int i = 0; i < MG_MAX_DIMS; i++) po->logical.offset[i] = 0;
    po->place = pl;
    po->role = lo->role;
    po->persistent = false;
    c->st[lo->id] = (pt){po, pl};
    eps(c)->side[lo->id] = 1;
    eps(c)->side_etp[lo->id] = etp;
    eps(c)->side_full[lo->id] = NULL;
}

static void bind_side(part_ctx *c, const mg_tensor *lo, mg_tensor *po) {
    bind_side_as(c, lo, po, mg_place_full(MG_GROUP_ETP));
}

/* Dispatched tensor lt in state `want` over the expert tensor group: an all-reduce (a
 * partial sum), an all-gather or a slice of the rows' columns. */
static mg_tensor *side_get(part_ctx *c, const mg_tensor *lt, mg_sharding want) {
    struct ep_state *s = eps(c);
    mg_sharding have = s->side_etp[lt->id];
    mg_tensor *x = c->st[lt->id].t, *y = NULL;
    if (mg_sharding_eq(have, want)) return x;
    if (want.kind == MG_SHARD_FULL && s->side_full[lt->id]) return s->side_full[lt->id];
    const char *what = "etp";
    if (have.kind != MG_SHARD_FULL && want.kind != MG_SHARD_FULL) { /* through whole */
        x = side_get(c, lt, mg_place_full(MG_GROUP_ETP));
        have = mg_place_full(MG_GROUP_ETP);
        if (!x) return NULL;
    }
    if (have.kind == MG_SHARD_PARTIAL) {
        y = mg_allreduce(c->P, x, MG_GROUP_ETP, s->etp, MG_REDUCE_SUM, c->seq++), what = "etp_allreduce";
    } else if (have.kind == MG_SHARD_SPLIT) {
        y = mg_allgather(c->P, x, MG_GROUP_ETP, s->etp, have.dim, c->seq++), what = "etp_allgather";
    } else if (want.kind == MG_SHARD_SPLIT) {
        int64_t len = x->shape[want.dim] / s->etp;
        y = mg_slice(c->P, x, want.dim, (int64_t)part_coord(c, MG_GROUP_ETP) * len, len), what = "etp_slice";
    } else { /* whole -> partial: the value on index 0 */
        y = part_coord(c, MG_GROUP_ETP) == 0 ? x : mg_zeros(c->P, x->dtype, x->ndim, x->shape), what = "etp_zero";
    }
    if (!y) {
        part_graph_error(c);
        return NULL;
    }
    if (y != x) {
        char nm[512];
        snprintf(nm, sizeof nm, "%s@%s", lt->name, what);
        for (int k = 1; mg_graph_find(c->P, nm); k++) snprintf(nm, sizeof nm, "%s@%s%d", lt->name, what, k);
        part_rename(c, y, nm);
        y->logical = lt->logical;
    }
    if (want.kind == MG_SHARD_FULL) s->side_full[lt->id] = y;
    return y;
}

static ep_route *find_route(part_ctx *c, int map_lid) {
    for (int i = 0; i < eps(c)->n_routes; i++)
        if (eps(c)->routes[i].map_lid == map_lid) return &eps(c)->routes[i];
    return NULL;
}

/* ---- the token side: what each rank dispatches ---------------------------------------------- */
/* A token-side operand of the expert region (tokens, routing map, router weights, their
 * gradients) as this rank dispatches it: whole over tp, its own block of rows over cp
 * (each cp rank dispatches its zigzag block of the sequence, as Megatron's dispatcher its
 * local tokens; the MoE layer is token-wise), other axes as they are. With an expert
 * tensor group of its own (etp other than tp), whose ranks hold other tokens, the rows
 * of the whole group, all-gathered: every etp rank then permutes and dispatches the same
 * rows, runs its slice of the experts on them and gets the sum over etp back
 * (Megatron's dispatcher gathers over the expert tensor group after the all-to-all and
 * reduce-scatters before the way back; the same rows meet the same slices). */
static mg_tensor *token_get(part_ctx *c, const mg_tensor *lt) {
    struct ep_state *s = eps(c);
    if (s->gather && s->tok[lt->id]) return s->tok[lt->id];
    mg_placement w = *part_placement(c, lt);
    if (c->err->code) return NULL;
    w.ax[MG_GROUP_TP] = sh_full();
    if (s->cp > 1) w.ax[MG_GROUP_CP] = mg_place_split(MG_GROUP_CP, 0);
    mg_tensor *x = part_get_pl(c, lt, &w);
    if (!x || !s->gather) return x;
    mg_tensor *y = mg_allgather(c->P, x, MG_GROUP_ETP, s->etp, 0, c->seq++);
    if (!y) {
        part_graph_error(c);
        return NULL;
    }
    char nm[512];
    snprintf(nm, sizeof nm, "%s@etp_tokens", lt->name);
    for (int k = 1; mg_graph_find(c->P, nm); k++) snprintf(nm, sizeof nm, "%s@etp_tokens%d", lt->name, k);
    part_rename(c, y, nm);
    y->logical = lt->logical;
    s->tok[lt->id] = y;
    return y;
}

/* The rank's own rows of a token-side result computed on the etp group's rows, bound
 * to logical output lo (whole over tp, its block over cp). */
static int token_bind(part_ctx *c, const mg_node *n, int j, mg_tensor *y) {
    struct ep_state *s = eps(c);
    mg_placement pl = c->out[j];
    if (s->cp > 1) pl.ax[MG_GROUP_CP] = mg_place_split(MG_GROUP_CP, 0);
    if (s->gather) {
        int64_t rows = y->shape[0] / s->etp;
        y = mg_slice(c->P, y, 0, (int64_t)part_coord(c, MG_GROUP_ETP) * rows, rows);
        if (!y) return part_graph_error(c);
    }
    return part_bind(c, n, n->out[j], y, &pl);
}

/* moe_permute: the local permutation, then the rows go to their experts' owners. */
static int dispatch_node(part_ctx *c, const mg_node *n) {
    struct ep_state *s = eps(c);
    mg_tensor *in[3];
    for (int i = 0; i < n->n_in; i++)
        if (!(in[i] = token_get(c, n->in[i]))) return c->err->code ? c->err->code : MG_ERR_RUNTIME;
    const mg_tensor *map = n->in[1];
    /* the static row bound of the rank's permute: its tokens' (T of the serial T_all),
     * at most every token once per expert, and the serial bound per micro-batch */
    int64_t T = in[1]->shape[0], E = map->shape[1], El = E / s->ep, R = n->attrs.moe.rows;
    mg_attrs at = n->attrs;
    if (T != map->shape[0]) {
        int64_t mbs = s->gather ? s->etp : 1;
        at.moe.rows = R * mbs < T * E ? R * mbs : T * E;
    }
    R = at.moe.rows;
    char nm[512];
    snprintf(nm, sizeof nm, "%s@local", n->out[0]->name);
    mg_node *lp = part_emit_aux(c, n, MG_OP_MOE_PERMUTE, &at, n->n_in, in, nm);
    if (!lp) return c->err->code ? c->err->code : part_graph_error(c);
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
        r->rows = R;
        r->counts = lp->out[1];
        r->local_bound = false;
        r->local_lid = n->out[1]->id;
        if (s->ep == 1) /* (experts over etp alone: the rank's rows are the dispatched ones) */
            r->splits = NULL, r->local = r->counts;
        else if (mg_alltoall_counts(c->P, r->counts, MG_GROUP_EP, s->ep, c->seq++, &r->splits, &r->local))
            return part_graph_error(c);
    }
    int64_t rows = (int64_t)s->ep * (R < T * El ? R : T * El);
    mg_tensor *xd = s->ep == 1 ? lp->out[0]
                               : mg_alltoallv(c->P, lp->out[0], r->counts, r->splits, MG_GROUP_EP, s->ep, false, rows,
                                              c->seq++);
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
    struct ep_state *s = eps(c);
    if (s->combined[lt->id]) return s->combined[lt->id];
    ep_route *r = find_route(c, map->id);
    if (!r) {
        part_fail(c, MG_ERR_UNSUPPORTED, "expert parallelism: '%s' is combined before its routing map '%s' dispatched",
                  lt->name, map->name);
        return NULL;
    }
    mg_tensor *x = side_get(c, lt, mg_place_full(MG_GROUP_ETP)); /* (summed over etp before it goes back) */
    int64_t rows = s->cp > 1 || s->gather ? r->rows : lt->shape[0];
    mg_tensor *y = !x || s->ep == 1 ? x
                                    : mg_alltoallv(c->P, x, r->counts, r->splits, MG_GROUP_EP, s->ep, true, rows, c->seq++);
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

/* moe_unpermute / moe_row_dot reading dispatched rows: combine them, then run as serial
 * on the rank's rows (the etp group's, of which it keeps its own). */
static int combine_node(part_ctx *c, const mg_node *n) {
    mg_tensor *in[3];
    const mg_tensor *map = n->in[n->op == MG_OP_MOE_ROW_DOT ? 2 : 1];
    for (int i = 0; i < n->n_in; i++) {
        in[i] = eps(c)->side[n->in[i]->id] ? combined(c, n->in[i], map) : token_get(c, n->in[i]);
        if (!in[i]) return c->err->code ? c->err->code : MG_ERR_RUNTIME;
    }
    if (eps(c)->cp == 1 && !eps(c)->gather) return part_emit(c, n, in, &n->attrs) ? MG_OK : part_status(c);
    mg_node *nd = part_emit_aux(c, n, n->op, &n->attrs, n->n_in, in, n->out[0]->name);
    if (!nd) return part_status(c);
    return token_bind(c, n, 0, nd->out[0]) ? part_status(c) : MG_OK;
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
    struct ep_state *s = eps(c);
    if (n->n_in > MG_SHARD_MAX_IO || n->n_out > MG_SHARD_MAX_IO)
        return part_fail(c, MG_ERR_UNSUPPORTED, "partitioning: %s has too many inputs", mg_op_name(n->op));
    /* over the expert tensor group: the op's own rule (grouped column / row-parallel
     * matmuls, pointwise activations; swiglu gathers its halves) */
    mg_shard_io io;
    memset(&io, 0, sizeof io);
    for (int i = 0; i < n->n_in; i++) {
        const mg_tensor *lt = n->in[i];
        io.in[i] = s->side[lt->id] ? s->side_etp[lt->id] : part_placement(c, lt)->ax[MG_GROUP_ETP];
        io.in[i].group = MG_GROUP_NONE;
    }
    if (c->err->code) return c->err->code;
    if (s->etp > 1) {
        mg_shard_ctx sc = {s->etp, NULL};
        int rc = mg_op_def_get(n->op)->shard(n, &sc, &io, c->err);
        if (rc) return rc;
        if (io.expand || io.count_once)
            return part_fail(c, MG_ERR_UNSUPPORTED, "expert tensor parallelism: op %s (node '%s') is not supported",
                             mg_op_name(n->op), n->out[0]->name);
    } else {
        for (int i = 0; i < n->n_in; i++) io.want[i] = mg_place_full(MG_GROUP_NONE);
        for (int j = 0; j < n->n_out; j++) io.out[j] = mg_place_full(MG_GROUP_NONE);
    }
    mg_tensor *in[MG_SHARD_MAX_IO];
    for (int i = 0; i < n->n_in; i++) {
        const mg_tensor *lt = n->in[i];
        mg_sharding want = io.want[i];
        want.group = MG_GROUP_ETP;
        if (s->side[lt->id]) {
            if (!(in[i] = side_get(c, lt, want))) return part_status(c);
            continue;
        }
        const mg_placement *pl = part_placement(c, lt);
        if (pl->ax[MG_GROUP_EP].kind != MG_SHARD_SPLIT)
            return part_fail(c, MG_ERR_UNSUPPORTED,
                             "expert parallelism: node '%s' (%s) mixes dispatched rows with '%s', which is not an "
                             "expert weight",
                             n->out[0]->name, mg_op_name(n->op), lt->name);
        mg_placement w = *pl;
        w.ax[MG_GROUP_TP] = sh_full(); /* (the experts' own tensor parallelism is etp's) */
        w.ax[MG_GROUP_ETP] = want;
        w.ax[MG_GROUP_EDP] = mg_place_full(MG_GROUP_EDP); /* an FSDP shard over edp gathered (fsdp.c) */
        if (!(in[i] = part_get_pl(c, lt, &w))) return part_status(c);
    }
    mg_node *nd = part_emit_aux(c, n, n->op, &n->attrs, n->n_in, in, n->out[0]->name);
    if (!nd) return part_status(c);
    for (int j = 0; j < n->n_out; j++) {
        mg_sharding out = io.out[j];
        out.group = MG_GROUP_ETP;
        if (n->op == MG_OP_MOE_GROUPED_MATMUL_DW) { /* the local experts' weight gradient */
            mg_placement pl = c->out[j];
            pl.ax[MG_GROUP_TP] = sh_full();
            pl.ax[MG_GROUP_EP] = ep_split(0);
            pl.ax[MG_GROUP_ETP] = out;
            if (part_bind(c, n, n->out[j], nd->out[j], &pl)) return c->err->code;
        } else {
            bind_side_as(c, n->out[j], nd->out[j], out);
        }
    }
    return MG_OK;
}

/* ---- the expert weights' optimizer step and gradient norm ------------------------------- */
/* The gradient norm's sum of squares: the expert blocks' part summed over ep, the rest
 * as the tensor-parallel rule says (partial over tp, replicated inputs counted by tp
 * index 0). */
static int ep_sumsq(part_ctx *c, const mg_node *n) {
    mg_tensor *dense[MG_SHARD_MAX_IO], *expert[MG_SHARD_MAX_IO];
    int nd = 0, ne = 0, n_edp = 0, tp = part_size(c, MG_GROUP_TP);
    if (n->n_in > MG_SHARD_MAX_IO) return part_fail(c, MG_ERR_UNSUPPORTED, "partitioning: sumsq has too many inputs");
    for (int i = 0; i < n->n_in; i++) {
        const mg_tensor *lt = n->in[i];
        mg_placement w = *part_placement(c, lt);
        if (c->err->code) return c->err->code;
        if (w.ax[MG_GROUP_TP].kind == MG_SHARD_PARTIAL) w.ax[MG_GROUP_TP] = sh_full();
        /* counted once: replicated over tp, by tp rank 0 (a block split over etp, the tp group, by all) */
        if (tp > 1 && w.ax[MG_GROUP_TP].kind == MG_SHARD_FULL && w.ax[MG_GROUP_ETP].kind != MG_SHARD_SPLIT &&
            part_coord(c, MG_GROUP_TP) != 0)
            continue;
        bool ex = w.ax[MG_GROUP_EP].kind == MG_SHARD_SPLIT;
        if (!ex) w.ax[MG_GROUP_EP] = mg_place_full(MG_GROUP_EP);
        mg_tensor *t = part_get_pl(c, lt, &w);
        if (!t) return c->err->code ? c->err->code : MG_ERR_RUNTIME;
        if (ex) expert[ne++] = t, n_edp += w.ax[MG_GROUP_EDP].kind == MG_SHARD_SPLIT;
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
        se = b ? b->out[0] : NULL;
        if (n_edp && n_edp != ne)
            return part_fail(c, MG_ERR_UNSUPPORTED, "expert parallelism: sum of squares '%s' mixes whole expert blocks "
                             "with FSDP shards", n->out[0]->name);
        if (se && eps(c)->ep > 1) se = mg_allreduce(c->P, se, MG_GROUP_EP, eps(c)->ep, MG_REDUCE_SUM, c->seq++);
        /* (FSDP shards of the blocks over edp: fsdp.c) */
        if (se && n_edp) se = mg_allreduce(c->P, se, MG_GROUP_EDP, eps(c)->edp, MG_REDUCE_SUM, c->seq++);
        /* (an expert tensor group of its own: its slices summed over it; else tp's sum does) */
        if (se && eps(c)->gather) se = mg_allreduce(c->P, se, MG_GROUP_ETP, eps(c)->etp, MG_REDUCE_SUM, c->seq++);
        if (!se) return c->err->code ? c->err->code : part_graph_error(c);
        sum = sum ? mg_add(c->P, sum, se) : se;
    }
    if (!sum) sum = mg_zeros(c->P, n->out[0]->dtype, n->out[0]->ndim, n->out[0]->shape);
    if (!sum) return part_graph_error(c);
    mg_placement pl = c->out[0];
    pl.ax[MG_GROUP_TP] = tp > 1 ? sh_partial() : sh_full();
    pl.ax[MG_GROUP_EP] = mg_place_full(MG_GROUP_EP);
    pl.ax[MG_GROUP_EDP] = mg_place_full(MG_GROUP_EDP);
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
static int ep_axis_node(part_ctx *c, const mg_node *n) {
    if (n->op == MG_OP_ACCUMULATE && n->n_in == 2 && ep_split_in(c, n->in[1])) {
        const mg_tensor *w = n->in[0]->state_of;
        if (w && ep_is_expert_param(w)) {
            /* a micro-batch's expert gradient in its weight's etp block: a weight gradient
             * computed whole over etp (from inputs the rules gathered: SwiGLU's halves) is
             * sliced to it before the accumulator is made like it */
            mg_sharding we = part_placement(c, w)->ax[MG_GROUP_ETP];
            const mg_placement *gp = part_placement(c, n->in[1]);
            if (c->err->code) return c->err->code;
            if (!sh_eq(gp->ax[MG_GROUP_ETP], we)) {
                mg_placement to = *gp;
                to.ax[MG_GROUP_ETP] = we;
                mg_tensor *g = part_get_pl(c, n->in[1], &to);
                if (!g) return part_status(c);
                c->st[n->in[1]->id] = (pt){g, to};
            }
        }
        int rc = part_state_leaves(c, n); /* the accumulator: the block's */
        if (rc) return rc;
        part_out_all(c, n, MG_GROUP_EP, part_placement(c, n->in[1])->ax[MG_GROUP_EP]);
        part_out_all(c, n, MG_GROUP_ETP, part_placement(c, n->in[1])->ax[MG_GROUP_ETP]);
        return PART_NEXT;
    }
    if (n->op == MG_OP_ADAMW && ep_split_in(c, n->in[0])) {
        int rc = part_state_leaves(c, n); /* the moments: the block's */
        if (rc) return rc;
        part_out_all(c, n, MG_GROUP_EP, part_placement(c, n->in[0])->ax[MG_GROUP_EP]);
        part_out_all(c, n, MG_GROUP_ETP, part_placement(c, n->in[0])->ax[MG_GROUP_ETP]);
        return PART_NEXT;
    }
    bool any = false;
    for (int i = 0; i < n->n_in; i++) any |= ep_split_in(c, n->in[i]);
    if (!any) return c->err->code ? c->err->code : PART_NEXT;
    if (n->op == MG_OP_SUMSQ) {
        int rc = ep_sumsq(c, n);
        return rc ? rc : PART_DONE;
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
    part_out_all(c, n, MG_GROUP_EP, s);
    for (int i = 0; i < n->n_in; i++) /* (a block's etp state, which blocks of one shape share) */
        if (part_placement(c, n->in[i])->ax[MG_GROUP_EP].kind == MG_SHARD_SPLIT)
            part_out_all(c, n, MG_GROUP_ETP, part_placement(c, n->in[i])->ax[MG_GROUP_ETP]);
    return PART_NEXT;
}

static int ep_node(part_ctx *c, const mg_node *n) {
    struct ep_state *s = eps(c);
    if (!s) return PART_NEXT;
    bool side = false;
    for (int i = 0; i < n->n_in; i++) side |= s->side[n->in[i]->id] != 0;
    int rc;
    if (n->op == MG_OP_MOE_PERMUTE) rc = dispatch_node(c, n);
    else if (side && (n->op == MG_OP_MOE_UNPERMUTE || n->op == MG_OP_MOE_ROW_DOT)) rc = combine_node(c, n);
    else if (side) rc = expert_node(c, n);
    else return ep_axis_node(c, n);
    return rc ? rc : PART_DONE;
}

const part_axis part_axis_ep = {.name = "ep", .init = ep_init, .release = ep_release, .leaf = ep_leaf, .node = ep_node};

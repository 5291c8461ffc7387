/* Data parallelism: the reduction of what each rank's micro-batches contribute.
 *
 * The step graph holds one micro-batch's forward and backward (nodes with mb >= 0),
 * which every data-parallel rank runs for its own micro-batches (rank d of dp runs
 * global micro-batches d, d + dp, ..., as Megatron's sampler deals them out: see
 * mg_exec_info). Gradients and the loss accumulate across a rank's micro-batches in
 * place, so what flows from the per-micro-batch part into the once-per-step part
 * (mb < 0) is, on each rank, that rank's share: a partial sum over the replicas (dp;
 * edp for an expert block, whose other dp ranks' tokens reached it by the dispatch).
 * Ops linear in all of their inputs (their sharding rule says so: part_op_linear) carry
 * shares along; anything else needs the whole value, so an all-reduce is inserted, in
 * the once-per-step part. Parameter gradients are reduced the moment their
 * accumulation is final, so with the engine's interleaving of the last micro-batch and
 * the step part, their all-reduce overlaps the rest of the backward.
 */
#include "partitioners/partition_internal.h"

unsigned dp_replica_axes(void) { return 1u << MG_GROUP_DP | 1u << MG_GROUP_CP | 1u << MG_GROUP_EDP; }

mg_group dp_grad_group(const part_ctx *c) {
    return part_size(c, MG_GROUP_CP) > 1 ? MG_GROUP_DP_CP : MG_GROUP_DP;
}

/* The axis a share of lt is a partial sum over: its replicas' (edp for an expert block).
 * -1 when that group is one rank: a sum over one rank is the value itself. */
static int share_axis(const part_ctx *c, const mg_placement *p) {
    int a = mg_placement_expert(p) ? MG_GROUP_EDP : MG_GROUP_DP;
    return part_size(c, (mg_group)a) > 1 ? a : -1;
}

/* An input is a share when its placement says so, or when it comes out of a
 * micro-batch into the shared (mb == -1) part of the graph. */
static bool is_share(const part_ctx *c, const mg_node *n, const mg_tensor *in) {
    const pt *p = &c->st[in->id];
    int a = share_axis(c, &p->pl);
    if (a < 0 || p->pl.ax[a].kind == MG_SHARD_SPLIT) return false; /* (a shard of the sum: fsdp.c) */
    if (p->pl.ax[a].kind == MG_SHARD_PARTIAL) return true;
    return n->mb < 0 && in->src && in->src->mb >= 0;
}

/* Replaces a share by its sum over the replicas (for consumers that are not linear in it). */
static int reduce_share(part_ctx *c, const mg_tensor *lt) {
    pt *p = &c->st[lt->id];
    int a = share_axis(c, &p->pl);
    if (a < 0) return MG_OK;
    p->pl.ax[a] = mg_place_partial((mg_group)a);
    mg_tensor *t = part_get_summed(c, lt, MG_GROUP_TP, p->pl.ax[MG_GROUP_TP], dp_replica_axes());
    if (!t) return part_status(c);
    p->t = t;
    p->pl.ax[a] = mg_place_full((mg_group)a);
    if (p->pl.ax[MG_GROUP_CP].kind == MG_SHARD_PARTIAL) p->pl.ax[MG_GROUP_CP] = mg_place_full(MG_GROUP_CP); /* summed too */
    return MG_OK;
}

/* No replicas to sum over: one data-parallel rank, and expert blocks (if any) on one
 * edp rank (under context parallelism, dp 1 may still leave edp = cp / ep ranks). */
static bool no_replicas(const part_ctx *c) {
    return part_size(c, MG_GROUP_DP) == 1 && (!ep_places_experts(c) || part_size(c, MG_GROUP_EDP) == 1);
}

static int dp_node(part_ctx *c, const mg_node *n) {
    if (no_replicas(c) || n->mb >= 0) return PART_NEXT; /* inside a micro-batch: no shares */
    int n_share = 0;
    for (int i = 0; i < n->n_in; i++) n_share += c->st[n->in[i]->id].t && is_share(c, n, n->in[i]);
    if (!n_share) return PART_NEXT;
    if (n_share == n->n_in && part_op_linear(n)) { /* shares in, share out */
        int a = share_axis(c, &c->st[n->in[0]->id].pl);
        part_out_all(c, n, a, mg_place_partial((mg_group)a));
        return PART_NEXT;
    }
    for (int i = 0; i < n->n_in; i++)
        if (is_share(c, n, n->in[i])) {
            int rc = reduce_share(c, n->in[i]);
            if (rc) return rc;
        }
    return PART_NEXT;
}

void dp_mark_grad_share(part_ctx *c, const mg_tensor *lo) {
    pt *p = &c->st[lo->id];
    int a = share_axis(c, &p->pl);
    if (a >= 0 && p->pl.ax[a].kind == MG_SHARD_FULL && lo->src && lo->src->mb >= 0 &&
        !dopt_has_param(c, c->final_grad_of[lo->id]))
        p->pl.ax[a] = mg_place_partial((mg_group)a);
}

static int dp_after(part_ctx *c, const mg_node *n) {
    if (no_replicas(c)) return MG_OK;
    for (int j = 0; j < n->n_out; j++) {
        const mg_tensor *lo = n->out[j];
        if (c->final_grad_of[lo->id] < 0 || !c->st[lo->id].t) continue;
        if (dopt_has_param(c, c->final_grad_of[lo->id])) continue; /* its bucket is reduce-scattered */
        part_enter_step_context(c); /* the reduction runs once per step, after the last micro-batch */
        dp_mark_grad_share(c, lo);
        int a = share_axis(c, &c->st[lo->id].pl);
        if (a < 0 || c->st[lo->id].pl.ax[a].kind != MG_SHARD_PARTIAL) continue;
        int rc = reduce_share(c, lo);
        if (rc) return rc;
    }
    return MG_OK;
}

const part_axis part_axis_dp = {.name = "dp", .node = dp_node, .after = dp_after};

/* Data parallelism: the reduction of what each rank's micro-batches contribute.
 *
 * The step graph holds one micro-batch's forward and backward (nodes with mb >= 0),
 * which every data-parallel rank runs for its own micro-batches (rank d of dp runs
 * global micro-batches d, d + dp, ..., as Megatron's sampler deals them out: see
 * mg_exec_info). Gradients and the loss accumulate across a rank's micro-batches in
 * place, so what flows from the per-micro-batch part into the once-per-step part
 * (mb < 0) is, on each rank, that rank's share: a partial sum over dp. Adds and scales
 * carry shares along; anything else needs the whole value, so an all-reduce over dp
 * is inserted, in the once-per-step part. Parameter gradients are reduced the moment
 * their accumulation is final, so with the engine's interleaving of the last
 * micro-batch and the step part, their all-reduce overlaps the rest of the backward.
 */
#include "partitioners/partition_internal.h"

/* An input is a share when its placement says so, or when it comes out of a
 * micro-batch into the shared (mb == -1) part of the graph. */
static bool is_share(const part_ctx *c, const mg_node *n, const mg_tensor *in) {
    const pt *p = &c->st[in->id];
    if (pl_dp_partial(&p->pl)) return true;
    return c->dp > 1 && n->mb < 0 && in->src && in->src->mb >= 0;
}

/* Replaces a share by its sum over dp (for consumers that are not linear in it). */
static int reduce_share(part_ctx *c, const mg_tensor *lt) {
    pt *p = &c->st[lt->id];
    p->pl.ax[MG_GROUP_DP] = mg_place_partial(MG_GROUP_DP);
    mg_tensor *t = part_get_dp_full(c, lt, p->pl.ax[MG_GROUP_TP]);
    if (!t) return c->err->code ? c->err->code : MG_ERR_RUNTIME;
    p->t = t;
    p->pl.ax[MG_GROUP_DP] = mg_place_full(MG_GROUP_DP);
    if (p->pl.ax[MG_GROUP_CP].kind == MG_SHARD_PARTIAL) p->pl.ax[MG_GROUP_CP] = mg_place_full(MG_GROUP_CP); /* summed too */
    return MG_OK;
}

int dp_partition_node(part_ctx *c, const mg_node *n) {
    if (c->dp == 1) return 0;
    if (n->mb >= 0) return 0; /* inside a micro-batch: shares cannot occur */
    int n_share = 0;
    for (int i = 0; i < n->n_in; i++) n_share += c->st[n->in[i]->id].t && is_share(c, n, n->in[i]);
    if (!n_share) return 0;
    bool linear = mg_op_def_get(n->op)->flags & MG_OPF_LINEAR;
    if (linear && n_share == n->n_in) {
        c->node_pl.ax[MG_GROUP_DP] = mg_place_partial(MG_GROUP_DP); /* shares in, share out */
        return 0;
    }
    for (int i = 0; i < n->n_in; i++)
        if (is_share(c, n, n->in[i])) {
            int rc = reduce_share(c, n->in[i]);
            if (rc) return rc;
        }
    return 0;
}

void dp_mark_grad_share(part_ctx *c, const mg_tensor *lo) {
    if (c->dp > 1 && lo->src && lo->src->mb >= 0 && !dopt_has_param(c, c->final_grad_of[lo->id]))
        c->st[lo->id].pl.ax[MG_GROUP_DP] = mg_place_partial(MG_GROUP_DP);
}

int dp_after_node(part_ctx *c, const mg_node *n) {
    if (c->dp == 1) return MG_OK;
    for (int j = 0; j < n->n_out; j++) {
        const mg_tensor *lo = n->out[j];
        if (c->final_grad_of[lo->id] < 0 || !c->st[lo->id].t) continue;
        if (dopt_has_param(c, c->final_grad_of[lo->id])) continue; /* its bucket is reduce-scattered */
        part_enter_step_context(c); /* the reduction runs once per step, after the last micro-batch */
        dp_mark_grad_share(c, lo);
        if (!pl_dp_partial(&c->st[lo->id].pl)) continue;
        int rc = reduce_share(c, lo);
        if (rc) return rc;
    }
    return MG_OK;
}

/* Data parallelism: which micro-batches are this rank's, and the reduction of what
 * they contribute.
 *
 * The logical step graph unrolls all M micro-batches of the global batch, and
 * autodiff sums each parameter's gradient over them with adds that belong to no
 * micro-batch. Data parallelism needs nothing more: rank d of dp owns micro-batches
 * [d M/dp, (d+1) M/dp) and skips the others' nodes; a sum over micro-batches then
 * holds, on each rank, that rank's share (a partial sum over dp). Adds and scales
 * carry shares along; anything else needs the whole value, so an all-reduce over dp
 * is inserted. Parameter gradients are reduced the moment they are final, so their
 * all-reduce overlaps the rest of the backward pass.
 */
#include "partitioners/partition_internal.h"

bool dp_owns(const part_ctx *c, int mb) { return mb < 0 || mb / c->mb_per_rank == c->dp_rank; }

/* An input is a share when it says so, or when it comes out of a micro-batch into
 * the shared (mb == -1) part of the graph. */
static bool is_share(const part_ctx *c, const mg_node *n, const mg_tensor *in) {
    const pt *p = &c->st[in->id];
    if (p->dp_partial) return true;
    return c->dp > 1 && n->mb < 0 && in->src && in->src->mb >= 0;
}

static bool is_absent(const part_ctx *c, const mg_tensor *in) { return c->st[in->id].absent; }

static void mark_absent(part_ctx *c, const mg_node *n) {
    for (int j = 0; j < n->n_out; j++) c->st[n->out[j]->id] = (pt){NULL, true, sh_full(), false};
}

/* Replaces a share by its sum over dp (for consumers that are not linear in it). */
static int reduce_share(part_ctx *c, const mg_tensor *lt) {
    pt *p = &c->st[lt->id];
    p->dp_partial = true;
    mg_tensor *t = part_get_dp_full(c, lt, p->tp);
    if (!t) return c->err->code ? c->err->code : MG_ERR_RUNTIME;
    p->t = t;
    p->dp_partial = false;
    return MG_OK;
}

int dp_partition_node(part_ctx *c, const mg_node *n, bool *dp_partial_out) {
    *dp_partial_out = false;
    if (c->dp == 1) return 0;
    if (!dp_owns(c, n->mb)) {
        mark_absent(c, n);
        return 1;
    }
    if (n->mb >= 0) return 0; /* inside a micro-batch: shares cannot occur */
    int n_absent = 0, n_share = 0;
    for (int i = 0; i < n->n_in; i++) {
        n_absent += is_absent(c, n->in[i]);
        n_share += !is_absent(c, n->in[i]) && is_share(c, n, n->in[i]);
    }
    if (!n_absent && !n_share) return 0;
    bool linear = n->op == MG_OP_ADD || n->op == MG_OP_SCALE;
    if (n_absent) {
        if (!linear)
            return part_fail(c, MG_ERR_RUNTIME, "partitioning: %s '%s' on rank %d needs a tensor of another rank's "
                             "micro-batch", mg_op_name(n->op), n->out[0]->name, c->mesh->rank);
        if (n_absent == n->n_in) {
            mark_absent(c, n);
            return 1;
        }
        /* add(share, absent): the other rank's term is zero here; the result is this
         * rank's share itself */
        const mg_tensor *present = is_absent(c, n->in[0]) ? n->in[1] : n->in[0];
        part_state(c, present);
        pt p = c->st[present->id];
        p.dp_partial = true;
        c->st[n->out[0]->id] = p;
        return 1;
    }
    if (linear && n_share == n->n_in) {
        *dp_partial_out = true; /* shares in, share out */
        return 0;
    }
    for (int i = 0; i < n->n_in; i++)
        if (is_share(c, n, n->in[i])) {
            int rc = reduce_share(c, n->in[i]);
            if (rc) return rc;
        }
    return 0;
}

int dp_after_node(part_ctx *c, const mg_node *n) {
    if (c->dp == 1 || c->dopt) return MG_OK;
    for (int j = 0; j < n->n_out; j++) {
        const mg_tensor *lo = n->out[j];
        if (c->final_grad_of[lo->id] < 0 || c->st[lo->id].absent || !c->st[lo->id].t) continue;
        if (!c->st[lo->id].dp_partial && !(lo->src && lo->src->mb >= 0)) continue;
        int rc = reduce_share(c, lo);
        if (rc) return rc;
    }
    return MG_OK;
}

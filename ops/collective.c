/* Collective ops: allreduce, allgather, reduce-scatter, broadcast. (The all-to-all of
 * expert parallelism is ops/alltoall.c, the pipeline's send/recv ops/p2p.c.)
 *
 * Partitioner passes insert these nodes after autodiff, so they have no gradient
 * rules (MG_OPF_NO_GRAD). The kernels find their communicator through
 * mg_exec_info.comm and call the blocking buffer collectives of
 * ops/comm_api.h; over a group of one rank they copy. Gather and scatter
 * along a dimension d > 0 go through a scratch buffer, because the collective itself
 * moves contiguous per-rank blocks: the gathered blocks are interleaved into the
 * output (allgather), the input's per-rank slices are packed into contiguous blocks
 * first (reduce-scatter).
 *
 * Cost: 0 FLOPs; bytes = what this rank sends under a ring algorithm
 * (mg_comm_wire_bytes).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mgraph/comm.h"
#include "ops/op.h"
#include "ops/comm_api.h"

/* ---- shape rules ---------------------------------------------------------------- */
static int check_common(const mg_node *n, mg_error *err) {
    const mg_tensor *x = n->in[0];
    const mg_attr_comm *c = &n->attrs.comm;
    if (x->dtype != MG_F32 && x->dtype != MG_I32)
        return mg_shape_error(err, n, "input must be f32 or i32, got %s", mg_dtype_name(x->dtype));
    if (c->group < 0 || c->group >= MG_GROUP_COUNT)
        return mg_shape_error(err, n, "group %d is not a mesh group", (int)c->group);
    if (c->nranks < 1) return mg_shape_error(err, n, "group size %d must be at least 1", c->nranks);
    return MG_OK;
}

static int check_dim(const mg_node *n, mg_error *err) {
    int d = n->attrs.comm.dim;
    if (d < 0 || d >= n->in[0]->ndim)
        return mg_shape_error(err, n, "dimension %d outside 0..%d", d, n->in[0]->ndim - 1);
    return MG_OK;
}

static int infer_allreduce(const mg_node *n, mg_tensor_desc *out, mg_error *err) {
    int rc = check_common(n, err);
    if (rc) return rc;
    mg_reduce_op op = n->attrs.comm.op;
    if (op != MG_REDUCE_SUM && op != MG_REDUCE_MAX) return mg_shape_error(err, n, "reduce op %d is not sum or max", (int)op);
    mg_desc_of(n->in[0], &out[0]);
    return 1;
}

static int infer_allgather(const mg_node *n, mg_tensor_desc *out, mg_error *err) {
    int rc = check_common(n, err);
    if (!rc) rc = check_dim(n, err);
    if (rc) return rc;
    mg_desc_of(n->in[0], &out[0]);
    out[0].shape[n->attrs.comm.dim] *= n->attrs.comm.nranks;
    return 1;
}

static int infer_reduce_scatter(const mg_node *n, mg_tensor_desc *out, mg_error *err) {
    int rc = check_common(n, err);
    if (!rc) rc = check_dim(n, err);
    if (rc) return rc;
    const mg_attr_comm *c = &n->attrs.comm;
    int64_t size = n->in[0]->shape[c->dim];
    if (size % c->nranks != 0)
        return mg_shape_error(err, n, "dimension %d (size %lld) does not divide by the %s group size %d", c->dim,
                              (long long)size, mg_group_name(c->group), c->nranks);
    mg_desc_of(n->in[0], &out[0]);
    out[0].shape[c->dim] = size / c->nranks;
    return 1;
}

static int infer_broadcast(const mg_node *n, mg_tensor_desc *out, mg_error *err) {
    int rc = check_common(n, err);
    if (rc) return rc;
    const mg_attr_comm *c = &n->attrs.comm;
    if (c->peer < 0 || c->peer >= c->nranks)
        return mg_shape_error(err, n, "root %d outside 0..%d of the %s group", c->peer, c->nranks - 1,
                              mg_group_name(c->group));
    mg_desc_of(n->in[0], &out[0]);
    return 1;
}

static void cost_comm(const mg_node *n, double *flops, double *bytes) {
    *flops = 0;
    /* (a sum of narrow storage is taken, and sent, in f32: ops/registry.c) */
    double es = mg_node_needs_convert(n) ? 4.0 : (double)mg_tensor_esize(n->in[0]);
    *bytes = mg_comm_wire_bytes(n->op, n->attrs.comm.nranks, (double)mg_numel(n->in[0]) * es);
}

/* ---- kernels -------------------------------------------------------------------- */
/* The communicator and group size for this execution. The group's size must be the
 * one the node was built for; a node over one rank runs without a communicator. */
static int group_of(const mg_kernel_args *a, mg_comm **comm, int *n, mg_error *err) {
    const mg_node *nd = a->node;
    const mg_attr_comm *at = &nd->attrs.comm;
    mg_comm *c = a->info ? a->info->comm : NULL;
    int size = c ? mg_comm_group_size(c, at->group) : 1;
    if (size != at->nranks) {
        if (!c)
            return mg_error_set(err, MG_ERR_INVALID,
                                "%s '%s': built for a %s group of %d ranks, but mg_exec_info.comm is NULL "
                                "(no communicator: only groups of one rank run)",
                                mg_op_name(nd->op), nd->out[0]->name, mg_group_name(at->group), at->nranks);
        return mg_error_set(err, MG_ERR_INVALID, "%s '%s': built for a %s group of %d ranks, the communicator's has %d",
                            mg_op_name(nd->op), nd->out[0]->name, mg_group_name(at->group), at->nranks, size);
    }
    *comm = c;
    *n = size;
    return MG_OK;
}

static void copy_through(const mg_kernel_args *a) {
    size_t bytes = mg_tensor_bytes(a->node->out[0]);
    if (a->out[0] != a->in[0] && bytes) memcpy(a->out[0], a->in[0], bytes);
}

static int allreduce_cpu(const mg_kernel_args *a, mg_error *err) {
    mg_comm *c;
    int n, rc = group_of(a, &c, &n, err);
    if (rc) return rc;
    if (n == 1) {
        copy_through(a);
        return MG_OK;
    }
    const mg_node *nd = a->node;
    return mg_comm_allreduce_buf(c, nd->attrs.comm.group, nd->in[0]->dtype, a->in[0], a->out[0], mg_numel(nd->in[0]),
                                 nd->attrs.comm.op, err);
}

static int allgather_cpu(const mg_kernel_args *a, mg_error *err) {
    mg_comm *c;
    int n, rc = group_of(a, &c, &n, err);
    if (rc) return rc;
    if (n == 1) {
        copy_through(a);
        return MG_OK;
    }
    const mg_node *nd = a->node;
    const mg_tensor *x = nd->in[0];
    mg_group grp = nd->attrs.comm.group;
    int64_t count = mg_numel(x), outer = mg_dims_prod(x->shape, 0, nd->attrs.comm.dim);
    mg_dtype st = mg_tensor_storage(x); /* (gathers move the stored bytes, narrow or not) */
    if (outer == 1) return mg_comm_allgather_buf(c, grp, st, a->in[0], a->out[0], count, err);
    /* Gathered blocks are [rank][outer][chunk]; the output is [outer][rank][chunk]. */
    size_t es = mg_dtype_size(st);
    int64_t chunk = count / outer;
    char *scratch = malloc((size_t)count * (size_t)n * es);
    if (!scratch) return mg_error_set(err, MG_ERR_NOMEM, "allgather '%s': out of memory for scratch", nd->out[0]->name);
    rc = mg_comm_allgather_buf(c, grp, st, a->in[0], scratch, count, err);
    if (!rc) {
        char *out = a->out[0];
        for (int r = 0; r < n; r++)
            for (int64_t o = 0; o < outer; o++)
                memcpy(out + (size_t)((o * n + r) * chunk) * es, scratch + (size_t)(r * count + o * chunk) * es,
                       (size_t)chunk * es);
    }
    free(scratch);
    return rc;
}

static int reduce_scatter_cpu(const mg_kernel_args *a, mg_error *err) {
    mg_comm *c;
    int n, rc = group_of(a, &c, &n, err);
    if (rc) return rc;
    const mg_node *nd = a->node;
    const mg_tensor *y = nd->out[0];
    if (n == 1) {
        copy_through(a);
        return MG_OK;
    }
    mg_group grp = nd->attrs.comm.group;
    int64_t count = mg_numel(y), outer = mg_dims_prod(y->shape, 0, nd->attrs.comm.dim);
    if (outer == 1) return mg_comm_reduce_scatter_buf(c, grp, y->dtype, a->in[0], a->out[0], count, err);
    /* The input is [outer][rank][chunk]; the collective wants [rank][outer][chunk]. */
    size_t es = mg_dtype_size(y->dtype);
    int64_t chunk = count / outer;
    char *send = malloc((size_t)count * (size_t)n * es);
    if (!send)
        return mg_error_set(err, MG_ERR_NOMEM, "reduce_scatter '%s': out of memory for scratch", nd->out[0]->name);
    const char *in = a->in[0];
    for (int r = 0; r < n; r++)
        for (int64_t o = 0; o < outer; o++)
            memcpy(send + (size_t)(r * count + o * chunk) * es, in + (size_t)((o * n + r) * chunk) * es,
                   (size_t)chunk * es);
    rc = mg_comm_reduce_scatter_buf(c, grp, y->dtype, send, a->out[0], count, err);
    free(send);
    return rc;
}

static int broadcast_cpu(const mg_kernel_args *a, mg_error *err) {
    mg_comm *c;
    int n, rc = group_of(a, &c, &n, err);
    if (rc) return rc;
    const mg_node *nd = a->node;
    if (n == 1 || mg_comm_group_rank(c, nd->attrs.comm.group) == nd->attrs.comm.peer) copy_through(a);
    if (n == 1) return MG_OK;
    return mg_comm_broadcast_buf(c, nd->attrs.comm.group, mg_tensor_storage(nd->in[0]), a->out[0], mg_numel(nd->out[0]),
                                 nd->attrs.comm.peer, err);
}

/* Reductions sum in f32 (narrow storage is widened around them, ops/registry.c); gathers
 * and broadcasts move the stored bytes. */
#define COMM_FLAGS (MG_OPF_COMM | MG_OPF_NO_GRAD)
const mg_op_def mg_opdef_ALLREDUCE = {"allreduce", 1, 1, COMM_FLAGS, infer_allreduce, NULL, cost_comm, allreduce_cpu, NULL, .shard = NULL};
const mg_op_def mg_opdef_ALLGATHER = {"allgather", 1, 1, COMM_FLAGS | MG_OPF_STORAGE, infer_allgather, NULL, cost_comm,
                                      allgather_cpu, NULL, .shard = NULL};
const mg_op_def mg_opdef_REDUCE_SCATTER = {"reduce_scatter", 1, 1, COMM_FLAGS, infer_reduce_scatter, NULL, cost_comm,
                                           reduce_scatter_cpu, NULL, .shard = NULL};
const mg_op_def mg_opdef_BROADCAST = {"broadcast", 1, 1, COMM_FLAGS | MG_OPF_STORAGE, infer_broadcast, NULL, cost_comm,
                                      broadcast_cpu, NULL, .shard = NULL};

/* ---- builders --------------------------------------------------------------------- */
/* "<x's name>.<op>", without the current scope (mg_node_new prefixes it again). */
static mg_tensor *comm_node(mg_graph *g, mg_op op, mg_tensor *x, const mg_attr_comm *c) {
    if (!g) return NULL;
    char name[256];
    const char *nm = NULL;
    if (x && x->name) {
        const char *base = x->name, *sc = mg_scope_current(g);
        size_t l = strlen(sc);
        if (l && strncmp(base, sc, l) == 0 && base[l] == '.') base += l + 1;
        snprintf(name, sizeof name, "%s.%s", base, mg_op_name(op));
        nm = name;
    }
    mg_attrs at;
    memset(&at, 0, sizeof at);
    at.comm = *c;
    mg_node *n = mg_node_new(g, op, &at, 1, &x, nm);
    return n ? n->out[0] : NULL;
}

mg_tensor *mg_allreduce(mg_graph *g, mg_tensor *x, mg_group grp, int nranks, mg_reduce_op op, int64_t seq) {
    mg_attr_comm c = {.group = grp, .nranks = nranks, .seq = seq, .op = op};
    return comm_node(g, MG_OP_ALLREDUCE, x, &c);
}

mg_tensor *mg_allgather(mg_graph *g, mg_tensor *x, mg_group grp, int nranks, int dim, int64_t seq) {
    mg_attr_comm c = {.group = grp, .nranks = nranks, .seq = seq, .dim = dim};
    return comm_node(g, MG_OP_ALLGATHER, x, &c);
}

mg_tensor *mg_reduce_scatter(mg_graph *g, mg_tensor *x, mg_group grp, int nranks, int dim, int64_t seq) {
    mg_attr_comm c = {.group = grp, .nranks = nranks, .seq = seq, .op = MG_REDUCE_SUM, .dim = dim};
    return comm_node(g, MG_OP_REDUCE_SCATTER, x, &c);
}

mg_tensor *mg_broadcast(mg_graph *g, mg_tensor *x, mg_group grp, int nranks, int root, int64_t seq) {
    mg_attr_comm c = {.group = grp, .nranks = nranks, .seq = seq, .peer = root};
    return comm_node(g, MG_OP_BROADCAST, x, &c);
}

/* Point-to-point transfers between pipeline stages: send and recv.
 *
 * The pipeline pass (partitioners/pp.c) puts a send on the stage that produces an
 * activation (or an activation's gradient) and a recv on the stage that consumes it,
 * both with the same tag, the transfer's number in the logical graph's order. Every
 * micro-batch instance is its own message: key = tag x n_micro + instance, so the
 * messages in flight between two stages never share a key and arrive whatever order
 * the two ranks post them in. That is what lets the engine post transfers without
 * blocking and beside the collectives (scheduler/starpu_p2p.c); a kernel called
 * directly (the reference executor) posts and waits.
 *
 * A send's output is a one-element token: graph nodes have outputs, and the engine's
 * dependencies keep the sent buffer unwritten until the task (the transfer) ends.
 */
#include <stdio.h>
#include <string.h>

#include "mgraph/comm.h"
#include "ops/comm_api.h"
#include "ops/op.h"

int64_t mg_p2p_key(const mg_node *n, const mg_exec_info *info) {
    int64_t n_micro = info ? mg_exec_n_micro(info) : 1, inst = info && info->mb_local > 0 ? info->mb_local : 0;
    return (int64_t)n->attrs.comm.tag * n_micro + inst;
}

static int check_peer(const mg_node *n, mg_error *err) {
    const mg_attr_comm *c = &n->attrs.comm;
    if (c->group < 0 || c->group >= MG_GROUP_COUNT)
        return mg_shape_error(err, n, "group %d is not a mesh group", (int)c->group);
    if (c->nranks < 2) return mg_shape_error(err, n, "a transfer needs a group of 2 ranks or more, got %d", c->nranks);
    if (c->peer < 0 || c->peer >= c->nranks)
        return mg_shape_error(err, n, "peer %d outside 0..%d of the %s group", c->peer, c->nranks - 1,
                              mg_group_name(c->group));
    if (c->tag < 0) return mg_shape_error(err, n, "tag %d must be >= 0", c->tag);
    return MG_OK;
}

static int infer_send(const mg_node *n, mg_tensor_desc *out, mg_error *err) {
    int rc = check_peer(n, err);
    if (rc) return rc;
    if (n->in[0]->dtype != MG_F32 && n->in[0]->dtype != MG_I32)
        return mg_shape_error(err, n, "input must be f32 or i32, got %s", mg_dtype_name(n->in[0]->dtype));
    memset(&out[0], 0, sizeof out[0]);
    out[0].dtype = MG_I32;
    out[0].ndim = 1;
    out[0].shape[0] = 1;
    return 1;
}

static int infer_recv(const mg_node *n, mg_tensor_desc *out, mg_error *err) {
    int rc = check_peer(n, err);
    if (rc) return rc;
    const mg_attr_comm *c = &n->attrs.comm;
    if (c->dtype != MG_F32 && c->dtype != MG_I32)
        return mg_shape_error(err, n, "dtype must be f32 or i32, got %s", mg_dtype_name(c->dtype));
    if (c->ndim < 1 || c->ndim > MG_MAX_DIMS) return mg_shape_error(err, n, "rank %d outside 1..%d", c->ndim, MG_MAX_DIMS);
    memset(&out[0], 0, sizeof out[0]);
    out[0].dtype = c->dtype;
    out[0].ndim = c->ndim;
    for (int d = 0; d < c->ndim; d++) {
        if (c->shape[d] < 1) return mg_shape_error(err, n, "dimension %d has size %lld", d, (long long)c->shape[d]);
        out[0].shape[d] = c->shape[d];
    }
    return 1;
}

static void cost_send(const mg_node *n, double *flops, double *bytes) {
    *flops = 0;
    *bytes = (double)mg_tensor_bytes(n->in[0]);
}

static void cost_recv(const mg_node *n, double *flops, double *bytes) {
    (void)n;
    *flops = 0;
    *bytes = 0; /* the sender counts the message */
}

static int need_comm(const mg_kernel_args *a, mg_comm **c, mg_error *err) {
    *c = a->info ? a->info->comm : NULL;
    const mg_node *nd = a->node;
    if (!*c || mg_comm_group_size(*c, nd->attrs.comm.group) != nd->attrs.comm.nranks)
        return mg_error_set(err, MG_ERR_INVALID, "%s '%s': built for a %s group of %d ranks, the communicator's has %d",
                            mg_op_name(nd->op), nd->out[0]->name, mg_group_name(nd->attrs.comm.group),
                            nd->attrs.comm.nranks, *c ? mg_comm_group_size(*c, nd->attrs.comm.group) : 1);
    return MG_OK;
}

/* Blocking forms: post, then wait. */
static int send_cpu(const mg_kernel_args *a, mg_error *err) {
    mg_comm *c;
    int rc = need_comm(a, &c, err);
    if (rc) return rc;
    const mg_node *nd = a->node;
    mg_comm_request *req;
    *(int32_t *)a->out[0] = 0;
    rc = mg_comm_isend_buf(c, nd->attrs.comm.group, nd->attrs.comm.peer, mg_p2p_key(nd, a->info), mg_tensor_storage(nd->in[0]),
                           a->in[0], mg_numel(nd->in[0]), &req, err);
    return rc ? rc : mg_comm_wait(c, req, err);
}

static int recv_cpu(const mg_kernel_args *a, mg_error *err) {
    mg_comm *c;
    int rc = need_comm(a, &c, err);
    if (rc) return rc;
    const mg_node *nd = a->node;
    mg_comm_request *req;
    rc = mg_comm_irecv_buf(c, nd->attrs.comm.group, nd->attrs.comm.peer, mg_p2p_key(nd, a->info), mg_tensor_storage(nd->out[0]),
                           a->out[0], mg_numel(nd->out[0]), &req, err);
    return rc ? rc : mg_comm_wait(c, req, err);
}

/* (they move the stored bytes: both ends store the tensor alike, graph/precision.c) */
#define P2P_FLAGS (MG_OPF_COMM | MG_OPF_P2P | MG_OPF_NO_GRAD | MG_OPF_STORAGE)
const mg_op_def mg_opdef_SEND = {"send", 1, 1, P2P_FLAGS, infer_send, NULL, cost_send, send_cpu, NULL, .shard = NULL};
const mg_op_def mg_opdef_RECV = {"recv", 0, 0, P2P_FLAGS, infer_recv, NULL, cost_recv, recv_cpu, NULL, .shard = NULL};

mg_tensor *mg_send(mg_graph *g, mg_tensor *x, mg_group grp, int nranks, int peer, int tag) {
    if (!g || !x) return NULL;
    mg_attrs at;
    memset(&at, 0, sizeof at);
    at.comm = (mg_attr_comm){.group = grp, .nranks = nranks, .seq = -1, .peer = peer, .tag = tag};
    char name[256];
    const char *base = x->name, *sc = mg_scope_current(g);
    size_t l = strlen(sc);
    if (l && strncmp(base, sc, l) == 0 && base[l] == '.') base += l + 1;
    snprintf(name, sizeof name, "%s.send", base);
    mg_node *n = mg_node_new(g, MG_OP_SEND, &at, 1, &x, name);
    return n ? n->out[0] : NULL;
}

mg_tensor *mg_recv(mg_graph *g, mg_dtype dt, int ndim, const int64_t *shape, mg_group grp, int nranks, int peer, int tag,
                   const char *name) {
    if (!g || !shape || ndim < 1 || ndim > MG_MAX_DIMS) return NULL;
    mg_attrs at;
    memset(&at, 0, sizeof at);
    at.comm = (mg_attr_comm){.group = grp, .nranks = nranks, .seq = -1, .peer = peer, .tag = tag, .dtype = dt,
                             .ndim = ndim};
    for (int d = 0; d < ndim; d++) at.comm.shape[d] = shape[d];
    mg_node *n = mg_node_new(g, MG_OP_RECV, &at, 0, NULL, name);
    return n ? n->out[0] : NULL;
}

/* ring_shift: the context-parallel ring step as one collective node.
 *
 *   ring_shift(x) over a group of n members, shift k: member i's output is member
 *   (i - k) mod n's input (every member sends its block k places on and receives the
 *   block from k places back; one MPI_Sendrecv per member, scheduler/comm_mpi.c).
 *
 * Context parallelism (partitioners/cp.c) moves K/V blocks around the cp group with
 * C-1 of these per attention layer, so the ring is a chain of ordinary graph nodes:
 * each shift can run while the previous block's partial attention computes (the
 * dataflow overlaps them), it is visible in the DOT dump, and it is counted and
 * traced like every collective. The gradient of a shift by k is the shift by -k
 * (the block goes back where it came from): it is a permutation of the members'
 * blocks, whose adjoint is its inverse. The partitioner runs after autodiff and
 * builds the backward ring itself (dK/dV travel back with shifts by -1), but the op
 * keeps its gradient rule, so a graph built with ring shifts before autodiff
 * differentiates too.
 *
 * Cost: 0 FLOPs; bytes = the whole block, sent once (mg_comm_wire_bytes' default).
 */
#include <stdlib.h>
#include <string.h>

#include "mgraph/comm.h"
#include "ops/comm_api.h"
#include "ops/op.h"

static int infer_ring_shift(const mg_node *n, mg_tensor_desc *out, mg_error *err) {
    const mg_tensor *x = n->in[0];
    const mg_attr_comm *c = &n->attrs.comm;
    if (x->dtype != MG_F32 && x->dtype != MG_I32)
        return mg_shape_error(err, n, "input must be f32 or i32, got %s", mg_dtype_name(x->dtype));
    if (c->group < 0 || c->group >= MG_GROUP_COUNT)
        return mg_shape_error(err, n, "group %d is not a mesh group", (int)c->group);
    if (c->nranks < 1) return mg_shape_error(err, n, "group size %d must be at least 1", c->nranks);
    mg_desc_of(x, &out[0]);
    return 1;
}

static void cost_ring_shift(const mg_node *n, double *flops, double *bytes) {
    *flops = 0;
    int k = n->attrs.comm.nranks > 0 ? ((n->attrs.comm.peer % n->attrs.comm.nranks) + n->attrs.comm.nranks) %
                                           n->attrs.comm.nranks
                                     : 0;
    *bytes = k == 0 ? 0.0
                    : mg_comm_wire_bytes(MG_OP_RING_SHIFT, n->attrs.comm.nranks,
                                         (double)mg_tensor_bytes(n->in[0]));
}

static int ring_shift_cpu(const mg_kernel_args *a, mg_error *err) {
    const mg_node *nd = a->node;
    const mg_attr_comm *at = &nd->attrs.comm;
    mg_comm *c = a->info ? a->info->comm : NULL;
    int n = c ? mg_comm_group_size(c, at->group) : 1;
    if (n != at->nranks)
        return mg_error_set(err, MG_ERR_INVALID, "ring_shift '%s': built for a %s group of %d ranks, %s %d",
                            nd->out[0]->name, mg_group_name(at->group), at->nranks,
                            c ? "the communicator's has" : "but there is no communicator (mg_exec_info.comm), so", n);
    int k = ((at->peer % n) + n) % n;
    size_t bytes = mg_tensor_bytes(nd->out[0]);
    if (k == 0) { /* a group of one, or a whole turn: the block stays */
        if (a->out[0] != a->in[0] && bytes) memcpy(a->out[0], a->in[0], bytes);
        return MG_OK;
    }
    int me = mg_comm_group_rank(c, at->group);
    return mg_comm_sendrecv_buf(c, at->group, mg_tensor_storage(nd->in[0]), a->in[0], a->out[0], mg_numel(nd->in[0]), (me + k) % n,
                                (me - k + n) % n, err);
}

static int ring_shift_grad(mg_graph *g, const mg_node *n, mg_tensor *const *dout, const bool *need, mg_tensor **din) {
    if (!need[0] || !dout[0]) return MG_OK;
    const mg_attr_comm *c = &n->attrs.comm;
    din[0] = mg_ring_shift(g, dout[0], c->group, c->nranks, -c->peer, c->seq);
    return din[0] ? MG_OK : mg_graph_error(g)->code;
}

const mg_op_def mg_opdef_RING_SHIFT = {"ring_shift", 1, 1, MG_OPF_COMM | MG_OPF_STORAGE, infer_ring_shift,
                                       ring_shift_grad, cost_ring_shift, ring_shift_cpu, NULL, .shard = NULL};

mg_tensor *mg_ring_shift(mg_graph *g, mg_tensor *x, mg_group grp, int nranks, int shift, int64_t seq) {
    if (!g) return NULL;
    mg_attrs at;
    memset(&at, 0, sizeof at);
    at.comm = (mg_attr_comm){.group = grp, .nranks = nranks, .seq = seq, .peer = shift};
    mg_node *nd = mg_node_new(g, MG_OP_RING_SHIFT, &at, 1, &x, "ring_shift");
    return nd ? nd->out[0] : NULL;
}

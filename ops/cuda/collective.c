/* CUDA kernels of the collective ops (ops/collective.c): the same semantics on device
 * buffers, over NCCL (scheduler/comm_nccl.c). Gathers and scatters along a dimension
 * other than the first reorder blocks with pitched 2-D copies around the collective,
 * as the CPU kernels do with memcpy. Point-to-point ops stay on CPU workers. */
#include "ops/cuda/cuda_common.h"
#include "ops/comm_api.h"

static int group_of(const mg_kernel_args *a, mg_comm **comm, int *n, mg_error *err) {
    const mg_node *nd = a->node;
    const mg_attr_comm *at = &nd->attrs.comm;
    mg_comm *c = a->info ? a->info->comm : NULL;
    int size = c ? mg_comm_group_size(c, at->group) : 1;
    if (size != at->nranks)
        return mg_error_set(err, MG_ERR_INVALID, "%s '%s': built for a %s group of %d ranks, the communicator's has %d",
                            mg_op_name(nd->op), nd->out[0]->name, mg_group_name(at->group), at->nranks, size);
    *comm = c;
    *n = size;
    return MG_OK;
}

static int copy_through(const mg_kernel_args *a, mg_error *err) {
    size_t bytes = mg_tensor_bytes(a->node->out[0]);
    if (a->out[0] == a->in[0] || !bytes) return MG_OK;
    return mg_cuda_check(cudaMemcpyAsync(a->out[0], a->in[0], bytes, cudaMemcpyDeviceToDevice, mg_cuda_stream()),
                         mg_op_name(a->node->op), err);
}

int mg_cuda_allreduce(const mg_kernel_args *a, mg_error *err) {
    mg_comm *c = NULL;
    int n = 0, rc = group_of(a, &c, &n, err);
    if (rc) return rc;
    if (n == 1) return copy_through(a, err);
    const mg_node *nd = a->node;
    return mg_comm_allreduce_dev(c, nd->attrs.comm.group, nd->in[0]->dtype, a->in[0], a->out[0], mg_numel(nd->in[0]),
                                 nd->attrs.comm.op, mg_cuda_stream(), err);
}

int mg_cuda_allgather(const mg_kernel_args *a, mg_error *err) {
    mg_comm *c = NULL;
    int n = 0, rc = group_of(a, &c, &n, err);
    if (rc) return rc;
    if (n == 1) return copy_through(a, err);
    const mg_node *nd = a->node;
    const mg_tensor *x = nd->in[0];
    mg_group grp = nd->attrs.comm.group;
    int64_t count = mg_numel(x), outer = mg_dims_prod(x->shape, 0, nd->attrs.comm.dim);
    mg_dtype st = mg_tensor_storage(x); /* (gathers move the stored bytes) */
    if (outer == 1) return mg_comm_allgather_dev(c, grp, st, a->in[0], a->out[0], count, mg_cuda_stream(), err);
    /* gathered [rank][outer][chunk] -> output [outer][rank][chunk] */
    size_t es = mg_dtype_size(st), chunk = (size_t)(count / outer) * es;
    char *scratch;
    if ((rc = mg_cuda_scratch((void **)&scratch, (size_t)count * (size_t)n * es, "allgather", err))) return rc;
    rc = mg_comm_allgather_dev(c, grp, st, a->in[0], scratch, count, mg_cuda_stream(), err);
    for (int r = 0; r < n && !rc; r++)
        rc = mg_cuda_check(cudaMemcpy2DAsync((char *)a->out[0] + (size_t)r * chunk, (size_t)n * chunk,
                                             scratch + (size_t)r * (size_t)count * es, chunk, chunk, (size_t)outer,
                                             cudaMemcpyDeviceToDevice, mg_cuda_stream()),
                           "allgather", err);
    mg_cuda_scratch_free(scratch);
    return rc;
}

int mg_cuda_reduce_scatter(const mg_kernel_args *a, mg_error *err) {
    mg_comm *c = NULL;
    int n = 0, rc = group_of(a, &c, &n, err);
    if (rc) return rc;
    if (n == 1) return copy_through(a, err);
    const mg_node *nd = a->node;
    const mg_tensor *y = nd->out[0];
    mg_group grp = nd->attrs.comm.group;
    int64_t count = mg_numel(y), outer = mg_dims_prod(y->shape, 0, nd->attrs.comm.dim);
    if (outer == 1)
        return mg_comm_reduce_scatter_dev(c, grp, y->dtype, a->in[0], a->out[0], count, mg_cuda_stream(), err);
    /* input [outer][rank][chunk] -> send [rank][outer][chunk] */
    size_t es = mg_dtype_size(y->dtype), chunk = (size_t)(count / outer) * es;
    char *send;
    if ((rc = mg_cuda_scratch((void **)&send, (size_t)count * (size_t)n * es, "reduce_scatter", err))) return rc;
    for (int r = 0; r < n && !rc; r++)
        rc = mg_cuda_check(cudaMemcpy2DAsync(send + (size_t)r * (size_t)count * es, chunk,
                                             (const char *)a->in[0] + (size_t)r * chunk, (size_t)n * chunk, chunk,
                                             (size_t)outer, cudaMemcpyDeviceToDevice, mg_cuda_stream()),
                           "reduce_scatter", err);
    if (!rc) rc = mg_comm_reduce_scatter_dev(c, grp, y->dtype, send, a->out[0], count, mg_cuda_stream(), err);
    mg_cuda_scratch_free(send);
    return rc;
}

int mg_cuda_broadcast(const mg_kernel_args *a, mg_error *err) {
    mg_comm *c = NULL;
    int n = 0, rc = group_of(a, &c, &n, err);
    if (rc) return rc;
    const mg_node *nd = a->node;
    if (n == 1 || mg_comm_group_rank(c, nd->attrs.comm.group) == nd->attrs.comm.peer) rc = copy_through(a, err);
    if (rc || n == 1) return rc;
    return mg_comm_broadcast_dev(c, nd->attrs.comm.group, mg_tensor_storage(nd->in[0]), a->out[0], mg_numel(nd->out[0]),
                                 nd->attrs.comm.peer, mg_cuda_stream(), err);
}

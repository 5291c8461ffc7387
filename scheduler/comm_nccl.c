/* Collectives on GPU buffers over NCCL, behind the same graph nodes as the MPI ones
 * (ops/comm_api.h). The CUDA kernels of the collective ops
 * (ops/cuda/collective.c) call these when StarPU runs the node on a CUDA worker, so
 * the backend is chosen at run time by where the buffers live.
 *
 * One NCCL communicator per mesh group, made on the group's first device collective:
 * the group's member 0 creates the unique id and broadcasts it over the group's MPI
 * communicator (every member reaches that first collective at the same point of its
 * seq order, so the bootstrap cannot interleave with another group's). The
 * communicator binds to the calling thread's current device: a StarPU CUDA worker's.
 *
 * Streams: NCCL kernels run on a stream of their own. A collective waits for the work
 * already queued on the caller's stream (an event), and the caller's stream waits for
 * the collective, so dataflow order holds and the call itself only queues work.
 */
#include <cuda_runtime.h>
#include <nccl.h>
#include <stdlib.h>
#include <string.h>

#include "ops/comm_api.h"

struct mg_nccl {
    ncclComm_t comm[MG_GROUP_COUNT];
    cudaStream_t stream;
    cudaEvent_t before, after;
};

void mg_nccl_free(mg_nccl *n) {
    if (!n) return;
    for (int g = 0; g < MG_GROUP_COUNT; g++)
        if (n->comm[g]) ncclCommDestroy(n->comm[g]);
    if (n->before) cudaEventDestroy(n->before);
    if (n->after) cudaEventDestroy(n->after);
    if (n->stream) cudaStreamDestroy(n->stream);
    free(n);
}

static int cuda_fail(cudaError_t e, const char *what, mg_error *err) {
    return mg_error_set(err, MG_ERR_RUNTIME, "%s: CUDA error %s (%s)", what, cudaGetErrorName(e), cudaGetErrorString(e));
}

static int nccl_fail(ncclResult_t r, const char *what, mg_group grp, mg_error *err) {
    return mg_error_set(err, MG_ERR_RUNTIME, "%s over %s: NCCL error %d (%s)", what, mg_group_name(grp), (int)r,
                        ncclGetErrorString(r));
}

/* The group's NCCL communicator, created on first use (collective over the group). */
static int get_comm(mg_comm *c, mg_group grp, ncclComm_t *out, mg_nccl **state, mg_error *err) {
    if (!c || grp < 0 || grp >= MG_GROUP_COUNT)
        return mg_error_set(err, MG_ERR_INVALID, "NCCL collective: no communicator for group %s", mg_group_name(grp));
    mg_nccl **slot = mg_comm_nccl_slot(c);
    if (!*slot) {
        mg_nccl *n = calloc(1, sizeof *n);
        if (!n) return mg_error_set(err, MG_ERR_NOMEM, "NCCL: out of memory");
        cudaError_t e = cudaStreamCreateWithFlags(&n->stream, cudaStreamNonBlocking);
        if (e == cudaSuccess) e = cudaEventCreateWithFlags(&n->before, cudaEventDisableTiming);
        if (e == cudaSuccess) e = cudaEventCreateWithFlags(&n->after, cudaEventDisableTiming);
        if (e != cudaSuccess) {
            mg_nccl_free(n);
            return cuda_fail(e, "NCCL stream", err);
        }
        *slot = n;
    }
    mg_nccl *n = *slot;
    if (!n->comm[grp]) {
        int size = mg_comm_group_size(c, grp), rank = mg_comm_group_rank(c, grp);
        ncclUniqueId id;
        memset(&id, 0, sizeof id);
        ncclResult_t r = ncclSuccess;
        if (rank == 0) r = ncclGetUniqueId(&id);
        /* Sent even after a failure (zeros) so that no member waits forever; every
         * member then fails in ncclCommInitRank. */
        int rc = mg_comm_broadcast_buf(c, grp, MG_I32, &id, (int64_t)(sizeof id / sizeof(int32_t)), 0, err);
        if (rc) return rc;
        if (r != ncclSuccess) return nccl_fail(r, "ncclGetUniqueId", grp, err);
        r = ncclCommInitRank(&n->comm[grp], size, id, rank);
        if (r != ncclSuccess) {
            n->comm[grp] = NULL;
            return nccl_fail(r, "ncclCommInitRank", grp, err);
        }
    }
    *out = n->comm[grp];
    *state = n;
    return MG_OK;
}

static int nccl_type(mg_dtype dt, ncclDataType_t *t, const char *what, mg_error *err) {
    if (dt == MG_F32) *t = ncclFloat32;
    else if (dt == MG_I32) *t = ncclInt32;
    else if (dt == MG_BF16) *t = ncclBfloat16; /* (gathered, never summed: reductions widen, ops/registry.c) */
    else if (dt == MG_F16) *t = ncclFloat16;
    else if (dt == MG_F8E4M3 || dt == MG_F8E5M2) *t = ncclUint8;
    else return mg_error_set(err, MG_ERR_UNSUPPORTED, "%s: dtype %s not supported (f32, i32)", what, mg_dtype_name(dt));
    return MG_OK;
}

/* Orders the NCCL stream after `caller` (before the collective). */
static int enter(mg_nccl *n, cudaStream_t caller, const char *what, mg_error *err) {
    cudaError_t e = cudaEventRecord(n->before, caller);
    if (e == cudaSuccess) e = cudaStreamWaitEvent(n->stream, n->before, 0);
    return e == cudaSuccess ? MG_OK : cuda_fail(e, what, err);
}

/* Orders `caller` after the collective. */
static int leave(mg_nccl *n, cudaStream_t caller, const char *what, mg_error *err) {
    cudaError_t e = cudaEventRecord(n->after, n->stream);
    if (e == cudaSuccess) e = cudaStreamWaitEvent(caller, n->after, 0);
    return e == cudaSuccess ? MG_OK : cuda_fail(e, what, err);
}

typedef struct call {
    ncclComm_t comm;
    mg_nccl *n;
    ncclDataType_t type;
} call;

static int begin(mg_comm *c, mg_group grp, mg_dtype dt, int64_t count, void *stream, const char *what, call *k,
                 mg_error *err) {
    if (count < 0) return mg_error_set(err, MG_ERR_INVALID, "%s: negative count", what);
    int rc = nccl_type(dt, &k->type, what, err);
    if (!rc) rc = get_comm(c, grp, &k->comm, &k->n, err);
    if (!rc) rc = enter(k->n, (cudaStream_t)stream, what, err);
    return rc;
}

int mg_comm_allreduce_dev(mg_comm *c, mg_group grp, mg_dtype dt, const void *in, void *out, int64_t count,
                          mg_reduce_op op, void *stream, mg_error *err) {
    call k = {0};
    int rc = begin(c, grp, dt, count, stream, "ncclAllReduce", &k, err);
    if (rc) return rc;
    ncclResult_t r = ncclAllReduce(in, out, (size_t)count, k.type, op == MG_REDUCE_MAX ? ncclMax : ncclSum, k.comm,
                                   k.n->stream);
    if (r != ncclSuccess) return nccl_fail(r, "ncclAllReduce", grp, err);
    mg_comm_account(c, grp, MG_OP_ALLREDUCE, dt, count, 0.0);
    return leave(k.n, (cudaStream_t)stream, "ncclAllReduce", err);
}

int mg_comm_allgather_dev(mg_comm *c, mg_group grp, mg_dtype dt, const void *in, void *out, int64_t count,
                          void *stream, mg_error *err) {
    call k = {0};
    int rc = begin(c, grp, dt, count, stream, "ncclAllGather", &k, err);
    if (rc) return rc;
    ncclResult_t r = ncclAllGather(in, out, (size_t)count, k.type, k.comm, k.n->stream);
    if (r != ncclSuccess) return nccl_fail(r, "ncclAllGather", grp, err);
    mg_comm_account(c, grp, MG_OP_ALLGATHER, dt, count, 0.0);
    return leave(k.n, (cudaStream_t)stream, "ncclAllGather", err);
}

int mg_comm_reduce_scatter_dev(mg_comm *c, mg_group grp, mg_dtype dt, const void *in, void *out, int64_t count,
                               void *stream, mg_error *err) {
    call k = {0};
    int rc = begin(c, grp, dt, count, stream, "ncclReduceScatter", &k, err);
    if (rc) return rc;
    ncclResult_t r = ncclReduceScatter(in, out, (size_t)count, k.type, ncclSum, k.comm, k.n->stream);
    if (r != ncclSuccess) return nccl_fail(r, "ncclReduceScatter", grp, err);
    mg_comm_account(c, grp, MG_OP_REDUCE_SCATTER, dt, count * mg_comm_group_size(c, grp), 0.0);
    return leave(k.n, (cudaStream_t)stream, "ncclReduceScatter", err);
}

int mg_comm_broadcast_dev(mg_comm *c, mg_group grp, mg_dtype dt, void *buf, int64_t count, int root, void *stream,
                          mg_error *err) {
    if (c && (root < 0 || root >= mg_comm_group_size(c, grp)))
        return mg_error_set(err, MG_ERR_INVALID, "ncclBroadcast over %s: root %d outside 0..%d", mg_group_name(grp),
                            root, mg_comm_group_size(c, grp) - 1);
    call k = {0};
    int rc = begin(c, grp, dt, count, stream, "ncclBroadcast", &k, err);
    if (rc) return rc;
    ncclResult_t r = ncclBroadcast(buf, buf, (size_t)count, k.type, root, k.comm, k.n->stream);
    if (r != ncclSuccess) return nccl_fail(r, "ncclBroadcast", grp, err);
    mg_comm_account(c, grp, MG_OP_BROADCAST, dt, count, 0.0);
    return leave(k.n, (cudaStream_t)stream, "ncclBroadcast", err);
}

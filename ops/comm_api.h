/* Buffer-level collectives behind the collective ops (library-internal).
 *
 * The interface the collective kernels (ops/collective.c) reach the communicator
 * through. It lives with the ops, below the scheduler: scheduler/comm_mpi.c implements
 * it over MPI (an NCCL backend implements the same functions), so ops never include a
 * scheduler header. Every function is a
 * blocking collective over this rank's group `grp`: all members call it with the
 * same counts, in the same order (the graph's seq order guarantees that). Counts are
 * elements of dtype (MG_F32 or MG_I32). Each call adds its bytes (mg_comm_wire_bytes)
 * and its wall time to the communicator's counters. MPI failures come back as
 * MG_ERR_RUNTIME with MPI's message.
 */
#ifndef MG_OPS_COMM_API_H
#define MG_OPS_COMM_API_H

#include <stdbool.h>
#include <stdint.h>

#include "mgraph/comm.h"

/* Size of this rank's group grp, and this rank's index in it (-1 for a bad group). */
int mg_comm_group_size(const mg_comm *c, mg_group grp);
int mg_comm_group_rank(const mg_comm *c, mg_group grp);

/* out[i] = op over the group of in[i]; in == out is allowed (in place). */
int mg_comm_allreduce_buf(mg_comm *c, mg_group grp, mg_dtype dt, const void *in, void *out, int64_t count,
                          mg_reduce_op op, mg_error *err);
/* out = member 0's in, then member 1's, ... (count elements each). */
int mg_comm_allgather_buf(mg_comm *c, mg_group grp, mg_dtype dt, const void *in, void *out, int64_t count,
                          mg_error *err);
/* in holds nranks blocks of count elements; out = sum over members of their block
 * number <this rank's index>. */
int mg_comm_reduce_scatter_buf(mg_comm *c, mg_group grp, mg_dtype dt, const void *in, void *out, int64_t count,
                               mg_error *err);
/* buf = member root's buf. */
int mg_comm_broadcast_buf(mg_comm *c, mg_group grp, mg_dtype dt, void *buf, int64_t count, int root,
                          mg_error *err);

/* Each member sends `count` elements to every member: block j of `in` goes to member j,
 * block i of `out` comes from member i (MPI_Alltoall). Counted bytes: the n-1 blocks
 * that leave the rank. */
int mg_comm_alltoall_buf(mg_comm *c, mg_group grp, mg_dtype dt, const void *in, void *out, int64_t count,
                         mg_error *err);
/* Variable splits (MPI_Alltoallv): send[j] elements from in + sdispl[j] go to member j,
 * recv[i] elements from member i land at out + rdispl[i] (arrays of the group's size;
 * the counts must agree pairwise, which the caller arranges by exchanging them first).
 * Counted bytes: what leaves the rank (the send counts to other members). */
int mg_comm_alltoallv_buf(mg_comm *c, mg_group grp, mg_dtype dt, const void *in, const int64_t *send,
                          const int64_t *sdispl, void *out, const int64_t *recv, const int64_t *rdispl, mg_error *err);
/* Sends `in` to member `dest` and receives `out` from member `src` of the group
 * (count elements each; in != out): the ring step of context parallelism. */
int mg_comm_sendrecv_buf(mg_comm *c, mg_group grp, mg_dtype dt, const void *in, void *out, int64_t count, int dest,
                         int src, mg_error *err);
/* ---- point to point (pipeline stages) ----------------------------------------------
 * Non-blocking: a request is posted, then tested or waited for; it owns nothing of the
 * buffer, which must stay untouched until the request completes. Messages are matched
 * by (group, peer, tag): `key` is any non-negative number unique among the messages in
 * flight between two ranks, reduced to MPI's tag range here. Safe to call from any
 * thread when MPI runs at MPI_THREAD_MULTIPLE (mg_comm_p2p_ready says so). */
typedef struct mg_comm_request mg_comm_request;
int mg_comm_isend_buf(mg_comm *c, mg_group grp, int peer, int64_t key, mg_dtype dt, const void *buf, int64_t count,
                      mg_comm_request **req, mg_error *err);
int mg_comm_irecv_buf(mg_comm *c, mg_group grp, int peer, int64_t key, mg_dtype dt, void *buf, int64_t count,
                      mg_comm_request **req, mg_error *err);
/* *done = true once complete: the request is then freed (and its bytes counted). */
int mg_comm_test(mg_comm *c, mg_comm_request *req, bool *done, mg_error *err);
int mg_comm_wait(mg_comm *c, mg_comm_request *req, mg_error *err);
/* MPI runs at MPI_THREAD_MULTIPLE: transfers may be posted beside blocking collectives. */
bool mg_comm_p2p_ready(const mg_comm *c);

/* Adds a collective's ring bytes (mg_comm_wire_bytes) and seconds to the counters. */
void mg_comm_account(mg_comm *c, mg_group grp, mg_op op, mg_dtype dt, int64_t count, double seconds);

#ifdef MG_CUDA
/* ---- device buffers: NCCL (scheduler/comm_nccl.c) ------------------------------------
 * The same collectives on GPU buffers, run on NCCL's own stream after the work already
 * queued on `stream` (the caller's cudaStream_t), which then waits for them: the call
 * returns once they are queued. One NCCL communicator per mesh group, created on the
 * group's first device collective (its unique id broadcast over the group's MPI
 * communicator), on the calling thread's current device. dtypes: f32, i32. */
int mg_comm_allreduce_dev(mg_comm *c, mg_group grp, mg_dtype dt, const void *in, void *out, int64_t count,
                          mg_reduce_op op, void *stream, mg_error *err);
int mg_comm_allgather_dev(mg_comm *c, mg_group grp, mg_dtype dt, const void *in, void *out, int64_t count,
                          void *stream, mg_error *err);
int mg_comm_reduce_scatter_dev(mg_comm *c, mg_group grp, mg_dtype dt, const void *in, void *out, int64_t count,
                               void *stream, mg_error *err);
int mg_comm_broadcast_dev(mg_comm *c, mg_group grp, mg_dtype dt, void *buf, int64_t count, int root, void *stream,
                          mg_error *err);
/* The NCCL state hanging off a communicator (comm_mpi.c holds the pointer). */
typedef struct mg_nccl mg_nccl;
mg_nccl **mg_comm_nccl_slot(mg_comm *c);
void mg_nccl_free(mg_nccl *n);
#endif

/* Bytes one rank sends for a collective over n ranks whose input is `payload` bytes
 * (ring algorithms; broadcast as a pipelined chain, averaged over the ranks):
 * allreduce 2(n-1)/n * payload, allgather (n-1) * payload (= (n-1)/n of the output),
 * reduce-scatter (n-1)/n * payload, broadcast (n-1)/n * payload. 0 when n == 1. */
static inline double mg_comm_wire_bytes(mg_op op, int n, double payload) {
    if (n <= 1) return 0.0;
    double f = (double)(n - 1) / n;
    switch (op) {
    case MG_OP_ALLREDUCE: return 2.0 * f * payload;
    case MG_OP_ALLGATHER: return (double)(n - 1) * payload;
    case MG_OP_REDUCE_SCATTER: return f * payload;
    case MG_OP_BROADCAST: return f * payload;
    case MG_OP_RECV: return 0.0; /* the sender counts the message */
    default: return payload;
    }
}

#endif

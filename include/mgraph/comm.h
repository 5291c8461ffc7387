/* Ranks, process groups and the communicators behind collective nodes.
 *
 * The mesh follows Megatron's rank order, innermost first: tp, cp, ep, dp, pp.
 * (Expert parallelism reuses ranks of dp x cp; with ep == 1, the default, it is a
 * no-op dimension.) A rank's coordinate in each dimension is its index inside that
 * dimension's group; the group of dimension D is the set of ranks that agree on
 * every coordinate except D's. The combined group dp_cp holds the ranks that agree on tp and pp
 * (index cp + cp * dp): gradients reduce over it in one collective under context
 * parallelism. The expert-data-parallel group edp holds the dp x cp ranks with the same
 * ep coordinate (size dp*cp/ep): expert gradients are summed over it.
 *
 * mg_comm wraps one MPI communicator per group. Collective nodes (ops/collective.c)
 * find their communicator through mg_exec_info.comm; a later NCCL backend implements
 * the same nodes behind the same interface.
 */
#ifndef MGRAPH_COMM_H
#define MGRAPH_COMM_H

#include <stdint.h>

#include "mgraph/error.h"
#include "mgraph/graph.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mg_mesh {
    int world, rank;
    int size[MG_GROUP_COUNT];   /* tp, cp, ep, dp, pp, dp_cp, edp, world, emb */
    int coord[MG_GROUP_COUNT];  /* this rank's index in each group (-1: not a member: the
                                 * embedding group's middle pipeline stages) */
} mg_mesh;

/* Lays out `world` ranks as tp x cp x dp x pp (dp = world / (tp cp pp)) and places
 * `rank`. MG_ERR_INVALID naming the rule when world is not a multiple of tp*cp*pp,
 * or ep does not divide dp*cp. */
int mg_mesh_init(mg_mesh *m, int world, int rank, int tp, int cp, int ep, int pp, mg_error *err);
/* The world rank of the member with index `idx` of this rank's group `grp`. */
int mg_mesh_peer(const mg_mesh *m, mg_group grp, int idx);

typedef struct mg_comm mg_comm;

/* MPI must be initialised (MPI_THREAD_SERIALIZED at least: collectives run on
 * StarPU workers, one at a time). Splits MPI_COMM_WORLD into the mesh's groups.
 * Collective over MPI_COMM_WORLD (every rank calls it, with its own mesh of the same
 * layout); ranks first agree on the layout, so a mismatch is MG_ERR_INVALID on every
 * rank rather than a hang. mg_comm_free is collective too (MPI_Comm_free). */
int mg_comm_new(const mg_mesh *m, mg_comm **out, mg_error *err);
void mg_comm_free(mg_comm *c);
const mg_mesh *mg_comm_mesh(const mg_comm *c);
/* Bytes this rank sent into collectives since the last reset, per group and total:
 * bytes[MG_GROUP_WORLD] is the total over all groups (collectives over the world
 * group count only there). Ring estimates, the same as the ops' cost: allreduce
 * 2(n-1)/n of the input, allgather (n-1)/n of the output, reduce-scatter (n-1)/n of
 * the input, broadcast (n-1)/n of the buffer. */
void mg_comm_bytes(const mg_comm *c, double bytes[MG_GROUP_COUNT]);
void mg_comm_reset_bytes(mg_comm *c);
/* Seconds spent inside collective calls since the last reset (reset with the bytes). */
double mg_comm_seconds(const mg_comm *c);
/* The seconds of the collectives over group grp alone (the groups' seconds sum to
 * mg_comm_seconds; world-group collectives count under MG_GROUP_WORLD only). */
double mg_comm_group_seconds(const mg_comm *c, mg_group grp);

/* Builders for collective nodes (partitioners insert them). nranks is the group
 * size; seq the node's place in the rank's communication order. */
mg_tensor *mg_allreduce(mg_graph *g, mg_tensor *x, mg_group grp, int nranks, mg_reduce_op op, int64_t seq);
mg_tensor *mg_allgather(mg_graph *g, mg_tensor *x, mg_group grp, int nranks, int dim, int64_t seq);
mg_tensor *mg_reduce_scatter(mg_graph *g, mg_tensor *x, mg_group grp, int nranks, int dim, int64_t seq);
mg_tensor *mg_broadcast(mg_graph *g, mg_tensor *x, mg_group grp, int nranks, int root, int64_t seq);
/* Expert parallelism's token exchange (ops/alltoall.c). Counts first: counts [E] i32
 * (rows per expert of this rank's permuted tokens; member j owns experts
 * [j E/n, (j+1) E/n)) -> *splits [n, E/n] (rows each member sends for each local expert)
 * and *local [E/n] (rows per local expert). Then the rows: x [R, h] -> [rows, h], the
 * dispatch to the experts' owners (combine false) or its inverse (combine true). */
int mg_alltoall_counts(mg_graph *g, mg_tensor *counts, mg_group grp, int nranks, int64_t seq, mg_tensor **splits,
                       mg_tensor **local);
mg_tensor *mg_alltoallv(mg_graph *g, mg_tensor *x, mg_tensor *counts, mg_tensor *splits, mg_group grp, int nranks,
                        bool combine, int64_t rows, int64_t seq);
/* Context parallelism's ring step: member i of the group gets member (i - shift) mod
 * nranks's x (one send and one receive per member). Differentiable: the gradient is
 * the shift by -shift. */
mg_tensor *mg_ring_shift(mg_graph *g, mg_tensor *x, mg_group grp, int nranks, int shift, int64_t seq);
/* Point to point between pipeline stages (ops/p2p.c): send x to member `peer` of group
 * grp, returning a one-element token (a graph node needs an output; nothing reads it);
 * recv the tensor member `peer` sends with the same tag. Not in the collectives' seq
 * order: transfers are non-blocking and matched by tag. */
mg_tensor *mg_send(mg_graph *g, mg_tensor *x, mg_group grp, int nranks, int peer, int tag);
mg_tensor *mg_recv(mg_graph *g, mg_dtype dt, int ndim, const int64_t *shape, mg_group grp, int nranks, int peer, int tag,
                   const char *name);

#ifdef __cplusplus
}
#endif
#endif

/* Ranks, process groups and the communicators behind collective nodes.
 *
 * The mesh is data (graph/mesh.c): an order string names its axes innermost first, as
 * Megatron's RankGenerator takes it (default "tp-cp-ep-dp-pp": tp innermost), and two
 * rank generators read it, the dense one (tp, cp, dp, pp) and the expert one (etp, ep,
 * edp, pp). A process group is a generator and the axes it spans: tp, cp, dp, pp, dp_cp
 * (dp x cp, over which gradients reduce under context parallelism) of the dense one;
 * ep, edp (the ranks holding the same experts: expert gradients are summed over it)
 * and etp (expert tensor parallelism) of the expert one; emb (the first and last
 * pipeline stage) and world. A rank's coordinate in a group is its index there, the
 * spanned axes' coordinates read mixed-radix; the group is the set of ranks that agree
 * on every other axis of its generator. With etp = tp (the default) an ep group is ep
 * ranks of one (tp, pp) slice's dp x cp ranks; with ep == 1 it is the rank alone.
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

/* The axes an order string names (Megatron's tokens). */
typedef enum mg_mesh_axis {
    MG_MESH_AXIS_TP, MG_MESH_AXIS_CP, MG_MESH_AXIS_EP, MG_MESH_AXIS_DP, MG_MESH_AXIS_PP, MG_MESH_AXIS_COUNT
} mg_mesh_axis;

/* What a mesh is made of: sizes (dp follows from the world size) and the rank order. */
typedef struct mg_mesh_spec {
    int tp, cp, ep, pp;
    int etp;                    /* expert tensor parallelism; 0: tp (Megatron's default) */
    const char *order;          /* Megatron's --order-style string, innermost first; NULL: "tp-cp-ep-dp-pp" */
} mg_mesh_spec;

typedef struct mg_mesh {
    int world, rank;
    int size[MG_GROUP_COUNT];   /* tp, cp, ep, dp, pp, dp_cp, edp, world, emb, etp */
    int coord[MG_GROUP_COUNT];  /* this rank's index in each group (-1: not a member: the
                                 * embedding group's middle pipeline stages) */
    /* the layout (graph/mesh.c): the order's axes innermost first, and per generator
     * (0 dense, 1 expert) each axis' size, stride in world ranks and this rank's coordinate */
    char order_str[32];
    int order[MG_MESH_AXIS_COUNT];
    int axis_size[2][MG_MESH_AXIS_COUNT], axis_stride[2][MG_MESH_AXIS_COUNT], axis_coord[2][MG_MESH_AXIS_COUNT];
} mg_mesh;

/* Lays out `world` ranks as spec says (dp = world / (tp cp pp), edp = world / (etp ep pp))
 * and places `rank`. MG_ERR_INVALID naming the rule when world is not a multiple of
 * tp*cp*pp or of etp*ep*pp, or the order is malformed or gives the expert layers other
 * pipeline groups than the dense ones (Megatron's checks). */
int mg_mesh_init_spec(mg_mesh *m, int world, int rank, const mg_mesh_spec *spec, mg_error *err);
/* The default order, etp = tp. */
int mg_mesh_init(mg_mesh *m, int world, int rank, int tp, int cp, int ep, int pp, mg_error *err);
/* The world rank of the member with index `idx` of this rank's group `grp` (-1: none). */
int mg_mesh_peer(const mg_mesh *m, mg_group grp, int idx);
/* How many world ranks apart consecutive members of a group of grp are (its innermost
 * axis' stride: what decides whether a group stays inside a node). */
long mg_mesh_stride(const mg_mesh *m, mg_group grp);
/* The axes group grp spans (bits 1 << mg_mesh_axis) and whether of the expert
 * generator (0 for world, which spans both). */
unsigned mg_mesh_group_axes(mg_group grp, bool *expert);
/* "tp-cp-ep-dp-pp" (the default), or the order the mesh was made with. */
const char *mg_mesh_order(const mg_mesh *m);
const char *mg_mesh_default_order(void);

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

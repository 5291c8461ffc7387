/* Ring collectives (sums) over MPI point-to-point messages: comm_ring.c says why. */
#ifndef MG_SCHEDULER_COMM_RING_H
#define MG_SCHEDULER_COMM_RING_H

#include <stdint.h>
#include <mpi.h>

#include "mgraph/graph.h"

/* Every rank of comm passes `count` elements per rank of `in` (p * count) and receives
 * the sum over ranks of its own block in `out` (count elements; not overlapping in).
 * dt is MG_F32 or MG_I32 and `type` its MPI type. Returns an MPI error code. */
int mg_ring_reduce_scatter(MPI_Comm comm, MPI_Datatype type, mg_dtype dt, const void *in, void *out, int64_t count);

/* out = the sum over ranks of in (count elements each); out == in is allowed. Every
 * rank receives the same bits. Returns an MPI error code. */
int mg_ring_allreduce(MPI_Comm comm, MPI_Datatype type, mg_dtype dt, const void *in, void *out, int64_t count);

#endif

/* mgraph-run's own collectives over MPI_COMM_WORLD (agreements on input, exit signals,
 * checkpoint steps), each a watched wait (include/mgraph/watchdog.h): a stopped rank
 * ends the job after --distributed-timeout-minutes instead of hanging it here. */
#ifndef MGRAPH_RUN_MPI_H
#define MGRAPH_RUN_MPI_H

#include <mpi.h>

#include "mgraph/watchdog.h"

/* MPI_Allreduce in place over comm; `why` names it in the watchdog's message. */
static inline int mg_run_allreduce(void *buf, int n, MPI_Datatype type, MPI_Op op, MPI_Comm comm, const char *why) {
    int w = mg_wait_begin(why, NULL, MG_GROUP_WORLD, -1);
    int rc = MPI_Allreduce(MPI_IN_PLACE, buf, n, type, op, comm);
    mg_wait_end(w);
    return rc;
}

#endif

/* The job's processes (include/mgraph/trainer.h, mg_world_*): MPI as mgraph needs it,
 * so that a program training under a plan need not include mpi.h. */
#include <mpi.h>
#include <stdlib.h>

#include "runtime/trainer_internal.h"

static bool g_finalize_registered;

static void finalize_at_exit(void) { mg_world_finalize(); }

int mg_world_local_ranks(void) {
    const char *ls = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    return ls && atoi(ls) > 0 ? atoi(ls) : 1;
}

int mg_world_init(int *argc, char ***argv, mg_error *err) {
    int init = 0, fin = 0;
    MPI_Initialized(&init);
    MPI_Finalized(&fin);
    if (fin) return mg_error_set(err, MG_ERR_INVALID, "MPI is already finalized: the world cannot be set up again");
    if (init) return MG_OK; /* the program's own MPI_Init_thread */
    /* Several ranks sharing a node's cores: a rank waiting in a collective must yield its
     * core to the peer it waits for, not spin on it (Open MPI reads this at init). */
    if (mg_world_local_ranks() > 1) setenv("OMPI_MCA_mpi_yield_when_idle", "1", 0);
    /* Collectives run on StarPU workers one at a time (SERIALIZED); pipeline transfers
     * are posted from workers beside them (scheduler/starpu_p2p.c): MULTIPLE. */
    int provided = 0;
    if (MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS)
        return mg_error_set(err, MG_ERR_RUNTIME, "MPI_Init_thread failed");
    if (!g_finalize_registered) {
        g_finalize_registered = true;
        atexit(finalize_at_exit);
    }
    return MG_OK;
}

static bool mpi_up(void) {
    int init = 0, fin = 0;
    MPI_Initialized(&init);
    MPI_Finalized(&fin);
    return init && !fin;
}

int mg_world_size(void) {
    int n = 1;
    if (mpi_up()) MPI_Comm_size(MPI_COMM_WORLD, &n);
    return n;
}

int mg_world_rank(void) {
    int r = 0;
    if (mpi_up()) MPI_Comm_rank(MPI_COMM_WORLD, &r);
    return r;
}

int mg_world_thread_level(void) {
    int level = MPI_THREAD_SINGLE;
    if (mpi_up()) MPI_Query_thread(&level);
    return level;
}

int mg_world_agree(int rc, mg_error *err) {
    if (mg_world_size() == 1) return rc;
    int mine = rc ? (mg_status_is_usage(rc) ? 2 : 1) : 0, worst = mine;
    mg_rt_allreduce(&worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD, "the ranks' agreement on their input");
    if (worst && !rc) {
        /* another rank has the reason and says it; this one leaves with the same kind
         * of failure and no message (one message per failure, not one per rank) */
        rc = worst == 2 ? MG_ERR_INVALID : MG_ERR_RUNTIME;
        if (err) {
            mg_error_clear(err);
            err->code = rc;
        }
    }
    return rc;
}

void mg_world_abort(int code) {
    if (mg_world_size() > 1) MPI_Abort(MPI_COMM_WORLD, code);
    exit(code);
}

void mg_world_finalize(void) {
    if (!mpi_up()) return;
    int w = mg_wait_begin("MPI_Finalize", NULL, MG_GROUP_WORLD, -1);
    MPI_Finalize();
    mg_wait_end(w);
}

/* The trainer's state, shared by the files of runtime/. */
#ifndef MG_RUNTIME_TRAINER_INTERNAL_H
#define MG_RUNTIME_TRAINER_INTERNAL_H

#include <mpi.h>

#include "mgraph/checkpoint.h"
#include "mgraph/trainer.h"
#include "mgraph/watchdog.h"

/* The trainer's own collectives over MPI_COMM_WORLD (agreements, the exit signal,
 * checkpoint steps), each a watched wait (mgraph/watchdog.h): a stopped rank ends the
 * job after the program's timeout instead of hanging it here. `why` names it. */
static inline int mg_rt_allreduce(void *buf, int n, MPI_Datatype type, MPI_Op op, MPI_Comm comm, const char *why) {
    int w = mg_wait_begin(why, NULL, MG_GROUP_WORLD, -1);
    int rc = MPI_Allreduce(MPI_IN_PLACE, buf, n, type, op, comm);
    mg_wait_end(w);
    return rc;
}

/* One step graph and what runs it on this rank. */
typedef struct mg_trainer_graph {
    mg_train_step step;        /* the logical graph */
    mg_rank_graph rg;          /* what this rank runs, and where each logical tensor is in it */
    mg_memplan *plan;
    mg_storage *st;
    mg_engine *eng;            /* NULL: the reference executor (or not started) */
} mg_trainer_graph;

struct mg_trainer {
    mg_trainer_config cfg;
    int world;                 /* ranks of the plan */
    bool collective;           /* several processes take part: agreements over MPI_COMM_WORLD */
    mg_mesh mesh;
    int split;                 /* sub-batches per micro-batch */
    mg_trainer_graph train, eval;
    mg_comm *comm;
    bool partitioned, started;
    int recomputed;
    bool recompute_done;     /* the logical training graph was rewritten (once, before partitioning) */
    double graphs_s, memplan_s, storage_s, engine_s;
    double t_created;
    /* where the run is: resumed from a checkpoint, then advanced by the steps */
    mg_ckpt *ck;               /* open until the state is loaded into storage */
    bool load_optim;           /* the checkpoint's Adam moments are loaded too */
    int64_t iteration;         /* iterations done */
    uint64_t consumed;         /* training samples consumed */
    int64_t eval_done, test_done; /* validation / test batches drawn */
    uint64_t seed;             /* the counter RNG's seed (dropout): the checkpoint's or cfg.seed */
    int64_t optim_start;       /* mg_exec_info.optim_start */
    int64_t skipped;           /* mg_exec_info.skipped: fp16's skipped iterations (the checkpoint's included) */
    mg_loss_scaler scaler;     /* fp16: cfg.loss_scaler as it evolves */
    mg_fp8_state fp8;          /* fp8: the recipe's scales and amax histories (n_slots 0 without fp8) */
    /* an async save under way (runtime/checkpoint.c) */
    struct mg_async_save *async;
    const char *loaded_from;   /* ckpt.load, or ckpt.non_persistent_dir when that was newer */
    char load_warning[4400];
    mg_trainer_hooks hooks[MG_TRAINER_MAX_HOOKS];
    int n_hooks;
};

double mg_trainer_now(void);
int mg_trainer_dp(const mg_mesh *m);
/* Instances of the per-micro-batch part of a step of gbs samples on this rank. */
int mg_trainer_instances(const mg_trainer *t, int64_t gbs);
/* Runs graph G for a step of gbs samples (feeding done). */
int mg_trainer_execute(mg_trainer *t, mg_trainer_graph *G, int64_t iteration, bool training, int64_t gbs,
                       mg_error *err);

/* runtime/feed.c: writes a step's inputs: loss_scale, token_scale (*count: the batch's
 * tokens, when asked or needed) and every instance through the data source. */
int mg_trainer_feed(mg_trainer *t, mg_trainer_graph *G, int split, uint64_t first, int64_t gbs, int64_t iteration,
                    uint64_t *count, mg_error *err);
/* The inputs that are not per micro-batch (instance -1), once per storage. */
int mg_trainer_feed_constants(mg_trainer *t, mg_trainer_graph *G, mg_error *err);

/* runtime/checkpoint.c */
int mg_trainer_load_open(mg_trainer *t, mg_error *err);  /* before the graphs: may set the schedule */
int mg_trainer_load_fill(mg_trainer *t, mg_error *err);  /* into the training storage */
/* An async save still under way when the trainer is freed without finalizing (an error
 * ended the run): its thread is joined and the save left unfinished, as a crash leaves
 * it (the previous checkpoint and tracker stand; the next save removes the partial one). */
void mg_trainer_save_abandon(mg_trainer *t);
/* A save into ckpt.non_persistent_dir (only its newest kept; async with ckpt.async_save). */
int mg_trainer_save_non_persistent(mg_trainer *t, mg_error *err);
void mg_trainer_load_close(mg_trainer *t);

#endif

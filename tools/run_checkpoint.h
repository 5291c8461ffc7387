/* mgraph-run's checkpoints: --save / --load on top of include/mgraph/checkpoint.h.
 *
 * The one place that knows how a rank's physical graph maps onto logical pieces
 * (parameters and Adam moments by their logical names; the distributed optimizer's
 * flat moment segments of a tensor-parallel block), and what the run state is
 * (iteration, consumed samples, validation position, LR schedule, seed, model and plan
 * flags). With several ranks, saves and loads are collective over MPI_COMM_WORLD.
 */
#ifndef MG_TOOLS_RUN_CHECKPOINT_H
#define MG_TOOLS_RUN_CHECKPOINT_H

#include "mgraph/checkpoint.h"
#include "mgraph/comm.h"
#include "mgraph/engine.h"
#include "mgraph/model.h"
#include "mgraph/plan.h"
#include "run_config.h"

/* What a run resumes from (zeros and the run's own seed when nothing is loaded). */
typedef struct mg_run_resume {
    mg_ckpt *ck;                 /* the checkpoint being loaded (NULL: none) */
    int64_t iteration;           /* iterations already done */
    int64_t consumed_samples;    /* training samples already consumed */
    int64_t eval_batches_done;   /* validation batches already drawn */
    uint64_t seed;               /* the counter RNG's seed (dropout) */
    bool load_optim;             /* fill the Adam moments too */
    int64_t optim_start;         /* mg_exec_info.optim_start: the checkpoint's with the moments,
                                    else the updates before the iteration resumed at (the moments
                                    start from zero) */
    int64_t skipped;             /* iterations skipped so far (fp16's overflows: mg_exec_info.skipped) */
    bool has_scaler;             /* the checkpoint's dynamic loss scaler state, loaded with the optimizer */
    float scale;
    int growth_tracker, hysteresis_tracker;
} mg_run_resume;

/* --load: opens the checkpoint, checks the model flags it was made with against this
 * run's (MG_ERR_INVALID naming the flag), and fills *out. When it resumes the optimizer,
 * the learning-rate (and weight-decay) schedule *lr is Megatron's OptimizerParamScheduler
 * on load: checked against the checkpoint's (MG_ERR_INVALID naming the flag), replaced by
 * it with --use-checkpoint-opt-param-scheduler, kept with --override-opt-param-scheduler.
 * Without --load, *out is the fresh start. */
int mg_run_resume_open(const mg_run_config *cfg, const mg_gpt_config *model, int64_t vocab_unpadded,
                       mg_lr_schedule *lr, mg_run_resume *out, mg_error *err);
/* Fills graph g's parameters (and moments when load_optim) in st from the checkpoint. */
int mg_run_resume_fill(mg_run_resume *r, mg_graph *g, mg_storage *st, mg_error *err);
void mg_run_resume_close(mg_run_resume *r);

typedef struct mg_run_save_state {
    int64_t iteration, consumed_samples, eval_batches_done;
    uint64_t seed;
    int64_t vocab_unpadded;
    int64_t optim_start; /* where the saved moments started from zero (mg_exec_info.optim_start) */
    int64_t skipped;     /* iterations skipped so far (mg_exec_info.skipped) */
    const mg_loss_scaler *scaler; /* --fp16's loss scaler, else NULL */
} mg_run_save_state;

/* The model's flags as every save's metadata holds them and --load checks them:
 * {"model": {...}, "data": {...}, "dropout": {...}} (mgraph-convert --from-megatron writes
 * the same for the model it converts). */
typedef struct mg_run_ckpt_model {
    const mg_run_config *cfg;
    const mg_gpt_config *model;
    int64_t vocab_unpadded;
} mg_run_ckpt_model;
char *mg_run_ckpt_meta(void *user);

/* --save: every rank writes the pieces it holds (each piece by one rank only), rank 0
 * the index and the tracker. Collective when mpi_world > 1. */
int mg_run_save(const mg_run_config *cfg, const mg_step_config *sc, const mg_plan *plan, const mg_mesh *mesh,
                int mpi_world, mg_graph *g, mg_storage *st, const mg_run_save_state *s, mg_error *err);

#endif

/* Training any model under any plan: the trainer.
 *
 * A model is a forward function (mgraph/step.h). The trainer does everything between it
 * and a trained model, on every rank of an mpirun job alike:
 *   world (MPI, initialised here unless the program did) -> plan checks -> mesh ->
 *   step graphs (training, evaluation) -> partition for this rank (the logical graph
 *   itself on one rank) -> memory plan -> storage (pipeline slots) -> engine;
 *   each step: the feed callback fills this rank's micro-batch instances (which
 *   samples each holds is the library's: Megatron's data-parallel sampler order), the
 *   engine runs the step, and the loss, gradient norm and metrics are read back by
 *   their logical tensors; evaluation, checkpoints (save, load and reshard through the
 *   library's checkpoint format) and per-iteration hooks.
 *
 *   mg_trainer_config c = mg_trainer_defaults();
 *   c.model = (mg_model){.name = "mlp", .forward = my_forward, .user = &cfg};
 *   c.micro_batch = 4;  c.global_batch = 16;  c.optim.lr.lr = 1e-3f;
 *   c.data = (mg_data_source){.feed = my_feed, .user = &data};
 *   c.plan.tp = 2;                        (or mg_plan_read(&c.plan, "my.plan", &err))
 *   mg_trainer *t;
 *   if (mg_trainer_new(&c, &t, &err)) ...  (under mpirun, every rank)
 *   for (int i = 0; i < 100; i++) mg_trainer_step(t, &r, &err);
 *   mg_trainer_free(t);
 *
 * Errors: every call returns an mg_status with the message in err. Input errors
 * (MG_ERR_INVALID: a bad plan, a model that does not fit it) are found by every rank
 * alike before the first collective, so every rank returns them; a failure while
 * running may hit one rank only while the others wait in a collective: end the job
 * (mg_world_abort) rather than return from main.
 */
#ifndef MGRAPH_TRAINER_H
#define MGRAPH_TRAINER_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "mgraph/comm.h"
#include "mgraph/dataset.h"
#include "mgraph/engine.h"
#include "mgraph/plan.h"
#include "mgraph/recompute.h"
#include "mgraph/step.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- the world: the job's processes --------------------------------------------------- */
/* Initialises MPI for mgraph (MPI_THREAD_MULTIPLE: pipeline transfers are posted beside
 * collectives; ranks sharing a node yield their core while waiting) unless the program
 * already did; argc/argv may be NULL. The trainer calls it when needed; MPI is
 * finalised at exit (or by mg_world_finalize). */
int mg_world_init(int *argc, char ***argv, mg_error *err);
int mg_world_size(void);
int mg_world_rank(void);
/* The thread level MPI provides (MPI_THREAD_*). */
int mg_world_thread_level(void);
/* Ranks of this job on this node (Open MPI's local size; 1 without mpirun). */
int mg_world_local_ranks(void);
/* Every rank learns whether any failed: returns rc, or MG_ERR_INVALID / MG_ERR_RUNTIME
 * when another rank's rc was a usage / run-time failure (err then holds that code and an
 * empty message: the failing rank says why). Collective. */
int mg_world_agree(int rc, mg_error *err);
/* Ends every rank of the job with `code` (one rank alone otherwise). */
void mg_world_abort(int code);
void mg_world_finalize(void);

/* ---- the model ------------------------------------------------------------------------- */
typedef struct mg_model {
    const char *name;          /* "gpt", "bert": titles */
    mg_forward_fn forward;     /* one micro-batch's forward and loss (mgraph/step.h) */
    void *user;                /* given to forward */
    /* Layers the forward marks with mg_graph_set_layer (0..num_layers-1; the embedding
     * MG_LAYER_PRE, the head and loss MG_LAYER_POST): pipeline stages place them, full
     * recompute rewrites them. 0: none marked (no pipeline, no recompute). */
    int num_layers;
    const char *layer_scope;   /* printf format of layer i's name scope ("h.%d"): full recompute */
    /* The forward's loss or routing is per micro-batch as built (MoE's load-balancing
     * loss, expert capacity): never cut a micro-batch into sub-batches. */
    bool whole_micro_batches;
    /* Model FLOPs (forward + backward) of `samples` samples, for throughput; NULL: 0. */
    double (*flops)(void *user, int64_t samples);
} mg_model;

/* ---- data ------------------------------------------------------------------------------ */
/* One micro-batch instance to fill. Instance i of a rank is global micro-batch
 * i * dp + (its data-parallel index), as Megatron's sampler deals micro-batches out; a
 * micro-batch split into sub-batches (mg_plan.micro_batch_split) is several instances. */
typedef struct mg_feed {
    int split;                 /* MG_SPLIT_TRAIN, MG_SPLIT_VALID, MG_SPLIT_TEST (mgraph/dataset.h) */
    int64_t iteration;         /* 0-based training iteration (evaluation: the one it follows) */
    uint64_t first_sample;     /* the split's sample index of this instance's first sample */
    int n_samples;             /* samples it holds (mg_microbatch.batch) */
    int micro_batch;           /* its global micro-batch in the global batch (0..) */
    int sub_batch;             /* which sub-batch of that micro-batch */
    int instance;              /* this rank's copy (0..); -1: the inputs that are not per micro-batch,
                                * filled once when storage is made */
    const void *impl_;         /* (the trainer's) */
} mg_feed;

/* The host buffer of input `name` for this instance (whole, laid out as the input's
 * logical shape), or NULL when this rank's graph does not read it (a pipeline stage
 * without it) or the input is of the other kind (per micro-batch or not). *local (may
 * be NULL) gets the rank's tensor: an input that is not per micro-batch may be a block
 * of its logical tensor (positions under context parallelism: logical.offset). */
void *mg_feed_data(const mg_feed *f, const char *name, const mg_tensor **local);

typedef struct mg_data_source {
    void *user;
    /* Writes this instance's inputs (mg_feed_data). Called for each instance of a step a
     * rank holds inputs for, and once per graph with instance -1. */
    int (*feed)(void *user, const mg_feed *f, mg_error *err);
    /* Samples of a split (0: none, not evaluated). NULL: training only. */
    uint64_t (*num_samples)(void *user, int split);
    /* With loss_token_mean / per_token_loss: the items the loss averages over (kept
     * labels) in samples [first, first + n) of a split; every rank counts the whole
     * global batch. */
    int (*count_tokens)(void *user, int split, uint64_t first, int64_t n, uint64_t *count, mg_error *err);
} mg_data_source;

/* ---- checkpoints -------------------------------------------------------------------------- */
typedef struct mg_trainer_checkpoint {
    const char *load;          /* resume from (a checkpoint root or iteration directory); NULL: none */
    const char *save;          /* save into; NULL: never */
    int64_t save_interval;     /* mg_trainer_train: every N iterations (and at the end); 0: at the end */
    int retain;                /* keep the newest N iteration directories (0: all) */
    bool no_save_optim, no_save_rng;  /* the model without Adam moments / without the seed */
    bool no_load_optim, no_load_rng, finetune; /* Megatron's: --finetune loads the model only, at iteration 0 */
    bool exit_on_missing;      /* load finding no checkpoint is an error (else a warning and a fresh start) */
    /* the learning-rate schedule on load: checked against the checkpoint's (Megatron's
     * OptimizerParamScheduler.load_state_dict), unless override (this run's) or
     * use_saved (the checkpoint's) */
    bool override_schedule, use_saved_schedule;
    /* Megatron's --async-save: a save snapshots this rank's state into host memory and
     * writes it on a thread while the next iterations run; the save is put in place
     * (index, rename, tracker) by mg_trainer_save_finalize, which the next save and the
     * end of mg_trainer_train call. Until then the previous checkpoint and tracker are
     * untouched: a crash during the writing loses nothing saved before. */
    bool async_save;
    /* Megatron's --non-persistent-save-interval N with --non-persistent-ckpt-type local:
     * every N iterations a save into non_persistent_dir (only its newest kept), and on
     * load the newer of it and `load`. */
    const char *non_persistent_dir;
    int64_t non_persistent_interval;
    /* The caller's metadata: a JSON object merged into the index's ("model": what the
     * model's flags are, ...), and its check on load (MG_ERR_INVALID naming what differs).
     * NULL: {"model": {"arch": model.name}} and no check. */
    char *(*meta)(void *user);          /* malloc'ed JSON text */
    int (*check)(void *user, const char *meta_json, const char *dir, mg_error *err);
    void *user;
} mg_trainer_checkpoint;

/* A model's parameters from a checkpoint mg_trainer_save wrote under any plan, into one
 * process's graph g (whole logical tensors, not partitioned) and its storage st: for
 * inference and conversion tools. ck->load names the checkpoint (a root with its tracker,
 * or an iteration directory; nothing there is MG_ERR_IO); ck->check, when set, checks the
 * saved metadata against the model g is (MG_ERR_INVALID naming what differs). Adam
 * moments are not read; every parameter of g must be in the checkpoint. *iteration (may
 * be NULL): the checkpoint's. No MPI. */
int mg_trainer_load_params(const mg_trainer_checkpoint *ck, mg_graph *g, mg_storage *st, int64_t *iteration,
                           mg_error *err);

/* ---- the trainer's configuration ------------------------------------------------------- */
typedef struct mg_trainer_config {
    mg_model model;
    mg_data_source data;
    mg_plan plan;              /* mg_plan_defaults(); dp = world / (tp x cp x pp) */
    int micro_batch;           /* samples per micro-batch */
    int global_batch;          /* samples per step over all data-parallel ranks (0: micro_batch x dp) */
    bool loss_token_mean, per_token_loss; /* mgraph/step.h */
    mg_adamw_config optim;     /* mg_adamw_defaults(); lr.steps_per_iter: global batches count samples */
    mg_precision_options precision; /* mixed precision (mgraph/precision.h); zeroed: fp32 */
    /* fp16 (precision.params MG_F16): the loss scaler; zeroed: a constant scale of 1
     * (overflowed steps are still skipped). Checkpoints keep the count of skipped
     * iterations and, with the optimizer state, a dynamic scaler's state (Megatron's
     * grad_scaler); a load of the optimizer state continues both. */
    mg_loss_scaler loss_scaler;
    /* fp8 for the linear layers' products (mgraph/fp8.h; zeroed: none). The recipe's
     * state (scales, amax histories) lives in the trainer, the same on every rank: each
     * step's amaxes are MAX-reduced over the world before the scales move. Not in the
     * trainer's checkpoints yet: a resumed run starts from scale 1. */
    mg_fp8_options fp8;
    uint64_t seed;             /* weights and dropout */
    /* world */
    bool serial;               /* this process alone, whatever mpirun launched (a reference run) */
    int world_size;            /* dry_run: partition for this many ranks in one process (0: the job's) */
    bool dry_run;              /* build and check only: no storage, no engine (mg_trainer_partition_rank) */
    /* execution */
    bool reference;            /* the reference executor (one thread) instead of StarPU */
    const char *sched_policy;  /* NULL: StarPU's default as mgraph measured it */
    int cpu_workers;           /* StarPU CPU workers per rank (0: the node's cores shared by its ranks) */
    bool overlap_grad_reduce;  /* collectives on a communication thread */
    mg_recompute_options recompute; /* full recompute of the model's layers (granularity FULL) */
    bool no_buffer_reuse;      /* every tensor keeps its own buffer (tests reading intermediate values) */
    /* evaluation: a second graph (no dropout, no backward) on the training weights */
    bool eval;
    int64_t eval_iters;        /* global batches per evaluation */
    int64_t eval_interval;     /* mg_trainer_train: every N iterations (0: never; the end still does) */
    /* the loop (mg_trainer_train) */
    int64_t train_iters;
    bool check_nan;            /* a NaN or Inf loss or gradient norm ends training (Megatron's check) */
    const char *nan_advice;    /* appended to that message (NULL: nothing) */
    int64_t exit_interval;     /* stop (saving first) after an iteration that is a multiple of it */
    double exit_duration_mins; /* ... after the first iteration ending past this many minutes */
    int exit_signal;           /* ... after the iteration during which any rank got this signal (0: none) */
    mg_trainer_checkpoint ckpt;
} mg_trainer_config;

/* Megatron's defaults where it has them: AdamW's, clip 1, seed 1234, one micro-batch
 * per step, the default plan, NaN checked. The model and data are the caller's. */
mg_trainer_config mg_trainer_defaults(void);

typedef struct mg_trainer mg_trainer;

/* Checks the configuration and the plan against the world, lays out the mesh, agrees
 * on the micro-batch split, opens the checkpoint to load (its schedule may replace
 * cfg.optim.lr), builds the step graphs and checks the plan against them
 * (mg_plan_check_graph). Collective (not with serial): every rank returns the same
 * input error. The configuration is copied; model, data and checkpoint user pointers
 * are borrowed. */
int mg_trainer_new(const mg_trainer_config *cfg, mg_trainer **out, mg_error *err);
/* Partitions the step graphs for this rank (and applies recompute). Called by
 * mg_trainer_start when not called before. */
int mg_trainer_partition(mg_trainer *t, mg_error *err);
/* Communicators, memory plans, storage (the checkpoint's state loaded into it), the
 * inputs that are not per micro-batch (feed with instance -1), engines. Collective.
 * Called by the first step when not called before. */
int mg_trainer_start(mg_trainer *t, mg_error *err);
void mg_trainer_free(mg_trainer *t);

/* What one training iteration did. */
typedef struct mg_step_result {
    int64_t iteration;         /* iterations done (1-based: this one) */
    int64_t global_batch;      /* samples it trained on */
    int64_t consumed_samples;  /* training samples consumed after it */
    double loss, grad_norm, lr;/* the step's mean loss, the gradient norm before clipping, its rate */
    double params_norm;        /* optim.params_norm: after the step; else NaN */
    double num_zeros;          /* optim.num_zeros: zero gradient elements the optimizer saw; else NaN */
    int n_metrics;             /* the model's metrics (step means), as mg_train_step.metrics */
    double metrics[MG_STEP_MAX_METRICS];
    const char *metric_names[MG_STEP_MAX_METRICS];
    double ms;                 /* wall time: feeding, the step, reading back */
    double flops;              /* the model's FLOPs of this step on this rank (model.flops / ranks) */
    bool finite;               /* loss and gradient norm are finite */
    bool skipped;              /* fp16: the gradients overflowed and the update was skipped */
    double loss_scale;         /* fp16: the loss scale after the step; else 1 */
} mg_step_result;

/* One training iteration: feed, run, read back. */
int mg_trainer_step(mg_trainer *t, mg_step_result *r, mg_error *err);
/* eval_iters global batches of a split, continuing where the last evaluation of that
 * split stopped; *loss the mean (weighted by each batch's tokens with loss_token_mean). */
int mg_trainer_evaluate(mg_trainer *t, int split, double *loss, mg_error *err);
/* Saves the state (parameters, Adam moments, the run's position) into ckpt.save, as of
 * the iterations done. Collective. */
int mg_trainer_save(mg_trainer *t, mg_error *err);
/* With ckpt.async_save: waits for the save under way (if any) and puts it in place, then
 * calls the hooks' saved. Collective; MG_OK when none is under way. */
int mg_trainer_save_finalize(mg_trainer *t, mg_error *err);

/* ---- hooks and the training loop ------------------------------------------------------- */
typedef struct mg_eval_result {
    int split;
    int64_t iteration;
    double loss;
    bool after_training;       /* the end of the run's evaluation (validation, then test) */
} mg_eval_result;

/* Called on every rank; any may be NULL. A hook's error ends the loop with it. */
typedef struct mg_trainer_hooks {
    void *user;
    int (*before_step)(void *user, mg_trainer *t, int64_t iteration, mg_error *err); /* 0-based, about to run */
    int (*after_step)(void *user, mg_trainer *t, const mg_step_result *r, mg_error *err);
    int (*evaluated)(void *user, mg_trainer *t, const mg_eval_result *e, mg_error *err);
    int (*saved)(void *user, mg_trainer *t, int64_t iteration, double ms, mg_error *err);
    int (*exiting)(void *user, mg_trainer *t, const char *why, mg_error *err); /* early exit: "at iteration 3" */
} mg_trainer_hooks;
#define MG_TRAINER_MAX_HOOKS 8
int mg_trainer_add_hooks(mg_trainer *t, const mg_trainer_hooks *h, mg_error *err);

/* Megatron's train(): from the iteration loaded to train_iters: each step between the
 * hooks, the NaN check, evaluation every eval_interval, saves, the early exits
 * (checkpoint_and_decide_exit), then the validation and test sets. */
int mg_trainer_train(mg_trainer *t, mg_error *err);
/* The validation and test sets, as after training (mgraph-run --skip-train). */
int mg_trainer_evaluate_at_end(mg_trainer *t, mg_error *err);

/* ---- what the trainer holds ----------------------------------------------------------- */
const mg_trainer_config *mg_trainer_config_of(const mg_trainer *t);
/* The logical step graphs (evaluation: NULL without cfg.eval). */
const mg_train_step *mg_trainer_train_step(const mg_trainer *t);
const mg_train_step *mg_trainer_eval_step(const mg_trainer *t);
/* This rank's value of logical tensor lt of either step graph (its block; *local, if
 * given, the rank's tensor with the block's place), NULL when the rank has none.
 * Between steps. */
void *mg_trainer_data(const mg_trainer *t, const mg_tensor *lt, const mg_tensor **local);
const mg_mesh *mg_trainer_mesh(const mg_trainer *t);
int mg_trainer_world(const mg_trainer *t);           /* ranks of the plan */
const mg_plan *mg_trainer_plan(const mg_trainer *t);
const mg_rank_graph *mg_trainer_rank_graph(const mg_trainer *t, bool eval);
mg_storage *mg_trainer_storage(const mg_trainer *t, bool eval);
mg_engine *mg_trainer_engine(const mg_trainer *t);  /* training's (NULL: reference executor) */
mg_comm *mg_trainer_comm(const mg_trainer *t);      /* NULL on one rank */
/* fp8's recipe state (scales, amax histories), the same on every rank and saved with checkpoints
 * (restored by --load: docs/precision.md); NULL without fp8. */
const mg_fp8_state *mg_trainer_fp8(const mg_trainer *t);
int mg_trainer_split(const mg_trainer *t);           /* sub-batches per micro-batch */
/* Micro-batches a rank with mesh m runs per step of gbs samples (global batch / (micro-batch x dp)). */
int mg_trainer_local_micro(const mg_trainer *t, const mg_mesh *m, int64_t gbs);
int64_t mg_trainer_iteration(const mg_trainer *t);   /* iterations done */
int64_t mg_trainer_skipped(const mg_trainer *t);     /* of them, skipped by fp16's loss scaler (a checkpoint's too) */
uint64_t mg_trainer_consumed(const mg_trainer *t);   /* training samples consumed */
/* The training graph's forward nodes full recompute cloned on this rank (0: none). */
int mg_trainer_recomputed(const mg_trainer *t);
/* Start-up seconds: partition (and graphs), memory plans, storage + weights, engines. */
void mg_trainer_timings(const mg_trainer *t, double *graphs_s, double *memplan_s, double *storage_s, double *engine_s);
/* A pipeline stage's activation slots and the micro-batches its schedule keeps in
 * flight (need) at mesh m. */
int mg_trainer_pipeline_slots(const mg_trainer *t, const mg_mesh *m, int *slots, int *need, mg_error *err);
/* dry_run: the training graph partitioned for `rank` of the planned world (recompute
 * applied; *cloned its count); release with mg_rank_graph_release. */
int mg_trainer_partition_rank(mg_trainer *t, int rank, mg_mesh *mesh, mg_rank_graph *out, int *cloned, mg_error *err);
/* Validation batches drawn so far (a checkpoint's count, then the evaluations'). */
int64_t mg_trainer_eval_batches_done(const mg_trainer *t);
/* Evaluation starts again from the first batches of each split (the same batches for
 * every model compared, whatever a loaded checkpoint had drawn). */
void mg_trainer_rewind_evaluation(mg_trainer *t);
/* Why cfg.ckpt.load loaded nothing (no checkpoint there: training starts from random),
 * or NULL. */
const char *mg_trainer_load_warning(const mg_trainer *t);
/* The checkpoint root loaded: ckpt.load, or ckpt.non_persistent_dir when it was newer. */
const char *mg_trainer_loaded_from(const mg_trainer *t);

#ifdef __cplusplus
}
#endif
#endif

/* Megatron's log lines (training.py: training_log, evaluate_and_print_results). */
#ifndef MG_TOOLS_RUN_LOG_H
#define MG_TOOLS_RUN_LOG_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "mgraph/engine.h"
#include "mgraph/tensorboard.h"

typedef struct mg_run_log_line {
    int64_t iteration, train_iters, consumed_samples;
    double ms_per_iteration;
    bool with_throughput;  /* --log-throughput */
    double tflops_per_rank;
    double learning_rate;  /* the scheduler's rate after this iteration's step, as Megatron logs it */
    int global_batch_size;
    double lm_loss;        /* averaged over the iterations since the last line */
    double grad_norm;
    double params_norm;    /* --log-params-norm; NaN: not logged */
    int nan_iterations;    /* since the last line (--no-check-for-nan-in-loss-and-grad) */
    const char *extra;     /* NULL or " name: value |" pieces after the lm loss (MoE's auxiliary losses) */
    int world_size;        /* > 0: --log-world-size-to-tensorboard */
    double loss_scale;     /* --fp16's loss scale after this iteration (0 is read as 1: no scaler) */
    int skipped_iterations; /* since the last line (--fp16's overflows) */
    bool skipped;          /* this iteration was skipped: Megatron prints no grad norm */
    bool no_update;        /* every iteration since the last line was skipped: Megatron prints no lm loss */
    double num_zeros;      /* --log-num-zeros-in-grad: this iteration's zero gradient elements; NaN: not logged */
} mg_run_log_line;

/* " [YYYY-MM-DD HH:MM:SS.ffffff] iteration ... |" (local time, as datetime.now()). */
void mg_run_log_iteration(FILE *f, const mg_run_log_line *l);
/* Megatron's report_memory after the first iterations: "[Rank R] (after N iterations)
 * memory (MB) | allocated: ... | max allocated: ... | reserved: ... | max reserved: ...",
 * MB being 2^20 bytes, of this process's storages (mg_memory_stats). */
void mg_run_log_memory(FILE *f, int rank, int64_t iteration, const mg_memory_stats *m);
/* --log-memory-to-tensorboard (with the iteration's scalars): mem-reserved-bytes,
 * mem-allocated-bytes, mem-max-allocated-bytes, mem-allocated-count. */
int mg_run_tb_memory(mg_tb_writer *w, int64_t iteration, const mg_memory_stats *m, mg_error *err);
/* The perplexity Megatron reports: exp(min(20, loss)). */
double mg_run_ppl(double loss);
/* " validation loss at PREFIX | lm loss value: ... | lm loss PPL: ... | " between two
 * rules of its length + 1. prefix: "iteration N", "iteration N on validation set",
 * "iteration N on test set". */
void mg_run_log_evaluation(FILE *f, const char *prefix, double loss);

/* What training_log writes to TensorBoard for an iteration (every
 * --tensorboard-log-interval): learning rate, batch size, this iteration's lm loss,
 * loss scale and grad norm, each also against consumed samples ("... vs samples"). */
int mg_run_tb_iteration(mg_tb_writer *w, const mg_run_log_line *l, double iteration_loss, mg_error *err);
/* Every iteration, as Megatron's track_moe_metrics: each MoE auxiliary loss (its name, e.g.
 * load_balancing_loss, z_loss) at this iteration, the mean over MoE layers. */
int mg_run_tb_moe(mg_tb_writer *w, int64_t iteration, int n, const char *const *names, const double *values,
                  mg_error *err);
/* At a log line (not the first iteration's), with --log-timers-to-tensorboard:
 * "iteration-time" in seconds, and "throughput" when --log-throughput. */
int mg_run_tb_timers(mg_tb_writer *w, const mg_run_log_line *l, mg_error *err);
/* evaluate_and_print_results: "lm loss validation" (and "... vs samples"; "ppl" ones
 * with --log-validation-ppl-to-tensorboard). Megatron writes the test set's loss
 * under the same tags. */
int mg_run_tb_evaluation(mg_tb_writer *w, int64_t iteration, int64_t consumed, double loss, bool ppl, mg_error *err);

#endif

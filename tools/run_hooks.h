/* mgraph-run's per-iteration hooks on the trainer (mgraph/trainer.h): Megatron's log
 * lines, the metrics file, TensorBoard, the trace, the save and exit lines, and the
 * test hook that poisons a weight. */
#ifndef MG_TOOLS_RUN_HOOKS_H
#define MG_TOOLS_RUN_HOOKS_H

#include "mgraph/model.h"
#include "mgraph/outfile.h"
#include "mgraph/tensorboard.h"
#include "mgraph/tokenizer.h"
#include "mgraph/trainer.h"
#include "run_config.h"
#include "run_trace.h"

typedef struct mg_run_hooks {
    const mg_run_config *cfg;
    bool logger;                /* Megatron prints from the last rank */
    int rank;
    mg_outfile *metrics;        /* the logger's --metrics-file */
    bool metrics_failed;        /* writing it failed: nothing of it is kept */
    int64_t metrics_records;
    mg_tb_writer *tb;           /* --tensorboard-dir, on the logging rank */
    mg_run_trace trace;         /* --trace-file */
    int64_t nan_at;             /* test hook: poison a weight before this iteration (1-based), 0: never */
    int64_t start;              /* the iteration training resumes after */
    /* the log line's averages since the last line */
    double interval_ms, interval_loss, metric_sum[MG_STEP_MAX_METRICS];
    int interval_n, interval_nan, interval_skipped, interval_out; /* (out: not in the averages) */
    bool memory_reported;       /* Megatron's report_memory_flag, cleared */
    /* --sample-interval: the tokenizer, the model and the prompt's tokens (mg_run_hooks_sampling) */
    mg_tokenizer *tok;
    const mg_gpt_config *model;
    int32_t *gen_prompt;
    size_t gen_n;
    bool gen_tp;                /* tensor parallelism: the tp group decodes together */
    mg_plan gen_plan;           /* (its tp alone) */
} mg_run_hooks;

/* The metrics file and the TensorBoard writer of the logging rank (usage errors:
 * MG_ERR_INVALID / MG_ERR_IO before the run starts). */
int mg_run_hooks_open(mg_run_hooks *h, const mg_run_config *cfg, int rank, int world, mg_error *err);
/* Starts the trace (the iteration training resumes after: start) and reads the test
 * hook; then the hooks go on the trainer. */
int mg_run_hooks_attach(mg_run_hooks *h, mg_trainer *t, mg_error *err);
/* --sample-interval (after open, before training; input errors, every rank alike): the
 * prompt's tokens (the end-of-document token without --sample-prompt, as llm.c), and a
 * plan whose rank 0 holds the whole model (the decoder reads one rank's unsharded
 * weights) or one of tensor parallelism alone (the ranks decode together on their
 * blocks). tok and model must outlive the hooks. */
int mg_run_hooks_sampling(mg_run_hooks *h, mg_tokenizer *tok, const mg_gpt_config *model, const mg_plan *plan,
                          mg_error *err);
/* Ends the run's files: the metrics file is put in place when the run succeeded, or
 * failed after it started (its records are whole), else discarded; the TensorBoard
 * file only on success. */
int mg_run_hooks_close(mg_run_hooks *h, bool ok, bool started, mg_error *err);
/* --distributed-timeout-minutes expired: say so, keep the metrics' whole records and
 * remove unfinished outputs (mg_tool_fatal_cleanup), exit 1. */
void mg_run_on_wait_expired(const char *msg, void *ctx);
/* The fatal paths' keep function (mg_tool_install_fatal_handlers): puts the metrics'
 * whole records in place. Async-signal-safe. */
void mg_run_keep_metrics(void);

#endif

/* mgraph-run: trains a GPT model with mgraph, Megatron-style flags and log line.
 *
 * Exit status: 0 success, 2 bad usage or input (one message on stderr), 1 failure
 * while running.
 */
#include <fnmatch.h>
#include <limits.h>
#include <math.h>
#include <mpi.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "mgraph/dataset.h"
#include "mgraph/dot.h"
#include "mgraph/engine.h"
#include "mgraph/model.h"
#include "mgraph/outfile.h"
#include "mgraph/plan.h"
#include "mgraph/tokenizer.h"
#include "mgraph/train.h"
#include "blas_env.h"
#include "run_checkpoint.h"
#include "run_config.h"
#include "run_plan.h"
#include "run_log.h"
#include "run_mpi.h"
#include "run_schedule.h"
#include "run_trace.h"
#include "tool_signals.h"
#include "mgraph/recompute.h"

#ifndef MG_DEFAULT_CORPUS
#define MG_DEFAULT_CORPUS ""
#endif

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Everything one run owns, released by run_release. */
typedef struct run {
    int mpi_world;              /* processes launched (mpirun -np) */
    mg_run_config cfg;
    mg_plan plan;
    int split;                  /* sub-batches per micro-batch (mg_plan_micro_batch_split) */
    mg_mesh mesh;
    mg_comm *comm;
    mg_tokenizer *tok;
    mg_dataset *data;
    mg_step train, eval;        /* logical graphs */
    mg_rank_graph train_rg, eval_rg; /* what this rank runs, and where each logical tensor is in it */
    mg_graph *train_g, *eval_g; /* their graphs */
    mg_memplan *train_plan, *eval_plan;
    mg_storage *train_st, *eval_st;
    mg_engine *train_eng, *eval_eng;
    mg_outfile *metrics;        /* the logger's --metrics-file */
    bool metrics_failed;        /* writing it failed: nothing of it is kept */
    bool metrics_complete;      /* the run ended well: the file is put in place even if empty */
    int64_t metrics_records;
    bool started;               /* past the last input check: every failure now is a run-time one */
    int32_t *sample;
    int64_t eval_batches_done, test_batches_done;
    mg_lr_schedule schedule;    /* what the LR_SCHEDULE op evaluates, for the log line */
    mg_tb_writer *tb;           /* --tensorboard-dir, on the logging rank */
    int64_t nan_at;             /* test hook: poison a weight before this iteration (1-based), 0: never */
    const mg_step_config *sc;   /* the training step's configuration (checkpoint metadata) */
    mg_run_resume resume;       /* --load: where training resumes (iteration 0 when none) */
    /* --fp16: Megatron's loss scaler, and the iterations it skipped so far (from --load's
     * checkpoint on): the scheduler and Adam count updates only (mg_exec_info.skipped) */
    bool fp16;
    mg_loss_scaler scaler;
    int64_t skipped;
    mg_run_trace trace;         /* --trace-file */
    mg_ckpt_lock *save_lock;    /* --save: rank 0 holds the directory's lock for the whole run */
    double t_start;             /* start-up timing (the "start-up" line): main entered, */
    double plan_s, memory_s, engine_s; /* memory plans, storage + weights, StarPU engines */
} run;

static void run_release(run *r) {
    mg_ckpt_lock_release(r->save_lock);
    mg_rank_graph_release(&r->eval_rg);
    mg_rank_graph_release(&r->train_rg);
    mg_comm_free(r->comm);
    mg_engine_free(r->eval_eng);
    mg_engine_free(r->train_eng);
    mg_storage_free(r->eval_st);
    mg_storage_free(r->train_st);
    mg_memplan_free(r->eval_plan);
    mg_memplan_free(r->train_plan);
    mg_step_release(&r->eval);
    mg_step_release(&r->train);
    mg_dataset_free(r->data);
    mg_tokenizer_free(r->tok);
    mg_outfile_abort(r->metrics); /* only when a failure path left it open */
    mg_tb_abort(r->tb);           /* closed (kept) only by a run that succeeded */
    free(r->sample);
    mg_run_resume_close(&r->resume);
    mg_run_trace_close(&r->trace);
}

/* ---- the metrics file --------------------------------------------------------------------
 * The logger writes whole JSON lines, flushed one by one, into a temporary file beside
 * the target (mg_outfile), so a write error (disk full, /dev/full) is seen at the
 * record that hit it and ends the run with exit 1, leaving no file cut mid-record. The
 * file is renamed into place when the run ends: on success, and also on a run-time
 * failure (a NaN, a data error): its records are whole and tell how the run got
 * there. SIGTERM, SIGINT and SIGHUP rename it too (rename is async-signal-safe and the
 * temporary file holds only flushed whole records), so a stopped job keeps its
 * metrics; during the run they can be followed in the temporary file, whose name is
 * printed at the start. Devices (/dev/null) are written in place, never removed. */
static char g_metrics_tmp[PATH_MAX], g_metrics_path[PATH_MAX];
static volatile sig_atomic_t g_metrics_armed;

/* (async-signal-safe: the fatal paths put the records written so far in place) */
static void keep_metrics(void) {
    if (g_metrics_armed) {
        g_metrics_armed = 0;
        rename(g_metrics_tmp, g_metrics_path);
    }
}

/* --distributed-timeout-minutes expired (scheduler/watchdog.c): a peer is stopped or hung,
 * so this rank cannot finish its collective. Say which wait, keep the metrics' whole
 * records as a stop signal does, and end: mpirun then ends every rank (the stopped one
 * included). A failure, so exit 1. */
static void on_wait_expired(const char *msg, void *ctx) {
    (void)ctx;
    fprintf(stderr, "mgraph-run: failed: %s\n", msg);
    fflush(stdout);
    fflush(stderr);
    mg_tool_fatal_cleanup();
    _exit(1);
}

static int metrics_open(run *r, mg_error *err) {
    int rc = mg_outfile_open(r->cfg.metrics_file, "--metrics-file", NULL, &r->metrics, err);
    if (rc) return rc;
    const char *tmp = mg_outfile_temp_path(r->metrics);
    if (tmp && strlen(tmp) < sizeof g_metrics_tmp && strlen(r->cfg.metrics_file) < sizeof g_metrics_path) {
        strcpy(g_metrics_tmp, tmp);
        strcpy(g_metrics_path, r->cfg.metrics_file);
        g_metrics_armed = 1;
        printf("mgraph-run: metrics are written to %s, which becomes %s when the run ends\n", tmp, r->cfg.metrics_file);
    }
    return MG_OK;
}

/* ---- --exit-signal-handler ----------------------------------------------------------------
 * Megatron's DistributedSignalHandler: the signal (--exit-signal, SIGTERM by default) only
 * sets a flag; at the end of each iteration the ranks learn whether any of them got it
 * (one integer, all-reduced), then save a checkpoint (with --save) and end with exit 0,
 * as after --exit-interval. A cluster's preemption (SLURM signals every task) thus costs
 * at most the iteration under way. A second signal meets the handler this one replaced
 * (the metrics file's stop above, or the default): a stuck run can still be stopped. */
static volatile sig_atomic_t g_exit_signalled;
static struct sigaction g_exit_prev;

static void on_exit_signal(int sig) {
    g_exit_signalled = 1;
    sigaction(sig, &g_exit_prev, NULL); /* (async-signal-safe) */
}

static int signal_number(const char *name) {
    static const struct { const char *name; int sig; } sigs[] = {
        {"SIGTERM", SIGTERM}, {"SIGINT", SIGINT}, {"SIGHUP", SIGHUP}, {"SIGUSR1", SIGUSR1}, {"SIGUSR2", SIGUSR2}};
    for (size_t i = 0; i < sizeof sigs / sizeof *sigs; i++)
        if (!strcmp(sigs[i].name, name)) return sigs[i].sig;
    return SIGTERM; /* (the flag's choices are these) */
}

static void exit_signal_install(const mg_run_config *c) {
    if (!c->exit_signal_handler) return;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_exit_signal;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(signal_number(c->exit_signal), &sa, &g_exit_prev);
}

/* Whether any rank got the exit signal (every rank calls this at the same iteration). */
static bool exit_signalled(const run *r) {
    int got = g_exit_signalled;
    if (r->mpi_world > 1) mg_run_allreduce(&got, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD, "the exit signal's all-reduce");
    return got != 0;
}

/* A number as JSON has it: NaN and Inf are not numbers there, they become null. */
static const char *json_number(char buf[32], double v) {
    if (isfinite(v)) snprintf(buf, 32, "%.9e", v);
    else snprintf(buf, 32, "null");
    return buf;
}

/* One whole record, flushed. */
__attribute__((format(printf, 3, 4))) static int metrics_record(run *r, mg_error *err, const char *fmt, ...) {
    if (!r->metrics) return MG_OK;
    va_list ap;
    va_start(ap, fmt);
    vfprintf(mg_outfile_stream(r->metrics), fmt, ap);
    va_end(ap);
    int rc = mg_outfile_flush(r->metrics, err);
    if (rc) r->metrics_failed = true;
    else r->metrics_records++;
    return rc;
}

/* Puts the file in place (keep) or discards it. A failed run that wrote no record
 * leaves whatever was at the target alone. */
static int metrics_close(run *r, bool keep, mg_error *err) {
    g_metrics_armed = 0;
    mg_outfile *m = r->metrics;
    r->metrics = NULL;
    if (!m) return MG_OK;
    if (!keep || r->metrics_failed || (!r->metrics_records && !r->metrics_complete)) {
        mg_outfile_abort(m);
        return MG_OK;
    }
    return mg_outfile_commit(m, err);
}

/* ---- configuration checks and derived values ----------------------------------------- */
/* Micro-batches x layers in one step graph: 2^18 is ~10^7 graph nodes, the most that
 * builds in a reasonable time and memory. */
#define MAX_MICRO_LAYERS (1 << 18)

/* Ranks of this job on this node, as Open MPI tells each of them (1 without mpirun). */
static int local_ranks(void) {
    const char *ls = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    return ls && atoi(ls) > 0 ? atoi(ls) : 1;
}

/* CPU workers a rank gets: the cores shared among the ranks of this node. */
static int default_workers_here(const run *r) {
    if (r->cfg.cpu_workers > 0) return r->cfg.cpu_workers;
    int ranks_here = local_ranks();
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int w = (int)(cores / ranks_here);
    return w < 1 ? 1 : w > 64 ? 64 : w;
}

/* The plan: defaults, then the plan file, then the flags that were given. */
static int resolve_plan(run *r, int world, mg_error *err) {
    mg_run_config *c = &r->cfg;
    mg_plan *p = &r->plan;
    mg_plan_defaults(p);
    if (c->plan_file) {
        int rc = mg_plan_read(p, c->plan_file, err);
        if (rc) return rc;
    }
    int given[] = {c->tensor_model_parallel_size, c->pipeline_model_parallel_size, c->context_parallel_size,
                   c->expert_model_parallel_size};
    const char *names[] = {"--tensor-model-parallel-size", "--pipeline-model-parallel-size",
                           "--context-parallel-size", "--expert-model-parallel-size"};
    int *dst[] = {&p->tp, &p->pp, &p->cp, &p->ep};
    for (int i = 0; i < 4; i++) {
        if (!mg_run_config_given(c, names[i])) continue;
        if (given[i] < 1 || given[i] > 1 << 20)
            return mg_error_set(err, MG_ERR_INVALID, "%s must be in 1..%d (got %d)", names[i], 1 << 20, given[i]);
        *dst[i] = given[i];
    }
    if (mg_run_config_given(c, "--matmul-tiles") && c->matmul_tiles < 1)
        return mg_error_set(err, MG_ERR_INVALID, "--matmul-tiles must be in 1..64 (got %d)", c->matmul_tiles);
    if (c->matmul_tiles < 0 || c->matmul_tiles > 64)
        return mg_error_set(err, MG_ERR_INVALID, "--matmul-tiles must be in 1..64 (got %d)", c->matmul_tiles);
    if (c->matmul_tiles > 0) p->matmul_tiles = c->matmul_tiles;
    if (mg_run_config_given(c, "--micro-batch-split")) {
        if (c->micro_batch_split < 0 || c->micro_batch_split > 64)
            return mg_error_set(err, MG_ERR_INVALID, "--micro-batch-split must be in 0..64 (0: auto; got %d)",
                                c->micro_batch_split);
        p->micro_batch_split = c->micro_batch_split;
    }
    if (c->sequence_parallel) p->sequence_parallel = true;
    if (p->sequence_parallel && p->tp == 1) {
        /* Megatron's validate_args: warn and disable, so that numerics do not change */
        if (r->mesh.rank == 0)
            fprintf(stderr, "mgraph-run: warning: disabling sequence parallelism because tensor model parallelism is "
                            "disabled (tp 1)\n");
        p->sequence_parallel = false;
    }
    if (c->use_distributed_optimizer) p->distributed_optimizer = true;
    if (c->use_tp_pp_dp_mapping) snprintf(p->order, sizeof p->order, "tp-pp-dp"); /* Megatron's initialize.py */
    if (mg_run_config_given(c, "--expert-tensor-parallel-size")) p->etp = c->expert_tensor_parallel_size;
    if (c->use_megatron_fsdp && c->use_torch_fsdp2)
        return mg_error_set(err, MG_ERR_INVALID, "give --use-megatron-fsdp or --use-torch-fsdp2, not both");
    if (c->use_torch_fsdp2) p->fsdp = MG_FSDP_OPTIM_GRADS_PARAMS;
    if (c->use_megatron_fsdp) {
        const char *s = c->data_parallel_sharding_strategy ? c->data_parallel_sharding_strategy : "optim_grads_params";
        if (mg_plan_set_fsdp(p, s))
            return mg_error_set(err, MG_ERR_INVALID,
                                "--data-parallel-sharding-strategy %s: expected no_shard, optim, optim_grads or "
                                "optim_grads_params", s);
    } else if (c->data_parallel_sharding_strategy && r->mesh.rank == 0) {
        fprintf(stderr, "mgraph-run: warning: --data-parallel-sharding-strategy %s ignored without --use-megatron-fsdp\n",
                c->data_parallel_sharding_strategy);
    }
    /* pipeline layout: Megatron's flags, checked against the model in mg_plan_check_model */
    bool by_layers = mg_run_config_given(c, "--num-layers-per-virtual-pipeline-stage"),
         by_stages = mg_run_config_given(c, "--num-virtual-stages-per-pipeline-rank");
    if (by_layers && by_stages)
        return mg_error_set(err, MG_ERR_INVALID,
                            "give --num-layers-per-virtual-pipeline-stage or --num-virtual-stages-per-pipeline-rank, "
                            "not both");
    if ((by_layers || by_stages) && p->pp < 2) {
        /* a recipe's interleaving flags with the pipeline off (recipes scaled down to one
         * stage): nothing to interleave */
        if (r->mesh.rank == 0)
            fprintf(stderr, "mgraph-run: warning: %s ignored: --pipeline-model-parallel-size is 1\n",
                    by_layers ? "--num-layers-per-virtual-pipeline-stage" : "--num-virtual-stages-per-pipeline-rank");
        by_layers = by_stages = false;
    }
    if (by_layers) {
        int lv = c->num_layers_per_virtual_pipeline_stage; /* (the embedding and loss count as layers when accounted) */
        int L = c->num_layers + c->account_for_embedding_in_pipeline_split + c->account_for_loss_in_pipeline_split;
        if (lv < 1 || L % (p->pp * lv))
            return mg_error_set(err, MG_ERR_INVALID,
                                "--num-layers-per-virtual-pipeline-stage %d: --num-layers %d%s must be a multiple of "
                                "--pipeline-model-parallel-size %d x it",
                                lv, c->num_layers, L > c->num_layers ? " (+ the embedding / loss accounted)" : "", p->pp);
        p->vpp = L / (p->pp * lv);
    }
    if (by_stages) {
        if (c->num_virtual_stages_per_pipeline_rank < 1 || c->num_virtual_stages_per_pipeline_rank > 1 << 16)
            return mg_error_set(err, MG_ERR_INVALID, "--num-virtual-stages-per-pipeline-rank must be in 1..65536 (got %d)",
                                c->num_virtual_stages_per_pipeline_rank);
        p->vpp = c->num_virtual_stages_per_pipeline_rank;
    }
    if (c->pipeline_model_parallel_layout) { /* Megatron's: the layout gives the model chunks */
        if (by_layers || by_stages)
            return mg_error_set(err, MG_ERR_INVALID,
                                "--pipeline-model-parallel-layout gives the virtual stages: not with --num-layers-per-"
                                "virtual-pipeline-stage or --num-virtual-stages-per-pipeline-rank");
        if (strlen(c->pipeline_model_parallel_layout) >= sizeof p->pp_layout)
            return mg_error_set(err, MG_ERR_INVALID, "--pipeline-model-parallel-layout: too long (at most %zu characters)",
                                sizeof p->pp_layout - 1);
        snprintf(p->pp_layout, sizeof p->pp_layout, "%s", c->pipeline_model_parallel_layout);
    }
    if (p->pp_layout[0]) {
        int n = 0, lrc = mg_plan_pp_layout_stages(p->pp_layout, &n, err);
        if (lrc) return lrc;
        if (p->pp < 1 || n % p->pp)
            return mg_error_set(err, MG_ERR_INVALID,
                                "--pipeline-model-parallel-layout '%s' has %d virtual stages, not a multiple of "
                                "--pipeline-model-parallel-size %d", p->pp_layout, n, p->pp);
        p->vpp = n / p->pp;
    }
    if (c->account_for_embedding_in_pipeline_split) p->pp_account_embedding = true;
    if (c->account_for_loss_in_pipeline_split) p->pp_account_loss = true;
    int urc = mg_run_config_uneven_pipeline(c, p, err);
    if (urc) return urc;
    if (c->pipeline_schedule && mg_pp_schedule_parse(c->pipeline_schedule, &p->pp_schedule))
        return mg_error_set(err, MG_ERR_INVALID, "--pipeline-schedule %s: expected auto, 1f1b, interleaved or gpipe",
                            c->pipeline_schedule);
    return mg_plan_check(p, world, err);
}

/* ---- limits (issue 18) ----------------------------------------------------------------------
 * Bounds the Megatron checks (mg_run_config_check) do not make. They keep every product
 * computed from the sizes (4h, seq + 1, parameter counts, samples asked of the dataset)
 * far from overflow, and check a value that was given explicitly before
 * mg_run_config_check derives defaults from values <= 0 (--ffn-hidden-size 0 was taken
 * as "not given"). */
static void check_max(mg_run_notes *n, const char *flag, int64_t v, int64_t hi) {
    if (v > hi) mg_run_notes_error(n, "%s must be at most %lld (got %lld)", flag, (long long)hi, (long long)v);
}

static void check_range(mg_run_notes *n, const char *flag, int64_t v, int64_t lo, int64_t hi) {
    if (v < lo || v > hi)
        mg_run_notes_error(n, "%s must be in %lld..%lld (got %lld)", flag, (long long)lo, (long long)hi, (long long)v);
}

static void check_limits(const mg_run_config *c, mg_run_notes *n) {
    const int64_t DIM = 1 << 24, ITERS = (int64_t)1 << 40;
    check_range(n, "--num-layers", c->num_layers, 1, 1 << 16);
    check_range(n, "--hidden-size", c->hidden_size, 1, DIM);
    check_range(n, "--num-attention-heads", c->num_attention_heads, 1, DIM);
    check_range(n, "--seq-length", c->seq_length, 1, DIM);
    if (mg_run_config_given(c, "--ffn-hidden-size")) check_range(n, "--ffn-hidden-size", c->ffn_hidden_size, 1, 4 * DIM);
    if (mg_run_config_given(c, "--max-position-embeddings"))
        check_range(n, "--max-position-embeddings", c->max_position_embeddings, 1, DIM);
    check_max(n, "--micro-batch-size", c->micro_batch_size, DIM);
    check_max(n, "--global-batch-size", c->global_batch_size, 1 << 30);
    check_max(n, "--train-iters", c->train_iters, ITERS);
    check_max(n, "--eval-iters", c->eval_iters, ITERS);
    check_max(n, "--eval-interval", c->eval_interval, ITERS);
    check_max(n, "--log-interval", c->log_interval, ITERS);
    check_max(n, "--lr-warmup-iters", c->lr_warmup_iters, ITERS);
    check_max(n, "--lr-decay-iters", c->lr_decay_iters, ITERS);
    if (mg_run_config_given(c, "--eval-interval") && c->eval_interval < 0)
        mg_run_notes_error(n, "--eval-interval must be >= 0 (0 or left out: no periodic validation; got %lld)",
                           (long long)c->eval_interval);
    if (c->eval_interval == 0 && mg_run_config_given(c, "--eval-iters") && c->eval_iters > 0)
        mg_run_notes_error(n, "--eval-iters %lld with --eval-interval 0: evaluation would never run (give an interval, "
                              "or --eval-iters 0)", (long long)c->eval_iters);
    if (!(c->weight_decay >= 0)) mg_run_notes_error(n, "--weight-decay must be >= 0 (got %g)", c->weight_decay);
    if (!(c->clip_grad >= 0)) mg_run_notes_error(n, "--clip-grad must be >= 0 (0: off; got %g)", c->clip_grad);
    if (!(c->init_method_std >= 0)) mg_run_notes_error(n, "--init-method-std must be >= 0 (got %g)", c->init_method_std);
    if (!(c->hidden_dropout >= 0 && c->hidden_dropout < 1) || !(c->attention_dropout >= 0 && c->attention_dropout < 1))
        mg_run_notes_error(n, "--hidden-dropout and --attention-dropout must be in [0, 1)");
    /* tokenizer files of another tokenizer than the one named */
    const char *type = c->tokenizer_type;
    if (type && strcmp(type, "GPT2BPETokenizer") && (c->vocab_file || c->merge_file))
        mg_run_notes_error(n, "%s is for --tokenizer-type GPT2BPETokenizer (the tokenizer is %s)",
                           c->vocab_file ? "--vocab-file" : "--merge-file", type);
    if (type && c->tokenizer_model && strcmp(type, "SentencePieceTokenizer") && strcmp(type, "HuggingFaceTokenizer") &&
        strcmp(type, "TikTokenizer"))
        mg_run_notes_error(n, "--tokenizer-model is for --tokenizer-type SentencePieceTokenizer, HuggingFaceTokenizer or "
                              "TikTokenizer (the tokenizer is %s)",
                           type);
    if (c->check_for_nan_in_loss_and_grad && c->no_check_for_nan_in_loss_and_grad)
        mg_run_notes_error(n, "--check-for-nan-in-loss-and-grad and --no-check-for-nan-in-loss-and-grad exclude each other");
}

/* Expert parallelism's model rules (partitioners/ep.c): experts to split, evenly; the
 * experts themselves run whole on every tensor-parallel rank. */
static int check_expert_parallel(const run *r, const mg_gpt_config *m, mg_error *err) {
    int ep = r->plan.ep;
    int etp = r->cfg.expert_tensor_parallel_size;
    if (etp < 1) return mg_error_set(err, MG_ERR_INVALID, "--expert-tensor-parallel-size must be >= 1 (got %d)", etp);
    if (m->moe.num_experts > 0 && etp > 1 && etp != r->plan.tp && r->plan.tp > 1)
        return mg_error_set(err, MG_ERR_UNSUPPORTED,
                            "--expert-tensor-parallel-size %d other than 1 or --tensor-model-parallel-size %d is "
                            "supported with --tensor-model-parallel-size 1 only (the expert tensor group is then ranks "
                            "holding other tokens, gathered for the experts)",
                            etp, r->plan.tp);
    if (ep > 1 && m->moe.num_experts == 0)
        return mg_error_set(err, MG_ERR_INVALID, "--expert-model-parallel-size %d needs --num-experts (a MoE model)", ep);
    if (ep > 1 && m->moe.num_experts % ep)
        return mg_error_set(err, MG_ERR_INVALID, "--num-experts %d is not divisible by --expert-model-parallel-size %d",
                            m->moe.num_experts, ep);
    return MG_OK;
}

/* --bf16: every matrix product with bf16 inputs and fp32 sums (mgraph/exec.h). On a CPU
 * without AVX512-BF16 the flag is refused by name (exit 2), unless MG_CPU_BF16=emulate
 * asks for the portable kernel: the same bits, slower than fp32, to check numerics. */
static void apply_bf16(mg_run_notes *notes) {
    const char *e = getenv("MG_CPU_BF16");
    bool emulate = e && !strcmp(e, "emulate");
    if (e && *e && !emulate) {
        mg_run_notes_error(notes, "MG_CPU_BF16 must be 'emulate' or unset (got '%s')", e);
        return;
    }
    mg_error err = {0};
    if (mg_gemm_set_precision(MG_GEMM_BF16, emulate, &err))
        mg_run_notes_error(notes, "--bf16 is not supported: %s", err.msg);
    else if (!mg_cpu_has_bf16())
        mg_run_notes_warn(notes, "--bf16 on a CPU without AVX512-BF16: the portable kernel (MG_CPU_BF16=emulate) "
                                 "gives the native kernel's bits at about half fp32's speed");
}

/* The step configuration from the checked flags (mg_run_config_check). */
static int resolve(mg_run_config *c, int dp, mg_step_config *sc, mg_error *err) {
    if (c->global_batch_size == 0) c->global_batch_size = c->micro_batch_size * dp; /* Megatron's default */
    /* every micro-batch is its own copy of the model in the step graph: bound the graph */
    int64_t n_micro = c->global_batch_size / c->micro_batch_size;
    if (n_micro * c->num_layers > MAX_MICRO_LAYERS)
        return mg_error_set(err, MG_ERR_INVALID,
                            "%lld micro-batches (--global-batch-size %d / --micro-batch-size %d) x %d layers make a step "
                            "graph too large to build (limit %d micro-batch layers): raise --micro-batch-size",
                            (long long)n_micro, c->global_batch_size, c->micro_batch_size, c->num_layers, MAX_MICRO_LAYERS);
    memset(sc, 0, sizeof *sc);
    mg_gpt_config *m = &sc->model;
    int rc = mg_run_config_model(c, m, err);
    if (rc) return rc;
    sc->micro_batch = c->micro_batch_size;
    sc->n_micro = c->global_batch_size / c->micro_batch_size;
    sc->training = true;
    sc->loss_token_mean = c->eod_mask_loss; /* Megatron's log line: the mean over the kept tokens */
    sc->per_token_loss = c->calculate_per_token_loss;
    sc->reset_position_ids = c->reset_position_ids;
    sc->reset_attention_mask = c->reset_attention_mask;
    sc->precision = mg_run_config_precision(c);
    mg_adamw_config *o = &sc->optim;
    *o = mg_adamw_defaults();
    o->beta1 = c->adam_beta1;
    o->beta2 = c->adam_beta2;
    o->eps = c->adam_eps;
    o->weight_decay = c->weight_decay;
    o->clip_grad = c->clip_grad;
    o->params_norm = c->log_params_norm;
    rc = mg_run_lr_schedule(c, &o->lr, err); /* sets --train-iters from --train-samples */
    if (rc) return rc;
    o->decoupled = mg_run_config_given(c, "--decoupled-lr");
    o->decoupled_lr = c->decoupled_lr;
    o->decoupled_min_lr = mg_run_config_given(c, "--decoupled-min-lr") ? c->decoupled_min_lr : o->lr.min_lr;
    /* every batch of the ramp is whole micro-batches on every data-parallel rank (Megatron
     * asserts it at each batch it reaches: start and increment cover them all) */
    int64_t unit = (int64_t)c->micro_batch_size * dp;
    if (o->lr.ramp_start > 0 && (o->lr.ramp_start % unit || o->lr.ramp_increment % unit))
        return mg_error_set(err, MG_ERR_INVALID,
                            "--rampup-batch-size %lld %lld ...: the start and the increment must be multiples of "
                            "--micro-batch-size x data-parallel size (%lld)",
                            (long long)o->lr.ramp_start, (long long)o->lr.ramp_increment, (long long)unit);
    /* (after the schedule: --train-samples sets train_iters) samples asked of the dataset: bounded (2^50) so that the products in open_data fit */
    uint64_t cap = ((uint64_t)1 << 50) / (uint64_t)c->global_batch_size;
    if ((uint64_t)c->train_iters > cap ||
        (c->eval_interval > 0 && (uint64_t)(c->train_iters / c->eval_interval + 1) * (uint64_t)c->eval_iters > cap))
        return mg_error_set(err, MG_ERR_INVALID,
                            "--train-iters %lld (and --eval-iters %lld) x --global-batch-size %d ask for more than 2^50 samples",
                            (long long)c->train_iters, (long long)c->eval_iters, c->global_batch_size);
    return mg_gpt_check(m, err);
}

/* ---- data ------------------------------------------------------------------------------ */
static int open_data(run *r, mg_step_config *sc, mg_error *err) {
    int tp = r->plan.tp;
    mg_run_config *c = &r->cfg;
    mg_tokenizer_config tc = mg_run_tokenizer_config(c);
    int rc = mg_tokenizer_open(&tc, &r->tok, err);
    if (rc) return rc;
    const char *needs_eod = NULL; /* the flags that find documents by their end token */
    if (c->reset_attention_mask) needs_eod = "--reset-attention-mask";
    if (c->reset_position_ids) needs_eod = "--reset-position-ids";
    if (c->eod_mask_loss) needs_eod = "--eod-mask-loss";
    if (needs_eod && mg_tokenizer_eod(r->tok) < 0)
        return mg_error_set(err, MG_ERR_INVALID, "%s: the %s has no end-of-document token", needs_eod,
                            mg_tokenizer_type(r->tok));
    int64_t vocab = mg_tokenizer_vocab_size(r->tok);
    sc->model.vocab = mg_vocab_padded(vocab, c->make_vocab_size_divisible_by, tp);
    uint64_t gbs = (uint64_t)c->global_batch_size;
    /* no evaluation, no validation samples asked for (--skip-train evaluates once) */
    uint64_t evals = c->eval_interval > 0 ? (uint64_t)(c->train_iters / c->eval_interval) + 1 : c->skip_train ? 1 : 0;
    /* the test split is not used by training: ask for none (0 = one epoch, possibly empty) */
    /* Megatron's get_train_valid_test_num_samples: --train-samples as given (with a ramp,
     * train iterations x global batch overstates it), else iterations x global batch */
    uint64_t train = c->skip_train ? 0 /* (none read) */
                     : c->train_samples > 0 ? (uint64_t)c->train_samples : (uint64_t)c->train_iters * gbs;
    uint64_t want[3] = {train, evals * (uint64_t)c->eval_iters * gbs, 0};
    bool per_split = c->split_data_path[0] || c->split_data_path[1] || c->split_data_path[2];
    if (c->data_path) {
        mg_gpt_dataset_config dc = {c->data_path, c->split, c->seq_length, (uint64_t)c->seed,
                                    {want[0], want[1], want[2]}, c->data_cache_path, vocab,
                                    mg_tokenizer_type(r->tok), false, 0};
        rc = mg_gpt_dataset_open(&dc, &r->data, err);
    } else if (per_split) { /* Megatron's blend_per_split: each split from its own datasets, whole */
        mg_dataset *parts[3] = {NULL, NULL, NULL};
        for (int s = 0; s < 3 && !rc; s++) {
            if (!c->split_data_path[s]) continue;
            mg_gpt_dataset_config dc = {c->split_data_path[s], NULL, c->seq_length, (uint64_t)c->seed,
                                        {want[0], want[1], want[2]}, c->data_cache_path, vocab,
                                        mg_tokenizer_type(r->tok), true, s};
            rc = mg_gpt_dataset_open(&dc, &parts[s], err);
        }
        if (rc) {
            for (int s = 0; s < 3; s++) mg_dataset_free(parts[s]);
            return rc;
        }
        rc = mg_dataset_per_split(parts, &r->data, err);
    } else {
        const char *path = c->text_file ? c->text_file : MG_DEFAULT_CORPUS;
        if (!*path)
            return mg_error_set(err, MG_ERR_IO, "no --text-file or --data-path given, and the default corpus (Debian's "
                                                "fortunes package) was not found when mgraph was configured");
        mg_text_dataset_config dc = {path, r->tok, c->split, c->seq_length, (uint64_t)c->seed, {0, 0, 0}};
        rc = mg_text_dataset_open(&dc, &r->data, err);
    }
    if (rc) return rc;
    if (!c->skip_train && mg_dataset_num_samples(r->data, MG_SPLIT_TRAIN) == 0)
        return mg_error_set(err, MG_ERR_INVALID, "the training split has no sample of %d tokens", c->seq_length + 1);
    if (c->eval_interval > 0 && c->eval_iters > 0 && mg_dataset_num_samples(r->data, MG_SPLIT_VALID) == 0)
        return mg_error_set(err, MG_ERR_INVALID, "the validation split has no sample (%s or --eval-iters 0)",
                            per_split ? "give --valid-data-path" : "set --split");
    r->sample = malloc(((size_t)c->seq_length + 1) * sizeof *r->sample);
    return r->sample ? MG_OK : mg_error_set(err, MG_ERR_NOMEM, "out of memory");
}

/* Data-parallel size and a rank's place in it. */
static int mesh_dp_size(const mg_mesh *m) { return m->size[MG_GROUP_DP] > 0 ? m->size[MG_GROUP_DP] : 1; }
static int dp_size(const run *r) { return mesh_dp_size(&r->mesh); }
static int dp_rank(const run *r) { return r->mesh.coord[MG_GROUP_DP]; }

/* Micro-batches the rank at mesh m runs in a step of global batch gbs: global batch /
 * (micro-batch x dp). The run (fill_batch, execute) and the start-up lines (describe)
 * both take the count from here, so what is printed is what the executors are given. */
static int mesh_local_micro(const run *r, const mg_mesh *m, int64_t gbs) {
    return (int)(gbs / r->cfg.micro_batch_size / mesh_dp_size(m));
}
static int local_micro_of(const run *r, int64_t gbs) { return mesh_local_micro(r, &r->mesh, gbs); }
/* ... at the full --global-batch-size (storage is sized for it). */
static int local_micro(const run *r) { return local_micro_of(r, r->cfg.global_batch_size); }
/* Instances of the graph's per-micro-batch part a step runs: micro-batches x sub-batches. */
static int split_of(const run *r) { return r->split > 0 ? r->split : 1; }
static int local_instances_of(const run *r, int64_t gbs) { return local_micro_of(r, gbs) * split_of(r); }

/* Sub-batches per micro-batch (mg_plan_micro_batch_split), the same on every rank (the
 * smallest any rank picks: tensor-parallel peers must run the same instances), and the
 * step configuration built for them: micro-batch / split samples, micro-batches x split.
 * Every rank calls it, rc the run's status so far: one that failed earlier still takes
 * part in the agreement (no rank waits for it), then returns rc. */
static int resolve_split(run *r, mg_step_config *sc, int rc, mg_error *err) {
    bool moe = !rc && sc->model.moe.num_experts > 0;
    if (!rc) rc = mg_plan_check_split(&r->plan, r->cfg.micro_batch_size, moe, err);
    /* A sub-batch's loss is the mean over its own kept tokens: with a loss mask the
     * sub-batches' means do not average to the micro-batch's mean (with the per-token
     * loss each sub-batch's sum is divided by the global batch's count: they do). */
    bool mb_mean_masked = r->cfg.eod_mask_loss && !r->cfg.calculate_per_token_loss;
    if (!rc && mb_mean_masked && r->plan.micro_batch_split > 1)
        rc = mg_error_set(err, MG_ERR_UNSUPPORTED,
                          "micro-batch split %d with --eod-mask-loss is not supported (the loss is the mean over the "
                          "micro-batch's unmasked tokens, which its sub-batches do not share; with "
                          "--calculate-per-token-loss they do)",
                          r->plan.micro_batch_split);
    int k = rc                     ? INT_MAX
            : mb_mean_masked       ? 1
                                   : mg_plan_micro_batch_split(&r->plan, r->cfg.micro_batch_size, local_micro(r),
                                                               default_workers_here(r), moe);
    if (r->mpi_world > 1) mg_run_allreduce(&k, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD, "the micro-batch split's all-reduce");
    if (rc) return rc;
    r->split = k;
    sc->micro_batch = r->cfg.micro_batch_size / k;
    sc->n_micro = r->cfg.global_batch_size / r->cfg.micro_batch_size * k;
    return MG_OK;
}

/* The rank graph and logical step graph g (the training or the evaluation graph) runs. */
static const mg_rank_graph *rank_of(const run *r, const mg_graph *g) { return g == r->eval_g ? &r->eval_rg : &r->train_rg; }
static const mg_step *step_of(const run *r, const mg_graph *g) { return g == r->eval_g ? &r->eval : &r->train; }

/* The label of position t of a sample (seq_length + 1 tokens): the next token, or
 * MG_LABEL_IGNORE where the input is the end-of-document token eod (>= 0: --eod-mask-loss). */
static int32_t label_at(const int32_t *sample, int t, int32_t eod) {
    return eod >= 0 && sample[t] == eod ? MG_LABEL_IGNORE : sample[t + 1];
}

/* Labels kept in the loss over the whole global batch [first, first + gbs) of a split
 * (every data-parallel rank's samples: each rank counts them all, no communication). */
static int kept_tokens(run *r, int split, uint64_t first, int64_t gbs, int32_t eod, uint64_t *kept, mg_error *err) {
    uint64_t n = mg_dataset_num_samples(r->data, split);
    *kept = (uint64_t)gbs * (uint64_t)r->cfg.seq_length;
    if (eod < 0) return MG_OK; /* no mask: every label is kept, nothing to read */
    *kept = 0;
    for (int64_t i = 0; i < gbs; i++) {
        int rc = mg_dataset_sample(r->data, split, (first + (uint64_t)i) % n, r->sample, err);
        if (rc) return rc;
        for (int t = 0; t < r->cfg.seq_length; t++) *kept += label_at(r->sample, t, eod) != MG_LABEL_IGNORE;
    }
    return MG_OK;
}

/* Writes samples [first, first + gbs) of a split into graph g's per-micro-batch inputs,
 * laid out [s, b]; with --eod-mask-loss the label of a position whose input token is the
 * end-of-document token is MG_LABEL_IGNORE (Megatron's loss_mask[tokens == eod] = 0).
 * With --reset-position-ids / --reset-attention-mask, each token's document starts after
 * the last end-of-document token before it among the sample's inputs (Megatron's
 * _get_ltor_masks_and_position_ids): position_ids [s, b] count from that start,
 * doc_start [s, b] holds it.
 * This rank's micro-batch instance i is global micro-batch
 * i * dp + dp_rank (Megatron's sampler: each group of dp micro-batches is dealt out to
 * the data-parallel ranks in order), samples first + (that) * mbs + j. Also sets
 * loss_scale to 1 / micro-batches of the global batch. gbs is this step's global batch
 * (less than --global-batch-size during a --rampup-batch-size ramp: fewer micro-batches).
 * With a token_scale input, or asked for *kept, counts the global batch's kept labels
 * (kept_tokens) and sets token_scale to 1 / that count. */
static int fill_batch(run *r, mg_graph *g, mg_storage *store, int split, uint64_t first, int64_t gbs,
                      uint64_t *kept, mg_error *err) {
    int s = r->cfg.seq_length, mbs = r->cfg.micro_batch_size, n_global = (int)(gbs / mbs);
    uint64_t n = mg_dataset_num_samples(r->data, split);
    int64_t vocab = mg_tokenizer_vocab_size(r->tok);
    static const char *split_names[] = {"train", "validation", "test"};
    const mg_rank_graph *R = rank_of(r, g);
    const mg_step *st = step_of(r, g);
    mg_tensor *tt = mg_rank_tensor(R, st->tokens), *lt = mg_rank_tensor(R, st->targets),
              *ls = mg_rank_tensor(R, st->loss_scale), *dt = mg_rank_tensor(R, st->doc_start),
              *pt = r->cfg.reset_position_ids ? mg_rank_tensor(R, st->positions) : NULL;
    /* a pipeline stage has the inputs its layers read: tokens on the first, labels and
     * the loss scale on the last */
    if (!tt && !lt && !ls && r->plan.pp == 1)
        return mg_error_set(err, MG_ERR_RUNTIME, "the step graph lacks input_ids, labels and loss_scale");
    /* sub-batches: instance i * nsub + q holds samples q * sub .. of micro-batch i */
    int nsub = split_of(r), sub = mbs / nsub;
    int32_t eod = r->cfg.eod_mask_loss ? mg_tokenizer_eod(r->tok) : -1;
    int32_t doc_eod = pt || dt ? mg_tokenizer_eod(r->tok) : -1;
    if (ls) *(float *)mg_storage_data(store, ls) = 1.0f / (float)(n_global * nsub);
    mg_tensor *gs = mg_rank_tensor(R, st->grad_scale); /* (--fp16, training) */
    if (gs) *(float *)mg_storage_data(store, gs) = r->scaler.scale;
    mg_tensor *ts = mg_rank_tensor(R, st->token_scale);
    if (kept || ts) {
        uint64_t k;
        int rc = kept_tokens(r, split, first, gbs, eod, &k, err);
        if (rc) return rc;
        if (kept) *kept = k;
        if (ts) *(float *)mg_storage_data(store, ts) = k ? (float)(1.0 / (double)k) : 0.0f;
    }
    if (!tt && !lt && !pt && !dt) return MG_OK;
    for (int inst = 0; inst < local_instances_of(r, gbs); inst++) {
        int i = inst / nsub, q = inst % nsub;
        uint64_t mb = (uint64_t)i * (uint64_t)dp_size(r) + (uint64_t)dp_rank(r);
        int32_t *tok = tt ? mg_storage_data_mb(store, tt, inst) : NULL,
                *lab = lt ? mg_storage_data_mb(store, lt, inst) : NULL,
                *pos = pt ? mg_storage_data_mb(store, pt, inst) : NULL,
                *dst = dt ? mg_storage_data_mb(store, dt, inst) : NULL;
        for (int j = 0; j < sub; j++) {
            uint64_t idx = (first + mb * (uint64_t)mbs + (uint64_t)(q * sub + j)) % n;
            int rc = mg_dataset_sample(r->data, split, idx, r->sample, err);
            if (rc) return rc;
            /* the embedding would read a zero row for such an id: say it instead */
            for (int t = 0; t <= s; t++)
                if (r->sample[t] < 0 || r->sample[t] >= vocab)
                    return mg_error_set(err, MG_ERR_INVALID,
                                        "data error: sample %llu of the %s split holds token id %d, outside the "
                                        "vocabulary of %s [0, %lld) (is the dataset tokenized with another tokenizer?)",
                                        (unsigned long long)idx, split_names[split], r->sample[t],
                                        mg_tokenizer_type(r->tok), (long long)vocab);
            int32_t start = 0; /* the document of token t (an end-of-document token ends its own) */
            for (int t = 0; t < s; t++) {
                if (tok) tok[t * sub + j] = r->sample[t];
                if (lab) lab[t * sub + j] = label_at(r->sample, t, eod);
                if (pos) pos[t * sub + j] = t - start;
                if (dst) dst[t * sub + j] = start;
                if (doc_eod >= 0 && r->sample[t] == doc_eod) start = t + 1;
            }
        }
    }
    return MG_OK;
}

/* Positions 0..s-1, written once (per-sample positions are fill_batch's). */
static void fill_positions(const run *r, mg_graph *g, mg_storage *store) {
    mg_tensor *pos = mg_rank_tensor(rank_of(r, g), step_of(r, g)->positions);
    if (!pos || pos->per_microbatch) return;
    int32_t *p = mg_storage_data(store, pos);
    for (int64_t t = 0; t < mg_numel(pos); t++) p[t] = (int32_t)(pos->logical.offset[0] + t);
}

/* StarPU workers: all cores (0) for a lone rank, else this rank's share. */
static int default_workers(const run *r) {
    if (r->cfg.cpu_workers <= 0 && local_ranks() == 1) return 0;
    return default_workers_here(r);
}

/* Where StarPU puts a rank's workers when several ranks share a node. StarPU binds
 * worker i to core i in every process, so two ranks would stack their workers on the
 * same cores: give each node-local rank its own cores, or, when the ranks outnumber
 * the cores, let the OS place threads (platform.md: pinned, spinning workers of
 * oversubscribed ranks starve each other). The user's own settings win. */
static void place_workers(const run *r) {
    const char *lr = getenv("OMPI_COMM_WORLD_LOCAL_RANK");
    if (!lr || local_ranks() == 1 || getenv("STARPU_WORKERS_NOBIND") || getenv("STARPU_WORKERS_CPUID")) return;
    int rank = atoi(lr), workers = default_workers_here(r);
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    if ((long)local_ranks() * workers > cores) {
        setenv("STARPU_WORKERS_NOBIND", "1", 1);
        return;
    }
    char list[1024];
    size_t o = 0;
    for (int w = 0; w < workers && o + 16 < sizeof list; w++)
        o += (size_t)snprintf(list + o, sizeof list - o, "%s%d", w ? " " : "", rank * workers + w);
    setenv("STARPU_WORKERS_CPUID", list, 1);
}

/* A pipeline stage keeps as many micro-batches' activations as its schedule has in
 * flight (1F1B: P - stage; mg_pp_in_flight, in *need): at least that many slots. */
static int pipeline_slots(const run *r, int stage, int *slots, int *need_out, mg_error *err) {
    int need = 0;
    int rc = mg_pp_schedule_in_flight(r->plan.pp_schedule, r->plan.pp, r->plan.vpp, stage, local_micro(r), &need, err);
    if (!rc && need > *slots) *slots = need;
    if (!rc && need_out) *need_out = need;
    return rc;
}

static int prepare(run *r, mg_graph *g, mg_memplan **plan, mg_storage **store, mg_engine **eng, mg_error *err) {
    double t0 = now_s();
    int rc = mg_memplan_build(g, true, plan, err);
    r->plan_s += now_s() - t0;
    t0 = now_s();
    /* the evaluation graph runs on the training graph's parameters (no copies) */
    /* sub-batches: as many in flight as whole micro-batches would be (same memory) */
    int slots = r->plan.microbatch_slots * split_of(r);
    mg_storage_options so = {local_instances_of(r, r->cfg.global_batch_size), slots > 64 ? 64 : slots,
                             g == r->eval_g ? r->train_st : NULL};
    if (!rc && r->plan.pp > 1) rc = pipeline_slots(r, r->mesh.coord[MG_GROUP_PP], &so.n_slots, NULL, err);
    if (!rc) rc = mg_storage_new_ex(g, *plan, &so, store, err);
    if (!rc) rc = mg_storage_init(*store, (uint64_t)r->cfg.seed, err);
    /* --load: the training graph's state, before the engine takes the buffers */
    if (!rc && g == r->train_g) rc = mg_run_resume_fill(&r->resume, g, *store, err);
    if (rc) return rc;
    fill_positions(r, g, *store);
    double t1 = now_s();
    r->memory_s += t1 - t0;
    if (!strcmp(r->cfg.engine, "starpu")) {
        place_workers(r);
        mg_engine_options eo = {r->cfg.sched_policy, default_workers(r), true, r->cfg.overlap_grad_reduce,
                                r->plan.pp, r->mesh.coord[MG_GROUP_PP], r->plan.vpp, r->plan.pp_schedule};
        rc = mg_engine_new(g, *store, &eo, eng, err);
    }
    r->engine_s += now_s() - t1;
    return rc;
}

static int execute(run *r, mg_graph *g, mg_storage *store, mg_engine *eng, int64_t iteration, bool training,
                   int64_t gbs, mg_error *err) {
    mg_exec_info info = {.seed = r->resume.seed, .iteration = iteration, .optim_start = r->resume.optim_start,
                         .skipped = r->skipped,
                         .training = training, .comm = r->comm,
                         .n_micro = local_instances_of(r, gbs), .mb_offset = dp_rank(r), .mb_stride = dp_size(r),
                         .mb_split = split_of(r)};
    return eng ? mg_engine_run(eng, &info, err) : mg_exec_reference(g, store, &info, err);
}

/* Megatron prints from the last rank. */
static bool is_logger(const run *r) { return r->mesh.rank == r->mesh.world - 1; }

/* Megatron's evaluate_and_print_results: eval_iters batches of a split, continuing
 * where the last evaluation of that split stopped. prefix: "iteration N" during
 * training, "iteration N on validation set" / "on test set" after it. */
static int evaluate(run *r, int split, const char *prefix, int64_t iteration, bool after_training, mg_error *err) {
    mg_storage_refresh_borrowed(r->eval_st); /* the weights training just wrote */
    /* Megatron's evaluate: with a loss mask, the mean over the kept tokens of all the
     * batches (each batch's token mean weighted by its kept tokens); else the batches' mean */
    double sum = 0, weight = 0;
    int64_t *done = split == MG_SPLIT_TEST ? &r->test_batches_done : &r->eval_batches_done;
    for (int64_t e = 0; e < r->cfg.eval_iters; e++) {
        uint64_t first = (uint64_t)((*done)++) * (uint64_t)r->cfg.global_batch_size, kept = 1;
        /* Megatron evaluates with the full global batch, ramp or not */
        int rc = fill_batch(r, r->eval_g, r->eval_st, split, first, r->cfg.global_batch_size,
                            r->eval.token_scale ? &kept : NULL, err);
        if (!rc) rc = execute(r, r->eval_g, r->eval_st, r->eval_eng, iteration, false, r->cfg.global_batch_size, err);
        if (rc) return rc;
        sum += (double)kept * *(float *)mg_storage_data(r->eval_st, mg_rank_tensor(&r->eval_rg, r->eval.loss));
        weight += (double)kept;
    }
    double val = weight > 0 ? sum / weight : 0.0;
    if (!is_logger(r)) return MG_OK;
    mg_run_log_evaluation(stdout, prefix, val);
    fflush(stdout);
    char jv[32];
    int rc = metrics_record(r, err, "{\"iteration\": %lld, \"%s\": %s%s}\n", (long long)iteration,
                            split == MG_SPLIT_TEST ? "test_loss" : "val_loss", json_number(jv, val),
                            after_training ? ", \"after_training\": true" : "");
    if (!rc && r->tb)
        rc = mg_run_tb_evaluation(r->tb, iteration, mg_lr_samples_before(&r->schedule, iteration), val,
                                  r->cfg.log_validation_ppl_to_tensorboard, err);
    return rc;
}

/* Which splits get evaluated: Megatron's do_valid / do_test (a split with samples and
 * --eval-iters > 0). */
static bool has_split(const run *r, int split) {
    return r->cfg.eval_iters > 0 && r->data && mg_dataset_num_samples(r->data, split) > 0;
}

/* After training, or instead of it (--skip-train): the validation and test sets. */
static int evaluate_at_end(run *r, int64_t iteration, mg_error *err) {
    static const int splits[] = {MG_SPLIT_VALID, MG_SPLIT_TEST};
    static const char *const names[] = {"validation", "test"};
    char prefix[96];
    for (int k = 0; k < 2; k++) {
        if (!has_split(r, splits[k])) continue;
        snprintf(prefix, sizeof prefix, "iteration %lld on %s set", (long long)iteration, names[k]);
        int rc = evaluate(r, splits[k], prefix, iteration, true, err);
        if (rc) return rc;
    }
    return MG_OK;
}

/* Test hook (MGRAPH_TEST_NAN_AT=RANK:ITERATION): this rank's first weight element
 * becomes NaN before that iteration, the way a bad kernel or bit flip on one rank
 * would show. Tests use it to check that one rank's NaN ends every rank. */
static void poison_a_weight(run *r) {
    for (int i = 0; i < mg_graph_n_tensors(r->train_g); i++) {
        mg_tensor *t = mg_graph_tensor(r->train_g, i);
        if (t->role != MG_ROLE_PARAM || t->dtype != MG_F32 || mg_numel(t) == 0) continue;
        *(float *)mg_storage_data(r->train_st, t) = NAN;
        return;
    }
}

static void read_test_hooks(run *r) {
    const char *v = getenv("MGRAPH_TEST_NAN_AT");
    int rank = -1;
    long long at = 0;
    if (v && sscanf(v, "%d:%lld", &rank, &at) == 2 && rank == r->mesh.rank && at > 0) r->nan_at = at;
}

/* --save: the state after `iteration` iterations. */
static int save(run *r, int64_t iteration, uint64_t consumed, mg_error *err) {
    mg_run_save_state s = {iteration, (int64_t)consumed, r->eval_batches_done, r->resume.seed,
                           mg_tokenizer_vocab_size(r->tok), r->resume.optim_start, r->skipped,
                           r->fp16 ? &r->scaler : NULL};
    double t0 = now_s();
    int rc = mg_run_save(&r->cfg, r->sc, &r->plan, &r->mesh, r->mpi_world, r->train_g, r->train_st, &s, err);
    if (!rc && r->mesh.rank == 0) {
        printf("  successfully saved checkpoint from iteration %7lld to %s [ t %.1f ms ]\n", (long long)iteration,
               r->cfg.save, 1e3 * (now_s() - t0));
        fflush(stdout);
    }
    return rc;
}

static int train(run *r, mg_error *err) {
    mg_run_config *c = &r->cfg;
    double interval_ms = 0, interval_loss = 0;
    int interval_n = 0, interval_nan = 0, interval_skipped = 0, interval_out = 0; /* (out: not in the averages) */
    /* MoE: Megatron's load_balancing_loss and z_loss (without coefficients, mean over MoE
     * layers), logged after the lm loss; absent for dense models */
    const char *moe_names[2] = {r->train.model.cfg.moe.balance == MG_MOE_SEQ_AUX_LOSS ? "seq_load_balancing_loss"
                                                                                      : "load_balancing_loss",
                                "z_loss"}; /* (Megatron's names of each balancing loss) */
    mg_tensor *moe_t[2] = {mg_rank_tensor(&r->train_rg, r->train.load_balancing_loss),
                           mg_rank_tensor(&r->train_rg, r->train.z_loss)};
    double moe_sum[2] = {0, 0};
    bool check_nan = !c->no_check_for_nan_in_loss_and_grad;
    mg_tensor *loss_t = mg_rank_tensor(&r->train_rg, r->train.loss),
              *lr_t = mg_rank_tensor(&r->train_rg, r->train.opt.lr),
              *gn_t = mg_rank_tensor(&r->train_rg, r->train.opt.grad_norm),
              *pn_t = r->train.opt.params_norm ? mg_rank_tensor(&r->train_rg, r->train.opt.params_norm) : NULL;
    if (!loss_t || !lr_t || !gn_t)
        return mg_error_set(err, MG_ERR_RUNTIME, "the step graph lacks lm_loss, optimizer.lr or optimizer.grad_norm");
    int64_t start = r->resume.iteration;
    uint64_t consumed = (uint64_t)r->resume.consumed_samples; /* samples before this iteration */
    exit_signal_install(c);
    for (int64_t it = start; it < c->train_iters; it++) {
        double t0 = now_s();
        /* Megatron's update_num_microbatches(consumed samples): the ramp's batch, else the global batch */
        int64_t gbs = mg_lr_batch_at(&r->schedule, (int64_t)consumed);
        double flops = mg_gpt_flops(&r->train.model.cfg, gbs) / r->mesh.world;
        int rc = fill_batch(r, r->train_g, r->train_st, MG_SPLIT_TRAIN, consumed, gbs, NULL, err);
        if (!rc && it + 1 == r->nan_at) poison_a_weight(r);
        if (!rc) rc = mg_run_trace_before(&r->trace, r->train_eng, it, err);
        if (!rc) rc = execute(r, r->train_g, r->train_st, r->train_eng, it, true, gbs, err);
        if (!rc) rc = mg_run_trace_after(&r->trace, r->train_eng, it, err);
        if (rc) return rc;
        double ms = 1e3 * (now_s() - t0);
        float loss = *(float *)mg_storage_data(r->train_st, loss_t);
        float lr = *(float *)mg_storage_data(r->train_st, lr_t); /* the rate this iteration ran at */
        float gn = *(float *)mg_storage_data(r->train_st, gn_t);
        /* --fp16: gradients that overflowed (Megatron's found_inf; every rank reads the same
         * global norm) skipped the update; the scaler backs off or grows */
        bool skip_here = r->fp16 && !isfinite(gn);
        if (r->fp16) mg_loss_scaler_update(&r->scaler, skip_here);
        r->skipped += skip_here;
        interval_skipped += skip_here;
        /* Megatron logs the scheduler's rate after this iteration's step (the next one's) */
        float lr_logged = mg_lr_at_iteration(&r->schedule, it + 1 - r->skipped);
        double tps = (double)gbs * c->seq_length / (ms * 1e-3);
        double tflops = flops / (ms * 1e-3 * 1e12);
        /* Megatron's --check-for-nan-in-loss-and-grad: a NaN or Inf ends the run, naming
         * the rank that saw it; without the check the run goes on and the log line
         * counts the iterations whose loss or gradient norm was not finite. fp32 has no
         * loss scaler, so no iteration is skipped (Megatron's fp32 optimizer applies
         * every update too). With --fp16 a gradient norm that is not finite is the loss
         * scaler's (a skipped iteration), and only the loss is checked; a skipped
         * iteration's loss leaves the average, and counts as a nan iteration when it is
         * not finite, as Megatron's training_log counts them. */
        bool nan_here = !isfinite(loss) || (!r->fp16 && !isfinite(gn));
        if (nan_here && check_nan) {
            char host[256] = "?";
            gethostname(host, sizeof host - 1);
            return mg_error_set(err, MG_ERR_RUNTIME,
                                "Rank %d: found %s in the %s at iteration %lld (node %s); "
                                "--no-check-for-nan-in-loss-and-grad trains on",
                                r->mesh.rank, isnan(isfinite(loss) ? gn : loss) ? "NaN" : "Inf",
                                isfinite(loss) ? "gradient norm" : "loss", (long long)it + 1, host);
        }
        interval_nan += nan_here;
        char jl[32], jg[32], jm[32], jp[64] = "", moe_json[128] = "", moe_log[128] = "";
        /* --log-params-norm: after the step, as Megatron's calc_params_l2_norm */
        double pnorm = pn_t ? (double)*(float *)mg_storage_data(r->train_st, pn_t) : (double)NAN;
        if (pn_t) {
            char v[32];
            snprintf(jp, sizeof jp, ", \"params_norm\": %s", json_number(v, pnorm));
        }
        for (int i = 0; i < 2; i++)
            if (moe_t[i]) {
                float v = *(float *)mg_storage_data(r->train_st, moe_t[i]);
                if (!nan_here && !skip_here) moe_sum[i] += v;
                size_t o = strlen(moe_json);
                snprintf(moe_json + o, sizeof moe_json - o, ", \"%s\": %s", moe_names[i], json_number(jm, v));
            }
        char jscale[96] = "";
        if (r->fp16) /* the scale after this iteration's update, as Megatron logs it */
            snprintf(jscale, sizeof jscale, ", \"loss_scale\": %.9g, \"skipped\": %s", (double)r->scaler.scale,
                     skip_here ? "true" : "false");
        rc = metrics_record(r, err,
                    "{\"iteration\": %lld, \"lm_loss\": %s%s, \"lr\": %.9e, \"grad_norm\": %s%s%s, \"elapsed_ms\": %.3f, "
                    "\"tokens_per_s\": %.1f, \"tflops\": %.6f}\n",
                    (long long)it + 1, json_number(jl, loss), moe_json, lr, json_number(jg, gn), jp, jscale, ms, tps,
                    tflops);
        if (rc) return rc;
        interval_ms += ms;
        if (!nan_here && !skip_here) interval_loss += loss; /* the average is over the updates' finite losses */
        interval_out += nan_here || skip_here;
        interval_n++;
        /* Megatron prints every --log-interval iterations and after the first one of the
         * run; the first line does not restart the averages */
        bool first = it == start, due = (it + 1) % c->log_interval == 0;
        double avg_ms = interval_ms / interval_n;
        for (int i = 0; i < 2; i++)
            if (moe_t[i]) {
                size_t o = strlen(moe_log);
                snprintf(moe_log + o, sizeof moe_log - o, " %s: %.2f |", moe_names[i],
                         interval_n > interval_out ? moe_sum[i] / (interval_n - interval_out) : (double)NAN);
            }
        mg_run_log_line l = {it + 1, c->train_iters, (int64_t)consumed + gbs, avg_ms, c->log_throughput,
                             flops / (avg_ms * 1e-3 * 1e12), lr_logged, (int)gbs,
                             interval_n > interval_out ? interval_loss / (interval_n - interval_out) : (double)NAN, gn,
                             pnorm, interval_nan, moe_log, c->log_world_size_to_tensorboard ? r->mesh.world : 0,
                             r->fp16 ? r->scaler.scale : 1.0, interval_skipped, skip_here, interval_skipped == interval_n, (double)NAN};
        if (is_logger(r) && (due || first)) {
            mg_run_log_iteration(stdout, &l);
            fflush(stdout);
        }
        if (r->tb && (it + 1) % c->tensorboard_log_interval == 0) rc = mg_run_tb_iteration(r->tb, &l, loss, err);
        if (!rc && r->tb && (moe_t[0] || moe_t[1])) { /* every iteration, as track_moe_metrics */
            const char *names[2];
            double values[2];
            int n = 0;
            for (int i = 0; i < 2; i++)
                if (moe_t[i]) {
                    names[n] = moe_names[i];
                    values[n++] = *(float *)mg_storage_data(r->train_st, moe_t[i]);
                }
            rc = mg_run_tb_moe(r->tb, it + 1, n, names, values, err);
        }
        if (!rc && r->tb && due && !first && c->log_timers_to_tensorboard) rc = mg_run_tb_timers(r->tb, &l, err);
        if (rc) return rc;
        if (due) {
            interval_ms = interval_loss = moe_sum[0] = moe_sum[1] = 0;
            interval_n = interval_nan = interval_skipped = interval_out = 0;
        }
        if (c->eval_interval > 0 && has_split(r, MG_SPLIT_VALID) && (it + 1) % c->eval_interval == 0) {
            char prefix[64];
            snprintf(prefix, sizeof prefix, "iteration %lld", (long long)it + 1);
            rc = evaluate(r, MG_SPLIT_VALID, prefix, it + 1, false, err);
            if (rc) return rc;
        }
        bool saved = false;
        if (c->save && ((c->save_interval > 0 && (it + 1) % c->save_interval == 0) || it + 1 == c->train_iters)) {
            rc = save(r, it + 1, consumed + (uint64_t)gbs, err);
            if (rc) return rc;
            saved = true;
        }
        consumed += (uint64_t)gbs;
        /* Megatron's checkpoint_and_decide_exit: after the exit signal (any rank's), after
         * --exit-duration-in-mins (from the start of the run; every rank takes the latest
         * clock) or at a multiple of --exit-interval, save if not saved, say so and end,
         * without the final evaluation */
        char why[96] = "";
        if (c->exit_signal_handler && exit_signalled(r)) snprintf(why, sizeof why, "after receiving %s", c->exit_signal);
        if (!*why && c->exit_duration_in_mins > 0) {
            double mins = (now_s() - r->t_start) / 60.0;
            if (r->mpi_world > 1)
                mg_run_allreduce(&mins, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD, "--exit-duration-in-mins's all-reduce");
            if (mins > c->exit_duration_in_mins) snprintf(why, sizeof why, "after %g minutes", mins);
        }
        if (!*why && c->exit_interval > 0 && (it + 1) % c->exit_interval == 0)
            snprintf(why, sizeof why, "at iteration %lld", (long long)it + 1);
        if (*why && it + 1 < c->train_iters) {
            if (c->save && !saved && (rc = save(r, it + 1, consumed, err))) return rc;
            if ((rc = mg_run_trace_end_early(&r->trace, r->train_eng, it, is_logger(r), err))) return rc;
            if (is_logger(r)) {
                printf(" exiting program %s\n", why);
                fflush(stdout);
            }
            return MG_OK;
        }
    }
    return evaluate_at_end(r, c->train_iters, err);
}

/* "%r" in a path becomes the rank. MG_ERR_INVALID when the result would not fit
 * (never a silently shortened name: that is another file). */
static int rank_path(const char *pattern, int rank, char *out, size_t len, mg_error *err) {
    size_t o = 0;
    for (const char *p = pattern; *p; p++) {
        if (o + 16 >= len)
            return mg_error_set(err, MG_ERR_INVALID, "--dump-dot path is longer than %zu bytes", len - 16);
        if (p[0] == '%' && p[1] == 'r') {
            o += (size_t)snprintf(out + o, len - o, "%d", rank);
            p++;
        } else {
            out[o++] = *p;
        }
    }
    out[o] = '\0';
    return MG_OK;
}

/* --dump-dot under mpirun needs %r: every rank writes its graph, and ranks writing
 * one file would leave one of them (or, before atomic outputs, a mix). */
static int check_dump_dot(const run *r, int world, mg_error *err) {
    if (!r->cfg.dump_dot) return MG_OK;
    if (world > 1 && !strstr(r->cfg.dump_dot, "%r"))
        return mg_error_set(err, MG_ERR_INVALID,
                            "--dump-dot %s under mpirun: every rank writes its graph, put %%r (the rank) in the name",
                            r->cfg.dump_dot);
    char path[PATH_MAX];
    return rank_path(r->cfg.dump_dot, 1 << 20, path, sizeof path, err);
}

/* A shard rule (plan file or default) that names a dimension its tensor does not have
 * would be ignored by the partitioner: say so instead. The last matching rule is the
 * one that applies, as in the partitioner. */
static int check_shard_rules(const run *r, mg_error *err) {
    const mg_graph *g = r->train.g;
    for (int i = 0; i < mg_graph_n_tensors(g); i++) {
        const mg_tensor *t = mg_graph_tensor((mg_graph *)g, i);
        if (t->role != MG_ROLE_PARAM) continue;
        for (int k = r->plan.n_rules - 1; k >= 0; k--) {
            const mg_shard_rule *rule = &r->plan.rules[k];
            if (fnmatch(rule->pattern, t->name, 0) != 0) continue;
            if (rule->dim >= t->ndim) /* (-1: kept whole) */
                return mg_error_set(err, MG_ERR_INVALID,
                                    "plan: shard rule '%s %d' applies to %s, which has %d dimension%s (0..%d)",
                                    rule->pattern, rule->dim, t->name, t->ndim, t->ndim == 1 ? "" : "s", t->ndim - 1);
            break;
        }
    }
    return MG_OK;
}

/* The graph a rank runs: the logical graph itself on one rank, else its partition. */
static int rank_graph(run *r, mg_step *st, const mg_mesh *mesh, mg_rank_graph *out, mg_error *err) {
    if (mesh->world == 1 && r->plan.matmul_tiles <= 1) return mg_rank_graph_serial(st->g, out, err);
    return mg_partition(st->g, &r->plan, mesh, out, err);
}

/* A DOT dump's title: the rank and every axis the plan uses. */
static void dot_title(const run *r, int rank, int world, char *title, size_t len) {
    const mg_plan *p = &r->plan;
    int n = snprintf(title, len, "mgraph GPT training step, rank %d of %d (tp %d", rank, world, p->tp);
    if (p->cp > 1) n += snprintf(title + n, len - (size_t)n, ", cp %d", p->cp);
    if (p->pp > 1) n += snprintf(title + n, len - (size_t)n, ", pp %d", p->pp);
    if (p->ep > 1) n += snprintf(title + n, len - (size_t)n, ", ep %d", p->ep);
    snprintf(title + n, len - (size_t)n, ", dp %d%s%s%s%s)", world / (p->tp * p->pp * p->cp), p->sequence_parallel ? ", sp" : "",
             p->distributed_optimizer ? ", distributed optimizer" : "", p->fsdp != MG_FSDP_NONE ? ", fsdp " : "",
             p->fsdp != MG_FSDP_NONE ? mg_fsdp_name(p->fsdp) : "");
}

static int dump_dot(run *r, const mg_graph *g, int rank, int world, mg_error *err) {
    char path[PATH_MAX], title[256];
    int rc = rank_path(r->cfg.dump_dot, rank, path, sizeof path, err);
    if (rc) return rc;
    dot_title(r, rank, world, title, sizeof title);
    mg_dot_options dopt = {title, false, false};
    return mg_graph_dump_dot_file(g, path, &dopt, err);
}

static int dump_dot_summary(run *r, const mg_graph *g, int rank, int world, mg_error *err) {
    char path[1024], title[256];
    int rc = rank_path(r->cfg.dump_dot_summary, rank, path, sizeof path, err);
    if (rc) return rc;
    dot_title(r, rank, world, title, sizeof title);
    mg_dot_summary_options o = {title, r->cfg.dot_summary_depth, r->cfg.dot_summary_scope, 0};
    if (r->cfg.dot_summary_phase && mg_dot_parse_phases(r->cfg.dot_summary_phase, &o.phases, err)) return MG_ERR_INVALID;
    return mg_graph_dump_dot_summary_file(g, path, &o, err);
}

/* --dump-dot and --dump-dot-summary of one rank's graph (rank 0 only unless the path has %r) */
static int dump_dots(run *r, const mg_graph *g, int rank, int world, mg_error *err) {
    const char *full = r->cfg.dump_dot, *sum = r->cfg.dump_dot_summary;
    int rc = MG_OK;
    if (full && (rank == 0 || strstr(full, "%r"))) rc = dump_dot(r, g, rank, world, err);
    if (!rc && sum && (rank == 0 || strstr(sum, "%r"))) rc = dump_dot_summary(r, g, rank, world, err);
    return rc;
}

/* Prints the rank's micro-batches per step and which global micro-batches they are
 * (instance i is global micro-batch i * dp + dp rank, as fill_batch reads them). */
static void describe_micro(const run *r, const mg_mesh *m, int rank) {
    int n = mesh_local_micro(r, m, r->cfg.global_batch_size), dp = mesh_dp_size(m);
    char list[160] = "";
    size_t k = 0;
    for (int i = 0; i < n && k < sizeof list - 16; i++) {
        if (i == 6 && n > 8) {
            k += (size_t)snprintf(list + k, sizeof list - k, ", ..., %d", (n - 1) * dp + m->coord[MG_GROUP_DP]);
            break;
        }
        k += (size_t)snprintf(list + k, sizeof list - k, "%s%d", i ? ", " : "", i * dp + m->coord[MG_GROUP_DP]);
    }
    printf("mgraph-run: rank %d: %d micro-batch%s per step (global batch %d / (micro-batch %d x dp %d)): global "
           "micro-batch%s %s\n",
           rank, n, n == 1 ? "" : "es", r->cfg.global_batch_size, r->cfg.micro_batch_size, dp, n == 1 ? "" : "es",
           list);
}

static void describe(const run *r, const mg_graph *g, const mg_mesh *m, int rank) {
    describe_micro(r, m, rank);
    double bytes[MG_GROUP_COUNT];
    mg_plan_comm_bytes(g, mesh_local_micro(r, m, r->cfg.global_batch_size) * split_of(r), bytes);
    int n_comm = 0, n_p2p = 0;
    for (int i = 0; i < mg_graph_n_nodes(g); i++) {
        mg_op op = mg_graph_node(g, i)->op;
        bool p2p = op == MG_OP_SEND || op == MG_OP_RECV;
        /* (the communication ops run from allreduce to cp's ring_shift; attention_merge after them is not one) */
        n_comm += op >= MG_OP_ALLREDUCE && op <= MG_OP_RING_SHIFT && !p2p;
        n_p2p += p2p;
    }
    mg_memplan *p = NULL;
    mg_error e = {0};
    char line[512] = "?", stage[160] = "";
    if (!mg_memplan_build((mg_graph *)g, true, &p, &e)) mg_memplan_summary(p, line, sizeof line);
    double param_bytes = 0; /* the rank's parameters (of the persistent bytes): a 1/dp shard under FSDP */
    for (int i = 0; i < mg_graph_n_tensors(g); i++) {
        const mg_tensor *t = mg_graph_tensor(g, i);
        if (t->role == MG_ROLE_PARAM && !t->src) param_bytes += (double)mg_numel(t) * (double)mg_dtype_size(t->dtype);
    }
    size_t ll = strlen(line);
    snprintf(line + ll, sizeof line - ll, ", parameters %.2f MiB%s", param_bytes / (1024.0 * 1024.0),
             r->plan.fsdp == MG_FSDP_OPTIM_GRADS_PARAMS ? " (sharded over dp: fsdp)" : "");
    mg_memplan_free(p);
    char groups[192] = ""; /* the other groups this plan uses */
    if (r->plan.ep > 1) /* the all-to-all moves what the routing sends: estimated for a balanced routing */
        snprintf(groups, sizeof groups, ", ep %.0f (all-to-all, balanced routing), edp %.0f", bytes[MG_GROUP_EP],
                 bytes[MG_GROUP_EDP]);
    if (r->plan.cp > 1) /* the K/V ring (and, at dp 1, the gradients' all-reduce) over cp; the gradients over dp x cp */
        snprintf(groups + strlen(groups), sizeof groups - strlen(groups), ", cp %.0f, dp_cp %.0f", bytes[MG_GROUP_CP],
                 bytes[MG_GROUP_DP_CP]);
    if (r->plan.pp > 1) { /* a stage keeps its schedule's micro-batches in flight */
        int slots = r->plan.microbatch_slots, need = -1, st = m->coord[MG_GROUP_PP];
        if (pipeline_slots(r, st, &slots, &need, &e)) slots = -1;
        snprintf(stage, sizeof stage,
                 " (pipeline stage %d of %d: its schedule keeps %d micro-batch%s in flight, %d activation slots; %d "
                 "transfers; bytes sent per step: pp %.0f, emb %.0f)",
                 st, r->plan.pp, need, need == 1 ? "" : "es", slots, n_p2p, bytes[MG_GROUP_PP], bytes[MG_GROUP_EMB]);
    }
    printf("mgraph-run: rank %d: %d nodes, %d collectives, bytes sent per step: tp %.0f, dp %.0f%s; memory: %s%s\n",
           rank, mg_graph_n_nodes(g), n_comm, bytes[MG_GROUP_TP], bytes[MG_GROUP_DP], groups, line, stage);
}

/* --recompute-*: Megatron's checks, then the rewrite of the graph this rank runs
 * (after partitioning: recompute is local to a rank, as in Megatron). */
static int recompute_options(const mg_run_config *c, int layers, mg_recompute_options *o, mg_error *err) {
    memset(o, 0, sizeof *o);
    const char *gran = c->recompute_granularity, *method = c->recompute_method;
    if (!gran) return MG_OK;
    o->granularity = strcmp(gran, "full") ? MG_RECOMPUTE_SELECTIVE : MG_RECOMPUTE_FULL;
    o->n_layers = layers;
    if (o->granularity != MG_RECOMPUTE_FULL) return MG_OK;
    if (!method)
        return mg_error_set(err, MG_ERR_INVALID, "--recompute-granularity full needs --recompute-method uniform or block");
    if (!mg_run_config_given(c, "--recompute-num-layers"))
        return mg_error_set(err, MG_ERR_INVALID, "--recompute-granularity full needs --recompute-num-layers");
    if (c->recompute_num_layers < 1 || c->recompute_num_layers > layers)
        return mg_error_set(err, MG_ERR_INVALID, "--recompute-num-layers must be in 1..%d (the layers), got %d", layers,
                            c->recompute_num_layers);
    o->method = strcmp(method, "block") ? MG_RECOMPUTE_UNIFORM : MG_RECOMPUTE_BLOCK;
    o->num_layers = c->recompute_num_layers;
    return MG_OK;
}

/* Full recompute on the logical training graph, before it is partitioned (so the
 * partitioner gives the recomputed layers their own collectives under tensor and context
 * parallelism), counted per model chunk of the plan's pipeline layout. */
static int apply_recompute(run *r, int rank, mg_error *err) {
    mg_recompute_options o;
    int rc = recompute_options(&r->cfg, r->train.model.cfg.num_layers, &o, err);
    if (rc || o.granularity != MG_RECOMPUTE_FULL) return rc;
    o.layer_scope = mg_gpt_is_gpt2(&r->train.model.cfg) ? "h.%d" : "model.layers.%d";
    int cloned = 0, *chunk = NULL;
    if (r->plan.pp > 1) {
        if (!(chunk = malloc(((size_t)o.n_layers + 1) * sizeof *chunk)))
            return mg_error_set(err, MG_ERR_NOMEM, "out of memory");
        rc = mg_plan_layer_vstages(&r->plan, o.n_layers, chunk, NULL, NULL, err);
        o.layer_chunk = chunk;
    }
    if (!rc) rc = mg_graph_recompute(r->train.g, &o, &cloned, err);
    free(chunk);
    if (!rc && rank == 0)
        printf("mgraph-run: activation recompute: full, %s, %d layer%s: %d forward nodes rerun in backward\n",
               o.method == MG_RECOMPUTE_BLOCK ? "block" : "uniform", o.num_layers, o.num_layers == 1 ? "" : "s", cloned);
    return rc;
}

/* --dry-run --world-size N: partition for every rank in this one process. Under
 * mpirun (no --world-size), each process partitions and describes its own rank only. */
static int dry_run_world(run *r, int world, mg_error *err) {
    int first = r->mpi_world > 1 ? r->mesh.rank : 0, end = r->mpi_world > 1 ? r->mesh.rank + 1 : world;
    for (int rank = first; rank < end; rank++) {
        mg_mesh mesh;
        mg_rank_graph R = {0};
        int rc = mg_plan_mesh(&r->plan, world, rank, &mesh, err);
        if (!rc) rc = rank_graph(r, &r->train, &mesh, &R, err);
        if (!rc) describe(r, R.graph, &mesh, rank);
        if (!rc) rc = dump_dots(r, R.graph, rank, world, err);
        mg_rank_graph_release(&R);
        if (rc) return rc;
    }
    return MG_OK;
}


/* Ends the run. Input errors are found by every rank alike before any collective
 * (agree_on_input makes sure), so each rank exits 2 by itself. Once training has
 * started every failure is a run-time one (exit 1), a data error or NaN found
 * mid-run included: it may hit one rank only while the others wait in a collective,
 * so the rank prints its message and then aborts them all (MPI_Abort, before
 * releasing anything: its own StarPU workers may be blocked in a collective too).
 * A rank that dies without a word (SIGKILL) is Open MPI's to notice: mpirun ends
 * the job when one of its processes dies. */
static int finish(run *r, int rc, const mg_error *err) {
    int code = 0;
    if (rc) {
        code = !r->started && mg_status_is_usage(rc) ? 2 : 1;
        if (err->msg[0]) fprintf(stderr, "mgraph-run: %s%s\n", code == 2 ? "error: " : "failed: ", err->msg);
    }
    /* a failed run keeps the whole records it wrote (see metrics_open) */
    mg_error merr = {0};
    r->metrics_complete = !rc;
    if (metrics_close(r, !rc || r->started, &merr)) {
        fprintf(stderr, "mgraph-run: failed: %s\n", merr.msg);
        code = 1;
    }
    fflush(stdout);
    fflush(stderr);
    if (code == 1 && r->mpi_world > 1) MPI_Abort(MPI_COMM_WORLD, code);
    run_release(r);
    int w = mg_wait_begin("MPI_Finalize", NULL, MG_GROUP_WORLD, -1);
    MPI_Finalize();
    mg_wait_end(w);
    mg_watchdog_stop();
    return code;
}

/* All ranks learn whether any rank rejected its input, so none goes on alone. */
static int agree_on_input(run *r, int rc, mg_error *err) {
    if (r->mpi_world == 1) return rc;
    int mine = rc ? (mg_status_is_usage(rc) ? 2 : 1) : 0, worst = 0;
    worst = mine;
    mg_run_allreduce(&worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD, "the ranks' agreement on their input");
    if (worst && !rc) {
        /* another rank printed the reason; this one leaves quietly with the same code */
        err->msg[0] = '\0';
        return worst == 2 ? MG_ERR_INVALID : MG_ERR_RUNTIME;
    }
    return rc;
}

/* Megatron's write_args_to_tensorboard: every argument as a text summary at the iteration
 * the run starts from (mg_run_config_each_arg gives Megatron's names and Python's str()). */
typedef struct tb_args_ctx {
    mg_tb_writer *tb;
    int64_t step;
    mg_error *err;
} tb_args_ctx;

static int tb_arg(void *ctx, const char *name, const char *value) {
    tb_args_ctx *a = ctx;
    return mg_tb_text(a->tb, name, value, a->step, a->err);
}

static int tb_write_args(run *r, mg_error *err) {
    tb_args_ctx a = {r->tb, r->resume.iteration, err};
    return mg_run_config_each_arg(&r->cfg, tb_arg, &a);
}

int main(int argc, char **argv) {
    mg_tool_pick_openblas_kernel(argv);
    run r;
    memset(&r, 0, sizeof r);
    r.t_start = now_s();
    mg_error err = {0};
    mg_step_config sc;
    /* a stopped or failed run leaves no temporary file and no half-written checkpoint */
    mg_tool_install_fatal_handlers("mgraph-run", keep_metrics);
    /* Collectives run on StarPU workers, one at a time (the engine serialises them):
     * MPI_THREAD_SERIALIZED is what that needs. */
    int provided, world = 1, rank = 0;
    /* Several ranks sharing a node's cores: a rank waiting in a collective must yield
     * its core to the peer it waits for, not spin on it (Open MPI reads this at init). */
    if (local_ranks() > 1) setenv("OMPI_MCA_mpi_yield_when_idle", "1", 0);
    /* Pipeline transfers are posted from workers beside the collectives (scheduler/
     * starpu_p2p.c): ask for MPI_THREAD_MULTIPLE; SERIALIZED is enough without pp. */
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    r.mpi_world = world;
    r.mesh.world = world;
    r.mesh.rank = rank;
    mg_run_config_defaults(&r.cfg);
    mg_run_notes notes = {0};
    mg_run_config_parse(&r.cfg, argc, argv, &notes);
    if (!notes.n_errors && r.cfg.help) {
        if (rank == 0) mg_run_config_usage(stdout);
        return finish(&r, 0, &err);
    }
    check_limits(&r.cfg, &notes);
    mg_run_config_check(&r.cfg, &notes);
    /* every blocking wait from here on is bounded (before the first collective) */
    if (world > 1) {
        int64_t mins = notes.n_errors ? 10 : r.cfg.distributed_timeout_minutes;
        char flag[64];
        snprintf(flag, sizeof flag, "--distributed-timeout-minutes %lld", (long long)mins);
        mg_error werr = {0};
        if (mg_watchdog_start(60.0 * (double)mins, flag, rank, on_wait_expired, NULL, &werr))
            fprintf(stderr, "mgraph-run: warning: %s: waits are not bounded\n", werr.msg);
    }
    if (r.cfg.bf16) apply_bf16(&notes);
    int rc = MG_OK;
    if (!rc && provided < MPI_THREAD_SERIALIZED && world > 1)
        rc = mg_error_set(&err, MG_ERR_RUNTIME, "MPI provides thread level %d, mgraph needs MPI_THREAD_SERIALIZED", provided);
    int plan_world = world;
    if (!rc && mg_run_config_given(&r.cfg, "--world-size")) {
        if (!r.cfg.dry_run) rc = mg_error_set(&err, MG_ERR_INVALID, "--world-size is for --dry-run (use mpirun -np N to run N ranks)");
        else if (world > 1) rc = mg_error_set(&err, MG_ERR_INVALID, "--world-size partitions in one process: run it without mpirun");
        else if (r.cfg.world_size < 1 || r.cfg.world_size > 1 << 20)
            rc = mg_error_set(&err, MG_ERR_INVALID, "--world-size must be in 1..%d (got %d)", 1 << 20, r.cfg.world_size);
        else plan_world = r.cfg.world_size;
    }
    if (!rc) rc = check_dump_dot(&r, world, &err);
    if (!rc) {
        mg_recompute_options ro;
        rc = recompute_options(&r.cfg, r.cfg.num_layers, &ro, &err); /* (the plan: checked after partitioning) */
    }
    if (!rc)
        rc = mg_run_trace_check(r.cfg.trace_file, r.cfg.trace_iterations, r.cfg.train_iters, world,
                                !strcmp(r.cfg.engine, "starpu"), &err);
    /* --plan auto: the planner's choice, as if its sizes were given (tools/run_plan.c) */
    if (!rc && r.cfg.plan_file && !strcmp(r.cfg.plan_file, "auto"))
        rc = mg_run_plan_auto(&r.cfg, plan_world, rank == 0 ? stdout : NULL, &err);
    if (!rc) rc = resolve_plan(&r, plan_world, &err);
    if (!rc && r.plan.pp > 1 && world > 1 && provided < MPI_THREAD_MULTIPLE)
        rc = mg_error_set(&err, MG_ERR_RUNTIME,
                          "pipeline parallelism needs MPI_THREAD_MULTIPLE (this MPI provides thread level %d)", provided);
    /* every bad flag of the command line in one run, plan problems included */
    if (rc && mg_status_is_usage(rc)) {
        mg_run_notes_error(&notes, "%s", err.msg);
        mg_error_clear(&err);
        rc = MG_OK;
    }
    if (rank == 0) mg_run_notes_print(&notes, stderr);
    if (!rc && notes.n_errors)
        rc = MG_ERR_INVALID; /* the notes above said why */
    if (!rc && r.cfg.demo && rank == 0) {
        printf("mgraph-run: no flags given: the demo run, as if given");
        for (const char *const *a = mg_run_config_demo_args(); *a; a++) printf(" %s", *a);
        printf("\n");
    }
    if (!rc) /* with --world-size, the mesh of rank 0 of the planned world (every rank is partitioned below) */
        rc = mg_plan_mesh(&r.plan, plan_world, plan_world == world ? rank : 0, &r.mesh, &err);
    if (!rc) rc = resolve(&r.cfg, plan_world / (r.plan.tp * r.plan.pp * r.plan.cp), &sc, &err);
    rc = resolve_split(&r, &sc, rc, &err);
    if (!rc) rc = open_data(&r, &sc, &err);
    if (!rc) {
        mg_plan_model pm = {sc.model.hidden, sc.model.heads, sc.model.ffn_hidden, sc.model.seq_length,
                            sc.model.vocab, r.cfg.global_batch_size, r.cfg.micro_batch_size,
                            mg_gpt_kv_groups(&sc.model), sc.model.num_layers};
        rc = mg_plan_check_model(&r.plan, plan_world, &pm, &err);
    }
    if (!rc) rc = check_expert_parallel(&r, &sc.model, &err);
    /* (before the step graph: the checkpoint may set the learning-rate schedule) */
    if (!rc) rc = mg_run_resume_open(&r.cfg, &sc.model, mg_tokenizer_vocab_size(r.tok), &sc.optim.lr, &r.resume, &err);
    /* --fp16: the loss scaler, resumed from the checkpoint's with the optimizer (Megatron's
     * grad_scaler state) */
    r.fp16 = r.cfg.fp16;
    r.scaler = mg_run_config_loss_scaler(&r.cfg);
    r.skipped = r.resume.skipped;
    if (r.fp16 && r.scaler.dynamic && r.resume.has_scaler) {
        r.scaler.scale = r.resume.scale;
        r.scaler.growth_tracker = r.resume.growth_tracker;
        r.scaler.hysteresis_tracker = r.resume.hysteresis_tracker;
    }
    if (!rc) rc = mg_step_build(&sc, &r.train, &err);
    if (!rc) rc = check_shard_rules(&r, &err);
    bool with_eval = !rc && (has_split(&r, MG_SPLIT_VALID) || has_split(&r, MG_SPLIT_TEST));
    if (!rc) r.schedule = sc.optim.lr;
    r.sc = &sc;
    if (!rc && !r.cfg.skip_train)
        rc = mg_run_trace_open(&r.trace, r.cfg.trace_file, r.cfg.trace_iterations, r.resume.iteration, r.cfg.train_iters,
                               rank, &err);
    /* the learning rate follows the iteration, the data and batch the consumed samples:
     * under a ramp they must agree (Megatron reads both from its checkpoint) */
    if (!rc && r.schedule.ramp_start > 0 &&
        r.resume.consumed_samples != mg_lr_samples_before(&r.schedule, r.resume.iteration))
        rc = mg_error_set(&err, MG_ERR_INVALID,
                          "--load: %lld iterations consumed %lld samples, but --rampup-batch-size and "
                          "--global-batch-size give %lld: resume with the flags the checkpoint was trained with",
                          (long long)r.resume.iteration, (long long)r.resume.consumed_samples,
                          (long long)mg_lr_samples_before(&r.schedule, r.resume.iteration));
    if (!rc && r.cfg.skip_train && !with_eval) rc = mg_error_set(&err, MG_ERR_INVALID, "--skip-train needs --eval-iters >= 1");
    if (!rc && with_eval) {
        mg_step_config ec = sc;
        ec.training = false;
        rc = mg_step_build(&ec, &r.eval, &err);
    }
    rc = agree_on_input(&r, rc, &err);
    if (rc) return finish(&r, rc, &err);
    char ep_desc[64] = "";
    if (r.plan.ep > 1)
        snprintf(ep_desc, sizeof ep_desc, ", ep %d (%d experts per rank)", r.plan.ep, sc.model.moe.num_experts / r.plan.ep);
    char cpdesc[32] = ""; /* context parallelism, when on */
    if (r.plan.cp > 1) snprintf(cpdesc, sizeof cpdesc, ", cp %d", r.plan.cp);
    char pp_desc[160] = "";
    if (r.plan.pp > 1)
        snprintf(pp_desc, sizeof pp_desc, ", pp %d (%d model chunk%s per stage, %s schedule)", r.plan.pp, r.plan.vpp,
                 r.plan.vpp == 1 ? "" : "s",
                 mg_pp_schedule_name(r.plan.pp_schedule == MG_PP_SCHEDULE_AUTO
                                         ? (r.plan.vpp > 1 ? MG_PP_SCHEDULE_INTERLEAVED : MG_PP_SCHEDULE_1F1B)
                                         : r.plan.pp_schedule));
    char split_desc[96] = "";
    if (r.split > 1)
        snprintf(split_desc, sizeof split_desc, ", each run as %d sub-batches of %d (--micro-batch-split)", r.split,
                 sc.micro_batch);
    if (rank == 0)
        printf("mgraph-run: GPT %d layers, hidden %d, heads %d, ffn %d, seq %d, vocab %lld (padded), %.2fM parameters; "
               "micro-batch %d, global batch %d = %d micro-batches per step; %d rank(s): tp %d%s, dp %d%s%s%s%s; "
               "%d micro-batch%s per rank per step%s\n",
               sc.model.num_layers, sc.model.hidden, sc.model.heads, sc.model.ffn_hidden, sc.model.seq_length,
               (long long)sc.model.vocab, (double)mg_gpt_num_params(&sc.model) / 1e6, r.cfg.micro_batch_size,
               r.cfg.global_batch_size, r.cfg.global_batch_size / r.cfg.micro_batch_size, plan_world, r.plan.tp, cpdesc, plan_world / (r.plan.tp * r.plan.pp * r.plan.cp),
               ep_desc, r.plan.sequence_parallel ? ", sequence parallel" : "",
               r.plan.fsdp == MG_FSDP_OPTIM_GRADS_PARAMS ? ", fsdp optim_grads_params (parameters, gradients and optimizer "
                                                           "state sharded over dp)"
               : r.plan.fsdp == MG_FSDP_OPTIM_GRADS ? ", fsdp optim_grads (gradients and optimizer state sharded over dp)"
               : r.plan.distributed_optimizer       ? ", distributed optimizer"
                                                    : "",
               pp_desc, local_micro(&r),
               local_micro(&r) == 1 ? "" : "es", split_desc);
    if (r.cfg.dry_run) {
        rc = apply_recompute(&r, rank, &err);
        if (!rc) rc = dry_run_world(&r, plan_world, &err);
        return finish(&r, rc, &err);
    }
    rc = apply_recompute(&r, rank, &err);
    if (!rc) rc = rank_graph(&r, &r.train, &r.mesh, &r.train_rg, &err);
    if (!rc && with_eval) rc = rank_graph(&r, &r.eval, &r.mesh, &r.eval_rg, &err);
    r.train_g = r.train_rg.graph;
    r.eval_g = r.eval_rg.graph;
    if (!rc && r.cfg.dump_dot) rc = dump_dot(&r, r.train_g, rank, world, &err);
    if (!rc && r.cfg.dump_dot_summary) rc = dump_dot_summary(&r, r.train_g, rank, world, &err);
    /* one job saves into a directory at a time (before any output file is made) */
    if (!rc && r.cfg.save && !r.cfg.skip_train && rank == 0) rc = mg_ckpt_lock_take(r.cfg.save, &r.save_lock, &err);
    if (!rc && mg_ckpt_lock_warning(r.save_lock)) fprintf(stderr, "mgraph-run: warning: %s\n", mg_ckpt_lock_warning(r.save_lock));
    if (!rc && r.cfg.metrics_file && is_logger(&r)) rc = metrics_open(&r, &err);
    if (!rc && r.cfg.tensorboard_dir && is_logger(&r)) rc = mg_tb_open(r.cfg.tensorboard_dir, &r.tb, &err);
    if (!rc && r.tb) rc = tb_write_args(&r, &err);
    rc = agree_on_input(&r, rc, &err);
    if (rc) return finish(&r, rc, &err);
    r.started = true;
    read_test_hooks(&r);
    if (!rc && world > 1) rc = mg_comm_new(&r.mesh, &r.comm, &err);
    if (!rc) rc = prepare(&r, r.train_g, &r.train_plan, &r.train_st, &r.train_eng, &err);
    if (!rc && with_eval) rc = prepare(&r, r.eval_g, &r.eval_plan, &r.eval_st, &r.eval_eng, &err);
    rc = agree_on_input(&r, rc, &err); /* a checkpoint one rank could not read stops them all */
    if (rc && mg_status_is_usage(rc)) r.started = false; /* --load of a bad checkpoint: input, exit 2 everywhere */
    /* --skip-train evaluates the first --eval-iters validation batches, whatever the
     * checkpoint had drawn: the same windows for every model compared */
    r.eval_batches_done = r.cfg.skip_train ? 0 : r.resume.eval_batches_done;
    bool loaded = r.resume.ck != NULL; /* (--load of a directory without a checkpoint starts fresh, and says so) */
    mg_run_resume_close(&r.resume);
    if (!rc && r.cfg.load && loaded && rank == 0)
        printf("  loaded checkpoint from %s at iteration %lld\n", r.cfg.load, (long long)r.resume.iteration);
    if (!rc && rank == 0) {
        describe(&r, r.train_g, &r.mesh, rank);
        double up = now_s() - r.t_start;
        struct rusage ru; /* CPU time: what start-up costs whatever else the machine runs */
        getrusage(RUSAGE_SELF, &ru);
        double cpu = (double)ru.ru_utime.tv_sec + 1e-6 * (double)ru.ru_utime.tv_usec + (double)ru.ru_stime.tv_sec +
                     1e-6 * (double)ru.ru_stime.tv_usec;
        printf("mgraph-run: start-up %.2f s, %.2f s CPU (model, data and partition %.2f s; memory plan %.2f s; "
               "storage and weights %.2f s; StarPU %.2f s)\n",
               up, cpu, up - r.plan_s - r.memory_s - r.engine_s, r.plan_s, r.memory_s, r.engine_s);
        if (r.train_eng) { /* how many CPU workers run, and never fewer than asked in silence */
            mg_engine_stats es;
            mg_engine_get_stats(r.train_eng, &es);
            printf("mgraph-run: StarPU runs %d CPU worker%s per rank (policy %s)\n", es.n_cpu_workers,
                   es.n_cpu_workers == 1 ? "" : "s", es.policy);
            if (es.n_cpu_workers < es.n_cpu_wanted)
                fprintf(stderr,
                        "mgraph-run: warning: %d CPU workers asked for (--cpu-workers, STARPU_NCPU or the cores of "
                        "this rank), StarPU runs %d: this StarPU build runs at most %d (STARPU_MAXCPUS); "
                        "tools/build-starpu.sh --cpus builds one without that cap\n",
                        es.n_cpu_wanted, es.n_cpu_workers, es.cpu_cap);
        }
        fflush(stdout);
    }
    if (!rc) rc = r.cfg.skip_train ? evaluate_at_end(&r, r.resume.iteration, &err) : train(&r, &err);
    /* (under pipeline parallelism every stage's first rank says it: the idle time of a
     * stage is its bubble) */
    bool stage_head = r.plan.pp > 1 && r.mesh.coord[MG_GROUP_TP] == 0 && r.mesh.coord[MG_GROUP_DP] == 0 &&
                      r.mesh.coord[MG_GROUP_CP] == 0;
    if (!rc && r.train_eng && (is_logger(&r) || stage_head)) {
        mg_engine_stats es;
        mg_engine_get_stats(r.train_eng, &es);
        char st[48] = "";
        if (r.plan.pp > 1) snprintf(st, sizeof st, " (pipeline stage %d)", r.mesh.coord[MG_GROUP_PP]);
        printf("mgraph-run: last step on StarPU%s: %lld tasks, %d workers, %.1f ms, idle %.1f%%\n", st,
               (long long)es.tasks, es.n_workers, es.wall_s * 1e3, 100.0 * es.idle_fraction);
    }
    if (!rc && r.tb) { /* the event file is put in place by a run that succeeded only */
        mg_tb_writer *tb = r.tb;
        r.tb = NULL;
        rc = mg_tb_close(tb, &err);
    }
    return finish(&r, rc, &err);
}

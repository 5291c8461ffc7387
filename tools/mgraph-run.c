/* mgraph-run: trains a GPT model with mgraph, Megatron-style flags and log line, or the
 * model of a shared library (--model-lib, mgraph/model_lib.h, tools/run_model_lib.c).
 *
 * argv -> configuration (tools/run_config.c) -> the model, its data and the plan
 * (tools/run_setup.c) -> the trainer (mgraph/trainer.h), with mgraph-run's hooks
 * (tools/run_hooks.c: log lines, metrics, TensorBoard, trace) and checkpoint metadata
 * (tools/run_checkpoint.c).
 *
 * Exit status: 0 success, 2 bad usage or input (one message on stderr), 1 failure
 * while running.
 */
#include <mpi.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "mgraph/checkpoint.h"
#include "mgraph/gpt_data.h"
#include "mgraph/trainer.h"
#include "mgraph/watchdog.h"
#include "blas_env.h"
#include "run_checkpoint.h"
#include "run_config.h"
#include "run_describe.h"
#include "run_hooks.h"
#include "run_model_lib.h"
#include "run_plan.h"
#include "run_setup.h"
#include "run_trace.h"
#include "tool_signals.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Everything one run owns, released by run_release. */
typedef struct run {
    int world, rank;            /* processes launched (mpirun -np), this one */
    mg_run_config cfg;
    mg_plan plan;
    mg_step_config sc;          /* the GPT model's step */
    mg_tokenizer *tok;
    mg_dataset *data;
    mg_gpt_data feed;           /* the trainer's data source over data */
    mg_run_ckpt_model ckpt;     /* the checkpoints' model metadata */
    mg_run_model_lib ml;        /* --model-lib: the user's model (ml.path NULL: GPT) */
    mg_trainer *t;
    mg_run_hooks hooks;
    mg_ckpt_lock *save_lock;    /* --save: rank 0 holds the directory's lock for the whole run */
    bool started;               /* past the last input check: every failure now is a run-time one */
    double t_start;             /* main entered (the "start-up" line) */
} run;

static void run_release(run *r) {
    mg_ckpt_lock_release(r->save_lock);
    mg_trainer_free(r->t);
    mg_gpt_data_release(&r->feed);
    mg_dataset_free(r->data);
    mg_tokenizer_free(r->tok);
    mg_run_model_lib_close(&r->ml); /* (after the trainer: the model's user data is the library's) */
}

/* Ends the run. Input errors are found by every rank alike before any collective (the
 * ranks agree on them), so each rank exits 2 by itself. Once training has started
 * every failure is a run-time one (exit 1), a data error or NaN found mid-run
 * included: it may hit one rank only while the others wait in a collective, so the
 * rank prints its message and then aborts them all (MPI_Abort, before releasing
 * anything: its own StarPU workers may be blocked in a collective too). A rank that
 * dies without a word (SIGKILL) is Open MPI's to notice: mpirun ends the job when one
 * of its processes dies. */
static int finish(run *r, int rc, const mg_error *err) {
    int code = 0;
    if (rc) {
        code = !r->started && mg_status_is_usage(rc) ? 2 : 1;
        if (err->msg[0]) fprintf(stderr, "mgraph-run: %s%s\n", code == 2 ? "error: " : "failed: ", err->msg);
    }
    /* a failed run keeps the whole records it wrote (tools/run_hooks.c) */
    mg_error herr = {0};
    if (mg_run_hooks_close(&r->hooks, !rc, r->started, &herr)) {
        fprintf(stderr, "mgraph-run: failed: %s\n", herr.msg);
        code = 1;
    }
    fflush(stdout);
    fflush(stderr);
    if (code == 1 && r->world > 1) mg_world_abort(code);
    run_release(r);
    mg_world_finalize();
    mg_watchdog_stop();
    return code;
}

static double gpt_flops(void *user, int64_t samples) { return mg_gpt_flops(&((mg_step_config *)user)->model, samples); }

/* Which splits get evaluated: Megatron's do_valid / do_test (a split with samples and
 * --eval-iters > 0). */
static bool has_split(const run *r, int split) {
    if (r->cfg.eval_iters <= 0) return false;
    const mg_data_source *d = &r->ml.lib.data;
    if (d->feed) return d->num_samples && d->num_samples(d->user, split) > 0; /* (--model-lib's own data) */
    return r->data && mg_dataset_num_samples(r->data, split) > 0;
}

static int signal_number(const char *name) {
    static const struct { const char *name; int sig; } sigs[] = {
        {"SIGTERM", SIGTERM}, {"SIGINT", SIGINT}, {"SIGHUP", SIGHUP}, {"SIGUSR1", SIGUSR1}, {"SIGUSR2", SIGUSR2}};
    for (size_t i = 0; i < sizeof sigs / sizeof *sigs; i++)
        if (!strcmp(sigs[i].name, name)) return sigs[i].sig;
    return SIGTERM; /* (the flag's choices are these) */
}

/* The trainer's configuration from the flags, for the GPT model of r->sc. */
static mg_trainer_config trainer_config(run *r, const mg_recompute_options *ro, int plan_world) {
    mg_run_config *c = &r->cfg;
    mg_step_config *sc = &r->sc;
    mg_trainer_config tc = mg_trainer_defaults();
    tc.model = (mg_model){"gpt", mg_gpt_forward_fn, sc, sc->model.num_layers,
                          mg_gpt_is_gpt2(&sc->model) ? "h.%d" : "model.layers.%d", sc->model.moe.num_experts > 0,
                          gpt_flops};
    tc.data = mg_gpt_data_source(&r->feed);
    tc.plan = r->plan;
    tc.micro_batch = c->micro_batch_size;
    tc.global_batch = c->global_batch_size;
    tc.loss_token_mean = sc->loss_token_mean;
    tc.per_token_loss = sc->per_token_loss;
    tc.optim = sc->optim;
    tc.precision = sc->precision;
    tc.fp8 = sc->fp8; /* --fp8-format: the recipe's state lives in the trainer */
    /* --fp16: Megatron's loss scaler (the trainer continues a checkpoint's with the optimizer) */
    if (c->fp16) tc.loss_scaler = mg_run_config_loss_scaler(c);
    tc.seed = (uint64_t)c->seed;
    tc.world_size = plan_world != r->world ? plan_world : 0;
    tc.dry_run = c->dry_run;
    tc.reference = strcmp(c->engine, "starpu") != 0;
    tc.sched_policy = c->sched_policy;
    tc.cpu_workers = c->cpu_workers;
    tc.overlap_grad_reduce = c->overlap_grad_reduce;
    tc.recompute = *ro;
    tc.eval = has_split(r, MG_SPLIT_VALID) || has_split(r, MG_SPLIT_TEST);
    tc.eval_iters = c->eval_iters;
    tc.eval_interval = c->eval_interval;
    tc.train_iters = c->train_iters;
    tc.check_nan = !c->no_check_for_nan_in_loss_and_grad;
    tc.nan_advice = "; --no-check-for-nan-in-loss-and-grad trains on";
    tc.exit_interval = c->exit_interval;
    tc.exit_duration_mins = c->exit_duration_in_mins;
    tc.exit_signal = c->exit_signal_handler ? signal_number(c->exit_signal) : 0;
    r->ckpt = (mg_run_ckpt_model){c, &sc->model, r->tok ? mg_tokenizer_vocab_size(r->tok) : 0};
    tc.ckpt = (mg_trainer_checkpoint){c->load, c->save, c->save_interval, c->save_retain, c->no_save_optim,
                                      c->no_save_rng, c->no_load_optim || c->skip_train, c->no_load_rng, c->finetune,
                                      c->exit_on_missing_checkpoint, c->override_opt_param_scheduler,
                                      c->use_checkpoint_opt_param_scheduler, c->async_save,
                                      c->non_persistent_save_interval > 0 ? c->non_persistent_local_ckpt_dir : NULL,
                                      c->non_persistent_save_interval, mg_run_ckpt_meta, mg_run_ckpt_check, &r->ckpt};
    if (r->ml.path) { /* --model-lib: its model, its data (else the GPT data above), its metadata */
        const mg_model_lib *L = &r->ml.lib;
        tc.model = L->model;
        if (L->data.feed) tc.data = L->data;
        tc.loss_token_mean = L->loss_token_mean;
        tc.per_token_loss = L->per_token_loss;
        bool own = L->meta || L->check;
        tc.ckpt.meta = own ? L->meta : mg_run_model_lib_meta;
        tc.ckpt.check = own ? L->check : mg_run_model_lib_check;
        tc.ckpt.user = own ? L->user : &r->ml;
    }
    return tc;
}

/* The GPT model, its data and its step configuration from the checked flags. */
static int gpt_setup(run *r, int plan_world, mg_error *err) {
    mg_run_config *c = &r->cfg;
    const mg_plan *p = &r->plan;
    int rc = mg_run_resolve_step(c, plan_world / (p->tp * p->pp * p->cp), &r->sc, err);
    /* a sub-batch's loss is the mean over its own kept tokens: with a loss mask the
     * sub-batches' means do not average to the micro-batch's mean (with the per-token
     * loss each sub-batch's sum is divided by the global batch's count: they do) */
    if (!rc && c->eod_mask_loss && !c->calculate_per_token_loss && p->micro_batch_split > 1)
        rc = mg_error_set(err, MG_ERR_UNSUPPORTED,
                          "micro-batch split %d with --eod-mask-loss is not supported (the loss is the mean over the "
                          "micro-batch's unmasked tokens, which its sub-batches do not share; with "
                          "--calculate-per-token-loss they do)",
                          p->micro_batch_split);
    if (!rc) rc = mg_run_open_data(c, p->tp, &r->sc, &r->tok, &r->data, err);
    if (!rc) {
        const mg_gpt_config *m = &r->sc.model;
        mg_plan_model pm = {m->hidden, m->heads, m->ffn_hidden, m->seq_length, m->vocab, c->global_batch_size,
                            c->micro_batch_size, mg_gpt_kv_groups(m), m->num_layers};
        rc = mg_plan_check_model(p, plan_world, &pm, err);
    }
    if (!rc) rc = mg_run_check_expert_parallel(c, p, &r->sc.model, err);
    if (!rc && c->skip_train && !has_split(r, MG_SPLIT_VALID) && !has_split(r, MG_SPLIT_TEST))
        rc = mg_error_set(err, MG_ERR_INVALID, "--skip-train needs --eval-iters >= 1");
    if (!rc) {
        r->feed = (mg_gpt_data){r->data, c->seq_length, mg_tokenizer_vocab_size(r->tok), mg_tokenizer_type(r->tok),
                                mg_tokenizer_eod(r->tok), c->eod_mask_loss, c->reset_position_ids,
                                c->reset_attention_mask, NULL};
        rc = mg_gpt_data_init(&r->feed, err);
    }
    return rc;
}

/* --model-lib: mgraph-run's GPT model flags would change nothing, so giving one is an
 * error naming it (the library's own flags size its model). */
static void check_lib_flags(const mg_run_config *c, const mg_run_model_lib *L, mg_run_notes *n) {
    static const char *gpt[] = {"--num-layers", "--hidden-size", "--ffn-hidden-size", "--num-attention-heads",
                                "--num-query-groups", "--num-experts", "--swiglu", "--normalization",
                                "--position-embedding-type", "--max-position-embeddings", NULL};
    for (const char **f = gpt; *f; f++)
        if (mg_run_config_given(c, *f))
            mg_run_notes_error(n, "%s is a flag of mgraph-run's GPT model: with --model-lib %s the library's own flags "
                                  "give its model (--help lists them)",
                               *f, L->path);
}

/* --model-lib: the optimizer, schedule and batch from the flags, mgraph-run's data when a
 * data flag names some, then the library's model (and perhaps its own data). */
static int lib_setup(run *r, int plan_world, mg_error *err) {
    mg_run_config *c = &r->cfg;
    const mg_plan *p = &r->plan;
    int rc = mg_run_resolve_step(c, plan_world / (p->tp * p->pp * p->cp), &r->sc, err);
    bool data_given = c->text_file || c->data_path || c->split_data_path[0] || c->split_data_path[1] ||
                      c->split_data_path[2];
    if (!rc && data_given) rc = mg_run_open_data(c, p->tp, &r->sc, &r->tok, &r->data, err);
    mg_model_lib_host h = {MG_MODEL_LIB_ABI, r->ml.path, r->ml.argc, r->ml.argv, c->micro_batch_size,
                           c->global_batch_size, c->seq_length, (uint64_t)c->seed, c->hidden_dropout,
                           c->attention_dropout, p, plan_world, r->rank, r->data,
                           r->tok ? mg_tokenizer_vocab_size(r->tok) : 0, r->tok ? r->sc.model.vocab : 0,
                           r->tok ? mg_tokenizer_eod(r->tok) : -1};
    if (!rc) rc = mg_run_model_lib_open(&r->ml, &h, err);
    if (!rc && !r->ml.lib.data.feed && !r->data)
        rc = mg_error_set(err, MG_ERR_INVALID,
                          "--model-lib %s gives no data source of its own: give --text-file or --data-path (mgraph-run "
                          "then feeds input_ids and labels)",
                          r->ml.path);
    if (!rc && c->skip_train && !has_split(r, MG_SPLIT_VALID) && !has_split(r, MG_SPLIT_TEST))
        rc = mg_error_set(err, MG_ERR_INVALID, "--skip-train needs --eval-iters >= 1 (and validation data)");
    if (!rc && !r->ml.lib.data.feed) {
        r->feed = (mg_gpt_data){r->data, c->seq_length, mg_tokenizer_vocab_size(r->tok), mg_tokenizer_type(r->tok),
                                mg_tokenizer_eod(r->tok), c->eod_mask_loss, c->reset_position_ids,
                                c->reset_attention_mask, NULL};
        rc = mg_gpt_data_init(&r->feed, err);
    }
    return rc;
}

/* The model's name in titles and descriptions. */
static const char *model_name(const run *r) { return r->ml.path ? r->ml.lib.model.name : "GPT"; }

static void print_model(const run *r) {
    const mg_gpt_config *m = &r->sc.model;
    char model[256];
    if (r->ml.path) { /* the library's model: its parameters counted in the logical step graph */
        const mg_graph *g = mg_trainer_train_step(r->t)->g;
        double n = 0;
        for (int i = 0; i < mg_graph_n_tensors(g); i++) {
            const mg_tensor *t = mg_graph_tensor(g, i);
            if (t->role == MG_ROLE_PARAM && !t->model_copy) n += (double)mg_numel(t);
        }
        snprintf(model, sizeof model, "%s (--model-lib %s), %.0f parameters", model_name(r), r->ml.path, n);
        mg_run_print_plan(&r->cfg, r->t, model, 0);
        return;
    }
    snprintf(model, sizeof model, "GPT %d layers, hidden %d, heads %d, ffn %d, seq %d, vocab %lld (padded), %.2fM parameters",
             m->num_layers, m->hidden, m->heads, m->ffn_hidden, m->seq_length, (long long)m->vocab,
             (double)mg_gpt_num_params(m) / 1e6);
    mg_run_print_plan(&r->cfg, r->t, model, m->moe.num_experts);
}

/* After start: the checkpoint line, this rank's description, the start-up time. */
static void print_started(const run *r) {
    const mg_run_config *c = &r->cfg;
    /* (--load of a directory without a checkpoint starts fresh, and said so) */
    if (c->load && !mg_trainer_load_warning(r->t) && r->rank == 0)
        printf("  loaded checkpoint from %s at iteration %lld\n",
               mg_trainer_loaded_from(r->t) ? mg_trainer_loaded_from(r->t) : c->load, (long long)mg_trainer_iteration(r->t));
    if (r->rank != 0) return;
    mg_run_describe(c, r->t, mg_trainer_rank_graph(r->t, false)->graph, mg_trainer_mesh(r->t), r->rank);
    double up = now_s() - r->t_start, memplan, storage, engine;
    mg_trainer_timings(r->t, NULL, &memplan, &storage, &engine);
    struct rusage ru; /* CPU time: what start-up costs whatever else the machine runs */
    getrusage(RUSAGE_SELF, &ru);
    double cpu = (double)ru.ru_utime.tv_sec + 1e-6 * (double)ru.ru_utime.tv_usec + (double)ru.ru_stime.tv_sec +
                 1e-6 * (double)ru.ru_stime.tv_usec;
    printf("mgraph-run: start-up %.2f s, %.2f s CPU (model, data and partition %.2f s; memory plan %.2f s; "
           "storage and weights %.2f s; StarPU %.2f s)\n",
           up, cpu, up - memplan - storage - engine, memplan, storage, engine);
    mg_engine *eng = mg_trainer_engine(r->t);
    if (eng) { /* how many CPU workers run, and never fewer than asked in silence */
        mg_engine_stats es;
        mg_engine_get_stats(eng, &es);
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

/* The last step's engine statistics, from the logger (and, under pipeline
 * parallelism, every stage's first rank: the idle time of a stage is its bubble). */
static void print_last_step(const run *r) {
    const mg_mesh *m = mg_trainer_mesh(r->t);
    mg_engine *eng = mg_trainer_engine(r->t);
    bool stage_head = r->plan.pp > 1 && m->coord[MG_GROUP_TP] == 0 && m->coord[MG_GROUP_DP] == 0 && m->coord[MG_GROUP_CP] == 0;
    if (!eng || (m->rank != m->world - 1 && !stage_head)) return;
    mg_engine_stats es;
    mg_engine_get_stats(eng, &es);
    char st[48] = "";
    if (r->plan.pp > 1) snprintf(st, sizeof st, " (pipeline stage %d)", m->coord[MG_GROUP_PP]);
    printf("mgraph-run: last step on StarPU%s: %lld tasks, %d workers, %.1f ms, idle %.1f%%\n", st, (long long)es.tasks,
           es.n_workers, es.wall_s * 1e3, 100.0 * es.idle_fraction);
}

int main(int argc, char **argv) {
    mg_tool_pick_openblas_kernel(argv);
    run r;
    memset(&r, 0, sizeof r);
    r.t_start = now_s();
    mg_error err = {0};
    /* a stopped or failed run leaves no temporary file and no half-written checkpoint */
    mg_tool_install_fatal_handlers("mgraph-run", mg_run_keep_metrics);
    if (mg_world_init(&argc, &argv, &err)) {
        fprintf(stderr, "mgraph-run: failed: %s\n", err.msg);
        return 1;
    }
    int world = r.world = mg_world_size(), rank = r.rank = mg_world_rank(), provided = mg_world_thread_level();
    mg_run_config_defaults(&r.cfg);
    mg_run_notes notes = {0};
    /* --model-lib: the library is loaded (its ABI checked) and its own flags are taken
     * out of the command line before mgraph-run parses the rest */
    int lrc = mg_run_model_lib_load(&argc, argv, &r.ml, &err);
    if (lrc) return finish(&r, lrc, &err);
    mg_run_config_parse(&r.cfg, argc, argv, &notes);
    if (!notes.n_errors && r.cfg.help) {
        if (rank == 0) mg_run_config_usage(stdout);
        if (rank == 0) mg_run_model_lib_usage(&r.ml, stdout);
        return finish(&r, 0, &err);
    }
    if (r.ml.path) check_lib_flags(&r.cfg, &r.ml, &notes);
    char ckpt_args[2048];
    if (!notes.n_errors) mg_run_use_checkpoint_args(&r.cfg, &notes, ckpt_args, sizeof ckpt_args);
    if (!notes.n_errors && ckpt_args[0] && rank == 0) { /* (Megatron prints each flag it sets) */
        for (char *p = ckpt_args; (p = strchr(p, '\n'));) *p = ' ';
        printf("mgraph-run: --use-checkpoint-args: from %s: %s\n", r.cfg.load, ckpt_args);
    }
    mg_run_check_limits(&r.cfg, &notes);
    mg_run_config_check(&r.cfg, &notes);
    /* every blocking wait from here on is bounded (before the first collective) */
    if (world > 1) {
        int64_t mins = notes.n_errors ? 10 : r.cfg.distributed_timeout_minutes;
        char flag[64];
        snprintf(flag, sizeof flag, "--distributed-timeout-minutes %lld", (long long)mins);
        mg_error werr = {0};
        if (mg_watchdog_start(60.0 * (double)mins, flag, rank, mg_run_on_wait_expired, NULL, &werr))
            fprintf(stderr, "mgraph-run: warning: %s: waits are not bounded\n", werr.msg);
    }
    if (r.cfg.bf16) mg_run_apply_bf16(&notes);
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
    if (!rc) rc = mg_run_check_dump_dot(&r.cfg, world, &err);
    mg_recompute_options ro = {0};
    /* (the plan: checked after partitioning; a library's layers once it is open) */
    if (!rc && !r.ml.path) rc = mg_run_recompute_options(&r.cfg, r.cfg.num_layers, &ro, &err);
    if (!rc)
        rc = mg_run_trace_check(r.cfg.trace_file, r.cfg.trace_iterations, r.cfg.train_iters, world,
                                !strcmp(r.cfg.engine, "starpu"), &err);
    /* --plan auto: the planner's choice, as if its sizes were given (tools/run_plan.c) */
    if (!rc && r.cfg.plan_file && !strcmp(r.cfg.plan_file, "auto"))
        rc = mg_run_plan_auto(&r.cfg, plan_world, rank == 0 ? stdout : NULL, &err);
    if (!rc) rc = mg_run_resolve_plan(&r.cfg, plan_world, rank, &r.plan, &err);
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
    if (!rc && notes.n_errors) rc = MG_ERR_INVALID; /* the notes above said why */
    if (!rc && r.cfg.demo && rank == 0) {
        printf("mgraph-run: no flags given: the demo run, as if given");
        for (const char *const *a = mg_run_config_demo_args(); *a; a++) printf(" %s", *a);
        printf("\n");
    }
    if (!rc) rc = r.ml.path ? lib_setup(&r, plan_world, &err) : gpt_setup(&r, plan_world, &err);
    if (!rc && r.ml.path) rc = mg_run_recompute_options(&r.cfg, r.ml.lib.model.num_layers, &ro, &err);
    rc = mg_world_agree(rc, &err); /* (the trainer's creation is collective: all ranks or none) */
    if (!rc) {
        mg_trainer_config tc = trainer_config(&r, &ro, plan_world);
        rc = mg_trainer_new(&tc, &r.t, &err);
    }
    if (!rc && rank == 0 && mg_trainer_load_warning(r.t))
        fprintf(stderr, "mgraph-run: warning: %s\n", mg_trainer_load_warning(r.t));
    if (rc) return finish(&r, rc, &err);
    if (rank == 0) print_model(&r);
    if (r.cfg.dry_run) return finish(&r, mg_run_dry_run(&r.cfg, r.t, model_name(&r), world, &err), &err);
    rc = mg_trainer_partition(r.t, &err);
    if (!rc && rank == 0) mg_run_print_recompute(&ro, mg_trainer_recomputed(r.t));
    if (!rc)
        rc = mg_run_dump_dots(&r.cfg, &r.plan, model_name(&r), mg_trainer_rank_graph(r.t, false)->graph, rank, world, true,
                              &err);
    /* one job saves into a directory at a time (before any output file is made) */
    if (!rc && r.cfg.save && !r.cfg.skip_train && rank == 0) rc = mg_ckpt_lock_take(r.cfg.save, &r.save_lock, &err);
    if (!rc && mg_ckpt_lock_warning(r.save_lock)) fprintf(stderr, "mgraph-run: warning: %s\n", mg_ckpt_lock_warning(r.save_lock));
    if (!rc) rc = mg_run_hooks_open(&r.hooks, &r.cfg, rank, world, &err);
    if (!rc) rc = mg_run_hooks_attach(&r.hooks, r.t, &err);
    if (!rc && r.cfg.sample_interval > 0 && !r.cfg.skip_train)
        rc = mg_run_hooks_sampling(&r.hooks, r.tok, &r.sc.model, &r.plan, &err);
    rc = mg_world_agree(rc, &err);
    if (rc) return finish(&r, rc, &err);
    r.started = true;
    rc = mg_trainer_start(r.t, &err); /* (collective: a checkpoint one rank could not read stops them all) */
    if (rc && mg_status_is_usage(rc)) r.started = false; /* --load of a bad checkpoint: input, exit 2 everywhere */
    /* --skip-train evaluates the first --eval-iters validation batches, whatever the
     * checkpoint had drawn: the same windows for every model compared */
    if (!rc && r.cfg.skip_train) mg_trainer_rewind_evaluation(r.t);
    if (!rc) print_started(&r);
    if (!rc) rc = r.cfg.skip_train ? mg_trainer_evaluate_at_end(r.t, &err) : mg_trainer_train(r.t, &err);
    if (!rc) print_last_step(&r);
    return finish(&r, rc, &err);
}

/* The trainer (include/mgraph/trainer.h): plan checks, mesh, step graphs, partition,
 * memory plan, storage and engine; one step; evaluation; what it holds. The loop and
 * its hooks are loop.c's, feeding feed.c's, checkpoints checkpoint.c's. */
#include <limits.h>
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "mgraph/dataset.h"
#include "runtime/trainer_internal.h"

double mg_trainer_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

mg_trainer_config mg_trainer_defaults(void) {
    mg_trainer_config c;
    memset(&c, 0, sizeof c);
    mg_plan_defaults(&c.plan);
    c.micro_batch = 1;
    c.optim = mg_adamw_defaults();
    c.seed = 1234;
    c.check_nan = true;
    return c;
}

int mg_trainer_dp(const mg_mesh *m) { return m->size[MG_GROUP_DP] > 0 ? m->size[MG_GROUP_DP] : 1; }

int mg_trainer_local_micro(const mg_trainer *t, const mg_mesh *m, int64_t gbs) {
    return (int)(gbs / t->cfg.micro_batch / mg_trainer_dp(m));
}

int mg_trainer_instances(const mg_trainer *t, int64_t gbs) {
    return mg_trainer_local_micro(t, &t->mesh, gbs) * t->split;
}

/* CPU workers a rank gets: the cores shared among the ranks of this node. */
static int workers_here(const mg_trainer *t) {
    if (t->cfg.cpu_workers > 0) return t->cfg.cpu_workers;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int w = (int)(cores / mg_world_local_ranks());
    return w < 1 ? 1 : w > 64 ? 64 : w;
}

/* ---- creation: checks, mesh, split, graphs -------------------------------------------------- */
static int check_config(const mg_trainer *t, int provided, mg_error *err) {
    const mg_trainer_config *c = &t->cfg;
    if (!c->model.forward) return mg_error_set(err, MG_ERR_INVALID, "trainer: the model has no forward function");
    if (c->micro_batch < 1) return mg_error_set(err, MG_ERR_INVALID, "trainer: micro-batch size must be >= 1 (got %d)", c->micro_batch);
    int dp = mg_trainer_dp(&t->mesh);
    int64_t unit = (int64_t)c->micro_batch * dp;
    if (c->global_batch < 0 || c->global_batch % unit)
        return mg_error_set(err, MG_ERR_INVALID,
                            "trainer: the global batch %d is not a multiple of micro-batch %d x data-parallel size %d",
                            c->global_batch, c->micro_batch, dp);
    if (c->plan.pp > 1 && t->world > 1 && !c->dry_run && provided < MPI_THREAD_MULTIPLE)
        return mg_error_set(err, MG_ERR_RUNTIME,
                            "pipeline parallelism needs MPI_THREAD_MULTIPLE (this MPI provides thread level %d)", provided);
    if (t->world > 1 && !c->dry_run && provided < MPI_THREAD_SERIALIZED)
        return mg_error_set(err, MG_ERR_RUNTIME, "MPI provides thread level %d, mgraph needs MPI_THREAD_SERIALIZED",
                            provided);
    if (c->plan.pp > 1 && c->model.num_layers < 1)
        return mg_error_set(err, MG_ERR_INVALID,
                            "trainer: pipeline parallelism places the model's layers on stages: give model.num_layers "
                            "(and mark each layer with mg_graph_set_layer)");
    if (c->recompute.granularity == MG_RECOMPUTE_FULL && (!c->model.layer_scope || c->model.num_layers < 1))
        return mg_error_set(err, MG_ERR_INVALID,
                            "trainer: full recompute rewrites the model's layers: give model.num_layers and model.layer_scope");
    if ((c->eval || c->train_iters > 0) && !c->data.feed)
        return mg_error_set(err, MG_ERR_INVALID, "trainer: no data source (data.feed)");
    return MG_OK;
}

/* Sub-batches per micro-batch: the plan's, or the fewest giving every worker a chain;
 * the same on every rank (the smallest any rank picks: tensor-parallel peers must run
 * the same instances). Every rank takes part whatever rc says. */
static int agree_split(mg_trainer *t, int rc, mg_error *err) {
    const mg_trainer_config *c = &t->cfg;
    bool whole = c->model.whole_micro_batches;
    if (!rc) rc = mg_plan_check_split(&c->plan, c->micro_batch, whole, err);
    /* a sub-batch's loss is the mean over its own tokens: with a token mean the
     * sub-batches' means do not average to the micro-batch's (with the per-token loss
     * each sub-batch's sum is divided by the global batch's count: they do) */
    bool mb_mean = c->loss_token_mean && !c->per_token_loss;
    if (!rc && mb_mean && c->plan.micro_batch_split > 1)
        rc = mg_error_set(err, MG_ERR_UNSUPPORTED,
                          "micro-batch split %d with a loss averaged over each micro-batch's tokens is not supported "
                          "(its sub-batches do not share them; with the per-token loss they do)",
                          c->plan.micro_batch_split);
    int k = rc       ? INT_MAX
            : mb_mean ? 1
                      : mg_plan_micro_batch_split(&c->plan, c->micro_batch,
                                                  mg_trainer_local_micro(t, &t->mesh, c->global_batch), workers_here(t),
                                                  whole);
    if (t->collective) mg_rt_allreduce(&k, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD, "the micro-batch split's all-reduce");
    if (!rc) t->split = k;
    return rc;
}

static int build_graph(mg_trainer *t, mg_trainer_graph *G, bool training, mg_error *err) {
    const mg_trainer_config *c = &t->cfg;
    mg_step_options o = {c->micro_batch / t->split, (int)(c->global_batch / c->micro_batch) * t->split, training,
                         c->loss_token_mean, c->per_token_loss, c->optim, c->precision, c->fp8};
    int rc = mg_train_step_build(&o, c->model.forward, c->model.user, &G->step, err);
    if (!rc) rc = mg_plan_check_graph(&c->plan, t->world, G->step.g, err);
    return rc;
}

int mg_trainer_new(const mg_trainer_config *cfg, mg_trainer **out, mg_error *err) {
    *out = NULL;
    mg_trainer *t = calloc(1, sizeof *t);
    if (!t) return mg_error_set(err, MG_ERR_NOMEM, "trainer: out of memory");
    t->cfg = *cfg;
    t->t_created = mg_trainer_now();
    t->split = 1;
    mg_trainer_config *c = &t->cfg;
    int rc = c->serial ? MG_OK : mg_world_init(NULL, NULL, err);
    int mpi_world = c->serial || rc ? 1 : mg_world_size(), rank = c->serial || rc ? 0 : mg_world_rank();
    t->collective = mpi_world > 1;
    t->world = mpi_world;
    if (!rc && c->dry_run && c->world_size > 0) {
        if (mpi_world > 1)
            rc = mg_error_set(err, MG_ERR_INVALID, "trainer: a dry run for %d ranks partitions in one process: run it alone",
                              c->world_size);
        t->world = c->world_size;
    }
    if (!rc) rc = mg_plan_check(&c->plan, t->world, err);
    /* (a dry run for another world lays out rank 0 of it: every rank is partitioned there) */
    if (!rc)
        rc = mg_plan_mesh(&c->plan, t->world, t->world == mpi_world ? rank : 0, &t->mesh, err);
    if (!rc && c->global_batch == 0) c->global_batch = c->micro_batch * mg_trainer_dp(&t->mesh);
    if (!rc) rc = check_config(t, c->serial ? MPI_THREAD_MULTIPLE : mg_world_thread_level(), err);
    /* mixed precision's matrix products round their inputs to bf16 (the portable kernel
     * where the CPU lacks AVX512-BF16: the same bits) */
    if (!rc && c->precision.params == MG_BF16) rc = mg_gemm_set_precision(MG_GEMM_BF16, true, err);
    rc = agree_split(t, rc, err);
    t->seed = c->seed;
    t->scaler = c->loss_scaler;
    if (!rc && t->scaler.scale > 0 && mg_loss_scaler_invalid(&t->scaler))
        rc = mg_error_set(err, MG_ERR_INVALID, "trainer: loss scaler: %s", mg_loss_scaler_invalid(&t->scaler));
    if (!rc) rc = mg_trainer_load_open(t, err); /* (before the graphs: the checkpoint may set the schedule) */
    if (!rc) rc = build_graph(t, &t->train, true, err);
    if (!rc && c->eval) rc = build_graph(t, &t->eval, false, err);
    if (!rc && c->fp8.format != MG_FP8_OFF) rc = mg_fp8_state_init(&t->fp8, &c->fp8, t->train.step.fp8_gemms, err);
    t->graphs_s = mg_trainer_now() - t->t_created;
    if (t->collective) rc = mg_world_agree(rc, err);
    if (rc) {
        mg_trainer_free(t);
        return rc;
    }
    *out = t;
    return MG_OK;
}

/* ---- partition ------------------------------------------------------------------------------- */
/* The graph a rank runs: the logical graph itself on one rank, else its partition. */
static int rank_graph(mg_trainer *t, mg_graph *L, const mg_mesh *mesh, mg_rank_graph *out, mg_error *err) {
    if (mesh->world == 1 && t->cfg.plan.matmul_tiles <= 1) return mg_rank_graph_serial(L, out, err);
    return mg_partition(L, &t->cfg.plan, mesh, out, err);
}

/* Full recompute, once, on the logical training graph before it is partitioned: the
 * partitioner then gives the recomputed forward its own collectives (tensor and context
 * parallelism) in every rank's agreed order. Counted per model chunk, as Megatron's
 * transformer blocks do, from the plan's pipeline layout. */
static int recompute(mg_trainer *t, mg_error *err) {
    if (t->recompute_done || t->cfg.recompute.granularity != MG_RECOMPUTE_FULL) return MG_OK;
    mg_recompute_options o = t->cfg.recompute;
    o.n_layers = t->cfg.model.num_layers;
    o.layer_scope = t->cfg.model.layer_scope;
    int *chunk = NULL, rc = MG_OK;
    if (t->cfg.plan.pp > 1) {
        if (!(chunk = malloc(((size_t)o.n_layers + 1) * sizeof *chunk)))
            return mg_error_set(err, MG_ERR_NOMEM, "trainer: out of memory");
        rc = mg_plan_layer_vstages(&t->cfg.plan, o.n_layers, chunk, NULL, NULL, err);
        o.layer_chunk = chunk;
    }
    if (!rc) rc = mg_graph_recompute(t->train.step.g, &o, &t->recomputed, err);
    free(chunk);
    if (!rc) t->recompute_done = true;
    return rc;
}

int mg_trainer_partition(mg_trainer *t, mg_error *err) {
    if (t->partitioned) return MG_OK;
    double t0 = mg_trainer_now();
    int rc = recompute(t, err);
    if (!rc) rc = rank_graph(t, t->train.step.g, &t->mesh, &t->train.rg, err);
    if (!rc && t->cfg.eval) rc = rank_graph(t, t->eval.step.g, &t->mesh, &t->eval.rg, err);
    t->graphs_s += mg_trainer_now() - t0;
    if (!rc) t->partitioned = true;
    return rc;
}

int mg_trainer_partition_rank(mg_trainer *t, int rank, mg_mesh *mesh, mg_rank_graph *out, int *cloned, mg_error *err) {
    memset(out, 0, sizeof *out);
    const mg_plan *p = &t->cfg.plan;
    int rc = mg_plan_mesh(p, t->world, rank, mesh, err);
    if (!rc) rc = recompute(t, err);
    if (!rc) rc = rank_graph(t, t->train.step.g, mesh, out, err);
    if (cloned) *cloned = t->recomputed;
    return rc;
}

/* ---- start: memory, storage, engines ---------------------------------------------------------- */
int mg_trainer_pipeline_slots(const mg_trainer *t, const mg_mesh *m, int *slots, int *need_out, mg_error *err) {
    const mg_plan *p = &t->cfg.plan;
    int need = 0;
    int rc = mg_pp_schedule_in_flight(p->pp_schedule, p->pp, p->vpp, m->coord[MG_GROUP_PP],
                                      mg_trainer_local_micro(t, m, t->cfg.global_batch), &need, err);
    if (!rc && need > *slots) *slots = need;
    if (!rc && need_out) *need_out = need;
    return rc;
}

/* Where StarPU puts a rank's workers when several ranks share a node. StarPU binds
 * worker i to core i in every process, so two ranks would stack their workers on the
 * same cores: give each node-local rank its own cores, or, when the ranks outnumber
 * the cores, let the OS place threads (pinned, spinning workers of oversubscribed
 * ranks starve each other). The user's own settings win. */
static void place_workers(const mg_trainer *t) {
    const char *lr = getenv("OMPI_COMM_WORLD_LOCAL_RANK");
    if (!lr || mg_world_local_ranks() == 1 || getenv("STARPU_WORKERS_NOBIND") || getenv("STARPU_WORKERS_CPUID")) return;
    int rank = atoi(lr), workers = workers_here(t);
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    if ((long)mg_world_local_ranks() * workers > cores) {
        setenv("STARPU_WORKERS_NOBIND", "1", 1);
        return;
    }
    char list[1024];
    size_t o = 0;
    for (int w = 0; w < workers && o + 16 < sizeof list; w++)
        o += (size_t)snprintf(list + o, sizeof list - o, "%s%d", w ? " " : "", rank * workers + w);
    setenv("STARPU_WORKERS_CPUID", list, 1);
}

static int prepare(mg_trainer *t, mg_trainer_graph *G, mg_error *err) {
    const mg_trainer_config *c = &t->cfg;
    mg_graph *g = G->rg.graph;
    double t0 = mg_trainer_now();
    int rc = mg_memplan_build(g, !c->no_buffer_reuse, &G->plan, err);
    t->memplan_s += mg_trainer_now() - t0;
    t0 = mg_trainer_now();
    /* sub-batches: as many in flight as whole micro-batches would be (same memory); the
     * evaluation graph runs on the training graph's parameters (no copies) */
    int slots = c->plan.microbatch_slots * t->split;
    mg_storage_options so = {mg_trainer_instances(t, c->global_batch), slots > 64 ? 64 : slots,
                             G == &t->eval ? t->train.st : NULL};
    if (!rc && c->plan.pp > 1) rc = mg_trainer_pipeline_slots(t, &t->mesh, &so.n_slots, NULL, err);
    if (!rc) rc = mg_storage_new_ex(g, G->plan, &so, &G->st, err);
    if (!rc) rc = mg_storage_init(G->st, c->seed, err);
    /* the checkpoint's state, before the engine takes the buffers */
    if (!rc && G == &t->train) rc = mg_trainer_load_fill(t, err);
    if (!rc) rc = mg_trainer_feed_constants(t, G, err);
    double t1 = mg_trainer_now();
    t->storage_s += t1 - t0;
    if (!rc && !c->reference) {
        place_workers(t);
        int workers = c->cpu_workers <= 0 && mg_world_local_ranks() == 1 ? 0 : workers_here(t);
        mg_engine_options eo = {c->sched_policy, workers, true, c->overlap_grad_reduce, c->plan.pp,
                                t->mesh.coord[MG_GROUP_PP], c->plan.vpp, c->plan.pp_schedule};
        rc = mg_engine_new(g, G->st, &eo, &G->eng, err);
    }
    t->engine_s += mg_trainer_now() - t1;
    return rc;
}

int mg_trainer_start(mg_trainer *t, mg_error *err) {
    if (t->started) return MG_OK;
    if (t->cfg.dry_run) return mg_error_set(err, MG_ERR_INVALID, "trainer: a dry run does not start");
    int rc = mg_trainer_partition(t, err);
    if (!rc && t->world > 1) rc = mg_comm_new(&t->mesh, &t->comm, err);
    if (!rc) rc = prepare(t, &t->train, err);
    if (!rc && t->cfg.eval) rc = prepare(t, &t->eval, err);
    mg_trainer_load_close(t);
    /* a checkpoint one rank could not read stops them all */
    if (t->collective) rc = mg_world_agree(rc, err);
    if (!rc) t->started = true;
    return rc;
}

/* ---- running ----------------------------------------------------------------------------------- */
int mg_trainer_execute(mg_trainer *t, mg_trainer_graph *G, int64_t iteration, bool training, int64_t gbs,
                       mg_error *err) {
    mg_exec_info info = {.seed = t->seed, .iteration = iteration, .optim_start = t->optim_start, .skipped = t->skipped,
                         .training = training, .comm = t->comm, .n_micro = mg_trainer_instances(t, gbs),
                         .mb_offset = t->mesh.coord[MG_GROUP_DP], .mb_stride = mg_trainer_dp(&t->mesh),
                         .mb_split = t->split, .fp8 = t->fp8.n_slots ? &t->fp8 : NULL};
    if (training && t->fp8.n_slots) mg_fp8_state_begin(&t->fp8);
    int rc = G->eng ? mg_engine_run(G->eng, &info, err) : mg_exec_reference(G->rg.graph, G->st, &info, err);
    /* fp8's delayed scaling: this step's amax of every slot is the maximum over the ranks
     * (those that hold no part of a product contribute 0), then the scales move, alike
     * on every rank */
    if (!rc && training && t->fp8.n_slots) {
        if (t->collective)
            MPI_Allreduce(MPI_IN_PLACE, t->fp8.amax, t->fp8.n_slots, MPI_UINT32_T, MPI_MAX, MPI_COMM_WORLD);
        mg_fp8_state_update(&t->fp8);
    }
    return rc;
}

static double read_scalar(const mg_trainer_graph *G, const mg_tensor *lt) {
    mg_tensor *t = lt ? mg_rank_tensor(&G->rg, lt) : NULL;
    return t ? (double)*(float *)mg_storage_data(G->st, t) : (double)NAN;
}

int mg_trainer_step(mg_trainer *t, mg_step_result *r, mg_error *err) {
    memset(r, 0, sizeof *r);
    int rc = mg_trainer_start(t, err);
    if (rc) return rc;
    const mg_trainer_config *c = &t->cfg;
    mg_trainer_graph *G = &t->train;
    double t0 = mg_trainer_now();
    int64_t it = t->iteration;
    /* Megatron's update_num_microbatches(consumed samples): the ramp's batch, else the global batch */
    int64_t gbs = c->optim.lr.ramp_start > 0 ? mg_lr_batch_at(&c->optim.lr, (int64_t)t->consumed) : c->global_batch;
    rc = mg_trainer_feed(t, G, MG_SPLIT_TRAIN, t->consumed, gbs, it, NULL, err);
    for (int h = 0; h < t->n_hooks && !rc; h++)
        if (t->hooks[h].before_step) rc = t->hooks[h].before_step(t->hooks[h].user, t, it, err);
    if (!rc) rc = mg_trainer_execute(t, G, it, true, gbs, err);
    if (rc) return rc;
    r->iteration = it + 1;
    r->global_batch = gbs;
    r->consumed_samples = (int64_t)t->consumed + gbs;
    r->loss = read_scalar(G, G->step.loss);
    r->lr = read_scalar(G, G->step.opt.lr);
    r->grad_norm = read_scalar(G, G->step.opt.grad_norm);
    r->params_norm = read_scalar(G, G->step.opt.params_norm);
    r->num_zeros = read_scalar(G, G->step.opt.num_zeros);
    r->n_metrics = G->step.n_metrics;
    for (int i = 0; i < r->n_metrics; i++) {
        r->metrics[i] = read_scalar(G, G->step.metrics[i]);
        r->metric_names[i] = G->step.metrics[i]->name;
    }
    r->flops = c->model.flops ? c->model.flops(c->model.user, gbs) / t->mesh.world : 0;
    r->finite = isfinite(r->loss) && isfinite(r->grad_norm);
    /* fp16: an overflow skipped the update (every rank reads the same global norm) */
    bool fp16 = c->precision.params == MG_F16;
    r->skipped = fp16 && !isfinite(r->grad_norm);
    if (fp16 && t->scaler.scale > 0) mg_loss_scaler_update(&t->scaler, r->skipped);
    r->loss_scale = fp16 && t->scaler.scale > 0 ? t->scaler.scale : 1.0;
    t->skipped += r->skipped;
    t->iteration = it + 1;
    t->consumed += (uint64_t)gbs;
    r->ms = 1e3 * (mg_trainer_now() - t0);
    /* Megatron's --check-for-nan-in-loss-and-grad: a NaN or Inf ends the run, naming the
     * rank that saw it. (fp16: a gradient norm that is not finite is an overflow the loss
     * scaler skipped, and only the loss is checked.) */
    if ((!isfinite(r->loss) || (!fp16 && !isfinite(r->grad_norm))) && c->check_nan) {
        char host[256] = "?";
        gethostname(host, sizeof host - 1);
        return mg_error_set(err, MG_ERR_RUNTIME, "Rank %d: found %s in the %s at iteration %lld (node %s)%s",
                            t->mesh.rank, isnan(isfinite(r->loss) ? r->grad_norm : r->loss) ? "NaN" : "Inf",
                            isfinite(r->loss) ? "gradient norm" : "loss", (long long)it + 1, host,
                            c->nan_advice ? c->nan_advice : "");
    }
    for (int h = 0; h < t->n_hooks && !rc; h++)
        if (t->hooks[h].after_step) rc = t->hooks[h].after_step(t->hooks[h].user, t, r, err);
    return rc;
}

int mg_trainer_evaluate(mg_trainer *t, int split, double *loss, mg_error *err) {
    *loss = 0;
    if (!t->cfg.eval) return mg_error_set(err, MG_ERR_INVALID, "trainer: evaluation was not configured (cfg.eval)");
    int rc = mg_trainer_start(t, err);
    if (rc) return rc;
    mg_trainer_graph *G = &t->eval;
    mg_storage_refresh_borrowed(G->st); /* the weights training just wrote */
    /* Megatron's evaluate: with a token mean, the mean over the tokens of all the
     * batches (each batch's mean weighted by its tokens); else the batches' mean.
     * Megatron evaluates with the full global batch, ramp or not. */
    double sum = 0, weight = 0;
    int64_t *done = split == MG_SPLIT_TEST ? &t->test_done : &t->eval_done, gbs = t->cfg.global_batch;
    for (int64_t e = 0; e < t->cfg.eval_iters; e++) {
        uint64_t first = (uint64_t)((*done)++) * (uint64_t)gbs, count = 1;
        rc = mg_trainer_feed(t, G, split, first, gbs, t->iteration, G->step.token_scale ? &count : NULL, err);
        if (!rc) rc = mg_trainer_execute(t, G, t->iteration, false, gbs, err);
        if (rc) return rc;
        sum += (double)count * read_scalar(G, G->step.loss);
        weight += (double)count;
    }
    *loss = weight > 0 ? sum / weight : 0.0;
    return MG_OK;
}

/* ---- what it holds --------------------------------------------------------------------------- */
const mg_trainer_config *mg_trainer_config_of(const mg_trainer *t) { return &t->cfg; }
const mg_train_step *mg_trainer_train_step(const mg_trainer *t) { return &t->train.step; }
const mg_train_step *mg_trainer_eval_step(const mg_trainer *t) { return t->cfg.eval ? &t->eval.step : NULL; }
const mg_mesh *mg_trainer_mesh(const mg_trainer *t) { return &t->mesh; }
int mg_trainer_world(const mg_trainer *t) { return t->world; }
const mg_plan *mg_trainer_plan(const mg_trainer *t) { return &t->cfg.plan; }
const mg_rank_graph *mg_trainer_rank_graph(const mg_trainer *t, bool eval) { return eval ? &t->eval.rg : &t->train.rg; }
mg_storage *mg_trainer_storage(const mg_trainer *t, bool eval) { return eval ? t->eval.st : t->train.st; }
mg_engine *mg_trainer_engine(const mg_trainer *t) { return t->train.eng; }
mg_comm *mg_trainer_comm(const mg_trainer *t) { return t->comm; }
const mg_fp8_state *mg_trainer_fp8(const mg_trainer *t) { return t->fp8.n_slots ? &t->fp8 : NULL; }
int mg_trainer_split(const mg_trainer *t) { return t->split; }
int64_t mg_trainer_iteration(const mg_trainer *t) { return t->iteration; }
int64_t mg_trainer_skipped(const mg_trainer *t) { return t->skipped; }
uint64_t mg_trainer_consumed(const mg_trainer *t) { return t->consumed; }
int64_t mg_trainer_eval_batches_done(const mg_trainer *t) { return t->eval_done; }
int mg_trainer_recomputed(const mg_trainer *t) { return t->recomputed; }
void mg_trainer_rewind_evaluation(mg_trainer *t) { t->eval_done = t->test_done = 0; }

void mg_trainer_timings(const mg_trainer *t, double *graphs_s, double *memplan_s, double *storage_s, double *engine_s) {
    if (graphs_s) *graphs_s = t->graphs_s;
    if (memplan_s) *memplan_s = t->memplan_s;
    if (storage_s) *storage_s = t->storage_s;
    if (engine_s) *engine_s = t->engine_s;
}

void *mg_trainer_data(const mg_trainer *t, const mg_tensor *lt, const mg_tensor **local) {
    if (local) *local = NULL;
    if (!lt) return NULL;
    const mg_trainer_graph *gs[2] = {&t->train, &t->eval};
    for (int k = 0; k < 2; k++) {
        const mg_trainer_graph *G = gs[k];
        if (!G->st || lt->id >= G->rg.n_logical || mg_graph_tensor(G->step.g, lt->id) != lt) continue;
        mg_tensor *r = mg_rank_tensor(&G->rg, lt);
        if (local) *local = r;
        return r ? mg_storage_data(G->st, r) : NULL;
    }
    return NULL;
}

int mg_trainer_add_hooks(mg_trainer *t, const mg_trainer_hooks *h, mg_error *err) {
    if (t->n_hooks == MG_TRAINER_MAX_HOOKS)
        return mg_error_set(err, MG_ERR_INVALID, "trainer: more than %d sets of hooks", MG_TRAINER_MAX_HOOKS);
    t->hooks[t->n_hooks++] = *h;
    return MG_OK;
}

static void graph_release(mg_trainer_graph *G) {
    mg_engine_free(G->eng);
    mg_storage_free(G->st);
    mg_memplan_free(G->plan);
    mg_rank_graph_release(&G->rg);
    mg_train_step_release(&G->step);
}

void mg_trainer_free(mg_trainer *t) {
    if (!t) return;
    mg_trainer_save_abandon(t);
    mg_trainer_load_close(t);
    mg_comm_free(t->comm);
    /* the evaluation storage borrows the training one's parameters: it goes first */
    graph_release(&t->eval);
    graph_release(&t->train);
    mg_fp8_state_free(&t->fp8);
    free(t);
}

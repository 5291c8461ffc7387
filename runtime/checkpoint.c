/* The trainer's checkpoints (include/mgraph/trainer.h: mg_trainer_save, cfg.ckpt) on
 * top of include/mgraph/checkpoint.h.
 *
 * The one place that knows how a rank's physical graph maps onto logical pieces
 * (parameters and Adam moments by their logical names; the distributed optimizer's
 * flat moment segments of a tensor-parallel block), and what the run state is
 * (iteration, consumed samples, validation position, learning-rate schedule, seed,
 * plan); the model's own metadata (its flags) is the caller's (cfg.ckpt.meta / check).
 * With several ranks, saves and loads are collective over MPI_COMM_WORLD, and a
 * checkpoint saved under one plan loads under any other (resharding is the checkpoint
 * reader's).
 */
#include <jansson.h>
#include <math.h>
#include <mpi.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mgraph/placement.h"
#include "mgraph/precision.h"
#include "runtime/trainer_internal.h"

/* ---- the physical graph as pieces --------------------------------------------------------- */

/* Persistent leaves are the state that outlives a step: parameters and Adam moments. */
static bool is_state(const mg_tensor *t) {
    return !t->src && t->persistent && (t->role == MG_ROLE_PARAM || t->role == MG_ROLE_OPT_STATE);
}

/* Describes state tensor t of this rank's graph as a piece. *owner says whether this
 * rank is the one that writes it (each logical element is saved by one rank only:
 * data-parallel rank 0, tensor-parallel rank 0 for what tp replicates; every dp rank
 * for its distributed-optimizer segments; every pipeline stage for its own layers, the
 * stages' shared state being left to the first that holds it, see drop_lower_stages). */
static int piece_of(const mg_mesh *mesh, mg_tensor *t, mg_storage *st, mg_ckpt_piece *p,
                    bool *owner, mg_error *err) {
    memset(p, 0, sizeof *p);
    p->name = t->name;
    p->dtype = mg_tensor_storage(t); /* (narrow moments are saved narrow; mg_ckpt_fill converts) */
    if (t->model_copy) { /* a parameter's model copy loads its parameter's values (mgraph/precision.h) */
        const mg_tensor *par = t->copy_of; /* (the typed binding: precision.c sets it) */
        if (!par) return mg_error_set(err, MG_ERR_RUNTIME, "checkpoint: model copy '%s' has no parameter", t->name);
        p->name = par->name;
    }
    p->data = mg_storage_data(st, t);
    /* A stage's state is not replicated over pp but placed: each stage holds its own
     * layers whole (pp FULL), so every stage's ranks own theirs. */
    mg_mesh staged = *mesh;
    staged.coord[MG_GROUP_PP] = 0;
    *owner = mg_placement_owner(&t->place, &staged);
    if (t->state_flat) {
        /* a distributed-optimizer moment: a flat segment of its parameter's tp block */
        mg_tensor *par = t->state_of; /* (the typed binding: dist_opt.c sets it) */
        /* (dist_opt.c gives the segment the logical moment's numel as its logical shape,
         * and its offset inside this rank's tp block: only the offset is used here) */
        if (!par || t->ndim != 1 || t->logical.ndim != 1 || t->logical.offset[0] + t->shape[0] > mg_numel(par))
            return mg_error_set(err, MG_ERR_RUNTIME, "checkpoint: cannot place optimizer segment '%s'", t->name);
        p->ndim = par->logical.ndim;
        for (int d = 0; d < p->ndim; d++) {
            p->shape[d] = par->logical.shape[d];
            p->offset[d] = par->logical.offset[d];
            p->block[d] = par->shape[d];
        }
        p->lo = t->logical.offset[0];
        p->hi = p->lo + t->shape[0];
        return MG_OK;
    }
    if (t->logical.ndim != t->ndim)
        return mg_error_set(err, MG_ERR_RUNTIME, "checkpoint: '%s' has %d dims, its logical tensor %d", t->name, t->ndim,
                            t->logical.ndim);
    p->ndim = t->ndim;
    for (int d = 0; d < p->ndim; d++) {
        p->shape[d] = t->logical.shape[d];
        p->offset[d] = t->logical.offset[d];
        p->block[d] = t->shape[d];
    }
    return MG_OK;
}

/* The state pieces of g: all of them (owned_only false), or those this rank saves. */
static int collect(const mg_graph *g, const mg_mesh *mesh, mg_storage *st, bool owned_only, bool moments, bool copies,
                   mg_ckpt_piece **out, int *n, mg_error *err) {
    int nt = mg_graph_n_tensors(g), k = 0;
    mg_ckpt_piece *v = calloc((size_t)nt + 1, sizeof *v);
    if (!v) return mg_error_set(err, MG_ERR_NOMEM, "out of memory");
    for (int i = 0; i < nt; i++) {
        mg_tensor *t = mg_graph_tensor(g, i);
        if (!is_state(t) || (!moments && t->role != MG_ROLE_PARAM) || (t->model_copy && !copies)) continue;
        bool owner = false;
        int rc = piece_of(mesh, t, st, &v[k], &owner, err);
        if (rc) {
            free(v);
            return rc;
        }
        if (owner || !owned_only) k++;
    }
    *out = v;
    *n = k;
    return MG_OK;
}

/* State several pipeline stages hold (the tied word embedding and its moments, on the
 * first and the last stage) is written by the lowest of them. A rank learns what the
 * lower stages of its pp group write by gathering their piece names; the stages' graphs
 * know which tensors they share only through the partitioner, and checkpoints are
 * rare enough that a gather of names costs nothing that matters. */
static int drop_lower_stages(const mg_mesh *mesh, mg_ckpt_piece *v, int *n, mg_error *err) {
    int P = mesh->size[MG_GROUP_PP], me = mesh->coord[MG_GROUP_PP];
    if (P <= 1) return MG_OK;
    if (P > 64) /* (the partitioner's limit too: every rank returns here alike) */
        return mg_error_set(err, MG_ERR_UNSUPPORTED, "checkpoint: more than 64 pipeline stages");
    size_t len = 1;
    for (int i = 0; i < *n; i++) len += strlen(v[i].name) + 1;
    char *mine = malloc(len + 1);
    int mylen = 0;
    if (mine) {
        mine[mylen++] = '\n'; /* every name is found as "\nNAME\n" */
        for (int i = 0; i < *n; i++) mylen += sprintf(mine + mylen, "%s\n", v[i].name);
    }
    /* Every rank of the group takes part in every collective below, whatever its own
     * allocations did, and all learn together whether the gather can go ahead. */
    MPI_Comm pp;
    int w = mg_wait_begin("the checkpoint's gather of stage names", mesh, MG_GROUP_PP, -1);
    MPI_Comm_split(MPI_COMM_WORLD, mg_mesh_peer(mesh, MG_GROUP_PP, 0), me, &pp);
    int lens[64], offs[64];
    MPI_Allgather(&mylen, 1, MPI_INT, lens, 1, MPI_INT, pp);
    mg_wait_end(w);
    long long total = 0;
    for (int s = 0; s < P; s++) {
        offs[s] = (int)total;
        total += lens[s];
    }
    char *all = mine && total < INT32_MAX ? malloc((size_t)total + 1) : NULL;
    int ok = all != NULL;
    mg_rt_allreduce(&ok, 1, MPI_INT, MPI_MIN, pp, "the checkpoint's gather of stage names");
    int rc = ok ? MG_OK : mg_error_set(err, MG_ERR_NOMEM, "checkpoint: out of memory gathering %lld bytes of names", total);
    if (ok) {
        w = mg_wait_begin("the checkpoint's gather of stage names", mesh, MG_GROUP_PP, -1);
        MPI_Allgatherv(mine, mylen, MPI_CHAR, all, lens, offs, MPI_CHAR, pp);
        mg_wait_end(w);
        all[offs[me]] = '\0'; /* the lower stages' names only; each list starts with its own newline */
        int kept = 0;
        for (int i = 0; i < *n; i++) {
            char key[600];
            snprintf(key, sizeof key, "\n%s\n", v[i].name);
            if (!strstr(all, key)) v[kept++] = v[i];
        }
        *n = kept;
    }
    MPI_Comm_free(&pp);
    free(all);
    free(mine);
    return rc;
}

/* ---- fp8's delayed-scaling state ----------------------------------------------------------- */
/* The recipe's scales and amax histories (mgraph/fp8.h) are the same on every rank and
 * belong to no tensor of the graph: rank 0 saves them as two logical tensors of its own,
 * as Transformer Engine keeps them in each module's _extra_state, and the index records
 * the recipe they were made under ("fp8"). Any plan loads them whole: they are indexed by
 * the logical graph's products, not by a rank's part of them. */
static const char *const FP8_SCALE = "mgraph.fp8.scale", *const FP8_HISTORY = "mgraph.fp8.amax_history";
static const char *const FP8_FORMATS[] = {"off", "e4m3", "hybrid"};

static void fp8_pieces(mg_fp8_state *s, mg_ckpt_piece p[2]) {
    memset(p, 0, 2 * sizeof *p);
    p[0] = (mg_ckpt_piece){.name = FP8_SCALE, .dtype = MG_F32, .ndim = 1, .shape = {s->n_slots},
                           .block = {s->n_slots}, .data = s->scale};
    p[1] = (mg_ckpt_piece){.name = FP8_HISTORY, .dtype = MG_F32, .ndim = 2, .shape = {s->n_slots, s->o.amax_history_len},
                           .block = {s->n_slots, s->o.amax_history_len}, .data = s->history};
}

static json_t *fp8_meta(const mg_fp8_state *s) {
    return json_pack("{s:s, s:s, s:i, s:s, s:i, s:i, s:I}", "format", FP8_FORMATS[s->o.format], "recipe",
                     s->o.recipe == MG_FP8_TENSORWISE ? "tensorwise" : "delayed", "amax_history_len",
                     s->o.amax_history_len, "amax_compute_algo", s->o.amax_algo == MG_FP8_AMAX_MAX ? "max" : "most_recent",
                     "margin", s->o.margin, "slots", s->n_slots, "updates", (json_int_t)s->updates);
}

/* ---- run metadata ------------------------------------------------------------------------ */
/* Merges the caller's object into m: objects key by key, other values replaced. */
static void merge(json_t *m, json_t *extra) {
    const char *key;
    json_t *v;
    json_object_foreach(extra, key, v) {
        json_t *have = json_object_get(m, key);
        if (json_is_object(have) && json_is_object(v)) json_object_update(have, v);
        else json_object_set(m, key, v);
    }
}

static char *meta_text(const mg_trainer *t, mg_error *err) {
    const mg_trainer_config *c = &t->cfg;
    const mg_adamw_config *o = &c->optim;
    const mg_plan *plan = &c->plan;
    const char *styles[] = {"constant", "linear", "cosine", "inverse-square-root", "WSD"};
    json_t *m = json_pack(
        "{s:{s:s}, s:{s:i, s:i, s:i, s:b, s:b, s:I}, s:I, s:I, s:{s:I, s:I, s:i, s:i}, "
        "s:{s:f, s:f, s:f, s:I, s:s, s:I}, s:{s:s, s:I}, s:{s:f, s:f, s:f, s:f, s:f}}",
        "model", "arch", c->model.name ? c->model.name : "model",
        "plan", "tensor_model_parallel_size", plan->tp, "data_parallel_size", t->mesh.size[MG_GROUP_DP], "world_size",
        t->mesh.world, "sequence_parallel", plan->sequence_parallel, "use_distributed_optimizer",
        plan->distributed_optimizer, "bucket_size", (json_int_t)plan->bucket_numel,
        "iteration", (json_int_t)t->iteration, "consumed_samples", (json_int_t)t->consumed,
        "data", "consumed_train_samples", (json_int_t)t->consumed, "eval_batches_done", (json_int_t)t->eval_done,
        "global_batch_size", c->global_batch, "micro_batch_size", c->micro_batch,
        "lr_schedule", "lr", (double)o->lr.lr, "min_lr", (double)o->lr.min_lr, "warmup_steps",
        o->lr.warmup_steps, "decay_steps", (json_int_t)o->lr.decay_steps, "style", styles[o->lr.style],
        "num_steps", (json_int_t)mg_lr_samples_before(&o->lr, t->iteration - t->skipped),
        "rng", "kind", "philox4x32-10(seed, logical key, element, iteration)", "seed", (json_int_t)t->seed,
        "optimizer", "beta1", (double)o->beta1, "beta2", (double)o->beta2, "eps", (double)o->eps, "weight_decay",
        (double)o->weight_decay, "clip_grad", (double)o->clip_grad);
    if (!m) {
        mg_error_set(err, MG_ERR_NOMEM, "checkpoint: out of memory");
        return NULL;
    }
    /* the model's own (its flags), merged over the generic ones */
    if (c->ckpt.meta) {
        char *text = c->ckpt.meta(c->ckpt.user);
        json_error_t je;
        json_t *extra = text ? json_loads(text, 0, &je) : NULL;
        free(text);
        if (!json_is_object(extra)) {
            json_decref(extra);
            json_decref(m);
            mg_error_set(err, MG_ERR_RUNTIME, "checkpoint: the model's metadata is not a JSON object");
            return NULL;
        }
        merge(m, extra);
        json_decref(extra);
    }
    /* no_save_optim: the model without the Adam moments; no_save_rng: without the seed
     * (a run loading it uses its own seed, as Megatron's distributed checkpoints do) */
    json_object_set_new(m, "optimizer_state", json_boolean(!c->ckpt.no_save_optim));
    if (!c->ckpt.no_save_optim) json_object_set_new(m, "optimizer_start", json_integer(t->optim_start));
    if (c->ckpt.no_save_rng) json_object_del(m, "rng");
    /* fp16: the iterations skipped (the scheduler's and Adam's step counts leave them out)
     * and the dynamic loss scaler's state (Megatron saves it with the optimizer) */
    json_object_set_new(m, "skipped_iterations", json_integer(t->skipped));
    if (c->precision.params == MG_F16 && t->scaler.dynamic && !c->ckpt.no_save_optim)
        json_object_set_new(m, "grad_scaler",
                            json_pack("{s:f, s:i, s:i}", "scale", (double)t->scaler.scale, "growth_tracker",
                                      t->scaler.growth_tracker, "hysteresis_tracker", t->scaler.hysteresis_tracker));
    /* fp8: the recipe the scaling state was made under (the state: FP8_SCALE, FP8_HISTORY) */
    if (t->fp8.n_slots) json_object_set_new(m, "fp8", fp8_meta(&t->fp8));
    json_object_set_new(json_object_get(m, "plan"), "pipeline_model_parallel_size", json_integer(plan->pp));
    if (o->lr.wd_style != MG_WD_CONSTANT) { /* the weight-decay schedule (Megatron saves it too) */
        json_t *ls = json_object_get(m, "lr_schedule");
        json_object_set_new(ls, "wd_incr_style", json_string(o->lr.wd_style == MG_WD_LINEAR ? "linear" : "cosine"));
        json_object_set_new(ls, "start_wd", json_real(o->lr.wd_start));
        json_object_set_new(ls, "end_wd", json_real(o->lr.wd_end));
        json_object_set_new(ls, "wd_incr_steps", json_integer(o->lr.wd_incr_steps));
    }
    char *text = json_dumps(m, JSON_COMPACT);
    json_decref(m);
    if (!text) mg_error_set(err, MG_ERR_NOMEM, "checkpoint: out of memory");
    return text;
}

/* ---- saving ---------------------------------------------------------------------------------- */
/* Every rank learns whether any failed; a rank that did not gets a message saying so. */
static int agree(const mg_trainer *t, int rc, mg_error *err) {
    if (!t->collective) return rc;
    int any = rc != 0;
    mg_rt_allreduce(&any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD, "the checkpoint save's agreement");
    if (any && !rc) return mg_error_set(err, MG_ERR_IO, "checkpoint save failed on another rank");
    return rc;
}

/* An async save (mg_trainer_checkpoint.async_save): this rank's pieces point into a
 * snapshot of its state, written by a thread; rank 0 holds the index's metadata as of the
 * save. Finalized by the next save and the end of training. */
typedef struct mg_async_save {
    pthread_t thread;
    bool joinable;
    const char *dir;
    int retain, rank;
    int64_t iteration;
    double t0;
    char *meta;
    mg_ckpt_piece *pieces;
    const char **held;
    int n, n_held;
    void *snapshot;
    int rc;
    mg_error err;
} mg_async_save;

static void async_free(mg_async_save *a) {
    free(a->meta);
    free(a->pieces);
    free(a->held);
    free(a->snapshot);
    free(a);
}

static void *async_write(void *arg) {
    mg_async_save *a = arg;
    /* test hook: a slow disk, so that steps run beside the writing and a kill can land in
     * it (tests/checkpoint/cli.sh async) */
    const char *pause = getenv("MGRAPH_TEST_ASYNC_SAVE_PAUSE_MS");
    if (pause && atoi(pause) > 0) usleep((useconds_t)atoi(pause) * 1000);
    a->rc = mg_ckpt_write_rank(a->dir, a->iteration, a->rank, a->pieces, a->n, a->held, a->n_held, &a->err);
    return NULL;
}

/* Copies the pieces' data into one buffer and points them at it: the next steps update
 * the storage while the copy is written. */
static int snapshot(mg_ckpt_piece *p, int n, void **out, mg_error *err) {
    size_t total = 0;
    for (int i = 0; i < n; i++) total += (size_t)mg_ckpt_piece_numel(&p[i]) * mg_dtype_size(p[i].dtype);
    char *buf = malloc(total ? total : 1);
    if (!buf) return mg_error_set(err, MG_ERR_NOMEM, "checkpoint: out of memory for the async save's %zu-byte snapshot", total);
    size_t o = 0;
    for (int i = 0; i < n; i++) {
        size_t bytes = (size_t)mg_ckpt_piece_numel(&p[i]) * mg_dtype_size(p[i].dtype);
        if (bytes) memcpy(buf + o, p[i].data, bytes);
        p[i].data = buf + o;
        o += bytes;
    }
    *out = buf;
    return MG_OK;
}

static void call_saved(mg_trainer *t, int64_t iteration, double ms, int *rc, mg_error *err) {
    for (int h = 0; h < t->n_hooks && !*rc; h++)
        if (t->hooks[h].saved) *rc = t->hooks[h].saved(t->hooks[h].user, t, iteration, ms, err);
}

int mg_trainer_save_finalize(mg_trainer *t, mg_error *err) {
    mg_async_save *a = t->async;
    if (!a) return MG_OK;
    t->async = NULL;
    if (a->joinable) pthread_join(a->thread, NULL);
    int rc = a->rc;
    if (rc) *err = a->err;
    rc = agree(t, rc, err);
    if (rc && t->mesh.rank == 0) mg_ckpt_abort(a->dir, a->iteration); /* (every rank's thread is done) */
    if (!rc && t->mesh.rank == 0) rc = mg_ckpt_finish(a->dir, a->iteration, t->mesh.world, a->meta, a->retain, err);
    rc = agree(t, rc, err);
    double ms = 1e3 * (mg_trainer_now() - a->t0);
    int64_t iteration = a->iteration;
    bool persistent = a->dir == t->cfg.ckpt.save;
    async_free(a);
    if (persistent) call_saved(t, iteration, ms, &rc, err);
    return rc;
}

void mg_trainer_save_abandon(mg_trainer *t) {
    if (!t->async) return;
    if (t->async->joinable) pthread_join(t->async->thread, NULL);
    async_free(t->async);
    t->async = NULL;
}

/* One save of the state into dir (the persistent one, or the non-persistent one):
 * synchronous, or with async its writing started on a thread. */
static int save_to(mg_trainer *t, const char *dir, int retain, bool async, mg_error *err) {
    int rc = mg_trainer_start(t, err);
    if (rc) return rc;
    if ((rc = mg_trainer_save_finalize(t, err))) return rc; /* the previous async save first */
    double t0 = mg_trainer_now();
    const mg_mesh *mesh = &t->mesh;
    bool moments = !t->cfg.ckpt.no_save_optim;
    mg_graph *g = t->train.rg.graph;
    mg_storage *st = t->train.st;
    rc = mesh->rank == 0 ? mg_ckpt_begin(dir, t->iteration, err) : MG_OK;
    rc = agree(t, rc, err);
    mg_ckpt_piece *pieces = NULL, *all = NULL;
    int n = 0, n_all = 0;
    if (!rc) rc = collect(g, mesh, st, true, moments, false, &pieces, &n, err);
    mg_ckpt_piece *grown = !rc && mesh->rank == 0 && t->fp8.n_slots ? realloc(pieces, ((size_t)n + 2) * sizeof *pieces) : NULL;
    if (grown) {
        pieces = grown;
        fp8_pieces(&t->fp8, pieces + n);
        n += 2;
    } else if (!rc && mesh->rank == 0 && t->fp8.n_slots) {
        rc = mg_error_set(err, MG_ERR_NOMEM, "out of memory");
    }
    /* everything this rank holds: mg_ckpt_finish checks that some rank wrote each */
    if (!rc) rc = collect(g, mesh, st, false, moments, false, &all, &n_all, err);
    const char **held = !rc ? calloc((size_t)n_all + 1, sizeof *held) : NULL;
    if (!rc && !held) rc = mg_error_set(err, MG_ERR_NOMEM, "out of memory");
    for (int i = 0; !rc && i < n_all; i++) held[i] = all[i].name;
    free(all);
    /* (every rank of a pipeline group gathers, whether or not its collect failed) */
    int drc = mesh->size[MG_GROUP_PP] > 1 ? drop_lower_stages(mesh, pieces, &n, err) : MG_OK;
    if (!rc) rc = drc;
    if (async) {
        mg_async_save *a = !rc ? calloc(1, sizeof *a) : NULL;
        if (!rc && !a) rc = mg_error_set(err, MG_ERR_NOMEM, "out of memory");
        if (!rc) {
            *a = (mg_async_save){.dir = dir, .retain = retain, .rank = mesh->rank, .iteration = t->iteration, .t0 = t0,
                                 .pieces = pieces, .held = held, .n = n, .n_held = n_all};
            pieces = NULL;
            held = NULL;
            rc = snapshot(a->pieces, a->n, &a->snapshot, err);
            if (!rc && mesh->rank == 0) { /* the index's metadata as of this iteration */
                a->meta = meta_text(t, err);
                if (!a->meta) rc = err->code ? err->code : MG_ERR_NOMEM;
            }
        }
        free(pieces);
        free(held);
        rc = agree(t, rc, err); /* every rank starts its writing, or none does */
        if (rc) {
            if (a) async_free(a);
            if (mesh->rank == 0) mg_ckpt_abort(dir, t->iteration);
            return rc;
        }
        a->joinable = pthread_create(&a->thread, NULL, async_write, a) == 0;
        if (!a->joinable) async_write(a); /* no thread to be had: written now, finalized as usual */
        t->async = a;
        return MG_OK;
    }
    if (!rc) rc = mg_ckpt_write_rank(dir, t->iteration, mesh->rank, pieces, n, held, n_all, err);
    /* test hook: a pause with the rank files written and the save not yet in place, for a
     * signal to arrive mid-save (tests/reliability/round3.sh) */
    const char *pause = getenv("MGRAPH_TEST_SAVE_PAUSE_MS");
    if (pause && atoi(pause) > 0) usleep((useconds_t)atoi(pause) * 1000);
    free(held);
    free(pieces);
    rc = agree(t, rc, err);
    if (rc && mesh->rank == 0) mg_ckpt_abort(dir, t->iteration); /* (every rank is past its write) */
    if (!rc && mesh->rank == 0) {
        char *meta = meta_text(t, err);
        rc = meta ? mg_ckpt_finish(dir, t->iteration, mesh->world, meta, retain, err) : err->code;
        free(meta);
    }
    return agree(t, rc, err);
}

int mg_trainer_save(mg_trainer *t, mg_error *err) {
    const char *dir = t->cfg.ckpt.save;
    if (!dir) return mg_error_set(err, MG_ERR_INVALID, "trainer: no checkpoint directory to save into (ckpt.save)");
    return save_to(t, dir, t->cfg.ckpt.retain, t->cfg.ckpt.async_save, err);
}

/* Megatron's non-persistent (local) checkpoint: only the newest kept. */
int mg_trainer_save_non_persistent(mg_trainer *t, mg_error *err) {
    const char *dir = t->cfg.ckpt.non_persistent_dir;
    if (!dir) return mg_error_set(err, MG_ERR_INVALID, "trainer: no non-persistent checkpoint directory");
    return save_to(t, dir, 1, t->cfg.ckpt.async_save, err);
}

/* ---- loading ----------------------------------------------------------------------------------- */
void mg_trainer_load_close(mg_trainer *t) {
    mg_ckpt_close(t->ck);
    t->ck = NULL;
}

static int64_t get_int(json_t *o, const char *path1, const char *path2, bool *ok) {
    json_t *v = json_object_get(o, path1);
    if (path2) v = json_object_get(v, path2);
    if (!json_is_integer(v)) *ok = false;
    return json_integer_value(v);
}

/* Megatron's OptimizerParamScheduler.load_state_dict: each saved value must equal this
 * run's (by default), or replaces it (use_saved), or is ignored (override; the caller
 * does not come here). Checkpoints saved before the weight-decay schedule was recorded
 * have only the rate's. */
static int check_schedule(const mg_ckpt *ck, json_t *saved, bool use_saved, mg_lr_schedule *lr, mg_error *err) {
    static const char *styles[] = {"constant", "linear", "cosine", "inverse-square-root", "WSD"};
    static const char *wd_styles[] = {"constant", "linear", "cosine"};
    if (!json_is_object(saved)) return mg_error_set(err, MG_ERR_IO, "%s: no lr_schedule in the index", mg_ckpt_dir(ck));
    const char *sty = json_string_value(json_object_get(saved, "style"));
    const char *wsty = json_string_value(json_object_get(saved, "wd_incr_style"));
    int style = -1, wd_style = wsty ? -1 : MG_WD_CONSTANT;
    for (int i = 0; i < 5 && sty; i++)
        if (!strcmp(sty, styles[i])) style = i;
    for (int i = 1; i < 3 && wsty; i++)
        if (!strcmp(wsty, wd_styles[i])) wd_style = i;
    json_t *v[8] = {json_object_get(saved, "lr"), json_object_get(saved, "min_lr"), json_object_get(saved, "warmup_steps"),
                    json_object_get(saved, "decay_steps"), json_object_get(saved, "start_wd"),
                    json_object_get(saved, "end_wd"), json_object_get(saved, "wd_incr_steps"), NULL};
    bool ok = style >= 0 && wd_style >= 0;
    for (int i = 0; i < (wsty ? 7 : 4); i++) ok = ok && json_is_number(v[i]);
    if (!ok) return mg_error_set(err, MG_ERR_IO, "%s: the lr_schedule of the index is missing or invalid", mg_ckpt_dir(ck));
    /* (the floats as the run holds them: the index has their double values) */
    struct { const char *flag; bool same; } f[] = {
        {"--lr", (float)json_number_value(v[0]) == lr->lr},
        {"--min-lr", (float)json_number_value(v[1]) == lr->min_lr},
        {"the warmup (--lr-warmup-iters, -samples or -fraction)", json_number_value(v[2]) == lr->warmup_steps},
        {"the decay span (--lr-decay-iters or -samples, or the run's length)", json_number_value(v[3]) == (double)lr->decay_steps},
        {"--lr-decay-style", style == (int)lr->style},
        {"--weight-decay-incr-style", wd_style == (int)lr->wd_style},
        {"--start-weight-decay", !wsty || (float)json_number_value(v[4]) == lr->wd_start},
        {"--end-weight-decay", !wsty || (float)json_number_value(v[5]) == lr->wd_end},
        {"the weight decay's span (the run's length)", !wsty || json_number_value(v[6]) == (double)lr->wd_incr_steps},
    };
    for (size_t i = 0; i < sizeof f / sizeof *f && !use_saved; i++)
        if (!f[i].same)
            return mg_error_set(err, MG_ERR_INVALID,
                                "%s does not match the learning-rate schedule of the checkpoint %s (Megatron's "
                                "OptimizerParamScheduler check): give --override-opt-param-scheduler to use this run's, "
                                "or --use-checkpoint-opt-param-scheduler to use the checkpoint's",
                                f[i].flag, mg_ckpt_dir(ck));
    if (use_saved) {
        lr->lr = (float)json_number_value(v[0]);
        lr->min_lr = (float)json_number_value(v[1]);
        lr->warmup_steps = json_number_value(v[2]);
        lr->decay_steps = (int64_t)json_number_value(v[3]);
        lr->style = (mg_lr_decay)style;
        lr->wd_style = (mg_wd_incr)wd_style;
        if (wsty) {
            lr->wd_start = (float)json_number_value(v[4]);
            lr->wd_end = (float)json_number_value(v[5]);
            lr->wd_incr_steps = (int64_t)json_number_value(v[6]);
        }
    }
    return MG_OK;
}

/* The iteration a checkpoint root's tracker names (an iteration directory's index, or
 * nothing readable: -1; mg_ckpt_open reports what is wrong with the one chosen). */
static int64_t tracked_iteration(const char *root) {
    char path[4200];
    snprintf(path, sizeof path, "%s/latest_checkpointed_iteration.txt", root);
    FILE *f = fopen(path, "r");
    long long it = -1;
    if (f) {
        if (fscanf(f, "%lld", &it) != 1) it = -1;
        fclose(f);
    }
    return it;
}

int mg_trainer_load_open(mg_trainer *t, mg_error *err) {
    const mg_trainer_checkpoint *k = &t->cfg.ckpt;
    t->seed = t->cfg.seed;
    if (!k->load) return MG_OK;
    /* Megatron's load_checkpoint: no tracker file (and, for mgraph, no iteration
     * directory's index) means nothing to load: a warning (mg_trainer_load_warning), and
     * training starts from random, so that a recipe's "--save DIR --load DIR" runs the
     * first time; with exit_on_missing it is an error. */
    const char *from = k->load;
    /* Megatron's non-persistent (local) checkpoint is loaded when it is newer than the
     * persistent one (or there is none) */
    int64_t np_it = k->non_persistent_dir ? tracked_iteration(k->non_persistent_dir) : -1;
    char given[4200];
    snprintf(given, sizeof given, "%s/index.json", k->load); /* (an iteration directory named: that one) */
    if (np_it >= 0 && np_it > tracked_iteration(k->load) && access(given, F_OK) != 0) from = k->non_persistent_dir;
    char tracker[4200], index[4200];
    snprintf(tracker, sizeof tracker, "%s/latest_checkpointed_iteration.txt", from);
    snprintf(index, sizeof index, "%s/index.json", from);
    if (!k->exit_on_missing && access(tracker, F_OK) != 0 && access(index, F_OK) != 0) {
        snprintf(t->load_warning, sizeof t->load_warning,
                 "could not find the metadata file %s: will not load any checkpoints and will start from random", tracker);
        return MG_OK;
    }
    t->loaded_from = from;
    int rc = mg_ckpt_open(from, &t->ck, err);
    if (rc) return rc;
    const char *dir = mg_ckpt_dir(t->ck);
    json_error_t je;
    json_t *meta = json_loads(mg_ckpt_meta(t->ck), 0, &je);
    if (!meta) rc = mg_error_set(err, MG_ERR_IO, "%s: metadata is not JSON", dir);
    if (!rc && k->check) rc = k->check(k->user, mg_ckpt_meta(t->ck), dir, err);
    bool ok = true;
    bool has_rng = json_object_get(meta, "rng") != NULL; /* (no_save_rng: none) */
    int64_t it = get_int(meta, "iteration", NULL, &ok), consumed = get_int(meta, "consumed_samples", NULL, &ok),
            evals = get_int(meta, "data", "eval_batches_done", &ok), seed = has_rng ? get_int(meta, "rng", "seed", &ok) : 0;
    if (!rc && (!ok || it < 0 || consumed < 0 || evals < 0 || it != mg_ckpt_iteration(t->ck)))
        rc = mg_error_set(err, MG_ERR_IO, "%s: iteration, consumed_samples, data or rng state missing or inconsistent", dir);
    /* a checkpoint without optimizer state (mgraph-convert --from-hf, no_save_optim)
     * loads its model only */
    bool has_optim = json_is_true(json_object_get(meta, "optimizer_state"));
    json_t *os = json_object_get(meta, "optimizer_start"); /* (absent: saved before it, 0) */
    json_t *sk = json_object_get(meta, "skipped_iterations"); /* (absent: saved before fp16, 0) */
    int64_t skipped = json_is_integer(sk) ? json_integer_value(sk) : 0;
    if (!rc && (skipped < 0 || skipped > it))
        rc = mg_error_set(err, MG_ERR_IO, "%s: skipped_iterations %lld is not in [0, iteration %lld]", dir,
                          (long long)skipped, (long long)it);
    json_t *gs = json_object_get(meta, "grad_scaler");
    double scale = 0;
    int growth = 0, hyst = 0;
    if (!rc && gs && json_unpack(gs, "{s:F, s:i, s:i}", "scale", &scale, "growth_tracker", &growth,
                                 "hysteresis_tracker", &hyst))
        rc = mg_error_set(err, MG_ERR_IO, "%s: grad_scaler is not {scale, growth_tracker, hysteresis_tracker}", dir);
    if (!rc && gs && !(scale > 0 && isfinite(scale) && growth >= 0))
        rc = mg_error_set(err, MG_ERR_IO, "%s: grad_scaler holds an invalid state (scale %g)", dir, scale);
    int64_t optim_start = json_is_integer(os) ? json_integer_value(os) : 0;
    if (!rc && has_optim && (optim_start < 0 || optim_start > it - skipped))
        rc = mg_error_set(err, MG_ERR_IO, "%s: optimizer_start %lld is not in [0, iteration %lld]", dir,
                          (long long)optim_start, (long long)it);
    /* Megatron loads its scheduler with the optimizer (not with finetune, no_load_optim,
     * nor from a checkpoint without optimizer state) */
    t->load_optim = has_optim && !k->finetune && !k->no_load_optim;
    if (!rc && t->load_optim && !k->override_schedule)
        rc = check_schedule(t->ck, json_object_get(meta, "lr_schedule"), k->use_saved_schedule, &t->cfg.optim.lr, err);
    json_decref(meta);
    if (rc) {
        mg_trainer_load_close(t);
        return rc;
    }
    /* Megatron: finetune loads the model only and starts at iteration 0 */
    if (!k->finetune) {
        t->iteration = it;
        t->consumed = (uint64_t)consumed;
        t->eval_done = evals;
        if (!k->no_load_rng && has_rng) t->seed = (uint64_t)seed;
        t->skipped = skipped;
    }
    /* fp16: the dynamic loss scaler goes on from the checkpoint's (loaded with the
     * optimizer, as Megatron's grad_scaler) */
    if (t->load_optim && gs && t->cfg.precision.params == MG_F16 && t->scaler.dynamic) {
        t->scaler.scale = (float)scale;
        t->scaler.growth_tracker = growth;
        t->scaler.hysteresis_tracker = hyst;
    }
    /* Adam's step counts from where its moments started: the saved moments' start, or
     * here for fresh ones (torch's Adam restarts its step with a new state): the updates
     * before the iteration resumed at */
    t->optim_start = t->load_optim ? optim_start : t->iteration - t->skipped;
    /* the learning rate follows the iteration, the data and batch the consumed samples:
     * under a ramp they must agree (Megatron reads both from its checkpoint) */
    const mg_lr_schedule *lr = &t->cfg.optim.lr;
    if (lr->ramp_start > 0 && (int64_t)t->consumed != mg_lr_samples_before(lr, t->iteration)) {
        mg_trainer_load_close(t);
        return mg_error_set(err, MG_ERR_INVALID,
                            "--load: %lld iterations consumed %lld samples, but --rampup-batch-size and "
                            "--global-batch-size give %lld: resume with the flags the checkpoint was trained with",
                            (long long)t->iteration, (long long)t->consumed,
                            (long long)mg_lr_samples_before(lr, t->iteration));
    }
    return MG_OK;
}

/* fp8's scaling state from the checkpoint into t->fp8 (a run with fp8 only; a run without
 * it leaves the checkpoint's unread, as a module without fp8 ignores TE's extra state).
 * A checkpoint that has none (saved without fp8, by mgraph-convert, or before mgraph saved
 * it) cannot resume an fp8 run as the uninterrupted one would have gone on: that is an
 * error where the optimizer state is loaded too (resuming training); where it is not
 * (--finetune, --no-load-optim, a model-only checkpoint) the recipe starts afresh, as a
 * new run's. The saved recipe must have this run's format and history length (the state
 * means nothing under others); a changed margin, algorithm or recipe takes effect at the
 * next update, as it would in Transformer Engine. */
static int load_fp8(mg_trainer *t, mg_error *err) {
    mg_fp8_state *s = &t->fp8;
    const char *dir = mg_ckpt_dir(t->ck);
    json_error_t je;
    json_t *meta = json_loads(mg_ckpt_meta(t->ck), 0, &je), *f = json_object_get(meta, "fp8");
    int rc = MG_OK;
    const char *format = NULL, *recipe = NULL, *algo = NULL;
    int len = 0, margin = 0, slots = 0;
    json_int_t updates = 0;
    if (!f) {
        if (t->load_optim)
            rc = mg_error_set(err, MG_ERR_INVALID,
                              "--fp8-format: the checkpoint %s holds no fp8 scaling state (it was saved without "
                              "--fp8-format, or before mgraph saved that state), so the run cannot resume as it would have "
                              "gone on: load it without --fp8-format, or give --finetune or --no-load-optim to start the "
                              "fp8 scales afresh",
                              dir);
        json_decref(meta);
        return rc;
    }
    if (json_unpack(f, "{s:s, s:s, s:i, s:s, s:i, s:i, s:I}", "format", &format, "recipe", &recipe, "amax_history_len",
                    &len, "amax_compute_algo", &algo, "margin", &margin, "slots", &slots, "updates", &updates) ||
        (strcmp(format, "e4m3") && strcmp(format, "hybrid")) || len < 1 || len > 1 << 20 || slots < 0 || updates < 0)
        rc = mg_error_set(err, MG_ERR_IO, "%s: the index's fp8 record is not {format e4m3|hybrid, recipe, "
                                          "amax_history_len 1..2^20, amax_compute_algo, margin, slots, updates >= 0}", dir);
    if (!rc && strcmp(format, FP8_FORMATS[s->o.format]))
        rc = mg_error_set(err, MG_ERR_INVALID,
                          "--fp8-format %s does not match the checkpoint %s: its fp8 scales were made for %s (load it with "
                          "--fp8-format %s)",
                          FP8_FORMATS[s->o.format], dir, format, format);
    if (!rc && len != s->o.amax_history_len)
        rc = mg_error_set(err, MG_ERR_INVALID,
                          "--fp8-amax-history-len %d does not match the checkpoint %s: its amax histories hold %d entries",
                          s->o.amax_history_len, dir, len);
    if (!rc && slots != s->n_slots)
        rc = mg_error_set(err, MG_ERR_INVALID,
                          "the checkpoint %s holds fp8 state for %d products, this run's model has %d fp8 products", dir,
                          slots / MG_FP8_SLOTS, s->n_slots / MG_FP8_SLOTS);
    json_decref(meta);
    mg_ckpt_piece p[2];
    fp8_pieces(s, p);
    if (!rc) rc = mg_ckpt_fill(t->ck, p, 2, err);
    for (int i = 0; !rc && i < s->n_slots; i++)
        if (!(s->scale[i] > 0) || !isfinite(s->scale[i]))
            rc = mg_error_set(err, MG_ERR_IO, "%s: fp8 scale %d is %g (a scale is finite and > 0)", dir, i,
                              (double)s->scale[i]);
    if (!rc) s->updates = updates;
    return rc;
}

int mg_trainer_load_fill(mg_trainer *t, mg_error *err) {
    if (!t->ck) return MG_OK;
    mg_mesh one = {0};
    mg_ckpt_piece *pieces = NULL;
    int n = 0;
    int rc = collect(t->train.rg.graph, &one, t->train.st, false, t->load_optim, true, &pieces, &n, err);
    if (!rc) rc = mg_ckpt_fill(t->ck, pieces, n, err);
    free(pieces);
    if (!rc && t->fp8.n_slots) rc = load_fp8(t, err);
    return rc;
}

const char *mg_trainer_loaded_from(const mg_trainer *t) { return t->loaded_from; }

const char *mg_trainer_load_warning(const mg_trainer *t) { return t->load_warning[0] ? t->load_warning : NULL; }

int mg_trainer_load_params(const mg_trainer_checkpoint *k, mg_graph *g, mg_storage *st, int64_t *iteration,
                           mg_error *err) {
    if (!k || !k->load) return mg_error_set(err, MG_ERR_INVALID, "checkpoint: no checkpoint to load (ckpt.load)");
    mg_ckpt *ck = NULL;
    int rc = mg_ckpt_open(k->load, &ck, err);
    if (rc) return rc;
    if (k->check) rc = k->check(k->user, mg_ckpt_meta(ck), mg_ckpt_dir(ck), err);
    mg_mesh one = {0};
    mg_ckpt_piece *pieces = NULL;
    int n = 0;
    if (!rc) rc = collect(g, &one, st, false, false, true, &pieces, &n, err);
    if (!rc) rc = mg_ckpt_fill(ck, pieces, n, err);
    if (!rc && iteration) *iteration = mg_ckpt_iteration(ck);
    free(pieces);
    mg_ckpt_close(ck);
    return rc;
}

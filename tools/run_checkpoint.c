/* mgraph-run's --save / --load (tools/run_checkpoint.h). */
#include "run_checkpoint.h"

#include <jansson.h>
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mgraph/placement.h"
#include "model_flags.h"
#include "mgraph/precision.h"
#include "run_mpi.h"

/* ---- the physical graph as pieces ---------------------------------------------------------
 * Kept to this one function so that it can switch to the partitioner's typed bindings
 * (logical tensor -> local tensor + block) when they exist. */

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
    mg_run_allreduce(&ok, 1, MPI_INT, MPI_MIN, pp, "the checkpoint's gather of stage names");
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

/* ---- run metadata ------------------------------------------------------------------------ */
static json_t *model_json(const mg_run_config *c, const mg_gpt_config *m, int64_t vocab_unpadded) {
    return mg_model_flags_json(m, vocab_unpadded, c->make_vocab_size_divisible_by, c->tokenizer_type);
}

char *mg_run_ckpt_meta(void *user) {
    const mg_run_ckpt_model *k = user;
    const mg_run_config *c = k->cfg;
    json_t *m = json_pack("{s:o, s:{s:s?, s:s?, s:s?}, s:{s:f, s:f}}", "model", model_json(c, k->model, k->vocab_unpadded),
                          "data", "text_file", c->text_file, "data_path", c->data_path, "split", c->split, "dropout",
                          "hidden", (double)k->model->hidden_dropout, "attention", (double)k->model->attention_dropout);
    char *text = m ? json_dumps(m, JSON_COMPACT) : NULL;
    json_decref(m);
    return text;
}

static char *meta_text(const mg_run_config *c, const mg_step_config *sc, const mg_plan *plan, const mg_mesh *mesh,
                       const mg_run_save_state *s) {
    const mg_adamw_config *o = &sc->optim;
    const char *styles[] = {"constant", "linear", "cosine", "inverse-square-root", "WSD"};
    json_t *m = json_pack(
        "{s:o, s:{s:i, s:i, s:i, s:b, s:b, s:I}, s:I, s:I, s:{s:I, s:I, s:i, s:i, s:s?, s:s?, s:s?}, "
        "s:{s:f, s:f, s:f, s:I, s:s, s:I}, s:{s:s, s:I}, s:{s:f, s:f, s:f, s:f, s:f}, s:{s:f, s:f}}",
        "model", model_json(c, &sc->model, s->vocab_unpadded),
        "plan", "tensor_model_parallel_size", plan->tp, "data_parallel_size", mesh->size[MG_GROUP_DP], "world_size",
        mesh->world, "sequence_parallel", plan->sequence_parallel, "use_distributed_optimizer",
        plan->distributed_optimizer, "bucket_size", (json_int_t)plan->bucket_numel,
        "iteration", (json_int_t)s->iteration, "consumed_samples", (json_int_t)s->consumed_samples,
        "data", "consumed_train_samples", (json_int_t)s->consumed_samples, "eval_batches_done",
        (json_int_t)s->eval_batches_done, "global_batch_size", c->global_batch_size, "micro_batch_size",
        c->micro_batch_size, "text_file", c->text_file, "data_path", c->data_path, "split", c->split,
        "lr_schedule", "lr", (double)o->lr.lr, "min_lr", (double)o->lr.min_lr, "warmup_steps",
        o->lr.warmup_steps, "decay_steps", (json_int_t)o->lr.decay_steps, "style", styles[o->lr.style],
        "num_steps", (json_int_t)mg_lr_samples_before(&o->lr, s->iteration - s->skipped),
        "rng", "kind", "philox4x32-10(seed, logical key, element, iteration)", "seed", (json_int_t)s->seed,
        "optimizer", "beta1", (double)o->beta1, "beta2", (double)o->beta2, "eps", (double)o->eps, "weight_decay",
        (double)o->weight_decay, "clip_grad", (double)o->clip_grad,
        "dropout", "hidden", (double)sc->model.hidden_dropout, "attention", (double)sc->model.attention_dropout);
    /* --no-save-optim: the model without the Adam moments; --no-save-rng: without the seed
     * (a run loading it uses its own --seed, as Megatron's distributed checkpoints do) */
    if (m) json_object_set_new(m, "optimizer_state", json_boolean(!c->no_save_optim));
    if (m && !c->no_save_optim) json_object_set_new(m, "optimizer_start", json_integer(s->optim_start));
    if (m && c->no_save_rng) json_object_del(m, "rng");
    /* fp16: the iterations skipped (the scheduler's and Adam's step counts leave them out)
     * and the dynamic loss scaler's state (Megatron saves it with the optimizer) */
    if (m) json_object_set_new(m, "skipped_iterations", json_integer(s->skipped));
    if (m && s->scaler && s->scaler->dynamic && !c->no_save_optim)
        json_object_set_new(m, "grad_scaler",
                            json_pack("{s:f, s:i, s:i}", "scale", (double)s->scaler->scale, "growth_tracker",
                                      s->scaler->growth_tracker, "hysteresis_tracker", s->scaler->hysteresis_tracker));
    if (m) json_object_set_new(json_object_get(m, "plan"), "pipeline_model_parallel_size", json_integer(plan->pp));
    if (m && o->lr.wd_style != MG_WD_CONSTANT) { /* the weight-decay schedule (Megatron saves it too) */
        json_t *ls = json_object_get(m, "lr_schedule");
        json_object_set_new(ls, "wd_incr_style", json_string(o->lr.wd_style == MG_WD_LINEAR ? "linear" : "cosine"));
        json_object_set_new(ls, "start_wd", json_real(o->lr.wd_start));
        json_object_set_new(ls, "end_wd", json_real(o->lr.wd_end));
        json_object_set_new(ls, "wd_incr_steps", json_integer(o->lr.wd_incr_steps));
    }
    char *text = m ? json_dumps(m, JSON_COMPACT) : NULL;
    json_decref(m);
    return text;
}

/* ---- saving ---------------------------------------------------------------------------------- */
/* Every rank learns whether any failed; a rank that did not gets a message saying so. */
static int agree(int mpi_world, int rc, mg_error *err) {
    if (mpi_world <= 1) return rc;
    int mine = rc != 0, any = 0;
    any = mine;
    mg_run_allreduce(&any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD, "the checkpoint save's agreement");
    if (any && !rc) return mg_error_set(err, MG_ERR_IO, "checkpoint save failed on another rank");
    return rc;
}

int mg_run_save(const mg_run_config *cfg, const mg_step_config *sc, const mg_plan *plan, const mg_mesh *mesh,
                int mpi_world, mg_graph *g, mg_storage *st, const mg_run_save_state *s, mg_error *err) {
    int rc = mesh->rank == 0 ? mg_ckpt_begin(cfg->save, s->iteration, err) : MG_OK;
    rc = agree(mpi_world, rc, err);
    mg_ckpt_piece *pieces = NULL, *all = NULL;
    int n = 0, n_all = 0;
    if (!rc) rc = collect(g, mesh, st, true, !cfg->no_save_optim, false, &pieces, &n, err);
    /* everything this rank holds: mg_ckpt_finish checks that some rank wrote each */
    if (!rc) rc = collect(g, mesh, st, false, !cfg->no_save_optim, false, &all, &n_all, err);
    const char **held = !rc ? calloc((size_t)n_all + 1, sizeof *held) : NULL;
    if (!rc && !held) rc = mg_error_set(err, MG_ERR_NOMEM, "out of memory");
    for (int i = 0; !rc && i < n_all; i++) held[i] = all[i].name;
    /* (every rank of a pipeline group gathers, whether or not its collect failed) */
    int drc = mesh->size[MG_GROUP_PP] > 1 ? drop_lower_stages(mesh, pieces, &n, err) : MG_OK;
    if (!rc) rc = drc;
    if (!rc) rc = mg_ckpt_write_rank(cfg->save, s->iteration, mesh->rank, pieces, n, held, n_all, err);
    /* test hook: a pause with the rank files written and the save not yet in place, for a
     * signal to arrive mid-save (tests/reliability/round3.sh) */
    const char *pause = getenv("MGRAPH_TEST_SAVE_PAUSE_MS");
    if (pause && atoi(pause) > 0) usleep((useconds_t)atoi(pause) * 1000);
    free(held);
    free(all);
    free(pieces);
    rc = agree(mpi_world, rc, err);
    if (rc && mesh->rank == 0) mg_ckpt_abort(cfg->save, s->iteration); /* (every rank is past its write) */
    if (!rc && mesh->rank == 0) {
        char *meta = meta_text(cfg, sc, plan, mesh, s);
        rc = meta ? mg_ckpt_finish(cfg->save, s->iteration, mesh->world, meta, cfg->save_retain, err)
                  : mg_error_set(err, MG_ERR_NOMEM, "out of memory");
        free(meta);
    }
    return agree(mpi_world, rc, err);
}

/* ---- loading ----------------------------------------------------------------------------------- */
void mg_run_resume_close(mg_run_resume *r) {
    mg_ckpt_close(r->ck);
    r->ck = NULL;
}

static int64_t get_int(json_t *o, const char *path1, const char *path2, bool *ok) {
    json_t *v = json_object_get(o, path1);
    if (path2) v = json_object_get(v, path2);
    if (!json_is_integer(v)) *ok = false;
    return json_integer_value(v);
}

/* Model flags must match: the message names the flag. */
static int check_model(const mg_ckpt *ck, json_t *saved, const mg_run_config *c, const mg_gpt_config *m,
                       int64_t vocab_unpadded, mg_error *err) {
    json_t *now = model_json(c, m, vocab_unpadded);
    const struct { const char *key, *flag; } fl[] = {
        {"num_layers", "--num-layers"},
        {"hidden_size", "--hidden-size"},
        {"ffn_hidden_size", "--ffn-hidden-size"},
        {"num_attention_heads", "--num-attention-heads"},
        {"max_position_embeddings", "--max-position-embeddings"},
        {"vocab_size", "--tokenizer-type / --vocab-file (vocabulary size)"},
        {"padded_vocab_size", "--make-vocab-size-divisible-by (padded vocabulary, 128 x tp by default)"},
        {"tokenizer_type", "--tokenizer-type"},
        {"normalization", "--normalization"},
        {"position_embedding_type", "--position-embedding-type"},
        {"swiglu", "--swiglu"},
        {"num_query_groups", "--num-query-groups"},
        {"untie_embeddings_and_output_weights", "--untie-embeddings-and-output-weights"},
        {"disable_bias_linear", "--disable-bias-linear"},
        {"add_qkv_bias", "--add-qkv-bias"},
        {"qk_layernorm", "--qk-layernorm"},
        {"squared_relu", "--squared-relu"},
        {"gelu_exact", "--no-bias-gelu-fusion (the exact GELU)"},
        {"qk_l2_norm", "--qk-l2-norm"},
    };
    int rc = MG_OK;
    for (size_t i = 0; i < sizeof fl / sizeof *fl && !rc; i++) {
        json_t *a = json_object_get(saved, fl[i].key), *b = json_object_get(now, fl[i].key);
        if (!a && i >= 8) { /* saved before these flags existed (or converted): GPT-2's values */
            json_t *dflt = !strcmp(fl[i].key, "normalization")             ? json_string("LayerNorm")
                           : !strcmp(fl[i].key, "position_embedding_type") ? json_string("learned_absolute")
                           : !strcmp(fl[i].key, "num_query_groups")        ? json_incref(json_object_get(now, "num_attention_heads"))
                                                                           : json_false();
            bool same = json_equal(dflt, b);
            json_decref(dflt);
            if (!same)
                rc = mg_error_set(err, MG_ERR_INVALID, "%s does not match the checkpoint %s (a GPT-2 without it)",
                                  fl[i].flag, mg_ckpt_dir(ck));
        } else if (!a) {
            rc = mg_error_set(err, MG_ERR_IO, "%s: the checkpoint's model flags lack %s", mg_ckpt_dir(ck), fl[i].key);
        } else if (!json_equal(a, b)) {
            char *x = json_dumps(a, JSON_ENCODE_ANY), *y = json_dumps(b, JSON_ENCODE_ANY);
            rc = mg_error_set(err, MG_ERR_INVALID, "%s does not match the checkpoint %s: it was saved with %s, this run has %s",
                              fl[i].flag, mg_ckpt_dir(ck), x ? x : "?", y ? y : "?");
            free(x);
            free(y);
        }
    }
    /* MoE flags (absent from dense checkpoints and those saved before MoE: 0 experts),
     * the sliding window (absent from those saved before it: none) */
    const struct { const char *key, *flag; bool absent_is_zero; } moe[] = {
        {"num_experts", "--num-experts", true},
        {"moe_ffn_hidden_size", "--moe-ffn-hidden-size", false}, /* (written only for MoE models) */
        {"moe_layer_freq", "--moe-layer-freq", false},
        {"window", "--window-size (the sliding window, in keys: L + 1)", true},
        {"window_attn_skip_freq", "--window-attn-skip-freq", true},
        {"kv_channels", "--kv-channels", true},
        {"moe_shared_expert_intermediate_size", "--moe-shared-expert-intermediate-size", false},
        {"moe_layers", "--moe-layer-freq (its list of MoE layers)", false},
        {"moe_router", "the router (--moe-router-score-function, --moe-router-num-groups, --moe-router-group-topk, "
                       "--moe-router-topk-scaling-factor, --moe-router-enable-expert-bias)", false},
        /* objects, absent where the model has none of it */
        {"rope_scaling", "the RoPE scaling (--use-rope-scaling, --position-embedding-type yarn, MLA's --rope-type, their "
                         "factors) or --rotary-interleaved", false},
        {"multi_latent_attention", "--multi-latent-attention or its sizes (--q-lora-rank, --kv-lora-rank, --qk-head-dim, "
                                   "--qk-pos-emb-head-dim, --v-head-dim)", false},
    };
    for (size_t i = 0; i < sizeof moe / sizeof *moe && !rc; i++) {
        json_t *a = json_object_get(saved, moe[i].key), *b = json_object_get(now, moe[i].key);
        json_t *zero = json_integer(0);
        if (!a && moe[i].absent_is_zero) a = zero;
        if ((a || b) && !json_equal(a, b)) {
            char *x = a ? json_dumps(a, JSON_ENCODE_ANY) : NULL, *y = b ? json_dumps(b, JSON_ENCODE_ANY) : NULL;
            rc = mg_error_set(err, MG_ERR_INVALID, "%s does not match the checkpoint %s: it was saved with %s, this run has %s",
                              moe[i].flag, mg_ckpt_dir(ck), x ? x : "none", y ? y : "none");
            free(x);
            free(y);
        }
        json_decref(zero);
    }
    /* Numeric model flags, compared as the floats the model holds (older checkpoints
     * lack them: the defaults); RoPE's only where the model uses rope. */
    const struct { const char *key, *flag; double dflt; bool rope; } num[] = {
        {"layernorm_epsilon", "--norm-epsilon", 1e-5, false},
        {"rotary_base", "--rotary-base", 10000.0, true},
        {"rotary_percent", "--rotary-percent", 1.0, true},
    };
    bool rope = m->pos_emb == MG_POS_ROPE;
    for (size_t i = 0; i < sizeof num / sizeof *num && !rc; i++) {
        if (num[i].rope && !rope) continue;
        json_t *a = json_object_get(saved, num[i].key);
        if (a && !json_is_number(a)) {
            rc = mg_error_set(err, MG_ERR_IO, "%s: the checkpoint's %s is not a number", mg_ckpt_dir(ck), num[i].key);
            break;
        }
        float was = (float)(a ? json_number_value(a) : num[i].dflt);
        float is = (float)json_number_value(json_object_get(now, num[i].key));
        if (was != is)
            rc = mg_error_set(err, MG_ERR_INVALID, "%s does not match the checkpoint %s: it was saved with %g, this run has %g",
                              num[i].flag, mg_ckpt_dir(ck), (double)was, (double)is);
    }
    json_decref(now);
    return rc;
}

/* Megatron's OptimizerParamScheduler.load_state_dict: each saved value must equal this
 * run's (by default), or replaces it (--use-checkpoint-opt-param-scheduler), or is
 * ignored (--override-opt-param-scheduler; the caller does not come here). Checkpoints
 * saved before the weight-decay schedule was recorded have only the rate's. */
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

int mg_run_resume_open(const mg_run_config *cfg, const mg_gpt_config *model, int64_t vocab_unpadded,
                       mg_lr_schedule *lr, mg_run_resume *out, mg_error *err) {
    memset(out, 0, sizeof *out);
    out->seed = (uint64_t)cfg->seed;
    if (!cfg->load) return MG_OK;
    /* Megatron's load_checkpoint: no tracker file (and, for mgraph, no iteration
     * directory's index) means nothing to load: a warning, and training starts from
     * random, so that a recipe's "--save DIR --load DIR" runs the first time; with
     * --exit-on-missing-checkpoint it is an error. */
    char tracker[4200], index[4200];
    snprintf(tracker, sizeof tracker, "%s/latest_checkpointed_iteration.txt", cfg->load);
    snprintf(index, sizeof index, "%s/index.json", cfg->load);
    if (!cfg->exit_on_missing_checkpoint && access(tracker, F_OK) != 0 && access(index, F_OK) != 0) {
        int rank = 0;
        MPI_Comm_rank(MPI_COMM_WORLD, &rank);
        if (rank == 0)
            fprintf(stderr, "mgraph-run: warning: could not find the metadata file %s: will not load any checkpoints and "
                            "will start from random\n", tracker);
        return MG_OK;
    }
    int rc = mg_ckpt_open(cfg->load, &out->ck, err);
    if (rc) return rc;
    json_error_t je;
    json_t *meta = json_loads(mg_ckpt_meta(out->ck), 0, &je);
    if (!meta) rc = mg_error_set(err, MG_ERR_IO, "%s: metadata is not JSON", mg_ckpt_dir(out->ck));
    if (!rc) rc = check_model(out->ck, json_object_get(meta, "model"), cfg, model, vocab_unpadded, err);
    bool ok = true;
    bool has_rng = json_object_get(meta, "rng") != NULL; /* (--no-save-rng: none) */
    int64_t it = get_int(meta, "iteration", NULL, &ok), consumed = get_int(meta, "consumed_samples", NULL, &ok),
            evals = get_int(meta, "data", "eval_batches_done", &ok),
            seed = has_rng ? get_int(meta, "rng", "seed", &ok) : 0;
    if (!rc && (!ok || it < 0 || consumed < 0 || evals < 0 || it != mg_ckpt_iteration(out->ck)))
        rc = mg_error_set(err, MG_ERR_IO, "%s: iteration, consumed_samples, data or rng state missing or inconsistent",
                          mg_ckpt_dir(out->ck));
    /* a checkpoint without optimizer state (mgraph-convert --from-hf, --no-save-optim)
     * loads its model only */
    bool has_optim = json_is_true(json_object_get(meta, "optimizer_state"));
    json_t *os = json_object_get(meta, "optimizer_start"); /* (absent: saved before it, 0) */
    json_t *sk = json_object_get(meta, "skipped_iterations"); /* (absent: saved before fp16, 0) */
    int64_t skipped = json_is_integer(sk) ? json_integer_value(sk) : 0;
    if (!rc && (skipped < 0 || skipped > it))
        rc = mg_error_set(err, MG_ERR_IO, "%s: skipped_iterations %lld is not in [0, iteration %lld]", mg_ckpt_dir(out->ck),
                          (long long)skipped, (long long)it);
    json_t *gs = json_object_get(meta, "grad_scaler");
    double scale = 0;
    int growth = 0, hyst = 0;
    if (!rc && gs && json_unpack(gs, "{s:F, s:i, s:i}", "scale", &scale, "growth_tracker", &growth,
                                 "hysteresis_tracker", &hyst))
        rc = mg_error_set(err, MG_ERR_IO, "%s: grad_scaler is not {scale, growth_tracker, hysteresis_tracker}",
                          mg_ckpt_dir(out->ck));
    if (!rc && gs && !(scale > 0 && isfinite(scale) && growth >= 0))
        rc = mg_error_set(err, MG_ERR_IO, "%s: grad_scaler holds an invalid state (scale %g)", mg_ckpt_dir(out->ck), scale);
    int64_t optim_start = json_is_integer(os) ? json_integer_value(os) : 0;
    if (!rc && has_optim && (optim_start < 0 || optim_start > it - skipped))
        rc = mg_error_set(err, MG_ERR_IO, "%s: optimizer_start %lld is not in [0, iteration %lld]", mg_ckpt_dir(out->ck),
                          (long long)optim_start, (long long)it);
    /* Megatron loads its scheduler with the optimizer (not with --finetune, --no-load-optim,
     * nor from a checkpoint without optimizer state) */
    out->load_optim = has_optim && !cfg->finetune && !cfg->no_load_optim && !cfg->skip_train;
    if (!rc && out->load_optim && !cfg->override_opt_param_scheduler)
        rc = check_schedule(out->ck, json_object_get(meta, "lr_schedule"), cfg->use_checkpoint_opt_param_scheduler, lr,
                            err);
    json_decref(meta);
    if (rc) {
        mg_run_resume_close(out);
        return rc;
    }
    /* Megatron: --finetune loads the model only and starts at iteration 0 */
    if (!cfg->finetune) {
        out->iteration = it;
        out->consumed_samples = consumed;
        out->eval_batches_done = evals;
        if (!cfg->no_load_rng && has_rng) out->seed = (uint64_t)seed;
        out->skipped = skipped;
    }
    if (out->load_optim && gs) { /* Megatron loads the scaler with the optimizer */
        out->has_scaler = true;
        out->scale = (float)scale;
        out->growth_tracker = growth;
        out->hysteresis_tracker = hyst;
    }
    /* Adam's step counts from where its moments started: the saved moments' start, or
     * here for fresh ones (torch's Adam restarts its step with a new state) */
    out->optim_start = out->load_optim ? optim_start : out->iteration - out->skipped;
    return MG_OK;
}

int mg_run_resume_fill(mg_run_resume *r, mg_graph *g, mg_storage *st, mg_error *err) {
    if (!r->ck) return MG_OK;
    mg_mesh one = {0};
    mg_ckpt_piece *pieces = NULL;
    int n = 0;
    int rc = collect(g, &one, st, false, r->load_optim, true, &pieces, &n, err);
    if (!rc) rc = mg_ckpt_fill(r->ck, pieces, n, err);
    free(pieces);
    return rc;
}

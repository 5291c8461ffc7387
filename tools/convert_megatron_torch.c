/* Megatron's --ckpt-format torch read as logical tensors (convert_megatron_internal.h).
 *
 * Each model-parallel rank's directory mp_rank_TT[_PPP][_EEE] holds model_optim_rng.pt:
 *   {'args': Namespace, 'checkpoint_version': 3.0, 'iteration': N,
 *    'model' (or 'model0', 'model1', ... per virtual pipeline chunk): the chunk's state dict,
 *        stage-local layer numbers, Transformer Engine's _extra_state entries beside,
 *    'optimizer': the optimizer's state dict, 'opt_param_scheduler': the scheduler's,
 *    'rng_state', 'num_floating_point_operations_so_far', ...}
 * The optimizer's state dict is torch's ({'state': {i: {'exp_avg', 'exp_avg_sq'[, 'step']}},
 * 'param_groups': [...]}) for the FP32 optimizer, wrapped as {'optimizer': that,
 * 'grad_scaler', 'fp32_from_fp16_params': the fp32 main parameters per group} for bf16 /
 * fp16, or, with --use-distributed-optimizer, only the param groups (with 'step'), the
 * parameters' state being in distrib_optim.pt: {'buckets_coalesced': True, chunk:
 * {(param dtype, grad dtype): {'param', 'exp_avg', 'exp_avg_sq': flat fp32 tensors,
 * 'numel_unpadded'}}} (DistributedOptimizer.get_parameter_state_dp_zero).
 *
 * A state index of torch's optimizer is the parameter's position in the param groups
 * Megatron builds (_get_param_groups: the chunk's named_parameters, grouped by their
 * overrides, the default group first): parameters are matched to the saved groups by
 * what decides their group (no weight decay for biases and 1-D parameters, --decoupled-lr
 * for the embedding and output layer). */
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "convert_megatron_internal.h"

#define MAXV 64

typedef struct mparam {
    const char *key;              /* stage-local name */
    const mg_torch_tensor *w;     /* the model's tensor */
    int64_t numel;
    const mg_torch_tensor *master, *mom[2]; /* non-distributed optimizer's fp32 copy and moments */
    const mg_torch_tensor *flat[3];         /* distributed optimizer's buffers (param, exp_avg, exp_avg_sq) */
    int64_t flat_off;
    bool used;
} mparam;

typedef struct mchunk {
    mparam *p;
    int n, layers, first_layer;
} mchunk;

typedef struct mrank {
    char dir[4300];
    mg_torch_file *model, *dopt;
    mchunk chunk[MAXV];
} mrank;

typedef struct tsrc {
    ms_src base;
    int tp, pp, ep, vp;
    mrank *r;                     /* [tp][pp][ep] */
    char what[256];
    bool swiglu;
} tsrc;

static mrank *rank_at(tsrc *s, int t, int p, int e) { return &s->r[((size_t)t * s->pp + p) * s->ep + e]; }

/* ---- args ---------------------------------------------------------------------------------- */
const mg_pk *ms_arg(const mg_pk *args, const char *name, const char *old_name) {
    const mg_pk *v = mg_pk_attr(args, name);
    if ((!v || v->kind == MG_PK_NONE) && old_name) v = mg_pk_attr(args, old_name);
    return v && v->kind != MG_PK_NONE ? v : NULL;
}

bool ms_arg_int(const mg_pk *args, const char *name, int64_t *v) { return mg_pk_int(ms_arg(args, name, NULL), v); }

bool ms_arg_true(const mg_pk *args, const char *name) { return mg_pk_truthy(ms_arg(args, name, NULL)); }

/* ---- the distributed optimizer's flat layout ---------------------------------------------------- */
static int64_t pad_to(int64_t v, int64_t d) { return (v + d - 1) / d * d; }
static int64_t gcd64(int64_t a, int64_t b) { return b ? gcd64(b, a % b) : a; }
static int64_t lcm64(int64_t a, int64_t b) { return a / gcd64(a, b) * b; }

int64_t ms_dist_opt_layout(int n, const int64_t *numel, const bool *shared, int64_t bucket_size, int64_t dp,
                           bool pad_busbw, int64_t *off) {
    int64_t div = lcm64(dp, 128);
    if (pad_busbw) div = lcm64(div, 65536);
    /* start[i], bucket[i] in the padded buffer; each bucket's start and unpadded size */
    int64_t *start = malloc((size_t)(n ? n : 1) * sizeof *start);
    int64_t *bstart = malloc((size_t)(n + 1) * sizeof *bstart), *bunpad = malloc((size_t)(n + 1) * sizeof *bunpad);
    int *bucket = malloc((size_t)(n ? n : 1) * sizeof *bucket);
    if (!start || !bstart || !bunpad || !bucket) {
        free(start), free(bstart), free(bunpad), free(bucket);
        return -1;
    }
    int64_t pstart = 0, b0 = 0, pend = 0;
    int nb = 0, in_bucket = 0;
#define FINALIZE(end_index)                                                                                            \
    do {                                                                                                               \
        bstart[nb] = b0, bunpad[nb] = (end_index) - b0, nb++;                                                          \
        b0 = pad_to((end_index), div);                                                                                 \
    } while (0)
    for (int i = n - 1; i >= 0; i--) { /* backprop order */
        pstart = pad_to(pstart, 64);
        if (shared[i] && in_bucket) { /* a shared embedding starts a bucket of its own */
            FINALIZE(pstart);
            in_bucket = 0;
            pstart = b0;
        }
        pend = pstart + numel[i];
        start[i] = pstart, bucket[i] = nb;
        in_bucket++;
        if ((bucket_size > 0 && pend - b0 >= bucket_size) || shared[i]) {
            FINALIZE(pend);
            in_bucket = 0;
            pstart = b0;
        } else {
            pstart = pend;
        }
    }
    if (in_bucket) FINALIZE(pend);
#undef FINALIZE
    /* the checkpoint's flat tensor: the buckets one after the other, each unpadded */
    int64_t total = 0, *cum = malloc((size_t)(nb + 1) * sizeof *cum);
    for (int b = 0; cum && b < nb; b++) cum[b] = total, total += bunpad[b];
    for (int i = 0; cum && i < n; i++) off[i] = cum[bucket[i]] + (start[i] - bstart[bucket[i]]);
    if (!cum) total = -1;
    free(cum), free(start), free(bstart), free(bunpad), free(bucket);
    return total;
}

/* ---- reading the ranks ---------------------------------------------------------------------- */
static bool ends_with(const char *s, const char *suf) {
    size_t n = strlen(s), k = strlen(suf);
    return n >= k && !strcmp(s + n - k, suf);
}

/* The chunk's parameters in model order: its state dict's tensors but _extra_state. */
static int chunk_params(tsrc *s, mrank *r, const mg_pk *sd, const char *what, mchunk *c, mg_error *err) {
    if (!sd || sd->kind != MG_PK_DICT)
        return mg_error_set(err, MG_ERR_IO, "%s: '%s' is not a state dict", mg_torch_name(r->model), what);
    c->p = calloc(sd->len / 2 + 1, sizeof *c->p);
    if (!c->p) return mg_error_set(err, MG_ERR_NOMEM, "out of memory");
    c->layers = 0;
    for (size_t i = 0; i + 1 < sd->len; i += 2) {
        const mg_pk *k = sd->items[i], *v = sd->items[i + 1];
        if (k->kind != MG_PK_STR) return mg_error_set(err, MG_ERR_IO, "%s: a state dict key that is not a string", mg_torch_name(r->model));
        if (ends_with(k->s, "_extra_state")) continue;
        if (!strncmp(k->s, "language_model.", 15))
            return mg_error_set(err, MG_ERR_UNSUPPORTED, "%s: a Megatron legacy (non-Core) GPT model (language_model.*): "
                                "mgraph reads Megatron-Core's GPTModel; convert it with Megatron's "
                                "tools/checkpoint/convert.py --saver core first", mg_torch_name(r->model));
        if (v->kind != MG_PK_TENSOR) {
            char d[96];
            mg_pk_describe(v, d, sizeof d);
            return mg_error_set(err, MG_ERR_IO, "%s: %s is %s, not a tensor", mg_torch_name(r->model), k->s, d);
        }
        const mg_torch_tensor *t = v->tensor;
        if (t->ndim < 1 || t->ndim > 2)
            return mg_error_set(err, MG_ERR_UNSUPPORTED, "%s: %s has %d dimensions (mgraph reads 1-D and 2-D parameters)",
                                mg_torch_name(r->model), k->s, t->ndim);
        c->p[c->n++] = (mparam){.key = k->s, .w = t, .numel = mg_torch_numel(t), .flat_off = -1};
        int layer;
        if (sscanf(k->s, "decoder.layers.%d.", &layer) == 1 && layer >= 0 && layer < 1000000 && layer + 1 > c->layers)
            c->layers = layer + 1;
    }
    (void)s;
    return MG_OK;
}

static bool is_embedding_or_output(const tsrc *s, int p, int v, const char *key) {
    return (p == 0 && v == 0 && !strcmp(key, "embedding.word_embeddings.weight")) ||
           (p == s->pp - 1 && v == s->vp - 1 && !strcmp(key, "output_layer.weight"));
}

/* Megatron's shared_embedding: with tied weights and pipeline stages, the first stage's
 * word embedding and the last stage's output layer. */
static bool shared_embedding(const tsrc *s, int p, int v, const char *key) {
    if (s->pp == 1 || ms_arg_true(s->base.args, "untie_embeddings_and_output_weights")) return false;
    return is_embedding_or_output(s, p, v, key);
}

static const mg_torch_tensor *tensor_at(const mg_pk *v) { return v && v->kind == MG_PK_TENSOR ? v->tensor : NULL; }

/* distrib_optim.pt: each chunk's flat buffers, placed by Megatron's layout. */
static int read_dist_opt(tsrc *s, mrank *r, int p, mg_error *err) {
    const char *fn = mg_torch_name(r->dopt);
    const mg_pk *root = mg_torch_root(r->dopt);
    if (root->kind == MG_PK_LIST)
        return mg_error_set(err, MG_ERR_UNSUPPORTED, "%s: several optimizers' states (a chained optimizer: expert "
                            "parallelism or a separate expert optimizer): mgraph reads one", fn);
    if (!mg_pk_truthy(mg_pk_get(root, "buckets_coalesced")))
        return mg_error_set(err, MG_ERR_UNSUPPORTED, "%s: a distributed optimizer state in the per-bucket format of "
                            "Megatron-Core before 0.8 (no buckets_coalesced): load and save it with a newer Megatron",
                            fn);
    const mg_pk *a = s->base.args;
    int64_t dp = 1, cp = 1, inst = 1, nb = 0;
    ms_arg_int(a, "data_parallel_size", &dp);
    ms_arg_int(a, "context_parallel_size", &cp);
    ms_arg_int(a, "num_distributed_optimizer_instances", &inst);
    int64_t dp_cp = dp * cp / (inst > 0 ? inst : 1);
    if (dp_cp < 1) dp_cp = 1;
    bool overlap = ms_arg_true(a, "overlap_grad_reduce");
    int64_t total_params = 0;
    for (int v = 0; v < s->vp; v++)
        for (int i = 0; i < r->chunk[v].n; i++) total_params += r->chunk[v].p[i].numel;
    for (int v = 0; v < s->vp; v++) {
        mchunk *c = &r->chunk[v];
        /* Megatron's get_model: buckets on the first stage's first chunk only, when
         * gradients are reduced while the backward runs */
        int64_t bs = 0;
        if (overlap && p == 0 && v == 0 && !ms_arg_true(a, "overlap_param_gather_with_optimizer_step")) {
            if (ms_arg_int(a, "ddp_num_buckets", &nb) && nb > 0) bs = total_params / nb;
            else if (!ms_arg_int(a, "ddp_bucket_size", &bs)) bs = dp * cp * 1000000 > 40000000 ? dp * cp * 1000000 : 40000000;
        }
        const mg_pk *g = mg_pk_get_int(root, v);
        if (!g || g->kind != MG_PK_DICT || g->len != 2)
            return mg_error_set(err, MG_ERR_IO, "%s: no single-dtype buffer state for model chunk %d", fn, v);
        const mg_pk *w = g->items[1];
        const mg_torch_tensor *flat[3] = {tensor_at(mg_pk_get(w, "param")), tensor_at(mg_pk_get(w, "exp_avg")),
                                          tensor_at(mg_pk_get(w, "exp_avg_sq"))};
        int64_t unpadded = -1;
        mg_pk_int(mg_pk_get(w, "numel_unpadded"), &unpadded);
        for (int k = 0; k < 3; k++)
            if (!flat[k] || flat[k]->ndim != 1)
                return mg_error_set(err, MG_ERR_IO, "%s: chunk %d lacks its flat %s tensor", fn, v,
                                    k == 0 ? "param" : k == 1 ? "exp_avg" : "exp_avg_sq");
        int64_t *numel = malloc((size_t)(c->n + 1) * sizeof *numel), *off = malloc((size_t)(c->n + 1) * sizeof *off);
        bool *shared = calloc((size_t)c->n + 1, sizeof *shared);
        if (!numel || !off || !shared) {
            free(numel), free(off), free(shared);
            return mg_error_set(err, MG_ERR_NOMEM, "out of memory");
        }
        for (int i = 0; i < c->n; i++) numel[i] = c->p[i].numel, shared[i] = shared_embedding(s, p, v, c->p[i].key);
        bool busbw = ms_arg_true(a, "ddp_pad_buckets_for_high_nccl_busbw");
        int64_t len = ms_dist_opt_layout(c->n, numel, shared, bs, dp_cp, busbw, off);
        int rc = MG_OK;
        if (len < 0) rc = mg_error_set(err, MG_ERR_NOMEM, "out of memory");
        else if (len != flat[0]->shape[0] || (unpadded >= 0 && unpadded != len) || flat[1]->shape[0] != len ||
                 flat[2]->shape[0] != len)
            rc = mg_error_set(err, MG_ERR_UNSUPPORTED,
                              "%s: chunk %d's flat optimizer state holds %lld elements where Megatron-Core's layout of "
                              "its %d parameters gives %lld (bucket size %lld, data parallel %lld): a Megatron version "
                              "whose distributed optimizer lays parameters out otherwise, or args that do not describe "
                              "the run", fn, v, (long long)flat[0]->shape[0], c->n, (long long)len, (long long)bs,
                              (long long)dp_cp);
        for (int i = 0; !rc && i < c->n; i++) {
            c->p[i].flat_off = off[i];
            for (int k = 0; k < 3; k++) c->p[i].flat[k] = flat[k];
        }
        free(numel), free(off), free(shared);
        if (rc) return rc;
    }
    return MG_OK;
}

/* A number of a param group (a float, or a 0-d tensor). */
static bool group_num(const mg_pk *g, const char *k, double *v) {
    const mg_pk *x = mg_pk_get(g, k);
    if (x && x->kind == MG_PK_TENSOR && mg_torch_numel(x->tensor) == 1) {
        float f;
        mg_error e = {0};
        if (mg_torch_tensor_f32(x->tensor, &f, k, &e)) return false;
        *v = f;
        return true;
    }
    return mg_pk_num(x, v);
}

/* The non-distributed optimizer: torch's state by index, matched to the parameters. */
static int read_plain_opt(tsrc *s, mrank *r, int p, const mg_pk *opt, mg_error *err) {
    const char *fn = mg_torch_name(r->model);
    const mg_pk *inner = mg_pk_get(opt, "optimizer") ? mg_pk_get(opt, "optimizer") : opt;
    const mg_pk *state = mg_pk_get(inner, "state"), *groups = mg_pk_get(inner, "param_groups");
    const mg_pk *fp32 = mg_pk_get(opt, "fp32_from_fp16_params");
    if (!state || state->kind != MG_PK_DICT || !groups || groups->kind != MG_PK_LIST)
        return mg_error_set(err, MG_ERR_IO, "%s: the optimizer's state dict has no state / param_groups", fn);
    const mg_pk *a = s->base.args;
    double decoupled = NAN, lr = NAN;
    mg_pk_num(ms_arg(a, "decoupled_lr", NULL), &decoupled);
    mg_pk_num(ms_arg(a, "lr", NULL), &lr);
    bool qk_wd = ms_arg_true(a, "apply_wd_to_qk_layernorm");
    /* each group's signature: (no weight decay, decoupled learning rate, expert) */
    int ng = (int)groups->len, sig_of_group[64];
    if (ng > 64) return mg_error_set(err, MG_ERR_UNSUPPORTED, "%s: %d optimizer param groups", fn, ng);
    for (int k = 0; k < ng; k++) {
        const mg_pk *g = groups->items[k];
        double wd = 1, mx = NAN;
        group_num(g, "wd_mult", &wd);
        bool dec = mg_pk_get(g, "is_decoupled_lr") ? mg_pk_truthy(mg_pk_get(g, "is_decoupled_lr"))
                                                   : group_num(g, "max_lr", &mx) && !isnan(decoupled) && mx == decoupled &&
                                                         decoupled != lr;
        sig_of_group[k] = (wd == 0.0) | dec << 1 | mg_pk_truthy(mg_pk_get(g, "is_expert_parallel")) << 2;
        if (!mg_pk_get(g, "params") || mg_pk_get(g, "params")->kind != MG_PK_LIST)
            return mg_error_set(err, MG_ERR_IO, "%s: param group %d has no params list", fn, k);
    }
    int taken[64] = {0};
    for (int v = 0; v < s->vp; v++)
        for (int i = 0; i < r->chunk[v].n; i++) {
            mparam *q = &r->chunk[v].p[i];
            bool wd0 = (q->w->ndim == 1 || ends_with(q->key, ".bias")) &&
                       !(qk_wd && (strstr(q->key, "q_layernorm.") || strstr(q->key, "k_layernorm.")));
            bool dec = !isnan(decoupled) && is_embedding_or_output(s, p, v, q->key);
            int sig = wd0 | dec << 1, k = -1;
            for (int j = 0; j < ng; j++)
                if (sig_of_group[j] == sig) {
                    if (k >= 0 && groups->items[j] && mg_pk_get(groups->items[j], "params")->len)
                        return mg_error_set(err, MG_ERR_UNSUPPORTED, "%s: two optimizer param groups fit %s", fn, q->key);
                    if (k < 0 || mg_pk_get(groups->items[j], "params")->len) k = j;
                }
            const mg_pk *ids = k >= 0 ? mg_pk_get(groups->items[k], "params") : NULL;
            int64_t id = -1;
            if (!ids || taken[k] >= (int)ids->len || !mg_pk_int(ids->items[taken[k]], &id))
                return mg_error_set(err, MG_ERR_IO, "%s: no optimizer param group holds %s (the groups do not match "
                                    "Megatron's grouping of this model)", fn, q->key);
            const mg_pk *st = mg_pk_get_int(state, id);
            q->mom[0] = tensor_at(mg_pk_get(st, "exp_avg"));
            q->mom[1] = tensor_at(mg_pk_get(st, "exp_avg_sq"));
            if (!q->mom[0] || !q->mom[1])
                return mg_error_set(err, MG_ERR_UNSUPPORTED, "%s: optimizer state %lld (%s) has no exp_avg / exp_avg_sq "
                                    "(mgraph resumes Adam's moments; --no-load-optim-like conversion is not offered)",
                                    fn, (long long)id, q->key);
            double step;
            if (s->base.adam_step < 0 && (group_num(st, "step", &step) || group_num(groups->items[k], "step", &step)))
                s->base.adam_step = (int64_t)step;
            /* bf16 / fp16: the fp32 main copy, aligned with the groups */
            const mg_pk *fg = fp32 && fp32->kind == MG_PK_LIST && k < (int)fp32->len ? fp32->items[k] : NULL;
            if (fg && fg->kind == MG_PK_LIST && taken[k] < (int)fg->len) q->master = tensor_at(fg->items[taken[k]]);
            taken[k]++;
        }
    for (int k = 0; k < ng; k++)
        if (taken[k] != (int)mg_pk_get(groups->items[k], "params")->len)
            return mg_error_set(err, MG_ERR_IO, "%s: param group %d lists %zu parameters, the model has %d of its kind", fn,
                                k, mg_pk_get(groups->items[k], "params")->len, taken[k]);
    return MG_OK;
}

static int open_rank(tsrc *s, mrank *r, int p, bool first, mg_error *err) {
    char path[4400];
    snprintf(path, sizeof path, "%s/model_optim_rng.pt", r->dir);
    int rc = mg_torch_open(path, "Megatron checkpoint file", false, &r->model, err);
    if (!rc) rc = mg_torch_verify(r->model, err);
    if (rc) return rc;
    const mg_pk *root = mg_torch_root(r->model);
    if (root->kind != MG_PK_DICT) return mg_error_set(err, MG_ERR_IO, "%s: not a dict of Megatron's", path);
    if (first) {
        s->base.args = mg_pk_get(root, "args");
        if (!s->base.args || strcmp(mg_pk_call_name(s->base.args), "argparse.Namespace"))
            return mg_error_set(err, MG_ERR_IO, "%s: no args (argparse.Namespace) saved: a checkpoint Megatron's "
                                "training loop wrote holds them", path);
        if (!mg_pk_int(mg_pk_get(root, "iteration"), &s->base.iteration)) s->base.iteration = 0;
        double ver = 0;
        mg_pk_num(mg_pk_get(root, "checkpoint_version"), &ver);
        if (ver < 3.0)
            return mg_error_set(err, MG_ERR_UNSUPPORTED, "%s: checkpoint_version %g (Megatron-Core's is 3.0): an older "
                                "layout of the query/key/value weights mgraph does not read", path, ver);
        s->base.scheduler = mg_pk_get(root, "opt_param_scheduler");
        if (!s->base.scheduler) s->base.scheduler = mg_pk_get(root, "lr_scheduler");
        int64_t tp = 1, pp = 1, ep = 1;
        ms_arg_int(s->base.args, "tensor_model_parallel_size", &tp);
        ms_arg_int(s->base.args, "pipeline_model_parallel_size", &pp);
        ms_arg_int(s->base.args, "expert_model_parallel_size", &ep);
        if (tp < 1 || pp < 1 || ep < 1 || tp > 4096 || pp > 4096 || ep > 4096)
            return mg_error_set(err, MG_ERR_IO, "%s: args with a bad parallel size", path);
        s->tp = (int)tp, s->pp = (int)pp, s->ep = (int)ep;
        s->swiglu = ms_arg_true(s->base.args, "swiglu");
    }
    /* the model chunks: 'model' or 'model0'...'modelN' */
    int nv = 0;
    if (mg_pk_get(root, "model")) nv = 1;
    else
        for (char k[16]; nv < MAXV && (snprintf(k, sizeof k, "model%d", nv), mg_pk_get(root, k)); nv++) {}
    if (!nv) return mg_error_set(err, MG_ERR_IO, "%s: no model state dict ('model' or 'model0')", path);
    if (first) s->vp = nv;
    else if (nv != s->vp)
        return mg_error_set(err, MG_ERR_IO, "%s: %d model chunks, the first rank has %d", path, nv, s->vp);
    for (int v = 0; v < nv && !rc; v++) {
        char k[16];
        snprintf(k, sizeof k, nv == 1 ? "model" : "model%d", v);
        rc = chunk_params(s, r, mg_pk_get(root, k), k, &r->chunk[v], err);
    }
    if (rc) return rc;
    const mg_pk *opt = mg_pk_get(root, "optimizer");
    if (first) s->base.has_moments = opt != NULL;
    else if ((opt != NULL) != s->base.has_moments)
        return mg_error_set(err, MG_ERR_IO, "%s: %s optimizer state where the first rank has %s", path, opt ? "an" : "no",
                            opt ? "none" : "one");
    if (!opt) return MG_OK;
    if (opt->kind == MG_PK_LIST)
        return mg_error_set(err, MG_ERR_UNSUPPORTED, "%s: several optimizers' states (a chained optimizer: expert "
                            "parallelism or a separate expert optimizer): mgraph reads one", path);
    if (ms_arg_true(s->base.args, "use_distributed_optimizer")) {
        const mg_pk *groups = mg_pk_get(mg_pk_get(opt, "optimizer"), "param_groups");
        double step;
        if (s->base.adam_step < 0 && groups && groups->kind == MG_PK_LIST && groups->len &&
            group_num(groups->items[0], "step", &step))
            s->base.adam_step = (int64_t)step;
        snprintf(path, sizeof path, "%s/distrib_optim.pt", r->dir);
        rc = mg_torch_open(path, "Megatron distributed optimizer state", false, &r->dopt, err);
        if (!rc) rc = mg_torch_verify(r->dopt, err);
        return rc ? rc : read_dist_opt(s, r, p, err);
    }
    return read_plain_opt(s, r, p, opt, err);
}

/* ---- logical tensors ----------------------------------------------------------------------- */
static mparam *find(mchunk *c, const char *key) {
    for (int i = 0; i < c->n; i++)
        if (!strcmp(c->p[i].key, key)) return &c->p[i];
    return NULL;
}

static int read_one(mparam *q, int what, float *out, mg_error *err) {
    mg_torch_tensor t;
    if (q->flat[0]) { /* the distributed optimizer's buffers hold the main copy too */
        t = *q->flat[what];
        t.offset += q->flat_off;
        t.shape[0] = q->numel;
    } else if (what == MS_PARAM) {
        t = q->master ? *q->master : *q->w;
        if (q->master && mg_torch_numel(q->master) != q->numel)
            return mg_error_set(err, MG_ERR_IO, "the fp32 main copy of %s has %lld elements, the parameter %lld", q->key,
                                (long long)mg_torch_numel(q->master), (long long)q->numel);
    } else {
        t = *q->mom[what - 1];
        if (mg_torch_numel(&t) != q->numel)
            return mg_error_set(err, MG_ERR_IO, "the optimizer state of %s has %lld elements, the parameter %lld", q->key,
                                (long long)mg_torch_numel(&t), (long long)q->numel);
    }
    return mg_torch_tensor_f32(&t, out, q->key, err);
}

/* How a logical tensor is cut over tensor-parallel ranks: 0 rows, 1 columns, -1 not. */
static int split_dim(const char *name) {
    const char *rows[] = {"linear_qkv.weight", "linear_qkv.bias", "linear_fc1.weight", "linear_fc1.bias",
                          "word_embeddings.weight", "output_layer.weight"};
    const char *cols[] = {"linear_proj.weight", "linear_fc2.weight"};
    for (size_t i = 0; i < sizeof rows / sizeof *rows; i++)
        if (ends_with(name, rows[i])) return 0;
    for (size_t i = 0; i < sizeof cols / sizeof *cols; i++)
        if (ends_with(name, cols[i])) return 1;
    return -1;
}

static int tget(ms_src *base, const char *name, int what, int *ndim, int64_t shape[2], float **out, mg_error *err) {
    tsrc *s = (tsrc *)base;
    *ndim = 0;
    if (out) *out = NULL;
    /* where it lives: a layer's chunk, the first stage's first chunk (the embedding), the
     * last stage's last chunk (final norm, output layer) */
    int p = 0, v = 0, layer;
    char key[512];
    const char *rest = NULL;
    if (sscanf(name, "decoder.layers.%d.", &layer) == 1) {
        rest = strchr(name + strlen("decoder.layers."), '.') + 1;
        bool found = false;
        for (int vv = 0; vv < s->vp && !found; vv++)
            for (int pp = 0; pp < s->pp && !found; pp++) {
                mchunk *c = &rank_at(s, 0, pp, 0)->chunk[vv];
                if (layer >= c->first_layer && layer < c->first_layer + c->layers) found = true, p = pp, v = vv;
            }
        if (!found) return MG_OK;
        snprintf(key, sizeof key, "decoder.layers.%d.%s", layer - rank_at(s, 0, p, 0)->chunk[v].first_layer, rest);
    } else {
        if (strncmp(name, "embedding.", 10)) p = s->pp - 1, v = s->vp - 1;
        snprintf(key, sizeof key, "%s", name);
    }
    int sd = split_dim(name);
    int T = sd < 0 ? 1 : s->tp;
    mparam *q[256] = {0};
    if (T > 256) return mg_error_set(err, MG_ERR_UNSUPPORTED, "tensor parallelism over 256");
    for (int t = 0; t < T; t++) {
        q[t] = find(&rank_at(s, t, p, 0)->chunk[v], key);
        if (!q[t] && t == 0) return MG_OK;
        if (!q[t] || q[t]->w->ndim != q[0]->w->ndim || q[t]->w->shape[0] != q[0]->w->shape[0] ||
            (q[t]->w->ndim == 2 && q[t]->w->shape[1] != q[0]->w->shape[1]))
            return mg_error_set(err, MG_ERR_IO, "%s: %s is missing or of another shape than on tensor rank 0",
                                rank_at(s, t, p, 0)->dir, key);
    }
    int nd = q[0]->w->ndim;
    int64_t r0 = q[0]->w->shape[0], c0 = nd == 2 ? q[0]->w->shape[1] : 1;
    if (sd == 1 && nd != 2) sd = -1, T = 1;
    int64_t R = sd == 0 ? r0 * T : r0, C = sd == 1 ? c0 * T : c0;
    *ndim = nd;
    shape[0] = R, shape[1] = nd == 2 ? C : 0;
    for (int t = 0; t < s->tp; t++) { /* (a replicated tensor's copies on the other ranks too) */
        mparam *c = t < T ? q[t] : find(&rank_at(s, t, p, 0)->chunk[v], key);
        if (c) c->used = true;
    }
    if (!out) return MG_OK;
    if (what != MS_PARAM && !s->base.has_moments) return mg_error_set(err, MG_ERR_IO, "no optimizer state for %s", name);
    float *full = malloc((size_t)(R * C) * sizeof *full), *part = malloc((size_t)(r0 * c0) * sizeof *part);
    int rc = full && part ? MG_OK : mg_error_set(err, MG_ERR_NOMEM, "out of memory (%s)", name);
    /* a gated MLP's fc1: each shard is [gate_t; up_t], the logical tensor [gate; up] */
    bool glu = s->swiglu && sd == 0 && (ends_with(name, "linear_fc1.weight") || ends_with(name, "linear_fc1.bias"));
    if (glu && r0 % 2) rc = mg_error_set(err, MG_ERR_IO, "%s: a gated linear_fc1 with an odd number of rows", name);
    for (int t = 0; t < T && !rc; t++) {
        rc = read_one(q[t], what, part, err);
        for (int64_t i = 0; !rc && i < r0; i++) {
            int64_t row = sd == 0 ? t * r0 + i : i, col = sd == 1 ? t * c0 : 0;
            if (glu) row = i < r0 / 2 ? t * (r0 / 2) + i : R / 2 + t * (r0 / 2) + (i - r0 / 2);
            memcpy(full + row * C + col, part + i * c0, (size_t)c0 * sizeof *full);
        }
    }
    free(part);
    if (rc) {
        free(full);
        return rc;
    }
    *out = full;
    return MG_OK;
}

static const char *tunused(ms_src *base, const char *ignore) {
    tsrc *s = (tsrc *)base;
    for (int t = 0; t < s->tp; t++)
        for (int p = 0; p < s->pp; p++)
            for (int v = 0; v < s->vp; v++) {
                mchunk *c = &rank_at(s, t, p, 0)->chunk[v];
                for (int i = 0; i < c->n; i++)
                    if (!c->p[i].used && !(ignore && !strcmp(ignore, c->p[i].key))) return c->p[i].key;
            }
    return NULL;
}

static void tclose(ms_src *base) {
    tsrc *s = (tsrc *)base;
    for (int i = 0; s->r && i < s->tp * s->pp * s->ep; i++) {
        for (int v = 0; v < MAXV; v++) free(s->r[i].chunk[v].p);
        mg_torch_close(s->r[i].model);
        mg_torch_close(s->r[i].dopt);
    }
    free(s->r);
    free(s);
}

int ms_open_torch(const mg_megatron_info *info, ms_src **out, mg_error *err) {
    *out = NULL;
    tsrc *s = calloc(1, sizeof *s);
    if (!s) return mg_error_set(err, MG_ERR_NOMEM, "out of memory");
    s->base.get = tget, s->base.unused = tunused, s->base.close = tclose, s->base.what = s->what;
    s->base.adam_step = -1;
    s->tp = s->pp = s->ep = 1;
    /* the first rank's args say how the others are named */
    mrank first = {0};
    snprintf(first.dir, sizeof first.dir, "%s/mp_rank_00%s", info->dir,
             info->n_parts == 1 ? "" : info->n_parts == 2 ? "_000" : "_000_000");
    int rc = open_rank(s, &first, 0, true, err);
    if (!rc) {
        int want_parts = 1 + (s->pp > 1) + (s->ep > 1);
        if (want_parts != info->n_parts || info->tp != s->tp || info->n_rank_dirs != s->tp * s->pp * s->ep)
            rc = mg_error_set(err, MG_ERR_IO, "%s: %d rank directories, the args say tensor %d x pipeline %d x expert %d "
                              "(a rank's directory is missing or extra)", info->dir, info->n_rank_dirs, s->tp, s->pp,
                              s->ep);
        else if (s->ep > 1)
            rc = mg_error_set(err, MG_ERR_UNSUPPORTED, "%s: expert parallelism (--expert-model-parallel-size %d): "
                              "mgraph-convert reads dense Megatron GPT models", info->dir, s->ep);
    }
    if (!rc && !(s->r = calloc((size_t)(s->tp * s->pp * s->ep), sizeof *s->r)))
        rc = mg_error_set(err, MG_ERR_NOMEM, "out of memory");
    for (int t = 0; !rc && t < s->tp; t++)
        for (int p = 0; !rc && p < s->pp; p++)
            for (int e = 0; !rc && e < s->ep; e++) {
                mrank *r = rank_at(s, t, p, e);
                if (t == 0 && p == 0 && e == 0) { /* (opened first: its directory's name has the same form) */
                    *r = first;
                    memset(&first, 0, sizeof first);
                    continue;
                }
                int n = snprintf(r->dir, sizeof r->dir, "%s/mp_rank_%02d", info->dir, t);
                if (s->pp > 1) n += snprintf(r->dir + n, sizeof r->dir - (size_t)n, "_%03d", p);
                if (s->ep > 1) snprintf(r->dir + n, sizeof r->dir - (size_t)n, "_%03d", e);
                rc = open_rank(s, r, p, false, err);
            }
    if (!rc && s->base.has_moments && rank_at(s, 0, 0, 0)->dopt == NULL && ms_arg_true(s->base.args, "use_distributed_optimizer"))
        rc = mg_error_set(err, MG_ERR_IO, "%s: no distrib_optim.pt", rank_at(s, 0, 0, 0)->dir);
    /* the layers' global numbers: chunk by chunk, stage by stage (Megatron's order) */
    int64_t L = 0, total = 0;
    ms_arg_int(s->base.args, "num_layers", &L);
    for (int v = 0; !rc && v < s->vp; v++)
        for (int p = 0; !rc && p < s->pp; p++) {
            int layers = rank_at(s, 0, p, 0)->chunk[v].layers;
            for (int t = 0; t < s->tp; t++) {
                mchunk *c = &rank_at(s, t, p, 0)->chunk[v];
                if (c->layers != layers)
                    rc = mg_error_set(err, MG_ERR_IO, "%s: %d layers where tensor rank 0 has %d", rank_at(s, t, p, 0)->dir,
                                      c->layers, layers);
                c->first_layer = (int)total;
            }
            total += layers;
        }
    if (!rc && total != L)
        rc = mg_error_set(err, MG_ERR_IO, "%s: the stages hold %lld layers, the args say %lld", info->dir, (long long)total,
                          (long long)L);
    if (!rc)
        snprintf(s->what, sizeof s->what, "torch format, tensor %d x pipeline %d%s, %s", s->tp, s->pp,
                 s->vp > 1 ? " (interleaved)" : "",
                 !s->base.has_moments ? "no optimizer state"
                 : ms_arg_true(s->base.args, "use_distributed_optimizer") ? "distributed optimizer"
                                                                           : "optimizer state");
    if (rc) {
        for (int v = 0; v < MAXV; v++) free(first.chunk[v].p);
        mg_torch_close(first.model);
        mg_torch_close(first.dopt);
        tclose(&s->base);
        return rc;
    }
    *out = &s->base;
    return MG_OK;
}

/* mgraph-convert: mgraph checkpoints <-> Hugging Face GPT2LMHeadModel / LlamaForCausalLM
 * (and its variants Qwen2ForCausalLM, Qwen3ForCausalLM, MistralForCausalLM), the MoE classes
 * MixtralForCausalLM and Qwen3MoeForCausalLM, and DeepseekV3ForCausalLM (multi-latent
 * attention and DeepSeek-V3's MoE).
 *
 *   mgraph-convert --load CKPT --to-hf DIR      config.json + model.safetensors
 *   mgraph-convert --from-hf DIR --save CKPT    an mgraph checkpoint at iteration 0
 *   mgraph-convert --from-megatron DIR --save CKPT   a Megatron-LM checkpoint (torch or torch_dist
 *                                                format), its iteration, schedule and Adam state
 *                                                (tools/convert_megatron.c)
 *
 * The architecture follows the checkpoint's model flags (tools/model_flags.c: GPT-2 exactly,
 * or RMSNorm + rope + SwiGLU: the LLaMA family, with experts or multi-latent attention its
 * MoE classes) or config.json's model_type; each one's names and layouts are in
 * convert_gpt2.c / convert_llama.c / convert_deepseek.c, the experts' in convert_moe.c.
 * mgraph's word embedding (and LLaMA's untied lm_head) is padded to a multiple of
 * --make-vocab-size-divisible-by x tp, HF's is not: export drops the padded rows, import adds
 * zero rows (which take part in mgraph's softmax, as in Megatron: to evaluate exactly as
 * transformers does, import with a --make-vocab-size-divisible-by that divides the
 * vocabulary). The checkpoint written by --from-hf holds the model only (no optimizer
 * state), as Megatron's converters do. --from-hf reads model.safetensors, or the shards
 * model.safetensors.index.json lists; experts are read and written one matrix each, as
 * Hugging Face checkpoints hold them.
 *
 * Exit status: 0 success, 2 bad usage or input (one message on stderr), 1 failure.
 */
#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "mgraph/infile.h"
#include "mgraph/tokenizer.h"
#include "convert.h"
#include "tool_signals.h"
#include "convert_megatron.h"
#include "model_flags.h"
#include "mgraph/checkpoint.h"
#include "mgraph/outfile.h"
#include "mgraph/safetensors.h"

typedef struct opts {
    const char *load, *to_hf, *from_hf, *save, *tokenizer_type, *from_megatron;
    int divisible_by, tp;
    int64_t true_vocab_size;
    bool no_load_optim;
} opts;

/* ---- the model (convert.h) ----------------------------------------------------------------- */
int cv_add3(cv_model *m, const char *name, int64_t d0, int64_t d1, int64_t d2, mg_error *err) {
    int rc = cv_add(m, name, d0 * d1, d2, err);
    if (rc) return rc;
    cv_tensor *t = &m->t[m->n - 1];
    t->ndim = 3, t->shape[0] = d0, t->shape[1] = d1, t->shape[2] = d2;
    return MG_OK;
}

int cv_add(cv_model *m, const char *name, int64_t rows, int64_t cols, mg_error *err) {
    if (m->n == m->cap) {
        int cap = m->cap ? 2 * m->cap : 64;
        cv_tensor *t = realloc(m->t, (size_t)cap * sizeof *t);
        if (!t) return mg_error_set(err, MG_ERR_NOMEM, "out of memory");
        m->t = t, m->cap = cap;
    }
    cv_tensor *t = &m->t[m->n];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->ndim = cols ? 2 : 1;
    t->shape[0] = rows;
    t->shape[1] = cols;
    if (!(t->data = calloc((size_t)(rows * (cols ? cols : 1)), sizeof(float))))
        return mg_error_set(err, MG_ERR_NOMEM, "out of memory (%s)", name);
    m->n++;
    return MG_OK;
}

cv_tensor *cv_find(cv_model *m, const char *name) {
    for (int i = 0; i < m->n; i++)
        if (!strcmp(m->t[i].name, name)) return &m->t[i];
    return NULL;
}

void cv_model_free(cv_model *m) {
    for (int i = 0; i < m->n; i++) free(m->t[i].data);
    free(m->t);
    m->t = NULL, m->n = m->cap = 0;
}

double cv_float_decimal(float f) {
    char buf[32];
    for (int p = 1; p <= 9; p++) {
        snprintf(buf, sizeof buf, "%.*g", p, (double)f);
        if (strtof(buf, NULL) == f) break;
    }
    return strtod(buf, NULL);
}

int cv_cfg_int(json_t *cfg, const char *k, int64_t def, int64_t *v, const char *path, mg_error *err) {
    json_t *x = json_object_get(cfg, k);
    if (!x || json_is_null(x)) {
        if (def < 0) return mg_error_set(err, MG_ERR_INVALID, "%s: %s missing", path, k);
        *v = def;
        return MG_OK;
    }
    if (!json_is_integer(x) || json_integer_value(x) < 1 || json_integer_value(x) > 100000000)
        return mg_error_set(err, MG_ERR_INVALID, "%s: %s is not a positive integer", path, k);
    *v = json_integer_value(x);
    return MG_OK;
}

/* The class of c: the LLaMA family's by its switches (model_arch refuses the others). */
static const cv_arch *arch_of(const cv_cfg *c) {
    if (c->arch != CV_LLAMA) return &cv_gpt2;
    if (c->mla.enabled) return &cv_deepseek_v3;
    if (c->moe.num_experts > 0) return c->qk_norm ? &cv_qwen3_moe : &cv_mixtral;
    return c->window ? &cv_mistral : c->qk_norm ? &cv_qwen3 : c->qkv_bias && !c->bias ? &cv_qwen2 : &cv_llama;
}

/* c as the model config mgraph-run builds (the checkpoint's model flags come from it). */
static mg_gpt_config gpt_of(const cv_cfg *c) {
    mg_gpt_config m = mg_gpt_defaults();
    bool llama = c->arch == CV_LLAMA;
    m.num_layers = c->layers, m.hidden = c->hidden, m.ffn_hidden = c->ffn, m.heads = c->heads;
    m.seq_length = m.max_position = c->positions, m.vocab = c->padded, m.ln_eps = (float)c->eps;
    m.norm = llama ? MG_NORM_RMSNORM : MG_NORM_LAYERNORM, m.pos_emb = llama ? MG_POS_ROPE : MG_POS_LEARNED;
    m.swiglu = llama, m.query_groups = c->groups, m.untie_embeddings = c->untied, m.disable_bias_linear = !c->bias;
    m.add_qkv_bias = c->qkv_bias && !c->bias, m.qk_layernorm = c->qk_norm, m.gelu_exact = c->gelu_exact;
    m.window = c->window, m.rotary_base = (float)c->rope_base, m.kv_channels = c->head_dim;
    m.rope = c->rope, m.mla = c->mla, m.moe = c->moe, m.mtp_num_layers = c->mtp_layers;
    return m;
}

/* What an export needs of the model beyond one class's options (the class's own rules are
 * in its read_config's converse, checked here on what the checkpoint says). */
static int check_export(const cv_cfg *c, const char *path, mg_error *err) {
    const mg_moe_config *o = &c->moe;
    if (c->mtp_layers > 0 && !c->mla.enabled)
        return mg_error_set(err, MG_ERR_UNSUPPORTED, "%s: multi-token prediction (--mtp-num-layers) without multi-latent "
                            "attention: DeepseekV3ForCausalLM is the only Hugging Face class mgraph-convert writes with "
                            "MTP layers", path);
    if (c->rope.interleaved)
        return mg_error_set(err, MG_ERR_UNSUPPORTED, "%s: --rotary-interleaved: no Hugging Face class mgraph-convert "
                            "writes pairs adjacent RoPE channels outside multi-latent attention", path);
    if (c->mla.enabled) { /* DeepseekV3ForCausalLM */
        const char *why = c->groups != c->heads ? "grouped-query attention"
                          : !c->qk_norm          ? "latents without norms (give --qk-layernorm)"
                          : c->bias              ? "linear biases"
                          : c->window            ? "a sliding window"
                          : o->num_experts && o->score != MG_MOE_SIGMOID ? "softmax router scores"
                          : o->num_experts && o->num_groups > 1 && o->topk / o->group_topk != 2
                              ? "groups chosen by other than their top-2 scores (--moe-router-topk / --moe-router-group-topk)"
                          : o->num_experts && o->shared_ffn % (o->ffn_hidden ? o->ffn_hidden : c->ffn)
                              ? "shared experts of other than a multiple of the experts' size"
                              : NULL;
        int dense = 0;
        while (!why && o->num_experts && dense < c->layers && !mg_moe_is_layer(&(mg_gpt_config){.moe = *o}, dense)) dense++;
        for (int i = dense; !why && o->num_experts && i < c->layers; i++)
            if (!mg_moe_is_layer(&(mg_gpt_config){.moe = *o}, i)) why = "dense layers after MoE layers";
        if (why)
            return mg_error_set(err, MG_ERR_UNSUPPORTED, "%s: multi-latent attention with %s is no Hugging Face class "
                                "mgraph-convert writes (DeepseekV3ForCausalLM)", path, why);
        return MG_OK;
    }
    if (o->num_experts > 0) { /* MixtralForCausalLM or Qwen3MoeForCausalLM */
        const char *why = o->score != MG_MOE_SOFTMAX ? "sigmoid router scores"
                          : o->num_groups             ? "group-limited routing"
                          : o->topk_scaling > 0 && o->topk_scaling != 1 ? "a top-k scaling factor"
                          : o->expert_bias            ? "an expert bias"
                          : o->shared_ffn             ? "shared experts"
                          : c->bias || c->qkv_bias    ? "linear biases"
                                                      : NULL;
        if (!why && !c->qk_norm) { /* Mixtral: every layer MoE, softmax after the top-k */
            for (int i = 0; i < c->layers && !why; i++)
                if (!mg_moe_is_layer(&(mg_gpt_config){.moe = *o}, i)) why = "dense layers (Mixtral's are all MoE)";
            if (!why && o->pre_softmax) why = "--moe-router-pre-softmax (Mixtral normalises over the top-k)";
            if (!why && c->head_dim && c->head_dim * c->heads != c->hidden) why = "--kv-channels";
            if (!why && c->rope.scaling != MG_ROPE_DEFAULT) why = "RoPE scaling";
        }
        if (why)
            return mg_error_set(err, MG_ERR_UNSUPPORTED, "%s: a mixture of experts with %s is no Hugging Face class "
                                "mgraph-convert writes (MixtralForCausalLM, Qwen3MoeForCausalLM)", path, why);
    }
    return MG_OK;
}


/* ---- mgraph checkpoint side -------------------------------------------------------------------- */
static int json_int(json_t *o, const char *k, int64_t *v, const char *what, mg_error *err) {
    json_t *x = json_object_get(o, k);
    if (!json_is_integer(x) || json_integer_value(x) < 0) return mg_error_set(err, MG_ERR_IO, "%s: %s missing or invalid", what, k);
    *v = json_integer_value(x);
    return MG_OK;
}

/* The architecture of the checkpoint's model flags (tools/run_checkpoint.c model_json):
 * GPT-2 exactly, or the LLaMA family; anything else is neither HF class. */
static int model_arch(json_t *mm, const char *path, cv_cfg *c, mg_error *err) {
    const char *arch = json_string_value(json_object_get(mm, "arch"));
    if (json_is_true(json_object_get(mm, "qk_l2_norm")))
        return mg_error_set(err, MG_ERR_UNSUPPORTED, "%s: --qk-l2-norm: no Hugging Face class mgraph-convert writes "
                            "has weightless q/k norms", path);
    if (json_is_true(json_object_get(mm, "squared_relu")))
        return mg_error_set(err, MG_ERR_UNSUPPORTED, "%s: --squared-relu: no Hugging Face class mgraph-convert writes "
                            "has that MLP", path);
    json_t *ge = json_object_get(mm, "gelu_exact"); /* (absent: saved before it, the tanh form) */
    if (ge && !json_is_boolean(ge)) return mg_error_set(err, MG_ERR_IO, "%s: model flags missing or invalid", path);
    c->gelu_exact = json_is_true(ge);
    if (arch && !strcmp(arch, "gpt2")) {
        c->arch = CV_GPT2, c->bias = true, c->untied = false, c->rope_base = 10000;
        return MG_OK;
    }
    if (!arch || strcmp(arch, "gpt")) return mg_error_set(err, MG_ERR_UNSUPPORTED, "%s: model arch '%s' is unknown", path, arch ? arch : "?");
    const char *norm = json_string_value(json_object_get(mm, "normalization"));
    const char *pos = json_string_value(json_object_get(mm, "position_embedding_type"));
    json_t *rp = json_object_get(mm, "rotary_percent"), *rb = json_object_get(mm, "rotary_base");
    const char *why = !norm || strcmp(norm, "RMSNorm")                 ? "--normalization RMSNorm"
                      : !pos || strcmp(pos, "rope")                    ? "--position-embedding-type rope"
                      : !json_is_true(json_object_get(mm, "swiglu"))   ? "--swiglu"
                      : !json_is_number(rp) || json_number_value(rp) != 1.0 ? "--rotary-percent 1.0"
                                                                       : NULL;
    json_t *ne = json_object_get(mm, "num_experts");
    if (why && json_is_integer(ne) && json_integer_value(ne) > 0)
        return mg_error_set(err, MG_ERR_UNSUPPORTED, "%s: a mixture-of-experts model that is none of MixtralForCausalLM, "
                            "Qwen3MoeForCausalLM and DeepseekV3ForCausalLM, which need %s", path, why);
    if (why)
        return mg_error_set(err, MG_ERR_UNSUPPORTED,
                            "%s: this GPT is neither GPT2LMHeadModel (GPT-2's flags exactly) nor LlamaForCausalLM, "
                            "which needs %s", path, why);
    int64_t g = 0;
    int rc = json_int(mm, "num_query_groups", &g, path, err);
    json_t *un = json_object_get(mm, "untie_embeddings_and_output_weights"), *nb = json_object_get(mm, "disable_bias_linear");
    json_t *qb = json_object_get(mm, "add_qkv_bias"), *qn = json_object_get(mm, "qk_layernorm"); /* (absent: older) */
    json_t *w = json_object_get(mm, "window"), *wf = json_object_get(mm, "window_attn_skip_freq");
    if (!rc && (!json_is_boolean(un) || !json_is_boolean(nb) || !json_is_number(rb) || g < 1 || g > 1000000 ||
                (qb && !json_is_boolean(qb)) || (qn && !json_is_boolean(qn)) ||
                (w && !(json_is_integer(w) && json_integer_value(w) >= 0 && json_integer_value(w) <= 100000000)) ||
                (wf && !json_is_integer(wf))))
        rc = mg_error_set(err, MG_ERR_IO, "%s: model flags missing or invalid", path);
    if (rc) return rc;
    c->arch = CV_LLAMA, c->groups = (int)g, c->untied = json_is_true(un), c->bias = !json_is_true(nb);
    c->qkv_bias = json_is_true(qb), c->qk_norm = json_is_true(qn);
    c->rope_base = json_number_value(rb);
    c->window = w ? (int)json_integer_value(w) : 0;
    if (c->qk_norm && (c->bias || c->qkv_bias)) /* Qwen3's attention_bias would bias o_proj too */
        return mg_error_set(err, MG_ERR_UNSUPPORTED, "%s: --qk-layernorm with biases is no Hugging Face class "
                            "(Qwen3ForCausalLM has q/k norms with --disable-bias-linear and no --add-qkv-bias)", path);
    if (c->window && wf && json_integer_value(wf) != 0) /* Mistral's window is in every layer */
        return mg_error_set(err, MG_ERR_UNSUPPORTED, "%s: --window-attn-skip-freq (full-attention layers among the "
                            "windowed ones) is no Hugging Face class mgraph-convert writes", path);
    if (c->window && (c->bias || c->qkv_bias || c->qk_norm))
        return mg_error_set(err, MG_ERR_UNSUPPORTED, "%s: a sliding window with biases or --qk-layernorm is no Hugging "
                            "Face class mgraph-convert writes (MistralForCausalLM has neither)", path);
    /* head size, RoPE scaling, multi-latent attention, experts (tools/model_flags.c) */
    mg_gpt_config v = mg_gpt_defaults();
    rc = mg_model_flags_read_variants(mm, path, &v, err);
    if (rc) return rc;
    c->head_dim = v.kv_channels, c->rope = v.rope, c->mla = v.mla, c->moe = v.moe, c->mtp_layers = v.mtp_num_layers;
    return MG_OK;
}

static int load_mgraph(const char *path, cv_model *m, mg_error *err) {
    mg_ckpt *ck = NULL;
    int rc = mg_ckpt_open(path, &ck, err);
    if (rc) return rc;
    json_t *meta = json_loads(mg_ckpt_meta(ck), 0, NULL), *mm = json_object_get(meta, "model");
    int64_t v[7] = {0};
    const char *keys[] = {"num_layers", "hidden_size", "ffn_hidden_size", "num_attention_heads", "max_position_embeddings",
                          "vocab_size", "padded_vocab_size"};
    cv_cfg *c = &m->cfg;
    rc = model_arch(mm, path, c, err);
    for (int i = 0; i < 7 && !rc; i++) rc = json_int(mm, keys[i], &v[i], path, err);
    if (!rc) {
        c->layers = (int)v[0], c->hidden = (int)v[1], c->ffn = (int)v[2], c->heads = (int)v[3], c->positions = (int)v[4];
        c->vocab = v[5], c->padded = v[6];
        if (c->arch == CV_GPT2) c->groups = c->heads;
        json_t *eps = json_object_get(mm, "layernorm_epsilon");
        c->eps = json_is_number(eps) ? json_number_value(eps) : 1e-5;
        json_t *dr = json_object_get(meta, "dropout");
        c->hidden_dropout = json_number_value(json_object_get(dr, "hidden"));
        c->attention_dropout = json_number_value(json_object_get(dr, "attention"));
        bool heads_divide = c->heads >= 1 && (c->hidden % c->heads == 0 || c->head_dim > 0 || c->mla.enabled);
        if (c->layers < 1 || c->hidden < 1 || !heads_divide || c->groups < 1 || c->heads % c->groups ||
            c->vocab < 1 || c->padded < c->vocab || c->ffn < 1 || c->positions < 1 || c->layers > 100000 ||
            c->hidden > 1000000 || c->ffn > 10000000 || c->positions > 10000000 || c->padded > 100000000)
            rc = mg_error_set(err, MG_ERR_IO, "%s: inconsistent model sizes in the checkpoint", path);
    }
    json_decref(meta);
    if (!rc) rc = check_export(c, path, err);
    if (!rc) rc = arch_of(c)->alloc(m, err);
    mg_ckpt_piece *want = rc ? NULL : calloc((size_t)m->n, sizeof *want);
    if (!rc && !want) rc = mg_error_set(err, MG_ERR_NOMEM, "out of memory");
    for (int i = 0; !rc && i < m->n; i++) {
        cv_tensor *t = &m->t[i];
        want[i] = (mg_ckpt_piece){.name = t->name, .dtype = MG_F32, .ndim = t->ndim, .data = t->data};
        for (int d = 0; d < t->ndim; d++) want[i].shape[d] = want[i].block[d] = t->shape[d];
    }
    if (!rc) rc = mg_ckpt_fill(ck, want, m->n, err);
    free(want);
    mg_ckpt_close(ck);
    return rc;
}

/* The model flags mgraph-run checks on --load (tools/run_checkpoint.c model_json). */
static json_t *model_json(const cv_cfg *c) {
    mg_gpt_config g = gpt_of(c);
    return mg_model_flags_json(&g, c->vocab, c->divisible_by, c->tokenizer_type);
}

static int save_mgraph(const char *root, cv_model *m, mg_error *err) {
    const cv_cfg *c = &m->cfg;
    mg_ckpt_piece *p = calloc((size_t)m->n, sizeof *p);
    if (!p) return mg_error_set(err, MG_ERR_NOMEM, "out of memory");
    for (int i = 0; i < m->n; i++) {
        cv_tensor *t = &m->t[i];
        p[i] = (mg_ckpt_piece){.name = t->name, .dtype = MG_F32, .ndim = t->ndim, .data = t->data};
        for (int d = 0; d < t->ndim; d++) p[i].shape[d] = p[i].block[d] = t->shape[d];
    }
    char from[96];
    snprintf(from, sizeof from, "Hugging Face %s", arch_of(c)->hf_class);
    json_t *meta = json_pack("{s:o, s:I, s:I, s:{s:I, s:I}, s:{s:s, s:I}, s:{s:f, s:f}, s:b, s:s}", "model", model_json(c),
                             "iteration", (json_int_t)0, "consumed_samples", (json_int_t)0, "data",
                             "consumed_train_samples", (json_int_t)0, "eval_batches_done", (json_int_t)0, "rng", "kind",
                             "none (converted)", "seed", (json_int_t)0, "dropout", "hidden", c->hidden_dropout,
                             "attention", c->attention_dropout, "optimizer_state", 0, "converted_from", from);
    char *text = meta ? json_dumps(meta, JSON_COMPACT) : NULL;
    json_decref(meta);
    /* (the directory's lock, as a training job's: not while a job saves into it) */
    mg_ckpt_lock *lock = NULL;
    struct stat sb;
    bool existed = stat(root, &sb) == 0;
    int rc = text ? mg_ckpt_lock_take(root, &lock, err) : mg_error_set(err, MG_ERR_NOMEM, "out of memory");
    if (!rc && mg_ckpt_lock_warning(lock)) fprintf(stderr, "mgraph-convert: warning: %s\n", mg_ckpt_lock_warning(lock));
    bool begun = !rc && !(rc = mg_ckpt_begin(root, 0, err));
    if (!rc) rc = mg_ckpt_write_rank(root, 0, 0, p, m->n, NULL, 0, err);
    if (!rc) rc = mg_ckpt_finish(root, 0, 1, text, 0, err);
    if (rc && begun) mg_ckpt_abort(root, 0);
    if (rc && lock && !existed) { /* a directory this call made: gone again, lock file and all */
        char lp[4200];
        snprintf(lp, sizeof lp, "%s/.mgraph-save.lock", root);
        unlink(lp);
        rmdir(root);
    }
    mg_ckpt_lock_release(lock);
    free(text);
    free(p);
    return rc;
}

/* ---- Hugging Face side ----------------------------------------------------------------------- */
/* The safetensors files of a HF directory: model.safetensors, or the shards listed by
 * model.safetensors.index.json's weight_map. */
typedef struct hf_files {
    mg_st_file **f;
    int n;
    char index[4096];   /* the index's path, or "" */
    json_t *map;        /* weight_map (owned by idx) */
    json_t *idx;
    json_t *used;       /* the tensors read (a set): what is left over is refused */
} hf_files;

static void hf_close(hf_files *h) {
    for (int i = 0; i < h->n; i++) mg_st_close(h->f[i]);
    free(h->f);
    json_decref(h->idx);
    json_decref(h->used);
    memset(h, 0, sizeof *h);
}

static int hf_open(const char *dir, hf_files *h, mg_error *err) {
    memset(h, 0, sizeof *h);
    if (!(h->used = json_object())) return mg_error_set(err, MG_ERR_NOMEM, "out of memory");
    char path[4096];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    snprintf(h->index, sizeof h->index, "%s/model.safetensors.index.json", dir);
    struct stat sb;
    if (stat(path, &sb) == 0 || stat(h->index, &sb) != 0) {
        h->index[0] = '\0';
        if (!(h->f = calloc(1, sizeof *h->f))) return mg_error_set(err, MG_ERR_NOMEM, "out of memory");
        int rc = mg_st_open(path, &h->f[0], err);
        if (!rc) h->n = 1;
        return rc;
    }
    json_error_t je = {0};
    FILE *jf = NULL;
    int orc = mg_input_fopen(h->index, "shard index", &jf, err);
    if (orc) return orc;
    h->idx = json_loadf(jf, 0, &je);
    fclose(jf);
    h->map = json_object_get(h->idx, "weight_map");
    if (!json_is_object(h->map) || json_object_size(h->map) == 0)
        return mg_error_set(err, MG_ERR_INVALID, "%s: no weight_map object (%s)", h->index, h->idx ? "" : je.text);
    size_t nmax = json_object_size(h->map);
    const char **names = calloc(nmax, sizeof *names);
    h->f = calloc(nmax, sizeof *h->f);
    if (!names || !h->f) {
        free(names);
        return mg_error_set(err, MG_ERR_NOMEM, "out of memory");
    }
    const char *key;
    json_t *val;
    int rc = MG_OK;
    json_object_foreach(h->map, key, val) {
        const char *fn = json_string_value(val);
        if (!fn || !fn[0] || strchr(fn, '/') || !strcmp(fn, "..")) {
            rc = mg_error_set(err, MG_ERR_INVALID, "%s: weight_map[%s] is not a file name in %s", h->index, key, dir);
            break;
        }
        int k = 0;
        while (k < h->n && strcmp(names[k], fn)) k++;
        if (k < h->n) continue;
        snprintf(path, sizeof path, "%s/%s", dir, fn);
        if ((rc = mg_st_open(path, &h->f[h->n], err))) break;
        names[h->n++] = fn;
    }
    free(names);
    return rc;
}

/* The entry `key` (NULL when absent); with an index, in the file it names. */
static const mg_st_entry *hf_find(const hf_files *h, const char *key, mg_st_file **file, mg_error *err) {
    *file = NULL;
    if (!h->index[0]) {
        *file = h->f[0];
        return mg_st_find(h->f[0], key);
    }
    const char *fn = json_string_value(json_object_get(h->map, key));
    if (!fn) return NULL;
    for (int i = 0; i < h->n; i++) {
        const char *p = mg_st_path(h->f[i]), *base = strrchr(p, '/');
        if (strcmp(base ? base + 1 : p, fn)) continue;
        *file = h->f[i];
        const mg_st_entry *e = mg_st_find(h->f[i], key);
        if (!e) mg_error_set(err, MG_ERR_INVALID, "%s: %s is not in %s, which the index names", h->index, key, fn);
        return e;
    }
    return NULL;
}

static float half_to_float(uint16_t h) {
    int e = (h >> 10) & 31, m = h & 1023;
    float v = e == 0 ? ldexpf((float)m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexpf((float)(m | 1024), e - 25);
    return (h & 0x8000) ? -v : v;
}

/* The HF tensor `key` as f32 into out, checked against shape (ndim dims). *found false
 * (and MG_OK) when it is absent and optional. */
static int hf_get(const hf_files *h, const char *key, const char *alt, int ndim, const int64_t *shape, float *out,
                  bool optional, bool *found, mg_error *err) {
    mg_st_file *f = NULL;
    const mg_st_entry *e = hf_find(h, key, &f, err);
    if (!e && alt && !err->code) e = hf_find(h, alt, &f, err);
    if (err->code) return err->code;
    if (found) *found = e != NULL;
    if (e) json_object_set_new(h->used, e->key, json_true());
    if (!e && optional) return MG_OK;
    if (!e) return mg_error_set(err, MG_ERR_INVALID, "%s has no tensor %s", h->index[0] ? h->index : mg_st_path(h->f[0]), key);
    bool same = e->ndim == ndim;
    for (int d = 0; same && d < ndim; d++) same = e->shape[d] == shape[d];
    if (!same)
        return mg_error_set(err, MG_ERR_INVALID, "%s: %s has shape [%lld%s...], config.json implies [%lld, %lld]",
                            mg_st_path(f), e->key, (long long)e->shape[0], e->ndim > 1 ? ", " : "", (long long)shape[0],
                            (long long)(ndim > 1 ? shape[1] : 0));
    int64_t n = 1;
    for (int d = 0; d < ndim; d++) n *= shape[d];
    const void *src = mg_st_data(f, e);
    for (int64_t i = 0; i < n; i++) {
        if (e->dtype == MG_F32) memcpy(&out[i], (const char *)src + 4 * i, 4);
        else if (e->dtype == MG_BF16) {
            uint16_t b;
            memcpy(&b, (const char *)src + 2 * i, 2);
            uint32_t u = (uint32_t)b << 16;
            memcpy(&out[i], &u, 4);
        } else if (e->dtype == MG_F16) {
            uint16_t b;
            memcpy(&b, (const char *)src + 2 * i, 2);
            out[i] = half_to_float(b);
        } else return mg_error_set(err, MG_ERR_INVALID, "%s: %s has dtype %s, want a float type", mg_st_path(f), e->key,
                                   mg_st_dtype_name(e->dtype));
    }
    return MG_OK;
}

/* Every tensor of the files must have been read: one left over means config.json and the
 * weights disagree (n_layer smaller than the layers stored, a module mgraph's model
 * lacks), and converting would drop it silently. Transformers' own non-parameter buffers
 * of old checkpoints are not weights: GPT-2's causal-mask attn.bias / attn.masked_bias,
 * RoPE's inv_freq. */
static bool hf_buffer(const char *key) {
    static const char *suffix[] = {".attn.bias", ".attn.masked_bias", ".rotary_emb.inv_freq"};
    size_t n = strlen(key);
    for (size_t i = 0; i < sizeof suffix / sizeof *suffix; i++) {
        size_t k = strlen(suffix[i]);
        if (n > k && !strcmp(key + n - k, suffix[i])) return true;
    }
    return false;
}

static int hf_check_all_used(const hf_files *h, const char *dir, mg_error *err) {
    for (int i = 0; i < h->n; i++)
        for (int j = 0; j < mg_st_n_entries(h->f[i]); j++) {
            const mg_st_entry *e = mg_st_entry_at(h->f[i], j);
            if (json_object_get(h->used, e->key) || hf_buffer(e->key)) continue;
            return mg_error_set(err, MG_ERR_INVALID,
                                "%s: %s holds %s, which is not part of the model config.json describes (more layers "
                                "than num_hidden_layers / n_layer, or a module mgraph's model lacks): not converting "
                                "part of a model",
                                dir, mg_st_path(h->f[i]), e->key);
        }
    return MG_OK;
}

/* The types of config.json's keys that any reader here looks at: a value of another type
 * (layer_norm_epsilon "abc", hidden_act 7) is refused by name instead of being read as
 * absent and replaced by a default. */
typedef enum { K_INT = 1, K_NUM = 2, K_STR = 4, K_BOOL = 8, K_OBJ = 16, K_NULL = 32, K_ARR = 64 } key_kind;
static int check_config_types(json_t *cfg, const char *path, mg_error *err) {
    static const struct { const char *key; int kinds; } keys[] = {
        {"model_type", K_STR}, {"architectures", K_NULL}, /* (an array; checked below) */
        {"n_layer", K_INT}, {"n_embd", K_INT}, {"n_head", K_INT}, {"n_positions", K_INT}, {"n_ctx", K_INT},
        {"n_inner", K_INT | K_NULL}, {"vocab_size", K_INT}, {"layer_norm_epsilon", K_NUM},
        {"activation_function", K_STR}, {"resid_pdrop", K_NUM}, {"embd_pdrop", K_NUM}, {"attn_pdrop", K_NUM},
        {"scale_attn_weights", K_BOOL}, {"scale_attn_by_inverse_layer_idx", K_BOOL}, {"tie_word_embeddings", K_BOOL},
        {"num_hidden_layers", K_INT}, {"hidden_size", K_INT}, {"intermediate_size", K_INT},
        {"num_attention_heads", K_INT}, {"num_key_value_heads", K_INT | K_NULL}, {"head_dim", K_INT | K_NULL},
        {"max_position_embeddings", K_INT}, {"rms_norm_eps", K_NUM}, {"hidden_act", K_STR}, {"rope_theta", K_NUM},
        {"rope_scaling", K_OBJ | K_NULL}, {"rope_parameters", K_OBJ | K_NULL}, {"partial_rotary_factor", K_NUM},
        {"attention_bias", K_BOOL}, {"mlp_bias", K_BOOL}, {"attention_dropout", K_NUM},
        {"sliding_window", K_INT | K_NULL}, {"use_sliding_window", K_BOOL}, {"max_window_layers", K_INT},
        {"pretraining_tp", K_INT | K_NULL},
        /* the experts: Mixtral's, Qwen3-MoE's, DeepseekV3's */
        {"num_local_experts", K_INT}, {"num_experts", K_INT}, {"num_experts_per_tok", K_INT},
        {"moe_intermediate_size", K_INT}, {"decoder_sparse_step", K_INT}, {"mlp_only_layers", K_ARR | K_NULL},
        {"router_jitter_noise", K_NUM | K_NULL}, {"norm_topk_prob", K_BOOL}, {"n_routed_experts", K_INT | K_NULL},
        {"n_shared_experts", K_INT | K_NULL}, {"num_nextn_predict_layers", K_INT | K_NULL}, {"n_group", K_INT | K_NULL}, {"topk_group", K_INT | K_NULL},
        {"moe_layer_freq", K_INT}, {"first_k_dense_replace", K_INT}, {"scoring_func", K_STR},
        {"topk_method", K_STR}, {"routed_scaling_factor", K_NUM},
        /* DeepseekV3's multi-latent attention */
        {"q_lora_rank", K_INT | K_NULL}, {"kv_lora_rank", K_INT}, {"qk_nope_head_dim", K_INT},
        {"qk_rope_head_dim", K_INT}, {"v_head_dim", K_INT}, {"rope_interleave", K_BOOL},
    };
    for (size_t i = 0; i < sizeof keys / sizeof *keys; i++) {
        json_t *v = json_object_get(cfg, keys[i].key);
        if (!v || !strcmp(keys[i].key, "architectures")) continue;
        int k = keys[i].kinds;
        bool ok = (k & K_INT && json_is_integer(v)) || (k & K_NUM && json_is_number(v)) ||
                  (k & K_STR && json_is_string(v)) || (k & K_BOOL && json_is_boolean(v)) ||
                  (k & K_OBJ && json_is_object(v)) || (k & K_ARR && json_is_array(v)) || (k & K_NULL && json_is_null(v));
        if (!ok) {
            char *text = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
            int rc = mg_error_set(err, MG_ERR_INVALID, "%s: %s is %.60s, not %s", path, keys[i].key, text ? text : "?",
                                  k & K_INT   ? "an integer"
                                  : k & K_NUM ? "a number"
                                  : k & K_STR ? "a string"
                                  : k & K_BOOL ? "true or false"
                                  : k & K_ARR  ? "a list"
                                               : "an object");
            free(text);
            return rc;
        }
    }
    /* a partial rotary embedding (Phi, GPT-NeoX style) is not mgraph-convert's to map */
    json_t *pf = json_object_get(cfg, "partial_rotary_factor");
    if (pf && json_number_value(pf) != 1.0)
        return mg_error_set(err, MG_ERR_UNSUPPORTED, "%s: partial_rotary_factor %g (only 1: RoPE over the whole head)",
                            path, json_number_value(pf));
    return MG_OK;
}

static int load_hf(const opts *o, cv_model *m, mg_error *err) {
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", o->from_hf);
    json_error_t je = {0};
    FILE *jf = NULL;
    int orc = mg_input_fopen(path, "Hugging Face config", &jf, err);
    if (orc) return orc;
    json_t *cfg = json_loadf(jf, 0, &je);
    fclose(jf);
    if (!json_is_object(cfg)) {
        json_decref(cfg);
        return mg_error_set(err, MG_ERR_INVALID, "%s: not a JSON object (%s)", path, je.text);
    }
    int trc = check_config_types(cfg, path, err);
    if (trc) {
        json_decref(cfg);
        return trc;
    }
    const char *mt = json_string_value(json_object_get(cfg, "model_type"));
    const cv_arch *known[] = {&cv_gpt2,  &cv_llama,   &cv_qwen2,     &cv_qwen3,
                              &cv_mistral, &cv_mixtral, &cv_qwen3_moe, &cv_deepseek_v3},
                  *a = NULL;
    for (size_t i = 0; i < sizeof known / sizeof *known && mt; i++)
        if (!strcmp(mt, known[i]->model_type)) a = known[i];
    m->cfg.moe = mg_gpt_defaults().moe; /* (a dense model unless the class says otherwise) */
    m->cfg.rope = mg_gpt_defaults().rope;
    int rc = a ? a->read_config(a, cfg, path, &m->cfg, err)
               : mg_error_set(err, MG_ERR_UNSUPPORTED,
                              "%s: model_type '%s' (mgraph-convert reads gpt2, llama, qwen2, qwen3, mistral, mixtral, "
                              "qwen3_moe and deepseek_v3)",
                              path, mt ? mt : "missing");
    json_decref(cfg);
    if (rc) return rc;
    cv_cfg *c = &m->cfg;
    int64_t unit = (int64_t)o->divisible_by * o->tp;
    c->padded = (c->vocab + unit - 1) / unit * unit;
    c->divisible_by = o->divisible_by;
    if (o->tokenizer_type && !mg_tokenizer_type_known(o->tokenizer_type))
        return mg_error_set(err, MG_ERR_INVALID, "--tokenizer-type %s is not a tokenizer mgraph-run knows",
                            o->tokenizer_type);
    if (o->tokenizer_type) c->tokenizer_type = o->tokenizer_type;
    hf_files h = {0};
    rc = hf_open(o->from_hf, &h, err);
    /* num_nextn_predict_layers counts DeepSeek-V3's multi-token prediction layers, which its
     * own checkpoints hold; transformers writes the count (its default, 1) and no such layer:
     * the layers the files hold are read, and a shortfall said */
    for (int k = 0; !rc && k < c->mtp_layers; k++) {
        char mk[96];
        mg_st_file *f;
        snprintf(mk, sizeof mk, "model.layers.%d.eh_proj.weight", c->layers + k);
        const mg_st_entry *e = hf_find(&h, mk, &f, err);
        if (err->code) rc = err->code;
        if (e || rc) continue;
        fprintf(stderr,
                "mgraph-convert: note: %s: config.json's num_nextn_predict_layers is %d, the files hold %d multi-token "
                "prediction layer%s (no %s): imported with --mtp-num-layers %d\n",
                o->from_hf, c->mtp_layers, k, k == 1 ? "" : "s", mk, k);
        c->mtp_layers = k;
    }
    if (!rc) rc = a->alloc(m, err);
    float *buf = NULL;
    char key[160], alt[160];
    int cap = 2 * c->moe.num_experts + 4, np = 0;
    cv_part *parts = rc ? NULL : malloc((size_t)cap * sizeof *parts);
    if (!rc && !parts) rc = mg_error_set(err, MG_ERR_NOMEM, "out of memory");
    for (int i = 0; !rc && i < m->n; i++) {
        cv_tensor *t = &m->t[i];
        if (a->parts && (np = a->parts(a, c, t, parts, cap)) > 0) { /* straight into t's data */
            for (int k = 0; k < np && !rc; k++)
                rc = hf_get(&h, parts[k].key, NULL, parts[k].ndim, parts[k].shape, t->data + parts[k].offset, false,
                            NULL, err);
            continue;
        }
        int64_t hs[2];
        int nd = a->hf_shape(c, t, hs);
        free(buf);
        buf = malloc((size_t)(nd == 1 ? hs[0] : hs[0] * hs[1]) * sizeof *buf + 1);
        if (!buf) rc = mg_error_set(err, MG_ERR_NOMEM, "out of memory");
        a->hf_key(t, key, sizeof key);
        if (!rc) rc = hf_get(&h, key, strcmp(key, t->name) ? t->name : NULL, nd, hs, buf, false, NULL, err);
        if (!rc) a->convert(c, t, buf, true);
    }
    /* with a tied output layer, an lm_head that is not the embedding would be silently
     * dropped: refuse it */
    cv_tensor *emb = rc ? NULL : cv_find(m, a->embedding);
    if (emb && !c->untied) {
        snprintf(alt, sizeof alt, "%s", "lm_head.weight");
        int64_t hs[2];
        a->hf_shape(c, emb, hs);
        free(buf);
        buf = malloc((size_t)(hs[0] * hs[1]) * sizeof *buf);
        bool found = false;
        rc = buf ? hf_get(&h, alt, NULL, 2, hs, buf, true, &found, err) : mg_error_set(err, MG_ERR_NOMEM, "out of memory");
        if (!rc && found && memcmp(buf, emb->data, (size_t)(hs[0] * hs[1]) * sizeof *buf))
            rc = mg_error_set(err, MG_ERR_UNSUPPORTED, "%s: lm_head.weight differs from %s, but config.json ties them",
                              o->from_hf, a->embedding);
    }
    /* DeepSeek-V3's multi-token prediction layers hold copies of the word embedding and the
     * output layer, which mgraph (as Megatron) shares with the model: read when present,
     * refused when they differ */
    cv_tensor *head = rc ? NULL : cv_find(m, c->untied ? "lm_head.weight" : a->embedding);
    for (int k = 0; !rc && emb && head && k < c->mtp_layers; k++) {
        const char *what[2] = {"embed_tokens", "shared_head.head"};
        cv_tensor *same[2] = {emb, head};
        for (int i = 0; i < 2 && !rc; i++) {
            int64_t hs[2];
            a->hf_shape(c, same[i], hs);
            snprintf(alt, sizeof alt, "model.layers.%d.%s.weight", c->layers + k, what[i]);
            free(buf);
            buf = malloc((size_t)(hs[0] * hs[1]) * sizeof *buf);
            bool found = false;
            rc = buf ? hf_get(&h, alt, NULL, 2, hs, buf, true, &found, err) : mg_error_set(err, MG_ERR_NOMEM, "out of memory");
            if (!rc && found && memcmp(buf, same[i]->data, (size_t)(hs[0] * hs[1]) * sizeof *buf))
                rc = mg_error_set(err, MG_ERR_UNSUPPORTED,
                                  "%s: %s differs from %s: mgraph's multi-token prediction shares the model's word "
                                  "embedding and output layer",
                                  o->from_hf, alt, same[i]->name);
        }
    }
    free(buf);
    if (!rc) rc = hf_check_all_used(&h, o->from_hf, err);
    free(parts);
    hf_close(&h);
    return rc;
}

static int save_hf_files(const char *dir, cv_model *m, mg_error *err) {
    const cv_cfg *c = &m->cfg;
    const cv_arch *a = arch_of(c);
    /* one output per whole tensor, or per part (pointing into the tensor's data) */
    int cap = 2 * c->moe.num_experts + 4, n_out = 0, max_out = m->n * cap + 2 * c->mtp_layers;
    mg_st_out *out = calloc((size_t)max_out, sizeof *out);
    cv_part *parts = calloc((size_t)max_out, sizeof *parts); /* keys and shapes of every output */
    float **bufs = calloc((size_t)m->n, sizeof *bufs);
    int rc = out && parts && bufs ? MG_OK : mg_error_set(err, MG_ERR_NOMEM, "out of memory");
    for (int i = 0; !rc && i < m->n; i++) {
        cv_tensor *t = &m->t[i];
        int np = a->parts ? a->parts(a, c, t, parts + n_out, cap) : 0;
        for (int k = 0; k < np; k++, n_out++) {
            cv_part *p = &parts[n_out];
            out[n_out] = (mg_st_out){p->key, MG_F32, p->ndim, p->shape, t->data + p->offset};
        }
        if (np > 0) continue;
        cv_part *p = &parts[n_out];
        int nd = a->hf_shape(c, t, p->shape);
        bufs[i] = malloc((size_t)(nd == 1 ? p->shape[0] : p->shape[0] * p->shape[1]) * sizeof(float) + 1);
        if (!bufs[i]) {
            rc = mg_error_set(err, MG_ERR_NOMEM, "out of memory");
            break;
        }
        a->convert(c, t, bufs[i], false);
        a->hf_key(t, p->key, sizeof p->key);
        out[n_out++] = (mg_st_out){p->key, MG_F32, nd, p->shape, bufs[i]};
    }
    /* DeepSeek-V3's multi-token prediction layers: copies of the word embedding and the
     * output layer in each, as its checkpoints hold them (the same data written again) */
    for (int k = 0; !rc && k < c->mtp_layers; k++) {
        const char *what[2] = {"embed_tokens", "shared_head.head"};
        const char *src[2] = {a->embedding, c->untied ? "lm_head.weight" : a->embedding};
        for (int i = 0; i < 2 && !rc; i++) {
            int j = 0;
            while (j < n_out && strcmp(out[j].key, src[i])) j++;
            if (j == n_out) {
                rc = mg_error_set(err, MG_ERR_INVALID, "no %s to copy into the multi-token prediction layer", src[i]);
                break;
            }
            cv_part *p = &parts[n_out];
            snprintf(p->key, sizeof p->key, "model.layers.%d.%s.weight", c->layers + k, what[i]);
            p->ndim = out[j].ndim;
            for (int d = 0; d < p->ndim; d++) p->shape[d] = out[j].shape[d];
            out[n_out] = (mg_st_out){p->key, MG_F32, p->ndim, p->shape, out[j].data};
            n_out++;
        }
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    const char *mk[] = {"format"}, *mv[] = {"pt"};
    if (!rc) rc = mg_st_write(path, out, n_out, mk, mv, 1, true, err);
    for (int i = 0; bufs && i < m->n; i++) free(bufs[i]);
    free(bufs);
    free(parts);
    free(out);
    if (rc) return rc;
    json_t *cfg = a->write_config(a, c);
    char *text = cfg ? json_dumps(cfg, JSON_INDENT(2) | JSON_SORT_KEYS | JSON_REAL_PRECISION(9)) : NULL;
    json_decref(cfg);
    if (!text) return mg_error_set(err, MG_ERR_NOMEM, "out of memory");
    snprintf(path, sizeof path, "%s/config.json", dir);
    rc = mg_write_file_atomic(path, "config.json", text, strlen(text), NULL, err);
    free(text);
    return rc;
}

/* Into DIR (made if absent); a failure leaves no half-written directory that this call made. */
static int save_hf(const char *dir, cv_model *m, mg_error *err) {
    int e = mkdir(dir, 0777) == 0 ? 0 : errno;
    bool made = !e;
    struct stat sb;
    if (!made && e != EEXIST) return mg_error_set(err, MG_ERR_IO, "cannot create directory %s: %s", dir, strerror(e));
    if (!made && (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode)))
        return mg_error_set(err, MG_ERR_IO, "--to-hf %s exists and is not a directory", dir);
    /* An existing directory must be empty: its config.json would be replaced and shards
     * of another model left beside the new ones. */
    int rc;
    DIR *d = made ? NULL : opendir(dir);
    for (struct dirent *de; d && (de = readdir(d));)
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..")) {
            /* the message first: closedir frees the entry */
            rc = mg_error_set(err, MG_ERR_INVALID,
                              "--to-hf %s is not empty (it holds %s): give a new or empty directory, mgraph-convert "
                              "does not replace files it did not write",
                              dir, de->d_name);
            closedir(d);
            return rc;
        }
    if (d) closedir(d);
    rc = save_hf_files(dir, m, err);
    if (rc && made) {
        char path[4096];
        snprintf(path, sizeof path, "%s/model.safetensors", dir);
        unlink(path);
        rmdir(dir);
    }
    return rc;
}

/* ---- command line -------------------------------------------------------------------------------- */
static void usage(FILE *f) {
    fprintf(f, "usage: mgraph-convert --load CKPT --to-hf DIR\n"
               "       mgraph-convert --from-hf DIR --save CKPT [--make-vocab-size-divisible-by N]\n"
               "                      [--tensor-model-parallel-size N] [--tokenizer-type T]\n\n"
               "       mgraph-convert --from-megatron DIR --save CKPT [--true-vocab-size N] [--no-load-optim]\n\n"
               "Converts mgraph checkpoints of GPT-2 (GPT2LMHeadModel) and of the LLaMA family (RMSNorm,\n"
               "rope, swiglu; LlamaForCausalLM, with --add-qkv-bias Qwen2ForCausalLM, with --qk-layernorm\n"
               "Qwen3ForCausalLM, with a window MistralForCausalLM; with experts MixtralForCausalLM and\n"
               "Qwen3MoeForCausalLM; with --multi-latent-attention DeepseekV3ForCausalLM, its multi-token\n"
               "prediction layers (--mtp-num-layers) in DeepSeek-V3's layout) to and from\n"
               "Hugging Face directories (config.json +\n"
               "model.safetensors, or its shards with model.safetensors.index.json on import).\n"
               "--from-megatron reads a Megatron-LM checkpoint of Megatron-Core's GPTModel (--ckpt-format\n"
               "torch or torch_dist, any tensor / pipeline parallelism): the model, the iteration, the\n"
               "learning-rate schedule, the data position and, where saved, Adam's moments; the\n"
               "vocabulary's size from the tokenizer its args name, or --true-vocab-size.\n"
               "Exit status: 0 success, 2 bad usage or input, 1 failure.\n");
}

static int parse(int argc, char **argv, opts *o, mg_error *err) {
    *o = (opts){.divisible_by = 128, .tp = 1};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help")) return 1;
        const char **s = !strcmp(a, "--load") ? &o->load : !strcmp(a, "--to-hf") ? &o->to_hf
                       : !strcmp(a, "--from-hf") ? &o->from_hf : !strcmp(a, "--save") ? &o->save
                       : !strcmp(a, "--tokenizer-type") ? &o->tokenizer_type
                       : !strcmp(a, "--from-megatron") ? &o->from_megatron : NULL;
        int *n = !strcmp(a, "--make-vocab-size-divisible-by") ? &o->divisible_by
               : !strcmp(a, "--tensor-model-parallel-size") ? &o->tp : NULL;
        if (!strcmp(a, "--no-load-optim")) {
            o->no_load_optim = true;
            continue;
        }
        if (!strcmp(a, "--true-vocab-size")) {
            char *end;
            long long x = i + 1 < argc ? strtoll(argv[i + 1], &end, 10) : 0;
            if (i + 1 >= argc || *end || x < 1 || x > (1LL << 40))
                return mg_error_set(err, MG_ERR_INVALID, "--true-vocab-size expects a positive integer");
            o->true_vocab_size = x;
            i++;
            continue;
        }
        if (!s && !n) return mg_error_set(err, MG_ERR_INVALID, "unknown flag '%s' (see --help)", a);
        if (i + 1 >= argc || !argv[i + 1][0] || !strncmp(argv[i + 1], "--", 2))
            return mg_error_set(err, MG_ERR_INVALID, "%s needs a value", a);
        const char *v = argv[++i];
        if (s) *s = v;
        else {
            char *end;
            long x = strtol(v, &end, 10);
            if (*end || x < 1 || x > 1 << 20) return mg_error_set(err, MG_ERR_INVALID, "%s expects a positive integer, got '%s'", a, v);
            *n = (int)x;
        }
    }
    if (o->from_megatron) {
        if (!o->save || o->load || o->to_hf || o->from_hf)
            return mg_error_set(err, MG_ERR_INVALID, "give --from-megatron DIR --save CKPT");
        return MG_OK;
    }
    if (o->true_vocab_size || o->no_load_optim)
        return mg_error_set(err, MG_ERR_INVALID, "--true-vocab-size and --no-load-optim are for --from-megatron");
    bool to = o->load || o->to_hf, from = o->from_hf || o->save;
    if (to == from || (to && !(o->load && o->to_hf)) || (from && !(o->from_hf && o->save)))
        return mg_error_set(err, MG_ERR_INVALID, "give either --load CKPT --to-hf DIR, --from-hf DIR --save CKPT, or --from-megatron DIR --save CKPT");
    return MG_OK;
}

int main(int argc, char **argv) {
    opts o;
    mg_error err = {0};
    cv_model m = {0};
    mg_tool_install_fatal_handlers("mgraph-convert", NULL);
    int rc = parse(argc, argv, &o, &err);
    if (rc == 1) {
        usage(stdout);
        return 0;
    }
    if (!rc && o.from_megatron) {
        cv_megatron_opts mo = {.from = o.from_megatron, .save = o.save, .no_load_optim = o.no_load_optim,
                               .true_vocab_size = o.true_vocab_size};
        rc = cv_from_megatron(&mo, &err);
    } else if (!rc && o.load) {
        rc = load_mgraph(o.load, &m, &err);
        if (!rc) rc = save_hf(o.to_hf, &m, &err);
        if (!rc) printf("mgraph-convert: %s -> %s (%s, %d layers, vocab %lld)\n", o.load, o.to_hf,
                        arch_of(&m.cfg)->hf_class, m.cfg.layers, (long long)m.cfg.vocab);
    } else if (!rc) {
        rc = load_hf(&o, &m, &err);
        if (!rc) rc = save_mgraph(o.save, &m, &err);
        if (!rc) printf("mgraph-convert: %s -> %s (%s, iteration 0, vocab %lld padded to %lld)\n", o.from_hf, o.save,
                        arch_of(&m.cfg)->hf_class, (long long)m.cfg.vocab, (long long)m.cfg.padded);
    }
    cv_model_free(&m);
    if (rc) {
        fprintf(stderr, "mgraph-convert: %s%s\n", mg_status_is_usage(rc) ? "error: " : "failed: ", err.msg);
        return mg_status_is_usage(rc) ? 2 : 1;
    }
    return 0;
}

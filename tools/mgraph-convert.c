/* mgraph-convert: mgraph checkpoints <-> Hugging Face GPT-2 (GPT2LMHeadModel).
 *
 *   mgraph-convert --load CKPT --to-hf DIR      config.json + model.safetensors
 *   mgraph-convert --from-hf DIR --save CKPT    an mgraph checkpoint at iteration 0
 *
 * Layouts (models/gpt2.c): mgraph's linear weights are [out, in] (torch.nn.Linear), HF
 * GPT-2's are Conv1D [in, out]; mgraph's c_attn output is grouped per head
 * [q_h k_h v_h], HF's is [q; k; v] (all heads of q, then k, then v); mgraph's word
 * embedding is padded to a multiple of --make-vocab-size-divisible-by x tp, HF's is not
 * (export drops the padded rows, import adds zero rows). The checkpoint written by
 * --from-hf holds the model only (no optimizer state), as Megatron's converters do.
 *
 * Exit status: 0 success, 2 bad usage or input (one message on stderr), 1 failure.
 */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "mgraph/checkpoint.h"
#include "mgraph/outfile.h"
#include "mgraph/safetensors.h"

typedef struct opts {
    const char *load, *to_hf, *from_hf, *save, *tokenizer_type;
    int divisible_by, tp;
} opts;

typedef struct gpt {
    int layers, hidden, ffn, heads, positions;
    int64_t vocab, padded;
    double eps;
    const char *tokenizer_type;
    double hidden_dropout, attention_dropout;
    int divisible_by;
} gpt;

/* One tensor in mgraph's layout, owned. */
typedef struct tensor {
    char name[128];
    int ndim;
    int64_t shape[2];
    float *data;
} tensor;

typedef struct model {
    gpt cfg;
    tensor *t;
    int n;
} model;

static void model_free(model *m) {
    for (int i = 0; i < m->n; i++) free(m->t[i].data);
    free(m->t);
}

static int64_t numel(const tensor *t) { return t->ndim == 1 ? t->shape[0] : t->shape[0] * t->shape[1]; }

/* mgraph's parameters of cfg, in creation order, with empty buffers. */
static int model_alloc(model *m, mg_error *err) {
    const gpt *c = &m->cfg;
    int64_t h = c->hidden, f = c->ffn;
    m->t = calloc((size_t)(12 * c->layers + 4), sizeof *m->t);
    if (!m->t) return mg_error_set(err, MG_ERR_NOMEM, "out of memory");
#define ADD(nm, r, cols)                                                                                \
    do {                                                                                               \
        tensor *t = &m->t[m->n++];                                                                     \
        snprintf(t->name, sizeof t->name, "%s", nm);                                                   \
        t->ndim = (cols) ? 2 : 1;                                                                      \
        t->shape[0] = (r);                                                                             \
        t->shape[1] = (cols);                                                                          \
        if (!(t->data = calloc((size_t)numel(t), sizeof(float)))) return mg_error_set(err, MG_ERR_NOMEM, "out of memory"); \
    } while (0)
    ADD("wte.weight", c->padded, h);
    ADD("wpe.weight", c->positions, h);
    char nm[128];
    for (int l = 0; l < c->layers; l++) {
        const struct { const char *s; int64_t r, cols; } p[] = {
            {"ln_1.weight", h, 0}, {"ln_1.bias", h, 0}, {"attn.c_attn.weight", 3 * h, h}, {"attn.c_attn.bias", 3 * h, 0},
            {"attn.c_proj.weight", h, h}, {"attn.c_proj.bias", h, 0}, {"ln_2.weight", h, 0}, {"ln_2.bias", h, 0},
            {"mlp.c_fc.weight", f, h}, {"mlp.c_fc.bias", f, 0}, {"mlp.c_proj.weight", h, f}, {"mlp.c_proj.bias", h, 0}};
        for (int k = 0; k < 12; k++) {
            snprintf(nm, sizeof nm, "h.%d.%s", l, p[k].s);
            ADD(nm, p[k].r, p[k].cols);
        }
    }
    ADD("ln_f.weight", h, 0);
    ADD("ln_f.bias", h, 0);
#undef ADD
    return MG_OK;
}

static tensor *find(model *m, const char *name) {
    for (int i = 0; i < m->n; i++)
        if (!strcmp(m->t[i].name, name)) return &m->t[i];
    return NULL;
}

/* ---- layout maps --------------------------------------------------------------------------- */
/* mgraph c_attn row (per head [q k v]) <-> HF column ([q; k; v]). */
static int64_t qkv_hf_index(const gpt *c, int64_t mg_row) {
    int64_t hd = c->hidden / c->heads, head = mg_row / (3 * hd), part = (mg_row / hd) % 3, j = mg_row % hd;
    return part * c->hidden + head * hd + j;
}

/* HF tensor (dims hs, data hf) from mgraph tensor t, or the reverse (to_mg). */
static void convert(const gpt *c, tensor *t, float *hf, bool to_mg) {
    int64_t r = t->shape[0], k = t->shape[1];
    bool qkv = strstr(t->name, "attn.c_attn") != NULL;
    if (t->ndim == 1) {
        for (int64_t i = 0; i < r; i++) {
            int64_t j = qkv ? qkv_hf_index(c, i) : i;
            if (to_mg) t->data[i] = hf[j];
            else hf[j] = t->data[i];
        }
        return;
    }
    if (!strcmp(t->name, "wte.weight") || !strcmp(t->name, "wpe.weight")) { /* embeddings: same layout */
        int64_t rows = !strcmp(t->name, "wte.weight") ? c->vocab : r;
        if (to_mg) memcpy(t->data, hf, (size_t)(rows * k) * sizeof(float));
        else memcpy(hf, t->data, (size_t)(rows * k) * sizeof(float));
        return;
    }
    /* Linear [out=r, in=k] <-> Conv1D [in=k, out=r] */
    for (int64_t o = 0; o < r; o++) {
        int64_t oc = qkv ? qkv_hf_index(c, o) : o;
        for (int64_t i = 0; i < k; i++) {
            if (to_mg) t->data[o * k + i] = hf[i * r + oc];
            else hf[i * r + oc] = t->data[o * k + i];
        }
    }
}

/* HF shape of t. */
static int hf_shape(const gpt *c, const tensor *t, int64_t *s) {
    if (t->ndim == 1) {
        s[0] = t->shape[0];
        return 1;
    }
    if (!strcmp(t->name, "wte.weight")) s[0] = c->vocab, s[1] = t->shape[1];
    else if (!strcmp(t->name, "wpe.weight")) s[0] = t->shape[0], s[1] = t->shape[1];
    else s[0] = t->shape[1], s[1] = t->shape[0];
    return 2;
}

/* ---- mgraph checkpoint side -------------------------------------------------------------------- */
static int json_int(json_t *o, const char *k, int64_t *v, const char *what, mg_error *err) {
    json_t *x = json_object_get(o, k);
    if (!json_is_integer(x) || json_integer_value(x) < 0) return mg_error_set(err, MG_ERR_IO, "%s: %s missing or invalid", what, k);
    *v = json_integer_value(x);
    return MG_OK;
}

static int load_mgraph(const char *path, model *m, mg_error *err) {
    mg_ckpt *ck = NULL;
    int rc = mg_ckpt_open(path, &ck, err);
    if (rc) return rc;
    json_t *meta = json_loads(mg_ckpt_meta(ck), 0, NULL), *mm = json_object_get(meta, "model");
    int64_t v[7] = {0};
    const char *keys[] = {"num_layers", "hidden_size", "ffn_hidden_size", "num_attention_heads", "max_position_embeddings",
                          "vocab_size", "padded_vocab_size"};
    const char *arch = json_string_value(json_object_get(mm, "arch"));
    if (!arch || strcmp(arch, "gpt2")) rc = mg_error_set(err, MG_ERR_UNSUPPORTED, "%s: not a GPT-2 checkpoint", path);
    for (int i = 0; i < 7 && !rc; i++) rc = json_int(mm, keys[i], &v[i], path, err);
    gpt *c = &m->cfg;
    if (!rc) {
        c->layers = (int)v[0], c->hidden = (int)v[1], c->ffn = (int)v[2], c->heads = (int)v[3], c->positions = (int)v[4];
        c->vocab = v[5], c->padded = v[6];
        json_t *eps = json_object_get(mm, "layernorm_epsilon");
        c->eps = json_is_number(eps) ? json_number_value(eps) : 1e-5;
        json_t *dr = json_object_get(meta, "dropout");
        c->hidden_dropout = json_number_value(json_object_get(dr, "hidden"));
        c->attention_dropout = json_number_value(json_object_get(dr, "attention"));
        if (c->layers < 1 || c->hidden < 1 || c->heads < 1 || c->hidden % c->heads || c->vocab < 1 || c->padded < c->vocab ||
            c->layers > 100000 || c->hidden > 1000000 || c->ffn > 10000000 || c->positions > 10000000 || c->padded > 100000000)
            rc = mg_error_set(err, MG_ERR_IO, "%s: inconsistent model sizes in the checkpoint", path);
    }
    json_decref(meta);
    if (!rc) rc = model_alloc(m, err);
    mg_ckpt_piece *want = rc ? NULL : calloc((size_t)m->n, sizeof *want);
    if (!rc && !want) rc = mg_error_set(err, MG_ERR_NOMEM, "out of memory");
    for (int i = 0; !rc && i < m->n; i++) {
        tensor *t = &m->t[i];
        want[i] = (mg_ckpt_piece){.name = t->name, .dtype = MG_F32, .ndim = t->ndim, .data = t->data};
        for (int d = 0; d < t->ndim; d++) want[i].shape[d] = want[i].block[d] = t->shape[d];
    }
    if (!rc) rc = mg_ckpt_fill(ck, want, m->n, err);
    free(want);
    mg_ckpt_close(ck);
    return rc;
}

static int save_mgraph(const char *root, model *m, mg_error *err) {
    const gpt *c = &m->cfg;
    mg_ckpt_piece *p = calloc((size_t)m->n, sizeof *p);
    if (!p) return mg_error_set(err, MG_ERR_NOMEM, "out of memory");
    for (int i = 0; i < m->n; i++) {
        tensor *t = &m->t[i];
        p[i] = (mg_ckpt_piece){.name = t->name, .dtype = MG_F32, .ndim = t->ndim, .data = t->data};
        for (int d = 0; d < t->ndim; d++) p[i].shape[d] = p[i].block[d] = t->shape[d];
    }
    /* the keys tools/run_checkpoint.c checks when mgraph-run loads it */
    json_t *meta = json_pack("{s:{s:s, s:i, s:i, s:i, s:i, s:i, s:i, s:I, s:I, s:i, s:s, s:f}, s:I, s:I, "
                             "s:{s:I, s:I}, s:{s:s, s:I}, s:b, s:s}",
                             "model", "arch", "gpt2", "num_layers", c->layers, "hidden_size", c->hidden, "ffn_hidden_size",
                             c->ffn, "num_attention_heads", c->heads, "max_position_embeddings", c->positions, "seq_length",
                             c->positions, "padded_vocab_size", (json_int_t)c->padded, "vocab_size", (json_int_t)c->vocab,
                             "make_vocab_size_divisible_by", c->divisible_by, "tokenizer_type",
                             c->tokenizer_type, "layernorm_epsilon", c->eps, "iteration", (json_int_t)0,
                             "consumed_samples", (json_int_t)0, "data", "consumed_train_samples", (json_int_t)0,
                             "eval_batches_done", (json_int_t)0, "rng", "kind", "none (converted)", "seed", (json_int_t)0,
                             "optimizer_state", 0, "converted_from", "Hugging Face GPT2LMHeadModel");
    char *text = meta ? json_dumps(meta, JSON_COMPACT) : NULL;
    json_decref(meta);
    int rc = text ? mg_ckpt_begin(root, 0, err) : mg_error_set(err, MG_ERR_NOMEM, "out of memory");
    if (!rc) rc = mg_ckpt_write_rank(root, 0, 0, p, m->n, err);
    if (!rc) rc = mg_ckpt_finish(root, 0, 1, text, 0, err);
    free(text);
    free(p);
    return rc;
}

/* ---- Hugging Face side ----------------------------------------------------------------------- */
static float half_to_float(uint16_t h) {
    int e = (h >> 10) & 31, m = h & 1023;
    float v = e == 0 ? ldexpf((float)m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexpf((float)(m | 1024), e - 25);
    return (h & 0x8000) ? -v : v;
}

/* The HF tensor `key` (with or without the "transformer." prefix) as f32, checked against shape. */
static int hf_get(mg_st_file *f, const char *key, int ndim, const int64_t *shape, float *out, mg_error *err) {
    char k[160];
    snprintf(k, sizeof k, "transformer.%s", key);
    const mg_st_entry *e = mg_st_find(f, k);
    if (!e) e = mg_st_find(f, key);
    if (!e) return mg_error_set(err, MG_ERR_INVALID, "%s has no tensor %s", mg_st_path(f), k);
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

static int cfg_int(json_t *cfg, const char *k, int64_t def, int64_t *v, const char *path, mg_error *err) {
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

static int load_hf(const opts *o, model *m, mg_error *err) {
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", o->from_hf);
    json_error_t je;
    json_t *cfg = json_load_file(path, 0, &je);
    if (!json_is_object(cfg)) {
        json_decref(cfg);
        return mg_error_set(err, MG_ERR_INVALID, "%s: not a JSON object (%s)", path, je.text);
    }
    int rc = MG_OK;
    const char *mt = json_string_value(json_object_get(cfg, "model_type"));
    const char *act = json_string_value(json_object_get(cfg, "activation_function"));
    if (!mt || strcmp(mt, "gpt2")) rc = mg_error_set(err, MG_ERR_UNSUPPORTED, "%s: model_type is not gpt2", path);
    /* mgraph's GELU is the tanh approximation (GPT-2's gelu_new) */
    else if (act && strcmp(act, "gelu_new") && strcmp(act, "gelu_pytorch_tanh"))
        rc = mg_error_set(err, MG_ERR_UNSUPPORTED, "%s: activation_function '%s' (mgraph's GPT-2 uses gelu_new)", path, act);
    else if (json_is_false(json_object_get(cfg, "scale_attn_weights")) ||
             json_is_true(json_object_get(cfg, "scale_attn_by_inverse_layer_idx")))
        rc = mg_error_set(err, MG_ERR_UNSUPPORTED, "%s: attention scaling other than 1/sqrt(head dim)", path);
    else if (json_is_false(json_object_get(cfg, "tie_word_embeddings")))
        rc = mg_error_set(err, MG_ERR_UNSUPPORTED, "%s: untied output layer (mgraph's GPT-2 ties it to wte)", path);
    int64_t L = 0, h = 0, nh = 0, P = 0, V = 0, f = 0;
    if (!rc) rc = cfg_int(cfg, "n_layer", -1, &L, path, err);
    if (!rc) rc = cfg_int(cfg, "n_embd", -1, &h, path, err);
    if (!rc) rc = cfg_int(cfg, "n_head", -1, &nh, path, err);
    if (!rc) rc = cfg_int(cfg, "n_positions", -1, &P, path, err);
    if (!rc) rc = cfg_int(cfg, "vocab_size", -1, &V, path, err);
    if (!rc) rc = cfg_int(cfg, "n_inner", 4 * h, &f, path, err);
    json_t *eps = json_object_get(cfg, "layer_norm_epsilon");
    double e = json_is_number(eps) ? json_number_value(eps) : 1e-5;
    if (!rc && fabs(e - 1e-5) > 1e-12)
        rc = mg_error_set(err, MG_ERR_UNSUPPORTED, "%s: layer_norm_epsilon %g (mgraph's GPT-2 uses 1e-5)", path, e);
    if (!rc && h % nh) rc = mg_error_set(err, MG_ERR_INVALID, "%s: n_head does not divide n_embd", path);
    json_t *dr = json_object_get(cfg, "resid_pdrop"), *ad = json_object_get(cfg, "attn_pdrop");
    m->cfg.hidden_dropout = json_is_number(dr) ? json_number_value(dr) : 0.1;
    m->cfg.attention_dropout = json_is_number(ad) ? json_number_value(ad) : 0.1;
    json_decref(cfg);
    if (rc) return rc;
    int64_t unit = (int64_t)o->divisible_by * o->tp;
    m->cfg = (gpt){(int)L, (int)h, (int)f, (int)nh, (int)P, V, (V + unit - 1) / unit * unit, 1e-5,
                   o->tokenizer_type ? o->tokenizer_type : V == 256 ? "ByteLevelTokenizer" : "GPT2BPETokenizer",
                   m->cfg.hidden_dropout, m->cfg.attention_dropout, o->divisible_by};
    rc = model_alloc(m, err);
    snprintf(path, sizeof path, "%s/model.safetensors", o->from_hf);
    mg_st_file *st = NULL;
    if (!rc) rc = mg_st_open(path, &st, err);
    float *buf = NULL;
    for (int i = 0; !rc && i < m->n; i++) {
        tensor *t = &m->t[i];
        int64_t hs[2];
        int nd = hf_shape(&m->cfg, t, hs);
        free(buf);
        buf = malloc((size_t)(nd == 1 ? hs[0] : hs[0] * hs[1]) * sizeof *buf + 1);
        if (!buf) rc = mg_error_set(err, MG_ERR_NOMEM, "out of memory");
        if (!rc) rc = hf_get(st, t->name, nd, hs, buf, err);
        if (!rc) convert(&m->cfg, t, buf, true);
    }
    free(buf);
    /* an lm_head that is not wte would be silently dropped: refuse it */
    const mg_st_entry *lm = st && !rc ? mg_st_find(st, "lm_head.weight") : NULL;
    if (lm) {
        tensor *wte = find(m, "wte.weight");
        if (lm->dtype != MG_F32 || lm->end - lm->begin != (uint64_t)(V * h * 4) ||
            memcmp(mg_st_data(st, lm), wte->data, (size_t)(V * h * 4)))
            rc = mg_error_set(err, MG_ERR_UNSUPPORTED, "%s: lm_head.weight differs from wte (untied)", path);
    }
    mg_st_close(st);
    return rc;
}

static int save_hf(const char *dir, model *m, mg_error *err) {
    const gpt *c = &m->cfg;
    if (mkdir(dir, 0777) != 0) {
        struct stat sb;
        if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode)) return mg_error_set(err, MG_ERR_IO, "cannot create directory %s", dir);
    }
    mg_st_out *out = calloc((size_t)m->n, sizeof *out);
    char (*keys)[160] = calloc((size_t)m->n, sizeof *keys);
    int64_t (*shapes)[2] = calloc((size_t)m->n, sizeof *shapes);
    float **bufs = calloc((size_t)m->n, sizeof *bufs);
    int rc = out && keys && shapes && bufs ? MG_OK : mg_error_set(err, MG_ERR_NOMEM, "out of memory");
    for (int i = 0; !rc && i < m->n; i++) {
        tensor *t = &m->t[i];
        int nd = hf_shape(c, t, shapes[i]);
        bufs[i] = malloc((size_t)(nd == 1 ? shapes[i][0] : shapes[i][0] * shapes[i][1]) * sizeof(float) + 1);
        if (!bufs[i]) {
            rc = mg_error_set(err, MG_ERR_NOMEM, "out of memory");
            break;
        }
        convert(c, t, bufs[i], false);
        snprintf(keys[i], sizeof keys[i], "transformer.%s", t->name);
        out[i] = (mg_st_out){keys[i], MG_F32, nd, shapes[i], bufs[i]};
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    const char *mk[] = {"format"}, *mv[] = {"pt"};
    if (!rc) rc = mg_st_write(path, out, m->n, mk, mv, 1, true, err);
    for (int i = 0; bufs && i < m->n; i++) free(bufs[i]);
    free(bufs);
    free(shapes);
    free(keys);
    free(out);
    if (rc) return rc;
    json_t *cfg = json_pack("{s:[s], s:s, s:I, s:i, s:i, s:i, s:i, s:i, s:s, s:f, s:f, s:f, s:f, s:f, s:b, s:b, s:b, s:s}",
                            "architectures", "GPT2LMHeadModel", "model_type", "gpt2", "vocab_size", (json_int_t)c->vocab,
                            "n_positions", c->positions, "n_embd", c->hidden, "n_layer", c->layers, "n_head", c->heads,
                            "n_inner", c->ffn, "activation_function", "gelu_new", "resid_pdrop", c->hidden_dropout,
                            "embd_pdrop", c->hidden_dropout, "attn_pdrop", c->attention_dropout, "layer_norm_epsilon",
                            c->eps, "initializer_range", 0.02, "scale_attn_weights", 1, "tie_word_embeddings", 1,
                            "use_cache", 1, "torch_dtype", "float32");
    if (cfg) { /* the tokenizer's special tokens are not known here */
        json_object_set_new(cfg, "bos_token_id", json_null());
        json_object_set_new(cfg, "eos_token_id", json_null());
    }
    char *text = cfg ? json_dumps(cfg, JSON_INDENT(2) | JSON_SORT_KEYS) : NULL;
    json_decref(cfg);
    if (!text) return mg_error_set(err, MG_ERR_NOMEM, "out of memory");
    snprintf(path, sizeof path, "%s/config.json", dir);
    size_t len = strlen(text);
    text[len] = '\0';
    rc = mg_write_file_atomic(path, "config.json", text, len, NULL, err);
    free(text);
    return rc;
}

/* ---- command line -------------------------------------------------------------------------------- */
static void usage(FILE *f) {
    fprintf(f, "usage: mgraph-convert --load CKPT --to-hf DIR\n"
               "       mgraph-convert --from-hf DIR --save CKPT [--make-vocab-size-divisible-by N]\n"
               "                      [--tensor-model-parallel-size N] [--tokenizer-type T]\n\n"
               "Converts mgraph GPT-2 checkpoints to and from Hugging Face GPT2LMHeadModel directories\n"
               "(config.json + model.safetensors). Exit status: 0 success, 2 bad usage or input, 1 failure.\n");
}

static int parse(int argc, char **argv, opts *o, mg_error *err) {
    *o = (opts){.divisible_by = 128, .tp = 1};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help")) return 1;
        const char **s = !strcmp(a, "--load") ? &o->load : !strcmp(a, "--to-hf") ? &o->to_hf
                       : !strcmp(a, "--from-hf") ? &o->from_hf : !strcmp(a, "--save") ? &o->save
                       : !strcmp(a, "--tokenizer-type") ? &o->tokenizer_type : NULL;
        int *n = !strcmp(a, "--make-vocab-size-divisible-by") ? &o->divisible_by
               : !strcmp(a, "--tensor-model-parallel-size") ? &o->tp : NULL;
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
    bool to = o->load || o->to_hf, from = o->from_hf || o->save;
    if (to == from || (to && !(o->load && o->to_hf)) || (from && !(o->from_hf && o->save)))
        return mg_error_set(err, MG_ERR_INVALID, "give either --load CKPT --to-hf DIR, or --from-hf DIR --save CKPT");
    return MG_OK;
}

int main(int argc, char **argv) {
    opts o;
    mg_error err = {0};
    model m = {0};
    int rc = parse(argc, argv, &o, &err);
    if (rc == 1) {
        usage(stdout);
        return 0;
    }
    if (!rc && o.load) {
        rc = load_mgraph(o.load, &m, &err);
        if (!rc) rc = save_hf(o.to_hf, &m, &err);
        if (!rc) printf("mgraph-convert: %s -> %s (GPT2LMHeadModel, %d layers, vocab %lld)\n", o.load, o.to_hf,
                        m.cfg.layers, (long long)m.cfg.vocab);
    } else if (!rc) {
        rc = load_hf(&o, &m, &err);
        if (!rc) rc = save_mgraph(o.save, &m, &err);
        if (!rc) printf("mgraph-convert: %s -> %s (iteration 0, vocab %lld padded to %lld)\n", o.from_hf, o.save,
                        (long long)m.cfg.vocab, (long long)m.cfg.padded);
    }
    model_free(&m);
    if (rc) {
        fprintf(stderr, "mgraph-convert: %s%s\n", mg_status_is_usage(rc) ? "error: " : "failed: ", err.msg);
        return mg_status_is_usage(rc) ? 2 : 1;
    }
    return 0;
}

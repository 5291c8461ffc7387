/* Hugging Face GPT2LMHeadModel <-> mgraph's GPT-2 (tools/convert.h).
 *
 * mgraph's linear weights are [out, in] (torch.nn.Linear), HF GPT-2's are Conv1D
 * [in, out]; mgraph's c_attn output is grouped per head [q_h k_h v_h] (Megatron's layout,
 * so that tensor parallelism takes whole heads), HF's is [q; k; v] (all heads of q, then
 * k, then v). HF keys carry a "transformer." prefix; the output layer is tied to wte. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "convert.h"

static int alloc(cv_model *m, mg_error *err) {
    const cv_cfg *c = &m->cfg;
    int64_t h = c->hidden, f = c->ffn;
    int rc = cv_add(m, "wte.weight", c->padded, h, err);
    if (!rc) rc = cv_add(m, "wpe.weight", c->positions, h, err);
    char nm[128];
    for (int l = 0; l < c->layers && !rc; l++) {
        const struct { const char *s; int64_t r, cols; } p[] = {
            {"ln_1.weight", h, 0}, {"ln_1.bias", h, 0}, {"attn.c_attn.weight", 3 * h, h}, {"attn.c_attn.bias", 3 * h, 0},
            {"attn.c_proj.weight", h, h}, {"attn.c_proj.bias", h, 0}, {"ln_2.weight", h, 0}, {"ln_2.bias", h, 0},
            {"mlp.c_fc.weight", f, h}, {"mlp.c_fc.bias", f, 0}, {"mlp.c_proj.weight", h, f}, {"mlp.c_proj.bias", h, 0}};
        for (int k = 0; k < 12 && !rc; k++) {
            snprintf(nm, sizeof nm, "h.%d.%s", l, p[k].s);
            rc = cv_add(m, nm, p[k].r, p[k].cols, err);
        }
    }
    if (!rc) rc = cv_add(m, "ln_f.weight", h, 0, err);
    if (!rc) rc = cv_add(m, "ln_f.bias", h, 0, err);
    return rc;
}

static void hf_key(const cv_tensor *t, char *key, size_t n) { snprintf(key, n, "transformer.%s", t->name); }

/* mgraph c_attn row (per head [q k v]) <-> HF column ([q; k; v]). */
static int64_t qkv_hf_index(const cv_cfg *c, int64_t mg_row) {
    int64_t hd = c->hidden / c->heads, head = mg_row / (3 * hd), part = (mg_row / hd) % 3, j = mg_row % hd;
    return part * c->hidden + head * hd + j;
}

static void convert(const cv_cfg *c, cv_tensor *t, float *hf, bool to_mg) {
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

static int hf_shape(const cv_cfg *c, const cv_tensor *t, int64_t *s) {
    if (t->ndim == 1) {
        s[0] = t->shape[0];
        return 1;
    }
    if (!strcmp(t->name, "wte.weight")) s[0] = c->vocab, s[1] = t->shape[1];
    else if (!strcmp(t->name, "wpe.weight")) s[0] = t->shape[0], s[1] = t->shape[1];
    else s[0] = t->shape[1], s[1] = t->shape[0];
    return 2;
}

static int read_config(const cv_arch *a, json_t *cfg, const char *path, cv_cfg *c, mg_error *err) {
    (void)a;
    int rc = MG_OK;
    const char *act = json_string_value(json_object_get(cfg, "activation_function"));
    /* the tanh approximation (GPT-2's gelu_new, mgraph's default), or the exact GELU
     * (transformers' "gelu": mgraph's --no-bias-gelu-fusion) */
    bool exact = act && !strcmp(act, "gelu");
    if (act && !exact && strcmp(act, "gelu_new") && strcmp(act, "gelu_pytorch_tanh"))
        return mg_error_set(err, MG_ERR_UNSUPPORTED, "%s: activation_function '%s' (mgraph's GPT-2 has gelu_new, or gelu "
                            "with --no-bias-gelu-fusion)", path, act);
    if (json_is_false(json_object_get(cfg, "scale_attn_weights")) ||
        json_is_true(json_object_get(cfg, "scale_attn_by_inverse_layer_idx")))
        return mg_error_set(err, MG_ERR_UNSUPPORTED, "%s: attention scaling other than 1/sqrt(head dim)", path);
    if (json_is_false(json_object_get(cfg, "tie_word_embeddings")))
        return mg_error_set(err, MG_ERR_UNSUPPORTED, "%s: untied output layer (mgraph's GPT-2 ties it to wte)", path);
    int64_t L = 0, h = 0, nh = 0, P = 0, V = 0, f = 0;
    if (!rc) rc = cv_cfg_int(cfg, "n_layer", -1, &L, path, err);
    if (!rc) rc = cv_cfg_int(cfg, "n_embd", -1, &h, path, err);
    if (!rc) rc = cv_cfg_int(cfg, "n_head", -1, &nh, path, err);
    if (!rc) rc = cv_cfg_int(cfg, "n_positions", -1, &P, path, err);
    if (!rc) rc = cv_cfg_int(cfg, "vocab_size", -1, &V, path, err);
    if (!rc) rc = cv_cfg_int(cfg, "n_inner", 4 * h, &f, path, err);
    if (rc) return rc;
    json_t *eps = json_object_get(cfg, "layer_norm_epsilon");
    double e = json_is_number(eps) ? json_number_value(eps) : 1e-5;
    if (!(e > 0 && e < 1)) return mg_error_set(err, MG_ERR_INVALID, "%s: layer_norm_epsilon %g is not in (0, 1)", path, e);
    if (h % nh) return mg_error_set(err, MG_ERR_INVALID, "%s: n_head does not divide n_embd", path);
    json_t *dr = json_object_get(cfg, "resid_pdrop"), *ad = json_object_get(cfg, "attn_pdrop");
    c->arch = CV_GPT2;
    c->layers = (int)L, c->hidden = (int)h, c->ffn = (int)f, c->heads = c->groups = (int)nh, c->positions = (int)P;
    c->vocab = V, c->eps = e, c->rope_base = 10000, c->untied = false, c->bias = true, c->gelu_exact = exact;
    c->hidden_dropout = json_is_number(dr) ? json_number_value(dr) : 0.1;
    c->attention_dropout = json_is_number(ad) ? json_number_value(ad) : 0.1;
    c->tokenizer_type = V == 256 ? "ByteLevelTokenizer" : "GPT2BPETokenizer";
    return MG_OK;
}

static json_t *write_config(const cv_arch *a, const cv_cfg *c) {
    (void)a;
    json_t *cfg = json_pack("{s:[s], s:s, s:I, s:i, s:i, s:i, s:i, s:i, s:s, s:f, s:f, s:f, s:f, s:f, s:b, s:b, s:b, s:s}",
                            "architectures", "GPT2LMHeadModel", "model_type", "gpt2", "vocab_size", (json_int_t)c->vocab,
                            "n_positions", c->positions, "n_embd", c->hidden, "n_layer", c->layers, "n_head", c->heads,
                            "n_inner", c->ffn, "activation_function", c->gelu_exact ? "gelu" : "gelu_new",
                            "resid_pdrop", c->hidden_dropout,
                            "embd_pdrop", c->hidden_dropout, "attn_pdrop", c->attention_dropout, "layer_norm_epsilon",
                            cv_float_decimal((float)c->eps), "initializer_range", 0.02, "scale_attn_weights", 1,
                            "tie_word_embeddings", 1, "use_cache", 1, "torch_dtype", "float32");
    if (cfg) { /* the tokenizer's special tokens are not known here */
        json_object_set_new(cfg, "bos_token_id", json_null());
        json_object_set_new(cfg, "eos_token_id", json_null());
    }
    return cfg;
}

const cv_arch cv_gpt2 = {.hf_class = "GPT2LMHeadModel", .model_type = "gpt2", .embedding = "wte.weight", .alloc = alloc,
                         .hf_key = hf_key, .hf_shape = hf_shape, .convert = convert, .read_config = read_config,
                         .write_config = write_config};

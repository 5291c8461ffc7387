/* Hugging Face LlamaForCausalLM <-> mgraph's GPT with LLaMA's options (tools/convert.h):
 * --normalization RMSNorm --position-embedding-type rope --swiglu, grouped-query attention
 * (--num-query-groups), tied or untied output layer, biases or --disable-bias-linear.
 * Three variants share its names and layouts: Qwen2ForCausalLM (biases on q, k, v only:
 * --disable-bias-linear --add-qkv-bias), Qwen3ForCausalLM (q_norm / k_norm, an RMSNorm
 * of each head's q and k before RoPE: --qk-layernorm; biases on q/k/v/o or none) and
 * MistralForCausalLM (no biases; sliding_window W: --window-size W-1,0 in every layer).
 *
 * models/gpt2.c gives this model Hugging Face's own names and layouts: q/k/v/o, gate/up/down
 * weights [out, in] as torch.nn.Linear, q's rows head after head and k/v's group after group
 * (HF's view(..., heads, head_dim)), and RoPE rotating each head's halves against each
 * other (HF's rotate_half), so no permutation of q/k rows is needed either way (Meta's
 * original checkpoints interleave pairs instead; HF's conversion script has already
 * permuted them, tests/models/llama_hf.py checks the equivalence). What differs is the
 * vocabulary: mgraph pads the embedding and lm_head rows to a multiple of
 * --make-vocab-size-divisible-by x tp, HF does not. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "convert.h"

static int alloc(cv_model *m, mg_error *err) {
    const cv_cfg *c = &m->cfg;
    int64_t h = c->hidden, f = c->ffn, kv = (int64_t)c->groups * (h / c->heads);
    int rc = cv_add(m, "model.embed_tokens.weight", c->padded, h, err);
    char nm[128];
    for (int l = 0; l < c->layers && !rc; l++) {
        bool b = c->bias, qkv = b || c->qkv_bias, qn = c->qk_norm;
        int64_t hd = h / c->heads;
        const struct { const char *s; int64_t r, cols; bool bias, here; } p[] = {
            {"input_layernorm", h, 0, false, true},  {"self_attn.q_proj", h, h, qkv, true},
            {"self_attn.k_proj", kv, h, qkv, true},  {"self_attn.v_proj", kv, h, qkv, true},
            {"self_attn.q_norm", hd, 0, false, qn},  {"self_attn.k_norm", hd, 0, false, qn},
            {"self_attn.o_proj", h, h, b, true},     {"post_attention_layernorm", h, 0, false, true},
            {"mlp.gate_proj", f, h, b, true},        {"mlp.up_proj", f, h, b, true},
            {"mlp.down_proj", h, f, b, true}};
        for (size_t k = 0; k < sizeof p / sizeof *p && !rc; k++) {
            if (!p[k].here) continue;
            snprintf(nm, sizeof nm, "model.layers.%d.%s.weight", l, p[k].s);
            rc = cv_add(m, nm, p[k].r, p[k].cols, err);
            if (!rc && p[k].bias) {
                snprintf(nm, sizeof nm, "model.layers.%d.%s.bias", l, p[k].s);
                rc = cv_add(m, nm, p[k].r, 0, err);
            }
        }
    }
    if (!rc) rc = cv_add(m, "model.norm.weight", h, 0, err);
    if (!rc && c->untied) rc = cv_add(m, "lm_head.weight", c->padded, h, err);
    return rc;
}

static void hf_key(const cv_tensor *t, char *key, size_t n) { snprintf(key, n, "%s", t->name); }

static bool vocab_rows(const cv_tensor *t) {
    return !strcmp(t->name, "model.embed_tokens.weight") || !strcmp(t->name, "lm_head.weight");
}

static int hf_shape(const cv_cfg *c, const cv_tensor *t, int64_t *s) {
    s[0] = vocab_rows(t) ? c->vocab : t->shape[0];
    s[1] = t->shape[1];
    return t->ndim;
}

/* Same layout; the vocabulary tensors keep their first c->vocab rows (the padding rows
 * stay zero on import). */
static void convert(const cv_cfg *c, cv_tensor *t, float *hf, bool to_mg) {
    int64_t rows = vocab_rows(t) ? c->vocab : t->shape[0], n = t->ndim == 1 ? rows : rows * t->shape[1];
    if (to_mg) memcpy(t->data, hf, (size_t)n * sizeof(float));
    else memcpy(hf, t->data, (size_t)n * sizeof(float));
}

/* RoPE theta: "rope_parameters" (transformers 5) or "rope_theta" (4.x); only the
 * default (unscaled) rotary embedding. */
static int read_rope(json_t *cfg, const char *path, double *theta, mg_error *err) {
    json_t *rp = json_object_get(cfg, "rope_parameters"), *rs = json_object_get(cfg, "rope_scaling");
    *theta = 10000.0;
    json_t *t = json_object_get(cfg, "rope_theta");
    if (json_is_object(rp) && json_object_get(rp, "rope_theta")) t = json_object_get(rp, "rope_theta");
    if (t && !(json_is_number(t) && json_number_value(t) > 1))
        return mg_error_set(err, MG_ERR_INVALID, "%s: rope_theta is not a number > 1", path);
    if (t) *theta = json_number_value(t);
    json_t *kinds[2] = {rp, rs};
    for (int i = 0; i < 2; i++) {
        if (!kinds[i] || json_is_null(kinds[i])) continue;
        const char *type = json_string_value(json_object_get(kinds[i], "rope_type"));
        if (!type) type = json_string_value(json_object_get(kinds[i], "type"));
        if (!json_is_object(kinds[i]) || !type || strcmp(type, "default"))
            return mg_error_set(err, MG_ERR_UNSUPPORTED, "%s: %s of type '%s' (mgraph's RoPE is the default, unscaled one)",
                                path, i ? "rope_scaling" : "rope_parameters", type ? type : "?");
        json_t *pf = json_object_get(kinds[i], "partial_rotary_factor");
        if (pf && !(json_is_number(pf) && json_number_value(pf) == 1.0))
            return mg_error_set(err, MG_ERR_UNSUPPORTED, "%s: partial_rotary_factor other than 1", path);
    }
    return MG_OK;
}

/* The biases of each class: LLaMA's attention_bias (q/k/v/o) with mlp_bias, Qwen2's q/k/v
 * (always, and nothing else), Qwen3's attention_bias (q/k/v/o, no MLP bias). */
static int read_biases(json_t *cfg, const char *path, const char *type, cv_cfg *c, mg_error *err) {
    json_t *ab = json_object_get(cfg, "attention_bias"), *mb = json_object_get(cfg, "mlp_bias");
    if ((ab && !json_is_boolean(ab)) || (mb && !json_is_boolean(mb)))
        return mg_error_set(err, MG_ERR_INVALID, "%s: attention_bias / mlp_bias are not booleans", path);
    bool abias = json_is_true(ab), mbias = json_is_true(mb);
    c->qkv_bias = c->qk_norm = false;
    if (!strcmp(type, "mistral")) { /* MistralAttention and MistralMLP: no biases, no such keys */
        c->bias = false;
        return MG_OK;
    }
    if (!strcmp(type, "qwen2")) { /* Qwen2Attention: q/k/v with bias, o without; no MLP bias */
        c->bias = false, c->qkv_bias = true;
        return MG_OK;
    }
    if (!strcmp(type, "qwen3")) { /* attention_bias on q/k/v/o; the MLP has none */
        c->qk_norm = true;
        if (abias)
            return mg_error_set(err, MG_ERR_UNSUPPORTED, "%s: attention_bias true (biases on q/k/v/o, none in the MLP; "
                                "mgraph has them on every linear layer, on q/k/v alone, or on none)", path);
        c->bias = false;
        return MG_OK;
    }
    /* Megatron's --disable-bias-linear switches both */
    if (abias != mbias)
        return mg_error_set(err, MG_ERR_UNSUPPORTED,
                            "%s: attention_bias %s with mlp_bias %s (mgraph has biases on both or, with "
                            "--disable-bias-linear, on neither)", path, abias ? "true" : "false", mbias ? "true" : "false");
    c->bias = abias;
    return MG_OK;
}

/* config.json of the family's class a (its model_type tells the variant). */
static int read_family(const cv_arch *a, json_t *cfg, const char *path, cv_cfg *c, mg_error *err) {
    const char *type = a->model_type;
    const char *act = json_string_value(json_object_get(cfg, "hidden_act"));
    if (act && strcmp(act, "silu"))
        return mg_error_set(err, MG_ERR_UNSUPPORTED, "%s: hidden_act '%s' (mgraph's --swiglu is SiLU-gated)", path, act);
    json_t *ptp = json_object_get(cfg, "pretraining_tp");
    if (ptp && !json_is_null(ptp) && !(json_is_integer(ptp) && json_integer_value(ptp) >= 1))
        return mg_error_set(err, MG_ERR_INVALID, "%s: pretraining_tp is not a positive integer", path);
    json_t *sw = json_object_get(cfg, "use_sliding_window");
    if (sw && !json_is_null(sw) && !json_is_false(sw)) /* Qwen2's: windows from max_window_layers on */
        return mg_error_set(err, MG_ERR_UNSUPPORTED, "%s: use_sliding_window (windows in the layers from "
                            "max_window_layers on; mgraph's --window-attn-skip-freq makes every N-th layer a full one)",
                            path);
    c->window = 0;
    if (!strcmp(type, "mistral")) { /* MistralConfig's sliding_window: 4096 when absent, null for none */
        json_t *w = json_object_get(cfg, "sliding_window");
        if (!w) c->window = 4096;
        else if (json_is_integer(w) && json_integer_value(w) >= 1 && json_integer_value(w) <= 100000000)
            c->window = (int)json_integer_value(w);
        else if (!json_is_null(w))
            return mg_error_set(err, MG_ERR_INVALID, "%s: sliding_window is neither null nor a positive integer", path);
    }
    /* transformers 5 writes each layer's kind: all one, the kind the class's keys say */
    json_t *lt = json_object_get(cfg, "layer_types"), *kt;
    size_t i;
    const char *kind = c->window ? "sliding_attention" : "full_attention";
    json_array_foreach(lt, i, kt) {
        if (!json_is_string(kt) || strcmp(json_string_value(kt), kind))
            return mg_error_set(err, MG_ERR_UNSUPPORTED, "%s: layer_types[%zu] is '%s' (mgraph-convert reads every "
                                "layer as %s here)", path, i, json_is_string(kt) ? json_string_value(kt) : "?", kind);
    }
    if (lt && !json_is_null(lt) && !json_is_array(lt))
        return mg_error_set(err, MG_ERR_INVALID, "%s: layer_types is not a list", path);
    int rc = read_biases(cfg, path, type, c, err);
    if (rc) return rc;
    json_t *tie = json_object_get(cfg, "tie_word_embeddings");
    if (tie && !json_is_boolean(tie)) return mg_error_set(err, MG_ERR_INVALID, "%s: tie_word_embeddings is not a boolean", path);
    int64_t L = 0, h = 0, nh = 0, G = 0, P = 0, V = 0, f = 0, hd = 0;
    rc = cv_cfg_int(cfg, "num_hidden_layers", -1, &L, path, err);
    if (!rc) rc = cv_cfg_int(cfg, "hidden_size", -1, &h, path, err);
    if (!rc) rc = cv_cfg_int(cfg, "intermediate_size", -1, &f, path, err);
    if (!rc) rc = cv_cfg_int(cfg, "num_attention_heads", -1, &nh, path, err);
    if (!rc) rc = cv_cfg_int(cfg, "num_key_value_heads", nh, &G, path, err);
    if (!rc) rc = cv_cfg_int(cfg, "max_position_embeddings", -1, &P, path, err);
    if (!rc) rc = cv_cfg_int(cfg, "vocab_size", -1, &V, path, err);
    if (!rc && h % nh) rc = mg_error_set(err, MG_ERR_INVALID, "%s: num_attention_heads does not divide hidden_size", path);
    if (!rc) rc = cv_cfg_int(cfg, "head_dim", h / nh, &hd, path, err);
    if (!rc && hd != h / nh)
        rc = mg_error_set(err, MG_ERR_UNSUPPORTED, "%s: head_dim %lld is not hidden_size / num_attention_heads (%lld)", path,
                          (long long)hd, (long long)(h / nh));
    if (!rc && nh % G)
        rc = mg_error_set(err, MG_ERR_INVALID, "%s: num_key_value_heads %lld does not divide num_attention_heads %lld", path,
                          (long long)G, (long long)nh);
    double theta = 0;
    if (!rc) rc = read_rope(cfg, path, &theta, err);
    if (rc) return rc;
    json_t *eps = json_object_get(cfg, "rms_norm_eps");
    double e = json_is_number(eps) ? json_number_value(eps) : 1e-6; /* LlamaConfig's default */
    if (!(e > 0 && e < 1)) return mg_error_set(err, MG_ERR_INVALID, "%s: rms_norm_eps %g is not in (0, 1)", path, e);
    json_t *ad = json_object_get(cfg, "attention_dropout");
    c->arch = CV_LLAMA;
    c->layers = (int)L, c->hidden = (int)h, c->ffn = (int)f, c->heads = (int)nh, c->groups = (int)G, c->positions = (int)P;
    c->vocab = V, c->eps = e, c->rope_base = theta;
    c->untied = tie ? json_is_false(tie) : true; /* LlamaConfig's default: untied */
    c->hidden_dropout = 0; /* LLaMA has no hidden dropout */
    c->attention_dropout = json_is_number(ad) ? json_number_value(ad) : 0;
    c->tokenizer_type = V == 256 ? "ByteLevelTokenizer" : "SentencePieceTokenizer";
    return MG_OK;
}

/* config.json of class a: LLaMA's keys, and the variant's. */
static json_t *write_family(const cv_arch *a, const cv_cfg *c) {
    const char *arch = a->hf_class, *type = a->model_type;
    double theta = cv_float_decimal((float)c->rope_base);
    json_t *cfg = json_pack("{s:[s], s:s, s:I, s:i, s:i, s:i, s:i, s:i, s:i, s:s, s:i, s:f, s:f, s:{s:s, s:f}, s:b, s:b, "
                            "s:f, s:b, s:f, s:i, s:b, s:s, s:n, s:n}",
                            "architectures", arch, "model_type", type, "vocab_size", (json_int_t)c->vocab,
                            "hidden_size", c->hidden, "intermediate_size", c->ffn, "num_hidden_layers", c->layers,
                            "num_attention_heads", c->heads, "num_key_value_heads", c->groups, "head_dim",
                            c->hidden / c->heads, "hidden_act", "silu", "max_position_embeddings", c->positions,
                            "rms_norm_eps", cv_float_decimal((float)c->eps), "rope_theta", theta, "rope_parameters",
                            "rope_type", "default", "rope_theta", theta, "attention_bias", c->bias, "mlp_bias", c->bias,
                            "attention_dropout", cv_float_decimal((float)c->attention_dropout), "tie_word_embeddings", !c->untied,
                            "initializer_range", 0.02, "pretraining_tp", 1, "use_cache", 1, "torch_dtype", "float32",
                            "bos_token_id", "eos_token_id"); /* the tokenizer's special tokens are not known here */
    if (cfg && !strcmp(type, "mistral")) { /* no bias keys; the window in every layer */
        json_object_del(cfg, "mlp_bias");
        json_object_del(cfg, "attention_bias");
        json_object_set_new(cfg, "sliding_window", json_integer(c->window));
    } else if (cfg && strcmp(type, "llama")) { /* the Qwen classes read no mlp_bias; all attention layers full */
        json_object_del(cfg, "mlp_bias");
        json_object_set_new(cfg, "use_sliding_window", json_false());
        if (!strcmp(type, "qwen2")) json_object_del(cfg, "attention_bias");
    }
    return cfg;
}

const cv_arch cv_llama = {"LlamaForCausalLM", "llama", "model.embed_tokens.weight", alloc, hf_key, hf_shape, convert,
                          read_family, write_family};
const cv_arch cv_qwen2 = {"Qwen2ForCausalLM", "qwen2", "model.embed_tokens.weight", alloc, hf_key, hf_shape, convert,
                          read_family, write_family};
const cv_arch cv_qwen3 = {"Qwen3ForCausalLM", "qwen3", "model.embed_tokens.weight", alloc, hf_key, hf_shape, convert,
                          read_family, write_family};
const cv_arch cv_mistral = {"MistralForCausalLM", "mistral", "model.embed_tokens.weight", alloc, hf_key, hf_shape,
                            convert, read_family, write_family};

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
#include "mgraph/ops.h"

static int alloc(cv_model *m, mg_error *err) {
    const cv_cfg *c = &m->cfg;
    int64_t h = c->hidden, f = c->ffn, hd = c->head_dim ? c->head_dim : h / c->heads, kv = (int64_t)c->groups * hd;
    int64_t q = (int64_t)c->heads * hd;
    int rc = cv_add(m, "model.embed_tokens.weight", c->padded, h, err);
    char nm[128];
    for (int l = 0; l < c->layers && !rc; l++) {
        bool b = c->bias, qkv = b || c->qkv_bias, qn = c->qk_norm;
        bool dense = !mg_moe_is_layer(&(mg_gpt_config){.moe = c->moe}, l); /* (an MoE layer's experts: convert_moe.c) */
        const struct { const char *s; int64_t r, cols; bool bias, here; } p[] = {
            {"input_layernorm", h, 0, false, true},  {"self_attn.q_proj", q, h, qkv, true},
            {"self_attn.k_proj", kv, h, qkv, true},  {"self_attn.v_proj", kv, h, qkv, true},
            {"self_attn.q_norm", hd, 0, false, qn},  {"self_attn.k_norm", hd, 0, false, qn},
            {"self_attn.o_proj", h, q, b, true},     {"post_attention_layernorm", h, 0, false, true},
            {"mlp.gate_proj", f, h, b, dense},       {"mlp.up_proj", f, h, b, dense},
            {"mlp.down_proj", h, f, b, dense}};
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
    for (int l = 0; l < c->layers && !rc; l++)
        if (mg_moe_is_layer(&(mg_gpt_config){.moe = c->moe}, l)) rc = cv_moe_alloc_layer(m, l, err);
    if (!rc) rc = cv_add(m, "model.norm.weight", h, 0, err);
    if (!rc && c->untied) rc = cv_add(m, "lm_head.weight", c->padded, h, err);
    return rc;
}

/* (the MoE classes' router keys; the rest are the same names) */
static void hf_key_of(const cv_arch *a, const cv_tensor *t, char *key, size_t n) {
    if (!cv_moe_hf_key(a, t, key, n)) snprintf(key, n, "%s", t->name);
}
static void hf_key(const cv_tensor *t, char *key, size_t n) { snprintf(key, n, "%s", t->name); }
static void hf_key_mixtral(const cv_tensor *t, char *key, size_t n) { hf_key_of(&cv_mixtral, t, key, n); }
static void hf_key_qwen3_moe(const cv_tensor *t, char *key, size_t n) { hf_key_of(&cv_qwen3_moe, t, key, n); }

static bool vocab_rows(const cv_tensor *t) {
    return !strcmp(t->name, "model.embed_tokens.weight") || !strcmp(t->name, "lm_head.weight");
}

int cv_llama_hf_shape(const cv_cfg *c, const cv_tensor *t, int64_t *s) {
    s[0] = vocab_rows(t) ? c->vocab : t->shape[0];
    s[1] = t->shape[1];
    return t->ndim;
}

/* Same layout; the vocabulary tensors keep their first c->vocab rows (the padding rows
 * stay zero on import). */
void cv_llama_convert(const cv_cfg *c, cv_tensor *t, float *hf, bool to_mg) {
    int64_t rows = vocab_rows(t) ? c->vocab : t->shape[0], n = t->ndim == 1 ? rows : rows * t->shape[1];
    if (to_mg) memcpy(t->data, hf, (size_t)n * sizeof(float));
    else memcpy(hf, t->data, (size_t)n * sizeof(float));
}

/* RoPE: "rope_parameters" (transformers 5) or "rope_theta" / "rope_scaling" (4.x). */
static double num_or(json_t *o, const char *k, double dflt) {
    json_t *x = json_object_get(o, k);
    return json_is_number(x) ? json_number_value(x) : dflt;
}

int cv_read_rope(json_t *cfg, const char *path, bool mla, double *theta, mg_rope_config *r, mg_error *err) {
    json_t *rp = json_object_get(cfg, "rope_parameters"), *rs = json_object_get(cfg, "rope_scaling");
    *theta = 10000.0;
    json_t *t = json_object_get(cfg, "rope_theta");
    if (json_is_object(rp) && json_object_get(rp, "rope_theta")) t = json_object_get(rp, "rope_theta");
    if (t && !(json_is_number(t) && json_number_value(t) > 1))
        return mg_error_set(err, MG_ERR_INVALID, "%s: rope_theta is not a number > 1", path);
    if (t) *theta = json_number_value(t);
    /* transformers 5's rope_parameters, or 4.x's rope_scaling (which a rope_parameters of the
     * default type, written beside it, does not override) */
    const char *rpt = json_string_value(json_object_get(rp, "rope_type"));
    json_t *o = json_is_object(rp) && (!json_is_object(rs) || (rpt && strcmp(rpt, "default"))) ? rp
                : json_is_object(rs)                                                            ? rs
                                                                                                : NULL;
    if ((rp && !json_is_null(rp) && !json_is_object(rp)) || (rs && !json_is_null(rs) && !json_is_object(rs)))
        return mg_error_set(err, MG_ERR_INVALID, "%s: rope_parameters / rope_scaling is not an object", path);
    const char *type = o ? json_string_value(json_object_get(o, "rope_type")) : NULL;
    if (o && !type) type = json_string_value(json_object_get(o, "type"));
    if (!type) type = "default";
    json_t *pf = o ? json_object_get(o, "partial_rotary_factor") : NULL;
    if (!pf) pf = json_object_get(cfg, "partial_rotary_factor");
    if (pf && !json_is_null(pf) && !(json_is_number(pf) && json_number_value(pf) == 1.0))
        return mg_error_set(err, MG_ERR_UNSUPPORTED, "%s: partial_rotary_factor other than 1", path);
    *r = (mg_rope_config){.factor = 1, .low_freq_factor = 1, .high_freq_factor = 4, .beta_fast = 32, .beta_slow = 1,
                          .mscale = 1};
    if (!strcmp(type, "default")) {
        if (mla) r->scaling = MG_ROPE_YARN, r->original_max_pos = 4096; /* Megatron's MLA: YaRN of factor 1 */
        return MG_OK;
    }
    double factor = num_or(o, "factor", 0);
    if (!strcmp(type, "llama3")) { /* Megatron's --use-rope-scaling: 1 and 4 over 8192, only the factor given */
        double lo = num_or(o, "low_freq_factor", 1), hi = num_or(o, "high_freq_factor", 4);
        double orig = num_or(o, "original_max_position_embeddings", 8192);
        if (mla || lo != 1 || hi != 4 || orig != 8192 || !(factor > 0))
            return mg_error_set(err, MG_ERR_UNSUPPORTED, "%s: llama3 RoPE scaling with low_freq_factor %g, "
                                "high_freq_factor %g, original_max_position_embeddings %g (Megatron's --use-rope-scaling "
                                "has 1, 4 and 8192%s; the factor, here %g, is --rope-scaling-factor)",
                                path, lo, hi, orig, mla ? ", and no multi-latent attention" : "", factor);
        r->scaling = MG_ROPE_LLAMA3, r->factor = (float)factor, r->original_max_pos = 8192;
        return MG_OK;
    }
    if (strcmp(type, "yarn"))
        return mg_error_set(err, MG_ERR_UNSUPPORTED, "%s: RoPE of type '%s' (mgraph has the default, llama3 and yarn)",
                            path, type);
    double orig = num_or(o, "original_max_position_embeddings", 0);
    if (factor <= 0 && orig > 0) factor = num_or(cfg, "max_position_embeddings", 0) / orig; /* (transformers' rule) */
    json_t *ms = json_object_get(o, "mscale"), *ma = json_object_get(o, "mscale_all_dim"), *tr = json_object_get(o, "truncate");
    double m = num_or(o, "mscale", 0), mad = num_or(o, "mscale_all_dim", 0);
    double beta_fast = num_or(o, "beta_fast", 32), beta_slow = num_or(o, "beta_slow", 1);
    if (!(factor > 0) || !(orig >= 1) || (ms && !json_is_null(ms) && !json_is_number(ms)) ||
        (ma && !json_is_null(ma) && !json_is_number(ma)) || (tr && !json_is_boolean(tr)))
        return mg_error_set(err, MG_ERR_INVALID, "%s: yarn RoPE needs a factor, original_max_position_embeddings and "
                            "numeric mscale / mscale_all_dim", path);
    /* transformers' attention factor: mscale(f, m) / mscale(f, mad) when both are given
     * and not 0, else mscale(f, 1): Megatron's (m, mad), or (1, 0) */
    if (!(m != 0 && mad != 0)) m = 1, mad = 0;
    json_t *af = json_object_get(o, "attention_factor");
    if (af && !json_is_null(af)) {
        double want = json_is_number(af) ? json_number_value(af) : -1;
        if (fabs(want - mg_yarn_mscale(factor, m) / mg_yarn_mscale(factor, mad)) > 1e-6) {
            /* an attention factor alone: Megatron's --mscale m with --mscale-all-dim 0 (0.1 m ln f + 1) */
            double mm = factor > 1 ? (want - 1) / (0.1 * log(factor)) : -1;
            if (mad != 0 || !(mm >= 0))
                return mg_error_set(err, MG_ERR_UNSUPPORTED, "%s: a yarn attention_factor %g that no --mscale gives", path,
                                    want);
            m = mm;
        }
    }
    if (mla && (orig != 4096 || beta_fast != 32 || beta_slow != 1 || json_is_false(tr)))
        return mg_error_set(err, MG_ERR_UNSUPPORTED, "%s: multi-latent attention's YaRN over %g positions with betas %g, "
                            "%g (Megatron's MLA has 4096, 32 and 1, rounded)", path, orig, beta_fast, beta_slow);
    r->scaling = MG_ROPE_YARN, r->factor = (float)factor, r->original_max_pos = (int)orig;
    r->beta_fast = (float)beta_fast, r->beta_slow = (float)beta_slow, r->no_round = json_is_false(tr);
    r->mscale = (float)m, r->mscale_all_dim = (float)mad;
    return MG_OK;
}

json_t *cv_write_rope(double theta, const mg_rope_config *r) {
    if (r->scaling == MG_ROPE_DEFAULT || (r->scaling == MG_ROPE_YARN && r->factor == 1.0f))
        return json_pack("{s:s, s:f}", "rope_type", "default", "rope_theta", theta); /* (YaRN of factor 1: unscaled) */
    if (r->scaling == MG_ROPE_LLAMA3)
        return json_pack("{s:s, s:f, s:f, s:f, s:f, s:i}", "rope_type", "llama3", "rope_theta", theta, "factor",
                         cv_float_decimal(r->factor), "low_freq_factor", 1.0, "high_freq_factor", 4.0,
                         "original_max_position_embeddings", r->original_max_pos);
    json_t *o = json_pack("{s:s, s:f, s:f, s:i, s:f, s:f, s:b}", "rope_type", "yarn", "rope_theta", theta, "factor",
                          cv_float_decimal(r->factor), "original_max_position_embeddings", r->original_max_pos,
                          "beta_fast", cv_float_decimal(r->beta_fast), "beta_slow", cv_float_decimal(r->beta_slow),
                          "truncate", !r->no_round);
    if (o && r->mscale_all_dim != 0) { /* (else transformers' default: mscale(f, 1) over 1, Megatron's (1, 0)) */
        json_object_set_new(o, "mscale", json_real(cv_float_decimal(r->mscale)));
        json_object_set_new(o, "mscale_all_dim", json_real(cv_float_decimal(r->mscale_all_dim)));
    } else if (o && r->mscale != 1.0f) {
        json_object_set_new(o, "attention_factor", json_real(mg_yarn_mscale(r->factor, r->mscale)));
    }
    return o;
}

/* The biases of each class: LLaMA's attention_bias (q/k/v/o) with mlp_bias, Qwen2's q/k/v
 * (always, and nothing else), Qwen3's attention_bias (q/k/v/o, no MLP bias). */
static int read_biases(json_t *cfg, const char *path, const char *type, cv_cfg *c, mg_error *err) {
    json_t *ab = json_object_get(cfg, "attention_bias"), *mb = json_object_get(cfg, "mlp_bias");
    if ((ab && !json_is_boolean(ab)) || (mb && !json_is_boolean(mb)))
        return mg_error_set(err, MG_ERR_INVALID, "%s: attention_bias / mlp_bias are not booleans", path);
    bool abias = json_is_true(ab), mbias = json_is_true(mb);
    c->qkv_bias = c->qk_norm = false;
    if (!strcmp(type, "mistral") || !strcmp(type, "mixtral")) { /* no biases, no such keys */
        c->bias = false;
        return MG_OK;
    }
    if (!strcmp(type, "qwen2")) { /* Qwen2Attention: q/k/v with bias, o without; no MLP bias */
        c->bias = false, c->qkv_bias = true;
        return MG_OK;
    }
    if (!strcmp(type, "qwen3") || !strcmp(type, "qwen3_moe")) { /* attention_bias on q/k/v/o; the MLP has none */
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

/* The experts of Mixtral (every layer; softmax over the top-k logits) and Qwen3-MoE (the
 * layers mlp_only_layers and decoder_sparse_step leave MoE; softmax over all experts, the
 * top-k renormalised with norm_topk_prob: mgraph's softmax after the top-k, else its
 * --moe-router-pre-softmax). */
static int read_moe(json_t *cfg, const char *path, const char *type, cv_cfg *c, mg_error *err) {
    bool mixtral = !strcmp(type, "mixtral");
    int64_t E = 0, k = 0, fm = c->ffn, step = 1;
    /* (transformers 5 writes num_local_experts for both; Qwen's own configs say num_experts) */
    const char *ek = json_object_get(cfg, "num_local_experts") || mixtral ? "num_local_experts" : "num_experts";
    int rc = cv_cfg_int(cfg, ek, -1, &E, path, err);
    if (!rc) rc = cv_cfg_int(cfg, "num_experts_per_tok", 2, &k, path, err);
    if (!rc && !mixtral) rc = cv_cfg_int(cfg, "moe_intermediate_size", -1, &fm, path, err);
    if (!rc && !mixtral) rc = cv_cfg_int(cfg, "decoder_sparse_step", 1, &step, path, err);
    if (rc) return rc;
    json_t *jn = json_object_get(cfg, "router_jitter_noise");
    if (jn && !json_is_null(jn) && !(json_is_number(jn) && json_number_value(jn) == 0))
        return mg_error_set(err, MG_ERR_UNSUPPORTED, "%s: router_jitter_noise (mgraph's router has no input jitter)", path);
    if (k > E) return mg_error_set(err, MG_ERR_INVALID, "%s: num_experts_per_tok %lld exceeds the experts", path, (long long)k);
    mg_moe_config *o = &c->moe;
    o->num_experts = (int)E, o->topk = (int)k, o->ffn_hidden = (int)fm;
    json_t *nt = json_object_get(cfg, "norm_topk_prob");
    if (nt && !json_is_boolean(nt)) return mg_error_set(err, MG_ERR_INVALID, "%s: norm_topk_prob is not a boolean", path);
    o->pre_softmax = !mixtral && !json_is_true(nt); /* (Qwen3MoeConfig's default: false) */
    if (o->topk == 1 && !o->pre_softmax)
        return mg_error_set(err, MG_ERR_UNSUPPORTED, "%s: top-1 routing renormalised over the one expert (its weight is "
                            "always 1, Megatron refuses it)", path);
    /* which layers are MoE: a list when any is dense */
    json_t *only = json_object_get(cfg, "mlp_only_layers"), *x;
    size_t i;
    if (only && !json_is_null(only) && !json_is_array(only))
        return mg_error_set(err, MG_ERR_INVALID, "%s: mlp_only_layers is not a list", path);
    if (c->layers > MG_MOE_MAX_LAYERS)
        return mg_error_set(err, MG_ERR_UNSUPPORTED, "%s: more than %d layers", path, MG_MOE_MAX_LAYERS);
    o->pattern_len = c->layers;
    memset(o->layer_pattern, 0, sizeof o->layer_pattern);
    for (int l = 0; l < c->layers; l++)
        if ((l + 1) % step == 0) o->layer_pattern[l / 64] |= 1ull << (l % 64);
    json_array_foreach(only, i, x) {
        if (!json_is_integer(x) || json_integer_value(x) < 0 || json_integer_value(x) >= c->layers)
            return mg_error_set(err, MG_ERR_INVALID, "%s: mlp_only_layers[%zu] is not a layer", path, i);
        int l = (int)json_integer_value(x);
        o->layer_pattern[l / 64] &= ~(1ull << (l % 64));
    }
    bool all = true;
    for (int l = 0; l < c->layers; l++) all &= mg_moe_is_layer(&(mg_gpt_config){.moe = *o}, l);
    if (all) o->pattern_len = 0, o->layer_freq = 1; /* (--moe-layer-freq 1, as mgraph-run writes it) */
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
    bool mixtral = !strcmp(type, "mixtral");
    if (!strcmp(type, "mistral") || mixtral) { /* MistralConfig's sliding_window: 4096 when absent, null for none */
        json_t *w = json_object_get(cfg, "sliding_window");
        if (!w) c->window = mixtral ? 0 : 4096; /* (MixtralConfig's: none) */
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
    if (!rc) rc = cv_cfg_int(cfg, "head_dim", 0, &hd, path, err); /* (other than h / nh: --kv-channels) */
    if (!rc && !hd && h % nh) rc = mg_error_set(err, MG_ERR_INVALID, "%s: num_attention_heads does not divide hidden_size", path);
    if (!rc && !hd) hd = h / nh;
    if (!rc && nh % G)
        rc = mg_error_set(err, MG_ERR_INVALID, "%s: num_key_value_heads %lld does not divide num_attention_heads %lld", path,
                          (long long)G, (long long)nh);
    double theta = 0;
    if (!rc) rc = cv_read_rope(cfg, path, false, &theta, &c->rope, err);
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
    c->head_dim = hd * nh == h ? 0 : (int)hd;
    return mixtral || !strcmp(type, "qwen3_moe") ? read_moe(cfg, path, type, c, err) : MG_OK;
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
                            c->head_dim ? c->head_dim : c->hidden / c->heads, "hidden_act", "silu",
                            "max_position_embeddings", c->positions, "rms_norm_eps", cv_float_decimal((float)c->eps),
                            "rope_theta", theta, "rope_parameters", "rope_type", "default", "rope_theta", theta,
                            "attention_bias", c->bias, "mlp_bias", c->bias,
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
    if (cfg) json_object_set_new(cfg, "rope_parameters", cv_write_rope(theta, &c->rope));
    const mg_moe_config *o = &c->moe;
    if (cfg && !strcmp(type, "mixtral")) { /* every layer MoE, experts of intermediate_size */
        json_object_del(cfg, "mlp_bias");
        json_object_del(cfg, "attention_bias");
        json_object_del(cfg, "use_sliding_window");
        json_object_set_new(cfg, "sliding_window", c->window ? json_integer(c->window) : json_null());
        json_object_set_new(cfg, "intermediate_size", json_integer(o->ffn_hidden ? o->ffn_hidden : c->ffn));
        json_object_set_new(cfg, "num_local_experts", json_integer(o->num_experts));
        json_object_set_new(cfg, "num_experts_per_tok", json_integer(o->topk));
        json_object_set_new(cfg, "router_jitter_noise", json_real(0));
    } else if (cfg && !strcmp(type, "qwen3_moe")) {
        json_t *dense = json_array();
        for (int l = 0; l < c->layers; l++)
            if (!mg_moe_is_layer(&(mg_gpt_config){.moe = *o}, l)) json_array_append_new(dense, json_integer(l));
        json_object_set_new(cfg, "mlp_only_layers", dense);
        json_object_set_new(cfg, "decoder_sparse_step", json_integer(1));
        json_object_set_new(cfg, "moe_intermediate_size", json_integer(o->ffn_hidden ? o->ffn_hidden : c->ffn));
        json_object_set_new(cfg, "num_experts", json_integer(o->num_experts));
        json_object_set_new(cfg, "num_experts_per_tok", json_integer(o->topk));
        json_object_set_new(cfg, "norm_topk_prob", json_boolean(!o->pre_softmax));
    }
    return cfg;
}

static int parts_of(const cv_arch *a, const cv_cfg *c, const cv_tensor *t, cv_part *out, int max) {
    return cv_moe_parts(a, c, t, out, max);
}

#define FAMILY(cls, type, key)                                                                                     \
    .hf_class = cls, .model_type = type, .embedding = "model.embed_tokens.weight", .alloc = alloc, .hf_key = key,      \
    .hf_shape = cv_llama_hf_shape, .convert = cv_llama_convert, .read_config = read_family, .write_config = write_family
const cv_arch cv_llama = {FAMILY("LlamaForCausalLM", "llama", hf_key)};
const cv_arch cv_qwen2 = {FAMILY("Qwen2ForCausalLM", "qwen2", hf_key)};
const cv_arch cv_qwen3 = {FAMILY("Qwen3ForCausalLM", "qwen3", hf_key)};
const cv_arch cv_mistral = {FAMILY("MistralForCausalLM", "mistral", hf_key)};
const cv_arch cv_mixtral = {FAMILY("MixtralForCausalLM", "mixtral", hf_key_mixtral), .parts = parts_of,
                            .moe_module = "block_sparse_moe", .expert_names = {"w1", "w3", "w2"}};
const cv_arch cv_qwen3_moe = {FAMILY("Qwen3MoeForCausalLM", "qwen3_moe", hf_key_qwen3_moe), .parts = parts_of,
                              .moe_module = "mlp", .expert_names = {"gate_proj", "up_proj", "down_proj"}};

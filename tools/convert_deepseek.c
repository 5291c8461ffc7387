/* Hugging Face DeepseekV3ForCausalLM <-> mgraph's GPT with multi-latent attention and
 * DeepSeek-V3's MoE (tools/convert.h).
 *
 * models/mla.c gives the attention DeepseekV3's own names and layouts (q_a_proj,
 * q_a_layernorm, q_b_proj or q_proj, kv_a_proj_with_mqa, kv_a_layernorm, kv_b_proj, o_proj;
 * per head [nope, rope] and [k_nope, v]), so they convert as they are; RoPE on the
 * positional part is the interleaved pairing that DeepseekV3's rope_interleave (true)
 * computes. The MoE layers are the first_k_dense_replace layers on (convert_moe.c): sigmoid
 * scores with gate.e_score_correction_bias (mgraph's --moe-router-enable-expert-bias),
 * n_group / topk_group group-limited routing (transformers ranks groups by their top-2
 * scores, Megatron by their top-(topk / group-topk): equal when that is 2), the top-k
 * renormalised (norm_topk_prob, Megatron's for k > 1) and scaled by routed_scaling_factor,
 * n_shared_experts x moe_intermediate_size shared experts. RoPE is YaRN with Megatron's MLA
 * defaults (4096 original positions, betas 32 and 1), or unscaled (YaRN of factor 1).
 *
 * Multi-token prediction (num_nextn_predict_layers, mgraph's --mtp-num-layers): depth k's
 * layer is model.layers.<L + k - 1>.* in DeepSeek-V3's checkpoints, as in mgraph's
 * (models/mtp.c): enorm, hnorm, eh_proj [h, 2h] (the embedding's half first), a decoder
 * layer of the last layer's kind, shared_head.norm. DeepSeek's files also hold a copy of
 * the word embedding (embed_tokens) and of the output layer (shared_head.head) in each,
 * which Megatron and mgraph share with the model's: the export writes them, the import
 * reads them when present and refuses them when they differ from the model's. transformers'
 * DeepseekV3ForCausalLM builds no MTP layer: it loads such a checkpoint leaving those
 * tensors unused (its _keys_to_ignore_on_load_unexpected names them). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "convert.h"

static bool is_moe(const cv_cfg *c, int l) { return mg_moe_is_layer(&(mg_gpt_config){.moe = c->moe}, l); }

/* Decoder layer l's tensors: multi-latent attention, then the dense MLP or the MoE. */
static int alloc_layer(cv_model *m, int l, bool dense, mg_error *err) {
    const cv_cfg *c = &m->cfg;
    const mg_mla_config *a = &c->mla;
    int64_t h = c->hidden, f = c->ffn, nh = c->heads, qd = a->qk_head_dim + a->qk_pos_emb_head_dim;
    bool ql = a->q_lora_rank > 0;
    const struct { const char *s; int64_t r, cols; bool here; } p[] = {
        {"input_layernorm", h, 0, true},
        {"self_attn.q_a_proj", a->q_lora_rank, h, ql},
        {"self_attn.q_a_layernorm", a->q_lora_rank, 0, ql},
        {"self_attn.q_b_proj", nh * qd, a->q_lora_rank, ql},
        {"self_attn.q_proj", nh * qd, h, !ql},
        {"self_attn.kv_a_proj_with_mqa", a->kv_lora_rank + a->qk_pos_emb_head_dim, h, true},
        {"self_attn.kv_a_layernorm", a->kv_lora_rank, 0, true},
        {"self_attn.kv_b_proj", nh * (a->qk_head_dim + a->v_head_dim), a->kv_lora_rank, true},
        {"self_attn.o_proj", h, nh * a->v_head_dim, true},
        {"post_attention_layernorm", h, 0, true},
        {"mlp.gate_proj", f, h, dense},
        {"mlp.up_proj", f, h, dense},
        {"mlp.down_proj", h, f, dense}};
    char nm[160];
    int rc = MG_OK;
    for (size_t k = 0; k < sizeof p / sizeof *p && !rc; k++) {
        if (!p[k].here) continue;
        snprintf(nm, sizeof nm, "model.layers.%d.%s.weight", l, p[k].s);
        rc = cv_add(m, nm, p[k].r, p[k].cols, err);
    }
    if (!rc && !dense) rc = cv_moe_alloc_layer(m, l, err);
    return rc;
}

static int alloc(cv_model *m, mg_error *err) {
    const cv_cfg *c = &m->cfg;
    int64_t h = c->hidden;
    int rc = cv_add(m, "model.embed_tokens.weight", c->padded, h, err);
    for (int l = 0; l < c->layers && !rc; l++) rc = alloc_layer(m, l, !is_moe(c, l), err);
    /* the multi-token prediction layers (models/mtp.c's names) */
    char nm[160];
    for (int k = 0; k < c->mtp_layers && !rc; k++) {
        int l = c->layers + k;
        const struct { const char *s; int64_t r, cols; } p[] = {{"enorm", h, 0}, {"hnorm", h, 0}, {"eh_proj", h, 2 * h}};
        for (size_t i = 0; i < sizeof p / sizeof *p && !rc; i++) {
            snprintf(nm, sizeof nm, "model.layers.%d.%s.weight", l, p[i].s);
            rc = cv_add(m, nm, p[i].r, p[i].cols, err);
        }
        if (!rc) rc = alloc_layer(m, l, !is_moe(c, c->layers - 1), err);
        snprintf(nm, sizeof nm, "model.layers.%d.shared_head.norm.weight", l);
        if (!rc) rc = cv_add(m, nm, h, 0, err);
    }
    if (!rc) rc = cv_add(m, "model.norm.weight", h, 0, err);
    if (!rc && c->untied) rc = cv_add(m, "lm_head.weight", c->padded, h, err);
    return rc;
}

static void hf_key(const cv_tensor *t, char *key, size_t n) {
    if (!cv_moe_hf_key(&cv_deepseek_v3, t, key, n)) snprintf(key, n, "%s", t->name);
}

/* a key that must hold `want` (absent: `dflt`) */
static int want_value(json_t *cfg, const char *k, const char *path, bool ok, const char *why, mg_error *err) {
    (void)cfg;
    return ok ? MG_OK : mg_error_set(err, MG_ERR_UNSUPPORTED, "%s: %s (%s)", path, k, why);
}

static int read_config(const cv_arch *a, json_t *cfg, const char *path, cv_cfg *c, mg_error *err) {
    (void)a;
    const char *act = json_string_value(json_object_get(cfg, "hidden_act"));
    if (act && strcmp(act, "silu"))
        return mg_error_set(err, MG_ERR_UNSUPPORTED, "%s: hidden_act '%s' (mgraph's --swiglu is SiLU-gated)", path, act);
    int64_t L, h, f, nh, G, P, V, ql = 0, kvl, qk, rope, vd, E = 0, k = 1, fm = 0, ns = 0, ng = 1, tg = 1, kd = 0, freq = 1;
    int rc = cv_cfg_int(cfg, "num_hidden_layers", -1, &L, path, err);
    if (!rc) rc = cv_cfg_int(cfg, "hidden_size", -1, &h, path, err);
    if (!rc) rc = cv_cfg_int(cfg, "intermediate_size", -1, &f, path, err);
    if (!rc) rc = cv_cfg_int(cfg, "num_attention_heads", -1, &nh, path, err);
    if (!rc) rc = cv_cfg_int(cfg, "num_key_value_heads", nh, &G, path, err);
    if (!rc) rc = cv_cfg_int(cfg, "max_position_embeddings", -1, &P, path, err);
    if (!rc) rc = cv_cfg_int(cfg, "vocab_size", -1, &V, path, err);
    if (!rc) rc = cv_cfg_int(cfg, "q_lora_rank", 0, &ql, path, err); /* (null: q from the hidden state) */
    if (!rc) rc = cv_cfg_int(cfg, "kv_lora_rank", -1, &kvl, path, err);
    if (!rc) rc = cv_cfg_int(cfg, "qk_nope_head_dim", -1, &qk, path, err);
    if (!rc) rc = cv_cfg_int(cfg, "qk_rope_head_dim", -1, &rope, path, err);
    if (!rc) rc = cv_cfg_int(cfg, "v_head_dim", -1, &vd, path, err);
    if (!rc) rc = cv_cfg_int(cfg, "n_routed_experts", 0, &E, path, err);
    if (!rc) rc = cv_cfg_int(cfg, "num_experts_per_tok", 1, &k, path, err);
    if (!rc) rc = cv_cfg_int(cfg, "moe_intermediate_size", f, &fm, path, err);
    if (!rc) rc = cv_cfg_int(cfg, "n_shared_experts", 0, &ns, path, err);
    if (!rc) rc = cv_cfg_int(cfg, "n_group", 1, &ng, path, err);
    if (!rc) rc = cv_cfg_int(cfg, "topk_group", 1, &tg, path, err);
    if (!rc) rc = cv_cfg_int(cfg, "moe_layer_freq", 1, &freq, path, err);
    int64_t mtp = 0; /* (0 where mgraph-convert wrote a model without MTP layers) */
    json_t *nx = json_object_get(cfg, "num_nextn_predict_layers");
    if (!rc && nx && !json_is_null(nx)) {
        if (!json_is_integer(nx) || json_integer_value(nx) < 0)
            rc = mg_error_set(err, MG_ERR_INVALID, "%s: num_nextn_predict_layers is not an integer >= 0", path);
        else mtp = json_integer_value(nx);
    }
    if (!rc && mtp > MG_MTP_MAX_LAYERS)
        rc = mg_error_set(err, MG_ERR_UNSUPPORTED, "%s: num_nextn_predict_layers %lld (mgraph's --mtp-num-layers is at most %d)",
                          path, (long long)mtp, MG_MTP_MAX_LAYERS);
    json_t *fk = json_object_get(cfg, "first_k_dense_replace");
    if (!rc && fk && !json_is_null(fk)) {
        if (!json_is_integer(fk) || json_integer_value(fk) < 0)
            rc = mg_error_set(err, MG_ERR_INVALID, "%s: first_k_dense_replace is not an integer >= 0", path);
        else kd = json_integer_value(fk);
    }
    if (rc) return rc;
    const char *sf = json_string_value(json_object_get(cfg, "scoring_func"));
    const char *tm = json_string_value(json_object_get(cfg, "topk_method"));
    json_t *ri = json_object_get(cfg, "rope_interleave"), *ab = json_object_get(cfg, "attention_bias");
    json_t *nt = json_object_get(cfg, "norm_topk_prob"), *tie = json_object_get(cfg, "tie_word_embeddings");
    bool moe = E > 0 && kd < L;
    if (!rc) rc = want_value(cfg, "num_key_value_heads", path, G == nh, "multi-latent attention has one key per head", err);
    if (!rc) rc = want_value(cfg, "rope_interleave", path, !ri || json_is_true(ri),
                             "false: rotate-half pairing of the RoPE part; mgraph's MLA pairs adjacent channels", err);
    if (!rc) rc = want_value(cfg, "attention_bias", path, !ab || json_is_false(ab),
                             "true: biases on q_a_proj, kv_a_proj and o_proj; Megatron's MLA has none but o_proj's", err);
    if (!rc) rc = want_value(cfg, "scoring_func", path, !sf || !strcmp(sf, "sigmoid"), "not sigmoid", err);
    if (!rc) rc = want_value(cfg, "topk_method", path, !tm || !strcmp(tm, "noaux_tc"), "not noaux_tc", err);
    if (!rc) rc = want_value(cfg, "moe_layer_freq", path, freq == 1, "not 1", err);
    if (!rc && moe)
        rc = want_value(cfg, "n_group / topk_group", path,
                        ng <= 1 || (E % ng == 0 && tg <= ng && k % tg == 0 && k / tg == 2),
                        "transformers ranks groups by their top-2 scores, Megatron by top-(topk / topk_group): "
                        "num_experts_per_tok must be 2 x topk_group and the groups divide the experts", err);
    if (!rc && moe)
        rc = want_value(cfg, "norm_topk_prob", path, (nt && json_is_boolean(nt) && json_is_true(nt)) == (k > 1),
                        "Megatron normalises the sigmoid weights over the top-k exactly when k > 1", err);
    if (!rc && tie && !json_is_boolean(tie)) rc = mg_error_set(err, MG_ERR_INVALID, "%s: tie_word_embeddings is not a boolean", path);
    double theta = 0;
    if (!rc) rc = cv_read_rope(cfg, path, true, &theta, &c->rope, err);
    if (rc) return rc;
    json_t *eps = json_object_get(cfg, "rms_norm_eps"), *ad = json_object_get(cfg, "attention_dropout");
    double e = json_is_number(eps) ? json_number_value(eps) : 1e-6;
    if (!(e > 0 && e < 1)) return mg_error_set(err, MG_ERR_INVALID, "%s: rms_norm_eps %g is not in (0, 1)", path, e);
    c->arch = CV_LLAMA;
    c->layers = (int)L, c->hidden = (int)h, c->ffn = (int)f, c->heads = (int)nh, c->groups = (int)nh, c->positions = (int)P;
    c->vocab = V, c->eps = e, c->rope_base = theta, c->bias = c->qkv_bias = false, c->qk_norm = true, c->window = 0;
    c->untied = tie ? json_is_false(tie) : true;
    c->hidden_dropout = 0, c->attention_dropout = json_is_number(ad) ? json_number_value(ad) : 0;
    c->tokenizer_type = V == 256 ? "ByteLevelTokenizer" : "HuggingFaceTokenizer";
    c->head_dim = 0;
    c->mla = (mg_mla_config){true, (int)ql, (int)kvl, (int)qk, (int)rope, (int)vd};
    c->mtp_layers = (int)mtp;
    if (!moe) return MG_OK;
    if (L > MG_MOE_MAX_LAYERS) return mg_error_set(err, MG_ERR_UNSUPPORTED, "%s: more than %d layers", path, MG_MOE_MAX_LAYERS);
    mg_moe_config *o = &c->moe;
    o->num_experts = (int)E, o->topk = (int)k, o->ffn_hidden = (int)fm, o->shared_ffn = (int)(ns * fm);
    o->score = MG_MOE_SIGMOID, o->expert_bias = true;
    if (ng > 1) o->num_groups = (int)ng, o->group_topk = (int)tg;
    json_t *rs = json_object_get(cfg, "routed_scaling_factor");
    double scale = json_is_number(rs) ? json_number_value(rs) : 2.5; /* (DeepseekV3Config's default) */
    o->topk_scaling = scale == 1.0 ? 0.0f : (float)scale;           /* (1: mgraph-run's default, none) */
    o->pattern_len = kd ? (int)L : 0;
    memset(o->layer_pattern, 0, sizeof o->layer_pattern);
    for (int l = (int)kd; kd && l < L; l++) o->layer_pattern[l / 64] |= 1ull << (l % 64);
    return MG_OK;
}

static json_t *write_config(const cv_arch *a, const cv_cfg *c) {
    const mg_mla_config *m = &c->mla;
    const mg_moe_config *o = &c->moe;
    double theta = cv_float_decimal((float)c->rope_base);
    int dense = 0;
    while (dense < c->layers && !is_moe(c, dense)) dense++;
    int fm = o->ffn_hidden ? o->ffn_hidden : c->ffn;
    json_t *cfg = json_pack("{s:[s], s:s, s:I, s:i, s:i, s:i, s:i, s:i, s:s, s:i, s:f, s:b, s:b, s:f, s:s, s:n, s:n}",
                            "architectures", a->hf_class, "model_type", a->model_type, "vocab_size", (json_int_t)c->vocab,
                            "hidden_size", c->hidden, "intermediate_size", c->ffn, "num_hidden_layers", c->layers,
                            "num_attention_heads", c->heads, "num_key_value_heads", c->heads, "hidden_act", "silu",
                            "max_position_embeddings", c->positions, "rms_norm_eps", cv_float_decimal((float)c->eps),
                            "tie_word_embeddings", !c->untied, "attention_bias", false, "attention_dropout",
                            cv_float_decimal((float)c->attention_dropout), "torch_dtype", "float32", "bos_token_id",
                            "eos_token_id");
    if (!cfg) return NULL;
    json_object_set_new(cfg, "q_lora_rank", m->q_lora_rank ? json_integer(m->q_lora_rank) : json_null());
    json_object_set_new(cfg, "kv_lora_rank", json_integer(m->kv_lora_rank));
    json_object_set_new(cfg, "qk_nope_head_dim", json_integer(m->qk_head_dim));
    json_object_set_new(cfg, "qk_rope_head_dim", json_integer(m->qk_pos_emb_head_dim));
    json_object_set_new(cfg, "v_head_dim", json_integer(m->v_head_dim));
    json_object_set_new(cfg, "head_dim", json_integer(m->qk_pos_emb_head_dim)); /* (transformers': the RoPE part's) */
    json_object_set_new(cfg, "rope_interleave", json_true());
    json_object_set_new(cfg, "rope_parameters", cv_write_rope(theta, &c->rope));
    /* a dense model: one placeholder expert and every layer dense */
    json_object_set_new(cfg, "n_routed_experts", json_integer(o->num_experts ? o->num_experts : 1));
    json_object_set_new(cfg, "num_experts_per_tok", json_integer(o->num_experts ? o->topk : 1));
    json_object_set_new(cfg, "moe_intermediate_size", json_integer(fm));
    json_object_set_new(cfg, "n_shared_experts", json_integer(o->shared_ffn / fm));
    json_object_set_new(cfg, "n_group", json_integer(o->num_groups > 1 ? o->num_groups : 1));
    json_object_set_new(cfg, "topk_group", json_integer(o->num_groups > 1 ? o->group_topk : 1));
    json_object_set_new(cfg, "routed_scaling_factor", json_real(o->topk_scaling > 0 ? cv_float_decimal(o->topk_scaling) : 1.0));
    json_object_set_new(cfg, "norm_topk_prob", json_boolean(o->topk > 1));
    json_object_set_new(cfg, "first_k_dense_replace", json_integer(o->num_experts ? dense : c->layers));
    json_object_set_new(cfg, "num_nextn_predict_layers", json_integer(c->mtp_layers));
    return cfg;
}

static int parts(const cv_arch *a, const cv_cfg *c, const cv_tensor *t, cv_part *out, int max) {
    return cv_moe_parts(a, c, t, out, max);
}

const cv_arch cv_deepseek_v3 = {.hf_class = "DeepseekV3ForCausalLM", .model_type = "deepseek_v3",
                                .embedding = "model.embed_tokens.weight", .alloc = alloc, .hf_key = hf_key,
                                .hf_shape = cv_llama_hf_shape, .convert = cv_llama_convert, .read_config = read_config,
                                .write_config = write_config, .parts = parts, .moe_module = "mlp",
                                .expert_names = {"gate_proj", "up_proj", "down_proj"}};

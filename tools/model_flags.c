/* The checkpoint's model flags (tools/model_flags.h). */
#include "model_flags.h"

#include <string.h>

json_t *mg_model_flags_json(const mg_gpt_config *m, int64_t vocab_unpadded, int divisible_by, const char *tokenizer_type) {
    const char *norms[] = {"LayerNorm", "RMSNorm"}, *pos[] = {"learned_absolute", "rope", "none"};
    int groups = m->query_groups > 0 ? m->query_groups : m->heads;
    /* GPT-2 exactly (what mgraph-convert exports), or another of Megatron's GPT variants */
    bool gpt2 = mg_gpt_is_gpt2(m) && m->moe.num_experts == 0;
    json_t *j = json_pack("{s:s, s:i, s:i, s:i, s:i, s:i, s:i, s:I, s:I, s:i, s:s, s:f}", "arch", gpt2 ? "gpt2" : "gpt",
                          "num_layers", m->num_layers, "hidden_size", m->hidden, "ffn_hidden_size", m->ffn_hidden,
                          "num_attention_heads", m->heads, "max_position_embeddings", m->max_position, "seq_length",
                          m->seq_length, "padded_vocab_size", (json_int_t)m->vocab, "vocab_size",
                          (json_int_t)vocab_unpadded, "make_vocab_size_divisible_by", divisible_by,
                          "tokenizer_type", tokenizer_type, "layernorm_epsilon", (double)m->ln_eps);
    json_t *more = json_pack("{s:s, s:s, s:b, s:i, s:b, s:b, s:f, s:f}", "normalization",
                             norms[m->norm == MG_NORM_RMSNORM], "position_embedding_type",
                             pos[m->pos_emb <= MG_POS_NONE ? m->pos_emb : 0], "swiglu", m->swiglu, "num_query_groups",
                             groups, "untie_embeddings_and_output_weights", m->untie_embeddings, "disable_bias_linear",
                             m->disable_bias_linear, "rotary_base", (double)m->rotary_base, "rotary_percent",
                             (double)m->rotary_percent);
    if (j && more) json_object_update(j, more);
    json_decref(more);
    if (!j) return NULL;
    /* the variants' switches (Qwen2's q/k/v biases, Qwen3's per-head q/k norms) */
    json_object_set_new(j, "add_qkv_bias", json_boolean(m->add_qkv_bias && m->disable_bias_linear));
    json_object_set_new(j, "qk_layernorm", json_boolean(m->qk_layernorm));
    json_object_set_new(j, "squared_relu", json_boolean(m->squared_relu));
    json_object_set_new(j, "gelu_exact", json_boolean(m->gelu_exact));
    json_object_set_new(j, "qk_l2_norm", json_boolean(m->qk_l2_norm));
    /* the sliding window in keys (Hugging Face's sliding_window; 0: none) */
    json_object_set_new(j, "window", json_integer(m->window));
    json_object_set_new(j, "window_attn_skip_freq", json_integer(m->window_skip_freq));
    /* the head size (--kv-channels where it is not hidden / heads), RoPE's scaling and
     * pairing, multi-latent attention: absent where they are the plain model's */
    json_object_set_new(j, "kv_channels",
                        json_integer(m->kv_channels && (int64_t)m->kv_channels * m->heads != m->hidden ? m->kv_channels : 0));
    if (m->rope.scaling != MG_ROPE_DEFAULT || m->rope.interleaved) {
        const mg_rope_config *r = &m->rope;
        const char *kinds[] = {"default", "llama3", "yarn"};
        json_t *o = json_pack("{s:s, s:b}", "scaling", kinds[r->scaling], "interleaved", r->interleaved);
        if (o && r->scaling != MG_ROPE_DEFAULT) {
            json_object_set_new(o, "factor", json_real(r->factor));
            json_object_set_new(o, "original_max_position_embeddings", json_integer(r->original_max_pos));
        }
        if (o && r->scaling == MG_ROPE_YARN) {
            json_t *y = json_pack("{s:f, s:f, s:b, s:f, s:f}", "beta_fast", (double)r->beta_fast, "beta_slow",
                                  (double)r->beta_slow, "round_to_int", !r->no_round, "mscale", (double)r->mscale,
                                  "mscale_all_dim", (double)r->mscale_all_dim);
            if (y) json_object_update(o, y);
            json_decref(y);
        }
        if (o) json_object_set_new(j, "rope_scaling", o);
    }
    if (m->mla.enabled)
        json_object_set_new(j, "multi_latent_attention",
                            json_pack("{s:i, s:i, s:i, s:i, s:i}", "q_lora_rank", m->mla.q_lora_rank, "kv_lora_rank",
                                      m->mla.kv_lora_rank, "qk_head_dim", m->mla.qk_head_dim, "qk_pos_emb_head_dim",
                                      m->mla.qk_pos_emb_head_dim, "v_head_dim", m->mla.v_head_dim));
    /* multi-token prediction: its layers are parameters (absent: none) */
    if (m->mtp_num_layers > 0) json_object_set_new(j, "mtp_num_layers", json_integer(m->mtp_num_layers));
    /* MoE: the flags that shape the expert parameters (models/moe.c), and the routing a
     * Hugging Face export needs (top-k, softmax before or after it) */
    json_object_set_new(j, "num_experts", json_integer(m->moe.num_experts));
    if (m->moe.num_experts > 0) {
        const mg_moe_config *mo = &m->moe;
        json_object_set_new(j, "moe_ffn_hidden_size", json_integer(mo->ffn_hidden > 0 ? mo->ffn_hidden : m->ffn_hidden));
        json_object_set_new(j, "moe_layer_freq", json_integer(mo->pattern_len ? 0 : mo->layer_freq));
        if (mo->pattern_len) { /* the list: "0001..." one character per layer */
            char pat[MG_MOE_MAX_LAYERS + 1];
            for (int i = 0; i < mo->pattern_len; i++) pat[i] = mg_moe_is_layer(m, i) ? '1' : '0';
            pat[mo->pattern_len] = '\0';
            json_object_set_new(j, "moe_layers", json_string(pat));
        }
        if (mo->score != MG_MOE_SOFTMAX || mo->num_groups || mo->topk_scaling > 0 || mo->expert_bias)
            json_object_set_new(j, "moe_router",
                                json_pack("{s:s, s:i, s:i, s:f, s:b}", "score_function",
                                          mo->score == MG_MOE_SIGMOID ? "sigmoid" : "softmax", "num_groups",
                                          mo->num_groups, "group_topk", mo->group_topk, "topk_scaling_factor",
                                          (double)mo->topk_scaling, "expert_bias", mo->expert_bias));
        json_object_set_new(j, "moe_shared_expert_intermediate_size", json_integer(mo->shared_ffn));
        json_object_set_new(j, "moe_router_topk", json_integer(mo->topk));
        json_object_set_new(j, "moe_router_pre_softmax", json_boolean(mo->pre_softmax));
    }
    return j;
}

/* An integer field >= lo (absent: *v unchanged). */
static int get_int(json_t *o, const char *k, int lo, int *v, const char *path, mg_error *err) {
    json_t *x = json_object_get(o, k);
    if (!x) return MG_OK;
    if (!json_is_integer(x) || json_integer_value(x) < lo || json_integer_value(x) > 100000000)
        return mg_error_set(err, MG_ERR_IO, "%s: the model flag %s is not an integer >= %d", path, k, lo);
    *v = (int)json_integer_value(x);
    return MG_OK;
}

static int get_num(json_t *o, const char *k, float *v, const char *path, mg_error *err) {
    json_t *x = json_object_get(o, k);
    if (!x) return MG_OK;
    if (!json_is_number(x)) return mg_error_set(err, MG_ERR_IO, "%s: the model flag %s is not a number", path, k);
    *v = (float)json_number_value(x);
    return MG_OK;
}

static int get_bool(json_t *o, const char *k, bool *v, const char *path, mg_error *err) {
    json_t *x = json_object_get(o, k);
    if (!x) return MG_OK;
    if (!json_is_boolean(x)) return mg_error_set(err, MG_ERR_IO, "%s: the model flag %s is not a boolean", path, k);
    *v = json_is_true(x);
    return MG_OK;
}

int mg_model_flags_read_variants(json_t *mm, const char *path, mg_gpt_config *m, mg_error *err) {
    int rc = get_int(mm, "kv_channels", 0, &m->kv_channels, path, err);
    json_t *r = json_object_get(mm, "rope_scaling");
    if (!rc && r) {
        const char *k = json_string_value(json_object_get(r, "scaling"));
        mg_rope_config *o = &m->rope;
        if (!json_is_object(r) || !k || (strcmp(k, "default") && strcmp(k, "llama3") && strcmp(k, "yarn")))
            return mg_error_set(err, MG_ERR_IO, "%s: the model flag rope_scaling is malformed", path);
        o->scaling = !strcmp(k, "llama3") ? MG_ROPE_LLAMA3 : !strcmp(k, "yarn") ? MG_ROPE_YARN : MG_ROPE_DEFAULT;
        bool round = true;
        rc = get_bool(r, "interleaved", &o->interleaved, path, err);
        if (!rc) rc = get_num(r, "factor", &o->factor, path, err);
        if (!rc) rc = get_int(r, "original_max_position_embeddings", 1, &o->original_max_pos, path, err);
        if (!rc) rc = get_num(r, "beta_fast", &o->beta_fast, path, err);
        if (!rc) rc = get_num(r, "beta_slow", &o->beta_slow, path, err);
        if (!rc) rc = get_bool(r, "round_to_int", &round, path, err);
        if (!rc) rc = get_num(r, "mscale", &o->mscale, path, err);
        if (!rc) rc = get_num(r, "mscale_all_dim", &o->mscale_all_dim, path, err);
        o->no_round = !round;
        if (!rc && o->scaling == MG_ROPE_LLAMA3) o->low_freq_factor = 1, o->high_freq_factor = 4; /* (Megatron's) */
    }
    json_t *a = json_object_get(mm, "multi_latent_attention");
    if (!rc && a) {
        mg_mla_config *l = &m->mla;
        l->enabled = true;
        if (!json_is_object(a)) return mg_error_set(err, MG_ERR_IO, "%s: the model flag multi_latent_attention is malformed", path);
        rc = get_int(a, "q_lora_rank", 0, &l->q_lora_rank, path, err);
        if (!rc) rc = get_int(a, "kv_lora_rank", 1, &l->kv_lora_rank, path, err);
        if (!rc) rc = get_int(a, "qk_head_dim", 1, &l->qk_head_dim, path, err);
        if (!rc) rc = get_int(a, "qk_pos_emb_head_dim", 2, &l->qk_pos_emb_head_dim, path, err);
        if (!rc) rc = get_int(a, "v_head_dim", 1, &l->v_head_dim, path, err);
    }
    if (!rc) rc = get_int(mm, "mtp_num_layers", 0, &m->mtp_num_layers, path, err);
    mg_moe_config *o = &m->moe;
    if (!rc) rc = get_int(mm, "num_experts", 0, &o->num_experts, path, err);
    if (rc || o->num_experts == 0) return rc;
    rc = get_int(mm, "moe_ffn_hidden_size", 1, &o->ffn_hidden, path, err);
    if (!rc) rc = get_int(mm, "moe_layer_freq", 0, &o->layer_freq, path, err);
    if (!rc) rc = get_int(mm, "moe_shared_expert_intermediate_size", 0, &o->shared_ffn, path, err);
    if (!rc) rc = get_int(mm, "moe_router_topk", 1, &o->topk, path, err);
    if (!rc) rc = get_bool(mm, "moe_router_pre_softmax", &o->pre_softmax, path, err);
    json_t *pat = json_object_get(mm, "moe_layers");
    if (!rc && pat) {
        const char *p = json_string_value(pat);
        size_t n = p ? strlen(p) : 0;
        if (!p || n == 0 || n > MG_MOE_MAX_LAYERS || strspn(p, "01") != n)
            return mg_error_set(err, MG_ERR_IO, "%s: the model flag moe_layers is not a string of 0s and 1s", path);
        o->pattern_len = (int)n;
        memset(o->layer_pattern, 0, sizeof o->layer_pattern);
        for (size_t i = 0; i < n; i++)
            if (p[i] == '1') o->layer_pattern[i / 64] |= 1ull << (i % 64);
    }
    json_t *ro = json_object_get(mm, "moe_router");
    if (!rc && ro) {
        const char *sf = json_string_value(json_object_get(ro, "score_function"));
        if (!json_is_object(ro) || !sf || (strcmp(sf, "softmax") && strcmp(sf, "sigmoid")))
            return mg_error_set(err, MG_ERR_IO, "%s: the model flag moe_router is malformed", path);
        o->score = !strcmp(sf, "sigmoid") ? MG_MOE_SIGMOID : MG_MOE_SOFTMAX;
        rc = get_int(ro, "num_groups", 0, &o->num_groups, path, err);
        if (!rc) rc = get_int(ro, "group_topk", 0, &o->group_topk, path, err);
        if (!rc) rc = get_num(ro, "topk_scaling_factor", &o->topk_scaling, path, err);
        if (!rc) rc = get_bool(ro, "expert_bias", &o->expert_bias, path, err);
    }
    return rc;
}

/* Multi-latent attention (Megatron-Core's MLASelfAttention, DeepSeek-V2/V3; Hugging Face's
 * DeepseekV3Attention names), for one layer's normalised input x [s, b, h]:
 *
 *   q       = q_b(norm(q_a(x)))  or  q_proj(x)            [s, b, nh, qk + rope]
 *   kv, kpe = split(kv_a(x), [kv_lora, rope])              the latent and the shared key's RoPE part
 *   k_nope, v = split(kv_b(norm(kv)), per head [qk, v])    [s, b, nh, qk], [s, b, nh, v]
 *   q = [q_nope, rope(q_pe)],  k = [k_nope, rope(kpe) for every head]
 *   y = o_proj(attention(q, k, v; scale mscale² / sqrt(qk + rope)))
 *
 * The latent norms are the model's norm with --qk-layernorm (Megatron's q_layernorm /
 * kv_layernorm; identities without it). RoPE pairs adjacent channels (the interleaved
 * pairing: the same scores as Megatron's and Hugging Face's de-interleaving, which lays
 * the rotated pairs of q and k out in one other order) with the model's frequencies,
 * YaRN's by default (mg_gpt_rope_attrs). The values' head size may differ from the
 * queries' (the attention op takes both).
 *
 * Under tensor parallelism the down projections and norms are replicated and the up
 * projections column-parallel (whole heads), o_proj row-parallel, as Megatron lays them;
 * the key's RoPE part is computed once per token and broadcast to the local heads. */
#include <stdio.h>

#include "models/model_internal.h"

void mg_mla_layer_params(mg_graph *g, const mg_gpt_config *c, mg_gpt_layer *l, float std, float out_std) {
    const mg_mla_config *m = &c->mla;
    int64_t h = c->hidden, nh = c->heads, qd = m->qk_head_dim + m->qk_pos_emb_head_dim;
    mg_tensor *none = NULL;
    if (m->q_lora_rank > 0) {
        gpt_linear_params(g, "self_attn.q_a_proj", m->q_lora_rank, h, std, false, MG_LAYOUT_REPLICATED, &l->q_a_w, &none);
        if (c->qk_layernorm) gpt_norm_params(g, c, "self_attn.q_a_layernorm", m->q_lora_rank, &l->q_a_norm_w, &l->q_a_norm_b);
        gpt_linear_params(g, "self_attn.q_b_proj", nh * qd, m->q_lora_rank, std, false, MG_LAYOUT_COLUMN, &l->q_b_w, &none);
    } else {
        gpt_linear_params(g, "self_attn.q_proj", nh * qd, h, std, false, MG_LAYOUT_COLUMN, &l->q_w, &none);
    }
    gpt_linear_params(g, "self_attn.kv_a_proj_with_mqa", m->kv_lora_rank + m->qk_pos_emb_head_dim, h, std, false,
                      MG_LAYOUT_REPLICATED, &l->kv_a_w, &none);
    if (c->qk_layernorm) gpt_norm_params(g, c, "self_attn.kv_a_layernorm", m->kv_lora_rank, &l->kv_a_norm_w, &l->kv_a_norm_b);
    gpt_linear_params(g, "self_attn.kv_b_proj", nh * (m->qk_head_dim + m->v_head_dim), m->kv_lora_rank, std, false,
                      MG_LAYOUT_COLUMN, &l->kv_b_w, &none);
    /* the latent norms are decayed only with --apply-wd-to-qk-layernorm, as --qk-layernorm's */
    mg_tensor *norms[4] = {l->q_a_norm_w, l->q_a_norm_b, l->kv_a_norm_w, l->kv_a_norm_b};
    for (int i = 0; i < 4; i++)
        if (norms[i]) norms[i]->no_weight_decay = !c->qk_layernorm_wd;
    gpt_linear_params(g, "self_attn.o_proj", h, nh * m->v_head_dim, out_std, !c->disable_bias_linear, MG_LAYOUT_ROW,
                      &l->proj_w, &l->proj_b);
}

/* q [s, b, nh, qk + rope], k [s, b, nh, qk + rope] and v [s, b, nh, v] of layer l for x
 * [s, b, h], as attention reads them (and a key/value cache keeps them: the expanded
 * keys, not the latent, models/gpt_decode.c). In the caller's attention scope. */
void mg_mla_qkv(mg_graph *g, const mg_gpt *md, const mg_gpt_layer *l, mg_tensor *x, mg_tensor *positions,
                mg_tensor **qo, mg_tensor **ko, mg_tensor **vo) {
    const mg_gpt_config *c = &md->cfg;
    const mg_mla_config *m = &c->mla;
    int64_t s = x->shape[0], b = x->shape[1], nh = c->heads, qk = m->qk_head_dim, rope = m->qk_pos_emb_head_dim;
    int64_t vd = m->v_head_dim;
    mg_tensor *q;
    if (l->q_a_w) {
        mg_tensor *ql = mg_linear(g, x, l->q_a_w, NULL); /* [s, b, q_lora] */
        if (l->q_a_norm_w) ql = gpt_norm(g, c, ql, l->q_a_norm_w, l->q_a_norm_b);
        q = mg_linear(g, ql, l->q_b_w, NULL);
    } else {
        q = mg_linear(g, x, l->q_w, NULL);
    }
    q = mg_reshape(g, q, 4, (int64_t[]){s, b, nh, qk + rope});
    mg_tensor *kv_all = mg_linear(g, x, l->kv_a_w, NULL), *kv_parts[2] = {0}; /* [s, b, kv_lora + rope] */
    mg_split(g, kv_all, 2, 2, (int64_t[]){m->kv_lora_rank, rope}, kv_parts);
    mg_tensor *kv = kv_parts[0];
    if (l->kv_a_norm_w) kv = gpt_norm(g, c, kv, l->kv_a_norm_w, l->kv_a_norm_b);
    kv = mg_reshape(g, mg_linear(g, kv, l->kv_b_w, NULL), 4, (int64_t[]){s, b, nh, qk + vd});
    mg_tensor *q_parts[2] = {0}, *k_parts[2] = {0};
    mg_split(g, q, 3, 2, (int64_t[]){qk, rope}, q_parts);
    mg_split(g, kv, 3, 2, (int64_t[]){qk, vd}, k_parts); /* k_nope, v */
    mg_attr_rope ro = mg_gpt_rope_attrs(c);
    q_parts[1] = mg_rope_ex(g, q_parts[1], positions, &ro);
    mg_tensor *kpe = mg_reshape(g, kv_parts[1], 4, (int64_t[]){s, b, 1, rope});
    kpe = mg_rope_ex(g, kpe, positions, &ro); /* once per token, shared by the heads */
    kpe = mg_expand(g, kpe, 4, (int64_t[]){s, b, nh, rope});
    *qo = mg_concat(g, 2, q_parts, 3);
    *ko = mg_concat(g, 2, (mg_tensor *[]){k_parts[0], kpe}, 3);
    *vo = k_parts[1];
}

mg_tensor *mg_mla_block(mg_graph *g, const mg_gpt *md, const mg_gpt_layer *l, mg_tensor *x, mg_tensor *positions,
                        mg_tensor *doc_start, int64_t window, bool training) {
    const mg_gpt_config *c = &md->cfg;
    int64_t s = x->shape[0], b = x->shape[1], nh = c->heads, vd = c->mla.v_head_dim;
    mg_scope_push(g, "self_attn");
    mg_tensor *qq = NULL, *kk = NULL, *v = NULL;
    mg_mla_qkv(g, md, l, x, positions, &qq, &kk, &v);
    float p = training ? c->attention_dropout : 0.0f;
    mg_tensor *y = mg_attention_scaled(g, qq, kk, v, doc_start, window, p, mg_gpt_softmax_scale(c));
    y = mg_reshape(g, y, 3, (int64_t[]){s, b, nh * vd});
    y = mg_linear(g, y, l->proj_w, l->proj_b);
    y = mg_dropout(g, y, training ? c->hidden_dropout : 0.0f);
    mg_scope_pop(g);
    return y;
}

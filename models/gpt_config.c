/* GPT configuration: defaults, checks, parameter and FLOP counts. */
#include <math.h>

#include "mgraph/model.h"
#include "mgraph/ops.h"

mg_gpt_config mg_gpt_defaults(void) {
    mg_gpt_config c = {0};
    c.num_layers = 4;
    c.hidden = 256;
    c.heads = 4;
    c.ffn_hidden = 0; /* 4 * hidden */
    c.seq_length = 128;
    c.max_position = 0; /* = seq_length */
    c.vocab = 256;
    c.init_std = 0.02f;
    c.hidden_dropout = 0.1f;
    c.attention_dropout = 0.1f;
    c.ln_eps = 1e-5f;
    c.rotary_base = 10000.0f;
    c.rotary_percent = 1.0f;
    c.moe.topk = 2;
    c.moe.layer_freq = 1;
    c.moe.bias_update_rate = 1e-3f;
    c.mtp_loss_scaling_factor = 0.1f;
    /* Megatron's RoPE scaling defaults (used when a scaling is chosen) */
    c.rope.factor = 1.0f;
    c.rope.low_freq_factor = 1.0f;
    c.rope.high_freq_factor = 4.0f;
    c.rope.beta_fast = 32.0f;
    c.rope.beta_slow = 1.0f;
    c.rope.mscale = 1.0f;
    /* MLA's argument defaults */
    c.mla.kv_lora_rank = 32;
    c.mla.qk_head_dim = 128;
    c.mla.qk_pos_emb_head_dim = 64;
    c.mla.v_head_dim = 128;
    return c;
}

/* RoPE scaling and multi-latent attention, as Megatron's TransformerConfig asserts them. */
static int mg_gpt_check_rope_mla(const mg_gpt_config *c, mg_error *err) {
    const mg_rope_config *r = &c->rope;
    if (r->scaling != MG_ROPE_DEFAULT && c->pos_emb != MG_POS_ROPE)
        return mg_error_set(err, MG_ERR_INVALID, "RoPE scaling needs rotary position embeddings");
    if (r->scaling == MG_ROPE_LLAMA3 &&
        (!(r->factor > 0) || r->original_max_pos < 1 || !(r->low_freq_factor > 0) ||
         !(r->high_freq_factor > r->low_freq_factor)))
        return mg_error_set(err, MG_ERR_INVALID, "--rope-scaling-factor must be > 0 (got %g)", r->factor);
    if (r->scaling == MG_ROPE_YARN) {
        if (!(r->factor > 0)) return mg_error_set(err, MG_ERR_INVALID, "--rotary-scaling-factor must be > 0 (got %g)", r->factor);
        if (r->original_max_pos < 1)
            return mg_error_set(err, MG_ERR_INVALID, "--yarn-original-max-position-embeddings must be >= 1 (got %d)",
                                r->original_max_pos);
        if (!(r->beta_fast > 0) || !(r->beta_slow > 0))
            return mg_error_set(err, MG_ERR_INVALID, "--yarn-beta-fast and --yarn-beta-slow must be > 0");
        if (!(c->rotary_base > 1)) return mg_error_set(err, MG_ERR_INVALID, "YaRN needs --rotary-base > 1");
        if (!(r->mscale >= 0) || !(r->mscale_all_dim >= 0))
            return mg_error_set(err, MG_ERR_INVALID, "--mscale and --mscale-all-dim must be >= 0");
        if (r->interleaved) /* Megatron's YarnRotaryEmbedding asserts it */
            return mg_error_set(err, MG_ERR_INVALID, "YaRN RoPE does not support --rotary-interleaved");
    }
    const mg_mla_config *m = &c->mla;
    if (!m->enabled) return MG_OK;
    if (m->q_lora_rank < 0 || m->kv_lora_rank < 1 || m->qk_head_dim < 1 || m->v_head_dim < 1)
        return mg_error_set(err, MG_ERR_INVALID, "--q-lora-rank must be >= 0 and --kv-lora-rank, --qk-head-dim, "
                                                 "--v-head-dim >= 1");
    if (m->qk_pos_emb_head_dim < 2 || m->qk_pos_emb_head_dim % 2)
        return mg_error_set(err, MG_ERR_INVALID, "--qk-pos-emb-head-dim must be even and >= 2 (got %d)",
                            m->qk_pos_emb_head_dim);
    if (c->query_groups > 0 && c->query_groups != c->heads)
        return mg_error_set(err, MG_ERR_INVALID, "--group-query-attention and --multi-latent-attention exclude each other");
    if (c->pos_emb != MG_POS_ROPE)
        return mg_error_set(err, MG_ERR_INVALID, "--multi-latent-attention rotates its positional part: give "
                                                 "--position-embedding-type rope");
    if (c->rotary_percent != 1.0f)
        return mg_error_set(err, MG_ERR_INVALID, "--multi-latent-attention rotates the whole --qk-pos-emb-head-dim "
                                                 "(--rotary-percent must be 1.0)");
    if (r->interleaved)
        return mg_error_set(err, MG_ERR_INVALID, "--rotary-interleaved does not work with --multi-latent-attention");
    if (c->qk_l2_norm) return mg_error_set(err, MG_ERR_INVALID, "--qk-l2-norm is not supported with --multi-latent-attention");
    if (c->add_qkv_bias)
        return mg_error_set(err, MG_ERR_INVALID, "--add-qkv-bias: multi-latent attention has no q/k/v biases");
    return MG_OK;
}

int mg_gpt_check(const mg_gpt_config *c, mg_error *err) {
    if (c->num_layers < 1) return mg_error_set(err, MG_ERR_INVALID, "--num-layers must be >= 1 (got %d)", c->num_layers);
    if (c->hidden < 1) return mg_error_set(err, MG_ERR_INVALID, "--hidden-size must be >= 1 (got %d)", c->hidden);
    if (c->heads < 1) return mg_error_set(err, MG_ERR_INVALID, "--num-attention-heads must be >= 1 (got %d)", c->heads);
    if (c->kv_channels < 0) return mg_error_set(err, MG_ERR_INVALID, "--kv-channels must be >= 1 (got %d)", c->kv_channels);
    if (c->hidden % c->heads && !c->kv_channels && !c->mla.enabled) /* (Megatron: only where kv-channels is derived) */
        return mg_error_set(err, MG_ERR_INVALID, "--num-attention-heads (%d) must divide --hidden-size (%d)", c->heads,
                            c->hidden);
    if (c->ffn_hidden < 1) return mg_error_set(err, MG_ERR_INVALID, "--ffn-hidden-size must be >= 1 (got %d)", c->ffn_hidden);
    if (c->seq_length < 1) return mg_error_set(err, MG_ERR_INVALID, "--seq-length must be >= 1 (got %d)", c->seq_length);
    if (c->max_position < c->seq_length)
        return mg_error_set(err, MG_ERR_INVALID, "--seq-length (%d) exceeds --max-position-embeddings (%d)",
                            c->seq_length, c->max_position);
    if (c->query_groups < 0)
        return mg_error_set(err, MG_ERR_INVALID, "--num-query-groups must be >= 1 (got %d)", c->query_groups);
    int g = mg_gpt_kv_groups(c), hd = mg_gpt_head_dim(c);
    if (g < 1 || c->heads % g)
        return mg_error_set(err, MG_ERR_INVALID, "--num-query-groups (%d) must divide --num-attention-heads (%d)", g,
                            c->heads);
    if (c->norm != MG_NORM_LAYERNORM && c->norm != MG_NORM_RMSNORM)
        return mg_error_set(err, MG_ERR_INVALID, "unknown normalization %d", (int)c->norm);
    if (c->pos_emb != MG_POS_LEARNED && c->pos_emb != MG_POS_ROPE && c->pos_emb != MG_POS_NONE)
        return mg_error_set(err, MG_ERR_INVALID, "unknown position embedding type %d", (int)c->pos_emb);
    if (!(c->ln_eps > 0)) return mg_error_set(err, MG_ERR_INVALID, "--norm-epsilon must be > 0 (got %g)", c->ln_eps);
    int rc = mg_gpt_check_rope_mla(c, err);
    if (rc) return rc;
    if (c->pos_emb == MG_POS_ROPE) {
        if (!(c->rotary_base > 0))
            return mg_error_set(err, MG_ERR_INVALID, "--rotary-base must be > 0 (got %g)", c->rotary_base);
        if (!(c->rotary_percent > 0 && c->rotary_percent <= 1))
            return mg_error_set(err, MG_ERR_INVALID, "--rotary-percent must be in (0, 1] (got %g)", c->rotary_percent);
        int rd = mg_gpt_rotary_dim(c);
        if (rd < 2 || rd % 2)
            return mg_error_set(err, MG_ERR_INVALID,
                                "rotary dimension int(head dim %d x --rotary-percent %g) = %d must be even and >= 2", hd,
                                c->rotary_percent, rd);
    }
    if (c->window < 0) return mg_error_set(err, MG_ERR_INVALID, "sliding window of %d keys: must be >= 0", c->window);
    if (c->window_skip_freq < 0 || (c->window_skip_freq > 0 && c->window == 0))
        return mg_error_set(err, MG_ERR_INVALID, "--window-attn-skip-freq %d: needs --window-size and must be >= 1",
                            c->window_skip_freq);
    if (c->qk_layernorm && c->qk_l2_norm)
        return mg_error_set(err, MG_ERR_INVALID, "--qk-layernorm and --qk-l2-norm are two norms of q and k: give one");
    if (c->swiglu && c->squared_relu)
        return mg_error_set(err, MG_ERR_INVALID, "--swiglu and --squared-relu are two MLP activations: give one");
    if (c->vocab < 1) return mg_error_set(err, MG_ERR_INVALID, "vocabulary size must be >= 1");
    if (!(c->init_std >= 0)) return mg_error_set(err, MG_ERR_INVALID, "--init-method-std must be >= 0");
    if (!(c->hidden_dropout >= 0 && c->hidden_dropout < 1))
        return mg_error_set(err, MG_ERR_INVALID, "--hidden-dropout must be in [0, 1) (got %g)", c->hidden_dropout);
    if (!(c->attention_dropout >= 0 && c->attention_dropout < 1))
        return mg_error_set(err, MG_ERR_INVALID, "--attention-dropout must be in [0, 1) (got %g)", c->attention_dropout);
    if (c->mtp_num_layers < 0 || c->mtp_num_layers > MG_MTP_MAX_LAYERS)
        return mg_error_set(err, MG_ERR_INVALID, "--mtp-num-layers must be in [0, %d] (got %d)", MG_MTP_MAX_LAYERS,
                            c->mtp_num_layers);
    if (!(c->mtp_loss_scaling_factor >= 0) || !isfinite(c->mtp_loss_scaling_factor))
        return mg_error_set(err, MG_ERR_INVALID, "--mtp-loss-scaling-factor must be >= 0 (got %g)",
                            c->mtp_loss_scaling_factor);
    return mg_moe_check(c, err);
}

int mg_gpt_kv_groups(const mg_gpt_config *c) { return c->query_groups > 0 ? c->query_groups : c->heads; }

int mg_gpt_head_dim(const mg_gpt_config *c) {
    if (c->mla.enabled) return c->mla.qk_head_dim + c->mla.qk_pos_emb_head_dim;
    if (c->kv_channels > 0) return c->kv_channels;
    return c->heads > 0 ? c->hidden / c->heads : 0;
}

int mg_gpt_value_head_dim(const mg_gpt_config *c) { return c->mla.enabled ? c->mla.v_head_dim : mg_gpt_head_dim(c); }

mg_attr_rope mg_gpt_rope_attrs(const mg_gpt_config *c) {
    const mg_rope_config *r = &c->rope;
    mg_attr_rope o = {.theta = c->rotary_base, .interleaved = r->interleaved || c->mla.enabled, .scaling = r->scaling};
    if (r->scaling == MG_ROPE_LLAMA3) {
        o.factor = r->factor;
        o.original_max_pos = r->original_max_pos;
        o.low_freq_factor = r->low_freq_factor;
        o.high_freq_factor = r->high_freq_factor;
    } else if (r->scaling == MG_ROPE_YARN) { /* Megatron's _yarn_get_concentration_factor */
        o.factor = r->factor;
        o.original_max_pos = r->original_max_pos;
        o.beta_fast = r->beta_fast;
        o.beta_slow = r->beta_slow;
        o.no_round = r->no_round;
        o.mscale = (float)(mg_yarn_mscale(r->factor, r->mscale) / mg_yarn_mscale(r->factor, r->mscale_all_dim));
    }
    return o;
}

float mg_gpt_softmax_scale(const mg_gpt_config *c) {
    double s = 1.0 / sqrt((double)mg_gpt_head_dim(c));
    if (c->mla.enabled && c->rope.scaling == MG_ROPE_YARN) { /* MLA: mscale(factor, mscale_all_dim)^2 / sqrt(d) */
        double m = mg_yarn_mscale(c->rope.factor, c->rope.mscale_all_dim);
        s *= m * m;
    }
    return (float)s;
}

int mg_gpt_rotary_dim(const mg_gpt_config *c) {
    if (c->mla.enabled) return c->mla.qk_pos_emb_head_dim; /* (its own rotated part, whole) */
    int hd = mg_gpt_head_dim(c);
    /* Megatron: int(kv_channels * rotary_percent); the float product of a percent such
     * as 0.5 and an integer is exact, so no rounding surprise */
    return (int)((float)hd * c->rotary_percent);
}

int mg_gpt_layer_window(const mg_gpt_config *c, int layer) {
    if (c->window_skip_freq > 0 && (layer + 1) % c->window_skip_freq == 0) return 0;
    return c->window;
}

bool mg_gpt_is_gpt2(const mg_gpt_config *c) {
    return c->norm == MG_NORM_LAYERNORM && c->pos_emb == MG_POS_LEARNED && !c->swiglu &&
           mg_gpt_kv_groups(c) == c->heads && !c->untie_embeddings && !c->disable_bias_linear && !c->qk_layernorm &&
           !c->squared_relu && c->window == 0 && !c->qk_l2_norm && !c->mla.enabled &&
           (c->kv_channels == 0 || (int64_t)c->kv_channels * c->heads == c->hidden);
}

/* Weights of one layer's attention (projections, q/k or latent norms): the matrices' in
 * *mat (their FLOPs per token are 2 x that), the vectors' added to the return value. */
static int64_t attention_params(const mg_gpt_config *c, int64_t *mat) {
    int64_t h = c->hidden, nh = c->heads, hd = mg_gpt_head_dim(c), hv = mg_gpt_value_head_dim(c);
    int64_t bias = c->disable_bias_linear ? 0 : 1;
    int64_t nrm = c->norm == MG_NORM_RMSNORM ? 1 : 2; /* a norm's vectors per feature */
    int64_t vec = bias * h;                            /* the output projection's bias */
    if (c->mla.enabled) {
        const mg_mla_config *m = &c->mla;
        int64_t ql = m->q_lora_rank, kvl = m->kv_lora_rank, rope = m->qk_pos_emb_head_dim;
        *mat = (ql ? ql * h + nh * hd * ql : nh * hd * h) + (kvl + rope) * h + nh * (m->qk_head_dim + hv) * kvl +
               h * nh * hv;
        if (c->qk_layernorm) vec += nrm * (ql + kvl);
        return vec;
    }
    int64_t kv = (int64_t)mg_gpt_kv_groups(c) * hd, qkv_bias = bias || c->add_qkv_bias;
    *mat = (nh * hd + 2 * kv) * h + h * nh * hd;
    vec += qkv_bias * (nh * hd + 2 * kv);
    if (c->qk_layernorm) vec += 2 * nrm * hd;
    return vec;
}

int64_t mg_gpt_num_params(const mg_gpt_config *c) {
    int64_t h = c->hidden, f = c->ffn_hidden, mat = 0;
    int64_t norm = c->norm == MG_NORM_RMSNORM ? h : 2 * h;
    int64_t bias = c->disable_bias_linear ? 0 : 1;
    int64_t mlp_in = c->swiglu ? 2 : 1;
    int64_t attn = attention_params(c, &mat) + mat;
    int64_t layer = 2 * norm + attn + mlp_in * f * (h + bias) + h * (f + bias);
    int64_t pos = c->pos_emb == MG_POS_LEARNED ? (int64_t)c->max_position * h : 0;
    int64_t out = c->untie_embeddings ? c->vocab * h : 0;
    int64_t n = c->vocab * h + out + pos + c->num_layers * layer + norm;
    /* MoE layers: router [E, h], E experts (fc1 [F or 2F, h], fc2 [h, F], no biases) and the
     * shared experts' MLP in place of the MLP (the expert bias is a buffer, as Megatron's) */
    int64_t E = c->moe.num_experts, fm = c->moe.ffn_hidden > 0 ? c->moe.ffn_hidden : f, fs = c->moe.shared_ffn;
    int64_t shared = fs > 0 ? mlp_in * fs * (h + bias) + h * (fs + bias) : 0;
    int64_t moe_extra = E * h + E * (mlp_in + 1) * fm * h + shared - (mlp_in * f * (h + bias) + h * (f + bias));
    for (int i = 0; i < c->num_layers; i++)
        if (mg_moe_is_layer(c, i)) n += moe_extra;
    /* multi-token prediction: enorm, hnorm, eh_proj [h, 2h], a layer of the last one's kind, its norm */
    if (c->mtp_num_layers > 0)
        n += c->mtp_num_layers * (3 * norm + 2 * h * h + layer + (mg_moe_is_layer(c, c->num_layers - 1) ? moe_extra : 0));
    return n;
}

double mg_gpt_flops(const mg_gpt_config *c, int64_t samples) {
    /* Forward matmul FLOPs per token and layer: 2 x the attention's projection weights
     * (Q 2h², K and V 4·h·kv for kv = groups × head dim, projection 2h² in standard
     * attention; the latents' down and up projections in MLA), MLP 4·h·ffn (6·h·ffn with
     * SwiGLU's gate), attention scores and weighted sum 2·s·nh·(hd + hv) halved by the
     * causal mask (4·s·h halved for hd = hv = h/nh); logits 2hV. Training = 3 × forward
     * (backward is twice the forward). */
    double h = c->hidden, s = c->seq_length, L = c->num_layers, f = c->ffn_hidden, V = (double)c->vocab;
    double mlp = c->swiglu ? 6 : 4, nh = c->heads, hd = mg_gpt_head_dim(c), hv = mg_gpt_value_head_dim(c);
    int64_t mat = 0;
    attention_params(c, &mat);
    double per_token = L * (2 * (double)mat + mlp * h * f + s * nh * (hd + hv)) + 2 * h * V;
    /* MoE layers: router 2hE, and each token through k experts and the shared experts in
     * place of the MLP */
    double fm = c->moe.ffn_hidden > 0 ? c->moe.ffn_hidden : f;
    double moe_extra = 2 * h * c->moe.num_experts + (c->moe.topk * fm + c->moe.shared_ffn) * mlp * h - mlp * h * f;
    for (int i = 0; i < c->num_layers; i++)
        if (mg_moe_is_layer(c, i)) per_token += moe_extra;
    /* multi-token prediction (Megatron's count too): per depth eh_proj 4h², a layer of the
     * last one's kind, its logits 2hV */
    if (c->mtp_num_layers > 0)
        per_token += c->mtp_num_layers * (4 * h * h + 2 * (double)mat + mlp * h * f + s * nh * (hd + hv) + 2 * h * V +
                                          (mg_moe_is_layer(c, c->num_layers - 1) ? moe_extra : 0));
    return 3.0 * per_token * s * (double)samples;
}

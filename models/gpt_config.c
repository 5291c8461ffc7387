/* GPT configuration: defaults, checks, parameter and FLOP counts. */
#include "mgraph/model.h"

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
    return c;
}

int mg_gpt_check(const mg_gpt_config *c, mg_error *err) {
    if (c->num_layers < 1) return mg_error_set(err, MG_ERR_INVALID, "--num-layers must be >= 1 (got %d)", c->num_layers);
    if (c->hidden < 1) return mg_error_set(err, MG_ERR_INVALID, "--hidden-size must be >= 1 (got %d)", c->hidden);
    if (c->heads < 1) return mg_error_set(err, MG_ERR_INVALID, "--num-attention-heads must be >= 1 (got %d)", c->heads);
    if (c->hidden % c->heads)
        return mg_error_set(err, MG_ERR_INVALID, "--num-attention-heads (%d) must divide --hidden-size (%d)", c->heads,
                            c->hidden);
    if (c->ffn_hidden < 1) return mg_error_set(err, MG_ERR_INVALID, "--ffn-hidden-size must be >= 1 (got %d)", c->ffn_hidden);
    if (c->seq_length < 1) return mg_error_set(err, MG_ERR_INVALID, "--seq-length must be >= 1 (got %d)", c->seq_length);
    if (c->max_position < c->seq_length)
        return mg_error_set(err, MG_ERR_INVALID, "--seq-length (%d) exceeds --max-position-embeddings (%d)",
                            c->seq_length, c->max_position);
    if (c->query_groups < 0)
        return mg_error_set(err, MG_ERR_INVALID, "--num-query-groups must be >= 1 (got %d)", c->query_groups);
    int g = mg_gpt_kv_groups(c), hd = c->hidden / c->heads;
    if (g < 1 || c->heads % g)
        return mg_error_set(err, MG_ERR_INVALID, "--num-query-groups (%d) must divide --num-attention-heads (%d)", g,
                            c->heads);
    if (c->norm != MG_NORM_LAYERNORM && c->norm != MG_NORM_RMSNORM)
        return mg_error_set(err, MG_ERR_INVALID, "unknown normalization %d", (int)c->norm);
    if (c->pos_emb != MG_POS_LEARNED && c->pos_emb != MG_POS_ROPE && c->pos_emb != MG_POS_NONE)
        return mg_error_set(err, MG_ERR_INVALID, "unknown position embedding type %d", (int)c->pos_emb);
    if (!(c->ln_eps > 0)) return mg_error_set(err, MG_ERR_INVALID, "--norm-epsilon must be > 0 (got %g)", c->ln_eps);
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
    return mg_moe_check(c, err);
}

int mg_gpt_kv_groups(const mg_gpt_config *c) { return c->query_groups > 0 ? c->query_groups : c->heads; }

int mg_gpt_rotary_dim(const mg_gpt_config *c) {
    int hd = c->heads > 0 ? c->hidden / c->heads : 0;
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
           !c->squared_relu && c->window == 0 && !c->qk_l2_norm;
}

int64_t mg_gpt_num_params(const mg_gpt_config *c) {
    int64_t h = c->hidden, f = c->ffn_hidden, kv = (int64_t)mg_gpt_kv_groups(c) * (h / c->heads);
    int64_t norm = c->norm == MG_NORM_RMSNORM ? h : 2 * h;
    int64_t bias = c->disable_bias_linear ? 0 : 1, qkv_bias = bias || c->add_qkv_bias;
    int64_t mlp_in = c->swiglu ? 2 : 1, hd = h / c->heads;
    int64_t qk_norm = c->qk_layernorm ? 2 * (c->norm == MG_NORM_RMSNORM ? hd : 2 * hd) : 0;
    int64_t layer = 2 * norm + qk_norm + (h + 2 * kv) * (h + qkv_bias) + h * (h + bias) + mlp_in * f * (h + bias) +
                    h * (f + bias);
    int64_t pos = c->pos_emb == MG_POS_LEARNED ? (int64_t)c->max_position * h : 0;
    int64_t out = c->untie_embeddings ? c->vocab * h : 0;
    int64_t n = c->vocab * h + out + pos + c->num_layers * layer + norm;
    /* MoE layers: router [E, h] and E experts (fc1 [F or 2F, h], fc2 [h, F], no biases) in place of the MLP */
    int64_t E = c->moe.num_experts, fm = c->moe.ffn_hidden > 0 ? c->moe.ffn_hidden : f;
    for (int i = 0; i < c->num_layers; i++)
        if (mg_moe_is_layer(c, i)) n += E * h + E * (mlp_in + 1) * fm * h - (mlp_in * f * (h + bias) + h * (f + bias));
    return n;
}

double mg_gpt_flops(const mg_gpt_config *c, int64_t samples) {
    /* Forward matmul FLOPs per token and layer: Q 2h², K and V 4·h·kv (kv = groups ×
     * head dim; 4h² without GQA), projection 2h², MLP 4·h·ffn (6·h·ffn with SwiGLU's
     * gate), attention scores and weighted sum 4·s·h halved by the causal mask; logits
     * 2hV. Training = 3 × forward (backward is twice the forward). */
    double h = c->hidden, s = c->seq_length, L = c->num_layers, f = c->ffn_hidden, V = (double)c->vocab;
    double kv = (double)mg_gpt_kv_groups(c) * (c->hidden / c->heads), mlp = c->swiglu ? 6 : 4;
    double per_token = L * (4 * h * h + 4 * h * kv + mlp * h * f + 2 * s * h) + 2 * h * V;
    /* MoE layers: router 2hE, and each token through k experts in place of the MLP */
    double fm = c->moe.ffn_hidden > 0 ? c->moe.ffn_hidden : f;
    for (int i = 0; i < c->num_layers; i++)
        if (mg_moe_is_layer(c, i)) per_token += 2 * h * c->moe.num_experts + c->moe.topk * mlp * h * fm - mlp * h * f;
    return 3.0 * per_token * s * (double)samples;
}

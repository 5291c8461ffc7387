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
    if (c->vocab < 1) return mg_error_set(err, MG_ERR_INVALID, "vocabulary size must be >= 1");
    if (!(c->init_std >= 0)) return mg_error_set(err, MG_ERR_INVALID, "--init-method-std must be >= 0");
    if (!(c->hidden_dropout >= 0 && c->hidden_dropout < 1))
        return mg_error_set(err, MG_ERR_INVALID, "--hidden-dropout must be in [0, 1) (got %g)", c->hidden_dropout);
    if (!(c->attention_dropout >= 0 && c->attention_dropout < 1))
        return mg_error_set(err, MG_ERR_INVALID, "--attention-dropout must be in [0, 1) (got %g)", c->attention_dropout);
    return MG_OK;
}

int64_t mg_gpt_num_params(const mg_gpt_config *c) {
    int64_t h = c->hidden, f = c->ffn_hidden;
    int64_t layer = 2 * h + (3 * h * h + 3 * h) + (h * h + h) + 2 * h + (f * h + f) + (h * f + h);
    return c->vocab * h + (int64_t)c->max_position * h + c->num_layers * layer + 2 * h;
}

double mg_gpt_flops(const mg_gpt_config *c, int64_t samples) {
    /* Forward matmul FLOPs per token and layer: QKV 6h², projection 2h², MLP 4·h·ffn,
     * attention scores and weighted sum 4·s·h halved by the causal mask; logits 2hV.
     * Training = 3 × forward (backward is twice the forward). */
    double h = c->hidden, s = c->seq_length, L = c->num_layers, f = c->ffn_hidden, V = (double)c->vocab;
    double per_token = L * (8 * h * h + 4 * h * f + 2 * s * h) + 2 * h * V;
    return 3.0 * per_token * s * (double)samples;
}

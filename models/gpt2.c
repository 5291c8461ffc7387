/* GPT-2: learned positions, pre-LayerNorm blocks, causal attention, GELU MLP, final
 * LayerNorm, output layer tied to the word embedding. Activations are [s, b, h]. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mgraph/model.h"
#include "mgraph/ops.h"

static mg_tensor *weight(mg_graph *g, const char *name, int64_t rows, int64_t cols, float std) {
    int64_t shape[2] = {rows, cols};
    return mg_param(g, name, 2, shape, (mg_init){MG_INIT_NORMAL, std});
}

/* Norm weights and biases: 1-D, no weight decay (Megatron). */
static mg_tensor *vec(mg_graph *g, const char *name, int64_t n, mg_init_kind init) {
    mg_tensor *t = mg_param(g, name, 1, &n, (mg_init){init, 0});
    if (t) t->no_weight_decay = true;
    return t;
}

int mg_gpt2_params(mg_graph *g, const mg_gpt_config *c, mg_gpt *m, mg_error *err) {
    memset(m, 0, sizeof *m);
    int rc = mg_gpt_check(c, err);
    if (rc) return rc;
    m->cfg = *c;
    m->layers = calloc((size_t)c->num_layers, sizeof *m->layers);
    if (!m->layers) return mg_error_set(err, MG_ERR_NOMEM, "gpt2: out of memory");
    int64_t h = c->hidden, f = c->ffn_hidden;
    float std = c->init_std, out_std = c->init_std / sqrtf(2.0f * (float)c->num_layers);
    m->wte = weight(g, "wte.weight", c->vocab, h, std);
    m->wpe = weight(g, "wpe.weight", c->max_position, h, std);
    for (int i = 0; i < c->num_layers; i++) {
        mg_gpt_layer *l = &m->layers[i];
        mg_scope_push(g, "h.%d", i);
        l->ln1_w = vec(g, "ln_1.weight", h, MG_INIT_ONES);
        l->ln1_b = vec(g, "ln_1.bias", h, MG_INIT_ZEROS);
        l->qkv_w = weight(g, "attn.c_attn.weight", 3 * h, h, std);
        l->qkv_b = vec(g, "attn.c_attn.bias", 3 * h, MG_INIT_ZEROS);
        l->proj_w = weight(g, "attn.c_proj.weight", h, h, out_std);
        l->proj_b = vec(g, "attn.c_proj.bias", h, MG_INIT_ZEROS);
        l->ln2_w = vec(g, "ln_2.weight", h, MG_INIT_ONES);
        l->ln2_b = vec(g, "ln_2.bias", h, MG_INIT_ZEROS);
        l->fc_w = weight(g, "mlp.c_fc.weight", f, h, std);
        l->fc_b = vec(g, "mlp.c_fc.bias", f, MG_INIT_ZEROS);
        l->fc2_w = weight(g, "mlp.c_proj.weight", h, f, out_std);
        l->fc2_b = vec(g, "mlp.c_proj.bias", h, MG_INIT_ZEROS);
        mg_scope_pop(g);
    }
    m->lnf_w = vec(g, "ln_f.weight", h, MG_INIT_ONES);
    m->lnf_b = vec(g, "ln_f.bias", h, MG_INIT_ZEROS);
    if (mg_graph_error(g)->code) return mg_error_set(err, mg_graph_error(g)->code, "%s", mg_graph_error(g)->msg);
    return MG_OK;
}

void mg_gpt_release(mg_gpt *m) {
    free(m->layers);
    m->layers = NULL;
}

static mg_tensor *attention_block(mg_graph *g, const mg_gpt *m, const mg_gpt_layer *l, mg_tensor *x, bool training) {
    const mg_gpt_config *c = &m->cfg;
    int64_t s = x->shape[0], b = x->shape[1], h = c->hidden, nh = c->heads, hd = h / nh;
    mg_scope_push(g, "attn");
    mg_tensor *qkv = mg_linear(g, x, l->qkv_w, l->qkv_b); /* [s, b, 3h], per head [q k v] */
    qkv = mg_reshape(g, qkv, 4, (int64_t[]){s, b, nh, 3 * hd});
    mg_tensor *parts[3] = {0};
    mg_split(g, qkv, 3, 3, (int64_t[]){hd, hd, hd}, parts);
    mg_tensor *y = mg_attention(g, parts[0], parts[1], parts[2], true, training ? c->attention_dropout : 0.0f);
    y = mg_reshape(g, y, 3, (int64_t[]){s, b, h});
    y = mg_linear(g, y, l->proj_w, l->proj_b);
    y = mg_dropout(g, y, training ? c->hidden_dropout : 0.0f);
    mg_scope_pop(g);
    return y;
}

static mg_tensor *mlp_block(mg_graph *g, const mg_gpt *m, const mg_gpt_layer *l, mg_tensor *x, bool training) {
    mg_scope_push(g, "mlp");
    mg_tensor *y = mg_linear(g, x, l->fc_w, l->fc_b);
    y = mg_gelu(g, y);
    y = mg_linear(g, y, l->fc2_w, l->fc2_b);
    y = mg_dropout(g, y, training ? m->cfg.hidden_dropout : 0.0f);
    mg_scope_pop(g);
    return y;
}

mg_tensor *mg_gpt2_forward(mg_graph *g, const mg_gpt *m, mg_tensor *tokens, mg_tensor *positions, mg_tensor *targets,
                           bool training) {
    const mg_gpt_config *c = &m->cfg;
    if (!tokens || !positions || !targets) return NULL;
    int64_t s = tokens->shape[0], h = c->hidden;
    mg_tensor *x = mg_embedding(g, tokens, m->wte);                         /* [s, b, h] */
    mg_tensor *pe = mg_embedding(g, positions, m->wpe);                     /* [s, h] */
    x = mg_add(g, x, mg_reshape(g, pe, 3, (int64_t[]){s, 1, h}));
    x = mg_dropout(g, x, training ? c->hidden_dropout : 0.0f);
    for (int i = 0; i < c->num_layers; i++) {
        const mg_gpt_layer *l = &m->layers[i];
        mg_scope_push(g, "h.%d", i);
        mg_tensor *a = mg_layernorm(g, x, l->ln1_w, l->ln1_b, c->ln_eps);
        x = mg_add(g, x, attention_block(g, m, l, a, training));
        mg_tensor *f = mg_layernorm(g, x, l->ln2_w, l->ln2_b, c->ln_eps);
        x = mg_add(g, x, mlp_block(g, m, l, f, training));
        mg_scope_pop(g);
    }
    x = mg_layernorm(g, x, m->lnf_w, m->lnf_b, c->ln_eps);
    mg_tensor *logits = mg_matmul(g, x, m->wte, false, true);              /* [s, b, V], tied */
    return mg_cross_entropy(g, logits, targets, -1);
}

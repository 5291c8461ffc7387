/* The GPT model with Megatron's options. GPT-2: learned positions, pre-LayerNorm blocks,
 * causal attention, GELU MLP, final LayerNorm, output layer tied to the word embedding.
 * LLaMA / Mistral: RMSNorm, rotary positions, grouped-query attention, SwiGLU MLP, no
 * biases, untied output layer. Each option is independent, as in Megatron's GPTModel.
 * Activations are [s, b, h]. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/model_internal.h"

mg_tensor *gpt_weight(mg_graph *g, const char *name, int64_t rows, int64_t cols, float std) {
    int64_t shape[2] = {rows, cols};
    return mg_param(g, name, 2, shape, (mg_init){MG_INIT_NORMAL, std});
}

/* Norm weights and biases: 1-D, no weight decay (Megatron). */
mg_tensor *gpt_vec(mg_graph *g, const char *name, int64_t n, mg_init_kind init) {
    mg_tensor *t = mg_param(g, name, 1, &n, (mg_init){init, 0});
    if (t) t->no_weight_decay = true;
    return t;
}

void gpt_linear_params(mg_graph *g, const char *name, int64_t out, int64_t in, float std, bool bias, mg_layout lay,
                       mg_tensor **w, mg_tensor **b) {
    char nm[96];
    snprintf(nm, sizeof nm, "%s.weight", name);
    *w = mg_set_layout(gpt_weight(g, nm, out, in, std), lay);
    snprintf(nm, sizeof nm, "%s.bias", name);
    /* ColumnParallelLinear splits its bias with the outputs; RowParallelLinear's is whole */
    *b = bias ? mg_set_layout(gpt_vec(g, nm, out, MG_INIT_ZEROS), lay == MG_LAYOUT_COLUMN ? lay : MG_LAYOUT_REPLICATED)
              : NULL;
}

void gpt_norm_params(mg_graph *g, const mg_gpt_config *c, const char *name, int64_t n, mg_tensor **w, mg_tensor **b) {
    char nm[96];
    snprintf(nm, sizeof nm, "%s.weight", name);
    *w = gpt_vec(g, nm, n, MG_INIT_ONES);
    snprintf(nm, sizeof nm, "%s.bias", name);
    *b = c->norm == MG_NORM_LAYERNORM ? gpt_vec(g, nm, n, MG_INIT_ZEROS) : NULL;
}

static void norm_params(mg_graph *g, const mg_gpt_config *c, const char *name, mg_tensor **w, mg_tensor **b) {
    gpt_norm_params(g, c, name, c->hidden, w, b);
}

static void gpt2_layer_params(mg_graph *g, const mg_gpt_config *c, mg_gpt_layer *l, float std, float out_std) {
    int64_t h = c->hidden, f = c->ffn_hidden;
    norm_params(g, c, "ln_1", &l->ln1_w, &l->ln1_b);
    gpt_linear_params(g, "attn.c_attn", 3 * h, h, std, true, MG_LAYOUT_COLUMN, &l->qkv_w, &l->qkv_b);
    gpt_linear_params(g, "attn.c_proj", h, h, out_std, true, MG_LAYOUT_ROW, &l->proj_w, &l->proj_b);
    norm_params(g, c, "ln_2", &l->ln2_w, &l->ln2_b);
    if (l->router_w) return; /* an MoE layer: experts in place of the MLP */
    gpt_linear_params(g, "mlp.c_fc", f, h, std, true, MG_LAYOUT_COLUMN, &l->fc_w, &l->fc_b);
    gpt_linear_params(g, "mlp.c_proj", h, f, out_std, true, MG_LAYOUT_ROW, &l->fc2_w, &l->fc2_b);
}

static void llama_layer_params(mg_graph *g, const mg_gpt_config *c, mg_gpt_layer *l, float std, float out_std) {
    int64_t h = c->hidden, f = c->ffn_hidden, hd = mg_gpt_head_dim(c), q = c->heads * hd;
    int64_t kv = (int64_t)mg_gpt_kv_groups(c) * hd;
    bool bias = !c->disable_bias_linear, qkv_bias = bias || c->add_qkv_bias;
    norm_params(g, c, "input_layernorm", &l->ln1_w, &l->ln1_b);
    if (c->mla.enabled) {
        mg_mla_layer_params(g, c, l, std, out_std);
    } else {
        gpt_linear_params(g, "self_attn.q_proj", q, h, std, qkv_bias, MG_LAYOUT_COLUMN, &l->q_w, &l->q_b);
        gpt_linear_params(g, "self_attn.k_proj", kv, h, std, qkv_bias, MG_LAYOUT_COLUMN, &l->k_w, &l->k_b);
        gpt_linear_params(g, "self_attn.v_proj", kv, h, std, qkv_bias, MG_LAYOUT_COLUMN, &l->v_w, &l->v_b);
        if (c->qk_layernorm) { /* decayed only with --apply-wd-to-qk-layernorm (Megatron) */
            gpt_norm_params(g, c, "self_attn.q_norm", hd, &l->q_norm_w, &l->q_norm_b);
            gpt_norm_params(g, c, "self_attn.k_norm", hd, &l->k_norm_w, &l->k_norm_b);
            mg_tensor *qk[4] = {l->q_norm_w, l->q_norm_b, l->k_norm_w, l->k_norm_b};
            for (int i = 0; i < 4; i++)
                if (qk[i]) qk[i]->no_weight_decay = !c->qk_layernorm_wd;
        }
        gpt_linear_params(g, "self_attn.o_proj", h, q, out_std, bias, MG_LAYOUT_ROW, &l->proj_w, &l->proj_b);
    }
    norm_params(g, c, "post_attention_layernorm", &l->ln2_w, &l->ln2_b);
    if (l->router_w) return; /* an MoE layer: experts in place of the MLP */
    if (c->swiglu) gpt_linear_params(g, "mlp.gate_proj", f, h, std, bias, MG_LAYOUT_COLUMN, &l->gate_w, &l->gate_b);
    gpt_linear_params(g, "mlp.up_proj", f, h, std, bias, MG_LAYOUT_COLUMN, &l->fc_w, &l->fc_b);
    gpt_linear_params(g, "mlp.down_proj", h, f, out_std, bias, MG_LAYOUT_ROW, &l->fc2_w, &l->fc2_b);
}

void gpt_layer_params(mg_graph *g, const mg_gpt_config *c, mg_gpt_layer *l, bool moe) {
    float std = c->init_std, out_std = c->init_std / sqrtf(2.0f * (float)c->num_layers);
    if (moe) mg_moe_layer_params(g, c, l);
    if (mg_gpt_is_gpt2(c)) gpt2_layer_params(g, c, l, std, out_std);
    else llama_layer_params(g, c, l, std, out_std);
}

int mg_gpt2_params(mg_graph *g, const mg_gpt_config *c, mg_gpt *m, mg_error *err) {
    memset(m, 0, sizeof *m);
    int rc = mg_gpt_check(c, err);
    if (rc) return rc;
    m->cfg = *c;
    m->layers = calloc((size_t)c->num_layers, sizeof *m->layers);
    if (!m->layers) return mg_error_set(err, MG_ERR_NOMEM, "gpt: out of memory");
    int64_t h = c->hidden;
    float std = c->init_std;
    bool gpt2 = mg_gpt_is_gpt2(c);
    m->wte = mg_set_layout(gpt_weight(g, gpt2 ? "wte.weight" : "model.embed_tokens.weight", c->vocab, h, std),
                           MG_LAYOUT_VOCAB);
    if (m->wte) m->wte->embedding_or_output = true; /* (Megatron's decoupled learning rate) */
    if (c->pos_emb == MG_POS_LEARNED)
        m->wpe = gpt_weight(g, gpt2 ? "wpe.weight" : "model.embed_positions.weight", c->max_position, h, std);
    for (int i = 0; i < c->num_layers; i++) {
        mg_scope_push(g, gpt2 ? "h.%d" : "model.layers.%d", i);
        gpt_layer_params(g, c, &m->layers[i], mg_moe_is_layer(c, i));
        mg_scope_pop(g);
    }
    norm_params(g, c, gpt2 ? "ln_f" : "model.norm", &m->lnf_w, &m->lnf_b);
    if (c->untie_embeddings) m->lm_head = mg_set_layout(gpt_weight(g, "lm_head.weight", c->vocab, h, std), MG_LAYOUT_VOCAB);
    if (m->lm_head) m->lm_head->embedding_or_output = true;
    if (c->qk_l2_norm) { /* the weightless norm: RMSNorm times a constant one (no parameter, no gradient) */
        int64_t hd = mg_gpt_head_dim(c);
        m->unit_hd = mg_input(g, "qk_l2_norm.unit", MG_F32, 1, &hd);
        if (m->unit_hd) m->unit_hd->init = (mg_init){MG_INIT_ONES, 0.0f};
    }
    if (c->mtp_num_layers > 0 && mg_mtp_params(g, c, m)) return mg_error_set(err, MG_ERR_NOMEM, "gpt: out of memory");
    if (mg_graph_error(g)->code) return mg_error_set(err, mg_graph_error(g)->code, "%s", mg_graph_error(g)->msg);
    return MG_OK;
}

void mg_gpt_release(mg_gpt *m) {
    free(m->layers);
    free(m->mtp);
    m->layers = NULL;
    m->mtp = NULL;
}

mg_tensor *gpt_norm(mg_graph *g, const mg_gpt_config *c, mg_tensor *x, mg_tensor *w, mg_tensor *b) {
    return c->norm == MG_NORM_RMSNORM ? mg_rmsnorm(g, x, w, c->ln_eps) : mg_layernorm(g, x, w, b, c->ln_eps);
}

/* q [s, b, nh, hd], k and v [s, b, G, hd]: from GPT-2's fused c_attn (grouped per head
 * [q k v]) or from separate projections (heads contiguous, as Hugging Face). */
static void qkv_heads(mg_graph *g, const mg_gpt_config *c, const mg_gpt_layer *l, mg_tensor *x, mg_tensor **q,
                      mg_tensor **k, mg_tensor **v) {
    int64_t s = x->shape[0], b = x->shape[1], nh = c->heads, hd = mg_gpt_head_dim(c), ng = mg_gpt_kv_groups(c);
    if (l->qkv_w) {
        mg_tensor *qkv = mg_linear(g, x, l->qkv_w, l->qkv_b); /* [s, b, 3h], per head [q k v] */
        qkv = mg_reshape(g, qkv, 4, (int64_t[]){s, b, nh, 3 * hd});
        mg_tensor *parts[3] = {0};
        mg_split(g, qkv, 3, 3, (int64_t[]){hd, hd, hd}, parts);
        *q = parts[0], *k = parts[1], *v = parts[2];
        return;
    }
    *q = mg_reshape(g, mg_linear(g, x, l->q_w, l->q_b), 4, (int64_t[]){s, b, nh, hd});
    *k = mg_reshape(g, mg_linear(g, x, l->k_w, l->k_b), 4, (int64_t[]){s, b, ng, hd});
    *v = mg_reshape(g, mg_linear(g, x, l->v_w, l->v_b), 4, (int64_t[]){s, b, ng, hd});
}

/* q [s, b, nh, hd], k and v [s, b, G, hd] of layer l for x [s, b, h]: the projections,
 * the per-head norms and RoPE at `positions`, as attention reads them (and a key/value
 * cache keeps them: models/gpt_decode.c). In the caller's attention scope. */
void gpt_attn_qkv(mg_graph *g, const mg_gpt *m, const mg_gpt_layer *l, mg_tensor *x, mg_tensor *positions,
                  mg_tensor **qo, mg_tensor **ko, mg_tensor **vo) {
    const mg_gpt_config *c = &m->cfg;
    mg_tensor *q = NULL, *k = NULL, *v = NULL;
    qkv_heads(g, c, l, x, &q, &k, &v);
    if (l->q_norm_w) { /* per head, before the rotation (Megatron's q_layernorm / k_layernorm) */
        q = gpt_norm(g, c, q, l->q_norm_w, l->q_norm_b);
        k = gpt_norm(g, c, k, l->k_norm_w, l->k_norm_b);
    } else if (m->unit_hd) { /* L2Norm: x / sqrt(mean(x²) + eps), where those norms would be (a
                              * rotation keeps each head's RMS, so before or after RoPE is the same) */
        q = mg_rmsnorm(g, q, m->unit_hd, c->ln_eps);
        k = mg_rmsnorm(g, k, m->unit_hd, c->ln_eps);
    }
    if (c->pos_emb == MG_POS_ROPE) {
        int64_t rd = mg_gpt_rotary_dim(c);
        mg_attr_rope ro = mg_gpt_rope_attrs(c);
        q = mg_rope_partial_ex(g, q, positions, &ro, rd);
        k = mg_rope_partial_ex(g, k, positions, &ro, rd);
    }
    *qo = q, *ko = k, *vo = v;
}

static mg_tensor *attention_block(mg_graph *g, const mg_gpt *m, const mg_gpt_layer *l, mg_tensor *x,
                                  mg_tensor *positions, mg_tensor *doc_start, int64_t window, bool training) {
    const mg_gpt_config *c = &m->cfg;
    if (!x) return NULL;
    if (c->mla.enabled) return mg_mla_block(g, m, l, x, positions, doc_start, window, training);
    int64_t s = x->shape[0], b = x->shape[1], qd = c->heads * mg_gpt_head_dim(c);
    mg_scope_push(g, l->qkv_w ? "attn" : "self_attn");
    mg_tensor *q = NULL, *k = NULL, *v = NULL;
    gpt_attn_qkv(g, m, l, x, positions, &q, &k, &v);
    float p = training ? c->attention_dropout : 0.0f;
    mg_tensor *y = mg_attention_masked(g, q, k, v, doc_start, window, p);
    y = mg_reshape(g, y, 3, (int64_t[]){s, b, qd});
    y = mg_linear(g, y, l->proj_w, l->proj_b);
    y = mg_dropout(g, y, training ? c->hidden_dropout : 0.0f);
    mg_scope_pop(g);
    return y;
}

mg_tensor *gpt_mlp_block(mg_graph *g, const mg_gpt *m, const mg_gpt_layer *l, mg_tensor *x, bool training) {
    mg_scope_push(g, "mlp");
    mg_tensor *y = mg_linear(g, x, l->fc_w, l->fc_b);
    /* SwiGLU as LLaMA: silu(gate(x)) * up(x); two column-parallel layers under TP */
    y = m->cfg.swiglu         ? mg_mul(g, mg_silu(g, mg_linear(g, x, l->gate_w, l->gate_b)), y)
        : m->cfg.squared_relu ? mg_squared_relu(g, y)
        : m->cfg.gelu_exact   ? mg_gelu_erf(g, y)
                              : mg_gelu(g, y);
    y = mg_linear(g, y, l->fc2_w, l->fc2_b);
    y = mg_dropout(g, y, training ? m->cfg.hidden_dropout : 0.0f);
    mg_scope_pop(g);
    return y;
}

mg_tensor *gpt_transformer_layer(mg_graph *g, const mg_gpt *m, const mg_gpt_layer *l, mg_tensor *x, mg_tensor *positions,
                                 mg_tensor *doc_start, int64_t window, bool training, mg_gpt_aux *aux) {
    const mg_gpt_config *c = &m->cfg;
    mg_tensor *a = gpt_norm(g, c, x, l->ln1_w, l->ln1_b);
    x = mg_add(g, x, attention_block(g, m, l, a, positions, doc_start, window, training));
    mg_tensor *f = gpt_norm(g, c, x, l->ln2_w, l->ln2_b);
    return mg_add(g, x, l->router_w ? mg_moe_block(g, m, l, f, training, aux) : gpt_mlp_block(g, m, l, f, training));
}

mg_tensor *mg_gpt2_forward_aux(mg_graph *g, const mg_gpt *m, mg_tensor *tokens, mg_tensor *positions,
                               mg_tensor *doc_start, mg_tensor *targets, bool training, mg_gpt_aux *aux) {
    const mg_gpt_config *c = &m->cfg;
    memset(aux, 0, sizeof *aux);
    if (!tokens || !positions || !targets) return NULL;
    int64_t s = tokens->shape[0], h = c->hidden;
    bool gpt2 = mg_gpt_is_gpt2(c);
    int outer_layer = mg_graph_layer(g);
    mg_graph_set_layer(g, MG_LAYER_PRE); /* pipeline stages place layers by these marks */
    mg_tensor *x = mg_embedding(g, tokens, m->wte); /* [s, b, h] */
    if (m->wpe) { /* positions [s]: one row for all samples; [s, b]: each its own */
        mg_tensor *pe = mg_embedding(g, positions, m->wpe); /* [s, h] or [s, b, h] */
        x = mg_add(g, x, positions->ndim == 1 ? mg_reshape(g, pe, 3, (int64_t[]){s, 1, h}) : pe);
    }
    x = mg_dropout(g, x, training ? c->hidden_dropout : 0.0f);
    for (int i = 0; i < c->num_layers; i++) {
        const mg_gpt_layer *l = &m->layers[i];
        mg_scope_push(g, gpt2 ? "h.%d" : "model.layers.%d", i);
        mg_graph_set_layer(g, i);
        x = gpt_transformer_layer(g, m, l, x, positions, doc_start, mg_gpt_layer_window(c, i), training, aux);
        mg_scope_pop(g);
    }
    mg_graph_set_layer(g, MG_LAYER_POST);
    x = gpt_norm(g, c, x, m->lnf_w, m->lnf_b);
    mg_tensor *out = m->lm_head ? m->lm_head : m->wte;
    mg_tensor *logits = mg_matmul(g, x, out, false, true); /* [s, b, V] */
    if (c->mtp_num_layers > 0 && training) mg_mtp_forward(g, m, x, tokens, positions, doc_start, targets, training, aux);
    int n_moe = 0; /* (an MTP layer of the MoE kind counts: Megatron tracks its router's losses too) */
    for (int i = 0; i < c->num_layers; i++) n_moe += mg_moe_is_layer(c, i);
    if (training && mg_moe_is_layer(c, c->num_layers - 1)) n_moe += c->mtp_num_layers;
    if (aux->load_balancing_loss) aux->load_balancing_loss = mg_scale(g, aux->load_balancing_loss, 1.0f / (float)n_moe);
    if (aux->z_loss) aux->z_loss = mg_scale(g, aux->z_loss, 1.0f / (float)n_moe);
    mg_tensor *loss = mg_cross_entropy(g, logits, targets, MG_LABEL_IGNORE);
    aux->tokens = loss ? loss->src->in[2] : NULL; /* (xent_count's output) */
    mg_graph_set_layer(g, outer_layer);
    return loss;
}

mg_tensor *mg_gpt2_forward(mg_graph *g, const mg_gpt *m, mg_tensor *tokens, mg_tensor *positions, mg_tensor *targets,
                           bool training) {
    mg_gpt_aux aux;
    mg_tensor *loss = mg_gpt2_forward_aux(g, m, tokens, positions, NULL, targets, training, &aux);
    if (aux.loss) loss = mg_add(g, loss, aux.loss);
    return aux.mtp_loss ? mg_add(g, loss, aux.mtp_loss) : loss;
}

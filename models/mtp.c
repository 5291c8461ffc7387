/* Multi-token prediction (Megatron-Core's MultiTokenPredictionBlock, DeepSeek-V3 §2.2):
 * after the model, N layers each predict one token further. Depth k (1-based) sees the
 * input tokens moved k places towards the start (token i + k at place i; Megatron's
 * roll_tensor with shifts = -1 once per depth, the vacated places token 0), and the
 * hidden state of depth k - 1 (depth 0: the model's output after its final norm):
 *
 *   e = enorm(embedding(tokens moved k))          the model's word (and position) embedding
 *   x = eh_proj([e, hnorm(h_{k-1})])              [s, b, 2h] -> [s, b, h], no bias
 *   h_k = norm(transformer_layer(x))              shared_head.norm
 *   loss_k = cross-entropy(h_k · Wᵀ, labels moved k)   the model's output layer W
 *
 * The labels move with a fill of MG_LABEL_IGNORE, which moves Megatron's loss mask with
 * them (a place whose label was masked stays masked, the k places past the end are), so
 * loss_k is Megatron's sum(mask · ce) / sum(mask) (0 when nothing is kept). The
 * objective gains mtp_loss_scaling_factor / N · Σ loss_k (MTPLossAutoScaler: the same
 * gradient, scaled as the main loss by the step). Positions for RoPE are the model's
 * (Megatron computes rotary_pos_emb once); learned positions are looked up at the moved
 * position ids, as Megatron's embedding sees them. Only in training, as Megatron
 * computes the MTP losses: evaluation reports the language-model loss alone.
 *
 * Every node is marked MG_LAYER_POST, so pipeline parallelism places the MTP layers with
 * the output layer on the last stage (Megatron's default without a custom layout); the
 * word embedding, used on the first stage and here, gets its gradient summed over the
 * two as a tied embedding's.
 *
 * Context parallelism: Megatron cuts the batch into each cp rank's zigzag chunks before
 * the model, so its roll_tensor exchanges the chunks' ends between ranks. Here the token
 * ids, labels and positions are whole on every rank (replicated leaves, partitioners/cp.c)
 * and the shifts run on them whole; the embedding and cross-entropy rules then take the
 * rank's two chunks of the moved tensors, so nothing needs exchanging and every rank sees
 * the serial moves (models.deepseek_plan_mtp_cp2, _ep2_cp2). */
#include <stdio.h>
#include <stdlib.h>

#include "models/model_internal.h"

int mg_mtp_params(mg_graph *g, const mg_gpt_config *c, mg_gpt *m) {
    int n = c->mtp_num_layers, L = c->num_layers;
    m->mtp = calloc((size_t)n, sizeof *m->mtp);
    if (!m->mtp) return MG_ERR_NOMEM;
    bool gpt2 = mg_gpt_is_gpt2(c), moe = mg_moe_is_layer(c, L - 1); /* the last decoder layer's kind */
    for (int k = 0; k < n; k++) {
        mg_gpt_mtp *t = &m->mtp[k];
        mg_scope_push(g, gpt2 ? "h.%d" : "model.layers.%d", L + k); /* (Hugging Face DeepseekV3's place) */
        gpt_norm_params(g, c, "enorm", c->hidden, &t->enorm_w, &t->enorm_b);
        gpt_norm_params(g, c, "hnorm", c->hidden, &t->hnorm_w, &t->hnorm_b);
        /* Megatron's ColumnParallelLinear(2h -> h), gather_output False: its output is gathered
         * (scattered over the sequence with SP) before the layer, as the partitioner does */
        t->eh_proj_w = mg_set_layout(gpt_weight(g, "eh_proj.weight", c->hidden, 2 * (int64_t)c->hidden, c->init_std),
                                     MG_LAYOUT_COLUMN);
        gpt_layer_params(g, c, &t->layer, moe);
        gpt_norm_params(g, c, "shared_head.norm", c->hidden, &t->norm_w, &t->norm_b);
        mg_scope_pop(g);
    }
    return MG_OK;
}

void mg_mtp_forward(mg_graph *g, const mg_gpt *m, mg_tensor *h, mg_tensor *tokens, mg_tensor *positions,
                    mg_tensor *doc_start, mg_tensor *targets, bool training, mg_gpt_aux *aux) {
    const mg_gpt_config *c = &m->cfg;
    int n = c->mtp_num_layers, L = c->num_layers;
    if (!h || !m->mtp) return;
    int64_t s = tokens->shape[0], hd = c->hidden;
    bool gpt2 = mg_gpt_is_gpt2(c);
    int outer_layer = mg_graph_layer(g);
    mg_graph_set_layer(g, MG_LAYER_POST);
    mg_tensor *out = m->lm_head ? m->lm_head : m->wte, *ids = tokens, *labels = targets, *pos = positions, *sum = NULL;
    for (int k = 0; k < n; k++) {
        const mg_gpt_mtp *t = &m->mtp[k];
        mg_scope_push(g, gpt2 ? "h.%d" : "model.layers.%d", L + k);
        ids = mg_shift(g, ids, 0, 1, 0);
        labels = mg_shift(g, labels, 0, 1, MG_LABEL_IGNORE);
        mg_tensor *e = mg_embedding(g, ids, m->wte);
        if (m->wpe) {
            pos = mg_shift(g, pos, 0, 1, 0);
            mg_tensor *pe = mg_embedding(g, pos, m->wpe);
            e = mg_add(g, e, pos && pos->ndim == 1 ? mg_reshape(g, pe, 3, (int64_t[]){s, 1, hd}) : pe);
        }
        e = mg_dropout(g, e, training ? c->hidden_dropout : 0.0f); /* (the embedding module's dropout) */
        mg_tensor *parts[2] = {gpt_norm(g, c, e, t->enorm_w, t->enorm_b), gpt_norm(g, c, h, t->hnorm_w, t->hnorm_b)};
        mg_tensor *x = mg_linear(g, mg_concat(g, 2, parts, 2), t->eh_proj_w, NULL);
        x = gpt_transformer_layer(g, m, &t->layer, x, positions, doc_start, mg_gpt_layer_window(c, k), training, aux);
        h = gpt_norm(g, c, x, t->norm_w, t->norm_b);
        mg_tensor *logits = mg_matmul(g, h, out, false, true);
        aux->mtp[k] = mg_cross_entropy(g, logits, labels, MG_LABEL_IGNORE);
        sum = sum ? mg_add(g, sum, aux->mtp[k]) : aux->mtp[k];
        mg_scope_pop(g);
    }
    aux->mtp_loss = mg_scale(g, sum, c->mtp_loss_scaling_factor / (float)n);
    mg_graph_set_layer(g, outer_layer);
}

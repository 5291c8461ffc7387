/* The MoE layer in place of a block's MLP (Megatron-LM core/transformer/moe/moe_layer.py
 * with the TopKRouter, the grouped MLP experts and the shared experts).
 *
 *   logits = x · W_routerᵀ                            [T, E]   (T = s·b tokens)
 *   probs, map = moe_route(logits [, expert_bias])    top-k, weights, capacity mask
 *   xs, counts = moe_permute(x, map)                  [R, h] expert-major, counts [E]
 *   -- expert parallelism exchanges (xs, counts) here with an all-to-all --
 *   hs = act(grouped_matmul(xs, fc1))                 one GEMM per expert segment
 *   ys = grouped_matmul(hs, fc2)
 *   y  = moe_unpermute(ys, map, probs) (+ shared experts' MLP of x)
 * In training the load-balancing loss (on the softmax over all experts, or the
 * normalised sigmoid scores, and the top-k counts before capacity; per micro-batch, or
 * per sample for DeepSeek's seq_aux_loss) and the z-loss are computed from the same
 * logits and handed to the caller, who adds them to the objective (Megatron attaches
 * them to the activations with MoEAuxLossAutoScaler: the same gradient).
 *
 * Aux-loss-free balancing (--moe-router-enable-expert-bias, DeepSeek-V3): the router
 * selects by sigmoid score + expert_bias; the tokens each expert was sent
 * (moe_map_count of the routing map) accumulate over the step's micro-batches, and once
 * per step, after the last micro-batch, the bias moves by ±rate towards balance
 * (moe_expert_bias_update; Megatron's get_updated_expert_bias in finalize_model_grads).
 * The count is the whole global batch's: partitioners sum it over the ranks that
 * routed other tokens (dp, and cp / sp shards), so every rank takes the same step.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "models/model_internal.h"

bool mg_moe_is_layer(const mg_gpt_config *c, int layer) {
    const mg_moe_config *m = &c->moe;
    if (m->num_experts <= 0) return false;
    if (m->pattern_len > 0)
        return layer >= 0 && layer < m->pattern_len && (m->layer_pattern[layer / 64] >> (layer % 64) & 1);
    return m->layer_freq > 0 && layer % m->layer_freq == 0;
}

static int moe_ffn(const mg_gpt_config *c) { return c->moe.ffn_hidden > 0 ? c->moe.ffn_hidden : c->ffn_hidden; }

int mg_moe_check(const mg_gpt_config *c, mg_error *err) {
    const mg_moe_config *m = &c->moe;
    if (m->num_experts < 0) return mg_error_set(err, MG_ERR_INVALID, "--num-experts must be >= 0 (got %d)", m->num_experts);
    if (!m->num_experts) return MG_OK;
    if (m->topk < 1 || m->topk > m->num_experts)
        return mg_error_set(err, MG_ERR_INVALID, "--moe-router-topk (%d) must be in [1, --num-experts = %d]", m->topk,
                            m->num_experts);
    if (m->pattern_len > 0 && m->pattern_len != c->num_layers) /* (Megatron asserts it) */
        return mg_error_set(err, MG_ERR_INVALID, "--moe-layer-freq lists %d layers, the model has --num-layers %d",
                            m->pattern_len, c->num_layers);
    if (m->pattern_len < 0 || m->pattern_len > MG_MOE_MAX_LAYERS)
        return mg_error_set(err, MG_ERR_INVALID, "--moe-layer-freq: a list of at most %d layers", MG_MOE_MAX_LAYERS);
    if (!m->pattern_len && m->layer_freq < 1)
        return mg_error_set(err, MG_ERR_INVALID, "--moe-layer-freq must be >= 1 (got %d)", m->layer_freq);
    if (m->ffn_hidden < 0) return mg_error_set(err, MG_ERR_INVALID, "--moe-ffn-hidden-size must be >= 1");
    if (!(m->aux_loss_coeff >= 0) || !(m->z_loss_coeff >= 0))
        return mg_error_set(err, MG_ERR_INVALID, "--moe-aux-loss-coeff and --moe-z-loss-coeff must be >= 0");
    if (!(m->capacity_factor >= 0))
        return mg_error_set(err, MG_ERR_INVALID, "--moe-expert-capacity-factor must be > 0 (got %g)", m->capacity_factor);
    if (m->pad_to_capacity && m->capacity_factor <= 0)
        return mg_error_set(err, MG_ERR_INVALID, "--moe-pad-expert-input-to-capacity needs --moe-expert-capacity-factor");
    /* Megatron's TransformerConfig rules */
    if (m->expert_bias && m->score != MG_MOE_SIGMOID)
        return mg_error_set(err, MG_ERR_INVALID, "--moe-router-enable-expert-bias needs --moe-router-score-function "
                                                 "sigmoid");
    if (!(m->bias_update_rate >= 0))
        return mg_error_set(err, MG_ERR_INVALID, "--moe-router-bias-update-rate must be >= 0");
    if (m->topk == 1 && m->score == MG_MOE_SOFTMAX && !m->pre_softmax)
        return mg_error_set(err, MG_ERR_INVALID, "--moe-router-topk 1 with softmax scores needs --moe-router-pre-softmax "
                                                 "(a softmax over one expert has no gradient)");
    if (m->group_topk || m->num_groups) {
        if (m->group_topk < 1 || m->num_groups < 1)
            return mg_error_set(err, MG_ERR_INVALID, "group-limited routing needs --moe-router-num-groups and "
                                                     "--moe-router-group-topk");
        if (m->num_experts % m->num_groups || m->group_topk > m->num_groups || m->topk % m->group_topk ||
            m->topk > m->group_topk * (m->num_experts / m->num_groups))
            return mg_error_set(err, MG_ERR_INVALID,
                                "--moe-router-num-groups %d must divide --num-experts %d, --moe-router-group-topk %d be "
                                "at most the groups and divide --moe-router-topk %d, whose experts the chosen groups hold",
                                m->num_groups, m->num_experts, m->group_topk, m->topk);
    }
    if (!(m->topk_scaling >= 0)) return mg_error_set(err, MG_ERR_INVALID, "--moe-router-topk-scaling-factor must be > 0");
    if (m->shared_ffn < 0)
        return mg_error_set(err, MG_ERR_INVALID, "--moe-shared-expert-intermediate-size must be >= 1 (got %d)", m->shared_ffn);
    return MG_OK;
}

void mg_moe_layer_params(mg_graph *g, const mg_gpt_config *c, mg_gpt_layer *l) {
    const mg_moe_config *m = &c->moe;
    int64_t E = m->num_experts, h = c->hidden, f = moe_ffn(c);
    float std = c->init_std, out_std = c->init_std / sqrtf(2.0f * (float)c->num_layers);
    l->router_w = mg_param(g, "mlp.router.weight", 2, (int64_t[]){E, h}, (mg_init){MG_INIT_NORMAL, std});
    if (m->expert_bias) { /* Megatron's buffer: saved with the model, never trained by gradients */
        l->expert_bias = mg_param(g, "mlp.router.expert_bias", 1, &E, (mg_init){MG_INIT_ZEROS, 0});
        if (l->expert_bias) l->expert_bias->requires_grad = false, l->expert_bias->no_weight_decay = true;
    }
    l->experts_fc1_w = mg_param(g, "mlp.experts.fc1.weight", 3, (int64_t[]){E, c->swiglu ? 2 * f : f, h},
                                (mg_init){MG_INIT_NORMAL, std});
    l->experts_fc2_w = mg_param(g, "mlp.experts.fc2.weight", 3, (int64_t[]){E, h, f}, (mg_init){MG_INIT_NORMAL, out_std});
    mg_set_layout(l->experts_fc1_w, MG_LAYOUT_EXPERT_COLUMN); /* (Megatron's grouped column / row linears) */
    mg_set_layout(l->experts_fc2_w, MG_LAYOUT_EXPERT_ROW);
    if (m->shared_ffn > 0) { /* Megatron's SharedExpertMLP: the model's MLP of that size */
        int64_t fs = m->shared_ffn;
        bool bias = !c->disable_bias_linear;
        if (c->swiglu) gpt_linear_params(g, "mlp.shared_experts.gate_proj", fs, h, std, bias, MG_LAYOUT_COLUMN, &l->shared_gate_w, &l->shared_gate_b);
        gpt_linear_params(g, "mlp.shared_experts.up_proj", fs, h, std, bias, MG_LAYOUT_COLUMN, &l->shared_fc_w, &l->shared_fc_b);
        gpt_linear_params(g, "mlp.shared_experts.down_proj", h, fs, out_std, bias, MG_LAYOUT_ROW, &l->shared_fc2_w, &l->shared_fc2_b);
    }
}

static mg_tensor *acc(mg_graph *g, mg_tensor *sum, mg_tensor *t) { return sum ? mg_add(g, sum, t) : t; }

static mg_tensor *activation(mg_graph *g, const mg_gpt_config *c, mg_tensor *h) {
    return c->squared_relu ? mg_squared_relu(g, h) : c->gelu_exact ? mg_gelu_erf(g, h) : mg_gelu(g, h);
}

/* The shared experts on x [T, h]: one MLP every token goes through. */
static mg_tensor *shared_experts(mg_graph *g, const mg_gpt_config *c, const mg_gpt_layer *l, mg_tensor *x) {
    mg_scope_push(g, "shared_experts");
    mg_tensor *y = mg_linear(g, x, l->shared_fc_w, l->shared_fc_b);
    y = c->swiglu ? mg_mul(g, mg_silu(g, mg_linear(g, x, l->shared_gate_w, l->shared_gate_b)), y) : activation(g, c, y);
    y = mg_linear(g, y, l->shared_fc2_w, l->shared_fc2_b);
    mg_scope_pop(g);
    return y;
}

/* Aux-loss-free balancing: the tokens each expert got, accumulated over the step's
 * micro-batches in the state "<scope>.router.local_tokens_per_expert" (Megatron's
 * buffer), and once per step (micro-batch -1, in this layer for pipeline stages) the
 * bias's step, written back into it. */
static void expert_bias_step(mg_graph *g, const mg_moe_config *mc, const mg_gpt_layer *l, mg_tensor *map) {
    mg_tensor *count = mg_moe_map_count(g, map);
    if (!count) return;
    int mb = count->src->mb; /* (the forward's micro-batch part) */
    mg_tensor *sum = mg_state(g, "router.local_tokens_per_expert", MG_F32, 1, count->shape, (mg_init){MG_INIT_ZEROS, 0});
    if (!sum) return;
    sum->role = MG_ROLE_GRAD; /* an accumulator, as a gradient's: not checkpointed */
    mg_node *a = mg_node_new(g, MG_OP_ACCUMULATE, NULL, 2, (mg_tensor *[]){sum, count}, "router.tokens_per_expert");
    if (!a) return;
    a->out[0]->updates = sum;
    mg_graph_set_mb(g, -1);
    mg_tensor *nb = mg_moe_expert_bias_update(g, l->expert_bias, a->out[0], mc->bias_update_rate);
    if (nb) nb->updates = l->expert_bias;
    mg_graph_set_mb(g, mb);
}

mg_tensor *mg_moe_block(mg_graph *g, const mg_gpt *m, const mg_gpt_layer *l, mg_tensor *x, bool training,
                        mg_gpt_aux *aux) {
    const mg_gpt_config *c = &m->cfg;
    const mg_moe_config *mc = &c->moe;
    if (!x) return NULL;
    int64_t s = x->shape[0], b = x->shape[1], h = c->hidden, T = s * b;
    mg_scope_push(g, "mlp");
    mg_tensor *x2 = mg_reshape(g, x, 2, (int64_t[]){T, h});
    mg_tensor *logits = mg_matmul(g, x2, l->router_w, false, true); /* [T, E] */
    mg_moe_route_opts o = {.topk = mc->topk, .pre_softmax = mc->pre_softmax, .drop_policy = mc->drop_policy,
                           .pad_to_capacity = mc->pad_to_capacity, .score = mc->score, .num_groups = mc->num_groups,
                           .group_topk = mc->group_topk, .scaling = mc->topk_scaling, .expert_bias = l->expert_bias};
    if (mc->capacity_factor > 0) o.capacity = mg_moe_capacity(T, mc->topk, mc->num_experts, mc->capacity_factor);
    mg_tensor *probs = NULL, *map = NULL, *counts = NULL;
    mg_moe_route(g, logits, &o, &probs, &map);
    mg_tensor *xs = mg_moe_permute(g, x2, map, NULL, mg_moe_dispatch_rows(T, mc->num_experts, &o), &counts);
    mg_tensor *hs = mg_moe_grouped_matmul(g, xs, counts, l->experts_fc1_w, true);
    hs = c->swiglu ? mg_swiglu(g, hs) : activation(g, c, hs);
    mg_tensor *ys = mg_moe_grouped_matmul(g, hs, counts, l->experts_fc2_w, true);
    mg_tensor *y = mg_moe_unpermute(g, ys, map, probs);
    if (l->shared_fc_w) y = mg_add(g, y, shared_experts(g, c, l, x2));
    y = mg_reshape(g, y, 3, (int64_t[]){s, b, h});
    y = mg_dropout(g, y, training ? c->hidden_dropout : 0.0f);
    if (training && l->expert_bias && map) expert_bias_step(g, mc, l, map);
    if (training && aux) {
        if (mc->aux_loss_coeff > 0 && mc->balance != MG_MOE_NO_BALANCING_LOSS) {
            /* the scores of Megatron's compute_routing_scores_for_aux_loss */
            mg_tensor *sc = mc->score == MG_MOE_SIGMOID ? mg_sigmoid_norm(g, logits) : mg_softmax(g, logits);
            mg_tensor *lb = mc->balance == MG_MOE_SEQ_AUX_LOSS ? mg_moe_seq_aux_loss(g, sc, logits, mc->topk, b)
                                                               : mg_moe_aux_loss_scores(g, sc, logits, mc->topk);
            aux->load_balancing_loss = acc(g, aux->load_balancing_loss, lb);
            aux->loss = acc(g, aux->loss, mg_scale(g, lb, mc->aux_loss_coeff));
        }
        if (mc->z_loss_coeff > 0) {
            mg_tensor *z = mg_moe_z_loss(g, logits);
            aux->z_loss = acc(g, aux->z_loss, z);
            aux->loss = acc(g, aux->loss, mg_scale(g, z, mc->z_loss_coeff));
        }
    }
    mg_scope_pop(g);
    return y;
}

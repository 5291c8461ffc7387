/* The MoE layer in place of a block's MLP (Megatron-LM core/transformer/moe/moe_layer.py
 * with the TopKRouter and the grouped MLP experts).
 *
 *   logits = x · W_routerᵀ                            [T, E]   (T = s·b tokens)
 *   probs, map = moe_route(logits)                    top-k, weights, capacity mask
 *   xs, counts = moe_permute(x, map)                  [R, h] expert-major, counts [E]
 *   -- expert parallelism would exchange (xs, counts) here with an all-to-all --
 *   hs = act(grouped_matmul(xs, fc1))                 one GEMM per expert segment
 *   ys = grouped_matmul(hs, fc2)
 *   y  = moe_unpermute(ys, map, probs)                weighted sum of each token's experts
 * In training the load-balancing loss (on the softmax over all experts and the top-k
 * counts before capacity) and the z-loss are computed from the same logits and handed
 * to the caller, who adds them to the objective (Megatron attaches them to the
 * activations with MoEAuxLossAutoScaler: the same gradient).
 */
#include <math.h>
#include <string.h>

#include "mgraph/model.h"
#include "mgraph/ops.h"

bool mg_moe_is_layer(const mg_gpt_config *c, int layer) {
    return c->moe.num_experts > 0 && c->moe.layer_freq > 0 && layer % c->moe.layer_freq == 0;
}

static int moe_ffn(const mg_gpt_config *c) { return c->moe.ffn_hidden > 0 ? c->moe.ffn_hidden : c->ffn_hidden; }

int mg_moe_check(const mg_gpt_config *c, mg_error *err) {
    const mg_moe_config *m = &c->moe;
    if (m->num_experts < 0) return mg_error_set(err, MG_ERR_INVALID, "--num-experts must be >= 0 (got %d)", m->num_experts);
    if (!m->num_experts) return MG_OK;
    if (m->topk < 1 || m->topk > m->num_experts)
        return mg_error_set(err, MG_ERR_INVALID, "--moe-router-topk (%d) must be in [1, --num-experts = %d]", m->topk,
                            m->num_experts);
    if (m->layer_freq < 1) return mg_error_set(err, MG_ERR_INVALID, "--moe-layer-freq must be >= 1 (got %d)", m->layer_freq);
    if (m->ffn_hidden < 0) return mg_error_set(err, MG_ERR_INVALID, "--moe-ffn-hidden-size must be >= 1");
    if (!(m->aux_loss_coeff >= 0) || !(m->z_loss_coeff >= 0))
        return mg_error_set(err, MG_ERR_INVALID, "--moe-aux-loss-coeff and --moe-z-loss-coeff must be >= 0");
    if (!(m->capacity_factor >= 0))
        return mg_error_set(err, MG_ERR_INVALID, "--moe-expert-capacity-factor must be > 0 (got %g)", m->capacity_factor);
    if (m->pad_to_capacity && m->capacity_factor <= 0)
        return mg_error_set(err, MG_ERR_INVALID, "--moe-pad-expert-input-to-capacity needs --moe-expert-capacity-factor");
    return MG_OK;
}

void mg_moe_layer_params(mg_graph *g, const mg_gpt_config *c, mg_gpt_layer *l) {
    int64_t E = c->moe.num_experts, h = c->hidden, f = moe_ffn(c);
    float std = c->init_std, out_std = c->init_std / sqrtf(2.0f * (float)c->num_layers);
    l->router_w = mg_param(g, "mlp.router.weight", 2, (int64_t[]){E, h}, (mg_init){MG_INIT_NORMAL, std});
    l->experts_fc1_w = mg_param(g, "mlp.experts.fc1.weight", 3, (int64_t[]){E, c->swiglu ? 2 * f : f, h},
                                (mg_init){MG_INIT_NORMAL, std});
    l->experts_fc2_w = mg_param(g, "mlp.experts.fc2.weight", 3, (int64_t[]){E, h, f}, (mg_init){MG_INIT_NORMAL, out_std});
}

static mg_tensor *acc(mg_graph *g, mg_tensor *sum, mg_tensor *t) { return sum ? mg_add(g, sum, t) : t; }

mg_tensor *mg_moe_block(mg_graph *g, const mg_gpt *m, const mg_gpt_layer *l, mg_tensor *x, bool training,
                        mg_gpt_aux *aux) {
    const mg_gpt_config *c = &m->cfg;
    const mg_moe_config *mc = &c->moe;
    if (!x) return NULL;
    int64_t s = x->shape[0], b = x->shape[1], h = c->hidden, T = s * b;
    mg_scope_push(g, "mlp");
    mg_tensor *x2 = mg_reshape(g, x, 2, (int64_t[]){T, h});
    mg_tensor *logits = mg_matmul(g, x2, l->router_w, false, true); /* [T, E] */
    mg_moe_route_opts o = {.topk = mc->topk, .pre_softmax = mc->pre_softmax, .capacity = 0, .drop_policy = mc->drop_policy, .pad_to_capacity = mc->pad_to_capacity};
    if (mc->capacity_factor > 0) o.capacity = mg_moe_capacity(T, mc->topk, mc->num_experts, mc->capacity_factor);
    mg_tensor *probs = NULL, *map = NULL, *counts = NULL;
    mg_moe_route(g, logits, &o, &probs, &map);
    mg_tensor *xs = mg_moe_permute(g, x2, map, NULL, mg_moe_dispatch_rows(T, mc->num_experts, &o), &counts);
    mg_tensor *hs = mg_moe_grouped_matmul(g, xs, counts, l->experts_fc1_w, true);
    hs = c->swiglu         ? mg_swiglu(g, hs)
         : c->squared_relu ? mg_squared_relu(g, hs)
         : c->gelu_exact   ? mg_gelu_erf(g, hs)
                           : mg_gelu(g, hs);
    mg_tensor *ys = mg_moe_grouped_matmul(g, hs, counts, l->experts_fc2_w, true);
    mg_tensor *y = mg_moe_unpermute(g, ys, map, probs);
    y = mg_reshape(g, y, 3, (int64_t[]){s, b, h});
    y = mg_dropout(g, y, training ? c->hidden_dropout : 0.0f);
    if (training && aux) {
        if (mc->aux_loss_coeff > 0) {
            mg_tensor *lb = mg_moe_aux_loss(g, logits, mc->topk);
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

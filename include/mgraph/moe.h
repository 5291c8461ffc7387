/* Mixture-of-experts ops: routing, dispatch to experts, grouped expert matmuls,
 * auxiliary losses (Megatron-LM semantics, core/transformer/moe/).
 *
 * Variable token counts inside static shapes ("dropless with a static bound"):
 * the graph's shapes are fixed when it is built, but how many tokens each expert
 * receives changes every step. The router therefore produces a dense routing map
 * [T, E] (i32 0/1) and routing weights [T, E]; mg_moe_permute copies the routed
 * (token, expert) pairs into a buffer of a STATIC number of rows R (T·k when
 * dropless: the most there can be), sorted by expert and, inside an expert, by
 * token, and returns the run-time row count of each expert in counts [E] (i32).
 * Rows past sum(counts) are zero and never read. mg_moe_grouped_matmul runs one
 * GEMM per expert on its variable-length segment, so no FLOPs are spent on padding,
 * and mg_moe_unpermute sums each token's expert outputs weighted by the router.
 * Why not capacity-padded [E, C, h] buffers: dropless routing must be exact (serial
 * equivalence), and a capacity bound of T per expert would cost E× the memory and
 * FLOPs. Capacity (--moe-expert-capacity-factor) is a mask applied by the router
 * inside the same bound; --moe-pad-expert-input-to-capacity makes every count equal
 * min(capacity, T) (the bound then is E·min(capacity, T)).
 *
 * Expert parallelism fits between permute and the expert matmuls: the (xs, counts)
 * pair is exactly what an all-to-all with variable splits exchanges (counts first,
 * then the rows of each expert to the rank that owns it), and the inverse exchange
 * goes before unpermute. Nothing else in the layer depends on where experts live.
 */
#ifndef MGRAPH_MOE_H
#define MGRAPH_MOE_H

#include "mgraph/graph.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mg_moe_route_opts {
    int topk;
    bool pre_softmax;
    int64_t capacity;                 /* 0: dropless */
    mg_moe_drop_policy drop_policy;   /* which routed tokens an expert keeps when over capacity */
    bool pad_to_capacity;
    mg_moe_score score;               /* softmax (default) or sigmoid */
    int num_groups, group_topk;       /* group-limited routing (0: none) */
    float scaling;                    /* weights times this (0: 1) */
    mg_tensor *expert_bias;           /* [E] f32 added to the sigmoid scores for the selection only; NULL: none */
} mg_moe_route_opts;

/* Megatron's expert capacity: ceil(T·k / E · factor). */
int64_t mg_moe_capacity(int64_t tokens, int topk, int experts, double factor);
/* The static row bound of the dispatch buffer for these options. */
int64_t mg_moe_dispatch_rows(int64_t tokens, int experts, const mg_moe_route_opts *o);

/* Router on logits [T, E] (Megatron's topk_routing_with_score_function): the selection
 * ranks the logits (softmax), the softmax over all E (pre_softmax), or the sigmoid
 * scores plus expert_bias (sigmoid); with num_groups, only experts of the group_topk
 * groups with the largest sums of their top-(topk / group_topk) selection scores take part
 * (DeepSeek's device / node-limited routing); top-k, ties to the lower expert index.
 * Weights: softmax over the k selected logits, the selected softmax entries (pre_softmax),
 * or the selected sigmoid scores (without the bias) over their sum + 1e-20 (k > 1); times
 * scaling; then the capacity mask. Outputs: *probs [T, E] f32 (zero where not routed)
 * and *map [T, E] i32 (1 where routed). Differentiable in logits through probs (the
 * bias only selects). Returns 0 or a status (recorded). */
int mg_moe_route(mg_graph *g, mg_tensor *logits, const mg_moe_route_opts *o, mg_tensor **probs, mg_tensor **map);

/* x [T, h] -> rows [rows, h] in expert-major, token-minor order of map [T, E];
 * *counts [E] i32 (may be NULL) receives each expert's row count. w [T, E] (may be
 * NULL) scales each copied row by w[t, e]. Differentiable in x and w. */
mg_tensor *mg_moe_permute(mg_graph *g, mg_tensor *x, mg_tensor *map, mg_tensor *w, int64_t rows, mg_tensor **counts);
/* The adjoint: ys [rows, h] -> y [T, h], y[t] = sum_e map[t, e] · w[t, e] · ys[row(t, e)]
 * (w NULL: weight 1). Differentiable in ys and w. */
mg_tensor *mg_moe_unpermute(mg_graph *g, mg_tensor *ys, mg_tensor *map, mg_tensor *w);

/* Per-expert GEMM over the segments given by counts [E] (i32):
 *   trans_w: w [E, N, K], ys[seg e] = xs[seg e] · w[e]ᵀ  (torch.nn.Linear per expert)
 *   else:    w [E, K, N], ys[seg e] = xs[seg e] · w[e].
 * xs [R, K] -> [R, N]; rows past sum(counts) are zero. Differentiable in xs and w. */
mg_tensor *mg_moe_grouped_matmul(mg_graph *g, mg_tensor *xs, mg_tensor *counts, mg_tensor *w, bool trans_w);

/* Tokens routed to each expert by top-k of logits [T, E] (before any capacity
 * mask): [E] f32. Stops gradients (piecewise constant). */
mg_tensor *mg_moe_topk_count(mg_graph *g, mg_tensor *logits, int topk);
/* The same per sample: [samples, E], token t counting for sample t % samples (the [s, b]
 * order of a micro-batch's T = s·b tokens). */
mg_tensor *mg_moe_topk_count_samples(mg_graph *g, mg_tensor *logits, int topk, int64_t samples);
/* Tokens the router sent to each expert: the column sums of map [T, E] (i32) as [E] f32.
 * Stops gradients. */
mg_tensor *mg_moe_map_count(mg_graph *g, mg_tensor *map);
/* Each row of x [..., E] as sigmoid(x) / (Σ sigmoid(x) + 1e-20): the normalised sigmoid
 * scores Megatron's aux losses take with --moe-router-score-function sigmoid. */
mg_tensor *mg_sigmoid_norm(mg_graph *g, mg_tensor *x);
/* Aux-loss-free balancing (Megatron's get_updated_expert_bias): bias + rate ·
 * sign(mean(counts) - counts), [E]. No gradient. */
mg_tensor *mg_moe_expert_bias_update(mg_graph *g, mg_tensor *bias, mg_tensor *counts, float rate);
/* log sum exp over the last dimension: [..., N] -> [...] ([1] for a 1-D input). */
mg_tensor *mg_logsumexp(mg_graph *g, mg_tensor *x);

/* Switch/GShard load-balancing loss without its coefficient (Megatron's
 * switch_load_balancing_loss_func / coeff): E/(k·T²) · Σ_i count_i · Σ_t softmax(logits)_ti,
 * = E · Σ_i f_i · P_i. [1]; differentiable in logits through the probabilities. */
mg_tensor *mg_moe_aux_loss(mg_graph *g, mg_tensor *logits, int topk);
/* The same on given scores [T, E] (softmax(logits), or mg_sigmoid_norm(logits) with
 * sigmoid routing; the counts are top-k of the logits either way). */
mg_tensor *mg_moe_aux_loss_scores(mg_graph *g, mg_tensor *scores, mg_tensor *logits, int topk);
/* DeepSeek's sequence-level balancing loss without its coefficient (Megatron's
 * seq_aux_loss): the aux loss of each of the micro-batch's samples on its own tokens
 * (T = s·samples, in [s, b] order), averaged over the samples. [1]. */
mg_tensor *mg_moe_seq_aux_loss(mg_graph *g, mg_tensor *scores, mg_tensor *logits, int topk, int64_t samples);
/* ST-MoE router z-loss without its coefficient: mean_t logsumexp(logits_t)². [1]. */
mg_tensor *mg_moe_z_loss(mg_graph *g, mg_tensor *logits);

#ifdef __cplusplus
}
#endif
#endif

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
} mg_moe_route_opts;

/* Megatron's expert capacity: ceil(T·k / E · factor). */
int64_t mg_moe_capacity(int64_t tokens, int topk, int experts, double factor);
/* The static row bound of the dispatch buffer for these options. */
int64_t mg_moe_dispatch_rows(int64_t tokens, int experts, const mg_moe_route_opts *o);

/* Router on logits [T, E]: top-k selection by logit (ties: lower expert index),
 * weights = softmax over the k selected logits, or (pre_softmax) the selected
 * entries of the softmax over all E; then the capacity mask. Outputs: *probs
 * [T, E] f32 (zero where not routed) and *map [T, E] i32 (1 where routed).
 * Differentiable in logits through probs. Returns 0 or a status (recorded). */
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
/* log sum exp over the last dimension: [..., N] -> [...] ([1] for a 1-D input). */
mg_tensor *mg_logsumexp(mg_graph *g, mg_tensor *x);

/* Switch/GShard load-balancing loss without its coefficient (Megatron's
 * switch_load_balancing_loss_func / coeff): E/(k·T²) · Σ_i count_i · Σ_t softmax(logits)_ti,
 * = E · Σ_i f_i · P_i. [1]; differentiable in logits through the probabilities. */
mg_tensor *mg_moe_aux_loss(mg_graph *g, mg_tensor *logits, int topk);
/* ST-MoE router z-loss without its coefficient: mean_t logsumexp(logits_t)². [1]. */
mg_tensor *mg_moe_z_loss(mg_graph *g, mg_tensor *logits);

#ifdef __cplusplus
}
#endif
#endif

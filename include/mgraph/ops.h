/* Op constructors: the graph-builder API.
 *
 * Each call checks its inputs' shapes, records one node and returns its output.
 * Nothing runs. On a shape error the call returns NULL and records a message naming
 * the op and the shapes (mg_graph_error); a NULL input makes a call return NULL
 * without overwriting the first error.
 *
 * Broadcasting (add/sub/mul): numpy rules, shapes aligned on the last dimension,
 * a dimension of 1 (or a missing one) stretches.
 */
#ifndef MGRAPH_OPS_H
#define MGRAPH_OPS_H

#include "mgraph/graph.h"

#ifdef __cplusplus
extern "C" {
#endif

/* C = op(A) · op(B). A [..., M, K] (or [..., K, M] with trans_a); B [K, N] (or [N, K]
 * with trans_b) is shared over A's leading dims, or B has A's batch dims (batched). */
mg_tensor *mg_matmul(mg_graph *g, mg_tensor *a, mg_tensor *b, bool trans_a, bool trans_b);
/* y = x · Wᵀ (+ b): W [out, in], as torch.nn.Linear. b may be NULL. */
mg_tensor *mg_linear(mg_graph *g, mg_tensor *x, mg_tensor *w, mg_tensor *b);

mg_tensor *mg_add(mg_graph *g, mg_tensor *a, mg_tensor *b);
mg_tensor *mg_sub(mg_graph *g, mg_tensor *a, mg_tensor *b);
mg_tensor *mg_mul(mg_graph *g, mg_tensor *a, mg_tensor *b);
mg_tensor *mg_scale(mg_graph *g, mg_tensor *x, float s);
/* x's values stored as `to` (f32, bf16, f16, fp8: rounded to nearest even); the gradient
 * passes through unchanged. */
mg_tensor *mg_cast(mg_graph *g, mg_tensor *x, mg_dtype to);
/* x [..., N] + b [N] */
mg_tensor *mg_bias_add(mg_graph *g, mg_tensor *x, mg_tensor *b);

/* Normalisations over the last dimension. w, b: [N]. */
mg_tensor *mg_layernorm(mg_graph *g, mg_tensor *x, mg_tensor *w, mg_tensor *b, float eps);
mg_tensor *mg_rmsnorm(mg_graph *g, mg_tensor *x, mg_tensor *w, float eps);

mg_tensor *mg_gelu(mg_graph *g, mg_tensor *x);     /* tanh approximation (GPT-2) */
mg_tensor *mg_gelu_erf(mg_graph *g, mg_tensor *x); /* exact x Φ(x) (torch's F.gelu) */
mg_tensor *mg_squared_relu(mg_graph *g, mg_tensor *x); /* relu(x)² (Megatron's --squared-relu) */
mg_tensor *mg_silu(mg_graph *g, mg_tensor *x);
/* x [..., 2F] -> silu(x[..., :F]) * x[..., F:]  (Megatron's gated layout: gate first) */
mg_tensor *mg_swiglu(mg_graph *g, mg_tensor *x);
mg_tensor *mg_softmax(mg_graph *g, mg_tensor *x);  /* over the last dimension */

/* Fused self-attention per head: scores, optional causal mask, softmax, dropout,
 * weighted sum. q [s, b, nh, hd], k [s, b, ng, hd] and v [s, b, ng, hv] with nh % ng == 0
 * (grouped-query attention: q head h uses kv group h / (nh/ng)). Output [s, b, nh, hv]. */
mg_tensor *mg_attention(mg_graph *g, mg_tensor *q, mg_tensor *k, mg_tensor *v, bool causal,
                        float dropout_p);
/* Causal attention with Megatron's masks: query i of sample b sees keys j with
 * max(doc_start[i, b], i - window + 1) <= j <= i. doc_start (i32) [s, b], the sequence
 * index where query i's document starts (--reset-attention-mask), or NULL: 0. window > 0:
 * a sliding window of that many keys (--window-size window-1,0; Hugging Face's
 * sliding_window), 0: none. */
mg_tensor *mg_attention_masked(mg_graph *g, mg_tensor *q, mg_tensor *k, mg_tensor *v, mg_tensor *doc_start,
                               int64_t window, float dropout_p);
/* mg_attention_masked with the softmax scale given (0: 1 / sqrt(q's head size)): YaRN's
 * attention factor squared over sqrt(head size) in multi-latent attention. v's head size
 * may differ from q's and k's (the output has v's). */
mg_tensor *mg_attention_scaled(mg_graph *g, mg_tensor *q, mg_tensor *k, mg_tensor *v, mg_tensor *doc_start,
                               int64_t window, float dropout_p, float scale);

/* ids (i32, any shape) -> ids.shape + [h], rows of table [V, h]. */
mg_tensor *mg_embedding(mg_graph *g, mg_tensor *ids, mg_tensor *table);
/* Mean over tokens whose target != ignore_index of -log softmax(logits)[target].
 * logits [..., V], targets (i32) [...]. Output: scalar [1]. Two nodes: xent_count
 * (the tokens kept, the mean's denominator) and cross_entropy (ops/cross_entropy.c). */
mg_tensor *mg_cross_entropy(mg_graph *g, mg_tensor *logits, mg_tensor *targets, int32_t ignore_index);
/* Rotary embedding on x [s, b, nh, hd] (hd even, rotate-half / NeoX pairing as
 * LLaMA in Hugging Face), positions pos (i32) [s], or [s, b]: each sample its own. */
mg_tensor *mg_rope(mg_graph *g, mg_tensor *x, mg_tensor *pos, float theta);
/* Partial rotary embedding (Megatron's --rotary-percent): the first rot_dim channels of
 * each head rotated as mg_rope on a head of rot_dim (frequencies theta^(-2i/rot_dim)),
 * the rest passed through. Built from split, rope and concat; rot_dim == hd is mg_rope. */
mg_tensor *mg_rope_partial(mg_graph *g, mg_tensor *x, mg_tensor *pos, float theta, int64_t rot_dim);
/* The same with Megatron's options (mg_attr_rope; its `inverse` is ignored): interleaved
 * pairs, Llama 3.1 or YaRN frequency scaling, cos and sin times mscale. */
mg_tensor *mg_rope_ex(mg_graph *g, mg_tensor *x, mg_tensor *pos, const mg_attr_rope *o);
mg_tensor *mg_rope_partial_ex(mg_graph *g, mg_tensor *x, mg_tensor *pos, const mg_attr_rope *o, int64_t rot_dim);
/* The angle per position of pair i of a rotary dimension rot_dim under o's scaling (what
 * the kernels rotate by): theta^(-2i/rot_dim), rescaled. */
double mg_rope_inv_freq(const mg_attr_rope *o, int64_t rot_dim, int64_t i);
/* YaRN's attention factor 0.1 * m * ln(factor) + 1 (1 for factor <= 1): Megatron's
 * _yarn_get_mscale, Hugging Face's get_mscale. */
double mg_yarn_mscale(double factor, double m);
/* Inverted dropout; the mask is a pure function of (seed, name, iteration,
 * micro-batch, element). p == 0 returns x itself. */
mg_tensor *mg_dropout(mg_graph *g, mg_tensor *x, float p);

mg_tensor *mg_reshape(mg_graph *g, mg_tensor *x, int ndim, const int64_t *shape);
mg_tensor *mg_transpose(mg_graph *g, mg_tensor *x, const int *perm);
/* Splits along dim into n parts of the given sizes; outs[i] receives part i. */
int mg_split(mg_graph *g, mg_tensor *x, int dim, int n, const int64_t *sizes, mg_tensor **outs);
mg_tensor *mg_concat(mg_graph *g, int n, mg_tensor *const *xs, int dim);
mg_tensor *mg_slice(mg_graph *g, mg_tensor *x, int dim, int64_t start, int64_t len);
/* Reductions; dim may be MG_ALL_AXES (result [1] unless keepdim). */
mg_tensor *mg_sum(mg_graph *g, mg_tensor *x, int dim, bool keepdim);
mg_tensor *mg_mean(mg_graph *g, mg_tensor *x, int dim, bool keepdim);
/* Broadcast x to shape (numpy rules) / sum x down to shape (the adjoint). */
mg_tensor *mg_expand(mg_graph *g, mg_tensor *x, int ndim, const int64_t *shape);
mg_tensor *mg_sum_to(mg_graph *g, mg_tensor *x, int ndim, const int64_t *shape);
/* Zero tensor of `len` along dim with x placed at [start, start + x.shape[dim]). */
mg_tensor *mg_pad(mg_graph *g, mg_tensor *x, int dim, int64_t start, int64_t len);
mg_tensor *mg_zeros(mg_graph *g, mg_dtype dt, int ndim, const int64_t *shape);
/* x moved `by` places towards index 0 along dim (< 0: from the end; by < 0: away from
 * index 0), the places it leaves filled with `fill`: y[i] = x[i + by] where
 * 0 <= i + by < n, else fill. Any dtype
 * (token ids, labels: multi-token prediction's roll of Megatron's roll_tensor); f32 is
 * differentiable (the adjoint shifts back, filling 0). */
mg_tensor *mg_shift(mg_graph *g, mg_tensor *x, int dim, int64_t by, double fill);

#ifdef __cplusplus
}
#endif
#endif

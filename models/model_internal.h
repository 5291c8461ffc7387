/* Helpers the model files share (models/ only): parameter creation with Megatron's
 * initialisation and weight-decay rules, the model's norm. */
#ifndef MG_MODELS_INTERNAL_H
#define MG_MODELS_INTERNAL_H

#include "mgraph/model.h"
#include "mgraph/ops.h"

/* A matrix parameter "<name>" [rows, cols], normal(0, std). */
mg_tensor *gpt_weight(mg_graph *g, const char *name, int64_t rows, int64_t cols, float std);
/* A vector parameter [n] initialised `init`, without weight decay (norms and biases). */
mg_tensor *gpt_vec(mg_graph *g, const char *name, int64_t n, mg_init_kind init);
/* "<name>.weight" [out, in] and, with `bias`, "<name>.bias" (else *b = NULL), with their
 * tensor-parallel layout role (MG_LAYOUT_COLUMN, _ROW or _REPLICATED: mg_tensor.layout). */
void gpt_linear_params(mg_graph *g, const char *name, int64_t out, int64_t in, float std, bool bias, mg_layout lay,
                       mg_tensor **w, mg_tensor **b);
/* A norm of n features: "<name>.weight" (ones) and, for LayerNorm, "<name>.bias" (zeros). */
void gpt_norm_params(mg_graph *g, const mg_gpt_config *c, const char *name, int64_t n, mg_tensor **w, mg_tensor **b);
/* The model's norm (--normalization) of x over its last dimension. */
mg_tensor *gpt_norm(mg_graph *g, const mg_gpt_config *c, mg_tensor *x, mg_tensor *w, mg_tensor *b);

/* Layer l's attention inputs for x [s, b, h]: q [s, b, nh, hd], k and v [s, b, G, hd]
 * after the per-head norms and RoPE at positions (models/gpt2.c; the training forward
 * and the key/value-cache decoder share it). */
void gpt_attn_qkv(mg_graph *g, const mg_gpt *m, const mg_gpt_layer *l, mg_tensor *x, mg_tensor *positions,
                  mg_tensor **q, mg_tensor **k, mg_tensor **v);
/* Layer l's dense MLP block: x [s, b, h] -> [s, b, h] (before the residual add). */
mg_tensor *gpt_mlp_block(mg_graph *g, const mg_gpt *m, const mg_gpt_layer *l, mg_tensor *x, bool training);

/* One decoder layer's parameters in the current scope (MoE in place of the MLP when moe). */
void gpt_layer_params(mg_graph *g, const mg_gpt_config *c, mg_gpt_layer *l, bool moe);
/* One decoder layer: x [s, b, h] -> x + attention, + MLP or MoE (its losses added to *aux). */
mg_tensor *gpt_transformer_layer(mg_graph *g, const mg_gpt *m, const mg_gpt_layer *l, mg_tensor *x, mg_tensor *positions,
                                 mg_tensor *doc_start, int64_t window, bool training, mg_gpt_aux *aux);

/* Multi-latent attention (models/mla.c): one layer's parameters in the current scope
 * (Hugging Face DeepseekV3's names under self_attn.), and its block: x [s, b, h] ->
 * [s, b, h] (before the residual add). */
void mg_mla_layer_params(mg_graph *g, const mg_gpt_config *c, mg_gpt_layer *l, float std, float out_std);
mg_tensor *mg_mla_block(mg_graph *g, const mg_gpt *m, const mg_gpt_layer *l, mg_tensor *x, mg_tensor *positions,
                        mg_tensor *doc_start, int64_t window, bool training);
/* The block's queries [s, b, nh, qk + rope], keys (the same size: the shared RoPE part
 * broadcast to every head) and values [s, b, nh, v], in the caller's scope. */
void mg_mla_qkv(mg_graph *g, const mg_gpt *m, const mg_gpt_layer *l, mg_tensor *x, mg_tensor *positions,
                mg_tensor **q, mg_tensor **k, mg_tensor **v);

#endif

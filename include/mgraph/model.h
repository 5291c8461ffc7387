/* Models written with the builder API, and the training step built from them.
 *
 * A model is (1) its parameters, created once per graph with Hugging Face names, and
 * (2) a forward function for one micro-batch. The step builder (below) makes one
 * micro-batch's forward and backward the per-micro-batch part of the step graph.
 */
#ifndef MGRAPH_MODEL_H
#define MGRAPH_MODEL_H

#include "mgraph/graph.h"
#include "mgraph/moe.h"
#include "mgraph/step.h"
#include "mgraph/train.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Megatron's --normalization / --position-embedding-type choices. The zero values are
 * GPT-2's, so a zeroed config plus sizes is a GPT-2. */
typedef enum mg_norm_kind { MG_NORM_LAYERNORM = 0, MG_NORM_RMSNORM } mg_norm_kind;
typedef enum mg_pos_emb_kind { MG_POS_LEARNED = 0, MG_POS_ROPE, MG_POS_NONE } mg_pos_emb_kind;

/* The load-balancing loss (Megatron's --moe-router-load-balancing-type). */
typedef enum mg_moe_balance { MG_MOE_AUX_LOSS = 0, MG_MOE_SEQ_AUX_LOSS, MG_MOE_NO_BALANCING_LOSS } mg_moe_balance;
/* The most layers a --moe-layer-freq list describes. */
#define MG_MOE_MAX_LAYERS 512

/* Mixture of experts in place of the MLP (Megatron's --num-experts ... flags); the
 * experts use the model's activation (SwiGLU with --swiglu, else GELU). */
typedef struct mg_moe_config {
    int num_experts;            /* 0: every layer has the dense MLP */
    int ffn_hidden;             /* --moe-ffn-hidden-size; 0: the model's ffn_hidden */
    int topk;                   /* --moe-router-topk (2) */
    bool pre_softmax;           /* --moe-router-pre-softmax */
    float aux_loss_coeff;       /* --moe-aux-loss-coeff (0: no load-balancing loss) */
    float z_loss_coeff;         /* --moe-z-loss-coeff (0: none) */
    int layer_freq;             /* --moe-layer-freq N: layer i is MoE when i % N == 0 (1: all) */
    double capacity_factor;     /* --moe-expert-capacity-factor; 0: dropless */
    mg_moe_drop_policy drop_policy; /* --moe-token-drop-policy probs|position */
    bool pad_to_capacity;       /* --moe-pad-expert-input-to-capacity */
    /* DeepSeek-V3's router and balancing */
    mg_moe_score score;         /* --moe-router-score-function softmax | sigmoid */
    int num_groups, group_topk; /* --moe-router-num-groups, --moe-router-group-topk (0: no groups) */
    float topk_scaling;         /* --moe-router-topk-scaling-factor (0: none) */
    bool expert_bias;           /* --moe-router-enable-expert-bias: aux-loss-free balancing */
    float bias_update_rate;     /* --moe-router-bias-update-rate (1e-3) */
    mg_moe_balance balance;     /* --moe-router-load-balancing-type aux_loss | seq_aux_loss | none */
    int shared_ffn;             /* --moe-shared-expert-intermediate-size: shared experts' MLP (0: none) */
    /* --moe-layer-freq as a list ([0]*3+[1]*58): bit i of layer_pattern is layer i; pattern_len
     * 0: layer_freq decides */
    int pattern_len;
    uint64_t layer_pattern[MG_MOE_MAX_LAYERS / 64];
} mg_moe_config;

/* RoPE's frequencies and pairing (ops/rope.c, mg_attr_rope). */
typedef struct mg_rope_config {
    mg_rope_scaling scaling;    /* --use-rope-scaling: LLAMA3; --position-embedding-type yarn and multi-latent
                                   attention (Megatron's MLA default rope_type): YARN */
    float factor;               /* LLAMA3: --rope-scaling-factor (8); YARN: --rotary-scaling-factor (1) */
    int original_max_pos;       /* LLAMA3: 8192 (Megatron's); YARN: --yarn-original-max-position-embeddings (4096) */
    float low_freq_factor, high_freq_factor; /* LLAMA3: 1, 4 (Megatron's) */
    float beta_fast, beta_slow; /* YARN: --yarn-beta-fast (32), --yarn-beta-slow (1) */
    bool no_round;              /* YARN: --no-yarn-correction-range-round-to-int */
    float mscale, mscale_all_dim; /* YARN: --mscale (1), --mscale-all-dim (0): cos and sin times
                                     mscale(factor, mscale) / mscale(factor, mscale_all_dim); multi-latent
                                     attention's softmax scale times mscale(factor, mscale_all_dim)^2 */
    bool interleaved;           /* --rotary-interleaved: pairs (x_2i, x_2i+1) */
} mg_rope_config;

/* Multi-latent attention (Megatron's --multi-latent-attention, DeepSeek-V2/V3): queries
 * from a low-rank latent (or the hidden state), keys and values from one shared latent of
 * kv_lora_rank, each head's q/k made of a part without position (qk_head_dim) and a RoPE
 * part (qk_pos_emb_head_dim, the key's shared by all heads), values of v_head_dim. The
 * latents are normalised (the model's norm) with --qk-layernorm. */
typedef struct mg_mla_config {
    bool enabled;
    int q_lora_rank;            /* --q-lora-rank; 0: q projected from the hidden state (no latent) */
    int kv_lora_rank;           /* --kv-lora-rank (32) */
    int qk_head_dim;            /* --qk-head-dim (128) */
    int qk_pos_emb_head_dim;    /* --qk-pos-emb-head-dim (64) */
    int v_head_dim;             /* --v-head-dim (128) */
} mg_mla_config;

/* One GPT with Megatron's options (as Megatron's GPTModel): GPT-2 is LayerNorm, learned
 * absolute positions, GELU MLP, biases, tied output layer; LLaMA / Mistral are RMSNorm,
 * RoPE, SwiGLU, grouped-query attention, no biases, untied output layer. */
typedef struct mg_gpt_config {
    int num_layers;
    int hidden;
    int ffn_hidden;          /* default 4 * hidden */
    int heads;
    int seq_length;
    int max_position;        /* learned position table size */
    int64_t vocab;           /* padded vocabulary (Megatron: multiple of 128 * tp) */
    float init_std;          /* --init-method-std */
    float hidden_dropout, attention_dropout;
    float ln_eps;            /* --norm-epsilon, 1e-5 */
    mg_norm_kind norm;       /* --normalization */
    mg_pos_emb_kind pos_emb; /* --position-embedding-type */
    float rotary_base;       /* --rotary-base (10000) */
    float rotary_percent;    /* --rotary-percent (1.0): RoPE on the first percent of each head */
    bool swiglu;             /* --swiglu: gate and up projections of ffn_hidden each */
    bool squared_relu;       /* --squared-relu: the MLP's activation relu(x)² instead of GELU (Nemotron) */
    bool gelu_exact;         /* --no-bias-gelu-fusion: the exact GELU x Φ(x) (Megatron's unfused MLP,
                                torch's F.gelu) instead of the tanh approximation (its fused
                                bias-GELU, the default; GPT-2's gelu_new) */
    int query_groups;        /* --num-query-groups with --group-query-attention; 0 = heads */
    bool untie_embeddings;   /* --untie-embeddings-and-output-weights */
    bool disable_bias_linear;/* --disable-bias-linear: no bias on QKV, projection, MLP */
    bool add_qkv_bias;       /* --add-qkv-bias: biases on q, k and v even so (Qwen2) */
    bool qk_layernorm;       /* --qk-layernorm: q and k each normalised per head (the model's norm
                                over the head dim, weights [head dim]) before RoPE (Qwen3, OLMo 2) */
    bool qk_layernorm_wd;    /* --apply-wd-to-qk-layernorm: weight decay on those norm weights */
    bool qk_l2_norm;         /* --qk-l2-norm: q and k each scaled to unit RMS per head, without weights
                                (Megatron's L2Norm, where --qk-layernorm's norms would be; Llama 4) */
    int window;              /* --window-size W-1,0: sliding-window attention, each query sees its
                                last W keys (itself included; Hugging Face's sliding_window); 0: none */
    int window_skip_freq;    /* --window-attn-skip-freq N: layers N, 2N, ... (1-based) attend over
                                the whole sequence, the others over the window; 0: every layer windowed */
    int kv_channels;         /* --kv-channels: each head's q/k/v size (Qwen3, Gemma); 0: hidden / heads */
    mg_rope_config rope;     /* RoPE's frequency scaling and pairing */
    mg_mla_config mla;       /* --multi-latent-attention in place of q/k/v projections */
    mg_moe_config moe;
    /* Multi-token prediction (Megatron's --mtp-num-layers, --mtp-loss-scaling-factor; DeepSeek-V3):
     * after the model, mtp_num_layers blocks each predict one token further (models/mtp.c) */
    int mtp_num_layers;           /* 0: none; at most MG_MTP_MAX_LAYERS */
    float mtp_loss_scaling_factor; /* 0.1 (Megatron's): the objective gains factor / N x sum of the MTP losses */
} mg_gpt_config;

/* The most multi-token prediction layers a model has (each is one logged metric). */
#define MG_MTP_MAX_LAYERS 6

/* Megatron-ish defaults for a small model; the caller sets sizes. */
mg_gpt_config mg_gpt_defaults(void);
/* Checks the config on its own: sizes positive, heads divide hidden, seq <= max
 * position, ... MG_ERR_INVALID naming the rule. */
int mg_gpt_check(const mg_gpt_config *c, mg_error *err);
/* Key/value head groups (query_groups, or heads when 0) and RoPE's rotated dims per head
 * (Megatron: int(head_dim * rotary_percent)). */
int mg_gpt_kv_groups(const mg_gpt_config *c);
int mg_gpt_rotary_dim(const mg_gpt_config *c);
/* Each head's query/key size (kv_channels, or hidden / heads; MLA: qk_head_dim +
 * qk_pos_emb_head_dim) and value size (the same; MLA: v_head_dim). */
int mg_gpt_head_dim(const mg_gpt_config *c);
int mg_gpt_value_head_dim(const mg_gpt_config *c);
/* The rope op's attributes for a rotated dimension of the model (frequencies, pairing,
 * YaRN's cos/sin factor). */
mg_attr_rope mg_gpt_rope_attrs(const mg_gpt_config *c);
/* The attention softmax scale: 1 / sqrt(head dim), times YaRN's mscale(factor,
 * mscale_all_dim)^2 in multi-latent attention (Megatron's MLA softmax_scale). */
float mg_gpt_softmax_scale(const mg_gpt_config *c);
/* The sliding window of layer i (0-based), in keys: cfg.window, or 0 (whole sequence)
 * where --window-attn-skip-freq makes the layer a full-attention one (Megatron's
 * is_layer_window_attention). */
int mg_gpt_layer_window(const mg_gpt_config *c, int layer);
/* True when the config is exactly GPT-2's architecture (then parameters have GPT-2's
 * Hugging Face names); any LLaMA option selects Hugging Face LLaMA names. */
bool mg_gpt_is_gpt2(const mg_gpt_config *c);
int64_t mg_gpt_num_params(const mg_gpt_config *c);
/* Model FLOPs of one iteration over `samples` sequences (forward + backward, no
 * recomputation), Megatron's count: 72·B·s·L·h²·(1 + s/(12h) + V/(12·L·h)) for ffn = 4h
 * (causal attention halved, as Megatron's code), generalised to any ffn. */
double mg_gpt_flops(const mg_gpt_config *c, int64_t samples);

/* A NULL tensor is one the config does not have (biases with --disable-bias-linear or
 * RMSNorm, the gate without --swiglu, wpe without learned positions, lm_head when tied). */
typedef struct mg_gpt_layer {
    mg_tensor *ln1_w, *ln1_b;
    mg_tensor *qkv_w, *qkv_b;                          /* GPT-2: fused, per head [q k v] */
    mg_tensor *q_w, *q_b, *k_w, *k_b, *v_w, *v_b;      /* LLaMA names: separate */
    mg_tensor *q_norm_w, *q_norm_b, *k_norm_w, *k_norm_b; /* --qk-layernorm: [head dim] */
    /* multi-latent attention (Hugging Face DeepseekV3's names under self_attn.): q_a_proj [q_lora, h],
     * q_a_layernorm [q_lora] (with --qk-layernorm), q_b_proj [nh·(qk + rope), q_lora], or q_w (q_proj)
     * [nh·(qk + rope), h] without a q latent; kv_a_proj_with_mqa [kv_lora + rope, h], kv_a_layernorm
     * [kv_lora], kv_b_proj [nh·(qk + v), kv_lora] (per head [k_nope v]); proj_w (o_proj) [h, nh·v] */
    mg_tensor *q_a_w, *q_a_norm_w, *q_a_norm_b, *q_b_w, *kv_a_w, *kv_a_norm_w, *kv_a_norm_b, *kv_b_w;
    mg_tensor *proj_w, *proj_b;
    mg_tensor *ln2_w, *ln2_b;
    mg_tensor *gate_w, *gate_b, *fc_w, *fc_b, *fc2_w, *fc2_b; /* gate, up (c_fc), down (c_proj) */
    /* MoE layers (no dense MLP): mlp.router.weight [E, h], mlp.experts.fc1.weight
     * [E, F (2F with SwiGLU: gate then up), h], mlp.experts.fc2.weight [E, h, F];
     * mlp.router.expert_bias [E] (--moe-router-enable-expert-bias: a parameter without
     * gradient, stepped by the routed token counts); shared experts
     * mlp.shared_experts.{gate_proj, up_proj, down_proj} (gate with SwiGLU, biases beside) */
    mg_tensor *router_w, *experts_fc1_w, *experts_fc2_w, *expert_bias;
    mg_tensor *shared_gate_w, *shared_gate_b, *shared_fc_w, *shared_fc_b, *shared_fc2_w, *shared_fc2_b;
} mg_gpt_layer;

/* One multi-token prediction layer (Megatron's MultiTokenPredictionLayer, Hugging Face
 * DeepseekV3's model.layers.<num_layers + k>.*): enorm and hnorm (the model's norm) of the
 * shifted tokens' embedding and of the previous depth's hidden state, eh_proj [h, 2h] on
 * their concatenation, one transformer layer (the last decoder layer's kind: MoE when it
 * is), the final norm shared_head.norm. The embedding and output layer are the model's. */
typedef struct mg_gpt_mtp {
    mg_tensor *enorm_w, *enorm_b, *hnorm_w, *hnorm_b, *eh_proj_w, *norm_w, *norm_b;
    mg_gpt_layer layer;
} mg_gpt_mtp;

typedef struct mg_gpt {
    mg_gpt_config cfg;
    mg_tensor *wte, *wpe, *lnf_w, *lnf_b, *lm_head;
    mg_tensor *unit_hd;      /* --qk-l2-norm: ones [head dim], an input: the weightless norm's weight */
    mg_gpt_layer *layers;    /* owned */
    mg_gpt_mtp *mtp;         /* owned: cfg.mtp_num_layers of them (NULL: none) */
} mg_gpt;

/* The model's parameters. Linear weights are [out, in] (torch.nn.Linear, not HF's
 * Conv1D). Output projections use GPT-2's scaled init std / sqrt(2 L).
 *
 * GPT-2 (mg_gpt_is_gpt2): wte.weight [V, h], wpe.weight [P, h], h.<i>.ln_1 /
 * attn.c_attn / attn.c_proj / ln_2 / mlp.c_fc / mlp.c_proj (.weight, .bias), ln_f.
 * c_attn's output is grouped per head as Megatron lays it out ([q_h, k_h, v_h] for
 * each head h), so tensor parallelism takes whole heads.
 *
 * Otherwise Hugging Face LLaMA names: model.embed_tokens.weight [V, h],
 * model.layers.<i>.input_layernorm.weight, self_attn.{q,k,v,o}_proj.weight (q [nh·hd, h],
 * k and v [G·hd, h], heads contiguous as HF's view(..., heads, head_dim)),
 * post_attention_layernorm.weight, mlp.{gate,up,down}_proj.weight, model.norm.weight,
 * lm_head.weight [V, h] when untied; .bias beside each where the config has one;
 * with --qk-layernorm self_attn.q_norm.weight and k_norm.weight [hd] (Qwen3's names;
 * .bias beside them with LayerNorm);
 * model.embed_positions.weight [P, h] with learned positions. */
int mg_gpt2_params(mg_graph *g, const mg_gpt_config *c, mg_gpt *out, mg_error *err);
void mg_gpt_release(mg_gpt *m);
/* A label the loss leaves out (PyTorch's ignore_index): the host writes it where
 * Megatron's loss mask is 0 (mgraph-run --eod-mask-loss). */
#define MG_LABEL_IGNORE (-100)

/* Forward of one micro-batch: tokens, targets [s, b] (i32), positions [s] or, each
 * sample its own (--reset-position-ids), [s, b] (i32): the learned position table's
 * rows, or RoPE's angles.
 * Returns the mean cross-entropy over the micro-batch's tokens whose label is not
 * MG_LABEL_IGNORE ([1]; 0 when every label is). */
mg_tensor *mg_gpt2_forward(mg_graph *g, const mg_gpt *m, mg_tensor *tokens, mg_tensor *positions,
                           mg_tensor *targets, bool training);

/* The MoE auxiliary losses of one micro-batch's forward (all NULL for a dense model
 * or when not training, as Megatron computes them only in training). */
typedef struct mg_gpt_aux {
    mg_tensor *loss;                /* Σ over MoE layers of aux_coeff·lb + z_coeff·z: add to the training loss */
    mg_tensor *load_balancing_loss; /* mean over MoE layers of lb (without coefficient; logged as Megatron) */
    mg_tensor *z_loss;              /* mean over MoE layers of the z-loss (without coefficient) */
    mg_tensor *tokens;              /* [1] the micro-batch's labels not MG_LABEL_IGNORE: the lm loss's denominator */
    /* multi-token prediction (training only, as Megatron): mtp[k] the mean cross-entropy of depth
     * k + 1 over its kept labels (the labels moved k + 1 places, the places past the end left out);
     * mtp_loss = mtp_loss_scaling_factor / N x their sum, the objective's term (not in loss) */
    mg_tensor *mtp[MG_MTP_MAX_LAYERS];
    mg_tensor *mtp_loss;
} mg_gpt_aux;
/* As mg_gpt2_forward, returning the language-model loss alone and the auxiliary losses
 * in *aux. (mg_gpt2_forward returns lm loss + aux->loss + aux->mtp_loss: the training
 * objective.)
 * doc_start (i32) [s, b], or NULL: attention within documents (--reset-attention-mask),
 * each token's document starting at that sequence index (mg_attention_masked). */
mg_tensor *mg_gpt2_forward_aux(mg_graph *g, const mg_gpt *m, mg_tensor *tokens, mg_tensor *positions,
                               mg_tensor *doc_start, mg_tensor *targets, bool training, mg_gpt_aux *aux);

/* ---- decoding with a key/value cache (models/gpt_decode.c) ----------------------------
 * Text generation runs the model forward over n new tokens of one sequence (batch 1) at
 * positions p .. p+n-1, attending to the keys and values of the p tokens before them,
 * which the host keeps (the cache): a prefill graph (cache_len 0, the prompt at once,
 * the training forward's fused causal attention) and a decode graph (n = 1, cache_len
 * rows of cache, attention as matmul / mask / softmax / matmul over the cache and the new
 * key). The graph returns the new tokens' keys and values (after the per-head norms and
 * RoPE, as attention reads them) for the host to append, and the last token's logits.
 * Dense GPT and LLaMA-family models (GQA, biases, q/k norms, RoPE and its scalings, sliding
 * windows); MoE and multi-latent attention are MG_ERR_UNSUPPORTED. */
typedef struct mg_gpt_decode {
    int n_new, cache_len, n_layers;
    mg_tensor *tokens;      /* input [n, 1] (i32) "decode.input_ids" */
    mg_tensor *positions;   /* input [n] (i32) "decode.position_ids": p .. p+n-1 */
    mg_tensor *mask;        /* input [n, cache_len + n] (f32) "decode.mask": 0 where query i sees key j
                               (cache rows, then the new keys), -inf elsewhere (mg_gpt_decode_fill_mask);
                               NULL when cache_len == 0 */
    mg_tensor *mask_window; /* the same for the sliding-window layers (NULL: none) */
    mg_tensor **cache_k, **cache_v; /* [n_layers] inputs [cache_len, 1, G, hd] / [cache_len, 1, G, hv] (NULL: cache_len 0) */
    mg_tensor **new_k, **new_v;     /* [n_layers] outputs [n, 1, G, hd] / [n, 1, G, hv] (persistent) */
    mg_tensor *logits;      /* output [1, 1, V] (persistent): the last new token's */
} mg_gpt_decode;

/* Builds that forward in g on m's parameters (created in g by mg_gpt2_params). */
int mg_gpt_decode_build(mg_graph *g, const mg_gpt *m, int n_new, int cache_len, mg_gpt_decode *out, mg_error *err);
void mg_gpt_decode_release(mg_gpt_decode *d);
/* Fills a mask [n, cache_len + n] for new tokens at positions p .. p+n-1, cache rows
 * 0 .. p-1 valid (p <= cache_len): query i sees cache row j < p and new key k <= i, those
 * within `window` keys of it when window > 0 (Megatron's --window-size). */
void mg_gpt_decode_fill_mask(int n, int cache_len, int64_t p, int64_t window, float *mask);

/* Multi-token prediction (models/mtp.c): the layers' parameters (in g, after the
 * model's), and the forward of all depths from the model's final-normed hidden state h
 * [s, b, h] (marked MG_LAYER_POST: the last pipeline stage holds them, as Megatron puts
 * them), filling aux->mtp and aux->mtp_loss. */
int mg_mtp_params(mg_graph *g, const mg_gpt_config *c, mg_gpt *m);
void mg_mtp_forward(mg_graph *g, const mg_gpt *m, mg_tensor *h, mg_tensor *tokens, mg_tensor *positions,
                    mg_tensor *doc_start, mg_tensor *targets, bool training, mg_gpt_aux *aux);

/* MoE layer (models/moe.c). */
bool mg_moe_is_layer(const mg_gpt_config *c, int layer);
int mg_moe_check(const mg_gpt_config *c, mg_error *err);
/* Creates the router and expert weights of one layer in the current scope. */
void mg_moe_layer_params(mg_graph *g, const mg_gpt_config *c, mg_gpt_layer *l);
/* x [s, b, h] -> [s, b, h]; adds this layer's auxiliary losses to *aux (training). */
mg_tensor *mg_moe_block(mg_graph *g, const mg_gpt *m, const mg_gpt_layer *l, mg_tensor *x, bool training,
                        mg_gpt_aux *aux);

/* ---- the training / evaluation step --------------------------------------------------- */
/* The GPT family's step is built by the library's step builder (mgraph/step.h), which
 * any model uses the same way: ONE micro-batch's forward and backward (nodes with
 * mb == 0) and, once per step (nodes with mb == -1), what follows the last micro-batch:
 * gradient reductions, the optimizer, the mean loss. Executors run the per-micro-batch
 * part once per micro-batch of the step (mg_exec_info.n_micro), so the graph, the
 * partitioner's work and the activation memory do not grow with the global batch.
 * Gradients accumulate in place across micro-batches (Megatron's main_grad; op
 * accumulate), and so does the loss. The host sets `loss_scale` to 1 / (micro-batches
 * in the global batch): the per-micro-batch loss is scaled by it before backward, as
 * Megatron divides by the number of micro-batches. */
typedef struct mg_step_config {
    mg_gpt_config model;
    int micro_batch;         /* sequences per micro-batch */
    int n_micro;             /* micro-batches per step (global batch / micro batch): loss_scale's usual value */
    bool training;           /* false: forward only, no dropout (evaluation) */
    /* The reported loss (mg_step.loss) is the mean over the kept tokens of the whole
     * global batch, as Megatron logs it with a loss mask: each micro-batch's mean
     * weighted by its kept tokens x token_scale, which the host sets to 1 / the global
     * batch's kept tokens. What is trained is unchanged (each micro-batch's mean /
     * micro-batches). false: the reported loss is the trained one. */
    bool loss_token_mean;
    /* Megatron's --calculate-per-token-loss: what is trained is that mean over the kept
     * tokens of the global batch too (each micro-batch's sum / the batch's kept tokens;
     * the MoE auxiliary losses x token_scale, as Megatron scales them by 1 and divides
     * every gradient by the token count). Implies loss_token_mean. */
    bool per_token_loss;
    /* Megatron's --reset-position-ids: positions become a per-micro-batch input [s, b],
     * each sample's restarting at 0 after every end-of-document token (the host writes
     * them). false: one [s] input, 0..s-1, written once. */
    bool reset_position_ids;
    /* Megatron's --reset-attention-mask: a per-micro-batch input doc_start [s, b] (the
     * host writes each token's document start), and attention within documents. */
    bool reset_attention_mask;
    mg_adamw_config optim;
    mg_precision_options precision; /* zeroed: fp32 (mgraph/precision.h) */
    mg_fp8_options fp8;             /* zeroed: no fp8 (mgraph/fp8.h) */
} mg_step_config;

typedef struct mg_step {
    mg_graph *g;             /* owned */
    mg_gpt model;
    int n_micro;             /* from the config */
    mg_tensor *tokens;       /* per-micro-batch input [s, b] "input_ids" (mg_tensor.per_microbatch) */
    mg_tensor *targets;      /* per-micro-batch input [s, b] "labels" */
    mg_tensor *positions;    /* "position_ids": [s], 0..s-1; per micro-batch [s, b] with reset_position_ids */
    mg_tensor *doc_start;    /* reset_attention_mask: per-micro-batch [s, b] "doc_start"; else NULL */
    mg_tensor *loss_scale;   /* [1] input "loss_scale": 1 / micro-batches of the global batch */
    mg_tensor *token_scale;  /* [1] input "token_scale" (loss_token_mean, per_token_loss): 1 / kept tokens of the global batch; else NULL */
    mg_tensor *grad_scale;   /* [1] input "grad_scale" with fp16: the loss scale (mgraph/step.h); else NULL */
    mg_tensor *loss;         /* [1] "lm_loss": the mean loss over the step's micro-batches (or tokens: loss_token_mean) */
    mg_tensor *load_balancing_loss; /* MoE: [1] "load_balancing_loss", step mean, for the log; NULL when none */
    mg_tensor *z_loss;       /* MoE: [1] "z_loss", step mean, for the log; NULL when none */
    mg_tensor *mtp_loss[MG_MTP_MAX_LAYERS]; /* MTP: [1] "mtp_<k+1>_loss", step mean of depth k + 1's loss */
    mg_optimizer_outputs opt;/* NULL tensors when !training */
} mg_step;

int mg_step_build(const mg_step_config *c, mg_step *out, mg_error *err);
void mg_step_release(mg_step *s);

/* The GPT family as a model of the step builder (mg_forward_fn): user is a const
 * mg_step_config * (its model, reset_position_ids, reset_attention_mask). Per-micro-batch
 * inputs "input_ids", "labels" [s, b] (and "position_ids", "doc_start" [s, b] with the
 * document flags), "position_ids" [s] otherwise; the loss "lm_loss", the MoE metrics
 * "load_balancing_loss" and "z_loss". */
int mg_gpt_forward_fn(mg_graph *g, void *user, mg_microbatch *mb, mg_error *err);
/* The step builder's options for c (sizes, training, loss means, optimizer). */
mg_step_options mg_step_options_of(const mg_step_config *c);

#ifdef __cplusplus
}
#endif
#endif

/* Flag table and parser for mgraph-run. One table drives parsing, checking of
 * choices, the flags accepted without effect or refused, and --help. */
#include "run_config.h"

#include "mgraph/dot.h"
#include "mgraph/model.h"

#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* The compiled-in default corpus (Debian's fortunes, gathered at configure time). */
#ifndef MG_DEFAULT_CORPUS
#define MG_DEFAULT_CORPUS ""
#endif

/* F_LIST: one or more values up to the next flag (Megatron's nargs='*', --data-path).
 * F_INT3: exactly three 64-bit integers (nargs=3, --rampup-batch-size), into int64_t[3]. */
typedef enum { F_INT, F_I64, F_FLOAT, F_STR, F_BOOL, F_LIST, F_INT3 } ftype;
/* USE: mgraph does what Megatron does. NOOP: accepted, changes nothing here (a
 * warning says why). REFUSE: Megatron's flag, which mgraph cannot honour yet: the run
 * stops with exit 2 and the reason. */
typedef enum { USE, NOOP, REFUSE } fkind;

typedef struct flag {
    const char *name;
    ftype type;
    size_t off;           /* NOFF: the value is checked and dropped */
    fkind kind;
    const char *choices;  /* F_STR: "a|b|c" of the values allowed, or NULL */
    const char *help;     /* USE: what it does; NOOP / REFUSE: why */
} flag;

#define NOFF SIZE_MAX
#define O(f) offsetof(mg_run_config, f)
static const flag flags[] = {
    /* model */
    {"--num-layers", F_INT, O(num_layers), USE, NULL, "transformer layers"},
    {"--hidden-size", F_INT, O(hidden_size), USE, NULL, "hidden size h"},
    {"--ffn-hidden-size", F_INT, O(ffn_hidden_size), USE, NULL, "MLP hidden size (default 4h)"},
    {"--num-attention-heads", F_INT, O(num_attention_heads), USE, NULL, "attention heads (must divide h)"},
    {"--seq-length", F_INT, O(seq_length), USE, NULL, "tokens per sample"},
    {"--max-position-embeddings", F_INT, O(max_position_embeddings), USE, NULL, "position table size (default seq-length)"},
    {"--make-vocab-size-divisible-by", F_INT, O(make_vocab_size_divisible_by), USE, NULL, "vocab padding unit (x tp)"},
    {"--init-method-std", F_FLOAT, O(init_method_std), USE, NULL, "std of the normal weight init"},
    {"--hidden-dropout", F_FLOAT, O(hidden_dropout), USE, NULL, "dropout after embeddings, attention and MLP"},
    {"--attention-dropout", F_FLOAT, O(attention_dropout), USE, NULL, "dropout on attention probabilities"},
    {"--position-embedding-type", F_STR, O(position_embedding_type), USE,
     "learned_absolute|rope|yarn|mrope|relative|none", "learned_absolute (default) | rope | none"},
    {"--rotary-base", F_FLOAT, O(rotary_base), USE, NULL, "RoPE base theta (default 10000)"},
    {"--rotary-percent", F_FLOAT, O(rotary_percent), USE, NULL, "fraction of each head RoPE rotates (default 1.0)"},
    {"--normalization", F_STR, O(normalization), USE, "LayerNorm|RMSNorm", "LayerNorm (default) | RMSNorm"},
    {"--norm-epsilon", F_FLOAT, O(norm_epsilon), USE, NULL, "epsilon of the norms (default 1e-5)"},
    {"--swiglu", F_BOOL, O(swiglu), USE, NULL, "SwiGLU MLP: silu(gate(x)) * up(x) (ffn default int(8h/3/64)*64)"},
    {"--group-query-attention", F_BOOL, O(group_query_attention), USE, NULL,
     "grouped-query attention (with --num-query-groups)"},
    {"--num-query-groups", F_INT, O(num_query_groups), USE, NULL, "key/value head groups with --group-query-attention"},
    {"--untie-embeddings-and-output-weights", F_BOOL, O(untie_embeddings_and_output_weights), USE, NULL,
     "separate output layer (lm_head) instead of the word embedding"},
    {"--disable-bias-linear", F_BOOL, O(disable_bias_linear), USE, NULL, "no biases on the linear layers"},
    {"--kv-channels", F_INT, O(kv_channels), USE, NULL,
     "each attention head's q/k/v size (default hidden / heads; Qwen3's 128 with other sizes); not used by MLA"},
    {"--no-position-embedding", F_BOOL, O(no_position_embedding), USE, NULL,
     "no learned position table (--position-embedding-type learned_absolute becomes none; rope is unchanged)"},
    {"--apply-layernorm-1p", F_BOOL, NOFF, NOOP, NULL,
     "norm weights are kept as the weights, not as weight - 1; without weight decay on them (here and in Megatron) "
     "training is the same up to rounding"},
    {"--qk-layernorm", F_BOOL, O(qk_layernorm), USE, NULL,
     "queries and keys normalised per head (--normalization over the head dim) before RoPE"},
    {"--apply-wd-to-qk-layernorm", F_BOOL, O(apply_wd_to_qk_layernorm), USE, NULL,
     "weight decay on the --qk-layernorm weights (by default none, as on every norm)"},
    {"--add-qkv-bias", F_BOOL, O(add_qkv_bias), USE, NULL, "biases on the Q, K, V projections even with --disable-bias-linear"},
    {"--qk-l2-norm", F_BOOL, O(qk_l2_norm), USE, NULL,
     "queries and keys scaled to unit RMS per head, without weights (Megatron's L2Norm; Llama 4)"},
    {"--squared-relu", F_BOOL, O(squared_relu), USE, NULL, "the MLP activation relu(x)^2 (Nemotron), not GELU"},
    {"--window-size", F_STR, O(window_size), USE, NULL,
     "L,0: sliding-window attention, each token sees itself and the L tokens before it (Mistral); -1,0: none"},
    {"--window-attn-skip-freq", F_STR, O(window_attn_skip_freq), USE, NULL,
     "N: every N-th layer (N, 2N, ...) attends over the whole sequence, the others over --window-size"},
    {"--rotary-seq-len-interpolation-factor", F_INT, NOFF, REFUSE, NULL, "RoPE has no position interpolation"},
    {"--use-rope-scaling", F_BOOL, O(use_rope_scaling), USE, NULL,
     "Llama 3.1's RoPE frequencies: below 1/8192 turns per token divided by --rope-scaling-factor, blended up to 4/8192"},
    {"--rope-scaling-factor", F_FLOAT, O(rope_scaling_factor), USE, NULL, "with --use-rope-scaling (default 8)"},
    {"--rotary-interleaved", F_BOOL, O(rotary_interleaved), USE, NULL,
     "RoPE rotates adjacent pairs (x_2i, x_2i+1), not the two halves of each head"},
    {"--rope-type", F_STR, O(rope_type), USE, "rope|yarn",
     "RoPE of --multi-latent-attention: yarn (its default) or rope; other attention takes rope only"},
    {"--rotary-scaling-factor", F_FLOAT, O(rotary_scaling_factor), USE, NULL,
     "YaRN's scaling factor (default 1: the unscaled frequencies)"},
    {"--mscale", F_FLOAT, O(mscale), USE, NULL, "YaRN's mscale (default 1): cos and sin times 0.1 m ln(factor) + 1 ..."},
    {"--mscale-all-dim", F_FLOAT, O(mscale_all_dim), USE, NULL,
     "... over the same with this m (default 0); MLA's softmax scale times its square"},
    {"--yarn-original-max-position-embeddings", F_INT, O(yarn_original_max_position_embeddings), USE, NULL,
     "YaRN's pretraining context (default 4096; MLA always takes 4096, as Megatron's MLATransformerConfig)"},
    {"--yarn-beta-fast", F_FLOAT, O(yarn_beta_fast), USE, NULL, "YaRN's fast boundary in rotations (default 32; not MLA's)"},
    {"--yarn-beta-slow", F_FLOAT, O(yarn_beta_slow), USE, NULL, "YaRN's slow boundary in rotations (default 1; not MLA's)"},
    {"--yarn-correction-range-round-to-int", F_BOOL, NOFF, NOOP, NULL, "the default: YaRN's ramp ends are rounded"},
    {"--no-yarn-correction-range-round-to-int", F_BOOL, O(no_yarn_round), USE, NULL, "YaRN's ramp ends unrounded"},
    /* multi-latent attention */
    {"--multi-latent-attention", F_BOOL, O(multi_latent_attention), USE, NULL,
     "DeepSeek's MLA: q from a latent (--q-lora-rank), k and v from one shared latent (--kv-lora-rank), a RoPE part"},
    {"--q-lora-rank", F_INT, O(q_lora_rank), USE, NULL, "MLA: the query latent's size (default: none, q from the hidden state)"},
    {"--kv-lora-rank", F_INT, O(kv_lora_rank), USE, NULL, "MLA: the key/value latent's size (default 32)"},
    {"--qk-head-dim", F_INT, O(qk_head_dim), USE, NULL, "MLA: each head's q/k part without position (default 128)"},
    {"--qk-pos-emb-head-dim", F_INT, O(qk_pos_emb_head_dim), USE, NULL, "MLA: each head's q/k RoPE part (default 64)"},
    {"--v-head-dim", F_INT, O(v_head_dim), USE, NULL, "MLA: each head's value size (default 128)"},
    {"--mla-down-proj-fusion", F_BOOL, NOFF, NOOP, NULL, "kernel fusion does not change what is computed"},
    {"--cache-mla-latents", F_BOOL, NOFF, REFUSE, NULL, "an inference cache (Megatron refuses it in training)"},
    /* mixture of experts */
    {"--num-experts", F_INT, O(num_experts), USE, NULL, "experts per MoE layer (default: dense MLPs)"},
    {"--moe-ffn-hidden-size", F_INT, O(moe_ffn_hidden_size), USE, NULL, "expert MLP hidden size (default ffn-hidden-size)"},
    {"--moe-router-topk", F_INT, O(moe_router_topk), USE, NULL, "experts per token (default 2)"},
    {"--moe-router-pre-softmax", F_BOOL, O(moe_router_pre_softmax), USE, NULL, "softmax over all experts before top-k"},
    {"--moe-aux-loss-coeff", F_FLOAT, O(moe_aux_loss_coeff), USE, NULL, "load-balancing loss coefficient (default 0)"},
    {"--moe-z-loss-coeff", F_FLOAT, O(moe_z_loss_coeff), USE, NULL, "router z-loss coefficient (default 0)"},
    {"--moe-layer-freq", F_STR, O(moe_layer_freq_arg), USE, NULL,
     "N: every N-th layer is MoE, from layer 0 (default 1); or a list, one 0/1 per layer: ([0]*3+[1]*58), [1,0]*2, ..."},
    {"--moe-router-score-function", F_STR, O(moe_router_score_function), USE, "softmax|sigmoid|sqrtsoftplus",
     "softmax (default) | sigmoid: DeepSeek-V3's scores, normalised over the chosen experts"},
    {"--moe-router-num-groups", F_INT, O(moe_router_num_groups), USE, NULL,
     "group-limited routing: experts in this many groups (DeepSeek's nodes)..."},
    {"--moe-router-group-topk", F_INT, O(moe_router_group_topk), USE, NULL,
     "... of which each token uses this many, by their top-(topk / group-topk) scores"},
    {"--moe-router-topk-scaling-factor", F_FLOAT, O(moe_router_topk_scaling_factor), USE, NULL,
     "the routing weights times this (DeepSeek-V3: 2.5)"},
    {"--moe-router-enable-expert-bias", F_BOOL, O(moe_router_enable_expert_bias), USE, NULL,
     "aux-loss-free balancing: a per-expert bias on the sigmoid scores picks the experts, stepped once per iteration "
     "towards equal token counts over the whole global batch"},
    {"--moe-router-bias-update-rate", F_FLOAT, O(moe_router_bias_update_rate), USE, NULL,
     "the expert bias's step per iteration (default 1e-3)"},
    {"--moe-per-layer-logging", F_BOOL, NOFF, NOOP, NULL, "the MoE auxiliary losses are logged summed over the layers"},
    {"--moe-router-dtype", F_STR, O(moe_router_dtype), USE, "fp32|fp64",
     "fp32: routing, its softmax / sigmoid and the weighted sum of experts are fp32 (always, here)"},
    {"--moe-shared-expert-intermediate-size", F_INT, O(moe_shared_expert_intermediate_size), USE, NULL,
     "shared experts: an MLP of this size beside the routed experts, for every token"},
    {"--moe-shared-expert-overlap", F_BOOL, NOFF, NOOP, NULL,
     "the shared experts are graph nodes the scheduler overlaps with the token exchange where the dataflow allows"},
    {"--moe-shared-expert-gate", F_BOOL, NOFF, REFUSE, NULL, "the shared experts have no sigmoid gate"},
    {"--moe-router-fusion", F_BOOL, NOFF, NOOP, NULL, "kernel fusion does not change what is computed"},
    {"--moe-permute-fusion", F_BOOL, NOFF, NOOP, NULL, "kernel fusion does not change what is computed"},
    {"--moe-flex-dispatcher-backend", F_STR, NOFF, NOOP, "deepep|hybridep",
     "the flex dispatcher's communication library: tokens go through all-to-all collectives here"},
    {"--moe-layer-recompute", F_BOOL, NOFF, NOOP, NULL,
     "only memory: the MoE layer's activations are kept (--recompute-granularity full recomputes whole layers)"},
    {"--moe-router-force-load-balancing", F_BOOL, NOFF, REFUSE, NULL,
     "a benchmark switch of Megatron's (random router logits) that mgraph does not have"},
    {"--mtp-num-layers", F_INT, O(mtp_num_layers), USE, NULL,
     "multi-token prediction (DeepSeek-V3): N layers after the model, depth k predicting the token k + 1 places on "
     "(on the last pipeline stage; logged as mtp_<k> loss)"},
    {"--mtp-loss-scaling-factor", F_FLOAT, O(mtp_loss_scaling_factor), USE, NULL,
     "the MTP losses' weight in the objective: factor / N x their sum (default 0.1)"},
    {"--moe-expert-capacity-factor", F_FLOAT, O(moe_expert_capacity_factor), USE, NULL,
     "expert capacity factor (default: dropless)"},
    {"--moe-token-drop-policy", F_STR, O(moe_token_drop_policy), USE, "probs|position",
     "probs | position: which tokens over capacity are dropped"},
    {"--moe-pad-expert-input-to-capacity", F_BOOL, O(moe_pad_expert_input_to_capacity), USE, NULL,
     "pad each expert's input to its capacity"},
    {"--moe-router-load-balancing-type", F_STR, O(moe_router_load_balancing_type), USE,
     "aux_loss|seq_aux_loss|global_aux_loss|sinkhorn|quantile_balancing|none",
     "aux_loss (default) | seq_aux_loss (per sample, DeepSeek's) | none; global_aux_loss, sinkhorn and "
     "quantile_balancing are not supported"},
    {"--moe-grouped-gemm", F_BOOL, NOFF, NOOP, NULL, "a rank's experts always run as one grouped matmul op"},
    {"--moe-token-dispatcher-type", F_STR, O(moe_token_dispatcher_type), USE, "alltoall|allgather|flex",
     "alltoall, or flex (DeepEP / HybridEP's: the same dispatch, done here by all-to-all); allgather is not supported"},
    /* batch and schedule */
    {"--micro-batch-size", F_INT, O(micro_batch_size), USE, NULL, "sequences per micro-batch"},
    {"--global-batch-size", F_INT, O(global_batch_size), USE, NULL, "sequences per iteration (default micro-batch x dp)"},
    {"--rampup-batch-size", F_INT3, O(rampup_batch_size), USE, NULL,
     "START INCREMENT SAMPLES: global batch grows from START by INCREMENT over SAMPLES samples (with --train-samples)"},
    {"--step-batch-size-schedule", F_STR, NOFF, REFUSE, NULL,
     "batch-size steps at token thresholds are not implemented (--rampup-batch-size is)"},
    {"--train-iters", F_I64, O(train_iters), USE, NULL, "iterations to train (300 when --train-samples is not given)"},
    {"--train-samples", F_I64, O(train_samples), USE, NULL, "samples to train (sample-based schedule)"},
    {"--lr", F_FLOAT, O(lr), USE, NULL, "peak learning rate"},
    {"--min-lr", F_FLOAT, O(min_lr), USE, NULL, "learning rate at the end of decay"},
    {"--lr-decay-style", F_STR, O(lr_decay_style), USE, "constant|linear|cosine|inverse-square-root|WSD",
     "constant | linear | cosine | inverse-square-root | WSD"},
    {"--lr-wsd-decay-style", F_STR, O(lr_wsd_decay_style), USE, "exponential|linear|cosine|minus_sqrt",
     "annealing of WSD: exponential | linear | cosine | minus_sqrt"},
    {"--lr-warmup-iters", F_I64, O(lr_warmup_iters), USE, NULL, "linear warmup iterations"},
    {"--lr-warmup-samples", F_I64, O(lr_warmup_samples), USE, NULL, "linear warmup samples"},
    {"--lr-warmup-fraction", F_FLOAT, O(lr_warmup_fraction), USE, NULL, "warmup as a fraction of the decay span"},
    {"--lr-warmup-init", F_FLOAT, O(lr_warmup_init), USE, NULL, "learning rate warmup starts from"},
    {"--lr-decay-iters", F_I64, O(lr_decay_iters), USE, NULL, "decay iterations (default train-iters)"},
    {"--lr-decay-samples", F_I64, O(lr_decay_samples), USE, NULL, "decay samples (default train-samples)"},
    {"--lr-wsd-decay-iters", F_I64, O(lr_wsd_decay_iters), USE, NULL, "iterations of WSD's annealing phase"},
    {"--lr-wsd-decay-samples", F_I64, O(lr_wsd_decay_samples), USE, NULL, "samples of WSD's annealing phase"},
    {"--weight-decay", F_FLOAT, O(weight_decay), USE, NULL, "decoupled weight decay (not on norms and biases)"},
    {"--adam-beta1", F_FLOAT, O(adam_beta1), USE, NULL, "Adam beta1"},
    {"--adam-beta2", F_FLOAT, O(adam_beta2), USE, NULL, "Adam beta2"},
    {"--adam-eps", F_FLOAT, O(adam_eps), USE, NULL, "Adam epsilon"},
    {"--clip-grad", F_FLOAT, O(clip_grad), USE, NULL, "global gradient-norm clip (0: off)"},
    {"--seed", F_I64, O(seed), USE, NULL, "seed of weights, dropout and data order"},
    {"--optimizer", F_STR, O(optimizer), USE, "adam|sgd|muon|dist_muon", "adam (AdamW; the others are not supported)"},
    {"--decoupled-lr", F_FLOAT, O(decoupled_lr), USE, NULL,
     "the word embedding's and output layer's peak learning rate (their own schedule, --lr's shape)"},
    {"--decoupled-min-lr", F_FLOAT, O(decoupled_min_lr), USE, NULL,
     "with --decoupled-lr, their minimum learning rate (default --min-lr)"},
    {"--start-weight-decay", F_FLOAT, O(start_weight_decay), USE, NULL,
     "the weight decay at the first step (with a linear or cosine --weight-decay-incr-style)"},
    {"--end-weight-decay", F_FLOAT, O(end_weight_decay), USE, NULL, "the weight decay at the last training step"},
    {"--weight-decay-incr-style", F_STR, O(weight_decay_incr_style), USE, "constant|linear|cosine",
     "constant (--weight-decay throughout), or linear / cosine from --start- to --end-weight-decay over the run"},
    {"--exit-interval", F_I64, O(exit_interval), USE, NULL,
     "stop after the iteration that is a multiple of N (saving a checkpoint first with --save)"},
    {"--exit-duration-in-mins", F_FLOAT, O(exit_duration_in_mins), USE, NULL,
     "stop after the first iteration that ends N minutes after training started (saving a checkpoint first with --save)"},
    {"--exit-signal-handler", F_BOOL, O(exit_signal_handler), USE, NULL,
     "on --exit-signal (any rank's), stop after the iteration, saving a checkpoint first with --save; a second one stops "
     "at once"},
    {"--exit-signal", F_STR, O(exit_signal), USE, "SIGTERM|SIGINT|SIGHUP|SIGUSR1|SIGUSR2",
     "the signal of --exit-signal-handler (default SIGTERM; mpirun forwards SIGUSR1 and SIGUSR2 to every rank)"},
    {"--fp16", F_BOOL, O(fp16), USE, NULL,
     "Megatron's fp16 mixed precision: fp16 parameters, activations and gradients (main gradients fp16 unless "
     "--accumulate-allreduce-grads-in-fp32), fp32 main parameters and Adam moments, dynamic loss scaling"},
    {"--loss-scale", F_FLOAT, O(loss_scale), USE, NULL,
     "with --fp16: a constant loss scale (positive; steps whose gradients overflow are still skipped); default dynamic"},
    {"--initial-loss-scale", F_FLOAT, O(initial_loss_scale), USE, NULL, "with --fp16: the dynamic loss scale's start (2^32)"},
    {"--min-loss-scale", F_FLOAT, O(min_loss_scale), USE, NULL, "with --fp16: the dynamic loss scale's floor (1)"},
    {"--loss-scale-window", F_INT, O(loss_scale_window), USE, NULL,
     "with --fp16: steps without an overflow before the dynamic loss scale doubles (1000)"},
    {"--hysteresis", F_INT, O(hysteresis), USE, NULL,
     "with --fp16: overflows tolerated before the dynamic loss scale halves (2)"},
    {"--fp8-format", F_STR, O(fp8_format), USE, "e4m3|hybrid",
     "Transformer Engine's fp8 for the linear layers' matrix products: operands scaled per tensor and rounded to E4M3 "
     "(hybrid: gradients to E5M2 in backward), fp32 sums (CPUs: a portable kernel; GPUs: cuBLASLt, compute 8.9+)"},
    {"--fp8-recipe", F_STR, O(fp8_recipe), USE, "delayed|tensorwise|mxfp8|blockwise",
     "with --fp8-format: delayed (scales from the amax history, the default) or tensorwise (each tensor's own amax); "
     "mxfp8 and blockwise are not supported"},
    {"--fp8-margin", F_INT, O(fp8_margin), USE, NULL, "with the delayed recipe: scales divided by 2^N (0)"},
    {"--fp8-amax-history-len", F_INT, O(fp8_amax_history_len), USE, NULL,
     "with the delayed recipe: steps of amax history the scales follow (1)"},
    {"--fp8-amax-compute-algo", F_STR, O(fp8_amax_compute_algo), USE, "most_recent|max",
     "with the delayed recipe: the amax of the history the scales follow (most_recent)"},
    {"--fp8-param-gather", F_BOOL, NOFF, REFUSE, NULL,
     "the distributed optimizer gathers the parameters' bf16 copies (fp8 copies with their scales are not built)"},
    {"--attention-softmax-in-fp32", F_BOOL, NOFF, NOOP, NULL, "mgraph's attention softmax is always fp32"},
    {"--disable-bf16-reduced-precision-matmul", F_BOOL, NOFF, NOOP, NULL,
     "PyTorch's cuBLAS switch for bf16 reductions; mgraph's matrix products do not go through PyTorch"},
    /* GPT-OSS (examples/gptoss/02_train.sh): its model variant is not implemented */
    {"--enable-gpt-oss", F_BOOL, NOFF, REFUSE, NULL, "GPT-OSS's model variant (attention sinks, clamped GLU) is not implemented"},
    {"--quick-geglu", F_BOOL, NOFF, REFUSE, NULL, "the quick-GELU GLU (GPT-OSS's) is not implemented"},
    {"--glu-linear-offset", F_FLOAT, NOFF, REFUSE, NULL, "GPT-OSS's GLU offset is not implemented"},
    {"--activation-func-clamp-value", F_FLOAT, NOFF, REFUSE, NULL, "GPT-OSS's clamped activation is not implemented"},
    {"--softmax-type", F_STR, NOFF, REFUSE, "vanilla|off-by-one|learnable",
     "attention sinks (off-by-one, learnable) are not implemented; the plain softmax is the default"},
    {"--export-force-local-attention", F_BOOL, NOFF, NOOP, NULL, "a ModelOpt export switch; mgraph-run exports nothing"},
    {"--bf16", F_BOOL, O(bf16), USE, NULL,
     "Megatron's bf16 mixed precision: bf16 parameters read by forward and backward, bf16 activations and activation "
     "gradients, fp32 main parameters, main gradients and Adam moments; matrix products with bf16 inputs and fp32 sums "
     "(CPUs: AVX512-BF16, or MG_CPU_BF16=emulate for the same bits, slower)"},
    {"--grad-reduce-in-bf16", F_BOOL, O(grad_reduce_in_bf16), USE, NULL,
     "with --bf16: main gradients accumulated and reduced over data-parallel ranks in bf16 (half the memory and traffic)"},
    {"--accumulate-allreduce-grads-in-fp32", F_BOOL, O(accumulate_allreduce_grads_in_fp32), USE, NULL,
     "main gradients accumulated and reduced in fp32 (--bf16's default)"},
    {"--use-precision-aware-optimizer", F_BOOL, O(use_precision_aware_optimizer), USE, NULL,
     "with the distributed optimizer: store main gradients and Adam moments as --main-grads-dtype, --exp-avg-dtype, "
     "--exp-avg-sq-dtype say (the arithmetic stays fp32)"},
    {"--main-grads-dtype", F_STR, O(main_grads_dtype), USE, "fp32|bf16", "main gradients' storage (default fp32)"},
    {"--main-params-dtype", F_STR, O(main_params_dtype), USE, "fp32|fp16", "main parameters' storage: fp32 only"},
    {"--exp-avg-dtype", F_STR, O(exp_avg_dtype), USE, "fp32|fp16|bf16|fp8", "Adam's first moment's storage: fp32 or bf16"},
    {"--exp-avg-sq-dtype", F_STR, O(exp_avg_sq_dtype), USE, "fp32|fp16|bf16|fp8",
     "Adam's second moment's storage: fp32 or bf16"},
    /* logging and evaluation */
    {"--log-interval", F_I64, O(log_interval), USE, NULL, "iterations between log lines"},
    {"--log-throughput", F_BOOL, O(log_throughput), USE, NULL, "add TFLOP/s per rank to the log line"},
    {"--log-params-norm", F_BOOL, O(log_params_norm), USE, NULL,
     "add the parameters' L2 norm after the step to the log line, metrics and TensorBoard"},
    {"--eval-interval", F_I64, O(eval_interval), USE, NULL, "iterations between validations (default, 0: none)"},
    {"--eval-iters", F_I64, O(eval_iters), USE, NULL, "batches per validation/test evaluation (0: none)"},
    {"--tensorboard-dir", F_STR, O(tensorboard_dir), USE, NULL, "write TensorBoard event files here"},
    {"--tensorboard-log-interval", F_I64, O(tensorboard_log_interval), USE, NULL, "iterations between TensorBoard scalars"},
    {"--log-timers-to-tensorboard", F_BOOL, O(log_timers_to_tensorboard), USE, NULL, "add iteration time to TensorBoard"},
    {"--log-world-size-to-tensorboard", F_BOOL, O(log_world_size_to_tensorboard), USE, NULL,
     "add the world size to TensorBoard (world-size, and vs samples)"},
    {"--log-memory-to-tensorboard", F_BOOL, O(log_memory_to_tensorboard), USE, NULL,
     "add the storages' memory to TensorBoard (mem-reserved-bytes, mem-allocated-bytes, mem-max-allocated-bytes, "
     "mem-allocated-count; on CPUs the memory plans' host buffers, docs/training.md)"},
    {"--log-num-zeros-in-grad", F_BOOL, O(log_num_zeros_in_grad), USE, NULL,
     "count the zero elements of the gradients the optimizer sees (log line, metrics, TensorBoard num-zeros)"},
    {"--sample-interval", F_I64, O(sample_interval), USE, NULL,
     "print a greedy sample of up to 32 tokens from the current weights every N iterations, on rank 0 (llm.c; dp, "
     "distributed-optimizer and tensor-parallel-only plans)"},
    {"--sample-prompt", F_STR, O(sample_prompt), USE, NULL,
     "the samples' prompt (default: the end-of-document token alone)"},
    {"--log-validation-ppl-to-tensorboard", F_BOOL, O(log_validation_ppl_to_tensorboard), USE, NULL,
     "add validation perplexity to TensorBoard"},
    {"--metrics-file", F_STR, O(metrics_file), USE, NULL, "JSON Lines metrics, one object per iteration/evaluation"},
    {"--dump-dot", F_STR, O(dump_dot), USE, NULL, "write the executed graph as DOT (%r: rank)"},
    {"--trace-file", F_STR, O(trace_file), USE, NULL,
     "Chrome/Perfetto timeline (JSON) of the traced iterations: one lane per worker + communication (%r: rank)"},
    {"--trace-iterations", F_STR, O(trace_iterations), USE, NULL,
     "A or A:B: iterations to trace, 1-based, inclusive (default: the run's second)"},
    {"--dump-dot-summary", F_STR, O(dump_dot_summary), USE, NULL, "write a scope-collapsed DOT view that renders at any size (%r: rank)"},
    {"--dot-summary-depth", F_INT, O(dot_summary_depth), USE, NULL, "scope components per box in --dump-dot-summary (default 2: h.3.attn)"},
    {"--dot-summary-scope", F_STR, O(dot_summary_scope), USE, NULL, "only scopes matching this glob in --dump-dot-summary (e.g. 'h.0.*')"},
    {"--dot-summary-phase", F_STR, O(dot_summary_phase), USE, NULL, "only these phases in --dump-dot-summary: forward,backward,optimizer"},
    {"--dry-run", F_BOOL, O(dry_run), USE, NULL, "build (and dump) the graph, do not train"},
    {"--model-lib", F_STR, O(model_lib), USE, NULL,
     "train the model of this shared library (mgraph/model_lib.h, docs/model-lib.md) instead of GPT; its own flags "
     "go on the same command line"},
    {"--wandb-project", F_STR, NOFF, NOOP, NULL, "no Weights & Biases; --tensorboard-dir and --metrics-file log the scalars"},
    {"--wandb-exp-name", F_STR, NOFF, NOOP, NULL, "no Weights & Biases; --tensorboard-dir and --metrics-file log the scalars"},
    {"--wandb-save-dir", F_STR, NOFF, NOOP, NULL, "no Weights & Biases; --tensorboard-dir and --metrics-file log the scalars"},
    {"--profile", F_BOOL, NOFF, NOOP, NULL, "no PyTorch/Nsight profiler; --trace-file with --trace-iterations writes a timeline"},
    {"--profile-step-start", F_INT, NOFF, NOOP, NULL, "no PyTorch/Nsight profiler; see --trace-iterations"},
    {"--profile-step-end", F_INT, NOFF, NOOP, NULL, "no PyTorch/Nsight profiler; see --trace-iterations"},
    {"--timing-log-level", F_INT, NOFF, NOOP, NULL, "the log line has the iteration time; --trace-file has every task's"},
    {"--logging-level", F_INT, NOFF, NOOP, NULL, "mgraph-run's log has one level: Megatron's iteration lines and warnings"},
    {"--enable-experimental", F_BOOL, NOFF, NOOP, NULL, "mgraph gates no feature behind it"},
    {"--save", F_STR, O(save), USE, NULL, "checkpoint directory to save to"},
    {"--ckpt-format", F_STR, NOFF, NOOP, "torch|torch_dist|zarr|fsdp_dtensor",
     "mgraph writes its own checkpoint format (reshardable on load; mgraph-convert exports Hugging Face)"},
    {"--auto-detect-ckpt-format", F_BOOL, NOFF, NOOP, NULL,
     "--load reads mgraph's format; Megatron's checkpoints are refused, naming mgraph-convert --from-megatron"},
    {"--dist-ckpt-strictness", F_STR, NOFF, NOOP,
     "assume_ok_unexpected|log_unexpected|log_all|raise_unexpected|raise_all|return_unexpected|return_all|ignore_all",
     "every tensor of an mgraph checkpoint is checked on load"},
    {"--save-interval", F_I64, O(save_interval), USE, NULL, "iterations between checkpoints (and one at the end)"},
    {"--save-retain", F_INT, O(save_retain), USE, NULL, "keep the newest N checkpoints in --save (0: all)"},
    {"--async-save", F_BOOL, O(async_save), USE, NULL,
     "a save snapshots the state and writes it while the next iterations run; put in place (index, tracker) before "
     "the next save and at the end; the previous checkpoint stands until then"},
    {"--non-persistent-save-interval", F_I64, O(non_persistent_save_interval), USE, NULL,
     "iterations between non-persistent checkpoints (with --non-persistent-ckpt-type local): only the newest is kept, "
     "and --load takes it when it is newer than the persistent one"},
    {"--non-persistent-ckpt-type", F_STR, O(non_persistent_ckpt_type), USE, "global|local|in_memory",
     "local: into --non-persistent-local-ckpt-dir (global and in_memory are refused)"},
    {"--non-persistent-local-ckpt-dir", F_STR, O(non_persistent_local_ckpt_dir), USE, NULL,
     "the non-persistent checkpoints' directory (every rank must see it)"},
    {"--load", F_STR, O(load), USE, NULL, "checkpoint directory (or iter_N directory) to resume from"},
    {"--no-load-optim", F_BOOL, O(no_load_optim), USE, NULL,
     "with --load: do not load the Adam moments (they start from zero, and Adam's step count with them)"},
    {"--no-save-optim", F_BOOL, O(no_save_optim), USE, NULL,
     "with --save: the model only, without the Adam moments (loading it starts them from zero)"},
    {"--no-save-rng", F_BOOL, O(no_save_rng), USE, NULL,
     "with --save: without the RNG seed (loading it uses that run's --seed)"},
    {"--no-load-rng", F_BOOL, O(no_load_rng), USE, NULL, "with --load: use --seed, not the checkpoint's RNG seed"},
    {"--override-opt-param-scheduler", F_BOOL, O(override_opt_param_scheduler), USE, NULL,
     "with --load: this run's learning-rate schedule flags, whatever the checkpoint's (by default they must match)"},
    {"--override-opt_param-scheduler", F_BOOL, O(override_opt_param_scheduler), USE, NULL,
     "Megatron's older spelling of --override-opt-param-scheduler"},
    {"--use-checkpoint-args", F_BOOL, O(use_checkpoint_args), USE, NULL,
     "the model flags the checkpoint under --load recorded replace the command line's (Megatron's "
     "load_args_from_checkpoint: the sizes only where not given)"},
    {"--use-checkpoint-opt-param-scheduler", F_BOOL, O(use_checkpoint_opt_param_scheduler), USE, NULL,
     "with --load: the checkpoint's learning-rate schedule, whatever this run's flags"},
    {"--use-checkpoint-opt_param-scheduler", F_BOOL, O(use_checkpoint_opt_param_scheduler), USE, NULL,
     "Megatron's older spelling of --use-checkpoint-opt-param-scheduler"},
    {"--finetune", F_BOOL, O(finetune), USE, NULL, "with --load: load the model only, start at iteration 0"},
    {"--skip-train", F_BOOL, O(skip_train), USE, NULL, "evaluate on the validation split, train nothing"},
    {"--exit-on-missing-checkpoint", F_BOOL, O(exit_on_missing_checkpoint), USE, NULL,
     "with --load: a directory without a checkpoint is an error (default: a warning, training starts from random)"},
    /* data */
    {"--text-file", F_STR, O(text_file), USE, NULL, "raw text to train on (byte-level unless a tokenizer is given)"},
    {"--data-path", F_LIST, O(data_path), USE, NULL, "Megatron indexed dataset prefix, or blend w1 p1 w2 p2 ..."},
    {"--train-data-path", F_LIST, O(split_data_path[0]), USE, NULL,
     "the training data alone: a prefix or blend, every document of it (instead of --data-path and --split)"},
    {"--valid-data-path", F_LIST, O(split_data_path[1]), USE, NULL, "the validation data alone (as --train-data-path)"},
    {"--test-data-path", F_LIST, O(split_data_path[2]), USE, NULL, "the test data alone (as --train-data-path)"},
    {"--data-args-path", F_STR, O(data_args_path), USE, NULL,
     "a file holding --data-path's values (white-space separated), for blends too long for a command line"},
    {"--per-split-data-args-path", F_STR, O(per_split_data_args_path), USE, NULL,
     "a JSON file {\"train\": ..., \"valid\": ..., \"test\": ...} holding the three per-split data paths (a string, a "
     "list or null each)"},
    {"--split", F_STR, O(split), USE, NULL, "train,valid,test proportions (--data-path: 969,30,1; text: 90,10,0)"},
    {"--data-cache-path", F_STR, O(data_cache_path), USE, NULL, "where dataset indices are cached"},
    {"--tokenizer-type", F_STR, O(tokenizer_type), USE,
     "ByteLevelTokenizer|GPT2BPETokenizer|SentencePieceTokenizer|Llama2Tokenizer|HuggingFaceTokenizer|TikTokenizer|"
     "NullTokenizer|Llama3Tokenizer|MistralTokenizer|GPTSentencePieceTokenizer|BertWordPieceLowerCase|"
     "BertWordPieceCase",
     "GPT2BPETokenizer (default with --data-path or --vocab-file) | ByteLevelTokenizer | SentencePieceTokenizer | "
     "HuggingFaceTokenizer | TikTokenizer | NullTokenizer"},
    {"--vocab-file", F_STR, O(vocab_file), USE, NULL, "GPT-2 vocab.json"},
    {"--merge-file", F_STR, O(merge_file), USE, NULL, "GPT-2 merges.txt"},
    {"--tokenizer-model", F_STR, O(tokenizer_model), USE, NULL,
     "SentencePiece tokenizer.model | HuggingFaceTokenizer's folder (tokenizer.json, tokenizer_config.json) | "
     "TikTokenizer's vocabulary .json"},
    {"--vocab-size", F_I64, O(vocab_size), USE, NULL, "NullTokenizer's vocabulary (required); TikTokenizer's (131072)"},
    {"--tiktoken-pattern", F_STR, O(tiktoken_pattern), USE, "v1|v2", "TikTokenizer's split pattern (default v2)"},
    {"--tiktoken-num-special-tokens", F_INT, O(tiktoken_num_special_tokens), USE, NULL,
     "TikTokenizer: ids below it are special tokens (default 1000)"},
    {"--tokenizer-special-tokens", F_LIST, O(special_tokens), USE, NULL,
     "TikTokenizer's special tokens (default <unk> <s> </s> <mask> <pad> <cls> <sep>)"},
    {"--null-tokenizer-eod-id", F_I64, O(null_tokenizer_eod_id), USE, NULL, "NullTokenizer's end of document (vocab - 1)"},
    {"--tokenizer-hf-no-include-special-tokens", F_BOOL, O(tokenizer_hf_no_include_special_tokens), USE, NULL,
     "HuggingFaceTokenizer: encode without the template's special tokens (BOS)"},
    {"--eod-mask-loss", F_BOOL, O(eod_mask_loss), USE, NULL,
     "leave out of the loss the positions whose input token is the end-of-document token (Megatron's loss mask)"},
    {"--calculate-per-token-loss", F_BOOL, O(calculate_per_token_loss), USE, NULL,
     "train on the mean over the global batch's kept tokens, not the mean of the micro-batches' means"},
    {"--reset-position-ids", F_BOOL, O(reset_position_ids), USE, NULL,
     "positions restart at 0 after every end-of-document token of the input"},
    {"--reset-attention-mask", F_BOOL, O(reset_attention_mask), USE, NULL,
     "attention within documents: no token sees a token before its document's start"},
    {"--mock-data", F_BOOL, O(mock_data), USE, NULL,
     "Megatron's MockGPTDataset: 100000 synthetic documents split by --split, its samples in Megatron's order for "
     "the same --seed (needs a tokenizer with an EOD token, e.g. NullTokenizer)"},
    {"--no-create-attention-mask-in-dataloader", F_BOOL, NOFF, NOOP, NULL,
     "no attention mask is ever made: the attention kernels apply the causal mask (and the documents of --reset-attention-mask)"},
    {"--no-mmap-bin-files", F_BOOL, NOFF, NOOP, NULL, "how the .bin is read does not change what is read"},
    {"--num-dataset-builder-threads", F_INT, NOFF, NOOP, NULL, "the dataset indices are built by one thread per rank"},
    {"--num-workers", F_INT, NOFF, NOOP, NULL, "mgraph reads samples in the training process (no loader workers)"},
    {"--dataloader-type", F_STR, NOFF, NOOP, "single|cyclic|external",
     "mgraph reads the dataset's shuffled sample order front to back, as Megatron's 'single' loader does"},
    /* parallelism */
    {"--tensor-model-parallel-size", F_INT, O(tensor_model_parallel_size), USE, NULL, "tp"},
    {"--pipeline-model-parallel-size", F_INT, O(pipeline_model_parallel_size), USE, NULL, "pp"},
    {"--context-parallel-size", F_INT, O(context_parallel_size), USE, NULL, "cp"},
    {"--cp-comm-type", F_STR, NOFF, NOOP, "p2p",
     "context parallelism passes K/V around a ring (Megatron's p2p); a2a, allgather and a2a+p2p are not built"},
    {"--expert-model-parallel-size", F_INT, O(expert_model_parallel_size), USE, NULL, "ep: experts split over ep ranks of dp"},
    {"--expert-tensor-parallel-size", F_INT, O(expert_tensor_parallel_size), USE, NULL,
     "= tp: every expert's rows / columns split over the tp group; > 1 with tp 1: over an expert tensor group of its own (its "
     "ranks' tokens gathered for the experts); 1 (mgraph's default; Megatron's is tp): whole experts on each tp rank"},
    {"--num-layers-per-virtual-pipeline-stage", F_INT, O(num_layers_per_virtual_pipeline_stage), USE, NULL,
     "interleaved pipeline: layers per model chunk"},
    {"--num-virtual-stages-per-pipeline-rank", F_INT, O(num_virtual_stages_per_pipeline_rank), USE, NULL,
     "interleaved pipeline: model chunks per pipeline rank"},
    {"--decoder-first-pipeline-num-layers", F_INT, O(decoder_first_pipeline_num_layers), USE, NULL,
     "layers on the first pipeline stage (the others share the rest)"},
    {"--decoder-last-pipeline-num-layers", F_INT, O(decoder_last_pipeline_num_layers), USE, NULL,
     "layers on the last pipeline stage"},
    {"--pipeline-model-parallel-layout", F_STR, O(pipeline_model_parallel_layout), USE, NULL,
     "layers per virtual stage, e.g. \"Et*3|(tt|)*29|L\" (E embedding, t layer, L loss, | between stages)"},
    {"--account-for-embedding-in-pipeline-split", F_BOOL, O(account_for_embedding_in_pipeline_split), USE, NULL,
     "the embedding counts as a layer in the equal split of layers over stages"},
    {"--account-for-loss-in-pipeline-split", F_BOOL, O(account_for_loss_in_pipeline_split), USE, NULL,
     "the loss counts as a layer in the equal split of layers over stages"},
    {"--pipeline-schedule", F_STR, O(pipeline_schedule), USE, "auto|1f1b|interleaved|gpipe",
     "order of a stage's forward and backward halves (auto: Megatron's: interleaved with virtual stages, else 1f1b)"},
    {"--sequence-parallel", F_BOOL, O(sequence_parallel), USE, NULL, "split norms and dropout along the sequence (with tp > 1)"},
    {"--use-megatron-fsdp", F_BOOL, O(use_megatron_fsdp), USE, NULL,
     "Megatron-FSDP: shard over dp what --data-parallel-sharding-strategy says (partitioners/fsdp.c)"},
    {"--data-parallel-sharding-strategy", F_STR, O(data_parallel_sharding_strategy), USE,
     "no_shard|optim|optim_grads|optim_grads_params",
     "with --use-megatron-fsdp (default optim_grads_params, ZeRO-3): what is sharded over dp; optim is the distributed optimizer"},
    /* Megatron-FSDP's memory and NCCL-registration switches (examples/megatron_fsdp's recipes) */
    {"--init-model-with-meta-device", F_BOOL, NOFF, NOOP, NULL,
     "each rank allocates only the parameters (and FSDP shards) its graph holds; there is no full model to avoid"},
    {"--use-nccl-ub", F_BOOL, NOFF, NOOP, NULL, "NCCL user-buffer registration: a GPU transfer optimisation mgraph does not use"},
    {"--fsdp-double-buffer", F_BOOL, NOFF, NOOP, NULL,
     "FSDP's gathered parameters live in the step's own buffers (scheduler memory reuse), not a double buffer"},
    {"--fsdp-manual-registration", F_BOOL, NOFF, NOOP, NULL, "NCCL buffer registration: a GPU transfer optimisation mgraph does not use"},
    {"--use-torch-fsdp2", F_BOOL, O(use_torch_fsdp2), USE, NULL,
     "PyTorch FSDP2's sharding (each parameter on one dimension): --use-megatron-fsdp optim_grads_params"},
    {"--use-tp-pp-dp-mapping", F_BOOL, O(use_tp_pp_dp_mapping), USE, NULL,
     "lay ranks out as tp-pp-dp (tp innermost, then pp, dp outermost) instead of tp-cp-ep-dp-pp"},
    {"--use-distributed-optimizer", F_BOOL, O(use_distributed_optimizer), USE, NULL, "shard optimizer state over dp"},
    {"--distributed-backend", F_STR, NOFF, NOOP, "nccl|gloo", "ranks communicate through MPI"},
    {"--distributed-timeout-minutes", F_I64, O(distributed_timeout_minutes), USE, NULL,
     "a collective or transfer waiting longer than this (a rank stopped or hung) ends the job with a message naming "
     "it (default 10, as Megatron's; a rank that dies ends every rank within seconds anyway)"},
    {"--overlap-param-gather", F_BOOL, NOFF, NOOP, NULL,
     "the distributed optimizer's parameter all-gather runs at the end of its step (not overlapped with the next "
     "forward)"},
    {"--world-size", F_INT, O(world_size), USE, NULL, "with --dry-run: partition for N ranks without launching them"},
    {"--plan", F_STR, O(plan_file), USE, NULL,
     "partition plan file (flags override it), or auto: the planner's fastest plan that fits for this model, world "
     "and --cluster (tp, pp, virtual stages, cp, ep and micro-batch; those given as flags are kept)"},
    {"--cluster", F_STR, O(cluster), USE, NULL, "with --plan auto: the cluster the planner prices plans on (a preset "
     "of mgraph-plan or a cluster file, planner/clusters/)"},
    /* implementation choices of Megatron's that do not change what is computed */
    {"--use-mcore-models", F_BOOL, NOFF, NOOP, NULL, "mgraph has one model implementation"},
    {"--transformer-impl", F_STR, NOFF, NOOP, "local|transformer_engine|inference_optimized",
     "mgraph has one transformer implementation"},
    {"--attention-backend", F_STR, NOFF, NOOP, "auto|flash|fused|unfused|local", "mgraph has one fused attention kernel"},
    {"--no-masked-softmax-fusion", F_BOOL, NOFF, NOOP, NULL, "mgraph's attention kernel fuses scale, mask and softmax"},
    {"--use-flash-attn", F_BOOL, NOFF, NOOP, NULL, "mgraph has one fused attention kernel (no s x s scores stored)"},
    {"--no-bias-gelu-fusion", F_BOOL, O(no_bias_gelu_fusion), USE, NULL,
     "the exact GELU x Phi(x), as Megatron's unfused MLP (torch's F.gelu); its fused bias-GELU, the default, is the tanh "
     "approximation"},
    {"--no-bias-dropout-fusion", F_BOOL, NOFF, NOOP, NULL, "kernel fusion does not change what is computed"},
    {"--no-bias-swiglu-fusion", F_BOOL, NOFF, NOOP, NULL, "kernel fusion does not change what is computed"},
    {"--no-rope-fusion", F_BOOL, NOFF, NOOP, NULL, "kernel fusion does not change what is computed"},
    {"--no-persist-layer-norm", F_BOOL, NOFF, NOOP, NULL, "mgraph has one layer-norm kernel"},
    {"--no-gradient-accumulation-fusion", F_BOOL, NOFF, NOOP, NULL,
     "weight gradients always accumulate in place, in fp32 (mgraph's main_grad)"},
    {"--cross-entropy-loss-fusion", F_BOOL, NOFF, NOOP, NULL,
     "mgraph's cross-entropy is one fused op (loss and gradient without the probabilities stored)"},
    {"--tp-comm-overlap", F_BOOL, NOFF, NOOP, NULL,
     "tensor-parallel collectives are graph nodes the scheduler overlaps where the dataflow allows"},
    {"--manual-gc", F_BOOL, NOFF, NOOP, NULL, "mgraph has no garbage collector"},
    {"--manual-gc-interval", F_INT, NOFF, NOOP, NULL, "mgraph has no garbage collector"},
    {"--empty-unused-memory-level", F_INT, NOFF, NOOP, NULL, "the memory plan is static: no allocator cache to empty"},
    {"--recompute-granularity", F_STR, O(recompute_granularity), USE, "full|selective",
     "full: recompute whole layers in backward (graph/recompute.c); selective: what mgraph's fused attention always does"},
    {"--recompute-method", F_STR, O(recompute_method), USE, "uniform|block",
     "full: uniform = every layer, --recompute-num-layers per segment; block = the first --recompute-num-layers layers"},
    {"--recompute-num-layers", F_INT, O(recompute_num_layers), USE, NULL, "layers per segment (uniform) or recomputed (block)"},
    {"--recompute-modules", F_LIST, NOFF, NOOP, NULL,
     "only memory: selective recomputation here is the fused attention's; the other modules' activations are kept"},
    {"--recompute-activations", F_BOOL, O(recompute_activations), USE, NULL,
     "Megatron's shorthand for --recompute-granularity selective (it overrides that flag, as there)"},
    /* Megatron's removed or legacy flags, as its validate_args treats them */
    {"--use-rotary-position-embeddings", F_BOOL, O(use_rotary_position_embeddings), USE, NULL,
     "Megatron's legacy spelling of --position-embedding-type rope"},
    {"--checkpoint-activations", F_BOOL, NOFF, REFUSE, NULL,
     "no longer valid in Megatron: use --recompute-activations, or --recompute-granularity and --recompute-method"},
    {"--model-parallel-size", F_INT, NOFF, REFUSE, NULL, "no longer valid in Megatron: use --tensor-model-parallel-size"},
    {"--batch-size", F_INT, NOFF, REFUSE, NULL, "no longer valid in Megatron: use --micro-batch-size"},
    {"--warmup", F_INT, NOFF, REFUSE, NULL,
     "no longer valid in Megatron: use --lr-warmup-fraction, --lr-warmup-iters or --lr-warmup-samples"},
    /* execution */
    {"--engine", F_STR, O(engine), USE, "starpu|reference", "starpu (default) | reference (serial, for debugging)"},
    {"--sched-policy", F_STR, O(sched_policy), USE, NULL, "StarPU scheduling policy (default: STARPU_SCHED or measured best)"},
    {"--cpu-workers", F_INT, O(cpu_workers), USE, NULL, "StarPU CPU workers (0: all cores)"},
    {"--matmul-tiles", F_INT, O(matmul_tiles), USE, NULL, "split large matmuls into N tasks for the workers (default 1)"},
    {"--micro-batch-split", F_INT, O(micro_batch_split), USE, NULL,
     "run each micro-batch as N sub-batches (0, the default: as many as keep the workers busy)"},
    {"--overlap-grad-reduce", F_BOOL, O(overlap_grad_reduce), USE, NULL, "run collectives on a communication thread beside compute"},
    {"--check-for-nan-in-loss-and-grad", F_BOOL, O(check_for_nan_in_loss_and_grad), USE, NULL,
     "stop with an error at a NaN/Inf loss or gradient norm (default)"},
    {"--no-check-for-nan-in-loss-and-grad", F_BOOL, O(no_check_for_nan_in_loss_and_grad), USE, NULL,
     "train on through NaN/Inf, counting them in the log line"},
    {"--help", F_BOOL, O(help), USE, NULL, "this text"},
};
#undef O
#define N_FLAGS (sizeof flags / sizeof *flags)
_Static_assert(sizeof flags / sizeof *flags <= sizeof ((mg_run_config *)0)->given, "mg_run_config.given is too small");

/* The run mgraph-run makes with no flag: a ~3.2M-parameter byte-level GPT on Debian's
 * fortunes corpus, with the schedule and logging that suit 300 short iterations. */
static const char *const demo_args[] = {
    "--num-layers", "4", "--hidden-size", "256", "--num-attention-heads", "4", "--seq-length", "128",
    "--micro-batch-size", "4", "--global-batch-size", "8", "--train-iters", "300", "--lr", "1e-3",
    "--min-lr", "1e-4", "--lr-decay-style", "cosine", "--lr-warmup-iters", "30", "--log-interval", "10",
    "--eval-interval", "100", "--eval-iters", "4", "--tokenizer-type", "ByteLevelTokenizer",
    NULL};

const char *const *mg_run_config_demo_args(void) { return demo_args; }

/* ---- notes ------------------------------------------------------------------------------ */
static void note(char *buf, size_t cap, int *n, const char *fmt, va_list ap) {
    size_t len = strlen(buf);
    if (len + 2 < cap) {
        vsnprintf(buf + len, cap - len - 1, fmt, ap);
        len = strlen(buf);
        buf[len] = '\n';
        buf[len + 1] = '\0';
    }
    (*n)++;
}

void mg_run_notes_error(mg_run_notes *n, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    note(n->errors, sizeof n->errors, &n->n_errors, fmt, ap);
    va_end(ap);
}

void mg_run_notes_warn(mg_run_notes *n, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    note(n->warnings, sizeof n->warnings, &n->n_warnings, fmt, ap);
    va_end(ap);
}

static void print_lines(const char *text, const char *prefix, FILE *f) {
    for (const char *p = text; *p;) {
        const char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p) : strlen(p);
        fprintf(f, "mgraph-run: %s%.*s\n", prefix, (int)len, p);
        p += len + (nl != NULL);
    }
}

void mg_run_notes_print(const mg_run_notes *n, FILE *f) {
    print_lines(n->warnings, "warning: ", f);
    print_lines(n->errors, "error: ", f);
}

/* ---- defaults and parsing ----------------------------------------------------------------- */
void mg_run_config_defaults(mg_run_config *c) {
    memset(c, 0, sizeof *c);
    /* Megatron requires these; mgraph's small model instead */
    c->num_layers = 4;
    c->hidden_size = 256;
    c->num_attention_heads = 4;
    c->seq_length = 128;
    c->micro_batch_size = 4;
    c->global_batch_size = 0; /* Megatron: micro-batch x data-parallel size */
    c->train_iters = -1;      /* 300 unless --train-samples */
    c->train_samples = -1;
    c->lr = 1e-3f;
    /* Megatron's defaults (arguments.py, training_config.py, transformer_config.py) */
    c->make_vocab_size_divisible_by = 128;
    c->init_method_std = 0.02f;
    c->hidden_dropout = 0.1f;
    c->attention_dropout = 0.1f;
    c->moe_router_topk = 2;
    c->expert_tensor_parallel_size = 1;
    c->moe_layer_freq = 1;
    c->moe_router_score_function = "softmax";
    c->moe_router_bias_update_rate = 1e-3f;
    c->mtp_loss_scaling_factor = 0.1f;
    c->exit_signal = "SIGTERM";
    c->distributed_timeout_minutes = 10;
    c->moe_token_drop_policy = "probs";
    c->moe_token_dispatcher_type = "alltoall";
    c->position_embedding_type = "learned_absolute";
    c->moe_router_load_balancing_type = "aux_loss";
    c->optimizer = "adam";
    c->normalization = "LayerNorm";
    c->rotary_base = 10000.0f;
    c->rotary_percent = 1.0f;
    c->rope_scaling_factor = 8.0f;
    c->rotary_scaling_factor = 1.0f;
    c->mscale = 1.0f;
    c->yarn_original_max_position_embeddings = 4096;
    c->yarn_beta_fast = 32.0f;
    c->yarn_beta_slow = 1.0f;
    c->kv_lora_rank = 32;
    c->qk_head_dim = 128;
    c->qk_pos_emb_head_dim = 64;
    c->v_head_dim = 128;
    c->norm_epsilon = 1e-5f;
    c->num_query_groups = 1; /* used with --group-query-attention */
    c->min_lr = 0.0f;
    c->lr_decay_style = "linear";
    c->lr_wsd_decay_style = "exponential";
    c->lr_warmup_iters = 0;
    c->lr_warmup_samples = 0;
    c->lr_warmup_fraction = -1; /* not given */
    c->lr_warmup_init = 0.0f;
    c->lr_decay_iters = c->lr_decay_samples = -1;
    c->lr_wsd_decay_iters = c->lr_wsd_decay_samples = -1;
    c->weight_decay = 0.01f;
    c->weight_decay_incr_style = "constant";
    c->adam_beta1 = 0.9f;
    c->adam_beta2 = 0.999f;
    c->adam_eps = 1e-8f;
    c->clip_grad = 1.0f;
    c->main_grads_dtype = c->main_params_dtype = c->exp_avg_dtype = c->exp_avg_sq_dtype = "fp32";
    c->initial_loss_scale = 4294967296.0f; /* Megatron's 2**32 */
    c->min_loss_scale = 1.0f;
    c->loss_scale_window = 1000;
    c->hysteresis = 2;
    c->fp8_recipe = "delayed"; /* Megatron's defaults */
    c->fp8_amax_compute_algo = "most_recent";
    c->fp8_amax_history_len = 1;
    c->seed = 1234;
    c->log_interval = 100;
    c->eval_interval = -1; /* Megatron's None: no periodic validation */
    c->eval_iters = 100;
    c->tensorboard_log_interval = 1;
    c->tokenizer_type = NULL; /* GPT2BPETokenizer with Megatron data or a vocabulary; bytes for text */
    /* parallel sizes stay 0 = "not given": a plan file may set them, else 1 */
    c->engine = "starpu";
}

static bool in_choices(const char *choices, const char *v) {
    size_t n = strlen(v);
    for (const char *p = choices; p && *p;) {
        const char *bar = strchr(p, '|');
        size_t len = bar ? (size_t)(bar - p) : strlen(p);
        if (len == n && !strncmp(p, v, n)) return true;
        p += len + (bar != NULL);
    }
    return false;
}

/* Parses one value of f into dst (NULL: check only); false with a note when malformed. */
static bool parse_value(const flag *f, const char *v, void *dst, mg_run_notes *notes) {
    char *end = NULL;
    errno = 0;
    switch (f->type) {
    case F_INT: {
        long x = strtol(v, &end, 10);
        if (!*v || *end || errno || x < INT_MIN || x > INT_MAX) break;
        if (dst) *(int *)dst = (int)x;
        return true;
    }
    case F_INT3:
    case F_I64: {
        long long x = strtoll(v, &end, 10);
        if (!*v || *end || errno) break;
        if (dst) *(int64_t *)dst = x;
        return true;
    }
    case F_FLOAT: {
        float x = strtof(v, &end);
        if (!*v || *end || errno || !isfinite(x)) {
            mg_run_notes_error(notes, "%s expects a number, got '%s'", f->name, v);
            return false;
        }
        if (dst) *(float *)dst = x;
        return true;
    }
    case F_STR:
    case F_LIST:
        if (!*v) {
            mg_run_notes_error(notes, "%s expects a non-empty value", f->name);
            return false;
        }
        if (f->choices && !in_choices(f->choices, v)) {
            mg_run_notes_error(notes, "%s must be one of %s (got '%s')", f->name, f->choices, v);
            return false;
        }
        if (dst) *(const char **)dst = v;
        return true;
    case F_BOOL: break;
    }
    mg_run_notes_error(notes, "%s expects an integer, got '%s'", f->name, v);
    return false;
}

static const flag *find_flag(const char *a, size_t len) {
    for (size_t k = 0; k < N_FLAGS; k++)
        if (strlen(flags[k].name) == len && strncmp(flags[k].name, a, len) == 0) return &flags[k];
    return NULL;
}

static bool is_flag(const char *a) { return a && a[0] == '-' && a[1] == '-'; }

/* --data-path A B C: the values joined by one space, as mg_gpt_dataset_open reads a
 * blend, into the flag's own buffer (the n-th list flag of the table). */
static void join_list(mg_run_config *c, const flag *f, void *dst, char **v, int n, mg_run_notes *notes) {
    int k = 0;
    for (const flag *g = flags; g < f; g++) k += g->type == F_LIST;
    if (k >= (int)(sizeof c->list_buf / sizeof c->list_buf[0])) {
        mg_run_notes_error(notes, "%s: no buffer for its values", f->name);
        return;
    }
    char *buf = c->list_buf[k];
    size_t o = 0;
    buf[0] = '\0';
    for (int i = 0; i < n; i++) {
        size_t len = strlen(v[i]);
        if (o + len + 2 > sizeof c->list_buf[k]) {
            mg_run_notes_error(notes, "%s: the values are longer than %zu characters", f->name, sizeof c->list_buf[k]);
            return;
        }
        if (i) buf[o++] = ' ';
        memcpy(buf + o, v[i], len + 1);
        o += len;
    }
    *(const char **)dst = buf;
}

static void parse_args(mg_run_config *c, int argc, const char *const *argv, mg_run_notes *notes) {
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!is_flag(a)) {
            mg_run_notes_error(notes, "unexpected argument '%s' (flags start with --)", a);
            continue;
        }
        const char *eq = strchr(a, '=');
        size_t len = eq ? (size_t)(eq - a) : strlen(a);
        const flag *f = find_flag(a, len);
        if (!f) {
            mg_run_notes_error(notes, "unknown flag '%.*s' (see --help)", (int)len, a);
            while (!eq && i + 1 < argc && !is_flag(argv[i + 1])) i++; /* its values, if any */
            continue;
        }
        void *dst = f->off == NOFF ? NULL : (char *)c + f->off;
        bool ok = true;
        if (f->type == F_BOOL) {
            if (eq) {
                mg_run_notes_error(notes, "%s takes no value", f->name);
                continue;
            }
            if (dst) *(bool *)dst = true;
        } else if (f->type == F_LIST || f->type == F_INT3) {
            int first = i + 1, n = 0;
            while (first + n < argc && !is_flag(argv[first + n])) n++;
            i += n;
            if (eq || n == 0 || (f->type == F_INT3 && n != 3)) {
                mg_run_notes_error(notes, "%s needs %s value%s, separated by spaces", f->name,
                                   f->type == F_INT3 ? "three" : "one or more", f->type == F_INT3 ? "s" : "(s)");
                continue;
            }
            for (int k = 0; k < n && ok; k++)
                ok = parse_value(f, argv[first + k], f->type == F_INT3 && dst ? (int64_t *)dst + k : NULL, notes);
            if (ok && dst && f->type == F_LIST) join_list(c, f, dst, (char **)argv + first, n, notes);
        } else {
            const char *v = eq ? eq + 1 : (i + 1 < argc ? argv[i + 1] : NULL);
            /* "--dump-dot --dry-run" forgot a value: never take a flag as one */
            if (!v || (!eq && is_flag(v))) {
                mg_run_notes_error(notes, "%s needs a value", f->name);
                continue;
            }
            if (!eq) i++;
            ok = parse_value(f, v, dst, notes);
        }
        if (!ok) continue;
        if ((size_t)(f - flags) < sizeof c->given) c->given[f - flags] = true;
        if (f->kind == REFUSE) mg_run_notes_error(notes, "%s is not supported: %s", f->name, f->help);
        if (f->kind == NOOP) mg_run_notes_warn(notes, "%s has no effect: %s", f->name, f->help);
    }
}

void mg_run_config_parse(mg_run_config *c, int argc, char **argv, mg_run_notes *notes) {
    if (argc <= 1) {
        int n = 0;
        while (demo_args[n]) n++;
        /* parse_args skips argv[0] */
        const char *args[sizeof demo_args / sizeof *demo_args + 1];
        args[0] = argc ? argv[0] : "mgraph-run";
        memcpy(args + 1, demo_args, (size_t)n * sizeof *args);
        parse_args(c, n + 1, args, notes);
        c->demo = true;
        return;
    }
    parse_args(c, argc, (const char *const *)argv, notes);
    /* Megatron's Llama2Tokenizer is a SentencePiece model with the model's vocabulary and
     * EOS as end-of-document: what SentencePieceTokenizer is here (for training; its BOS
     * is added by Megatron's preprocessing, not by mgraph-preprocess) */
    if (c->tokenizer_type && !strcmp(c->tokenizer_type, "Llama2Tokenizer")) c->tokenizer_type = "SentencePieceTokenizer";
}

/* ---- checks -------------------------------------------------------------------------------- */
/* Megatron's tuple_type: "L,R" or "(L,R)", integers. */
static bool parse_int_pair(const char *s, long *a, long *b) {
    char *e;
    while (*s == ' ') s++;
    bool paren = *s == '(';
    if (paren) s++;
    errno = 0;
    *a = strtol(s, &e, 10);
    if (e == s || *e != ',' || errno) return false;
    s = e + 1;
    *b = strtol(s, &e, 10);
    if (e == s || errno) return false;
    if (paren && *e++ != ')') return false;
    return *e == 0;
}

/* --window-size and --window-attn-skip-freq into window (keys) and window_skip. */
static void check_window(mg_run_config *c, mg_run_notes *n) {
    long l = -1, r = 0;
    if (c->window_size && !parse_int_pair(c->window_size, &l, &r)) {
        mg_run_notes_error(n, "--window-size '%s': want two integers L,R (Megatron's tuple, e.g. 4095,0)", c->window_size);
        return;
    }
    if (c->window_size && (l < -1 || l >= INT_MAX || r != 0)) {
        mg_run_notes_error(n, "--window-size %s: want L >= -1 (-1: no window) and R = 0 (mgraph's GPT is causal: a "
                              "token sees no later one)", c->window_size);
        return;
    }
    c->window = l >= 0 ? (int)l + 1 : 0;
    if (!c->window_attn_skip_freq) return;
    char *e;
    errno = 0;
    long f = strtol(c->window_attn_skip_freq, &e, 10);
    if (e == c->window_attn_skip_freq || *e || errno || f < 1 || f > INT_MAX)
        mg_run_notes_error(n, "--window-attn-skip-freq '%s': want an integer N >= 1 (Megatron's list patterns are not "
                              "supported)", c->window_attn_skip_freq);
    else if (!c->window)
        mg_run_notes_error(n, "--window-attn-skip-freq needs --window-size L,0 with L >= 0");
    else
        c->window_skip = (int)f;
}

/* Megatron's moe_freq_type: a list expression of 0s and 1s, one per layer (its
 * _eval_pattern allows digits, commas, brackets, parentheses, + and *: Python lists,
 * concatenated and repeated). A small recursive descent over the same grammar:
 *   expr := term ('+' term)*    term := factor ('*' INT)* | INT '*' factor
 *   factor := '[' INT (',' INT)* ']' | '(' expr ')'
 * Returns the length (values in v[0..max)), or -1 with *why set. */
typedef struct pattern_parser {
    const char *p;
    unsigned char *v;
    int n, max;
    const char *why;
} pattern_parser;

static int pp_expr(pattern_parser *pp);

static long pp_int(pattern_parser *pp) {
    if (*pp->p < '0' || *pp->p > '9') return pp->why = "a number expected", -1;
    long x = 0;
    while (*pp->p >= '0' && *pp->p <= '9' && x < 1000000) x = 10 * x + (*pp->p++ - '0');
    return x;
}

/* repeats the values from `from` (the factor just parsed) `times` times in all */
static int pp_repeat(pattern_parser *pp, int from, long times) {
    int len = pp->n - from;
    if (times < 0 || (long)len * times > pp->max - from) return pp->why = "the list is too long", -1;
    if (times == 0) pp->n = from;
    for (long t = 1; t < times; t++)
        for (int i = 0; i < len; i++) pp->v[pp->n++] = pp->v[from + i];
    return 0;
}

static int pp_factor(pattern_parser *pp) {
    if (*pp->p == '(') {
        pp->p++;
        if (pp_expr(pp)) return -1;
        if (*pp->p != ')') return pp->why = "')' expected", -1;
        pp->p++;
        return 0;
    }
    if (*pp->p != '[') return pp->why = "a list or '(' expected", -1;
    pp->p++;
    for (;;) {
        long x = pp_int(pp);
        if (x < 0) return -1;
        if (pp->n >= pp->max) return pp->why = "the list is too long", -1;
        pp->v[pp->n++] = (unsigned char)(x > 255 ? 255 : x);
        if (*pp->p == ',') {
            pp->p++;
            continue;
        }
        if (*pp->p != ']') return pp->why = "']' or ',' expected", -1;
        pp->p++;
        return 0;
    }
}

static int pp_term(pattern_parser *pp) {
    int from = pp->n;
    if (*pp->p >= '0' && *pp->p <= '9') { /* INT '*' factor */
        long t = pp_int(pp);
        if (*pp->p != '*') return pp->why = "'*' expected after a number", -1;
        pp->p++;
        if (pp_factor(pp) || pp_repeat(pp, from, t)) return -1;
    } else if (pp_factor(pp)) {
        return -1;
    }
    while (*pp->p == '*') {
        pp->p++;
        long t = pp_int(pp);
        if (t < 0 || pp_repeat(pp, from, t)) return -1;
    }
    return 0;
}

static int pp_expr(pattern_parser *pp) {
    if (pp_term(pp)) return -1;
    while (*pp->p == '+') {
        pp->p++;
        if (pp_term(pp)) return -1;
    }
    return 0;
}

int mg_run_parse_layer_pattern(const char *s, unsigned char *v, int max, const char **why) {
    pattern_parser pp = {s, v, 0, max, NULL};
    if (pp_expr(&pp) == 0 && *pp.p) pp.why = "unexpected text after the list";
    *why = pp.why;
    return pp.why ? -1 : pp.n;
}

/* --moe-layer-freq (an integer or a list) and the router's flags. */
static void check_moe(mg_run_config *c, mg_run_notes *n) {
    const char *f = c->moe_layer_freq_arg;
    if (f && strchr(f, '[')) {
        unsigned char v[MG_MOE_MAX_LAYERS];
        const char *why = NULL;
        int len = mg_run_parse_layer_pattern(f, v, MG_MOE_MAX_LAYERS, &why);
        if (len < 0) {
            mg_run_notes_error(n, "--moe-layer-freq '%s': %s (a list of 0s and 1s, one per layer, as ([0]*3+[1]*58))",
                               f, why);
            return;
        }
        c->moe_pattern_len = len;
        memset(c->moe_pattern, 0, sizeof c->moe_pattern);
        for (int i = 0; i < len; i++) {
            if (v[i] > 1) {
                mg_run_notes_error(n, "--moe-layer-freq '%s': entry %d is %d (1: an MoE layer, 0: dense)", f, i, v[i]);
                return;
            }
            if (v[i]) c->moe_pattern[i / 64] |= 1ull << (i % 64);
        }
        if (len != c->num_layers) /* (Megatron asserts it) */
            mg_run_notes_error(n, "--moe-layer-freq lists %d layers, --num-layers is %d", len, c->num_layers);
    } else if (f) {
        char *e;
        errno = 0;
        long x = strtol(f, &e, 10);
        if (e == f || *e || errno || x < 1 || x > INT_MAX)
            mg_run_notes_error(n, "--moe-layer-freq '%s': an integer N >= 1 or a list of 0s and 1s", f);
        else
            c->moe_layer_freq = (int)x;
    }
    if (!strcmp(c->moe_router_score_function, "sqrtsoftplus"))
        mg_run_notes_error(n, "--moe-router-score-function sqrtsoftplus is not supported: mgraph's router has softmax "
                              "and sigmoid scores");
    if (c->moe_router_dtype && !strcmp(c->moe_router_dtype, "fp64"))
        mg_run_notes_error(n, "--moe-router-dtype fp64 is not supported: routing is fp32");
    if (!strcmp(c->moe_token_dispatcher_type, "allgather"))
        mg_run_notes_error(n, "--moe-token-dispatcher-type allgather is not supported: tokens go to their experts by "
                              "all-to-all (alltoall, flex)");
}

/* RoPE's type and scaling, multi-latent attention (Megatron's argument rules). */
static void check_rope_mla(mg_run_config *c, mg_run_notes *n) {
    bool yarn_pos = !strcmp(c->position_embedding_type, "yarn");
    if (c->rope_type && !c->multi_latent_attention && strcmp(c->rope_type, "rope"))
        mg_run_notes_error(n, "--rope-type %s needs --multi-latent-attention (other attention takes rope only)",
                           c->rope_type);
    if (c->use_rope_scaling && (yarn_pos || c->multi_latent_attention))
        mg_run_notes_error(n, "--use-rope-scaling (Llama 3.1's frequencies) with %s: give one RoPE scaling",
                           yarn_pos ? "--position-embedding-type yarn" : "--multi-latent-attention's YaRN");
    if (!(c->rope_scaling_factor > 0) || !(c->rotary_scaling_factor > 0))
        mg_run_notes_error(n, "--rope-scaling-factor and --rotary-scaling-factor must be > 0");
    if (c->multi_latent_attention) {
        if (c->group_query_attention) /* (Megatron's validate_args) */
            mg_run_notes_error(n, "--group-query-attention and --multi-latent-attention exclude each other");
        if (yarn_pos)
            mg_run_notes_error(n, "--position-embedding-type yarn with --multi-latent-attention: MLA takes YaRN through "
                                  "--rope-type yarn (its default) with --position-embedding-type rope");
        /* MLATransformerConfig's own YaRN fields are not filled from these (Megatron) */
        const char *ignored[] = {"--yarn-original-max-position-embeddings", "--yarn-beta-fast", "--yarn-beta-slow",
                                 "--no-yarn-correction-range-round-to-int"};
        for (size_t i = 0; i < sizeof ignored / sizeof *ignored; i++)
            if (mg_run_config_given(c, ignored[i]))
                mg_run_notes_warn(n, "%s has no effect with --multi-latent-attention (Megatron's MLA YaRN uses its "
                                     "own 4096 positions, betas 32 and 1, rounded)",
                                  ignored[i]);
    }
}

/* ---- --data-args-path / --per-split-data-args-path ------------------------------------
 * Megatron's get_blend_and_blend_per_split: the file's words are --data-path's values; the
 * JSON's train / valid / test each a string (split at white space), a list or null. The
 * joined values live for the program (reachable from here). */
static char *g_data_args[4];

static char *read_text_file(const char *path, mg_run_notes *n, const char *flag) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        mg_run_notes_error(n, "%s %s: %s", flag, path, strerror(errno));
        return NULL;
    }
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap);
    for (size_t r; buf && (r = fread(buf + len, 1, cap - len - 1, f)) > 0;) {
        len += r;
        if (len + 1 == cap) {
            char *nb = cap < ((size_t)1 << 30) ? realloc(buf, cap *= 2) : NULL;
            if (!nb) {
                free(buf);
                buf = NULL;
            }
            buf = nb;
        }
    }
    int bad = ferror(f);
    fclose(f);
    if (!buf || bad) {
        free(buf);
        mg_run_notes_error(n, "%s %s: cannot read it (or it is over 1 GiB)", flag, path);
        return NULL;
    }
    buf[len] = '\0';
    return buf;
}

/* The words of s joined by one space into a fresh string; NULL with *empty when none. */
static char *join_words(const char *s, size_t len, char *out, size_t *o) {
    size_t i = 0;
    while (i < len) {
        while (i < len && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r' || s[i] == '\f' || s[i] == '\v')) i++;
        size_t st = i;
        while (i < len && !(s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r' || s[i] == '\f' || s[i] == '\v')) i++;
        if (i > st) {
            if (*o) out[(*o)++] = ' ';
            memcpy(out + *o, s + st, i - st);
            *o += i - st;
        }
    }
    out[*o] = '\0';
    return out;
}

static void load_data_args(mg_run_config *c, mg_run_notes *n) {
    if (c->data_args_path) {
        if (c->data_path) {
            mg_run_notes_error(n, "give --data-path or --data-args-path, not both");
            return;
        }
        char *text = read_text_file(c->data_args_path, n, "--data-args-path");
        if (!text) return;
        size_t len = strlen(text), o = 0;
        char *out = malloc(len + 1);
        if (out) join_words(text, len, out, &o);
        free(text);
        if (!out || o == 0) {
            free(out);
            mg_run_notes_error(n, "--data-args-path %s holds no data path", c->data_args_path);
            return;
        }
        free(g_data_args[3]);
        c->data_path = g_data_args[3] = out;
    }
    if (!c->per_split_data_args_path) return;
    if (c->split_data_path[0] || c->split_data_path[1] || c->split_data_path[2]) {
        mg_run_notes_error(n, "give --train/--valid/--test-data-path or --per-split-data-args-path, not both");
        return;
    }
    json_error_t jerr;
    json_t *root = json_load_file(c->per_split_data_args_path, 0, &jerr);
    if (!json_is_object(root)) {
        mg_run_notes_error(n, "--per-split-data-args-path %s: %s", c->per_split_data_args_path,
                           root ? "not a JSON object" : jerr.text);
        json_decref(root);
        return;
    }
    static const char *keys[3] = {"train", "valid", "test"};
    for (int s = 0; s < 3; s++) {
        json_t *v = json_object_get(root, keys[s]);
        if (!v) {
            mg_run_notes_error(n, "--per-split-data-args-path %s has no \"%s\" (Megatron reads train, valid and test)",
                               c->per_split_data_args_path, keys[s]);
            continue;
        }
        size_t total = 1;
        if (json_is_string(v)) total += json_string_length(v);
        else if (json_is_array(v)) {
            size_t i;
            json_t *e;
            json_array_foreach(v, i, e) {
                if (!json_is_string(e)) {
                    mg_run_notes_error(n, "--per-split-data-args-path: \"%s\"[%zu] is not a string", keys[s], i);
                    total = 0;
                    break;
                }
                total += json_string_length(e) + 1;
            }
            if (!total) continue;
        } else if (!json_is_null(v)) {
            mg_run_notes_error(n, "--per-split-data-args-path: \"%s\" is not a string, a list or null", keys[s]);
            continue;
        }
        char *out = malloc(total);
        size_t o = 0;
        if (!out) {
            mg_run_notes_error(n, "out of memory reading --per-split-data-args-path");
            continue;
        }
        if (json_is_string(v)) join_words(json_string_value(v), json_string_length(v), out, &o);
        else if (json_is_array(v)) {
            size_t i;
            json_t *e;
            json_array_foreach(v, i, e) join_words(json_string_value(e), json_string_length(e), out, &o);
        }
        free(g_data_args[s]);
        g_data_args[s] = NULL;
        if (o == 0) {
            free(out);
            c->split_data_path[s] = NULL;
        } else {
            c->split_data_path[s] = g_data_args[s] = out;
        }
    }
    json_decref(root);
}

/* The tokenizer flags: the types mgraph has, and the flags each one reads. */
static void check_tokenizer(mg_run_config *c, mg_run_notes *n) {
    static const char *have[] = {"ByteLevelTokenizer", "GPT2BPETokenizer", "SentencePieceTokenizer",
                                 "HuggingFaceTokenizer", "TikTokenizer", "NullTokenizer"};
    const char *t = c->tokenizer_type;
    bool known = !t;
    for (size_t i = 0; t && i < sizeof have / sizeof *have; i++) known |= !strcmp(t, have[i]);
    if (!known)
        mg_run_notes_error(n, "--tokenizer-type %s is not supported: mgraph has GPT2BPETokenizer, SentencePieceTokenizer "
                              "(and Llama2Tokenizer, the same for training), HuggingFaceTokenizer, TikTokenizer, "
                              "NullTokenizer and ByteLevelTokenizer",
                           t);
    bool tik = t && !strcmp(t, "TikTokenizer"), null = t && !strcmp(t, "NullTokenizer");
    if (null && c->vocab_size <= 0) mg_run_notes_error(n, "--tokenizer-type NullTokenizer needs --vocab-size N (N >= 1)");
    if (c->vocab_size < 0) mg_run_notes_error(n, "--vocab-size must be >= 1");
    if (mg_run_config_given(c, "--vocab-size") && !tik && !null)
        mg_run_notes_warn(n, "--vocab-size has no effect with %s: the vocabulary is the tokenizer's", t ? t : "this tokenizer");
    if (!tik && (c->tiktoken_pattern || c->tiktoken_num_special_tokens || c->special_tokens))
        mg_run_notes_warn(n, "--tiktoken-pattern, --tiktoken-num-special-tokens and --tokenizer-special-tokens are "
                             "TikTokenizer's: no effect with %s", t ? t : "this tokenizer");
    if (mg_run_config_given(c, "--null-tokenizer-eod-id") && !null)
        mg_run_notes_warn(n, "--null-tokenizer-eod-id is NullTokenizer's: no effect with %s", t ? t : "this tokenizer");
    if (c->tokenizer_hf_no_include_special_tokens && !(t && !strcmp(t, "HuggingFaceTokenizer")))
        mg_run_notes_warn(n, "--tokenizer-hf-no-include-special-tokens is HuggingFaceTokenizer's: no effect here");
    /* --tokenizer-special-tokens: split a copy of the joined values */
    size_t k = 0;
    if (c->special_tokens) {
        snprintf(c->special_tokens_buf, sizeof c->special_tokens_buf, "%s", c->special_tokens);
        char *p = c->special_tokens_buf;
        while (*p && k + 1 < sizeof c->special_tokens_v / sizeof *c->special_tokens_v) {
            c->special_tokens_v[k++] = p;
            char *sp = strchr(p, ' ');
            if (!sp) break;
            *sp = '\0';
            p = sp + 1;
        }
        if (k + 1 == sizeof c->special_tokens_v / sizeof *c->special_tokens_v)
            mg_run_notes_error(n, "--tokenizer-special-tokens: at most %zu tokens", k);
    }
    c->special_tokens_v[k] = NULL;
}

mg_tokenizer_config mg_run_tokenizer_config(const mg_run_config *c) {
    mg_tokenizer_config t = {.type = c->tokenizer_type,
                             .vocab_file = c->vocab_file,
                             .merge_file = c->merge_file,
                             .model_file = c->tokenizer_model,
                             .vocab_size = c->vocab_size,
                             .tiktoken_pattern = c->tiktoken_pattern,
                             .tiktoken_num_special_tokens = c->tiktoken_num_special_tokens,
                             .special_tokens = c->special_tokens ? c->special_tokens_v : NULL,
                             .null_eod_set = mg_run_config_given(c, "--null-tokenizer-eod-id"),
                             .null_eod_id = c->null_tokenizer_eod_id,
                             .hf_no_special_tokens = c->tokenizer_hf_no_include_special_tokens};
    return t;
}

/* Mixed precision as Megatron's validate_args and OptimizerConfig check it. */
static void check_precision(mg_run_config *c, mg_run_notes *n) {
    bool pao = c->use_precision_aware_optimizer;
    if (c->fp16 && c->bf16) mg_run_notes_error(n, "--fp16 and --bf16 cannot both be given (Megatron's validate_args)");
    if ((c->fp16 || c->bf16) && (c->use_megatron_fsdp || c->use_torch_fsdp2))
        mg_run_notes_error(n, "%s with %s is not supported yet: FSDP's parameter shards and the mixed-precision model "
                              "copies are not wired together (--use-distributed-optimizer shards the optimizer with them)",
                           c->fp16 ? "--fp16" : "--bf16", c->use_megatron_fsdp ? "--use-megatron-fsdp" : "--use-torch-fsdp2");
    static const char *scaler_flags[] = {"--loss-scale", "--initial-loss-scale", "--min-loss-scale", "--loss-scale-window",
                                         "--hysteresis"};
    for (size_t i = 0; i < sizeof scaler_flags / sizeof *scaler_flags; i++)
        if (!c->fp16 && mg_run_config_given(c, scaler_flags[i]))
            mg_run_notes_error(n, "%s needs --fp16 (loss scaling is fp16's; bf16 and fp32 train unscaled)", scaler_flags[i]);
    if (c->fp16) {
        if (mg_run_config_given(c, "--loss-scale") && !(c->loss_scale > 0 && isfinite(c->loss_scale)))
            mg_run_notes_error(n, "--loss-scale %g: want a positive number", (double)c->loss_scale);
        mg_loss_scaler ls = mg_run_config_loss_scaler(c);
        const char *bad = mg_loss_scaler_invalid(&ls);
        if (bad && !mg_run_config_given(c, "--loss-scale"))
            mg_run_notes_error(n, "--initial-loss-scale %g --min-loss-scale %g --loss-scale-window %d --hysteresis %d: %s",
                               (double)c->initial_loss_scale, (double)c->min_loss_scale, c->loss_scale_window,
                               c->hysteresis, bad);
        if (c->grad_reduce_in_bf16) mg_run_notes_error(n, "--grad-reduce-in-bf16 needs --bf16, not --fp16");
    }
    const char *dt[4][2] = {{"--main-grads-dtype", c->main_grads_dtype},
                            {"--main-params-dtype", c->main_params_dtype},
                            {"--exp-avg-dtype", c->exp_avg_dtype},
                            {"--exp-avg-sq-dtype", c->exp_avg_sq_dtype}};
    for (int i = 0; i < 4; i++) {
        if (!strcmp(dt[i][1], "fp32")) continue;
        if (!pao)
            mg_run_notes_error(n, "%s %s needs --use-precision-aware-optimizer (Megatron: it can only be fp32 without "
                                  "the precision-aware optimizer)",
                               dt[i][0], dt[i][1]);
        else if (i == 1 || strcmp(dt[i][1], "bf16"))
            mg_run_notes_error(n, "%s %s is not supported: mgraph stores %s as fp32 or bf16 (Transformer Engine keeps "
                                  "fp16 and fp8 optimizer state with per-tensor scales, and fp16 main parameters)",
                               dt[i][0], dt[i][1], i == 1 ? "main parameters only" : "optimizer state");
    }
    if (pao && !c->use_distributed_optimizer)
        mg_run_notes_error(n, "--use-precision-aware-optimizer is only supported with the distributed optimizer "
                              "(--use-distributed-optimizer)");
    if (c->grad_reduce_in_bf16 && !c->bf16 && !c->fp16) /* (Megatron reads it only with --bf16) */
        mg_run_notes_warn(n, "--grad-reduce-in-bf16 has no effect without --bf16: the gradients of an fp32 model are fp32");
    if (c->bf16 && c->grad_reduce_in_bf16 && c->accumulate_allreduce_grads_in_fp32)
        mg_run_notes_warn(n, "--grad-reduce-in-bf16 overrides --accumulate-allreduce-grads-in-fp32 (as in Megatron)");
    if (c->bf16 && c->accumulate_allreduce_grads_in_fp32 && !c->grad_reduce_in_bf16 && strcmp(c->main_grads_dtype, "fp32"))
        mg_run_notes_error(n, "--main-grads-dtype can only be fp32 when --accumulate-allreduce-grads-in-fp32 is set");
}

/* fp8 as Megatron's validate_args and Transformer Engine check it. */
static void check_fp8(mg_run_config *c, mg_run_notes *n) {
    static const char *recipe_flags[] = {"--fp8-recipe", "--fp8-margin", "--fp8-amax-history-len",
                                         "--fp8-amax-compute-algo"};
    if (!c->fp8_format) {
        for (size_t i = 0; i < sizeof recipe_flags / sizeof *recipe_flags; i++)
            if (mg_run_config_given(c, recipe_flags[i]))
                mg_run_notes_error(n, "%s needs --fp8-format (e4m3 or hybrid): without it nothing is fp8", recipe_flags[i]);
        return;
    }
    if (!strcmp(c->fp8_recipe, "mxfp8") || !strcmp(c->fp8_recipe, "blockwise"))
        mg_run_notes_error(n, "--fp8-recipe %s is not supported: mgraph scales per tensor (delayed or tensorwise); %s "
                              "scales blocks of %s",
                           c->fp8_recipe, c->fp8_recipe, !strcmp(c->fp8_recipe, "mxfp8") ? "32 (MX, Blackwell)" : "128");
    bool delayed = !strcmp(c->fp8_recipe, "delayed");
    if (c->fp8_amax_history_len < 1 || c->fp8_amax_history_len > 1 << 20)
        mg_run_notes_error(n, "--fp8-amax-history-len must be in 1..%d (got %d)", 1 << 20, c->fp8_amax_history_len);
    if (c->fp8_margin < 0 || c->fp8_margin > 64)
        mg_run_notes_error(n, "--fp8-margin must be in 0..64 (got %d)", c->fp8_margin);
    for (size_t i = 1; !delayed && i < sizeof recipe_flags / sizeof *recipe_flags; i++)
        if (mg_run_config_given(c, recipe_flags[i]))
            mg_run_notes_warn(n, "%s has no effect with --fp8-recipe %s (it sets the delayed recipe's scales)",
                              recipe_flags[i], c->fp8_recipe);
}

mg_fp8_options mg_run_config_fp8(const mg_run_config *c) {
    mg_fp8_options o = mg_fp8_defaults();
    if (!c->fp8_format) return o;
    o.format = !strcmp(c->fp8_format, "hybrid") ? MG_FP8_HYBRID : MG_FP8_E4M3;
    o.recipe = !strcmp(c->fp8_recipe, "tensorwise") ? MG_FP8_TENSORWISE : MG_FP8_DELAYED;
    o.amax_history_len = c->fp8_amax_history_len;
    o.amax_algo = !strcmp(c->fp8_amax_compute_algo, "max") ? MG_FP8_AMAX_MAX : MG_FP8_AMAX_MOST_RECENT;
    o.margin = c->fp8_margin;
    return o;
}

static mg_dtype dtype_of(const char *s) {
    return !strcmp(s, "bf16") ? MG_BF16 : !strcmp(s, "fp16") ? MG_F16 : MG_F32;
}

mg_precision_options mg_run_config_precision(const mg_run_config *c) {
    mg_precision_options o = mg_precision_defaults();
    if (c->bf16) o.params = MG_BF16;
    o.main_grads = dtype_of(c->main_grads_dtype);
    if (c->fp16) { /* Megatron: fp16 gradients are accumulated and reduced in fp16 unless asked otherwise */
        o.params = MG_F16;
        if (!c->accumulate_allreduce_grads_in_fp32 && !strcmp(c->main_grads_dtype, "fp32")) o.main_grads = MG_F16;
    }
    if (c->bf16 && c->grad_reduce_in_bf16) o.main_grads = MG_BF16; /* Megatron's grad_reduce_in_fp32 = False */
    o.exp_avg = dtype_of(c->exp_avg_dtype);
    o.exp_avg_sq = dtype_of(c->exp_avg_sq_dtype);
    return o;
}

mg_loss_scaler mg_run_config_loss_scaler(const mg_run_config *c) {
    if (mg_run_config_given(c, "--loss-scale")) return mg_loss_scaler_constant(c->loss_scale);
    return mg_loss_scaler_dynamic(c->initial_loss_scale, c->min_loss_scale, c->loss_scale_window, c->hysteresis);
}

void mg_run_config_check(mg_run_config *c, mg_run_notes *n) {
    /* Megatron's validate_args: the shorthand and the legacy spelling set the flags they stand for */
    if (c->recompute_activations) c->recompute_granularity = "selective";
    if (c->use_rotary_position_embeddings) c->position_embedding_type = "rope";
    check_window(c, n);
    if (c->override_opt_param_scheduler && c->use_checkpoint_opt_param_scheduler) /* (Megatron asserts it) */
        mg_run_notes_error(n, "--override-opt-param-scheduler and --use-checkpoint-opt-param-scheduler: give one");
    /* Megatron refuses its fused bias-GELU without a bias (TransformerConfig) and so needs
     * --no-bias-gelu-fusion there, which makes its GELU the exact one */
    if (c->disable_bias_linear && !c->swiglu && !c->squared_relu && !c->no_bias_gelu_fusion)
        mg_run_notes_warn(n, "--disable-bias-linear with a GELU MLP: Megatron requires --no-bias-gelu-fusion here (its "
                             "fused bias-GELU needs the bias) and then applies the exact GELU; without it mgraph keeps "
                             "the tanh approximation");
    /* Megatron: with SwiGLU the default ffn keeps the parameter count of 4h, rounded
     * down to a multiple of 64 */
    if (c->ffn_hidden_size <= 0) { /* in 64 bits, capped: a huge --hidden-size is reported, never overflows */
        int64_t f = c->swiglu ? (int64_t)((4.0 * c->hidden_size * 2 / 3) / 64) * 64 : 4 * (int64_t)c->hidden_size;
        c->ffn_hidden_size = f > INT_MAX ? INT_MAX : (int)f;
    }
    if (c->max_position_embeddings <= 0) c->max_position_embeddings = c->seq_length;
    if (strcmp(c->position_embedding_type, "learned_absolute") && strcmp(c->position_embedding_type, "rope") &&
        strcmp(c->position_embedding_type, "none") && strcmp(c->position_embedding_type, "yarn"))
        mg_run_notes_error(n, "--position-embedding-type %s is not supported: mgraph's GPT has learned_absolute, rope, "
                              "yarn and none",
                           c->position_embedding_type);
    check_rope_mla(c, n);
    check_tokenizer(c, n);
    check_precision(c, n);
    check_fp8(c, n);
    if (c->no_position_embedding && !strcmp(c->position_embedding_type, "learned_absolute"))
        c->position_embedding_type = "none"; /* Megatron's add_position_embedding = False */
    if (mg_run_config_given(c, "--kv-channels") && c->kv_channels < 1)
        mg_run_notes_error(n, "--kv-channels must be >= 1 (got %d)", c->kv_channels);
    if (strcmp(c->moe_router_load_balancing_type, "aux_loss") && strcmp(c->moe_router_load_balancing_type, "seq_aux_loss") &&
        strcmp(c->moe_router_load_balancing_type, "none"))
        mg_run_notes_error(n, "--moe-router-load-balancing-type %s is not supported: mgraph has Megatron's aux_loss, "
                              "seq_aux_loss and none (with --moe-aux-loss-coeff)",
                           c->moe_router_load_balancing_type);
    check_moe(c, n);
    if (strcmp(c->optimizer, "adam"))
        mg_run_notes_error(n, "--optimizer %s is not supported: mgraph's optimizer is Adam with decoupled weight "
                              "decay (Megatron's adam)",
                           c->optimizer);
    if (c->exit_interval < 0) mg_run_notes_error(n, "--exit-interval must be >= 1");
    if (c->distributed_timeout_minutes < 1 || c->distributed_timeout_minutes > 10080)
        mg_run_notes_error(n, "--distributed-timeout-minutes must be in 1..10080 (a week), got %lld",
                           (long long)c->distributed_timeout_minutes);
    if (c->exit_duration_in_mins < 0 || !(c->exit_duration_in_mins == c->exit_duration_in_mins))
        mg_run_notes_error(n, "--exit-duration-in-mins must be > 0");
    if (c->group_query_attention && c->num_query_groups < 1)
        mg_run_notes_error(n, "--num-query-groups must be >= 1 (got %d)", c->num_query_groups);
    if (c->micro_batch_size < 1) mg_run_notes_error(n, "--micro-batch-size must be >= 1");
    if (c->global_batch_size < 0) mg_run_notes_error(n, "--global-batch-size must be >= 1");
    else if (c->global_batch_size > 0 && c->micro_batch_size >= 1 && c->global_batch_size % c->micro_batch_size)
        mg_run_notes_error(n, "--global-batch-size (%d) must be a multiple of --micro-batch-size (%d)",
                           c->global_batch_size, c->micro_batch_size);
    /* Megatron: iteration-based or sample-based, never both (arguments.py validate_args) */
    bool by_iters = c->train_iters >= 0, by_samples = c->train_samples >= 0;
    if (by_iters && by_samples) mg_run_notes_error(n, "give --train-iters or --train-samples, not both");
    if (by_iters && c->train_iters < 1) mg_run_notes_error(n, "--train-iters must be >= 1");
    if (by_samples && c->train_samples < 1) mg_run_notes_error(n, "--train-samples must be >= 1");
    if (!by_samples && !by_iters) c->train_iters = 300;
    if (by_samples) {
        if (c->lr_decay_iters >= 0) mg_run_notes_error(n, "--lr-decay-iters is for --train-iters (use --lr-decay-samples)");
        if (c->lr_warmup_iters) mg_run_notes_error(n, "--lr-warmup-iters is for --train-iters (use --lr-warmup-samples)");
        if (c->lr_wsd_decay_iters >= 0)
            mg_run_notes_error(n, "--lr-wsd-decay-iters is for --train-iters (use --lr-wsd-decay-samples)");
    } else {
        if (c->lr_decay_samples >= 0) mg_run_notes_error(n, "--lr-decay-samples is for --train-samples (use --lr-decay-iters)");
        if (c->lr_warmup_samples) mg_run_notes_error(n, "--lr-warmup-samples is for --train-samples (use --lr-warmup-iters)");
        if (c->lr_wsd_decay_samples >= 0)
            mg_run_notes_error(n, "--lr-wsd-decay-samples is for --train-samples (use --lr-wsd-decay-iters)");
    }
    /* Megatron: "expected no batch-size rampup for iteration-based training" */
    if (mg_run_config_given(c, "--rampup-batch-size") && !by_samples)
        mg_run_notes_error(n, "--rampup-batch-size needs --train-samples (Megatron has no batch-size ramp for "
                              "iteration-based training)");
    if (c->lr_warmup_fraction != -1 && (c->lr_warmup_iters || c->lr_warmup_samples))
        mg_run_notes_error(n, "give one of --lr-warmup-fraction and --lr-warmup-%s", by_samples ? "samples" : "iters");
    if (c->lr_warmup_fraction != -1 && !(c->lr_warmup_fraction >= 0 && c->lr_warmup_fraction <= 1))
        mg_run_notes_error(n, "--lr-warmup-fraction must be in [0, 1] (got %g)", c->lr_warmup_fraction);
    if (c->lr_warmup_iters < 0 || c->lr_warmup_samples < 0) mg_run_notes_error(n, "the warmup must be >= 0");
    if (c->lr_decay_iters == 0 || c->lr_decay_samples == 0 || c->lr_decay_iters < -1 || c->lr_decay_samples < -1)
        mg_run_notes_error(n, "the decay span (--lr-decay-iters/--lr-decay-samples) must be >= 1");
    if (!(c->lr >= 0) || !(c->min_lr >= 0) || c->min_lr > c->lr)
        mg_run_notes_error(n, "need 0 <= --min-lr <= --lr (got --min-lr %g, --lr %g)", c->min_lr, c->lr);
    if (!(c->lr_warmup_init >= 0) || c->lr_warmup_init > c->lr)
        mg_run_notes_error(n, "need 0 <= --lr-warmup-init <= --lr (got %g)", c->lr_warmup_init);
    bool dlr = mg_run_config_given(c, "--decoupled-lr"), dmin = mg_run_config_given(c, "--decoupled-min-lr");
    float dlo = dmin ? c->decoupled_min_lr : c->min_lr; /* (Megatron's default: --min-lr) */
    if (dlr && (!(c->decoupled_lr >= 0) || !(dlo >= 0) || dlo > c->decoupled_lr))
        mg_run_notes_error(n, "need 0 <= --decoupled-min-lr (default --min-lr) <= --decoupled-lr (got %g, %g)", dlo,
                           c->decoupled_lr);
    if (dmin && !dlr)
        mg_run_notes_warn(n, "--decoupled-min-lr has no effect without --decoupled-lr (as in Megatron)");
    /* Megatron's weight-decay schedule: its arguments.py asserts these */
    bool wd0 = mg_run_config_given(c, "--start-weight-decay"), wd1 = mg_run_config_given(c, "--end-weight-decay");
    if (!strcmp(c->weight_decay_incr_style, "constant") && (wd0 || wd1))
        mg_run_notes_error(n, "--start-weight-decay / --end-weight-decay need --weight-decay-incr-style linear or "
                              "cosine (constant is --weight-decay throughout)");
    if (strcmp(c->weight_decay_incr_style, "constant") && (!wd0 || !wd1))
        mg_run_notes_error(n, "--weight-decay-incr-style %s needs --start-weight-decay and --end-weight-decay",
                           c->weight_decay_incr_style);
    if ((wd0 && !(c->start_weight_decay >= 0)) || (wd1 && !(c->end_weight_decay >= 0)))
        mg_run_notes_error(n, "--start-weight-decay and --end-weight-decay must be >= 0 (got %g, %g)",
                           c->start_weight_decay, c->end_weight_decay);
    if (!strcmp(c->lr_decay_style, "WSD") && c->lr_wsd_decay_iters < 0 && c->lr_wsd_decay_samples < 0)
        mg_run_notes_error(n, "--lr-decay-style WSD needs --lr-wsd-decay-%s", by_samples ? "samples" : "iters");
    if (c->lr_wsd_decay_iters == 0 || c->lr_wsd_decay_samples == 0 || c->lr_wsd_decay_iters < -1 ||
        c->lr_wsd_decay_samples < -1)
        mg_run_notes_error(n, "the WSD annealing span must be >= 1");
    if (!(c->adam_beta1 >= 0 && c->adam_beta1 < 1) || !(c->adam_beta2 >= 0 && c->adam_beta2 < 1))
        mg_run_notes_error(n, "--adam-beta1/--adam-beta2 must be in [0, 1)");
    if (!(c->adam_eps > 0)) mg_run_notes_error(n, "--adam-eps must be > 0");
    if (c->log_interval < 1) mg_run_notes_error(n, "--log-interval must be >= 1");
    if (c->tensorboard_log_interval < 1) mg_run_notes_error(n, "--tensorboard-log-interval must be >= 1");
    if (c->sample_interval < 0) mg_run_notes_error(n, "--sample-interval must be >= 0 (0: no samples)");
    if (c->sample_prompt && c->sample_interval <= 0) mg_run_notes_error(n, "--sample-prompt needs --sample-interval");
    if (c->eval_iters < 0) mg_run_notes_error(n, "--eval-iters must be >= 0");
    if (c->make_vocab_size_divisible_by < 1) mg_run_notes_error(n, "--make-vocab-size-divisible-by must be >= 1");
    if (c->cpu_workers < 0) mg_run_notes_error(n, "--cpu-workers must be >= 0");
    if (c->dot_summary_depth < 0) mg_run_notes_error(n, "--dot-summary-depth must be >= 1");
    unsigned phases;
    mg_error pe = {0};
    if (c->dot_summary_phase && mg_dot_parse_phases(c->dot_summary_phase, &phases, &pe))
        mg_run_notes_error(n, "--dot-summary-phase: %s", pe.msg);
    if (c->save_interval < 0 || c->save_retain < 0) mg_run_notes_error(n, "--save-interval and --save-retain must be >= 0");
    if ((c->save_interval || c->save_retain) && !c->save)
        mg_run_notes_error(n, "--save-interval and --save-retain need --save DIR");
    if (c->async_save && !c->save) mg_run_notes_error(n, "--async-save needs --save DIR");
    if (c->non_persistent_save_interval < 0) mg_run_notes_error(n, "--non-persistent-save-interval must be >= 0");
    if (c->non_persistent_save_interval > 0 || c->non_persistent_ckpt_type || c->non_persistent_local_ckpt_dir) {
        const char *ty = c->non_persistent_ckpt_type;
        if (!ty)
            mg_run_notes_error(n, "--non-persistent-save-interval needs --non-persistent-ckpt-type local (Megatron's "
                                  "default, None, saves no non-persistent checkpoint)");
        else if (strcmp(ty, "local"))
            mg_run_notes_error(n, "--non-persistent-ckpt-type %s is not supported: only local (into "
                                  "--non-persistent-local-ckpt-dir)", ty);
        else if (!c->non_persistent_local_ckpt_dir)
            mg_run_notes_error(n, "--non-persistent-ckpt-type local needs --non-persistent-local-ckpt-dir DIR");
        else if (c->non_persistent_save_interval <= 0)
            mg_run_notes_error(n, "--non-persistent-ckpt-type local needs --non-persistent-save-interval N");
        else if (c->save && !strcmp(c->save, c->non_persistent_local_ckpt_dir))
            mg_run_notes_error(n, "--non-persistent-local-ckpt-dir must not be --save's directory");
    }
    load_data_args(c, n);
    if (c->text_file && c->data_path) mg_run_notes_error(n, "give --text-file or --data-path, not both");
    bool per_split = c->split_data_path[0] || c->split_data_path[1] || c->split_data_path[2];
    /* (Megatron's builder silently prefers the mock data; two sources is a mistake here) */
    if (c->mock_data && (c->data_path || c->text_file || per_split))
        mg_run_notes_error(n, "--mock-data generates the data: give it without --%s",
                           c->data_path ? "data-path" : c->text_file ? "text-file" : "train-data-path / --valid-data-path / --test-data-path");
    if (per_split && (c->data_path || c->text_file)) /* Megatron's get_blend_and_blend_per_split */
        mg_run_notes_error(n, "give --%s or --train-data-path / --valid-data-path / --test-data-path, not both",
                           c->data_path ? "data-path" : "text-file");
    else if (per_split && !c->split_data_path[0] && !c->skip_train)
        mg_run_notes_error(n, "--valid-data-path / --test-data-path without --train-data-path: nothing to train on");
    if (per_split && c->split)
        mg_run_notes_warn(n, "--split has no effect with --train-data-path / --valid-data-path / --test-data-path (each "
                             "dataset is its split, whole)");
    /* Megatron's pretrain_gpt.py defaults to GPT2BPETokenizer; mgraph's own raw-text
     * input (--text-file, the default corpus) is byte-level unless a vocabulary is given. */
    if (!c->tokenizer_type)
        c->tokenizer_type = c->data_path || per_split || c->vocab_file || c->merge_file ? "GPT2BPETokenizer"
                            : c->tokenizer_model                           ? "SentencePieceTokenizer"
                                                                           : "ByteLevelTokenizer";
    if (!strcmp(c->tokenizer_type, "GPT2BPETokenizer") && (!c->vocab_file || !c->merge_file))
        mg_run_notes_error(n, "--tokenizer-type GPT2BPETokenizer (Megatron's default with --data-path) needs "
                              "--vocab-file and --merge-file");
}

int mg_run_config_model(const mg_run_config *c, mg_gpt_config *m, mg_error *err) {
    *m = mg_gpt_defaults();
    m->num_layers = c->num_layers;
    m->hidden = c->hidden_size;
    m->ffn_hidden = c->ffn_hidden_size;
    m->heads = c->num_attention_heads;
    m->seq_length = c->seq_length;
    m->max_position = c->max_position_embeddings;
    m->init_std = c->init_method_std;
    m->hidden_dropout = c->hidden_dropout;
    m->attention_dropout = c->attention_dropout;
    m->moe.num_experts = c->num_experts;
    m->moe.ffn_hidden = c->moe_ffn_hidden_size;
    m->moe.topk = c->moe_router_topk;
    m->moe.pre_softmax = c->moe_router_pre_softmax;
    m->moe.aux_loss_coeff = c->moe_aux_loss_coeff;
    m->moe.z_loss_coeff = c->moe_z_loss_coeff;
    m->moe.layer_freq = c->moe_layer_freq;
    m->moe.pattern_len = c->moe_pattern_len;
    memcpy(m->moe.layer_pattern, c->moe_pattern, sizeof m->moe.layer_pattern);
    m->moe.score = !strcmp(c->moe_router_score_function, "sigmoid") ? MG_MOE_SIGMOID : MG_MOE_SOFTMAX;
    m->moe.num_groups = c->moe_router_num_groups;
    m->moe.group_topk = c->moe_router_group_topk;
    m->moe.topk_scaling = c->moe_router_topk_scaling_factor;
    m->moe.expert_bias = c->moe_router_enable_expert_bias;
    m->moe.bias_update_rate = c->moe_router_bias_update_rate;
    m->moe.shared_ffn = c->moe_shared_expert_intermediate_size;
    m->mtp_num_layers = c->mtp_num_layers;
    m->mtp_loss_scaling_factor = c->mtp_loss_scaling_factor;
    m->moe.balance = !strcmp(c->moe_router_load_balancing_type, "seq_aux_loss") ? MG_MOE_SEQ_AUX_LOSS
                     : !strcmp(c->moe_router_load_balancing_type, "none")       ? MG_MOE_NO_BALANCING_LOSS
                                                                                : MG_MOE_AUX_LOSS;
    m->moe.capacity_factor = c->moe_expert_capacity_factor;
    m->moe.pad_to_capacity = c->moe_pad_expert_input_to_capacity;
    if (!strcmp(c->moe_token_drop_policy, "position")) m->moe.drop_policy = MG_MOE_DROP_POSITION;
    else if (strcmp(c->moe_token_drop_policy, "probs"))
        return mg_error_set(err, MG_ERR_INVALID, "--moe-token-drop-policy must be probs or position (got '%s')",
                            c->moe_token_drop_policy);
    if (strcmp(c->moe_token_dispatcher_type, "alltoall") && strcmp(c->moe_token_dispatcher_type, "flex"))
        return mg_error_set(err, MG_ERR_INVALID, "--moe-token-dispatcher-type %s is not supported yet (alltoall is)",
                            c->moe_token_dispatcher_type);
    if (c->moe_expert_capacity_factor < 0)
        return mg_error_set(err, MG_ERR_INVALID, "--moe-expert-capacity-factor must be > 0 (got %g)",
                            c->moe_expert_capacity_factor);
    /* the LLaMA family (choices checked by mg_run_config_check) */
    m->norm = strcmp(c->normalization, "RMSNorm") ? MG_NORM_LAYERNORM : MG_NORM_RMSNORM;
    bool yarn_pos = !strcmp(c->position_embedding_type, "yarn");
    m->pos_emb = !strcmp(c->position_embedding_type, "rope") || yarn_pos ? MG_POS_ROPE
                 : !strcmp(c->position_embedding_type, "none")          ? MG_POS_NONE
                                                                        : MG_POS_LEARNED;
    m->kv_channels = c->kv_channels;
    m->rope.interleaved = c->rotary_interleaved;
    m->mla = (mg_mla_config){c->multi_latent_attention, c->q_lora_rank, c->kv_lora_rank, c->qk_head_dim,
                             c->qk_pos_emb_head_dim, c->v_head_dim};
    if (c->use_rope_scaling) { /* Megatron's RotaryEmbedding._apply_scaling: Llama 3.1's 1, 4 over 8192 */
        m->rope.scaling = MG_ROPE_LLAMA3;
        m->rope.factor = c->rope_scaling_factor;
        m->rope.original_max_pos = 8192;
    } else if (yarn_pos || (c->multi_latent_attention && (!c->rope_type || !strcmp(c->rope_type, "yarn")))) {
        m->rope.scaling = MG_ROPE_YARN;
        m->rope.factor = c->rotary_scaling_factor;
        m->rope.mscale = c->mscale;
        m->rope.mscale_all_dim = c->mscale_all_dim;
        if (c->multi_latent_attention) { /* MLATransformerConfig's defaults, whatever the yarn flags */
            m->rope.original_max_pos = 4096;
        } else {
            m->rope.original_max_pos = c->yarn_original_max_position_embeddings;
            m->rope.beta_fast = c->yarn_beta_fast;
            m->rope.beta_slow = c->yarn_beta_slow;
            m->rope.no_round = c->no_yarn_round;
        }
    }
    m->rotary_base = c->rotary_base;
    m->rotary_percent = c->rotary_percent;
    m->ln_eps = c->norm_epsilon;
    m->swiglu = c->swiglu;
    m->query_groups = c->group_query_attention ? c->num_query_groups : 0;
    m->untie_embeddings = c->untie_embeddings_and_output_weights;
    m->disable_bias_linear = c->disable_bias_linear;
    m->add_qkv_bias = c->add_qkv_bias;
    m->qk_layernorm = c->qk_layernorm;
    m->squared_relu = c->squared_relu;
    m->gelu_exact = c->no_bias_gelu_fusion && !c->swiglu && !c->squared_relu; /* (only a GELU MLP has it) */
    m->qk_layernorm_wd = c->apply_wd_to_qk_layernorm;
    m->qk_l2_norm = c->qk_l2_norm;
    m->window = c->window;
    m->window_skip_freq = c->window_skip;
    return MG_OK;
}

bool mg_run_config_given(const mg_run_config *c, const char *flag) {
    for (size_t k = 0; k < N_FLAGS && k < sizeof c->given; k++)
        if (!strcmp(flags[k].name, flag)) return c->given[k];
    return false;
}

int mg_run_config_set(mg_run_config *c, const char *name, const char *value, mg_run_notes *notes) {
    for (size_t k = 0; k < N_FLAGS && k < sizeof c->given; k++) {
        const flag *f = &flags[k];
        if (strcmp(f->name, name)) continue;
        if (f->off == NOFF || f->type == F_LIST || f->type == F_INT3) return -1;
        void *dst = (char *)c + f->off;
        if (f->type == F_BOOL) *(bool *)dst = value && strcmp(value, "0") && strcmp(value, "false");
        else if (!parse_value(f, value, dst, notes)) return -1;
        c->given[k] = true;
        return 0;
    }
    return -1;
}

int mg_run_config_set_int(mg_run_config *c, const char *flag, int value) {
    for (size_t k = 0; k < N_FLAGS && k < sizeof c->given; k++) {
        if (strcmp(flags[k].name, flag)) continue;
        if (flags[k].type != F_INT || flags[k].off == NOFF) return -1;
        *(int *)((char *)c + flags[k].off) = value;
        c->given[k] = true;
        return 0;
    }
    return -1;
}

void mg_run_config_usage(FILE *out) {
    fprintf(out, "usage: mgraph-run [flags]\n\n"
                 "Trains a GPT model with mgraph. Flag names and defaults follow Megatron-LM's pretrain_gpt.py.\n"
                 "With no flags: a small byte-level GPT on Debian's fortunes corpus (%s), as if given\n ",
            *MG_DEFAULT_CORPUS ? MG_DEFAULT_CORPUS : "not found at configure time");
    int col = 1;
    for (const char *const *a = demo_args; *a; a++) {
        if (col + (int)strlen(*a) > 100) {
            fprintf(out, "\n ");
            col = 1;
        }
        col += fprintf(out, " %s", *a);
    }
    fprintf(out, "\n\n");
    for (int pass = 0; pass < 3; pass++) {
        if (pass == 1) fprintf(out, "\nAccepted for Megatron's recipes, no effect in mgraph:\n");
        if (pass == 2) fprintf(out, "\nAccepted, then refused (exit 2) until mgraph can honour them:\n");
        for (size_t k = 0; k < N_FLAGS; k++) {
            if ((int)flags[k].kind != pass) continue;
            const char *arg = flags[k].type == F_BOOL ? "" : flags[k].type == F_STR ? " S" : flags[k].type == F_LIST ? " S..."
                                                         : flags[k].type == F_INT3 ? " N N N" : " N";
            fprintf(out, "  %s%-*s %s\n", flags[k].name, (int)(40 - strlen(flags[k].name)), arg, flags[k].help);
        }
    }
    fprintf(out, "\nExit status: 0 success, 2 bad usage or input, 1 failure while running.\n");
}

/* ---- the arguments as Megatron's write_args_to_tensorboard writes them ---------------------- */
/* Python's str() of the float v holds: the shortest digits that give v back, positional
 * for exponents -4..15, else d.ddde-05 (two exponent digits at least). */
static void py_float(char *out, size_t cap, float v) {
    char d[32];
    int p = 1;
    for (; p < 9; p++) {
        snprintf(d, sizeof d, "%.*e", p - 1, (double)v);
        if (strtof(d, NULL) == v) break;
    }
    snprintf(d, sizeof d, "%.*e", p - 1, (double)v);
    bool neg = d[0] == '-';
    char digits[16];
    int nd = 0;
    const char *q = d + neg;
    for (; *q && *q != 'e'; q++)
        if (*q >= '0' && *q <= '9') digits[nd++] = *q;
    int e = atoi(q + 1);
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    digits[nd] = '\0';
    size_t o = 0;
    if (neg) o += (size_t)snprintf(out + o, cap - o, "-");
    if (e >= -4 && e < 16) {
        if (e >= 0) {
            for (int i = 0; i <= e; i++) o += (size_t)snprintf(out + o, cap - o, "%c", i < nd ? digits[i] : '0');
            o += (size_t)snprintf(out + o, cap - o, ".%s", nd > e + 1 ? digits + e + 1 : "0");
        } else {
            o += (size_t)snprintf(out + o, cap - o, "0.");
            for (int i = 0; i < -e - 1; i++) o += (size_t)snprintf(out + o, cap - o, "0");
            o += (size_t)snprintf(out + o, cap - o, "%s", digits);
        }
    } else {
        o += (size_t)snprintf(out + o, cap - o, "%c", digits[0]);
        if (nd > 1) o += (size_t)snprintf(out + o, cap - o, ".%s", digits + 1);
        snprintf(out + o, cap - o, "e%c%02d", e < 0 ? '-' : '+', e < 0 ? -e : e);
    }
}

int mg_run_config_each_arg(const mg_run_config *c, int (*fn)(void *ctx, const char *name, const char *value),
                           void *ctx) {
    char name[96], value[4096];
    for (size_t k = 0; k < N_FLAGS; k++) {
        const flag *f = &flags[k];
        if (f->kind != USE || f->off == NOFF || !strcmp(f->name, "--help")) continue;
        bool dup = false; /* an alias of an earlier flag (the same field): Megatron has one dest */
        for (size_t j = 0; j < k && !dup; j++) dup = flags[j].off == f->off && flags[j].kind == USE;
        if (dup) continue;
        snprintf(name, sizeof name, "%s", f->name + 2);
        for (char *q = name; *q; q++)
            if (*q == '-') *q = '_';
        const void *at = (const char *)c + f->off;
        switch (f->type) {
        case F_INT: snprintf(value, sizeof value, "%d", *(const int *)at); break;
        case F_I64: snprintf(value, sizeof value, "%lld", (long long)*(const int64_t *)at); break;
        case F_FLOAT: py_float(value, sizeof value, *(const float *)at); break;
        case F_BOOL: snprintf(value, sizeof value, "%s", *(const bool *)at ? "True" : "False"); break;
        case F_STR: {
            const char *v = *(const char *const *)at;
            snprintf(value, sizeof value, "%s", v ? v : "None");
            break;
        }
        case F_LIST: { /* the joined values as Python's list of strings */
            const char *v = *(const char *const *)at;
            if (!v) {
                snprintf(value, sizeof value, "None");
                break;
            }
            size_t o = (size_t)snprintf(value, sizeof value, "[");
            for (const char *w = v; *w && o < sizeof value;) {
                size_t n = strcspn(w, " ");
                if (n) o += (size_t)snprintf(value + o, sizeof value - o, "%s'%.*s'", o > 1 ? ", " : "", (int)n, w);
                w += n + (w[n] == ' ');
            }
            if (o < sizeof value) snprintf(value + o, sizeof value - o, "]");
            break;
        }
        case F_INT3: {
            const int64_t *v = at;
            if (!mg_run_config_given(c, f->name)) snprintf(value, sizeof value, "None");
            else snprintf(value, sizeof value, "[%lld, %lld, %lld]", (long long)v[0], (long long)v[1], (long long)v[2]);
            break;
        }
        }
        int rc = fn(ctx, name, value);
        if (rc) return rc;
    }
    return 0;
}

/* ---- the reference: docs/mgraph-run.md and mgraph-run.1 from the same table ---------------- */
static const char *arg_word(const flag *f) {
    return f->type == F_BOOL ? "" : f->type == F_STR ? "S" : f->type == F_LIST ? "S..." : f->type == F_INT3 ? "N N N" : "N";
}

/* Markdown: '|' in a cell would end it; roff: a leading '.' or '\'' would be a request and
 * '\\' an escape, and '-' is a hyphen unless escaped (man pages keep flags copyable). */
static void md_text(FILE *out, const char *s) {
    for (; *s; s++) {
        if (*s == '|') fputc('\\', out);
        fputc(*s, out);
    }
}
static void roff_text(FILE *out, const char *s) {
    if (*s == '.' || *s == '\'') fputs("\\&", out);
    for (; *s; s++) {
        if (*s == '\\') fputs("\\e", out);
        else if (*s == '-') fputs("\\-", out);
        else fputc(*s, out);
    }
}

static const char *const kind_title[3] = {
    "Flags", "Accepted for Megatron's recipes, no effect in mgraph (a warning says why)",
    "Accepted, then refused (exit 2) until mgraph can honour them"};

void mg_run_config_reference(FILE *out, bool man) {
    if (man) {
        fputs(".TH MGRAPH-RUN 1 \"\" \"mgraph\" \"User Commands\"\n"
              ".SH NAME\nmgraph-run \\- train a transformer language model under a partition plan\n"
              ".SH SYNOPSIS\n.B mgraph-run\n[\\fIflags\\fR]\n\n"
              ".B mpirun \\-np\n\\fIN\\fR\n.B mgraph-run\n[\\fIflags\\fR]\n"
              ".SH DESCRIPTION\nTrains a GPT-family model with mgraph. Flag names and defaults follow Megatron-LM's\n"
              ".IR pretrain_gpt.py .\nWith no flags: a small byte-level GPT on Debian's fortunes corpus.\n"
              "This page is generated from mgraph-run's flag table (tools/run_config.c), as are\n"
              ".B \\-\\-help\nand docs/mgraph-run.md.\n",
              out);
    } else {
        fputs("# mgraph-run flag reference\n\n"
              "Generated from mgraph-run's flag table (`tools/run_config.c`) by `mgraph-flag-docs markdown`, as\n"
              "are `mgraph-run --help` and the man page `mgraph-run.1`; the test `docs.flag_reference` fails when\n"
              "this file and the table disagree. Flag names and defaults follow Megatron-LM's `pretrain_gpt.py`;\n"
              "the README and the other pages in `docs/` say how each feature behaves and how it is tested.\n\n"
              "With no flags, `mgraph-run` trains a small byte-level GPT on Debian's fortunes corpus, as if given\n\n```\nmgraph-run",
              out);
        for (const char *const *a = demo_args; *a; a++) fprintf(out, " %s", *a);
        fputs("\n```\n", out);
    }
    for (int pass = 0; pass < 3; pass++) {
        if (man)
            fprintf(out, ".SH %s\n", pass == 0 ? "OPTIONS" : pass == 1 ? "ACCEPTED WITHOUT EFFECT" : "REFUSED");
        else
            fprintf(out, "\n## %s\n\n| flag | argument | %s |\n|---|---|---|\n", kind_title[pass],
                    pass == 0 ? "meaning" : "why");
        if (man && pass) fprintf(out, "%s.\n", kind_title[pass]);
        for (size_t k = 0; k < N_FLAGS; k++) {
            const flag *f = &flags[k];
            if ((int)f->kind != pass) continue;
            const char *a = arg_word(f);
            if (man) {
                /* the tag on one line: .TP takes only the next line as the tag */
                fputs(".TP\n.BI \"", out);
                roff_text(out, f->name);
                fprintf(out, "%s\" \"%s\"\n", *a ? " " : "", a);
                roff_text(out, f->help);
                if (f->choices) {
                    fputs(" (one of: ", out);
                    roff_text(out, f->choices);
                    fputc(')', out);
                }
                fputc('\n', out);
            } else {
                fprintf(out, "| `%s` | %s | ", f->name, *a ? a : "");
                md_text(out, f->help);
                if (f->choices) {
                    fputs(" (one of: `", out);
                    md_text(out, f->choices);
                    fputs("`)", out);
                }
                fputs(" |\n", out);
            }
        }
    }
    if (man)
        fputs(".SH EXIT STATUS\n0 success, 2 bad usage or input, 1 failure while running.\n"
              ".SH SEE ALSO\n.BR mgraph-convert (1),\n.BR mgraph-preprocess (1),\n.BR mgraph-plan (1)\n",
              out);
    else
        fputs("\nExit status: 0 success, 2 bad usage or input, 1 failure while running.\n", out);
}

int mg_run_config_uneven_pipeline(const mg_run_config *c, mg_plan *p, mg_error *err) {
    const char *fl[] = {"--decoder-first-pipeline-num-layers", "--decoder-last-pipeline-num-layers"};
    int fv[] = {c->decoder_first_pipeline_num_layers, c->decoder_last_pipeline_num_layers};
    int *fd[] = {&p->pp_first_layers, &p->pp_last_layers};
    for (int i = 0; i < 2; i++) {
        if (!mg_run_config_given(c, fl[i])) continue;
        if (fv[i] < 1 || fv[i] > c->num_layers)
            return mg_error_set(err, MG_ERR_INVALID, "%s must be in 1..--num-layers (got %d)", fl[i], fv[i]);
        *fd[i] = fv[i];
    }
    return MG_OK;
}

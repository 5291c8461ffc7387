/* mgraph-run's configuration: Megatron's pretrain_gpt.py flag names and defaults. */
#ifndef MG_TOOLS_RUN_CONFIG_H
#define MG_TOOLS_RUN_CONFIG_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "mgraph/error.h"
#include "mgraph/model.h"
#include "mgraph/tokenizer.h"
#include "mgraph/plan.h"

typedef struct mg_run_config {
    /* model */
    int num_layers, hidden_size, ffn_hidden_size, num_attention_heads, seq_length, max_position_embeddings;
    int make_vocab_size_divisible_by;
    float init_method_std, hidden_dropout, attention_dropout;
    const char *position_embedding_type, *normalization;
    /* mixture of experts (Megatron's --num-experts and --moe-* flags) */
    int num_experts, moe_ffn_hidden_size, moe_router_topk, moe_layer_freq;
    bool moe_router_pre_softmax, moe_pad_expert_input_to_capacity;
    float moe_aux_loss_coeff, moe_z_loss_coeff, moe_expert_capacity_factor;
    const char *moe_token_drop_policy, *moe_token_dispatcher_type;
    /* DeepSeek-V3's MoE: --moe-layer-freq as given (an integer or a list pattern, parsed into
     * moe_layer_freq / moe_pattern by mg_run_config_check), router and balancing */
    const char *moe_layer_freq_arg, *moe_router_score_function, *moe_router_dtype;
    int moe_pattern_len;
    uint64_t moe_pattern[MG_MOE_MAX_LAYERS / 64];
    int moe_router_num_groups, moe_router_group_topk, moe_shared_expert_intermediate_size;
    float moe_router_topk_scaling_factor, moe_router_bias_update_rate;
    bool moe_router_enable_expert_bias;
    /* multi-token prediction */
    int mtp_num_layers;
    float mtp_loss_scaling_factor;
    /* the LLaMA family (Megatron's names) */
    float rotary_base, rotary_percent, norm_epsilon;
    bool swiglu, group_query_attention, untie_embeddings_and_output_weights, disable_bias_linear;
    bool add_qkv_bias, qk_layernorm, apply_wd_to_qk_layernorm, squared_relu, qk_l2_norm;
    bool no_bias_gelu_fusion; /* the exact GELU (Megatron's unfused MLP) */
    /* Megatron's --window-size "L,R" and --window-attn-skip-freq N as given (NULL: not),
     * and what mg_run_config_check makes of them: window = L + 1 keys (0: none), and
     * window_skip = N (0: every layer windowed) */
    const char *window_size, *window_attn_skip_freq;
    int window, window_skip;
    int num_query_groups;
    int kv_channels;            /* each head's q/k/v size; 0: hidden / heads */
    /* RoPE's frequencies: Llama 3.1's (--use-rope-scaling), YaRN's (--position-embedding-type yarn,
     * multi-latent attention's default --rope-type), interleaved pairs */
    bool use_rope_scaling, rotary_interleaved, no_yarn_round;
    float rope_scaling_factor, rotary_scaling_factor, mscale, mscale_all_dim, yarn_beta_fast, yarn_beta_slow;
    int yarn_original_max_position_embeddings;
    const char *rope_type;      /* rope | yarn (NULL: MLA's yarn, else rope) */
    /* multi-latent attention */
    bool multi_latent_attention;
    int q_lora_rank, kv_lora_rank, qk_head_dim, qk_pos_emb_head_dim, v_head_dim;
    bool no_position_embedding; /* Megatron's: no learned position table (with rope: nothing changes) */
    const char *moe_router_load_balancing_type, *optimizer;
    /* batch and schedule (-1: not given) */
    int micro_batch_size, global_batch_size;   /* global 0: micro-batch x data-parallel size */
    int64_t train_iters, train_samples;
    int64_t rampup_batch_size[3];              /* start, increment, ramp-up samples; start 0: no ramp */
    float lr, min_lr, lr_warmup_init, lr_warmup_fraction;
    float decoupled_lr, decoupled_min_lr; /* (given or not: mg_run_config_given) */
    float start_weight_decay, end_weight_decay; /* with weight_decay_incr_style linear / cosine */
    const char *weight_decay_incr_style;        /* constant (default) | linear | cosine */
    const char *lr_decay_style, *lr_wsd_decay_style;
    int64_t lr_warmup_iters, lr_decay_iters, lr_warmup_samples, lr_decay_samples;
    int64_t lr_wsd_decay_iters, lr_wsd_decay_samples;
    float weight_decay, adam_beta1, adam_beta2, adam_eps, clip_grad;
    int64_t seed;
    int64_t exit_interval;        /* > 0: stop after the iteration that is a multiple of it */
    float exit_duration_in_mins;  /* > 0: stop after the iteration that ends past it */
    int64_t distributed_timeout_minutes; /* a blocking wait longer than this ends the job (scheduler/watchdog.c) */
    /* logging and evaluation */
    int64_t log_interval, eval_interval, eval_iters;
    bool log_throughput, log_params_norm;
    const char *tensorboard_dir;
    int64_t tensorboard_log_interval;
    bool log_timers_to_tensorboard, log_validation_ppl_to_tensorboard, log_world_size_to_tensorboard;
    bool log_memory_to_tensorboard, log_num_zeros_in_grad;
    int64_t sample_interval;      /* > 0: a greedy sample from the current weights every N iterations (llm.c) */
    const char *sample_prompt;    /* its prompt (NULL: the end-of-document token alone, as llm.c) */
    const char *metrics_file, *dump_dot;
    const char *trace_file, *trace_iterations; /* tools/run_trace.c */
    const char *dump_dot_summary, *dot_summary_scope, *dot_summary_phase; /* --dump-dot-summary and its filters */
    int dot_summary_depth;
    bool dry_run;
    const char *model_lib; /* --model-lib: a user's model (tools/run_model_lib.c); NULL: GPT */
    /* Megatron's mixed precision (mg_run_config_precision, mgraph/precision.h) */
    bool bf16, fp16, grad_reduce_in_bf16, accumulate_allreduce_grads_in_fp32, use_precision_aware_optimizer;
    /* --fp16's loss scaler (mg_run_config_loss_scaler): --loss-scale (0: dynamic), the dynamic one's settings */
    float loss_scale, initial_loss_scale, min_loss_scale;
    int loss_scale_window, hysteresis;
    /* fp8 (mg_run_config_fp8, mgraph/fp8.h): --fp8-format (NULL: none), --fp8-recipe,
     * --fp8-amax-compute-algo, --fp8-amax-history-len, --fp8-margin */
    const char *fp8_format, *fp8_recipe, *fp8_amax_compute_algo;
    int fp8_amax_history_len, fp8_margin;
    const char *main_grads_dtype, *main_params_dtype, *exp_avg_dtype, *exp_avg_sq_dtype;
    /* data */
    const char *text_file, *data_path, *split, *data_cache_path;
    bool mock_data; /* --mock-data: Megatron's MockGPTDataset (mg_mock_dataset_open) */
    const char *split_data_path[3]; /* --train-data-path, --valid-data-path, --test-data-path */
    /* --data-args-path FILE (the --data-path values, white-space separated) and
     * --per-split-data-args-path FILE.json ({"train", "valid", "test"}): read by
     * mg_run_config_check into data_path / split_data_path */
    const char *data_args_path, *per_split_data_args_path;
    const char *tokenizer_type, *vocab_file, *merge_file, *tokenizer_model;
    /* the other tokenizer flags (mg_run_tokenizer_config) */
    int64_t vocab_size;                    /* --vocab-size: NullTokenizer's, TikTokenizer's */
    const char *tiktoken_pattern;          /* --tiktoken-pattern v1 | v2 */
    int tiktoken_num_special_tokens;       /* --tiktoken-num-special-tokens (Megatron: 1000) */
    const char *special_tokens;            /* --tokenizer-special-tokens, joined by spaces */
    const char *special_tokens_v[129];     /* ... split, NULL-terminated (mg_run_config_check), */
    char special_tokens_buf[4096];         /* in a copy of their own */
    int64_t null_tokenizer_eod_id;         /* --null-tokenizer-eod-id */
    bool tokenizer_hf_no_include_special_tokens;
    bool eod_mask_loss; /* leave out of the loss the positions whose input is the end-of-document token */
    bool calculate_per_token_loss; /* train on the mean over the global batch's kept tokens */
    bool reset_position_ids;   /* positions restart at 0 after each end-of-document token */
    bool reset_attention_mask; /* attention within documents (mg_attention_masked) */
    /* parallelism */
    int tensor_model_parallel_size, pipeline_model_parallel_size, context_parallel_size, expert_model_parallel_size;
    int expert_tensor_parallel_size;
    int num_layers_per_virtual_pipeline_stage, num_virtual_stages_per_pipeline_rank;
    int decoder_first_pipeline_num_layers, decoder_last_pipeline_num_layers;
    const char *pipeline_schedule;
    bool sequence_parallel, use_distributed_optimizer;
    bool use_tp_pp_dp_mapping;
    const char *pipeline_model_parallel_layout;     /* NULL: not given */
    bool account_for_embedding_in_pipeline_split, account_for_loss_in_pipeline_split;
    bool use_megatron_fsdp, use_torch_fsdp2;        /* FSDP (partitioners/fsdp.c) */
    const char *data_parallel_sharding_strategy;   /* with --use-megatron-fsdp; NULL: optim_grads_params */           /* the rank order tp-pp-dp instead of tp-cp-ep-dp-pp (graph/mesh.c) */
    int world_size;          /* --world-size: partition for N ranks without launching them (with --dry-run) */
    const char *plan_file;   /* "auto": the planner chooses (tools/run_plan.c) */
    const char *cluster;     /* with --plan auto */
    /* execution */
    const char *recompute_granularity, *recompute_method; /* NULL: not given */
    bool recompute_activations;          /* Megatron's shorthand: --recompute-granularity selective */
    bool use_rotary_position_embeddings; /* Megatron's legacy: --position-embedding-type rope */
    int recompute_num_layers;
    const char *engine;      /* "starpu" (default) or "reference" */
    const char *sched_policy;
    int cpu_workers;
    bool overlap_grad_reduce;
    /* Megatron's --check-for-nan-in-loss-and-grad, on unless --no-check-for-nan-in-loss-and-grad */
    bool check_for_nan_in_loss_and_grad, no_check_for_nan_in_loss_and_grad;
    int matmul_tiles;        /* 0: not given (plan file, else 1) */
    int micro_batch_split;   /* given: the plan's micro-batch-split (0: auto) */
    /* checkpoints (tools/run_checkpoint.c) */
    const char *save, *load;
    int64_t save_interval;
    int save_retain;         /* keep the newest N iteration directories (0: all) */
    bool async_save;         /* --async-save */
    int64_t non_persistent_save_interval;      /* --non-persistent-save-interval (0: none) */
    const char *non_persistent_ckpt_type;      /* --non-persistent-ckpt-type (local only) */
    const char *non_persistent_local_ckpt_dir; /* --non-persistent-local-ckpt-dir */
    bool no_load_optim, no_load_rng, finetune, skip_train;
    bool no_save_optim, no_save_rng; /* --save without the Adam moments / without the RNG seed */
    /* --load of the learning-rate schedule: this run's, unchecked / the checkpoint's */
    bool override_opt_param_scheduler, use_checkpoint_opt_param_scheduler;
    bool use_checkpoint_args; /* --use-checkpoint-args: mg_run_use_checkpoint_args */
    bool exit_on_missing_checkpoint; /* --load finding no checkpoint is an error, not a fresh start */
    bool exit_signal_handler;        /* --exit-signal: save (with --save) and end after the iteration */
    const char *exit_signal;         /* SIGTERM (default) | SIGINT | SIGHUP | SIGUSR1 | SIGUSR2 */
    bool help;
    bool demo;               /* no flag was given: the demo run's own values were applied */
    bool given[320];         /* flags that were on the command line, by table position */
    /* the values of --data-path and the three per-split paths (Megatron's nargs='*'),
     * joined by spaces */
    char list_buf[5][4096];
} mg_run_config;

/* What a command line got wrong (every bad flag, not only the first) and what it
 * asked for that has no effect in mgraph. One line per entry. */
typedef struct mg_run_notes {
    int n_errors, n_warnings;
    char errors[8192], warnings[4096];
} mg_run_notes;

void mg_run_notes_error(mg_run_notes *n, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void mg_run_notes_warn(mg_run_notes *n, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Prints every error and warning line, prefixed "mgraph-run: error: " / "warning: ". */
void mg_run_notes_print(const mg_run_notes *n, FILE *f);

/* Megatron's defaults; where Megatron has none (the flag is required there), the
 * small model mgraph trains by default. */
void mg_run_config_defaults(mg_run_config *c);
/* Parses argv over the defaults. With no flag at all (argc == 1), the demo run's own
 * values are parsed instead (see mg_run_config_demo_args). Every unknown flag,
 * malformed value, value outside a flag's choices and flag mgraph accepts but cannot
 * honour is recorded in notes; flags Megatron has that change nothing here are
 * recorded as warnings. */
void mg_run_config_parse(mg_run_config *c, int argc, char **argv, mg_run_notes *notes);
/* Checks values and combinations (Megatron's own assertions among them) and fills
 * the values derived from others; every problem goes to notes. */
void mg_run_config_check(mg_run_config *c, mg_run_notes *notes);
/* The demo run's flags (a NULL-terminated list), written out so that --help shows them. */
const char *const *mg_run_config_demo_args(void);
void mg_run_config_usage(FILE *f);
/* Each argument mgraph-run uses, under Megatron's name (num_layers) with its value as
 * Python's str() writes it ("4", "0.0001", "True", "None", "['a', 'b']"): what Megatron's
 * write_args_to_tensorboard writes as text summaries. Stops at fn's first non-zero. */
int mg_run_config_each_arg(const mg_run_config *c, int (*fn)(void *ctx, const char *name, const char *value),
                           void *ctx);
/* The whole flag table as docs/mgraph-run.md (Markdown) or the man page mgraph-run.1. */
void mg_run_config_reference(FILE *f, bool man);
/* Whether the flag ("--ffn-hidden-size") was given: a value given explicitly is
 * checked, a default may be derived. */
bool mg_run_config_given(const mg_run_config *c, const char *flag);
/* Sets an integer flag's value as if it had been given (--plan auto's choices); -1 for a
 * flag that is not an integer one. */
int mg_run_config_set_int(mg_run_config *c, const char *flag, int value);
/* Sets a flag from its text as the command line would give it (a bool from "1"/"0"),
 * marked given; -1 for an unknown flag or a list, or (noted) a malformed value. The
 * text must outlive c. */
int mg_run_config_set(mg_run_config *c, const char *flag, const char *value, mg_run_notes *notes);
/* Megatron's --use-checkpoint-args (training/checkpointing.py load_args_from_checkpoint),
 * between parsing and checking: the model flags the checkpoint under --load recorded
 * replace the command line's, the sizes Megatron sets only when not given
 * (--num-layers, --hidden-size, --ffn-hidden-size, --seq-length, --num-attention-heads,
 * --kv-channels, --max-position-embeddings) only when not given; what it set is written
 * to said (one line per flag). Without --load, or with a checkpoint that cannot be read,
 * an error is noted (exit 2); a --load directory without a checkpoint leaves the command
 * line (Megatron's "Checkpoint not found to provide arguments"). */
void mg_run_use_checkpoint_args(mg_run_config *c, mg_run_notes *n, char *said, size_t cap);

/* The model's configuration from the model flags (mgraph-run, mgraph-plan): sizes, the
 * LLaMA options, MoE; the vocabulary is left for the caller (it comes from the tokenizer). */
int mg_run_config_model(const mg_run_config *c, mg_gpt_config *m, mg_error *err);
/* The step's precision from the checked flags (--bf16, --grad-reduce-in-bf16, the
 * precision-aware optimizer's dtypes). */
mg_precision_options mg_run_config_precision(const mg_run_config *c);
/* --fp16's loss scaler: --loss-scale's constant one, else the dynamic one. */
mg_loss_scaler mg_run_config_loss_scaler(const mg_run_config *c);
/* fp8's recipe from the checked flags (format MG_FP8_OFF without --fp8-format). */
mg_fp8_options mg_run_config_fp8(const mg_run_config *c);

/* The tokenizer the flags describe (strings borrowed from c). */
mg_tokenizer_config mg_run_tokenizer_config(const mg_run_config *c);

/* Megatron's uneven pipeline (mgraph-run, mgraph-plan): the given
 * --decoder-first/last-pipeline-num-layers, each checked in 1..--num-layers, into
 * p->pp_first_layers / pp_last_layers. */
int mg_run_config_uneven_pipeline(const mg_run_config *c, mg_plan *p, mg_error *err);
/* Megatron's list patterns (--moe-layer-freq '([0]*3+[1]*58)'): the values into v[0..max);
 * the length, or -1 with *why. */
int mg_run_parse_layer_pattern(const char *s, unsigned char *v, int max, const char **why);

#endif

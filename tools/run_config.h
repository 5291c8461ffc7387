/* mgraph-run's configuration: Megatron's pretrain_gpt.py flag names where they exist. */
#ifndef MG_TOOLS_RUN_CONFIG_H
#define MG_TOOLS_RUN_CONFIG_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "mgraph/error.h"

typedef struct mg_run_config {
    /* model */
    int num_layers, hidden_size, ffn_hidden_size, num_attention_heads, seq_length, max_position_embeddings;
    int make_vocab_size_divisible_by;
    float init_method_std, hidden_dropout, attention_dropout;
    /* batch and schedule */
    int micro_batch_size, global_batch_size;
    int64_t train_iters;
    float lr, min_lr;
    const char *lr_decay_style;
    int64_t lr_warmup_iters, lr_decay_iters;
    float weight_decay, adam_beta1, adam_beta2, adam_eps, clip_grad;
    int64_t seed;
    /* logging and evaluation */
    int64_t log_interval, eval_interval, eval_iters;
    const char *metrics_file, *dump_dot;
    bool dry_run;
    /* data */
    const char *text_file, *data_path, *split, *data_cache_path;
    const char *tokenizer_type, *vocab_file, *merge_file, *tokenizer_model;
    /* parallelism */
    int tensor_model_parallel_size, pipeline_model_parallel_size, context_parallel_size, expert_model_parallel_size;
    bool sequence_parallel, use_distributed_optimizer;
    int world_size;          /* --world-size: partition for N ranks without launching them (with --dry-run) */
    const char *plan_file;
    /* execution */
    const char *engine;      /* "starpu" (default) or "reference" */
    const char *sched_policy;
    int cpu_workers;
    bool overlap_grad_reduce;
    /* Megatron's --check-for-nan-in-loss-and-grad, on unless --no-check-for-nan-in-loss-and-grad */
    bool check_for_nan_in_loss_and_grad, no_check_for_nan_in_loss_and_grad;
    int matmul_tiles;        /* 0: not given (plan file, else 1) */
    /* checkpoints (tools/run_checkpoint.c) */
    const char *save, *load;
    int64_t save_interval;
    int save_retain;         /* keep the newest N iteration directories (0: all) */
    bool no_load_optim, no_load_rng, finetune, skip_train;
    bool help;
} mg_run_config;

void mg_run_config_defaults(mg_run_config *c);
/* Parses argv (flags override the defaults). MG_ERR_INVALID with a message naming
 * the flag for unknown flags, missing or malformed values. */
int mg_run_config_parse(mg_run_config *c, int argc, char **argv, mg_error *err);
void mg_run_config_usage(FILE *f);

#endif

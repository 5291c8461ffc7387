/* Flag table and parser for mgraph-run. One table drives parsing and --help. */
#include "run_config.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

/* The compiled-in default corpus (Debian's fortunes, gathered at configure time). */
#ifndef MG_DEFAULT_CORPUS
#define MG_DEFAULT_CORPUS ""
#endif

typedef enum { F_INT, F_I64, F_FLOAT, F_STR, F_BOOL } ftype;

typedef struct flag {
    const char *name;
    ftype type;
    size_t off;
    const char *help;
} flag;

#define O(f) offsetof(mg_run_config, f)
static const flag flags[] = {
    {"--num-layers", F_INT, O(num_layers), "transformer layers"},
    {"--hidden-size", F_INT, O(hidden_size), "hidden size h"},
    {"--ffn-hidden-size", F_INT, O(ffn_hidden_size), "MLP hidden size (default 4h)"},
    {"--num-attention-heads", F_INT, O(num_attention_heads), "attention heads (must divide h)"},
    {"--seq-length", F_INT, O(seq_length), "tokens per sample"},
    {"--max-position-embeddings", F_INT, O(max_position_embeddings), "position table size (default seq-length)"},
    {"--make-vocab-size-divisible-by", F_INT, O(make_vocab_size_divisible_by), "vocab padding unit (x tp)"},
    {"--init-method-std", F_FLOAT, O(init_method_std), "std of the normal weight init"},
    {"--hidden-dropout", F_FLOAT, O(hidden_dropout), "dropout after embeddings, attention and MLP"},
    {"--attention-dropout", F_FLOAT, O(attention_dropout), "dropout on attention probabilities"},
    {"--micro-batch-size", F_INT, O(micro_batch_size), "sequences per micro-batch"},
    {"--global-batch-size", F_INT, O(global_batch_size), "sequences per iteration (gradient accumulation)"},
    {"--train-iters", F_I64, O(train_iters), "iterations to train"},
    {"--lr", F_FLOAT, O(lr), "peak learning rate"},
    {"--min-lr", F_FLOAT, O(min_lr), "learning rate at the end of decay"},
    {"--lr-decay-style", F_STR, O(lr_decay_style), "constant | linear | cosine"},
    {"--lr-warmup-iters", F_I64, O(lr_warmup_iters), "linear warmup iterations"},
    {"--lr-decay-iters", F_I64, O(lr_decay_iters), "decay iterations (default train-iters)"},
    {"--weight-decay", F_FLOAT, O(weight_decay), "decoupled weight decay (not on norms and biases)"},
    {"--adam-beta1", F_FLOAT, O(adam_beta1), "Adam beta1"},
    {"--adam-beta2", F_FLOAT, O(adam_beta2), "Adam beta2"},
    {"--adam-eps", F_FLOAT, O(adam_eps), "Adam epsilon"},
    {"--clip-grad", F_FLOAT, O(clip_grad), "global gradient-norm clip (0: off)"},
    {"--seed", F_I64, O(seed), "seed of weights, dropout and data order"},
    {"--log-interval", F_I64, O(log_interval), "iterations between log lines"},
    {"--eval-interval", F_I64, O(eval_interval), "iterations between evaluations (0: none)"},
    {"--eval-iters", F_I64, O(eval_iters), "validation batches per evaluation"},
    {"--text-file", F_STR, O(text_file), "raw text to train on (byte-level by default)"},
    {"--data-path", F_STR, O(data_path), "Megatron indexed dataset prefix, or blend 'w1 p1 w2 p2'"},
    {"--split", F_STR, O(split), "train,valid,test proportions (e.g. 949,50,1)"},
    {"--data-cache-path", F_STR, O(data_cache_path), "where dataset indices are cached"},
    {"--tokenizer-type", F_STR, O(tokenizer_type), "ByteLevelTokenizer | GPT2BPETokenizer | SentencePieceTokenizer"},
    {"--vocab-file", F_STR, O(vocab_file), "GPT-2 vocab.json"},
    {"--merge-file", F_STR, O(merge_file), "GPT-2 merges.txt"},
    {"--tokenizer-model", F_STR, O(tokenizer_model), "SentencePiece tokenizer.model"},
    {"--tensor-model-parallel-size", F_INT, O(tensor_model_parallel_size), "tp"},
    {"--pipeline-model-parallel-size", F_INT, O(pipeline_model_parallel_size), "pp"},
    {"--context-parallel-size", F_INT, O(context_parallel_size), "cp"},
    {"--expert-model-parallel-size", F_INT, O(expert_model_parallel_size), "ep"},
    {"--sequence-parallel", F_BOOL, O(sequence_parallel), "split norms and dropout along the sequence (with tp)"},
    {"--use-distributed-optimizer", F_BOOL, O(use_distributed_optimizer), "shard optimizer state over dp"},
    {"--world-size", F_INT, O(world_size), "with --dry-run: partition for N ranks without launching them"},
    {"--plan", F_STR, O(plan_file), "partition plan file (flags override it)"},
    {"--metrics-file", F_STR, O(metrics_file), "JSON Lines metrics, one object per iteration/evaluation"},
    {"--dump-dot", F_STR, O(dump_dot), "write the executed graph as DOT (%r: rank)"},
    {"--dry-run", F_BOOL, O(dry_run), "build (and dump) the graph, do not train"},
    {"--engine", F_STR, O(engine), "starpu (default) | reference (serial, for debugging)"},
    {"--sched-policy", F_STR, O(sched_policy), "StarPU scheduling policy (default: STARPU_SCHED or measured best)"},
    {"--cpu-workers", F_INT, O(cpu_workers), "StarPU CPU workers (0: all cores)"},
    {"--matmul-tiles", F_INT, O(matmul_tiles), "split large matmuls into N tasks for the workers (default 1)"},
    {"--overlap-grad-reduce", F_BOOL, O(overlap_grad_reduce), "run collectives on a communication thread beside compute"},
    {"--check-for-nan-in-loss-and-grad", F_BOOL, O(check_for_nan_in_loss_and_grad),
     "stop with an error at a NaN/Inf loss or gradient norm (default)"},
    {"--no-check-for-nan-in-loss-and-grad", F_BOOL, O(no_check_for_nan_in_loss_and_grad),
     "train on through NaN/Inf, counting them in the log line"},
    {"--save", F_STR, O(save), "checkpoint directory to save to"},
    {"--save-interval", F_I64, O(save_interval), "iterations between checkpoints (and one at the end)"},
    {"--save-retain", F_INT, O(save_retain), "keep the newest N checkpoints in --save (0: all)"},
    {"--load", F_STR, O(load), "checkpoint directory (or iter_N directory) to resume from"},
    {"--no-load-optim", F_BOOL, O(no_load_optim), "with --load: do not load the Adam moments"},
    {"--no-load-rng", F_BOOL, O(no_load_rng), "with --load: use --seed, not the checkpoint's RNG seed"},
    {"--finetune", F_BOOL, O(finetune), "with --load: load the model only, start at iteration 0"},
    {"--skip-train", F_BOOL, O(skip_train), "evaluate on the validation split, train nothing"},
    {"--help", F_BOOL, O(help), "this text"},
};
#undef O

void mg_run_config_defaults(mg_run_config *c) {
    memset(c, 0, sizeof *c);
    /* The default run: a ~3.2M-parameter byte-level GPT on Debian's fortunes corpus. */
    c->num_layers = 4;
    c->hidden_size = 256;
    c->num_attention_heads = 4;
    c->seq_length = 128;
    c->make_vocab_size_divisible_by = 128;
    c->init_method_std = 0.02f;
    c->hidden_dropout = 0.1f;
    c->attention_dropout = 0.1f;
    c->micro_batch_size = 4;
    c->global_batch_size = 8;
    c->train_iters = 300;
    c->lr = 1e-3f;
    c->min_lr = 1e-4f;
    c->lr_decay_style = "cosine";
    c->lr_warmup_iters = 30;
    c->lr_decay_iters = -1;
    c->weight_decay = 0.01f;
    c->adam_beta1 = 0.9f;
    c->adam_beta2 = 0.999f;
    c->adam_eps = 1e-8f;
    c->clip_grad = 1.0f;
    c->seed = 1234;
    c->log_interval = 10;
    c->eval_interval = 100;
    c->eval_iters = 4;
    c->tokenizer_type = "ByteLevelTokenizer";
    /* parallel sizes stay 0 = "not given": a plan file may set them, else 1 */
    c->engine = "starpu";
}

static int parse_value(const flag *f, const char *v, mg_run_config *c, mg_error *err) {
    void *dst = (char *)c + f->off;
    char *end = NULL;
    errno = 0;
    switch (f->type) {
    case F_INT: {
        long x = strtol(v, &end, 10);
        if (!*v || *end || errno || x < INT_MIN || x > INT_MAX)
            return mg_error_set(err, MG_ERR_INVALID, "%s expects an integer, got '%s'", f->name, v);
        *(int *)dst = (int)x;
        return MG_OK;
    }
    case F_I64: {
        long long x = strtoll(v, &end, 10);
        if (!*v || *end || errno) return mg_error_set(err, MG_ERR_INVALID, "%s expects an integer, got '%s'", f->name, v);
        *(int64_t *)dst = x;
        return MG_OK;
    }
    case F_FLOAT: {
        float x = strtof(v, &end);
        if (!*v || *end || errno || !isfinite(x))
            return mg_error_set(err, MG_ERR_INVALID, "%s expects a number, got '%s'", f->name, v);
        *(float *)dst = x;
        return MG_OK;
    }
    case F_STR:
        if (!*v) return mg_error_set(err, MG_ERR_INVALID, "%s expects a non-empty value", f->name);
        *(const char **)dst = v;
        return MG_OK;
    case F_BOOL: break;
    }
    return mg_error_set(err, MG_ERR_INVALID, "%s takes no value", f->name);
}

int mg_run_config_parse(mg_run_config *c, int argc, char **argv, mg_error *err) {
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strncmp(a, "--", 2) != 0)
            return mg_error_set(err, MG_ERR_INVALID, "unexpected argument '%s' (flags start with --)", a);
        const char *eq = strchr(a, '=');
        size_t len = eq ? (size_t)(eq - a) : strlen(a);
        const flag *f = NULL;
        for (size_t k = 0; k < sizeof flags / sizeof *flags; k++)
            if (strlen(flags[k].name) == len && strncmp(flags[k].name, a, len) == 0) f = &flags[k];
        if (!f) return mg_error_set(err, MG_ERR_INVALID, "unknown flag '%.*s' (see --help)", (int)len, a);
        if (f->type == F_BOOL) {
            if (eq) return mg_error_set(err, MG_ERR_INVALID, "%s takes no value", f->name);
            *(bool *)((char *)c + f->off) = true;
            continue;
        }
        const char *v = eq ? eq + 1 : (i + 1 < argc ? argv[++i] : NULL);
        /* "--dump-dot --dry-run" forgot a value: never take a flag as one */
        if (!v || (!eq && strncmp(v, "--", 2) == 0)) return mg_error_set(err, MG_ERR_INVALID, "%s needs a value", f->name);
        int rc = parse_value(f, v, c, err);
        if (rc) return rc;
    }
    return MG_OK;
}

void mg_run_config_usage(FILE *out) {
    fprintf(out, "usage: mgraph-run [flags]\n\n"
                 "Trains a GPT model with mgraph. Flag names follow Megatron-LM's pretrain_gpt.py.\n"
                 "With no flags: a small byte-level GPT on Debian's fortunes corpus (%s).\n\n",
            *MG_DEFAULT_CORPUS ? MG_DEFAULT_CORPUS : "not found at configure time");
    for (size_t k = 0; k < sizeof flags / sizeof *flags; k++) {
        const char *arg = flags[k].type == F_BOOL ? "" : flags[k].type == F_STR ? " S" : " N";
        fprintf(out, "  %s%-*s %s\n", flags[k].name, (int)(34 - strlen(flags[k].name)), arg, flags[k].help);
    }
    fprintf(out, "\nExit status: 0 success, 2 bad usage or input, 1 failure while running.\n");
}

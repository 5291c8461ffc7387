/* mgraph-run's setup from its flags (tools/run_setup.h): the plan, the limits, the GPT
 * model's step configuration and its data. */
#include "run_setup.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mgraph/exec.h"
#include "run_schedule.h"

#ifndef MG_DEFAULT_CORPUS
#define MG_DEFAULT_CORPUS ""
#endif

/* Micro-batches x layers in one step graph: 2^18 is ~10^7 graph nodes, the most that
 * builds in a reasonable time and memory. */
#define MAX_MICRO_LAYERS (1 << 18)

/* The plan: defaults, then the plan file, then the flags that were given. */
int mg_run_resolve_plan(mg_run_config *c, int world, int rank, mg_plan *p, mg_error *err) {
    mg_plan_defaults(p);
    if (c->plan_file) {
        int rc = mg_plan_read(p, c->plan_file, err);
        if (rc) return rc;
    }
    int given[] = {c->tensor_model_parallel_size, c->pipeline_model_parallel_size, c->context_parallel_size,
                   c->expert_model_parallel_size};
    const char *names[] = {"--tensor-model-parallel-size", "--pipeline-model-parallel-size",
                           "--context-parallel-size", "--expert-model-parallel-size"};
    int *dst[] = {&p->tp, &p->pp, &p->cp, &p->ep};
    for (int i = 0; i < 4; i++) {
        if (!mg_run_config_given(c, names[i])) continue;
        if (given[i] < 1 || given[i] > 1 << 20)
            return mg_error_set(err, MG_ERR_INVALID, "%s must be in 1..%d (got %d)", names[i], 1 << 20, given[i]);
        *dst[i] = given[i];
    }
    if (mg_run_config_given(c, "--matmul-tiles") && c->matmul_tiles < 1)
        return mg_error_set(err, MG_ERR_INVALID, "--matmul-tiles must be in 1..64 (got %d)", c->matmul_tiles);
    if (c->matmul_tiles < 0 || c->matmul_tiles > 64)
        return mg_error_set(err, MG_ERR_INVALID, "--matmul-tiles must be in 1..64 (got %d)", c->matmul_tiles);
    if (c->matmul_tiles > 0) p->matmul_tiles = c->matmul_tiles;
    if (mg_run_config_given(c, "--micro-batch-split")) {
        if (c->micro_batch_split < 0 || c->micro_batch_split > 64)
            return mg_error_set(err, MG_ERR_INVALID, "--micro-batch-split must be in 0..64 (0: auto; got %d)",
                                c->micro_batch_split);
        p->micro_batch_split = c->micro_batch_split;
    }
    if (c->sequence_parallel) p->sequence_parallel = true;
    if (p->sequence_parallel && p->tp == 1) {
        /* Megatron's validate_args: warn and disable, so that numerics do not change */
        if (rank == 0)
            fprintf(stderr, "mgraph-run: warning: disabling sequence parallelism because tensor model parallelism is "
                            "disabled (tp 1)\n");
        p->sequence_parallel = false;
    }
    if (c->use_distributed_optimizer) p->distributed_optimizer = true;
    if (c->use_tp_pp_dp_mapping) snprintf(p->order, sizeof p->order, "tp-pp-dp"); /* Megatron's initialize.py */
    if (mg_run_config_given(c, "--expert-tensor-parallel-size")) p->etp = c->expert_tensor_parallel_size;
    if (c->use_megatron_fsdp && c->use_torch_fsdp2)
        return mg_error_set(err, MG_ERR_INVALID, "give --use-megatron-fsdp or --use-torch-fsdp2, not both");
    if (c->use_torch_fsdp2) p->fsdp = MG_FSDP_OPTIM_GRADS_PARAMS;
    if (c->use_megatron_fsdp) {
        const char *s = c->data_parallel_sharding_strategy ? c->data_parallel_sharding_strategy : "optim_grads_params";
        if (mg_plan_set_fsdp(p, s))
            return mg_error_set(err, MG_ERR_INVALID,
                                "--data-parallel-sharding-strategy %s: expected no_shard, optim, optim_grads or "
                                "optim_grads_params", s);
    } else if (c->data_parallel_sharding_strategy && rank == 0) {
        fprintf(stderr, "mgraph-run: warning: --data-parallel-sharding-strategy %s ignored without --use-megatron-fsdp\n",
                c->data_parallel_sharding_strategy);
    }
    /* pipeline layout: Megatron's flags, checked against the model in mg_plan_check_model */
    bool by_layers = mg_run_config_given(c, "--num-layers-per-virtual-pipeline-stage"),
         by_stages = mg_run_config_given(c, "--num-virtual-stages-per-pipeline-rank");
    if (by_layers && by_stages)
        return mg_error_set(err, MG_ERR_INVALID,
                            "give --num-layers-per-virtual-pipeline-stage or --num-virtual-stages-per-pipeline-rank, "
                            "not both");
    if ((by_layers || by_stages) && p->pp < 2) {
        /* a recipe's interleaving flags with the pipeline off (recipes scaled down to one
         * stage): nothing to interleave */
        if (rank == 0)
            fprintf(stderr, "mgraph-run: warning: %s ignored: --pipeline-model-parallel-size is 1\n",
                    by_layers ? "--num-layers-per-virtual-pipeline-stage" : "--num-virtual-stages-per-pipeline-rank");
        by_layers = by_stages = false;
    }
    if (by_layers) {
        int lv = c->num_layers_per_virtual_pipeline_stage; /* (the embedding and loss count as layers when accounted) */
        int L = c->num_layers + c->account_for_embedding_in_pipeline_split + c->account_for_loss_in_pipeline_split;
        if (lv < 1 || L % (p->pp * lv))
            return mg_error_set(err, MG_ERR_INVALID,
                                "--num-layers-per-virtual-pipeline-stage %d: --num-layers %d%s must be a multiple of "
                                "--pipeline-model-parallel-size %d x it",
                                lv, c->num_layers, L > c->num_layers ? " (+ the embedding / loss accounted)" : "", p->pp);
        p->vpp = L / (p->pp * lv);
    }
    if (by_stages) {
        if (c->num_virtual_stages_per_pipeline_rank < 1 || c->num_virtual_stages_per_pipeline_rank > 1 << 16)
            return mg_error_set(err, MG_ERR_INVALID, "--num-virtual-stages-per-pipeline-rank must be in 1..65536 (got %d)",
                                c->num_virtual_stages_per_pipeline_rank);
        p->vpp = c->num_virtual_stages_per_pipeline_rank;
    }
    if (c->pipeline_model_parallel_layout) { /* Megatron's: the layout gives the model chunks */
        if (by_layers || by_stages)
            return mg_error_set(err, MG_ERR_INVALID,
                                "--pipeline-model-parallel-layout gives the virtual stages: not with --num-layers-per-"
                                "virtual-pipeline-stage or --num-virtual-stages-per-pipeline-rank");
        if (strlen(c->pipeline_model_parallel_layout) >= sizeof p->pp_layout)
            return mg_error_set(err, MG_ERR_INVALID, "--pipeline-model-parallel-layout: too long (at most %zu characters)",
                                sizeof p->pp_layout - 1);
        snprintf(p->pp_layout, sizeof p->pp_layout, "%s", c->pipeline_model_parallel_layout);
    }
    if (p->pp_layout[0]) {
        int n = 0, lrc = mg_plan_pp_layout_stages(p->pp_layout, &n, err);
        if (lrc) return lrc;
        if (p->pp < 1 || n % p->pp)
            return mg_error_set(err, MG_ERR_INVALID,
                                "--pipeline-model-parallel-layout '%s' has %d virtual stages, not a multiple of "
                                "--pipeline-model-parallel-size %d", p->pp_layout, n, p->pp);
        p->vpp = n / p->pp;
    }
    if (c->account_for_embedding_in_pipeline_split) p->pp_account_embedding = true;
    if (c->account_for_loss_in_pipeline_split) p->pp_account_loss = true;
    int urc = mg_run_config_uneven_pipeline(c, p, err);
    if (urc) return urc;
    if (c->pipeline_schedule && mg_pp_schedule_parse(c->pipeline_schedule, &p->pp_schedule))
        return mg_error_set(err, MG_ERR_INVALID, "--pipeline-schedule %s: expected auto, 1f1b, interleaved or gpipe",
                            c->pipeline_schedule);
    return mg_plan_check(p, world, err);
}


/* ---- limits (issue 18) ----------------------------------------------------------------------
 * Bounds the Megatron checks (mg_run_config_check) do not make. They keep every product
 * computed from the sizes (4h, seq + 1, parameter counts, samples asked of the dataset)
 * far from overflow, and check a value that was given explicitly before
 * mg_run_config_check derives defaults from values <= 0 (--ffn-hidden-size 0 was taken
 * as "not given"). */
static void check_max(mg_run_notes *n, const char *flag, int64_t v, int64_t hi) {
    if (v > hi) mg_run_notes_error(n, "%s must be at most %lld (got %lld)", flag, (long long)hi, (long long)v);
}

static void check_range(mg_run_notes *n, const char *flag, int64_t v, int64_t lo, int64_t hi) {
    if (v < lo || v > hi)
        mg_run_notes_error(n, "%s must be in %lld..%lld (got %lld)", flag, (long long)lo, (long long)hi, (long long)v);
}

void mg_run_check_limits(const mg_run_config *c, mg_run_notes *n) {
    const int64_t DIM = 1 << 24, ITERS = (int64_t)1 << 40;
    check_range(n, "--num-layers", c->num_layers, 1, 1 << 16);
    check_range(n, "--hidden-size", c->hidden_size, 1, DIM);
    check_range(n, "--num-attention-heads", c->num_attention_heads, 1, DIM);
    check_range(n, "--seq-length", c->seq_length, 1, DIM);
    if (mg_run_config_given(c, "--ffn-hidden-size")) check_range(n, "--ffn-hidden-size", c->ffn_hidden_size, 1, 4 * DIM);
    if (mg_run_config_given(c, "--max-position-embeddings"))
        check_range(n, "--max-position-embeddings", c->max_position_embeddings, 1, DIM);
    check_max(n, "--micro-batch-size", c->micro_batch_size, DIM);
    check_max(n, "--global-batch-size", c->global_batch_size, 1 << 30);
    check_max(n, "--train-iters", c->train_iters, ITERS);
    check_max(n, "--eval-iters", c->eval_iters, ITERS);
    check_max(n, "--eval-interval", c->eval_interval, ITERS);
    check_max(n, "--log-interval", c->log_interval, ITERS);
    check_max(n, "--lr-warmup-iters", c->lr_warmup_iters, ITERS);
    check_max(n, "--lr-decay-iters", c->lr_decay_iters, ITERS);
    if (mg_run_config_given(c, "--eval-interval") && c->eval_interval < 0)
        mg_run_notes_error(n, "--eval-interval must be >= 0 (0 or left out: no periodic validation; got %lld)",
                           (long long)c->eval_interval);
    if (c->eval_interval == 0 && mg_run_config_given(c, "--eval-iters") && c->eval_iters > 0)
        mg_run_notes_error(n, "--eval-iters %lld with --eval-interval 0: evaluation would never run (give an interval, "
                              "or --eval-iters 0)", (long long)c->eval_iters);
    if (!(c->weight_decay >= 0)) mg_run_notes_error(n, "--weight-decay must be >= 0 (got %g)", c->weight_decay);
    if (!(c->clip_grad >= 0)) mg_run_notes_error(n, "--clip-grad must be >= 0 (0: off; got %g)", c->clip_grad);
    if (!(c->init_method_std >= 0)) mg_run_notes_error(n, "--init-method-std must be >= 0 (got %g)", c->init_method_std);
    if (!(c->hidden_dropout >= 0 && c->hidden_dropout < 1) || !(c->attention_dropout >= 0 && c->attention_dropout < 1))
        mg_run_notes_error(n, "--hidden-dropout and --attention-dropout must be in [0, 1)");
    /* tokenizer files of another tokenizer than the one named */
    const char *type = c->tokenizer_type;
    if (type && strcmp(type, "GPT2BPETokenizer") && (c->vocab_file || c->merge_file))
        mg_run_notes_error(n, "%s is for --tokenizer-type GPT2BPETokenizer (the tokenizer is %s)",
                           c->vocab_file ? "--vocab-file" : "--merge-file", type);
    if (type && c->tokenizer_model && strcmp(type, "SentencePieceTokenizer") && strcmp(type, "HuggingFaceTokenizer") &&
        strcmp(type, "TikTokenizer"))
        mg_run_notes_error(n, "--tokenizer-model is for --tokenizer-type SentencePieceTokenizer, HuggingFaceTokenizer or "
                              "TikTokenizer (the tokenizer is %s)",
                           type);
    if (c->check_for_nan_in_loss_and_grad && c->no_check_for_nan_in_loss_and_grad)
        mg_run_notes_error(n, "--check-for-nan-in-loss-and-grad and --no-check-for-nan-in-loss-and-grad exclude each other");
}

/* Expert parallelism's model rules (partitioners/ep.c): experts to split, evenly; the
 * experts themselves run whole on every tensor-parallel rank, split over all of them, or
 * (tp 1) split over an expert tensor group of ranks holding other tokens. */
int mg_run_check_expert_parallel(const mg_run_config *c, const mg_plan *p, const mg_gpt_config *m, mg_error *err) {
    int ep = p->ep;
    int etp = c->expert_tensor_parallel_size;
    if (etp < 1) return mg_error_set(err, MG_ERR_INVALID, "--expert-tensor-parallel-size must be >= 1 (got %d)", etp);
    if (m->moe.num_experts > 0 && etp > 1 && etp != p->tp && p->tp > 1)
        return mg_error_set(err, MG_ERR_UNSUPPORTED,
                            "--expert-tensor-parallel-size %d other than 1 or --tensor-model-parallel-size %d is "
                            "supported with --tensor-model-parallel-size 1 only (the expert tensor group is then ranks "
                            "holding other tokens, gathered for the experts)",
                            etp, p->tp);
    if (ep > 1 && m->moe.num_experts == 0)
        return mg_error_set(err, MG_ERR_INVALID, "--expert-model-parallel-size %d needs --num-experts (a MoE model)", ep);
    if (ep > 1 && m->moe.num_experts % ep)
        return mg_error_set(err, MG_ERR_INVALID, "--num-experts %d is not divisible by --expert-model-parallel-size %d",
                            m->moe.num_experts, ep);
    return MG_OK;
}

/* --bf16: every matrix product with bf16 inputs and fp32 sums (mgraph/exec.h). On a CPU
 * without AVX512-BF16 the flag is refused by name (exit 2), unless MG_CPU_BF16=emulate
 * asks for the portable kernel: the same bits, slower than fp32, to check numerics. */
void mg_run_apply_bf16(mg_run_notes *notes) {
    const char *e = getenv("MG_CPU_BF16");
    bool emulate = e && !strcmp(e, "emulate");
    if (e && *e && !emulate) {
        mg_run_notes_error(notes, "MG_CPU_BF16 must be 'emulate' or unset (got '%s')", e);
        return;
    }
    mg_error err = {0};
    if (mg_gemm_set_precision(MG_GEMM_BF16, emulate, &err))
        mg_run_notes_error(notes, "--bf16 is not supported: %s", err.msg);
    else if (!mg_cpu_has_bf16())
        mg_run_notes_warn(notes, "--bf16 on a CPU without AVX512-BF16: the portable kernel (MG_CPU_BF16=emulate) "
                                 "gives the native kernel's bits at about half fp32's speed");
}

/* The step configuration from the checked flags (mg_run_config_check). */
int mg_run_resolve_step(mg_run_config *c, int dp, mg_step_config *sc, mg_error *err) {
    if (c->global_batch_size == 0) c->global_batch_size = c->micro_batch_size * dp; /* Megatron's default */
    /* every micro-batch is its own copy of the model in the step graph: bound the graph */
    int64_t n_micro = c->global_batch_size / c->micro_batch_size;
    if (n_micro * c->num_layers > MAX_MICRO_LAYERS)
        return mg_error_set(err, MG_ERR_INVALID,
                            "%lld micro-batches (--global-batch-size %d / --micro-batch-size %d) x %d layers make a step "
                            "graph too large to build (limit %d micro-batch layers): raise --micro-batch-size",
                            (long long)n_micro, c->global_batch_size, c->micro_batch_size, c->num_layers, MAX_MICRO_LAYERS);
    memset(sc, 0, sizeof *sc);
    mg_gpt_config *m = &sc->model;
    int rc = mg_run_config_model(c, m, err);
    if (rc) return rc;
    sc->micro_batch = c->micro_batch_size;
    sc->n_micro = c->global_batch_size / c->micro_batch_size;
    sc->training = true;
    sc->loss_token_mean = c->eod_mask_loss; /* Megatron's log line: the mean over the kept tokens */
    sc->per_token_loss = c->calculate_per_token_loss;
    sc->reset_position_ids = c->reset_position_ids;
    sc->reset_attention_mask = c->reset_attention_mask;
    sc->precision = mg_run_config_precision(c);
    sc->fp8 = mg_run_config_fp8(c);
    mg_adamw_config *o = &sc->optim;
    *o = mg_adamw_defaults();
    o->beta1 = c->adam_beta1;
    o->beta2 = c->adam_beta2;
    o->eps = c->adam_eps;
    o->weight_decay = c->weight_decay;
    o->clip_grad = c->clip_grad;
    o->params_norm = c->log_params_norm;
    o->num_zeros = c->log_num_zeros_in_grad;
    rc = mg_run_lr_schedule(c, &o->lr, err); /* sets --train-iters from --train-samples */
    if (rc) return rc;
    o->decoupled = mg_run_config_given(c, "--decoupled-lr");
    o->decoupled_lr = c->decoupled_lr;
    o->decoupled_min_lr = mg_run_config_given(c, "--decoupled-min-lr") ? c->decoupled_min_lr : o->lr.min_lr;
    /* every batch of the ramp is whole micro-batches on every data-parallel rank (Megatron
     * asserts it at each batch it reaches: start and increment cover them all) */
    int64_t unit = (int64_t)c->micro_batch_size * dp;
    if (o->lr.ramp_start > 0 && (o->lr.ramp_start % unit || o->lr.ramp_increment % unit))
        return mg_error_set(err, MG_ERR_INVALID,
                            "--rampup-batch-size %lld %lld ...: the start and the increment must be multiples of "
                            "--micro-batch-size x data-parallel size (%lld)",
                            (long long)o->lr.ramp_start, (long long)o->lr.ramp_increment, (long long)unit);
    /* (after the schedule: --train-samples sets train_iters) samples asked of the dataset: bounded (2^50) so that the products in open_data fit */
    uint64_t cap = ((uint64_t)1 << 50) / (uint64_t)c->global_batch_size;
    if ((uint64_t)c->train_iters > cap ||
        (c->eval_interval > 0 && (uint64_t)(c->train_iters / c->eval_interval + 1) * (uint64_t)c->eval_iters > cap))
        return mg_error_set(err, MG_ERR_INVALID,
                            "--train-iters %lld (and --eval-iters %lld) x --global-batch-size %d ask for more than 2^50 samples",
                            (long long)c->train_iters, (long long)c->eval_iters, c->global_batch_size);
    return mg_gpt_check(m, err);
}

/* ---- data ------------------------------------------------------------------------------ */
int mg_run_open_data(mg_run_config *c, int tp, mg_step_config *sc, mg_tokenizer **tok, mg_dataset **data, mg_error *err) {
    mg_tokenizer_config tc = mg_run_tokenizer_config(c);
    int rc = mg_tokenizer_open(&tc, tok, err);
    if (rc) return rc;
    const char *needs_eod = NULL; /* the flags that find documents by their end token */
    if (c->reset_attention_mask) needs_eod = "--reset-attention-mask";
    if (c->reset_position_ids) needs_eod = "--reset-position-ids";
    if (c->eod_mask_loss) needs_eod = "--eod-mask-loss";
    if (needs_eod && mg_tokenizer_eod(*tok) < 0)
        return mg_error_set(err, MG_ERR_INVALID, "%s: the %s has no end-of-document token", needs_eod,
                            mg_tokenizer_type(*tok));
    int64_t vocab = mg_tokenizer_vocab_size(*tok);
    sc->model.vocab = mg_vocab_padded(vocab, c->make_vocab_size_divisible_by, tp);
    uint64_t gbs = (uint64_t)c->global_batch_size;
    /* no evaluation, no validation samples asked for (--skip-train evaluates once) */
    uint64_t evals = c->eval_interval > 0 ? (uint64_t)(c->train_iters / c->eval_interval) + 1 : c->skip_train ? 1 : 0;
    /* the test split is not used by training: ask for none (0 = one epoch, possibly empty) */
    /* Megatron's get_train_valid_test_num_samples: --train-samples as given (with a ramp,
     * train iterations x global batch overstates it), else iterations x global batch */
    uint64_t train = c->skip_train ? 0 /* (none read) */
                     : c->train_samples > 0 ? (uint64_t)c->train_samples : (uint64_t)c->train_iters * gbs;
    uint64_t want[3] = {train, evals * (uint64_t)c->eval_iters * gbs, 0};
    bool per_split = c->split_data_path[0] || c->split_data_path[1] || c->split_data_path[2];
    if (c->mock_data) { /* Megatron asks the test split for eval_iters x global batch */
        mg_mock_dataset_config mc = {c->split, c->seq_length, (uint64_t)c->seed,
                                     {want[0], want[1], (uint64_t)c->eval_iters * gbs}, vocab, mg_tokenizer_eod(*tok)};
        rc = mg_mock_dataset_open(&mc, data, err);
    } else if (c->data_path) {
        mg_gpt_dataset_config dc = {c->data_path, c->split, c->seq_length, (uint64_t)c->seed,
                                    {want[0], want[1], want[2]}, c->data_cache_path, vocab,
                                    mg_tokenizer_type(*tok), false, 0};
        rc = mg_gpt_dataset_open(&dc, data, err);
    } else if (per_split) { /* Megatron's blend_per_split: each split from its own datasets, whole */
        mg_dataset *parts[3] = {NULL, NULL, NULL};
        for (int s = 0; s < 3 && !rc; s++) {
            if (!c->split_data_path[s]) continue;
            mg_gpt_dataset_config dc = {c->split_data_path[s], NULL, c->seq_length, (uint64_t)c->seed,
                                        {want[0], want[1], want[2]}, c->data_cache_path, vocab,
                                        mg_tokenizer_type(*tok), true, s};
            rc = mg_gpt_dataset_open(&dc, &parts[s], err);
        }
        if (rc) {
            for (int s = 0; s < 3; s++) mg_dataset_free(parts[s]);
            return rc;
        }
        rc = mg_dataset_per_split(parts, data, err);
    } else {
        const char *path = c->text_file ? c->text_file : MG_DEFAULT_CORPUS;
        if (!*path)
            return mg_error_set(err, MG_ERR_IO, "no --text-file or --data-path given, and the default corpus (Debian's "
                                                "fortunes package) was not found when mgraph was configured");
        mg_text_dataset_config dc = {path, *tok, c->split, c->seq_length, (uint64_t)c->seed, {0, 0, 0}};
        rc = mg_text_dataset_open(&dc, data, err);
    }
    if (rc) return rc;
    if (!c->skip_train && mg_dataset_num_samples(*data, MG_SPLIT_TRAIN) == 0)
        return mg_error_set(err, MG_ERR_INVALID, "the training split has no sample of %d tokens", c->seq_length + 1);
    if (c->eval_interval > 0 && c->eval_iters > 0 && mg_dataset_num_samples(*data, MG_SPLIT_VALID) == 0)
        return mg_error_set(err, MG_ERR_INVALID, "the validation split has no sample (%s or --eval-iters 0)",
                            per_split ? "give --valid-data-path" : "set --split");
    return MG_OK;
}

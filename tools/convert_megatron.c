/* mgraph-convert --from-megatron DIR --save OUT (tools/convert_megatron.h).
 *
 * The model: Megatron's args are turned into the flags mgraph-run would be given for the
 * same model (Megatron's names: --num-layers, --swiglu, --num-query-groups, ...), which
 * give the GPT configuration mgraph-run would build, and its parameters (models/gpt2.c's
 * names and shapes). Each parameter is read from Megatron-Core's logical tensor
 * (convert_megatron_internal.h) of the same role:
 *   word / position embedding   embedding.word_embeddings.weight (padded vocabulary),
 *                               embedding.position_embeddings.weight
 *   the layers' norms           self_attention.linear_qkv.layer_norm_weight / _bias and
 *                               mlp.linear_fc1.layer_norm_weight (Transformer Engine's fused
 *                               norms), or input_layernorm / pre_mlp_layernorm (local spec)
 *   attention                   self_attention.linear_qkv (rows per query group:
 *                               [its q heads, k, v]); GPT-2's c_attn is that layout for one
 *                               head per group; LLaMA's q/k/v_proj are cut out of it;
 *                               self_attention.linear_proj; q_layernorm / k_layernorm
 *   MLP                         mlp.linear_fc1 ([gate; up] with --swiglu), mlp.linear_fc2
 *   final norm, output layer    decoder.final_layernorm, output_layer.weight (untied)
 * _extra_state entries are Transformer Engine's FP8 bookkeeping: passed over. Every
 * parameter of the checkpoint must be used (a tied output layer's pipeline copy aside):
 * one mgraph's model of those args would not have is refused, naming it.
 *
 * The run state: the iteration, args.consumed_train_samples, validation batches from
 * args.consumed_valid_samples, the scheduler's state (OptimizerParamScheduler.state_dict)
 * as mgraph's lr_schedule, Adam's moments and its step (optimizer_start = iteration -
 * step), the fp32 main weights where the optimizer keeps them (bf16 / fp16 training), the
 * seed. Megatron's RNG states (torch, CUDA) have no mgraph counterpart: dropout continues
 * from mgraph's counter-based streams under the same seed.
 */
#include "convert_megatron_internal.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "mgraph/checkpoint.h"
#include "mgraph/graph.h"
#include "mgraph/model.h"
#include "mgraph/tokenizer.h"
#include "run_checkpoint.h"
#include "run_config.h"

/* ---- Megatron's args as mgraph-run's flags --------------------------------------------------- */
typedef enum { A_INT, A_FLOAT, A_STR, A_TRUE, A_FALSE } akind;

/* attr (old attr), the flag, how the value reads; model: the flag shapes the model
 * (recorded for --use-checkpoint-args), else the tokenizer's */
static const struct { const char *attr, *old, *flag; akind kind; bool model; } arg_table[] = {
    {"num_layers", NULL, "--num-layers", A_INT, true},
    {"hidden_size", NULL, "--hidden-size", A_INT, true},
    {"ffn_hidden_size", NULL, "--ffn-hidden-size", A_INT, true},
    {"num_attention_heads", NULL, "--num-attention-heads", A_INT, true},
    {"seq_length", NULL, "--seq-length", A_INT, true},
    {"max_position_embeddings", NULL, "--max-position-embeddings", A_INT, true},
    {"make_vocab_size_divisible_by", NULL, "--make-vocab-size-divisible-by", A_INT, true},
    {"position_embedding_type", NULL, "--position-embedding-type", A_STR, true},
    {"add_position_embedding", NULL, "--no-position-embedding", A_FALSE, true},
    {"rotary_base", NULL, "--rotary-base", A_FLOAT, true},
    {"rotary_percent", NULL, "--rotary-percent", A_FLOAT, true},
    {"rotary_interleaved", NULL, "--rotary-interleaved", A_TRUE, true},
    {"use_rope_scaling", NULL, "--use-rope-scaling", A_TRUE, true},
    {"normalization", NULL, "--normalization", A_STR, true},
    {"layernorm_epsilon", "norm_epsilon", "--norm-epsilon", A_FLOAT, true},
    {"swiglu", NULL, "--swiglu", A_TRUE, true},
    {"squared_relu", NULL, "--squared-relu", A_TRUE, true},
    {"untie_embeddings_and_output_weights", NULL, "--untie-embeddings-and-output-weights", A_TRUE, true},
    {"add_bias_linear", NULL, "--disable-bias-linear", A_FALSE, true},
    {"qk_layernorm", NULL, "--qk-layernorm", A_TRUE, true},
    {"qk_l2_norm", NULL, "--qk-l2-norm", A_TRUE, true},
    {"apply_wd_to_qk_layernorm", NULL, "--apply-wd-to-qk-layernorm", A_TRUE, true},
    {"window_attn_skip_freq", NULL, "--window-attn-skip-freq", A_INT, true},
    {"hidden_dropout", NULL, "--hidden-dropout", A_FLOAT, true},
    {"attention_dropout", NULL, "--attention-dropout", A_FLOAT, true},
    {"init_method_std", NULL, "--init-method-std", A_FLOAT, true},
    {"tokenizer_type", NULL, "--tokenizer-type", A_STR, false},
    {"vocab_file", NULL, "--vocab-file", A_STR, false},
    {"merge_file", NULL, "--merge-file", A_STR, false},
    {"tokenizer_model", NULL, "--tokenizer-model", A_STR, false},
    {"tiktoken_pattern", NULL, "--tiktoken-pattern", A_STR, false},
};

/* What mgraph's GPT cannot be: refused, naming Megatron's flag. */
static const struct { const char *attr, *old, *flag; } refused[] = {
    {"layernorm_zero_centered_gamma", "apply_layernorm_1p", "--apply-layernorm-1p"},
    {"apply_residual_connection_post_layernorm", NULL, "--apply-residual-connection-post-layernorm"},
    {"multi_latent_attention", NULL, "--multi-latent-attention"},
    {"attention_output_gate", NULL, "--attention-output-gate"},
    {"num_experts", NULL, "--num-experts (mgraph-convert reads dense models)"},
    {"mtp_num_layers", NULL, "--mtp-num-layers"},
    {"hybrid_layer_pattern", "hybrid_override_pattern", "a hybrid (Mamba) model"},
    {"heterogeneous_layers_config_path", NULL, "--heterogeneous-layers-config-path"},
    {"use_mup", NULL, "--use-mup"},
};

typedef struct argv_buf {
    char *argv[160];
    int argc;
    char store[16384];
    size_t used;
} argv_buf;

static int push_arg(argv_buf *b, const char *s) {
    size_t n = strlen(s) + 1;
    if (b->argc >= 159 || b->used + n > sizeof b->store) return -1;
    b->argv[b->argc++] = memcpy(b->store + b->used, s, n);
    b->used += n;
    return 0;
}

static int args_to_argv(const mg_pk *args, argv_buf *b, argv_buf *model, mg_error *err) {
    push_arg(b, "mgraph-convert");
    for (size_t i = 0; i < sizeof refused / sizeof *refused; i++) {
        const mg_pk *v = ms_arg(args, refused[i].attr, refused[i].old);
        if (mg_pk_truthy(v))
            return mg_error_set(err, MG_ERR_UNSUPPORTED, "the checkpoint's model has %s, which mgraph's GPT does not",
                                refused[i].flag);
    }
    const char *pos = mg_pk_str(ms_arg(args, "position_embedding_type", NULL));
    if (pos && strcmp(pos, "rope") && strcmp(pos, "learned_absolute") && strcmp(pos, "none"))
        return mg_error_set(err, MG_ERR_UNSUPPORTED, "the checkpoint's --position-embedding-type %s is not one "
                            "mgraph-convert reads (learned_absolute, rope, none)", pos);
    const char *sm = mg_pk_str(ms_arg(args, "softmax_type", NULL));
    if (sm && strcmp(sm, "vanilla"))
        return mg_error_set(err, MG_ERR_UNSUPPORTED, "the checkpoint's --softmax-type %s (mgraph's attention is the "
                            "vanilla softmax)", sm);
    for (size_t i = 0; i < sizeof arg_table / sizeof *arg_table; i++) {
        const mg_pk *v = ms_arg(args, arg_table[i].attr, arg_table[i].old);
        if (!v) continue;
        char val[4200] = "";
        int64_t iv;
        double fv;
        bool flag_only = false;
        switch (arg_table[i].kind) {
        case A_INT:
            if (!mg_pk_int(v, &iv)) return mg_error_set(err, MG_ERR_IO, "the checkpoint's args.%s is not an integer", arg_table[i].attr);
            snprintf(val, sizeof val, "%lld", (long long)iv);
            break;
        case A_FLOAT:
            if (!mg_pk_num(v, &fv)) return mg_error_set(err, MG_ERR_IO, "the checkpoint's args.%s is not a number", arg_table[i].attr);
            snprintf(val, sizeof val, "%.17g", fv);
            break;
        case A_STR:
            if (!mg_pk_str(v)) return mg_error_set(err, MG_ERR_IO, "the checkpoint's args.%s is not a string", arg_table[i].attr);
            snprintf(val, sizeof val, "%s", mg_pk_str(v));
            break;
        case A_TRUE: if (!mg_pk_truthy(v)) continue; flag_only = true; break;
        case A_FALSE: if (mg_pk_truthy(v)) continue; flag_only = true; break;
        }
        if (push_arg(b, arg_table[i].flag) || (!flag_only && push_arg(b, val)))
            return mg_error_set(err, MG_ERR_INVALID, "the checkpoint's args are too long");
        if (arg_table[i].model && (push_arg(model, arg_table[i].flag) || (!flag_only && push_arg(model, val))))
            return mg_error_set(err, MG_ERR_INVALID, "the checkpoint's args are too long");
    }
    /* the ones that read together */
    char v[64];
    int64_t groups, heads = 0, hidden = 0, kvc;
    ms_arg_int(args, "num_attention_heads", &heads);
    ms_arg_int(args, "hidden_size", &hidden);
    argv_buf *both[2] = {b, model};
    for (int k = 0; k < 2; k++) {
        argv_buf *x = both[k];
        int bad = 0;
        if (ms_arg_true(args, "group_query_attention") && ms_arg_int(args, "num_query_groups", &groups)) {
            snprintf(v, sizeof v, "%lld", (long long)groups);
            bad |= push_arg(x, "--group-query-attention") | push_arg(x, "--num-query-groups") | push_arg(x, v);
        }
        if (ms_arg_int(args, "kv_channels", &kvc) && heads > 0 && kvc * heads != hidden) {
            snprintf(v, sizeof v, "%lld", (long long)kvc);
            bad |= push_arg(x, "--kv-channels") | push_arg(x, v);
        }
        /* only biased linear layers have Megatron's q/k/v bias switch mean anything else */
        if (!ms_arg_true(args, "add_bias_linear") && ms_arg_true(args, "add_qkv_bias")) bad |= push_arg(x, "--add-qkv-bias");
        /* the GELU: Megatron's fused bias-GELU (and --openai-gelu) is the tanh form, the
         * unfused one the exact */
        if (!ms_arg_true(args, "bias_gelu_fusion") && !ms_arg_true(args, "openai_gelu")) bad |= push_arg(x, "--no-bias-gelu-fusion");
        const mg_pk *ws = ms_arg(args, "window_size", NULL);
        if (ws && (ws->kind == MG_PK_TUPLE || ws->kind == MG_PK_LIST) && ws->len == 2) {
            int64_t l, r;
            if (!mg_pk_int(ws->items[0], &l) || !mg_pk_int(ws->items[1], &r))
                return mg_error_set(err, MG_ERR_IO, "the checkpoint's args.window_size is not two integers");
            snprintf(v, sizeof v, "%lld,%lld", (long long)l, (long long)r);
            bad |= push_arg(x, "--window-size") | push_arg(x, v);
        }
        if (bad) return mg_error_set(err, MG_ERR_INVALID, "the checkpoint's args are too long");
    }
    const char *tt = mg_pk_str(ms_arg(args, "tokenizer_type", NULL));
    int64_t vs;
    if (tt && (!strcmp(tt, "NullTokenizer") || !strcmp(tt, "TikTokenizer")) && ms_arg_int(args, "vocab_size", &vs)) {
        snprintf(v, sizeof v, "%lld", (long long)vs);
        if (push_arg(b, "--vocab-size") || push_arg(b, v))
            return mg_error_set(err, MG_ERR_INVALID, "the checkpoint's args are too long");
    }
    b->argv[b->argc] = NULL;
    model->argv[model->argc] = NULL;
    return MG_OK;
}

/* ---- mgraph's parameters from Megatron's tensors ------------------------------------------------ */
typedef enum { X_COPY, X_Q, X_K, X_V, X_GATE, X_UP } xform;

typedef struct rule {
    const char *mg;            /* mgraph's name inside a layer (or whole, for the rest) */
    const char *meg[2];        /* Megatron's candidates, in order */
    xform x;
} rule;

static const rule layer_rules[] = {
    {"ln_1.weight", {"self_attention.linear_qkv.layer_norm_weight", "input_layernorm.weight"}, X_COPY},
    {"ln_1.bias", {"self_attention.linear_qkv.layer_norm_bias", "input_layernorm.bias"}, X_COPY},
    {"input_layernorm.weight", {"self_attention.linear_qkv.layer_norm_weight", "input_layernorm.weight"}, X_COPY},
    {"input_layernorm.bias", {"self_attention.linear_qkv.layer_norm_bias", "input_layernorm.bias"}, X_COPY},
    {"attn.c_attn.weight", {"self_attention.linear_qkv.weight"}, X_COPY},
    {"attn.c_attn.bias", {"self_attention.linear_qkv.bias"}, X_COPY},
    {"self_attn.q_proj.weight", {"self_attention.linear_qkv.weight"}, X_Q},
    {"self_attn.q_proj.bias", {"self_attention.linear_qkv.bias"}, X_Q},
    {"self_attn.k_proj.weight", {"self_attention.linear_qkv.weight"}, X_K},
    {"self_attn.k_proj.bias", {"self_attention.linear_qkv.bias"}, X_K},
    {"self_attn.v_proj.weight", {"self_attention.linear_qkv.weight"}, X_V},
    {"self_attn.v_proj.bias", {"self_attention.linear_qkv.bias"}, X_V},
    {"self_attn.q_norm.weight", {"self_attention.q_layernorm.weight"}, X_COPY},
    {"self_attn.q_norm.bias", {"self_attention.q_layernorm.bias"}, X_COPY},
    {"self_attn.k_norm.weight", {"self_attention.k_layernorm.weight"}, X_COPY},
    {"self_attn.k_norm.bias", {"self_attention.k_layernorm.bias"}, X_COPY},
    {"attn.c_proj.weight", {"self_attention.linear_proj.weight"}, X_COPY},
    {"attn.c_proj.bias", {"self_attention.linear_proj.bias"}, X_COPY},
    {"self_attn.o_proj.weight", {"self_attention.linear_proj.weight"}, X_COPY},
    {"self_attn.o_proj.bias", {"self_attention.linear_proj.bias"}, X_COPY},
    {"ln_2.weight", {"mlp.linear_fc1.layer_norm_weight", "pre_mlp_layernorm.weight"}, X_COPY},
    {"ln_2.bias", {"mlp.linear_fc1.layer_norm_bias", "pre_mlp_layernorm.bias"}, X_COPY},
    {"post_attention_layernorm.weight", {"mlp.linear_fc1.layer_norm_weight", "pre_mlp_layernorm.weight"}, X_COPY},
    {"post_attention_layernorm.bias", {"mlp.linear_fc1.layer_norm_bias", "pre_mlp_layernorm.bias"}, X_COPY},
    {"mlp.c_fc.weight", {"mlp.linear_fc1.weight"}, X_COPY},
    {"mlp.c_fc.bias", {"mlp.linear_fc1.bias"}, X_COPY},
    {"mlp.gate_proj.weight", {"mlp.linear_fc1.weight"}, X_GATE},
    {"mlp.gate_proj.bias", {"mlp.linear_fc1.bias"}, X_GATE},
    {"mlp.up_proj.weight", {"mlp.linear_fc1.weight"}, X_UP},   /* (X_COPY without --swiglu) */
    {"mlp.up_proj.bias", {"mlp.linear_fc1.bias"}, X_UP},
    {"mlp.c_proj.weight", {"mlp.linear_fc2.weight"}, X_COPY},
    {"mlp.c_proj.bias", {"mlp.linear_fc2.bias"}, X_COPY},
    {"mlp.down_proj.weight", {"mlp.linear_fc2.weight"}, X_COPY},
    {"mlp.down_proj.bias", {"mlp.linear_fc2.bias"}, X_COPY},
};

static const rule global_rules[] = {
    {"wte.weight", {"embedding.word_embeddings.weight"}, X_COPY},
    {"model.embed_tokens.weight", {"embedding.word_embeddings.weight"}, X_COPY},
    {"wpe.weight", {"embedding.position_embeddings.weight"}, X_COPY},
    {"model.embed_positions.weight", {"embedding.position_embeddings.weight"}, X_COPY},
    {"ln_f.weight", {"decoder.final_layernorm.weight"}, X_COPY},
    {"ln_f.bias", {"decoder.final_layernorm.bias"}, X_COPY},
    {"model.norm.weight", {"decoder.final_layernorm.weight"}, X_COPY},
    {"model.norm.bias", {"decoder.final_layernorm.bias"}, X_COPY},
    {"lm_head.weight", {"output_layer.weight"}, X_COPY},
};

/* One mgraph parameter: its value (and moments) from the Megatron tensor the rule names. */
typedef struct cparam {
    const char *name;
    int ndim;
    int64_t shape[2];
    float *v[3];          /* param, exp_avg, exp_avg_sq */
} cparam;

static int convert_param(ms_src *src, const mg_gpt_config *m, cparam *cp, int what, mg_error *err) {
    const rule *r = NULL;
    int layer = -1;
    char meg[600];
    const char *rest = NULL;
    if (sscanf(cp->name, "h.%d.", &layer) == 1 || sscanf(cp->name, "model.layers.%d.", &layer) == 1) {
        rest = strchr(cp->name + (cp->name[0] == 'h' ? 2 : 13), '.') + 1;
        for (size_t i = 0; i < sizeof layer_rules / sizeof *layer_rules; i++)
            if (!strcmp(rest, layer_rules[i].mg)) r = &layer_rules[i];
    } else {
        for (size_t i = 0; i < sizeof global_rules / sizeof *global_rules; i++)
            if (!strcmp(cp->name, global_rules[i].mg)) r = &global_rules[i];
    }
    if (!r) return mg_error_set(err, MG_ERR_UNSUPPORTED, "mgraph's parameter %s has no Megatron counterpart "
                                "mgraph-convert knows", cp->name);
    int nd = 0;
    int64_t sh[2] = {0, 0};
    float *full = NULL;
    int rc = MG_OK;
    for (int k = 0; k < 2 && r->meg[k] && !nd && !rc; k++) {
        if (layer >= 0) snprintf(meg, sizeof meg, "decoder.layers.%d.%s", layer, r->meg[k]);
        else snprintf(meg, sizeof meg, "%s", r->meg[k]);
        rc = src->get(src, meg, what, &nd, sh, &full, err);
    }
    if (rc) return rc;
    if (!nd) return mg_error_set(err, MG_ERR_IO, "the checkpoint has no %s (for mgraph's %s)", meg, cp->name);
    xform x = r->x == X_UP && !m->swiglu ? X_COPY : r->x;
    int64_t R = sh[0], C = nd == 2 ? sh[1] : 1, row0 = 0, rows = R;
    int64_t hd = m->kv_channels ? m->kv_channels : m->hidden / m->heads;
    int64_t ng = m->query_groups > 0 ? m->query_groups : m->heads, rq = m->heads / ng;
    float *out = malloc((size_t)(cp->shape[0] * (cp->ndim == 2 ? cp->shape[1] : 1)) * sizeof *out + 1);
    if (!out) rc = mg_error_set(err, MG_ERR_NOMEM, "out of memory");
    int64_t want_cols = cp->ndim == 2 ? cp->shape[1] : 1;
    if (!rc && (x == X_Q || x == X_K || x == X_V)) {
        /* per group g: rq q heads, one k head, one v head, hd rows each */
        if (R != ng * (rq + 2) * hd || C != want_cols)
            rc = mg_error_set(err, MG_ERR_IO, "%s has %lld rows, %lld query groups of %lld heads of %lld give %lld", meg,
                              (long long)R, (long long)ng, (long long)rq, (long long)hd, (long long)(ng * (rq + 2) * hd));
        int64_t per = x == X_Q ? rq * hd : hd, skip = x == X_Q ? 0 : x == X_K ? rq * hd : (rq + 1) * hd;
        if (!rc && cp->shape[0] != ng * per)
            rc = mg_error_set(err, MG_ERR_IO, "%s: mgraph's %s has %lld rows, not %lld", meg, cp->name,
                              (long long)cp->shape[0], (long long)(ng * per));
        for (int64_t g = 0; !rc && g < ng; g++)
            memcpy(out + g * per * C, full + (g * (rq + 2) * hd + skip) * C, (size_t)(per * C) * sizeof *out);
    } else if (!rc) {
        if (x == X_GATE || x == X_UP) {
            if (R % 2) rc = mg_error_set(err, MG_ERR_IO, "%s: a gated MLP's linear_fc1 with an odd number of rows", meg);
            rows = R / 2, row0 = x == X_UP ? R / 2 : 0;
        }
        if (!rc && (nd != cp->ndim || rows != cp->shape[0] || C != want_cols))
            rc = mg_error_set(err, MG_ERR_IO, "%s has shape [%lld, %lld]%s, mgraph's %s [%lld, %lld] (the args do not "
                              "describe these weights)", meg, (long long)R, (long long)(nd == 2 ? C : 0),
                              x == X_GATE || x == X_UP ? " (two halves)" : "", cp->name, (long long)cp->shape[0],
                              (long long)(cp->ndim == 2 ? cp->shape[1] : 0));
        if (!rc) memcpy(out, full + row0 * C, (size_t)(rows * C) * sizeof *out);
    }
    free(full);
    if (rc) {
        free(out);
        return rc;
    }
    cp->v[what] = out;
    return MG_OK;
}

/* ---- the run state ------------------------------------------------------------------------------ */
static json_t *sched_json(const mg_pk *sch, mg_error *err) {
    double v[8];
    const char *keys[] = {"max_lr", "min_lr", "lr_warmup_steps", "lr_decay_steps", "num_steps", "start_wd", "end_wd",
                          "wd_incr_steps"};
    for (int i = 0; i < 8; i++)
        if (!mg_pk_num(mg_pk_get(sch, keys[i]), &v[i]) && i < 5) {
            mg_error_set(err, MG_ERR_IO, "the checkpoint's opt_param_scheduler has no %s", keys[i]);
            return NULL;
        } else if (!mg_pk_num(mg_pk_get(sch, keys[i]), &v[i])) v[i] = NAN;
    const char *style = mg_pk_str(mg_pk_get(sch, "lr_decay_style")), *wstyle = mg_pk_str(mg_pk_get(sch, "wd_incr_style"));
    const char *known[] = {"constant", "linear", "cosine", "inverse-square-root", "WSD"};
    bool ok = false;
    for (int i = 0; i < 5 && style; i++) ok |= !strcmp(style, known[i]);
    if (!ok) {
        mg_error_set(err, MG_ERR_UNSUPPORTED, "the checkpoint's learning-rate decay style '%s' is not one mgraph has",
                     style ? style : "?");
        return NULL;
    }
    json_t *j = json_pack("{s:f, s:f, s:f, s:I, s:s, s:I}", "lr", v[0], "min_lr", v[1], "warmup_steps", v[2],
                          "decay_steps", (json_int_t)v[3], "style", style, "num_steps", (json_int_t)v[4]);
    if (j && wstyle && strcmp(wstyle, "constant")) {
        if (strcmp(wstyle, "linear") && strcmp(wstyle, "cosine")) {
            json_decref(j);
            mg_error_set(err, MG_ERR_UNSUPPORTED, "the checkpoint's weight-decay style '%s' is not one mgraph has", wstyle);
            return NULL;
        }
        json_object_set_new(j, "wd_incr_style", json_string(wstyle));
        json_object_set_new(j, "start_wd", json_real(v[5]));
        json_object_set_new(j, "end_wd", json_real(v[6]));
        json_object_set_new(j, "wd_incr_steps", json_integer((json_int_t)v[7]));
    }
    return j;
}

static double arg_num(const mg_pk *args, const char *name, double dflt) {
    double v;
    return mg_pk_num(ms_arg(args, name, NULL), &v) ? v : dflt;
}

static char *meta_text(ms_src *src, const mg_run_config *rc, const mg_gpt_config *m, int64_t vocab, const argv_buf *margs,
                       mg_error *err) {
    const mg_pk *a = src->args;
    int64_t gbs = 1, mbs = 1, consumed, valid = 0, seed = 1234;
    ms_arg_int(a, "global_batch_size", &gbs);
    ms_arg_int(a, "micro_batch_size", &mbs);
    if (!ms_arg_int(a, "consumed_train_samples", &consumed)) consumed = src->iteration * gbs;
    ms_arg_int(a, "consumed_valid_samples", &valid);
    ms_arg_int(a, "seed", &seed);
    /* the model's flags as mgraph-run's saves write them */
    mg_run_ckpt_model k = {rc, m, vocab};
    char *mt = mg_run_ckpt_meta(&k);
    json_t *meta = mt ? json_loads(mt, 0, NULL) : NULL;
    free(mt);
    if (!meta) {
        mg_error_set(err, MG_ERR_NOMEM, "out of memory");
        return NULL;
    }
    int64_t tp = 1, pp = 1, dp = 1;
    ms_arg_int(a, "tensor_model_parallel_size", &tp);
    ms_arg_int(a, "pipeline_model_parallel_size", &pp);
    ms_arg_int(a, "data_parallel_size", &dp);
    json_object_set_new(meta, "plan", json_pack("{s:I, s:I, s:I, s:b}", "tensor_model_parallel_size", (json_int_t)tp,
                                                "pipeline_model_parallel_size", (json_int_t)pp, "data_parallel_size",
                                                (json_int_t)dp, "use_distributed_optimizer",
                                                ms_arg_true(a, "use_distributed_optimizer")));
    json_object_set_new(meta, "iteration", json_integer(src->iteration));
    json_object_set_new(meta, "consumed_samples", json_integer(consumed));
    json_t *data = json_object_get(meta, "data");
    json_object_set_new(data, "consumed_train_samples", json_integer(consumed));
    json_object_set_new(data, "eval_batches_done", json_integer(gbs > 0 ? valid / gbs : 0));
    json_object_set_new(data, "global_batch_size", json_integer(gbs));
    json_object_set_new(data, "micro_batch_size", json_integer(mbs));
    json_object_set_new(meta, "rng", json_pack("{s:s, s:I}", "kind", "converted from Megatron-LM: its torch / CUDA RNG "
                                               "states have no mgraph counterpart; mgraph's streams under its seed",
                                               "seed", (json_int_t)seed));
    json_object_set_new(meta, "optimizer",
                        json_pack("{s:f, s:f, s:f, s:f, s:f}", "beta1", arg_num(a, "adam_beta1", 0.9), "beta2",
                                  arg_num(a, "adam_beta2", 0.999), "eps", arg_num(a, "adam_eps", 1e-8), "weight_decay",
                                  arg_num(a, "weight_decay", 0.01), "clip_grad", arg_num(a, "clip_grad", 1.0)));
    json_object_set_new(meta, "optimizer_state", json_boolean(src->has_moments));
    int rcode = MG_OK;
    if (src->has_moments) {
        int64_t step = src->adam_step >= 0 ? src->adam_step : src->iteration;
        if (step > src->iteration)
            rcode = mg_error_set(err, MG_ERR_IO, "the checkpoint's optimizer took %lld steps in %lld iterations",
                                 (long long)step, (long long)src->iteration);
        json_object_set_new(meta, "optimizer_start", json_integer(src->iteration - step));
        json_t *ls = rcode ? NULL : src->scheduler ? sched_json(src->scheduler, err) : NULL;
        if (!rcode && !ls && !src->scheduler)
            rcode = mg_error_set(err, MG_ERR_IO, "the checkpoint has optimizer state but no opt_param_scheduler");
        if (!rcode && !ls) rcode = err->code ? err->code : MG_ERR_NOMEM;
        if (ls) json_object_set_new(meta, "lr_schedule", ls);
    } else if (src->scheduler) {
        json_t *ls = sched_json(src->scheduler, err);
        if (ls) json_object_set_new(meta, "lr_schedule", ls);
    }
    json_t *argl = json_array();
    for (int i = 1; i < margs->argc; i++) json_array_append_new(argl, json_string(margs->argv[i]));
    json_object_set_new(meta, "args", argl);
    char from[400];
    snprintf(from, sizeof from, "Megatron-LM (%s)", src->what);
    json_object_set_new(meta, "converted_from", json_string(from));
    char *text = rcode ? NULL : json_dumps(meta, JSON_COMPACT);
    json_decref(meta);
    if (!text && !rcode) mg_error_set(err, MG_ERR_NOMEM, "out of memory");
    return text;
}

/* ---- the conversion ------------------------------------------------------------------------------ */
int cv_from_megatron(const cv_megatron_opts *o, mg_error *err) {
    mg_megatron_info info;
    int rc = mg_megatron_probe(o->from, &info, err);
    if (rc) return rc;
    if (info.format == MG_MEGATRON_NONE)
        return mg_error_set(err, MG_ERR_IO, "%s is not a Megatron-LM checkpoint (no latest_checkpointed_iteration.txt "
                            "naming an iteration directory of mp_rank_* directories or a metadata.json)", o->from);
    ms_src *src = NULL;
    rc = info.format == MG_MEGATRON_TORCH ? ms_open_torch(&info, &src, err) : ms_open_dist(&info, &src, err);
    if (rc) return rc;
    if (src->moments_unread && !o->no_load_optim) {
        rc = mg_error_set(err, MG_ERR_UNSUPPORTED, "%s: %s; or give --no-load-optim to convert the model, the iteration "
                          "and the schedule without it", o->from, src->moments_unread);
        src->close(src);
        return rc;
    }
    if (o->no_load_optim) src->has_moments = false; /* (Megatron's --no-load-optim: moments start afresh) */
    /* the model mgraph-run builds from the same flags */
    argv_buf *av = calloc(1, sizeof *av), *margs = calloc(1, sizeof *margs);
    mg_run_config *cfg = calloc(1, sizeof *cfg);
    mg_run_notes *notes = calloc(1, sizeof *notes);
    mg_gpt_config m;
    if (!av || !margs || !cfg || !notes) rc = mg_error_set(err, MG_ERR_NOMEM, "out of memory");
    if (!rc) rc = args_to_argv(src->args, av, margs, err);
    if (!rc) {
        mg_run_config_defaults(cfg);
        mg_run_config_parse(cfg, av->argc, av->argv, notes);
        mg_run_config_check(cfg, notes);
        if (notes->n_errors) {
            char *nl = strchr(notes->errors, '\n');
            if (nl) *nl = '\0';
            rc = mg_error_set(err, MG_ERR_UNSUPPORTED, "the checkpoint's args as mgraph-run flags: %s", notes->errors);
        }
    }
    if (!rc) rc = mg_run_config_model(cfg, &m, err);
    int64_t padded = 0, vocab = o->true_vocab_size;
    if (!rc && !ms_arg_int(src->args, "padded_vocab_size", &padded))
        rc = mg_error_set(err, MG_ERR_IO, "the checkpoint's args have no padded_vocab_size");
    if (!rc && !vocab) { /* the tokenizer the args name, if its files are here */
        mg_tokenizer_config tc = mg_run_tokenizer_config(cfg);
        mg_tokenizer *tok = NULL;
        mg_error te = {0};
        if (mg_tokenizer_open(&tc, &tok, &te))
            rc = mg_error_set(err, MG_ERR_INVALID, "the vocabulary's size (Megatron's args hold only the padded %lld): "
                              "the tokenizer the checkpoint names does not open here (%s); give --true-vocab-size N",
                              (long long)padded, te.msg);
        else vocab = mg_tokenizer_vocab_size(tok);
        mg_tokenizer_free(tok);
    }
    if (!rc && (vocab < 1 || vocab > padded))
        rc = mg_error_set(err, MG_ERR_INVALID, "the vocabulary (%lld) does not fit the checkpoint's padded %lld",
                          (long long)vocab, (long long)padded);
    m.vocab = padded;
    /* mgraph's parameters of that model */
    mg_graph *g = rc ? NULL : mg_graph_new();
    mg_gpt gm = {0};
    if (!rc && !g) rc = mg_error_set(err, MG_ERR_NOMEM, "out of memory");
    if (!rc) rc = mg_gpt2_params(g, &m, &gm, err);
    cparam *cp = NULL;
    int n = 0;
    if (!rc && !(cp = calloc((size_t)mg_graph_n_tensors(g) + 1, sizeof *cp))) rc = mg_error_set(err, MG_ERR_NOMEM, "out of memory");
    for (int i = 0; !rc && i < mg_graph_n_tensors(g); i++) {
        mg_tensor *t = mg_graph_tensor(g, i);
        if (t->role != MG_ROLE_PARAM) continue;
        if (t->ndim > 2) {
            rc = mg_error_set(err, MG_ERR_UNSUPPORTED, "mgraph's parameter %s has %d dimensions", t->name, t->ndim);
            break;
        }
        cp[n] = (cparam){.name = t->name, .ndim = t->ndim, .shape = {t->shape[0], t->ndim == 2 ? t->shape[1] : 0}};
        for (int w = 0; !rc && w < (src->has_moments ? 3 : 1); w++) rc = convert_param(src, &m, &cp[n], w, err);
        n++;
    }
    /* nothing of the checkpoint left behind (the last stage's copy of a tied output layer aside) */
    const char *left = rc ? NULL : src->unused(src, m.untie_embeddings ? NULL : "output_layer.weight");
    if (left)
        rc = mg_error_set(err, MG_ERR_UNSUPPORTED, "the checkpoint's parameter %s has no place in mgraph's model of its "
                          "args", left);
    char *meta = rc ? NULL : meta_text(src, cfg, &m, vocab, margs, err);
    if (!rc && !meta) rc = err->code ? err->code : MG_ERR_NOMEM;
    /* only now, everything read and checked: the output */
    mg_ckpt_piece *pc = rc ? NULL : calloc((size_t)(3 * n + 1), sizeof *pc);
    char (*names)[600] = rc ? NULL : calloc((size_t)(3 * n + 1), sizeof *names);
    int np = 0;
    if (!rc && (!pc || !names)) rc = mg_error_set(err, MG_ERR_NOMEM, "out of memory");
    for (int i = 0; !rc && i < n; i++)
        for (int w = 0; w < 3; w++) {
            if (!cp[i].v[w]) continue;
            snprintf(names[np], sizeof names[np], "%s%s", cp[i].name, w == 0 ? "" : w == 1 ? ".exp_avg" : ".exp_avg_sq");
            pc[np] = (mg_ckpt_piece){.name = names[np], .dtype = MG_F32, .ndim = cp[i].ndim, .data = cp[i].v[w]};
            for (int d = 0; d < cp[i].ndim; d++) pc[np].shape[d] = pc[np].block[d] = cp[i].shape[d];
            np++;
        }
    mg_ckpt_lock *lock = NULL;
    struct stat sb;
    bool existed = stat(o->save, &sb) == 0;
    if (!rc) rc = mg_ckpt_lock_take(o->save, &lock, err);
    if (!rc && mg_ckpt_lock_warning(lock)) fprintf(stderr, "mgraph-convert: warning: %s\n", mg_ckpt_lock_warning(lock));
    bool begun = !rc && !(rc = mg_ckpt_begin(o->save, src->iteration, err));
    if (!rc) rc = mg_ckpt_write_rank(o->save, src->iteration, 0, pc, np, NULL, 0, err);
    if (!rc) rc = mg_ckpt_finish(o->save, src->iteration, 1, meta, 0, err);
    if (rc && begun) mg_ckpt_abort(o->save, src->iteration);
    if (rc && lock && !existed) { /* a directory this call made: gone again, lock file and all */
        char lp[4200];
        snprintf(lp, sizeof lp, "%s/.mgraph-save.lock", o->save);
        unlink(lp);
        rmdir(o->save);
    }
    mg_ckpt_lock_release(lock);
    if (!rc)
        printf("mgraph-convert: %s -> %s (Megatron-LM %s; %s GPT, %d layers, vocab %lld padded to %lld; iteration %lld%s)\n",
               o->from, o->save, src->what, mg_gpt_is_gpt2(&m) ? "GPT-2" : "LLaMA-style", m.num_layers,
               (long long)vocab, (long long)padded, (long long)src->iteration,
               src->has_moments ? ", with Adam's moments" : ", model only");
    for (int i = 0; cp && i < n; i++)
        for (int w = 0; w < 3; w++) free(cp[i].v[w]);
    free(cp), free(pc), free(names), free(meta);
    mg_gpt_release(&gm);
    mg_graph_free(g);
    free(av), free(margs), free(cfg), free(notes);
    src->close(src);
    return rc;
}

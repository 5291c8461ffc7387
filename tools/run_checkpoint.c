/* mgraph-run's checkpoint metadata (tools/run_checkpoint.h): the GPT model's flags,
 * written into every save and checked on --load; the trainer (runtime/checkpoint.c)
 * does the rest. */
#include "run_checkpoint.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model_flags.h"

/* ---- run metadata ------------------------------------------------------------------------ */
static json_t *model_json(const mg_run_config *c, const mg_gpt_config *m, int64_t vocab_unpadded) {
    return mg_model_flags_json(m, vocab_unpadded, c->make_vocab_size_divisible_by, c->tokenizer_type);
}

/* The trainer's meta callback: the model's flags, what the data was, the dropout. */
char *mg_run_ckpt_meta(void *user) {
    const mg_run_ckpt_model *k = user;
    const mg_run_config *c = k->cfg;
    json_t *m = json_pack("{s:o, s:{s:s?, s:s?, s:s?}, s:{s:f, s:f}}", "model", model_json(c, k->model, k->vocab_unpadded),
                          "data", "text_file", c->text_file, "data_path", c->data_path, "split", c->split, "dropout",
                          "hidden", (double)k->model->hidden_dropout, "attention", (double)k->model->attention_dropout);
    char *text = m ? json_dumps(m, JSON_COMPACT) : NULL;
    json_decref(m);
    return text;
}

/* Model flags must match: the message names the flag. */
static int check_model(const char *dir, json_t *saved, const mg_run_config *c, const mg_gpt_config *m,
                       int64_t vocab_unpadded, mg_error *err) {
    json_t *now = model_json(c, m, vocab_unpadded);
    const struct { const char *key, *flag; } fl[] = {
        {"num_layers", "--num-layers"},
        {"hidden_size", "--hidden-size"},
        {"ffn_hidden_size", "--ffn-hidden-size"},
        {"num_attention_heads", "--num-attention-heads"},
        {"max_position_embeddings", "--max-position-embeddings"},
        {"vocab_size", "--tokenizer-type / --vocab-file (vocabulary size)"},
        {"padded_vocab_size", "--make-vocab-size-divisible-by (padded vocabulary, 128 x tp by default)"},
        {"tokenizer_type", "--tokenizer-type"},
        {"normalization", "--normalization"},
        {"position_embedding_type", "--position-embedding-type"},
        {"swiglu", "--swiglu"},
        {"num_query_groups", "--num-query-groups"},
        {"untie_embeddings_and_output_weights", "--untie-embeddings-and-output-weights"},
        {"disable_bias_linear", "--disable-bias-linear"},
        {"add_qkv_bias", "--add-qkv-bias"},
        {"qk_layernorm", "--qk-layernorm"},
        {"squared_relu", "--squared-relu"},
        {"gelu_exact", "--no-bias-gelu-fusion (the exact GELU)"},
        {"qk_l2_norm", "--qk-l2-norm"},
    };
    int rc = MG_OK;
    for (size_t i = 0; i < sizeof fl / sizeof *fl && !rc; i++) {
        json_t *a = json_object_get(saved, fl[i].key), *b = json_object_get(now, fl[i].key);
        if (!a && i >= 8) { /* saved before these flags existed (or converted): GPT-2's values */
            json_t *dflt = !strcmp(fl[i].key, "normalization")             ? json_string("LayerNorm")
                           : !strcmp(fl[i].key, "position_embedding_type") ? json_string("learned_absolute")
                           : !strcmp(fl[i].key, "num_query_groups")        ? json_incref(json_object_get(now, "num_attention_heads"))
                                                                           : json_false();
            bool same = json_equal(dflt, b);
            json_decref(dflt);
            if (!same)
                rc = mg_error_set(err, MG_ERR_INVALID, "%s does not match the checkpoint %s (a GPT-2 without it)",
                                  fl[i].flag, dir);
        } else if (!a) {
            rc = mg_error_set(err, MG_ERR_IO, "%s: the checkpoint's model flags lack %s", dir, fl[i].key);
        } else if (!json_equal(a, b)) {
            char *x = json_dumps(a, JSON_ENCODE_ANY), *y = json_dumps(b, JSON_ENCODE_ANY);
            rc = mg_error_set(err, MG_ERR_INVALID, "%s does not match the checkpoint %s: it was saved with %s, this run has %s",
                              fl[i].flag, dir, x ? x : "?", y ? y : "?");
            free(x);
            free(y);
        }
    }
    /* MoE flags (absent from dense checkpoints and those saved before MoE: 0 experts),
     * the sliding window (absent from those saved before it: none) */
    const struct { const char *key, *flag; bool absent_is_zero; } moe[] = {
        {"num_experts", "--num-experts", true},
        {"moe_ffn_hidden_size", "--moe-ffn-hidden-size", false}, /* (written only for MoE models) */
        {"moe_layer_freq", "--moe-layer-freq", false},
        {"window", "--window-size (the sliding window, in keys: L + 1)", true},
        {"window_attn_skip_freq", "--window-attn-skip-freq", true},
        {"kv_channels", "--kv-channels", true},
        {"mtp_num_layers", "--mtp-num-layers", true},
        {"moe_shared_expert_intermediate_size", "--moe-shared-expert-intermediate-size", false},
        {"moe_layers", "--moe-layer-freq (its list of MoE layers)", false},
        {"moe_router", "the router (--moe-router-score-function, --moe-router-num-groups, --moe-router-group-topk, "
                       "--moe-router-topk-scaling-factor, --moe-router-enable-expert-bias)", false},
        /* objects, absent where the model has none of it */
        {"rope_scaling", "the RoPE scaling (--use-rope-scaling, --position-embedding-type yarn, MLA's --rope-type, their "
                         "factors) or --rotary-interleaved", false},
        {"multi_latent_attention", "--multi-latent-attention or its sizes (--q-lora-rank, --kv-lora-rank, --qk-head-dim, "
                                   "--qk-pos-emb-head-dim, --v-head-dim)", false},
    };
    for (size_t i = 0; i < sizeof moe / sizeof *moe && !rc; i++) {
        json_t *a = json_object_get(saved, moe[i].key), *b = json_object_get(now, moe[i].key);
        json_t *zero = json_integer(0);
        if (!a && moe[i].absent_is_zero) a = zero;
        if (!b && moe[i].absent_is_zero) b = zero; /* (mtp_num_layers is written only when > 0) */
        if ((a || b) && !json_equal(a, b)) {
            char *x = a ? json_dumps(a, JSON_ENCODE_ANY) : NULL, *y = b ? json_dumps(b, JSON_ENCODE_ANY) : NULL;
            rc = mg_error_set(err, MG_ERR_INVALID, "%s does not match the checkpoint %s: it was saved with %s, this run has %s",
                              moe[i].flag, dir, x ? x : "none", y ? y : "none");
            free(x);
            free(y);
        }
        json_decref(zero);
    }
    /* Numeric model flags, compared as the floats the model holds (older checkpoints
     * lack them: the defaults); RoPE's only where the model uses rope. */
    const struct { const char *key, *flag; double dflt; bool rope; } num[] = {
        {"layernorm_epsilon", "--norm-epsilon", 1e-5, false},
        {"rotary_base", "--rotary-base", 10000.0, true},
        {"rotary_percent", "--rotary-percent", 1.0, true},
    };
    bool rope = m->pos_emb == MG_POS_ROPE;
    for (size_t i = 0; i < sizeof num / sizeof *num && !rc; i++) {
        if (num[i].rope && !rope) continue;
        json_t *a = json_object_get(saved, num[i].key);
        if (a && !json_is_number(a)) {
            rc = mg_error_set(err, MG_ERR_IO, "%s: the checkpoint's %s is not a number", dir, num[i].key);
            break;
        }
        float was = (float)(a ? json_number_value(a) : num[i].dflt);
        float is = (float)json_number_value(json_object_get(now, num[i].key));
        if (was != is)
            rc = mg_error_set(err, MG_ERR_INVALID, "%s does not match the checkpoint %s: it was saved with %g, this run has %g",
                              num[i].flag, dir, (double)was, (double)is);
    }
    json_decref(now);
    return rc;
}

int mg_run_ckpt_check(void *user, const char *meta, const char *dir, mg_error *err) {
    const mg_run_ckpt_model *k = user;
    json_error_t je;
    json_t *m = json_loads(meta, 0, &je);
    if (!m) return mg_error_set(err, MG_ERR_IO, "%s: metadata is not JSON", dir);
    int rc = check_model(dir, json_object_get(m, "model"), k->cfg, k->model, k->vocab_unpadded, err);
    json_decref(m);
    return rc;
}

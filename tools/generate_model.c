/* mgraph-generate's model (tools/generate_model.h). The checkpoint's "model" object (the
 * flags mgraph-run and mgraph-convert record, run_checkpoint.c's model_json) is turned
 * back into Megatron flag names and parsed by mgraph-run's own parser, so the model is
 * the one mgraph-run would build from those flags; mg_run_ckpt_check (mgraph-run's --load
 * check, run by the library's serial loader mg_trainer_load_params) then checks every
 * recorded flag against it, so a flag this translation missed is an error naming it,
 * never a silently different model. */
#include "generate_model.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model_flags.h"
#include "mgraph/checkpoint.h"
#include "mgraph/trainer.h"

typedef struct argv_out {
    char **argv;
    int argc, cap;
    char *buf;
    size_t used, size;
} argv_out;

static int push(argv_out *a, const char *s) {
    size_t n = strlen(s) + 1;
    if (a->argc + 1 >= a->cap || a->used + n > a->size) return -1;
    a->argv[a->argc++] = memcpy(a->buf + a->used, s, n);
    a->used += n;
    a->argv[a->argc] = NULL;
    return 0;
}

static int pushf(argv_out *a, const char *flag, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int pushf(argv_out *a, const char *flag, const char *fmt, ...) {
    char v[128];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(v, sizeof v, fmt, ap);
    va_end(ap);
    return push(a, flag) || push(a, v);
}

static bool jtrue(json_t *o, const char *k) { return json_is_true(json_object_get(o, k)); }

/* The model object as mgraph-run flags. */
static int model_flags(json_t *mm, const char *dir, argv_out *a, bool tokenizer_given, mg_error *err) {
    static const struct { const char *key, *flag; } ints[] = {
        {"num_layers", "--num-layers"},
        {"hidden_size", "--hidden-size"},
        {"ffn_hidden_size", "--ffn-hidden-size"},
        {"num_attention_heads", "--num-attention-heads"},
        {"max_position_embeddings", "--max-position-embeddings"},
        {"seq_length", "--seq-length"},
        {"make_vocab_size_divisible_by", "--make-vocab-size-divisible-by"},
    };
    int bad = 0;
    for (size_t i = 0; i < sizeof ints / sizeof *ints; i++) {
        json_t *v = json_object_get(mm, ints[i].key);
        if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > 100000000)
            return mg_error_set(err, MG_ERR_IO, "%s: the checkpoint's model flags have no valid %s", dir, ints[i].key);
        bad |= pushf(a, ints[i].flag, "%lld", (long long)json_integer_value(v));
    }
    const char *tt = json_string_value(json_object_get(mm, "tokenizer_type"));
    if (tt && !tokenizer_given) bad |= push(a, "--tokenizer-type") || push(a, tt);
    json_t *eps = json_object_get(mm, "layernorm_epsilon");
    if (json_is_number(eps)) bad |= pushf(a, "--norm-epsilon", "%.17g", json_number_value(eps));
    const char *norm = json_string_value(json_object_get(mm, "normalization"));
    if (norm) bad |= push(a, "--normalization") || push(a, norm);
    const char *pos = json_string_value(json_object_get(mm, "position_embedding_type"));
    if (pos) bad |= push(a, "--position-embedding-type") || push(a, pos);
    bool rope = pos && !strcmp(pos, "rope");
    json_t *heads = json_object_get(mm, "num_attention_heads"), *groups = json_object_get(mm, "num_query_groups");
    if (json_is_integer(groups) && !json_equal(groups, heads))
        bad |= push(a, "--group-query-attention") || pushf(a, "--num-query-groups", "%lld", (long long)json_integer_value(groups));
    static const struct { const char *key, *flag; } bools[] = {
        {"swiglu", "--swiglu"},
        {"untie_embeddings_and_output_weights", "--untie-embeddings-and-output-weights"},
        {"disable_bias_linear", "--disable-bias-linear"},
        {"add_qkv_bias", "--add-qkv-bias"},
        {"qk_layernorm", "--qk-layernorm"},
        {"squared_relu", "--squared-relu"},
        {"gelu_exact", "--no-bias-gelu-fusion"},
        {"qk_l2_norm", "--qk-l2-norm"},
    };
    for (size_t i = 0; i < sizeof bools / sizeof *bools; i++)
        if (jtrue(mm, bools[i].key)) bad |= push(a, bools[i].flag);
    json_t *rb = json_object_get(mm, "rotary_base"), *rp = json_object_get(mm, "rotary_percent");
    if (rope && json_is_number(rb)) bad |= pushf(a, "--rotary-base", "%.17g", json_number_value(rb));
    if (rope && json_is_number(rp)) bad |= pushf(a, "--rotary-percent", "%.17g", json_number_value(rp));
    json_t *w = json_object_get(mm, "window"), *wf = json_object_get(mm, "window_attn_skip_freq");
    if (json_is_integer(w) && json_integer_value(w) > 0)
        bad |= pushf(a, "--window-size", "%lld,0", (long long)json_integer_value(w) - 1);
    if (json_is_integer(wf) && json_integer_value(wf) > 0)
        bad |= pushf(a, "--window-attn-skip-freq", "%lld", (long long)json_integer_value(wf));
    json_t *kc = json_object_get(mm, "kv_channels");
    if (json_is_integer(kc) && json_integer_value(kc) > 0)
        bad |= pushf(a, "--kv-channels", "%lld", (long long)json_integer_value(kc));
    json_t *rs = json_object_get(mm, "rope_scaling");
    if (rs) {
        const char *kind = json_string_value(json_object_get(rs, "scaling"));
        if (jtrue(rs, "interleaved")) bad |= push(a, "--rotary-interleaved");
        if (kind && !strcmp(kind, "llama3")) {
            bad |= push(a, "--use-rope-scaling") ||
                   pushf(a, "--rope-scaling-factor", "%.17g", json_number_value(json_object_get(rs, "factor")));
        } else if (!kind || (strcmp(kind, "default") && strcmp(kind, "yarn"))) { /* (YaRN: read with the variants) */
            return mg_error_set(err, MG_ERR_UNSUPPORTED, "%s: RoPE scaling '%s' is not supported by mgraph-generate", dir,
                                kind ? kind : "?");
        }
    }
    if (bad) return mg_error_set(err, MG_ERR_IO, "%s: the checkpoint's model flags are too long", dir);
    return MG_OK;
}

static int first_line(const mg_run_notes *n, mg_error *err) {
    char msg[1024];
    snprintf(msg, sizeof msg, "%.1000s", n->errors);
    char *nl = strchr(msg, '\n');
    if (nl) *nl = '\0';
    return mg_error_set(err, MG_ERR_INVALID, "%s", msg);
}

int gen_model_open(const char *load, int tok_argc, char **tok_argv, gen_model *m, mg_error *err) {
    memset(m, 0, sizeof *m);
    /* the checkpoint itself: mg_ckpt_open validates the index and every file's header */
    mg_ckpt *ck = NULL;
    int rc = mg_ckpt_open(load, &ck, err);
    if (rc) return rc;
    json_t *meta = json_loads(mg_ckpt_meta(ck), 0, NULL), *mm = json_object_get(meta, "model");
    if (!json_is_object(mm)) rc = mg_error_set(err, MG_ERR_IO, "%s: the index has no model flags", mg_ckpt_dir(ck));
    char *argv_store[256];
    argv_out a = {argv_store, 0, 256, m->argv_buf, 0, sizeof m->argv_buf};
    bool tok_given = false;
    for (int i = 0; i < tok_argc; i++) tok_given |= !strcmp(tok_argv[i], "--tokenizer-type");
    if (!rc) rc = push(&a, "mgraph-generate") ? mg_error_set(err, MG_ERR_NOMEM, "flags too long") : MG_OK;
    if (!rc) rc = model_flags(mm, mg_ckpt_dir(ck), &a, tok_given, err);
    for (int i = 0; !rc && i < tok_argc; i++)
        if (push(&a, tok_argv[i])) rc = mg_error_set(err, MG_ERR_INVALID, "too many tokenizer flags");
    if (rc) {
        json_decref(meta);
        mg_ckpt_close(ck);
        return rc;
    }
    mg_run_notes *notes = calloc(1, sizeof *notes);
    if (!notes) rc = mg_error_set(err, MG_ERR_NOMEM, "out of memory");
    mg_run_config *c = &m->cfg;
    mg_run_config_defaults(c);
    if (!rc) mg_run_config_parse(c, a.argc, a.argv, notes);
    if (!rc && !notes->n_errors) mg_run_config_check(c, notes);
    if (!rc && notes->n_errors) rc = first_line(notes, err);
    free(notes);
    if (!rc) rc = mg_run_config_model(c, &m->model, err);
    /* the options beside the flags above (YaRN, multi-latent attention, multi-token
     * prediction, MoE) as mgraph-convert reads them, into the model the flags built */
    if (!rc) rc = mg_model_flags_read_variants(mm, mg_ckpt_dir(ck), &m->model, err);
    json_decref(meta);
    mg_ckpt_close(ck);
    mg_tokenizer_config tc = mg_run_tokenizer_config(c);
    if (!rc) rc = mg_tokenizer_open(&tc, &m->tok, err);
    if (!rc) {
        m->vocab = mg_tokenizer_vocab_size(m->tok);
        m->model.vocab = mg_vocab_padded(m->vocab, c->make_vocab_size_divisible_by, 1);
        m->model.hidden_dropout = m->model.attention_dropout = 0.0f;
        rc = mg_gpt_check(&m->model, err);
    }
    if (rc) {
        gen_model_close(m);
        return rc;
    }
    /* the weights: a graph of the parameters alone, filled from the checkpoint after
     * mgraph-run's --load check of every recorded model flag against this model */
    m->g = mg_graph_new();
    if (!m->g) rc = mg_error_set(err, MG_ERR_NOMEM, "out of memory");
    if (!rc) rc = mg_gpt2_params(m->g, &m->model, &m->params, err);
    if (!rc) rc = mg_memplan_build(m->g, true, &m->plan, err);
    if (!rc) rc = mg_storage_new(m->g, m->plan, &m->st, err);
    mg_run_ckpt_model km = {c, &m->model, m->vocab};
    mg_trainer_checkpoint k = {.load = load, .exit_on_missing = true, .no_load_optim = true,
                               .check = mg_run_ckpt_check, .user = &km};
    if (!rc) rc = mg_trainer_load_params(&k, m->g, m->st, &m->iteration, err);
    if (rc) gen_model_close(m);
    return rc;
}

void gen_model_close(gen_model *m) {
    mg_storage_free(m->st);
    mg_memplan_free(m->plan);
    mg_gpt_release(&m->params);
    mg_graph_free(m->g);
    mg_tokenizer_free(m->tok);
    m->st = NULL, m->plan = NULL, m->g = NULL, m->tok = NULL;
}

/* --use-checkpoint-args (tools/run_config.h): Megatron's load_args_from_checkpoint over
 * the model object mgraph's checkpoints record (tools/model_flags.c). Megatron's
 * _set_arg without force (the sizes) takes the checkpoint's value only for a flag the
 * command line did not give; with force (every other model switch) the checkpoint's
 * value wins. Keys mgraph records that Megatron's list has no counterpart for (the norm
 * epsilon, q/k norms, the exact GELU, the sliding window) are forced as well: --load
 * refuses any mismatch of them, so the checkpoint's value is the only one that loads.
 * What is not translated (RoPE scaling, multi-latent attention, the MoE router's
 * options, the MoE layer list) stays as given, and --load's check of every recorded
 * flag names any that differs: never a silently different model. */
#include "run_config.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "mgraph/checkpoint.h"

/* the values set, alive as long as the configuration (one translation per process) */
static char g_values[4096];
static size_t g_used;

typedef struct tr {
    mg_run_config *c;
    mg_run_notes *n;
    char *said;
    size_t cap, len;
    const char *dir;
} tr;

static void set(tr *t, const char *flag, bool force, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static void set(tr *t, const char *flag, bool force, const char *fmt, ...) {
    if (!force && mg_run_config_given(t->c, flag)) return; /* Megatron keeps a size given */
    char v[128];
    va_list ap;
    va_start(ap, fmt);
    int len = vsnprintf(v, sizeof v, fmt, ap);
    va_end(ap);
    if (len < 0 || (size_t)len >= sizeof v || g_used + (size_t)len + 1 > sizeof g_values) {
        mg_run_notes_error(t->n, "--use-checkpoint-args: %s: the checkpoint's value is too long", flag);
        return;
    }
    char *keep = memcpy(g_values + g_used, v, (size_t)len + 1);
    g_used += (size_t)len + 1;
    if (mg_run_config_set(t->c, flag, keep, t->n)) {
        mg_run_notes_error(t->n, "--use-checkpoint-args: the checkpoint %s holds %s '%s', which %s does not take", t->dir,
                           flag, keep, flag);
        return;
    }
    if (t->len < t->cap)
        t->len += (size_t)snprintf(t->said + t->len, t->cap - t->len, "%s %s\n", flag, keep);
}

static void set_int(tr *t, json_t *o, const char *key, const char *flag, bool force) {
    json_t *v = json_object_get(o, key);
    if (json_is_integer(v)) set(t, flag, force, "%lld", (long long)json_integer_value(v));
}

static void set_num(tr *t, json_t *o, const char *key, const char *flag) {
    json_t *v = json_object_get(o, key);
    if (json_is_number(v)) set(t, flag, true, "%.9g", json_number_value(v));
}

static void set_bool(tr *t, json_t *o, const char *key, const char *flag) {
    json_t *v = json_object_get(o, key);
    if (json_is_boolean(v)) set(t, flag, true, "%d", json_is_true(v));
}

static void translate(tr *t, json_t *mm, json_t *dropout) {
    /* _set_arg without force: the sizes */
    set_int(t, mm, "num_layers", "--num-layers", false);
    set_int(t, mm, "hidden_size", "--hidden-size", false);
    set_int(t, mm, "ffn_hidden_size", "--ffn-hidden-size", false);
    set_int(t, mm, "seq_length", "--seq-length", false);
    set_int(t, mm, "num_attention_heads", "--num-attention-heads", false);
    set_int(t, mm, "max_position_embeddings", "--max-position-embeddings", false);
    json_t *kc = json_object_get(mm, "kv_channels"); /* (0: hidden / heads) */
    if (json_is_integer(kc) && json_integer_value(kc) > 0) set_int(t, mm, "kv_channels", "--kv-channels", false);
    /* Megatron's padded_vocab_size: mgraph pads from the tokenizer's vocabulary by this */
    set_int(t, mm, "make_vocab_size_divisible_by", "--make-vocab-size-divisible-by", false);
    /* _set_arg(force=True) */
    json_t *heads = json_object_get(mm, "num_attention_heads"), *groups = json_object_get(mm, "num_query_groups");
    if (json_is_integer(groups)) {
        bool gqa = !json_equal(groups, heads);
        set(t, "--group-query-attention", true, "%d", gqa);
        if (gqa) set_int(t, mm, "num_query_groups", "--num-query-groups", true);
    }
    json_t *pos = json_object_get(mm, "position_embedding_type"), *norm = json_object_get(mm, "normalization");
    if (json_is_string(pos)) set(t, "--position-embedding-type", true, "%s", json_string_value(pos));
    if (json_is_string(norm)) set(t, "--normalization", true, "%s", json_string_value(norm));
    set_num(t, mm, "rotary_base", "--rotary-base");
    set_num(t, mm, "rotary_percent", "--rotary-percent");
    set_bool(t, mm, "disable_bias_linear", "--disable-bias-linear");
    set_bool(t, mm, "add_qkv_bias", "--add-qkv-bias");
    set_bool(t, mm, "squared_relu", "--squared-relu");
    set_bool(t, mm, "swiglu", "--swiglu");
    set_bool(t, mm, "untie_embeddings_and_output_weights", "--untie-embeddings-and-output-weights");
    set_num(t, dropout, "attention", "--attention-dropout");
    set_num(t, dropout, "hidden", "--hidden-dropout");
    json_t *ne = json_object_get(mm, "num_experts");
    set_int(t, mm, "num_experts", "--num-experts", true);
    if (json_is_integer(ne) && json_integer_value(ne) > 0) {
        set_int(t, mm, "moe_ffn_hidden_size", "--moe-ffn-hidden-size", true);
        json_t *lf = json_object_get(mm, "moe_layer_freq");
        if (json_is_integer(lf) && json_integer_value(lf) > 0) set_int(t, mm, "moe_layer_freq", "--moe-layer-freq", true);
        set_int(t, mm, "moe_router_topk", "--moe-router-topk", true);
        set_bool(t, mm, "moe_router_pre_softmax", "--moe-router-pre-softmax");
        set_int(t, mm, "moe_shared_expert_intermediate_size", "--moe-shared-expert-intermediate-size", true);
    }
    /* mgraph's own records, forced (see the top) */
    set_num(t, mm, "layernorm_epsilon", "--norm-epsilon");
    set_bool(t, mm, "qk_layernorm", "--qk-layernorm");
    set_bool(t, mm, "gelu_exact", "--no-bias-gelu-fusion");
    set_bool(t, mm, "qk_l2_norm", "--qk-l2-norm");
    json_t *w = json_object_get(mm, "window"), *wf = json_object_get(mm, "window_attn_skip_freq");
    if (json_is_integer(w) && json_integer_value(w) > 0) {
        set(t, "--window-size", true, "%lld,0", (long long)json_integer_value(w) - 1);
        if (json_is_integer(wf) && json_integer_value(wf) > 0)
            set(t, "--window-attn-skip-freq", true, "%lld", (long long)json_integer_value(wf));
    }
}

void mg_run_use_checkpoint_args(mg_run_config *c, mg_run_notes *n, char *said, size_t cap) {
    if (cap) said[0] = '\0';
    if (!c->use_checkpoint_args) return;
    if (!c->load) {
        mg_run_notes_error(n, "--use-checkpoint-args takes the model flags from the checkpoint under --load: give --load DIR");
        return;
    }
    char tracker[4200], index[4200];
    snprintf(tracker, sizeof tracker, "%s/latest_checkpointed_iteration.txt", c->load);
    snprintf(index, sizeof index, "%s/index.json", c->load);
    if (access(tracker, F_OK) != 0 && access(index, F_OK) != 0) {
        if (c->exit_on_missing_checkpoint) return; /* (--load's own error names it) */
        mg_run_notes_warn(n, "--use-checkpoint-args: no checkpoint in %s to provide the model flags: the command line's "
                             "are used", c->load);
        return;
    }
    mg_ckpt *ck = NULL;
    mg_error err = {0};
    if (mg_ckpt_open(c->load, &ck, &err)) {
        mg_run_notes_error(n, "--use-checkpoint-args: %s", err.msg);
        return;
    }
    json_t *meta = json_loads(mg_ckpt_meta(ck), 0, NULL), *mm = json_object_get(meta, "model");
    if (!json_is_object(mm)) {
        mg_run_notes_error(n, "--use-checkpoint-args: %s records no model flags", mg_ckpt_dir(ck));
    } else {
        tr t = {c, n, said, cap, 0, mg_ckpt_dir(ck)};
        translate(&t, mm, json_object_get(meta, "dropout"));
    }
    json_decref(meta);
    mg_ckpt_close(ck);
}

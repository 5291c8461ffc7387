/* fp8 recipes (mgraph/fp8.h): which products are fp8, and the delayed-scaling state. */
#include "mgraph/fp8.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

mg_fp8_options mg_fp8_defaults(void) {
    /* Megatron's arguments: --fp8-recipe delayed, --fp8-amax-history-len 1,
     * --fp8-amax-compute-algo most_recent, --fp8-margin 0 */
    return (mg_fp8_options){.format = MG_FP8_OFF, .recipe = MG_FP8_DELAYED, .amax_history_len = 1,
                            .amax_algo = MG_FP8_AMAX_MOST_RECENT, .margin = 0};
}

const char *mg_fp8_invalid(const mg_fp8_options *o) {
    if (o->format != MG_FP8_OFF && o->format != MG_FP8_E4M3 && o->format != MG_FP8_HYBRID) return "unknown fp8 format";
    if (o->recipe != MG_FP8_DELAYED && o->recipe != MG_FP8_TENSORWISE) return "unknown fp8 recipe";
    if (o->amax_history_len < 1 || o->amax_history_len > 1 << 20) return "the amax history length must be in 1..2^20";
    if (o->amax_algo != MG_FP8_AMAX_MOST_RECENT && o->amax_algo != MG_FP8_AMAX_MAX)
        return "the amax compute algorithm must be most_recent or max";
    if (o->margin < 0 || o->margin > 64) return "the margin must be in 0..64";
    return NULL;
}

mg_dtype mg_fp8_slot_format(const mg_fp8_options *o, int slot) {
    return o->format == MG_FP8_HYBRID && slot % MG_FP8_SLOTS == MG_FP8_SLOT_DY ? MG_F8E5M2 : MG_F8E4M3;
}

static float fmt_max(mg_dtype fmt) { return fmt == MG_F8E5M2 ? 57344.0f : 448.0f; }

int mg_fp8_mark(mg_graph *g, int *n_gemms, mg_error *err) {
    int n = 0, nodes = mg_graph_n_nodes(g);
    for (int i = 0; i < nodes; i++) {
        mg_node *nd = mg_graph_node(g, i);
        if (nd->op != MG_OP_MATMUL || nd->attrs.matmul.fp8_gemm) continue;
        const mg_tensor *w = nd->in[1];
        /* a linear layer: a trained 2-D weight read directly (not the word embedding or the
         * output layer, which Megatron does not run through Transformer Engine) */
        if (w->src || w->role != MG_ROLE_PARAM || !w->requires_grad || w->ndim != 2 || w->embedding_or_output) continue;
        if (n == INT32_MAX / MG_FP8_SLOTS - 1) return mg_error_set(err, MG_ERR_UNSUPPORTED, "fp8: too many products");
        nd->attrs.matmul.fp8_gemm = ++n;
        nd->attrs.matmul.fp8_role[0] = 1 + MG_FP8_SLOT_X;
        nd->attrs.matmul.fp8_role[1] = 1 + MG_FP8_SLOT_W;
    }
    *n_gemms = n;
    return MG_OK;
}

int mg_fp8_count(const mg_graph *g) {
    int n = 0;
    for (int i = 0; i < mg_graph_n_nodes(g); i++) {
        const mg_node *nd = mg_graph_node(g, i);
        if (nd->op == MG_OP_MATMUL && nd->attrs.matmul.fp8_gemm > n) n = nd->attrs.matmul.fp8_gemm;
    }
    return n;
}

int mg_fp8_state_init(mg_fp8_state *s, const mg_fp8_options *o, int n_gemms, mg_error *err) {
    memset(s, 0, sizeof *s);
    const char *bad = mg_fp8_invalid(o);
    if (bad) return mg_error_set(err, MG_ERR_INVALID, "fp8: %s", bad);
    s->o = *o;
    s->n_slots = n_gemms * MG_FP8_SLOTS;
    size_t n = s->n_slots > 0 ? (size_t)s->n_slots : 1, L = (size_t)o->amax_history_len;
    s->scale = malloc(n * sizeof *s->scale);
    s->history = calloc(n * L, sizeof *s->history);
    s->amax = calloc(n, sizeof *s->amax);
    if (!s->scale || !s->history || !s->amax) {
        mg_fp8_state_free(s);
        return mg_error_set(err, MG_ERR_NOMEM, "fp8: out of memory for %d scaling slots", s->n_slots);
    }
    for (size_t i = 0; i < n; i++) s->scale[i] = 1.0f; /* TE's initial scale */
    return MG_OK;
}

void mg_fp8_state_free(mg_fp8_state *s) {
    free(s->scale);
    free(s->history);
    free(s->amax);
    memset(s, 0, sizeof *s);
}

void mg_fp8_state_begin(mg_fp8_state *s) {
    if (s->n_slots) memset(s->amax, 0, (size_t)s->n_slots * sizeof *s->amax);
}

void mg_fp8_record_amax(mg_fp8_state *s, int slot, float v) {
    uint32_t u;
    v = fabsf(v); /* (a NaN's sign bit cleared too: every NaN orders above +inf) */
    memcpy(&u, &v, sizeof u);
    uint32_t cur = __atomic_load_n(&s->amax[slot], __ATOMIC_RELAXED);
    while (u > cur && !__atomic_compare_exchange_n(&s->amax[slot], &cur, u, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
    }
}

float mg_fp8_current_scale(float amax, mg_dtype fmt) {
    if (!(amax > 0) || !isfinite(amax)) return 1.0f;
    float sf = fmt_max(fmt) / amax;
    return isinf(sf) ? FLT_MAX : sf;
}

void mg_fp8_state_update(mg_fp8_state *s) {
    int L = s->o.amax_history_len;
    for (int i = 0; i < s->n_slots; i++) {
        float *h = s->history + (size_t)i * L, cur;
        memcpy(&cur, &s->amax[i], sizeof cur);
        h[0] = cur;
        /* TE's delayed scaling: the amax the scale follows, then the history rolls (the
         * current entry becomes the newest past one, the oldest leaves, entry 0 is free) */
        float amax = h[0];
        if (s->o.amax_algo == MG_FP8_AMAX_MAX)
            for (int k = 1; k < L; k++)
                if (!(h[k] <= amax)) amax = h[k];
        if (amax > 0 && isfinite(amax)) {
            float sf = fmt_max(mg_fp8_slot_format(&s->o, i)) / amax / ldexpf(1.0f, s->o.margin);
            s->scale[i] = isinf(sf) ? FLT_MAX : sf;
        }
        float first = h[0];
        for (int k = 0; k + 1 < L; k++) h[k] = h[k + 1];
        h[L - 1] = first;
        h[0] = 0.0f;
    }
    s->updates++;
}

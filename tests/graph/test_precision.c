/* Mixed precision (graph/precision.c, ops/convert.c, the op table's storage wrapper):
 *   convert_*   every rounding against an independent definition: f16 against the
 *               compiler's _Float16 conversion (IEEE round to nearest even) on 2^22
 *               spread floats and every f16 code; bf16 and the fp8 formats against the
 *               nearest representable value found by search (ties to the even code,
 *               fp8 saturating), every code decoded and re-encoded;
 *   wrapper     a node whose tensors are stored narrow computes its f32 kernel on the
 *               stored values and rounds its outputs: gelu, an in-place accumulate into
 *               a bf16 accumulator, a concat of mixed storage;
 *   rules       the bf16 step of a small GPT: model copies (bf16, the parameter's
 *               identity, read by every forward and backward node, written by a cast
 *               after AdamW), activations bf16, statistics, scalars and gradient terms
 *               f32, main_grad and moments as the options say, activations saved for
 *               backward at half the fp32 graph's bytes, persistent +2 bytes/parameter;
 *   step_bits   the bf16 step on StarPU equals the reference executor bit for bit
 *               (two steps, every persistent tensor), and its loss is within 1e-3 of the
 *               fp32 step's.
 */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mgraph/engine.h"
#include "mgraph/exec.h"
#include "mgraph/model.h"
#include "mgraph/precision.h"
#include "ops/convert.h"
#include "ops/gemm.h"
#include "ops/op.h"
#include "testkit.h"

/* ---- conversions -------------------------------------------------------------------------- */
static uint32_t bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}
static float from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* Floats across the whole range: every 2^8-th bit pattern (both signs), and the f16
 * boundaries' neighbourhoods. */
static void f16_case(float x, int *bad) {
    _Float16 h = (_Float16)x;
    uint16_t want;
    memcpy(&want, &h, sizeof want);
    uint16_t got = mg_f16_round(x);
    bool nan = isnan(x);
    if (nan ? (got & 0x7c00) != 0x7c00 || !(got & 0x3ff) : got != want) {
        if (++*bad <= 5) TK_CHECK(false, "f16(%a) = 0x%04x, _Float16 gives 0x%04x", (double)x, got, want);
    }
}

static void convert_f16(void) {
    int bad = 0;
    for (uint64_t u = 0; u < (1ull << 32); u += 1021) f16_case(from_bits((uint32_t)u), &bad);
    const float edges[] = {65504.0f, 65519.99f, 65520.0f, 65536.0f, 6.1035156e-05f, 5.9604645e-08f, 2.9802322e-08f,
                           2.9802326e-08f, 1.0f + 1.0f / 2048, 1.0f + 3.0f / 2048, INFINITY, FLT_MAX, FLT_MIN};
    for (size_t i = 0; i < sizeof edges / sizeof *edges; i++) {
        f16_case(edges[i], &bad);
        f16_case(-edges[i], &bad);
        f16_case(nextafterf(edges[i], 0), &bad);
        f16_case(nextafterf(edges[i], INFINITY), &bad);
    }
    for (uint32_t c = 0; c < 65536; c++) { /* every code decodes exactly and re-encodes to itself */
        float f = mg_f16_to_float((uint16_t)c);
        _Float16 h;
        uint16_t hc = (uint16_t)c;
        memcpy(&h, &hc, sizeof h);
        if ((c & 0x7c00) == 0x7c00 && (c & 0x3ff)) {
            if (!isnan(f) && ++bad <= 5) TK_CHECK(false, "f16 0x%04x is a NaN, decoded %g", c, (double)f);
            continue;
        }
        if ((bits(f) != bits((float)h) || mg_f16_round(f) != c) && ++bad <= 5)
            TK_CHECK(false, "f16 0x%04x decodes to %a (want %a), re-encodes to 0x%04x", c, (double)f, (double)(float)h,
                     mg_f16_round(f));
    }
    TK_CHECK(bad == 0, "%d f16 conversions wrong", bad);
    printf("convert_f16: %llu floats and 65536 codes as _Float16 converts them\n", (1ull << 32) / 251);
}

/* The nearest of the two bf16 neighbours of x, in double (past the largest finite value
 * the next one up is 2^128, so that overflow rounds as IEEE says); a tie goes to the even
 * code. */
static uint16_t bf16_reference(float x) {
    uint32_t u = bits(x);
    uint16_t lo = (uint16_t)(u >> 16), hi = (uint16_t)(lo + 1); /* truncation, and the next magnitude up */
    if ((u & 0xffffu) == 0) return lo;
    double dl = mg_bf16_to_float(lo);
    double dh = (hi & 0x7fff) == 0x7f80 ? copysign(ldexp(1.0, 128), x) : mg_bf16_to_float(hi);
    double el = fabs((double)x - dl), eh = fabs((double)x - dh);
    if (el != eh) return el < eh ? lo : hi;
    return (lo & 1) ? hi : lo;
}

static void convert_bf16(void) {
    int bad = 0;
    uint64_t n = 0;
    for (uint64_t u = 0; u < (1ull << 32); u += 253) {
        float x = from_bits((uint32_t)u);
        if (isnan(x) || isinf(x)) continue;
        n++;
        uint16_t got = mg_bf16_round(x), want = bf16_reference(x);
        if (got != want && ++bad <= 5) TK_CHECK(false, "bf16(%a) = 0x%04x, nearest 0x%04x", (double)x, got, want);
    }
    for (uint32_t c = 0; c < 65536; c++) {
        float f = mg_bf16_to_float((uint16_t)c);
        if (!isnan(f) && mg_bf16_round(f) != c && ++bad <= 5) TK_CHECK(false, "bf16 0x%04x does not re-encode", c);
    }
    TK_CHECK(isnan(mg_bf16_to_float(mg_bf16_round(NAN))), "NaN stays NaN");
    TK_CHECK(bad == 0, "%d bf16 conversions wrong", bad);
    printf("convert_bf16: %llu floats at the nearest bf16 (ties to even)\n", (unsigned long long)n);
}

/* The representable finite values of an fp8 format and their codes, searched for the
 * nearest (ties: the even code); beyond the largest, the largest (saturation). */
static uint8_t f8_reference(float x, mg_dtype fmt) {
    double best = INFINITY;
    int code = -1;
    for (int c = 0; c < 256; c++) {
        float v = mg_f8_to_float((uint8_t)c, fmt);
        if (!isfinite(v) || (c & 0x80) != (signbit(x) ? 0x80 : 0)) continue;
        double d = fabs((double)x - (double)v);
        if (d < best || (d == best && !(c & 1))) {
            best = d;
            code = c;
        }
    }
    return (uint8_t)code;
}

static void convert_fp8(void) {
    int bad = 0;
    const mg_dtype fmts[2] = {MG_F8E4M3, MG_F8E5M2};
    const float max[2] = {448.0f, 57344.0f};
    for (int f = 0; f < 2; f++) {
        mg_dtype fmt = fmts[f];
        TK_CHECK(mg_dtype_max(fmt) == max[f], "%s max %g", mg_dtype_name(fmt), (double)mg_dtype_max(fmt));
        int finite = 0;
        for (int c = 0; c < 256; c++) {
            float v = mg_f8_to_float((uint8_t)c, fmt);
            if (isnan(v)) continue;
            if (isinf(v)) {
                TK_CHECK(fmt == MG_F8E5M2 && (c & 0x7f) == 0x7c, "%s code 0x%02x is infinite", mg_dtype_name(fmt), c);
                continue;
            }
            finite++;
            if (mg_f8_round(v, fmt) != c && !(v == 0 && (c & 0x7f) == 0) && ++bad <= 5)
                TK_CHECK(false, "%s 0x%02x (%g) re-encodes to 0x%02x", mg_dtype_name(fmt), c, (double)v, mg_f8_round(v, fmt));
        }
        TK_CHECK(finite == (fmt == MG_F8E4M3 ? 254 : 248), "%s: %d finite codes", mg_dtype_name(fmt), finite);
        tk_rng r = {7 + (uint64_t)f};
        for (int i = 0; i < 200000; i++) {
            /* log-uniform over the range and past it, both signs */
            float x = powf(2.0f, tk_uniform(&r, -24.0f, fmt == MG_F8E4M3 ? 10.0f : 17.0f)) *
                      (tk_uniform(&r, 0, 1) < 0.5f ? -1.0f : 1.0f);
            if (i % 7 == 0) x = (float)((int)tk_uniform(&r, -600, 600)) * 0.25f; /* ties among small values */
            uint8_t got = mg_f8_round(x, fmt), want = f8_reference(x, fmt);
            if (got != want && !(x == 0) && ++bad <= 5)
                TK_CHECK(false, "%s(%a) = 0x%02x (%g), nearest 0x%02x (%g)", mg_dtype_name(fmt), (double)x, got,
                         (double)mg_f8_to_float(got, fmt), want, (double)mg_f8_to_float(want, fmt));
        }
        TK_CHECK(mg_f8_to_float(mg_f8_round(1e30f, fmt), fmt) == max[f], "%s saturates", mg_dtype_name(fmt));
        TK_CHECK(isnan(mg_f8_to_float(mg_f8_round(NAN, fmt), fmt)), "%s NaN", mg_dtype_name(fmt));
    }
    TK_CHECK(bad == 0, "%d fp8 conversions wrong", bad);
    printf("convert_fp8: e4m3 and e5m2, every code, 2 x 200000 values at the nearest (saturating)\n");
}

/* ---- the storage wrapper ------------------------------------------------------------------- */
static void wrapper(void) {
    mg_graph *g = mg_graph_new();
    mg_graph_set_mb(g, 0); /* the per-micro-batch part: it runs once per instance */
    int64_t sh[2] = {3, 50};
    mg_tensor *x = mg_input(g, "x", MG_F32, 2, sh), *acc = mg_state(g, "acc", MG_F32, 2, sh, (mg_init){MG_INIT_ZEROS, 0});
    mg_tensor *y = mg_gelu(g, x);
    mg_node *an = mg_node_new(g, MG_OP_ACCUMULATE, NULL, 2, (mg_tensor *[]){acc, y}, "acc_new");
    an->out[0]->updates = acc;
    mg_tensor *parts[2] = {x, y}, *cat = mg_concat(g, 2, parts, 0);
    x->storage = MG_BF16;
    acc->storage = MG_BF16;
    y->storage = MG_BF16;
    cat->storage = MG_F32;
    mg_precision_complete(g); /* the accumulate's output is its accumulator's storage */
    TK_CHECK(mg_tensor_storage(an->out[0]) == MG_BF16, "in-place output stored as its target");
    TK_CHECK(mg_tensor_storage(cat) == MG_BF16, "a concat of bf16 parts is bf16");
    y->storage = MG_F16; /* mixed parts: f32 */
    mg_precision_complete(g);
    TK_CHECK(mg_tensor_storage(cat) == MG_F32, "a concat of bf16 and f16 parts is f32");
    y->storage = MG_BF16;
    mg_precision_complete(g);
    tk_run r = {.g = g, .info = {.seed = 1234, .training = true, .n_micro = 2}};
    mg_error err = {0};
    mg_storage_options so = {.n_micro = 2};
    if (mg_memplan_build(g, false, &r.plan, &err) || mg_storage_new_ex(g, r.plan, &so, &r.st, &err) ||
        mg_storage_init(r.st, 1234, &err)) {
        TK_CHECK(false, "setup: %s", err.msg);
        return;
    }
    uint16_t *xs = mg_storage_data(r.st, x);
    tk_rng rng = {3};
    float xv[150];
    for (int i = 0; i < 150; i++) {
        xs[i] = mg_bf16_round(tk_uniform(&rng, -4, 4));
        xv[i] = mg_bf16_to_float(xs[i]);
    }
    /* two instances of the step: the accumulator takes y, then adds it in place */
    if (tk_exec(&r)) return;
    /* the definition: the f32 kernel on the stored values, its output rounded */
    mg_graph *h = mg_graph_new();
    mg_tensor *hx = mg_input(h, "x", MG_F32, 2, sh), *hy = mg_gelu(h, hx);
    tk_run q;
    if (tk_prepare(&q, h)) return;
    memcpy(tk_f32(&q, hx), xv, sizeof xv);
    if (tk_exec(&q)) return;
    const float *yf = tk_f32(&q, hy);
    const uint16_t *ys = mg_storage_data(r.st, y), *as2 = mg_storage_data(r.st, acc);
    int bad = 0;
    for (int i = 0; i < 150; i++) {
        uint16_t want_y = mg_bf16_round(yf[i]), want_a = mg_bf16_round(2.0f * mg_bf16_to_float(want_y));
        bad += ys[i] != want_y || as2[i] != want_a;
    }
    TK_CHECK(bad == 0, "%d of 150 elements differ from round(gelu(x)) / round(y + y)", bad);
    const uint16_t *cs = mg_storage_data(r.st, cat);
    TK_CHECK(!memcmp(cs, xs, 150 * 2) && !memcmp(cs + 150, ys, 150 * 2), "bf16 concat moves the stored bytes");
    tk_release(&q);
    tk_release(&r);
    mg_graph_free(h);
    mg_graph_free(g);
    printf("wrapper: gelu, an in-place bf16 accumulate and a bf16 concat as the element-wise definition\n");
}

/* ---- the rules on a GPT step ------------------------------------------------------------------ */
static mg_step_config small(mg_dtype prec) {
    mg_step_config c = tk_small_gpt(2, 64, 4, 32, 256, 2, 2);
    c.model.hidden_dropout = 0.1f;
    c.model.attention_dropout = 0.1f;
    c.optim.lr = (mg_lr_schedule){.lr = 3e-3f, .min_lr = 3e-4f, .decay_steps = 10, .style = MG_LR_COSINE};
    c.precision = mg_precision_defaults();
    c.precision.params = prec;
    return c;
}

static const mg_node *adamw_of(mg_graph *g, const mg_tensor *p) {
    for (int i = 0; i < mg_graph_n_nodes(g); i++) {
        const mg_node *n = mg_graph_node(g, i);
        if (n->op == MG_OP_ADAMW && n->in[0] == p) return n;
    }
    return NULL;
}

static void rules(void) {
    mg_step s32, s16;
    mg_error err = {0};
    mg_step_config c32 = small(MG_F32), c16 = small(MG_BF16);
    c16.precision.exp_avg_sq = MG_BF16;
    if (mg_step_build(&c32, &s32, &err) || mg_step_build(&c16, &s16, &err)) {
        TK_CHECK(false, "build: %s", err.msg);
        return;
    }
    mg_graph *g = s16.g;
    int params = 0, copies = 0;
    int64_t numel = 0;
    for (int i = 0; i < mg_graph_n_tensors(g); i++) {
        mg_tensor *t = mg_graph_tensor(g, i);
        if (t->role != MG_ROLE_PARAM || t->src) continue;
        if (t->model_copy) {
            copies++;
            char base[256];
            mg_tensor *p = mg_graph_find(g, mg_param_name(t, base, sizeof base));
            TK_CHECK(p && !p->model_copy && p->logical.key == t->logical.key && t->storage == MG_BF16,
                     "%s: a bf16 copy with its parameter's identity", t->name);
            TK_CHECK(!t->requires_grad, "%s has no gradient of its own", t->name);
            continue;
        }
        params++;
        numel += mg_numel(t);
        TK_CHECK(mg_tensor_storage(t) == MG_F32, "main parameter %s is f32", t->name);
        const mg_node *a = adamw_of(g, t);
        TK_CHECK(a && mg_tensor_storage(a->in[1]) == MG_F32 && mg_tensor_storage(a->in[2]) == MG_F32 &&
                     mg_tensor_storage(a->in[3]) == MG_BF16,
                 "%s: f32 main_grad and exp_avg, bf16 exp_avg_sq", t->name);
        /* the update: a cast of AdamW's output into the copy */
        bool cast = false;
        for (int k = 0; a && k < mg_graph_n_nodes(g); k++) {
            const mg_node *n = mg_graph_node(g, k);
            cast |= n->op == MG_OP_CAST && n->in[0] == a->out[0] && n->out[0]->updates &&
                    n->out[0]->updates->model_copy && mg_tensor_storage(n->out[0]) == MG_BF16;
        }
        TK_CHECK(cast, "%s: no cast into its model copy after AdamW", t->name);
    }
    TK_CHECK(params > 0 && copies == params, "%d parameters, %d copies", params, copies);
    int low = 0, stats = 0, terms = 0;
    for (int i = 0; i < mg_graph_n_nodes(g); i++) {
        const mg_node *n = mg_graph_node(g, i);
        for (int j = 0; j < n->n_in; j++) /* no forward or backward node reads a main parameter */
            TK_CHECK(!(n->mb >= 0 && n->in[j]->role == MG_ROLE_PARAM && !n->in[j]->src && !n->in[j]->model_copy &&
                       n->in[j]->requires_grad),
                     "%s node %d reads main parameter %s", mg_op_name(n->op), n->id, n->in[j]->name);
        if (n->mb < 0) {
            for (int j = 0; j < n->n_out; j++)
                TK_CHECK(n->op == MG_OP_CAST || mg_tensor_storage(n->out[j]) == MG_F32 || n->out[j]->dtype != MG_F32 ||
                             (n->out[j]->updates && n->out[j]->updates->storage == MG_BF16),
                         "once-per-step %s stored %s", n->out[j]->name, mg_dtype_name(mg_tensor_storage(n->out[j])));
            continue;
        }
        const mg_op_def *d = mg_op_def_get(n->op);
        for (int j = 0; j < n->n_out; j++) {
            const mg_tensor *t = n->out[j];
            if (t->dtype != MG_F32) continue;
            if (d->f32_out >> j & 1u) {
                stats++;
                TK_CHECK(mg_tensor_storage(t) == MG_F32, "statistic %s stored narrow", t->name);
            }
            if (mg_numel(t) == 1) TK_CHECK(mg_tensor_storage(t) == MG_F32, "scalar %s stored narrow", t->name);
            low += mg_tensor_storage(t) == MG_BF16;
        }
        /* a weight gradient (x^T dY into a weight's shape) is an f32 term */
        if (n->op == MG_OP_MATMUL && n->phase == MG_PHASE_BACKWARD) {
            bool wgrad = false;
            for (int k = 0; k < mg_graph_n_nodes(g) && !wgrad; k++) {
                const mg_node *m = mg_graph_node(g, k);
                wgrad = m->op == MG_OP_ACCUMULATE && m->in[1] == n->out[0];
            }
            if (wgrad) {
                terms++;
                TK_CHECK(mg_tensor_storage(n->out[0]) == MG_F32, "weight gradient %s stored narrow", n->out[0]->name);
            }
        }
        if (n->op == MG_OP_MATMUL && n->phase == MG_PHASE_FORWARD)
            TK_CHECK(mg_tensor_storage(n->out[0]) == MG_BF16, "forward product %s not bf16", n->out[0]->name);
    }
    TK_CHECK(low > 50 && stats > 0 && terms > 0, "%d bf16 activations, %d statistics, %d weight-gradient terms", low, stats,
             terms);
    mg_memplan *p32 = NULL, *p16 = NULL;
    if (mg_memplan_build(s32.g, true, &p32, &err) || mg_memplan_build(s16.g, true, &p16, &err)) {
        TK_CHECK(false, "memplan: %s", err.msg);
    } else {
        double saved = (double)p16->saved_bytes / (double)p32->saved_bytes;
        double per_param = (double)((int64_t)p16->persistent_bytes - (int64_t)p32->persistent_bytes) / (double)numel;
        TK_CHECK(saved <= 0.55, "activations saved for backward: bf16 %.3f x fp32's", saved);
        /* a bf16 copy (+2) and a bf16 second moment (-2) per parameter */
        TK_CHECK(fabs(per_param) < 0.01, "persistent bytes per parameter changed by %.3f", per_param);
        printf("rules: %d parameters with bf16 copies, %d bf16 activations, %d statistics and %d weight-gradient terms "
               "f32; saved activations %.3f x fp32's; persistent %+.3f B/param\n",
               params, low, stats, terms, saved, per_param);
    }
    mg_memplan_free(p32);
    mg_memplan_free(p16);
    mg_step_release(&s32);
    mg_step_release(&s16);
}

/* ---- one graph, two executors -------------------------------------------------------------- */
typedef struct side {
    mg_memplan *plan;
    mg_storage *st;
    mg_engine *eng;
} side;

static int side_new(side *sd, mg_step *s, bool engine) {
    memset(sd, 0, sizeof *sd);
    mg_error err = {0};
    mg_storage_options so = {.n_micro = s->n_micro, .n_slots = 2};
    if (mg_memplan_build(s->g, true, &sd->plan, &err) || mg_storage_new_ex(s->g, sd->plan, &so, &sd->st, &err) ||
        mg_storage_init(sd->st, 1234, &err)) {
        TK_CHECK(false, "setup: %s", err.msg);
        return -1;
    }
    tk_rng rng = {42};
    for (int k = 0; k < s->n_micro; k++) {
        int32_t *tok = mg_storage_data_mb(sd->st, s->tokens, k), *lab = mg_storage_data_mb(sd->st, s->targets, k);
        for (int64_t i = 0; i < mg_numel(s->tokens); i++) {
            tok[i] = (int32_t)tk_uniform(&rng, 0, 256) & 255;
            lab[i] = (tok[i] * 7 + 3) & 255; /* learnable */
        }
    }
    int32_t *pos = mg_storage_data(sd->st, s->positions);
    for (int t = 0; t < 32; t++) pos[t] = t;
    mg_engine_options eo = {.use_priorities = true};
    if (engine && mg_engine_new(s->g, sd->st, &eo, &sd->eng, &err)) {
        TK_CHECK(false, "engine: %s", err.msg);
        return -1;
    }
    return 0;
}

static void side_free(side *sd) {
    mg_engine_free(sd->eng);
    mg_storage_free(sd->st);
    mg_memplan_free(sd->plan);
}

static int side_run(side *sd, mg_step *s, int64_t it) {
    mg_error err = {0};
    mg_exec_info info = {.seed = 1234, .iteration = it, .training = true, .n_micro = s->n_micro};
    int rc = sd->eng ? mg_engine_run(sd->eng, &info, &err) : mg_exec_reference(s->g, sd->st, &info, &err);
    TK_CHECK(rc == MG_OK, "step %lld: %s", (long long)it, err.msg);
    return rc;
}

static void step_bits(void) {
    mg_error err = {0};
    if (mg_gemm_set_precision(MG_GEMM_BF16, true, &err)) {
        TK_CHECK(false, "bf16 GEMMs: %s", err.msg);
        return;
    }
    mg_step s16, s32;
    mg_step_config c16 = small(MG_BF16), c32 = small(MG_F32);
    if (mg_step_build(&c16, &s16, &err) || mg_step_build(&c32, &s32, &err)) {
        TK_CHECK(false, "build: %s", err.msg);
        return;
    }
    side ref, eng, f32;
    if (side_new(&ref, &s16, false) || side_new(&eng, &s16, true) || side_new(&f32, &s32, false)) return;
    float l16[2] = {0}, l32[2] = {0};
    for (int it = 0; it < 2; it++) {
        if (side_run(&ref, &s16, it) || side_run(&eng, &s16, it) || side_run(&f32, &s32, it)) return;
        l16[it] = *(float *)mg_storage_data(ref.st, s16.loss);
        l32[it] = *(float *)mg_storage_data(f32.st, s32.loss);
    }
    int n = 0, diff = 0;
    for (int i = 0; i < mg_graph_n_tensors(s16.g); i++) {
        const mg_tensor *t = mg_graph_tensor(s16.g, i);
        if (!ref.plan->buffer_persistent[ref.plan->buffer_of[i]]) continue;
        n++;
        if (memcmp(mg_storage_data(ref.st, t), mg_storage_data(eng.st, t), mg_tensor_bytes(t)) && ++diff <= 5)
            TK_CHECK(false, "%s differs between StarPU and the reference executor", t->name);
    }
    TK_CHECK(diff == 0, "%d of %d persistent tensors differ", diff, n);
    /* the copies hold the rounded main parameters */
    int stale = 0;
    for (int i = 0; i < mg_graph_n_tensors(s16.g); i++) {
        const mg_tensor *t = mg_graph_tensor(s16.g, i);
        if (!t->model_copy) continue;
        char base[256];
        const mg_tensor *p = mg_graph_find(s16.g, mg_param_name(t, base, sizeof base));
        const uint16_t *cb = mg_storage_data(ref.st, t);
        const float *pv = mg_storage_data(ref.st, p);
        for (int64_t e = 0; e < mg_numel(t); e++) stale += cb[e] != mg_bf16_round(pv[e]);
    }
    TK_CHECK(stale == 0, "%d model-copy elements are not their main parameter rounded", stale);
    for (int it = 0; it < 2; it++)
        TK_CHECK(fabsf(l16[it] - l32[it]) < 1e-3f * fabsf(l32[it]), "step %d: bf16 loss %.6f, fp32 %.6f", it, l16[it],
                 l32[it]);
    printf("step_bits: %d persistent tensors equal on StarPU and the reference; losses %.6f %.6f (fp32 %.6f %.6f)\n", n,
           l16[0], l16[1], l32[0], l32[1]);
    side_free(&ref);
    side_free(&eng);
    side_free(&f32);
    mg_step_release(&s16);
    mg_step_release(&s32);
    mg_gemm_set_precision(MG_GEMM_FP32, false, &err);
}

/* ---- fp16's loss scaling ------------------------------------------------------------------- */
/* Megatron's DynamicGradScaler, step by step (megatron/core/optimizer/grad_scaler.py). */
static void loss_scaler(void) {
    mg_loss_scaler s = mg_loss_scaler_dynamic(1024, 1, 3, 1);
    TK_CHECK(!mg_loss_scaler_invalid(&s), "valid settings refused");
    mg_loss_scaler_update(&s, true);
    TK_CHECK(s.scale == 512, "hysteresis 1: an overflow halves the scale (%g)", (double)s.scale);
    mg_loss_scaler_update(&s, false);
    mg_loss_scaler_update(&s, false);
    TK_CHECK(s.scale == 512, "two good steps of a window of 3 keep it (%g)", (double)s.scale);
    mg_loss_scaler_update(&s, false);
    TK_CHECK(s.scale == 1024, "the third doubles it (%g)", (double)s.scale);
    mg_loss_scaler_update(&s, false);
    mg_loss_scaler_update(&s, true); /* an overflow restarts the window */
    mg_loss_scaler_update(&s, false);
    mg_loss_scaler_update(&s, false);
    TK_CHECK(s.scale == 512, "an overflow restarts the growth window (%g)", (double)s.scale);
    s = mg_loss_scaler_dynamic(1024, 1, 3, 2); /* Megatron's default hysteresis */
    mg_loss_scaler_update(&s, true);
    TK_CHECK(s.scale == 1024, "hysteresis 2: the first overflow keeps the scale (%g)", (double)s.scale);
    mg_loss_scaler_update(&s, false);
    mg_loss_scaler_update(&s, true);
    TK_CHECK(s.scale == 512, "the second halves it (%g)", (double)s.scale);
    mg_loss_scaler_update(&s, true);
    TK_CHECK(s.scale == 256, "and every later one until the scale grows again (%g)", (double)s.scale);
    for (int i = 0; i < 3; i++) mg_loss_scaler_update(&s, false);
    mg_loss_scaler_update(&s, true);
    TK_CHECK(s.scale == 512, "growth restores the hysteresis (%g)", (double)s.scale);
    s = mg_loss_scaler_dynamic(4, 2, 1000, 1);
    for (int i = 0; i < 3; i++) mg_loss_scaler_update(&s, true);
    TK_CHECK(s.scale == 2, "the scale stops at the minimum (%g)", (double)s.scale);
    s = mg_loss_scaler_constant(128);
    mg_loss_scaler_update(&s, true);
    mg_loss_scaler_update(&s, false);
    TK_CHECK(s.scale == 128, "a constant scale stays (%g)", (double)s.scale);
    mg_loss_scaler bad = mg_loss_scaler_dynamic(1024, 2048, 1, 1), bad2 = mg_loss_scaler_dynamic(1024, 1, 0, 1);
    TK_CHECK(mg_loss_scaler_invalid(&bad) && mg_loss_scaler_invalid(&bad2), "bad settings accepted");
    printf("loss_scaler: back-off, hysteresis, growth window, floor and constant scale as Megatron's\n");
}

/* Main parameters, Adam's moments and the model copies of two runs, byte for byte. */
static bool same_state(const mg_step *s, side *a, side *b, const char *what) {
    int diff = 0;
    for (int i = 0; i < mg_graph_n_nodes(s->g); i++) {
        const mg_node *n = mg_graph_node(s->g, i);
        for (int j = 0; j < 4; j++) {
            const mg_tensor *t = j == 3 ? (n->op == MG_OP_CAST && n->out[0]->updates ? n->out[0]->updates : NULL)
                                        : n->op == MG_OP_ADAMW ? n->in[j == 0 ? 0 : j + 1] : NULL;
            if (t && memcmp(mg_storage_data(a->st, t), mg_storage_data(b->st, t), mg_tensor_bytes(t)) && ++diff <= 3)
                TK_CHECK(false, "%s: %s differs", what, t->name);
        }
    }
    return diff == 0;
}

static float run_scaled(side *sd, mg_step *s, int64_t it, int64_t skipped, float scale) {
    *(float *)mg_storage_data(sd->st, s->grad_scale) = scale;
    mg_error err = {0};
    mg_exec_info info = {.seed = 1234, .iteration = it, .skipped = skipped, .training = true, .n_micro = s->n_micro};
    TK_CHECK(mg_exec_reference(s->g, sd->st, &info, &err) == MG_OK, "step %lld: %s", (long long)it, err.msg);
    return *(float *)mg_storage_data(sd->st, s->opt.grad_norm);
}

/* The fp16 step: a loss scale that overflows the fp16 gradients skips the update (every
 * parameter, moment and model copy as before, the norm not finite); scales that do not
 * give the same unscaled norm (powers of two are exact in fp16 but for underflow), near
 * fp32's; an iteration after a skipped one steps as the skipped one would have
 * (learning rate and Adam's step count the updates). */
static void fp16_skip(void) {
    mg_error err = {0};
    mg_step s16, s32;
    mg_step_config c16 = small(MG_F16), c32 = small(MG_F32);
    c16.model.hidden_dropout = c16.model.attention_dropout = 0; /* (iterations then differ only by the schedule) */
    c32.model.hidden_dropout = c32.model.attention_dropout = 0;
    if (mg_step_build(&c16, &s16, &err) || mg_step_build(&c32, &s32, &err)) {
        TK_CHECK(false, "build: %s", err.msg);
        return;
    }
    TK_CHECK(s16.grad_scale && !s32.grad_scale, "grad_scale input with fp16 only");
    int copies = 0;
    for (int i = 0; i < mg_graph_n_tensors(s16.g); i++) copies += mg_graph_tensor(s16.g, i)->model_copy &&
                                                              mg_tensor_storage(mg_graph_tensor(s16.g, i)) == MG_F16;
    TK_CHECK(copies > 0, "no fp16 model copies");
    side a, b, c, f32;
    if (side_new(&a, &s16, false) || side_new(&b, &s16, false) || side_new(&c, &s16, false) ||
        side_new(&f32, &s32, false))
        return;
    /* a: overflow at iteration 0 (skipped), then iteration 1 with one skip behind it;
     * b: iteration 0 at a scale that fits: the same state as a's after its iteration 1 */
    float inf_norm = run_scaled(&a, &s16, 0, 0, 1.0e30f);
    TK_CHECK(!isfinite(inf_norm), "scale 1e30: gradient norm %g, want an overflow", (double)inf_norm);
    TK_CHECK(same_state(&s16, &a, &c, "after a skipped step"), "a skipped step changed the state");
    float n1 = run_scaled(&a, &s16, 1, 1, 1024.0f), n0 = run_scaled(&b, &s16, 0, 0, 1024.0f);
    TK_CHECK(n0 == n1 && same_state(&s16, &a, &b, "iteration 1 after a skip vs iteration 0"),
             "the step after a skipped one is not the first update (norms %g %g)", (double)n1, (double)n0);
    float n2 = run_scaled(&c, &s16, 0, 0, 2048.0f);
    mg_exec_info info = {.seed = 1234, .iteration = 0, .training = true, .n_micro = s32.n_micro};
    TK_CHECK(mg_exec_reference(s32.g, f32.st, &info, &err) == MG_OK, "fp32 step: %s", err.msg);
    float n32 = *(float *)mg_storage_data(f32.st, s32.opt.grad_norm);
    TK_CHECK(fabsf(n2 - n0) <= 1e-4f * n0, "unscaled norms at scales 1024 and 2048: %g %g", (double)n0, (double)n2);
    TK_CHECK(fabsf(n0 - n32) <= 2e-2f * n32, "fp16 norm %g, fp32 %g", (double)n0, (double)n32);
    printf("fp16_skip: scale 1e30 overflows (norm %g) and changes nothing; unscaled norm %.6f at 1024, %.6f at 2048, "
           "fp32 %.6f; the update after a skip is the first\n",
           (double)inf_norm, (double)n0, (double)n2, (double)n32);
    side_free(&a);
    side_free(&b);
    side_free(&c);
    side_free(&f32);
    mg_step_release(&s16);
    mg_step_release(&s32);
}

/* ---- fp8 (mgraph/fp8.h) ---------------------------------------------------------------------- */
/* The marks on a GPT step: 4 linear layers a block (QKV, projection, fc1, fc2), each with
 * its forward (X, W), dgrad (dY, W) and wgrad (dY, X) product; the output layer (tied to
 * the word embedding) is not fp8, nor attention (its own op). Then 3 steps on StarPU and on the reference
 * executor, each with its own recipe state: the same bits and the same scales. */
static void fp8_step(void) {
    mg_error err = {0};
    if (mg_gemm_set_precision(MG_GEMM_BF16, true, &err)) {
        TK_CHECK(false, "bf16 GEMMs: %s", err.msg);
        return;
    }
    mg_step s8, s16;
    mg_step_config c8 = small(MG_BF16), c16 = small(MG_BF16);
    c8.fp8 = mg_fp8_defaults();
    c8.fp8.format = MG_FP8_HYBRID;
    c8.fp8.amax_history_len = 2;
    c8.fp8.amax_algo = MG_FP8_AMAX_MAX;
    if (mg_step_build(&c8, &s8, &err) || mg_step_build(&c16, &s16, &err)) {
        TK_CHECK(false, "build: %s", err.msg);
        return;
    }
    int gemms = 0;
    for (int i = 0; i < mg_graph_n_nodes(s8.g); i++) {
        const mg_node *n = mg_graph_node(s8.g, i);
        if (n->op == MG_OP_MATMUL && n->attrs.matmul.fp8_gemm > gemms) gemms = n->attrs.matmul.fp8_gemm;
    }
    TK_CHECK(gemms == 4 * c8.model.num_layers, "%d fp8 products, want 4 per layer", gemms);
    int *seen = calloc((size_t)gemms + 1, sizeof *seen), unmarked_fwd = 0;
    for (int i = 0; i < mg_graph_n_nodes(s8.g); i++) {
        const mg_node *n = mg_graph_node(s8.g, i);
        if (n->op != MG_OP_MATMUL) continue;
        const mg_attr_matmul *m = &n->attrs.matmul;
        if (!m->fp8_gemm) {
            unmarked_fwd += n->phase == MG_PHASE_FORWARD;
            continue;
        }
        int r0 = m->fp8_role[0] - 1, r1 = m->fp8_role[1] - 1;
        for (int j = 0; j < 2; j++) {
            const mg_tensor *w = n->in[j];
            while (w->src && (w->src->op == MG_OP_RESHAPE || w->src->op == MG_OP_TRANSPOSE)) w = w->src->in[0];
            TK_CHECK(!(w->role == MG_ROLE_PARAM && w->embedding_or_output), "%s: an fp8 product of the output layer",
                     n->out[0]->name);
        }
        if (n->phase == MG_PHASE_FORWARD) {
            TK_CHECK(r0 == MG_FP8_SLOT_X && r1 == MG_FP8_SLOT_W, "forward product roles %d %d", r0, r1);
            seen[m->fp8_gemm] |= 1;
        } else if (r1 == MG_FP8_SLOT_W) {
            TK_CHECK(r0 == MG_FP8_SLOT_DY, "dgrad roles %d %d", r0, r1);
            seen[m->fp8_gemm] |= 2;
        } else {
            TK_CHECK((r0 == MG_FP8_SLOT_DY && r1 == MG_FP8_SLOT_X) || (r0 == MG_FP8_SLOT_X && r1 == MG_FP8_SLOT_DY),
                     "wgrad roles %d %d", r0, r1);
            seen[m->fp8_gemm] |= 4;
        }
    }
    for (int g = 1; g <= gemms; g++) TK_CHECK(seen[g] == 7, "product %d: forward / dgrad / wgrad seen %d", g, seen[g]);
    TK_CHECK(unmarked_fwd == 1, "%d forward products not fp8 (want the output layer's; attention is its own op)",
             unmarked_fwd);
    free(seen);
    side ref, eng, b16;
    if (side_new(&ref, &s8, false) || side_new(&eng, &s8, true) || side_new(&b16, &s16, false)) return;
    mg_fp8_state st_ref, st_eng;
    if (mg_fp8_state_init(&st_ref, &c8.fp8, gemms, &err) || mg_fp8_state_init(&st_eng, &c8.fp8, gemms, &err)) {
        TK_CHECK(false, "%s", err.msg);
        return;
    }
    float l8[3] = {0}, l16[3] = {0};
    for (int it = 0; it < 3; it++) {
        mg_fp8_state *sts[2] = {&st_ref, &st_eng};
        side *sd[2] = {&ref, &eng};
        for (int k = 0; k < 2; k++) {
            mg_fp8_state_begin(sts[k]);
            mg_exec_info info = {.seed = 1234, .iteration = it, .training = true, .n_micro = s8.n_micro, .fp8 = sts[k]};
            int rc = sd[k]->eng ? mg_engine_run(sd[k]->eng, &info, &err) : mg_exec_reference(s8.g, sd[k]->st, &info, &err);
            TK_CHECK(rc == MG_OK, "fp8 step %d: %s", it, err.msg);
            if (rc) return;
            mg_fp8_state_update(sts[k]);
        }
        if (side_run(&b16, &s16, it)) return;
        l8[it] = *(float *)mg_storage_data(ref.st, s8.loss);
        l16[it] = *(float *)mg_storage_data(b16.st, s16.loss);
    }
    int n = 0, diff = 0, moved = 0;
    for (int i = 0; i < mg_graph_n_tensors(s8.g); i++) {
        const mg_tensor *t = mg_graph_tensor(s8.g, i);
        if (!ref.plan->buffer_persistent[ref.plan->buffer_of[i]]) continue;
        n++;
        if (memcmp(mg_storage_data(ref.st, t), mg_storage_data(eng.st, t), mg_tensor_bytes(t)) && ++diff <= 5)
            TK_CHECK(false, "%s differs between StarPU and the reference executor", t->name);
    }
    TK_CHECK(diff == 0, "%d of %d persistent tensors differ", diff, n);
    TK_CHECK(!memcmp(st_ref.scale, st_eng.scale, (size_t)st_ref.n_slots * sizeof(float)) &&
                 !memcmp(st_ref.history, st_eng.history, (size_t)st_ref.n_slots * 2 * sizeof(float)),
             "the recipe states differ between StarPU and the reference executor");
    for (int i = 0; i < st_ref.n_slots; i++) moved += st_ref.scale[i] != 1.0f;
    TK_CHECK(moved == st_ref.n_slots, "%d of %d scales moved from 1", moved, st_ref.n_slots);
    /* fp8 changes the numbers (it is applied), by what fp8 rounding explains */
    for (int it = 0; it < 3; it++) {
        double rel = fabs((double)l8[it] - l16[it]) / l16[it];
        TK_CHECK(l8[it] != l16[it] && rel < 0.02, "step %d: fp8 loss %.6f, bf16 %.6f (relative %.3g)", it, l8[it], l16[it],
                 rel);
    }
    /* the dY slots are E5M2 (hybrid): their scales are 57344 / amax */
    printf("fp8_step: %d products x 3 (forward, dgrad, wgrad) marked; %d persistent tensors and %d scales equal on StarPU "
           "and the reference; losses %.6f %.6f %.6f (bf16 %.6f %.6f %.6f)\n",
           gemms, n, st_ref.n_slots, l8[0], l8[1], l8[2], l16[0], l16[1], l16[2]);
    mg_fp8_state_free(&st_ref);
    mg_fp8_state_free(&st_eng);
    side_free(&ref);
    side_free(&eng);
    side_free(&b16);
    mg_step_release(&s8);
    mg_step_release(&s16);
    mg_gemm_set_precision(MG_GEMM_FP32, false, &err);
}

int main(int argc, char **argv) {
    static const tk_case cases[] = {
        {"convert_f16", convert_f16}, {"convert_bf16", convert_bf16}, {"convert_fp8", convert_fp8},
        {"wrapper", wrapper},         {"rules", rules},               {"step_bits", step_bits},
        {"loss_scaler", loss_scaler}, {"fp16_skip", fp16_skip},     {"fp8_step", fp8_step},
    };
    return tk_main(argc, argv, cases, (int)(sizeof cases / sizeof *cases));
}

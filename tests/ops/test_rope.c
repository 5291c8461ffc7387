/* Rotary embedding (rotate-half and interleaved pairing, Llama 3.1 and YaRN frequency
 * scaling): forward against a double reference, the frequencies against Hugging Face
 * transformers' (ROPE_INIT_FUNCTIONS, values written below), the inverse rotation undoes
 * it, gradient w.r.t. x against finite differences, errors. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "testkit.h"

/* per_sample: positions [S, B] (each sample its own), else [S]. */
static void check_rope(int64_t S, int64_t B, int64_t NH, int64_t HD, float theta, int pos_hi, bool per_sample) {
    int64_t sx[4] = {S, B, NH, HD}, sp[2] = {S, B}, pb = per_sample ? B : 1;
    mg_graph *g = mg_graph_new();
    mg_tensor *x = mg_input(g, "x", MG_F32, 4, sx), *pos = mg_input(g, "pos", MG_I32, per_sample ? 2 : 1, sp);
    mg_tensor *y = mg_rope(g, x, pos, theta);
    /* the inverse rotation (what the gradient uses) undoes it */
    mg_attrs inv = {.rope = {.theta = theta, .inverse = true}};
    mg_tensor *in[2] = {y, pos};
    mg_node *back = y ? mg_node_new(g, MG_OP_ROPE, &inv, 2, in, "back") : NULL;
    tk_run r;
    if (!back || tk_prepare(&r, g)) {
        TK_CHECK(0, "build: %s", mg_graph_error(g)->msg);
        mg_graph_free(g);
        return;
    }
    int64_t n = mg_numel(x), h = HD / 2, rows = B * NH;
    tk_rng rng = {13};
    float *xv = tk_f32(&r, x);
    int32_t *pv = tk_i32(&r, pos);
    tk_fill(&rng, xv, n, -2, 2);
    for (int64_t s = 0; s < S * pb; s++) pv[s] = (int32_t)floorf(tk_uniform(&rng, 0, (float)pos_hi));
    pv[0] = 0; /* position 0: identity */
    TK_CHECK(tk_exec(&r) == 0, "exec");
    float *want = malloc((size_t)n * sizeof *want);
    for (int64_t s = 0; s < S; s++)
        for (int64_t rr = 0; rr < rows; rr++) {
            const float *x0 = xv + (s * rows + rr) * HD;
            float *w0 = want + (s * rows + rr) * HD;
            int32_t p = pv[s * pb + (per_sample ? rr / NH : 0)]; /* row rr is head rr % NH of sample rr / NH */
            for (int64_t i = 0; i < h; i++) {
                double ang = (double)p * pow((double)theta, -2.0 * (double)i / (double)HD);
                w0[i] = (float)(x0[i] * cos(ang) - x0[i + h] * sin(ang));
                w0[i + h] = (float)(x0[i + h] * cos(ang) + x0[i] * sin(ang));
            }
        }
    char what[128];
    snprintf(what, sizeof what, "rope [%lld, %lld, %lld, %lld] theta %g positions per sample %d", (long long)S,
             (long long)B, (long long)NH, (long long)HD, (double)theta, per_sample);
    tk_expect_close(what, tk_f32(&r, y), want, n, 1e-5, 1e-6);
    tk_expect_close("rope inverse(rope(x)) = x", tk_f32(&r, back->out[0]), xv, n, 1e-5, 1e-6);
    free(want);
    tk_release(&r);
    mg_graph_free(g);
}

static void fwd_rope(void) {
    check_rope(6, 2, 3, 8, 10000.0f, 64, false);
    check_rope(5, 1, 2, 64, 500000.0f, 4096, false); /* LLaMA-3 theta, long positions */
    check_rope(3, 2, 1, 2, 10000.0f, 10, false);     /* one pair per head */
    /* positions per sample (--reset-position-ids) */
    check_rope(6, 3, 2, 8, 10000.0f, 64, true);
    check_rope(4, 2, 1, 2, 10000.0f, 10, true);
}

static void fwd_errors(void) {
    mg_graph *g = mg_graph_new();
    mg_tensor *x = mg_input(g, "x", MG_F32, 4, (int64_t[]){4, 2, 3, 5});
    mg_tensor *pos = mg_input(g, "pos", MG_I32, 1, (int64_t[]){4});
    TK_CHECK(mg_rope(g, x, pos, 10000.0f) == NULL, "odd head dim must fail");
    const mg_error *e = mg_graph_error(g);
    TK_CHECK(e->code == MG_ERR_SHAPE && strstr(e->msg, "rope") && strstr(e->msg, "[4, 2, 3, 5]"), "message: %s",
             e->msg);
    mg_graph_free(g);
    g = mg_graph_new();
    x = mg_input(g, "x", MG_F32, 4, (int64_t[]){4, 2, 3, 8});
    pos = mg_input(g, "pos", MG_I32, 1, (int64_t[]){5});
    TK_CHECK(mg_rope(g, x, pos, 10000.0f) == NULL && mg_graph_error(g)->code == MG_ERR_SHAPE, "pos [5] for s 4");
    mg_graph_free(g);
    g = mg_graph_new();
    x = mg_input(g, "x", MG_F32, 4, (int64_t[]){4, 2, 3, 8});
    pos = mg_input(g, "pos", MG_F32, 1, (int64_t[]){4});
    TK_CHECK(mg_rope(g, x, pos, 10000.0f) == NULL && mg_graph_error(g)->code == MG_ERR_SHAPE, "f32 positions");
    mg_graph_free(g);
    /* per-sample positions: [s, b] of x [s, b, ...] */
    int64_t bad[][3] = {{4, 3, 0}, {5, 2, 0}, {4, 2, 1}};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        g = mg_graph_new();
        x = mg_input(g, "x", MG_F32, 4, (int64_t[]){4, 2, 3, 8});
        pos = mg_input(g, "pos", MG_I32, bad[i][2] ? 3 : 2, (int64_t[]){bad[i][0], bad[i][1], 1});
        TK_CHECK(mg_rope(g, x, pos, 10000.0f) == NULL && mg_graph_error(g)->code == MG_ERR_SHAPE,
                 "positions [%lld, %lld%s] for x [4, 2, 3, 8] must fail", (long long)bad[i][0], (long long)bad[i][1],
                 bad[i][2] ? ", 1" : "");
        mg_graph_free(g);
    }
}

/* Partial rotary embedding (--rotary-percent): the first rd channels of each head
 * rotated with frequencies of a head of rd (Megatron), the rest unchanged. */
static void fwd_rope_partial(void) {
    int64_t S = 5, B = 2, NH = 3, HD = 12, RD = 8, n = S * B * NH * HD, h = RD / 2;
    float theta = 10000.0f;
    mg_graph *g = mg_graph_new();
    mg_tensor *x = mg_input(g, "x", MG_F32, 4, (int64_t[]){S, B, NH, HD}), *pos = mg_input(g, "pos", MG_I32, 1, &S);
    mg_tensor *y = mg_rope_partial(g, x, pos, theta, RD);
    tk_run r;
    if (!y || tk_prepare(&r, g)) {
        TK_CHECK(0, "build: %s", mg_graph_error(g)->msg);
        mg_graph_free(g);
        return;
    }
    tk_rng rng = {21};
    float *xv = tk_f32(&r, x);
    int32_t *pv = tk_i32(&r, pos);
    tk_fill(&rng, xv, n, -2, 2);
    for (int64_t s = 0; s < S; s++) pv[s] = (int32_t)(7 * s + 2);
    TK_CHECK(tk_exec(&r) == 0, "exec");
    float *want = malloc((size_t)n * sizeof *want);
    for (int64_t row = 0; row < S * B * NH; row++) {
        int64_t s = row / (B * NH);
        const float *x0 = xv + row * HD;
        float *w0 = want + row * HD;
        for (int64_t i = 0; i < HD; i++) w0[i] = x0[i];
        for (int64_t i = 0; i < h; i++) {
            double ang = (double)pv[s] * pow((double)theta, -2.0 * (double)i / (double)RD);
            w0[i] = (float)(x0[i] * cos(ang) - x0[i + h] * sin(ang));
            w0[i + h] = (float)(x0[i + h] * cos(ang) + x0[i] * sin(ang));
        }
    }
    tk_expect_close("rope_partial 8 of 12", tk_f32(&r, y), want, n, 1e-5, 1e-6);
    free(want);
    tk_release(&r);
    /* the whole head is plain rope; an odd or too large rotary dimension is an error */
    TK_CHECK(mg_rope_partial(g, x, pos, theta, HD)->src->op == MG_OP_ROPE, "rot_dim == head dim is one rope node");
    TK_CHECK(mg_rope_partial(g, x, pos, theta, 5) == NULL && mg_graph_error(g)->code == MG_ERR_SHAPE &&
                 strstr(mg_graph_error(g)->msg, "rotary dimension 5"),
             "odd rotary dimension: %s", mg_graph_error(g)->msg);
    mg_graph_free(g);
}

static mg_tensor *gb_rope_partial(mg_graph *g, mg_tensor *const *l, void *c) {
    (void)c;
    return mg_rope_partial(g, l[0], l[1], 500000.0f, 4);
}

static void grad_rope_partial(void) {
    tk_leaf l[] = {{"x", MG_F32, 4, {5, 2, 2, 10}, true, -1, 1}, {"pos", MG_I32, 1, {5}, false, 0, 50}};
    tk_gradcheck("rope_partial d/dx", 2, l, gb_rope_partial, NULL, NULL);
    tk_leaf ls[] = {{"x", MG_F32, 4, {5, 2, 2, 10}, true, -1, 1}, {"pos", MG_I32, 2, {5, 2}, false, 0, 50}};
    tk_gradcheck("rope_partial d/dx, positions per sample", 2, ls, gb_rope_partial, NULL, NULL);
}

/* mg_rope_inv_freq against transformers 5's ROPE_INIT_FUNCTIONS (head dim 16, theta
 * 10000): "llama3" with factor 8, low / high frequency factors 1 / 4 and an original
 * context of 64 (pairs 1 and 2 in the smooth band, 0 kept, 3.. divided by 8), "yarn" with
 * factor 4, original context 32, betas 32 / 1 (its attention factor 1.1386294), and
 * DeepSeek-V3's factor 40 over 4096 positions. The values are float32 in transformers. */
static void fwd_rope_frequencies(void) {
    static const double llama3[8] = {1.0, 0.24438458681106567, 0.013042256236076355, 0.0039528473280370235,
                                     0.0012499999720603228, 0.00039528473280370235, 0.0001250000059371814,
                                     3.9528473280370235e-05};
    static const double yarn[8] = {1.0, 0.19764235615730286, 0.02500000037252903, 0.007905694656074047,
                                   0.0024999999441206455, 0.0007905694656074047, 0.0002500000118743628,
                                   7.905694656074047e-05};
    static const double yarn40[8] = {1.0, 0.3162277638912201, 0.10000000149011612, 0.023914724588394165,
                                     0.005124999675899744, 0.0008498621755279601, 2.499999936844688e-05,
                                     7.905694474175107e-06};
    mg_attr_rope l3 = {.theta = 10000.0f, .scaling = MG_ROPE_LLAMA3, .factor = 8.0f, .original_max_pos = 64,
                       .low_freq_factor = 1.0f, .high_freq_factor = 4.0f};
    mg_attr_rope y4 = {.theta = 10000.0f, .scaling = MG_ROPE_YARN, .factor = 4.0f, .original_max_pos = 32,
                       .beta_fast = 32.0f, .beta_slow = 1.0f};
    mg_attr_rope y40 = y4;
    y40.factor = 40.0f, y40.original_max_pos = 4096;
    const struct { const char *what; const mg_attr_rope *o; const double *want; } c[] = {
        {"llama3", &l3, llama3}, {"yarn factor 4", &y4, yarn}, {"yarn factor 40", &y40, yarn40}};
    for (size_t k = 0; k < sizeof c / sizeof *c; k++)
        for (int i = 0; i < 8; i++) {
            double got = mg_rope_inv_freq(c[k].o, 16, i);
            TK_CHECK(fabs(got - c[k].want[i]) <= 1e-6 * c[k].want[i], "%s: frequency %d is %.10g, transformers %.10g",
                     c[k].what, i, got, c[k].want[i]);
        }
    TK_CHECK(fabs(mg_yarn_mscale(4.0, 1.0) - 1.138629436111989) < 1e-12 && mg_yarn_mscale(1.0, 1.0) == 1.0 &&
                 mg_yarn_mscale(0.5, 3.0) == 1.0,
             "yarn attention factor %.12g", mg_yarn_mscale(4.0, 1.0));
}

/* Interleaved pairs (x_2i, x_2i+1) with YaRN frequencies and cos / sin times mscale, and
 * rotate-half with Llama 3.1's, against a double reference built on mg_rope_inv_freq
 * (checked above); the inverse node undoes each. */
static void check_rope_ex(const mg_attr_rope *o, const char *what) {
    int64_t S = 6, B = 2, NH = 3, HD = 16, n = S * B * NH * HD, h = HD / 2;
    mg_graph *g = mg_graph_new();
    mg_tensor *x = mg_input(g, "x", MG_F32, 4, (int64_t[]){S, B, NH, HD}), *pos = mg_input(g, "pos", MG_I32, 1, &S);
    mg_tensor *y = mg_rope_ex(g, x, pos, o);
    mg_attrs inv = {.rope = *o};
    inv.rope.inverse = true;
    mg_tensor *in[2] = {y, pos};
    mg_node *back = y ? mg_node_new(g, MG_OP_ROPE, &inv, 2, in, "back") : NULL;
    tk_run r;
    if (!back || tk_prepare(&r, g)) {
        TK_CHECK(0, "build: %s", mg_graph_error(g)->msg);
        mg_graph_free(g);
        return;
    }
    tk_rng rng = {5};
    float *xv = tk_f32(&r, x);
    int32_t *pv = tk_i32(&r, pos);
    tk_fill(&rng, xv, n, -2, 2);
    for (int64_t s = 0; s < S; s++) pv[s] = (int32_t)(37 * s + 1);
    TK_CHECK(tk_exec(&r) == 0, "exec");
    float *want = malloc((size_t)n * sizeof *want);
    double m = o->mscale > 0 ? o->mscale : 1.0;
    for (int64_t row = 0; row < S * B * NH; row++) {
        int64_t s = row / (B * NH);
        const float *x0 = xv + row * HD;
        float *w0 = want + row * HD;
        for (int64_t i = 0; i < h; i++) {
            double ang = (double)pv[s] * mg_rope_inv_freq(o, HD, i);
            int64_t a = o->interleaved ? 2 * i : i, b = o->interleaved ? 2 * i + 1 : i + h;
            w0[a] = (float)(m * (x0[a] * cos(ang) - x0[b] * sin(ang)));
            w0[b] = (float)(m * (x0[b] * cos(ang) + x0[a] * sin(ang)));
        }
    }
    tk_expect_close(what, tk_f32(&r, y), want, n, 1e-5, 1e-6);
    /* m R(-a) m R(a) = m^2: the inverse node is the adjoint, so it gives x m^2 */
    for (int64_t i = 0; i < n; i++) want[i] = (float)(xv[i] * m * m);
    tk_expect_close("rope adjoint(rope(x)) = m^2 x", tk_f32(&r, back->out[0]), want, n, 1e-5, 1e-6);
    free(want);
    tk_release(&r);
    mg_graph_free(g);
}

static void fwd_rope_scaled(void) {
    mg_attr_rope yarn = {.theta = 10000.0f, .interleaved = true, .scaling = MG_ROPE_YARN, .factor = 40.0f,
                         .original_max_pos = 64, .beta_fast = 32.0f, .beta_slow = 1.0f, .mscale = 1.25f};
    check_rope_ex(&yarn, "rope interleaved, yarn, mscale 1.25");
    mg_attr_rope l3 = {.theta = 500000.0f, .scaling = MG_ROPE_LLAMA3, .factor = 8.0f, .original_max_pos = 64,
                       .low_freq_factor = 1.0f, .high_freq_factor = 4.0f};
    check_rope_ex(&l3, "rope rotate-half, llama3");
    /* bad scaling parameters are shape errors naming the op */
    mg_graph *g = mg_graph_new();
    mg_tensor *x = mg_input(g, "x", MG_F32, 4, (int64_t[]){4, 2, 3, 8});
    mg_tensor *pos = mg_input(g, "pos", MG_I32, 1, (int64_t[]){4});
    l3.high_freq_factor = 0.5f;
    TK_CHECK(mg_rope_ex(g, x, pos, &l3) == NULL && mg_graph_error(g)->code == MG_ERR_SHAPE &&
                 strstr(mg_graph_error(g)->msg, "llama3"),
             "llama3 with high <= low frequency factor: %s", mg_graph_error(g)->msg);
    mg_graph_free(g);
}

static mg_tensor *gb_rope_yarn(mg_graph *g, mg_tensor *const *l, void *c) {
    (void)c;
    mg_attr_rope o = {.theta = 10000.0f, .interleaved = true, .scaling = MG_ROPE_YARN, .factor = 4.0f,
                      .original_max_pos = 16, .beta_fast = 32.0f, .beta_slow = 1.0f, .mscale = 1.1f};
    return mg_rope_partial_ex(g, l[0], l[1], &o, 6);
}

static void grad_rope_scaled(void) {
    tk_leaf l[] = {{"x", MG_F32, 4, {5, 2, 3, 8}, true, -1, 1}, {"pos", MG_I32, 1, {5}, false, 0, 50}};
    tk_gradcheck("rope interleaved yarn mscale (6 of 8 rotated) d/dx", 2, l, gb_rope_yarn, NULL, NULL);
}

static mg_tensor *gb_rope(mg_graph *g, mg_tensor *const *l, void *c) {
    (void)c;
    return mg_rope(g, l[0], l[1], 10000.0f);
}

/* A linear map of x: finite differences are exact up to f32 rounding of the loss. */
static void grad_rope(void) {
    tk_leaf l[] = {{"x", MG_F32, 4, {5, 2, 3, 8}, true, -1, 1}, {"pos", MG_I32, 1, {5}, false, 0, 50}};
    tk_gradcheck("rope d/dx", 2, l, gb_rope, NULL, NULL);
    tk_leaf ls[] = {{"x", MG_F32, 4, {5, 2, 3, 8}, true, -1, 1}, {"pos", MG_I32, 2, {5, 2}, false, 0, 50}};
    tk_gradcheck("rope d/dx, positions per sample", 2, ls, gb_rope, NULL, NULL);
}

int main(int argc, char **argv) {
    static const tk_case cases[] = {
        {"forward.rope", fwd_rope},
        {"forward.errors_rope", fwd_errors},
        {"grad.rope", grad_rope},
        {"forward.rope_partial", fwd_rope_partial},
        {"grad.rope_partial", grad_rope_partial},
        {"forward.rope_frequencies", fwd_rope_frequencies},
        {"forward.rope_scaled", fwd_rope_scaled},
        {"grad.rope_scaled", grad_rope_scaled},
    };
    return tk_main(argc, argv, cases, (int)(sizeof cases / sizeof *cases));
}

/* gelu (tanh approximation), gelu_erf, silu, swiglu, squared_relu: forward against double formulas,
 * gradients against finite differences, shape errors. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "testkit.h"

static double gelu_ref(double x) {
    return 0.5 * x * (1.0 + tanh(sqrt(2.0 / 3.14159265358979323846) * (x + 0.044715 * x * x * x)));
}
static double silu_ref(double x) { return x / (1.0 + exp(-x)); }
static double squared_relu_ref(double x) { return x > 0 ? x * x : 0.0; }
static double gelu_erf_ref(double x) { return 0.5 * x * (1.0 + erf(x / sqrt(2.0))); }

typedef mg_tensor *(*build1)(mg_graph *g, mg_tensor *x);

/* x [3, 4, 2F] in [-6, 6] (both tails), y compared elementwise to ref. */
static void check(const char *what, build1 fn, bool gated, double (*ref)(double)) {
    const int64_t F = 10, sx[3] = {3, 4, 2 * F};
    mg_graph *g = mg_graph_new();
    mg_tensor *x = mg_input(g, "x", MG_F32, 3, sx);
    mg_tensor *y = fn(g, x);
    tk_run r;
    if (!y || tk_prepare(&r, g)) {
        TK_CHECK(0, "%s build: %s", what, mg_graph_error(g)->msg);
        mg_graph_free(g);
        return;
    }
    int64_t nx = mg_numel(x), ny = mg_numel(y);
    TK_CHECK(ny == (gated ? nx / 2 : nx) && y->shape[2] == (gated ? F : 2 * F), "%s output shape", what);
    tk_rng rng = {17};
    float *xv = tk_f32(&r, x);
    tk_fill(&rng, xv, nx, -6, 6);
    xv[0] = 0.0f;
    xv[1] = -30.0f; /* saturated tails */
    xv[2] = 30.0f;
    TK_CHECK(tk_exec(&r) == 0, "exec");
    float *want = malloc((size_t)ny * sizeof *want);
    for (int64_t i = 0; i < ny; i++) {
        if (gated) {
            int64_t row = i / F, j = i % F;
            want[i] = (float)(silu_ref(xv[row * 2 * F + j]) * (double)xv[row * 2 * F + F + j]);
        } else {
            want[i] = (float)ref(xv[i]);
        }
    }
    tk_expect_close(what, tk_f32(&r, y), want, ny, 2e-6, 1e-6);
    free(want);
    tk_release(&r);
    mg_graph_free(g);
}

static void fwd_gelu(void) {
    check("gelu", mg_gelu, false, gelu_ref);
    /* GPT-2 spot values (tanh approximation) */
    mg_graph *g = mg_graph_new();
    mg_tensor *x = mg_input(g, "x", MG_F32, 1, (int64_t[]){4}), *y = mg_gelu(g, x);
    tk_run r;
    if (!y || tk_prepare(&r, g)) {
        TK_CHECK(0, "build");
        mg_graph_free(g);
        return;
    }
    float xs[4] = {1.0f, -1.0f, 2.0f, 0.5f}, want[4];
    memcpy(tk_f32(&r, x), xs, sizeof xs);
    for (int i = 0; i < 4; i++) want[i] = (float)gelu_ref(xs[i]);
    tk_exec(&r);
    tk_expect_close("gelu spot values", tk_f32(&r, y), want, 4, 1e-6, 0);
    /* tanh approximation, not erf: gelu(1) = 0.841192 (erf form: 0.841345) */
    TK_CHECK(fabsf(tk_f32(&r, y)[0] - 0.8411920f) < 2e-6f, "gelu(1) = %.7f", (double)tk_f32(&r, y)[0]);
    tk_release(&r);
    mg_graph_free(g);
}
static void fwd_silu(void) { check("silu", mg_silu, false, silu_ref); }
static void fwd_swiglu(void) { check("swiglu", mg_swiglu, true, NULL); }
static void fwd_squared_relu(void) { check("squared_relu", mg_squared_relu, false, squared_relu_ref); }
/* the exact form: gelu_erf(1) = 0.841345 (the tanh approximation's 0.841192 is 1.5e-4 off) */
static void fwd_gelu_erf(void) {
    check("gelu_erf", mg_gelu_erf, false, gelu_erf_ref);
    mg_graph *g = mg_graph_new();
    mg_tensor *x = mg_input(g, "x", MG_F32, 1, (int64_t[]){1}), *y = mg_gelu_erf(g, x);
    tk_run r;
    if (!y || tk_prepare(&r, g)) {
        TK_CHECK(0, "build");
        mg_graph_free(g);
        return;
    }
    tk_f32(&r, x)[0] = 1.0f;
    tk_exec(&r);
    TK_CHECK(fabsf(tk_f32(&r, y)[0] - 0.8413447f) < 1e-6f, "gelu_erf(1) = %.7f", (double)tk_f32(&r, y)[0]);
    tk_release(&r);
    mg_graph_free(g);
}

static void fwd_errors(void) {
    mg_graph *g = mg_graph_new();
    mg_tensor *x = mg_input(g, "x", MG_F32, 2, (int64_t[]){3, 5});
    TK_CHECK(mg_swiglu(g, x) == NULL, "swiglu of odd last dim must fail");
    const mg_error *e = mg_graph_error(g);
    TK_CHECK(e->code == MG_ERR_SHAPE && strstr(e->msg, "swiglu") && strstr(e->msg, "[3, 5]"), "message: %s", e->msg);
    TK_CHECK(mg_gelu(g, NULL) == NULL && strstr(mg_graph_error(g)->msg, "swiglu"), "first error kept");
    mg_graph_free(g);
    g = mg_graph_new();
    x = mg_input(g, "x", MG_I32, 2, (int64_t[]){3, 4});
    TK_CHECK(mg_gelu(g, x) == NULL && mg_graph_error(g)->code == MG_ERR_SHAPE, "gelu of i32");
    TK_CHECK(strstr(mg_graph_error(g)->msg, "gelu") != NULL, "message: %s", mg_graph_error(g)->msg);
    mg_graph_free(g);
    g = mg_graph_new();
    x = mg_input(g, "x", MG_I32, 2, (int64_t[]){3, 4});
    TK_CHECK(mg_silu(g, x) == NULL && mg_graph_error(g)->code == MG_ERR_SHAPE, "silu of i32");
    mg_graph_free(g);
    g = mg_graph_new();
    x = mg_input(g, "x", MG_I32, 2, (int64_t[]){3, 4});
    TK_CHECK(mg_squared_relu(g, x) == NULL && mg_graph_error(g)->code == MG_ERR_SHAPE, "squared_relu of i32");
    mg_graph_free(g);
}

/* ---- gradients: smooth functions, default eps 1e-2 and tolerances ---------------------- */
static mg_tensor *gb_gelu(mg_graph *g, mg_tensor *const *l, void *c) { (void)c; return mg_gelu(g, l[0]); }
static mg_tensor *gb_silu(mg_graph *g, mg_tensor *const *l, void *c) { (void)c; return mg_silu(g, l[0]); }
static mg_tensor *gb_swiglu(mg_graph *g, mg_tensor *const *l, void *c) { (void)c; return mg_swiglu(g, l[0]); }
static mg_tensor *gb_squared_relu(mg_graph *g, mg_tensor *const *l, void *c) { (void)c; return mg_squared_relu(g, l[0]); }
static mg_tensor *gb_gelu_erf(mg_graph *g, mg_tensor *const *l, void *c) { (void)c; return mg_gelu_erf(g, l[0]); }

static void grad_gelu(void) {
    tk_leaf x[] = {{"x", MG_F32, 3, {2, 3, 8}, true, -4, 4}};
    tk_gradcheck("gelu", 1, x, gb_gelu, NULL, NULL);
}
static void grad_gelu_erf(void) {
    tk_leaf x[] = {{"x", MG_F32, 3, {2, 3, 8}, true, -4, 4}};
    tk_gradcheck("gelu_erf", 1, x, gb_gelu_erf, NULL, NULL);
}
static void grad_silu(void) {
    tk_leaf x[] = {{"x", MG_F32, 3, {2, 3, 8}, true, -5, 5}};
    tk_gradcheck("silu", 1, x, gb_silu, NULL, NULL);
}
static void grad_swiglu(void) {
    tk_leaf x[] = {{"x", MG_F32, 3, {2, 3, 8}, true, -3, 3}};
    tk_gradcheck("swiglu [2, 3, 8] -> [2, 3, 4]", 1, x, gb_swiglu, NULL, NULL);
    tk_leaf x2[] = {{"x", MG_F32, 1, {2}, true, -3, 3}};
    tk_gradcheck("swiglu [2] -> [1]", 1, x2, gb_swiglu, NULL, NULL);
}

/* Each side of the kink at 0 on its own: relu(x)² is smooth on either side, and central
 * differences across 0 are off by up to eps there (its second derivative jumps). */
static void grad_squared_relu(void) {
    tk_leaf pos[] = {{"x", MG_F32, 3, {2, 3, 8}, true, 0.1f, 3}};
    tk_gradcheck("squared_relu, x > 0", 1, pos, gb_squared_relu, NULL, NULL);
    tk_leaf neg[] = {{"x", MG_F32, 3, {2, 3, 8}, true, -3, -0.1f}};
    tk_gradcheck("squared_relu, x < 0", 1, neg, gb_squared_relu, NULL, NULL);
}

int main(int argc, char **argv) {
    static const tk_case cases[] = {
        {"forward.gelu", fwd_gelu},   {"forward.silu", fwd_silu}, {"forward.swiglu", fwd_swiglu},
        {"forward.squared_relu", fwd_squared_relu}, {"forward.gelu_erf", fwd_gelu_erf},
        {"forward.errors_activation", fwd_errors},  {"grad.gelu_erf", grad_gelu_erf},
        {"grad.squared_relu", grad_squared_relu},
        {"grad.gelu", grad_gelu},     {"grad.silu", grad_silu},   {"grad.swiglu", grad_swiglu},
    };
    return tk_main(argc, argv, cases, (int)(sizeof cases / sizeof *cases));
}

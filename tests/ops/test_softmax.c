/* softmax and softmax_bwd: forward against double-precision loops (including rows of
 * large logits, which overflow a naive exp), the gradient against finite differences,
 * builder errors. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "testkit.h"

/* expf and one float rounding per step against a double reference: relative error a
 * few 1e-7; 1e-5 relative plus 1e-7 absolute leaves a wide margin. */
#define FWD_RTOL 1e-5
#define FWD_ATOL 1e-7

static void ref_softmax(const float *x, int64_t rows, int64_t n, float *y) {
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * n;
        double m = xr[0], s = 0;
        for (int64_t j = 1; j < n; j++) m = fmax(m, xr[j]);
        for (int64_t j = 0; j < n; j++) s += exp((double)xr[j] - m);
        for (int64_t j = 0; j < n; j++) y[r * n + j] = (float)(exp((double)xr[j] - m) / s);
    }
}

static void fwd_softmax(void) {
    mg_graph *g = mg_graph_new();
    int64_t s[3] = {3, 4, 7};
    mg_tensor *x = mg_input(g, "x", MG_F32, 3, s);
    mg_tensor *y = mg_softmax(g, x);
    mg_tensor *x1 = mg_input(g, "x1", MG_F32, 1, (int64_t[]){1});
    mg_tensor *y1 = mg_softmax(g, x1); /* a single class: 1 */
    tk_run r;
    if (!y || !y1 || tk_prepare(&r, g)) {
        TK_CHECK(0, "build: %s", mg_graph_error(g)->msg);
        mg_graph_free(g);
        return;
    }
    tk_rng rng = {8};
    float *xv = tk_f32(&r, x);
    tk_fill(&rng, xv, 84, -5, 5);
    for (int j = 0; j < 7; j++) xv[7 + j] = 80.0f + 3.0f * (float)j; /* exp would overflow unshifted */
    for (int j = 0; j < 7; j++) xv[14 + j] = -90.0f - (float)j;
    tk_f32(&r, x1)[0] = 3;
    TK_CHECK(tk_exec(&r) == 0, "exec");
    float want[84];
    ref_softmax(xv, 12, 7, want);
    tk_expect_close("softmax", tk_f32(&r, y), want, 84, FWD_RTOL, FWD_ATOL);
    float one = 1;
    tk_expect_close("softmax of one class", tk_f32(&r, y1), &one, 1, 0, 0);
    for (int row = 0; row < 12; row++) {
        double sum = 0;
        for (int j = 0; j < 7; j++) sum += tk_f32(&r, y)[row * 7 + j];
        TK_CHECK(fabs(sum - 1) < 1e-5, "row %d sums to %.9g", row, sum);
    }
    tk_release(&r);
    mg_graph_free(g);
}

static void fwd_softmax_bwd(void) {
    mg_graph *g = mg_graph_new();
    int64_t s[2] = {5, 9};
    mg_tensor *dy = mg_input(g, "dy", MG_F32, 2, s), *yy = mg_input(g, "y", MG_F32, 2, s);
    mg_node *n = mg_node_new(g, MG_OP_SOFTMAX_BWD, NULL, 2, (mg_tensor *[]){dy, yy}, NULL);
    tk_run r;
    if (!n || tk_prepare(&r, g)) {
        TK_CHECK(0, "build: %s", mg_graph_error(g)->msg);
        mg_graph_free(g);
        return;
    }
    tk_rng rng = {9};
    float x[45];
    tk_fill(&rng, x, 45, -3, 3);
    ref_softmax(x, 5, 9, tk_f32(&r, yy));
    tk_fill(&rng, tk_f32(&r, dy), 45, -1, 1);
    TK_CHECK(tk_exec(&r) == 0, "exec");
    const float *dv = tk_f32(&r, dy), *yv = tk_f32(&r, yy);
    float want[45];
    for (int row = 0; row < 5; row++) {
        double dot = 0;
        for (int j = 0; j < 9; j++) dot += (double)dv[row * 9 + j] * yv[row * 9 + j];
        for (int j = 0; j < 9; j++) want[row * 9 + j] = (float)(yv[row * 9 + j] * (dv[row * 9 + j] - dot));
    }
    tk_expect_close("softmax_bwd", tk_f32(&r, n->out[0]), want, 45, FWD_RTOL, 1e-6);
    tk_release(&r);
    mg_graph_free(g);
}

/* softmax is smooth; with inputs in [-2, 2] and eps 1e-2 the central-difference
 * truncation error (eps^2 * f''') is ~1e-5, inside the default tolerances. */
static mg_tensor *gb_softmax(mg_graph *g, mg_tensor *const *l, void *ctx) {
    (void)ctx;
    return mg_softmax(g, l[0]);
}

static void grad_softmax(void) {
    tk_leaf x[] = {{"x", MG_F32, 3, {2, 3, 6}, true, -2, 2}};
    tk_gradcheck("softmax", 1, x, gb_softmax, NULL, NULL);
    tk_leaf x2[] = {{"x", MG_F32, 2, {4, 2}, true, -2, 2}};
    tk_gradcheck("softmax 2 classes", 1, x2, gb_softmax, NULL, NULL);
}

static void fwd_errors(void) {
    mg_graph *g = mg_graph_new();
    mg_tensor *ids = mg_input(g, "ids", MG_I32, 2, (int64_t[]){2, 3});
    mg_tensor *y = mg_softmax(g, ids);
    const mg_error *e = mg_graph_error(g);
    TK_CHECK(!y && e->code == MG_ERR_SHAPE && strstr(e->msg, "softmax"), "softmax i32: %s", e->msg);
    char first[MG_ERROR_MSG_LEN];
    snprintf(first, sizeof first, "%s", e->msg);
    TK_CHECK(mg_softmax(g, NULL) == NULL && !strcmp(first, mg_graph_error(g)->msg), "NULL keeps first error");
    mg_graph_free(g);

    g = mg_graph_new();
    mg_tensor *a = mg_input(g, "a", MG_F32, 2, (int64_t[]){2, 3}), *b = mg_input(g, "b", MG_F32, 2, (int64_t[]){3, 2});
    mg_node *n = mg_node_new(g, MG_OP_SOFTMAX_BWD, NULL, 2, (mg_tensor *[]){a, b}, NULL);
    e = mg_graph_error(g);
    TK_CHECK(!n && e->code == MG_ERR_SHAPE && strstr(e->msg, "softmax_bwd"), "softmax_bwd shapes: %s", e->msg);
    mg_graph_free(g);
}

int main(int argc, char **argv) {
    static const tk_case cases[] = {
        {"forward.softmax", fwd_softmax},
        {"forward.softmax_bwd", fwd_softmax_bwd},
        {"forward.errors_softmax", fwd_errors},
        {"grad.softmax", grad_softmax},
    };
    return tk_main(argc, argv, cases, (int)(sizeof cases / sizeof *cases));
}

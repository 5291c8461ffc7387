/* layernorm and rmsnorm: forward (y and the saved statistics) against naive double
 * loops, gradients w.r.t. x, w (and b) against finite differences. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "testkit.h"

/* Runs layernorm (b may be absent) or rmsnorm on x [2, 3, N] and compares. */
static void check_norm(bool rms, bool bias, int64_t N, float eps) {
    int64_t sx[3] = {2, 3, N}, sw[1] = {N};
    mg_graph *g = mg_graph_new();
    mg_tensor *x = mg_input(g, "x", MG_F32, 3, sx), *w = mg_input(g, "w", MG_F32, 1, sw);
    mg_tensor *b = bias ? mg_input(g, "b", MG_F32, 1, sw) : NULL;
    mg_tensor *y = rms ? mg_rmsnorm(g, x, w, eps) : mg_layernorm(g, x, w, b, eps);
    tk_run r;
    if (!y || tk_prepare(&r, g)) {
        TK_CHECK(0, "build: %s", mg_graph_error(g)->msg);
        mg_graph_free(g);
        return;
    }
    int64_t rows = 6, n = rows * N;
    tk_rng rng = {21};
    float *xv = tk_f32(&r, x), *wv = tk_f32(&r, w), *bv = b ? tk_f32(&r, b) : NULL;
    tk_fill(&rng, xv, n, -3, 3);
    for (int64_t i = 0; i < n; i++) xv[i] += 5.0f; /* a large mean: tests the centring */
    tk_fill(&rng, wv, N, 0.5, 1.5);
    if (bv) tk_fill(&rng, bv, N, -1, 1);
    TK_CHECK(tk_exec(&r) == 0, "exec");
    float *want = malloc((size_t)n * sizeof *want), *wm = malloc((size_t)rows * sizeof *wm),
          *wr = malloc((size_t)rows * sizeof *wr);
    for (int64_t rr = 0; rr < rows; rr++) {
        const float *xr = xv + rr * N;
        double mu = 0, var = 0;
        if (!rms) {
            for (int64_t j = 0; j < N; j++) mu += xr[j];
            mu /= (double)N;
        }
        for (int64_t j = 0; j < N; j++) var += ((double)xr[j] - mu) * ((double)xr[j] - mu);
        double rs = 1.0 / sqrt(var / (double)N + eps);
        for (int64_t j = 0; j < N; j++)
            want[rr * N + j] = (float)(((double)xr[j] - mu) * rs * wv[j] + (bv ? bv[j] : 0.0));
        wm[rr] = (float)mu;
        wr[rr] = (float)rs;
    }
    const char *what = rms ? "rmsnorm y" : bias ? "layernorm y" : "layernorm y (no bias)";
    tk_expect_close(what, tk_f32(&r, y), want, n, 1e-5, 1e-5);
    const mg_node *nd = y->src;
    TK_CHECK(nd->n_out == (rms ? 2 : 3), "outputs %d", nd->n_out);
    TK_CHECK(nd->out[1]->ndim == 2 && nd->out[1]->shape[0] == 2 && nd->out[1]->shape[1] == 3, "stat shape");
    if (rms) {
        tk_expect_close("rmsnorm rstd", tk_f32(&r, nd->out[1]), wr, rows, 1e-5, 0);
    } else {
        tk_expect_close("layernorm mean", tk_f32(&r, nd->out[1]), wm, rows, 1e-6, 1e-6);
        tk_expect_close("layernorm rstd", tk_f32(&r, nd->out[2]), wr, rows, 1e-5, 0);
    }
    free(want);
    free(wm);
    free(wr);
    tk_release(&r);
    mg_graph_free(g);
}

static void fwd_layernorm(void) {
    check_norm(false, true, 10, 1e-5f);
    check_norm(false, false, 7, 1e-5f);
    check_norm(false, true, 1, 1e-5f); /* N = 1: y = b */
}
static void fwd_rmsnorm(void) {
    check_norm(true, false, 10, 1e-6f);
    check_norm(true, false, 33, 1e-5f);
}

static void fwd_errors(void) {
    mg_graph *g = mg_graph_new();
    mg_tensor *x = mg_input(g, "x", MG_F32, 2, (int64_t[]){3, 4});
    mg_tensor *w = mg_input(g, "w", MG_F32, 1, (int64_t[]){5}), *b = mg_input(g, "b", MG_F32, 1, (int64_t[]){4});
    TK_CHECK(mg_layernorm(g, x, w, b, 1e-5f) == NULL, "layernorm with w [5] on x [3, 4] must fail");
    const mg_error *e = mg_graph_error(g);
    TK_CHECK(e->code == MG_ERR_SHAPE, "code %d", e->code);
    TK_CHECK(strstr(e->msg, "layernorm") && strstr(e->msg, "[3, 4]") && strstr(e->msg, "[5]"), "message: %s",
             e->msg);
    TK_CHECK(mg_rmsnorm(g, NULL, w, 1e-5f) == NULL && strstr(mg_graph_error(g)->msg, "layernorm"),
             "first error kept");
    mg_graph_free(g);

    g = mg_graph_new();
    x = mg_input(g, "x", MG_F32, 2, (int64_t[]){3, 4});
    w = mg_input(g, "w", MG_F32, 2, (int64_t[]){1, 4});
    TK_CHECK(mg_rmsnorm(g, x, w, 1e-5f) == NULL, "rmsnorm with w [1, 4]");
    e = mg_graph_error(g);
    TK_CHECK(e->code == MG_ERR_SHAPE && strstr(e->msg, "rmsnorm"), "message: %s", e->msg);
    mg_graph_free(g);

    g = mg_graph_new();
    x = mg_input(g, "x", MG_I32, 2, (int64_t[]){3, 4});
    w = mg_input(g, "w", MG_F32, 1, (int64_t[]){4});
    TK_CHECK(mg_layernorm(g, x, w, NULL, 1e-5f) == NULL && mg_graph_error(g)->code == MG_ERR_SHAPE, "i32 x");
    mg_graph_free(g);
}

/* ---- gradients ------------------------------------------------------------------------ */
/* Checks each differentiable leaf on its own (the others as constant inputs), then
 * all together. tk_gradcheck copies a later leaf's analytic gradient after probing
 * the earlier leaves, from a run whose last input was perturbed by -eps, so in the
 * joint check only the first leaf is exact; the per-leaf checks are the precise ones
 * and the joint one runs at a smaller eps (3e-3: FD noise ~1e-4, well under atol). */
static void gradcheck_each(const char *name, int n, const tk_leaf *leaves, tk_build_fn fn, const tk_grad_opts *o) {
    char label[128];
    tk_leaf l[8];
    for (int i = 0; i < n; i++) {
        if (!leaves[i].diff) continue;
        for (int j = 0; j < n; j++) {
            l[j] = leaves[j];
            l[j].diff = j == i;
        }
        snprintf(label, sizeof label, "%s d/d%s", name, leaves[i].name);
        tk_gradcheck(label, n, l, fn, NULL, o);
    }
    tk_grad_opts joint = o ? *o : (tk_grad_opts){0};
    joint.eps = 3e-3;
    snprintf(label, sizeof label, "%s jointly", name);
    tk_gradcheck(label, n, leaves, fn, NULL, &joint);
}

static mg_tensor *gb_ln(mg_graph *g, mg_tensor *const *l, void *c) {
    (void)c;
    return mg_layernorm(g, l[0], l[1], l[2], 1e-5f);
}
static mg_tensor *gb_ln_nobias(mg_graph *g, mg_tensor *const *l, void *c) {
    (void)c;
    return mg_layernorm(g, l[0], l[1], NULL, 1e-5f);
}
static mg_tensor *gb_rms(mg_graph *g, mg_tensor *const *l, void *c) {
    (void)c;
    return mg_rmsnorm(g, l[0], l[1], 1e-5f);
}
/* x has spread 4 over 8-16 elements: the normalisation is smooth at eps = 1e-2. */
static void grad_layernorm(void) {
    tk_leaf l[] = {{"x", MG_F32, 3, {2, 3, 8}, true, -2, 2},
                   {"w", MG_F32, 1, {8}, true, 0.5, 1.5},
                   {"b", MG_F32, 1, {8}, true, -1, 1}};
    gradcheck_each("layernorm", 3, l, gb_ln, NULL);
    tk_leaf l2[] = {{"x", MG_F32, 2, {5, 16}, true, -2, 2}, {"w", MG_F32, 1, {16}, true, -1.5, 1.5}};
    gradcheck_each("layernorm (no bias)", 2, l2, gb_ln_nobias, NULL);
}
static void grad_rmsnorm(void) {
    tk_leaf l[] = {{"x", MG_F32, 3, {2, 3, 8}, true, -2, 2}, {"w", MG_F32, 1, {8}, true, 0.5, 1.5}};
    gradcheck_each("rmsnorm", 2, l, gb_rms, NULL);
    tk_leaf l2[] = {{"x", MG_F32, 2, {4, 12}, true, 0.5, 2}, {"w", MG_F32, 1, {12}, true, -1.5, 1.5}};
    gradcheck_each("rmsnorm (x > 0, w of both signs)", 2, l2, gb_rms, NULL);
}

int main(int argc, char **argv) {
    static const tk_case cases[] = {
        {"forward.layernorm", fwd_layernorm},
        {"forward.rmsnorm", fwd_rmsnorm},
        {"forward.errors_norm", fwd_errors},
        {"grad.layernorm", grad_layernorm},
        {"grad.rmsnorm", grad_rmsnorm},
    };
    return tk_main(argc, argv, cases, (int)(sizeof cases / sizeof *cases));
}

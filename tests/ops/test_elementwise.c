/* Elementwise ops with broadcasting and reductions: forward against naive loops,
 * gradients against finite differences. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "testkit.h"

/* ---- naive references ------------------------------------------------------------ */
/* Offset in a broadcast operand (shape sa, rank na) of output multi-index idx (rank n). */
static int64_t bcast_offset(int n, const int64_t *idx, int na, const int64_t *sa) {
    int64_t off = 0;
    for (int i = 0; i < na; i++) {
        int64_t d = sa[i], k = idx[n - na + i];
        off = off * d + (d == 1 ? 0 : k);
    }
    return off;
}

static void unravel(int64_t i, int n, const int64_t *shape, int64_t *idx) {
    for (int d = n - 1; d >= 0; d--) {
        idx[d] = i % shape[d];
        i /= shape[d];
    }
}

typedef enum { ADD, SUB, MUL } binop;

static void check_binary(binop op, int na, const int64_t *sa, int nb, const int64_t *sb) {
    mg_graph *g = mg_graph_new();
    mg_tensor *a = mg_input(g, "a", MG_F32, na, sa), *b = mg_input(g, "b", MG_F32, nb, sb);
    mg_tensor *y = op == ADD ? mg_add(g, a, b) : op == SUB ? mg_sub(g, a, b) : mg_mul(g, a, b);
    tk_run r;
    if (!y || tk_prepare(&r, g)) {
        TK_CHECK(0, "build: %s", mg_graph_error(g)->msg);
        mg_graph_free(g);
        return;
    }
    tk_rng rng = {11};
    tk_fill(&rng, tk_f32(&r, a), mg_numel(a), -2, 2);
    tk_fill(&rng, tk_f32(&r, b), mg_numel(b), -2, 2);
    TK_CHECK(tk_exec(&r) == 0, "exec");
    int64_t n = mg_numel(y), idx[MG_MAX_DIMS];
    float *want = malloc((size_t)n * sizeof *want);
    const float *av = tk_f32(&r, a), *bv = tk_f32(&r, b);
    for (int64_t i = 0; i < n; i++) {
        unravel(i, y->ndim, y->shape, idx);
        float x = av[bcast_offset(y->ndim, idx, na, sa)], z = bv[bcast_offset(y->ndim, idx, nb, sb)];
        want[i] = op == ADD ? x + z : op == SUB ? x - z : x * z;
    }
    tk_expect_close("binary forward", tk_f32(&r, y), want, n, 0, 0); /* one rounding: exact */
    free(want);
    tk_release(&r);
    mg_graph_free(g);
}

static void binary_shapes(binop op) {
    check_binary(op, 2, (int64_t[]){3, 4}, 2, (int64_t[]){3, 4});
    check_binary(op, 3, (int64_t[]){2, 3, 4}, 1, (int64_t[]){4});
    check_binary(op, 3, (int64_t[]){2, 3, 4}, 3, (int64_t[]){2, 1, 4});
    check_binary(op, 2, (int64_t[]){3, 1}, 3, (int64_t[]){2, 1, 5});
}
static void fwd_add(void) { binary_shapes(ADD); }
static void fwd_sub(void) { binary_shapes(SUB); }
static void fwd_mul(void) { binary_shapes(MUL); }

/* One-input ops checked against a reference computed by fn. */
typedef mg_tensor *(*unary_build)(mg_graph *g, mg_tensor *x);
static void check_unary(const char *what, int nx, const int64_t *sx, unary_build build,
                        void (*ref)(const float *x, const mg_tensor *xt, float *y, const mg_tensor *yt)) {
    mg_graph *g = mg_graph_new();
    mg_tensor *x = mg_input(g, "x", MG_F32, nx, sx);
    mg_tensor *y = build(g, x);
    tk_run r;
    if (!y || tk_prepare(&r, g)) {
        TK_CHECK(0, "%s build: %s", what, mg_graph_error(g)->msg);
        mg_graph_free(g);
        return;
    }
    tk_rng rng = {5};
    tk_fill(&rng, tk_f32(&r, x), mg_numel(x), -2, 2);
    TK_CHECK(tk_exec(&r) == 0, "exec");
    int64_t n = mg_numel(y);
    float *want = calloc((size_t)n, sizeof *want);
    ref(tk_f32(&r, x), x, want, y);
    tk_expect_close(what, tk_f32(&r, y), want, n, 1e-6, 1e-6);
    free(want);
    tk_release(&r);
    mg_graph_free(g);
}

static mg_tensor *b_scale(mg_graph *g, mg_tensor *x) { return mg_scale(g, x, -0.75f); }
static void r_scale(const float *x, const mg_tensor *xt, float *y, const mg_tensor *yt) {
    (void)yt;
    for (int64_t i = 0; i < mg_numel(xt); i++) y[i] = -0.75f * x[i];
}
static void fwd_scale(void) { check_unary("scale", 2, (int64_t[]){5, 7}, b_scale, r_scale); }

static mg_tensor *b_expand(mg_graph *g, mg_tensor *x) { return mg_expand(g, x, 3, (int64_t[]){2, 3, 4}); }
static void r_expand(const float *x, const mg_tensor *xt, float *y, const mg_tensor *yt) {
    int64_t idx[MG_MAX_DIMS];
    for (int64_t i = 0; i < mg_numel(yt); i++) {
        unravel(i, yt->ndim, yt->shape, idx);
        y[i] = x[bcast_offset(yt->ndim, idx, xt->ndim, xt->shape)];
    }
}
static void fwd_expand(void) { check_unary("expand", 2, (int64_t[]){3, 1}, b_expand, r_expand); }

static mg_tensor *b_sum_to(mg_graph *g, mg_tensor *x) { return mg_sum_to(g, x, 2, (int64_t[]){1, 4}); }
static void r_sum_to(const float *x, const mg_tensor *xt, float *y, const mg_tensor *yt) {
    int64_t idx[MG_MAX_DIMS];
    double acc[4] = {0};
    (void)yt;
    for (int64_t i = 0; i < mg_numel(xt); i++) {
        unravel(i, xt->ndim, xt->shape, idx);
        acc[idx[2]] += x[i];
    }
    for (int j = 0; j < 4; j++) y[j] = (float)acc[j];
}
static void fwd_sum_to(void) { check_unary("sum_to", 3, (int64_t[]){2, 3, 4}, b_sum_to, r_sum_to); }

static int reduce_dim = 1, reduce_mean = 0;
static mg_tensor *b_reduce(mg_graph *g, mg_tensor *x) {
    return reduce_mean ? mg_mean(g, x, reduce_dim, false) : mg_sum(g, x, reduce_dim, false);
}
static void r_reduce(const float *x, const mg_tensor *xt, float *y, const mg_tensor *yt) {
    int64_t idx[MG_MAX_DIMS];
    int64_t n_out = mg_numel(yt);
    double *acc = calloc((size_t)n_out, sizeof *acc);
    for (int64_t i = 0; i < mg_numel(xt); i++) {
        unravel(i, xt->ndim, xt->shape, idx);
        int64_t o = 0;
        if (reduce_dim != MG_ALL_AXES)
            for (int d = 0; d < xt->ndim; d++)
                if (d != reduce_dim) o = o * xt->shape[d] + idx[d];
        acc[o] += x[i];
    }
    int64_t len = reduce_dim == MG_ALL_AXES ? mg_numel(xt) : xt->shape[reduce_dim];
    for (int64_t o = 0; o < n_out; o++) y[o] = (float)(reduce_mean ? acc[o] / (double)len : acc[o]);
    free(acc);
}
static void reductions(int mean) {
    reduce_mean = mean;
    int dims[] = {0, 1, 2, MG_ALL_AXES};
    for (int i = 0; i < 4; i++) {
        reduce_dim = dims[i];
        check_unary(mean ? "mean" : "sum", 3, (int64_t[]){3, 4, 5}, b_reduce, r_reduce);
    }
}
static void fwd_sum(void) { reductions(0); }
static void fwd_mean(void) { reductions(1); }

static void fwd_bias_add(void) {
    mg_graph *g = mg_graph_new();
    mg_tensor *x = mg_input(g, "x", MG_F32, 3, (int64_t[]){2, 3, 5}), *b = mg_input(g, "b", MG_F32, 1, (int64_t[]){5});
    mg_tensor *y = mg_bias_add(g, x, b);
    tk_run r;
    if (!y || tk_prepare(&r, g)) {
        TK_CHECK(0, "build");
        mg_graph_free(g);
        return;
    }
    tk_rng rng = {3};
    tk_fill(&rng, tk_f32(&r, x), 30, -1, 1);
    tk_fill(&rng, tk_f32(&r, b), 5, -1, 1);
    tk_exec(&r);
    float want[30];
    for (int i = 0; i < 30; i++) want[i] = tk_f32(&r, x)[i] + tk_f32(&r, b)[i % 5];
    tk_expect_close("bias_add", tk_f32(&r, y), want, 30, 0, 0);
    tk_release(&r);
    mg_graph_free(g);
}

static void fwd_sumsq(void) {
    mg_graph *g = mg_graph_new();
    mg_tensor *x = mg_param(g, "x", 2, (int64_t[]){3, 4}, (mg_init){MG_INIT_NORMAL, 1.0f});
    mg_tensor *w = mg_param(g, "w", 1, (int64_t[]){7}, (mg_init){MG_INIT_NORMAL, 1.0f});
    mg_tensor *in[2] = {x, w};
    mg_node *n = mg_node_new(g, MG_OP_SUMSQ, NULL, 2, in, "sq");
    tk_run r;
    if (!n || tk_prepare(&r, g)) {
        TK_CHECK(0, "build");
        mg_graph_free(g);
        return;
    }
    tk_exec(&r);
    double s = 0;
    for (int i = 0; i < 12; i++) s += (double)tk_f32(&r, x)[i] * tk_f32(&r, x)[i];
    for (int i = 0; i < 7; i++) s += (double)tk_f32(&r, w)[i] * tk_f32(&r, w)[i];
    float want = (float)s;
    tk_expect_close("sumsq", tk_f32(&r, n->out[0]), &want, 1, 1e-6, 0);
    tk_release(&r);
    mg_graph_free(g);
}

/* sumsq's count of zeros (--log-num-zeros-in-grad): -0 is a zero (torch.count_nonzero
 * agrees), a subnormal is not */
static void fwd_sumsq_zeros(void) {
    mg_graph *g = mg_graph_new();
    mg_tensor *x = mg_param(g, "x", 2, (int64_t[]){3, 4}, (mg_init){MG_INIT_NORMAL, 1.0f});
    mg_tensor *w = mg_param(g, "w", 1, (int64_t[]){7}, (mg_init){MG_INIT_NORMAL, 1.0f});
    mg_tensor *in[2] = {x, w};
    mg_attrs at = {.sumsq = {true}};
    mg_node *n = mg_node_new(g, MG_OP_SUMSQ, &at, 2, in, "zeros");
    tk_run r;
    if (!n || tk_prepare(&r, g)) {
        TK_CHECK(0, "build");
        mg_graph_free(g);
        return;
    }
    float *xv = tk_f32(&r, x), *wv = tk_f32(&r, w);
    xv[0] = xv[5] = xv[11] = 0.0f;
    xv[7] = -0.0f;
    xv[3] = 1e-40f;
    wv[6] = 0.0f;
    tk_exec(&r);
    float want = 5;
    tk_expect_close("sumsq zeros", tk_f32(&r, n->out[0]), &want, 1, 0, 0);
    tk_release(&r);
    mg_graph_free(g);
}

static void fwd_errors(void) {
    mg_graph *g = mg_graph_new();
    mg_tensor *a = mg_input(g, "a", MG_F32, 2, (int64_t[]){3, 4}), *b = mg_input(g, "b", MG_F32, 2, (int64_t[]){3, 5});
    TK_CHECK(mg_add(g, a, b) == NULL, "add of [3,4] and [3,5] must fail");
    const mg_error *e = mg_graph_error(g);
    TK_CHECK(e->code == MG_ERR_SHAPE, "code %d", e->code);
    TK_CHECK(strstr(e->msg, "add") && strstr(e->msg, "[3, 4]") && strstr(e->msg, "[3, 5]"), "message: %s", e->msg);
    /* a NULL input propagates without overwriting the first error */
    TK_CHECK(mg_scale(g, NULL, 2.0f) == NULL && strstr(mg_graph_error(g)->msg, "add"), "first error kept");
    mg_graph_free(g);

    g = mg_graph_new();
    mg_tensor *x = mg_input(g, "x", MG_F32, 2, (int64_t[]){2, 3});
    TK_CHECK(mg_bias_add(g, x, mg_input(g, "b", MG_F32, 1, (int64_t[]){2})) == NULL, "bias of wrong size");
    TK_CHECK(strstr(mg_graph_error(g)->msg, "bias_add") != NULL, "message: %s", mg_graph_error(g)->msg);
    mg_graph_free(g);
    g = mg_graph_new();
    x = mg_input(g, "x", MG_F32, 2, (int64_t[]){2, 3});
    TK_CHECK(mg_sum(g, x, 2, false) == NULL && mg_graph_error(g)->code == MG_ERR_SHAPE, "sum over missing dim");
    mg_graph_free(g);
}

/* ---- gradients --------------------------------------------------------------------- */
static mg_tensor *gb_add(mg_graph *g, mg_tensor *const *l, void *c) { (void)c; return mg_add(g, l[0], l[1]); }
static mg_tensor *gb_sub(mg_graph *g, mg_tensor *const *l, void *c) { (void)c; return mg_sub(g, l[0], l[1]); }
static mg_tensor *gb_mul(mg_graph *g, mg_tensor *const *l, void *c) { (void)c; return mg_mul(g, l[0], l[1]); }
/* x used twice: autodiff must add both contributions */
static mg_tensor *gb_mul_self(mg_graph *g, mg_tensor *const *l, void *c) { (void)c; return mg_mul(g, l[0], l[0]); }

static void grad_binary(tk_build_fn fn, const char *name) {
    tk_leaf same[] = {{"a", MG_F32, 2, {3, 4}, true, -1, 1}, {"b", MG_F32, 2, {3, 4}, true, -1, 1}};
    tk_leaf bc[] = {{"a", MG_F32, 3, {2, 3, 4}, true, -1, 1}, {"b", MG_F32, 3, {2, 1, 4}, true, -1, 1}};
    tk_leaf bc2[] = {{"a", MG_F32, 2, {3, 1}, true, -1, 1}, {"b", MG_F32, 3, {2, 1, 5}, true, -1, 1}};
    char label[64];
    snprintf(label, sizeof label, "%s same shape", name);
    tk_gradcheck(label, 2, same, fn, NULL, NULL);
    snprintf(label, sizeof label, "%s broadcast", name);
    tk_gradcheck(label, 2, bc, fn, NULL, NULL);
    snprintf(label, sizeof label, "%s broadcast both", name);
    tk_gradcheck(label, 2, bc2, fn, NULL, NULL);
}
static void grad_add(void) { grad_binary(gb_add, "add"); }
static void grad_sub(void) { grad_binary(gb_sub, "sub"); }
static void grad_mul(void) {
    grad_binary(gb_mul, "mul");
    tk_leaf x[] = {{"x", MG_F32, 1, {6}, true, -1, 1}};
    tk_gradcheck("mul x*x (reuse)", 1, x, gb_mul_self, NULL, NULL);
}

static mg_tensor *gb_scale(mg_graph *g, mg_tensor *const *l, void *c) { (void)c; return mg_scale(g, l[0], 2.5f); }
static void grad_scale(void) {
    tk_leaf x[] = {{"x", MG_F32, 2, {3, 5}, true, -1, 1}};
    tk_gradcheck("scale", 1, x, gb_scale, NULL, NULL);
}
static mg_tensor *gb_bias(mg_graph *g, mg_tensor *const *l, void *c) { (void)c; return mg_bias_add(g, l[0], l[1]); }
static void grad_bias_add(void) {
    tk_leaf x[] = {{"x", MG_F32, 3, {2, 3, 4}, true, -1, 1}, {"b", MG_F32, 1, {4}, true, -1, 1}};
    tk_gradcheck("bias_add", 2, x, gb_bias, NULL, NULL);
}
static mg_tensor *gb_expand(mg_graph *g, mg_tensor *const *l, void *c) {
    (void)c;
    return mg_expand(g, l[0], 3, (int64_t[]){2, 3, 4});
}
static void grad_expand(void) {
    tk_leaf x[] = {{"x", MG_F32, 2, {3, 1}, true, -1, 1}};
    tk_gradcheck("expand", 1, x, gb_expand, NULL, NULL);
}
static mg_tensor *gb_sum_to(mg_graph *g, mg_tensor *const *l, void *c) {
    (void)c;
    return mg_sum_to(g, l[0], 2, (int64_t[]){3, 1});
}
static void grad_sum_to(void) {
    tk_leaf x[] = {{"x", MG_F32, 3, {2, 3, 4}, true, -1, 1}};
    tk_gradcheck("sum_to", 1, x, gb_sum_to, NULL, NULL);
}
static int g_dim;
static mg_tensor *gb_sum(mg_graph *g, mg_tensor *const *l, void *c) { (void)c; return mg_sum(g, l[0], g_dim, false); }
static mg_tensor *gb_mean(mg_graph *g, mg_tensor *const *l, void *c) { (void)c; return mg_mean(g, l[0], g_dim, true); }
static void grad_reduce(tk_build_fn fn, const char *name) {
    tk_leaf x[] = {{"x", MG_F32, 3, {2, 3, 4}, true, -1, 1}};
    int dims[] = {0, 1, 2, MG_ALL_AXES};
    for (int i = 0; i < 4; i++) {
        g_dim = dims[i];
        tk_gradcheck(name, 1, x, fn, NULL, NULL);
    }
}
static void grad_sum(void) { grad_reduce(gb_sum, "sum"); }
static void grad_mean(void) { grad_reduce(gb_mean, "mean"); }

int main(int argc, char **argv) {
    static const tk_case cases[] = {
        {"forward.add", fwd_add},         {"forward.sub", fwd_sub},
        {"forward.mul", fwd_mul},         {"forward.scale", fwd_scale},
        {"forward.bias_add", fwd_bias_add}, {"forward.expand", fwd_expand},
        {"forward.sum_to", fwd_sum_to},   {"forward.sum", fwd_sum},
        {"forward.mean", fwd_mean},       {"forward.sumsq", fwd_sumsq}, {"forward.sumsq_zeros", fwd_sumsq_zeros},
        {"forward.errors_elementwise", fwd_errors},
        {"grad.add", grad_add},           {"grad.sub", grad_sub},
        {"grad.mul", grad_mul},           {"grad.scale", grad_scale},
        {"grad.bias_add", grad_bias_add}, {"grad.expand", grad_expand},
        {"grad.sum_to", grad_sum_to},     {"grad.sum", grad_sum},
        {"grad.mean", grad_mean},
    };
    return tk_main(argc, argv, cases, (int)(sizeof cases / sizeof *cases));
}

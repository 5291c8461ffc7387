/* matmul and linear: forward against a naive double-accumulating loop, gradients
 * against finite differences (all four transpose combinations, plain 2-D, batched,
 * and a 2-D B shared across a batched A), and builder errors. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "testkit.h"

/* Forward tolerance: sgemm accumulates K <= 40 products of values in [-1, 1] in float
 * (blocked order); the error is a few K * 2^-24, far below 1e-5 absolute. */
#define FWD_RTOL 1e-5
#define FWD_ATOL 1e-5

typedef struct mm_case {
    int na, nb;
    int64_t sa[MG_MAX_DIMS], sb[MG_MAX_DIMS];
    bool ta, tb;
} mm_case;

/* C[b, i, j] = sum_k op(A)[b, i, k] op(B)[b', k, j] in double (b' = 0 when B is 2-D). */
static void ref_matmul(const mm_case *c, const float *A, const float *B, float *C) {
    int na = c->na, nb = c->nb;
    int64_t batch = 1;
    for (int i = 0; i < na - 2; i++) batch *= c->sa[i];
    int64_t M = c->ta ? c->sa[na - 1] : c->sa[na - 2], K = c->ta ? c->sa[na - 2] : c->sa[na - 1];
    int64_t N = c->tb ? c->sb[nb - 2] : c->sb[nb - 1];
    bool shared = nb == 2;
    for (int64_t b = 0; b < batch; b++) {
        const float *Ab = A + b * M * K, *Bb = B + (shared ? 0 : b * K * N);
        float *Cb = C + b * M * N;
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) {
                double s = 0;
                for (int64_t k = 0; k < K; k++) {
                    double av = c->ta ? Ab[k * M + i] : Ab[i * K + k];
                    double bv = c->tb ? Bb[j * K + k] : Bb[k * N + j];
                    s += av * bv;
                }
                Cb[i * N + j] = (float)s;
            }
    }
}

static void check_matmul(const char *what, const mm_case *c) {
    mg_graph *g = mg_graph_new();
    mg_tensor *a = mg_input(g, "a", MG_F32, c->na, c->sa), *b = mg_input(g, "b", MG_F32, c->nb, c->sb);
    mg_tensor *y = mg_matmul(g, a, b, c->ta, c->tb);
    tk_run r;
    if (!y || tk_prepare(&r, g)) {
        TK_CHECK(0, "%s build: %s", what, mg_graph_error(g)->msg);
        mg_graph_free(g);
        return;
    }
    tk_rng rng = {21};
    tk_fill(&rng, tk_f32(&r, a), mg_numel(a), -1, 1);
    tk_fill(&rng, tk_f32(&r, b), mg_numel(b), -1, 1);
    TK_CHECK(tk_exec(&r) == 0, "%s exec", what);
    int64_t n = mg_numel(y);
    float *want = malloc((size_t)n * sizeof *want);
    ref_matmul(c, tk_f32(&r, a), tk_f32(&r, b), want);
    tk_expect_close(what, tk_f32(&r, y), want, n, FWD_RTOL, FWD_ATOL);
    free(want);
    tk_release(&r);
    mg_graph_free(g);
}

/* A [.., M=5, K=7] / [.., 7, 5]; B [K=7, N=3] / [3, 7] */
static mm_case make_case(int batch_kind, bool ta, bool tb) {
    mm_case c = {0};
    int64_t M = 5, K = 7, N = 3;
    int lead = 0;
    int64_t L[2] = {2, 3};
    if (batch_kind == 1 || batch_kind == 2) lead = 2; /* 1: batched B, 2: shared 2-D B */
    c.na = lead + 2;
    for (int i = 0; i < lead; i++) c.sa[i] = L[i];
    c.sa[lead] = ta ? K : M;
    c.sa[lead + 1] = ta ? M : K;
    int lb = batch_kind == 1 ? lead : 0;
    c.nb = lb + 2;
    for (int i = 0; i < lb; i++) c.sb[i] = L[i];
    c.sb[lb] = tb ? N : K;
    c.sb[lb + 1] = tb ? K : N;
    c.ta = ta;
    c.tb = tb;
    return c;
}

static const char *kind_name[] = {"2-D", "batched", "shared-B"};

static void fwd_matmul(void) {
    for (int kind = 0; kind < 3; kind++)
        for (int t = 0; t < 4; t++) {
            char what[64];
            snprintf(what, sizeof what, "matmul %s ta=%d tb=%d", kind_name[kind], t >> 1, t & 1);
            mm_case c = make_case(kind, t >> 1, t & 1);
            check_matmul(what, &c);
        }
    /* larger, so sgemm takes its blocked paths */
    mm_case big = {3, 2, {4, 33, 40}, {40, 65}, false, false};
    check_matmul("matmul shared-B large", &big);
    mm_case bigt = {3, 3, {4, 40, 33}, {4, 65, 40}, true, true};
    check_matmul("matmul batched large TT", &bigt);
}

static void fwd_linear(void) {
    mg_graph *g = mg_graph_new();
    int64_t sx[3] = {2, 3, 6}, sw[2] = {4, 6}, sb[1] = {4};
    mg_tensor *x = mg_input(g, "x", MG_F32, 3, sx), *w = mg_input(g, "w", MG_F32, 2, sw);
    mg_tensor *b = mg_input(g, "b", MG_F32, 1, sb);
    mg_tensor *y = mg_linear(g, x, w, b), *y0 = mg_linear(g, x, w, NULL);
    tk_run r;
    if (!y || !y0 || tk_prepare(&r, g)) {
        TK_CHECK(0, "linear build: %s", mg_graph_error(g)->msg);
        mg_graph_free(g);
        return;
    }
    TK_CHECK(y->ndim == 3 && y->shape[0] == 2 && y->shape[1] == 3 && y->shape[2] == 4, "linear shape");
    tk_rng rng = {3};
    tk_fill(&rng, tk_f32(&r, x), mg_numel(x), -1, 1);
    tk_fill(&rng, tk_f32(&r, w), mg_numel(w), -1, 1);
    tk_fill(&rng, tk_f32(&r, b), mg_numel(b), -1, 1);
    TK_CHECK(tk_exec(&r) == 0, "linear exec");
    const float *xv = tk_f32(&r, x), *wv = tk_f32(&r, w), *bv = tk_f32(&r, b);
    float want[24], want0[24];
    for (int t = 0; t < 6; t++)
        for (int o = 0; o < 4; o++) {
            double s = 0;
            for (int i = 0; i < 6; i++) s += (double)xv[t * 6 + i] * wv[o * 6 + i];
            want0[t * 4 + o] = (float)s;
            want[t * 4 + o] = (float)(s + bv[o]);
        }
    tk_expect_close("linear", tk_f32(&r, y), want, 24, FWD_RTOL, FWD_ATOL);
    tk_expect_close("linear no bias", tk_f32(&r, y0), want0, 24, FWD_RTOL, FWD_ATOL);
    tk_release(&r);
    mg_graph_free(g);
}

/* ---- gradients ---------------------------------------------------------------------- */
/* tk_gradcheck reads a leaf's analytic gradient after the previous leaf's last probe
 * left the graph executed at (value - eps), which skews the gradients of later leaves
 * that depend on it (reported to the test-kit owner). Until that is fixed, check each
 * differentiable leaf in its own run (the others fed as plain inputs). */
static void gradcheck_each(const char *label, int n, const tk_leaf *leaves, tk_build_fn build, void *ctx) {
    for (int i = 0; i < n; i++) {
        if (!leaves[i].diff) continue;
        tk_leaf one[16];
        memcpy(one, leaves, (size_t)n * sizeof *one);
        for (int j = 0; j < n; j++) one[j].diff = j == i;
        char l[160];
        snprintf(l, sizeof l, "%s (d/d %s)", label, leaves[i].name);
        tk_gradcheck(l, n, one, build, ctx, NULL);
    }
}

static mg_tensor *gb_matmul(mg_graph *g, mg_tensor *const *l, void *ctx) {
    const mm_case *c = ctx;
    return mg_matmul(g, l[0], l[1], c->ta, c->tb);
}

static void grad_matmul(void) {
    /* matmul is bilinear: central differences are exact up to float rounding of the
     * loss, so the default tolerances hold with a wide margin. */
    for (int kind = 0; kind < 3; kind++)
        for (int t = 0; t < 4; t++) {
            mm_case c = make_case(kind, t >> 1, t & 1);
            tk_leaf leaves[2] = {{"a", MG_F32, c.na, {0}, true, -1, 1}, {"b", MG_F32, c.nb, {0}, true, -1, 1}};
            memcpy(leaves[0].shape, c.sa, sizeof c.sa);
            memcpy(leaves[1].shape, c.sb, sizeof c.sb);
            char label[64];
            snprintf(label, sizeof label, "matmul %s ta=%d tb=%d", kind_name[kind], t >> 1, t & 1);
            gradcheck_each(label, 2, leaves, gb_matmul, &c);
        }
    /* a 4-D A over a shared 2-D B */
    mm_case c4 = {4, 2, {2, 2, 3, 4}, {4, 5}, false, false};
    tk_leaf l4[2] = {{"a", MG_F32, 4, {2, 2, 3, 4}, true, -1, 1}, {"b", MG_F32, 2, {4, 5}, true, -1, 1}};
    gradcheck_each("matmul shared-B 4-D", 2, l4, gb_matmul, &c4);
    /* only one side differentiable */
    tk_leaf l1[2] = {{"a", MG_F32, 3, {2, 3, 4}, false, -1, 1}, {"b", MG_F32, 2, {5, 4}, true, -1, 1}};
    mm_case c1 = {3, 2, {2, 3, 4}, {5, 4}, false, true};
    tk_gradcheck("matmul only B", 2, l1, gb_matmul, &c1, NULL);
}

static mg_tensor *gb_linear(mg_graph *g, mg_tensor *const *l, void *ctx) {
    return mg_linear(g, l[0], l[1], ctx ? l[2] : NULL);
}

static void grad_linear(void) {
    tk_leaf l[3] = {{"x", MG_F32, 3, {3, 2, 6}, true, -1, 1},
                    {"w", MG_F32, 2, {4, 6}, true, -1, 1},
                    {"b", MG_F32, 1, {4}, true, -1, 1}};
    gradcheck_each("linear with bias", 3, l, gb_linear, l);
    gradcheck_each("linear without bias", 2, l, gb_linear, NULL);
}

/* ---- builder errors ------------------------------------------------------------------ */
static void expect_shape_error(const char *what, mg_graph *g, const mg_tensor *y, const char *op) {
    const mg_error *e = mg_graph_error(g);
    TK_CHECK(y == NULL, "%s: expected NULL", what);
    TK_CHECK(e->code == MG_ERR_SHAPE, "%s: code %d (%s)", what, e->code, e->msg);
    TK_CHECK(strstr(e->msg, op) != NULL, "%s: message '%s' does not name %s", what, e->msg, op);
}

static void fwd_errors(void) {
    struct {
        const char *what;
        int na, nb;
        int64_t sa[4], sb[4];
        bool ta, tb;
    } bad[] = {
        {"K mismatch", 2, 2, {3, 4}, {5, 6}, false, false},
        {"K mismatch trans_b", 2, 2, {3, 4}, {4, 6}, false, true},
        {"K mismatch trans_a", 2, 2, {3, 4}, {4, 6}, true, false},
        {"rank-1 A", 1, 2, {4}, {4, 6}, false, false},
        {"batch mismatch", 3, 3, {2, 3, 4}, {3, 4, 5}, false, false},
        {"rank mismatch", 3, 4, {2, 3, 4}, {1, 2, 4, 5}, false, false},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        mg_graph *g = mg_graph_new();
        mg_tensor *a = mg_input(g, "a", MG_F32, bad[i].na, bad[i].sa);
        mg_tensor *b = mg_input(g, "b", MG_F32, bad[i].nb, bad[i].sb);
        mg_tensor *y = mg_matmul(g, a, b, bad[i].ta, bad[i].tb);
        expect_shape_error(bad[i].what, g, y, "matmul");
        /* a NULL input propagates without replacing the first error */
        char first[MG_ERROR_MSG_LEN];
        snprintf(first, sizeof first, "%s", mg_graph_error(g)->msg);
        TK_CHECK(mg_matmul(g, y, b, false, false) == NULL, "NULL propagates");
        TK_CHECK(mg_linear(g, y, b, NULL) == NULL, "NULL propagates (linear)");
        TK_CHECK(strcmp(first, mg_graph_error(g)->msg) == 0, "first error kept");
        mg_graph_free(g);
    }
    {
        mg_graph *g = mg_graph_new();
        mg_tensor *x = mg_input(g, "x", MG_F32, 2, (int64_t[]){3, 4});
        mg_tensor *w = mg_input(g, "w", MG_F32, 2, (int64_t[]){5, 6});
        expect_shape_error("linear in mismatch", g, mg_linear(g, x, w, NULL), "matmul");
        mg_graph_free(g);
    }
    {
        mg_graph *g = mg_graph_new();
        mg_tensor *x = mg_input(g, "x", MG_F32, 2, (int64_t[]){3, 4});
        mg_tensor *w = mg_input(g, "w", MG_F32, 2, (int64_t[]){5, 4});
        mg_tensor *b = mg_input(g, "b", MG_F32, 1, (int64_t[]){4});
        expect_shape_error("linear bias mismatch", g, mg_linear(g, x, w, b), "bias_add");
        mg_graph_free(g);
    }
    {
        mg_graph *g = mg_graph_new();
        mg_tensor *a = mg_input(g, "a", MG_I32, 2, (int64_t[]){3, 4});
        mg_tensor *b = mg_input(g, "b", MG_F32, 2, (int64_t[]){4, 4});
        expect_shape_error("i32 input", g, mg_matmul(g, a, b, false, false), "matmul");
        mg_graph_free(g);
    }
}

int main(int argc, char **argv) {
    static const tk_case cases[] = {
        {"forward.matmul", fwd_matmul},
        {"forward.linear", fwd_linear},
        {"forward.errors_matmul", fwd_errors},
        {"grad.matmul", grad_matmul},
        {"grad.linear", grad_linear},
    };
    return tk_main(argc, argv, cases, (int)(sizeof cases / sizeof *cases));
}

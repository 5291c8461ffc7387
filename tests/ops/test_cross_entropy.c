/* xent_count, cross_entropy and cross_entropy_bwd: forward against double loops
 * (ignored targets, large logits, every token ignored, a bad target at run time, a
 * count that is not the node's own, as a rank of a context-parallel run gets), the
 * gradient against finite differences with ignored targets, builder errors. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "testkit.h"

static mg_node *xent_node(mg_graph *g, mg_tensor *logits, mg_tensor *targets, int32_t ignore) {
    mg_tensor *loss = mg_cross_entropy(g, logits, targets, ignore);
    return loss ? loss->src : NULL;
}

/* Per-token lse and the mean loss over non-ignored tokens, in double. */
static double ref_xent(const float *x, const int32_t *tg, int64_t T, int64_t V, int32_t ignore, double *lse) {
    double total = 0;
    int64_t count = 0;
    for (int64_t t = 0; t < T; t++) {
        const float *xr = x + t * V;
        double m = xr[0], s = 0;
        for (int64_t j = 1; j < V; j++) m = fmax(m, xr[j]);
        for (int64_t j = 0; j < V; j++) s += exp((double)xr[j] - m);
        lse[t] = m + log(s);
        if (tg[t] == ignore) continue;
        total += lse[t] - xr[tg[t]];
        count++;
    }
    return count ? total / (double)count : 0.0;
}

enum { T = 10, V = 11 };

static void fwd_cross_entropy(void) {
    mg_graph *g = mg_graph_new();
    mg_tensor *x = mg_input(g, "logits", MG_F32, 3, (int64_t[]){2, 5, V});
    mg_tensor *tg = mg_input(g, "targets", MG_I32, 2, (int64_t[]){2, 5});
    mg_node *n = xent_node(g, x, tg, -100);
    mg_node *n_all = xent_node(g, x, mg_input(g, "ignored", MG_I32, 2, (int64_t[]){2, 5}), -100);
    /* the same tokens' terms over another count (a rank's share under context parallelism) */
    mg_attrs at;
    memset(&at, 0, sizeof at);
    at.xent.ignore_index = -100;
    mg_node *n20 = mg_node_new(g, MG_OP_CROSS_ENTROPY, &at, 3,
                               (mg_tensor *[]){x, tg, mg_input(g, "count20", MG_F32, 1, (int64_t[]){1})}, NULL);
    tk_run r;
    if (!n || !n_all || !n20 || tk_prepare(&r, g)) {
        TK_CHECK(0, "build: %s", mg_graph_error(g)->msg);
        mg_graph_free(g);
        return;
    }
    TK_CHECK(n->n_out == 2 && mg_numel(n->out[0]) == 1 && n->out[1]->ndim == 2 && n->out[1]->shape[1] == 5,
             "outputs: loss [1] and lse [2, 5]");
    tk_rng rng = {17};
    float *xv = tk_f32(&r, x);
    tk_fill(&rng, xv, T * V, -4, 4);
    for (int j = 0; j < V; j++) xv[3 * V + j] = 200.0f + (float)j; /* exp overflows unshifted */
    const int32_t targets[T] = {3, -100, 0, 10, 7, -100, 5, 5, 1, 9};
    memcpy(tk_i32(&r, tg), targets, sizeof targets);
    for (int i = 0; i < T; i++) tk_i32(&r, n_all->in[1])[i] = -100;
    tk_f32(&r, n20->in[2])[0] = 20.0f;
    TK_CHECK(tk_exec(&r) == 0, "exec");
    TK_CHECK(n->in[2]->src && n->in[2]->src->op == MG_OP_XENT_COUNT, "mg_cross_entropy counts with an xent_count node");
    float eight = 8, zero_count = 0;
    tk_expect_close("xent_count", tk_f32(&r, n->in[2]), &eight, 1, 0, 0);
    tk_expect_close("xent_count all ignored", tk_f32(&r, n_all->in[2]), &zero_count, 1, 0, 0);
    double lse[T];
    float want_loss = (float)ref_xent(xv, targets, T, V, -100, lse), want_lse[T];
    for (int t = 0; t < T; t++) want_lse[t] = (float)lse[t];
    /* double accumulation, one rounding to float at the end (expf inside: ~1e-7 relative) */
    tk_expect_close("cross_entropy loss", tk_f32(&r, n->out[0]), &want_loss, 1, 1e-6, 1e-6);
    tk_expect_close("cross_entropy lse", tk_f32(&r, n->out[1]), want_lse, T, 1e-6, 1e-6);
    float want20 = (float)(ref_xent(xv, targets, T, V, -100, lse) * 8.0 / 20.0);
    tk_expect_close("cross_entropy count 20", tk_f32(&r, n20->out[0]), &want20, 1, 1e-6, 1e-6);
    float zero = 0;
    tk_expect_close("cross_entropy all ignored", tk_f32(&r, n_all->out[0]), &zero, 1, 0, 0);
    /* a target outside [0, V) that is not ignore_index is a run-time error */
    tk_i32(&r, tg)[4] = V;
    mg_error err = {0};
    int rc = mg_exec_reference(r.g, r.st, &r.info, &err);
    TK_CHECK(rc == MG_ERR_INVALID && strstr(err.msg, "cross_entropy"), "bad target: rc %d '%s'", rc, err.msg);
    tk_release(&r);
    mg_graph_free(g);
}

static void fwd_cross_entropy_bwd(void) {
    mg_graph *g = mg_graph_new();
    mg_tensor *dl = mg_input(g, "dloss", MG_F32, 1, (int64_t[]){1});
    mg_tensor *x = mg_input(g, "logits", MG_F32, 2, (int64_t[]){T, V});
    mg_tensor *tg = mg_input(g, "targets", MG_I32, 1, (int64_t[]){T});
    mg_tensor *lse = mg_input(g, "lse", MG_F32, 1, (int64_t[]){T});
    mg_tensor *cnt = mg_input(g, "count", MG_F32, 1, (int64_t[]){1});
    mg_attrs at;
    memset(&at, 0, sizeof at);
    at.xent.ignore_index = 2;
    mg_node *n = mg_node_new(g, MG_OP_CROSS_ENTROPY_BWD, &at, 5, (mg_tensor *[]){dl, x, tg, lse, cnt}, NULL);
    /* the same tokens, divided by the count of a larger micro-batch (context parallelism) */
    mg_node *n20 = mg_node_new(g, MG_OP_CROSS_ENTROPY_BWD, &at, 5,
                               (mg_tensor *[]){dl, x, tg, lse, mg_input(g, "count20", MG_F32, 1, (int64_t[]){1})}, NULL);
    /* a count of 0 (no token kept anywhere): zero gradient, not a division by zero */
    mg_node *n0 = mg_node_new(g, MG_OP_CROSS_ENTROPY_BWD, &at, 5,
                              (mg_tensor *[]){dl, x, tg, lse, mg_input(g, "count0", MG_F32, 1, (int64_t[]){1})}, NULL);
    tk_run r;
    if (!n || !n20 || !n0 || tk_prepare(&r, g)) {
        TK_CHECK(0, "build: %s", mg_graph_error(g)->msg);
        mg_graph_free(g);
        return;
    }
    tk_rng rng = {18};
    float *xv = tk_f32(&r, x);
    tk_fill(&rng, xv, T * V, -3, 3);
    const int32_t targets[T] = {2, 4, 2, 0, 10, 6, 6, 2, 1, 3}; /* 2 is ignored: 7 counted */
    memcpy(tk_i32(&r, tg), targets, sizeof targets);
    double l[T];
    ref_xent(xv, targets, T, V, 2, l);
    for (int t = 0; t < T; t++) tk_f32(&r, lse)[t] = (float)l[t];
    tk_f32(&r, dl)[0] = 0.75f;
    tk_f32(&r, cnt)[0] = 7.0f;
    tk_f32(&r, n20->in[4])[0] = 20.0f;
    tk_f32(&r, n0->in[4])[0] = 0.0f;
    for (int i = 0; i < T * V; i++) tk_f32(&r, n->out[0])[i] = NAN; /* must be overwritten */
    TK_CHECK(tk_exec(&r) == 0, "exec");
    float want[T * V], want20[T * V], zero[T * V] = {0};
    for (int t = 0; t < T; t++)
        for (int j = 0; j < V; j++) {
            double p = exp((double)xv[t * V + j] - l[t]);
            want[t * V + j] = targets[t] == 2 ? 0.0f : (float)((p - (j == targets[t])) * 0.75 / 7.0);
            want20[t * V + j] = targets[t] == 2 ? 0.0f : (float)((p - (j == targets[t])) * 0.75 / 20.0);
        }
    tk_expect_close("cross_entropy_bwd", tk_f32(&r, n->out[0]), want, T * V, 1e-5, 1e-7);
    tk_expect_close("cross_entropy_bwd count 20", tk_f32(&r, n20->out[0]), want20, T * V, 1e-5, 1e-7);
    tk_expect_close("cross_entropy_bwd count 0", tk_f32(&r, n0->out[0]), zero, T * V, 0, 0);
    tk_release(&r);
    mg_graph_free(g);
}

/* Targets: a random leaf in [0, 6) followed by two guaranteed zeros, with
 * ignore_index 0: ignored tokens are certain whatever the kit's random draw. */
static mg_tensor *gb_xent_ignore(mg_graph *g, mg_tensor *const *l, void *ctx) {
    (void)ctx;
    mg_tensor *z = mg_zeros(g, MG_I32, 1, (int64_t[]){2});
    mg_tensor *tg = mg_concat(g, 2, (mg_tensor *[]){l[1], z}, 0);
    return mg_cross_entropy(g, l[0], tg, 0);
}

static mg_tensor *gb_xent(mg_graph *g, mg_tensor *const *l, void *ctx) {
    (void)ctx;
    return mg_cross_entropy(g, l[0], l[1], -100);
}

/* Smooth (log-sum-exp); logits in [-2, 2], eps 1e-2: truncation error ~1e-6, far inside
 * the default tolerances. */
static void grad_cross_entropy(void) {
    tk_leaf a[] = {{"logits", MG_F32, 2, {12, 6}, true, -2, 2}, {"targets", MG_I32, 1, {10}, false, 0, 6}};
    tk_gradcheck("cross_entropy with ignored targets", 2, a, gb_xent_ignore, NULL, NULL);
    tk_leaf b[] = {{"logits", MG_F32, 3, {2, 3, 5}, true, -2, 2}, {"targets", MG_I32, 2, {2, 3}, false, 0, 5}};
    tk_gradcheck("cross_entropy 3-D", 2, b, gb_xent, NULL, NULL);
}

static void expect_error(const char *what, mg_graph *g, bool null, const char *op) {
    const mg_error *e = mg_graph_error(g);
    TK_CHECK(null, "%s: expected NULL", what);
    TK_CHECK(e->code == MG_ERR_SHAPE, "%s: code %d (%s)", what, e->code, e->msg);
    TK_CHECK(strstr(e->msg, op) != NULL, "%s: message '%s' does not name %s", what, e->msg, op);
}

static void fwd_errors(void) {
    struct {
        const char *what;
        mg_dtype dx, dt;
        int nx, nt;
        int64_t sx[3], st[3];
    } bad[] = {
        {"targets shape", MG_F32, MG_I32, 3, 2, {2, 5, 7}, {5, 2}},
        {"targets rank", MG_F32, MG_I32, 3, 3, {2, 5, 7}, {2, 5, 7}},
        {"1-D logits", MG_F32, MG_I32, 1, 1, {7}, {1}},
        {"f32 targets", MG_F32, MG_F32, 2, 1, {4, 7}, {4}},
        {"i32 logits", MG_I32, MG_I32, 2, 1, {4, 7}, {4}},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        mg_graph *g = mg_graph_new();
        mg_tensor *x = mg_input(g, "logits", bad[i].dx, bad[i].nx, bad[i].sx);
        mg_tensor *t = mg_input(g, "targets", bad[i].dt, bad[i].nt, bad[i].st);
        expect_error(bad[i].what, g, mg_cross_entropy(g, x, t, -100) == NULL, "cross_entropy");
        char first[MG_ERROR_MSG_LEN];
        snprintf(first, sizeof first, "%s", mg_graph_error(g)->msg);
        TK_CHECK(mg_cross_entropy(g, NULL, t, -100) == NULL && !strcmp(first, mg_graph_error(g)->msg),
                 "NULL keeps the first error");
        mg_graph_free(g);
    }
    mg_graph *g = mg_graph_new();
    mg_tensor *dl = mg_input(g, "dloss", MG_F32, 1, (int64_t[]){2});
    mg_tensor *x = mg_input(g, "logits", MG_F32, 2, (int64_t[]){4, 7});
    mg_tensor *t = mg_input(g, "targets", MG_I32, 1, (int64_t[]){4});
    mg_tensor *lse = mg_input(g, "lse", MG_F32, 1, (int64_t[]){4});
    mg_tensor *cnt = mg_input(g, "count", MG_F32, 1, (int64_t[]){1});
    mg_node *n = mg_node_new(g, MG_OP_CROSS_ENTROPY_BWD, NULL, 5, (mg_tensor *[]){dl, x, t, lse, cnt}, NULL);
    expect_error("bwd dloss not scalar", g, n == NULL, "cross_entropy_bwd");
    mg_graph_free(g);
    g = mg_graph_new();
    x = mg_input(g, "logits", MG_F32, 2, (int64_t[]){4, 7});
    t = mg_input(g, "targets", MG_I32, 1, (int64_t[]){4});
    mg_tensor *icnt = mg_input(g, "icount", MG_I32, 1, (int64_t[]){1});
    n = mg_node_new(g, MG_OP_CROSS_ENTROPY, NULL, 3, (mg_tensor *[]){x, t, icnt}, NULL);
    expect_error("i32 count", g, n == NULL, "cross_entropy");
    mg_graph_free(g);
    g = mg_graph_new();
    x = mg_input(g, "logits", MG_F32, 2, (int64_t[]){4, 7});
    n = mg_node_new(g, MG_OP_XENT_COUNT, NULL, 1, &x, NULL);
    expect_error("f32 targets of xent_count", g, n == NULL, "xent_count");
    mg_graph_free(g);
}

int main(int argc, char **argv) {
    static const tk_case cases[] = {
        {"forward.cross_entropy", fwd_cross_entropy},
        {"forward.cross_entropy_bwd", fwd_cross_entropy_bwd},
        {"forward.errors_cross_entropy", fwd_errors},
        {"grad.cross_entropy", grad_cross_entropy},
    };
    return tk_main(argc, argv, cases, (int)(sizeof cases / sizeof *cases));
}

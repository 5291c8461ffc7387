/* MoE ops: router (top-k, capacity), token counts against a direct reference on the
 * same logits, permute / unpermute, grouped expert matmuls, logsumexp, the aux and
 * z losses: forward against naive loops, gradients against finite differences,
 * builder and run-time errors. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mgraph/comm.h"
#include "mgraph/moe.h"
#include "testkit.h"

#define FWD_RTOL 1e-5
#define FWD_ATOL 1e-6

/* ---- references ---------------------------------------------------------------------- */
/* Top-k by sorting indices (a different method from the op's selection), ties to the
 * lower index. */
static const float *g_row;
static int by_logit_desc(const void *a, const void *b) {
    int i = *(const int *)a, j = *(const int *)b;
    if (g_row[i] != g_row[j]) return g_row[i] > g_row[j] ? -1 : 1;
    return i - j;
}
static void ref_topk(const float *x, int E, int k, int *sel) {
    int idx[64];
    for (int e = 0; e < E; e++) idx[e] = e;
    g_row = x;
    qsort(idx, (size_t)E, sizeof *idx, by_logit_desc);
    for (int j = 0; j < k; j++) sel[j] = idx[j];
}

/* probs / map of the router without capacity, in double. */
static void ref_route(const float *x, int T, int E, int k, bool pre, float *probs, int32_t *map) {
    memset(probs, 0, sizeof(float) * (size_t)(T * E));
    memset(map, 0, sizeof(int32_t) * (size_t)(T * E));
    for (int t = 0; t < T; t++) {
        const float *r = x + t * E;
        int sel[64];
        ref_topk(r, E, k, sel);
        double s = 0, m = r[sel[0]];
        if (pre)
            for (int e = 0; e < E; e++) s += exp(r[e] - m);
        else
            for (int j = 0; j < k; j++) s += exp(r[sel[j]] - m);
        for (int j = 0; j < k; j++) {
            probs[t * E + sel[j]] = (float)(exp(r[sel[j]] - m) / s);
            map[t * E + sel[j]] = 1;
        }
    }
}

static mg_graph *route_graph(int T, int E, const mg_moe_route_opts *o, mg_tensor **x, mg_tensor **p, mg_tensor **m) {
    mg_graph *g = mg_graph_new();
    *x = mg_input(g, "logits", MG_F32, 2, (int64_t[]){T, E});
    mg_moe_route(g, *x, o, p, m);
    return g;
}

/* ---- forward: router ----------------------------------------------------------------- */
static void fwd_route(void) {
    enum { T = 40, E = 6 };
    for (int pre = 0; pre < 2; pre++)
        for (int k = 1; k <= 3; k++) {
            mg_moe_route_opts o = {.topk = k, .pre_softmax = pre, .capacity = 0, .drop_policy = MG_MOE_DROP_PROBS, .pad_to_capacity = false};
            mg_tensor *x, *p, *m;
            mg_graph *g = route_graph(T, E, &o, &x, &p, &m);
            tk_run r;
            if (!p || tk_prepare(&r, g)) {
                TK_CHECK(0, "build: %s", mg_graph_error(g)->msg);
                mg_graph_free(g);
                return;
            }
            tk_rng rng = {11u + (uint64_t)k};
            float *xv = tk_f32(&r, x);
            tk_fill(&rng, xv, T * E, -3, 3);
            xv[5 * E + 1] = xv[5 * E + 4] = 9; /* a tie: the lower expert wins */
            TK_CHECK(tk_exec(&r) == 0, "exec");
            float wp[T * E];
            int32_t wm[T * E];
            ref_route(xv, T, E, k, pre, wp, wm);
            char what[64];
            snprintf(what, sizeof what, "moe_route probs (k %d, pre_softmax %d)", k, pre);
            tk_expect_close(what, tk_f32(&r, p), wp, T * E, FWD_RTOL, 1e-7);
            TK_CHECK(!memcmp(tk_i32(&r, m), wm, sizeof wm), "moe_route map (k %d, pre %d)", k, pre);
            if (k == 1) TK_CHECK(tk_i32(&r, m)[5 * E + 1] == 1 && tk_i32(&r, m)[5 * E + 4] == 0, "tie to lower index");
            tk_release(&r);
            mg_graph_free(g);
        }
}

/* Capacity: Megatron's apply_router_token_dropping, computed directly per expert. */
static void fwd_route_capacity(void) {
    enum { T = 30, E = 4, K = 2 };
    for (int policy = 0; policy < 2; policy++)
        for (int pad = 0; pad < 2; pad++) {
            int64_t cap = mg_moe_capacity(T, K, E, 0.8); /* ceil(15 * 0.8) = 12 < 15 average: drops */
            mg_moe_route_opts o = {.topk = K, .pre_softmax = false, .capacity = cap, .drop_policy = (mg_moe_drop_policy)policy, .pad_to_capacity = pad};
            mg_tensor *x, *p, *m;
            mg_graph *g = route_graph(T, E, &o, &x, &p, &m);
            tk_run r;
            if (!p || tk_prepare(&r, g)) {
                TK_CHECK(0, "build: %s", mg_graph_error(g)->msg);
                mg_graph_free(g);
                return;
            }
            tk_rng rng = {21};
            float *xv = tk_f32(&r, x);
            tk_fill(&rng, xv, T * E, -2, 2);
            for (int t = 0; t < T; t++) xv[t * E] += 1.5f; /* expert 0 overloaded */
            TK_CHECK(tk_exec(&r) == 0, "exec");
            float wp[T * E];
            int32_t wm[T * E];
            ref_route(xv, T, E, K, false, wp, wm);
            for (int e = 0; e < E; e++) {
                /* keep: the cap routed tokens with the highest probability (ties: earlier)
                 * or the earliest cap routed tokens */
                int kept = 0;
                bool keep[T] = {0};
                for (int n = 0; n < cap; n++) {
                    int best = -1;
                    for (int t = 0; t < T; t++) {
                        if (!wm[t * E + e] || keep[t]) continue;
                        if (best < 0 || (policy == MG_MOE_DROP_PROBS && wp[t * E + e] > wp[best * E + e])) best = t;
                    }
                    if (best < 0) break;
                    keep[best] = true;
                    kept++;
                }
                for (int t = 0; t < T && pad && kept < cap; t++)
                    if (!keep[t] && !wm[t * E + e]) keep[t] = true, kept++;
                for (int t = 0; t < T; t++) {
                    float want_p = keep[t] && wm[t * E + e] ? wp[t * E + e] : 0.0f;
                    TK_CHECK(tk_i32(&r, m)[t * E + e] == (int32_t)keep[t], "policy %d pad %d: map[%d, %d]", policy, pad,
                             t, e);
                    TK_CHECK(fabsf(tk_f32(&r, p)[t * E + e] - want_p) <= 1e-6f, "policy %d pad %d: probs[%d, %d]",
                             policy, pad, t, e);
                }
                if (pad) TK_CHECK(kept == cap, "pad: expert %d has %d rows, not %lld", e, kept, (long long)cap);
            }
            tk_release(&r);
            mg_graph_free(g);
        }
}

/* The must-show: tokens per expert (dispatcher counts and the aux-loss counts) equal a
 * direct computation on the same logits; with capacity, min(count, capacity). */
static void fwd_router_counts(void) {
    enum { T = 96, E = 8, K = 2 };
    for (int variant = 0; variant < 3; variant++) {
        int64_t cap = variant ? mg_moe_capacity(T, K, E, 1.0) : 0;
        mg_moe_route_opts o = {.topk = K, .pre_softmax = variant == 1, .capacity = cap, .drop_policy = MG_MOE_DROP_PROBS, .pad_to_capacity = variant == 2};
        mg_graph *g = mg_graph_new();
        mg_tensor *x = mg_input(g, "logits", MG_F32, 2, (int64_t[]){T, E});
        mg_tensor *h = mg_input(g, "h", MG_F32, 2, (int64_t[]){T, 3});
        mg_tensor *p, *m, *counts;
        mg_moe_route(g, x, &o, &p, &m);
        mg_tensor *xs = mg_moe_permute(g, h, m, NULL, mg_moe_dispatch_rows(T, E, &o), &counts);
        mg_tensor *c2 = mg_moe_topk_count(g, x, K);
        tk_run r;
        if (!xs || !c2 || tk_prepare(&r, g)) {
            TK_CHECK(0, "build: %s", mg_graph_error(g)->msg);
            mg_graph_free(g);
            return;
        }
        tk_rng rng = {31};
        float *xv = tk_f32(&r, x);
        tk_fill(&rng, xv, T * E, -1, 1);
        for (int t = 0; t < T; t++) xv[t * E + 3] += 0.7f; /* skewed */
        tk_fill(&rng, tk_f32(&r, h), T * 3, -1, 1);
        TK_CHECK(tk_exec(&r) == 0, "exec");
        int ref[E] = {0};
        for (int t = 0; t < T; t++) {
            int sel[E];
            ref_topk(xv + t * E, E, K, sel);
            for (int j = 0; j < K; j++) ref[sel[j]]++;
        }
        int total = 0;
        for (int e = 0; e < E; e++) {
            int want = cap ? (variant == 2 ? (int)cap : (ref[e] < cap ? ref[e] : (int)cap)) : ref[e];
            TK_CHECK(tk_i32(&r, counts)[e] == want, "variant %d: expert %d counts %d, reference %d", variant, e,
                     tk_i32(&r, counts)[e], want);
            TK_CHECK(tk_f32(&r, c2)[e] == (float)ref[e], "topk_count expert %d: %g, reference %d", e,
                     (double)tk_f32(&r, c2)[e], ref[e]);
            total += tk_i32(&r, counts)[e];
        }
        if (!variant) TK_CHECK(total == T * K, "dropless: %d rows", total);
        if (!variant) TK_CHECK(ref[3] > T * K / E, "the skew shows (%d)", ref[3]);
        tk_release(&r);
        mg_graph_free(g);
    }
}

/* ---- forward: dispatch ----------------------------------------------------------------- */
static void fill_map(tk_rng *rng, int32_t *m, int n) {
    for (int i = 0; i < n; i++) m[i] = tk_uniform(rng, 0, 1) < 0.4f;
}

static void fwd_permute(void) {
    enum { T = 7, E = 3, H = 5, R = T * E + 2 };
    mg_graph *g = mg_graph_new();
    mg_tensor *x = mg_input(g, "x", MG_F32, 2, (int64_t[]){T, H});
    mg_tensor *m = mg_input(g, "map", MG_I32, 2, (int64_t[]){T, E});
    mg_tensor *w = mg_input(g, "w", MG_F32, 2, (int64_t[]){T, E});
    mg_tensor *c, *c2;
    mg_tensor *xs = mg_moe_permute(g, x, m, NULL, R, &c);
    mg_tensor *xw = mg_moe_permute(g, x, m, w, R, &c2);
    mg_tensor *y = mg_moe_unpermute(g, xs, m, w);
    mg_tensor *y1 = mg_moe_unpermute(g, xs, m, NULL);
    tk_run r;
    if (!xw || !y || !y1 || tk_prepare(&r, g)) {
        TK_CHECK(0, "build: %s", mg_graph_error(g)->msg);
        mg_graph_free(g);
        return;
    }
    tk_rng rng = {41};
    float *xv = tk_f32(&r, x), *wv = tk_f32(&r, w);
    int32_t *mv = tk_i32(&r, m);
    tk_fill(&rng, xv, T * H, -1, 1);
    tk_fill(&rng, wv, T * E, 0, 1);
    fill_map(&rng, mv, T * E);
    TK_CHECK(tk_exec(&r) == 0, "exec");
    float want_xs[R * H] = {0}, want_xw[R * H] = {0}, want_y[T * H] = {0}, want_y1[T * H] = {0};
    int row = 0;
    for (int e = 0; e < E; e++) {
        int n = 0;
        for (int t = 0; t < T; t++) {
            if (!mv[t * E + e]) continue;
            for (int j = 0; j < H; j++) {
                want_xs[row * H + j] = xv[t * H + j];
                want_xw[row * H + j] = wv[t * E + e] * xv[t * H + j];
                want_y[t * H + j] += wv[t * E + e] * xv[t * H + j];
                want_y1[t * H + j] += xv[t * H + j];
            }
            row++, n++;
        }
        TK_CHECK(tk_i32(&r, c)[e] == n && tk_i32(&r, c2)[e] == n, "counts[%d] = %d, want %d", e, tk_i32(&r, c)[e], n);
    }
    tk_expect_close("moe_permute", tk_f32(&r, xs), want_xs, R * H, 0, 0);
    tk_expect_close("moe_permute weighted", tk_f32(&r, xw), want_xw, R * H, FWD_RTOL, 1e-7);
    tk_expect_close("moe_unpermute weighted", tk_f32(&r, y), want_y, T * H, FWD_RTOL, 1e-6);
    tk_expect_close("moe_unpermute", tk_f32(&r, y1), want_y1, T * H, FWD_RTOL, 1e-6);
    tk_release(&r);
    mg_graph_free(g);
}

/* grouped matmul on segments from a real permute, both weight layouts, against a
 * per-row loop; rows past the total stay zero; an expert with no rows is fine. */
static void fwd_grouped_matmul(void) {
    enum { T = 9, E = 4, K = 5, N = 3, R = T * E };
    for (int tb = 0; tb < 2; tb++) {
        mg_graph *g = mg_graph_new();
        mg_tensor *x = mg_input(g, "x", MG_F32, 2, (int64_t[]){T, K});
        mg_tensor *m = mg_input(g, "map", MG_I32, 2, (int64_t[]){T, E});
        mg_tensor *w = mg_input(g, "w", MG_F32, 3, tb ? (int64_t[]){E, N, K} : (int64_t[]){E, K, N});
        mg_tensor *c;
        mg_tensor *xs = mg_moe_permute(g, x, m, NULL, R, &c);
        mg_tensor *y = mg_moe_grouped_matmul(g, xs, c, w, tb);
        mg_tensor *dy = mg_input(g, "dy", MG_F32, 2, (int64_t[]){R, N});
        mg_node *dw = mg_node_new(g, MG_OP_MOE_GROUPED_MATMUL_DW, NULL, 3, (mg_tensor *[]){xs, dy, c}, NULL);
        tk_run r;
        if (!y || !dw || tk_prepare(&r, g)) {
            TK_CHECK(0, "build: %s", mg_graph_error(g)->msg);
            mg_graph_free(g);
            return;
        }
        tk_rng rng = {51};
        tk_fill(&rng, tk_f32(&r, x), T * K, -1, 1);
        tk_fill(&rng, tk_f32(&r, w), E * K * N, -1, 1);
        tk_fill(&rng, tk_f32(&r, dy), R * N, -1, 1);
        int32_t *mv = tk_i32(&r, m);
        fill_map(&rng, mv, T * E);
        for (int t = 0; t < T; t++) mv[t * E + 2] = 0; /* expert 2 gets nothing */
        TK_CHECK(tk_exec(&r) == 0, "exec");
        const float *xsv = tk_f32(&r, xs), *wv = tk_f32(&r, w), *dyv = tk_f32(&r, dy);
        float want[R * N] = {0}, want_dw[E * K * N] = {0};
        int row = 0;
        for (int e = 0; e < E; e++)
            for (int n = 0; n < tk_i32(&r, c)[e]; n++, row++)
                for (int j = 0; j < N; j++) {
                    double s = 0;
                    for (int q = 0; q < K; q++)
                        s += (double)xsv[row * K + q] * (tb ? wv[(e * N + j) * K + q] : wv[(e * K + q) * N + j]);
                    want[row * N + j] = (float)s;
                    for (int q = 0; q < K; q++) want_dw[(e * K + q) * N + j] += xsv[row * K + q] * dyv[row * N + j];
                }
        TK_CHECK(tk_i32(&r, c)[2] == 0, "expert 2 empty");
        tk_expect_close("moe_grouped_matmul", tk_f32(&r, y), want, R * N, FWD_RTOL, 1e-6);
        tk_expect_close("moe_grouped_matmul_dw", tk_f32(&r, dw->out[0]), want_dw, E * K * N, FWD_RTOL, 1e-6);
        tk_release(&r);
        mg_graph_free(g);
    }
}

/* logsumexp, aux loss and z-loss against direct formulas (Megatron's
 * switch_load_balancing_loss_func / coeff and z_loss_func / coeff). */
static void fwd_losses(void) {
    enum { T = 24, E = 5, K = 2 };
    mg_graph *g = mg_graph_new();
    mg_tensor *x = mg_input(g, "logits", MG_F32, 2, (int64_t[]){T, E});
    mg_tensor *lse = mg_logsumexp(g, x), *aux = mg_moe_aux_loss(g, x, K), *z = mg_moe_z_loss(g, x);
    tk_run r;
    if (!lse || !aux || !z || tk_prepare(&r, g)) {
        TK_CHECK(0, "build: %s", mg_graph_error(g)->msg);
        mg_graph_free(g);
        return;
    }
    tk_rng rng = {61};
    float *xv = tk_f32(&r, x);
    tk_fill(&rng, xv, T * E, -4, 4);
    xv[0] = 95; /* exp would overflow unshifted */
    TK_CHECK(tk_exec(&r) == 0, "exec");
    float want_lse[T];
    double psum[E] = {0}, cnt[E] = {0}, zs = 0;
    for (int t = 0; t < T; t++) {
        const float *row = xv + t * E;
        double m = row[0], s = 0;
        for (int e = 1; e < E; e++) m = fmax(m, row[e]);
        for (int e = 0; e < E; e++) s += exp(row[e] - m);
        want_lse[t] = (float)(m + log(s));
        zs += (m + log(s)) * (m + log(s));
        for (int e = 0; e < E; e++) psum[e] += exp(row[e] - m) / s;
        int sel[E];
        ref_topk(row, E, K, sel);
        for (int j = 0; j < K; j++) cnt[sel[j]] += 1;
    }
    double a = 0;
    for (int e = 0; e < E; e++) a += (cnt[e] / (T * K)) * (psum[e] / T); /* f_i · P_i */
    float want_aux = (float)(E * a), want_z = (float)(zs / T);
    tk_expect_close("logsumexp", tk_f32(&r, lse), want_lse, T, FWD_RTOL, 1e-6);
    tk_expect_close("moe aux loss", tk_f32(&r, aux), &want_aux, 1, FWD_RTOL, 1e-7);
    tk_expect_close("moe z loss", tk_f32(&r, z), &want_z, 1, FWD_RTOL, 1e-6);
    tk_release(&r);
    mg_graph_free(g);
}

static void fwd_errors(void) {
    mg_graph *g = mg_graph_new();
    mg_tensor *x = mg_input(g, "logits", MG_F32, 2, (int64_t[]){4, 3});
    mg_tensor *p, *m;
    mg_moe_route_opts o = {.topk = 4, .pre_softmax = false, .capacity = 0, .drop_policy = MG_MOE_DROP_PROBS, .pad_to_capacity = false};
    int rc = mg_moe_route(g, x, &o, &p, &m);
    const mg_error *e = mg_graph_error(g);
    TK_CHECK(rc && !p && strstr(e->msg, "moe_route") && strstr(e->msg, "top-k"), "k > E: %s", e->msg);
    mg_graph_free(g);

    g = mg_graph_new();
    x = mg_input(g, "x", MG_F32, 2, (int64_t[]){4, 3});
    mg_tensor *fm = mg_input(g, "fmap", MG_F32, 2, (int64_t[]){4, 2});
    TK_CHECK(!mg_moe_permute(g, x, fm, NULL, 8, NULL) && strstr(mg_graph_error(g)->msg, "map must be i32"), "f32 map: %s",
             mg_graph_error(g)->msg);
    mg_graph_free(g);

    g = mg_graph_new();
    mg_tensor *xs = mg_input(g, "xs", MG_F32, 2, (int64_t[]){8, 3});
    mg_tensor *c = mg_input(g, "c", MG_I32, 1, (int64_t[]){2});
    mg_tensor *w = mg_input(g, "w", MG_F32, 3, (int64_t[]){2, 5, 4});
    TK_CHECK(!mg_moe_grouped_matmul(g, xs, c, w, true) && strstr(mg_graph_error(g)->msg, "inner dimensions"),
             "K mismatch: %s", mg_graph_error(g)->msg);
    mg_graph_free(g);

    /* run time: counts beyond the buffer are an error, not an overrun */
    g = mg_graph_new();
    xs = mg_input(g, "xs", MG_F32, 2, (int64_t[]){8, 3});
    c = mg_input(g, "c", MG_I32, 1, (int64_t[]){2});
    w = mg_input(g, "w", MG_F32, 3, (int64_t[]){2, 5, 3});
    mg_tensor *y = mg_moe_grouped_matmul(g, xs, c, w, true);
    mg_tensor *map = mg_input(g, "map", MG_I32, 2, (int64_t[]){4, 3});
    mg_tensor *xt = mg_input(g, "xt", MG_F32, 2, (int64_t[]){4, 3});
    mg_tensor *ps = mg_moe_permute(g, xt, map, NULL, 2, NULL);
    tk_run r;
    if (!y || !ps || tk_prepare(&r, g)) {
        TK_CHECK(0, "build: %s", mg_graph_error(g)->msg);
        mg_graph_free(g);
        return;
    }
    tk_i32(&r, c)[0] = 5;
    tk_i32(&r, c)[1] = 4;
    for (int i = 0; i < 12; i++) tk_i32(&r, map)[i] = 1;
    mg_error err = {0};
    TK_CHECK(mg_exec_reference(g, r.st, &r.info, &err) != 0 && strstr(err.msg, "exceed"), "overflow: %s", err.msg);
    tk_release(&r);
    mg_graph_free(g);
}

/* ---- gradients --------------------------------------------------------------------------- */
/* Routing is piecewise smooth: a finite-difference step must not change the top-k
 * selection. eps 1e-3 keeps the step well below the gaps between random logits
 * (the probes that cross a boundary would show up as failures, not pass silently). */
static const tk_grad_opts route_opts = {1e-3, 2e-2, 2e-3, 0, 0};

typedef struct route_ctx { mg_moe_route_opts o; } route_ctx;
static mg_tensor *gb_route(mg_graph *g, mg_tensor *const *l, void *ctx) {
    route_ctx *c = ctx;
    mg_tensor *p, *m;
    mg_moe_route(g, l[0], &c->o, &p, &m);
    return p;
}

static void grad_route(void) {
    tk_leaf x[] = {{"logits", MG_F32, 2, {6, 5}, true, -2, 2}};
    route_ctx c = {{.topk = 2, .drop_policy = MG_MOE_DROP_PROBS}};
    tk_gradcheck("moe_route top-2 then softmax", 1, x, gb_route, &c, &route_opts);
    c.o.pre_softmax = true;
    tk_gradcheck("moe_route softmax then top-2", 1, x, gb_route, &c, &route_opts);
    c.o.topk = 1;
    tk_gradcheck("moe_route softmax then top-1", 1, x, gb_route, &c, &route_opts);
    c.o = (mg_moe_route_opts){.topk = 2, .capacity = 2, .drop_policy = MG_MOE_DROP_PROBS};
    tk_gradcheck("moe_route capacity 2 (probs policy)", 1, x, gb_route, &c, &route_opts);
    c.o = (mg_moe_route_opts){.topk = 2, .pre_softmax = true, .capacity = 2, .drop_policy = MG_MOE_DROP_POSITION, .pad_to_capacity = true};
    tk_gradcheck("moe_route capacity 2 padded (position policy)", 1, x, gb_route, &c, &route_opts);
}

typedef struct perm_ctx { int64_t rows; bool weighted; } perm_ctx;
static mg_tensor *gb_permute(mg_graph *g, mg_tensor *const *l, void *ctx) {
    perm_ctx *c = ctx;
    return mg_moe_permute(g, l[0], l[1], c->weighted ? l[2] : NULL, c->rows, NULL);
}
static mg_tensor *gb_unpermute(mg_graph *g, mg_tensor *const *l, void *ctx) {
    perm_ctx *c = ctx;
    return mg_moe_unpermute(g, l[0], l[1], c->weighted ? l[2] : NULL);
}

static void grad_permute(void) {
    perm_ctx c = {5 * 4, false};
    tk_leaf l[] = {{"x", MG_F32, 2, {5, 3}, true, -1, 1},
                   {"map", MG_I32, 2, {5, 4}, false, 0, 2},
                   {"w", MG_F32, 2, {5, 4}, true, 0, 1}};
    tk_gradcheck("moe_permute", 2, l, gb_permute, &c, NULL);
    c.weighted = true;
    tk_gradcheck("moe_permute weighted", 3, l, gb_permute, &c, NULL);
}

static void grad_unpermute(void) {
    perm_ctx c = {0, false};
    tk_leaf l[] = {{"ys", MG_F32, 2, {5 * 4, 3}, true, -1, 1},
                   {"map", MG_I32, 2, {5, 4}, false, 0, 2},
                   {"w", MG_F32, 2, {5, 4}, true, 0, 1}};
    tk_gradcheck("moe_unpermute", 2, l, gb_unpermute, &c, NULL);
    c.weighted = true;
    tk_gradcheck("moe_unpermute weighted", 3, l, gb_unpermute, &c, NULL);
}

/* Segments come from a permute of a non-differentiated input over a random map. */
static mg_tensor *gb_gmm(mg_graph *g, mg_tensor *const *l, void *ctx) {
    bool tb = *(bool *)ctx;
    mg_tensor *counts;
    mg_moe_permute(g, l[1], l[2], NULL, l[0]->shape[0], &counts);
    return mg_moe_grouped_matmul(g, l[0], counts, l[3], tb);
}

static void grad_grouped_matmul(void) {
    for (int tb = 0; tb < 2; tb++) {
        bool t = tb;
        tk_leaf l[] = {{"xs", MG_F32, 2, {6 * 3, 4}, true, -1, 1},
                       {"tok", MG_F32, 2, {6, 1}, false, 0, 1},
                       {"map", MG_I32, 2, {6, 3}, false, 0, 2},
                       {"w", MG_F32, 3, {3, tb ? 5 : 4, tb ? 4 : 5}, true, -1, 1}};
        tk_gradcheck(tb ? "moe_grouped_matmul (w [E, N, K])" : "moe_grouped_matmul (w [E, K, N])", 4, l, gb_gmm, &t,
                     NULL);
    }
}

/* ---- the all-to-all of expert parallelism on one rank (ops/alltoall.c; several ranks:
 * tests/ep/test_alltoall_mpi.c): the permuted rows, the exchange of counts, the dispatch
 * into a larger static bound and (combine) back to the token side. */
typedef struct a2a_ctx { bool combine; } a2a_ctx;
static mg_tensor *gb_alltoall(mg_graph *g, mg_tensor *const *l, void *ctx) {
    a2a_ctx *c = ctx;
    mg_tensor *counts, *splits, *local;
    int64_t R = l[1]->shape[0] * l[1]->shape[1];
    mg_tensor *xs = mg_moe_permute(g, l[0], l[1], NULL, R, &counts);
    if (!xs || mg_alltoall_counts(g, counts, MG_GROUP_EP, 1, 0, &splits, &local)) return NULL;
    mg_tensor *xd = mg_alltoallv(g, xs, counts, splits, MG_GROUP_EP, 1, false, R + 3, 1);
    return c->combine ? mg_alltoallv(g, mg_scale(g, xd, 2.0f), counts, splits, MG_GROUP_EP, 1, true, R, 2) : xd;
}

static void grad_alltoall(void) {
    tk_leaf l[] = {{"x", MG_F32, 2, {5, 3}, true, -1, 1}, {"map", MG_I32, 2, {5, 4}, false, 0, 2}};
    a2a_ctx c = {false};
    tk_gradcheck("alltoall dispatch (1 rank)", 2, l, gb_alltoall, &c, NULL);
    c.combine = true;
    tk_gradcheck("alltoall dispatch then combine (1 rank)", 2, l, gb_alltoall, &c, NULL);
}

/* On one rank the dispatch is the identity on the routed rows (zero padding after them),
 * and the exchange of counts gives the counts back; combine returns the permuted rows. */
static void fwd_alltoall(void) {
    mg_graph *g = mg_graph_new();
    mg_tensor *x = mg_input(g, "x", MG_F32, 2, (int64_t[]){5, 3});
    mg_tensor *map = mg_input(g, "map", MG_I32, 2, (int64_t[]){5, 4});
    mg_tensor *counts, *splits, *local;
    mg_tensor *xs = mg_moe_permute(g, x, map, NULL, 20, &counts);
    mg_alltoall_counts(g, counts, MG_GROUP_EP, 1, 0, &splits, &local);
    mg_tensor *xd = mg_alltoallv(g, xs, counts, splits, MG_GROUP_EP, 1, false, 23, 1);
    mg_tensor *back = mg_alltoallv(g, xd, counts, splits, MG_GROUP_EP, 1, true, 20, 2);
    tk_run r;
    TK_CHECK(!mg_graph_error(g)->code && !tk_prepare(&r, g), "build: %s", mg_graph_error(g)->msg);
    for (int i = 0; i < 15; i++) tk_f32(&r, x)[i] = (float)i + 1;
    for (int i = 0; i < 20; i++) tk_i32(&r, map)[i] = (i * 7 % 5) < 2;
    TK_CHECK(!tk_exec(&r), "exec");
    int total = 0;
    for (int e = 0; e < 4; e++) {
        TK_CHECK(tk_i32(&r, splits)[e] == tk_i32(&r, counts)[e] && tk_i32(&r, local)[e] == tk_i32(&r, counts)[e],
                 "expert %d: splits %d, local %d, counts %d", e, tk_i32(&r, splits)[e], tk_i32(&r, local)[e],
                 tk_i32(&r, counts)[e]);
        total += tk_i32(&r, counts)[e];
    }
    TK_CHECK(total > 0, "the map routes something");
    for (int i = 0; i < 23 * 3; i++)
        TK_CHECK(tk_f32(&r, xd)[i] == (i < 20 * 3 ? tk_f32(&r, xs)[i] : 0.0f), "dispatched element %d", i);
    for (int i = 0; i < 20 * 3; i++) TK_CHECK(tk_f32(&r, back)[i] == tk_f32(&r, xs)[i], "combined element %d", i);
    /* builder errors: splits of the wrong shape, a group that does not divide the experts */
    mg_tensor *bad = mg_alltoallv(g, xs, counts, counts, MG_GROUP_EP, 1, false, 23, 3);
    TK_CHECK(!bad && strstr(mg_graph_error(g)->msg, "splits must be i32"), "bad splits: %s", mg_graph_error(g)->msg);
    tk_release(&r);
    mg_graph_free(g);
    g = mg_graph_new();
    mg_tensor *c3 = mg_input(g, "c", MG_I32, 1, (int64_t[]){3});
    TK_CHECK(mg_alltoall_counts(g, c3, MG_GROUP_EP, 2, 0, &splits, &local) && !splits &&
                 strstr(mg_graph_error(g)->msg, "multiple of the group size 2"),
             "3 experts over 2 ranks: %s", mg_graph_error(g)->msg);
    mg_graph_free(g);
}

static mg_tensor *gb_lse(mg_graph *g, mg_tensor *const *l, void *ctx) {
    (void)ctx;
    return mg_logsumexp(g, l[0]);
}
static mg_tensor *gb_aux(mg_graph *g, mg_tensor *const *l, void *ctx) {
    return mg_moe_aux_loss(g, l[0], *(int *)ctx);
}
static mg_tensor *gb_z(mg_graph *g, mg_tensor *const *l, void *ctx) {
    (void)ctx;
    return mg_moe_z_loss(g, l[0]);
}

static void grad_losses(void) {
    tk_leaf x[] = {{"logits", MG_F32, 2, {8, 5}, true, -2, 2}};
    tk_gradcheck("logsumexp", 1, x, gb_lse, NULL, NULL);
    int k = 2;
    tk_gradcheck("moe aux loss", 1, x, gb_aux, &k, &route_opts);
    tk_gradcheck("moe z loss", 1, x, gb_z, NULL, NULL);
}

/* The whole expert path: router, permute, grouped GELU MLP, weighted unpermute;
 * gradients for the tokens, the router logits' source and both expert weights. */
static mg_tensor *gb_layer(mg_graph *g, mg_tensor *const *l, void *ctx) {
    route_ctx *c = ctx;
    mg_tensor *logits = mg_matmul(g, l[0], l[1], false, true); /* [T, E] */
    mg_tensor *p, *m, *counts;
    mg_moe_route(g, logits, &c->o, &p, &m);
    int64_t rows = mg_moe_dispatch_rows(l[0]->shape[0], (int)l[1]->shape[0], &c->o);
    mg_tensor *xs = mg_moe_permute(g, l[0], m, NULL, rows, &counts);
    mg_tensor *hid = mg_gelu(g, mg_moe_grouped_matmul(g, xs, counts, l[2], true));
    mg_tensor *ys = mg_moe_grouped_matmul(g, hid, counts, l[3], true);
    return mg_moe_unpermute(g, ys, m, p);
}

static void grad_layer(void) {
    tk_leaf l[] = {{"x", MG_F32, 2, {6, 4}, true, -1, 1},
                   {"router", MG_F32, 2, {3, 4}, true, -1, 1},
                   {"fc1", MG_F32, 3, {3, 5, 4}, true, -1, 1},
                   {"fc2", MG_F32, 3, {3, 4, 5}, true, -1, 1}};
    route_ctx c = {{.topk = 2, .drop_policy = MG_MOE_DROP_PROBS}};
    tk_gradcheck("moe layer (dropless)", 4, l, gb_layer, &c, &route_opts);
    c.o = (mg_moe_route_opts){.topk = 2, .pre_softmax = true, .capacity = 3, .drop_policy = MG_MOE_DROP_PROBS, .pad_to_capacity = true};
    tk_gradcheck("moe layer (capacity 3, padded)", 4, l, gb_layer, &c, &route_opts);
}

/* ---- DeepSeek's routing: sigmoid scores, expert bias, groups, scaling ------------------------ */
/* Reference with the test's own sorting top-k: selection scores c (sigmoid + bias, or the
 * logits / softmax), groups by the sum of their top-(k / group_topk) c, weights of the
 * selected scores normalised (sigmoid), softmax (pre or not), times the scaling. */
static void ref_route_ex(const float *x, const float *bias, int T, int E, const mg_moe_route_opts *o, float *probs,
                         int32_t *map) {
    int k = o->topk;
    memset(probs, 0, sizeof(float) * (size_t)(T * E));
    memset(map, 0, sizeof(int32_t) * (size_t)(T * E));
    for (int t = 0; t < T; t++) {
        const float *r = x + t * E;
        double sc[64], sm = 0, mx = r[0];
        float c[64];
        for (int e = 1; e < E; e++) mx = r[e] > mx ? r[e] : mx;
        for (int e = 0; e < E; e++) sm += exp(r[e] - mx);
        for (int e = 0; e < E; e++) {
            sc[e] = o->score == MG_MOE_SIGMOID ? 1.0 / (1.0 + exp(-(double)r[e])) : exp(r[e] - mx) / sm;
            c[e] = o->score == MG_MOE_SIGMOID ? (float)sc[e] + (bias ? bias[e] : 0.0f)
                   : o->pre_softmax           ? (float)sc[e]
                                              : r[e];
        }
        if (o->num_groups) {
            int G = o->num_groups, per = E / G, kg = k / o->group_topk, gsel[64];
            float gs[64];
            for (int g = 0; g < G; g++) {
                int ts[64];
                ref_topk(c + g * per, per, kg, ts);
                double sum = 0;
                for (int j = 0; j < kg; j++) sum += c[g * per + ts[j]];
                gs[g] = (float)sum;
            }
            ref_topk(gs, G, o->group_topk, gsel);
            for (int g = 0; g < G; g++) {
                bool kept = false;
                for (int j = 0; j < o->group_topk; j++) kept |= gsel[j] == g;
                for (int e = 0; !kept && e < per; e++) c[g * per + e] = -INFINITY;
            }
        }
        int sel[64];
        ref_topk(c, E, k, sel);
        double w[64], norm = 0, f = o->scaling > 0 ? o->scaling : 1.0;
        for (int j = 0; j < k; j++) {
            w[j] = o->score == MG_MOE_SIGMOID || o->pre_softmax ? sc[sel[j]] : exp(r[sel[j]] - mx);
            norm += w[j];
        }
        if (o->score == MG_MOE_SIGMOID) norm = k > 1 ? norm + 1e-20 : 1.0;
        else if (o->pre_softmax) norm = 1.0;
        for (int j = 0; j < k; j++) {
            probs[t * E + sel[j]] = (float)(w[j] / norm * f);
            map[t * E + sel[j]] = 1;
        }
    }
}

static void fwd_route_deepseek(void) {
    enum { T = 33, E = 8 };
    const struct { const char *what; mg_moe_route_opts o; bool bias; } cs[] = {
        {"sigmoid top-3", {.topk = 3, .score = MG_MOE_SIGMOID}, false},
        {"sigmoid top-1", {.topk = 1, .score = MG_MOE_SIGMOID}, false},
        {"sigmoid top-2 + expert bias", {.topk = 2, .score = MG_MOE_SIGMOID}, true},
        {"DeepSeek-V3: sigmoid, bias, top-4 of 2 of 4 groups, scaling 2.5",
         {.topk = 4, .score = MG_MOE_SIGMOID, .num_groups = 4, .group_topk = 2, .scaling = 2.5f}, true},
        {"softmax after top-2 of 1 of 2 groups", {.topk = 2, .num_groups = 2, .group_topk = 1}, false},
        {"softmax before top-3 of 3 of 4 groups, scaling 0.5",
         {.topk = 3, .pre_softmax = true, .num_groups = 4, .group_topk = 3, .scaling = 0.5f}, false},
    };
    for (size_t i = 0; i < sizeof cs / sizeof *cs; i++) {
        mg_graph *g = mg_graph_new();
        mg_tensor *x = mg_input(g, "logits", MG_F32, 2, (int64_t[]){T, E}), *p, *m;
        mg_moe_route_opts o = cs[i].o;
        o.expert_bias = cs[i].bias ? mg_input(g, "bias", MG_F32, 1, (int64_t[]){E}) : NULL;
        mg_moe_route(g, x, &o, &p, &m);
        tk_run r;
        if (!p || tk_prepare(&r, g)) {
            TK_CHECK(0, "%s: build: %s", cs[i].what, mg_graph_error(g)->msg);
            mg_graph_free(g);
            continue;
        }
        tk_rng rng = {7u + i};
        float *xv = tk_f32(&r, x), *bv = o.expert_bias ? tk_f32(&r, o.expert_bias) : NULL;
        tk_fill(&rng, xv, T * E, -3, 3);
        if (bv) tk_fill(&rng, bv, E, -0.3f, 0.3f); /* large enough to change selections */
        TK_CHECK(tk_exec(&r) == 0, "exec");
        float wp[T * E], np[T * E];
        int32_t wm[T * E], nm[T * E];
        ref_route_ex(xv, bv, T, E, &o, wp, wm);
        TK_CHECK(!memcmp(tk_i32(&r, m), wm, sizeof wm), "%s: map differs from the reference", cs[i].what);
        tk_expect_close(cs[i].what, tk_f32(&r, p), wp, T * E, FWD_RTOL, FWD_ATOL);
        if (bv) { /* the bias changes the selection (here) and never the weights of what is selected */
            ref_route_ex(xv, NULL, T, E, &o, np, nm);
            TK_CHECK(memcmp(nm, wm, sizeof nm), "%s: the bias changed no selection", cs[i].what);
        }
        tk_release(&r);
        mg_graph_free(g);
    }
    /* bad attributes are shape errors naming the op */
    mg_graph *g = mg_graph_new();
    mg_tensor *x = mg_input(g, "logits", MG_F32, 2, (int64_t[]){4, 6}), *p, *m;
    mg_moe_route_opts bad = {.topk = 2, .num_groups = 4, .group_topk = 2};
    TK_CHECK(mg_moe_route(g, x, &bad, &p, &m) && strstr(mg_graph_error(g)->msg, "groups"), "4 groups of 6 experts: %s",
             mg_graph_error(g)->msg);
    mg_graph_free(g);
    g = mg_graph_new();
    x = mg_input(g, "logits", MG_F32, 2, (int64_t[]){4, 6});
    bad = (mg_moe_route_opts){.topk = 2, .expert_bias = mg_input(g, "bias", MG_F32, 1, (int64_t[]){6})};
    TK_CHECK(mg_moe_route(g, x, &bad, &p, &m) && strstr(mg_graph_error(g)->msg, "sigmoid"),
             "a bias with softmax scores: %s", mg_graph_error(g)->msg);
    mg_graph_free(g);
}

/* The counts (top-k per sample, the router's map), sigmoid_norm, the bias update and
 * the sequence-level aux loss against direct loops. */
static void fwd_moe_balance(void) {
    enum { S = 5, B = 3, T = S * B, E = 6, K = 2 };
    mg_graph *g = mg_graph_new();
    mg_tensor *x = mg_input(g, "logits", MG_F32, 2, (int64_t[]){T, E}), *bias = mg_input(g, "bias", MG_F32, 1, (int64_t[]){E});
    mg_tensor *p, *m, *cnt_s = mg_moe_topk_count_samples(g, x, K, B), *sn = mg_sigmoid_norm(g, x);
    mg_moe_route_opts o = {.topk = K, .score = MG_MOE_SIGMOID, .expert_bias = bias};
    mg_moe_route(g, x, &o, &p, &m);
    mg_tensor *mc = mg_moe_map_count(g, m), *nb = mg_moe_expert_bias_update(g, bias, mc, 0.01f);
    mg_tensor *seq = mg_moe_seq_aux_loss(g, sn, x, K, B);
    tk_run r;
    if (!seq || !nb || tk_prepare(&r, g)) {
        TK_CHECK(0, "build: %s", mg_graph_error(g)->msg);
        mg_graph_free(g);
        return;
    }
    tk_rng rng = {3};
    float *xv = tk_f32(&r, x), *bv = tk_f32(&r, bias);
    tk_fill(&rng, xv, T * E, -2, 2);
    tk_fill(&rng, bv, E, -0.1f, 0.1f);
    TK_CHECK(tk_exec(&r) == 0, "exec");
    float want_cs[B * E] = {0}, want_mc[E] = {0}, want_sn[T * E], want_nb[E];
    int32_t *mv = tk_i32(&r, m);
    double seq_want = 0, psum[B][E] = {{0}};
    for (int t = 0; t < T; t++) {
        int sel[64];
        ref_topk(xv + t * E, E, K, sel);
        for (int j = 0; j < K; j++) want_cs[(t % B) * E + sel[j]] += 1;
        double sum = 0;
        for (int e = 0; e < E; e++) sum += 1.0 / (1.0 + exp(-(double)xv[t * E + e]));
        for (int e = 0; e < E; e++) {
            want_sn[t * E + e] = (float)(1.0 / (1.0 + exp(-(double)xv[t * E + e])) / sum);
            want_mc[e] += (float)mv[t * E + e];
            psum[t % B][e] += want_sn[t * E + e];
        }
    }
    double mean = 0;
    for (int e = 0; e < E; e++) mean += want_mc[e] / E;
    for (int e = 0; e < E; e++) want_nb[e] = bv[e] + (mean > want_mc[e] ? 0.01f : mean < want_mc[e] ? -0.01f : 0.0f);
    for (int b = 0; b < B; b++)
        for (int e = 0; e < E; e++) seq_want += psum[b][e] * want_cs[b * E + e] * E / ((double)K * S * S) / B;
    tk_expect_close("moe_topk_count per sample", tk_f32(&r, cnt_s), want_cs, B * E, 0, 0);
    tk_expect_close("moe_map_count", tk_f32(&r, mc), want_mc, E, 0, 0);
    tk_expect_close("sigmoid_norm", tk_f32(&r, sn), want_sn, T * E, FWD_RTOL, FWD_ATOL);
    tk_expect_close("moe_expert_bias_update", tk_f32(&r, nb), want_nb, E, 1e-7, 0);
    float sw = (float)seq_want;
    tk_expect_close("seq_aux_loss", tk_f32(&r, seq), &sw, 1, FWD_RTOL, 0);
    TK_CHECK(mc->src->op == MG_OP_MOE_MAP_COUNT && nb->src->op == MG_OP_MOE_EXPERT_BIAS_UPDATE, "ops");
    tk_release(&r);
    mg_graph_free(g);
}

typedef struct route_bias_ctx { mg_moe_route_opts o; bool bias; } route_bias_ctx;
static mg_tensor *gb_route_bias(mg_graph *g, mg_tensor *const *l, void *ctx) {
    route_bias_ctx *c = ctx;
    mg_moe_route_opts o = c->o;
    o.expert_bias = c->bias ? l[1] : NULL;
    mg_tensor *p, *m;
    mg_moe_route(g, l[0], &o, &p, &m);
    return p;
}

static void grad_route_deepseek(void) {
    tk_leaf l[] = {{"logits", MG_F32, 2, {6, 8}, true, -2, 2}, {"bias", MG_F32, 1, {8}, false, -0.2f, 0.2f}};
    const struct { const char *what; mg_moe_route_opts o; bool bias; } cs[] = {
        {"moe_route sigmoid top-3", {.topk = 3, .score = MG_MOE_SIGMOID}, false},
        {"moe_route sigmoid top-1, scaling 2", {.topk = 1, .score = MG_MOE_SIGMOID, .scaling = 2}, false},
        {"moe_route DeepSeek-V3 (sigmoid, bias, 4 of 2 of 4 groups, scaling 2.5)",
         {.topk = 4, .score = MG_MOE_SIGMOID, .num_groups = 4, .group_topk = 2, .scaling = 2.5f}, true},
        {"moe_route sigmoid, capacity 3", {.topk = 2, .score = MG_MOE_SIGMOID, .capacity = 3}, true},
        {"moe_route softmax before top-2 of 2 of 4 groups, scaling 0.5",
         {.topk = 2, .pre_softmax = true, .num_groups = 4, .group_topk = 2, .scaling = 0.5f}, false},
        {"moe_route softmax after top-2 of 1 of 2 groups", {.topk = 2, .num_groups = 2, .group_topk = 1}, false},
    };
    for (size_t i = 0; i < sizeof cs / sizeof *cs; i++) {
        route_bias_ctx c = {cs[i].o, cs[i].bias};
        tk_gradcheck(cs[i].what, cs[i].bias ? 2 : 1, l, gb_route_bias, &c, &route_opts);
    }
}

static mg_tensor *gb_sigmoid_norm(mg_graph *g, mg_tensor *const *l, void *ctx) {
    (void)ctx;
    return mg_sigmoid_norm(g, l[0]);
}
static mg_tensor *gb_seq_aux(mg_graph *g, mg_tensor *const *l, void *ctx) {
    (void)ctx;
    return mg_moe_seq_aux_loss(g, mg_sigmoid_norm(g, l[0]), l[0], 2, 3);
}

static void grad_moe_balance(void) {
    tk_leaf l[] = {{"x", MG_F32, 2, {5, 7}, true, -3, 3}};
    tk_gradcheck("sigmoid_norm", 1, l, gb_sigmoid_norm, NULL, NULL);
    tk_leaf ls[] = {{"logits", MG_F32, 2, {12, 6}, true, -2, 2}};
    tk_gradcheck("seq_aux_loss on sigmoid_norm (3 samples)", 1, ls, gb_seq_aux, NULL, &route_opts);
}

int main(int argc, char **argv) {
    static const tk_case cases[] = {
        {"forward.moe_route", fwd_route},
        {"forward.moe_route_capacity", fwd_route_capacity},
        {"forward.moe_router_counts", fwd_router_counts},
        {"forward.moe_permute", fwd_permute},
        {"forward.moe_grouped_matmul", fwd_grouped_matmul},
        {"forward.moe_losses", fwd_losses},
        {"forward.errors_moe", fwd_errors},
        {"grad.moe_route", grad_route},
        {"grad.moe_permute", grad_permute},
        {"grad.moe_unpermute", grad_unpermute},
        {"grad.moe_grouped_matmul", grad_grouped_matmul},
        {"grad.moe_losses", grad_losses},
        {"grad.moe_layer", grad_layer},
        {"forward.alltoall", fwd_alltoall},
        {"grad.alltoall", grad_alltoall},
        {"forward.moe_route_deepseek", fwd_route_deepseek},
        {"forward.moe_balance", fwd_moe_balance},
        {"grad.moe_route_deepseek", grad_route_deepseek},
        {"grad.moe_balance", grad_moe_balance},
    };
    return tk_main(argc, argv, cases, (int)(sizeof cases / sizeof *cases));
}

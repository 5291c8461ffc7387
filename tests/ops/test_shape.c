/* Shape ops (reshape, transpose, split, concat, slice, pad, zeros, shift): forward against
 * naive index-mapping loops (exact: they only move data), gradients against finite
 * differences, builder errors. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "testkit.h"

static void unravel(int64_t i, int n, const int64_t *shape, int64_t *idx) {
    for (int d = n - 1; d >= 0; d--) {
        idx[d] = i % shape[d];
        i /= shape[d];
    }
}

static int64_t ravel(int n, const int64_t *shape, const int64_t *idx) {
    int64_t o = 0;
    for (int d = 0; d < n; d++) o = o * shape[d] + idx[d];
    return o;
}

static mg_tensor *in_f32(mg_graph *g, const char *name, int n, const int64_t *s) {
    return mg_input(g, name, MG_F32, n, s);
}

static bool prepare(tk_run *r, mg_graph *g, const char *what) {
    if (mg_graph_error(g)->code || tk_prepare(r, g)) {
        TK_CHECK(0, "%s build: %s", what, mg_graph_error(g)->msg);
        return false;
    }
    return true;
}

/* ---- reshape ------------------------------------------------------------------------ */
static void fwd_reshape(void) {
    mg_graph *g = mg_graph_new();
    int64_t s[3] = {2, 3, 4};
    mg_tensor *x = in_f32(g, "x", 3, s);
    mg_tensor *y = mg_reshape(g, x, 2, (int64_t[]){4, -1});
    mg_tensor *ids = mg_input(g, "ids", MG_I32, 2, (int64_t[]){3, 4});
    mg_tensor *yi = mg_reshape(g, ids, 1, (int64_t[]){12});
    tk_run r;
    if (!prepare(&r, g, "reshape")) goto out;
    TK_CHECK(y->ndim == 2 && y->shape[0] == 4 && y->shape[1] == 6, "reshape -1 inferred");
    TK_CHECK(yi->dtype == MG_I32, "reshape keeps i32");
    tk_rng rng = {1};
    tk_fill(&rng, tk_f32(&r, x), 24, -1, 1);
    for (int i = 0; i < 12; i++) tk_i32(&r, ids)[i] = i * 7 - 3;
    TK_CHECK(tk_exec(&r) == 0, "exec");
    tk_expect_close("reshape", tk_f32(&r, y), tk_f32(&r, x), 24, 0, 0);
    TK_CHECK(memcmp(tk_i32(&r, yi), tk_i32(&r, ids), 12 * sizeof(int32_t)) == 0, "reshape i32");
    tk_release(&r);
out:
    mg_graph_free(g);
}

/* ---- transpose ---------------------------------------------------------------------- */
static void check_transpose(int n, const int64_t *s, const int *perm) {
    char what[96];
    snprintf(what, sizeof what, "transpose perm %d%d%d%d", perm[0], n > 1 ? perm[1] : 0, n > 2 ? perm[2] : 0,
             n > 3 ? perm[3] : 0);
    mg_graph *g = mg_graph_new();
    mg_tensor *x = in_f32(g, "x", n, s);
    mg_tensor *y = mg_transpose(g, x, perm);
    tk_run r;
    if (!y || !prepare(&r, g, what)) {
        TK_CHECK(0, "%s build: %s", what, mg_graph_error(g)->msg);
        mg_graph_free(g);
        return;
    }
    tk_rng rng = {2};
    tk_fill(&rng, tk_f32(&r, x), mg_numel(x), -1, 1);
    TK_CHECK(tk_exec(&r) == 0, "exec");
    int64_t ne = mg_numel(y), oi[MG_MAX_DIMS], ii[MG_MAX_DIMS];
    float *want = malloc((size_t)ne * sizeof *want);
    const float *xv = tk_f32(&r, x);
    for (int64_t i = 0; i < ne; i++) {
        unravel(i, n, y->shape, oi);
        for (int d = 0; d < n; d++) ii[perm[d]] = oi[d];
        want[i] = xv[ravel(n, s, ii)];
    }
    tk_expect_close(what, tk_f32(&r, y), want, ne, 0, 0);
    free(want);
    tk_release(&r);
    mg_graph_free(g);
}

static void fwd_transpose(void) {
    int64_t s4[4] = {2, 3, 4, 5};
    int perms[][4] = {{0, 1, 2, 3}, {0, 2, 1, 3}, {3, 2, 1, 0}, {0, 1, 3, 2}, {1, 0, 2, 3}, {2, 3, 0, 1}, {1, 2, 3, 0}};
    for (size_t i = 0; i < sizeof perms / sizeof *perms; i++) check_transpose(4, s4, perms[i]);
    int64_t s3[3] = {3, 1, 4};
    check_transpose(3, s3, (int[]){2, 1, 0});
    check_transpose(3, s3, (int[]){1, 0, 2});
    int64_t s2[2] = {33, 17};
    check_transpose(2, s2, (int[]){1, 0});
    /* an i32 tensor (token ids) transposes too */
    mg_graph *g = mg_graph_new();
    mg_tensor *ids = mg_input(g, "ids", MG_I32, 2, (int64_t[]){2, 3});
    mg_tensor *t = mg_transpose(g, ids, (int[]){1, 0});
    tk_run r;
    if (t && prepare(&r, g, "transpose i32")) {
        for (int i = 0; i < 6; i++) tk_i32(&r, ids)[i] = i;
        TK_CHECK(tk_exec(&r) == 0, "exec");
        const int32_t want[6] = {0, 3, 1, 4, 2, 5};
        TK_CHECK(memcmp(tk_i32(&r, t), want, sizeof want) == 0, "transpose i32");
        tk_release(&r);
    }
    mg_graph_free(g);
}

/* ---- split / concat / slice / pad ------------------------------------------------------ */
/* Reference for taking the block [start, start+len) of dim from x (shape s). */
static void ref_block(int n, const int64_t *s, const float *x, int dim, int64_t start, int64_t len, float *y) {
    int64_t ys[MG_MAX_DIMS], idx[MG_MAX_DIMS];
    memcpy(ys, s, (size_t)n * sizeof *ys);
    ys[dim] = len;
    int64_t ne = 1;
    for (int d = 0; d < n; d++) ne *= ys[d];
    for (int64_t i = 0; i < ne; i++) {
        unravel(i, n, ys, idx);
        idx[dim] += start;
        y[i] = x[ravel(n, s, idx)];
    }
}

static void check_split(int n, const int64_t *s, int dim, int parts, const int64_t *sizes) {
    char what[64];
    snprintf(what, sizeof what, "split dim %d into %d", dim, parts);
    mg_graph *g = mg_graph_new();
    mg_tensor *x = in_f32(g, "x", n, s), *outs[MG_MAX_SPLIT];
    int rc = mg_split(g, x, dim, parts, sizes, outs);
    tk_run r;
    if (rc || !prepare(&r, g, what)) {
        TK_CHECK(0, "%s build: %s", what, mg_graph_error(g)->msg);
        mg_graph_free(g);
        return;
    }
    int d = dim < 0 ? dim + n : dim;
    tk_rng rng = {3};
    tk_fill(&rng, tk_f32(&r, x), mg_numel(x), -1, 1);
    TK_CHECK(tk_exec(&r) == 0, "exec");
    int64_t start = 0;
    for (int i = 0; i < parts; i++) {
        int64_t len = sizes ? sizes[i] : s[d] / parts;
        TK_CHECK(outs[i]->shape[d] == len, "%s part %d size", what, i);
        float *want = malloc((size_t)mg_numel(outs[i]) * sizeof *want);
        ref_block(n, s, tk_f32(&r, x), d, start, len, want);
        tk_expect_close(what, tk_f32(&r, outs[i]), want, mg_numel(outs[i]), 0, 0);
        free(want);
        start += len;
    }
    tk_release(&r);
    mg_graph_free(g);
}

static void fwd_split(void) {
    int64_t s[3] = {3, 10, 4};
    check_split(3, s, 1, 3, (int64_t[]){2, 5, 3});
    check_split(3, s, 0, 2, (int64_t[]){1, 2});
    check_split(3, s, -1, 2, NULL); /* equal parts, negative dim */
    check_split(3, s, 2, 1, (int64_t[]){4});
}

static void check_concat(int k, int n, const int64_t (*shapes)[MG_MAX_DIMS], int dim) {
    char what[64];
    snprintf(what, sizeof what, "concat %d inputs dim %d", k, dim);
    mg_graph *g = mg_graph_new();
    mg_tensor *xs[8];
    for (int i = 0; i < k; i++) {
        char nm[16];
        snprintf(nm, sizeof nm, "x%d", i);
        xs[i] = in_f32(g, nm, n, shapes[i]);
    }
    mg_tensor *y = mg_concat(g, k, xs, dim);
    tk_run r;
    if (!y || !prepare(&r, g, what)) {
        TK_CHECK(0, "%s build: %s", what, mg_graph_error(g)->msg);
        mg_graph_free(g);
        return;
    }
    int d = dim < 0 ? dim + n : dim;
    tk_rng rng = {4};
    for (int i = 0; i < k; i++) tk_fill(&rng, tk_f32(&r, xs[i]), mg_numel(xs[i]), -1, 1);
    TK_CHECK(tk_exec(&r) == 0, "exec");
    int64_t ne = mg_numel(y), idx[MG_MAX_DIMS];
    float *want = malloc((size_t)ne * sizeof *want);
    for (int64_t e = 0; e < ne; e++) {
        unravel(e, n, y->shape, idx);
        int i = 0;
        while (idx[d] >= shapes[i][d]) idx[d] -= shapes[i++][d];
        want[e] = tk_f32(&r, xs[i])[ravel(n, shapes[i], idx)];
    }
    tk_expect_close(what, tk_f32(&r, y), want, ne, 0, 0);
    free(want);
    tk_release(&r);
    mg_graph_free(g);
}

static void fwd_concat(void) {
    const int64_t a[3][MG_MAX_DIMS] = {{2, 3, 4}, {2, 1, 4}, {2, 5, 4}};
    check_concat(3, 3, a, 1);
    const int64_t b[2][MG_MAX_DIMS] = {{2, 3, 4}, {3, 3, 4}};
    check_concat(2, 3, b, 0);
    const int64_t c[3][MG_MAX_DIMS] = {{2, 3, 1}, {2, 3, 4}, {2, 3, 2}};
    check_concat(3, 3, c, -1);
    const int64_t d[1][MG_MAX_DIMS] = {{2, 3}};
    check_concat(1, 2, d, 0);
}

static void check_slice_pad(bool pad, int n, const int64_t *s, int dim, int64_t start, int64_t len) {
    char what[64];
    snprintf(what, sizeof what, "%s dim %d start %lld len %lld", pad ? "pad" : "slice", dim, (long long)start,
             (long long)len);
    mg_graph *g = mg_graph_new();
    mg_tensor *x = in_f32(g, "x", n, s);
    mg_tensor *y = pad ? mg_pad(g, x, dim, start, len) : mg_slice(g, x, dim, start, len);
    tk_run r;
    if (!y || !prepare(&r, g, what)) {
        TK_CHECK(0, "%s build: %s", what, mg_graph_error(g)->msg);
        mg_graph_free(g);
        return;
    }
    tk_rng rng = {5};
    tk_fill(&rng, tk_f32(&r, x), mg_numel(x), -1, 1);
    /* garbage in the output, so that pad must write its zeros */
    for (int64_t i = 0; i < mg_numel(y); i++) tk_f32(&r, y)[i] = NAN;
    TK_CHECK(tk_exec(&r) == 0, "exec");
    int64_t ne = mg_numel(y), idx[MG_MAX_DIMS];
    float *want = malloc((size_t)ne * sizeof *want);
    const float *xv = tk_f32(&r, x);
    for (int64_t e = 0; e < ne; e++) {
        unravel(e, n, y->shape, idx);
        if (pad) {
            int64_t k = idx[dim] - start;
            if (k < 0 || k >= s[dim]) {
                want[e] = 0;
                continue;
            }
            idx[dim] = k;
        } else {
            idx[dim] += start;
        }
        want[e] = xv[ravel(n, s, idx)];
    }
    tk_expect_close(what, tk_f32(&r, y), want, ne, 0, 0);
    free(want);
    tk_release(&r);
    mg_graph_free(g);
}

static void fwd_slice(void) {
    int64_t s[3] = {3, 6, 4};
    check_slice_pad(false, 3, s, 1, 2, 3);
    check_slice_pad(false, 3, s, 0, 0, 1);
    check_slice_pad(false, 3, s, 2, 1, 3);
    check_slice_pad(false, 3, s, 1, 0, 6);
}

static void fwd_pad(void) {
    int64_t s[3] = {3, 2, 4};
    check_slice_pad(true, 3, s, 1, 1, 5);
    check_slice_pad(true, 3, s, 0, 0, 4);
    check_slice_pad(true, 3, s, 2, 3, 7);
    check_slice_pad(true, 3, s, 1, 0, 2);
}

static void fwd_zeros(void) {
    mg_graph *g = mg_graph_new();
    mg_tensor *z = mg_zeros(g, MG_F32, 2, (int64_t[]){3, 5});
    mg_tensor *zi = mg_zeros(g, MG_I32, 3, (int64_t[]){2, 1, 3});
    mg_tensor *z6 = mg_zeros(g, MG_F32, 6, (int64_t[]){1, 2, 1, 2, 1, 2});
    tk_run r;
    if (!z || !zi || !z6 || !prepare(&r, g, "zeros")) {
        TK_CHECK(0, "zeros build: %s", mg_graph_error(g)->msg);
        mg_graph_free(g);
        return;
    }
    TK_CHECK(z->dtype == MG_F32 && zi->dtype == MG_I32 && z6->dtype == MG_F32, "zeros dtypes");
    TK_CHECK(zi->ndim == 3 && zi->shape[0] == 2 && zi->shape[1] == 1 && zi->shape[2] == 3, "zeros shape");
    for (int i = 0; i < 15; i++) tk_f32(&r, z)[i] = 1;
    for (int i = 0; i < 6; i++) tk_i32(&r, zi)[i] = 7;
    TK_CHECK(tk_exec(&r) == 0, "exec");
    float zf[15] = {0};
    tk_expect_close("zeros f32", tk_f32(&r, z), zf, 15, 0, 0);
    for (int i = 0; i < 6; i++) TK_CHECK(tk_i32(&r, zi)[i] == 0, "zeros i32");
    mg_error err = {0};
    TK_CHECK(mg_graph_validate(g, &err) == 0, "validate re-infers zeros dtypes: %s", err.msg);
    tk_release(&r);
    mg_graph_free(g);
}

/* ---- gradients ------------------------------------------------------------------------
 * All shape ops are linear maps that only move data: central differences are exact up to
 * the float rounding of the loss, well inside the default tolerances. */
static mg_tensor *gb_reshape(mg_graph *g, mg_tensor *const *l, void *ctx) {
    (void)ctx;
    return mg_reshape(g, l[0], 3, (int64_t[]){4, 3, 2});
}
static void grad_reshape(void) {
    tk_leaf x[] = {{"x", MG_F32, 2, {6, 4}, true, -1, 1}};
    tk_gradcheck("reshape", 1, x, gb_reshape, NULL, NULL);
}

static mg_tensor *gb_transpose(mg_graph *g, mg_tensor *const *l, void *ctx) {
    return mg_transpose(g, l[0], ctx);
}
static void grad_transpose(void) {
    tk_leaf x[] = {{"x", MG_F32, 4, {2, 3, 4, 2}, true, -1, 1}};
    int p1[4] = {2, 0, 3, 1}, p2[4] = {0, 2, 1, 3}, p3[4] = {0, 1, 3, 2};
    tk_gradcheck("transpose 2031", 1, x, gb_transpose, p1, NULL);
    tk_gradcheck("transpose 0213", 1, x, gb_transpose, p2, NULL);
    tk_gradcheck("transpose 0132", 1, x, gb_transpose, p3, NULL);
}

/* mode 0: all parts used (concat); 1: only the last part used; 2: parts 0 and 2 added
 * (part 1 unused): the unused outputs get a NULL dout and contribute zeros. */
static mg_tensor *gb_split(mg_graph *g, mg_tensor *const *l, void *ctx) {
    int mode = *(const int *)ctx;
    mg_tensor *o[3];
    if (mode == 0) {
        if (mg_split(g, l[0], 1, 3, (int64_t[]){1, 2, 3}, o)) return NULL;
        return mg_concat(g, 3, (mg_tensor *[]){o[2], o[0], o[1]}, 1);
    }
    if (mode == 1) {
        if (mg_split(g, l[0], 1, 3, (int64_t[]){1, 2, 3}, o)) return NULL;
        return o[2];
    }
    if (mg_split(g, l[0], 1, 3, NULL, o)) return NULL;
    return mg_add(g, o[0], mg_scale(g, o[2], 2.0f));
}
static void grad_split(void) {
    tk_leaf x[] = {{"x", MG_F32, 3, {2, 6, 3}, true, -1, 1}};
    int m0 = 0, m1 = 1, m2 = 2;
    tk_gradcheck("split all used", 1, x, gb_split, &m0, NULL);
    tk_gradcheck("split only last used", 1, x, gb_split, &m1, NULL);
    tk_gradcheck("split middle unused", 1, x, gb_split, &m2, NULL);
}

static mg_tensor *gb_concat(mg_graph *g, mg_tensor *const *l, void *ctx) {
    int dim = *(const int *)ctx;
    return mg_concat(g, 3, l, dim);
}
static void grad_concat(void) {
    int d1 = 1, d0 = 0;
    tk_leaf a[] = {{"a", MG_F32, 2, {3, 2}, true, -1, 1},
                   {"b", MG_F32, 2, {3, 4}, true, -1, 1},
                   {"c", MG_F32, 2, {3, 1}, true, -1, 1}};
    /* all three differentiable: the rule takes its split path; one at a time: slices */
    tk_gradcheck("concat dim 1 (split path)", 3, a, gb_concat, &d1, NULL);
    for (int i = 0; i < 3; i++) {
        tk_leaf one[3];
        memcpy(one, a, sizeof one);
        for (int j = 0; j < 3; j++) one[j].diff = j == i;
        char label[64];
        snprintf(label, sizeof label, "concat dim 1 (slice path, d/d %s)", a[i].name);
        tk_gradcheck(label, 3, one, gb_concat, &d1, NULL);
    }
    tk_leaf b[] = {{"a", MG_F32, 2, {2, 3}, true, -1, 1},
                   {"b", MG_F32, 2, {1, 3}, false, -1, 1},
                   {"c", MG_F32, 2, {3, 3}, false, -1, 1}};
    tk_gradcheck("concat dim 0 (d/d a)", 3, b, gb_concat, &d0, NULL);
}

/* ---- shift (ops/shift.c) ----------------------------------------------------------------- */
/* y[.., i, ..] = x[.., i + by, ..] where that is in range, else fill: f32 and i32 (token ids
 * and labels moved by multi-token prediction), every dim, both ways, past the end */
static void check_shift(mg_dtype dt, int n, const int64_t *s, int dim, int64_t by, double fill) {
    char what[96];
    snprintf(what, sizeof what, "shift %s dim %d by %lld fill %g", dt == MG_I32 ? "i32" : "f32", dim, (long long)by, fill);
    mg_graph *g = mg_graph_new();
    mg_tensor *x = mg_input(g, "x", dt, n, s);
    mg_tensor *y = mg_shift(g, x, dim, by, fill);
    tk_run r;
    if (!y || !prepare(&r, g, what)) {
        TK_CHECK(0, "%s build: %s", what, mg_graph_error(g)->msg);
        mg_graph_free(g);
        return;
    }
    int64_t ne = mg_numel(x), idx[MG_MAX_DIMS];
    int d = dim < 0 ? dim + n : dim;
    for (int64_t e = 0; e < ne; e++) {
        if (dt == MG_I32) tk_i32(&r, x)[e] = (int32_t)(e * 7 + 1), tk_i32(&r, y)[e] = -12345;
        else tk_f32(&r, x)[e] = (float)e * 0.25f - 3.0f, tk_f32(&r, y)[e] = NAN; /* pad must write its fills */
    }
    TK_CHECK(tk_exec(&r) == 0, "exec");
    int bad = 0;
    for (int64_t e = 0; e < ne; e++) {
        unravel(e, n, s, idx);
        int64_t j = idx[d] + by;
        bool in = j >= 0 && j < s[d];
        idx[d] = j;
        int64_t src = in ? ravel(n, s, idx) : -1;
        if (dt == MG_I32) bad += tk_i32(&r, y)[e] != (in ? tk_i32(&r, x)[src] : (int32_t)fill);
        else bad += !(tk_f32(&r, y)[e] == (in ? tk_f32(&r, x)[src] : (float)fill));
    }
    TK_CHECK(bad == 0, "%s: %d elements differ", what, bad);
    tk_release(&r);
    mg_graph_free(g);
}

static void fwd_shift(void) {
    int64_t s[3] = {5, 3, 4};
    check_shift(MG_F32, 3, s, 0, 1, 0);
    check_shift(MG_F32, 3, s, 1, -1, 0.5);
    check_shift(MG_F32, 3, s, 2, 2, -7);
    check_shift(MG_F32, 3, s, -1, 3, 0);  /* a negative dim counts from the end */
    check_shift(MG_F32, 3, s, 0, 5, 1);   /* past the end: all fill */
    check_shift(MG_F32, 3, s, 0, 0, 9);   /* by 0: a copy */
    check_shift(MG_I32, 2, (int64_t[]){8, 3}, 0, 1, 0);     /* MTP's token ids */
    check_shift(MG_I32, 2, (int64_t[]){8, 3}, 0, 2, -100);  /* its labels, the ends ignored */
    check_shift(MG_I32, 1, (int64_t[]){8}, 0, -3, 4);       /* positions [s] */
}

static mg_tensor *gb_slice(mg_graph *g, mg_tensor *const *l, void *ctx) {
    (void)ctx;
    return mg_slice(g, l[0], 1, 1, 3);
}
static void grad_slice(void) {
    tk_leaf x[] = {{"x", MG_F32, 3, {2, 5, 3}, true, -1, 1}};
    tk_gradcheck("slice", 1, x, gb_slice, NULL, NULL);
}

static mg_tensor *gb_pad(mg_graph *g, mg_tensor *const *l, void *ctx) {
    (void)ctx;
    return mg_pad(g, l[0], -1, 2, 6);
}
static void grad_pad(void) {
    tk_leaf x[] = {{"x", MG_F32, 3, {2, 3, 3}, true, -1, 1}};
    tk_gradcheck("pad", 1, x, gb_pad, NULL, NULL);
}

static mg_tensor *gb_shift(mg_graph *g, mg_tensor *const *l, void *ctx) {
    const int *a = ctx; /* dim, by */
    return mg_shift(g, l[0], a[0], a[1], 0.75); /* (the fill is a constant: no gradient) */
}
static void grad_shift(void) {
    static const int cases[][2] = {{1, 2}, {0, -1}, {2, 1}, {0, 4}};
    for (int i = 0; i < 4; i++) {
        tk_leaf x[] = {{"x", MG_F32, 3, {4, 3, 3}, true, -1, 1}};
        char what[48];
        snprintf(what, sizeof what, "shift dim %d by %d", cases[i][0], cases[i][1]);
        tk_gradcheck(what, 1, x, gb_shift, (void *)cases[i], NULL);
    }
}

/* ---- builder errors -------------------------------------------------------------------- */
static void expect_error(const char *what, mg_graph *g, bool returned_null, const char *op) {
    const mg_error *e = mg_graph_error(g);
    TK_CHECK(returned_null, "%s: expected NULL", what);
    TK_CHECK(e->code == MG_ERR_SHAPE, "%s: code %d (%s)", what, e->code, e->msg);
    TK_CHECK(strstr(e->msg, op) != NULL, "%s: message '%s' does not name %s", what, e->msg, op);
}

static void fwd_errors(void) {
    int64_t s[3] = {2, 3, 4};
    mg_graph *g;
#define FRESH() (g = mg_graph_new(), in_f32(g, "x", 3, s))
    mg_tensor *x = FRESH();
    expect_error("reshape numel", g, mg_reshape(g, x, 2, (int64_t[]){5, 5}) == NULL, "reshape");
    mg_graph_free(g);
    x = FRESH();
    expect_error("transpose repeated axis", g, mg_transpose(g, x, (int[]){0, 0, 1}) == NULL, "transpose");
    mg_graph_free(g);
    x = FRESH();
    expect_error("transpose axis out of range", g, mg_transpose(g, x, (int[]){0, 1, 3}) == NULL, "transpose");
    mg_graph_free(g);
    x = FRESH();
    {
        mg_tensor *o[2] = {x, x};
        int rc = mg_split(g, x, 1, 2, (int64_t[]){1, 1}, o);
        expect_error("split sizes", g, rc == MG_ERR_SHAPE && !o[0] && !o[1], "split");
    }
    mg_graph_free(g);
    x = FRESH();
    {
        mg_tensor *o[2];
        expect_error("split not divisible", g, mg_split(g, x, 1, 2, NULL, o) != 0, "split");
    }
    mg_graph_free(g);
    x = FRESH();
    {
        mg_tensor *o[1];
        expect_error("split dim", g, mg_split(g, x, 3, 1, (int64_t[]){4}, o) != 0, "split");
    }
    mg_graph_free(g);
    x = FRESH();
    {
        mg_tensor *y = in_f32(g, "y", 3, (int64_t[]){2, 4, 5});
        expect_error("concat mismatch", g, mg_concat(g, 2, (mg_tensor *[]){x, y}, 1) == NULL, "concat");
    }
    mg_graph_free(g);
    x = FRESH();
    {
        mg_tensor *y = in_f32(g, "y", 2, (int64_t[]){2, 4});
        expect_error("concat rank", g, mg_concat(g, 2, (mg_tensor *[]){x, y}, 0) == NULL, "concat");
    }
    mg_graph_free(g);
    x = FRESH();
    expect_error("slice range", g, mg_slice(g, x, 1, 2, 2) == NULL, "slice");
    mg_graph_free(g);
    x = FRESH();
    expect_error("slice negative start", g, mg_slice(g, x, 0, -1, 1) == NULL, "slice");
    mg_graph_free(g);
    x = FRESH();
    expect_error("pad too small", g, mg_pad(g, x, 2, 1, 4) == NULL, "pad");
    mg_graph_free(g);
    x = FRESH();
    expect_error("zeros bad dim", g, mg_zeros(g, MG_F32, 2, (int64_t[]){0, 3}) == NULL, "zeros");
    mg_graph_free(g);
    x = FRESH();
    expect_error("shift dim", g, mg_shift(g, x, 3, 1, 0) == NULL, "shift");
    mg_graph_free(g);
    g = mg_graph_new();
    x = mg_input(g, "ids", MG_I32, 1, (int64_t[]){4});
    expect_error("shift i32 fill", g, mg_shift(g, x, 0, 1, 0.5) == NULL, "shift");
    mg_graph_free(g);
#undef FRESH
    /* NULL inputs propagate without replacing the first error, and never crash */
    g = mg_graph_new();
    x = in_f32(g, "x", 3, s);
    TK_CHECK(mg_reshape(g, x, 1, (int64_t[]){7}) == NULL, "first error");
    char first[MG_ERROR_MSG_LEN];
    snprintf(first, sizeof first, "%s", mg_graph_error(g)->msg);
    mg_tensor *o[2];
    TK_CHECK(mg_reshape(g, NULL, 1, (int64_t[]){24}) == NULL, "reshape NULL");
    TK_CHECK(mg_transpose(g, NULL, (int[]){0}) == NULL, "transpose NULL");
    TK_CHECK(mg_split(g, NULL, 0, 2, NULL, o) != 0 && !o[0], "split NULL");
    TK_CHECK(mg_concat(g, 2, (mg_tensor *[]){x, NULL}, 0) == NULL, "concat NULL");
    TK_CHECK(mg_concat(g, 1, (mg_tensor *[]){NULL}, 0) == NULL, "concat NULL first");
    TK_CHECK(mg_slice(g, NULL, 0, 0, 1) == NULL, "slice NULL");
    TK_CHECK(mg_pad(g, NULL, 0, 0, 1) == NULL, "pad NULL");
    TK_CHECK(mg_shift(g, NULL, 0, 1, 0) == NULL, "shift NULL");
    TK_CHECK(strcmp(first, mg_graph_error(g)->msg) == 0, "first error kept: %s", mg_graph_error(g)->msg);
    mg_graph_free(g);
}

int main(int argc, char **argv) {
    static const tk_case cases[] = {
        {"forward.reshape", fwd_reshape}, {"forward.transpose", fwd_transpose},
        {"forward.split", fwd_split},     {"forward.concat", fwd_concat},
        {"forward.slice", fwd_slice},     {"forward.pad", fwd_pad},
        {"forward.zeros", fwd_zeros},     {"forward.errors_shape", fwd_errors},
        {"grad.reshape", grad_reshape},   {"grad.transpose", grad_transpose},
        {"grad.split", grad_split},       {"grad.concat", grad_concat},
        {"grad.slice", grad_slice},       {"grad.pad", grad_pad},
        {"forward.shift", fwd_shift},     {"grad.shift", grad_shift},
    };
    return tk_main(argc, argv, cases, (int)(sizeof cases / sizeof *cases));
}

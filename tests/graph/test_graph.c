/* Graph IR, builder errors, RNG, autodiff bookkeeping, optimizer rewrite and DOT. */
#include <math.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>

#include "mgraph/dot.h"
#include "mgraph/model.h"
#include "mgraph/rng.h"
#include "testkit.h"

/* ---- builder errors ---------------------------------------------------------------- */
static void builder_errors(void) {
    mg_graph *g = mg_graph_new();
    mg_tensor *a = mg_input(g, "a", MG_F32, 2, (int64_t[]){4, 8});
    mg_tensor *w = mg_param(g, "w", 2, (int64_t[]){5, 7}, (mg_init){MG_INIT_NORMAL, 0.02f});
    TK_CHECK(mg_matmul(g, a, w, false, true) == NULL, "matmul [4,8] x [5,7]^T must fail");
    const mg_error *e = mg_graph_error(g);
    TK_CHECK(e->code == MG_ERR_SHAPE, "shape error code, got %d (%s)", e->code, e->msg);
    TK_CHECK(strstr(e->msg, "matmul") != NULL, "message names the op: %s", e->msg);
    TK_CHECK(strstr(e->msg, "[4, 8]") && strstr(e->msg, "[5, 7]"), "message names the shapes: %s", e->msg);
    /* later calls return NULL and keep the first message */
    TK_CHECK(mg_gelu(g, NULL) == NULL, "NULL propagates");
    TK_CHECK(strstr(mg_graph_error(g)->msg, "matmul") != NULL, "first error kept: %s", mg_graph_error(g)->msg);
    mg_graph_free(g);

    g = mg_graph_new();
    mg_input(g, "x", MG_F32, 1, (int64_t[]){3});
    TK_CHECK(mg_input(g, "x", MG_F32, 1, (int64_t[]){3}) == NULL, "duplicate name rejected");
    TK_CHECK(mg_graph_error(g)->code == MG_ERR_INVALID && strstr(mg_graph_error(g)->msg, "'x'"), "%s",
             mg_graph_error(g)->msg);
    mg_graph_free(g);

    g = mg_graph_new();
    TK_CHECK(mg_input(g, "bad", MG_F32, 2, (int64_t[]){3, 0}) == NULL, "zero dimension rejected");
    TK_CHECK(mg_graph_error(g)->code == MG_ERR_SHAPE, "code");
    mg_graph_free(g);

    g = mg_graph_new();
    TK_CHECK(mg_input(g, "deep", MG_F32, MG_MAX_DIMS + 1, (int64_t[]){1, 1, 1, 1, 1, 1, 1}) == NULL, "rank limit");
    mg_graph_free(g);
}

/* ---- scopes, names, order, validation ------------------------------------------------- */
static mg_graph *tiny_mlp(void) {
    mg_graph *g = mg_graph_new();
    mg_tensor *x = mg_input(g, "x", MG_F32, 2, (int64_t[]){4, 8});
    mg_tensor *y = x;
    for (int i = 0; i < 2; i++) {
        mg_scope_push(g, "layers.%d", i);
        mg_tensor *w = mg_param(g, "fc.weight", 2, (int64_t[]){8, 8}, (mg_init){MG_INIT_NORMAL, 0.1f});
        mg_tensor *b = mg_param(g, "fc.bias", 1, (int64_t[]){8}, (mg_init){MG_INIT_ZEROS, 0});
        y = mg_gelu(g, mg_linear(g, y, w, b));
        mg_scope_pop(g);
    }
    mg_tensor *loss = mg_mean(g, mg_mul(g, y, y), MG_ALL_AXES, false);
    mg_error err = {0};
    if (mg_graph_backward(g, loss, &err)) fprintf(stderr, "backward: %s\n", err.msg);
    mg_adamw_config oc = mg_adamw_defaults();
    if (mg_graph_add_adamw(g, &oc, NULL, &err)) fprintf(stderr, "adamw: %s\n", err.msg);
    return g;
}

/* Repeated names get _1, _2, ...: the first suffix free, as a search from 1 finds it,
 * also after a rename frees one (graph/names.c keeps a hint per base name). */
static void unique_names(void) {
    mg_graph *g = mg_graph_new();
    int64_t s1[1] = {4};
    mg_tensor *x = mg_input(g, "x", MG_F32, 1, s1), *a[4];
    for (int i = 0; i < 4; i++) a[i] = mg_scale(g, x, 2.0f);
    const char *want[4] = {"scale", "scale_1", "scale_2", "scale_3"};
    for (int i = 0; i < 4; i++) TK_CHECK(a[i] && !strcmp(a[i]->name, want[i]), "name %d: %s", i, a[i] ? a[i]->name : "-");
    mg_set_name(g, a[2], "renamed"); /* frees scale_2 */
    mg_tensor *b = mg_scale(g, x, 2.0f), *c = mg_scale(g, x, 2.0f);
    TK_CHECK(b && !strcmp(b->name, "scale_2"), "a freed suffix is given again: %s", b ? b->name : "-");
    TK_CHECK(c && !strcmp(c->name, "scale_4"), "then the next free one: %s", c ? c->name : "-");
    mg_set_name(g, b, "scale_x"); /* frees scale_2 again */
    mg_tensor *d = mg_scale(g, x, 2.0f);
    TK_CHECK(d && !strcmp(d->name, "scale_2"), "freed again, given again: %s", d ? d->name : "-");
    TK_CHECK(!mg_graph_error(g)->code, "%s", mg_graph_error(g)->msg);
    mg_graph_free(g);
}

static void scopes_and_order(void) {
    mg_graph *g = tiny_mlp(), *h = tiny_mlp();
    TK_CHECK(!mg_graph_error(g)->code, "%s", mg_graph_error(g)->msg);
    TK_CHECK(mg_graph_find(g, "layers.1.fc.weight") != NULL, "scoped parameter name");
    TK_CHECK(mg_graph_find(g, "layers.1.fc.weight.grad") != NULL, "gradient named <param>.grad");
    TK_CHECK(mg_graph_find(g, "layers.1.fc.weight.exp_avg") != NULL, "Adam moment named after the parameter");
    mg_error err = {0};
    TK_CHECK(mg_graph_validate(g, &err) == MG_OK, "validate: %s", err.msg);
    mg_node **o1, **o2;
    int n1, n2;
    mg_graph_topo(g, &o1, &n1, &err);
    mg_graph_topo(h, &o2, &n2, &err);
    TK_CHECK(n1 == n2, "same node count");
    for (int i = 0; i < n1 && i < n2; i++) TK_CHECK(o1[i]->id == o2[i]->id, "same order at %d", i);
    /* every input precedes its consumer, and in-place writers follow the readers */
    int *pos = calloc((size_t)(n1 > 0 ? n1 : 1), sizeof *pos);
    for (int i = 0; i < n1; i++) pos[o1[i]->id] = i;
    for (int i = 0; i < n1; i++)
        for (int j = 0; j < o1[i]->n_in; j++) {
            const mg_tensor *t = o1[i]->in[j];
            if (t->src) TK_CHECK(pos[t->src->id] < i, "producer before consumer");
        }
    for (int i = 0; i < n1; i++)
        for (int k = 0; k < o1[i]->n_out; k++) {
            const mg_tensor *root = o1[i]->out[k]->updates;
            if (!root) continue;
            for (int m = 0; m < n1; m++)
                for (int j = 0; j < o1[m]->n_in; j++)
                    if (o1[m]->in[j] == root && m != i) TK_CHECK(m < i, "reader of %s after its update", root->name);
        }
    free(pos);
    /* a corrupted shape is caught */
    mg_tensor *t = mg_graph_find(g, "layers.0.fc.weight.grad");
    t->shape[0] = 9;
    mg_error e2 = {0};
    TK_CHECK(mg_graph_validate(g, &e2) == MG_ERR_SHAPE, "validate catches a bad shape");
    t->shape[0] = 8;
    mg_graph_free(g);
    mg_graph_free(h);
}

/* ---- autodiff bookkeeping --------------------------------------------------------------- */
static void autodiff_reach(void) {
    mg_graph *g = mg_graph_new();
    mg_tensor *x = mg_input(g, "x", MG_F32, 1, (int64_t[]){4});
    mg_tensor *p = mg_param(g, "p", 1, (int64_t[]){4}, (mg_init){MG_INIT_ONES, 0});
    mg_tensor *unused = mg_param(g, "unused", 1, (int64_t[]){4}, (mg_init){MG_INIT_ONES, 0});
    mg_tensor *side = mg_scale(g, unused, 2.0f); /* does not reach the loss */
    (void)side;
    mg_tensor *loss = mg_sum(g, mg_mul(g, mg_add(g, x, p), p), MG_ALL_AXES, false);
    mg_error err = {0};
    TK_CHECK(mg_graph_backward(g, loss, &err) == MG_OK, "%s", err.msg);
    TK_CHECK(p->grad != NULL, "p gets a gradient");
    TK_CHECK(unused->grad == NULL, "a parameter not reaching the loss gets none");
    TK_CHECK(x->grad == NULL, "an input gets none");
    tk_run r;
    if (tk_prepare(&r, g) == 0) {
        float *xv = tk_f32(&r, x);
        for (int i = 0; i < 4; i++) xv[i] = (float)i;
        tk_exec(&r);
        /* d/dp sum((x + p) * p) = x + 2p */
        float want[4] = {2, 3, 4, 5};
        tk_expect_close("p used twice accumulates", tk_f32(&r, p->grad), want, 4, 0, 0);
        tk_release(&r);
    }
    mg_graph_free(g);

    g = mg_graph_new();
    mg_tensor *c = mg_input(g, "c", MG_F32, 1, (int64_t[]){1});
    mg_error e2 = {0};
    TK_CHECK(mg_graph_backward(g, mg_scale(g, c, 2.0f), &e2) == MG_ERR_INVALID, "loss without parameters");
    mg_graph_free(g);
}

/* ---- RNG ---------------------------------------------------------------------------------- */
static void rng_known_answers(void) {
    /* Philox4x32-10 known-answer vectors from the Random123 distribution (kat_vectors). */
    uint32_t r[4];
    mg_philox4x32(0, 0, 0, r);
    TK_CHECK(r[0] == 0x6627e8d5u && r[1] == 0xe169c58du && r[2] == 0xbc57ac4cu && r[3] == 0x9b00dbd8u,
             "zero vector: %08x %08x %08x %08x", r[0], r[1], r[2], r[3]);
    mg_philox4x32(0xffffffffffffffffull, 0xffffffffffffffffull, 0xffffffffffffffffull, r);
    TK_CHECK(r[0] == 0x408f276du && r[1] == 0x41c83b0eu && r[2] == 0xa20bc7c6u && r[3] == 0x6d5451fdu,
             "ones vector: %08x %08x %08x %08x", r[0], r[1], r[2], r[3]);
    mg_philox4x32(0x299f31d0a4093822ull, 0x0370734413198a2eull, 0x85a308d3243f6a88ull, r);
    TK_CHECK(r[0] == 0xd16cfe09u && r[1] == 0x94fdccebu && r[2] == 0x5001e420u && r[3] == 0x24126ea1u,
             "pi vector: %08x %08x %08x %08x", r[0], r[1], r[2], r[3]);
}

static void rng_slices(void) {
    mg_graph *g = mg_graph_new();
    mg_tensor *whole = mg_param(g, "w", 2, (int64_t[]){6, 10}, (mg_init){MG_INIT_NORMAL, 0.5f});
    /* a block [2:5, 4:10) of the same logical tensor, as a partitioner would make it */
    mg_tensor *blk = mg_param(g, "w.block", 2, (int64_t[]){3, 6}, (mg_init){MG_INIT_NORMAL, 0.5f});
    blk->logical = whole->logical;
    blk->logical.offset[0] = 2;
    blk->logical.offset[1] = 4;
    float a[60], b[18], c[60];
    mg_rng_init_tensor(whole, 42, a);
    mg_rng_init_tensor(blk, 42, b);
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 6; j++) TK_CHECK(b[i * 6 + j] == a[(i + 2) * 10 + j + 4], "block element %d,%d", i, j);
    mg_rng_init_tensor(whole, 42, c);
    TK_CHECK(memcmp(a, c, sizeof a) == 0, "same seed, same values");
    mg_rng_init_tensor(whole, 43, c);
    TK_CHECK(memcmp(a, c, sizeof a) != 0, "another seed, other values");
    /* moments of the normal draws: 100k samples, mean within 5 sigma, variance within 2% */
    double s = 0, s2 = 0;
    int n = 100000;
    for (int i = 0; i < n; i++) {
        double v = mg_rng_normal(1, 2, 0, (uint64_t)i);
        s += v;
        s2 += v * v;
    }
    double mean = s / n, var = s2 / n - mean * mean;
    TK_CHECK(fabs(mean) < 5.0 / sqrt(n), "normal mean %g", mean);
    TK_CHECK(fabs(var - 1) < 0.02, "normal variance %g", var);
    mg_graph_free(g);
}

/* ---- optimizer -------------------------------------------------------------------------------- */
/* Megatron's OptimizerParamScheduler.get_lr at hand-computed points of each style. */
static void lr_schedule(void) {
    mg_lr_schedule s = {.lr = 1e-3f, .min_lr = 1e-4f, .warmup_steps = 10, .decay_steps = 110, .style = MG_LR_COSINE};
    TK_CHECK(mg_lr_at(&s, 0) == 0.0f, "warmup starts at init_lr 0: %g", mg_lr_at(&s, 0));
    TK_CHECK(fabsf(mg_lr_at(&s, 1) - 1e-4f) < 1e-9f, "warmup step 1: %g", mg_lr_at(&s, 1));
    TK_CHECK(fabsf(mg_lr_at(&s, 10) - 1e-3f) < 1e-9f, "end of warmup");
    TK_CHECK(fabsf(mg_lr_at(&s, 60) - 5.5e-4f) < 1e-8f, "cosine midpoint: %g", mg_lr_at(&s, 60));
    TK_CHECK(fabsf(mg_lr_at(&s, 110) - 1e-4f) < 1e-9f, "end of decay");
    TK_CHECK(fabsf(mg_lr_at(&s, 500) - 1e-4f) < 1e-9f, "after decay: min");
    s.init_lr = 1e-4f;
    TK_CHECK(fabsf(mg_lr_at(&s, 5) - 5.5e-4f) < 1e-8f, "warmup from init_lr: %g", mg_lr_at(&s, 5));
    s.init_lr = 0;
    s.style = MG_LR_LINEAR;
    TK_CHECK(fabsf(mg_lr_at(&s, 35) - (1e-4f + 0.75f * 9e-4f)) < 1e-8f, "linear quarter: %g", mg_lr_at(&s, 35));
    s.style = MG_LR_CONSTANT;
    TK_CHECK(mg_lr_at(&s, 80) == 1e-3f, "constant");
    /* fractional warmup (--lr-warmup-fraction): 2.5 steps */
    s.warmup_steps = 2.5;
    TK_CHECK(fabsf(mg_lr_at(&s, 2) - 8e-4f) < 1e-9f, "fractional warmup: %g", mg_lr_at(&s, 2));
    /* inverse square root: lr * sqrt(warmup) / sqrt(step), never below min_lr, min_lr after decay */
    mg_lr_schedule isr = {.lr = 1e-3f, .min_lr = 1e-5f, .warmup_steps = 4, .decay_steps = 100, .style = MG_LR_INVERSE_SQRT};
    TK_CHECK(fabsf(mg_lr_at(&isr, 16) - 5e-4f) < 1e-9f, "inverse sqrt at 16: %g", mg_lr_at(&isr, 16));
    TK_CHECK(fabsf(mg_lr_at(&isr, 100) - 2e-4f) < 1e-9f, "inverse sqrt at 100: %g", mg_lr_at(&isr, 100));
    TK_CHECK(mg_lr_at(&isr, 101) == 1e-5f, "inverse sqrt after decay: %g", mg_lr_at(&isr, 101));
    isr.min_lr = 3e-4f;
    TK_CHECK(mg_lr_at(&isr, 100) == 3e-4f, "inverse sqrt floored at min_lr: %g", mg_lr_at(&isr, 100));
    /* WSD: stable to decay - wsd, then each annealing shape */
    mg_lr_schedule w = {.lr = 1e-3f, .decay_steps = 100, .style = MG_LR_WSD, .wsd_decay_steps = 20, .wsd_style = MG_WSD_LINEAR};
    TK_CHECK(mg_lr_at(&w, 80) == 1e-3f, "WSD stable: %g", mg_lr_at(&w, 80));
    TK_CHECK(fabsf(mg_lr_at(&w, 90) - 5e-4f) < 1e-9f, "WSD linear: %g", mg_lr_at(&w, 90));
    w.wsd_style = MG_WSD_COSINE;
    TK_CHECK(fabsf(mg_lr_at(&w, 90) - 5e-4f) < 1e-9f, "WSD cosine: %g", mg_lr_at(&w, 90));
    w.wsd_style = MG_WSD_EXPONENTIAL;
    TK_CHECK(fabsf(mg_lr_at(&w, 90) - 1e-3f * (2 * sqrtf(0.5f) - 1)) < 1e-9f, "WSD exponential: %g", mg_lr_at(&w, 90));
    TK_CHECK(fabsf(mg_lr_at(&w, 100)) < 1e-10f, "WSD exponential end: %g", mg_lr_at(&w, 100));
    w.wsd_style = MG_WSD_MINUS_SQRT;
    TK_CHECK(fabsf(mg_lr_at(&w, 85) - 5e-4f) < 1e-9f, "WSD minus_sqrt: %g", mg_lr_at(&w, 85));
    /* iterations advance steps_per_iter steps (samples): iteration i runs at step i x 8 */
    mg_lr_schedule it = {.lr = 1e-3f, .warmup_steps = 80, .decay_steps = 800, .style = MG_LR_LINEAR, .steps_per_iter = 8};
    TK_CHECK(mg_lr_at_iteration(&it, 0) == 0.0f, "first iteration runs at lr 0: %g", mg_lr_at_iteration(&it, 0));
    TK_CHECK(fabsf(mg_lr_at_iteration(&it, 3) - 3e-4f) < 1e-9f, "iteration 3: %g", mg_lr_at_iteration(&it, 3));
}

/* Two AdamW steps on loss = sum(p * c) (gradient c), against the formula in double. */
static void adamw_steps(void) {
    mg_graph *g = mg_graph_new();
    mg_tensor *p = mg_param(g, "p", 1, (int64_t[]){3}, (mg_init){MG_INIT_ONES, 0});
    mg_tensor *q = mg_param(g, "q", 1, (int64_t[]){3}, (mg_init){MG_INIT_ONES, 0});
    q->no_weight_decay = true;
    mg_tensor *c = mg_input(g, "c", MG_F32, 1, (int64_t[]){3});
    mg_tensor *loss = mg_sum(g, mg_add(g, mg_mul(g, p, c), mg_mul(g, q, c)), MG_ALL_AXES, false);
    mg_error err = {0};
    mg_adamw_config oc = mg_adamw_defaults();
    oc.weight_decay = 0.1f;
    oc.clip_grad = 2.0f;
    oc.lr = (mg_lr_schedule){.lr = 0.01f, .decay_steps = 1, .style = MG_LR_CONSTANT};
    mg_optimizer_outputs out;
    TK_CHECK(!mg_graph_backward(g, loss, &err) && !mg_graph_add_adamw(g, &oc, &out, &err), "%s", err.msg);
    tk_run r;
    if (tk_prepare(&r, g)) return;
    float cv[3] = {3, -4, 0.5f};
    memcpy(tk_f32(&r, c), cv, sizeof cv);
    double pp[3] = {1, 1, 1}, qq[3] = {1, 1, 1}, m[3] = {0}, v[3] = {0}, mq[3] = {0}, vq[3] = {0};
    double norm = sqrt(2 * (9 + 16 + 0.25)), coef = 2.0 / (norm + 1e-6);
    for (int step = 1; step <= 2; step++) {
        r.info.iteration = step - 1;
        tk_exec(&r);
        TK_CHECK(fabs(tk_f32(&r, out.grad_norm)[0] - norm) < 1e-5 * norm, "grad norm %g vs %g",
                 tk_f32(&r, out.grad_norm)[0], norm);
        for (int i = 0; i < 3; i++) {
            double gi = cv[i] * coef, b1 = 1 - pow(0.9, step), b2 = 1 - pow(0.999, step);
            m[i] = 0.9 * m[i] + 0.1 * gi;
            v[i] = 0.999 * v[i] + 0.001 * gi * gi;
            pp[i] -= 0.01 * ((m[i] / b1) / (sqrt(v[i] / b2) + 1e-8) + 0.1 * pp[i]);
            mq[i] = 0.9 * mq[i] + 0.1 * gi;
            vq[i] = 0.999 * vq[i] + 0.001 * gi * gi;
            qq[i] -= 0.01 * ((mq[i] / b1) / (sqrt(vq[i] / b2) + 1e-8));
        }
        float wp[3], wq[3];
        for (int i = 0; i < 3; i++) {
            wp[i] = (float)pp[i];
            wq[i] = (float)qq[i];
        }
        tk_expect_close("adamw with decay", tk_f32(&r, p), wp, 3, 1e-6, 1e-7);
        tk_expect_close("adamw without decay (no_weight_decay)", tk_f32(&r, q), wq, 3, 1e-6, 1e-7);
    }
    tk_release(&r);
    mg_graph_free(g);
}

/* ---- DOT ------------------------------------------------------------------------------------------ */
static char *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    *len = (size_t)ftell(f);
    rewind(f);
    char *b = malloc(*len + 1);
    if (b && fread(b, 1, *len, f) != *len) *len = 0;
    fclose(f);
    return b;
}

static void dot_dump(void) {
    /* small: graphviz layout time grows fast with size */
    mg_step_config sc = tk_small_gpt(1, 16, 2, 8, 128, 2, 1);
    char p1[] = "/tmp/mg_dot_a_XXXXXX", p2[] = "/tmp/mg_dot_b_XXXXXX";
    int f1 = mkstemp(p1), f2 = mkstemp(p2);
    close(f1);
    close(f2);
    for (int k = 0; k < 2; k++) {
        mg_step st;
        mg_error err = {0};
        if (mg_step_build(&sc, &st, &err)) {
            TK_CHECK(0, "build: %s", err.msg);
            return;
        }
        TK_CHECK(mg_graph_dump_dot_file(st.g, k ? p2 : p1, NULL, &err) == MG_OK, "dump: %s", err.msg);
        mg_step_release(&st);
    }
    size_t l1 = 0, l2 = 0;
    char *a = slurp(p1, &l1), *b = slurp(p2, &l2);
    TK_CHECK(a && b && l1 > 1000 && l1 == l2 && memcmp(a, b, l1) == 0, "two builds give byte-identical dumps");
    if (a) {
        a[l1] = 0;
        TK_CHECK(strstr(a, "cluster") && strstr(a, "label=\"h.0\""), "one cluster per layer");
        TK_CHECK(strstr(a, "legend"), "legend");
        TK_CHECK(strstr(a, "0x") == NULL, "no addresses in the dump");
    }
    char cmd[256];
    snprintf(cmd, sizeof cmd, "dot -Tsvg %s -o /dev/null", p1);
    TK_CHECK(system(cmd) == 0, "graphviz renders the dump");
    free(a);
    free(b);
    remove(p1);
    remove(p2);
}

int main(int argc, char **argv) {
    static const tk_case cases[] = {
        {"builder_errors", builder_errors}, {"scopes_and_order", scopes_and_order}, {"unique_names", unique_names},
        {"autodiff_reach", autodiff_reach}, {"rng_known_answers", rng_known_answers},
        {"rng_slices", rng_slices},         {"lr_schedule", lr_schedule},
        {"adamw_steps", adamw_steps},       {"dot_dump", dot_dump},
    };
    return tk_main(argc, argv, cases, (int)(sizeof cases / sizeof *cases));
}

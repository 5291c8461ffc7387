/* Dropout: the mask rule (seed, key = hash of the output name, iteration, micro-batch,
 * logical index), identity when not training, a block of a logical tensor draws the
 * block of the whole mask, the keep fraction, the gradient (same mask, same mb). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mgraph/rng.h"
#include "ops/rng_init.h"
#include "testkit.h"

/* Builds y = dropout(x [4, 6, 50], p) and runs it (iteration it) as global
 * micro-batch mb (mb >= 0: the per-micro-batch part of a step whose first instance is
 * micro-batch mb; mb < 0: outside any micro-batch), and compares with the mask rule. */
static void check_rule(float p, int mb, int64_t it, bool training) {
    int64_t sx[3] = {4, 6, 50};
    mg_graph *g = mg_graph_new();
    mg_graph_set_mb(g, mb >= 0 ? 0 : -1);
    mg_tensor *x = mg_input(g, "x", MG_F32, 3, sx);
    mg_tensor *y = mg_dropout(g, x, p);
    tk_run r;
    if (!y || y == x || tk_prepare(&r, g)) {
        TK_CHECK(0, "build: %s", mg_graph_error(g)->msg);
        mg_graph_free(g);
        return;
    }
    TK_CHECK(y->src->mb == (mb >= 0 ? 0 : -1), "node mb %d", y->src->mb);
    uint64_t key = y->src->attrs.dropout.rng_key;
    TK_CHECK(key == mg_hash_name(y->name), "rng_key = hash of the output name");
    r.info.iteration = it;
    r.info.training = training;
    r.info.mb_offset = mb >= 0 ? mb : 0;
    int64_t n = mg_numel(x);
    tk_rng rng = {3};
    float *xv = tk_f32(&r, x);
    tk_fill(&rng, xv, n, -2, 2);
    TK_CHECK(tk_exec(&r) == 0, "exec");
    float *want = malloc((size_t)n * sizeof *want);
    /* x [s 4, b 6, h 50]: element (s, b, j) draws from sample (micro-batch mb) * 6 + b's
     * stream at index s * 50 + j */
    for (int64_t i = 0; i < n; i++) {
        int64_t s = i / (6 * 50), b = i / 50 % 6, j = i % 50;
        uint64_t stream = mg_rng_dropout_stream(it, (mb > 0 ? mb : 0) * 6 + b);
        want[i] = !training ? xv[i]
                  : mg_rng_uniform(r.info.seed, key, stream, (uint64_t)(s * 50 + j)) >= p ? xv[i] / (1.0f - p)
                                                                                          : 0.0f;
    }
    char what[96];
    snprintf(what, sizeof what, "dropout p %g mb %d iteration %lld training %d", (double)p, mb, (long long)it,
             training);
    tk_expect_close(what, tk_f32(&r, y), want, n, 1e-6, 0);
    free(want);
    tk_release(&r);
    mg_graph_free(g);
}

static void fwd_dropout(void) {
    check_rule(0.1f, -1, 0, true);
    check_rule(0.5f, 2, 7, true);
    check_rule(0.5f, 2, 7, false); /* identity */
    /* p == 0: no node, x itself */
    mg_graph *g = mg_graph_new();
    mg_tensor *x = mg_input(g, "x", MG_F32, 1, (int64_t[]){5});
    TK_CHECK(mg_dropout(g, x, 0.0f) == x && mg_graph_n_nodes(g) == 0, "p = 0 returns x");
    /* two dropouts of the same tensor get different keys (unique output names) */
    mg_tensor *a = mg_dropout(g, x, 0.5f), *b = mg_dropout(g, x, 0.5f);
    TK_CHECK(a && b && a->src->attrs.dropout.rng_key != b->src->attrs.dropout.rng_key, "distinct keys");
    mg_graph_free(g);
}

/* Runs dropout on a block [2:5, 0:4, 8:16] of a logical [8, 4, 16] tensor (offset on
 * the output, as a partitioner marks it, or only on the input) and compares with the
 * block of the whole run's output. */
static void fwd_slice(void) {
    int64_t sa[3] = {8, 4, 16}, sb[3] = {3, 4, 8}, off[3] = {2, 0, 8};
    const float p = 0.5f;
    mg_graph *g = mg_graph_new();
    mg_tensor *x = mg_input(g, "x", MG_F32, 3, sa);
    mg_scope_push(g, "blk");
    mg_tensor *y = mg_dropout(g, x, p);
    mg_scope_pop(g);
    tk_run r;
    if (!y || tk_prepare(&r, g)) {
        TK_CHECK(0, "build: %s", mg_graph_error(g)->msg);
        mg_graph_free(g);
        return;
    }
    r.info.iteration = 4;
    tk_rng rng = {8};
    float *xa = tk_f32(&r, x);
    tk_fill(&rng, xa, mg_numel(x), 1, 2); /* nonzero: a dropped element shows */
    TK_CHECK(tk_exec(&r) == 0, "exec");
    const float *ya = tk_f32(&r, y);
    for (int mode = 0; mode < 2; mode++) {
        mg_graph *h = mg_graph_new();
        mg_tensor *xb = mg_input(h, "x", MG_F32, 3, sb);
        mg_scope_push(h, "blk");
        mg_tensor *yb = mg_dropout(h, xb, p); /* same name: same key */
        mg_scope_pop(h);
        mg_tensor *marked = mode == 0 ? yb : xb;
        for (int d = 0; d < 3; d++) {
            marked->logical.shape[d] = sa[d];
            marked->logical.offset[d] = off[d];
        }
        tk_run rb;
        if (!yb || tk_prepare(&rb, h)) {
            TK_CHECK(0, "build block: %s", mg_graph_error(h)->msg);
            mg_graph_free(h);
            continue;
        }
        rb.info.iteration = 4;
        float *xv = tk_f32(&rb, xb), want[3 * 4 * 8];
        int dropped = 0;
        for (int i = 0; i < 3; i++)
            for (int j = 0; j < 4; j++)
                for (int k = 0; k < 8; k++) {
                    int64_t src = ((i + 2) * 4 + j) * 16 + k + 8, dst = (i * 4 + j) * 8 + k;
                    xv[dst] = xa[src];
                    want[dst] = ya[src];
                    dropped += ya[src] == 0.0f;
                }
        TK_CHECK(dropped > 10 && dropped < 86, "block drops %d of 96", dropped);
        TK_CHECK(tk_exec(&rb) == 0, "exec block");
        tk_expect_close(mode == 0 ? "block (output marked) = block of whole" : "block (input marked) = block of whole",
                        tk_f32(&rb, yb), want, 96, 0, 0);
        tk_release(&rb);
        mg_graph_free(h);
    }
    tk_release(&r);
    mg_graph_free(g);
}

/* Masks per sample: a micro-batch of 4 samples (global micro-batch 1: samples 4..7)
 * and the same samples as 2 sub-batches of 2 (global sub-batches 2 and 3) draw the same
 * masks, in dropout and in attention's dropout, so mg_plan_micro_batch_split keeps the
 * training run's values. Also the executor's sub-batch numbering (mg_exec_instance). */
static void build_pair(mg_graph *g, int64_t b, mg_tensor **x, mg_tensor **y, mg_tensor *qkv[3], mg_tensor **ya) {
    mg_graph_set_mb(g, 0); /* the per-micro-batch part: the kernels see the instance's global index */
    *x = mg_input(g, "x", MG_F32, 3, (int64_t[]){5, b, 40});
    *y = mg_dropout(g, *x, 0.5f);
    const char *nm[3] = {"q", "k", "v"};
    for (int i = 0; i < 3; i++) qkv[i] = mg_input(g, nm[i], MG_F32, 4, (int64_t[]){6, b, 2, 4});
    *ya = mg_attention(g, qkv[0], qkv[1], qkv[2], true, 0.5f);
}

static void fwd_sub_batches(void) {
    mg_exec_info split = {.n_micro = 4, .mb_offset = 1, .mb_stride = 2, .mb_split = 2};
    int want_global[4] = {2, 3, 6, 7}; /* micro-batches 1 and 3, two sub-batches each */
    for (int i = 0; i < 4; i++)
        TK_CHECK(mg_exec_instance(&split, i).mb_global == want_global[i], "instance %d: global sub-batch %d, want %d", i,
                 mg_exec_instance(&split, i).mb_global, want_global[i]);
    mg_graph *g = mg_graph_new();
    mg_tensor *x, *y, *qkv[3], *ya;
    build_pair(g, 4, &x, &y, qkv, &ya);
    tk_run r;
    if (!ya || tk_prepare(&r, g)) {
        TK_CHECK(0, "build: %s", mg_graph_error(g)->msg);
        mg_graph_free(g);
        return;
    }
    r.info.iteration = 3;
    r.info.training = true;
    r.info.mb_offset = 1;
    tk_rng rng = {21};
    tk_fill(&rng, tk_f32(&r, x), mg_numel(x), 1, 2);
    for (int i = 0; i < 3; i++) tk_fill(&rng, tk_f32(&r, qkv[i]), mg_numel(qkv[i]), -1, 1);
    TK_CHECK(tk_exec(&r) == 0, "exec whole");
    for (int q = 0; q < 2; q++) {
        mg_graph *h = mg_graph_new();
        mg_tensor *xs, *ys, *qkvs[3], *yas;
        build_pair(h, 2, &xs, &ys, qkvs, &yas);
        tk_run rs;
        if (!yas || tk_prepare(&rs, h)) {
            TK_CHECK(0, "build sub-batch: %s", mg_graph_error(h)->msg);
            mg_graph_free(h);
            continue;
        }
        rs.info.iteration = 3;
        rs.info.training = true;
        rs.info.mb_offset = 2 + q; /* global sub-batch of micro-batch 1 */
        /* samples 2q, 2q + 1 of the whole micro-batch: dim 1 of [s, b, ...] */
        const mg_tensor *wt[4] = {x, qkv[0], qkv[1], qkv[2]}, *st[4] = {xs, qkvs[0], qkvs[1], qkvs[2]};
        for (int t = 0; t < 4; t++) {
            int64_t rows = wt[t]->shape[0], inner = mg_numel(wt[t]) / rows / 4;
            for (int64_t s = 0; s < rows; s++)
                memcpy(tk_f32(&rs, st[t]) + s * 2 * inner, tk_f32(&r, wt[t]) + (s * 4 + 2 * q) * inner,
                       (size_t)(2 * inner) * sizeof(float));
        }
        TK_CHECK(tk_exec(&rs) == 0, "exec sub-batch %d", q);
        const mg_tensor *ow[2] = {y, ya}, *os[2] = {ys, yas};
        for (int t = 0; t < 2; t++) {
            int64_t rows = ow[t]->shape[0], inner = mg_numel(ow[t]) / rows / 4, n = rows * 2 * inner, dropped = 0;
            float *want = malloc((size_t)n * sizeof *want);
            for (int64_t s = 0; s < rows; s++)
                memcpy(want + s * 2 * inner, tk_f32(&r, ow[t]) + (s * 4 + 2 * q) * inner, (size_t)(2 * inner) * sizeof(float));
            for (int64_t i = 0; i < n; i++) dropped += want[i] == 0.0f;
            TK_CHECK(t || dropped > 0, "dropout: nothing dropped");
            char what[64];
            snprintf(what, sizeof what, "%s, sub-batch %d = its samples of the whole", t ? "attention" : "dropout", q);
            tk_expect_close(what, tk_f32(&rs, os[t]), want, n, 0, 0);
            free(want);
        }
        tk_release(&rs);
        mg_graph_free(h);
    }
    tk_release(&r);
    mg_graph_free(g);
}

/* n = 200000 Bernoulli(1 - p) draws: the kept fraction is within 5 standard
 * deviations sqrt(p (1 - p) / n) of 1 - p (false alarm ~6e-7), and the mean of y
 * over x = 1 is within 5 sigma of 1 (inverted dropout keeps the expectation). */
static void fwd_keep_fraction(void) {
    const float ps[] = {0.1f, 0.5f, 0.9f};
    const int64_t n = 200000;
    for (int t = 0; t < 3; t++) {
        float p = ps[t];
        mg_graph *g = mg_graph_new();
        mg_tensor *x = mg_input(g, "x", MG_F32, 2, (int64_t[]){400, 500}), *y = mg_dropout(g, x, p);
        tk_run r;
        if (!y || tk_prepare(&r, g)) {
            TK_CHECK(0, "build");
            mg_graph_free(g);
            return;
        }
        float *xv = tk_f32(&r, x);
        for (int64_t i = 0; i < n; i++) xv[i] = 1.0f;
        for (int it = 0; it < 2; it++) {
            r.info.iteration = it;
            tk_exec(&r);
            const float *yv = tk_f32(&r, y);
            int64_t kept = 0;
            double sum = 0;
            for (int64_t i = 0; i < n; i++) {
                kept += yv[i] != 0.0f;
                sum += yv[i];
            }
            double f = (double)kept / (double)n, sd = sqrt((double)p * (1.0 - p) / (double)n);
            TK_CHECK(fabs(f - (1.0 - p)) < 5 * sd, "p %g: kept fraction %.5f, want %.5f +- %.5f", (double)p, f,
                     1.0 - p, 5 * sd);
            double msd = sd / (1.0 - p); /* sd of mean(y) */
            TK_CHECK(fabs(sum / (double)n - 1.0) < 5 * msd, "p %g: mean %.5f", (double)p, sum / (double)n);
            printf("dropout p %.1f iteration %d: kept %.5f (want %.5f +- %.5f)\n", (double)p, it, f, 1.0 - p,
                   5 * sd);
        }
        tk_release(&r);
        mg_graph_free(g);
    }
}

static void fwd_errors(void) {
    mg_graph *g = mg_graph_new();
    mg_tensor *x = mg_input(g, "x", MG_F32, 2, (int64_t[]){3, 4});
    TK_CHECK(mg_dropout(g, x, 1.0f) == NULL, "p = 1 must fail");
    const mg_error *e = mg_graph_error(g);
    TK_CHECK(e->code == MG_ERR_SHAPE && strstr(e->msg, "dropout") && strstr(e->msg, "[3, 4]"), "message: %s",
             e->msg);
    mg_graph_free(g);
    g = mg_graph_new();
    x = mg_input(g, "x", MG_F32, 2, (int64_t[]){3, 4});
    TK_CHECK(mg_dropout(g, x, -0.1f) == NULL && mg_graph_error(g)->code == MG_ERR_SHAPE, "p < 0 must fail");
    mg_graph_free(g);
    g = mg_graph_new();
    x = mg_input(g, "x", MG_I32, 2, (int64_t[]){3, 4});
    TK_CHECK(mg_dropout(g, x, 0.5f) == NULL && mg_graph_error(g)->code == MG_ERR_SHAPE, "i32 input must fail");
    mg_graph_free(g);
}

/* ---- gradient ---------------------------------------------------------------------------- */
static mg_tensor *gb_dropout(mg_graph *g, mg_tensor *const *l, void *c) {
    int mb = *(int *)c;
    mg_graph_set_mb(g, mb); /* the loss and the backward follow in this part */
    return mg_dropout(g, l[0], 0.4f);
}

/* The block generator (vectorised over counters) draws exactly mg_rng_uniform's values:
 * runs starting at every lane, crossing the 32-bit counter word, of every length
 * around the vector block (32 values). */
static void fwd_uniform_block(void) {
    const uint64_t firsts[] = {0, 1, 2, 3, 5, 30, 1000003, (1ull << 34) - 7, (1ull << 34) + 2, ~0ull - 300};
    const int64_t lens[] = {0, 1, 3, 4, 31, 32, 33, 64, 65, 257};
    float out[300];
    int bad = 0, paths = 0;
    for (int isa = -1; isa <= 2; isa++) /* the dispatched path, then generic, AVX2, AVX-512 */
    for (size_t a = 0; a < sizeof firsts / sizeof *firsts; a++)
        for (size_t b = 0; b < sizeof lens / sizeof *lens; b++) {
            uint64_t f = firsts[a];
            int64_t n = lens[b];
            if (isa < 0) mg_rng_uniform_block(42, 0x1234abcdu, mg_rng_dropout_stream(7, 3), f, n, out);
            else if (!mg_rng_uniform_block_isa(isa, 42, 0x1234abcdu, mg_rng_dropout_stream(7, 3), f, n, out)) continue;
            paths += a == 0 && b == 0;
            for (int64_t i = 0; i < n; i++) {
                float want = mg_rng_uniform(42, 0x1234abcdu, mg_rng_dropout_stream(7, 3), f + (uint64_t)i);
                if (memcmp(&want, &out[i], sizeof want) && bad++ < 5)
                    TK_CHECK(0, "first %llu, n %lld: value %lld is %.9g, want %.9g", (unsigned long long)f,
                             (long long)n, (long long)i, (double)out[i], (double)want);
            }
        }
    TK_CHECK(bad == 0, "%d values differ from mg_rng_uniform", bad);
    printf("uniform_block: %d paths checked (dispatched + the ones this CPU has)\n", paths);
}

static void grad_dropout(void) {
    tk_leaf x[] = {{"x", MG_F32, 3, {2, 3, 8}, true, -1, 1}};
    int mb = -1;
    tk_gradcheck("dropout p 0.4", 1, x, gb_dropout, &mb, NULL);
    mb = 3; /* the gradient must use the forward's micro-batch stream */
    tk_gradcheck("dropout p 0.4, micro-batch 3", 1, x, gb_dropout, &mb, NULL);

    /* the backward node: a dropout with the forward's key, p and mb */
    mg_graph *g = mg_graph_new();
    mg_tensor *w = mg_param(g, "w", 1, (int64_t[]){6}, (mg_init){MG_INIT_ONES, 0});
    mg_graph_set_mb(g, 1);
    mg_tensor *y = mg_dropout(g, w, 0.25f);
    mg_tensor *loss = mg_sum(g, y, MG_ALL_AXES, false);
    mg_graph_set_mb(g, -1);
    mg_error err = {0};
    TK_CHECK(loss && mg_graph_backward(g, loss, &err) == 0, "backward: %s", err.msg);
    int found = 0;
    for (int i = 0; i < mg_graph_n_nodes(g); i++) {
        mg_node *nd = mg_graph_node(g, i);
        if (nd->op != MG_OP_DROPOUT || nd == y->src) continue;
        found++;
        TK_CHECK(nd->attrs.dropout.rng_key == y->src->attrs.dropout.rng_key, "backward key");
        TK_CHECK(nd->attrs.dropout.p == 0.25f && nd->mb == 1 && nd->phase == MG_PHASE_BACKWARD, "backward node");
    }
    TK_CHECK(found == 1, "%d backward dropout nodes", found);
    mg_graph_free(g);
}

int main(int argc, char **argv) {
    static const tk_case cases[] = {
        {"forward.dropout", fwd_dropout},
        {"forward.dropout_slice", fwd_slice},
        {"forward.dropout_sub_batches", fwd_sub_batches},
        {"forward.uniform_block", fwd_uniform_block},
        {"forward.dropout_keep_fraction", fwd_keep_fraction},
        {"forward.errors_dropout", fwd_errors},
        {"grad.dropout", grad_dropout},
    };
    return tk_main(argc, argv, cases, (int)(sizeof cases / sizeof *cases));
}

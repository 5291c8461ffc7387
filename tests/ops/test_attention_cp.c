/* Context parallelism's attention pieces on one process:
 *   forward.attention_merge       merging attention over key blocks == attention over all keys
 *   forward.attention_cp_ring     the whole load-balanced ring of partitioners/cp.c, emulated for every
 *                                 cp rank: q chunks r and 2C-1-r against every visible K/V chunk, merged;
 *                                 the backward as attention_bwd per block with the merged y and lse,
 *                                 dQ summed over blocks, dK/dV summed per chunk: equal to the whole
 *                                 attention and its backward (C = 2, 3; MHA and GQA; dropout on)
 *   forward.errors_attention_merge shape errors
 *   grad.ring_shift               finite differences through ring_shift on a group of one (the
 *                                 gradient rule: the reverse shift; tests/partitioners/test_cp.c checks
 *                                 it across ranks under mpirun)
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mgraph/comm.h"
#include "mgraph/plan.h"
#include "testkit.h"

typedef struct {
    int C, cl, B, NH, NG, HD;
    float p;
} cfg;

static mg_tensor *in4(mg_graph *g, const char *nm, int s, int B, int h, int hd) {
    return mg_input(g, nm, MG_F32, 4, (int64_t[]){s, B, h, hd});
}

/* A chunk [cl, B, H, HD] of a whole [S, ...] tensor standing for rows c*cl.. of the
 * logical tensor `whole` (its key: the dropout mask of the whole attention). */
static void as_chunk(mg_tensor *t, const mg_tensor *whole, int c, int cl) {
    t->logical = whole->logical;
    t->logical.offset[0] = (int64_t)c * cl;
}

static void copy_rows(float *dst, const float *src, int r0, int n, int64_t row) {
    memcpy(dst, src + (int64_t)r0 * row, (size_t)(n * row) * sizeof *dst);
}

/* The whole attention and its backward on [S = 2C·cl] rows; then, per cp rank, the ring. */
static void ring_case(const cfg *c) {
    int S = 2 * c->C * c->cl, B = c->B, NH = c->NH, NG = c->NG, HD = c->HD, cl = c->cl;
    int64_t qrow = (int64_t)B * NH * HD, krow = (int64_t)B * NG * HD;
    mg_graph *g = mg_graph_new();
    mg_tensor *q = in4(g, "q", S, B, NH, HD), *k = in4(g, "k", S, B, NG, HD), *v = in4(g, "v", S, B, NG, HD);
    mg_tensor *dy = in4(g, "dy", S, B, NH, HD);
    mg_tensor *y = mg_attention(g, q, k, v, true, c->p);
    mg_attrs at = y->src->attrs;
    mg_tensor *bin[6] = {dy, q, k, v, y, y->src->out[1]};
    mg_node *bw = mg_node_new(g, MG_OP_ATTENTION_BWD, &at, 6, bin, "bwd");
    tk_run r;
    if (!bw || tk_prepare(&r, g)) {
        TK_CHECK(0, "build: %s", mg_graph_error(g)->msg);
        mg_graph_free(g);
        return;
    }
    r.info.iteration = 3;
    tk_rng rng = {11};
    tk_fill(&rng, tk_f32(&r, q), mg_numel(q), -2, 2);
    tk_fill(&rng, tk_f32(&r, k), mg_numel(k), -2, 2);
    tk_fill(&rng, tk_f32(&r, v), mg_numel(v), -1, 1);
    tk_fill(&rng, tk_f32(&r, dy), mg_numel(dy), -1, 1);
    TK_CHECK(tk_exec(&r) == 0, "whole exec");
    const float *Q = tk_f32(&r, q), *K = tk_f32(&r, k), *V = tk_f32(&r, v), *DY = tk_f32(&r, dy);
    const float *Y = tk_f32(&r, y), *L = tk_f32(&r, y->src->out[1]);
    const float *DQ = tk_f32(&r, bw->out[0]), *DK = tk_f32(&r, bw->out[1]), *DV = tk_f32(&r, bw->out[2]);
    float *dk_sum = calloc((size_t)S * krow, sizeof *dk_sum), *dv_sum = calloc((size_t)S * krow, sizeof *dv_sum);

    for (int rank = 0; rank < c->C; rank++) {
        int qc[2] = {rank, 2 * c->C - 1 - rank};
        mg_graph *h = mg_graph_new();
        mg_tensor *qi[2], *dyi[2], *kj[64], *vj[64], *ym[2], *lm[2], *dq[2] = {0};
        mg_tensor *dkc[64] = {0}, *dvc[64] = {0};
        for (int j = 0; j < 2 * c->C; j++) {
            char nm[32];
            snprintf(nm, sizeof nm, "k%d", j);
            kj[j] = in4(h, nm, cl, B, NG, HD);
            snprintf(nm, sizeof nm, "v%d", j);
            vj[j] = in4(h, nm, cl, B, NG, HD);
            as_chunk(kj[j], k, j, cl);
            as_chunk(vj[j], v, j, cl);
        }
        for (int a = 0; a < 2; a++) {
            char nm[32];
            snprintf(nm, sizeof nm, "q%d", a);
            qi[a] = in4(h, nm, cl, B, NH, HD);
            as_chunk(qi[a], q, qc[a], cl);
            snprintf(nm, sizeof nm, "dy%d", a);
            dyi[a] = in4(h, nm, cl, B, NH, HD);
            /* the ring order: the own K/V first, then rank-1's, rank-2's, ... */
            mg_tensor *parts[128];
            int np = 0, js[128];
            for (int t = 0; t < c->C; t++) {
                int src = (rank - t + c->C) % c->C, pair[2] = {src, 2 * c->C - 1 - src};
                for (int e = 0; e < 2; e++) {
                    int j = pair[e];
                    if (j > qc[a]) continue; /* entirely in the future: masked */
                    mg_tensor *in[3] = {qi[a], kj[j], vj[j]};
                    mg_node *n = mg_node_new(h, MG_OP_ATTENTION, &at, 3, in, NULL);
                    parts[np] = n->out[0];
                    parts[np + 1] = n->out[1];
                    js[np / 2] = j;
                    np += 2;
                }
            }
            mg_node *m = mg_node_new(h, MG_OP_ATTENTION_MERGE, NULL, np, parts, NULL);
            ym[a] = m->out[0];
            lm[a] = m->out[1];
            for (int e = 0; e < np / 2; e++) {
                int j = js[e];
                mg_tensor *in[6] = {dyi[a], qi[a], kj[j], vj[j], ym[a], lm[a]};
                mg_node *b = mg_node_new(h, MG_OP_ATTENTION_BWD, &at, 6, in, NULL);
                dq[a] = dq[a] ? mg_add(h, dq[a], b->out[0]) : b->out[0];
                dkc[j] = dkc[j] ? mg_add(h, dkc[j], b->out[1]) : b->out[1];
                dvc[j] = dvc[j] ? mg_add(h, dvc[j], b->out[2]) : b->out[2];
            }
        }
        tk_run rr;
        if (mg_graph_error(h)->code || tk_prepare(&rr, h)) {
            TK_CHECK(0, "rank %d build: %s", rank, mg_graph_error(h)->msg);
            mg_graph_free(h);
            continue;
        }
        rr.info.iteration = 3;
        for (int j = 0; j < 2 * c->C; j++) {
            copy_rows(tk_f32(&rr, kj[j]), K, j * cl, cl, krow);
            copy_rows(tk_f32(&rr, vj[j]), V, j * cl, cl, krow);
        }
        for (int a = 0; a < 2; a++) {
            copy_rows(tk_f32(&rr, qi[a]), Q, qc[a] * cl, cl, qrow);
            copy_rows(tk_f32(&rr, dyi[a]), DY, qc[a] * cl, cl, qrow);
        }
        TK_CHECK(tk_exec(&rr) == 0, "rank %d exec", rank);
        char what[96];
        for (int a = 0; a < 2; a++) {
            snprintf(what, sizeof what, "C %d rank %d chunk %d: y", c->C, rank, qc[a]);
            tk_expect_close(what, tk_f32(&rr, ym[a]), Y + (int64_t)qc[a] * cl * qrow, cl * qrow, 1e-5, 1e-6);
            float *wl = malloc((size_t)B * NH * cl * sizeof *wl);
            for (int bh = 0; bh < B * NH; bh++)
                for (int i = 0; i < cl; i++) wl[bh * cl + i] = L[(int64_t)bh * S + qc[a] * cl + i];
            snprintf(what, sizeof what, "C %d rank %d chunk %d: lse", c->C, rank, qc[a]);
            tk_expect_close(what, tk_f32(&rr, lm[a]), wl, (int64_t)B * NH * cl, 1e-5, 1e-6);
            free(wl);
            snprintf(what, sizeof what, "C %d rank %d chunk %d: dq", c->C, rank, qc[a]);
            tk_expect_close(what, tk_f32(&rr, dq[a]), DQ + (int64_t)qc[a] * cl * qrow, cl * qrow, 1e-4, 1e-5);
        }
        for (int j = 0; j < 2 * c->C; j++) /* this rank's queries' share of every chunk's dK, dV */
            if (dkc[j]) {
                const float *a1 = tk_f32(&rr, dkc[j]), *a2 = tk_f32(&rr, dvc[j]);
                for (int64_t e = 0; e < cl * krow; e++) {
                    dk_sum[(int64_t)j * cl * krow + e] += a1[e];
                    dv_sum[(int64_t)j * cl * krow + e] += a2[e];
                }
            }
        tk_release(&rr);
        mg_graph_free(h);
    }
    char what[64];
    snprintf(what, sizeof what, "C %d: dk summed over ranks", c->C);
    tk_expect_close(what, dk_sum, DK, S * krow, 1e-4, 1e-5);
    snprintf(what, sizeof what, "C %d: dv summed over ranks", c->C);
    tk_expect_close(what, dv_sum, DV, S * krow, 1e-4, 1e-5);
    free(dk_sum);
    free(dv_sum);
    tk_release(&r);
    mg_graph_free(g);
}

static void fwd_ring(void) {
    cfg cs[] = {{2, 3, 2, 4, 2, 4, 0.0f}, {2, 5, 1, 2, 2, 8, 0.3f}, {3, 4, 2, 4, 1, 4, 0.25f},
                {2, 40, 1, 2, 1, 4, 0.1f}}; /* chunks longer than the kernel's row block: 80 rows */
    for (size_t i = 0; i < sizeof cs / sizeof *cs; i++) ring_case(&cs[i]);
}

/* Merge of two key blocks of a non-causal attention: y, lse of the union; and a row
 * that sees no key in a block (lse -inf) takes the other block whole. */
static void fwd_merge(void) {
    int S = 6, B = 2, NH = 2, HD = 4, n1 = 2;
    mg_graph *g = mg_graph_new();
    /* key blocks carry their logical offsets (the causal mask needs them) */
    mg_tensor *q = in4(g, "q", S, B, NH, HD);
    mg_tensor *k = in4(g, "k", S, B, NH, HD), *v = in4(g, "v", S, B, NH, HD);
    mg_tensor *y = mg_attention(g, q, k, v, true, 0);
    mg_tensor *kb[2] = {in4(g, "k1", n1, B, NH, HD), in4(g, "k2", S - n1, B, NH, HD)};
    mg_tensor *vb[2] = {in4(g, "v1", n1, B, NH, HD), in4(g, "v2", S - n1, B, NH, HD)};
    for (int e = 0; e < 2; e++) {
        kb[e]->logical = k->logical;
        vb[e]->logical = v->logical;
        kb[e]->logical.offset[0] = vb[e]->logical.offset[0] = e ? n1 : 0;
    }
    mg_tensor *p1 = mg_attention(g, q, kb[0], vb[0], true, 0), *p2 = mg_attention(g, q, kb[1], vb[1], true, 0);
    mg_tensor *parts[4] = {p2, p2->src->out[1], p1, p1->src->out[1]}; /* any order */
    mg_node *m = mg_node_new(g, MG_OP_ATTENTION_MERGE, NULL, 4, parts, NULL);
    tk_run r;
    if (!m || tk_prepare(&r, g)) {
        TK_CHECK(0, "build: %s", mg_graph_error(g)->msg);
        mg_graph_free(g);
        return;
    }
    tk_rng rng = {3};
    tk_fill(&rng, tk_f32(&r, q), mg_numel(q), -2, 2);
    tk_fill(&rng, tk_f32(&r, k), mg_numel(k), -2, 2);
    tk_fill(&rng, tk_f32(&r, v), mg_numel(v), -1, 1);
    int64_t row = (int64_t)B * NH * HD;
    copy_rows(tk_f32(&r, kb[0]), tk_f32(&r, k), 0, n1, row);
    copy_rows(tk_f32(&r, kb[1]), tk_f32(&r, k), n1, S - n1, row);
    copy_rows(tk_f32(&r, vb[0]), tk_f32(&r, v), 0, n1, row);
    copy_rows(tk_f32(&r, vb[1]), tk_f32(&r, v), n1, S - n1, row);
    TK_CHECK(tk_exec(&r) == 0, "exec");
    /* rows 0..n1-1 see nothing of block 2: its lse is -inf there */
    TK_CHECK(isinf(tk_f32(&r, p2->src->out[1])[0]), "block 2 row 0 lse should be -inf");
    tk_expect_close("merge y", tk_f32(&r, m->out[0]), tk_f32(&r, y), mg_numel(y), 1e-5, 1e-6);
    tk_expect_close("merge lse", tk_f32(&r, m->out[1]), tk_f32(&r, y->src->out[1]), B * NH * S, 1e-5, 1e-6);
    tk_release(&r);
    mg_graph_free(g);
}

static void fwd_errors(void) {
    mg_graph *g = mg_graph_new();
    mg_tensor *y = in4(g, "y", 4, 2, 2, 4), *l = mg_input(g, "l", MG_F32, 3, (int64_t[]){2, 2, 4});
    mg_tensor *bad = mg_input(g, "bad", MG_F32, 3, (int64_t[]){2, 2, 5});
    mg_tensor *odd[3] = {y, l, y};
    TK_CHECK(!mg_node_new(g, MG_OP_ATTENTION_MERGE, NULL, 3, odd, NULL), "odd input count accepted");
    TK_CHECK(strstr(mg_graph_error(g)->msg, "pairs") != NULL, "message: %s", mg_graph_error(g)->msg);
    mg_graph_free(g);
    g = mg_graph_new();
    y = in4(g, "y", 4, 2, 2, 4);
    bad = mg_input(g, "bad", MG_F32, 3, (int64_t[]){2, 2, 5});
    mg_tensor *mis[2] = {y, bad};
    TK_CHECK(!mg_node_new(g, MG_OP_ATTENTION_MERGE, NULL, 2, mis, NULL), "bad lse shape accepted");
    TK_CHECK(strstr(mg_graph_error(g)->msg, "lse_j") != NULL, "message: %s", mg_graph_error(g)->msg);
    mg_graph_free(g);
}

static mg_tensor *gb_shift(mg_graph *g, mg_tensor *const *l, void *ctx) {
    (void)ctx;
    return mg_mul(g, mg_ring_shift(g, l[0], MG_GROUP_CP, 1, 1, 0), l[1]);
}

static void grad_ring_shift(void) {
    tk_leaf l[] = {{"x", MG_F32, 3, {3, 2, 4}, true, -1, 1}, {"w", MG_F32, 3, {3, 2, 4}, true, -1, 1}};
    tk_gradcheck("ring_shift (group of one) * w", 2, l, gb_shift, NULL, NULL);
    mg_graph *g = mg_graph_new();
    mg_tensor *x = mg_input(g, "x", MG_F32, 2, (int64_t[]){2, 3});
    mg_tensor *y = mg_ring_shift(g, x, MG_GROUP_CP, 4, 1, 7);
    TK_CHECK(y && y->src->attrs.comm.peer == 1 && y->src->attrs.comm.seq == 7, "attrs");
    double bytes[MG_GROUP_COUNT];
    mg_plan_comm_bytes(g, 1, bytes);
    TK_CHECK(bytes[MG_GROUP_CP] == 24, "bytes %g: want 24 (the block, sent once)", bytes[MG_GROUP_CP]);
    mg_graph_free(g);
}

int main(int argc, char **argv) {
    static const tk_case cases[] = {
        {"forward.attention_merge", fwd_merge},
        {"forward.attention_cp_ring", fwd_ring},
        {"forward.errors_attention_merge", fwd_errors},
        {"grad.ring_shift", grad_ring_shift},
    };
    return tk_main(argc, argv, cases, (int)(sizeof cases / sizeof *cases));
}

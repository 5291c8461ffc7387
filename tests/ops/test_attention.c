/* Fused attention: forward (y and lse) against a naive double loop with the same
 * dropout mask rule, gradients (MHA and GQA, causal or not, with dropout, within
 * documents, in a sliding window) against finite differences, partitioned runs (head split, sequence split
 * of q) against the corresponding block of the whole run, and shape errors. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mgraph/rng.h"
#include "testkit.h"

typedef struct {
    int S, B, NH, NG, HD;
    bool causal;
    float p;
    bool docs;  /* mg_attention_masked: sample b's documents as doc_starts writes them */
    int window; /* mg_attention_masked: a sliding window of this many keys (0: none) */
    int HV;     /* the values' head size (0: HD): mg_attention_scaled, as multi-latent attention */
    float scale; /* with HV: the softmax scale (0: 1 / sqrt(HD)) */
} cfg;

static int hv_of(const cfg *c) { return c->HV ? c->HV : c->HD; }

/* The builder a case asks for: mg_attention_masked with documents or a window. */
static mg_tensor *attention_of(mg_graph *g, const cfg *c, mg_tensor *q, mg_tensor *k, mg_tensor *v, mg_tensor *ds) {
    if (c->HV) return mg_attention_scaled(g, q, k, v, ds, c->window, c->p, c->scale);
    if (c->docs || c->window) return mg_attention_masked(g, q, k, v, ds, c->window, c->p);
    return mg_attention(g, q, k, v, c->causal, c->p);
}

/* doc_start [S, B] of documents ending where a deterministic draw says (about one
 * token in five), different in every sample: each token's document start. */
static void doc_starts(int S, int B, int32_t *ds) {
    for (int b = 0; b < B; b++) {
        int32_t start = 0;
        for (int i = 0; i < S; i++) {
            ds[i * B + b] = start;
            if ((i * 7 + b * 3 + i / 3) % 5 == 0) start = i + 1; /* token i ends its document */
        }
    }
}

/* Naive reference: y [S, B, NH, HD], lse [B, NH, S], for whole (unsplit) tensors;
 * ds: doc_start [S, B] or NULL. */
static void ref_attention(const cfg *c, const float *q, const float *k, const float *v, const int32_t *ds,
                          uint64_t seed, uint64_t key, int64_t iteration, int64_t sample0, bool training, float *y,
                          float *lse) {
    int S = c->S, B = c->B, NH = c->NH, NG = c->NG, HD = c->HD, HV = hv_of(c), rep = NH / NG;
    double scale = c->scale ? (double)c->scale : 1.0 / sqrt((double)HD);
    double *s = malloc((size_t)S * sizeof *s);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            int g = h / rep;
            for (int i = 0; i < S; i++) {
                double m = -INFINITY;
                for (int j = 0; j < S; j++) {
                    double d = 0;
                    for (int e = 0; e < HD; e++)
                        d += (double)q[((i * B + b) * NH + h) * HD + e] * k[((j * B + b) * NG + g) * HD + e];
                    bool hidden = (c->causal && j > i) || (ds && j < ds[i * B + b]) ||
                                  (c->window && j <= i - c->window);
                    s[j] = hidden ? -INFINITY : d * scale;
                    if (s[j] > m) m = s[j];
                }
                double sum = 0;
                for (int j = 0; j < S; j++) sum += exp(s[j] - m);
                lse[(b * NH + h) * S + i] = (float)(m + log(sum));
                for (int e = 0; e < HV; e++) {
                    double acc = 0;
                    for (int j = 0; j < S; j++) {
                        double pr = exp(s[j] - m) / sum;
                        if (training && c->p > 0) {
                            /* one stream per sample (global sample0 + b), index (h, i, j) */
                            uint64_t idx = ((uint64_t)h * S + i) * S + j;
                            uint64_t stream = mg_rng_dropout_stream(iteration, sample0 + b);
                            pr = mg_rng_uniform(seed, key, stream, idx) >= c->p ? pr / (1.0 - c->p) : 0.0;
                        }
                        acc += pr * v[((j * B + b) * NG + g) * HV + e];
                    }
                    y[((i * B + b) * NH + h) * HV + e] = (float)acc;
                }
            }
        }
    free(s);
}

static void check_forward(const cfg *c, bool training) {
    mg_graph *g = mg_graph_new();
    int64_t sq[4] = {c->S, c->B, c->NH, c->HD}, skv[4] = {c->S, c->B, c->NG, c->HD}, sv[4] = {c->S, c->B, c->NG, hv_of(c)};
    mg_tensor *q = mg_input(g, "q", MG_F32, 4, sq), *k = mg_input(g, "k", MG_F32, 4, skv),
              *v = mg_input(g, "v", MG_F32, 4, sv);
    mg_tensor *dst = c->docs ? mg_input(g, "doc_start", MG_I32, 2, (int64_t[]){c->S, c->B}) : NULL;
    mg_tensor *y = attention_of(g, c, q, k, v, dst);
    tk_run r;
    if (!y || tk_prepare(&r, g)) {
        TK_CHECK(0, "build: %s", mg_graph_error(g)->msg);
        mg_graph_free(g);
        return;
    }
    r.info.training = training;
    r.info.iteration = 3;
    int32_t *ds = dst ? mg_storage_data(r.st, dst) : NULL;
    if (ds) doc_starts(c->S, c->B, ds);
    tk_rng rng = {99};
    tk_fill(&rng, tk_f32(&r, q), mg_numel(q), -2, 2);
    tk_fill(&rng, tk_f32(&r, k), mg_numel(k), -2, 2);
    tk_fill(&rng, tk_f32(&r, v), mg_numel(v), -1, 1);
    TK_CHECK(tk_exec(&r) == 0, "exec");
    const mg_node *nd = y->src;
    TK_CHECK(nd->out[1]->ndim == 3 && nd->out[1]->shape[0] == c->B && nd->out[1]->shape[1] == c->NH &&
                 nd->out[1]->shape[2] == c->S,
             "lse shape");
    TK_CHECK(nd->attrs.attention.rng_key == mg_hash_name(y->name), "rng_key = hash of the output name");
    int64_t ny = mg_numel(y), nl = mg_numel(nd->out[1]);
    float *wy = malloc((size_t)ny * sizeof *wy), *wl = malloc((size_t)nl * sizeof *wl);
    ref_attention(c, tk_f32(&r, q), tk_f32(&r, k), tk_f32(&r, v), ds, r.info.seed, nd->attrs.attention.rng_key,
                  r.info.iteration, (int64_t)(nd->mb > 0 ? nd->mb : 0) * c->B, training, wy, wl);
    char what[128];
    snprintf(what, sizeof what,
             "attention y (S %d B %d nh %d ng %d hd %d hv %d causal %d p %g training %d docs %d window %d)", c->S, c->B,
             c->NH, c->NG, c->HD, hv_of(c), c->causal, (double)c->p, training, c->docs, c->window);
    tk_expect_close(what, tk_f32(&r, y), wy, ny, 1e-5, 1e-5);
    snprintf(what, sizeof what, "attention lse (S %d nh %d ng %d causal %d)", c->S, c->NH, c->NG, c->causal);
    tk_expect_close(what, tk_f32(&r, nd->out[1]), wl, nl, 1e-5, 1e-5);
    free(wy);
    free(wl);
    tk_release(&r);
    mg_graph_free(g);
}

static void fwd_attention(void) {
    cfg cs[] = {{6, 2, 4, 4, 4, false, 0, false, 0, 0, 0}, {6, 2, 4, 4, 4, true, 0, false, 0, 0, 0}, {7, 2, 4, 2, 8, true, 0, false, 0, 0, 0},
                {5, 3, 6, 1, 4, false, 0, false, 0, 0, 0}, {1, 1, 1, 1, 2, true, 0, false, 0, 0, 0}, {33, 2, 4, 2, 16, true, 0, false, 0, 0, 0},
                {150, 1, 2, 1, 8, true, 0, false, 0, 0, 0},  {130, 2, 2, 2, 4, false, 0, false, 0, 0, 0}}; /* > one causal row block */
    for (size_t i = 0; i < sizeof cs / sizeof *cs; i++) check_forward(&cs[i], true);
    /* dropout_p > 0 but not training: no dropout */
    cfg e = {6, 2, 4, 2, 4, true, 0.5f, false, 0, 0, 0};
    check_forward(&e, false);
}

static void fwd_attention_dropout(void) {
    cfg cs[] = {{6, 2, 4, 4, 4, false, 0.3f, false, 0, 0, 0}, {7, 2, 4, 2, 4, true, 0.5f, false, 0, 0, 0}, {16, 2, 4, 2, 8, true, 0.1f, false, 0, 0, 0},
                {140, 1, 2, 1, 8, true, 0.2f, false, 0, 0, 0}};
    for (size_t i = 0; i < sizeof cs / sizeof *cs; i++) check_forward(&cs[i], true);
}

/* Within documents: MHA and GQA, one and several causal row blocks, with dropout. */
static void fwd_attention_docs(void) {
    cfg cs[] = {{7, 2, 4, 2, 4, true, 0, true, 0, 0, 0},      {16, 3, 2, 2, 8, true, 0, true, 0, 0, 0},
                {150, 2, 2, 1, 8, true, 0, true, 0, 0, 0},    {7, 2, 4, 2, 4, true, 0.4f, true, 0, 0, 0},
                {140, 2, 2, 1, 8, true, 0.2f, true, 0, 0, 0}, {1, 1, 1, 1, 2, true, 0, true, 0, 0, 0}};
    for (size_t i = 0; i < sizeof cs / sizeof *cs; i++) check_forward(&cs[i], true);
}

/* In a sliding window: narrower and wider than a causal row block (64), a window of one
 * key (each token sees itself), one as long as the sequence (the plain causal mask),
 * with dropout, and with documents (the later of the two starts binds). */
static void fwd_attention_window(void) {
    cfg cs[] = {{9, 2, 4, 2, 4, true, 0, false, 3, 0, 0},       {150, 2, 2, 1, 8, true, 0, false, 20, 0, 0},
                {150, 1, 2, 2, 8, true, 0, false, 100, 0, 0},   {7, 2, 4, 4, 4, true, 0, false, 1, 0, 0},
                {7, 2, 4, 2, 4, true, 0, false, 7, 0, 0},       {140, 2, 2, 1, 8, true, 0.2f, false, 30, 0, 0},
                {150, 2, 2, 1, 8, true, 0, true, 4, 0, 0},      {140, 2, 4, 2, 8, true, 0.3f, true, 70, 0, 0}};
    for (size_t i = 0; i < sizeof cs / sizeof *cs; i++) check_forward(&cs[i], true);
}

/* ---- partitioned runs reproduce the serial result ------------------------------------ */
/* Runs attention on the block q[s0:s0+sl, :, h0:h0+hl], k, v[:, :, g0:g0+gl] of the
 * whole [S, B, NH|NG, HD] inputs (logical offsets set on the block tensors) and
 * compares with the same block of the whole run's y and lse. */
static void check_block(const cfg *c, const float *qa, const float *ka, const float *va, const float *y_all,
                        const float *lse_all, int s0, int sl, int h0, int hl, const char *what) {
    int S = c->S, B = c->B, NH = c->NH, NG = c->NG, HD = c->HD, rep = NH / NG;
    int g0 = h0 / rep, gl = hl / rep;
    mg_graph *g = mg_graph_new();
    int64_t sq[4] = {sl, B, hl, HD}, skv[4] = {S, B, gl, HD};
    mg_tensor *q = mg_input(g, "q", MG_F32, 4, sq), *k = mg_input(g, "k", MG_F32, 4, skv),
              *v = mg_input(g, "v", MG_F32, 4, skv);
    q->logical.shape[0] = S;
    q->logical.offset[0] = s0;
    q->logical.shape[2] = NH;
    q->logical.offset[2] = h0;
    k->logical.shape[2] = v->logical.shape[2] = NG;
    k->logical.offset[2] = v->logical.offset[2] = g0;
    mg_tensor *dst = c->docs ? mg_input(g, "doc_start", MG_I32, 2, (int64_t[]){sl, B}) : NULL;
    mg_tensor *y = attention_of(g, c, q, k, v, dst);
    tk_run r;
    if (!y || tk_prepare(&r, g)) {
        TK_CHECK(0, "build: %s", mg_graph_error(g)->msg);
        mg_graph_free(g);
        return;
    }
    r.info.iteration = 5;
    if (dst) { /* the block's rows of the whole doc_start: logical positions */
        int32_t *all = malloc((size_t)S * B * sizeof *all), *ds = mg_storage_data(r.st, dst);
        doc_starts(S, B, all);
        memcpy(ds, all + (size_t)s0 * B, (size_t)sl * B * sizeof *ds);
        free(all);
    }
    float *qv = tk_f32(&r, q), *kv = tk_f32(&r, k), *vv = tk_f32(&r, v);
    for (int i = 0; i < sl; i++)
        for (int b = 0; b < B; b++)
            memcpy(qv + ((i * B + b) * hl) * HD, qa + (((i + s0) * B + b) * NH + h0) * HD, (size_t)(hl * HD) * 4);
    for (int j = 0; j < S; j++)
        for (int b = 0; b < B; b++) {
            memcpy(kv + ((j * B + b) * gl) * HD, ka + ((j * B + b) * NG + g0) * HD, (size_t)(gl * HD) * 4);
            memcpy(vv + ((j * B + b) * gl) * HD, va + ((j * B + b) * NG + g0) * HD, (size_t)(gl * HD) * 4);
        }
    TK_CHECK(tk_exec(&r) == 0, "exec");
    float *wy = malloc((size_t)mg_numel(y) * sizeof *wy), *wl = malloc((size_t)B * hl * sl * sizeof *wl);
    for (int i = 0; i < sl; i++)
        for (int b = 0; b < B; b++)
            memcpy(wy + ((i * B + b) * hl) * HD, y_all + (((i + s0) * B + b) * NH + h0) * HD, (size_t)(hl * HD) * 4);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < hl; h++)
            for (int i = 0; i < sl; i++) wl[(b * hl + h) * sl + i] = lse_all[(b * NH + h + h0) * S + i + s0];
    /* same arithmetic per row: bitwise equal up to BLAS blocking, so a tight bound */
    tk_expect_close(what, tk_f32(&r, y), wy, mg_numel(y), 1e-5, 1e-6);
    tk_expect_close(what, tk_f32(&r, y->src->out[1]), wl, B * hl * sl, 1e-5, 1e-6);
    free(wy);
    free(wl);
    tk_release(&r);
    mg_graph_free(g);
}

typedef struct { int s0, sl, h0, hl; const char *what; } blk;

static void split_case(const cfg *cp, const blk *bl, int nb) {
    cfg c = *cp;
    int64_t sq[4] = {c.S, c.B, c.NH, c.HD}, skv[4] = {c.S, c.B, c.NG, c.HD};
    mg_graph *g = mg_graph_new();
    mg_tensor *q = mg_input(g, "q", MG_F32, 4, sq), *k = mg_input(g, "k", MG_F32, 4, skv),
              *v = mg_input(g, "v", MG_F32, 4, skv);
    mg_tensor *dst = c.docs ? mg_input(g, "doc_start", MG_I32, 2, (int64_t[]){c.S, c.B}) : NULL;
    mg_tensor *y = attention_of(g, &c, q, k, v, dst);
    tk_run r;
    if (!y || tk_prepare(&r, g)) {
        TK_CHECK(0, "build: %s", mg_graph_error(g)->msg);
        mg_graph_free(g);
        return;
    }
    r.info.iteration = 5;
    if (dst) doc_starts(c.S, c.B, mg_storage_data(r.st, dst));
    tk_rng rng = {5};
    tk_fill(&rng, tk_f32(&r, q), mg_numel(q), -2, 2);
    tk_fill(&rng, tk_f32(&r, k), mg_numel(k), -2, 2);
    tk_fill(&rng, tk_f32(&r, v), mg_numel(v), -1, 1);
    TK_CHECK(tk_exec(&r) == 0, "exec");
    /* the dropout must actually drop something for the test to mean anything */
    int dropped = 0;
    {
        uint64_t key = y->src->attrs.attention.rng_key;
        for (int b = 0; b < c.B; b++)
            for (uint64_t i = 0; i < (uint64_t)(c.NH * c.S * c.S); i++)
                dropped += mg_rng_uniform(r.info.seed, key, mg_rng_dropout_stream(5, b), i) < c.p;
    }
    TK_CHECK(dropped > 0, "no element dropped");
    const float *qa = tk_f32(&r, q), *ka = tk_f32(&r, k), *va = tk_f32(&r, v);
    const float *ya = tk_f32(&r, y), *la = tk_f32(&r, y->src->out[1]);
    for (int i = 0; i < nb; i++) check_block(&c, qa, ka, va, ya, la, bl[i].s0, bl[i].sl, bl[i].h0, bl[i].hl, bl[i].what);
    tk_release(&r);
    mg_graph_free(g);
}

static void fwd_attention_split(void) {
    cfg c = {7, 2, 4, 2, 4, true, 0.4f, false, 0, 0, 0};
    blk b[] = {{0, 7, 0, 2, "head split, heads 0-1 (kv group 0)"},
               {0, 7, 2, 2, "head split, heads 2-3 (kv group 1)"},
               {3, 4, 0, 4, "sequence split of q, rows 3-6"},
               {2, 3, 2, 2, "sequence and head split"}};
    split_case(&c, b, 4);
    /* longer than one causal row block (64): blocks start at a logical offset */
    cfg l = {150, 1, 4, 2, 8, true, 0.2f, false, 0, 0, 0};
    blk bl[] = {{70, 80, 0, 4, "S 150: sequence split, rows 70-149"},
                {0, 150, 2, 2, "S 150: head split, heads 2-3"},
                {33, 64, 0, 2, "S 150: rows 33-96, heads 0-1"}};
    split_case(&l, bl, 3);
    /* within documents: a block's doc_start rows hold logical positions */
    cfg d = {150, 2, 4, 2, 8, true, 0.2f, true, 0, 0, 0};
    blk bd[] = {{70, 80, 0, 4, "docs: sequence split, rows 70-149"},
                {0, 150, 2, 2, "docs: head split, heads 2-3"},
                {33, 64, 0, 2, "docs: rows 33-96, heads 0-1"}};
    split_case(&d, bd, 3);
    /* in a sliding window: a block's rows see keys from their logical position - window */
    cfg w = {150, 2, 4, 2, 8, true, 0.2f, false, 24, 0, 0};
    blk bw[] = {{70, 80, 0, 4, "window: sequence split, rows 70-149"},
                {0, 150, 2, 2, "window: head split, heads 2-3"},
                {33, 64, 0, 2, "window: rows 33-96, heads 0-1"}};
    split_case(&w, bw, 3);
    w.docs = true;
    split_case(&w, bw, 3);
}

/* ---- errors ------------------------------------------------------------------------------ */
static void fwd_errors(void) {
    mg_graph *g = mg_graph_new();
    mg_tensor *q = mg_input(g, "q", MG_F32, 4, (int64_t[]){5, 2, 4, 8});
    mg_tensor *k = mg_input(g, "k", MG_F32, 4, (int64_t[]){5, 2, 3, 8});
    mg_tensor *v = mg_input(g, "v", MG_F32, 4, (int64_t[]){5, 2, 3, 8});
    TK_CHECK(mg_attention(g, q, k, v, true, 0) == NULL, "nh 4 with ng 3 must fail");
    const mg_error *e = mg_graph_error(g);
    TK_CHECK(e->code == MG_ERR_SHAPE, "code %d", e->code);
    TK_CHECK(strstr(e->msg, "attention") && strstr(e->msg, "[5, 2, 4, 8]") && strstr(e->msg, "[5, 2, 3, 8]"),
             "message: %s", e->msg);
    TK_CHECK(mg_attention(g, NULL, k, v, true, 0) == NULL && strstr(mg_graph_error(g)->msg, "multiple"),
             "first error kept: %s", mg_graph_error(g)->msg);
    mg_graph_free(g);

    struct {
        int64_t q[4], k[4], v[4];
        float p;
        const char *why;
    } bad[] = {
        {{5, 2, 4, 8}, {5, 2, 2, 4}, {5, 2, 2, 4}, 0, "head dims differ"},
        {{5, 2, 4, 8}, {5, 3, 2, 8}, {5, 3, 2, 8}, 0, "batch differs"},
        {{5, 2, 4, 8}, {5, 2, 2, 8}, {6, 2, 2, 8}, 0, "k and v differ"},
        {{5, 2, 4, 8}, {5, 2, 2, 8}, {5, 2, 2, 8}, 1.0f, "dropout 1"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        g = mg_graph_new();
        q = mg_input(g, "q", MG_F32, 4, bad[i].q);
        k = mg_input(g, "k", MG_F32, 4, bad[i].k);
        v = mg_input(g, "v", MG_F32, 4, bad[i].v);
        TK_CHECK(mg_attention(g, q, k, v, false, bad[i].p) == NULL && mg_graph_error(g)->code == MG_ERR_SHAPE,
                 "%s must fail", bad[i].why);
        mg_graph_free(g);
    }
    g = mg_graph_new();
    q = mg_input(g, "q", MG_F32, 3, (int64_t[]){5, 2, 8});
    TK_CHECK(mg_attention(g, q, q, q, false, 0) == NULL && mg_graph_error(g)->code == MG_ERR_SHAPE, "rank 3");
    mg_graph_free(g);

    /* doc_start: i32 [s, b] of the queries */
    struct {
        mg_dtype dt;
        int nd;
        int64_t shape[2];
        const char *why;
    } bds[] = {{MG_F32, 2, {5, 2}, "f32 doc_start"}, {MG_I32, 1, {5}, "doc_start [s]"},
               {MG_I32, 2, {4, 2}, "doc_start of 4 rows"}, {MG_I32, 2, {5, 3}, "doc_start of batch 3"}};
    for (size_t i = 0; i < sizeof bds / sizeof *bds; i++) {
        g = mg_graph_new();
        q = mg_input(g, "q", MG_F32, 4, (int64_t[]){5, 2, 4, 8});
        k = mg_input(g, "k", MG_F32, 4, (int64_t[]){5, 2, 2, 8});
        mg_tensor *ds = mg_input(g, "ds", bds[i].dt, bds[i].nd, bds[i].shape);
        TK_CHECK(mg_attention_masked(g, q, k, k, ds, 0, 0) == NULL && mg_graph_error(g)->code == MG_ERR_SHAPE &&
                     strstr(mg_graph_error(g)->msg, "doc_start"),
                 "%s must fail: %s", bds[i].why, mg_graph_error(g)->msg);
        mg_graph_free(g);
    }
    g = mg_graph_new();
    q = mg_input(g, "q", MG_F32, 4, (int64_t[]){5, 2, 4, 8});
    TK_CHECK(mg_attention_masked(g, q, q, q, NULL, -1, 0) == NULL && mg_graph_error(g)->code == MG_ERR_SHAPE &&
                 strstr(mg_graph_error(g)->msg, "window = -1 must be >= 0"),
             "negative window: %s", mg_graph_error(g)->msg);
    mg_graph_free(g);
}

/* ---- gradients ------------------------------------------------------------------------------ */
/* Checks each differentiable leaf on its own (the others constant), then all together
 * at a smaller eps: tk_gradcheck reads a later leaf's analytic gradient after probing
 * the earlier leaves, from a run whose last probed input was still off by -eps. */
static void gradcheck_each(const char *name, int n, const tk_leaf *leaves, tk_build_fn fn, void *ctx,
                           const tk_grad_opts *o) {
    char label[160];
    tk_leaf l[8];
    for (int i = 0; i < n; i++) {
        if (!leaves[i].diff) continue;
        for (int j = 0; j < n; j++) {
            l[j] = leaves[j];
            l[j].diff = j == i;
        }
        snprintf(label, sizeof label, "%s d/d%s", name, leaves[i].name);
        tk_gradcheck(label, n, l, fn, ctx, o);
    }
    tk_grad_opts joint = o ? *o : (tk_grad_opts){0};
    joint.eps = 3e-3;
    snprintf(label, sizeof label, "%s jointly", name);
    tk_gradcheck(label, n, leaves, fn, ctx, &joint);
}

static mg_tensor *gb_attn(mg_graph *g, mg_tensor *const *l, void *ctx) {
    const cfg *c = ctx;
    return attention_of(g, c, l[0], l[1], l[2], c->docs ? l[3] : NULL);
}

/* With docs, doc_start is drawn uniformly in [0, S): any key bound, rows that see no
 * key included (their output is 0 and gets no gradient). */
static void grad_cfg(const cfg *c) {
    tk_leaf l[] = {{"q", MG_F32, 4, {c->S, c->B, c->NH, c->HD}, true, -1.5, 1.5},
                   {"k", MG_F32, 4, {c->S, c->B, c->NG, c->HD}, true, -1.5, 1.5},
                   {"v", MG_F32, 4, {c->S, c->B, c->NG, hv_of(c)}, true, -1, 1},
                   {"doc_start", MG_I32, 2, {c->S, c->B}, false, 0, (float)c->S}};
    char name[128];
    snprintf(name, sizeof name, "attention S %d B %d nh %d ng %d hd %d hv %d causal %d p %g docs %d window %d", c->S,
             c->B, c->NH, c->NG, c->HD, hv_of(c), c->causal, (double)c->p, c->docs, c->window);
    gradcheck_each(name, c->docs ? 4 : 3, l, gb_attn, (void *)c, NULL);
}

static void grad_attention(void) {
    cfg cs[] = {{5, 2, 4, 4, 4, false, 0, false, 0, 0, 0}, {6, 2, 4, 4, 4, true, 0, false, 0, 0, 0}, {7, 2, 4, 2, 4, false, 0, false, 0, 0, 0},
                {6, 2, 4, 2, 4, true, 0, false, 0, 0, 0}};
    for (size_t i = 0; i < sizeof cs / sizeof *cs; i++) grad_cfg(&cs[i]);
}

/* The mask is a function of (seed, iteration, key, index) only, so it is the same in
 * every finite-difference run and the loss stays differentiable in q, k, v. */
static void grad_attention_dropout(void) {
    cfg cs[] = {{6, 2, 4, 4, 4, false, 0.3f, false, 0, 0, 0}, {7, 2, 4, 2, 4, true, 0.3f, false, 0, 0, 0}, {5, 2, 4, 2, 4, true, 0.5f, false, 0, 0, 0},
                {130, 1, 2, 1, 4, true, 0.2f, false, 0, 0, 0}}; /* three causal row blocks */
    for (size_t i = 0; i < sizeof cs / sizeof *cs; i++) grad_cfg(&cs[i]);
}

static void grad_attention_docs(void) {
    cfg cs[] = {{6, 2, 4, 2, 4, true, 0, true, 0, 0, 0}, {7, 2, 4, 4, 4, true, 0.3f, true, 0, 0, 0},
                {130, 1, 2, 1, 4, true, 0.2f, true, 0, 0, 0}}; /* three causal row blocks */
    for (size_t i = 0; i < sizeof cs / sizeof *cs; i++) grad_cfg(&cs[i]);
}

static void grad_attention_window(void) {
    cfg cs[] = {{7, 2, 4, 2, 4, true, 0, false, 3, 0, 0}, {7, 2, 4, 4, 4, true, 0.3f, false, 2, 0, 0},
                {8, 2, 4, 2, 4, true, 0.3f, true, 3, 0, 0}, {130, 1, 2, 1, 4, true, 0.2f, false, 40, 0, 0}};
    for (size_t i = 0; i < sizeof cs / sizeof *cs; i++) grad_cfg(&cs[i]);
}

/* Values of another head size than queries and keys (multi-latent attention: v_head_dim,
 * not qk_head_dim + qk_pos_emb_head_dim), smaller and larger, with a given softmax scale,
 * GQA, dropout, documents, windows, several causal row blocks. */
static void fwd_attention_value_dim(void) {
    cfg cs[] = {{6, 2, 4, 4, 6, true, 0, false, 0, 4, 0.3f},     {7, 2, 4, 2, 4, true, 0, false, 0, 10, 0},
                {140, 1, 2, 1, 8, true, 0.2f, false, 0, 4, 0.25f}, {9, 2, 4, 2, 6, true, 0.3f, true, 3, 2, 0.5f}};
    for (size_t i = 0; i < sizeof cs / sizeof *cs; i++) check_forward(&cs[i], true);
}

static void grad_attention_value_dim(void) {
    cfg cs[] = {{6, 2, 4, 4, 6, true, 0, false, 0, 4, 0.3f}, {7, 2, 4, 2, 4, true, 0.3f, false, 0, 6, 0},
                {7, 2, 2, 2, 6, true, 0.2f, true, 3, 2, 0.5f}};
    for (size_t i = 0; i < sizeof cs / sizeof *cs; i++) grad_cfg(&cs[i]);
}

int main(int argc, char **argv) {
    static const tk_case cases[] = {
        {"forward.attention_value_dim", fwd_attention_value_dim},
        {"grad.attention_value_dim", grad_attention_value_dim},
        {"forward.attention", fwd_attention},
        {"forward.attention_dropout", fwd_attention_dropout},
        {"forward.attention_split", fwd_attention_split},
        {"forward.attention_docs", fwd_attention_docs},
        {"forward.attention_window", fwd_attention_window},
        {"forward.errors_attention", fwd_errors},
        {"grad.attention", grad_attention},
        {"grad.attention_dropout", grad_attention_dropout},
        {"grad.attention_docs", grad_attention_docs},
        {"grad.attention_window", grad_attention_window},
    };
    return tk_main(argc, argv, cases, (int)(sizeof cases / sizeof *cases));
}

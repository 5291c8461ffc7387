/* A model library for mgraph-run --model-lib (mgraph/model_lib.h), and not a GPT: a
 * residual MLP regressor on synthetic data. Each sample is a vector of --features
 * values and the target a fixed smooth function of it; the loss is the mean squared
 * error. --layers blocks, each x + W2 gelu(W1 x + b1) + b2 with W1 / b1 column-parallel
 * and W2 row-parallel (mg_set_layout: tensor parallelism needs no shard rules), marked
 * as layers (pipeline stages, full recompute). Its own data source: --samples training
 * samples (and a quarter as many validation samples), drawn from the sample index
 * alone, so every plan sees the same data.
 *
 * Test hooks (tests/tools/model_lib.sh builds variants of this file):
 *   -DBAD_ABI       exports another ABI version;
 *   -DNO_OPEN       misspells its entry point (mg_model_lib_opne): no mg_model_lib_open;
 *   -DGPT_DATA      gives no data source: mgraph-run's GPT data feeds it (input_ids,
 *                   labels), and the model is a bag-of-tokens classifier of the next token. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mgraph/mgraph.h>
#include <mgraph/model_lib.h>

#ifdef BAD_ABI
const int mg_model_lib_abi = MG_MODEL_LIB_ABI + 100;
#else
const int mg_model_lib_abi = MG_MODEL_LIB_ABI;
#endif

const mg_model_lib_flag mg_model_lib_flags[] = {
    {"--features", "N", "input and output width (default 16)"},
    {"--width", "N", "hidden width of each block (default 64)"},
    {"--layers", "N", "residual blocks (default 2)"},
    {"--samples", "N", "training samples (default 4096)"},
    {"--zero-init-out", NULL, "the blocks' output weights start at zero"},
    {NULL, NULL, NULL},
};

typedef struct mlp {
    int features, width, layers;
    int64_t samples;
    bool zero_out;
    int seq, vocab;              /* GPT_DATA: tokens per sample, vocabulary */
} mlp;

/* ---- the model ---------------------------------------------------------------------------- */
static int forward(mg_graph *g, void *user, mg_microbatch *mb, mg_error *err) {
    (void)err;
    const mlp *m = user;
    int64_t b = mb->batch, F = m->features, W = m->width;
#ifdef GPT_DATA
    /* a bag of tokens: the mean embedding of the sample's tokens -> the blocks -> the
     * logits of its last label */
    mg_tensor *ids = mg_step_input(g, "input_ids", MG_I32, 2, (int64_t[]){m->seq, b});
    mg_tensor *labels = mg_step_input(g, "labels", MG_I32, 2, (int64_t[]){m->seq, b});
    mg_graph_set_layer(g, MG_LAYER_PRE);
    mg_tensor *emb = mg_param(g, "embed.weight", 2, (int64_t[]){m->vocab, F}, (mg_init){MG_INIT_NORMAL, 0.02f});
    mg_tensor *x = mg_mean(g, mg_embedding(g, ids, emb), 0, false); /* [b, F] */
#else
    mg_tensor *x = mg_step_input(g, "x", MG_F32, 2, (int64_t[]){b, F});
    mg_tensor *y = mg_step_input(g, "y", MG_F32, 2, (int64_t[]){b, F});
#endif
    for (int l = 0; l < m->layers; l++) {
        mg_graph_set_layer(g, l);
        char scope[32];
        snprintf(scope, sizeof scope, "block.%d", l);
        mg_scope_push(g, scope);
        mg_init w = {MG_INIT_NORMAL, 0.1f}, z = {MG_INIT_ZEROS, 0};
        mg_tensor *w1 = mg_set_layout(mg_param(g, "up.weight", 2, (int64_t[]){W, F}, w), MG_LAYOUT_COLUMN);
        mg_tensor *b1 = mg_set_layout(mg_param(g, "up.bias", 1, (int64_t[]){W}, z), MG_LAYOUT_COLUMN);
        mg_tensor *w2 = mg_set_layout(mg_param(g, "down.weight", 2, (int64_t[]){F, W}, m->zero_out ? z : w), MG_LAYOUT_ROW);
        mg_tensor *b2 = mg_param(g, "down.bias", 1, (int64_t[]){F}, z);
        x = mg_add(g, x, mg_linear(g, mg_gelu(g, mg_linear(g, x, w1, b1)), w2, b2));
        mg_scope_pop(g);
    }
    mg_graph_set_layer(g, MG_LAYER_POST);
#ifdef GPT_DATA
    mg_tensor *head = mg_param(g, "head.weight", 2, (int64_t[]){m->vocab, F}, (mg_init){MG_INIT_NORMAL, 0.02f});
    mg_tensor *logits = mg_linear(g, x, head, NULL); /* [b, vocab] */
    mg_tensor *last = mg_reshape(g, mg_slice(g, labels, 0, m->seq - 1, 1), 1, (int64_t[]){b}); /* [b] */
    mb->loss = mg_cross_entropy(g, logits, last, MG_LABEL_IGNORE);
#else
    mg_tensor *d = mg_sub(g, x, y);
    mb->loss = mg_mean(g, mg_mul(g, d, d), MG_ALL_AXES, false);
    mb->loss_name = "mse";
    /* a reported metric: the mean error (the prediction's bias) */
    mb->metric_names[0] = "mean_error";
    mb->metrics[0] = mg_mean(g, d, MG_ALL_AXES, false);
    mb->n_metrics = 1;
#endif
    return MG_OK;
}

static double flops(void *user, int64_t samples) {
    const mlp *m = user;
    return 6.0 * 2.0 * (double)m->features * m->width * m->layers * (double)samples;
}

/* ---- its data ----------------------------------------------------------------------------- */
#ifndef GPT_DATA
/* sample i's input: a smooth pseudo-random vector of i alone (every plan, every rank
 * reads the same); its target a fixed nonlinear map of it */
static void sample(const mlp *m, int split, uint64_t i, float *x, float *y) {
    double s = (double)(i * 3 + (uint64_t)split) * 0.618033988749895;
    for (int k = 0; k < m->features; k++) x[k] = (float)sin(s * (k + 1) + 0.3 * k);
    for (int k = 0; k < m->features; k++)
        y[k] = (float)(0.5 * tanh(x[k] + 0.5 * x[(k + 1) % m->features]) - 0.25 * x[(k + 2) % m->features]);
}

static int feed(void *user, const mg_feed *f, mg_error *err) {
    (void)err;
    const mlp *m = user;
    if (f->instance < 0) return MG_OK; /* (no input shared by the micro-batches) */
    float *x = mg_feed_data(f, "x", NULL), *y = mg_feed_data(f, "y", NULL);
    float xs[4096], ys[4096];
    for (int j = 0; j < f->n_samples; j++) {
        sample(m, f->split, f->first_sample + (uint64_t)j, xs, ys);
        if (x) memcpy(x + (size_t)j * m->features, xs, (size_t)m->features * sizeof *x);
        if (y) memcpy(y + (size_t)j * m->features, ys, (size_t)m->features * sizeof *y);
    }
    return MG_OK;
}

static uint64_t num_samples(void *user, int split) {
    const mlp *m = user;
    return split == MG_SPLIT_TRAIN ? (uint64_t)m->samples : split == MG_SPLIT_VALID ? (uint64_t)m->samples / 4 : 0;
}
#endif

/* ---- the entry point ---------------------------------------------------------------------- */
static int int_flag(const char *flag, const char *v, long lo, long hi, long *out, mg_error *err) {
    char *e;
    long n = strtol(v, &e, 10);
    if (e == v || *e || n < lo || n > hi)
        return mg_error_set(err, MG_ERR_INVALID, "%s must be an integer in %ld..%ld (got '%s')", flag, lo, hi, v);
    *out = n;
    return MG_OK;
}

#ifdef NO_OPEN
#define mg_model_lib_open mg_model_lib_opne
#endif
int mg_model_lib_open(const mg_model_lib_host *h, mg_model_lib *out, mg_error *err) {
    if (h->abi != MG_MODEL_LIB_ABI) return mg_error_set(err, MG_ERR_INVALID, "host ABI %d", h->abi);
    mlp *m = calloc(1, sizeof *m);
    if (!m) return mg_error_set(err, MG_ERR_NOMEM, "out of memory");
    m->features = 16, m->width = 64, m->layers = 2, m->samples = 4096;
    int rc = MG_OK;
    for (int i = 0; i < h->argc && !rc; i++) {
        const char *a = h->argv[i];
        long v = 0;
        if (!strcmp(a, "--zero-init-out")) m->zero_out = true;
        else if (!strcmp(a, "--features") && !(rc = int_flag(a, h->argv[++i], 1, 4096, &v, err))) m->features = (int)v;
        else if (!strcmp(a, "--width") && !(rc = int_flag(a, h->argv[++i], 1, 1 << 16, &v, err))) m->width = (int)v;
        else if (!strcmp(a, "--layers") && !(rc = int_flag(a, h->argv[++i], 1, 64, &v, err))) m->layers = (int)v;
        else if (!strcmp(a, "--samples") && !(rc = int_flag(a, h->argv[++i], 1, 1L << 40, &v, err))) m->samples = v;
    }
#ifdef GPT_DATA
    if (!rc && !h->dataset)
        rc = mg_error_set(err, MG_ERR_INVALID, "this model reads mgraph-run's data: give --text-file or --data-path");
    m->seq = h->seq_length;
    m->vocab = (int)h->padded_vocab;
#endif
    if (rc) {
        free(m);
        return rc;
    }
    out->model = (mg_model){.name = "residual-mlp", .forward = forward, .user = m, .num_layers = m->layers,
                            .layer_scope = "block.%d", .flops = flops};
#ifndef GPT_DATA
    out->data = (mg_data_source){.user = m, .feed = feed, .num_samples = num_samples};
#endif
    out->close = free;
    out->user = m;
    return MG_OK;
}

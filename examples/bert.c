/* A BERT-style encoder trained on masked tokens, under any plan: the model is one
 * micro-batch's forward (token + position embeddings, bidirectional self-attention
 * blocks with post-norms, the masked-LM head at the masked positions only, its decoder
 * tied to the word embedding); the trainer (mgraph/trainer.h) does the rest. Each weight
 * declares its tensor-parallel role where it is made, so tp needs no plan rules.
 *   mpirun -np 4 ./bert [--tp 2] [--pp N] [--plan FILE] [--iters N] [--save DIR]   (dp: the ranks left)
 * Data: sequences a, a+d, a+2d, ... (mod 63) with 3 of 16 positions masked as BERT does
 * (80% [MASK], 10% a random token, 10% kept), generated from the sample index. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mgraph/mgraph.h>
#include <mgraph/model_lib.h>

enum { VOCAB = 64, MASK_ID = VOCAB - 1, SEQ = 16, HID = 32, HEADS = 4, FFN = 64, LAYERS = 2, MASKED = 3 };
static const mg_init NORMAL = {MG_INIT_NORMAL, 0.02f}, ZEROS = {MG_INIT_ZEROS, 0}, ONES = {MG_INIT_ONES, 0};

/* torch.nn.Linear: weight [out, in], bias [out]; a column-parallel layer's bias is split
 * with its rows, a row-parallel one's is added after the sum (whole). */
static mg_tensor *dense(mg_graph *g, const char *name, mg_tensor *x, int64_t out, int64_t in, mg_layout role,
                        bool bias) {
    mg_scope_push(g, "%s", name);
    mg_tensor *w = mg_set_layout(mg_param(g, "weight", 2, (int64_t[]){out, in}, NORMAL), role);
    mg_tensor *b = bias ? mg_param(g, "bias", 1, &out, ZEROS) : NULL;
    if (role == MG_LAYOUT_COLUMN) mg_set_layout(b, role);
    mg_scope_pop(g);
    return mg_linear(g, x, w, b);
}

static mg_tensor *norm(mg_graph *g, const char *name, mg_tensor *x) {
    mg_scope_push(g, "%s", name);
    mg_tensor *w = mg_param(g, "weight", 1, (int64_t[]){HID}, ONES);
    mg_tensor *b = mg_param(g, "bias", 1, (int64_t[]){HID}, ZEROS);
    mg_scope_pop(g);
    return mg_layernorm(g, x, w, b, 1e-12f);
}

static int forward(mg_graph *g, void *user, mg_microbatch *mb, mg_error *err) {
    (void)user, (void)err;
    int64_t b = mb->batch, s = SEQ, h = HID;
    float p = mb->training ? 0.1f : 0.0f; /* dropout */
    mg_tensor *ids = mg_step_input(g, "input_ids", MG_I32, 2, (int64_t[]){s, b});
    mg_tensor *where = mg_step_input(g, "mlm_positions", MG_I32, 1, (int64_t[]){MASKED * b}); /* rows of [s x b] */
    mg_tensor *labels = mg_step_input(g, "mlm_labels", MG_I32, 1, (int64_t[]){MASKED * b});
    mg_graph_set_layer(g, MG_LAYER_PRE); /* pipeline stages place the model by these marks */
    mg_tensor *wte = mg_param(g, "embeddings.word.weight", 2, (int64_t[]){VOCAB, h}, NORMAL);
    mg_set_layout(wte, MG_LAYOUT_VOCAB); /* the vocabulary split over tp (and its gradient over stages) */
    mg_tensor *wpe = mg_param(g, "embeddings.position.weight", 3, (int64_t[]){s, 1, h}, NORMAL);
    mg_tensor *x = mg_dropout(g, norm(g, "embeddings.norm", mg_add(g, mg_embedding(g, ids, wte), wpe)), p);
    for (int l = 0; l < LAYERS; l++) {
        mg_graph_set_layer(g, l);
        mg_scope_push(g, "layer.%d", l);
        int64_t heads[4] = {s, b, HEADS, HID / HEADS};
        mg_tensor *q = mg_reshape(g, dense(g, "attn.query", x, h, h, MG_LAYOUT_COLUMN, true), 4, heads);
        /* no key bias: it adds q.b to every score of a query, which softmax ignores (its gradient is 0) */
        mg_tensor *k = mg_reshape(g, dense(g, "attn.key", x, h, h, MG_LAYOUT_COLUMN, false), 4, heads);
        mg_tensor *v = mg_reshape(g, dense(g, "attn.value", x, h, h, MG_LAYOUT_COLUMN, true), 4, heads);
        mg_tensor *a = mg_reshape(g, mg_attention(g, q, k, v, false, p), 3, (int64_t[]){s, b, h}); /* not causal */
        a = dense(g, "attn.output", a, h, h, MG_LAYOUT_ROW, true);
        x = norm(g, "attn.norm", mg_add(g, x, mg_dropout(g, a, p)));
        mg_tensor *f = mg_gelu_erf(g, dense(g, "mlp.input", x, FFN, h, MG_LAYOUT_COLUMN, true));
        f = dense(g, "mlp.output", f, h, FFN, MG_LAYOUT_ROW, true);
        x = norm(g, "mlp.norm", mg_add(g, x, mg_dropout(g, f, p)));
        mg_scope_pop(g);
    }
    mg_graph_set_layer(g, MG_LAYER_POST);
    /* the head sees the masked positions only: their rows gathered from x as [s x b, h] */
    mg_tensor *m = mg_embedding(g, where, mg_reshape(g, x, 2, (int64_t[]){s * b, h}));
    m = norm(g, "mlm.norm", mg_gelu_erf(g, dense(g, "mlm.dense", m, h, h, MG_LAYOUT_REPLICATED, true)));
    /* the vocabulary bias splits with the vocabulary, as the logits */
    mg_tensor *bias = mg_set_layout(mg_param(g, "mlm.bias", 1, (int64_t[]){VOCAB}, ZEROS), MG_LAYOUT_VOCAB);
    mg_tensor *logits = mg_bias_add(g, mg_matmul(g, m, wte, false, true), bias);
    mb->loss = mg_cross_entropy(g, logits, labels, -1); /* every sample has MASKED labels: the mean is the batch's */
    mb->loss_name = "mlm_loss";
    return MG_OK;
}

static uint64_t mix(uint64_t n, uint64_t k) { /* splitmix64 of (sample, what) */
    uint64_t z = n * 0x9E3779B97F4A7C15ull + k * 0xBF58476D1CE4E5B9ull + 0x94D049BB133111EBull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull, z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Writes samples [first_sample, + n_samples) of one micro-batch ([s, b] layout). */
static int feed(void *user, const mg_feed *f, mg_error *err) {
    (void)user, (void)err;
    int32_t *ids = mg_feed_data(f, "input_ids", NULL), *where = mg_feed_data(f, "mlm_positions", NULL);
    int32_t *labels = mg_feed_data(f, "mlm_labels", NULL); /* NULL: not on this pipeline stage */
    int b = f->n_samples, V = VOCAB - 1;
    for (int j = 0; j < b && f->instance >= 0; j++) {
        uint64_t n = f->first_sample + (uint64_t)j;
        int32_t tok[SEQ], a = (int32_t)(mix(n, 0) % V), d = 1 + (int32_t)(mix(n, 1) % 5);
        for (int t = 0; t < SEQ; t++) tok[t] = (a + d * t) % V;
        for (int t = 0; ids && t < SEQ; t++) ids[t * b + j] = tok[t];
        int start = (int)(mix(n, 2) % SEQ), stride = 2 * (int)(mix(n, 3) % 8) + 1; /* odd: distinct positions */
        for (int k = 0; k < MASKED; k++) {
            int t = (start + k * stride) % SEQ, r = (int)(mix(n, 4 + k) % 10);
            if (ids) ids[t * b + j] = r < 8 ? MASK_ID : r == 8 ? (int32_t)(mix(n, 8 + k) % V) : tok[t];
            if (where) where[k * b + j] = t * b + j;
            if (labels) labels[k * b + j] = tok[t];
        }
    }
    return MG_OK;
}

/* The model and its data, for main and for mgraph-run --model-lib (mgraph/model_lib.h; README.md) */
static const mg_model_lib BERT = {
    .model = {.name = "bert", .forward = forward, .num_layers = LAYERS, .layer_scope = "layer.%d"}, .data = {.feed = feed}};
const int mg_model_lib_abi = MG_MODEL_LIB_ABI;
int mg_model_lib_open(const mg_model_lib_host *host, mg_model_lib *out, mg_error *err) {
    (void)host, (void)err, *out = BERT;
    return MG_OK;
}

static int number(const char *v) {
    char *end;
    long x = strtol(v, &end, 10);
    if (*v && !*end && x > 0 && x < 1 << 20) return (int)x;
    fprintf(stderr, "bert: '%s' is not a positive integer\n", v);
    exit(2);
}

int main(int argc, char **argv) {
    mg_trainer_config c = mg_trainer_defaults();
    c.model = BERT.model, c.data = BERT.data;
    c.micro_batch = 2, c.global_batch = 8, c.optim.lr.lr = 1e-3f;
    int iters = 5;
    mg_error err = {0};
    for (int i = 1; i < argc; i += 2) {
        const char *k = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (v && !strcmp(k, "--tp")) c.plan.tp = number(v);
        else if (v && !strcmp(k, "--pp")) c.plan.pp = number(v);
        else if (v && !strcmp(k, "--iters")) iters = number(v);
        else if (v && !strcmp(k, "--save")) c.ckpt.save = v;
        else if (v && !strcmp(k, "--plan")) { /* a plan file (mgraph/plan.h): every setting, rules too */
            if (mg_plan_read(&c.plan, v, &err)) return fprintf(stderr, "bert: %s\n", err.msg), 2;
        } else return fprintf(stderr, "usage: bert [--tp N] [--pp N] [--plan FILE] [--iters N] [--save DIR]\n"), 2;
    }
    mg_trainer *t = NULL;
    int rc = mg_trainer_new(&c, &t, &err);
    if (rc) { /* every rank finds an input error alike (the message on rank 0) */
        if (mg_world_rank() == 0) fprintf(stderr, "bert: %s\n", err.msg);
        return rc == MG_ERR_INVALID ? 2 : 1;
    }
    for (int i = 0; i < iters && !rc; i++) {
        mg_step_result r;
        rc = mg_trainer_step(t, &r, &err);
        if (!rc && mg_world_rank() == 0)
            printf("iteration %d | mlm loss %.9g | grad norm %.9g\n", i + 1, r.loss, r.grad_norm);
    }
    if (!rc && c.ckpt.save) rc = mg_trainer_save(t, &err); /* the parameters and Adam's moments, whole */
    if (rc) { /* a run-time failure may be one rank's: end them all */
        fprintf(stderr, "bert (rank %d): %s\n", mg_world_rank(), err.msg);
        mg_world_abort(1);
    }
    mg_trainer_free(t);
    return 0;
}

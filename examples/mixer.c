/* An MLP-Mixer image classifier (Tolstikhin et al. 2021: no convolution, no attention),
 * trained under any plan: 8x8 RGB images cut into 16 patches of 2x2 pixels, a linear
 * patch embedding, blocks that mix across patches (an MLP over the patch axis, on the
 * transposed activations) and then across channels, global average pooling and a linear
 * classifier. Both MLPs of a block are column- then row-parallel (declared roles: tp
 * needs no plan rules); the trainer (mgraph/trainer.h) does the rest.
 *   mixer [--tp N] [--pp N] [--plan FILE] [--iters N] [--save DIR]   (dp: the ranks left)
 * Data: gratings of 4 orientations (the classes) at random phases plus noise, generated
 * from the sample index. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mgraph/mgraph.h>

enum { SIDE = 8, PATCH = 2, PATCHES = (SIDE / PATCH) * (SIDE / PATCH), PATCH_DIM = PATCH * PATCH * 3 };
enum { DIM = 32, TOKEN_HID = 32, CHANNEL_HID = 64, LAYERS = 2, CLASSES = 4 };

/* torch.nn.Linear on the last dimension; a column-parallel layer's bias splits with its
 * rows, a row-parallel one's is added after the sum (whole). */
static mg_tensor *dense(mg_graph *g, const char *name, mg_tensor *x, int64_t out, int64_t in, mg_layout role,
                        bool bias) {
    mg_scope_push(g, "%s", name);
    mg_tensor *w = mg_set_layout(mg_param(g, "weight", 2, (int64_t[]){out, in}, (mg_init){MG_INIT_NORMAL, 0.02f}), role);
    mg_tensor *b = bias ? mg_param(g, "bias", 1, &out, (mg_init){MG_INIT_ZEROS, 0}) : NULL;
    if (role == MG_LAYOUT_COLUMN) mg_set_layout(b, role);
    mg_scope_pop(g);
    return mg_linear(g, x, w, b);
}

static mg_tensor *mlp(mg_graph *g, const char *name, mg_tensor *x, int64_t n, int64_t hidden, bool out_bias) {
    mg_scope_push(g, "%s", name);
    mg_tensor *y = dense(g, "fc1", x, hidden, n, MG_LAYOUT_COLUMN, true);
    y = dense(g, "fc2", mg_gelu_erf(g, y), n, hidden, MG_LAYOUT_ROW, out_bias);
    mg_scope_pop(g);
    return y;
}

static mg_tensor *norm(mg_graph *g, const char *name, mg_tensor *x) {
    mg_scope_push(g, "%s", name);
    mg_tensor *w = mg_param(g, "weight", 1, (int64_t[]){DIM}, (mg_init){MG_INIT_ONES, 0});
    mg_tensor *b = mg_param(g, "bias", 1, (int64_t[]){DIM}, (mg_init){MG_INIT_ZEROS, 0});
    mg_scope_pop(g);
    return mg_layernorm(g, x, w, b, 1e-6f);
}

static int forward(mg_graph *g, void *user, mg_microbatch *mb, mg_error *err) {
    (void)user, (void)err;
    int64_t b = mb->batch;
    const int swap[3] = {0, 2, 1}; /* [b, patches, channels] <-> [b, channels, patches] */
    mg_tensor *pixels = mg_step_input(g, "pixels", MG_F32, 3, (int64_t[]){b, PATCHES, PATCH_DIM});
    mg_tensor *labels = mg_step_input(g, "labels", MG_I32, 1, &b);
    mg_graph_set_layer(g, MG_LAYER_PRE); /* pipeline stages place the model by these marks */
    mg_tensor *x = dense(g, "stem", pixels, DIM, PATCH_DIM, MG_LAYOUT_REPLICATED, true);
    for (int l = 0; l < LAYERS; l++) {
        mg_graph_set_layer(g, l);
        mg_scope_push(g, "blocks.%d", l);
        mg_tensor *t = mg_transpose(g, norm(g, "norm1", x), swap);
        /* no output bias across patches: a constant over a patch's channels, which every
         * LayerNorm after it removes (its gradient is 0) */
        x = mg_add(g, x, mg_transpose(g, mlp(g, "token_mixing", t, PATCHES, TOKEN_HID, false), swap));
        x = mg_add(g, x, mlp(g, "channel_mixing", norm(g, "norm2", x), DIM, CHANNEL_HID, true));
        mg_scope_pop(g);
    }
    mg_graph_set_layer(g, MG_LAYER_POST);
    x = mg_mean(g, norm(g, "norm", x), 1, false); /* [b, DIM]: the mean over patches */
    mg_tensor *logits = dense(g, "head", x, CLASSES, DIM, MG_LAYOUT_REPLICATED, true);
    mb->loss = mg_cross_entropy(g, logits, labels, -1);
    return MG_OK;
}

static uint64_t mix(uint64_t n, uint64_t k) { /* splitmix64 of (sample, what) */
    uint64_t z = n * 0x9E3779B97F4A7C15ull + k * 0xBF58476D1CE4E5B9ull + 0x94D049BB133111EBull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull, z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Writes samples [first_sample, + n_samples) of one micro-batch: image n is a grating
 * of class mix(n) % 4 (horizontal, vertical, two diagonals), cut into patches. */
static int feed(void *user, const mg_feed *f, mg_error *err) {
    (void)user, (void)err;
    float *px = mg_feed_data(f, "pixels", NULL);
    int32_t *labels = mg_feed_data(f, "labels", NULL); /* NULL: not on this pipeline stage */
    static const int fx[CLASSES] = {1, 0, 1, 1}, fy[CLASSES] = {0, 1, 1, -1};
    for (int j = 0; j < f->n_samples && f->instance >= 0; j++) {
        uint64_t n = f->first_sample + (uint64_t)j;
        int c = (int)(mix(n, 0) % CLASSES);
        double phase = (double)(mix(n, 1) >> 11) * 0x1p-53 * 6.283185307179586;
        if (labels) labels[j] = c;
        for (int y = 0; px && y < SIDE; y++)
            for (int x = 0; x < SIDE; x++)
                for (int ch = 0; ch < 3; ch++) {
                    double noise = (double)(mix(n, 2 + (uint64_t)((y * SIDE + x) * 3 + ch)) >> 11) * 0x1p-53 - 0.5;
                    int patch = (y / PATCH) * (SIDE / PATCH) + x / PATCH, e = ((y % PATCH) * PATCH + x % PATCH) * 3;
                    px[((int64_t)j * PATCHES + patch) * PATCH_DIM + e + ch] =
                        (float)(sin(0.7853981633974483 * (fx[c] * x + fy[c] * y) + phase + ch) + noise);
                }
    }
    return MG_OK;
}

static int number(const char *v) {
    char *end;
    long x = strtol(v, &end, 10);
    if (*v && !*end && x > 0 && x < 1 << 20) return (int)x;
    fprintf(stderr, "mixer: '%s' is not a positive integer\n", v);
    exit(2);
}

int main(int argc, char **argv) {
    mg_trainer_config c = mg_trainer_defaults();
    c.model = (mg_model){.name = "mixer", .forward = forward, .num_layers = LAYERS, .layer_scope = "blocks.%d"};
    c.data = (mg_data_source){.feed = feed};
    c.micro_batch = 4, c.global_batch = 16, c.optim.lr.lr = 3e-3f;
    int iters = 5;
    mg_error err = {0};
    for (int i = 1; i < argc; i += 2) {
        const char *k = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (v && !strcmp(k, "--tp")) c.plan.tp = number(v);
        else if (v && !strcmp(k, "--pp")) c.plan.pp = number(v);
        else if (v && !strcmp(k, "--iters")) iters = number(v);
        else if (v && !strcmp(k, "--save")) c.ckpt.save = v;
        else if (v && !strcmp(k, "--plan")) { /* a plan file (mgraph/plan.h): every setting, rules too */
            if (mg_plan_read(&c.plan, v, &err)) return fprintf(stderr, "mixer: %s\n", err.msg), 2;
        } else return fprintf(stderr, "usage: mixer [--tp N] [--pp N] [--plan FILE] [--iters N] [--save DIR]\n"), 2;
    }
    mg_trainer *t = NULL;
    int rc = mg_trainer_new(&c, &t, &err);
    if (rc) { /* every rank finds an input error alike (the message on rank 0) */
        if (mg_world_rank() == 0) fprintf(stderr, "mixer: %s\n", err.msg);
        return rc == MG_ERR_INVALID ? 2 : 1;
    }
    for (int i = 0; i < iters && !rc; i++) {
        mg_step_result r;
        rc = mg_trainer_step(t, &r, &err);
        if (!rc && mg_world_rank() == 0)
            printf("iteration %d | loss %.9g | grad norm %.9g\n", i + 1, r.loss, r.grad_norm);
    }
    if (!rc && c.ckpt.save) rc = mg_trainer_save(t, &err); /* the parameters and Adam's moments, whole */
    if (rc) { /* a run-time failure may be one rank's: end them all */
        fprintf(stderr, "mixer (rank %d): %s\n", mg_world_rank(), err.msg);
        mg_world_abort(1);
    }
    mg_trainer_free(t);
    return 0;
}

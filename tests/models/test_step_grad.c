/* Finite differences of the whole training step (mg_step_build, the graph mgraph-run
 * executes): a tiny GPT-2 (LayerNorm, learned positions, GELU, biases, tied output
 * layer), dropout on, three micro-batches accumulated into <p>.main_grad, clipping and
 * AdamW after them.
 *
 * For every parameter tensor (each kind of weight of the model), a few elements: the
 * accumulated gradient the optimizer reads (<p>.main_grad after one step) must equal
 * the central difference of the step's reported loss (lm_loss, the mean over the
 * micro-batches) with respect to that element. Each evaluation re-initialises the
 * storage from the seed and runs the same iteration, so the dropout masks (Philox
 * counters of seed, iteration, micro-batch and node) are the same in every run and
 * the loss is a smooth function of the weights. This checks, together, every op's
 * backward as the model composes them, the loss scaling by 1 / micro-batches, the
 * accumulation across micro-batch instances, and that the gradient reaching the
 * optimizer is the one of the loss the host reports.
 *
 * Then the update, element by element for every parameter: AdamW's first step as
 * torch.optim.AdamW (and Megatron) define it, written out here in double precision from
 * the accumulated gradients: g' = g x min(1, clip / (norm + 1e-6)); exp_avg = (1 - b1) g',
 * exp_avg_sq = (1 - b2) g'^2; p' = p (1 - lr wd) - lr m^ / (sqrt(v^) + eps) with the bias
 * corrections of step 1 and no decay where the parameter has none (biases, norms). The
 * moments show a gradient scaled by any factor, which the update alone (about lr sign(g)
 * at step 1) would hide. And the step is the sum of its micro-batches run one at a time.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mgraph/engine.h"
#include "mgraph/model.h"
#include "testkit.h"

enum { SEQ = 8, MBS = 2, NMICRO = 3, VOCAB = 64, PROBES = 4 };
static const uint64_t SEED = 77;
static const int64_t ITERATION = 0;

/* 2 layers, hidden 16, 2 heads: small enough that ~250 evaluations of the whole step
 * take well under a second. Weights N(0, 0.2) (not 0.02) so every block contributes
 * far above float noise: with 0.02 the loss barely depends on the inner layers. */
static mg_step_config tiny_config(void) {
    mg_step_config c = tk_small_gpt(2, 16, 2, SEQ, VOCAB, MBS, NMICRO);
    c.model.init_std = 0.2f;
    c.model.hidden_dropout = 0.1f;
    c.model.attention_dropout = 0.1f;
    c.optim.lr = (mg_lr_schedule){.lr = 1e-3f, .min_lr = 1e-3f, .warmup_steps = 0, .decay_steps = 10,
                                  .style = MG_LR_CONSTANT};
    return c;
}

typedef struct ctx {
    mg_step step;
    mg_memplan *plan;
    mg_storage *st;
} ctx;

/* Storage back to the seed's weights and zero moments, then the step's inputs: random
 * tokens and labels per micro-batch (the test kit's generator), positions 0..s-1. */
static int reset(ctx *c) {
    mg_error err = {0};
    if (mg_storage_init(c->st, SEED, &err)) {
        TK_CHECK(false, "storage init: %s", err.msg);
        return -1;
    }
    tk_rng rng = {2024};
    for (int k = 0; k < NMICRO; k++) {
        int32_t *tok = mg_storage_data_mb(c->st, c->step.tokens, k), *lab = mg_storage_data_mb(c->st, c->step.targets, k);
        for (int64_t i = 0; i < mg_numel(c->step.tokens); i++) {
            tok[i] = (int32_t)tk_uniform(&rng, 0, VOCAB) % VOCAB;
            lab[i] = (int32_t)tk_uniform(&rng, 0, VOCAB) % VOCAB;
        }
    }
    int32_t *pos = mg_storage_data(c->st, c->step.positions);
    for (int t = 0; t < SEQ; t++) pos[t] = t;
    return 0;
}

/* One training step (reference executor); the step's lm_loss. */
static double run_step(ctx *c) {
    mg_error err = {0};
    mg_exec_info info = {.seed = SEED, .iteration = ITERATION, .training = true, .n_micro = NMICRO};
    if (mg_exec_reference(c->step.g, c->st, &info, &err)) {
        TK_CHECK(false, "step: %s", err.msg);
        return NAN;
    }
    return *(const float *)mg_storage_data(c->st, c->step.loss);
}

/* The loss of the step with element e of parameter p set to v (from a fresh storage). */
static double loss_at(ctx *c, const mg_tensor *p, int64_t e, float v) {
    if (reset(c)) return NAN;
    ((float *)mg_storage_data(c->st, p))[e] = v;
    return run_step(c);
}

/* The probed elements of a tensor of n elements: the two of largest analytic |gradient|
 * (where a wrong factor shows most) and two fixed pseudo-random ones (where a gradient
 * wrongly zero shows). */
static void pick(const float *g, int64_t n, int salt, int64_t out[PROBES]) {
    int64_t a = 0, b = n > 1 ? 1 : 0;
    for (int64_t i = 0; i < n; i++) {
        if (fabsf(g[i]) > fabsf(g[a])) b = a, a = i;
        else if (i != a && fabsf(g[i]) > fabsf(g[b])) b = i;
    }
    out[0] = a;
    out[1] = b;
    out[2] = (int64_t)(((uint64_t)salt * 2654435761u + 12345u) % (uint64_t)n);
    out[3] = (int64_t)(((uint64_t)salt * 40503u + 977u) % (uint64_t)n);
}

static void test_step_gradients(void) {
    ctx c;
    memset(&c, 0, sizeof c);
    mg_step_config cfg = tiny_config();
    mg_error err = {0};
    mg_storage_options so = {.n_micro = NMICRO, .n_slots = 2};
    if (mg_step_build(&cfg, &c.step, &err) || mg_memplan_build(c.step.g, false, &c.plan, &err) ||
        mg_storage_new_ex(c.step.g, c.plan, &so, &c.st, &err)) {
        TK_CHECK(false, "setup: %s", err.msg);
        goto out;
    }
    TK_CHECK(mg_gpt_is_gpt2(&cfg.model), "the tiny model is a GPT-2");
    /* the reference step: analytic gradients, weights before and after the update */
    if (reset(&c)) goto out;
    int n_t = mg_graph_n_tensors(c.step.g);
    float **before = calloc((size_t)n_t, sizeof *before), **grad = calloc((size_t)n_t, sizeof *grad);
    for (int i = 0; i < n_t; i++) {
        const mg_tensor *p = mg_graph_tensor(c.step.g, i);
        if (p->role != MG_ROLE_PARAM) continue;
        before[i] = malloc((size_t)mg_numel(p) * sizeof(float));
        memcpy(before[i], mg_storage_data(c.st, p), (size_t)mg_numel(p) * sizeof(float));
    }
    double loss0 = run_step(&c);
    TK_CHECK(isfinite(loss0), "step loss %g", loss0);
    float lr = *(const float *)mg_storage_data(c.st, c.step.opt.lr);
    float gn = *(const float *)mg_storage_data(c.st, c.step.opt.grad_norm);
    double eps = 2e-3, worst = 0, sq = 0;
    int probed = 0, kinds = 0, moved = 0, fails = tk_failures;
    /* after[i], m1[i], v1[i]: the updated weights and moments, read before any other run
     * overwrites them; the update checked against AdamW's formula for every element */
    float **after = calloc((size_t)n_t, sizeof *after), **m1 = calloc((size_t)n_t, sizeof *m1),
          **v1 = calloc((size_t)n_t, sizeof *v1);
    for (int i = 0; i < n_t; i++) {
        const mg_tensor *p = mg_graph_tensor(c.step.g, i);
        if (p->role != MG_ROLE_PARAM) continue;
        char name[512];
        snprintf(name, sizeof name, "%s.main_grad", p->name);
        const mg_tensor *mg = mg_graph_find(c.step.g, name);
        TK_CHECK(mg != NULL, "no %s: %s gets no gradient", name, p->name);
        if (!mg) continue;
        size_t bytes = (size_t)mg_numel(p) * sizeof(float);
        grad[i] = malloc(bytes);
        after[i] = malloc(bytes);
        memcpy(grad[i], mg_storage_data(c.st, mg), bytes);
        memcpy(after[i], mg_storage_data(c.st, p), bytes);
        const mg_tensor *mt[2];
        for (int k = 0; k < 2; k++) {
            snprintf(name, sizeof name, "%s.%s", p->name, k ? "exp_avg_sq" : "exp_avg");
            mt[k] = mg_graph_find(c.step.g, name);
            TK_CHECK(mt[k] != NULL, "no %s", name);
        }
        if (!mt[0] || !mt[1]) continue;
        m1[i] = malloc(bytes);
        v1[i] = malloc(bytes);
        memcpy(m1[i], mg_storage_data(c.st, mt[0]), bytes);
        memcpy(v1[i], mg_storage_data(c.st, mt[1]), bytes);
        for (int64_t k = 0; k < mg_numel(p); k++) sq += (double)grad[i][k] * grad[i][k];
    }
    /* the grad norm the optimizer reports is the norm of these accumulated gradients */
    TK_CHECK(fabs(sqrt(sq) - gn) <= 1e-5 * gn, "grad norm %.7g, norm of the main_grads %.7g", gn, sqrt(sq));
    /* The step is the sum of its micro-batches: each run alone (n_micro 1, its instance 0
     * global micro-batch k, so its dropout masks are the step's) reports loss_scale x its
     * loss and leaves loss_scale x its gradient in main_grad; over the micro-batches these
     * must add up to the step's loss and main_grads. (A step that kept only one
     * micro-batch, its loss and gradient consistent with each other, passes the finite
     * differences below.) */
    double lsum = 0, worst_mb = 0;
    float **gsum = calloc((size_t)n_t, sizeof *gsum);
    for (int k = 0; k < NMICRO; k++) {
        if (reset(&c)) break;
        const mg_tensor *in[2] = {c.step.tokens, c.step.targets};
        for (int j = 0; j < 2 && k > 0; j++)
            memcpy(mg_storage_data_mb(c.st, in[j], 0), mg_storage_data_mb(c.st, in[j], k),
                   (size_t)mg_numel(in[j]) * sizeof(int32_t));
        mg_exec_info one = {.seed = SEED, .iteration = ITERATION, .training = true, .n_micro = 1, .mb_offset = k};
        if (mg_exec_reference(c.step.g, c.st, &one, &err)) {
            TK_CHECK(false, "micro-batch %d alone: %s", k, err.msg);
            break;
        }
        lsum += *(const float *)mg_storage_data(c.st, c.step.loss);
        for (int i = 0; i < n_t; i++) {
            const mg_tensor *p = mg_graph_tensor(c.step.g, i);
            if (p->role != MG_ROLE_PARAM || !grad[i]) continue;
            char name[512];
            snprintf(name, sizeof name, "%s.main_grad", p->name);
            const float *g1 = mg_storage_data(c.st, mg_graph_find(c.step.g, name));
            if (!gsum[i]) gsum[i] = calloc((size_t)mg_numel(p), sizeof(float));
            for (int64_t e = 0; e < mg_numel(p); e++) gsum[i][e] += g1[e];
        }
    }
    for (int i = 0; i < n_t; i++) {
        if (!gsum[i]) continue;
        const mg_tensor *p = mg_graph_tensor(c.step.g, i);
        double d = 0, m = 0;
        for (int64_t e = 0; e < mg_numel(p); e++) {
            d = fmax(d, fabs((double)gsum[i][e] - grad[i][e]));
            m = fmax(m, fabs((double)grad[i][e]));
        }
        worst_mb = fmax(worst_mb, m > 0 ? d / m : d);
        TK_CHECK(d <= 1e-5 * m, "%s: the micro-batches' gradients add up to %.3g of the step's largest off", p->name,
                 m > 0 ? d / m : d);
        free(gsum[i]);
    }
    free(gsum);
    TK_CHECK(fabs(lsum - loss0) <= 1e-6 * fabs(loss0), "the micro-batches alone report %.9g in all, the step %.9g", lsum,
             loss0);
    /* AdamW's first step, every element (torch.optim.AdamW; Megatron's clipping) */
    const mg_adamw_config *o = &cfg.optim;
    double coef = o->clip_grad > 0 && o->clip_grad / (sqrt(sq) + 1e-6) < 1 ? o->clip_grad / (sqrt(sq) + 1e-6) : 1.0;
    double worst_p = 0, worst_m = 0;
    int64_t updated = 0;
    for (int i = 0; i < n_t; i++) {
        const mg_tensor *p = mg_graph_tensor(c.step.g, i);
        if (p->role != MG_ROLE_PARAM || !m1[i]) continue;
        double wd = p->no_weight_decay ? 0.0 : o->weight_decay;
        for (int64_t k = 0; k < mg_numel(p); k++, updated++) {
            double g = grad[i][k] * coef, m = (1 - o->beta1) * g, v = (1 - o->beta2) * g * g;
            double mh = m / (1 - o->beta1), vh = v / (1 - o->beta2);
            double want = before[i][k] * (1 - lr * wd) - lr * mh / (sqrt(vh) + o->eps);
            /* float rounding: of the weight (~6e-8 |w|) and of the update (~1e-6 lr) */
            double e = fabs(after[i][k] - want) / (1e-5 * lr + 3e-7 * fabs(want));
            double em = fmax(fabs(m1[i][k] - m) / (1e-6 * fabs(m) + 1e-12), fabs(v1[i][k] - v) / (1e-6 * v + 1e-20));
            if (e > worst_p) worst_p = e;
            if (em > worst_m) worst_m = em;
            if (e > 1 || em > 1) {
                TK_CHECK(false, "%s[%lld]: AdamW's first step gave %.9g (exp_avg %.6g, exp_avg_sq %.6g), want %.9g (%.6g, %.6g)",
                         p->name, (long long)k, after[i][k], m1[i][k], v1[i][k], want, m, v);
                break;
            }
        }
    }
    for (int i = 0; i < n_t; i++) {
        const mg_tensor *p = mg_graph_tensor(c.step.g, i);
        if (p->role != MG_ROLE_PARAM || !grad[i]) continue;
        kinds++;
        int64_t e[PROBES];
        pick(grad[i], mg_numel(p), i + 1, e);
        for (int k = 0; k < PROBES; k++) {
            float keep = before[i][e[k]];
            double lp = loss_at(&c, p, e[k], keep + (float)eps), lm = loss_at(&c, p, e[k], keep - (float)eps);
            double fd = (lp - lm) / (2 * eps), a = grad[i][e[k]];
            /* the loss is a mean near ln 64 = 4.2: float rounding of each loss is ~5e-7,
             * so the differences are good to ~3e-4 absolute; 3% relative covers the
             * truncation error of the step (curvature of softmax, GELU, LayerNorm) */
            double r = fabs(fd - a) / (3e-4 + 3e-2 * fmax(fabs(fd), fabs(a)));
            if (r > worst) worst = r;
            probed++;
            TK_CHECK(r <= 1.0, "d lm_loss / d %s[%lld]: main_grad %.6g, finite difference %.6g", p->name, (long long)e[k],
                     a, fd);
            if (fabs(fd) > 1e-2) moved++;
        }
    }
    /* GPT-2 with 2 layers: wte, wpe, ln_f (2), and 12 per layer */
    TK_CHECK(kinds == 4 + 12 * cfg.model.num_layers, "%d parameter tensors probed, want %d", kinds,
             4 + 12 * cfg.model.num_layers);
    TK_CHECK(moved >= probed / 4, "only %d of %d probes had a gradient above 1e-2", moved, probed);
    if (tk_failures == fails)
        printf("ok: %d parameter tensors, %d probes (%d with gradient > 1e-2); loss %.6f, grad norm %.6f; worst "
               "gradient error %.3f of tolerance; AdamW's first step on %lld elements (lr %g, clip coefficient %.4f): "
               "worst weight %.3f, moments %.3f of tolerance; the %d micro-batches alone add up to the step (gradients "
               "within %.2g of each tensor's largest)\n",
               kinds, probed, moved, loss0, gn, worst, (long long)updated, lr, coef, worst_p, worst_m, NMICRO, worst_mb);
    for (int i = 0; i < n_t; i++) {
        free(before[i]);
        free(grad[i]);
        free(after[i]);
        free(m1[i]);
        free(v1[i]);
    }
    free(before);
    free(grad);
    free(after);
    free(m1);
    free(v1);
out:
    mg_storage_free(c.st);
    mg_memplan_free(c.plan);
    mg_step_release(&c.step);
}

int main(int argc, char **argv) {
    static const tk_case cases[] = {
        {"step_gradients", test_step_gradients},
    };
    return tk_main(argc, argv, cases, (int)(sizeof cases / sizeof cases[0]));
}

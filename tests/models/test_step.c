/* The GPT-2 training step (mg_step_build) on the StarPU engine against the reference
 * executor, and with the memory plan's buffer reuse on against off.
 *
 * Why the results are bitwise equal, not merely close:
 *  - Each node of the step graph runs exactly once per step, as one task, with the
 *    same CPU kernel function on the same input bits. StarPU only chooses when and on
 *    which worker a node runs, never what it computes.
 *  - Kernels are deterministic: a kernel's output depends only on its inputs, its
 *    attributes and (seed, iteration, node) - dropout and attention dropout draw from
 *    a counter-based Philox stream, not from a per-thread RNG state.
 *  - There is no reduction across tasks: a tensor used several times gets its
 *    gradient summed by explicit add nodes in a fixed order (autodiff, reverse
 *    topological order), the micro-batch losses and gradients are summed by a chain of
 *    add nodes fixed when the graph is built, and the global gradient norm is a graph
 *    node too. Nothing accumulates atomically or in completion order.
 *  - sgemm: every matmul calls OpenBLAS with the same shapes, so the same kernel.
 *    OpenBLAS's level-3 threading splits M and N, never K, so each output element
 *    sums its K products in the same order whatever the thread count. The first
 *    reference step below runs before any engine exists (OpenBLAS at its default
 *    thread count), the second while one does (StarPU sets OpenBLAS to one thread):
 *    both must still match.
 *  - Buffer reuse changes only where a transient tensor lives, never its value: the
 *    plan gives an output a buffer no input of the same node holds, and the engine
 *    turns reuse into write-after-read dependencies on the buffer's handle.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mgraph/engine.h"
#include "mgraph/model.h"
#include "testkit.h"

enum { SEQ = 32, MBS = 2, NMICRO = 2, STEPS = 2 };
static const uint64_t SEED = 1234;

/* 2 layers, hidden 64, 4 heads, seq 32, byte vocabulary, dropout 0.1 on hidden
 * states and attention probabilities, 2 micro-batches of 2 sequences. */
static mg_step_config small_config(void) {
    mg_step_config c;
    memset(&c, 0, sizeof c);
    c.model = mg_gpt_defaults();
    c.model.num_layers = 2;
    c.model.hidden = 64;
    c.model.ffn_hidden = 256;
    c.model.heads = 4;
    c.model.seq_length = SEQ;
    c.model.max_position = SEQ;
    c.model.vocab = 256;
    c.model.hidden_dropout = 0.1f;
    c.model.attention_dropout = 0.1f;
    c.micro_batch = MBS;
    c.n_micro = NMICRO;
    c.training = true;
    c.optim = mg_adamw_defaults();
    c.optim.lr = (mg_lr_schedule){.lr = 3e-3f, .min_lr = 3e-4f, .warmup_steps = 0, .decay_steps = 10,
                                  .style = MG_LR_COSINE};
    return c;
}

typedef struct side {
    mg_memplan *plan;
    mg_storage *st;
    mg_engine *eng; /* NULL: reference executor */
} side;

/* Plan, storage initialised from SEED, and the same token/label/position inputs for
 * every side (test data from the test kit's own generator). */
static int side_new(side *sd, mg_step *step, bool reuse) {
    memset(sd, 0, sizeof *sd);
    mg_error err = {0};
    mg_storage_options so = {.n_micro = step->n_micro, .n_slots = 2};
    if (mg_memplan_build(step->g, reuse, &sd->plan, &err) || mg_storage_new_ex(step->g, sd->plan, &so, &sd->st, &err) ||
        mg_storage_init(sd->st, SEED, &err)) {
        TK_CHECK(false, "side setup: %s", err.msg);
        return -1;
    }
    tk_rng rng = {42};
    for (int k = 0; k < step->n_micro; k++) {
        int32_t *tok = mg_storage_data_mb(sd->st, step->tokens, k), *lab = mg_storage_data_mb(sd->st, step->targets, k);
        for (int64_t i = 0; i < mg_numel(step->tokens); i++) {
            tok[i] = (int32_t)tk_uniform(&rng, 0, 256) & 255;
            lab[i] = (int32_t)tk_uniform(&rng, 0, 256) & 255;
        }
    }
    int32_t *pos = mg_storage_data(sd->st, step->positions);
    for (int t = 0; t < SEQ; t++) pos[t] = t;
    return 0;
}

static int side_engine(side *sd, mg_step *step) {
    mg_error err = {0};
    mg_engine_options opt = {.sched_policy = NULL, .ncpus = 0, .use_priorities = true}; /* all workers */
    int rc = mg_engine_new(step->g, sd->st, &opt, &sd->eng, &err);
    TK_CHECK(rc == MG_OK, "engine_new: %s", err.msg);
    return rc;
}

static void side_free(side *sd) {
    mg_engine_free(sd->eng);
    mg_storage_free(sd->st);
    mg_memplan_free(sd->plan);
}

static int side_run(side *sd, mg_step *step, int64_t it) {
    mg_error err = {0};
    mg_exec_info info = {.seed = SEED, .iteration = it, .training = true, .comm = NULL, .n_micro = step->n_micro};
    int rc = sd->eng ? mg_engine_run(sd->eng, &info, &err) : mg_exec_reference(step->g, sd->st, &info, &err);
    TK_CHECK(rc == MG_OK, "%s step %lld: %s", sd->eng ? "engine" : "reference", (long long)it, err.msg);
    return rc;
}

static float scalar(side *sd, const mg_tensor *t) { return *(const float *)mg_storage_data(sd->st, t); }

static size_t bytes_of(const mg_tensor *t) { return (size_t)mg_numel(t) * mg_dtype_size(t->dtype); }

/* Compares tensors bitwise: every tensor when `all` (both plans without reuse, so
 * every value survives the step), else those in persistent buffers of a's plan
 * (parameters, Adam moments, loss, lr, grad norm). Reports the first few that differ,
 * with the first differing element. Returns the number compared. */
static int compare(const char *what, mg_step *step, side *a, side *b, bool all, int *n_diff) {
    int n = 0;
    *n_diff = 0;
    for (int i = 0; i < mg_graph_n_tensors(step->g); i++) {
        const mg_tensor *t = mg_graph_tensor(step->g, i);
        if (!all && !a->plan->buffer_persistent[a->plan->buffer_of[i]]) continue;
        const unsigned char *x = mg_storage_data(a->st, t), *y = mg_storage_data(b->st, t);
        size_t nb = bytes_of(t);
        n++;
        if (memcmp(x, y, nb) == 0) continue;
        if (++*n_diff <= 5) {
            size_t k = 0;
            while (k < nb && x[k] == y[k]) k++;
            size_t e = k / mg_dtype_size(t->dtype);
            if (t->dtype == MG_F32)
                TK_CHECK(false, "%s: tensor %s (id %d) differs first at element %zu: %.9g vs %.9g", what, t->name, i, e,
                         ((const float *)x)[e], ((const float *)y)[e]);
            else
                TK_CHECK(false, "%s: tensor %s (id %d) differs first at element %zu", what, t->name, i, e);
        }
    }
    if (*n_diff > 5) TK_CHECK(false, "%s: %d tensors differ in all", what, *n_diff);
    return n;
}

/* The parameters must have moved (the step trained) and the loss must be finite and
 * near ln(256) (random inputs, freshly initialised model). */
static void sanity(side *sd, mg_step *step, float loss0) {
    TK_CHECK(isfinite(loss0) && fabsf(loss0 - logf(256.0f)) < 0.2f, "first loss %.6f, want about ln 256 = %.6f", loss0,
             logf(256.0f));
    float gn = scalar(sd, step->opt.grad_norm), lr = scalar(sd, step->opt.lr);
    TK_CHECK(isfinite(gn) && gn > 0, "grad norm %g", gn);
    TK_CHECK(lr > 0 && lr <= 3e-3f, "lr %g", lr);
}

static int build(mg_step *step) {
    mg_step_config c = small_config();
    mg_error err = {0};
    int rc = mg_step_build(&c, step, &err);
    TK_CHECK(rc == MG_OK, "mg_step_build: %s", err.msg);
    return rc;
}

/* StarPU (all workers, default policy) against the reference executor, both without
 * buffer reuse so that every activation and gradient can be compared too. */
static void test_starpu_equals_reference(void) {
    mg_step step;
    if (build(&step)) return;
    side ref, sp;
    if (side_new(&ref, &step, false) || side_new(&sp, &step, false)) goto out;
    /* the two storages start from the same bits */
    int nd = 0;
    compare("after init", &step, &ref, &sp, true, &nd);
    float *w0 = malloc(bytes_of(step.model.wte));
    memcpy(w0, mg_storage_data(ref.st, step.model.wte), bytes_of(step.model.wte));
    /* step 0 on the reference before any engine exists: OpenBLAS at its default
     * thread count; then the engine (OpenBLAS single-threaded from here on) */
    if (side_run(&ref, &step, 0) || side_engine(&sp, &step) || side_run(&sp, &step, 0)) goto out_w;
    for (int it = 0; it < STEPS; it++) {
        if (it > 0 && (side_run(&ref, &step, it) || side_run(&sp, &step, it))) break;
        char what[64];
        snprintf(what, sizeof what, "step %d", it);
        int n = compare(what, &step, &ref, &sp, true, &nd);
        float lr = scalar(&ref, step.loss), ls = scalar(&sp, step.loss);
        printf("step %d: loss ref %.9e starpu %.9e (%a), lr %.9e, grad norm ref %.9e starpu %.9e; %d tensors, %d differ\n",
               it, lr, ls, ls, scalar(&sp, step.opt.lr), scalar(&ref, step.opt.grad_norm),
               scalar(&sp, step.opt.grad_norm), n, nd);
        TK_CHECK(memcmp(&lr, &ls, 4) == 0, "loss differs");
        if (it == 0) sanity(&sp, &step, ls);
        mg_engine_stats st;
        mg_engine_get_stats(sp.eng, &st);
        int per_mb = 0;
        for (int k = 0; k < mg_graph_n_nodes(step.g); k++) per_mb += mg_graph_node(step.g, k)->mb >= 0;
        int want = mg_graph_n_nodes(step.g) + (step.n_micro - 1) * per_mb; /* the per-micro-batch part per instance */
        TK_CHECK(st.tasks == want, "engine ran %lld tasks, want %d (%d nodes, %d of them per micro-batch)",
                 (long long)st.tasks, want, mg_graph_n_nodes(step.g), per_mb);
        if (it == 0) printf("engine: %d workers, %lld tasks, %.1f ms, idle %.2f\n", st.n_workers, (long long)st.tasks,
                            st.wall_s * 1e3, st.idle_fraction);
    }
    TK_CHECK(memcmp(w0, mg_storage_data(sp.st, step.model.wte), bytes_of(step.model.wte)) != 0,
             "wte did not change: no training happened");
out_w:
    free(w0);
out:
    side_free(&sp);
    side_free(&ref);
    mg_step_release(&step);
}

/* Buffer reuse on against off, both on the StarPU engine (two engines share one
 * StarPU): every persistent tensor bitwise equal after each step. */
static void test_memplan_reuse_equal(void) {
    mg_step step;
    if (build(&step)) return;
    side on, off;
    if (side_new(&on, &step, true) || side_new(&off, &step, false)) goto out;
    /* reuse must actually happen, or this test proves nothing */
    printf("reuse on: %d buffers, activations %zu bytes (%zu without reuse); reuse off: %d buffers\n",
           on.plan->n_buffers, on.plan->transient_bytes, on.plan->unshared_bytes, off.plan->n_buffers);
    TK_CHECK(on.plan->n_buffers < off.plan->n_buffers, "reuse plan has %d buffers, no-reuse %d", on.plan->n_buffers,
             off.plan->n_buffers);
    /* reuse is limited to buffers whose previous users the data already orders before
     * the new writer (no parallelism lost), so it saves less than plain liveness */
    TK_CHECK(on.plan->transient_bytes * 4 < on.plan->unshared_bytes * 3, "reuse saves little: %zu of %zu bytes",
             on.plan->transient_bytes, on.plan->unshared_bytes);
    if (side_engine(&on, &step) || side_engine(&off, &step)) goto out;
    for (int it = 0; it < STEPS; it++) {
        if (side_run(&on, &step, it) || side_run(&off, &step, it)) break;
        char what[64];
        snprintf(what, sizeof what, "step %d", it);
        int nd = 0, n = compare(what, &step, &on, &off, false, &nd);
        printf("step %d: loss reuse %.9e no-reuse %.9e, grad norm %.9e %.9e; %d persistent tensors, %d differ\n", it,
               scalar(&on, step.loss), scalar(&off, step.loss), scalar(&on, step.opt.grad_norm),
               scalar(&off, step.opt.grad_norm), n, nd);
        TK_CHECK(n > 4 * 12 * 2, "only %d persistent tensors compared", n);
        if (it == 0) sanity(&on, &step, scalar(&on, step.loss));
    }
out:
    side_free(&on);
    side_free(&off);
    mg_step_release(&step);
}

/* The evaluation graph runs on the training graph's parameters (params_from): every
 * parameter is borrowed, initialising the evaluation storage leaves the trained
 * weights alone, and after a training step the evaluation loss on the engine equals
 * that of an evaluation graph given copies of the trained weights, and differs from
 * the loss with the initial weights. */
static void test_eval_borrows_params(void) {
    mg_step_config tc = small_config(), ec = small_config();
    ec.training = false;
    mg_step train, eval;
    mg_error err = {0};
    TK_CHECK(mg_step_build(&tc, &train, &err) == MG_OK && mg_step_build(&ec, &eval, &err) == MG_OK, "build: %s",
             err.msg);
    side t, e, c; /* training; evaluation borrowing; evaluation with copied weights */
    if (side_new(&t, &train, true) || side_run(&t, &train, 0)) return;
    int n_params = 0;
    for (int i = 0; i < mg_graph_n_tensors(eval.g); i++) n_params += mg_graph_tensor(eval.g, i)->role == MG_ROLE_PARAM;
    /* the evaluation side, borrowing */
    memset(&e, 0, sizeof e);
    mg_storage_options so = {.n_micro = eval.n_micro, .n_slots = 2, .params_from = t.st};
    TK_CHECK(mg_memplan_build(eval.g, true, &e.plan, &err) == MG_OK &&
                 mg_storage_new_ex(eval.g, e.plan, &so, &e.st, &err) == MG_OK && mg_storage_init(e.st, SEED, &err) == MG_OK,
             "borrowing storage: %s", err.msg);
    TK_CHECK(mg_storage_n_borrowed(e.st) == n_params, "%d of %d parameters borrowed", mg_storage_n_borrowed(e.st),
             n_params);
    /* the same inputs on both evaluation sides: side_new's, then the copies */
    if (side_new(&c, &eval, true)) return;
    for (int k = 0; k < eval.n_micro; k++) {
        memcpy(mg_storage_data_mb(e.st, eval.tokens, k), mg_storage_data_mb(c.st, eval.tokens, k), bytes_of(eval.tokens));
        memcpy(mg_storage_data_mb(e.st, eval.targets, k), mg_storage_data_mb(c.st, eval.targets, k), bytes_of(eval.targets));
    }
    memcpy(mg_storage_data(e.st, eval.positions), mg_storage_data(c.st, eval.positions), bytes_of(eval.positions));
    *(float *)mg_storage_data(e.st, eval.loss_scale) = 1.0f / NMICRO;
    *(float *)mg_storage_data(c.st, eval.loss_scale) = 1.0f / NMICRO;
    mg_exec_info info = {.seed = SEED, .iteration = 1, .training = false, .n_micro = eval.n_micro};
    TK_CHECK(mg_exec_reference(eval.g, c.st, &info, &err) == MG_OK, "eval, initial weights: %s", err.msg);
    float initial = scalar(&c, eval.loss);
    int n_same = 0;
    for (int i = 0; i < mg_graph_n_tensors(eval.g); i++) {
        const mg_tensor *p = mg_graph_tensor(eval.g, i);
        if (p->role != MG_ROLE_PARAM) continue;
        const mg_tensor *q = mg_graph_find(train.g, p->name); /* the test's own pairing, by name */
        TK_CHECK(q && bytes_of(q) == bytes_of(p), "parameter %s in the training graph", p->name);
        if (!q) continue;
        n_same += mg_storage_data(e.st, p) == mg_storage_data(t.st, q);
        memcpy(mg_storage_data(c.st, p), mg_storage_data(t.st, q), bytes_of(p));
    }
    TK_CHECK(n_same == n_params, "%d of %d parameters share the training buffer", n_same, n_params);
    TK_CHECK(mg_exec_reference(eval.g, c.st, &info, &err) == MG_OK, "eval, copied weights: %s", err.msg);
    if (side_engine(&e, &eval)) return;
    mg_storage_refresh_borrowed(e.st);
    TK_CHECK(mg_engine_run(e.eng, &info, &err) == MG_OK, "eval, borrowed weights: %s", err.msg);
    float copied = scalar(&c, eval.loss), borrowed = scalar(&e, eval.loss);
    TK_CHECK(memcmp(&copied, &borrowed, sizeof copied) == 0, "evaluation loss %.9g with borrowed weights, %.9g with copies",
             borrowed, copied);
    TK_CHECK(copied != initial, "the trained weights give another loss than the initial ones (%.9g)", initial);
    side_free(&e); /* before the lender */
    side_free(&c);
    side_free(&t);
    mg_step_release(&eval);
    mg_step_release(&train);
}

int main(int argc, char **argv) {
    static const tk_case cases[] = {
        {"starpu_equals_reference", test_starpu_equals_reference},
        {"memplan_reuse_equal", test_memplan_reuse_equal},
        {"eval_borrows_params", test_eval_borrows_params},
    };
    return tk_main(argc, argv, cases, (int)(sizeof cases / sizeof cases[0]));
}

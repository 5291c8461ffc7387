/* StarPU engine against the reference executor.
 *
 * The engine runs the same kernels as the reference executor, so results must be
 * bitwise equal, under any policy and worker count, step after step (handles are
 * registered once and reused), with buffers reused by the memory plan (so the WAR
 * dependencies from reuse are exercised) and in-place optimizer updates (RW).
 */
#include <stdlib.h>
#include <string.h>

#include "mgraph/comm.h"
#include "mgraph/engine.h"
#include "mgraph/model.h"
#include "mgraph/train.h"
#include "ops/op.h" /* the op table: find an op without a CPU kernel */
#include "scheduler/starpu_internal.h" /* mg_starpu_event_priority */
#include "testkit.h"

/* A small training step: 2 residual MLP blocks (linear, bias, gelu, layernorm,
 * dropout), a mean-square loss, autodiff and AdamW (in-place updates). */
typedef struct model {
    mg_graph *g;
    mg_tensor *x, *loss;
} model;

static int build_model(model *m, bool train, int layers) {
    memset(m, 0, sizeof *m);
    mg_graph *g = m->g = mg_graph_new();
    const int64_t T = 32, H = 64;
    int64_t sx[2] = {T, H}, sw[2] = {H, H}, sb[1] = {H};
    m->x = mg_input(g, "x", MG_F32, 2, sx);
    mg_tensor *h = m->x;
    for (int l = 0; l < layers; l++) {
        mg_scope_push(g, "l%d", l);
        mg_tensor *w = mg_param(g, "w", 2, sw, (mg_init){MG_INIT_NORMAL, 0.1f});
        mg_tensor *b = mg_param(g, "b", 1, sb, (mg_init){MG_INIT_NORMAL, 0.1f});
        mg_tensor *lw = mg_param(g, "ln.w", 1, sb, (mg_init){MG_INIT_ONES, 0});
        mg_tensor *lb = mg_param(g, "ln.b", 1, sb, (mg_init){MG_INIT_ZEROS, 0});
        mg_tensor *a = mg_gelu(g, mg_linear(g, mg_layernorm(g, h, lw, lb, 1e-5f), w, b));
        h = mg_add(g, h, mg_dropout(g, a, 0.1f));
        mg_scope_pop(g);
    }
    m->loss = mg_mean(g, mg_mul(g, h, h), MG_ALL_AXES, false);
    if (!m->loss) {
        fprintf(stderr, "build: %s\n", mg_graph_error(g)->msg);
        return -1;
    }
    m->loss->persistent = true; /* the host reads it */
    if (!train) return 0;
    mg_error err = {0};
    mg_adamw_config cfg = mg_adamw_defaults();
    cfg.lr = (mg_lr_schedule){.lr = 1e-2f, .min_lr = 1e-3f, .warmup_steps = 2, .decay_steps = 10, .style = MG_LR_COSINE};
    mg_optimizer_outputs oo;
    if (mg_graph_backward(g, m->loss, &err) || mg_graph_add_adamw(g, &cfg, &oo, &err)) {
        fprintf(stderr, "train rewrite: %s\n", err.msg);
        return -1;
    }
    return 0;
}

typedef struct runner {
    mg_memplan *plan;
    mg_storage *st;
} runner;

static int runner_new(runner *r, model *m) {
    mg_error err = {0};
    memset(r, 0, sizeof *r);
    if (mg_memplan_build(m->g, true, &r->plan, &err) || mg_storage_new(m->g, r->plan, &r->st, &err) ||
        mg_storage_init(r->st, 1234, &err)) {
        fprintf(stderr, "runner: %s\n", err.msg);
        return -1;
    }
    tk_rng rng = {42};
    tk_fill(&rng, mg_storage_data(r->st, m->x), mg_numel(m->x), -1.0f, 1.0f);
    return 0;
}

static void runner_free(runner *r) {
    mg_storage_free(r->st);
    mg_memplan_free(r->plan);
}

/* Every persistent tensor (params, moments, loss, ...) bitwise equal. */
static bool same_state(const char *what, model *m, runner *a, runner *b) {
    bool ok = true;
    for (int i = 0; i < mg_graph_n_tensors(m->g); i++) {
        const mg_tensor *t = mg_graph_tensor(m->g, i);
        if (!a->plan->buffer_persistent[a->plan->buffer_of[i]]) continue;
        size_t bytes = (size_t)mg_numel(t) * mg_dtype_size(t->dtype);
        if (memcmp(mg_storage_data(a->st, t), mg_storage_data(b->st, t), bytes) != 0) {
            TK_CHECK(false, "%s: tensor %s differs", what, t->name);
            ok = false;
        }
    }
    return ok;
}

static mg_exec_info info_at(int64_t it) { return (mg_exec_info){.seed = 7, .iteration = it, .training = true}; }

/* Runs `steps` training steps on the reference and on StarPU with `policy`. */
static void compare_with_reference(const char *policy, int ncpus, int steps) {
    model m;
    if (build_model(&m, true, 2)) {
        TK_CHECK(false, "model build failed");
        mg_graph_free(m.g);
        return;
    }
    runner ref, sp;
    mg_engine *e = NULL;
    mg_error err = {0};
    if (runner_new(&ref, &m) || runner_new(&sp, &m)) {
        TK_CHECK(false, "runner");
        goto out;
    }
    mg_engine_options opt = {.sched_policy = policy, .ncpus = ncpus, .use_priorities = true};
    int rc = mg_engine_new(m.g, sp.st, &opt, &e, &err);
    TK_CHECK(rc == MG_OK, "engine_new(%s): %s", policy, err.msg);
    if (rc) goto out;
    for (int it = 0; it < steps; it++) {
        mg_exec_info info = info_at(it);
        rc = mg_exec_reference(m.g, ref.st, &info, &err);
        TK_CHECK(rc == MG_OK, "reference step %d: %s", it, err.msg);
        rc = mg_engine_run(e, &info, &err);
        TK_CHECK(rc == MG_OK, "engine step %d: %s", it, err.msg);
        if (rc) break;
        char what[64];
        snprintf(what, sizeof what, "%s step %d", policy ? policy : "default", it);
        same_state(what, &m, &ref, &sp);
        mg_engine_stats st;
        mg_engine_get_stats(e, &st);
        TK_CHECK(st.tasks == mg_graph_n_nodes(m.g), "tasks %lld != nodes %d", (long long)st.tasks,
                 mg_graph_n_nodes(m.g));
        printf("%s: loss %.6f, %lld tasks, %d workers, %.2f ms, idle %.2f\n", what,
               *(float *)mg_storage_data(sp.st, m.loss), (long long)st.tasks, st.n_workers, st.wall_s * 1e3,
               st.idle_fraction);
    }
out:
    mg_engine_free(e);
    runner_free(&ref);
    runner_free(&sp);
    mg_graph_free(m.g);
}

static void test_reference(void) { compare_with_reference(NULL, 0, 3); }

/* One worker: the order is the submission order, still the same bits. */
static void test_one_worker(void) { compare_with_reference("eager", 1, 2); }

/* Different policies, one after the other in one process (StarPU restarts between
 * them), give the same bits as each other; the last three with 4 CPU workers, more than
 * the 2 cores of the machines this runs on (and the most Debian's StarPU runs), which
 * the engine's statistics must report as running and as asked for. */
static void test_policies(void) {
    static const char *policies[] = {"eager", "prio", "lws", "ws", "dmda", "dmdas", "lws", "prio"};
    static const int ncpus[] = {0, 0, 0, 0, 0, 0, 4, 4};
    model m;
    if (build_model(&m, true, 2)) {
        TK_CHECK(false, "model build failed");
        mg_graph_free(m.g);
        return;
    }
    float *first = NULL;
    size_t total = 0;
    for (size_t p = 0; p < sizeof policies / sizeof policies[0]; p++) {
        runner r;
        mg_engine *e = NULL;
        mg_error err = {0};
        if (runner_new(&r, &m)) break;
        mg_engine_options opt = {.sched_policy = policies[p], .use_priorities = true, .ncpus = ncpus[p]};
        int rc = mg_engine_new(m.g, r.st, &opt, &e, &err);
        TK_CHECK(rc == MG_OK, "engine_new(%s): %s", policies[p], err.msg);
        for (int it = 0; it < 2 && !rc; it++) {
            mg_exec_info info = info_at(it);
            rc = mg_engine_run(e, &info, &err);
            TK_CHECK(rc == MG_OK, "%s step %d: %s", policies[p], it, err.msg);
        }
        if (!rc && ncpus[p] && !getenv("STARPU_NCPU")) {
            mg_engine_stats st;
            mg_engine_get_stats(e, &st);
            int want = ncpus[p] < st.cpu_cap ? ncpus[p] : st.cpu_cap;
            TK_CHECK(st.n_cpu_workers == want && st.n_cpu_wanted == ncpus[p],
                     "%s with %d CPU workers asked: %d run, %d reported asked (cap %d)", policies[p], ncpus[p],
                     st.n_cpu_workers, st.n_cpu_wanted, st.cpu_cap);
        }
        mg_engine_free(e);
        /* concatenate every persistent tensor */
        size_t n = 0;
        for (int i = 0; i < mg_graph_n_tensors(m.g); i++)
            if (r.plan->buffer_persistent[r.plan->buffer_of[i]])
                n += (size_t)mg_numel(mg_graph_tensor(m.g, i)) * mg_dtype_size(mg_graph_tensor(m.g, i)->dtype);
        char *cat = malloc(n ? n : 1);
        size_t o = 0;
        for (int i = 0; i < mg_graph_n_tensors(m.g); i++)
            if (r.plan->buffer_persistent[r.plan->buffer_of[i]]) {
                const mg_tensor *t = mg_graph_tensor(m.g, i);
                size_t b = (size_t)mg_numel(t) * mg_dtype_size(t->dtype);
                memcpy(cat + o, mg_storage_data(r.st, t), b);
                o += b;
            }
        if (!first) {
            first = (float *)cat;
            total = n;
        } else {
            TK_CHECK(n == total && memcmp(first, cat, n) == 0, "policy %s differs from %s", policies[p], policies[0]);
            free(cat);
        }
        runner_free(&r);
    }
    free(first);
    mg_graph_free(m.g);
}

/* Forward only (nothing updated in place): running the same engine twice gives the
 * same outputs; stats are sensible. */
static void test_repeat_and_stats(void) {
    model m;
    if (build_model(&m, false, 3)) {
        TK_CHECK(false, "model build failed");
        mg_graph_free(m.g);
        return;
    }
    runner r;
    mg_engine *e = NULL;
    mg_error err = {0};
    if (runner_new(&r, &m)) goto out;
    int rc = mg_engine_new(m.g, r.st, NULL, &e, &err);
    TK_CHECK(rc == MG_OK, "engine_new: %s", err.msg);
    if (rc) goto out;
    float loss[2];
    for (int k = 0; k < 2; k++) {
        mg_exec_info info = info_at(5);
        rc = mg_engine_run(e, &info, &err);
        TK_CHECK(rc == MG_OK, "run %d: %s", k, err.msg);
        loss[k] = *(float *)mg_storage_data(r.st, m.loss);
        mg_engine_stats st;
        mg_engine_get_stats(e, &st);
        TK_CHECK(st.tasks == mg_graph_n_nodes(m.g), "tasks %lld != nodes %d", (long long)st.tasks,
                 mg_graph_n_nodes(m.g));
        TK_CHECK(st.n_workers >= 1 && st.n_workers <= 4, "workers %d", st.n_workers);
        TK_CHECK(st.wall_s > 0, "wall %g", st.wall_s);
        double busy = 0;
        for (int w = 0; w < st.n_workers; w++) {
            TK_CHECK(st.busy_s[w] >= 0 && st.busy_s[w] <= st.wall_s, "busy[%d] = %g, wall %g", w, st.busy_s[w], st.wall_s);
            busy += st.busy_s[w];
        }
        TK_CHECK(busy > 0, "no busy time recorded");
        TK_CHECK(st.idle_fraction >= 0 && st.idle_fraction <= 1, "idle %g", st.idle_fraction);
    }
    TK_CHECK(memcmp(&loss[0], &loss[1], sizeof loss[0]) == 0, "repeat: %.9g vs %.9g", loss[0], loss[1]);
    /* a different iteration gives another dropout mask: the exec info reaches kernels */
    mg_exec_info info = info_at(6);
    rc = mg_engine_run(e, &info, &err);
    TK_CHECK(rc == MG_OK && *(float *)mg_storage_data(r.st, m.loss) != loss[0], "iteration not seen by dropout");
out:
    mg_engine_free(e);
    runner_free(&r);
    mg_graph_free(m.g);
}

/* A node with more buffers than StarPU's static limit (8): concat of 12 tensors goes
 * through dyn_handles; the same tensor twice in a node (mul(x, x)) is one handle. */
static void test_many_buffers(void) {
    mg_graph *g = mg_graph_new();
    int64_t s[2] = {4, 8};
    mg_tensor *x = mg_input(g, "x", MG_F32, 2, s), *parts[12];
    for (int i = 0; i < 12; i++) parts[i] = mg_scale(g, x, (float)(i + 1));
    mg_tensor *c = mg_concat(g, 12, parts, 1);
    mg_tensor *y = mg_mul(g, c, c);
    if (!y) {
        TK_CHECK(false, "build: %s", mg_graph_error(g)->msg);
        mg_graph_free(g);
        return;
    }
    y->persistent = true;
    mg_memplan *plan = NULL;
    mg_storage *a = NULL, *b = NULL;
    mg_engine *e = NULL;
    mg_error err = {0};
    int rc = mg_memplan_build(g, true, &plan, &err);
    if (!rc) rc = mg_storage_new(g, plan, &a, &err);
    if (!rc) rc = mg_storage_new(g, plan, &b, &err);
    TK_CHECK(rc == MG_OK, "setup: %s", err.msg);
    if (rc) goto out;
    tk_rng r1 = {1}, r2 = {1};
    tk_fill(&r1, mg_storage_data(a, x), mg_numel(x), -1, 1);
    tk_fill(&r2, mg_storage_data(b, x), mg_numel(x), -1, 1);
    mg_exec_info info = info_at(0);
    rc = mg_exec_reference(g, a, &info, &err);
    TK_CHECK(rc == MG_OK, "reference: %s", err.msg);
    rc = mg_engine_new(g, b, NULL, &e, &err);
    if (!rc) rc = mg_engine_run(e, &info, &err);
    TK_CHECK(rc == MG_OK, "engine: %s", err.msg);
    TK_CHECK(memcmp(mg_storage_data(a, y), mg_storage_data(b, y), (size_t)mg_numel(y) * 4) == 0, "concat result differs");
out:
    mg_engine_free(e);
    mg_storage_free(a);
    mg_storage_free(b);
    mg_memplan_free(plan);
    mg_graph_free(g);
}

/* Bad options are reported, not aborted on. */
static void test_bad_policy(void) {
    mg_graph *g = mg_graph_new();
    int64_t s[1] = {4};
    mg_tensor *y = mg_scale(g, mg_input(g, "x", MG_F32, 1, s), 2.0f);
    y->persistent = true;
    mg_memplan *plan = NULL;
    mg_storage *st = NULL;
    mg_engine *e = NULL;
    mg_error err = {0};
    TK_CHECK(mg_memplan_build(g, true, &plan, &err) == MG_OK && mg_storage_new(g, plan, &st, &err) == MG_OK, "%s",
             err.msg);
    mg_engine_options opt = {.sched_policy = "no-such-policy", .use_priorities = true};
    int rc = mg_engine_new(g, st, &opt, &e, &err);
    TK_CHECK(rc == MG_ERR_INVALID && e == NULL, "want MG_ERR_INVALID, got %d", rc);
    TK_CHECK(strstr(err.msg, "no-such-policy") && strstr(err.msg, "eager"), "message: %s", err.msg);
    /* two engines at once must agree on the policy */
    mg_engine *e1 = NULL, *e2 = NULL;
    mg_engine_options o1 = {.sched_policy = "eager", .use_priorities = true};
    mg_engine_options o2 = {.sched_policy = "dmda", .use_priorities = true};
    mg_error err2 = {0};
    TK_CHECK(mg_engine_new(g, st, &o1, &e1, &err2) == MG_OK, "%s", err2.msg);
    mg_error_clear(&err2);
    TK_CHECK(mg_engine_new(g, st, &o2, &e2, &err2) == MG_ERR_UNSUPPORTED, "second policy accepted: %s", err2.msg);
    mg_engine_free(e2);
    mg_engine_free(e1);
    mg_storage_free(st);
    mg_memplan_free(plan);
    mg_graph_free(g);
}

/* Two engines alive at once share one StarPU (reference-counted) and each runs its
 * own storage; the process keeps working after both are freed. */
static void test_two_engines(void) {
    model m;
    if (build_model(&m, false, 2)) {
        TK_CHECK(false, "model build failed");
        mg_graph_free(m.g);
        return;
    }
    runner r1, r2;
    mg_engine *e1 = NULL, *e2 = NULL;
    mg_error err = {0};
    if (runner_new(&r1, &m) || runner_new(&r2, &m)) goto out;
    TK_CHECK(mg_engine_new(m.g, r1.st, NULL, &e1, &err) == MG_OK, "engine 1: %s", err.msg);
    TK_CHECK(mg_engine_new(m.g, r2.st, NULL, &e2, &err) == MG_OK, "engine 2: %s", err.msg);
    if (!e1 || !e2) goto out;
    mg_exec_info info = info_at(3);
    TK_CHECK(mg_engine_run(e1, &info, &err) == MG_OK, "run 1: %s", err.msg);
    TK_CHECK(mg_engine_run(e2, &info, &err) == MG_OK, "run 2: %s", err.msg);
    same_state("two engines", &m, &r1, &r2);
    mg_engine_free(e1);
    e1 = NULL;
    TK_CHECK(mg_engine_run(e2, &info, &err) == MG_OK, "run 2 after freeing engine 1: %s", err.msg);
out:
    mg_engine_free(e1);
    mg_engine_free(e2);
    runner_free(&r1);
    runner_free(&r2);
    mg_graph_free(m.g);
}

/* An op without a CPU kernel is reported by both executors (MG_ERR_UNSUPPORTED),
 * before anything runs. The node is retargeted to such an op after building, as no
 * builder creates one; skipped once every op has a CPU kernel. */
static void test_unsupported(void) {
    mg_op missing = MG_OP_COUNT;
    for (int op = 0; op < MG_OP_COUNT && missing == MG_OP_COUNT; op++)
        if (!mg_op_def_get((mg_op)op)->cpu) missing = (mg_op)op;
    if (missing == MG_OP_COUNT) {
        printf("skipped: every op has a CPU kernel\n");
        return;
    }
    mg_graph *g = mg_graph_new();
    int64_t s[1] = {4};
    mg_tensor *y = mg_scale(g, mg_input(g, "x", MG_F32, 1, s), 2.0f);
    y->persistent = true;
    mg_memplan *plan = NULL;
    mg_storage *st = NULL;
    mg_engine *e = NULL;
    mg_error err = {0};
    TK_CHECK(mg_memplan_build(g, true, &plan, &err) == MG_OK && mg_storage_new(g, plan, &st, &err) == MG_OK, "%s",
             err.msg);
    y->src->op = missing;
    mg_exec_info info = info_at(0);
    int rc = mg_exec_reference(g, st, &info, &err);
    TK_CHECK(rc == MG_ERR_UNSUPPORTED && strstr(err.msg, "has no CPU kernel"), "reference: %d %s", rc, err.msg);
    mg_error_clear(&err);
    rc = mg_engine_new(g, st, NULL, &e, &err);
    TK_CHECK(rc == MG_ERR_UNSUPPORTED && !e && strstr(err.msg, mg_op_name(missing)), "engine: %d %s", rc, err.msg);
    mg_engine_free(e);
    mg_storage_free(st);
    mg_memplan_free(plan);
    mg_graph_free(g);
}

/* Plan + storage (+ engine) for small hand-built graphs. */
typedef struct small {
    mg_memplan *plan;
    mg_storage *ref, *sp;
    mg_engine *e;
} small;

static int small_new(small *s, mg_graph *g, mg_error *err) {
    memset(s, 0, sizeof *s);
    int rc = mg_memplan_build(g, true, &s->plan, err);
    if (!rc) rc = mg_storage_new(g, s->plan, &s->ref, err);
    if (!rc) rc = mg_storage_new(g, s->plan, &s->sp, err);
    if (!rc) rc = mg_engine_new(g, s->sp, NULL, &s->e, err);
    return rc;
}

static void small_free(small *s) {
    mg_engine_free(s->e);
    mg_storage_free(s->ref);
    mg_storage_free(s->sp);
    mg_memplan_free(s->plan);
}

/* Collectives over groups of one rank (no communicator needed) run in the engine's
 * comm-token chain and give the reference's bits. */
static void test_collectives(void) {
    mg_graph *g = mg_graph_new();
    int64_t sh[2] = {8, 16};
    mg_tensor *x = mg_input(g, "x", MG_F32, 2, sh);
    mg_tensor *a = mg_allreduce(g, mg_scale(g, x, 2.0f), MG_GROUP_TP, 1, MG_REDUCE_SUM, 0);
    mg_tensor *b = mg_allreduce(g, mg_scale(g, x, 3.0f), MG_GROUP_DP, 1, MG_REDUCE_SUM, 0);
    mg_tensor *c = mg_allgather(g, mg_add(g, a, b), MG_GROUP_TP, 1, 1, 1);
    mg_tensor *y = mg_reduce_scatter(g, mg_scale(g, c, 0.5f), MG_GROUP_DP, 1, 0, 1);
    if (!y) {
        TK_CHECK(false, "build: %s", mg_graph_error(g)->msg);
        mg_graph_free(g);
        return;
    }
    y->persistent = true;
    small s;
    mg_error err = {0};
    int rc = small_new(&s, g, &err);
    TK_CHECK(rc == MG_OK, "setup: %s", err.msg);
    if (!rc) {
        tk_rng r1 = {3}, r2 = {3};
        tk_fill(&r1, mg_storage_data(s.ref, x), mg_numel(x), -1, 1);
        tk_fill(&r2, mg_storage_data(s.sp, x), mg_numel(x), -1, 1);
        mg_exec_info info = info_at(0);
        TK_CHECK(mg_exec_reference(g, s.ref, &info, &err) == MG_OK, "reference: %s", err.msg);
        TK_CHECK(mg_engine_run(s.e, &info, &err) == MG_OK, "engine: %s", err.msg);
        TK_CHECK(memcmp(mg_storage_data(s.ref, y), mg_storage_data(s.sp, y), (size_t)mg_numel(y) * 4) == 0,
                 "collective graph differs from the reference");
    }
    small_free(&s);
    mg_graph_free(g);
}

/* The graph's order issues a group's collectives by seq even where the data leaves
 * them free: two independent all-reduces created seq 1 first (the lower id, which the
 * order would otherwise take first), seq 0 second. Pipeline stages hold different
 * graphs, so only seq can make them agree. */
static void test_comm_chain(void) {
    mg_graph *g = mg_graph_new();
    int64_t sh[1] = {16};
    mg_tensor *a = mg_allreduce(g, mg_input(g, "a", MG_F32, 1, sh), MG_GROUP_PP, 2, MG_REDUCE_SUM, 1);
    mg_tensor *b = mg_allreduce(g, mg_input(g, "b", MG_F32, 1, sh), MG_GROUP_PP, 2, MG_REDUCE_SUM, 0);
    mg_node **ord;
    int n, ia = -1, ib = -1;
    mg_error err = {0};
    TK_CHECK(a && b && mg_graph_topo(g, &ord, &n, &err) == MG_OK, "topo: %s", err.msg);
    for (int k = 0; k < n && !err.code; k++) {
        if (ord[k] == a->src) ia = k;
        if (ord[k] == b->src) ib = k;
    }
    TK_CHECK(ia >= 0 && ib >= 0 && ib < ia, "seq 0 at %d, seq 1 at %d: want seq 0 first", ib, ia);
    mg_graph_free(g);
}

/* Pipeline stages' priorities: every task of an earlier event outranks every task of a
 * later one, the level orders an event's tasks, the top (transfers') stays free; with
 * a range narrower than the events, earlier never ranks below later. */
static void test_event_priority(void) {
    static const int range[][2] = {{-5, 5}, {0, 10}, {INT32_MIN, INT32_MAX}, {-100000, 100000}};
    for (int r = 0; r < 4; r++) {
        int lo = range[r][0], hi = range[r][1], n_ev = 32;
        bool wide = (long long)hi - lo >= (long long)n_ev * MG_PP_PRIO_LEVELS;
        int prev_lowest = 0;
        for (int i = 0; i < n_ev; i++) {
            int top = mg_starpu_event_priority(lo, hi, n_ev, i, MG_PP_PRIO_LEVELS - 1);
            int low = mg_starpu_event_priority(lo, hi, n_ev, i, 0);
            TK_CHECK(low >= lo && top < hi && low <= top, "range [%d, %d] event %d: [%d, %d]", lo, hi, i, low, top);
            if (wide) TK_CHECK(low < top, "range [%d, %d] event %d: levels collapse", lo, hi, i);
            if (i > 0)
                TK_CHECK(wide ? top < prev_lowest : top <= prev_lowest,
                         "range [%d, %d]: event %d (top %d) not below event %d (lowest %d)", lo, hi, i, top, i - 1,
                         prev_lowest);
            prev_lowest = low;
        }
    }
}

/* Within a group, the graph's order must follow seq: here the TP collective with
 * seq 1 is an input of the one with seq 0. */
static void test_comm_order(void) {
    mg_graph *g = mg_graph_new();
    int64_t sh[1] = {16};
    mg_tensor *x = mg_input(g, "x", MG_F32, 1, sh);
    mg_tensor *y = mg_allreduce(g, mg_allreduce(g, x, MG_GROUP_TP, 1, MG_REDUCE_SUM, 1), MG_GROUP_TP, 1,
                                MG_REDUCE_SUM, 0);
    y->persistent = true;
    small s;
    mg_error err = {0};
    int rc = small_new(&s, g, &err);
    TK_CHECK(rc == MG_ERR_INVALID && !s.e && strstr(err.msg, "seq"), "want MG_ERR_INVALID about seq, got %d: %s", rc,
             err.msg);
    small_free(&s);
    mg_graph_free(g);
}

/* A kernel failing inside a StarPU task: the first error comes back from
 * mg_engine_run with the kernel's message, later tasks are skipped, and the engine
 * runs normally once the input is fixed. */
static void test_kernel_error(void) {
    mg_graph *g = mg_graph_new();
    int64_t sl[2] = {4, 8}, st[1] = {4};
    mg_tensor *logits = mg_input(g, "logits", MG_F32, 2, sl);
    mg_tensor *tgt = mg_input(g, "targets", MG_I32, 1, st);
    mg_tensor *loss = mg_cross_entropy(g, mg_scale(g, logits, 1.0f), tgt, -100);
    mg_tensor *y = mg_scale(g, loss, 2.0f);
    if (!y) {
        TK_CHECK(false, "build: %s", mg_graph_error(g)->msg);
        mg_graph_free(g);
        return;
    }
    y->persistent = true;
    small s;
    mg_error err = {0};
    int rc = small_new(&s, g, &err);
    TK_CHECK(rc == MG_OK, "setup: %s", err.msg);
    if (!rc) {
        int32_t bad[4] = {1, 2, 100, 3}, good[4] = {1, 2, 7, 3};
        tk_rng r1 = {5}, r2 = {5};
        tk_fill(&r1, mg_storage_data(s.ref, logits), 32, -1, 1);
        tk_fill(&r2, mg_storage_data(s.sp, logits), 32, -1, 1);
        memcpy(mg_storage_data(s.sp, tgt), bad, sizeof bad);
        mg_exec_info info = info_at(0);
        rc = mg_engine_run(s.e, &info, &err);
        TK_CHECK(rc == MG_ERR_INVALID && strstr(err.msg, "cross_entropy") && strstr(err.msg, "100"),
                 "want the kernel's error, got %d: %s", rc, err.msg);
        mg_engine_stats stt;
        mg_engine_get_stats(s.e, &stt);
        /* scale, xent_count and the failing cross_entropy ran; the last scale did not */
        TK_CHECK(stt.tasks == 3, "tasks after the failure should be skipped: %lld ran", (long long)stt.tasks);
        mg_error_clear(&err);
        memcpy(mg_storage_data(s.sp, tgt), good, sizeof good);
        memcpy(mg_storage_data(s.ref, tgt), good, sizeof good);
        rc = mg_engine_run(s.e, &info, &err);
        TK_CHECK(rc == MG_OK, "run after fixing the targets: %s", err.msg);
        TK_CHECK(mg_exec_reference(g, s.ref, &info, &err) == MG_OK, "reference: %s", err.msg);
        TK_CHECK(memcmp(mg_storage_data(s.ref, y), mg_storage_data(s.sp, y), 4) == 0, "loss differs");
    }
    small_free(&s);
    mg_graph_free(g);
}

/* A real model: GPT-2 training step (2 layers, 2 micro-batches, dropout on). The
 * engine must reproduce the reference's bits for every parameter, moment and the
 * loss, step after step. */
static void test_gpt2(void) {
    mg_step_config c = tk_small_gpt(2, 64, 4, 32, 128, 2, 2); /* dropout 0.1 */
    c.model.max_position = 64;
    c.optim.lr = (mg_lr_schedule){.lr = 1e-3f, .min_lr = 1e-4f, .warmup_steps = 0, .decay_steps = 10,
                                  .style = MG_LR_COSINE};
    mg_step st;
    mg_error err = {0};
    int rc = mg_step_build(&c, &st, &err);
    TK_CHECK(rc == MG_OK, "gpt2 step: %s", err.msg);
    if (rc) return;
    model m = {.g = st.g, .x = NULL, .loss = st.loss};
    runner ref = {0}, sp = {0};
    mg_engine *e = NULL;
    mg_memplan *plan = NULL;
    mg_storage_options so = {.n_micro = st.n_micro, .n_slots = 2}; /* two micro-batches in flight on the engine */
    if (mg_memplan_build(st.g, true, &plan, &err) || mg_storage_new_ex(st.g, plan, &so, &ref.st, &err) ||
        mg_storage_new_ex(st.g, plan, &so, &sp.st, &err) || mg_storage_init(ref.st, 99, &err) ||
        mg_storage_init(sp.st, 99, &err)) {
        TK_CHECK(false, "setup: %s", err.msg);
        goto out;
    }
    ref.plan = plan; /* same_state reads the plan through runner a */
    char summ[200];
    mg_memplan_summary(plan, summ, sizeof summ);
    printf("gpt2: %d nodes; %s\n", mg_graph_n_nodes(st.g), summ);
    TK_CHECK(plan->transient_bytes < plan->unshared_bytes, "no activation reuse in gpt2");
    tk_rng rng = {11};
    for (int k = 0; k < st.n_micro; k++) {
        int32_t *tok = mg_storage_data_mb(ref.st, st.tokens, k), *tgt = mg_storage_data_mb(ref.st, st.targets, k);
        for (int64_t i = 0; i < mg_numel(st.tokens); i++) {
            tok[i] = (int32_t)tk_uniform(&rng, 0, 127.99f);
            tgt[i] = (int32_t)tk_uniform(&rng, 0, 127.99f);
        }
        memcpy(mg_storage_data_mb(sp.st, st.tokens, k), tok, (size_t)mg_numel(st.tokens) * 4);
        memcpy(mg_storage_data_mb(sp.st, st.targets, k), tgt, (size_t)mg_numel(st.targets) * 4);
    }
    int32_t *pos_r = mg_storage_data(ref.st, st.positions), *pos_s = mg_storage_data(sp.st, st.positions);
    for (int64_t i = 0; i < mg_numel(st.positions); i++) pos_r[i] = pos_s[i] = (int32_t)i;
    rc = mg_engine_new(st.g, sp.st, NULL, &e, &err);
    TK_CHECK(rc == MG_OK, "engine: %s", err.msg);
    for (int it = 0; it < 2 && !rc; it++) {
        mg_exec_info info = info_at(it);
        info.n_micro = st.n_micro;
        rc = mg_exec_reference(st.g, ref.st, &info, &err);
        TK_CHECK(rc == MG_OK, "reference step %d: %s", it, err.msg);
        if (!rc) rc = mg_engine_run(e, &info, &err);
        TK_CHECK(rc == MG_OK, "engine step %d: %s", it, err.msg);
        if (rc) break;
        char what[32];
        snprintf(what, sizeof what, "gpt2 step %d", it);
        same_state(what, &m, &ref, &sp);
        mg_engine_stats stt;
        mg_engine_get_stats(e, &stt);
        printf("%s: loss %.6f, %lld tasks, %.1f ms, idle %.2f\n", what, *(float *)mg_storage_data(sp.st, st.loss),
               (long long)stt.tasks, stt.wall_s * 1e3, stt.idle_fraction);
    }
out:
    mg_engine_free(e);
    mg_storage_free(ref.st);
    mg_storage_free(sp.st);
    mg_memplan_free(plan);
    mg_step_release(&st);
}

int main(int argc, char **argv) {
    static const tk_case cases[] = {
        {"reference", test_reference},         {"one_worker", test_one_worker}, {"policies", test_policies},
        {"repeat_stats", test_repeat_and_stats}, {"many_buffers", test_many_buffers}, {"bad_policy", test_bad_policy},
        {"two_engines", test_two_engines},       {"unsupported", test_unsupported},
        {"collectives", test_collectives},       {"comm_order", test_comm_order},
        {"kernel_error", test_kernel_error},     {"gpt2", test_gpt2},
        {"event_priority", test_event_priority}, {"comm_chain", test_comm_chain},
    };
    return tk_main(argc, argv, cases, (int)(sizeof cases / sizeof cases[0]));
}

/* Engine benchmarks: per-task overhead and scheduling policies.
 *
 *   bench_engine overhead [chains] [len]   tiny ops: reference vs StarPU per node
 *   bench_engine policy [T] [H] [layers]   training step of an MLP (matmul-heavy)
 *                                          under each StarPU policy
 *   bench_engine gpt2 [L] [h] [s] [b]      GPT-2 training step under each policy
 *
 * Prints tables (medians over repetitions); asserts nothing. Timings on shared
 * machines move by 2x between runs: compare rows of one run only.
 * Environment: MG_STARPU_PAUSE=0|1|2 (see scheduler/starpu_runtime.c), STARPU_NCPU.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "mgraph/engine.h"
#include "mgraph/model.h"
#include "mgraph/ops.h"
#include "mgraph/train.h"
#include "ops/op.h" /* mg_op_cost: FLOPs per node */
#include "bench_util.h"

static double cpu_s(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + 1e-6 * (double)ru.ru_utime.tv_usec + (double)ru.ru_stime.tv_sec +
           1e-6 * (double)ru.ru_stime.tv_usec;
}

static int die(const char *what, const mg_error *err) {
    fprintf(stderr, "%s: %s\n", what, err->msg);
    return 1;
}

static double g_idle_cpu; /* cores busy while the engine waited between steps */
static double g_min;      /* fastest step of the last timing: robust to other load */

typedef struct setup {
    mg_graph *g;
    mg_memplan *plan;
    mg_storage *st;
} setup;

static int setup_new(setup *s, mg_graph *g, mg_error *err) {
    s->g = g;
    int rc = mg_memplan_build(g, true, &s->plan, err);
    if (!rc) rc = mg_storage_new(g, s->plan, &s->st, err);
    if (!rc) rc = mg_storage_init(s->st, 1, err);
    return rc;
}

static void setup_free(setup *s) {
    mg_storage_free(s->st);
    mg_memplan_free(s->plan);
    mg_graph_free(s->g);
}

/* Times `reps` steps of an engine; returns the median wall time and fills stats. */
static int time_engine(setup *s, const char *policy, int warmup, int reps, double *med, double *cpu_per_step,
                       mg_engine_stats *st, mg_error *err) {
    mg_engine *e = NULL;
    mg_engine_options opt = {.sched_policy = policy, .ncpus = 0, .use_priorities = true};
    int rc = mg_engine_new(s->g, s->st, &opt, &e, err);
    if (rc) return rc;
    double *t = malloc((size_t)reps * sizeof *t);
    mg_exec_info info = {.seed = 1, .iteration = 0, .training = true};
    for (int i = 0; i < warmup && !rc; i++) rc = mg_engine_run(e, &info, err);
    double c0 = cpu_s();
    for (int i = 0; i < reps && !rc; i++) {
        info.iteration = i;
        double t0 = bench_now_s();
        rc = mg_engine_run(e, &info, err);
        t[i] = bench_now_s() - t0;
    }
    *cpu_per_step = (cpu_s() - c0) / reps;
    if (!rc) *med = bench_median(t, reps);
    g_min = t[0]; /* sorted by bench_median() */
    mg_engine_get_stats(e, st);
    /* CPU the idle engine burns between steps (spinning workers unless paused) */
    double c1 = cpu_s(), w1 = bench_now_s();
    struct timespec nap = {0, 100000000};
    nanosleep(&nap, NULL);
    g_idle_cpu = (cpu_s() - c1) / (bench_now_s() - w1);
    free(t);
    mg_engine_free(e);
    return rc;
}

static int time_reference(setup *s, int reps, double *med, mg_error *err) {
    double *t = malloc((size_t)reps * sizeof *t);
    mg_exec_info info = {.seed = 1, .iteration = 0, .training = true};
    int rc = MG_OK;
    for (int i = 0; i < reps && !rc; i++) {
        double t0 = bench_now_s();
        rc = mg_exec_reference(s->g, s->st, &info, err);
        t[i] = bench_now_s() - t0;
    }
    if (!rc) *med = bench_median(t, reps);
    free(t);
    return rc;
}

/* Policies to time: $BENCH_POLICIES ("lws,eager"), else the defaults given. */
static size_t policy_list(const char **pol, size_t max, const char *dflt, char *buf, size_t len) {
    const char *env = getenv("BENCH_POLICIES");
    snprintf(buf, len, "%s", env && *env ? env : dflt);
    size_t n = 0;
    for (char *tok = strtok(buf, ","); tok && n < max; tok = strtok(NULL, ",")) pol[n++] = tok;
    return n;
}

/* `chains` independent chains of `len` scale ops on 16 floats: kernels take ~20 ns,
 * so the time per node is the executor's overhead. */
static int bench_overhead(int chains, int len) {
    mg_error err = {0};
    mg_graph *g = mg_graph_new();
    int64_t s16[1] = {16};
    for (int c = 0; c < chains; c++) {
        mg_scope_push(g, "c%d", c);
        mg_tensor *h = mg_input(g, "x", MG_F32, 1, s16);
        for (int k = 0; k < len; k++) h = mg_scale(g, h, 0.999f);
        h->persistent = true;
        mg_scope_pop(g);
    }
    if (mg_graph_error(g)->code) return die("build", mg_graph_error(g));
    setup s = {0};
    if (setup_new(&s, g, &err)) return die("setup", &err);
    int n = mg_graph_n_nodes(g);
    double ref;
    if (time_reference(&s, 21, &ref, &err)) return die("reference", &err);
    printf("overhead: %d chains x %d tiny scale ops = %d nodes\n", chains, len, n);
    printf("%-10s %12s %12s %14s %8s %12s\n", "executor", "step ms", "us/node", "cpu ms/step", "idle", "cores@rest");
    printf("%-10s %12.3f %12.3f %14s %8s\n", "reference", ref * 1e3, ref * 1e6 / n, "-", "-");
    const char *pol[16];
    char buf[256];
    size_t npol = policy_list(pol, 16, "eager,prio,lws,dmda", buf, sizeof buf);
    for (size_t p = 0; p < npol; p++) {
        double med, cpu;
        mg_engine_stats st;
        if (time_engine(&s, pol[p], 3, 21, &med, &cpu, &st, &err)) return die(pol[p], &err);
        printf("%-10s %12.3f %12.3f %14.3f %8.2f %12.2f\n", pol[p], med * 1e3, med * 1e6 / n, cpu * 1e3, st.idle_fraction,
               g_idle_cpu);
    }
    setup_free(&s);
    return 0;
}

/* Per-op time of one reference step (kernel by kernel on the calling thread): shows
 * whether a graph is really dominated by its matmuls. */
static void profile_ops(setup *s, double flops_total) {
    mg_node **ord;
    int n;
    mg_error err = {0};
    if (mg_graph_topo(s->g, &ord, &n, &err)) return;
    double t_op[MG_OP_COUNT] = {0}, f_op[MG_OP_COUNT] = {0};
    int c_op[MG_OP_COUNT] = {0};
    /* earliest finish of each node with unlimited workers: the critical path */
    double *finish = calloc((size_t)mg_graph_n_nodes(s->g) + 1, sizeof *finish), work = 0, cp = 0;
    if (!finish) return;
    void *ptrs[64];
    mg_exec_info info = {.seed = 1, .iteration = 0, .training = true};
    for (int k = 0; k < n; k++) {
        const mg_node *nd = ord[k];
        if (nd->n_in + nd->n_out > 64) {
            free(finish);
            return;
        }
        for (int i = 0; i < nd->n_in; i++) ptrs[i] = mg_storage_data(s->st, nd->in[i]);
        for (int o = 0; o < nd->n_out; o++) ptrs[nd->n_in + o] = mg_storage_data(s->st, nd->out[o]);
        mg_kernel_args a = {.node = nd, .in = ptrs, .out = ptrs + nd->n_in, .info = &info};
        double t0 = bench_now_s();
        if (mg_op_def_get(nd->op)->cpu(&a, &err)) {
            free(finish);
            return;
        }
        double dt = bench_now_s() - t0, start = 0;
        t_op[nd->op] += dt;
        for (int i = 0; i < nd->n_in; i++)
            if (nd->in[i]->src && finish[nd->in[i]->src->id] > start) start = finish[nd->in[i]->src->id];
        finish[nd->id] = start + dt;
        work += dt;
        if (finish[nd->id] > cp) cp = finish[nd->id];
        double f, b;
        mg_op_cost(nd, &f, &b);
        f_op[nd->op] += f;
        c_op[nd->op]++;
    }
    printf("%-16s %6s %10s %10s %8s\n", "op", "nodes", "ms", "GFLOP/s", "flop %");
    for (int op = 0; op < MG_OP_COUNT; op++)
        if (c_op[op])
            printf("%-16s %6d %10.2f %10.1f %8.1f\n", mg_op_name((mg_op)op), c_op[op], t_op[op] * 1e3,
                   t_op[op] > 0 ? f_op[op] / t_op[op] * 1e-9 : 0, 100 * f_op[op] / flops_total);
    printf("work %.2f ms, critical path %.2f ms: at most %.2fx from more workers\n", work * 1e3, cp * 1e3,
           cp > 0 ? work / cp : 0);
    free(finish);
}

/* MLP training step: layers x (layernorm, linear HxH (matmul), bias, gelu), residual,
 * mean-square loss, backward, AdamW. Matmuls are T x H x H. */
static int bench_policy(int64_t T, int64_t H, int layers) {
    mg_error err = {0};
    mg_graph *g = mg_graph_new();
    int64_t sx[2] = {T, H}, sw[2] = {H, H}, sb[1] = {H};
    mg_tensor *h = mg_input(g, "x", MG_F32, 2, sx);
    for (int l = 0; l < layers; l++) {
        mg_scope_push(g, "l%d", l);
        mg_tensor *w1 = mg_param(g, "w1", 2, sw, (mg_init){MG_INIT_NORMAL, 0.02f});
        mg_tensor *w2 = mg_param(g, "w2", 2, sw, (mg_init){MG_INIT_NORMAL, 0.02f});
        mg_tensor *b = mg_param(g, "b", 1, sb, (mg_init){MG_INIT_ZEROS, 0});
        mg_tensor *lw = mg_param(g, "ln.w", 1, sb, (mg_init){MG_INIT_ONES, 0});
        mg_tensor *lb = mg_param(g, "ln.b", 1, sb, (mg_init){MG_INIT_ZEROS, 0});
        mg_tensor *x = mg_layernorm(g, h, lw, lb, 1e-5f);
        /* two parallel branches so that 2 workers have independent matmuls */
        mg_tensor *a = mg_gelu(g, mg_linear(g, x, w1, b));
        mg_tensor *c = mg_linear(g, x, w2, NULL);
        h = mg_add(g, h, mg_mul(g, a, c));
        mg_scope_pop(g);
    }
    mg_tensor *loss = mg_mean(g, mg_mul(g, h, h), MG_ALL_AXES, false);
    if (!loss) return die("build", mg_graph_error(g));
    loss->persistent = true;
    mg_adamw_config cfg = mg_adamw_defaults();
    cfg.lr = (mg_lr_schedule){.lr = 1e-3f, .min_lr = 1e-4f, .warmup_steps = 10, .decay_steps = 100, .style = MG_LR_COSINE};
    mg_optimizer_outputs oo;
    if (mg_graph_backward(g, loss, &err) || mg_graph_add_adamw(g, &cfg, &oo, &err)) return die("train", &err);
    setup s = {0};
    if (setup_new(&s, g, &err)) return die("setup", &err);
    double flops = 0;
    for (int i = 0; i < mg_graph_n_nodes(g); i++) {
        double f, b;
        mg_op_cost(mg_graph_node(g, i), &f, &b);
        flops += f;
    }
    char summ[200];
    mg_memplan_summary(s.plan, summ, sizeof summ);
    printf("policy: MLP T=%lld H=%lld layers=%d: %d nodes, %.2f GFLOP/step; %s\n", (long long)T, (long long)H, layers,
           mg_graph_n_nodes(g), flops * 1e-9, summ);
    if (getenv("BENCH_PROFILE")) profile_ops(&s, flops);
    double ref;
    if (time_reference(&s, 5, &ref, &err)) return die("reference", &err);
    printf("%-10s %10s %10s %10s %12s %8s %12s\n", "policy", "step ms", "min ms", "GFLOP/s", "cpu ms/step", "idle",
           "cores@rest");
    printf("%-10s %10.2f %10s %10.1f %12s %8s   (calling thread, OpenBLAS threads as set)\n", "reference", ref * 1e3,
           "-", flops / ref * 1e-9, "-", "-");
    const char *pol[16];
    char buf[256];
    size_t npol = policy_list(pol, 16, "eager,prio,lws,ws,dmda,dmdas", buf, sizeof buf);
    for (size_t p = 0; p < npol; p++) {
        double med, cpu;
        mg_engine_stats st;
        if (time_engine(&s, pol[p], 5, 25, &med, &cpu, &st, &err)) return die(pol[p], &err);
        printf("%-10s %10.2f %10.2f %10.1f %12.2f %8.2f %12.2f\n", pol[p], med * 1e3, g_min * 1e3, flops / med * 1e-9,
               cpu * 1e3, st.idle_fraction, g_idle_cpu);
    }
    setup_free(&s);
    return 0;
}

/* GPT-2 training step (the model of models/), tokens random: each policy's step time. */
static int bench_gpt2(int layers, int hidden, int seq, int mb) {
    mg_step_config c = {0};
    c.model = mg_gpt_defaults();
    c.model.num_layers = layers;
    c.model.hidden = hidden;
    c.model.ffn_hidden = 4 * hidden;
    c.model.heads = hidden / 64 > 0 ? hidden / 64 : 1;
    c.model.seq_length = seq;
    c.model.max_position = seq;
    c.model.vocab = 8192;
    c.micro_batch = mb;
    c.n_micro = 1;
    c.training = true;
    c.optim = mg_adamw_defaults();
    mg_step st;
    mg_error err = {0};
    if (mg_step_build(&c, &st, &err)) return die("gpt2", &err);
    setup s = {.g = st.g};
    if (mg_memplan_build(st.g, true, &s.plan, &err) || mg_storage_new(st.g, s.plan, &s.st, &err) ||
        mg_storage_init(s.st, 1, &err))
        return die("setup", &err);
    int32_t *pos = mg_storage_data(s.st, st.positions);
    for (int i = 0; i < seq; i++) pos[i] = i;
    int32_t *tok = mg_storage_data(s.st, st.tokens), *tgt = mg_storage_data(s.st, st.targets);
    for (int64_t i = 0; i < mg_numel(st.tokens); i++) {
        tok[i] = (int32_t)((i * 7919) % 8192);
        tgt[i] = (int32_t)((i * 104729) % 8192);
    }
    double flops = mg_gpt_flops(&c.model, mb);
    if (getenv("BENCH_PROFILE")) {
        double f_all = 0;
        for (int i = 0; i < mg_graph_n_nodes(st.g); i++) {
            double f, b;
            mg_op_cost(mg_graph_node(st.g, i), &f, &b);
            f_all += f;
        }
        profile_ops(&s, f_all);
    }
    char summ[200];
    mg_memplan_summary(s.plan, summ, sizeof summ);
    printf("gpt2: L=%d h=%d s=%d b=%d: %d nodes, %.2f model GFLOP/step; %s\n", layers, hidden, seq, mb,
           mg_graph_n_nodes(st.g), flops * 1e-9, summ);
    double ref;
    if (time_reference(&s, 3, &ref, &err)) return die("reference", &err);
    printf("%-10s %10s %10s %10s %12s %8s\n", "policy", "step ms", "min ms", "GFLOP/s", "cpu ms/step", "idle");
    printf("%-10s %10.2f %10s %10.1f %12s %8s\n", "reference", ref * 1e3, "-", flops / ref * 1e-9, "-", "-");
    const char *pol[16];
    char buf[256];
    size_t npol = policy_list(pol, 16, "eager,prio,lws,ws,dmda,dmdas", buf, sizeof buf);
    for (size_t p = 0; p < npol; p++) {
        double med, cpu;
        mg_engine_stats es;
        if (time_engine(&s, pol[p], 3, 9, &med, &cpu, &es, &err)) return die(pol[p], &err);
        printf("%-10s %10.2f %10.2f %10.1f %12.2f %8.2f\n", pol[p], med * 1e3, g_min * 1e3, flops / med * 1e-9,
               cpu * 1e3, es.idle_fraction);
    }
    mg_storage_free(s.st);
    mg_memplan_free(s.plan);
    mg_step_release(&st);
    return 0;
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "all";
    int rc = 0;
    if (!strcmp(mode, "overhead") || !strcmp(mode, "all"))
        rc |= bench_overhead(argc > 2 && strcmp(mode, "all") ? atoi(argv[2]) : 16,
                             argc > 3 && strcmp(mode, "all") ? atoi(argv[3]) : 64);
    if (!strcmp(mode, "policy") || !strcmp(mode, "all"))
        rc |= bench_policy(argc > 2 && strcmp(mode, "all") ? atoll(argv[2]) : 256,
                           argc > 3 && strcmp(mode, "all") ? atoll(argv[3]) : 512,
                           argc > 4 && strcmp(mode, "all") ? atoi(argv[4]) : 4);
    if (!strcmp(mode, "gpt2"))
        rc |= bench_gpt2(argc > 2 ? atoi(argv[2]) : 4, argc > 3 ? atoi(argv[3]) : 256, argc > 4 ? atoi(argv[4]) : 256,
                         argc > 5 ? atoi(argv[5]) : 4);
    return rc;
}

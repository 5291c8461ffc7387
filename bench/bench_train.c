/* Training-step throughput of the GPT-2 step graph on the StarPU engine, against
 * OpenBLAS sgemm on the model's own GEMM shapes in the same process.
 *
 *   bench_train [reps] [model] [profile]
 *                  model: all (default) | 124m | default; "profile" adds, per model,
 *                  the serial time of each op kind over one step (kernels called
 *                  one by one on one thread, OpenBLAS single-threaded) and the
 *                  step's critical path: where the time goes, and how much two
 *                  workers can overlap at best.
 *
 * Models:
 *   124m     GPT-2 124M: 12 layers, hidden 768, 12 heads, ffn 3072, seq 64, 1024
 *            positions, GPT-2's BPE vocabulary 50257 padded to 50304 as Megatron
 *            pads it; micro-batch 4, global batch 4.
 *   default  mgraph-run's default model (tools/run_config.c): 4 layers, hidden 256,
 *            4 heads, seq 128, micro-batch 4, global batch 8 (2 micro-batches).
 *
 * Per model: build the step graph (training, dropout 0.1), memory plan with reuse,
 * StarPU engine with all workers and the default policy, 2 warm-up steps, then `reps`
 * timed repetitions of k steps (k = 1 for 124m, 3 for default); medians. Reported:
 * tokens/s, model GFLOP/s (mg_gpt_flops / step time), the engine's idle fraction
 * (mg_engine_get_stats, median over timed steps), the reference executor's time for
 * the same steps (one thread, interleaved with the engine's repetitions so both see
 * the same machine load) and OpenBLAS sgemm GFLOP/s on the model's linear-layer GEMMs.
 *
 * sgemm baseline: the QKV, attention projection, fc1, fc2 and logits GEMMs for
 * M = seq * micro-batch tokens, each in the three forms a training step runs
 * (forward x W^T = NT, input gradient dY W = NN, weight gradient dY^T X = TN), with as
 * many threads as the engine has workers, each thread running single-threaded sgemm
 * on its own buffers at the same time. That is what the engine's workers do (StarPU
 * sets OpenBLAS to one thread), including the contention for shared caches and memory
 * bandwidth; a single-threaded rate times the worker count would overstate the
 * attainable peak. The single-threaded rate is printed too. The mix rate is the
 * model's linear-layer FLOPs over their summed time (FLOP-weighted), the ceiling
 * for a step made only of those GEMMs; ratio = model GFLOP/s / mix GFLOP/s. The model
 * also runs attention, norms, GELU, dropout, cross-entropy and AdamW, which count no
 * or few FLOPs in mg_gpt_flops but take time, so the ratio is below 1 even for a
 * perfect scheduler.
 *
 * Environment: OPENBLAS_CORETYPE picks OpenBLAS's kernels (the corename in effect is
 * printed); STARPU_NCPU, STARPU_SCHED as for mgraph-run. Asserts nothing.
 */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cblas.h>

#include "mgraph/engine.h"
#include "mgraph/model.h"
#include "mgraph/plan.h"
#include "bench_util.h"
#include "ops/op.h" /* profile: kernels one by one, mg_op_cost */

/* OpenBLAS extensions (declared here: not every cblas.h has them) */
void openblas_set_num_threads(int);
int openblas_get_num_threads(void);
char *openblas_get_corename(void);
char *openblas_get_config(void);

typedef struct bench_model {
    const char *name;
    mg_step_config cfg;
    int steps_per_rep;
} bench_model;

static bench_model model_124m(void) {
    bench_model m = {.name = "gpt2-124M (V=50304)", .steps_per_rep = 1};
    m.cfg.model = mg_gpt_defaults();
    m.cfg.model.num_layers = 12;
    m.cfg.model.hidden = 768;
    m.cfg.model.heads = 12;
    m.cfg.model.ffn_hidden = 3072;
    m.cfg.model.seq_length = 64;
    m.cfg.model.max_position = 1024;
    m.cfg.model.vocab = 50304; /* mg_vocab_padded(50257, 128, 1) */
    m.cfg.micro_batch = 4;
    m.cfg.n_micro = 1;
    return m;
}

static bench_model model_default(void) {
    bench_model m = {.name = "mgraph-run default", .steps_per_rep = 3};
    m.cfg.model = mg_gpt_defaults(); /* 4 layers, hidden 256, 4 heads, seq 128, V 256 */
    m.cfg.model.ffn_hidden = 4 * m.cfg.model.hidden;
    m.cfg.model.max_position = m.cfg.model.seq_length;
    m.cfg.micro_batch = 4;
    m.cfg.n_micro = 2;
    return m;
}

/* ---- per-op profile ---------------------------------------------------------------------- */
static int fill_inputs(mg_step *st, mg_storage *sto, int seq) {
    uint64_t x = 88172645463325252ull; /* xorshift bytes as tokens */
    for (int k = 0; k < st->n_micro; k++) {
        int32_t *tok = mg_storage_data_mb(sto, st->tokens, k), *lab = mg_storage_data_mb(sto, st->targets, k);
        for (int64_t i = 0; i < mg_numel(st->tokens); i++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            tok[i] = (int32_t)(x & 255);
            lab[i] = (int32_t)((x >> 8) & 255);
        }
    }
    int32_t *pos = mg_storage_data(sto, st->positions);
    for (int t = 0; t < seq; t++) pos[t] = t;
    return 0;
}

/* Serial time per op kind (mean of 3 steps after one warm-up), and the critical path:
 * the earliest finish of the last node with unlimited workers, each node taking its
 * serial time. work / critical path bounds the speedup from more workers. */
static int profile_step(bench_model *bm, mg_error *err) {
    mg_step_config c = bm->cfg;
    c.training = true;
    c.optim = mg_adamw_defaults();
    mg_step st;
    mg_memplan *plan = NULL;
    mg_storage *sto = NULL;
    int rc = mg_step_build(&c, &st, err);
    if (rc) return rc;
    rc = mg_memplan_build(st.g, true, &plan, err);
    mg_storage_options so = {.n_micro = c.n_micro, .n_slots = MG_PLAN_DEFAULT_SLOTS};
    if (!rc) rc = mg_storage_new_ex(st.g, plan, &so, &sto, err);
    if (!rc) rc = mg_storage_init(sto, 1234, err);
    mg_node **ord = NULL;
    int n = 0;
    if (!rc) rc = mg_graph_topo(st.g, &ord, &n, err);
    double t_op[MG_OP_COUNT] = {0}, f_op[MG_OP_COUNT] = {0};
    int c_op[MG_OP_COUNT] = {0};
    double *node_t = calloc((size_t)mg_graph_n_nodes(st.g) + 1, sizeof *node_t);
    double *finish = calloc((size_t)mg_graph_n_nodes(st.g) + 1, sizeof *finish);
    int saved = openblas_get_num_threads();
    openblas_set_num_threads(1);
    if (!rc) {
        fill_inputs(&st, sto, c.model.seq_length);
        void *ptrs[256];
        for (int pass = 0; pass < 4 && !rc; pass++) {
            mg_exec_info step = {.seed = 1234, .iteration = pass, .training = true, .n_micro = c.n_micro};
            /* the schedule of mg_exec_reference: per-micro-batch nodes per instance, then the rest */
            for (int mb = -1; mb < c.n_micro && !rc; mb++)
                for (int k = 0; k < n && !rc; k++) {
                    const mg_node *nd = ord[k];
                    int inst = mb + 1 < c.n_micro ? mb + 1 : -1; /* -1 last: the once-per-step part */
                    if ((inst >= 0) != (nd->mb >= 0)) continue;
                    if (nd->n_in + nd->n_out > 256) {
                        rc = mg_error_set(err, MG_ERR_UNSUPPORTED, "profile: node with %d buffers", nd->n_in + nd->n_out);
                        break;
                    }
                    mg_exec_info info = mg_exec_instance(&step, inst);
                    for (int i = 0; i < nd->n_in; i++) ptrs[i] = mg_storage_data_mb(sto, nd->in[i], inst);
                    for (int o = 0; o < nd->n_out; o++) ptrs[nd->n_in + o] = mg_storage_data_mb(sto, nd->out[o], inst);
                    mg_kernel_args a = {.node = nd, .in = ptrs, .out = ptrs + nd->n_in, .info = &info};
                    double t0 = bench_now_s();
                    rc = mg_op_def_get(nd->op)->cpu(&a, err);
                    if (pass > 0) node_t[nd->id] += (bench_now_s() - t0) / 3;
                }
        }
    }
    openblas_set_num_threads(saved);
    if (!rc) {
        double work = 0, cp = 0, flops = 0;
        for (int k = 0; k < n; k++) {
            const mg_node *nd = ord[k];
            double start = 0, f, b;
            for (int i = 0; i < nd->n_in; i++)
                if (nd->in[i]->src && finish[nd->in[i]->src->id] > start) start = finish[nd->in[i]->src->id];
            finish[nd->id] = start + node_t[nd->id];
            if (finish[nd->id] > cp) cp = finish[nd->id];
            work += node_t[nd->id];
            mg_op_cost(nd, &f, &b);
            if (nd->mb >= 0) f *= c.n_micro; /* node_t is per step: n_micro calls */
            t_op[nd->op] += node_t[nd->id];
            f_op[nd->op] += f;
            flops += f;
            c_op[nd->op]++;
        }
        printf("  profile (serial, one thread): %-14s %6s %9s %7s %9s %7s\n", "op", "nodes", "ms", "time %", "GFLOP/s",
               "flop %");
        for (int op = 0; op < MG_OP_COUNT; op++)
            if (c_op[op] && t_op[op] > 0.005 * work)
                printf("  %30s %-14s %6d %9.2f %7.1f %9.1f %7.1f\n", "", mg_op_name((mg_op)op), c_op[op], t_op[op] * 1e3,
                       100 * t_op[op] / work, f_op[op] / t_op[op] * 1e-9, 100 * f_op[op] / flops);
        printf("  work %.1f ms, critical path %.1f ms: at most %.2fx from more workers (2 workers: >= %.1f ms)\n",
               work * 1e3, cp * 1e3, work / cp, fmax(cp, work / 2) * 1e3);
    }
    free(node_t);
    free(finish);
    mg_storage_free(sto);
    mg_memplan_free(plan);
    mg_step_release(&st);
    return rc;
}

/* ---- the training step on the engine ------------------------------------------------------ */
typedef struct step_result {
    double step_s, min_s, tokens_per_s, gflops, idle;
    double ref_s;            /* reference executor (one thread, OpenBLAS single-threaded), same steps */
    int workers, split;      /* split: sub-batches per micro-batch */
    int64_t tasks;
    size_t persistent_bytes, activation_bytes;
} step_result;

/* Sub-batches per micro-batch, as mgraph-run picks them (mg_plan_micro_batch_split) for
 * the engine's workers; BENCH_SPLIT=N forces N (1: whole micro-batches). 0 and a message
 * for a split the plan checks refuse. */
static int bench_split(const mg_step_config *c, mg_error *err) {
    mg_plan p;
    mg_plan_defaults(&p);
    if (getenv("BENCH_SPLIT")) p.micro_batch_split = atoi(getenv("BENCH_SPLIT"));
    if (mg_plan_check(&p, 1, err) || mg_plan_check_split(&p, c->micro_batch, false, err)) return 0;
    int workers = getenv("STARPU_NCPU") ? atoi(getenv("STARPU_NCPU")) : (int)sysconf(_SC_NPROCESSORS_ONLN);
    return mg_plan_micro_batch_split(&p, c->micro_batch, c->n_micro, workers, false);
}

static int time_step(bench_model *bm, int reps, int slots, step_result *res, mg_error *err) {
    mg_step_config c = bm->cfg;
    int split = bench_split(&c, err);
    if (!split) return err->code;
    c.micro_batch /= split;
    c.n_micro *= split;
    slots *= split;
    res->split = split;
    c.training = true;
    c.optim = mg_adamw_defaults();
    c.optim.lr = (mg_lr_schedule){.lr = 1e-4f, .min_lr = 1e-5f, .warmup_steps = 0, .decay_steps = 1000,
                                  .style = MG_LR_COSINE};
    mg_step st;
    mg_memplan *plan = NULL;
    mg_storage *sto = NULL;
    mg_engine *eng = NULL;
    int rc = mg_step_build(&c, &st, err);
    if (rc) return rc;
    rc = mg_memplan_build(st.g, true, &plan, err);
    mg_storage_options so = {.n_micro = c.n_micro, .n_slots = slots};
    if (!rc) rc = mg_storage_new_ex(st.g, plan, &so, &sto, err);
    if (!rc) rc = mg_storage_init(sto, 1234, err);
    if (!rc) {
        fill_inputs(&st, sto, c.model.seq_length);
        mg_engine_options eo = {.sched_policy = NULL, .ncpus = 0, .use_priorities = true};
        rc = mg_engine_new(st.g, sto, &eo, &eng, err);
    }
    double *t = calloc((size_t)reps, sizeof *t), *tr = calloc((size_t)reps, sizeof *tr), *idle = calloc((size_t)reps * bm->steps_per_rep, sizeof *idle);
    int64_t it = 0;
    mg_engine_stats es = {0};
    for (int w = 0; w < 2 && !rc; w++, it++) {
        mg_exec_info info = {.seed = 1234, .iteration = it, .training = true, .n_micro = c.n_micro,
                             .mb_split = split};
        rc = mg_engine_run(eng, &info, err);
    }
    int n_idle = 0;
    for (int r = 0; r < reps && !rc; r++) {
        double t0 = bench_now_s();
        for (int k = 0; k < bm->steps_per_rep && !rc; k++, it++) {
            mg_exec_info info = {.seed = 1234, .iteration = it, .training = true, .n_micro = c.n_micro,
                             .mb_split = split};
            rc = mg_engine_run(eng, &info, err);
            mg_engine_get_stats(eng, &es);
            idle[n_idle++] = es.idle_fraction;
        }
        t[r] = (bench_now_s() - t0) / bm->steps_per_rep;
        /* the same steps on the reference executor, interleaved so that both see the
         * same load; OpenBLAS is single-threaded while the engine exists */
        t0 = bench_now_s();
        for (int k = 0; k < bm->steps_per_rep && !rc; k++) {
            mg_exec_info info = {.seed = 1234, .iteration = it - bm->steps_per_rep + k, .training = true,
                                 .n_micro = c.n_micro, .mb_split = split};
            rc = mg_exec_reference(st.g, sto, &info, err);
        }
        tr[r] = (bench_now_s() - t0) / bm->steps_per_rep;
    }
    if (!rc) {
        float loss = *(float *)mg_storage_data(sto, st.loss);
        if (!isfinite(loss)) fprintf(stderr, "warning: %s: loss %g\n", bm->name, loss);
        int64_t samples = (int64_t)c.micro_batch * c.n_micro;
        res->step_s = bench_median(t, reps);
        res->min_s = t[0]; /* sorted by bench_median() */
        res->ref_s = bench_median(tr, reps);
        res->tokens_per_s = (double)samples * c.model.seq_length / res->step_s;
        res->gflops = mg_gpt_flops(&c.model, samples) / res->step_s * 1e-9;
        res->idle = bench_median(idle, n_idle);
        res->workers = es.n_workers;
        res->tasks = es.tasks;
        res->persistent_bytes = plan->persistent_bytes;
        res->activation_bytes = (double)plan->slot_bytes * slots + (double)plan->step_bytes;
    }
    free(t);
    free(tr);
    free(idle);
    mg_engine_free(eng);
    mg_storage_free(sto);
    mg_memplan_free(plan);
    mg_step_release(&st);
    return rc;
}

/* ---- sgemm on the model's shapes ----------------------------------------------------------- */
typedef struct gemm {
    const char *what;
    char form[3];           /* NT, NN, TN */
    int M, N, K;
} gemm;

/* The linear layers of one micro-batch: out = x W^T (NT, M = T), dX = dY W (NN,
 * M = T, N = in, K = out), dW = dY^T X (TN, M = out, N = in, K = T). */
static int model_gemms(const mg_gpt_config *c, int T, gemm *g) {
    struct { const char *what; int out, in; } lin[] = {
        {"qkv", 3 * c->hidden, c->hidden},
        {"proj", c->hidden, c->hidden},
        {"fc1", c->ffn_hidden, c->hidden},
        {"fc2", c->hidden, c->ffn_hidden},
        {"logits", (int)c->vocab, c->hidden},
    };
    int n = 0;
    for (size_t i = 0; i < sizeof lin / sizeof *lin; i++) {
        g[n++] = (gemm){lin[i].what, "NT", T, lin[i].out, lin[i].in};
        g[n++] = (gemm){lin[i].what, "NN", T, lin[i].in, lin[i].out};
        g[n++] = (gemm){lin[i].what, "TN", lin[i].out, lin[i].in, T};
    }
    return n;
}

/* How often each GEMM runs per step: per layer for the blocks, once for logits. */
static double gemm_count(const gemm *g, const bench_model *bm) {
    return (strcmp(g->what, "logits") == 0 ? 1.0 : bm->cfg.model.num_layers) * bm->cfg.n_micro;
}

typedef struct gemm_job {
    const gemm *g;
    float *A, *B, *C;
    int iters;
    pthread_barrier_t *bar;
    double elapsed;
} gemm_job;

static void run_gemm(const gemm *g, const float *A, const float *B, float *C) {
    bool ta = g->form[0] == 'T', tb = g->form[1] == 'T';
    /* row-major, as ops/matmul.c: op(A) [M, K], op(B) [K, N] */
    int lda = ta ? g->M : g->K, ldb = tb ? g->K : g->N;
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, g->M, g->N, g->K, 1.0f,
                A, lda, B, ldb, 0.0f, C, g->N);
}

static void *gemm_thread(void *p) {
    gemm_job *j = p;
    run_gemm(j->g, j->A, j->B, j->C); /* warm */
    pthread_barrier_wait(j->bar);
    double t0 = bench_now_s();
    for (int i = 0; i < j->iters; i++) run_gemm(j->g, j->A, j->B, j->C);
    j->elapsed = bench_now_s() - t0;
    return NULL;
}

/* Aggregate GFLOP/s of `threads` threads each running the GEMM `iters` times on
 * private buffers (OpenBLAS single-threaded); median of 5. */
static double gemm_rate(const gemm *g, int threads) {
    double flops = 2.0 * g->M * g->N * g->K;
    int iters = (int)fmax(2, fmin(200, 2e8 / flops)); /* ~0.1 s per repetition at 20 GFLOP/s */
    gemm_job jobs[64];
    pthread_t th[64];
    pthread_barrier_t bar;
    size_t na = (size_t)g->M * g->K, nb = (size_t)g->K * g->N, nc = (size_t)g->M * g->N;
    for (int t = 0; t < threads; t++) {
        jobs[t] = (gemm_job){g, malloc(na * 4), malloc(nb * 4), malloc(nc * 4), iters, &bar, 0};
        for (size_t i = 0; i < na; i++) jobs[t].A[i] = (float)((i * 7 + t) % 13) * 0.01f - 0.06f;
        for (size_t i = 0; i < nb; i++) jobs[t].B[i] = (float)((i * 5 + t) % 11) * 0.01f - 0.05f;
    }
    double rate[5];
    for (int r = 0; r < 5; r++) {
        pthread_barrier_init(&bar, NULL, (unsigned)threads);
        for (int t = 0; t < threads; t++) pthread_create(&th[t], NULL, gemm_thread, &jobs[t]);
        double slowest = 0;
        for (int t = 0; t < threads; t++) {
            pthread_join(th[t], NULL);
            slowest = fmax(slowest, jobs[t].elapsed);
        }
        pthread_barrier_destroy(&bar);
        rate[r] = flops * iters * threads / slowest * 1e-9;
    }
    for (int t = 0; t < threads; t++) {
        free(jobs[t].A);
        free(jobs[t].B);
        free(jobs[t].C);
    }
    return bench_median(rate, 5);
}

typedef struct gemm_summary {
    double mix_concurrent, mix_single; /* GFLOP/s, FLOP-weighted over the step's GEMMs */
} gemm_summary;

static void bench_gemms(const bench_model *bm, int threads, bool verbose, gemm_summary *sum) {
    gemm g[16];
    int T = bm->cfg.model.seq_length * bm->cfg.micro_batch;
    int n = model_gemms(&bm->cfg.model, T, g);
    double fl = 0, tc = 0, ts = 0;
    int saved = openblas_get_num_threads();
    openblas_set_num_threads(1);
    if (verbose) printf("  %-7s %-4s %6s %6s %6s %8s %15s %12s\n", "gemm", "form", "M", "N", "K", "per step",
                        "GFLOP/s (thr)", "GFLOP/s 1t");
    for (int i = 0; i < n; i++) {
        double f = 2.0 * g[i].M * g[i].N * g[i].K * gemm_count(&g[i], bm);
        double rc = gemm_rate(&g[i], threads), r1 = gemm_rate(&g[i], 1);
        fl += f;
        tc += f / rc;
        ts += f / r1;
        if (verbose)
            printf("  %-7s %-4s %6d %6d %6d %8.0f %12.1f(%d) %12.1f\n", g[i].what, g[i].form, g[i].M, g[i].N, g[i].K,
                   gemm_count(&g[i], bm), rc, threads, r1);
    }
    openblas_set_num_threads(saved);
    sum->mix_concurrent = fl / tc;
    sum->mix_single = fl / ts;
}

int main(int argc, char **argv) {
    int reps = argc > 1 ? atoi(argv[1]) : 5;
    const char *which = argc > 2 ? argv[2] : "all";
    bool profile = argc > 3 && strcmp(argv[3], "profile") == 0;
    if (reps < 1 || (strcmp(which, "all") && strcmp(which, "124m") && strcmp(which, "default")) ||
        (argc > 3 && !profile)) {
        fprintf(stderr, "usage: bench_train [reps >= 1] [all|124m|default] [profile]\n");
        return 2;
    }
    /* micro-batches in flight (activation copies); BENCH_SLOTS=1 is Megatron's strict
     * forward-backward-per-micro-batch order */
    int slots = getenv("BENCH_SLOTS") ? atoi(getenv("BENCH_SLOTS")) : MG_PLAN_DEFAULT_SLOTS;
    if (slots < 1) slots = 1;
    const char *ct = getenv("OPENBLAS_CORETYPE");
    printf("OpenBLAS: core %s (OPENBLAS_CORETYPE=%s), config: %s; load average %.2f\n", openblas_get_corename(),
           ct ? ct : "unset", openblas_get_config(), bench_load1());
    bench_model models[2] = {model_124m(), model_default()};
    step_result res[2];
    gemm_summary gs[2];
    bool ran[2] = {false, false};
    for (int i = 0; i < 2; i++) {
        if (strcmp(which, "all") && strcmp(which, i == 0 ? "124m" : "default")) continue;
        bench_model *bm = &models[i];
        const mg_gpt_config *c = &bm->cfg.model;
        printf("\n%s: %d layers, hidden %d, heads %d, ffn %d, seq %d, vocab %lld, micro-batch %d x %d, %.1fM params, "
               "%.2f GFLOP/step\n",
               bm->name, c->num_layers, c->hidden, c->heads, c->ffn_hidden, c->seq_length, (long long)c->vocab,
               bm->cfg.micro_batch, bm->cfg.n_micro, (double)mg_gpt_num_params(c) / 1e6,
               mg_gpt_flops(c, (int64_t)bm->cfg.micro_batch * bm->cfg.n_micro) * 1e-9);
        fflush(stdout);
        mg_error err = {0};
        if (time_step(bm, reps, slots, &res[i], &err)) {
            fprintf(stderr, "%s: %s\n", bm->name, err.msg);
            return 1;
        }
        printf("  reference executor (1 thread) %.1f ms/step: engine speedup %.2fx\n", res[i].ref_s * 1e3,
               res[i].ref_s / res[i].step_s);
        if (res[i].split > 1)
            printf("  each micro-batch runs as %d sub-batches of %d (mg_plan_micro_batch_split; BENCH_SPLIT=1: whole)\n",
                   res[i].split, bm->cfg.micro_batch / res[i].split);
        printf("  step %.1f ms (median of %d x %d steps; fastest %.1f ms), %d workers, %lld tasks, params+state %.0f MiB, activations "
               "%.0f MiB\n",
               res[i].step_s * 1e3, reps, bm->steps_per_rep, res[i].min_s * 1e3, res[i].workers, (long long)res[i].tasks,
               res[i].persistent_bytes / 1048576.0, res[i].activation_bytes / 1048576.0);
        printf("  load average %.2f\n", bench_load1());
        bench_gemms(bm, res[i].workers, true, &gs[i]);
        if (profile && profile_step(bm, &err)) {
            fprintf(stderr, "%s: profile: %s\n", bm->name, err.msg);
            return 1;
        }
        ran[i] = true;
    }
    printf("\n| model | step ms | tokens/s | model GFLOP/s | sgemm mix GFLOP/s (%s, %d threads) | ratio | sgemm 1 thread "
           "| idle | reference 1 thread ms | speedup |\n|---|---|---|---|---|---|---|---|---|---|\n",
           openblas_get_corename(), ran[0] ? res[0].workers : res[1].workers);
    for (int i = 0; i < 2; i++)
        if (ran[i])
            printf("| %s | %.1f | %.0f | %.1f | %.1f | %.2f | %.1f | %.2f | %.1f | %.2f |\n", models[i].name,
                   res[i].step_s * 1e3, res[i].tokens_per_s, res[i].gflops, gs[i].mix_concurrent,
                   res[i].gflops / gs[i].mix_concurrent, gs[i].mix_single, res[i].idle, res[i].ref_s * 1e3,
                   res[i].ref_s / res[i].step_s);
    printf("load average at the end %.2f\n", bench_load1());
    return 0;
}

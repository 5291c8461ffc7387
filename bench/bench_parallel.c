/* Parallel training throughput: 2 ranks on 2 cores (dp=2, tp=2, tp=2 + sequence
 * parallelism, dp=2 + distributed optimizer) against 1 rank with 2 StarPU workers, on
 * one GPT. Built, not run by ctest; bench/run_parallel.sh runs every configuration
 * back to back and prints one table (bench/RESULTS-parallel.md).
 *
 *   mpirun -np 1 bench_parallel serial      [reps] [steps]   1 rank, 2 workers
 *   mpirun -np 1 bench_parallel serial1     [reps] [steps]   1 rank, 1 worker
 *   mpirun -np 2 bench_parallel dp2|tp2|tp2sp|dp2distopt|cp2 [reps] [steps]   1 worker per rank
 *   (cp2: context parallel 2, meant for long sequences: BENCH_SEQ=1024)
 *
 * BENCH_WORKERS=n overrides the workers per rank (default: 2 for serial, 1 otherwise);
 * BENCH_SEQ=n the sequence length (default 128), BENCH_MICRO=n the micro-batch (default 4);
 * BENCH_WARMUP=n the warm-up steps (default 2); BENCH_LIST=1 lists every collective node;
 * BENCH_TRACE=FILE writes a Chrome/Perfetto trace of the timed steps to FILE.rank<r>.json.
 *
 * Model (bench_model): GPT-2 layout, 4 layers, hidden 512, 8 heads, ffn 2048, seq 128,
 * vocab 256 (byte level; Megatron pads V to a multiple of 128·tp: 256 for tp = 2),
 * micro-batch 4, global batch 8 (2 micro-batches: serial and tp run both on every
 * rank, dp gives one to each rank), dropout 0.1, AdamW with clipping 1.0 (Megatron's
 * defaults), distributed-optimizer bucket size Megatron's default (40M elements: the
 * model's 12.8M parameters are one bucket). 12.8M parameters, 79.7 GFLOP per step
 * (mg_gpt_flops): matmuls of 512x512 .. 512x2048 on 512-token micro-batches, i.e.
 * kernels of milliseconds, far above the engine's ~4 µs per task, so the step is
 * compute-bound on 2 cores (~0.4-0.8 s).
 *
 * Per configuration: the trainer (mgraph/trainer.h) builds the logical step, partitions it
 * for this rank (serial runs the logical graph), memory plan, storage, StarPU
 * engine (prio policy, critical-path priorities), fixed synthetic tokens, 2 warm-up
 * steps, then `reps` repetitions (default 3) of `steps` steps (default 5), each
 * repetition starting after an MPI_Barrier. Printed per repetition as a "REP" line
 * (the driver script takes medians over every repetition of every round):
 *
 *   step_s      repetition wall time / steps, max over ranks (the slowest rank is the
 *               step time);
 *   tok_s       global-batch tokens (8 x 128) / step_s; tflops = mg_gpt_flops / step_s
 *               (the whole job's model FLOP/s, not per rank);
 *   meas_B      mg_comm_bytes(WORLD) over the repetition / steps (this rank's sent
 *               bytes per step, ring estimate, counted by the communicator when the
 *               MPI call returns); max over ranks;
 *   graph_B     mg_plan_comm_bytes of the rank's physical graph (total over groups);
 *   anal_B      the analytic count derived below from the model's shapes alone;
 *   comm_s      mg_comm_seconds per step: wall time inside MPI collective calls
 *               (transfer + waiting for the peer);
 *   xfer_s      the same collectives (same op, count, order) replayed on scratch
 *               buffers back to back after a barrier, outside the engine: the cost
 *               of the transfers alone, without waiting for a late peer;
 *   compute_s   critical compute time per step: max over the rank's workers of time
 *               inside kernels (engine stats busy_s, which include the collective
 *               kernels) minus the time inside collectives. With one worker per rank
 *               this is exact (busy_0 - comm_s). With more workers per rank the engine
 *               does not say which worker ran the collectives, so the larger of two
 *               lower bounds is used: max_w busy_w - comm_s and
 *               (sum_w busy_w - comm_s) / n_workers;
 *   exposed_s   min(comm_s, max(0, engine step wall - compute_s)): step time not
 *               covered by the critical compute, capped at the communication time
 *               (beyond that it is scheduling/submission idle, not communication);
 *   hidden      1 - exposed_s / comm_s: the share of communication time hidden behind
 *               compute. Per-step quantities are medians over the repetition's steps
 *               on each rank, then averaged over ranks.
 *
 * Analytic bytes (per rank, per step; ring algorithms: all-reduce 2(n-1)/n, all-gather
 * and reduce-scatter (n-1)/n of the full buffer; f = 4 bytes; n = 2; T = s·b tokens
 * per micro-batch; m = micro-batches this rank runs; P parameters):
 *   dp2         gradient all-reduce 2(n-1)/n·f·P  + loss all-reduce 2(n-1)/n·f
 *   dp2distopt  gradient reduce-scatter (n-1)/n·f·P' + parameter all-gather
 *               (n-1)/n·f·P' (P' = P padded to a multiple of n per bucket)
 *               + grad-norm all-reduce and loss all-reduce 2·2(n-1)/n·f
 *   tp2         Megatron, per micro-batch: per layer 2 all-reduces forward (after the
 *               row-parallel attention projection and fc2) and 2 backward (input grads
 *               of the column-parallel QKV and fc1) of T·h floats; vocab-parallel
 *               embedding forward all-reduce (T·h); tied output layer backward
 *               all-reduce of its input gradient (T·h); vocab-parallel cross-entropy:
 *               all-reduce MAX of the row max and SUM of sum-exp and target logit (3·T)
 *               — all × 2(n-1)/n·f × m; + grad-norm all-reduce (f·2(n-1)/n)
 *   tp2sp       per micro-batch: each of the tp2 all-reduces of T·h becomes an
 *               all-gather + reduce-scatter pair (same volume), i.e. per layer
 *               4 all-gathers + 4 reduce-scatters, plus embedding reduce-scatter /
 *               all-gather and output-layer all-gather / reduce-scatter: (8L+4)·T·h ×
 *               (n-1)/n·f × m; the cross-entropy collectives as tp2; once per step the
 *               gradients that are partial sums over sequence shards: LayerNorm
 *               weights and biases (2L+1)·2h, row-parallel biases 2L·h, position
 *               embedding s·h (its rows are used by one sequence shard each) —
 *               2(n-1)/n·f each; + grad-norm; + as Megatron under SP, the backward
 *               all-gathers the sequence-sharded input of each column-parallel linear
 *               again for its weight gradient (QKV, fc1 per layer, the tied output
 *               layer): (2L+1)·T·h × (n-1)/n·f × m.
 *
 * Environment: STARPU_WORKERS_NOBIND=1 STARPU_SILENT=1 (the driver sets them; see
 * RESULTS-parallel.md for the binding choice). Asserts nothing.
 */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "mgraph/comm.h"
#include "mgraph/engine.h"
#include "mgraph/model.h"
#include "mgraph/plan.h"
#include "bench_util.h"

static int rank_, world_;

static void die(const char *what, const mg_error *e) {
    fprintf(stderr, "[rank %d] %s: %s\n", rank_, what, e->msg);
    MPI_Abort(MPI_COMM_WORLD, 1);
}

typedef struct config {
    const char *name;
    int ranks, tp, workers;
    bool sp, distopt;
    int cp;
} config;

static const config CONFIGS[] = {
    {"serial", 1, 1, 2, false, false, 1}, {"serial1", 1, 1, 1, false, false, 1}, {"dp2", 2, 1, 1, false, false, 1},
    {"tp2", 2, 2, 1, false, false, 1},    {"tp2sp", 2, 2, 1, true, false, 1},    {"dp2distopt", 2, 1, 1, false, true, 1},
    {"cp2", 2, 1, 1, false, false, 2},
};

static mg_step_config bench_model(int tp) {
    mg_step_config sc = {0};
    sc.model = mg_gpt_defaults();
    sc.model.num_layers = 4;
    sc.model.hidden = 512;
    sc.model.heads = 8;
    sc.model.ffn_hidden = 4 * 512;
    /* BENCH_SEQ=n: another sequence length (context parallelism is measured at 1024) */
    int seq = getenv("BENCH_SEQ") && atoi(getenv("BENCH_SEQ")) > 0 ? atoi(getenv("BENCH_SEQ")) : 128;
    sc.model.seq_length = seq;
    sc.model.max_position = seq;
    sc.model.vocab = 256 > 128 * tp ? 256 : 128 * tp;
    /* BENCH_MICRO=n: sequences per micro-batch (default 4) */
    sc.micro_batch = getenv("BENCH_MICRO") && atoi(getenv("BENCH_MICRO")) > 0 ? atoi(getenv("BENCH_MICRO")) : 4;
    sc.n_micro = 2; /* global batch 2 micro-batches (8 sequences by default) */
    sc.training = true;
    sc.optim = mg_adamw_defaults();
    sc.optim.lr = (mg_lr_schedule){.lr = 1e-4f, .min_lr = 1e-5f, .warmup_steps = 0, .decay_steps = 1000,
                                   .style = MG_LR_COSINE};
    return sc;
}

/* ---- analytic communication volume ------------------------------------------------------------ */
typedef struct term {
    const char *what;
    double bytes;
} term;

static int analytic(const config *cf, const mg_step_config *sc, term *t, double *total) {
    const mg_gpt_config *c = &sc->model;
    const double n = 2, f = 4, ar = 2 * (n - 1) / n, ag = (n - 1) / n;
    double h = c->hidden, L = c->num_layers, s = c->seq_length, T = s * sc->micro_batch, V = (double)c->vocab,
           ffn = c->ffn_hidden;
    /* parameters from first principles: embeddings, per layer 2 LayerNorms (w, b), QKV,
     * projection, fc1, fc2 (weights and biases), final LayerNorm */
    double P = V * h + s * h + L * (4 * h + 3 * h * h + 3 * h + h * h + h + ffn * h + ffn + ffn * h + h) + 2 * h;
    int dp = cf->ranks / (cf->tp * cf->cp);
    double m = sc->n_micro / dp;
    int k = 0;
    if (cf->ranks == 1) {
        *total = 0;
        return 0;
    }
    if (cf->cp > 1) {
        /* K/V ring (partitioners/cp.c): per layer and micro-batch C-1 blocks of K and of V
         * forward, of dK and dV backward, a block being the rank's s/C tokens x b x h */
        double C = cf->cp;
        t[k++] = (term){"K/V ring: 4(C-1) blocks of (s/C)*b*h per layer per mb", m * L * 4 * (C - 1) * f * s / C * sc->micro_batch * h};
        t[k++] = (term){"grad all-reduce over cp 2(n-1)/n*4P", ar * f * P};
        t[k++] = (term){"loss all-reduce", ar * f};
    } else if (cf->tp == 1 && !cf->distopt) {
        t[k++] = (term){"grad all-reduce 2(n-1)/n*4P", ar * f * P};
        t[k++] = (term){"loss all-reduce", ar * f};
    } else if (cf->tp == 1) {
        double Pp = ceil(P / n) * n;
        t[k++] = (term){"grad reduce-scatter (n-1)/n*4P'", ag * f * Pp};
        t[k++] = (term){"param all-gather (n-1)/n*4P'", ag * f * Pp};
        t[k++] = (term){"grad-norm + loss all-reduces", 2 * ar * f};
    } else if (!cf->sp) {
        t[k++] = (term){"layers: 4 all-reduces of T*h per layer per mb", m * L * 4 * ar * f * T * h};
        t[k++] = (term){"embedding fwd + output-layer bwd all-reduce of T*h per mb", m * 2 * ar * f * T * h};
        t[k++] = (term){"vocab-parallel CE: 3 all-reduces of T per mb", m * 3 * ar * f * T};
        t[k++] = (term){"grad-norm all-reduce", ar * f};
    } else {
        t[k++] = (term){"layers: 4 AG + 4 RS of T*h per layer per mb", m * L * 8 * ag * f * T * h};
        t[k++] = (term){"embedding RS/AG + output-layer AG/RS of T*h per mb", m * 4 * ag * f * T * h};
        t[k++] = (term){"vocab-parallel CE: 3 all-reduces of T per mb", m * 3 * ar * f * T};
        t[k++] = (term){"SP grads: LayerNorms (2L+1)*2h + row biases 2L*h", ar * f * ((2 * L + 1) * 2 * h + 2 * L * h)};
        t[k++] = (term){"SP grads: position embedding s*h", ar * f * s * h};
        t[k++] = (term){"bwd re-gather of column-parallel inputs (2L+1)*T*h per mb", m * (2 * L + 1) * ag * f * T * h};
        t[k++] = (term){"grad-norm all-reduce", ar * f};
    }
    *total = 0;
    for (int i = 0; i < k; i++) *total += t[i].bytes;
    return k;
}

/* ---- the graph's collectives ------------------------------------------------------------------ */
static bool is_coll(mg_op op) {
    return op == MG_OP_ALLREDUCE || op == MG_OP_ALLGATHER || op == MG_OP_REDUCE_SCATTER || op == MG_OP_BROADCAST ||
           op == MG_OP_RING_SHIFT;
}

static double wire_bytes(const mg_node *nd) {
    int n = nd->attrs.comm.nranks;
    double in = (double)mg_numel(nd->in[0]) * 4, out = (double)mg_numel(nd->out[0]) * 4;
    switch (nd->op) {
    case MG_OP_ALLREDUCE: return 2.0 * (n - 1) / n * in;
    case MG_OP_ALLGATHER: return (double)(n - 1) / n * out;
    case MG_OP_REDUCE_SCATTER: return (double)(n - 1) / n * in;
    case MG_OP_RING_SHIFT: return in;
    default: return (double)(n - 1) / n * in;
    }
}

/* Collectives of the physical graph grouped by op, group, phase and size. */
static void print_breakdown(const mg_graph *P) {
    typedef struct row { mg_op op; int grp, phase; int64_t numel; int count; double bytes; } row;
    row rows[256];
    int nr = 0;
    for (int i = 0; i < mg_graph_n_nodes(P); i++) {
        const mg_node *nd = mg_graph_node(P, i);
        if (!is_coll(nd->op)) continue;
        int64_t ne = mg_numel(nd->op == MG_OP_ALLGATHER ? nd->out[0] : nd->in[0]);
        int j = 0;
        while (j < nr && !(rows[j].op == nd->op && rows[j].grp == nd->attrs.comm.group && rows[j].phase == (int)nd->phase &&
                           rows[j].numel == ne))
            j++;
        if (j == nr) {
            if (nr == 256) continue;
            rows[nr++] = (row){nd->op, nd->attrs.comm.group, (int)nd->phase, ne, 0, 0};
        }
        rows[j].count++;
        rows[j].bytes += wire_bytes(nd);
    }
    static const char *ph[] = {"forward", "backward", "optimizer"};
    if (getenv("BENCH_LIST")) /* every collective node, in graph order */
        for (int i = 0; i < mg_graph_n_nodes(P); i++) {
            const mg_node *nd = mg_graph_node(P, i);
            if (is_coll(nd->op))
                printf("    seq %4lld %-15s %-9s %-40s <- %s\n", (long long)nd->attrs.comm.seq, mg_op_name(nd->op),
                       ph[nd->phase], nd->out[0]->name, nd->in[0]->name);
        }
    printf("  graph collectives (op, group, phase, full-buffer elements: count, wire bytes):\n");
    for (int j = 0; j < nr; j++)
        printf("    %-15s %-3s %-9s %10lld x %3d  %12.0f B\n", mg_op_name(rows[j].op), mg_group_name((mg_group)rows[j].grp),
               ph[rows[j].phase], (long long)rows[j].numel, rows[j].count, rows[j].bytes);
}

/* Replays the graph's collectives (op, count, order) on scratch buffers over MPI_COMM_WORLD
 * (every group of size 2 is the world here): the transfers alone, back to back. */
static double replay_collectives(const mg_graph *P, int reps) {
    int64_t maxn = 1;
    for (int i = 0; i < mg_graph_n_nodes(P); i++) {
        const mg_node *nd = mg_graph_node(P, i);
        if (is_coll(nd->op)) {
            int64_t a = mg_numel(nd->in[0]), b = mg_numel(nd->out[0]);
            if (a > maxn) maxn = a;
            if (b > maxn) maxn = b;
        }
    }
    float *x = calloc((size_t)maxn, 4), *y = calloc((size_t)maxn, 4);
    /* the engine's order: ascending seq (one total order per rank) */
    int nn = mg_graph_n_nodes(P), nc = 0;
    const mg_node **ord = malloc((size_t)nn * sizeof *ord);
    for (int i = 0; i < nn; i++)
        if (is_coll(mg_graph_node(P, i)->op) && mg_graph_node(P, i)->attrs.comm.nranks > 1) ord[nc++] = mg_graph_node(P, i);
    for (int i = 1; i < nc; i++)
        for (int j = i; j > 0 && ord[j - 1]->attrs.comm.seq > ord[j]->attrs.comm.seq; j--) {
            const mg_node *t = ord[j];
            ord[j] = ord[j - 1];
            ord[j - 1] = t;
        }
    double best[16];
    if (reps > 16) reps = 16;
    for (int r = 0; r < reps; r++) {
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        for (int i = 0; i < nc; i++) {
            const mg_node *nd = ord[i];
            MPI_Datatype ty = nd->in[0]->dtype == MG_I32 ? MPI_INT32_T : MPI_FLOAT;
            int n = nd->attrs.comm.nranks;
            int cin = (int)mg_numel(nd->in[0]);
            if (nd->op == MG_OP_ALLREDUCE)
                MPI_Allreduce(x, y, cin, ty, nd->attrs.comm.op == MG_REDUCE_MAX ? MPI_MAX : MPI_SUM, MPI_COMM_WORLD);
            else if (nd->op == MG_OP_ALLGATHER)
                MPI_Allgather(x, cin, ty, y, cin, ty, MPI_COMM_WORLD);
            else if (nd->op == MG_OP_REDUCE_SCATTER)
                MPI_Reduce_scatter_block(x, y, cin / n, ty, MPI_SUM, MPI_COMM_WORLD);
            else if (nd->op == MG_OP_RING_SHIFT) { /* 2 ranks: the peer both ways */
                int peer = 1 - rank_;
                MPI_Sendrecv(x, cin, ty, peer, 0, y, cin, ty, peer, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            }
            else
                MPI_Bcast(x, cin, ty, nd->attrs.comm.peer, MPI_COMM_WORLD);
        }
        best[r] = MPI_Wtime() - t0;
    }
    free(ord);
    free(x);
    free(y);
    return bench_median(best, reps);
}

int main(int argc, char **argv) {
    int provided;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &world_);
    const config *cf = NULL;
    for (size_t i = 0; argc > 1 && i < sizeof CONFIGS / sizeof *CONFIGS; i++)
        if (!strcmp(argv[1], CONFIGS[i].name)) cf = &CONFIGS[i];
    int reps = argc > 2 ? atoi(argv[2]) : 3, steps = argc > 3 ? atoi(argv[3]) : 5;
    if (!cf || reps < 1 || steps < 1) {
        if (!rank_)
            fprintf(stderr, "usage: mpirun -np 1 bench_parallel serial|serial1 [reps] [steps]\n"
                            "       mpirun -np 2 bench_parallel dp2|tp2|tp2sp|dp2distopt [reps] [steps]\n");
        MPI_Finalize();
        return 2;
    }
    if (cf->ranks != world_) {
        if (!rank_) fprintf(stderr, "bench_parallel %s needs %d ranks (mpirun -np %d), got %d\n", cf->name, cf->ranks,
                            cf->ranks, world_);
        MPI_Finalize();
        return 2;
    }
    int workers = cf->workers;
    if (getenv("BENCH_WORKERS") && atoi(getenv("BENCH_WORKERS")) > 0) workers = atoi(getenv("BENCH_WORKERS"));
    alarm(1200);

    mg_step_config sc = bench_model(cf->tp);
    mg_plan plan;
    mg_plan_defaults(&plan);
    plan.tp = cf->tp;
    plan.sequence_parallel = cf->sp;
    plan.distributed_optimizer = cf->distopt;
    plan.cp = cf->cp;
    mg_error err = {0};
    mg_mesh mesh;
    if (mg_mesh_init(&mesh, world_, rank_, plan.tp, plan.cp, 1, 1, &err)) die("mesh", &err);
    mg_plan_model pm = {sc.model.hidden, sc.model.heads, sc.model.ffn_hidden, sc.model.seq_length,
                        sc.model.vocab, sc.micro_batch * sc.n_micro, sc.micro_batch, mg_gpt_kv_groups(&sc.model), sc.model.num_layers};
    if (mg_plan_check(&plan, world_, &err) || mg_plan_check_model(&plan, world_, &pm, &err)) die("plan", &err);

    /* BENCH_OVERLAP=1: collectives on the engine's communication thread (--overlap-grad-reduce) */
    const char *ov = getenv("BENCH_OVERLAP");
    bench_data data;
    mg_trainer *T = bench_trainer(&sc, &plan, workers, ov && atoi(ov) > 0, &data, &err);
    if (!T) die("trainer", &err);
    const mg_rank_graph *R = mg_trainer_rank_graph(T, false);
    mg_graph *G = R->graph, *P = R->owns_graph ? R->graph : NULL;
    mg_comm *comm = mg_trainer_comm(T);
    mg_engine *eng = mg_trainer_engine(T);

    double gb[MG_GROUP_COUNT];
    mg_plan_comm_bytes(G, sc.n_micro / mesh.size[MG_GROUP_DP], gb);
    double graph_bytes = 0;
    for (int g = 0; g < MG_GROUP_COUNT; g++) graph_bytes += gb[g]; /* per group; WORLD: world-group ones */
    term terms[16];
    double anal = 0;
    int nterms = analytic(cf, &sc, terms, &anal);
    int64_t samples = (int64_t)sc.micro_batch * sc.n_micro;
    double flops = mg_gpt_flops(&sc.model, samples);
    if (!rank_) {
        const mg_gpt_config *c = &sc.model;
        printf("== %s: %d rank(s) x %d worker(s); tp %d, cp %d, dp %d, sp %d, distopt %d; load %.2f\n", cf->name, world_,
               workers, plan.tp, plan.cp, mesh.size[MG_GROUP_DP], plan.sequence_parallel, plan.distributed_optimizer,
               bench_load1());
        printf("  model: %d layers, hidden %d, heads %d, ffn %d, seq %d, vocab %lld, micro-batch %d x %d; %lld params "
               "(mg_gpt_num_params), %.2f GFLOP/step; physical graph %d nodes, %d tensors\n",
               c->num_layers, c->hidden, c->heads, c->ffn_hidden, c->seq_length, (long long)c->vocab, sc.micro_batch,
               sc.n_micro, (long long)mg_gpt_num_params(c), flops * 1e-9, mg_graph_n_nodes(G), mg_graph_n_tensors(G));
        if (P) {
            printf("  graph bytes/step by group (mg_plan_comm_bytes):");
            for (int g = 0; g < MG_GROUP_COUNT; g++)
                if (gb[g] > 0) printf(" %s %.0f", mg_group_name((mg_group)g), gb[g]);
            printf("\n  analytic terms:\n");
            for (int i = 0; i < nterms; i++) printf("    %-58s %12.0f B\n", terms[i].what, terms[i].bytes);
            printf("    %-58s %12.0f B\n", "total", anal);
            print_breakdown(P);
        }
        fflush(stdout);
    }

    int64_t it = 0;
    int warmup = getenv("BENCH_WARMUP") ? atoi(getenv("BENCH_WARMUP")) : 2;
    mg_step_result res = {0};
    for (int w = 0; w < warmup; w++, it++)
        if (mg_trainer_step(T, &res, &err)) die("warm-up step", &err);
    double xfer = P ? replay_collectives(P, 5) : 0;

    /* BENCH_TRACE=FILE: a Chrome/Perfetto trace of the timed steps, one file per rank
     * (FILE.rank<r>.json), for a per-op breakdown of the plan */
    mg_trace *trace = NULL;
    const char *trace_path = getenv("BENCH_TRACE");
    if (trace_path && (mg_trace_new(rank_, &trace, &err) || mg_engine_set_trace(eng, trace, &err))) die("trace", &err);
    double *wall = calloc((size_t)steps, sizeof *wall), *cs = calloc((size_t)steps, sizeof *cs),
           *cmp = calloc((size_t)steps, sizeof *cmp), *exp_ = calloc((size_t)steps, sizeof *exp_),
           *idle = calloc((size_t)steps, sizeof *idle);
    for (int r = 0; r < reps; r++) {
        MPI_Barrier(MPI_COMM_WORLD);
        mg_comm_reset_bytes(comm);
        double t0 = MPI_Wtime();
        for (int k = 0; k < steps; k++, it++) {
            double c0 = mg_comm_seconds(comm);
            if (trace) mg_trace_step_begin(trace, it);
            if (mg_trainer_step(T, &res, &err)) die("step", &err);
            if (trace) mg_trace_step_end(trace);
            mg_engine_stats es;
            mg_engine_get_stats(eng, &es);
            double tc = mg_comm_seconds(comm) - c0, sum = 0, mx = 0;
            for (int w = 0; w < es.n_workers; w++) {
                sum += es.busy_s[w];
                if (es.busy_s[w] > mx) mx = es.busy_s[w];
            }
            double lb1 = mx - tc, lb2 = (sum - tc) / es.n_workers;
            double comp = lb1 > lb2 ? lb1 : lb2;
            double ex = es.wall_s - comp;
            if (ex < 0) ex = 0;
            if (ex > tc) ex = tc;
            wall[k] = es.wall_s;
            cs[k] = tc;
            cmp[k] = comp;
            exp_[k] = ex;
            idle[k] = es.idle_fraction;
        }
        double rep_s = (MPI_Wtime() - t0) / steps;
        double mb[MG_GROUP_COUNT];
        mg_comm_bytes(comm, mb);
        double v[8] = {rep_s, mb[MG_GROUP_WORLD] / steps, bench_median(cs, steps), bench_median(cmp, steps), bench_median(exp_, steps),
                       bench_median(wall, steps), bench_median(idle, steps), 0};
        double h = v[2] > 0 ? 1.0 - v[4] / v[2] : 0;
        v[7] = h;
        double mx[8], sm[8];
        MPI_Allreduce(v, mx, 8, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        MPI_Allreduce(v, sm, 8, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        if (!rank_) {
            double step_s = mx[0];
            printf("REP config=%s rep=%d ranks=%d workers=%d step_s=%.4f tok_s=%.1f tflops=%.4f meas_B=%.0f graph_B=%.0f "
                   "anal_B=%.0f comm_s=%.5f xfer_s=%.5f compute_s=%.4f exposed_s=%.5f hidden=%.4f idle=%.3f "
                   "loss=%.4f load=%.2f\n",
                   cf->name, r, world_, workers, step_s, (double)samples * sc.model.seq_length / step_s,
                   flops / step_s * 1e-12, mx[1], graph_bytes, anal, sm[2] / world_, xfer, sm[3] / world_,
                   sm[4] / world_, sm[7] / world_, sm[6] / world_, res.loss,
                   bench_load1());
            fflush(stdout);
        }
    }
    if (trace) {
        char path[4096];
        snprintf(path, sizeof path, "%s.rank%d.json", trace_path, rank_);
        mg_engine_set_trace(eng, NULL, &err);
        if (mg_trace_write(trace, path, &err)) die("trace", &err);
        mg_trace_free(trace);
    }
    free(wall);
    free(cs);
    free(cmp);
    free(exp_);
    free(idle);
    mg_trainer_free(T);
    bench_data_free(&data);
    MPI_Finalize();
    return 0;
}

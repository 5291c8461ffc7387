/* mgraph-calibrate: measures this machine and prints a cluster file for mgraph-plan.
 *
 *   mpirun -np R mgraph-calibrate [--name NAME] [--cpu-time] > this.cluster
 *
 * R ranks (the ranks a node runs: one per core on CPUs) measure at the same time, as
 * they run a plan: single-threaded OpenBLAS sgemm at several sizes (the peak and the
 * small-GEMM curve), a streaming add (memory bandwidth), mgraph's own GELU kernel
 * (the vector rate: 8 FLOPs per element as its cost function counts), the StarPU engine
 * on a chain of tiny nodes (the overhead per node) and MPI all-reduce between the ranks
 * (latency at 4 bytes, bandwidth at 16 MiB). Rank 0 prints the file; every rank's
 * numbers are the median of its repetitions (compute in CPU time: the machine is
 * shared), the file takes the slowest rank's.
 * Exit status: 0, 2 bad usage, 1 failure.
 */
#include <cblas.h>
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "mgraph/comm.h"
#include "mgraph/engine.h"
#include "mgraph/ops.h"
#include "ops/op.h"

void openblas_set_num_threads(int); /* OpenBLAS's own (not in every cblas.h) */

/* Timed in wall time, or with --cpu-time in CPU time of this process (on a shared
 * machine, what a dedicated core would take). Run with Open MPI's
 * mpi_yield_when_idle=1, as mgraph-run sets it for ranks sharing a node, so a rank
 * waiting in a collective yields its core. planner/calibrate.py compares with
 * mgraph-run's CPU time per iteration for the same reason. */
static clockid_t g_clock = CLOCK_MONOTONIC;
static double now_s(void) {
    struct timespec ts;
    clock_gettime(g_clock, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* Seconds per call of fn, median over reps after a warm-up, all ranks in step. */
#define TIME_MEDIAN(out, reps, body)                                                                                   \
    do {                                                                                                               \
        double t_[64];                                                                                                 \
        body;                                                                                                          \
        MPI_Barrier(MPI_COMM_WORLD);                                                                                   \
        for (int r_ = 0; r_ < (reps); r_++) {                                                                          \
            double t0_ = now_s();                                                                                      \
            body;                                                                                                      \
            t_[r_] = now_s() - t0_;                                                                                    \
        }                                                                                                              \
        (out) = median(t_, (reps));                                                                                    \
    } while (0)

/* sgemm GFLOP/s of an n x n x n product. */
static double sgemm_rate(int n) {
    float *a = malloc(sizeof(float) * n * n), *b = malloc(sizeof(float) * n * n), *c = malloc(sizeof(float) * n * n);
    for (long i = 0; i < (long)n * n; i++) a[i] = b[i] = 1e-3f * (float)(i % 97);
    int inner = n <= 128 ? 64 : n <= 256 ? 8 : 1;
    double t;
    TIME_MEDIAN(t, 9, for (int k = 0; k < inner; k++) cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n,
                                                                  1.0f, a, n, b, n, 0.0f, c, n));
    free(a);
    free(b);
    free(c);
    return 2.0 * n * n * (double)n * inner / t / 1e9;
}

/* GB/s of c = a + b over 3 x 32 MiB. */
static double stream_gbps(void) {
    long n = 8L << 20;
    float *a = malloc(sizeof(float) * n), *b = malloc(sizeof(float) * n), *c = malloc(sizeof(float) * n);
    for (long i = 0; i < n; i++) a[i] = b[i] = c[i] = (float)(i & 7);
    double t;
    TIME_MEDIAN(t, 7, for (long i = 0; i < n; i++) c[i] = a[i] + b[i]);
    volatile float sink = c[n / 2];
    (void)sink;
    free(a);
    free(b);
    free(c);
    return 12.0 * n / t / 1e9;
}

/* mgraph's GELU kernel on 1M elements: its cost function's FLOPs per second. */
static int vector_tflops(double *out, mg_error *err) {
    mg_graph *g = mg_graph_new();
    int64_t n = 1 << 20;
    mg_tensor *x = mg_input(g, "x", MG_F32, 1, &n);
    mg_tensor *y = mg_gelu(g, x);
    if (!y) {
        int rc = mg_error_set(err, MG_ERR_RUNTIME, "gelu graph: %s", mg_graph_error(g)->msg);
        mg_graph_free(g);
        return rc;
    }
    float *in = malloc(sizeof(float) * n), *o = malloc(sizeof(float) * n);
    for (int64_t i = 0; i < n; i++) in[i] = 1e-3f * (float)(i % 2000) - 1.0f;
    void *ins[1] = {in}, *outs[1] = {o};
    mg_exec_info info = {0};
    mg_kernel_args a = {y->src, ins, outs, &info};
    const mg_op_def *d = mg_op_def_get(MG_OP_GELU);
    double flops, bytes, t;
    mg_op_cost(y->src, &flops, &bytes);
    TIME_MEDIAN(t, 9, d->cpu(&a, err));
    free(in);
    free(o);
    mg_graph_free(g);
    *out = flops / t / 1e12;
    return MG_OK;
}

/* StarPU engine, one worker, a chain of `len` tiny nodes: seconds per node. */
static int node_overhead(double *out, mg_error *err) {
    mg_graph *g = mg_graph_new();
    int64_t one = 16;
    int len = 2000;
    mg_tensor *x = mg_input(g, "x", MG_F32, 1, &one);
    for (int i = 0; i < len; i++) x = mg_scale(g, x, 1.0f);
    mg_memplan *plan = NULL;
    mg_storage *st = NULL;
    mg_engine *e = NULL;
    int rc = x ? MG_OK : mg_error_set(err, MG_ERR_RUNTIME, "chain graph: %s", mg_graph_error(g)->msg);
    if (!rc) rc = mg_memplan_build(g, true, &plan, err);
    if (!rc) rc = mg_storage_new(g, plan, &st, err);
    if (!rc) rc = mg_storage_init(st, 1, err);
    mg_engine_options eo = {.sched_policy = NULL, .ncpus = 1, .use_priorities = true};
    if (!rc) rc = mg_engine_new(g, st, &eo, &e, err);
    double t = 0;
    mg_exec_info info = {.seed = 1, .training = true};
    if (!rc) TIME_MEDIAN(t, 5, if (!rc) rc = mg_engine_run(e, &info, err));
    mg_engine_free(e);
    mg_storage_free(st);
    mg_memplan_free(plan);
    mg_graph_free(g);
    *out = t / len;
    return rc;
}

/* A chain of `len` all-reduce nodes of `count` floats over every rank, run by the StarPU
 * engine (one worker) through mgraph's communicator, the path a plan's collectives take:
 * seconds per node. */
static int allreduce_s(mg_comm *comm, int world, int64_t count, int len, double *out, mg_error *err) {
    mg_graph *g = mg_graph_new();
    mg_tensor *x = mg_input(g, "x", MG_F32, 1, &count);
    for (int i = 0; i < len; i++) x = mg_allreduce(g, x, MG_GROUP_TP, world, MG_REDUCE_SUM, i);
    mg_memplan *plan = NULL;
    mg_storage *st = NULL;
    mg_engine *e = NULL;
    int rc = x ? MG_OK : mg_error_set(err, MG_ERR_RUNTIME, "all-reduce graph: %s", mg_graph_error(g)->msg);
    if (!rc) rc = mg_memplan_build(g, true, &plan, err);
    if (!rc) rc = mg_storage_new(g, plan, &st, err);
    if (!rc) rc = mg_storage_init(st, 1, err);
    mg_engine_options eo = {.sched_policy = NULL, .ncpus = 1, .use_priorities = true};
    if (!rc) rc = mg_engine_new(g, st, &eo, &e, err);
    double t = 0;
    mg_exec_info info = {.seed = 1, .training = true, .comm = comm};
    if (!rc) TIME_MEDIAN(t, 5, if (!rc) rc = mg_engine_run(e, &info, err));
    mg_engine_free(e);
    mg_storage_free(st);
    mg_memplan_free(plan);
    mg_graph_free(g);
    *out = t / len;
    return rc;
}

static double worst(double v, MPI_Op op) {
    double r;
    MPI_Allreduce(&v, &r, 1, MPI_DOUBLE, op, MPI_COMM_WORLD);
    return r;
}

int main(int argc, char **argv) {
    setenv("OMPI_MCA_mpi_yield_when_idle", "1", 0); /* as mgraph-run: read at MPI_Init */
    int provided;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided); /* collectives run on StarPU workers */
    int rank, world;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    const char *name = "this-machine";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--name") && i + 1 < argc) name = argv[++i];
        else if (!strcmp(argv[i], "--cpu-time")) g_clock = CLOCK_PROCESS_CPUTIME_ID;
        else {
            if (!rank) fprintf(stderr, "mgraph-calibrate: error: unknown argument '%s' (usage: mpirun -np R "
                                       "mgraph-calibrate [--name NAME] [--cpu-time])\n", argv[i]);
            MPI_Finalize();
            return 2;
        }
    }
    openblas_set_num_threads(1); /* as every executor runs kernels (scheduler/blas_threads.h) */
    int sizes[] = {64, 128, 256, 512, 1024};
    double rate[5], peak = 0;
    for (int i = 0; i < 5; i++) {
        rate[i] = worst(sgemm_rate(sizes[i]), MPI_MIN);
        if (rate[i] > peak) peak = rate[i];
    }
    /* the curve eff(F) = F / (F + H) relative to the peak: H from each size, median */
    double H[5];
    for (int i = 0; i < 5; i++) {
        double F = 2.0 * sizes[i] * sizes[i] * sizes[i], e = rate[i] / peak;
        H[i] = e < 1 ? F * (1 / e - 1) : 0;
    }
    double half = median(H, 5) / 1e9;
    double bw = worst(stream_gbps(), MPI_MIN);
    mg_error err = {0};
    double vec = 0, ovh = 0;
    int rc = vector_tflops(&vec, &err);
    if (!rc) rc = node_overhead(&ovh, &err);
    int bad = worst(rc ? 1 : 0, MPI_MAX) > 0;
    if (bad) {
        if (rc) fprintf(stderr, "mgraph-calibrate: failed on rank %d: %s\n", rank, err.msg);
        MPI_Finalize();
        return 1;
    }
    vec = worst(vec, MPI_MIN);
    ovh = worst(ovh, MPI_MAX);
    double lat = 0, gbps = 0;
    if (world > 1) {
        mg_mesh mesh;
        mg_comm *comm = NULL;
        double t1 = 0, tS = 0;
        rc = mg_mesh_init(&mesh, world, rank, world, 1, 1, 1, &err);
        if (!rc) rc = mg_comm_new(&mesh, &comm, &err);
        if (!rc) rc = allreduce_s(comm, world, 1, 400, &t1, &err);
        if (!rc) rc = allreduce_s(comm, world, 4 << 20, 8, &tS, &err);
        mg_comm_free(comm);
        if (worst(rc ? 1 : 0, MPI_MAX) > 0) {
            if (rc) fprintf(stderr, "mgraph-calibrate: failed on rank %d: %s\n", rank, err.msg);
            MPI_Finalize();
            return 1;
        }
        t1 = worst(t1, MPI_MAX);
        tS = worst(tS, MPI_MAX);
        /* small messages: the tree's 2 log2(n) steps; 16 MiB: the ring's bandwidth */
        double steps = 2.0 * ceil(log2(world)), S = 16.0 * 1048576;
        lat = t1 / steps;
        gbps = 2.0 * (world - 1) / world * S / (tS - 2.0 * (world - 1) * lat) / 1e9;
    }
    long pages = sysconf(_SC_PHYS_PAGES), psize = sysconf(_SC_PAGESIZE);
    double mem_gib = (double)pages * (double)psize / 1073741824.0 / world;
    if (!rank) {
        printf("# mgraph-plan cluster file measured by mgraph-calibrate with %d rank(s) at once (one per core)\n", world);
        printf("# sgemm GFLOP/s (1 thread, slowest rank) n=64 %.1f, 128 %.1f, 256 %.1f, 512 %.1f, 1024 %.1f\n", rate[0],
               rate[1], rate[2], rate[3], rate[4]);
        printf("name %s\nprecision fp32\ngpus-per-node %d\nmax-nodes 1\n", name, world);
        printf("peak-tflops-fp32 %.6g\npeak-tflops-bf16 %.6g   # no 16-bit path on CPUs: the fp32 rate\n", peak / 1e3,
               peak / 1e3);
        printf("vector-tflops %.6g   # mgraph's GELU kernel, 8 FLOPs per element\n", vec);
        printf("hbm-gib %.4g   # physical memory / ranks\nhbm-gbps %.4g   # c = a + b over 3 x 32 MiB\n", mem_gib, bw);
        printf("intra-gbps %.4g\nintra-latency-us %.4g   # mgraph all-reduce nodes on StarPU, 16 MiB and 4 bytes\n", world > 1 ? gbps : 100.0,
               lat * 1e6);
        printf("inter-gbps %.4g\ninter-latency-us %.4g   # one node: as intra\n", world > 1 ? gbps : 100.0, lat * 1e6);
        printf("gemm-efficiency 1\ngemm-half-gflops %.4g\nmemory-efficiency 1\n", half);
        printf("kernel-overhead-us %.4g   # StarPU engine, one worker, per node of a chain of tiny nodes\n", ovh * 1e6);
        printf("reserved-gib 0.05\n");
    }
    MPI_Finalize();
    return 0;
}

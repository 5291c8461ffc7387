/* One StarPU instance per process, reference-counted across engines.
 *
 * StarPU can only be initialised once at a time, with one scheduling policy and one
 * set of workers. The first engine starts it; later engines join it (and must ask for
 * the same policy); the last engine shuts it down, after which a new engine may start
 * it again with other settings (the tests compare policies this way).
 *
 * Policy: mg_engine_options.sched_policy, else $STARPU_SCHED, else MG_DEFAULT_POLICY.
 * We resolve the name ourselves and hand StarPU the policy struct, so an explicit
 * option wins over the environment (StarPU's own name lookup lets $STARPU_SCHED win).
 *
 * Workers: STARPU_NCPU (StarPU lets the environment win), else ncpus, else every core
 * hwloc sees, capped by the build's STARPU_MAXCPUS (4 on Debian).
 *
 * OpenBLAS runs one thread while StarPU runs (blas_threads.h): StarPU provides the
 * parallelism, a threaded sgemm inside each of several workers would oversubscribe the
 * cores, and the reference executor's bits match only with the same thread count.
 */
#include <hwloc.h>
#include <stdbool.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "scheduler/blas_threads.h"
#include "scheduler/starpu_internal.h"
#ifdef STARPU_USE_CUDA
#include <cuda_runtime.h>
#endif

/* Default policy, chosen by measurement (bench/bench_engine, 2 CPU workers on the
 * 2-core EPYC dev machine, policies interleaved in rounds and run only while the
 * machine was otherwise idle; median step time over rounds, ms):
 *
 *   graph (training step: fwd+bwd+AdamW)         eager  prio   lws    ws  dmda dmdas
 *   MLP T=256 H=512 4 layers, 140 nodes, 3.3 GF   70.7  70.6  71.5  71.3  72.4  72.2
 *   MLP T=128 H=256 8 layers, 272 nodes, 0.8 GF   23.3  23.0  23.3  23.7  24.2  24.0
 *   1024 tiny scale ops (us per task)              4.35  4.31  3.86    -   4.28    -
 *
 * Matmuls are 98% of the FLOPs; every policy keeps both workers ~88% busy, so the
 * spread is within noise (outliers of 2x came from other processes). "prio" is
 * never worse, is the only one of these that follows our critical-path priorities
 * without needing calibrated performance models (dm* need several calibration steps
 * and write model files under $STARPU_HOME), and its central queue is no contention
 * point at 2-4 workers. Revisit with more cores (lws / dmdas) and with the mgraph
 * policy of the roadmap. */
#define MG_DEFAULT_POLICY "prio"

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static int g_refs;
static int g_running;          /* engines inside a step */
static char g_policy[64];
static int g_cpu_wanted;       /* CPU workers the first engine asked for (or the cores) */
/* Idle workers: 0 spin between steps; 1 (default) paused between steps, resumed
 * before submission; 2 resumed only once the whole step is submitted. Set by
 * MG_STARPU_PAUSE for measurements (bench/bench_engine.c). */
static int g_pause_mode = 1;
static bool g_resumed = true;

int mg_starpu_cpu_wanted(void) { return g_cpu_wanted; }

const char *mg_starpu_policy(void) { return g_policy; }

static int hwloc_cores(void) {
    hwloc_topology_t topo;
    int n = 0;
    if (hwloc_topology_init(&topo) == 0) {
        if (hwloc_topology_load(topo) == 0) n = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE);
        hwloc_topology_destroy(topo);
    }
    return n > 0 ? n : 1;
}

static struct starpu_sched_policy *find_policy(const char *name, mg_error *err) {
    struct starpu_sched_policy **all = starpu_sched_get_predefined_policies();
    char names[512] = "";
    size_t o = 0;
    for (int i = 0; all && all[i]; i++) {
        if (strcmp(all[i]->policy_name, name) == 0) return all[i];
        if (o < sizeof names) o += (size_t)snprintf(names + o, sizeof names - o, "%s%s", i ? " " : "", all[i]->policy_name);
    }
    mg_error_set(err, MG_ERR_INVALID, "unknown StarPU scheduling policy '%s' (available: %s)", name, names);
    return NULL;
}

/* Ranks of one node starting StarPU at the same time calibrate its bus model into the
 * same files under $STARPU_HOME, and one can read a file another is still writing
 * (StarPU then asserts). Each node-local rank gets its own directory below the base
 * ($STARPU_HOME, else $HOME), once per process. */
static void separate_rank_home(void) {
    static bool done;
    const char *lr = getenv("OMPI_COMM_WORLD_LOCAL_RANK"), *ls = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    if (done || !lr || !ls || atoi(ls) <= 1) return;
    done = true;
    const char *base = getenv("STARPU_HOME");
    if (!base || !*base) base = getenv("HOME");
    if (!base || !*base) base = "/tmp";
    char path[4096];
    snprintf(path, sizeof path, "%s/.mgraph-starpu/local-rank-%s", base, lr);
    setenv("STARPU_HOME", path, 1);
}

int mg_starpu_acquire(const char *policy, int ncpus, mg_error *err) {
    const char *env = getenv("STARPU_SCHED");
    const char *name = policy && *policy ? policy : env && *env ? env : MG_DEFAULT_POLICY;
    int rc = MG_OK;
    pthread_mutex_lock(&g_lock);
    if (g_refs > 0) {
        if (strcmp(name, g_policy) != 0)
            rc = mg_error_set(err, MG_ERR_UNSUPPORTED,
                              "StarPU already runs with policy '%s' for another engine; '%s' needs all engines "
                              "of the process freed first", g_policy, name);
        else
            g_refs++;
        pthread_mutex_unlock(&g_lock);
        return rc;
    }
    struct starpu_sched_policy *pol = find_policy(name, err);
    if (!pol) {
        pthread_mutex_unlock(&g_lock);
        return MG_ERR_INVALID;
    }
    separate_rank_home();
    struct starpu_conf conf;
    starpu_conf_init(&conf);
    conf.sched_policy = pol;
    int cores = hwloc_cores();
    int n = ncpus > 0 ? ncpus : cores;
    /* Capped by the build (Debian's: 4). Not silent: mg_engine_get_stats reports what was
     * wanted beside what runs, and the tools warn (tools/build-starpu.sh --cpus lifts it). */
    conf.ncpus = n < STARPU_MAXCPUS ? n : STARPU_MAXCPUS;
    const char *env_ncpu = getenv("STARPU_NCPU");
    g_cpu_wanted = env_ncpu && *env_ncpu ? atoi(env_ncpu) : n;
#ifdef STARPU_USE_CUDA
    /* One GPU per rank: several ranks on a node each take the GPU of their node-local
     * index (Open MPI's), unless StarPU's own variables choose. */
    const char *lr = getenv("OMPI_COMM_WORLD_LOCAL_RANK"), *ls = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    int ndev = 0;
    if (lr && ls && atoi(ls) > 1 && !getenv("STARPU_NCUDA") && !getenv("STARPU_WORKERS_CUDAID") &&
        cudaGetDeviceCount(&ndev) == cudaSuccess && ndev > 0) {
        conf.ncuda = 1;
        conf.use_explicit_workers_cuda_gpuid = 1;
        conf.workers_cuda_gpuid[0] = (unsigned)(atoi(lr) % ndev);
    }
    /* StarPU keeps 5-10% of each device's buffers "clean" by writing dirty ones back to
     * RAM in the background. Every activation and gradient is rewritten on the GPU each
     * step, so that wrote back ~28 GB per step of the 1.3B benchmark (StarPU's bus
     * statistics on an H200) and took three quarters of the step. The buffers are
     * only read back when the host asks (host_access), so keep none clean in advance;
     * StarPU still evicts when an allocation fails. Only the variables' defaults:
     * a user's setting wins. */
    setenv("STARPU_MINIMUM_CLEAN_BUFFERS", "0", 0);
    setenv("STARPU_TARGET_CLEAN_BUFFERS", "0", 0);
#endif
    int src = starpu_init(&conf);
    if (src != 0) {
        pthread_mutex_unlock(&g_lock);
        return mg_error_set(err, MG_ERR_RUNTIME, "starpu_init failed (%d: %s)", src, strerror(-src));
    }
    if (starpu_worker_get_count() == 0) {
        starpu_shutdown();
        pthread_mutex_unlock(&g_lock);
        return mg_error_set(err, MG_ERR_RUNTIME, "StarPU started no worker");
    }
    snprintf(g_policy, sizeof g_policy, "%s", name);
    /* One BLAS thread per kernel, as in the reference executor, so that results do not
     * depend on the thread count (blas_threads.h). It once gave each worker the cores
     * left over (cores / workers): the ranks of one node each got every core's worth
     * of BLAS threads on top of their workers, and bits changed with the worker count. */
    mg_blas_single_acquire();
    /* Idle StarPU workers spin; paused, they sleep. Keep them paused between steps so
     * that the host (data loading, logging, MPI) gets the cores. */
    const char *pz = getenv("MG_STARPU_PAUSE");
    g_pause_mode = pz && (*pz == '0' || *pz == '2') ? *pz - '0' : 1;
    g_resumed = true;
    if (g_pause_mode) {
        starpu_pause();
        g_resumed = false;
    }
    g_refs = 1;
    pthread_mutex_unlock(&g_lock);
    return MG_OK;
}

void mg_starpu_release(void) {
    pthread_mutex_lock(&g_lock);
    if (g_refs > 0 && --g_refs == 0) {
        if (!g_resumed) starpu_resume(); /* shutdown expects running workers */
        starpu_shutdown();
        mg_blas_single_release();
        g_policy[0] = '\0';
    }
    pthread_mutex_unlock(&g_lock);
}

void mg_starpu_step_begin(void) {
    pthread_mutex_lock(&g_lock);
    g_running++;
    if (g_pause_mode == 1 && !g_resumed) {
        starpu_resume();
        g_resumed = true;
    }
    pthread_mutex_unlock(&g_lock);
}

void mg_starpu_step_submitted(void) {
    pthread_mutex_lock(&g_lock);
    if (!g_resumed) {
        starpu_resume();
        g_resumed = true;
    }
    pthread_mutex_unlock(&g_lock);
}

void mg_starpu_step_end(void) {
    pthread_mutex_lock(&g_lock);
    if (--g_running == 0 && g_pause_mode && g_resumed) {
        starpu_pause();
        g_resumed = false;
    }
    pthread_mutex_unlock(&g_lock);
}

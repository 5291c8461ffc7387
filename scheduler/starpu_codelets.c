/* One StarPU codelet per op kind, all sharing one CPU trampoline.
 *
 * The trampoline turns StarPU's buffer interfaces back into the kernel convention
 * (mg_kernel_args: node, in[], out[], exec info) and calls the op table's kernel.
 * Codelets take a variable number of buffers (modes live on each task), so an op's
 * arity is free and tasks may exceed STARPU_NMAXBUFS through dyn_handles.
 *
 * CUDA: when this StarPU is built with CUDA and an op has a CUDA kernel, the codelet
 * also gets a CUDA trampoline and STARPU_CUDA in `where`; nothing else changes (the
 * buffers then hold device pointers).
 *
 * Each op kind has a history-based performance model (what dm* policies schedule
 * with), keyed by the shapes of the node's tensors: buffers come from the memory plan
 * and are larger than the tensors in them, so StarPU's default footprint (buffer
 * sizes) would mix up different shapes.
 */
#include <pthread.h>
#include <string.h>
#include <time.h>

#include "ops/op.h"
#include "scheduler/starpu_internal.h"
#if defined(STARPU_USE_CUDA) && defined(MG_CUDA)
#include "ops/cuda/cuda_common.h"
#endif

static struct starpu_codelet g_cl[MG_OP_COUNT];
static struct starpu_perfmodel g_model[MG_OP_COUNT];
static char g_symbol[MG_OP_COUNT][48];
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void run_kernel(void *buffers[], void *cl_arg, mg_kernel_fn fn, bool on_cuda) {
    mg_task_inst *ti = cl_arg;
    mg_task_arg *a = ti->arg;
    mg_engine *e = a->e;
    const mg_node *nd = a->node;
    if (atomic_load_explicit(&e->failed, memory_order_relaxed)) return; /* the step is lost already */
    int np = nd->n_in + nd->n_out;
    for (int i = 0; i < np; i++) ti->ptrs[i] = (char *)STARPU_VECTOR_GET_PTR(buffers[a->slot[i]]) + a->at[i];
    if (e->p2p && !on_cuda && (mg_op_def_get(nd->op)->flags & MG_OPF_P2P)) {
        mg_p2p_post(e, ti); /* non-blocking: the transfer thread ends the task */
        return;
    }
    /* (a CUDA collective only queues NCCL work on its own stream: no thread needed) */
    if (e->comm_thread && !on_cuda && (mg_op_def_get(nd->op)->flags & MG_OPF_COMM)) {
        mg_comm_thread_submit(e, ti, fn); /* the worker goes back to compute */
        return;
    }
    mg_kernel_args ka = {.node = nd, .in = ti->ptrs, .out = ti->ptrs + nd->n_in, .info = &ti->info};
    mg_error kerr = {0};
    double t0 = now_s();
    int rc = fn(&ka, &kerr);
    double dt = now_s() - t0;
    int w = starpu_worker_get_id();
    if (w >= 0 && w < STARPU_NMAXWORKERS) e->busy[w] += dt; /* only worker w writes slot w */
    atomic_fetch_add_explicit(&e->tasks, 1, memory_order_relaxed);
    /* (on CUDA the span is the launch: the kernel runs on the stream afterwards) */
    if (e->trace)
        mg_trace_task(e->trace, mg_op_def_get(nd->op)->flags & MG_OPF_COMM ? e->trace_comm_lane : w, nd,
                      ti->info.mb_local, t0, t0 + dt);
    if (rc) mg_engine_record_error(e, nd, rc, &kerr);
}

static void cpu_trampoline(void *buffers[], void *cl_arg) {
    const mg_task_inst *ti = cl_arg;
    run_kernel(buffers, cl_arg, mg_op_def_get(ti->arg->node->op)->cpu, false);
}

#if defined(STARPU_USE_CUDA) && defined(MG_CUDA)
/* The kernel launches on this worker's stream; STARPU_CUDA_ASYNC lets StarPU wait
 * for the stream instead of the kernel returning after a synchronisation. */
static void cuda_trampoline(void *buffers[], void *cl_arg) {
    const mg_task_inst *ti = cl_arg;
    mg_cuda_set_stream(starpu_cuda_get_local_stream());
    run_kernel(buffers, cl_arg, mg_op_def_get(ti->arg->node->op)->cuda, true);
}
#endif

static uint32_t shape_footprint(struct starpu_task *task) {
    const mg_task_inst *ti = task->cl_arg;
    const mg_node *nd = ti->arg->node;
    uint32_t h = starpu_hash_crc32c_be((uint32_t)nd->op, 0);
    for (int i = 0; i < nd->n_in + nd->n_out; i++) {
        const mg_tensor *t = i < nd->n_in ? nd->in[i] : nd->out[i - nd->n_in];
        h = starpu_hash_crc32c_be_n(t->shape, (size_t)t->ndim * sizeof t->shape[0], h);
    }
    return h;
}

static void init_codelets(void) {
    for (int op = 0; op < MG_OP_COUNT; op++) {
        const mg_op_def *def = mg_op_def_get((mg_op)op);
        struct starpu_codelet *cl = &g_cl[op];
        starpu_codelet_init(cl);
        cl->name = mg_op_name((mg_op)op);
        cl->nbuffers = STARPU_VARIABLE_NBUFFERS;
        cl->where = 0;
        if (def && def->cpu) {
            cl->cpu_funcs[0] = cpu_trampoline;
            cl->where |= STARPU_CPU;
        }
#if defined(STARPU_USE_CUDA) && defined(MG_CUDA)
        if (def && def->cuda) {
            cl->cuda_funcs[0] = cuda_trampoline;
            cl->cuda_flags[0] = STARPU_CUDA_ASYNC;
            cl->where |= STARPU_CUDA;
        }
#endif
        snprintf(g_symbol[op], sizeof g_symbol[op], "mgraph_%s", mg_op_name((mg_op)op));
        g_model[op].type = STARPU_HISTORY_BASED;
        g_model[op].symbol = g_symbol[op];
        g_model[op].footprint = shape_footprint;
        cl->model = &g_model[op];
    }
}

struct starpu_codelet *mg_starpu_codelet(mg_op op) {
    pthread_once(&g_once, init_codelets);
    if (op < 0 || op >= MG_OP_COUNT || !g_cl[op].where) return NULL;
    return &g_cl[op];
}

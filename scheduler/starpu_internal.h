/* StarPU engine internals shared by scheduler/starpu_*.c (not installed). */
#ifndef MG_SCHEDULER_STARPU_INTERNAL_H
#define MG_SCHEDULER_STARPU_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <starpu.h>

#include "mgraph/engine.h"
#include "mgraph/pipeline.h"
#include "ops/op.h"

/* Per node, built once in mg_engine_new: the node (kernel, shapes), the engine (stats,
 * errors), and its deduplicated buffers: `bufs` are memory-plan buffer indices, mapped
 * to the handle of the right copy (micro-batch input, slot) at each submission. */
typedef struct mg_task_arg {
    mg_engine *e;
    const mg_node *node;
    int nbuf;                               /* distinct plan buffers (+ the comm token) */
    int *slot;                              /* [n_in + n_out]: index into the task's buffers */
    size_t *at;                             /* [n_in + n_out]: byte offset in it (a view's) */
    int *bufs;                              /* [nbuf]: plan buffer; -1 for the comm token */
    enum starpu_data_access_mode *modes;    /* [nbuf] */
    int priority;                           /* StarPU priority, from mg_graph_priorities */
    int level;                              /* the critical path's rank in [0, MG_PP_PRIO_LEVELS): orders a pipeline event's tasks */
} mg_task_arg;

/* Per submitted task (its cl_arg, freed by StarPU when the task ends): which node, the
 * micro-batch instance it runs for (the kernel's exec info) and scratch for the kernel's
 * buffer pointers. */
typedef struct mg_task_inst {
    mg_task_arg *arg;
    mg_exec_info info;
    void *ptrs[];                           /* [n_in + n_out] */
} mg_task_inst;

typedef struct mg_comm_thread mg_comm_thread;
typedef struct mg_p2p mg_p2p;

struct mg_engine {
    mg_graph *g;
    mg_storage *s;
    int n_nodes;
    mg_node **order;                        /* own copy of the topo order at creation */
    int n_handles;
    starpu_data_handle_t *handles;          /* one per storage buffer, registered once */
    mg_task_arg *args;                      /* [n_nodes], in topo order */
    starpu_data_handle_t *scratch;          /* [max nbuf]: handles of the task being submitted */
    /* Collectives run one at a time in the graph's order: each accesses this token RW
     * (see starpu_engine.c). NULL when the graph has no collective. */
    starpu_data_handle_t comm_token;
    void *comm_token_buf;
    /* Collectives run on this thread, not on workers (starpu_comm_thread.c); NULL when
     * the graph has none or the option is off. */
    mg_comm_thread *comm_thread;
    /* Pipeline transfers' completion thread (starpu_p2p.c); NULL when the graph has none. */
    mg_p2p *p2p;
    /* Pipeline stage: the per-micro-batch part is submitted as the schedule's events
     * (include/mgraph/pipeline.h). Per node (topo order): its model chunk and whether
     * it is in the backward half. pp_stages 1: no pipeline. */
    int pp_stages, pp_rank, pp_chunks;
    int pp_kind;                            /* mg_pp_schedule_kind */
    int *chunk;
    bool *backward;
    /* The schedule's events for the last step's micro-batch count and the micro-batches
     * they keep in flight (rebuilt only when the count changes), and the StarPU priority
     * range the events are spread over. */
    mg_pp_event *pp_events;
    int pp_events_micro, pp_in_flight;
    int prio_min, prio_max;
    mg_exec_info info;                      /* the running step's info (per task: mg_task_inst) */
    bool use_priorities;
    /* first kernel error wins; `failed` lets later tasks skip their kernels */
    pthread_mutex_t err_lock;
    atomic_int failed;
    mg_error kerr;
    /* stats of the running step: each worker adds only to its own busy slot */
    atomic_llong tasks;
    double busy[STARPU_NMAXWORKERS];
    mg_engine_stats stats;
    /* mg_engine_set_trace: where tasks are recorded (NULL: nowhere), and the lane of
     * collectives (on a worker or on the communication thread alike) */
    mg_trace *trace;
    int trace_comm_lane;
    int trace_p2p_lane;                     /* pipeline send/recv, from posting to completion */
};

/* ---- starpu_runtime.c: one StarPU per process, shared by engines ------------ */
/* Starts StarPU on first use (policy: requested, else $STARPU_SCHED, else the
 * measured default; CPU workers: ncpus, else all cores, capped by the build) or
 * joins the running instance, which must then use the same policy. */
int mg_starpu_acquire(const char *policy, int ncpus, mg_error *err);
void mg_starpu_release(void);
/* Brackets one step: workers are paused while no engine runs (see the file). */
void mg_starpu_step_begin(void);
void mg_starpu_step_submitted(void); /* every task of the step is submitted */
void mg_starpu_step_end(void);
const char *mg_starpu_policy(void);
/* CPU workers the running StarPU was asked for (STARPU_NCPU, ncpus, else the cores):
 * more than run when the build's STARPU_MAXCPUS capped them. */
int mg_starpu_cpu_wanted(void);

/* ---- starpu_codelets.c: one codelet per op kind ------------------------------ */
struct starpu_codelet *mg_starpu_codelet(mg_op op);

/* ---- starpu_priority.c -------------------------------------------------------- */
/* Maps the nodes' critical-path priorities (doubles) onto StarPU's integer range. */
int mg_starpu_map_priorities(mg_node *const *order, int n, int min_prio, int max_prio, int *out, mg_error *err);
/* A pipeline stage's task priority: the schedule's earlier events first, and within an
 * event the critical path (level in [0, MG_PP_PRIO_LEVELS)); in [min_prio, max_prio - 1],
 * max_prio being the transfers' and collectives'. */
#define MG_PP_PRIO_LEVELS 16
int mg_starpu_event_priority(int min_prio, int max_prio, int n_events, int event, int level);

/* ---- starpu_comm_thread.c ------------------------------------------------------- */
int mg_comm_thread_start(mg_engine *e, mg_error *err);
void mg_comm_thread_stop(mg_engine *e);
/* From inside a collective's task: hand the kernel over; the task ends when it is done. */
void mg_comm_thread_submit(mg_engine *e, mg_task_inst *ti, mg_kernel_fn fn);
/* Seconds the thread spent in collectives since the last call. */
double mg_comm_thread_take_busy(mg_engine *e);

/* ---- starpu_p2p.c ---------------------------------------------------------------- */
int mg_p2p_start(mg_engine *e, mg_error *err);
void mg_p2p_stop(mg_engine *e);
/* From inside a send/recv task: post the transfer; the task ends when it completes. */
void mg_p2p_post(mg_engine *e, mg_task_inst *ti);

/* Records a kernel failure (first one wins). */
void mg_engine_record_error(mg_engine *e, const mg_node *n, int rc, const mg_error *kerr);

#endif

/* Executing a graph: storage for its tensors, a reference executor and the StarPU
 * engine.
 *
 * Storage is separate from the graph (which holds no data) and from the executor, so
 * the same storage can be run by the reference executor and by StarPU, and a later
 * CUDA backend can keep device copies behind the same buffers.
 */
#ifndef MGRAPH_ENGINE_H
#define MGRAPH_ENGINE_H

#include <stddef.h>
#include <stdint.h>

#include "mgraph/exec.h"
#include "mgraph/graph.h"
#include "mgraph/memplan.h"
#include "mgraph/pipeline.h"
#include "mgraph/trace.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- storage --------------------------------------------------------------- */
typedef struct mg_storage mg_storage;

/* How many copies storage keeps of the replicated buffer kinds (mg_buffer_kind):
 * n_micro copies of MICROBATCH buffers (the most micro-batches a step may have on this
 * rank) and n_slots copies of SLOT buffers (micro-batches in flight at once). 0 means 1. */
typedef struct mg_storage_options {
    int n_micro;
    int n_slots;
    /* Another graph's storage whose parameters this one uses instead of its own: each
     * parameter with the same logical identity (key, logical shape, block) and size as
     * one of params_from's reads that buffer (an evaluation graph running on the
     * training graph's weights, without a copy). Borrowed buffers are not initialised,
     * nor freed; params_from must outlive this storage. NULL: none. */
    const mg_storage *params_from;
} mg_storage_options;

/* Allocates 64-byte-aligned host buffers for the plan's buffers (replicated as opt
 * says; NULL: one copy each). plan is borrowed and must outlive the storage. */
int mg_storage_new(mg_graph *g, const mg_memplan *plan, mg_storage **out, mg_error *err);
int mg_storage_new_ex(mg_graph *g, const mg_memplan *plan, const mg_storage_options *opt, mg_storage **out,
                      mg_error *err);
void mg_storage_free(mg_storage *s);
/* Before running this storage's graph after the lender's graph ran: makes the borrowed
 * buffers' host bytes current (the lender's engine brings them home) and drops this
 * storage's engine's device copies of them. Nothing to do without device workers. */
void mg_storage_refresh_borrowed(mg_storage *s);
/* How many buffers this storage borrows (params_from). */
int mg_storage_n_borrowed(const mg_storage *s);
/* Data of tensor t; for replicated buffers, the copy of micro-batch instance 0. */
void *mg_storage_data(const mg_storage *s, const mg_tensor *t);
/* Data of tensor t as micro-batch instance `mb` sees it (its MICROBATCH copy, its slot). */
void *mg_storage_data_mb(const mg_storage *s, const mg_tensor *t, int mb);
int mg_storage_n_micro(const mg_storage *s);
int mg_storage_n_slots(const mg_storage *s);
/* Fills parameters and state from their init specs (counter RNG, mg_rng_init_tensor). */
int mg_storage_init(mg_storage *s, uint64_t seed, mg_error *err);
/* Allocated buffers (every copy of every plan buffer), for executors that register them. */
int mg_storage_n_buffers(const mg_storage *s);
void *mg_storage_buffer(const mg_storage *s, int buffer);
size_t mg_storage_buffer_bytes(const mg_storage *s, int buffer);

/* What the storages of this process hold, all together (Megatron's report_memory and
 * --log-memory-to-tensorboard read torch's allocator; mgraph's host memory for tensors
 * is its storages: the memory plans' buffers, allocated when a storage is made and
 * kept until it is freed, so the activation peak is inside allocated_bytes from the
 * start). Borrowed buffers (params_from) count once, in their owner. */
typedef struct mg_memory_stats {
    size_t allocated_bytes;      /* the plan buffers' bytes, every copy */
    size_t max_allocated_bytes;  /* the most allocated_bytes has been in this process */
    size_t reserved_bytes;       /* what they took from the system: 64-byte lines, whole pages when mapped */
    size_t max_reserved_bytes;
    int64_t allocation_count;    /* buffers allocated now */
} mg_memory_stats;
void mg_memory_get_stats(mg_memory_stats *st);

/* ---- reference executor ------------------------------------------------------ */
/* Runs the step on the calling thread: the per-micro-batch part once per micro-batch
 * instance (info->n_micro), each time in topological order, then the once-per-step
 * part. The ground truth the StarPU engine is tested against. */
int mg_exec_reference(mg_graph *g, mg_storage *s, const mg_exec_info *info, mg_error *err);

/* ---- StarPU engine ------------------------------------------------------------ */
typedef struct mg_engine mg_engine;

typedef struct mg_engine_options {
    const char *sched_policy;  /* NULL: STARPU_SCHED, else the measured default */
    int ncpus;                 /* 0: all cores (hwloc), capped by this StarPU build */
    bool use_priorities;       /* critical-path priorities on tasks (default true) */
    /* Run collectives on a communication thread instead of a worker, so compute goes on
     * while a rank communicates (Megatron's --overlap-grad-reduce). Wins when the rank
     * has a core to spare for it; on oversubscribed cores the polling thread competes
     * with the workers (bench/RESULTS-parallel.md), hence off by default. */
    bool comm_thread;
    /* Pipeline parallelism: this rank's stage of pp_stages (0 or 1: none), its model
     * chunks, and the schedule ordering its micro-batches' forward and backward halves
     * (include/mgraph/pipeline.h). */
    int pp_stages, pp_rank, pp_chunks;
    mg_pp_schedule_kind pp_schedule;
} mg_engine_options;

typedef struct mg_engine_stats {
    int64_t tasks;             /* tasks run in the last step */
    double wall_s;             /* last step's wall time */
    int n_workers;
    /* CPU workers running, asked for (--cpu-workers / STARPU_NCPU, else the cores), and the
     * most this StarPU build runs (STARPU_MAXCPUS: 4 in Debian's): fewer running than asked
     * is worth a warning (tools/build-starpu.sh --cpus builds a StarPU without the cap) */
    int n_cpu_workers, n_cpu_wanted, cpu_cap;
    char policy[32];           /* StarPU's scheduling policy */
    double busy_s[64];         /* per worker, last step: time inside kernels */
    double idle_fraction;      /* 1 - sum(busy) / (n_workers * wall) */
    double comm_s;             /* last step: time the communication thread spent in collectives */
} mg_engine_stats;

/* Starts StarPU (once per process; reference-counted) and registers one data handle
 * per storage buffer, reused by every step. */
int mg_engine_new(mg_graph *g, mg_storage *s, const mg_engine_options *opt, mg_engine **out, mg_error *err);
/* Submits the step and waits for it: the per-micro-batch part once per instance
 * (info->n_micro; instance i in slot i % slots), the once-per-step part interleaved with
 * the last instance in topological order, so gradient reductions start as soon as the
 * last micro-batch has produced their inputs. */
int mg_engine_run(mg_engine *e, const mg_exec_info *info, mg_error *err);
void mg_engine_get_stats(const mg_engine *e, mg_engine_stats *st);
/* Records every task of the following steps in t (NULL: stop), one lane per worker
 * (lanes 0..workers-1) and one for collectives (lane `workers`), and names the lanes.
 * Between steps only. The caller brackets each step with mg_trace_step_begin/end. */
int mg_engine_set_trace(mg_engine *e, mg_trace *t, mg_error *err);
/* Unregisters the handles; shuts StarPU down with the last engine. */
void mg_engine_free(mg_engine *e);

#ifdef __cplusplus
}
#endif
#endif

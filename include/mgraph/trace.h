/* Timeline traces of executed steps: Chrome's trace event format (JSON "traceEvents"),
 * which Perfetto (https://ui.perfetto.dev) and chrome://tracing open.
 *
 * A trace records every task an engine runs while the trace is attached: one
 * complete ("X") event per task, on the lane of the thread that ran it (one lane per
 * StarPU worker, one for communication), named by op and scope ("matmul h.3.attn"),
 * with the node, its output, the micro-batch instance and, for collectives, the group
 * and the bytes this rank sends. Each traced iteration adds one event on an
 * "iterations" lane. The process is the rank (pid), so the files of several ranks can
 * be merged into one view (their clocks are CLOCK_REALTIME: aligned on one host,
 * as well as NTP keeps them across hosts).
 *
 *   mg_trace *t;  mg_trace_new(rank, &t, &err);
 *   mg_engine_set_trace(engine, t);           // names the lanes
 *   mg_trace_step_begin(t, it); mg_engine_run(...); mg_trace_step_end(t);
 *   mg_engine_set_trace(engine, NULL);
 *   mg_trace_write(t, "step.json", &err);     // through mg_outfile
 *   mg_trace_free(t);
 *
 * Recording is thread-safe (workers and the communication thread record at once) and
 * costs one uncontended lock and a few stores per task (the engine's own overhead is
 * ~4 us per task). The recorded nodes must outlive the trace's write.
 */
#ifndef MGRAPH_TRACE_H
#define MGRAPH_TRACE_H

#include <stdint.h>

#include "mgraph/error.h"
#include "mgraph/graph.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mg_trace mg_trace;

/* A trace of rank `rank` (the events' pid). */
int mg_trace_new(int rank, mg_trace **out, mg_error *err);
void mg_trace_free(mg_trace *t);

/* Names lane `lane` (0..255; the events' tid); lanes show in index order. */
int mg_trace_set_lane(mg_trace *t, int lane, const char *name, mg_error *err);

/* Brackets one iteration (0-based, as mg_exec_info.iteration; shown 1-based as in the
 * log line): its tasks carry it, and the bracket becomes the iteration's event. */
void mg_trace_step_begin(mg_trace *t, int64_t iteration);
void mg_trace_step_end(mg_trace *t);

/* Records one executed task: node n as micro-batch instance mb (-1: once per step),
 * on `lane`, from t0 to t1 (seconds of CLOCK_MONOTONIC, as mg_trace_now). Any thread. */
void mg_trace_task(mg_trace *t, int lane, const mg_node *n, int mb, double t0, double t1);
double mg_trace_now(void);

/* Tasks recorded so far (all iterations). */
int64_t mg_trace_n_tasks(const mg_trace *t);

/* Writes the JSON to path through mg_outfile (whole or not at all). Out of memory
 * while recording is reported here (MG_ERR_NOMEM), not silently dropped. */
int mg_trace_write(const mg_trace *t, const char *path, mg_error *err);

#ifdef __cplusplus
}
#endif
#endif

/* mgraph-run's --trace-file / --trace-iterations (include/mgraph/trace.h records). */
#ifndef MG_TOOLS_RUN_TRACE_H
#define MG_TOOLS_RUN_TRACE_H

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>

#include "mgraph/engine.h"
#include "mgraph/trace.h"

typedef struct mg_run_trace {
    mg_trace *t;             /* NULL: no tracing */
    int64_t first, last;     /* iterations traced, 1-based as in the log line, inclusive */
    char path[PATH_MAX];     /* --trace-file with %r replaced */
} mg_run_trace;

/* Usage checks, before anything runs: --trace-iterations parses ("A" or "A:B", 1 <= A
 * <= B <= --train-iters), --trace-file has %r under mpirun and fits a path, the engine
 * is StarPU's. */
int mg_run_trace_check(const char *file, const char *iterations, int64_t train_iters, int world, bool starpu,
                       mg_error *err);
/* Starts the trace of this rank; `start` is the iteration training resumes after
 * (0 without --load): the default range is the run's second iteration (its first
 * when it runs one), and a range outside start+1..train_iters is a usage error. */
int mg_run_trace_open(mg_run_trace *rt, const char *file, const char *iterations, int64_t start, int64_t train_iters,
                      int rank, mg_error *err);
/* Around the engine's run of 0-based iteration `it`: attach and bracket when it is in
 * the range; after the range's last iteration, detach and write the file. */
int mg_run_trace_before(mg_run_trace *rt, mg_engine *e, int64_t it, mg_error *err);
int mg_run_trace_after(mg_run_trace *rt, mg_engine *e, int64_t it, mg_error *err);
/* The run ends early after 0-based iteration `it` (--exit-interval, --exit-duration-in-mins,
 * the exit signal): a trace under way is written with the iterations it has, and one that
 * has not begun is reported as not written. `say` prints the note (the logging rank). */
int mg_run_trace_end_early(mg_run_trace *rt, mg_engine *e, int64_t it, bool say, mg_error *err);
void mg_run_trace_close(mg_run_trace *rt);

#endif

/* Timeline traces (include/mgraph/trace.h): recording from the engine's threads and
 * the Chrome trace event JSON.
 *
 * Recording appends (node, lane, instance, times) to one array under a mutex: tasks
 * last tens of microseconds at least, so an uncontended lock per task is noise, and
 * one array keeps the order of completion. Formatting waits for mg_trace_write, off
 * the step. Events are written one by one with jansson (which escapes the names), so
 * the file never exists as one tree in memory.
 *
 * Format (https://docs.google.com/document/d/1CvAClvFfyA5R-PhYUmn5OOQtYMH4h6I0nSsKchNAySU):
 * "X" complete events with ts/dur in microseconds, pid = rank, tid = lane; "M"
 * metadata events name the process and the lanes and fix the lanes' order.
 */
#include "mgraph/trace.h"

#include <jansson.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mgraph/outfile.h"
#include "ops/op.h"

#define MAX_LANES 256

typedef struct trace_event {
    const mg_node *node;
    int lane, mb;
    int64_t iteration;
    double t0, t1;
} trace_event;

typedef struct trace_step {
    int64_t iteration;
    double t0, t1;
} trace_step;

struct mg_trace {
    int rank;
    double clock_offset;      /* CLOCK_REALTIME - CLOCK_MONOTONIC at creation, seconds */
    pthread_mutex_t mu;
    trace_event *ev;
    int64_t n_ev, cap_ev;
    trace_step *steps;
    int n_steps, cap_steps;
    int64_t iteration;        /* of the bracket open now; -1 outside */
    int max_lane;             /* highest lane used or named */
    char *lane_name[MAX_LANES];
    bool oom;                 /* an event could not be stored: the write fails */
};

static double clock_s(clockid_t id) {
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

double mg_trace_now(void) { return clock_s(CLOCK_MONOTONIC); }

int mg_trace_new(int rank, mg_trace **out, mg_error *err) {
    *out = NULL;
    mg_trace *t = calloc(1, sizeof *t);
    if (!t) return mg_error_set(err, MG_ERR_NOMEM, "out of memory creating a trace");
    t->rank = rank;
    t->clock_offset = clock_s(CLOCK_REALTIME) - clock_s(CLOCK_MONOTONIC);
    t->iteration = -1;
    t->max_lane = -1;
    pthread_mutex_init(&t->mu, NULL);
    *out = t;
    return MG_OK;
}

void mg_trace_free(mg_trace *t) {
    if (!t) return;
    for (int i = 0; i < MAX_LANES; i++) free(t->lane_name[i]);
    free(t->ev);
    free(t->steps);
    pthread_mutex_destroy(&t->mu);
    free(t);
}

int mg_trace_set_lane(mg_trace *t, int lane, const char *name, mg_error *err) {
    if (lane < 0 || lane >= MAX_LANES)
        return mg_error_set(err, MG_ERR_INVALID, "trace lane %d outside 0..%d", lane, MAX_LANES - 1);
    char *copy = strdup(name ? name : "");
    if (!copy) return mg_error_set(err, MG_ERR_NOMEM, "out of memory naming a trace lane");
    pthread_mutex_lock(&t->mu);
    free(t->lane_name[lane]);
    t->lane_name[lane] = copy;
    if (lane > t->max_lane) t->max_lane = lane;
    pthread_mutex_unlock(&t->mu);
    return MG_OK;
}

void mg_trace_step_begin(mg_trace *t, int64_t iteration) {
    pthread_mutex_lock(&t->mu);
    if (t->n_steps == t->cap_steps) {
        int cap = t->cap_steps ? 2 * t->cap_steps : 8;
        trace_step *s = realloc(t->steps, (size_t)cap * sizeof *s);
        if (!s) {
            t->oom = true;
            pthread_mutex_unlock(&t->mu);
            return;
        }
        t->steps = s;
        t->cap_steps = cap;
    }
    double now = mg_trace_now();
    t->steps[t->n_steps++] = (trace_step){iteration, now, now};
    t->iteration = iteration;
    pthread_mutex_unlock(&t->mu);
}

void mg_trace_step_end(mg_trace *t) {
    pthread_mutex_lock(&t->mu);
    if (t->n_steps && t->iteration >= 0) t->steps[t->n_steps - 1].t1 = mg_trace_now();
    t->iteration = -1;
    pthread_mutex_unlock(&t->mu);
}

void mg_trace_task(mg_trace *t, int lane, const mg_node *n, int mb, double t0, double t1) {
    pthread_mutex_lock(&t->mu);
    if (t->n_ev == t->cap_ev) {
        int64_t cap = t->cap_ev ? 2 * t->cap_ev : 4096;
        trace_event *e = realloc(t->ev, (size_t)cap * sizeof *e);
        if (!e) {
            t->oom = true;
            pthread_mutex_unlock(&t->mu);
            return;
        }
        t->ev = e;
        t->cap_ev = cap;
    }
    if (lane < 0 || lane >= MAX_LANES) lane = MAX_LANES - 1;
    if (lane > t->max_lane) t->max_lane = lane;
    t->ev[t->n_ev++] = (trace_event){n, lane, mb, t->iteration, t0, t1};
    pthread_mutex_unlock(&t->mu);
}

int64_t mg_trace_n_tasks(const mg_trace *t) { return t->n_ev; }

/* ---- writing ---------------------------------------------------------------------- */
static double us(const mg_trace *t, double s) { return (s + t->clock_offset) * 1e6; }

/* Appends one event object (stolen) to the array being written; false on a failed write. */
static bool put(FILE *f, json_t *o, bool *first) {
    if (!o) return false;
    bool ok = fputs(*first ? "\n" : ",\n", f) >= 0 && json_dumpf(o, f, JSON_COMPACT | JSON_REAL_PRECISION(17)) == 0;
    json_decref(o);
    *first = false;
    return ok;
}

static json_t *meta(const mg_trace *t, const char *what, int tid, json_t *args) {
    json_t *o = json_pack("{s:s, s:s, s:i, s:o}", "name", what, "ph", "M", "pid", t->rank, "args", args);
    if (o && tid >= 0) json_object_set_new(o, "tid", json_integer(tid));
    return o;
}

static json_t *task_event(const mg_trace *t, const trace_event *e) {
    const mg_node *n = e->node;
    const char *op = mg_op_name(n->op);
    char name[256];
    if (n->scope && n->scope[0]) snprintf(name, sizeof name, "%s %s", op, n->scope);
    else snprintf(name, sizeof name, "%s", op);
    bool comm = mg_op_def_get(n->op)->flags & MG_OPF_COMM;
    static const char *const phase[] = {"forward", "backward", "optimizer"};
    const char *cat = comm ? "collective" : (unsigned)n->phase < 3 ? phase[n->phase] : "compute";
    double flops = 0, bytes = 0;
    mg_op_cost(n, &flops, &bytes);
    json_t *args = json_pack("{s:i, s:s, s:I, s:i}", "node", n->id, "out", n->n_out ? n->out[0]->name : "", "iteration",
                             (json_int_t)(e->iteration + 1), "mb", e->mb);
    if (args && comm) {
        /* a recv has no input: its payload is what it receives */
        const mg_tensor *pt = n->n_in ? n->in[0] : n->n_out ? n->out[0] : NULL;
        double payload = pt ? (double)mg_tensor_bytes(pt) : 0;
        json_object_set_new(args, "group", json_string(mg_group_name(n->attrs.comm.group)));
        json_object_set_new(args, "ranks", json_integer(n->attrs.comm.nranks));
        json_object_set_new(args, "payload_bytes", json_integer((json_int_t)payload));
        json_object_set_new(args, "bytes", json_integer((json_int_t)(bytes + 0.5))); /* sent by this rank (ring) */
    } else if (args) {
        json_object_set_new(args, "flops", json_real(flops));
    }
    return json_pack("{s:s, s:s, s:s, s:i, s:i, s:f, s:f, s:o}", "name", name, "cat", cat, "ph", "X", "pid", t->rank,
                     "tid", e->lane, "ts", us(t, e->t0), "dur", (e->t1 - e->t0) * 1e6, "args", args);
}

int mg_trace_write(const mg_trace *t, const char *path, mg_error *err) {
    if (t->oom) return mg_error_set(err, MG_ERR_NOMEM, "--trace-file %s: ran out of memory recording the trace", path);
    mg_outfile *of;
    int rc = mg_outfile_open(path, "--trace-file", NULL, &of, err);
    if (rc) return rc;
    FILE *f = mg_outfile_stream(of);
    bool ok = fputs("{\"displayTimeUnit\": \"ms\", \"traceEvents\": [", f) >= 0, first = true;
    char pname[64];
    snprintf(pname, sizeof pname, "rank %d", t->rank);
    ok = ok && put(f, meta(t, "process_name", -1, json_pack("{s:s}", "name", pname)), &first);
    ok = ok && put(f, meta(t, "process_sort_index", -1, json_pack("{s:i}", "sort_index", t->rank)), &first);
    int steps_lane = t->max_lane + 1; /* after every lane in use */
    for (int l = 0; l <= steps_lane && ok; l++) {
        const char *nm = l == steps_lane ? "iterations" : t->lane_name[l];
        if (!nm) continue;
        ok = put(f, meta(t, "thread_name", l, json_pack("{s:s}", "name", nm)), &first) &&
             put(f, meta(t, "thread_sort_index", l, json_pack("{s:i}", "sort_index", l)), &first);
    }
    for (int i = 0; i < t->n_steps && ok; i++) {
        const trace_step *s = &t->steps[i];
        char nm[64];
        snprintf(nm, sizeof nm, "iteration %lld", (long long)s->iteration + 1);
        ok = put(f,
                 json_pack("{s:s, s:s, s:s, s:i, s:i, s:f, s:f, s:{s:I}}", "name", nm, "cat", "iteration", "ph", "X",
                           "pid", t->rank, "tid", steps_lane, "ts", us(t, s->t0), "dur", (s->t1 - s->t0) * 1e6, "args",
                           "iteration", (json_int_t)(s->iteration + 1)),
                 &first);
    }
    for (int64_t i = 0; i < t->n_ev && ok; i++) ok = put(f, task_event(t, &t->ev[i]), &first);
    ok = ok && fputs("\n]}\n", f) >= 0;
    if (!ok) {
        /* the stream's own error (ENOSPC, EIO) when there is one, else jansson ran out of memory */
        if (!mg_outfile_flush(of, err)) mg_error_set(err, MG_ERR_NOMEM, "--trace-file %s: out of memory formatting the trace", path);
        mg_outfile_abort(of);
        return err->code;
    }
    return mg_outfile_commit(of, err);
}

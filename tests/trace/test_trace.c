/* Timeline traces (include/mgraph/trace.h, --trace-file).
 *
 *   test_trace engine_gpt2 WORKDIR   a GPT-2 training step (2 micro-batches) on 2
 *       StarPU workers, two traced iterations: the file is valid JSON, holds exactly
 *       one event per executed task (the engine's task count, and each node once per
 *       micro-batch instance and iteration), lanes are named and never overlap.
 *   test_trace write_errors WORKDIR  a write that cannot succeed fails with a message
 *       and leaves nothing behind; an existing file survives a failed write.
 *   test_trace check FILE TASKS COLLECTIVES   validates an mgraph-run trace (trace.sh):
 *       TASKS task events (2 iterations' worth), COLLECTIVES: 1 if collectives with
 *       bytes must be there, on the communication lane.
 *   test_trace pp_first FILE   the trace of a first pipeline stage with one worker
 *       (pipeline_order.sh): in every iteration, micro-batch i's activation is sent
 *       before any forward task of micro-batch i+1 starts, i.e. the stage finishes the
 *       forward its schedule puts first instead of advancing micro-batches together.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mgraph/engine.h"
#include "mgraph/memplan.h"
#include "mgraph/model.h"
#include "mgraph/trace.h"
#include "testkit.h"

static const char *g_dir = ".";

typedef struct ev {
    int tid, node, mb;
    long long iteration;
    double ts, dur;
    char cat;  /* f(orward), b(ackward), o(ptimizer), c(ollective) */
    bool send; /* a pipeline send */
} ev;

static int cmp_lane_ts(const void *a, const void *b) {
    const ev *x = a, *y = b;
    if (x->tid != y->tid) return x->tid < y->tid ? -1 : 1;
    return x->ts < y->ts ? -1 : x->ts > y->ts;
}
static int cmp_key(const void *a, const void *b) {
    const ev *x = a, *y = b;
    if (x->iteration != y->iteration) return x->iteration < y->iteration ? -1 : 1;
    if (x->node != y->node) return x->node < y->node ? -1 : 1;
    return (x->mb > y->mb) - (x->mb < y->mb);
}

/* Validates the file's structure; returns its task events (caller frees), or NULL. */
static ev *load_trace(const char *path, int64_t *n_out, int *n_collectives, int *n_iterations) {
    json_error_t je;
    json_t *root = json_load_file(path, 0, &je);
    TK_CHECK(root, "%s is not valid JSON: line %d: %s", path, je.line, je.text);
    if (!root) return NULL;
    json_t *events = json_object_get(root, "traceEvents");
    TK_CHECK(json_is_array(events), "%s: no traceEvents array", path);
    size_t n = json_array_size(events);
    ev *out = calloc(n + 1, sizeof *out);
    char *lane_name[300] = {0};
    int64_t k = 0;
    int comm_lane = -1, iter_lane = -1, p2p_lane = -1, pid = -1;
    bool process_named = false;
    *n_collectives = *n_iterations = 0;
    for (size_t i = 0; i < n; i++) { /* metadata first: lanes' names */
        json_t *e = json_array_get(events, i);
        const char *ph = json_string_value(json_object_get(e, "ph"));
        const char *nm = json_string_value(json_object_get(e, "name"));
        TK_CHECK(ph && nm, "%s: event %zu lacks ph or name", path, i);
        if (!ph || !nm || strcmp(ph, "M")) continue;
        const char *an = json_string_value(json_object_get(json_object_get(e, "args"), "name"));
        if (!strcmp(nm, "process_name")) process_named = an && !strncmp(an, "rank ", 5);
        if (!strcmp(nm, "thread_name")) {
            int tid = (int)json_integer_value(json_object_get(e, "tid"));
            TK_CHECK(an && tid >= 0 && tid < 300, "%s: bad thread_name event", path);
            if (!an || tid < 0 || tid >= 300) continue;
            lane_name[tid] = strdup(an);
            if (!strncmp(an, "communication", 13)) comm_lane = tid;
            if (!strcmp(an, "iterations")) iter_lane = tid;
            if (!strncmp(an, "transfers", 9)) p2p_lane = tid;
        }
    }
    TK_CHECK(process_named, "%s: no process_name \"rank N\"", path);
    TK_CHECK(comm_lane >= 0 && iter_lane >= 0, "%s: no communication or iterations lane", path);
    for (size_t i = 0; i < n; i++) {
        json_t *e = json_array_get(events, i), *args = json_object_get(e, "args");
        const char *ph = json_string_value(json_object_get(e, "ph"));
        if (!ph || strcmp(ph, "X")) continue;
        const char *cat = json_string_value(json_object_get(e, "cat"));
        const char *nm = json_string_value(json_object_get(e, "name"));
        json_t *ts = json_object_get(e, "ts"), *dur = json_object_get(e, "dur");
        int tid = (int)json_integer_value(json_object_get(e, "tid"));
        int p = (int)json_integer_value(json_object_get(e, "pid"));
        TK_CHECK(cat && nm && json_is_number(ts) && json_is_number(dur) && json_number_value(dur) >= 0 &&
                     json_is_object(args),
                 "%s: event %zu: want cat, name, ts, dur >= 0, args", path, i);
        TK_CHECK(pid < 0 || p == pid, "%s: events of several pids", path);
        pid = p;
        if (!cat || !nm || !json_is_object(args)) continue;
        if (!strcmp(cat, "iteration")) {
            TK_CHECK(tid == iter_lane, "%s: iteration event off the iterations lane", path);
            ++*n_iterations;
            continue;
        }
        TK_CHECK(tid >= 0 && tid < 300 && lane_name[tid] && tid != iter_lane, "%s: task %s on unnamed lane %d", path,
                 nm, tid);
        ev x = {tid, (int)json_integer_value(json_object_get(args, "node")),
                (int)json_integer_value(json_object_get(args, "mb")),
                (long long)json_integer_value(json_object_get(args, "iteration")), json_number_value(ts),
                json_number_value(dur), cat[0], !strncmp(nm, "send", 4)};
        TK_CHECK(json_is_integer(json_object_get(args, "node")) && json_is_integer(json_object_get(args, "mb")) &&
                     x.iteration >= 1,
                 "%s: task %s lacks node/mb/iteration", path, nm);
        if (!strcmp(cat, "collective")) {
            ++*n_collectives;
            json_int_t bytes = json_integer_value(json_object_get(args, "bytes"));
            json_int_t payload = json_integer_value(json_object_get(args, "payload_bytes"));
            int ranks = (int)json_integer_value(json_object_get(args, "ranks"));
            bool p2p = !strncmp(nm, "send", 4) || !strncmp(nm, "recv", 4);
            TK_CHECK(tid == (p2p ? p2p_lane : comm_lane), "%s: %s off the %s lane", path, nm,
                     p2p ? "transfers" : "communication");
            /* a recv sends nothing: its payload is what it receives */
            TK_CHECK(json_is_string(json_object_get(args, "group")) && (ranks <= 1 || (p2p ? payload : bytes) > 0),
                     "%s: collective %s without group or bytes", path, nm);
        } else {
            TK_CHECK(tid != comm_lane, "%s: compute task %s on the communication lane", path, nm);
            TK_CHECK(!strcmp(cat, "forward") || !strcmp(cat, "backward") || !strcmp(cat, "optimizer"),
                     "%s: task %s has category %s", path, nm, cat);
        }
        out[k++] = x;
    }
    /* a lane is one thread: its tasks never overlap (0.01 us: the clock's print
     * precision); transfers are in flight together by design */
    qsort(out, (size_t)k, sizeof *out, cmp_lane_ts);
    for (int64_t i = 1; i < k; i++)
        if (out[i].tid == out[i - 1].tid && out[i].tid != p2p_lane)
            TK_CHECK(out[i - 1].ts + out[i - 1].dur <= out[i].ts + 0.01,
                     "%s: tasks overlap on lane %d (node %d ends at %.3f, node %d starts at %.3f)", path, out[i].tid,
                     out[i - 1].node, out[i - 1].ts + out[i - 1].dur, out[i].node, out[i].ts);
    /* one event per executed task: no (iteration, node, instance) twice */
    qsort(out, (size_t)k, sizeof *out, cmp_key);
    for (int64_t i = 1; i < k; i++)
        TK_CHECK(cmp_key(&out[i - 1], &out[i]) != 0, "%s: node %d mb %d of iteration %lld recorded twice", path,
                 out[i].node, out[i].mb, out[i].iteration);
    for (int i = 0; i < 300; i++) free(lane_name[i]);
    json_decref(root);
    *n_out = k;
    return out;
}

static void test_engine_gpt2(void) {
    mg_step_config c = tk_small_gpt(2, 64, 4, 32, 128, 2, 2); /* 2 micro-batches, dropout on */
    c.model.max_position = 64;
    mg_step st;
    mg_error err = {0};
    int rc = mg_step_build(&c, &st, &err);
    TK_CHECK(rc == MG_OK, "gpt2 step: %s", err.msg);
    if (rc) return;
    mg_memplan *plan = NULL;
    mg_storage *s = NULL;
    mg_engine *e = NULL;
    mg_trace *t = NULL;
    mg_storage_options so = {.n_micro = st.n_micro, .n_slots = 2};
    rc = mg_memplan_build(st.g, true, &plan, &err);
    if (!rc) rc = mg_storage_new_ex(st.g, plan, &so, &s, &err);
    if (!rc) rc = mg_storage_init(s, 5, &err);
    mg_engine_options eo = {.ncpus = 2, .use_priorities = true};
    if (!rc) rc = mg_engine_new(st.g, s, &eo, &e, &err);
    if (!rc) rc = mg_trace_new(3, &t, &err);
    TK_CHECK(rc == MG_OK, "setup: %s", err.msg);
    int64_t tasks = 0;
    /* iteration 0 untraced, 1 and 2 traced, 3 untraced again */
    for (int it = 0; it < 4 && !rc; it++) {
        if (it == 1) rc = mg_engine_set_trace(e, t, &err);
        if (it == 3) rc = mg_engine_set_trace(e, NULL, &err);
        if (it == 1 || it == 2) mg_trace_step_begin(t, it);
        mg_exec_info info = {.seed = 7, .iteration = it, .training = true, .n_micro = st.n_micro};
        if (!rc) rc = mg_engine_run(e, &info, &err);
        if (it == 1 || it == 2) mg_trace_step_end(t);
        TK_CHECK(rc == MG_OK, "step %d: %s", it, err.msg);
        mg_engine_stats es;
        mg_engine_get_stats(e, &es);
        if (it == 1 || it == 2) tasks += es.tasks;
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/gpt2.json", g_dir);
    unlink(path);
    if (!rc) rc = mg_trace_write(t, path, &err);
    TK_CHECK(rc == MG_OK, "write: %s", err.msg);
    TK_CHECK(mg_trace_n_tasks(t) == tasks, "recorded %lld tasks, the engine ran %lld",
             (long long)mg_trace_n_tasks(t), (long long)tasks);
    int64_t n = 0;
    int n_coll = 0, n_it = 0;
    ev *evs = rc ? NULL : load_trace(path, &n, &n_coll, &n_it);
    if (evs) {
        TK_CHECK(n == tasks, "%lld task events in the file, the engine ran %lld tasks", (long long)n, (long long)tasks);
        TK_CHECK(n_it == 2, "%d iteration events, want 2", n_it);
        /* exactly the step's tasks: per iteration, each per-micro-batch node once per
         * instance, each once-per-step node once */
        int64_t want = 0;
        for (int i = 0; i < mg_graph_n_nodes(st.g); i++) want += mg_graph_node(st.g, i)->mb >= 0 ? st.n_micro : 1;
        TK_CHECK(n == 2 * want, "%lld task events, the graph has %lld tasks per step", (long long)n, (long long)want);
        for (int64_t i = 0; i < n; i++) {
            const mg_node *nd = evs[i].node >= 0 && evs[i].node < mg_graph_n_nodes(st.g) ? mg_graph_node(st.g, evs[i].node) : NULL;
            TK_CHECK(nd && (nd->mb >= 0 ? evs[i].mb >= 0 && evs[i].mb < st.n_micro : evs[i].mb == -1) &&
                         (evs[i].iteration == 2 || evs[i].iteration == 3),
                     "event of node %d mb %d iteration %lld is no task of the traced steps", evs[i].node, evs[i].mb,
                     evs[i].iteration);
        }
        printf("gpt2: %lld task events over 2 iterations (%lld per step), %d nodes\n", (long long)n, (long long)want,
               mg_graph_n_nodes(st.g));
    }
    free(evs);
    mg_trace_free(t);
    mg_engine_free(e);
    mg_storage_free(s);
    mg_memplan_free(plan);
    mg_step_release(&st);
}

static void test_write_errors(void) {
    mg_trace *t = NULL;
    mg_error err = {0};
    TK_CHECK(mg_trace_new(0, &t, &err) == MG_OK, "new: %s", err.msg);
    if (!t) return;
    mg_trace_step_begin(t, 0);
    mg_trace_step_end(t);
    char path[4096];
    snprintf(path, sizeof path, "%s/no/such/dir/t.json", g_dir);
    int rc = mg_trace_write(t, path, &err);
    TK_CHECK(rc == MG_ERR_IO && strstr(err.msg, "--trace-file"), "missing directory: rc %d, '%s'", rc, err.msg);
    mg_error_clear(&err);
    if (access("/dev/full", W_OK) == 0) {
        rc = mg_trace_write(t, "/dev/full", &err);
        TK_CHECK(rc == MG_ERR_RUNTIME && strstr(err.msg, "No space left"), "/dev/full: rc %d, '%s'", rc, err.msg);
        TK_CHECK(access("/dev/full", F_OK) == 0, "/dev/full was removed");
    }
    /* a good write of an empty trace is valid JSON with no task */
    snprintf(path, sizeof path, "%s/empty.json", g_dir);
    unlink(path);
    rc = mg_trace_write(t, path, &err);
    TK_CHECK(rc == MG_OK, "empty trace: %s", err.msg);
    json_error_t je;
    json_t *root = json_load_file(path, 0, &je);
    TK_CHECK(root && json_array_size(json_object_get(root, "traceEvents")) > 0, "empty trace not valid: %s", je.text);
    json_decref(root);
    mg_trace_free(t);
}

/* See pp_first above. With one worker this is exact, not a timing bound: the first
 * chunk's forward of micro-batch i never waits on a transfer on the first stage, so
 * under event priorities a ready task of it (or its send) always outranks micro-batch
 * i+1's. With model chunks, micro-batch i's first send is its first chunk's. */
static void check_pp_first(const char *path) {
    int64_t n = 0;
    int n_coll = 0, n_it = 0, checked = 0;
    ev *e = load_trace(path, &n, &n_coll, &n_it);
    if (!e) return;
    for (int64_t s = 0; s < n; s++) {
        bool first = e[s].send;
        for (int64_t o = 0; o < n && first; o++) /* the first send of its micro-batch */
            first = !(e[o].send && e[o].iteration == e[s].iteration && e[o].mb == e[s].mb && e[o].ts < e[s].ts);
        if (!first) continue;
        for (int64_t k = 0; k < n; k++) {
            if (e[k].iteration != e[s].iteration || e[k].mb != e[s].mb + 1 || e[k].cat != 'f') continue;
            TK_CHECK(e[k].ts >= e[s].ts, "%s: iteration %lld: node %d of micro-batch %d starts %.1f us before "
                     "micro-batch %d's activation is sent", path, e[k].iteration, e[k].node, e[k].mb,
                     e[s].ts - e[k].ts, e[s].mb);
            checked++;
        }
    }
    TK_CHECK(checked > 0, "%s: no pipeline send followed by another micro-batch's forward", path);
    printf("%s: %d forward tasks start after the previous micro-batch's first send\n", path, checked);
    free(e);
}

int main(int argc, char **argv) {
    if (argc == 3 && !strcmp(argv[1], "pp_first")) {
        check_pp_first(argv[2]);
        return tk_failures ? 1 : 0;
    }
    if (argc == 5 && !strcmp(argv[1], "check")) {
        int64_t n = 0, want = atoll(argv[3]);
        int n_coll = 0, n_it = 0;
        ev *evs = load_trace(argv[2], &n, &n_coll, &n_it);
        if (evs) {
            TK_CHECK(n == want, "%s: %lld task events, want %lld", argv[2], (long long)n, (long long)want);
            TK_CHECK(!atoi(argv[4]) || n_coll > 0, "%s: no collective", argv[2]);
            printf("%s: %lld task events, %d collectives, %d iterations\n", argv[2], (long long)n, n_coll, n_it);
        }
        free(evs);
        return tk_failures ? 1 : 0;
    }
    if (argc >= 3) g_dir = argv[2];
    static const tk_case cases[] = {{"engine_gpt2", test_engine_gpt2}, {"write_errors", test_write_errors}};
    return tk_main(argc > 2 ? 2 : argc, argv, cases, sizeof cases / sizeof *cases);
}

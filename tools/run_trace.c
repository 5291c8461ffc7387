/* --trace-file FILE (%r: the rank) and --trace-iterations A[:B]: a Chrome/Perfetto
 * timeline of the chosen training iterations, written when the last one has run (a
 * later failure does not lose it; memory holds only the chosen iterations).
 *
 * Default range: the run's second iteration. The first one is not representative:
 * it touches every buffer for the first time (page faults), and StarPU's performance
 * models start empty. */
#include "run_trace.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int parse_range(const char *s, int64_t *a, int64_t *b, mg_error *err) {
    long long x, y;
    int n = 0;
    if (sscanf(s, "%lld%n", &x, &n) == 1 && s[n] == '\0') y = x;
    else if (!(sscanf(s, "%lld:%lld%n", &x, &y, &n) == 2 && s[n] == '\0'))
        return mg_error_set(err, MG_ERR_INVALID, "--trace-iterations '%s': want A or A:B (iterations, 1-based)", s);
    if (x < 1 || y < x)
        return mg_error_set(err, MG_ERR_INVALID, "--trace-iterations '%s': want 1 <= A <= B", s);
    *a = x;
    *b = y;
    return MG_OK;
}

static int rank_path(const char *pattern, int rank, char *out, size_t len, mg_error *err) {
    size_t o = 0;
    for (const char *p = pattern; *p; p++) {
        if (o + 16 >= len) return mg_error_set(err, MG_ERR_INVALID, "--trace-file path is longer than %zu bytes", len - 16);
        if (p[0] == '%' && p[1] == 'r') {
            o += (size_t)snprintf(out + o, len - o, "%d", rank);
            p++;
        } else {
            out[o++] = *p;
        }
    }
    out[o] = '\0';
    return MG_OK;
}

int mg_run_trace_check(const char *file, const char *iterations, int64_t train_iters, int world, bool starpu,
                       mg_error *err) {
    if (!file) {
        if (iterations) return mg_error_set(err, MG_ERR_INVALID, "--trace-iterations needs --trace-file");
        return MG_OK;
    }
    if (!file[0]) return mg_error_set(err, MG_ERR_INVALID, "--trace-file: empty path");
    if (!starpu)
        return mg_error_set(err, MG_ERR_INVALID, "--trace-file traces the StarPU engine's tasks (not --engine reference)");
    if (world > 1 && !strstr(file, "%r"))
        return mg_error_set(err, MG_ERR_INVALID,
                            "--trace-file %s under mpirun: every rank writes its trace, put %%r (the rank) in the name",
                            file);
    char path[PATH_MAX];
    int rc = rank_path(file, 1 << 20, path, sizeof path, err);
    int64_t a, b;
    if (!rc && iterations && !(rc = parse_range(iterations, &a, &b, err)) && b > train_iters)
        rc = mg_error_set(err, MG_ERR_INVALID, "--trace-iterations %s: the run has %lld training iterations", iterations,
                          (long long)train_iters);
    return rc;
}

int mg_run_trace_open(mg_run_trace *rt, const char *file, const char *iterations, int64_t start, int64_t train_iters,
                      int rank, mg_error *err) {
    memset(rt, 0, sizeof *rt);
    if (!file) return MG_OK;
    int rc = rank_path(file, rank, rt->path, sizeof rt->path, err);
    if (rc) return rc;
    if (iterations) {
        if ((rc = parse_range(iterations, &rt->first, &rt->last, err))) return rc;
        if (rt->first <= start || rt->last > train_iters)
            return mg_error_set(err, MG_ERR_INVALID, "--trace-iterations %s: this run trains iterations %lld..%lld",
                                iterations, (long long)start + 1, (long long)train_iters);
    } else {
        if (start >= train_iters) return MG_OK; /* nothing to train, nothing to trace */
        rt->first = rt->last = start + 2 <= train_iters ? start + 2 : start + 1;
    }
    /* the directory is checked now, not when the trace is written after training */
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s", rt->path);
    char *slash = strrchr(dir, '/');
    if (!slash) snprintf(dir, sizeof dir, ".");
    else if (slash == dir) dir[1] = '\0';
    else *slash = '\0';
    struct stat st;
    errno = 0;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode) || access(dir, W_OK | X_OK) != 0)
        return mg_error_set(err, MG_ERR_IO, "cannot write --trace-file %s: its directory %s: %s", rt->path, dir,
                            errno ? strerror(errno) : "not a directory");
    return mg_trace_new(rank, &rt->t, err);
}

int mg_run_trace_before(mg_run_trace *rt, mg_engine *e, int64_t it, mg_error *err) {
    if (!rt->t || it + 1 < rt->first || it + 1 > rt->last) return MG_OK;
    if (!e) return mg_error_set(err, MG_ERR_INVALID, "--trace-file traces the StarPU engine's tasks (not --engine reference)");
    int rc = it + 1 == rt->first ? mg_engine_set_trace(e, rt->t, err) : MG_OK;
    if (!rc) mg_trace_step_begin(rt->t, it);
    return rc;
}

int mg_run_trace_after(mg_run_trace *rt, mg_engine *e, int64_t it, mg_error *err) {
    if (!rt->t || it + 1 < rt->first || it + 1 > rt->last) return MG_OK;
    mg_trace_step_end(rt->t);
    if (it + 1 < rt->last) return MG_OK;
    mg_engine_set_trace(e, NULL, err);
    int rc = mg_trace_write(rt->t, rt->path, err);
    mg_trace_free(rt->t);
    rt->t = NULL;
    return rc;
}

int mg_run_trace_end_early(mg_run_trace *rt, mg_engine *e, int64_t it, bool say, mg_error *err) {
    if (!rt->t) return MG_OK;
    if (it + 1 < rt->first) {
        if (say)
            printf("mgraph-run: --trace-file %s not written: the run ended at iteration %lld, before the traced "
                   "iterations %lld..%lld\n", rt->path, (long long)it + 1, (long long)rt->first, (long long)rt->last);
        mg_run_trace_close(rt);
        return MG_OK;
    }
    mg_engine_set_trace(e, NULL, err);
    int rc = mg_trace_write(rt->t, rt->path, err);
    if (!rc && say)
        printf("mgraph-run: --trace-file %s holds iterations %lld..%lld of %lld..%lld: the run ended early\n", rt->path,
               (long long)rt->first, (long long)it + 1, (long long)rt->first, (long long)rt->last);
    mg_run_trace_close(rt);
    return rc;
}

void mg_run_trace_close(mg_run_trace *rt) {
    mg_trace_free(rt->t);
    rt->t = NULL;
}

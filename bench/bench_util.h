/* Helpers every benchmark uses: a monotonic clock, medians, the load average. */
#ifndef MG_BENCH_UTIL_H
#define MG_BENCH_UTIL_H

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "mgraph/model.h"
#include "mgraph/plan.h"
#include "mgraph/engine.h"

static inline double bench_now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static inline int bench_cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median of v[0..n) (sorts v). */
static inline double bench_median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, bench_cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* 1-minute load average: timings on a shared machine mean little when it exceeds the
 * core count, so benchmarks print it with their results. -1 if unknown. */
static inline double bench_load1(void) {
    double l = -1;
    FILE *f = fopen("/proc/loadavg", "r");
    if (f) {
        if (fscanf(f, "%lf", &l) != 1) l = -1;
        fclose(f);
    }
    return l;
}

/* A step's inputs: positions 0..s-1 and byte tokens/labels from one xorshift stream, the
 * same on every rank and configuration. Global micro-batch k runs on data-parallel rank
 * k % dp as its instance k / dp. */
static inline void bench_fill_inputs(const mg_rank_graph *R, const mg_step *step, mg_storage *st,
                                     const mg_step_config *sc, int dp, int dp_rank) {
    int s = sc->model.seq_length, b = sc->micro_batch;
    mg_tensor *pos = mg_rank_tensor(R, step->positions);
    if (pos) {
        int32_t *p = mg_storage_data(st, pos);
        for (int t = 0; t < s; t++) p[t] = t;
    }
    uint64_t x = 88172645463325252ull;
    mg_tensor *tok = mg_rank_tensor(R, step->tokens), *lab = mg_rank_tensor(R, step->targets);
    for (int k = 0; k < sc->n_micro; k++)
        for (int i = 0; i < s * b; i++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            if (tok && lab && k % dp == dp_rank) {
                ((int32_t *)mg_storage_data_mb(st, tok, k / dp))[i] = (int32_t)(x & 255);
                ((int32_t *)mg_storage_data_mb(st, lab, k / dp))[i] = (int32_t)((x >> 8) & 255);
            }
        }
}

#endif

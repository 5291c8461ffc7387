/* Helpers every benchmark uses: a monotonic clock, medians, the load average. */
#ifndef MG_BENCH_UTIL_H
#define MG_BENCH_UTIL_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mgraph/model.h"
#include "mgraph/plan.h"
#include "mgraph/engine.h"
#include "mgraph/trainer.h"

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

/* A step's inputs, through the trainer's feed: positions 0..s-1 and byte tokens/labels
 * from one xorshift stream (micro-batch k takes its k-th stretch), the same on every
 * rank and configuration; which micro-batches a rank runs is the trainer's. */
typedef struct bench_data {
    int n_micro, per_micro;   /* micro-batches of a step, tokens of one */
    int32_t *tok, *lab;       /* [n_micro][per_micro] */
} bench_data;

static inline int bench_feed(void *user, const mg_feed *f, mg_error *err) {
    (void)err;
    const bench_data *d = user;
    const mg_tensor *local;
    int32_t *p = mg_feed_data(f, "position_ids", &local);
    if (f->instance < 0) {
        for (int64_t t = 0; p && t < mg_numel(local); t++) p[t] = (int32_t)(local->logical.offset[0] + t);
        return MG_OK;
    }
    int32_t *x = mg_feed_data(f, "input_ids", NULL), *y = mg_feed_data(f, "labels", NULL);
    size_t k = (size_t)(f->micro_batch % d->n_micro) * (size_t)d->per_micro, n = (size_t)d->per_micro * sizeof *x;
    if (x) memcpy(x, d->tok + k, n);
    if (y) memcpy(y, d->lab + k, n);
    return MG_OK;
}

/* The trainer benchmarks run a GPT step of sc under plan with: `workers` StarPU workers
 * per rank, collectives on a communication thread when overlap, each micro-batch whole
 * (no sub-batches: what the RESULTS files measured). NULL with *err on failure. */
static inline mg_trainer *bench_trainer(const mg_step_config *sc, const mg_plan *plan, int workers, bool overlap,
                                        bench_data *d, mg_error *err) {
    int per = sc->model.seq_length * sc->micro_batch;
    d->n_micro = sc->n_micro;
    d->per_micro = per;
    d->tok = malloc((size_t)sc->n_micro * (size_t)per * sizeof *d->tok);
    d->lab = malloc((size_t)sc->n_micro * (size_t)per * sizeof *d->lab);
    if (!d->tok || !d->lab) {
        mg_error_set(err, MG_ERR_NOMEM, "out of memory");
        return NULL;
    }
    uint64_t x = 88172645463325252ull;
    for (int i = 0; i < sc->n_micro * per; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        d->tok[i] = (int32_t)(x & 255);
        d->lab[i] = (int32_t)((x >> 8) & 255);
    }
    mg_trainer_config c = mg_trainer_defaults();
    c.model = (mg_model){.name = "gpt", .forward = mg_gpt_forward_fn, .user = (void *)sc,
                         .num_layers = sc->model.num_layers, .whole_micro_batches = sc->model.moe.num_experts > 0};
    c.data = (mg_data_source){.user = d, .feed = bench_feed};
    c.plan = *plan;
    c.plan.micro_batch_split = 1;
    c.micro_batch = sc->micro_batch;
    c.global_batch = sc->micro_batch * sc->n_micro;
    c.optim = sc->optim;
    c.seed = 1234;
    c.cpu_workers = workers;
    c.overlap_grad_reduce = overlap;
    c.check_nan = false;
    mg_trainer *t = NULL;
    if (mg_trainer_new(&c, &t, err) || mg_trainer_start(t, err)) {
        mg_trainer_free(t);
        return NULL;
    }
    return t;
}

static inline void bench_data_free(bench_data *d) {
    free(d->tok);
    free(d->lab);
}

#endif

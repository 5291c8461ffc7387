/* Pipeline schedules as event orders (include/mgraph/pipeline.h), after Megatron's
 * megatron/core/pipeline_parallel/schedules.py: the same warm-up counts and the same
 * chunk and micro-batch of each step, so a stage here prefers what a Megatron stage
 * runs. */
#include <stdlib.h>
#include <string.h>

#include "mgraph/pipeline.h"

/* Interleaved: the k-th forward (backward) step's chunk and micro-batch. */
static int chunk_of(int k, int P, int V, bool forward) {
    int c = (k % (P * V)) / P;
    return forward ? c : V - 1 - c;
}
static int mb_of(int k, int P, int V) { return (k / (P * V)) * P + k % P; }

int mg_pp_schedule(mg_pp_schedule_kind kind, int P, int V, int r, int m, mg_pp_event *ev, mg_error *err) {
    if (P < 1 || V < 1 || r < 0 || r >= P || m < 1)
        return mg_error_set(err, MG_ERR_INVALID, "pipeline schedule: stages %d, chunks %d, rank %d, micro-batches %d", P,
                            V, r, m);
    if (kind == MG_PP_SCHEDULE_AUTO) kind = V > 1 ? MG_PP_SCHEDULE_INTERLEAVED : MG_PP_SCHEDULE_1F1B;
    int n = 0;
    if (kind == MG_PP_SCHEDULE_GPIPE) {
        /* chunk by chunk: the next chunk's first forward waits for the last stage's
         * chunk anyway, so a stage fills that wait with the chunk's other micro-batches */
        for (int c = 0; c < V; c++)
            for (int i = 0; i < m; i++) ev[n++] = (mg_pp_event){i, c, false};
        for (int c = V - 1; c >= 0; c--)
            for (int i = 0; i < m; i++) ev[n++] = (mg_pp_event){i, c, true};
        return MG_OK;
    }
    if (kind == MG_PP_SCHEDULE_1F1B) {
        if (V != 1)
            return mg_error_set(err, MG_ERR_INVALID, "the 1F1B schedule runs one model chunk per stage (%d given)", V);
        int w = P - r - 1 < m ? P - r - 1 : m;
        for (int i = 0; i < w; i++) ev[n++] = (mg_pp_event){i, 0, false};
        for (int i = 0; i < m - w; i++) {
            ev[n++] = (mg_pp_event){w + i, 0, false};
            ev[n++] = (mg_pp_event){i, 0, true};
        }
        for (int i = m - w; i < m; i++) ev[n++] = (mg_pp_event){i, 0, true};
        return MG_OK;
    }
    if (m % P)
        return mg_error_set(err, MG_ERR_INVALID,
                            "the interleaved schedule needs micro-batches (%d) to be a multiple of the pipeline stages "
                            "(%d)",
                            m, P);
    int total = m * V, w;
    if (m == P) w = total; /* Megatron: all forwards first when m == P */
    else {
        w = (P - r - 1) * 2 + (V - 1) * P;
        if (w > total) w = total;
    }
    for (int k = 0; k < w; k++) ev[n++] = (mg_pp_event){mb_of(k, P, V), chunk_of(k, P, V, true), false};
    for (int i = 0; i < total - w; i++) {
        int k = w + i;
        ev[n++] = (mg_pp_event){mb_of(k, P, V), chunk_of(k, P, V, true), false};
        ev[n++] = (mg_pp_event){mb_of(i, P, V), chunk_of(i, P, V, false), true};
    }
    for (int k = total - w; k < total; k++) ev[n++] = (mg_pp_event){mb_of(k, P, V), chunk_of(k, P, V, false), true};
    return MG_OK;
}

int mg_pp_in_flight(const mg_pp_event *ev, int n, int V) {
    int m = 0;
    for (int i = 0; i < n; i++)
        if (ev[i].mb + 1 > m) m = ev[i].mb + 1;
    int *f = calloc((size_t)m + 1, sizeof *f), *b = calloc((size_t)m + 1, sizeof *b);
    int live = 0, most = 0;
    if (!f || !b) {
        free(f);
        free(b);
        return m; /* the bound that always holds */
    }
    for (int i = 0; i < n; i++) {
        int k = ev[i].mb;
        if (!ev[i].backward && f[k]++ == 0) live++;
        if (ev[i].backward && ++b[k] == V) live--;
        if (live > most) most = live;
    }
    free(f);
    free(b);
    return most;
}

int mg_pp_schedule_in_flight(mg_pp_schedule_kind kind, int P, int V, int r, int m, int *in_flight, mg_error *err) {
    int n = 2 * m * V;
    mg_pp_event *ev = n > 0 ? malloc((size_t)n * sizeof *ev) : NULL;
    if (!ev) return mg_error_set(err, MG_ERR_NOMEM, "pipeline schedule: out of memory");
    int rc = mg_pp_schedule(kind, P, V, r, m, ev, err);
    if (!rc) *in_flight = mg_pp_in_flight(ev, n, V);
    free(ev);
    return rc;
}

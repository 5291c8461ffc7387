/* Critical-path priorities -> StarPU task priorities.
 *
 * mg_graph_priorities gives each node its bottom level in estimated seconds (a
 * double). StarPU policies take integers in [min, max] (often only [-5, 5]), so we
 * map by rank, not linearly: nodes are sorted by bottom level and the sorted list is
 * cut into (max - min + 1) equal slices. Rank keeps the order between any two nodes
 * whose levels differ (as far as the slices allow) even when a few huge matmuls
 * dominate the scale, which a linear map would squash everything else under.
 * Equal bottom levels always get equal priorities.
 */
#include <stdlib.h>

#include "scheduler/starpu_internal.h"

typedef struct { double p; int idx; } ranked;

static int cmp_ranked(const void *a, const void *b) {
    const ranked *x = a, *y = b;
    if (x->p != y->p) return x->p < y->p ? -1 : 1;
    return x->idx - y->idx;
}

int mg_starpu_map_priorities(mg_node *const *order, int n, int min_prio, int max_prio, int *out, mg_error *err) {
    if (n <= 0) return MG_OK;
    if (max_prio <= min_prio) {
        for (int i = 0; i < n; i++) out[i] = min_prio;
        return MG_OK;
    }
    ranked *r = malloc((size_t)n * sizeof *r);
    if (!r) return mg_error_set(err, MG_ERR_NOMEM, "out of memory mapping priorities");
    for (int i = 0; i < n; i++) r[i] = (ranked){order[i]->priority, i};
    qsort(r, (size_t)n, sizeof *r, cmp_ranked);
    /* 64-bit: some policies (lws) accept the whole int range */
    long long levels = (long long)max_prio - min_prio + 1;
    int first = 0; /* rank of the first node with this bottom level: ties share a level */
    for (int k = 0; k < n; k++) {
        if (k > 0 && r[k].p != r[k - 1].p) first = k;
        out[r[k].idx] = (int)(min_prio + (long long)first * levels / n);
    }
    free(r);
    return MG_OK;
}

/* Why events first: a stage's events are submitted in the schedule's order, but a worker
 * runs whatever is ready, and by critical path alone the early layers of micro-batch
 * i+1 outrank the late layers of micro-batch i (they have more left below them). Stage
 * 0 then advanced all its warm-up micro-batches layer by layer together, each
 * activation was complete (and sent) only when all were, and the stages took turns
 * instead of overlapping. Ordering by event makes a stage finish what the schedule says
 * comes first, while any ready task still runs when the first is waiting on a transfer.
 *
 * Each event gets an equal share of [min, max - 1]; the level spreads the event's tasks
 * inside its share. When the range is narrower than the events (policies with a few
 * levels), later events share priorities, earliest-first still holding between shares. */
int mg_starpu_event_priority(int min_prio, int max_prio, int n_events, int event, int level) {
    long long span = (long long)max_prio - min_prio; /* max_prio itself is the transfers' */
    if (span <= 0 || n_events <= 0) return min_prio;
    if (level < 0) level = 0;
    if (level >= MG_PP_PRIO_LEVELS) level = MG_PP_PRIO_LEVELS - 1;
    double share = (double)span / n_events, pos = (n_events - 1 - event) + (double)level / MG_PP_PRIO_LEVELS;
    long long p = min_prio + (long long)(pos * share);
    return (int)(p > (long long)max_prio - 1 ? (long long)max_prio - 1 : p);
}

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

/* Helpers shared by the MoE op files (library-internal). */
#ifndef MG_OPS_MOE_COMMON_H
#define MG_OPS_MOE_COMMON_H

#include <stdint.h>

/* The k largest of x[0..E) by value, ties to the lower index, in decreasing order:
 * sel[0..k). The router's forward and backward both call this, so they agree. */
static inline void mg_moe_topk_row(const float *x, int64_t E, int k, int32_t *sel) {
    for (int j = 0; j < k; j++) {
        int64_t best = -1;
        for (int64_t e = 0; e < E; e++) {
            bool taken = false;
            for (int i = 0; i < j; i++) taken |= sel[i] == (int32_t)e;
            if (taken) continue;
            if (best < 0 || x[e] > x[best]) best = e;
        }
        sel[j] = (int32_t)best;
    }
}

/* Row of each routed (token, expert) pair in the expert-major, token-minor dispatch
 * order of map [T, E]: row[t*E + e] (-1 where not routed); counts[e] gets each
 * expert's row count. Returns the total. */
static inline int64_t mg_moe_rows_of(const int32_t *map, int64_t T, int64_t E, int64_t *row, int32_t *counts) {
    int64_t off = 0;
    for (int64_t e = 0; e < E; e++) {
        int64_t c = 0;
        for (int64_t t = 0; t < T; t++) {
            if (map[t * E + e]) row[t * E + e] = off + c++;
            else row[t * E + e] = -1;
        }
        if (counts) counts[e] = (int32_t)c;
        off += c;
    }
    return off;
}

#endif

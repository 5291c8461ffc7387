/* Execution-facing types shared by kernels and executors. */
#ifndef MGRAPH_EXEC_H
#define MGRAPH_EXEC_H

#include <stdint.h>

#include "mgraph/graph.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mg_comm mg_comm; /* per-rank communicators (scheduler/comm) */

/* What a kernel may know about the step besides its node and buffers. */
typedef struct mg_exec_info {
    uint64_t seed;        /* run seed: weights, dropout */
    int64_t iteration;    /* 0-based training iteration (Adam's step is iteration + 1) */
    bool training;        /* false: dropout is the identity */
    mg_comm *comm;        /* NULL on a single rank */
} mg_exec_info;

#ifdef __cplusplus
}
#endif
#endif

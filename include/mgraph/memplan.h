/* Memory plan: which buffer holds each tensor, and what the graph needs at peak.
 *
 * Persistent tensors (parameters, inputs, optimizer state, outputs the host reads)
 * get buffers of their own; a tensor that `updates` another shares its buffer.
 * Transient tensors (activations, activation gradients) share buffers by liveness
 * along the graph's topological order, as ggml-alloc does: a tensor's buffer is free
 * again once its last consumer ran. An output never shares a buffer with an input of
 * the same node, so kernels need not be in-place safe.
 *
 * Buffers (not byte offsets) are the unit so that an executor can give each buffer
 * one data handle: reuse then shows up as ordinary write-after-read dependencies.
 */
#ifndef MGRAPH_MEMPLAN_H
#define MGRAPH_MEMPLAN_H

#include <stddef.h>

#include "mgraph/graph.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mg_memplan {
    int n_tensors;
    int n_buffers;
    size_t *buffer_bytes;     /* [n_buffers] */
    bool *buffer_persistent;  /* [n_buffers] */
    int *buffer_of;           /* [n_tensors]: buffer index of each tensor id */
    size_t persistent_bytes;  /* sum of persistent buffers */
    size_t transient_bytes;   /* sum of shared (reused) buffers: the activation peak */
    size_t unshared_bytes;    /* what transient tensors would take without reuse */
} mg_memplan;

/* reuse == false gives every tensor its own buffer (debugging, reference runs). */
int mg_memplan_build(mg_graph *g, bool reuse, mg_memplan **out, mg_error *err);
void mg_memplan_free(mg_memplan *p);
/* One line: "persistent X MiB, activations Y MiB (Z MiB without reuse), N buffers". */
void mg_memplan_summary(const mg_memplan *p, char *buf, size_t len);

#ifdef __cplusplus
}
#endif
#endif

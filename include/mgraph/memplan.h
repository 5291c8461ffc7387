/* Memory plan: which buffer holds each tensor, and what the graph needs at peak.
 *
 * Persistent tensors (parameters, inputs, optimizer state, outputs the host reads)
 * get buffers of their own; a tensor that `updates` another shares its buffer, and so
 * (when buffers are reused) does a view (a reshape; a slice of one contiguous range, at
 * its offset) unless an in-place update could change the bytes before the view is read.
 * Transient tensors (activations, activation gradients) share buffers by liveness
 * along the graph's topological order, as ggml-alloc does: a tensor's buffer is free
 * again once its last consumer ran. An output never shares a buffer with an input of
 * the same node, so kernels need not be in-place safe; the exceptions are `updates`
 * and views, whose kernels expect it.
 *
 * Buffers (not byte offsets) are the unit of reuse so that an executor can give each
 * buffer one data handle: reuse then shows up as ordinary write-after-read dependencies.
 * Only views sit at an offset inside a buffer, and they only read it.
 */
#ifndef MGRAPH_MEMPLAN_H
#define MGRAPH_MEMPLAN_H

#include <stddef.h>

#include "mgraph/graph.h"

#ifdef __cplusplus
extern "C" {
#endif

/* How storage replicates a buffer (see mg_exec_info for the micro-batch schedule):
 *  - PERSISTENT: one copy (parameters, optimizer state, accumulators, inputs shared by
 *    every micro-batch);
 *  - MICROBATCH: one copy per micro-batch instance of a step (token ids, labels: the
 *    host fills them all before the step);
 *  - SLOT: transients of the per-micro-batch part, one copy per slot: micro-batch
 *    instance i uses slot i % slots, so `slots` micro-batches can be in flight at once
 *    and activation memory is slots x (one micro-batch), whatever the global batch;
 *  - STEP: transients of the once-per-step part (reductions, optimizer): one copy. */
typedef enum mg_buffer_kind { MG_BUF_PERSISTENT, MG_BUF_MICROBATCH, MG_BUF_SLOT, MG_BUF_STEP } mg_buffer_kind;

typedef struct mg_memplan {
    int n_tensors;
    int n_buffers;
    size_t *buffer_bytes;     /* [n_buffers] */
    bool *buffer_persistent;  /* [n_buffers]: PERSISTENT or MICROBATCH (never reused) */
    mg_buffer_kind *buffer_kind; /* [n_buffers] */
    int *buffer_of;           /* [n_tensors]: buffer index of each tensor id */
    size_t *offset_of;        /* [n_tensors]: its byte offset in that buffer (0 but for views and parts) */
    /* [n_tensors]: a part placed inside a larger tensor (a concat's input in its output):
     * whoever writes it must keep the rest of the buffer (StarPU: RW, not W) */
    bool *partial;
    size_t persistent_bytes;  /* sum of PERSISTENT buffers */
    size_t microbatch_bytes;  /* sum of MICROBATCH buffers (one copy) */
    size_t slot_bytes;        /* sum of SLOT buffers: one micro-batch's activation peak */
    size_t step_bytes;        /* sum of STEP buffers */
    size_t transient_bytes;   /* slot_bytes + step_bytes: the activation peak with one slot */
    size_t unshared_bytes;    /* what transient tensors would take without reuse */
    /* Activations saved for backward (one micro-batch): transients a forward node
     * produces and a backward node reads last, what Korthikanti et al. count. */
    size_t saved_bytes;
    /* Elements of the parameters this graph trains (their main parameters, not the model
     * copies of mixed precision): persistent_bytes / params is the bytes per parameter
     * Megatron's distributed-optimizer table counts (16 fp32, 18 bf16, ...). */
    int64_t params;
} mg_memplan;

/* reuse == false gives every tensor its own buffer (debugging, reference runs). */
int mg_memplan_build(mg_graph *g, bool reuse, mg_memplan **out, mg_error *err);
void mg_memplan_free(mg_memplan *p);
/* The topo-order position rule the executors rely on: the per-micro-batch part (mb >= 0)
 * never reads what the once-per-step part (mb < 0) produces, and the once-per-step part
 * reads from the per-micro-batch part only what lives across micro-batches (persistent
 * classes: accumulators). Checked by mg_memplan_build. */

/* One line: "persistent X MiB (B bytes per parameter), activations Y MiB (Z MiB without
 * reuse), N buffers". */
void mg_memplan_summary(const mg_memplan *p, char *buf, size_t len);

#ifdef __cplusplus
}
#endif
#endif

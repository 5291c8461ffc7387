/* recompute_gate(x, after...) -> a copy of x, available only once every `after` exists.
 *
 * Activation recompute (graph/recompute.c) re-runs a segment's forward inside the
 * backward pass. The recomputed nodes read the segment's checkpointed input, which the
 * forward produced long before, so nothing in the dataflow would hold them back: the
 * executors and the memory plan (whose buffer reuse follows data dependencies) would
 * run them, and keep their outputs alive, from the start of the backward. The gate
 * makes the recomputation depend on `after`: the gradient arriving at the segment's
 * output, which is the moment Megatron's checkpoint function recomputes, and the other
 * results of the later layers' backward (weight gradients), so that the memory plan,
 * which reuses a buffer only after everything that used it, can give the recomputed
 * activations the buffers the later layers' backward has freed. The copy costs one
 * pass over the checkpoint (s·b·h), tiny beside the segment's forward. */
#include <string.h>

#include "ops/op.h"

static int infer_gate(const mg_node *n, mg_tensor_desc *out, mg_error *err) {
    (void)err;
    mg_desc_of(n->in[0], &out[0]);
    return 1;
}

static int gate_cpu(const mg_kernel_args *a, mg_error *err) {
    (void)err;
    const mg_tensor *t = a->node->in[0];
    memcpy(a->out[0], a->in[0], mg_tensor_bytes(t));
    return MG_OK;
}

static void cost_gate(const mg_node *n, double *flops, double *bytes) {
    *flops = 0;
    *bytes = 2.0 * (double)mg_tensor_bytes(n->in[0]);
}

const mg_op_def mg_opdef_RECOMPUTE_GATE = {"recompute_gate", 2, -1, MG_OPF_NO_GRAD | MG_OPF_STORAGE, infer_gate, NULL, cost_gate,
                                           gate_cpu, NULL, .shard = NULL};

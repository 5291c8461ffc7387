/* Activation recompute (Megatron's --recompute-granularity / --recompute-method /
 * --recompute-num-layers) as a rewrite of a training step graph (graph/recompute.c).
 */
#ifndef MGRAPH_RECOMPUTE_H
#define MGRAPH_RECOMPUTE_H

#include "mgraph/graph.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum mg_recompute_granularity {
    MG_RECOMPUTE_NONE = 0,
    /* Megatron recomputes the core attention (QKᵀ, softmax, dropout, ·V), whose s²
     * activations dominate. mgraph's fused attention never stores them (it keeps the
     * log-sum-exp and rebuilds P in its backward), so there is nothing to rewrite:
     * every run already has selective recompute's memory. */
    MG_RECOMPUTE_SELECTIVE,
    /* Whole transformer layers: only each segment's input is kept from the forward;
     * the segment's forward runs again when the backward reaches it. */
    MG_RECOMPUTE_FULL,
} mg_recompute_granularity;

typedef enum mg_recompute_method {
    /* Both count within each run of consecutive layers the graph holds: all the model's
     * layers, or on a pipeline rank each model chunk's (Megatron's per-block counts). */
    MG_RECOMPUTE_UNIFORM = 0, /* every layer, in segments of num_layers layers */
    MG_RECOMPUTE_BLOCK,       /* the first num_layers layers, one segment each; the rest keep theirs */
} mg_recompute_method;

typedef struct mg_recompute_options {
    mg_recompute_granularity granularity;
    mg_recompute_method method;
    int num_layers;           /* >= 1 with FULL */
    int n_layers;             /* the model's layers */
    const char *layer_scope;  /* printf format of layer i's scope ("h.%d", "model.layers.%d") */
    /* The model chunk (pipeline virtual stage) of each of the n_layers layers, when the
     * graph is a logical one to be partitioned (mg_plan_layer_vstages); NULL: the stages
     * the graph's nodes carry (a partitioned graph's), or one chunk. */
    const int *layer_chunk;
} mg_recompute_options;

/* Rewrites a step graph that has its backward (a logical graph before partitioning, with
 * layer_chunk under pipeline parallelism, or a rank's graph):
 * per segment, the forward nodes whose outputs the backward reads are cloned into the
 * backward (same op, attributes, micro-batch and logical tensors: dropout masks replay
 * bit for bit from the counter RNG), gated on the gradient arriving at the segment
 * (op recompute_gate), and the backward reads the clones. The forward's own tensors
 * then die inside the forward, which the memory plan turns into reuse.
 * *n_cloned (may be NULL): nodes added. Rewriting the logical graph lets the partitioner
 * give the clones their own collectives (tensor, context parallelism: all-gathers again
 * in backward, as Megatron's checkpointed layers do), in every rank's agreed order; in a
 * partitioned graph a segment whose forward holds a collective is refused. */
int mg_graph_recompute(mg_graph *g, const mg_recompute_options *o, int *n_cloned, mg_error *err);

#ifdef __cplusplus
}
#endif
#endif

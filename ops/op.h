/* The op table's entry type and the kernel calling convention (library-internal).
 *
 * Every op is defined once, by one mg_op_def in ops/<family>.c, listed in
 * include/mgraph/op_list.h and gathered in ops/registry.c. An entry holds everything
 * the rest of the system asks about an op: arity, shape rule, gradient rule (as graph
 * construction), cost, CPU kernel, and the CUDA kernel slot.
 */
#ifndef MG_OPS_OP_H
#define MG_OPS_OP_H

#include "mgraph/exec.h"
#include "mgraph/graph.h"
#include "mgraph/ops.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MG_MAX_OUT MG_MAX_SPLIT

typedef struct mg_tensor_desc {
    mg_dtype dtype;
    mg_dtype storage; /* MG_F32 (0): as the precision rules decide; a cast's: its target */
    int ndim;
    int64_t shape[MG_MAX_DIMS];
} mg_tensor_desc;

/* A kernel's view of one node execution. Buffers are dense row-major arrays of
 * the tensors' own (physical) shapes; out[i] may alias in[j] for in-place updates. */
typedef struct mg_kernel_args {
    const mg_node *node;
    void *const *in;
    void *const *out;
    const mg_exec_info *info;
} mg_kernel_args;

typedef int (*mg_kernel_fn)(const mg_kernel_args *a, mg_error *err);

enum {
    MG_OPF_COMM = 1u << 0,        /* a collective or point-to-point transfer */
    MG_OPF_NO_GRAD = 1u << 1,     /* emitted by gradient rules / optimizer: not differentiable */
    /* (1u << 2 was MG_OPF_LINEAR: whether an op is linear in its inputs is its sharding
     * rule's to say; partitioners ask part_op_linear) */
    /* A point-to-point transfer (with MG_OPF_COMM): not in the collectives' seq order;
     * engines post it without blocking and finish its task when it completes. */
    MG_OPF_P2P = 1u << 3,
    /* The kernels read and write every tensor in its storage dtype (mg_tensor_storage):
     * they move bytes (reshape, slice, concat, transfers) or convert (cast). Other ops'
     * kernels see f32 buffers: the op table converts narrow storage around them
     * (ops/registry.c). */
    MG_OPF_STORAGE = 1u << 4,
};

/* The message key of a send/recv node's instance (its tag x n_micro + instance), the
 * same on both ends. */
int64_t mg_p2p_key(const mg_node *n, const mg_exec_info *info);

/* ---- sharding rules ----------------------------------------------------------------
 * How an op runs when one mesh axis partitions its operands (partitioners/ applies the
 * rule for each axis that partitions the node, inserts the conversions it asks for as
 * collectives, and derives per-rank attributes from the placements). States are generic,
 * the same on every axis: FULL (replicated over the axis), SPLIT(d) (block d of the
 * group) or PARTIAL (a term of a sum over the group). A rule says too whether the op is
 * linear: partial inputs giving partial outputs (data and pipeline parallelism carry a
 * rank's share through such ops). */
#define MG_SHARD_MAX_IO 16

typedef struct mg_shard_ctx mg_shard_ctx;
/* How an axis resolves a partial value that an op needs whole: the state it becomes
 * (FULL: an all-reduce; SPLIT(0): a reduce-scatter along the rows), given whether the op
 * takes its rows (dim 0) split. The axis' own choice, not the op's: tensor parallelism
 * under sequence parallelism splits the rows where they divide (the reduce-scatter of
 * Megatron's SP regions, partitioners/tp.c); every other axis, and tp without SP, FULL. */
typedef mg_sharding (*mg_shard_resolve_fn)(const mg_shard_ctx *c, const mg_tensor *t, bool allow_row_split);

struct mg_shard_ctx {
    int size;                   /* ranks in the axis' group (> 1) */
    mg_shard_resolve_fn resolve; /* the axis' resolution of partial values (NULL: FULL) */
};

typedef struct mg_shard_io {
    mg_sharding in[MG_SHARD_MAX_IO];   /* the states the inputs have */
    mg_sharding want[MG_SHARD_MAX_IO]; /* set by the rule: the states the op needs */
    mg_sharding out[MG_SHARD_MAX_IO];  /* set by the rule: the states its outputs get */
    /* set by the rule: inputs (bit i) whose replicated copies only group index 0
     * contributes (a sum of squares counts a replicated tensor once) */
    unsigned count_once;
    /* set by the rule: the op cannot run on these shards as one node; the partitioner
     * expands it into local ops and collectives (vocab-parallel cross-entropy) */
    bool expand;
} mg_shard_io;

/* Fills io->want / io->out from io->in. Returns MG_OK or an error with a message. */
typedef int (*mg_shard_fn)(const mg_node *n, const mg_shard_ctx *c, mg_shard_io *io, mg_error *err);

typedef struct mg_op_def {
    const char *name;
    int min_in, max_in;           /* max_in < 0: variadic */
    unsigned flags;
    /* Shape rule: fills out[0..n) and returns n >= 1, or a negative status with a
     * message naming the op and the shapes. n->out is not set yet. */
    int (*infer)(const mg_node *n, mg_tensor_desc *out, mg_error *err);
    /* Gradient rule: builds nodes computing din[i] (for inputs with need[i]) from the
     * output gradients dout[j] (NULL when output j gets none). Leaves din[i] NULL for
     * inputs that are not differentiable. Returns a status. */
    int (*grad)(mg_graph *g, const mg_node *n, mg_tensor *const *dout, const bool *need,
                mg_tensor **din);
    /* FLOPs and bytes moved by one execution (NULL: 0 FLOPs, inputs + outputs bytes). */
    void (*cost)(const mg_node *n, double *flops, double *bytes);
    mg_kernel_fn cpu;
    mg_kernel_fn cuda;            /* filled by the CUDA backend; NULL: CPU only */
    /* Sharding rule (NULL: partitioning the op over a split axis is an error naming it). */
    mg_shard_fn shard;
    /* View rule (NULL: never a view). True when this node's output is input 0's bytes,
     * unchanged and contiguous, from element *offset on (reshape: always, at 0; slice:
     * when the dims before the sliced one are all 1). The memory plan may then place the
     * output inside the input's buffer, and the kernel has nothing to do: it must accept
     * out == in + offset. Engines let such a task only read that buffer. */
    bool (*view)(const mg_node *n, int64_t *offset);
    /* Parts rule (NULL: none), the converse: true when input i is laid in the output,
     * unchanged and contiguous, from element *offset on (concat: when the dims before the
     * concatenated one are all 1). The memory plan may then place input i inside the
     * output's buffer, so that its producer writes it there; the kernel must skip a part
     * already in place (in[i] == out + offset). */
    bool (*part)(const mg_node *n, int i, int64_t *offset);
    /* Outputs (bit j: output j) that are statistics kept in f32 whatever the precision
     * (a norm's mean and reciprocal deviation, attention's log-sum-exp): mixed precision
     * stores activations narrow, never these (graph/precision.c). */
    unsigned f32_out;
} mg_op_def;

const mg_op_def *mg_op_def_get(mg_op op);
/* Whether a node's kernel runs between storage conversions (some tensor narrower than
 * f32 and the op not MG_OPF_STORAGE). */
bool mg_node_needs_convert(const mg_node *n);
/* Cost with the default applied. */
void mg_op_cost(const mg_node *n, double *flops, double *bytes);

/* The defs, one per op kind (defined in the family files). */
#define MG_OP(e, s) extern const mg_op_def mg_opdef_##e;
#include "mgraph/op_list.h"
#undef MG_OP

/* ---- helpers shared by shape rules and kernels ------------------------------ */
static inline void mg_desc_of(const mg_tensor *t, mg_tensor_desc *d) {
    d->dtype = t->dtype;
    d->ndim = t->ndim;
    for (int i = 0; i < MG_MAX_DIMS; i++) d->shape[i] = i < t->ndim ? t->shape[i] : 1;
}
/* Product of shape[from..to). */
static inline int64_t mg_dims_prod(const int64_t *shape, int from, int to) {
    int64_t p = 1;
    for (int i = from; i < to; i++) p *= shape[i];
    return p;
}
/* "[2, 3]" of a desc/shape. */
const char *mg_dims_str(int ndim, const int64_t *shape, char *buf, size_t len);
/* Records "<op>: <msg> (shapes a=[..], b=[..])" for node n. */
int mg_shape_error(mg_error *err, const mg_node *n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#ifdef __cplusplus
}
#endif
#endif

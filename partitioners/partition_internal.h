/* The partitioner's shared state (partitioners/ only). */
#ifndef MG_PARTITION_INTERNAL_H
#define MG_PARTITION_INTERNAL_H

#include "mgraph/comm.h"
#include "mgraph/plan.h"
#include "ops/op.h"

/* The physical view of one logical tensor on this rank. */
typedef struct pt {
    mg_tensor *t;        /* NULL: not materialised (yet), or absent */
    bool absent;         /* belongs to a micro-batch another data-parallel rank owns */
    mg_sharding tp;      /* state over the tensor-parallel group */
    bool dp_partial;     /* this rank's share of a sum over the data-parallel group */
} pt;

typedef struct conv_entry {
    int lid;
    mg_sharding want;
    bool dp_full;
    bool per_mb;         /* made in the per-micro-batch part (not reusable by the step part) */
    mg_phase phase;      /* made in forward / backward / optimizer nodes */
    mg_tensor *t;
} conv_entry;

struct dist_opt;

typedef struct part_ctx {
    const mg_graph *L;
    mg_graph *P;
    const mg_plan *plan;
    const mg_mesh *mesh;
    int tp, tp_rank, dp, dp_rank;
    int cur_mb;              /* micro-batch field of the nodes being emitted (>= 0: per micro-batch) */
    mg_phase cur_phase;      /* phase of the nodes being emitted */
    pt *st;                  /* [n logical tensors] */
    int *final_grad_of;      /* [n logical tensors]: param id whose final gradient it is, or -1 */
    conv_entry *conv;        /* conversion cache */
    int n_conv, cap_conv;
    int64_t seq;             /* next communication sequence number */
    struct dist_opt *dopt;   /* NULL unless the distributed optimizer is on */
    mg_error *err;
} part_ctx;

/* Sharding constructors. */
static inline mg_sharding sh_full(void) { return (mg_sharding){MG_SHARD_FULL, -1, MG_GROUP_TP}; }
static inline mg_sharding sh_split(int d) { return (mg_sharding){MG_SHARD_SPLIT, d, MG_GROUP_TP}; }
static inline mg_sharding sh_partial(void) { return (mg_sharding){MG_SHARD_PARTIAL, -1, MG_GROUP_TP}; }
static inline bool sh_eq(mg_sharding a, mg_sharding b) {
    return a.kind == b.kind && (a.kind != MG_SHARD_SPLIT || a.dim == b.dim);
}

/* ---- partition.c: materialising, converting, emitting ----------------------------- */
/* The physical tensor of logical input `lt` in state `want` (converting if needed;
 * leaves are created on first use). NULL on error (recorded). */
mg_tensor *part_get(part_ctx *c, const mg_tensor *lt, mg_sharding want);
/* Same, additionally reduced over the data-parallel group when it is partial there. */
mg_tensor *part_get_dp_full(part_ctx *c, const mg_tensor *lt, mg_sharding want);
/* Creates the physical leaf of logical leaf lt in state s (not recorded). */
mg_tensor *part_make_leaf(part_ctx *c, const mg_tensor *lt, mg_sharding s);
/* The state logical tensor `lt` has now (materialising a leaf in its natural state). */
mg_sharding part_state(part_ctx *c, const mg_tensor *lt);
/* Emits the physical copy of logical node n with the given physical inputs and attrs,
 * names its outputs as the logical ones and records their states. */
mg_node *part_emit(part_ctx *c, const mg_node *n, mg_tensor *const *in, const mg_attrs *attrs,
                   const mg_sharding *out_state, bool dp_partial);
/* Makes physical tensor po the value of n's logical output lo (its name, identity,
 * role, state). */
int part_bind(part_ctx *c, const mg_node *n, const mg_tensor *lo, mg_tensor *po, mg_sharding s, bool dp_partial);
/* Emits a helper node (not a copy of a logical node) in n's scope and micro-batch. */
mg_node *part_emit_aux(part_ctx *c, const mg_node *n, mg_op op, const mg_attrs *attrs, int n_in,
                       mg_tensor *const *in, const char *name);
/* Sets a physical tensor's logical identity: lt's, with the block of `s`. */
void part_set_identity(part_ctx *c, mg_tensor *t, const mg_tensor *lt, mg_sharding s);
int part_fail(part_ctx *c, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* After a builder call on the physical graph returned NULL: records the graph's error
 * (or a generic one) and returns a non-zero status. */
int part_graph_error(part_ctx *c);
/* Renames a physical tensor to an absolute name (ignoring the current scope). */
void part_rename(part_ctx *c, mg_tensor *t, const char *name);
/* Creates a leaf of the physical graph under an absolute name. */
mg_tensor *part_new_leaf(part_ctx *c, const char *name, mg_dtype dt, mg_role role, int ndim, const int64_t *shape);
/* Nodes emitted from now on belong to the once-per-step part (reductions of
 * accumulated gradients, the optimizer), whatever node is being partitioned. */
void part_enter_step_context(part_ctx *c);
/* Target for a partial tensor that an op needs whole: split along the sequence
 * (dim 0) under sequence parallelism when the op allows it and it divides, else full. */
mg_sharding part_resolve_target(part_ctx *c, const mg_tensor *lt, bool allow_seq_split);

/* ---- tp_rules.c: tensor and sequence parallelism ------------------------------------------ */
/* Partitions one logical node under tensor parallelism (tp > 1): chooses input and
 * output states, converts inputs, emits. dp_partial tells whether the inputs are
 * data-parallel partial sums (only for ops linear in them). */
int tp_partition_node(part_ctx *c, const mg_node *n, bool dp_partial);
/* The tensor-parallel state a parameter starts in (the plan's shard rules). */
mg_sharding tp_param_state(const part_ctx *c, const mg_tensor *lt);

/* ---- dp.c: data parallelism ------------------------------------------------------------------ */
/* Handles nodes whose inputs are absent or data-parallel partial. Returns 1 if it
 * handled n (emitted or aliased), 0 to let the tensor-parallel rules run, < 0 on error. */
int dp_partition_node(part_ctx *c, const mg_node *n, bool *dp_partial_out);
/* After n is emitted: reduce finished parameter gradients over dp right away, so the
 * all-reduce overlaps the rest of the backward pass. */
int dp_after_node(part_ctx *c, const mg_node *n);

/* ---- tile.c: large matmuls as several tasks ---------------------------------------------------------- */
/* Emits n (a matmul, inputs already converted) as plan->matmul_tiles tiles when it is
 * large and divides. Returns 1 if it did, 0 to emit it whole, < 0 on error. */
int tile_matmul(part_ctx *c, const mg_node *n, mg_tensor *const *in, mg_sharding out_state, bool dp_partial);

/* ---- dist_opt.c: distributed optimizer ---------------------------------------------------------- */
int dopt_init(part_ctx *c);
void dopt_free(part_ctx *c);
/* Returns 1 if the distributed optimizer handled n (gradient bucket, sumsq, adamw). */
int dopt_partition_node(part_ctx *c, const mg_node *n);
int dopt_after_node(part_ctx *c, const mg_node *n);

#endif

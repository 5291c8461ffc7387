/* The partitioner's shared state (partitioners/ only). */
#ifndef MG_PARTITION_INTERNAL_H
#define MG_PARTITION_INTERNAL_H

#include "mgraph/comm.h"
#include "mgraph/placement.h"
#include "mgraph/plan.h"
#include "ops/op.h"

/* The physical view of one logical tensor on this rank. */
typedef struct pt {
    mg_tensor *t;        /* NULL: not materialised (yet) */
    mg_placement pl;     /* where t sits on the mesh */
} pt;

typedef struct conv_entry {
    int lid;
    mg_placement want;
    bool per_mb;         /* made in the per-micro-batch part (not reusable by the step part) */
    mg_phase phase;      /* made in forward / backward / optimizer nodes */
    mg_tensor *t;
} conv_entry;

struct dist_opt;
struct ep_state;
struct cp_state;
struct pp_state;

typedef struct part_ctx {
    const mg_graph *L;
    mg_graph *P;
    const mg_plan *plan;
    const mg_mesh *mesh;     /* the only source of parallel sizes and coordinates */
    int tp, tp_rank, dp, dp_rank; /* mesh->size / coord of the two axes rules ask most */
    /* Where gradients are summed and optimizer state sharded: dp, or dp x cp under
     * context parallelism (one collective over the combined group, as Megatron) */
    mg_group grad_group;
    int gdp, gdp_rank;
    int cur_mb;              /* micro-batch field of the nodes being emitted (>= 0: per micro-batch) */
    mg_phase cur_phase;      /* phase of the nodes being emitted */
    /* The placement of the node being emitted on the axes other than tp (the tp rules
     * choose that one): data parallelism marks outputs that are a rank's share of a
     * sum here (dp.c), so no flag travels through the rules. */
    mg_placement node_pl;
    pt *st;                  /* [n logical tensors] */
    int *final_grad_of;      /* [n logical tensors]: param id whose final gradient it is, or -1 */
    conv_entry *conv;        /* conversion cache */
    int n_conv, cap_conv;
    int64_t seq;             /* next communication sequence number */
    struct dist_opt *dopt;   /* NULL unless the distributed optimizer is on */
    struct ep_state *ep;     /* NULL unless expert parallelism is on (ep.c) */
    /* Context parallelism (cp.c): the cp states the node being emitted wants of its
     * inputs and gives its outputs, when cp_node is set (else inputs keep their cp
     * state and outputs get c->node_pl's); the forward K/V rings kept for backward. */
    bool cp_node;
    mg_sharding cp_want[MG_SHARD_MAX_IO], cp_out[MG_SHARD_MAX_IO];
    struct cp_state *cps;
    struct pp_state *pp;     /* NULL unless pipeline parallelism is on (pp.c) */
    mg_error *err;
} part_ctx;

/* Tensor-parallel axis states (what the per-op rules speak). */
static inline mg_sharding sh_full(void) { return mg_place_full(MG_GROUP_TP); }
static inline mg_sharding sh_split(int d) { return mg_place_split(MG_GROUP_TP, d); }
static inline mg_sharding sh_partial(void) { return mg_place_partial(MG_GROUP_TP); }
static inline bool sh_eq(mg_sharding a, mg_sharding b) { return mg_sharding_eq(a, b); }
static inline bool pl_dp_partial(const mg_placement *p) { return p->ax[MG_GROUP_DP].kind == MG_SHARD_PARTIAL; }

/* ---- partition.c: materialising, converting, emitting ----------------------------- */
/* The physical tensor of logical input `lt` placed as `want` on every axis
 * (converting if needed: collectives over the axes that differ; leaves are created
 * on first use). NULL on error (recorded). */
mg_tensor *part_get_pl(part_ctx *c, const mg_tensor *lt, const mg_placement *want);
/* `lt` in tp state `want`, its other axes as they are (a dp share stays one). */
mg_tensor *part_get(part_ctx *c, const mg_tensor *lt, mg_sharding want);
/* Same, additionally summed over the data-parallel group when it is a share there. */
mg_tensor *part_get_dp_full(part_ctx *c, const mg_tensor *lt, mg_sharding want);
/* Creates the physical leaf of logical leaf lt placed as p (not recorded). */
mg_tensor *part_make_leaf(part_ctx *c, const mg_tensor *lt, const mg_placement *p);
/* The tp state logical tensor `lt` has now (materialising a leaf in its natural state). */
mg_sharding part_state(part_ctx *c, const mg_tensor *lt);
/* Its whole placement (same materialisation). */
const mg_placement *part_placement(part_ctx *c, const mg_tensor *lt);
/* Emits the physical copy of logical node n with the given physical inputs and attrs,
 * names its outputs as the logical ones and records their placements: tp state
 * out_tp[j], the other axes c->node_pl. */
mg_node *part_emit(part_ctx *c, const mg_node *n, mg_tensor *const *in, const mg_attrs *attrs,
                   const mg_sharding *out_tp);
/* Makes physical tensor po the value of n's logical output lo (its name, identity,
 * role, placement). */
int part_bind(part_ctx *c, const mg_node *n, const mg_tensor *lo, mg_tensor *po, const mg_placement *pl);
/* The attributes that differ per rank (target shapes, vocabulary offsets) of the
 * physical copy of n with physical inputs `in` and output tp states out_tp, derived
 * from the placements: the one place they are, so rules only choose placements. */
void part_local_attrs(part_ctx *c, const mg_node *n, mg_tensor *const *in, const mg_sharding *out_tp, mg_attrs *at);
/* c->node_pl with tp state s. */
mg_placement part_node_pl(const part_ctx *c, mg_sharding s);
/* Emits a helper node (not a copy of a logical node) in n's scope and micro-batch. */
mg_node *part_emit_aux(part_ctx *c, const mg_node *n, mg_op op, const mg_attrs *attrs, int n_in,
                       mg_tensor *const *in, const char *name);
/* Sets a physical tensor's logical identity: lt's, with the block placement p gives. */
void part_set_identity(part_ctx *c, mg_tensor *t, const mg_tensor *lt, const mg_placement *p);
int part_fail(part_ctx *c, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* After a builder call on the physical graph returned NULL: records the graph's error
 * (or a generic one) and returns a non-zero status. */
int part_graph_error(part_ctx *c);
/* Renames a physical tensor to an absolute name (ignoring the current scope). */
void part_rename(part_ctx *c, mg_tensor *t, const char *name);
/* Creates a leaf of the physical graph under an absolute name. */
mg_tensor *part_new_leaf(part_ctx *c, const char *name, mg_dtype dt, mg_role role, int ndim, const int64_t *shape);
/* Nodes emitted from now on get logical node n's scope, phase and micro-batch (NULL:
 * none), and the other axes' placement starts replicated. */
void part_enter_node_context(part_ctx *c, const mg_node *n);
/* Nodes emitted from now on belong to the once-per-step part (reductions of
 * accumulated gradients, the optimizer), whatever node is being partitioned. */
void part_enter_step_context(part_ctx *c);
/* Target for a partial tensor that an op needs whole: split along the sequence
 * (dim 0) under sequence parallelism when the op allows it and it divides, else full. */
mg_sharding part_resolve_target(part_ctx *c, const mg_tensor *lt, bool allow_seq_split);

/* ---- tp.c: tensor and sequence parallelism (each op's mg_op_def.shard over tp) ------------ */
/* Partitions one logical node under tensor parallelism (tp > 1): chooses input and
 * output states, converts inputs, emits (other axes: c->node_pl). */
int tp_partition_node(part_ctx *c, const mg_node *n);
/* The tensor-parallel state a parameter starts in (the plan's shard rules). */
mg_sharding tp_param_state(const part_ctx *c, const mg_tensor *lt);

/* ---- dp.c: data parallelism ------------------------------------------------------------------ */
/* Handles nodes whose inputs are data-parallel shares: reduces them over dp, or, for
 * ops linear in all of them, marks the outputs as shares (c->node_pl). Returns 0 to
 * let the tensor-parallel rules run, < 0 on error. */
int dp_partition_node(part_ctx *c, const mg_node *n);
/* After n is emitted: reduce finished parameter gradients over dp right away, so the
 * all-reduce overlaps the rest of the backward pass. */
int dp_after_node(part_ctx *c, const mg_node *n);
/* A finished parameter gradient out of the micro-batches is each rank's share over dp
 * (the distributed optimizer's buckets aside, which reduce their own): marks it so in its
 * placement, so that a conversion made before dp_after_node (pp's sum over stages) keeps
 * it a share and dp_after_node still reduces it. */
void dp_mark_grad_share(part_ctx *c, const mg_tensor *lo);

/* ---- cp.c: context parallelism ------------------------------------------------------------------- */
/* Chooses the cp states of n's inputs and outputs (c->cp_want / cp_out) by its rule;
 * expands attention into the K/V ring, dropout into runs with global mask offsets,
 * and scales the loss to the rank's share. Returns 1 if it emitted n, 0 to let the
 * tensor-parallel rules emit it, < 0 on error. */
int cp_partition_node(part_ctx *c, const mg_node *n);
/* Input i of the node being emitted, in tp state tp_want and the cp state cp.c chose. */
mg_tensor *cp_get(part_ctx *c, const mg_tensor *lt, mg_sharding tp_want, int i);
/* After n is emitted: finished parameter gradients summed over cp (dp == 1). */
int cp_after_node(part_ctx *c, const mg_node *n);
/* One axis step of a conversion over cp (the zigzag layout); what names it. */
mg_tensor *cp_convert_axis(part_ctx *c, mg_tensor *x, mg_sharding from, mg_sharding to, int64_t *seq, char *what,
                           size_t len);
void cp_free(part_ctx *c);
/* ---- pp.c: pipeline parallelism ------------------------------------------------------------- */
/* Places the logical nodes (in walk order `ord`) on stages. */
int pp_init(part_ctx *c, mg_node *const *ord, int n_ord);
void pp_free(part_ctx *c);
/* Before the other rules, for every node on every rank: inserts its transfers (sends on
 * the producing stage, recvs here) and sums over stages it needs. Returns 1 when the
 * node runs on another stage (emit nothing), 2 when its output is bound without
 * emitting it, 0 to partition it here, < 0 on error. */
int pp_partition_node(part_ctx *c, const mg_node *n);
/* After a node is emitted here: stamps its virtual stage on what was emitted, sums a
 * finished gradient over the stages holding it. */
int pp_after_node(part_ctx *c, const mg_node *n);
/* A host-read output (loss) computed on one stage is broadcast to all. */
int pp_finish_output(part_ctx *c, const mg_tensor *lt);
/* Whether this rank's stage computes logical tensor lt (true for leaves and without pp). */
bool pp_here(const part_ctx *c, const mg_tensor *lt);
/* The group summing lt over the stages holding it: pp, or the embedding group. */
int pp_group_of(const part_ctx *c, const mg_tensor *lt, mg_group *grp, int *n);
/* Virtual stage of a model part (mg_node.layer). */
int pp_vstage_of_layer(const part_ctx *c, int layer);

/* ---- tile.c: large matmuls as several tasks ---------------------------------------------------------- */
/* Emits n (a matmul, inputs already converted) as plan->matmul_tiles tiles when it is
 * large and divides. Returns 1 if it did, 0 to emit it whole, < 0 on error. */
int tile_matmul(part_ctx *c, const mg_node *n, mg_tensor *const *in, mg_sharding out_state);

/* ---- dist_opt.c: distributed optimizer ---------------------------------------------------------- */
int dopt_init(part_ctx *c);
void dopt_free(part_ctx *c);
/* Returns 1 if the distributed optimizer handled n (gradient bucket, sumsq, adamw). */
int dopt_partition_node(part_ctx *c, const mg_node *n);
int dopt_after_node(part_ctx *c, const mg_node *n);
/* Whether logical parameter pid is in the distributed optimizer's buckets. */
bool dopt_has_param(const part_ctx *c, int pid);

/* ---- ep.c: expert parallelism ------------------------------------------------------------------ */
int ep_init(part_ctx *c);   /* after dopt_init; no-op when ep == 1 */
void ep_free(part_ctx *c);
bool ep_is_expert_param(const mg_tensor *lt);
/* A leaf's placement on the ep axis (expert weights split over ep). */
void ep_leaf_placement(const part_ctx *c, const mg_tensor *lt, mg_placement *p);
/* convert()'s first step: an expert gradient's sum over dp is its sum over edp (x itself
 * when edp is one rank). */
bool ep_sums_over_edp(const part_ctx *c, const mg_placement *cur, const mg_placement *to);
mg_tensor *ep_edp_sum(part_ctx *c, const mg_tensor *lt, mg_tensor *x, const mg_placement *summed);
/* Handles the MoE dispatch and expert region (*handled = 1), or sets the ep state of
 * nodes on expert weight blocks for the tensor-parallel rules to emit. */
int ep_partition_node(part_ctx *c, const mg_node *n, int *handled);

#endif

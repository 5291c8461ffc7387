/* The partitioner's shared state and the axis plug-in interface (partitioners/ only).
 * partitioners/README.md says how the pieces fit. */
#ifndef MG_PARTITION_INTERNAL_H
#define MG_PARTITION_INTERNAL_H

#include "mgraph/comm.h"
#include "mgraph/placement.h"
#include "mgraph/plan.h"
#include "ops/op.h"

#define MAXIO MG_SHARD_MAX_IO

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

/* The axes, in the order the walk asks them about a node (partition.c's table). */
typedef enum part_axis_id {
    PART_PP,    /* pp.c: pipeline stages */
    PART_DOPT,  /* dist_opt.c: the distributed optimizer */
    PART_FSDP,  /* fsdp.c: Megatron-FSDP (ZeRO-3 / ZeRO-2) */
    PART_DP,    /* dp.c: data parallelism */
    PART_CP,    /* cp.c: context parallelism */
    PART_EP,    /* ep.c: expert parallelism */
    PART_TP,    /* tp.c: tensor and sequence parallelism */
    PART_N_AXES
} part_axis_id;

typedef struct part_ctx {
    const mg_graph *L;
    mg_graph *P;
    const mg_plan *plan;
    const mg_mesh *mesh;     /* the only source of parallel sizes and coordinates */
    int cur_mb;              /* micro-batch field of the nodes being emitted (>= 0: per micro-batch) */
    mg_phase cur_phase;      /* phase of the nodes being emitted */
    /* The node being partitioned, as the axes decide it (part_want / part_out): the state
     * input i is read in on each axis in want_set[i] (the others: as it is), the placement
     * each output gets (FULL on the axes no hook chose), and per mesh axis the inputs whose
     * replicated copies only that axis' index 0 counts (a sum of squares). */
    mg_placement want[MAXIO];
    unsigned want_set[MAXIO];
    mg_placement out[MAXIO];
    unsigned count_once[MG_MESH_AXES];
    pt *st;                  /* [n logical tensors] */
    int *final_grad_of;      /* [n logical tensors]: param id whose final gradient it is, or -1 */
    conv_entry *conv;        /* conversion cache */
    int n_conv, cap_conv;
    int64_t seq;             /* next communication sequence number */
    void *axis[PART_N_AXES]; /* each axis' own state (NULL: the plan does not use it) */
    mg_error *err;
} part_ctx;

/* ---- the axis plug-in interface ---------------------------------------------------------------
 * What a node hook returns: PART_NEXT: ask the next axis (the node is emitted by
 * partition.c once all have chosen); PART_DONE: the axis emitted or bound the node itself
 * (the after hooks still run); PART_ELSEWHERE: the node is another rank's (nothing more). */
enum { PART_NEXT = 0, PART_DONE = 1, PART_ELSEWHERE = 2 };

typedef struct part_axis {
    const char *name;
    /* Sets up c->axis[id] when the plan uses the axis (leaves it NULL otherwise). Every
     * hook is called whatever the plan: one of an axis the plan does not use does nothing. */
    int (*init)(part_ctx *c, mg_node *const *ord, int n_ord);
    void (*release)(part_ctx *c);
    /* A leaf's state on this axis (called for every leaf whatever c->axis[id]). */
    void (*leaf)(const part_ctx *c, const mg_tensor *lt, mg_placement *p);
    /* Node n, before it is emitted: states on this axis (part_want / part_out), input
     * conversions, or the node taken over. < 0: error. */
    int (*node)(part_ctx *c, const mg_node *n);
    /* One step of a conversion of x (logical lt, placed as *cur) on mesh axis `a` to
     * `to`, when this axis converts its own way: returns the result (updating *cur) and
     * sets *handled; else leaves *handled false. */
    mg_tensor *(*convert)(part_ctx *c, const mg_tensor *lt, mg_tensor *x, mg_placement *cur, int a, mg_sharding to,
                          bool *handled);
    /* After n was emitted here (or bound, PART_DONE). */
    int (*after)(part_ctx *c, const mg_node *n);
    /* After the walk: outputs the host reads. */
    int (*finish)(part_ctx *c);
} part_axis;

extern const part_axis part_axis_pp, part_axis_dopt, part_axis_fsdp, part_axis_dp, part_axis_cp, part_axis_ep,
    part_axis_tp;

static inline int part_size(const part_ctx *c, mg_group g) { return c->mesh->size[g]; }
static inline int part_coord(const part_ctx *c, mg_group g) { return c->mesh->coord[g]; }

/* Generic axis states (what the op rules speak) on mesh axis a. */
static inline mg_sharding sh_full_on(int a) { return mg_place_full((mg_group)a); }
static inline bool sh_eq(mg_sharding a, mg_sharding b) { return mg_sharding_eq(a, b); }
/* Tensor-parallel axis states (tp.c's and the rules' most frequent). */
static inline mg_sharding sh_full(void) { return mg_place_full(MG_GROUP_TP); }
static inline mg_sharding sh_split(int d) { return mg_place_split(MG_GROUP_TP, d); }
static inline mg_sharding sh_partial(void) { return mg_place_partial(MG_GROUP_TP); }
static inline bool pl_dp_partial(const mg_placement *p) { return p->ax[MG_GROUP_DP].kind == MG_SHARD_PARTIAL; }

/* ---- partition.c: materialising, converting, emitting ----------------------------- */
/* Node n's input i will be read in state s on mesh axis a / output j gets state s on a. */
void part_want(part_ctx *c, int i, int a, mg_sharding s);
void part_out(part_ctx *c, int j, int a, mg_sharding s);
/* Every output of n gets state s on axis a. */
void part_out_all(part_ctx *c, const mg_node *n, int a, mg_sharding s);
/* Applies n's sharding rule (mg_op_def.shard) over mesh axis a with the inputs in states
 * `in` (NULL: as they are placed now), and records what it chose (part_want, part_out,
 * count_once). resolve: how the axis resolves a partial value an op needs whole (the
 * axis' own: NULL, FULL; tp.c's under sequence parallelism, a row split).
 * Returns the rule's io (expand: the caller expands), or an error. */
int part_apply_rule(part_ctx *c, const mg_node *n, int a, const mg_sharding *in, mg_shard_resolve_fn resolve,
                    mg_shard_io *io);
/* Whether op n is linear in all its inputs jointly, as its sharding rule says (given
 * partial sums for every input it gives partial sums): data and pipeline parallelism
 * carry shares through such ops. */
bool part_op_linear(const mg_node *n);
/* Input i of the node being emitted, as the axes want it (part_want). */
mg_tensor *part_input(part_ctx *c, const mg_node *n, int i);
/* The conversion of x on axis a to `to` done by the collective over group g of n ranks
 * (an all-reduce, reduce-scatter, all-gather, slice, or a zero), updating *cur. */
mg_tensor *part_convert_on(part_ctx *c, const mg_tensor *lt, mg_tensor *x, mg_placement *cur, int a, mg_sharding to,
                           mg_group g, int n);
/* The physical tensor of logical input `lt` placed as `want` on every axis
 * (converting if needed: collectives over the axes that differ; leaves are created
 * on first use). NULL on error (recorded). */
mg_tensor *part_get_pl(part_ctx *c, const mg_tensor *lt, const mg_placement *want);
/* `lt` in state `want` on mesh axis a (FULL where a has one rank), its other axes as
 * they are (a dp share stays one). */
mg_tensor *part_get(part_ctx *c, const mg_tensor *lt, int a, mg_sharding want);
/* Same, additionally summed over the axes in sum_axes (bit per mesh axis) where it is a
 * share (dp_replica_axes: a rank's contribution summed over the replicas). */
mg_tensor *part_get_summed(part_ctx *c, const mg_tensor *lt, int a, mg_sharding want, unsigned sum_axes);
/* Creates the physical leaf of logical leaf lt placed as p (not recorded). */
mg_tensor *part_make_leaf(part_ctx *c, const mg_tensor *lt, const mg_placement *p);
/* Materialises a state leaf (an accumulator, an Adam moment) not made yet in the
 * placement of what it belongs to (`like`), before its first reader (then the axes'
 * leaf hooks). */
int part_state_leaf(part_ctx *c, const mg_tensor *leaf, const mg_tensor *like);
/* The state leaves node n makes on first use: an accumulator (in[0] of accumulate) like
 * what it accumulates, Adam's moments (in[2], in[3] of adamw) like their parameter. */
int part_state_leaves(part_ctx *c, const mg_node *n);
/* The state logical tensor `lt` has now on mesh axis a (materialising a leaf in its
 * natural state; FULL where a has one rank). */
mg_sharding part_state(part_ctx *c, const mg_tensor *lt, int a);
/* Its whole placement (same materialisation). */
const mg_placement *part_placement(part_ctx *c, const mg_tensor *lt);
/* Emits node n as the axes chose it: inputs converted, per-rank attributes, outputs
 * placed (matmul tiles, count-once inputs). */
int part_emit_node(part_ctx *c, const mg_node *n);
/* Emits the physical copy of logical node n with the given physical inputs and attrs,
 * names its outputs as the logical ones and records their placements (c->out[j]). */
mg_node *part_emit(part_ctx *c, const mg_node *n, mg_tensor *const *in, const mg_attrs *attrs);
/* Makes physical tensor po the value of n's logical output lo (its name, identity,
 * role, placement). */
int part_bind(part_ctx *c, const mg_node *n, const mg_tensor *lo, mg_tensor *po, const mg_placement *pl);
/* Emits a helper node (not a copy of a logical node) in n's scope and micro-batch. */
mg_node *part_emit_aux(part_ctx *c, const mg_node *n, mg_op op, const mg_attrs *attrs, int n_in,
                       mg_tensor *const *in, const char *name);
/* Sets a physical tensor's logical identity: lt's, with the block placement p gives. */
void part_set_identity(part_ctx *c, mg_tensor *t, const mg_tensor *lt, const mg_placement *p);
/* The local shape of logical tensor lt placed as p. */
void part_local_shape(const part_ctx *c, const mg_tensor *lt, const mg_placement *p, int64_t *shape);
int part_fail(part_ctx *c, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* After a builder call on the physical graph returned NULL: records the graph's error
 * (or a generic one) and returns a non-zero status. */
int part_graph_error(part_ctx *c);
/* c->err's code, or the physical graph's error (a builder returned NULL). */
int part_status(part_ctx *c);
/* Renames a physical tensor to an absolute name (ignoring the current scope). */
void part_rename(part_ctx *c, mg_tensor *t, const char *name);
/* Creates a leaf of the physical graph under an absolute name. */
mg_tensor *part_new_leaf(part_ctx *c, const char *name, mg_dtype dt, mg_role role, int ndim, const int64_t *shape);
/* Names t "<lt>@<what>" (unique) and gives it lt's identity for placement p. */
mg_tensor *part_named(part_ctx *c, mg_tensor *t, const mg_tensor *lt, const char *what, const mg_placement *p);
/* Nodes emitted from now on get logical node n's scope, phase and micro-batch (NULL:
 * none), and the node's choices start empty (outputs replicated). */
void part_enter_node_context(part_ctx *c, const mg_node *n);
/* Nodes emitted from now on belong to the once-per-step part (reductions of
 * accumulated gradients, the optimizer), whatever node is being partitioned. */
void part_enter_step_context(part_ctx *c);

/* ---- questions axes ask each other ---------------------------------------------------------- */
/* dp.c: where gradients are summed and optimizer state sharded: dp, or dp x cp under
 * context parallelism (one collective over the combined group, as Megatron). */
mg_group dp_grad_group(const part_ctx *c);
/* dp.c: the axes a rank's contribution is a share over (a partial sum over the
 * replicas): dp, cp (summed with dp over dp x cp) and edp for an expert block. */
unsigned dp_replica_axes(void);
/* dp.c: marks a finished parameter gradient out of the micro-batches as each rank's share
 * over dp (unless its bucket reduces it), so a conversion made before dp's after
 * hook (pp's sum over stages) keeps it a share. */
void dp_mark_grad_share(part_ctx *c, const mg_tensor *lo);
/* dist_opt.c: whether logical parameter pid is in the distributed optimizer's buckets. */
bool dopt_has_param(const part_ctx *c, int pid);
/* ep.c: an expert weight (its layout role says so). */
bool ep_is_expert_param(const mg_tensor *lt);
/* ep.c: whether the experts are placed on the expert axes (ep > 1, or an expert tensor
 * group other than tp's): their gradients are then shares over edp. */
bool ep_places_experts(const part_ctx *c);
/* pp.c: whether this rank's stage computes lt (true for leaves and without pp). */
bool pp_here(const part_ctx *c, const mg_tensor *lt);
/* tp.c: the tensor-parallel state a parameter starts in (its layout role, or a plan rule). */
mg_sharding tp_param_state(const part_ctx *c, const mg_tensor *lt);
/* tp.c: the tp state a partial value lt that an op needs whole becomes, as tensor
 * parallelism resolves it (tp_node's rule context): a row split under sequence
 * parallelism when allow_row_split and the rows divide, else FULL. */
mg_sharding tp_resolve_partial(const part_ctx *c, const mg_tensor *lt, bool allow_row_split);
/* tile.c: emits matmul n (inputs converted) as plan->matmul_tiles tiles when it is large
 * and divides. 1 if it did, 0 to emit it whole, < 0 on error. */
int tile_matmul(part_ctx *c, const mg_node *n, mg_tensor *const *in);

#endif

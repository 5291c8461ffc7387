/* mgraph logical dataflow graph: tensors, op nodes, name scopes, checks.
 *
 * Dimension order: outermost first (row-major, like PyTorch). shape[ndim-1] is the
 * contiguous dimension. Transformer activations use Megatron's [seq, batch, hidden]
 * order, so that sequence (SP/CP) shards are contiguous blocks.
 *
 * Ownership: a graph owns every tensor and node created in it; pointers stay valid
 * until mg_graph_free. Builder functions (include/mgraph/ops.h) return NULL on error
 * and record the first error in the graph (mg_graph_error); passing NULL into another
 * builder call propagates it without a crash, so a model is built and checked once.
 *
 * The graph holds no data: storage and placement live in the executors
 * (scheduler/) and in the memory plan (mg_memplan).
 */
#ifndef MGRAPH_GRAPH_H
#define MGRAPH_GRAPH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "mgraph/error.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MG_MAX_DIMS 6
#define MG_MAX_SPLIT 16
#define MG_ALL_AXES (-1000)

/* Element types. A tensor's dtype is what its values are in the logical graph (f32 for
 * every real-valued tensor, i32 for ids and counts); how its bytes hold them is its
 * storage dtype (mg_tensor.storage: f32, or a narrower float the precision pass assigns,
 * graph/precision.c). FP8: OCP's E4M3 (max 448, no infinities) and E5M2 (max 57344). */
typedef enum mg_dtype { MG_F32, MG_BF16, MG_F16, MG_I32, MG_F8E4M3, MG_F8E5M2, MG_DTYPE_COUNT } mg_dtype;

/* What a tensor is for. Drives autodiff (what needs a gradient), the memory plan
 * (what is persistent), the optimizer rewrite and DOT colours. */
typedef enum mg_role {
    MG_ROLE_INPUT,      /* fed each step (token ids, targets, positions) */
    MG_ROLE_PARAM,      /* trained weight: persistent */
    MG_ROLE_ACT,        /* forward activation */
    MG_ROLE_GRAD,       /* gradient (of an activation or a parameter) */
    MG_ROLE_OPT_STATE,  /* optimizer state (Adam moments, lr, clip coefficient): persistent or per step */
    MG_ROLE_LOSS,       /* a scalar loss */
    MG_ROLE_COUNT
} mg_role;

typedef enum mg_op {
#define MG_OP(e, s) MG_OP_##e,
#include "mgraph/op_list.h"
#undef MG_OP
    MG_OP_COUNT
} mg_op;

/* Process groups (the mesh's table, graph/mesh.c). First the mesh's axes, the groups a
 * placement has a state on: tp, cp, dp, pp of the dense layers' rank generator, and ep,
 * etp (expert tensor parallelism), edp (the expert-data-parallel group: the ranks
 * holding the same experts, over which expert gradients are summed) of the experts'.
 * Then the combined groups: DP_CP is dp x cp (Megatron's data-parallel group with
 * context parallelism: gradients are summed, and the distributed optimizer shards, over
 * it in one collective), WORLD every rank, EMB the first and last pipeline stage. */
typedef enum mg_group { MG_GROUP_NONE = -1, MG_GROUP_TP, MG_GROUP_CP, MG_GROUP_EP, MG_GROUP_DP,
                        MG_GROUP_PP, MG_GROUP_ETP, MG_GROUP_EDP, MG_GROUP_DP_CP, MG_GROUP_WORLD,
                        MG_GROUP_EMB, /* first and last pipeline stage (Megatron's embedding group) */
                        MG_GROUP_COUNT } mg_group;

/* How a physical tensor relates to its logical tensor across a group of ranks. */
typedef enum mg_shard_kind { MG_SHARD_FULL, MG_SHARD_SPLIT, MG_SHARD_PARTIAL } mg_shard_kind;
typedef struct mg_sharding {
    mg_shard_kind kind;   /* FULL: every rank of the group holds all of it (replicated)    */
    int dim;              /* SPLIT: the dimension cut into contiguous blocks             */
    mg_group group;       /* the group across which it is split or partially summed       */
} mg_sharding;

/* The mesh's axes: tp, cp, ep, dp, pp, etp, edp (the first MG_MESH_AXES mg_group values). */
#define MG_MESH_AXES 7

/* Where a physical tensor sits on the device mesh: one state per axis (like PyTorch
 * DTensor's placements or OneFlow's SBP). A tensor lives on the dense layers' axes (tp,
 * cp, dp, pp) or, an expert weight and what derives from it, on the experts' (etp, ep,
 * edp, pp); the other axes stay FULL. Several axes may split the same dimension;
 * they nest in rank order, the outer axis (pp, dp, ep, cp, then tp innermost) taking
 * the coarser blocks: the sequence under context parallelism with sequence
 * parallelism is cp-split, and each cp block tp-split inside. Local shapes and
 * logical offsets follow from the placement alone (mg_placement_local). */
typedef struct mg_placement {
    mg_sharding ax[MG_MESH_AXES];
} mg_placement;

/* Logical identity: what a tensor *is*, independent of how a plan partitions it.
 * A logical graph's tensors have offset 0 and shape == their own shape. A partitioned
 * tensor keeps the key and logical shape and records the block it holds; the RNG
 * (weights, dropout masks) is a function of (seed, key, logical element index), so
 * any partition reproduces the serial values exactly. */
typedef struct mg_logical {
    uint64_t key;                      /* 64-bit hash of the logical name */
    int ndim;
    int64_t shape[MG_MAX_DIMS];        /* logical shape */
    int64_t offset[MG_MAX_DIMS];       /* start of this tensor's block in it */
} mg_logical;

/* What a parameter is to Megatron's tensor-parallel layout, declared by the model
 * builder (mg_set_layout): tensor and expert parallelism place parameters by it,
 * whatever their names, so any model gets Megatron's layout. A plan's shard rules
 * (mg_plan.rules) override it by name. The layer kinds are Megatron's. */
typedef enum mg_layout {
    MG_LAYOUT_REPLICATED = 0, /* whole on every tensor-parallel rank: norms, a row-parallel layer's bias,
                               * routers, position tables (the default) */
    MG_LAYOUT_COLUMN,         /* ColumnParallelLinear: weight [out, in] and bias [out] split on out (dim 0) */
    MG_LAYOUT_ROW,            /* RowParallelLinear: weight [out, in] split on in (the last dim) */
    MG_LAYOUT_VOCAB,          /* VocabParallelEmbedding and the output layer: [vocab, h] split on the vocabulary */
    MG_LAYOUT_EXPERT_COLUMN,  /* grouped expert weights [E, out, in]: experts split over ep, out over etp */
    MG_LAYOUT_EXPERT_ROW,     /* grouped expert weights [E, out, in]: experts split over ep, in over etp */
    MG_LAYOUT_COUNT
} mg_layout;

/* Initial value of a parameter or state tensor. */
typedef enum mg_init_kind { MG_INIT_NONE, MG_INIT_ZEROS, MG_INIT_ONES, MG_INIT_NORMAL, MG_INIT_CONSTANT } mg_init_kind;
/* std: the standard deviation of NORMAL, the value of every element for CONSTANT. */
typedef struct mg_init { mg_init_kind kind; float std; } mg_init;

typedef struct mg_node mg_node;
typedef struct mg_graph mg_graph;

typedef struct mg_tensor {
    int id;                       /* dense index in its graph, creation order */
    char *name;                   /* unique in its graph, e.g. "h.3.attn.c_attn.weight" */
    mg_dtype dtype;
    /* How storage holds a float tensor's values (mg_tensor_storage): MG_F32 (the default),
     * MG_BF16 or MG_F16. A narrower storage rounds (to nearest even) what the producer
     * computes: the value IS the rounded one. Kernels compute in f32 and see f32 buffers
     * unless their op handles other storage itself (ops/registry.c converts around the
     * others). Assigned by the precision rules (graph/precision.c); never differs from
     * dtype for i32 tensors. */
    mg_dtype storage;
    mg_role role;
    int ndim;
    int64_t shape[MG_MAX_DIMS];
    mg_logical logical;
    mg_placement place;           /* on the mesh (all FULL in a logical graph) */
    mg_init init;                 /* for parameters and persistent state */
    mg_node *src;                 /* producing node; NULL for leaves (input, param, state) */
    int src_slot;                 /* which output of src */
    /* This tensor is the new value of `updates` and is written into its storage
     * (optimizer updates of parameters and moments). Keeps the graph single-assignment
     * while the step is in place. */
    struct mg_tensor *updates;
    struct mg_tensor *grad;       /* set by autodiff on tensors that got a gradient */
    bool requires_grad;           /* parameters (and anything a test marks) */
    bool no_weight_decay;         /* norms and biases, as Megatron */
    bool embedding_or_output;     /* the word embedding and the untied output layer (Megatron's
                                   * is_embedding_or_output_parameter: --decoupled-lr drives them) */
    mg_layout layout;             /* parameters: how tensor / expert parallelism split it */
    /* Optimizer state (Adam moments, gradient accumulators): the parameter it belongs
     * to, in the same graph (a typed binding: checkpoints and the distributed optimizer
     * find a moment's parameter through it, never by its name). NULL otherwise. */
    struct mg_tensor *state_of;
    bool state_flat;              /* it holds a flat range of state_of's block (the distributed optimizer's
                                   * segments): logical.offset[0] is where the range starts, row-major */
    bool persistent;              /* lives across steps (params, grads accumulators, moments) */
    bool per_microbatch;          /* an input with one value per micro-batch of a step (token ids,
                                   * labels): storage keeps one copy per micro-batch instance */
    int n_uses;                   /* number of node inputs that read it */
    /* A parameter's copy in the model's precision (Megatron's bf16/fp16 model parameter
     * beside the optimizer's fp32 main parameter, graph/precision.c): the same logical
     * identity (key, shape) as its parameter, so it is initialised from the same values
     * (rounded) and loaded from the same checkpoint entry; written from the main parameter
     * after each step; never saved. */
    bool model_copy;
    struct mg_tensor *copy_of;    /* a model copy's parameter, in the same graph (the typed binding
                                   * checkpoints load it through, never its name); NULL otherwise */
} mg_tensor;

/* Typed attributes, one struct per op family (no untyped int arrays). */
/* fp8_gemm: the linear layer's product this node computes or differentiates (1-based,
 * mgraph/fp8.h; 0: not fp8), fp8_role[i]: operand i's scaling slot + 1 (X, W, dY). */
typedef struct mg_attr_matmul {
    bool trans_a, trans_b;
    uint8_t fp8_role[2];
    int32_t fp8_gemm;
} mg_attr_matmul;
typedef struct mg_attr_scale { float value; } mg_attr_scale;
typedef struct mg_attr_norm { float eps; } mg_attr_norm;
typedef struct mg_attr_attention {
    float scale;        /* usually 1/sqrt(head_dim) */
    bool causal;
    float dropout_p;    /* attention-probability dropout */
    uint64_t rng_key;   /* dropout stream, from the logical name */
    int64_t window;     /* causal only; > 0: query i sees at most the keys i - window + 1 .. i
                         * (a sliding window: Megatron's --window-size window-1,0, Hugging
                         * Face's sliding_window); 0: no window */
} mg_attr_attention;
typedef struct mg_attr_embedding {
    int64_t vocab_offset; /* ids outside [offset, offset + rows) give zero rows (vocab-parallel) */
} mg_attr_embedding;
typedef struct mg_attr_xent {
    int32_t ignore_index;
    int64_t vocab_offset; /* vocab-parallel: the logits hold columns [offset, offset + V_local) */
} mg_attr_xent;
/* Rotary embedding (ops/rope.c). The frequency of pair i of a rotary dimension d is
 * theta^(-2i/d), rescaled by `scaling` as Megatron's RotaryEmbedding / YarnRotaryEmbedding
 * and Hugging Face's rope_parameters do; cos and sin are multiplied by mscale (YaRN's
 * attention factor; 0 means 1). */
typedef enum mg_rope_scaling {
    MG_ROPE_DEFAULT = 0,
    MG_ROPE_LLAMA3,    /* Llama 3.1: low frequencies / factor, smooth between (Megatron's --use-rope-scaling) */
    MG_ROPE_YARN,      /* YaRN: interpolation / extrapolation ramp (--position-embedding-type yarn, MLA) */
} mg_rope_scaling;
typedef struct mg_attr_rope {
    float theta;
    bool inverse;      /* rotate by -angle (the gradient) */
    bool interleaved;  /* pairs (x_2i, x_2i+1) (GPT-J, Megatron's --rotary-interleaved, DeepSeek's MLA),
                          not (x_i, x_i+d/2) (GPT-NeoX, Hugging Face's rotate_half) */
    mg_rope_scaling scaling;
    float factor;              /* LLAMA3, YARN */
    int32_t original_max_pos;  /* LLAMA3 (8192), YARN (4096) */
    float low_freq_factor, high_freq_factor; /* LLAMA3 (1, 4) */
    float beta_fast, beta_slow;              /* YARN (32, 1) */
    bool no_round;             /* YARN: keep the correction range unrounded (HF's truncate false) */
    float mscale;              /* cos and sin multiplied by it (0: 1) */
} mg_attr_rope;
typedef struct mg_attr_dropout { float p; uint64_t rng_key; } mg_attr_dropout;
typedef struct mg_attr_shape { int ndim; int64_t shape[MG_MAX_DIMS]; } mg_attr_shape;
typedef struct mg_attr_transpose { int perm[MG_MAX_DIMS]; } mg_attr_transpose;
typedef struct mg_attr_split { int dim; int n; int64_t sizes[MG_MAX_SPLIT]; } mg_attr_split;
typedef struct mg_attr_slice { int dim; int64_t start, len; } mg_attr_slice; /* pad: len = padded size */
typedef struct mg_attr_axis { int dim; bool keepdim; } mg_attr_axis;  /* dim may be MG_ALL_AXES */
/* shift: y[.., i, ..] = x[.., i + by, ..] along dim where that is in range, else fill (the
 * value, converted to the tensor's dtype: token ids and labels shifted, MTP's roll) */
typedef struct mg_attr_shift { int dim; int64_t by; double fill; } mg_attr_shift;
/* weight_decay: the decay, or, when the node has a 7th input (a scheduled decay),
 * the multiplier of that input (Megatron's wd_mult: 1, or 0 for norms and biases). */
typedef struct mg_attr_adamw {
    float beta1, beta2, eps, weight_decay;
    bool skip_nonfinite; /* loss scaling: a clip coefficient that is not finite (an overflow) skips the update */
} mg_attr_adamw;
typedef struct mg_attr_clip { float max_norm; } mg_attr_clip;
/* sumsq: with zeros, the count of elements equal to zero instead of the sum of squares
 * (Megatron's count_zeros_fp32 for --log-num-zeros-in-grad). A sum like the other, so
 * every partitioner's rule for the norm (shares summed over a group, replicated tensors
 * counted once) gives the count of the whole model. */
typedef struct mg_attr_sumsq { bool zeros; } mg_attr_sumsq;
/* cast: the output holds the input's values in storage dtype `to` (rounded); fp8 and
 * loss-scaling ops (graph/precision.c) keep their parameters here too. */
typedef struct mg_attr_cast { mg_dtype to; } mg_attr_cast;
/* Mixture-of-experts routing and dispatch (ops/moe_*.c, include/mgraph/moe.h). */
typedef enum mg_moe_drop_policy { MG_MOE_DROP_PROBS, MG_MOE_DROP_POSITION } mg_moe_drop_policy;
/* The router's score function (Megatron's --moe-router-score-function). */
typedef enum mg_moe_score { MG_MOE_SOFTMAX = 0, MG_MOE_SIGMOID } mg_moe_score;
typedef struct mg_attr_moe {
    int topk;                  /* experts per token */
    bool pre_softmax;          /* softmax over all experts, then top-k (else top-k, softmax over the k) */
    int64_t capacity;          /* tokens per expert; 0: dropless */
    mg_moe_drop_policy drop_policy;
    bool pad_to_capacity;      /* every expert gets exactly min(capacity, tokens) rows */
    int64_t rows;              /* permute: static bound of the dispatched rows */
    mg_moe_score score;        /* route: softmax or sigmoid scores */
    int num_groups, group_topk;/* route: top-k within the group_topk best of num_groups expert groups (0: all) */
    float scaling;             /* route: weights times this (0: 1; --moe-router-topk-scaling-factor) */
    int64_t samples;           /* topk_count, map_count: counts per sample ([samples, E], token t is
                                  sample t % samples, as [s, b] flattens); 0: one row [E] */
    float rate;                /* expert_bias_update: the step of each bias */
} mg_attr_moe;

typedef enum mg_lr_decay {
    MG_LR_CONSTANT, MG_LR_LINEAR, MG_LR_COSINE, MG_LR_INVERSE_SQRT, MG_LR_WSD
} mg_lr_decay;
/* How WSD anneals in its last wsd_decay_steps (Megatron's --lr-wsd-decay-style). */
typedef enum mg_lr_wsd_decay { MG_WSD_EXPONENTIAL, MG_WSD_LINEAR, MG_WSD_COSINE, MG_WSD_MINUS_SQRT } mg_lr_wsd_decay;
/* How weight decay moves from its start to its end (Megatron's --weight-decay-incr-style). */
typedef enum mg_wd_incr { MG_WD_CONSTANT, MG_WD_LINEAR, MG_WD_COSINE } mg_wd_incr;
/* Megatron's OptimizerParamScheduler. It counts steps, and an iteration advances it by
 * steps_per_iter: Megatron counts samples, so mgraph-run sets the global batch size
 * and gives warmup and decay in samples (iterations x global batch, or --lr-*-samples).
 * Iteration i (0-based) runs at the rate of step i x steps_per_iter, as Megatron's
 * does: its first warm-up iteration runs at init_lr. */
typedef struct mg_lr_schedule {
    float lr, min_lr;
    double warmup_steps;        /* fractional with --lr-warmup-fraction */
    int64_t decay_steps;
    mg_lr_decay style;
    int64_t steps_per_iter;     /* 0 means 1 */
    float init_lr;              /* where warmup starts (--lr-warmup-init) */
    int64_t wsd_decay_steps;    /* WSD: the annealing phase ends at decay_steps */
    mg_lr_wsd_decay wsd_style;
    /* Megatron's --rampup-batch-size START INCREMENT SAMPLES (ramp_start 0: none). The
     * global batch then grows from ramp_start by ramp_increment up to steps_per_iter
     * (the full global batch) over ramp_samples samples, and iteration i runs at the
     * step count of the samples before it (mg_lr_samples_before), not i x steps_per_iter. */
    int64_t ramp_start, ramp_increment, ramp_samples;
    /* Weight decay, the scheduler's other rate (Megatron's --start-weight-decay,
     * --end-weight-decay, --weight-decay-incr-style): from wd_start to wd_end over
     * wd_incr_steps, then wd_end. MG_WD_CONSTANT (zeroed): no schedule, the optimizer's
     * constant weight decay. */
    mg_wd_incr wd_style;
    float wd_start, wd_end;
    int64_t wd_incr_steps;
} mg_lr_schedule;

typedef enum mg_reduce_op { MG_REDUCE_SUM, MG_REDUCE_MAX } mg_reduce_op;
typedef struct mg_attr_comm {
    mg_group group;     /* communicator */
    int nranks;         /* size of the group (shape rules need it; ranks need not agree on more) */
    int64_t seq;        /* position in this rank's total order of communication: every rank issues
                         * its collectives by increasing seq, and two ranks sharing a group give
                         * that group's collectives the same relative order (deadlock freedom) */
    mg_reduce_op op;
    int dim;            /* gather / scatter dimension */
    int peer;           /* send/recv: rank in the group; broadcast: root */
    int tag;            /* send/recv: the transfer's number, the same on both ends (messages of
                         * micro-batch instance i carry tag x n_micro + i) */
    int64_t rows;       /* alltoall: static row bound of the output */
    /* recv: what arrives (it has no input to take it from) */
    mg_dtype dtype;
    int ndim;
    int64_t shape[MG_MAX_DIMS];
} mg_attr_comm;

typedef union mg_attrs {
    mg_attr_matmul matmul;
    mg_attr_scale scale;
    mg_attr_norm norm;
    mg_attr_attention attention;
    mg_attr_embedding embedding;
    mg_attr_xent xent;
    mg_attr_rope rope;
    mg_attr_dropout dropout;
    mg_attr_shape shape;
    mg_attr_transpose transpose;
    mg_attr_split split;
    mg_attr_slice slice;
    mg_attr_shift shift;
    mg_attr_axis axis;
    mg_attr_adamw adamw;
    mg_attr_clip clip;
    mg_attr_sumsq sumsq;
    mg_attr_cast cast;
    mg_attr_moe moe;
    mg_lr_schedule lr;
    mg_attr_comm comm;
} mg_attrs;

/* Which part of the training step a node belongs to (set by the passes that emit it). */
typedef enum mg_phase { MG_PHASE_FORWARD, MG_PHASE_BACKWARD, MG_PHASE_OPTIMIZER } mg_phase;

struct mg_node {
    int id;                 /* dense index, creation order: stable across identical builds */
    mg_op op;
    mg_attrs attrs;
    int n_in, n_out;
    mg_tensor **in;         /* owned array of n_in pointers */
    mg_tensor **out;        /* owned array of n_out pointers */
    char *scope;            /* name scope at creation ("h.3.attn"): DOT clusters */
    mg_phase phase;
    int mb;                 /* micro-batch index, -1 when the node is not per micro-batch */
    /* Which part of the model the node computes, for pipeline parallelism: transformer
     * layer >= 0, or MG_LAYER_PRE (embedding), MG_LAYER_POST (final norm, output layer,
     * loss), MG_LAYER_NONE (not tied to a layer: gradient accumulation, the optimizer).
     * Set by the model builder (mg_graph_set_layer); autodiff gives a node's backward
     * its layer. The pipeline pass places layers on stages from it. */
    int layer;
    int stage;              /* physical graphs: virtual pipeline stage (chunk x pp + stage); 0 without pp */
    double priority;        /* critical-path bottom level, set by mg_graph_priorities */
};

/* ---- graph lifetime --------------------------------------------------------- */
mg_graph *mg_graph_new(void);
void mg_graph_free(mg_graph *g);

/* First error recorded while building (code MG_OK if none). */
const mg_error *mg_graph_error(const mg_graph *g);
int mg_graph_fail(mg_graph *g, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

int mg_graph_n_tensors(const mg_graph *g);
int mg_graph_n_nodes(const mg_graph *g);
mg_tensor *mg_graph_tensor(const mg_graph *g, int id);
mg_node *mg_graph_node(const mg_graph *g, int id);
mg_tensor *mg_graph_find(const mg_graph *g, const char *name);

/* ---- name scopes ------------------------------------------------------------ */
/* Names of tensors created inside a scope are prefixed "scope." (printf format). */
void mg_scope_push(mg_graph *g, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void mg_scope_pop(mg_graph *g);
const char *mg_scope_current(const mg_graph *g);
/* Replaces the whole scope stack by one absolute scope ("" or NULL: none). Passes that
 * rewrite a graph into another (partitioners) use it to give nodes the scope of the
 * node they stand for, and tensors their absolute logical names. */
void mg_scope_set(mg_graph *g, const char *scope);
/* Per-node context the builder stamps on every node it creates. */
void mg_graph_set_phase(mg_graph *g, mg_phase phase);
void mg_graph_set_mb(mg_graph *g, int mb);
/* The model part nodes created from now on compute (mg_node.layer). */
#define MG_LAYER_NONE (-3)
#define MG_LAYER_PRE (-2)
#define MG_LAYER_POST (-1)
void mg_graph_set_layer(mg_graph *g, int layer);
int mg_graph_layer(const mg_graph *g);

/* ---- leaves ----------------------------------------------------------------- */
mg_tensor *mg_input(mg_graph *g, const char *name, mg_dtype dt, int ndim, const int64_t *shape);
mg_tensor *mg_param(mg_graph *g, const char *name, int ndim, const int64_t *shape, mg_init init);
/* Persistent optimizer state with the shape of `like`. */
mg_tensor *mg_state(mg_graph *g, const char *name, mg_dtype dt, int ndim, const int64_t *shape, mg_init init);
/* Declares parameter t's layout role (mg_layout). Returns t (NULL passes through). */
mg_tensor *mg_set_layout(mg_tensor *t, mg_layout layout);
const char *mg_layout_name(mg_layout layout);
/* Whether a layout role holds experts (split over the expert-parallel group). */
bool mg_layout_is_expert(mg_layout layout);
/* Renames t to "<scope>.<name>" (unique: a clash gets an error). Returns t. */
mg_tensor *mg_set_name(mg_graph *g, mg_tensor *t, const char *name);

/* ---- generic node creation (ops.h wraps this per op) ------------------------- */
/* Creates a node, runs the op's shape rule, creates its outputs. `name` (may be NULL)
 * names the first output; others get ".1", ".2"... NULL on error (recorded). */
mg_node *mg_node_new(mg_graph *g, mg_op op, const mg_attrs *attrs, int n_in, mg_tensor *const *in,
                     const char *name);

/* ---- checks and order ------------------------------------------------------- */
/* Acyclic, every input from this graph, each tensor produced at most once, shapes
 * re-inferred and equal. */
int mg_graph_validate(const mg_graph *g, mg_error *err);
/* Deterministic topological order (Kahn, ties by node id). Returned array is owned by
 * the graph and valid until the graph changes. */
int mg_graph_topo(mg_graph *g, mg_node ***order, int *n, mg_error *err);
/* Critical-path priorities: bottom level by each op's cost. */
int mg_graph_priorities(mg_graph *g, mg_error *err);

/* ---- small helpers ---------------------------------------------------------- */
int64_t mg_numel(const mg_tensor *t);
size_t mg_dtype_size(mg_dtype dt);
/* The dtype t's bytes are in (its storage for a float tensor, else its dtype), the size
 * of one element of it, and numel x that. */
mg_dtype mg_tensor_storage(const mg_tensor *t);
size_t mg_tensor_esize(const mg_tensor *t);
size_t mg_tensor_bytes(const mg_tensor *t);
/* A floating-point dtype narrower than f32 (bf16, f16, the fp8 formats). */
bool mg_dtype_is_low(mg_dtype dt);
const char *mg_dtype_name(mg_dtype dt);
const char *mg_role_name(mg_role r);
const char *mg_op_name(mg_op op);
const char *mg_group_name(mg_group grp);
/* "[4, 64, 768]" into buf. */
const char *mg_shape_str(const mg_tensor *t, char *buf, size_t len);
uint64_t mg_hash_name(const char *s);
bool mg_same_shape(const mg_tensor *a, const mg_tensor *b);

#ifdef __cplusplus
}
#endif
#endif

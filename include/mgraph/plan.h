/* Partition plans and the partitioner: logical graph -> one rank's physical graph.
 *
 * A plan says how many ranks each parallel dimension uses (Megatron's flags), and may
 * override by name which parameters tensor parallelism splits (the model declares
 * that by layout roles, mg_tensor.layout). The partitioner walks the logical
 * training-step graph (forward, backward and optimizer: it runs after autodiff, so
 * collectives need no gradient rules and the optimizer step is partitioned like any
 * other op) and gives every tensor a sharding state per group: full, split along a
 * dimension, or partial sum. Where a consumer needs another state than its producer
 * gives, a conversion is inserted: a collective node (all-reduce, all-gather,
 * reduce-scatter) or a local slice.
 *
 * Each parallelism is one file of partitioners/ plugged into the walk of partition.c
 * (the axes table: pp.c, dist_opt.c, dp.c, cp.c, ep.c, tp.c; plan.c the flags, plan
 * files and divisibility rules; tile.c matmuls cut into tasks inside a rank):
 * partitioners/README.md.
 */
#ifndef MGRAPH_PLAN_H
#define MGRAPH_PLAN_H

#include <stdio.h>

#include "mgraph/comm.h"
#include "mgraph/graph.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MG_PLAN_MAX_RULES 64
/* Micro-batches in flight per rank unless a plan says otherwise (bench_train, 2 cores). */
#define MG_PLAN_DEFAULT_SLOTS 2

/* "Parameters whose name matches `pattern` (fnmatch(3) glob) are split along `dim`
 * over the tensor-parallel group" (dim -1: kept whole). Overrides the layout role the
 * model declared (mg_tensor.layout); the last rule that matches applies. */
typedef struct mg_shard_rule {
    char pattern[128];
    int dim;
} mg_shard_rule;

/* The order a pipeline stage runs its micro-batches' forward and backward halves in
 * (scheduler/pipeline_schedule.c). AUTO: Megatron's choice, interleaved 1F1B with
 * virtual stages, else 1F1B. GPIPE: every forward, then every backward. */
typedef enum mg_pp_schedule_kind {
    MG_PP_SCHEDULE_AUTO, MG_PP_SCHEDULE_1F1B, MG_PP_SCHEDULE_INTERLEAVED, MG_PP_SCHEDULE_GPIPE
} mg_pp_schedule_kind;

/* Megatron's data-parallel sharding (--use-megatron-fsdp --data-parallel-sharding-strategy;
 * --use-torch-fsdp2 = optim_grads_params): none (plain data parallelism, no_shard), the
 * optimizer state (optim: ZeRO-1, the distributed optimizer, dist_opt.c), gradients too
 * (optim_grads: ZeRO-2), parameters too (optim_grads_params: ZeRO-3); partitioners/fsdp.c
 * builds the last two. A plan keeps optim as distributed_optimizer. */
typedef enum mg_fsdp_kind { MG_FSDP_NONE, MG_FSDP_OPTIM, MG_FSDP_OPTIM_GRADS, MG_FSDP_OPTIM_GRADS_PARAMS } mg_fsdp_kind;
typedef mg_fsdp_kind mg_fsdp;

typedef struct mg_plan {
    int tp, pp, cp, ep;          /* sizes; dp is derived from the world size */
    int etp;                     /* expert tensor parallelism: tp (> 1) splits every expert's rows / columns
                                  * over the tensor-parallel group (Megatron's default); 0 or 1: each tp
                                  * rank runs whole experts */
    char order[32];              /* the mesh's rank order, innermost first ("": tp-cp-ep-dp-pp; Megatron's
                                  * --use-tp-pp-dp-mapping is tp-pp-dp): graph/mesh.c */
    int vpp;                     /* model chunks (virtual stages) per pipeline rank; 1: none */
    int pp_first_layers, pp_last_layers; /* layers on the first / last stage (0: an equal share) */
    /* Megatron's --pipeline-model-parallel-layout ("Et*3|(tt|)*29|L": E the embedding, t
     * a transformer layer, L the loss, | between virtual stages, in chunk x pp + stage
     * order; "": none), and --account-for-embedding/loss-in-pipeline-split (the embedding
     * and the loss count as a layer each in the equal split) */
    char pp_layout[256];
    bool pp_account_embedding, pp_account_loss;
    mg_pp_schedule_kind pp_schedule;
    bool sequence_parallel;
    bool distributed_optimizer;
    mg_fsdp fsdp;                /* Megatron-FSDP's sharding (MG_FSDP_NONE: none) */
    int64_t bucket_numel;        /* distributed optimizer: parameters per gradient bucket */
    int matmul_tiles;            /* split each large matmul into this many tasks (1: off) so
                                  * a rank's workers share it (partitioners/tile.c) */
    double matmul_tile_min_flops;/* ... when it has at least this many FLOPs (default 5e7) */
    int microbatch_slots;        /* micro-batches in flight at once on a rank (activation copies) */
    int micro_batch_split;       /* each micro-batch runs as this many sub-batches (0: auto,
                                  * mg_plan_micro_batch_split) */
    int n_rules;
    mg_shard_rule rules[MG_PLAN_MAX_RULES];
} mg_plan;

/* Serial plan without shard rules: tensor parallelism places parameters by the
 * layout roles the model declared (mg_tensor.layout). */
void mg_plan_defaults(mg_plan *p);

/* The plan a strategy name gives (no_shard, optim, optim_grads, optim_grads_params):
 * p->fsdp, or p->distributed_optimizer for optim. MG_ERR_INVALID for other names. */
int mg_plan_set_fsdp(mg_plan *p, const char *strategy);
const char *mg_fsdp_name(mg_fsdp f);

/* Reads a plan file: one setting per line, '#' comments:
 *     tensor-model-parallel-size 2
 *     pipeline-model-parallel-size 1
 *     context-parallel-size 1
 *     expert-model-parallel-size 1
 *     expert-tensor-parallel-size 1         (default: the tensor-parallel size)
 *     order tp-cp-ep-dp-pp                  (the rank order, innermost first; use-tp-pp-dp-mapping true: tp-pp-dp)
 *     sequence-parallel true
 *     use-distributed-optimizer true
 *     data-parallel-sharding-strategy optim_grads_params   (Megatron-FSDP: optim_grads, optim, no_shard)
 *     bucket-size 40000000
 *     microbatch-slots 2                    (micro-batches in flight: activation memory x slots)
 *     micro-batch-split auto                (or N: each micro-batch runs as N sub-batches)
 *     num-virtual-stages-per-pipeline-rank 2   (model chunks per pipeline rank)
 *     decoder-first-pipeline-num-layers 3   (and decoder-last-...: uneven first / last stage)
 *     pipeline-model-parallel-layout Et|tt|tL   (virtual stages; num-virtual-stages-per-pipeline-rank follows)
 *     account-for-embedding-in-pipeline-split true   (and account-for-loss-...)
 *     pipeline-schedule 1f1b                (auto, 1f1b, interleaved or gpipe)
 *     shard h.*.attn.c_attn.weight 0        (adds a rule overriding the layout roles; "none": whole;
 *                                            "shard-clear" drops the rules read so far)
 * Unknown keys and malformed values are errors naming the file and line. */
int mg_plan_read(mg_plan *p, const char *path, mg_error *err);
void mg_plan_print(const mg_plan *p, FILE *f);
const char *mg_pp_schedule_name(mg_pp_schedule_kind k);
/* The kind a name (auto, 1f1b, interleaved, gpipe) stands for; MG_ERR_INVALID for others. */
int mg_pp_schedule_parse(const char *s, mg_pp_schedule_kind *k);

/* Whether the plan splits the experts over the tensor-parallel group (etp == tp > 1). */
bool mg_plan_expert_tp(const mg_plan *p);
/* This rank's mesh under plan p (its sizes, etp and order): mg_mesh_init_spec. */
int mg_plan_mesh(const mg_plan *p, int world, int rank, mg_mesh *m, mg_error *err);

/* The model-independent rules for `world` ranks: world a multiple of tp*pp*cp, sizes
 * >= 1, ep dividing dp x cp, combinations this build does not implement (pp with cp or
 * ep, ep with cp, cp with the distributed optimizer) "not supported yet". */
int mg_plan_check(const mg_plan *p, int world, mg_error *err);

/* Sub-batches each micro-batch of a rank runs as (>= 1; the graph is built for
 * micro_batch / that many samples, and dropout draws the same masks: mg_rng_dropout_site).
 * A rank with fewer micro-batches per step than CPU workers leaves workers waiting on
 * one micro-batch's chain of layers; sub-batches are independent chains. Auto
 * (p->micro_batch_split 0): the fewest sub-batches, dividing micro_batch, that give
 * every worker one; 1 under pipeline parallelism (the schedule orders micro-batches) and
 * for MoE models (the load-balancing loss and the expert capacity are per micro-batch:
 * a cut would change them). A given split is returned as is (mg_plan_check_split). */
int mg_plan_micro_batch_split(const mg_plan *p, int micro_batch, int local_micro, int workers, bool moe);
/* A given p->micro_batch_split (> 1) that the run cannot honour: one not dividing
 * micro_batch, or with pipeline parallelism or MoE ("not supported"). */
int mg_plan_check_split(const mg_plan *p, int micro_batch, bool moe, mg_error *err);

/* The plan against the logical graph it is to partition, for `world` ranks:
 * MG_ERR_INVALID naming the rule when a shard rule names a dimension its parameter
 * lacks or the tensor-parallel size does not divide, or a rule matches no parameter;
 * and naming what to do when the graph has no
 * per-micro-batch part (no node with mb >= 0) under data or pipeline parallelism or the
 * distributed optimizer (every rank would compute the whole batch), or marks no layer
 * under pipeline parallelism. mg_partition and the trainer call it. */
int mg_plan_check_graph(const mg_plan *p, int world, const mg_graph *L, mg_error *err);
/* Adds the rule "split parameters matching pattern along dim over tp" (dim -1: keep them
 * whole), as a plan file's `shard` line. */
int mg_plan_add_rule(mg_plan *p, const char *pattern, int dim, mg_error *err);

/* Where pipeline parallelism puts a model of n_layers transformer layers: vstage[i] is
 * layer i's virtual stage (chunk x pp + stage: rank r runs chunks r, r + pp, ...), *pre
 * the embedding's and *post the head and loss's (either may be NULL). Megatron's layouts:
 * pp x vpp equal ranges, or uneven first / last stages. MG_ERR_INVALID naming the rule
 * when the layers do not split so. */
int mg_plan_layer_vstages(const mg_plan *p, int n_layers, int *vstage, int *pre, int *post, mg_error *err);
/* The number of virtual stages a --pipeline-model-parallel-layout string describes
 * (MG_ERR_INVALID for a malformed one). */
int mg_plan_pp_layout_stages(const char *layout, int *n_stages, mg_error *err);

/* The model facts a plan must divide. */
typedef struct mg_plan_model {
    int hidden, heads, ffn_hidden, seq_length;
    int64_t vocab;               /* padded */
    int global_batch, micro_batch;
    int query_groups;            /* key/value head groups (GQA); 0 = heads */
    int num_layers;              /* 0: not checked */
} mg_plan_model;
int mg_plan_check_model(const mg_plan *p, int world, const mg_plan_model *m, mg_error *err);

/* What one rank runs: its graph, and where each logical tensor's value lives in it.
 * Hosts feed inputs, read losses and exchange parameters through `local`, keyed by the
 * logical tensors the model builder returned (mg_step's fields), never by name. */
typedef struct mg_rank_graph {
    mg_graph *graph;          /* the rank's graph (owned unless it is the logical graph) */
    const mg_graph *logical;  /* the logical graph it came from (borrowed) */
    mg_tensor **local;        /* [n_logical], by logical tensor id: the rank's tensor holding that
                               * tensor's value (its block, placed as local[i]->place; host-read
                               * outputs whole), NULL where this rank has none */
    int n_logical;
    bool owns_graph;
} mg_rank_graph;

/* Partitions logical graph L (a training step, after backward and optimizer) for the
 * rank `mesh->rank`. The rank graph's per-micro-batch part (mb >= 0) is what the rank
 * runs for each of its micro-batches (data parallelism: see mg_exec_info). */
int mg_partition(const mg_graph *L, const mg_plan *plan, const mg_mesh *mesh, mg_rank_graph *out, mg_error *err);
/* One rank without partitioning: the logical graph itself, each tensor bound to itself. */
int mg_rank_graph_serial(mg_graph *L, mg_rank_graph *out, mg_error *err);
/* The rank's tensor for logical tensor lt (NULL: none on this rank, or lt is not of
 * the logical graph). */
mg_tensor *mg_rank_tensor(const mg_rank_graph *r, const mg_tensor *lt);
void mg_rank_graph_release(mg_rank_graph *r);

/* Analytic bytes this rank sends per step on each group (ring algorithms), from the
 * collective nodes of a physical graph: those of the per-micro-batch part count once
 * per micro-batch this rank runs (n_micro), the others once. */
void mg_plan_comm_bytes(const mg_graph *P, int n_micro, double bytes[MG_GROUP_COUNT]);

#ifdef __cplusplus
}
#endif
#endif

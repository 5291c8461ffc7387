/* The planner: predicts step time, memory and MFU of a partition plan on a cluster
 * from the graphs mgraph would run, and searches plans (planner/, tools/mgraph-plan.c).
 *
 * Costs come from mgraph's own rank graph of a probe: a model of the query's widths
 * with one transformer layer per layer kind (dense / MoE, windowed / full), partitioned
 * for the plan's tensor, context and expert parallelism. Each compute node costs
 * max(FLOPs / (peak x efficiency), bytes / (HBM bandwidth x efficiency)) plus a launch
 * overhead (a roofline with a small-GEMM curve; attention at its own efficiency), each
 * collective an alpha-beta model of its ring or tree on the link its group spans
 * (NVLink inside a node or NVLink domain, the scale-out fabric across, tapered by its
 * oversubscription). The walk gives a table: per micro-batch and block (embedding,
 * each layer kind, output layer + loss) the forward and backward compute, collectives
 * per group, saved activations and parameters. Nothing the size of the model is
 * built: pipeline stages (even, uneven, with virtual stages, or an explicit
 * --pipeline-model-parallel-layout), data parallelism (DDP, the distributed optimizer,
 * FSDP), recompute and the overlaps Megatron implements are priced from the table
 * (planner/schedule.c says how), so a 126-layer model on 16,384 GPUs or 131,072 tokens
 * of context parallelism prices in milliseconds.
 */
#ifndef MGRAPH_PLANNER_H
#define MGRAPH_PLANNER_H

#include <stdbool.h>
#include <stdio.h>

#include "mgraph/error.h"
#include "mgraph/graph.h"
#include "mgraph/model.h"
#include "mgraph/plan.h"
#include "mgraph/recompute.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Arithmetic the cluster runs the model in: fp32 everywhere (mgraph's CPU runs), or
 * Megatron's mixed precision (16-bit weights and activations, fp32 gradients, fp32
 * master weights and moments in the optimizer). */
typedef enum mg_precision { MG_PREC_FP32, MG_PREC_BF16 } mg_precision;

/* A cluster of identical nodes. Bandwidths are per GPU (per rank), one direction. */
typedef struct mg_cluster {
    char name[64];
    int gpus_per_node;           /* ranks that share the fast tier (a node's NVLink; an NVL72 rack: 72) */
    int max_nodes;               /* 0: unbounded */
    double peak_tflops[2];       /* dense matrix peak per precision [MG_PREC_FP32], [MG_PREC_BF16] */
    double vector_tflops;        /* non-matrix (elementwise) FLOP/s, 1e12 */
    double hbm_gib;              /* memory per GPU */
    double hbm_gbps;             /* memory bandwidth, GB/s */
    double intra_gbps, intra_latency_us; /* NVLink (or shared memory) per GPU */
    double inter_gbps, inter_latency_us; /* the scale-out fabric per GPU (its NIC): InfiniBand, RoCE */
    /* A collective's fixed cost besides its steps' latencies (NCCL's tuning model: a ring
     * collective costs a base latency + steps x the link's per-step latency) */
    double collective_base_latency_us;
    /* The scale-out fabric's taper: a group spanning more than leaf_nodes nodes crosses
     * the spine, where each GPU gets inter_gbps / oversubscription (1: non-blocking;
     * leaf_nodes 0: every node on one leaf). */
    int leaf_nodes;
    double oversubscription;
    /* Small-GEMM efficiency curve: a matrix op of F FLOPs runs at
     * peak x gemm_efficiency x F / (F + gemm_half_gflops x 1e9). */
    double gemm_efficiency, gemm_half_gflops;
    double attention_efficiency; /* fused attention's FLOP rate / the GEMM curve's at the same FLOPs */
    /* fused attention's backward FLOP rate / its forward's (FlashAttention's backward,
     * 5 matmuls with dS's softmax-gradient between them, reaches less of the peak; 0 = 1) */
    double attention_backward_efficiency;
    double memory_efficiency;    /* fraction of hbm_gbps memory-bound kernels reach */
    double kernel_overhead_us;   /* per node (launch or task submission) */
    /* per forward or backward of one model chunk on one micro-batch: the schedule's own
     * host work (Megatron's Python schedule step, the transfers' set-up and waits) */
    double step_overhead_us;
    /* A collective running beside compute (NCCL kernels, userbuffers) takes SMs from it:
     * the compute it hides behind runs this fraction of the hidden time longer. */
    double overlap_interference;
    double reserved_gib;         /* memory the runtime takes besides the model (context, buffers) */
    /* 1: the pipeline's stages take turns instead of working at once (what mgraph's
     * pp = 2 did on the 2-core CPU machine before its event priorities); a step's
     * pipeline part is then M x the sum of the stages' micro-batch times. 0: the
     * schedule's M x the slowest stage + the others' fill and drain / v. */
    int pipeline_serial;
    mg_precision precision;      /* default precision of plans on this cluster */
} mg_cluster;

/* Presets: "dgx-a100-80gb", "dgx-h100", "h200". */
int mg_cluster_preset(const char *name, mg_cluster *c, mg_error *err);
/* A cluster file: "key value" lines, '#' comments (see mg_cluster_print for the keys).
 * Unknown keys, malformed or out-of-range values and missing keys are errors naming the
 * file and line. */
int mg_cluster_read(const char *path, mg_cluster *c, mg_error *err);
/* A preset name, else a file path. */
int mg_cluster_load(const char *name_or_path, mg_cluster *c, mg_error *err);
void mg_cluster_print(const mg_cluster *c, FILE *f);
/* Comma-separated preset names. */
const char *mg_cluster_preset_names(void);

/* (Megatron's data-parallel sharding, mg_fsdp_kind: mgraph/plan.h) */

/* What to predict. */
typedef struct mg_plan_query {
    mg_gpt_config model;         /* vocab: padded for tp (mg_vocab_padded) */
    int micro_batch, global_batch;
    int world;
    mg_plan plan;                /* tp, pp, cp, ep, sp, distributed optimizer, uneven first / last stage */
    int virtual_stages;          /* interleaved schedule: model chunks per rank (1: plain 1F1B) */
    /* Megatron's --pipeline-model-parallel-layout ("E|(t|)*126L"; NULL: none; borrowed) and
     * --account-for-embedding/loss-in-pipeline-split */
    const char *pp_layout;
    bool account_embedding, account_loss;
    mg_recompute_granularity recompute;
    mg_recompute_method recompute_method;
    int recompute_num_layers;
    /* Megatron's overlaps (schedule.c: what each hides behind what) */
    bool overlap_grad_reduce;    /* data-parallel reduction during the last micro-batch's backward */
    bool overlap_param_gather;   /* distributed optimizer's all-gather during the next forward */
    bool tp_comm_overlap;        /* userbuffers: tp collectives pipelined with their GEMMs */
    bool overlap_p2p;            /* interleaved schedule's stage transfers beside compute (Megatron's default) */
    mg_fsdp_kind fsdp;
    /* Megatron's --cp-comm-type: false the K/V ring beside attention (p2p, the default),
     * true all-gather K/V first and reduce-scatter their gradients after (allgather;
     * Llama 3's context parallelism): the same bytes, waited for */
    bool cp_allgather;
    /* MoE: a shared expert of this width in each MoE layer when model.moe.shared_ffn (Megatron's
     * --moe-shared-expert-intermediate-size) is 0 (0: none; priced from the graph, as the model's
     * own), and --moe-shared-expert-overlap (the shared expert runs while the routed tokens travel) */
    int moe_shared_ffn;
    bool moe_shared_overlap;
    /* Megatron's --fp16 without --accumulate-allreduce-grads-in-fp32 (the 2021 papers'
     * runs), or --grad-reduce-in-bf16: gradients go through the data-parallel reduction
     * in 16 bits, half the bytes of fp32 main gradients. Memory is unchanged. */
    bool grads_16bit;
    bool grad_buffer_16bit;      /* --grad-reduce-in-bf16: the gradient buffers themselves are 16-bit (memory) */
    int moment_bytes;            /* Adam's two moments per parameter: 0 = fp32's 8 (the precision-aware optimizer's
                                  * --exp-avg-dtype / --exp-avg-sq-dtype bf16 make 6 or 4) */
    mg_precision precision;
    /* Cost attention as Megatron's unfused path (--attention-backend unfused, the 2021
     * papers' kernels): scores and probabilities of s x s per head written to memory,
     * masked softmax and dropout as their own kernels, 5as^2b bytes kept per layer
     * unless recomputed (selective recompute). Default: mgraph's fused attention. */
    bool attention_unfused;
} mg_plan_query;

/* Fills a query with Megatron's defaults (no parallelism, micro-batch 1, bf16 ...). */
void mg_plan_query_defaults(mg_plan_query *q);

typedef struct mg_group_cost {
    double bytes;                /* payload bytes per step this rank sends (ring estimate) */
    double time_s;               /* time in its collectives per step */
    double exposed_s;            /* of which the step waits for (the rest hides behind compute) */
    int ranks;                   /* group size */
    bool inter_node;             /* the group spans nodes */
} mg_group_cost;

#define MG_PLANNER_MAX_PP 1024
/* One block of the model (the embedding, a layer kind, or the output layer with the loss
 * and the multi-token prediction layers), per micro-batch on one rank, read off the
 * probe's rank graph: [0] forward, [1] backward. */
typedef struct mg_block_cost {
    double flops[2];             /* every node's */
    double gemm_flops[2];        /* of flops: matrix products (dense and grouped) */
    double attention_flops[2];   /* of flops: attention (causal pairs only) */
    double time_s[2];            /* the kernels' own time, collectives apart */
    double params, expert_params; /* elements on this rank */
    bool moe;                    /* a layer kind with routed experts */
    int layers, first_layer;     /* layer kinds: how many of the model's layers, the first of them */
} mg_block_cost;

#define MG_PREDICTION_MAX_KINDS 64

typedef struct mg_prediction {
    double step_time_s;
    double model_flops;          /* per step, Megatron's count (no recompute) */
    double hw_flops_per_gpu;     /* per step, what the slowest stage's rank executes (recompute included) */
    double tflops_per_gpu;       /* model FLOP/s per GPU, 1e12 */
    double mfu;                  /* tflops_per_gpu / peak */
    double bubble_fraction;      /* fill and drain over M x the slowest stage: (pp - 1) / (v M) for equal stages */
    int n_micro;                 /* micro-batches per pipeline per step, M */
    int virtual_stages;          /* model chunks per pipeline rank (the layout's, when it gives them) */
    int dp;
    /* time per micro-batch on the slowest stage, and the step's parts */
    double fwd_s, bwd_s, recompute_s;     /* per micro-batch: compute + exposed tp/cp/ep comm */
    double p2p_s;                         /* per micro-batch: exposed stage-boundary transfers */
    double pipeline_s;                    /* M x the slowest stage + (the other stages) / v */
    double optimizer_s;                   /* once-per-step compute (grad norm, AdamW) + its collectives */
    double dp_exposed_s;                  /* gradient reduction / parameter gather not hidden */
    int slowest_stage;
    /* memory per GPU, bytes, of the stage that needs the most (mem_stage) */
    double mem_weights, mem_grads, mem_optimizer, mem_activations, mem_reserved, mem_total;
    double activations_per_micro;         /* saved for the backward by one micro-batch (all its chunks) */
    double inflight_micro;                /* micro-batches' worth of activations held at once */
    int mem_stage;                        /* the stage of the maximum */
    char mem_stage_desc[96];              /* what it holds ("embedding + 7 layers in 8 chunks") */
    int n_stages;
    float stage_mem_gib[MG_PLANNER_MAX_PP]; /* every stage's total, GiB */
    bool fits;
    mg_group_cost group[MG_GROUP_COUNT];
    bool recompute_estimated;    /* full recompute costed as a second forward of the layers */
    int graph_nodes;             /* nodes of the probe's rank graph walked */
    int probe_layers;            /* layers of the probe model (one per layer kind) */
    double probe_seq_scale;      /* probe sequence / model sequence (1: at full length) */
    mg_block_cost block_embedding, block_output, block_kind[MG_PREDICTION_MAX_KINDS];
    int n_kinds;                 /* layer kinds priced (block_kind[0..n_kinds)) */
    char notes[512];
} mg_prediction;

/* Checks the query (divisibility, the partitioner's own rules) and predicts it.
 * MG_ERR_INVALID / MG_ERR_UNSUPPORTED with the reason when the plan cannot be built. */
int mg_plan_predict(const mg_cluster *c, const mg_plan_query *q, mg_prediction *out, mg_error *err);

/* Model FLOPs per step of the full model (Megatron's count). */
double mg_plan_model_flops(const mg_plan_query *q);

/* Search: every tp (dividing the node and the heads), pp (dividing the layers) with
 * virtual stages, cp, ep, micro-batch size and recompute setting for `world` ranks;
 * plans the partitioner refuses or that do not fit memory are dropped. */
typedef struct mg_search_options {
    int world;
    int max_micro_batch;         /* micro-batch sizes 1, 2, 4, ... up to this */
    bool fixed_tp, fixed_pp, fixed_mbs, fixed_recompute, fixed_vp, fixed_cp; /* keep the query's value */
    int top;                     /* how many to keep */
} mg_search_options;

typedef struct mg_search_result {
    mg_plan_query q;
    mg_prediction p;
} mg_search_result;

/* Fills res[0..*n) (at most opt->top) ranked by step time; *tried and *dropped count the
 * candidates predicted and those dropped (refused or out of memory). */
int mg_plan_search(const mg_cluster *c, const mg_plan_query *base, const mg_search_options *opt,
                   mg_search_result *res, int *n, int *tried, int *dropped_memory, int *refused, mg_error *err);

/* Text and JSON reports. */
void mg_prediction_print(const mg_cluster *c, const mg_plan_query *q, const mg_prediction *p, FILE *f);
/* A JSON object (jansson's json_t *, returned as void * so this header needs no jansson). */
void *mg_prediction_json(const mg_cluster *c, const mg_plan_query *q, const mg_prediction *p);
const char *mg_precision_name(mg_precision p);

#ifdef __cplusplus
}
#endif
#endif

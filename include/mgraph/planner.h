/* The planner: predicts step time, memory and MFU of a partition plan on a cluster
 * from the graphs mgraph would run, and searches plans (planner/, tools/mgraph-plan.c).
 *
 * The prediction walks one representative rank's physical graph (mg_partition of the
 * training step, the same graph mgraph-run executes): each compute node costs
 * max(FLOPs / (peak x efficiency), bytes / (HBM bandwidth x efficiency)) plus a launch
 * overhead (a roofline with a small-GEMM efficiency curve); each collective node costs
 * an alpha-beta model of its ring or tree algorithm on the link its group spans
 * (NVLink inside a node, InfiniBand across). The pipeline schedule's bubble, the
 * overlap of gradient reduction with the backward and activation recompute are
 * applied on top of those per-micro-batch times. Memory comes from the same graph:
 * persistent tensors by role, activations saved for the backward.
 *
 * Pipeline, context and expert parallelism come from the partitioner: a plan the
 * partitioner builds is predicted from its per-rank graphs (pipeline plans: the first,
 * second and last stage's, with the plan's virtual stages). A pipeline the partitioner
 * refuses (pp with cp or ep) is estimated (mg_prediction.pp_estimated): each stage is
 * the graph of a model with L/pp layers (embedding and output layer included, so the
 * slowest stage is bounded from above) on world/pp ranks, with the schedule's bubble
 * and the stage-boundary transfers added analytically. Context and expert parallel
 * plans the partitioner cannot build otherwise are refused with the reason.
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
    int gpus_per_node;           /* ranks per node */
    int max_nodes;               /* 0: unbounded */
    double peak_tflops[2];       /* dense matrix peak per precision [MG_PREC_FP32], [MG_PREC_BF16] */
    double vector_tflops;        /* non-matrix (elementwise) FLOP/s, 1e12 */
    double hbm_gib;              /* memory per GPU */
    double hbm_gbps;             /* memory bandwidth, GB/s */
    double intra_gbps, intra_latency_us; /* NVLink (or shared memory) per GPU */
    double inter_gbps, inter_latency_us; /* InfiniBand per GPU (its NIC) */
    /* Small-GEMM efficiency curve: a matrix op of F FLOPs runs at
     * peak x gemm_efficiency x F / (F + gemm_half_gflops x 1e9). */
    double gemm_efficiency, gemm_half_gflops;
    double memory_efficiency;    /* fraction of hbm_gbps memory-bound kernels reach */
    double kernel_overhead_us;   /* per node (launch or task submission) */
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

/* What to predict. */
typedef struct mg_plan_query {
    mg_gpt_config model;         /* vocab: padded for tp (mg_vocab_padded) */
    int micro_batch, global_batch;
    int world;
    mg_plan plan;                /* tp, pp, cp, ep, sp, distributed optimizer */
    int virtual_stages;          /* interleaved schedule: model chunks per rank (1: plain 1F1B) */
    mg_recompute_granularity recompute;
    mg_recompute_method recompute_method;
    int recompute_num_layers;
    bool overlap_grad_reduce;    /* data-parallel reduction overlaps the last micro-batch's backward */
    /* Megatron's --fp16 without --accumulate-allreduce-grads-in-fp32 (the 2021 papers'
     * runs): gradients accumulate and the data-parallel reduction runs in the 16-bit
     * type, half the bytes of bf16's fp32 main gradients (Megatron forces fp32 for
     * bf16). Memory is unchanged: the fp16 optimizer copies them into fp32 for its step. */
    bool grads_16bit;
    mg_precision precision;
    /* Cost attention as Megatron's unfused path (--attention-backend unfused, the 2021
     * papers' kernels): scores and probabilities of s x s per head written to memory,
     * masked softmax and dropout as their own kernels, 5as^2b bytes kept per layer
     * unless recomputed (selective recompute). Default: mgraph's fused attention. */
    bool attention_unfused;
} mg_plan_query;

typedef struct mg_group_cost {
    double bytes;                /* payload bytes per step this rank sends (ring estimate) */
    double time_s;               /* time in its collectives per step */
    double exposed_s;            /* of which not hidden behind compute */
    int ranks;                   /* group size */
    bool inter_node;             /* the group spans nodes */
} mg_group_cost;

typedef struct mg_prediction {
    double step_time_s;
    double model_flops;          /* per step, Megatron's count (no recompute) */
    double hw_flops_per_gpu;     /* per step, what the slowest rank's graph executes (recompute included) */
    double tflops_per_gpu;       /* model FLOP/s per GPU, 1e12 */
    double mfu;                  /* tflops_per_gpu / peak */
    double bubble_fraction;      /* fill and drain over M x the slowest stage: (pp - 1) / (v M) for equal stages */
    int n_micro;                 /* micro-batches per pipeline per step, M */
    int dp;
    /* time per micro-batch on the slowest stage, and the step's parts */
    double fwd_s, bwd_s, recompute_s;     /* per micro-batch, compute + exposed tp/cp/ep comm */
    double p2p_s;                         /* per micro-batch, stage-boundary transfers */
    double pipeline_s;                    /* M x the slowest stage + (the other stages) / v per micro-batch */
    double optimizer_s;                   /* once-per-step compute (grad norm, AdamW) */
    double dp_exposed_s;                  /* gradient reduction / parameter gather not overlapped */
    /* memory per GPU, bytes */
    double mem_weights, mem_grads, mem_optimizer, mem_activations, mem_reserved, mem_total;
    double activations_per_micro;         /* saved for the backward by one micro-batch */
    double inflight_micro;                /* micro-batches whose activations are held at once */
    bool fits;
    mg_group_cost group[MG_GROUP_COUNT];
    bool pp_estimated;           /* pp from a stage graph + analytic schedule (the partitioner lacks pp) */
    bool recompute_estimated;    /* full recompute costed from the graph's forward, not rewritten into it */
    int graph_nodes;             /* nodes of the rank graph walked */
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

/* Library-internal pieces of the planner (the files of planner/).
 *
 *   cost.c      links, collectives (alpha-beta), kernels (roofline + small-GEMM curve)
 *   probe.c     a block cost table from the rank graph of a few-layer probe model
 *   layout.c    which blocks each pipeline stage and model chunk holds
 *   schedule.c  a step from the table and the layout: overlaps, pipeline, data parallel,
 *               memory per stage
 *   predict.c   mg_plan_predict: check, probe, layout, schedule
 *   search.c    mg_plan_search
 */
#ifndef MG_PLANNER_INTERNAL_H
#define MG_PLANNER_INTERNAL_H

#include "mgraph/planner.h"

/* ---- cost.c ---------------------------------------------------------------------------- */
/* The link a group's collectives cross. */
typedef struct mg_planner_link_t {
    bool inter;          /* spans nodes */
    double gbps;         /* bus bandwidth per rank, GB/s */
    double latency_s;    /* per step of the algorithm */
    double base_s;       /* once per collective (not per point-to-point transfer) */
} mg_planner_link_t;

/* Rank 0's group of n ranks, consecutive members `stride` ranks apart. */
void mg_planner_link(const mg_cluster *c, long stride, int n, mg_planner_link_t *l);
double mg_planner_collective_s(mg_op op, int n, double bytes, const mg_planner_link_t *l);
double mg_planner_gemm_efficiency(const mg_cluster *c, double flops);
/* A kernel of `flops` and `bytes` (already in the run's precision): matrix ops on the
 * tensor cores with the small-GEMM curve, attention at the attention efficiency (its
 * fused backward also at the backward's share of it), the rest on the vector units, whichever of compute and memory is slower, plus the launch. */
typedef enum { MG_KERNEL_VECTOR, MG_KERNEL_GEMM, MG_KERNEL_ATTENTION, MG_KERNEL_ATTENTION_BWD } mg_planner_kernel_kind;
double mg_planner_kernel_s(const mg_cluster *c, mg_precision prec, mg_planner_kernel_kind kind, double flops,
                           double bytes);
/* Elements of the s x s score matrices an attention node (or its backward) covers. */
double mg_planner_attention_scores(const mg_node *n);

/* ---- probe.c --------------------------------------------------------------------------- */
/* What one block costs one rank per micro-batch: the embedding, a transformer layer of
 * one kind (dense or MoE, windowed or not), or the final norm + output layer + loss.
 * Index [0] forward, [1] backward. Times are the kernels' and collectives' own; which
 * part of a collective hides behind which kernels is schedule.c's business. */
typedef struct mg_planner_block_t {
    double compute_s[2], flops[2];
    double gemm_s[2];                    /* of compute_s: matrix ops */
    double attn_s[2];                    /* of compute_s: attention (cp's ring hides behind it) */
    double expert_s[2];                  /* of compute_s: the routed experts (MoE layers) */
    double shared_s[2];                  /* of compute_s: the shared experts (--moe-shared-expert-overlap
                                            runs them beside the all-to-alls) */
    double gemm_flops[2], attn_flops[2]; /* of flops: matrix ops, attention */
    double comm_s[2][MG_GROUP_COUNT];    /* collectives per group */
    double comm_bytes[MG_GROUP_COUNT];   /* on the wire, forward + backward */
    int comm_n[2][MG_GROUP_COUNT];       /* collectives per group */
    double saved_bytes;                  /* kept for the backward, run's precision */
    double scores_saved;                 /* of which unfused attention's s^2 tensors */
    double params, expert_params;        /* elements on this rank (expert: split over ep) */
    int nodes;
} mg_planner_block_t;

#define MG_PLANNER_MAX_KINDS MG_PREDICTION_MAX_KINDS
typedef struct mg_planner_costs_t {
    mg_planner_block_t emb, head;
    mg_planner_block_t kind[MG_PLANNER_MAX_KINDS]; /* layer i costs kind[mg_planner_kind_of(i)] */
    int period;                          /* probe layers: kinds */
    /* a --moe-layer-freq list: kind (MoE(i) == last_moe ? wperiod : 0) + i % wperiod, wperiod
     * the windowed layers' period (1 without a window); otherwise kind i % period */
    bool by_pattern, last_moe;
    int wperiod;
    double opt_s_per_elem;               /* once-per-step kernels (grad norm, AdamW) per parameter element */
    double step_other_comm_s;            /* once-per-step collectives outside data parallelism (norms) */
    int group_ranks[MG_GROUP_COUNT];
    bool group_inter[MG_GROUP_COUNT];
    double seq_scale;                    /* the probe's sequence / the model's (1: built at full length) */
    int probe_layers, probe_seq, nodes;
    bool moe;
} mg_planner_costs_t;

/* Builds the training step of a model of the query's widths with `period` layers (one
 * per layer kind) at the query's micro-batch (and at most MG_PLANNER_PROBE_SEQ tokens:
 * longer sequences are priced from it, linear parts by length, attention by its
 * score pairs), partitions it for rank 0 of the plan's tp x cp x ep (no pipeline, no
 * data parallelism: those are priced from the table) and walks it. */
#define MG_PLANNER_PROBE_SEQ 32768
int mg_planner_probe(const mg_cluster *c, const mg_plan_query *q, mg_planner_costs_t *out, mg_error *err);
/* The kind of layer i (0-based) of model m, the query's. */
static inline int mg_planner_kind_of(const mg_planner_costs_t *k, const mg_gpt_config *m, int layer) {
    if (k->by_pattern) return (mg_moe_is_layer(m, layer) == k->last_moe ? k->wperiod : 0) + layer % k->wperiod;
    return layer % k->period;
}

/* ---- layout.c -------------------------------------------------------------------------- */
/* One model chunk of one pipeline stage: the embedding, layers [first, first + n), the
 * output layer and loss. */
typedef struct mg_planner_chunk_t {
    bool emb, loss;
    int first, n;
} mg_planner_chunk_t;
typedef struct mg_planner_layout_t {
    int pp, vp;
    mg_planner_chunk_t *chunk;           /* [pp * vp], stage p's chunk c at [p * vp + c] */
} mg_planner_layout_t;
/* Resolves the query's split (Megatron's rules: an equal share, --decoder-first/last-
 * pipeline-num-layers, the account-for flags, or --pipeline-model-parallel-layout) with
 * Megatron's messages for a split that does not work out. */
int mg_planner_layout(const mg_plan_query *q, mg_planner_layout_t *l, mg_error *err);
void mg_planner_layout_free(mg_planner_layout_t *l);
/* "embedding + 3 layers | 2 layers" for stage p. */
void mg_planner_layout_describe(const mg_planner_layout_t *l, int stage, char *buf, size_t n);

/* ---- schedule.c ------------------------------------------------------------------------ */
int mg_planner_schedule(const mg_cluster *c, const mg_plan_query *q, const mg_planner_costs_t *k,
                        const mg_planner_layout_t *l, mg_prediction *out, mg_error *err);

/* predict.c: the query's own rules (sizes, divisibility), before anything is built. */
int mg_planner_check(const mg_cluster *c, const mg_plan_query *q, mg_error *err);
/* The sizes alone (layers, widths, sequence, batch, world): what keeps any query's work small. */
int mg_planner_check_bounds(const mg_plan_query *q, mg_error *err);

#endif

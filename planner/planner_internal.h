/* Library-internal pieces of the planner (the files of planner/). */
#ifndef MG_PLANNER_INTERNAL_H
#define MG_PLANNER_INTERNAL_H

#include "mgraph/planner.h"

/* The link a group's collectives cross. */
typedef struct mg_planner_link_t {
    bool inter;          /* spans nodes: InfiniBand */
    double gbps;         /* bus bandwidth per rank, GB/s */
    double latency_s;    /* per step of the algorithm */
} mg_planner_link_t;

/* Rank 0's group of n ranks, consecutive members `stride` ranks apart. */
void mg_planner_link(const mg_cluster *c, long stride, int n, mg_planner_link_t *l);
double mg_planner_collective_s(mg_op op, int n, double bytes, const mg_planner_link_t *l);
double mg_planner_gemm_efficiency(const mg_cluster *c, double flops);
double mg_planner_compute_s(const mg_cluster *c, mg_precision prec, const mg_node *n, double flops, double bytes);
/* Elements of the s x s score matrices an attention node (or its backward) covers. */
double mg_planner_attention_scores(const mg_node *n);

/* What one walk over a rank graph found: times in seconds, bytes on the wire. Index
 * [0] forward, [1] backward; "mb" is one micro-batch, "step" the once-per-step part. */
typedef struct mg_planner_walk_t {
    double mb_compute_s[2], mb_flops[2];
    double mb_comm_s[2][MG_GROUP_COUNT], mb_bytes[MG_GROUP_COUNT];
    /* of mb_comm_s[.][MG_GROUP_PP] and mb_bytes[MG_GROUP_PP]: the stage-boundary sends,
     * one per model chunk and direction (mg_planner_finish scales them when the query's
     * virtual stages differ from the walked graph's) */
    double mb_p2p_s[2], mb_p2p_bytes;
    int mb_p2p_n[2];
    double step_compute_s, step_flops;
    double step_comm_s[MG_GROUP_COUNT], step_bytes[MG_GROUP_COUNT];
    double step_opt_comm_s[MG_GROUP_COUNT]; /* of step_comm_s: in the optimizer (parameter all-gather) */
    int group_ranks[MG_GROUP_COUNT];
    bool group_inter[MG_GROUP_COUNT];
    int n_layers;              /* of the whole model (layer indices are global) */
    double *layer_fwd_s;       /* [n_layers]: forward time of each layer (compute + its collectives) */
    double layer_fwd_flops;    /* forward FLOPs inside layers */
    double *layer_saved;       /* [n_layers]: bytes saved for the backward per layer, in the run's precision */
    unsigned char *layer_present; /* [n_layers]: the layer is on this rank */
    double *layer_scores_saved; /* [n_layers]: unfused attention's 5as^2b bytes per layer (selective recompute drops them) */
    double attn_fwd_s;         /* unfused attention's forward per micro-batch (what selective recompute reruns) */
    double other_saved;        /* saved bytes outside the layers (embedding, head, loss) */
    double param_elems, grad_elems, opt_elems;
    int nodes;
    /* set by mg_planner_prepare, for the pipeline's representative stages [0] first,
     * [1] a middle one, [2] last (a stage not walked has count 0): how many of the pp
     * stages each stands for, its micro-batch time (compute + collectives, forward and
     * backward, as walked) and its layers' forward time (what full recompute reruns) */
    int stage_count[3];
    double stage_mb_s[3], stage_layer_fwd_s[3];
} mg_planner_walk_t;

int mg_planner_walk(const mg_cluster *c, const mg_plan_query *q, const mg_plan *plan, int dp, const mg_graph *g,
                    int n_layers, mg_planner_walk_t *w, mg_error *err);
void mg_planner_walk_free(mg_planner_walk_t *w);

/* Checks the query and walks the slowest stage's rank graph. The walk depends on
 * the plan's sizes, micro-batch and precision only: recompute and virtual stages are
 * applied by mg_planner_finish, so one walk serves every such variant. */
typedef struct mg_planner_built_t {
    mg_planner_walk_t walk;
    mg_plan built;         /* the plan the graph was partitioned with (pp 1 when estimated) */
    bool pp_estimated;
    int stage_layers;
} mg_planner_built_t;
int mg_planner_prepare(const mg_cluster *c, const mg_plan_query *q, mg_planner_built_t *b, mg_prediction *out,
                       mg_error *err);

/* Schedule, overlap, recompute and memory on top of a walk (planner/schedule.c). */
int mg_planner_finish(const mg_cluster *c, const mg_plan_query *q, const mg_plan *built, bool pp_estimated,
                      int stage_layers, const mg_planner_walk_t *w, mg_prediction *out, mg_error *err);

#endif

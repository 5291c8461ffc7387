/* mg_plan_predict: a plan's step time, memory and FLOP/s from the rank graphs mgraph
 * builds for it (see include/mgraph/planner.h for the model). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mgraph/comm.h"
#include "mgraph/planner.h"
#include "mgraph/tokenizer.h"
#include "ops/comm_api.h"
#include "ops/op.h"
#include "planner/planner_internal.h"

/* ---- the link a group's collectives run on --------------------------------------------- */
/* Distance between consecutive members of rank 0's group: the mesh's (graph/mesh.c), in
 * the plan's rank order. */
static long group_stride(const mg_plan *p, int dp, mg_group g) {
    mg_mesh m;
    if (mg_plan_mesh(p, p->tp * p->cp * p->pp * dp, 0, &m, NULL)) return 1;
    return mg_mesh_stride(&m, g);
}

void mg_planner_link(const mg_cluster *c, long stride, int n, mg_planner_link_t *l) {
    int G = c->gpus_per_node;
    l->inter = (long)(n - 1) * stride >= G;
    if (!l->inter) {
        l->gbps = c->intra_gbps;
        l->latency_s = c->intra_latency_us * 1e-6;
        return;
    }
    /* members sharing a node: each has its own NIC, NCCL runs one ring per NIC */
    long k = stride >= G ? 1 : G / stride;
    if (k > n) k = n;
    double bw = (double)k * c->inter_gbps;
    l->gbps = bw < c->intra_gbps ? bw : c->intra_gbps;
    l->latency_s = c->inter_latency_us * 1e-6;
}

/* Alpha-beta time of one collective of `bytes` input payload over n ranks: ring, or a
 * (double binary) tree for all-reduce when that is faster (small messages). */
double mg_planner_collective_s(mg_op op, int n, double bytes, const mg_planner_link_t *l) {
    if (n <= 1) return 0;
    double a = l->latency_s, B = l->gbps * 1e9, N = n;
    switch (op) {
    case MG_OP_ALLREDUCE: {
        double ring = 2 * (N - 1) * a + 2 * (N - 1) / N * bytes / B;
        double tree = 2 * ceil(log2(N)) * a + 2 * bytes / B;
        return ring < tree ? ring : tree;
    }
    case MG_OP_ALLGATHER: return (N - 1) * a + (N - 1) * bytes / B;          /* input is one shard */
    case MG_OP_REDUCE_SCATTER: return (N - 1) * a + (N - 1) / N * bytes / B; /* input is the whole */
    case MG_OP_BROADCAST: return (N - 1) * a + bytes / B;                      /* pipelined ring */
    case MG_OP_ALLTOALL:
    case MG_OP_ALLTOALL_COUNTS: return (N - 1) * a + (N - 1) / N * bytes / B;
    default: return a + bytes / B; /* send, and any other point-to-point transfer */
    }
}

/* ---- compute nodes: roofline with the small-GEMM curve ---------------------------------- */
static bool is_matrix(mg_op op) {
    return op == MG_OP_MATMUL || op == MG_OP_ATTENTION || op == MG_OP_ATTENTION_BWD || op == MG_OP_MOE_GROUPED_MATMUL ||
           op == MG_OP_MOE_GROUPED_MATMUL_DW;
}

double mg_planner_gemm_efficiency(const mg_cluster *c, double flops) {
    double half = c->gemm_half_gflops * 1e9;
    return c->gemm_efficiency * (flops / (flops + half));
}

double mg_planner_compute_s(const mg_cluster *c, mg_precision prec, const mg_node *n, double flops, double bytes) {
    /* the graph is fp32; in mixed precision activations are 16-bit, the optimizer's
     * state (master weights, moments, fp32 gradients) stays fp32 */
    double scale = prec == MG_PREC_BF16 && n->phase != MG_PHASE_OPTIMIZER ? 0.5 : 1.0;
    double t_mem = bytes * scale / (c->hbm_gbps * 1e9 * c->memory_efficiency);
    double t_flop;
    if (is_matrix(n->op) && flops > 0) t_flop = flops / (c->peak_tflops[prec] * 1e12 * mg_planner_gemm_efficiency(c, flops));
    else t_flop = flops / (c->vector_tflops * 1e12);
    if (flops == 0 && bytes == 0) return 0; /* nothing runs (a gate, an empty op) */
    return c->kernel_overhead_us * 1e-6 + (t_mem > t_flop ? t_mem : t_flop);
}

double mg_planner_attention_scores(const mg_node *n) {
    /* attention: q [Sq, b, heads, hd], k [Sk, ...]; its backward reads (o, q, k, ...) */
    const mg_tensor *q = n->op == MG_OP_ATTENTION ? n->in[0] : n->in[1];
    const mg_tensor *k = n->op == MG_OP_ATTENTION ? n->in[1] : n->in[2];
    return (double)q->shape[0] * (double)k->shape[0] * (double)q->shape[1] * (double)q->shape[2];
}

/* Megatron's unfused attention: QK^T written (S), scale-mask-softmax reads and writes
 * it, dropout reads it and writes P' and a byte mask, P'V reads P' (6.5 S, in the
 * activation type); the backward reads the mask, P and the incoming gradient and
 * writes two gradients of S (8.5 S), with 4 matmuls where the fused kernel recomputes
 * P (5). Three extra kernels each way. */
static void unfused_attention(const mg_cluster *c, mg_precision prec, const mg_node *n, double *flops, double *extra_s) {
    double S = mg_planner_attention_scores(n), ab = prec == MG_PREC_BF16 ? 2 : 4;
    double bytes = (n->op == MG_OP_ATTENTION ? 6.5 : 8.5) * S * ab;
    if (n->op == MG_OP_ATTENTION_BWD) *flops *= 0.8;
    *extra_s = bytes / (c->hbm_gbps * 1e9 * c->memory_efficiency) + 3 * c->kernel_overhead_us * 1e-6;
}

/* ---- walking one rank's graph ------------------------------------------------------------ */
/* Layer index of a node's scope ("h.12.attn", "model.layers.12.mlp"), -1 outside layers. */
static int layer_of(const char *scope) {
    if (!scope) return -1;
    const char *p = NULL;
    if (!strncmp(scope, "h.", 2)) p = scope + 2;
    else if (!strncmp(scope, "model.layers.", 13)) p = scope + 13;
    if (!p || *p < '0' || *p > '9') return -1;
    return atoi(p);
}

/* Payload bytes of a collective in the run's precision: activations (and their
 * gradients) are 16-bit in mixed precision, the gradient reduction is fp32 (Megatron
 * accumulates and reduces main_grad in fp32; 16-bit with grads_16bit, --fp16 without
 * --accumulate-allreduce-grads-in-fp32), the parameter all-gather 16-bit. */
static double comm_payload(const mg_node *n, const mg_plan_query *q) {
    const mg_tensor *t = n->n_in > 0 ? n->in[0] : n->out[0];
    double b = (double)mg_numel(t) * (double)mg_dtype_size(t->dtype);
    if (q->precision != MG_PREC_BF16 || t->dtype != MG_F32) return b;
    mg_group g = n->attrs.comm.group;
    bool dp = g == MG_GROUP_DP || g == MG_GROUP_DP_CP;
    if (dp && n->op != MG_OP_ALLGATHER) return q->grads_16bit ? b * 0.5 : b;
    if (dp && n->phase != MG_PHASE_OPTIMIZER) return b;
    return b * 0.5;
}

int mg_planner_walk(const mg_cluster *c, const mg_plan_query *q, const mg_plan *plan, int dp, const mg_graph *g,
                    int n_layers, mg_planner_walk_t *w, mg_error *err) {
    mg_precision prec = q->precision;
    memset(w, 0, sizeof *w);
    w->n_layers = n_layers;
    w->layer_fwd_s = calloc((size_t)n_layers + 1, sizeof *w->layer_fwd_s);
    w->layer_saved = calloc((size_t)n_layers + 1, sizeof *w->layer_saved);
    w->layer_present = calloc((size_t)n_layers + 1, sizeof *w->layer_present);
    w->layer_scores_saved = calloc((size_t)n_layers + 1, sizeof *w->layer_scores_saved);
    if (!w->layer_fwd_s || !w->layer_saved || !w->layer_present || !w->layer_scores_saved) {
        mg_planner_walk_free(w);
        return mg_error_set(err, MG_ERR_NOMEM, "planner: out of memory");
    }
    mg_planner_link_t links[MG_GROUP_COUNT];
    for (int k = 0; k < MG_GROUP_COUNT; k++) links[k].gbps = 0;
    double scale = prec == MG_PREC_BF16 ? 0.5 : 1.0;
    int nn = mg_graph_n_nodes(g);
    w->nodes = nn;
    for (int i = 0; i < nn; i++) {
        const mg_node *n = mg_graph_node(g, i);
        double flops = 0, bytes = 0;
        mg_op_cost(n, &flops, &bytes);
        bool per_mb = n->mb >= 0, fwd = n->phase == MG_PHASE_FORWARD;
        int layer = layer_of(n->scope);
        if (layer >= n_layers) layer = -1;
        if (mg_op_def_get(n->op)->flags & MG_OPF_COMM) {
            /* a transfer is charged once, to its sender (the receiver waits for the same bytes) */
            if (n->op == MG_OP_RECV || (n->n_in == 0 && n->n_out == 0)) continue;
            mg_group grp = n->attrs.comm.group;
            if (grp < 0 || grp >= MG_GROUP_COUNT) continue;
            int nr = n->attrs.comm.nranks;
            if (links[grp].gbps == 0) mg_planner_link(c, group_stride(plan, dp, grp), nr > 1 ? nr : 2, &links[grp]);
            w->group_ranks[grp] = nr;
            w->group_inter[grp] = links[grp].inter;
            double payload = comm_payload(n, q);
            double t = mg_planner_collective_s(n->op, nr, payload, &links[grp]);
            double wire = mg_comm_wire_bytes(n->op, nr, payload);
            if (per_mb) {
                w->mb_comm_s[fwd ? 0 : 1][grp] += t;
                w->mb_bytes[grp] += wire;
                bool p2p = n->op == MG_OP_SEND && grp == MG_GROUP_PP;
                if (p2p) {
                    w->mb_p2p_s[fwd ? 0 : 1] += t;
                    w->mb_p2p_n[fwd ? 0 : 1]++;
                    w->mb_p2p_bytes += wire;
                }
                /* a layer's forward as recompute reruns it: its tp/cp/ep collectives, not the
                 * stage-boundary send of its output (the recompute does not send again) */
                if (fwd && layer >= 0 && !p2p) w->layer_fwd_s[layer] += t;
            } else {
                w->step_comm_s[grp] += t;
                w->step_bytes[grp] += wire;
                if (n->phase == MG_PHASE_OPTIMIZER) w->step_opt_comm_s[grp] += t;
            }
            continue;
        }
        double extra = 0;
        if (q->attention_unfused && (n->op == MG_OP_ATTENTION || n->op == MG_OP_ATTENTION_BWD)) {
            unfused_attention(c, prec, n, &flops, &extra);
            if (n->op == MG_OP_ATTENTION && per_mb && layer >= 0)
                w->layer_scores_saved[layer] += 5.0 * mg_planner_attention_scores(n) * (prec == MG_PREC_BF16 ? 1 : 2);
        }
        double t = mg_planner_compute_s(c, prec, n, flops, bytes) + extra;
        if (q->attention_unfused && n->op == MG_OP_ATTENTION && per_mb) w->attn_fwd_s += t;
        if (per_mb) {
            w->mb_compute_s[fwd ? 0 : 1] += t;
            w->mb_flops[fwd ? 0 : 1] += flops;
            if (fwd && layer >= 0) {
                w->layer_fwd_s[layer] += t;
                w->layer_fwd_flops += flops;
                w->layer_present[layer] = 1;
            }
        } else {
            w->step_compute_s += t;
            w->step_flops += flops;
        }
    }
    /* saved activations: one pass over the backward nodes' inputs */
    int nt = mg_graph_n_tensors(g);
    unsigned char *counted = calloc((size_t)nt, 1);
    if (!counted) {
        mg_planner_walk_free(w);
        return mg_error_set(err, MG_ERR_NOMEM, "planner: out of memory");
    }
    for (int i = 0; i < nn; i++) {
        const mg_node *n = mg_graph_node(g, i);
        if (n->phase != MG_PHASE_BACKWARD || n->mb < 0) continue;
        for (int k = 0; k < n->n_in; k++) {
            const mg_tensor *t = n->in[k];
            if (counted[t->id] || !t->src || t->persistent) continue;
            const mg_node *s = t->src;
            if (s->phase != MG_PHASE_FORWARD || s->mb < 0) continue;
            counted[t->id] = 1;
            double b = (double)mg_numel(t) * (double)mg_dtype_size(t->dtype) * (t->dtype == MG_F32 ? scale : 1.0);
            int layer = layer_of(s->scope);
            if (layer >= 0 && layer < n_layers) w->layer_saved[layer] += b;
            else w->other_saved += b;
        }
    }
    /* persistent state by role (a tensor that updates another shares its storage) */
    for (int i = 0; i < nt; i++) {
        const mg_tensor *t = mg_graph_tensor(g, i);
        if (!t->persistent || t->updates || t->src) continue;
        double e = (double)mg_numel(t);
        if (t->role == MG_ROLE_PARAM) w->param_elems += e;
        else if (t->role == MG_ROLE_GRAD) w->grad_elems += e;
        else if (t->role == MG_ROLE_OPT_STATE && e > 1) w->opt_elems += e;
    }
    free(counted);
    return MG_OK;
}

void mg_planner_walk_free(mg_planner_walk_t *w) {
    free(w->layer_fwd_s);
    free(w->layer_saved);
    free(w->layer_present);
    free(w->layer_scores_saved);
    w->layer_fwd_s = w->layer_saved = w->layer_scores_saved = NULL;
    w->layer_present = NULL;
}

/* ---- the query -------------------------------------------------------------------------- */
double mg_plan_model_flops(const mg_plan_query *q) { return mg_gpt_flops(&q->model, q->global_batch); }

/* The logical training step of a model with `layers` layers. */
static int build_step(const mg_plan_query *q, int layers, mg_step *st, mg_error *err) {
    mg_step_config sc;
    memset(&sc, 0, sizeof sc);
    sc.model = q->model;
    sc.model.num_layers = layers;
    sc.micro_batch = q->micro_batch;
    sc.n_micro = q->global_batch / q->micro_batch;
    sc.training = true;
    sc.optim = mg_adamw_defaults();
    return mg_step_build(&sc, st, err);
}

/* The rank graph of world rank `rank`. */
static int build_rank(mg_step *st, const mg_plan *plan, int world, int rank, mg_rank_graph *R, mg_error *err) {
    if (world == 1 && plan->matmul_tiles <= 1) return mg_rank_graph_serial(st->g, R, err);
    mg_mesh mesh;
    int rc = mg_plan_mesh(plan, world, rank, &mesh, err);
    if (!rc) rc = mg_partition(st->g, plan, &mesh, R, err);
    return rc;
}

static int check_query(const mg_plan_query *q, mg_error *err) {
    const mg_plan *p = &q->plan;
    if (q->world < 1) return mg_error_set(err, MG_ERR_INVALID, "world size must be >= 1 (got %d)", q->world);
    if (q->micro_batch < 1 || q->global_batch < 1)
        return mg_error_set(err, MG_ERR_INVALID, "micro-batch and global batch sizes must be >= 1");
    if (q->virtual_stages < 1) return mg_error_set(err, MG_ERR_INVALID, "virtual stages must be >= 1");
    if (p->pp < 1 || p->tp < 1 || p->cp < 1 || p->ep < 1)
        return mg_error_set(err, MG_ERR_INVALID, "parallel sizes must be >= 1");
    bool uneven = p->pp_first_layers || p->pp_last_layers;
    /* an uneven split (first / last stage's layers) is checked by the partitioner's rules */
    if (!uneven && q->model.num_layers % p->pp)
        return mg_error_set(err, MG_ERR_INVALID, "--num-layers %d is not divisible by --pipeline-model-parallel-size %d",
                            q->model.num_layers, p->pp);
    if (uneven && q->virtual_stages > 1)
        return mg_error_set(err, MG_ERR_INVALID,
                            "--decoder-first/last-pipeline-num-layers cannot be combined with virtual pipeline stages");
    if (q->virtual_stages > 1) {
        if (p->pp < 2)
            return mg_error_set(err, MG_ERR_INVALID, "an interleaved schedule (virtual stages %d) needs pipeline parallelism",
                                q->virtual_stages);
        if (q->model.num_layers % (p->pp * q->virtual_stages))
            return mg_error_set(err, MG_ERR_INVALID,
                                "--num-layers %d is not divisible by pipeline size %d x virtual stages %d",
                                q->model.num_layers, p->pp, q->virtual_stages);
    }
    return MG_OK;
}

int mg_planner_prepare(const mg_cluster *c, const mg_plan_query *q, mg_planner_built_t *b, mg_prediction *out,
                       mg_error *err) {
    memset(out, 0, sizeof *out);
    memset(b, 0, sizeof *b);
    int rc = check_query(q, err);
    if (rc) return rc;
    const mg_plan *p = &q->plan;
    mg_plan plan = *p;
    plan.matmul_tiles = 1; /* one kernel per matmul, as a GPU runs it */
    int world = q->world, pp = p->pp, v = q->virtual_stages;
    /* the query's virtual stages are the plan's model chunks: the graphs walked hold
     * v chunks per stage, with a stage-boundary transfer each way per chunk */
    plan.vpp = v;
    /* The partitioner's own rules first; a pipeline it cannot build yet is estimated
     * from a stage graph (header), anything else it refuses is refused here. */
    mg_error perr = {0};
    rc = mg_plan_check(&plan, world, &perr);
    bool estimate_pp = false;
    if (rc == MG_ERR_UNSUPPORTED && pp > 1) {
        mg_plan stage = plan;
        stage.pp = 1;
        stage.vpp = 1;
        stage.pp_first_layers = stage.pp_last_layers = 0;
        mg_error serr = {0};
        if (world % pp == 0 && !mg_plan_check(&stage, world / pp, &serr)) {
            estimate_pp = true;
            plan = stage;
            rc = MG_OK;
        }
    }
    if (rc) return mg_error_set(err, rc, "the partitioner cannot build this plan: %s", perr.msg);
    if (estimate_pp && (p->pp_first_layers || p->pp_last_layers))
        return mg_error_set(err, MG_ERR_UNSUPPORTED,
                            "an uneven pipeline (--decoder-first/last-pipeline-num-layers) needs stage graphs the "
                            "partitioner builds, and it does not build pp with cp or ep yet: %s", perr.msg);
    int stage_world = estimate_pp ? world / pp : world;
    int dp = world / (p->tp * p->pp * p->cp);
    if ((int64_t)q->global_batch % ((int64_t)q->micro_batch * dp))
        return mg_error_set(err, MG_ERR_INVALID,
                            "--global-batch-size %d is not a multiple of --micro-batch-size x data-parallel size (%d x %d)",
                            q->global_batch, q->micro_batch, dp);
    int M = q->global_batch / (q->micro_batch * dp);
    if (v > 1 && M % pp && M % pp < pp) /* Megatron: M % N == 0 or M % N >= pp, N = pp */
        return mg_error_set(err, MG_ERR_INVALID,
                            "interleaved schedule: %d micro-batches per pipeline must be a multiple of the pipeline size %d",
                            M, pp);
    mg_plan_model pm = {.hidden = q->model.hidden,
                        .heads = q->model.heads,
                        .ffn_hidden = q->model.ffn_hidden,
                        .seq_length = q->model.seq_length,
                        .vocab = q->model.vocab,
                        .global_batch = q->global_batch,
                        .micro_batch = q->micro_batch,
                        .query_groups = mg_gpt_kv_groups(&q->model),
                        /* the stage graph of an estimated pipeline has pp 1: nothing to check */
                        .num_layers = q->model.num_layers};
    rc = mg_plan_check_model(&plan, stage_world, &pm, err);
    if (rc) return rc;
    int L = q->model.num_layers;
    int stage_layers = estimate_pp ? L / pp : L;
    /* representative stages: the first (embedding), the last (output layer, loss) and
     * one in between (the middle stages hold the same layers' worth) */
    int stages[3] = {0, pp > 2 ? 1 : -1, pp > 1 ? pp - 1 : -1};
    if (estimate_pp) stages[1] = stages[2] = -1;
    out->pp_estimated = estimate_pp;
    out->dp = dp;
    out->n_micro = M;
    double worst_mb = -1, mb_of[3] = {0, 0, 0}, layer_fwd_of[3] = {0, 0, 0};
    mg_planner_walk_t W = {0};
    mg_step st = {0};
    rc = build_step(q, stage_layers, &st, err);
    if (rc) {
        mg_step_release(&st);
        return rc;
    }
    for (int k = 0; k < 3; k++) {
        if (stages[k] < 0) continue;
        mg_rank_graph R = {0};
        int rank = stages[k] * (world / pp); /* first rank of the stage (pp is the outermost dimension) */
        rc = build_rank(&st, &plan, stage_world, rank, &R, err);
        mg_planner_walk_t w;
        if (!rc) rc = mg_planner_walk(c, q, &plan, dp, R.graph, L, &w, err);
        mg_rank_graph_release(&R);
        if (rc) {
            mg_step_release(&st);
            mg_planner_walk_free(&W);
            return rc;
        }
        double mb = w.mb_compute_s[0] + w.mb_compute_s[1];
        for (int g = 0; g < MG_GROUP_COUNT; g++) mb += w.mb_comm_s[0][g] + w.mb_comm_s[1][g];
        mb_of[k] = mb;
        for (int l = 0; l < L; l++)
            if (w.layer_present[l]) layer_fwd_of[k] += w.layer_fwd_s[l];
        if (mb > worst_mb) {
            worst_mb = mb;
            mg_planner_walk_free(&W);
            W = w;
        } else {
            mg_planner_walk_free(&w);
        }
    }
    mg_step_release(&st);
    /* the stages between the first and the last hold the same layers' worth as the
     * second; an estimated pipeline's pp stages are all the one stage graph */
    int count[3] = {1, 0, 0};
    if (pp > 1 && estimate_pp) count[0] = pp;
    else if (pp > 1) count[1] = pp - 2, count[2] = 1;
    for (int k = 0; k < 3; k++) {
        W.stage_count[k] = stages[k] >= 0 ? count[k] : 0;
        W.stage_mb_s[k] = mb_of[k];
        W.stage_layer_fwd_s[k] = layer_fwd_of[k];
    }
    b->walk = W;
    b->built = plan;
    b->pp_estimated = estimate_pp;
    b->stage_layers = stage_layers;
    return MG_OK;
}

int mg_plan_predict(const mg_cluster *c, const mg_plan_query *q, mg_prediction *out, mg_error *err) {
    mg_planner_built_t b;
    int rc = mg_planner_prepare(c, q, &b, out, err);
    if (!rc) rc = mg_planner_finish(c, q, &b.built, b.pp_estimated, b.stage_layers, &b.walk, out, err);
    mg_planner_walk_free(&b.walk);
    return rc;
}

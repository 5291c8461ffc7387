/* From one walk of the slowest stage's rank graph to a step: recompute, the pipeline
 * schedule and its bubble, overlap of the data-parallel reduction, memory per GPU. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "mgraph/comm.h"
#include "planner/planner_internal.h"

static void note(mg_prediction *out, const char *s) {
    size_t n = strlen(out->notes);
    snprintf(out->notes + n, sizeof out->notes - n, "%s%s", n ? "; " : "", s);
}

/* Which of the stage's layers full recompute reruns: `local` is the layer's index
 * among the stage's layers. */
static bool recomputed(const mg_plan_query *q, int local) {
    if (q->recompute != MG_RECOMPUTE_FULL) return false;
    if (q->recompute_method == MG_RECOMPUTE_BLOCK) return local < q->recompute_num_layers;
    return true;
}

int mg_planner_finish(const mg_cluster *c, const mg_plan_query *q, const mg_plan *built, bool pp_estimated,
                      int stage_layers, const mg_planner_walk_t *w, mg_prediction *out, mg_error *err) {
    (void)err;
    const mg_plan *p = &q->plan;
    int pp = p->pp, v = q->virtual_stages, M = out->n_micro, dp = out->dp;
    mg_precision prec = q->precision;
    double act_bytes = prec == MG_PREC_BF16 ? 2 : 4;
    out->graph_nodes = w->nodes;

    /* per micro-batch: compute, and the collectives Megatron's layers wait for (tp, cp,
     * ep, and pp's send/recv once the partitioner emits them) */
    double fwd = w->mb_compute_s[0], bwd = w->mb_compute_s[1], dp_in_mb = 0;
    for (int g = 0; g < MG_GROUP_COUNT; g++) {
        if (g == MG_GROUP_DP || g == MG_GROUP_DP_CP) {
            dp_in_mb += w->mb_comm_s[0][g] + w->mb_comm_s[1][g];
            continue;
        }
        fwd += w->mb_comm_s[0][g];
        bwd += w->mb_comm_s[1][g];
    }
    bwd += dp_in_mb; /* a reduction inside the micro-batch loop waits like any collective */
    /* Each model chunk sends its output forward and its input's gradient back: with v
     * chunks a stage sends v times each way per micro-batch (the first stage v - 1
     * gradients back, the last stage v - 1 outputs forward), while its compute stays
     * that of L/pp layers. The search walks one graph (v = 1) for every v and adds the
     * sends the other chunks make at the walked sends' mean; a prediction walks the
     * graph of its own v, and this adds nothing. */
    int walked_v = built->vpp > 1 ? built->vpp : 1;
    double p2p_extra[2] = {0, 0}, p2p_extra_bytes = 0;
    int n_sends = w->mb_p2p_n[0] + w->mb_p2p_n[1];
    if (walked_v != v && pp > 1 && n_sends > 0) {
        double mean = (w->mb_p2p_s[0] + w->mb_p2p_s[1]) / n_sends, mean_bytes = w->mb_p2p_bytes / n_sends;
        for (int k = 0; k < 2; k++) {
            double each = w->mb_p2p_n[k] ? w->mb_p2p_s[k] / w->mb_p2p_n[k] : mean;
            p2p_extra[k] = (v - walked_v) * each;
            p2p_extra_bytes += (v - walked_v) * mean_bytes;
        }
    }
    fwd += p2p_extra[0];
    bwd += p2p_extra[1];

    /* full recompute: the recomputed layers' forward (collectives included) again in the backward */
    double rec = 0, rec_flops = 0;
    int present = 0, n_rec = 0;
    for (int l = 0; l < w->n_layers; l++) {
        if (!w->layer_present[l]) continue;
        if (recomputed(q, present)) {
            rec += w->layer_fwd_s[l];
            n_rec++;
        }
        present++;
    }
    if (present) rec_flops = w->layer_fwd_flops * n_rec / present;
    if (q->recompute == MG_RECOMPUTE_SELECTIVE) rec += w->attn_fwd_s; /* the core attention's forward again */
    if (q->recompute == MG_RECOMPUTE_FULL) {
        out->recompute_estimated = true;
        note(out, "full recompute costed as a second forward of the recomputed layers");
    }
    if (q->recompute == MG_RECOMPUTE_SELECTIVE && !q->attention_unfused)
        note(out, "selective recompute: mgraph's fused attention stores no s^2 tensors, nothing to recompute");
    if (q->attention_unfused) note(out, "attention costed as Megatron's unfused kernels");

    /* stage-boundary transfers of an estimated pipeline: the activation forward and its
     * gradient back per micro-batch and model chunk; with tp > 1 each rank of the tp
     * group sends 1/tp of it (Megatron's scatter/gather over the node's NVLink) */
    double p2p = 0, p2p_bytes = 0;
    if (pp_estimated && pp > 1) {
        double act = (double)q->model.seq_length * q->micro_batch * q->model.hidden * act_bytes / p->tp;
        mg_planner_link_t l;
        mg_planner_link(c, (long)p->tp * p->cp * dp, pp, &l);
        p2p = 2.0 * v * mg_planner_collective_s(MG_OP_SEND, 2, act, &l);
        p2p_bytes = 2.0 * v * act * M;
        out->group[MG_GROUP_PP].ranks = pp;
        out->group[MG_GROUP_PP].inter_node = l.inter;
        out->group[MG_GROUP_PP].bytes = p2p_bytes;
        out->group[MG_GROUP_PP].time_s = p2p * M;
        out->group[MG_GROUP_PP].exposed_s = p2p * (M + (double)(pp - 1) / v);
        note(out, "pipeline estimated: a stage is the graph of L/pp layers with the embedding and output layer (the "
                  "partitioner does not build pp plans yet), bubble and stage transfers analytic");
    }
    double t_mb = fwd + bwd + rec + p2p;
    out->fwd_s = fwd;
    out->bwd_s = bwd;
    out->recompute_s = rec;
    out->p2p_s = p2p;

    /* The pipeline. Stage i spends t_i = f_i + b_i on a micro-batch (forward, backward
     * with its recompute, the stage's collectives and transfers). With 1F1B the slowest
     * stage k sets the pace once the pipeline is full, and the rest is filling and
     * draining it: micro-batch 0 has to go forward through the stages before k, and
     * the last one's gradient back through them, so when k is the last stage (the
     * output layer and loss live there)
     *     T = sum_{i<k} f_i + M t_k + sum_{i<k} b_i = M t_k + sum_{i != k} t_i;
     * with equal stages (t_i = t) this is Megatron's (M + pp - 1) t. Interleaving
     * splits every stage into v chunks of t_i / v and the fill and drain pass chunks,
     * not whole stages (Narayanan et al. 2021, sec. 2.2.2: bubble (pp - 1)/v of t):
     *     T = M max_i t_i + (sum_i t_i - max_i t_i) / v.
     * Exact for equal stages and for the last stage slowest; when another stage is
     * slowest, the stages after it answer its first micro-batch later than its own
     * pace, and this is the estimate that charges the fill/drain at each stage's own
     * pace (where (M + (pp-1)/v) x the slowest charged all of it at the slowest's).
     * Per stage: the walked micro-batch time plus what this query adds on top of the
     * walk (recompute, scaled by the stage's share of layer forward time; the extra
     * chunks' sends and estimated transfers, the same on every stage). */
    double stage_t[3] = {0, 0, 0}, sum_t = 0, max_t = 0;
    double extra = p2p + p2p_extra[0] + p2p_extra[1];
    double w_layer_fwd = 0;
    for (int l = 0; l < w->n_layers; l++)
        if (w->layer_present[l]) w_layer_fwd += w->layer_fwd_s[l];
    for (int k = 0; k < 3; k++) {
        if (!w->stage_count[k]) continue;
        double r = w_layer_fwd > 0 ? rec * w->stage_layer_fwd_s[k] / w_layer_fwd : rec;
        stage_t[k] = w->stage_mb_s[k] + extra + r;
        sum_t += w->stage_count[k] * stage_t[k];
        if (stage_t[k] > max_t) max_t = stage_t[k];
    }
    if (max_t <= 0) sum_t = max_t = t_mb; /* a walk without stage times (nothing runs) */
    out->bubble_fraction = 0;
    out->pipeline_s = M * t_mb;
    if (pp > 1) {
        out->pipeline_s = M * max_t + (sum_t - max_t) / v;
        out->bubble_fraction = (sum_t - max_t) / (v * M * max_t);
    }
    if (pp > 1 && c->pipeline_serial) {
        /* stages that take turns: every micro-batch passes through all of them one after
         * the other, and a stage idles while the others work */
        out->pipeline_s = M * sum_t;
        out->bubble_fraction = 1 - max_t / sum_t;
        note(out, "the cluster's pipeline stages take turns (pipeline-serial 1): M x the sum of the stages");
    }

    /* once per step: the data-parallel gradient reduction can hide behind the last
     * micro-batch's backward (--overlap-grad-reduce); the distributed optimizer's
     * parameter all-gather follows the optimizer; other groups (grad norm over tp...) wait */
    double dp_grad = 0, dp_param = 0, other = 0;
    for (int g = 0; g < MG_GROUP_COUNT; g++) {
        if (g == MG_GROUP_DP || g == MG_GROUP_DP_CP) {
            dp_param += w->step_opt_comm_s[g];
            dp_grad += w->step_comm_s[g] - w->step_opt_comm_s[g];
        } else {
            other += w->step_comm_s[g];
        }
    }
    double hidden = q->overlap_grad_reduce ? (dp_grad < bwd + rec ? dp_grad : bwd + rec) : 0;
    out->dp_exposed_s = dp_grad - hidden + dp_param;
    out->optimizer_s = w->step_compute_s + other;
    out->step_time_s = out->pipeline_s + out->dp_exposed_s + out->optimizer_s;

    /* per group, per step */
    for (int g = 0; g < MG_GROUP_COUNT; g++) {
        if (g == MG_GROUP_PP && pp_estimated) continue;
        mg_group_cost *gc = &out->group[g];
        gc->ranks = w->group_ranks[g];
        gc->inter_node = w->group_inter[g];
        gc->bytes = w->mb_bytes[g] * M + w->step_bytes[g];
        gc->time_s = (w->mb_comm_s[0][g] + w->mb_comm_s[1][g]) * M + w->step_comm_s[g];
        if (g == MG_GROUP_PP) {
            gc->bytes += p2p_extra_bytes * M;
            gc->time_s += (p2p_extra[0] + p2p_extra[1]) * M;
        }
        if (g == MG_GROUP_DP || g == MG_GROUP_DP_CP) gc->exposed_s = (w->mb_comm_s[0][g] + w->mb_comm_s[1][g]) * M;
        else gc->exposed_s = gc->time_s;
    }
    out->group[MG_GROUP_DP].exposed_s += out->dp_exposed_s;

    /* FLOPs */
    out->model_flops = mg_plan_model_flops(q);
    out->hw_flops_per_gpu = M * (w->mb_flops[0] + w->mb_flops[1] + rec_flops) + w->step_flops;
    out->tflops_per_gpu = out->model_flops / (out->step_time_s * q->world) / 1e12;
    out->mfu = out->tflops_per_gpu / c->peak_tflops[prec];

    /* memory: persistent state by role in the run's precision (mixed precision: 16-bit
     * weights, fp32 main gradients, fp32 master weights of the owned shard + moments) */
    double wbytes = prec == MG_PREC_BF16 ? 2 : 4;
    out->mem_weights = w->param_elems * wbytes;
    out->mem_grads = w->grad_elems * 4;
    out->mem_optimizer = w->opt_elems * 4 + (prec == MG_PREC_BF16 ? w->opt_elems / 2 * 4 : 0);
    /* activations: what each micro-batch keeps for its backward; full recompute keeps a
     * recomputed layer's input only, and needs one segment's activations while it reruns */
    double layer_in = (double)q->model.seq_length * q->micro_batch * q->model.hidden * act_bytes /
                      (built->sequence_parallel ? p->tp : 1);
    double per_mb = w->other_saved, work = 0, max_layer = 0;
    int local = 0, seg = q->recompute_method == MG_RECOMPUTE_BLOCK ? 1 : (q->recompute_num_layers > 0 ? q->recompute_num_layers : 1);
    for (int l = 0; l < w->n_layers; l++) {
        if (!w->layer_present[l]) continue;
        /* unfused attention keeps its s^2 tensors unless selective recompute reruns it */
        double layer = w->layer_saved[l] + (q->recompute == MG_RECOMPUTE_SELECTIVE ? 0 : w->layer_scores_saved[l]);
        if (layer > max_layer) max_layer = layer;
        if (recomputed(q, local)) {
            if (q->recompute_method == MG_RECOMPUTE_BLOCK || local % seg == 0) per_mb += layer_in;
        } else {
            per_mb += layer;
        }
        local++;
    }
    if (n_rec) work = max_layer * seg;
    double inflight = 1;
    if (pp > 1) {
        inflight = M < pp ? M : pp;
        if (v > 1) inflight *= 1 + (double)(pp - 1) / ((double)pp * v);
    }
    out->activations_per_micro = per_mb;
    out->inflight_micro = inflight;
    out->mem_activations = per_mb * inflight + work;
    out->mem_reserved = c->reserved_gib * 1073741824.0;
    out->mem_total = out->mem_weights + out->mem_grads + out->mem_optimizer + out->mem_activations + out->mem_reserved;
    out->fits = out->mem_total <= c->hbm_gib * 1073741824.0;
    (void)stage_layers;
    return MG_OK;
}

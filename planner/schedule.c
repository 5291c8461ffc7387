/* From the block cost table and the pipeline layout to a step: the overlaps Megatron
 * implements, recompute, the pipeline schedule, data parallelism and memory per stage.
 *
 * Overlaps, as Megatron-Core implements them (each hidden collective also slows the
 * compute it hides behind by cluster.overlap_interference of its time: NCCL and
 * userbuffers kernels take SMs):
 *   tensor parallel   without --tp-comm-overlap the forward's all-gathers / reduce-
 *                     scatters (all-reduces without sequence parallelism) wait; in the
 *                     backward Megatron hides the input-gradient reduction (and with SP
 *                     the input's re-gather) behind the weight-gradient GEMM
 *                     (LinearWithGradAccumulationAndAsyncCommunication): half of the
 *                     backward's tp traffic, behind half of its GEMM time.
 *                     --tp-comm-overlap (userbuffers) pipelines every tp collective with
 *                     its GEMM in chunks: what the GEMMs cannot cover waits, and one
 *                     chunk in eight of each is exposed at the pipeline's end.
 *   context parallel  the K/V ring's next transfer runs beside the attention on the
 *                     current block: what exceeds the attention time waits
 *                     (--cp-comm-type allgather: K and V gathered before attention and
 *                     their gradients reduce-scattered after, the same bytes, waited for).
 *   expert parallel   the token all-to-alls wait, unless --moe-shared-expert-overlap
 *                     runs the shared expert (its nodes in the probe's graph) beside them.
 *   pipeline          1F1B's transfers wait (two per micro-batch and model chunk);
 *                     the interleaved schedule overlaps them with compute
 *                     (--overlap-p2p-communication, Megatron's default there).
 *   data parallel     --overlap-grad-reduce: bucket by bucket (Megatron's 40M-parameter
 *                     buckets) during the last micro-batch's backward; the last bucket
 *                     always waits. --overlap-param-gather: the distributed optimizer's
 *                     all-gather during the next step's first forward. Stage p of a
 *                     pipeline finishes its backward earlier than stage 0 by the drain
 *                     of the stages before it, and spends that slack first.
 *   FSDP              each layer's parameters are all-gathered before its forward and
 *                     its backward and its gradients reduce-scattered after it, every
 *                     micro-batch, prefetched beside the previous layer's compute.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "planner/planner_internal.h"

#define GIB 1073741824.0

static void note(mg_prediction *out, const char *s) {
    size_t n = strlen(out->notes);
    if (strstr(out->notes, s)) return;
    snprintf(out->notes + n, sizeof out->notes - n, "%s%s", n ? "; " : "", s);
}

/* A block priced under the query's overlaps: per micro-batch, forward and backward. */
typedef struct priced_t {
    double t[2];                        /* compute + what the collectives add */
    double comm[2][MG_GROUP_COUNT];     /* the collectives' own time */
    double exposed[2][MG_GROUP_COUNT];  /* of which the step waits for */
    double rec;                         /* selective recompute's rerun in the backward */
    double flops[2];
    double saved, params, expert_params;
} priced_t;

static double max0(double x) { return x > 0 ? x : 0; }

static void price(const mg_cluster *c, const mg_plan_query *q, const mg_planner_block_t *b, priced_t *o) {
    memset(o, 0, sizeof *o);
    double kappa = c->overlap_interference;
    for (int d = 0; d < 2; d++) {
        double t = b->compute_s[d], hidden = 0;
        for (int g = 0; g < MG_GROUP_COUNT; g++) {
            double cc = b->comm_s[d][g], ex = cc;
            if (cc <= 0) continue;
            if (g == MG_GROUP_TP) {
                double gemm = b->gemm_s[d];
                if (q->tp_comm_overlap) ex = cc / 8 + max0(cc * 7 / 8 - gemm);
                else if (d == 1) ex = cc / 2 + max0(cc / 2 - gemm / 2);
            } else if (g == MG_GROUP_CP) {
                ex = q->cp_allgather ? cc : max0(cc - b->attn_s[d]);
            } else if (g == MG_GROUP_EP && q->moe_shared_overlap && b->shared_s[d] > 0) {
                ex = max0(cc - b->shared_s[d]);
            }
            o->comm[d][g] = cc;
            o->exposed[d][g] = ex;
            t += ex;
            hidden += cc - ex;
        }
        o->t[d] = t + kappa * hidden;
        o->flops[d] = b->flops[d];
    }
    o->saved = b->saved_bytes;
    o->params = b->params;
    o->expert_params = b->expert_params;
    if (q->recompute == MG_RECOMPUTE_SELECTIVE) {
        /* Megatron's selective recompute reruns the core attention in the backward; with
         * unfused attention its s^2 tensors are no longer kept */
        o->rec = b->attn_s[0];
        o->saved -= b->scores_saved;
    }
}

/* Which of a chunk's layers full recompute reruns: `local` is the layer's index in its
 * model chunk (Megatron applies --recompute-num-layers per chunk). */
static bool recomputed(const mg_plan_query *q, int local) {
    if (q->recompute != MG_RECOMPUTE_FULL) return false;
    if (q->recompute_method == MG_RECOMPUTE_BLOCK) return local < q->recompute_num_layers;
    return true;
}

/* One stage's sums over its chunks. */
typedef struct stage_sum_t {
    double f, b, rec, p2p, p2p_exposed, flops;
    double comm[MG_GROUP_COUNT], exposed[MG_GROUP_COUNT];
    double params, expert_params, tied;
} stage_sum_t;

/* Data-parallel time of one stage: the gradient reduction and the parameter gather,
 * each bucketed as Megatron's DDP buckets them. */
static double bucketed(mg_op op, int n, double elems, double bytes_per, double bucket, const mg_planner_link_t *l,
                       double *n_buckets) {
    if (n <= 1 || elems <= 0) {
        *n_buckets = 1;
        return 0;
    }
    double nb = ceil(elems / bucket);
    if (nb < 1) nb = 1;
    *n_buckets = nb;
    return nb * mg_planner_collective_s(op, n, elems / nb * bytes_per, l);
}

/* The probe's blocks as the prediction reports them: FLOPs per micro-batch and parameters
 * on one rank, and how many of the model's layers each kind prices. */
static void block_out(const mg_planner_block_t *b, mg_block_cost *o) {
    for (int d = 0; d < 2; d++) {
        o->flops[d] = b->flops[d];
        o->gemm_flops[d] = b->gemm_flops[d];
        o->attention_flops[d] = b->attn_flops[d];
        o->time_s[d] = b->compute_s[d];
    }
    o->params = b->params;
    o->expert_params = b->expert_params;
}

static void blocks_out(const mg_plan_query *q, const mg_planner_costs_t *k, mg_prediction *out) {
    block_out(&k->emb, &out->block_embedding);
    block_out(&k->head, &out->block_output);
    out->n_kinds = k->period;
    for (int i = 0; i < k->period; i++) {
        block_out(&k->kind[i], &out->block_kind[i]);
        out->block_kind[i].moe = k->kind[i].expert_params > 0;
    }
    for (int l = 0; l < q->model.num_layers; l++) {
        int i = mg_planner_kind_of(k, &q->model, l);
        if (!out->block_kind[i].layers) out->block_kind[i].first_layer = l;
        out->block_kind[i].layers++;
    }
}

int mg_planner_schedule(const mg_cluster *c, const mg_plan_query *q, const mg_planner_costs_t *k,
                        const mg_planner_layout_t *lay, mg_prediction *out, mg_error *err) {
    const mg_plan *p = &q->plan;
    const mg_gpt_config *m = &q->model;
    int pp = lay->pp, v = lay->vp, M = out->n_micro, dp = out->dp, tp = p->tp, cp = p->cp;
    mg_precision prec = q->precision;
    double ab = prec == MG_PREC_BF16 ? 2 : 4, wb = ab;
    double kappa = c->overlap_interference;
    out->graph_nodes = k->nodes;
    out->probe_layers = k->probe_layers;
    out->probe_seq_scale = k->seq_scale;
    out->n_stages = pp;
    out->virtual_stages = v;

    /* price every block once (the shared experts are in the probe's graph) */
    priced_t emb, head, kind[MG_PLANNER_MAX_KINDS];
    price(c, q, &k->emb, &emb);
    price(c, q, &k->head, &head);
    for (int i = 0; i < k->period; i++) price(c, q, &k->kind[i], &kind[i]);
    blocks_out(q, k, out);

    /* the stage-boundary transfer: one micro-batch's activation (or its gradient),
     * sequence-split over tp under sequence parallelism */
    double act = (double)m->seq_length / cp * q->micro_batch * m->hidden * ab / (p->sequence_parallel ? tp : 1);
    mg_planner_link_t pl;
    mg_planner_link(c, (long)tp * cp * dp, pp > 1 ? pp : 2, &pl);
    double t_x = pp > 1 ? mg_planner_collective_s(MG_OP_SEND, 2, act, &pl) : 0;
    bool p2p_hidden = v > 1 && q->overlap_p2p;

    /* per stage: forward, backward, recompute per micro-batch; parameters; memory */
    stage_sum_t *S = calloc((size_t)pp, sizeof *S);
    double *act_chunk = calloc((size_t)pp * v, sizeof *act_chunk), *work = calloc((size_t)pp, sizeof *work);
    if (!S || !act_chunk || !work) {
        free(S);
        free(act_chunk);
        free(work);
        return mg_error_set(err, MG_ERR_NOMEM, "planner: out of memory");
    }
    double layer_in = (double)m->seq_length / cp * q->micro_batch * m->hidden * ab / (p->sequence_parallel ? tp : 1);
    bool tied = !m->untie_embeddings;
    for (int s = 0; s < pp; s++) {
        stage_sum_t *st = &S[s];
        bool has_emb = false, has_loss = false;
        for (int ci = 0; ci < v; ci++) {
            const mg_planner_chunk_t *ch = &lay->chunk[s * v + ci];
            double a = 0, seg_max = 0;
            const priced_t *blocks[2] = {ch->emb ? &emb : NULL, ch->loss ? &head : NULL};
            for (int e = 0; e < 2; e++) {
                const priced_t *x = blocks[e];
                if (!x) continue;
                st->f += x->t[0];
                st->b += x->t[1];
                st->flops += x->flops[0] + x->flops[1];
                st->params += x->params;
                a += x->saved;
                for (int g = 0; g < MG_GROUP_COUNT; g++) {
                    st->comm[g] += x->comm[0][g] + x->comm[1][g];
                    st->exposed[g] += x->exposed[0][g] + x->exposed[1][g];
                }
            }
            has_emb |= ch->emb;
            has_loss |= ch->loss;
            int seg = q->recompute_method == MG_RECOMPUTE_UNIFORM && q->recompute_num_layers > 0 ? q->recompute_num_layers : 1;
            for (int j = 0; j < ch->n; j++) {
                const priced_t *x = &kind[mg_planner_kind_of(k, m, ch->first + j)];
                st->f += x->t[0];
                st->b += x->t[1] + x->rec;
                st->rec += x->rec;
                st->flops += x->flops[0] + x->flops[1];
                st->params += x->params;
                st->expert_params += x->expert_params;
                for (int g = 0; g < MG_GROUP_COUNT; g++) {
                    st->comm[g] += x->comm[0][g] + x->comm[1][g];
                    st->exposed[g] += x->exposed[0][g] + x->exposed[1][g];
                }
                if (recomputed(q, j)) {
                    /* full recompute: the layer's forward (collectives included) again in the
                     * backward; it keeps its input (one per segment of `seg` layers) */
                    st->b += x->t[0];
                    st->rec += x->t[0];
                    st->flops += x->flops[0];
                    if (q->recompute_method == MG_RECOMPUTE_BLOCK || j % seg == 0) a += layer_in;
                    if (x->saved > seg_max) seg_max = x->saved;
                } else {
                    a += x->saved;
                }
            }
            act_chunk[s * v + ci] = a;
            double w = seg_max * (q->recompute_method == MG_RECOMPUTE_BLOCK ? 1 : seg);
            if (w > work[s]) work[s] = w;
            /* transfers: each chunk receives its input and sends its output each way
             * (the very first and last chunk of the pipeline one fewer) */
            if (pp > 1) {
                st->p2p += 2 * t_x;
                st->comm[MG_GROUP_PP] += 2 * t_x;
            }
        }
        /* the schedule's host work per chunk, forward and backward */
        st->f += v * c->step_overhead_us * 1e-6;
        st->b += v * c->step_overhead_us * 1e-6;
        /* a tied output layer is a copy of the embedding on the last stage (Megatron keeps
         * both and sums their gradients over the embedding group) */
        if (tied && has_loss && !has_emb) st->tied = (double)m->vocab / tp * m->hidden;
        st->params += st->tied;
        st->p2p_exposed = p2p_hidden ? 0 : st->p2p;
        st->exposed[MG_GROUP_PP] += st->p2p_exposed;
    }

    /* the pipeline: stage time per micro-batch; M x the slowest + the others' fill and
     * drain at their own pace, passing chunks (Narayanan et al. 2021, sec. 2.2.2) */
    double sum_t = 0, max_t = 0;
    int slow = 0;
    for (int s = 0; s < pp; s++) {
        double t = S[s].f + S[s].b + S[s].p2p_exposed;
        sum_t += t;
        if (t > max_t) max_t = t, slow = s;
    }
    out->slowest_stage = slow;
    out->fwd_s = S[slow].f;
    out->bwd_s = S[slow].b - S[slow].rec;
    out->recompute_s = S[slow].rec;
    out->p2p_s = S[slow].p2p_exposed;
    out->pipeline_s = M * max_t;
    out->bubble_fraction = 0;
    if (pp > 1) {
        out->pipeline_s = M * max_t + (sum_t - max_t) / v;
        out->bubble_fraction = (sum_t - max_t) / (v * M * max_t);
        if (c->pipeline_serial) {
            out->pipeline_s = M * sum_t;
            out->bubble_fraction = 1 - max_t / sum_t;
            note(out, "the cluster's pipeline stages take turns (pipeline-serial 1): M x the sum of the stages");
        }
    }
    if (q->recompute == MG_RECOMPUTE_FULL) {
        out->recompute_estimated = true;
        note(out, "full recompute costed as a second forward of the recomputed layers");
    }
    if (q->recompute == MG_RECOMPUTE_SELECTIVE && !q->attention_unfused)
        note(out, "selective recompute reruns the fused attention's forward; it stores no s^2 tensors to save");
    if (q->attention_unfused) note(out, "attention costed as Megatron's unfused kernels");
    if (k->seq_scale < 1) note(out, "probed at a shorter sequence and scaled (attention by its score pairs)");
    if (q->moe_shared_ffn > 0 && !k->moe) note(out, "--moe-shared-expert-intermediate-size ignored: the model has no experts");

    /* data parallelism and the optimizer, per stage; the step waits for the worst stage
     * after the slack its place in the pipeline's drain gives it */
    int dpc = dp * cp;                     /* dense gradients reduce over dp x cp */
    int edp = p->ep > 0 ? dpc / p->ep : dpc; /* expert gradients over the expert-data-parallel ranks */
    mg_planner_link_t ldp, ledp;
    mg_planner_link(c, tp, dpc > 1 ? dpc : 2, &ldp);
    mg_planner_link(c, (long)tp * (p->ep > 1 ? p->ep : 1), edp > 1 ? edp : 2, &ledp);
    double gb = prec == MG_PREC_BF16 ? (q->grads_16bit ? 2 : 4) : 4;
    bool dist = p->distributed_optimizer || q->fsdp != MG_FSDP_NONE;
    bool shard_grads = q->fsdp == MG_FSDP_OPTIM_GRADS || q->fsdp == MG_FSDP_OPTIM_GRADS_PARAMS;
    bool shard_params = q->fsdp == MG_FSDP_OPTIM_GRADS_PARAMS;
    double bucket = 40e6 > 1e6 * dpc ? 40e6 : 1e6 * dpc; /* Megatron's default --ddp-bucket-size */
    /* Gradient clipping's global norm joins every stage after its reduction, so the step
     * ends with the worst stage's exposed reduction (less the slack its place in the
     * drain gives it), the optimizer, and the parameter gather (less the slack its place
     * in the next step's fill gives it when it overlaps the forward). */
    double tail_grad = 0, tail_param = 0, opt_max = 0, drain = 0, fill = 0;
    bool refresh = false;
    for (int s = 0; s < pp; s++) {
        stage_sum_t *st = &S[s];
        double P = st->params, E = st->expert_params, nb1, nb2, nb3, nb4;
        double t_grad = 0, t_param = 0, ex_grad = 0, ex_param = 0;
        if (shard_params) {
            /* FSDP: every micro-batch gathers each layer's parameters before its forward and
             * its backward and reduce-scatters its gradients, prefetched a layer ahead */
            double ag = bucketed(MG_OP_ALLGATHER, dpc, P / dpc, wb, bucket, &ldp, &nb1) +
                        bucketed(MG_OP_ALLGATHER, edp, E / edp, wb, bucket, &ledp, &nb2);
            double rs = bucketed(MG_OP_REDUCE_SCATTER, dpc, P, gb, bucket, &ldp, &nb3) +
                        bucketed(MG_OP_REDUCE_SCATTER, edp, E, gb, bucket, &ledp, &nb4);
            double ex_f = max0(ag - st->f) + ag / (nb1 + nb2), ex_b = max0(ag + rs - st->b) + rs / (nb3 + nb4);
            st->f += ex_f + kappa * (ag - ex_f);
            st->b += ex_b + kappa * (ag + rs - ex_b);
            st->comm[MG_GROUP_DP] += (2 * ag + rs) * M;
            st->exposed[MG_GROUP_DP] += (ex_f + ex_b) * M;
            refresh = true;
        } else {
            mg_op red = dist ? MG_OP_REDUCE_SCATTER : MG_OP_ALLREDUCE;
            t_grad = bucketed(red, dpc, P, gb, bucket, &ldp, &nb1) + bucketed(red, edp, E, gb, bucket, &ledp, &nb2);
            if (shard_grads) {
                /* ZeRO-2: the reduce-scatter every micro-batch, beside the backward */
                double ex = max0(t_grad - st->b) + t_grad / (nb1 + nb2);
                st->b += ex + kappa * (t_grad - ex);
                st->comm[MG_GROUP_DP] += t_grad * M;
                st->exposed[MG_GROUP_DP] += ex * M;
                t_grad = 0;
                refresh = true;
            } else {
                ex_grad = q->overlap_grad_reduce ? fmax(t_grad - st->b, t_grad / (nb1 + nb2)) : t_grad;
            }
            if (dist) {
                t_param = bucketed(MG_OP_ALLGATHER, dpc, P / dpc, wb, bucket, &ldp, &nb1) +
                          bucketed(MG_OP_ALLGATHER, edp, E / edp, wb, bucket, &ledp, &nb2);
                ex_param = q->overlap_param_gather ? fmax(t_param - st->f, t_param / (nb1 + nb2)) : t_param;
            }
        }
        st->comm[MG_GROUP_DP] += t_grad + t_param;
        st->exposed[MG_GROUP_DP] += ex_grad + ex_param;
        double owned = dist ? P / dpc + E / edp : P + E;
        double opt = k->opt_s_per_elem * owned + k->step_other_comm_s;
        double g_tail = ex_grad + kappa * (t_grad - ex_grad) - drain;
        double p_tail = ex_param + kappa * (t_param - ex_param) - (q->overlap_param_gather ? fill : 0);
        if (g_tail > tail_grad) tail_grad = g_tail;
        if (p_tail > tail_param) tail_param = p_tail;
        if (opt > opt_max) opt_max = opt;
        drain += st->b / v;
        fill += st->f / v;
    }
    if (refresh) {
        /* FSDP's per-micro-batch collectives lengthen the stages: the pipeline again */
        sum_t = max_t = 0;
        for (int s = 0; s < pp; s++) {
            double t = S[s].f + S[s].b + S[s].p2p_exposed;
            sum_t += t;
            if (t > max_t) max_t = t, slow = s;
        }
        out->slowest_stage = slow;
        out->fwd_s = S[slow].f;
        out->bwd_s = S[slow].b - S[slow].rec;
        out->pipeline_s = pp > 1 ? M * max_t + (sum_t - max_t) / v : M * max_t;
        if (pp > 1) out->bubble_fraction = (sum_t - max_t) / (v * M * max_t);
        note(out, "sharded data parallelism: its per-micro-batch collectives priced beside each stage's compute");
    }
    out->dp_exposed_s = tail_grad + tail_param;
    out->optimizer_s = opt_max;
    out->step_time_s = out->pipeline_s + out->dp_exposed_s + out->optimizer_s;

    /* per group, per step, on the slowest stage */
    const stage_sum_t *ss = &S[out->slowest_stage];
    for (int g = 0; g < MG_GROUP_COUNT; g++) {
        mg_group_cost *gc = &out->group[g];
        gc->ranks = k->group_ranks[g];
        gc->inter_node = k->group_inter[g];
        bool per_mb = g != MG_GROUP_DP;
        gc->time_s = ss->comm[g] * (per_mb ? M : 1);
        gc->exposed_s = ss->exposed[g] * (per_mb ? M : 1);
    }
    /* bytes per step on the slowest stage: per block, times its count there */
    {
        double bytes[MG_GROUP_COUNT] = {0};
        int s = out->slowest_stage;
        for (int ci = 0; ci < v; ci++) {
            const mg_planner_chunk_t *ch = &lay->chunk[s * v + ci];
            for (int g = 0; g < MG_GROUP_COUNT; g++) {
                if (ch->emb) bytes[g] += k->emb.comm_bytes[g];
                if (ch->loss) bytes[g] += k->head.comm_bytes[g];
            }
            for (int j = 0; j < ch->n; j++)
                for (int g = 0; g < MG_GROUP_COUNT; g++) bytes[g] += k->kind[mg_planner_kind_of(k, m, ch->first + j)].comm_bytes[g];
        }
        for (int g = 0; g < MG_GROUP_COUNT; g++) out->group[g].bytes = bytes[g] * M;
        if (pp > 1) {
            out->group[MG_GROUP_PP].ranks = pp;
            out->group[MG_GROUP_PP].inter_node = pl.inter;
            out->group[MG_GROUP_PP].bytes = 2.0 * v * act * M;
        }
        const stage_sum_t *st = &S[s];
        double P = st->params, E = st->expert_params;
        double red = dist ? (double)(dpc - 1) / dpc : 2.0 * (dpc - 1) / dpc;
        double dbytes = dpc > 1 ? P * gb * red : 0;
        if (edp > 1) dbytes += E * gb * (dist ? (double)(edp - 1) / edp : 2.0 * (edp - 1) / edp);
        if (dist && dpc > 1) dbytes += P * wb * (dpc - 1) / dpc + (edp > 1 ? E * wb * (edp - 1) / edp : 0);
        if (shard_params) dbytes = dbytes * M + P * wb * (dpc - 1) / dpc * M;
        out->group[MG_GROUP_DP].bytes = dbytes;
        out->group[MG_GROUP_DP].ranks = dpc;
        out->group[MG_GROUP_DP].inter_node = ldp.inter;
        if (dpc <= 1) out->group[MG_GROUP_DP].ranks = 1;
    }

    /* FLOPs */
    out->model_flops = mg_plan_model_flops(q);
    out->hw_flops_per_gpu = M * S[out->slowest_stage].flops;
    out->tflops_per_gpu = out->model_flops / (out->step_time_s * q->world) / 1e12;
    out->mfu = out->tflops_per_gpu / c->peak_tflops[prec];

    /* memory per stage: persistent state by role in the run's precision (mixed
     * precision: 16-bit weights, fp32 main gradients, fp32 master weights + moments of
     * the owned shard), the activations of the micro-batches in flight */
    double worst = -1;
    for (int s = 0; s < pp; s++) {
        stage_sum_t *st = &S[s];
        double P = st->params, E = st->expert_params;
        double gbytes = prec == MG_PREC_BF16 && q->grad_buffer_16bit ? 2 : 4;
        double w = (P + E) * wb, gr = (P + E) * gbytes;
        double opt_per = (prec == MG_PREC_BF16 ? 4 : 0) + (q->moment_bytes ? q->moment_bytes : 8);
        double o = dist ? (P / dpc + E / edp) * opt_per : (P + E) * opt_per;
        if (shard_grads) gr = (P / dpc + E / edp) * gbytes;
        if (shard_params) {
            /* the owned shard, plus the gathered parameters of the layer running and the
             * one prefetched */
            double layer_max = 0;
            for (int i = 0; i < k->period; i++)
                if (kind[i].params + kind[i].expert_params > layer_max) layer_max = kind[i].params + kind[i].expert_params;
            w = (P / dpc + E / edp) * wb + 2 * layer_max * wb;
        }
        /* micro-batches in flight: 1F1B holds min(M, pp - s); the interleaved schedule's
         * warm-up runs (pp - s - 1) x 2 + (v - 1) x pp chunk forwards, chunk (k / pp) % v
         * for the k-th, before its first backward (Megatron's get_model_chunk_id) */
        double a = 0, stage_act = 0;
        for (int ci = 0; ci < v; ci++) stage_act += act_chunk[s * v + ci];
        if (v == 1) {
            int n = pp - s < M ? pp - s : M;
            if (pp == 1) n = 1;
            a = n * stage_act;
        } else {
            long n = 2L * (pp - s - 1) + (long)(v - 1) * pp + 1;
            if (n > (long)M * v) n = (long)M * v;
            for (long j = 0; j < n; j++) a += act_chunk[s * v + (int)((j / pp) % v)];
        }
        double total = w + gr + o + a + work[s] + c->reserved_gib * GIB;
        if (s < MG_PLANNER_MAX_PP) out->stage_mem_gib[s] = (float)(total / GIB);
        if (total > worst) {
            worst = total;
            out->mem_stage = s;
            out->mem_weights = w;
            out->mem_grads = gr;
            out->mem_optimizer = o;
            out->mem_activations = a + work[s];
            out->activations_per_micro = stage_act;
            out->inflight_micro = stage_act > 0 ? a / stage_act : 0;
            out->mem_reserved = c->reserved_gib * GIB;
            out->mem_total = total;
        }
    }
    mg_planner_layout_describe(lay, out->mem_stage, out->mem_stage_desc, sizeof out->mem_stage_desc);
    out->fits = out->mem_total <= c->hbm_gib * GIB;
    free(S);
    free(act_chunk);
    free(work);
    return MG_OK;
}

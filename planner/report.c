/* Predictions as text and as JSON (jansson). */
#include <jansson.h>
#include <stdio.h>

#include "mgraph/planner.h"

#define GIB 1073741824.0

static const mg_group shown[] = {MG_GROUP_TP, MG_GROUP_CP, MG_GROUP_EP, MG_GROUP_PP, MG_GROUP_DP};
#define N_SHOWN (sizeof shown / sizeof *shown)

static const char *recompute_name(const mg_plan_query *q) {
    if (q->recompute == MG_RECOMPUTE_SELECTIVE) return "selective";
    if (q->recompute == MG_RECOMPUTE_FULL) return q->recompute_method == MG_RECOMPUTE_BLOCK ? "full-block" : "full-uniform";
    return "none";
}

static const char *fsdp_name(mg_fsdp_kind k) {
    switch (k) {
    case MG_FSDP_OPTIM: return "optim";
    case MG_FSDP_OPTIM_GRADS: return "optim_grads";
    case MG_FSDP_OPTIM_GRADS_PARAMS: return "optim_grads_params";
    default: return "no_shard";
    }
}

/* What the group's collectives hide behind (schedule.c). */
static const char *hides_behind(const mg_plan_query *q, mg_group g) {
    switch (g) {
    case MG_GROUP_TP: return q->tp_comm_overlap ? "GEMMs (--tp-comm-overlap)" : "weight-gradient GEMMs (backward)";
    case MG_GROUP_CP: return q->cp_allgather ? "nothing (all-gather)" : "attention (K/V ring)";
    case MG_GROUP_EP: return q->moe_shared_overlap ? "the shared expert" : "nothing";
    case MG_GROUP_PP: return q->overlap_p2p && (q->virtual_stages > 1 || q->pp_layout) ? "compute (interleaved)" : "nothing";
    case MG_GROUP_DP:
        return q->fsdp == MG_FSDP_OPTIM_GRADS_PARAMS ? "the layers before (FSDP prefetch)"
               : q->overlap_grad_reduce          ? "the last backward / next forward"
                                                  : "nothing";
    default: return "";
    }
}

void mg_prediction_print(const mg_cluster *c, const mg_plan_query *q, const mg_prediction *p, FILE *f) {
    fprintf(f, "plan: tp %d, pp %d", q->plan.tp, q->plan.pp);
    if (p->virtual_stages > 1) fprintf(f, " (%d virtual stages)", p->virtual_stages);
    if (q->pp_layout) fprintf(f, " (layout %s)", q->pp_layout);
    fprintf(f, ", cp %d, ep %d, dp %d on %d GPUs of %s (%s); micro-batch %d x %d per pipeline = global batch %d; "
               "recompute %s%s%s%s%s\n",
            q->plan.cp, q->plan.ep, p->dp, q->world, c->name, mg_precision_name(q->precision), q->micro_batch, p->n_micro,
            q->global_batch, recompute_name(q), q->plan.sequence_parallel ? ", sequence parallel" : "",
            q->plan.distributed_optimizer ? ", distributed optimizer" : "",
            q->fsdp != MG_FSDP_NONE ? ", FSDP " : "", q->fsdp != MG_FSDP_NONE ? fsdp_name(q->fsdp) : "");
    fprintf(f, "  step time            %.4f s\n", p->step_time_s);
    fprintf(f, "  model TFLOP/s/GPU    %.4g  (MFU %.1f%% of %g TFLOP/s; %.3g model FLOPs per step)\n", p->tflops_per_gpu,
            100 * p->mfu, c->peak_tflops[q->precision], p->model_flops);
    if (c->pipeline_serial && q->plan.pp > 1)
        fprintf(f, "  pipeline bubble      %.2f%%  (the stages take turns: each idles while the others work)\n",
                100 * p->bubble_fraction);
    else
        fprintf(f, "  pipeline bubble      %.2f%%  (fill and drain over M = %d micro-batches of the slowest stage, %d; "
                   "(pp-1)/(v*M) = %d/(%d*%d) when the stages are equal)\n",
                100 * p->bubble_fraction, p->n_micro, p->slowest_stage, q->plan.pp - 1, p->virtual_stages, p->n_micro);
    fprintf(f, "  per micro-batch      forward %.3f ms, backward %.3f ms, recompute %.3f ms, stage transfers %.3f ms "
               "(slowest stage, exposed)\n",
            1e3 * p->fwd_s, 1e3 * p->bwd_s, 1e3 * p->recompute_s, 1e3 * p->p2p_s);
    fprintf(f, "  step parts           pipeline %.4f s, optimizer %.4f s, exposed data-parallel comm %.4f s\n",
            p->pipeline_s, p->optimizer_s, p->dp_exposed_s);
    fprintf(f, "  memory per GPU       %.2f GiB of %g GiB%s, the most on %s: weights %.2f, gradients %.2f, optimizer "
               "%.2f, activations %.2f (%.3f GiB per micro-batch x %.2f in flight + recompute work), reserved %.2f\n",
            p->mem_total / GIB, c->hbm_gib, p->fits ? "" : " (DOES NOT FIT)", p->mem_stage_desc, p->mem_weights / GIB,
            p->mem_grads / GIB, p->mem_optimizer / GIB, p->mem_activations / GIB, p->activations_per_micro / GIB,
            p->inflight_micro, p->mem_reserved / GIB);
    if (p->n_stages > 1) {
        fprintf(f, "  memory per stage     GiB:");
        for (int s = 0; s < p->n_stages && s < MG_PLANNER_MAX_PP; s++) {
            if (p->n_stages > 16 && s == 8) {
                fprintf(f, " ...");
                s = p->n_stages - 8;
            }
            fprintf(f, " %.1f", p->stage_mem_gib[s]);
        }
        fprintf(f, "\n");
    }
    fprintf(f, "  communication per step on the slowest stage (per GPU; intra-node: NVLink, inter-node: the scale-out "
               "fabric):\n");
    fprintf(f, "    %-6s %5s %-10s %10s %10s %10s %10s  hidden behind\n", "group", "ranks", "link", "GB", "time s",
            "exposed s", "hidden s");
    for (size_t i = 0; i < N_SHOWN; i++) {
        const mg_group_cost *g = &p->group[shown[i]];
        if (g->ranks <= 1 && g->bytes == 0) continue;
        fprintf(f, "    %-6s %5d %-10s %10.3f %10.4f %10.4f %10.4f  %s\n", mg_group_name(shown[i]), g->ranks,
                g->inter_node ? "inter-node" : "intra-node", g->bytes / 1e9, g->time_s, g->exposed_s,
                g->time_s - g->exposed_s, hides_behind(q, shown[i]));
    }
    fprintf(f, "  priced from          a %d-layer probe's rank graph (%d nodes)%s\n", p->probe_layers, p->graph_nodes,
            p->probe_seq_scale < 1 ? " at a shorter sequence, scaled" : "");
    /* each layer kind's FLOPs per micro-batch on one rank (MoE kinds: the routed experts
     * at the balanced routing's share), and the layers it prices */
    for (int i = 0; i < p->n_kinds && i < MG_PREDICTION_MAX_KINDS; i++) {
        const mg_block_cost *b = &p->block_kind[i];
        if (!b->layers) continue;
        fprintf(f, "    layer kind %-2d %-5s %4d layer%s from %-4d %10.4g FLOPs per micro-batch (%.0f%% matrix, %.0f%% attention)\n",
                i, b->moe ? "MoE" : "dense", b->layers, b->layers == 1 ? " " : "s", b->first_layer, b->flops[0] + b->flops[1],
                100 * (b->gemm_flops[0] + b->gemm_flops[1]) / (b->flops[0] + b->flops[1] + 1e-300),
                100 * (b->attention_flops[0] + b->attention_flops[1]) / (b->flops[0] + b->flops[1] + 1e-300));
    }
    if (p->notes[0]) fprintf(f, "  notes: %s\n", p->notes);
}

/* A block's costs: forward and backward per micro-batch on one rank. */
static json_t *block_json(const mg_block_cost *b) {
    json_t *o = json_object();
    const char *dir[2] = {"forward", "backward"};
    for (int d = 0; d < 2; d++)
        json_object_set_new(o, dir[d],
                            json_pack("{s:f, s:f, s:f, s:f}", "flops", b->flops[d], "gemm_flops", b->gemm_flops[d],
                                      "attention_flops", b->attention_flops[d], "time_s", b->time_s[d]));
    json_object_set_new(o, "params", json_real(b->params));
    json_object_set_new(o, "expert_params", json_real(b->expert_params));
    return o;
}

void *mg_prediction_json(const mg_cluster *c, const mg_plan_query *q, const mg_prediction *p) {
    json_t *o = json_object();
    json_t *plan = json_pack("{s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:s, s:b, s:b, s:s, s:s}", "tp", q->plan.tp,
                             "pp", q->plan.pp, "virtual_stages", p->virtual_stages, "cp", q->plan.cp, "ep", q->plan.ep, "dp",
                             p->dp, "world_size", q->world, "micro_batch_size", q->micro_batch, "global_batch_size",
                             q->global_batch, "recompute", recompute_name(q), "sequence_parallel",
                             q->plan.sequence_parallel, "distributed_optimizer", q->plan.distributed_optimizer,
                             "precision", mg_precision_name(q->precision), "data_parallel_sharding", fsdp_name(q->fsdp));
    if (q->plan.pp_first_layers) json_object_set_new(plan, "decoder_first_pipeline_num_layers", json_integer(q->plan.pp_first_layers));
    if (q->plan.pp_last_layers) json_object_set_new(plan, "decoder_last_pipeline_num_layers", json_integer(q->plan.pp_last_layers));
    if (q->pp_layout) json_object_set_new(plan, "pipeline_model_parallel_layout", json_string(q->pp_layout));
    if (q->account_embedding) json_object_set_new(plan, "account_for_embedding_in_pipeline_split", json_true());
    if (q->account_loss) json_object_set_new(plan, "account_for_loss_in_pipeline_split", json_true());
    json_object_set_new(plan, "overlap_grad_reduce", json_boolean(q->overlap_grad_reduce));
    json_object_set_new(plan, "overlap_param_gather", json_boolean(q->overlap_param_gather));
    json_object_set_new(plan, "tp_comm_overlap", json_boolean(q->tp_comm_overlap));
    if (q->precision == MG_PREC_BF16)
        json_object_set_new(plan, "gradient_reduce_bits", json_integer(q->grads_16bit ? 16 : 32));
    json_object_set_new(o, "plan", plan);
    json_object_set_new(o, "cluster", json_string(c->name));
    json_object_set_new(o, "step_time_s", json_real(p->step_time_s));
    json_object_set_new(o, "tflops_per_gpu", json_real(p->tflops_per_gpu));
    json_object_set_new(o, "mfu", json_real(p->mfu));
    json_object_set_new(o, "bubble_fraction", json_real(p->bubble_fraction));
    json_object_set_new(o, "slowest_stage", json_integer(p->slowest_stage));
    json_object_set_new(o, "memory_per_gpu_gib", json_real(p->mem_total / GIB));
    json_object_set_new(o, "memory_stage", json_integer(p->mem_stage));
    json_object_set_new(o, "memory_stage_holds", json_string(p->mem_stage_desc));
    json_t *stages = json_array();
    for (int s = 0; s < p->n_stages && s < MG_PLANNER_MAX_PP; s++) json_array_append_new(stages, json_real(p->stage_mem_gib[s]));
    json_object_set_new(o, "memory_per_stage_gib", stages);
    json_object_set_new(o, "fits", json_boolean(p->fits));
    json_object_set_new(o, "model_flops_per_step", json_real(p->model_flops));
    json_object_set_new(o, "hw_flops_per_gpu_per_step", json_real(p->hw_flops_per_gpu));
    json_object_set_new(o, "micro_batches_per_pipeline", json_integer(p->n_micro));
    json_object_set_new(o, "time",
                        json_pack("{s:f, s:f, s:f, s:f, s:f, s:f, s:f}", "forward_per_micro_batch_s", p->fwd_s,
                                  "backward_per_micro_batch_s", p->bwd_s, "recompute_per_micro_batch_s", p->recompute_s,
                                  "stage_transfer_per_micro_batch_s", p->p2p_s, "pipeline_s", p->pipeline_s,
                                  "optimizer_s", p->optimizer_s, "dp_exposed_s", p->dp_exposed_s));
    json_object_set_new(o, "memory_gib",
                        json_pack("{s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f}", "weights", p->mem_weights / GIB, "gradients",
                                  p->mem_grads / GIB, "optimizer", p->mem_optimizer / GIB, "activations",
                                  p->mem_activations / GIB, "activations_per_micro_batch", p->activations_per_micro / GIB,
                                  "micro_batches_in_flight", p->inflight_micro, "reserved", p->mem_reserved / GIB,
                                  "capacity", c->hbm_gib));
    json_t *comm = json_object();
    for (size_t i = 0; i < N_SHOWN; i++) {
        const mg_group_cost *g = &p->group[shown[i]];
        if (g->ranks <= 1 && g->bytes == 0) continue;
        json_object_set_new(comm, mg_group_name(shown[i]),
                            json_pack("{s:i, s:s, s:f, s:f, s:f, s:f, s:s}", "ranks", g->ranks, "link",
                                      g->inter_node ? "inter_node" : "intra_node", "bytes", g->bytes, "time_s", g->time_s,
                                      "exposed_s", g->exposed_s, "hidden_s", g->time_s - g->exposed_s, "hidden_behind",
                                      hides_behind(q, shown[i])));
    }
    json_object_set_new(o, "communication", comm);
    json_object_set_new(o, "recompute_estimated", json_boolean(p->recompute_estimated));
    json_object_set_new(o, "graph_nodes", json_integer(p->graph_nodes));
    json_object_set_new(o, "probe_layers", json_integer(p->probe_layers));
    json_object_set_new(o, "probe_sequence_fraction", json_real(p->probe_seq_scale));
    /* what the probe's graph costs per micro-batch, block by block (the layer kinds with
     * how many layers each prices; the output block holds the multi-token prediction) */
    json_t *blocks = json_object(), *kinds = json_array();
    json_object_set_new(blocks, "embedding", block_json(&p->block_embedding));
    for (int i = 0; i < p->n_kinds && i < MG_PREDICTION_MAX_KINDS; i++) {
        json_t *b = block_json(&p->block_kind[i]);
        json_object_set_new(b, "moe", json_boolean(p->block_kind[i].moe));
        json_object_set_new(b, "layers", json_integer(p->block_kind[i].layers));
        if (p->block_kind[i].layers) json_object_set_new(b, "first_layer", json_integer(p->block_kind[i].first_layer));
        json_array_append_new(kinds, b);
    }
    json_object_set_new(blocks, "layer_kinds", kinds);
    json_object_set_new(blocks, "output", block_json(&p->block_output));
    json_object_set_new(o, "blocks_per_micro_batch", blocks);
    json_object_set_new(o, "notes", json_string(p->notes));
    return o;
}

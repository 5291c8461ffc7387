/* mg_plan_predict: the query's rules, then the probe's cost table, the pipeline layout
 * and the schedule (include/mgraph/planner.h for the model). */
#include <stdlib.h>
#include <string.h>

#include "planner/planner_internal.h"

void mg_plan_query_defaults(mg_plan_query *q) {
    memset(q, 0, sizeof *q);
    q->model = mg_gpt_defaults();
    mg_plan_defaults(&q->plan);
    q->micro_batch = q->global_batch = q->world = 1;
    q->virtual_stages = 1;
    q->overlap_p2p = true;
    q->precision = MG_PREC_BF16;
}

double mg_plan_model_flops(const mg_plan_query *q) {
    mg_gpt_config m = q->model;
    if (!m.moe.shared_ffn && q->moe_shared_ffn > 0) m.moe.shared_ffn = q->moe_shared_ffn;
    return mg_gpt_flops(&m, q->global_batch);
}

/* Bounds that keep the planner's work and arithmetic small whatever it is asked: far
 * above any model trained (Megatron's largest published: 128 layers, h 25,600, 3,072
 * GPUs; Llama 3: 131,072 tokens on 16,384 GPUs). */
#define MAX_LAYERS 16384
#define MAX_HIDDEN (1 << 20)
#define MAX_SEQ (1 << 24)
#define MAX_WORLD (1 << 22)
#define MAX_BATCH (1 << 26)

int mg_planner_check_bounds(const mg_plan_query *q, mg_error *err) {
    const mg_gpt_config *m = &q->model;
    if (q->world < 1 || q->world > MAX_WORLD)
        return mg_error_set(err, MG_ERR_INVALID, "world size must be in 1..%d (got %d)", MAX_WORLD, q->world);
    if (m->num_layers < 1 || m->num_layers > MAX_LAYERS)
        return mg_error_set(err, MG_ERR_INVALID, "--num-layers must be in 1..%d for the planner (got %d)", MAX_LAYERS,
                            m->num_layers);
    if (m->hidden < 1 || m->hidden > MAX_HIDDEN || m->ffn_hidden < 1 || m->ffn_hidden > 8 * MAX_HIDDEN)
        return mg_error_set(err, MG_ERR_INVALID, "--hidden-size must be in 1..%d and --ffn-hidden-size in 1..%d (got %d, %d)",
                            MAX_HIDDEN, 8 * MAX_HIDDEN, m->hidden, m->ffn_hidden);
    if (m->seq_length < 1 || m->seq_length > MAX_SEQ)
        return mg_error_set(err, MG_ERR_INVALID, "--seq-length must be in 1..%d (got %d)", MAX_SEQ, m->seq_length);
    if (m->vocab < 1 || m->vocab > (int64_t)1 << 26)
        return mg_error_set(err, MG_ERR_INVALID, "the vocabulary must be in 1..%d (got %lld)", 1 << 26, (long long)m->vocab);
    if (q->micro_batch < 1 || q->global_batch < 1 || q->micro_batch > MAX_BATCH || q->global_batch > MAX_BATCH)
        return mg_error_set(err, MG_ERR_INVALID, "micro-batch and global batch sizes must be in 1..%d", MAX_BATCH);
    return MG_OK;
}

int mg_planner_check(const mg_cluster *c, const mg_plan_query *q, mg_error *err) {
    const mg_plan *p = &q->plan;
    const mg_gpt_config *m = &q->model;
    int rc = mg_planner_check_bounds(q, err);
    if (rc) return rc;
    if (q->virtual_stages < 1) return mg_error_set(err, MG_ERR_INVALID, "virtual stages must be >= 1");
    if (p->pp < 1 || p->tp < 1 || p->cp < 1 || p->ep < 1)
        return mg_error_set(err, MG_ERR_INVALID, "parallel sizes must be >= 1");
    if (p->pp > MG_PLANNER_MAX_PP || p->pp > m->num_layers + 2)
        return mg_error_set(err, MG_ERR_INVALID, "--pipeline-model-parallel-size %d: at most %d and the layers + 2", p->pp,
                            MG_PLANNER_MAX_PP);
    long inner = (long)p->tp * p->pp * p->cp;
    if (inner > q->world || q->world % inner)
        return mg_error_set(err, MG_ERR_INVALID,
                            "world size %d is not a multiple of tensor x pipeline x context parallel sizes (%d x %d x %d)",
                            q->world, p->tp, p->pp, p->cp);
    int dp = (int)(q->world / inner);
    if (p->ep > 1) {
        if (m->moe.num_experts <= 0)
            return mg_error_set(err, MG_ERR_INVALID, "--expert-model-parallel-size %d needs --num-experts", p->ep);
        if (((long)dp * p->cp) % p->ep || m->moe.num_experts % p->ep)
            return mg_error_set(err, MG_ERR_INVALID,
                                "--expert-model-parallel-size %d must divide data x context parallel size (%d x %d) and "
                                "--num-experts %d",
                                p->ep, dp, p->cp, m->moe.num_experts);
    }
    if ((int64_t)q->global_batch % ((int64_t)q->micro_batch * dp))
        return mg_error_set(err, MG_ERR_INVALID,
                            "--global-batch-size %d is not a multiple of --micro-batch-size x data-parallel size (%d x %d)",
                            q->global_batch, q->micro_batch, dp);
    if (c->max_nodes > 0 && (int64_t)q->world > (int64_t)c->max_nodes * c->gpus_per_node)
        return mg_error_set(err, MG_ERR_INVALID, "%d GPUs do not fit in cluster %s (%d nodes of %d)", q->world, c->name,
                            c->max_nodes, c->gpus_per_node);
    return MG_OK;
}

int mg_plan_predict(const mg_cluster *c, const mg_plan_query *q, mg_prediction *out, mg_error *err) {
    memset(out, 0, sizeof *out);
    int rc = mg_planner_check(c, q, err);
    if (rc) return rc;
    mg_planner_layout_t lay;
    rc = mg_planner_layout(q, &lay, err);
    if (rc) return rc;
    const mg_plan *p = &q->plan;
    out->dp = q->world / (p->tp * p->pp * p->cp);
    out->n_micro = q->global_batch / (q->micro_batch * out->dp);
    int M = out->n_micro, pp = lay.pp, v = lay.vp;
    /* Megatron's interleaved schedule: M a multiple of pp (or at least pp more) */
    if (v > 1 && M % pp) {
        mg_planner_layout_free(&lay);
        return mg_error_set(err, MG_ERR_INVALID,
                            "interleaved schedule: %d micro-batches per pipeline must be a multiple of the pipeline size %d",
                            M, pp);
    }
    mg_planner_costs_t *k = malloc(sizeof *k);
    if (!k) {
        mg_planner_layout_free(&lay);
        return mg_error_set(err, MG_ERR_NOMEM, "planner: out of memory");
    }
    rc = mg_planner_probe(c, q, k, err);
    if (!rc) rc = mg_planner_schedule(c, q, k, &lay, out, err);
    free(k);
    mg_planner_layout_free(&lay);
    return rc;
}

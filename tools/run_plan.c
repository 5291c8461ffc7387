/* The planner from mgraph-run's configuration: the query mgraph-plan prices, and
 * mgraph-run --plan auto's choice. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mgraph/tokenizer.h"
#include "run_plan.h"

/* The plan: defaults, the plan file ("auto" is none), then the flags given (as
 * mgraph-run resolves it). */
static int plan_of(const mg_run_config *c, mg_plan *p, mg_error *err) {
    mg_plan_defaults(p);
    if (c->plan_file && strcmp(c->plan_file, "auto")) {
        int rc = mg_plan_read(p, c->plan_file, err);
        if (rc) return rc;
    }
    const char *names[] = {"--tensor-model-parallel-size", "--pipeline-model-parallel-size", "--context-parallel-size",
                           "--expert-model-parallel-size"};
    int given[] = {c->tensor_model_parallel_size, c->pipeline_model_parallel_size, c->context_parallel_size,
                   c->expert_model_parallel_size};
    int *dst[] = {&p->tp, &p->pp, &p->cp, &p->ep};
    for (int i = 0; i < 4; i++) {
        if (!mg_run_config_given(c, names[i])) continue;
        if (given[i] < 1 || given[i] > 1 << 20)
            return mg_error_set(err, MG_ERR_INVALID, "%s must be in 1..%d (got %d)", names[i], 1 << 20, given[i]);
        *dst[i] = given[i];
    }
    /* Megatron's uneven pipeline: layers on the first / last stage, an equal share between */
    int rc = mg_run_config_uneven_pipeline(c, p, err);
    if (rc) return rc;
    if (c->sequence_parallel) p->sequence_parallel = true;
    if (p->tp == 1) p->sequence_parallel = false; /* Megatron disables it with a warning */
    if (c->use_distributed_optimizer) p->distributed_optimizer = true;
    return MG_OK;
}

static int recompute_of(const mg_run_config *c, mg_plan_query *q, mg_error *err) {
    q->recompute = MG_RECOMPUTE_NONE;
    if (!c->recompute_granularity) return MG_OK;
    if (strcmp(c->recompute_granularity, "full")) {
        q->recompute = MG_RECOMPUTE_SELECTIVE;
        return MG_OK;
    }
    q->recompute = MG_RECOMPUTE_FULL;
    if (!c->recompute_method)
        return mg_error_set(err, MG_ERR_INVALID, "--recompute-granularity full needs --recompute-method uniform or block");
    if (!mg_run_config_given(c, "--recompute-num-layers"))
        return mg_error_set(err, MG_ERR_INVALID, "--recompute-granularity full needs --recompute-num-layers");
    q->recompute_method = strcmp(c->recompute_method, "block") ? MG_RECOMPUTE_UNIFORM : MG_RECOMPUTE_BLOCK;
    if (c->recompute_num_layers < 1 || c->recompute_num_layers > c->num_layers)
        return mg_error_set(err, MG_ERR_INVALID, "--recompute-num-layers must be in 1..%d (the layers), got %d",
                            c->num_layers, c->recompute_num_layers);
    q->recompute_num_layers = c->recompute_num_layers;
    return MG_OK;
}

int mg_run_plan_vocab(const mg_run_config *c, int64_t *vocab, mg_error *err) {
    mg_tokenizer_config tc = mg_run_tokenizer_config(c);
    mg_tokenizer *tok = NULL;
    int rc = mg_tokenizer_open(&tc, &tok, err);
    if (rc) return rc;
    *vocab = mg_tokenizer_vocab_size(tok);
    mg_tokenizer_free(tok);
    return MG_OK;
}

int mg_run_plan_query(const mg_run_config *c, const mg_cluster *cl, int world, int64_t vocab, mg_plan_query *q,
                      mg_error *err) {
    mg_plan_query_defaults(q);
    int rc = plan_of(c, &q->plan, err);
    if (!rc) rc = recompute_of(c, q, err);
    if (!rc) rc = mg_run_config_model(c, &q->model, err);
    if (rc) return rc;
    q->model.vocab = mg_vocab_padded(vocab, c->make_vocab_size_divisible_by, q->plan.tp);
    q->micro_batch = c->micro_batch_size;
    int inner = q->plan.tp * q->plan.pp * q->plan.cp;
    q->world = world > 0 ? world : inner;
    int dp = q->world % inner ? 1 : q->world / inner;
    q->global_batch = c->global_batch_size > 0 ? c->global_batch_size : c->micro_batch_size * dp;
    q->virtual_stages = 1;
    bool by_layers = mg_run_config_given(c, "--num-layers-per-virtual-pipeline-stage"),
         by_stages = mg_run_config_given(c, "--num-virtual-stages-per-pipeline-rank");
    if (by_layers && by_stages)
        return mg_error_set(err, MG_ERR_INVALID,
                            "give --num-layers-per-virtual-pipeline-stage or --num-virtual-stages-per-pipeline-rank, not both");
    if (by_stages && q->plan.pp > 1) q->virtual_stages = c->num_virtual_stages_per_pipeline_rank;
    if (by_layers && q->plan.pp > 1) {
        int lv = c->num_layers_per_virtual_pipeline_stage, per_rank = c->num_layers / q->plan.pp;
        if (lv < 1 || per_rank % lv)
            return mg_error_set(err, MG_ERR_INVALID,
                                "--num-layers-per-virtual-pipeline-stage %d must divide the layers per pipeline rank (%d)",
                                lv, per_rank);
        q->virtual_stages = per_rank / lv;
    }
    q->overlap_grad_reduce = c->overlap_grad_reduce;
    q->precision = cl ? cl->precision : MG_PREC_FP32;
    return MG_OK;
}

int mg_run_plan_auto(mg_run_config *c, int world, FILE *log, mg_error *err) {
    if (!c->cluster)
        return mg_error_set(err, MG_ERR_INVALID,
                            "--plan auto needs --cluster: a preset (%s) or a cluster file (planner/clusters/)",
                            mg_cluster_preset_names());
    if (c->global_batch_size <= 0)
        return mg_error_set(err, MG_ERR_INVALID, "--plan auto needs --global-batch-size (plans are compared at one batch)");
    mg_cluster cl;
    int rc = mg_cluster_load(c->cluster, &cl, err);
    if (rc) return rc;
    int64_t vocab;
    rc = mg_run_plan_vocab(c, &vocab, err);
    if (rc) return rc;
    mg_plan_query q;
    rc = mg_run_plan_query(c, &cl, world, vocab, &q, err);
    if (rc) return rc;
    /* what the command line gives is kept; the planner chooses the rest */
    mg_search_options so = {.world = world, .top = 64, .max_micro_batch = 64, .fixed_recompute = true};
    so.fixed_tp = mg_run_config_given(c, "--tensor-model-parallel-size");
    so.fixed_pp = mg_run_config_given(c, "--pipeline-model-parallel-size");
    so.fixed_cp = mg_run_config_given(c, "--context-parallel-size");
    so.fixed_mbs = mg_run_config_given(c, "--micro-batch-size");
    so.fixed_vp = mg_run_config_given(c, "--num-layers-per-virtual-pipeline-stage") ||
                  mg_run_config_given(c, "--num-virtual-stages-per-pipeline-rank");
    mg_search_result *res = calloc((size_t)so.top, sizeof *res);
    if (!res) return mg_error_set(err, MG_ERR_NOMEM, "--plan auto: out of memory");
    int n, tried, dropped, refused;
    rc = mg_plan_search(&cl, &q, &so, res, &n, &tried, &dropped, &refused, err);
    /* the fastest plan that fits which this build runs (the planner prices some
     * combinations the partitioner does not build yet) */
    int pick = -1;
    for (int i = 0; !rc && i < n && pick < 0; i++) {
        const mg_plan_query *r = &res[i].q;
        mg_plan p = r->plan;
        p.vpp = r->virtual_stages;
        mg_plan_model pm = {.hidden = r->model.hidden,
                            .heads = r->model.heads,
                            .ffn_hidden = r->model.ffn_hidden,
                            .seq_length = r->model.seq_length,
                            .vocab = r->model.vocab,
                            .global_batch = r->global_batch,
                            .micro_batch = r->micro_batch,
                            .query_groups = mg_gpt_kv_groups(&r->model),
                            .num_layers = r->model.num_layers};
        mg_error e = {0};
        if (!mg_plan_check_model(&p, world, &pm, &e)) pick = i;
    }
    if (!rc && pick < 0)
        rc = mg_error_set(err, MG_ERR_INVALID,
                          "--plan auto: no plan for %d ranks fits %s's memory and is built by this mgraph (%d plans "
                          "priced, %d out of memory)",
                          world, cl.name, tried, dropped);
    if (!rc) {
        const mg_search_result *b = &res[pick];
        mg_run_config_set_int(c, "--tensor-model-parallel-size", b->q.plan.tp);
        mg_run_config_set_int(c, "--pipeline-model-parallel-size", b->q.plan.pp);
        mg_run_config_set_int(c, "--context-parallel-size", b->q.plan.cp);
        mg_run_config_set_int(c, "--expert-model-parallel-size", b->q.plan.ep);
        mg_run_config_set_int(c, "--micro-batch-size", b->q.micro_batch);
        if (!so.fixed_vp && b->q.virtual_stages > 1)
            mg_run_config_set_int(c, "--num-virtual-stages-per-pipeline-rank", b->q.virtual_stages);
        if (log) {
            fprintf(log,
                    "mgraph-run: --plan auto on %s: tp %d, pp %d%s, cp %d, ep %d, dp %d, micro-batch %d (predicted %.4f s a "
                    "step, %.2f GiB, the fastest of %d plans priced that fits and this build runs",
                    cl.name, b->q.plan.tp, b->q.plan.pp, b->q.virtual_stages > 1 ? " (virtual stages)" : "", b->q.plan.cp,
                    b->q.plan.ep, b->p.dp, b->q.micro_batch, b->p.step_time_s, b->p.mem_total / 1073741824.0, tried);
            if (pick + 1 < n)
                fprintf(log, "; next: tp %d pp %d cp %d micro-batch %d, %.4f s", res[pick + 1].q.plan.tp,
                        res[pick + 1].q.plan.pp, res[pick + 1].q.plan.cp, res[pick + 1].q.micro_batch,
                        res[pick + 1].p.step_time_s);
            fprintf(log, ")\n");
            fflush(log);
        }
        c->plan_file = NULL;
    }
    free(res);
    return rc;
}

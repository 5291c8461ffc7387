/* mg_plan_search: enumerate plans for a world size, predict each, keep the fastest that
 * fit. One rank graph is built and walked per (tp, pp, cp, ep, micro-batch); recompute
 * settings and virtual stages reuse that walk (they are applied on top of it). */
#include <stdlib.h>
#include <string.h>

#include "planner/planner_internal.h"

static void keep(mg_search_result *res, int *n, int top, const mg_plan_query *q, const mg_prediction *p) {
    int pos = *n;
    while (pos > 0 && res[pos - 1].p.step_time_s > p->step_time_s) pos--;
    if (pos >= top) return;
    int last = *n < top ? *n : top - 1;
    memmove(res + pos + 1, res + pos, (size_t)(last - pos) * sizeof *res);
    res[pos].q = *q;
    res[pos].p = *p;
    if (*n < top) (*n)++;
}

int mg_plan_search(const mg_cluster *c, const mg_plan_query *base, const mg_search_options *opt,
                   mg_search_result *res, int *n, int *tried, int *dropped_memory, int *refused, mg_error *err) {
    *n = *tried = *dropped_memory = *refused = 0;
    int world = opt->world, L = base->model.num_layers, top = opt->top > 0 ? opt->top : 1;
    if (world < 1) return mg_error_set(err, MG_ERR_INVALID, "--search needs --world-size >= 1");
    int max_mbs = opt->max_micro_batch > 0 ? opt->max_micro_batch : 8;
    bool moe = base->model.moe.num_experts > 0;
    /* an uneven pipeline (first / last stage's layers) is kept at the query's pp; other
     * pipeline sizes split the layers equally */
    bool uneven = base->plan.pp_first_layers || base->plan.pp_last_layers;
    for (int tp = 1; tp <= world; tp *= 2) {
        if (opt->fixed_tp && tp != base->plan.tp) continue;
        if (!opt->fixed_tp && tp > c->gpus_per_node) break; /* Megatron keeps tp inside a node */
        if (world % tp || base->model.heads % tp) continue;
        for (int pp = 1; pp <= L && tp * pp <= world; pp++) {
            if (opt->fixed_pp && pp != base->plan.pp) continue;
            bool split = uneven && pp == base->plan.pp;
            if ((!split && L % pp) || world % (tp * pp)) continue;
            for (int cp = 1; tp * pp * cp <= world; cp *= 2) {
                if (opt->fixed_cp && cp != base->plan.cp) continue;
                if (world % (tp * pp * cp) || (cp > 1 && base->model.seq_length % (2 * cp))) continue;
                int dp = world / (tp * pp * cp);
                for (int ep = 1; ep <= dp * cp; ep *= 2) {
                    if (ep > 1 && (!moe || (dp * cp) % ep || base->model.moe.num_experts % ep)) continue;
                    for (int mbs = 1; mbs <= max_mbs; mbs *= 2) {
                        if (opt->fixed_mbs && mbs != base->micro_batch) continue;
                        if (base->global_batch % (mbs * dp)) continue;
                        /* weights and main gradients alone (2 + 4 bytes in mixed precision,
                         * 4 + 4 in fp32) of a rank's 1/(tp pp) of the layers: a lower bound of its
                         * memory; over it, the plan cannot fit whatever else is chosen */
                        double floor_b = (double)mg_gpt_num_params(&base->model) / ((double)tp * pp) *
                                         (base->precision == MG_PREC_BF16 ? 6 : 8);
                        if (floor_b > c->hbm_gib * 1073741824.0) {
                            (*tried)++;
                            (*dropped_memory)++;
                            continue;
                        }
                        mg_plan_query q = *base;
                        q.world = world;
                        q.plan.tp = tp;
                        q.plan.pp = pp;
                        q.plan.cp = cp;
                        q.plan.ep = ep;
                        if (!split) q.plan.pp_first_layers = q.plan.pp_last_layers = 0;
                        q.plan.sequence_parallel = base->plan.sequence_parallel && tp > 1;
                        q.micro_batch = mbs;
                        q.virtual_stages = 1;
                        q.recompute = MG_RECOMPUTE_NONE;
                        mg_planner_built_t b;
                        mg_prediction pr;
                        mg_error e = {0};
                        int rc = mg_planner_prepare(c, &q, &b, &pr, &e);
                        if (rc) {
                            (*refused)++;
                            if (rc == MG_ERR_NOMEM) return mg_error_set(err, rc, "%s", e.msg);
                            continue;
                        }
                        int M = pr.n_micro;
                        for (int v = 1; v <= L / pp && v <= 8; v++) {
                            if (opt->fixed_vp && v != base->virtual_stages) continue;
                            if (split && v > 1) continue;
                            if (v > 1 && (pp < 2 || (L / pp) % v || (M % pp && M % pp < pp))) continue;
                            for (int r = 0; r < 2; r++) {
                                mg_plan_query qr = q;
                                qr.virtual_stages = v;
                                if (opt->fixed_recompute) {
                                    if (r) continue;
                                    qr.recompute = base->recompute;
                                    qr.recompute_method = base->recompute_method;
                                    qr.recompute_num_layers = base->recompute_num_layers;
                                } else {
                                    qr.recompute = r ? MG_RECOMPUTE_FULL : MG_RECOMPUTE_NONE;
                                    qr.recompute_method = MG_RECOMPUTE_UNIFORM;
                                    qr.recompute_num_layers = 1;
                                }
                                mg_prediction pv = pr;
                                (*tried)++;
                                mg_planner_finish(c, &qr, &b.built, b.pp_estimated, b.stage_layers, &b.walk, &pv, &e);
                                if (!pv.fits) {
                                    (*dropped_memory)++;
                                    continue;
                                }
                                keep(res, n, top, &qr, &pv);
                            }
                        }
                        mg_planner_walk_free(&b.walk);
                    }
                }
            }
        }
    }
    return MG_OK;
}

/* mg_plan_search: enumerate plans for a world size, predict each, keep the fastest that
 * fit. The probe (a rank graph of one layer per kind) depends on tp, cp, ep and the
 * micro-batch only, so it is built once for each of those and every pipeline size,
 * split, virtual-stage count and recompute setting is scheduled from its table: the
 * work grows with the number of (tp, cp, ep, micro-batch) choices, a few dozen
 * whatever the world size, times the pipeline splits the layers allow. */
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

/* Context-parallel sizes beyond this are not searched (Llama 3's longest: 16). */
#define SEARCH_MAX_CP 64

int mg_plan_search(const mg_cluster *c, const mg_plan_query *base, const mg_search_options *opt,
                   mg_search_result *res, int *n, int *tried, int *dropped_memory, int *refused, mg_error *err) {
    *n = *tried = *dropped_memory = *refused = 0;
    int world = opt->world, L = base->model.num_layers, top = opt->top > 0 ? opt->top : 1;
    if (world < 1) return mg_error_set(err, MG_ERR_INVALID, "--search needs --world-size >= 1");
    int max_mbs = opt->max_micro_batch > 0 ? opt->max_micro_batch : 8;
    bool moe = base->model.moe.num_experts > 0;
    /* the query's own split (uneven stages, a layout, the account-for flags) is kept at
     * its pipeline size; other sizes split the layers equally */
    bool own_split = base->plan.pp_first_layers || base->plan.pp_last_layers || base->pp_layout || base->account_embedding ||
                     base->account_loss;
    mg_plan_query bq = *base;
    bq.world = world;
    int rc0 = mg_planner_check_bounds(&bq, err);
    if (rc0) return rc0;
    if (c->max_nodes > 0 && (int64_t)world > (int64_t)c->max_nodes * c->gpus_per_node)
        return mg_error_set(err, MG_ERR_INVALID, "%d GPUs do not fit in cluster %s (%d nodes of %d)", world, c->name,
                            c->max_nodes, c->gpus_per_node);
    mg_planner_costs_t *k = malloc(sizeof *k);
    if (!k) return mg_error_set(err, MG_ERR_NOMEM, "planner: out of memory");
    for (int tp = 1; tp <= world; tp *= 2) {
        if (opt->fixed_tp && tp != base->plan.tp) continue;
        if (!opt->fixed_tp && tp > c->gpus_per_node) break; /* Megatron keeps tp inside a node */
        if (world % tp || base->model.heads % tp) continue;
        for (int cp = 1; (long)tp * cp <= world && cp <= SEARCH_MAX_CP; cp *= 2) {
            if (opt->fixed_cp && cp != base->plan.cp) continue;
            if (world % (tp * cp) || (cp > 1 && base->model.seq_length % (2 * cp))) continue;
            for (int ep = 1; ep <= (moe ? base->model.moe.num_experts : 1); ep *= 2) {
                if (ep > 1 && base->model.moe.num_experts % ep) continue;
                for (int mbs = 1; mbs <= max_mbs; mbs *= 2) {
                    if (opt->fixed_mbs && mbs != base->micro_batch) continue;
                    if (base->global_batch % mbs) continue;
                    mg_plan_query q = *base;
                    q.world = world;
                    q.plan.tp = tp;
                    q.plan.cp = cp;
                    q.plan.ep = ep;
                    q.plan.sequence_parallel = base->plan.sequence_parallel && tp > 1;
                    q.micro_batch = mbs;
                    mg_error e = {0};
                    int rc = mg_planner_probe(c, &q, k, &e);
                    if (rc) {
                        (*refused)++;
                        if (rc == MG_ERR_NOMEM) {
                            free(k);
                            return mg_error_set(err, rc, "%s", e.msg);
                        }
                        continue;
                    }
                    for (int pp = 1; pp <= L + 2 && pp <= MG_PLANNER_MAX_PP && (long)tp * cp * pp <= world; pp++) {
                        if (opt->fixed_pp && pp != base->plan.pp) continue;
                        if (world % (tp * cp * pp)) continue;
                        bool split = own_split && pp == base->plan.pp;
                        if (!split && L % pp) continue;
                        int dp = world / (tp * cp * pp);
                        if (base->global_batch % (mbs * dp) || (ep > 1 && ((long)dp * cp) % ep)) continue;
                        q.plan.pp = pp;
                        if (!split) {
                            q.plan.pp_first_layers = q.plan.pp_last_layers = 0;
                            q.pp_layout = NULL;
                            q.account_embedding = q.account_loss = false;
                        } else {
                            q.plan.pp_first_layers = base->plan.pp_first_layers;
                            q.plan.pp_last_layers = base->plan.pp_last_layers;
                            q.pp_layout = base->pp_layout;
                            q.account_embedding = base->account_embedding;
                            q.account_loss = base->account_loss;
                        }
                        int M = base->global_batch / (mbs * dp);
                        for (int v = 1; v <= 8 && v <= L; v++) {
                            if (opt->fixed_vp && v != base->virtual_stages) continue;
                            if (split && base->pp_layout && v > 1) continue; /* the layout says its chunks */
                            if (v > 1 && (pp < 2 || M % pp)) continue;
                            q.virtual_stages = v;
                            mg_planner_layout_t lay;
                            if (mg_planner_layout(&q, &lay, &e)) {
                                mg_error_clear(&e);
                                continue;
                            }
                            for (int r = 0; r < 3; r++) {
                                mg_plan_query qr = q;
                                if (opt->fixed_recompute) {
                                    if (r) continue;
                                    qr.recompute = base->recompute;
                                    qr.recompute_method = base->recompute_method;
                                    qr.recompute_num_layers = base->recompute_num_layers;
                                } else {
                                    /* selective recompute saves memory only with unfused attention */
                                    if (r == 1 && !base->attention_unfused) continue;
                                    qr.recompute = r == 0 ? MG_RECOMPUTE_NONE : r == 1 ? MG_RECOMPUTE_SELECTIVE : MG_RECOMPUTE_FULL;
                                    qr.recompute_method = MG_RECOMPUTE_UNIFORM;
                                    qr.recompute_num_layers = 1;
                                }
                                mg_prediction pv;
                                memset(&pv, 0, sizeof pv);
                                pv.dp = dp;
                                pv.n_micro = M;
                                (*tried)++;
                                if (mg_planner_schedule(c, &qr, k, &lay, &pv, &e)) {
                                    mg_error_clear(&e);
                                    (*refused)++;
                                    continue;
                                }
                                if (!pv.fits) {
                                    (*dropped_memory)++;
                                    continue;
                                }
                                keep(res, n, top, &qr, &pv);
                            }
                            mg_planner_layout_free(&lay);
                        }
                    }
                }
            }
        }
    }
    free(k);
    return MG_OK;
}

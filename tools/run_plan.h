/* The planner from mgraph-run's configuration (tools/run_plan.c): the query mgraph-plan
 * prices, and mgraph-run --plan auto's choice. */
#ifndef MG_TOOLS_RUN_PLAN_H
#define MG_TOOLS_RUN_PLAN_H

#include <stdio.h>

#include "mgraph/planner.h"
#include "run_config.h"

/* The tokenizer's vocabulary size (before padding). */
int mg_run_plan_vocab(const mg_run_config *c, int64_t *vocab, mg_error *err);
/* The query of a configuration on `world` ranks (0: tp x pp x cp), its vocabulary padded
 * for its tp, in the cluster's precision (fp32 without a cluster). */
int mg_run_plan_query(const mg_run_config *c, const mg_cluster *cl, int world, int64_t vocab, mg_plan_query *q,
                      mg_error *err);
/* --plan auto: the planner's fastest plan for the model on `world` ranks of --cluster that
 * fits and this build runs; its tp, pp, cp, ep, virtual stages and micro-batch are set
 * in c as if given (those given already are kept), the choice logged to `log` (NULL:
 * silent). Usage errors (no --cluster, no --global-batch-size, nothing fits) are
 * MG_ERR_INVALID. */
int mg_run_plan_auto(mg_run_config *c, int world, FILE *log, mg_error *err);

#endif

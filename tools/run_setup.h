/* mgraph-run's setup from its flags: the plan, the limits the flags must keep, the GPT
 * model's step configuration and its data (tokenizer and dataset). */
#ifndef MG_TOOLS_RUN_SETUP_H
#define MG_TOOLS_RUN_SETUP_H

#include "mgraph/dataset.h"
#include "mgraph/model.h"
#include "mgraph/plan.h"
#include "mgraph/tokenizer.h"
#include "run_config.h"

/* The plan: defaults, then the plan file, then the flags that were given, checked for
 * `world` ranks (mg_plan_check). Warnings (a flag without effect) are printed by rank 0. */
int mg_run_resolve_plan(mg_run_config *c, int world, int rank, mg_plan *p, mg_error *err);
/* Bounds the Megatron checks (mg_run_config_check) do not make: every problem to n. */
void mg_run_check_limits(const mg_run_config *c, mg_run_notes *n);
/* --bf16: the matrix products' precision, refused by name where the CPU has no kernel. */
void mg_run_apply_bf16(mg_run_notes *notes);
/* The step configuration from the checked flags; dp the data-parallel size (the default
 * global batch). Sets --train-iters from --train-samples. */
int mg_run_resolve_step(mg_run_config *c, int dp, mg_step_config *sc, mg_error *err);
/* Expert parallelism's model rules: experts to split, evenly. */
int mg_run_check_expert_parallel(const mg_run_config *c, const mg_plan *p, const mg_gpt_config *m, mg_error *err);
/* The tokenizer and the dataset the flags name; sets sc->model.vocab (padded for tp). */
int mg_run_open_data(mg_run_config *c, int tp, mg_step_config *sc, mg_tokenizer **tok, mg_dataset **data, mg_error *err);

#endif

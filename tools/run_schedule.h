/* mgraph-run's learning-rate schedule from Megatron's flags (training.py's
 * get_optimizer_param_scheduler). */
#ifndef MG_TOOLS_RUN_SCHEDULE_H
#define MG_TOOLS_RUN_SCHEDULE_H

#include "mgraph/graph.h"
#include "run_config.h"

/* Fills s in samples, as Megatron's scheduler counts: iteration-based flags are
 * multiplied by the global batch size (which must be resolved), sample-based ones
 * taken as they are, --lr-warmup-fraction of the decay span. With --train-samples,
 * sets c->train_iters to train_samples / global batch (Megatron's update_train_iters).
 * MG_ERR_INVALID naming the flags when Megatron's scheduler would refuse them. */
int mg_run_lr_schedule(mg_run_config *c, mg_lr_schedule *s, mg_error *err);

#endif

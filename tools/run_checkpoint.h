/* mgraph-run's checkpoints: the GPT model's flags in the metadata of every --save, and
 * checked against this run's on --load (MG_ERR_INVALID naming the flag). Saving,
 * loading and resharding the state, the run's position and the learning-rate schedule
 * are the trainer's (mgraph/trainer.h, runtime/checkpoint.c). */
#ifndef MG_TOOLS_RUN_CHECKPOINT_H
#define MG_TOOLS_RUN_CHECKPOINT_H

#include "mgraph/model.h"
#include "run_config.h"

typedef struct mg_run_ckpt_model {
    const mg_run_config *cfg;
    const mg_gpt_config *model;
    int64_t vocab_unpadded;
} mg_run_ckpt_model;

/* The trainer's cfg.ckpt.meta and cfg.ckpt.check, user a mg_run_ckpt_model. */
char *mg_run_ckpt_meta(void *user);
int mg_run_ckpt_check(void *user, const char *meta_json, const char *dir, mg_error *err);

#endif

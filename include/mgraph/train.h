/* Training rewrites: autodiff and the optimizer step, both as graph construction. */
#ifndef MGRAPH_TRAIN_H
#define MGRAPH_TRAIN_H

#include "mgraph/graph.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Appends the backward pass of scalar `loss` ([1]) to g. Only nodes on a path from a
 * tensor with requires_grad to the loss are differentiated; a tensor used several
 * times gets the sum of its gradients (in reverse topological order, deterministic).
 * Afterwards t->grad is set for every requires_grad tensor that reaches the loss,
 * named "<name>.grad". Backward nodes inherit the scope and micro-batch of the
 * forward node they differentiate. */
int mg_graph_backward(mg_graph *g, mg_tensor *loss, mg_error *err);

typedef struct mg_adamw_config {
    float beta1, beta2, eps, weight_decay;
    float clip_grad;             /* global-norm clipping threshold; <= 0 disables */
    mg_lr_schedule lr;
    bool params_norm;            /* also compute the parameters' L2 norm after the step (Megatron's --log-params-norm) */
    /* also count the gradients' elements equal to zero, over the gradients the optimizer
     * sees (Megatron's --log-num-zeros-in-grad, count_zeros_fp32) */
    bool num_zeros;
    /* Megatron's --decoupled-lr / --decoupled-min-lr: parameters marked
     * embedding_or_output follow lr's schedule between these two rates instead */
    bool decoupled;
    float decoupled_lr, decoupled_min_lr;
} mg_adamw_config;

/* Megatron's defaults: betas 0.9/0.999, eps 1e-8, weight decay 0.01, clip 1.0. */
mg_adamw_config mg_adamw_defaults(void);

typedef struct mg_optimizer_outputs {
    mg_tensor *lr;               /* [1] learning rate used this step */
    mg_tensor *grad_norm;        /* [1] global gradient norm before clipping */
    mg_tensor *params_norm;      /* [1] L2 norm of every parameter after the step (cfg.params_norm), else NULL */
    mg_tensor *num_zeros;        /* [1] zero elements of every gradient before clipping (cfg.num_zeros), else NULL;
                                  * an f32 count, exact below 2^24 */
} mg_optimizer_outputs;

/* Appends the optimizer step for every parameter with a gradient: the global gradient
 * norm (sum of squares of all gradients), the clipping coefficient, the learning rate
 * of this iteration (a second one for the embedding and output layers with
 * cfg.decoupled), and one AdamW node per parameter that writes the parameter and
 * its two moments in place (decoupled weight decay: weight_decay, or cfg.lr's
 * weight-decay schedule when its wd_style is not constant; bias correction; no decay on
 * tensors marked no_weight_decay). */
int mg_graph_add_adamw(mg_graph *g, const mg_adamw_config *cfg, mg_optimizer_outputs *out, mg_error *err);
/* The same for gradients of a loss multiplied by the [1] tensor grad_scale (fp16's loss
 * scaling, mgraph/precision.h): the norm is the unscaled gradients', clipping and AdamW
 * see unscaled gradients, and a sum of squares that is not finite (an overflow,
 * Megatron's found_inf) skips every update of the step (grad_norm then reads inf or NaN). */
int mg_graph_add_adamw_scaled(mg_graph *g, const mg_adamw_config *cfg, mg_tensor *grad_scale, mg_optimizer_outputs *out,
                              mg_error *err);

/* Megatron's learning rate after `step` scheduler steps (OptimizerParamScheduler.get_lr
 * with num_steps = step): linear warmup from init_lr, then constant / linear / cosine /
 * inverse-square-root / WSD decay to min_lr at decay_steps. */
float mg_lr_at(const mg_lr_schedule *s, int64_t step);
/* The rate training iteration `iteration` (0-based) runs at: mg_lr_at after the
 * samples of the iterations before it (mg_lr_samples_before; iteration x
 * steps_per_iter without a batch-size ramp). The LR_SCHEDULE op computes exactly this. */
float mg_lr_at_iteration(const mg_lr_schedule *s, int64_t iteration);
/* Megatron's OptimizerParamScheduler.get_wd at step count `step`, and at an iteration
 * (the same step count as the rate's). */
float mg_wd_at(const mg_lr_schedule *s, int64_t step);
float mg_wd_at_iteration(const mg_lr_schedule *s, int64_t iteration);

/* The global batch size after `consumed` samples: Megatron's
 * RampupBatchsizeNumMicroBatchesCalculator.update (start + int(consumed / (samples /
 * increments)) x increment while consumed <= ramp_samples, then the full batch);
 * steps_per_iter (or 1) without a ramp. */
int64_t mg_lr_batch_at(const mg_lr_schedule *s, int64_t consumed);
/* Samples consumed by iterations 0..iteration-1, each taking mg_lr_batch_at of the
 * samples before it (a loop over the ramp's batch sizes, not over iterations). */
int64_t mg_lr_samples_before(const mg_lr_schedule *s, int64_t iteration);
/* NULL when the ramp fields are usable (as Megatron's calculator asserts: start >= 1,
 * increment >= 1, start < full batch, the difference a multiple of the increment,
 * samples >= 1, at most 2^20 increments), else what is wrong. */
const char *mg_lr_ramp_invalid(const mg_lr_schedule *s);

#ifdef __cplusplus
}
#endif
#endif

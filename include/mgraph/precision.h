/* Mixed precision as Megatron-Core has it, as rewrites of the step graph.
 *
 * The logical graph is real-valued (dtype f32); precision is how tensors are stored
 * (mg_tensor.storage), and storing narrow rounds. The rules, one implementation for
 * every model and every executor (graph/precision.c):
 *   - model parameters: each trained parameter X keeps its f32 value as the optimizer's
 *     main parameter, and gets a copy "X.bf16" (or "X.fp16") in the model's precision
 *     (mg_tensor.model_copy) that forward and backward read; after the optimizer step
 *     the updated main parameter is cast into it (Megatron's copy of main params to
 *     model params; the distributed optimizer all-gathers the copies' shards);
 *   - activations and activation gradients (the per-micro-batch part) are stored in the
 *     model's precision, except statistics (a norm's mean and reciprocal deviation,
 *     attention's log-sum-exp: mg_op_def.f32_out) and scalars (losses, counts);
 *   - parameter gradients: a matrix product's weight gradient is produced in f32 and
 *     added into main_grad (Transformer Engine's fused weight-gradient accumulation,
 *     Megatron's default), as are sums of such terms; the others (embedding, bias and
 *     norm gradients) are Megatron's param.grad, in the model's precision, added into
 *     main_grad;
 *   - main gradients (main_grad accumulators), main parameters and Adam moments are f32
 *     unless the options say otherwise (--grad-reduce-in-bf16, the precision-aware
 *     optimizer's dtypes);
 *   - the once-per-step part (reductions, the optimizer) computes in f32;
 *   - partitioners store what stands for a logical tensor as that tensor is stored;
 *     partial sums they build that stand for none (context parallelism's per-chunk dK
 *     and dV travelling the ring) stay f32 and are rounded once, when complete.
 * Every op computes in f32 from its inputs' stored values and rounds its outputs into
 * their storage (to nearest even); matrix products also round their inputs to bf16
 * (mg_gemm_set_precision). That element-wise definition is what both the CPU and the
 * CUDA kernels implement.
 */
#ifndef MGRAPH_PRECISION_H
#define MGRAPH_PRECISION_H

#include <stdbool.h>
#include <stddef.h>

#include "mgraph/error.h"
#include "mgraph/graph.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mg_precision_options {
    mg_dtype params;          /* the model's precision: MG_F32 (no rewrite), MG_BF16 (--bf16), MG_F16 (--fp16) */
    mg_dtype main_grads;      /* main_grad accumulators: MG_F32 (default), MG_BF16 (--grad-reduce-in-bf16),
                               * MG_F16 (--fp16 without --accumulate-allreduce-grads-in-fp32) */
    mg_dtype exp_avg, exp_avg_sq; /* Adam's moments: MG_F32 (default) or MG_BF16 (--exp-avg[-sq]-dtype bf16) */
} mg_precision_options;

/* fp32 everywhere (params MG_F32): the rewrite does nothing. */
mg_precision_options mg_precision_defaults(void);
/* NULL when the options are usable, else what is wrong. */
const char *mg_precision_invalid(const mg_precision_options *o);

/* Rewrites a step graph (after backward, gradient accumulation and the optimizer, or a
 * forward-only evaluation graph) to o's precision: model copies, their updates, and the
 * storage of every tensor. MG_OK without a change when o->params is MG_F32 and every
 * other dtype f32. Called by mg_train_step_build. */
int mg_precision_rewrite(mg_graph *g, const mg_precision_options *o, mg_error *err);

/* Makes a graph's storage consistent after passes that add nodes (partitioners,
 * recompute): what moves or sums bytes (reshape, slice, concat, gathers, reductions,
 * transfers) stores its output as its input is stored, and an in-place update as what
 * it updates. Idempotent; nothing changes in an all-f32 graph. mg_memplan_build calls it. */
void mg_precision_complete(mg_graph *g);

/* Megatron's grad scalers (megatron/core/optimizer/grad_scaler.py) for --fp16: the loss
 * is multiplied by `scale` before backward (mg_train_step.grad_scale), the gradients are
 * unscaled before clipping, and a step whose gradients overflowed (found_inf: a gradient
 * norm that is not finite) is skipped. The dynamic scaler then backs off (x 0.5, not below
 * min_scale) once `hysteresis` overflows have been seen since the scale last grew, and
 * grows (x 2) after `window` steps in a row without one; the constant scaler
 * (--loss-scale) never changes but still skips overflowed steps, as Megatron's does. */
typedef struct mg_loss_scaler {
    float scale;
    bool dynamic;
    float min_scale;                /* --min-loss-scale */
    int window;                     /* --loss-scale-window (growth interval) */
    int hysteresis;                 /* --hysteresis */
    int growth_tracker;             /* steps without an overflow since the last growth or overflow */
    int hysteresis_tracker;         /* overflows still tolerated before a back-off */
} mg_loss_scaler;

/* --initial-loss-scale, --min-loss-scale, --loss-scale-window, --hysteresis. */
mg_loss_scaler mg_loss_scaler_dynamic(float initial, float min_scale, int window, int hysteresis);
/* --loss-scale. */
mg_loss_scaler mg_loss_scaler_constant(float scale);
/* After a step: found_inf says whether its gradients overflowed (the step was skipped). */
void mg_loss_scaler_update(mg_loss_scaler *s, bool found_inf);
/* NULL when the settings are usable, else what is wrong. */
const char *mg_loss_scaler_invalid(const mg_loss_scaler *s);

/* The parameter whose values tensor t holds: t's own name, or for a model copy its
 * parameter's ("h.0.attn.c_attn.weight.bf16" -> "h.0.attn.c_attn.weight"). */
const char *mg_param_name(const mg_tensor *t, char *buf, size_t len);

#ifdef __cplusplus
}
#endif
#endif

/* The training step of any model.
 *
 * A model gives one function: it builds ONE micro-batch's forward pass and loss from
 * that micro-batch's inputs (mg_step_input), creating its parameters as it goes. The
 * library makes the step graph around it, the same for every model:
 *   - the function's nodes are the per-micro-batch part (mg_node.mb == 0): executors
 *     run it once per micro-batch of the step (mg_exec_info.n_micro), data parallelism
 *     deals the micro-batches out to its ranks, pipeline parallelism streams them;
 *   - the loss is scaled by the input "loss_scale" (1 / micro-batches of the global
 *     batch, Megatron's division before backward) and summed over the micro-batches in
 *     place (op accumulate): the step's mean loss, read by the host once per step;
 *   - backward of the scaled loss (plus any auxiliary loss), each parameter's gradient
 *     accumulated over the micro-batches (Megatron's main_grad);
 *   - once per step (mb == -1): the optimizer (AdamW, global-norm clipping, the
 *     learning-rate schedule), and the step means of the reported scalars.
 * The partitioners rewrite that graph for any plan; the trainer (mgraph/trainer.h)
 * runs it. The GPT family's mg_step_build (mgraph/model.h) is one user.
 */
#ifndef MGRAPH_STEP_H
#define MGRAPH_STEP_H

#include "mgraph/graph.h"
#include "mgraph/fp8.h"
#include "mgraph/precision.h"
#include "mgraph/train.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MG_STEP_MAX_METRICS 8
#define MG_STEP_MAX_INPUTS 32

/* What the forward function is told about the micro-batch, and what it returns. */
typedef struct mg_microbatch {
    /* given */
    int batch;              /* samples in the micro-batch the graph is built for (a sub-batch's
                             * under a micro-batch split: build shapes from this, not a constant) */
    bool training;          /* false: the evaluation graph (no dropout, no backward) */
    /* set by the forward function */
    mg_tensor *loss;        /* [1] the micro-batch's loss, a mean over its samples or tokens (required) */
    const char *loss_name;  /* the step's mean loss is named this (NULL: "loss"; GPT: "lm_loss") */
    mg_tensor *aux_loss;    /* [1] optional: trained with the loss (scaled alike), not reported in it
                             * (MoE's load-balancing and z losses times their coefficients) */
    mg_tensor *tokens;      /* [1] optional: how many items the loss is a mean over (the kept labels);
                             * needed by loss_token_mean and per_token_loss */
    int n_metrics;          /* reported scalars ([1] each), averaged over the step's micro-batches;
                             * the step's mean is named metric_names[i] (string copied) */
    const char *metric_names[MG_STEP_MAX_METRICS];
    mg_tensor *metrics[MG_STEP_MAX_METRICS];
} mg_microbatch;

/* Builds one micro-batch's forward and loss in g (parameters included: it runs once per
 * step graph, e.g. once for training and once for evaluation). Returns MG_OK or an
 * error; builder errors recorded in g are reported by the caller. */
typedef int (*mg_forward_fn)(mg_graph *g, void *user, mg_microbatch *mb, mg_error *err);

/* A per-micro-batch input of the step: one value per micro-batch instance (token ids,
 * labels, features), written by the host before each step. Call from the forward
 * function. An input made with plain mg_input is one value for every micro-batch
 * (written once, e.g. positions 0..s-1). */
mg_tensor *mg_step_input(mg_graph *g, const char *name, mg_dtype dt, int ndim, const int64_t *shape);

typedef struct mg_step_options {
    int micro_batch;        /* samples per micro-batch instance (mg_microbatch.batch) */
    int n_micro;            /* micro-batch instances per step: loss_scale's initial value is 1 / this */
    bool training;          /* false: forward only (evaluation) */
    /* The reported loss is the mean over the kept tokens of the whole global batch (each
     * micro-batch's mean x its tokens x "token_scale", which the host sets to 1 / the
     * batch's tokens), as Megatron logs it with a loss mask. What is trained is unchanged. */
    bool loss_token_mean;
    /* Megatron's --calculate-per-token-loss: what is trained is that mean too (the
     * auxiliary loss x token_scale). Implies loss_token_mean. */
    bool per_token_loss;
    mg_adamw_config optim;  /* training only */
    /* Mixed precision (mgraph/precision.h); zeroed: fp32 everywhere. */
    mg_precision_options precision;
    /* fp8 for the linear layers' products (mgraph/fp8.h); zeroed: none */
    mg_fp8_options fp8;
} mg_step_options;

/* The step graph and the logical tensors a host feeds and reads. */
typedef struct mg_train_step {
    mg_graph *g;            /* owned */
    int micro_batch, n_micro;
    int n_inputs;           /* the per-micro-batch inputs, in creation order */
    mg_tensor *inputs[MG_STEP_MAX_INPUTS];
    mg_tensor *loss_scale;  /* [1] input "loss_scale": 1 / micro-batches of the global batch */
    mg_tensor *token_scale; /* [1] input "token_scale" (loss_token_mean): 1 / tokens of the global batch; else NULL */
    /* [1] input "grad_scale" with fp16 (precision.params MG_F16), else NULL: the loss scale
     * (mg_loss_scaler) that multiplies the objective before backward; the optimizer
     * unscales and skips the step on an overflow (mg_graph_add_adamw_scaled). Its initial
     * value is 1. */
    mg_tensor *grad_scale;
    mg_tensor *loss;        /* [1] the step's mean loss (persistent: read after the step) */
    int n_metrics;          /* the step means of mg_microbatch.metrics (named after them) */
    mg_tensor *metrics[MG_STEP_MAX_METRICS];
    mg_optimizer_outputs opt; /* NULL tensors when not training */
    int fp8_gemms;          /* products marked fp8 (mg_fp8_mark): the recipe's state has 3 slots each */
} mg_train_step;

/* Builds the step: calls fwd once with the graph in its per-micro-batch part, then adds
 * the loss scaling and accumulation, backward, gradient accumulation and the optimizer.
 * MG_ERR_INVALID when the function returns no loss or a loss that is not [1], creates no
 * per-micro-batch input (every micro-batch would read the same data), or asks for a
 * token mean without mg_microbatch.tokens. */
int mg_train_step_build(const mg_step_options *o, mg_forward_fn fwd, void *user, mg_train_step *out, mg_error *err);
void mg_train_step_release(mg_train_step *s);
/* The per-micro-batch input named `name` (NULL: none). */
mg_tensor *mg_train_step_input(const mg_train_step *s, const char *name);
/* The step mean of the metric named `name` (NULL: none). */
mg_tensor *mg_train_step_metric(const mg_train_step *s, const char *name);

#ifdef __cplusplus
}
#endif
#endif

/* The step graph of any model (include/mgraph/step.h): the model's one micro-batch,
 * loss scaling and accumulation across the step's micro-batches, backward, gradient
 * accumulation and (when training) the AdamW step. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mgraph/ops.h"
#include "mgraph/step.h"

mg_tensor *mg_step_input(mg_graph *g, const char *name, mg_dtype dt, int ndim, const int64_t *shape) {
    mg_tensor *t = mg_input(g, name, dt, ndim, shape);
    if (t) t->per_microbatch = true;
    return t;
}

/* A persistent accumulator leaf and the in-place accumulate node adding x into it. */
static mg_tensor *accumulate(mg_graph *g, mg_tensor *x, const char *acc_name, const char *out_name) {
    if (!x) return NULL;
    mg_tensor *acc = mg_state(g, acc_name, MG_F32, x->ndim, x->shape, (mg_init){MG_INIT_ZEROS, 0});
    if (!acc) return NULL;
    acc->role = MG_ROLE_GRAD;
    mg_tensor *in[2] = {acc, x};
    mg_node *n = mg_node_new(g, MG_OP_ACCUMULATE, NULL, 2, in, out_name);
    if (!n) return NULL;
    n->out[0]->updates = acc;
    n->out[0]->role = x->role;
    return n->out[0];
}

static mg_tensor *accumulate_named(mg_graph *g, mg_tensor *x, const char *base) {
    char acc[512], out[512];
    snprintf(acc, sizeof acc, "%s.acc", base);
    snprintf(out, sizeof out, "%s.sum", base);
    return accumulate(g, x, acc, out);
}

/* Replaces each parameter's per-micro-batch gradient by its accumulation over the
 * step's micro-batches (what the optimizer reads). */
static int accumulate_grads(mg_graph *g, mg_error *err) {
    int n = mg_graph_n_tensors(g);
    for (int i = 0; i < n; i++) {
        mg_tensor *p = mg_graph_tensor(g, i);
        if (!p->requires_grad || !p->grad) continue;
        char acc[512], out[512];
        snprintf(acc, sizeof acc, "%s.main_grad", p->name);
        snprintf(out, sizeof out, "%s.main_grad.acc", p->name);
        mg_tensor *sum = accumulate(g, p->grad, acc, out);
        if (sum) sum->src->in[0]->state_of = p; /* the accumulator belongs to p */
        if (!sum) return mg_error_set(err, mg_graph_error(g)->code, "step: %s", mg_graph_error(g)->msg);
        p->grad = sum;
    }
    return MG_OK;
}

static bool is_scalar(const mg_tensor *t) { return t && mg_numel(t) == 1; }

/* What the forward function returned, checked before the library builds on it. */
static int check_microbatch(const mg_microbatch *mb, bool token_mean, mg_error *err) {
    if (!mb->loss) return mg_error_set(err, MG_ERR_INVALID, "step: the forward function returned no loss");
    if (!is_scalar(mb->loss))
        return mg_error_set(err, MG_ERR_INVALID, "step: the loss '%s' must have one element", mb->loss->name);
    if (mb->aux_loss && !is_scalar(mb->aux_loss))
        return mg_error_set(err, MG_ERR_INVALID, "step: the auxiliary loss '%s' must have one element", mb->aux_loss->name);
    if (token_mean && !is_scalar(mb->tokens))
        return mg_error_set(err, MG_ERR_INVALID,
                            "step: a loss averaged over the global batch's tokens needs the micro-batch's token count "
                            "(mg_microbatch.tokens, one element)");
    if (mb->n_metrics < 0 || mb->n_metrics > MG_STEP_MAX_METRICS)
        return mg_error_set(err, MG_ERR_INVALID, "step: %d metrics (at most %d)", mb->n_metrics, MG_STEP_MAX_METRICS);
    for (int i = 0; i < mb->n_metrics; i++)
        if (mb->metrics[i] && (!is_scalar(mb->metrics[i]) || !mb->metric_names[i] || !*mb->metric_names[i]))
            return mg_error_set(err, MG_ERR_INVALID, "step: metric %d must have a name and one element", i);
    return MG_OK;
}

/* The per-micro-batch inputs the forward function made. */
static int collect_inputs(mg_train_step *st, mg_error *err) {
    for (int i = 0; i < mg_graph_n_tensors(st->g); i++) {
        mg_tensor *t = mg_graph_tensor(st->g, i);
        if (t->role != MG_ROLE_INPUT || !t->per_microbatch) continue;
        if (st->n_inputs == MG_STEP_MAX_INPUTS)
            return mg_error_set(err, MG_ERR_INVALID, "step: more than %d per-micro-batch inputs", MG_STEP_MAX_INPUTS);
        st->inputs[st->n_inputs++] = t;
    }
    if (!st->n_inputs)
        return mg_error_set(err, MG_ERR_INVALID,
                            "step: the forward function made no per-micro-batch input (mg_step_input): every "
                            "micro-batch would read the same data");
    return MG_OK;
}

int mg_train_step_build(const mg_step_options *o, mg_forward_fn fwd, void *user, mg_train_step *st, mg_error *err) {
    memset(st, 0, sizeof *st);
    if (!fwd) return mg_error_set(err, MG_ERR_INVALID, "step: no forward function");
    if (o->micro_batch < 1 || o->n_micro < 1)
        return mg_error_set(err, MG_ERR_INVALID, "micro-batch size and micro-batch count must be >= 1");
    st->g = mg_graph_new();
    if (!st->g) return mg_error_set(err, MG_ERR_NOMEM, "step: out of memory");
    st->micro_batch = o->micro_batch;
    st->n_micro = o->n_micro;
    mg_graph *g = st->g;
    bool token_mean = o->loss_token_mean || o->per_token_loss;
    /* the per-micro-batch part: the model's forward and loss */
    mg_microbatch mb;
    memset(&mb, 0, sizeof mb);
    mb.batch = o->micro_batch;
    mb.training = o->training;
    mg_graph_set_mb(g, 0);
    int rc = fwd(g, user, &mb, err);
    if (!rc && mg_graph_error(g)->code) rc = mg_error_set(err, mg_graph_error(g)->code, "%s", mg_graph_error(g)->msg);
    if (!rc) rc = check_microbatch(&mb, token_mean, err);
    if (!rc && o->fp8.format != MG_FP8_OFF) rc = mg_fp8_mark(g, &st->fp8_gemms, err); /* (before autodiff) */
    if (!rc) rc = collect_inputs(st, err);
    if (rc) {
        mg_train_step_release(st);
        return rc;
    }
    int64_t one = 1;
    st->loss_scale = mg_input(g, "loss_scale", MG_F32, 1, &one);
    if (st->loss_scale) st->loss_scale->init = (mg_init){MG_INIT_CONSTANT, 1.0f / (float)o->n_micro};
    if (token_mean) st->token_scale = mg_input(g, "token_scale", MG_F32, 1, &one);
    /* fp16: Megatron's loss scaling (the host's mg_loss_scaler sets it each step) */
    if (o->training && o->precision.params == MG_F16) {
        st->grad_scale = mg_input(g, "grad_scale", MG_F32, 1, &one);
        if (st->grad_scale) st->grad_scale->init = (mg_init){MG_INIT_CONSTANT, 1.0f};
    }
    /* Megatron divides each micro-batch's loss by the number of micro-batches before
     * backward; the scaled losses summed over the step are the mean loss. The scaling
     * and its accumulation belong with the loss (the last pipeline stage). */
    mg_graph_set_layer(g, MG_LAYER_POST);
    mg_tensor *l = mb.loss;
    /* the micro-batch's share of the step's mean over micro-batches, or over the kept
     * tokens of the global batch (its mean x its kept tokens / the batch's) */
    mg_tensor *scaled = !o->per_token_loss ? mg_mul(g, l, st->loss_scale) : NULL;
    mg_tensor *token_share = token_mean ? mg_mul(g, mg_mul(g, l, mb.tokens), st->token_scale) : NULL;
    mg_tensor *trained = o->per_token_loss ? token_share : scaled;
    const char *loss_name = mb.loss_name ? mb.loss_name : "loss";
    mg_tensor *sum = accumulate_named(g, token_mean ? token_share : scaled, loss_name);
    /* the objective adds the auxiliary loss (scaled alike); the loss is reported alone
     * and the metrics beside it, each the mean over the step's micro-batches */
    mg_tensor *aux_scale = o->per_token_loss ? st->token_scale : st->loss_scale;
    mg_tensor *objective = mb.aux_loss ? mg_add(g, trained, mg_mul(g, mb.aux_loss, aux_scale)) : trained;
    if (st->grad_scale) objective = mg_mul(g, objective, st->grad_scale); /* (backward only: the loss is reported unscaled) */
    mg_tensor *msum[MG_STEP_MAX_METRICS] = {0};
    for (int i = 0; i < mb.n_metrics; i++)
        if (mb.metrics[i]) msum[i] = mg_mul(g, mb.metrics[i], st->loss_scale);
    for (int i = 0; i < mb.n_metrics; i++)
        if (msum[i]) msum[i] = accumulate_named(g, msum[i], mb.metric_names[i]);
    mg_graph_set_layer(g, MG_LAYER_NONE);
    /* once per step: the step's means, read by the host */
    mg_graph_set_mb(g, -1);
    st->loss = sum ? mg_scale(g, sum, 1.0f) : NULL;
    for (int i = 0; i < mb.n_metrics; i++) {
        if (!msum[i]) continue;
        mg_tensor *m = mg_set_name(g, mg_scale(g, msum[i], 1.0f), mb.metric_names[i]);
        if (m) m->persistent = true;
        st->metrics[st->n_metrics++] = m;
    }
    if (st->loss) {
        mg_set_name(g, st->loss, loss_name);
        st->loss->role = MG_ROLE_LOSS;
        st->loss->persistent = true; /* read by the host after the step */
    }
    if (mg_graph_error(g)->code) {
        rc = mg_error_set(err, mg_graph_error(g)->code, "%s", mg_graph_error(g)->msg);
    } else if (o->training) {
        mg_graph_set_mb(g, 0);
        rc = mg_graph_backward(g, objective, err);
        mg_graph_set_mb(g, 0);
        if (!rc) rc = accumulate_grads(g, err);
        mg_graph_set_mb(g, -1);
        if (!rc) rc = mg_graph_add_adamw_scaled(g, &o->optim, st->grad_scale, &st->opt, err);
    }
    if (!rc) rc = mg_precision_rewrite(g, &o->precision, err);
    if (!rc) rc = mg_graph_validate(g, err);
    if (rc) mg_train_step_release(st);
    return rc;
}

void mg_train_step_release(mg_train_step *st) {
    mg_graph_free(st->g);
    memset(st, 0, sizeof *st);
}

mg_tensor *mg_train_step_input(const mg_train_step *st, const char *name) {
    for (int i = 0; i < st->n_inputs; i++)
        if (!strcmp(st->inputs[i]->name, name)) return st->inputs[i];
    return NULL;
}

mg_tensor *mg_train_step_metric(const mg_train_step *st, const char *name) {
    for (int i = 0; i < st->n_metrics; i++)
        if (!strcmp(st->metrics[i]->name, name)) return st->metrics[i];
    return NULL;
}

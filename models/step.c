/* The step graph: one micro-batch's forward and backward, gradient and loss
 * accumulation across the step's micro-batches, and (when training) the AdamW step. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mgraph/model.h"
#include "mgraph/ops.h"

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
        if (!sum) return mg_error_set(err, mg_graph_error(g)->code, "step: %s", mg_graph_error(g)->msg);
        p->grad = sum;
    }
    return MG_OK;
}

int mg_step_build(const mg_step_config *c, mg_step *st, mg_error *err) {
    memset(st, 0, sizeof *st);
    if (c->micro_batch < 1 || c->n_micro < 1)
        return mg_error_set(err, MG_ERR_INVALID, "micro-batch size and micro-batch count must be >= 1");
    st->g = mg_graph_new();
    if (!st->g) return mg_error_set(err, MG_ERR_NOMEM, "step: out of memory");
    st->n_micro = c->n_micro;
    mg_graph *g = st->g;
    int rc = mg_gpt2_params(g, &c->model, &st->model, err);
    if (rc) {
        mg_step_release(st);
        return rc;
    }
    int64_t s = c->model.seq_length, b = c->micro_batch, one = 1;
    if (!c->reset_position_ids) st->positions = mg_input(g, "position_ids", MG_I32, 1, &s);
    st->loss_scale = mg_input(g, "loss_scale", MG_F32, 1, &one);
    if (st->loss_scale) st->loss_scale->init = (mg_init){MG_INIT_CONSTANT, 1.0f / (float)c->n_micro};
    bool token_mean = c->loss_token_mean || c->per_token_loss;
    if (token_mean) st->token_scale = mg_input(g, "token_scale", MG_F32, 1, &one);
    /* the per-micro-batch part */
    mg_graph_set_mb(g, 0);
    st->tokens = mg_input(g, "input_ids", MG_I32, 2, (int64_t[]){s, b});
    st->targets = mg_input(g, "labels", MG_I32, 2, (int64_t[]){s, b});
    if (c->reset_position_ids) st->positions = mg_input(g, "position_ids", MG_I32, 2, (int64_t[]){s, b});
    if (c->reset_attention_mask) st->doc_start = mg_input(g, "doc_start", MG_I32, 2, (int64_t[]){s, b});
    mg_tensor *per_mb[4] = {st->tokens, st->targets, c->reset_position_ids ? st->positions : NULL, st->doc_start};
    for (int i = 0; i < 4; i++)
        if (per_mb[i]) per_mb[i]->per_microbatch = true;
    mg_gpt_aux aux;
    mg_tensor *l = mg_gpt2_forward_aux(g, &st->model, st->tokens, st->positions, st->doc_start, st->targets,
                                       c->training, &aux);
    /* Megatron divides each micro-batch's loss by the number of micro-batches before
     * backward; the scaled losses summed over the step are the mean loss. */
    /* the loss scaling and its accumulation belong with the loss (the last stage) */
    mg_graph_set_layer(g, MG_LAYER_POST);
    /* the micro-batch's share of the step's mean over micro-batches, or over the kept
     * tokens of the global batch (its mean x its kept tokens / the batch's) */
    mg_tensor *scaled = l && st->loss_scale && !c->per_token_loss ? mg_mul(g, l, st->loss_scale) : NULL;
    mg_tensor *token_share = token_mean && l && aux.tokens && st->token_scale
                                 ? mg_mul(g, mg_mul(g, l, aux.tokens), st->token_scale)
                                 : NULL;
    mg_tensor *trained = c->per_token_loss ? token_share : scaled;
    mg_tensor *sum = accumulate(g, token_mean ? token_share : scaled, "lm_loss.acc", "lm_loss.sum");
    /* MoE: the objective adds the auxiliary losses (scaled alike); the lm loss is
     * reported alone and the load-balancing / z losses beside it (Megatron) */
    mg_tensor *aux_scale = c->per_token_loss ? st->token_scale : st->loss_scale;
    mg_tensor *objective = aux.loss ? mg_add(g, trained, mg_mul(g, aux.loss, aux_scale)) : trained;
    mg_tensor *lb = aux.load_balancing_loss ? mg_mul(g, aux.load_balancing_loss, st->loss_scale) : NULL;
    mg_tensor *zl = aux.z_loss ? mg_mul(g, aux.z_loss, st->loss_scale) : NULL;
    lb = accumulate(g, lb, "load_balancing_loss.acc", "load_balancing_loss.sum");
    zl = accumulate(g, zl, "z_loss.acc", "z_loss.sum");
    mg_graph_set_layer(g, MG_LAYER_NONE);
    /* once per step: the step's mean loss, read by the host */
    mg_graph_set_mb(g, -1);
    st->loss = sum ? mg_scale(g, sum, 1.0f) : NULL;
    st->load_balancing_loss = lb ? mg_set_name(g, mg_scale(g, lb, 1.0f), "load_balancing_loss") : NULL;
    st->z_loss = zl ? mg_set_name(g, mg_scale(g, zl, 1.0f), "z_loss") : NULL;
    if (st->load_balancing_loss) st->load_balancing_loss->persistent = true;
    if (st->z_loss) st->z_loss->persistent = true;
    if (st->loss) {
        mg_set_name(g, st->loss, "lm_loss");
        st->loss->role = MG_ROLE_LOSS;
        st->loss->persistent = true; /* read by the host after the step */
    }
    if (mg_graph_error(g)->code) {
        rc = mg_error_set(err, mg_graph_error(g)->code, "%s", mg_graph_error(g)->msg);
    } else if (c->training) {
        mg_graph_set_mb(g, 0);
        rc = mg_graph_backward(g, objective, err);
        mg_graph_set_mb(g, 0);
        if (!rc) rc = accumulate_grads(g, err);
        mg_graph_set_mb(g, -1);
        if (!rc) rc = mg_graph_add_adamw(g, &c->optim, &st->opt, err);
    }
    if (!rc) rc = mg_graph_validate(g, err);
    if (rc) mg_step_release(st);
    return rc;
}

void mg_step_release(mg_step *st) {
    mg_gpt_release(&st->model);
    mg_graph_free(st->g);
    memset(st, 0, sizeof *st);
}

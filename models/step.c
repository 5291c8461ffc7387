/* The step graph: all micro-batches of one global batch, their mean loss, and (when
 * training) backward and the AdamW step. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mgraph/model.h"
#include "mgraph/ops.h"

int mg_step_build(const mg_step_config *c, mg_step *st, mg_error *err) {
    memset(st, 0, sizeof *st);
    if (c->micro_batch < 1 || c->n_micro < 1)
        return mg_error_set(err, MG_ERR_INVALID, "micro-batch size and micro-batch count must be >= 1");
    st->g = mg_graph_new();
    st->tokens = calloc((size_t)c->n_micro, sizeof *st->tokens);
    st->targets = calloc((size_t)c->n_micro, sizeof *st->targets);
    if (!st->g || !st->tokens || !st->targets) {
        mg_step_release(st);
        return mg_error_set(err, MG_ERR_NOMEM, "step: out of memory");
    }
    st->n_micro = c->n_micro;
    mg_graph *g = st->g;
    int rc = mg_gpt2_params(g, &c->model, &st->model, err);
    if (rc) {
        mg_step_release(st);
        return rc;
    }
    int64_t s = c->model.seq_length, b = c->micro_batch;
    st->positions = mg_input(g, "position_ids", MG_I32, 1, &s);
    mg_tensor *total = NULL;
    for (int k = 0; k < c->n_micro; k++) {
        mg_graph_set_mb(g, k);
        mg_scope_push(g, "mb%d", k);
        st->tokens[k] = mg_input(g, "input_ids", MG_I32, 2, (int64_t[]){s, b});
        st->targets[k] = mg_input(g, "labels", MG_I32, 2, (int64_t[]){s, b});
        mg_tensor *l = mg_gpt2_forward(g, &st->model, st->tokens[k], st->positions, st->targets[k], c->training);
        mg_scope_pop(g);
        /* the sum over micro-batches belongs to none of them (data parallelism makes
         * it a partial sum over ranks) */
        mg_graph_set_mb(g, -1);
        total = total ? mg_add(g, total, l) : l;
    }
    st->loss = c->n_micro > 1 ? mg_scale(g, total, 1.0f / (float)c->n_micro) : total;
    if (st->loss) {
        mg_set_name(g, st->loss, "lm_loss");
        st->loss->role = MG_ROLE_LOSS;
        st->loss->persistent = true; /* read by the host after the step */
    }
    if (mg_graph_error(g)->code) {
        rc = mg_error_set(err, mg_graph_error(g)->code, "%s", mg_graph_error(g)->msg);
    } else if (c->training) {
        rc = mg_graph_backward(g, st->loss, err);
        if (!rc) rc = mg_graph_add_adamw(g, &c->optim, &st->opt, err);
    }
    if (!rc) rc = mg_graph_validate(g, err);
    if (rc) mg_step_release(st);
    return rc;
}

void mg_step_release(mg_step *st) {
    mg_gpt_release(&st->model);
    mg_graph_free(st->g);
    free(st->tokens);
    free(st->targets);
    memset(st, 0, sizeof *st);
}

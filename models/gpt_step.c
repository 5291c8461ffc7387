/* The GPT family's training step: one micro-batch's forward and loss for the library's
 * step builder (graph/step.c), which adds the rest of the step. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mgraph/model.h"
#include "mgraph/ops.h"

/* mg_gpt_forward_fn's work, keeping the model's tensors when `out` is given. */
static int gpt_microbatch(mg_graph *g, const mg_step_config *c, mg_microbatch *mb, mg_gpt *out, mg_error *err) {
    mg_gpt m;
    int rc = mg_gpt2_params(g, &c->model, &m, err);
    if (rc) return rc;
    int64_t s = c->model.seq_length, b = mb->batch;
    /* positions: one [s] for every sample (written once), or each sample's own */
    mg_tensor *positions = c->reset_position_ids ? NULL : mg_input(g, "position_ids", MG_I32, 1, &s);
    mg_tensor *tokens = mg_step_input(g, "input_ids", MG_I32, 2, (int64_t[]){s, b});
    mg_tensor *targets = mg_step_input(g, "labels", MG_I32, 2, (int64_t[]){s, b});
    if (c->reset_position_ids) positions = mg_step_input(g, "position_ids", MG_I32, 2, (int64_t[]){s, b});
    mg_tensor *doc_start = c->reset_attention_mask ? mg_step_input(g, "doc_start", MG_I32, 2, (int64_t[]){s, b}) : NULL;
    mg_gpt_aux aux;
    mb->loss = mg_gpt2_forward_aux(g, &m, tokens, positions, doc_start, targets, mb->training, &aux);
    mb->loss_name = "lm_loss";
    mb->aux_loss = aux.loss;
    mb->tokens = aux.tokens;
    if (aux.mtp_loss) {
        /* Megatron's MTPLossAutoScaler: scaled as the main loss (here: x loss_scale, like
         * aux_loss); with --calculate-per-token-loss the step scales aux_loss by 1 / the batch's
         * tokens, and Megatron's MTP term is factor / N x loss_k x the micro-batch's kept labels */
        mg_tensor *t = c->per_token_loss ? mg_mul(g, aux.mtp_loss, aux.tokens) : aux.mtp_loss;
        mb->aux_loss = mb->aux_loss ? mg_add(g, mb->aux_loss, t) : t;
    }
    /* MoE: Megatron logs the load-balancing and z losses (without coefficients) */
    /* (Megatron's name of each balancing loss) */
    mb->metric_names[0] = c->model.moe.balance == MG_MOE_SEQ_AUX_LOSS ? "seq_load_balancing_loss" : "load_balancing_loss";
    mb->metrics[0] = aux.load_balancing_loss;
    mb->metric_names[1] = "z_loss";
    mb->metrics[1] = aux.z_loss;
    mb->n_metrics = 2;
    static const char *mtp_names[MG_MTP_MAX_LAYERS] = {"mtp_1_loss", "mtp_2_loss", "mtp_3_loss",
                                                       "mtp_4_loss", "mtp_5_loss", "mtp_6_loss"};
    for (int k = 0; k < c->model.mtp_num_layers && mb->n_metrics < MG_STEP_MAX_METRICS; k++) {
        mb->metric_names[mb->n_metrics] = mtp_names[k]; /* (Megatron logs "mtp_<k+1> loss") */
        mb->metrics[mb->n_metrics++] = aux.mtp[k];
    }
    if (out) *out = m;
    else mg_gpt_release(&m);
    return MG_OK;
}

int mg_gpt_forward_fn(mg_graph *g, void *user, mg_microbatch *mb, mg_error *err) {
    return gpt_microbatch(g, user, mb, NULL, err);
}

typedef struct gpt_build {
    const mg_step_config *c;
    mg_gpt *model;
} gpt_build;

static int build_keeping_model(mg_graph *g, void *user, mg_microbatch *mb, mg_error *err) {
    gpt_build *b = user;
    return gpt_microbatch(g, b->c, mb, b->model, err);
}

mg_step_options mg_step_options_of(const mg_step_config *c) {
    mg_step_options o = {c->micro_batch, c->n_micro, c->training, c->loss_token_mean, c->per_token_loss, c->optim,
                         c->precision, c->fp8};
    return o;
}

int mg_step_build(const mg_step_config *c, mg_step *st, mg_error *err) {
    memset(st, 0, sizeof *st);
    mg_step_options o = mg_step_options_of(c);
    gpt_build b = {c, &st->model};
    mg_train_step ts;
    int rc = mg_train_step_build(&o, build_keeping_model, &b, &ts, err);
    if (rc) {
        mg_gpt_release(&st->model);
        return rc;
    }
    st->g = ts.g;
    st->n_micro = ts.n_micro;
    st->tokens = mg_train_step_input(&ts, "input_ids");
    st->targets = mg_train_step_input(&ts, "labels");
    st->positions = mg_graph_find(ts.g, "position_ids");
    st->doc_start = mg_train_step_input(&ts, "doc_start");
    st->loss_scale = ts.loss_scale;
    st->token_scale = ts.token_scale;
    st->grad_scale = ts.grad_scale;
    st->loss = ts.loss;
    st->load_balancing_loss = mg_train_step_metric(&ts, "load_balancing_loss");
    if (!st->load_balancing_loss) st->load_balancing_loss = mg_train_step_metric(&ts, "seq_load_balancing_loss");
    st->z_loss = mg_train_step_metric(&ts, "z_loss");
    for (int k = 0; k < c->model.mtp_num_layers; k++) {
        char nm[32];
        snprintf(nm, sizeof nm, "mtp_%d_loss", k + 1);
        st->mtp_loss[k] = mg_train_step_metric(&ts, nm);
    }
    st->opt = ts.opt;
    return MG_OK;
}

void mg_step_release(mg_step *st) {
    mg_gpt_release(&st->model);
    mg_graph_free(st->g);
    memset(st, 0, sizeof *st);
}

/* The optimizer step as a graph rewrite: global gradient norm, clipping, learning
 * rate and one AdamW node per parameter, appended after the backward pass. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "graph/graph_internal.h"
#include "mgraph/ops.h"
#include "mgraph/train.h"

mg_adamw_config mg_adamw_defaults(void) {
    mg_adamw_config c = {.beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 0.01f, .clip_grad = 1.0f};
    c.lr = (mg_lr_schedule){.lr = 1e-4f, .min_lr = 0.0f, .warmup_steps = 0, .decay_steps = 1, .style = MG_LR_CONSTANT};
    return c;
}

/* Megatron's OptimizerParamScheduler.get_lr at its step count `step`. */
float mg_lr_at(const mg_lr_schedule *s, int64_t step) {
    double max_lr = s->lr, min_lr = s->min_lr, n = (double)step;
    if (s->warmup_steps > 0 && n <= s->warmup_steps)
        return (float)(s->init_lr + (max_lr - s->init_lr) * n / s->warmup_steps);
    if (s->style == MG_LR_CONSTANT) return s->lr;
    if (step > s->decay_steps) return s->min_lr;
    if (s->style == MG_LR_INVERSE_SQRT) {
        double w = s->warmup_steps > 1 ? s->warmup_steps : 1, k = n > 1 ? n : 1;
        double lr = max_lr * sqrt(w) / sqrt(k);
        return (float)(lr > min_lr ? lr : min_lr);
    }
    double span = (double)s->decay_steps - s->warmup_steps;
    double ratio = span > 0 ? (n - s->warmup_steps) / span : 1.0;
    double coeff = 1.0;
    if (s->style == MG_LR_LINEAR) {
        coeff = 1.0 - ratio;
    } else if (s->style == MG_LR_COSINE) {
        coeff = 0.5 * (cos(M_PI * ratio) + 1.0);
    } else { /* WSD: stable at max_lr, then anneal over the last wsd_decay_steps */
        int64_t start = s->decay_steps - s->wsd_decay_steps;
        if (step > start) {
            double r = (double)(step - start) / (double)s->wsd_decay_steps;
            switch (s->wsd_style) {
            case MG_WSD_LINEAR: coeff = 1.0 - r; break;
            case MG_WSD_COSINE: coeff = 0.5 * (cos(M_PI * r) + 1.0); break;
            case MG_WSD_EXPONENTIAL: coeff = 2.0 * pow(0.5, r) - 1.0; break;
            case MG_WSD_MINUS_SQRT: coeff = 1.0 - sqrt(r); break;
            }
        }
    }
    return (float)(min_lr + coeff * (max_lr - min_lr));
}

float mg_lr_at_iteration(const mg_lr_schedule *s, int64_t iteration) {
    return mg_lr_at(s, mg_lr_samples_before(s, iteration));
}

/* Megatron's OptimizerParamScheduler.get_wd: constant, or linear / cosine from start to
 * end over wd_incr_steps (the cosine rises as 0.5 (cos(pi (1 - r)) + 1)). */
float mg_wd_at(const mg_lr_schedule *s, int64_t step) {
    if (s->wd_style == MG_WD_CONSTANT || step > s->wd_incr_steps) return s->wd_end;
    double r = (double)step / (double)s->wd_incr_steps;
    double coeff = s->wd_style == MG_WD_LINEAR ? r : 0.5 * (cos(M_PI * (1.0 - r)) + 1.0);
    return (float)(s->wd_start + coeff * ((double)s->wd_end - s->wd_start));
}

float mg_wd_at_iteration(const mg_lr_schedule *s, int64_t iteration) {
    return mg_wd_at(s, mg_lr_samples_before(s, iteration));
}

/* ---- batch-size ramp (Megatron's --rampup-batch-size) ------------------------------
 * Megatron's calculator computes the batch from the samples consumed so far, in
 * doubles: steps = int(consumed / (ramp_samples / increments)). The same double
 * expression is evaluated here, so every boundary lands on the sample Megatron's does. */
static int64_t full_batch(const mg_lr_schedule *s) { return s->steps_per_iter > 0 ? s->steps_per_iter : 1; }

static double ramp_per_increment(const mg_lr_schedule *s) {
    return (double)s->ramp_samples / (double)((full_batch(s) - s->ramp_start) / s->ramp_increment);
}

static int64_t ramp_steps(const mg_lr_schedule *s, int64_t consumed) {
    return (int64_t)((double)consumed / ramp_per_increment(s));
}

const char *mg_lr_ramp_invalid(const mg_lr_schedule *s) {
    if (s->ramp_start == 0 && s->ramp_increment == 0 && s->ramp_samples == 0) return NULL;
    if (s->ramp_start < 1 || s->ramp_increment < 1 || s->ramp_samples < 1)
        return "the start batch size, the increment and the ramp-up samples must be >= 1";
    if (s->ramp_start >= full_batch(s)) return "the start batch size must be less than the global batch size";
    if ((full_batch(s) - s->ramp_start) % s->ramp_increment)
        return "the global batch size minus the start batch size must be a multiple of the increment";
    if ((full_batch(s) - s->ramp_start) / s->ramp_increment > (1 << 20)) return "more than 2^20 increments";
    if (s->ramp_samples > ((int64_t)1 << 50)) return "more than 2^50 ramp-up samples";
    return NULL;
}

int64_t mg_lr_batch_at(const mg_lr_schedule *s, int64_t consumed) {
    if (s->ramp_start <= 0 || consumed > s->ramp_samples) return full_batch(s);
    int64_t b = s->ramp_start + ramp_steps(s, consumed) * s->ramp_increment;
    return b < full_batch(s) ? b : full_batch(s);
}

/* The first sample count after c whose batch differs from c's (or may: the end of the
 * ramp); INT64_MAX once the ramp is over. */
static int64_t next_change(const mg_lr_schedule *s, int64_t c) {
    if (s->ramp_start <= 0 || c > s->ramp_samples) return INT64_MAX;
    int64_t j = ramp_steps(s, c), end = s->ramp_samples + 1;
    double x0 = ceil((double)(j + 1) * ramp_per_increment(s));
    int64_t x = x0 < (double)end ? (int64_t)x0 : end;
    if (x <= c) x = c + 1;
    /* the product above may round either way: settle on the exact first sample */
    while (x - 1 > c && ramp_steps(s, x - 1) > j) x--;
    while (x < end && ramp_steps(s, x) <= j) x++;
    return x;
}

int64_t mg_lr_samples_before(const mg_lr_schedule *s, int64_t iteration) {
    int64_t c = 0, i = 0;
    while (i < iteration) {
        int64_t b = mg_lr_batch_at(s, c), end = next_change(s, c);
        int64_t m = end == INT64_MAX ? INT64_MAX : (end - c + b - 1) / b; /* iterations at batch b */
        if (m >= iteration - i) return c + (iteration - i) * b;
        c += m * b;
        i += m;
    }
    return c;
}

static mg_tensor *moment(mg_graph *g, mg_tensor *p, const char *which) {
    char nm[512];
    snprintf(nm, sizeof nm, "%s.%s", p->name, which);
    mg_tensor *t = mg_tensor_new(g, nm, false, MG_F32, MG_ROLE_OPT_STATE, p->ndim, p->shape);
    if (t) {
        t->init.kind = MG_INIT_ZEROS;
        t->persistent = true;
        t->logical = p->logical; /* a moment is sharded exactly like its parameter */
        t->logical.key = mg_hash_name(nm);
        t->place = p->place;
        t->state_of = p; /* the typed binding (checkpoints, partitioners) */
    }
    return t;
}

int mg_graph_add_adamw(mg_graph *g, const mg_adamw_config *cfg, mg_optimizer_outputs *out, mg_error *err) {
    return mg_graph_add_adamw_scaled(g, cfg, NULL, out, err);
}

int mg_graph_add_adamw_scaled(mg_graph *g, const mg_adamw_config *cfg, mg_tensor *grad_scale, mg_optimizer_outputs *out,
                              mg_error *err) {
    if (g->error.code) return mg_error_set(err, g->error.code, "%s", g->error.msg);
    int n_t = g->n_tensors, n_params = 0;
    for (int i = 0; i < n_t; i++) n_params += g->tensors[i]->requires_grad && g->tensors[i]->grad;
    if (!n_params) return mg_error_set(err, MG_ERR_INVALID, "optimizer: no parameter has a gradient (run backward first)");
    mg_tensor **grads = malloc((size_t)n_params * sizeof *grads);
    mg_tensor **params = malloc((size_t)n_params * sizeof *params);
    if (!grads || !params) {
        free(grads);
        free(params);
        return mg_error_set(err, MG_ERR_NOMEM, "optimizer: out of memory");
    }
    int k = 0;
    for (int i = 0; i < n_t; i++)
        if (g->tensors[i]->requires_grad && g->tensors[i]->grad) {
            params[k] = g->tensors[i];
            grads[k++] = g->tensors[i]->grad;
        }
    mg_phase saved_phase = g->phase;
    int saved_mb = g->mb, saved_scopes = g->n_scopes;
    char *outer[MG_SCOPE_MAX];
    memcpy(outer, g->scopes, sizeof outer); /* the optimizer scope is top-level */
    g->phase = MG_PHASE_OPTIMIZER;
    g->mb = -1;
    g->n_scopes = 0;
    mg_scope_push(g, "optimizer");

    /* One sum-of-squares node per gradient (so each can start as soon as its gradient
     * is final), then their sum. */
    mg_tensor *total = NULL;
    for (int i = 0; i < k; i++) {
        mg_node *sq = mg_node_new(g, MG_OP_SUMSQ, NULL, 1, &grads[i], "grad_sumsq");
        mg_tensor *s = sq ? sq->out[0] : NULL;
        total = total ? mg_add(g, total, s) : s;
    }
    /* --log-num-zeros-in-grad: the same walk counting zeros; the host reads the sum (a
     * partitioner reduces it over the groups that hold shares of it) */
    mg_tensor *zeros = NULL;
    mg_attrs count = {.sumsq = {true}};
    for (int i = 0; cfg->num_zeros && i < k; i++) {
        mg_node *zn = mg_node_new(g, MG_OP_SUMSQ, &count, 1, &grads[i], "grad_zeros");
        mg_tensor *z = zn ? zn->out[0] : NULL;
        zeros = zeros ? mg_add(g, zeros, z) : z;
    }
    if (zeros && !g->error.code) {
        mg_set_name(g, zeros, "num_zeros");
        zeros->persistent = true; /* read by the host */
        if (out) out->num_zeros = zeros;
    }
    mg_attrs clip = {.clip = {cfg->clip_grad}};
    mg_tensor *clip_in[2] = {total, grad_scale};
    mg_node *cn = mg_node_new(g, MG_OP_CLIP_COEF, &clip, grad_scale ? 2 : 1, clip_in, "clip_coef");
    mg_attrs lra = {.lr = cfg->lr};
    mg_node *ln = mg_node_new(g, MG_OP_LR_SCHEDULE, &lra, 0, NULL, "lr");
    /* the embedding and output layers' rate: the same schedule between other bounds */
    mg_node *dn = ln;
    if (cfg->decoupled) {
        mg_attrs dla = {.lr = cfg->lr};
        dla.lr.lr = cfg->decoupled_lr;
        dla.lr.min_lr = cfg->decoupled_min_lr;
        dn = mg_node_new(g, MG_OP_LR_SCHEDULE, &dla, 0, NULL, "decoupled_lr");
    }
    if (cn && ln) {
        mg_set_name(g, cn->out[1], "grad_norm");
        cn->out[0]->persistent = cn->out[1]->persistent = ln->out[0]->persistent = true; /* read by the host */
        if (out) {
            out->lr = ln->out[0];
            out->grad_norm = cn->out[1];
        }
    }
    mg_tensor **updated = cfg->params_norm ? calloc((size_t)k, sizeof *updated) : NULL;
    if (cfg->params_norm && !updated) mg_graph_fail(g, MG_ERR_NOMEM, "optimizer: out of memory");
    /* a scheduled decay is lr_schedule's second output, times each node's 1 (or 0: no decay) */
    bool sched = cfg->lr.wd_style != MG_WD_CONSTANT;
    for (int i = 0; i < k && cn && ln && dn && !g->error.code; i++) {
        mg_tensor *p = params[i];
        int saved = g->n_scopes;
        g->n_scopes = 0; /* names derive from the parameter's absolute name */
        mg_tensor *lr = p->embedding_or_output ? dn->out[0] : ln->out[0];
        mg_tensor *in[7] = {p, grads[i], moment(g, p, "exp_avg"), moment(g, p, "exp_avg_sq"), lr, cn->out[0],
                            ln->out[1]};
        float wd = sched ? 1.0f : cfg->weight_decay;
        mg_attrs at = {.adamw = {cfg->beta1, cfg->beta2, cfg->eps, p->no_weight_decay ? 0.0f : wd, grad_scale != NULL}};
        char nm[512];
        snprintf(nm, sizeof nm, "%s.new", p->name);
        mg_node *an = mg_node_new(g, MG_OP_ADAMW, &at, sched ? 7 : 6, in, nm);
        g->n_scopes = saved;
        if (an) {
            an->out[0]->updates = p;
            an->out[1]->updates = in[2];
            an->out[2]->updates = in[3];
            if (updated) updated[i] = an->out[0];
        }
    }
    /* The updated parameters' sum of squares, after every update: a partitioner may
     * produce an updated parameter only with the last update of its group (the
     * distributed optimizer's bucket all-gather). */
    mg_tensor *psum = NULL;
    for (int i = 0; updated && i < k && !g->error.code; i++) {
        mg_node *sq = mg_node_new(g, MG_OP_SUMSQ, NULL, 1, &updated[i], "param_sumsq");
        mg_tensor *s = sq ? sq->out[0] : NULL;
        psum = psum ? mg_add(g, psum, s) : s;
    }
    free(updated);
    if (psum && !g->error.code) { /* its square root: clip_coef's second output (with clipping off) */
        mg_attrs none = {.clip = {0.0f}};
        mg_node *pn = mg_node_new(g, MG_OP_CLIP_COEF, &none, 1, &psum, "params_norm_of");
        if (pn) {
            mg_set_name(g, pn->out[1], "params_norm");
            pn->out[1]->persistent = true; /* read by the host */
            if (out) out->params_norm = pn->out[1];
        }
    }
    mg_scope_pop(g);
    memcpy(g->scopes, outer, sizeof outer);
    g->n_scopes = saved_scopes;
    g->phase = saved_phase;
    g->mb = saved_mb;
    free(grads);
    free(params);
    if (g->error.code) return mg_error_set(err, g->error.code, "optimizer: %s", g->error.msg);
    return MG_OK;
}

/* Optimizer-step ops: learning-rate schedule, gradient-clipping coefficient, AdamW.
 * They are graph nodes like any other so partitioners can shard the step and the
 * scheduler can overlap it with communication. */
#include <math.h>
#include <string.h>

#include "mgraph/train.h"
#include "ops/op.h"
#include "ops/shard.h"
#include "ops/simd.h"

static void scalar_desc(mg_tensor_desc *d) {
    d->dtype = MG_F32;
    d->ndim = 1;
    for (int i = 0; i < MG_MAX_DIMS; i++) d->shape[i] = 1;
}

/* ---- accumulate(acc, x) -> acc + x, written in place of acc ----------------------------
 * Gradient accumulation over the micro-batches of a step (Megatron's main_grad): the
 * first micro-batch instance of the step copies x, the others add it, so the buffer
 * needs no zeroing pass and the sum is taken in micro-batch order, the same on every
 * plan. Outside a micro-batch schedule (mb_local < 0) it copies. */
static int infer_accumulate(const mg_node *n, mg_tensor_desc *out, mg_error *err) {
    if (!mg_same_shape(n->in[0], n->in[1]) || n->in[0]->dtype != MG_F32 || n->in[1]->dtype != MG_F32)
        return mg_shape_error(err, n, "accumulator and value must be f32 tensors of one shape");
    mg_desc_of(n->in[0], &out[0]);
    return 1;
}

MG_SIMD static int accumulate_cpu(const mg_kernel_args *a, mg_error *err) {
    (void)err;
    const float *x = a->in[1];
    float *acc = a->out[0]; /* the accumulator's own buffer (the output updates in[0]) */
    int64_t n = mg_numel(a->node->in[0]);
    if (a->info->mb_local <= 0) {
        if (acc != x) memcpy(acc, x, (size_t)n * sizeof *acc);
    } else {
        const float *prev = a->in[0];
        for (int64_t i = 0; i < n; i++) acc[i] = prev[i] + x[i];
    }
    return MG_OK;
}

static void cost_accumulate(const mg_node *n, double *flops, double *bytes) {
    *flops = (double)mg_numel(n->in[0]);
    *bytes = 3.0 * 4.0 * (double)mg_numel(n->in[0]);
}

const mg_op_def mg_opdef_ACCUMULATE = {"accumulate", 2, 2, MG_OPF_NO_GRAD, infer_accumulate, NULL, cost_accumulate,
                                       accumulate_cpu, NULL, .shard = mg_shard_rule_linear};

/* ---- lr_schedule: () -> lr [1], weight decay [1] at this iteration -------------------- */
static int infer_lr(const mg_node *n, mg_tensor_desc *out, mg_error *err) {
    const mg_lr_schedule *s = &n->attrs.lr;
    /* Megatron's OptimizerParamScheduler asserts these */
    if (!(s->lr >= 0) || !(s->min_lr >= 0) || s->min_lr > s->lr || !(s->init_lr >= 0) || s->init_lr > s->lr ||
        !(s->warmup_steps >= 0) || s->decay_steps < 1 || s->steps_per_iter < 0 ||
        (s->style == MG_LR_WSD && (s->wsd_decay_steps < 1 || s->wsd_decay_steps > s->decay_steps)) ||
        mg_lr_ramp_invalid(s))
        return mg_shape_error(err, n, "invalid schedule (lr %g, min %g, init %g, warmup %g, decay %lld, wsd %lld)", s->lr,
                              s->min_lr, s->init_lr, s->warmup_steps, (long long)s->decay_steps,
                              (long long)s->wsd_decay_steps);
    if (!(s->wd_start >= 0) || !(s->wd_end >= 0) || (s->wd_style != MG_WD_CONSTANT && s->wd_incr_steps < 1))
        return mg_shape_error(err, n, "invalid weight-decay schedule (start %g, end %g, over %lld steps)", s->wd_start,
                              s->wd_end, (long long)s->wd_incr_steps);
    scalar_desc(&out[0]);
    scalar_desc(&out[1]);
    return 2;
}

static int lr_cpu(const mg_kernel_args *a, mg_error *err) {
    (void)err;
    int64_t step = a->info->iteration - a->info->skipped; /* (the scheduler counts updates) */
    ((float *)a->out[0])[0] = mg_lr_at_iteration(&a->node->attrs.lr, step);
    ((float *)a->out[1])[0] = mg_wd_at_iteration(&a->node->attrs.lr, step);
    return MG_OK;
}

const mg_op_def mg_opdef_LR_SCHEDULE = {"lr_schedule", 0, 0, MG_OPF_NO_GRAD, infer_lr, NULL, NULL, lr_cpu, NULL, .shard = mg_shard_rule_replicated};

/* ---- clip_coef: sum of squares [1] [, loss scale [1]] -> (coefficient [1], norm [1]) --
 * With the loss scale S (fp16's loss scaling, mg_graph_add_adamw_scaled) the sum of
 * squares is of gradients scaled by S: the norm reported is the unscaled gradients'
 * (sqrt / S) and the coefficient also unscales (clip / S), so that AdamW's g x coef is
 * the unscaled, clipped gradient (Megatron unscales main_grad, then clips). A sum that
 * is not finite is an overflow (Megatron's found_inf): the coefficient is NaN, which
 * tells AdamW nodes built with skip_nonfinite to leave everything as it is. */
static int infer_clip(const mg_node *n, mg_tensor_desc *out, mg_error *err) {
    for (int i = 0; i < n->n_in; i++)
        if (mg_numel(n->in[i]) != 1 || n->in[i]->dtype != MG_F32)
            return mg_shape_error(err, n, "inputs must be f32 scalars (a sum of squares, the loss scale)");
    scalar_desc(&out[0]);
    scalar_desc(&out[1]);
    return 2;
}

/* Megatron: coefficient max_norm / (norm + 1e-6), applied only when below one. */
static int clip_cpu(const mg_kernel_args *a, mg_error *err) {
    (void)err;
    double norm = sqrt((double)((const float *)a->in[0])[0]), unscale = 1.0;
    if (a->node->n_in > 1) {
        unscale = 1.0 / (double)((const float *)a->in[1])[0];
        norm *= unscale;
    }
    double max = a->node->attrs.clip.max_norm, c = 1.0;
    if (max > 0) {
        double k = max / (norm + 1e-6);
        if (k < 1.0) c = k;
    }
    c *= unscale;
    if (a->node->n_in > 1 && !isfinite(norm)) c = NAN; /* found_inf: skip the update */
    ((float *)a->out[0])[0] = (float)c;
    ((float *)a->out[1])[0] = (float)norm;
    return MG_OK;
}

const mg_op_def mg_opdef_CLIP_COEF = {"clip_coef", 1, 2, MG_OPF_NO_GRAD, infer_clip, NULL, NULL, clip_cpu, NULL, .shard = mg_shard_rule_replicated};

/* ---- adamw: (p, g, m, v, lr, coef [, wd]) -> (p', m', v') written in place ----------
 * Decay attrs.weight_decay, or attrs.weight_decay x wd with the scheduled wd input.
 * attrs.skip_nonfinite (loss scaling): a coefficient that is not finite (clip_coef's
 * found_inf) leaves p, m and v unchanged, as Megatron skips the step on an overflow. */
static int infer_adamw(const mg_node *n, mg_tensor_desc *out, mg_error *err) {
    const mg_tensor *p = n->in[0];
    for (int i = 1; i < 4; i++)
        if (!mg_same_shape(p, n->in[i]) || n->in[i]->dtype != MG_F32)
            return mg_shape_error(err, n, "parameter, gradient and moments must share one f32 shape");
    for (int i = 4; i < n->n_in; i++)
        if (mg_numel(n->in[i]) != 1 || n->in[i]->dtype != MG_F32)
            return mg_shape_error(err, n, "lr, clip coefficient and weight decay must be f32 scalars");
    for (int i = 0; i < 3; i++) mg_desc_of(p, &out[i]);
    return 3;
}

MG_SIMD static int adamw_cpu(const mg_kernel_args *a, mg_error *err) {
    (void)err;
    const mg_attr_adamw *c = &a->node->attrs.adamw;
    const float *p = a->in[0], *g = a->in[1], *m = a->in[2], *v = a->in[3];
    float lr = ((const float *)a->in[4])[0], coef = ((const float *)a->in[5])[0];
    float *po = a->out[0], *mo = a->out[1], *vo = a->out[2];
    int64_t n = mg_numel(a->node->in[0]);
    if (c->skip_nonfinite && !isfinite(coef)) { /* a skipped step: the state stays (in place: nothing to copy) */
        if (po != p) memcpy(po, p, (size_t)n * sizeof *po);
        if (mo != m) memcpy(mo, m, (size_t)n * sizeof *mo);
        if (vo != v) memcpy(vo, v, (size_t)n * sizeof *vo);
        return MG_OK;
    }
    double t = (double)(a->info->iteration - a->info->skipped + 1 - a->info->optim_start);
    /* bias corrections folded into two multipliers; one division per element */
    float ibc1 = (float)(1.0 / (1.0 - pow(c->beta1, t))), ibc2 = (float)(1.0 / (1.0 - pow(c->beta2, t)));
    float b1 = c->beta1, b2 = c->beta2, eps = c->eps, wd = c->weight_decay;
    if (a->node->n_in > 6) wd *= ((const float *)a->in[6])[0];
    /* p', m', v' are p, m, v (in place): element i reads and writes only index i, which
     * GCC cannot prove, so without ivdep it keeps the loop scalar */
#pragma GCC ivdep
    for (int64_t i = 0; i < n; i++) {
        float gi = g[i] * coef;
        float mi = b1 * m[i] + (1.0f - b1) * gi;
        float vi = b2 * v[i] + (1.0f - b2) * gi * gi;
        float upd = (mi * ibc1) / (sqrtf(vi * ibc2) + eps);
        po[i] = p[i] - lr * (upd + wd * p[i]);
        mo[i] = mi;
        vo[i] = vi;
    }
    return MG_OK;
}

static void cost_adamw(const mg_node *n, double *flops, double *bytes) {
    double e = (double)mg_numel(n->in[0]);
    *flops = 12 * e;
    *bytes = 4 * 7 * e;
}

/* Sharding (ops/op.h): the update runs on the parameter's block; gradient and moments
 * in the same state, the learning rate, clip coefficient and scheduled decay replicated. */
static int shard_adamw(const mg_node *n, const mg_shard_ctx *c, mg_shard_io *io, mg_error *err) {
    (void)c, (void)err;
    mg_sharding s = io->in[0];
    for (int i = 0; i < 4; i++) io->want[i] = s;
    for (int i = 4; i < n->n_in; i++) io->want[i] = mg_sh_full();
    for (int j = 0; j < 3; j++) io->out[j] = s;
    return MG_OK;
}

const mg_op_def mg_opdef_ADAMW = {"adamw", 6, 7, MG_OPF_NO_GRAD, infer_adamw, NULL, cost_adamw, adamw_cpu, NULL, .shard = shard_adamw};

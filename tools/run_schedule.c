/* Megatron's learning-rate schedule from its flags: get_optimizer_param_scheduler and
 * update_train_iters of megatron/training/training.py, and the assertions of
 * OptimizerParamScheduler.__init__. The schedule itself is mg_lr_at (graph/optimizer.c),
 * evaluated in the graph by the LR_SCHEDULE op. */
#include "run_schedule.h"

#include <string.h>

#include "mgraph/train.h"

static int style_of(const char *name, const char *const *names, int n) {
    for (int i = 0; i < n; i++)
        if (!strcmp(name, names[i])) return i;
    return -1;
}

/* Megatron's update_train_iters (as of 0b9bc20, the last version with the ramp): with a
 * ramp, the iterations that start while the samples consumed are <= both the ramp-up
 * samples and --train-samples (each at its ramp batch size), then the whole full
 * batches of what --train-samples leaves (a partial last batch is dropped). */
static int train_iters_of_samples(mg_run_config *c, const mg_lr_schedule *s, mg_error *err) {
    int64_t gbs = c->global_batch_size, iters = 0, consumed = 0;
    if (s->ramp_start > 0) {
        int64_t last = s->ramp_samples < c->train_samples ? s->ramp_samples : c->train_samples;
        /* the first iteration that starts past `last` (samples_before increases) */
        int64_t lo = 0, hi = last + 1;
        while (lo < hi) {
            int64_t mid = lo + (hi - lo) / 2;
            if (mg_lr_samples_before(s, mid) > last) hi = mid;
            else lo = mid + 1;
        }
        iters = lo;
        consumed = mg_lr_samples_before(s, lo);
    }
    if (c->train_samples > consumed) iters += (c->train_samples - consumed) / gbs;
    c->train_iters = iters;
    if (c->train_iters < 1)
        return mg_error_set(err, MG_ERR_INVALID, "--train-samples %lld is less than one global batch (%lld)",
                            (long long)c->train_samples, (long long)gbs);
    return MG_OK;
}

int mg_run_lr_schedule(mg_run_config *c, mg_lr_schedule *s, mg_error *err) {
    static const char *const styles[] = {"constant", "linear", "cosine", "inverse-square-root", "WSD"};
    static const char *const wsd_styles[] = {"exponential", "linear", "cosine", "minus_sqrt"};
    int64_t gbs = c->global_batch_size;
    memset(s, 0, sizeof *s);
    int st = style_of(c->lr_decay_style, styles, 5), wst = style_of(c->lr_wsd_decay_style, wsd_styles, 4);
    if (st < 0 || wst < 0)
        return mg_error_set(err, MG_ERR_INVALID, "unknown --lr-decay-style '%s' or --lr-wsd-decay-style '%s'",
                            c->lr_decay_style, c->lr_wsd_decay_style);
    s->style = (mg_lr_decay)st;
    s->wsd_style = (mg_lr_wsd_decay)wst;
    s->lr = c->lr;
    s->min_lr = c->min_lr;
    s->init_lr = c->lr_warmup_init;
    s->steps_per_iter = gbs;
    s->ramp_start = c->rampup_batch_size[0];
    s->ramp_increment = c->rampup_batch_size[1];
    s->ramp_samples = c->rampup_batch_size[2];
    const char *bad = mg_lr_ramp_invalid(s);
    if (bad)
        return mg_error_set(err, MG_ERR_INVALID, "--rampup-batch-size %lld %lld %lld with --global-batch-size %lld: %s",
                            (long long)s->ramp_start, (long long)s->ramp_increment, (long long)s->ramp_samples,
                            (long long)gbs, bad);
    bool by_samples = c->train_samples >= 0;
    const char *unit = by_samples ? "samples" : "iters";
    if (by_samples) {
        int rc = train_iters_of_samples(c, s, err);
        if (rc) return rc;
        s->decay_steps = c->lr_decay_samples >= 0 ? c->lr_decay_samples : c->train_samples;
        s->wsd_decay_steps = c->lr_wsd_decay_samples;
        s->warmup_steps = (double)c->lr_warmup_samples;
    } else {
        s->decay_steps = (c->lr_decay_iters >= 0 ? c->lr_decay_iters : c->train_iters) * gbs;
        s->wsd_decay_steps = c->lr_wsd_decay_iters >= 0 ? c->lr_wsd_decay_iters * gbs : -1;
        s->warmup_steps = (double)(c->lr_warmup_iters * gbs);
    }
    if (c->lr_warmup_fraction != -1) s->warmup_steps = (double)c->lr_warmup_fraction * (double)s->decay_steps;
    /* the weight decay's schedule spans the whole run (Megatron's wd_incr_steps) */
    static const char *const wd_styles[] = {"constant", "linear", "cosine"};
    int ws = style_of(c->weight_decay_incr_style, wd_styles, 3);
    if (ws < 0) return mg_error_set(err, MG_ERR_INVALID, "unknown --weight-decay-incr-style '%s'", c->weight_decay_incr_style);
    s->wd_style = (mg_wd_incr)ws;
    s->wd_start = ws ? c->start_weight_decay : c->weight_decay;
    s->wd_end = ws ? c->end_weight_decay : c->weight_decay;
    s->wd_incr_steps = by_samples ? c->train_samples : c->train_iters * gbs;
    if (!(s->warmup_steps < (double)s->decay_steps))
        return mg_error_set(err, MG_ERR_INVALID,
                            "the warmup (%g samples) must be shorter than the decay span (--lr-decay-%s, default "
                            "--train-%s: %lld samples), as Megatron's scheduler requires",
                            s->warmup_steps, unit, unit, (long long)s->decay_steps);
    if (s->style == MG_LR_WSD && s->wsd_decay_steps > s->decay_steps)
        return mg_error_set(err, MG_ERR_INVALID, "--lr-wsd-decay-%s is longer than the decay span (--lr-decay-%s)", unit,
                            unit);
    return MG_OK;
}

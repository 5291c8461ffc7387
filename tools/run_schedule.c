/* Megatron's learning-rate schedule from its flags: get_optimizer_param_scheduler and
 * update_train_iters of megatron/training/training.py, and the assertions of
 * OptimizerParamScheduler.__init__. The schedule itself is mg_lr_at (graph/optimizer.c),
 * evaluated in the graph by the LR_SCHEDULE op. */
#include "run_schedule.h"

#include <string.h>

static int style_of(const char *name, const char *const *names, int n) {
    for (int i = 0; i < n; i++)
        if (!strcmp(name, names[i])) return i;
    return -1;
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
    bool by_samples = c->train_samples >= 0;
    const char *unit = by_samples ? "samples" : "iters";
    if (by_samples) {
        c->train_iters = c->train_samples / gbs;
        if (c->train_iters < 1)
            return mg_error_set(err, MG_ERR_INVALID, "--train-samples %lld is less than one global batch (%lld)",
                                (long long)c->train_samples, (long long)gbs);
        s->decay_steps = c->lr_decay_samples >= 0 ? c->lr_decay_samples : c->train_samples;
        s->wsd_decay_steps = c->lr_wsd_decay_samples;
        s->warmup_steps = (double)c->lr_warmup_samples;
    } else {
        s->decay_steps = (c->lr_decay_iters >= 0 ? c->lr_decay_iters : c->train_iters) * gbs;
        s->wsd_decay_steps = c->lr_wsd_decay_iters >= 0 ? c->lr_wsd_decay_iters * gbs : -1;
        s->warmup_steps = (double)(c->lr_warmup_iters * gbs);
    }
    if (c->lr_warmup_fraction != -1) s->warmup_steps = (double)c->lr_warmup_fraction * (double)s->decay_steps;
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

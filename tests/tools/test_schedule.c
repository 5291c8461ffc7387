/* --rampup-batch-size against Megatron-LM's own ramp: tests/tools/ramp_vectors.txt was
 * written by tests/tools/gen_ramp_vectors.py, which runs Megatron's
 * RampupBatchsizeNumMicroBatchesCalculator and update_train_iters unchanged. For each
 * case: the iterations mg_run_lr_schedule sets from --train-samples, the batch of every
 * iteration (mg_lr_batch_at of mg_lr_samples_before), the samples before it, and the
 * learning rate the LR_SCHEDULE op gives it (the scheduler's at those samples). Also the
 * ramp's bad values, refused with a message, and the weight-decay schedule against
 * Megatron's get_wd written out by hand. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mgraph/train.h"
#include "run_config.h"
#include "run_schedule.h"
#include "testkit.h"

static void one_case(const char *line) {
    long long gbs, mbdp, start, inc, ramp, samples, iters;
    int used = 0;
    if (sscanf(line, "%lld %lld %lld %lld %lld %lld | %lld |%n", &gbs, &mbdp, &start, &inc, &ramp, &samples, &iters,
               &used) != 7) {
        TK_CHECK(0, "bad vector line: %s", line);
        return;
    }
    mg_run_config c;
    mg_run_config_defaults(&c);
    c.global_batch_size = (int)gbs;
    c.micro_batch_size = 1;
    c.train_iters = -1;
    c.train_samples = samples;
    c.rampup_batch_size[0] = start;
    c.rampup_batch_size[1] = inc;
    c.rampup_batch_size[2] = ramp;
    c.lr_decay_style = "cosine";
    c.min_lr = 1e-4f;
    c.lr_warmup_samples = samples / 10;
    mg_lr_schedule s;
    mg_error err = {0};
    if (mg_run_lr_schedule(&c, &s, &err) != MG_OK) {
        TK_CHECK(0, "%s: %s", line, err.msg);
        return;
    }
    TK_CHECK(c.train_iters == iters, "gbs %lld ramp %lld %lld %lld, %lld samples: Megatron trains %lld iterations, "
             "mgraph %lld", gbs, start, inc, ramp, samples, iters, (long long)c.train_iters);
    const char *p = line + used;
    int64_t it = 0, consumed = 0;
    long long b, k;
    int n = 0;
    while (sscanf(p, " %lldx%lld%n", &b, &k, &n) == 2) {
        p += n;
        for (long long j = 0; j < k; j++, it++) {
            int64_t before = mg_lr_samples_before(&s, it), got = mg_lr_batch_at(&s, before);
            if (before != consumed || got != b) {
                TK_CHECK(0, "gbs %lld ramp %lld %lld %lld: iteration %lld: Megatron %lld samples before, batch %lld; "
                         "mgraph %lld, %lld", gbs, start, inc, ramp, (long long)it, (long long)consumed, b,
                         (long long)before, (long long)got);
                return;
            }
            TK_CHECK(mg_lr_at_iteration(&s, it) == mg_lr_at(&s, consumed), "iteration %lld: lr not at step %lld",
                     (long long)it, (long long)consumed);
            consumed += b;
        }
    }
    TK_CHECK(it == iters, "gbs %lld ramp %lld %lld %lld: %lld batches listed for %lld iterations", gbs, start, inc, ramp,
             (long long)it, iters);
}

/* Values Megatron's calculator asserts against (or divides by zero on): refused by name. */
static void bad_ramps(void) {
    static const long long bad[][4] = {
        {16, 0, 8, 100},  /* start 0 */
        {16, 4, 0, 100},  /* increment 0 */
        {16, 4, 4, 0},    /* no ramp-up samples (Megatron divides by zero) */
        {16, 16, 4, 100}, /* start = global batch: no increments (division by zero) */
        {16, 20, 4, 100}, /* start above the global batch */
        {16, 4, 5, 100},  /* 12 is not a multiple of 5 */
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        mg_run_config c;
        mg_run_config_defaults(&c);
        c.global_batch_size = (int)bad[i][0];
        c.micro_batch_size = 1;
        c.train_iters = -1;
        c.train_samples = 1000;
        for (int k = 0; k < 3; k++) c.rampup_batch_size[k] = bad[i][k + 1];
        mg_lr_schedule s;
        mg_error err = {0};
        TK_CHECK(mg_run_lr_schedule(&c, &s, &err) == MG_ERR_INVALID && strstr(err.msg, "--rampup-batch-size"),
                 "ramp %lld %lld %lld with global batch %lld accepted (%s)", bad[i][1], bad[i][2], bad[i][3], bad[i][0],
                 err.msg);
    }
    /* no ramp: every iteration takes the global batch */
    mg_lr_schedule s = {.lr = 1e-3f, .decay_steps = 100, .steps_per_iter = 8};
    TK_CHECK(mg_lr_samples_before(&s, 5) == 40 && mg_lr_batch_at(&s, 40) == 8, "constant batch");
}

/* Megatron's OptimizerParamScheduler.get_wd: start + coeff (end - start), coeff = r
 * (linear) or 0.5 (cos(pi (1 - r)) + 1) (cosine), r = step / wd_incr_steps; end after. */
static void weight_decay_schedule(void) {
    mg_lr_schedule s = {.lr = 1e-3f, .decay_steps = 100, .steps_per_iter = 4, .wd_style = MG_WD_LINEAR,
                        .wd_start = 0.1f, .wd_end = 0.3f, .wd_incr_steps = 100};
    const struct { mg_wd_incr style; int64_t step; double want; } v[] = {
        {MG_WD_LINEAR, 0, 0.1},  {MG_WD_LINEAR, 25, 0.15}, {MG_WD_LINEAR, 100, 0.3}, {MG_WD_LINEAR, 150, 0.3},
        {MG_WD_COSINE, 0, 0.1},  {MG_WD_COSINE, 25, 0.1 + 0.2 * 0.5 * (cos(M_PI * 0.75) + 1.0)},
        {MG_WD_COSINE, 50, 0.2}, {MG_WD_COSINE, 100, 0.3}, {MG_WD_CONSTANT, 40, 0.3}};
    for (size_t i = 0; i < sizeof v / sizeof *v; i++) {
        s.wd_style = v[i].style;
        double got = mg_wd_at(&s, v[i].step);
        TK_CHECK(fabs(got - v[i].want) < 1e-7, "style %d step %lld: weight decay %.9g, want %.9g", (int)v[i].style,
                 (long long)v[i].step, got, v[i].want);
    }
    /* iteration 3 of global batch 4 runs at step 12 */
    s.wd_style = MG_WD_LINEAR;
    TK_CHECK(fabsf(mg_wd_at_iteration(&s, 3) - mg_wd_at(&s, 12)) == 0, "iteration 3 at step 12");
    /* mgraph-run's flags: over --train-iters x --global-batch-size samples, or --train-samples */
    mg_run_config c;
    mg_run_config_defaults(&c);
    c.global_batch_size = 8, c.micro_batch_size = 1, c.train_iters = 50;
    c.weight_decay_incr_style = "cosine", c.start_weight_decay = 0.0f, c.end_weight_decay = 0.5f;
    mg_error err = {0};
    TK_CHECK(mg_run_lr_schedule(&c, &s, &err) == MG_OK && s.wd_style == MG_WD_COSINE && s.wd_incr_steps == 400 &&
                 s.wd_start == 0.0f && s.wd_end == 0.5f,
             "cosine 0 -> 0.5 over 50 x 8 samples (%s)", err.msg);
    c.train_iters = -1, c.train_samples = 1000;
    TK_CHECK(mg_run_lr_schedule(&c, &s, &err) == MG_OK && s.wd_incr_steps == 1000, "over --train-samples (%s)", err.msg);
    c.weight_decay_incr_style = "constant", c.weight_decay = 0.02f;
    TK_CHECK(mg_run_lr_schedule(&c, &s, &err) == MG_OK && s.wd_style == MG_WD_CONSTANT && s.wd_end == 0.02f,
             "constant: --weight-decay (%s)", err.msg);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: test_tools_schedule ramp_vectors.txt\n");
        return 2;
    }
    FILE *f = fopen(argv[1], "r");
    if (!f) {
        fprintf(stderr, "cannot read %s\n", argv[1]);
        return 1;
    }
    static char line[1 << 16];
    int n_cases = 0;
    while (fgets(line, sizeof line, f)) {
        if (line[0] == '#' || line[0] == '\n') continue;
        one_case(line);
        n_cases++;
    }
    fclose(f);
    TK_CHECK(n_cases >= 10, "only %d vectors read", n_cases);
    bad_ramps();
    weight_decay_schedule();
    if (tk_failures) return 1;
    printf("ok: %d ramps as Megatron's calculator; the weight-decay schedule as Megatron's get_wd\n", n_cases);
    return 0;
}

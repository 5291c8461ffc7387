/* Megatron's log lines, formatted as training.py formats them, so that tools which
 * parse Megatron's logs read mgraph's. */
#include "run_log.h"

#include <math.h>
#include <string.h>
#include <time.h>

void mg_run_log_iteration(FILE *f, const mg_run_log_line *l) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    localtime_r(&ts.tv_sec, &tm);
    char when[32];
    strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", &tm);
    fprintf(f, " [%s.%06ld] iteration %8lld/%8lld | consumed samples: %12lld | elapsed time per iteration (ms): %.1f |",
            when, ts.tv_nsec / 1000, (long long)l->iteration, (long long)l->train_iters, (long long)l->consumed_samples,
            l->ms_per_iteration);
    if (l->with_throughput) fprintf(f, " throughput per GPU (TFLOP/s/GPU): %.1f |", l->tflops_per_rank);
    fprintf(f, " learning rate: %.6E | global batch size: %5d |", l->learning_rate, l->global_batch_size);
    if (!l->no_update) fprintf(f, " lm loss: %.6E |%s", l->lm_loss, l->extra ? l->extra : "");
    fprintf(f, " loss scale: %.1f |", l->loss_scale > 0 ? l->loss_scale : 1.0);
    if (!l->skipped) fprintf(f, " grad norm: %.3f |", l->grad_norm);
    if (!l->skipped && !isnan(l->num_zeros)) fprintf(f, " num zeros: %.0f |", l->num_zeros);
    if (!isnan(l->params_norm)) fprintf(f, " params norm: %.3f |", l->params_norm);
    fprintf(f, " number of skipped iterations: %3d | number of nan iterations: %3d |\n", l->skipped_iterations,
            l->nan_iterations);
}

double mg_run_ppl(double loss) { return exp(loss < 20 ? loss : 20); }

void mg_run_log_evaluation(FILE *f, const char *prefix, double loss) {
    char line[512];
    snprintf(line, sizeof line, " validation loss at %s | lm loss value: %.6E | lm loss PPL: %.6E | ", prefix, loss,
             mg_run_ppl(loss));
    size_t rule = strlen(line) + 1;
    for (size_t i = 0; i < rule; i++) fputc('-', f);
    fprintf(f, "\n%s\n", line);
    for (size_t i = 0; i < rule; i++) fputc('-', f);
    fputc('\n', f);
}

/* a scalar against the iteration, and the same against consumed samples */
static int pair(mg_tb_writer *w, const char *tag, double v, int64_t it, int64_t samples, mg_error *err) {
    char vs[128];
    snprintf(vs, sizeof vs, "%s vs samples", tag);
    int rc = mg_tb_scalar(w, tag, (float)v, it, err);
    return rc ? rc : mg_tb_scalar(w, vs, (float)v, samples, err);
}

int mg_run_tb_iteration(mg_tb_writer *w, const mg_run_log_line *l, double iteration_loss, mg_error *err) {
    int64_t it = l->iteration, n = l->consumed_samples;
    int rc = pair(w, "learning-rate", l->learning_rate, it, n, err);
    if (!rc) rc = pair(w, "batch-size", l->global_batch_size, it, n, err);
    if (!rc) rc = pair(w, "lm loss", iteration_loss, it, n, err);
    if (!rc) rc = pair(w, "loss-scale", l->loss_scale > 0 ? l->loss_scale : 1.0, it, n, err);
    if (!rc) rc = pair(w, "grad-norm", l->grad_norm, it, n, err);
    if (!rc && !l->skipped && !isnan(l->num_zeros)) rc = pair(w, "num-zeros", l->num_zeros, it, n, err);
    if (!rc && l->world_size > 0) rc = pair(w, "world-size", l->world_size, it, n, err);
    if (!rc && !isnan(l->params_norm)) rc = pair(w, "params-norm", l->params_norm, it, n, err);
    return rc;
}

void mg_run_log_memory(FILE *f, int rank, int64_t iteration, const mg_memory_stats *m) {
    const double mb = 1024.0 * 1024.0;
    fprintf(f, "[Rank %d] (after %lld iterations) memory (MB) | allocated: %.2f | max allocated: %.2f | reserved: %.2f | "
               "max reserved: %.2f\n",
            rank, (long long)iteration, (double)m->allocated_bytes / mb, (double)m->max_allocated_bytes / mb,
            (double)m->reserved_bytes / mb, (double)m->max_reserved_bytes / mb);
}

int mg_run_tb_memory(mg_tb_writer *w, int64_t iteration, const mg_memory_stats *m, mg_error *err) {
    int rc = mg_tb_scalar(w, "mem-reserved-bytes", (float)m->reserved_bytes, iteration, err);
    if (!rc) rc = mg_tb_scalar(w, "mem-allocated-bytes", (float)m->allocated_bytes, iteration, err);
    if (!rc) rc = mg_tb_scalar(w, "mem-max-allocated-bytes", (float)m->max_allocated_bytes, iteration, err);
    if (!rc) rc = mg_tb_scalar(w, "mem-allocated-count", (float)m->allocation_count, iteration, err);
    return rc;
}

int mg_run_tb_moe(mg_tb_writer *w, int64_t iteration, int n, const char *const *names, const double *values,
                  mg_error *err) {
    int rc = MG_OK;
    for (int i = 0; i < n && !rc; i++) rc = mg_tb_scalar(w, names[i], (float)values[i], iteration, err);
    return rc;
}

int mg_run_tb_timers(mg_tb_writer *w, const mg_run_log_line *l, mg_error *err) {
    int rc = mg_tb_scalar(w, "iteration-time", (float)(l->ms_per_iteration * 1e-3), l->iteration, err);
    if (!rc && l->with_throughput) rc = mg_tb_scalar(w, "throughput", (float)l->tflops_per_rank, l->iteration, err);
    return rc;
}

int mg_run_tb_evaluation(mg_tb_writer *w, int64_t iteration, int64_t consumed, double loss, bool ppl, mg_error *err) {
    int rc = pair(w, "lm loss validation", loss, iteration, consumed, err);
    if (!rc && ppl) rc = pair(w, "lm loss validation ppl", mg_run_ppl(loss), iteration, consumed, err);
    return rc;
}

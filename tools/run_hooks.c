/* mgraph-run's hooks on the trainer (tools/run_hooks.h). */
#include "run_hooks.h"

#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mgraph/generate.h"
#include "run_log.h"
#include "tool_signals.h"

/* ---- the metrics file --------------------------------------------------------------------
 * The logger writes whole JSON lines, flushed one by one, into a temporary file beside
 * the target (mg_outfile), so a write error (disk full, /dev/full) is seen at the
 * record that hit it and ends the run with exit 1, leaving no file cut mid-record. The
 * file is renamed into place when the run ends: on success, and also on a run-time
 * failure (a NaN, a data error): its records are whole and tell how the run got
 * there. The fatal paths (SIGTERM, SIGINT, SIGHUP, SIGBUS in an input, the watchdog:
 * tools/tool_signals.c) rename it too through mg_run_keep_metrics (rename is
 * async-signal-safe and the temporary file holds only flushed whole records), so a
 * stopped job keeps its metrics; during the run they can be followed in the temporary file, whose name is
 * printed at the start. Devices (/dev/null) are written in place, never removed. */
static char g_metrics_tmp[PATH_MAX], g_metrics_path[PATH_MAX];
static volatile sig_atomic_t g_metrics_armed;

void mg_run_keep_metrics(void) {
    if (g_metrics_armed) {
        g_metrics_armed = 0;
        rename(g_metrics_tmp, g_metrics_path);
    }
}

/* --distributed-timeout-minutes expired (scheduler/watchdog.c): a peer is stopped or hung,
 * so this rank cannot finish its collective. Say which wait, keep the metrics' whole
 * records as a stop signal does, and end: mpirun then ends every rank (the stopped one
 * included). A failure, so exit 1. */
void mg_run_on_wait_expired(const char *msg, void *ctx) {
    (void)ctx;
    fprintf(stderr, "mgraph-run: failed: %s\n", msg);
    fflush(stdout);
    fflush(stderr);
    mg_tool_fatal_cleanup();
    _exit(1);
}

static int metrics_open(mg_run_hooks *h, mg_error *err) {
    const char *path = h->cfg->metrics_file;
    int rc = mg_outfile_open(path, "--metrics-file", NULL, &h->metrics, err);
    if (rc) return rc;
    const char *tmp = mg_outfile_temp_path(h->metrics);
    if (tmp && strlen(tmp) < sizeof g_metrics_tmp && strlen(path) < sizeof g_metrics_path) {
        strcpy(g_metrics_tmp, tmp);
        strcpy(g_metrics_path, path);
        g_metrics_armed = 1;
        printf("mgraph-run: metrics are written to %s, which becomes %s when the run ends\n", tmp, path);
    }
    return MG_OK;
}

/* A number as JSON has it: NaN and Inf are not numbers there, they become null. */
static const char *json_number(char buf[32], double v) {
    if (isfinite(v)) snprintf(buf, 32, "%.9e", v);
    else snprintf(buf, 32, "null");
    return buf;
}

/* One whole record, flushed. */
__attribute__((format(printf, 3, 4))) static int metrics_record(mg_run_hooks *h, mg_error *err, const char *fmt, ...) {
    if (!h->metrics) return MG_OK;
    va_list ap;
    va_start(ap, fmt);
    vfprintf(mg_outfile_stream(h->metrics), fmt, ap);
    va_end(ap);
    int rc = mg_outfile_flush(h->metrics, err);
    if (rc) h->metrics_failed = true;
    else h->metrics_records++;
    return rc;
}

int mg_run_hooks_open(mg_run_hooks *h, const mg_run_config *cfg, int rank, int world, mg_error *err) {
    memset(h, 0, sizeof *h);
    h->cfg = cfg;
    h->rank = rank;
    h->logger = rank == world - 1;
    int rc = MG_OK;
    if (cfg->metrics_file && h->logger) rc = metrics_open(h, err);
    if (!rc && cfg->tensorboard_dir && h->logger) rc = mg_tb_open(cfg->tensorboard_dir, &h->tb, err);
    return rc;
}

/* Puts the metrics file in place or discards it; a failed run that wrote no record
 * leaves whatever was at the target alone. The event file is put in place by a run
 * that succeeded only. */
int mg_run_hooks_close(mg_run_hooks *h, bool ok, bool started, mg_error *err) {
    g_metrics_armed = 0;
    mg_outfile *m = h->metrics;
    h->metrics = NULL;
    int rc = MG_OK;
    if (m) {
        bool keep = ok || started;
        if (!keep || h->metrics_failed || (!h->metrics_records && !ok)) mg_outfile_abort(m);
        else rc = mg_outfile_commit(m, err);
    }
    mg_tb_writer *tb = h->tb;
    h->tb = NULL;
    if (ok && !rc && tb) rc = mg_tb_close(tb, err);
    else mg_tb_abort(tb);
    mg_run_trace_close(&h->trace);
    free(h->gen_prompt);
    h->gen_prompt = NULL;
    return rc;
}

/* ---- --sample-interval: text from the weights being trained, as llm.c prints it -------------- */
enum { SAMPLE_TOKENS = 32 };

int mg_run_hooks_sampling(mg_run_hooks *h, mg_tokenizer *tok, const mg_gpt_config *model, const mg_plan *p,
                          mg_error *err) {
    h->tok = tok;
    h->model = model;
    int world = mg_world_size();
    if ((p->tp > 1 && world != p->tp) || p->pp > 1 || p->cp > 1 || p->ep > 1 || p->fsdp == MG_FSDP_OPTIM_GRADS_PARAMS)
        return mg_error_set(err, MG_ERR_INVALID,
                            "--sample-interval decodes on rank 0's weights, or on a tensor-parallel group's spanning "
                            "every rank, which this plan shards otherwise (tp %d, pp %d, cp %d, ep %d, %d ranks%s): "
                            "data-parallel or tensor-parallel plans only, for now",
                            p->tp, p->pp, p->cp, p->ep, world, p->fsdp == MG_FSDP_OPTIM_GRADS_PARAMS ? ", fsdp" : "");
    h->gen_tp = p->tp > 1;
    if (h->gen_tp) { /* the decode graphs' plan: the training's tensor parallelism (no sequence parallelism: one token) */
        mg_plan_defaults(&h->gen_plan);
        h->gen_plan.tp = p->tp;
        h->gen_plan.etp = p->etp;
    }
    const char *text = h->cfg->sample_prompt;
    if (text) {
        int rc = mg_tokenizer_encode(tok, text, strlen(text), &h->gen_prompt, &h->gen_n, err);
        if (rc) return rc;
        if (h->gen_n == 0) return mg_error_set(err, MG_ERR_INVALID, "--sample-prompt encodes to no token");
    } else { /* llm.c starts its samples from the end-of-text token */
        int32_t eod = mg_tokenizer_eod(tok);
        if (eod < 0)
            return mg_error_set(err, MG_ERR_INVALID, "--sample-interval: this tokenizer has no end-of-document token "
                                                     "to start from; give --sample-prompt");
        if (!(h->gen_prompt = malloc(sizeof *h->gen_prompt))) return mg_error_set(err, MG_ERR_NOMEM, "out of memory");
        h->gen_prompt[0] = eod;
        h->gen_n = 1;
    }
    if ((int64_t)h->gen_n >= model->max_position)
        return mg_error_set(err, MG_ERR_INVALID,
                            "--sample-prompt has %zu tokens: the model has %lld positions (--max-position-embeddings), "
                            "none left to sample",
                            h->gen_n, (long long)model->max_position);
    return MG_OK;
}

/* Rank 0: SAMPLE_TOKENS greedy tokens after the prompt (fewer when the positions end),
 * from the weights as this iteration left them (borrowed from the training storage;
 * under tensor parallelism copied from each rank's blocks, every rank decoding),
 * stopping at the end-of-document token; the other ranks go on. */
static int sample_print(mg_run_hooks *h, mg_trainer *t, int64_t iteration, mg_error *err) {
    if (h->rank != 0 && !h->gen_tp) return MG_OK;
    mg_sampler smp = {0};
    mg_generation out = {0};
    int64_t left = h->model->max_position - (int64_t)h->gen_n; /* (>= 1: mg_run_hooks_sampling) */
    mg_generate_parallel par = {&h->gen_plan, mg_trainer_mesh(t), mg_trainer_comm(t), mg_trainer_rank_graph(t, false)->graph};
    mg_generate_options o = {.sampling = {.greedy = true}, .max_new = left < SAMPLE_TOKENS ? left : SAMPLE_TOKENS,
                             .eod = mg_tokenizer_eod(h->tok), .parallel = h->gen_tp ? &par : NULL};
    int64_t v = mg_tokenizer_vocab_size(h->tok);
    int rc = mg_sampler_init(&smp, v < h->model->vocab ? v : h->model->vocab);
    if (rc) return mg_error_set(err, rc, "out of memory");
    rc = mg_gpt_generate(h->model, mg_trainer_storage(t, false), h->gen_prompt, (int64_t)h->gen_n, &o, 0, &smp, &out,
                         err);
    char *text = NULL;
    size_t len = 0;
    if (!rc) { /* the new tokens, without the end-of-document one */
        size_t n = out.ids.len - h->gen_n - (!strcmp(out.stop, "eos") ? 1 : 0);
        rc = mg_tokenizer_decode(h->tok, out.ids.data + h->gen_n, n, &text, &len, err);
    }
    if (!rc && h->rank == 0) {
        printf("sample at iteration %lld (greedy, %zu tokens, %.2f s): %s%.*s\n", (long long)iteration,
               out.ids.len - h->gen_n, out.prefill_s + out.decode_s, h->cfg->sample_prompt ? h->cfg->sample_prompt : "",
               (int)len, text);
        fflush(stdout);
    }
    free(text);
    mg_generation_free(&out);
    mg_sampler_free(&smp);
    return rc;
}

/* ---- the hooks ---------------------------------------------------------------------------- */
/* Test hook (MGRAPH_TEST_NAN_AT=RANK:ITERATION): this rank's first weight element
 * becomes NaN before that iteration, the way a bad kernel or bit flip on one rank
 * would show. Tests use it to check that one rank's NaN ends every rank. */
static void poison_a_weight(mg_trainer *t) {
    const mg_graph *g = mg_trainer_rank_graph(t, false)->graph;
    for (int i = 0; i < mg_graph_n_tensors(g); i++) {
        mg_tensor *w = mg_graph_tensor(g, i);
        if (w->role != MG_ROLE_PARAM || w->dtype != MG_F32 || mg_numel(w) == 0) continue;
        *(float *)mg_storage_data(mg_trainer_storage(t, false), w) = NAN;
        return;
    }
}

static int before_step(void *user, mg_trainer *t, int64_t it, mg_error *err) {
    mg_run_hooks *h = user;
    if (it + 1 == h->nan_at) poison_a_weight(t);
    return mg_run_trace_before(&h->trace, mg_trainer_engine(t), it, err);
}

static int after_step(void *user, mg_trainer *t, const mg_step_result *r, mg_error *err) {
    mg_run_hooks *h = user;
    const mg_run_config *c = h->cfg;
    int64_t it = r->iteration - 1;
    int rc = mg_run_trace_after(&h->trace, mg_trainer_engine(t), it, err);
    if (rc) return rc;
    const mg_lr_schedule *schedule = &mg_trainer_config_of(t)->optim.lr;
    double ms = r->ms;
    /* --fp16: gradients that overflowed (Megatron's found_inf) skipped the update; the
     * scheduler counts updates only, and Megatron logs its rate after this iteration's
     * step (the next one's) */
    bool fp16 = c->fp16, skip_here = r->skipped;
    h->interval_skipped += skip_here;
    float lr_logged = mg_lr_at_iteration(schedule, it + 1 - mg_trainer_skipped(t));
    double tps = (double)r->global_batch * c->seq_length / (ms * 1e-3);
    double tflops = r->flops / (ms * 1e-3 * 1e12);
    /* Without --check-for-nan-in-loss-and-grad the run goes on and the log line counts
     * the iterations whose loss or gradient norm was not finite. fp32 has no loss
     * scaler, so no iteration is skipped (Megatron's fp32 optimizer applies every
     * update too). With --fp16 a gradient norm that is not finite is the loss scaler's
     * (a skipped iteration), and only the loss is checked; a skipped iteration's loss
     * leaves the average, and counts as a nan iteration when it is not finite, as
     * Megatron's training_log counts them. */
    bool nan_here = !isfinite(r->loss) || (!fp16 && !isfinite(r->grad_norm));
    h->interval_nan += nan_here;
    char jl[32], jg[32], jm[32], jp[128] = "", jscale[96] = "", metric_json[512] = "", metric_log[512] = "";
    /* --log-params-norm: after the step, as Megatron's calc_params_l2_norm */
    bool with_pn = mg_trainer_train_step(t)->opt.params_norm != NULL;
    if (with_pn) {
        char v[32];
        snprintf(jp, sizeof jp, ", \"params_norm\": %s", json_number(v, r->params_norm));
    }
    /* --log-num-zeros-in-grad: the zeros of the gradients the optimizer saw (none on a
     * skipped iteration, as Megatron's optimizer returns none) */
    bool with_nz = mg_trainer_train_step(t)->opt.num_zeros != NULL;
    double nz = with_nz && !skip_here ? r->num_zeros : (double)NAN;
    if (with_nz) {
        size_t o = strlen(jp);
        if (isnan(nz)) snprintf(jp + o, sizeof jp - o, ", \"num_zeros\": null");
        else snprintf(jp + o, sizeof jp - o, ", \"num_zeros\": %.0f", nz);
    }
    /* the model's metrics (MoE: Megatron's load_balancing_loss and z_loss, without
     * coefficients, mean over MoE layers), after the lm loss */
    for (int i = 0; i < r->n_metrics; i++) {
        if (!nan_here && !skip_here) h->metric_sum[i] += r->metrics[i];
        size_t o = strlen(metric_json);
        snprintf(metric_json + o, sizeof metric_json - o, ", \"%s\": %s", r->metric_names[i],
                 json_number(jm, r->metrics[i]));
    }
    if (fp16) /* the scale after this iteration's update, as Megatron logs it */
        snprintf(jscale, sizeof jscale, ", \"loss_scale\": %.9g, \"skipped\": %s", r->loss_scale,
                 skip_here ? "true" : "false");
    rc = metrics_record(h, err,
                        "{\"iteration\": %lld, \"lm_loss\": %s%s, \"lr\": %.9e, \"grad_norm\": %s%s%s, \"elapsed_ms\": %.3f, "
                        "\"tokens_per_s\": %.1f, \"tflops\": %.6f}\n",
                        (long long)it + 1, json_number(jl, r->loss), metric_json, r->lr, json_number(jg, r->grad_norm), jp,
                        jscale, ms, tps, tflops);
    if (rc) return rc;
    h->interval_ms += ms;
    if (!nan_here && !skip_here) h->interval_loss += r->loss; /* the average is over the updates' finite losses */
    h->interval_out += nan_here || skip_here;
    h->interval_n++;
    /* Megatron prints every --log-interval iterations and after the first one of the
     * run; the first line does not restart the averages */
    bool first = it == h->start, due = (it + 1) % c->log_interval == 0;
    double avg_ms = h->interval_ms / h->interval_n;
    int in_n = h->interval_n - h->interval_out; /* (out: not in the averages) */
    char shown[MG_STEP_MAX_METRICS][32];
    const char *tb_names[MG_STEP_MAX_METRICS];
    for (int i = 0; i < r->n_metrics; i++) {
        size_t o = strlen(metric_log);
        double avg = in_n > 0 ? h->metric_sum[i] / in_n : (double)NAN;
        int k = 0, end = 0;
        tb_names[i] = r->metric_names[i];
        /* multi-token prediction's depth k: Megatron's "mtp_<k> loss", printed as its lm loss
         * (an entry of total_loss_dict; track_mtp_metrics) */
        if (sscanf(r->metric_names[i], "mtp_%d_loss%n", &k, &end) == 1 && !r->metric_names[i][end]) {
            snprintf(shown[i], sizeof shown[i], "mtp_%d loss", k);
            tb_names[i] = shown[i];
            snprintf(metric_log + o, sizeof metric_log - o, " %s: %.6E |", shown[i], avg);
        } else {
            snprintf(metric_log + o, sizeof metric_log - o, " %s: %.2f |", r->metric_names[i], avg);
        }
    }
    mg_run_log_line l = {it + 1, c->train_iters, r->consumed_samples, avg_ms, c->log_throughput,
                         r->flops / (avg_ms * 1e-3 * 1e12), lr_logged, (int)r->global_batch,
                         in_n > 0 ? h->interval_loss / in_n : (double)NAN, r->grad_norm,
                         with_pn ? r->params_norm : (double)NAN, h->interval_nan, metric_log,
                         c->log_world_size_to_tensorboard ? mg_trainer_mesh(t)->world : 0, fp16 ? r->loss_scale : 1.0,
                         h->interval_skipped, skip_here, h->interval_skipped == h->interval_n,
                         nz};
    if (h->logger && (due || first)) {
        mg_run_log_iteration(stdout, &l);
        fflush(stdout);
    }
    /* Megatron's report_memory on each data-parallel group's first rank, at the log lines
     * until one past the run's first iteration (the first line, then the next) */
    if (!h->memory_reported && (due || first) && mg_trainer_mesh(t)->coord[MG_GROUP_DP] == 0) {
        mg_memory_stats ms;
        mg_memory_get_stats(&ms);
        mg_run_log_memory(stdout, h->rank, it + 1, &ms);
        fflush(stdout);
    }
    if ((due || first) && it + 1 > h->start + 1) h->memory_reported = true;
    if (h->tb && (it + 1) % c->tensorboard_log_interval == 0) rc = mg_run_tb_iteration(h->tb, &l, r->loss, err);
    if (!rc && h->tb && (it + 1) % c->tensorboard_log_interval == 0 && c->log_memory_to_tensorboard) {
        mg_memory_stats ms;
        mg_memory_get_stats(&ms);
        rc = mg_run_tb_memory(h->tb, it + 1, &ms, err);
    }
    if (!rc && h->tb && r->n_metrics > 0) /* every iteration, as track_moe_metrics */
        rc = mg_run_tb_moe(h->tb, it + 1, r->n_metrics, tb_names, r->metrics, err);
    if (!rc && h->tb && due && !first && c->log_timers_to_tensorboard) rc = mg_run_tb_timers(h->tb, &l, err);
    if (rc) return rc;
    if (due) {
        h->interval_ms = h->interval_loss = 0;
        memset(h->metric_sum, 0, sizeof h->metric_sum);
        h->interval_n = h->interval_nan = h->interval_skipped = h->interval_out = 0;
    }
    if (c->sample_interval > 0 && (it + 1) % c->sample_interval == 0) return sample_print(h, t, it + 1, err);
    return MG_OK;
}

/* Megatron's evaluate_and_print_results: "iteration N" during training, "iteration N on
 * validation set" / "on test set" after it. */
static int evaluated(void *user, mg_trainer *t, const mg_eval_result *e, mg_error *err) {
    mg_run_hooks *h = user;
    if (!h->logger) return MG_OK;
    char prefix[96];
    if (e->after_training)
        snprintf(prefix, sizeof prefix, "iteration %lld on %s set", (long long)e->iteration,
                 e->split == MG_SPLIT_TEST ? "test" : "validation");
    else snprintf(prefix, sizeof prefix, "iteration %lld", (long long)e->iteration);
    mg_run_log_evaluation(stdout, prefix, e->loss);
    fflush(stdout);
    char jv[32];
    int rc = metrics_record(h, err, "{\"iteration\": %lld, \"%s\": %s%s}\n", (long long)e->iteration,
                            e->split == MG_SPLIT_TEST ? "test_loss" : "val_loss", json_number(jv, e->loss),
                            e->after_training ? ", \"after_training\": true" : "");
    if (!rc && h->tb)
        rc = mg_run_tb_evaluation(h->tb, e->iteration, mg_lr_samples_before(&mg_trainer_config_of(t)->optim.lr, e->iteration),
                                  e->loss, h->cfg->log_validation_ppl_to_tensorboard, err);
    return rc;
}

static int saved(void *user, mg_trainer *t, int64_t iteration, double ms, mg_error *err) {
    (void)t;
    (void)err;
    mg_run_hooks *h = user;
    if (h->rank == 0) {
        printf("  successfully saved checkpoint from iteration %7lld to %s [ t %.1f ms ]\n", (long long)iteration,
               h->cfg->save, ms);
        fflush(stdout);
    }
    return MG_OK;
}

/* An early exit (after the save, if any): a trace under way is written with the
 * iterations it has (tools/run_trace.h), then Megatron's line. */
static int exiting(void *user, mg_trainer *t, const char *why, mg_error *err) {
    mg_run_hooks *h = user;
    int rc = mg_run_trace_end_early(&h->trace, mg_trainer_engine(t), mg_trainer_iteration(t) - 1, h->logger, err);
    if (rc) return rc;
    if (h->logger) {
        printf(" exiting program %s\n", why);
        fflush(stdout);
    }
    return MG_OK;
}

typedef struct tb_args_ctx {
    mg_tb_writer *tb;
    int64_t step;
    mg_error *err;
} tb_args_ctx;

static int tb_arg(void *ctx, const char *name, const char *value) {
    tb_args_ctx *a = ctx;
    return mg_tb_text(a->tb, name, value, a->step, a->err);
}

int mg_run_hooks_attach(mg_run_hooks *h, mg_trainer *t, mg_error *err) {
    const mg_run_config *c = h->cfg;
    h->start = mg_trainer_iteration(t);
    const char *v = getenv("MGRAPH_TEST_NAN_AT");
    int rank = -1;
    long long at = 0;
    if (v && sscanf(v, "%d:%lld", &rank, &at) == 2 && rank == h->rank && at > 0) h->nan_at = at;
    int rc = c->skip_train ? MG_OK
                           : mg_run_trace_open(&h->trace, c->trace_file, c->trace_iterations, h->start, c->train_iters,
                                               h->rank, err);
    /* Megatron's write_args_to_tensorboard: every argument as a text summary at the
     * iteration the run starts from (Megatron's names and Python's str() of each value) */
    if (!rc && h->tb) {
        tb_args_ctx a = {h->tb, h->start, err};
        rc = mg_run_config_each_arg(c, tb_arg, &a);
    }
    mg_trainer_hooks hk = {h, before_step, after_step, evaluated, saved, exiting};
    return rc ? rc : mg_trainer_add_hooks(t, &hk, err);
}

/* The training loop (include/mgraph/trainer.h, mg_trainer_train): Megatron's train()
 * with its evaluation, saving and early exits; everything else a run prints or writes
 * (the log line, metrics, TensorBoard, traces) is a hook's. */
#include <mpi.h>
#include <signal.h>
#include <string.h>

#include "mgraph/dataset.h"
#include "runtime/trainer_internal.h"

/* ---- the exit signal -------------------------------------------------------------------------
 * Megatron's DistributedSignalHandler: the signal only sets a flag; at the end of each
 * iteration the ranks learn whether any of them got it (one integer, all-reduced), then
 * save (with a save directory) and end, as after exit_interval. A cluster's preemption
 * (SLURM signals every task) thus costs at most the iteration under way. A second signal
 * meets the handler this one replaced: a stuck run can still be stopped. */
static volatile sig_atomic_t g_exit_signalled;
static struct sigaction g_exit_prev;

static void on_exit_signal(int sig) {
    g_exit_signalled = 1;
    sigaction(sig, &g_exit_prev, NULL); /* (async-signal-safe) */
}

static void exit_signal_install(int sig) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_exit_signal;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(sig, &sa, &g_exit_prev);
}

static bool exit_signalled(const mg_trainer *t) {
    int got = g_exit_signalled;
    if (t->collective) mg_rt_allreduce(&got, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD, "the exit signal's all-reduce");
    return got != 0;
}

static const char *signal_name(int sig) {
    switch (sig) {
    case SIGTERM: return "SIGTERM";
    case SIGINT: return "SIGINT";
    case SIGHUP: return "SIGHUP";
    case SIGUSR1: return "SIGUSR1";
    case SIGUSR2: return "SIGUSR2";
    default: return "the exit signal";
    }
}

/* ---- evaluation and saving, with their hooks ------------------------------------------------- */
/* Which splits get evaluated: Megatron's do_valid / do_test (a split with samples and
 * eval_iters > 0). */
static bool has_split(const mg_trainer *t, int split) {
    return t->cfg.eval && t->cfg.eval_iters > 0 && t->cfg.data.num_samples &&
           t->cfg.data.num_samples(t->cfg.data.user, split) > 0;
}

static int evaluate(mg_trainer *t, int split, bool after, mg_error *err) {
    mg_eval_result e = {split, t->iteration, 0, after};
    int rc = mg_trainer_evaluate(t, split, &e.loss, err);
    for (int h = 0; h < t->n_hooks && !rc; h++)
        if (t->hooks[h].evaluated) rc = t->hooks[h].evaluated(t->hooks[h].user, t, &e, err);
    return rc;
}

int mg_trainer_evaluate_at_end(mg_trainer *t, mg_error *err) {
    static const int splits[] = {MG_SPLIT_VALID, MG_SPLIT_TEST};
    int rc = mg_trainer_start(t, err);
    for (int k = 0; k < 2 && !rc; k++)
        if (has_split(t, splits[k])) rc = evaluate(t, splits[k], true, err);
    return rc;
}

static int save(mg_trainer *t, mg_error *err) {
    double t0 = mg_trainer_now();
    int rc = mg_trainer_save(t, err);
    double ms = 1e3 * (mg_trainer_now() - t0);
    if (t->cfg.ckpt.async_save) return rc; /* (its finalize calls the hooks) */
    for (int h = 0; h < t->n_hooks && !rc; h++)
        if (t->hooks[h].saved) rc = t->hooks[h].saved(t->hooks[h].user, t, t->iteration, ms, err);
    return rc;
}

/* Megatron's checkpoint_and_decide_exit: why to stop after this iteration ("" : not). */
static void decide_exit(mg_trainer *t, char *why, size_t len) {
    const mg_trainer_config *c = &t->cfg;
    why[0] = '\0';
    if (c->exit_signal && exit_signalled(t)) snprintf(why, len, "after receiving %s", signal_name(c->exit_signal));
    if (!*why && c->exit_duration_mins > 0) {
        /* every rank takes the latest clock */
        double mins = (mg_trainer_now() - t->t_created) / 60.0;
        if (t->collective)
            mg_rt_allreduce(&mins, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD, "--exit-duration-in-mins's all-reduce");
        if (mins > c->exit_duration_mins) snprintf(why, len, "after %g minutes", mins);
    }
    if (!*why && c->exit_interval > 0 && t->iteration % c->exit_interval == 0)
        snprintf(why, len, "at iteration %lld", (long long)t->iteration);
}

int mg_trainer_train(mg_trainer *t, mg_error *err) {
    const mg_trainer_config *c = &t->cfg;
    int rc = mg_trainer_start(t, err);
    if (rc) return rc;
    if (c->exit_signal) exit_signal_install(c->exit_signal);
    const char *save_dir = c->ckpt.save;
    while (t->iteration < c->train_iters) {
        mg_step_result r;
        rc = mg_trainer_step(t, &r, err);
        if (!rc && c->eval_interval > 0 && has_split(t, MG_SPLIT_VALID) && t->iteration % c->eval_interval == 0)
            rc = evaluate(t, MG_SPLIT_VALID, false, err);
        bool saved = false;
        if (!rc && save_dir &&
            ((c->ckpt.save_interval > 0 && t->iteration % c->ckpt.save_interval == 0) || t->iteration == c->train_iters)) {
            rc = save(t, err);
            saved = true;
        }
        /* Megatron's non-persistent checkpoint, between the persistent ones */
        if (!rc && !saved && c->ckpt.non_persistent_dir && c->ckpt.non_persistent_interval > 0 &&
            t->iteration % c->ckpt.non_persistent_interval == 0)
            rc = mg_trainer_save_non_persistent(t, err);
        if (rc) return rc;
        /* after the exit signal (any rank's), after exit_duration_mins (from the start of
         * the run) or at a multiple of exit_interval: save if not saved, say so and end,
         * without the final evaluation */
        char why[96];
        decide_exit(t, why, sizeof why);
        if (*why && t->iteration < c->train_iters) {
            if (save_dir && !saved && (rc = save(t, err))) return rc;
            if ((rc = mg_trainer_save_finalize(t, err))) return rc; /* an async save, in place before the exit */
            for (int h = 0; h < t->n_hooks && !rc; h++)
                if (t->hooks[h].exiting) rc = t->hooks[h].exiting(t->hooks[h].user, t, why, err);
            return rc;
        }
    }
    if ((rc = mg_trainer_save_finalize(t, err))) return rc; /* the last async save, in place */
    return mg_trainer_evaluate_at_end(t, err);
}

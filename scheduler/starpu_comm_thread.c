/* Collectives off the workers: one communication thread per engine.
 *
 * A collective is a blocking MPI call. Run on a StarPU worker, it holds that worker
 * until every peer arrives, and a rank with one worker then computes nothing while
 * it communicates. Instead, a collective's task hands its kernel to this thread and
 * returns at once: starpu_task_end_dep_add() keeps the task from terminating, so its
 * successors (and everything waiting on its buffers, through StarPU's implicit
 * dependencies) still wait, until the thread has finished the call and released the
 * task with starpu_task_end_dep_release(). The worker meanwhile runs compute tasks:
 * gradient all-reduces and reduce-scatters overlap the rest of the backward pass.
 *
 * The engine's comm token already runs a rank's collectives one at a time in seq
 * order; this thread is the only one calling MPI during a step, which is what
 * MPI_THREAD_SERIALIZED allows. Enabled by mg_engine_options.comm_thread.
 */
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ops/op.h"
#include "scheduler/starpu_internal.h"

#define QCAP 64

typedef struct comm_job {
    mg_task_inst *ti;
    mg_kernel_fn fn;
    struct starpu_task *task;
} comm_job;

struct mg_comm_thread {
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    comm_job q[QCAP];
    int head, len;
    bool stop;
    double busy_s; /* time inside collectives, this step */
};

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void *loop(void *p) {
    mg_engine *e = p;
    mg_comm_thread *ct = e->comm_thread;
    for (;;) {
        pthread_mutex_lock(&ct->mu);
        while (!ct->len && !ct->stop) pthread_cond_wait(&ct->cv, &ct->mu);
        if (!ct->len && ct->stop) {
            pthread_mutex_unlock(&ct->mu);
            return NULL;
        }
        comm_job j = ct->q[ct->head];
        ct->head = (ct->head + 1) % QCAP;
        ct->len--;
        pthread_mutex_unlock(&ct->mu);

        const mg_node *nd = j.ti->arg->node;
        if (!atomic_load_explicit(&e->failed, memory_order_relaxed)) {
            mg_kernel_args ka = {.node = nd, .in = j.ti->ptrs, .out = j.ti->ptrs + nd->n_in, .info = &j.ti->info};
            mg_error kerr = {0};
            double t0 = now_s();
            int rc = j.fn(&ka, &kerr);
            double t1 = now_s();
            ct->busy_s += t1 - t0;
            if (e->trace) mg_trace_task(e->trace, e->trace_comm_lane, nd, j.ti->info.mb_local, t0, t1);
            atomic_fetch_add_explicit(&e->tasks, 1, memory_order_relaxed);
            if (rc) mg_engine_record_error(e, nd, rc, &kerr);
        }
        starpu_task_end_dep_release(j.task); /* now the task terminates */
    }
}

int mg_comm_thread_start(mg_engine *e, mg_error *err) {
    mg_comm_thread *ct = calloc(1, sizeof *ct);
    if (!ct) return mg_error_set(err, MG_ERR_NOMEM, "out of memory starting the communication thread");
    pthread_mutex_init(&ct->mu, NULL);
    pthread_cond_init(&ct->cv, NULL);
    e->comm_thread = ct;
    if (pthread_create(&ct->th, NULL, loop, e)) {
        pthread_mutex_destroy(&ct->mu);
        pthread_cond_destroy(&ct->cv);
        free(ct);
        e->comm_thread = NULL;
        return mg_error_set(err, MG_ERR_RUNTIME, "could not start the communication thread");
    }
    return MG_OK;
}

void mg_comm_thread_stop(mg_engine *e) {
    mg_comm_thread *ct = e->comm_thread;
    if (!ct) return;
    pthread_mutex_lock(&ct->mu);
    ct->stop = true;
    pthread_cond_signal(&ct->cv);
    pthread_mutex_unlock(&ct->mu);
    pthread_join(ct->th, NULL);
    pthread_mutex_destroy(&ct->mu);
    pthread_cond_destroy(&ct->cv);
    free(ct);
    e->comm_thread = NULL;
}

/* Called by the trampoline on a worker, inside the collective's task. */
void mg_comm_thread_submit(mg_engine *e, mg_task_inst *ti, mg_kernel_fn fn) {
    mg_comm_thread *ct = e->comm_thread;
    struct starpu_task *t = starpu_task_get_current();
    starpu_task_end_dep_add(t, 1); /* before returning: the task must not terminate yet */
    pthread_mutex_lock(&ct->mu);
    /* the comm token runs one collective at a time, so the queue holds at most one;
     * QCAP only guards against misuse */
    while (ct->len == QCAP) {
        pthread_mutex_unlock(&ct->mu);
        sched_yield();
        pthread_mutex_lock(&ct->mu);
    }
    ct->q[(ct->head + ct->len) % QCAP] = (comm_job){ti, fn, t};
    ct->len++;
    pthread_cond_signal(&ct->cv);
    pthread_mutex_unlock(&ct->mu);
}

double mg_comm_thread_take_busy(mg_engine *e) {
    if (!e->comm_thread) return 0;
    double b = e->comm_thread->busy_s;
    e->comm_thread->busy_s = 0;
    return b;
}

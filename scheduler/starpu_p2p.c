/* Pipeline transfers without blocking anyone: post, then poll to completion.
 *
 * A send or recv task posts its MPI_Isend / MPI_Irecv on the worker that runs it and
 * returns at once; starpu_task_end_dep_add() keeps the task from terminating, so what
 * depends on the received buffer (or overwrites the sent one) still waits. This
 * thread tests the posted requests and ends each task when its transfer completes.
 * No worker ever waits for a peer stage, and a transfer is posted as soon as its
 * data (send) or its buffer (recv) is ready, whatever the collectives are doing:
 * messages are matched by tag (ops/p2p.c), so the two stages need not post them in
 * the same order, and MPI runs at MPI_THREAD_MULTIPLE (mg_comm_p2p_ready) so posting
 * beside a blocking collective on another thread is allowed.
 *
 * Polling: MPI_Test on each request, then a short sleep when nothing completed (Open
 * MPI makes progress inside MPI calls; there is no progress thread of its own here).
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ops/comm_api.h"
#include "scheduler/starpu_internal.h"

typedef struct p2p_job {
    mg_comm_request *req;
    struct starpu_task *task;
    const mg_node *node;
    int mb;
    double t0;
} p2p_job;

struct mg_p2p {
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    p2p_job *in;          /* posted, not yet taken by the thread */
    int n_in, cap_in;
    bool stop;
};

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void *loop(void *arg) {
    mg_engine *e = arg;
    mg_p2p *p = e->p2p;
    p2p_job *live = NULL;
    int n_live = 0, cap_live = 0;
    for (;;) {
        pthread_mutex_lock(&p->mu);
        while (!p->n_in && !n_live && !p->stop) pthread_cond_wait(&p->cv, &p->mu);
        if (p->stop && !p->n_in && !n_live) {
            pthread_mutex_unlock(&p->mu);
            break;
        }
        if (n_live + p->n_in > cap_live) {
            int cap = (n_live + p->n_in) * 2 + 16;
            p2p_job *nl = realloc(live, (size_t)cap * sizeof *nl);
            if (nl) {
                live = nl;
                cap_live = cap;
            }
        }
        if (n_live + p->n_in <= cap_live) {
            memcpy(live + n_live, p->in, (size_t)p->n_in * sizeof *p->in);
            n_live += p->n_in;
            p->n_in = 0;
        }
        pthread_mutex_unlock(&p->mu);
        int done_any = 0;
        for (int i = 0; i < n_live;) {
            p2p_job *j = &live[i];
            bool done = false;
            mg_error err = {0};
            int rc = mg_comm_test(e->info.comm, j->req, &done, &err);
            if (!done && !rc) {
                i++;
                continue;
            }
            if (rc) mg_engine_record_error(e, j->node, rc, &err);
            if (e->trace) mg_trace_task(e->trace, e->trace_p2p_lane, j->node, j->mb, j->t0, now_s());
            atomic_fetch_add_explicit(&e->tasks, 1, memory_order_relaxed);
            starpu_task_end_dep_release(j->task);
            live[i] = live[--n_live];
            done_any++;
        }
        if (n_live && !done_any) {
            struct timespec ts = {0, 20000}; /* 20 µs: latency well under a layer's compute */
            nanosleep(&ts, NULL);
        }
    }
    free(live);
    return NULL;
}

int mg_p2p_start(mg_engine *e, mg_error *err) {
    mg_p2p *p = calloc(1, sizeof *p);
    if (!p) return mg_error_set(err, MG_ERR_NOMEM, "out of memory starting the transfer thread");
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    e->p2p = p;
    if (pthread_create(&p->th, NULL, loop, e)) {
        pthread_mutex_destroy(&p->mu);
        pthread_cond_destroy(&p->cv);
        free(p);
        e->p2p = NULL;
        return mg_error_set(err, MG_ERR_RUNTIME, "could not start the transfer thread");
    }
    return MG_OK;
}

void mg_p2p_stop(mg_engine *e) {
    mg_p2p *p = e->p2p;
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    p->stop = true;
    pthread_cond_signal(&p->cv);
    pthread_mutex_unlock(&p->mu);
    pthread_join(p->th, NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
    free(p->in);
    free(p);
    e->p2p = NULL;
}

void mg_p2p_post(mg_engine *e, mg_task_inst *ti) {
    const mg_node *nd = ti->arg->node;
    mg_comm *c = ti->info.comm;
    mg_error err = {0};
    int rc = MG_OK;
    if (!mg_comm_p2p_ready(c))
        rc = mg_error_set(&err, MG_ERR_INVALID,
                          "pipeline transfers need MPI at MPI_THREAD_MULTIPLE (MPI_Init_thread) and a communicator");
    else if (mg_comm_group_size(c, nd->attrs.comm.group) != nd->attrs.comm.nranks)
        rc = mg_error_set(&err, MG_ERR_INVALID, "built for a %s group of %d ranks, the communicator's has %d",
                          mg_group_name(nd->attrs.comm.group), nd->attrs.comm.nranks,
                          mg_comm_group_size(c, nd->attrs.comm.group));
    mg_comm_request *req = NULL;
    int64_t key = mg_p2p_key(nd, &ti->info);
    if (!rc && nd->op == MG_OP_SEND) {
        *(int32_t *)ti->ptrs[1] = 0;
        rc = mg_comm_isend_buf(c, nd->attrs.comm.group, nd->attrs.comm.peer, key, mg_tensor_storage(nd->in[0]), ti->ptrs[0],
                               mg_numel(nd->in[0]), &req, &err);
    } else if (!rc) {
        rc = mg_comm_irecv_buf(c, nd->attrs.comm.group, nd->attrs.comm.peer, key, mg_tensor_storage(nd->out[0]), ti->ptrs[0],
                               mg_numel(nd->out[0]), &req, &err);
    }
    if (rc) {
        mg_engine_record_error(e, nd, rc, &err);
        return; /* the task ends now; the step reports the error */
    }
    struct starpu_task *t = starpu_task_get_current();
    starpu_task_end_dep_add(t, 1); /* before returning: the task ends when the transfer does */
    mg_p2p *p = e->p2p;
    pthread_mutex_lock(&p->mu);
    if (p->n_in == p->cap_in) {
        int cap = p->cap_in ? 2 * p->cap_in : 64;
        p2p_job *ni = realloc(p->in, (size_t)cap * sizeof *ni);
        if (!ni) { /* cannot queue it: finish it here instead */
            pthread_mutex_unlock(&p->mu);
            if (mg_comm_wait(c, req, &err)) mg_engine_record_error(e, nd, MG_ERR_RUNTIME, &err);
            starpu_task_end_dep_release(t);
            return;
        }
        p->in = ni;
        p->cap_in = cap;
    }
    p->in[p->n_in++] = (p2p_job){req, t, nd, ti->info.mb_local, now_s()};
    pthread_cond_signal(&p->cv);
    pthread_mutex_unlock(&p->mu);
}

/* The StarPU engine: each node of the graph is one StarPU task, every step.
 *
 * Data: one vector handle per storage buffer (not per tensor), registered once at
 * creation and reused by every step: registration costs microseconds and kilobytes
 * per handle, so per-step registration would dominate small graphs.
 *
 * Micro-batches: the per-micro-batch part of the graph (nodes with mb >= 0) is submitted
 * once per micro-batch instance of the step, the once-per-step part once (see
 * submit_step). Per-micro-batch inputs and the per-micro-batch part's transients have
 * one copy per instance or per slot (mg_storage_options), each registered as its own
 * handle; a task gets the handles of its instance's copies at submission. Slots are
 * what lets micro-batch i+1's forward run while micro-batch i's backward does, and the
 * write-after-read dependencies on a reused slot are what bound memory to `slots`
 * micro-batches in flight.
 *
 * Dependencies: StarPU's sequential consistency, with tasks submitted in the graph's
 * topological order (per instance). Each task accesses its inputs' buffers R, its outputs' buffers W,
 * and RW where an output shares an input's buffer (an in-place `updates`; a view, whose
 * output is its input's bytes, only reads it). StarPU then
 * derives exactly the dependencies the serial order implies: RAW from the dataflow,
 * and WAR/WAW wherever the memory plan reuses a buffer for a later tensor, which is
 * what makes buffer reuse safe under out-of-order execution. Explicit tags would have
 * to encode those reuse hazards by hand and gain nothing; the cost of sequential
 * consistency is a per-handle lock and list walk on submission; the whole per-task
 * overhead of this engine is ~3-4.5 µs (bench_engine overhead), close to StarPU's own
 * 2.2-3.9 µs per task with a dependency.
 *
 * A handle may occur several times among a node's tensors (mul(x, x); an output that
 * updates an input); StarPU wants each handle once per task, so handles are
 * deduplicated (modes OR-ed) and each kernel argument maps to its task buffer slot.
 * Tasks with more than STARPU_NMAXBUFS buffers use dyn_handles.
 *
 * Collectives (MG_OPF_COMM ops) are blocking MPI calls inside tasks. Every rank must
 * issue them in the same order, and MPI is initialised MPI_THREAD_SERIALIZED, so a
 * rank runs them one at a time, in its graph's topological order: each collective
 * task also accesses one engine-wide "comm token" handle in RW mode, which sequential
 * consistency turns into a chain. Within a group, the graph's order must agree with
 * the nodes' seq numbers (checked at creation). Collectives get the highest priority:
 * peers wait for them, and they hold a worker while they wait.
 *
 * Host access: with CPU workers only, the buffers' home copies are the only copies,
 * so between steps the host reads and writes storage directly. With CUDA workers the
 * newest copy may be on a GPU: the engine hooks the storage's host access
 * (host_access below) to acquire the buffer's handle in RW mode, which brings the
 * data home and invalidates device copies, so whatever the host then writes is what
 * the next step's tasks read. Buffers the host never touches (weights, moments) stay
 * on the device across steps.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ops/op.h"
#include "scheduler/starpu_internal.h"
#include "scheduler/storage_internal.h"

static int setup_pipeline(mg_engine *e, const mg_engine_options *opt, mg_error *err);

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void mg_engine_record_error(mg_engine *e, const mg_node *n, int rc, const mg_error *kerr) {
    pthread_mutex_lock(&e->err_lock);
    if (!atomic_load(&e->failed)) {
        if (kerr && kerr->code)
            mg_error_set(&e->kerr, kerr->code, "%s (node %d): %s", mg_op_name(n->op), n->id, kerr->msg);
        else
            mg_error_set(&e->kerr, rc < 0 ? rc : MG_ERR_RUNTIME, "%s (node %d) failed (%s)", mg_op_name(n->op), n->id,
                         mg_status_name(rc));
        atomic_store(&e->failed, 1);
    }
    pthread_mutex_unlock(&e->err_lock);
}

static void free_args(mg_engine *e) {
    if (!e->args) return;
    for (int k = 0; k < e->n_nodes; k++) {
        free(e->args[k].slot);
        free(e->args[k].at);
        free(e->args[k].bufs);
        free(e->args[k].modes);
    }
    free(e->args);
    e->args = NULL;
}

/* Dedupes the node's plan buffers into the task's buffer list and records the slots.
 * Tensors in one plan buffer share its copy for any micro-batch instance (a buffer has
 * one kind), so deduplicating by plan buffer is the same as by handle. */
static int build_arg(mg_engine *e, mg_task_arg *a, const mg_node *nd, mg_error *err) {
    int np = nd->n_in + nd->n_out;
    a->e = e;
    a->node = nd;
    a->slot = malloc((size_t)np * sizeof *a->slot);
    a->at = malloc((size_t)np * sizeof *a->at);
    a->bufs = malloc(((size_t)np + 1) * sizeof *a->bufs); /* + the comm token */
    a->modes = malloc(((size_t)np + 1) * sizeof *a->modes);
    if (!a->slot || !a->at || !a->bufs || !a->modes)
        return mg_error_set(err, MG_ERR_NOMEM, "out of memory building task of node %d", nd->id);
    for (int i = 0; i < np; i++) {
        const mg_tensor *t = i < nd->n_in ? nd->in[i] : nd->out[i - nd->n_in];
        int64_t at;
        bool view_out = i >= nd->n_in && mg_op_def_get(nd->op)->view && mg_op_def_get(nd->op)->view(nd, &at);
        int b = mg_storage_buffer_of(e->s, t);
        if (b < 0) return mg_error_set(err, MG_ERR_INVALID, "tensor '%s' has no storage buffer", t->name);
        /* a part placed in a larger tensor keeps the rest of the buffer: RW, not W */
        enum starpu_data_access_mode m = i < nd->n_in ? STARPU_R : mg_storage_partial(e->s, t) ? STARPU_RW : STARPU_W;
        int s = 0;
        while (s < a->nbuf && a->bufs[s] != b) s++;
        if (s == a->nbuf) {
            a->bufs[a->nbuf] = b;
            a->modes[a->nbuf++] = m;
        } else if (i < nd->n_in || t->updates || !view_out) {
            /* R|W == RW: in-place update; a concat whose inputs are placed in its output,
             * which writes the other parts; mul(x, x) stays R */
            a->modes[s] |= m;
        } /* else a view in its input's buffer: its task reads the buffer and writes nothing */
        a->slot[i] = s;
        a->at[i] = mg_storage_offset_of(e->s, t);
    }
    if ((mg_op_def_get(nd->op)->flags & (MG_OPF_COMM | MG_OPF_P2P)) == MG_OPF_COMM) { /* transfers: no token */
        a->bufs[a->nbuf] = -1;
        a->modes[a->nbuf++] = STARPU_RW;
    }
    return MG_OK;
}

/* Within each group, collectives must come in seq order along the topo order, or
 * the token chain would issue them in an order the peers do not follow. */
static int check_comm_order(mg_node *const *ord, int n, int *n_comm, mg_error *err) {
    int64_t last_seq[MG_GROUP_COUNT];
    int last_node[MG_GROUP_COUNT];
    for (int g = 0; g < MG_GROUP_COUNT; g++) last_node[g] = -1;
    *n_comm = 0;
    for (int k = 0; k < n; k++) {
        const mg_node *nd = ord[k];
        if (!(mg_op_def_get(nd->op)->flags & MG_OPF_COMM)) continue;
        ++*n_comm;
        if (mg_op_def_get(nd->op)->flags & MG_OPF_P2P) continue; /* matched by tag, in no order */
        int g = nd->attrs.comm.group;
        if (g < 0 || g >= MG_GROUP_COUNT) continue; /* the op's shape rule rejects these */
        if (last_node[g] >= 0 && nd->attrs.comm.seq <= last_seq[g])
            return mg_error_set(err, MG_ERR_INVALID,
                                "%s node %d (%s seq %lld) runs after node %d (seq %lld) in the graph's order: "
                                "collectives of a group must follow their seq order",
                                mg_op_name(nd->op), nd->id, mg_group_name((mg_group)g), (long long)nd->attrs.comm.seq,
                                last_node[g], (long long)last_seq[g]);
        last_seq[g] = nd->attrs.comm.seq;
        last_node[g] = nd->id;
    }
    return MG_OK;
}

/* Between steps only (never from a task): see "Host access" above. Workers are
 * paused between steps, and a device-to-host copy needs the CUDA worker's driver:
 * the step bracket resumes them for the acquire. */
static void host_access(void *ctx, int b) {
    mg_engine *e = ctx;
    if (b < 0 || b >= e->n_handles || !e->handles[b]) return;
    mg_starpu_step_begin();
    if (starpu_data_acquire(e->handles[b], STARPU_RW) == 0) starpu_data_release(e->handles[b]);
    mg_starpu_step_end();
}

void mg_engine_free(mg_engine *e) {
    if (!e) return;
    mg_storage_set_host_access(e->s, NULL, NULL); /* unregistering brings every buffer home */
    bool devices = e->handles && starpu_cuda_worker_get_count() > 0;
    if (devices) mg_starpu_step_begin(); /* (device-to-host copies need running workers) */
    if (e->handles) {
        for (int b = 0; b < e->n_handles; b++)
            if (e->handles[b]) starpu_data_unregister(e->handles[b]);
        free(e->handles);
    }
    if (devices) mg_starpu_step_end();
    mg_comm_thread_stop(e);
    mg_p2p_stop(e);
    free(e->chunk);
    free(e->backward);
    free(e->pp_events);
    if (e->comm_token) starpu_data_unregister(e->comm_token);
    free(e->comm_token_buf);
    free_args(e);
    free(e->scratch);
    free(e->order);
    pthread_mutex_destroy(&e->err_lock);
    free(e);
    mg_starpu_release();
}

int mg_engine_new(mg_graph *g, mg_storage *s, const mg_engine_options *opt, mg_engine **out, mg_error *err) {
    *out = NULL;
    if (!g || !s) return mg_error_set(err, MG_ERR_INVALID, "mg_engine_new: NULL graph or storage");
    mg_engine_options dflt = {.sched_policy = NULL, .ncpus = 0, .use_priorities = true};
    if (!opt) opt = &dflt;

    mg_node **ord;
    int n, rc = mg_graph_topo(g, &ord, &n, err);
    if (rc) return rc;
    for (int k = 0; k < n; k++)
        if (!mg_starpu_codelet(ord[k]->op))
            return mg_error_set(err, MG_ERR_UNSUPPORTED, "op %s has no CPU kernel (node %d)", mg_op_name(ord[k]->op),
                                ord[k]->id);
    if (opt->use_priorities && (rc = mg_graph_priorities(g, err))) return rc;
    if ((rc = mg_graph_topo(g, &ord, &n, err))) return rc; /* the cached order array may have been rebuilt */
    int n_comm;
    if ((rc = check_comm_order(ord, n, &n_comm, err))) return rc;

    if ((rc = mg_starpu_acquire(opt->sched_policy, opt->ncpus, err))) return rc;
    mg_engine *e = calloc(1, sizeof *e);
    if (!e) {
        mg_starpu_release();
        return mg_error_set(err, MG_ERR_NOMEM, "out of memory creating the engine");
    }
    pthread_mutex_init(&e->err_lock, NULL);
    /* the workers StarPU runs, known before any step (the tools print them at start-up) */
    e->stats.n_workers = (int)starpu_worker_get_count();
    e->stats.n_cpu_workers = (int)starpu_cpu_worker_get_count();
    e->stats.n_cpu_wanted = mg_starpu_cpu_wanted();
    e->stats.cpu_cap = STARPU_MAXCPUS;
    snprintf(e->stats.policy, sizeof e->stats.policy, "%s", mg_starpu_policy());
    e->g = g;
    e->s = s;
    e->n_nodes = n;
    e->use_priorities = opt->use_priorities;
    e->n_handles = mg_storage_n_buffers(s);
    e->order = malloc(((size_t)n + 1) * sizeof *e->order);
    e->handles = calloc((size_t)e->n_handles + 1, sizeof *e->handles);
    e->args = calloc((size_t)n + 1, sizeof *e->args);
    int *prio = calloc(2 * ((size_t)n + 1), sizeof *prio), *level = prio + n + 1;
    if (!e->order || !e->handles || !e->args || !prio) {
        free(prio);
        mg_engine_free(e);
        return mg_error_set(err, MG_ERR_NOMEM, "out of memory creating the engine");
    }
    memcpy(e->order, ord, (size_t)n * sizeof *ord);
    for (int b = 0; b < e->n_handles; b++) {
        /* Elements of 64 bytes (storage rounds every buffer up to 64): StarPU counts
         * vector elements in 32 bits, which would cap 1-byte elements at 4 GiB. */
        size_t lines = (mg_storage_buffer_bytes(s, b) + 63) / 64;
        if (lines > UINT32_MAX) {
            free(prio);
            mg_engine_free(e);
            return mg_error_set(err, MG_ERR_UNSUPPORTED, "buffer %d is too large for one StarPU handle", b);
        }
        starpu_vector_data_register(&e->handles[b], STARPU_MAIN_RAM, (uintptr_t)mg_storage_buffer(s, b),
                                    (uint32_t)(lines ? lines : 1), 64);
        if (!e->handles[b]) {
            free(prio);
            mg_engine_free(e);
            return mg_error_set(err, MG_ERR_RUNTIME, "StarPU could not register buffer %d", b);
        }
    }
    if (starpu_cuda_worker_get_count() > 0) mg_storage_set_host_access(s, host_access, e);
    if (n_comm) {
        e->comm_token_buf = aligned_alloc(64, 64);
        if (e->comm_token_buf) starpu_vector_data_register(&e->comm_token, STARPU_MAIN_RAM, (uintptr_t)e->comm_token_buf, 1, 64);
        if (!e->comm_token) {
            free(prio);
            mg_engine_free(e);
            return mg_error_set(err, MG_ERR_NOMEM, "could not create the collectives' order token");
        }
        /* A pipeline stage's collectives must not hold a worker: a stage blocked in
         * one (the embedding group's all-reduce) while its peer waits for an
         * activation gradient this stage has yet to compute would never finish. */
        if ((opt->comm_thread || opt->pp_stages > 1) && (rc = mg_comm_thread_start(e, err))) {
            free(prio);
            mg_engine_free(e);
            return rc;
        }
    }
    e->prio_min = starpu_sched_get_min_priority();
    e->prio_max = starpu_sched_get_max_priority();
    if (opt->use_priorities) rc = mg_starpu_map_priorities(e->order, n, e->prio_min, e->prio_max, prio, err);
    if (opt->use_priorities && !rc) rc = mg_starpu_map_priorities(e->order, n, 0, MG_PP_PRIO_LEVELS - 1, level, err);
    int max_buf = 1;
    for (int k = 0; k < n && !rc; k++) {
        rc = build_arg(e, &e->args[k], e->order[k], err);
        bool comm = mg_op_def_get(e->order[k]->op)->flags & MG_OPF_COMM;
        e->args[k].priority = comm && opt->use_priorities ? e->prio_max : prio[k];
        e->args[k].level = level[k];
        if (e->args[k].nbuf > max_buf) max_buf = e->args[k].nbuf;
    }
    free(prio);
    if (!rc && !(e->scratch = malloc((size_t)max_buf * sizeof *e->scratch)))
        rc = mg_error_set(err, MG_ERR_NOMEM, "out of memory creating the engine");
    if (!rc) rc = setup_pipeline(e, opt, err);
    if (rc) {
        mg_engine_free(e);
        return rc;
    }
    *out = e;
    return MG_OK;
}

/* Pipeline stages: each per-micro-batch node's model chunk (from its virtual stage)
 * and half (backward: a backward node, or one reading the backward half's output,
 * like the gradient accumulation), and the transfer thread when there are transfers. */
static int setup_pipeline(mg_engine *e, const mg_engine_options *opt, mg_error *err) {
    int n = e->n_nodes;
    bool p2p = false;
    for (int k = 0; k < n; k++) p2p |= (mg_op_def_get(e->order[k]->op)->flags & MG_OPF_P2P) != 0;
    e->pp_stages = opt->pp_stages > 1 ? opt->pp_stages : 1;
    e->pp_rank = opt->pp_rank;
    e->pp_chunks = opt->pp_chunks > 1 ? opt->pp_chunks : 1;
    e->pp_kind = opt->pp_schedule;
    if (e->pp_stages > 1) {
        if (e->pp_rank < 0 || e->pp_rank >= e->pp_stages)
            return mg_error_set(err, MG_ERR_INVALID, "pipeline rank %d outside 0..%d", e->pp_rank, e->pp_stages - 1);
        int g_nodes = mg_graph_n_nodes(e->g);
        bool *bwd_node = calloc((size_t)g_nodes + 1, sizeof *bwd_node);
        e->chunk = calloc((size_t)n + 1, sizeof *e->chunk);
        e->backward = calloc((size_t)n + 1, sizeof *e->backward);
        if (!bwd_node || !e->chunk || !e->backward) {
            free(bwd_node);
            return mg_error_set(err, MG_ERR_NOMEM, "out of memory creating the engine");
        }
        for (int k = 0; k < n; k++) { /* topo order: producers first */
            const mg_node *nd = e->order[k];
            if (nd->mb < 0) continue;
            bool b = nd->phase == MG_PHASE_BACKWARD;
            for (int j = 0; j < nd->n_in && !b; j++)
                b = nd->in[j]->src && nd->in[j]->src->mb >= 0 && bwd_node[nd->in[j]->src->id];
            bwd_node[nd->id] = e->backward[k] = b;
            int v = nd->stage, c = (v - e->pp_rank) / e->pp_stages;
            if (v < 0 || v % e->pp_stages != e->pp_rank || c >= e->pp_chunks) {
                free(bwd_node);
                return mg_error_set(err, MG_ERR_INVALID,
                                    "node %d (%s) is on virtual pipeline stage %d, not one of stage %d's %d chunks", nd->id,
                                    mg_op_name(nd->op), v, e->pp_rank, e->pp_chunks);
            }
            e->chunk[k] = c;
        }
        free(bwd_node);
    }
    return p2p ? mg_p2p_start(e, err) : MG_OK;
}

/* Submits node a as micro-batch instance mb (-1: the once-per-step part) at StarPU
 * priority prio. */
static int submit(mg_engine *e, mg_task_arg *a, int mb, int prio, mg_error *err) {
    const mg_node *nd = a->node;
    mg_task_inst *ti = malloc(sizeof *ti + (size_t)(nd->n_in + nd->n_out) * sizeof(void *));
    if (!ti) return mg_error_set(err, MG_ERR_NOMEM, "out of memory creating a StarPU task");
    ti->arg = a;
    ti->info = mg_exec_instance(&e->info, mb);
    for (int s = 0; s < a->nbuf; s++) {
        if (a->bufs[s] < 0) {
            e->scratch[s] = e->comm_token;
            continue;
        }
        int c = mg_storage_copy_of(e->s, a->bufs[s], mb);
        if (c < 0) {
            free(ti);
            return mg_error_set(err, MG_ERR_INVALID, "node %d (%s): no storage for micro-batch instance %d", nd->id,
                                mg_op_name(nd->op), mb);
        }
        e->scratch[s] = e->handles[c];
    }
    struct starpu_task *t = starpu_task_create();
    if (!t) {
        free(ti);
        return mg_error_set(err, MG_ERR_NOMEM, "out of memory creating a StarPU task");
    }
    t->cl = mg_starpu_codelet(nd->op);
    t->cl_arg = ti;
    t->cl_arg_free = 1; /* StarPU frees the instance when the task ends */
    t->nbuffers = a->nbuf;
    t->priority = prio;
    if (a->nbuf <= STARPU_NMAXBUFS) {
        memcpy(t->handles, e->scratch, (size_t)a->nbuf * sizeof *e->scratch);
        memcpy(t->modes, a->modes, (size_t)a->nbuf * sizeof *a->modes);
    } else {
        /* StarPU frees dyn_handles / dyn_modes with the task (starpu_task_clean) */
        t->dyn_handles = malloc((size_t)a->nbuf * sizeof *e->scratch);
        t->dyn_modes = malloc((size_t)a->nbuf * sizeof *a->modes);
        if (!t->dyn_handles || !t->dyn_modes) {
            free(t->dyn_handles);
            free(t->dyn_modes);
            t->dyn_handles = NULL;
            t->dyn_modes = NULL;
            t->destroy = 0; /* never submitted: StarPU asserts on destroying a detached, self-destroying task */
            starpu_task_destroy(t);
            return mg_error_set(err, MG_ERR_NOMEM, "out of memory creating a StarPU task");
        }
        memcpy(t->dyn_handles, e->scratch, (size_t)a->nbuf * sizeof *e->scratch);
        memcpy(t->dyn_modes, a->modes, (size_t)a->nbuf * sizeof *a->modes);
    }
    int rc = starpu_task_submit(t);
    if (rc != 0) {
        t->destroy = 0; /* refused, so ours to free (StarPU asserts otherwise) */
        starpu_task_destroy(t);
        return mg_error_set(err, MG_ERR_RUNTIME, "StarPU refused task %s (node %d): %s", mg_op_name(nd->op), nd->id,
                            rc == -ENODEV ? "no worker can run it" : strerror(-rc));
    }
    return MG_OK;
}

/* The step's submission order: every instance but the last runs the per-micro-batch
 * part; the last instance runs it interleaved with the once-per-step part in the
 * graph's topological order. The partitioner emits a gradient's reduction right after
 * the node that finishes it, so in that order the reductions of the last layers'
 * gradients are submitted (and, through the comm token, issued) while the backward of
 * the first layers is still running. Every rank submits its collectives in this same
 * order, which keeps the groups' orders consistent (deadlock freedom). */
/* A pipeline stage's step: the schedule's events in order, each the nodes of its
 * (chunk, half) for its micro-batch instance in topological order; the last event
 * (the first chunk's last backward) interleaved with the once-per-step part. Compute
 * tasks are prioritised by event, earlier first (mg_starpu_event_priority says why). */
static int submit_pipeline_step(mg_engine *e, mg_error *err) {
    int n_micro = mg_exec_n_micro(&e->info), n_ev = 2 * n_micro * e->pp_chunks, rc = MG_OK;
    if (e->pp_events_micro != n_micro) { /* the schedule depends only on the micro-batch count */
        free(e->pp_events);
        e->pp_events_micro = 0;
        if (!(e->pp_events = malloc((size_t)n_ev * sizeof *e->pp_events)))
            return mg_error_set(err, MG_ERR_NOMEM, "out of memory scheduling the step");
        rc = mg_pp_schedule((mg_pp_schedule_kind)e->pp_kind, e->pp_stages, e->pp_chunks, e->pp_rank, n_micro,
                            e->pp_events, err);
        if (rc) return rc;
        e->pp_events_micro = n_micro;
        e->pp_in_flight = mg_pp_in_flight(e->pp_events, n_ev, e->pp_chunks);
    }
    const mg_pp_event *ev = e->pp_events;
    int need = e->pp_in_flight;
    if (need > mg_storage_n_slots(e->s) && mg_storage_n_slots(e->s) < n_micro)
        return mg_error_set(err, MG_ERR_INVALID,
                            "the %s schedule keeps %d micro-batches in flight on pipeline stage %d; the storage has %d "
                            "activation slots (raise microbatch-slots)",
                            mg_pp_schedule_name((mg_pp_schedule_kind)e->pp_kind), need, e->pp_rank,
                            mg_storage_n_slots(e->s));
    for (int i = 0; i < n_ev && !rc; i++) {
        bool last = i == n_ev - 1;
        for (int k = 0; k < e->n_nodes && !rc; k++) {
            mg_task_arg *a = &e->args[k];
            bool in_event = e->order[k]->mb >= 0 && e->chunk[k] == ev[i].chunk && e->backward[k] == ev[i].backward;
            if (!in_event && !(last && e->order[k]->mb < 0)) continue;
            int prio = a->priority; /* transfers and collectives keep the top priority */
            if (e->use_priorities && !(mg_op_def_get(e->order[k]->op)->flags & MG_OPF_COMM))
                prio = mg_starpu_event_priority(e->prio_min, e->prio_max, n_ev, i, a->level);
            rc = submit(e, a, in_event ? ev[i].mb : -1, prio, err);
        }
    }
    return rc;
}

static int submit_step(mg_engine *e, mg_error *err) {
    if (e->pp_stages > 1) return submit_pipeline_step(e, err);
    int n_micro = mg_exec_n_micro(&e->info), rc = MG_OK;
    for (int mb = 0; mb < n_micro - 1 && !rc; mb++)
        for (int k = 0; k < e->n_nodes && !rc; k++)
            if (e->order[k]->mb >= 0) rc = submit(e, &e->args[k], mb, e->args[k].priority, err);
    for (int k = 0; k < e->n_nodes && !rc; k++)
        rc = submit(e, &e->args[k], e->order[k]->mb >= 0 ? n_micro - 1 : -1, e->args[k].priority, err);
    return rc;
}

int mg_engine_run(mg_engine *e, const mg_exec_info *info, mg_error *err) {
    if (!e || !info) return mg_error_set(err, MG_ERR_INVALID, "mg_engine_run: NULL argument");
    if (mg_exec_n_micro(info) > mg_storage_n_micro(e->s))
        return mg_error_set(err, MG_ERR_INVALID, "step of %d micro-batches, storage holds inputs for %d",
                            mg_exec_n_micro(info), mg_storage_n_micro(e->s));
    e->info = *info;
    atomic_store(&e->failed, 0);
    atomic_store(&e->tasks, 0);
    mg_error_clear(&e->kerr);
    memset(e->busy, 0, sizeof e->busy);

    double t0 = now_s();
    mg_starpu_step_begin();
    int rc = submit_step(e, err);
    mg_starpu_step_submitted();
    /* Wait even after a failed submission: submitted tasks still use the buffers. */
    starpu_task_wait_for_all();
    mg_starpu_step_end();
    double wall = now_s() - t0;

    mg_engine_stats *st = &e->stats;
    st->tasks = atomic_load(&e->tasks);
    st->wall_s = wall;
    st->n_workers = (int)starpu_worker_get_count();
    if (st->n_workers > 64) st->n_workers = 64;
    double busy = 0;
    for (int w = 0; w < 64; w++) {
        st->busy_s[w] = w < st->n_workers && w < STARPU_NMAXWORKERS ? e->busy[w] : 0;
        busy += st->busy_s[w];
    }
    st->idle_fraction = wall > 0 && st->n_workers ? 1.0 - busy / (st->n_workers * wall) : 0;
    st->comm_s = mg_comm_thread_take_busy(e);
    if (st->idle_fraction < 0) st->idle_fraction = 0;

    if (rc) return rc;
    if (atomic_load(&e->failed)) return mg_error_set(err, e->kerr.code, "%s", e->kerr.msg);
    return MG_OK;
}

void mg_engine_get_stats(const mg_engine *e, mg_engine_stats *st) {
    if (e && st) *st = e->stats;
}

int mg_engine_set_trace(mg_engine *e, mg_trace *t, mg_error *err) {
    if (!e) return mg_error_set(err, MG_ERR_INVALID, "mg_engine_set_trace: NULL engine");
    int nw = (int)starpu_worker_get_count(), rc = MG_OK;
    for (int w = 0; w < nw && t && !rc; w++) {
        char wn[64], lane[96];
        starpu_worker_get_name(w, wn, sizeof wn);
        snprintf(lane, sizeof lane, "worker %d (%s)", w, wn);
        rc = mg_trace_set_lane(t, w, lane, err);
    }
    if (t && !rc)
        rc = mg_trace_set_lane(t, nw, e->comm_thread ? "communication (thread)" : "communication (on workers)", err);
    /* Pipeline transfers are in flight together (several micro-batches, both
     * directions), so they get a lane of their own where events may overlap. */
    if (t && !rc && e->p2p) rc = mg_trace_set_lane(t, nw + 1, "transfers (in flight, overlapping)", err);
    if (rc) return rc;
    e->trace = t;
    e->trace_comm_lane = nw;
    e->trace_p2p_lane = nw + 1;
    return MG_OK;
}

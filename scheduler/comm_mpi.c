/* mg_comm over MPI: one communicator per mesh group, split from MPI_COMM_WORLD.
 *
 * Collectives are blocking MPI calls made from whichever StarPU worker runs the
 * collective's task; the engine runs a rank's collectives one at a time in seq
 * order, so MPI_THREAD_SERIALIZED is enough. Communicators return errors
 * (MPI_ERRORS_RETURN) so that a failure becomes MG_ERR_RUNTIME instead of an abort.
 */
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <mpi.h>
#include <stdlib.h>
#include <string.h>

#include "mgraph/watchdog.h"
#include "ops/comm_api.h"
#include "scheduler/comm_ring.h"

/* Sums at least this large (bytes of one rank's input) take the ring (comm_ring.c); smaller
 * ones MPI's own collective, whose fewer, latency-bound steps win there. Measured with
 * `test_comm_mpi bench` (2 and 4 ranks on one node; see comm_ring.c). */
enum { RING_MIN_BYTES = 64 << 10 };

struct mg_comm {
    mg_mesh mesh;
    MPI_Comm comm[MG_GROUP_COUNT];
    MPI_Comm ring[MG_GROUP_COUNT]; /* duplicates for the ring collectives' messages */
    double bytes[MG_GROUP_COUNT];
    double seconds;
    double group_seconds[MG_GROUP_COUNT]; /* the same, per group (a benchmark's breakdown) */
    /* transfers are counted from the thread that completes them, collectives from
     * the one that runs them: the counters take a lock */
    pthread_mutex_t count_lock;
    bool multiple;  /* MPI at MPI_THREAD_MULTIPLE */
    int tag_ub;     /* MPI's largest tag */
#ifdef MG_CUDA
    mg_nccl *nccl; /* NCCL communicators for device buffers (comm_nccl.c) */
#endif
};

#ifdef MG_CUDA
mg_nccl **mg_comm_nccl_slot(mg_comm *c) { return &c->nccl; }
#endif

static int mpi_fail(mg_error *err, int rc, const char *what, mg_group grp) {
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, msg, &len) != MPI_SUCCESS) snprintf(msg, sizeof msg, "MPI error code %d", rc);
    else msg[len < MPI_MAX_ERROR_STRING ? len : MPI_MAX_ERROR_STRING - 1] = '\0';
    return mg_error_set(err, MG_ERR_RUNTIME, "%s over %s failed: %s", what, mg_group_name(grp), msg);
}

static const char *thread_level_name(int l) {
    switch (l) {
    case MPI_THREAD_SINGLE: return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED: return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED: return "MPI_THREAD_SERIALIZED";
    case MPI_THREAD_MULTIPLE: return "MPI_THREAD_MULTIPLE";
    default: return "an unknown thread level";
    }
}

void mg_comm_free(mg_comm *c) {
    if (!c) return;
    int fin = 0;
#ifdef MG_CUDA
    mg_nccl_free(c->nccl);
#endif
    MPI_Finalized(&fin);
    for (int g = 0; g < MG_GROUP_COUNT; g++)
        if (!fin && c->comm[g] != MPI_COMM_NULL) MPI_Comm_free(&c->comm[g]);
    for (int g = 0; g < MG_GROUP_COUNT; g++)
        if (!fin && c->ring[g] != MPI_COMM_NULL) MPI_Comm_free(&c->ring[g]);
    free(c);
}

int mg_comm_new(const mg_mesh *m, mg_comm **out, mg_error *err) {
    if (!out) return mg_error_set(err, MG_ERR_INVALID, "mg_comm_new: NULL output");
    *out = NULL;
    if (!m) return mg_error_set(err, MG_ERR_INVALID, "mg_comm_new: NULL mesh");
    int init = 0, fin = 0;
    MPI_Initialized(&init);
    MPI_Finalized(&fin);
    if (!init || fin)
        return mg_error_set(err, MG_ERR_INVALID, "mg_comm_new: MPI is %s (call MPI_Init_thread first)",
                            fin ? "already finalized" : "not initialised");
    int level = MPI_THREAD_SINGLE;
    MPI_Query_thread(&level);
    /* Every rank reaches the same verdict (the same library, the same launch), so this
     * early return cannot leave the others waiting in a collective. */
    if (level < MPI_THREAD_SERIALIZED)
        return mg_error_set(err, MG_ERR_INVALID,
                            "mg_comm_new: MPI runs at %s; collectives run on StarPU workers and need "
                            "MPI_THREAD_SERIALIZED (MPI_Init_thread)",
                            thread_level_name(level));
    int wsize = 0, wrank = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &wsize);
    MPI_Comm_rank(MPI_COMM_WORLD, &wrank);

    /* Agree on the mesh before splitting: a rank whose mesh disagrees would otherwise
     * make the splits hang or pair the wrong ranks. */
    int local[1 + MG_GROUP_COUNT], lo[1 + MG_GROUP_COUNT], hi[1 + MG_GROUP_COUNT];
    local[0] = (m->world == wsize && m->rank == wrank) ? 1 : 0;
    for (int g = 0; g < MG_GROUP_COUNT; g++) local[1 + g] = m->size[g];
    int w = mg_wait_begin("MPI_Allreduce (mg_comm_new's mesh check)", m, MG_GROUP_WORLD, -1);
    int rc = MPI_Allreduce(local, lo, 1 + MG_GROUP_COUNT, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (rc == MPI_SUCCESS) rc = MPI_Allreduce(local, hi, 1 + MG_GROUP_COUNT, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    mg_wait_end(w);
    if (rc != MPI_SUCCESS) return mpi_fail(err, rc, "mg_comm_new: MPI_Allreduce (mesh check)", MG_GROUP_WORLD);
    if (!local[0])
        return mg_error_set(err, MG_ERR_INVALID,
                            "mg_comm_new: the mesh is for rank %d of %d, but this process is MPI rank %d of %d",
                            m->rank, m->world, wrank, wsize);
    if (!lo[0]) return mg_error_set(err, MG_ERR_INVALID, "mg_comm_new: another rank's mesh does not match its MPI rank");
    for (int g = 0; g < MG_GROUP_COUNT; g++)
        if (lo[1 + g] != hi[1 + g])
            return mg_error_set(err, MG_ERR_INVALID, "mg_comm_new: ranks disagree on the %s size (%d here, %d..%d)",
                                mg_group_name((mg_group)g), m->size[g], lo[1 + g], hi[1 + g]);

    mg_comm *c = calloc(1, sizeof *c);
    if (!c) return mg_error_set(err, MG_ERR_NOMEM, "mg_comm_new: out of memory");
    c->mesh = *m;
    pthread_mutex_init(&c->count_lock, NULL);
    c->multiple = level >= MPI_THREAD_MULTIPLE;
    int *ub = NULL, has_ub = 0;
    MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &has_ub);
    c->tag_ub = has_ub && ub && *ub > 0 ? *ub : 32767; /* the standard's minimum */
    for (int g = 0; g < MG_GROUP_COUNT; g++) c->comm[g] = c->ring[g] = MPI_COMM_NULL;
    for (int g = 0; g < MG_GROUP_COUNT; g++) {
        int w = mg_wait_begin("MPI_Comm_split (mg_comm_new)", m, MG_GROUP_WORLD, -1);
        if (g == MG_GROUP_WORLD) rc = MPI_Comm_dup(MPI_COMM_WORLD, &c->comm[g]);
        else if (m->coord[g] < 0) rc = MPI_Comm_split(MPI_COMM_WORLD, MPI_UNDEFINED, 0, &c->comm[g]); /* not a member */
        else rc = MPI_Comm_split(MPI_COMM_WORLD, mg_mesh_peer(m, (mg_group)g, 0), m->coord[g], &c->comm[g]);
        mg_wait_end(w);
        if (rc != MPI_SUCCESS) {
            mpi_fail(err, rc, "mg_comm_new: MPI_Comm_split", (mg_group)g);
            mg_comm_free(c);
            return MG_ERR_RUNTIME;
        }
        if (c->comm[g] == MPI_COMM_NULL) continue;
        MPI_Comm_set_errhandler(c->comm[g], MPI_ERRORS_RETURN);
        w = mg_wait_begin("MPI_Comm_dup (mg_comm_new)", m, (mg_group)g, -1);
        rc = MPI_Comm_dup(c->comm[g], &c->ring[g]); /* inherits the error handler */
        mg_wait_end(w);
        if (rc != MPI_SUCCESS) {
            mpi_fail(err, rc, "mg_comm_new: MPI_Comm_dup", (mg_group)g);
            mg_comm_free(c);
            return MG_ERR_RUNTIME;
        }
        int s = 0, r = 0;
        MPI_Comm_size(c->comm[g], &s);
        MPI_Comm_rank(c->comm[g], &r);
        if (s != m->size[g] || r != m->coord[g]) {
            mg_error_set(err, MG_ERR_RUNTIME, "mg_comm_new: %s communicator has %d ranks (index %d), mesh says %d (%d)",
                         mg_group_name((mg_group)g), s, r, m->size[g], m->coord[g]);
            mg_comm_free(c);
            return MG_ERR_RUNTIME;
        }
    }
    *out = c;
    return MG_OK;
}

const mg_mesh *mg_comm_mesh(const mg_comm *c) { return c ? &c->mesh : NULL; }

void mg_comm_bytes(const mg_comm *c, double bytes[MG_GROUP_COUNT]) {
    for (int g = 0; g < MG_GROUP_COUNT; g++) bytes[g] = c ? c->bytes[g] : 0.0;
}

void mg_comm_reset_bytes(mg_comm *c) {
    if (!c) return;
    memset(c->bytes, 0, sizeof c->bytes);
    c->seconds = 0;
    memset(c->group_seconds, 0, sizeof c->group_seconds);
}

double mg_comm_seconds(const mg_comm *c) { return c ? c->seconds : 0.0; }

double mg_comm_group_seconds(const mg_comm *c, mg_group grp) {
    return c && grp >= 0 && grp < MG_GROUP_COUNT ? c->group_seconds[grp] : 0.0;
}

int mg_comm_group_size(const mg_comm *c, mg_group grp) {
    if (!c || grp < 0 || grp >= MG_GROUP_COUNT) return -1;
    return c->mesh.size[grp];
}

int mg_comm_group_rank(const mg_comm *c, mg_group grp) {
    if (!c || grp < 0 || grp >= MG_GROUP_COUNT) return -1;
    return c->mesh.coord[grp];
}

/* ---- buffer collectives --------------------------------------------------------- */
static int prep(mg_comm *c, mg_group grp, mg_dtype dt, int64_t count, const char *what, MPI_Datatype *type,
                mg_error *err) {
    if (!c || grp < 0 || grp >= MG_GROUP_COUNT || c->comm[grp] == MPI_COMM_NULL)
        return mg_error_set(err, MG_ERR_INVALID, "%s: no communicator for group %s", what, mg_group_name(grp));
    if (dt == MG_F32) *type = MPI_FLOAT;
    else if (dt == MG_I32) *type = MPI_INT32_T;
    else if (dt == MG_BF16 || dt == MG_F16) *type = MPI_UINT16_T; /* moved, never summed: see reductions */
    else if (dt == MG_F8E4M3 || dt == MG_F8E5M2) *type = MPI_UINT8_T;
    else return mg_error_set(err, MG_ERR_UNSUPPORTED, "%s: dtype %s not supported (f32, i32)", what, mg_dtype_name(dt));
    if (count < 0 || count > INT_MAX)
        return mg_error_set(err, MG_ERR_UNSUPPORTED, "%s over %s: %lld elements exceed MPI's int count", what,
                            mg_group_name(grp), (long long)count);
    return MG_OK;
}

static void account(mg_comm *c, mg_group grp, mg_op op, mg_dtype dt, int64_t count, double t0) {
    mg_comm_account(c, grp, op, dt, count, MPI_Wtime() - t0);
}

void mg_comm_account(mg_comm *c, mg_group grp, mg_op op, mg_dtype dt, int64_t count, double seconds) {
    double b = mg_comm_wire_bytes(op, c->mesh.size[grp], (double)count * (double)mg_dtype_size(dt));
    pthread_mutex_lock(&c->count_lock);
    c->seconds += seconds;
    c->group_seconds[grp] += seconds;
    c->bytes[grp] += b;
    if (grp != MG_GROUP_WORLD) c->bytes[MG_GROUP_WORLD] += b; /* the total */
    pthread_mutex_unlock(&c->count_lock);
}

int mg_comm_allreduce_buf(mg_comm *c, mg_group grp, mg_dtype dt, const void *in, void *out, int64_t count,
                          mg_reduce_op op, mg_error *err) {
    MPI_Datatype type = MPI_DATATYPE_NULL;
    if (mg_dtype_is_low(dt)) /* (ops/registry.c widens narrow storage around reductions) */
        return mg_error_set(err, MG_ERR_UNSUPPORTED, "MPI_Allreduce: %s is summed in f32", mg_dtype_name(dt));
    int rc = prep(c, grp, dt, count, "MPI_Allreduce", &type, err);
    if (rc) return rc;
    MPI_Op mop;
    if (op == MG_REDUCE_SUM) mop = MPI_SUM;
    else if (op == MG_REDUCE_MAX) mop = MPI_MAX;
    else return mg_error_set(err, MG_ERR_INVALID, "MPI_Allreduce: reduce op %d invalid", (int)op);
    double t0 = MPI_Wtime();
    if (op == MG_REDUCE_SUM && count * (int64_t)mg_dtype_size(dt) >= RING_MIN_BYTES) {
        int w = mg_wait_begin("ring all-reduce", &c->mesh, grp, -1);
        rc = mg_ring_allreduce(c->ring[grp], type, dt, in, out, count);
        mg_wait_end(w);
        if (rc != MPI_SUCCESS) return mpi_fail(err, rc, "ring all-reduce", grp);
    } else {
        int w = mg_wait_begin("MPI_Allreduce", &c->mesh, grp, -1);
        rc = MPI_Allreduce(in == out ? MPI_IN_PLACE : in, out, (int)count, type, mop, c->comm[grp]);
        mg_wait_end(w);
        if (rc != MPI_SUCCESS) return mpi_fail(err, rc, "MPI_Allreduce", grp);
    }
    account(c, grp, MG_OP_ALLREDUCE, dt, count, t0);
    return MG_OK;
}

int mg_comm_allgather_buf(mg_comm *c, mg_group grp, mg_dtype dt, const void *in, void *out, int64_t count,
                          mg_error *err) {
    MPI_Datatype type = MPI_DATATYPE_NULL;
    int rc = prep(c, grp, dt, count, "MPI_Allgather", &type, err);
    if (rc) return rc;
    double t0 = MPI_Wtime();
    int w = mg_wait_begin("MPI_Allgather", &c->mesh, grp, -1);
    rc = MPI_Allgather(in, (int)count, type, out, (int)count, type, c->comm[grp]);
    mg_wait_end(w);
    if (rc != MPI_SUCCESS) return mpi_fail(err, rc, "MPI_Allgather", grp);
    account(c, grp, MG_OP_ALLGATHER, dt, count, t0);
    return MG_OK;
}

int mg_comm_reduce_scatter_buf(mg_comm *c, mg_group grp, mg_dtype dt, const void *in, void *out, int64_t count,
                               mg_error *err) {
    MPI_Datatype type = MPI_DATATYPE_NULL;
    if (mg_dtype_is_low(dt))
        return mg_error_set(err, MG_ERR_UNSUPPORTED, "MPI_Reduce_scatter: %s is summed in f32", mg_dtype_name(dt));
    int rc = prep(c, grp, dt, count, "MPI_Reduce_scatter_block", &type, err);
    if (rc) return rc;
    /* Small: MPI_Reduce_scatter_block, not MPI_Reduce_scatter with equal counts (measured
     * side by side here, Open MPI 4.1.4, 2 and 4 ranks, 64 KiB-16 MiB, interleaved runs:
     * the block variant was as fast or up to 2x faster). Large: the ring. */
    double t0 = MPI_Wtime();
    if (count * c->mesh.size[grp] * (int64_t)mg_dtype_size(dt) >= RING_MIN_BYTES) {
        int w = mg_wait_begin("ring reduce-scatter", &c->mesh, grp, -1);
        rc = mg_ring_reduce_scatter(c->ring[grp], type, dt, in, out, count);
        mg_wait_end(w);
        if (rc != MPI_SUCCESS) return mpi_fail(err, rc, "ring reduce-scatter", grp);
    } else {
        int w = mg_wait_begin("MPI_Reduce_scatter_block", &c->mesh, grp, -1);
        rc = MPI_Reduce_scatter_block(in, out, (int)count, type, MPI_SUM, c->comm[grp]);
        mg_wait_end(w);
        if (rc != MPI_SUCCESS) return mpi_fail(err, rc, "MPI_Reduce_scatter_block", grp);
    }
    account(c, grp, MG_OP_REDUCE_SCATTER, dt, count * c->mesh.size[grp], t0);
    return MG_OK;
}

int mg_comm_broadcast_buf(mg_comm *c, mg_group grp, mg_dtype dt, void *buf, int64_t count, int root,
                          mg_error *err) {
    MPI_Datatype type = MPI_DATATYPE_NULL;
    int rc = prep(c, grp, dt, count, "MPI_Bcast", &type, err);
    if (rc) return rc;
    if (root < 0 || root >= c->mesh.size[grp])
        return mg_error_set(err, MG_ERR_INVALID, "MPI_Bcast over %s: root %d outside 0..%d", mg_group_name(grp), root,
                            c->mesh.size[grp] - 1);
    double t0 = MPI_Wtime();
    int w = mg_wait_begin("MPI_Bcast", &c->mesh, grp, -1);
    rc = MPI_Bcast(buf, (int)count, type, root, c->comm[grp]);
    mg_wait_end(w);
    if (rc != MPI_SUCCESS) return mpi_fail(err, rc, "MPI_Bcast", grp);
    account(c, grp, MG_OP_BROADCAST, dt, count, t0);
    return MG_OK;
}

/* ---- all-to-all (expert parallelism's token dispatch) ---------------------------- */
int mg_comm_alltoall_buf(mg_comm *c, mg_group grp, mg_dtype dt, const void *in, void *out, int64_t count,
                         mg_error *err) {
    MPI_Datatype type = MPI_DATATYPE_NULL;
    int rc = prep(c, grp, dt, count, "MPI_Alltoall", &type, err);
    if (rc) return rc;
    double t0 = MPI_Wtime();
    int w = mg_wait_begin("MPI_Alltoall", &c->mesh, grp, -1);
    rc = MPI_Alltoall(in, (int)count, type, out, (int)count, type, c->comm[grp]);
    mg_wait_end(w);
    if (rc != MPI_SUCCESS) return mpi_fail(err, rc, "MPI_Alltoall", grp);
    /* the blocks that leave this rank: (n - 1) x count */
    account(c, grp, MG_OP_ALLTOALL, dt, count * (c->mesh.size[grp] - 1), t0);
    return MG_OK;
}

int mg_comm_alltoallv_buf(mg_comm *c, mg_group grp, mg_dtype dt, const void *in, const int64_t *send,
                          const int64_t *sdispl, void *out, const int64_t *recv, const int64_t *rdispl, mg_error *err) {
    MPI_Datatype type = MPI_DATATYPE_NULL;
    int rc = prep(c, grp, dt, 0, "MPI_Alltoallv", &type, err);
    if (rc) return rc;
    int n = c->mesh.size[grp], me = c->mesh.coord[grp];
    int *v = malloc((size_t)n * 4 * sizeof *v);
    if (!v) return mg_error_set(err, MG_ERR_NOMEM, "MPI_Alltoallv over %s: out of memory", mg_group_name(grp));
    int64_t off_rank = 0;
    for (int i = 0; i < n; i++) {
        const int64_t x[4] = {send[i], sdispl[i], recv[i], rdispl[i]};
        for (int k = 0; k < 4; k++) {
            if (x[k] < 0 || x[k] > INT_MAX) {
                free(v);
                return mg_error_set(err, MG_ERR_UNSUPPORTED,
                                    "MPI_Alltoallv over %s: count or displacement %lld outside MPI's int range",
                                    mg_group_name(grp), (long long)x[k]);
            }
            v[k * n + i] = (int)x[k];
        }
        if (i != me) off_rank += send[i];
    }
    double t0 = MPI_Wtime();
    int w = mg_wait_begin("MPI_Alltoallv", &c->mesh, grp, -1);
    rc = MPI_Alltoallv(in, v, v + n, type, out, v + 2 * n, v + 3 * n, type, c->comm[grp]);
    mg_wait_end(w);
    free(v);
    if (rc != MPI_SUCCESS) return mpi_fail(err, rc, "MPI_Alltoallv", grp);
    account(c, grp, MG_OP_ALLTOALL, dt, off_rank, t0);
    return MG_OK;
}

/* ---- context parallelism's ring step (ops/ring_shift.c) ------------------------------ */
int mg_comm_sendrecv_buf(mg_comm *c, mg_group grp, mg_dtype dt, const void *in, void *out, int64_t count, int dest,
                         int src, mg_error *err) {
    MPI_Datatype type = MPI_DATATYPE_NULL;
    int rc = prep(c, grp, dt, count, "MPI_Sendrecv", &type, err);
    if (rc) return rc;
    int n = c->mesh.size[grp];
    if (dest < 0 || dest >= n || src < 0 || src >= n)
        return mg_error_set(err, MG_ERR_INVALID, "MPI_Sendrecv over %s: peers %d, %d outside 0..%d", mg_group_name(grp),
                            dest, src, n - 1);
    double t0 = MPI_Wtime();
    int w = mg_wait_begin("MPI_Sendrecv (the context-parallel ring)", &c->mesh, grp, mg_mesh_peer(&c->mesh, grp, src));
    rc = MPI_Sendrecv(in, (int)count, type, dest, 0, out, (int)count, type, src, 0, c->comm[grp], MPI_STATUS_IGNORE);
    mg_wait_end(w);
    if (rc != MPI_SUCCESS) return mpi_fail(err, rc, "MPI_Sendrecv", grp);
    account(c, grp, MG_OP_RING_SHIFT, dt, count, t0);
    return MG_OK;
}
/* ---- point to point --------------------------------------------------------------- */
struct mg_comm_request {
    MPI_Request r;
    mg_group grp;
    mg_op op;         /* MG_OP_SEND / MG_OP_RECV: what to count on completion */
    mg_dtype dt;
    int64_t count;
    double t0;
    int watch;        /* the watchdog's token: a posted transfer is a wait until it completes */
};

bool mg_comm_p2p_ready(const mg_comm *c) { return c && c->multiple; }

static int post(mg_comm *c, mg_group grp, int peer, int64_t key, mg_dtype dt, void *buf, int64_t count, bool send,
                mg_comm_request **req, mg_error *err) {
    const char *what = send ? "MPI_Isend" : "MPI_Irecv";
    MPI_Datatype type = MPI_DATATYPE_NULL;
    *req = NULL;
    int rc = prep(c, grp, dt, count, what, &type, err);
    if (rc) return rc;
    if (peer < 0 || peer >= c->mesh.size[grp] || peer == c->mesh.coord[grp])
        return mg_error_set(err, MG_ERR_INVALID, "%s over %s: peer %d is not another member of 0..%d", what,
                            mg_group_name(grp), peer, c->mesh.size[grp] - 1);
    if (key < 0) return mg_error_set(err, MG_ERR_INVALID, "%s over %s: negative message key", what, mg_group_name(grp));
    mg_comm_request *q = malloc(sizeof *q);
    if (!q) return mg_error_set(err, MG_ERR_NOMEM, "%s: out of memory", what);
    *q = (mg_comm_request){.grp = grp, .op = send ? MG_OP_SEND : MG_OP_RECV, .dt = dt, .count = count, .t0 = MPI_Wtime()};
    int tag = (int)(key % ((int64_t)c->tag_ub + 1));
    rc = send ? MPI_Isend(buf, (int)count, type, peer, tag, c->comm[grp], &q->r)
              : MPI_Irecv(buf, (int)count, type, peer, tag, c->comm[grp], &q->r);
    if (rc != MPI_SUCCESS) {
        free(q);
        return mpi_fail(err, rc, what, grp);
    }
    q->watch = mg_wait_begin(send ? "a pipeline send (MPI_Isend)" : "a pipeline receive (MPI_Irecv)", &c->mesh, grp,
                             mg_mesh_peer(&c->mesh, grp, peer));
    *req = q;
    return MG_OK;
}

int mg_comm_isend_buf(mg_comm *c, mg_group grp, int peer, int64_t key, mg_dtype dt, const void *buf, int64_t count,
                      mg_comm_request **req, mg_error *err) {
    return post(c, grp, peer, key, dt, (void *)buf, count, true, req, err);
}

int mg_comm_irecv_buf(mg_comm *c, mg_group grp, int peer, int64_t key, mg_dtype dt, void *buf, int64_t count,
                      mg_comm_request **req, mg_error *err) {
    return post(c, grp, peer, key, dt, buf, count, false, req, err);
}

static int finish(mg_comm *c, mg_comm_request *q, int rc, MPI_Status *st, mg_error *err) {
    const char *what = q->op == MG_OP_SEND ? "MPI_Isend" : "MPI_Irecv";
    mg_group grp = q->grp;
    mg_wait_end(q->watch);
    if (rc == MPI_SUCCESS && q->op == MG_OP_RECV) {
        int got = 0;
        MPI_Get_count(st, MPI_BYTE, &got);
        long long want = (long long)(q->count * (int64_t)mg_dtype_size(q->dt));
        if ((long long)got != want) {
            free(q);
            return mg_error_set(err, MG_ERR_RUNTIME, "MPI_Irecv over %s: %d bytes arrived, %lld expected (the stages "
                                "disagree on the tensor's shape)", mg_group_name(grp), got, want);
        }
    }
    if (rc == MPI_SUCCESS) mg_comm_account(c, grp, q->op, q->dt, q->count, MPI_Wtime() - q->t0);
    free(q);
    return rc == MPI_SUCCESS ? MG_OK : mpi_fail(err, rc, what, grp);
}

int mg_comm_test(mg_comm *c, mg_comm_request *req, bool *done, mg_error *err) {
    int flag = 0;
    MPI_Status st;
    *done = false;
    int rc = MPI_Test(&req->r, &flag, &st);
    if (rc == MPI_SUCCESS && !flag) return MG_OK;
    *done = true;
    return finish(c, req, rc, &st, err);
}

int mg_comm_wait(mg_comm *c, mg_comm_request *req, mg_error *err) {
    MPI_Status st;
    int rc = MPI_Wait(&req->r, &st);
    return finish(c, req, rc, &st, err);
}

/* Collectives under mpirun: every rank builds the same small graph of collective
 * nodes over each group of several meshes, runs it with the reference executor and
 * its mg_comm, and compares with values computed locally from every rank's
 * deterministic inputs. Also: byte counters, error paths that must not hang, and
 * (argument "bench") a timing table.
 *
 * Run: mpirun -np 2|4 test_comm_mpi [all|collectives|errors|sums|engine|bench]. A watchdog ends a
 * hung run after 60 s.
 */
#include <math.h>
#include <mpi.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mgraph/comm.h"
#include "ops/op.h"
#include "ops/comm_api.h"
#include "testkit.h"

static int world_rank, world_size;

static void watchdog(int sig) {
    (void)sig;
    static const char msg[] = "test_comm_mpi: watchdog: no progress in 60 s (hung collective?)\n";
    ssize_t w = write(2, msg, sizeof msg - 1);
    (void)w;
    _exit(124);
}

/* Deterministic inputs: halves in [-24, 24], so sums of a few are exact in float. */
static float fval(int rank, int key, int64_t i) {
    return (float)((rank * 131 + key * 17 + (int)((i * 7) % 97)) % 97 - 48) * 0.5f;
}
static int32_t ival(int rank, int64_t i) { return (int32_t)((rank * 13 + i * 5) % 50) - 20; }

typedef struct item {
    mg_op op;
    mg_group grp;
    int n;              /* group size */
    int dim, root;
    mg_reduce_op rop;
    int key;            /* which input: key of fval, or -1 for the i32 ids */
    int ndim;
    int64_t shape[3];   /* of the input */
    bool chain;         /* reduce_scatter(allgather(x)) along dim: n * x */
    mg_tensor *out;
} item;

#define MAX_ITEMS 256

/* The value member `idx` of this rank's group holds at element i of input `key`. */
static float member_f(const mg_mesh *m, mg_group grp, int idx, int key, int64_t i) {
    return fval(mg_mesh_peer(m, grp, idx), key, i);
}

static void expected_f32(const mg_mesh *m, const item *it, float *want) {
    int n = it->n, d = it->dim;
    int64_t in_numel = it->shape[0] * it->shape[1] * it->shape[2];
    int64_t outer = 1, inner = 1;
    for (int k = 0; k < d; k++) outer *= it->shape[k];
    for (int k = d + 1; k < it->ndim; k++) inner *= it->shape[k];
    int64_t D = it->shape[d];
    if (it->chain) {
        for (int64_t i = 0; i < in_numel; i++) want[i] = (float)n * fval(m->rank, it->key, i);
        return;
    }
    switch (it->op) {
    case MG_OP_ALLREDUCE:
        for (int64_t i = 0; i < in_numel; i++) {
            float acc = member_f(m, it->grp, 0, it->key, i);
            for (int r = 1; r < n; r++) {
                float v = member_f(m, it->grp, r, it->key, i);
                acc = it->rop == MG_REDUCE_SUM ? acc + v : fmaxf(acc, v);
            }
            want[i] = acc;
        }
        break;
    case MG_OP_ALLGATHER: /* out[o][r*D + k][i] = member r's in[o][k][i] */
        for (int64_t o = 0; o < outer; o++)
            for (int r = 0; r < n; r++)
                for (int64_t k = 0; k < D; k++)
                    for (int64_t i = 0; i < inner; i++)
                        want[(o * n * D + r * D + k) * inner + i] = member_f(m, it->grp, r, it->key, (o * D + k) * inner + i);
        break;
    case MG_OP_REDUCE_SCATTER: { /* out[o][k][i] = sum_r member r's in[o][me*D/n + k][i] */
        int64_t Dn = D / n, me = m->coord[it->grp];
        for (int64_t o = 0; o < outer; o++)
            for (int64_t k = 0; k < Dn; k++)
                for (int64_t i = 0; i < inner; i++) {
                    int64_t src = (o * D + me * Dn + k) * inner + i;
                    float acc = 0;
                    for (int r = 0; r < n; r++) acc += member_f(m, it->grp, r, it->key, src);
                    want[(o * Dn + k) * inner + i] = acc;
                }
        break;
    }
    case MG_OP_BROADCAST:
        for (int64_t i = 0; i < in_numel; i++) want[i] = member_f(m, it->grp, it->root, it->key, i);
        break;
    default: break;
    }
}


/* Builds the collectives of one group into g. Inputs: x [2, 3, 5] (key 0, shared),
 * z [2n, 3n, n] (key 10 + grp), ids [7] i32. */
static int add_group(mg_graph *g, const mg_mesh *m, mg_group grp, mg_tensor *x, mg_tensor *ids, mg_tensor **z_out,
                     item *items, int n_items, int64_t *seq) {
    int n = m->size[grp];
    char nm[32];
    snprintf(nm, sizeof nm, "z_%s", mg_group_name(grp));
    int64_t zs[3] = {2 * n, 3 * n, n};
    mg_tensor *z = mg_input(g, nm, MG_F32, 3, zs);
    *z_out = z;
    item base = {.grp = grp, .n = n, .ndim = 3};
    item it;
#define ADD(...)                                                      \
    do {                                                              \
        it = base;                                                    \
        __VA_ARGS__;                                                  \
        items[n_items++] = it;                                        \
    } while (0)
#define XSHAPE (it.key = 0, it.shape[0] = 2, it.shape[1] = 3, it.shape[2] = 5)
#define ZSHAPE (it.key = 10 + grp, it.shape[0] = 2 * n, it.shape[1] = 3 * n, it.shape[2] = n)
    ADD(it.op = MG_OP_ALLREDUCE; it.rop = MG_REDUCE_SUM; XSHAPE; it.out = mg_allreduce(g, x, grp, n, MG_REDUCE_SUM, (*seq)++));
    ADD(it.op = MG_OP_ALLREDUCE; it.rop = MG_REDUCE_MAX; XSHAPE; it.out = mg_allreduce(g, x, grp, n, MG_REDUCE_MAX, (*seq)++));
    ADD(it.op = MG_OP_ALLREDUCE; it.rop = MG_REDUCE_MAX; ZSHAPE; it.out = mg_allreduce(g, z, grp, n, MG_REDUCE_MAX, (*seq)++));
    ADD(it.op = MG_OP_ALLREDUCE; it.rop = MG_REDUCE_SUM; it.key = -1; it.ndim = 1; it.shape[0] = 7; it.shape[1] = 1;
        it.shape[2] = 1; it.out = mg_allreduce(g, ids, grp, n, MG_REDUCE_SUM, (*seq)++));
    ADD(it.op = MG_OP_ALLREDUCE; it.rop = MG_REDUCE_MAX; it.key = -1; it.ndim = 1; it.shape[0] = 7; it.shape[1] = 1;
        it.shape[2] = 1; it.out = mg_allreduce(g, ids, grp, n, MG_REDUCE_MAX, (*seq)++));
    for (int d = 0; d < 3; d++) {
        ADD(it.op = MG_OP_ALLGATHER; it.dim = d; XSHAPE; it.out = mg_allgather(g, x, grp, n, d, (*seq)++));
        ADD(it.op = MG_OP_REDUCE_SCATTER; it.dim = d; ZSHAPE; it.out = mg_reduce_scatter(g, z, grp, n, d, (*seq)++));
    }
    ADD(it.op = MG_OP_BROADCAST; it.root = 0; XSHAPE; it.out = mg_broadcast(g, x, grp, n, 0, (*seq)++));
    ADD(it.op = MG_OP_BROADCAST; it.root = n - 1; ZSHAPE; it.out = mg_broadcast(g, z, grp, n, n - 1, (*seq)++));
    ADD(it.op = MG_OP_BROADCAST; it.root = n / 2; it.key = -1; it.ndim = 1; it.shape[0] = 7; it.shape[1] = 1;
        it.shape[2] = 1; it.out = mg_broadcast(g, ids, grp, n, n / 2, (*seq)++));
    for (int d = 0; d < 3; d += 2) {
        mg_tensor *ag = mg_allgather(g, x, grp, n, d, (*seq)++);
        ADD(it.op = MG_OP_REDUCE_SCATTER; it.dim = d; it.chain = true; XSHAPE;
            it.out = mg_reduce_scatter(g, ag, grp, n, d, (*seq)++));
    }
#undef ADD
#undef XSHAPE
#undef ZSHAPE
    return n_items;
}

static void check_item(tk_run *r, const mg_mesh *m, const item *it, const char *mesh_name) {
    char what[160];
    snprintf(what, sizeof what, "rank %d, mesh %s: %s over %s (n %d, dim %d, root %d, %s%s)", m->rank, mesh_name,
             mg_op_name(it->op), mg_group_name(it->grp), it->n, it->dim, it->root,
             it->rop == MG_REDUCE_MAX ? "max" : "sum", it->chain ? ", chained after allgather" : "");
    int64_t out_n = mg_numel(it->out);
    if (it->key < 0) {
        const int32_t *got = tk_i32(r, it->out);
        for (int64_t i = 0; i < out_n; i++) {
            int32_t want;
            if (it->op == MG_OP_BROADCAST) {
                want = ival(mg_mesh_peer(m, it->grp, it->root), i);
            } else {
                want = ival(mg_mesh_peer(m, it->grp, 0), i);
                for (int k = 1; k < it->n; k++) {
                    int32_t v = ival(mg_mesh_peer(m, it->grp, k), i);
                    want = it->rop == MG_REDUCE_SUM ? want + v : (v > want ? v : want);
                }
            }
            if (got[i] != want) {
                TK_CHECK(0, "%s: [%lld] = %d, want %d", what, (long long)i, got[i], want);
                return;
            }
        }
        return;
    }
    float *want = malloc((size_t)out_n * sizeof *want);
    expected_f32(m, it, want);
    tk_expect_close(what, tk_f32(r, it->out), want, out_n, 0.0, 0.0);
    free(want);
}

/* One mesh: every group's collectives in one graph, one run, exact comparison. */
static void run_mesh(int tp, int cp, int ep, int pp) {
    mg_mesh m;
    mg_error err = {0};
    char mesh_name[64];
    if (mg_mesh_init(&m, world_size, world_rank, tp, cp, ep, pp, &err)) return; /* not a layout of this world */
    snprintf(mesh_name, sizeof mesh_name, "tp%d cp%d ep%d dp%d pp%d", tp, cp, ep, m.size[MG_GROUP_DP], pp);
    mg_comm *comm = NULL;
    if (mg_comm_new(&m, &comm, &err)) {
        TK_CHECK(0, "rank %d, mesh %s: mg_comm_new: %s", world_rank, mesh_name, err.msg);
        return;
    }
    TK_CHECK(mg_comm_mesh(comm) && mg_comm_mesh(comm)->size[MG_GROUP_DP] == m.size[MG_GROUP_DP], "mg_comm_mesh");
    mg_graph *g = mg_graph_new();
    int64_t xs[3] = {2, 3, 5}, is[1] = {7};
    mg_tensor *x = mg_input(g, "x", MG_F32, 3, xs), *ids = mg_input(g, "ids", MG_I32, 1, is);
    static item items[MAX_ITEMS];
    mg_tensor *zs[MG_GROUP_COUNT];
    int n_items = 0;
    int64_t seq = 0;
    for (int grp = 0; grp < MG_GROUP_COUNT; grp++)
        n_items = add_group(g, &m, (mg_group)grp, x, ids, &zs[grp], items, n_items, &seq);
    tk_run r;
    if (mg_graph_error(g)->code || tk_prepare(&r, g)) {
        TK_CHECK(0, "rank %d, mesh %s: build: %s", world_rank, mesh_name, mg_graph_error(g)->msg);
        mg_graph_free(g);
        mg_comm_free(comm);
        return;
    }
    for (int64_t i = 0; i < 30; i++) tk_f32(&r, x)[i] = fval(world_rank, 0, i);
    for (int64_t i = 0; i < 7; i++) tk_i32(&r, ids)[i] = ival(world_rank, i);
    for (int grp = 0; grp < MG_GROUP_COUNT; grp++) {
        float *z = tk_f32(&r, zs[grp]);
        for (int64_t i = 0; i < mg_numel(zs[grp]); i++) z[i] = fval(world_rank, 10 + grp, i);
    }
    r.info.comm = comm;
    mg_comm_reset_bytes(comm);
    if (tk_exec(&r)) {
        tk_failures++;
    } else {
        for (int i = 0; i < n_items; i++) check_item(&r, &m, &items[i], mesh_name);
        /* Byte counters: what the nodes' costs say, per group and in total. */
        double want[MG_GROUP_COUNT] = {0}, got[MG_GROUP_COUNT];
        bool any = false;
        for (int k = 0; k < mg_graph_n_nodes(g); k++) {
            const mg_node *nd = mg_graph_node(g, k);
            double fl, by;
            mg_op_cost(nd, &fl, &by);
            want[nd->attrs.comm.group] += by;
            if (nd->attrs.comm.group != MG_GROUP_WORLD) want[MG_GROUP_WORLD] += by; /* the total */
            if (nd->attrs.comm.nranks > 1) any = true;
        }
        mg_comm_bytes(comm, got);
        for (int grp = 0; grp < MG_GROUP_COUNT; grp++)
            TK_CHECK(fabs(got[grp] - want[grp]) < 1e-6, "rank %d, mesh %s: %s bytes %.1f, want %.1f", world_rank,
                     mesh_name, mg_group_name((mg_group)grp), got[grp], want[grp]);
        TK_CHECK(any == (mg_comm_seconds(comm) > 0), "rank %d, mesh %s: seconds %g", world_rank, mesh_name,
                 mg_comm_seconds(comm));
        mg_comm_reset_bytes(comm);
        mg_comm_bytes(comm, got);
        TK_CHECK(got[MG_GROUP_WORLD] == 0 && mg_comm_seconds(comm) == 0, "reset");
    }
    if (world_rank == 0 && !tk_failures)
        printf("ok collectives, mesh %s: %d nodes, groups tp %d cp %d ep %d dp %d pp %d dp_cp %d world %d\n", mesh_name,
               mg_graph_n_nodes(g), m.size[MG_GROUP_TP], m.size[MG_GROUP_CP], m.size[MG_GROUP_EP], m.size[MG_GROUP_DP],
               m.size[MG_GROUP_PP], m.size[MG_GROUP_DP_CP], m.size[MG_GROUP_WORLD]);
    tk_release(&r);
    mg_graph_free(g);
    mg_comm_free(comm);
}

static void collectives(void) {
    static const int meshes[][4] = {{1, 1, 1, 1}, {2, 1, 1, 1}, {1, 2, 1, 1}, {1, 1, 1, 2},
                                    {2, 1, 1, 2}, {1, 1, 2, 1}, {2, 1, 2, 1}, {1, 2, 2, 1}};
    for (size_t i = 0; i < sizeof meshes / sizeof meshes[0]; i++)
        run_mesh(meshes[i][0], meshes[i][1], meshes[i][2], meshes[i][3]);
}

/* Large sums take comm_ring.c's ring instead of MPI's collective: exact sums (the inputs
 * are halves, so every order gives the same bits) and the same bits as MPI's own, for
 * counts around the switch, counts the ranks do not divide, f32 and i32, in place, and
 * over the world and a sub-group (dp with tp 2). */
static void check_sum(mg_comm *comm, const mg_mesh *m, mg_group grp, mg_dtype dt, int64_t count, bool reduce_scatter,
                      bool in_place) {
    int n = m->size[grp], me = m->coord[grp];
    int64_t in_n = reduce_scatter ? count * n : count, out_n = count;
    size_t es = mg_dtype_size(dt);
    char *in = malloc((size_t)in_n * es), *out = malloc((size_t)in_n * es), *mpi = malloc((size_t)in_n * es);
    if (!in || !out || !mpi) {
        TK_CHECK(0, "out of memory");
        goto done;
    }
    for (int64_t i = 0; i < in_n; i++) {
        if (dt == MG_F32) ((float *)in)[i] = fval(m->rank, 3, i);
        else ((int32_t *)in)[i] = ival(m->rank, i);
    }
    mg_error err = {0};
    int rc;
    if (reduce_scatter) {
        rc = mg_comm_reduce_scatter_buf(comm, grp, dt, in, out, count, &err);
    } else {
        if (in_place) memcpy(out, in, (size_t)in_n * es);
        rc = mg_comm_allreduce_buf(comm, grp, dt, in_place ? out : in, out, count, MG_REDUCE_SUM, &err);
    }
    char what[160];
    snprintf(what, sizeof what, "rank %d: %s %s over %s (n %d), %lld elements%s", m->rank, mg_dtype_name(dt),
             reduce_scatter ? "reduce-scatter" : "all-reduce", mg_group_name(grp), n, (long long)count,
             in_place ? ", in place" : "");
    if (rc) {
        TK_CHECK(0, "%s: %s", what, err.msg);
        goto done;
    }
    MPI_Datatype type = dt == MG_F32 ? MPI_FLOAT : MPI_INT32_T;
    MPI_Comm sub;
    MPI_Comm_split(MPI_COMM_WORLD, mg_mesh_peer(m, grp, 0), me, &sub);
    if (reduce_scatter) MPI_Reduce_scatter_block(in, mpi, (int)count, type, MPI_SUM, sub);
    else MPI_Allreduce(in, mpi, (int)count, type, MPI_SUM, sub);
    MPI_Comm_free(&sub);
    int64_t base = reduce_scatter ? me * count : 0, bad = -1;
    for (int64_t i = 0; i < out_n && bad < 0; i++) {
        if (dt == MG_F32) {
            float want = 0;
            for (int k = 0; k < n; k++) want += fval(mg_mesh_peer(m, grp, k), 3, base + i);
            if (((float *)out)[i] != want) bad = i;
        } else {
            int32_t want = 0;
            for (int k = 0; k < n; k++) want += ival(mg_mesh_peer(m, grp, k), base + i);
            if (((int32_t *)out)[i] != want) bad = i;
        }
    }
    TK_CHECK(bad < 0, "%s: wrong sum at element %lld", what, (long long)bad);
    TK_CHECK(!memcmp(out, mpi, (size_t)out_n * es), "%s: not the bits of MPI's own", what);
done:
    free(in);
    free(out);
    free(mpi);
}

static void large_sums(void) {
    static const int64_t counts[] = {16383, 16384, 16385, 65539, 300001};
    for (int tp = 1; tp <= 2; tp++) {
        mg_mesh m;
        mg_comm *comm = NULL;
        mg_error err = {0};
        if (mg_mesh_init(&m, world_size, world_rank, tp, 1, 1, 1, &err)) continue;
        if (mg_comm_new(&m, &comm, &err)) {
            TK_CHECK(0, "rank %d: mg_comm_new: %s", world_rank, err.msg);
            continue;
        }
        mg_group grp = tp == 1 ? MG_GROUP_WORLD : MG_GROUP_DP;
        for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++)
            for (int dt = 0; dt < 2; dt++) {
                mg_dtype t = dt ? MG_I32 : MG_F32;
                check_sum(comm, &m, grp, t, counts[i], false, false);
                check_sum(comm, &m, grp, t, counts[i], false, true);
                /* per-rank counts: the whole input is n times larger */
                check_sum(comm, &m, grp, t, counts[i] / m.size[grp], true, false);
            }
        mg_comm_free(comm);
    }
    if (world_rank == 0 && !tk_failures) printf("ok large sums (the ring)\n");
}

/* Errors every rank sees alike, so nobody waits in a collective. */
static void errors(void) {
    mg_mesh m;
    mg_error err = {0};
    mg_comm *comm = NULL;
    /* A mesh for another world size. */
    mg_mesh_init(&m, 2 * world_size, world_rank, 1, 1, 1, 1, NULL);
    int rc = mg_comm_new(&m, &comm, &err);
    TK_CHECK(rc == MG_ERR_INVALID && comm == NULL && strstr(err.msg, "mesh is for rank"),
             "rank %d: wrong world: %d %s", world_rank, rc, err.msg);
    /* Ranks disagreeing on the layout (only when there is more than one layout). */
    if (world_size >= 2) {
        mg_error_clear(&err);
        mg_mesh_init(&m, world_size, world_rank, world_rank == 0 ? world_size : 1, 1, 1, 1, NULL);
        rc = mg_comm_new(&m, &comm, &err);
        TK_CHECK(rc == MG_ERR_INVALID && comm == NULL && strstr(err.msg, "disagree"), "rank %d: disagreeing mesh: %d %s",
                 world_rank, rc, err.msg);
    }
    /* A node built for a group size the communicator does not have. */
    mg_error_clear(&err);
    mg_mesh_init(&m, world_size, world_rank, world_size, 1, 1, 1, NULL);
    if (mg_comm_new(&m, &comm, &err)) {
        TK_CHECK(0, "mg_comm_new: %s", err.msg);
        return;
    }
    mg_graph *g = mg_graph_new();
    int64_t s[1] = {4};
    mg_tensor *x = mg_input(g, "x", MG_F32, 1, s);
    mg_allreduce(g, x, MG_GROUP_TP, world_size + 1, MG_REDUCE_SUM, 0);
    tk_run r;
    if (!tk_prepare(&r, g)) {
        r.info.comm = comm;
        mg_error_clear(&err);
        rc = mg_exec_reference(g, r.st, &r.info, &err);
        TK_CHECK(rc == MG_ERR_INVALID && strstr(err.msg, "the communicator's has"), "rank %d: nranks mismatch: %d %s",
                 world_rank, rc, err.msg);
        tk_release(&r);
    } else {
        tk_failures++;
    }
    mg_graph_free(g);
    /* The communicator still works after the failed node. */
    float v = 1.0f, sum = 0;
    rc = mg_comm_allreduce_buf(comm, MG_GROUP_WORLD, MG_F32, &v, &sum, 1, MG_REDUCE_SUM, &err);
    TK_CHECK(rc == 0 && sum == (float)world_size, "allreduce after an error: %d %g", rc, sum);
    /* An error MPI reports (its argument check, local on every rank: MPI_IN_PLACE as
     * the receive buffer) comes back as MG_ERR_RUNTIME with MPI's message. Open MPI
     * raises this one on MPI_COMM_WORLD, not on the call's communicator, so the test
     * lets MPI_COMM_WORLD return errors meanwhile. */
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    mg_error_clear(&err);
    rc = mg_comm_allreduce_buf(comm, MG_GROUP_WORLD, MG_F32, &v, MPI_IN_PLACE, 1, MG_REDUCE_SUM, &err);
    TK_CHECK(rc == MG_ERR_RUNTIME && strstr(err.msg, "MPI_Allreduce over world failed: MPI_ERR_BUFFER"),
             "rank %d: MPI error: %d %s", world_rank, rc, err.msg);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
    mg_error_clear(&err);
    sum = 0;
    rc = mg_comm_allreduce_buf(comm, MG_GROUP_WORLD, MG_F32, &v, &sum, 1, MG_REDUCE_SUM, &err);
    TK_CHECK(rc == 0 && sum == (float)world_size, "allreduce after an MPI error: %d %g", rc, sum);
    mg_comm_free(comm);
    if (world_rank == 0 && !tk_failures) printf("ok errors\n");
}

/* The same collectives as StarPU tasks: kernels on worker threads, the engine's comm
 * chain in seq order; bitwise equal to the reference executor on the same ranks. */
static void engine(void) {
    mg_mesh m;
    mg_error err = {0};
    int tp = world_size % 2 == 0 ? 2 : 1;
    if (mg_mesh_init(&m, world_size, world_rank, tp, 1, 1, 1, &err)) {
        TK_CHECK(0, "mesh: %s", err.msg);
        return;
    }
    mg_comm *comm = NULL;
    if (mg_comm_new(&m, &comm, &err)) {
        TK_CHECK(0, "mg_comm_new: %s", err.msg);
        return;
    }
    int ntp = m.size[MG_GROUP_TP], ndp = m.size[MG_GROUP_DP], nw = m.size[MG_GROUP_WORLD];
    mg_graph *g = mg_graph_new();
    int64_t sh[2] = {4, 6 * ndp};
    mg_tensor *x = mg_input(g, "x", MG_F32, 2, sh);
    mg_tensor *a = mg_allreduce(g, mg_scale(g, x, 2.0f), MG_GROUP_TP, ntp, MG_REDUCE_SUM, 0);
    mg_tensor *b = mg_allgather(g, mg_add(g, a, x), MG_GROUP_DP, ndp, 1, 1);
    mg_tensor *c = mg_reduce_scatter(g, mg_scale(g, b, 0.5f), MG_GROUP_DP, ndp, 1, 2);
    mg_tensor *d = mg_broadcast(g, mg_mul(g, c, c), MG_GROUP_WORLD, nw, nw - 1, 3);
    mg_tensor *y = mg_allreduce(g, mg_add(g, d, a), MG_GROUP_WORLD, nw, MG_REDUCE_MAX, 4);
    mg_memplan *plan = NULL;
    mg_storage *ref = NULL, *sp = NULL;
    mg_engine *e = NULL;
    if (!y) {
        TK_CHECK(0, "build: %s", mg_graph_error(g)->msg);
        goto done;
    }
    y->persistent = true;
    mg_engine_options opt = {.sched_policy = NULL, .ncpus = 1, .use_priorities = true};
    if (mg_memplan_build(g, true, &plan, &err) || mg_storage_new(g, plan, &ref, &err) ||
        mg_storage_new(g, plan, &sp, &err) || mg_engine_new(g, sp, &opt, &e, &err)) {
        TK_CHECK(0, "rank %d: setup: %s", world_rank, err.msg);
        goto done;
    }
    mg_exec_info info = {.seed = 1, .training = true, .comm = comm};
    for (int step = 0; step < 3; step++) {
        float *xr = mg_storage_data(ref, x), *xs = mg_storage_data(sp, x);
        for (int64_t i = 0; i < mg_numel(x); i++) xr[i] = xs[i] = fval(world_rank, 20 + step, i);
        int rc = mg_exec_reference(g, ref, &info, &err);
        TK_CHECK(rc == MG_OK, "rank %d: reference: %s", world_rank, err.msg);
        rc = mg_engine_run(e, &info, &err);
        TK_CHECK(rc == MG_OK, "rank %d: engine step %d: %s", world_rank, step, err.msg);
        if (rc) break;
        TK_CHECK(memcmp(mg_storage_data(ref, y), mg_storage_data(sp, y), (size_t)mg_numel(y) * sizeof(float)) == 0,
                 "rank %d step %d: engine differs from the reference", world_rank, step);
        /* y is the same on every rank (allreduce over the world). */
        float v = ((float *)mg_storage_data(sp, y))[5], lo, hi;
        MPI_Allreduce(&v, &lo, 1, MPI_FLOAT, MPI_MIN, MPI_COMM_WORLD);
        MPI_Allreduce(&v, &hi, 1, MPI_FLOAT, MPI_MAX, MPI_COMM_WORLD);
        TK_CHECK(lo == hi, "rank %d: world allreduce result differs between ranks", world_rank);
    }
    if (world_rank == 0 && !tk_failures)
        printf("ok engine: tp %d dp %d, 5 collectives x 3 steps as StarPU tasks match the reference\n", ntp, ndp);
done:
    mg_engine_free(e);
    mg_storage_free(sp);
    mg_storage_free(ref);
    mg_memplan_free(plan);
    mg_graph_free(g);
    mg_comm_free(comm);
}

/* ---- timings (not a test: prints a table) ----------------------------------------- */
static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* MPI's own collective, the same sizes, for the side-by-side column. */
static void raw_mpi(mg_op op, const float *in, float *out, int64_t in_elems) {
    int n = world_size;
    if (op == MG_OP_ALLREDUCE) MPI_Allreduce(in, out, (int)in_elems, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    else if (op == MG_OP_ALLGATHER) MPI_Allgather(in, (int)in_elems, MPI_FLOAT, out, (int)in_elems, MPI_FLOAT, MPI_COMM_WORLD);
    else if (op == MG_OP_REDUCE_SCATTER)
        MPI_Reduce_scatter_block(in, out, (int)(in_elems / n), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    else MPI_Bcast(out, (int)in_elems, MPI_FLOAT, 0, MPI_COMM_WORLD);
}

/* Each collective through mgraph (a graph node on the reference executor, mg_comm) beside
 * the plain MPI call on the same buffers sizes, interleaved rep by rep. */
static void bench(void) {
    mg_mesh m;
    mg_comm *comm = NULL;
    mg_error err = {0};
    if (mg_mesh_init(&m, world_size, world_rank, 1, 1, 1, 1, &err) || mg_comm_new(&m, &comm, &err)) {
        TK_CHECK(0, "bench setup: %s", err.msg);
        return;
    }
    static const int64_t sizes[] = {4 << 10, 64 << 10, 1 << 20, 16 << 20, 48 << 20};
    static const mg_op ops[] = {MG_OP_ALLREDUCE, MG_OP_ALLGATHER, MG_OP_REDUCE_SCATTER, MG_OP_BROADCAST};
    if (world_rank == 0)
        printf("%d ranks (world group), f32; size = output bytes (allgather) or input bytes; median of 20\n"
               "| collective | bytes | mgraph us | MPI's own us | mgraph busbw GB/s | MPI busbw GB/s | MPI / mgraph |\n"
               "|---|---|---|---|---|---|---|\n",
               world_size);
    for (size_t o = 0; o < sizeof ops / sizeof ops[0]; o++)
        for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
            int64_t elems = sizes[si] / 4;
            int n = world_size;
            int64_t in_elems = ops[o] == MG_OP_ALLGATHER ? elems / n : elems;
            mg_graph *g = mg_graph_new();
            mg_tensor *x = mg_input(g, "x", MG_F32, 1, &in_elems);
            if (ops[o] == MG_OP_ALLREDUCE) mg_allreduce(g, x, MG_GROUP_WORLD, n, MG_REDUCE_SUM, 0);
            else if (ops[o] == MG_OP_ALLGATHER) mg_allgather(g, x, MG_GROUP_WORLD, n, 0, 0);
            else if (ops[o] == MG_OP_REDUCE_SCATTER) mg_reduce_scatter(g, x, MG_GROUP_WORLD, n, 0, 0);
            else mg_broadcast(g, x, MG_GROUP_WORLD, n, 0, 0);
            tk_run r;
            float *rin = malloc((size_t)elems * sizeof *rin), *rout = malloc((size_t)elems * sizeof *rout);
            if (!rin || !rout || tk_prepare(&r, g)) {
                tk_failures++;
                free(rin);
                free(rout);
                mg_graph_free(g);
                continue;
            }
            r.info.comm = comm;
            tk_fill(&(tk_rng){(uint64_t)world_rank + 1}, tk_f32(&r, x), in_elems, -1, 1);
            memcpy(rin, tk_f32(&r, x), (size_t)in_elems * sizeof *rin);
            memset(rout, 0, (size_t)elems * sizeof *rout);
            enum { WARM = 3, REPS = 20 };
            double t[2][REPS];
            for (int k = 0; k < WARM + REPS; k++)
                for (int which = 0; which < 2; which++) {
                    MPI_Barrier(MPI_COMM_WORLD);
                    double t0 = MPI_Wtime();
                    if (which == 0) {
                        if (tk_exec(&r)) tk_failures++;
                    } else {
                        raw_mpi(ops[o], rin, rout, in_elems);
                    }
                    double dt = MPI_Wtime() - t0, mx;
                    MPI_Allreduce(&dt, &mx, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
                    if (k >= WARM) t[which][k - WARM] = mx;
                }
            double med[2];
            for (int w = 0; w < 2; w++) {
                qsort(t[w], REPS, sizeof t[w][0], cmp_d);
                med[w] = 0.5 * (t[w][REPS / 2 - 1] + t[w][REPS / 2]);
            }
            /* nccl-tests' bus bandwidth factors */
            double f = ops[o] == MG_OP_ALLREDUCE ? 2.0 * (n - 1) / n : ops[o] == MG_OP_BROADCAST ? 1.0 : (double)(n - 1) / n;
            if (world_rank == 0)
                printf("| %s | %lld | %.1f | %.1f | %.2f | %.2f | %.2fx |\n", mg_op_name(ops[o]), (long long)sizes[si],
                       med[0] * 1e6, med[1] * 1e6, (double)sizes[si] / med[0] / 1e9 * f,
                       (double)sizes[si] / med[1] / 1e9 * f, med[1] / med[0]);
            tk_release(&r);
            free(rin);
            free(rout);
            mg_graph_free(g);
        }
    mg_comm_free(comm);
}

int main(int argc, char **argv) {
    signal(SIGALRM, watchdog);
    alarm(60);
    int provided = 0;
    if (MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS) {
        fprintf(stderr, "MPI_Init_thread failed\n");
        return 1;
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world_size);
    if (provided < MPI_THREAD_SERIALIZED) {
        fprintf(stderr, "rank %d: MPI provides thread level %d < MPI_THREAD_SERIALIZED\n", world_rank, provided);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    const char *what = argc > 1 ? argv[1] : "all";
    bool known = false;
    if (!strcmp(what, "all") || !strcmp(what, "collectives")) collectives(), known = true;
    if (!strcmp(what, "all") || !strcmp(what, "errors")) errors(), known = true;
    if (!strcmp(what, "all") || !strcmp(what, "sums")) large_sums(), known = true;
    if (!strcmp(what, "engine")) engine(), known = true;
    if (!strcmp(what, "bench")) alarm(300), bench(), known = true;
    if (!known) {
        if (world_rank == 0) fprintf(stderr, "unknown test '%s' (all, collectives, errors, sums, engine, bench)\n", what);
        tk_failures++;
    }
    int total = 0;
    MPI_Allreduce(&tk_failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (total && world_rank == 0) fprintf(stderr, "%d check(s) failed over %d ranks\n", total, world_size);
    MPI_Finalize();
    return total ? 1 : 0;
}

/* Expert parallelism's all-to-all (ops/alltoall.c) under mpirun, 2 and 4 ranks.
 *
 * Every rank permutes its own tokens (a deterministic routing map per rank), exchanges
 * counts, dispatches the rows to the experts' owners and combines them back, with the
 * reference executor over a real MPI communicator, and checks against values computed
 * here from every rank's inputs:
 *   - local counts and splits = the other ranks' counts for this rank's experts;
 *   - the dispatched rows, expert-major then member-major, are the members' rows;
 *   - combine(dispatch(xs)) = xs, rows past the totals zero;
 *   - adjointness (the gradient rule): sum over ranks <dispatch(xs), y> = <xs, combine(y)>;
 *   - bytes counted on the ep group = the rows that left the rank x hidden x 4 (dispatch
 *     and combine) + the counts (n - 1) x E/n x 4.
 * Run: mpirun -np 2|4 test_alltoall_mpi. A watchdog ends a hung run after 60 s.
 */
#include <math.h>
#include <mpi.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mgraph/comm.h"
#include "mgraph/moe.h"
#include "ops/comm_api.h"
#include "testkit.h"

static int world_rank, world_size;

static void watchdog(int sig) {
    (void)sig;
    static const char msg[] = "test_alltoall_mpi: watchdog: no progress in 60 s (hung collective?)\n";
    ssize_t w = write(2, msg, sizeof msg - 1);
    (void)w;
    _exit(124);
}

enum { T = 7, H = 3 };

static float xval(int rank, int t, int j) { return (float)(rank * 100 + t * 10 + j); }
/* a routing map per rank: token t goes to expert e when a hash says so (0..E experts per
 * token, uneven on purpose; some experts get nothing) */
static int routed(int rank, int t, int e, int E) { return ((rank * 7 + t * 3 + e * 5 + t * e) % 4) < 2 && !(e == E - 1 && rank == 1); }

static void run_case(int El) {
    int n = world_size, E = n * El;
    mg_mesh m;
    mg_error err = {0};
    mg_comm *comm = NULL;
    TK_CHECK(!mg_mesh_init(&m, n, world_rank, 1, 1, n, 1, &err), "mesh: %s", err.msg);
    if (mg_comm_new(&m, &comm, &err)) {
        TK_CHECK(0, "mg_comm_new: %s", err.msg);
        return;
    }
    int64_t R = (int64_t)T * E, Rd = (int64_t)n * T * El;
    mg_graph *g = mg_graph_new();
    mg_tensor *x = mg_input(g, "x", MG_F32, 2, (int64_t[]){T, H});
    mg_tensor *map = mg_input(g, "map", MG_I32, 2, (int64_t[]){T, E});
    mg_tensor *y = mg_input(g, "y", MG_F32, 2, (int64_t[]){Rd, H});
    mg_tensor *counts = NULL, *splits = NULL, *local = NULL;
    mg_tensor *xs = mg_moe_permute(g, x, map, NULL, R, &counts);
    mg_alltoall_counts(g, counts, MG_GROUP_EP, n, 0, &splits, &local);
    mg_tensor *xd = mg_alltoallv(g, xs, counts, splits, MG_GROUP_EP, n, false, Rd, 1);
    mg_tensor *back = mg_alltoallv(g, xd, counts, splits, MG_GROUP_EP, n, true, R, 2);
    mg_tensor *yc = mg_alltoallv(g, y, counts, splits, MG_GROUP_EP, n, true, R, 3);
    tk_run r;
    if (mg_graph_error(g)->code || tk_prepare(&r, g)) {
        TK_CHECK(0, "build: %s", mg_graph_error(g)->msg);
        mg_graph_free(g);
        mg_comm_free(comm);
        return;
    }
    for (int t = 0; t < T; t++) {
        for (int j = 0; j < H; j++) tk_f32(&r, x)[t * H + j] = xval(world_rank, t, j);
        for (int e = 0; e < E; e++) tk_i32(&r, map)[t * E + e] = routed(world_rank, t, e, E);
    }
    for (int64_t i = 0; i < Rd * H; i++) tk_f32(&r, y)[i] = (float)((i * 7 + world_rank * 3) % 11) - 5.0f;
    r.info.comm = comm;
    mg_comm_reset_bytes(comm);
    if (tk_exec(&r)) {
        TK_CHECK(0, "exec failed");
    } else {
        int me = m.coord[MG_GROUP_EP];
        /* expected local counts and dispatched rows, from every member's map */
        const float *d = tk_f32(&r, xd);
        const int32_t *sp = tk_i32(&r, splits), *lc = tk_i32(&r, local);
        int64_t row = 0;
        for (int el = 0; el < El; el++) {
            int e = me * El + el, total = 0;
            for (int i = 0; i < n; i++) {
                int src = mg_mesh_peer(&m, MG_GROUP_EP, i), c = 0;
                for (int t = 0; t < T; t++) {
                    if (!routed(src, t, e, E)) continue;
                    c++;
                    for (int j = 0; j < H; j++)
                        TK_CHECK(d[row * H + j] == xval(src, t, j), "El %d rank %d: dispatched row %lld (expert %d from %d, token %d) %g, want %g",
                                 El, world_rank, (long long)row, e, i, t, d[row * H + j], xval(src, t, j));
                    row++;
                }
                TK_CHECK(sp[i * El + el] == c, "El %d rank %d: splits[%d][%d] = %d, want %d", El, world_rank, i, el, sp[i * El + el], c);
                total += c;
            }
            TK_CHECK(lc[el] == total, "El %d rank %d: local count %d = %d, want %d", El, world_rank, el, lc[el], total);
        }
        for (int64_t i = row * H; i < Rd * H; i++) TK_CHECK(d[i] == 0.0f, "El %d: padding row not zero", El);
        const float *a = tk_f32(&r, xs), *b = tk_f32(&r, back);
        int bad = 0;
        for (int64_t i = 0; i < R * H; i++) bad += a[i] != b[i];
        TK_CHECK(bad == 0, "El %d rank %d: combine(dispatch(xs)) differs from xs in %d elements", El, world_rank, bad);
        /* adjointness: <dispatch(xs), y> = <xs, combine(y)> over all ranks */
        double dots[2] = {0, 0}, tot[2];
        for (int64_t i = 0; i < Rd * H; i++) dots[0] += (double)d[i] * tk_f32(&r, y)[i];
        for (int64_t i = 0; i < R * H; i++) dots[1] += (double)a[i] * tk_f32(&r, yc)[i];
        MPI_Allreduce(dots, tot, 2, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        TK_CHECK(fabs(tot[0] - tot[1]) <= 1e-9 * (fabs(tot[0]) + 1), "El %d: <dispatch x, y> %.17g != <x, combine y> %.17g", El,
                 tot[0], tot[1]);
        /* bytes: rows leaving this rank in the dispatch (mine for others' experts) and in the
         * two combines (others' rows held here), counts of the exchange */
        const int32_t *cn = tk_i32(&r, counts);
        double sent = 0;
        for (int e = 0; e < E; e++)
            if (e / El != me) sent += cn[e];
        for (int i = 0; i < n; i++)
            if (i != me)
                for (int el = 0; el < El; el++) sent += 2.0 * sp[i * El + el];
        double want = sent * H * 4 + (double)(n - 1) * El * 4, got[MG_GROUP_COUNT];
        mg_comm_bytes(comm, got);
        TK_CHECK(got[MG_GROUP_EP] == want && got[MG_GROUP_WORLD] == want, "El %d rank %d: ep bytes %g (total %g), want %g", El,
                 world_rank, got[MG_GROUP_EP], got[MG_GROUP_WORLD], want);
        /* the time inside them is the ep group's: only ep collectives ran */
        double ep_s = mg_comm_group_seconds(comm, MG_GROUP_EP), other = 0;
        for (int grp = 0; grp < MG_GROUP_COUNT; grp++)
            if (grp != MG_GROUP_EP) other += mg_comm_group_seconds(comm, (mg_group)grp);
        TK_CHECK(ep_s > 0 && ep_s == mg_comm_seconds(comm) && other == 0,
                 "El %d rank %d: ep seconds %g, all %g, other groups %g", El, world_rank, ep_s, mg_comm_seconds(comm), other);
        mg_comm_reset_bytes(comm);
        TK_CHECK(mg_comm_group_seconds(comm, MG_GROUP_EP) == 0, "reset clears the group seconds");
        printf("rank %d El %d: %lld rows dispatched here, %g bytes sent\n", world_rank, El, (long long)row, want);
    }
    tk_release(&r);
    mg_graph_free(g);
    mg_comm_free(comm);
}

int main(int argc, char **argv) {
    signal(SIGALRM, watchdog);
    alarm(60);
    int provided = 0;
    if (MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS) return 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world_size);
    run_case(1);
    run_case(2);
    int total = 0;
    MPI_Allreduce(&tk_failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (total && world_rank == 0) fprintf(stderr, "%d check(s) failed over %d ranks\n", total, world_size);
    MPI_Finalize();
    return total ? 1 : 0;
}

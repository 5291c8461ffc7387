/* Context parallelism under mpirun.
 *
 *   test_cp ring     ring_shift over the cp group (cp = world, and cp 2 x tp 2 on 4 ranks):
 *                    member i receives member i-k's block (k = 1, -1, 2); the gradient rule
 *                    (reverse shift) run through autodiff: d/dx of sum(w · shift(x)) is the w of the
 *                    member the block went to; bytes counted = the graph's count; a shift by the
 *                    group size copies.
 */
#include <math.h>
#include <mpi.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mgraph/comm.h"
#include "mgraph/plan.h"
#include "testkit.h"

static int world_rank, world_size;

static void watchdog(int sig) {
    (void)sig;
    static const char msg[] = "test_cp: watchdog: no progress in 120 s (hung ring?)\n";
    ssize_t w = write(2, msg, sizeof msg - 1);
    (void)w;
    _exit(124);
}

static float xval(int rank, int64_t i) { return (float)((rank * 37 + i * 11) % 29) - 14.0f; }
static float wval(int rank, int64_t i) { return 0.25f * (float)((rank * 7 + i * 3) % 13) - 1.5f; }

static void ring_mesh(int tp, int cp) {
    mg_mesh m;
    mg_error err = {0};
    if (mg_mesh_init(&m, world_size, world_rank, tp, cp, 1, 1, &err)) return;
    mg_comm *comm = NULL;
    if (mg_comm_new(&m, &comm, &err)) {
        TK_CHECK(0, "mg_comm_new: %s", err.msg);
        return;
    }
    int n = m.size[MG_GROUP_CP], me = m.coord[MG_GROUP_CP];
    int shifts[] = {1, -1, 2, n};
    for (size_t si = 0; si < sizeof shifts / sizeof *shifts; si++) {
        int k = shifts[si];
        mg_graph *g = mg_graph_new();
        mg_tensor *x = mg_param(g, "x", 2, (int64_t[]){3, 5}, (mg_init){MG_INIT_ZEROS, 0});
        mg_tensor *w = mg_input(g, "w", MG_F32, 2, (int64_t[]){3, 5});
        mg_tensor *y = mg_ring_shift(g, x, MG_GROUP_CP, n, k, 0);
        mg_tensor *loss = mg_sum(g, mg_mul(g, y, w), MG_ALL_AXES, false);
        y->persistent = true;
        if (!loss || mg_graph_backward(g, loss, &err)) {
            TK_CHECK(0, "build: %s %s", mg_graph_error(g)->msg, err.msg);
            mg_graph_free(g);
            continue;
        }
        tk_run r;
        if (tk_prepare(&r, g)) {
            TK_CHECK(0, "prepare");
            mg_graph_free(g);
            continue;
        }
        for (int64_t i = 0; i < 15; i++) tk_f32(&r, x)[i] = xval(m.rank, i), tk_f32(&r, w)[i] = wval(m.rank, i);
        r.info.comm = comm;
        mg_comm_reset_bytes(comm);
        if (tk_exec(&r)) {
            tk_failures++;
        } else {
            int from = mg_mesh_peer(&m, MG_GROUP_CP, ((me - k) % n + n) % n);
            int to = mg_mesh_peer(&m, MG_GROUP_CP, ((me + k) % n + n) % n);
            const float *yv = tk_f32(&r, y), *dx = tk_f32(&r, x->grad);
            for (int64_t i = 0; i < 15; i++) {
                TK_CHECK(yv[i] == xval(from, i), "rank %d shift %d: y[%lld] = %g, want rank %d's %g", m.rank, k,
                         (long long)i, yv[i], from, xval(from, i));
                TK_CHECK(dx[i] == wval(to, i), "rank %d shift %d: dx[%lld] = %g, want rank %d's w %g", m.rank, k,
                         (long long)i, dx[i], to, wval(to, i));
            }
            double got[MG_GROUP_COUNT], want[MG_GROUP_COUNT];
            mg_comm_bytes(comm, got);
            mg_plan_comm_bytes(g, 1, want);
            double block = 15 * 4.0 * (k % n ? 2 : 0); /* forward and backward shift */
            TK_CHECK(got[MG_GROUP_CP] == want[MG_GROUP_CP] && want[MG_GROUP_CP] == block,
                     "rank %d shift %d: cp bytes %g, graph %g, want %g", m.rank, k, got[MG_GROUP_CP], want[MG_GROUP_CP],
                     block);
        }
        tk_release(&r);
        mg_graph_free(g);
    }
    if (world_rank == 0 && !tk_failures) printf("ok ring, tp %d cp %d\n", tp, cp);
    mg_comm_free(comm);
}

static void ring(void) {
    ring_mesh(1, world_size);
    if (world_size == 4) ring_mesh(2, 2);
}

int main(int argc, char **argv) {
    signal(SIGALRM, watchdog);
    alarm(120);
    int provided = 0;
    if (MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS) return 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world_size);
    const char *what = argc > 1 ? argv[1] : "ring";
    if (!strcmp(what, "ring")) ring();
    else {
        if (world_rank == 0) fprintf(stderr, "unknown test '%s' (ring)\n", what);
        tk_failures++;
    }
    int total = 0;
    MPI_Allreduce(&tk_failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (total && world_rank == 0) fprintf(stderr, "%d check(s) failed over %d ranks\n", total, world_size);
    MPI_Finalize();
    return total ? 1 : 0;
}

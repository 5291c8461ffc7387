/* Context parallelism under mpirun.
 *
 *   test_cp ring     ring_shift over the cp group (cp = world, and cp 2 x tp 2 on 4 ranks):
 *                    member i receives member i-k's block (k = 1, -1, 2); the gradient rule
 *                    (reverse shift) run through autodiff: d/dx of sum(w · shift(x)) is the w of the
 *                    member the block went to; bytes counted = the graph's count; a shift by the
 *                    group size copies.
 *   test_cp overlap  (one process) the ring leaves room for overlap: in every rank's graph of a
 *                    LLaMA step under cp 2 and cp 4 (with tp 2 + SP too), each forward K/V shift
 *                    has an attention block that neither feeds it nor reads it (the block the
 *                    rank already holds, computed while the next block is in flight), and each
 *                    backward dK/dV shift an attention_bwd block likewise. That is what lets the
 *                    engine run the shift on its communication thread (or a GPU's NCCL stream)
 *                    while the worker computes; with collectives on the worker, nothing can.
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

/* Marks in seen[] every node reachable from node s along data edges, forwards
 * (consumers) or backwards (producers). cons[i] lists node i's consumers. */
static void reach(const mg_graph *g, int s, int **cons, const int *n_cons, bool fwd, bool *seen, int *stack) {
    int top = 0;
    stack[top++] = s;
    while (top) {
        const mg_node *n = mg_graph_node(g, stack[--top]);
        if (fwd) {
            for (int k = 0; k < n_cons[n->id]; k++)
                if (!seen[cons[n->id][k]]) seen[cons[n->id][k]] = true, stack[top++] = cons[n->id][k];
        } else {
            for (int i = 0; i < n->n_in; i++) {
                const mg_node *src = n->in[i]->src;
                if (src && !seen[src->id]) seen[src->id] = true, stack[top++] = src->id;
            }
        }
    }
}

/* Checks one rank's graph; returns the number of shifts checked. */
static int overlap_rank(const mg_graph *g, int tp, int cp, int rank) {
    int nn = mg_graph_n_nodes(g), checked = 0;
    int **cons = calloc((size_t)nn, sizeof *cons), *n_cons = calloc((size_t)nn, sizeof *n_cons),
        *stack = malloc((size_t)nn * sizeof *stack);
    bool *down = malloc((size_t)nn), *up = malloc((size_t)nn);
    for (int i = 0; i < nn; i++) {
        const mg_node *n = mg_graph_node(g, i);
        for (int j = 0; j < n->n_in; j++)
            if (n->in[j]->src) {
                int p = n->in[j]->src->id;
                int *grown = realloc(cons[p], (size_t)(n_cons[p] + 1) * sizeof *grown);
                if (!grown) abort(); /* (a test) */
                cons[p] = grown;
                cons[p][n_cons[p]++] = i;
            }
    }
    for (int i = 0; i < nn; i++) {
        const mg_node *s = mg_graph_node(g, i);
        if (s->op != MG_OP_RING_SHIFT) continue;
        bool fwd = s->attrs.comm.peer > 0;
        mg_op partner = fwd ? MG_OP_ATTENTION : MG_OP_ATTENTION_BWD;
        memset(down, 0, (size_t)nn);
        memset(up, 0, (size_t)nn);
        reach(g, i, cons, n_cons, true, down, stack);
        reach(g, i, cons, n_cons, false, up, stack);
        int free_blocks = 0, blocks = 0;
        for (int j = 0; j < nn; j++) {
            const mg_node *a = mg_graph_node(g, j);
            if (a->op != partner || strcmp(a->scope, s->scope)) continue; /* the same layer's blocks */
            blocks++;
            free_blocks += !down[j] && !up[j];
        }
        /* some blocks run while it is in flight, the others need what it brings */
        TK_CHECK(blocks > 0 && free_blocks > 0 && free_blocks < blocks,
                 "tp %d cp %d rank %d: %s shift '%s' (%s): %d of its layer's %d %s blocks can run while it is in flight",
                 tp, cp, rank, fwd ? "forward K/V" : "backward dK/dV", s->out[0]->name, s->scope, free_blocks, blocks,
                 mg_op_name(partner));
        checked++;
    }
    for (int i = 0; i < nn; i++) free(cons[i]);
    free(cons), free(n_cons), free(stack), free(down), free(up);
    return checked;
}

static void overlap(void) {
    mg_step_config sc = tk_small_gpt(2, 32, 4, 16, 256, 2, 1);
    tk_llama(&sc.model, 2);
    mg_step st;
    mg_error err = {0};
    if (mg_step_build(&sc, &st, &err)) {
        TK_CHECK(0, "step: %s", err.msg);
        return;
    }
    int cases[][2] = {{1, 2}, {1, 4}, {2, 2}}; /* tp, cp */
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        int tp = cases[k][0], cp = cases[k][1];
        for (int r = 0; r < tp * cp; r++) {
            mg_plan plan;
            mg_plan_defaults(&plan);
            plan.tp = tp;
            plan.cp = cp;
            plan.sequence_parallel = tp > 1;
            mg_mesh mesh;
            mg_rank_graph R;
            if (mg_mesh_init(&mesh, tp * cp, r, tp, cp, 1, 1, &err) || mg_partition(st.g, &plan, &mesh, &R, &err)) {
                TK_CHECK(0, "tp %d cp %d rank %d: %s", tp, cp, r, err.msg);
                continue;
            }
            int n = overlap_rank(R.graph, tp, cp, r);
            /* K and V forward, dK and dV backward: C-1 shifts each per layer */
            TK_CHECK(n == 4 * (cp - 1) * sc.model.num_layers, "tp %d cp %d rank %d: %d shifts, want %d", tp, cp, r, n,
                     4 * (cp - 1) * sc.model.num_layers);
            mg_rank_graph_release(&R);
        }
    }
    mg_step_release(&st);
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
    else if (!strcmp(what, "overlap")) overlap();
    else {
        if (world_rank == 0) fprintf(stderr, "unknown test '%s' (ring, overlap)\n", what);
        tk_failures++;
    }
    int total = 0;
    MPI_Allreduce(&tk_failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (total && world_rank == 0) fprintf(stderr, "%d check(s) failed over %d ranks\n", total, world_size);
    MPI_Finalize();
    return total ? 1 : 0;
}

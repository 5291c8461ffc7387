/* A model of one's own, built against the installed mgraph: its parameters have names
 * no rule knows ("blk.expand.kernel", "blk.contract.kernel"), and declare their tensor-
 * parallel roles instead (mg_set_layout). Under mpirun -np 2 with tensor parallelism 2
 * and a plan without shard rules, the column-parallel weight and bias hold half their
 * rows, the row-parallel weight half its columns, the rest is whole, the ranks'
 * collectives run, and three AdamW steps give the serial losses and parameters (within
 * 1e-5 relative). install_test.sh builds it with mpicc and pkg-config. */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mgraph/mgraph.h>

enum { T = 8, H = 16, F = 64, ITERS = 3 };

static int rank_, fails;
#define CHECK(c, ...)                                             \
    do {                                                          \
        if (!(c)) {                                               \
            fprintf(stderr, "[rank %d] FAIL: ", rank_);           \
            fprintf(stderr, __VA_ARGS__);                         \
            fprintf(stderr, "\n");                                \
            fails++;                                              \
        }                                                         \
    } while (0)

static void die(const char *what, const mg_error *e) {
    fprintf(stderr, "[rank %d] %s: %s\n", rank_, what, e->msg);
    MPI_Abort(MPI_COMM_WORLD, 1);
}

typedef struct model { mg_graph *g; mg_tensor *x, *y, *loss, *w_in, *b_in, *w_out, *b_out; } model;

static void build(model *m) {
    mg_graph *g = m->g = mg_graph_new();
    m->x = mg_input(g, "features", MG_F32, 2, (int64_t[]){T, H});
    m->y = mg_input(g, "wanted", MG_F32, 2, (int64_t[]){T, H});
    mg_scope_push(g, "blk");
    mg_init w = {MG_INIT_NORMAL, 0.2f}, z = {MG_INIT_NORMAL, 0.05f};
    m->w_in = mg_set_layout(mg_param(g, "expand.kernel", 2, (int64_t[]){F, H}, w), MG_LAYOUT_COLUMN);
    m->b_in = mg_set_layout(mg_param(g, "expand.offset", 1, (int64_t[]){F}, z), MG_LAYOUT_COLUMN);
    m->w_out = mg_set_layout(mg_param(g, "contract.kernel", 2, (int64_t[]){H, F}, w), MG_LAYOUT_ROW);
    m->b_out = mg_param(g, "contract.offset", 1, (int64_t[]){H}, z); /* replicated: added after the sum */
    mg_tensor *h = mg_gelu(g, mg_linear(g, m->x, m->w_in, m->b_in));
    mg_tensor *d = mg_sub(g, mg_linear(g, h, m->w_out, m->b_out), m->y);
    mg_scope_pop(g);
    m->loss = mg_mean(g, mg_mul(g, d, d), MG_ALL_AXES, false);
    mg_tensor *keep = mg_set_name(g, mg_scale(g, m->loss, 1.0f), "loss_out");
    if (keep) keep->persistent = true; /* read by the host */
    m->loss = keep;
    mg_adamw_config opt = mg_adamw_defaults();
    opt.lr.lr = opt.lr.min_lr = 1e-2f;
    mg_error err = {0};
    if (mg_graph_error(g)->code || mg_graph_backward(g, m->loss, &err) || mg_graph_add_adamw(g, &opt, NULL, &err))
        die("build", mg_graph_error(g)->code ? mg_graph_error(g) : &err);
}

static void feed(mg_storage *s, const mg_tensor *x, const mg_tensor *y, int it) {
    float *px = mg_storage_data(s, x), *py = mg_storage_data(s, y);
    for (int i = 0; i < T * H; i++) {
        px[i] = sinf(0.37f * (float)(i + 11 * it));
        py[i] = cosf(0.23f * (float)(i + 7 * it));
    }
}

static void run(mg_graph *g, mg_storage *s, const mg_tensor *x, const mg_tensor *y, const mg_tensor *loss,
                mg_comm *comm, double *losses) {
    mg_error err = {0};
    for (int it = 0; it < ITERS; it++) {
        feed(s, x, y, it);
        mg_exec_info info = {.seed = 7, .iteration = it, .training = true, .comm = comm, .n_micro = 1};
        if (mg_exec_reference(g, s, &info, &err)) die("run", &err);
        losses[it] = *(float *)mg_storage_data(s, loss);
    }
}

int main(int argc, char **argv) {
    int provided, world;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    mg_error err = {0};
    model m;
    build(&m);
    /* serial */
    mg_memplan *sp = NULL;
    mg_storage *ss = NULL;
    if (mg_memplan_build(m.g, true, &sp, &err) || mg_storage_new(m.g, sp, &ss, &err) || mg_storage_init(ss, 7, &err))
        die("serial storage", &err);
    double serial[ITERS], par[ITERS];
    run(m.g, ss, m.x, m.y, m.loss, NULL, serial);
    /* tensor parallelism over every rank, by the declared roles alone */
    mg_plan plan;
    mg_plan_defaults(&plan);
    plan.tp = world;
    CHECK(plan.n_rules == 0, "the default plan has %d shard rules", plan.n_rules);
    mg_mesh mesh;
    mg_rank_graph R;
    mg_comm *comm = NULL;
    mg_memplan *pp = NULL;
    mg_storage *ps = NULL;
    if (mg_mesh_init(&mesh, world, rank_, world, 1, 1, 1, &err) || mg_partition(m.g, &plan, &mesh, &R, &err) ||
        mg_comm_new(&mesh, &comm, &err) || mg_memplan_build(R.graph, true, &pp, &err) ||
        mg_storage_new(R.graph, pp, &ps, &err) || mg_storage_init(ps, 7, &err))
        die("partition", &err);
    const mg_tensor *w_in = mg_rank_tensor(&R, m.w_in), *b_in = mg_rank_tensor(&R, m.b_in);
    const mg_tensor *w_out = mg_rank_tensor(&R, m.w_out), *b_out = mg_rank_tensor(&R, m.b_out);
    CHECK(w_in && w_in->shape[0] == F / world && w_in->shape[1] == H, "column-parallel %s not split on its rows",
          m.w_in->name);
    CHECK(b_in && b_in->shape[0] == F / world, "column-parallel bias %s not split", m.b_in->name);
    CHECK(w_out && w_out->shape[0] == H && w_out->shape[1] == F / world, "row-parallel %s not split on its columns",
          m.w_out->name);
    CHECK(b_out && b_out->shape[0] == H, "row-parallel bias %s not whole", m.b_out->name);
    int n_comm = 0;
    for (int i = 0; i < mg_graph_n_nodes(R.graph); i++) n_comm += mg_graph_node(R.graph, i)->op == MG_OP_ALLREDUCE;
    CHECK(world == 1 || n_comm > 0, "no all-reduce in the tensor-parallel graph");
    run(R.graph, ps, mg_rank_tensor(&R, m.x), mg_rank_tensor(&R, m.y), mg_rank_tensor(&R, m.loss), comm, par);
    for (int it = 0; it < ITERS; it++)
        CHECK(fabs(par[it] - serial[it]) <= 1e-5 * fabs(serial[it]), "iteration %d: loss %.9g, serial %.9g", it + 1,
              par[it], serial[it]);
    /* every parameter block against the same block of the serial parameter */
    const mg_tensor *ps_[4] = {m.w_in, m.b_in, m.w_out, m.b_out};
    for (int k = 0; k < 4; k++) {
        const mg_tensor *lt = ps_[k], *t = mg_rank_tensor(&R, lt);
        if (!t) continue;
        const float *a = mg_storage_data(ps, t), *b = mg_storage_data(ss, lt);
        double d2 = 0, s2 = 0;
        int64_t rows = t->ndim == 2 ? t->shape[0] : 1, cols = t->shape[t->ndim - 1];
        int64_t r0 = t->ndim == 2 ? t->logical.offset[0] : 0, c0 = t->logical.offset[t->ndim - 1];
        for (int64_t i = 0; i < rows; i++)
            for (int64_t j = 0; j < cols; j++) {
                double v = b[(r0 + i) * lt->shape[lt->ndim - 1] + c0 + j], e = a[i * cols + j] - v;
                d2 += e * e, s2 += v * v;
            }
        CHECK(sqrt(d2) <= 1e-5 * sqrt(s2), "%s differs from serial (%.3g relative)", lt->name, sqrt(d2 / s2));
    }
    int all = 0;
    MPI_Allreduce(&fails, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank_ == 0)
        printf("custom model, tp %d by declared roles (no shard rules): %s %lldx%lld per rank, %s %lldx%lld; losses %.6g "
               "%.6g %.6g equal serial: %s\n",
               world, m.w_in->name, (long long)w_in->shape[0], (long long)w_in->shape[1], m.w_out->name,
               (long long)w_out->shape[0], (long long)w_out->shape[1], par[0], par[1], par[2], all ? "FAILED" : "ok");
    mg_storage_free(ps);
    mg_memplan_free(pp);
    mg_comm_free(comm);
    mg_rank_graph_release(&R);
    mg_storage_free(ss);
    mg_memplan_free(sp);
    mg_graph_free(m.g);
    MPI_Finalize();
    return all ? 1 : 0;
}

/* embedding and embedding_bwd: forward against naive loops (with out-of-range ids and a
 * vocab offset), the gradient (repeated ids) against finite differences, errors. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "testkit.h"

static mg_tensor *embedding_at(mg_graph *g, mg_tensor *ids, mg_tensor *table, int64_t offset) {
    mg_attrs at;
    memset(&at, 0, sizeof at);
    at.embedding.vocab_offset = offset;
    mg_node *n = mg_node_new(g, MG_OP_EMBEDDING, &at, 2, (mg_tensor *[]){ids, table}, NULL);
    return n ? n->out[0] : NULL;
}

static mg_tensor *embedding_bwd_at(mg_graph *g, mg_tensor *dy, mg_tensor *ids, mg_tensor *table, int64_t offset) {
    mg_attrs at;
    memset(&at, 0, sizeof at);
    at.embedding.vocab_offset = offset;
    mg_node *n = mg_node_new(g, MG_OP_EMBEDDING_BWD, &at, 3, (mg_tensor *[]){dy, ids, table}, NULL);
    return n ? n->out[0] : NULL;
}

enum { V = 6, H = 5, T = 12 };
static const int32_t IDS[T] = {0, 3, 3, 5, -1, 6, 1000, 4, 9, 3, 0, 7};

static void fwd_embedding(void) {
    mg_graph *g = mg_graph_new();
    mg_tensor *ids = mg_input(g, "ids", MG_I32, 2, (int64_t[]){3, 4});
    mg_tensor *table = mg_input(g, "table", MG_F32, 2, (int64_t[]){V, H});
    mg_tensor *y = mg_embedding(g, ids, table), *y4 = embedding_at(g, ids, table, 4);
    tk_run r;
    if (!y || !y4 || tk_prepare(&r, g)) {
        TK_CHECK(0, "build: %s", mg_graph_error(g)->msg);
        mg_graph_free(g);
        return;
    }
    TK_CHECK(y->ndim == 3 && y->shape[0] == 3 && y->shape[1] == 4 && y->shape[2] == H, "output shape");
    memcpy(tk_i32(&r, ids), IDS, sizeof IDS);
    tk_rng rng = {12};
    tk_fill(&rng, tk_f32(&r, table), V * H, -1, 1);
    for (int i = 0; i < T * H; i++) tk_f32(&r, y)[i] = tk_f32(&r, y4)[i] = NAN; /* must be overwritten */
    TK_CHECK(tk_exec(&r) == 0, "exec");
    const float *tv = tk_f32(&r, table);
    float want[T * H], want4[T * H];
    for (int t = 0; t < T; t++)
        for (int j = 0; j < H; j++) {
            int id = IDS[t];
            want[t * H + j] = id >= 0 && id < V ? tv[id * H + j] : 0.0f;       /* offset 0 */
            want4[t * H + j] = id >= 4 && id < 4 + V ? tv[(id - 4) * H + j] : 0.0f; /* offset 4 */
        }
    tk_expect_close("embedding", tk_f32(&r, y), want, T * H, 0, 0);
    tk_expect_close("embedding offset 4", tk_f32(&r, y4), want4, T * H, 0, 0);
    tk_release(&r);
    mg_graph_free(g);
}

static void fwd_embedding_bwd(void) {
    for (int64_t offset = 0; offset <= 4; offset += 4) {
        mg_graph *g = mg_graph_new();
        mg_tensor *ids = mg_input(g, "ids", MG_I32, 2, (int64_t[]){3, 4});
        mg_tensor *table = mg_input(g, "table", MG_F32, 2, (int64_t[]){V, H});
        mg_tensor *dy = mg_input(g, "dy", MG_F32, 3, (int64_t[]){3, 4, H});
        mg_tensor *dt = embedding_bwd_at(g, dy, ids, table, offset);
        tk_run r;
        if (!dt || tk_prepare(&r, g)) {
            TK_CHECK(0, "build: %s", mg_graph_error(g)->msg);
            mg_graph_free(g);
            return;
        }
        TK_CHECK(dt->ndim == 2 && dt->shape[0] == V && dt->shape[1] == H, "dtable shape");
        memcpy(tk_i32(&r, ids), IDS, sizeof IDS);
        for (int i = 0; i < V * H; i++) tk_f32(&r, table)[i] = NAN; /* never read */
        for (int i = 0; i < V * H; i++) tk_f32(&r, dt)[i] = NAN;    /* must be overwritten */
        tk_rng rng = {13};
        tk_fill(&rng, tk_f32(&r, dy), T * H, -1, 1);
        TK_CHECK(tk_exec(&r) == 0, "exec");
        double acc[V * H] = {0};
        const float *dv = tk_f32(&r, dy);
        for (int t = 0; t < T; t++) {
            int64_t row = IDS[t] - offset;
            if (row < 0 || row >= V) continue;
            for (int j = 0; j < H; j++) acc[row * H + j] += dv[t * H + j];
        }
        float want[V * H];
        for (int i = 0; i < V * H; i++) want[i] = (float)acc[i];
        /* at most 3 float additions per element against a double sum */
        tk_expect_close(offset ? "embedding_bwd offset 4" : "embedding_bwd", tk_f32(&r, dt), want, V * H, 1e-6, 1e-6);
        tk_release(&r);
        mg_graph_free(g);
    }
}

/* The output is linear in the table: finite differences are exact up to rounding. */
static mg_tensor *gb_embedding(mg_graph *g, mg_tensor *const *l, void *ctx) {
    (void)ctx;
    return mg_embedding(g, l[0], l[1]);
}

static void grad_embedding(void) {
    /* 16 ids drawn from 5 rows: repeats are certain; ids are a non-differentiable leaf */
    tk_leaf l[] = {{"ids", MG_I32, 2, {4, 4}, false, 0, 5}, {"table", MG_F32, 2, {5, 3}, true, -1, 1}};
    tk_gradcheck("embedding repeated ids", 2, l, gb_embedding, NULL, NULL);
    /* ids in [-2, 7): some outside [0, 5) give zero rows and no gradient */
    tk_leaf l2[] = {{"ids", MG_I32, 3, {2, 3, 2}, false, -2, 7}, {"table", MG_F32, 2, {5, 3}, true, -1, 1}};
    tk_gradcheck("embedding out-of-range ids", 2, l2, gb_embedding, NULL, NULL);
}

static void expect_error(const char *what, mg_graph *g, bool null, const char *op) {
    const mg_error *e = mg_graph_error(g);
    TK_CHECK(null, "%s: expected NULL", what);
    TK_CHECK(e->code == MG_ERR_SHAPE, "%s: code %d (%s)", what, e->code, e->msg);
    TK_CHECK(strstr(e->msg, op) != NULL, "%s: message '%s' does not name %s", what, e->msg, op);
}

static void fwd_errors(void) {
    mg_graph *g = mg_graph_new();
    mg_tensor *fids = mg_input(g, "ids", MG_F32, 1, (int64_t[]){4});
    mg_tensor *table = mg_input(g, "table", MG_F32, 2, (int64_t[]){V, H});
    expect_error("f32 ids", g, mg_embedding(g, fids, table) == NULL, "embedding");
    TK_CHECK(mg_embedding(g, NULL, table) == NULL && strstr(mg_graph_error(g)->msg, "ids"), "NULL keeps first error");
    mg_graph_free(g);

    g = mg_graph_new();
    mg_tensor *ids = mg_input(g, "ids", MG_I32, 1, (int64_t[]){4});
    mg_tensor *t3 = mg_input(g, "t3", MG_F32, 3, (int64_t[]){2, V, H});
    expect_error("3-D table", g, mg_embedding(g, ids, t3) == NULL, "embedding");
    mg_graph_free(g);

    g = mg_graph_new();
    ids = mg_input(g, "ids", MG_I32, 1, (int64_t[]){4});
    table = mg_input(g, "table", MG_F32, 2, (int64_t[]){V, H});
    mg_tensor *dy = mg_input(g, "dy", MG_F32, 2, (int64_t[]){4, H + 1});
    expect_error("bwd dy shape", g, embedding_bwd_at(g, dy, ids, table, 0) == NULL, "embedding_bwd");
    mg_graph_free(g);
}

int main(int argc, char **argv) {
    static const tk_case cases[] = {
        {"forward.embedding", fwd_embedding},
        {"forward.embedding_bwd", fwd_embedding_bwd},
        {"forward.errors_embedding", fwd_errors},
        {"grad.embedding", grad_embedding},
    };
    return tk_main(argc, argv, cases, (int)(sizeof cases / sizeof *cases));
}

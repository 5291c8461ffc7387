/* MoE token dispatch: permutation into expert order and back (Megatron-LM
 * moe_utils.py permute / unpermute, with the router weights applied on the way back).
 *
 * Dispatch order: expert-major, token-minor over map [T, E] (i32 0/1); the row of a
 * routed pair (t, e) is the number of routed pairs before it in that order. Rows
 * past the total are zero. Rows are recomputed from the map by each kernel (one
 * O(T·E) pass), so no index tensor needs to be carried between ops.
 *
 * moe_permute:   (x [T, h], map [T, E], [w [T, E]]) -> (xs [R, h], counts [E] i32)
 *                xs[row(t, e)] = w[t, e] · x[t]  (w absent: 1); R is a static bound.
 * moe_unpermute: (ys [R, h], map [T, E], [w [T, E]]) -> y [T, h]
 *                y[t] = Σ_e map[t, e] · w[t, e] · ys[row(t, e)]
 * The two are adjoint in x / ys; each one's gradient is the other. The weight
 * gradient is moe_row_dot (a [T, h], b [R, h], map) -> [T, E]:
 *                out[t, e] = map[t, e] ? <a[t], b[row(t, e)]> : 0.
 */
#include <stdlib.h>
#include <string.h>

#include "mgraph/moe.h"
#include "ops/moe_common.h"
#include "ops/op.h"
#include "ops/shard.h"

static void desc_rows(mg_tensor_desc *d, mg_dtype dt, int ndim, int64_t a, int64_t b) {
    memset(d, 0, sizeof *d);
    d->dtype = dt;
    d->ndim = ndim;
    for (int i = 0; i < MG_MAX_DIMS; i++) d->shape[i] = 1;
    d->shape[0] = a;
    if (ndim > 1) d->shape[1] = b;
}

static bool is_map(const mg_tensor *m) { return m->dtype == MG_I32 && m->ndim == 2; }

/* Shared checks: tokens-side x [T, h], map [T, E], optional w [T, E]. */
static int check_tokens(const mg_node *n, const mg_tensor *x, mg_error *err) {
    const mg_tensor *m = n->in[1];
    if (!is_map(m)) return mg_shape_error(err, n, "map must be i32 [tokens, experts]");
    if (x->dtype != MG_F32 || x->ndim != 2 || x->shape[0] != m->shape[0])
        return mg_shape_error(err, n, "tokens must be f32 [tokens, hidden] with the map's tokens");
    if (n->op != MG_OP_MOE_ROW_DOT && n->n_in > 2 && (n->in[2]->dtype != MG_F32 || !mg_same_shape(n->in[2], m)))
        return mg_shape_error(err, n, "weights must be f32 with the map's shape");
    return MG_OK;
}

/* Row indices of map (malloc'd; NULL and an error when out of memory or over R). */
static int64_t *rows_or_error(const mg_node *n, const int32_t *map, int64_t R, int32_t *counts, mg_error *err) {
    const mg_tensor *m = n->in[1];
    int64_t T = m->shape[0], E = m->shape[1];
    int64_t *row = malloc((size_t)(T * E) * sizeof *row);
    if (!row) {
        mg_error_set(err, MG_ERR_NOMEM, "%s: out of memory", mg_op_name(n->op));
        return NULL;
    }
    int64_t total = mg_moe_rows_of(map, T, E, row, counts);
    if (total > R) {
        mg_error_set(err, MG_ERR_RUNTIME, "%s: %lld routed rows exceed the static bound %lld", mg_op_name(n->op),
                     (long long)total, (long long)R);
        free(row);
        return NULL;
    }
    return row;
}

/* ---- moe_permute ---------------------------------------------------------------------- */
static int infer_permute(const mg_node *n, mg_tensor_desc *out, mg_error *err) {
    int rc = check_tokens(n, n->in[0], err);
    if (rc) return rc;
    if (n->attrs.moe.rows < 1) return mg_shape_error(err, n, "row bound must be >= 1");
    desc_rows(&out[0], MG_F32, 2, n->attrs.moe.rows, n->in[0]->shape[1]);
    desc_rows(&out[1], MG_I32, 1, n->in[1]->shape[1], 1);
    return 2;
}

static int permute_cpu(const mg_kernel_args *a, mg_error *err) {
    const mg_node *n = a->node;
    int64_t T = n->in[1]->shape[0], E = n->in[1]->shape[1], h = n->in[0]->shape[1], R = n->attrs.moe.rows;
    const float *x = a->in[0], *w = n->n_in > 2 ? a->in[2] : NULL;
    const int32_t *map = a->in[1];
    float *xs = a->out[0];
    int64_t *row = rows_or_error(n, map, R, a->out[1], err);
    if (!row) return err->code;
    memset(xs, 0, (size_t)(R * h) * sizeof *xs);
    for (int64_t t = 0; t < T; t++)
        for (int64_t e = 0; e < E; e++) {
            int64_t r = row[t * E + e];
            if (r < 0) continue;
            float s = w ? w[t * E + e] : 1.0f;
            const float *src = x + t * h;
            float *dst = xs + r * h;
            for (int64_t j = 0; j < h; j++) dst[j] = s * src[j];
        }
    free(row);
    return MG_OK;
}

/* ---- moe_unpermute -------------------------------------------------------------------- */
static int infer_unpermute(const mg_node *n, mg_tensor_desc *out, mg_error *err) {
    const mg_tensor *ys = n->in[0], *m = n->in[1];
    if (!is_map(m)) return mg_shape_error(err, n, "map must be i32 [tokens, experts]");
    if (ys->dtype != MG_F32 || ys->ndim != 2) return mg_shape_error(err, n, "rows must be f32 [rows, hidden]");
    if (n->n_in > 2 && (n->in[2]->dtype != MG_F32 || !mg_same_shape(n->in[2], m)))
        return mg_shape_error(err, n, "weights must be f32 with the map's shape");
    desc_rows(&out[0], MG_F32, 2, m->shape[0], ys->shape[1]);
    return 1;
}

static int unpermute_cpu(const mg_kernel_args *a, mg_error *err) {
    const mg_node *n = a->node;
    int64_t T = n->in[1]->shape[0], E = n->in[1]->shape[1], h = n->in[0]->shape[1], R = n->in[0]->shape[0];
    const float *ys = a->in[0], *w = n->n_in > 2 ? a->in[2] : NULL;
    const int32_t *map = a->in[1];
    float *y = a->out[0];
    int64_t *row = rows_or_error(n, map, R, NULL, err);
    if (!row) return err->code;
    double *acc = malloc((size_t)h * sizeof *acc);
    if (!acc) {
        free(row);
        return mg_error_set(err, MG_ERR_NOMEM, "moe_unpermute: out of memory");
    }
    for (int64_t t = 0; t < T; t++) {
        memset(acc, 0, (size_t)h * sizeof *acc);
        for (int64_t e = 0; e < E; e++) { /* fixed expert order: deterministic sums */
            int64_t r = row[t * E + e];
            if (r < 0) continue;
            double s = w ? w[t * E + e] : 1.0;
            const float *src = ys + r * h;
            for (int64_t j = 0; j < h; j++) acc[j] += s * src[j];
        }
        for (int64_t j = 0; j < h; j++) y[t * h + j] = (float)acc[j];
    }
    free(acc);
    free(row);
    return MG_OK;
}

/* ---- moe_row_dot ---------------------------------------------------------------------- */
static int infer_row_dot(const mg_node *n, mg_tensor_desc *out, mg_error *err) {
    const mg_tensor *a = n->in[0], *b = n->in[2], *m = n->in[1];
    int rc = check_tokens(n, a, err);
    if (rc) return rc;
    if (b->dtype != MG_F32 || b->ndim != 2 || b->shape[1] != a->shape[1])
        return mg_shape_error(err, n, "rows must be f32 [rows, hidden] with the tokens' hidden size");
    desc_rows(&out[0], MG_F32, 2, m->shape[0], m->shape[1]);
    return 1;
}

static int row_dot_cpu(const mg_kernel_args *a, mg_error *err) {
    const mg_node *n = a->node;
    int64_t T = n->in[1]->shape[0], E = n->in[1]->shape[1], h = n->in[0]->shape[1], R = n->in[2]->shape[0];
    const float *x = a->in[0], *rows = a->in[2];
    const int32_t *map = a->in[1];
    float *out = a->out[0];
    int64_t *row = rows_or_error(n, map, R, NULL, err);
    if (!row) return err->code;
    for (int64_t t = 0; t < T; t++)
        for (int64_t e = 0; e < E; e++) {
            int64_t r = row[t * E + e];
            double s = 0;
            if (r >= 0)
                for (int64_t j = 0; j < h; j++) s += (double)x[t * h + j] * rows[r * h + j];
            out[t * E + e] = (float)s;
        }
    free(row);
    return MG_OK;
}

/* ---- gradients ------------------------------------------------------------------------ */
static mg_tensor *row_dot(mg_graph *g, mg_tensor *tok, mg_tensor *map, mg_tensor *rows) {
    mg_tensor *in[3] = {tok, map, rows};
    mg_node *n = mg_node_new(g, MG_OP_MOE_ROW_DOT, NULL, 3, in, NULL);
    return n ? n->out[0] : NULL;
}

static int permute_grad(mg_graph *g, const mg_node *n, mg_tensor *const *dout, const bool *need, mg_tensor **din) {
    mg_tensor *dxs = dout[0], *w = n->n_in > 2 ? n->in[2] : NULL;
    if (!dxs) return MG_OK;
    if (need[0]) din[0] = mg_moe_unpermute(g, dxs, n->in[1], w);
    if (n->n_in > 2 && need[2]) din[2] = row_dot(g, n->in[0], n->in[1], dxs);
    return mg_graph_error(g)->code;
}

static int unpermute_grad(mg_graph *g, const mg_node *n, mg_tensor *const *dout, const bool *need, mg_tensor **din) {
    mg_tensor *dy = dout[0], *w = n->n_in > 2 ? n->in[2] : NULL;
    if (need[0]) din[0] = mg_moe_permute(g, dy, n->in[1], w, n->in[0]->shape[0], NULL);
    if (n->n_in > 2 && need[2]) din[2] = row_dot(g, dy, n->in[1], n->in[0]);
    return mg_graph_error(g)->code;
}

static void cost_dispatch(const mg_node *n, double *flops, double *bytes) {
    const mg_tensor *m = n->in[1];
    double te = (double)mg_numel(m), moved = 0;
    for (int i = 0; i < n->n_out; i++) moved += (double)mg_numel(n->out[i]);
    *flops = n->op == MG_OP_MOE_ROW_DOT ? 2.0 * (double)mg_numel(n->in[2]) : moved;
    *bytes = 4.0 * (2.0 * moved + 2.0 * te);
}

const mg_op_def mg_opdef_MOE_PERMUTE = {"moe_permute", 2, 3, 0, infer_permute, permute_grad, cost_dispatch,
                                        permute_cpu, NULL, .shard = mg_shard_rule_replicated};
const mg_op_def mg_opdef_MOE_UNPERMUTE = {"moe_unpermute", 2, 3, 0, infer_unpermute, unpermute_grad,
                                          cost_dispatch, unpermute_cpu, NULL, .shard = mg_shard_rule_replicated};
const mg_op_def mg_opdef_MOE_ROW_DOT = {"moe_row_dot", 3, 3, MG_OPF_NO_GRAD, infer_row_dot, NULL, cost_dispatch,
                                        row_dot_cpu, NULL, .shard = mg_shard_rule_replicated};

/* ---- builders ------------------------------------------------------------------------- */
mg_tensor *mg_moe_permute(mg_graph *g, mg_tensor *x, mg_tensor *map, mg_tensor *w, int64_t rows, mg_tensor **counts) {
    if (counts) *counts = NULL;
    mg_attrs at;
    memset(&at, 0, sizeof at);
    at.moe.rows = rows;
    mg_tensor *in[3] = {x, map, w};
    mg_node *n = mg_node_new(g, MG_OP_MOE_PERMUTE, &at, w ? 3 : 2, in, NULL);
    if (!n) return NULL;
    if (counts) *counts = n->out[1];
    return n->out[0];
}

mg_tensor *mg_moe_unpermute(mg_graph *g, mg_tensor *ys, mg_tensor *map, mg_tensor *w) {
    mg_tensor *in[3] = {ys, map, w};
    mg_node *n = mg_node_new(g, MG_OP_MOE_UNPERMUTE, NULL, w ? 3 : 2, in, NULL);
    return n ? n->out[0] : NULL;
}

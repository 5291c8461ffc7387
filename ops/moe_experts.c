/* Grouped expert matmuls over variable-length segments (Megatron-LM experts.py
 * GroupedMLP: one GEMM per local expert on the rows routed to it).
 *
 * moe_grouped_matmul:    (xs [R, K], counts [E] i32, w) -> ys [R, N]
 *                        trans_b: w [E, N, K], ys_e = xs_e · w[e]ᵀ; else w [E, K, N], ys_e = xs_e · w[e].
 *                        Segment e is rows [Σ_{i<e} counts[i], + counts[e]); rows past the
 *                        total are zero. counts are read at run time (variable per step).
 * moe_grouped_matmul_dw: (a [R, P], b [R, Q], counts) -> [E, P, Q], out[e] = a_eᵀ · b_e
 *                        (the weight gradient; zero for an expert with no rows).
 * The cost model counts the static row bound R (an upper bound on the FLOPs run).
 */
#include <limits.h>
#include <string.h>

#include "mgraph/moe.h"
#include "ops/gemm.h"
#include "ops/op.h"
#include "ops/shard.h"

static int check_counts(const mg_node *n, const mg_tensor *c, int64_t E, mg_error *err) {
    if (c->dtype != MG_I32 || c->ndim != 1 || c->shape[0] != E)
        return mg_shape_error(err, n, "counts must be i32 [experts = %lld]", (long long)E);
    return MG_OK;
}

/* Segment offsets; an error when a count is negative or the total exceeds R. */
static int segments(const mg_node *n, const int32_t *counts, int64_t E, int64_t R, int64_t *total, mg_error *err) {
    int64_t s = 0;
    for (int64_t e = 0; e < E; e++) {
        if (counts[e] < 0)
            return mg_error_set(err, MG_ERR_RUNTIME, "%s: negative count %d for expert %lld", mg_op_name(n->op),
                                counts[e], (long long)e);
        s += counts[e];
    }
    if (s > R)
        return mg_error_set(err, MG_ERR_RUNTIME, "%s: %lld routed rows exceed the %lld rows of the buffer",
                            mg_op_name(n->op), (long long)s, (long long)R);
    if (R > INT_MAX) return mg_error_set(err, MG_ERR_UNSUPPORTED, "%s: rows exceed the BLAS int range", mg_op_name(n->op));
    *total = s;
    return MG_OK;
}

static int infer_gmm(const mg_node *n, mg_tensor_desc *out, mg_error *err) {
    const mg_tensor *x = n->in[0], *c = n->in[1], *w = n->in[2];
    bool tb = n->attrs.matmul.trans_b;
    if (x->dtype != MG_F32 || x->ndim != 2) return mg_shape_error(err, n, "rows must be f32 [rows, K]");
    if (w->dtype != MG_F32 || w->ndim != 3) return mg_shape_error(err, n, "weights must be f32 [experts, ., .]");
    int rc = check_counts(n, c, w->shape[0], err);
    if (rc) return rc;
    int64_t K = tb ? w->shape[2] : w->shape[1], N = tb ? w->shape[1] : w->shape[2];
    if (K != x->shape[1])
        return mg_shape_error(err, n, "inner dimensions differ: rows have %lld, expert weights %lld", (long long)x->shape[1],
                              (long long)K);
    mg_desc_of(x, &out[0]);
    out[0].shape[1] = N;
    return 1;
}

static int gmm_cpu(const mg_kernel_args *a, mg_error *err) {
    const mg_node *n = a->node;
    const mg_tensor *w = n->in[2];
    bool tb = n->attrs.matmul.trans_b;
    int64_t R = n->in[0]->shape[0], K = n->in[0]->shape[1], E = w->shape[0];
    int64_t N = tb ? w->shape[1] : w->shape[2], total;
    const int32_t *counts = a->in[1];
    int rc = segments(n, counts, E, R, &total, err);
    if (rc) return rc;
    const float *X = a->in[0], *W = a->in[2];
    float *Y = a->out[0];
    int64_t off = 0;
    for (int64_t e = 0; e < E; e++) {
        if (counts[e] > 0 && (rc = mg_gemm(false, tb, counts[e], (int)N, (int)K, 1.0f, X + off * K, (int)K,
                                           W + e * N * K, tb ? (int)K : (int)N, 0.0f, Y + off * N, (int)N, err)))
            return rc;
        off += counts[e];
    }
    memset(Y + total * N, 0, (size_t)((R - total) * N) * sizeof *Y);
    return MG_OK;
}

static int infer_gmm_dw(const mg_node *n, mg_tensor_desc *out, mg_error *err) {
    const mg_tensor *x = n->in[0], *y = n->in[1], *c = n->in[2];
    if (x->dtype != MG_F32 || y->dtype != MG_F32 || x->ndim != 2 || y->ndim != 2 || x->shape[0] != y->shape[0])
        return mg_shape_error(err, n, "inputs must be f32 [rows, .] with the same rows");
    if (c->dtype != MG_I32 || c->ndim != 1) return mg_shape_error(err, n, "counts must be i32 [experts]");
    memset(&out[0], 0, sizeof out[0]);
    out[0].dtype = MG_F32;
    out[0].ndim = 3;
    for (int i = 0; i < MG_MAX_DIMS; i++) out[0].shape[i] = 1;
    out[0].shape[0] = c->shape[0];
    out[0].shape[1] = x->shape[1];
    out[0].shape[2] = y->shape[1];
    return 1;
}

static int gmm_dw_cpu(const mg_kernel_args *a, mg_error *err) {
    const mg_node *n = a->node;
    int64_t R = n->in[0]->shape[0], P = n->in[0]->shape[1], Q = n->in[1]->shape[1], E = n->in[2]->shape[0], total;
    const int32_t *counts = a->in[2];
    int rc = segments(n, counts, E, R, &total, err);
    if (rc) return rc;
    const float *A = a->in[0], *B = a->in[1];
    float *D = a->out[0];
    int64_t off = 0;
    for (int64_t e = 0; e < E; e++) {
        float *De = D + e * P * Q;
        if (counts[e] > 0) {
            if ((rc = mg_gemm(true, false, (int)P, (int)Q, counts[e], 1.0f, A + off * P, (int)P, B + off * Q, (int)Q,
                              0.0f, De, (int)Q, err)))
                return rc;
        } else
            memset(De, 0, (size_t)(P * Q) * sizeof *De);
        off += counts[e];
    }
    return MG_OK;
}

static mg_tensor *gmm_dw(mg_graph *g, mg_tensor *a, mg_tensor *b, mg_tensor *counts) {
    mg_tensor *in[3] = {a, b, counts};
    mg_node *n = mg_node_new(g, MG_OP_MOE_GROUPED_MATMUL_DW, NULL, 3, in, NULL);
    return n ? n->out[0] : NULL;
}

/* trans_b: y = x wᵀ -> dx = dy w (w [E, N, K] untransposed), dw = dyᵀ x [E, N, K]
 * else:    y = x w  -> dx = dy wᵀ,                             dw = xᵀ dy [E, K, N] */
static int gmm_grad(mg_graph *g, const mg_node *n, mg_tensor *const *dout, const bool *need, mg_tensor **din) {
    mg_tensor *dy = dout[0], *x = n->in[0], *c = n->in[1], *w = n->in[2];
    bool tb = n->attrs.matmul.trans_b;
    if (need[0]) din[0] = mg_moe_grouped_matmul(g, dy, c, w, !tb);
    if (need[2]) din[2] = tb ? gmm_dw(g, dy, x, c) : gmm_dw(g, x, dy, c);
    return mg_graph_error(g)->code;
}

static void cost_gmm(const mg_node *n, double *flops, double *bytes) {
    const mg_tensor *x = n->in[0];
    double R = (double)x->shape[0], K = (double)x->shape[1], N = (double)n->out[0]->shape[1];
    if (n->op == MG_OP_MOE_GROUPED_MATMUL_DW) { /* P = K here, Q = the other operand's width */
        N = (double)n->in[1]->shape[1];
        *flops = 2.0 * R * K * N;
    } else {
        *flops = 2.0 * R * K * N;
    }
    *bytes = 4.0 * ((double)mg_numel(n->in[0]) + (double)mg_numel(n->in[n->op == MG_OP_MOE_GROUPED_MATMUL ? 2 : 1]) +
                    (double)mg_numel(n->out[0]));
}

/* Sharding (ops/op.h), Megatron's grouped column / row-parallel expert linears (expert
 * tensor parallelism): weights split on N (the outputs) give outputs split on their
 * last dim; weights split on K take inputs split alike and give a partial sum; a partial
 * input times whole weights is a partial output. The counts are always whole. */
static int shard_gmm(const mg_node *n, const mg_shard_ctx *c, mg_shard_io *io, mg_error *err) {
    (void)c, (void)err;
    bool tb = n->attrs.matmul.trans_b;
    int wN = tb ? 1 : 2, wK = tb ? 2 : 1;
    mg_sharding sx = io->in[0], sw = io->in[2];
    io->want[1] = mg_sh_full();
    if (mg_sh_is_partial(sx) && mg_sh_is_full(sw)) {
        io->want[0] = sx, io->want[2] = sw, io->out[0] = mg_sh_partial();
    } else if (mg_sh_is_split(sw) && sw.dim == wN) {
        io->want[0] = mg_sh_full(), io->want[2] = sw, io->out[0] = mg_sh_split(1);
    } else if (mg_sh_is_split(sw) && sw.dim == wK) {
        io->want[0] = mg_sh_split(1), io->want[2] = sw, io->out[0] = mg_sh_partial();
    } else if (mg_sh_is_split(sx) && sx.dim == 1 && mg_sh_is_full(sw)) {
        io->want[0] = sx, io->want[2] = mg_sh_split(wK), io->out[0] = mg_sh_partial();
    } else {
        io->want[0] = io->want[2] = io->out[0] = mg_sh_full();
    }
    return MG_OK;
}

/* out[e] = a_eᵀ b_e: a split on its columns gives the gradient split on P, b's on Q; a
 * partial operand with a whole other gives a partial gradient. */
static int shard_gmm_dw(const mg_node *n, const mg_shard_ctx *c, mg_shard_io *io, mg_error *err) {
    (void)n, (void)c, (void)err;
    mg_sharding sa = io->in[0], sb = io->in[1];
    io->want[2] = mg_sh_full();
    if (mg_sh_is_split(sa) && sa.dim == 1 && !mg_sh_is_split(sb)) {
        io->want[0] = sa, io->want[1] = mg_sh_full(), io->out[0] = mg_sh_split(1);
    } else if (mg_sh_is_split(sb) && sb.dim == 1 && !mg_sh_is_split(sa)) {
        io->want[0] = mg_sh_full(), io->want[1] = sb, io->out[0] = mg_sh_split(2);
    } else if (mg_sh_is_partial(sa) != mg_sh_is_partial(sb) && !mg_sh_is_split(sa) && !mg_sh_is_split(sb)) {
        io->want[0] = sa, io->want[1] = sb, io->out[0] = mg_sh_partial();
    } else {
        io->want[0] = io->want[1] = io->out[0] = mg_sh_full();
    }
    return MG_OK;
}

const mg_op_def mg_opdef_MOE_GROUPED_MATMUL = {"moe_grouped_matmul", 3, 3, 0, infer_gmm, gmm_grad, cost_gmm, gmm_cpu,
                                               NULL, .shard = shard_gmm};
const mg_op_def mg_opdef_MOE_GROUPED_MATMUL_DW = {"moe_grouped_matmul_dw", 3, 3, MG_OPF_NO_GRAD, infer_gmm_dw, NULL,
                                                  cost_gmm, gmm_dw_cpu, NULL, .shard = shard_gmm_dw};

mg_tensor *mg_moe_grouped_matmul(mg_graph *g, mg_tensor *xs, mg_tensor *counts, mg_tensor *w, bool trans_w) {
    mg_attrs at;
    memset(&at, 0, sizeof at);
    at.matmul.trans_b = trans_w;
    mg_tensor *in[3] = {xs, counts, w};
    mg_node *n = mg_node_new(g, MG_OP_MOE_GROUPED_MATMUL, &at, 3, in, NULL);
    return n ? n->out[0] : NULL;
}

/* Matrix multiplication (mg_gemm: OpenBLAS sgemm, or bf16; row-major) and linear = x · Wᵀ (+ b).
 *
 * C = op(A) · op(B) with op(X) = X or Xᵀ (the last two dims):
 *   A [..., M, K] (trans_a: [..., K, M]);
 *   B either 2-D [K, N] (trans_b: [N, K]) shared across A's leading dims, or with the
 *   same leading (batch) dims as A (batched);
 *   C [..., M, N].
 * Kernels: a shared B with !trans_a is ONE sgemm over the flattened rows
 * (batch*M × K); otherwise one sgemm per batch entry. No element-wise index math.
 */
#include <limits.h>
#include <string.h>

#include "mgraph/fp8.h"
#include "ops/gemm.h"
#include "ops/op.h"
#include "ops/shard.h"

typedef struct mm_dims {
    int64_t batch, M, N, K;
    bool shared; /* B is 2-D and shared across batch entries of A */
} mm_dims;

static void mm_dims_of(const mg_node *n, mm_dims *d) {
    const mg_tensor *a = n->in[0], *b = n->in[1];
    bool ta = n->attrs.matmul.trans_a, tb = n->attrs.matmul.trans_b;
    int na = a->ndim;
    d->batch = mg_dims_prod(a->shape, 0, na - 2);
    d->M = ta ? a->shape[na - 1] : a->shape[na - 2];
    d->K = ta ? a->shape[na - 2] : a->shape[na - 1];
    d->N = tb ? b->shape[b->ndim - 2] : b->shape[b->ndim - 1];
    d->shared = b->ndim == 2;
}

static int infer_matmul(const mg_node *n, mg_tensor_desc *out, mg_error *err) {
    const mg_tensor *a = n->in[0], *b = n->in[1];
    bool ta = n->attrs.matmul.trans_a, tb = n->attrs.matmul.trans_b;
    if (a->dtype != MG_F32 || b->dtype != MG_F32) return mg_shape_error(err, n, "inputs must be f32");
    if (a->ndim < 2 || b->ndim < 2) return mg_shape_error(err, n, "inputs must have rank >= 2");
    int na = a->ndim, nb = b->ndim;
    if (nb != 2) {
        bool same = nb == na;
        for (int i = 0; same && i < na - 2; i++) same = a->shape[i] == b->shape[i];
        if (!same) return mg_shape_error(err, n, "B must be 2-D or have the batch dimensions of A");
    }
    int64_t ka = ta ? a->shape[na - 2] : a->shape[na - 1];
    int64_t kb = tb ? b->shape[nb - 1] : b->shape[nb - 2];
    if (ka != kb)
        return mg_shape_error(err, n, "inner dimensions differ: K=%lld for A%s, %lld for B%s", (long long)ka,
                              ta ? "^T" : "", (long long)kb, tb ? "^T" : "");
    mg_desc_of(a, &out[0]);
    out[0].shape[na - 2] = ta ? a->shape[na - 1] : a->shape[na - 2];
    out[0].shape[na - 1] = tb ? b->shape[nb - 2] : b->shape[nb - 1];
    return 1;
}

static void cost_matmul(const mg_node *n, double *flops, double *bytes) {
    mm_dims d;
    mm_dims_of(n, &d);
    *flops = 2.0 * (double)d.batch * (double)d.M * (double)d.N * (double)d.K;
    *bytes = 4.0 * ((double)mg_numel(n->in[0]) + (double)mg_numel(n->in[1]) + (double)mg_numel(n->out[0]));
}

/* An fp8 product (mgraph/fp8.h): the whole operand is one tensor (a batched product
 * shares its scales), its amax taken over all of it. */
static int fp8_operands(const mg_kernel_args *a, const mm_dims *d, mg_fp8_operand q[2], mg_error *err) {
    int64_t numel[2] = {d->batch * d->M * d->K, (d->shared ? 1 : d->batch) * d->K * d->N};
    float amax[2] = {0, 0};
    if (mg_fp8_wants_amax(a->info))
        for (int i = 0; i < 2; i++) amax[i] = mg_fp8_amax(a->in[i], numel[i]);
    return mg_fp8_scales(a->node, a->info, amax, q, err);
}

static int matmul_cpu(const mg_kernel_args *a, mg_error *err) {
    const mg_node *n = a->node;
    bool ta = n->attrs.matmul.trans_a, tb = n->attrs.matmul.trans_b;
    mm_dims d;
    mm_dims_of(n, &d);
    const float *A = a->in[0], *B = a->in[1];
    float *C = a->out[0];
    /* one call over all rows when B is shared and A's rows are contiguous */
    int64_t calls = d.batch, rows = d.M;
    if (d.shared && !ta) {
        rows = d.batch * d.M;
        calls = 1;
    }
    if (rows > INT_MAX || d.N > INT_MAX || d.K > INT_MAX)
        return mg_error_set(err, MG_ERR_UNSUPPORTED, "matmul: dimensions (%lld, %lld, %lld) exceed the BLAS int range",
                            (long long)rows, (long long)d.N, (long long)d.K);
    int M = (int)rows, N = (int)d.N, K = (int)d.K;
    int lda = ta ? M : K, ldb = tb ? K : N;
    int64_t sa = d.M * d.K, sb = d.shared ? 0 : d.K * d.N, sc = d.M * d.N;
    mg_fp8_operand q[2];
    bool fp8 = n->attrs.matmul.fp8_gemm > 0;
    if (fp8) {
        int rc = fp8_operands(a, &d, q, err);
        if (rc) return rc;
    }
    bool native = fp8 && mg_gemm_native();
    for (int64_t i = 0; i < calls; i++) {
        int rc = fp8 ? mg_gemm_fp8(native, ta, tb, M, N, K, A + i * sa, lda, q[0], B + i * sb, ldb, q[1], C + i * sc, N, err)
                     : mg_gemm(ta, tb, M, N, K, 1.0f, A + i * sa, lda, B + i * sb, ldb, 0.0f, C + i * sc, N, err);
        if (rc) return rc;
    }
    return MG_OK;
}

/* ---- gradient ----------------------------------------------------------------------- */
static mg_tensor *swap_last2(mg_graph *g, mg_tensor *t) {
    if (!t) return NULL;
    int perm[MG_MAX_DIMS];
    for (int i = 0; i < t->ndim; i++) perm[i] = i;
    perm[t->ndim - 2] = t->ndim - 1;
    perm[t->ndim - 1] = t->ndim - 2;
    return mg_transpose(g, t, perm);
}

/* [..., R, C] -> [prod(...) * R, C] */
static mg_tensor *rows2d(mg_graph *g, mg_tensor *t) {
    if (!t || t->ndim == 2) return t;
    int64_t s[2] = {mg_dims_prod(t->shape, 0, t->ndim - 1), t->shape[t->ndim - 1]};
    return mg_reshape(g, t, 2, s);
}

/* C = op(A) op(B):
 *   NN: dA = dC Bᵀ      dB = Aᵀ dC
 *   NT: dA = dC B       dB = dCᵀ A
 *   TN: dA = B dCᵀ      dB = A dC
 *   TT: dA = Bᵀ dCᵀ     dB = dCᵀ Aᵀ
 * With a 2-D B shared over A's batch, dB sums over the batch: one matmul over the
 * flattened rows (exact). dA in the trans_a case is (dC op(B)ᵀ)ᵀ per batch entry. */
static void fp8_mark_grads(mg_graph *g, const mg_node *n, int first, mg_tensor *dC);
static int matmul_grad_nodes(mg_graph *g, const mg_node *n, mg_tensor *const *dout, const bool *need, mg_tensor **din);

static int matmul_grad(mg_graph *g, const mg_node *n, mg_tensor *const *dout, const bool *need, mg_tensor **din) {
    int first = mg_graph_n_nodes(g);
    int rc = matmul_grad_nodes(g, n, dout, need, din);
    if (!rc && n->attrs.matmul.fp8_gemm) fp8_mark_grads(g, n, first, dout[0]);
    return rc;
}

/* fp8 (mgraph/fp8.h): the products a marked product's gradient rule built are the
 * same layer's dgrad and wgrad; each operand takes the slot of what it is (through the
 * reshapes and transposes the rule put in between): the forward's operands keep theirs,
 * the output's gradient is dY. */
static void fp8_mark_grads(mg_graph *g, const mg_node *n, int first, mg_tensor *dC) {
    int last = mg_graph_n_nodes(g);
    for (int id = first; id < last; id++) {
        mg_node *m = mg_graph_node(g, id);
        if (m->op != MG_OP_MATMUL) continue;
        uint8_t role[2] = {0, 0};
        for (int i = 0; i < 2; i++) {
            const mg_tensor *t = m->in[i];
            while (t->src && t->src->id >= first && (t->src->op == MG_OP_RESHAPE || t->src->op == MG_OP_TRANSPOSE))
                t = t->src->in[0];
            if (t == dC) role[i] = 1 + MG_FP8_SLOT_DY;
            else if (t == n->in[0]) role[i] = n->attrs.matmul.fp8_role[0];
            else if (t == n->in[1]) role[i] = n->attrs.matmul.fp8_role[1];
        }
        if (!role[0] || !role[1]) continue; /* (not one of this layer's products) */
        m->attrs.matmul.fp8_gemm = n->attrs.matmul.fp8_gemm;
        m->attrs.matmul.fp8_role[0] = role[0];
        m->attrs.matmul.fp8_role[1] = role[1];
    }
}

static int matmul_grad_nodes(mg_graph *g, const mg_node *n, mg_tensor *const *dout, const bool *need, mg_tensor **din) {
    mg_tensor *A = n->in[0], *B = n->in[1], *dC = dout[0];
    bool ta = n->attrs.matmul.trans_a, tb = n->attrs.matmul.trans_b;
    bool shared = B->ndim == 2 && A->ndim > 2;
    if (need[0]) {
        if (!ta) din[0] = mg_matmul(g, dC, B, false, !tb);
        else if (!shared) din[0] = tb ? mg_matmul(g, B, dC, true, true) : mg_matmul(g, B, dC, false, true);
        else din[0] = swap_last2(g, mg_matmul(g, dC, B, false, !tb));
    }
    if (need[1]) {
        if (!shared) {
            if (!ta) din[1] = tb ? mg_matmul(g, dC, A, true, false) : mg_matmul(g, A, dC, true, false);
            else din[1] = tb ? mg_matmul(g, dC, A, true, true) : mg_matmul(g, A, dC, false, false);
        } else {
            mg_tensor *A2 = rows2d(g, ta ? swap_last2(g, A) : A); /* [batch*M, K] */
            mg_tensor *dC2 = rows2d(g, dC);                       /* [batch*M, N] */
            din[1] = tb ? mg_matmul(g, dC2, A2, true, false) : mg_matmul(g, A2, dC2, true, false);
        }
    }
    return MG_OK;
}

/* Sharding (ops/op.h): Megatron's linears fall out of the operands' states.
 *  - column-parallel: FULL x B SPLIT on N gives SPLIT(last); a sequence-parallel input
 *    (split on a row dim) is all-gathered first;
 *  - row-parallel: A SPLIT on K x B SPLIT on K gives PARTIAL (the all-reduce or, under
 *    SP, reduce-scatter is inserted where a consumer needs the sum);
 *  - a partial factor times a replicated one stays partial (bilinear);
 *  - batched (attention-style) products split alike on a batch dim. */
static int shard_matmul(const mg_node *n, const mg_shard_ctx *c, mg_shard_io *io, mg_error *err) {
    (void)c, (void)err;
    const mg_tensor *A = n->in[0], *B = n->in[1];
    bool ta = n->attrs.matmul.trans_a, tb = n->attrs.matmul.trans_b;
    int aK = ta ? A->ndim - 2 : A->ndim - 1;
    int bK = tb ? B->ndim - 1 : B->ndim - 2, bN = tb ? B->ndim - 2 : B->ndim - 1;
    int on = n->out[0]->ndim;
    bool batched = B->ndim > 2;
    mg_sharding sa = io->in[0], sb = io->in[1];
    mg_sharding *w = io->want, *o = io->out;
    if ((mg_sh_is_partial(sa) && mg_sh_is_full(sb)) || (mg_sh_is_partial(sb) && mg_sh_is_full(sa))) {
        w[0] = sa, w[1] = sb, o[0] = mg_sh_partial();
        return MG_OK;
    }
    if (mg_sh_is_partial(sa)) sa = mg_sh_full();
    if (mg_sh_is_partial(sb)) sb = mg_sh_full();
    bool aK_split = mg_sh_is_split(sa) && sa.dim == aK, bK_split = mg_sh_is_split(sb) && sb.dim == bK;
    bool bN_split = mg_sh_is_split(sb) && sb.dim == bN;
    bool aR_split = mg_sh_is_split(sa) && sa.dim != aK; /* a row / batch dim of A */
    /* A's row dims map to the output: batch dims keep their index; A's M dim is on-2 */
    int a_out = -1;
    if (aR_split) a_out = sa.dim < A->ndim - 2 ? sa.dim : on - 2;
    if (batched) {
        bool bB_split = mg_sh_is_split(sb) && sb.dim < B->ndim - 2;
        if (aR_split && sa.dim < A->ndim - 2 && bB_split && sb.dim == sa.dim) {
            w[0] = sa, w[1] = sb, o[0] = mg_sh_split(sa.dim);
            return MG_OK;
        }
        if (bB_split) sb = mg_sh_full(), bB_split = false, bK_split = bN_split = false;
        if (aR_split && sa.dim < A->ndim - 2) { /* A split on a batch dim: split B alike */
            w[0] = sa, w[1] = mg_sh_split(sa.dim), o[0] = mg_sh_split(sa.dim);
            return MG_OK;
        }
    }
    if (aK_split && bK_split) {
        w[0] = sa, w[1] = sb, o[0] = mg_sh_partial();
    } else if (mg_sh_is_full(sa) && bN_split) {
        w[0] = sa, w[1] = sb, o[0] = mg_sh_split(on - 1);
    } else if (aR_split && mg_sh_is_full(sb)) {
        w[0] = sa, w[1] = sb, o[0] = mg_sh_split(a_out);
    } else if (aK_split && mg_sh_is_full(sb)) {
        w[0] = sa, w[1] = mg_sh_split(bK), o[0] = mg_sh_partial();
    } else if (mg_sh_is_full(sa) && bK_split) {
        w[0] = mg_sh_split(aK), w[1] = sb, o[0] = mg_sh_partial();
    } else if ((aR_split || aK_split) && bN_split) {
        /* sequence-parallel input entering a column-parallel layer: all-gather it */
        w[0] = mg_sh_full(), w[1] = sb, o[0] = mg_sh_split(on - 1);
    } else if (aR_split && bK_split) {
        /* e.g. a weight gradient under sequence parallelism: gather the activation */
        w[0] = sa, w[1] = mg_sh_full(), o[0] = mg_sh_split(a_out);
    } else {
        w[0] = mg_sh_full(), w[1] = mg_sh_full(), o[0] = mg_sh_full();
    }
    return MG_OK;
}

const mg_op_def mg_opdef_MATMUL = {"matmul", 2, 2, 0, infer_matmul, matmul_grad, cost_matmul, matmul_cpu, NULL, .shard = shard_matmul};

mg_tensor *mg_matmul(mg_graph *g, mg_tensor *a, mg_tensor *b, bool trans_a, bool trans_b) {
    mg_attrs at;
    memset(&at, 0, sizeof at);
    at.matmul.trans_a = trans_a;
    at.matmul.trans_b = trans_b;
    mg_tensor *in[2] = {a, b};
    mg_node *n = mg_node_new(g, MG_OP_MATMUL, &at, 2, in, NULL);
    return n ? n->out[0] : NULL;
}

mg_tensor *mg_linear(mg_graph *g, mg_tensor *x, mg_tensor *w, mg_tensor *b) {
    if (w && w->ndim != 2) {
        char s[64];
        mg_graph_fail(g, MG_ERR_SHAPE, "linear: weight must be 2-D [out, in], got %s", mg_shape_str(w, s, sizeof s));
        return NULL;
    }
    mg_tensor *y = mg_matmul(g, x, w, false, true);
    return b ? mg_bias_add(g, y, b) : y;
}

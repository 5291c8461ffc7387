/* Elementwise ops with broadcasting: add, sub, mul, scale, bias_add, and the pair
 * expand / sum_to that broadcasting's gradients are made of. */
#include <stdlib.h>
#include <string.h>

#include "ops/broadcast.h"
#include "ops/shard.h"
#include "ops/simd.h"

/* ---- broadcasting helpers ----------------------------------------------------- */
bool mg_bcast_shape(int na, const int64_t *sa, int nb, const int64_t *sb, int *nout, int64_t *sout) {
    int n = na > nb ? na : nb;
    for (int i = 0; i < n; i++) {
        int ia = na - n + i, ib = nb - n + i;
        int64_t da = ia >= 0 ? sa[ia] : 1, db = ib >= 0 ? sb[ib] : 1;
        if (da != db && da != 1 && db != 1) return false;
        sout[i] = da > db ? da : db;
    }
    *nout = n;
    return true;
}

bool mg_bcast_to_ok(int n, const int64_t *s, int nout, const int64_t *sout) {
    if (n > nout) return false;
    for (int i = 0; i < n; i++) {
        int64_t d = s[i], o = sout[nout - n + i];
        if (d != o && d != 1) return false;
    }
    return true;
}

void mg_bcast_strides(int n, const int64_t *s, int nout, const int64_t *sout, int64_t *strides) {
    int64_t st = 1;
    for (int i = nout - 1; i >= 0; i--) {
        int k = n - nout + i;
        int64_t d = k >= 0 ? s[k] : 1;
        strides[i] = (d == 1 && sout[i] != 1) ? 0 : st;
        if (k >= 0) st *= d;
    }
}

/* Walks an output of shape (n, shape) in order, tracking the offsets of up to two
 * broadcast inputs. The innermost dimension is a plain loop for speed. */
typedef struct {
    int n;
    int64_t shape[MG_MAX_DIMS], sa[MG_MAX_DIMS], sb[MG_MAX_DIMS];
} walk;

#define WALK(w, BODY)                                                                                  \
    do {                                                                                               \
        int64_t idx_[MG_MAX_DIMS] = {0}, oa_ = 0, ob_ = 0, o_ = 0;                                     \
        int64_t inner_ = (w).shape[(w).n - 1], ia_ = (w).sa[(w).n - 1], ib_ = (w).sb[(w).n - 1];       \
        int64_t outer_ = 1;                                                                            \
        for (int d_ = 0; d_ < (w).n - 1; d_++) outer_ *= (w).shape[d_];                                \
        for (int64_t r_ = 0; r_ < outer_; r_++) {                                                      \
            for (int64_t j_ = 0; j_ < inner_; j_++) {                                                  \
                int64_t o = o_ + j_, pa = oa_ + j_ * ia_, pb = ob_ + j_ * ib_;                         \
                (void)pb;                                                                              \
                BODY;                                                                                  \
            }                                                                                          \
            o_ += inner_;                                                                              \
            for (int d_ = (w).n - 2; d_ >= 0; d_--) {                                                  \
                idx_[d_]++;                                                                            \
                oa_ += (w).sa[d_];                                                                     \
                ob_ += (w).sb[d_];                                                                     \
                if (idx_[d_] < (w).shape[d_]) break;                                                   \
                oa_ -= (w).sa[d_] * idx_[d_];                                                          \
                ob_ -= (w).sb[d_] * idx_[d_];                                                          \
                idx_[d_] = 0;                                                                          \
            }                                                                                          \
        }                                                                                              \
    } while (0)

static void walk_init(walk *w, const mg_tensor *out, const mg_tensor *a, const mg_tensor *b) {
    w->n = out->ndim;
    memcpy(w->shape, out->shape, sizeof w->shape);
    mg_bcast_strides(a->ndim, a->shape, out->ndim, out->shape, w->sa);
    if (b) mg_bcast_strides(b->ndim, b->shape, out->ndim, out->shape, w->sb);
    else memset(w->sb, 0, sizeof w->sb);
}

/* ---- add / sub / mul ---------------------------------------------------------- */
static int infer_binary(const mg_node *n, mg_tensor_desc *out, mg_error *err) {
    const mg_tensor *a = n->in[0], *b = n->in[1];
    if (a->dtype != MG_F32 || b->dtype != MG_F32) return mg_shape_error(err, n, "inputs must be f32");
    out[0].dtype = MG_F32;
    if (!mg_bcast_shape(a->ndim, a->shape, b->ndim, b->shape, &out[0].ndim, out[0].shape))
        return mg_shape_error(err, n, "shapes do not broadcast");
    return 1;
}

static void cost_binary(const mg_node *n, double *flops, double *bytes) {
    double e = (double)mg_numel(n->out[0]);
    *flops = e;
    *bytes = 4.0 * (e + (double)mg_numel(n->in[0]) + (double)mg_numel(n->in[1]));
}

#define BINARY_KERNEL(fname, EXPR)                                                                      \
    MG_SIMD static int fname(const mg_kernel_args *a, mg_error *err) {                                  \
        (void)err;                                                                                      \
        const mg_node *n = a->node;                                                                     \
        const float *x = a->in[0], *y = a->in[1];                                                       \
        float *z = a->out[0];                                                                           \
        int64_t ne = mg_numel(n->out[0]);                                                               \
        if (mg_numel(n->in[0]) == ne && mg_numel(n->in[1]) == ne) {                                     \
            for (int64_t o = 0, pa = 0, pb = 0; o < ne; o++, pa++, pb++) z[o] = EXPR;                   \
            return MG_OK;                                                                               \
        }                                                                                               \
        walk w;                                                                                         \
        walk_init(&w, n->out[0], n->in[0], n->in[1]);                                                  \
        WALK(w, z[o] = EXPR);                                                                           \
        return MG_OK;                                                                                   \
    }

BINARY_KERNEL(add_cpu, x[pa] + y[pb])
BINARY_KERNEL(sub_cpu, x[pa] - y[pb])
BINARY_KERNEL(mul_cpu, x[pa] * y[pb])

mg_tensor *mg_sum_to_like(mg_graph *g, mg_tensor *t, const mg_tensor *like) {
    if (!t || mg_same_shape(t, like)) return t;
    return mg_sum_to(g, t, like->ndim, like->shape);
}

static int add_grad(mg_graph *g, const mg_node *n, mg_tensor *const *dout, const bool *need, mg_tensor **din) {
    if (need[0]) din[0] = mg_sum_to_like(g, dout[0], n->in[0]);
    if (need[1]) din[1] = mg_sum_to_like(g, dout[0], n->in[1]);
    return MG_OK;
}

static int sub_grad(mg_graph *g, const mg_node *n, mg_tensor *const *dout, const bool *need, mg_tensor **din) {
    if (need[0]) din[0] = mg_sum_to_like(g, dout[0], n->in[0]);
    if (need[1]) din[1] = mg_sum_to_like(g, mg_scale(g, dout[0], -1.0f), n->in[1]);
    return MG_OK;
}

static int mul_grad(mg_graph *g, const mg_node *n, mg_tensor *const *dout, const bool *need, mg_tensor **din) {
    if (need[0]) din[0] = mg_sum_to_like(g, mg_mul(g, dout[0], n->in[1]), n->in[0]);
    if (need[1]) din[1] = mg_sum_to_like(g, mg_mul(g, dout[0], n->in[0]), n->in[1]);
    return MG_OK;
}

/* Sharding (ops/op.h): partial + partial stays partial for add and sub; partial times
 * replicated stays partial for mul; otherwise the output follows the first input split
 * on a dimension that is not broadcast, and each input is split alike or whole. */
static int bcast_dim(const mg_node *n, int i, int d) {
    const mg_tensor *x = n->in[i], *y = n->out[0];
    int k = d - (y->ndim - x->ndim);
    if (k < 0 || x->shape[k] == 1) return -1;
    return k;
}

static int shard_binary(const mg_node *n, const mg_shard_ctx *c, mg_shard_io *io, mg_error *err) {
    (void)err;
    bool linear_both = n->op != MG_OP_MUL;
    if (mg_sh_is_partial(io->in[0]) && mg_sh_is_partial(io->in[1]) && linear_both) {
        io->want[0] = io->want[1] = io->out[0] = mg_sh_partial();
        return MG_OK;
    }
    if (n->op == MG_OP_MUL && (mg_sh_is_partial(io->in[0]) != mg_sh_is_partial(io->in[1]))) {
        int p = mg_sh_is_partial(io->in[0]) ? 0 : 1, q = 1 - p;
        if (mg_sh_is_full(io->in[q])) {
            io->want[p] = mg_sh_partial();
            io->want[q] = mg_sh_full();
            io->out[0] = mg_sh_partial();
            return MG_OK;
        }
    }
    mg_sharding t = mg_sh_full();
    for (int i = 0; i < 2 && mg_sh_is_full(t); i++) {
        mg_sharding s = mg_shard_whole(c, n, io, i, true);
        if (mg_sh_is_split(s)) t = mg_sh_split(s.dim + (n->out[0]->ndim - n->in[i]->ndim));
    }
    for (int i = 0; i < 2; i++) {
        int k = mg_sh_is_split(t) ? bcast_dim(n, i, t.dim) : -1;
        io->want[i] = k < 0 ? mg_sh_full() : mg_sh_split(k);
    }
    io->out[0] = t;
    return MG_OK;
}

const mg_op_def mg_opdef_ADD = {"add", 2, 2, 0, infer_binary, add_grad, cost_binary, add_cpu, NULL, .shard = shard_binary};
const mg_op_def mg_opdef_SUB = {"sub", 2, 2, 0, infer_binary, sub_grad, cost_binary, sub_cpu, NULL, .shard = shard_binary};
const mg_op_def mg_opdef_MUL = {"mul", 2, 2, 0, infer_binary, mul_grad, cost_binary, mul_cpu, NULL, .shard = shard_binary};

static mg_tensor *binary(mg_graph *g, mg_op op, mg_tensor *a, mg_tensor *b) {
    mg_tensor *in[2] = {a, b};
    mg_node *n = mg_node_new(g, op, NULL, 2, in, NULL);
    return n ? n->out[0] : NULL;
}
mg_tensor *mg_add(mg_graph *g, mg_tensor *a, mg_tensor *b) { return binary(g, MG_OP_ADD, a, b); }
mg_tensor *mg_sub(mg_graph *g, mg_tensor *a, mg_tensor *b) { return binary(g, MG_OP_SUB, a, b); }
mg_tensor *mg_mul(mg_graph *g, mg_tensor *a, mg_tensor *b) { return binary(g, MG_OP_MUL, a, b); }

/* ---- scale -------------------------------------------------------------------- */
static int infer_same(const mg_node *n, mg_tensor_desc *out, mg_error *err) {
    if (n->in[0]->dtype != MG_F32) return mg_shape_error(err, n, "input must be f32");
    mg_desc_of(n->in[0], &out[0]);
    return 1;
}

MG_SIMD static int scale_cpu(const mg_kernel_args *a, mg_error *err) {
    (void)err;
    const float *x = a->in[0];
    float *y = a->out[0], s = a->node->attrs.scale.value;
    int64_t ne = mg_numel(a->node->out[0]);
    for (int64_t i = 0; i < ne; i++) y[i] = s * x[i];
    return MG_OK;
}

static int scale_grad(mg_graph *g, const mg_node *n, mg_tensor *const *dout, const bool *need, mg_tensor **din) {
    if (need[0]) din[0] = mg_scale(g, dout[0], n->attrs.scale.value);
    return MG_OK;
}

const mg_op_def mg_opdef_SCALE = {"scale", 1, 1, 0, infer_same, scale_grad, NULL, scale_cpu, NULL, .shard = mg_shard_rule_linear};

mg_tensor *mg_scale(mg_graph *g, mg_tensor *x, float s) {
    mg_attrs at = {.scale = {s}};
    mg_node *n = mg_node_new(g, MG_OP_SCALE, &at, 1, &x, NULL);
    return n ? n->out[0] : NULL;
}

/* ---- bias_add ----------------------------------------------------------------- */
static int infer_bias(const mg_node *n, mg_tensor_desc *out, mg_error *err) {
    const mg_tensor *x = n->in[0], *b = n->in[1];
    if (x->dtype != MG_F32 || b->dtype != MG_F32) return mg_shape_error(err, n, "inputs must be f32");
    if (b->ndim != 1 || b->shape[0] != x->shape[x->ndim - 1])
        return mg_shape_error(err, n, "bias must be [N] with N the last dimension of x");
    mg_desc_of(x, &out[0]);
    return 1;
}

MG_SIMD static int bias_cpu(const mg_kernel_args *a, mg_error *err) {
    (void)err;
    const float *x = a->in[0], *b = a->in[1];
    float *y = a->out[0];
    int64_t N = a->node->in[1]->shape[0], rows = mg_numel(a->node->in[0]) / N;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < N; j++) y[r * N + j] = x[r * N + j] + b[j];
    return MG_OK;
}

static int bias_grad(mg_graph *g, const mg_node *n, mg_tensor *const *dout, const bool *need, mg_tensor **din) {
    if (need[0]) din[0] = dout[0];
    if (need[1]) din[1] = mg_sum_to_like(g, dout[0], n->in[1]);
    return MG_OK;
}

/* Sharding: x [..., N] + b [N]. The bias of a row-parallel layer meets a partial x
 * here, and the reduction happens before the bias is added (Megatron). */
static int shard_bias_add(const mg_node *n, const mg_shard_ctx *c, mg_shard_io *io, mg_error *err) {
    (void)err;
    mg_sharding sx = mg_shard_whole(c, n, io, 0, true);
    io->want[0] = sx;
    io->want[1] = mg_sh_is_split(sx) && sx.dim == n->in[0]->ndim - 1 ? mg_sh_split(0) : mg_sh_full();
    io->out[0] = sx;
    return MG_OK;
}

const mg_op_def mg_opdef_BIAS_ADD = {"bias_add", 2, 2, 0, infer_bias, bias_grad, cost_binary, bias_cpu, NULL, .shard = shard_bias_add};

mg_tensor *mg_bias_add(mg_graph *g, mg_tensor *x, mg_tensor *b) { return binary(g, MG_OP_BIAS_ADD, x, b); }

/* ---- expand / sum_to ------------------------------------------------------------ */
static int infer_expand(const mg_node *n, mg_tensor_desc *out, mg_error *err) {
    const mg_tensor *x = n->in[0];
    const mg_attr_shape *s = &n->attrs.shape;
    if (x->dtype != MG_F32) return mg_shape_error(err, n, "input must be f32");
    if (s->ndim < 1 || s->ndim > MG_MAX_DIMS) return mg_shape_error(err, n, "target rank %d invalid", s->ndim);
    if (!mg_bcast_to_ok(x->ndim, x->shape, s->ndim, s->shape))
        return mg_shape_error(err, n, "cannot broadcast to the target shape");
    out[0].dtype = MG_F32;
    out[0].ndim = s->ndim;
    memcpy(out[0].shape, s->shape, sizeof out[0].shape);
    return 1;
}

static int infer_sum_to(const mg_node *n, mg_tensor_desc *out, mg_error *err) {
    const mg_tensor *x = n->in[0];
    const mg_attr_shape *s = &n->attrs.shape;
    if (x->dtype != MG_F32) return mg_shape_error(err, n, "input must be f32");
    if (s->ndim < 1 || s->ndim > MG_MAX_DIMS) return mg_shape_error(err, n, "target rank %d invalid", s->ndim);
    if (!mg_bcast_to_ok(s->ndim, s->shape, x->ndim, x->shape))
        return mg_shape_error(err, n, "the target shape does not broadcast to the input");
    out[0].dtype = MG_F32;
    out[0].ndim = s->ndim;
    memcpy(out[0].shape, s->shape, sizeof out[0].shape);
    return 1;
}

static int expand_cpu(const mg_kernel_args *a, mg_error *err) {
    (void)err;
    const float *x = a->in[0];
    float *y = a->out[0];
    walk w;
    walk_init(&w, a->node->out[0], a->node->in[0], NULL);
    WALK(w, y[o] = x[pa]);
    return MG_OK;
}

/* Accumulates in double so a long reduction (a bias gradient over many tokens) keeps
 * full float precision; the order is fixed, so results are deterministic. */
static int sum_to_cpu(const mg_kernel_args *a, mg_error *err) {
    const float *x = a->in[0];
    float *y = a->out[0];
    int64_t ny = mg_numel(a->node->out[0]);
    double *acc = calloc((size_t)ny, sizeof *acc);
    if (!acc) return mg_error_set(err, MG_ERR_NOMEM, "sum_to: out of memory");
    walk w; /* walk the input; the output is the broadcast operand */
    walk_init(&w, a->node->in[0], a->node->out[0], NULL);
    WALK(w, acc[pa] += x[o]);
    for (int64_t i = 0; i < ny; i++) y[i] = (float)acc[i];
    free(acc);
    return MG_OK;
}

static int expand_grad(mg_graph *g, const mg_node *n, mg_tensor *const *dout, const bool *need, mg_tensor **din) {
    if (need[0]) din[0] = mg_sum_to(g, dout[0], n->in[0]->ndim, n->in[0]->shape);
    return MG_OK;
}

static int sum_to_grad(mg_graph *g, const mg_node *n, mg_tensor *const *dout, const bool *need, mg_tensor **din) {
    if (need[0]) din[0] = mg_expand(g, dout[0], n->in[0]->ndim, n->in[0]->shape);
    return MG_OK;
}

const mg_op_def mg_opdef_EXPAND = {"expand", 1, 1, 0, infer_expand, expand_grad, NULL, expand_cpu, NULL, .shard = mg_shard_rule_reduce};
const mg_op_def mg_opdef_SUM_TO = {"sum_to", 1, 1, 0, infer_sum_to, sum_to_grad, NULL, sum_to_cpu, NULL, .shard = mg_shard_rule_reduce};

static mg_tensor *shaped(mg_graph *g, mg_op op, mg_tensor *x, int ndim, const int64_t *shape) {
    mg_attrs at = {.shape = {.ndim = ndim}};
    if (ndim < 1 || ndim > MG_MAX_DIMS) {
        mg_graph_fail(g, MG_ERR_SHAPE, "%s: target rank %d outside 1..%d", mg_op_name(op), ndim, MG_MAX_DIMS);
        return NULL;
    }
    for (int i = 0; i < MG_MAX_DIMS; i++) at.shape.shape[i] = i < ndim ? shape[i] : 1;
    mg_node *n = mg_node_new(g, op, &at, 1, &x, NULL);
    return n ? n->out[0] : NULL;
}
mg_tensor *mg_expand(mg_graph *g, mg_tensor *x, int ndim, const int64_t *shape) {
    return shaped(g, MG_OP_EXPAND, x, ndim, shape);
}
mg_tensor *mg_sum_to(mg_graph *g, mg_tensor *x, int ndim, const int64_t *shape) {
    return shaped(g, MG_OP_SUM_TO, x, ndim, shape);
}

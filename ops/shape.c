/* Shape ops: reshape, transpose, split, concat, slice, pad and zeros.
 *
 * They move data and never compute, so their kernels are dtype-agnostic (element size
 * from the dtype) and copy whole contiguous blocks with memcpy: a tensor cut along
 * `dim` is viewed as [outer, dim, inner], where a block of (len * inner) elements is
 * contiguous. Builders accept negative dimensions (counted from the end); the stored
 * attributes always hold the normalised, non-negative dimension.
 */
#include <stdlib.h>
#include <string.h>

#include "ops/convert.h"
#include "ops/op.h"
#include "ops/shard.h"

/* ---- helpers -------------------------------------------------------------------- */
static void outer_inner(const int64_t *shape, int ndim, int dim, int64_t *outer, int64_t *inner) {
    *outer = mg_dims_prod(shape, 0, dim);
    *inner = mg_dims_prod(shape, dim + 1, ndim);
}

/* Fails the build for a NULL input without overwriting an earlier error. */
static bool null_input(mg_graph *g, const char *op, const mg_tensor *x) {
    if (x) return false;
    mg_graph_fail(g, MG_ERR_INVALID, "%s: input is NULL", op);
    return true;
}

static int norm_dim(int dim, int ndim) { return dim < 0 ? dim + ndim : dim; }

/* ---- zeros ---------------------------------------------------------------------------
 * attrs.shape {ndim, shape}. The union has no dtype field, so the dtype travels in the
 * first unused slot, shape[ndim], as -(dtype + 1); any non-negative value there (the
 * usual filler 1) means f32. A rank-MG_MAX_DIMS zeros tensor is therefore always f32. */
static mg_dtype zeros_dtype(const mg_attr_shape *s) {
    if (s->ndim >= 1 && s->ndim < MG_MAX_DIMS && s->shape[s->ndim] < 0) {
        int64_t d = -s->shape[s->ndim] - 1;
        if (d >= 0 && d < MG_DTYPE_COUNT) return (mg_dtype)d;
    }
    return MG_F32;
}

static int infer_zeros(const mg_node *n, mg_tensor_desc *out, mg_error *err) {
    const mg_attr_shape *s = &n->attrs.shape;
    if (s->ndim < 1 || s->ndim > MG_MAX_DIMS) return mg_shape_error(err, n, "rank %d outside 1..%d", s->ndim, MG_MAX_DIMS);
    out[0].dtype = zeros_dtype(s);
    out[0].ndim = s->ndim;
    for (int i = 0; i < MG_MAX_DIMS; i++) out[0].shape[i] = i < s->ndim ? s->shape[i] : 1;
    for (int i = 0; i < s->ndim; i++)
        if (s->shape[i] < 1) return mg_shape_error(err, n, "dimension %d has size %lld", i, (long long)s->shape[i]);
    return 1;
}

static int zeros_cpu(const mg_kernel_args *a, mg_error *err) {
    (void)err;
    const mg_tensor *t = a->node->out[0];
    memset(a->out[0], 0, mg_tensor_bytes(t)); /* 0 is +0 in every float storage */
    return MG_OK;
}

static void cost_zeros(const mg_node *n, double *flops, double *bytes) {
    *flops = 0;
    *bytes = (double)mg_tensor_bytes(n->out[0]);
}

const mg_op_def mg_opdef_ZEROS = {"zeros", 0, 0, MG_OPF_NO_GRAD | MG_OPF_STORAGE, infer_zeros, NULL, cost_zeros, zeros_cpu, NULL, .shard = mg_shard_rule_replicated};

mg_tensor *mg_zeros(mg_graph *g, mg_dtype dt, int ndim, const int64_t *shape) {
    if (ndim < 1 || ndim > MG_MAX_DIMS || !shape) {
        mg_graph_fail(g, MG_ERR_SHAPE, "zeros: rank %d outside 1..%d", ndim, MG_MAX_DIMS);
        return NULL;
    }
    if ((int)dt < 0 || dt >= MG_DTYPE_COUNT || (ndim == MG_MAX_DIMS && dt != MG_F32)) {
        mg_graph_fail(g, MG_ERR_UNSUPPORTED, "zeros: dtype %d at rank %d not supported", (int)dt, ndim);
        return NULL;
    }
    mg_attrs at = {.shape = {.ndim = ndim}};
    for (int i = 0; i < MG_MAX_DIMS; i++) at.shape.shape[i] = i < ndim ? shape[i] : 1;
    if (ndim < MG_MAX_DIMS && dt != MG_F32) at.shape.shape[ndim] = -(int64_t)dt - 1;
    mg_tensor *none[1] = {NULL}; /* no inputs; non-NULL so that a 0-byte memcpy of it is defined */
    mg_node *n = mg_node_new(g, MG_OP_ZEROS, &at, 0, none, NULL);
    return n ? n->out[0] : NULL;
}

static mg_tensor *zeros_like(mg_graph *g, const mg_tensor *t) { return mg_zeros(g, t->dtype, t->ndim, t->shape); }

/* ---- reshape --------------------------------------------------------------------- */
static int infer_reshape(const mg_node *n, mg_tensor_desc *out, mg_error *err) {
    const mg_tensor *x = n->in[0];
    const mg_attr_shape *s = &n->attrs.shape;
    char b[96];
    if (s->ndim < 1 || s->ndim > MG_MAX_DIMS)
        return mg_shape_error(err, n, "target rank %d outside 1..%d", s->ndim, MG_MAX_DIMS);
    for (int i = 0; i < s->ndim; i++)
        if (s->shape[i] < 1)
            return mg_shape_error(err, n, "target %s has a non-positive dimension", mg_dims_str(s->ndim, s->shape, b, sizeof b));
    if (mg_dims_prod(s->shape, 0, s->ndim) != mg_numel(x))
        return mg_shape_error(err, n, "target %s has %lld elements, input has %lld",
                              mg_dims_str(s->ndim, s->shape, b, sizeof b), (long long)mg_dims_prod(s->shape, 0, s->ndim),
                              (long long)mg_numel(x));
    out[0].dtype = x->dtype;
    out[0].ndim = s->ndim;
    for (int i = 0; i < MG_MAX_DIMS; i++) out[0].shape[i] = i < s->ndim ? s->shape[i] : 1;
    return 1;
}

static int copy_cpu(const mg_kernel_args *a, mg_error *err) {
    (void)err;
    const mg_tensor *t = a->node->out[0];
    if (a->out[0] != a->in[0]) memcpy(a->out[0], a->in[0], mg_tensor_bytes(t));
    return MG_OK;
}

static int reshape_grad(mg_graph *g, const mg_node *n, mg_tensor *const *dout, const bool *need, mg_tensor **din) {
    if (need[0]) din[0] = mg_reshape(g, dout[0], n->in[0]->ndim, n->in[0]->shape);
    return MG_OK;
}

/* Sharding (ops/op.h): a split dim survives when the dims before it hold as many
 * elements in both shapes and the target dim divides; else the input is gathered.
 * (The per-rank target shape is derived from the output's placement.) */
static int shard_reshape(const mg_node *n, const mg_shard_ctx *c, mg_shard_io *io, mg_error *err) {
    (void)err;
    const mg_tensor *x = n->in[0], *y = n->out[0];
    mg_sharding s = io->in[0];
    io->want[0] = io->out[0] = s;
    if (!mg_sh_is_split(s)) return MG_OK;
    int64_t before = mg_dims_prod(x->shape, 0, s.dim), acc = 1;
    for (int e = 0; e < y->ndim; e++) {
        if (acc == before && y->shape[e] % c->size == 0 && y->shape[e] > 1) {
            io->out[0] = mg_sh_split(e);
            return MG_OK;
        }
        acc *= y->shape[e];
        if (acc > before) break;
    }
    io->want[0] = io->out[0] = mg_sh_full();
    return MG_OK;
}

static bool reshape_view(const mg_node *n, int64_t *offset) {
    (void)n;
    *offset = 0;
    return true;
}

const mg_op_def mg_opdef_RESHAPE = {"reshape", 1, 1, MG_OPF_STORAGE, infer_reshape, reshape_grad, NULL, copy_cpu, NULL,
                                    .shard = shard_reshape, .view = reshape_view};

/* One dimension of the target may be -1: inferred from the element count. */
mg_tensor *mg_reshape(mg_graph *g, mg_tensor *x, int ndim, const int64_t *shape) {
    if (null_input(g, "reshape", x)) return NULL;
    if (ndim < 1 || ndim > MG_MAX_DIMS || !shape) {
        mg_graph_fail(g, MG_ERR_SHAPE, "reshape: target rank %d outside 1..%d", ndim, MG_MAX_DIMS);
        return NULL;
    }
    mg_attrs at = {.shape = {.ndim = ndim}};
    int infer_at = -1;
    int64_t known = 1;
    for (int i = 0; i < MG_MAX_DIMS; i++) at.shape.shape[i] = i < ndim ? shape[i] : 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] == -1 && infer_at < 0) infer_at = i;
        else known *= shape[i];
    }
    if (infer_at >= 0 && known > 0 && mg_numel(x) % known == 0) at.shape.shape[infer_at] = mg_numel(x) / known;
    mg_node *n = mg_node_new(g, MG_OP_RESHAPE, &at, 1, &x, NULL);
    return n ? n->out[0] : NULL;
}

/* ---- transpose --------------------------------------------------------------------
 * Output dim i is input dim perm[i]. The kernel first merges runs of output dims that
 * are also consecutive in the input (perm[i+1] == perm[i] + 1) into one dimension; if
 * the innermost merged dimension ends with the input's last dimension, whole rows are
 * memcpy'd, else the innermost loop is a strided gather. */
static bool perm_ok(const int *perm, int ndim) {
    bool seen[MG_MAX_DIMS] = {0};
    for (int i = 0; i < ndim; i++) {
        if (perm[i] < 0 || perm[i] >= ndim || seen[perm[i]]) return false;
        seen[perm[i]] = true;
    }
    return true;
}

static int infer_transpose(const mg_node *n, mg_tensor_desc *out, mg_error *err) {
    const mg_tensor *x = n->in[0];
    const int *perm = n->attrs.transpose.perm;
    if (!perm_ok(perm, x->ndim)) {
        char b[64];
        int64_t p[MG_MAX_DIMS];
        for (int i = 0; i < x->ndim; i++) p[i] = perm[i];
        return mg_shape_error(err, n, "perm %s is not a permutation of 0..%d", mg_dims_str(x->ndim, p, b, sizeof b),
                              x->ndim - 1);
    }
    out[0].dtype = x->dtype;
    out[0].ndim = x->ndim;
    for (int i = 0; i < MG_MAX_DIMS; i++) out[0].shape[i] = i < x->ndim ? x->shape[perm[i]] : 1;
    return 1;
}

#define GATHER_LOOP(T)                                                                                 \
    do {                                                                                               \
        const T *src_ = (const T *)src;                                                                \
        T *dst_ = (T *)dst;                                                                            \
        for (int64_t j = 0; j < inner; j++) dst_[j] = src_[j * istride];                               \
    } while (0)

static int transpose_cpu(const mg_kernel_args *a, mg_error *err) {
    (void)err;
    const mg_tensor *x = a->node->in[0];
    const int *perm = a->node->attrs.transpose.perm;
    int nd = x->ndim;
    size_t es = mg_tensor_esize(x);
    /* merged groups in output order: size and input stride (elements) */
    int64_t in_stride[MG_MAX_DIMS], gsize[MG_MAX_DIMS], gstride[MG_MAX_DIMS];
    int gend[MG_MAX_DIMS], ng = 0;
    in_stride[nd - 1] = 1;
    for (int i = nd - 2; i >= 0; i--) in_stride[i] = in_stride[i + 1] * x->shape[i + 1];
    for (int i = 0; i < nd; i++) {
        if (x->shape[perm[i]] == 1) continue; /* size-1 dims move nothing */
        if (ng > 0 && perm[i] == gend[ng - 1] + 1) {
            gsize[ng - 1] *= x->shape[perm[i]];
            gend[ng - 1] = perm[i];
            gstride[ng - 1] = in_stride[perm[i]];
        } else {
            gsize[ng] = x->shape[perm[i]];
            gend[ng] = perm[i];
            gstride[ng] = in_stride[perm[i]];
            ng++;
        }
    }
    const char *in = a->in[0];
    char *out = a->out[0];
    if (ng == 0) { /* a single element */
        memcpy(out, in, es);
        return MG_OK;
    }
    int64_t inner = gsize[ng - 1], istride = gstride[ng - 1];
    int64_t idx[MG_MAX_DIMS] = {0}, outer = 1, off = 0;
    for (int k = 0; k < ng - 1; k++) outer *= gsize[k];
    for (int64_t r = 0; r < outer; r++) {
        const char *src = in + (size_t)off * es;
        char *dst = out + (size_t)(r * inner) * es;
        if (istride == 1) memcpy(dst, src, (size_t)inner * es);
        else if (es == 4) GATHER_LOOP(uint32_t);
        else if (es == 2) GATHER_LOOP(uint16_t);
        else
            for (int64_t j = 0; j < inner; j++) memcpy(dst + (size_t)j * es, src + (size_t)(j * istride) * es, es);
        for (int k = ng - 2; k >= 0; k--) {
            idx[k]++;
            off += gstride[k];
            if (idx[k] < gsize[k]) break;
            off -= gstride[k] * gsize[k];
            idx[k] = 0;
        }
    }
    return MG_OK;
}

static int transpose_grad(mg_graph *g, const mg_node *n, mg_tensor *const *dout, const bool *need, mg_tensor **din) {
    if (!need[0]) return MG_OK;
    int inv[MG_MAX_DIMS] = {0};
    for (int i = 0; i < n->in[0]->ndim; i++) inv[n->attrs.transpose.perm[i]] = i;
    din[0] = mg_transpose(g, dout[0], inv);
    return MG_OK;
}

/* Sharding (ops/op.h) of split / concat / slice / pad / transpose: a split along any
 * other dim passes through; partial passes (all are linear); a split along the dim the
 * op works on is gathered first. */
static int op_dim_of(const mg_node *n) {
    switch (n->op) {
    case MG_OP_SPLIT: return n->attrs.split.dim;
    case MG_OP_CONCAT: return n->attrs.axis.dim;
    case MG_OP_SLICE:
    case MG_OP_PAD: return n->attrs.slice.dim;
    default: return -1;
    }
}

static int shard_structural(const mg_node *n, const mg_shard_ctx *c, mg_shard_io *io, mg_error *err) {
    (void)c, (void)err;
    int op_dim = op_dim_of(n);
    mg_sharding t = io->in[0];
    if (n->op == MG_OP_CONCAT) {
        bool all_partial = true;
        for (int i = 0; i < n->n_in; i++) all_partial &= mg_sh_is_partial(io->in[i]);
        t = all_partial ? mg_sh_partial() : mg_sh_full();
        for (int i = 0; i < n->n_in && !all_partial; i++)
            if (mg_sh_is_split(io->in[i]) && io->in[i].dim != op_dim) {
                t = io->in[i];
                break;
            }
    } else if (mg_sh_is_split(t) && t.dim == op_dim) {
        t = mg_sh_full();
    }
    for (int i = 0; i < n->n_in; i++) io->want[i] = t;
    mg_sharding o = t;
    if (n->op == MG_OP_TRANSPOSE && mg_sh_is_split(t))
        for (int i = 0; i < n->out[0]->ndim; i++)
            if (n->attrs.transpose.perm[i] == t.dim) o = mg_sh_split(i);
    for (int j = 0; j < n->n_out; j++) io->out[j] = o;
    return MG_OK;
}

const mg_op_def mg_opdef_TRANSPOSE = {"transpose", 1, 1, MG_OPF_STORAGE, infer_transpose, transpose_grad, NULL, transpose_cpu, NULL, .shard = shard_structural};

/* perm has x->ndim entries. */
mg_tensor *mg_transpose(mg_graph *g, mg_tensor *x, const int *perm) {
    if (null_input(g, "transpose", x)) return NULL;
    mg_attrs at;
    memset(&at, 0, sizeof at);
    for (int i = 0; i < MG_MAX_DIMS; i++) at.transpose.perm[i] = i < x->ndim ? (perm ? perm[i] : -1) : i;
    mg_node *n = mg_node_new(g, MG_OP_TRANSPOSE, &at, 1, &x, NULL);
    return n ? n->out[0] : NULL;
}

/* ---- split ---------------------------------------------------------------------- */
static int infer_split(const mg_node *n, mg_tensor_desc *out, mg_error *err) {
    const mg_tensor *x = n->in[0];
    const mg_attr_split *s = &n->attrs.split;
    if (s->dim < 0 || s->dim >= x->ndim) return mg_shape_error(err, n, "dimension %d out of range", s->dim);
    if (s->n < 1 || s->n > MG_MAX_SPLIT) return mg_shape_error(err, n, "%d parts outside 1..%d", s->n, MG_MAX_SPLIT);
    int64_t total = 0;
    for (int i = 0; i < s->n; i++) {
        if (s->sizes[i] < 1) return mg_shape_error(err, n, "part %d has size %lld", i, (long long)s->sizes[i]);
        total += s->sizes[i];
    }
    if (total != x->shape[s->dim])
        return mg_shape_error(err, n, "part sizes sum to %lld, dimension %d has %lld", (long long)total, s->dim,
                              (long long)x->shape[s->dim]);
    for (int i = 0; i < s->n; i++) {
        mg_desc_of(x, &out[i]);
        out[i].shape[s->dim] = s->sizes[i];
    }
    return s->n;
}

static int split_cpu(const mg_kernel_args *a, mg_error *err) {
    (void)err;
    const mg_tensor *x = a->node->in[0];
    const mg_attr_split *s = &a->node->attrs.split;
    size_t es = mg_tensor_esize(x);
    int64_t outer, inner;
    outer_inner(x->shape, x->ndim, s->dim, &outer, &inner);
    const char *src = a->in[0];
    for (int64_t o = 0; o < outer; o++)
        for (int i = 0; i < s->n; i++) {
            size_t blk = (size_t)(s->sizes[i] * inner) * es;
            memcpy((char *)a->out[i] + (size_t)o * blk, src, blk);
            src += blk;
        }
    return MG_OK;
}

static int split_grad(mg_graph *g, const mg_node *n, mg_tensor *const *dout, const bool *need, mg_tensor **din) {
    if (!need[0]) return MG_OK;
    mg_tensor *parts[MG_MAX_SPLIT];
    for (int i = 0; i < n->n_out; i++) {
        parts[i] = dout[i] ? dout[i] : zeros_like(g, n->out[i]);
        if (!parts[i]) return mg_graph_error(g)->code ? mg_graph_error(g)->code : MG_ERR_NOMEM;
    }
    din[0] = n->n_out == 1 ? parts[0] : mg_concat(g, n->n_out, parts, n->attrs.split.dim);
    return MG_OK;
}

const mg_op_def mg_opdef_SPLIT = {"split", 1, 1, MG_OPF_STORAGE, infer_split, split_grad, NULL, split_cpu, NULL, .shard = shard_structural};

/* sizes may be NULL: n equal parts (x.shape[dim] must divide by n). */
int mg_split(mg_graph *g, mg_tensor *x, int dim, int n, const int64_t *sizes, mg_tensor **outs) {
    for (int i = 0; outs && i < n && i < MG_MAX_SPLIT; i++) outs[i] = NULL;
    if (null_input(g, "split", x)) return mg_graph_error(g)->code;
    if (!outs || n < 1 || n > MG_MAX_SPLIT)
        return mg_graph_fail(g, MG_ERR_SHAPE, "split: %d parts outside 1..%d", n, MG_MAX_SPLIT);
    dim = norm_dim(dim, x->ndim);
    mg_attrs at;
    memset(&at, 0, sizeof at);
    at.split.dim = dim;
    at.split.n = n;
    for (int i = 0; i < n; i++) {
        if (sizes) at.split.sizes[i] = sizes[i];
        else if (dim >= 0 && dim < x->ndim && x->shape[dim] % n == 0) at.split.sizes[i] = x->shape[dim] / n;
        else at.split.sizes[i] = -1; /* rejected by the shape rule with the shapes named */
    }
    mg_node *nd = mg_node_new(g, MG_OP_SPLIT, &at, 1, &x, NULL);
    if (!nd) return mg_graph_error(g)->code ? mg_graph_error(g)->code : MG_ERR_SHAPE;
    for (int i = 0; i < n; i++) outs[i] = nd->out[i];
    return MG_OK;
}

/* ---- concat ---------------------------------------------------------------------- */
static int infer_concat(const mg_node *n, mg_tensor_desc *out, mg_error *err) {
    const mg_tensor *x0 = n->in[0];
    int d = n->attrs.axis.dim;
    if (d < 0 || d >= x0->ndim) return mg_shape_error(err, n, "dimension %d out of range", d);
    mg_desc_of(x0, &out[0]);
    for (int i = 1; i < n->n_in; i++) {
        const mg_tensor *x = n->in[i];
        if (x->dtype != x0->dtype) return mg_shape_error(err, n, "input %d has dtype %s, input 0 %s", i,
                                                         mg_dtype_name(x->dtype), mg_dtype_name(x0->dtype));
        if (x->ndim != x0->ndim) return mg_shape_error(err, n, "input %d has rank %d, input 0 rank %d", i, x->ndim, x0->ndim);
        for (int k = 0; k < x0->ndim; k++)
            if (k != d && x->shape[k] != x0->shape[k])
                return mg_shape_error(err, n, "input %d differs from input 0 in dimension %d (not the concat dimension %d)",
                                      i, k, d);
        out[0].shape[d] += x->shape[d];
    }
    return 1;
}

static int concat_cpu(const mg_kernel_args *a, mg_error *err) {
    (void)err;
    const mg_node *nd = a->node;
    const mg_tensor *y = nd->out[0];
    int d = nd->attrs.axis.dim;
    size_t es = mg_tensor_esize(y);
    int64_t outer, inner;
    outer_inner(y->shape, y->ndim, d, &outer, &inner);
    char *dst = a->out[0];
    for (int64_t o = 0; o < outer; o++)
        for (int i = 0; i < nd->n_in; i++) {
            int64_t n = nd->in[i]->shape[d] * inner;
            size_t blk = (size_t)n * es;
            mg_dtype st = mg_tensor_storage(nd->in[i]);
            /* parts stored otherwise than the whole (mixed precision) are converted */
            if (st != mg_tensor_storage(y))
                mg_convert(dst, mg_tensor_storage(y), (const char *)a->in[i] + (size_t)o * (size_t)n * mg_dtype_size(st),
                           st, n);
            else if (dst != a->in[i])
                memcpy(dst, (const char *)a->in[i] + (size_t)o * blk, blk); /* else placed */
            dst += blk;
        }
    return MG_OK;
}

/* Input i's place in the output when the concatenation is of whole contiguous blocks. */
static bool concat_part(const mg_node *n, int i, int64_t *offset) {
    const mg_tensor *y = n->out[0];
    int d = n->attrs.axis.dim;
    int64_t outer, inner, at = 0;
    outer_inner(y->shape, y->ndim, d, &outer, &inner);
    for (int k = 0; k < i; k++) at += n->in[k]->shape[d] * inner;
    *offset = at;
    return outer == 1;
}

/* One split when several inputs need a gradient (one pass over dy), else slices. */
static int concat_grad(mg_graph *g, const mg_node *n, mg_tensor *const *dout, const bool *need, mg_tensor **din) {
    int d = n->attrs.axis.dim, n_need = 0;
    for (int i = 0; i < n->n_in; i++) n_need += need[i];
    if (n->n_in == 1) {
        if (need[0]) din[0] = dout[0];
        return MG_OK;
    }
    if (n_need >= 2 && n->n_in <= MG_MAX_SPLIT) {
        int64_t sizes[MG_MAX_SPLIT];
        mg_tensor *parts[MG_MAX_SPLIT] = {0};
        for (int i = 0; i < n->n_in; i++) sizes[i] = n->in[i]->shape[d];
        int rc = mg_split(g, dout[0], d, n->n_in, sizes, parts);
        if (rc) return rc;
        for (int i = 0; i < n->n_in; i++)
            if (need[i]) din[i] = parts[i];
        return MG_OK;
    }
    int64_t start = 0;
    for (int i = 0; i < n->n_in; i++) {
        if (need[i]) din[i] = mg_slice(g, dout[0], d, start, n->in[i]->shape[d]);
        start += n->in[i]->shape[d];
    }
    return MG_OK;
}

const mg_op_def mg_opdef_CONCAT = {"concat", 1, -1, MG_OPF_STORAGE, infer_concat, concat_grad, NULL, concat_cpu, NULL,
                                   .shard = shard_structural, .part = concat_part};

mg_tensor *mg_concat(mg_graph *g, int n, mg_tensor *const *xs, int dim) {
    if (n < 1 || !xs) {
        mg_graph_fail(g, MG_ERR_INVALID, "concat: needs at least one input");
        return NULL;
    }
    if (null_input(g, "concat", xs[0])) return NULL;
    mg_attrs at;
    memset(&at, 0, sizeof at);
    at.axis.dim = norm_dim(dim, xs[0]->ndim);
    mg_node *nd = mg_node_new(g, MG_OP_CONCAT, &at, n, xs, NULL);
    return nd ? nd->out[0] : NULL;
}

/* ---- slice / pad ------------------------------------------------------------------ */
static int infer_slice(const mg_node *n, mg_tensor_desc *out, mg_error *err) {
    const mg_tensor *x = n->in[0];
    const mg_attr_slice *s = &n->attrs.slice;
    if (s->dim < 0 || s->dim >= x->ndim) return mg_shape_error(err, n, "dimension %d out of range", s->dim);
    if (s->start < 0 || s->len < 1 || s->start + s->len > x->shape[s->dim])
        return mg_shape_error(err, n, "range [%lld, %lld) outside dimension %d of size %lld", (long long)s->start,
                              (long long)(s->start + s->len), s->dim, (long long)x->shape[s->dim]);
    mg_desc_of(x, &out[0]);
    out[0].shape[s->dim] = s->len;
    return 1;
}

static int infer_pad(const mg_node *n, mg_tensor_desc *out, mg_error *err) {
    const mg_tensor *x = n->in[0];
    const mg_attr_slice *s = &n->attrs.slice;
    if (s->dim < 0 || s->dim >= x->ndim) return mg_shape_error(err, n, "dimension %d out of range", s->dim);
    if (s->start < 0 || s->start + x->shape[s->dim] > s->len)
        return mg_shape_error(err, n, "input of size %lld at %lld does not fit a padded size %lld",
                              (long long)x->shape[s->dim], (long long)s->start, (long long)s->len);
    mg_desc_of(x, &out[0]);
    out[0].shape[s->dim] = s->len;
    return 1;
}

static int slice_cpu(const mg_kernel_args *a, mg_error *err) {
    (void)err;
    const mg_tensor *x = a->node->in[0];
    const mg_attr_slice *s = &a->node->attrs.slice;
    size_t es = mg_tensor_esize(x);
    int64_t outer, inner;
    outer_inner(x->shape, x->ndim, s->dim, &outer, &inner);
    size_t src_blk = (size_t)(x->shape[s->dim] * inner) * es, dst_blk = (size_t)(s->len * inner) * es;
    const char *src = (const char *)a->in[0] + (size_t)(s->start * inner) * es;
    char *dst = a->out[0];
    if (dst == src) return MG_OK; /* a view (slice_view): the bytes are in place */
    for (int64_t o = 0; o < outer; o++) memcpy(dst + (size_t)o * dst_blk, src + (size_t)o * src_blk, dst_blk);
    return MG_OK;
}

/* One contiguous range of the input when nothing precedes the sliced dim. */
static bool slice_view(const mg_node *n, int64_t *offset) {
    const mg_tensor *x = n->in[0];
    const mg_attr_slice *s = &n->attrs.slice;
    int64_t outer, inner;
    outer_inner(x->shape, x->ndim, s->dim, &outer, &inner);
    *offset = s->start * inner;
    return outer == 1;
}

static int pad_cpu(const mg_kernel_args *a, mg_error *err) {
    (void)err;
    const mg_tensor *x = a->node->in[0];
    const mg_attr_slice *s = &a->node->attrs.slice;
    size_t es = mg_tensor_esize(x);
    int64_t outer, inner;
    outer_inner(x->shape, x->ndim, s->dim, &outer, &inner);
    size_t src_blk = (size_t)(x->shape[s->dim] * inner) * es, dst_blk = (size_t)(s->len * inner) * es;
    size_t head = (size_t)(s->start * inner) * es, tail = dst_blk - head - src_blk;
    const char *src = a->in[0];
    char *dst = a->out[0];
    for (int64_t o = 0; o < outer; o++) {
        char *row = dst + (size_t)o * dst_blk;
        if (head) memset(row, 0, head);
        memcpy(row + head, src + (size_t)o * src_blk, src_blk);
        if (tail) memset(row + head + src_blk, 0, tail);
    }
    return MG_OK;
}

static int slice_grad(mg_graph *g, const mg_node *n, mg_tensor *const *dout, const bool *need, mg_tensor **din) {
    const mg_attr_slice *s = &n->attrs.slice;
    if (need[0]) din[0] = mg_pad(g, dout[0], s->dim, s->start, n->in[0]->shape[s->dim]);
    return MG_OK;
}

static int pad_grad(mg_graph *g, const mg_node *n, mg_tensor *const *dout, const bool *need, mg_tensor **din) {
    const mg_attr_slice *s = &n->attrs.slice;
    if (need[0]) din[0] = mg_slice(g, dout[0], s->dim, s->start, n->in[0]->shape[s->dim]);
    return MG_OK;
}

const mg_op_def mg_opdef_SLICE = {"slice", 1, 1, MG_OPF_STORAGE, infer_slice, slice_grad, NULL, slice_cpu, NULL,
                                  .shard = shard_structural, .view = slice_view};
const mg_op_def mg_opdef_PAD = {"pad", 1, 1, MG_OPF_STORAGE, infer_pad, pad_grad, NULL, pad_cpu, NULL, .shard = shard_structural};

static mg_tensor *slice_like(mg_graph *g, mg_op op, mg_tensor *x, int dim, int64_t start, int64_t len) {
    if (null_input(g, mg_op_name(op), x)) return NULL;
    mg_attrs at;
    memset(&at, 0, sizeof at);
    at.slice.dim = norm_dim(dim, x->ndim);
    at.slice.start = start;
    at.slice.len = len;
    mg_node *n = mg_node_new(g, op, &at, 1, &x, NULL);
    return n ? n->out[0] : NULL;
}

mg_tensor *mg_slice(mg_graph *g, mg_tensor *x, int dim, int64_t start, int64_t len) {
    return slice_like(g, MG_OP_SLICE, x, dim, start, len);
}

mg_tensor *mg_pad(mg_graph *g, mg_tensor *x, int dim, int64_t start, int64_t len) {
    return slice_like(g, MG_OP_PAD, x, dim, start, len);
}

/* Reductions: sum and mean (over one dimension or all), and the sum of squares the
 * optimizer's global gradient norm is built from. Accumulation is in double, in a
 * fixed order, so results are deterministic and accurate for long reductions. */
#include <stdlib.h>
#include <string.h>

#include "ops/op.h"
#include "ops/shard.h"

static int axis_of(const mg_node *n) { return n->attrs.axis.dim; }

static int infer_reduce(const mg_node *n, mg_tensor_desc *out, mg_error *err) {
    const mg_tensor *x = n->in[0];
    int d = axis_of(n);
    if (x->dtype != MG_F32) return mg_shape_error(err, n, "input must be f32");
    out[0].dtype = MG_F32;
    if (d == MG_ALL_AXES) {
        if (n->attrs.axis.keepdim) {
            out[0].ndim = x->ndim;
            for (int i = 0; i < MG_MAX_DIMS; i++) out[0].shape[i] = 1;
        } else {
            out[0].ndim = 1;
            for (int i = 0; i < MG_MAX_DIMS; i++) out[0].shape[i] = 1;
        }
        return 1;
    }
    if (d < 0 || d >= x->ndim) return mg_shape_error(err, n, "dimension %d out of range", d);
    int k = 0;
    for (int i = 0; i < x->ndim; i++) {
        if (i == d) {
            if (n->attrs.axis.keepdim) out[0].shape[k++] = 1;
        } else {
            out[0].shape[k++] = x->shape[i];
        }
    }
    if (k == 0) out[0].shape[k++] = 1; /* reducing a 1-D tensor without keepdim gives [1] */
    for (int i = k; i < MG_MAX_DIMS; i++) out[0].shape[i] = 1;
    out[0].ndim = k;
    return 1;
}

/* Views x as [outer, len, inner] around the reduced dimension. */
static void reduce_dims(const mg_node *n, int64_t *outer, int64_t *len, int64_t *inner) {
    const mg_tensor *x = n->in[0];
    int d = axis_of(n);
    if (d == MG_ALL_AXES) {
        *outer = 1;
        *len = mg_numel(x);
        *inner = 1;
        return;
    }
    *outer = mg_dims_prod(x->shape, 0, d);
    *len = x->shape[d];
    *inner = mg_dims_prod(x->shape, d + 1, x->ndim);
}

static int reduce_cpu(const mg_kernel_args *a, double scale_by_len, mg_error *err) {
    int64_t outer, len, inner;
    reduce_dims(a->node, &outer, &len, &inner);
    const float *x = a->in[0];
    float *y = a->out[0];
    double *acc = calloc((size_t)inner, sizeof *acc);
    if (!acc) return mg_error_set(err, MG_ERR_NOMEM, "%s: out of memory", mg_op_name(a->node->op));
    double s = scale_by_len ? 1.0 / (double)len : 1.0;
    for (int64_t o = 0; o < outer; o++) {
        memset(acc, 0, (size_t)inner * sizeof *acc);
        for (int64_t l = 0; l < len; l++) {
            const float *row = x + (o * len + l) * inner;
            for (int64_t i = 0; i < inner; i++) acc[i] += row[i];
        }
        for (int64_t i = 0; i < inner; i++) y[o * inner + i] = (float)(acc[i] * s);
    }
    free(acc);
    return MG_OK;
}

static int sum_cpu(const mg_kernel_args *a, mg_error *err) { return reduce_cpu(a, 0, err); }
static int mean_cpu(const mg_kernel_args *a, mg_error *err) { return reduce_cpu(a, 1, err); }

/* d/dx of a reduction: dy broadcast back along the reduced dimension. */
static mg_tensor *broadcast_back(mg_graph *g, const mg_node *n, mg_tensor *dy) {
    const mg_tensor *x = n->in[0];
    int64_t kept[MG_MAX_DIMS];
    for (int i = 0; i < x->ndim; i++)
        kept[i] = (axis_of(n) == MG_ALL_AXES || axis_of(n) == i) ? 1 : x->shape[i];
    mg_tensor *r = mg_reshape(g, dy, x->ndim, kept);
    return mg_expand(g, r, x->ndim, x->shape);
}

static int sum_grad(mg_graph *g, const mg_node *n, mg_tensor *const *dout, const bool *need, mg_tensor **din) {
    if (need[0]) din[0] = broadcast_back(g, n, dout[0]);
    return MG_OK;
}

static int mean_grad(mg_graph *g, const mg_node *n, mg_tensor *const *dout, const bool *need, mg_tensor **din) {
    int64_t outer, len, inner;
    reduce_dims(n, &outer, &len, &inner);
    if (need[0]) din[0] = broadcast_back(g, n, mg_scale(g, dout[0], 1.0f / (float)len));
    return MG_OK;
}

static void cost_reduce(const mg_node *n, double *flops, double *bytes) {
    *flops = (double)mg_numel(n->in[0]);
    *bytes = 4.0 * ((double)mg_numel(n->in[0]) + (double)mg_numel(n->out[0]));
}

const mg_op_def mg_opdef_SUM = {"sum", 1, 1, 0, infer_reduce, sum_grad, cost_reduce, sum_cpu, NULL, .shard = mg_shard_rule_reduce};
const mg_op_def mg_opdef_MEAN = {"mean", 1, 1, 0, infer_reduce, mean_grad, cost_reduce, mean_cpu, NULL, .shard = mg_shard_rule_reduce};

static mg_tensor *reduce(mg_graph *g, mg_op op, mg_tensor *x, int dim, bool keepdim) {
    mg_attrs at = {.axis = {dim, keepdim}};
    mg_node *n = mg_node_new(g, op, &at, 1, &x, NULL);
    return n ? n->out[0] : NULL;
}
mg_tensor *mg_sum(mg_graph *g, mg_tensor *x, int dim, bool keepdim) { return reduce(g, MG_OP_SUM, x, dim, keepdim); }
mg_tensor *mg_mean(mg_graph *g, mg_tensor *x, int dim, bool keepdim) { return reduce(g, MG_OP_MEAN, x, dim, keepdim); }

/* ---- sumsq: sum of squares of any number of tensors, [1] -------------------------- */
/* (attrs.sumsq.zeros: the number of their elements equal to zero instead) */
static int infer_sumsq(const mg_node *n, mg_tensor_desc *out, mg_error *err) {
    for (int i = 0; i < n->n_in; i++)
        if (n->in[i]->dtype != MG_F32) return mg_shape_error(err, n, "inputs must be f32");
    out[0].dtype = MG_F32;
    out[0].ndim = 1;
    for (int i = 0; i < MG_MAX_DIMS; i++) out[0].shape[i] = 1;
    return 1;
}

static int sumsq_cpu(const mg_kernel_args *a, mg_error *err) {
    (void)err;
    /* eight independent double accumulators: the compiler vectorises this (a single
     * accumulator chains every add); the order is fixed, so results stay deterministic */
    double acc[8] = {0};
    if (a->node->attrs.sumsq.zeros) { /* counted in 64 bits; the f32 result is exact below 2^24 */
        int64_t z = 0;
        for (int k = 0; k < a->node->n_in; k++) {
            const float *x = a->in[k];
            int64_t n = mg_numel(a->node->in[k]);
            for (int64_t i = 0; i < n; i++) z += x[i] == 0.0f;
        }
        ((float *)a->out[0])[0] = (float)z;
        return MG_OK;
    }
    for (int k = 0; k < a->node->n_in; k++) {
        const float *x = a->in[k];
        int64_t n = mg_numel(a->node->in[k]), i = 0;
        for (; i + 8 <= n; i += 8)
            for (int l = 0; l < 8; l++) acc[l] += (double)x[i + l] * x[i + l];
        for (; i < n; i++) acc[i & 7] += (double)x[i] * x[i];
    }
    double s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
    ((float *)a->out[0])[0] = (float)s;
    return MG_OK;
}

static void cost_sumsq(const mg_node *n, double *flops, double *bytes) {
    double e = 0;
    for (int i = 0; i < n->n_in; i++) e += (double)mg_numel(n->in[i]);
    *flops = 2 * e;
    *bytes = 4 * e;
}

/* Sharding (ops/op.h): shares of split tensors are partial sums of the sum of squares;
 * a replicated tensor is counted by group index 0 only, so the sum over the group
 * counts it once. */
static int shard_sumsq(const mg_node *n, const mg_shard_ctx *c, mg_shard_io *io, mg_error *err) {
    (void)c, (void)err;
    for (int i = 0; i < n->n_in; i++) {
        io->want[i] = mg_sh_is_partial(io->in[i]) ? mg_sh_full() : io->in[i];
        if (mg_sh_is_full(io->want[i])) io->count_once |= 1u << i;
    }
    io->out[0] = mg_sh_partial();
    return MG_OK;
}

const mg_op_def mg_opdef_SUMSQ = {"sumsq", 1, -1, MG_OPF_NO_GRAD, infer_sumsq, NULL, cost_sumsq, sumsq_cpu, NULL, .shard = shard_sumsq};

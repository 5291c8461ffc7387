/* Softmax over the last dimension and its backward.
 *
 * softmax:     y = exp(x - max(x)) / sum(exp(x - max(x)))   (numerically stable)
 * softmax_bwd: dx = y * (dy - sum(dy * y))                   (inputs dy, y)
 * Row sums accumulate in double.
 */
#include <math.h>

#include "ops/op.h"
#include "ops/shard.h"

static int infer_softmax(const mg_node *n, mg_tensor_desc *out, mg_error *err) {
    if (n->in[0]->dtype != MG_F32) return mg_shape_error(err, n, "input must be f32");
    mg_desc_of(n->in[0], &out[0]);
    return 1;
}

static int infer_softmax_bwd(const mg_node *n, mg_tensor_desc *out, mg_error *err) {
    const mg_tensor *dy = n->in[0], *y = n->in[1];
    if (dy->dtype != MG_F32 || y->dtype != MG_F32) return mg_shape_error(err, n, "inputs must be f32");
    if (!mg_same_shape(dy, y)) return mg_shape_error(err, n, "dy and y must have the same shape");
    mg_desc_of(y, &out[0]);
    return 1;
}

static int softmax_cpu(const mg_kernel_args *a, mg_error *err) {
    (void)err;
    const mg_tensor *t = a->node->in[0];
    int64_t N = t->shape[t->ndim - 1], rows = mg_numel(t) / N;
    const float *x = a->in[0];
    float *y = a->out[0];
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * N;
        float *yr = y + r * N;
        float m = xr[0];
        for (int64_t j = 1; j < N; j++) m = xr[j] > m ? xr[j] : m;
        double s = 0;
        for (int64_t j = 0; j < N; j++) {
            yr[j] = expf(xr[j] - m);
            s += yr[j];
        }
        float inv = (float)(1.0 / s);
        for (int64_t j = 0; j < N; j++) yr[j] *= inv;
    }
    return MG_OK;
}

static int softmax_bwd_cpu(const mg_kernel_args *a, mg_error *err) {
    (void)err;
    const mg_tensor *t = a->node->in[1];
    int64_t N = t->shape[t->ndim - 1], rows = mg_numel(t) / N;
    const float *dy = a->in[0], *y = a->in[1];
    float *dx = a->out[0];
    for (int64_t r = 0; r < rows; r++) {
        const float *dyr = dy + r * N, *yr = y + r * N;
        float *dxr = dx + r * N;
        double s = 0;
        for (int64_t j = 0; j < N; j++) s += (double)dyr[j] * yr[j];
        float sf = (float)s;
        for (int64_t j = 0; j < N; j++) dxr[j] = yr[j] * (dyr[j] - sf);
    }
    return MG_OK;
}

static void cost_softmax(const mg_node *n, double *flops, double *bytes) {
    double e = (double)mg_numel(n->out[0]);
    *flops = 4.0 * e; /* max, exp, sum, scale (an exp counted as one) */
    *bytes = 4.0 * e * (double)(n->n_in + 1);
}

static mg_tensor *softmax_bwd(mg_graph *g, mg_tensor *dy, mg_tensor *y) {
    mg_tensor *in[2] = {dy, y};
    mg_node *n = mg_node_new(g, MG_OP_SOFTMAX_BWD, NULL, 2, in, NULL);
    return n ? n->out[0] : NULL;
}

static int softmax_grad(mg_graph *g, const mg_node *n, mg_tensor *const *dout, const bool *need, mg_tensor **din) {
    if (need[0]) din[0] = softmax_bwd(g, dout[0], n->out[0]);
    return MG_OK;
}

const mg_op_def mg_opdef_SOFTMAX = {"softmax", 1, 1, 0, infer_softmax, softmax_grad, cost_softmax, softmax_cpu, NULL, .shard = mg_shard_rule_rowwise};
const mg_op_def mg_opdef_SOFTMAX_BWD = {"softmax_bwd",     2, 2, MG_OPF_NO_GRAD, infer_softmax_bwd, NULL,
                                        cost_softmax, softmax_bwd_cpu, NULL, .shard = mg_shard_rule_rowwise};

mg_tensor *mg_softmax(mg_graph *g, mg_tensor *x) {
    mg_node *n = mg_node_new(g, MG_OP_SOFTMAX, NULL, 1, &x, NULL);
    return n ? n->out[0] : NULL;
}

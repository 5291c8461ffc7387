/* shift: a tensor moved along one dimension, the vacated places filled with a constant
 *   y[.., i, ..] = x[.., i + by, ..]   (0 <= i + by < n),   fill otherwise
 * for any dtype (the kernels copy element bytes; fill is written as the dtype's value).
 * Multi-token prediction rolls token ids and labels this way (Megatron's roll_tensor with
 * shifts=-1: the next token's id, 0 past the end; the next label, ignored past the end).
 * For f32 the gradient is the adjoint: dy shifted by -by, filling 0. */
#include <math.h>
#include <string.h>

#include "ops/op.h"
#include "ops/shard.h"

static int infer_shift(const mg_node *n, mg_tensor_desc *out, mg_error *err) {
    const mg_tensor *x = n->in[0];
    const mg_attr_shift *a = &n->attrs.shift;
    if (a->dim < 0 || a->dim >= x->ndim) return mg_shape_error(err, n, "dimension %d out of range", a->dim);
    if (!isfinite(a->fill)) return mg_shape_error(err, n, "fill must be finite");
    if (x->dtype == MG_I32 && (a->fill != floor(a->fill) || fabs(a->fill) > 2147483647.0))
        return mg_shape_error(err, n, "fill %g is not an i32 value", a->fill);
    mg_desc_of(x, &out[0]);
    return 1;
}

/* The fill value as the element bytes of dtype dt. */
static void fill_bytes(mg_dtype dt, double fill, unsigned char *b) {
    if (dt == MG_I32) {
        int32_t v = (int32_t)fill;
        memcpy(b, &v, 4);
    } else if (dt == MG_F32) {
        float v = (float)fill;
        memcpy(b, &v, 4);
    } else { /* bf16 / f16: fill 0 only (refused otherwise by the builder) */
        memset(b, 0, 2);
    }
}

static int shift_cpu(const mg_kernel_args *a, mg_error *err) {
    (void)err;
    const mg_tensor *x = a->node->in[0];
    const mg_attr_shift *s = &a->node->attrs.shift;
    size_t es = mg_dtype_size(x->dtype);
    int64_t n = x->shape[s->dim], inner = mg_dims_prod(x->shape, s->dim + 1, x->ndim);
    int64_t outer = mg_dims_prod(x->shape, 0, s->dim);
    unsigned char fb[8];
    fill_bytes(x->dtype, s->fill, fb);
    const unsigned char *src = a->in[0];
    unsigned char *dst = a->out[0];
    size_t row = (size_t)inner * es;
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < n; i++) {
            unsigned char *d = dst + ((size_t)(o * n + i)) * row;
            int64_t j = i + s->by;
            if (j >= 0 && j < n) {
                memmove(d, src + ((size_t)(o * n + j)) * row, row); /* (never in place: distinct buffers) */
            } else {
                for (int64_t k = 0; k < inner; k++) memcpy(d + (size_t)k * es, fb, es);
            }
        }
    return MG_OK;
}

static mg_tensor *shift_node(mg_graph *g, mg_tensor *x, int dim, int64_t by, double fill, const char *name) {
    if (!x) return NULL;
    if (dim < 0) dim += x->ndim; /* (out of range either way: the shape rule says so) */
    if ((x->dtype == MG_BF16 || x->dtype == MG_F16) && fill != 0) {
        mg_graph_fail(g, MG_ERR_UNSUPPORTED, "shift: a %s tensor fills with 0 only", mg_dtype_name(x->dtype));
        return NULL;
    }
    mg_attrs at;
    memset(&at, 0, sizeof at);
    at.shift = (mg_attr_shift){dim, by, fill};
    mg_node *nd = mg_node_new(g, MG_OP_SHIFT, &at, 1, &x, name);
    return nd ? nd->out[0] : NULL;
}

static int shift_grad(mg_graph *g, const mg_node *n, mg_tensor *const *dout, const bool *need, mg_tensor **din) {
    if (!need[0] || !dout[0] || n->in[0]->dtype != MG_F32) return MG_OK;
    din[0] = shift_node(g, dout[0], n->attrs.shift.dim, -n->attrs.shift.by, 0.0, "shift_grad");
    return din[0] ? MG_OK : mg_graph_error(g)->code;
}

/* Sharding: a split along another dimension stays; along the shifted one, the whole
 * dimension (elements cross the blocks); a partial sum stays one when the fill is 0. */
static int shard_shift(const mg_node *n, const mg_shard_ctx *c, mg_shard_io *io, mg_error *err) {
    (void)err;
    mg_sharding s = io->in[0];
    if (mg_sh_is_split(s) && s.dim == n->attrs.shift.dim) s = mg_sh_full();
    if (mg_sh_is_partial(s) && n->attrs.shift.fill != 0) s = mg_shard_resolve(c, n->in[0], false);
    io->want[0] = io->out[0] = s;
    return MG_OK;
}

const mg_op_def mg_opdef_SHIFT = {"shift", 1, 1, 0, infer_shift, shift_grad, NULL, shift_cpu, NULL, .shard = shard_shift};

mg_tensor *mg_shift(mg_graph *g, mg_tensor *x, int dim, int64_t by, double fill) {
    return shift_node(g, x, dim, by, fill, NULL);
}

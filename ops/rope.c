/* Rotary position embedding, rotate-half pairing (GPT-NeoX, Hugging Face LLaMA):
 * for i < hd/2 the pair (x_i, x_{i+hd/2}) of every head vector at sequence index s
 * is rotated by the angle pos[s] * theta^(-2i/hd):
 *   y_i        = x_i cos - x_{i+hd/2} sin
 *   y_{i+hd/2} = x_{i+hd/2} cos + x_i sin
 * x is [s, ...,  hd] (usually [s, b, nh, hd]), pos i32 [s] (every sample at the same
 * positions) or [s, b] (each sample its own: Megatron's --reset-position-ids restarts
 * them at every document), b being x's dimension 1. With attrs.rope.inverse the
 * rotation is by -angle: the gradient (rotations are orthogonal). Positions are
 * explicit, so a sequence or batch shard simply carries its own positions. */
#include <math.h>
#include <stdlib.h>

#include "ops/op.h"
#include "ops/shard.h"

static int infer_rope(const mg_node *n, mg_tensor_desc *out, mg_error *err) {
    const mg_tensor *x = n->in[0], *pos = n->in[1];
    if (x->dtype != MG_F32) return mg_shape_error(err, n, "x must be f32");
    if (x->ndim < 2) return mg_shape_error(err, n, "x must be [s, ..., hd]");
    int64_t hd = x->shape[x->ndim - 1];
    if (hd < 2 || hd % 2) return mg_shape_error(err, n, "head dim %lld must be even", (long long)hd);
    if (pos->dtype != MG_I32 || pos->ndim < 1 || pos->ndim > 2 || pos->shape[0] != x->shape[0] ||
        (pos->ndim == 2 && (x->ndim < 3 || pos->shape[1] != x->shape[1])))
        return mg_shape_error(err, n, "positions must be i32 [s] or [s, b] with x [s, b, ..., hd]");
    if (!(n->attrs.rope.theta > 0.0f)) return mg_shape_error(err, n, "theta must be > 0");
    mg_desc_of(x, &out[0]);
    return 1;
}

static int rope_cpu(const mg_kernel_args *a, mg_error *err) {
    const mg_node *n = a->node;
    const mg_tensor *xt = n->in[0];
    const float *x = a->in[0];
    const int32_t *pos = a->in[1];
    float *y = a->out[0];
    int64_t S = xt->shape[0], hd = xt->shape[xt->ndim - 1], h = hd / 2;
    if (mg_numel(xt) == 0) return MG_OK;
    int64_t rows = mg_numel(xt) / (S * hd); /* head vectors per sequence index */
    int64_t pb = n->in[1]->ndim == 2 ? n->in[1]->shape[1] : 1, per = rows / pb; /* per position */
    double theta = n->attrs.rope.theta, sgn = n->attrs.rope.inverse ? -1.0 : 1.0;
    double *inv_freq = malloc((size_t)h * sizeof *inv_freq);
    float *cs = malloc((size_t)hd * sizeof *cs);
    if (!inv_freq || !cs) {
        free(inv_freq);
        free(cs);
        return mg_error_set(err, MG_ERR_NOMEM, "rope: out of memory");
    }
    for (int64_t i = 0; i < h; i++) inv_freq[i] = pow(theta, -2.0 * (double)i / (double)hd);
    float *c = cs, *sn = cs + h;
    for (int64_t s = 0; s < S; s++) {
        const float *xs = x + s * rows * hd;
        float *ys = y + s * rows * hd;
        for (int64_t r = 0; r < rows; r++) {
            if (r % per == 0) { /* the angles of this position */
                double p = (double)pos[s * pb + r / per];
                for (int64_t i = 0; i < h; i++) {
                    double ang = p * inv_freq[i];
                    c[i] = (float)cos(ang);
                    sn[i] = (float)(sgn * sin(ang));
                }
            }
            const float *x0 = xs + r * hd, *x1 = x0 + h;
            float *y0 = ys + r * hd, *y1 = y0 + h;
            for (int64_t i = 0; i < h; i++) {
                float a0 = x0[i], a1 = x1[i]; /* read before writing: y may alias x */
                y0[i] = a0 * c[i] - a1 * sn[i];
                y1[i] = a1 * c[i] + a0 * sn[i];
            }
        }
    }
    free(inv_freq);
    free(cs);
    return MG_OK;
}

static void cost_rope(const mg_node *n, double *flops, double *bytes) {
    double e = (double)mg_numel(n->out[0]);
    *flops = 3.0 * e;
    *bytes = 8.0 * e + 4.0 * (double)mg_numel(n->in[1]);
}

static mg_tensor *rope_node(mg_graph *g, mg_tensor *x, mg_tensor *pos, float theta, bool inverse, const char *name) {
    mg_attrs at = {.rope = {theta, inverse}};
    mg_tensor *in[2] = {x, pos};
    mg_node *n = mg_node_new(g, MG_OP_ROPE, &at, 2, in, name);
    return n ? n->out[0] : NULL;
}

static int rope_grad(mg_graph *g, const mg_node *n, mg_tensor *const *dout, const bool *need, mg_tensor **din) {
    if (!need[0] || !dout[0]) return MG_OK; /* positions get no gradient */
    din[0] = rope_node(g, dout[0], n->in[1], n->attrs.rope.theta, !n->attrs.rope.inverse, "rope_grad");
    return din[0] ? MG_OK : mg_graph_error(g)->code;
}

/* Sharding (ops/op.h): x split anywhere but its last dim (heads under tp, tokens under
 * sp); the positions follow a token or (per-sample positions) batch split, else stay
 * whole. */
static int shard_rope(const mg_node *n, const mg_shard_ctx *c, mg_shard_io *io, mg_error *err) {
    (void)err;
    mg_sharding s = mg_shard_whole(c, n, io, 0, true);
    if (mg_sh_is_split(s) && s.dim == n->in[0]->ndim - 1) s = mg_sh_full();
    io->want[0] = s;
    bool follows = mg_sh_is_split(s) && s.dim < n->in[1]->ndim;
    io->want[1] = follows ? s : mg_sh_full();
    io->out[0] = s;
    return MG_OK;
}

const mg_op_def mg_opdef_ROPE = {"rope", 2, 2, 0, infer_rope, rope_grad, cost_rope, rope_cpu, NULL, .shard = shard_rope};

mg_tensor *mg_rope(mg_graph *g, mg_tensor *x, mg_tensor *pos, float theta) {
    return rope_node(g, x, pos, theta, false, NULL);
}

mg_tensor *mg_rope_partial(mg_graph *g, mg_tensor *x, mg_tensor *pos, float theta, int64_t rot_dim) {
    if (!x || !pos) return NULL;
    int last = x->ndim - 1;
    int64_t hd = x->shape[last];
    if (rot_dim == hd) return mg_rope(g, x, pos, theta);
    if (rot_dim < 2 || rot_dim > hd || rot_dim % 2) {
        mg_graph_fail(g, MG_ERR_SHAPE, "rope: rotary dimension %lld must be even and in [2, head dim %lld]",
                      (long long)rot_dim, (long long)hd);
        return NULL;
    }
    mg_tensor *parts[2] = {0};
    if (mg_split(g, x, last, 2, (int64_t[]){rot_dim, hd - rot_dim}, parts)) return NULL;
    parts[0] = mg_rope(g, parts[0], pos, theta);
    return parts[0] ? mg_concat(g, 2, parts, last) : NULL;
}

/* Rotary position embedding. Pair i of every head vector at sequence index s is rotated
 * by the angle pos[s] * f_i, f_i = theta^(-2i/hd) (hd: the rotated dimension):
 *   rotate-half pairing (GPT-NeoX, Hugging Face LLaMA): the pair (x_i, x_{i+hd/2})
 *   interleaved pairing (GPT-J, Megatron's --rotary-interleaved, DeepSeek's MLA): (x_2i, x_2i+1)
 *   y_a = m (x_a cos - x_b sin),  y_b = m (x_b cos + x_a sin)
 * m is attrs.rope.mscale (YaRN's attention factor; 0 means 1). The frequencies may be
 * rescaled as Megatron and Hugging Face do for long contexts (mg_rope_inv_freq): Llama
 * 3.1's (low frequencies divided by the factor, a smooth blend between) and YaRN's
 * (interpolated / extrapolated along a linear ramp of the pair index). An MLA layer's
 * de-interleaving (Megatron's mla_rotary_interleaved, Hugging Face's
 * apply_rotary_pos_emb_interleave) lays the same rotated pairs out in another order in
 * both q and k, so attention scores are the interleaved pairing's.
 * x is [s, ...,  hd] (usually [s, b, nh, hd]), pos i32 [s] (every sample at the same
 * positions) or [s, b] (each sample its own: Megatron's --reset-position-ids restarts
 * them at every document), b being x's dimension 1. With attrs.rope.inverse the
 * rotation is by -angle: the gradient (m R(a) is adjoint to m R(-a)). Positions are
 * explicit, so a sequence or batch shard simply carries its own positions. */
#include <math.h>
#include <stdlib.h>

#include "ops/op.h"
#include "ops/shard.h"

#define MG_PI 3.14159265358979323846

double mg_yarn_mscale(double factor, double m) { return factor <= 1.0 ? 1.0 : 0.1 * m * log(factor) + 1.0; }

/* YaRN's pair index where `rotations` full turns fit in the original context
 * (Megatron's _yarn_find_correction_dim, Hugging Face's find_correction_dim). */
static double yarn_dim(double rotations, double dim, double base, double max_pos) {
    return dim * log(max_pos / (rotations * 2.0 * MG_PI)) / (2.0 * log(base));
}

double mg_rope_inv_freq(const mg_attr_rope *o, int64_t dim, int64_t i) {
    double base = o->theta, f = pow(base, -2.0 * (double)i / (double)dim);
    if (o->scaling == MG_ROPE_LLAMA3) { /* Megatron's RotaryEmbedding._apply_scaling */
        double lo = o->original_max_pos / (double)o->low_freq_factor, hi = o->original_max_pos / (double)o->high_freq_factor;
        double wavelen = 2.0 * MG_PI / f;
        if (wavelen > lo) return f / o->factor;
        if (wavelen < hi) return f;
        double smooth = (o->original_max_pos / wavelen - o->low_freq_factor) / (o->high_freq_factor - o->low_freq_factor);
        return (1.0 - smooth) * f / o->factor + smooth * f;
    }
    if (o->scaling == MG_ROPE_YARN) { /* YarnRotaryEmbedding.get_emb */
        double low = yarn_dim(o->beta_fast, (double)dim, base, o->original_max_pos);
        double high = yarn_dim(o->beta_slow, (double)dim, base, o->original_max_pos);
        if (!o->no_round) low = floor(low), high = ceil(high);
        if (low < 0) low = 0;
        if (high > (double)(dim - 1)) high = (double)(dim - 1);
        if (low == high) high += 0.001; /* (Megatron's guard against a zero-width ramp) */
        double ramp = ((double)i - low) / (high - low);
        ramp = ramp < 0 ? 0 : ramp > 1 ? 1 : ramp;
        double extra = 1.0 - ramp; /* weight of the unscaled frequency */
        return f / o->factor * (1.0 - extra) + f * extra;
    }
    return f;
}

static int check_scaling(const mg_node *n, mg_error *err) {
    const mg_attr_rope *o = &n->attrs.rope;
    if (!(o->theta > 0.0f)) return mg_shape_error(err, n, "theta must be > 0");
    if (!(o->mscale >= 0.0f) || !isfinite(o->mscale)) return mg_shape_error(err, n, "mscale must be >= 0");
    switch (o->scaling) {
    case MG_ROPE_DEFAULT: return MG_OK;
    case MG_ROPE_LLAMA3:
        if (!(o->factor > 0) || o->original_max_pos < 1 || !(o->low_freq_factor > 0) ||
            !(o->high_freq_factor > o->low_freq_factor))
            return mg_shape_error(err, n, "llama3 scaling needs factor > 0, original context >= 1 and "
                                          "0 < low_freq_factor < high_freq_factor");
        return MG_OK;
    case MG_ROPE_YARN:
        if (!(o->factor > 0) || o->original_max_pos < 1 || !(o->beta_fast > 0) || !(o->beta_slow > 0) ||
            !(o->theta > 1.0f))
            return mg_shape_error(err, n, "yarn scaling needs factor > 0, original context >= 1, betas > 0, theta > 1");
        return MG_OK;
    }
    return mg_shape_error(err, n, "unknown scaling %d", (int)o->scaling);
}

static int infer_rope(const mg_node *n, mg_tensor_desc *out, mg_error *err) {
    const mg_tensor *x = n->in[0], *pos = n->in[1];
    if (x->dtype != MG_F32) return mg_shape_error(err, n, "x must be f32");
    if (x->ndim < 2) return mg_shape_error(err, n, "x must be [s, ..., hd]");
    int64_t hd = x->shape[x->ndim - 1];
    if (hd < 2 || hd % 2) return mg_shape_error(err, n, "head dim %lld must be even", (long long)hd);
    if (pos->dtype != MG_I32 || pos->ndim < 1 || pos->ndim > 2 || pos->shape[0] != x->shape[0] ||
        (pos->ndim == 2 && (x->ndim < 3 || pos->shape[1] != x->shape[1])))
        return mg_shape_error(err, n, "positions must be i32 [s] or [s, b] with x [s, b, ..., hd]");
    int rc = check_scaling(n, err);
    if (rc) return rc;
    mg_desc_of(x, &out[0]);
    return 1;
}

static int rope_cpu(const mg_kernel_args *a, mg_error *err) {
    const mg_node *n = a->node;
    const mg_attr_rope *o = &n->attrs.rope;
    const mg_tensor *xt = n->in[0];
    const float *x = a->in[0];
    const int32_t *pos = a->in[1];
    float *y = a->out[0];
    int64_t S = xt->shape[0], hd = xt->shape[xt->ndim - 1], h = hd / 2;
    if (mg_numel(xt) == 0) return MG_OK;
    int64_t rows = mg_numel(xt) / (S * hd); /* head vectors per sequence index */
    int64_t pb = n->in[1]->ndim == 2 ? n->in[1]->shape[1] : 1, per = rows / pb; /* per position */
    double sgn = o->inverse ? -1.0 : 1.0, m = o->mscale > 0 ? o->mscale : 1.0;
    /* pair i is (x_a, x_b): a = i, b = i + h (rotate-half) or a = 2i, b = 2i + 1 */
    int64_t step = o->interleaved ? 2 : 1, off = o->interleaved ? 1 : h;
    double *inv_freq = malloc((size_t)h * sizeof *inv_freq);
    float *cs = malloc((size_t)hd * sizeof *cs);
    if (!inv_freq || !cs) {
        free(inv_freq);
        free(cs);
        return mg_error_set(err, MG_ERR_NOMEM, "rope: out of memory");
    }
    for (int64_t i = 0; i < h; i++) inv_freq[i] = mg_rope_inv_freq(o, hd, i);
    float *c = cs, *sn = cs + h;
    for (int64_t s = 0; s < S; s++) {
        const float *xs = x + s * rows * hd;
        float *ys = y + s * rows * hd;
        for (int64_t r = 0; r < rows; r++) {
            if (r % per == 0) { /* the angles of this position */
                double p = (double)pos[s * pb + r / per];
                for (int64_t i = 0; i < h; i++) {
                    double ang = p * inv_freq[i];
                    c[i] = (float)(m * cos(ang));
                    sn[i] = (float)(m * sgn * sin(ang));
                }
            }
            const float *x0 = xs + r * hd;
            float *y0 = ys + r * hd;
            for (int64_t i = 0; i < h; i++) {
                int64_t ia = i * step, ib = ia + off;
                float a0 = x0[ia], a1 = x0[ib]; /* read before writing: y may alias x */
                y0[ia] = a0 * c[i] - a1 * sn[i];
                y0[ib] = a1 * c[i] + a0 * sn[i];
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

static mg_tensor *rope_node(mg_graph *g, mg_tensor *x, mg_tensor *pos, const mg_attr_rope *o, bool inverse,
                            const char *name) {
    mg_attrs at = {.rope = *o};
    at.rope.inverse = inverse;
    mg_tensor *in[2] = {x, pos};
    mg_node *n = mg_node_new(g, MG_OP_ROPE, &at, 2, in, name);
    return n ? n->out[0] : NULL;
}

static int rope_grad(mg_graph *g, const mg_node *n, mg_tensor *const *dout, const bool *need, mg_tensor **din) {
    if (!need[0] || !dout[0]) return MG_OK; /* positions get no gradient */
    din[0] = rope_node(g, dout[0], n->in[1], &n->attrs.rope, !n->attrs.rope.inverse, "rope_grad");
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

mg_tensor *mg_rope_ex(mg_graph *g, mg_tensor *x, mg_tensor *pos, const mg_attr_rope *o) {
    return rope_node(g, x, pos, o, false, NULL);
}

mg_tensor *mg_rope(mg_graph *g, mg_tensor *x, mg_tensor *pos, float theta) {
    mg_attr_rope o = {.theta = theta};
    return mg_rope_ex(g, x, pos, &o);
}

mg_tensor *mg_rope_partial_ex(mg_graph *g, mg_tensor *x, mg_tensor *pos, const mg_attr_rope *o, int64_t rot_dim) {
    if (!x || !pos) return NULL;
    int last = x->ndim - 1;
    int64_t hd = x->shape[last];
    if (rot_dim == hd) return mg_rope_ex(g, x, pos, o);
    if (rot_dim < 2 || rot_dim > hd || rot_dim % 2) {
        mg_graph_fail(g, MG_ERR_SHAPE, "rope: rotary dimension %lld must be even and in [2, head dim %lld]",
                      (long long)rot_dim, (long long)hd);
        return NULL;
    }
    mg_tensor *parts[2] = {0};
    if (mg_split(g, x, last, 2, (int64_t[]){rot_dim, hd - rot_dim}, parts)) return NULL;
    parts[0] = mg_rope_ex(g, parts[0], pos, o);
    return parts[0] ? mg_concat(g, 2, parts, last) : NULL;
}

mg_tensor *mg_rope_partial(mg_graph *g, mg_tensor *x, mg_tensor *pos, float theta, int64_t rot_dim) {
    mg_attr_rope o = {.theta = theta};
    return mg_rope_partial_ex(g, x, pos, &o, rot_dim);
}

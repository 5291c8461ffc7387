/* Fused self-attention with grouped-query heads, causal mask and attention dropout.
 *
 *   attention(q [s, b, nh, hd], k [s, b, ng, hd], v [s, b, ng, hv] [, doc_start [s, b]])
 *                                                     -> y [s, b, nh, hv], lse [b, nh, s]
 * (hv, the value head size, may differ from the query/key head size hd: multi-latent
 * attention's v_head_dim is not its qk_head_dim + qk_pos_emb_head_dim)
 *   attention_bwd(dy, q, k, v, y, lse [, doc_start]) -> dq, dk, dv
 *
 * Per (batch b, head h), with kv group g = h / (nh / ng):
 *   S = scale * Q Kᵀ, masked (causal: key position > query position; with doc_start
 *   (i32, causal only), also key position < doc_start[query, b]: each token sees its
 *   own document only, Megatron's --reset-attention-mask; with a window W (attribute,
 *   causal only), also key position <= query position - W: a sliding window, Megatron's
 *   --window-size W-1,0), P = softmax(S),
 *   Pd = P * keep / (1 - p) (training and p > 0), Y = Pd V, lse_i = log Σ_j exp(S_ij).
 * The rows of one head are strided in the [s, b, nh, hd] layout; sgemm reads and
 * writes them in place through its leading dimension (B·nh·hd for q, y; B·ng·hd for
 * k, v), so there are no copies. Only lse is saved for the backward, which
 * recomputes P = exp(S - lse) (flash-attention style) and regenerates the dropout
 * mask from the counter RNG:
 *   dV += Pdᵀ dY, dPd = dY Vᵀ, dS = P ⊙ (dPd ⊙ keep/(1-p) - D), D_i = Σ_d dY_id Y_id,
 *   dQ = scale dS K, dK += scale dSᵀ Q     (GQA: dK, dV summed over a group's heads,
 *                                           in head order: deterministic)
 *
 * Positions and the dropout mask use logical coordinates: query i is at
 * i + q.logical.offset[0], key j at j + k.logical.offset[0]; the mask element of
 * (b, h, i, j) has index ((b_g·NH + h_g)·Sq_g + i_g)·Sk_g + j_g in the logical
 * [B, NH, Sq, Sk] probability tensor (globals: local + logical offset of q, NH and
 * Sq the logical sizes of q, Sk of k). A head-, batch- or sequence-split run thus
 * reproduces the serial masks exactly; doc_start holds logical key positions too.
 * A query row with no visible key (a sequence block's, or one whose doc_start lies
 * past it) gives y = 0 and lse = -inf. Each block of query rows multiplies only the key columns some row
 * of it sees, from its rows' first visible key (document start or window) to its last
 * row's causal end: short documents and narrow windows cost little.
 */
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mgraph/rng.h"
#include "ops/fastmath.h"
#include "ops/gemm.h"
#include "ops/op.h"
#include "ops/simd.h"
#include "ops/shard.h"

/* ---- shape rules ---------------------------------------------------------------- */
static int check_qkv(const mg_node *n, const mg_tensor *q, const mg_tensor *k, const mg_tensor *v, mg_error *err) {
    if (q->dtype != MG_F32 || k->dtype != MG_F32 || v->dtype != MG_F32)
        return mg_shape_error(err, n, "q, k, v must be f32");
    if (q->ndim != 4 || k->ndim != 4 || v->ndim != 4)
        return mg_shape_error(err, n, "q, k, v must be [s, b, heads, head_dim]");
    if (k->shape[0] != v->shape[0] || k->shape[1] != v->shape[1] || k->shape[2] != v->shape[2])
        return mg_shape_error(err, n, "k and v must have the same sequence, batch and group sizes");
    if (q->shape[1] != k->shape[1]) return mg_shape_error(err, n, "q and k differ in batch size");
    if (q->shape[3] != k->shape[3]) return mg_shape_error(err, n, "q and k differ in head dim");
    if (k->shape[2] < 1 || q->shape[2] % k->shape[2])
        return mg_shape_error(err, n, "query heads (%lld) must be a multiple of kv groups (%lld)",
                              (long long)q->shape[2], (long long)k->shape[2]);
    for (int d = 0; d < 4; d++)
        if (q->shape[d] > INT_MAX / 4 || k->shape[d] > INT_MAX / 4 || q->shape[d] < 1 || k->shape[d] < 1)
            return mg_shape_error(err, n, "dimensions must be in 1..%d", INT_MAX / 4);
    if (v->shape[3] < 1 || v->shape[3] > INT_MAX / 4) return mg_shape_error(err, n, "dimensions must be in 1..%d", INT_MAX / 4);
    if (q->shape[1] * q->shape[2] * (q->shape[3] > v->shape[3] ? q->shape[3] : v->shape[3]) > INT_MAX ||
        q->shape[0] * k->shape[0] > INT_MAX)
        return mg_shape_error(err, n, "too large for 32-bit BLAS indices");
    const mg_attr_attention *at = &n->attrs.attention;
    if (!(at->dropout_p >= 0.0f && at->dropout_p < 1.0f))
        return mg_shape_error(err, n, "dropout_p = %g outside [0, 1)", (double)at->dropout_p);
    if (!isfinite(at->scale)) return mg_shape_error(err, n, "scale must be finite");
    return MG_OK;
}

/* The optional doc_start [s, b] (i32) of queries q. */
static int check_doc_start(const mg_node *n, const mg_tensor *q, const mg_tensor *ds, mg_error *err) {
    if (!ds) return MG_OK;
    if (ds->dtype != MG_I32 || ds->ndim != 2 || ds->shape[0] != q->shape[0] || ds->shape[1] != q->shape[1])
        return mg_shape_error(err, n, "doc_start must be i32 [s, b] of the queries");
    if (!n->attrs.attention.causal) return mg_shape_error(err, n, "doc_start needs causal attention");
    return MG_OK;
}

static int check_window(const mg_node *n, mg_error *err) {
    const mg_attr_attention *at = &n->attrs.attention;
    if (at->window < 0) return mg_shape_error(err, n, "window = %lld must be >= 0", (long long)at->window);
    if (at->window > 0 && !at->causal) return mg_shape_error(err, n, "a window needs causal attention");
    return MG_OK;
}

static void lse_desc(const mg_tensor *q, mg_tensor_desc *d) {
    d->dtype = MG_F32;
    d->ndim = 3;
    for (int i = 0; i < MG_MAX_DIMS; i++) d->shape[i] = 1;
    d->shape[0] = q->shape[1];
    d->shape[1] = q->shape[2];
    d->shape[2] = q->shape[0];
}

static int infer_attention(const mg_node *n, mg_tensor_desc *out, mg_error *err) {
    int rc = check_qkv(n, n->in[0], n->in[1], n->in[2], err);
    if (!rc) rc = check_doc_start(n, n->in[0], n->n_in > 3 ? n->in[3] : NULL, err);
    if (!rc) rc = check_window(n, err);
    if (rc) return rc;
    mg_desc_of(n->in[0], &out[0]);
    out[0].shape[3] = n->in[2]->shape[3]; /* the values' head size */
    lse_desc(n->in[0], &out[1]);
    return 2;
}

static int infer_attention_bwd(const mg_node *n, mg_tensor_desc *out, mg_error *err) {
    const mg_tensor *dy = n->in[0], *q = n->in[1], *k = n->in[2], *v = n->in[3], *y = n->in[4], *lse = n->in[5];
    int rc = check_qkv(n, q, k, v, err);
    if (!rc) rc = check_doc_start(n, q, n->n_in > 6 ? n->in[6] : NULL, err);
    if (!rc) rc = check_window(n, err);
    if (rc) return rc;
    if (dy->dtype != MG_F32 || y->dtype != MG_F32 || !mg_same_shape(dy, y) || y->ndim != 4 ||
        y->shape[0] != q->shape[0] || y->shape[1] != q->shape[1] || y->shape[2] != q->shape[2] ||
        y->shape[3] != v->shape[3])
        return mg_shape_error(err, n, "dy and y must be f32 [s, b, nh, hv] of q and v");
    mg_tensor_desc l;
    lse_desc(q, &l);
    if (lse->dtype != MG_F32 || lse->ndim != 3 || lse->shape[0] != l.shape[0] || lse->shape[1] != l.shape[1] ||
        lse->shape[2] != l.shape[2])
        return mg_shape_error(err, n, "lse must be f32 [b, nh, s]");
    mg_desc_of(q, &out[0]);
    mg_desc_of(k, &out[1]);
    mg_desc_of(v, &out[2]);
    return 3;
}

/* Causal attention runs in blocks of this many query rows, each against only the
 * keys its last row sees: about half the work of the full square at long S. */
#define ATTN_CAUSAL_BLOCK 64

/* ---- kernel context ------------------------------------------------------------------ */
typedef struct {
    int B, NH, NG, Sq, Sk, hd, hv, rep; /* local sizes; hv: the values' head size; rep = NH / NG */
    int ldq, ldk, ldy, ldv;          /* row strides of q, k, y/dy and v */
    int block;                       /* query rows per block (causal: skip invisible keys) */
    int64_t q_off_s, q_off_b, q_off_h, k_off_s;
    uint64_t NH_g, Sq_g, Sk_g;       /* logical sizes for mask indices */
    int64_t iteration, sample0;      /* mask streams: global sample of local batch row 0 */
    float scale;
    bool causal, drop;
    float p, keep_scale;
    uint64_t seed, key;
    const int32_t *ds;               /* doc_start [Sq, B] (logical key positions), or NULL */
    int64_t window;                  /* sliding window (keys per query), 0: none */
} attn_ctx;

static void ctx_init(attn_ctx *c, const mg_node *n, const mg_tensor *q, const mg_tensor *k, const mg_tensor *v,
                     const int32_t *ds, const mg_exec_info *info) {
    const mg_attr_attention *at = &n->attrs.attention;
    memset(c, 0, sizeof *c);
    c->Sq = (int)q->shape[0];
    c->B = (int)q->shape[1];
    c->NH = (int)q->shape[2];
    c->hd = (int)q->shape[3];
    c->Sk = (int)k->shape[0];
    c->NG = (int)k->shape[2];
    c->rep = c->NH / c->NG;
    c->hv = (int)v->shape[3];
    c->ldq = c->B * c->NH * c->hd;
    c->ldk = c->B * c->NG * c->hd;
    c->ldy = c->B * c->NH * c->hv;
    c->ldv = c->B * c->NG * c->hv;
    c->NH_g = (uint64_t)c->NH;
    c->Sq_g = (uint64_t)c->Sq;
    c->Sk_g = (uint64_t)c->Sk;
    if (q->logical.ndim == 4) {
        c->q_off_s = q->logical.offset[0];
        c->q_off_b = q->logical.offset[1];
        c->q_off_h = q->logical.offset[2];
        c->NH_g = (uint64_t)q->logical.shape[2];
        c->Sq_g = (uint64_t)q->logical.shape[0];
    }
    if (k->logical.ndim == 4) {
        c->k_off_s = k->logical.offset[0];
        c->Sk_g = (uint64_t)k->logical.shape[0];
    }
    c->scale = at->scale;
    c->causal = at->causal;
    c->block = at->causal && c->Sq > ATTN_CAUSAL_BLOCK ? ATTN_CAUSAL_BLOCK : c->Sq;
    c->p = at->dropout_p;
    c->drop = info->training && at->dropout_p > 0.0f;
    c->keep_scale = 1.0f / (1.0f - at->dropout_p);
    c->seed = info->seed;
    c->key = at->rng_key;
    /* masks per sample (mg_rng_dropout_site): q's logical batch is its dim 1 */
    int64_t B_g = q->logical.ndim == 4 ? q->logical.shape[1] : c->B;
    c->iteration = info->iteration;
    c->sample0 = mg_exec_first_sample(info, B_g) + c->q_off_b;
    c->ds = ds;
    c->window = at->window;
}

/* Number of keys query row i sees (a prefix of the local keys). */
static inline int n_visible(const attn_ctx *c, int i) {
    if (!c->causal) return c->Sk;
    int64_t last = (int64_t)i + c->q_off_s - c->k_off_s; /* last visible local key */
    if (last < 0) return 0;
    return last + 1 < c->Sk ? (int)(last + 1) : c->Sk;
}

/* First local key query row i of sample b sees (its document's start, its window's). */
static inline int first_visible(const attn_ctx *c, int b, int i) {
    int64_t f = c->ds ? (int64_t)c->ds[(size_t)i * (size_t)c->B + (size_t)b] : 0;
    int64_t w = (int64_t)i + c->q_off_s - c->window + 1; /* logical position of the window's first key */
    if (c->window > 0 && w > f) f = w;
    f -= c->k_off_s;
    return f <= 0 ? 0 : f < c->Sk ? (int)f : c->Sk;
}

/* The key columns [*lo, *hi) some row of the block i0 .. i0 + nr - 1 sees. */
static inline void block_keys(const attn_ctx *c, int b, int i0, int nr, int *lo, int *hi) {
    *hi = n_visible(c, i0 + nr - 1);
    *lo = first_visible(c, b, i0);
    for (int i = 1; i < nr && c->ds; i++) { /* (a window alone: the first row's is the least) */
        int f = first_visible(c, b, i0 + i);
        *lo = f < *lo ? f : *lo;
    }
}

/* Mask element (b, h, i, 0): the stream of sample b and the index of (h, i, 0) in it. */
static inline uint64_t mask_stream(const attn_ctx *c, int b) { return mg_rng_dropout_stream(c->iteration, c->sample0 + b); }
static inline uint64_t mask_base(const attn_ctx *c, int h, int i) {
    uint64_t hg = (uint64_t)(h + c->q_off_h), ig = (uint64_t)(i + c->q_off_s);
    return (hg * c->Sq_g + ig) * c->Sk_g + (uint64_t)c->k_off_s;
}

/* ---- softmax rows (vectorised: MG_SIMD kernels inline them) ----------------------------- */
/* e^(x - m) for x <= m through mg_expf, which clamps below -87 to e^-87 (1.6e-38) where
 * expf gives less: against the row's largest term, e^0 = 1, both vanish in float. (A
 * select to 0 there would keep GCC from vectorising the loop.) */
static inline float exp_shift(float x, float m) { return mg_expf(x - m); }
/* row[j] = e^(row[j] - m) for j < n; returns their sum: eight double partial sums met in a
 * fixed order, so the result does not depend on the vector width. */
static inline double exp_row(float *row, int n, float m) {
    for (int j = 0; j < n; j++) row[j] = exp_shift(row[j], m);
    return mg_sum_f(row, n);
}

/* ---- forward --------------------------------------------------------------------------- */
MG_SIMD static int attention_cpu(const mg_kernel_args *a, mg_error *err) {
    const mg_node *n = a->node;
    attn_ctx c;
    ctx_init(&c, n, n->in[0], n->in[1], n->in[2], n->n_in > 3 ? a->in[3] : NULL, a->info);
    const float *q = a->in[0], *k = a->in[1], *v = a->in[2];
    float *y = a->out[0], *lse = a->out[1];
    float *S = malloc((size_t)c.Sq * (size_t)c.Sk * sizeof *S);
    if (!S) return mg_error_set(err, MG_ERR_NOMEM, "attention: out of memory");
    int rc = MG_OK;
    for (int b = 0; b < c.B; b++) {
        for (int h = 0; h < c.NH; h++) {
            int g = h / c.rep;
            const float *Qh = q + ((size_t)b * c.NH + h) * c.hd;
            const float *K = k + ((size_t)b * c.NG + g) * c.hd, *V = v + ((size_t)b * c.NG + g) * c.hv;
            float *Yh = y + ((size_t)b * c.NH + h) * c.hv, *L = lse + ((size_t)b * c.NH + h) * c.Sq;
            for (int i0 = 0; i0 < c.Sq; i0 += c.block) {
                int nr = c.Sq - i0 < c.block ? c.Sq - i0 : c.block, k0, nk;
                block_keys(&c, b, i0, nr, &k0, &nk);
                const float *Q = Qh + (size_t)i0 * c.ldq;
                float *Y = Yh + (size_t)i0 * c.ldy;
                if (nk <= k0) { /* no visible key in the block */
                    for (int i = 0; i < nr; i++) {
                        memset(Y + (size_t)i * c.ldy, 0, (size_t)c.hv * sizeof *Y);
                        L[i0 + i] = -INFINITY;
                    }
                    continue;
                }
                /* S[:, k0:nk] = scale Q K[k0:nk]ᵀ */
                const float *Kb = K + (size_t)k0 * c.ldk, *Vb = V + (size_t)k0 * c.ldv;
                if ((rc = mg_gemm(false, true, nr, nk - k0, c.hd, c.scale, Q, c.ldq, Kb, c.ldk, 0.0f, S + k0, c.Sk,
                                  err)))
                    goto done;
                for (int i = 0; i < nr; i++) {
                    float *row = S + (size_t)i * c.Sk;
                    int lo = first_visible(&c, b, i0 + i), nv = n_visible(&c, i0 + i);
                    if (nv <= lo) {
                        memset(row + k0, 0, (size_t)(nk - k0) * sizeof *row);
                        L[i0 + i] = -INFINITY;
                        continue;
                    }
                    float m = mg_row_max(row + lo, nv - lo);
                    double sum = exp_row(row + lo, nv - lo, m);
                    L[i0 + i] = m + (float)log(sum);
                    float inv = (float)(1.0 / sum);
                    if (c.drop) {
                        uint64_t base = mask_base(&c, h, i0 + i);
                        float sc = inv * c.keep_scale;
                        float u[MG_RNG_CHUNK];
                        for (int j0 = lo; j0 < nv; j0 += MG_RNG_CHUNK) {
                            int m = nv - j0 < MG_RNG_CHUNK ? nv - j0 : MG_RNG_CHUNK;
                            mg_rng_uniform_block(c.seed, c.key, mask_stream(&c, b), base + (uint64_t)j0, m, u);
                            for (int j = 0; j < m; j++) row[j0 + j] = u[j] >= c.p ? row[j0 + j] * sc : 0.0f;
                        }
                    } else {
                        for (int j = lo; j < nv; j++) row[j] *= inv;
                    }
                    for (int j = k0; j < lo; j++) row[j] = 0.0f;
                    for (int j = nv; j < nk; j++) row[j] = 0.0f;
                }
                if ((rc = mg_gemm(false, false, nr, c.hv, nk - k0, 1.0f, S + k0, c.Sk, Vb, c.ldv, 0.0f, Y, c.ldy, err)))
                    goto done;
            }
        }
    }
done:
    free(S);
    return rc;
}

/* ---- backward -------------------------------------------------------------------------- */
MG_SIMD static int attention_bwd_cpu(const mg_kernel_args *a, mg_error *err) {
    const mg_node *n = a->node;
    attn_ctx c;
    ctx_init(&c, n, n->in[1], n->in[2], n->in[3], n->n_in > 6 ? a->in[6] : NULL, a->info);
    const float *dy = a->in[0], *q = a->in[1], *k = a->in[2], *v = a->in[3], *y = a->in[4], *lse = a->in[5];
    float *dq = a->out[0], *dk = a->out[1], *dv = a->out[2];
    size_t nS = (size_t)c.Sq * (size_t)c.Sk;
    float *A = malloc(nS * sizeof *A), *Bm = malloc(nS * sizeof *Bm);
    if (!A || !Bm) {
        free(A);
        free(Bm);
        return mg_error_set(err, MG_ERR_NOMEM, "attention_bwd: out of memory");
    }
    int rc = MG_OK;
    memset(dk, 0, (size_t)mg_numel(n->in[2]) * sizeof *dk);
    memset(dv, 0, (size_t)mg_numel(n->in[3]) * sizeof *dv);
    for (int b = 0; b < c.B; b++) {
        for (int h = 0; h < c.NH; h++) {
            int g = h / c.rep;
            size_t qo = ((size_t)b * c.NH + h) * c.hd, ko = ((size_t)b * c.NG + g) * c.hd;
            size_t yo = ((size_t)b * c.NH + h) * c.hv, vo = ((size_t)b * c.NG + g) * c.hv;
            const float *K = k + ko, *V = v + vo;
            const float *L = lse + ((size_t)b * c.NH + h) * c.Sq;
            float *dK = dk + ko, *dV = dv + vo;
            for (int i0 = 0; i0 < c.Sq; i0 += c.block) {
                int nr = c.Sq - i0 < c.block ? c.Sq - i0 : c.block, k0, nk;
                block_keys(&c, b, i0, nr, &k0, &nk);
                size_t ro = qo + (size_t)i0 * c.ldq, yr = yo + (size_t)i0 * c.ldy;
                const float *Q = q + ro, *dY = dy + yr, *Y = y + yr;
                float *dQ = dq + ro;
                if (nk <= k0) {
                    for (int i = 0; i < nr; i++) memset(dQ + (size_t)i * c.ldq, 0, (size_t)c.hd * sizeof *dQ);
                    continue;
                }
                /* A = S, Bm = dPd = dY Vᵀ (the block's key columns k0 .. nk only) */
                size_t kb = (size_t)k0 * c.ldk, vb = (size_t)k0 * c.ldv;
                if ((rc = mg_gemm(false, true, nr, nk - k0, c.hd, c.scale, Q, c.ldq, K + kb, c.ldk, 0.0f, A + k0, c.Sk,
                                  err)))
                    goto done;
                if ((rc = mg_gemm(false, true, nr, nk - k0, c.hv, 1.0f, dY, c.ldy, V + vb, c.ldv, 0.0f, Bm + k0, c.Sk,
                                  err)))
                    goto done;
                for (int i = 0; i < nr; i++) {
                    float *ar = A + (size_t)i * c.Sk, *br = Bm + (size_t)i * c.Sk;
                    int lo = first_visible(&c, b, i0 + i), nv = n_visible(&c, i0 + i);
                    float l = L[i0 + i];
                    if (nv <= lo || isinf(l)) {
                        memset(ar + k0, 0, (size_t)(nk - k0) * sizeof *ar);
                        memset(br + k0, 0, (size_t)(nk - k0) * sizeof *br);
                        continue;
                    }
                    const float *dyi = dY + (size_t)i * c.ldy, *yi = Y + (size_t)i * c.ldy;
                    double dd = 0;
                    for (int d = 0; d < c.hv; d++) dd += (double)dyi[d] * yi[d];
                    float D = (float)dd;
                    if (c.drop) {
                        uint64_t base = mask_base(&c, h, i0 + i);
                        float u[MG_RNG_CHUNK];
                        for (int j0 = lo; j0 < nv; j0 += MG_RNG_CHUNK) {
                            int cn = nv - j0 < MG_RNG_CHUNK ? nv - j0 : MG_RNG_CHUNK;
                            mg_rng_uniform_block(c.seed, c.key, mask_stream(&c, b), base + (uint64_t)j0, cn, u);
                            float *as = ar + j0, *bs = br + j0;
                            for (int j = 0; j < cn; j++) {
                                float p = exp_shift(as[j], l);
                                float m = u[j] >= c.p ? c.keep_scale : 0.0f;
                                bs[j] = p * (bs[j] * m - D); /* dS */
                                as[j] = p * m;               /* Pd */
                            }
                        }
                    } else {
                        for (int j = lo; j < nv; j++) {
                            float p = exp_shift(ar[j], l);
                            br[j] = p * (br[j] - D);
                            ar[j] = p;
                        }
                    }
                    for (int j = k0; j < lo; j++) ar[j] = br[j] = 0.0f;
                    for (int j = nv; j < nk; j++) ar[j] = br[j] = 0.0f;
                }
                /* dV += Pdᵀ dY; dQ = scale dS K; dK += scale dSᵀ Q (columns k0 .. nk) */
                int w = nk - k0;
                if ((rc = mg_gemm(true, false, w, c.hv, nr, 1.0f, A + k0, c.Sk, dY, c.ldy, 1.0f, dV + vb, c.ldv, err)))
                    goto done;
                if ((rc = mg_gemm(false, false, nr, c.hd, w, c.scale, Bm + k0, c.Sk, K + kb, c.ldk, 0.0f, dQ, c.ldq,
                                  err)))
                    goto done;
                if ((rc = mg_gemm(true, false, w, c.hd, nr, c.scale, Bm + k0, c.Sk, Q, c.ldq, 1.0f, dK + kb, c.ldk,
                                  err)))
                    goto done;
            }
        }
    }
done:
    free(A);
    free(Bm);
    return rc;
}

/* ---- cost, gradient rule, defs, builder ------------------------------------------------ */
static double io_bytes(const mg_node *n) {
    double b = 0;
    for (int i = 0; i < n->n_in; i++) b += (double)mg_numel(n->in[i]);
    for (int i = 0; i < n->n_out; i++) b += (double)mg_numel(n->out[i]);
    return 4.0 * b;
}

/* 2·Sq·Sk·d FLOPs per matmul per (batch, head), d the head size it contracts or makes:
 * forward Q Kᵀ (hd) and P V (hv); backward Q Kᵀ, dQ, dK (hd), dY Vᵀ and dV (hv). */
static void cost_attn(const mg_node *n, const mg_tensor *q, const mg_tensor *k, const mg_tensor *v, double mm_qk,
                      double mm_v, double *flops, double *bytes) {
    double bh = (double)q->shape[1] * (double)q->shape[2], ss = (double)q->shape[0] * (double)k->shape[0];
    *flops = 2.0 * bh * ss * (mm_qk * (double)q->shape[3] + mm_v * (double)v->shape[3]);
    *bytes = io_bytes(n);
}
static void cost_fwd(const mg_node *n, double *flops, double *bytes) {
    cost_attn(n, n->in[0], n->in[1], n->in[2], 1, 1, flops, bytes);
}
static void cost_bwd(const mg_node *n, double *flops, double *bytes) {
    cost_attn(n, n->in[1], n->in[2], n->in[3], 3, 2, flops, bytes);
}

static int attention_grad(mg_graph *g, const mg_node *n, mg_tensor *const *dout, const bool *need, mg_tensor **din) {
    if (dout[1])
        return mg_graph_fail(g, MG_ERR_UNSUPPORTED, "attention: no gradient through the saved lse '%s'",
                             n->out[1]->name);
    if (!dout[0]) return MG_OK;
    mg_tensor *in[7] = {dout[0], n->in[0], n->in[1], n->in[2], n->out[0], n->out[1], n->n_in > 3 ? n->in[3] : NULL};
    /* same scale, mask, key; the documents' starts get no gradient */
    mg_node *b = mg_node_new(g, MG_OP_ATTENTION_BWD, &n->attrs, n->n_in > 3 ? 7 : 6, in, NULL);
    if (!b) return mg_graph_error(g)->code;
    for (int i = 0; i < 3; i++)
        if (need[i]) din[i] = b->out[i];
    return MG_OK;
}

/* Sharding (ops/op.h): heads (dim 2) or batch (dim 1) split; lse [b, nh, s] follows,
 * and so does doc_start [s, b] a batch split (it is whole under a heads split). */
static mg_sharding lse_of(mg_sharding s) {
    if (!mg_sh_is_split(s)) return s;
    return mg_sh_split(s.dim == 2 ? 1 : 0);
}

static int shard_attention(const mg_node *n, const mg_shard_ctx *c, mg_shard_io *io, mg_error *err) {
    (void)c, (void)err;
    bool bwd = n->op == MG_OP_ATTENTION_BWD;
    mg_sharding s = mg_sh_full();
    for (int i = 0; i < 3; i++) {
        mg_sharding q = io->in[i + bwd];
        if (mg_sh_is_split(q) && (q.dim == 1 || q.dim == 2)) {
            s = q;
            break;
        }
    }
    mg_sharding ds = mg_sh_is_split(s) && s.dim == 1 ? s : mg_sh_full();
    if (!bwd) {
        for (int i = 0; i < 3; i++) io->want[i] = s;
        io->want[3] = ds;
        io->out[0] = s;
        io->out[1] = lse_of(s);
    } else { /* dy, q, k, v, y, lse, doc_start */
        for (int i = 0; i < 5; i++) io->want[i] = s;
        io->want[5] = lse_of(s);
        io->want[6] = ds;
        for (int j = 0; j < 3; j++) io->out[j] = s;
    }
    return MG_OK;
}

const mg_op_def mg_opdef_ATTENTION = {"attention", 3, 4, 0, infer_attention, attention_grad, cost_fwd, attention_cpu,
                                      NULL, .shard = shard_attention, .f32_out = 1u << 1};
const mg_op_def mg_opdef_ATTENTION_BWD = {"attention_bwd", 6, 7, MG_OPF_NO_GRAD, infer_attention_bwd, NULL, cost_bwd,
                                          attention_bwd_cpu, NULL, .shard = shard_attention, .f32_out = 1u << 1};

static mg_tensor *attention_node(mg_graph *g, mg_tensor *q, mg_tensor *k, mg_tensor *v, mg_tensor *doc_start,
                                 bool causal, int64_t window, float dropout_p, float scale) {
    if (scale == 0.0f && q && q->ndim == 4 && q->shape[3] > 0) scale = (float)(1.0 / sqrt((double)q->shape[3]));
    mg_attrs at = {.attention = {.scale = scale, .causal = causal, .dropout_p = dropout_p, .rng_key = 0, .window = window}};
    mg_tensor *in[4] = {q, k, v, doc_start};
    mg_node *n = mg_node_new(g, MG_OP_ATTENTION, &at, doc_start ? 4 : 3, in, NULL);
    if (!n) return NULL;
    n->attrs.attention.rng_key = n->out[0]->logical.key; /* hash of the output's unique name */
    return n->out[0];
}

mg_tensor *mg_attention(mg_graph *g, mg_tensor *q, mg_tensor *k, mg_tensor *v, bool causal, float dropout_p) {
    return attention_node(g, q, k, v, NULL, causal, 0, dropout_p, 0.0f);
}

mg_tensor *mg_attention_masked(mg_graph *g, mg_tensor *q, mg_tensor *k, mg_tensor *v, mg_tensor *doc_start,
                               int64_t window, float dropout_p) {
    return attention_node(g, q, k, v, doc_start, true, window, dropout_p, 0.0f);
}

mg_tensor *mg_attention_scaled(mg_graph *g, mg_tensor *q, mg_tensor *k, mg_tensor *v, mg_tensor *doc_start,
                               int64_t window, float dropout_p, float scale) {
    return attention_node(g, q, k, v, doc_start, true, window, dropout_p, scale);
}

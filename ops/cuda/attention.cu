/* Attention forward and backward (ops/attention.c) on cuBLAS plus row kernels.
 *
 * Same algorithm as the CPU kernel: S = scale Q Kᵀ per head, a row kernel for the
 * causal mask (and the documents' starts, doc_start, and the sliding window), softmax,
 * lse and the dropout mask (the counter RNG at the same logical indices: identical
 * masks), then Y = Pd V. Only lse is saved; the backward recomputes
 * P = exp(S - lse) (flash-attention style) and regenerates the mask:
 *   dPd = dY Vᵀ, dS = P (dPd keep/(1-p) - D), D_i = dY_i . Y_i,
 *   dV += Pdᵀ dY, dQ = scale dS K, dK += scale dSᵀ Q.
 * S and dPd live in scratch for a chunk of heads at a time (<= ~256 MiB each); the
 * GEMMs run on tensor cores in the chosen precision (mg_cuda_gemm_precision). A fused
 * flash kernel (no S in memory, causal blocks skipped) would be faster; this keeps
 * the CPU kernel's arithmetic so the two can be compared element by element.
 *
 * Heads as strided batches: with rep = NH / NG query heads per kv group and
 * bg = b·NG + g, query head h = g·rep + r of batch b starts at (bg·rep + r)·hd in the
 * [s, b, nh, hd] layout and its kv group at bg·hd, so for each r the heads of all
 * (b, g) are one strided-batched GEMM (q stride rep·hd, k stride hd; y, v with the values'
 * head size hv in place of hd). GQA sums of
 * dK, dV over a group's heads run in r order (beta = 1 after the first): the CPU's
 * head order.
 */
#include <math.h>

#include "mgraph/rng.h"
#include "ops/cuda/blas.h"
#include "ops/cuda/philox.cuh"

#define SCRATCH_BYTES ((size_t)256 << 20)
#define NT 128

typedef struct attn_ctx {
    int B, NH, NG, Sq, Sk, hd, hv, rep; /* hv: the values' head size (y, dy, v) */
    int ldq, ldk, ldy, ldv;
    int64_t q_off_s, q_off_b, q_off_h, k_off_s;
    uint64_t NH_g, Sq_g, Sk_g;
    float scale, p, keep_scale;
    bool causal, drop;
    uint64_t key; /* mixed with the seed */
    int64_t iteration, sample0; /* mask streams: global sample of local batch row 0 */
    const int32_t *ds;          /* doc_start [Sq, B] on the device (logical key positions), or NULL */
    int64_t window;             /* sliding window (keys per query), 0: none */
} attn_ctx;

static void ctx_init(attn_ctx *c, const mg_node *n, const mg_tensor *q, const mg_tensor *k, const mg_tensor *v,
                     const void *ds, const mg_exec_info *info) {
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
    c->p = at->dropout_p;
    c->drop = info->training && at->dropout_p > 0.0f;
    c->keep_scale = 1.0f / (1.0f - at->dropout_p);
    c->key = mg_philox_mix_key(info->seed, at->rng_key);
    /* masks per sample (mg_rng_dropout_site), as ops/attention.c */
    int64_t B_g = q->logical.ndim == 4 ? q->logical.shape[1] : c->B;
    c->iteration = info->iteration;
    c->sample0 = mg_exec_first_sample(info, B_g) + c->q_off_b;
    c->ds = (const int32_t *)ds;
    c->window = at->window;
}

__device__ inline int n_visible(const attn_ctx &c, int i) {
    if (!c.causal) return c.Sk;
    int64_t last = (int64_t)i + c.q_off_s - c.k_off_s;
    if (last < 0) return 0;
    return last + 1 < c.Sk ? (int)(last + 1) : c.Sk;
}

/* First local key query row i of sample b sees (its document's start, its window's). */
__device__ inline int first_visible(const attn_ctx &c, int b, int i) {
    int64_t f = c.ds ? (int64_t)c.ds[(size_t)i * c.B + b] : 0;
    int64_t w = (int64_t)i + c.q_off_s - c.window + 1;
    if (c.window > 0 && w > f) f = w;
    f -= c.k_off_s;
    return f <= 0 ? 0 : f < c.Sk ? (int)f : c.Sk;
}

__device__ inline uint64_t mask_stream(const attn_ctx &c, int b) { return mg_rng_dropout_stream(c.iteration, c.sample0 + b); }
__device__ inline uint64_t mask_base(const attn_ctx &c, int h, int i) {
    uint64_t hg = (uint64_t)(h + c.q_off_h), ig = (uint64_t)(i + c.q_off_s);
    return (hg * c.Sq_g + ig) * c.Sk_g + (uint64_t)c.k_off_s;
}

/* Forward row (bg0 + blockIdx.y, i = blockIdx.x) of head r: S -> Pd in place, lse. */
__global__ void k_attn_fwd_rows(float *S, float *lse, attn_ctx c, int bg0, int r) {
    __shared__ float shf[32];
    __shared__ double shd[32];
    int i = blockIdx.x, bgl = blockIdx.y, bg = bg0 + bgl;
    int b = bg / c.NG, h = (bg % c.NG) * c.rep + r;
    float *row = S + ((size_t)bgl * c.Sq + i) * c.Sk;
    float *L = lse + ((size_t)b * c.NH + h) * c.Sq + i;
    int lo = first_visible(c, b, i), nv = n_visible(c, i);
    if (nv <= lo) {
        for (int j = threadIdx.x; j < c.Sk; j += blockDim.x) row[j] = 0.0f;
        if (threadIdx.x == 0) *L = -INFINITY;
        return;
    }
    float m = -INFINITY;
    for (int j = lo + threadIdx.x; j < nv; j += blockDim.x) m = fmaxf(m, row[j]);
    m = mg_block_max(m, shf);
    double sum = 0;
    for (int j = lo + threadIdx.x; j < nv; j += blockDim.x) {
        float e = expf(row[j] - m);
        row[j] = e;
        sum += e;
    }
    sum = mg_block_sum(sum, shd);
    if (threadIdx.x == 0) *L = m + (float)log(sum);
    float inv = (float)(1.0 / sum), sc = inv * c.keep_scale;
    uint64_t base = c.drop ? mask_base(c, h, i) : 0;
    for (int j = threadIdx.x; j < c.Sk; j += blockDim.x) {
        float v = 0.0f;
        if (j >= lo && j < nv) {
            if (c.drop) v = mg_uniform_dev(c.key, mask_stream(c, b), base + (uint64_t)j) >= c.p ? row[j] * sc : 0.0f;
            else v = row[j] * inv;
        }
        row[j] = v;
    }
}

/* Backward row: A = S -> Pd, B = dPd -> dS. */
__global__ void k_attn_bwd_rows(float *A, float *Bm, const float *__restrict__ dy, const float *__restrict__ y,
                                const float *__restrict__ lse, attn_ctx c, int bg0, int r) {
    __shared__ double shd[32];
    int i = blockIdx.x, bgl = blockIdx.y, bg = bg0 + bgl;
    int b = bg / c.NG, h = (bg % c.NG) * c.rep + r;
    float *ar = A + ((size_t)bgl * c.Sq + i) * c.Sk, *br = Bm + ((size_t)bgl * c.Sq + i) * c.Sk;
    float l = lse[((size_t)b * c.NH + h) * c.Sq + i];
    int lo = first_visible(c, b, i), nv = n_visible(c, i);
    if (nv <= lo || isinf(l)) {
        for (int j = threadIdx.x; j < c.Sk; j += blockDim.x) ar[j] = br[j] = 0.0f;
        return;
    }
    size_t ro = (size_t)i * c.ldy + ((size_t)b * c.NH + h) * c.hv;
    double dd = 0;
    for (int d = threadIdx.x; d < c.hv; d += blockDim.x) dd += (double)dy[ro + d] * y[ro + d];
    float D = (float)mg_block_sum(dd, shd);
    uint64_t base = c.drop ? mask_base(c, h, i) : 0;
    for (int j = threadIdx.x; j < c.Sk; j += blockDim.x) {
        if (j < lo || j >= nv) {
            ar[j] = br[j] = 0.0f;
            continue;
        }
        float p = expf(ar[j] - l);
        if (c.drop) {
            float m = mg_uniform_dev(c.key, mask_stream(c, b), base + (uint64_t)j) >= c.p ? c.keep_scale : 0.0f;
            br[j] = p * (br[j] * m - D);
            ar[j] = p * m;
        } else {
            br[j] = p * (br[j] - D);
            ar[j] = p;
        }
    }
}

/* Row-major C [M x N] (ldc, batch stride sc) = alpha op(A) op(B) + beta C over nb
 * batches, via the column-major Cᵀ = op(B)ᵀ op(A)ᵀ (as ops/cuda/matmul.cu). */
static int gemm(cublasHandle_t h, bool ta, bool tb, int M, int N, int K, float alpha, const float *A, int lda,
                long long sa, const float *B, int ldb, long long sb, float beta, float *C, int ldc, long long sc, int nb,
                mg_error *err) {
    cublasStatus_t s = cublasGemmStridedBatchedEx(h, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, N,
                                                  M, K, &alpha, B, CUDA_R_32F, ldb, sb, A, CUDA_R_32F, lda, sa, &beta,
                                                  C, CUDA_R_32F, ldc, sc, nb, mg_cuda_compute_type(), CUBLAS_GEMM_DEFAULT);
    if (s != CUBLAS_STATUS_SUCCESS)
        return mg_error_set(err, MG_ERR_RUNTIME, "attention: cuBLAS GEMM (%d x %d x %d, batch %d): %s", M, N, K, nb,
                            cublasGetStatusString(s));
    return MG_OK;
}

/* heads (bg) per chunk so that one [nb, Sq, Sk] scratch stays under SCRATCH_BYTES */
static int chunk_of(const attn_ctx &c) {
    size_t per = (size_t)c.Sq * (size_t)c.Sk * sizeof(float);
    size_t nb = per ? SCRATCH_BYTES / per : 1;
    int total = c.B * c.NG;
    if (nb < 1) nb = 1;
    if (nb > 65535) nb = 65535; /* the row kernels' grid.y */
    return nb < (size_t)total ? (int)nb : total;
}

extern "C" int mg_cuda_attention(const mg_kernel_args *a, mg_error *err) {
    const mg_node *n = a->node;
    attn_ctx c;
    ctx_init(&c, n, n->in[0], n->in[1], n->in[2], n->n_in > 3 ? a->in[3] : NULL, a->info);
    const float *q = (const float *)a->in[0], *k = (const float *)a->in[1], *v = (const float *)a->in[2];
    float *y = (float *)a->out[0], *lse = (float *)a->out[1];
    cublasHandle_t h = NULL;
    int rc = mg_cuda_blas(&h, err);
    if (rc) return rc;
    int cb = chunk_of(c), total = c.B * c.NG;
    float *S;
    if ((rc = mg_cuda_scratch((void **)&S, (size_t)cb * c.Sq * c.Sk * sizeof(float), "attention", err))) return rc;
    long long sS = (long long)c.Sq * c.Sk, sq = (long long)c.rep * c.hd, sk = c.hd;
    long long sy = (long long)c.rep * c.hv, sv = c.hv;
    for (int bg0 = 0; bg0 < total && !rc; bg0 += cb) {
        int nb = total - bg0 < cb ? total - bg0 : cb;
        for (int r = 0; r < c.rep && !rc; r++) {
            const float *Q = q + ((size_t)bg0 * c.rep + r) * c.hd, *K = k + (size_t)bg0 * c.hd,
                        *V = v + (size_t)bg0 * c.hv;
            float *Y = y + ((size_t)bg0 * c.rep + r) * c.hv;
            rc = gemm(h, false, true, c.Sq, c.Sk, c.hd, c.scale, Q, c.ldq, sq, K, c.ldk, sk, 0.0f, S, c.Sk, sS, nb, err);
            if (rc) break;
            k_attn_fwd_rows<<<dim3((unsigned)c.Sq, (unsigned)nb), NT, 0, mg_cuda_stream()>>>(S, lse, c, bg0, r);
            if ((rc = mg_cuda_check_launch("attention", err))) break;
            rc = gemm(h, false, false, c.Sq, c.hv, c.Sk, 1.0f, S, c.Sk, sS, V, c.ldv, sv, 0.0f, Y, c.ldy, sy, nb, err);
        }
    }
    mg_cuda_scratch_free(S);
    return rc;
}

extern "C" int mg_cuda_attention_bwd(const mg_kernel_args *a, mg_error *err) {
    const mg_node *n = a->node;
    attn_ctx c;
    ctx_init(&c, n, n->in[1], n->in[2], n->in[3], n->n_in > 6 ? a->in[6] : NULL, a->info);
    const float *dy = (const float *)a->in[0], *q = (const float *)a->in[1], *k = (const float *)a->in[2];
    const float *v = (const float *)a->in[3], *y = (const float *)a->in[4], *lse = (const float *)a->in[5];
    float *dq = (float *)a->out[0], *dk = (float *)a->out[1], *dv = (float *)a->out[2];
    cublasHandle_t h = NULL;
    int rc = mg_cuda_blas(&h, err);
    if (rc) return rc;
    int cb = chunk_of(c), total = c.B * c.NG;
    size_t one = (size_t)cb * c.Sq * c.Sk;
    float *A;
    if ((rc = mg_cuda_scratch((void **)&A, 2 * one * sizeof(float), "attention_bwd", err))) return rc;
    float *Bm = A + one;
    long long sS = (long long)c.Sq * c.Sk, sq = (long long)c.rep * c.hd, sk = c.hd;
    long long sy = (long long)c.rep * c.hv, sv = c.hv;
    for (int bg0 = 0; bg0 < total && !rc; bg0 += cb) {
        int nb = total - bg0 < cb ? total - bg0 : cb;
        for (int r = 0; r < c.rep && !rc; r++) {
            size_t qo = ((size_t)bg0 * c.rep + r) * c.hd, ko = (size_t)bg0 * c.hd;
            size_t yo = ((size_t)bg0 * c.rep + r) * c.hv, vo = (size_t)bg0 * c.hv;
            float beta = r ? 1.0f : 0.0f;
            rc = gemm(h, false, true, c.Sq, c.Sk, c.hd, c.scale, q + qo, c.ldq, sq, k + ko, c.ldk, sk, 0.0f, A, c.Sk, sS,
                      nb, err);
            if (!rc)
                rc = gemm(h, false, true, c.Sq, c.Sk, c.hv, 1.0f, dy + yo, c.ldy, sy, v + vo, c.ldv, sv, 0.0f, Bm, c.Sk,
                          sS, nb, err);
            if (rc) break;
            k_attn_bwd_rows<<<dim3((unsigned)c.Sq, (unsigned)nb), NT, 0, mg_cuda_stream()>>>(A, Bm, dy, y, lse, c, bg0, r);
            if ((rc = mg_cuda_check_launch("attention_bwd", err))) break;
            /* dV (+)= Pdᵀ dY; dQ = scale dS K; dK (+)= scale dSᵀ Q */
            rc = gemm(h, true, false, c.Sk, c.hv, c.Sq, 1.0f, A, c.Sk, sS, dy + yo, c.ldy, sy, beta, dv + vo, c.ldv, sv,
                      nb, err);
            if (!rc)
                rc = gemm(h, false, false, c.Sq, c.hd, c.Sk, c.scale, Bm, c.Sk, sS, k + ko, c.ldk, sk, 0.0f, dq + qo,
                          c.ldq, sq, nb, err);
            if (!rc)
                rc = gemm(h, true, false, c.Sk, c.hd, c.Sq, c.scale, Bm, c.Sk, sS, q + qo, c.ldq, sq, beta, dk + ko,
                          c.ldk, sk, nb, err);
        }
    }
    mg_cuda_scratch_free(A);
    return rc;
}

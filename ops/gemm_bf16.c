/* bf16 matrix products on CPUs: C = alpha·op(A)·op(B) + beta·C with A and B rounded to
 * bf16 (round to nearest even) and the products summed in fp32. This is the arithmetic
 * of Megatron's --bf16 matrix products (and of cuBLAS's CUBLAS_COMPUTE_32F_FAST_16BF):
 * storage, master weights and gradients stay fp32.
 *
 * Layout. Both operands are packed as pairs of bf16 along K, one 32-bit word per pair,
 * low half = even k: the operand of AVX512-BF16's VDPBF16PS, which adds two products to
 * each fp32 lane, the odd pair first (Intel SDM):
 *     acc += hi(a)·hi(b);  acc += lo(a)·lo(b)
 * A product of two bf16 is exact in fp32 (8 × 8 significand bits), so each step rounds
 * once, in the add. The portable micro-kernel computes exactly this, in this order, so
 * the native and the portable kernels give the same bits; the one difference is that
 * VDPBF16PS flushes denormal inputs and results to zero (values below 1.2e-38, which
 * training data does not reach).
 *
 * Blocking: K in blocks of KC (each block's sum is formed from zero, then added to C);
 * op(B) in strips of NR = 32 columns (two 16-lane vectors, 16 KiB packed: L1); op(A) in
 * panels of MR = 8 rows, packed once per K block. One thread: the workers are the
 * parallelism, as with OpenBLAS's one thread per worker.
 *
 * The native kernel runs where the CPU has AVX512-BF16 (mg_cpu_has_bf16); the portable
 * one everywhere, for checking numerics (it is several times slower than fp32 sgemm). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ops/gemm.h"
#include "ops/narrow.h"
#include "ops/simd.h"

#define MR 8
#define NR 32
#define KC 256 /* even: a K block holds whole pairs */

uint16_t mg_bf16_round(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return mg_narrow_bf16(u); /* to nearest, ties to even; NaN stays a (quiet) NaN (ops/narrow.h) */
}

float mg_bf16_to_float(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline uint32_t pair(float lo, float hi) {
    return (uint32_t)mg_bf16_round(lo) | (uint32_t)mg_bf16_round(hi) << 16;
}

/* op(A)[i][k] and op(B)[k][j] */
static inline float at_a(const float *A, int lda, bool ta, int i, int k) {
    return ta ? A[(size_t)k * lda + i] : A[(size_t)i * lda + k];
}
static inline float at_b(const float *B, int ldb, bool tb, int k, int j) {
    return tb ? B[(size_t)j * ldb + k] : B[(size_t)k * ldb + j];
}

/* op(A) rows [0, M), columns [k0, k0 + kc) -> panels of MR rows: out[panel][p][r] */
static void pack_a(const float *A, int lda, bool ta, int M, int k0, int kc, uint32_t *out) {
    int kp = (kc + 1) / 2;
    for (int i0 = 0; i0 < M; i0 += MR) {
        uint32_t *o = out + (size_t)(i0 / MR) * kp * MR;
        for (int p = 0; p < kp; p++) {
            int k = k0 + 2 * p;
            bool has_hi = 2 * p + 1 < kc;
            for (int r = 0; r < MR; r++) {
                int i = i0 + r;
                o[p * MR + r] = i < M ? pair(at_a(A, lda, ta, i, k), has_hi ? at_a(A, lda, ta, i, k + 1) : 0.0f) : 0;
            }
        }
    }
}

/* op(B) rows [k0, k0 + kc), columns [j0, j0 + NR) -> out[p][c] */
static void pack_b(const float *B, int ldb, bool tb, int N, int k0, int kc, int j0, uint32_t *out) {
    int kp = (kc + 1) / 2;
    for (int p = 0; p < kp; p++) {
        int k = k0 + 2 * p;
        bool has_hi = 2 * p + 1 < kc;
        for (int c = 0; c < NR; c++) {
            int j = j0 + c;
            out[p * NR + c] = j < N ? pair(at_b(B, ldb, tb, k, j), has_hi ? at_b(B, ldb, tb, k + 1, j) : 0.0f) : 0;
        }
    }
}

static inline float lo_of(uint32_t w) { return mg_bf16_to_float((uint16_t)(w & 0xffffu)); }
static inline float hi_of(uint32_t w) { return mg_bf16_to_float((uint16_t)(w >> 16)); }

/* acc[MR][NR] = sum over the kp pairs, in VDPBF16PS's order */
MG_SIMD static void micro_portable(int kp, const uint32_t *a, const uint32_t *b, float *restrict acc) {
    for (int x = 0; x < MR * NR; x++) acc[x] = 0.0f;
    for (int p = 0; p < kp; p++) {
        const uint32_t *bp = b + p * NR;
        for (int r = 0; r < MR; r++) {
            float ahi = hi_of(a[p * MR + r]), alo = lo_of(a[p * MR + r]);
            float *restrict row = acc + r * NR;
            for (int c = 0; c < NR; c++) {
                float t = row[c] + ahi * hi_of(bp[c]);
                row[c] = t + alo * lo_of(bp[c]);
            }
        }
    }
}

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#include <immintrin.h>
#define MG_HAVE_NATIVE_BF16 1
__attribute__((target("avx512f,avx512bf16"))) static void micro_native(int kp, const uint32_t *a, const uint32_t *b,
                                                                        float *restrict acc) {
    __m512 c0[MR], c1[MR];
    for (int r = 0; r < MR; r++) c0[r] = c1[r] = _mm512_setzero_ps();
    for (int p = 0; p < kp; p++) {
        __m512bh b0 = (__m512bh)_mm512_loadu_si512(b + p * NR), b1 = (__m512bh)_mm512_loadu_si512(b + p * NR + 16);
        for (int r = 0; r < MR; r++) {
            __m512bh av = (__m512bh)_mm512_set1_epi32((int)a[p * MR + r]);
            c0[r] = _mm512_dpbf16_ps(c0[r], av, b0);
            c1[r] = _mm512_dpbf16_ps(c1[r], av, b1);
        }
    }
    for (int r = 0; r < MR; r++) {
        _mm512_storeu_ps(acc + r * NR, c0[r]);
        _mm512_storeu_ps(acc + r * NR + 16, c1[r]);
    }
}
#endif

bool mg_cpu_has_bf16(void) {
#ifdef MG_HAVE_NATIVE_BF16
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512f");
#else
    return false;
#endif
}

int mg_gemm_bf16(bool native, bool ta, bool tb, int M, int N, int K, float alpha, const float *A, int lda,
                 const float *B, int ldb, float beta, float *C, int ldc, mg_error *err) {
    if (M <= 0 || N <= 0) return MG_OK;
    void (*micro)(int, const uint32_t *, const uint32_t *, float *) = micro_portable;
#ifdef MG_HAVE_NATIVE_BF16
    if (native) micro = micro_native;
#else
    if (native) return mg_error_set(err, MG_ERR_UNSUPPORTED, "bf16 GEMM: this build has no AVX512-BF16 kernel");
#endif
    if (K <= 0) { /* no products: C = beta·C */
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) C[(size_t)i * ldc + j] = beta == 0.0f ? 0.0f : beta * C[(size_t)i * ldc + j];
        return MG_OK;
    }
    int panels = (M + MR - 1) / MR, kc_max = K < KC ? K : KC, kp_max = (kc_max + 1) / 2;
    uint32_t *ap = malloc((size_t)panels * kp_max * MR * sizeof *ap);
    uint32_t *bp = malloc((size_t)kp_max * NR * sizeof *bp);
    float acc[MR * NR] __attribute__((aligned(64)));
    if (!ap || !bp) {
        free(ap);
        free(bp);
        return mg_error_set(err, MG_ERR_NOMEM, "bf16 GEMM: out of memory packing %d x %d", M, kc_max);
    }
    for (int k0 = 0; k0 < K; k0 += KC) {
        int kc = K - k0 < KC ? K - k0 : KC, kp = (kc + 1) / 2;
        bool first = k0 == 0;
        pack_a(A, lda, ta, M, k0, kc, ap);
        for (int j0 = 0; j0 < N; j0 += NR) {
            pack_b(B, ldb, tb, N, k0, kc, j0, bp);
            int nc = N - j0 < NR ? N - j0 : NR;
            for (int i0 = 0; i0 < M; i0 += MR) {
                micro(kp, ap + (size_t)(i0 / MR) * kp * MR, bp, acc);
                int mr = M - i0 < MR ? M - i0 : MR;
                for (int r = 0; r < mr; r++) {
                    float *c = C + (size_t)(i0 + r) * ldc + j0;
                    const float *s = acc + r * NR;
                    if (!first)
                        for (int x = 0; x < nc; x++) c[x] += alpha * s[x];
                    else if (beta == 0.0f) /* C is not read: it may hold anything */
                        for (int x = 0; x < nc; x++) c[x] = alpha * s[x];
                    else
                        for (int x = 0; x < nc; x++) c[x] = alpha * s[x] + beta * c[x];
                }
            }
        }
    }
    free(ap);
    free(bp);
    return MG_OK;
}

/* bf16 matrix products (ops/gemm_bf16.c, ops/gemm.c):
 *   forward.bf16_round          fp32 -> bf16 rounding: ties to even, NaN, infinities
 *   forward.gemm_bf16_portable  the portable kernel gives exactly the bits of the
 *                               arithmetic's definition (below) on every transpose, edge
 *                               and blocking case, and is within fp32 summation error of
 *                               the exact product of the rounded inputs
 *   forward.gemm_bf16_native    the AVX512-BF16 kernel gives the same bits (exit 77, a
 *                               skip, where the CPU lacks AVX512-BF16)
 *   forward.gemm_precision      mg_gemm_set_precision and mg_gemm's dispatch */
#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops/gemm.h"
#include "testkit.h"

/* The arithmetic's definition, element by element with no packing: inputs rounded to
 * bf16, K in blocks of 256 (ops/gemm_bf16.c's KC: the block sums are part of the
 * definition), within a block pairs (2p, 2p+1) added odd first, as VDPBF16PS does. */
#define SPEC_KC 256
static float rnd(float x) { return mg_bf16_to_float(mg_bf16_round(x)); }
static void spec(bool ta, bool tb, int M, int N, int K, float alpha, const float *A, int lda, const float *B, int ldb,
                 float beta, float *C, int ldc) {
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            float c = C[(size_t)i * ldc + j];
            for (int k0 = 0; k0 < K; k0 += SPEC_KC) {
                int kc = K - k0 < SPEC_KC ? K - k0 : SPEC_KC;
                float acc = 0.0f;
                for (int p = 0; 2 * p < kc; p++) {
                    int k = k0 + 2 * p;
                    float alo = rnd(ta ? A[(size_t)k * lda + i] : A[(size_t)i * lda + k]);
                    float blo = rnd(tb ? B[(size_t)j * ldb + k] : B[(size_t)k * ldb + j]);
                    float ahi = 0, bhi = 0;
                    if (2 * p + 1 < kc) {
                        ahi = rnd(ta ? A[(size_t)(k + 1) * lda + i] : A[(size_t)i * lda + k + 1]);
                        bhi = rnd(tb ? B[(size_t)j * ldb + k + 1] : B[(size_t)(k + 1) * ldb + j]);
                    }
                    acc = acc + ahi * bhi;
                    acc = acc + alo * blo;
                }
                if (k0 > 0) c += alpha * acc;
                else c = beta == 0.0f ? alpha * acc : alpha * acc + beta * c;
            }
            if (K == 0) c = beta == 0.0f ? 0.0f : beta * c;
            C[(size_t)i * ldc + j] = c;
        }
}

static void round_cases(void) {
    TK_CHECK(mg_bf16_round(1.0f) == 0x3f80, "1.0 -> %#x", mg_bf16_round(1.0f));
    /* 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties go to the even one, 1 */
    TK_CHECK(mg_bf16_round(1.0f + 0x1p-8f) == 0x3f80, "1 + 2^-8 -> %#x", mg_bf16_round(1.0f + 0x1p-8f));
    /* 1 + 3·2^-8 is halfway between 1 + 2^-7 (odd) and 1 + 2^-6: up to the even */
    TK_CHECK(mg_bf16_round(1.0f + 3 * 0x1p-8f) == 0x3f82, "1 + 3·2^-8 -> %#x", mg_bf16_round(1.0f + 3 * 0x1p-8f));
    TK_CHECK(mg_bf16_round(1.0f + 0x1p-8f + 0x1p-20f) == 0x3f81, "just above a tie rounds up");
    TK_CHECK(mg_bf16_round(-2.5f) == 0xc020, "-2.5 -> %#x", mg_bf16_round(-2.5f));
    TK_CHECK(mg_bf16_round(INFINITY) == 0x7f80 && mg_bf16_round(-INFINITY) == 0xff80, "infinities stay");
    TK_CHECK(isnan(mg_bf16_to_float(mg_bf16_round(NAN))), "NaN stays NaN");
    /* a NaN whose payload sits only in the low half must not round to infinity */
    uint32_t u = 0x7f800001u;
    float f;
    memcpy(&f, &u, sizeof f);
    TK_CHECK(isnan(mg_bf16_to_float(mg_bf16_round(f))), "low-payload NaN stays NaN");
    /* the largest finite float rounds up to infinity, as round-to-nearest does */
    TK_CHECK(mg_bf16_round(3.4028235e38f) == 0x7f80, "FLT_MAX -> %#x", mg_bf16_round(3.4028235e38f));
    TK_CHECK(mg_bf16_to_float(0x4049) == 3.140625f, "bf16 -> float is exact");
}

typedef struct shape { int M, N, K; } shape;
static const shape g_shapes[] = {{1, 1, 1},   {7, 5, 3},     {8, 32, 256},  {9, 33, 257},
                                 {17, 70, 600}, {3, 100, 512}, {64, 64, 2}, {2, 1, 513}};

/* Runs one kernel on every shape, transpose, alpha/beta and leading-dimension case and
 * compares with the definition bit for bit; returns the cases run. */
static int walk(bool native) {
    tk_rng r = {7};
    int cases = 0;
    for (size_t s = 0; s < sizeof g_shapes / sizeof *g_shapes; s++)
        for (int t = 0; t < 4; t++)
            for (int v = 0; v < 2; v++) {
                int M = g_shapes[s].M, N = g_shapes[s].N, K = g_shapes[s].K;
                bool ta = t & 1, tb = t & 2;
                float alpha = v ? 0.5f : 1.0f, beta = v ? 0.25f : 0.0f;
                int pad = v ? 3 : 0; /* leading dimensions wider than the matrix */
                int lda = (ta ? M : K) + pad, ldb = (tb ? K : N) + pad, ldc = N + pad;
                int64_t na = (int64_t)(ta ? K : M) * lda, nb = (int64_t)(tb ? N : K) * ldb, nc = (int64_t)M * ldc;
                float *A = malloc(sizeof *A * na), *B = malloc(sizeof *B * nb);
                float *C = malloc(sizeof *C * nc), *W = malloc(sizeof *W * nc);
                tk_fill(&r, A, na, -2.0f, 2.0f);
                tk_fill(&r, B, nb, -1.0f, 1.0f);
                tk_fill(&r, W, nc, -1.0f, 1.0f);
                /* beta == 0: C must not be read, so it starts as NaN */
                for (int64_t x = 0; x < nc; x++) C[x] = beta == 0.0f ? NAN : W[x];
                mg_error err = {0};
                int rc = mg_gemm_bf16(native, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, &err);
                TK_CHECK(rc == MG_OK, "%s", err.msg);
                spec(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, W, ldc);
                int bad = 0;
                for (int i = 0; i < M; i++)
                    for (int j = 0; j < N; j++) {
                        float g = C[(size_t)i * ldc + j], w = W[(size_t)i * ldc + j];
                        if (memcmp(&g, &w, sizeof g) && !bad++)
                            TK_CHECK(0, "%s M=%d N=%d K=%d ta=%d tb=%d beta=%g: C[%d][%d] = %.9g, definition %.9g",
                                     native ? "native" : "portable", M, N, K, ta, tb, beta, i, j, g, w);
                    }
                /* the padding columns of C are never written */
                for (int i = 0; pad && i < M; i++)
                    for (int j = N; j < ldc; j++)
                        if (C[(size_t)i * ldc + j] != W[(size_t)i * ldc + j] && !bad++)
                            TK_CHECK(0, "padding C[%d][%d] written", i, j);
                free(A), free(B), free(C), free(W);
                cases++;
            }
    return cases;
}

static void portable(void) {
    printf("%d cases bitwise equal to the definition\n", walk(false));
    /* against exact arithmetic: the fp32 sums of the rounded inputs are within summation
     * error, and the rounding itself is visible against the unrounded product */
    int M = 24, N = 40, K = 700;
    tk_rng r = {11};
    float *A = malloc(sizeof *A * M * K), *B = malloc(sizeof *B * K * N), *C = malloc(sizeof *C * M * N);
    tk_fill(&r, A, (int64_t)M * K, -1.0f, 1.0f);
    tk_fill(&r, B, (int64_t)K * N, -1.0f, 1.0f);
    mg_error err = {0};
    TK_CHECK(mg_gemm_bf16(false, false, false, M, N, K, 1.0f, A, K, B, N, 0.0f, C, N, &err) == MG_OK, "%s", err.msg);
    double worst_sum = 0, worst_bf16 = 0;
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double exact_r = 0, exact = 0, mag = 0;
            for (int k = 0; k < K; k++) {
                double a = A[i * K + k], b = B[k * N + j];
                exact_r += (double)rnd((float)a) * rnd((float)b);
                exact += a * b;
                mag += fabs(a * b);
            }
            double e1 = fabs(C[i * N + j] - exact_r) / mag, e2 = fabs(C[i * N + j] - exact) / mag;
            if (e1 > worst_sum) worst_sum = e1;
            if (e2 > worst_bf16) worst_bf16 = e2;
        }
    printf("worst |C - exact(rounded inputs)| / sum|ab| = %.3g; against unrounded inputs %.3g\n", worst_sum, worst_bf16);
    TK_CHECK(worst_sum <= 2.0 * 256 * 0x1p-24, "fp32 summation error %.3g too large", worst_sum);
    TK_CHECK(worst_bf16 <= 2 * 0x1p-8, "bf16 rounding error %.3g above two half-ulps of bf16", worst_bf16);
    TK_CHECK(worst_bf16 > 0x1p-16, "error %.3g against unrounded inputs: the inputs were not rounded", worst_bf16);
    free(A), free(B), free(C);
}

static void native(void) { printf("%d cases bitwise equal to the definition\n", walk(true)); }

static void precision(void) {
    mg_error err = {0};
    TK_CHECK(mg_gemm_precision_get() == MG_GEMM_FP32, "fp32 is the default");
    TK_CHECK(mg_gemm_set_precision((mg_gemm_precision)7, true, &err) == MG_ERR_INVALID, "unknown precision");
    if (!mg_cpu_has_bf16()) {
        err = (mg_error){0};
        int rc = mg_gemm_set_precision(MG_GEMM_BF16, false, &err);
        TK_CHECK(rc == MG_ERR_UNSUPPORTED && strstr(err.msg, "AVX512-BF16"), "no AVX512-BF16: rc %d, '%s'", rc,
                 err.msg);
        TK_CHECK(mg_gemm_precision_get() == MG_GEMM_FP32, "a refused setting changes nothing");
    }
    int M = 13, N = 37, K = 300;
    tk_rng r = {5};
    float *A = malloc(sizeof *A * M * K), *B = malloc(sizeof *B * N * K);
    float *C = malloc(sizeof *C * M * N), *W = malloc(sizeof *W * M * N);
    tk_fill(&r, A, (int64_t)M * K, -1.0f, 1.0f);
    tk_fill(&r, B, (int64_t)N * K, -1.0f, 1.0f);
    /* fp32: OpenBLAS's sgemm itself */
    TK_CHECK(mg_gemm(false, true, M, N, K, 1.0f, A, K, B, K, 0.0f, C, N, &err) == MG_OK, "%s", err.msg);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, 1.0f, A, K, B, K, 0.0f, W, N);
    TK_CHECK(!memcmp(C, W, sizeof *C * M * N), "fp32 mg_gemm is cblas_sgemm");
    /* bf16 (emulated where the CPU lacks it): the definition's bits */
    TK_CHECK(mg_gemm_set_precision(MG_GEMM_BF16, true, &err) == MG_OK, "%s", err.msg);
    TK_CHECK(mg_gemm_precision_get() == MG_GEMM_BF16, "bf16 set");
    TK_CHECK(mg_gemm(false, true, M, N, K, 1.0f, A, K, B, K, 0.0f, C, N, &err) == MG_OK, "%s", err.msg);
    spec(false, true, M, N, K, 1.0f, A, K, B, K, 0.0f, W, N);
    TK_CHECK(!memcmp(C, W, sizeof *C * M * N), "bf16 mg_gemm gives the definition's bits");
    TK_CHECK(mg_gemm_set_precision(MG_GEMM_FP32, false, &err) == MG_OK, "back to fp32");
    TK_CHECK(mg_gemm(false, true, M, N, K, 1.0f, A, K, B, K, 0.0f, C, N, &err) == MG_OK, "%s", err.msg);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, 1.0f, A, K, B, K, 0.0f, W, N);
    TK_CHECK(!memcmp(C, W, sizeof *C * M * N), "fp32 again after bf16");
    free(A), free(B), free(C), free(W);
}

int main(int argc, char **argv) {
    static const tk_case cases[] = {{"forward.bf16_round", round_cases},
                                    {"forward.gemm_bf16_portable", portable},
                                    {"forward.gemm_bf16_native", native},
                                    {"forward.gemm_precision", precision}};
    if (argc > 1 && !strcmp(argv[1], "forward.gemm_bf16_native") && !mg_cpu_has_bf16()) {
        printf("SKIP: this CPU has no AVX512-BF16; the native kernel cannot run here\n");
        return 77;
    }
    return tk_main(argc, argv, cases, 4);
}

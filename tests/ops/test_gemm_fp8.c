/* fp8 matrix products (ops/gemm_fp8.c) and the recipes' scales (graph/fp8.c):
 *   forward.gemm_fp8_portable  the portable kernel gives exactly the bits of the
 *                              element-wise definition (below) on every shape, transpose,
 *                              format pair and scale (saturating ones included), and is
 *                              within fp8 rounding of the exact product
 *   forward.gemm_fp8_native    the AVX512-BF16 path the same bits (exit 77 without it)
 *   forward.fp8_delayed_state  Transformer Engine's delayed scaling: the amax history's
 *                              roll, most_recent / max, the margin, amax 0 / NaN keeping
 *                              the scale, atomic amax recording
 *   forward.fp8_current_scale  tensorwise scales */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mgraph/fp8.h"
#include "ops/convert.h"
#include "ops/gemm.h"
#include "testkit.h"

/* The definition, element by element: each operand scaled (one fp32 product) and rounded
 * to its fp8 format; products summed in fp32 in blocks of 256 along K (each block from
 * zero), within a block pairs (2p, 2p+1), the odd one first; each block's sum times
 * (1/sa)·(1/sb) added to C. */
#define SPEC_KC 256
static float q(float x, mg_fp8_operand o) { return mg_round_to(x * o.scale, o.fmt); }
static void spec(bool ta, bool tb, int M, int N, int K, const float *A, int lda, mg_fp8_operand qa, const float *B,
                 int ldb, mg_fp8_operand qb, float *C, int ldc) {
    float alpha = (1.0f / qa.scale) * (1.0f / qb.scale);
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            float c = 0.0f;
            for (int k0 = 0; k0 < K; k0 += SPEC_KC) {
                int kc = K - k0 < SPEC_KC ? K - k0 : SPEC_KC;
                float acc = 0.0f;
                for (int p = 0; 2 * p < kc; p++) {
                    int k = k0 + 2 * p;
                    float alo = q(ta ? A[(size_t)k * lda + i] : A[(size_t)i * lda + k], qa);
                    float blo = q(tb ? B[(size_t)j * ldb + k] : B[(size_t)k * ldb + j], qb);
                    float ahi = 0, bhi = 0;
                    if (2 * p + 1 < kc) {
                        ahi = q(ta ? A[(size_t)(k + 1) * lda + i] : A[(size_t)i * lda + k + 1], qa);
                        bhi = q(tb ? B[(size_t)j * ldb + k + 1] : B[(size_t)(k + 1) * ldb + j], qb);
                    }
                    acc = acc + ahi * bhi;
                    acc = acc + alo * blo;
                }
                c = k0 == 0 ? alpha * acc : c + alpha * acc;
            }
            C[(size_t)i * ldc + j] = c;
        }
}

typedef struct shape { int M, N, K; } shape;
static const shape g_shapes[] = {{1, 1, 1},    {7, 5, 3},    {8, 32, 256}, {9, 33, 257}, {17, 70, 600},
                                 {3, 100, 512}, {64, 64, 2}, {2, 1, 513},  {16, 48, 64}, {33, 31, 1000}};
static const mg_fp8_operand g_ops[][2] = {
    {{MG_F8E4M3, 1.0f}, {MG_F8E4M3, 1.0f}},       /* unscaled */
    {{MG_F8E4M3, 150.0f}, {MG_F8E4M3, 300.0f}},   /* near the top of E4M3: some saturate at 448 */
    {{MG_F8E5M2, 0.37f}, {MG_F8E4M3, 2.5e3f}},    /* hybrid dgrad: E5M2 gradient, saturating weight */
    {{MG_F8E4M3, 1.0f / 64}, {MG_F8E5M2, 4096.0f}}, /* hybrid wgrad: subnormal E4M3s */
    {{MG_F8E5M2, 3e4f}, {MG_F8E5M2, 1e-3f}},      /* saturating E5M2 and its subnormals */
};

static int walk(bool native) {
    tk_rng r = {17};
    int cases = 0;
    for (size_t s = 0; s < sizeof g_shapes / sizeof *g_shapes; s++)
        for (int t = 0; t < 4; t++)
            for (size_t f = 0; f < sizeof g_ops / sizeof *g_ops; f++) {
                int M = g_shapes[s].M, N = g_shapes[s].N, K = g_shapes[s].K;
                bool ta = t & 1, tb = t & 2;
                int pad = (int)(f & 1) * 3; /* leading dimensions wider than the matrix */
                int lda = (ta ? M : K) + pad, ldb = (tb ? K : N) + pad, ldc = N + pad;
                int64_t na = (int64_t)(ta ? K : M) * lda, nb = (int64_t)(tb ? N : K) * ldb, nc = (int64_t)M * ldc;
                float *A = malloc(sizeof *A * na), *B = malloc(sizeof *B * nb);
                float *C = malloc(sizeof *C * nc), *W = malloc(sizeof *W * nc);
                tk_fill(&r, A, na, -2.0f, 2.0f);
                tk_fill(&r, B, nb, -1.0f, 1.0f);
                for (int64_t x = 0; x < nc; x++) C[x] = W[x] = -7.0f; /* the padding must stay */
                mg_error err = {0};
                int rc = mg_gemm_fp8(native, ta, tb, M, N, K, A, lda, g_ops[f][0], B, ldb, g_ops[f][1], C, ldc, &err);
                TK_CHECK(rc == MG_OK, "%s", err.msg);
                spec(ta, tb, M, N, K, A, lda, g_ops[f][0], B, ldb, g_ops[f][1], W, ldc);
                int bad = 0;
                for (int64_t x = 0; x < nc; x++)
                    if (memcmp(&C[x], &W[x], sizeof *C) && !bad++)
                        TK_CHECK(0, "%s M=%d N=%d K=%d ta=%d tb=%d formats %d: C[%lld] = %.9g, definition %.9g",
                                 native ? "native" : "portable", M, N, K, ta, tb, (int)f, (long long)x, C[x], W[x]);
                free(A), free(B), free(C), free(W);
                cases++;
            }
    return cases;
}

static void portable(void) {
    printf("%d cases bitwise equal to the definition\n", walk(false));
    /* against exact arithmetic: E4M3 x E4M3 scaled to the format's range is within a few
     * half-ulps of E4M3 (2^-4 relative) of the unquantised product, and visibly not it */
    int M = 24, N = 40, K = 700;
    tk_rng r = {11};
    float *A = malloc(sizeof *A * M * K), *B = malloc(sizeof *B * K * N), *C = malloc(sizeof *C * M * N);
    tk_fill(&r, A, (int64_t)M * K, -1.0f, 1.0f);
    tk_fill(&r, B, (int64_t)K * N, -1.0f, 1.0f);
    mg_fp8_operand qa = {MG_F8E4M3, mg_fp8_current_scale(mg_fp8_amax(A, (int64_t)M * K), MG_F8E4M3)};
    mg_fp8_operand qb = {MG_F8E4M3, mg_fp8_current_scale(mg_fp8_amax(B, (int64_t)K * N), MG_F8E4M3)};
    mg_error err = {0};
    TK_CHECK(mg_gemm_fp8(false, false, false, M, N, K, A, K, qa, B, N, qb, C, N, &err) == MG_OK, "%s", err.msg);
    double worst = 0;
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double exact = 0, mag = 0;
            for (int k = 0; k < K; k++) exact += (double)A[i * K + k] * B[k * N + j], mag += fabs(A[i * K + k] * B[k * N + j]);
            double e = fabs(C[i * N + j] - exact) / mag;
            if (e > worst) worst = e;
        }
    printf("worst |C - exact| / sum|ab| = %.3g (E4M3's half-ulp 2^-4 = %.3g)\n", worst, 0x1p-4);
    TK_CHECK(worst <= 2 * 0x1p-4, "fp8 error %.3g above two half-ulps of E4M3", worst);
    TK_CHECK(worst > 0x1p-12, "error %.3g: the operands were not quantised", worst);
    /* refusals */
    mg_fp8_operand bad = {MG_F8E4M3, 0.0f}, badf = {MG_BF16, 1.0f};
    TK_CHECK(mg_gemm_fp8(false, false, false, M, N, K, A, K, bad, B, N, qb, C, N, &err) == MG_ERR_INVALID, "scale 0");
    TK_CHECK(mg_gemm_fp8(false, false, false, M, N, K, A, K, qa, B, N, badf, C, N, &err) == MG_ERR_INVALID, "bf16 fmt");
    /* amax: the largest magnitude, NaN wins */
    float v[5] = {0.5f, -3.0f, 2.0f, 0.0f, -0.0f};
    TK_CHECK(mg_fp8_amax(v, 5) == 3.0f, "amax %g", mg_fp8_amax(v, 5));
    v[3] = NAN;
    TK_CHECK(isnan(mg_fp8_amax(v, 5)), "a NaN's amax is NaN");
    free(A), free(B), free(C);
}

static void native(void) { printf("%d cases bitwise equal to the definition\n", walk(true)); }

static float amax_of(const mg_fp8_state *s, int slot) {
    float f;
    memcpy(&f, &s->amax[slot], sizeof f);
    return f;
}

static void delayed_state(void) {
    mg_error err = {0};
    mg_fp8_options o = mg_fp8_defaults();
    o.format = MG_FP8_HYBRID;
    o.amax_history_len = 3;
    o.amax_algo = MG_FP8_AMAX_MAX;
    o.margin = 1;
    mg_fp8_state s;
    TK_CHECK(mg_fp8_state_init(&s, &o, 2, &err) == MG_OK, "%s", err.msg);
    TK_CHECK(s.n_slots == 6, "3 slots per product");
    for (int i = 0; i < 6; i++) TK_CHECK(s.scale[i] == 1.0f, "initial scale 1");
    TK_CHECK(mg_fp8_slot_format(&o, 2) == MG_F8E5M2 && mg_fp8_slot_format(&o, 0) == MG_F8E4M3 &&
                 mg_fp8_slot_format(&o, 4) == MG_F8E4M3 && mg_fp8_slot_format(&o, 5) == MG_F8E5M2,
             "hybrid: dY is E5M2, X and W E4M3");
    /* amaxes 4, 8, 2 over three steps for slot 0 (E4M3 max 448, margin 1 halves) */
    float seq[3] = {4.0f, 8.0f, 2.0f}, want_max[3] = {448.0f / 4 / 2, 448.0f / 8 / 2, 448.0f / 8 / 2};
    for (int step = 0; step < 3; step++) {
        mg_fp8_state_begin(&s);
        mg_fp8_record_amax(&s, 0, -seq[step] / 2);
        mg_fp8_record_amax(&s, 0, -seq[step]); /* the largest magnitude wins, whatever the order */
        mg_fp8_record_amax(&s, 0, seq[step] / 4);
        TK_CHECK(amax_of(&s, 0) == seq[step], "step %d amax %g", step, amax_of(&s, 0));
        mg_fp8_record_amax(&s, 2, 1000.0f); /* dY, E5M2: 57344 / 1000 / 2 */
        mg_fp8_state_update(&s);
        TK_CHECK(s.scale[0] == want_max[step], "max over the history: step %d scale %g, want %g", step, s.scale[0],
                 want_max[step]);
        TK_CHECK(s.scale[2] == 57344.0f / 1000.0f / 2.0f, "E5M2's scale %g", s.scale[2]);
        TK_CHECK(s.scale[1] == 1.0f, "a slot that saw amax 0 keeps its scale (%g)", s.scale[1]);
    }
    /* the history holds the last three amaxes: 8 leaves after three more steps of 1 */
    for (int step = 0; step < 3; step++) {
        mg_fp8_state_begin(&s);
        mg_fp8_record_amax(&s, 0, 1.0f);
        mg_fp8_state_update(&s);
    }
    TK_CHECK(s.scale[0] == 448.0f / 1 / 2, "after 8 left the 3-step history: %g", s.scale[0]);
    /* a NaN amax keeps the scale */
    mg_fp8_state_begin(&s);
    mg_fp8_record_amax(&s, 0, 2.0f);
    mg_fp8_record_amax(&s, 0, NAN);
    mg_fp8_record_amax(&s, 0, 3.0f);
    TK_CHECK(isnan(amax_of(&s, 0)), "NaN wins the amax");
    float before = s.scale[0];
    mg_fp8_state_update(&s);
    TK_CHECK(s.scale[0] == before, "NaN keeps the scale");
    mg_fp8_state_free(&s);
    /* most_recent: the scale follows the last step only */
    o.amax_algo = MG_FP8_AMAX_MOST_RECENT;
    o.margin = 0;
    TK_CHECK(mg_fp8_state_init(&s, &o, 1, &err) == MG_OK, "%s", err.msg);
    for (int step = 0; step < 3; step++) {
        mg_fp8_state_begin(&s);
        mg_fp8_record_amax(&s, 1, seq[step]);
        mg_fp8_state_update(&s);
        TK_CHECK(s.scale[1] == 448.0f / seq[step], "most_recent: step %d scale %g", step, s.scale[1]);
    }
    /* a tiny amax: the scale is capped at FLT_MAX, never inf */
    mg_fp8_state_begin(&s);
    mg_fp8_record_amax(&s, 1, 1e-44f);
    mg_fp8_state_update(&s);
    TK_CHECK(s.scale[1] == FLT_MAX, "tiny amax: scale %g", s.scale[1]);
    mg_fp8_state_free(&s);
    /* invalid options */
    mg_fp8_options b = o;
    b.amax_history_len = 0;
    TK_CHECK(mg_fp8_state_init(&s, &b, 1, &err) == MG_ERR_INVALID && strstr(err.msg, "history"), "%s", err.msg);
    b = o;
    b.margin = -1;
    TK_CHECK(mg_fp8_invalid(&b) != NULL, "negative margin");
}

static void current_scale(void) {
    TK_CHECK(mg_fp8_current_scale(2.0f, MG_F8E4M3) == 224.0f, "448 / 2");
    TK_CHECK(mg_fp8_current_scale(2.0f, MG_F8E5M2) == 28672.0f, "57344 / 2");
    TK_CHECK(mg_fp8_current_scale(0.0f, MG_F8E4M3) == 1.0f, "amax 0: 1");
    TK_CHECK(mg_fp8_current_scale(NAN, MG_F8E4M3) == 1.0f && mg_fp8_current_scale(INFINITY, MG_F8E4M3) == 1.0f,
             "amax not finite: 1");
    TK_CHECK(mg_fp8_current_scale(1e-44f, MG_F8E4M3) == FLT_MAX, "tiny amax: FLT_MAX");
    /* the operand's largest element lands exactly on the format's largest value */
    float x = 0.7131f, s = mg_fp8_current_scale(x, MG_F8E4M3);
    TK_CHECK(mg_round_to(x * s, MG_F8E4M3) == 448.0f || mg_round_to(x * s, MG_F8E4M3) == 416.0f,
             "amax maps to the top of E4M3 (%g)", mg_round_to(x * s, MG_F8E4M3));
}

int main(int argc, char **argv) {
    static const tk_case cases[] = {{"forward.gemm_fp8_portable", portable},
                                    {"forward.gemm_fp8_native", native},
                                    {"forward.fp8_delayed_state", delayed_state},
                                    {"forward.fp8_current_scale", current_scale}};
    if (argc > 1 && !strcmp(argv[1], "forward.gemm_fp8_native") && !mg_cpu_has_bf16()) {
        printf("SKIP: this CPU has no AVX512-BF16; the native path cannot run here\n");
        return 77;
    }
    return tk_main(argc, argv, cases, 4);
}

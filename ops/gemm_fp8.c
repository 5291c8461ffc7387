/* fp8 matrix products on CPUs: Transformer Engine's fp8 GEMM, element by element.
 *
 *   C = (1/sa · 1/sb) · Σ_k qa[i][k] · qb[k][j],   qa = fp8_a(sa · op(A)),  qb = fp8_b(sb · op(B))
 *
 * Each operand is scaled by its per-tensor scale (fp32 product), rounded to its fp8
 * format (ops/convert.h: E4M3 or E5M2, to nearest even, saturating as Transformer
 * Engine's casts do), and the products are summed in fp32; the output is unscaled by
 * the product of the two inverse scales (cuBLASLt's scale_a · scale_b, each the inverse
 * of a quantisation scale). Every fp8 value is a bf16 value and a product of two is exact
 * in fp32, so the sums are those of the bf16 kernel (ops/gemm_bf16.c) on the quantised
 * operands: the same blocking, pairing and order, which are part of the definition, and
 * its native (AVX512-BF16) and portable micro-kernels give the same bits here too. */
#include <stdlib.h>

#include "mgraph/fp8.h"
#include "ops/convert.h"
#include "ops/gemm.h"

static float quant(float x, float scale, mg_dtype fmt) { return mg_f8_to_float(mg_f8_round(x * scale, fmt), fmt); }

int mg_gemm_fp8(bool native, bool ta, bool tb, int M, int N, int K, const float *A, int lda, mg_fp8_operand qa,
                const float *B, int ldb, mg_fp8_operand qb, float *C, int ldc, mg_error *err) {
    if ((qa.fmt != MG_F8E4M3 && qa.fmt != MG_F8E5M2) || (qb.fmt != MG_F8E4M3 && qb.fmt != MG_F8E5M2))
        return mg_error_set(err, MG_ERR_INVALID, "fp8 GEMM: operand formats must be E4M3 or E5M2");
    if (!(qa.scale > 0) || !(qb.scale > 0))
        return mg_error_set(err, MG_ERR_INVALID, "fp8 GEMM: scales must be positive (got %g, %g)", (double)qa.scale,
                            (double)qb.scale);
    if (M <= 0 || N <= 0) return MG_OK;
    float *a = malloc(((size_t)M * (K > 0 ? K : 1) + (size_t)(K > 0 ? K : 1) * N) * sizeof *a);
    if (!a) return mg_error_set(err, MG_ERR_NOMEM, "fp8 GEMM: out of memory quantising %d x %d x %d", M, N, K);
    float *b = a + (size_t)M * (K > 0 ? K : 1);
    for (int i = 0; i < M; i++)
        for (int k = 0; k < K; k++)
            a[(size_t)i * K + k] = quant(ta ? A[(size_t)k * lda + i] : A[(size_t)i * lda + k], qa.scale, qa.fmt);
    for (int k = 0; k < K; k++)
        for (int j = 0; j < N; j++)
            b[(size_t)k * N + j] = quant(tb ? B[(size_t)j * ldb + k] : B[(size_t)k * ldb + j], qb.scale, qb.fmt);
    float alpha = (1.0f / qa.scale) * (1.0f / qb.scale);
    int rc = mg_gemm_bf16(native, false, false, M, N, K, alpha, a, K > 0 ? K : 1, b, N, 0.0f, C, ldc, err);
    free(a);
    return rc;
}

float mg_fp8_amax(const float *x, int64_t n) {
    float m = 0.0f;
    for (int64_t i = 0; i < n; i++) {
        float v = x[i] < 0 ? -x[i] : x[i];
        if (v != v) return v; /* a NaN wins */
        if (v > m) m = v;
    }
    return m;
}

bool mg_fp8_wants_amax(const mg_exec_info *info) {
    return info && info->fp8 && (info->fp8->o.recipe == MG_FP8_TENSORWISE || info->training);
}

int mg_fp8_scales(const mg_node *n, const mg_exec_info *info, const float amax[2], mg_fp8_operand q[2], mg_error *err) {
    mg_fp8_state *s = info ? info->fp8 : NULL;
    int gemm = n->attrs.matmul.fp8_gemm;
    if (!s || gemm < 1 || (int64_t)gemm * MG_FP8_SLOTS > s->n_slots)
        return mg_error_set(err, MG_ERR_INVALID, "matmul: fp8 product %d without its recipe's state (%d slots)", gemm,
                            s ? s->n_slots : 0);
    for (int i = 0; i < 2; i++) {
        int role = n->attrs.matmul.fp8_role[i];
        if (role < 1 || role > MG_FP8_SLOTS)
            return mg_error_set(err, MG_ERR_INVALID, "matmul: fp8 product %d has no scaling slot for operand %d", gemm, i);
        int slot = (gemm - 1) * MG_FP8_SLOTS + role - 1;
        q[i].fmt = mg_fp8_slot_format(&s->o, slot);
        if (s->o.recipe == MG_FP8_TENSORWISE) {
            q[i].scale = mg_fp8_current_scale(amax[i], q[i].fmt);
        } else {
            q[i].scale = s->scale[slot];
            if (info->training) mg_fp8_record_amax(s, slot, amax[i]);
        }
    }
    return MG_OK;
}

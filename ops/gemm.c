/* mg_gemm: the CPU matrix product every kernel calls, in the process's GEMM precision. */
#include "ops/gemm.h"

#include <cblas.h>
#include <string.h>

#ifdef MG_CUDA
#include "ops/cuda/cuda_common.h"
#endif

/* Set before the workers start (mgraph-run does it while parsing flags); read by every
 * kernel call, hence atomic. native: the CPU runs the AVX512-BF16 kernel. */
static int g_prec = MG_GEMM_FP32;
static int g_native;

int mg_gemm_set_precision(mg_gemm_precision p, bool emulate, mg_error *err) {
    if (p != MG_GEMM_FP32 && p != MG_GEMM_BF16)
        return mg_error_set(err, MG_ERR_INVALID, "GEMM precision %d is neither fp32 nor bf16", (int)p);
    bool native = p == MG_GEMM_BF16 && mg_cpu_has_bf16();
    if (p == MG_GEMM_BF16 && !native && !emulate)
        return mg_error_set(err, MG_ERR_UNSUPPORTED,
                            "bf16 matrix products on CPUs need AVX512-BF16, which this CPU lacks "
                            "(MG_CPU_BF16=emulate runs the same arithmetic in a portable kernel, slower than fp32)");
    __atomic_store_n(&g_native, native, __ATOMIC_RELAXED);
    __atomic_store_n(&g_prec, (int)p, __ATOMIC_RELAXED);
#ifdef MG_CUDA
    /* The CUDA workers' cuBLAS products likewise (bf16 inputs, fp32 accumulation); back
     * to fp32, they return to the mode they had before (MG_CUDA_GEMM may have asked tf32). */
    static int cuda_before = -1;
    if (p == MG_GEMM_BF16) {
        if (cuda_before < 0) cuda_before = (int)mg_cuda_gemm_precision();
        mg_cuda_set_gemm_precision(MG_CUDA_GEMM_BF16);
    } else if (cuda_before >= 0) {
        mg_cuda_set_gemm_precision((mg_cuda_gemm)cuda_before);
        cuda_before = -1;
    }
#endif
    return MG_OK;
}

bool mg_gemm_native(void) { return mg_cpu_has_bf16(); }

mg_gemm_precision mg_gemm_precision_get(void) { return (mg_gemm_precision)__atomic_load_n(&g_prec, __ATOMIC_RELAXED); }

int mg_gemm(bool ta, bool tb, int M, int N, int K, float alpha, const float *A, int lda, const float *B, int ldb,
            float beta, float *C, int ldc, mg_error *err) {
    if (__atomic_load_n(&g_prec, __ATOMIC_RELAXED) == MG_GEMM_BF16)
        return mg_gemm_bf16(__atomic_load_n(&g_native, __ATOMIC_RELAXED), ta, tb, M, N, K, alpha, A, lda, B, ldb, beta,
                            C, ldc, err);
    if (M == 1 && N > 1) {
        /* One row (a token decoded at a time: mgraph-generate): a matrix-vector product.
         * sgemm would pack the whole of B for that row, several times the work of reading
         * it once (13x slower decoding of GPT-2 124M). y = op(B)ᵀ x, x = op(A)'s row. */
        if (beta == 0.0f) memset(C, 0, (size_t)N * sizeof *C); /* (C may hold anything: gemv scales it) */
        cblas_sgemv(CblasRowMajor, tb ? CblasNoTrans : CblasTrans, tb ? N : K, tb ? K : N, alpha, B, ldb, A,
                    ta ? lda : 1, beta, C, 1);
        return MG_OK;
    }
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N, K, alpha, A, lda,
                B, ldb, beta, C, ldc);
    return MG_OK;
}

/* Matrix products for the CPU kernels (library-internal): every op that multiplies
 * matrices calls mg_gemm, which runs OpenBLAS's sgemm or, under MG_GEMM_BF16
 * (mg_gemm_set_precision), the bf16 kernel of ops/gemm_bf16.c. */
#ifndef MG_OPS_GEMM_H
#define MG_OPS_GEMM_H

#include <stdbool.h>
#include <stdint.h>

#include "mgraph/error.h"
#include "mgraph/exec.h"

/* C = alpha·op(A)·op(B) + beta·C, row-major, as cblas_sgemm (C is not read when beta == 0). */
int mg_gemm(bool ta, bool tb, int M, int N, int K, float alpha, const float *A, int lda, const float *B, int ldb,
            float beta, float *C, int ldc, mg_error *err);

/* The bf16 kernel: native = the AVX512-BF16 micro-kernel, else the portable one (same bits). */
int mg_gemm_bf16(bool native, bool ta, bool tb, int M, int N, int K, float alpha, const float *A, int lda,
                 const float *B, int ldb, float beta, float *C, int ldc, mg_error *err);
/* fp32 -> bf16 bits, round to nearest even (NaN stays NaN); and back (exact). */
uint16_t mg_bf16_round(float f);
float mg_bf16_to_float(uint16_t h);

#endif

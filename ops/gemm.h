/* Matrix products for the CPU kernels (library-internal): every op that multiplies
 * matrices calls mg_gemm, which runs OpenBLAS's sgemm or, under MG_GEMM_BF16
 * (mg_gemm_set_precision), the bf16 kernel of ops/gemm_bf16.c. */
#ifndef MG_OPS_GEMM_H
#define MG_OPS_GEMM_H

#include <stdbool.h>
#include <stdint.h>

#include "mgraph/error.h"
#include "mgraph/exec.h"
#include "mgraph/graph.h"

/* C = alpha·op(A)·op(B) + beta·C, row-major, as cblas_sgemm (C is not read when beta == 0). */
int mg_gemm(bool ta, bool tb, int M, int N, int K, float alpha, const float *A, int lda, const float *B, int ldb,
            float beta, float *C, int ldc, mg_error *err);

/* The bf16 kernel: native = the AVX512-BF16 micro-kernel, else the portable one (same bits). */
int mg_gemm_bf16(bool native, bool ta, bool tb, int M, int N, int K, float alpha, const float *A, int lda,
                 const float *B, int ldb, float beta, float *C, int ldc, mg_error *err);
/* One operand of an fp8 GEMM: its format (MG_F8E4M3 or MG_F8E5M2) and its quantisation
 * scale (stored value = fp8(scale · x); Transformer Engine's scale, not scale_inv). */
typedef struct mg_fp8_operand {
    mg_dtype fmt;
    float scale;
} mg_fp8_operand;
/* C = (1/sa · 1/sb) · fp8(sa·op(A)) · fp8(sb·op(B)), products summed in fp32 in the bf16
 * kernel's order (ops/gemm_fp8.c); native as mg_gemm_bf16. C is overwritten (beta 0). */
int mg_gemm_fp8(bool native, bool ta, bool tb, int M, int N, int K, const float *A, int lda, mg_fp8_operand qa,
                const float *B, int ldb, mg_fp8_operand qb, float *C, int ldc, mg_error *err);
/* max |x| of x[0..n) (NaN when any is NaN). */
float mg_fp8_amax(const float *x, int64_t n);
/* An fp8 product's operands (a node marked by mg_fp8_mark): their formats and scales
 * from the recipe's state in info (delayed: the slot's scale, and amax[i] is recorded
 * while training; tensorwise: from amax[i]). Shared by the CPU and CUDA kernels. */
int mg_fp8_scales(const mg_node *n, const mg_exec_info *info, const float amax[2], mg_fp8_operand q[2], mg_error *err);
/* Whether mg_fp8_scales needs the operands' amaxes (tensorwise, or training under delayed). */
bool mg_fp8_wants_amax(const mg_exec_info *info);
/* Whether bf16 products run natively (the GEMM precision's choice, for the fp8 kernel). */
bool mg_gemm_native(void);
/* fp32 -> bf16 bits, round to nearest even (NaN stays NaN); and back (exact). */
uint16_t mg_bf16_round(float f);
float mg_bf16_to_float(uint16_t h);

#endif

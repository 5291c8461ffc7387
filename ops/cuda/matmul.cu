/* matmul on cuBLAS: the row-major C = op(A) op(B) of ops/matmul.c computed as the
 * column-major Cᵀ = op(B)ᵀ op(A)ᵀ, so no data is transposed.
 *
 * Shared 2-D B with !trans_a: one GEMM over the flattened rows, as on the CPU;
 * otherwise one strided-batched GEMM (B stride 0 when shared). Tensors stay fp32; the
 * precision (mg_cuda_gemm_precision) picks the compute type: exact fp32, TF32 or bf16
 * tensor cores, always accumulating in fp32.
 */
#include <limits.h>

#include "ops/cuda/blas.h"

static thread_local cublasHandle_t t_blas;

int mg_cuda_blas(cublasHandle_t *h, mg_error *err) {
    if (!t_blas) {
        cublasStatus_t s = cublasCreate(&t_blas);
        if (s != CUBLAS_STATUS_SUCCESS) {
            t_blas = NULL;
            return mg_error_set(err, MG_ERR_RUNTIME, "cublasCreate: %s", cublasGetStatusString(s));
        }
    }
    cublasStatus_t s = cublasSetStream(t_blas, mg_cuda_stream());
    if (s != CUBLAS_STATUS_SUCCESS) return mg_error_set(err, MG_ERR_RUNTIME, "cublasSetStream: %s", cublasGetStatusString(s));
    *h = t_blas;
    return MG_OK;
}

cublasComputeType_t mg_cuda_compute_type(void) {
    switch (mg_cuda_gemm_precision()) {
    case MG_CUDA_GEMM_TF32: return CUBLAS_COMPUTE_32F_FAST_TF32;
    case MG_CUDA_GEMM_BF16: return CUBLAS_COMPUTE_32F_FAST_16BF;
    default: return CUBLAS_COMPUTE_32F;
    }
}

extern "C" int mg_cuda_matmul_fp8(const mg_kernel_args *a, mg_error *err); /* ops/cuda/gemm_fp8.cu */

extern "C" int mg_cuda_matmul(const mg_kernel_args *a, mg_error *err) {
    const mg_node *n = a->node;
    if (n->attrs.matmul.fp8_gemm) return mg_cuda_matmul_fp8(a, err); /* a linear layer's product under fp8 */
    const mg_tensor *ta_ = n->in[0], *tb_ = n->in[1];
    bool ta = n->attrs.matmul.trans_a, tb = n->attrs.matmul.trans_b;
    int na = ta_->ndim;
    int64_t batch = mg_dims_prod(ta_->shape, 0, na - 2);
    int64_t M = ta ? ta_->shape[na - 1] : ta_->shape[na - 2];
    int64_t K = ta ? ta_->shape[na - 2] : ta_->shape[na - 1];
    int64_t N = tb ? tb_->shape[tb_->ndim - 2] : tb_->shape[tb_->ndim - 1];
    bool shared = tb_->ndim == 2;
    int64_t calls = batch, rows = M;
    if (shared && !ta) {
        rows = batch * M;
        calls = 1;
    }
    if (rows > INT_MAX || N > INT_MAX || K > INT_MAX || calls > INT_MAX)
        return mg_error_set(err, MG_ERR_UNSUPPORTED, "matmul: dimensions (%lld, %lld, %lld) exceed the cuBLAS int range",
                            (long long)rows, (long long)N, (long long)K);
    if (rows == 0 || N == 0) return MG_OK;
    cublasHandle_t h = NULL;
    int rc = mg_cuda_blas(&h, err);
    if (rc) return rc;
    int lda = (int)(ta ? rows : K), ldb = (int)(tb ? K : N);
    long long sa = M * K, sb = shared ? 0 : K * N, sc = M * N;
    const float one = 1.0f, zero = 0.0f;
    /* column-major: C'[N x rows] = op(B)' [N x K] * op(A)' [K x rows] */
    cublasOperation_t opb = tb ? CUBLAS_OP_T : CUBLAS_OP_N, opa = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasStatus_t s;
    if (calls == 1)
        s = cublasGemmEx(h, opb, opa, (int)N, (int)rows, (int)K, &one, a->in[1], CUDA_R_32F, ldb, a->in[0], CUDA_R_32F,
                         lda, &zero, a->out[0], CUDA_R_32F, (int)N, mg_cuda_compute_type(), CUBLAS_GEMM_DEFAULT);
    else
        s = cublasGemmStridedBatchedEx(h, opb, opa, (int)N, (int)rows, (int)K, &one, a->in[1], CUDA_R_32F, ldb, sb,
                                       a->in[0], CUDA_R_32F, lda, sa, &zero, a->out[0], CUDA_R_32F, (int)N, sc,
                                       (int)calls, mg_cuda_compute_type(), CUBLAS_GEMM_DEFAULT);
    if (s != CUBLAS_STATUS_SUCCESS)
        return mg_error_set(err, MG_ERR_RUNTIME, "matmul: cuBLAS GEMM (%lld x %lld x %lld, batch %lld): %s",
                            (long long)rows, (long long)N, (long long)K, (long long)calls, cublasGetStatusString(s));
    return MG_OK;
}

/* fp8 products on CUDA workers (mgraph/fp8.h): cuBLASLt's fp8 GEMM (Hopper / Ada and
 * later: compute capability 8.9+, CUDA 12.1+), as Transformer Engine runs it.
 *
 * Each operand is scaled and rounded to its fp8 format on the device with the CPU's
 * rounding (ops/narrow.h: the same bytes as ops/gemm_fp8.c's quantisation), laid out
 * K-contiguous (cuBLASLt's fp8 "TN" layout: the only one it takes), its amax taken with
 * an atomic max of the bits of |x| where the recipe needs it (copied to the host: the
 * recipe's state is the host's, mgraph/fp8.h); the product is summed in fp32 by the
 * tensor cores and scaled by alpha = (1/sa)(1/sb) into the fp32 output. The quantised
 * operands equal the CPU's bit for bit; the sums' order is cuBLASLt's, so outputs agree
 * with the CPU kernel to fp32 summation error, not bitwise.
 *
 * Requirements checked here (MG_ERR_UNSUPPORTED otherwise, naming them): compute
 * capability 8.9+, one product per call (a batched fp8 product is never marked), K and
 * N multiples of 16 (cuBLASLt's fp8 alignment; Transformer Engine asks the same of its
 * fp8 layers). Untested where this was written: no GPU (tests/cuda's harness runs it on one). */
#include <cublasLt.h>
#include <limits.h>
#include <string.h>

#include "ops/cuda/cuda_common.h"
#include "ops/narrow.h"

extern "C" {
#include "mgraph/fp8.h"
#include "ops/gemm.h"
}

/* op(X) (rows x cols of the logical matrix, X stored row-major as [rows][cols], or as
 * [cols][rows] when trans) -> out[r][c], fp8 codes of scale * x, K-contiguous */
__global__ static void k_quant(uint8_t *out, const float *x, bool trans, int64_t rows, int64_t cols, float scale,
                               int fmt) {
    const mg_narrow e4 = MG_NARROW_E4M3, e5 = MG_NARROW_E5M2;
    int64_t n = rows * cols;
    MG_GRID_STRIDE(i, n) {
        int64_t r = i / cols, c = i % cols;
        float v = trans ? x[c * rows + r] : x[r * cols + c];
        out[i] = (uint8_t)mg_narrow_round(__float_as_uint(v * scale), fmt == MG_F8E5M2 ? &e5 : &e4);
    }
}

__global__ static void k_amax(unsigned *out, const float *x, int64_t n) {
    unsigned m = 0;
    MG_GRID_STRIDE(i, n) {
        unsigned u = __float_as_uint(fabsf(x[i]));
        if (isnan(x[i])) u = 0x7fc00000u; /* orders above every value, as on the CPU */
        m = u > m ? u : m;
    }
    atomicMax(out, m);
}

static thread_local cublasLtHandle_t t_lt;

static int capability_ok(mg_error *err) {
    static int ok = -1; /* probed once: every worker's device is the same model here */
    if (ok < 0) {
        int dev = 0, major = 0, minor = 0;
        if (cudaGetDevice(&dev) != cudaSuccess ||
            cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
            cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess)
            return mg_error_set(err, MG_ERR_RUNTIME, "fp8 GEMM: cannot read the device's compute capability");
        ok = major > 8 || (major == 8 && minor >= 9);
        if (!ok)
            return mg_error_set(err, MG_ERR_UNSUPPORTED,
                                "fp8 GEMMs need compute capability 8.9 or higher (Ada, Hopper); this device has %d.%d",
                                major, minor);
    }
    return ok ? MG_OK : mg_error_set(err, MG_ERR_UNSUPPORTED, "fp8 GEMMs need compute capability 8.9 or higher");
}

static int lt_check(cublasStatus_t s, const char *what, mg_error *err) {
    return s == CUBLAS_STATUS_SUCCESS ? MG_OK
                                      : mg_error_set(err, MG_ERR_RUNTIME, "fp8 GEMM: %s: %s", what, cublasGetStatusString(s));
}

extern "C" int mg_cuda_matmul_fp8(const mg_kernel_args *a, mg_error *err) {
    const mg_node *n = a->node;
    const mg_tensor *A = n->in[0], *B = n->in[1];
    bool ta = n->attrs.matmul.trans_a, tb = n->attrs.matmul.trans_b;
    int na = A->ndim;
    int64_t batch = mg_dims_prod(A->shape, 0, na - 2);
    int64_t M = ta ? A->shape[na - 1] : A->shape[na - 2], K = ta ? A->shape[na - 2] : A->shape[na - 1];
    int64_t N = tb ? B->shape[B->ndim - 2] : B->shape[B->ndim - 1];
    if (B->ndim != 2 || (ta && batch > 1))
        return mg_error_set(err, MG_ERR_UNSUPPORTED, "matmul: a batched fp8 product (%s) on a CUDA worker",
                            n->out[0]->name);
    int64_t rows = batch * M;
    if (rows > INT_MAX || N > INT_MAX || K > INT_MAX)
        return mg_error_set(err, MG_ERR_UNSUPPORTED, "matmul: dimensions (%lld, %lld, %lld) exceed cuBLASLt's int range",
                            (long long)rows, (long long)N, (long long)K);
    if (K % 16 || N % 16)
        return mg_error_set(err, MG_ERR_UNSUPPORTED,
                            "fp8 GEMM %s: cuBLASLt needs K (%lld) and N (%lld) to be multiples of 16", n->out[0]->name,
                            (long long)K, (long long)N);
    int rc = capability_ok(err);
    if (rc) return rc;
    if (rows == 0 || N == 0) return MG_OK;
    cudaStream_t st = mg_cuda_stream();
    int64_t numel[2] = {rows * K, K * N};
    /* the amaxes the recipe needs, on the host */
    float amax[2] = {0, 0};
    if (mg_fp8_wants_amax(a->info)) {
        unsigned *d = NULL, h[2] = {0, 0};
        if ((rc = mg_cuda_scratch((void **)&d, 2 * sizeof *d, "fp8 amax", err))) return rc;
        rc = mg_cuda_check(cudaMemsetAsync(d, 0, 2 * sizeof *d, st), "fp8 amax", err);
        for (int i = 0; i < 2 && !rc; i++) {
            k_amax<<<mg_cuda_blocks(numel[i], MG_CUDA_THREADS), MG_CUDA_THREADS, 0, st>>>(d + i, (const float *)a->in[i],
                                                                                         numel[i]);
            rc = mg_cuda_check_launch("fp8 amax", err);
        }
        if (!rc) rc = mg_cuda_check(cudaMemcpyAsync(h, d, sizeof h, cudaMemcpyDeviceToHost, st), "fp8 amax", err);
        if (!rc) rc = mg_cuda_check(cudaStreamSynchronize(st), "fp8 amax", err);
        mg_cuda_scratch_free(d);
        if (rc) return rc;
        memcpy(amax, h, sizeof amax);
    }
    mg_fp8_operand q[2];
    if ((rc = mg_fp8_scales(n, a->info, amax, q, err))) return rc;
    if (q[0].fmt == MG_F8E5M2 && q[1].fmt == MG_F8E5M2)
        return mg_error_set(err, MG_ERR_UNSUPPORTED, "fp8 GEMM: cuBLASLt has no E5M2 x E5M2 product");
    /* quantised operands, K-contiguous: qa [rows][K], qb [N][K] */
    uint8_t *qa = NULL, *qb = NULL;
    if ((rc = mg_cuda_scratch((void **)&qa, (size_t)(numel[0] + numel[1]) + 256, "fp8 operands", err))) return rc;
    qb = qa + ((numel[0] + 255) / 256) * 256;
    k_quant<<<mg_cuda_blocks(numel[0], MG_CUDA_THREADS), MG_CUDA_THREADS, 0, st>>>(qa, (const float *)a->in[0], ta, rows,
                                                                                  K, q[0].scale, (int)q[0].fmt);
    rc = mg_cuda_check_launch("fp8 quantise", err);
    /* op(B)ᵀ is [N][K]: B stored [N][K] when tb, else [K][N] (transposed) */
    if (!rc) {
        k_quant<<<mg_cuda_blocks(numel[1], MG_CUDA_THREADS), MG_CUDA_THREADS, 0, st>>>(qb, (const float *)a->in[1], !tb, N,
                                                                                      K, q[1].scale, (int)q[1].fmt);
        rc = mg_cuda_check_launch("fp8 quantise", err);
    }
    if (!rc && !t_lt) rc = lt_check(cublasLtCreate(&t_lt), "cublasLtCreate", err);
    /* column-major: C'[N x rows] = qbᵀ... qb is K x N column-major (ld K), transposed;
     * qa is K x rows column-major (ld K) */
    cublasLtMatmulDesc_t desc = NULL;
    cublasLtMatrixLayout_t la = NULL, lb = NULL, lc = NULL;
    cublasOperation_t opT = CUBLAS_OP_T, opN = CUBLAS_OP_N;
    cudaDataType_t tA = q[1].fmt == MG_F8E5M2 ? CUDA_R_8F_E5M2 : CUDA_R_8F_E4M3;
    cudaDataType_t tB = q[0].fmt == MG_F8E5M2 ? CUDA_R_8F_E5M2 : CUDA_R_8F_E4M3;
    if (!rc) rc = lt_check(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), "descriptor", err);
    if (!rc)
        rc = lt_check(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &opT, sizeof opT), "transa", err);
    if (!rc)
        rc = lt_check(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &opN, sizeof opN), "transb", err);
    if (!rc) rc = lt_check(cublasLtMatrixLayoutCreate(&la, tA, (uint64_t)K, (uint64_t)N, K), "layout A", err);
    if (!rc) rc = lt_check(cublasLtMatrixLayoutCreate(&lb, tB, (uint64_t)K, (uint64_t)rows, K), "layout B", err);
    if (!rc) rc = lt_check(cublasLtMatrixLayoutCreate(&lc, CUDA_R_32F, (uint64_t)N, (uint64_t)rows, N), "layout C", err);
    float alpha = (1.0f / q[0].scale) * (1.0f / q[1].scale), beta = 0.0f;
    if (!rc)
        rc = lt_check(cublasLtMatmul(t_lt, desc, &alpha, qb, la, qa, lb, &beta, a->out[0], lc, a->out[0], lc, NULL, NULL, 0,
                                     st),
                      "cublasLtMatmul", err);
    if (lc) cublasLtMatrixLayoutDestroy(lc);
    if (lb) cublasLtMatrixLayoutDestroy(lb);
    if (la) cublasLtMatrixLayoutDestroy(la);
    if (desc) cublasLtMatmulDescDestroy(desc);
    mg_cuda_scratch_free(qa);
    return rc;
}

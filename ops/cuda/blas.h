/* The calling thread's cuBLAS handle, bound to the current stream, and the compute
 * type of the chosen GEMM precision (ops/cuda/matmul.cu). C++ only. */
#ifndef MG_OPS_CUDA_BLAS_H
#define MG_OPS_CUDA_BLAS_H

#include <cublas_v2.h>

#include "ops/cuda/cuda_common.h"

int mg_cuda_blas(cublasHandle_t *h, mg_error *err);
cublasComputeType_t mg_cuda_compute_type(void);

#endif

/* Shared by the CUDA kernels (the .cu files in ops/cuda) and their C callers (library-internal).
 *
 * Kernels follow the CPU calling convention (mg_kernel_args) with device pointers in
 * in[]/out[]. They launch asynchronously on the calling thread's current stream
 * (mg_cuda_stream): a StarPU CUDA worker sets it to the worker's stream before each
 * task, other callers get the legacy default stream. GEMMs use one cuBLAS handle per
 * thread, bound to that stream at each call.
 */
#ifndef MG_OPS_CUDA_COMMON_H
#define MG_OPS_CUDA_COMMON_H

#include <cuda_runtime.h>

#include "ops/op.h"

#ifdef __cplusplus
extern "C" {
#endif

/* CUDA devices usable by this process: 0 without a driver or a GPU (the error is
 * remembered for mg_cuda_status). Probed once. */
int mg_cuda_device_count(void);
/* Why there is no device ("" when there is one). */
const char *mg_cuda_status(void);

cudaStream_t mg_cuda_stream(void);
void mg_cuda_set_stream(cudaStream_t s);

/* GEMM arithmetic for the fp32 tensors: exact fp32, TF32 tensor cores, or bf16 tensor
 * cores (inputs rounded to bf16, fp32 accumulation and output). */
typedef enum mg_cuda_gemm { MG_CUDA_GEMM_FP32, MG_CUDA_GEMM_TF32, MG_CUDA_GEMM_BF16 } mg_cuda_gemm;
/* Default: $MG_CUDA_GEMM (fp32 | tf32 | bf16), else fp32. */
mg_cuda_gemm mg_cuda_gemm_precision(void);
void mg_cuda_set_gemm_precision(mg_cuda_gemm p);
/* "fp32" / "tf32" / "bf16" -> 0 and *p, else MG_ERR_INVALID. */
int mg_cuda_gemm_parse(const char *s, mg_cuda_gemm *p, mg_error *err);

/* Stream-ordered scratch memory on the current stream (cudaMallocAsync pool): valid
 * for kernels launched on that stream until mg_cuda_scratch_free. */
int mg_cuda_scratch(void **p, size_t bytes, const char *what, mg_error *err);
void mg_cuda_scratch_free(void *p);

/* Records the launch error of `what` (cudaGetLastError), if any; returns a status. */
int mg_cuda_check_launch(const char *what, mg_error *err);
int mg_cuda_check(cudaError_t e, const char *what, mg_error *err);

/* The CUDA kernel of each op kind (NULL: none); ops/registry.c copies it into the
 * op's cuda slot. */
extern const mg_kernel_fn mg_cuda_kernels[MG_OP_COUNT];

/* Narrow storage on the device (ops/cuda/convert.cu, the roundings of ops/narrow.h):
 * n elements converted between f32 and a narrow float on the current stream; the cuda
 * slot of every op that is not MG_OPF_STORAGE (its kernel between conversions, as
 * ops/registry.c does on the CPU); a concat whose parts are stored otherwise than it. */
int mg_cuda_convert(void *dst, mg_dtype dst_dt, const void *src, mg_dtype src_dt, int64_t n, mg_error *err);
int mg_cuda_converting(const mg_kernel_args *a, mg_error *err);
int mg_cuda_concat_converting(const mg_kernel_args *a, mg_error *err);

#ifdef __cplusplus
}

/* ---- device-side helpers (C++ only) ---------------------------------------------- */
/* Blocks for a grid-stride loop over n elements, capped so huge tensors loop. */
static inline unsigned mg_cuda_blocks(int64_t n, int threads) {
    int64_t b = (n + threads - 1) / threads;
    if (b < 1) b = 1;
    return (unsigned)(b > 65536 ? 65536 : b);
}
#define MG_CUDA_THREADS 256
#define MG_GRID_STRIDE(i, n) \
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (int64_t)gridDim.x * blockDim.x)

/* Sum of v over the block (blockDim.x a multiple of 32, <= 1024); every thread gets it.
 * `sh` holds 32 floats. */
template <typename T>
__device__ inline T mg_block_sum(T v, T *sh) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    __syncthreads(); /* sh may still be read by a previous call */
    if (lane == 0) sh[w] = v;
    __syncthreads();
    v = lane < nw ? sh[lane] : (T)0;
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
template <typename T>
__device__ inline T mg_block_max(T v, T *sh) {
    for (int o = 16; o > 0; o >>= 1) v = max(v, __shfl_xor_sync(0xffffffffu, v, o));
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    __syncthreads();
    if (lane == 0) sh[w] = v;
    __syncthreads();
    v = lane < nw ? sh[lane] : sh[0];
    for (int o = 16; o > 0; o >>= 1) v = max(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
#endif

#endif

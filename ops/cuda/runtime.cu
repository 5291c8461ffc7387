/* Device discovery, per-thread streams and cuBLAS handles, GEMM precision. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <pthread.h>

#include "ops/cuda/cuda_common.h"

static pthread_once_t g_probe = PTHREAD_ONCE_INIT;
static int g_devices;
static char g_status[160];

static void probe(void) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        /* no driver (cudaErrorInsufficientDriver) or no device: run on CPUs */
        snprintf(g_status, sizeof g_status, "no CUDA device: cudaGetDeviceCount: %s (%d)", cudaGetErrorString(e), (int)e);
        cudaGetLastError(); /* clear the sticky-free error so later calls start clean */
        n = 0;
    } else if (n == 0) {
        snprintf(g_status, sizeof g_status, "no CUDA device: cudaGetDeviceCount found none");
    }
    g_devices = n;
}

extern "C" int mg_cuda_device_count(void) {
    pthread_once(&g_probe, probe);
    return g_devices;
}

extern "C" const char *mg_cuda_status(void) {
    pthread_once(&g_probe, probe);
    return g_status;
}

static thread_local cudaStream_t t_stream = 0;

extern "C" cudaStream_t mg_cuda_stream(void) { return t_stream; }
extern "C" void mg_cuda_set_stream(cudaStream_t s) { t_stream = s; }

static pthread_once_t g_prec_once = PTHREAD_ONCE_INIT;
static int g_prec = MG_CUDA_GEMM_FP32;

static void prec_from_env(void) {
    const char *s = getenv("MG_CUDA_GEMM");
    mg_cuda_gemm p = MG_CUDA_GEMM_FP32;
    if (s && *s && mg_cuda_gemm_parse(s, &p, NULL) == MG_OK) __atomic_store_n(&g_prec, (int)p, __ATOMIC_RELAXED);
}

extern "C" mg_cuda_gemm mg_cuda_gemm_precision(void) {
    pthread_once(&g_prec_once, prec_from_env);
    return (mg_cuda_gemm)__atomic_load_n(&g_prec, __ATOMIC_RELAXED);
}

extern "C" void mg_cuda_set_gemm_precision(mg_cuda_gemm p) {
    pthread_once(&g_prec_once, prec_from_env);
    __atomic_store_n(&g_prec, (int)p, __ATOMIC_RELAXED);
}

extern "C" int mg_cuda_gemm_parse(const char *s, mg_cuda_gemm *p, mg_error *err) {
    if (s && !strcmp(s, "fp32")) *p = MG_CUDA_GEMM_FP32;
    else if (s && !strcmp(s, "tf32")) *p = MG_CUDA_GEMM_TF32;
    else if (s && !strcmp(s, "bf16")) *p = MG_CUDA_GEMM_BF16;
    else return mg_error_set(err, MG_ERR_INVALID, "GEMM precision '%s': expected fp32, tf32 or bf16", s ? s : "(null)");
    return MG_OK;
}

extern "C" int mg_cuda_check(cudaError_t e, const char *what, mg_error *err) {
    if (e == cudaSuccess) return MG_OK;
    return mg_error_set(err, MG_ERR_RUNTIME, "%s: CUDA error %s (%s)", what, cudaGetErrorName(e), cudaGetErrorString(e));
}

extern "C" int mg_cuda_check_launch(const char *what, mg_error *err) {
    return mg_cuda_check(cudaGetLastError(), what, err);
}

extern "C" int mg_cuda_scratch(void **p, size_t bytes, const char *what, mg_error *err) {
    *p = NULL;
    return mg_cuda_check(cudaMallocAsync(p, bytes ? bytes : 16, mg_cuda_stream()), what, err);
}

extern "C" void mg_cuda_scratch_free(void *p) {
    if (p) cudaFreeAsync(p, mg_cuda_stream());
}

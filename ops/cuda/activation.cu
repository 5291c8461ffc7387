/* gelu (tanh approximation), gelu_erf (exact), silu, squared_relu, swiglu and their fused
 * backward ops; the same formulas as ops/activation.c (gelu as x * sigmoid(2u): no
 * cancellation; gelu_erf in double). */
#include "ops/cuda/cuda_common.h"

#define GELU_K 0.7978845608028654f
#define GELU_C 0.044715f

__device__ inline float sigmoid_f(float x) { return 1.0f / (1.0f + expf(-x)); }
__device__ inline float gelu_f(float x) { return x * sigmoid_f(2.0f * GELU_K * (x + GELU_C * x * x * x)); }
__device__ inline float gelu_df(float x) {
    float x2 = x * x, u = GELU_K * (x + GELU_C * x2 * x);
    float s = sigmoid_f(2.0f * u);
    return s + 2.0f * x * s * (1.0f - s) * GELU_K * (1.0f + 3.0f * GELU_C * x2);
}

__device__ inline float gelu_erf_f(float x) { return (float)(0.5 * x * (1.0 + erf(x * 0.70710678118654752440))); }
__device__ inline float gelu_erf_df(float x) {
    double d = x;
    return (float)(0.5 * (1.0 + erf(d * 0.70710678118654752440)) + d * 0.39894228040143267794 * exp(-0.5 * d * d));
}

enum { ACT_GELU, ACT_SILU, ACT_RELU2, ACT_GELU_ERF };

template <int A>
__global__ void k_act(const float *__restrict__ x, float *y, int64_t n) {
    MG_GRID_STRIDE(i, n) {
        float v = x[i], r = v > 0.0f ? v : 0.0f;
        y[i] = A == ACT_GELU ? gelu_f(v) : A == ACT_GELU_ERF ? gelu_erf_f(v) : A == ACT_RELU2 ? r * r : v * sigmoid_f(v);
    }
}

template <int A>
__global__ void k_act_bwd(const float *__restrict__ dy, const float *__restrict__ x, float *dx, int64_t n) {
    MG_GRID_STRIDE(i, n) {
        float v = x[i], d;
        if (A == ACT_GELU) {
            d = gelu_df(v);
        } else if (A == ACT_GELU_ERF) {
            d = gelu_erf_df(v);
        } else if (A == ACT_RELU2) {
            d = v > 0.0f ? 2.0f * v : 0.0f;
        } else {
            float s = sigmoid_f(v);
            d = s * (1.0f + v * (1.0f - s));
        }
        dx[i] = dy[i] * d;
    }
}

template <int A>
static int act(const mg_kernel_args *a, mg_error *err) {
    int64_t n = mg_numel(a->node->out[0]);
    if (n == 0) return MG_OK;
    k_act<A><<<mg_cuda_blocks(n, MG_CUDA_THREADS), MG_CUDA_THREADS, 0, mg_cuda_stream()>>>((const float *)a->in[0],
                                                                                           (float *)a->out[0], n);
    return mg_cuda_check_launch(mg_op_name(a->node->op), err);
}

template <int A>
static int act_bwd(const mg_kernel_args *a, mg_error *err) {
    int64_t n = mg_numel(a->node->out[0]);
    if (n == 0) return MG_OK;
    k_act_bwd<A><<<mg_cuda_blocks(n, MG_CUDA_THREADS), MG_CUDA_THREADS, 0, mg_cuda_stream()>>>(
        (const float *)a->in[0], (const float *)a->in[1], (float *)a->out[0], n);
    return mg_cuda_check_launch(mg_op_name(a->node->op), err);
}

extern "C" int mg_cuda_gelu(const mg_kernel_args *a, mg_error *err) { return act<ACT_GELU>(a, err); }
extern "C" int mg_cuda_gelu_erf(const mg_kernel_args *a, mg_error *err) { return act<ACT_GELU_ERF>(a, err); }
extern "C" int mg_cuda_gelu_erf_bwd(const mg_kernel_args *a, mg_error *err) { return act_bwd<ACT_GELU_ERF>(a, err); }
extern "C" int mg_cuda_silu(const mg_kernel_args *a, mg_error *err) { return act<ACT_SILU>(a, err); }
extern "C" int mg_cuda_gelu_bwd(const mg_kernel_args *a, mg_error *err) { return act_bwd<ACT_GELU>(a, err); }
extern "C" int mg_cuda_squared_relu(const mg_kernel_args *a, mg_error *err) { return act<ACT_RELU2>(a, err); }
extern "C" int mg_cuda_squared_relu_bwd(const mg_kernel_args *a, mg_error *err) { return act_bwd<ACT_RELU2>(a, err); }
extern "C" int mg_cuda_silu_bwd(const mg_kernel_args *a, mg_error *err) { return act_bwd<ACT_SILU>(a, err); }

/* x [rows, 2F] = [gate | value] -> y [rows, F] */
__global__ void k_swiglu(const float *__restrict__ x, float *y, int64_t n, int64_t F) {
    MG_GRID_STRIDE(i, n) {
        int64_t r = i / F, j = i - r * F;
        float g = x[r * 2 * F + j], v = x[r * 2 * F + F + j];
        y[i] = g * sigmoid_f(g) * v;
    }
}

__global__ void k_swiglu_bwd(const float *__restrict__ dy, const float *__restrict__ x, float *dx, int64_t n, int64_t F) {
    MG_GRID_STRIDE(i, n) {
        int64_t r = i / F, j = i - r * F;
        float g = x[r * 2 * F + j], v = x[r * 2 * F + F + j], d = dy[i];
        float s = sigmoid_f(g);
        dx[r * 2 * F + j] = d * v * s * (1.0f + g * (1.0f - s));
        dx[r * 2 * F + F + j] = d * g * s;
    }
}

extern "C" int mg_cuda_swiglu(const mg_kernel_args *a, mg_error *err) {
    const mg_tensor *xt = a->node->in[0];
    int64_t F = xt->shape[xt->ndim - 1] / 2, n = mg_numel(a->node->out[0]);
    if (n == 0) return MG_OK;
    k_swiglu<<<mg_cuda_blocks(n, MG_CUDA_THREADS), MG_CUDA_THREADS, 0, mg_cuda_stream()>>>((const float *)a->in[0],
                                                                                           (float *)a->out[0], n, F);
    return mg_cuda_check_launch("swiglu", err);
}

extern "C" int mg_cuda_swiglu_bwd(const mg_kernel_args *a, mg_error *err) {
    const mg_tensor *xt = a->node->in[1];
    int64_t F = xt->shape[xt->ndim - 1] / 2, n = mg_numel(a->node->in[0]);
    if (n == 0) return MG_OK;
    k_swiglu_bwd<<<mg_cuda_blocks(n, MG_CUDA_THREADS), MG_CUDA_THREADS, 0, mg_cuda_stream()>>>(
        (const float *)a->in[0], (const float *)a->in[1], (float *)a->out[0], n, F);
    return mg_cuda_check_launch("swiglu_bwd", err);
}

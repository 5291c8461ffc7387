/* Optimizer-step ops (ops/optimizer.c): gradient accumulation is elementwise;
 * lr_schedule and clip_coef are scalars computed by one thread; AdamW is elementwise,
 * in place, fp32 master weights.
 * AdamW's multiply-adds are written with explicit rounding (__fmul_rn/__fadd_rn) so
 * nvcc does not contract them into FMAs: the update then rounds like the CPU's. */
#include <math.h>

#include "mgraph/train.h"
#include "ops/cuda/cuda_common.h"

/* accumulate (ops/optimizer.c): the step's first micro-batch instance copies the
 * gradient into the accumulator, the others add it, in micro-batch order like the CPU. */
__global__ void k_accumulate(const float *prev, const float *__restrict__ x, float *acc, int64_t n) {
    MG_GRID_STRIDE(i, n) acc[i] = __fadd_rn(prev[i], x[i]);
}

extern "C" int mg_cuda_accumulate(const mg_kernel_args *a, mg_error *err) {
    int64_t n = mg_numel(a->node->in[0]);
    if (n == 0) return MG_OK;
    if (a->info->mb_local <= 0) {
        if (a->out[0] == a->in[1]) return MG_OK;
        return mg_cuda_check(cudaMemcpyAsync(a->out[0], a->in[1], (size_t)n * sizeof(float), cudaMemcpyDeviceToDevice,
                                             mg_cuda_stream()),
                             "accumulate", err);
    }
    k_accumulate<<<mg_cuda_blocks(n, MG_CUDA_THREADS), MG_CUDA_THREADS, 0, mg_cuda_stream()>>>(
        (const float *)a->in[0], (const float *)a->in[1], (float *)a->out[0], n);
    return mg_cuda_check_launch("accumulate", err);
}

__global__ void k_set1(float *out, float v) { out[0] = v; }

extern "C" int mg_cuda_lr_schedule(const mg_kernel_args *a, mg_error *err) {
    const mg_lr_schedule *s = &a->node->attrs.lr;
    int64_t step = a->info->iteration - a->info->skipped; /* (the scheduler counts updates) */
    k_set1<<<1, 1, 0, mg_cuda_stream()>>>((float *)a->out[0], mg_lr_at_iteration(s, step));
    k_set1<<<1, 1, 0, mg_cuda_stream()>>>((float *)a->out[1], mg_wd_at_iteration(s, step));
    return mg_cuda_check_launch("lr_schedule", err);
}

/* (scale: the loss scale with fp16's loss scaling, else NULL; ops/optimizer.c) */
__global__ void k_clip(const float *__restrict__ sumsq, const float *__restrict__ scale, float *coef, float *norm_out,
                       double max) {
    double norm = sqrt((double)sumsq[0]), c = 1.0, unscale = 1.0;
    if (scale) {
        unscale = 1.0 / (double)scale[0];
        norm *= unscale;
    }
    if (max > 0) {
        double k = max / (norm + 1e-6);
        if (k < 1.0) c = k;
    }
    c *= unscale;
    if (scale && !isfinite(norm)) c = NAN; /* found_inf: skip the update */
    coef[0] = (float)c;
    norm_out[0] = (float)norm;
}

extern "C" int mg_cuda_clip_coef(const mg_kernel_args *a, mg_error *err) {
    k_clip<<<1, 1, 0, mg_cuda_stream()>>>((const float *)a->in[0], a->node->n_in > 1 ? (const float *)a->in[1] : NULL,
                                          (float *)a->out[0], (float *)a->out[1],
                                          (double)a->node->attrs.clip.max_norm);
    return mg_cuda_check_launch("clip_coef", err);
}

__global__ void k_adamw(const float *p, const float *__restrict__ g, const float *m, const float *v,
                        const float *__restrict__ lr_, const float *__restrict__ coef_, const float *__restrict__ wd_,
                        float *po, float *mo, float *vo, int64_t n, float b1, float b2, float eps, float wd, float ibc1,
                        float ibc2, bool skip_nonfinite) {
    float lr = lr_[0], coef = coef_[0];
    if (skip_nonfinite && !isfinite(coef)) { /* an overflow: the state stays (ops/optimizer.c) */
        MG_GRID_STRIDE(i, n) {
            float pi = p[i], mi = m[i], vi = v[i];
            po[i] = pi;
            mo[i] = mi;
            vo[i] = vi;
        }
        return;
    }
    if (wd_) wd = __fmul_rn(wd, wd_[0]); /* a scheduled decay (ops/optimizer.c) */
    MG_GRID_STRIDE(i, n) {
        float gi = __fmul_rn(g[i], coef);
        float mi = __fadd_rn(__fmul_rn(b1, m[i]), __fmul_rn(1.0f - b1, gi));
        float vi = __fadd_rn(__fmul_rn(b2, v[i]), __fmul_rn(__fmul_rn(1.0f - b2, gi), gi));
        float upd = __fdiv_rn(__fmul_rn(mi, ibc1), __fadd_rn(__fsqrt_rn(__fmul_rn(vi, ibc2)), eps));
        float pi = p[i];
        po[i] = __fsub_rn(pi, __fmul_rn(lr, __fadd_rn(upd, __fmul_rn(wd, pi))));
        mo[i] = mi;
        vo[i] = vi;
    }
}

extern "C" int mg_cuda_adamw(const mg_kernel_args *a, mg_error *err) {
    const mg_attr_adamw *c = &a->node->attrs.adamw;
    int64_t n = mg_numel(a->node->in[0]);
    if (n == 0) return MG_OK;
    double t = (double)(a->info->iteration - a->info->skipped + 1 - a->info->optim_start);
    float ibc1 = (float)(1.0 / (1.0 - pow(c->beta1, t))), ibc2 = (float)(1.0 / (1.0 - pow(c->beta2, t)));
    k_adamw<<<mg_cuda_blocks(n, MG_CUDA_THREADS), MG_CUDA_THREADS, 0, mg_cuda_stream()>>>(
        (const float *)a->in[0], (const float *)a->in[1], (const float *)a->in[2], (const float *)a->in[3],
        (const float *)a->in[4], (const float *)a->in[5], a->node->n_in > 6 ? (const float *)a->in[6] : NULL,
        (float *)a->out[0], (float *)a->out[1], (float *)a->out[2], n,
        c->beta1, c->beta2, c->eps, c->weight_decay, ibc1, ibc2, c->skip_nonfinite);
    return mg_cuda_check_launch("adamw", err);
}

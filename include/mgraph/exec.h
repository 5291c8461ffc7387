/* Execution-facing types shared by kernels and executors. */
#ifndef MGRAPH_EXEC_H
#define MGRAPH_EXEC_H

#include <stdbool.h>
#include <stdint.h>

#include "mgraph/error.h"
#include "mgraph/graph.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mg_comm mg_comm; /* per-rank communicators (scheduler/comm) */

/* What a kernel may know about the step besides its node and buffers. */
typedef struct mg_exec_info {
    uint64_t seed;        /* run seed: weights, dropout */
    int64_t iteration;    /* 0-based training iteration */
    int64_t optim_start;  /* the iteration at which the Adam moments started from zero: Adam's
                           * step is iteration - skipped + 1 - optim_start (0 unless a run resumed
                           * without the moments, --no-load-optim: torch's Adam restarts its
                           * step count with its state, and so do the bias corrections here) */
    int64_t skipped;      /* iterations skipped before this one (fp16's loss scaler found an
                           * overflow: no update). Megatron's scheduler and torch's Adam step
                           * count only the updates: the learning rate is the schedule's at
                           * iteration - skipped, Adam's step iteration - skipped + 1 - optim_start
                           * (optim_start counts updates too) */
    bool training;        /* false: dropout is the identity */
    mg_comm *comm;        /* NULL on a single rank */
    /* The micro-batch schedule of this step. A graph's per-micro-batch part (nodes with
     * mb >= 0: one micro-batch's forward and backward) runs n_micro times; its other
     * nodes (mb < 0: gradient reductions, the optimizer) run once, after it. Instance i
     * is global micro-batch mb_offset + i * mb_stride, which keys its dropout masks:
     * data-parallel rank d of dp runs micro-batches d, d + dp, ... as Megatron's sampler
     * hands them out, so every plan draws the serial run's masks. 0 means 1 / 0 / 1.
     * mb_split > 1: the graph is built for sub-batches, mb_split per micro-batch
     * (mg_plan_micro_batch_split); instance i is then sub-batch i % mb_split of micro-batch
     * mb_offset + (i / mb_split) * mb_stride, whose global index, counted in sub-batches,
     * is that micro-batch's * mb_split + i % mb_split (masks are drawn per sample). */
    int n_micro, mb_offset, mb_stride, mb_split;
    /* Set by the executor for each kernel call, read by kernels: the instance running
     * (0..n_micro-1; -1 outside the per-micro-batch part) and its global index. */
    int mb_local, mb_global;
    /* fp8 (mgraph/fp8.h): the recipe's scales, and the amaxes the kernels of marked
     * products raise while training (NULL: the graph has none) */
    struct mg_fp8_state *fp8;
} mg_exec_info;

/* Global index of the first sample of the instance running (i->mb_global; 0 outside
 * the per-micro-batch part), for a graph built for `batch` samples per instance: what
 * dropout's per-sample masks are keyed by (mg_rng_dropout_site). */
static inline int64_t mg_exec_first_sample(const mg_exec_info *i, int64_t batch) {
    return (int64_t)(i->mb_global > 0 ? i->mb_global : 0) * batch;
}
/* Instances of the per-micro-batch part this info asks for (>= 1). */
static inline int mg_exec_n_micro(const mg_exec_info *i) { return i->n_micro > 0 ? i->n_micro : 1; }
/* The info a kernel sees for instance `local` (-1: outside the per-micro-batch part). */
static inline mg_exec_info mg_exec_instance(const mg_exec_info *i, int local) {
    mg_exec_info k = *i;
    k.mb_local = local;
    int split = i->mb_split > 0 ? i->mb_split : 1;
    k.mb_global = local < 0 ? -1
                            : (i->mb_offset + local / split * (i->mb_stride > 0 ? i->mb_stride : 1)) * split +
                                  local % split;
    return k;
}

/* Arithmetic of the matrix products (matmul, linear, attention, experts) for the whole
 * process, CPU and CUDA workers: fp32 (the default), or bf16 = inputs rounded to bf16,
 * products summed in fp32, as Megatron's --bf16 computes them (cuBLAS:
 * CUBLAS_COMPUTE_32F_FAST_16BF); tensors, master weights and gradients stay fp32. On
 * CPUs bf16 runs natively with AVX512-BF16; elsewhere setting it fails with
 * MG_ERR_UNSUPPORTED, unless `emulate`: a portable kernel then computes the same bits
 * (slower than fp32; for checking numerics). Set it before a step runs. */
typedef enum mg_gemm_precision { MG_GEMM_FP32, MG_GEMM_BF16 } mg_gemm_precision;
int mg_gemm_set_precision(mg_gemm_precision p, bool emulate, mg_error *err);
mg_gemm_precision mg_gemm_precision_get(void);
/* Whether this CPU has AVX512-BF16 (and this build its kernel). */
bool mg_cpu_has_bf16(void);

#ifdef __cplusplus
}
#endif
#endif

/* The bf16 matrix product (--bf16) against OpenBLAS sgemm, one thread each, on the GEMM
 * shapes a training step of the default model and of GPT-2 124M runs.
 *
 *   bench_gemm_bf16 [reps]      (default 7)
 *
 * Columns: sgemm GFLOP/s; the AVX512-BF16 kernel's (where the CPU has it, else "-");
 * the portable kernel's (the same bits, for checking numerics where the CPU lacks
 * AVX512-BF16); and native / sgemm. Each shape's kernels run interleaved, `reps`
 * times; medians. OpenBLAS is set to one thread (the engine's workers are the
 * parallelism). Asserts nothing.
 *
 * The whole model's step, fp32 against --bf16: mgraph-run's default model with and
 * without --bf16, "elapsed time per iteration" in its log lines (README, --bf16). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>

#include "bench_util.h"
#include "mgraph/exec.h"
#include "ops/gemm.h"

void openblas_set_num_threads(int);

typedef struct shape {
    const char *what;
    int M, N, K;
    bool ta, tb;
} shape;

/* tokens T = seq · micro-batch: default 128 · 4 = 512; 124M 64 · 4 = 256 */
static const shape g_shapes[] = {
    {"default qkv    x.W^T", 512, 768, 256, false, true},
    {"default fc1    x.W^T", 512, 1024, 256, false, true},
    {"default fc2    dY.W", 512, 256, 1024, false, false},
    {"default fc1 dW dY^T.x", 1024, 256, 512, true, false},
    {"124M qkv       x.W^T", 256, 2304, 768, false, true},
    {"124M fc1       x.W^T", 256, 3072, 768, false, true},
    {"124M fc2       dY.W", 256, 768, 3072, false, false},
    {"124M fc1 dW   dY^T.x", 3072, 768, 256, true, false},
    {"124M logits    x.W^T", 256, 50304, 768, false, true},
};

int main(int argc, char **argv) {
    int reps = argc > 1 ? atoi(argv[1]) : 7;
    if (reps < 1 || reps > 1000) {
        fprintf(stderr, "usage: bench_gemm_bf16 [reps 1..1000]\n");
        return 2;
    }
    openblas_set_num_threads(1);
    bool native = mg_cpu_has_bf16();
    printf("bf16 GEMM vs OpenBLAS sgemm, one thread, median of %d; AVX512-BF16: %s; load %.2f\n", reps,
           native ? "yes" : "no (native column empty)", bench_load1());
    printf("%-22s %6s %6s %6s | %8s %8s %8s | %7s\n", "shape", "M", "N", "K", "sgemm", "bf16", "portable", "bf16/sg");
    int rc = 0;
    for (size_t s = 0; s < sizeof g_shapes / sizeof *g_shapes && !rc; s++) {
        const shape *sh = &g_shapes[s];
        int M = sh->M, N = sh->N, K = sh->K, lda = sh->ta ? M : K, ldb = sh->tb ? K : N;
        float *A = malloc(sizeof *A * M * K), *B = malloc(sizeof *B * K * N), *C = malloc(sizeof *C * M * N);
        double *t = malloc(sizeof *t * 3 * reps);
        if (!A || !B || !C || !t) {
            fprintf(stderr, "bench_gemm_bf16: out of memory\n");
            return 1;
        }
        for (long i = 0; i < (long)M * K; i++) A[i] = (float)((i * 7 % 13) - 6) * 0.05f;
        for (long i = 0; i < (long)K * N; i++) B[i] = (float)((i * 5 % 11) - 5) * 0.05f;
        double flop = 2.0 * M * N * K;
        for (int r = -1; r < reps && !rc; r++) { /* r = -1: warm-up */
            mg_error err = {0};
            double t0 = bench_now_s();
            cblas_sgemm(CblasRowMajor, sh->ta ? CblasTrans : CblasNoTrans, sh->tb ? CblasTrans : CblasNoTrans, M, N, K,
                        1.0f, A, lda, B, ldb, 0.0f, C, N);
            double t1 = bench_now_s();
            if (native) rc = mg_gemm_bf16(true, sh->ta, sh->tb, M, N, K, 1.0f, A, lda, B, ldb, 0.0f, C, N, &err);
            double t2 = bench_now_s();
            if (!rc) rc = mg_gemm_bf16(false, sh->ta, sh->tb, M, N, K, 1.0f, A, lda, B, ldb, 0.0f, C, N, &err);
            double t3 = bench_now_s();
            if (rc) fprintf(stderr, "bench_gemm_bf16: %s\n", err.msg);
            if (r >= 0) t[r] = t1 - t0, t[reps + r] = t2 - t1, t[2 * reps + r] = t3 - t2;
        }
        double sg = flop / bench_median(t, reps) * 1e-9, pt = flop / bench_median(t + 2 * reps, reps) * 1e-9;
        if (native) {
            double bf = flop / bench_median(t + reps, reps) * 1e-9;
            printf("%-22s %6d %6d %6d | %8.1f %8.1f %8.1f | %6.2fx\n", sh->what, M, N, K, sg, bf, pt, bf / sg);
        } else {
            printf("%-22s %6d %6d %6d | %8.1f %8s %8.1f | %7s\n", sh->what, M, N, K, sg, "-", pt, "-");
        }
        free(A), free(B), free(C), free(t);
    }
    return rc ? 1 : 0;
}

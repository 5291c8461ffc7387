/* One OpenBLAS thread inside every kernel, whichever executor runs it (scheduler/ only). */
#ifndef MG_SCHEDULER_BLAS_THREADS_H
#define MG_SCHEDULER_BLAS_THREADS_H

/* OpenBLAS's threaded sgemm does not add up its products in the single-threaded order
 * (seen with the SkylakeX kernels), so a kernel's bits would depend on how many BLAS
 * threads the executor left it: the reference executor used OpenBLAS's default (all
 * cores, or OPENBLAS_NUM_THREADS), StarPU workers one. Every executor holds this while
 * it runs kernels, which makes "StarPU == reference, bitwise" hold whatever
 * OPENBLAS_NUM_THREADS / OPENBLAS_CORETYPE say. Parallelism comes from the executor
 * (one task per worker core), not from BLAS.
 *
 * mg_blas_single_acquire sets OpenBLAS to one thread (the count is process-wide);
 * the last mg_blas_single_release restores the count found by the first acquire.
 * Nested and concurrent holders are counted. */
void mg_blas_single_acquire(void);
void mg_blas_single_release(void);

#endif

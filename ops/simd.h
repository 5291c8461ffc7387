/* Wider vector units for the kernels whose loops vectorise (library-internal).
 *
 * The library is built for the baseline x86-64 (SSE2: four floats per vector). A
 * kernel marked MG_SIMD is compiled again for AVX2 and AVX-512, and the dynamic loader
 * picks the widest the CPU has (GCC's target_clones, resolved once through an ifunc):
 * elementwise loops run 2-5x faster (GELU 3.8x with AVX-512, measured).
 *
 * The clones round exactly as the baseline does, so results do not depend on the
 * machine: the build turns off floating-point contraction (-ffp-contract=off: no
 * a * b + c becomes an FMA, which AVX2 and AVX-512 have and SSE2 has not), vectorising
 * elementwise arithmetic changes no result, and GCC keeps float reductions in source
 * order (it reorders them only under -ffast-math, which mgraph never uses). */
#ifndef MG_OPS_SIMD_H
#define MG_OPS_SIMD_H

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(MG_NO_SIMD_CLONES)
#define MG_SIMD __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define MG_SIMD
#endif

#endif

/* Philox4x32-10 on vectors of 8 counters (library-internal; ops/rng.c, ops/rng_init.c).
 *
 * The same rounds as mg_philox4x32 (ops/rng.c), in GCC vector extensions: the 32-bit
 * words sit in 64-bit lanes, so the 32x32->64 products are lane-wise multiplies and the
 * carries need no care. Integer arithmetic only: every lowering (SSE2, AVX2, AVX-512,
 * chosen by the target of the function it is inlined into) gives the scalar words. */
#ifndef MG_OPS_PHILOX_VEC_H
#define MG_OPS_PHILOX_VEC_H

#include <stdint.h>

#define MG_PHILOX_M0 0xD2511F53u
#define MG_PHILOX_M1 0xCD9E8D57u
#define MG_PHILOX_W0 0x9E3779B9u
#define MG_PHILOX_W1 0xBB67AE85u

#define MG_PHILOX_VL 8
typedef uint64_t mg_vu64 __attribute__((vector_size(MG_PHILOX_VL * sizeof(uint64_t))));

/* c[0..3] = the four output words of counters (stream, ctr + i), i < 8, under key.
 * (Vectors through a pointer: by value they would change the ABI with the target.) */
static inline __attribute__((always_inline)) void mg_philox_vec(uint64_t key, uint64_t stream, uint64_t ctr,
                                                                mg_vu64 *c) {
    const mg_vu64 lo32 = (mg_vu64){0} + 0xffffffffu;
    mg_vu64 idx = (mg_vu64){0, 1, 2, 3, 4, 5, 6, 7} + ctr;
    mg_vu64 c0 = idx & lo32, c1 = idx >> 32, c2 = (mg_vu64){0} + (stream & 0xffffffffu),
            c3 = (mg_vu64){0} + (stream >> 32);
    uint64_t k0 = (uint32_t)key, k1 = (uint32_t)(key >> 32);
    for (int r = 0; r < 10; r++) {
        mg_vu64 p0 = c0 * MG_PHILOX_M0, p1 = c2 * MG_PHILOX_M1;
        mg_vu64 n0 = (p1 >> 32) ^ c1 ^ k0, n2 = (p0 >> 32) ^ c3 ^ k1;
        c1 = p1 & lo32;
        c3 = p0 & lo32;
        c0 = n0;
        c2 = n2;
        k0 = (k0 + MG_PHILOX_W0) & 0xffffffffu;
        k1 = (k1 + MG_PHILOX_W1) & 0xffffffffu;
    }
    c[0] = c0;
    c[1] = c1;
    c[2] = c2;
    c[3] = c3;
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
/* The same rounds with AVX2 intrinsics: G vectors of 4 counters (counter ctr + 4 g + lane),
 * w[g][word], words in 64-bit lanes. vpmuludq is the 32x32->64 product the words need;
 * without AVX-512DQ GCC lowers mg_philox_vec's 64-bit lane products to three multiplies
 * and shifts each (measured on Zen 3: 8.6x slower). The G vectors run interleaved, as
 * the rounds are a dependency chain. For functions compiled with AVX2. */
__attribute__((target("avx2"))) static inline __attribute__((always_inline)) void
mg_philox_avx2(uint64_t key, uint64_t stream, uint64_t ctr, int G, __m256i (*w)[4]) {
    const __m256i lo32 = _mm256_set1_epi64x(0xffffffff), m0 = _mm256_set1_epi64x(MG_PHILOX_M0),
                  m1 = _mm256_set1_epi64x(MG_PHILOX_M1);
    for (int g = 0; g < G; g++) {
        __m256i idx = _mm256_add_epi64(_mm256_set_epi64x(3, 2, 1, 0), _mm256_set1_epi64x((long long)(ctr + 4u * (unsigned)g)));
        w[g][0] = _mm256_and_si256(idx, lo32);
        w[g][1] = _mm256_srli_epi64(idx, 32);
        w[g][2] = _mm256_set1_epi64x((long long)(stream & 0xffffffffu));
        w[g][3] = _mm256_set1_epi64x((long long)(stream >> 32));
    }
    uint32_t k0 = (uint32_t)key, k1 = (uint32_t)(key >> 32);
    for (int r = 0; r < 10; r++) {
        __m256i K0 = _mm256_set1_epi64x(k0), K1 = _mm256_set1_epi64x(k1);
        for (int g = 0; g < G; g++) {
            __m256i p0 = _mm256_mul_epu32(w[g][0], m0), p1 = _mm256_mul_epu32(w[g][2], m1);
            w[g][0] = _mm256_xor_si256(_mm256_xor_si256(_mm256_srli_epi64(p1, 32), w[g][1]), K0);
            w[g][2] = _mm256_xor_si256(_mm256_xor_si256(_mm256_srli_epi64(p0, 32), w[g][3]), K1);
            w[g][1] = _mm256_and_si256(p1, lo32);
            w[g][3] = _mm256_and_si256(p0, lo32);
        }
        k0 += MG_PHILOX_W0;
        k1 += MG_PHILOX_W1;
    }
}
#endif

#endif

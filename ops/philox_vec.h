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

#endif

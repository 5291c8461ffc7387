/* Device copy of the counter RNG of ops/rng.c (Philox4x32-10, the seed folded into
 * the key, uniforms from lane index % 4 of counter index / 4), so that dropout masks
 * on the GPU are bit-identical to the CPU's. Any change there must be made here. */
#ifndef MG_OPS_CUDA_PHILOX_CUH
#define MG_OPS_CUDA_PHILOX_CUH

#include <stdint.h>

__host__ __device__ inline uint64_t mg_philox_mix_key(uint64_t seed, uint64_t key) {
    uint64_t z = seed * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull;
    z ^= z >> 31;
    return key ^ z;
}

__device__ inline void mg_philox4x32_dev(uint64_t key, uint64_t ctr_hi, uint64_t ctr_lo, uint32_t out[4]) {
    uint32_t c0 = (uint32_t)ctr_lo, c1 = (uint32_t)(ctr_lo >> 32);
    uint32_t c2 = (uint32_t)ctr_hi, c3 = (uint32_t)(ctr_hi >> 32);
    uint32_t k0 = (uint32_t)key, k1 = (uint32_t)(key >> 32);
    for (int r = 0; r < 10; r++) {
        uint32_t hi0 = __umulhi(0xD2511F53u, c0), lo0 = 0xD2511F53u * c0;
        uint32_t hi1 = __umulhi(0xCD9E8D57u, c2), lo1 = 0xCD9E8D57u * c2;
        c0 = hi1 ^ c1 ^ k0;
        c1 = lo1;
        c2 = hi0 ^ c3 ^ k1;
        c3 = lo0;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    out[0] = c0;
    out[1] = c1;
    out[2] = c2;
    out[3] = c3;
}

/* mg_rng_uniform with the key already mixed (mg_philox_mix_key). */
__device__ inline float mg_uniform_dev(uint64_t mixed_key, uint64_t stream, uint64_t index) {
    uint32_t r[4];
    mg_philox4x32_dev(mixed_key, stream, index >> 2, r);
    return (float)(r[index & 3] >> 8) * (1.0f / 16777216.0f);
}

#endif

/* Philox4x32-10 and the draws built on it. */
#include "mgraph/rng.h"
#include "ops/rng_init.h"

#include <math.h>
#include <string.h>

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u

void mg_philox4x32(uint64_t key, uint64_t ctr_hi, uint64_t ctr_lo, uint32_t out[4]) {
    uint32_t c0 = (uint32_t)ctr_lo, c1 = (uint32_t)(ctr_lo >> 32);
    uint32_t c2 = (uint32_t)ctr_hi, c3 = (uint32_t)(ctr_hi >> 32);
    uint32_t k0 = (uint32_t)key, k1 = (uint32_t)(key >> 32);
    for (int r = 0; r < 10; r++) {
        uint64_t p0 = (uint64_t)PHILOX_M0 * c0, p1 = (uint64_t)PHILOX_M1 * c2;
        uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0;
        uint32_t hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
        c0 = hi1 ^ c1 ^ k0;
        c1 = lo1;
        c2 = hi0 ^ c3 ^ k1;
        c3 = lo0;
        k0 += PHILOX_W0;
        k1 += PHILOX_W1;
    }
    out[0] = c0;
    out[1] = c1;
    out[2] = c2;
    out[3] = c3;
}

/* The seed is folded into the key (not the counter) so that two seeds give
 * unrelated streams for every tensor. */
static uint64_t mix_key(uint64_t seed, uint64_t key) {
    uint64_t z = seed * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull;
    z ^= z >> 31;
    return key ^ z;
}

uint64_t mg_rng_key(uint64_t seed, uint64_t key) { return mix_key(seed, key); }

uint64_t mg_rng_dropout_stream(int64_t iteration, int mb) {
    /* stream 0 is initialisation; dropout streams start at 1 */
    return 1u + ((uint64_t)iteration << 16) + (uint64_t)(mb + 1);
}

/* Uniforms use all four Philox lanes: index i is lane i % 4 of counter i / 4, so a
 * run of consecutive indices costs one Philox call per four values. */
float mg_rng_uniform(uint64_t seed, uint64_t key, uint64_t stream, uint64_t index) {
    uint32_t r[4];
    mg_philox4x32(mix_key(seed, key), stream, index >> 2, r);
    return (float)(r[index & 3] >> 8) * (1.0f / 16777216.0f);
}

void mg_rng_uniform_block(uint64_t seed, uint64_t key, uint64_t stream, uint64_t first, int64_t n, float *out) {
    uint64_t k = mix_key(seed, key);
    uint32_t r[4];
    int64_t i = 0;
    while (i < n) {
        uint64_t idx = first + (uint64_t)i;
        mg_philox4x32(k, stream, idx >> 2, r);
        for (unsigned lane = (unsigned)(idx & 3); lane < 4 && i < n; lane++, i++)
            out[i] = (float)(r[lane] >> 8) * (1.0f / 16777216.0f);
    }
}

float mg_rng_normal(uint64_t seed, uint64_t key, uint64_t stream, uint64_t index) {
    uint32_t r[4];
    mg_philox4x32(mix_key(seed, key), stream, index, r);
    /* u1 in (0, 1] so log(u1) is finite; 32-bit resolution each */
    double u1 = ((double)r[0] + 1.0) / 4294967296.0;
    double u2 = (double)r[1] / 4294967296.0;
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

bool mg_is_whole(const mg_tensor *t) {
    if (t->logical.ndim != t->ndim) return false;
    for (int d = 0; d < t->ndim; d++)
        if (t->logical.offset[d] != 0 || t->logical.shape[d] != t->shape[d]) return false;
    return true;
}

uint64_t mg_logical_index(const mg_tensor *t, int64_t i) {
    if (mg_is_whole(t)) return (uint64_t)i;
    /* A block of a same-rank logical tensor: unravel by the local shape, shift by the
     * block offset, ravel by the logical shape. */
    int64_t idx[MG_MAX_DIMS];
    for (int d = t->ndim - 1; d >= 0; d--) {
        idx[d] = i % t->shape[d];
        i /= t->shape[d];
    }
    uint64_t g = 0;
    for (int d = 0; d < t->logical.ndim; d++)
        g = g * (uint64_t)t->logical.shape[d] + (uint64_t)(idx[d] + t->logical.offset[d]);
    return g;
}

/* The values are std * mg_rng_normal(seed, key, MG_RNG_STREAM_INIT, logical index) for
 * normal inits; ops/rng_init.c computes them faster, bit for bit. */
void mg_rng_init_tensor(const mg_tensor *t, uint64_t seed, float *dst) {
    mg_rng_init_range(t, seed, 0, mg_numel(t), dst);
}

/* Philox4x32-10 and the draws built on it. */
#include "mgraph/rng.h"
#include "ops/philox_vec.h"
#include "ops/rng_init.h"

#include <math.h>
#include <string.h>
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

void mg_philox4x32(uint64_t key, uint64_t ctr_hi, uint64_t ctr_lo, uint32_t out[4]) {
    uint32_t c0 = (uint32_t)ctr_lo, c1 = (uint32_t)(ctr_lo >> 32);
    uint32_t c2 = (uint32_t)ctr_hi, c3 = (uint32_t)(ctr_hi >> 32);
    uint32_t k0 = (uint32_t)key, k1 = (uint32_t)(key >> 32);
    for (int r = 0; r < 10; r++) {
        uint64_t p0 = (uint64_t)MG_PHILOX_M0 * c0, p1 = (uint64_t)MG_PHILOX_M1 * c2;
        uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0;
        uint32_t hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
        c0 = hi1 ^ c1 ^ k0;
        c1 = lo1;
        c2 = hi0 ^ c3 ^ k1;
        c3 = lo0;
        k0 += MG_PHILOX_W0;
        k1 += MG_PHILOX_W1;
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

void mg_rng_batch_dims(const mg_tensor *t, uint64_t *B, uint64_t *R) {
    bool whole = mg_is_whole(t);
    int nd = whole ? t->ndim : t->logical.ndim;
    const int64_t *sh = whole ? t->shape : t->logical.shape;
    *B = nd >= 2 ? (uint64_t)sh[1] : 1u;
    *R = 1;
    for (int d = nd >= 2 ? 2 : 0; d < nd; d++) *R *= (uint64_t)sh[d];
}

/* Uniforms use all four Philox lanes: index i is lane i % 4 of counter i / 4, so a
 * run of consecutive indices costs one Philox call per four values. */
float mg_rng_uniform(uint64_t seed, uint64_t key, uint64_t stream, uint64_t index) {
    uint32_t r[4];
    mg_philox4x32(mix_key(seed, key), stream, index >> 2, r);
    return (float)(r[index & 3] >> 8) * (1.0f / 16777216.0f);
}

/* Uniforms of VL consecutive counters at once (ops/philox_vec.h), lowered per target
 * below; the conversion r >> 8 to float is exact, so the values are the scalar path's,
 * bit for bit, whatever the vector width. out[4 j + lane] = uniform of counter ctr + j, lane. */
#define VL MG_PHILOX_VL
static inline __attribute__((always_inline)) void uniform_vec(uint64_t key, uint64_t stream, uint64_t ctr,
                                                              float *restrict out) {
    mg_vu64 c[4];
    mg_philox_vec(key, stream, ctr, c);
    mg_vu64 c0 = c[0], c1 = c[1], c2 = c[2], c3 = c[3];
    for (int j = 0; j < VL; j++) { /* interleave the four words of each counter */
        out[4 * j + 0] = (float)(uint32_t)(c0[j] >> 8) * (1.0f / 16777216.0f);
        out[4 * j + 1] = (float)(uint32_t)(c1[j] >> 8) * (1.0f / 16777216.0f);
        out[4 * j + 2] = (float)(uint32_t)(c2[j] >> 8) * (1.0f / 16777216.0f);
        out[4 * j + 3] = (float)(uint32_t)(c3[j] >> 8) * (1.0f / 16777216.0f);
    }
}

typedef void (*uniform_fn)(uint64_t, uint64_t, uint64_t, float *);
/* Each function below fills UL values: VL counters twice over. */
#define UL (8 * VL)
static void uniform_generic(uint64_t k, uint64_t s, uint64_t c, float *o) {
    uniform_vec(k, s, c, o);
    uniform_vec(k, s, c + VL, o + 4 * VL);
}
#if defined(__x86_64__) && defined(__GNUC__)
/* The same with intrinsics: GCC lowers the 64-bit lane products above to vpmullq (three
 * uops each); the words are 32-bit, so vpmuludq's 32x32->64 product is the one needed. */
/* 8 words (< 2^32) of each of the four lanes to floats, interleaved: out[4 j + l] = c[l][j] */
__attribute__((target("avx512f,avx512vl"))) static inline void store_words(const __m512i c[4], float *out) {
    const __m256 scale = _mm256_set1_ps(1.0f / 16777216.0f);
    __m256 w[4];
    for (int l = 0; l < 4; l++) /* to 32 bits, >> 8, exact to float */
        w[l] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(_mm512_cvtepi64_epi32(c[l]), 8)), scale);
    /* a 4 x 8 transpose */
    __m256 a = _mm256_unpacklo_ps(w[0], w[1]), b = _mm256_unpackhi_ps(w[0], w[1]);
    __m256 cc = _mm256_unpacklo_ps(w[2], w[3]), d = _mm256_unpackhi_ps(w[2], w[3]);
    __m256 r0 = _mm256_castpd_ps(_mm256_unpacklo_pd(_mm256_castps_pd(a), _mm256_castps_pd(cc))); /* j 0, 4 */
    __m256 r1 = _mm256_castpd_ps(_mm256_unpackhi_pd(_mm256_castps_pd(a), _mm256_castps_pd(cc))); /* j 1, 5 */
    __m256 r2 = _mm256_castpd_ps(_mm256_unpacklo_pd(_mm256_castps_pd(b), _mm256_castps_pd(d)));  /* j 2, 6 */
    __m256 r3 = _mm256_castpd_ps(_mm256_unpackhi_pd(_mm256_castps_pd(b), _mm256_castps_pd(d)));  /* j 3, 7 */
    _mm256_storeu_ps(out + 0, _mm256_permute2f128_ps(r0, r1, 0x20));
    _mm256_storeu_ps(out + 8, _mm256_permute2f128_ps(r2, r3, 0x20));
    _mm256_storeu_ps(out + 16, _mm256_permute2f128_ps(r0, r1, 0x31));
    _mm256_storeu_ps(out + 24, _mm256_permute2f128_ps(r2, r3, 0x31));
}

/* Two vectors of 8 counters each, interleaved so that one's multiplies run while the
 * other's wait (the rounds are a dependency chain). */
__attribute__((target("avx512f,avx512vl"))) static void uniform_avx512(uint64_t key, uint64_t stream, uint64_t ctr,
                                                                      float *out) {
    const __m512i lo32 = _mm512_set1_epi64(0xffffffff), m0 = _mm512_set1_epi64(MG_PHILOX_M0),
                  m1 = _mm512_set1_epi64(MG_PHILOX_M1);
    __m512i idx = _mm512_add_epi64(_mm512_set_epi64(7, 6, 5, 4, 3, 2, 1, 0), _mm512_set1_epi64((long long)ctr));
    __m512i idy = _mm512_add_epi64(idx, _mm512_set1_epi64(8));
    __m512i a[4] = {_mm512_and_si512(idx, lo32), _mm512_srli_epi64(idx, 32),
                    _mm512_set1_epi64((long long)(stream & 0xffffffffu)), _mm512_set1_epi64((long long)(stream >> 32))};
    __m512i b[4] = {_mm512_and_si512(idy, lo32), _mm512_srli_epi64(idy, 32), a[2], a[3]};
    uint32_t k0 = (uint32_t)key, k1 = (uint32_t)(key >> 32);
    for (int r = 0; r < 10; r++) {
        __m512i K0 = _mm512_set1_epi64(k0), K1 = _mm512_set1_epi64(k1);
        __m512i pa0 = _mm512_mul_epu32(a[0], m0), pa1 = _mm512_mul_epu32(a[2], m1);
        __m512i pb0 = _mm512_mul_epu32(b[0], m0), pb1 = _mm512_mul_epu32(b[2], m1);
        a[0] = _mm512_xor_si512(_mm512_xor_si512(_mm512_srli_epi64(pa1, 32), a[1]), K0);
        a[2] = _mm512_xor_si512(_mm512_xor_si512(_mm512_srli_epi64(pa0, 32), a[3]), K1);
        a[1] = _mm512_and_si512(pa1, lo32);
        a[3] = _mm512_and_si512(pa0, lo32);
        b[0] = _mm512_xor_si512(_mm512_xor_si512(_mm512_srli_epi64(pb1, 32), b[1]), K0);
        b[2] = _mm512_xor_si512(_mm512_xor_si512(_mm512_srli_epi64(pb0, 32), b[3]), K1);
        b[1] = _mm512_and_si512(pb1, lo32);
        b[3] = _mm512_and_si512(pb0, lo32);
        k0 += MG_PHILOX_W0;
        k1 += MG_PHILOX_W1;
    }
    store_words(a, out);
    store_words(b, out + 32);
}
/* AVX2: mg_philox_avx2 (ops/philox_vec.h), four vectors of 4 counters. */
/* Words (< 2^32) of 4 counters to floats, interleaved: out[4 j + l] = c[l][j]. */
__attribute__((target("avx2"))) static inline void store_words_avx2(const __m256i c[4], float *out) {
    const __m256 scale = _mm256_set1_ps(1.0f / 16777216.0f);
    /* >> 8 (< 2^24: exact as int32 and as float); words 0|1 and 2|3 paired in each lane */
    __m256i a = _mm256_or_si256(_mm256_srli_epi64(c[0], 8), _mm256_slli_epi64(_mm256_srli_epi64(c[1], 8), 32));
    __m256i b = _mm256_or_si256(_mm256_srli_epi64(c[2], 8), _mm256_slli_epi64(_mm256_srli_epi64(c[3], 8), 32));
    __m256i lo = _mm256_unpacklo_epi64(a, b), hi = _mm256_unpackhi_epi64(a, b); /* counters 0, 2 / 1, 3 */
    _mm256_storeu_ps(out, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_permute2x128_si256(lo, hi, 0x20)), scale));
    _mm256_storeu_ps(out + 8, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_permute2x128_si256(lo, hi, 0x31)), scale));
}
__attribute__((target("avx2"))) static void uniform_avx2(uint64_t key, uint64_t stream, uint64_t ctr, float *out) {
    enum { G = UL / 16 }; /* vectors of 4 counters */
    __m256i w[G][4];
    mg_philox_avx2(key, stream, ctr, G, w);
    for (int g = 0; g < G; g++) store_words_avx2(w[g], out + 16 * g);
}
#endif

/* The path for one instruction set (0 generic vectors, 1 AVX2, 2 AVX-512 intrinsics),
 * or NULL where the CPU lacks it. */
static uniform_fn uniform_for(int isa) {
    if (isa == 0) return uniform_generic;
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    if (isa == 1 && __builtin_cpu_supports("avx2")) return uniform_avx2;
    if (isa == 2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl")) return uniform_avx512;
#endif
    return NULL;
}

/* out[i] for i in [i, end), the scalar way (at most one Philox call per four values). */
static void uniform_scalar(uint64_t k, uint64_t stream, uint64_t first, int64_t i, int64_t end, float *out) {
    uint32_t r[4];
    while (i < end) {
        uint64_t idx = first + (uint64_t)i;
        mg_philox4x32(k, stream, idx >> 2, r);
        for (unsigned lane = (unsigned)(idx & 3); lane < 4 && i < end; lane++, i++)
            out[i] = (float)(r[lane] >> 8) * (1.0f / 16777216.0f);
    }
}

static void uniform_block(uniform_fn vec, uint64_t seed, uint64_t key, uint64_t stream, uint64_t first, int64_t n,
                          float *out) {
    uint64_t k = mix_key(seed, key);
    /* scalar up to a counter boundary, UL values at a time, the rest scalar */
    int64_t i = (int64_t)((4 - (first & 3)) & 3);
    if (i > n) i = n;
    uniform_scalar(k, stream, first, 0, i, out);
    for (; n - i >= UL; i += UL) vec(k, stream, (first + (uint64_t)i) >> 2, out + i);
    uniform_scalar(k, stream, first, i, n, out);
}

void mg_rng_uniform_block(uint64_t seed, uint64_t key, uint64_t stream, uint64_t first, int64_t n, float *out) {
    static uniform_fn picked; /* every thread picks the same function: the widest the CPU has */
    uniform_fn vec = __atomic_load_n(&picked, __ATOMIC_RELAXED);
    if (!vec) {
        for (int isa = 2; !vec; isa--) vec = uniform_for(isa);
        __atomic_store_n(&picked, vec, __ATOMIC_RELAXED);
    }
    uniform_block(vec, seed, key, stream, first, n, out);
}

bool mg_rng_uniform_block_isa(int isa, uint64_t seed, uint64_t key, uint64_t stream, uint64_t first, int64_t n,
                              float *out) {
    uniform_fn vec = uniform_for(isa);
    if (vec) uniform_block(vec, seed, key, stream, first, n, out);
    return vec != NULL;
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

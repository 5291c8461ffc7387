/* numpy's PCG64 (with SeedSequence seeding), MT19937 and the bounded-integer and shuffle
 * algorithms Megatron's datasets draw through; see numpy_random.h for the references. */
#include <string.h>

#include "io/numpy_random.h"

/* ---- SeedSequence(entropy).generate_state(4, uint64) ---- */
#define SS_INIT_A 0x43b0d7e5u
#define SS_MULT_A 0x931e8875u
#define SS_INIT_B 0x8b51f9ddu
#define SS_MULT_B 0x58f38dedu
#define SS_MIX_MULT_L 0xca01f9ddu
#define SS_MIX_MULT_R 0x4973f715u
#define SS_XSHIFT 16
#define SS_POOL 4

static uint32_t ss_hashmix(uint32_t v, uint32_t *hash_const) {
    v ^= *hash_const;
    *hash_const *= SS_MULT_A;
    v *= *hash_const;
    v ^= v >> SS_XSHIFT;
    return v;
}

static uint32_t ss_mix(uint32_t x, uint32_t y) {
    uint32_t r = SS_MIX_MULT_L * x - SS_MIX_MULT_R * y;
    return r ^ (r >> SS_XSHIFT);
}

/* The seed as numpy's _int_to_uint32_array spells it: 32-bit words, least significant
 * first, [0] for zero; no spawn key. */
static void seed_sequence_state(uint64_t seed, uint64_t out[4]) {
    uint32_t entropy[2];
    int n = 0;
    if (seed == 0) entropy[n++] = 0;
    for (uint64_t s = seed; s; s >>= 32) entropy[n++] = (uint32_t)s;
    uint32_t pool[SS_POOL], hc = SS_INIT_A;
    for (int i = 0; i < SS_POOL; i++) pool[i] = ss_hashmix(i < n ? entropy[i] : 0, &hc);
    for (int s = 0; s < SS_POOL; s++)
        for (int d = 0; d < SS_POOL; d++)
            if (s != d) pool[d] = ss_mix(pool[d], ss_hashmix(pool[s], &hc));
    /* (entropy longer than the pool is mixed in after; two words never are) */
    uint32_t words[8], hb = SS_INIT_B;
    for (int i = 0; i < 8; i++) {
        uint32_t v = pool[i % SS_POOL];
        v ^= hb;
        hb *= SS_MULT_B;
        v *= hb;
        v ^= v >> SS_XSHIFT;
        words[i] = v;
    }
    for (int i = 0; i < 4; i++) out[i] = (uint64_t)words[2 * i] | (uint64_t)words[2 * i + 1] << 32; /* .view(uint64), LE */
}

/* ---- PCG64 (pcg_setseq_128_xsl_rr_64) ---- */
#define PCG_MULT (((unsigned __int128)2549297995355413924ULL << 64) | 4865540595714422341ULL)

static void pcg_step(mg_np_pcg64 *g) { g->state = g->state * PCG_MULT + g->inc; }

void mg_np_pcg64_seed(mg_np_pcg64 *g, uint64_t seed) {
    uint64_t v[4];
    seed_sequence_state(seed, v);
    unsigned __int128 initstate = (unsigned __int128)v[0] << 64 | v[1];
    unsigned __int128 initseq = (unsigned __int128)v[2] << 64 | v[3];
    memset(g, 0, sizeof *g);
    g->inc = initseq << 1 | 1; /* pcg64_srandom_r */
    pcg_step(g);
    g->state += initstate;
    pcg_step(g);
}

uint64_t mg_np_pcg64_next64(mg_np_pcg64 *g) {
    pcg_step(g);
    uint64_t x = (uint64_t)(g->state >> 64) ^ (uint64_t)g->state;
    unsigned rot = (unsigned)(g->state >> 122);
    return (x >> rot) | (x << ((64 - rot) & 63));
}

uint32_t mg_np_pcg64_next32(mg_np_pcg64 *g) {
    if (g->has_uint32) {
        g->has_uint32 = 0;
        return g->uinteger;
    }
    uint64_t n = mg_np_pcg64_next64(g);
    g->has_uint32 = 1;
    g->uinteger = (uint32_t)(n >> 32);
    return (uint32_t)n;
}

/* buffered_bounded_lemire_uint32: uniform in [0, rng], rng < 2^32 - 1 */
static uint32_t lemire32(mg_np_pcg64 *g, uint32_t rng) {
    const uint32_t excl = rng + 1;
    uint64_t m = (uint64_t)mg_np_pcg64_next32(g) * excl;
    uint32_t left = (uint32_t)m;
    if (left < excl) {
        const uint32_t threshold = (UINT32_MAX - rng) % excl;
        while (left < threshold) {
            m = (uint64_t)mg_np_pcg64_next32(g) * excl;
            left = (uint32_t)m;
        }
    }
    return (uint32_t)(m >> 32);
}

/* bounded_lemire_uint64: uniform in [0, rng], rng < 2^64 - 1 */
static uint64_t lemire64(mg_np_pcg64 *g, uint64_t rng) {
    const uint64_t excl = rng + 1;
    unsigned __int128 m = (unsigned __int128)mg_np_pcg64_next64(g) * excl;
    uint64_t left = (uint64_t)m;
    if (left < excl) {
        const uint64_t threshold = (UINT64_MAX - rng) % excl;
        while (left < threshold) {
            m = (unsigned __int128)mg_np_pcg64_next64(g) * excl;
            left = (uint64_t)m;
        }
    }
    return (uint64_t)(m >> 64);
}

/* _rand_int32 -> random_bounded_uint32_fill (use_masked false) */
void mg_np_integers_i32(mg_np_pcg64 *g, int32_t low, int32_t high, size_t n, int32_t *out) {
    uint32_t rng = (uint32_t)((int64_t)high - 1 - low), off = (uint32_t)low;
    for (size_t i = 0; i < n; i++) {
        uint32_t v = rng == 0 ? 0 : rng == UINT32_MAX ? mg_np_pcg64_next32(g) : lemire32(g, rng);
        out[i] = (int32_t)(off + v);
    }
}

/* _rand_int64 -> random_bounded_uint64_fill (use_masked false): ranges that fit 32 bits
 * take 32-bit draws */
void mg_np_integers_i64(mg_np_pcg64 *g, int64_t low, int64_t high, size_t n, int64_t *out) {
    uint64_t rng = (uint64_t)high - 1 - (uint64_t)low, off = (uint64_t)low;
    for (size_t i = 0; i < n; i++) {
        uint64_t v;
        if (rng == 0) v = 0;
        else if (rng <= UINT32_MAX) v = rng == UINT32_MAX ? mg_np_pcg64_next32(g) : lemire32(g, (uint32_t)rng);
        else v = rng == UINT64_MAX ? mg_np_pcg64_next64(g) : lemire64(g, rng);
        out[i] = (int64_t)(off + v);
    }
}

/* ---- MT19937 (numpy's legacy seeding: init_genrand) ---- */
void mg_np_mt19937_seed(mg_np_mt19937 *m, uint32_t seed) {
    m->key[0] = seed;
    for (int i = 1; i < 624; i++) m->key[i] = 1812433253u * (m->key[i - 1] ^ (m->key[i - 1] >> 30)) + (uint32_t)i;
    m->pos = 624;
}

static void mt_reload(mg_np_mt19937 *m) {
    static const uint32_t mag[2] = {0, 0x9908b0dfu};
    uint32_t *k = m->key, y;
    int i;
    for (i = 0; i < 624 - 397; i++) {
        y = (k[i] & 0x80000000u) | (k[i + 1] & 0x7fffffffu);
        k[i] = k[i + 397] ^ (y >> 1) ^ mag[y & 1];
    }
    for (; i < 623; i++) {
        y = (k[i] & 0x80000000u) | (k[i + 1] & 0x7fffffffu);
        k[i] = k[i + 397 - 624] ^ (y >> 1) ^ mag[y & 1];
    }
    y = (k[623] & 0x80000000u) | (k[0] & 0x7fffffffu);
    k[623] = k[396] ^ (y >> 1) ^ mag[y & 1];
    m->pos = 0;
}

uint32_t mg_np_mt19937_next32(mg_np_mt19937 *m) {
    if (m->pos == 624) mt_reload(m);
    uint32_t y = m->key[m->pos++];
    y ^= y >> 11;
    y ^= (y << 7) & 0x9d2c5680u;
    y ^= (y << 15) & 0xefc60000u;
    y ^= y >> 18;
    return y;
}

uint64_t mg_np_random_interval(mg_np_mt19937 *m, uint64_t max) {
    if (max == 0) return 0;
    uint64_t mask = max, v;
    for (int s = 1; s < 64; s <<= 1) mask |= mask >> s;
    if (max <= UINT32_MAX) {
        while ((v = mg_np_mt19937_next32(m) & mask) > max) {}
    } else {
        /* mt19937_next64: the high word drawn first (the order GCC gives numpy's
         * `next32() << 32 | next32()`); only arrays of more than 2^32 items get here */
        for (;;) {
            uint64_t hi = mg_np_mt19937_next32(m);
            v = (hi << 32 | mg_np_mt19937_next32(m)) & mask;
            if (v <= max) break;
        }
    }
    return v;
}

/* RandomState.shuffle -> _shuffle_raw: i from n - 1 down to 1 swaps with random_interval(i) */
#define NP_SHUFFLE(T)                                                   \
    for (size_t i = n > 0 ? n - 1 : 0; i > 0; i--) {                    \
        size_t j = (size_t)mg_np_random_interval(m, i);                 \
        T t = a[j];                                                     \
        a[j] = a[i];                                                    \
        a[i] = t;                                                       \
    }
void mg_np_shuffle_i32(mg_np_mt19937 *m, int32_t *a, size_t n) { NP_SHUFFLE(int32_t) }
void mg_np_shuffle_i64(mg_np_mt19937 *m, int64_t *a, size_t n) { NP_SHUFFLE(int64_t) }

/* Internal: numpy's random streams, bit for bit, so that what Megatron draws with numpy
 * (core/datasets/gpt_dataset.py) mgraph draws identically from the same seed.
 *
 *   numpy.random.default_rng(seed)   SeedSequence(seed) -> PCG64 (XSL-RR 128/64), and
 *                                    Generator.integers for int32 / int64 (Lemire's
 *                                    bounded integers, numpy's buffered 32-bit draws);
 *   numpy.random.RandomState(seed)   MT19937 with the legacy init_genrand seeding, and
 *                                    RandomState.shuffle (random_interval: masked
 *                                    rejection, as numpy's legacy stream does).
 *
 * The references are numpy/random/bit_generators.pyx (SeedSequence), _pcg64.pyx and
 * src/pcg64/, _mt19937.pyx and src/mt19937/, src/distributions/distributions.c
 * (random_interval, buffered_bounded_lemire_uint32, bounded_lemire_uint64) and
 * _bounded_integers.pyx; tests/io/mock_dataset.py checks every stream against numpy. */
#ifndef MGRAPH_IO_NUMPY_RANDOM_H
#define MGRAPH_IO_NUMPY_RANDOM_H

#include <stddef.h>
#include <stdint.h>

typedef struct mg_np_pcg64 {
    unsigned __int128 state, inc;
    int has_uint32; /* numpy hands out a 64-bit draw as two 32-bit ones, low half first */
    uint32_t uinteger;
} mg_np_pcg64;

/* default_rng(seed) for a non-negative integer seed (any width up to 128 bits here). */
void mg_np_pcg64_seed(mg_np_pcg64 *g, uint64_t seed);
uint64_t mg_np_pcg64_next64(mg_np_pcg64 *g);
uint32_t mg_np_pcg64_next32(mg_np_pcg64 *g);

/* Generator.integers(low, high, size=n, dtype=int32 / int64) with endpoint=False:
 * n draws in [low, high), high > low. */
void mg_np_integers_i32(mg_np_pcg64 *g, int32_t low, int32_t high, size_t n, int32_t *out);
void mg_np_integers_i64(mg_np_pcg64 *g, int64_t low, int64_t high, size_t n, int64_t *out);

typedef struct mg_np_mt19937 {
    uint32_t key[624];
    int pos;
} mg_np_mt19937;

/* RandomState(seed), 0 <= seed < 2^32. */
void mg_np_mt19937_seed(mg_np_mt19937 *m, uint32_t seed);
uint32_t mg_np_mt19937_next32(mg_np_mt19937 *m);
/* numpy's random_interval: uniform in [0, max] by masked rejection. */
uint64_t mg_np_random_interval(mg_np_mt19937 *m, uint64_t max);
/* RandomState.shuffle of a 1-D array (the draws do not depend on the item type). */
void mg_np_shuffle_i32(mg_np_mt19937 *m, int32_t *a, size_t n);
void mg_np_shuffle_i64(mg_np_mt19937 *m, int64_t *a, size_t n);

#endif

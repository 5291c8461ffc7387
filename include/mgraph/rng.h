/* Counter-based random numbers (Philox4x32-10, Salmon et al., SC'11).
 *
 * Every random value mgraph uses is a pure function of (seed, key, stream, index):
 * key is a tensor's logical key (a hash of its logical name), index the element's
 * linear index in the *logical* tensor. A rank holding any block of a tensor thus
 * draws exactly the values the serial run draws for those elements.
 */
#ifndef MGRAPH_RNG_H
#define MGRAPH_RNG_H

#include <stdint.h>

#include "mgraph/graph.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Streams separate uses of the same key. */
#define MG_RNG_STREAM_INIT 0u
/* Dropout stream for (iteration, micro-batch): distinct masks every step and micro-batch. */
uint64_t mg_rng_dropout_stream(int64_t iteration, int mb);

/* The raw generator: 128-bit counter (ctr_hi, ctr_lo), 64-bit key. */
void mg_philox4x32(uint64_t key, uint64_t ctr_hi, uint64_t ctr_lo, uint32_t out[4]);

/* Uniform in [0, 1) with 24 random bits, and a standard normal (Box-Muller). */
float mg_rng_uniform(uint64_t seed, uint64_t key, uint64_t stream, uint64_t index);
float mg_rng_normal(uint64_t seed, uint64_t key, uint64_t stream, uint64_t index);
/* out[i] = mg_rng_uniform(seed, key, stream, first + i) for i < n, four per Philox call. */
void mg_rng_uniform_block(uint64_t seed, uint64_t key, uint64_t stream, uint64_t first, int64_t n, float *out);
/* Chunk size kernels use with mg_rng_uniform_block on a stack buffer. */
#define MG_RNG_CHUNK 256

/* Linear index in t's logical tensor of t's local element i (t may be a block). */
uint64_t mg_logical_index(const mg_tensor *t, int64_t i);
/* True when t is its whole logical tensor (local index == logical index). */
bool mg_is_whole(const mg_tensor *t);

/* Fills t's local elements from its init spec (zeros, ones, normal(std)). */
void mg_rng_init_tensor(const mg_tensor *t, uint64_t seed, float *dst);

#ifdef __cplusplus
}
#endif
#endif

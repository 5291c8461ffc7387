/* Counter-based random numbers (Philox4x32-10, Salmon et al., SC'11).
 *
 * Every random value mgraph uses is a pure function of (seed, key, stream, index):
 * key is a tensor's logical key (a hash of its logical name); for initial weights the
 * stream is MG_RNG_STREAM_INIT and index the element's linear index in the *logical*
 * tensor; for dropout masks the stream is (iteration, global sample) and index the
 * element's place in that sample (mg_rng_dropout_site). A rank holding any block of a
 * tensor, or any slice of the batch, thus draws exactly the values the serial run draws
 * for those elements.
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
#if defined(__CUDACC__)
#define MG_RNG_HD __host__ __device__
#else
#define MG_RNG_HD
#endif

/* Dropout masks are drawn per sample: stream (iteration, global sample), index = the
 * element's place in that sample's slice of the logical tensor. Activations are laid
 * out [s, b, ...] (dim 1 the micro-batch's samples), so whatever the micro-batch size,
 * and however a micro-batch is cut into sub-batches (mg_plan_micro_batch_split) or a
 * global batch dealt out to data-parallel ranks, every sample draws the same masks. */
static inline MG_RNG_HD uint64_t mg_rng_dropout_stream(int64_t iteration, int64_t sample) {
    /* stream 0 is initialisation; dropout streams start at 2 */
    return 1u + ((uint64_t)iteration << 32) + (uint64_t)(sample + 1);
}
/* Logical element L of a dropout'd tensor whose logical shape is [s, B, (R elements)]:
 * its stream and index, for a micro-batch whose first sample is global sample sample0. */
static inline MG_RNG_HD void mg_rng_dropout_site(uint64_t L, uint64_t B, uint64_t R, int64_t iteration,
                                                 int64_t sample0, uint64_t *stream, uint64_t *index) {
    uint64_t sb = L / R, s = sb / B;
    *stream = mg_rng_dropout_stream(iteration, sample0 + (int64_t)(sb % B));
    *index = s * R + L % R;
}
/* The B and R of mg_rng_dropout_site for tensor t's logical shape: dim 1 is the batch
 * (a tensor of one dimension is one sample). */
void mg_rng_batch_dims(const mg_tensor *t, uint64_t *B, uint64_t *R);

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

/* Weight initialisation at memory speed (internal; ops/rng_init.c).
 *
 * The values are defined by the scalar code in ops/rng.c: element i of a tensor with a
 * normal init is std * mg_rng_normal(seed, key, MG_RNG_STREAM_INIT, logical index of i),
 * Box-Muller in double through libm's log and cos, rounded to float. The fast path
 * computes the same double expression with a vectorised Philox and its own log and cos
 * (relative error below 2^-44 of libm's result, tests/graph/test_init.c measures it),
 * and keeps its float only when every double within 2^-40 of it rounds to the same float;
 * otherwise (about 1 element in 30,000) it calls the scalar definition. So the floats are
 * libm's, bit for bit, whatever the vector width or thread count.
 */
#ifndef MG_OPS_RNG_INIT_H
#define MG_OPS_RNG_INIT_H

#include <stddef.h>
#include <stdbool.h>
#include <stdint.h>

#include "mgraph/graph.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The Philox key of (seed, tensor key), as every draw of ops/rng.c uses it. */
uint64_t mg_rng_key(uint64_t seed, uint64_t key);

/* dst[i] = std * mg_rng_normal(seed, key, stream, first + i) for i < n. Returns how many
 * elements took the scalar path (rounding in doubt). */
int64_t mg_rng_normal_fill(uint64_t seed, uint64_t key, uint64_t stream, uint64_t first, int64_t n, float std,
                           float *dst);

/* mg_rng_uniform_block through one instruction set's path (0 generic vectors, 1 AVX2,
 * 2 AVX-512 intrinsics), for the test that each draws the scalar values; false where
 * the CPU lacks it. */
bool mg_rng_uniform_block_isa(int isa, uint64_t seed, uint64_t key, uint64_t stream, uint64_t first, int64_t n,
                              float *out);

/* mg_rng_normal_fill through one instruction set's path (0 generic vectors, 1 AVX2,
 * 2 AVX-512), for the test that each draws the scalar values; -1 where the CPU lacks it,
 * else the scalar fallbacks taken. */
int64_t mg_rng_normal_fill_isa(int isa, uint64_t seed, uint64_t key, uint64_t stream, uint64_t first, int64_t n,
                               float std, float *dst);

/* The fast path's double Box-Muller values before rounding (for the accuracy test). */
void mg_rng_normal_approx(uint64_t seed, uint64_t key, uint64_t stream, uint64_t first, int64_t n, double *out);

/* Local elements [begin, end) of t from its init spec (dst: t's whole local buffer). */
void mg_rng_init_range(const mg_tensor *t, uint64_t seed, int64_t begin, int64_t end, float *dst);

/* One buffer to fill: t's init spec into dst (zero_bytes == 0), or zero_bytes zero
 * bytes at dst (t only names it). */
typedef struct mg_init_item {
    const mg_tensor *t;
    void *dst;
    size_t zero_bytes;
} mg_init_item;

/* Fills every item, split into chunks of about 1M elements over n_threads threads
 * (0: the CPUs this process may run on). Each page is first touched by the thread that
 * writes its final value. Where threads cannot be started the calling thread does it all. */
void mg_rng_init_items(const mg_init_item *items, int n, uint64_t seed, int n_threads);

#ifdef __cplusplus
}
#endif
#endif

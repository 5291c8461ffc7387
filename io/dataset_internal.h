/* Internal: the mg_dataset vtable and helpers shared by the dataset implementations. */
#ifndef MGRAPH_IO_DATASET_INTERNAL_H
#define MGRAPH_IO_DATASET_INTERNAL_H

#include "mgraph/dataset.h"

typedef struct mg_dataset_ops {
    uint64_t (*num_samples)(const mg_dataset *ds, int split);
    int (*sample)(const mg_dataset *ds, int split, uint64_t idx, int32_t *tokens, mg_error *err);
    void (*destroy)(void *impl);
} mg_dataset_ops;

enum { MG_DATASET_GPT = 1, MG_DATASET_TEXT = 2, MG_DATASET_PER_SPLIT = 3, MG_DATASET_MOCK = 4 };

struct mg_dataset {
    const mg_dataset_ops *ops;
    void *impl;
    int kind;
    int seq_length;
    int64_t vocab;
};

/* Deterministic PRNG (xoshiro256**, seeded through splitmix64): documented and
 * platform-independent, so a seed means the same samples everywhere. */
typedef struct mg_prng {
    uint64_t s[4];
} mg_prng;

void mg_prng_seed(mg_prng *r, uint64_t seed, uint64_t stream);
uint64_t mg_prng_next(mg_prng *r);
uint64_t mg_prng_below(mg_prng *r, uint64_t n); /* uniform in [0, n), n > 0 */
/* A keyed bijection of [0, n) (Feistel network + cycle walking): sample index ->
 * window without storing a permutation. */
uint64_t mg_permute_index(uint64_t i, uint64_t n, uint64_t key);

/* Megatron's split book-ends: int(round(cumulative fraction x n)) for the three splits. */
void mg_split_bounds(const double frac[3], uint64_t n, uint64_t bounds[4]);
/* The samples Megatron asks of a blended dataset of normalised weight w for a split of
 * `target` samples: ceil(ceil(target x w) x (1 + 0.005)) (_get_size_per_split_per_dataset
 * with the default --mid-level-dataset-surplus). */
uint64_t mg_blend_request(double weight, uint64_t target);

#endif

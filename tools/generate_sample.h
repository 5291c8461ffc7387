/* mgraph-generate's choice of the next token from the logits (tools/generate_sample.c). */
#ifndef MG_TOOLS_GENERATE_SAMPLE_H
#define MG_TOOLS_GENERATE_SAMPLE_H

#include <stdbool.h>
#include <stdint.h>

typedef struct gen_sampling {
    bool greedy;          /* argmax (the first of equal maxima, as torch.argmax) */
    float temperature;    /* > 0: logits divided by it */
    int top_k;            /* > 0: only the k largest logits (ties with the k-th kept, as transformers) */
    float top_p;          /* in (0, 1): the smallest set of the largest probabilities whose sum exceeds it */
    uint64_t seed;        /* the draws: mg_rng_uniform(seed, key, sequence, step) */
} gen_sampling;

/* Scratch for a vocabulary of v entries. */
typedef struct gen_sampler {
    int64_t v;
    float *p;       /* [v] */
    int32_t *order; /* [v] */
} gen_sampler;

int gen_sampler_init(gen_sampler *s, int64_t v);
void gen_sampler_free(gen_sampler *s);
/* The next token among logits[0..v) (the padded vocabulary's extra columns are not
 * passed) for draw `step` of sequence `seq`; *logprob: its log-probability under the
 * unmodified logits (temperature 1, nothing filtered). */
int32_t gen_sample(gen_sampler *s, const gen_sampling *o, const float *logits, uint64_t seq, uint64_t step,
                   double *logprob);

#endif

/* Text generation from a GPT-family model's weights: a key/value cache, greedy decoding
 * or sampling (temperature, top-k, top-p, a seed), stop at an end-of-document token or
 * after N tokens (models/gpt_generate.c). mgraph-generate runs it on a checkpoint's
 * weights; mgraph-run --sample-interval on the weights it is training.
 *
 *   mg_sampler smp;  mg_sampler_init(&smp, vocab);
 *   mg_generate_options o = {.sampling = {.greedy = true}, .max_new = 32, .eod = -1};
 *   mg_generation out;
 *   if (!mg_gpt_generate(&model, weights, ids, n, &o, 0, &smp, &out, &err)) ... out.ids ...
 *   mg_generation_free(&out);  mg_sampler_free(&smp);
 */
#ifndef MGRAPH_GENERATE_H
#define MGRAPH_GENERATE_H

#include <stdbool.h>
#include <stdint.h>

#include "mgraph/engine.h"
#include "mgraph/model.h"
#include "mgraph/plan.h"
#include "mgraph/tokenizer.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mg_sampling {
    bool greedy;          /* argmax (the first of equal maxima, as torch.argmax) */
    float temperature;    /* > 0: logits divided by it */
    int top_k;            /* > 0: only the k largest logits (ties with the k-th kept, as transformers) */
    float top_p;          /* in (0, 1): the smallest set of the largest probabilities whose sum exceeds it */
    uint64_t seed;        /* the draws: mg_rng_uniform(seed, key, sequence, step) */
} mg_sampling;

/* Scratch for a vocabulary of v entries. */
typedef struct mg_sampler {
    int64_t v;
    float *p;       /* [v] */
    int32_t *order; /* [v] */
} mg_sampler;

/* MG_OK, or MG_ERR_NOMEM. */
int mg_sampler_init(mg_sampler *s, int64_t v);
void mg_sampler_free(mg_sampler *s);
/* The next token among logits[0..v) (the padded vocabulary's extra columns are not
 * passed) for draw `step` of sequence `seq`; *logprob: its log-probability under the
 * unmodified logits (temperature 1, nothing filtered). */
int32_t mg_sample(mg_sampler *s, const mg_sampling *o, const float *logits, uint64_t seq, uint64_t step,
                  double *logprob);

/* Tensor parallelism: every rank of the plan's tp group calls mg_gpt_generate with the
 * same arguments; each runs its block of the model (partitioned by mg_partition, the
 * blocks copied from the weights it holds: whole, or its own blocks of a rank graph
 * partitioned with the same tensor parallelism), the collectives over comm. The tokens
 * are the one-rank run's. */
typedef struct mg_generate_parallel {
    const mg_plan *plan;          /* tp ranks; no other parallelism */
    const mg_mesh *mesh;          /* this rank's place */
    mg_comm *comm;
    const mg_graph *weights_graph;/* the graph of `weights` (its parameters found by name) */
} mg_generate_parallel;

typedef struct mg_generate_options {
    mg_sampling sampling;
    int64_t max_new;      /* new tokens at most (>= 1) */
    int32_t eod;          /* stop after generating this token; -1: never */
    bool no_cache;        /* recompute the whole sequence for every token (to check the cache) */
    const mg_generate_parallel *parallel; /* NULL: this process alone */
} mg_generate_options;

typedef struct mg_generation {
    mg_ids ids;           /* the prompt's tokens, then the new ones (the end-of-document one included) */
    double *logprobs;     /* [new tokens]: each one's log-probability (mg_sample) */
    const char *stop;     /* "length" or "eos" */
    double prefill_s, decode_s;
    int64_t prefilled;    /* tokens the prefill graph ran */
} mg_generation;

/* Generates after prompt[0..n_prompt) with `model`, whose parameters (mg_gpt2_params'
 * names and shapes, whole: one rank's unsharded weights) are read from `weights`, a
 * storage of any graph holding them (borrowed, not copied: it must not change during
 * the call). seq numbers the prompt for the draws. MG_ERR_INVALID when the prompt is
 * empty or prompt + max_new exceeds the model's positions; MG_ERR_UNSUPPORTED for models
 * the decoder lacks (mg_gpt_decode_build). *out is freed on error. */
int mg_gpt_generate(const mg_gpt_config *model, const mg_storage *weights, const int32_t *prompt, int64_t n_prompt,
                    const mg_generate_options *o, uint64_t seq, mg_sampler *smp, mg_generation *out, mg_error *err);
void mg_generation_free(mg_generation *g);

#ifdef __cplusplus
}
#endif
#endif

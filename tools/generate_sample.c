/* Next-token choice (tools/generate_sample.h): transformers' logits processors in its
 * order (temperature, then top-k, then top-p), then one draw from what is left. The draw
 * is a counter-based uniform (mgraph's Philox, include/mgraph/rng.h) of (seed, sequence,
 * step): a prompt's tokens depend on the seed and its place among the prompts only (not on
 * the machine, the threads or the time). */
#include "generate_sample.h"

#include <math.h>
#include <stdlib.h>

#include "mgraph/rng.h"

int gen_sampler_init(gen_sampler *s, int64_t v) {
    s->v = v;
    s->p = malloc((size_t)v * sizeof *s->p);
    s->order = malloc((size_t)v * sizeof *s->order);
    return s->p && s->order ? 0 : -1;
}

void gen_sampler_free(gen_sampler *s) {
    free(s->p);
    free(s->order);
    s->p = NULL, s->order = NULL;
}

static const float *g_keys; /* (qsort has no context argument) */
static int by_value_desc(const void *a, const void *b) {
    float x = g_keys[*(const int32_t *)a], y = g_keys[*(const int32_t *)b];
    if (x != y) return x > y ? -1 : 1;
    return *(const int32_t *)a - *(const int32_t *)b;
}

int32_t gen_sample(gen_sampler *s, const gen_sampling *o, const float *logits, uint64_t seq, uint64_t step,
                   double *logprob) {
    int64_t v = s->v;
    /* log-softmax of the raw logits, for the chosen token's log-probability */
    double mx = -INFINITY, sum = 0;
    for (int64_t i = 0; i < v; i++) mx = logits[i] > mx ? logits[i] : mx;
    for (int64_t i = 0; i < v; i++) sum += exp((double)logits[i] - mx);
    double lse = mx + log(sum);
    int32_t pick = 0;
    if (o->greedy) {
        for (int64_t i = 1; i < v; i++)
            if (logits[i] > logits[pick]) pick = (int32_t)i;
        *logprob = logits[pick] - lse;
        return pick;
    }
    /* p = logits / temperature; filtered entries -inf */
    float *p = s->p;
    for (int64_t i = 0; i < v; i++) p[i] = logits[i] / o->temperature;
    bool sorted = false;
    if ((o->top_k > 0 && o->top_k < v) || (o->top_p > 0 && o->top_p < 1)) {
        for (int64_t i = 0; i < v; i++) s->order[i] = (int32_t)i;
        g_keys = p;
        qsort(s->order, (size_t)v, sizeof *s->order, by_value_desc);
        sorted = true;
    }
    if (sorted && o->top_k > 0 && o->top_k < v) { /* keep what is >= the k-th largest */
        float kth = p[s->order[o->top_k - 1]];
        for (int64_t i = 0; i < v; i++)
            if (p[i] < kth) p[i] = -INFINITY;
    }
    if (sorted && o->top_p > 0 && o->top_p < 1) {
        /* transformers' TopPLogitsWarper: drop the tokens whose ascending cumulative
         * probability stays <= 1 - top_p, keeping at least the largest */
        double m2 = p[s->order[0]], z = 0;
        for (int64_t i = 0; i < v; i++) z += isinf(p[i]) ? 0 : exp((double)p[i] - m2);
        /* the ascending cumulative sum up to rank r (descending order) is 1 - the mass of ranks < r */
        double above = 0;
        for (int64_t r = 0; r < v; r++) {
            int32_t t = s->order[r];
            double pr = isinf(p[t]) ? 0 : exp((double)p[t] - m2) / z;
            double asc_cum = 1.0 - above;
            above += pr;
            if (r > 0 && asc_cum <= 1.0 - o->top_p) p[t] = -INFINITY;
        }
    }
    double m3 = -INFINITY, z3 = 0;
    for (int64_t i = 0; i < v; i++) m3 = p[i] > m3 ? p[i] : m3;
    for (int64_t i = 0; i < v; i++) z3 += isinf(p[i]) ? 0 : exp((double)p[i] - m3);
    double u = mg_rng_uniform(o->seed, 0x67656e6572617465ull /* "generate" */, seq, step) * z3, acc = 0;
    pick = -1;
    for (int64_t i = 0; i < v; i++) {
        if (isinf(p[i])) continue;
        acc += exp((double)p[i] - m3);
        pick = (int32_t)i;
        if (acc > u) break;
    }
    *logprob = logits[pick] - lse;
    return pick;
}

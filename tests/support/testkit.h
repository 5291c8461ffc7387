/* Test kit: run a graph on the reference executor, compare arrays, and check
 * gradients against central finite differences. Used by every op test. */
#ifndef MG_TESTKIT_H
#define MG_TESTKIT_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "mgraph/engine.h"
#include "mgraph/graph.h"
#include "mgraph/model.h"
#include "mgraph/ops.h"
#include "mgraph/train.h"

/* ---- assertions (print and count; a test exits non-zero if any failed) ----------- */
extern int tk_failures;
#define TK_CHECK(cond, ...)                                                  \
    do {                                                                     \
        if (!(cond)) {                                                       \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);             \
            fprintf(stderr, __VA_ARGS__);                                    \
            fprintf(stderr, "\n");                                           \
            tk_failures++;                                                   \
        }                                                                    \
    } while (0)

/* Deterministic test data (splitmix64), independent of the library's RNG. */
typedef struct { uint64_t s; } tk_rng;
float tk_uniform(tk_rng *r, float lo, float hi);
void tk_fill(tk_rng *r, float *x, int64_t n, float lo, float hi);

/* Max |a - b| / (atol + rtol * |b|) over n elements: <= 1 means within tolerance. */
double tk_compare(const float *got, const float *want, int64_t n, double rtol, double atol, int64_t *worst);
/* Reports and counts a failure when tk_compare > 1. */
bool tk_expect_close(const char *what, const float *got, const float *want, int64_t n, double rtol, double atol);

/* ---- running a graph -------------------------------------------------------------- */
typedef struct tk_run {
    mg_graph *g;
    mg_memplan *plan;
    mg_storage *st;
    mg_exec_info info;
} tk_run;

/* Plans (no reuse, so every tensor stays readable), allocates and initialises storage. */
int tk_prepare(tk_run *r, mg_graph *g);
float *tk_f32(tk_run *r, const mg_tensor *t);
int32_t *tk_i32(tk_run *r, const mg_tensor *t);
int tk_exec(tk_run *r);          /* reference executor; prints the error on failure */
void tk_release(tk_run *r);      /* frees plan and storage (not the graph) */

/* Central finite differences of the scalar loss against p's analytic gradient (already
 * computed in r) at `probes` elements picked by a hash of salt: each error
 * |fd - a| / (abs_tol + 3e-2 max(|fd|, |a|)) must be <= 1 (a TK_CHECK naming label, p
 * and the element). Puts p's values back; the run's outputs are left from the last
 * probe. Adds the probes to *probed and returns the worst error. */
double tk_fd_probe(tk_run *r, const mg_tensor *loss, mg_tensor *p, int salt, int probes, double eps, double abs_tol,
                   const char *label, int *probed);

/* ---- gradient check ------------------------------------------------------------------ */
typedef struct tk_leaf {
    const char *name;
    mg_dtype dtype;              /* MG_F32 or MG_I32 */
    int ndim;
    int64_t shape[MG_MAX_DIMS];
    bool diff;                   /* differentiate with respect to it */
    float lo, hi;                /* values uniform in [lo, hi) (i32: integers in [lo, hi)) */
} tk_leaf;

typedef mg_tensor *(*tk_build_fn)(mg_graph *g, mg_tensor *const *leaves, void *ctx);

typedef struct tk_grad_opts {
    double eps;                  /* finite-difference step (default 1e-2) */
    double rtol, atol;           /* default 2e-2, 2e-3 */
    int max_probe;               /* elements probed per leaf (default 48; all if fewer) */
    uint64_t seed;
} tk_grad_opts;

/* Builds y = build(leaves), loss = sum(y * r) with a fixed random r (so every output
 * element gets a distinct gradient), runs autodiff, and compares each differentiable
 * leaf's gradient with central differences of the loss. Returns true on success. */
bool tk_gradcheck(const char *label, int n_leaves, const tk_leaf *leaves, tk_build_fn build, void *ctx,
                  const tk_grad_opts *opts);

/* A small GPT-2 training step for tests: the given shape, ffn 4h, positions = seq,
 * dropout 0.1, Megatron's AdamW defaults, training on. */
mg_step_config tk_small_gpt(int layers, int hidden, int heads, int seq, int64_t vocab, int micro_batch, int n_micro);

/* Makes m a LLaMA-family GPT (Mistral-like): RMSNorm, RoPE, SwiGLU, grouped-query
 * attention with query_groups key/value groups, untied output layer, no biases. */
void tk_llama(mg_gpt_config *m, int query_groups);

/* Runs the sub-test named argv[1] from a table, or all of them. */
typedef struct tk_case { const char *name; void (*fn)(void); } tk_case;
int tk_main(int argc, char **argv, const tk_case *cases, int n_cases);

#endif

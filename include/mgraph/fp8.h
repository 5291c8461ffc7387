/* fp8 training as Transformer Engine recipes it under Megatron-Core (--fp8-format,
 * --fp8-recipe, --fp8-amax-history-len, --fp8-amax-compute-algo, --fp8-margin).
 *
 * Which products: those of the linear layers (Transformer Engine's Linear modules): a
 * matrix product whose second operand is a trained 2-D parameter, except the word
 * embedding and the output layer (Megatron's output layer is not a TE module), and the
 * two backward products of each (dgrad = dY·W, wgrad = dYᵀ·X). mg_fp8_mark numbers them
 * in the forward graph before autodiff, which carries the numbers to their gradients;
 * attention's products, the output layer and the MoE experts' grouped products keep the
 * model's precision.
 *
 * Arithmetic (ops/gemm_fp8.c): each operand is multiplied by its per-tensor scale and
 * rounded to fp8 (E4M3 forward; --fp8-format hybrid: E5M2 for dY in backward, e4m3:
 * E4M3 throughout), the products are summed in fp32 and the sum is unscaled; the
 * output is then stored as any activation is (bf16 under --bf16).
 *
 * Scales. Each product has three scaling slots: X (its input), W (its weight) and dY
 * (the gradient of its output); dgrad reuses W's and wgrad X's, as TE reuses the fp8
 * copies of forward.
 *   delayed (DelayedScaling): a slot's scale is fixed for a step, computed before it
 *     from the amax history: amax = max of the history (--fp8-amax-compute-algo max) or
 *     its most recent entry (most_recent), scale = (fp8_max / amax) / 2^margin; an
 *     amax of 0 or one that is not finite keeps the scale; a scale that overflows is
 *     FLT_MAX; the first step's scale is 1. Kernels record each operand's amax; at the
 *     end of the step the host takes the maximum over the step's micro-batches and over
 *     every rank (mg_fp8_state.amax, a MAX all-reduce of all products' slots over the
 *     world: ranks that hold no part of a product contribute 0, so this is TE's amax
 *     reduction over its tensor / data / context-parallel group), enters it in the
 *     history and computes the next scales. The state is therefore the same on every
 *     rank and equal to the serial run's: parallel == serial with the same scales.
 *     (Megatron updates once per micro-batch's forward; mgraph once per step, over all
 *     of them, which is what makes the state independent of how micro-batches are
 *     spread over ranks.)
 *   tensorwise (Float8CurrentScaling): scale = fp8_max / amax of the operand itself,
 *     computed in the kernel (1 when the amax is 0 or not finite); no state. An operand
 *     split over ranks (a tensor-parallel weight shard, a row-parallel input, a context-
 *     parallel chunk) takes its own shard's amax, as each rank's quantiser does in TE.
 */
#ifndef MGRAPH_FP8_H
#define MGRAPH_FP8_H

#include <stdbool.h>
#include <stdint.h>

#include "mgraph/error.h"
#include "mgraph/graph.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum mg_fp8_format { MG_FP8_OFF, MG_FP8_E4M3, MG_FP8_HYBRID } mg_fp8_format;
typedef enum mg_fp8_recipe { MG_FP8_DELAYED, MG_FP8_TENSORWISE } mg_fp8_recipe;
typedef enum mg_fp8_amax_algo { MG_FP8_AMAX_MOST_RECENT, MG_FP8_AMAX_MAX } mg_fp8_amax_algo;

typedef struct mg_fp8_options {
    mg_fp8_format format;        /* MG_FP8_OFF: no fp8 */
    mg_fp8_recipe recipe;        /* --fp8-recipe (Megatron's default: delayed) */
    int amax_history_len;        /* --fp8-amax-history-len (1) */
    mg_fp8_amax_algo amax_algo;  /* --fp8-amax-compute-algo (most_recent) */
    int margin;                  /* --fp8-margin (0) */
} mg_fp8_options;

/* Megatron's defaults, fp8 off. */
mg_fp8_options mg_fp8_defaults(void);
/* NULL when usable, else what is wrong. */
const char *mg_fp8_invalid(const mg_fp8_options *o);

/* The scaling slots of product p (0-based): X, W, dY. */
enum { MG_FP8_SLOT_X, MG_FP8_SLOT_W, MG_FP8_SLOT_DY, MG_FP8_SLOTS };

/* Marks the linear layers' products of a forward graph (see above), numbering them
 * 1..n in node order (mg_attr_matmul.fp8_gemm); *n_gemms gets n. Call before autodiff. */
int mg_fp8_mark(mg_graph *g, int *n_gemms, mg_error *err);

/* The number of marked products of a graph (the largest mg_attr_matmul.fp8_gemm; a
 * partitioned graph may hold only some of them). */
int mg_fp8_count(const mg_graph *g);

/* The recipe's state on one rank: scales and amax histories of every slot. */
typedef struct mg_fp8_state {
    mg_fp8_options o;
    int n_slots;               /* 3 per product */
    float *scale;              /* [n_slots]: the scales this step quantises with (delayed) */
    float *history;            /* [n_slots][amax_history_len]: entry 0 is the current step's */
    uint32_t *amax;            /* [n_slots]: this step's amax so far, as the bits of a float >= 0 (or NaN), which
                                * order as the values: kernels raise it atomically; the host MAX-reduces it */
    int64_t updates;           /* steps entered */
} mg_fp8_state;

int mg_fp8_state_init(mg_fp8_state *s, const mg_fp8_options *o, int n_gemms, mg_error *err);
void mg_fp8_state_free(mg_fp8_state *s);
/* Before a step: this step's amaxes start at 0. */
void mg_fp8_state_begin(mg_fp8_state *s);
/* After a training step, once s->amax holds the maximum over every rank: the histories
 * take it and the delayed recipe computes the next scales. */
void mg_fp8_state_update(mg_fp8_state *s);
/* A slot's fp8 format: E5M2 for dY under hybrid, else E4M3. */
mg_dtype mg_fp8_slot_format(const mg_fp8_options *o, int slot);
/* Raises slot's amax to |v| (atomic; NaN wins). */
void mg_fp8_record_amax(mg_fp8_state *s, int slot, float v);
/* The tensorwise scale of an operand whose amax is `amax` in format fmt. */
float mg_fp8_current_scale(float amax, mg_dtype fmt);

#ifdef __cplusplus
}
#endif
#endif

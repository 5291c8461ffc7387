/* Pipeline schedules: the order in which one pipeline stage runs the forward and
 * backward halves of its micro-batches (scheduler/pipeline_schedule.c).
 *
 * A stage's graph holds one micro-batch's forward and backward of each of its model
 * chunks; the engine submits them as the schedule's events, (micro-batch, chunk,
 * forward | backward), in order. StarPU then runs what is ready: the order decides
 * what a stage prefers, and how many micro-batches' activations it keeps alive.
 *
 *   1F1B (Narayanan et al. 2021, PipeDream-Flush): stage r of P first runs
 *     min(P - r - 1, m) forwards (warm-up), then alternates one forward and one
 *     backward, then runs the remaining backwards (cool-down): at most P - r
 *     micro-batches in flight, instead of m.
 *   Interleaved 1F1B (Megatron's virtual pipeline): V chunks per stage, virtual stage
 *     v = chunk x P + r; forwards go through chunks in groups of P micro-batches
 *     (Megatron's get_model_chunk_id), warm-up (P - r - 1) x 2 + (V - 1) x P; needs m a
 *     multiple of P.
 *   GPipe: every forward (chunk by chunk), then every backward: m in flight.
 */
#ifndef MGRAPH_PIPELINE_H
#define MGRAPH_PIPELINE_H

#include <stdbool.h>

#include "mgraph/error.h"
#include "mgraph/plan.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mg_pp_event {
    int mb;          /* micro-batch instance, 0..n_micro-1 */
    int chunk;       /* model chunk on this stage, 0..chunks-1 */
    bool backward;
} mg_pp_event;

/* Fills ev[0 .. 2 x n_micro x chunks) with stage `rank`'s order under schedule `kind`
 * (AUTO: interleaved when chunks > 1, else 1F1B). MG_ERR_INVALID when the schedule
 * does not apply (interleaved with m not a multiple of P, 1F1B with chunks > 1). */
int mg_pp_schedule(mg_pp_schedule_kind kind, int stages, int chunks, int rank, int n_micro, mg_pp_event *ev,
                   mg_error *err);
/* The most micro-batches in flight at once in an event order (a micro-batch is in flight
 * from its first forward to its last backward): the activation copies it needs. */
int mg_pp_in_flight(const mg_pp_event *ev, int n_events, int chunks);
/* The same for stage `rank`'s order under `kind` (the activation slots its storage needs). */
int mg_pp_schedule_in_flight(mg_pp_schedule_kind kind, int stages, int chunks, int rank, int n_micro, int *in_flight,
                             mg_error *err);

#ifdef __cplusplus
}
#endif
#endif

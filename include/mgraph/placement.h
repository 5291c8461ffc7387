/* Placements on the device mesh: local shapes, logical blocks, ownership.
 *
 * The one place that turns a tensor's placement (mg_placement, one state per mesh
 * axis) into what a rank holds: the partitioner sizes physical tensors with it, sets
 * their logical identity (so the counter RNG gives every block its serial values),
 * and checkpoints decide which rank writes each element with it.
 */
#ifndef MGRAPH_PLACEMENT_H
#define MGRAPH_PLACEMENT_H

#include <stdbool.h>
#include <stddef.h>

#include "mgraph/comm.h"
#include "mgraph/graph.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Every axis FULL (replicated). */
mg_placement mg_placement_full(void);
/* The states of one axis. */
mg_sharding mg_place_full(mg_group axis);
mg_sharding mg_place_split(mg_group axis, int dim);
mg_sharding mg_place_partial(mg_group axis);
bool mg_sharding_eq(mg_sharding a, mg_sharding b);
bool mg_placement_eq(const mg_placement *a, const mg_placement *b);

/* The block of a logical tensor of `ndim` dims and shape `logical` that this rank of
 * `mesh` holds under placement p: its shape (local) and where it starts (offset;
 * either may be NULL). Axes that split the same dimension nest outer to inner
 * (pp, dp, ep, cp, tp). MG_ERR_INVALID naming the dimension when a split does not
 * divide it. */
int mg_placement_local(const mg_placement *p, const mg_mesh *mesh, int ndim, const int64_t *logical, int64_t *local,
                       int64_t *offset, mg_error *err);

/* Whether a placement is on the experts' axes (ep, etp, edp split or partial). */
bool mg_placement_expert(const mg_placement *p);
/* Whether this rank is the one that writes the tensor's block when every element is
 * to be written once (checkpoints): on every axis of its rank generator (dense: tp, cp,
 * dp, pp; expert: etp, ep, edp, pp) it is split over, or this rank has index 0 there. A
 * partial sum is never complete on one rank: false. */
bool mg_placement_owner(const mg_placement *p, const mg_mesh *mesh);

/* "tp:S0 dp:P" (FULL axes omitted; "replicated" when all are). */
const char *mg_placement_str(const mg_placement *p, char *buf, size_t len);

#ifdef __cplusplus
}
#endif
#endif

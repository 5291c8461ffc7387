/* Helpers and rules shared by the op families' sharding rules (ops/op.h, mg_shard_fn).
 * Library-internal. */
#ifndef MG_OPS_SHARD_H
#define MG_OPS_SHARD_H

#include "ops/op.h"

static inline mg_sharding mg_sh_full(void) { return (mg_sharding){MG_SHARD_FULL, -1, MG_GROUP_NONE}; }
static inline mg_sharding mg_sh_split(int d) { return (mg_sharding){MG_SHARD_SPLIT, d, MG_GROUP_NONE}; }
static inline mg_sharding mg_sh_partial(void) { return (mg_sharding){MG_SHARD_PARTIAL, -1, MG_GROUP_NONE}; }
static inline bool mg_sh_is_split(mg_sharding s) { return s.kind == MG_SHARD_SPLIT; }
static inline bool mg_sh_is_partial(mg_sharding s) { return s.kind == MG_SHARD_PARTIAL; }
static inline bool mg_sh_is_full(mg_sharding s) { return s.kind == MG_SHARD_FULL; }

/* Target for a partial tensor that an op needs whole, as the axis resolves it
 * (mg_shard_ctx.resolve: tensor parallelism under sequence parallelism splits the rows
 * when the op allows it and they divide), else full. */
mg_sharding mg_shard_resolve(const mg_shard_ctx *c, const mg_tensor *t, bool allow_seq_split);
/* Whole (non-partial) target for input i: its own state when it is not partial. */
mg_sharding mg_shard_whole(const mg_shard_ctx *c, const mg_node *n, const mg_shard_io *io, int i, bool allow_seq);

/* Elementwise ops over inputs of one shape: every input in one state; partial only
 * when the op is linear in all inputs; splits along the last dimension only when the
 * op does not mix the elements of a row. */
int mg_shard_same_state(const mg_node *n, const mg_shard_ctx *c, mg_shard_io *io, bool linear, bool row_local);

/* Rules several families share. */
int mg_shard_rule_linear(const mg_node *n, const mg_shard_ctx *c, mg_shard_io *io, mg_error *err);
int mg_shard_rule_pointwise(const mg_node *n, const mg_shard_ctx *c, mg_shard_io *io, mg_error *err);
int mg_shard_rule_rowwise(const mg_node *n, const mg_shard_ctx *c, mg_shard_io *io, mg_error *err);
/* Scalars of the optimizer step and constants: everything replicated. */
int mg_shard_rule_replicated(const mg_node *n, const mg_shard_ctx *c, mg_shard_io *io, mg_error *err);
/* sum / mean over a dim, sum_to (gradient of broadcasting), expand. */
int mg_shard_rule_reduce(const mg_node *n, const mg_shard_ctx *c, mg_shard_io *io, mg_error *err);

#endif

/* Storage internals for the executors in scheduler/ (not installed). */
#ifndef MG_SCHEDULER_STORAGE_INTERNAL_H
#define MG_SCHEDULER_STORAGE_INTERNAL_H

#include "mgraph/engine.h"

/* Plan buffer index holding tensor t (-1 if t is not of this storage's graph). */
int mg_storage_buffer_of(const mg_storage *s, const mg_tensor *t);
/* Where in that buffer t starts, in bytes (0 but for views: mg_memplan.offset_of). */
size_t mg_storage_offset_of(const mg_storage *s, const mg_tensor *t);
/* Whether t is a part placed inside a larger tensor's bytes (mg_memplan.partial). */
bool mg_storage_partial(const mg_storage *s, const mg_tensor *t);
/* The allocated copy (index for mg_storage_buffer) of plan buffer b that micro-batch
 * instance mb uses (mb < 0: outside the per-micro-batch part, copy 0); -1 if none. */
int mg_storage_copy_of(const mg_storage *s, int b, int mb);

/* An engine that keeps device copies (StarPU with CUDA workers) hooks host access:
 * fn(ctx, b) runs before mg_storage_data / mg_storage_buffer return buffer b, and
 * must leave the host copy current and the only valid one (the host may write it).
 * NULL unhooks. */
void mg_storage_set_host_access(mg_storage *s, void (*fn)(void *ctx, int buffer), void *ctx);

#endif

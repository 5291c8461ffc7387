/* Storage internals for the executors in scheduler/ (not installed). */
#ifndef MG_SCHEDULER_STORAGE_INTERNAL_H
#define MG_SCHEDULER_STORAGE_INTERNAL_H

#include "mgraph/engine.h"

/* Plan buffer index holding tensor t (-1 if t is not of this storage's graph). */
int mg_storage_buffer_of(const mg_storage *s, const mg_tensor *t);

#endif

/* Shared by io/torch_zip.c (the archive, tensors) and io/pickle.c (the unpickler). */
#ifndef MGRAPH_IO_TORCH_INTERNAL_H
#define MGRAPH_IO_TORCH_INTERNAL_H

#include "mgraph/torchfile.h"

/* Values, strings and arrays of one file, freed together. */
typedef struct mg_arena mg_arena;
mg_arena *mg_arena_new(void);
void mg_arena_free(mg_arena *a);
void *mg_arena_alloc(mg_arena *a, size_t n); /* zeroed, 16-byte aligned; NULL: no memory */

/* What the unpickler asks of the archive: the storage record `key` ("0", "1", ...) for a
 * persistent id; *data NULL and MG_OK for an empty record. MG_ERR_IO naming it when absent. */
typedef int (*mg_pk_storage_fn)(void *ctx, const char *key, const unsigned char **data, size_t *bytes, mg_error *err);

/* Unpickles [p, p + n) into the arena. `name` names the pickle in messages. storage may be
 * NULL (a plain pickle: a persistent id is then an error). */
int mg_pk_load(mg_arena *a, const unsigned char *p, size_t n, const char *name, mg_pk_storage_fn storage, void *ctx,
               mg_torch_file *file, mg_pk **root, mg_error *err);

#endif

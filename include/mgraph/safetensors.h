/* The safetensors file format (Hugging Face), read and written with every header field
 * checked.
 *
 * A file is: u64 little-endian N, N bytes of JSON header, the data. The header maps
 * each tensor key to {"dtype", "shape", "data_offsets": [begin, end]} (offsets relative
 * to the data), plus an optional "__metadata__" object of string values. The reader
 * refuses (MG_ERR_IO, naming the file and the field): a file shorter than its header
 * says, a header that is not a JSON object, duplicate keys, unknown fields, dtypes
 * mgraph does not hold, negative or oversized shapes, offsets that disagree with
 * shape x dtype size, overlap, holes, or data that does not end at the end of the file.
 */
#ifndef MGRAPH_SAFETENSORS_H
#define MGRAPH_SAFETENSORS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "mgraph/error.h"
#include "mgraph/graph.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mg_st_entry {
    const char *key;
    mg_dtype dtype;
    int ndim;
    int64_t shape[MG_MAX_DIMS];
    uint64_t begin, end;            /* byte range in the data section */
} mg_st_entry;

typedef struct mg_st_file mg_st_file;

/* Maps and validates `path` (read-only). */
int mg_st_open(const char *path, mg_st_file **out, mg_error *err);
void mg_st_close(mg_st_file *f);
const char *mg_st_path(const mg_st_file *f);
int mg_st_n_entries(const mg_st_file *f);
/* Entries in data order. */
const mg_st_entry *mg_st_entry_at(const mg_st_file *f, int i);
const mg_st_entry *mg_st_find(const mg_st_file *f, const char *key);
/* The entry's bytes (little-endian, end - begin of them). */
const void *mg_st_data(const mg_st_file *f, const mg_st_entry *e);
/* A __metadata__ value, or NULL. */
const char *mg_st_metadata(const mg_st_file *f, const char *key);

/* A tensor to write. */
typedef struct mg_st_out {
    const char *key;
    mg_dtype dtype;
    int ndim;
    const int64_t *shape;
    const void *data;               /* numel(shape) elements */
} mg_st_out;

/* Writes the tensors in the given order with __metadata__ {meta_keys[i]: meta_values[i]}
 * (n_meta pairs), atomically (temporary file + rename; fsync when asked). */
int mg_st_write(const char *path, const mg_st_out *t, int n, const char *const *meta_keys,
                const char *const *meta_values, int n_meta, bool fsync, mg_error *err);

/* "F32", "BF16", "F16", "I32"; and back (false for anything else). */
const char *mg_st_dtype_name(mg_dtype dt);
bool mg_st_dtype_parse(const char *s, mg_dtype *dt);

#ifdef __cplusplus
}
#endif
#endif

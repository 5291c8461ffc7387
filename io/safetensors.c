/* safetensors read (mmap, every field checked) and write (atomic) with jansson. */
#include "mgraph/infile.h"
#include "mgraph/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "mgraph/outfile.h"

/* Headers above this are refused before reading them (the Rust crate uses 100 MB). */
#define ST_MAX_HEADER (100u << 20)

struct mg_st_file {
    char *path;
    const uint8_t *map;
    size_t size;
    uint64_t data_start;
    mg_st_entry *e;
    int n;
    json_t *meta;           /* __metadata__ or NULL */
};

static const char *const dtype_names[MG_DTYPE_COUNT] = {[MG_F32] = "F32",         [MG_BF16] = "BF16",
                                                        [MG_F16] = "F16",         [MG_I32] = "I32",
                                                        [MG_F8E4M3] = "F8_E4M3", [MG_F8E5M2] = "F8_E5M2"};

const char *mg_st_dtype_name(mg_dtype dt) { return dt >= 0 && dt < MG_DTYPE_COUNT ? dtype_names[dt] : "?"; }

bool mg_st_dtype_parse(const char *s, mg_dtype *dt) {
    for (int i = 0; i < MG_DTYPE_COUNT; i++)
        if (dtype_names[i] && !strcmp(s, dtype_names[i])) {
            *dt = (mg_dtype)i;
            return true;
        }
    return false;
}

void mg_st_close(mg_st_file *f) {
    if (!f) return;
    if (f->map && f->size) mg_input_unmap(f->map, f->size);
    for (int i = 0; i < f->n; i++) free((char *)f->e[i].key);
    free(f->e);
    json_decref(f->meta);
    free(f->path);
    free(f);
}

const char *mg_st_path(const mg_st_file *f) { return f->path; }
int mg_st_n_entries(const mg_st_file *f) { return f->n; }
const mg_st_entry *mg_st_entry_at(const mg_st_file *f, int i) { return i >= 0 && i < f->n ? &f->e[i] : NULL; }

const mg_st_entry *mg_st_find(const mg_st_file *f, const char *key) {
    for (int i = 0; i < f->n; i++)
        if (!strcmp(f->e[i].key, key)) return &f->e[i];
    return NULL;
}

const void *mg_st_data(const mg_st_file *f, const mg_st_entry *e) { return f->map + f->data_start + e->begin; }

const char *mg_st_metadata(const mg_st_file *f, const char *key) {
    json_t *v = f->meta ? json_object_get(f->meta, key) : NULL;
    return v ? json_string_value(v) : NULL;
}

static int cmp_begin(const void *a, const void *b) {
    const mg_st_entry *x = a, *y = b;
    return x->begin < y->begin ? -1 : x->begin > y->begin ? 1 : (x->end > y->end) - (x->end < y->end);
}

/* A non-negative JSON integer. */
static bool get_u64(const json_t *v, uint64_t *out) {
    if (!json_is_integer(v) || json_integer_value(v) < 0) return false;
    *out = (uint64_t)json_integer_value(v);
    return true;
}

static int parse_entry(mg_st_file *f, const char *key, json_t *v, mg_st_entry *e, mg_error *err) {
    const char *p = f->path;
    if (!*key) return mg_error_set(err, MG_ERR_IO, "%s: safetensors header has an empty tensor name", p);
    if (!json_is_object(v)) return mg_error_set(err, MG_ERR_IO, "%s: tensor '%s' is not a JSON object", p, key);
    const char *field;
    json_t *fv;
    json_object_foreach(v, field, fv) {
        if (strcmp(field, "dtype") && strcmp(field, "shape") && strcmp(field, "data_offsets"))
            return mg_error_set(err, MG_ERR_IO, "%s: tensor '%s' has an unknown field '%s'", p, key, field);
    }
    json_t *dt = json_object_get(v, "dtype"), *sh = json_object_get(v, "shape"), *off = json_object_get(v, "data_offsets");
    if (!json_is_string(dt)) return mg_error_set(err, MG_ERR_IO, "%s: tensor '%s': dtype missing or not a string", p, key);
    if (!mg_st_dtype_parse(json_string_value(dt), &e->dtype))
        return mg_error_set(err, MG_ERR_IO, "%s: tensor '%s': dtype '%s' is not one mgraph holds (F32, BF16, F16, I32)", p,
                            key, json_string_value(dt));
    if (!json_is_array(sh) || json_array_size(sh) > MG_MAX_DIMS)
        return mg_error_set(err, MG_ERR_IO, "%s: tensor '%s': shape missing, not an array or more than %d dims", p, key,
                            MG_MAX_DIMS);
    e->ndim = (int)json_array_size(sh);
    uint64_t numel = 1;
    for (int d = 0; d < e->ndim; d++) {
        uint64_t x;
        if (!get_u64(json_array_get(sh, (size_t)d), &x) || x > ((uint64_t)1 << 40))
            return mg_error_set(err, MG_ERR_IO, "%s: tensor '%s': shape[%d] is not an integer in [0, 2^40]", p, key, d);
        e->shape[d] = (int64_t)x;
        if (x && numel > ((uint64_t)1 << 50) / x)
            return mg_error_set(err, MG_ERR_IO, "%s: tensor '%s': shape too large", p, key);
        numel *= x;
    }
    if (!json_is_array(off) || json_array_size(off) != 2 || !get_u64(json_array_get(off, 0), &e->begin) ||
        !get_u64(json_array_get(off, 1), &e->end) || e->end < e->begin)
        return mg_error_set(err, MG_ERR_IO, "%s: tensor '%s': data_offsets must be [begin, end] with 0 <= begin <= end",
                            p, key);
    if (e->end - e->begin != numel * mg_dtype_size(e->dtype))
        return mg_error_set(err, MG_ERR_IO, "%s: tensor '%s': data_offsets span %llu bytes, shape x dtype is %llu", p,
                            key, (unsigned long long)(e->end - e->begin),
                            (unsigned long long)(numel * mg_dtype_size(e->dtype)));
    e->key = strdup(key);
    return e->key ? MG_OK : mg_error_set(err, MG_ERR_NOMEM, "out of memory");
}

static int parse_header(mg_st_file *f, mg_error *err) {
    const char *p = f->path;
    if (f->size < 8) return mg_error_set(err, MG_ERR_IO, "%s: truncated safetensors file (%zu bytes)", p, f->size);
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = (n << 8) | f->map[i];
    if (n < 2 || n > ST_MAX_HEADER || n > f->size - 8)
        return mg_error_set(err, MG_ERR_IO, "%s: safetensors header length %llu does not fit the file (%zu bytes)", p,
                            (unsigned long long)n, f->size);
    f->data_start = 8 + n;
    json_error_t je;
    json_t *h = json_loadb((const char *)f->map + 8, (size_t)n, JSON_REJECT_DUPLICATES, &je);
    if (!h || !json_is_object(h)) {
        json_decref(h);
        return mg_error_set(err, MG_ERR_IO, "%s: safetensors header is not a JSON object (%s)", p, h ? "" : je.text);
    }
    size_t cap = json_object_size(h);
    f->e = calloc(cap ? cap : 1, sizeof *f->e);
    if (!f->e) {
        json_decref(h);
        return mg_error_set(err, MG_ERR_NOMEM, "out of memory");
    }
    const char *key;
    json_t *v;
    int rc = MG_OK;
    json_object_foreach(h, key, v) {
        if (!strcmp(key, "__metadata__")) {
            const char *mk;
            json_t *mv;
            if (!json_is_object(v)) {
                rc = mg_error_set(err, MG_ERR_IO, "%s: __metadata__ is not a JSON object", p);
                break;
            }
            json_object_foreach(v, mk, mv) {
                if (!json_is_string(mv)) rc = mg_error_set(err, MG_ERR_IO, "%s: __metadata__ '%s' is not a string", p, mk);
            }
            if (rc) break;
            f->meta = json_incref(v);
            continue;
        }
        rc = parse_entry(f, key, v, &f->e[f->n], err);
        if (rc) break;
        f->n++;
    }
    json_decref(h);
    if (rc) return rc;
    qsort(f->e, (size_t)f->n, sizeof *f->e, cmp_begin);
    uint64_t at = 0, data = f->size - f->data_start;
    for (int i = 0; i < f->n; i++) {
        if (f->e[i].begin != at)
            return mg_error_set(err, MG_ERR_IO, "%s: tensor '%s' starts at data byte %llu, expected %llu (%s)", p,
                                f->e[i].key, (unsigned long long)f->e[i].begin, (unsigned long long)at,
                                f->e[i].begin < at ? "overlap" : "hole");
        at = f->e[i].end;
    }
    if (at != data)
        return mg_error_set(err, MG_ERR_IO, "%s: the tensors cover %llu data bytes, the file holds %llu (%s)", p,
                            (unsigned long long)at, (unsigned long long)data, at > data ? "truncated" : "trailing bytes");
    return MG_OK;
}

int mg_st_open(const char *path, mg_st_file **out, mg_error *err) {
    *out = NULL;
    mg_st_file *f = calloc(1, sizeof *f);
    if (!f || !(f->path = strdup(path))) {
        free(f);
        return mg_error_set(err, MG_ERR_NOMEM, "out of memory");
    }
    const void *m = NULL;
    int rc = mg_input_map(path, "safetensors file", &m, &f->size, err);
    if (rc) {
        mg_st_close(f);
        return rc;
    }
    f->map = m;
    rc = parse_header(f, err);
    if (rc) {
        mg_st_close(f);
        return rc;
    }
    *out = f;
    return MG_OK;
}

int mg_st_write(const char *path, const mg_st_out *t, int n, const char *const *meta_keys,
                const char *const *meta_values, int n_meta, bool fsync, mg_error *err) {
    json_t *h = json_object(), *meta = n_meta ? json_object() : NULL;
    if (!h || (n_meta && !meta)) {
        json_decref(h);
        json_decref(meta);
        return mg_error_set(err, MG_ERR_NOMEM, "out of memory");
    }
    for (int i = 0; i < n_meta; i++) json_object_set_new(meta, meta_keys[i], json_string(meta_values[i]));
    if (meta) json_object_set_new(h, "__metadata__", meta);
    uint64_t at = 0;
    for (int i = 0; i < n; i++) {
        json_t *sh = json_array();
        uint64_t numel = 1;
        for (int d = 0; d < t[i].ndim; d++) {
            json_array_append_new(sh, json_integer(t[i].shape[d]));
            numel *= (uint64_t)t[i].shape[d];
        }
        uint64_t bytes = numel * mg_dtype_size(t[i].dtype);
        json_t *e = json_pack("{s:s, s:o, s:[I, I]}", "dtype", mg_st_dtype_name(t[i].dtype), "shape", sh, "data_offsets",
                              (json_int_t)at, (json_int_t)(at + bytes));
        if (!e || json_object_set_new(h, t[i].key, e)) {
            json_decref(h);
            return mg_error_set(err, MG_ERR_INVALID, "%s: cannot add tensor '%s' to the header (duplicate name?)", path,
                                t[i].key);
        }
        at += bytes;
    }
    char *text = json_dumps(h, JSON_COMPACT | JSON_SORT_KEYS);
    json_decref(h);
    if (!text) return mg_error_set(err, MG_ERR_NOMEM, "out of memory");
    size_t len = strlen(text), padded = (len + 7) / 8 * 8; /* 8-byte aligned data, as the Rust crate writes */
    mg_outfile *o = NULL;
    mg_outfile_options opt = {fsync, true};
    int rc = mg_outfile_open(path, "safetensors file", &opt, &o, err);
    if (rc) {
        free(text);
        return rc;
    }
    /* Every write is checked and its errno kept: a full disk is reported as ENOSPC at
     * the write that hit it (stdio's later flush or close may no longer know why). */
    FILE *s = mg_outfile_stream(o);
    uint8_t le[8];
    for (int i = 0; i < 8; i++) le[i] = (uint8_t)((uint64_t)padded >> (8 * i));
    errno = 0;
    bool ok = fwrite(le, 1, 8, s) == 8 && fwrite(text, 1, len, s) == len;
    for (size_t i = len; ok && i < padded; i++) ok = fputc(' ', s) != EOF;
    free(text);
    for (int i = 0; ok && i < n; i++) {
        size_t bytes = mg_dtype_size(t[i].dtype);
        for (int d = 0; d < t[i].ndim; d++) bytes *= (size_t)t[i].shape[d];
        ok = !bytes || fwrite(t[i].data, 1, bytes, s) == bytes;
    }
    if (!ok) {
        int e = errno ? errno : EIO;
        mg_outfile_abort(o);
        return mg_error_set(err, MG_ERR_RUNTIME, "writing %s failed: %s", path, strerror(e));
    }
    return mg_outfile_commit(o, err);
}

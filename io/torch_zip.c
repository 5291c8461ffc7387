/* torch.save archives: the zip container, the storages, tensors as float32
 * (include/mgraph/torchfile.h). The pickle itself is io/pickle.c. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/torch_internal.h"
#include "mgraph/infile.h"

/* ---- arena ---------------------------------------------------------------------------- */
typedef struct arena_block {
    struct arena_block *next;
    size_t used, cap;
    _Alignas(16) unsigned char data[];
} arena_block;

struct mg_arena {
    arena_block *head;
};

mg_arena *mg_arena_new(void) { return calloc(1, sizeof(mg_arena)); }

void mg_arena_free(mg_arena *a) {
    if (!a) return;
    for (arena_block *b = a->head, *n; b; b = n) {
        n = b->next;
        free(b);
    }
    free(a);
}

void *mg_arena_alloc(mg_arena *a, size_t n) {
    n = (n + 15) & ~(size_t)15;
    if (n == 0) n = 16;
    arena_block *b = a->head;
    if (!b || b->cap - b->used < n) {
        size_t cap = n > 65536 ? n : 65536;
        if (cap > SIZE_MAX - sizeof *b) return NULL;
        b = malloc(sizeof *b + cap);
        if (!b) return NULL;
        b->used = 0, b->cap = cap, b->next = a->head;
        a->head = b;
    }
    void *p = b->data + b->used;
    b->used += n;
    memset(p, 0, n);
    return p;
}

/* ---- CRC-32 (zip's: IEEE 802.3, reflected) -------------------------------------------- */
static uint32_t crc_table[8][256];

static void crc_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        crc_table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++) crc_table[t][i] = (crc_table[t - 1][i] >> 8) ^ crc_table[0][crc_table[t - 1][i] & 0xFF];
}

/* slicing by 8: a few GB/s, so checking every record read costs little next to reading it */
static uint32_t crc32_of(const unsigned char *p, size_t n) {
    static int ready;
    if (!ready) { /* (idempotent: racing initialisations write the same table) */
        crc_init();
        ready = 1;
    }
    uint32_t c = 0xFFFFFFFFu;
    while (n >= 8) {
        uint32_t lo = c ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
        c = crc_table[7][lo & 0xFF] ^ crc_table[6][(lo >> 8) & 0xFF] ^ crc_table[5][(lo >> 16) & 0xFF] ^
            crc_table[4][lo >> 24] ^ crc_table[3][p[4]] ^ crc_table[2][p[5]] ^ crc_table[1][p[6]] ^ crc_table[0][p[7]];
        p += 8, n -= 8;
    }
    while (n--) c = crc_table[0][(c ^ *p++) & 0xFF] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}

/* ---- the archive ------------------------------------------------------------------------- */
typedef struct zrec {
    const char *name;             /* in the arena */
    const unsigned char *data;
    uint64_t size;
    uint32_t crc;
    int checked;                  /* CRC verified */
} zrec;

struct mg_torch_file {
    char name[1024];
    mg_arena *arena;
    const void *map;              /* mapping owned by the file (mg_torch_open), or NULL */
    size_t map_len;
    const unsigned char *base;    /* the archive's bytes */
    size_t len;
    zrec *recs;                   /* sorted by name */
    size_t n_recs;
    char prefix[512];             /* "archive/" */
    mg_pk *root;
};

static uint64_t le(const unsigned char *p, int n) {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

static int rec_cmp(const void *a, const void *b) { return strcmp(((const zrec *)a)->name, ((const zrec *)b)->name); }

static zrec *find_rec(mg_torch_file *f, const char *name) {
    zrec key = {.name = name};
    return f->n_recs ? bsearch(&key, f->recs, f->n_recs, sizeof key, rec_cmp) : NULL;
}

static int rec_check(mg_torch_file *f, zrec *r, mg_error *err) {
    if (r->checked) return MG_OK;
    if (crc32_of(r->data, (size_t)r->size) != r->crc)
        return mg_error_set(err, MG_ERR_IO, "%s: record %s is corrupt (its CRC-32 does not match)", f->name, r->name);
    r->checked = 1;
    return MG_OK;
}

#define ZIP_FAIL(...) mg_error_set(err, MG_ERR_IO, __VA_ARGS__)

/* The central directory: every record's name, data range and CRC, checked against its
 * local header. */
static int read_zip(mg_torch_file *f, mg_error *err) {
    const unsigned char *b = f->base;
    size_t n = f->len;
    if (n >= 2 && b[0] == 0x80 && b[1] <= 5)
        return mg_error_set(err, MG_ERR_UNSUPPORTED, "%s is in torch's legacy (pre-1.6, non-zip) format: load and "
                            "save it again with torch >= 1.6 (torch.save's default since then)", f->name);
    if (n < 22 || le(b, 4) != 0x04034b50) return ZIP_FAIL("%s is not a torch.save archive (no zip header)", f->name);
    /* the end-of-central-directory record: the last 22 bytes, or before a comment */
    size_t eocd = SIZE_MAX;
    for (size_t back = 0; back <= 65535 && back + 22 <= n; back++) {
        size_t at = n - 22 - back;
        if (le(b + at, 4) == 0x06054b50 && le(b + at + 20, 2) == back) {
            eocd = at;
            break;
        }
    }
    if (eocd == SIZE_MAX) return ZIP_FAIL("%s: no zip end-of-directory record (truncated?)", f->name);
    uint64_t count = le(b + eocd + 10, 2), cd_size = le(b + eocd + 12, 4), cd_off = le(b + eocd + 16, 4);
    size_t cd_end = eocd;
    if (le(b + eocd + 4, 2) != 0 || le(b + eocd + 6, 2) != 0) return ZIP_FAIL("%s: a multi-disk zip archive", f->name);
    if (eocd >= 20 && le(b + eocd - 20, 4) == 0x07064b50) { /* zip64 */
        uint64_t rec = le(b + eocd - 20 + 8, 8);
        if (rec > eocd - 20 || eocd - 20 - rec < 56 || le(b + rec, 4) != 0x06064b50)
            return ZIP_FAIL("%s: bad zip64 end-of-directory record", f->name);
        count = le(b + rec + 32, 8), cd_size = le(b + rec + 40, 8), cd_off = le(b + rec + 48, 8);
        cd_end = (size_t)rec;
    }
    if (cd_off > cd_end || cd_size != cd_end - cd_off)
        return ZIP_FAIL("%s: the zip central directory is not where its end record says (truncated or has data "
                        "prepended)", f->name);
    if (count > cd_size / 46) return ZIP_FAIL("%s: %llu zip records cannot fit the central directory", f->name,
                                              (unsigned long long)count);
    f->recs = mg_arena_alloc(f->arena, (size_t)(count ? count : 1) * sizeof *f->recs);
    if (!f->recs) return mg_error_set(err, MG_ERR_NOMEM, "out of memory");
    size_t p = (size_t)cd_off;
    for (uint64_t i = 0; i < count; i++) {
        if (cd_end - p < 46 || le(b + p, 4) != 0x02014b50) return ZIP_FAIL("%s: zip central directory entry %llu is bad",
                                                                          f->name, (unsigned long long)i);
        uint64_t flags = le(b + p + 8, 2), method = le(b + p + 10, 2), crc = le(b + p + 16, 4);
        uint64_t csize = le(b + p + 20, 4), usize = le(b + p + 24, 4), off = le(b + p + 42, 4);
        size_t nl = le(b + p + 28, 2), xl = le(b + p + 30, 2), cl = le(b + p + 32, 2);
        if (cd_end - p - 46 < nl + xl + cl) return ZIP_FAIL("%s: zip central directory entry %llu is cut short", f->name,
                                                           (unsigned long long)i);
        char *name = mg_arena_alloc(f->arena, nl + 1);
        if (!name) return mg_error_set(err, MG_ERR_NOMEM, "out of memory");
        memcpy(name, b + p + 46, nl);
        if (memchr(name, '\0', nl)) return ZIP_FAIL("%s: a zip record name holds NUL", f->name);
        /* zip64 sizes and offset: in the extra field (0x0001), those the header marks 0xFFFFFFFF */
        const unsigned char *x = b + p + 46 + nl, *xe = x + xl;
        while (xe - x >= 4) {
            size_t id = le(x, 2), sz = le(x + 2, 2);
            if ((size_t)(xe - x - 4) < sz) return ZIP_FAIL("%s: record %s has a bad zip extra field", f->name, name);
            if (id == 1) {
                const unsigned char *q = x + 4, *qe = q + sz;
                uint64_t *fld[3] = {&usize, &csize, &off};
                for (int k = 0; k < 3; k++) {
                    if (*fld[k] != 0xFFFFFFFFu) continue;
                    if (qe - q < 8) return ZIP_FAIL("%s: record %s has a short zip64 field", f->name, name);
                    *fld[k] = le(q, 8);
                    q += 8;
                }
            }
            x += 4 + sz;
        }
        if (flags & 1) return mg_error_set(err, MG_ERR_UNSUPPORTED, "%s: record %s is encrypted", f->name, name);
        if (method != 0)
            return mg_error_set(err, MG_ERR_UNSUPPORTED, "%s: record %s is compressed (zip method %llu); torch.save "
                                "stores records uncompressed: was the archive repacked?", f->name, name,
                                (unsigned long long)method);
        if (csize != usize) return ZIP_FAIL("%s: record %s is stored with two different sizes", f->name, name);
        if (off > cd_off || cd_off - off < 30 || le(b + off, 4) != 0x04034b50)
            return ZIP_FAIL("%s: record %s has no local header where the directory says", f->name, name);
        size_t lnl = le(b + off + 26, 2), lxl = le(b + off + 28, 2);
        uint64_t data = off + 30 + lnl + lxl;
        if (lnl != nl || memcmp(b + off + 30, name, nl) || data > cd_off || cd_off - data < usize)
            return ZIP_FAIL("%s: record %s: its local header disagrees with the directory, or its data runs past "
                            "the end", f->name, name);
        f->recs[f->n_recs++] = (zrec){name, b + data, usize, (uint32_t)crc, 0};
        p += 46 + nl + xl + cl;
    }
    qsort(f->recs, f->n_recs, sizeof *f->recs, rec_cmp);
    for (size_t i = 1; i < f->n_recs; i++)
        if (!strcmp(f->recs[i].name, f->recs[i - 1].name))
            return ZIP_FAIL("%s: two zip records are named %s", f->name, f->recs[i].name);
    return MG_OK;
}

static int storage_of(void *ctx, const char *key, const unsigned char **data, size_t *bytes, mg_error *err) {
    mg_torch_file *f = ctx;
    char name[1100];
    snprintf(name, sizeof name, "%sdata/%s", f->prefix, key);
    zrec *r = find_rec(f, name);
    if (!r) return ZIP_FAIL("%s: storage %s is referenced but the archive has no record %s", f->name, key, name);
    *data = r->size ? r->data : NULL;
    *bytes = (size_t)r->size;
    return MG_OK;
}

/* The archive's pickle: the one record named PREFIX/data.pkl. */
static int load_archive(mg_torch_file *f, mg_error *err) {
    int rc = read_zip(f, err);
    if (rc) return rc;
    zrec *pkl = NULL;
    for (size_t i = 0; i < f->n_recs; i++) {
        const char *nm = f->recs[i].name, *sl = strchr(nm, '/');
        if (sl && !strcmp(sl, "/data.pkl") && !pkl) pkl = &f->recs[i];
        else if (sl && !strcmp(sl, "/data.pkl")) return ZIP_FAIL("%s: two data.pkl records", f->name);
    }
    if (!pkl) return ZIP_FAIL("%s: a zip archive, but not torch.save's (no data.pkl record)", f->name);
    size_t pl = (size_t)(strchr(pkl->name, '/') - pkl->name) + 1;
    if (pl >= sizeof f->prefix) return ZIP_FAIL("%s: archive name too long", f->name);
    memcpy(f->prefix, pkl->name, pl);
    f->prefix[pl] = '\0';
    char bo[600];
    snprintf(bo, sizeof bo, "%sbyteorder", f->prefix);
    zrec *r = find_rec(f, bo);
    if (r && !(r->size == 6 && !memcmp(r->data, "little", 6)))
        return mg_error_set(err, MG_ERR_UNSUPPORTED, "%s: saved on a big-endian machine (byteorder record)", f->name);
    if ((rc = rec_check(f, pkl, err))) return rc;
    char what[1200];
    snprintf(what, sizeof what, "%s (%s)", f->name, pkl->name);
    return mg_pk_load(f->arena, pkl->data, (size_t)pkl->size, what, storage_of, f, f, &f->root, err);
}

static mg_torch_file *file_new(const char *name) {
    mg_torch_file *f = calloc(1, sizeof *f);
    if (f && !(f->arena = mg_arena_new())) {
        free(f);
        return NULL;
    }
    if (f) snprintf(f->name, sizeof f->name, "%s", name);
    return f;
}

int mg_torch_open(const char *path, const char *what, bool raw_pickle, mg_torch_file **out, mg_error *err) {
    *out = NULL;
    mg_torch_file *f = file_new(path);
    if (!f) return mg_error_set(err, MG_ERR_NOMEM, "out of memory");
    int rc = mg_input_map(path, what, &f->map, &f->map_len, err);
    f->base = f->map, f->len = f->map_len;
    if (!rc && !f->len) rc = ZIP_FAIL("%s %s is empty", what, path);
    if (!rc) rc = raw_pickle ? mg_pk_load(f->arena, f->base, f->len, path, NULL, NULL, f, &f->root, err) : load_archive(f, err);
    if (rc) {
        mg_torch_close(f);
        return rc;
    }
    *out = f;
    return MG_OK;
}

int mg_torch_open_mem(const void *base, size_t len, const char *name, mg_torch_file **out, mg_error *err) {
    *out = NULL;
    mg_torch_file *f = file_new(name);
    if (!f) return mg_error_set(err, MG_ERR_NOMEM, "out of memory");
    f->base = base, f->len = len;
    int rc = load_archive(f, err);
    if (rc) {
        mg_torch_close(f);
        return rc;
    }
    *out = f;
    return MG_OK;
}

void mg_torch_close(mg_torch_file *f) {
    if (!f) return;
    if (f->map) mg_input_unmap(f->map, f->map_len);
    mg_arena_free(f->arena);
    free(f);
}

int mg_torch_verify(mg_torch_file *f, mg_error *err) {
    for (size_t i = 0; i < f->n_recs; i++) {
        int rc = rec_check(f, &f->recs[i], err);
        if (rc) return rc;
    }
    return MG_OK;
}

const mg_pk *mg_torch_root(const mg_torch_file *f) { return f->root; }
const char *mg_torch_name(const mg_torch_file *f) { return f->name; }

/* ---- tensors --------------------------------------------------------------------------- */
static const struct { const char *name; size_t size; } dtypes[MG_T_COUNT] = {
    [MG_T_F64] = {"float64", 8}, [MG_T_F32] = {"float32", 4}, [MG_T_F16] = {"float16", 2},
    [MG_T_BF16] = {"bfloat16", 2}, [MG_T_I64] = {"int64", 8}, [MG_T_I32] = {"int32", 4},
    [MG_T_I16] = {"int16", 2}, [MG_T_I8] = {"int8", 1}, [MG_T_U8] = {"uint8", 1}, [MG_T_BOOL] = {"bool", 1},
};

const char *mg_torch_dtype_name(mg_torch_dtype d) { return d < MG_T_COUNT ? dtypes[d].name : "an unsupported type"; }
size_t mg_torch_dtype_size(mg_torch_dtype d) { return d < MG_T_COUNT ? dtypes[d].size : 0; }

int64_t mg_torch_numel(const mg_torch_tensor *t) {
    int64_t n = 1;
    for (int d = 0; d < t->ndim; d++) n *= t->shape[d];
    return n;
}

static float half_to_f32(uint16_t h) {
    int e = (h >> 10) & 31, m = h & 1023;
    float v = e == 0 ? ldexpf((float)m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexpf((float)(m | 1024), e - 25);
    return (h & 0x8000) ? -v : v;
}

static float elem(const unsigned char *p, mg_torch_dtype d) {
    switch (d) {
    case MG_T_F64: { double v; memcpy(&v, p, 8); return (float)v; }
    case MG_T_F32: { float v; memcpy(&v, p, 4); return v; }
    case MG_T_F16: return half_to_f32((uint16_t)le(p, 2));
    case MG_T_BF16: { uint32_t u = (uint32_t)le(p, 2) << 16; float v; memcpy(&v, &u, 4); return v; }
    case MG_T_I64: return (float)(int64_t)le(p, 8);
    case MG_T_I32: return (float)(int32_t)le(p, 4);
    case MG_T_I16: return (float)(int16_t)le(p, 2);
    case MG_T_I8: return (float)(int8_t)p[0];
    default: return (float)p[0];
    }
}

int mg_torch_tensor_f32(const mg_torch_tensor *t, float *out, const char *name, mg_error *err) {
    const char *fn = t->file ? t->file->name : "?";
    if (t->dtype >= MG_T_COUNT)
        return mg_error_set(err, MG_ERR_UNSUPPORTED, "%s: tensor %s has an element type mgraph does not read", fn, name);
    int64_t n = mg_torch_numel(t);
    if (n == 0) return MG_OK;
    /* every element inside the storage: offset + sum (shape - 1) x stride < numel */
    int64_t last = t->offset;
    for (int d = 0; d < t->ndim; d++) last += (t->shape[d] - 1) * t->stride[d];
    if (t->offset < 0 || last >= t->storage_numel || !t->data)
        return mg_error_set(err, MG_ERR_IO, "%s: tensor %s reaches past its storage %s (%lld elements)", fn, name,
                            t->key ? t->key : "?", (long long)t->storage_numel);
    if (t->file) { /* the storage record's CRC, once */
        char rn[1100];
        snprintf(rn, sizeof rn, "%sdata/%s", t->file->prefix, t->key);
        zrec *r = find_rec(t->file, rn);
        int rc = r ? rec_check(t->file, r, err) : MG_OK;
        if (rc) return rc;
    }
    size_t es = dtypes[t->dtype].size;
    bool contiguous = true;
    int64_t want = 1;
    for (int d = t->ndim - 1; d >= 0; d--) {
        if (t->shape[d] != 1 && t->stride[d] != want) contiguous = false;
        want *= t->shape[d];
    }
    const unsigned char *p = t->data + (size_t)t->offset * es;
    if (contiguous && t->dtype == MG_T_F32) {
        memcpy(out, p, (size_t)n * 4);
        return MG_OK;
    }
    if (contiguous) {
        for (int64_t i = 0; i < n; i++) out[i] = elem(p + (size_t)i * es, t->dtype);
        return MG_OK;
    }
    int64_t idx[MG_TORCH_MAX_DIMS] = {0}, off = 0;
    for (int64_t i = 0; i < n; i++) {
        out[i] = elem(p + (size_t)off * es, t->dtype);
        for (int d = t->ndim - 1; d >= 0; d--) {
            off += t->stride[d];
            if (++idx[d] < t->shape[d]) break;
            off -= t->stride[d] * t->shape[d];
            idx[d] = 0;
        }
    }
    return MG_OK;
}

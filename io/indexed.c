/* Megatron's indexed dataset (.bin/.idx), little-endian:
 *   .idx: "MMIDIDX\0\0" | u64 version (1) | u8 dtype | u64 sequence count S
 *         | u64 document-index count D | i32 lengths[S] | i64 byte offsets[S] | i64 doc idx[D]
 *   .bin: the sequences' items back to back.
 * The reader validates everything once at open so that later reads need no checks
 * and a corrupt file is an error message, never a crash. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "mgraph/infile.h"
#include "mgraph/dataset.h"
#include "mgraph/outfile.h"

static const char IDX_MAGIC[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', 0, 0};
#define IDX_HEADER_BYTES 34 /* 9 + 8 + 1 + 8 + 8 */

size_t mg_indexed_dtype_size(int dtype) {
    switch (dtype) {
    case MG_IDX_U8: case MG_IDX_I8: return 1;
    case MG_IDX_I16: case MG_IDX_U16: return 2;
    case MG_IDX_I32: case MG_IDX_F32: return 4;
    case MG_IDX_I64: case MG_IDX_F64: return 8;
    default: return 0;
    }
}

const char *mg_indexed_dtype_name(int dtype) {
    static const char *names[] = {"?", "uint8", "int8", "int16", "int32", "int64", "float64", "float32", "uint16"};
    return dtype >= 1 && dtype <= 8 ? names[dtype] : "invalid";
}

int mg_indexed_dtype_for_vocab(int64_t vocab) { return vocab < 65500 ? MG_IDX_U16 : MG_IDX_I32; }

/* ---- reader ---- */

struct mg_indexed_dataset {
    const void *idx_map, *bin_map; /* (mg_input_map: a truncation is reported by name) */
    size_t idx_size, bin_size;
    int dtype;
    uint64_t nseq, ndoc_idx;
    const int32_t *lengths; /* may be unaligned in principle; the header is 34 bytes */
    const unsigned char *offsets_raw, *docidx_raw;
    int64_t *docidx;        /* aligned copies: small next to the data, and handy for callers */
    int64_t *offsets;
    int32_t *lens;
};

void mg_indexed_free(mg_indexed_dataset *ds) {
    if (!ds) return;
    mg_input_unmap(ds->idx_map, ds->idx_size);
    mg_input_unmap(ds->bin_map, ds->bin_size);
    free(ds->docidx);
    free(ds->offsets);
    free(ds->lens);
    free(ds);
}

static uint64_t rd_u64(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

int mg_indexed_open(const char *prefix, mg_indexed_dataset **out, mg_error *err) {
    *out = NULL;
    size_t plen = strlen(prefix);
    char *idx = malloc(plen + 5), *bin = malloc(plen + 5);
    mg_indexed_dataset *ds = calloc(1, sizeof *ds);
    int rc = MG_OK;
    if (!idx || !bin || !ds) {
        rc = mg_error_set(err, MG_ERR_NOMEM, "out of memory");
        goto fail;
    }
    sprintf(idx, "%s.idx", prefix);
    sprintf(bin, "%s.bin", prefix);
    if ((rc = mg_input_map(idx, "dataset index", &ds->idx_map, &ds->idx_size, err))) goto fail;
    if ((rc = mg_input_map(bin, "dataset", &ds->bin_map, &ds->bin_size, err))) goto fail;
    const unsigned char *p = ds->idx_map;
    if (ds->idx_size < IDX_HEADER_BYTES) {
        rc = mg_error_set(err, MG_ERR_IO, "%s: truncated index (%zu bytes, the header alone is %d)", idx, ds->idx_size,
                          IDX_HEADER_BYTES);
        goto fail;
    }
    if (memcmp(p, IDX_MAGIC, 9) != 0) {
        rc = mg_error_set(err, MG_ERR_IO, "%s: bad magic (not a Megatron MMIDIDX index)", idx);
        goto fail;
    }
    uint64_t version = rd_u64(p + 9);
    if (version != 1) {
        rc = mg_error_set(err, MG_ERR_IO, "%s: unsupported index version %llu (expected 1)", idx,
                          (unsigned long long)version);
        goto fail;
    }
    ds->dtype = p[17];
    if (mg_indexed_dtype_size(ds->dtype) == 0) {
        rc = mg_error_set(err, MG_ERR_IO, "%s: invalid dtype code %d (valid: 1..8)", idx, ds->dtype);
        goto fail;
    }
    ds->nseq = rd_u64(p + 18);
    ds->ndoc_idx = rd_u64(p + 26);
    /* Overflow-safe size check: each count is bounded by the file size first. */
    if (ds->nseq > ds->idx_size / 12 || ds->ndoc_idx > ds->idx_size / 8 ||
        IDX_HEADER_BYTES + ds->nseq * 12 + ds->ndoc_idx * 8 > ds->idx_size) {
        rc = mg_error_set(err, MG_ERR_IO,
                          "%s: truncated index: the header claims %llu sequences and %llu document entries, "
                          "more than %zu bytes can hold",
                          idx, (unsigned long long)ds->nseq, (unsigned long long)ds->ndoc_idx, ds->idx_size);
        goto fail;
    }
    if (ds->ndoc_idx < 1) {
        rc = mg_error_set(err, MG_ERR_IO, "%s: no document index (it must start with 0)", idx);
        goto fail;
    }
    ds->lens = malloc((ds->nseq ? ds->nseq : 1) * sizeof *ds->lens);
    ds->offsets = malloc((ds->nseq ? ds->nseq : 1) * sizeof *ds->offsets);
    ds->docidx = malloc(ds->ndoc_idx * sizeof *ds->docidx);
    if (!ds->lens || !ds->offsets || !ds->docidx) {
        rc = mg_error_set(err, MG_ERR_NOMEM, "out of memory reading %s", idx);
        goto fail;
    }
    memcpy(ds->lens, p + IDX_HEADER_BYTES, ds->nseq * 4);
    memcpy(ds->offsets, p + IDX_HEADER_BYTES + ds->nseq * 4, ds->nseq * 8);
    memcpy(ds->docidx, p + IDX_HEADER_BYTES + ds->nseq * 12, ds->ndoc_idx * 8);
    size_t isz = mg_indexed_dtype_size(ds->dtype);
    for (uint64_t i = 0; i < ds->nseq; i++) {
        int64_t off = ds->offsets[i];
        int32_t len = ds->lens[i];
        if (len < 0 || off < 0 || (uint64_t)off > ds->bin_size ||
            (uint64_t)len * isz > ds->bin_size - (uint64_t)off) {
            rc = mg_error_set(err, MG_ERR_IO,
                              "%s: sequence %llu (offset %lld, %d items of %zu bytes) lies past the end of %s (%zu bytes)",
                              idx, (unsigned long long)i, (long long)off, len, isz, bin, ds->bin_size);
            goto fail;
        }
        if (off % (int64_t)isz) {
            rc = mg_error_set(err, MG_ERR_IO, "%s: sequence %llu has offset %lld, not a multiple of the item size %zu",
                              idx, (unsigned long long)i, (long long)off, isz);
            goto fail;
        }
    }
    /* Megatron's writer lays the sequences out back to back, so the .bin ends where the
     * last sequence does. A .bin of another size belongs to another .idx (one of the
     * pair was rewritten or cut short): refuse the pair rather than train on it. */
    uint64_t end = ds->nseq ? (uint64_t)ds->offsets[ds->nseq - 1] + (uint64_t)ds->lens[ds->nseq - 1] * isz : 0;
    if (end != ds->bin_size) {
        rc = mg_error_set(err, MG_ERR_IO,
                          "%s and %s do not belong together: the index describes %llu bytes of data, the .bin has %zu "
                          "(was one of them rewritten or cut short?)",
                          idx, bin, (unsigned long long)end, ds->bin_size);
        goto fail;
    }
    if (ds->docidx[0] != 0 || ds->docidx[ds->ndoc_idx - 1] != (int64_t)ds->nseq) {
        rc = mg_error_set(err, MG_ERR_IO, "%s: document index must run from 0 to the sequence count %llu", idx,
                          (unsigned long long)ds->nseq);
        goto fail;
    }
    for (uint64_t i = 1; i < ds->ndoc_idx; i++) {
        if (ds->docidx[i] < ds->docidx[i - 1]) {
            rc = mg_error_set(err, MG_ERR_IO, "%s: document index decreases at entry %llu", idx, (unsigned long long)i);
            goto fail;
        }
    }
    free(idx);
    free(bin);
    *out = ds;
    return MG_OK;
fail:
    free(idx);
    free(bin);
    mg_indexed_free(ds);
    return rc;
}

int mg_indexed_dtype(const mg_indexed_dataset *ds) { return ds->dtype; }
uint64_t mg_indexed_num_sequences(const mg_indexed_dataset *ds) { return ds->nseq; }
uint64_t mg_indexed_num_documents(const mg_indexed_dataset *ds) { return ds->ndoc_idx - 1; }
const int64_t *mg_indexed_document_indices(const mg_indexed_dataset *ds) { return ds->docidx; }
int32_t mg_indexed_sequence_length(const mg_indexed_dataset *ds, uint64_t seq) { return ds->lens[seq]; }
int64_t mg_indexed_sequence_offset(const mg_indexed_dataset *ds, uint64_t seq) { return ds->offsets[seq]; }
const void *mg_indexed_sequence_data(const mg_indexed_dataset *ds, uint64_t seq) {
    return (const unsigned char *)ds->bin_map + ds->offsets[seq];
}

int mg_indexed_read_tokens(const mg_indexed_dataset *ds, uint64_t seq, uint64_t offset, uint64_t count,
                           int32_t *out, mg_error *err) {
    if (seq >= ds->nseq)
        return mg_error_set(err, MG_ERR_INVALID, "sequence %llu out of range (%llu sequences)",
                            (unsigned long long)seq, (unsigned long long)ds->nseq);
    if (offset > (uint64_t)ds->lens[seq] || count > (uint64_t)ds->lens[seq] - offset)
        return mg_error_set(err, MG_ERR_INVALID, "items [%llu, %llu) outside sequence %llu of length %d",
                            (unsigned long long)offset, (unsigned long long)(offset + count),
                            (unsigned long long)seq, ds->lens[seq]);
    const unsigned char *p = (const unsigned char *)ds->bin_map + ds->offsets[seq];
    size_t isz = mg_indexed_dtype_size(ds->dtype);
    p += offset * isz;
    switch (ds->dtype) {
    case MG_IDX_U16:
        for (uint64_t i = 0; i < count; i++) {
            uint16_t v;
            memcpy(&v, p + 2 * i, 2);
            out[i] = v;
        }
        break;
    case MG_IDX_I32: memcpy(out, p, count * 4); break;
    case MG_IDX_U8: for (uint64_t i = 0; i < count; i++) out[i] = p[i]; break;
    case MG_IDX_I8: for (uint64_t i = 0; i < count; i++) out[i] = (int8_t)p[i]; break;
    case MG_IDX_I16:
        for (uint64_t i = 0; i < count; i++) {
            int16_t v;
            memcpy(&v, p + 2 * i, 2);
            out[i] = v;
        }
        break;
    case MG_IDX_I64:
        for (uint64_t i = 0; i < count; i++) {
            int64_t v;
            memcpy(&v, p + 8 * i, 8);
            if (v < INT32_MIN || v > INT32_MAX)
                return mg_error_set(err, MG_ERR_INVALID, "int64 item %lld does not fit a token id", (long long)v);
            out[i] = (int32_t)v;
        }
        break;
    default:
        return mg_error_set(err, MG_ERR_INVALID, "cannot read %s items as token ids", mg_indexed_dtype_name(ds->dtype));
    }
    return MG_OK;
}

/* ---- writer ---- */

/* Both files are written through mg_outfile: temporary files beside the targets,
 * renamed into place only when the whole pair is written (the .idx last, so a
 * previous pair is replaced by a complete new one), and nothing but those temporary
 * files is ever removed. A reader that had the old pair mapped keeps reading the old
 * files (a rename never truncates them: no SIGBUS). */
struct mg_indexed_writer {
    char *idx_path, *bin_path;
    mg_outfile *bin_out, *idx_out;
    FILE *bin;
    int dtype;
    size_t isz;
    int64_t bin_off;
    int32_t *lens;
    int64_t *offs;
    size_t nseq, cap_seq;
    int64_t *docidx;
    size_t ndoc, cap_doc;
    int finalized;
    unsigned char *conv; /* conversion scratch */
    size_t conv_cap;
};

int mg_indexed_writer_open(const char *prefix, int dtype, mg_indexed_writer **out, mg_error *err) {
    *out = NULL;
    if (mg_indexed_dtype_size(dtype) == 0) return mg_error_set(err, MG_ERR_INVALID, "invalid dtype code %d", dtype);
    mg_indexed_writer *w = calloc(1, sizeof *w);
    size_t plen = strlen(prefix);
    if (!w || !(w->idx_path = malloc(plen + 5)) || !(w->bin_path = malloc(plen + 5))) {
        mg_indexed_writer_free(w);
        return mg_error_set(err, MG_ERR_NOMEM, "out of memory");
    }
    sprintf(w->idx_path, "%s.idx", prefix);
    sprintf(w->bin_path, "%s.bin", prefix);
    w->dtype = dtype;
    w->isz = mg_indexed_dtype_size(dtype);
    int rc = mg_outfile_open(w->bin_path, "dataset", NULL, &w->bin_out, err);
    if (!rc) rc = mg_outfile_open(w->idx_path, "dataset index", NULL, &w->idx_out, err);
    if (rc) {
        mg_indexed_writer_free(w);
        return rc;
    }
    w->bin = mg_outfile_stream(w->bin_out);
    w->docidx = malloc(16 * sizeof *w->docidx);
    if (!w->docidx) {
        mg_indexed_writer_free(w);
        return mg_error_set(err, MG_ERR_NOMEM, "out of memory");
    }
    w->cap_doc = 16;
    w->docidx[w->ndoc++] = 0; /* Megatron's document_indices start with 0 */
    *out = w;
    return MG_OK;
}

static int grow(void **p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return 0;
    size_t nc = *cap ? *cap * 2 : 1024;
    while (nc < need) nc *= 2;
    void *np = realloc(*p, nc * elem);
    if (!np) return -1;
    *p = np;
    *cap = nc;
    return 0;
}

int mg_indexed_writer_add_raw(mg_indexed_writer *w, const void *items, size_t n, mg_error *err) {
    if (!w->bin) return mg_error_set(err, MG_ERR_INVALID, "indexed writer for %s already finalized", w->idx_path);
    if (n > INT32_MAX) return mg_error_set(err, MG_ERR_INVALID, "sequence of %zu items exceeds int32 lengths", n);
    size_t c1 = w->cap_seq, c2 = w->cap_seq;
    if (grow((void **)&w->lens, &c1, w->nseq + 1, sizeof *w->lens) ||
        grow((void **)&w->offs, &c2, w->nseq + 1, sizeof *w->offs))
        return mg_error_set(err, MG_ERR_NOMEM, "out of memory");
    w->cap_seq = c1 < c2 ? c1 : c2;
    if (n && fwrite(items, w->isz, n, w->bin) != n)
        return mg_error_set(err, MG_ERR_IO, "cannot write %s: %s", w->bin_path, strerror(errno));
    w->lens[w->nseq] = (int32_t)n;
    w->offs[w->nseq] = w->bin_off;
    w->nseq++;
    w->bin_off += (int64_t)(n * w->isz);
    return MG_OK;
}

int mg_indexed_writer_add_tokens(mg_indexed_writer *w, const int32_t *ids, size_t n, mg_error *err) {
    if (w->dtype == MG_IDX_I32) return mg_indexed_writer_add_raw(w, ids, n, err);
    if (grow((void **)&w->conv, &w->conv_cap, n * w->isz + 1, 1)) return mg_error_set(err, MG_ERR_NOMEM, "out of memory");
    long long lo, hi;
    switch (w->dtype) {
    case MG_IDX_U8: lo = 0; hi = 255; break;
    case MG_IDX_I8: lo = -128; hi = 127; break;
    case MG_IDX_I16: lo = INT16_MIN; hi = INT16_MAX; break;
    case MG_IDX_U16: lo = 0; hi = UINT16_MAX; break;
    default: lo = INT32_MIN; hi = INT32_MAX; break;
    }
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < lo || ids[i] > hi)
            return mg_error_set(err, MG_ERR_INVALID, "token id %d does not fit dtype %s", ids[i], mg_indexed_dtype_name(w->dtype));
        unsigned char *d = w->conv + i * w->isz;
        switch (w->dtype) {
        case MG_IDX_U8: case MG_IDX_I8: d[0] = (unsigned char)ids[i]; break;
        case MG_IDX_I16: case MG_IDX_U16: { uint16_t v = (uint16_t)ids[i]; memcpy(d, &v, 2); } break;
        case MG_IDX_I64: { int64_t v = ids[i]; memcpy(d, &v, 8); } break;
        case MG_IDX_F32: { float v = (float)ids[i]; memcpy(d, &v, 4); } break;
        case MG_IDX_F64: { double v = ids[i]; memcpy(d, &v, 8); } break;
        }
    }
    return mg_indexed_writer_add_raw(w, w->conv, n, err);
}

int mg_indexed_writer_end_document(mg_indexed_writer *w, mg_error *err) {
    if (grow((void **)&w->docidx, &w->cap_doc, w->ndoc + 1, sizeof *w->docidx))
        return mg_error_set(err, MG_ERR_NOMEM, "out of memory");
    w->docidx[w->ndoc++] = (int64_t)w->nseq;
    return MG_OK;
}

static void put_u64(unsigned char *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}

int mg_indexed_writer_finalize(mg_indexed_writer *w, mg_error *err) {
    if (w->finalized) return mg_error_set(err, MG_ERR_INVALID, "indexed writer for %s already finalized", w->idx_path);
    FILE *f = mg_outfile_stream(w->idx_out);
    unsigned char hdr[IDX_HEADER_BYTES];
    memcpy(hdr, IDX_MAGIC, 9);
    put_u64(hdr + 9, 1);
    hdr[17] = (unsigned char)w->dtype;
    put_u64(hdr + 18, w->nseq);
    put_u64(hdr + 26, w->ndoc);
    /* The arrays are written in host order: mgraph targets little-endian hosts only. */
    int ok = fwrite(hdr, 1, sizeof hdr, f) == sizeof hdr && fwrite(w->lens, 4, w->nseq, f) == w->nseq &&
             fwrite(w->offs, 8, w->nseq, f) == w->nseq && fwrite(w->docidx, 8, w->ndoc, f) == w->ndoc;
    if (!ok) return mg_error_set(err, MG_ERR_IO, "cannot write %s: %s", w->idx_path, strerror(errno));
    /* Everything is written (and flushed) before anything is renamed: then the .bin,
     * then the .idx, which a reader checks against the .bin's size. */
    int rc = mg_outfile_flush(w->idx_out, err);
    if (rc) return rc;
    mg_outfile *bin = w->bin_out, *idx = w->idx_out;
    w->bin_out = w->idx_out = NULL;
    w->bin = NULL;
    w->finalized = 1;
    rc = mg_outfile_commit(bin, err);
    if (rc) {
        mg_outfile_abort(idx);
        return rc;
    }
    return mg_outfile_commit(idx, err);
}

void mg_indexed_writer_free(mg_indexed_writer *w) {
    if (!w) return;
    /* unfinished: only the temporary files go; whatever was at the targets stays */
    mg_outfile_abort(w->bin_out);
    mg_outfile_abort(w->idx_out);
    free(w->idx_path);
    free(w->bin_path);
    free(w->lens);
    free(w->offs);
    free(w->docidx);
    free(w->conv);
    free(w);
}

/* TensorBoard event files (see include/mgraph/tensorboard.h): TFRecord framing and
 * the few Event/Summary protobuf fields scalars need, encoded by hand (field numbers
 * from tensorflow/core/util/event.proto and framework/summary.proto). */
#include "mgraph/tensorboard.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "mgraph/outfile.h"

struct mg_tb_writer {
    mg_outfile *out;
};

/* ---- CRC-32C ----------------------------------------------------------------------- */
static uint32_t crc_table[256];

static void crc_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1; /* reflected Castagnoli */
        crc_table[i] = c;
    }
}

uint32_t mg_crc32c(const void *data, size_t len) {
    if (!crc_table[1]) crc_init(); /* idempotent: racing initialisers write the same values */
    const unsigned char *p = data;
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < len; i++) c = crc_table[(c ^ p[i]) & 0xFF] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}

uint32_t mg_tfrecord_mask(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

/* ---- protobuf encoding --------------------------------------------------------------- */
/* An encoding buffer on the heap, grown as fields are appended: an event is a few dozen
 * bytes for a scalar and as long as the text for mg_tb_text. Out of memory is sticky (oom)
 * and reported once, when the record is written; buf_free releases it either way. */
typedef struct buf {
    unsigned char *b;
    size_t n, cap;
    int oom;
} buf;

static void put(buf *o, const void *p, size_t n) {
    if (o->oom) return;
    if (o->n + n > o->cap) {
        size_t cap = o->cap ? o->cap : 64;
        while (cap < o->n + n) cap *= 2;
        unsigned char *b = realloc(o->b, cap);
        if (!b) {
            o->oom = 1;
            return;
        }
        o->b = b;
        o->cap = cap;
    }
    memcpy(o->b + o->n, p, n);
    o->n += n;
}

static void buf_free(buf *o) {
    free(o->b);
    *o = (buf){0};
}

static void varint(buf *o, uint64_t v) {
    unsigned char t[10];
    size_t n = 0;
    do {
        t[n] = (unsigned char)(v & 0x7F);
        v >>= 7;
        if (v) t[n] |= 0x80;
        n++;
    } while (v);
    put(o, t, n);
}

static void le(buf *o, uint64_t v, int bytes) {
    unsigned char t[8];
    for (int i = 0; i < bytes; i++) t[i] = (unsigned char)(v >> (8 * i));
    put(o, t, (size_t)bytes);
}

static void field_bytes(buf *o, int field, const void *p, size_t n) {
    varint(o, (uint64_t)field << 3 | 2);
    varint(o, n);
    put(o, p, n);
}

static void field_double(buf *o, int field, double v) {
    uint64_t u;
    memcpy(&u, &v, 8);
    varint(o, (uint64_t)field << 3 | 1);
    le(o, u, 8);
}

static double wall_time(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* One TFRecord around an encoded Event. */
static int write_record(mg_tb_writer *w, const buf *ev, mg_error *err) {
    if (ev->oom) return mg_error_set(err, MG_ERR_NOMEM, "out of memory encoding a TensorBoard event");
    unsigned char f[12];
    for (int i = 0; i < 8; i++) f[i] = (unsigned char)((uint64_t)ev->n >> (8 * i));
    uint32_t lc = mg_tfrecord_mask(mg_crc32c(f, 8));
    for (int i = 0; i < 4; i++) f[8 + i] = (unsigned char)(lc >> (8 * i));
    FILE *s = mg_outfile_stream(w->out);
    unsigned char dc[4];
    uint32_t c = mg_tfrecord_mask(mg_crc32c(ev->b, ev->n));
    for (int i = 0; i < 4; i++) dc[i] = (unsigned char)(c >> (8 * i));
    if (fwrite(f, 1, sizeof f, s) != sizeof f || fwrite(ev->b, 1, ev->n, s) != ev->n || fwrite(dc, 1, 4, s) != 4)
        return mg_error_set(err, MG_ERR_IO, "cannot write TensorBoard events %s: %s", mg_outfile_path(w->out),
                            strerror(errno));
    return MG_OK;
}

int mg_tb_open(const char *dir, mg_tb_writer **out, mg_error *err) {
    *out = NULL;
    if (mkdir(dir, 0777) != 0 && errno != EEXIST)
        return mg_error_set(err, MG_ERR_IO, "cannot create --tensorboard-dir %s: %s", dir, strerror(errno));
    char host[256] = "localhost", path[4096];
    gethostname(host, sizeof host - 1);
    host[sizeof host - 1] = '\0';
    snprintf(path, sizeof path, "%s/events.out.tfevents.%lld.%s.%d", dir, (long long)time(NULL), host, (int)getpid());
    mg_tb_writer *w = calloc(1, sizeof *w);
    if (!w) return mg_error_set(err, MG_ERR_NOMEM, "out of memory");
    mg_outfile_options opt = {false, true};
    int rc = mg_outfile_open(path, "TensorBoard events", &opt, &w->out, err);
    if (rc) {
        free(w);
        return rc;
    }
    buf ev = {0};
    field_double(&ev, 1, wall_time());
    field_bytes(&ev, 3, "brain.Event:2", 13);
    rc = write_record(w, &ev, err);
    buf_free(&ev);
    if (rc) {
        mg_tb_abort(w);
        return rc;
    }
    *out = w;
    return MG_OK;
}

int mg_tb_scalar(mg_tb_writer *w, const char *tag, float value, int64_t step, mg_error *err) {
    buf val = {0}, sum = {0}, ev = {0};
    field_bytes(&val, 1, tag, strlen(tag)); /* Summary.Value.tag */
    uint32_t u;
    memcpy(&u, &value, 4);
    varint(&val, 2 << 3 | 5); /* Summary.Value.simple_value, fixed32 */
    le(&val, u, 4);
    field_bytes(&sum, 1, val.b, val.n); /* Summary.value */
    field_double(&ev, 1, wall_time());  /* Event.wall_time */
    varint(&ev, 2 << 3 | 0);            /* Event.step */
    varint(&ev, (uint64_t)step);
    field_bytes(&ev, 5, sum.b, sum.n); /* Event.summary */
    if (val.oom || sum.oom) ev.oom = 1;
    int rc = write_record(w, &ev, err);
    buf_free(&val);
    buf_free(&sum);
    buf_free(&ev);
    return rc;
}

int mg_tb_text(mg_tb_writer *w, const char *tag, const char *text, int64_t step, mg_error *err) {
    /* as SummaryWriter.add_text writes it: tag "<tag>/text_summary", the text plugin's
     * metadata (plugin_name "text", empty content: TextPluginData version 0), and a
     * DT_STRING tensor of shape [1] holding the UTF-8 text */
    size_t tn = strlen(text);
    if (tn > 15000) /* TensorBoard's text plugin renders a table, not a document */
        return mg_error_set(err, MG_ERR_INVALID, "TensorBoard text for %s is %zu bytes (at most 15000)", tag, tn);
    buf name = {0}, meta = {0}, dim = {0}, shape = {0}, tensor = {0}, val = {0}, sum = {0}, ev = {0};
    char full[512];
    snprintf(full, sizeof full, "%s/text_summary", tag);
    field_bytes(&name, 1, "text", 4);          /* PluginData.plugin_name */
    field_bytes(&meta, 1, name.b, name.n);     /* SummaryMetadata.plugin_data */
    varint(&dim, 1 << 3 | 0);                  /* TensorShapeProto.Dim.size = 1 */
    varint(&dim, 1);
    field_bytes(&shape, 2, dim.b, dim.n);      /* TensorShapeProto.dim */
    varint(&tensor, 1 << 3 | 0);               /* TensorProto.dtype = DT_STRING */
    varint(&tensor, 7);
    field_bytes(&tensor, 2, shape.b, shape.n); /* TensorProto.tensor_shape */
    field_bytes(&tensor, 8, text, tn);         /* TensorProto.string_val */
    field_bytes(&val, 1, full, strlen(full));  /* Summary.Value.tag */
    field_bytes(&val, 8, tensor.b, tensor.n);  /* Summary.Value.tensor */
    field_bytes(&val, 9, meta.b, meta.n);      /* Summary.Value.metadata (after, as torch writes it) */
    field_bytes(&sum, 1, val.b, val.n);        /* Summary.value */
    field_double(&ev, 1, wall_time());         /* Event.wall_time */
    varint(&ev, 2 << 3 | 0);                   /* Event.step */
    varint(&ev, (uint64_t)step);
    field_bytes(&ev, 5, sum.b, sum.n);         /* Event.summary */
    buf *all[] = {&name, &meta, &dim, &shape, &tensor, &val, &sum, &ev};
    for (size_t i = 0; i + 1 < sizeof all / sizeof *all; i++)
        if (all[i]->oom) ev.oom = 1;
    int rc = write_record(w, &ev, err);
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) buf_free(all[i]);
    return rc;
}

const char *mg_tb_path(const mg_tb_writer *w) { return mg_outfile_path(w->out); }

int mg_tb_close(mg_tb_writer *w, mg_error *err) {
    int rc = mg_outfile_commit(w->out, err);
    free(w);
    return rc;
}

void mg_tb_abort(mg_tb_writer *w) {
    if (!w) return;
    mg_outfile_abort(w->out);
    free(w);
}

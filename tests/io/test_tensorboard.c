/* TensorBoard event writer: CRC-32C known answers, then an event file written and
 * parsed back field by field (TFRecord framing, both checksums, the Event and Summary
 * protobuf fields), and a discarded writer that leaves nothing behind. Reading with
 * the tensorboard package itself is tests/tools/tensorboard_read.py. */
#include <dirent.h>
#include <stdint.h>
#include <sys/stat.h>

#include "io_test_util.h"
#include "mgraph/tensorboard.h"

static char g_dir[4096];

/* The single event file in dir (NULL when there is none or several). */
static char *event_file(const char *dir, int *count) {
    static char path[8192];
    DIR *d = opendir(dir);
    struct dirent *e;
    *count = 0;
    while (d && (e = readdir(d)))
        if (strncmp(e->d_name, "events.out.tfevents.", 20) == 0) {
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            (*count)++;
        }
    if (d) closedir(d);
    return *count == 1 ? path : NULL;
}

static int entries(const char *dir) {
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d))) n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
    if (d) closedir(d);
    return n;
}

static uint64_t le(const unsigned char *p, int n) {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

static uint64_t varint(const unsigned char **p, const unsigned char *end) {
    uint64_t v = 0;
    for (int s = 0; *p < end && s < 64; s += 7) {
        unsigned char b = *(*p)++;
        v |= (uint64_t)(b & 0x7F) << s;
        if (!(b & 0x80)) break;
    }
    return v;
}

/* What one Event holds of the fields the writer uses. */
typedef struct event {
    double wall_time;
    int64_t step;
    char version[32], tag[64];
    float value;
    int has_value;
    unsigned char tensor[64], meta[32]; /* a text summary's TensorProto and SummaryMetadata */
    size_t tensor_n, meta_n;
} event;

static void parse_value(const unsigned char *p, const unsigned char *end, event *ev) {
    while (p < end) {
        uint64_t key = varint(&p, end);
        if (key == (1 << 3 | 2)) { /* tag */
            uint64_t n = varint(&p, end);
            snprintf(ev->tag, sizeof ev->tag, "%.*s", (int)n, (const char *)p);
            p += n;
        } else if (key == (8 << 3 | 2) || key == (9 << 3 | 2)) { /* tensor, metadata (text) */
            uint64_t n = varint(&p, end);
            unsigned char *dst = key == (8 << 3 | 2) ? ev->tensor : ev->meta;
            size_t cap = key == (8 << 3 | 2) ? sizeof ev->tensor : sizeof ev->meta;
            CHECK(n <= cap, "text field of %llu bytes", (unsigned long long)n);
            if (n > cap) return;
            memcpy(dst, p, n);
            *(key == (8 << 3 | 2) ? &ev->tensor_n : &ev->meta_n) = n;
            p += n;
        } else if (key == (2 << 3 | 5)) { /* simple_value */
            uint32_t u = (uint32_t)le(p, 4);
            memcpy(&ev->value, &u, 4);
            ev->has_value = 1;
            p += 4;
        } else {
            CHECK(0, "unexpected Summary.Value field key %llu", (unsigned long long)key);
            return;
        }
    }
}

static void parse_event(const unsigned char *p, const unsigned char *end, event *ev) {
    memset(ev, 0, sizeof *ev);
    while (p < end) {
        uint64_t key = varint(&p, end);
        if (key == (1 << 3 | 1)) {
            uint64_t u = le(p, 8);
            memcpy(&ev->wall_time, &u, 8);
            p += 8;
        } else if (key == (2 << 3 | 0)) {
            ev->step = (int64_t)varint(&p, end);
        } else if (key == (3 << 3 | 2)) {
            uint64_t n = varint(&p, end);
            snprintf(ev->version, sizeof ev->version, "%.*s", (int)n, (const char *)p);
            p += n;
        } else if (key == (5 << 3 | 2)) { /* summary { value { ... } } */
            uint64_t n = varint(&p, end);
            const unsigned char *s = p, *se = p + n;
            CHECK(varint(&s, se) == (1 << 3 | 2), "Summary.value key");
            uint64_t vn = varint(&s, se);
            parse_value(s, s + vn, ev);
            p += n;
        } else {
            CHECK(0, "unexpected Event field key %llu", (unsigned long long)key);
            return;
        }
    }
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: test_io_tensorboard SCRATCH_DIR\n");
        return 2;
    }
    snprintf(g_dir, sizeof g_dir, "%s", argv[1]);
    char cmd[8400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s'", g_dir, g_dir);
    if (system(cmd)) return 1;

    /* CRC-32C check value (RFC 3720 / the Castagnoli catalogue) and iSCSI test vectors */
    CHECK(mg_crc32c("123456789", 9) == 0xE3069283u, "crc32c(123456789) = %08x", mg_crc32c("123456789", 9));
    unsigned char zeros[32] = {0}, ones[32];
    memset(ones, 0xFF, sizeof ones);
    CHECK(mg_crc32c(zeros, 32) == 0x8A9136AAu, "crc32c(32 zeros) = %08x", mg_crc32c(zeros, 32));
    CHECK(mg_crc32c(ones, 32) == 0x62A8AB43u, "crc32c(32 x ff) = %08x", mg_crc32c(ones, 32));
    CHECK(mg_crc32c("", 0) == 0, "crc32c of nothing");
    /* TFRecord's mask: rotate right by 15, add 0xa282ead8 */
    CHECK(mg_tfrecord_mask(0) == 0xa282ead8u, "mask(0)");
    CHECK(mg_tfrecord_mask(0x00008000u) == 0xa282ead9u, "mask(0x8000) = %08x", mg_tfrecord_mask(0x00008000u));

    /* write: the version event, then scalars; the directory is created */
    char dir[8192];
    snprintf(dir, sizeof dir, "%s/tb", g_dir);
    mg_error err = {0};
    mg_tb_writer *w = NULL;
    CHECK(mg_tb_open(dir, &w, &err) == MG_OK, "open: %s", err.msg);
    if (!w) return 1;
    const char *tags[] = {"lm loss", "learning-rate", "lm loss validation"};
    float vals[] = {10.8125f, 3e-4f, -1.5f};
    int64_t steps[] = {1, 2, 3000000000LL};
    for (int i = 0; i < 3; i++) CHECK(mg_tb_scalar(w, tags[i], vals[i], steps[i], &err) == MG_OK, "scalar: %s", err.msg);
    /* a text summary (SummaryWriter.add_text's bytes: tests/tools/megatron_run.py compares with
     * torch's), and one too long for an event */
    CHECK(mg_tb_text(w, "num_layers", "4", 7, &err) == MG_OK, "text: %s", err.msg);
    static char longtext[20000];
    memset(longtext, 'x', sizeof longtext - 1);
    CHECK(mg_tb_text(w, "long", longtext, 7, &err) == MG_ERR_INVALID, "a 20 KB text was accepted");
    int n = 0;
    CHECK(event_file(dir, &n) == NULL && n == 0, "the event file appeared before close");
    CHECK(mg_tb_close(w, &err) == MG_OK, "close: %s", err.msg);
    char *path = event_file(dir, &n);
    CHECK(path && entries(dir) == 1, "want exactly one file in %s, got %d entries", dir, entries(dir));
    if (!path) return 1;
    size_t len = 0;
    unsigned char *data = (unsigned char *)read_file(path, &len);
    CHECK(data != NULL, "cannot read %s", path);
    if (!data) return 1;
    size_t off = 0;
    int n_events = 0;
    event ev[8];
    while (off + 12 <= len && n_events < 8) {
        uint64_t rl = le(data + off, 8);
        CHECK((uint32_t)le(data + off + 8, 4) == mg_tfrecord_mask(mg_crc32c(data + off, 8)), "length crc of record %d",
              n_events);
        CHECK(off + 12 + rl + 4 <= len, "record %d runs past the file", n_events);
        if (off + 12 + rl + 4 > len) break;
        const unsigned char *rec = data + off + 12;
        CHECK((uint32_t)le(rec + rl, 4) == mg_tfrecord_mask(mg_crc32c(rec, rl)), "data crc of record %d", n_events);
        parse_event(rec, rec + rl, &ev[n_events++]);
        off += 12 + rl + 4;
    }
    CHECK(off == len, "trailing bytes: %zu of %zu read", off, len);
    CHECK(n_events == 5, "want 5 events, got %d", n_events);
    CHECK(!strcmp(ev[0].version, "brain.Event:2") && ev[0].wall_time > 1.6e9, "first event: version '%s', time %f",
          ev[0].version, ev[0].wall_time);
    {
        /* TensorProto {dtype DT_STRING (7), tensor_shape {dim {size 1}}, string_val "4"};
         * SummaryMetadata {plugin_data {plugin_name "text"}} */
        static const unsigned char tensor[] = {0x08, 0x07, 0x12, 0x04, 0x12, 0x02, 0x08, 0x01, 0x42, 0x01, '4'};
        static const unsigned char meta[] = {0x0a, 0x06, 0x0a, 0x04, 't', 'e', 'x', 't'};
        const event *t = &ev[4];
        CHECK(!strcmp(t->tag, "num_layers/text_summary") && t->step == 7 && !t->has_value, "text event: tag '%s' step %lld",
              t->tag, (long long)t->step);
        CHECK(t->tensor_n == sizeof tensor && !memcmp(t->tensor, tensor, sizeof tensor), "text event's tensor");
        CHECK(t->meta_n == sizeof meta && !memcmp(t->meta, meta, sizeof meta), "text event's metadata");
    }
    for (int i = 1; i < 4; i++) {
        CHECK(!strcmp(ev[i].tag, tags[i - 1]), "event %d tag '%s'", i, ev[i].tag);
        CHECK(ev[i].has_value && ev[i].value == vals[i - 1], "event %d value %g", i, ev[i].value);
        CHECK(ev[i].step == steps[i - 1], "event %d step %lld", i, (long long)ev[i].step);
        CHECK(ev[i].wall_time >= ev[0].wall_time, "event %d time", i);
    }
    free(data);

    /* a discarded writer leaves nothing; the good file stays */
    CHECK(mg_tb_open(dir, &w, &err) == MG_OK, "second open: %s", err.msg);
    if (w) {
        mg_tb_scalar(w, "lm loss", 1.0f, 1, &err);
        mg_tb_abort(w);
    }
    CHECK(entries(dir) == 1, "abort left %d entries", entries(dir));
    /* a directory that cannot be made is an I/O error naming it */
    char bad[8300];
    snprintf(bad, sizeof bad, "%s/no/such/parent", g_dir);
    mg_error e2 = {0};
    CHECK(mg_tb_open(bad, &w, &e2) == MG_ERR_IO && strstr(e2.msg, bad), "bad dir: %d %s", e2.code, e2.msg);
    if (g_failures) return 1;
    printf("ok: crc32c known answers, %d events parsed back, abort leaves nothing\n", n_events);
    return 0;
}

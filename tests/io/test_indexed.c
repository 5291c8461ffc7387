/* Indexed dataset tests: write/read every dtype, and corrupt files of each kind must
 * give MG_ERR_IO with a message (never a crash). Run under ASan to make "never a
 * crash" mean "never an out-of-bounds read" too. */
#include <stdint.h>
#include <unistd.h>

#include "io_test_util.h"
#include "mgraph/dataset.h"

static char g_dir[4096];

static void write_bytes(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, n, f) != n) {
        fprintf(stderr, "cannot write %s\n", path);
        exit(1);
    }
    fclose(f);
}

static void all_dtypes(void) {
    for (int dt = 1; dt <= 8; dt++) {
        char prefix[4200];
        snprintf(prefix, sizeof prefix, "%s/dt%d", g_dir, dt);
        mg_indexed_writer *w;
        mg_error err = {0};
        CHECK(mg_indexed_writer_open(prefix, dt, &w, &err) == 0, "open dtype %d: %s", dt, err.msg);
        int32_t a[] = {1, 2, 3, 4, 5}, b[] = {7, 8};
        CHECK(mg_indexed_writer_add_tokens(w, a, 5, &err) == 0, "add a");
        CHECK(mg_indexed_writer_add_tokens(w, b, 2, &err) == 0, "add b");
        CHECK(mg_indexed_writer_end_document(w, &err) == 0, "end");
        CHECK(mg_indexed_writer_end_document(w, &err) == 0, "empty document");
        CHECK(mg_indexed_writer_add_tokens(w, b, 0, &err) == 0, "empty sequence");
        CHECK(mg_indexed_writer_add_tokens(w, a + 2, 3, &err) == 0, "add c");
        CHECK(mg_indexed_writer_end_document(w, &err) == 0, "end");
        CHECK(mg_indexed_writer_finalize(w, &err) == 0, "finalize: %s", err.msg);
        mg_indexed_writer_free(w);

        mg_indexed_dataset *ds;
        CHECK(mg_indexed_open(prefix, &ds, &err) == 0, "read dtype %d: %s", dt, err.msg);
        if (!ds) continue;
        CHECK(mg_indexed_dtype(ds) == dt, "dtype");
        CHECK(mg_indexed_num_sequences(ds) == 4 && mg_indexed_num_documents(ds) == 3, "counts");
        const int64_t *di = mg_indexed_document_indices(ds);
        CHECK(di[0] == 0 && di[1] == 2 && di[2] == 2 && di[3] == 4, "document indices");
        size_t isz = mg_indexed_dtype_size(dt);
        CHECK(mg_indexed_sequence_offset(ds, 1) == (int64_t)(5 * isz) && mg_indexed_sequence_offset(ds, 3) == (int64_t)(7 * isz),
              "offsets");
        CHECK(mg_indexed_sequence_length(ds, 2) == 0 && mg_indexed_sequence_length(ds, 3) == 3, "lengths");
        int32_t got[5];
        if (dt == MG_IDX_F32 || dt == MG_IDX_F64) {
            CHECK(mg_indexed_read_tokens(ds, 0, 0, 5, got, &err) == MG_ERR_INVALID, "float read refused");
            double v = 0;
            if (dt == MG_IDX_F64) memcpy(&v, mg_indexed_sequence_data(ds, 3), 8);
            else { float f; memcpy(&f, mg_indexed_sequence_data(ds, 3), 4); v = f; }
            CHECK(v == 3.0, "float item");
        } else {
            CHECK(mg_indexed_read_tokens(ds, 0, 1, 4, got, &err) == 0 && got[0] == 2 && got[3] == 5, "read a");
            CHECK(mg_indexed_read_tokens(ds, 3, 0, 3, got, &err) == 0 && got[0] == 3 && got[2] == 5, "read c");
            mg_error_clear(&err);
            CHECK(mg_indexed_read_tokens(ds, 1, 1, 2, got, &err) == MG_ERR_INVALID, "read past sequence");
        }
        mg_indexed_free(ds);
    }
    /* Range checks on conversion. */
    char prefix[4200];
    snprintf(prefix, sizeof prefix, "%s/range", g_dir);
    mg_indexed_writer *w;
    mg_error err = {0};
    CHECK(mg_indexed_writer_open(prefix, MG_IDX_U16, &w, &err) == 0, "open");
    int32_t big = 70000;
    CHECK(mg_indexed_writer_add_tokens(w, &big, 1, &err) == MG_ERR_INVALID, "70000 does not fit uint16");
    mg_indexed_writer_free(w); /* not finalized: files removed */
    snprintf(prefix, sizeof prefix, "%s/range.bin", g_dir);
    CHECK(access(prefix, F_OK) != 0, "unfinalized output removed");
    CHECK(mg_indexed_dtype_for_vocab(50257) == MG_IDX_U16 && mg_indexed_dtype_for_vocab(65500) == MG_IDX_I32, "dtype choice");
}

/* A valid 2-sequence index to corrupt: uint16, lengths {3, 2}, offsets {0, 6}, docs {0,1,2}. */
static size_t good_idx(unsigned char *b) {
    size_t n = 0;
    memcpy(b, "MMIDIDX\0\0", 9);
    n = 9;
    uint64_t v = 1;
    memcpy(b + n, &v, 8); n += 8;
    b[n++] = 8;
    v = 2; memcpy(b + n, &v, 8); n += 8;
    v = 3; memcpy(b + n, &v, 8); n += 8;
    int32_t len[2] = {3, 2};
    memcpy(b + n, len, 8); n += 8;
    int64_t off[2] = {0, 6};
    memcpy(b + n, off, 16); n += 16;
    int64_t doc[3] = {0, 1, 2};
    memcpy(b + n, doc, 24); n += 24;
    return n;
}

static void expect_io_error(const char *what, const unsigned char *idx, size_t idx_len, size_t bin_len,
                            const char *needle) {
    char prefix[4200], path[4300];
    snprintf(prefix, sizeof prefix, "%s/bad", g_dir);
    snprintf(path, sizeof path, "%s.idx", prefix);
    write_bytes(path, idx, idx_len);
    unsigned char bin[64] = {0};
    snprintf(path, sizeof path, "%s.bin", prefix);
    write_bytes(path, bin, bin_len);
    mg_indexed_dataset *ds = NULL;
    mg_error err = {0};
    int rc = mg_indexed_open(prefix, &ds, &err);
    CHECK(rc == MG_ERR_IO && ds == NULL, "%s: expected MG_ERR_IO, got %d", what, rc);
    CHECK(strstr(err.msg, needle) != NULL, "%s: message \"%s\" lacks \"%s\"", what, err.msg, needle);
    printf("%-22s -> %s\n", what, err.msg);
    mg_indexed_free(ds);
}

static void corrupt(void) {
    unsigned char b[256];
    size_t n = good_idx(b);
    {
        char prefix[4200], path[4300];
        snprintf(prefix, sizeof prefix, "%s/bad", g_dir);
        snprintf(path, sizeof path, "%s.idx", prefix);
        write_bytes(path, b, n);
        unsigned char bin[10] = {0};
        snprintf(path, sizeof path, "%s.bin", prefix);
        write_bytes(path, bin, 10);
        mg_indexed_dataset *ds;
        mg_error err = {0};
        CHECK(mg_indexed_open(prefix, &ds, &err) == 0, "the uncorrupted fixture opens: %s", err.msg);
        mg_indexed_free(ds);
    }
    unsigned char c[256];
    memcpy(c, b, n); c[0] = 'X';
    expect_io_error("bad magic", c, n, 10, "magic");
    memcpy(c, b, n); c[9] = 2;
    expect_io_error("bad version", c, n, 10, "version");
    memcpy(c, b, n); c[17] = 9;
    expect_io_error("bad dtype", c, n, 10, "dtype");
    memcpy(c, b, n); c[17] = 0;
    expect_io_error("dtype 0", c, n, 10, "dtype");
    expect_io_error("truncated header", b, 20, 10, "truncated");
    expect_io_error("truncated arrays", b, n - 5, 10, "truncated");
    expect_io_error("empty idx", b, 0, 10, "truncated");
    memcpy(c, b, n); c[18] = 0xff; c[25] = 0x7f; /* absurd sequence count */
    expect_io_error("huge count", c, n, 10, "truncated");
    expect_io_error("bin too short", b, n, 9, "past the end");
    memcpy(c, b, n);
    int64_t off = 1000;
    memcpy(c + 34 + 8 + 8, &off, 8);
    expect_io_error("offset past bin", c, n, 10, "past the end");
    memcpy(c, b, n);
    off = -8;
    memcpy(c + 34 + 8, &off, 8);
    expect_io_error("negative offset", c, n, 10, "past the end");
    memcpy(c, b, n);
    int32_t len = -1;
    memcpy(c + 34, &len, 4);
    expect_io_error("negative length", c, n, 10, "past the end");
    memcpy(c, b, n);
    int64_t d = 5;
    memcpy(c + 34 + 24 + 16, &d, 8);
    expect_io_error("bad document index", c, n, 10, "document index");

    mg_indexed_dataset *ds;
    mg_error err = {0};
    char prefix[4200];
    snprintf(prefix, sizeof prefix, "%s/does_not_exist", g_dir);
    CHECK(mg_indexed_open(prefix, &ds, &err) == MG_ERR_IO && strstr(err.msg, "does_not_exist.idx"), "missing: %s", err.msg);
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s dtypes|corrupt SCRATCH_DIR\n", argv[0]);
        return 2;
    }
    snprintf(g_dir, sizeof g_dir, "%s", argv[2]);
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s'", g_dir);
    if (system(cmd) != 0) return 1;
    if (!strcmp(argv[1], "dtypes")) all_dtypes();
    else if (!strcmp(argv[1], "corrupt")) corrupt();
    else return 2;
    if (g_failures) fprintf(stderr, "%d failure(s)\n", g_failures);
    return g_failures ? 1 : 0;
}

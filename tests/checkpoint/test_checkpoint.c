/* Checkpoint format: write pieces in one layout, read them in another (resharding),
 * atomic directory handling and retention, and corruption of every kind a file can
 * suffer (truncation, flipped bytes, malformed index and header fields): each must be
 * a clear error, never a crash, never wrong data.
 *
 * Runs in its working directory (ctest gives each case its own).
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "mgraph/checkpoint.h"
#include "mgraph/safetensors.h"
#include "testkit.h"

/* ---- logical tensors with known values ------------------------------------------------- */
typedef struct ltensor { const char *name; mg_dtype dt; int ndim; int64_t shape[MG_MAX_DIMS]; } ltensor;

static const ltensor T[] = {
    {"wte.weight", MG_F32, 2, {12, 10}},
    {"h.0.attn.c_attn.weight.exp_avg", MG_F32, 2, {18, 8}},
    {"h.0.ln_1.bias", MG_F32, 1, {7}},
    {"step", MG_I32, 0, {0}},
    {"cube", MG_F32, 3, {4, 6, 5}},
    {"half", MG_BF16, 2, {3, 4}},
};
#define NT ((int)(sizeof T / sizeof *T))

static int64_t numel_of(int nd, const int64_t *s) {
    int64_t n = 1;
    for (int d = 0; d < nd; d++) n *= s[d];
    return n;
}

/* The value of logical element idx of tensor t, as raw bits (exact in every dtype). */
static void value_at(int t, int64_t idx, void *out) {
    if (T[t].dt == MG_F32) *(float *)out = (float)(t * 1000 + idx) * 0.25f;
    else if (T[t].dt == MG_I32) *(int32_t *)out = (int32_t)(7 + t + idx * 3);
    else *(uint16_t *)out = (uint16_t)(0x3f00 + t * 16 + idx);
}

/* Logical index of element e (flat, in the block's row-major order) of a block. */
static int64_t logical_index(const ltensor *lt, const int64_t *off, const int64_t *blk, int64_t e) {
    int64_t idx = 0, stride = 1, rem = e;
    int64_t coord[MG_MAX_DIMS];
    for (int d = lt->ndim - 1; d >= 0; d--) {
        coord[d] = off[d] + rem % blk[d];
        rem /= blk[d];
    }
    for (int d = lt->ndim - 1; d >= 0; d--) {
        idx += coord[d] * stride;
        stride *= lt->shape[d];
    }
    return idx;
}

/* ---- random layouts ------------------------------------------------------------------ */
typedef struct layout { mg_ckpt_piece *p; int n, cap; } layout;

static void add_piece(layout *L, int t, const int64_t *off, const int64_t *blk, int64_t lo, int64_t hi, bool fill) {
    if (L->n == L->cap) {
        L->cap = L->cap ? 2 * L->cap : 64;
        L->p = realloc(L->p, (size_t)L->cap * sizeof *L->p);
    }
    mg_ckpt_piece *p = &L->p[L->n++];
    memset(p, 0, sizeof *p);
    p->name = T[t].name;
    p->dtype = T[t].dt;
    p->ndim = T[t].ndim;
    for (int d = 0; d < T[t].ndim; d++) {
        p->shape[d] = T[t].shape[d];
        p->offset[d] = off[d];
        p->block[d] = blk[d];
    }
    p->lo = lo;
    p->hi = hi;
    int64_t n = mg_ckpt_piece_numel(p);
    size_t es = mg_dtype_size(p->dtype);
    p->data = calloc((size_t)n + 1, es);
    if (fill)
        for (int64_t e = 0; e < n; e++) value_at(t, logical_index(&T[t], off, blk, (hi ? lo : 0) + e), (char *)p->data + e * es);
    else
        memset(p->data, 0xAB, (size_t)n * es);
}

static void layout_free(layout *L) {
    for (int i = 0; i < L->n; i++) free(L->p[i].data);
    free(L->p);
    memset(L, 0, sizeof *L);
}

/* Cuts each tensor into blocks along a random dim (as tensor parallelism does), and each
 * block into random flat segments (as the distributed optimizer does). */
static void random_layout(tk_rng *r, layout *L, bool fill) {
    for (int t = 0; t < NT; t++) {
        const ltensor *lt = &T[t];
        int64_t off[MG_MAX_DIMS] = {0}, blk[MG_MAX_DIMS];
        for (int d = 0; d < lt->ndim; d++) blk[d] = lt->shape[d];
        int dim = lt->ndim ? (int)(tk_uniform(r, 0, (float)lt->ndim + 0.999f)) : 0; /* == ndim: no split */
        int parts = 1;
        if (dim < lt->ndim) {
            int cand[] = {1, 2, 3, 4};
            parts = cand[(int)tk_uniform(r, 0, 3.999f)];
            while (lt->shape[dim] % parts) parts--;
            blk[dim] = lt->shape[dim] / parts;
        }
        for (int k = 0; k < parts; k++) {
            if (dim < lt->ndim) off[dim] = k * blk[dim];
            int64_t bn = numel_of(lt->ndim, blk);
            int segs = 1 + (int)tk_uniform(r, 0, 2.999f);
            if (segs == 1 && tk_uniform(r, 0, 1) < 0.5f) {
                add_piece(L, t, off, blk, 0, 0, fill);
                continue;
            }
            int64_t a = 0;
            for (int s = 0; s < segs; s++) {
                int64_t z = s == segs - 1 ? bn : a + (int64_t)tk_uniform(r, 0, (float)(bn - a) + 0.999f);
                if (z > bn) z = bn;
                if (z > a) add_piece(L, t, off, blk, a, z, fill);
                a = z;
            }
        }
    }
}

static int save_layout(const char *root, int64_t it, layout *L, int nranks, int retain) {
    mg_error err = {0};
    int rc = mg_ckpt_begin(root, it, &err);
    /* piece i goes to rank i % nranks */
    for (int r = 0; r < nranks && !rc; r++) {
        layout mine = {0};
        mg_ckpt_piece *v = malloc((size_t)L->n * sizeof *v);
        int n = 0;
        for (int i = r; i < L->n; i += nranks) v[n++] = L->p[i];
        rc = mg_ckpt_write_rank(root, it, r, v, n, NULL, 0, &err);
        free(v);
        (void)mine;
    }
    char meta[128];
    snprintf(meta, sizeof meta, "{\"iteration_copy\": %lld, \"seed\": 42}", (long long)it);
    if (!rc) rc = mg_ckpt_finish(root, it, nranks, meta, retain, &err);
    TK_CHECK(rc == 0, "save %s iteration %lld: %s", root, (long long)it, err.msg);
    return rc;
}

/* Fills L from the checkpoint at root and checks every value. */
static bool load_check(const char *root, layout *L, int64_t want_it) {
    mg_ckpt *c = NULL;
    mg_error err = {0};
    int rc = mg_ckpt_open(root, &c, &err);
    TK_CHECK(rc == 0, "open %s: %s", root, err.msg);
    if (rc) return false;
    TK_CHECK(mg_ckpt_iteration(c) == want_it, "iteration %lld, want %lld", (long long)mg_ckpt_iteration(c), (long long)want_it);
    TK_CHECK(strstr(mg_ckpt_meta(c), "\"seed\":42") != NULL, "meta lost: %s", mg_ckpt_meta(c));
    rc = mg_ckpt_fill(c, L->p, L->n, &err);
    TK_CHECK(rc == 0, "fill: %s", err.msg);
    mg_ckpt_close(c);
    bool ok = rc == 0;
    for (int i = 0; i < L->n && ok; i++) {
        mg_ckpt_piece *p = &L->p[i];
        int t = 0;
        while (strcmp(T[t].name, p->name)) t++;
        size_t es = mg_dtype_size(p->dtype);
        for (int64_t e = 0; e < mg_ckpt_piece_numel(p) && ok; e++) {
            char want[8];
            value_at(t, logical_index(&T[t], p->offset, p->block, (p->hi ? p->lo : 0) + e), want);
            if (memcmp(want, (char *)p->data + e * es, es)) {
                TK_CHECK(false, "%s piece %d element %lld differs", p->name, i, (long long)e);
                ok = false;
            }
        }
    }
    return ok;
}

static void test_reshard(void) {
    tk_rng r = {12345};
    for (int trial = 0; trial < 40; trial++) {
        char root[64];
        snprintf(root, sizeof root, "reshard%d", trial);
        layout W = {0}, R = {0};
        random_layout(&r, &W, true);
        random_layout(&r, &R, false);
        int ranks = 1 + trial % 4;
        if (!save_layout(root, 100 + trial, &W, ranks, 0)) load_check(root, &R, 100 + trial);
        layout_free(&W);
        layout_free(&R);
    }
}

static bool exists(const char *p);

/* ---- mismatches the reader must name ------------------------------------------------------ */
static void test_mismatch(void) {
    tk_rng r = {7};
    layout W = {0};
    random_layout(&r, &W, true);
    save_layout("mm", 5, &W, 2, 0);
    mg_ckpt *c = NULL;
    mg_error err = {0};
    TK_CHECK(mg_ckpt_open("mm", &c, &err) == 0, "open: %s", err.msg);
    if (!c) return;
    mg_ckpt_piece p = W.p[0];
    p.shape[0] += 1;
    err = (mg_error){0};
    TK_CHECK(mg_ckpt_fill(c, &p, 1, &err) == MG_ERR_INVALID && strstr(err.msg, p.name), "shape mismatch: %s", err.msg);
    p = W.p[0];
    p.name = "no.such.tensor";
    err = (mg_error){0};
    TK_CHECK(mg_ckpt_fill(c, &p, 1, &err) == MG_ERR_INVALID && strstr(err.msg, "no.such.tensor"), "missing: %s", err.msg);
    p = W.p[0];
    p.dtype = MG_I32;
    err = (mg_error){0};
    TK_CHECK(mg_ckpt_fill(c, &p, 1, &err) == MG_ERR_INVALID, "dtype mismatch accepted");
    mg_ckpt_close(c);
    /* A save missing part of a tensor, or one a rank holds but no rank writes (issue 36:
     * ep x distributed-optimizer checkpoints lacked moments), or writing elements twice,
     * is refused by mg_ckpt_finish and nothing is put in place. */
    layout part = {0};
    int64_t off[MG_MAX_DIMS] = {0}, blk[MG_MAX_DIMS] = {6, 10};
    add_piece(&part, 0, off, blk, 0, 0, true);
    err = (mg_error){0};
    int rc = mg_ckpt_begin("partial", 1, &err);
    if (!rc) rc = mg_ckpt_write_rank("partial", 1, 0, part.p, 1, NULL, 0, &err);
    TK_CHECK(rc == 0, "write: %s", err.msg);
    TK_CHECK(mg_ckpt_finish("partial", 1, 1, "{}", 0, &err) == MG_ERR_RUNTIME && strstr(err.msg, part.p[0].name) &&
                 strstr(err.msg, "60 of 120"),
             "uncovered tensor saved: %s", err.msg);
    TK_CHECK(!exists("partial/iter_0000001") && !exists("partial/latest_checkpointed_iteration.txt"),
             "an incomplete save was put in place");
    /* held by rank 1, written by nobody */
    const char *held[] = {"some.weight.exp_avg"};
    layout whole = {0};
    int64_t all[MG_MAX_DIMS] = {12, 10};
    add_piece(&whole, 0, off, all, 0, 0, true);
    err = (mg_error){0};
    rc = mg_ckpt_begin("unowned", 1, &err);
    if (!rc) rc = mg_ckpt_write_rank("unowned", 1, 0, whole.p, 1, NULL, 0, &err);
    if (!rc) rc = mg_ckpt_write_rank("unowned", 1, 1, NULL, 0, held, 1, &err);
    TK_CHECK(rc == 0, "write: %s", err.msg);
    TK_CHECK(mg_ckpt_finish("unowned", 1, 2, "{}", 0, &err) == MG_ERR_RUNTIME && strstr(err.msg, held[0]) &&
                 strstr(err.msg, "rank 1"),
             "an unwritten held tensor saved: %s", err.msg);
    TK_CHECK(!exists("unowned/iter_0000001"), "an incomplete save was put in place");
    /* the same elements written twice (by two ranks), once overlapping ranges, once blocks */
    for (int k = 0; k < 2; k++) {
        layout twice = {0};
        int64_t top[MG_MAX_DIMS] = {8, 10}, low[MG_MAX_DIMS] = {4, 0}, rest[MG_MAX_DIMS] = {8, 10};
        if (k == 0) {
            add_piece(&twice, 0, off, all, 0, 70, true);
            add_piece(&twice, 0, off, all, 60, 120, true);
        } else {
            add_piece(&twice, 0, off, top, 0, 0, true);
            add_piece(&twice, 0, low, rest, 0, 0, true);
        }
        char root[16];
        snprintf(root, sizeof root, "twice%d", k);
        err = (mg_error){0};
        rc = mg_ckpt_begin(root, 1, &err);
        if (!rc) rc = mg_ckpt_write_rank(root, 1, 0, twice.p, 1, NULL, 0, &err);
        if (!rc) rc = mg_ckpt_write_rank(root, 1, 1, twice.p + 1, 1, NULL, 0, &err);
        TK_CHECK(rc == 0, "write: %s", err.msg);
        TK_CHECK(mg_ckpt_finish(root, 1, 2, "{}", 0, &err) == MG_ERR_RUNTIME && strstr(err.msg, "not written whole"),
                 "overlapping pieces saved (%d): %s", k, err.msg);
        layout_free(&twice);
    }
    layout_free(&whole);
    layout_free(&part);
    layout_free(&W);
}

/* ---- atomicity, stale directories, retention ------------------------------------------------ */
static bool exists(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0;
}

static void touch(const char *p, const char *text) {
    FILE *f = fopen(p, "w");
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

static void test_atomic_retain(void) {
    tk_rng r = {99};
    layout W = {0}, R = {0};
    random_layout(&r, &W, true);
    random_layout(&r, &R, false);
    const char *root = "ret";
    /* a save that died half-way before: a .partial directory with a temp file */
    mkdir(root, 0777);
    mkdir("ret/iter_0000020.partial", 0777);
    touch("ret/iter_0000020.partial/.rank_00000.safetensors.tmp-0123456789abcdef", "junk");
    touch("ret/iter_0000020.partial/rank_00001.safetensors", "junk");
    /* a finished directory the tracker never named (died before the tracker update) */
    mkdir("ret/iter_0000030", 0777);
    touch("ret/iter_0000030/rank_00000.safetensors", "junk");
    /* something that is not ours */
    mkdir("ret/iter_0000005", 0777);
    touch("ret/iter_0000005/notes.txt", "mine");
    mkdir("ret/other", 0777);
    for (int it = 10; it <= 40; it += 10) save_layout(root, it, &W, 3, 2);
    TK_CHECK(!exists("ret/iter_0000020.partial"), "stale partial directory left");
    TK_CHECK(exists("ret/iter_0000040/index.json") && exists("ret/iter_0000030/index.json"), "newest two missing");
    TK_CHECK(!exists("ret/iter_0000010") && !exists("ret/iter_0000020"), "retain 2 kept older ones");
    TK_CHECK(exists("ret/iter_0000005/notes.txt") && exists("ret/other"), "removed what it did not write");
    load_check(root, &R, 40);
    /* an iteration directory opened directly, not through the tracker */
    layout_free(&R);
    random_layout(&r, &R, false);
    load_check("ret/iter_0000030", &R, 30);
    /* a crash after the directory rename but before the tracker update still loads the old one */
    touch("ret/latest_checkpointed_iteration.txt", "30\n");
    layout_free(&R);
    random_layout(&r, &R, false);
    load_check(root, &R, 30);
    layout_free(&W);
    layout_free(&R);
}

/* ---- corruption ------------------------------------------------------------------------------ */
static char *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    *len = fread(b, 1, (size_t)n, f);
    fclose(f);
    return b;
}

static void spit(const char *path, const char *b, size_t len) {
    FILE *f = fopen(path, "wb");
    fwrite(b, 1, len, f);
    fclose(f);
}

/* Open + fill of a damaged checkpoint: an error with a message, or (for a harmless
 * change such as JSON whitespace) the right values. Never a crash, never wrong data. */
static char g_last_msg[MG_ERROR_MSG_LEN];
static void expect_error_or_right(const char *root, const char *what, long *errors) {
    tk_rng r = {5};
    layout R = {0};
    random_layout(&r, &R, false);
    mg_ckpt *c = NULL;
    mg_error err = {0};
    int rc = mg_ckpt_open(root, &c, &err);
    if (!rc) rc = mg_ckpt_fill(c, R.p, R.n, &err);
    mg_ckpt_close(c);
    snprintf(g_last_msg, sizeof g_last_msg, "%s", err.msg);
    if (rc) {
        TK_CHECK(err.msg[0] && mg_status_is_usage(rc), "%s: error %d without a usage code or message", what, rc);
        (*errors)++;
    } else {
        int before = tk_failures;
        layout_free(&R);
        random_layout(&r, &R, false);
        load_check(root, &R, 1);
        if (tk_failures > before) fprintf(stderr, "  (after %s)\n", what);
    }
    layout_free(&R);
}

static void test_corrupt(void) {
    tk_rng r = {3};
    layout W = {0};
    random_layout(&r, &W, true);
    const char *root = "bad";
    save_layout(root, 1, &W, 2, 0);
    layout_free(&W);
    const char *files[] = {"bad/iter_0000001/rank_00000.safetensors", "bad/iter_0000001/rank_00001.safetensors",
                           "bad/iter_0000001/index.json", "bad/latest_checkpointed_iteration.txt"};
    for (int f = 0; f < 4; f++) {
        size_t len = 0;
        char *orig = slurp(files[f], &len);
        TK_CHECK(orig != NULL, "cannot read %s", files[f]);
        if (!orig) continue;
        long errors = 0, tries = 0;
        /* every truncation */
        for (size_t cut = 0; cut < len; cut += (cut > 64 ? 41 : 1)) {
            spit(files[f], orig, cut);
            char what[256];
            snprintf(what, sizeof what, "%s truncated to %zu bytes", files[f], cut);
            expect_error_or_right(root, what, &errors);
            tries++;
        }
        /* Truncation must always be caught (whitespace at the end of the JSON files aside). */
        TK_CHECK(errors >= tries - 2, "%s: only %ld of %ld truncations reported", files[f], errors, tries);
        /* every byte flipped (sampled in long data sections) */
        char *copy = malloc(len);
        errors = tries = 0;
        for (size_t at = 0; at < len; at += (at > 64 ? 23 : 1)) {
            memcpy(copy, orig, len);
            copy[at] ^= (char)0x5a;
            spit(files[f], copy, len);
            char what[256];
            snprintf(what, sizeof what, "%s byte %zu flipped", files[f], at);
            expect_error_or_right(root, what, &errors);
            tries++;
        }
        TK_CHECK(errors > 0, "%s: no flipped byte was reported", files[f]);
        printf("%s: %ld of %ld flipped bytes reported (the rest harmless and loaded right)\n", files[f], errors, tries);
        free(copy);
        spit(files[f], orig, len);
        free(orig);
    }
    /* a missing rank file, a missing index, a tracker naming a missing iteration */
    long errors = 0;
    rename(files[1], "bad/moved");
    expect_error_or_right(root, "missing rank file", &errors);
    rename("bad/moved", files[1]);
    touch(files[3], "7\n");
    expect_error_or_right(root, "tracker names a missing iteration", &errors);
    touch(files[3], "1\n");
    TK_CHECK(errors == 2, "missing files not reported (%ld)", errors);
    /* the index's fields, each made wrong */
    size_t len = 0;
    char *idx = slurp(files[2], &len);
    const char *edits[][2] = {
        {"\"format\": \"mgraph-checkpoint\"", "\"format\": \"other\""},
        {"\"version\": 1", "\"version\": 2"},
        {"\"iteration\": 1", "\"iteration\": -1"},
        {"\"iteration\": 1", "\"iteration\": \"1\""},
        {"rank_00000.safetensors", "../../etc/passwd"},
        {"\"files\": [", "\"files\": [\"rank_00009.safetensors\", "},
        {"\"dtype\": \"F32\"", "\"dtype\": \"F64\""},
        {"\"lo\": 0", "\"lo\": -1"},
        {"\"file\": 0", "\"file\": 5"},
        {"\"hash\": \"", "\"hash\": \"x"},
        {"\"offset\": [", "\"offset\": [1000, "},
        {"\"meta\": {", "\"meta\": 3, \"x\": {"},
    };
    for (size_t e = 0; e < sizeof edits / sizeof *edits; e++) {
        char *at = strstr(idx, edits[e][0]);
        TK_CHECK(at != NULL, "index lacks '%s'", edits[e][0]);
        if (!at) continue;
        size_t a = (size_t)(at - idx), ol = strlen(edits[e][0]), nl = strlen(edits[e][1]);
        char *mod = malloc(len + nl + 1);
        memcpy(mod, idx, a);
        memcpy(mod + a, edits[e][1], nl);
        memcpy(mod + a + nl, idx + a + ol, len - a - ol);
        spit(files[2], mod, len - ol + nl);
        free(mod);
        long before = errors;
        expect_error_or_right(root, edits[e][1], &errors);
        TK_CHECK(errors == before + 1, "index edit '%s' not reported", edits[e][1]);
        /* named by the field check, not only by the index checksum */
        TK_CHECK(!strstr(g_last_msg, "checksum"), "index edit '%s': %s", edits[e][1], g_last_msg);
    }
    spit(files[2], idx, len);
    free(idx);
}

/* ---- safetensors header fields ------------------------------------------------------------ */
static void write_raw(const char *path, const char *header, size_t data_bytes) {
    size_t hl = strlen(header);
    FILE *f = fopen(path, "wb");
    for (int i = 0; i < 8; i++) fputc((int)((hl >> (8 * i)) & 0xff), f);
    fwrite(header, 1, hl, f);
    for (size_t i = 0; i < data_bytes; i++) fputc(0, f);
    fclose(f);
}

static void test_safetensors_header(void) {
    struct { const char *h; size_t data; bool ok; } cases[] = {
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]}}", 24, true},
        {"{\"__metadata__\":{\"format\":\"pt\"},\"a\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,4]}}", 4, true},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]}}", 20, false},       /* truncated */
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]}}", 28, false},       /* trailing */
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,20]}}", 20, false},       /* size */
        {"{\"a\":{\"dtype\":\"F64\",\"shape\":[2],\"data_offsets\":[0,16]}}", 16, false},         /* dtype */
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", 8, false},          /* shape */
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}", 4, false},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}}", 8, false},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},\"b\":{\"dtype\":\"F32\",\"shape\":[2],"
         "\"data_offsets\":[4,12]}}", 12, false},                                                    /* overlap */
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},\"b\":{\"dtype\":\"F32\",\"shape\":[1],"
         "\"data_offsets\":[12,16]}}", 16, false},                                                   /* hole */
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8],\"x\":1}}", 8, false},   /* unknown field */
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},\"a\":{\"dtype\":\"F32\",\"shape\":[2],"
         "\"data_offsets\":[8,16]}}", 16, false},                                                    /* duplicate */
        {"{\"__metadata__\":{\"n\":3}}", 0, false},
        {"[1,2]", 0, false},
        {"{\"a\":", 0, false},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1099511627776, 1099511627776],\"data_offsets\":[0,4]}}", 4, false},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        write_raw("st.safetensors", cases[i].h, cases[i].data);
        mg_st_file *f = NULL;
        mg_error err = {0};
        int rc = mg_st_open("st.safetensors", &f, &err);
        TK_CHECK((rc == 0) == cases[i].ok, "case %zu (%s): rc %d %s", i, cases[i].h, rc, err.msg);
        TK_CHECK(rc == 0 || (rc == MG_ERR_IO && strstr(err.msg, "st.safetensors")), "case %zu: message %s", i, err.msg);
        mg_st_close(f);
    }
    /* header length beyond the file */
    FILE *f = fopen("st.safetensors", "wb");
    fwrite("\xff\xff\xff\xff\x00\x00\x00\x00{}", 1, 10, f);
    fclose(f);
    mg_st_file *sf = NULL;
    mg_error err = {0};
    TK_CHECK(mg_st_open("st.safetensors", &sf, &err) == MG_ERR_IO, "huge header length accepted");
    /* round trip of the writer */
    float a[6] = {1, 2, 3, 4, 5, 6};
    int32_t b[2] = {7, 8};
    mg_st_out t[2] = {{"a", MG_F32, 2, (int64_t[]){2, 3}, a}, {"b", MG_I32, 1, (int64_t[]){2}, b}};
    const char *mk[] = {"format"}, *mv[] = {"pt"};
    err = (mg_error){0};
    TK_CHECK(mg_st_write("rt.safetensors", t, 2, mk, mv, 1, false, &err) == 0, "write: %s", err.msg);
    TK_CHECK(mg_st_open("rt.safetensors", &sf, &err) == 0, "reopen: %s", err.msg);
    if (sf) {
        const mg_st_entry *e = mg_st_find(sf, "b");
        TK_CHECK(e && e->dtype == MG_I32 && e->ndim == 1 && !memcmp(mg_st_data(sf, e), b, 8), "b lost");
        e = mg_st_find(sf, "a");
        TK_CHECK(e && e->ndim == 2 && e->shape[1] == 3 && !memcmp(mg_st_data(sf, e), a, 24), "a lost");
        TK_CHECK(mg_st_metadata(sf, "format") && !strcmp(mg_st_metadata(sf, "format"), "pt"), "metadata lost");
        TK_CHECK((mg_st_data(sf, e) - (const void *)0) % 8 == 0, "data not 8-byte aligned");
        mg_st_close(sf);
    }
}

int main(int argc, char **argv) {
    static const tk_case cases[] = {
        {"reshard", test_reshard},       {"mismatch", test_mismatch},
        {"atomic_retain", test_atomic_retain}, {"corrupt", test_corrupt},
        {"safetensors_header", test_safetensors_header},
    };
    return tk_main(argc, argv, cases, (int)(sizeof cases / sizeof *cases));
}

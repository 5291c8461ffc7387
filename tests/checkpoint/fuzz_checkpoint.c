/* Fuzz target for the checkpoint reader (libFuzzer entry point), and a driver that
 * replays it over mutations of valid files so that every build tests it.
 *
 * The first input byte picks the surface, the rest is a file's content:
 *   even: a safetensors file (mg_st_open, then every entry's bytes read);
 *   odd:  a checkpoint's index.json beside a valid rank file (mg_ckpt_open, then a
 *         fill of every tensor it names).
 * Whatever the bytes, the reader must return an error or valid data: never crash,
 * read out of bounds (ASan) or leak.
 *
 * Built as a libFuzzer binary with clang when MG_FUZZ=ON (fuzz_checkpoint_libfuzzer:
 * run it with a corpus directory); always built with a main() that mutates seeds
 * (ctest checkpoint.fuzz_replay).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "mgraph/checkpoint.h"
#include "mgraph/safetensors.h"

static char g_dir[256];

static void write_file(const char *path, const uint8_t *d, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) abort();
    if (n) fwrite(d, 1, n, f);
    fclose(f);
}

/* A valid one-rank checkpoint in g_dir/ck (rank file + index), made once. */
static void make_base(void) {
    if (g_dir[0]) return;
    snprintf(g_dir, sizeof g_dir, "/tmp/mg_fuzz_ckpt.%d", (int)getpid());
    mkdir(g_dir, 0700);
    char root[300];
    snprintf(root, sizeof root, "%s/ck", g_dir);
    float a[12], b[5];
    for (int i = 0; i < 12; i++) a[i] = (float)i;
    for (int i = 0; i < 5; i++) b[i] = (float)-i;
    mg_ckpt_piece p[5] = {
        {.name = "w", .dtype = MG_F32, .ndim = 2, .shape = {4, 6}, .offset = {0, 0}, .block = {2, 6}, .data = a},
        {.name = "w", .dtype = MG_F32, .ndim = 2, .shape = {4, 6}, .offset = {2, 0}, .block = {2, 6}, .data = a},
        {.name = "m", .dtype = MG_F32, .ndim = 1, .shape = {9}, .offset = {0}, .block = {9}, .lo = 2, .hi = 7, .data = b},
        /* (the rest of m: a save must cover every tensor whole) */
        {.name = "m", .dtype = MG_F32, .ndim = 1, .shape = {9}, .offset = {0}, .block = {9}, .lo = 0, .hi = 2, .data = b},
        {.name = "m", .dtype = MG_F32, .ndim = 1, .shape = {9}, .offset = {0}, .block = {9}, .lo = 7, .hi = 9, .data = b},
    };
    mg_error err = {0};
    if (mg_ckpt_begin(root, 1, &err) || mg_ckpt_write_rank(root, 1, 0, p, 5, NULL, 0, &err) ||
        mg_ckpt_finish(root, 1, 1, "{\"k\": 1}", 0, &err)) {
        fprintf(stderr, "fuzz setup: %s\n", err.msg);
        abort();
    }
}

static void fuzz_safetensors(const uint8_t *d, size_t n) {
    char path[300];
    snprintf(path, sizeof path, "%s/in.safetensors", g_dir);
    write_file(path, d, n);
    mg_st_file *f = NULL;
    mg_error err = {0};
    if (mg_st_open(path, &f, &err)) return;
    volatile uint8_t sum = 0;
    for (int i = 0; i < mg_st_n_entries(f); i++) {
        const mg_st_entry *e = mg_st_entry_at(f, i);
        const uint8_t *p = mg_st_data(f, e);
        for (uint64_t k = 0; k < e->end - e->begin; k++) sum ^= p[k];
    }
    (void)sum; /* read only so that every byte is touched (ASan checks the bounds) */
    (void)mg_st_metadata(f, "format");
    mg_st_close(f);
}

static void fuzz_index(const uint8_t *d, size_t n) {
    char path[320], dir[300];
    snprintf(dir, sizeof dir, "%s/ck/iter_0000001", g_dir);
    snprintf(path, sizeof path, "%s/index.json", dir);
    write_file(path, d, n);
    mg_ckpt *c = NULL;
    mg_error err = {0};
    if (mg_ckpt_open(dir, &c, &err)) return;
    /* fill every tensor the index names, whole */
    for (int i = 0; i < mg_ckpt_n_tensors(c); i++) {
        mg_ckpt_piece w = {.name = mg_ckpt_tensor_name(c, i)};
        if (!mg_ckpt_has(c, w.name, &w.dtype, &w.ndim, w.shape)) abort();
        int64_t numel = 1;
        for (int k = 0; k < w.ndim; k++) numel *= (w.block[k] = w.shape[k]);
        if (numel > (1 << 20)) continue;
        w.data = calloc((size_t)numel + 1, 4);
        (void)mg_ckpt_fill(c, &w, 1, &err);
        free(w.data);
    }
    mg_ckpt_close(c);
}

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n);
int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) {
    make_base();
    if (n == 0) return 0;
    if (d[0] & 1) fuzz_index(d + 1, n - 1);
    else fuzz_safetensors(d + 1, n - 1);
    return 0;
}

#ifndef MG_LIBFUZZER
/* ---- replay driver: seeds and their mutations ---------------------------------------- */
static uint64_t g_s = 0x243F6A8885A308D3ull;
static uint64_t next(void) {
    uint64_t z = (g_s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static uint8_t *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) abort();
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc((size_t)len + 1);
    *n = fread(b + 1, 1, (size_t)len, f);
    fclose(f);
    return b;
}

int main(int argc, char **argv) {
    int rounds = argc > 1 ? atoi(argv[1]) : 3000;
    make_base();
    char p[320];
    size_t n[2];
    snprintf(p, sizeof p, "%s/ck/iter_0000001/rank_00000.safetensors", g_dir);
    uint8_t *seed[2];
    seed[0] = slurp(p, &n[0]);
    snprintf(p, sizeof p, "%s/ck/iter_0000001/index.json", g_dir);
    seed[1] = slurp(p, &n[1]);
    seed[0][0] = 0;
    seed[1][0] = 1;
    n[0]++, n[1]++;
    uint8_t *buf = malloc(n[0] + n[1] + 64);
    for (int r = 0; r < rounds; r++) {
        int s = r & 1;
        size_t len = n[s];
        memcpy(buf, seed[s], len);
        int edits = 1 + (int)(next() % 4);
        for (int e = 0; e < edits && len > 1; e++) {
            size_t at = 1 + next() % (len - 1);
            switch (next() % 5) {
            case 0: buf[at] ^= (uint8_t)(1u << (next() % 8)); break;          /* bit flip */
            case 1: buf[at] = (uint8_t)next(); break;                          /* byte */
            case 2: len = at; break;                                           /* truncate */
            case 3: memmove(buf + at, buf + at + 1, len - at - 1); len--; break; /* delete */
            default: {                                                         /* an ASCII digit or quote: JSON-shaped damage */
                const char *c = "0123456789\"-[]{},:e";
                buf[at] = (uint8_t)c[next() % strlen(c)];
            }
            }
        }
        LLVMFuzzerTestOneInput(buf, len);
    }
    /* the seeds themselves load */
    LLVMFuzzerTestOneInput(seed[0], n[0]);
    LLVMFuzzerTestOneInput(seed[1], n[1]);
    printf("fuzz replay: %d mutated inputs read without a crash\n", rounds);
    free(buf);
    free(seed[0]);
    free(seed[1]);
    snprintf(p, sizeof p, "rm -rf '%s'", g_dir);
    return system(p) == 0 ? 0 : 1;
}
#endif

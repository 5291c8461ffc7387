/* Helpers shared by the fuzz targets: the readers take paths, so each input is
 * written to a file in a private scratch folder (under $TMPDIR, made once per process). */
#ifndef MG_FUZZ_UTIL_H
#define MG_FUZZ_UTIL_H
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* nftw */
#endif

#include <ftw.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char fz_dir_path[512];

static int fz_rm(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st, (void)flag, (void)ftw;
    return remove(path); /* only inside the folder this process made */
}

static void fz_cleanup(void) {
    if (fz_dir_path[0] && !getenv("MG_FUZZ_KEEP")) nftw(fz_dir_path, fz_rm, 16, FTW_DEPTH | FTW_PHYS);
}

static const char *fz_dir(void) {
    if (!fz_dir_path[0]) {
        const char *t = getenv("TMPDIR");
        snprintf(fz_dir_path, sizeof fz_dir_path, "%s/mgraph-fuzz-XXXXXX", t && *t ? t : "/tmp");
        if (!mkdtemp(fz_dir_path)) {
            perror("mkdtemp");
            abort();
        }
        atexit(fz_cleanup);
    }
    return fz_dir_path;
}

/* "<scratch>/<name>", written with the bytes given. */
static inline const char *fz_write(const char *name, const void *data, size_t size) {
    static char path[8][600];
    static int slot;
    char *p = path[slot++ % 8];
    snprintf(p, 600, "%s/%s", fz_dir(), name);
    FILE *f = fopen(p, "wb");
    if (!f || (size && fwrite(data, 1, size, f) != size) || fclose(f)) {
        perror(p);
        abort();
    }
    return p;
}

/* Splits data at the first occurrence of sep (a byte string); the second part is empty
 * when sep is absent. */
static inline void fz_split(const uint8_t *data, size_t size, const char *sep, const uint8_t **a, size_t *na,
                     const uint8_t **b, size_t *nb) {
    size_t ls = strlen(sep);
    *a = data;
    *na = size;
    *b = data + size;
    *nb = 0;
    for (size_t i = 0; i + ls <= size; i++)
        if (memcmp(data + i, sep, ls) == 0) {
            *na = i;
            *b = data + i + ls;
            *nb = size - i - ls;
            return;
        }
}
#endif

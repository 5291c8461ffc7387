/* Driver for tests/io/mock_dataset.py, which holds the references (numpy, and Megatron's
 * index building reproduced from its source):
 *   streams OUT                    numpy's streams as mgraph draws them, int64 little-endian
 *                                  in the order the script lists them;
 *   dump OUT SPLIT SEQ SEED N0 N1 N2 VOCAB EOD K
 *                                  the sample counts, then the first and the last K samples
 *                                  of each split (int32), of mg_mock_dataset_open;
 *   open SPLIT SEQ SEED N0 N1 N2 VOCAB EOD
 *                                  opens only: exit 2 with the message on a refusal. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/numpy_random.h"
#include "mgraph/dataset.h"

static void put(FILE *f, int64_t v) { fwrite(&v, sizeof v, 1, f); }

static int streams(FILE *f) {
    static const uint64_t seeds[] = {0, 1, 1234, 4294967295ULL, 4294967296ULL, 18446744073709551615ULL};
    for (size_t i = 0; i < sizeof seeds / sizeof *seeds; i++) {
        mg_np_pcg64 g;
        mg_np_pcg64_seed(&g, seeds[i]); /* default_rng(seed).bit_generator.random_raw(8) */
        for (int k = 0; k < 8; k++) put(f, (int64_t)mg_np_pcg64_next64(&g));
        /* default_rng(seed).integers(lo, hi, 50, dtype) for each (lo, hi, dtype), one generator */
        static const int64_t r32[][2] = {{1, 4096}, {0, 2}, {-5, 7}, {0, 2147483647}, {-2147483647 - 1, 2147483647}, {3, 4}};
        mg_np_pcg64_seed(&g, seeds[i]);
        for (size_t r = 0; r < sizeof r32 / sizeof *r32; r++) {
            int32_t v[50];
            mg_np_integers_i32(&g, (int32_t)r32[r][0], (int32_t)r32[r][1], 50, v);
            for (int k = 0; k < 50; k++) put(f, v[k]);
        }
        static const int64_t r64[][2] = {{1, 4096}, {0, 4294967296LL}, {0, 4294967297LL}, {-7, 1LL << 40},
                                         {INT64_MIN, INT64_MAX}, {0, (1LL << 62) + 12345}};
        for (size_t r = 0; r < sizeof r64 / sizeof *r64; r++) {
            int64_t v[50];
            mg_np_integers_i64(&g, r64[r][0], r64[r][1], 50, v);
            for (int k = 0; k < 50; k++) put(f, v[k]);
        }
        if (seeds[i] > UINT32_MAX) continue;
        /* RandomState(seed): randint(0, 2**32, 8, dtype=uint32)-equivalent raw words, then
         * shuffles of arange(n) for several n, one state */
        mg_np_mt19937 m;
        mg_np_mt19937_seed(&m, (uint32_t)seeds[i]);
        for (int k = 0; k < 700; k++) put(f, mg_np_mt19937_next32(&m));
        static const size_t ns[] = {1, 2, 3, 10, 1000, 70000};
        for (size_t r = 0; r < sizeof ns / sizeof *ns; r++) {
            int64_t *a = malloc(ns[r] * sizeof *a);
            for (size_t k = 0; k < ns[r]; k++) a[k] = (int64_t)k;
            if (r % 2) {
                mg_np_shuffle_i64(&m, a, ns[r]);
            } else {
                int32_t *b = malloc(ns[r] * sizeof *b);
                for (size_t k = 0; k < ns[r]; k++) b[k] = (int32_t)k;
                mg_np_shuffle_i32(&m, b, ns[r]);
                for (size_t k = 0; k < ns[r]; k++) a[k] = b[k];
                free(b);
            }
            for (size_t k = 0; k < ns[r]; k++) put(f, a[k]);
            free(a);
        }
    }
    return 0;
}

static int open_args(char **a, mg_dataset **ds) {
    mg_mock_dataset_config c = {strcmp(a[0], "-") ? a[0] : NULL, atoi(a[1]), strtoull(a[2], NULL, 10),
                                {strtoull(a[3], NULL, 10), strtoull(a[4], NULL, 10), strtoull(a[5], NULL, 10)},
                                strtoll(a[6], NULL, 10), (int32_t)strtol(a[7], NULL, 10)};
    mg_error err = {0};
    if (mg_mock_dataset_open(&c, ds, &err)) {
        fprintf(stderr, "error: %s\n", err.msg);
        return 2;
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 3 && !strcmp(argv[1], "streams")) {
        FILE *f = fopen(argv[2], "wb");
        if (!f) return 1;
        streams(f);
        return fclose(f) ? 1 : 0;
    }
    if (argc == 10 && !strcmp(argv[1], "open")) {
        mg_dataset *ds;
        int rc = open_args(argv + 2, &ds);
        if (!rc) mg_dataset_free(ds);
        return rc;
    }
    if (argc != 12 || strcmp(argv[1], "dump")) {
        fprintf(stderr, "usage: %s streams OUT | dump OUT SPLIT SEQ SEED N0 N1 N2 VOCAB EOD K | open SPLIT ...\n", argv[0]);
        return 2;
    }
    mg_dataset *ds;
    int rc = open_args(argv + 3, &ds);
    if (rc) return rc;
    FILE *f = fopen(argv[2], "wb");
    if (!f) return 1;
    uint64_t K = strtoull(argv[11], NULL, 10);
    int seq = mg_dataset_seq_length(ds);
    int32_t *tok = malloc(((size_t)seq + 1) * sizeof *tok);
    for (int s = 0; s < 3; s++) put(f, (int64_t)mg_dataset_num_samples(ds, s));
    for (int s = 0; s < 3 && !rc; s++) {
        uint64_t n = mg_dataset_num_samples(ds, s);
        for (uint64_t i = 0; i < n && !rc; i++) {
            if (i >= K && i + K < n) continue; /* the first and the last K */
            mg_error err = {0};
            if (mg_dataset_sample(ds, s, i, tok, &err)) {
                fprintf(stderr, "error: %s\n", err.msg);
                rc = 1;
            }
            fwrite(tok, sizeof *tok, (size_t)seq + 1, f);
        }
    }
    free(tok);
    mg_dataset_free(ds);
    return fclose(f) || rc ? 1 : 0;
}

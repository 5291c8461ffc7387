/* --split book-ends against Megatron-LM's own split code: tests/io/split_vectors.txt
 * was written by tests/io/gen_split_vectors.py, which runs Megatron's
 * parse_and_normalize_split and convert_split_vector_to_split_matrix unchanged and
 * rounds as its dataset builder does, for 11 split strings x 130 dataset sizes. */
#include <stdint.h>

#include "io_test_util.h"
#include "mgraph/dataset.h"
#include "../../io/dataset_internal.h"

/* tests/io/blend_vectors.txt (tests/io/gen_blend_vectors.py, Megatron's normalize and
 * _get_size_per_split_per_dataset run unchanged): the samples asked of each dataset of a
 * blend. A count off by one changes that dataset's epochs, and so its sample order. */
static int blend_vectors(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "cannot read %s\n", path);
        return 1;
    }
    char line[1024];
    int n_cases = 0;
    while (fgets(line, sizeof line, f)) {
        if (line[0] == '#' || line[0] == '\n') continue;
        char *p = strchr(line, '|');
        unsigned long long t[3];
        int k = 0;
        if (!p || sscanf(p + 1, "%llu %llu %llu |%n", &t[0], &t[1], &t[2], &k) != 3 || !k) {
            CHECK(0, "bad blend line: %s", line);
            continue;
        }
        p += 1 + k;
        double w;
        unsigned long long want[3];
        while (sscanf(p, " %lf %llu %llu %llu%n", &w, &want[0], &want[1], &want[2], &k) == 4) {
            p += k;
            for (int s = 0; s < 3; s++) {
                uint64_t got = mg_blend_request(w, t[s]);
                CHECK(got == want[s], "weight %.17g, %llu samples: Megatron asks %llu, mgraph %llu", w, t[s], want[s],
                      (unsigned long long)got);
            }
            while (*p == ' ' || *p == '|') p++;
        }
        n_cases++;
    }
    fclose(f);
    CHECK(n_cases >= 100, "only %d blend vectors read", n_cases);
    if (g_failures) return 1;
    printf("ok: %d blends ask each dataset for Megatron's sample counts\n", n_cases);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: test_io_split split_vectors.txt [blend_vectors.txt]\n");
        return 2;
    }
    FILE *f = fopen(argv[1], "r");
    if (!f) {
        fprintf(stderr, "cannot read %s\n", argv[1]);
        return 1;
    }
    char line[512];
    int n_cases = 0;
    while (fgets(line, sizeof line, f)) {
        if (line[0] == '#' || line[0] == '\n') continue;
        char split[64];
        unsigned long long n;
        int used = 0;
        if (sscanf(line, "%63s %llu%n", split, &n, &used) != 2) {
            CHECK(0, "bad vector line: %s", line);
            continue;
        }
        double frac[3];
        mg_error err = {0};
        CHECK(mg_parse_split(split, frac, &err) == MG_OK, "%s: %s", split, err.msg);
        uint64_t b[4];
        mg_split_bounds(frac, n, b);
        const char *p = line + used;
        for (int s = 0; s < 3; s++) {
            while (*p == ' ' || *p == '|') p++;
            unsigned long long beg, end;
            int k = 0;
            if (*p == '-') { /* Megatron builds nothing: an empty range here */
                CHECK(b[s] == b[s + 1], "%s n=%llu split %d: Megatron has none, mgraph [%llu, %llu)", split, n, s,
                      (unsigned long long)b[s], (unsigned long long)b[s + 1]);
                p++;
                continue;
            }
            if (sscanf(p, "%llu %llu%n", &beg, &end, &k) != 2) {
                CHECK(0, "bad bounds in: %s", line);
                break;
            }
            p += k;
            CHECK(b[s] == beg && b[s + 1] == end, "%s n=%llu split %d: Megatron [%llu, %llu), mgraph [%llu, %llu)",
                  split, n, s, beg, end, (unsigned long long)b[s], (unsigned long long)b[s + 1]);
        }
        n_cases++;
    }
    fclose(f);
    CHECK(n_cases > 1000, "only %d vectors read", n_cases);
    if (g_failures) return 1;
    printf("ok: %d split/size pairs give Megatron's book-ends\n", n_cases);
    return argc > 2 ? blend_vectors(argv[2]) : 0;
}

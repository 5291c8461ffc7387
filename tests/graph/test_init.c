/* Weight initialisation: the parallel, vectorised init (ops/rng_init.c) writes exactly
 * the values of the scalar definition std * mg_rng_normal(seed, key, 0, logical index)
 * (Box-Muller through libm's log and cos), and the checksums the scalar code wrote
 * before the fast path existed. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mgraph/engine.h"
#include "mgraph/rng.h"
#include "ops/rng_init.h"
#include "testkit.h"

static uint64_t fnv(const float *a, int64_t n) {
    uint64_t h = 1469598103934665603ull;
    const unsigned char *p = (const unsigned char *)a;
    for (int64_t i = 0; i < n * 4; i++) {
        h ^= p[i];
        h *= 1099511628211ull;
    }
    return h;
}

/* Blocks of logical tensors as the partitioner makes them (tp shards of GPT-2 124M
 * weights among them), with FNV-1a hashes of the floats mg_rng_init_tensor wrote at
 * commit c339d26 (the scalar loop, before the fast path). */
typedef struct init_case {
    const char *name;
    int nd;
    int64_t lshape[3], shape[3], off[3];
    float std;
    uint64_t seed, fnv_old;
} init_case;
static const init_case cases[] = {
    {"wte.weight", 2, {50304, 768}, {50304, 768}, {0, 0}, 0.02f, 1234, 0x90b17aab2c638b32ull},
    {"h.0.mlp.c_fc.weight", 2, {3072, 768}, {1536, 768}, {1536, 0}, 0.02f, 1234, 0x72f105ccd2f67d0eull},
    {"h.0.mlp.c_proj.weight", 2, {768, 3072}, {768, 1536}, {0, 1536}, 0.0040824829f, 1234, 0x0fd5028eef35e86dull},
    {"x3", 3, {5, 7, 9}, {3, 4, 5}, {1, 2, 3}, 1.0f, 7, 0x16e11a8ce52cd18aull},
    {"odd", 1, {17}, {17}, {0}, 0.5f, 0, 0xe5f262cf5a8c6739ull},
    {"one", 1, {1}, {1}, {0}, 3.0f, 0xffffffffffffffffull, 0xd932820c82b98bcfull},
};
enum { N_CASES = sizeof cases / sizeof cases[0] };

static mg_tensor *block_of(mg_graph *g, const init_case *c) {
    mg_tensor *w = mg_param(g, c->name, c->nd, c->lshape, (mg_init){MG_INIT_NORMAL, c->std});
    char nm[96];
    snprintf(nm, sizeof nm, "%s.block", c->name);
    mg_tensor *b = mg_param(g, nm, c->nd, c->shape, (mg_init){MG_INIT_NORMAL, c->std});
    if (!b) return NULL;
    b->logical = w->logical;
    for (int d = 0; d < c->nd; d++) b->logical.offset[d] = c->off[d];
    return b;
}

static void print_checksums(void) {
    mg_graph *g = mg_graph_new();
    for (int k = 0; k < N_CASES; k++) {
        mg_tensor *b = block_of(g, &cases[k]);
        int64_t n = mg_numel(b);
        float *a = malloc((size_t)n * sizeof *a);
        mg_rng_init_tensor(b, cases[k].seed, a);
        printf("%s: 0x%016llxull\n", cases[k].name, (unsigned long long)fnv(a, n));
        free(a);
    }
    mg_graph_free(g);
}

/* The stored checksums: what the scalar loop wrote (tp blocks of 124M weights, 3-D and odd sizes). */
static void checksums_of_scalar_code(void) {
    mg_graph *g = mg_graph_new();
    for (int k = 0; k < N_CASES; k++) {
        mg_tensor *b = block_of(g, &cases[k]);
        TK_CHECK(b != NULL, "%s: %s", cases[k].name, mg_graph_error(g)->msg);
        if (!b) break;
        int64_t n = mg_numel(b);
        float *a = malloc((size_t)n * sizeof *a);
        mg_rng_init_tensor(b, cases[k].seed, a);
        uint64_t h = fnv(a, n);
        TK_CHECK(h == cases[k].fnv_old, "%s: checksum 0x%016llx, the scalar code wrote 0x%016llx", cases[k].name,
                 (unsigned long long)h, (unsigned long long)cases[k].fnv_old);
        free(a);
    }
    mg_graph_free(g);
}

/* Element by element against the scalar definition: runs that start and end anywhere
 * (vector tails), blocks of every case, 16M consecutive draws of one key. */
static void matches_scalar_definition(void) {
    mg_graph *g = mg_graph_new();
    int64_t bad = 0, total = 0;
    for (int k = 0; k < N_CASES; k++) {
        mg_tensor *b = block_of(g, &cases[k]);
        if (!b) break;
        int64_t n = mg_numel(b), lim = n < 3000000 ? n : 3000000;
        float *a = malloc((size_t)n * sizeof *a);
        mg_rng_init_tensor(b, cases[k].seed, a);
        for (int64_t i = 0; i < lim; i++) {
            float want = b->init.std * mg_rng_normal(cases[k].seed, b->logical.key, MG_RNG_STREAM_INIT, mg_logical_index(b, i));
            if (memcmp(&want, &a[i], sizeof want)) {
                if (bad++ < 5) TK_CHECK(false, "%s[%lld]: %.9g, scalar %.9g", cases[k].name, (long long)i, a[i], want);
            }
        }
        total += lim;
        free(a);
    }
    /* odd starts and lengths */
    float buf[100];
    for (uint64_t first = 0; first < 40; first += 3)
        for (int64_t n = 0; n <= 37; n += 5) {
            mg_rng_normal_fill(5, 77, 0, first, n, 0.7f, buf);
            for (int64_t i = 0; i < n; i++) {
                float want = 0.7f * mg_rng_normal(5, 77, 0, first + (uint64_t)i);
                if (memcmp(&want, &buf[i], sizeof want) && bad++ < 5)
                    TK_CHECK(false, "first %llu n %lld [%lld]", (unsigned long long)first, (long long)n, (long long)i);
            }
        }
    /* every instruction set's path this CPU has (the run above took the widest) */
    int paths = 0;
    for (int isa = 0; isa < 3; isa++)
        for (int part = 0; part < 2; part++) {
            uint64_t first = part ? (3ull << 32) - 50 : 7;
            float v[100];
            if (mg_rng_normal_fill_isa(isa, 5, 77, 0, first, 100, 0.7f, v) < 0) break;
            paths += part == 0;
            for (int64_t i = 0; i < 100; i++) {
                float want = 0.7f * mg_rng_normal(5, 77, 0, first + (uint64_t)i);
                if (memcmp(&want, &v[i], sizeof want) && bad++ < 5)
                    TK_CHECK(false, "path %d, draw %llu: %.9g, scalar %.9g", isa, (unsigned long long)(first + (uint64_t)i),
                             v[i], want);
            }
        }
    printf("normal fill: %d instruction-set paths checked\n", paths);
    TK_CHECK(paths >= 1, "no path ran");
    /* 16M draws, a high counter range too (the upper 32 bits of the index set) */
    int64_t n = 1 << 24, slow = 0;
    float *a = malloc((size_t)n * sizeof *a);
    for (int part = 0; part < 2; part++) {
        uint64_t first = part ? (3ull << 32) - 5000 : 0;
        slow += mg_rng_normal_fill(99, 0x1234567890abcdefull, 0, first, n / 2, 1.0f, a);
        for (int64_t i = 0; i < n / 2; i++) {
            float want = mg_rng_normal(99, 0x1234567890abcdefull, 0, first + (uint64_t)i);
            if (memcmp(&want, &a[i], sizeof want) && bad++ < 5)
                TK_CHECK(false, "draw %llu: %.9g, scalar %.9g", (unsigned long long)(first + (uint64_t)i), a[i], want);
        }
    }
    total += n;
    free(a);
    TK_CHECK(bad == 0, "%lld of %lld values differ from the scalar definition", (long long)bad, (long long)total);
    /* the doubtful roundings exist and take the scalar path: about 2^-15 of the draws */
    printf("16M draws: %lld took the scalar path (rounding within 2^-40)\n", (long long)slow);
    TK_CHECK(slow > 0 && slow < n / 1000, "%lld scalar fallbacks in %lld draws", (long long)slow, (long long)n);
    mg_graph_free(g);
}

/* The fast doubles are within 2^-44 of libm's (the check assumes 2^-40): measured over
 * 4M draws, including the two arguments nearest the zeros of cos (u2 = 1/4, 3/4). */
static void fast_path_accuracy(void) {
    int64_t n = 1 << 22;
    double *v = malloc((size_t)n * sizeof *v), worst = 0;
    int64_t at = -1;
    mg_rng_normal_approx(11, 42, 0, 0, n, v);
    uint64_t k = mg_rng_key(11, 42);
    for (int64_t i = 0; i < n; i++) {
        uint32_t r[4];
        mg_philox4x32(k, 0, (uint64_t)i, r);
        double u1 = ((double)r[0] + 1.0) / 4294967296.0, u2 = (double)r[1] / 4294967296.0;
        double ref = sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
        double e = ref == 0 ? fabs(v[i]) : fabs(v[i] - ref) / fabs(ref);
        if (e > worst) {
            worst = e;
            at = i;
        }
    }
    printf("fast Box-Muller vs libm: worst relative difference %.3g (2^%.1f) at draw %lld\n", worst, log2(worst),
           (long long)at);
    TK_CHECK(worst < 0x1p-44, "relative difference %g above 2^-44", worst);
    free(v);
}

/* mg_storage_init on several threads writes what mg_rng_init_tensor writes, zeros where
 * the spec says zeros, for whole tensors and blocks. */
static void threads_match(void) {
    mg_graph *g = mg_graph_new();
    mg_tensor *t[N_CASES];
    for (int k = 0; k < N_CASES; k++) t[k] = block_of(g, &cases[k]);
    mg_tensor *ones = mg_param(g, "ln.weight", 1, (int64_t[]){3000001}, (mg_init){MG_INIT_ONES, 0});
    mg_tensor *zeros = mg_param(g, "ln.bias", 1, (int64_t[]){2500003}, (mg_init){MG_INIT_ZEROS, 0});
    mg_init_item items[N_CASES + 3];
    float *bufs[N_CASES + 3];
    int n = 0;
    for (int k = 0; k < N_CASES; k++) {
        bufs[n] = malloc((size_t)mg_numel(t[k]) * sizeof(float));
        items[n] = (mg_init_item){t[k], bufs[n], 0};
        n++;
    }
    bufs[n] = malloc((size_t)mg_numel(ones) * sizeof(float));
    items[n] = (mg_init_item){ones, bufs[n], 0};
    n++;
    bufs[n] = malloc((size_t)mg_numel(zeros) * sizeof(float));
    memset(bufs[n], 0x7f, (size_t)mg_numel(zeros) * sizeof(float));
    items[n] = (mg_init_item){zeros, bufs[n], (size_t)mg_numel(zeros) * sizeof(float)};
    n++;
    for (int threads = 1; threads <= 5; threads += 2) {
        for (int i = 0; i < n - 1; i++) memset(bufs[i], 0x55, (size_t)mg_numel(items[i].t) * sizeof(float));
        mg_rng_init_items(items, n, 1234, threads);
        for (int k = 0; k < N_CASES; k++) {
            int64_t m = mg_numel(t[k]);
            float *want = malloc((size_t)m * sizeof *want);
            for (int64_t i = 0; i < m; i += 9973) /* a stride through every chunk, against the scalar definition */
                want[i] = t[k]->init.std * mg_rng_normal(1234, t[k]->logical.key, 0, mg_logical_index(t[k], i));
            int64_t bad = 0;
            for (int64_t i = 0; i < m; i += 9973) bad += memcmp(&want[i], &bufs[k][i], sizeof(float)) != 0;
            TK_CHECK(bad == 0, "%d threads: %s: %lld sampled values differ", threads, cases[k].name, (long long)bad);
            if (cases[k].seed == 1234)
                TK_CHECK(fnv(bufs[k], m) == cases[k].fnv_old, "%d threads: %s: checksum differs from the scalar code's",
                         threads, cases[k].name);
            free(want);
        }
        int64_t bad = 0;
        for (int64_t i = 0; i < mg_numel(ones); i++) bad += bufs[N_CASES][i] != 1.0f;
        for (int64_t i = 0; i < mg_numel(zeros); i++) bad += bufs[N_CASES + 1][i] != 0.0f;
        TK_CHECK(bad == 0, "%d threads: %lld ones/zeros wrong", threads, (long long)bad);
    }
    for (int i = 0; i < n; i++) free(bufs[i]);
    mg_graph_free(g);
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "print")) {
        print_checksums();
        return 0;
    }
    static const tk_case tcases[] = {
        {"checksums", checksums_of_scalar_code},
        {"matches_scalar", matches_scalar_definition},
        {"fast_path_accuracy", fast_path_accuracy},
        {"threads", threads_match},
    };
    return tk_main(argc, argv, tcases, sizeof tcases / sizeof tcases[0]);
}

/* mg_dataset front end, --split parsing and the deterministic random helpers. */
#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "io/dataset_internal.h"
#include "io/hashmap.h"

static int bad_split(int split) { return split < MG_SPLIT_TRAIN || split > MG_SPLIT_TEST; }

uint64_t mg_dataset_num_samples(const mg_dataset *ds, int split) {
    return bad_split(split) ? 0 : ds->ops->num_samples(ds, split);
}

int mg_dataset_seq_length(const mg_dataset *ds) { return ds->seq_length; }
int64_t mg_dataset_vocab_size(const mg_dataset *ds) { return ds->vocab; }

int mg_dataset_sample(const mg_dataset *ds, int split, uint64_t idx, int32_t *tokens, mg_error *err) {
    if (bad_split(split)) return mg_error_set(err, MG_ERR_INVALID, "split %d is not train (0), valid (1) or test (2)", split);
    uint64_t n = ds->ops->num_samples(ds, split);
    if (idx >= n)
        return mg_error_set(err, MG_ERR_INVALID, "sample %llu out of range: split %d has %llu samples",
                            (unsigned long long)idx, split, (unsigned long long)n);
    return ds->ops->sample(ds, split, idx, tokens, err);
}

/* ---- one dataset per split ------------------------------------------------------------ */
typedef struct per_split {
    mg_dataset *part[3];
} per_split;

static uint64_t per_split_num_samples(const mg_dataset *ds, int split) {
    const per_split *p = ds->impl;
    return p->part[split] ? mg_dataset_num_samples(p->part[split], split) : 0;
}

static int per_split_sample(const mg_dataset *ds, int split, uint64_t idx, int32_t *tokens, mg_error *err) {
    const per_split *p = ds->impl;
    return mg_dataset_sample(p->part[split], split, idx, tokens, err); /* (idx < num_samples: not NULL) */
}

static void per_split_destroy(void *impl) {
    per_split *p = impl;
    for (int s = 0; s < 3; s++) mg_dataset_free(p->part[s]);
    free(p);
}

static const mg_dataset_ops per_split_ops = {per_split_num_samples, per_split_sample, per_split_destroy};

int mg_dataset_per_split(mg_dataset *parts[3], mg_dataset **out, mg_error *err) {
    *out = NULL;
    const mg_dataset *first = NULL;
    int rc = MG_OK;
    for (int s = 0; s < 3 && !rc; s++) {
        if (!parts[s]) continue;
        if (first && parts[s]->seq_length != first->seq_length)
            rc = mg_error_set(err, MG_ERR_INVALID, "per-split datasets of %d and %d tokens per sample", first->seq_length,
                              parts[s]->seq_length);
        if (!first) first = parts[s];
    }
    per_split *p = rc ? NULL : calloc(1, sizeof *p);
    mg_dataset *ds = p ? calloc(1, sizeof *ds) : NULL;
    if (!rc && !ds) rc = mg_error_set(err, MG_ERR_NOMEM, "out of memory");
    if (rc) {
        free(p);
        for (int s = 0; s < 3; s++) mg_dataset_free(parts[s]);
        return rc;
    }
    for (int s = 0; s < 3; s++) p->part[s] = parts[s];
    ds->ops = &per_split_ops;
    ds->impl = p;
    ds->kind = MG_DATASET_PER_SPLIT;
    ds->seq_length = first ? first->seq_length : 0;
    ds->vocab = first ? first->vocab : 0;
    *out = ds;
    return MG_OK;
}

void mg_dataset_free(mg_dataset *ds) {
    if (!ds) return;
    if (ds->ops && ds->impl) ds->ops->destroy(ds->impl);
    free(ds);
}

int mg_parse_split(const char *split, double frac[3], mg_error *err) {
    frac[0] = frac[1] = frac[2] = 0;
    if (!split) return mg_error_set(err, MG_ERR_INVALID, "--split is NULL");
    const char *p = split;
    int n = 0;
    double sum = 0;
    /* Megatron's recipes write DATA_ARGS+=("--split '99,1,0'") and expand the array
     * unquoted: the quotes reach the program, and Megatron, which reads only the numbers
     * (re.findall), ignores them. A value wholly inside one pair of quotes is read inside. */
    size_t len = strlen(split);
    char unq[256];
    if (len >= 2 && len < sizeof unq && (split[0] == '\'' || split[0] == '"') && split[len - 1] == split[0]) {
        memcpy(unq, split + 1, len - 2);
        unq[len - 2] = '\0';
        p = unq;
    }
    while (*p) {
        while (isspace((unsigned char)*p)) p++;
        char *end;
        double v = strtod(p, &end);
        if (end == p || v < 0 || !isfinite(v) || n == 3)
            return mg_error_set(err, MG_ERR_INVALID, "bad --split \"%s\": expected up to three non-negative numbers like 949,50,1", split);
        frac[n++] = v;
        sum += v;
        p = end;
        while (isspace((unsigned char)*p)) p++;
        if (*p == ',' || *p == '/') p++;
        else if (*p) return mg_error_set(err, MG_ERR_INVALID, "bad --split \"%s\": separate the numbers with ',' or '/'", split);
    }
    if (sum <= 0) return mg_error_set(err, MG_ERR_INVALID, "bad --split \"%s\": the parts sum to zero", split);
    for (int i = 0; i < 3; i++) frac[i] /= sum;
    return MG_OK;
}

void mg_split_bounds(const double frac[3], uint64_t n, uint64_t bounds[4]) {
    /* Megatron (blended_megatron_dataset_config.convert_split_vector_to_split_matrix and
     * the builder's _build_megatron_dataset_splits): the split's book-ends are the
     * running sums of the normalised fractions, each mapped to int(round(cum * n)).
     * Python's round() rounds half to even, as nearbyint does in the default rounding
     * mode; the sums are accumulated in the same order, in doubles, as Python's floats. */
    double cum = 0;
    bounds[0] = 0;
    for (int i = 0; i < 3; i++) {
        cum += frac[i];
        double b = nearbyint(cum * (double)n);
        bounds[i + 1] = b < 0 ? 0 : b > (double)n ? n : (uint64_t)b;
        if (bounds[i + 1] < bounds[i]) bounds[i + 1] = bounds[i];
    }
}

uint64_t mg_blend_request(double weight, uint64_t target) {
    /* in doubles, in Python's order: math.ceil(target_size * weight), then x (1 + surplus) */
    return (uint64_t)ceil(ceil((double)target * weight) * (1.0 + 0.005));
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

void mg_prng_seed(mg_prng *r, uint64_t seed, uint64_t stream) {
    uint64_t x = seed ^ mg_mix64(stream + 0x632be59bd9b4e019ULL);
    for (int i = 0; i < 4; i++) {
        x += 0x9e3779b97f4a7c15ULL;
        r->s[i] = mg_mix64(x);
    }
}

uint64_t mg_prng_next(mg_prng *r) {
    uint64_t *s = r->s;
    uint64_t res = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return res;
}

uint64_t mg_prng_below(mg_prng *r, uint64_t n) {
    /* Rejection sampling keeps the draw exactly uniform. */
    uint64_t limit = UINT64_MAX - UINT64_MAX % n;
    uint64_t x;
    do x = mg_prng_next(r);
    while (x >= limit);
    return x % n;
}

uint64_t mg_permute_index(uint64_t i, uint64_t n, uint64_t key) {
    if (n <= 1) return 0;
    int bits = 0;
    while (bits < 64 && (1ULL << bits) < n) bits++;
    if (bits & 1) bits++;
    int half = bits / 2;
    uint64_t mask = (half == 64) ? UINT64_MAX : (1ULL << half) - 1;
    do {
        uint64_t l = i >> half, r = i & mask;
        for (uint64_t round = 0; round < 4; round++) {
            uint64_t nl = r;
            r = l ^ (mg_mix64(r ^ key ^ (round * 0x9e3779b97f4a7c15ULL)) & mask);
            l = nl;
        }
        i = (l << half) | r;
    } while (i >= n); /* cycle walking: the domain is < 4n, so few steps */
    return i;
}

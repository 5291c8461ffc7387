/* Sampling tests for the GPT dataset (coverage, determinism, splits, epochs, cache,
 * blends) and the raw text dataset. Token values are made unique (token = global
 * position + base) so that a sample tells exactly which tokens it holds. */
#include <stdint.h>
#include <unistd.h>

#include "io_test_util.h"
#include "mgraph/dataset.h"

static const char *g_dir;

/* Writes an int32 dataset of ndocs documents; token values run base, base+1, ... */
static int64_t make_dataset(const char *prefix, int ndocs, uint32_t lseed, int32_t base, int32_t last_len) {
    mg_indexed_writer *w;
    mg_error err = {0};
    if (mg_indexed_writer_open(prefix, MG_IDX_I32, &w, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        exit(1);
    }
    int32_t buf[256], v = base;
    int64_t total = 0;
    for (int d = 0; d < ndocs; d++) {
        lseed = lseed * 1103515245u + 12345u;
        int len = 1 + (int)((lseed >> 16) % 60);
        if (d == ndocs - 1 && last_len > 0) len = last_len;
        for (int i = 0; i < len; i++) buf[i] = v++;
        mg_indexed_writer_add_tokens(w, buf, (size_t)len, &err);
        mg_indexed_writer_end_document(w, &err);
        total += len;
    }
    if (mg_indexed_writer_finalize(w, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        exit(1);
    }
    mg_indexed_writer_free(w);
    return total;
}

/* vocab: every token id must be below it (checked at open) */
static mg_dataset *open_gpt_vocab(const char *path, const char *split, int seq, uint64_t seed, uint64_t ntrain,
                                  const char *cache, int64_t vocab) {
    mg_gpt_dataset_config c = {path, split, seq, seed, {ntrain, 0, 0}, cache, vocab, NULL, false, 0};
    mg_dataset *ds = NULL;
    mg_error err = {0};
    int rc = mg_gpt_dataset_open(&c, &ds, &err);
    CHECK(rc == 0, "open %s: %s", path, err.msg);
    return ds;
}

static mg_dataset *open_gpt(const char *path, const char *split, int seq, uint64_t seed, uint64_t ntrain,
                            const char *cache) {
    return open_gpt_vocab(path, split, seq, seed, ntrain, cache, 50257);
}

static void gpt_coverage(void) {
    char prefix[4200];
    snprintf(prefix, sizeof prefix, "%s/cover", g_dir);
    const int seq = 16;
    /* Choose the last document's length so that (T - 1) % seq == 0: then one epoch's
     * samples cover every token exactly (Megatron drops a shorter tail). */
    int64_t t = make_dataset(prefix, 57, 7, 0, 5);
    int32_t last = (int32_t)(5 + (seq - (t - 1) % seq) % seq);
    t = make_dataset(prefix, 57, 7, 0, last);
    CHECK((t - 1) % seq == 0, "fixture size");
    mg_dataset *ds = open_gpt(prefix, "1,0,0", seq, 1234, 0, NULL);
    if (!ds) return;
    uint64_t n = mg_dataset_num_samples(ds, MG_SPLIT_TRAIN);
    CHECK(n == (uint64_t)(t - 1) / seq, "one epoch = (T-1)/seq samples: %llu", (unsigned long long)n);
    CHECK(mg_dataset_num_samples(ds, MG_SPLIT_VALID) == 0 && mg_dataset_num_samples(ds, MG_SPLIT_TEST) == 0, "empty splits");
    int *seen = calloc((size_t)t, sizeof *seen);
    int32_t tok[seq + 1];
    mg_error err = {0};
    for (uint64_t i = 0; i < n; i++) {
        CHECK(mg_dataset_sample(ds, MG_SPLIT_TRAIN, i, tok, &err) == 0, "sample %llu: %s", (unsigned long long)i, err.msg);
        for (int j = 0; j <= seq; j++) {
            CHECK(tok[j] >= 0 && tok[j] < t, "token value");
            if (tok[j] >= 0 && tok[j] < t) seen[tok[j]]++;
        }
    }
    int missing = 0, shared = 0;
    for (int64_t i = 0; i < t; i++) {
        if (seen[i] == 0) missing++;
        if (seen[i] == 2) shared++;
    }
    CHECK(missing == 0, "%d of %lld tokens never sampled in an epoch", missing, (long long)t);
    CHECK(shared == (int)n - 1, "neighbouring samples share exactly one token (%d shared, %llu samples)", shared,
          (unsigned long long)n);
    CHECK(mg_dataset_sample(ds, MG_SPLIT_TRAIN, n, tok, &err) == MG_ERR_INVALID, "index past the end refused");
    CHECK(mg_dataset_seq_length(ds) == seq && mg_dataset_vocab_size(ds) == 50257, "getters");
    free(seen);
    mg_dataset_free(ds);
}

static int same_samples(const mg_dataset *a, const mg_dataset *b, int split) {
    uint64_t n = mg_dataset_num_samples(a, split);
    if (n != mg_dataset_num_samples(b, split)) return 0;
    int seq = mg_dataset_seq_length(a);
    int32_t *x = malloc(sizeof(int32_t) * (size_t)(seq + 1)), *y = malloc(sizeof(int32_t) * (size_t)(seq + 1));
    int same = 1;
    for (uint64_t i = 0; i < n && same; i++) {
        mg_dataset_sample(a, split, i, x, NULL);
        mg_dataset_sample(b, split, i, y, NULL);
        same = memcmp(x, y, sizeof(int32_t) * (size_t)(seq + 1)) == 0;
    }
    free(x);
    free(y);
    return same;
}

static void gpt_determinism_and_splits(void) {
    char prefix[4200];
    snprintf(prefix, sizeof prefix, "%s/det", g_dir);
    int64_t t = make_dataset(prefix, 200, 99, 0, 0);
    mg_dataset *a = open_gpt(prefix, "80,15,5", 32, 7, 0, NULL), *b = open_gpt(prefix, "80,15,5", 32, 7, 0, NULL),
               *c = open_gpt(prefix, "80,15,5", 32, 8, 0, NULL);
    if (!a || !b || !c) return;
    for (int s = 0; s < 3; s++) CHECK(same_samples(a, b, s), "same seed, same samples (split %d)", s);
    CHECK(!same_samples(a, c, MG_SPLIT_TRAIN), "another seed shuffles differently");
    CHECK(mg_dataset_num_samples(a, 1) > 0 && mg_dataset_num_samples(a, 2) > 0, "valid/test not empty");
    /* Splits hold disjoint documents: no token value appears in two splits. */
    char *owner = calloc((size_t)t, 1);
    int32_t tok[33];
    for (int s = 0; s < 3; s++)
        for (uint64_t i = 0; i < mg_dataset_num_samples(a, s); i++) {
            mg_dataset_sample(a, s, i, tok, NULL);
            for (int j = 0; j < 33; j++) {
                CHECK(owner[tok[j]] == 0 || owner[tok[j]] == s + 1, "token %d in splits %d and %d", tok[j], owner[tok[j]] - 1, s);
                owner[tok[j]] = (char)(s + 1);
            }
        }
    /* Megatron's split: 200 documents at 80/15/5 -> 160/30/10, in order. */
    mg_indexed_dataset *ids;
    mg_error err = {0};
    mg_indexed_open(prefix, &ids, &err);
    int32_t first_valid = 0;
    for (int d = 0; d < 160; d++) first_valid += mg_indexed_sequence_length(ids, (uint64_t)d);
    CHECK(owner[first_valid - 1] != 2 && owner[first_valid] != 1, "train/valid boundary at document 160");
    mg_indexed_free(ids);
    free(owner);
    /* More samples than one epoch: more epochs, and every sample still well-formed. */
    uint64_t one = mg_dataset_num_samples(a, 0);
    mg_dataset *e = open_gpt(prefix, "80,15,5", 32, 7, 3 * one + 5, NULL);
    if (e) {
        uint64_t n = mg_dataset_num_samples(e, 0);
        CHECK(n >= 3 * one + 5, "epochs give enough samples (%llu)", (unsigned long long)n);
        int ok = 1;
        for (uint64_t i = 0; i < n; i++) ok &= mg_dataset_sample(e, 0, i, tok, NULL) == 0;
        CHECK(ok, "all multi-epoch samples readable");
        mg_dataset_free(e);
    }
    mg_gpt_dataset_config bad = {prefix, "1,0,0", 0, 1, {0, 0, 0}, NULL, 0, NULL, false, 0};
    mg_dataset *x = NULL;
    CHECK(mg_gpt_dataset_open(&bad, &x, NULL) == MG_ERR_INVALID, "seq_length 0 refused");
    bad.seq_length = 8;
    bad.split = "a,b";
    CHECK(mg_gpt_dataset_open(&bad, &x, NULL) == MG_ERR_INVALID, "bad split refused");
    bad.split = NULL;
    bad.data_path = "/nonexistent/prefix";
    mg_error_clear(&err);
    CHECK(mg_gpt_dataset_open(&bad, &x, &err) == MG_ERR_IO && strstr(err.msg, "/nonexistent/prefix.idx"), "missing: %s", err.msg);
    mg_dataset_free(a);
    mg_dataset_free(b);
    mg_dataset_free(c);
}

static void gpt_cache(void) {
    char prefix[4200], cache[4200];
    snprintf(prefix, sizeof prefix, "%s/cached", g_dir);
    snprintf(cache, sizeof cache, "%s/cache", g_dir);
    char cmd[8500];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", cache);
    if (system(cmd) != 0) return;
    make_dataset(prefix, 100, 5, 0, 0);
    mg_dataset *a = open_gpt(prefix, "90,10,0", 16, 3, 0, cache);
    mg_dataset *b = open_gpt(prefix, "90,10,0", 16, 3, 0, cache);
    mg_dataset *m = open_gpt(prefix, "90,10,0", 16, 3, 0, NULL);
    if (!a || !b || !m) return;
    int loaded, built;
    mg_gpt_dataset_cache_stats(a, &loaded, &built);
    CHECK(loaded == 0 && built == 3, "first open builds (%d loaded, %d built)", loaded, built);
    mg_gpt_dataset_cache_stats(b, &loaded, &built);
    CHECK(loaded == 3 && built == 0, "second open loads the cache (%d loaded, %d built)", loaded, built);
    CHECK(same_samples(a, b, 0) && same_samples(a, b, 1) && same_samples(a, m, 0), "cached indices give the same samples");
    mg_dataset *c = open_gpt(prefix, "90,10,0", 17, 3, 0, cache);
    mg_gpt_dataset_cache_stats(c, &loaded, &built);
    CHECK(loaded == 0 && built == 3, "a new seq_length rebuilds (%d loaded)", loaded);
    mg_dataset_free(c);
    /* New data under the same prefix (different size and mtime) rebuilds too. */
    make_dataset(prefix, 101, 5, 0, 0);
    c = open_gpt(prefix, "90,10,0", 16, 3, 0, cache);
    mg_gpt_dataset_cache_stats(c, &loaded, &built);
    CHECK(loaded == 0 && built == 3, "changed data rebuilds (%d loaded)", loaded);
    mg_dataset_free(c);
    /* A damaged cache file is rebuilt, not trusted. */
    snprintf(cmd, sizeof cmd, "for f in '%s'/*; do printf 'garbage' > \"$f\"; done", cache);
    if (system(cmd) != 0) return;
    c = open_gpt(prefix, "90,10,0", 16, 3, 0, cache);
    mg_gpt_dataset_cache_stats(c, &loaded, &built);
    CHECK(loaded == 0 && built == 3, "damaged cache rebuilt (%d loaded)", loaded);
    mg_dataset_free(c);
    /* Damage that keeps the size: zeroed pages at the end (the shuffle all zeros, which
     * passed the range checks and trained on one sample) and one changed byte in the
     * middle (a sample offset or document). Both are rebuilt and give the same samples. */
    const char *damage[] = {"for f in '%s'/*; do truncate -s -96 \"$f\" && truncate -s +96 \"$f\"; done",
                            "for f in '%s'/*; do s=$(stat -c %%s \"$f\"); printf '\\007' | "
                            "dd of=\"$f\" bs=1 seek=$((s / 2)) conv=notrunc status=none; done"};
    mg_dataset *fresh = open_gpt(prefix, "90,10,0", 16, 3, 0, NULL);
    if (!fresh) return;
    for (int d = 0; d < 2; d++) {
        snprintf(cmd, sizeof cmd, damage[d], cache);
        if (system(cmd) != 0) return;
        c = open_gpt(prefix, "90,10,0", 16, 3, 0, cache);
        if (!c) return;
        mg_gpt_dataset_cache_stats(c, &loaded, &built);
        CHECK(loaded == 0 && built == 3, "damage %d: cache rebuilt, not trusted (%d loaded)", d, loaded);
        CHECK(same_samples(c, fresh, 0) && same_samples(c, fresh, 1), "damage %d: rebuilt samples match", d);
        mg_dataset_free(c);
    }
    /* Symlinks planted under the old predictable temporary names (<cache>.tmp.<pid>)
     * must not be followed: the victim stays intact, the caches appear as regular files,
     * and the planted links (not ours) stay where they are. */
    snprintf(cmd, sizeof cmd,
             "cd '%s' && printf precious > ../victim && for f in *.idxcache; do rm \"$f\"; "
             "ln -s ../victim \"$f.tmp.%ld\"; done",
             cache, (long)getpid());
    if (system(cmd) != 0) return;
    c = open_gpt(prefix, "90,10,0", 16, 3, 0, cache);
    if (!c) return;
    mg_gpt_dataset_cache_stats(c, &loaded, &built);
    CHECK(built == 3, "caches rebuilt after removal (%d built)", built);
    mg_dataset_free(c);
    snprintf(cmd, sizeof cmd,
             "cd '%s' && [ \"$(cat ../victim)\" = precious ] && [ $(find . -name '*.idxcache' -type f | wc -l) -eq 3 ] && "
             "for l in *.tmp.%ld; do [ -L \"$l\" ] || exit 1; done",
             cache, (long)getpid());
    CHECK(system(cmd) == 0, "a planted symlink was followed or removed (victim overwritten?)");
    mg_dataset_free(fresh);
    mg_dataset_free(a);
    mg_dataset_free(b);
    mg_dataset_free(m);
}

static void gpt_blend(void) {
    char pa[4200], pb[4200], path[9000];
    snprintf(pa, sizeof pa, "%s/blend_a", g_dir);
    snprintf(pb, sizeof pb, "%s/blend_b", g_dir);
    make_dataset(pa, 300, 11, 0, 0);
    make_dataset(pb, 300, 12, 1000000, 0);
    snprintf(path, sizeof path, "0.3 %s 0.7 %s", pa, pb);
    const uint64_t n = 2000;
    /* B's ids start at 1000000 (they mark its samples): a vocabulary that holds them */
    mg_dataset *ds = open_gpt_vocab(path, "1,0,0", 8, 42, n, NULL, 2000000);
    if (!ds) return;
    CHECK(mg_dataset_num_samples(ds, 0) == n, "blend size = requested (%llu)", (unsigned long long)mg_dataset_num_samples(ds, 0));
    int32_t tok[9];
    uint64_t from_a = 0;
    double worst = 0;
    for (uint64_t i = 0; i < n; i++) {
        mg_error err = {0};
        CHECK(mg_dataset_sample(ds, 0, i, tok, &err) == 0, "blend sample: %s", err.msg);
        int a = tok[0] < 1000000;
        for (int j = 1; j < 9; j++) CHECK((tok[j] < 1000000) == a, "a sample stays inside one dataset");
        from_a += (uint64_t)a;
        double dev = (double)from_a - 0.3 * (double)(i + 1);
        if (dev < 0) dev = -dev;
        if (dev > worst) worst = dev;
    }
    /* Stated tolerance: the greedy blend keeps every prefix within 1 sample of its weight. */
    CHECK(worst <= 1.0, "blend deviates by %.2f samples from its weights", worst);
    printf("blend 0.3/0.7 over %llu samples: %llu from A (%.4f), worst prefix deviation %.2f samples\n",
           (unsigned long long)n, (unsigned long long)from_a, (double)from_a / n, worst);
    mg_dataset_free(ds);
    /* the same data read with GPT-2's vocabulary: refused at open, naming B and the tokenizer */
    mg_gpt_dataset_config small = {path, "1,0,0", 8, 42, {0, 0, 0}, NULL, 50257, "GPT2BPETokenizer", false, 0};
    mg_dataset *y = NULL;
    mg_error ye = {0};
    CHECK(mg_gpt_dataset_open(&small, &y, &ye) == MG_ERR_INVALID && !y && strstr(ye.msg, "blend_b holds token id 1000000") &&
              strstr(ye.msg, "vocabulary of GPT2BPETokenizer [0, 50257)"),
          "ids outside the vocabulary at open: %s", ye.msg);
    /* Without a requested size: the largest blend that repeats no dataset. */
    ds = open_gpt_vocab(path, "1,0,0", 8, 42, 0, NULL, 2000000);
    if (ds) {
        uint64_t m = mg_dataset_num_samples(ds, 0);
        CHECK(m > 100, "default blend size %llu", (unsigned long long)m);
        mg_dataset_free(ds);
    }
    snprintf(path, sizeof path, "0.3 %s 0.7", pa);
    mg_gpt_dataset_config bad = {path, "1,0,0", 8, 1, {0, 0, 0}, NULL, 0, NULL, false, 0};
    mg_dataset *x = NULL;
    CHECK(mg_gpt_dataset_open(&bad, &x, NULL) == MG_ERR_INVALID, "odd blend refused");
}

static void text_dataset(void) {
    char path[4200];
    snprintf(path, sizeof path, "%s/lines.txt", g_dir);
    FILE *f = fopen(path, "wb");
    const int lines = 1000;
    for (int i = 0; i < lines; i++) fprintf(f, "%07d\n", i);
    fprintf(f, "tail");
    fclose(f);
    /* Byte level, seq 8: every window starts on a line, so its first 8 bytes name it. */
    mg_text_dataset_config c = {path, NULL, "90,10,0", 8, 5, {0, 0, 0}};
    mg_dataset *a = NULL, *b = NULL, *d = NULL;
    mg_error err = {0};
    CHECK(mg_text_dataset_open(&c, &a, &err) == 0, "open: %s", err.msg);
    CHECK(mg_text_dataset_open(&c, &b, &err) == 0, "open: %s", err.msg);
    c.seed = 6;
    CHECK(mg_text_dataset_open(&c, &d, &err) == 0, "open: %s", err.msg);
    if (!a || !b || !d) return;
    CHECK(same_samples(a, b, 0) && same_samples(a, b, 1), "text dataset deterministic");
    CHECK(!same_samples(a, d, 0), "another seed, another order");
    CHECK(mg_dataset_vocab_size(a) == 256, "byte vocab");
    uint64_t n = mg_dataset_num_samples(a, 0), nv = mg_dataset_num_samples(a, 1);
    uint64_t ntok = (uint64_t)lines * 8 + 4, ntrain = (uint64_t)(0.9 * (double)ntok + 0.5);
    CHECK(n == (ntrain - 1) / 8 && nv == (ntok - ntrain - 1) / 8, "window counts %llu %llu", (unsigned long long)n,
          (unsigned long long)nv);
    char *seen = calloc((size_t)lines, 1);
    int32_t tok[9];
    int ok = 1;
    for (uint64_t i = 0; i < n; i++) {
        mg_dataset_sample(a, 0, i, tok, NULL);
        int v = 0;
        for (int j = 0; j < 7; j++) v = v * 10 + (tok[j] - '0');
        ok &= tok[7] == '\n' && v >= 0 && v < lines && !seen[v];
        if (v >= 0 && v < lines) seen[v] = 1;
    }
    CHECK(ok, "each train window visited once per epoch");
    int first_valid = 0;
    mg_dataset_sample(a, 1, 0, tok, NULL);
    for (int j = 0; j < 7; j++) first_valid = first_valid * 10 + (tok[j] - '0');
    CHECK(first_valid >= (int)(ntrain / 8) - 1, "validation comes from the end of the text (%d)", first_valid);
    free(seen);
    mg_dataset_free(a);
    mg_dataset_free(b);
    mg_dataset_free(d);

    /* Errors. */
    mg_text_dataset_config e = {"/nonexistent/file.txt", NULL, NULL, 8, 1, {0, 0, 0}};
    mg_dataset *x = NULL;
    mg_error_clear(&err);
    CHECK(mg_text_dataset_open(&e, &x, &err) == MG_ERR_IO && strstr(err.msg, "/nonexistent/file.txt"), "missing: %s", err.msg);
    snprintf(path, sizeof path, "%s/empty.txt", g_dir);
    fclose(fopen(path, "wb"));
    e.path = path;
    mg_error_clear(&err);
    CHECK(mg_text_dataset_open(&e, &x, &err) == MG_ERR_INVALID && strstr(err.msg, "empty"), "empty: %s", err.msg);
    snprintf(path, sizeof path, "%s/short.txt", g_dir);
    f = fopen(path, "wb");
    fputs("short text", f);
    fclose(f);
    mg_error_clear(&err);
    e.seq_length = 64;
    /* too short for one window: a dataset without samples (the caller refuses what it needs:
     * mgraph-run --skip-train evaluates without a training split) */
    CHECK(mg_text_dataset_open(&e, &x, &err) == 0 && mg_dataset_num_samples(x, MG_SPLIT_TRAIN) == 0, "short: %s", err.msg);
    mg_dataset_free(x);
    x = NULL;
    e.num_samples[MG_SPLIT_TRAIN] = 1; /* asked for one: refused */
    mg_error_clear(&err);
    CHECK(mg_text_dataset_open(&e, &x, &err) == MG_ERR_INVALID && strstr(err.msg, "seq_length + 1"), "short: %s", err.msg);
    printf("text dataset errors: \"%s\"\n", err.msg);
}

static void shakespeare_gpt2(const char *data) {
    /* The real thing, once: Tiny Shakespeare through GPT-2 in the text dataset. */
    char v[4200], m[4200], p[4200];
    snprintf(v, sizeof v, "%s/gpt2/vocab.json", data);
    snprintf(m, sizeof m, "%s/gpt2/merges.txt", data);
    snprintf(p, sizeof p, "%s/tinyshakespeare.txt", data);
    mg_tokenizer_config tc = {.type = "GPT2BPETokenizer", .vocab_file = v, .merge_file = m};
    mg_tokenizer *tok;
    mg_error err = {0};
    if (mg_tokenizer_open(&tc, &tok, &err)) {
        CHECK(0, "%s", err.msg);
        return;
    }
    mg_text_dataset_config c = {p, tok, NULL, 256, 1, {0, 0, 0}};
    mg_dataset *ds;
    CHECK(mg_text_dataset_open(&c, &ds, &err) == 0, "open: %s", err.msg);
    mg_tokenizer_free(tok); /* borrowed during open only */
    if (err.code) return;
    CHECK(mg_dataset_num_samples(ds, 0) == (304222 - 1) / 256 && mg_dataset_vocab_size(ds) == 50257,
          "shakespeare: %llu train samples", (unsigned long long)mg_dataset_num_samples(ds, 0));
    mg_dataset_free(ds);
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: %s gpt|cache|blend|text DATA_DIR SCRATCH_DIR\n", argv[0]);
        return 2;
    }
    g_dir = argv[3];
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s'", g_dir);
    if (system(cmd) != 0) return 1;
    if (!strcmp(argv[1], "gpt")) {
        gpt_coverage();
        gpt_determinism_and_splits();
    } else if (!strcmp(argv[1], "cache")) {
        gpt_cache();
    } else if (!strcmp(argv[1], "blend")) {
        gpt_blend();
    } else if (!strcmp(argv[1], "text")) {
        text_dataset();
        shakespeare_gpt2(argv[2]);
    } else {
        return 2;
    }
    if (g_failures) fprintf(stderr, "%d failure(s)\n", g_failures);
    return g_failures ? 1 : 0;
}

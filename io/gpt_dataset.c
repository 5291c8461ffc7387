/* Megatron's GPT dataset (core/datasets/gpt_dataset.py + blended_dataset.py).
 *
 * Per (indexed dataset, split):
 *   doc_idx     the split's documents, shuffled independently in every epoch
 *               (Megatron shuffles all epochs as one array; a per-epoch shuffle keeps the
 *               guarantee that every token is seen once per epoch);
 *   sample_idx  (position in doc_idx, offset) where each sample starts, built exactly as
 *               Megatron's helpers.cpp build_sample_idx: a sample is seq_length + 1 tokens
 *               and the next sample starts on its last token;
 *   shuffle_idx a permutation of the samples.
 * Randomness is xoshiro256** from (seed, split), not numpy's MT19937: same seed, same
 * samples on every machine, but not numpy's exact order.
 * The three arrays are cached in --data-cache-path under a name that hashes every
 * input (file sizes and mtimes, split range, seq_length, seed, sample count), so any
 * change of inputs builds (and caches) new indices.
 * A blend picks for sample i the dataset whose achieved share is furthest below its
 * weight (Megatron's build_blending_indices), so every prefix of the blend honours the
 * weights to within one sample per dataset. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "mgraph/infile.h"
#include "io/dataset_internal.h"
#include "io/hashmap.h"
#include "mgraph/outfile.h"

#define CACHE_MAGIC "MGGPTIX2"
#define CACHE_VERSION 2ULL
/* Most entries an index array (documents over all epochs, samples) may hold: 2^34,
 * 128 GiB of sample index. */
#define GPT_MAX_INDEX (1ULL << 34)

typedef struct gpt_part {
    const mg_indexed_dataset *ids;
    int32_t *doc_idx; /* sequence numbers */
    uint64_t n_doc_idx;
    int64_t *sample_idx; /* 2 * (num_samples + 1) */
    int64_t *shuffle_idx;
    uint64_t num_samples;
    int from_cache;
} gpt_part;

typedef struct gpt_member {
    double weight;
    char *prefix;
    mg_indexed_dataset *ids;
    gpt_part part[3];
} gpt_member;

typedef struct gpt_ds {
    int nmem;
    gpt_member *mem;
    int seq_length;
    /* Blend only (nmem > 1): which member and which of its samples, per blended sample. */
    uint64_t blend_n[3];
    uint16_t *blend_ds[3];
    int64_t *blend_sample[3];
    int loaded, built;
} gpt_ds;

static void part_free(gpt_part *p) {
    free(p->doc_idx);
    free(p->sample_idx);
    free(p->shuffle_idx);
    memset(p, 0, sizeof *p);
}

static void gpt_destroy(void *impl) {
    gpt_ds *g = impl;
    for (int m = 0; m < g->nmem; m++) {
        for (int s = 0; s < 3; s++) part_free(&g->mem[m].part[s]);
        mg_indexed_free(g->mem[m].ids);
        free(g->mem[m].prefix);
    }
    for (int s = 0; s < 3; s++) {
        free(g->blend_ds[s]);
        free(g->blend_sample[s]);
    }
    free(g->mem);
    free(g);
}

/* Copies one sample of a member's split (Megatron's GPTDataset._query_document_sample_shuffle_indices). */
static int part_sample(const gpt_part *p, int seq_length, uint64_t idx, int32_t *tokens, mg_error *err) {
    uint64_t s = (uint64_t)p->shuffle_idx[idx];
    int64_t df = p->sample_idx[2 * s], of = p->sample_idx[2 * s + 1];
    int64_t dl = p->sample_idx[2 * s + 2], ol = p->sample_idx[2 * s + 3];
    size_t got = 0, want = (size_t)seq_length + 1;
    for (int64_t d = df; d <= dl; d++) {
        uint64_t seq = (uint64_t)p->doc_idx[d];
        int64_t begin = d == df ? of : 0;
        int64_t end = d == dl ? ol + 1 : mg_indexed_sequence_length(p->ids, seq);
        if (end < begin || got + (size_t)(end - begin) > want)
            return mg_error_set(err, MG_ERR_RUNTIME, "corrupt sample index (sample %llu)", (unsigned long long)s);
        int rc = mg_indexed_read_tokens(p->ids, seq, (uint64_t)begin, (uint64_t)(end - begin), tokens + got, err);
        if (rc) return rc;
        got += (size_t)(end - begin);
    }
    if (got != want)
        return mg_error_set(err, MG_ERR_RUNTIME, "corrupt sample index: sample %llu has %zu tokens, expected %zu",
                            (unsigned long long)s, got, want);
    return MG_OK;
}

static uint64_t gpt_num_samples(const mg_dataset *ds, int split) {
    const gpt_ds *g = ds->impl;
    return g->nmem == 1 ? g->mem[0].part[split].num_samples : g->blend_n[split];
}

static int gpt_sample(const mg_dataset *ds, int split, uint64_t idx, int32_t *tokens, mg_error *err) {
    const gpt_ds *g = ds->impl;
    if (g->nmem == 1) return part_sample(&g->mem[0].part[split], g->seq_length, idx, tokens, err);
    const gpt_part *p = &g->mem[g->blend_ds[split][idx]].part[split];
    /* The greedy blend can ask one sample past a member's count; wrap, as a new epoch would. */
    uint64_t s = (uint64_t)g->blend_sample[split][idx] % p->num_samples;
    return part_sample(p, g->seq_length, s, tokens, err);
}

static const mg_dataset_ops gpt_ops = {gpt_num_samples, gpt_sample, gpt_destroy};

/* ---- index construction ---- */

static int build_part(gpt_part *p, const char *name, uint64_t seq_lo, uint64_t seq_hi, int seq_length, uint64_t seed, int split,
                      uint64_t requested, mg_error *err) {
    uint64_t ndocs = seq_hi - seq_lo, tokens = 0;
    for (uint64_t i = seq_lo; i < seq_hi; i++) tokens += (uint64_t)mg_indexed_sequence_length(p->ids, i);
    if (tokens < 2 || ndocs == 0 || (tokens - 1) / (uint64_t)seq_length == 0) {
        if (requested)
            return mg_error_set(err, MG_ERR_INVALID,
                                "%s: split %d has %llu tokens, too few for one sample of %d + 1 tokens, but %llu samples were requested",
                                name, split, (unsigned long long)tokens, seq_length, (unsigned long long)requested);
        /* An empty split: no samples, but a well-formed (cacheable) sample index. */
        p->sample_idx = calloc(2, sizeof *p->sample_idx);
        return p->sample_idx ? MG_OK : mg_error_set(err, MG_ERR_NOMEM, "out of memory");
    }
    if (ndocs > INT32_MAX || seq_hi > INT32_MAX)
        return mg_error_set(err, MG_ERR_UNSUPPORTED, "more than 2^31 documents in one dataset");
    /* Megatron's _get_num_epochs: the fewest epochs e with (e * tokens - 1) / seq_length
     * >= requested, computed (a loop would spin for an absurd request) in 128 bits, and
     * bounded so that the index arrays stay allocatable. */
    unsigned __int128 need = (unsigned __int128)requested * (unsigned __int128)seq_length + 1;
    unsigned __int128 e128 = requested ? (need + tokens - 1) / tokens : 1;
    if (e128 < 1) e128 = 1;
    if (e128 * ndocs > GPT_MAX_INDEX || (e128 * tokens - 1) / (uint64_t)seq_length > GPT_MAX_INDEX)
        return mg_error_set(err, MG_ERR_INVALID,
                            "%s: %llu samples of %d + 1 tokens need more than %llu index entries over its %llu tokens "
                            "(fewer --train-iters, --eval-iters or --global-batch-size)",
                            name, (unsigned long long)requested, seq_length, (unsigned long long)GPT_MAX_INDEX,
                            (unsigned long long)tokens);
    uint64_t epochs = (uint64_t)e128;
    uint64_t nsamp = (epochs * tokens - 1) / (uint64_t)seq_length;
    p->n_doc_idx = epochs * ndocs;
    p->num_samples = nsamp;
    p->doc_idx = malloc(p->n_doc_idx * sizeof *p->doc_idx);
    p->sample_idx = malloc(2 * (nsamp + 1) * sizeof *p->sample_idx);
    p->shuffle_idx = malloc(nsamp * sizeof *p->shuffle_idx);
    if (!p->doc_idx || !p->sample_idx || !p->shuffle_idx)
        return mg_error_set(err, MG_ERR_NOMEM, "out of memory building indices for %llu samples", (unsigned long long)nsamp);
    mg_prng rng;
    mg_prng_seed(&rng, seed, (uint64_t)split);
    for (uint64_t e = 0; e < epochs; e++) {
        int32_t *d = p->doc_idx + e * ndocs;
        for (uint64_t i = 0; i < ndocs; i++) d[i] = (int32_t)(seq_lo + i);
        for (uint64_t i = ndocs - 1; i > 0; i--) { /* Fisher-Yates */
            uint64_t j = mg_prng_below(&rng, i + 1);
            int32_t t = d[i];
            d[i] = d[j];
            d[j] = t;
        }
    }
    /* helpers.cpp build_sample_idx */
    uint64_t di = 0;
    int64_t doc_offset = 0;
    p->sample_idx[0] = 0;
    p->sample_idx[1] = 0;
    for (uint64_t s = 1; s <= nsamp; s++) {
        int64_t remaining = (int64_t)seq_length + 1;
        while (remaining != 0) {
            int64_t doc_len = mg_indexed_sequence_length(p->ids, (uint64_t)p->doc_idx[di]) - doc_offset;
            remaining -= doc_len;
            if (remaining <= 0) {
                doc_offset += remaining + doc_len - 1;
                remaining = 0;
            } else {
                di++;
                doc_offset = 0;
                if (di >= p->n_doc_idx) return mg_error_set(err, MG_ERR_RUNTIME, "sample index ran past the documents");
            }
        }
        p->sample_idx[2 * s] = (int64_t)di;
        p->sample_idx[2 * s + 1] = doc_offset;
    }
    for (uint64_t i = 0; i < nsamp; i++) p->shuffle_idx[i] = (int64_t)i;
    for (uint64_t i = nsamp - 1; i > 0; i--) {
        uint64_t j = mg_prng_below(&rng, i + 1);
        int64_t t = p->shuffle_idx[i];
        p->shuffle_idx[i] = p->shuffle_idx[j];
        p->shuffle_idx[j] = t;
    }
    return MG_OK;
}

/* ---- cache ---- */

typedef struct cache_key {
    uint64_t hash;
    char path[4096];
} cache_key;

static int make_key(const char *cache_dir, const char *prefix, uint64_t lo, uint64_t hi, int seq_length, uint64_t seed,
                    int split, uint64_t requested, cache_key *k, mg_error *err) {
    char buf[8192], path[4200];
    struct stat si, sb;
    snprintf(path, sizeof path, "%s.idx", prefix);
    char *real = realpath(path, NULL);
    if (stat(path, &si) != 0 || !real) {
        free(real);
        return mg_error_set(err, MG_ERR_IO, "cannot stat %s: %s", path, strerror(errno));
    }
    snprintf(path, sizeof path, "%s.bin", prefix);
    if (stat(path, &sb) != 0) {
        free(real);
        return mg_error_set(err, MG_ERR_IO, "cannot stat %s: %s", path, strerror(errno));
    }
    int n = snprintf(buf, sizeof buf, "v%llu|%s|%lld|%lld.%09ld|%lld|%lld.%09ld|%llu|%llu|%d|%llu|%d|%llu", CACHE_VERSION, real,
                     (long long)si.st_size, (long long)si.st_mtim.tv_sec, si.st_mtim.tv_nsec, (long long)sb.st_size,
                     (long long)sb.st_mtim.tv_sec, sb.st_mtim.tv_nsec, (unsigned long long)lo, (unsigned long long)hi,
                     seq_length, (unsigned long long)seed, split, (unsigned long long)requested);
    free(real);
    k->hash = mg_hash_bytes(buf, (size_t)n, 0x6d67726170680001ULL);
    static const char *names[] = {"train", "valid", "test"};
    snprintf(k->path, sizeof k->path, "%s/mgraph_gpt_%016llx_%s.idxcache", cache_dir, (unsigned long long)k->hash,
             names[split]);
    return MG_OK;
}

/* Layout: magic[8] | u64 version | u64 key hash | u64 n_doc_idx | u64 num_samples | u64 checksum
 *         | i32 doc_idx[n_doc_idx] (+4 bytes padding if odd) | i64 sample_idx[2(n+1)] | i64 shuffle_idx[n]
 * The checksum covers the three arrays: a damaged cache (a flipped bit, zeroed pages,
 * a truncated copy) is rebuilt, never trusted. Then every entry is checked against the
 * dataset as well, so that even a forged file with a valid checksum cannot send a
 * read out of range or repeat samples. */
static uint64_t cache_checksum(const gpt_part *p) {
    uint64_t h = 0x6d67636b73756d31ULL;
    if (p->n_doc_idx) h = mg_hash_bytes(p->doc_idx, p->n_doc_idx * 4, h); /* empty arrays may be NULL */
    h = mg_hash_bytes(p->sample_idx, 16 * (p->num_samples + 1), h);
    if (p->num_samples) h = mg_hash_bytes(p->shuffle_idx, 8 * p->num_samples, h);
    return h;
}

/* The entries describe samples of this dataset: documents in range, sample starts
 * inside their documents and exactly seq_length tokens apart (a sample is seq_length + 1
 * tokens, sharing its last with the next), the shuffle a permutation. */
static int cache_entries_valid(const gpt_part *p, int seq_length) {
    uint64_t nseq = mg_indexed_num_sequences(p->ids), nd = p->n_doc_idx, ns = p->num_samples;
    for (uint64_t i = 0; i < nd; i++)
        if (p->doc_idx[i] < 0 || (uint64_t)p->doc_idx[i] >= nseq) return 0;
    if (ns == 0) return 1;
    /* token position where each doc_idx entry starts */
    int64_t *start = malloc((nd + 1) * sizeof *start);
    if (!start) return 0;
    start[0] = 0;
    for (uint64_t i = 0; i < nd; i++) start[i + 1] = start[i] + mg_indexed_sequence_length(p->ids, (uint64_t)p->doc_idx[i]);
    int ok = 1;
    int64_t prev = 0;
    for (uint64_t i = 0; ok && i <= ns; i++) {
        int64_t d = p->sample_idx[2 * i], o = p->sample_idx[2 * i + 1];
        if (d < 0 || (uint64_t)d >= nd || o < 0) {
            ok = 0;
            break;
        }
        int64_t len = start[d + 1] - start[d];
        if (o >= len && !(o == 0 && i == 0)) ok = 0;
        if (i > 0 && start[d] + o - prev != seq_length) ok = 0;
        prev = start[d] + o;
    }
    free(start);
    if (!ok) return 0;
    unsigned char *seen = calloc(ns, 1);
    if (!seen) return 0;
    for (uint64_t i = 0; ok && i < ns; i++) {
        int64_t v = p->shuffle_idx[i];
        if (v < 0 || (uint64_t)v >= ns || seen[v]) ok = 0;
        else seen[v] = 1;
    }
    free(seen);
    return ok;
}

static void cache_drop(gpt_part *p) {
    const mg_indexed_dataset *ids = p->ids;
    part_free(p);
    p->ids = ids;
}

static int load_cache(gpt_part *p, const cache_key *k, int seq_length) {
    FILE *f = NULL;
    mg_error ignored = {0}; /* (a cache that cannot be read is rebuilt) */
    if (mg_input_fopen(k->path, "dataset cache", &f, &ignored)) return -1;
    char magic[8];
    uint64_t h[5];
    struct stat st;
    int ok = fstat(fileno(f), &st) == 0 && S_ISREG(st.st_mode) && fread(magic, 1, 8, f) == 8 &&
             memcmp(magic, CACHE_MAGIC, 8) == 0 && fread(h, 8, 5, f) == 5 && h[0] == CACHE_VERSION && h[1] == k->hash;
    if (ok) {
        uint64_t nd = h[2], ns = h[3];
        /* bounded by the file size before any arithmetic can overflow */
        ok = nd < (uint64_t)st.st_size && ns < (uint64_t)st.st_size &&
             (uint64_t)st.st_size == 48 + (nd * 4 + 7) / 8 * 8 + 16 * (ns + 1) + 8 * ns;
        if (ok) {
            p->n_doc_idx = nd;
            p->num_samples = ns;
            p->doc_idx = malloc(nd * 4 + 8);
            p->sample_idx = malloc(16 * (ns + 1));
            p->shuffle_idx = malloc(8 * ns + 8);
            int32_t pad;
            ok = p->doc_idx && p->sample_idx && p->shuffle_idx && (nd == 0 || fread(p->doc_idx, 4, nd, f) == nd) &&
                 (nd % 2 == 0 || fread(&pad, 4, 1, f) == 1) && fread(p->sample_idx, 8, 2 * (ns + 1), f) == 2 * (ns + 1) &&
                 (ns == 0 || fread(p->shuffle_idx, 8, ns, f) == ns);
        }
        ok = ok && cache_checksum(p) == h[4] && cache_entries_valid(p, seq_length);
    }
    fclose(f);
    if (!ok) {
        cache_drop(p);
        return -1;
    }
    p->from_cache = 1;
    return 0;
}

/* Written through mg_outfile: an exclusive, unpredictable temporary name in the cache
 * directory (never following a symlink someone planted there), renamed into place, so
 * concurrent ranks building the same cache never see half a file. */
static int save_cache(const gpt_part *p, const cache_key *k, mg_error *err) {
    mg_outfile *o;
    int rc = mg_outfile_open(k->path, "index cache", NULL, &o, err);
    if (rc) return rc;
    FILE *f = mg_outfile_stream(o);
    uint64_t h[5] = {CACHE_VERSION, k->hash, p->n_doc_idx, p->num_samples, cache_checksum(p)};
    int32_t pad = 0;
    uint64_t ns = p->num_samples;
    int ok = fwrite(CACHE_MAGIC, 1, 8, f) == 8 && fwrite(h, 8, 5, f) == 5 &&
             (p->n_doc_idx == 0 || fwrite(p->doc_idx, 4, p->n_doc_idx, f) == p->n_doc_idx) &&
             (p->n_doc_idx % 2 == 0 || fwrite(&pad, 4, 1, f) == 1) &&
             fwrite(p->sample_idx, 8, 2 * (ns + 1), f) == 2 * (ns + 1) && (ns == 0 || fwrite(p->shuffle_idx, 8, ns, f) == ns);
    if (!ok) {
        rc = mg_error_set(err, MG_ERR_IO, "cannot write the index cache %s: %s", k->path, strerror(errno));
        mg_outfile_abort(o);
        return rc;
    }
    return mg_outfile_commit(o, err);
}

/* ---- --data-path parsing ---- */

static int parse_number(const char *s, double *v) {
    char *end;
    *v = strtod(s, &end);
    return end != s && *end == '\0';
}

static int parse_data_path(const char *path, gpt_ds *g, mg_error *err) {
    char *copy = strdup(path ? path : "");
    if (!copy) return mg_error_set(err, MG_ERR_NOMEM, "out of memory");
    char *tok[1024];
    int n = 0;
    for (char *save = NULL, *t = strtok_r(copy, " \t\n", &save); t; t = strtok_r(NULL, " \t\n", &save)) {
        if (n == 1024) {
            free(copy);
            return mg_error_set(err, MG_ERR_UNSUPPORTED, "--data-path holds more than 1024 entries");
        }
        tok[n++] = t;
    }
    int rc = MG_OK;
    double v;
    int weighted = n >= 2 && parse_number(tok[0], &v);
    if (n == 0) {
        rc = mg_error_set(err, MG_ERR_INVALID, "--data-path is empty");
    } else if (weighted && n % 2) {
        rc = mg_error_set(err, MG_ERR_INVALID, "--data-path \"%s\": a blend is pairs of weight and prefix", path);
    } else {
        g->nmem = weighted ? n / 2 : n;
        g->mem = calloc((size_t)g->nmem, sizeof *g->mem);
        if (!g->mem) rc = mg_error_set(err, MG_ERR_NOMEM, "out of memory");
        double sum = 0;
        for (int i = 0; rc == MG_OK && i < g->nmem; i++) {
            const char *pre = weighted ? tok[2 * i + 1] : tok[i];
            double w = 1;
            if (weighted && (!parse_number(tok[2 * i], &w) || !(w >= 0) || !isfinite(w)))
                rc = mg_error_set(err, MG_ERR_INVALID, "--data-path: \"%s\" is not a valid weight", tok[2 * i]);
            g->mem[i].weight = w;
            g->mem[i].prefix = strdup(pre);
            if (!g->mem[i].prefix) rc = mg_error_set(err, MG_ERR_NOMEM, "out of memory");
            sum += w;
        }
        if (rc == MG_OK && !(sum > 0)) rc = mg_error_set(err, MG_ERR_INVALID, "--data-path: the weights sum to zero");
        for (int i = 0; rc == MG_OK && i < g->nmem; i++) g->mem[i].weight /= sum;
    }
    free(copy);
    return rc;
}

/* Every token id of a dataset inside [0, vocab): a dataset tokenized with another
 * tokenizer is refused when opened, naming both, rather than failing (or training on
 * wrong rows) at some later iteration. One pass over the .bin, at memory speed. */
static int check_vocab(const gpt_member *mem, const mg_gpt_dataset_config *cfg, mg_error *err) {
    if (cfg->vocab_size <= 0) return MG_OK;
    /* an unsigned dtype whose every value is inside the vocabulary needs no pass */
    int dt = mg_indexed_dtype(mem->ids);
    if ((dt == MG_IDX_U8 && cfg->vocab_size > UINT8_MAX) || (dt == MG_IDX_U16 && cfg->vocab_size > UINT16_MAX)) return MG_OK;
    int32_t buf[4096];
    uint64_t nseq = mg_indexed_num_sequences(mem->ids);
    for (uint64_t q = 0; q < nseq; q++) {
        uint64_t len = (uint64_t)mg_indexed_sequence_length(mem->ids, q);
        for (uint64_t off = 0; off < len; off += 4096) {
            uint64_t n = len - off < 4096 ? len - off : 4096;
            int rc = mg_indexed_read_tokens(mem->ids, q, off, n, buf, err);
            if (rc) return rc;
            for (uint64_t i = 0; i < n; i++)
                if (buf[i] < 0 || buf[i] >= cfg->vocab_size)
                    return mg_error_set(err, MG_ERR_INVALID,
                                        "dataset %s holds token id %d (sequence %llu, token %llu), outside the vocabulary "
                                        "of %s [0, %lld): was it tokenized with another tokenizer?",
                                        mem->prefix, buf[i], (unsigned long long)q, (unsigned long long)(off + i),
                                        cfg->tokenizer ? cfg->tokenizer : "the tokenizer", (long long)cfg->vocab_size);
        }
    }
    return MG_OK;
}

/* helpers.cpp build_blending_indices */
static int build_blend(gpt_ds *g, int split, uint64_t size, mg_error *err) {
    g->blend_n[split] = size;
    if (!size) return MG_OK;
    g->blend_ds[split] = malloc(size * sizeof *g->blend_ds[split]);
    g->blend_sample[split] = malloc(size * sizeof *g->blend_sample[split]);
    int64_t *cur = calloc((size_t)g->nmem, sizeof *cur);
    if (!g->blend_ds[split] || !g->blend_sample[split] || !cur) {
        free(cur);
        return mg_error_set(err, MG_ERR_NOMEM, "out of memory building a blend of %llu samples", (unsigned long long)size);
    }
    for (uint64_t i = 0; i < size; i++) {
        double x = i > 1 ? (double)i : 1.0;
        int best = -1;
        double best_err = 0;
        for (int m = 0; m < g->nmem; m++) {
            if (g->mem[m].part[split].num_samples == 0) continue; /* nothing to give in this split */
            double e = g->mem[m].weight * x - (double)cur[m];
            if (best < 0 || e > best_err) {
                best_err = e;
                best = m;
            }
        }
        g->blend_ds[split][i] = (uint16_t)best;
        g->blend_sample[split][i] = cur[best]++;
    }
    free(cur);
    return MG_OK;
}

int mg_gpt_dataset_open(const mg_gpt_dataset_config *cfg, mg_dataset **out, mg_error *err) {
    *out = NULL;
    if (cfg->seq_length <= 0) return mg_error_set(err, MG_ERR_INVALID, "--seq-length must be positive (got %d)", cfg->seq_length);
    double frac[3] = {0, 0, 0};
    if (cfg->whole && (cfg->split_index < MG_SPLIT_TRAIN || cfg->split_index > MG_SPLIT_TEST))
        return mg_error_set(err, MG_ERR_INVALID, "split %d is not train (0), valid (1) or test (2)", cfg->split_index);
    int rc = cfg->whole ? MG_OK : mg_parse_split(cfg->split ? cfg->split : "969,30,1", frac, err);
    if (rc) return rc;
    if (cfg->whole) frac[cfg->split_index] = 1.0; /* the whole of every dataset */
    gpt_ds *g = calloc(1, sizeof *g);
    mg_dataset *ds = calloc(1, sizeof *ds);
    if (!g || !ds) {
        free(g);
        free(ds);
        return mg_error_set(err, MG_ERR_NOMEM, "out of memory");
    }
    ds->ops = &gpt_ops;
    ds->impl = g;
    ds->kind = MG_DATASET_GPT;
    ds->seq_length = g->seq_length = cfg->seq_length;
    ds->vocab = cfg->vocab_size;
    if ((rc = parse_data_path(cfg->data_path, g, err))) goto fail;
    if (g->nmem > 65535) {
        rc = mg_error_set(err, MG_ERR_UNSUPPORTED, "a blend of more than 65535 datasets");
        goto fail;
    }
    if (cfg->cache_path) {
        struct stat st;
        if (stat(cfg->cache_path, &st) != 0 && mkdir(cfg->cache_path, 0777) != 0 && errno != EEXIST) {
            rc = mg_error_set(err, MG_ERR_IO, "cannot create --data-cache-path %s: %s", cfg->cache_path, strerror(errno));
            goto fail;
        }
    }
    int blend = g->nmem > 1;
    for (int m = 0; m < g->nmem; m++) {
        gpt_member *mem = &g->mem[m];
        if ((rc = mg_indexed_open(mem->prefix, &mem->ids, err))) goto fail;
        if ((rc = check_vocab(mem, cfg, err))) goto fail;
        /* Megatron's GPTDataset splits by sequence (numel_low_level_dataset is the number
         * of sequences, not of documents): with --split-sentences data a document's
         * sentences may fall on both sides of a boundary, as they do in Megatron. */
        uint64_t b[4];
        mg_split_bounds(frac, mg_indexed_num_sequences(mem->ids), b);
        for (int s = 0; s < 3; s++) {
            gpt_part *p = &mem->part[s];
            p->ids = mem->ids;
            /* Megatron asks each blended dataset for its share plus 0.5% surplus; the
             * count decides the dataset's epochs and so its sample order */
            uint64_t req = cfg->whole && s != cfg->split_index ? 0 : cfg->num_samples[s];
            if (blend && req) req = mg_blend_request(mem->weight, req);
            if (blend && mem->weight == 0) req = 0;
            uint64_t lo = b[s], hi = b[s + 1];
            cache_key k;
            if (cfg->cache_path) {
                if ((rc = make_key(cfg->cache_path, mem->prefix, lo, hi, cfg->seq_length, cfg->seed, s, req, &k, err)))
                    goto fail;
                if (load_cache(p, &k, cfg->seq_length) == 0) {
                    g->loaded++;
                    continue;
                }
            }
            if ((rc = build_part(p, mem->prefix, lo, hi, cfg->seq_length, cfg->seed, s, req, err))) goto fail;
            g->built++;
            if (cfg->cache_path && (rc = save_cache(p, &k, err))) goto fail;
        }
    }
    if (blend) {
        for (int s = 0; s < 3; s++) {
            uint64_t size = cfg->num_samples[s];
            if (!size) { /* as many as the blend gives without repeating any dataset */
                int first = 1;
                for (int m = 0; m < g->nmem; m++) {
                    if (g->mem[m].weight <= 0) continue;
                    uint64_t cap = (uint64_t)floor((double)g->mem[m].part[s].num_samples / g->mem[m].weight);
                    if (first || cap < size) size = cap;
                    first = 0;
                }
            }
            if ((rc = build_blend(g, s, size, err))) goto fail;
        }
    }
    *out = ds;
    return MG_OK;
fail:
    mg_dataset_free(ds);
    return rc;
}

int mg_gpt_dataset_cache_stats(const mg_dataset *ds, int *loaded, int *built) {
    if (ds->kind != MG_DATASET_GPT) return MG_ERR_INVALID;
    const gpt_ds *g = ds->impl;
    *loaded = g->loaded;
    *built = g->built;
    return MG_OK;
}

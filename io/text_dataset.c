/* Raw text dataset for quick runs: one text file, tokenized in memory at open.
 *
 * The token stream is cut into contiguous train / valid / test ranges by --split
 * (default 90,10,0: the last 10% validates). A split of L tokens holds
 * W = (L - 1) / seq_length windows of seq_length + 1 tokens that share their
 * boundary token, like the GPT dataset's samples. Sample i of epoch e = i / W is
 * window permute(i mod W) under a key from (seed, split, e): a counter-based shuffle,
 * so no permutation is stored and every window is visited once per epoch. Epochs
 * after the first shift all windows by a seeded offset below seq_length so that the
 * tail the first epoch drops is seen later. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "mgraph/infile.h"
#include "io/dataset_internal.h"
#include "io/hashmap.h"

typedef struct text_ds {
    int32_t *tokens;
    uint64_t ntok;
    uint64_t start[3], len[3], windows[3], epochs[3];
    uint64_t seed;
    int seq;
} text_ds;

static void text_destroy(void *impl) {
    text_ds *t = impl;
    free(t->tokens);
    free(t);
}

static uint64_t text_num_samples(const mg_dataset *ds, int split) {
    const text_ds *t = ds->impl;
    return t->windows[split] * t->epochs[split];
}

static int text_sample(const mg_dataset *ds, int split, uint64_t idx, int32_t *tokens, mg_error *err) {
    (void)err;
    const text_ds *t = ds->impl;
    uint64_t w = t->windows[split], e = idx / w;
    uint64_t key = mg_mix64(t->seed ^ mg_mix64(((uint64_t)split << 48) ^ e));
    uint64_t win = mg_permute_index(idx % w, w, key);
    uint64_t slack = t->len[split] - 1 - w * (uint64_t)t->seq; /* < seq */
    uint64_t shift = e == 0 ? 0 : mg_mix64(key ^ 0x5bd1e995ULL) % (slack + 1);
    uint64_t pos = t->start[split] + shift + win * (uint64_t)t->seq;
    memcpy(tokens, t->tokens + pos, ((size_t)t->seq + 1) * sizeof *tokens);
    return MG_OK;
}

static const mg_dataset_ops text_ops = {text_num_samples, text_sample, text_destroy};

/* The text is tokenized in memory (4 bytes per token): larger corpora go through
 * mgraph-preprocess and --data-path. */
#define TEXT_MAX_BYTES (1ULL << 30)

static int read_whole(const char *path, char **buf, size_t *len, mg_error *err) {
    FILE *f = NULL;
    int orc = mg_input_fopen(path, "text dataset", &f, err);
    if (orc) return orc;
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode) || (uint64_t)st.st_size > TEXT_MAX_BYTES) {
        int dir = S_ISDIR(st.st_mode), reg = S_ISREG(st.st_mode);
        fclose(f);
        if (dir) return mg_error_set(err, MG_ERR_IO, "text dataset %s is a directory, not a file", path);
        if (!reg) return mg_error_set(err, MG_ERR_IO, "text dataset %s is not a regular file", path);
        return mg_error_set(err, MG_ERR_IO,
                            "text dataset %s has %lld bytes, more than the %llu that --text-file tokenizes in memory "
                            "(use mgraph-preprocess and --data-path)",
                            path, (long long)st.st_size, TEXT_MAX_BYTES);
    }
    size_t cap = 1 << 20, n = 0;
    char *b = malloc(cap);
    while (b) {
        size_t r = fread(b + n, 1, cap - n, f);
        n += r;
        if (n < cap || n >= TEXT_MAX_BYTES) break; /* the file grew while read: stop at the bound */
        char *nb = realloc(b, cap * 2);
        if (!nb) {
            free(b);
            b = NULL;
            break;
        }
        b = nb;
        cap *= 2;
    }
    int bad = ferror(f);
    fclose(f);
    if (!b) return mg_error_set(err, MG_ERR_NOMEM, "out of memory reading %s", path);
    if (bad) {
        free(b);
        return mg_error_set(err, MG_ERR_IO, "error reading text dataset %s: %s", path, strerror(errno));
    }
    *buf = b;
    *len = n;
    return MG_OK;
}

int mg_text_dataset_open(const mg_text_dataset_config *cfg, mg_dataset **out, mg_error *err) {
    *out = NULL;
    if (!cfg->path) return mg_error_set(err, MG_ERR_INVALID, "text dataset: no file given");
    if (cfg->seq_length <= 0)
        return mg_error_set(err, MG_ERR_INVALID, "--seq-length must be positive (got %d)", cfg->seq_length);
    double frac[3];
    int rc = mg_parse_split(cfg->split ? cfg->split : "90,10,0", frac, err);
    if (rc) return rc;
    char *text = NULL;
    size_t len = 0;
    if ((rc = read_whole(cfg->path, &text, &len, err))) return rc;
    if (len == 0) {
        free(text);
        return mg_error_set(err, MG_ERR_INVALID, "text dataset %s is empty", cfg->path);
    }
    mg_tokenizer *own = NULL, *tok = cfg->tokenizer;
    if (!tok) {
        mg_tokenizer_config tc = {.type = "ByteLevelTokenizer"};
        if ((rc = mg_tokenizer_open(&tc, &own, err))) {
            free(text);
            return rc;
        }
        tok = own;
    }
    text_ds *t = calloc(1, sizeof *t);
    mg_dataset *ds = calloc(1, sizeof *ds);
    mg_ids ids = {0};
    if (!t || !ds) {
        rc = mg_error_set(err, MG_ERR_NOMEM, "out of memory");
        goto fail;
    }
    ds->ops = &text_ops;
    ds->impl = t;
    ds->kind = MG_DATASET_TEXT;
    ds->seq_length = t->seq = cfg->seq_length;
    ds->vocab = mg_tokenizer_vocab_size(tok);
    t->seed = cfg->seed;
    if ((rc = mg_tokenizer_encode_append(tok, text, len, &ids, err))) goto fail;
    t->tokens = ids.data;
    t->ntok = ids.len;
    ids.data = NULL;
    uint64_t b[4];
    mg_split_bounds(frac, t->ntok, b);
    for (int s = 0; s < 3; s++) {
        t->start[s] = b[s];
        t->len[s] = b[s + 1] - b[s];
        t->windows[s] = t->len[s] > 1 ? (t->len[s] - 1) / (uint64_t)t->seq : 0;
        uint64_t req = cfg->num_samples[s];
        t->epochs[s] = t->windows[s] == 0 ? 0 : req ? (req + t->windows[s] - 1) / t->windows[s] : 1;
        if (req && t->windows[s] == 0) {
            rc = mg_error_set(err, MG_ERR_INVALID,
                              "text dataset %s: split %d has %llu tokens, fewer than seq_length + 1 = %d, but %llu samples were requested",
                              cfg->path, s, (unsigned long long)t->len[s], t->seq + 1, (unsigned long long)req);
            goto fail;
        }
    }
    /* (a split without a window is the caller's to refuse: evaluation alone needs no
     * training split, mgraph-run --skip-train --split 0,100,0) */
    free(text);
    mg_tokenizer_free(own);
    *out = ds;
    return MG_OK;
fail:
    free(text);
    mg_ids_free(&ids);
    mg_tokenizer_free(own);
    if (ds) mg_dataset_free(ds);
    else free(t);
    return rc;
}

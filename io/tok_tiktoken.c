/* TikTokenizer: Megatron's TikTokenTokenizer (megatron/core/tokenizers/text/libraries/
 * tiktoken_tokenizer.py) on tiktoken's byte-pair encoding, in C.
 *
 * The vocabulary file is Megatron's JSON list of {"rank", "token_bytes" (base64),
 * "token_str"}, rank i at position i, the first 256 the single bytes. Ids: the special
 * tokens first (Megatron's seven, <unk> <s> </s> <mask> <pad> <cls> <sep>, or
 * --tokenizer-special-tokens, then <SPECIAL_i> up to --tiktoken-num-special-tokens,
 * default 1000), then rank + num_special_tokens for the first vocab_size -
 * num_special_tokens ranks (--vocab-size, default 131072); end of document is </s>, BOS
 * <s> (their places among the special tokens). Text is cut at special tokens written in it (encode(..., allowed_special="all");
 * where two could start at one place mgraph takes the longer, tiktoken the first of an
 * unordered map), the rest split by the pattern (--tiktoken-pattern v1 or v2, default v2)
 * and each piece is its rank or tiktoken's byte-pair merge: the adjacent pair whose
 * bytes have the lowest rank joins first, the leftmost on ties (kept in a heap: the same
 * order as tiktoken's scan, in O(n log n)). Decoding joins the bytes and replaces
 * ill-formed UTF-8 as Python's decode('utf-8', 'replace'). */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "mgraph/infile.h"
#include "io/hashmap.h"
#include "io/tok_internal.h"

static const char PATTERN_V1[] =
    "[^\\r\\n\\p{L}\\p{N}]?+\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]++[\\r\\n]*|\\s*[\\r\\n]|\\s+(?!\\S)|\\s+";
static const char PATTERN_V2[] =
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+|[^\\r\\n\\p{L}\\p{N}]?"
    "[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|"
    "\\s+(?!\\S)|\\s+";
static const char *const DEFAULT_SPECIALS[] = {"<unk>", "<s>", "</s>", "<mask>", "<pad>", "<cls>", "<sep>"};
#define NDEFAULT 7
#define DEFAULT_VOCAB (1 << 17)

typedef struct tik {
    mg_strmap ranks;  /* token bytes -> id (rank + num_special) */
    char **tok;       /* [vocab] each id's bytes (special tokens: their text) */
    size_t *tok_len;
    size_t ntok;
    char **special;   /* [nspecial] */
    size_t nspecial;
    size_t *by_len;   /* special token indices, longest first */
    unsigned char starts[256]; /* bytes a special token starts with */
    void *re, *md;
    /* scratch */
    int64_t *prev, *next;
    uint32_t *ver;
    size_t cap;
    struct cand *heap;
    size_t hn, hcap;
} tik;

typedef struct cand {
    uint32_t rank, start, vl, vr;
    uint32_t left, right; /* part indices */
} cand;

static int nomem(mg_error *err) { return mg_error_set(err, MG_ERR_NOMEM, "out of memory in TikTokenizer"); }

static int cand_less(const cand *a, const cand *b) { return a->rank != b->rank ? a->rank < b->rank : a->start < b->start; }

static int heap_push(tik *k, cand c) {
    if (k->hn == k->hcap) {
        size_t nc = k->hcap ? 2 * k->hcap : 256;
        cand *nh = realloc(k->heap, nc * sizeof *nh);
        if (!nh) return -1;
        k->heap = nh;
        k->hcap = nc;
    }
    size_t i = k->hn++;
    while (i > 0 && cand_less(&c, &k->heap[(i - 1) / 2])) {
        k->heap[i] = k->heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    k->heap[i] = c;
    return 0;
}

static cand heap_pop(tik *k) {
    cand top = k->heap[0], last = k->heap[--k->hn];
    size_t i = 0;
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        const cand *best = &last;
        if (l < k->hn && cand_less(&k->heap[l], best)) m = l, best = &k->heap[l];
        if (r < k->hn && cand_less(&k->heap[r], best)) m = r;
        if (m == i) break;
        k->heap[i] = k->heap[m];
        i = m;
    }
    if (k->hn) k->heap[i] = last;
    return top;
}

static int rank_of(const tik *k, const char *s, size_t n, uint32_t *id) {
    uint64_t v;
    if (!mg_strmap_get(&k->ranks, s, n, &v)) return 0;
    *id = (uint32_t)v;
    return 1;
}

/* The candidate joining part a and the part after it (starts: a's byte offset). */
static int push_cand(tik *k, const char *p, size_t n, uint32_t a) {
    int64_t b = k->next[a];
    if (b < 0) return 0;
    size_t end = k->next[b] >= 0 ? (size_t)k->next[b] : n;
    uint32_t r;
    if (!rank_of(k, p + a, end - a, &r)) return 0;
    cand c = {r, a, k->ver[a], k->ver[b], a, (uint32_t)b};
    return heap_push(k, c);
}

/* byte_pair_encode: parts are byte offsets (linked by prev/next, indexed by offset). */
static int byte_pair_encode(tik *k, const char *p, size_t n, mg_ids *out, mg_error *err) {
    if (n > k->cap) {
        size_t nc = k->cap ? k->cap : 64;
        while (nc < n) nc *= 2;
        int64_t *pv = realloc(k->prev, nc * sizeof *pv);
        if (pv) k->prev = pv;
        int64_t *nx = realloc(k->next, nc * sizeof *nx);
        if (nx) k->next = nx;
        uint32_t *vr = realloc(k->ver, nc * sizeof *vr);
        if (vr) k->ver = vr;
        if (!pv || !nx || !vr) return nomem(err);
        k->cap = nc;
    }
    for (size_t i = 0; i < n; i++) {
        k->prev[i] = (int64_t)i - 1;
        k->next[i] = i + 1 < n ? (int64_t)i + 1 : -1;
        k->ver[i] = 0;
    }
    k->hn = 0;
    for (size_t i = 0; i + 1 < n; i++)
        if (push_cand(k, p, n, (uint32_t)i)) return nomem(err);
    while (k->hn) {
        cand c = heap_pop(k);
        if (k->ver[c.left] != c.vl || k->next[c.left] != (int64_t)c.right || k->ver[c.right] != c.vr) continue;
        /* join: the right part leaves */
        int64_t after = k->next[c.right];
        k->next[c.left] = after;
        if (after >= 0) k->prev[after] = c.left;
        k->ver[c.left]++;
        k->ver[c.right]++;
        if (k->prev[c.left] >= 0 && push_cand(k, p, n, (uint32_t)k->prev[c.left])) return nomem(err);
        if (push_cand(k, p, n, c.left)) return nomem(err);
    }
    for (int64_t i = 0; i >= 0; i = k->next[i]) {
        size_t end = k->next[i] >= 0 ? (size_t)k->next[i] : n;
        uint32_t id;
        if (!rank_of(k, p + i, end - (size_t)i, &id))
            return mg_error_set(err, MG_ERR_INVALID, "TikTokenizer: a byte has no rank (the vocabulary lacks it)");
        int rc = mg_ids_push(out, (int32_t)id, err);
        if (rc) return rc;
    }
    return MG_OK;
}

static int encode_ordinary(tik *k, const char *s, size_t n, mg_ids *out, mg_error *err) {
    size_t pos = 0;
    while (pos < n) {
        size_t ms, me;
        int f = mg_regex_find(k->re, k->md, s, n, pos, &ms, &me, err);
        if (f < 0) return MG_ERR_RUNTIME;
        if (f == 0) break;
        if (me == ms) { /* the patterns never match empty; move on if one does */
            size_t l;
            mg_utf8_next(s + me, n - me, &l);
            pos = me + l;
            continue;
        }
        uint32_t id;
        int rc = rank_of(k, s + ms, me - ms, &id) ? mg_ids_push(out, (int32_t)id, err)
                                                 : byte_pair_encode(k, s + ms, me - ms, out, err);
        if (rc) return rc;
        pos = me;
    }
    return MG_OK;
}

static int tik_encode(mg_tokenizer *t, const char *text, size_t len, mg_ids *out, mg_error *err) {
    tik *k = t->impl;
    size_t bad = mg_utf8_check(text, len);
    if (bad < len)
        return mg_error_set(err, MG_ERR_INVALID, "TikTokenizer: the text is not valid UTF-8 (byte %zu of %zu)", bad, len);
    size_t start = out->len, pos = 0;
    int rc = MG_OK;
    while (!rc) {
        /* the next special token (leftmost, longest) */
        size_t at = len, which = 0;
        for (size_t i = pos; i < len && at == len; i++) {
            if (!k->starts[(unsigned char)text[i]]) continue;
            for (size_t s = 0; s < k->nspecial; s++) {
                size_t idx = k->by_len[s], l = k->tok_len[idx];
                if (l <= len - i && !memcmp(text + i, k->special[idx], l)) {
                    at = i;
                    which = idx;
                    break;
                }
            }
        }
        rc = encode_ordinary(k, text + pos, at - pos, out, err);
        if (rc || at == len) break;
        rc = mg_ids_push(out, (int32_t)which, err);
        pos = at + k->tok_len[which];
    }
    if (rc) out->len = start;
    return rc;
}

static int tik_decode(const mg_tokenizer *t, const int32_t *ids, size_t n, char **text, size_t *len, mg_error *err) {
    const tik *k = t->impl;
    mg_buf raw = {0}, out = {0};
    int rc = MG_OK;
    for (size_t i = 0; i < n && !rc; i++)
        if ((size_t)ids[i] < k->ntok && mg_buf_append(&raw, k->tok[ids[i]], k->tok_len[ids[i]])) rc = nomem(err);
    if (!rc && mg_utf8_lossy(&out, raw.data ? raw.data : "", raw.len)) rc = nomem(err);
    free(raw.data);
    if (rc) {
        free(out.data);
        return rc;
    }
    *text = out.data;
    *len = out.len;
    return MG_OK;
}

static void tik_destroy(void *impl) {
    tik *k = impl;
    if (!k) return;
    mg_strmap_free(&k->ranks);
    for (size_t i = 0; k->tok && i < k->ntok; i++) free(k->tok[i]);
    free(k->tok);
    free(k->tok_len);
    free(k->special); /* its strings are k->tok's */
    free(k->by_len);
    mg_regex_match_data_free(k->md);
    mg_regex_free(k->re);
    free(k->prev);
    free(k->next);
    free(k->ver);
    free(k->heap);
    free(k);
}

static const mg_tok_ops tik_ops = {tik_encode, tik_decode, tik_destroy};

static int b64_val(char c) {
    return c >= 'A' && c <= 'Z' ? c - 'A' : c >= 'a' && c <= 'z' ? c - 'a' + 26 : c >= '0' && c <= '9' ? c - '0' + 52
           : c == '+'                                                                         ? 62
           : c == '/'                                                                         ? 63
                                                                                              : -1;
}

/* Standard base64 with padding; returns the length or -1. */
static long b64_decode(const char *s, char *out) {
    size_t n = strlen(s);
    if (n % 4) return -1;
    long o = 0;
    for (size_t i = 0; i < n; i += 4) {
        int v[4], pad = 0;
        for (int j = 0; j < 4; j++) {
            if (s[i + j] == '=' && i + 4 == n && j >= 2) {
                v[j] = 0;
                pad++;
            } else if (pad || (v[j] = b64_val(s[i + j])) < 0) {
                return -1;
            }
        }
        uint32_t x = (uint32_t)v[0] << 18 | (uint32_t)v[1] << 12 | (uint32_t)v[2] << 6 | (uint32_t)v[3];
        out[o++] = (char)(x >> 16);
        if (pad < 2) out[o++] = (char)(x >> 8);
        if (pad < 1) out[o++] = (char)x;
    }
    return o;
}

int mg_tok_tiktoken_init(mg_tokenizer *t, mg_error *err) {
    const mg_tokenizer_config *c = &t->cfg;
    const char *path = t->model_file;
    tik *k = calloc(1, sizeof *k);
    if (!k) return nomem(err);
    t->ops = &tik_ops;
    t->impl = k;
    int64_t vocab = c->vocab_size ? c->vocab_size : DEFAULT_VOCAB;
    int64_t nspec = c->tiktoken_num_special_tokens ? c->tiktoken_num_special_tokens : 1000;
    const char *pat = c->tiktoken_pattern ? c->tiktoken_pattern : "v2";
    if (strcmp(pat, "v1") && strcmp(pat, "v2"))
        return mg_error_set(err, MG_ERR_INVALID, "--tiktoken-pattern must be v1 or v2, not \"%s\"", pat);
    /* Megatron's special tokens: unique, containing its seven, no more than num_special_tokens */
    const char *const *given = c->special_tokens ? c->special_tokens : DEFAULT_SPECIALS;
    size_t ngiven = 0;
    if (c->special_tokens)
        while (given[ngiven]) ngiven++;
    else
        ngiven = NDEFAULT;
    for (size_t i = 0; i < ngiven; i++)
        if (!given[i][0]) return mg_error_set(err, MG_ERR_INVALID, "TikTokenizer: a special token is empty");
    for (size_t i = 0; i < ngiven; i++)
        for (size_t j = 0; j < i; j++)
            if (!strcmp(given[i], given[j]))
                return mg_error_set(err, MG_ERR_INVALID, "TikTokenizer: the special token \"%s\" is given twice", given[i]);
    for (int d = 0; d < NDEFAULT; d++) {
        int found = 0;
        for (size_t i = 0; i < ngiven; i++) found |= !strcmp(given[i], DEFAULT_SPECIALS[d]);
        if (!found)
            return mg_error_set(err, MG_ERR_INVALID, "TikTokenizer: --tokenizer-special-tokens must include Megatron's "
                                                     "<unk> <s> </s> <mask> <pad> <cls> <sep> (\"%s\" is missing)",
                                DEFAULT_SPECIALS[d]);
    }
    if (!((int64_t)ngiven <= nspec && nspec < vocab))
        return mg_error_set(err, MG_ERR_INVALID,
                            "TikTokenizer: want %zu special tokens <= --tiktoken-num-special-tokens %lld < --vocab-size "
                            "%lld",
                            ngiven, (long long)nspec, (long long)vocab);
    if (vocab > INT32_MAX) return mg_error_set(err, MG_ERR_INVALID, "TikTokenizer: --vocab-size %lld is too large", (long long)vocab);
    k->ntok = (size_t)vocab;
    k->nspecial = (size_t)nspec;
    k->tok = calloc(k->ntok, sizeof *k->tok);
    k->tok_len = calloc(k->ntok, sizeof *k->tok_len);
    k->special = calloc(k->nspecial, sizeof *k->special);
    k->by_len = calloc(k->nspecial, sizeof *k->by_len);
    if (!k->tok || !k->tok_len || !k->special || !k->by_len) return nomem(err);
    for (size_t i = 0; i < k->nspecial; i++) {
        char filler[40];
        const char *s = i < ngiven ? given[i] : filler;
        if (i >= ngiven) snprintf(filler, sizeof filler, "<SPECIAL_%zu>", i);
        if (!(k->tok[i] = strdup(s))) return nomem(err);
        k->tok_len[i] = strlen(s);
        k->special[i] = k->tok[i];
        k->by_len[i] = i;
    }
    for (size_t i = ngiven; i < k->nspecial; i++) /* a filler equal to a given token */
        for (size_t j = 0; j < ngiven; j++)
            if (!strcmp(k->special[i], k->special[j]))
                return mg_error_set(err, MG_ERR_INVALID, "TikTokenizer: the special token \"%s\" is given twice",
                                    k->special[i]);
    for (size_t i = 1; i < k->nspecial; i++) { /* longest first, stable */
        size_t x = k->by_len[i], j = i;
        while (j > 0 && k->tok_len[k->by_len[j - 1]] < k->tok_len[x]) {
            k->by_len[j] = k->by_len[j - 1];
            j--;
        }
        k->by_len[j] = x;
    }
    for (size_t i = 0; i < k->nspecial; i++)
        if (k->tok_len[i]) k->starts[(unsigned char)k->special[i][0]] = 1;
    for (size_t i = 0; i < ngiven; i++) { /* Megatron: special_tokens.index("<s>"), index("</s>") */
        if (!strcmp(given[i], "<s>")) t->bos = (int32_t)i;
        if (!strcmp(given[i], "</s>")) t->eod = (int32_t)i;
    }
    t->vocab = vocab;

    size_t plen = strlen(path);
    if (plen < 5 || strcmp(path + plen - 5, ".json"))
        return mg_error_set(err, MG_ERR_INVALID, "TikTokenizer: %s is not a .json vocabulary (Megatron reads a JSON list "
                                                 "of {rank, token_bytes, token_str})",
                            path);
    json_error_t jerr;
    FILE *vf = NULL;
    int orc = mg_input_fopen(path, "--tokenizer-model", &vf, err);
    if (orc) return orc;
    json_t *root = json_loadf(vf, JSON_ALLOW_NUL, &jerr); /* token_str holds any byte */
    fclose(vf);
    if (!root)
        return mg_error_set(err, MG_ERR_INVALID, "cannot read %s: %s (line %d, column %d)", path, jerr.text, jerr.line,
                            jerr.column);
    int rc = MG_OK;
    size_t inner = (size_t)(vocab - nspec), n = json_is_array(root) ? json_array_size(root) : 0;
    if (!json_is_array(root)) rc = mg_error_set(err, MG_ERR_INVALID, "%s is not a JSON list", path);
    else if (n < inner)
        rc = mg_error_set(err, MG_ERR_INVALID,
                          "%s holds %zu ranks, fewer than --vocab-size %lld - --tiktoken-num-special-tokens %lld = %zu "
                          "(Megatron requires every id below the vocabulary size)",
                          path, n, (long long)vocab, (long long)nspec, inner);
    if (!rc && mg_strmap_init(&k->ranks, inner)) rc = nomem(err);
    for (size_t i = 0; i < inner && !rc; i++) {
        json_t *e = json_array_get(root, i), *r = json_object_get(e, "rank");
        const char *b64 = json_string_value(json_object_get(e, "token_bytes"));
        if (!json_is_object(e) || json_object_size(e) != 3 || !json_is_string(json_object_get(e, "token_str")) || !b64 ||
            !json_is_integer(r)) {
            rc = mg_error_set(err, MG_ERR_INVALID, "%s: entry %zu is not {rank, token_bytes, token_str}", path, i);
            break;
        }
        if (json_integer_value(r) != (json_int_t)i) {
            rc = mg_error_set(err, MG_ERR_INVALID, "%s: entry %zu has rank %lld (ranks must be 0, 1, 2, ...)", path, i,
                              (long long)json_integer_value(r));
            break;
        }
        char *bytes = malloc(strlen(b64) + 3);
        long bl = bytes ? b64_decode(b64, bytes) : -2;
        if (bl == -2) rc = nomem(err);
        else if (bl <= 0) rc = mg_error_set(err, MG_ERR_INVALID, "%s: entry %zu: token_bytes is not base64 of a token", path, i);
        else if (i < 256 && (bl != 1 || (unsigned char)bytes[0] != i))
            rc = mg_error_set(err, MG_ERR_INVALID, "%s: entry %zu must be the single byte 0x%02zx", path, i, i);
        uint64_t old;
        if (!rc && mg_strmap_get(&k->ranks, bytes, (size_t)bl, &old))
            rc = mg_error_set(err, MG_ERR_INVALID, "%s: entries %llu and %zu hold the same bytes", path,
                              (unsigned long long)old - (unsigned long long)nspec, i);
        if (!rc && mg_strmap_put(&k->ranks, bytes, (size_t)bl, (uint64_t)(i + (size_t)nspec))) rc = nomem(err);
        if (!rc) {
            k->tok[i + (size_t)nspec] = bytes;
            k->tok_len[i + (size_t)nspec] = (size_t)bl;
        } else {
            free(bytes);
        }
    }
    json_decref(root);
    if (rc) return rc;
    const char *p = !strcmp(pat, "v1") ? PATTERN_V1 : PATTERN_V2;
    k->re = mg_regex_compile(p, strlen(p), 0, "TikTokenizer's pattern", err);
    if (!k->re) return err->code;
    if (!(k->md = mg_regex_match_data(k->re))) return nomem(err);
    return MG_OK;
}

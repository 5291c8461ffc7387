/* GPT-2 byte-level BPE (Megatron's GPT2BPETokenizer; OpenAI's encoder.json + vocab.bpe).
 *
 * Everything is kept in raw-byte space: vocab keys and merges are mapped back through
 * the inverse of GPT-2's byte->unicode table once at load time, so encoding never
 * builds the printable-unicode strings. A merge is a pair of token ids -> (rank, id),
 * and a word cache (pre-token bytes -> ids) skips BPE for words seen before, which in
 * natural text is almost all of them. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <jansson.h>
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mgraph/infile.h"
#include "io/hashmap.h"
#include "io/tok_internal.h"

/* OpenAI's pre-tokenisation pattern; \p classes need PCRE2_UCP.
 * '\s' is spelled [\s\x{85}]: under UCP PCRE2's \s is "Z or HT/LF/VT/FF/CR", which lacks
 * U+0085 (NEL), a Unicode White_Space character that OpenAI's regex engines count as
 * whitespace. */
static const char GPT2_PATTERN[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\x{85}\\p{L}\\p{N}]+"
    "|[\\s\\x{85}]+(?![^\\s\\x{85}])|[\\s\\x{85}]+";

#define CACHE_MAX_WORDS (1u << 20)
#define CACHE_MAX_WORD_BYTES 64

typedef struct gpt2 {
    mg_strmap vocab;      /* raw bytes -> id */
    int32_t byte_id[256]; /* id of each single byte */
    char *id_bytes;       /* concatenated raw bytes of every id */
    uint64_t *id_off;     /* [vocab + 1] offsets into id_bytes */
    mg_u64map merges;     /* (left << 32 | right) -> (rank << 32 | merged id) */
    pcre2_code *re;
    pcre2_match_data *md;
    mg_strmap cache;      /* word bytes -> (offset << 8 | count) into cache_ids */
    mg_ids cache_ids;
    mg_ids work;          /* scratch symbols for one word */
} gpt2;

/* GPT-2's bytes_to_unicode(): printable Latin-1 bytes map to themselves, the other 68
 * bytes to U+0100.. in byte order. Returns the code point for byte b. */
static void byte_unicode_table(uint32_t cp_of_byte[256]) {
    int n = 0;
    for (int b = 0; b < 256; b++) {
        int printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        cp_of_byte[b] = printable ? (uint32_t)b : (uint32_t)(256 + n++);
    }
}

/* Maps a vocab/merges string (UTF-8 of byte-mapped code points) to raw bytes.
 * Returns the byte count, or -1 if a character is not in the table. */
static long unicode_to_bytes(const int16_t *byte_of_cp, const char *s, size_t len, char *out) {
    size_t i = 0;
    long n = 0;
    while (i < len) {
        unsigned char c = (unsigned char)s[i];
        uint32_t cp;
        if (c < 0x80) {
            cp = c;
            i += 1;
        } else if ((c & 0xE0) == 0xC0 && i + 1 < len) {
            cp = ((uint32_t)(c & 0x1F) << 6) | ((unsigned char)s[i + 1] & 0x3F);
            i += 2;
        } else {
            return -1; /* every mapped code point is below U+0800 */
        }
        if (cp >= 324 || byte_of_cp[cp] < 0) return -1;
        out[n++] = (char)byte_of_cp[cp];
    }
    return n;
}

static void gpt2_destroy(void *impl) {
    gpt2 *g = impl;
    if (!g) return;
    mg_strmap_free(&g->vocab);
    free(g->id_bytes);
    free(g->id_off);
    mg_u64map_free(&g->merges);
    if (g->md) pcre2_match_data_free(g->md);
    if (g->re) pcre2_code_free(g->re);
    mg_strmap_free(&g->cache);
    mg_ids_free(&g->cache_ids);
    mg_ids_free(&g->work);
    free(g);
}

static int load_vocab(gpt2 *g, mg_tokenizer *t, const int16_t *byte_of_cp, mg_error *err) {
    json_error_t jerr;
    FILE *vf = NULL;
    int orc = mg_input_fopen(t->vocab_file, "--vocab-file", &vf, err);
    if (orc) return orc;
    json_t *root = json_loadf(vf, 0, &jerr);
    fclose(vf);
    if (!root)
        return mg_error_set(err, MG_ERR_IO, "cannot read GPT-2 vocab %s: %s (line %d)", t->vocab_file, jerr.text,
                            jerr.line);
    int rc = MG_OK;
    size_t n = json_is_object(root) ? json_object_size(root) : 0;
    if (n == 0) {
        rc = mg_error_set(err, MG_ERR_IO, "GPT-2 vocab %s is not a non-empty JSON object", t->vocab_file);
        goto out;
    }
    if (mg_strmap_init(&g->vocab, n)) {
        rc = mg_error_set(err, MG_ERR_NOMEM, "out of memory loading %s", t->vocab_file);
        goto out;
    }
    /* Ids must be exactly 0..n-1, which is how Megatron sizes the embedding. */
    char **bytes = calloc(n, sizeof *bytes);
    size_t *lens = calloc(n, sizeof *lens);
    size_t total = 0;
    if (!bytes || !lens) {
        free(bytes);
        free(lens);
        rc = mg_error_set(err, MG_ERR_NOMEM, "out of memory loading %s", t->vocab_file);
        goto out;
    }
    const char *key;
    json_t *val;
    json_object_foreach(root, key, val) {
        size_t klen = strlen(key);
        json_int_t id = json_is_integer(val) ? json_integer_value(val) : -1;
        if (id < 0 || (size_t)id >= n || bytes[id]) {
            rc = mg_error_set(err, MG_ERR_IO, "GPT-2 vocab %s: entry \"%s\" has a bad or duplicate id", t->vocab_file, key);
            break;
        }
        char *raw = malloc(klen + 1);
        long rl = raw ? unicode_to_bytes(byte_of_cp, key, klen, raw) : -1;
        if (rl < 0) {
            free(raw);
            rc = raw ? mg_error_set(err, MG_ERR_IO, "GPT-2 vocab %s: entry \"%s\" is not in GPT-2's byte alphabet",
                                    t->vocab_file, key)
                     : mg_error_set(err, MG_ERR_NOMEM, "out of memory");
            break;
        }
        bytes[id] = raw;
        lens[id] = (size_t)rl;
        total += (size_t)rl;
        if (mg_strmap_put(&g->vocab, raw, (size_t)rl, (uint64_t)id)) {
            rc = mg_error_set(err, MG_ERR_NOMEM, "out of memory");
            break;
        }
    }
    if (rc == MG_OK) {
        g->id_bytes = malloc(total + 1);
        g->id_off = malloc((n + 1) * sizeof *g->id_off);
        if (!g->id_bytes || !g->id_off) rc = mg_error_set(err, MG_ERR_NOMEM, "out of memory");
    }
    if (rc == MG_OK) {
        uint64_t off = 0;
        for (size_t i = 0; i < n; i++) {
            g->id_off[i] = off;
            memcpy(g->id_bytes + off, bytes[i], lens[i]);
            off += lens[i];
        }
        g->id_off[n] = off;
        for (int b = 0; b < 256 && rc == MG_OK; b++) {
            char c = (char)b;
            uint64_t id;
            if (!mg_strmap_get(&g->vocab, &c, 1, &id))
                rc = mg_error_set(err, MG_ERR_IO, "GPT-2 vocab %s lacks the single byte 0x%02x", t->vocab_file, b);
            g->byte_id[b] = (int32_t)id;
        }
        t->vocab = (int64_t)n;
    }
    for (size_t i = 0; i < n; i++) free(bytes[i]);
    free(bytes);
    free(lens);
out:
    json_decref(root);
    return rc;
}

static int load_merges(gpt2 *g, mg_tokenizer *t, const int16_t *byte_of_cp, mg_error *err) {
    FILE *f = NULL;
    int orc = mg_input_fopen(t->merge_file, "--merge-file", &f, err);
    if (orc) return orc;
    if (mg_u64map_init(&g->merges, 50000)) {
        fclose(f);
        return mg_error_set(err, MG_ERR_NOMEM, "out of memory");
    }
    char *line = NULL;
    size_t cap = 0;
    ssize_t ll;
    long lineno = 0;
    uint32_t rank = 0;
    int rc = MG_OK;
    while (rc == MG_OK && (ll = getline(&line, &cap, f)) >= 0) {
        lineno++;
        while (ll > 0 && (line[ll - 1] == '\n' || line[ll - 1] == '\r')) line[--ll] = '\0';
        if (ll == 0 || (lineno == 1 && strncmp(line, "#version", 8) == 0)) continue;
        char *sp = memchr(line, ' ', (size_t)ll);
        char *a = malloc((size_t)ll + 1), *b = malloc((size_t)ll + 1);
        if (!a || !b) {
            rc = mg_error_set(err, MG_ERR_NOMEM, "out of memory");
        } else if (!sp) {
            rc = mg_error_set(err, MG_ERR_IO, "%s:%ld: a merge is two tokens separated by one space", t->merge_file, lineno);
        } else {
            long la = unicode_to_bytes(byte_of_cp, line, (size_t)(sp - line), a);
            long lb = unicode_to_bytes(byte_of_cp, sp + 1, (size_t)(ll - (sp + 1 - line)), b);
            uint64_t ia, ib, im;
            if (la <= 0 || lb <= 0) {
                rc = mg_error_set(err, MG_ERR_IO, "%s:%ld: token not in GPT-2's byte alphabet", t->merge_file, lineno);
            } else {
                memcpy(a + la, b, (size_t)lb);
                if (!mg_strmap_get(&g->vocab, a, (size_t)la, &ia) || !mg_strmap_get(&g->vocab, b, (size_t)lb, &ib) ||
                    !mg_strmap_get(&g->vocab, a, (size_t)(la + lb), &im)) {
                    rc = mg_error_set(err, MG_ERR_IO, "%s:%ld: merge \"%s\" uses or makes a token missing from %s",
                                      t->merge_file, lineno, line, t->vocab_file);
                } else {
                    uint64_t key = ia << 32 | ib;
                    uint64_t old;
                    /* A repeated pair keeps its first (best) rank, as in OpenAI's dict build. */
                    if (!mg_u64map_get(&g->merges, key, &old) &&
                        mg_u64map_put(&g->merges, key, (uint64_t)rank << 32 | im))
                        rc = mg_error_set(err, MG_ERR_NOMEM, "out of memory");
                    rank++;
                }
            }
        }
        free(a);
        free(b);
    }
    free(line);
    if (rc == MG_OK && ferror(f)) rc = mg_error_set(err, MG_ERR_IO, "error reading %s", t->merge_file);
    fclose(f);
    if (rc == MG_OK && rank == 0) rc = mg_error_set(err, MG_ERR_IO, "GPT-2 merges %s holds no merges", t->merge_file);
    return rc;
}

/* ---- BPE of long pre-tokens --------------------------------------------------------------
 * The scan in bpe_word costs O(n) map lookups per merge, O(n^2) per word: one 1 MB
 * "word" (a run of letters without spaces) took ~2000x the time of the same bytes as
 * text. Above LONG_WORD bytes the same merges run in O(n log n): the symbols form a
 * linked list, candidate pairs wait in a min-heap ordered by (rank, position), and an
 * entry is stale once either of its symbols changed. Popping in that order merges
 * every occurrence of the lowest-ranked pair left to right, as the scan does, since a
 * merge only creates pairs of higher rank (a merged token exists only after its own
 * merge was learned): the results are the same for any merges file BPE training
 * produces. */
#define LONG_WORD 256

typedef struct bpe_cand {
    uint32_t rank, pos, right, vl, vr;
    int32_t id;
} bpe_cand;

static int cand_less(const bpe_cand *a, const bpe_cand *b) {
    return a->rank != b->rank ? a->rank < b->rank : a->pos < b->pos;
}

typedef struct bpe_heap {
    bpe_cand *h;
    size_t n, cap;
} bpe_heap;

static int heap_push(bpe_heap *q, bpe_cand c) {
    if (q->n == q->cap) {
        size_t nc = q->cap ? 2 * q->cap : 1024;
        bpe_cand *nh = realloc(q->h, nc * sizeof *nh);
        if (!nh) return -1;
        q->h = nh;
        q->cap = nc;
    }
    size_t i = q->n++;
    while (i > 0 && cand_less(&c, &q->h[(i - 1) / 2])) {
        q->h[i] = q->h[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    q->h[i] = c;
    return 0;
}

static bpe_cand heap_pop(bpe_heap *q) {
    bpe_cand top = q->h[0], last = q->h[--q->n];
    size_t i = 0;
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        const bpe_cand *best = &last;
        if (l < q->n && cand_less(&q->h[l], best)) m = l, best = &q->h[l];
        if (r < q->n && cand_less(&q->h[r], best)) m = r;
        if (m == i) break;
        q->h[i] = q->h[m];
        i = m;
    }
    if (q->n) q->h[i] = last;
    return top;
}

/* Pushes the pair starting at symbol a (if b follows and the pair merges). */
static int push_pair(gpt2 *g, bpe_heap *q, const int32_t *s, const uint32_t *ver, uint32_t a, int64_t b) {
    uint64_t v;
    if (b < 0 || !mg_u64map_get(&g->merges, (uint64_t)(uint32_t)s[a] << 32 | (uint32_t)s[b], &v)) return 0;
    bpe_cand c = {(uint32_t)(v >> 32), a, (uint32_t)b, ver[a], ver[b], (int32_t)(uint32_t)v};
    return heap_push(q, c);
}

/* Merges s[0..n) in place; *m is the symbols left. */
static int bpe_long(gpt2 *g, int32_t *s, size_t n, size_t *m, mg_error *err) {
    int64_t *prev = malloc(n * sizeof *prev), *next = malloc(n * sizeof *next);
    uint32_t *ver = calloc(n, sizeof *ver);
    bpe_heap q = {0};
    int rc = prev && next && ver ? MG_OK : MG_ERR_NOMEM;
    for (size_t i = 0; !rc && i < n; i++) {
        prev[i] = (int64_t)i - 1;
        next[i] = i + 1 < n ? (int64_t)i + 1 : -1;
    }
    for (size_t i = 0; !rc && i + 1 < n; i++)
        if (push_pair(g, &q, s, ver, (uint32_t)i, (int64_t)i + 1)) rc = MG_ERR_NOMEM;
    while (!rc && q.n) {
        bpe_cand c = heap_pop(&q);
        if (ver[c.pos] != c.vl || next[c.pos] != (int64_t)c.right || ver[c.right] != c.vr || s[c.right] < 0) continue;
        s[c.pos] = c.id; /* the merged symbol takes the left place; the right one leaves */
        ver[c.pos]++;
        ver[c.right]++;
        s[c.right] = -1;
        next[c.pos] = next[c.right];
        if (next[c.right] >= 0) prev[next[c.right]] = c.pos;
        if ((prev[c.pos] >= 0 && push_pair(g, &q, s, ver, (uint32_t)prev[c.pos], c.pos)) ||
            push_pair(g, &q, s, ver, c.pos, next[c.pos]))
            rc = MG_ERR_NOMEM;
    }
    size_t j = 0;
    if (!rc)
        for (int64_t i = 0; i >= 0; i = next[i]) s[j++] = s[i];
    *m = j;
    free(prev);
    free(next);
    free(ver);
    free(q.h);
    return rc ? mg_error_set(err, MG_ERR_NOMEM, "out of memory merging a pre-token of %zu bytes", n) : MG_OK;
}

/* BPE of one pre-token: repeatedly merge the adjacent pair of lowest rank (all its
 * occurrences, left to right), as OpenAI's bpe() does. Words are short, so the
 * quadratic scan beats a heap for them; long ones go to bpe_long. */
static int bpe_word(gpt2 *g, const unsigned char *w, size_t n, mg_ids *out, mg_error *err) {
    if (n == 1) return mg_ids_push(out, g->byte_id[w[0]], err);
    int cacheable = n <= CACHE_MAX_WORD_BYTES;
    uint64_t cv;
    if (cacheable && mg_strmap_get(&g->cache, (const char *)w, n, &cv)) {
        size_t off = (size_t)(cv >> 8), cnt = (size_t)(cv & 0xFF);
        int rc = mg_ids_reserve(out, out->len + cnt, err);
        if (rc) return rc;
        memcpy(out->data + out->len, g->cache_ids.data + off, cnt * sizeof(int32_t));
        out->len += cnt;
        return MG_OK;
    }
    g->work.len = 0;
    int rc = mg_ids_reserve(&g->work, n, err);
    if (rc) return rc;
    int32_t *s = g->work.data;
    for (size_t i = 0; i < n; i++) s[i] = g->byte_id[w[i]];
    size_t m = n;
    if (n > LONG_WORD) {
        rc = bpe_long(g, s, n, &m, err);
        if (rc) return rc;
    }
    while (m > 1 && n <= LONG_WORD) {
        uint64_t best = UINT64_MAX, v;
        for (size_t i = 0; i + 1 < m; i++) {
            if (mg_u64map_get(&g->merges, (uint64_t)(uint32_t)s[i] << 32 | (uint32_t)s[i + 1], &v) && v < best) best = v;
        }
        if (best == UINT64_MAX) break;
        uint32_t rank = (uint32_t)(best >> 32);
        size_t j = 0;
        for (size_t i = 0; i < m;) {
            if (i + 1 < m && mg_u64map_get(&g->merges, (uint64_t)(uint32_t)s[i] << 32 | (uint32_t)s[i + 1], &v) &&
                (uint32_t)(v >> 32) == rank) {
                s[j++] = (int32_t)(uint32_t)v;
                i += 2;
            } else {
                s[j++] = s[i++];
            }
        }
        m = j;
    }
    rc = mg_ids_reserve(out, out->len + m, err);
    if (rc) return rc;
    memcpy(out->data + out->len, s, m * sizeof *s);
    out->len += m;
    if (cacheable) {
        /* The cache is bounded: when full it is dropped and refilled, which keeps memory
         * flat on endless streams of unique words. */
        if (g->cache.count >= CACHE_MAX_WORDS) {
            mg_strmap_clear(&g->cache);
            g->cache_ids.len = 0;
        }
        size_t off = g->cache_ids.len;
        if (mg_ids_reserve(&g->cache_ids, off + m, NULL) == MG_OK &&
            mg_strmap_put(&g->cache, (const char *)w, n, (uint64_t)off << 8 | m) == 0) {
            memcpy(g->cache_ids.data + off, s, m * sizeof *s);
            g->cache_ids.len += m;
        }
    }
    return MG_OK;
}

/* Pre-tokenizes and BPE-encodes text[0, len) (a segment between special tokens: the
 * pattern's look-ahead sees the segment's end, as Hugging Face's does). */
static int encode_segment(gpt2 *g, const char *text, size_t len, mg_ids *out, mg_error *err) {
    const unsigned char *p = (const unsigned char *)text;
    size_t pos = 0;
    int rc = MG_OK;
    while (pos < len && rc == MG_OK) {
        int m = pcre2_match(g->re, p, len, pos, 0, g->md, NULL);
        if (m == PCRE2_ERROR_NOMATCH) {
            rc = bpe_word(g, p + pos, len - pos, out, err);
            break;
        }
        if (m < 0) {
            PCRE2_UCHAR buf[256];
            pcre2_get_error_message(m, buf, sizeof buf);
            return mg_error_set(err, MG_ERR_RUNTIME, "GPT-2 pre-tokenizer: %s", (char *)buf);
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(g->md);
        size_t s = ov[0], e = ov[1];
        /* Bytes the matcher skipped are invalid UTF-8; they still get byte-level tokens so
         * that decode(encode(x)) == x for any input. */
        if (s > pos) rc = bpe_word(g, p + pos, s - pos, out, err);
        if (e == s) e = s + 1; /* cannot happen with this pattern; guards an endless loop */
        if (rc == MG_OK) rc = bpe_word(g, p + s, e - s, out, err);
        pos = e;
    }
    return rc;
}

/* First occurrence of needle (nl bytes) in hay (n bytes), NULL if none; text may hold NULs. */
static const char *find_bytes(const char *hay, size_t n, const char *needle, size_t nl) {
    const char *end = hay + n;
    for (const char *p = hay; (size_t)(end - p) >= nl; p++) {
        p = memchr(p, needle[0], (size_t)(end - p) - nl + 1);
        if (!p) return NULL;
        if (memcmp(p, needle, nl) == 0) return p;
    }
    return NULL;
}

/* "<|endoftext|>" written in the text is the end-of-document token (50256), as in the
 * Hugging Face GPT-2 tokenizer Megatron's GPT2BPETokenizer is built on: the text is cut
 * at each occurrence and the pieces are encoded on their own. */
static int gpt2_encode(mg_tokenizer *t, const char *text, size_t len, mg_ids *out, mg_error *err) {
    gpt2 *g = t->impl;
    static const char special[] = "<|endoftext|>";
    const size_t sl = sizeof special - 1;
    size_t pos = 0;
    while (t->eod >= 0 && pos < len) {
        const char *hit = find_bytes(text + pos, len - pos, special, sl);
        if (!hit) break;
        size_t at = (size_t)(hit - text);
        int rc = at > pos ? encode_segment(g, text + pos, at - pos, out, err) : MG_OK;
        if (!rc) rc = mg_ids_push(out, t->eod, err);
        if (rc) return rc;
        pos = at + sl;
    }
    return pos < len ? encode_segment(g, text + pos, len - pos, out, err) : MG_OK;
}

static int gpt2_decode(const mg_tokenizer *t, const int32_t *ids, size_t n, char **text, size_t *len,
                       mg_error *err) {
    const gpt2 *g = t->impl;
    size_t total = 0;
    for (size_t i = 0; i < n; i++) total += g->id_off[ids[i] + 1] - g->id_off[ids[i]];
    char *s = malloc(total + 1);
    if (!s) return mg_error_set(err, MG_ERR_NOMEM, "out of memory decoding %zu ids", n);
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        size_t l = g->id_off[ids[i] + 1] - g->id_off[ids[i]];
        memcpy(s + o, g->id_bytes + g->id_off[ids[i]], l);
        o += l;
    }
    s[o] = '\0';
    *text = s;
    *len = o;
    return MG_OK;
}

static const mg_tok_ops gpt2_ops = {gpt2_encode, gpt2_decode, gpt2_destroy};

int mg_tok_gpt2_init(mg_tokenizer *t, mg_error *err) {
    gpt2 *g = calloc(1, sizeof *g);
    if (!g) return mg_error_set(err, MG_ERR_NOMEM, "out of memory");
    t->ops = &gpt2_ops;
    t->impl = g;
    uint32_t cp_of_byte[256];
    int16_t byte_of_cp[324];
    byte_unicode_table(cp_of_byte);
    for (int i = 0; i < 324; i++) byte_of_cp[i] = -1;
    for (int b = 0; b < 256; b++) byte_of_cp[cp_of_byte[b]] = (int16_t)b;

    int rc = load_vocab(g, t, byte_of_cp, err);
    if (rc == MG_OK) rc = load_merges(g, t, byte_of_cp, err);
    if (rc) return rc;
    int ecode;
    PCRE2_SIZE eoff;
    g->re = pcre2_compile((PCRE2_SPTR)GPT2_PATTERN, PCRE2_ZERO_TERMINATED,
                          PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &ecode, &eoff, NULL);
    if (!g->re) return mg_error_set(err, MG_ERR_RUNTIME, "cannot compile the GPT-2 pattern (PCRE2 error %d)", ecode);
    pcre2_jit_compile(g->re, PCRE2_JIT_COMPLETE); /* optional: the interpreter is the fallback */
    g->md = pcre2_match_data_create_from_pattern(g->re, NULL);
    if (!g->md || mg_strmap_init(&g->cache, 1 << 14))
        return mg_error_set(err, MG_ERR_NOMEM, "out of memory");
    /* <|endoftext|> is an ordinary vocab entry in encoder.json. */
    uint64_t eod;
    if (mg_strmap_get(&g->vocab, "<|endoftext|>", 13, &eod)) t->eod = (int32_t)eod;
    t->bos = -1;
    return MG_OK;
}

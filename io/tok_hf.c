/* HuggingFaceTokenizer: a Hugging Face tokenizer.json with a BPE model, encoded as the
 * `tokenizers` library does and as Megatron's HuggingFaceTokenizer calls it
 * (tokenizer(text).input_ids: the post-processor's special tokens included).
 *
 *   1. added tokens: those with normalized=false are cut out of the raw text (leftmost,
 *      longest; single_word / lstrip / rstrip as AddedVocabulary::find_matches), the rest
 *      is normalized, then the normalized=true ones are cut out of it;
 *   2. pre-tokenizers split the other pieces (io/tok_hf_steps.c);
 *   3. BPE merges each piece as tokenizers' Word::merge_all does: a heap of (rank,
 *      position), an entry is stale when its pair no longer makes the same token;
 *      byte_fallback, unk_token / fuse_unk, ignore_merges, continuing_subword_prefix and
 *      end_of_word_suffix as BPE::merge_word / tokenize_with_cache;
 *   4. the post-processor's template (TemplateProcessing, Roberta, Bert; ByteLevel's
 *      changes no id).
 *
 * Ids of added tokens are assigned as the library's deserializer does (the model's id
 * for a known string, else the next free one), not read from the file. Decoding is
 * Tokenizer::decode without skipping special tokens. BOS and EOD come from
 * tokenizer_config.json (or special_tokens_map.json) beside tokenizer.json, as
 * transformers reads them: eos_token, else sep_token; bos_token, else cls_token. */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "mgraph/infile.h"
#include "io/hashmap.h"
#include "io/tok_hf_internal.h"

#define CACHE_MAX_WORDS (1u << 18)
#define CACHE_MAX_WORD_BYTES 128

typedef struct added_tok {
    char *content;   /* what is matched (a normalized=true token: its normalized form) */
    size_t len;
    int32_t id;
    int single_word, lstrip, rstrip, normalized, special;
} added_tok;

/* A set of added tokens matched leftmost-longest; by[c] lists the tokens starting with
 * byte c, longest first. */
typedef struct match_set {
    added_tok **by[256];
    size_t nby[256];
} match_set;

typedef struct tmpl_item {
    int32_t *ids; /* a special token's ids; NULL: the sequence itself */
    size_t n;
} tmpl_item;

typedef struct hf {
    /* model */
    mg_strmap vocab;             /* token string -> id */
    char **id_str;               /* [nid] the model's token strings */
    size_t *id_len;
    size_t nid;                  /* max id + 1 over model and added tokens */
    mg_u64map merges;            /* (a << 32 | b) -> (rank << 32 | new id) */
    int32_t byte_tok[256];       /* byte_fallback's <0xXX> ids, -1 if absent */
    int byte_fallback, fuse_unk, ignore_merges;
    char *unk, *csp, *eows;      /* unk_token, continuing_subword_prefix, end_of_word_suffix */
    /* added tokens */
    added_tok *added;
    size_t nadded;
    char **added_str;            /* [nid] decoding strings of added tokens (NULL: the model's) */
    match_set raw, norm;
    /* pipeline */
    hf_steps normalizer, pre, decoder;
    tmpl_item *tmpl;
    size_t ntmpl;
    int add_special;
    /* per-encode scratch and the word cache */
    hf_pieces a, b;
    mg_buf nbuf;
    mg_strmap cache;
    mg_ids cache_ids;
    int32_t *sym_c;
    int64_t *sym_prev, *sym_next;
    size_t *sym_len, sym_cap;
    void *heap;
    size_t heap_n, heap_cap;
} hf;

static int nomem(mg_error *err) { return mg_error_set(err, MG_ERR_NOMEM, "out of memory in the Hugging Face tokenizer"); }

/* ---- the BPE model ---------------------------------------------------------------------- */

typedef struct merge_ent {
    uint32_t rank;
    uint32_t pos;
    int32_t id;
} merge_ent;

static int ent_less(const merge_ent *a, const merge_ent *b) {
    return a->rank != b->rank ? a->rank < b->rank : a->pos < b->pos;
}

static int heap_push(hf *h, merge_ent e) {
    merge_ent *q = h->heap;
    if (h->heap_n == h->heap_cap) {
        size_t nc = h->heap_cap ? 2 * h->heap_cap : 256;
        q = realloc(h->heap, nc * sizeof *q);
        if (!q) return -1;
        h->heap = q;
        h->heap_cap = nc;
    }
    size_t i = h->heap_n++;
    while (i > 0 && ent_less(&e, &q[(i - 1) / 2])) {
        q[i] = q[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    q[i] = e;
    return 0;
}

static merge_ent heap_pop(hf *h) {
    merge_ent *q = h->heap;
    merge_ent top = q[0], last = q[--h->heap_n];
    size_t i = 0;
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        const merge_ent *best = &last;
        if (l < h->heap_n && ent_less(&q[l], best)) m = l, best = &q[l];
        if (r < h->heap_n && ent_less(&q[r], best)) m = r;
        if (m == i) break;
        q[i] = q[m];
        i = m;
    }
    if (h->heap_n) q[i] = last;
    return top;
}

static int sym_reserve(hf *h, size_t n) {
    if (n <= h->sym_cap) return 0;
    size_t nc = h->sym_cap ? h->sym_cap : 64;
    while (nc < n) nc *= 2;
    int32_t *c = realloc(h->sym_c, nc * sizeof *c);
    if (c) h->sym_c = c;
    int64_t *p = realloc(h->sym_prev, nc * sizeof *p);
    if (p) h->sym_prev = p;
    int64_t *x = realloc(h->sym_next, nc * sizeof *x);
    if (x) h->sym_next = x;
    size_t *l = realloc(h->sym_len, nc * sizeof *l);
    if (l) h->sym_len = l;
    if (!c || !p || !x || !l) return -1;
    h->sym_cap = nc;
    return 0;
}

static int sym_add(hf *h, size_t *n, int32_t id, size_t len) {
    if (sym_reserve(h, *n + 1)) return -1;
    size_t i = (*n)++;
    h->sym_c[i] = id;
    h->sym_len[i] = len;
    h->sym_prev[i] = (int64_t)i - 1;
    h->sym_next[i] = -1;
    if (i > 0) h->sym_next[i - 1] = (int64_t)i;
    return 0;
}

static int get_merge(const hf *h, int32_t a, int32_t b, uint32_t *rank, int32_t *id) {
    uint64_t v;
    if (!mg_u64map_get(&h->merges, (uint64_t)(uint32_t)a << 32 | (uint32_t)b, &v)) return 0;
    *rank = (uint32_t)(v >> 32);
    *id = (int32_t)(uint32_t)v;
    return 1;
}

static int vocab_get(const hf *h, const char *s, size_t n, int32_t *id) {
    uint64_t v;
    if (!mg_strmap_get(&h->vocab, s, n, &v)) return 0;
    *id = (int32_t)v;
    return 1;
}

/* BPE::merge_word, then Word::merge_all; appends the ids to out. */
static int bpe_word(hf *h, const char *w, size_t n, mg_ids *out, mg_error *err) {
    size_t ns = 0;
    int32_t unk_id = -1;
    size_t unk_len = 0;
    int have_unk = 0;
    mg_buf s = {0};
    int rc = MG_OK;
    for (size_t i = 0; i < n && !rc;) {
        size_t l;
        mg_utf8_next(w + i, n - i, &l);
        int is_first = i == 0, is_last = i + l >= n;
        s.len = 0;
        if (!is_first && h->csp && mg_buf_append(&s, h->csp, strlen(h->csp))) rc = nomem(err);
        if (!rc && mg_buf_append(&s, w + i, l)) rc = nomem(err);
        if (!rc && is_last && h->eows && mg_buf_append(&s, h->eows, strlen(h->eows))) rc = nomem(err);
        if (rc) break;
        int32_t id;
        if (vocab_get(h, s.data, s.len, &id)) {
            if (have_unk && sym_add(h, &ns, unk_id, unk_len)) rc = nomem(err);
            have_unk = 0;
            if (!rc && sym_add(h, &ns, id, l)) rc = nomem(err);
            i += l;
            continue;
        }
        int fell_back = 0;
        if (h->byte_fallback) {
            fell_back = 1;
            for (size_t k = 0; k < s.len; k++)
                if (h->byte_tok[(unsigned char)s.data[k]] < 0) fell_back = 0;
            /* (a pending unknown token stays pending: the library adds it later) */
            for (size_t k = 0; fell_back && k < s.len && !rc; k++)
                if (sym_add(h, &ns, h->byte_tok[(unsigned char)s.data[k]], 1)) rc = nomem(err);
        }
        if (!fell_back && h->unk && !rc) {
            int32_t uid;
            if (!vocab_get(h, h->unk, strlen(h->unk), &uid))
                rc = mg_error_set(err, MG_ERR_INVALID, "tokenizer.json: unk_token \"%s\" is not in the vocabulary", h->unk);
            else if (have_unk && h->fuse_unk) unk_len += l;
            else {
                if (have_unk && sym_add(h, &ns, unk_id, unk_len)) rc = nomem(err);
                unk_id = uid;
                unk_len = l;
                have_unk = 1;
            }
        }
        /* no unk_token: the character is dropped, as the library does */
        i += l;
    }
    free(s.data);
    if (!rc && have_unk && sym_add(h, &ns, unk_id, unk_len)) rc = nomem(err);
    if (rc) return rc;
    /* merge_all */
    h->heap_n = 0;
    for (size_t i = 0; i + 1 < ns; i++) {
        uint32_t rank;
        int32_t id;
        if (get_merge(h, h->sym_c[i], h->sym_c[i + 1], &rank, &id) && heap_push(h, (merge_ent){rank, (uint32_t)i, id}))
            return nomem(err);
    }
    while (h->heap_n) {
        merge_ent top = heap_pop(h);
        size_t p = top.pos;
        if (h->sym_len[p] == 0 || h->sym_next[p] == -1) continue;
        size_t nx = (size_t)h->sym_next[p];
        uint32_t rank;
        int32_t id;
        if (!get_merge(h, h->sym_c[p], h->sym_c[nx], &rank, &id) || id != top.id) continue;
        h->sym_c[p] = top.id;
        h->sym_len[p] += h->sym_len[nx];
        h->sym_next[p] = h->sym_next[nx];
        h->sym_len[nx] = 0;
        if (h->sym_next[nx] >= 0) h->sym_prev[h->sym_next[nx]] = (int64_t)p;
        if (h->sym_prev[p] >= 0) {
            size_t pv = (size_t)h->sym_prev[p];
            if (get_merge(h, h->sym_c[pv], h->sym_c[p], &rank, &id) && heap_push(h, (merge_ent){rank, (uint32_t)pv, id}))
                return nomem(err);
        }
        if (h->sym_next[p] >= 0) {
            size_t nn = (size_t)h->sym_next[p];
            if (get_merge(h, h->sym_c[p], h->sym_c[nn], &rank, &id) && heap_push(h, (merge_ent){rank, (uint32_t)p, id}))
                return nomem(err);
        }
    }
    for (size_t i = 0; i < ns; i++)
        if (h->sym_len[i] && mg_ids_push(out, h->sym_c[i], err)) return MG_ERR_NOMEM;
    return MG_OK;
}

/* BPE::tokenize_with_cache */
static int model_tokenize(hf *h, const char *w, size_t n, mg_ids *out, mg_error *err) {
    if (n == 0) return MG_OK;
    int32_t id;
    if (h->ignore_merges && vocab_get(h, w, n, &id)) return mg_ids_push(out, id, err);
    int cacheable = n <= CACHE_MAX_WORD_BYTES;
    uint64_t cv;
    if (cacheable && mg_strmap_get(&h->cache, w, n, &cv)) {
        size_t off = (size_t)(cv >> 8), cnt = (size_t)(cv & 0xFF);
        int rc = mg_ids_reserve(out, out->len + cnt, err);
        if (rc) return rc;
        memcpy(out->data + out->len, h->cache_ids.data + off, cnt * sizeof(int32_t));
        out->len += cnt;
        return MG_OK;
    }
    size_t start = out->len;
    int rc = bpe_word(h, w, n, out, err);
    size_t m = out->len - start;
    if (rc || !cacheable || m > 255) return rc;
    if (h->cache.count >= CACHE_MAX_WORDS) { /* bounded: dropped and refilled */
        mg_strmap_clear(&h->cache);
        h->cache_ids.len = 0;
    }
    size_t off = h->cache_ids.len;
    if (mg_ids_reserve(&h->cache_ids, off + m, NULL) == MG_OK && mg_strmap_put(&h->cache, w, n, (uint64_t)off << 8 | m) == 0) {
        memcpy(h->cache_ids.data + off, out->data + start, m * sizeof(int32_t));
        h->cache_ids.len += m;
    }
    return MG_OK;
}

/* ---- added tokens ----------------------------------------------------------------------- */

/* Rust regex's \w (Unicode word characters), for single_word. */
static int is_word_char(const char *s, size_t n, int at_end) {
    if (n == 0) return 0;
    size_t i = 0, l = 0;
    if (at_end) { /* the last character */
        i = n - 1;
        while (i > 0 && ((unsigned char)s[i] & 0xC0) == 0x80) i--;
    }
    int32_t c = mg_utf8_next(s + i, n - i, &l);
    if (c < 0) return 0;
    if (c < 0x80) return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
    return mg_tok_is_word_cp((uint32_t)c);
}

static size_t ws_len_back(const char *s, size_t n) { /* bytes of trailing white space */
    size_t b = n;
    while (b > 0) {
        size_t p = b - 1, l;
        while (p > 0 && ((unsigned char)s[p] & 0xC0) == 0x80) p--;
        int32_t c = mg_utf8_next(s + p, b - p, &l);
        if (c < 0 || !mg_is_white_space((uint32_t)c)) break;
        b = p;
    }
    return n - b;
}

static size_t ws_len_fwd(const char *s, size_t n) {
    size_t i = 0, l;
    while (i < n) {
        int32_t c = mg_utf8_next(s + i, n - i, &l);
        if (c < 0 || !mg_is_white_space((uint32_t)c)) break;
        i += l;
    }
    return i;
}

/* AddedVocabulary::split_with_indices over one piece: the tokens of set in s, with the
 * text between them, pushed to out. */
static int split_added(const match_set *set, const char *s, size_t n, int first, hf_pieces *out, mg_error *err) {
    size_t start_offset = 0, pos = 0;
    while (pos < n) {
        /* leftmost, then longest */
        const added_tok *hit = NULL;
        size_t at = pos;
        for (; at < n && !hit; at++) {
            unsigned char c = (unsigned char)s[at];
            for (size_t k = 0; k < set->nby[c]; k++) {
                const added_tok *t = set->by[c][k];
                if (t->len <= n - at && !memcmp(s + at, t->content, t->len)) {
                    hit = t;
                    break;
                }
            }
        }
        if (!hit) break;
        at--;
        size_t start = at, stop = at + hit->len;
        pos = stop; /* the search goes on after the match, whatever happens to it */
        if (hit->single_word) {
            int start_space = start == 0 || !is_word_char(s, start, 1);
            int stop_space = stop == n || !is_word_char(s + stop, n - stop, 0);
            if (!start_space || !stop_space) continue;
        }
        if (hit->lstrip) {
            size_t ns = start - ws_len_back(s, start);
            start = ns > start_offset ? ns : start_offset;
        }
        if (hit->rstrip) stop += ws_len_fwd(s + stop, n - stop);
        if (start_offset < start && hf_pieces_push(out, s + start_offset, start - start_offset, -1, first && start_offset == 0))
            return nomem(err);
        if (hf_pieces_push(out, s + start, stop > start ? stop - start : 0, hit->id, first && start == 0)) return nomem(err);
        start_offset = stop;
    }
    if (start_offset < n && hf_pieces_push(out, s + start_offset, n - start_offset, -1, first && start_offset == 0))
        return nomem(err);
    return MG_OK;
}

static int added_cmp(const void *a, const void *b) {
    const added_tok *x = *(added_tok *const *)a, *y = *(added_tok *const *)b;
    return x->len != y->len ? (x->len < y->len ? 1 : -1) : 0;
}

static int build_set(hf *h, match_set *set, int normalized) {
    for (size_t i = 0; i < h->nadded; i++) {
        added_tok *t = &h->added[i];
        if (t->normalized != normalized || t->len == 0) continue;
        unsigned char c = (unsigned char)t->content[0];
        added_tok **nv = realloc(set->by[c], (set->nby[c] + 1) * sizeof *nv);
        if (!nv) return -1;
        set->by[c] = nv;
        nv[set->nby[c]++] = t;
    }
    for (int c = 0; c < 256; c++)
        if (set->nby[c] > 1) qsort(set->by[c], set->nby[c], sizeof *set->by[c], added_cmp);
    return 0;
}

/* ---- encode / decode ----------------------------------------------------------------------- */

static int hf_encode(mg_tokenizer *t, const char *text, size_t len, mg_ids *out, mg_error *err) {
    hf *h = t->impl;
    size_t bad = mg_utf8_check(text, len);
    if (bad < len)
        return mg_error_set(err, MG_ERR_INVALID, "HuggingFaceTokenizer: the text is not valid UTF-8 (byte %zu of %zu)",
                            bad, len);
    size_t start = out->len;
    int rc = MG_OK;
    /* 1. added tokens, normalization */
    hf_pieces_reset(&h->a);
    hf_pieces_reset(&h->b);
    rc = split_added(&h->raw, text, len, 1, &h->a, err);
    for (size_t i = 0; i < h->a.n && !rc; i++) {
        hf_piece p = h->a.v[i];
        if (p.id >= 0) {
            if (hf_pieces_push(&h->b, hf_piece_str(&h->a, i), p.len, p.id, p.first)) rc = nomem(err);
            continue;
        }
        rc = hf_normalize(&h->normalizer, hf_piece_str(&h->a, i), p.len, &h->nbuf, err);
        if (!rc) rc = split_added(&h->norm, h->nbuf.data, h->nbuf.len, p.first, &h->b, err);
    }
    /* 2. pre-tokenizers */
    if (!rc) rc = hf_pre_tokenize(&h->pre, &h->b, &h->a, err);
    /* 3. the model; 4. the template around it */
    size_t seq_at = 0;
    int templ = h->add_special && h->ntmpl;
    for (size_t k = 0; templ && k < h->ntmpl && !rc; k++) {
        if (!h->tmpl[k].ids) break;
        for (size_t j = 0; j < h->tmpl[k].n && !rc; j++) rc = mg_ids_push(out, h->tmpl[k].ids[j], err);
        seq_at = k + 1;
    }
    for (size_t i = 0; i < h->b.n && !rc; i++) {
        const hf_piece *p = &h->b.v[i];
        if (p->id >= 0) rc = mg_ids_push(out, p->id, err);
        else rc = model_tokenize(h, hf_piece_str(&h->b, i), p->len, out, err);
    }
    for (size_t k = seq_at + 1; templ && k < h->ntmpl && !rc; k++)
        for (size_t j = 0; j < h->tmpl[k].n && !rc; j++) rc = mg_ids_push(out, h->tmpl[k].ids[j], err);
    if (rc) out->len = start;
    return rc;
}

static int hf_decode_ids(const mg_tokenizer *t, const int32_t *ids, size_t n, char **text, size_t *len, mg_error *err) {
    const hf *h = t->impl;
    hf_pieces a = {0}, b = {0};
    mg_buf out = {0};
    int rc = MG_OK;
    for (size_t i = 0; i < n && !rc; i++) {
        int32_t id = ids[i];
        const char *s = h->added_str[id];
        size_t l = s ? strlen(s) : 0;
        if (!s && h->id_str[id]) {
            s = h->id_str[id];
            l = h->id_len[id];
        }
        if (s && hf_pieces_push(&a, s, l, -1, 0)) rc = nomem(err); /* an id without a token is skipped */
    }
    if (!rc) rc = hf_decode(&h->decoder, &a, &b, &out, err);
    hf_pieces_free(&a);
    hf_pieces_free(&b);
    if (rc) {
        free(out.data);
        return rc;
    }
    if (!out.data && !(out.data = calloc(1, 1))) return nomem(err);
    *text = out.data;
    *len = out.len;
    return MG_OK;
}

static void hf_destroy(void *impl) {
    hf *h = impl;
    if (!h) return;
    mg_strmap_free(&h->vocab);
    for (size_t i = 0; h->id_str && i < h->nid; i++) free(h->id_str[i]);
    free(h->id_str);
    free(h->id_len);
    mg_u64map_free(&h->merges);
    free(h->unk);
    free(h->csp);
    free(h->eows);
    for (size_t i = 0; i < h->nadded; i++) free(h->added[i].content);
    free(h->added);
    for (size_t i = 0; h->added_str && i < h->nid; i++) free(h->added_str[i]);
    free(h->added_str);
    for (int c = 0; c < 256; c++) {
        free(h->raw.by[c]);
        free(h->norm.by[c]);
    }
    hf_steps_free(&h->normalizer);
    hf_steps_free(&h->pre);
    hf_steps_free(&h->decoder);
    for (size_t i = 0; i < h->ntmpl; i++) free(h->tmpl[i].ids);
    free(h->tmpl);
    hf_pieces_free(&h->a);
    hf_pieces_free(&h->b);
    free(h->nbuf.data);
    mg_strmap_free(&h->cache);
    mg_ids_free(&h->cache_ids);
    free(h->sym_c);
    free(h->sym_prev);
    free(h->sym_next);
    free(h->sym_len);
    free(h->heap);
    free(h);
}

static const mg_tok_ops hf_ops = {hf_encode, hf_decode_ids, hf_destroy};

/* ---- loading ---------------------------------------------------------------------------- */

static const char *jstr(json_t *o, const char *key) {
    json_t *v = json_object_get(o, key);
    return json_is_string(v) ? json_string_value(v) : NULL;
}

static int jbool(json_t *o, const char *key, int dflt) {
    json_t *v = json_object_get(o, key);
    return json_is_boolean(v) ? json_is_true(v) : dflt;
}

static char *dup_opt(const char *s, int *oom) {
    if (!s) return NULL;
    char *d = strdup(s);
    if (!d) *oom = 1;
    return d;
}

static int load_model(hf *h, json_t *m, const char *path, mg_error *err) {
    const char *type = jstr(m, "type");
    json_t *vocab = json_object_get(m, "vocab"), *merges = json_object_get(m, "merges");
    if (!json_is_object(m)) return mg_error_set(err, MG_ERR_INVALID, "%s has no \"model\" object", path);
    if (type && strcmp(type, "BPE"))
        return mg_error_set(err, MG_ERR_UNSUPPORTED, "%s: the model type \"%s\" is not supported (mgraph reads BPE models)",
                            path, type);
    if (!json_is_object(vocab) || !json_is_array(merges))
        return mg_error_set(err, MG_ERR_INVALID, "%s: the BPE model needs a \"vocab\" object and a \"merges\" list", path);
    json_t *dropout = json_object_get(m, "dropout");
    if (json_is_number(dropout) && json_number_value(dropout) > 0)
        return mg_error_set(err, MG_ERR_UNSUPPORTED, "%s: BPE dropout %g makes encoding random; mgraph encodes without it",
                            path, json_number_value(dropout));
    int oom = 0;
    h->unk = dup_opt(jstr(m, "unk_token"), &oom);
    h->csp = dup_opt(jstr(m, "continuing_subword_prefix"), &oom);
    h->eows = dup_opt(jstr(m, "end_of_word_suffix"), &oom);
    if (oom) return nomem(err);
    h->byte_fallback = jbool(m, "byte_fallback", 0);
    h->fuse_unk = jbool(m, "fuse_unk", 0);
    h->ignore_merges = jbool(m, "ignore_merges", 0);
    size_t nv = json_object_size(vocab);
    if (nv == 0) return mg_error_set(err, MG_ERR_INVALID, "%s: the vocabulary is empty", path);
    if (mg_strmap_init(&h->vocab, nv)) return nomem(err);
    const char *key;
    json_t *val;
    int64_t maxid = -1;
    json_object_foreach(vocab, key, val) {
        json_int_t id = json_is_integer(val) ? json_integer_value(val) : -1;
        if (id < 0 || id >= (1 << 30))
            return mg_error_set(err, MG_ERR_INVALID, "%s: vocabulary entry \"%.80s\" has no valid id", path, key);
        if (mg_strmap_put(&h->vocab, key, strlen(key), (uint64_t)id)) return nomem(err);
        if (id > maxid) maxid = id;
    }
    h->nid = (size_t)maxid + 1;
    h->id_str = calloc(h->nid, sizeof *h->id_str);
    h->id_len = calloc(h->nid, sizeof *h->id_len);
    if (!h->id_str || !h->id_len) return nomem(err);
    json_object_foreach(vocab, key, val) {
        size_t id = (size_t)json_integer_value(val);
        free(h->id_str[id]); /* two strings for one id: the later one decodes, as the library's map */
        if (!(h->id_str[id] = strdup(key))) return nomem(err);
        h->id_len[id] = strlen(key);
    }
    for (int b = 0; b < 256; b++) {
        char code[8];
        snprintf(code, sizeof code, "<0x%02X>", b);
        if (!vocab_get(h, code, 6, &h->byte_tok[b])) h->byte_tok[b] = -1;
    }
    size_t nm = json_array_size(merges);
    if (mg_u64map_init(&h->merges, nm ? nm : 1)) return nomem(err);
    size_t pl = h->csp ? strlen(h->csp) : 0;
    mg_buf joined = {0};
    int rc = MG_OK;
    for (size_t i = 0; i < nm && !rc; i++) {
        json_t *e = json_array_get(merges, i);
        const char *a = NULL, *b = NULL;
        size_t la = 0, lb = 0;
        if (json_is_string(e)) { /* "a b" (files before tokenizers 0.20) */
            const char *s = json_string_value(e), *sp = strchr(s, ' ');
            if (sp && !strchr(sp + 1, ' ')) {
                a = s;
                la = (size_t)(sp - s);
                b = sp + 1;
                lb = strlen(b);
            }
        } else if (json_is_array(e) && json_array_size(e) == 2 && json_is_string(json_array_get(e, 0)) &&
                   json_is_string(json_array_get(e, 1))) {
            a = json_string_value(json_array_get(e, 0));
            b = json_string_value(json_array_get(e, 1));
            la = strlen(a);
            lb = strlen(b);
        }
        if (!a) {
            rc = mg_error_set(err, MG_ERR_INVALID, "%s: merge %zu is not \"a b\" or [a, b]", path, i);
            break;
        }
        int32_t ia, ib, im;
        joined.len = 0;
        size_t skip = lb >= pl ? pl : lb; /* the library slices the prefix's length off b */
        if (mg_buf_append(&joined, a, la) || mg_buf_append(&joined, b + skip, lb - skip)) {
            rc = nomem(err);
            break;
        }
        if (!vocab_get(h, a, la, &ia) || !vocab_get(h, b, lb, &ib) || !vocab_get(h, joined.data, joined.len, &im)) {
            rc = mg_error_set(err, MG_ERR_INVALID, "%s: merge %zu (\"%.*s\" \"%.*s\") uses or makes a token missing from "
                                                   "the vocabulary",
                              path, i, (int)(la > 60 ? 60 : la), a, (int)(lb > 60 ? 60 : lb), b);
            break;
        }
        /* a repeated pair: the later merge wins, as the library's map collects them */
        if (mg_u64map_put(&h->merges, (uint64_t)(uint32_t)ia << 32 | (uint32_t)ib, (uint64_t)i << 32 | (uint32_t)im))
            rc = nomem(err);
    }
    free(joined.data);
    return rc;
}

/* AddedVocabulary::add_tokens in file order: the id of a string the model or an earlier
 * added token knows, else the next one after the model and the added tokens. */
static int load_added(hf *h, json_t *list, const char *path, mg_error *err) {
    if (!list || json_is_null(list)) return MG_OK;
    if (!json_is_array(list)) return mg_error_set(err, MG_ERR_INVALID, "%s: \"added_tokens\" is not a list", path);
    size_t n = json_array_size(list);
    h->added = calloc(n ? n : 1, sizeof *h->added);
    if (!h->added) return nomem(err);
    int64_t model_size = (int64_t)h->vocab.count, max_added = -1;
    for (size_t i = 0; i < n; i++) {
        json_t *e = json_array_get(list, i);
        const char *content = jstr(e, "content");
        if (!json_is_object(e) || !content)
            return mg_error_set(err, MG_ERR_INVALID, "%s: added token %zu has no \"content\"", path, i);
        if (!content[0]) continue;
        added_tok t = {0};
        t.special = jbool(e, "special", 0);
        t.normalized = jbool(e, "normalized", !t.special);
        t.single_word = jbool(e, "single_word", 0);
        t.lstrip = jbool(e, "lstrip", 0);
        t.rstrip = jbool(e, "rstrip", 0);
        int32_t id = -1;
        size_t clen = strlen(content);
        for (size_t k = 0; k < h->nadded; k++) /* an added token's string again: its id, its new properties */
            if (!strcmp(h->added[k].content, content)) id = h->added[k].id;
        if (id < 0 && !vocab_get(h, content, clen, &id)) {
            int64_t next = max_added < 0 ? model_size : (max_added >= model_size || model_size == 0 ? max_added + 1 : model_size);
            if (next >= (1 << 30)) return mg_error_set(err, MG_ERR_INVALID, "%s: too many added tokens", path);
            id = (int32_t)next;
        }
        if (id > max_added) max_added = id;
        t.id = id;
        if (!(t.content = strdup(content))) return nomem(err);
        t.len = clen;
        h->added[h->nadded++] = t;
    }
    return MG_OK;
}

/* The normalized=true tokens match their normalized form; every added token decodes as
 * that form (AddedVocabulary's normalized_cache) or its content. */
static int finish_added(hf *h, mg_error *err) {
    size_t nid = h->nid;
    for (size_t i = 0; i < h->nadded; i++)
        if ((size_t)h->added[i].id + 1 > nid) nid = (size_t)h->added[i].id + 1;
    if (nid > h->nid) {
        char **s = realloc(h->id_str, nid * sizeof *s);
        if (s) h->id_str = s;
        size_t *l = realloc(h->id_len, nid * sizeof *l);
        if (l) h->id_len = l;
        if (!s || !l) return nomem(err);
        for (size_t i = h->nid; i < nid; i++) s[i] = NULL, l[i] = 0;
        h->nid = nid;
    }
    if (!(h->added_str = calloc(h->nid, sizeof *h->added_str))) return nomem(err);
    for (size_t i = 0; i < h->nadded; i++) {
        added_tok *t = &h->added[i];
        if (t->normalized && h->normalizer.n) {
            int rc = hf_normalize(&h->normalizer, t->content, t->len, &h->nbuf, err);
            if (rc) return rc;
            char *c = strdup(h->nbuf.data ? h->nbuf.data : "");
            if (!c) return nomem(err);
            free(t->content);
            t->content = c;
            t->len = strlen(c);
        }
        free(h->added_str[t->id]);
        if (!(h->added_str[t->id] = strdup(t->content))) return nomem(err);
    }
    if (build_set(h, &h->raw, 0) || build_set(h, &h->norm, 1)) return nomem(err);
    return MG_OK;
}

static int token_id(hf *h, const char *s, int32_t *id) {
    for (size_t i = 0; i < h->nadded; i++)
        if (!strcmp(h->added[i].content, s)) {
            *id = h->added[i].id;
            return 1;
        }
    return vocab_get(h, s, strlen(s), id);
}

/* A template's special token: special_tokens[name].ids */
static int tmpl_special(hf *h, json_t *specials, const char *name, tmpl_item *it, const char *path, mg_error *err) {
    json_t *sp = json_object_get(specials, name), *ids = json_object_get(sp, "ids");
    if (!json_is_array(ids))
        return mg_error_set(err, MG_ERR_INVALID, "%s: the template's special token \"%s\" is not in special_tokens", path,
                            name);
    it->n = json_array_size(ids);
    it->ids = malloc((it->n ? it->n : 1) * sizeof *it->ids);
    if (!it->ids) return nomem(err);
    for (size_t i = 0; i < it->n; i++) {
        json_t *v = json_array_get(ids, i);
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= (1 << 30))
            return mg_error_set(err, MG_ERR_INVALID, "%s: special token \"%s\" has a bad id", path, name);
        it->ids[i] = (int32_t)json_integer_value(v);
    }
    (void)h;
    return MG_OK;
}

static int tmpl_add(hf *h, tmpl_item **out) {
    tmpl_item *nv = realloc(h->tmpl, (h->ntmpl + 1) * sizeof *nv);
    if (!nv) return -1;
    h->tmpl = nv;
    *out = &nv[h->ntmpl++];
    memset(*out, 0, sizeof **out);
    return 0;
}

/* One processor's single-sequence template appended to h->tmpl; the sequence is a NULL
 * item. Processors of a Sequence apply one after the other, so their templates nest. */
static int load_processor(hf *h, json_t *p, const char *path, int depth, mg_error *err) {
    if (!p || json_is_null(p)) return MG_OK;
    const char *type = jstr(p, "type");
    if (!type) return mg_error_set(err, MG_ERR_INVALID, "%s: the post_processor has no type", path);
    if (!strcmp(type, "ByteLevel")) return MG_OK; /* offsets only */
    if (!strcmp(type, "Sequence")) {
        json_t *list = json_object_get(p, "processors");
        if (!json_is_array(list) || depth > 8)
            return mg_error_set(err, MG_ERR_INVALID, "%s: a bad post_processor Sequence", path);
        size_t i;
        json_t *e;
        json_array_foreach(list, i, e) {
            int rc = load_processor(h, e, path, depth + 1, err);
            if (rc) return rc;
        }
        return MG_OK;
    }
    /* the current template is wrapped: before-items, the old template, after-items */
    tmpl_item *old = h->tmpl;
    size_t nold = h->ntmpl;
    h->tmpl = NULL;
    h->ntmpl = 0;
    int rc = MG_OK;
    tmpl_item *it;
    if (!strcmp(type, "TemplateProcessing")) {
        json_t *single = json_object_get(p, "single"), *specials = json_object_get(p, "special_tokens");
        if (!json_is_array(single)) rc = mg_error_set(err, MG_ERR_INVALID, "%s: TemplateProcessing has no \"single\"", path);
        size_t i;
        json_t *e;
        int seen = 0;
        json_array_foreach(single, i, e) {
            if (rc) break;
            json_t *st = json_object_get(e, "SpecialToken"), *sq = json_object_get(e, "Sequence");
            if (st) {
                if (tmpl_add(h, &it)) rc = nomem(err);
                else rc = tmpl_special(h, specials, jstr(st, "id") ? jstr(st, "id") : "", it, path, err);
            } else if (sq && !seen) {
                seen = 1;
                for (size_t k = 0; k < (nold ? nold : 1) && !rc; k++) {
                    if (tmpl_add(h, &it)) rc = nomem(err);
                    else if (nold) *it = old[k], old[k].ids = NULL;
                }
            } else {
                rc = mg_error_set(err, MG_ERR_INVALID, "%s: a TemplateProcessing item is neither SpecialToken nor one "
                                                       "Sequence",
                                  path);
            }
        }
        if (!rc && !seen) rc = mg_error_set(err, MG_ERR_INVALID, "%s: TemplateProcessing's single has no Sequence", path);
    } else if (!strcmp(type, "RobertaProcessing") || !strcmp(type, "BertProcessing")) {
        json_t *cls = json_object_get(p, "cls"), *sep = json_object_get(p, "sep");
        json_t *ci = json_array_get(cls, 1), *si = json_array_get(sep, 1);
        if (!json_is_integer(ci) || !json_is_integer(si))
            rc = mg_error_set(err, MG_ERR_INVALID, "%s: %s needs cls and sep as [token, id]", path, type);
        for (int part = 0; part < 3 && !rc; part++) {
            if (part == 1) {
                for (size_t k = 0; k < (nold ? nold : 1) && !rc; k++) {
                    if (tmpl_add(h, &it)) rc = nomem(err);
                    else if (nold) *it = old[k], old[k].ids = NULL;
                }
                continue;
            }
            if (tmpl_add(h, &it) || !(it->ids = malloc(sizeof *it->ids))) {
                rc = nomem(err);
                break;
            }
            it->n = 1;
            it->ids[0] = (int32_t)json_integer_value(part == 0 ? ci : si);
        }
    } else {
        rc = mg_error_set(err, MG_ERR_UNSUPPORTED,
                          "%s: the post_processor type \"%s\" is not supported (mgraph reads TemplateProcessing, "
                          "ByteLevel, RobertaProcessing, BertProcessing and Sequence)",
                          path, type);
    }
    for (size_t k = 0; k < nold; k++) free(old[k].ids);
    free(old);
    return rc;
}

/* tokenizer_config.json's (or special_tokens_map.json's) token: a string or an
 * AddedToken object with "content". */
static const char *config_token(json_t *cfg, const char *key) {
    json_t *v = json_object_get(cfg, key);
    if (json_is_string(v)) return json_string_value(v);
    return jstr(v, "content");
}

static int read_json(const char *path, json_t **out, mg_error *err) {
    json_error_t jerr;
    FILE *f = NULL;
    int rc = mg_input_fopen(path, "tokenizer file", &f, err);
    if (rc) return rc;
    *out = json_loadf(f, 0, &jerr);
    fclose(f);
    if (!*out)
        return mg_error_set(err, MG_ERR_INVALID, "cannot read %s: %s (line %d, column %d)", path, jerr.text, jerr.line,
                            jerr.column);
    if (!json_is_object(*out)) {
        json_decref(*out);
        *out = NULL;
        return mg_error_set(err, MG_ERR_INVALID, "%s is not a JSON object", path);
    }
    return MG_OK;
}

static int special_ids(hf *h, mg_tokenizer *t, const char *dir, mg_error *err) {
    static const char *names[] = {"tokenizer_config.json", "special_tokens_map.json"};
    for (int f = 0; f < 2; f++) {
        char path[4300]; /* dir is shorter than 4096 (mg_tok_hf_init) */
        struct stat st;
        snprintf(path, sizeof path, "%s/%s", dir, names[f]);
        if (stat(path, &st) != 0) continue;
        json_t *cfg;
        int rc = read_json(path, &cfg, err);
        if (rc) return rc;
        const char *eos = config_token(cfg, "eos_token"), *bos = config_token(cfg, "bos_token");
        if (!eos) eos = config_token(cfg, "sep_token"); /* Megatron: eos = sep when there is no eos */
        if (!bos) bos = config_token(cfg, "cls_token");
        int32_t id;
        if (eos && t->eod < 0) {
            if (!token_id(h, eos, &id)) rc = mg_error_set(err, MG_ERR_INVALID, "%s: eos_token \"%s\" is not a token", path, eos);
            else t->eod = id;
        }
        if (!rc && bos && t->bos < 0) {
            if (!token_id(h, bos, &id)) rc = mg_error_set(err, MG_ERR_INVALID, "%s: bos_token \"%s\" is not a token", path, bos);
            else t->bos = id;
        }
        json_decref(cfg);
        if (rc) return rc;
    }
    return MG_OK;
}

int mg_tok_hf_init(mg_tokenizer *t, mg_error *err) {
    hf *h = calloc(1, sizeof *h);
    if (!h) return nomem(err);
    t->ops = &hf_ops;
    t->impl = h;
    h->add_special = !t->cfg.hf_no_special_tokens;
    /* a folder holds tokenizer.json; a file is tokenizer.json, its folder the rest */
    char path[4200], dir[4200];
    struct stat st;
    if (strlen(t->model_file) > 4000)
        return mg_error_set(err, MG_ERR_INVALID, "HuggingFaceTokenizer: the --tokenizer-model path is too long");
    if (stat(t->model_file, &st) == 0 && S_ISDIR(st.st_mode)) {
        snprintf(dir, sizeof dir, "%s", t->model_file);
        snprintf(path, sizeof path, "%s/tokenizer.json", t->model_file);
        if (stat(path, &st) != 0)
            return mg_error_set(err, MG_ERR_IO, "HuggingFaceTokenizer: %s has no tokenizer.json (mgraph reads the fast "
                                                "tokenizer's file)",
                                t->model_file);
    } else {
        snprintf(path, sizeof path, "%s", t->model_file);
        snprintf(dir, sizeof dir, "%s", t->model_file);
        char *slash = strrchr(dir, '/');
        if (slash) *slash = '\0';
        else snprintf(dir, sizeof dir, ".");
    }
    json_t *root;
    int rc = read_json(path, &root, err);
    if (rc) return rc;
    rc = load_model(h, json_object_get(root, "model"), path, err);
    if (!rc) rc = hf_normalizer_load(json_object_get(root, "normalizer"), &h->normalizer, err);
    if (!rc) rc = hf_pre_tokenizer_load(json_object_get(root, "pre_tokenizer"), &h->pre, err);
    if (!rc) rc = hf_decoder_load(json_object_get(root, "decoder"), &h->decoder, err);
    if (!rc) rc = load_added(h, json_object_get(root, "added_tokens"), path, err);
    if (!rc) rc = finish_added(h, err);
    if (!rc) rc = load_processor(h, json_object_get(root, "post_processor"), path, 0, err);
    json_decref(root);
    for (size_t k = 0; !rc && k < h->ntmpl; k++)
        for (size_t j = 0; j < h->tmpl[k].n; j++)
            if ((size_t)h->tmpl[k].ids[j] >= h->nid)
                rc = mg_error_set(err, MG_ERR_INVALID, "%s: the template's id %d is past the vocabulary (%zu)", path,
                                  h->tmpl[k].ids[j], h->nid);
    if (!rc) rc = special_ids(h, t, dir, err);
    if (!rc && mg_strmap_init(&h->cache, 1 << 12)) rc = nomem(err);
    if (rc) return rc;
    /* transformers' len(tokenizer): the model's tokens and the added ones not among them */
    size_t distinct = h->vocab.count;
    for (size_t i = 0; i < h->nadded; i++) {
        int32_t id;
        int dup = vocab_get(h, h->added[i].content, h->added[i].len, &id);
        for (size_t k = 0; k < i && !dup; k++) dup = h->added[k].id == h->added[i].id;
        distinct += !dup;
    }
    t->vocab = (int64_t)(distinct > h->nid ? distinct : h->nid);
    return MG_OK;
}

/* Normalizers, pre-tokenizers and decoders of Hugging Face tokenizer.json files, with
 * the semantics of the `tokenizers` library (its Rust sources are the reference):
 *
 *   normalizers     NFC NFD NFKC NFKD (utf8proc), Prepend, Replace, Strip, Sequence
 *   pre-tokenizers  ByteLevel, Split, Metaspace, Digits, WhitespaceSplit, Whitespace, Sequence
 *   decoders        ByteLevel, Metaspace, Replace, ByteFallback, Fuse, Strip, BPEDecoder, Sequence
 *
 * what Llama 3, Qwen2/3, DeepSeek-V3, Mistral and GPT-NeoX use. Anything else is
 * refused when the file is read, naming the type. */
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "io/tok_hf_internal.h"

typedef enum {
    /* normalizers */
    N_UNICODE, N_PREPEND, N_REPLACE, N_STRIP,
    /* pre-tokenizers */
    P_BYTE_LEVEL, P_SPLIT, P_METASPACE, P_DIGITS, P_WS_SPLIT, P_WHITESPACE,
    /* decoders */
    D_BYTE_LEVEL, D_METASPACE, D_REPLACE, D_BYTE_FALLBACK, D_FUSE, D_STRIP, D_BPE
} step_kind;

enum { PREPEND_ALWAYS, PREPEND_FIRST, PREPEND_NEVER };

struct hf_step {
    step_kind kind;
    int flags;           /* N_UNICODE: utf8proc options */
    char *str;           /* Prepend / Replace content; Metaspace replacement; BPEDecoder suffix */
    size_t str_len;
    uint32_t cp;         /* Metaspace replacement / Strip content (one character) */
    void *re, *md;       /* Split / Replace pattern; ByteLevel / Whitespace regex */
    int behavior, invert;
    int add_prefix_space, use_regex, prepend_scheme, split, individual_digits;
    long start, stop;    /* Strip */
    char bl_ch[256][2];  /* ByteLevel: the UTF-8 of each byte's character (1 or 2 bytes) */
    unsigned char bl_len[256];
    int16_t bl_byte[324]; /* ByteLevel decoder: the byte of each such character, or -1 */
};

/* ---- pieces ------------------------------------------------------------------------------ */

int hf_pieces_push(hf_pieces *p, const char *s, size_t len, int32_t id, int first) {
    if (p->n == p->cap) {
        size_t nc = p->cap ? 2 * p->cap : 64;
        hf_piece *nv = realloc(p->v, nc * sizeof *nv);
        if (!nv) return -1;
        p->v = nv;
        p->cap = nc;
    }
    size_t off = p->text.len;
    if (mg_buf_append(&p->text, s, len)) return -1;
    p->v[p->n++] = (hf_piece){off, len, id, first};
    return 0;
}

void hf_pieces_reset(hf_pieces *p) {
    p->n = 0;
    p->text.len = 0;
}

void hf_pieces_free(hf_pieces *p) {
    free(p->v);
    free(p->text.data);
    memset(p, 0, sizeof *p);
}

static void swap_pieces(hf_pieces *a, hf_pieces *b) {
    hf_pieces t = *a;
    *a = *b;
    *b = t;
}

static int nomem(mg_error *err) { return mg_error_set(err, MG_ERR_NOMEM, "out of memory tokenizing"); }

/* ---- splitting ------------------------------------------------------------------------- */

typedef struct span {
    size_t s, e;
    int match;
} span;

typedef struct spans {
    span *v;
    size_t n, cap;
} spans;

static int spans_push(spans *m, size_t s, size_t e, int match) {
    if (m->n == m->cap) {
        size_t nc = m->cap ? 2 * m->cap : 32;
        span *nv = realloc(m->v, nc * sizeof *nv);
        if (!nv) return -1;
        m->v = nv;
        m->cap = nc;
    }
    m->v[m->n++] = (span){s, e, match};
    return 0;
}

/* The delimiter behaviours of NormalizedString::split over spans covering s; empty
 * pieces are dropped, as PreTokenizedString::split does. */
static int apply_behavior(hf_pieces *out, const char *s, int first, spans *m, int behavior, int invert) {
    if (invert)
        for (size_t i = 0; i < m->n; i++) m->v[i].match = !m->v[i].match;
    size_t k = 0; /* spans kept, merged in place */
    int prev = 0;
    if (behavior == HF_MERGED_NEXT) {
        /* folded from the end: a match joins the piece after it */
        size_t w = m->n;
        for (size_t i = m->n; i-- > 0;) {
            span c = m->v[i];
            if (c.match && !prev && w < m->n) m->v[w].s = c.s;
            else m->v[--w] = (span){c.s, c.e, 0};
            prev = c.match;
        }
        memmove(m->v, m->v + w, (m->n - w) * sizeof *m->v);
        k = m->n - w;
    } else {
        for (size_t i = 0; i < m->n; i++) {
            span c = m->v[i];
            if (behavior == HF_REMOVED) {
                if (!c.match) m->v[k++] = c;
                continue;
            }
            int join = behavior == HF_CONTIGUOUS ? c.match == prev && k > 0 && i > 0
                       : behavior == HF_MERGED_PREV ? c.match && !prev && k > 0
                                                     : 0;
            if (join) m->v[k - 1].e = c.e;
            else m->v[k++] = (span){c.s, c.e, 0};
            prev = c.match;
        }
    }
    for (size_t i = 0; i < k; i++)
        if (m->v[i].e > m->v[i].s && hf_pieces_push(out, s + m->v[i].s, m->v[i].e - m->v[i].s, -1, first && m->v[i].s == 0))
            return -1;
    return 0;
}

/* Oniguruma's find_iter: an empty match right where the previous match ended is skipped
 * (the search moves one character on). */
static int regex_spans(spans *m, const char *s, size_t n, void *re, void *md, mg_error *err) {
    m->n = 0;
    if (n == 0) return spans_push(m, 0, 0, 0) ? nomem(err) : MG_OK;
    size_t pos = 0, prev = 0;
    int have_last = 0;
    size_t last_end = 0;
    while (pos <= n) {
        size_t ms, me;
        int f = mg_regex_find(re, md, s, n, pos, &ms, &me, err);
        if (f < 0) return MG_ERR_RUNTIME;
        if (f == 0) break;
        if (me == ms && have_last && last_end == me) {
            if (pos >= n) break;
            size_t l;
            mg_utf8_next(s + pos, n - pos, &l);
            pos += l;
            continue;
        }
        pos = me;
        have_last = 1;
        last_end = me;
        if (prev != ms && spans_push(m, prev, ms, 0)) return nomem(err);
        if (spans_push(m, ms, me, 1)) return nomem(err);
        prev = me;
        if (me == ms) { /* an empty match: the next search starts here, and skips it */
        }
    }
    if (prev != n && spans_push(m, prev, n, 0)) return nomem(err);
    return MG_OK;
}

int hf_split_regex(hf_pieces *out, const char *s, size_t n, int first, void *re, void *md, int behavior, int invert,
                   mg_error *err) {
    spans m = {0};
    int rc = regex_spans(&m, s, n, re, md, err);
    if (!rc && apply_behavior(out, s, first, &m, behavior, invert)) rc = nomem(err);
    free(m.v);
    return rc;
}

/* A character predicate as a pattern: every character for which it holds is a match. */
static int char_spans(spans *m, const char *s, size_t n, int (*pred)(uint32_t, const hf_step *), const hf_step *st) {
    m->n = 0;
    if (n == 0) return spans_push(m, 0, 0, 0);
    size_t last = 0, i = 0;
    while (i < n) {
        size_t l;
        int32_t c = mg_utf8_next(s + i, n - i, &l);
        if (c >= 0 && pred((uint32_t)c, st)) {
            if (last < i && spans_push(m, last, i, 0)) return -1;
            if (spans_push(m, i, i + l, 1)) return -1;
            last = i + l;
        }
        i += l;
    }
    if (n > last && spans_push(m, last, n, 0)) return -1;
    return 0;
}

static int is_ws(uint32_t c, const hf_step *st) {
    (void)st;
    return mg_is_white_space(c);
}

static int is_replacement(uint32_t c, const hf_step *st) { return c == st->cp; }

/* Rust's char::is_numeric: the general categories Nd, Nl, No. */
static int is_numeric(uint32_t c, const hf_step *st) {
    (void)st;
    utf8proc_category_t k = utf8proc_category((utf8proc_int32_t)c);
    return k == UTF8PROC_CATEGORY_ND || k == UTF8PROC_CATEGORY_NL || k == UTF8PROC_CATEGORY_NO;
}

/* ---- reading the JSON ------------------------------------------------------------------- */

static const char *jstr(json_t *o, const char *key) {
    json_t *v = json_object_get(o, key);
    return json_is_string(v) ? json_string_value(v) : NULL;
}

static int jbool(json_t *o, const char *key, int dflt) {
    json_t *v = json_object_get(o, key);
    return json_is_boolean(v) ? json_is_true(v) : dflt;
}

static int steps_add(hf_steps *s, hf_step **out) {
    hf_step *nv = realloc(s->v, (s->n + 1) * sizeof *nv);
    if (!nv) return -1;
    s->v = nv;
    *out = &s->v[s->n++];
    memset(*out, 0, sizeof **out);
    return 0;
}

void hf_steps_free(hf_steps *s) {
    for (size_t i = 0; i < s->n; i++) {
        free(s->v[i].str);
        mg_regex_match_data_free(s->v[i].md);
        mg_regex_free(s->v[i].re);
    }
    free(s->v);
    s->v = NULL;
    s->n = 0;
}

static int set_str(hf_step *st, const char *s, const char *what, mg_error *err) {
    if (!s) return mg_error_set(err, MG_ERR_INVALID, "tokenizer.json: %s lacks its string", what);
    st->str_len = strlen(s);
    st->str = strdup(s);
    return st->str ? MG_OK : mg_error_set(err, MG_ERR_NOMEM, "out of memory reading tokenizer.json");
}

/* One character (Metaspace's replacement, Strip's content). */
static int set_char(hf_step *st, const char *s, const char *what, mg_error *err) {
    int rc = set_str(st, s, what, err);
    if (rc) return rc;
    size_t l;
    int32_t c = st->str_len ? mg_utf8_next(st->str, st->str_len, &l) : -1;
    if (c < 0 || l != st->str_len)
        return mg_error_set(err, MG_ERR_INVALID, "tokenizer.json: %s must be one character, not \"%s\"", what, s);
    st->cp = (uint32_t)c;
    return MG_OK;
}

/* A Split / Replace pattern: {"String": s} or {"Regex": r}. */
static int set_pattern(hf_step *st, json_t *pat, const char *what, mg_error *err) {
    const char *s = jstr(pat, "String"), *r = jstr(pat, "Regex");
    if (!s && !r) return mg_error_set(err, MG_ERR_INVALID, "tokenizer.json: %s's pattern is neither String nor Regex", what);
    const char *p = s ? s : r;
    st->re = mg_regex_compile(p, strlen(p), s != NULL, what, err);
    if (!st->re) return err->code;
    st->md = mg_regex_match_data(st->re);
    return st->md ? MG_OK : mg_error_set(err, MG_ERR_NOMEM, "out of memory");
}

static int set_regex(hf_step *st, const char *p, const char *what, mg_error *err) {
    st->re = mg_regex_compile(p, strlen(p), 0, what, err);
    if (!st->re) return err->code;
    st->md = mg_regex_match_data(st->re);
    return st->md ? MG_OK : mg_error_set(err, MG_ERR_NOMEM, "out of memory");
}

static int prepend_scheme(json_t *j, int *out, mg_error *err) {
    const char *s = jstr(j, "prepend_scheme");
    if (!s) { /* files written before tokenizers 0.19 say add_prefix_space */
        *out = jbool(j, "add_prefix_space", 1) ? PREPEND_ALWAYS : PREPEND_NEVER;
        return MG_OK;
    }
    if (!strcmp(s, "always")) *out = PREPEND_ALWAYS;
    else if (!strcmp(s, "first")) *out = PREPEND_FIRST;
    else if (!strcmp(s, "never")) *out = PREPEND_NEVER;
    else return mg_error_set(err, MG_ERR_INVALID, "tokenizer.json: Metaspace prepend_scheme \"%s\" is unknown", s);
    return MG_OK;
}

/* GPT-2's bytes_to_unicode: the character standing for each byte, both ways. */
static void byte_chars(hf_step *st) {
    int n = 0;
    for (int i = 0; i < 324; i++) st->bl_byte[i] = -1;
    for (int b = 0; b < 256; b++) {
        int printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        uint32_t cp = printable ? (uint32_t)b : (uint32_t)(256 + n++);
        st->bl_byte[cp] = (int16_t)b;
        if (cp < 0x80) {
            st->bl_ch[b][0] = (char)cp;
            st->bl_len[b] = 1;
        } else {
            st->bl_ch[b][0] = (char)(0xC0 | cp >> 6);
            st->bl_ch[b][1] = (char)(0x80 | (cp & 0x3F));
            st->bl_len[b] = 2;
        }
    }
}

/* GPT-2's pre-tokenisation regex, which ByteLevel with use_regex applies. */
static const char GPT2_RE[] = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

typedef enum { K_NORMALIZER, K_PRE, K_DECODER } load_kind;

static int load_step(json_t *j, load_kind lk, hf_steps *out, int depth, mg_error *err) {
    static const char *what[] = {"normalizer", "pre_tokenizer", "decoder"};
    if (json_is_null(j) || !j) return MG_OK;
    const char *type = jstr(j, "type");
    if (!json_is_object(j) || !type)
        return mg_error_set(err, MG_ERR_INVALID, "tokenizer.json: the %s is not an object with a \"type\"", what[lk]);
    if (!strcmp(type, "Sequence")) {
        json_t *list = json_object_get(j, lk == K_NORMALIZER ? "normalizers" : lk == K_PRE ? "pretokenizers" : "decoders");
        if (!json_is_array(list))
            return mg_error_set(err, MG_ERR_INVALID, "tokenizer.json: the %s Sequence has no list", what[lk]);
        if (depth > 8) return mg_error_set(err, MG_ERR_INVALID, "tokenizer.json: %s Sequences nest too deep", what[lk]);
        size_t i;
        json_t *e;
        json_array_foreach(list, i, e) {
            int rc = load_step(e, lk, out, depth + 1, err);
            if (rc) return rc;
        }
        return MG_OK;
    }
    hf_step *st;
    if (steps_add(out, &st)) return mg_error_set(err, MG_ERR_NOMEM, "out of memory reading tokenizer.json");
    char label[96];
    snprintf(label, sizeof label, "tokenizer.json's %s %s", type, what[lk]);
    if (lk == K_NORMALIZER) {
        if (!strcmp(type, "NFC")) st->flags = UTF8PROC_STABLE | UTF8PROC_COMPOSE;
        else if (!strcmp(type, "NFD")) st->flags = UTF8PROC_STABLE | UTF8PROC_DECOMPOSE;
        else if (!strcmp(type, "NFKC")) st->flags = UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_COMPAT;
        else if (!strcmp(type, "NFKD")) st->flags = UTF8PROC_STABLE | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT;
        if (st->flags) {
            st->kind = N_UNICODE;
            return MG_OK;
        }
        if (!strcmp(type, "Prepend")) {
            st->kind = N_PREPEND;
            return set_str(st, jstr(j, "prepend"), label, err);
        }
        if (!strcmp(type, "Replace")) {
            st->kind = N_REPLACE;
            int rc = set_str(st, jstr(j, "content"), label, err);
            return rc ? rc : set_pattern(st, json_object_get(j, "pattern"), label, err);
        }
        if (!strcmp(type, "Strip")) {
            st->kind = N_STRIP;
            st->start = jbool(j, "strip_left", 1);
            st->stop = jbool(j, "strip_right", 1);
            return MG_OK;
        }
    } else if (lk == K_PRE) {
        if (!strcmp(type, "ByteLevel")) {
            st->kind = P_BYTE_LEVEL;
            byte_chars(st);
            st->add_prefix_space = jbool(j, "add_prefix_space", 1);
            st->use_regex = jbool(j, "use_regex", 1);
            return st->use_regex ? set_regex(st, GPT2_RE, label, err) : MG_OK;
        }
        if (!strcmp(type, "Split")) {
            static const char *names[] = {"Removed", "Isolated", "MergedWithPrevious", "MergedWithNext", "Contiguous"};
            const char *b = jstr(j, "behavior");
            st->kind = P_SPLIT;
            st->behavior = -1;
            for (int i = 0; b && i < 5; i++)
                if (!strcmp(b, names[i])) st->behavior = i;
            if (st->behavior < 0)
                return mg_error_set(err, MG_ERR_INVALID, "%s: unknown behavior \"%s\"", label, b ? b : "(none)");
            st->invert = jbool(j, "invert", 0);
            return set_pattern(st, json_object_get(j, "pattern"), label, err);
        }
        if (!strcmp(type, "Metaspace")) {
            st->kind = P_METASPACE;
            st->split = jbool(j, "split", 1);
            int rc = set_char(st, jstr(j, "replacement"), label, err);
            return rc ? rc : prepend_scheme(j, &st->prepend_scheme, err);
        }
        if (!strcmp(type, "Digits")) {
            st->kind = P_DIGITS;
            st->individual_digits = jbool(j, "individual_digits", 0);
            return MG_OK;
        }
        if (!strcmp(type, "WhitespaceSplit")) {
            st->kind = P_WS_SPLIT;
            return MG_OK;
        }
        if (!strcmp(type, "Whitespace")) {
            st->kind = P_WHITESPACE;
            return set_regex(st, "\\w+|[^\\w\\s]+", label, err);
        }
    } else {
        if (!strcmp(type, "ByteLevel")) {
            st->kind = D_BYTE_LEVEL;
            byte_chars(st);
            return MG_OK;
        }
        if (!strcmp(type, "Metaspace")) {
            st->kind = D_METASPACE;
            int rc = set_char(st, jstr(j, "replacement"), label, err);
            return rc ? rc : prepend_scheme(j, &st->prepend_scheme, err);
        }
        if (!strcmp(type, "Replace")) {
            st->kind = D_REPLACE;
            int rc = set_str(st, jstr(j, "content"), label, err);
            return rc ? rc : set_pattern(st, json_object_get(j, "pattern"), label, err);
        }
        if (!strcmp(type, "ByteFallback")) {
            st->kind = D_BYTE_FALLBACK;
            return MG_OK;
        }
        if (!strcmp(type, "Fuse")) {
            st->kind = D_FUSE;
            return MG_OK;
        }
        if (!strcmp(type, "Strip")) {
            st->kind = D_STRIP;
            json_t *a = json_object_get(j, "start"), *b = json_object_get(j, "stop");
            st->start = json_is_integer(a) ? (long)json_integer_value(a) : 0;
            st->stop = json_is_integer(b) ? (long)json_integer_value(b) : 0;
            if (st->start < 0 || st->stop < 0) return mg_error_set(err, MG_ERR_INVALID, "%s: negative start/stop", label);
            return set_char(st, jstr(j, "content"), label, err);
        }
        if (!strcmp(type, "BPEDecoder")) {
            st->kind = D_BPE;
            const char *s = jstr(j, "suffix");
            return set_str(st, s ? s : "</w>", label, err);
        }
    }
    return mg_error_set(err, MG_ERR_UNSUPPORTED,
                        "tokenizer.json: the %s type \"%s\" is not supported (mgraph reads the %s", what[lk], type,
                        lk == K_NORMALIZER ? "normalizers NFC, NFD, NFKC, NFKD, Prepend, Replace, Strip and Sequence)"
                        : lk == K_PRE      ? "pre-tokenizers ByteLevel, Split, Metaspace, Digits, WhitespaceSplit, "
                                             "Whitespace and Sequence)"
                                           : "decoders ByteLevel, Metaspace, Replace, ByteFallback, Fuse, Strip, "
                                             "BPEDecoder and Sequence)");
}

int hf_normalizer_load(json_t *j, hf_steps *out, mg_error *err) { return load_step(j, K_NORMALIZER, out, 0, err); }
int hf_pre_tokenizer_load(json_t *j, hf_steps *out, mg_error *err) { return load_step(j, K_PRE, out, 0, err); }
int hf_decoder_load(json_t *j, hf_steps *out, mg_error *err) { return load_step(j, K_DECODER, out, 0, err); }

int hf_has_byte_level(const hf_steps *pre) {
    for (size_t i = 0; i < pre->n; i++)
        if (pre->v[i].kind == P_BYTE_LEVEL) return 1;
    return 0;
}

/* ---- normalizing ------------------------------------------------------------------------- */

/* Replaces every match of re in in[0..n) by rep, into out. */
static int replace_all(void *re, void *md, const char *in, size_t n, const char *rep, size_t rl, mg_buf *out,
                       mg_error *err) {
    spans m = {0};
    int rc = regex_spans(&m, in, n, re, md, err);
    out->len = 0;
    for (size_t i = 0; !rc && i < m.n; i++) {
        int r = m.v[i].match ? mg_buf_append(out, rep, rl) : mg_buf_append(out, in + m.v[i].s, m.v[i].e - m.v[i].s);
        if (r) rc = nomem(err);
    }
    if (!rc && mg_buf_append(out, "", 0)) rc = nomem(err);
    free(m.v);
    return rc;
}

int hf_normalize(const hf_steps *s, const char *text, size_t n, mg_buf *out, mg_error *err) {
    mg_buf tmp = {0};
    out->len = 0;
    if (mg_buf_append(out, text, n)) return nomem(err);
    int rc = MG_OK;
    for (size_t k = 0; k < s->n && !rc; k++) {
        const hf_step *st = &s->v[k];
        tmp.len = 0;
        switch (st->kind) {
        case N_UNICODE: {
            /* utf8proc maps the whole string; ASCII is unchanged by every form */
            size_t i = 0;
            while (i < out->len && (unsigned char)out->data[i] < 0x80) i++;
            if (i == out->len) continue;
            utf8proc_uint8_t *dst = NULL;
            utf8proc_ssize_t l = utf8proc_map((const utf8proc_uint8_t *)out->data, (utf8proc_ssize_t)out->len, &dst,
                                              (utf8proc_option_t)st->flags);
            if (l < 0) {
                rc = l == UTF8PROC_ERROR_NOMEM ? nomem(err)
                                               : mg_error_set(err, MG_ERR_INVALID, "Unicode normalization failed: %s",
                                                              utf8proc_errmsg(l));
                break;
            }
            if (mg_buf_append(&tmp, dst, (size_t)l)) rc = nomem(err);
            free(dst);
            break;
        }
        case N_PREPEND:
            if (out->len == 0) continue;
            if (mg_buf_append(&tmp, st->str, st->str_len) || mg_buf_append(&tmp, out->data, out->len)) rc = nomem(err);
            break;
        case N_REPLACE:
            rc = replace_all(st->re, st->md, out->data, out->len, st->str, st->str_len, &tmp, err);
            break;
        case N_STRIP: {
            size_t a = 0, b = out->len, l;
            while (st->start && a < b) {
                int32_t c = mg_utf8_next(out->data + a, b - a, &l);
                if (c < 0 || !mg_is_white_space((uint32_t)c)) break;
                a += l;
            }
            while (st->stop && b > a) {
                size_t p = b - 1;
                while (p > a && ((unsigned char)out->data[p] & 0xC0) == 0x80) p--;
                int32_t c = mg_utf8_next(out->data + p, b - p, &l);
                if (c < 0 || !mg_is_white_space((uint32_t)c)) break;
                b = p;
            }
            if (mg_buf_append(&tmp, out->data + a, b - a)) rc = nomem(err);
            break;
        }
        default:
            break;
        }
        if (!rc) {
            mg_buf t = *out;
            *out = tmp;
            tmp = t;
        }
    }
    free(tmp.data);
    return rc;
}

/* ---- pre-tokenizing ---------------------------------------------------------------------- */

static int pre_one(const hf_step *st, const char *s, size_t n, int first, hf_pieces *out, mg_buf *scratch,
                   mg_error *err) {
    spans m = {0};
    int rc = MG_OK;
    switch (st->kind) {
    case P_BYTE_LEVEL: {
        scratch->len = 0;
        if (st->add_prefix_space && (n == 0 || s[0] != ' ') && mg_buf_append(scratch, " ", 1)) return nomem(err);
        if (mg_buf_append(scratch, s, n)) return nomem(err);
        hf_pieces parts = {0};
        if (st->use_regex) rc = hf_split_regex(&parts, scratch->data, scratch->len, first, st->re, st->md, HF_ISOLATED, 0, err);
        else if (hf_pieces_push(&parts, scratch->data, scratch->len, -1, first)) rc = nomem(err);
        /* each byte becomes its printable character */
        mg_buf mapped = {0};
        for (size_t i = 0; !rc && i < parts.n; i++) {
            mapped.len = 0;
            const unsigned char *p = (const unsigned char *)hf_piece_str(&parts, i);
            for (size_t b = 0; b < parts.v[i].len && !rc; b++)
                if (mg_buf_append(&mapped, st->bl_ch[p[b]], st->bl_len[p[b]])) rc = nomem(err);
            if (!rc && hf_pieces_push(out, mapped.data, mapped.len, -1, parts.v[i].first)) rc = nomem(err);
        }
        free(mapped.data);
        hf_pieces_free(&parts);
        return rc;
    }
    case P_SPLIT:
        return hf_split_regex(out, s, n, first, st->re, st->md, st->behavior, st->invert, err);
    case P_WHITESPACE:
        return hf_split_regex(out, s, n, first, st->re, st->md, HF_REMOVED, 1, err);
    case P_METASPACE: {
        /* spaces become the replacement, which may be prepended, then split before each */
        scratch->len = 0;
        size_t i = 0;
        int starts = 0;
        if (n > 0) {
            size_t l;
            int32_t c = mg_utf8_next(s, n, &l);
            starts = c == ' ' || (c >= 0 && (uint32_t)c == st->cp);
        }
        if (!starts && (st->prepend_scheme == PREPEND_ALWAYS || (st->prepend_scheme == PREPEND_FIRST && first)) &&
            mg_buf_append(scratch, st->str, st->str_len))
            return nomem(err);
        for (; i < n; i++) {
            int r = s[i] == ' ' ? mg_buf_append(scratch, st->str, st->str_len) : mg_buf_append(scratch, s + i, 1);
            if (r) return nomem(err);
        }
        if (!st->split) return hf_pieces_push(out, scratch->data, scratch->len, -1, first) ? nomem(err) : MG_OK;
        if (char_spans(&m, scratch->data, scratch->len, is_replacement, st) ||
            apply_behavior(out, scratch->data, first, &m, HF_MERGED_NEXT, 0))
            rc = nomem(err);
        break;
    }
    case P_DIGITS:
        if (char_spans(&m, s, n, is_numeric, st) ||
            apply_behavior(out, s, first, &m, st->individual_digits ? HF_ISOLATED : HF_CONTIGUOUS, 0))
            rc = nomem(err);
        break;
    case P_WS_SPLIT:
        if (char_spans(&m, s, n, is_ws, st) || apply_behavior(out, s, first, &m, HF_REMOVED, 0)) rc = nomem(err);
        break;
    default:
        break;
    }
    free(m.v);
    return rc;
}

int hf_pre_tokenize(const hf_steps *s, hf_pieces *io, hf_pieces *tmp, mg_error *err) {
    mg_buf scratch = {0};
    int rc = MG_OK;
    for (size_t k = 0; k < s->n && !rc; k++) {
        hf_pieces_reset(tmp);
        for (size_t i = 0; i < io->n && !rc; i++) {
            const hf_piece *p = &io->v[i];
            if (p->id >= 0) {
                if (hf_pieces_push(tmp, hf_piece_str(io, i), p->len, p->id, p->first)) rc = nomem(err);
            } else {
                rc = pre_one(&s->v[k], hf_piece_str(io, i), p->len, p->first, tmp, &scratch, err);
            }
        }
        if (!rc) swap_pieces(io, tmp);
    }
    free(scratch.data);
    return rc;
}

/* ---- decoding --------------------------------------------------------------------------- */

/* Rust's chars() over a token string (valid UTF-8 by construction). */
static size_t count_chars(const char *s, size_t n) {
    size_t c = 0;
    for (size_t i = 0; i < n; i++) c += ((unsigned char)s[i] & 0xC0) != 0x80;
    return c;
}

static int hex_digit(char c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

static int decode_one(const hf_step *st, hf_pieces *in, hf_pieces *out, mg_buf *scratch, mg_error *err) {
    scratch->len = 0;
    switch (st->kind) {
    case D_BYTE_LEVEL: {
        /* every token's characters back to bytes (a token with a character outside the
         * map keeps its UTF-8), then one lossy UTF-8 string */
        mg_buf bytes = {0};
        int rc = MG_OK;
        for (size_t i = 0; i < in->n && !rc; i++) {
            const char *t = hf_piece_str(in, i);
            size_t n = in->v[i].len, j = 0, start = bytes.len;
            int all = 1;
            while (j < n && all) {
                size_t l;
                int32_t c = mg_utf8_next(t + j, n - j, &l);
                int b = c >= 0 && c < 324 ? st->bl_byte[c] : -1;
                if (b < 0) all = 0;
                else {
                    unsigned char u = (unsigned char)b;
                    if (mg_buf_append(&bytes, &u, 1)) rc = nomem(err);
                }
                j += l;
            }
            if (!all) {
                bytes.len = start;
                if (mg_buf_append(&bytes, t, n)) rc = nomem(err);
            }
        }
        if (!rc && (mg_utf8_lossy(scratch, bytes.data ? bytes.data : "", bytes.len) ||
                    hf_pieces_push(out, scratch->data, scratch->len, -1, 0)))
            rc = nomem(err);
        free(bytes.data);
        return rc;
    }
    case D_METASPACE:
        for (size_t i = 0; i < in->n; i++) {
            scratch->len = 0;
            const char *t = hf_piece_str(in, i);
            size_t n = in->v[i].len, j = 0;
            while (j < n) {
                size_t l;
                int32_t c = mg_utf8_next(t + j, n - j, &l);
                int r = 0;
                if (c >= 0 && (uint32_t)c == st->cp) {
                    if (!(i == 0 && st->prepend_scheme != PREPEND_NEVER)) r = mg_buf_append(scratch, " ", 1);
                } else {
                    r = mg_buf_append(scratch, t + j, l);
                }
                if (r) return nomem(err);
                j += l;
            }
            if (hf_pieces_push(out, scratch->data ? scratch->data : "", scratch->len, -1, 0)) return nomem(err);
        }
        return MG_OK;
    case D_REPLACE:
        for (size_t i = 0; i < in->n; i++) {
            int rc = replace_all(st->re, st->md, hf_piece_str(in, i), in->v[i].len, st->str, st->str_len, scratch, err);
            if (rc) return rc;
            if (hf_pieces_push(out, scratch->data, scratch->len, -1, 0)) return nomem(err);
        }
        return MG_OK;
    case D_BYTE_FALLBACK: {
        mg_buf bytes = {0};
        int rc = MG_OK;
        for (size_t i = 0; i <= in->n && !rc; i++) {
            const char *t = i < in->n ? hf_piece_str(in, i) : NULL;
            int b = -1;
            if (t && in->v[i].len == 6 && !strncmp(t, "<0x", 3) && t[5] == '>') /* u8::from_str_radix */
                b = t[3] == '+' ? hex_digit(t[4]) : hex_digit(t[3]) >= 0 && hex_digit(t[4]) >= 0
                                                        ? hex_digit(t[3]) * 16 + hex_digit(t[4])
                                                        : -1;
            if (b >= 0) {
                unsigned char u = (unsigned char)b;
                if (mg_buf_append(&bytes, &u, 1)) rc = nomem(err);
                continue;
            }
            if (bytes.len) {
                /* whole bytes that are UTF-8 make one token, else each byte is U+FFFD */
                if (mg_utf8_check(bytes.data, bytes.len) == bytes.len) {
                    if (hf_pieces_push(out, bytes.data, bytes.len, -1, 0)) rc = nomem(err);
                } else {
                    for (size_t k = 0; k < bytes.len && !rc; k++)
                        if (hf_pieces_push(out, "\xEF\xBF\xBD", 3, -1, 0)) rc = nomem(err);
                }
                bytes.len = 0;
            }
            if (t && !rc && hf_pieces_push(out, t, in->v[i].len, -1, 0)) rc = nomem(err);
        }
        free(bytes.data);
        return rc;
    }
    case D_FUSE:
        return hf_pieces_push(out, in->text.data ? in->text.data : "", in->text.len, -1, 0) ? nomem(err) : MG_OK;
    case D_STRIP:
        for (size_t i = 0; i < in->n; i++) {
            const char *t = hf_piece_str(in, i);
            size_t n = in->v[i].len, nc = count_chars(t, n);
            /* character offsets of each char */
            size_t *at = malloc((nc + 1) * sizeof *at);
            if (!at) return nomem(err);
            uint32_t *cs = malloc((nc + 1) * sizeof *cs);
            if (!cs) {
                free(at);
                return nomem(err);
            }
            size_t j = 0, k = 0;
            while (j < n) {
                size_t l;
                int32_t c = mg_utf8_next(t + j, n - j, &l);
                at[k] = j;
                cs[k++] = (uint32_t)c;
                j += l;
            }
            at[nc] = n;
            size_t a = 0, b = nc;
            for (size_t q = 0; q < (size_t)st->start && q < nc; q++) {
                if (cs[q] != st->cp) break;
                a = q + 1;
            }
            for (size_t q = 0; q < (size_t)st->stop && q < nc; q++) {
                size_t idx = nc - q - 1;
                if (cs[idx] != st->cp) break;
                b = idx;
            }
            int r = a < b ? hf_pieces_push(out, t + at[a], at[b] - at[a], -1, 0) : hf_pieces_push(out, "", 0, -1, 0);
            free(at);
            free(cs);
            if (r) return nomem(err);
        }
        return MG_OK;
    case D_BPE:
        for (size_t i = 0; i < in->n; i++) {
            const char *t = hf_piece_str(in, i), *rep = i + 1 == in->n ? "" : " ";
            scratch->len = 0;
            size_t n = in->v[i].len, j = 0;
            while (j < n) {
                if (st->str_len && j + st->str_len <= n && !memcmp(t + j, st->str, st->str_len)) {
                    if (mg_buf_append(scratch, rep, strlen(rep))) return nomem(err);
                    j += st->str_len;
                } else {
                    if (mg_buf_append(scratch, t + j, 1)) return nomem(err);
                    j++;
                }
            }
            if (hf_pieces_push(out, scratch->data ? scratch->data : "", scratch->len, -1, 0)) return nomem(err);
        }
        return MG_OK;
    default:
        return MG_OK;
    }
}

int hf_decode(const hf_steps *s, hf_pieces *io, hf_pieces *tmp, mg_buf *out, mg_error *err) {
    mg_buf scratch = {0};
    int rc = MG_OK;
    for (size_t k = 0; k < s->n && !rc; k++) {
        hf_pieces_reset(tmp);
        rc = decode_one(&s->v[k], io, tmp, &scratch, err);
        if (!rc) swap_pieces(io, tmp);
    }
    free(scratch.data);
    out->len = 0;
    for (size_t i = 0; i < io->n && !rc; i++) {
        if (s->n == 0 && i > 0 && mg_buf_append(out, " ", 1)) rc = nomem(err);
        if (!rc && mg_buf_append(out, hf_piece_str(io, i), io->v[i].len)) rc = nomem(err);
    }
    if (!rc && mg_buf_append(out, "", 0)) rc = nomem(err);
    return rc;
}

/* Text helpers shared by the Hugging Face and tiktoken tokenizers: a byte buffer,
 * strict UTF-8 decoding with Rust's / Python's lossy replacement, Unicode White_Space,
 * and regexes of Oniguruma / Rust syntax compiled by PCRE2. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "io/tok_internal.h"

int mg_buf_reserve(mg_buf *b, size_t cap) {
    if (cap <= b->cap) return 0;
    size_t nc = b->cap ? b->cap : 64;
    while (nc < cap) nc *= 2;
    char *nd = realloc(b->data, nc);
    if (!nd) return -1;
    b->data = nd;
    b->cap = nc;
    return 0;
}

int mg_buf_append(mg_buf *b, const void *s, size_t n) {
    if (mg_buf_reserve(b, b->len + n + 1)) return -1;
    if (n) memcpy(b->data + b->len, s, n);
    b->len += n;
    b->data[b->len] = '\0';
    return 0;
}

int mg_buf_append_cp(mg_buf *b, uint32_t cp) {
    unsigned char u[4];
    size_t n;
    if (cp < 0x80) {
        u[0] = (unsigned char)cp;
        n = 1;
    } else if (cp < 0x800) {
        u[0] = (unsigned char)(0xC0 | cp >> 6);
        u[1] = (unsigned char)(0x80 | (cp & 0x3F));
        n = 2;
    } else if (cp < 0x10000) {
        u[0] = (unsigned char)(0xE0 | cp >> 12);
        u[1] = (unsigned char)(0x80 | (cp >> 6 & 0x3F));
        u[2] = (unsigned char)(0x80 | (cp & 0x3F));
        n = 3;
    } else {
        u[0] = (unsigned char)(0xF0 | cp >> 18);
        u[1] = (unsigned char)(0x80 | (cp >> 12 & 0x3F));
        u[2] = (unsigned char)(0x80 | (cp >> 6 & 0x3F));
        u[3] = (unsigned char)(0x80 | (cp & 0x3F));
        n = 4;
    }
    return mg_buf_append(b, u, n);
}

/* How many bytes of s[0..n) start a well-formed sequence (the "maximal subpart" of the
 * Unicode standard's table 3-7): the sequence's length when complete, else the length of
 * its valid prefix (at least 1). *cp is set when complete. */
static size_t utf8_part(const unsigned char *s, size_t n, uint32_t *cp, int *ok) {
    unsigned char c = s[0];
    *ok = 0;
    if (c < 0x80) {
        *cp = c;
        *ok = 1;
        return 1;
    }
    size_t need;
    unsigned char lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) need = 2;
    else if (c >= 0xE0 && c <= 0xEF) {
        need = 3;
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        need = 4;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;
    } else {
        return 1;
    }
    uint32_t v = c & (need == 2 ? 0x1F : need == 3 ? 0x0F : 0x07);
    for (size_t i = 1; i < need; i++) {
        if (i >= n) return i;
        unsigned char d = s[i];
        if (d < (i == 1 ? lo : 0x80) || d > (i == 1 ? hi : 0xBF)) return i;
        v = v << 6 | (d & 0x3F);
    }
    *cp = v;
    *ok = 1;
    return need;
}

int32_t mg_utf8_next(const char *s, size_t n, size_t *len) {
    uint32_t cp = 0;
    int ok;
    size_t l = utf8_part((const unsigned char *)s, n, &cp, &ok);
    *len = ok ? l : 1;
    return ok ? (int32_t)cp : -1;
}

size_t mg_utf8_check(const char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        if ((unsigned char)s[i] < 0x80) {
            i++;
            continue;
        }
        size_t l;
        if (mg_utf8_next(s + i, n - i, &l) < 0) return i;
        i += l;
    }
    return n;
}

int mg_utf8_lossy(mg_buf *out, const char *s, size_t n) {
    size_t i = 0, run = 0; /* s[run..i) is valid and not yet copied */
    while (i < n) {
        uint32_t cp;
        int ok;
        size_t l = utf8_part((const unsigned char *)s + i, n - i, &cp, &ok);
        if (ok) {
            i += l;
            continue;
        }
        if (mg_buf_append(out, s + run, i - run) || mg_buf_append(out, "\xEF\xBF\xBD", 3)) return -1;
        i += l;
        run = i;
    }
    return mg_buf_append(out, s + run, n - run);
}

int mg_is_white_space(uint32_t c) {
    return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

int mg_tok_is_word_cp(uint32_t c) {
    if (c == 0x200C || c == 0x200D) return 1; /* Join_Control */
    switch (utf8proc_category((utf8proc_int32_t)c)) {
    case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT: case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO: case UTF8PROC_CATEGORY_MN: case UTF8PROC_CATEGORY_MC: case UTF8PROC_CATEGORY_ME:
    case UTF8PROC_CATEGORY_ND: case UTF8PROC_CATEGORY_NL: case UTF8PROC_CATEGORY_PC:
        return 1;
    default:
        return 0;
    }
}

/* \s and \S as Oniguruma and Rust's regex crates mean them (Unicode White_Space): PCRE2's
 * \s under UCP is "Z or HT/LF/VT/FF/CR", which lacks U+0085 (NEL). Inside a character
 * class \s gains \x{85}; a \S there is left as PCRE2 reads it (no tokenizer uses it). */
static int translate(const char *p, size_t n, mg_buf *out) {
    int in_class = 0;
    for (size_t i = 0; i < n; i++) {
        char c = p[i];
        if (c == '\\' && i + 1 < n) {
            char d = p[i + 1];
            int r;
            if (d == 's') r = mg_buf_append(out, in_class ? "\\s\\x{85}" : "[\\s\\x{85}]", in_class ? 8 : 10);
            else if (d == 'S' && !in_class) r = mg_buf_append(out, "[^\\s\\x{85}]", 11);
            else r = mg_buf_append(out, p + i, 2);
            if (r) return -1;
            i++;
            continue;
        }
        if (!in_class && c == '[') {
            in_class = 1;
            if (mg_buf_append(out, p + i, 1)) return -1;
            /* a ']' right after '[' or '[^' is a literal member */
            if (i + 1 < n && p[i + 1] == '^') {
                if (mg_buf_append(out, "^", 1)) return -1;
                i++;
            }
            if (i + 1 < n && p[i + 1] == ']') {
                if (mg_buf_append(out, "]", 1)) return -1;
                i++;
            }
            continue;
        }
        if (in_class && c == '[' && i + 1 < n && p[i + 1] == ':') { /* [:alpha:] */
            const char *e = strstr(p + i + 2, ":]");
            size_t l = e && (size_t)(e - p) < n ? (size_t)(e - p) + 2 - i : 1;
            if (mg_buf_append(out, p + i, l)) return -1;
            i += l - 1;
            continue;
        }
        if (in_class && c == ']') in_class = 0;
        if (mg_buf_append(out, p + i, 1)) return -1;
    }
    return mg_buf_append(out, "", 0);
}

void *mg_regex_compile(const char *pattern, size_t len, int literal, const char *what, mg_error *err) {
    mg_buf b = {0};
    if (literal ? mg_buf_append(&b, pattern, len) : translate(pattern, len, &b)) {
        free(b.data);
        mg_error_set(err, MG_ERR_NOMEM, "out of memory compiling %s", what);
        return NULL;
    }
    int ecode;
    PCRE2_SIZE eoff;
    uint32_t opts = PCRE2_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP);
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)(b.data ? b.data : ""), b.len, opts, &ecode, &eoff, NULL);
    free(b.data);
    if (!re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(ecode, msg, sizeof msg);
        mg_error_set(err, MG_ERR_INVALID, "%s: the regex \"%.*s\" does not compile: %s (at offset %zu)", what,
                     (int)(len > 200 ? 200 : len), pattern, (char *)msg, (size_t)eoff);
        return NULL;
    }
    pcre2_jit_compile(re, PCRE2_JIT_COMPLETE); /* optional: the interpreter is the fallback */
    return re;
}

void mg_regex_free(void *re) {
    if (re) pcre2_code_free(re);
}

void *mg_regex_match_data(void *re) { return pcre2_match_data_create_from_pattern(re, NULL); }

void mg_regex_match_data_free(void *md) {
    if (md) pcre2_match_data_free(md);
}

int mg_regex_find(void *re, void *md, const char *s, size_t n, size_t start, size_t *ms, size_t *me, mg_error *err) {
    /* The text is checked UTF-8 before it gets here. */
    int m = pcre2_match(re, (PCRE2_SPTR)s, n, start, PCRE2_NO_UTF_CHECK, md, NULL);
    if (m == PCRE2_ERROR_NOMATCH) return 0;
    if (m < 0) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(m, msg, sizeof msg);
        mg_error_set(err, MG_ERR_RUNTIME, "regex match failed: %s", (char *)msg);
        return -1;
    }
    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
    *ms = ov[0];
    *me = ov[1];
    return 1;
}

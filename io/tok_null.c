/* NullTokenizer (Megatron's, for benchmarks and pre-tokenized text): the text is the ids
 * written in decimal and separated by single spaces, `[int(x) for x in text.split(' ')]`;
 * decoding joins them with spaces. The vocabulary is --vocab-size, the end-of-document id
 * --null-tokenizer-eod-id or vocab - 1; there is no BOS. Decided here, where Megatron is
 * silent or crashes: an empty text is an empty document (Megatron's int('') raises), and
 * an id outside [0, vocab) is refused (Megatron writes it, and the embedding fails later). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/tok_internal.h"

/* Python's str.isspace(), which int() strips: White_Space and the separators 1C..1F. */
static int py_space(uint32_t c) { return mg_is_white_space(c) || (c >= 0x1C && c <= 0x1F); }

/* Python's int(s) for s[0..n): white space around, a sign, digits with single '_' between
 * them. Returns 0 and *v, or -1. */
static int py_int(const char *s, size_t n, long long *v) {
    size_t a = 0, b = n, l;
    while (a < b) {
        int32_t c = mg_utf8_next(s + a, b - a, &l);
        if (c < 0 || !py_space((uint32_t)c)) break;
        a += l;
    }
    while (b > a) {
        size_t p = b - 1;
        while (p > a && ((unsigned char)s[p] & 0xC0) == 0x80) p--;
        int32_t c = mg_utf8_next(s + p, b - p, &l);
        if (c < 0 || !py_space((uint32_t)c)) break;
        b = p;
    }
    int neg = 0;
    if (a < b && (s[a] == '+' || s[a] == '-')) neg = s[a++] == '-';
    if (a == b || s[a] == '_' || s[b - 1] == '_') return -1;
    unsigned long long x = 0;
    for (size_t i = a; i < b; i++) {
        if (s[i] == '_') {
            if (s[i + 1] == '_') return -1;
            continue;
        }
        if (s[i] < '0' || s[i] > '9') return -1;
        if (x > (1ull << 40)) return -2; /* far past any vocabulary */
        x = x * 10 + (unsigned)(s[i] - '0');
    }
    *v = neg ? -(long long)x : (long long)x;
    return 0;
}

static int null_encode(mg_tokenizer *t, const char *text, size_t len, mg_ids *out, mg_error *err) {
    if (len == 0) return MG_OK;
    size_t start = out->len, i = 0;
    for (;;) {
        const char *sp = memchr(text + i, ' ', len - i);
        size_t e = sp ? (size_t)(sp - text) : len;
        long long v = 0;
        int r = py_int(text + i, e - i, &v);
        if (r || v < 0 || v >= t->vocab) {
            out->len = start;
            return mg_error_set(err, MG_ERR_INVALID,
                                "NullTokenizer: \"%.*s\" (at byte %zu) is not an id in [0, %lld): the text must be "
                                "ids separated by single spaces",
                                (int)(e - i > 40 ? 40 : e - i), text + i, i, (long long)t->vocab);
        }
        int rc = mg_ids_push(out, (int32_t)v, err);
        if (rc) {
            out->len = start;
            return rc;
        }
        if (!sp) return MG_OK;
        i = e + 1;
    }
}

static int null_decode(const mg_tokenizer *t, const int32_t *ids, size_t n, char **text, size_t *len, mg_error *err) {
    (void)t;
    char *s = malloc(n * 12 + 1), *p = s;
    if (!s) return mg_error_set(err, MG_ERR_NOMEM, "out of memory decoding %zu ids", n);
    *p = '\0';
    for (size_t i = 0; i < n; i++) p += sprintf(p, i ? " %d" : "%d", ids[i]);
    *text = s;
    *len = (size_t)(p - s);
    return MG_OK;
}

static void null_destroy(void *impl) { (void)impl; }

static const mg_tok_ops null_ops = {null_encode, null_decode, null_destroy};

int mg_tok_null_init(mg_tokenizer *t, mg_error *err) {
    if (t->cfg.vocab_size <= 0)
        return mg_error_set(err, MG_ERR_INVALID, "NullTokenizer needs --vocab-size N (N >= 1), the vocabulary it stands for");
    if (t->cfg.vocab_size > INT32_MAX)
        return mg_error_set(err, MG_ERR_INVALID, "NullTokenizer: --vocab-size %lld is too large", (long long)t->cfg.vocab_size);
    t->ops = &null_ops;
    t->impl = NULL;
    t->vocab = t->cfg.vocab_size;
    t->eod = t->cfg.null_eod_set ? (int32_t)t->cfg.null_eod_id : (int32_t)(t->vocab - 1);
    if (t->cfg.null_eod_set && (t->cfg.null_eod_id < 0 || t->cfg.null_eod_id >= t->vocab))
        return mg_error_set(err, MG_ERR_INVALID, "--null-tokenizer-eod-id %lld is outside the vocabulary [0, %lld)",
                            (long long)t->cfg.null_eod_id, (long long)t->vocab);
    t->bos = -1;
    return MG_OK;
}

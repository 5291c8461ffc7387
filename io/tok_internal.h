/* Internal: how the tokenizer front end (tokenizer.c) talks to each implementation. */
#ifndef MGRAPH_IO_TOK_INTERNAL_H
#define MGRAPH_IO_TOK_INTERNAL_H

#include <stdint.h>

#include "mgraph/tokenizer.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mg_tok_ops {
    int (*encode)(mg_tokenizer *t, const char *text, size_t len, mg_ids *out, mg_error *err);
    /* Writes a malloc'ed NUL-terminated string. */
    int (*decode)(const mg_tokenizer *t, const int32_t *ids, size_t n, char **text, size_t *len,
                  mg_error *err);
    void (*destroy)(void *impl);
} mg_tok_ops;

struct mg_tokenizer {
    const mg_tok_ops *ops;
    void *impl;
    const char *type; /* canonical name (static string) */
    int64_t vocab;
    int32_t eod, bos;
    /* Owned copies of the configuration, so that clone can reopen. */
    char *vocab_file, *merge_file, *model_file;
    mg_tokenizer_config cfg; /* the rest of the configuration (its strings point at the copies below) */
    char *tiktoken_pattern, **special_tokens;
};

/* Each fills t->ops, t->impl, t->vocab, t->eod, t->bos from t's file paths. */
int mg_tok_bytes_init(mg_tokenizer *t, mg_error *err);
int mg_tok_gpt2_init(mg_tokenizer *t, mg_error *err);
int mg_tok_sp_init(mg_tokenizer *t, mg_error *err);
int mg_tok_hf_init(mg_tokenizer *t, mg_error *err);
int mg_tok_tiktoken_init(mg_tokenizer *t, mg_error *err);
int mg_tok_null_init(mg_tokenizer *t, mg_error *err);

/* ---- io/tok_text.c: text helpers the Hugging Face and tiktoken tokenizers share ---- */

/* A growable byte string; zero-initialise, release with free(b.data). */
typedef struct mg_buf {
    char *data;
    size_t len, cap;
} mg_buf;
int mg_buf_reserve(mg_buf *b, size_t cap);                /* 0 or -1 (no memory) */
int mg_buf_append(mg_buf *b, const void *s, size_t n);    /* 0 or -1 */
int mg_buf_append_cp(mg_buf *b, uint32_t cp);             /* UTF-8 of one code point */

/* The code point at s[0..n) and its length in *len, or -1 (*len = 1) where the bytes
 * are not well-formed UTF-8 (overlong forms, surrogates and values past U+10FFFF too). */
int32_t mg_utf8_next(const char *s, size_t n, size_t *len);
/* The offset of the first byte that is not well-formed UTF-8, or n. */
size_t mg_utf8_check(const char *s, size_t n);
/* Appends s with every ill-formed part replaced by U+FFFD, one per maximal subpart, as
 * Rust's String::from_utf8_lossy and Python's decode('utf-8', 'replace') do. */
int mg_utf8_lossy(mg_buf *out, const char *s, size_t n);
/* Unicode White_Space (Rust's char::is_whitespace). */
int mg_is_white_space(uint32_t cp);
/* Rust regex's Unicode \w: letters, marks, decimal and letter numbers, connectors. */
int mg_tok_is_word_cp(uint32_t cp);

/* Compiles a pattern of Oniguruma / Rust-regex syntax for PCRE2 (UTF, UCP; JIT when it
 * can): their \s is Unicode's White_Space, which PCRE2's lacks U+0085, so \s and \S are
 * spelled with it. literal: the pattern is a plain string. Returns a pcre2_code* (as void*)
 * or NULL with err set, naming `what`. */
void *mg_regex_compile(const char *pattern, size_t len, int literal, const char *what, mg_error *err);
void mg_regex_free(void *re);
/* The first match of re in s[0..n) at or after start: 1 and [*ms, *me), 0 if none, or
 * -1 with err set. md is a pcre2_match_data* made for re (mg_regex_match_data). */
int mg_regex_find(void *re, void *md, const char *s, size_t n, size_t start, size_t *ms, size_t *me, mg_error *err);
void *mg_regex_match_data(void *re);
void mg_regex_match_data_free(void *md);

#ifdef __cplusplus
}
#endif
#endif

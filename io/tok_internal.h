/* Internal: how the tokenizer front end (tokenizer.c) talks to each implementation. */
#ifndef MGRAPH_IO_TOK_INTERNAL_H
#define MGRAPH_IO_TOK_INTERNAL_H

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
};

/* Each fills t->ops, t->impl, t->vocab, t->eod, t->bos from t's file paths. */
int mg_tok_bytes_init(mg_tokenizer *t, mg_error *err);
int mg_tok_gpt2_init(mg_tokenizer *t, mg_error *err);
int mg_tok_sp_init(mg_tokenizer *t, mg_error *err);

#ifdef __cplusplus
}
#endif
#endif

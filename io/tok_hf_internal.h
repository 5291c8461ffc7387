/* Internal: the pieces of the Hugging Face tokenizer (io/tok_hf.c drives them):
 * normalizers, pre-tokenizers and decoders (io/tok_hf_steps.c), each read from its
 * tokenizer.json object and applied to lists of text pieces. */
#ifndef MGRAPH_IO_TOK_HF_INTERNAL_H
#define MGRAPH_IO_TOK_HF_INTERNAL_H

#include <jansson.h>

#include "io/tok_internal.h"

/* A list of text pieces in one buffer. id >= 0: an added token, never split again.
 * first: the piece starts at offset 0 of the original text (Metaspace's "first"). */
typedef struct hf_piece {
    size_t off, len;
    int32_t id;
    int first;
} hf_piece;

typedef struct hf_pieces {
    hf_piece *v;
    size_t n, cap;
    mg_buf text;
} hf_pieces;

int hf_pieces_push(hf_pieces *p, const char *s, size_t len, int32_t id, int first);
void hf_pieces_reset(hf_pieces *p);
void hf_pieces_free(hf_pieces *p);
static inline const char *hf_piece_str(const hf_pieces *p, size_t i) { return p->text.data + p->v[i].off; }

/* A flattened Sequence of normalizers, pre-tokenizers or decoders. */
typedef struct hf_step hf_step;
typedef struct hf_steps {
    hf_step *v;
    size_t n;
} hf_steps;

/* Read tokenizer.json's "normalizer", "pre_tokenizer" or "decoder" (null: no step). */
int hf_normalizer_load(json_t *j, hf_steps *out, mg_error *err);
int hf_pre_tokenizer_load(json_t *j, hf_steps *out, mg_error *err);
int hf_decoder_load(json_t *j, hf_steps *out, mg_error *err);
void hf_steps_free(hf_steps *s);
int hf_has_byte_level(const hf_steps *pre);

/* Normalizes s[0..n) into out (replacing its contents). */
int hf_normalize(const hf_steps *s, const char *text, size_t n, mg_buf *out, mg_error *err);
/* Pre-tokenizes the pieces without an id of *io (those with one pass unchanged); tmp is
 * scratch. */
int hf_pre_tokenize(const hf_steps *s, hf_pieces *io, hf_pieces *tmp, mg_error *err);
/* Decodes the token strings of *io into one string in out (the decoders, then joined;
 * no decoder: joined by spaces). */
int hf_decode(const hf_steps *s, hf_pieces *io, hf_pieces *tmp, mg_buf *out, mg_error *err);

/* Regex splitting as tokenizers' NormalizedString::split with a regex: the matches of
 * re in s (Oniguruma's find_iter), then the delimiter behaviour. */
enum { HF_REMOVED, HF_ISOLATED, HF_MERGED_PREV, HF_MERGED_NEXT, HF_CONTIGUOUS };
int hf_split_regex(hf_pieces *out, const char *s, size_t n, int first, void *re, void *md, int behavior, int invert,
                   mg_error *err);

#endif

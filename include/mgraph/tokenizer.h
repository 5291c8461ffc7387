/* mgraph tokenizers: one interface over Megatron's tokenizer types.
 *
 *   "GPT2BPETokenizer"        GPT-2 byte-level BPE from vocab.json + merges.txt
 *   "SentencePieceTokenizer"  a SentencePiece tokenizer.model (LLaMA/Mistral BPE with byte fallback)
 *   "HuggingFaceTokenizer"    a Hugging Face tokenizer.json (BPE) with its tokenizer_config.json
 *   "TikTokenizer"            Megatron's tiktoken vocabulary (JSON list of ranks) and pattern
 *   "NullTokenizer"           the text is the ids, separated by spaces (Megatron's)
 *   "ByteLevelTokenizer"      id = byte value, vocab 256, no end-of-document token
 *
 * Ownership: mg_tokenizer_open() allocates, mg_tokenizer_free() releases.
 * Threads: the tables are read-only, but encode keeps a per-tokenizer word cache, so
 * one mg_tokenizer must not be used by two threads at once: give each thread its own
 * (mg_tokenizer_clone). Decode and the getters may be called concurrently.
 */
#ifndef MGRAPH_TOKENIZER_H
#define MGRAPH_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "mgraph/error.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mg_tokenizer mg_tokenizer;

typedef struct mg_tokenizer_config {
    const char *type;       /* Megatron's --tokenizer-type name; NULL means "ByteLevelTokenizer" */
    const char *vocab_file; /* --vocab-file  (GPT2BPETokenizer) */
    const char *merge_file; /* --merge-file  (GPT2BPETokenizer) */
    const char *model_file; /* --tokenizer-model: SentencePiece's tokenizer.model, HuggingFaceTokenizer's
                               folder (or its tokenizer.json), TikTokenizer's vocabulary .json */
    /* Zero means Megatron's default for each of the following. */
    int64_t vocab_size;          /* --vocab-size: NullTokenizer's (required); TikTokenizer's (131072) */
    const char *tiktoken_pattern;         /* --tiktoken-pattern v1 | v2 (v2) */
    int tiktoken_num_special_tokens;      /* --tiktoken-num-special-tokens (1000) */
    const char *const *special_tokens;    /* --tokenizer-special-tokens, NULL-terminated: TikTokenizer's
                                             special tokens (Megatron's seven), HF's added ones */
    int null_eod_set;                     /* --null-tokenizer-eod-id given: null_eod_id (else vocab - 1) */
    int64_t null_eod_id;
    int hf_no_special_tokens;             /* --tokenizer-hf-no-include-special-tokens: no template tokens */
} mg_tokenizer_config;

/* A growable id buffer; zero-initialise, release with mg_ids_free. */
typedef struct mg_ids {
    int32_t *data;
    size_t len, cap;
} mg_ids;

int mg_ids_reserve(mg_ids *ids, size_t cap, mg_error *err);
int mg_ids_push(mg_ids *ids, int32_t id, mg_error *err);
void mg_ids_free(mg_ids *ids);

int mg_tokenizer_open(const mg_tokenizer_config *cfg, mg_tokenizer **out, mg_error *err);
/* Whether mg_tokenizer_open knows the type name (tools check names they only record:
 * mgraph-convert writes one into a checkpoint). */
bool mg_tokenizer_type_known(const char *type);
/* A new tokenizer with the same configuration (for another thread). */
int mg_tokenizer_clone(const mg_tokenizer *tok, mg_tokenizer **out, mg_error *err);
void mg_tokenizer_free(mg_tokenizer *tok);

const char *mg_tokenizer_type(const mg_tokenizer *tok);
int64_t mg_tokenizer_vocab_size(const mg_tokenizer *tok); /* unpadded */
int32_t mg_tokenizer_eod(const mg_tokenizer *tok);        /* end-of-document id, -1 if none */
int32_t mg_tokenizer_bos(const mg_tokenizer *tok);        /* beginning-of-sequence id, -1 if none */

/* Appends the ids of text[0..len) to out. No BOS/EOD are added (plain-text encoding),
 * except by HuggingFaceTokenizer, which encodes as Megatron's does, tokenizer(text).input_ids:
 * with the post-processor's template (Llama 3's BOS) unless hf_no_special_tokens. */
int mg_tokenizer_encode_append(mg_tokenizer *tok, const char *text, size_t len, mg_ids *out,
                               mg_error *err);
/* Same, into a fresh malloc'ed array the caller frees (NULL when *n == 0). */
int mg_tokenizer_encode(mg_tokenizer *tok, const char *text, size_t len, int32_t **ids, size_t *n,
                        mg_error *err);
/* Decodes ids into a malloc'ed, NUL-terminated string (*len excludes the NUL). */
int mg_tokenizer_decode(const mg_tokenizer *tok, const int32_t *ids, size_t n, char **text,
                        size_t *len, mg_error *err);

/* Megatron's padded vocabulary: vocab rounded up to a multiple of divisible_by * tp
 * (--make-vocab-size-divisible-by, default 128). Returns -1 for non-positive arguments. */
int64_t mg_vocab_padded(int64_t vocab, int divisible_by, int tp);

#ifdef __cplusplus
}
#endif
#endif

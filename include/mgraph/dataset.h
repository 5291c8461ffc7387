/* mgraph datasets.
 *
 * 1. Megatron's indexed dataset (.bin/.idx, core/datasets/indexed_dataset.py): a
 *    memory-mapped reader and a streaming writer, bit-compatible with Megatron's files.
 * 2. mg_dataset: one sampling interface (samples of seq_length + 1 tokens per split)
 *    with three implementations:
 *      - the GPT dataset over indexed datasets (Megatron's --data-path / --split /
 *        --seq-length / --seed / --data-cache-path, blends included);
 *      - the raw text dataset: one text file tokenized in memory, for quick runs;
 *      - Megatron's mock dataset (--mock-data), its samples in Megatron's order.
 */
#ifndef MGRAPH_DATASET_H
#define MGRAPH_DATASET_H

#include <stddef.h>
#include <stdbool.h>
#include <stdint.h>

#include "mgraph/error.h"
#include "mgraph/tokenizer.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- indexed dataset (.bin/.idx) ------------------------------------------------ */

/* Megatron's dtype codes (DType in indexed_dataset.py). */
enum {
    MG_IDX_U8 = 1,
    MG_IDX_I8 = 2,
    MG_IDX_I16 = 3,
    MG_IDX_I32 = 4,
    MG_IDX_I64 = 5,
    MG_IDX_F64 = 6,
    MG_IDX_F32 = 7,
    MG_IDX_U16 = 8,
};

/* Item size in bytes of a dtype code, 0 if the code is invalid. */
size_t mg_indexed_dtype_size(int dtype);
const char *mg_indexed_dtype_name(int dtype);
/* Megatron's choice for token ids: uint16 when vocab < 65500, else int32. */
int mg_indexed_dtype_for_vocab(int64_t vocab);

typedef struct mg_indexed_dataset mg_indexed_dataset;

/* Opens prefix.idx and prefix.bin (both mmap'ed) and validates the whole index:
 * magic, version, dtype, sizes, every sequence inside .bin, document indices.
 * Any violation is MG_ERR_IO with a message naming the file and the problem. */
int mg_indexed_open(const char *prefix, mg_indexed_dataset **out, mg_error *err);
void mg_indexed_free(mg_indexed_dataset *ds);

int mg_indexed_dtype(const mg_indexed_dataset *ds);
uint64_t mg_indexed_num_sequences(const mg_indexed_dataset *ds);
uint64_t mg_indexed_num_documents(const mg_indexed_dataset *ds); /* document index entries - 1 */
/* Megatron's document_indices array (num_documents + 1 entries, first 0, last = sequences). */
const int64_t *mg_indexed_document_indices(const mg_indexed_dataset *ds);
int32_t mg_indexed_sequence_length(const mg_indexed_dataset *ds, uint64_t seq); /* in items */
int64_t mg_indexed_sequence_offset(const mg_indexed_dataset *ds, uint64_t seq); /* byte offset in .bin */
/* Pointer to the raw items of a sequence inside the mapping (dtype of the dataset). */
const void *mg_indexed_sequence_data(const mg_indexed_dataset *ds, uint64_t seq);
/* Copies items [offset, offset + count) of a sequence as int32 token ids
 * (MG_ERR_INVALID for a range outside the sequence or a float dtype). */
int mg_indexed_read_tokens(const mg_indexed_dataset *ds, uint64_t seq, uint64_t offset, uint64_t count,
                           int32_t *out, mg_error *err);

typedef struct mg_indexed_writer mg_indexed_writer;

/* Creates prefix.bin now (streamed) and prefix.idx at finalize. */
int mg_indexed_writer_open(const char *prefix, int dtype, mg_indexed_writer **out, mg_error *err);
/* Appends one sequence of token ids, converted to the writer's dtype
 * (MG_ERR_INVALID if an id does not fit). */
int mg_indexed_writer_add_tokens(mg_indexed_writer *w, const int32_t *ids, size_t n, mg_error *err);
/* Appends one sequence of n items already in the writer's dtype (any dtype, floats too). */
int mg_indexed_writer_add_raw(mg_indexed_writer *w, const void *items, size_t n, mg_error *err);
/* Closes the current document (Megatron's end_document): the sequences added since
 * the previous call form one document; a document may hold no sequence. */
int mg_indexed_writer_end_document(mg_indexed_writer *w, mg_error *err);
/* Writes prefix.idx and closes both files. The writer must still be freed. */
int mg_indexed_writer_finalize(mg_indexed_writer *w, mg_error *err);
/* Frees; if not finalized, the partial files are removed. */
void mg_indexed_writer_free(mg_indexed_writer *w);

/* ---- sampling interface ----------------------------------------------------------- */

typedef enum mg_data_split { MG_SPLIT_TRAIN = 0, MG_SPLIT_VALID = 1, MG_SPLIT_TEST = 2 } mg_data_split;

typedef struct mg_dataset mg_dataset;

uint64_t mg_dataset_num_samples(const mg_dataset *ds, int split);
int mg_dataset_seq_length(const mg_dataset *ds);
/* Fills tokens[0..seq_length] (seq_length + 1 ids: inputs are [0, seq), labels [1, seq]).
 * idx must be < mg_dataset_num_samples(ds, split). Thread-safe (read-only). */
int mg_dataset_sample(const mg_dataset *ds, int split, uint64_t idx, int32_t *tokens, mg_error *err);
int64_t mg_dataset_vocab_size(const mg_dataset *ds); /* 0 when unknown */
void mg_dataset_free(mg_dataset *ds);

/* Parses Megatron's --split ("949,50,1", also "98/2/0"; missing parts are 0) into
 * fractions summing to 1. */
int mg_parse_split(const char *split, double frac[3], mg_error *err);

/* ---- GPT dataset over indexed datasets ------------------------------------------------ */

typedef struct mg_gpt_dataset_config {
    /* "prefix", or Megatron's blend "w1 prefix1 w2 prefix2 ...", or "p1 p2 ..." (equal weights). */
    const char *data_path;
    const char *split;      /* --split; NULL means Megatron's default "969,30,1" */
    int seq_length;         /* tokens per sample are seq_length + 1 */
    uint64_t seed;          /* --seed */
    /* Samples wanted per split (train-iters x global batch, ...); 0 = one epoch of the
     * split (for a blend: as many as the blend gives without repeating a dataset). */
    uint64_t num_samples[3];
    const char *cache_path; /* --data-cache-path; NULL: indices are built in memory only */
    int64_t vocab_size;     /* reported by mg_dataset_vocab_size (0 if unknown); when known, every
                             * token id of every dataset is checked against it at open */
    const char *tokenizer;  /* named in that check's message (NULL: "the tokenizer") */
    /* Megatron's --train-data-path / --valid-data-path / --test-data-path: every document
     * of the datasets is split `split_index` (split is not read), the other splits are
     * empty. false: --split cuts each dataset. */
    bool whole;
    int split_index;
} mg_gpt_dataset_config;

/* One dataset per split (NULL: the split is empty), as one: split s of the result is
 * split s of parts[s]. Takes the parts (freed with the result, or on error). They must
 * agree on seq_length. */
int mg_dataset_per_split(mg_dataset *parts[3], mg_dataset **out, mg_error *err);

int mg_gpt_dataset_open(const mg_gpt_dataset_config *cfg, mg_dataset **out, mg_error *err);
/* For a GPT dataset: how many of the per-(dataset, split) indices came from the cache
 * and how many were built (and written, with a cache path) by open. */
int mg_gpt_dataset_cache_stats(const mg_dataset *ds, int *loaded, int *built);

/* ---- Megatron's mock GPT dataset (--mock-data) ------------------------------------------ */

/* MockGPTDataset over MockGPTLowLevelDataset (megatron/core/datasets/gpt_dataset.py):
 * 100000 synthetic documents (lengths from numpy's default_rng(0), tokens 1, 2, ... mod
 * the vocabulary, then EOD), split by --split, each split's indices built and shuffled
 * with numpy's RandomState(seed) as Megatron builds them: sample i of a split is
 * Megatron's for the same seed, seq_length, split and sample counts. */
typedef struct mg_mock_dataset_config {
    const char *split;      /* NULL: "969,30,1" */
    int seq_length;
    uint64_t seed;          /* --seed, < 2^32 (numpy's RandomState) */
    uint64_t num_samples[3];/* Megatron's train / valid / test sample counts (0: one epoch) */
    int64_t vocab_size;     /* the tokenizer's vocabulary (unpadded, as Megatron's tokenizer.vocab_size) */
    int32_t eod;            /* the tokenizer's EOD id (must be >= 0) */
} mg_mock_dataset_config;

int mg_mock_dataset_open(const mg_mock_dataset_config *cfg, mg_dataset **out, mg_error *err);

/* ---- raw text dataset --------------------------------------------------------------- */

typedef struct mg_text_dataset_config {
    const char *path;       /* one UTF-8 (or any bytes) text file */
    mg_tokenizer *tokenizer;/* borrowed during open only; NULL = ByteLevelTokenizer */
    const char *split;      /* fractions of the token stream, in order; NULL = "90,10,0" */
    int seq_length;
    uint64_t seed;
    uint64_t num_samples[3];/* 0 = one epoch (every window once) */
} mg_text_dataset_config;

int mg_text_dataset_open(const mg_text_dataset_config *cfg, mg_dataset **out, mg_error *err);

#ifdef __cplusplus
}
#endif
#endif

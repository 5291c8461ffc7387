/* Internal: plain C interface of the SentencePiece shim library (mgraph_sentencepiece).
 * It uses only C types and malloc, and calls nothing in mgraph, so the shared library
 * has no undefined references back into the static mgraph library. */
#ifndef MGRAPH_IO_SPM_SHIM_H
#define MGRAPH_IO_SPM_SHIM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mg_spm mg_spm;

/* NULL on failure, with a message in errbuf. */
mg_spm *mg_spm_load(const char *path, char *errbuf, size_t errlen);
void mg_spm_free(mg_spm *s);
int mg_spm_piece_size(const mg_spm *s);
int mg_spm_bos_id(const mg_spm *s);
int mg_spm_eos_id(const mg_spm *s);
/* Encodes into the handle's scratch; *ids stays valid until the next call on s.
 * Returns 0, or -1 (bad input / library error) / -2 (no memory) with errbuf set. */
int mg_spm_encode(mg_spm *s, const char *text, size_t len, const int32_t **ids, size_t *n, char *errbuf, size_t errlen);
/* Decodes into a malloc'ed NUL-terminated string. Same return codes. */
int mg_spm_decode(const mg_spm *s, const int32_t *ids, size_t n, char **text, size_t *len, char *errbuf, size_t errlen);

#ifdef __cplusplus
}
#endif
#endif

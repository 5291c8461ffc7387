/* Fuzz target: TikTokenizer's vocabulary reader and encoder (io/tok_tiktoken.c). The input
 * is the vocabulary .json, "\n--text--\n", the text to encode, whose ids are decoded
 * again; the vocabulary size is the list's length plus 10 special ids. */
#include "fuzz_util.h" /* first: it defines _GNU_SOURCE */

#include <jansson.h>

#include "mgraph/tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const uint8_t *vocab, *text;
    size_t nv, nt;
    fz_split(data, size, "\n--text--\n", &vocab, &nv, &text, &nt);
    json_t *j = json_loadb((const char *)vocab, nv, JSON_ALLOW_NUL, NULL);
    size_t n = json_is_array(j) ? json_array_size(j) : 0;
    json_decref(j);
    mg_tokenizer_config tc = {.type = "TikTokenizer", .vocab_size = (int64_t)n + 10, .tiktoken_num_special_tokens = 10};
    tc.model_file = fz_write("vocab.json", vocab, nv);
    mg_tokenizer *tok;
    mg_error err = {0};
    if (mg_tokenizer_open(&tc, &tok, &err) != MG_OK) return 0;
    mg_ids ids = {0};
    if (mg_tokenizer_encode_append(tok, (const char *)text, nt, &ids, &err) == MG_OK) {
        char *back = NULL;
        size_t blen = 0;
        mg_error e2 = {0};
        mg_tokenizer_decode(tok, ids.data, ids.len, &back, &blen, &e2);
        free(back);
    }
    mg_ids_free(&ids);
    mg_tokenizer_free(tok);
    return 0;
}

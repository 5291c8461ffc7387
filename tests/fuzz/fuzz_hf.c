/* Fuzz target: the Hugging Face tokenizer (io/tok_hf.c, io/tok_hf_steps.c): tokenizer.json,
 * tokenizer_config.json and a text to encode, whose ids are decoded again. The input is
 * tokenizer.json, "\n--config--\n", tokenizer_config.json, "\n--text--\n", the text. */
#include "fuzz_util.h"
#include "mgraph/tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const uint8_t *json, *rest, *config, *text;
    size_t nj, nr, nc, nt;
    fz_split(data, size, "\n--config--\n", &json, &nj, &rest, &nr);
    fz_split(rest, nr, "\n--text--\n", &config, &nc, &text, &nt);
    mg_tokenizer_config tc = {.type = "HuggingFaceTokenizer"};
    tc.model_file = fz_write("tokenizer.json", json, nj);
    fz_write("tokenizer_config.json", nc ? (const void *)config : "{}", nc ? nc : 2);
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

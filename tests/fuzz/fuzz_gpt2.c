/* Fuzz target: GPT-2 BPE vocab.json + merges.txt loader and encoder (io/tok_gpt2.c).
 * The input is vocab.json, "\n--merges--\n", merges.txt, "\n--text--\n", text to
 * encode, whose ids are decoded again. */
#include "fuzz_util.h"
#include "mgraph/tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const uint8_t *vocab, *rest, *merges, *text;
    size_t nv, nr, nm, nt;
    fz_split(data, size, "\n--merges--\n", &vocab, &nv, &rest, &nr);
    fz_split(rest, nr, "\n--text--\n", &merges, &nm, &text, &nt);
    mg_tokenizer_config tc = {.type = "GPT2BPETokenizer"};
    tc.vocab_file = fz_write("vocab.json", vocab, nv);
    tc.merge_file = fz_write("merges.txt", merges, nm);
    mg_tokenizer *tok;
    mg_error err = {0};
    if (mg_tokenizer_open(&tc, &tok, &err) != MG_OK) return 0;
    mg_ids ids = {0};
    if (mg_tokenizer_encode_append(tok, (const char *)text, nt, &ids, &err) == MG_OK) {
        /* no round-trip check: a hostile vocabulary may give two strings one id */
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

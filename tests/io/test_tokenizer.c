/* Tokenizer tests: exactness on the reference vectors, round trips, byte level. */
#include <jansson.h>
#include <stdint.h>

#include "io_test_util.h"
#include "mgraph/tokenizer.h"

static const char *g_data;

static mg_tokenizer *open_tok(const char *type) {
    char v[4096], m[4096], sp[4096];
    path_join(v, sizeof v, g_data, "gpt2/vocab.json");
    path_join(m, sizeof m, g_data, "gpt2/merges.txt");
    path_join(sp, sizeof sp, g_data, "mistral/tokenizer.model");
    mg_tokenizer_config cfg = {type, v, m, sp};
    mg_tokenizer *t = NULL;
    mg_error err = {0};
    if (mg_tokenizer_open(&cfg, &t, &err)) {
        fprintf(stderr, "open %s: %s\n", type, err.msg);
        exit(1);
    }
    return t;
}

/* Each line: JSON string literal, TAB, space-separated ids (data/README.md). */
static int run_vectors(const char *type, const char *file) {
    mg_tokenizer *t = open_tok(type);
    char path[4096];
    if (file[0] == '/') snprintf(path, sizeof path, "%s", file);
    else path_join(path, sizeof path, g_data, file);
    FILE *f = fopen(path, "rb");
    CHECK(f != NULL, "cannot open %s", path);
    if (!f) return 1;
    char *line = NULL;
    size_t cap = 0;
    ssize_t ll;
    int lineno = 0, cases = 0;
    while ((ll = getline(&line, &cap, f)) >= 0) {
        lineno++;
        if (ll && line[ll - 1] == '\n') line[--ll] = '\0';
        char *tab = strrchr(line, '\t');
        CHECK(tab != NULL, "%s:%d: no TAB", path, lineno);
        if (!tab) continue;
        *tab = '\0';
        json_error_t jerr;
        json_t *js = json_loads(line, JSON_DECODE_ANY | JSON_ALLOW_NUL, &jerr);
        CHECK(js && json_is_string(js), "%s:%d: bad JSON string: %s", path, lineno, jerr.text);
        if (!js) continue;
        const char *text = json_string_value(js);
        size_t tlen = json_string_length(js);
        int32_t want[4096];
        size_t nwant = 0;
        for (char *p = tab + 1; *p;) {
            char *end;
            long v = strtol(p, &end, 10);
            if (end == p) break;
            want[nwant++] = (int32_t)v;
            p = end;
        }
        int32_t *ids;
        size_t n;
        mg_error err = {0};
        int rc = mg_tokenizer_encode(t, text, tlen, &ids, &n, &err);
        CHECK(rc == 0, "%s:%d: encode failed: %s", path, lineno, err.msg);
        int same = rc == 0 && n == nwant && (n == 0 || memcmp(ids, want, n * sizeof *ids) == 0);
        CHECK(same, "%s:%d: %s: got %zu ids, want %zu", path, lineno, line, n, nwant);
        if (!same && rc == 0) {
            fprintf(stderr, "  got :");
            for (size_t i = 0; i < n; i++) fprintf(stderr, " %d", ids[i]);
            fprintf(stderr, "\n  want:");
            for (size_t i = 0; i < nwant; i++) fprintf(stderr, " %d", want[i]);
            fputc('\n', stderr);
        }
        /* Decoding the expected ids gives the input back. */
        char *back;
        size_t blen;
        rc = mg_tokenizer_decode(t, want, nwant, &back, &blen, &err);
        CHECK(rc == 0 && blen == tlen && memcmp(back, text, tlen) == 0, "%s:%d: decode differs", path, lineno);
        if (rc == 0) free(back);
        free(ids);
        json_decref(js);
        cases++;
    }
    free(line);
    fclose(f);
    printf("%s: %d cases\n", type, cases);
    mg_tokenizer_free(t);
    return cases > 0 ? 0 : 1;
}

static void roundtrip(const char *type) {
    mg_tokenizer *t = open_tok(type);
    char path[4096];
    path_join(path, sizeof path, g_data, "tinyshakespeare.txt");
    size_t len;
    char *text = read_file(path, &len);
    CHECK(text != NULL, "cannot read %s", path);
    if (!text) return;
    int32_t *ids;
    size_t n;
    mg_error err = {0};
    int rc = mg_tokenizer_encode(t, text, len, &ids, &n, &err);
    CHECK(rc == 0, "encode: %s", err.msg);
    char *back = NULL;
    size_t blen = 0;
    rc = mg_tokenizer_decode(t, ids, n, &back, &blen, &err);
    CHECK(rc == 0, "decode: %s", err.msg);
    CHECK(blen == len && memcmp(back, text, len) == 0, "round trip differs (%zu vs %zu bytes)", blen, len);
    printf("%s: %zu bytes -> %zu tokens, round trip ok\n", type, len, n);
    /* A clone encodes identically (it is what worker threads use). */
    mg_tokenizer *c;
    CHECK(mg_tokenizer_clone(t, &c, &err) == 0, "clone: %s", err.msg);
    int32_t *ids2;
    size_t n2;
    CHECK(mg_tokenizer_encode(c, text, 20000, &ids2, &n2, &err) == 0, "clone encode");
    int32_t *ids3;
    size_t n3;
    CHECK(mg_tokenizer_encode(t, text, 20000, &ids3, &n3, &err) == 0, "encode");
    CHECK(n2 == n3 && memcmp(ids2, ids3, n2 * 4) == 0, "clone differs");
    free(ids2);
    free(ids3);
    mg_tokenizer_free(c);
    free(back);
    free(ids);
    free(text);
    mg_tokenizer_free(t);
}

static void bytes_and_api(void) {
    mg_tokenizer *t = open_tok("ByteLevelTokenizer");
    CHECK(mg_tokenizer_vocab_size(t) == 256, "vocab");
    CHECK(mg_tokenizer_eod(t) == -1 && mg_tokenizer_bos(t) == -1, "no eod/bos");
    const char s[] = "h\xc3\xa9\0\xff";
    int32_t *ids;
    size_t n;
    mg_error err = {0};
    CHECK(mg_tokenizer_encode(t, s, 5, &ids, &n, &err) == 0 && n == 5, "encode");
    CHECK(ids[0] == 'h' && ids[1] == 0xc3 && ids[3] == 0 && ids[4] == 255, "ids");
    char *back;
    size_t bl;
    CHECK(mg_tokenizer_decode(t, ids, n, &back, &bl, &err) == 0 && bl == 5 && memcmp(back, s, 5) == 0, "decode");
    free(back);
    int32_t bad = 256;
    mg_error_clear(&err);
    CHECK(mg_tokenizer_decode(t, &bad, 1, &back, &bl, &err) == MG_ERR_INVALID && err.msg[0], "bad id rejected");
    free(ids);
    mg_tokenizer_free(t);

    t = open_tok("GPT2BPETokenizer");
    CHECK(mg_tokenizer_vocab_size(t) == 50257 && mg_tokenizer_eod(t) == 50256, "gpt2 vocab/eod");
    int32_t eod = 50256;
    CHECK(mg_tokenizer_decode(t, &eod, 1, &back, &bl, &err) == 0 && strcmp(back, "<|endoftext|>") == 0, "eod text");
    free(back);
    /* "<|endoftext|>" in text is the eod token, as in Megatron's (Hugging Face) GPT-2 tokenizer;
     * tiktoken with special tokens allowed: "hello <|endoftext|>" -> 31373 220 50256 */
    CHECK(mg_tokenizer_encode(t, "hello <|endoftext|>", 19, &ids, &n, &err) == 0 && n == 3 && ids[0] == 31373 &&
              ids[1] == 220 && ids[2] == 50256,
          "literal <|endoftext|>: %zu ids", n);
    free(ids);
    const char mixed[] = "a<|endoftext|><|endoftext|>b <|endoftext";
    CHECK(mg_tokenizer_encode(t, mixed, sizeof mixed - 1, &ids, &n, &err) == 0, "encode mixed");
    int n_eod = 0;
    for (size_t i = 0; i < n; i++) n_eod += ids[i] == 50256;
    CHECK(n_eod == 2, "two eod tokens in '%s', got %d", mixed, n_eod);
    CHECK(mg_tokenizer_decode(t, ids, n, &back, &bl, &err) == 0 && bl == sizeof mixed - 1 && !memcmp(back, mixed, bl),
          "mixed round trip");
    free(back);
    free(ids);
    /* Invalid UTF-8 still round-trips (bytes the regex skips get byte tokens). */
    const char bad8[] = "ab\xff\xfe cd\xc3";
    CHECK(mg_tokenizer_encode(t, bad8, 8, &ids, &n, &err) == 0, "encode invalid utf8");
    CHECK(mg_tokenizer_decode(t, ids, n, &back, &bl, &err) == 0 && bl == 8 && memcmp(back, bad8, 8) == 0,
          "invalid utf8 round trip");
    free(back);
    free(ids);
    mg_tokenizer_free(t);

    t = open_tok("SentencePieceTokenizer");
    CHECK(mg_tokenizer_vocab_size(t) == 32000 && mg_tokenizer_eod(t) == 2 && mg_tokenizer_bos(t) == 1, "sp ids");
    mg_tokenizer_free(t);

    CHECK(mg_vocab_padded(50257, 128, 1) == 50304, "pad 1");
    CHECK(mg_vocab_padded(50257, 128, 8) == 51200, "pad 8");
    CHECK(mg_vocab_padded(32000, 128, 1) == 32000, "pad exact");
    CHECK(mg_vocab_padded(256, 128, 4) == 512, "pad bytes");

    mg_tokenizer_config cfg = {"NoSuchTokenizer", 0, 0, 0};
    mg_error_clear(&err);
    CHECK(mg_tokenizer_open(&cfg, &t, &err) == MG_ERR_UNSUPPORTED && t == NULL, "unknown type");
    mg_tokenizer_config cfg2 = {"GPT2BPETokenizer", "/nonexistent/vocab.json", "/nonexistent/merges.txt", 0};
    mg_error_clear(&err);
    CHECK(mg_tokenizer_open(&cfg2, &t, &err) == MG_ERR_IO && strstr(err.msg, "/nonexistent"), "missing vocab: %s",
          err.msg);
    mg_tokenizer_config cfg3 = {"SentencePieceTokenizer", 0, 0, "/nonexistent/tokenizer.model"};
    mg_error_clear(&err);
    CHECK(mg_tokenizer_open(&cfg3, &t, &err) == MG_ERR_IO, "missing model: %s", err.msg);
}

int main(int argc, char **argv) {
    if (argc != 3 && argc != 4) {
        fprintf(stderr, "usage: %s gpt2-vectors|sp-vectors|gpt2-roundtrip|sp-roundtrip|bytes DATA_DIR | gpt2-extra DATA_DIR VECTORS\n", argv[0]);
        return 2;
    }
    g_data = argv[2];
    const char *w = argv[1];
    if (!strcmp(w, "gpt2-vectors")) g_failures += run_vectors("GPT2BPETokenizer", "gpt2/encode_vectors.txt");
    else if (!strcmp(w, "gpt2-extra") && argc == 4) g_failures += run_vectors("GPT2BPETokenizer", argv[3]);
    else if (!strcmp(w, "sp-vectors")) g_failures += run_vectors("SentencePieceTokenizer", "mistral/encode_vectors.txt");
    else if (!strcmp(w, "gpt2-roundtrip")) roundtrip("GPT2BPETokenizer");
    else if (!strcmp(w, "sp-roundtrip")) roundtrip("SentencePieceTokenizer");
    else if (!strcmp(w, "bytes")) bytes_and_api();
    else {
        fprintf(stderr, "unknown test %s\n", w);
        return 2;
    }
    if (g_failures) fprintf(stderr, "%d failure(s)\n", g_failures);
    return g_failures ? 1 : 0;
}

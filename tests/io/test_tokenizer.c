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
    mg_tokenizer_config cfg = {.type = type, .vocab_file = v, .merge_file = m, .model_file = sp};
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

    mg_tokenizer_config cfg = {.type = "NoSuchTokenizer"};
    mg_error_clear(&err);
    CHECK(mg_tokenizer_open(&cfg, &t, &err) == MG_ERR_UNSUPPORTED && t == NULL, "unknown type");
    mg_tokenizer_config cfg2 = {.type = "GPT2BPETokenizer", .vocab_file = "/nonexistent/vocab.json", .merge_file = "/nonexistent/merges.txt"};
    mg_error_clear(&err);
    CHECK(mg_tokenizer_open(&cfg2, &t, &err) == MG_ERR_IO && strstr(err.msg, "/nonexistent"), "missing vocab: %s",
          err.msg);
    mg_tokenizer_config cfg3 = {.type = "SentencePieceTokenizer", .model_file = "/nonexistent/tokenizer.model"};
    mg_error_clear(&err);
    CHECK(mg_tokenizer_open(&cfg3, &t, &err) == MG_ERR_IO, "missing model: %s", err.msg);
}

/* ---- HuggingFaceTokenizer, TikTokenizer, NullTokenizer: what the Python tests cannot
 * reach (bad files, exit codes); their exactness is tests/io/hf_tokenizers.py and
 * tests/io/tiktokenizer.py. ---- */

static const char *g_scratch;

static void put(const char *name, const char *text) {
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", g_scratch, name);
    FILE *f = fopen(path, "wb");
    if (!f) {
        fprintf(stderr, "cannot write %s\n", path);
        exit(1);
    }
    fputs(text, f);
    fclose(f);
}

/* Opens TYPE on g_scratch/file; returns the status, message in err. */
static int try_open(const char *type, const char *file, mg_tokenizer_config *base, mg_tokenizer **t, mg_error *err) {
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", g_scratch, file);
    mg_tokenizer_config cfg = base ? *base : (mg_tokenizer_config){0};
    cfg.type = type;
    cfg.model_file = file[0] ? path : NULL;
    mg_error_clear(err);
    *t = NULL;
    return mg_tokenizer_open(&cfg, t, err);
}

/* A byte-level BPE with the merges a b -> ab and ab c -> abc. */
static const char *hf_json(const char *pre, const char *extra_model, const char *added) {
    static char buf[16384];
    char vocab[8192];
    size_t o = 0;
    o += (size_t)snprintf(vocab + o, sizeof vocab - o, "{");
    for (int b = 0; b < 94; b++) { /* printable ASCII '!'..'~' */
        char c = (char)('!' + b);
        if (c == '"' || c == '\\') o += (size_t)snprintf(vocab + o, sizeof vocab - o, "\"\\%c\": %d,", c, b);
        else o += (size_t)snprintf(vocab + o, sizeof vocab - o, "\"%c\": %d,", c, b);
    }
    snprintf(vocab + o, sizeof vocab - o, "\"\u0120\": 94, \"ab\": 95, \"abc\": 96}");
    snprintf(buf, sizeof buf,
             "{\"version\": \"1.0\", \"added_tokens\": [%s], \"normalizer\": null, \"pre_tokenizer\": %s,"
             " \"post_processor\": null, \"decoder\": {\"type\": \"ByteLevel\"},"
             " \"model\": {\"type\": \"BPE\", %s \"vocab\": %s, \"merges\": [\"a b\", [\"ab\", \"c\"]]}}",
             added, pre, extra_model, vocab);
    return buf;
}

static void hf_errors(void) {
    mg_tokenizer *t;
    mg_error err = {0};
    const char *bl = "{\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"use_regex\": true}";
    put("tokenizer_config.json", "{}"); /* (a rerun finds the last run's files) */
    put("ok.json", hf_json(bl, "", "{\"id\": 97, \"content\": \"<eos>\", \"special\": true}"));
    CHECK(try_open("HuggingFaceTokenizer", "ok.json", NULL, &t, &err) == 0, "a small tokenizer.json opens: %s", err.msg);
    if (t) {
        int32_t *ids;
        size_t n;
        CHECK(mg_tokenizer_encode(t, "abc ab<eos>", 11, &ids, &n, &err) == 0, "encode: %s", err.msg);
        /* abc, then " ab" -> \u0120 (space) ab, then <eos> */
        CHECK(n == 4 && ids[0] == 96 && ids[1] == 94 && ids[2] == 95 && ids[3] == 97, "ids (%zu)", n);
        char *back;
        size_t bl2;
        CHECK(mg_tokenizer_decode(t, ids, n, &back, &bl2, &err) == 0 && !strcmp(back, "abc ab<eos>"), "decode");
        free(back);
        free(ids);
        CHECK(mg_tokenizer_vocab_size(t) == 98 && mg_tokenizer_eod(t) == -1, "vocab %lld, no eos without a config",
              (long long)mg_tokenizer_vocab_size(t));
        mg_error_clear(&err);
        CHECK(mg_tokenizer_encode(t, "a\xff", 2, &ids, &n, &err) == MG_ERR_INVALID && strstr(err.msg, "UTF-8"),
              "invalid UTF-8 refused: %s", err.msg);
        mg_tokenizer *c;
        CHECK(mg_tokenizer_clone(t, &c, &err) == 0, "clone");
        mg_tokenizer_free(c);
        mg_tokenizer_free(t);
    }
    put("tokenizer_config.json", "{\"eos_token\": {\"content\": \"<eos>\"}, \"bos_token\": \"ab\"}");
    put("tokenizer.json", hf_json(bl, "", "{\"id\": 97, \"content\": \"<eos>\", \"special\": true}"));
    CHECK(try_open("HuggingFaceTokenizer", "", NULL, &t, &err) == MG_ERR_INVALID, "no --tokenizer-model");
    char dir[4200];
    snprintf(dir, sizeof dir, "%s", g_scratch);
    mg_tokenizer_config cfg = {.type = "HuggingFaceTokenizer", .model_file = dir};
    CHECK(mg_tokenizer_open(&cfg, &t, &err) == 0 && mg_tokenizer_eod(t) == 97 && mg_tokenizer_bos(t) == 95,
          "a folder: tokenizer.json and tokenizer_config.json's eos/bos: %s", err.msg);
    mg_tokenizer_free(t);
    struct {
        const char *file, *text, *want;
        int code;
    } bad[] = {
        {"trunc.json", "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\"", "line", MG_ERR_INVALID},
        {"list.json", "[1, 2]", "not a JSON object", MG_ERR_INVALID},
        {"nomodel.json", "{\"version\": \"1.0\"}", "no \"model\"", MG_ERR_INVALID},
        {"wordpiece.json", "{\"model\": {\"type\": \"WordPiece\", \"vocab\": {}}}", "WordPiece", MG_ERR_UNSUPPORTED},
        {"unigram.json", "{\"model\": {\"type\": \"Unigram\", \"vocab\": []}}", "Unigram", MG_ERR_UNSUPPORTED},
        {"merge.json", "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1}, \"merges\": [\"a b\"]}}",
         "missing from the vocabulary", MG_ERR_INVALID},
        {"badid.json", "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": -3}, \"merges\": []}}", "no valid id",
         MG_ERR_INVALID},
        {"dropout.json", "{\"model\": {\"type\": \"BPE\", \"dropout\": 0.1, \"vocab\": {\"a\": 0}, \"merges\": []}}",
         "dropout", MG_ERR_UNSUPPORTED},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        put(bad[i].file, bad[i].text);
        int rc = try_open("HuggingFaceTokenizer", bad[i].file, NULL, &t, &err);
        CHECK(rc == bad[i].code && t == NULL && strstr(err.msg, bad[i].want), "%s: status %d, message: %s", bad[i].file,
              rc, err.msg);
        CHECK(mg_status_is_usage(rc), "%s: a usage/input error (exit 2)", bad[i].file);
    }
    struct {
        const char *pre, *want;
        int code;
    } badpre[] = {
        {"{\"type\": \"BertPreTokenizer\"}", "BertPreTokenizer", MG_ERR_UNSUPPORTED},
        {"{\"type\": \"Split\", \"pattern\": {\"Regex\": \"(unclosed\"}, \"behavior\": \"Isolated\", \"invert\": false}",
         "does not compile", MG_ERR_INVALID},
        {"{\"type\": \"Split\", \"pattern\": {\"Regex\": \"a\"}, \"behavior\": \"Sideways\"}", "behavior",
         MG_ERR_INVALID},
        {"{\"type\": \"Metaspace\", \"replacement\": \"ab\"}", "one character", MG_ERR_INVALID},
        {"{\"type\": \"Sequence\"}", "Sequence has no list", MG_ERR_INVALID},
    };
    for (size_t i = 0; i < sizeof badpre / sizeof *badpre; i++) {
        put("pre.json", hf_json(badpre[i].pre, "", ""));
        int rc = try_open("HuggingFaceTokenizer", "pre.json", NULL, &t, &err);
        CHECK(rc == badpre[i].code && t == NULL && strstr(err.msg, badpre[i].want), "pre-tokenizer %zu: %d %s", i, rc,
              err.msg);
    }
    put("tokenizer_config.json", "{\"eos_token\": \"<nope>\"}");
    mg_error_clear(&err);
    CHECK(mg_tokenizer_open(&cfg, &t, &err) == MG_ERR_INVALID && strstr(err.msg, "<nope>"), "unknown eos_token: %s",
          err.msg);
    put("tokenizer_config.json", "{\"eos_token\": ");
    mg_error_clear(&err);
    CHECK(mg_tokenizer_open(&cfg, &t, &err) == MG_ERR_INVALID && strstr(err.msg, "tokenizer_config.json"),
          "a broken tokenizer_config.json: %s", err.msg);
    put("tokenizer_config.json", "{}");
    /* no unk_token: a character outside the vocabulary is dropped, as the library does */
    put("nounk.json", hf_json("null", "", ""));
    CHECK(try_open("HuggingFaceTokenizer", "nounk.json", NULL, &t, &err) == 0, "no pre-tokenizer: %s", err.msg);
    if (t) {
        int32_t *ids;
        size_t n;
        CHECK(mg_tokenizer_encode(t, "a\xc3\xa9" "c", 4, &ids, &n, &err) == 0 && n == 2 && ids[0] == 'a' - '!' &&
                  ids[1] == 'c' - '!',
              "unknown character dropped (%zu ids)", n);
        free(ids);
        mg_tokenizer_free(t);
    }
}

static void null_tokenizer(void) {
    mg_tokenizer *t;
    mg_error err = {0};
    mg_tokenizer_config cfg = {.type = "NullTokenizer"};
    CHECK(mg_tokenizer_open(&cfg, &t, &err) == MG_ERR_INVALID && strstr(err.msg, "--vocab-size"), "needs --vocab-size");
    cfg.vocab_size = 1000;
    CHECK(mg_tokenizer_open(&cfg, &t, &err) == 0, "open");
    CHECK(mg_tokenizer_vocab_size(t) == 1000 && mg_tokenizer_eod(t) == 999 && mg_tokenizer_bos(t) == -1, "ids");
    struct {
        const char *text;
        int n, first, last;
    } ok[] = {{"1 2 3", 3, 1, 3}, {"", 0, 0, 0}, {"4\n", 1, 4, 4}, {"\t5 6", 2, 5, 6}, {"1_0 +7", 2, 10, 7}, {"999", 1, 999, 999}};
    for (size_t i = 0; i < sizeof ok / sizeof *ok; i++) {
        int32_t *ids;
        size_t n;
        int rc = mg_tokenizer_encode(t, ok[i].text, strlen(ok[i].text), &ids, &n, &err);
        CHECK(rc == 0 && (int)n == ok[i].n && (n == 0 || (ids[0] == ok[i].first && ids[n - 1] == ok[i].last)),
              "\"%s\" -> %zu ids", ok[i].text, n);
        free(ids);
    }
    const char *bad[] = {" 4", "1  2", "1000", "-1", "x", "1__0", "_1", "1 ", "3.0"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        int32_t *ids = NULL;
        size_t n;
        mg_error_clear(&err);
        CHECK(mg_tokenizer_encode(t, bad[i], strlen(bad[i]), &ids, &n, &err) == MG_ERR_INVALID && err.msg[0],
              "\"%s\" refused", bad[i]);
        free(ids);
    }
    int32_t v[3] = {5, 0, 999};
    char *back;
    size_t bl;
    CHECK(mg_tokenizer_decode(t, v, 3, &back, &bl, &err) == 0 && !strcmp(back, "5 0 999") && bl == 7, "decode");
    free(back);
    mg_tokenizer_free(t);
    cfg.null_eod_set = 1;
    cfg.null_eod_id = 0;
    CHECK(mg_tokenizer_open(&cfg, &t, &err) == 0 && mg_tokenizer_eod(t) == 0, "--null-tokenizer-eod-id 0");
    mg_tokenizer_free(t);
    cfg.null_eod_id = 1000;
    CHECK(mg_tokenizer_open(&cfg, &t, &err) == MG_ERR_INVALID, "eod outside the vocabulary");
}

static void tiktoken_errors(void) {
    mg_tokenizer *t;
    mg_error err = {0};
    /* 256 single bytes and "ab" (rank 256): base64 of each byte */
    static char buf[65536];
    static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t o = (size_t)snprintf(buf, sizeof buf, "[");
    for (int b = 0; b < 256; b++)
        o += (size_t)snprintf(buf + o, sizeof buf - o, "{\"rank\": %d, \"token_bytes\": \"%c%c==\", \"token_str\": \"\"},",
                              b, b64[b >> 2], b64[(b & 3) << 4]);
    snprintf(buf + o, sizeof buf - o, "{\"rank\": 256, \"token_bytes\": \"YWI=\", \"token_str\": \"ab\"}]");
    put("tik.json", buf);
    mg_tokenizer_config cfg = {.vocab_size = 257 + 10, .tiktoken_num_special_tokens = 10};
    CHECK(try_open("TikTokenizer", "tik.json", &cfg, &t, &err) == 0, "tiktoken vocabulary: %s", err.msg);
    if (t) {
        int32_t *ids;
        size_t n;
        CHECK(mg_tokenizer_encode(t, "ab</s>a", 7, &ids, &n, &err) == 0 && n == 3 && ids[0] == 266 && ids[1] == 2 &&
                  ids[2] == 'a' + 10,
              "ab </s> a (%zu ids)", n);
        free(ids);
        CHECK(mg_tokenizer_eod(t) == 2 && mg_tokenizer_bos(t) == 1 && mg_tokenizer_vocab_size(t) == 267, "ids");
        mg_tokenizer_free(t);
    }
    cfg.vocab_size = 300; /* more than the file's 257 ranks + 10 */
    CHECK(try_open("TikTokenizer", "tik.json", &cfg, &t, &err) == MG_ERR_INVALID && strstr(err.msg, "fewer"),
          "short vocabulary: %s", err.msg);
    cfg.vocab_size = 267;
    const char *given[] = {"<unk>", "<s>", "</s>", NULL};
    cfg.special_tokens = given;
    CHECK(try_open("TikTokenizer", "tik.json", &cfg, &t, &err) == MG_ERR_INVALID && strstr(err.msg, "<mask>"),
          "special tokens without Megatron's seven: %s", err.msg);
    cfg.special_tokens = NULL;
    put("tik2.json", "[{\"rank\": 1, \"token_bytes\": \"AA==\", \"token_str\": \"\"}]");
    cfg.vocab_size = 11;
    CHECK(try_open("TikTokenizer", "tik2.json", &cfg, &t, &err) == MG_ERR_INVALID && strstr(err.msg, "rank"),
          "rank out of order: %s", err.msg);
    put("tik3.json", "[{\"rank\": 0, \"token_bytes\": \"A*==\", \"token_str\": \"\"}]");
    CHECK(try_open("TikTokenizer", "tik3.json", &cfg, &t, &err) == MG_ERR_INVALID && strstr(err.msg, "base64"),
          "bad base64: %s", err.msg);
    put("tik.tiktoken", "AA== 0\n");
    CHECK(try_open("TikTokenizer", "tik.tiktoken", &cfg, &t, &err) == MG_ERR_INVALID && strstr(err.msg, ".json"),
          "not a .json: %s", err.msg);
    cfg.tiktoken_pattern = "v3";
    CHECK(try_open("TikTokenizer", "tik.json", &cfg, &t, &err) == MG_ERR_INVALID && strstr(err.msg, "v3"), "pattern v3");
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
    else if (!strcmp(w, "hf-errors") || !strcmp(w, "null") || !strcmp(w, "tiktoken-errors")) {
        g_scratch = argv[argc - 1];
        char cmd[4300];
        snprintf(cmd, sizeof cmd, "mkdir -p '%s'", g_scratch);
        if (system(cmd) != 0) return 1;
        if (!strcmp(w, "hf-errors")) hf_errors();
        else if (!strcmp(w, "null")) null_tokenizer();
        else tiktoken_errors();
    }
    else {
        fprintf(stderr, "unknown test %s\n", w);
        return 2;
    }
    if (g_failures) fprintf(stderr, "%d failure(s)\n", g_failures);
    return g_failures ? 1 : 0;
}

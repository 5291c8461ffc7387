/* Runs the real mgraph-preprocess binary and compares its .bin/.idx byte for byte with
 * fixtures whose bytes are packed here from the format's definition (not by the
 * library's writer); then checks that bad usage and bad input exit with status 2. */
#include <stdint.h>
#include <sys/wait.h>
#include <unistd.h>

#include "io_test_util.h"

static const char *g_bin, *g_data, *g_dir;

static int run(const char *args) {
    char cmd[16384];
    snprintf(cmd, sizeof cmd, "'%s' %s 2>>'%s/stderr.log' >/dev/null", g_bin, args, g_dir);
    int st = system(cmd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

typedef struct bytes {
    unsigned char b[4096];
    size_t n;
} bytes;

static void put(bytes *x, uint64_t v, int size) { /* little-endian, by definition */
    for (int i = 0; i < size; i++) x->b[x->n++] = (unsigned char)(v >> (8 * i));
}

/* Megatron's .idx for uint16 tokens: header, i32 lengths, i64 byte offsets, i64 doc indices. */
static void expected_idx(bytes *x, int dtype, const int32_t *lens, int nseq, const int64_t *docs, int ndocs, int isz) {
    x->n = 0;
    memcpy(x->b, "MMIDIDX\0\0", 9);
    x->n = 9;
    put(x, 1, 8);
    put(x, (uint64_t)dtype, 1);
    put(x, (uint64_t)nseq, 8);
    put(x, (uint64_t)ndocs, 8);
    for (int i = 0; i < nseq; i++) put(x, (uint64_t)(uint32_t)lens[i], 4);
    int64_t off = 0;
    for (int i = 0; i < nseq; i++) {
        put(x, (uint64_t)off, 8);
        off += lens[i] * isz;
    }
    for (int i = 0; i < ndocs; i++) put(x, (uint64_t)docs[i], 8);
}

static void compare_file(const char *path, const bytes *want) {
    size_t n;
    char *got = read_file(path, &n);
    CHECK(got != NULL, "missing output %s", path);
    if (!got) return;
    CHECK(n == want->n && memcmp(got, want->b, n) == 0, "%s differs from the expected bytes (%zu vs %zu bytes)", path, n,
          want->n);
    free(got);
}

static void write_text(const char *path, const char *s) {
    FILE *f = fopen(path, "wb");
    if (!f) exit(1);
    fputs(s, f);
    fclose(f);
}

static void gpt2_fixture(void) {
    char in[4200], args[12000], path[4300];
    snprintf(in, sizeof in, "%s/fixture.jsonl", g_dir);
    /* Ids from gpt2/encode_vectors.txt: "hello world" 31373 995, "This is some text"
     * 1212 318 617 2420, " " 220, "indivisible" 521 452 12843. */
    write_text(in,
               "{\"text\": \"hello world\", \"title\": \"indivisible\"}\n"
               "{\"text\": \"\", \"title\": \" \"}\n"
               "{\"title\": \"\", \"text\": \"This is some text\"}\n"
               "\n"
               "{\"text\": \" \", \"title\": \"hello world\"}\n");
    static const uint16_t text_ids[] = {31373, 995, 50256, 1212, 318, 617, 2420, 50256, 220, 50256};
    static const int32_t text_lens[] = {3, 5, 2};
    static const int64_t text_docs[] = {0, 1, 1, 2, 3};
    static const uint16_t title_ids[] = {521, 452, 12843, 50256, 220, 50256, 31373, 995, 50256};
    static const int32_t title_lens[] = {4, 2, 3};
    static const int64_t title_docs[] = {0, 1, 2, 2, 3};
    for (int workers = 1; workers <= 3; workers += 2) {
        snprintf(args, sizeof args,
                 "--input '%s' --output-prefix '%s/gpt2_w%d' --json-keys text title --tokenizer-type GPT2BPETokenizer "
                 "--vocab-file '%s/gpt2/vocab.json' --merge-file '%s/gpt2/merges.txt' --append-eod --workers %d",
                 in, g_dir, workers, g_data, g_data, workers);
        CHECK(run(args) == 0, "preprocess (workers %d) failed", workers);
        bytes want;
        want.n = 0;
        for (size_t i = 0; i < sizeof text_ids / 2; i++) put(&want, text_ids[i], 2);
        snprintf(path, sizeof path, "%s/gpt2_w%d_text_document.bin", g_dir, workers);
        compare_file(path, &want);
        expected_idx(&want, 8, text_lens, 3, text_docs, 5, 2);
        snprintf(path, sizeof path, "%s/gpt2_w%d_text_document.idx", g_dir, workers);
        compare_file(path, &want);
        want.n = 0;
        for (size_t i = 0; i < sizeof title_ids / 2; i++) put(&want, title_ids[i], 2);
        snprintf(path, sizeof path, "%s/gpt2_w%d_title_document.bin", g_dir, workers);
        compare_file(path, &want);
        expected_idx(&want, 8, title_lens, 3, title_docs, 5, 2);
        snprintf(path, sizeof path, "%s/gpt2_w%d_title_document.idx", g_dir, workers);
        compare_file(path, &want);
    }
}

static void text_fixture(void) {
    char in[4200], in2[4200], args[12000], path[4300];
    snprintf(in, sizeof in, "%s/fixture.txt", g_dir);
    snprintf(in2, sizeof in2, "%s/fixture2.txt", g_dir);
    write_text(in, "ab\n\n\ncd\n\n");
    write_text(in2, "xyz");
    /* Byte level, one document per blank-line block: "ab\n", "cd\n", then "xyz". */
    snprintf(args, sizeof args, "--input '%s' --input '%s' --input-format text --split-blank-lines --output-prefix '%s/bytes'",
             in, in2, g_dir);
    CHECK(run(args) == 0, "text preprocess failed");
    bytes want = {.n = 0};
    const char *all = "ab\ncd\nxyz";
    for (size_t i = 0; i < strlen(all); i++) put(&want, (unsigned char)all[i], 2);
    snprintf(path, sizeof path, "%s/bytes_text_document.bin", g_dir);
    compare_file(path, &want);
    static const int32_t lens[] = {3, 3, 3};
    static const int64_t docs[] = {0, 1, 2, 3};
    expected_idx(&want, 8, lens, 3, docs, 4, 2);
    snprintf(path, sizeof path, "%s/bytes_text_document.idx", g_dir);
    compare_file(path, &want);
    /* Whole files as documents. */
    snprintf(args, sizeof args, "--input '%s' --input '%s' --input-format text --output-prefix '%s/whole'", in, in2, g_dir);
    CHECK(run(args) == 0, "text preprocess (whole files) failed");
    static const int32_t lens2[] = {9, 3};
    static const int64_t docs2[] = {0, 1, 2};
    expected_idx(&want, 8, lens2, 2, docs2, 3, 2);
    snprintf(path, sizeof path, "%s/whole_text_document.idx", g_dir);
    compare_file(path, &want);
}

static void bad_usage(void) {
    char ok_in[4200], args[12000], path_tmp[4300];
    snprintf(ok_in, sizeof ok_in, "%s/fixture.jsonl", g_dir);
    char bad_json[4200], no_key[4200];
    snprintf(bad_json, sizeof bad_json, "%s/bad.jsonl", g_dir);
    write_text(bad_json, "{\"text\": \"a\"}\n{\"text\": \"b\"\n");
    snprintf(no_key, sizeof no_key, "%s/nokey.jsonl", g_dir);
    write_text(no_key, "{\"text\": \"a\"}\n{\"body\": \"b\"}\n");
    static struct {
        const char *what;
        char args[9000];
    } cases[32]; /* static size: 32 x 9 KB */
    int n = 0;
#define CASE(w, ...) (cases[n].what = (w), snprintf(cases[n].args, sizeof cases[n].args, __VA_ARGS__), n++)
    CASE("unknown flag", "--input '%s' --output-prefix '%s/x' --frobnicate", ok_in, g_dir);
    CASE("no --input", "--output-prefix '%s/x'", g_dir);
    CASE("no --output-prefix", "--input '%s'", ok_in);
    CASE("--workers 0", "--input '%s' --output-prefix '%s/x' --workers 0", ok_in, g_dir);
    CASE("--workers abc", "--input '%s' --output-prefix '%s/x' --workers abc", ok_in, g_dir);
    CASE("bad --input-format", "--input '%s' --output-prefix '%s/x' --input-format xml", ok_in, g_dir);
    CASE("unknown tokenizer", "--input '%s' --output-prefix '%s/x' --tokenizer-type Foo", ok_in, g_dir);
    CASE("GPT-2 without files", "--input '%s' --output-prefix '%s/x' --tokenizer-type GPT2BPETokenizer", ok_in, g_dir);
    CASE("missing vocab", "--input '%s' --output-prefix '%s/x' --tokenizer-type GPT2BPETokenizer --vocab-file /nonexistent "
         "--merge-file /nonexistent", ok_in, g_dir);
    CASE("eod without eod token", "--input '%s' --output-prefix '%s/x' --append-eod", ok_in, g_dir);
    CASE("missing input", "--input '%s/nonexistent.jsonl' --output-prefix '%s/x'", g_dir, g_dir);
    CASE("invalid JSON", "--input '%s' --output-prefix '%s/x'", bad_json, g_dir);
    CASE("missing key", "--input '%s' --output-prefix '%s/x'", no_key, g_dir);
    CASE("--split-sentences", "--input '%s' --output-prefix '%s/x' --split-sentences", ok_in, g_dir);
    /* the tokenizers of issue 38: corrupt or unsupported files, missing flags, ids the
     * tokenizer cannot have */
    char hfdir[4200], tik[4200], ids[4200];
    snprintf(hfdir, sizeof hfdir, "%s/hf", g_dir);
    snprintf(args, sizeof args, "mkdir -p '%s'", hfdir);
    if (system(args) != 0) exit(1);
    snprintf(path_tmp, sizeof path_tmp, "%s/tokenizer.json", hfdir);
    write_text(path_tmp, "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1}, \"merges\": [\"a b\"]}}");
    CASE("HF merge of a missing token", "--input '%s' --output-prefix '%s/x' --tokenizer-type HuggingFaceTokenizer "
         "--tokenizer-model '%s'", ok_in, g_dir, hfdir);
    CASE("HF without --tokenizer-model", "--input '%s' --output-prefix '%s/x' --tokenizer-type HuggingFaceTokenizer",
         ok_in, g_dir);
    CASE("HF folder without tokenizer.json", "--input '%s' --output-prefix '%s/x' --tokenizer-type HuggingFaceTokenizer "
         "--tokenizer-model '%s'", ok_in, g_dir, g_dir);
    snprintf(tik, sizeof tik, "%s/tik.json", g_dir);
    write_text(tik, "[{\"rank\": 0, \"token_bytes\": \"AA==\", \"token_str\": \"\"}]");
    CASE("TikTokenizer vocabulary too short", "--input '%s' --output-prefix '%s/x' --tokenizer-type TikTokenizer "
         "--tokenizer-model '%s'", ok_in, g_dir, tik);
    CASE("--tiktoken-pattern v3", "--input '%s' --output-prefix '%s/x' --tokenizer-type TikTokenizer "
         "--tokenizer-model '%s' --tiktoken-pattern v3", ok_in, g_dir, tik);
    CASE("NullTokenizer without --vocab-size", "--input '%s' --output-prefix '%s/x' --tokenizer-type NullTokenizer",
         ok_in, g_dir);
    snprintf(ids, sizeof ids, "%s/ids.jsonl", g_dir);
    write_text(ids, "{\"text\": \"1 2 3\"}\n{\"text\": \"4 500\"}\n");
    CASE("NullTokenizer id past the vocabulary", "--input '%s' --output-prefix '%s/x' --tokenizer-type NullTokenizer "
         "--vocab-size 100", ids, g_dir);
    CASE("NullTokenizer text that is not ids", "--input '%s' --output-prefix '%s/x' --tokenizer-type NullTokenizer "
         "--vocab-size 100", ok_in, g_dir);
    for (int i = 0; i < n; i++) {
        snprintf(args, sizeof args, "%s", cases[i].args);
        int rc = run(args);
        CHECK(rc == 2, "%s: exit %d, expected 2", cases[i].what, rc);
    }
    char path[4300];
    snprintf(path, sizeof path, "%s/x_text_document.bin", g_dir);
    CHECK(access(path, F_OK) != 0, "a failed run leaves no output behind");
    snprintf(args, sizeof args, "--help");
    CHECK(run(args) == 0, "--help exits 0");
}

int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: %s fixtures|bad-usage PREPROCESS_BINARY DATA_DIR SCRATCH_DIR\n", argv[0]);
        return 2;
    }
    g_bin = argv[2];
    g_data = argv[3];
    g_dir = argv[4];
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s'", g_dir);
    if (system(cmd) != 0) return 1;
    if (!strcmp(argv[1], "fixtures")) {
        gpt2_fixture();
        text_fixture();
    } else if (!strcmp(argv[1], "bad-usage")) {
        gpt2_fixture(); /* writes fixture.jsonl, used as a valid input */
        bad_usage();
    } else {
        return 2;
    }
    if (g_failures) fprintf(stderr, "%d failure(s); the tool's messages are in %s/stderr.log\n", g_failures, g_dir);
    return g_failures ? 1 : 0;
}

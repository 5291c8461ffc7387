/* Fuzz target: mgraph-preprocess's input readers (JSON Lines, and text documents
 * split at blank lines) end to end, through its own main() with the byte-level
 * tokenizer, writing a .bin/.idx pair into the scratch folder. The first input byte
 * picks the format. */
#include "fuzz_util.h"

int preprocess_main(int argc, char **argv);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size == 0) return 0;
    int text = data[0] & 1;
    const char *in = fz_write(text ? "in.txt" : "in.jsonl", data + 1, size - 1);
    char prefix[600];
    snprintf(prefix, sizeof prefix, "%s/out", fz_dir());
    char *argv[] = {"mgraph-preprocess", "--input", (char *)in, "--output-prefix", prefix,
                    "--tokenizer-type", "ByteLevelTokenizer", "--log-interval", "1000",
                    text ? "--input-format" : NULL, "text", "--split-blank-lines", NULL};
    int argc = text ? 12 : 9;
    preprocess_main(argc, argv);
    return 0;
}

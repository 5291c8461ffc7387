/* Fuzz target: Megatron .idx/.bin reader (io/indexed.c). The input is the .idx, then
 * "\n--bin--\n", then the .bin; every sequence of a pair that opens is read back. */
#include "fuzz_util.h"
#include "mgraph/dataset.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const uint8_t *idx, *bin;
    size_t ni, nb;
    fz_split(data, size, "\n--bin--\n", &idx, &ni, &bin, &nb);
    fz_write("d.idx", idx, ni);
    fz_write("d.bin", bin, nb);
    char prefix[600];
    snprintf(prefix, sizeof prefix, "%s/d", fz_dir());
    mg_indexed_dataset *ds;
    mg_error err = {0};
    if (mg_indexed_open(prefix, &ds, &err) != MG_OK) return 0;
    int32_t buf[256];
    for (uint64_t s = 0; s < mg_indexed_num_sequences(ds) && s < 64; s++) {
        uint64_t len = (uint64_t)mg_indexed_sequence_length(ds, s);
        for (uint64_t off = 0; off < len && off < 4096; off += 256) {
            mg_error e2 = {0};
            mg_indexed_read_tokens(ds, s, off, len - off < 256 ? len - off : 256, buf, &e2);
        }
    }
    mg_indexed_free(ds);
    return 0;
}

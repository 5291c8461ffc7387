/* Fuzz target: the GPT dataset's index cache reader (io/gpt_dataset.c load_cache).
 * A small dataset is made once; each input becomes its train-split cache file. The
 * key hash and the checksum in the input's header are set to the right values first
 * (as a forged file would have them), so that mutations reach the entry checks; if the
 * dataset then opens, every train sample is read. */
#include "fuzz_util.h"

#include <dirent.h>
#include "io/hashmap.h"
#include "mgraph/dataset.h"

static char g_prefix[600], g_cache_dir[600], g_cache_file[1200];
static uint64_t g_key;

static mg_gpt_dataset_config config(void) {
    mg_gpt_dataset_config c = {g_prefix, "80,20,0", 8, 5, {40, 0, 0}, g_cache_dir, 256, NULL, false, 0};
    return c;
}

static void setup(void) {
    snprintf(g_prefix, sizeof g_prefix, "%s/data", fz_dir());
    snprintf(g_cache_dir, sizeof g_cache_dir, "%s/cache", fz_dir());
    mg_indexed_writer *w;
    mg_error err = {0};
    if (mg_indexed_writer_open(g_prefix, MG_IDX_U16, &w, &err)) abort();
    int32_t ids[64];
    for (int d = 0; d < 30; d++) {
        int n = 1 + (d * 7) % 40;
        for (int i = 0; i < n; i++) ids[i] = (d * 31 + i * 7) % 256;
        if (mg_indexed_writer_add_tokens(w, ids, (size_t)n, &err) || mg_indexed_writer_end_document(w, &err)) abort();
    }
    if (mg_indexed_writer_finalize(w, &err)) abort();
    mg_indexed_writer_free(w);
    mg_gpt_dataset_config c = config();
    mg_dataset *ds;
    if (mg_gpt_dataset_open(&c, &ds, &err)) {
        fprintf(stderr, "fuzz_cache setup: %s\n", err.msg);
        abort();
    }
    mg_dataset_free(ds);
    DIR *dir = opendir(g_cache_dir);
    struct dirent *e;
    while (dir && (e = readdir(dir)))
        if (strstr(e->d_name, "_train.idxcache")) snprintf(g_cache_file, sizeof g_cache_file, "%s/%s", g_cache_dir, e->d_name);
    if (dir) closedir(dir);
    FILE *f = fopen(g_cache_file, "rb");
    if (!f || fseek(f, 16, SEEK_SET) || fread(&g_key, 8, 1, f) != 1) abort();
    fclose(f);
}

/* The reader's checksum (gpt_dataset.c cache_checksum) over the arrays laid out after
 * the 48-byte header; 0 when the sizes do not fit the input. */
static int fix_header(uint8_t *b, size_t n) {
    if (n < 48) return 0;
    uint64_t nd, ns;
    memcpy(&nd, b + 24, 8);
    memcpy(&ns, b + 32, 8);
    if (nd > n || ns > n || n != 48 + (nd * 4 + 7) / 8 * 8 + 16 * (ns + 1) + 8 * ns) return 0;
    memcpy(b + 16, &g_key, 8);
    const uint8_t *doc = b + 48, *smp = doc + (nd * 4 + 7) / 8 * 8, *shf = smp + 16 * (ns + 1);
    uint64_t h = 0x6d67636b73756d31ULL;
    if (nd) h = mg_hash_bytes(doc, nd * 4, h);
    h = mg_hash_bytes(smp, 16 * (ns + 1), h);
    if (ns) h = mg_hash_bytes(shf, 8 * ns, h);
    memcpy(b + 40, &h, 8);
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!g_cache_file[0]) setup();
    uint8_t *b = malloc(size + 1);
    if (!b) return 0;
    memcpy(b, data, size);
    fix_header(b, size);
    FILE *f = fopen(g_cache_file, "wb");
    if (!f || (size && fwrite(b, 1, size, f) != size) || fclose(f)) abort();
    free(b);
    mg_gpt_dataset_config c = config();
    mg_dataset *ds;
    mg_error err = {0};
    if (mg_gpt_dataset_open(&c, &ds, &err) == MG_OK) {
        int32_t tok[16];
        for (uint64_t i = 0; i < mg_dataset_num_samples(ds, MG_SPLIT_TRAIN); i++) {
            mg_error e2 = {0};
            if (mg_dataset_sample(ds, MG_SPLIT_TRAIN, i, tok, &e2)) {
                fprintf(stderr, "a cache the reader accepted gives a bad sample: %s\n", e2.msg);
                abort();
            }
        }
        mg_dataset_free(ds);
    }
    return 0;
}

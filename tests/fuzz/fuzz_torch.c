/* Fuzz target: the reader of torch.save archives and pickles (io/torch_zip.c, io/pickle.c).
 * An input starting "PK" is read as a torch.save archive, anything else as a plain pickle
 * (torch.distributed.checkpoint's .metadata); every tensor reached is converted to float32
 * (a bounded walk: memo references may share values or form cycles). */
#include "fuzz_util.h" /* first: it defines _GNU_SOURCE */

#include "mgraph/torchfile.h"

static void walk(const mg_pk *v, int depth, int *budget) {
    if (!v || depth > 64 || --*budget < 0) return;
    if (v->kind == MG_PK_TENSOR && mg_torch_numel(v->tensor) <= (1 << 16)) {
        float *f = malloc((size_t)(mg_torch_numel(v->tensor) + 1) * sizeof *f);
        mg_error e = {0};
        if (f) mg_torch_tensor_f32(v->tensor, f, "x", &e);
        free(f);
    }
    char d[128];
    mg_pk_describe(v, d, sizeof d);
    for (size_t i = 0; v->items && i < v->len; i++) walk(v->items[i], depth + 1, budget);
    walk(v->call, depth + 1, budget);
    walk(v->args, depth + 1, budget);
    walk(v->state, depth + 1, budget);
    mg_pk_get(v, "model");
    mg_pk_get_int(v, 0);
    mg_pk_attr(v, "num_layers");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    bool zip = size >= 2 && data[0] == 'P' && data[1] == 'K';
    const char *path = fz_write(zip ? "file.pt" : "file.pkl", data, size);
    mg_torch_file *f = NULL;
    mg_error err = {0};
    if (mg_torch_open(path, "input", !zip, &f, &err) != MG_OK) return 0;
    int budget = 100000;
    walk(mg_torch_root(f), 0, &budget);
    mg_torch_verify(f, &err);
    mg_torch_close(f);
    return 0;
}

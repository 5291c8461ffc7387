/* Prints what io/torch_zip.c and io/pickle.c read from a torch.save file (or, with --pickle,
 * a plain pickle) as JSON, tensors as float32 lists, for tests/io/torchfile.py to compare
 * with torch.load. Exit 2 with the reader's message for a file it refuses. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mgraph/torchfile.h"

static int dump(const mg_pk *v, int depth, mg_error *err);

static void str(const char *s, size_t n) {
    putchar('"');
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') printf("\\%c", c);
        else if (c < 0x20) printf("\\u%04x", c);
        else putchar(c);
    }
    putchar('"');
}

static void num(double f) {
    if (isnan(f)) printf("\"nan\"");
    else if (isinf(f)) printf(f > 0 ? "\"inf\"" : "\"-inf\"");
    else printf("%.17g", f);
}

static int seq(const char *kind, const mg_pk *v, int depth, mg_error *err) {
    printf("{\"%s\": [", kind);
    for (size_t i = 0; i < v->len; i++) {
        if (i) putchar(',');
        int rc = dump(v->items[i], depth + 1, err);
        if (rc) return rc;
    }
    printf("]}");
    return MG_OK;
}

static int dump(const mg_pk *v, int depth, mg_error *err) {
    if (depth > 200) return mg_error_set(err, MG_ERR_INVALID, "nested deeper than 200 (a cycle?)");
    if (!v) {
        printf("null");
        return MG_OK;
    }
    switch (v->kind) {
    case MG_PK_NONE: printf("null"); break;
    case MG_PK_BOOL: printf(v->i ? "true" : "false"); break;
    case MG_PK_INT: printf("%lld", (long long)v->i); break;
    case MG_PK_FLOAT: num(v->f); break;
    case MG_PK_STR: str(v->s, v->len); break;
    case MG_PK_BYTES:
        printf("{\"bytes\": \"");
        for (size_t i = 0; i < v->len; i++) printf("%02x", (unsigned char)v->s[i]);
        printf("\"}");
        break;
    case MG_PK_LIST: return seq("list", v, depth, err);
    case MG_PK_TUPLE: return seq("tuple", v, depth, err);
    case MG_PK_SET: return seq("set", v, depth, err);
    case MG_PK_DICT: return seq("dict", v, depth, err);
    case MG_PK_GLOBAL: printf("{\"global\": "), str(v->s, v->len), putchar('}'); break;
    case MG_PK_OBJECT: {
        printf("{\"object\": ");
        int rc = dump(v->call, depth + 1, err);
        printf(", \"args\": ");
        if (!rc) rc = dump(v->args, depth + 1, err);
        printf(", \"state\": ");
        if (!rc) rc = dump(v->state, depth + 1, err);
        if (!rc && v->len) {
            printf(", \"items\": ");
            rc = seq("list", v, depth, err);
        }
        putchar('}');
        return rc;
    }
    case MG_PK_TENSOR: {
        const mg_torch_tensor *t = v->tensor;
        int64_t n = mg_torch_numel(t);
        float *d = malloc((size_t)(n ? n : 1) * sizeof *d);
        if (!d) return mg_error_set(err, MG_ERR_NOMEM, "out of memory");
        int rc = mg_torch_tensor_f32(t, d, "(dumped)", err);
        if (!rc) {
            printf("{\"tensor\": \"%s\", \"shape\": [", mg_torch_dtype_name(t->dtype));
            for (int i = 0; i < t->ndim; i++) printf("%s%lld", i ? "," : "", (long long)t->shape[i]);
            printf("], \"data\": [");
            for (int64_t i = 0; i < n; i++) {
                if (i) putchar(',');
                num(d[i]);
            }
            printf("]}");
        }
        free(d);
        return rc;
    }
    case MG_PK_STORAGE: printf("{\"storage\": null}"); break;
    }
    return MG_OK;
}

int main(int argc, char **argv) {
    bool raw = argc == 3 && !strcmp(argv[1], "--pickle");
    if (argc != 2 && !raw) {
        fprintf(stderr, "usage: torch_dump [--pickle] FILE\n");
        return 2;
    }
    mg_error err = {0};
    mg_torch_file *f = NULL;
    int rc = mg_torch_open(argv[argc - 1], "file", raw, &f, &err);
    if (!rc) rc = dump(mg_torch_root(f), 0, &err);
    putchar('\n');
    mg_torch_close(f);
    if (rc) {
        fprintf(stderr, "torch_dump: %s\n", err.msg);
        return mg_status_is_usage(rc) ? 2 : 1;
    }
    return 0;
}

/* mgraph-run --model-lib (tools/run_model_lib.h). */
#include "run_model_lib.h"

#include <dlfcn.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The flag's value in argv[i] ("--model-lib=x") or argv[i + 1]; *used the arguments taken. */
static const char *flag_value(char **argv, int argc, int i, size_t len, int *used) {
    const char *a = argv[i];
    if (a[len] == '=') {
        *used = 1;
        return a + len + 1;
    }
    *used = 2;
    return i + 1 < argc && strncmp(argv[i + 1], "--", 2) ? argv[i + 1] : NULL;
}

static const mg_model_lib_flag *find_flag(const mg_model_lib_flag *flags, const char *a, size_t *len) {
    for (const mg_model_lib_flag *f = flags; f && f->name; f++) {
        size_t n = strlen(f->name);
        if (!strncmp(a, f->name, n) && (a[n] == 0 || a[n] == '=')) {
            *len = n;
            return f;
        }
    }
    return NULL;
}

int mg_run_model_lib_load(int *argc, char **argv, mg_run_model_lib *L, mg_error *err) {
    memset(L, 0, sizeof *L);
    const char *name = "--model-lib";
    size_t nlen = strlen(name);
    for (int i = 1; i < *argc; i++) {
        if (strncmp(argv[i], name, nlen) || (argv[i][nlen] && argv[i][nlen] != '=')) continue;
        int used;
        const char *v = flag_value(argv, *argc, i, nlen, &used);
        if (!v || !*v) return mg_error_set(err, MG_ERR_INVALID, "--model-lib needs a value (a shared library's path)");
        if (L->path && strcmp(L->path, v))
            return mg_error_set(err, MG_ERR_INVALID, "--model-lib given twice (%s and %s)", L->path, v);
        L->path = v;
    }
    if (!L->path) return MG_OK;
    /* a name without a slash would be searched on the library path: the file named is meant */
    char path[4200];
    snprintf(path, sizeof path, "%s%s", strchr(L->path, '/') ? "" : "./", L->path);
    dlerror();
    L->handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!L->handle) {
        const char *why = dlerror();
        return mg_error_set(err, MG_ERR_INVALID, "--model-lib %s: cannot load it: %s", L->path, why ? why : "?");
    }
    const int *abi = dlsym(L->handle, "mg_model_lib_abi");
    if (!abi)
        return mg_error_set(err, MG_ERR_INVALID,
                            "--model-lib %s: no symbol mg_model_lib_abi (a model library defines "
                            "const int mg_model_lib_abi = MG_MODEL_LIB_ABI; see mgraph/model_lib.h)",
                            L->path);
    if (*abi != MG_MODEL_LIB_ABI)
        return mg_error_set(err, MG_ERR_INVALID,
                            "--model-lib %s: built for model library ABI %d, this mgraph-run loads ABI %d (rebuild it "
                            "against this mgraph's mgraph/model_lib.h)",
                            L->path, *abi, MG_MODEL_LIB_ABI);
    *(void **)&L->open = dlsym(L->handle, "mg_model_lib_open");
    if (!L->open)
        return mg_error_set(err, MG_ERR_INVALID,
                            "--model-lib %s: no symbol mg_model_lib_open (the model's entry point, see mgraph/model_lib.h)",
                            L->path);
    L->flags = dlsym(L->handle, "mg_model_lib_flags"); /* (optional) */
    for (const mg_model_lib_flag *f = L->flags; f && f->name; f++)
        if (strncmp(f->name, "--", 2) || !f->name[2])
            return mg_error_set(err, MG_ERR_INVALID, "--model-lib %s: its flag '%s' does not start with --", L->path,
                                f->name);
    /* its flags out of the command line, into its own argv */
    L->argv = calloc((size_t)*argc + 1, sizeof *L->argv);
    if (!L->argv) return mg_error_set(err, MG_ERR_NOMEM, "out of memory");
    int out = 1;
    for (int i = 1; i < *argc; i++) {
        size_t len = 0;
        const mg_model_lib_flag *f = find_flag(L->flags, argv[i], &len);
        if (!f) {
            argv[out++] = argv[i];
            continue;
        }
        if (!f->arg) {
            if (argv[i][len] == '=')
                return mg_error_set(err, MG_ERR_INVALID, "%s (of --model-lib %s) takes no value", f->name, L->path);
            L->argv[L->argc++] = argv[i];
            continue;
        }
        int used;
        const char *v = flag_value(argv, *argc, i, len, &used);
        if (!v) return mg_error_set(err, MG_ERR_INVALID, "%s (of --model-lib %s) needs a value", f->name, L->path);
        L->argv[L->argc++] = (char *)f->name;
        L->argv[L->argc++] = (char *)v;
        i += used - 1;
    }
    argv[out] = NULL;
    *argc = out;
    return MG_OK;
}

void mg_run_model_lib_usage(const mg_run_model_lib *L, FILE *f) {
    if (!L->path) return;
    fprintf(f, "\nflags of the model library %s:\n", L->path);
    for (const mg_model_lib_flag *fl = L->flags; fl && fl->name; fl++)
        fprintf(f, "  %s%s%s  %s\n", fl->name, fl->arg ? " " : "", fl->arg ? fl->arg : "", fl->help ? fl->help : "");
}

int mg_run_model_lib_open(mg_run_model_lib *L, const mg_model_lib_host *host, mg_error *err) {
    memset(&L->lib, 0, sizeof L->lib);
    int rc = L->open(host, &L->lib, err);
    L->opened = true;
    if (rc && !err->msg[0]) mg_error_set(err, rc, "the model library's mg_model_lib_open failed (%d)", rc);
    if (rc) return rc > 0 ? mg_error_set(err, MG_ERR_RUNTIME, "%s", err->msg) : rc;
    if (!L->lib.model.forward)
        return mg_error_set(err, MG_ERR_INVALID, "--model-lib %s: mg_model_lib_open gave no model.forward", L->path);
    if (!L->lib.model.name) L->lib.model.name = "model";
    if (L->lib.data.feed == NULL && (L->lib.data.num_samples || L->lib.data.count_tokens))
        return mg_error_set(err, MG_ERR_INVALID, "--model-lib %s: its data source has no feed function", L->path);
    return MG_OK;
}

/* {"model": {"arch": name, "model_lib_args": [its flags as given]}} */
static json_t *meta_json(const mg_run_model_lib *L) {
    json_t *args = json_array();
    for (int i = 0; args && i < L->argc; i++) json_array_append_new(args, json_string(L->argv[i]));
    return json_pack("{s:{s:s, s:o}}", "model", "arch", L->lib.model.name, "model_lib_args", args);
}

char *mg_run_model_lib_meta(void *user) {
    json_t *m = meta_json(user);
    char *text = m ? json_dumps(m, JSON_COMPACT) : NULL;
    json_decref(m);
    return text;
}

int mg_run_model_lib_check(void *user, const char *meta_json_text, const char *dir, mg_error *err) {
    const mg_run_model_lib *L = user;
    json_t *saved = json_loads(meta_json_text, 0, NULL), *now = meta_json(L);
    json_t *sm = json_object_get(saved, "model"), *nm = json_object_get(now, "model");
    int rc = MG_OK;
    const char *arch = json_string_value(json_object_get(sm, "arch"));
    if (!json_is_object(sm)) rc = mg_error_set(err, MG_ERR_IO, "%s: the index has no model", dir);
    else if (!arch || strcmp(arch, L->lib.model.name))
        rc = mg_error_set(err, MG_ERR_INVALID, "--load %s: a checkpoint of model '%s', this run's --model-lib %s is '%s'",
                          dir, arch ? arch : "?", L->path, L->lib.model.name);
    else if (!json_equal(json_object_get(sm, "model_lib_args"), json_object_get(nm, "model_lib_args"))) {
        char *a = json_dumps(json_object_get(sm, "model_lib_args"), JSON_COMPACT | JSON_ENCODE_ANY),
             *b = json_dumps(json_object_get(nm, "model_lib_args"), JSON_COMPACT | JSON_ENCODE_ANY);
        rc = mg_error_set(err, MG_ERR_INVALID,
                          "--load %s: the checkpoint was saved with the model library's flags %s, this run gives %s",
                          dir, a ? a : "none", b ? b : "none");
        free(a);
        free(b);
    }
    json_decref(saved);
    json_decref(now);
    return rc;
}

void mg_run_model_lib_close(mg_run_model_lib *L) {
    if (L->opened && L->lib.close) L->lib.close(L->lib.user);
    L->opened = false;
    /* (not dlclose'd: StarPU's and OpenMP's threads may still hold code of it until exit) */
    free(L->argv);
    L->argv = NULL;
}

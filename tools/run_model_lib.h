/* mgraph-run --model-lib: a user's model from a shared library (mgraph/model_lib.h):
 * loading it, its flags out of the command line, its checkpoint metadata. */
#ifndef MG_TOOLS_RUN_MODEL_LIB_H
#define MG_TOOLS_RUN_MODEL_LIB_H

#include "mgraph/model_lib.h"

typedef struct mg_run_model_lib {
    const char *path;          /* NULL: no --model-lib (the GPT model) */
    void *handle;              /* dlopen's */
    mg_model_lib_open_fn open;
    const mg_model_lib_flag *flags; /* the library's, {NULL}-terminated; NULL: none */
    int argc;                  /* its flags as given, taken out of the command line */
    char **argv;               /* (owned array, strings borrowed from argv) */
    mg_model_lib lib;          /* what mg_model_lib_open gave */
    bool opened;
} mg_run_model_lib;

/* Finds --model-lib in argv; when given, loads the file, checks mg_model_lib_abi and
 * finds mg_model_lib_open and mg_model_lib_flags, and takes the library's flags (with
 * their values) out of argv (*argc shrinks). MG_ERR_INVALID with the reason when the
 * file does not load, a required symbol is missing, the ABI version differs, a flag
 * of the library needs a value it lacks, or --model-lib has no value. */
int mg_run_model_lib_load(int *argc, char **argv, mg_run_model_lib *L, mg_error *err);
/* The library's flags, for --help. */
void mg_run_model_lib_usage(const mg_run_model_lib *L, FILE *f);
/* mg_model_lib_open with the host's description; checks what it returned. */
int mg_run_model_lib_open(mg_run_model_lib *L, const mg_model_lib_host *host, mg_error *err);
/* The checkpoint metadata and its check when the library gives none: the model's name
 * and the library's flags (the trainer's ckpt.meta / ckpt.check, user L). */
char *mg_run_model_lib_meta(void *user);
int mg_run_model_lib_check(void *user, const char *meta_json, const char *dir, mg_error *err);
/* Calls the library's close, unloads it. */
void mg_run_model_lib_close(mg_run_model_lib *L);

#endif

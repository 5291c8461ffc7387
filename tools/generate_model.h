/* mgraph-generate's model: the flags a checkpoint was saved with, as mgraph-run's --load
 * checks them, and its weights in storage (tools/generate_model.c). */
#ifndef MG_TOOLS_GENERATE_MODEL_H
#define MG_TOOLS_GENERATE_MODEL_H

#include "mgraph/engine.h"
#include "mgraph/model.h"
#include "mgraph/tokenizer.h"
#include "run_checkpoint.h"
#include "run_config.h"

typedef struct gen_model {
    mg_run_config cfg;       /* the checkpoint's model flags as mgraph-run flags, with the caller's tokenizer flags */
    mg_gpt_config model;     /* the model they build; vocab padded as the checkpoint's */
    mg_tokenizer *tok;
    int64_t vocab;           /* the tokenizer's (unpadded) vocabulary */
    const char *ckpt_dir;    /* the iteration directory loaded (owned by the checkpoint, valid until close) */
    int64_t iteration;
    /* the weights: a graph of the parameters alone, its plan and storage, which the
     * prefill and decode graphs borrow (mg_storage_options.params_from) */
    mg_graph *g;
    mg_gpt params;
    mg_memplan *plan;
    mg_storage *st;
    char argv_buf[8192];     /* the translated flags' text */
} gen_model;

/* Opens checkpoint `load` (a directory with a tracker, or an iteration directory): its
 * model flags become mgraph-run flags, followed by tok_argv[0..tok_argc) (the tokenizer
 * flags the command line gave: they override the checkpoint's --tokenizer-type); the
 * model and tokenizer are built from them, checked against the checkpoint by mgraph-run's
 * --load check (run_checkpoint.c) and its parameters read. Errors: MG_ERR_IO (missing,
 * corrupt checkpoint), MG_ERR_INVALID / MG_ERR_UNSUPPORTED (flags, a model the decoder
 * does not handle): usage errors for the tool. */
int gen_model_open(const char *load, int tok_argc, char **tok_argv, gen_model *m, mg_error *err);
void gen_model_close(gen_model *m);

#endif

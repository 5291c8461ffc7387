/* mgraph-convert --from-megatron / --to-megatron (tools/convert_megatron.c,
 * tools/convert_megatron_dist.c): Megatron-LM checkpoints of Megatron-Core's GPTModel
 * (GPT and the LLaMA family) to and from mgraph's checkpoints. */
#ifndef MGRAPH_TOOLS_CONVERT_MEGATRON_H
#define MGRAPH_TOOLS_CONVERT_MEGATRON_H

#include <stdint.h>

#include "mgraph/error.h"

typedef struct cv_megatron_opts {
    const char *from;            /* --from-megatron DIR */
    const char *save;            /* --save DIR (mgraph) */
    bool no_load_optim;          /* --no-load-optim: the model, iteration and schedule only */
    int64_t true_vocab_size;     /* --true-vocab-size: the tokenizer's vocabulary (0: open the tokenizer the
                                    checkpoint's args name) */
} cv_megatron_opts;

/* Reads the Megatron checkpoint (torch or torch_dist) and writes an mgraph checkpoint at
 * its iteration with the model, the optimizer's moments and step, the learning-rate
 * schedule and the data position. Prints one line saying what it converted. */
int cv_from_megatron(const cv_megatron_opts *o, mg_error *err);

#endif

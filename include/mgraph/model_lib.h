/* A model as a shared library: mgraph-run --model-lib libmymodel.so trains it with every
 * mgraph-run feature (plans and --plan files, checkpoints, Megatron's log line, the
 * metrics file, TensorBoard, evaluation, --trace-file, --dump-dot).
 *
 * The library is C (or anything with C linkage) built against the installed mgraph
 * (pkg-config --cflags --libs mgraph, or find_package(mgraph)) as a shared object, and
 * exports, unmangled:
 *
 *   const int mg_model_lib_abi = MG_MODEL_LIB_ABI;            required: the ABI it was built for
 *   int mg_model_lib_open(const mg_model_lib_host *host,      required: the model (below)
 *                         mg_model_lib *out, mg_error *err);
 *   const mg_model_lib_flag mg_model_lib_flags[] = {...,{0}}; optional: its own flags
 *
 * mgraph-run dlopen()s the file before it parses the command line, checks the ABI
 * version, takes the library's flags (and their values) out of the command line and
 * parses the rest as its own. A file that does not load, a missing symbol or another
 * ABI version ends mgraph-run with exit 2 and the reason, before it writes anything.
 *
 * mg_model_lib_open runs once on every rank, after mgraph-run's flags are checked. It
 * fills out->model: a forward function that builds ONE micro-batch's forward and loss
 * with the graph builder (mgraph/graph.h, mgraph/step.h: mg_step_input for the
 * per-micro-batch inputs, mg_param for the parameters); the library's step builder
 * adds loss scaling, backward, gradient accumulation and the optimizer, and the plan's
 * partitioners split it (tensor parallelism by the layout roles the forward declares,
 * mg_set_layout, or a plan file's shard rules; mg_graph_set_layer marks layers for
 * pipeline stages and full recompute: give num_layers and layer_scope then).
 * Optionally it fills out->data, its own data source (mgraph/trainer.h: the feed writes each micro-batch instance's
 * inputs by name; num_samples gives the splits' sizes, so --eval-iters evaluates).
 * Without it, mgraph-run feeds its GPT data (--text-file / --data-path with the
 * tokenizer flags, mgraph/gpt_data.h; one of them must be given): the forward then reads
 * the inputs "input_ids" and "labels" ([seq, batch] int32, labels MG_LABEL_IGNORE
 * where masked) and, when it makes them, "position_ids" and "doc_start".
 * Errors: return an mg_status with a message in err (mg_error_set); MG_ERR_INVALID /
 * MG_ERR_UNSUPPORTED are the user's (exit 2).
 *
 * The optimizer, learning-rate schedule, batch sizes, seed, precision and the plan are
 * mgraph-run's flags as for GPT (--lr, --micro-batch-size, --global-batch-size,
 * --train-iters, --tensor-model-parallel-size, ...); mgraph-run's GPT model flags
 * (--num-layers, --hidden-size, ...) are not used. Checkpoints record the model's name
 * and the library's flags; --load refuses a checkpoint of another model name or other
 * flag values unless the library gives its own meta / check.
 *
 * Build it with the headers only: mgraph-run exports the mgraph API the library calls,
 * so the library must NOT link libmgraph (it would get a second copy of its state):
 *   cc -shared -fPIC mymodel.c $(pkg-config --cflags mgraph) -o libmymodel.so
 *
 * A minimal library (tests/tools/model_lib_mlp.c is a complete one):
 *
 *   #include <mgraph/model_lib.h>
 *   const int mg_model_lib_abi = MG_MODEL_LIB_ABI;
 *   const mg_model_lib_flag mg_model_lib_flags[] = {{"--width", "N", "hidden width"}, {0}};
 *   static int fwd(mg_graph *g, void *user, mg_microbatch *mb, mg_error *err) { ...; mb->loss = ...; return MG_OK; }
 *   int mg_model_lib_open(const mg_model_lib_host *h, mg_model_lib *out, mg_error *err) {
 *       ... parse h->argc / h->argv (the library's flags as given) ...
 *       out->model = (mg_model){.name = "mlp", .forward = fwd, .user = cfg};
 *       out->data = (mg_data_source){.feed = my_feed, .num_samples = my_samples, .user = cfg};
 *       out->close = my_free; out->user = cfg;
 *       return MG_OK;
 *   }
 *
 * Versioning: MG_MODEL_LIB_ABI changes whenever a struct below changes layout or
 * meaning; mgraph-run loads only libraries of its own version.
 */
#ifndef MGRAPH_MODEL_LIB_H
#define MGRAPH_MODEL_LIB_H

#include <stdbool.h>
#include <stdint.h>

#include "mgraph/dataset.h"
#include "mgraph/plan.h"
#include "mgraph/step.h"
#include "mgraph/trainer.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MG_MODEL_LIB_ABI 1

/* One flag of the library's own, as --help lists it and the command line gives it
 * ("--width 64" or "--width=64"; a switch, arg NULL, takes no value). */
typedef struct mg_model_lib_flag {
    const char *name;          /* "--width" (with the dashes) */
    const char *arg;           /* its value's name in --help ("N"); NULL: a switch */
    const char *help;          /* one line */
} mg_model_lib_flag;

/* What mgraph-run tells the library (valid during mg_model_lib_open; the dataset for the
 * whole run). */
typedef struct mg_model_lib_host {
    int abi;                   /* mgraph-run's MG_MODEL_LIB_ABI */
    const char *path;          /* the --model-lib file */
    int argc;                  /* the library's flags as given, in order: "--width", "64", ... */
    char **argv;               /* (argv[argc] is NULL) */
    int micro_batch;           /* --micro-batch-size: the samples of one micro-batch (a sub-batch
                                * may hold fewer: build shapes from mg_microbatch.batch) */
    int global_batch;          /* --global-batch-size */
    int seq_length;            /* --seq-length */
    uint64_t seed;             /* --seed: parameters are initialised from it by mgraph */
    float hidden_dropout, attention_dropout; /* --hidden-dropout, --attention-dropout */
    const mg_plan *plan;       /* the plan the model will be partitioned by */
    int world, rank;           /* ranks of the job, this one */
    /* mgraph-run's GPT data, when a data flag names some (--text-file, --data-path,
     * --train-data-path, ...; else NULL / 0 / -1, and the library must give its own data
     * source): the dataset, its tokenizer's vocabulary (token ids are in [0, vocab)), the
     * vocabulary padded as Megatron pads it for the plan (--make-vocab-size-divisible-by
     * x tp), the end-of-document token (-1: none). */
    const mg_dataset *dataset;
    int64_t vocab, padded_vocab;
    int32_t eod;
} mg_model_lib_host;

/* What the library gives. */
typedef struct mg_model_lib {
    mg_model model;            /* required: .forward; .name (titles, checkpoints), .num_layers and
                                * .layer_scope (pipeline, full recompute), .whole_micro_batches,
                                * .flops (throughput; NULL: 0) as mgraph/trainer.h says */
    mg_data_source data;       /* optional: .feed NULL: mgraph-run's GPT data (see above) */
    bool loss_token_mean;      /* the reported loss is a mean over mg_microbatch.tokens (mgraph/step.h) */
    bool per_token_loss;       /* Megatron's --calculate-per-token-loss for this model */
    /* Checkpoints, optional: a JSON object merged into every save's metadata (malloc'ed
     * text), and its check on --load (MG_ERR_INVALID naming what differs). NULL: mgraph-run
     * records {"model": {"arch": name, "model_lib_args": [the flags]}} and checks both. */
    char *(*meta)(void *user);
    int (*check)(void *user, const char *meta_json, const char *dir, mg_error *err);
    void (*close)(void *user); /* optional: called once at the end with user */
    void *user;                /* given to meta, check and close */
} mg_model_lib;

/* The library's entry point (the symbol mg_model_lib_open). */
typedef int (*mg_model_lib_open_fn)(const mg_model_lib_host *host, mg_model_lib *out, mg_error *err);

#ifdef __cplusplus
}
#endif
#endif

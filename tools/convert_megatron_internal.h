/* Between mgraph-convert's Megatron mapping (convert_megatron.c) and its readers of the two
 * checkpoint formats (convert_megatron_torch.c, convert_megatron_dist.c).
 *
 * A reader presents the checkpoint as Megatron-Core's logical tensors: full (not
 * sharded), named with global layer numbers ("decoder.layers.5.mlp.linear_fc1.weight",
 * "embedding.word_embeddings.weight"), in a layout that does not depend on the parallelism
 * the checkpoint was saved with: linear_qkv's rows grouped per query group as Megatron
 * lays them out ([q heads of group g, k_g, v_g] for each g), and with a gated MLP
 * linear_fc1's rows [gate; up] (the torch format stores each tensor-parallel shard as
 * [gate_r; up_r]: the reader reorders them; torch_dist already stores [gate; up]). */
#ifndef MGRAPH_TOOLS_CONVERT_MEGATRON_INTERNAL_H
#define MGRAPH_TOOLS_CONVERT_MEGATRON_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "convert_megatron.h"
#include "mgraph/megatron_ckpt.h"
#include "mgraph/torchfile.h"

enum { MS_PARAM, MS_EXP_AVG, MS_EXP_AVG_SQ };

typedef struct ms_src ms_src;
struct ms_src {
    const mg_pk *args;          /* the run's argparse.Namespace */
    int64_t iteration;
    const mg_pk *scheduler;     /* opt_param_scheduler's state dict (NULL: not saved) */
    bool has_moments;           /* the optimizer's exp_avg / exp_avg_sq are there */
    const char *moments_unread; /* why the optimizer state the checkpoint has is not read (NULL: it is, or none) */
    int64_t adam_step;          /* the optimizer's step count (-1: not recorded) */
    const char *what;           /* "torch format, tp 2 x pp 2, distributed optimizer" */
    /* The logical tensor `name`'s value (MS_PARAM: the optimizer's fp32 main copy where it
     * has one, else the model's) into *out (malloc'ed; NULL: only the shape), its shape in
     * ndim / shape. A name the checkpoint lacks: ndim 0 and MG_OK. */
    int (*get)(ms_src *s, const char *name, int what, int *ndim, int64_t shape[2], float **out, mg_error *err);
    /* The name of a parameter of the checkpoint no get asked for (the model mgraph builds
     * from the args would drop it), or NULL; `ignore` (may be NULL) names one to pass over. */
    const char *(*unused)(ms_src *s, const char *ignore);
    void (*close)(ms_src *s);
};

/* Opens the formats (info from mg_megatron_probe). */
int ms_open_torch(const mg_megatron_info *info, ms_src **out, mg_error *err);
int ms_open_dist(const mg_megatron_info *info, ms_src **out, mg_error *err);

/* An argparse.Namespace attribute: the first of the names present (Megatron renamed a few:
 * norm_epsilon -> layernorm_epsilon), NULL when none is, or is None. */
const mg_pk *ms_arg(const mg_pk *args, const char *name, const char *old_name);
bool ms_arg_int(const mg_pk *args, const char *name, int64_t *v);
bool ms_arg_true(const mg_pk *args, const char *name);

/* Megatron-Core's distributed optimizer lays each model chunk's parameters out in one flat
 * buffer per dtype (DistributedOptimizer._compute_per_buffer_param_layout): in reverse
 * order, each start padded to 64 elements, buckets of bucket_size elements (0: one bucket)
 * ended at a multiple of lcm(dp, 128) (lcm(dp, 128, 65536) with
 * --ddp-pad-buckets-for-high-nccl-busbw), a shared embedding in a bucket of its own. Its
 * checkpoint (get_parameter_state_dp_zero) keeps each bucket without its end padding.
 * Given numel[i] and shared[i] of the parameters in model order, fills off[i]: where
 * parameter i starts in that checkpoint's flat tensor; returns its length. */
int64_t ms_dist_opt_layout(int n, const int64_t *numel, const bool *shared, int64_t bucket_size, int64_t dp,
                           bool pad_busbw, int64_t *off);

#endif

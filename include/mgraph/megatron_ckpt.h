/* Megatron-LM's checkpoint directories, recognised (the conversion itself is
 * mgraph-convert --from-megatron's, tools/convert_megatron.c).
 *
 *   DIR/latest_checkpointed_iteration.txt        "100" or "release"
 *   DIR/iter_0000100/ (or DIR/release/)          the iteration
 * --ckpt-format torch (Megatron's "legacy" checkpoints): one directory per model-parallel
 * rank, mp_rank_TT (tensor rank), mp_rank_TT_PPP (and pipeline stage), with _EEE (expert
 * rank) appended under expert parallelism, each holding model_optim_rng.pt (torch.save
 * of the args, the iteration, the model's state dict, the optimizer's and the scheduler's)
 * and, with --use-distributed-optimizer, distrib_optim.pt (the optimizer's flat buffers).
 * --ckpt-format torch_dist (Megatron-Core's distributed checkpoints): metadata.json
 * ({"sharded_backend": "torch_dist", ...}), PyTorch Distributed Checkpoint's .metadata
 * and __R_N.distcp files, and common.pt (the args, iteration, scheduler).
 */
#ifndef MGRAPH_MEGATRON_CKPT_H
#define MGRAPH_MEGATRON_CKPT_H

#include <stdbool.h>
#include <stdint.h>

#include "mgraph/error.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum mg_megatron_format {
    MG_MEGATRON_NONE,        /* not a Megatron checkpoint */
    MG_MEGATRON_TORCH,       /* --ckpt-format torch */
    MG_MEGATRON_TORCH_DIST,  /* --ckpt-format torch_dist */
} mg_megatron_format;

typedef struct mg_megatron_info {
    mg_megatron_format format;
    int64_t iteration;       /* 0 for a release checkpoint */
    bool release;
    char dir[4096];          /* the iteration directory */
    /* torch format: the rank directories' names, parsed: the largest tensor rank + 1, the
     * number of components (1: mp_rank_TT, 2: mp_rank_TT_XXX, 3: mp_rank_TT_PPP_EEE) and
     * how many there are */
    int tp, n_parts, n_rank_dirs;
} mg_megatron_info;

/* Looks at `path` (a checkpoint root with the tracker, or an iteration directory).
 * format NONE and MG_OK when it is not a Megatron checkpoint; MG_ERR_IO naming what is
 * wrong when it is one but broken (the tracker names an iteration that is not there,
 * rank directories that do not parse). */
int mg_megatron_probe(const char *path, mg_megatron_info *info, mg_error *err);
/* "torch" / "torch_dist" / "none" */
const char *mg_megatron_format_name(mg_megatron_format f);

#ifdef __cplusplus
}
#endif
#endif

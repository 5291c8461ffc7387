/* The CUDA kernel of each op kind: ops/registry.c copies these into the op table's
 * cuda slots, so each op is still defined once (its mg_op_def) and the CUDA backend
 * only adds kernels. Ops missing here
 * (send, recv, all-to-all, the context-parallel merge and ring shift, MoE routing,
 * top-k counts and grouped GEMMs) run on CPU workers only. tests/cuda/CMakeLists.txt lists the same
 * ops (cuda.registry). */
#include "ops/cuda/cuda_common.h"

#define K(name) int mg_cuda_##name(const mg_kernel_args *a, mg_error *err);
K(matmul)
K(add)
K(sub)
K(mul)
K(scale)
K(bias_add)
K(expand)
K(sum_to)
K(gelu)
K(silu)
K(swiglu)
K(gelu_bwd)
K(silu_bwd)
K(squared_relu)
K(squared_relu_bwd)
K(gelu_erf)
K(gelu_erf_bwd)
K(swiglu_bwd)
K(layernorm)
K(layernorm_bwd)
K(rmsnorm)
K(rmsnorm_bwd)
K(softmax)
K(softmax_bwd)
K(cross_entropy)
K(xent_count)
K(cross_entropy_bwd)
K(xent_vp_max)
K(xent_vp_parts)
K(xent_vp_loss)
K(embedding)
K(embedding_bwd)
K(dropout)
K(rope)
K(attention)
K(attention_bwd)
K(sum)
K(mean)
K(sumsq)
K(clip_coef)
K(lr_schedule)
K(adamw)
K(accumulate)
K(recompute_gate)
K(zeros)
K(reshape)
K(transpose)
K(split)
K(concat)
K(slice)
K(pad)
K(allreduce)
K(allgather)
K(reduce_scatter)
K(broadcast)
K(sigmoid_norm)
K(sigmoid_norm_bwd)
K(moe_map_count)
K(moe_expert_bias_update)
K(cast)
K(shift)
#undef K

const mg_kernel_fn mg_cuda_kernels[MG_OP_COUNT] = {
    [MG_OP_MATMUL] = mg_cuda_matmul,
    [MG_OP_ADD] = mg_cuda_add,
    [MG_OP_SUB] = mg_cuda_sub,
    [MG_OP_MUL] = mg_cuda_mul,
    [MG_OP_SCALE] = mg_cuda_scale,
    [MG_OP_BIAS_ADD] = mg_cuda_bias_add,
    [MG_OP_EXPAND] = mg_cuda_expand,
    [MG_OP_SUM_TO] = mg_cuda_sum_to,
    [MG_OP_GELU] = mg_cuda_gelu,
    [MG_OP_SILU] = mg_cuda_silu,
    [MG_OP_SWIGLU] = mg_cuda_swiglu,
    [MG_OP_GELU_BWD] = mg_cuda_gelu_bwd,
    [MG_OP_SILU_BWD] = mg_cuda_silu_bwd,
    [MG_OP_SQUARED_RELU] = mg_cuda_squared_relu,
    [MG_OP_SQUARED_RELU_BWD] = mg_cuda_squared_relu_bwd,
    [MG_OP_GELU_ERF] = mg_cuda_gelu_erf,
    [MG_OP_GELU_ERF_BWD] = mg_cuda_gelu_erf_bwd,
    [MG_OP_SWIGLU_BWD] = mg_cuda_swiglu_bwd,
    [MG_OP_LAYERNORM] = mg_cuda_layernorm,
    [MG_OP_LAYERNORM_BWD] = mg_cuda_layernorm_bwd,
    [MG_OP_RMSNORM] = mg_cuda_rmsnorm,
    [MG_OP_RMSNORM_BWD] = mg_cuda_rmsnorm_bwd,
    [MG_OP_SOFTMAX] = mg_cuda_softmax,
    [MG_OP_SOFTMAX_BWD] = mg_cuda_softmax_bwd,
    [MG_OP_CROSS_ENTROPY] = mg_cuda_cross_entropy,
    [MG_OP_XENT_COUNT] = mg_cuda_xent_count,
    [MG_OP_CROSS_ENTROPY_BWD] = mg_cuda_cross_entropy_bwd,
    [MG_OP_XENT_VP_MAX] = mg_cuda_xent_vp_max,
    [MG_OP_XENT_VP_PARTS] = mg_cuda_xent_vp_parts,
    [MG_OP_XENT_VP_LOSS] = mg_cuda_xent_vp_loss,
    [MG_OP_EMBEDDING] = mg_cuda_embedding,
    [MG_OP_EMBEDDING_BWD] = mg_cuda_embedding_bwd,
    [MG_OP_DROPOUT] = mg_cuda_dropout,
    [MG_OP_ROPE] = mg_cuda_rope,
    [MG_OP_ATTENTION] = mg_cuda_attention,
    [MG_OP_ATTENTION_BWD] = mg_cuda_attention_bwd,
    [MG_OP_SUM] = mg_cuda_sum,
    [MG_OP_MEAN] = mg_cuda_mean,
    [MG_OP_SUMSQ] = mg_cuda_sumsq,
    [MG_OP_CLIP_COEF] = mg_cuda_clip_coef,
    [MG_OP_LR_SCHEDULE] = mg_cuda_lr_schedule,
    [MG_OP_ADAMW] = mg_cuda_adamw,
    [MG_OP_ACCUMULATE] = mg_cuda_accumulate,
    [MG_OP_RECOMPUTE_GATE] = mg_cuda_recompute_gate,
    [MG_OP_ZEROS] = mg_cuda_zeros,
    [MG_OP_RESHAPE] = mg_cuda_reshape,
    [MG_OP_TRANSPOSE] = mg_cuda_transpose,
    [MG_OP_SPLIT] = mg_cuda_split,
    [MG_OP_CONCAT] = mg_cuda_concat,
    [MG_OP_SLICE] = mg_cuda_slice,
    [MG_OP_PAD] = mg_cuda_pad,
    [MG_OP_ALLREDUCE] = mg_cuda_allreduce,
    [MG_OP_ALLGATHER] = mg_cuda_allgather,
    [MG_OP_SIGMOID_NORM] = mg_cuda_sigmoid_norm,
    [MG_OP_SIGMOID_NORM_BWD] = mg_cuda_sigmoid_norm_bwd,
    [MG_OP_MOE_MAP_COUNT] = mg_cuda_moe_map_count,
    [MG_OP_MOE_EXPERT_BIAS_UPDATE] = mg_cuda_moe_expert_bias_update,
    [MG_OP_SHIFT] = mg_cuda_shift,
    [MG_OP_REDUCE_SCATTER] = mg_cuda_reduce_scatter,
    [MG_OP_BROADCAST] = mg_cuda_broadcast,
    [MG_OP_CAST] = mg_cuda_cast,
};

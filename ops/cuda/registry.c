/* The CUDA kernel of each op kind: ops/registry.c copies these into the op table's
 * cuda slots, so each op is still defined once (its mg_op_def) and the CUDA backend
 * only adds kernels. Ops missing here run on CPU workers only. */
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
};

/* attention_merge: the online-softmax merge of partial attention results.
 *
 *   attention_merge(y_1, lse_1, ..., y_k, lse_k) -> y, lse
 *   y_j [s, b, nh, hd] and lse_j [b, nh, s] are the outputs of attention over disjoint
 *   blocks of keys (ops/attention.c: y_j = softmax over block j's keys · V_j,
 *   lse_j = log Σ_{keys of j} exp(S)); per query row
 *     lse = log Σ_j exp(lse_j),  y = Σ_j exp(lse_j - lse) · y_j
 *   is attention over the union of the blocks (flash attention's rescaling). A block
 *   in which a row sees no key has lse_j = -inf and weight 0; a row that sees no key
 *   in any block gives y = 0, lse = -inf, as the attention op does.
 *
 * Context parallelism (partitioners/cp.c) computes a rank's queries against each K/V
 * block as it comes around the ring and merges them with this op. It needs no
 * gradient rule: the partitioner runs after autodiff, and the backward of attention
 * over the union is, block by block, attention_bwd(dy, q, K_j, V_j, y, lse) with the
 * merged y and lse (P_j = exp(S_j - lse) is the block's slice of the whole softmax,
 * D = rowsum(dy·y) is shared), so dQ sums the blocks' dQ and each block's dK/dV is
 * exact; cp.c emits exactly that. Inputs are summed in the order given (deterministic).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops/op.h"

static int infer_merge(const mg_node *n, mg_tensor_desc *out, mg_error *err) {
    if (n->n_in < 2 || n->n_in % 2) return mg_shape_error(err, n, "inputs must be pairs (y_j, lse_j)");
    const mg_tensor *y0 = n->in[0];
    if (y0->ndim != 4 || y0->dtype != MG_F32) return mg_shape_error(err, n, "y_j must be f32 [s, b, nh, hd]");
    for (int j = 0; j < n->n_in; j += 2) {
        const mg_tensor *y = n->in[j], *l = n->in[j + 1];
        if (y->dtype != MG_F32 || !mg_same_shape(y, y0)) return mg_shape_error(err, n, "every y_j must be shaped like y_1");
        if (l->dtype != MG_F32 || l->ndim != 3 || l->shape[0] != y0->shape[1] || l->shape[1] != y0->shape[2] ||
            l->shape[2] != y0->shape[0])
            return mg_shape_error(err, n, "lse_j must be f32 [b, nh, s]");
    }
    mg_desc_of(y0, &out[0]);
    mg_desc_of(n->in[1], &out[1]);
    return 2;
}

static int merge_cpu(const mg_kernel_args *a, mg_error *err) {
    const mg_node *n = a->node;
    const mg_tensor *yt = n->in[0];
    int k = n->n_in / 2;
    int64_t S = yt->shape[0], B = yt->shape[1], NH = yt->shape[2], hd = yt->shape[3];
    float *y = a->out[0], *lse = a->out[1];
    float *w = malloc((size_t)k * sizeof *w);
    if (!w) return mg_error_set(err, MG_ERR_NOMEM, "attention_merge: out of memory");
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < NH; h++)
            for (int64_t i = 0; i < S; i++) {
                int64_t li = (b * NH + h) * S + i;
                float m = -INFINITY;
                for (int j = 0; j < k; j++) {
                    float l = ((const float *)a->in[2 * j + 1])[li];
                    m = l > m ? l : m;
                }
                float *yo = y + ((i * B + b) * NH + h) * hd;
                if (m == -INFINITY) { /* no visible key in any block */
                    memset(yo, 0, (size_t)hd * sizeof *yo);
                    lse[li] = -INFINITY;
                    continue;
                }
                double sum = 0;
                for (int j = 0; j < k; j++) {
                    float l = ((const float *)a->in[2 * j + 1])[li];
                    w[j] = l == -INFINITY ? 0.0f : expf(l - m);
                    sum += w[j];
                }
                float L = m + (float)log(sum), inv = (float)(1.0 / sum);
                for (int64_t d = 0; d < hd; d++) {
                    float acc = 0;
                    for (int j = 0; j < k; j++)
                        if (w[j] != 0.0f) acc += w[j] * ((const float *)a->in[2 * j])[((i * B + b) * NH + h) * hd + d];
                    yo[d] = acc * inv;
                }
                lse[li] = L;
            }
    free(w);
    return MG_OK;
}

static void cost_merge(const mg_node *n, double *flops, double *bytes) {
    double e = (double)mg_numel(n->out[0]), k = n->n_in / 2;
    *flops = 2.0 * k * e;
    *bytes = 4.0 * (k + 1) * (e + (double)mg_numel(n->out[1]));
}

const mg_op_def mg_opdef_ATTENTION_MERGE = {"attention_merge", 2, -1, MG_OPF_NO_GRAD, infer_merge, NULL, cost_merge,
                                            merge_cpu, NULL, .shard = NULL, .f32_out = 1u << 1};

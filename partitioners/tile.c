/* Inside a rank: a large matmul becomes several tasks, so the rank's workers share it.
 *
 * A transformer step is a chain of layers; with few micro-batches, two workers often
 * find only one ready GEMM between them and one idles (bench/RESULTS-train.md). Cutting
 * the big GEMMs into `matmul_tiles` independent tiles gives the scheduler work for
 * every worker:
 *   - C = A · op(B) with A [..., M, K] (activations and their gradients, rows first):
 *     A is cut along its first dimension (tokens) into contiguous slices, one matmul per
 *     slice, the results concatenated. Every row is computed by the same kernel on the
 *     same data, so results are unchanged.
 *   - C = Aᵀ · B (weight gradients, A [K, M], B [K, N], K the tokens): both are cut
 *     along K and the tile products summed, in a fixed order. That reorders a float sum
 *     (results move at the 1e-7 relative level) and stays deterministic.
 * Only shared (2-D) right operands, and only matmuls of at least
 * plan->matmul_tile_min_flops.
 */
#include "partitioners/partition_internal.h"

int tile_matmul(part_ctx *c, const mg_node *n, mg_tensor *const *in) {
    int k = c->plan->matmul_tiles;
    mg_tensor *A = in[0], *B = in[1];
    bool ta = n->attrs.matmul.trans_a, tb = n->attrs.matmul.trans_b;
    if (k <= 1 || B->ndim != 2) return 0;
    double N = (double)(tb ? B->shape[0] : B->shape[1]);
    if (2.0 * (double)mg_numel(A) * N < c->plan->matmul_tile_min_flops) return 0;
    if (ta && A->ndim != 2) return 0;
    if (A->shape[0] % k) return 0;
    mg_graph *P = c->P;
    int64_t len = A->shape[0] / k;
    mg_tensor *parts[64], *y = NULL;
    for (int i = 0; i < k; i++) {
        mg_tensor *a = mg_slice(P, A, 0, i * len, len);
        mg_tensor *b = ta ? mg_slice(P, B, 0, i * len, len) : B;
        parts[i] = mg_matmul(P, a, b, ta, tb);
        if (!parts[i]) return part_graph_error(c);
    }
    if (!ta) {
        y = mg_concat(P, k, parts, 0);
    } else {
        y = parts[0];
        for (int i = 1; i < k; i++) y = mg_add(P, y, parts[i]);
    }
    if (!y) return part_graph_error(c);
    return part_bind(c, n, n->out[0], y, &c->out[0]) ? c->err->code : 1;
}

/* Inverted dropout: y = x * keep / (1 - p), keep = U >= p with
 *   U = mg_rng_uniform(seed, rng_key, stream, index), (stream, index) = mg_rng_dropout_site
 * of the output element's logical index (or the input's, when only the input is marked
 * as a block): a stream per sample, so any block of the tensor (tensor- or
 * sequence-parallel) and any cut of the batch into micro-batches draws the serial mask.
 * No mask is stored: the gradient is a dropout node on dy with the same key and p
 * (same mask), in the same micro-batch. Identity when not training or p == 0. */
#include <string.h>

#include "mgraph/rng.h"
#include "ops/op.h"
#include "ops/shard.h"
#include "ops/simd.h"

static int infer_dropout(const mg_node *n, mg_tensor_desc *out, mg_error *err) {
    float p = n->attrs.dropout.p;
    if (n->in[0]->dtype != MG_F32) return mg_shape_error(err, n, "input must be f32");
    if (!(p >= 0.0f && p < 1.0f)) return mg_shape_error(err, n, "p = %g outside [0, 1)", (double)p);
    mg_desc_of(n->in[0], &out[0]);
    return 1;
}

MG_SIMD static int dropout_cpu(const mg_kernel_args *a, mg_error *err) {
    (void)err;
    const mg_node *n = a->node;
    const mg_tensor *yt = n->out[0];
    /* Mask coordinates: the output's block of its logical tensor; a plan that marks
     * only the input as a block (same shape) is honoured too. */
    const mg_tensor *lt = mg_is_whole(yt) && !mg_is_whole(n->in[0]) ? n->in[0] : yt;
    const float *x = a->in[0];
    float *y = a->out[0];
    int64_t ne = mg_numel(yt);
    float p = n->attrs.dropout.p;
    if (ne == 0) return MG_OK;
    if (!a->info->training || p == 0.0f) {
        if (y != x) memcpy(y, x, (size_t)ne * sizeof *y);
        return MG_OK;
    }
    uint64_t seed = a->info->seed, key = n->attrs.dropout.rng_key, B, R;
    mg_rng_batch_dims(lt, &B, &R);
    int64_t it = a->info->iteration, sample0 = mg_exec_first_sample(a->info, (int64_t)B);
    float scale = 1.0f / (1.0f - p);
    /* The last dimension is contiguous in the logical tensor too: one logical index
     * per row, then consecutive; a row lies in one sample unless the batch is the last
     * dimension ([s, b]: one draw per element). */
    int64_t inner = yt->shape[yt->ndim - 1], rows = ne / inner;
    bool whole = mg_is_whole(lt), row_in_sample = (whole ? lt->ndim : lt->logical.ndim) != 2;
    for (int64_t r = 0; r < rows; r++) {
        uint64_t base = whole ? (uint64_t)(r * inner) : mg_logical_index(lt, r * inner), stream, idx;
        const float *xr = x + r * inner;
        float *yr = y + r * inner;
        if (!row_in_sample) {
            for (int64_t j = 0; j < inner; j++) {
                mg_rng_dropout_site(base + (uint64_t)j, B, R, it, sample0, &stream, &idx);
                yr[j] = mg_rng_uniform(seed, key, stream, idx) >= p ? xr[j] * scale : 0.0f;
            }
            continue;
        }
        mg_rng_dropout_site(base, B, R, it, sample0, &stream, &idx);
        float u[MG_RNG_CHUNK];
        for (int64_t j0 = 0; j0 < inner; j0 += MG_RNG_CHUNK) {
            int64_t m = inner - j0 < MG_RNG_CHUNK ? inner - j0 : MG_RNG_CHUNK;
            mg_rng_uniform_block(seed, key, stream, idx + (uint64_t)j0, m, u);
            /* the load and multiply unconditional, then a select: GCC vectorises that,
             * not a load under the condition */
            for (int64_t j = 0; j < m; j++) {
                float kept = xr[j0 + j] * scale;
                yr[j0 + j] = u[j] >= p ? kept : 0.0f;
            }
        }
    }
    return MG_OK;
}

static void cost_dropout(const mg_node *n, double *flops, double *bytes) {
    double e = (double)mg_numel(n->out[0]);
    *flops = 2.0 * e; /* the Philox rounds are integer work, not counted */
    *bytes = 8.0 * e;
}

static mg_tensor *dropout_node(mg_graph *g, mg_tensor *x, float p, uint64_t key, bool set_key, const char *name) {
    mg_attrs at = {.dropout = {p, key}};
    mg_node *n = mg_node_new(g, MG_OP_DROPOUT, &at, 1, &x, name);
    if (!n) return NULL;
    if (set_key) n->attrs.dropout.rng_key = n->out[0]->logical.key; /* hash of the output's (unique) name */
    return n->out[0];
}

static int dropout_grad(mg_graph *g, const mg_node *n, mg_tensor *const *dout, const bool *need, mg_tensor **din) {
    if (!need[0] || !dout[0]) return MG_OK;
    /* g->mb is the forward node's micro-batch (autodiff sets it): same stream. */
    din[0] = dropout_node(g, dout[0], n->attrs.dropout.p, n->attrs.dropout.rng_key, false, "dropout_grad");
    return din[0] ? MG_OK : mg_graph_error(g)->code;
}

const mg_op_def mg_opdef_DROPOUT = {"dropout", 1, 1, 0, infer_dropout, dropout_grad, cost_dropout, dropout_cpu, NULL, .shard = mg_shard_rule_linear};

mg_tensor *mg_dropout(mg_graph *g, mg_tensor *x, float p) {
    if (p == 0.0f && x) return x;
    return dropout_node(g, x, p, 0, true, NULL);
}

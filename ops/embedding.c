/* Embedding lookup and its scatter-add backward.
 *
 * embedding(ids i32 [...], table f32 [V, h]) -> [..., h]:
 *   out[t] = table[ids[t] - vocab_offset] when vocab_offset <= ids[t] < vocab_offset + V,
 *   else a zero row. The offset serves vocab-parallel tables (each rank holds rows
 *   [offset, offset + V) and the partial results are summed). mg_embedding uses
 *   offset 0, so an id outside [0, V) also gives a zero row rather than a fault;
 *   validating ids is the data loader's job.
 *
 * embedding_bwd(dy [..., h], ids [...], table [V, h]) -> dtable [V, h]:
 *   dtable[ids[t] - offset] += dy[t], tokens in order (deterministic). The table input
 *   is there for its shape only: the kernel never reads its data.
 * ids get no gradient.
 */
#include <string.h>

#include "ops/op.h"
#include "ops/shard.h"

static int check_ids_table(const mg_node *n, const mg_tensor *ids, const mg_tensor *table, mg_error *err) {
    if (ids->dtype != MG_I32) return mg_shape_error(err, n, "ids must be i32");
    if (table->dtype != MG_F32) return mg_shape_error(err, n, "table must be f32");
    if (table->ndim != 2) return mg_shape_error(err, n, "table must be 2-D [V, h]");
    if (ids->ndim >= MG_MAX_DIMS) return mg_shape_error(err, n, "ids rank %d leaves no room for h", ids->ndim);
    return MG_OK;
}

static int infer_embedding(const mg_node *n, mg_tensor_desc *out, mg_error *err) {
    const mg_tensor *ids = n->in[0], *table = n->in[1];
    int rc = check_ids_table(n, ids, table, err);
    if (rc) return rc;
    mg_desc_of(ids, &out[0]);
    out[0].dtype = MG_F32;
    out[0].ndim = ids->ndim + 1;
    out[0].shape[ids->ndim] = table->shape[1];
    return 1;
}

static int infer_embedding_bwd(const mg_node *n, mg_tensor_desc *out, mg_error *err) {
    const mg_tensor *dy = n->in[0], *ids = n->in[1], *table = n->in[2];
    int rc = check_ids_table(n, ids, table, err);
    if (rc) return rc;
    bool ok = dy->dtype == MG_F32 && dy->ndim == ids->ndim + 1 && dy->shape[ids->ndim] == table->shape[1];
    for (int i = 0; ok && i < ids->ndim; i++) ok = dy->shape[i] == ids->shape[i];
    if (!ok) return mg_shape_error(err, n, "dy must be f32 of shape ids.shape + [h]");
    mg_desc_of(table, &out[0]);
    return 1;
}

static int embedding_cpu(const mg_kernel_args *a, mg_error *err) {
    (void)err;
    const mg_node *n = a->node;
    const int32_t *ids = a->in[0];
    const float *table = a->in[1];
    float *y = a->out[0];
    int64_t T = mg_numel(n->in[0]), V = n->in[1]->shape[0], h = n->in[1]->shape[1];
    int64_t off = n->attrs.embedding.vocab_offset;
    for (int64_t t = 0; t < T; t++) {
        int64_t r = (int64_t)ids[t] - off;
        if (r >= 0 && r < V) memcpy(y + t * h, table + r * h, (size_t)h * sizeof *y);
        else memset(y + t * h, 0, (size_t)h * sizeof *y);
    }
    return MG_OK;
}

static int embedding_bwd_cpu(const mg_kernel_args *a, mg_error *err) {
    (void)err;
    const mg_node *n = a->node;
    const float *dy = a->in[0];
    const int32_t *ids = a->in[1];
    float *dt = a->out[0];
    int64_t T = mg_numel(n->in[1]), V = n->in[2]->shape[0], h = n->in[2]->shape[1];
    int64_t off = n->attrs.embedding.vocab_offset;
    memset(dt, 0, (size_t)(V * h) * sizeof *dt);
    for (int64_t t = 0; t < T; t++) {
        int64_t r = (int64_t)ids[t] - off;
        if (r < 0 || r >= V) continue;
        float *row = dt + r * h;
        const float *g = dy + t * h;
        for (int64_t j = 0; j < h; j++) row[j] += g[j];
    }
    return MG_OK;
}

/* The lookup moves T*h floats (plus the ids); it never touches the rest of the table. */
static void cost_embedding(const mg_node *n, double *flops, double *bytes) {
    *flops = 0;
    *bytes = 4.0 * (double)mg_numel(n->in[0]) + 8.0 * (double)mg_numel(n->out[0]);
}

static void cost_embedding_bwd(const mg_node *n, double *flops, double *bytes) {
    double dy = (double)mg_numel(n->in[0]);
    *flops = dy;
    *bytes = 4.0 * (double)mg_numel(n->in[1]) + 8.0 * dy + 4.0 * (double)mg_numel(n->out[0]);
}

static int embedding_grad(mg_graph *g, const mg_node *n, mg_tensor *const *dout, const bool *need, mg_tensor **din) {
    if (!need[1]) return MG_OK; /* ids (need[0]) are integers: no gradient */
    mg_tensor *in[3] = {dout[0], n->in[0], n->in[1]};
    mg_node *b = mg_node_new(g, MG_OP_EMBEDDING_BWD, &n->attrs, 3, in, NULL);
    din[1] = b ? b->out[0] : NULL;
    return MG_OK;
}

/* Sharding (ops/op.h): the table's state decides. Vocab-parallel (rows split): masked
 * lookups give a partial sum (Megatron's VocabParallelEmbedding); hidden split: the
 * output is split alike. Backward: the gradient follows the table; a token shard of
 * dy with a replicated table gives a partial sum. (Vocabulary offsets are derived from
 * the table's placement.) */
static int shard_embedding(const mg_node *n, const mg_shard_ctx *c, mg_shard_io *io, mg_error *err) {
    (void)c, (void)err;
    mg_sharding st = io->in[1];
    io->want[0] = mg_sh_full();
    if (mg_sh_is_split(st) && st.dim == 0) {
        io->want[1] = st;
        io->out[0] = mg_sh_partial();
    } else if (mg_sh_is_split(st) && st.dim == 1) {
        io->want[1] = st;
        io->out[0] = mg_sh_split(n->out[0]->ndim - 1);
    } else {
        io->want[1] = mg_sh_full();
        io->out[0] = mg_sh_full();
    }
    return MG_OK;
}

static int shard_embedding_bwd(const mg_node *n, const mg_shard_ctx *c, mg_shard_io *io, mg_error *err) {
    (void)c, (void)err;
    mg_sharding st = io->in[2], sd = io->in[0];
    io->want[1] = mg_sh_full();
    io->want[2] = st;
    if (mg_sh_is_split(st) && st.dim == 0) {
        io->want[0] = mg_sh_full();
        io->out[0] = st;
    } else if (mg_sh_is_split(st) && st.dim == 1) {
        io->want[0] = mg_sh_split(n->in[0]->ndim - 1);
        io->out[0] = st;
    } else if (mg_sh_is_partial(sd)) {
        io->want[0] = io->out[0] = mg_sh_partial();
    } else if (mg_sh_is_split(sd) && sd.dim < n->in[0]->ndim - 1) {
        io->want[0] = sd; /* a token shard: this rank's tokens' rows, a partial sum */
        io->want[1] = sd; /* the ids of those tokens */
        io->out[0] = mg_sh_partial();
    } else {
        io->want[0] = io->out[0] = mg_sh_full();
    }
    return MG_OK;
}

const mg_op_def mg_opdef_EMBEDDING = {"embedding", 2, 2, 0, infer_embedding, embedding_grad, cost_embedding,
                                      embedding_cpu, NULL, .shard = shard_embedding};
const mg_op_def mg_opdef_EMBEDDING_BWD = {"embedding_bwd",    3, 3, MG_OPF_NO_GRAD, infer_embedding_bwd, NULL,
                                          cost_embedding_bwd, embedding_bwd_cpu, NULL, .shard = shard_embedding_bwd};

mg_tensor *mg_embedding(mg_graph *g, mg_tensor *ids, mg_tensor *table) {
    mg_attrs at;
    memset(&at, 0, sizeof at);
    at.embedding.vocab_offset = 0;
    mg_tensor *in[2] = {ids, table};
    mg_node *n = mg_node_new(g, MG_OP_EMBEDDING, &at, 2, in, NULL);
    return n ? n->out[0] : NULL;
}

/* Sharding rules shared by several op families (ops/shard.h). */
#include "ops/shard.h"

mg_sharding mg_shard_resolve(const mg_shard_ctx *c, const mg_tensor *t, bool allow_seq_split) {
    return c->resolve ? c->resolve(c, t, allow_seq_split) : mg_sh_full();
}

mg_sharding mg_shard_whole(const mg_shard_ctx *c, const mg_node *n, const mg_shard_io *io, int i, bool allow_seq) {
    if (!mg_sh_is_partial(io->in[i])) return io->in[i];
    return mg_shard_resolve(c, n->in[i], allow_seq);
}

int mg_shard_same_state(const mg_node *n, const mg_shard_ctx *c, mg_shard_io *io, bool linear, bool row_local) {
    mg_sharding t = mg_sh_full();
    bool all_partial = true;
    for (int i = 0; i < n->n_in; i++) all_partial &= mg_sh_is_partial(io->in[i]);
    if (linear && all_partial) {
        t = mg_sh_partial();
    } else {
        for (int i = 0; i < n->n_in; i++)
            if (mg_sh_is_split(io->in[i]) && !(row_local && io->in[i].dim == n->in[i]->ndim - 1)) {
                t = io->in[i];
                break;
            }
        if (mg_sh_is_full(t))
            for (int i = 0; i < n->n_in; i++)
                if (mg_sh_is_partial(io->in[i])) {
                    t = mg_shard_resolve(c, n->in[i], true);
                    break;
                }
    }
    for (int i = 0; i < n->n_in; i++) io->want[i] = t;
    for (int j = 0; j < n->n_out; j++) io->out[j] = t;
    return MG_OK;
}

int mg_shard_rule_linear(const mg_node *n, const mg_shard_ctx *c, mg_shard_io *io, mg_error *err) {
    (void)err;
    return mg_shard_same_state(n, c, io, true, false);
}

int mg_shard_rule_pointwise(const mg_node *n, const mg_shard_ctx *c, mg_shard_io *io, mg_error *err) {
    (void)err;
    return mg_shard_same_state(n, c, io, false, false);
}

int mg_shard_rule_rowwise(const mg_node *n, const mg_shard_ctx *c, mg_shard_io *io, mg_error *err) {
    (void)err;
    return mg_shard_same_state(n, c, io, false, true);
}

int mg_shard_rule_replicated(const mg_node *n, const mg_shard_ctx *c, mg_shard_io *io, mg_error *err) {
    (void)c, (void)err;
    for (int i = 0; i < n->n_in; i++) io->want[i] = mg_sh_full();
    for (int j = 0; j < n->n_out; j++) io->out[j] = mg_sh_full();
    return MG_OK;
}

int mg_shard_rule_reduce(const mg_node *n, const mg_shard_ctx *c, mg_shard_io *io, mg_error *err) {
    (void)c, (void)err;
    const mg_tensor *x = n->in[0], *y = n->out[0];
    mg_sharding s = io->in[0];
    io->want[0] = s;
    io->out[0] = s; /* partial stays partial: all are linear */
    if (!mg_sh_is_split(s)) return MG_OK;
    if (n->op == MG_OP_SUM || n->op == MG_OP_MEAN) {
        int d = n->attrs.axis.dim;
        if (d == MG_ALL_AXES || d == s.dim) {
            if (n->op == MG_OP_MEAN) io->want[0] = io->out[0] = mg_sh_full();
            else io->out[0] = mg_sh_partial();
        } else {
            io->out[0] = mg_sh_split(n->attrs.axis.keepdim || s.dim < d ? s.dim : s.dim - 1);
        }
        return MG_OK;
    }
    if (n->op == MG_OP_SUM_TO) {
        int k = s.dim - (x->ndim - y->ndim);
        io->out[0] = k < 0 || y->shape[k] == 1 ? mg_sh_partial() : mg_sh_split(k);
        return MG_OK;
    }
    io->out[0] = mg_sh_split(s.dim + (y->ndim - x->ndim)); /* expand */
    return MG_OK;
}

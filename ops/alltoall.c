/* All-to-all with variable splits: expert parallelism's token exchange (Megatron-LM's
 * MoEAlltoAllTokenDispatcher, token_dispatcher.py).
 *
 * Each rank of a group of n holds its tokens' rows permuted into expert-major order
 * (moe_permute: x [R, h], counts [E] i32 the rows per expert, E = n * El experts, member
 * j owning experts [j*El, (j+1)*El)). The exchange takes two ops:
 *
 * alltoall_counts: (counts [E] i32) -> (splits [n, El] i32, local [El] i32)
 *     an MPI_Alltoall of El counts per member: splits[i][e] = rows member i sends for
 *     this rank's local expert e; local[e] = sum over i (the rows expert e gets).
 * alltoall:        (x, counts [E] i32, splits [n, El] i32) -> y, attrs.comm.dim the direction
 *     dispatch (dim 0): x [R, h] token side -> y [rows, h] expert side: the block of rows
 *         for member j's experts (contiguous in x) goes to member j (MPI_Alltoallv with the
 *         splits), and what arrives is re-sorted expert-major: for each local expert e,
 *         the rows from member 0, then member 1, ... (so moe_grouped_matmul over local
 *         counts runs one GEMM per local expert).
 *     combine (dim 1): the inverse: x [R_d, h] expert side -> y [rows, h] token side, each
 *         row back at the place it left from.
 *     Rows past the run-time total are zero; attrs.comm.rows is the static bound of y.
 *     The two directions are adjoint row permutations (with zero padding), so each one's
 *     gradient is the other with the same counts and splits.
 *
 * Variable token counts ride inside static shapes as everywhere in the MoE layer
 * (include/mgraph/moe.h): buffers have a static row bound, counts say how many rows are
 * real at run time; only real rows travel. Cost (static): a balanced routing, (n-1)/n of
 * the token-side rows leave the rank; the communicator counts the bytes actually sent.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mgraph/comm.h"
#include "ops/comm_api.h"
#include "ops/op.h"

enum { DISPATCH = 0, COMBINE = 1 };

static void desc2(mg_tensor_desc *d, mg_dtype dt, int ndim, int64_t a, int64_t b) {
    memset(d, 0, sizeof *d);
    d->dtype = dt;
    d->ndim = ndim;
    for (int i = 0; i < MG_MAX_DIMS; i++) d->shape[i] = 1;
    d->shape[0] = a;
    if (ndim > 1) d->shape[1] = b;
}

static int check_group(const mg_node *n, mg_error *err) {
    const mg_attr_comm *c = &n->attrs.comm;
    if (c->group < 0 || c->group >= MG_GROUP_COUNT)
        return mg_shape_error(err, n, "group %d is not a mesh group", (int)c->group);
    if (c->nranks < 1) return mg_shape_error(err, n, "group size %d must be at least 1", c->nranks);
    return MG_OK;
}

static int check_counts(const mg_node *n, const mg_tensor *counts, mg_error *err) {
    int nr = n->attrs.comm.nranks;
    if (counts->dtype != MG_I32 || counts->ndim != 1 || counts->shape[0] % nr)
        return mg_shape_error(err, n, "counts must be i32 [experts] with experts a multiple of the group size %d", nr);
    return MG_OK;
}

static int infer_counts(const mg_node *n, mg_tensor_desc *out, mg_error *err) {
    int rc = check_group(n, err);
    if (!rc) rc = check_counts(n, n->in[0], err);
    if (rc) return rc;
    int nr = n->attrs.comm.nranks;
    int64_t El = n->in[0]->shape[0] / nr;
    desc2(&out[0], MG_I32, 2, nr, El);
    desc2(&out[1], MG_I32, 1, El, 1);
    return 2;
}

static int infer_alltoall(const mg_node *n, mg_tensor_desc *out, mg_error *err) {
    int rc = check_group(n, err);
    if (rc) return rc;
    const mg_tensor *x = n->in[0], *counts = n->in[1], *splits = n->in[2];
    const mg_attr_comm *c = &n->attrs.comm;
    if (x->dtype != MG_F32 || x->ndim != 2) return mg_shape_error(err, n, "rows must be f32 [rows, hidden]");
    if ((rc = check_counts(n, counts, err))) return rc;
    if (splits->dtype != MG_I32 || splits->ndim != 2 || splits->shape[0] != c->nranks ||
        splits->shape[1] * c->nranks != counts->shape[0])
        return mg_shape_error(err, n, "splits must be i32 [group size %d, experts / group size]", c->nranks);
    if (c->dim != DISPATCH && c->dim != COMBINE) return mg_shape_error(err, n, "direction %d is not 0 or 1", c->dim);
    if (c->rows < 1) return mg_shape_error(err, n, "row bound must be >= 1");
    desc2(&out[0], MG_F32, 2, c->rows, x->shape[1]);
    return 1;
}

/* The communicator for this execution (NULL for a group of one rank). */
static int group_of(const mg_kernel_args *a, mg_comm **comm, mg_error *err) {
    const mg_node *nd = a->node;
    const mg_attr_comm *at = &nd->attrs.comm;
    mg_comm *c = a->info ? a->info->comm : NULL;
    int size = c ? mg_comm_group_size(c, at->group) : 1;
    if (size != at->nranks)
        return mg_error_set(err, MG_ERR_INVALID, "%s '%s': built for a %s group of %d ranks, %s %d", mg_op_name(nd->op),
                            nd->out[0]->name, mg_group_name(at->group), at->nranks,
                            c ? "the communicator's has" : "but there is no communicator: groups of", size);
    *comm = size > 1 ? c : NULL;
    return MG_OK;
}

static int counts_cpu(const mg_kernel_args *a, mg_error *err) {
    mg_comm *c;
    int rc = group_of(a, &c, err);
    if (rc) return rc;
    const mg_node *nd = a->node;
    int nr = nd->attrs.comm.nranks;
    int64_t El = nd->in[0]->shape[0] / nr;
    int32_t *splits = a->out[0], *local = a->out[1];
    if (c) rc = mg_comm_alltoall_buf(c, nd->attrs.comm.group, MG_I32, a->in[0], splits, El, err);
    else memcpy(splits, a->in[0], (size_t)El * sizeof *splits);
    if (rc) return rc;
    for (int64_t e = 0; e < El; e++) {
        int64_t s = 0;
        for (int i = 0; i < nr; i++) {
            if (splits[i * El + e] < 0)
                return mg_error_set(err, MG_ERR_RUNTIME, "alltoall_counts '%s': negative count from member %d",
                                    nd->out[0]->name, i);
            s += splits[i * El + e];
        }
        if (s > INT32_MAX) return mg_error_set(err, MG_ERR_RUNTIME, "alltoall_counts: count overflow");
        local[e] = (int32_t)s;
    }
    return MG_OK;
}

/* Rows per member on the token side (from counts) and on the expert side (from splits),
 * and their displacements; n + 1 entries each (the last displacement is the total). */
typedef struct plan_t {
    int n;
    int64_t El;
    int64_t *tok, *tok_d, *exp, *exp_d; /* [n], [n + 1], [n], [n + 1] */
} plan_t;

static int make_plan(const mg_node *nd, const int32_t *counts, const int32_t *splits, plan_t *p, mg_error *err) {
    int n = nd->attrs.comm.nranks;
    int64_t El = nd->in[1]->shape[0] / n;
    p->n = n;
    p->El = El;
    p->tok = calloc((size_t)(4 * n + 2), sizeof *p->tok);
    if (!p->tok) return mg_error_set(err, MG_ERR_NOMEM, "alltoall: out of memory");
    p->tok_d = p->tok + n;
    p->exp = p->tok_d + n + 1;
    p->exp_d = p->exp + n;
    for (int j = 0; j < n; j++) {
        for (int64_t e = 0; e < El; e++) {
            int32_t ct = counts[j * El + e], cs = splits[j * El + e];
            if (ct < 0 || cs < 0) {
                free(p->tok);
                return mg_error_set(err, MG_ERR_RUNTIME, "alltoall '%s': negative row count", nd->out[0]->name);
            }
            p->tok[j] += ct;
            p->exp[j] += cs;
        }
        p->tok_d[j + 1] = p->tok_d[j] + p->tok[j];
        p->exp_d[j + 1] = p->exp_d[j] + p->exp[j];
    }
    return MG_OK;
}

/* The expert-side offset (expert-major, member-minor) of block (member i, local expert
 * e), and the member-major offset of the same block in the exchange buffer. */
static void block_offsets(const plan_t *p, const int32_t *splits, int i, int64_t e, int64_t *exp_off, int64_t *buf_off) {
    int64_t o = 0;
    for (int64_t f = 0; f < e; f++)
        for (int k = 0; k < p->n; k++) o += splits[k * p->El + f];
    for (int k = 0; k < i; k++) o += splits[k * p->El + e];
    *exp_off = o;
    int64_t b = p->exp_d[i];
    for (int64_t f = 0; f < e; f++) b += splits[i * p->El + f];
    *buf_off = b;
}

static int alltoall_cpu(const mg_kernel_args *a, mg_error *err) {
    mg_comm *c;
    int rc = group_of(a, &c, err);
    if (rc) return rc;
    const mg_node *nd = a->node;
    const mg_attr_comm *at = &nd->attrs.comm;
    const int32_t *counts = a->in[1], *splits = a->in[2];
    int64_t h = nd->in[0]->shape[1], Rin = nd->in[0]->shape[0], Rout = at->rows;
    bool dispatch = at->dim == DISPATCH;
    plan_t p = {0};
    if ((rc = make_plan(nd, counts, splits, &p, err))) return rc;
    int n = p.n;
    int64_t tok_total = p.tok_d[n], exp_total = p.exp_d[n];
    int64_t in_total = dispatch ? tok_total : exp_total, out_total = dispatch ? exp_total : tok_total;
    if (in_total > Rin || out_total > Rout) {
        free(p.tok);
        return mg_error_set(err, MG_ERR_RUNTIME, "alltoall '%s': %lld rows in (bound %lld), %lld rows out (bound %lld)",
                            nd->out[0]->name, (long long)in_total, (long long)Rin, (long long)out_total,
                            (long long)Rout);
    }
    float *buf = malloc((size_t)(exp_total > 0 ? exp_total : 1) * (size_t)h * sizeof *buf);
    int64_t *v = malloc((size_t)(4 * n) * sizeof *v);
    if (!buf || !v) {
        free(buf), free(v), free(p.tok);
        return mg_error_set(err, MG_ERR_NOMEM, "alltoall '%s': out of memory", nd->out[0]->name);
    }
    /* element counts and displacements: token side (contiguous blocks of x or y) and the
     * member-major exchange buffer on the expert side */
    for (int j = 0; j < n; j++) {
        v[j] = p.tok[j] * h, v[n + j] = p.tok_d[j] * h;
        v[2 * n + j] = p.exp[j] * h, v[3 * n + j] = p.exp_d[j] * h;
    }
    const float *x = a->in[0];
    float *y = a->out[0];
    if (!dispatch) /* pack the expert-major rows member-major */
        for (int i = 0; i < n; i++)
            for (int64_t e = 0; e < p.El; e++) {
                int64_t eo, bo, len = splits[i * p.El + e];
                block_offsets(&p, splits, i, e, &eo, &bo);
                if (len) memcpy(buf + bo * h, x + eo * h, (size_t)(len * h) * sizeof *buf);
            }
    if (c && dispatch) rc = mg_comm_alltoallv_buf(c, at->group, MG_F32, x, v, v + n, buf, v + 2 * n, v + 3 * n, err);
    else if (c) rc = mg_comm_alltoallv_buf(c, at->group, MG_F32, buf, v + 2 * n, v + 3 * n, y, v, v + n, err);
    else if (tok_total != exp_total)
        rc = mg_error_set(err, MG_ERR_RUNTIME, "alltoall '%s': %lld token rows but %lld expert rows on one rank",
                          nd->out[0]->name, (long long)tok_total, (long long)exp_total);
    else if (tok_total) memcpy(dispatch ? (void *)buf : (void *)y, dispatch ? (const void *)x : (const void *)buf,
                               (size_t)(tok_total * h) * sizeof *buf);
    if (!rc && dispatch) /* unpack member-major into expert-major */
        for (int i = 0; i < n; i++)
            for (int64_t e = 0; e < p.El; e++) {
                int64_t eo, bo, len = splits[i * p.El + e];
                block_offsets(&p, splits, i, e, &eo, &bo);
                if (len) memcpy(y + eo * h, buf + bo * h, (size_t)(len * h) * sizeof *buf);
            }
    if (!rc) memset(y + out_total * h, 0, (size_t)((Rout - out_total) * h) * sizeof *y);
    free(buf), free(v), free(p.tok);
    return rc;
}

static mg_tensor *build(mg_graph *g, mg_tensor *x, mg_tensor *counts, mg_tensor *splits, mg_group grp, int nranks,
                        bool combine, int64_t rows, int64_t seq);

static int alltoall_grad(mg_graph *g, const mg_node *n, mg_tensor *const *dout, const bool *need, mg_tensor **din) {
    const mg_attr_comm *at = &n->attrs.comm;
    if (!dout[0] || !need[0]) return MG_OK;
    din[0] = build(g, dout[0], n->in[1], n->in[2], at->group, at->nranks, at->dim == DISPATCH, n->in[0]->shape[0],
                   at->seq);
    return mg_graph_error(g)->code;
}

static void cost_alltoall(const mg_node *n, double *flops, double *bytes) {
    const mg_attr_comm *at = &n->attrs.comm;
    int nr = at->nranks;
    *flops = 0;
    if (n->op == MG_OP_ALLTOALL_COUNTS) {
        *bytes = (double)(nr - 1) * (double)(n->in[0]->shape[0] / nr) * 4.0;
        return;
    }
    /* balanced routing: (n-1)/n of the token-side rows leave the rank */
    double tok_rows = (double)(at->dim == DISPATCH ? n->in[0]->shape[0] : at->rows);
    *bytes = nr > 1 ? (double)(nr - 1) / nr * tok_rows * (double)n->in[0]->shape[1] * 4.0 : 0.0;
}

const mg_op_def mg_opdef_ALLTOALL = {"alltoall", 3, 3, MG_OPF_COMM, infer_alltoall, alltoall_grad, cost_alltoall,
                                     alltoall_cpu, NULL, .shard = NULL};
const mg_op_def mg_opdef_ALLTOALL_COUNTS = {"alltoall_counts", 1, 1, MG_OPF_COMM | MG_OPF_NO_GRAD, infer_counts, NULL,
                                            cost_alltoall, counts_cpu, NULL, .shard = NULL};

/* ---- builders ------------------------------------------------------------------------ */
static const char *node_name(mg_graph *g, const mg_tensor *x, const char *what, char *buf, size_t len) {
    if (!x || !x->name) return NULL;
    const char *base = x->name, *sc = mg_scope_current(g);
    size_t l = strlen(sc);
    if (l && strncmp(base, sc, l) == 0 && base[l] == '.') base += l + 1;
    snprintf(buf, len, "%s.%s", base, what);
    return buf;
}

static mg_tensor *build(mg_graph *g, mg_tensor *x, mg_tensor *counts, mg_tensor *splits, mg_group grp, int nranks,
                        bool combine, int64_t rows, int64_t seq) {
    if (!g) return NULL;
    mg_attrs at;
    memset(&at, 0, sizeof at);
    at.comm = (mg_attr_comm){.group = grp, .nranks = nranks, .seq = seq, .dim = combine ? COMBINE : DISPATCH, .rows = rows};
    mg_tensor *in[3] = {x, counts, splits};
    char nm[256];
    mg_node *n = mg_node_new(g, MG_OP_ALLTOALL, &at, 3, in, node_name(g, x, combine ? "combine" : "dispatch", nm, sizeof nm));
    return n ? n->out[0] : NULL;
}

mg_tensor *mg_alltoallv(mg_graph *g, mg_tensor *x, mg_tensor *counts, mg_tensor *splits, mg_group grp, int nranks,
                        bool combine, int64_t rows, int64_t seq) {
    return build(g, x, counts, splits, grp, nranks, combine, rows, seq);
}

int mg_alltoall_counts(mg_graph *g, mg_tensor *counts, mg_group grp, int nranks, int64_t seq, mg_tensor **splits,
                       mg_tensor **local) {
    *splits = *local = NULL;
    if (!g) return MG_ERR_INVALID;
    mg_attrs at;
    memset(&at, 0, sizeof at);
    at.comm = (mg_attr_comm){.group = grp, .nranks = nranks, .seq = seq};
    char nm[256];
    mg_node *n = mg_node_new(g, MG_OP_ALLTOALL_COUNTS, &at, 1, &counts, node_name(g, counts, "alltoall_counts", nm, sizeof nm));
    if (!n) return mg_graph_error(g)->code ? mg_graph_error(g)->code : MG_ERR_INVALID;
    *splits = n->out[0];
    *local = n->out[1];
    return MG_OK;
}

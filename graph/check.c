/* Graph checks, deterministic topological order and critical-path priorities. */
#include <stdlib.h>
#include <string.h>

#include "graph/graph_internal.h"
#include "ops/op.h"

/* Kahn's algorithm; among ready nodes the smallest id goes first, so the order is a
 * pure function of the graph (identical builds give identical orders and dumps).
 * A binary min-heap keeps it O(E + V log V). */
typedef struct { int *a; int n; } heap;

static void heap_push(heap *h, int v) {
    int i = h->n++;
    h->a[i] = v;
    while (i > 0 && h->a[(i - 1) / 2] > h->a[i]) {
        int p = (i - 1) / 2, t = h->a[p];
        h->a[p] = h->a[i];
        h->a[i] = t;
        i = p;
    }
}

static int heap_pop(heap *h) {
    int top = h->a[0];
    h->a[0] = h->a[--h->n];
    for (int i = 0;;) {
        int l = 2 * i + 1, r = l + 1, m = i;
        if (l < h->n && h->a[l] < h->a[m]) m = l;
        if (r < h->n && h->a[r] < h->a[m]) m = r;
        if (m == i) break;
        int t = h->a[m];
        h->a[m] = h->a[i];
        h->a[i] = t;
        i = m;
    }
    return top;
}

/* Consumers of each tensor, as CSR arrays over node ids. */
typedef struct { int *start, *node; } users;

static int build_users(const mg_graph *g, users *u) {
    u->start = calloc((size_t)g->n_tensors + 1, sizeof *u->start);
    int total = 0;
    for (int i = 0; i < g->n_nodes; i++) total += g->nodes[i]->n_in;
    u->node = malloc((size_t)(total ? total : 1) * sizeof *u->node);
    if (!u->start || !u->node) return MG_ERR_NOMEM;
    for (int i = 0; i < g->n_nodes; i++)
        for (int j = 0; j < g->nodes[i]->n_in; j++) u->start[g->nodes[i]->in[j]->id + 1]++;
    for (int t = 0; t < g->n_tensors; t++) u->start[t + 1] += u->start[t];
    int *fill = calloc((size_t)g->n_tensors, sizeof *fill);
    if (!fill) return MG_ERR_NOMEM;
    for (int i = 0; i < g->n_nodes; i++)
        for (int j = 0; j < g->nodes[i]->n_in; j++) {
            int t = g->nodes[i]->in[j]->id;
            u->node[u->start[t] + fill[t]++] = i;
        }
    free(fill);
    return MG_OK;
}

static void users_free(users *u) {
    free(u->start);
    free(u->node);
}

/* Collectives of a group must be issued in seq order, the same on every rank of the
 * group (the engine chains them in the graph's order): each waits in the order for
 * its group's previous one. The ranks of a group may hold different graphs (pipeline
 * stages), where by data alone one rank could order two collectives one way and
 * another rank the other way, and hang. Where the data already orders them by seq the
 * order is the same as without these edges: a node is never taken earlier than it
 * would be, and taking it no later changes nothing before it. Transfers are matched
 * by tag and not chained. next[i]: node i's group successor, or -1. (The engine
 * requires distinct seqs in a group, mg_engine_new.) */
typedef struct { int64_t seq; int group, id; } comm_key;

static int cmp_comm_key(const void *a, const void *b) {
    const comm_key *x = a, *y = b;
    if (x->group != y->group) return x->group - y->group;
    if (x->seq != y->seq) return x->seq < y->seq ? -1 : 1;
    return x->id - y->id;
}

static int comm_chain(const mg_graph *g, int *next, int *pending) {
    comm_key *k = malloc(((size_t)g->n_nodes + 1) * sizeof *k);
    if (!k) return MG_ERR_NOMEM;
    int m = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        const mg_node *nd = g->nodes[i];
        next[i] = -1;
        if ((mg_op_def_get(nd->op)->flags & (MG_OPF_COMM | MG_OPF_P2P)) == MG_OPF_COMM)
            k[m++] = (comm_key){nd->attrs.comm.seq, (int)nd->attrs.comm.group, i};
    }
    qsort(k, (size_t)m, sizeof *k, cmp_comm_key);
    for (int i = 0, j; i < m; i = j) {
        /* a group's run [i, j); seqs order it only when they are distinct (a graph built
         * by hand may give a backward collective its forward's seq: no order is meant) */
        bool distinct = true;
        for (j = i + 1; j < m && k[j].group == k[i].group; j++) distinct &= k[j].seq != k[j - 1].seq;
        for (int x = i + 1; x < j && distinct; x++) {
            next[k[x - 1].id] = k[x].id;
            pending[k[x].id]++;
        }
    }
    free(k);
    return MG_OK;
}

int mg_graph_topo(mg_graph *g, mg_node ***order, int *n, mg_error *err) {
    if (g->order_valid) {
        *order = g->order;
        *n = g->n_nodes;
        return MG_OK;
    }
    int rc = MG_OK;
    users u = {0};
    int *pending = calloc((size_t)g->n_nodes + 1, sizeof *pending);
    int *next_comm = malloc(((size_t)g->n_nodes + 1) * sizeof *next_comm);
    heap h = {malloc(((size_t)g->n_nodes + 1) * sizeof(int)), 0};
    mg_node **ord = malloc(((size_t)g->n_nodes + 1) * sizeof *ord);
    if (!pending || !next_comm || !h.a || !ord || build_users(g, &u) || comm_chain(g, next_comm, pending)) {
        rc = mg_error_set(err, MG_ERR_NOMEM, "out of memory ordering the graph");
        goto out;
    }
    /* In-place updates: a node writing t' into t's storage (t'->updates == t) must
     * follow every other reader of t, or a reader would see the new value. These
     * write-after-read edges are implicit in the graph; the order makes them real. */
    int *writer = malloc(((size_t)g->n_tensors + 1) * sizeof *writer);
    if (!writer) {
        rc = mg_error_set(err, MG_ERR_NOMEM, "out of memory ordering the graph");
        goto out;
    }
    for (int t = 0; t < g->n_tensors; t++) writer[t] = -1;
    for (int i = 0; i < g->n_nodes; i++)
        for (int o = 0; o < g->nodes[i]->n_out; o++) {
            const mg_tensor *root = g->nodes[i]->out[o]->updates;
            if (root) writer[root->id] = i;
        }
    for (int i = 0; i < g->n_nodes; i++) {
        for (int j = 0; j < g->nodes[i]->n_in; j++) {
            int t = g->nodes[i]->in[j]->id;
            if (g->nodes[i]->in[j]->src) pending[i]++;
            if (writer[t] >= 0 && writer[t] != i) pending[writer[t]]++;
        }
    }
    for (int i = 0; i < g->n_nodes; i++)
        if (!pending[i]) heap_push(&h, i);
    int k = 0;
    while (h.n) {
        mg_node *nd = g->nodes[heap_pop(&h)];
        ord[k++] = nd;
        for (int o = 0; o < nd->n_out; o++) {
            int t = nd->out[o]->id;
            for (int e = u.start[t]; e < u.start[t + 1]; e++)
                if (--pending[u.node[e]] == 0) heap_push(&h, u.node[e]);
        }
        for (int j = 0; j < nd->n_in; j++) {
            int w = writer[nd->in[j]->id];
            if (w >= 0 && w != nd->id && --pending[w] == 0) heap_push(&h, w);
        }
        int c = next_comm[nd->id];
        if (c >= 0 && --pending[c] == 0) heap_push(&h, c);
    }
    free(writer);
    if (k != g->n_nodes) {
        rc = mg_error_set(err, MG_ERR_INVALID,
                          "graph has a cycle (%d of %d nodes orderable), or a group's collectives are numbered (seq) "
                          "against their data dependencies",
                          k, g->n_nodes);
        goto out;
    }
    free(g->order);
    g->order = ord;
    ord = NULL;
    g->order_valid = 1;
    *order = g->order;
    *n = g->n_nodes;
out:
    users_free(&u);
    free(pending);
    free(next_comm);
    free(h.a);
    free(ord);
    return rc;
}

int mg_graph_validate(const mg_graph *g, mg_error *err) {
    char b1[96], b2[96];
    for (int i = 0; i < g->n_tensors; i++) {
        const mg_tensor *t = g->tensors[i];
        if (t->id != i) return mg_error_set(err, MG_ERR_INVALID, "tensor '%s' has id %d at index %d", t->name, t->id, i);
        if (t->src && (t->src_slot >= t->src->n_out || t->src->out[t->src_slot] != t))
            return mg_error_set(err, MG_ERR_INVALID, "tensor '%s' is not the output its producer names", t->name);
        if (t->updates && (t->updates->dtype != t->dtype || !mg_same_shape(t, t->updates)))
            return mg_error_set(err, MG_ERR_SHAPE, "tensor '%s' updates '%s' of another shape or dtype", t->name,
                                t->updates->name);
    }
    unsigned char *produced = calloc((size_t)g->n_tensors + 1, 1);
    if (!produced) return mg_error_set(err, MG_ERR_NOMEM, "out of memory validating the graph");
    int rc = MG_OK;
    for (int i = 0; i < g->n_nodes && !rc; i++) {
        const mg_node *n = g->nodes[i];
        const mg_op_def *d = mg_op_def_get(n->op);
        for (int j = 0; j < n->n_in && !rc; j++)
            if (!n->in[j] || n->in[j]->id >= g->n_tensors || g->tensors[n->in[j]->id] != n->in[j])
                rc = mg_error_set(err, MG_ERR_INVALID, "node %d (%s): input %d is not a tensor of this graph", i,
                                  d->name, j);
        for (int j = 0; j < n->n_out && !rc; j++) {
            const mg_tensor *t = n->out[j];
            if (produced[t->id]++)
                rc = mg_error_set(err, MG_ERR_INVALID, "tensor '%s' is produced twice", t->name);
            else if (t->src != n)
                rc = mg_error_set(err, MG_ERR_INVALID, "tensor '%s' names another producer", t->name);
        }
        if (rc) break;
        mg_tensor_desc out[MG_MAX_OUT];
        mg_error e = {0};
        int n_out = d->infer(n, out, &e);
        if (n_out != n->n_out) {
            rc = mg_error_set(err, MG_ERR_SHAPE, "node %d (%s): shape rule gives %d outputs, node has %d (%s)", i,
                              d->name, n_out, n->n_out, e.msg);
            break;
        }
        for (int j = 0; j < n_out && !rc; j++) {
            const mg_tensor *t = n->out[j];
            bool same = out[j].ndim == t->ndim && out[j].dtype == t->dtype;
            for (int k = 0; same && k < t->ndim; k++) same = out[j].shape[k] == t->shape[k];
            if (!same)
                rc = mg_error_set(err, MG_ERR_SHAPE, "tensor '%s' has shape %s %s, its %s node infers %s %s", t->name,
                                  mg_dims_str(t->ndim, t->shape, b1, sizeof b1), mg_dtype_name(t->dtype), d->name,
                                  mg_dims_str(out[j].ndim, out[j].shape, b2, sizeof b2), mg_dtype_name(out[j].dtype));
        }
    }
    free(produced);
    if (rc) return rc;
    mg_node **ord;
    int n;
    return mg_graph_topo((mg_graph *)g, &ord, &n, err); /* cycle check; caches the order */
}

int mg_graph_priorities(mg_graph *g, mg_error *err) {
    mg_node **ord;
    int n;
    int rc = mg_graph_topo(g, &ord, &n, err);
    if (rc) return rc;
    users u = {0};
    if (build_users(g, &u)) {
        users_free(&u);
        return mg_error_set(err, MG_ERR_NOMEM, "out of memory computing priorities");
    }
    /* bottom level: own cost + the most expensive path to any sink. Cost in
     * estimated seconds: FLOPs at 100 GFLOP/s plus bytes at 10 GB/s, so memory-bound
     * ops are not weightless. */
    for (int i = n - 1; i >= 0; i--) {
        mg_node *nd = ord[i];
        double f, b, best = 0;
        mg_op_cost(nd, &f, &b);
        for (int o = 0; o < nd->n_out; o++) {
            int t = nd->out[o]->id;
            for (int e = u.start[t]; e < u.start[t + 1]; e++) {
                double p = g->nodes[u.node[e]]->priority;
                if (p > best) best = p;
            }
        }
        nd->priority = best + f / 100e9 + b / 10e9;
    }
    users_free(&u);
    return MG_OK;
}

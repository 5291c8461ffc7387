/* Memory plan: buffers for every tensor, reused by liveness along the topo order.
 *
 * Unit of sharing: an "alias class" = a root tensor plus every tensor that (through a
 * chain of `updates`) writes into its storage, and, when buffers are reused, every view
 * of it (the output of an op whose view rule says so, such as reshape or a slice of one
 * contiguous range: the same bytes, at an offset, so it needs no copy). A class gets
 * exactly one buffer; a view lives at its offset in it (offset_of).
 *
 *  - Persistent classes (any member persistent, a parameter/input/loss, or a leaf the
 *    host fills) get a buffer of their own, never shared with another class.
 *  - Transient classes are live from the node that produces their root to the last
 *    node that reads or writes any member. They are packed, ggml-alloc style, by a
 *    best-fit free list: smallest free buffer that is large enough, else the largest
 *    free buffer grown to fit, else a new buffer.
 *
 * Per node, in topo order: allocate the outputs, then release the inputs whose last
 * use this was, then release outputs nobody reads. Allocating before releasing is what
 * guarantees that an output never lands in a buffer an input of the same node held
 * (kernels need not be in-place safe), and that two outputs of one node never share.
 * Views and `updates` join their base's class instead: sharing is their point.
 *
 * Everything is a function of the topo order (deterministic) and of tensor ids; ties
 * are broken by the lowest buffer index, so identical graphs get identical plans.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mgraph/memplan.h"
#include "mgraph/precision.h"
#include "ops/op.h"

typedef struct planner {
    mg_graph *g;
    mg_memplan *p;
    int cap_buffers;
    int *root;        /* [n_tensors] alias-class root of each tensor */
    int *last;        /* [n_tensors] per root: topo position of the last use (-1: none) */
    bool *persist;    /* [n_tensors] per root: class is persistent */
    int *free_list;   /* transient buffers free right now (indices), unordered */
    int n_free;
    /* Order-preserving reuse: anc holds, per topo position, the bitset of positions it
     * depends on (transitively); a free buffer is reused by the node at position m
     * only if every node that touched its last class is an ancestor of m, so the
     * write-after-read dependency reuse creates is already implied by the data and
     * costs no parallelism. NULL for very large graphs: plain liveness reuse. */
    uint64_t *anc;
    size_t words;
    int *pos;         /* [n_nodes] topo position of node id */
    int *buf_class;   /* [cap_buffers] root of the class a buffer held last (-1) */
    int **acc;        /* [n_tensors] per root: topo positions of the nodes touching it */
    int *n_acc;
} planner;

#define MG_MEMPLAN_MAX_ORDERED 32768 /* positions: the bitsets then take <= 128 MiB */

static size_t tensor_bytes(const mg_tensor *t) { return mg_tensor_bytes(t); /* in its storage dtype */ }

/* Tensors the host reads or writes across steps never share storage. A leaf (no
 * producer) is filled by the host or by mg_storage_init, so it is persistent too. */
static bool is_persistent(const mg_tensor *t) {
    return t->persistent || t->role == MG_ROLE_PARAM || t->role == MG_ROLE_INPUT || t->role == MG_ROLE_LOSS ||
           !t->src;
}

static int new_buffer(planner *pl, size_t bytes, mg_buffer_kind kind, mg_error *err) {
    mg_memplan *p = pl->p;
    if (p->n_buffers == pl->cap_buffers) {
        int cap = pl->cap_buffers ? 2 * pl->cap_buffers : 64;
        size_t *b = realloc(p->buffer_bytes, (size_t)cap * sizeof *b);
        if (b) p->buffer_bytes = b;
        bool *q = realloc(p->buffer_persistent, (size_t)cap * sizeof *q);
        if (q) p->buffer_persistent = q;
        mg_buffer_kind *k = realloc(p->buffer_kind, (size_t)cap * sizeof *k);
        if (k) p->buffer_kind = k;
        if (!b || !q || !k) return mg_error_set(err, MG_ERR_NOMEM, "out of memory planning %d buffers", cap);
        pl->cap_buffers = cap;
    }
    if (pl->buf_class) {
        int *bc = realloc(pl->buf_class, (size_t)pl->cap_buffers * sizeof *bc);
        if (!bc) return mg_error_set(err, MG_ERR_NOMEM, "out of memory planning %d buffers", pl->cap_buffers);
        pl->buf_class = bc;
        bc[p->n_buffers] = -1;
    }
    p->buffer_bytes[p->n_buffers] = bytes;
    p->buffer_persistent[p->n_buffers] = kind == MG_BUF_PERSISTENT || kind == MG_BUF_MICROBATCH;
    p->buffer_kind[p->n_buffers] = kind;
    return p->n_buffers++;
}

/* May the node at topo position m write into buffer b without a new ordering? */
static bool ordered_after(const planner *pl, int b, int m) {
    if (!pl->anc) return true;
    int r = pl->buf_class[b];
    if (r < 0) return true;
    const uint64_t *a = pl->anc + (size_t)m * pl->words;
    for (int i = 0; i < pl->n_acc[r]; i++) {
        int q = pl->acc[r][i];
        if (q != m && !(a[q >> 6] >> (q & 63) & 1)) return false;
    }
    return true;
}

/* Best fit among the free buffers of `kind` node m may use; removes it from the list.
 * -1: none. Slot and step buffers never mix: a slot buffer is replicated per slot, and
 * sharing one with the once-per-step part would order the step after every slot. */
static int take_free(planner *pl, size_t need, int m, mg_buffer_kind kind) {
    int best = -1, largest = -1;
    for (int i = 0; i < pl->n_free; i++) {
        int b = pl->free_list[i];
        if (pl->p->buffer_kind[b] != kind || !ordered_after(pl, b, m)) continue;
        size_t sz = pl->p->buffer_bytes[b];
        if (sz >= need && (best < 0 || sz < pl->p->buffer_bytes[pl->free_list[best]] ||
                           (sz == pl->p->buffer_bytes[pl->free_list[best]] && b < pl->free_list[best])))
            best = i;
        if (largest < 0 || sz > pl->p->buffer_bytes[pl->free_list[largest]] ||
            (sz == pl->p->buffer_bytes[pl->free_list[largest]] && b < pl->free_list[largest]))
            largest = i;
    }
    int pick = best >= 0 ? best : largest;
    if (pick < 0) return -1;
    int b = pl->free_list[pick];
    pl->free_list[pick] = pl->free_list[--pl->n_free];
    if (pl->p->buffer_bytes[b] < need) pl->p->buffer_bytes[b] = need; /* grow: size = max of its tensors */
    return b;
}

/* The tensor whose bytes t is, from element *offset on, when t is a view that may share
 * its buffer (the op's view rule; same type: a sharded reshape keeps both), else NULL. */
static const mg_tensor *view_of(const mg_tensor *t, int64_t *offset) {
    if (!t->src || t->src->n_in < 1) return NULL;
    const mg_op_def *d = mg_op_def_get(t->src->op);
    const mg_tensor *x = t->src->in[0];
    if (!d->view || mg_tensor_storage(x) != mg_tensor_storage(t) || !d->view(t->src, offset)) return NULL;
    return *offset >= 0 && *offset + mg_numel(t) <= mg_numel(x) ? x : NULL;
}

/* Follows link[] (the tensor each one lives in, -1 at a root) to the root of t's
 * class; fails on a cycle (the graph would be broken). */
static int find_root(const mg_graph *g, const int *link, int t, int *root, mg_error *err) {
    int r = t, steps = 0, n = mg_graph_n_tensors(g);
    while (link[r] >= 0) {
        r = link[r];
        if (++steps > n)
            return mg_error_set(err, MG_ERR_INVALID, "tensor '%s': `updates` chain has a cycle",
                                mg_graph_tensor(g, t)->name);
    }
    *root = r;
    return MG_OK;
}

/* The root of t's class as linked so far, and t's element offset in it (the links
 * between tensors of one type: views, updates, parts). */
static int root_at(const int *link, const int64_t *off, int t, int64_t *at) {
    *at = 0;
    for (; link[t] >= 0; t = link[t]) *at += off[t];
    return t;
}

/* link[i]: the tensor whose storage tensor i lives in, or -1; off[i]: where, in elements
 * of i's type (0 but for views and parts); placed[i]: i's class was placed as a part (the
 * parts loop below explains when). A tensor that `updates` another always lives in it. With
 * reuse on, a view V of X lives in X when that cannot show V a later value of X than the
 * one it was taken from: nothing updates V's own class, and no in-place write into X's
 * class comes after V's node and before (or at) the last read of V or of the views living
 * in V, in topo order. A write in the per-micro-batch part could interleave with another
 * instance's view, so such classes keep views taken in that part as copies. root is
 * scratch. */
static int build_links(const mg_graph *g, bool views, mg_node **ord, int n, int *link, int64_t *off, bool *placed,
                       int *root, mg_error *err) {
    int nt = mg_graph_n_tensors(g), rc = MG_OK;
    for (int i = 0; i < nt; i++) {
        const mg_tensor *t = mg_graph_tensor(g, i);
        link[i] = t->updates ? t->updates->id : -1;
        off[i] = 0;
        placed[i] = false;
    }
    if (!views) return MG_OK;
    /* per `updates` root r: the topo positions of the in-place writes into its class,
     * w_pos[w_at[r] .. w_at[r + 1]) (none: nothing writes it), and whether any is per
     * micro-batch; per tensor: the last position reading it or a view in it */
    bool *mb_write = calloc((size_t)nt + 1, sizeof *mb_write);
    int *last_read = malloc(((size_t)nt + 1) * sizeof *last_read), *w_at = calloc((size_t)nt + 2, sizeof *w_at);
    int *w_pos = NULL;
    if (!mb_write || !last_read || !w_at) {
        rc = mg_error_set(err, MG_ERR_NOMEM, "out of memory planning %d tensors", nt);
        goto done;
    }
    for (int i = 0; i < nt && !rc; i++) rc = find_root(g, link, i, &root[i], err);
    for (int i = 0; i < nt; i++) last_read[i] = -1;
    for (int k = 0; k < n; k++)
        for (int j = 0; j < ord[k]->n_in; j++) last_read[ord[k]->in[j]->id] = k;
    for (int k = 0; k < n && !rc; k++) /* count the writes into each class */
        for (int o = 0; o < ord[k]->n_out; o++)
            if (ord[k]->out[o]->updates) {
                int r = root[ord[k]->out[o]->id];
                mb_write[r] |= ord[k]->mb >= 0;
                w_at[r + 2]++;
            }
    for (int r = 0; r < nt; r++) w_at[r + 2] += w_at[r + 1];
    if (!rc && !(w_pos = malloc(((size_t)w_at[nt + 1] + 1) * sizeof *w_pos)))
        rc = mg_error_set(err, MG_ERR_NOMEM, "out of memory planning %d tensors", nt);
    for (int k = 0; k < n && !rc; k++) /* and list their positions (w_at[r + 1] counts up to r's end) */
        for (int o = 0; o < ord[k]->n_out; o++)
            if (ord[k]->out[o]->updates) w_pos[w_at[root[ord[k]->out[o]->id] + 1]++] = k;
    /* Views in reverse topo order of their nodes: a view of a view is decided first, and
     * when it lives in its base, that base's last read includes its reads. */
    for (int k = n - 1; k >= 0 && !rc; k--)
        for (int o = 0; o < ord[k]->n_out; o++) {
            const mg_tensor *v = ord[k]->out[o];
            int64_t at = 0;
            const mg_tensor *x = view_of(v, &at);
            if (!x || link[v->id] >= 0 || w_at[root[v->id] + 1] > w_at[root[v->id]]) continue; /* V written */
            int r = root[x->id];
            bool ok = !(mb_write[r] && ord[k]->mb >= 0);
            for (int w = w_at[r]; ok && w < w_at[r + 1]; w++) ok = !(w_pos[w] > k && w_pos[w] <= last_read[v->id]);
            if (!ok) continue;
            link[v->id] = x->id;
            off[v->id] = at;
            if (last_read[v->id] > last_read[x->id]) last_read[x->id] = last_read[v->id];
        }
    /* Parts, in topo order (a concatenation of concatenations nests): input I of a
     * once-per-step node whose parts rule places it at element `at` of the output Y moves
     * its whole class (root R, which I must cover) into Y's class at `at`, so that I's
     * producers write it there and the node copies nothing. Only when the bytes cannot
     * differ: nothing writes Y's class in place, and every in-place write of R's class
     * comes before the node. R is no parameter or input (their buffers are the host's and
     * checkpoints'), and not a per-micro-batch transient (its class kind would change). */
    for (int k = 0; k < n && !rc; k++) {
        const mg_node *nd = ord[k];
        const mg_op_def *d = mg_op_def_get(nd->op);
        if (!d->part || nd->mb >= 0 || nd->n_out != 1) continue;
        const mg_tensor *y = nd->out[0];
        int64_t y_at;
        int ry = root_at(link, off, y->id, &y_at);
        if (w_at[ry + 1] > w_at[ry] || y_at != 0 || ry != y->id) continue; /* Y written in place */
        for (int i = 0; i < nd->n_in; i++) {
            const mg_tensor *in = nd->in[i];
            int64_t at, i_at;
            if (!d->part(nd, i, &at) || mg_tensor_storage(in) != mg_tensor_storage(y)) continue;
            int r = root_at(link, off, in->id, &i_at);
            const mg_tensor *rt = mg_graph_tensor(g, r);
            if (r == ry || i_at != 0 || mg_tensor_storage(rt) != mg_tensor_storage(y) || mg_numel(rt) != mg_numel(in)) continue;
            if (rt->per_microbatch || (!rt->src && (rt->role == MG_ROLE_PARAM || rt->role == MG_ROLE_INPUT)) ||
                (rt->src && rt->src->mb >= 0))
                continue;
            bool ok = true;
            for (int w = w_at[r]; ok && w < w_at[r + 1]; w++) ok = w_pos[w] < k;
            if (!ok) continue;
            link[r] = y->id;
            off[r] = at;
            placed[r] = true;
            /* Y's class now holds R's writes, all before this node: none after it */
        }
    }
done:
    free(w_pos);
    free(w_at);
    free(last_read);
    free(mb_write);
    return rc;
}

/* An in-place update overwrites its target: every other reader of the old value must
 * run before the writer in topo order, or executors would hand it the new value.
 * (A view shares storage only where no such write can come before its reads: build_links.)
 * upd[x] = topo position of the node writing x in place (-1: none); scratch of n_tensors. */
static int check_update_order(const mg_graph *g, mg_node **ord, int n, int *upd, mg_error *err) {
    for (int i = 0; i < mg_graph_n_tensors(g); i++) upd[i] = -1;
    for (int k = 0; k < n; k++)
        for (int o = 0; o < ord[k]->n_out; o++)
            if (ord[k]->out[o]->updates) upd[ord[k]->out[o]->updates->id] = k;
    for (int k = 0; k < n; k++)
        for (int j = 0; j < ord[k]->n_in; j++) {
            const mg_tensor *x = ord[k]->in[j];
            int w = upd[x->id];
            if (w >= 0 && w < k)
                return mg_error_set(err, MG_ERR_INVALID,
                                    "%s node %d reads '%s' after node %d (%s) overwrote it in place",
                                    mg_op_name(ord[k]->op), ord[k]->id, x->name, ord[w]->id, mg_op_name(ord[w]->op));
        }
    return MG_OK;
}

/* The per-micro-batch part runs several times before the once-per-step part runs once:
 * it may not read the step part's results, and the step part may read its results only
 * through classes that live across micro-batches (accumulators). */
static int check_schedule_order(const planner *pl, mg_node **ord, int n, mg_error *err) {
    for (int k = 0; k < n; k++) {
        const mg_node *nd = ord[k];
        for (int j = 0; j < nd->n_in; j++) {
            const mg_tensor *x = nd->in[j];
            if (!x->src) continue;
            if (nd->mb >= 0 && x->src->mb < 0)
                return mg_error_set(err, MG_ERR_INVALID,
                                    "%s node %d (per micro-batch) reads '%s', which the once-per-step part produces",
                                    mg_op_name(nd->op), nd->id, x->name);
            if (nd->mb < 0 && x->src->mb >= 0 && !pl->persist[pl->root[x->id]])
                return mg_error_set(err, MG_ERR_INVALID,
                                    "%s node %d (once per step) reads '%s', a per-micro-batch value that does not "
                                    "live across micro-batches (accumulate it)",
                                    mg_op_name(nd->op), nd->id, x->name);
        }
    }
    return MG_OK;
}

void mg_memplan_free(mg_memplan *p) {
    if (!p) return;
    free(p->buffer_bytes);
    free(p->buffer_kind);
    free(p->buffer_persistent);
    free(p->buffer_of);
    free(p->offset_of);
    free(p->partial);
    free(p);
}

/* Ancestor bitsets over topo positions and, per class, the nodes that touch it. */
static int build_order(planner *pl, mg_node **ord, int n, mg_error *err) {
    mg_graph *g = pl->g;
    int nt = mg_graph_n_tensors(g);
    if (n > MG_MEMPLAN_MAX_ORDERED) return MG_OK; /* plain reuse */
    pl->words = ((size_t)n + 63) / 64;
    pl->anc = calloc((size_t)n * pl->words + 1, sizeof *pl->anc);
    pl->pos = malloc(((size_t)mg_graph_n_nodes(g) + 1) * sizeof *pl->pos);
    pl->buf_class = malloc(((size_t)pl->cap_buffers + 64) * sizeof *pl->buf_class);
    pl->n_acc = calloc((size_t)nt + 1, sizeof *pl->n_acc);
    pl->acc = calloc((size_t)nt + 1, sizeof *pl->acc);
    if (!pl->anc || !pl->pos || !pl->buf_class || !pl->n_acc || !pl->acc)
        return mg_error_set(err, MG_ERR_NOMEM, "out of memory ordering %d nodes for the memory plan", n);
    for (int b = 0; b < pl->cap_buffers + 64; b++) pl->buf_class[b] = -1;
    for (int k = 0; k < n; k++) pl->pos[ord[k]->id] = k;
    for (int k = 0; k < n; k++) {
        uint64_t *a = pl->anc + (size_t)k * pl->words;
        for (int j = 0; j < ord[k]->n_in; j++) {
            const mg_node *src = ord[k]->in[j]->src;
            if (!src) continue;
            int q = pl->pos[src->id];
            const uint64_t *b = pl->anc + (size_t)q * pl->words;
            for (size_t w = 0; w <= (size_t)q >> 6; w++) a[w] |= b[w];
            a[q >> 6] |= 1ull << (q & 63);
        }
    }
    /* accessors: count, then fill */
    for (int pass = 0; pass < 2; pass++) {
        if (pass) {
            for (int r = 0; r < nt; r++) {
                if (pl->n_acc[r] && !(pl->acc[r] = malloc((size_t)pl->n_acc[r] * sizeof **pl->acc)))
                    return mg_error_set(err, MG_ERR_NOMEM, "out of memory planning memory");
                pl->n_acc[r] = 0;
            }
        }
        for (int k = 0; k < n; k++)
            for (int s = 0; s < ord[k]->n_in + ord[k]->n_out; s++) {
                const mg_tensor *t = s < ord[k]->n_in ? ord[k]->in[s] : ord[k]->out[s - ord[k]->n_in];
                int r = pl->root[t->id];
                if (pass) pl->acc[r][pl->n_acc[r]] = k;
                pl->n_acc[r]++;
            }
    }
    return MG_OK;
}

static int plan(planner *pl, bool reuse, mg_error *err) {
    mg_graph *g = pl->g;
    mg_memplan *p = pl->p;
    int nt = p->n_tensors, n;
    mg_node **ord;
    int rc = mg_graph_topo(g, &ord, &n, err);
    if (rc) return rc;
    if ((rc = check_update_order(g, ord, n, p->buffer_of /* scratch, reset below */, err))) return rc;

    /* Alias classes, their persistence and their last use. */
    for (int i = 0; i < nt; i++) {
        pl->last[i] = -1;
        pl->persist[i] = false;
        p->buffer_of[i] = -1;
    }
    int *link = malloc(((size_t)nt + 1) * sizeof *link);
    int64_t *off = malloc(((size_t)nt + 1) * sizeof *off);
    bool *placed = malloc(((size_t)nt + 1) * sizeof *placed);
    rc = link && off && placed ? build_links(g, reuse, ord, n, link, off, placed, pl->root, err)
                               : mg_error_set(err, MG_ERR_NOMEM, "out of memory planning %d tensors", nt);
    bool *per_mb = rc ? NULL : calloc((size_t)nt + 1, sizeof *per_mb);
    if (!rc && !per_mb) rc = mg_error_set(err, MG_ERR_NOMEM, "out of memory planning %d tensors", nt);
    for (int i = 0; i < nt && !rc; i++) {
        const mg_tensor *t = mg_graph_tensor(g, i);
        if ((rc = find_root(g, link, i, &pl->root[i], err))) break;
        if (is_persistent(t)) pl->persist[pl->root[i]] = true;
        if (t->per_microbatch) per_mb[pl->root[i]] = true;
    }
    /* byte offsets in the root's buffer (a view's own plus its base's; a part's place),
     * and whether a placed part lies on the way (its writers keep the rest) */
    for (int i = 0; i < nt && !rc; i++) {
        size_t at = 0;
        for (int t = i; link[t] >= 0; t = link[t]) {
            at += (size_t)off[t] * mg_tensor_esize(mg_graph_tensor(g, t));
            p->partial[i] |= placed[t];
        }
        p->offset_of[i] = at;
    }
    free(link);
    free(off);
    free(placed);
    if (!rc) rc = check_schedule_order(pl, ord, n, err);
    if (rc) {
        free(per_mb);
        return rc;
    }
    for (int k = 0; k < n; k++) {
        const mg_node *nd = ord[k];
        for (int j = 0; j < nd->n_in; j++) pl->last[pl->root[nd->in[j]->id]] = k;
        for (int o = 0; o < nd->n_out; o++) {
            int r = pl->root[nd->out[o]->id];
            if (pl->last[r] < k) pl->last[r] = k; /* writing into the class keeps it live */
        }
    }

    if (reuse && (rc = build_order(pl, ord, n, err))) return rc;

    /* Persistent classes first, in tensor-id order: their buffer indices do not depend
     * on the activations, which keeps checkpoints' buffer layout stable. */
    for (int i = 0; i < nt; i++) {
        if (pl->root[i] != i || !pl->persist[i]) continue;
        mg_buffer_kind kind = per_mb[i] ? MG_BUF_MICROBATCH : MG_BUF_PERSISTENT;
        int b = new_buffer(pl, tensor_bytes(mg_graph_tensor(g, i)), kind, err);
        if (b < 0) {
            free(per_mb);
            return b;
        }
        p->buffer_of[i] = b;
        if (kind == MG_BUF_PERSISTENT) p->persistent_bytes += p->buffer_bytes[b];
        else p->microbatch_bytes += p->buffer_bytes[b];
    }
    free(per_mb);
    for (int i = 0; i < nt; i++) {
        const mg_tensor *t = mg_graph_tensor(g, i);
        if (t->role == MG_ROLE_PARAM && !t->src && t->requires_grad && !t->model_copy) p->params += mg_numel(t);
    }

    /* Transient classes by liveness. */
    for (int k = 0; k < n; k++) {
        const mg_node *nd = ord[k];
        for (int o = 0; o < nd->n_out; o++) {
            const mg_tensor *t = nd->out[o];
            int r = pl->root[t->id];
            /* a class's buffer from its first member's node on (the root's, but for a
             * part placed in a later node's output); members share it; persistent: done */
            if (p->buffer_of[r] >= 0 || pl->persist[r]) continue;
            size_t need = tensor_bytes(mg_graph_tensor(g, r));
            p->unshared_bytes += need;
            mg_buffer_kind kind = nd->mb >= 0 ? MG_BUF_SLOT : MG_BUF_STEP;
            int b = reuse ? take_free(pl, need, k, kind) : -1;
            if (b < 0 && (b = new_buffer(pl, need, kind, err)) < 0) return b;
            p->buffer_of[r] = b;
            if (pl->buf_class) pl->buf_class[b] = r;
        }
        if (!reuse) continue;
        /* Release classes whose last use is this node: inputs, then unread outputs. */
        for (int s = 0; s < nd->n_in + nd->n_out; s++) {
            const mg_tensor *t = s < nd->n_in ? nd->in[s] : nd->out[s - nd->n_in];
            int r = pl->root[t->id];
            if (pl->persist[r] || pl->last[r] != k || p->buffer_of[r] < 0) continue;
            int b = p->buffer_of[r];
            bool dup = false; /* the same class may appear twice in one node (mul(x, x)) */
            for (int f = 0; f < pl->n_free; f++) dup |= pl->free_list[f] == b;
            if (!dup) pl->free_list[pl->n_free++] = b;
        }
    }

    /* Saved activations: forward-produced transient classes whose last use is backward. */
    for (int i = 0; i < nt; i++) {
        const mg_tensor *t = mg_graph_tensor(g, i);
        if (pl->root[i] != i || pl->persist[i] || !t->src || t->src->phase != MG_PHASE_FORWARD || pl->last[i] < 0)
            continue;
        if (ord[pl->last[i]]->phase == MG_PHASE_BACKWARD) p->saved_bytes += tensor_bytes(t);
    }

    /* Members of a class share the root's buffer. */
    for (int i = 0; i < nt; i++) {
        p->buffer_of[i] = p->buffer_of[pl->root[i]];
        if (p->buffer_of[i] < 0) /* a tensor no node produces nor any node reaches */
            return mg_error_set(err, MG_ERR_INVALID, "tensor '%s' got no buffer", mg_graph_tensor(g, i)->name);
    }
    for (int b = 0; b < p->n_buffers; b++) {
        if (p->buffer_kind[b] == MG_BUF_SLOT) p->slot_bytes += p->buffer_bytes[b];
        if (p->buffer_kind[b] == MG_BUF_STEP) p->step_bytes += p->buffer_bytes[b];
    }
    p->transient_bytes = p->slot_bytes + p->step_bytes;
    return MG_OK;
}

int mg_memplan_build(mg_graph *g, bool reuse, mg_memplan **out, mg_error *err) {
    *out = NULL;
    if (!g) return mg_error_set(err, MG_ERR_INVALID, "mg_memplan_build: NULL graph");
    if (mg_graph_error(g)->code)
        return mg_error_set(err, MG_ERR_INVALID, "mg_memplan_build: graph has an error: %s", mg_graph_error(g)->msg);
    mg_precision_complete(g); /* storage dtypes size the buffers */
    int nt = mg_graph_n_tensors(g);
    size_t cnt = (size_t)nt + 1;
    planner pl = {.g = g};
    mg_memplan *p = calloc(1, sizeof *p);
    pl.p = p;
    if (p) {
        p->n_tensors = nt;
        p->buffer_of = malloc(cnt * sizeof *p->buffer_of);
        p->offset_of = calloc(cnt, sizeof *p->offset_of);
        p->partial = calloc(cnt, sizeof *p->partial);
    }
    pl.root = malloc(cnt * sizeof *pl.root);
    pl.last = malloc(cnt * sizeof *pl.last);
    pl.persist = malloc(cnt * sizeof *pl.persist);
    pl.free_list = malloc(cnt * sizeof *pl.free_list);
    int rc;
    if (!p || !p->buffer_of || !p->offset_of || !p->partial || !pl.root || !pl.last || !pl.persist || !pl.free_list)
        rc = mg_error_set(err, MG_ERR_NOMEM, "out of memory planning %d tensors", nt);
    else
        rc = plan(&pl, reuse, err);
    if (pl.acc)
        for (int i = 0; i < nt; i++) free(pl.acc[i]);
    free(pl.acc);
    free(pl.n_acc);
    free(pl.anc);
    free(pl.pos);
    free(pl.buf_class);
    free(pl.root);
    free(pl.last);
    free(pl.persist);
    free(pl.free_list);
    if (rc) {
        mg_memplan_free(p);
        return rc;
    }
    *out = p;
    return MG_OK;
}

void mg_memplan_summary(const mg_memplan *p, char *buf, size_t len) {
    const double mib = 1024.0 * 1024.0;
    char per[48] = "";
    if (p->params > 0) snprintf(per, sizeof per, " (%.2f B/parameter)", (double)p->persistent_bytes / (double)p->params);
    snprintf(buf, len,
             "persistent %.2f MiB%s, activations %.2f MiB per micro-batch in flight (%.2f MiB saved for backward) + "
             "%.2f MiB per step (%.2f MiB without reuse), inputs %.2f MiB per micro-batch, %d buffers",
             (double)p->persistent_bytes / mib, per, (double)p->slot_bytes / mib, (double)p->saved_bytes / mib,
             (double)p->step_bytes / mib, (double)p->unshared_bytes / mib, (double)p->microbatch_bytes / mib,
             p->n_buffers);
}

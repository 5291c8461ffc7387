/* Memory plan: reuse happens, never where it would be wrong.
 *
 * Invariants checked on every plan (check_plan):
 *  - a persistent tensor's buffer holds no tensor outside its class (`updates` and views);
 *  - a tensor that updates another shares its buffer;
 *  - no output shares a buffer with an input of its node (except in-place updates and
 *    views, which share on purpose);
 *  - two tensors sharing a transient buffer have disjoint live ranges;
 *  - every buffer is at least as large as each tensor in it;
 *  - peak (transient bytes) <= bytes without reuse.
 */
#include <stdlib.h>
#include <string.h>

#include "mgraph/engine.h"
#include "mgraph/memplan.h"
#include "mgraph/model.h"
#include "ops/op.h" /* the ops' view rules */
#include "testkit.h"

static int64_t S1[1] = {1024};

static size_t bytes_of(const mg_tensor *t) { return (size_t)mg_numel(t) * mg_dtype_size(t->dtype); }

/* t's base and offset (elements) when its op's view rule says it may be a view. */
static const mg_tensor *view_base(const mg_tensor *t, int64_t *at) {
    if (!t->src || t->src->n_in < 1 || !mg_op_def_get(t->src->op)->view) return NULL;
    return mg_op_def_get(t->src->op)->view(t->src, at) ? t->src->in[0] : NULL;
}

/* Whether the plan made t a view: its base's buffer, at the base's offset plus its own. */
static bool is_view(const mg_memplan *p, const mg_tensor *t) {
    int64_t at = 0;
    const mg_tensor *x = view_base(t, &at);
    return x && p->buffer_of[t->id] == p->buffer_of[x->id] &&
           p->offset_of[t->id] == p->offset_of[x->id] + (size_t)at * mg_dtype_size(t->dtype);
}

/* The output of the concat (a node with a parts rule) that t's class is placed in: an
 * input of it is t or reaches t through `updates` and views, and sits at its place. */
static const mg_tensor *placed_in(const mg_graph *g, const mg_memplan *p, const mg_tensor *t) {
    for (int k = 0; k < mg_graph_n_nodes(g); k++) {
        const mg_node *nd = mg_graph_node(g, k);
        const mg_op_def *d = mg_op_def_get(nd->op);
        int64_t at;
        for (int i = 0; d->part && i < nd->n_in; i++) {
            const mg_tensor *u = nd->in[i], *v = u; /* t, or u's class reaches t */
            while (v != t && (v->updates || is_view(p, v))) v = v->updates ? v->updates : v->src->in[0];
            if (v == t && d->part(nd, i, &at) && p->buffer_of[nd->out[0]->id] == p->buffer_of[u->id] &&
                p->offset_of[u->id] == p->offset_of[nd->out[0]->id] + (size_t)at * mg_dtype_size(u->dtype))
                return nd->out[0];
        }
    }
    return NULL;
}

/* The class root as the plan may form it: through `updates`, and through a view (a
 * reshape, a slice) when the view got its base's buffer. */
static const mg_tensor *root_of(const mg_graph *g, const mg_memplan *p, const mg_tensor *t) {
    for (;;) {
        if (t->updates) t = t->updates;
        else if (is_view(p, t)) t = t->src->in[0];
        else if (p->partial[t->id] && placed_in(g, p, t)) t = placed_in(g, p, t);
        else return t;
    }
}

/* Topo position of each node id. */
static int *positions(mg_graph *g) {
    mg_node **ord;
    int n;
    mg_error err = {0};
    if (mg_graph_topo(g, &ord, &n, &err)) return NULL;
    int *pos = malloc((size_t)mg_graph_n_nodes(g) * sizeof *pos + 1);
    for (int k = 0; k < n; k++) pos[ord[k]->id] = k;
    return pos;
}

static void check_plan(mg_graph *g, const mg_memplan *p) {
    int nt = mg_graph_n_tensors(g);
    int *pos = positions(g);
    TK_CHECK(pos != NULL, "topo order");
    if (!pos) return;
    /* live range [first, last] of each tensor (as a position in topo order) */
    int *first = malloc(sizeof(int) * (size_t)nt), *last = malloc(sizeof(int) * (size_t)nt);
    for (int i = 0; i < nt; i++) {
        const mg_tensor *t = mg_graph_tensor(g, i);
        first[i] = t->src ? pos[t->src->id] : -1;
        last[i] = first[i];
    }
    for (int j = 0; j < mg_graph_n_nodes(g); j++) {
        const mg_node *nd = mg_graph_node(g, j);
        for (int k = 0; k < nd->n_in; k++)
            if (last[nd->in[k]->id] < pos[j]) last[nd->in[k]->id] = pos[j];
    }
    for (int i = 0; i < nt; i++) {
        const mg_tensor *t = mg_graph_tensor(g, i);
        int b = p->buffer_of[i];
        TK_CHECK(b >= 0 && b < p->n_buffers, "tensor %s has buffer %d", t->name, b);
        TK_CHECK(p->buffer_bytes[b] >= p->offset_of[i] + bytes_of(t), "buffer %d smaller than %s at %zu", b, t->name,
                 p->offset_of[i]);
        TK_CHECK(!p->offset_of[i] || is_view(p, t) || p->partial[i], "%s is at offset %zu but is no view or part",
                 t->name, p->offset_of[i]);
        if (t->updates) TK_CHECK(b == p->buffer_of[t->updates->id], "%s does not share %s's buffer", t->name, t->updates->name);
        /* a view shows its base's bytes as of its node: no in-place write into the class
         * between that node and the view's reads (both ends of the write included) */
        if (is_view(p, t))
            for (int w = 0; w < nt; w++) {
                const mg_tensor *u = mg_graph_tensor(g, w);
                if (!u->updates || root_of(g, p, u) != root_of(g, p, t)) continue;
                for (int j = 0; j < mg_graph_n_nodes(g); j++) {
                    const mg_node *nd = mg_graph_node(g, j);
                    for (int k = 0; k < nd->n_in; k++)
                        if (nd->in[k] == t)
                            TK_CHECK(!(pos[u->src->id] > pos[t->src->id] && pos[u->src->id] <= pos[j]),
                                     "%s writes the bytes of view %s between its node and its reader %s", u->name,
                                     t->name, mg_op_name(nd->op));
                }
            }
        for (int j = i + 1; j < nt; j++) {
            if (p->buffer_of[j] != b) continue;
            const mg_tensor *u = mg_graph_tensor(g, j);
            if (root_of(g, p, t) == root_of(g, p, u)) continue;
            TK_CHECK(!p->buffer_persistent[b], "persistent buffer %d holds %s and %s", b, t->name, u->name);
            TK_CHECK(!t->persistent && !u->persistent, "persistent tensor shares: %s, %s", t->name, u->name);
            TK_CHECK(last[i] < first[j] || last[j] < first[i], "%s [%d,%d] and %s [%d,%d] overlap in buffer %d",
                     t->name, first[i], last[i], u->name, first[j], last[j], b);
        }
    }
    for (int j = 0; j < mg_graph_n_nodes(g); j++) {
        const mg_node *nd = mg_graph_node(g, j);
        for (int o = 0; o < nd->n_out; o++)
            for (int k = 0; k < nd->n_in; k++) {
                if (root_of(g, p, nd->out[o]) == root_of(g, p, nd->in[k])) continue; /* in-place update */
                TK_CHECK(p->buffer_of[nd->out[o]->id] != p->buffer_of[nd->in[k]->id],
                         "output %s shares input %s's buffer", nd->out[o]->name, nd->in[k]->name);
            }
    }
    TK_CHECK(p->transient_bytes <= p->unshared_bytes, "peak %zu > unshared %zu", p->transient_bytes,
             p->unshared_bytes);
    free(first);
    free(last);
    free(pos);
}

static mg_memplan *plan_of(mg_graph *g, bool reuse) {
    mg_memplan *p = NULL;
    mg_error err = {0};
    TK_CHECK(mg_graph_error(g)->code == MG_OK, "graph: %s", mg_graph_error(g)->msg);
    int rc = mg_memplan_build(g, reuse, &p, &err);
    TK_CHECK(rc == MG_OK, "memplan: %s", err.msg);
    if (p) check_plan(g, p);
    return p;
}

/* x -> scale -> scale -> ... (8 steps): two transient buffers suffice. */
static void test_chain(void) {
    mg_graph *g = mg_graph_new();
    mg_tensor *x = mg_input(g, "x", MG_F32, 1, S1), *h = x;
    for (int i = 0; i < 8; i++) h = mg_scale(g, h, 0.5f);
    h->persistent = true; /* the host reads the result */
    mg_memplan *p = plan_of(g, true);
    if (p) {
        TK_CHECK(p->n_buffers == 4, "chain: %d buffers, want 4 (x, out, 2 ping-pong)", p->n_buffers);
        TK_CHECK(p->transient_bytes == 2 * 4096, "chain: peak %zu, want 8192", p->transient_bytes);
        TK_CHECK(p->unshared_bytes == 7 * 4096, "chain: unshared %zu", p->unshared_bytes);
        char buf[512];
        mg_memplan_summary(p, buf, sizeof buf);
        TK_CHECK(strstr(buf, "4 buffers") != NULL, "summary: %s", buf);
        printf("chain: %s\n", buf);
    }
    mg_memplan_free(p);
    p = plan_of(g, false);
    if (p) TK_CHECK(p->n_buffers == 9, "no reuse: %d buffers, want 9", p->n_buffers);
    mg_memplan_free(p);
    mg_graph_free(g);
}

/* Diamond: a = f(x); b = g(a); c = h(a); d = b + c; then a chain after it. a stays live
 * across b and c; later tensors reuse a, b, c's buffers. */
static void test_diamond(void) {
    mg_graph *g = mg_graph_new();
    mg_tensor *x = mg_input(g, "x", MG_F32, 1, S1);
    mg_tensor *a = mg_scale(g, x, 2.0f);
    mg_tensor *b = mg_scale(g, a, 3.0f);
    mg_tensor *c = mg_mul(g, a, a); /* the same tensor twice in one node */
    mg_tensor *d = mg_add(g, b, c);
    mg_tensor *e = mg_scale(g, d, 0.5f);
    mg_tensor *f = mg_sub(g, e, d);
    mg_tensor *y = mg_scale(g, f, 1.5f);
    y->persistent = true;
    mg_memplan *p = plan_of(g, true);
    if (p) {
        TK_CHECK(p->buffer_of[a->id] != p->buffer_of[b->id], "a and b live together");
        TK_CHECK(p->buffer_of[a->id] != p->buffer_of[c->id], "a and c live together");
        TK_CHECK(p->transient_bytes < p->unshared_bytes, "diamond: no reuse (%zu vs %zu)", p->transient_bytes,
                 p->unshared_bytes);
        TK_CHECK(p->transient_bytes == 3 * 4096, "diamond: peak %zu, want 3 buffers", p->transient_bytes);
    }
    mg_memplan_free(p);
    mg_graph_free(g);
}

/* Best fit and growth: sizes differ, the smallest fitting free buffer is taken, and
 * a too-small one grows (its size becomes the max of its tensors). */
static void test_sizes(void) {
    mg_graph *g = mg_graph_new();
    int64_t s_small[1] = {1024}, s_big[2] = {4, 1024};
    mg_tensor *x = mg_input(g, "x", MG_F32, 1, s_small);
    mg_tensor *big = mg_param(g, "big", 2, s_big, (mg_init){MG_INIT_ZEROS, 0});
    mg_tensor *a = mg_scale(g, x, 2.0f);      /* 1 KiB */
    mg_tensor *b = mg_scale(g, a, 2.0f);      /* 1 KiB; a free after */
    mg_tensor *c = mg_add(g, b, big);         /* 16 KiB: grows a's buffer */
    mg_tensor *y = mg_scale(g, c, 1.0f);
    y->persistent = true;
    mg_memplan *p = plan_of(g, true);
    if (p) {
        TK_CHECK(p->buffer_of[c->id] == p->buffer_of[a->id], "c should grow a's free buffer");
        TK_CHECK(p->buffer_bytes[p->buffer_of[c->id]] == 16384, "grown buffer %zu", p->buffer_bytes[p->buffer_of[c->id]]);
    }
    mg_memplan_free(p);
    mg_graph_free(g);
}

/* An optimizer-like in-place update: w_new = w - lr * g writes into w's buffer; a
 * moment m_new updates m. Transient chains with `updates` extend liveness. */
static void test_updates(void) {
    mg_graph *g = mg_graph_new();
    mg_tensor *x = mg_input(g, "x", MG_F32, 1, S1);
    mg_tensor *w = mg_param(g, "w", 1, S1, (mg_init){MG_INIT_NORMAL, 0.02f});
    mg_tensor *m = mg_state(g, "m", MG_F32, 1, S1, (mg_init){MG_INIT_ZEROS, 0});
    mg_tensor *y = mg_mul(g, x, w);
    mg_tensor *gr = mg_scale(g, y, 2.0f);
    mg_tensor *m_new = mg_add(g, m, gr);
    m_new->updates = m;
    mg_tensor *w_new = mg_sub(g, w, mg_scale(g, m_new, 0.1f));
    w_new->updates = w;
    /* transient in-place chain: t = scale(x); t2 updates t; reader of t2 later */
    mg_tensor *t = mg_scale(g, x, 3.0f);
    mg_tensor *t2 = mg_scale(g, t, 2.0f);
    t2->updates = t;
    mg_tensor *z = mg_scale(g, t2, 1.0f);
    z->persistent = true;
    mg_memplan *p = plan_of(g, true);
    if (p) {
        TK_CHECK(p->buffer_of[w_new->id] == p->buffer_of[w->id], "w_new shares w");
        TK_CHECK(p->buffer_of[m_new->id] == p->buffer_of[m->id], "m_new shares m");
        TK_CHECK(p->buffer_persistent[p->buffer_of[w->id]], "w's buffer is persistent");
        TK_CHECK(p->buffer_of[t2->id] == p->buffer_of[t->id], "t2 shares t");
        TK_CHECK(p->buffer_of[z->id] != p->buffer_of[t->id], "z is persistent");
    }
    mg_memplan_free(p);
    /* with reuse off, updates still share (they are semantics, not an optimisation) */
    p = plan_of(g, false);
    if (p) TK_CHECK(p->buffer_of[w_new->id] == p->buffer_of[w->id], "no reuse: w_new shares w");
    mg_memplan_free(p);
    mg_graph_free(g);
}

/* A reader of w must run before the node that overwrites w in place, whatever the
 * node ids say: the topo order makes that write-after-read edge real, and the plan
 * (which re-checks it) accepts the graph. */
static void test_update_order(void) {
    mg_graph *g = mg_graph_new();
    mg_tensor *w = mg_param(g, "w", 1, S1, (mg_init){MG_INIT_ZEROS, 0});
    mg_tensor *w_new = mg_scale(g, w, 0.5f);
    w_new->updates = w;
    mg_tensor *late = mg_scale(g, w, 2.0f); /* created after the writer */
    late->persistent = true;
    int *pos = positions(g);
    if (pos) TK_CHECK(pos[late->src->id] < pos[w_new->src->id], "reader of w runs after its in-place writer");
    free(pos);
    mg_memplan_free(plan_of(g, true));
    mg_graph_free(g);
}

/* The values through views and parts equal those through copies: the reference executor
 * and the StarPU engine (two steps: in-place writes change the second) on the reusing plan,
 * against the reference executor on the plan without reuse. Inputs and parameters get a
 * fixed pattern. */
static void same_values(mg_graph *g, mg_tensor *const *outs, int n_out) {
    char *want[16] = {0};
    for (int run = 0; run < 3 && n_out <= 16; run++) {
        mg_memplan *pl = NULL;
        mg_storage *st = NULL;
        mg_engine *en = NULL;
        mg_error err = {0};
        mg_exec_info info = {.seed = 7, .training = true};
        int rc = mg_memplan_build(g, run > 0, &pl, &err);
        if (!rc) rc = mg_storage_new(g, pl, &st, &err);
        if (!rc) rc = mg_storage_init(st, 7, &err);
        for (int i = 0; !rc && i < mg_graph_n_tensors(g); i++) {
            const mg_tensor *t = mg_graph_tensor(g, i);
            if (t->src || (t->role != MG_ROLE_INPUT && t->role != MG_ROLE_PARAM)) continue;
            float *v = mg_storage_data(st, t);
            for (int64_t k = 0; k < mg_numel(t); k++) v[k] = (float)(k % 37) - 18.0f + 0.25f * (float)(i % 5);
        }
        mg_engine_options eo = {.ncpus = 2, .use_priorities = true};
        if (!rc && run == 2) rc = mg_engine_new(g, st, &eo, &en, &err);
        for (int step = 0; step < 2 && !rc; step++)
            rc = run == 2 ? mg_engine_run(en, &info, &err) : mg_exec_reference(g, st, &info, &err);
        mg_engine_free(en);
        TK_CHECK(rc == MG_OK, "run %d: %s", run, err.msg);
        for (int k = 0; k < n_out && !rc; k++) {
            size_t nb = (size_t)mg_numel(outs[k]) * sizeof(float);
            const float *got = mg_storage_data(st, outs[k]);
            if (run == 0) {
                want[k] = malloc(nb);
                if (want[k]) memcpy(want[k], got, nb);
            } else if (want[k]) {
                TK_CHECK(!memcmp(want[k], got, nb), "run %d: %s differs from the copies' run", run, outs[k]->name);
            }
        }
        mg_storage_free(st);
        mg_memplan_free(pl);
    }
    for (int k = 0; k < 16; k++) free(want[k]);
}

/* A reshape is a view, and so is a slice of one contiguous range: with reuse it gets its
 * base's buffer (at its offset), and the class stays live until the view's last reader.
 * Without reuse, or when an in-place update of the base could come between the view's
 * node and a read of it (the view must show the bytes as they were), it is a copy. */
static void test_views(void) {
    mg_graph *g = mg_graph_new();
    int64_t s2[2] = {32, 32}, row[2] = {1, 1024};
    mg_tensor *x = mg_input(g, "x", MG_F32, 1, S1);
    mg_tensor *a = mg_scale(g, x, 3.0f);
    mg_tensor *v = mg_reshape(g, a, 2, s2);
    mg_tensor *v2 = mg_reshape(g, v, 1, S1); /* a view of a view */
    mg_tensor *c = mg_scale(g, x, 2.0f);     /* may reuse a buffer only once v2 is dead */
    mg_tensor *d = mg_add(g, v2, c);
    mg_tensor *sl = mg_slice(g, v, 0, 8, 16);   /* rows 8..23 of v: one range of a, at 256 */
    mg_tensor *sl2 = mg_slice(g, sl, 1, 4, 8);  /* columns: not one range */
    mg_tensor *ar = mg_reshape(g, a, 2, row);
    mg_tensor *sl3 = mg_slice(g, ar, 1, 100, 200); /* columns of a single row: one range */
    mg_tensor *d2 = mg_scale(g, d, 0.5f);
    d2->persistent = true;
    mg_tensor *e = mg_add(g, mg_reshape(g, sl, 1, (int64_t[]){512}),
                          mg_reshape(g, mg_concat(g, 4, (mg_tensor *[]){sl2, sl2, sl2, sl2}, 1), 1, (int64_t[]){512}));
    e->persistent = true;
    mg_tensor *f = mg_scale(g, sl3, 1.0f);
    f->persistent = true;
    mg_tensor *w = mg_param(g, "w", 1, S1, (mg_init){MG_INIT_ZEROS, 0});
    mg_tensor *wv = mg_reshape(g, w, 2, s2); /* read before w is overwritten: a view */
    mg_tensor *r = mg_scale(g, wv, 1.0f);
    r->persistent = true;
    mg_tensor *w_new = mg_scale(g, w, 0.5f);
    w_new->updates = w;
    mg_tensor *wv2 = mg_reshape(g, w, 2, s2); /* read after w is overwritten: a copy */
    mg_tensor *r2 = mg_add(g, mg_reshape(g, wv2, 1, S1), w_new);
    r2->persistent = true;
    TK_CHECK(!mg_graph_error(g)->code, "build: %s", mg_graph_error(g)->msg);
    mg_memplan *p = plan_of(g, true);
    if (p) {
        TK_CHECK(p->buffer_of[v->id] == p->buffer_of[a->id], "reshape shares its input's buffer");
        TK_CHECK(p->buffer_of[v2->id] == p->buffer_of[a->id], "a reshape of a reshape shares it too");
        TK_CHECK(p->buffer_of[c->id] != p->buffer_of[a->id], "c took the buffer while the view is live");
        TK_CHECK(p->buffer_of[sl->id] == p->buffer_of[a->id] && p->offset_of[sl->id] == 256 * sizeof(float),
                 "a slice of rows is a view at its offset (buffer %d of %d, offset %zu)", p->buffer_of[sl->id],
                 p->buffer_of[a->id], p->offset_of[sl->id]);
        TK_CHECK(p->buffer_of[sl2->id] != p->buffer_of[a->id], "a slice of columns is a copy");
        TK_CHECK(p->buffer_of[sl3->id] == p->buffer_of[a->id] && p->offset_of[sl3->id] == 100 * sizeof(float),
                 "a slice of one row's columns is a view at its offset");
        TK_CHECK(p->buffer_of[wv->id] == p->buffer_of[w->id], "a view read before the in-place update shares");
        TK_CHECK(p->buffer_of[wv2->id] != p->buffer_of[w->id], "a view read after the in-place update is a copy");
    }
    mg_memplan_free(p);
    p = plan_of(g, false);
    if (p) TK_CHECK(p->buffer_of[v->id] != p->buffer_of[a->id] && p->buffer_of[sl->id] != p->buffer_of[a->id],
                    "no reuse: reshapes and slices are copies");
    mg_memplan_free(p);
    mg_tensor *outs[5] = {d2, e, f, r, r2};
    same_values(g, outs, 5);
    mg_graph_free(g);
}

/* A concat's inputs placed in its output: their producers write them there and the
 * concat copies only the rest; not when the output is overwritten in place, when an
 * input's class is written after the concat, for parameters and per-micro-batch inputs,
 * or when the parts are not contiguous (a concat along dim 1). */
static void test_parts(void) {
    mg_graph *g = mg_graph_new();
    int64_t n4[1] = {256}, m2[2] = {16, 16};
    mg_tensor *x = mg_input(g, "x", MG_F32, 1, n4);
    mg_tensor *a = mg_scale(g, x, 2.0f);                                           /* placed */
    mg_tensor *acc = mg_state(g, "acc", MG_F32, 1, n4, (mg_init){MG_INIT_ZEROS, 0}); /* placed, with its write */
    acc->role = MG_ROLE_GRAD;
    mg_tensor *acc_new = mg_add(g, acc, x);
    acc_new->updates = acc;
    mg_tensor *q = mg_scale(g, x, 4.0f); /* placed, and read again after the concat */
    mg_tensor *w = mg_param(g, "w", 1, n4, (mg_init){MG_INIT_ZEROS, 0}); /* a parameter: copied */
    mg_tensor *y = mg_concat(g, 4, (mg_tensor *[]){a, acc_new, q, w}, 0);
    mg_tensor *z = mg_scale(g, y, 0.5f);
    z->persistent = true;
    mg_tensor *q2 = mg_scale(g, q, 1.5f);
    q2->persistent = true;
    /* the output overwritten in place: its inputs stay copies */
    mg_tensor *b1 = mg_scale(g, x, 5.0f), *b2 = mg_scale(g, x, 6.0f);
    mg_tensor *y2 = mg_concat(g, 2, (mg_tensor *[]){b1, b2}, 0);
    y2->persistent = true;
    mg_tensor *y2_new = mg_scale(g, y2, 2.0f);
    y2_new->updates = y2;
    mg_tensor *b1_late = mg_add(g, b1, mg_slice(g, y2_new, 0, 0, 256)); /* b1 read after y2's write */
    b1_late->persistent = true;
    /* an input written in place after the concat: a copy */
    mg_tensor *st = mg_state(g, "st", MG_F32, 1, n4, (mg_init){MG_INIT_ZEROS, 0});
    st->role = MG_ROLE_OPT_STATE;
    mg_tensor *c1 = mg_scale(g, x, 7.0f);
    mg_tensor *y3 = mg_concat(g, 2, (mg_tensor *[]){c1, st}, 0);
    mg_tensor *z3 = mg_scale(g, y3, 1.0f);
    z3->persistent = true;
    mg_tensor *st_new = mg_add(g, st, mg_slice(g, z3, 0, 0, 256));
    st_new->updates = st;
    mg_tensor *y3_late = mg_add(g, mg_slice(g, y3, 0, 256, 256), st_new); /* y3 read after st's write */
    y3_late->persistent = true;
    /* along dim 1: not contiguous parts */
    mg_tensor *d1 = mg_reshape(g, mg_scale(g, x, 8.0f), 2, m2), *d2 = mg_reshape(g, mg_scale(g, x, 9.0f), 2, m2);
    mg_tensor *y4 = mg_concat(g, 2, (mg_tensor *[]){d1, d2}, 1);
    y4->persistent = true;
    TK_CHECK(!mg_graph_error(g)->code, "build: %s", mg_graph_error(g)->msg);
    mg_memplan *p = plan_of(g, true);
    if (p) {
        int by = p->buffer_of[y->id];
        TK_CHECK(p->buffer_of[a->id] == by && p->offset_of[a->id] == 0, "a is placed at 0");
        TK_CHECK(p->buffer_of[acc->id] == by && p->buffer_of[acc_new->id] == by && p->offset_of[acc->id] == 256 * 4,
                 "the accumulator and its in-place write are placed at 256");
        TK_CHECK(p->buffer_of[q->id] == by && p->offset_of[q->id] == 512 * 4, "q is placed at 512");
        TK_CHECK(p->buffer_of[w->id] != by, "a parameter is not placed");
        TK_CHECK(p->partial[a->id] && p->partial[acc_new->id] && !p->partial[y->id] && !p->partial[w->id],
                 "partial marks the placed parts");
        TK_CHECK(p->buffer_persistent[by], "holding the accumulator makes the buffer persistent");
        TK_CHECK(p->buffer_of[b1->id] != p->buffer_of[y2->id] && p->buffer_of[b2->id] != p->buffer_of[y2->id],
                 "parts of an output overwritten in place are copies");
        TK_CHECK(p->buffer_of[c1->id] == p->buffer_of[y3->id] && p->buffer_of[st->id] != p->buffer_of[y3->id],
                 "an input written after the concat is a copy (and the other input placed)");
        TK_CHECK(p->buffer_of[d1->id] != p->buffer_of[y4->id], "parts along dim 1 are copies");
    }
    mg_memplan_free(p);
    mg_tensor *outs[8] = {z, q2, y2, z3, st, y4, b1_late, y3_late};
    same_values(g, outs, 8);
    mg_graph_free(g);
}

/* Identical builds give identical plans. */
static mg_graph *build_mlp_like(void) {
    mg_graph *g = mg_graph_new();
    int64_t s[2] = {16, 64}, sb[1] = {64};
    mg_tensor *h = mg_input(g, "x", MG_F32, 2, s);
    for (int l = 0; l < 4; l++) {
        mg_scope_push(g, "l%d", l);
        mg_tensor *b = mg_param(g, "b", 1, sb, (mg_init){MG_INIT_NORMAL, 0.1f});
        mg_tensor *a = mg_bias_add(g, h, b);
        mg_tensor *r = mg_mul(g, a, h);
        h = mg_add(g, mg_scale(g, r, 0.5f), h);
        mg_scope_pop(g);
    }
    h->persistent = true;
    return g;
}

static void test_deterministic(void) {
    mg_graph *g1 = build_mlp_like(), *g2 = build_mlp_like();
    mg_memplan *p1 = plan_of(g1, true), *p2 = plan_of(g2, true);
    if (p1 && p2) {
        TK_CHECK(p1->n_buffers == p2->n_buffers, "buffers %d vs %d", p1->n_buffers, p2->n_buffers);
        TK_CHECK(memcmp(p1->buffer_of, p2->buffer_of, sizeof(int) * (size_t)p1->n_tensors) == 0, "buffer_of differs");
        TK_CHECK(memcmp(p1->offset_of, p2->offset_of, sizeof(size_t) * (size_t)p1->n_tensors) == 0, "offset_of differs");
        TK_CHECK(p1->transient_bytes < p1->unshared_bytes, "mlp: no reuse");
    }
    mg_memplan_free(p1);
    mg_memplan_free(p2);
    mg_graph_free(g1);
    mg_graph_free(g2);
}

/* Reuse must not order what the data leaves independent (two micro-batches run side
 * by side): when two transient tensors share a buffer, every node touching the earlier
 * one is an ancestor of the node producing the later one. */
static void test_no_false_order(void) {
    mg_step_config sc = tk_small_gpt(2, 32, 2, 8, 128, 2, 2);
    mg_step st;
    mg_error err = {0};
    mg_memplan *p = NULL;
    if (mg_step_build(&sc, &st, &err) || mg_memplan_build(st.g, true, &p, &err)) {
        TK_CHECK(0, "build: %s", err.msg);
        return;
    }
    mg_graph *g = st.g;
    int nn = mg_graph_n_nodes(g), nt = mg_graph_n_tensors(g);
    mg_node **ord;
    int n;
    mg_graph_topo(g, &ord, &n, &err);
    /* anc[i * nn + j]: node j is an ancestor of node i (ids) */
    unsigned char *anc = calloc((size_t)nn * (size_t)nn, 1);
    for (int k = 0; k < n; k++) {
        const mg_node *nd = ord[k];
        for (int j = 0; j < nd->n_in; j++) {
            const mg_node *s = nd->in[j]->src;
            if (!s) continue;
            anc[(size_t)nd->id * nn + s->id] = 1;
            for (int q = 0; q < nn; q++)
                if (anc[(size_t)s->id * nn + q]) anc[(size_t)nd->id * nn + q] = 1;
        }
    }
    int *pos = positions(g), shared = 0;
    for (int a = 0; a < nt; a++) {
        const mg_tensor *ta = mg_graph_tensor(g, a);
        if (!ta->src || ta->updates || p->buffer_persistent[p->buffer_of[a]]) continue;
        for (int b = 0; b < nt; b++) {
            const mg_tensor *tb = mg_graph_tensor(g, b);
            if (b == a || !tb->src || tb->updates || p->buffer_of[b] != p->buffer_of[a]) continue;
            if (root_of(g, p, ta) == root_of(g, p, tb)) continue; /* a view shares, it does not reuse */
            if (pos[tb->src->id] < pos[ta->src->id]) continue; /* check (earlier a, later b) */
            shared++;
            bool ok = anc[(size_t)tb->src->id * nn + ta->src->id];
            for (int j = 0; j < nn && ok; j++) {
                const mg_node *c = mg_graph_node(g, j);
                for (int i = 0; i < c->n_in; i++)
                    if (c->in[i] == ta && c != tb->src && !anc[(size_t)tb->src->id * nn + c->id]) ok = false;
            }
            TK_CHECK(ok, "%s reuses the buffer of %s without being ordered after all its users", tb->name, ta->name);
        }
    }
    TK_CHECK(shared > 0, "reuse happened");
    TK_CHECK(p->transient_bytes < p->unshared_bytes, "reuse saves memory");
    printf("%d buffer-sharing pairs, all ordered by the data; activations %zu of %zu bytes\n", shared,
           p->transient_bytes, p->unshared_bytes);
    free(pos);
    free(anc);
    mg_memplan_free(p);
    mg_step_release(&st);
}

/* mg_memory_get_stats (Megatron's memory report): what the storages hold is the plans'
 * buffers, every copy, borrowed ones once; reserved is what they took (64-byte lines,
 * whole pages when mapped); the peak stays when a storage is freed. */
static void test_storage_stats(void) {
    mg_graph *g = mg_graph_new();
    int64_t s_odd[1] = {1000}, s_big[1] = {300000}; /* 4000 bytes (4032 taken), 1.2 MB (mapped) */
    mg_tensor *x = mg_input(g, "x", MG_F32, 1, s_odd);
    mg_tensor *w = mg_param(g, "w", 1, s_odd, (mg_init){MG_INIT_NORMAL, 0.02f});
    mg_tensor *big = mg_param(g, "big", 1, s_big, (mg_init){MG_INIT_ZEROS, 0});
    mg_tensor *a = mg_add(g, x, w), *y = mg_scale(g, a, 2.0f), *z = mg_scale(g, big, 3.0f);
    y->persistent = z->persistent = true;
    mg_memplan *p = plan_of(g, true);
    mg_error err = {0};
    mg_memory_stats m0, m1, m2, m3, m4;
    mg_memory_get_stats(&m0);
    mg_storage *s = NULL, *t = NULL;
    if (!p || mg_storage_new(g, p, &s, &err)) {
        TK_CHECK(0, "storage: %s", err.msg);
        goto out;
    }
    mg_memory_get_stats(&m1);
    size_t plan = p->persistent_bytes + p->microbatch_bytes + p->slot_bytes + p->step_bytes, taken = 0;
    for (int b = 0; b < p->n_buffers; b++) {
        size_t r = (p->buffer_bytes[b] + 63) / 64 * 64;
        taken += r >= (1u << 20) ? (r + 4095) / 4096 * 4096 : r ? r : 64;
    }
    TK_CHECK(m1.allocated_bytes - m0.allocated_bytes == plan, "allocated %zu, the plan's buffers %zu",
             m1.allocated_bytes - m0.allocated_bytes, plan);
    TK_CHECK(plan >= 4 * (2000 + 2 * 300000), "plan %zu bytes: x, w, y, big, z", plan);
    TK_CHECK(m1.reserved_bytes - m0.reserved_bytes == taken, "reserved %zu, expected %zu",
             m1.reserved_bytes - m0.reserved_bytes, taken);
    TK_CHECK(m1.allocation_count - m0.allocation_count == p->n_buffers, "%lld buffers counted, plan has %d",
             (long long)(m1.allocation_count - m0.allocation_count), p->n_buffers);
    TK_CHECK(m1.max_allocated_bytes >= m1.allocated_bytes && m1.max_reserved_bytes >= m1.reserved_bytes, "peaks");
    /* a second storage on the first's parameters: only what it does not borrow */
    mg_storage_options o = {.params_from = s};
    if (mg_storage_new_ex(g, p, &o, &t, &err)) {
        TK_CHECK(0, "second storage: %s", err.msg);
        goto out;
    }
    mg_memory_get_stats(&m2);
    size_t params = 4 * (1000 + 300000);
    TK_CHECK(mg_storage_n_borrowed(t) == 2, "%d buffers borrowed", mg_storage_n_borrowed(t));
    TK_CHECK(m2.allocated_bytes - m1.allocated_bytes == plan - params, "second storage %zu bytes, expected %zu",
             m2.allocated_bytes - m1.allocated_bytes, plan - params);
    mg_storage_free(t);
    t = NULL;
    mg_memory_get_stats(&m3);
    TK_CHECK(m3.allocated_bytes == m1.allocated_bytes && m3.reserved_bytes == m1.reserved_bytes &&
                 m3.allocation_count == m1.allocation_count,
             "freeing the second storage gives back what it took");
    TK_CHECK(m3.max_allocated_bytes == m2.max_allocated_bytes && m3.max_allocated_bytes >= m2.allocated_bytes,
             "the peak stays: %zu", m3.max_allocated_bytes);
    mg_storage_free(s);
    s = NULL;
    mg_memory_get_stats(&m4);
    TK_CHECK(m4.allocated_bytes == m0.allocated_bytes && m4.allocation_count == m0.allocation_count, "all given back");
out:
    mg_storage_free(t);
    mg_storage_free(s);
    mg_memplan_free(p);
    mg_graph_free(g);
}

int main(int argc, char **argv) {
    static const tk_case cases[] = {
        {"chain", test_chain},         {"diamond", test_diamond},           {"sizes", test_sizes},
        {"updates", test_updates},     {"update_order", test_update_order}, {"deterministic", test_deterministic},
        {"no_false_order", test_no_false_order}, {"views", test_views},     {"parts", test_parts},
        {"storage_stats", test_storage_stats},
    };
    return tk_main(argc, argv, cases, (int)(sizeof cases / sizeof cases[0]));
}

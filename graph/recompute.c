/* Activation recompute as a graph rewrite (include/mgraph/recompute.h).
 *
 * For one segment (a run of transformer layers, recognised by their nodes' scopes):
 *   F    = forward nodes in the segment's scopes;
 *   kept = tensors F produces that something else than F and the backward reads (the
 *          segment's output, MoE aux losses...): they stay;
 *   need = other tensors F produces that a backward node reads: what the forward
 *          would keep alive until the backward, Korthikanti's "activations";
 *   C    = the nodes of F that produce `need`, closed over their inputs within F.
 * C is cloned in topological order into the backward phase. Inputs the segment gets
 * from outside (its checkpointed input) go through recompute_gate(x, token), token
 * being the latest gradient the backward hands the segment (the gradient of its
 * output): so the clones run when the backward arrives, as Megatron's checkpoint
 * function does, and their buffers come from what the backward has freed. Backward
 * nodes then read the clones. The clones copy the originals' attributes and logical
 * tensors (offsets, RNG keys) and run in the same micro-batch instance, so every
 * kernel, dropout masks included, sees the same inputs and produces the same bits:
 * losses with and without recompute are bitwise equal.
 */
#include "mgraph/recompute.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/graph_internal.h"
#include "ops/op.h"

/* Layer i of scope `scope` (layer_scope's "%d": "h.3" or "h.3.attn" for layer 3), or -1. */
static int layer_of(const char *scope, const char *fmt) {
    const char *d = scope ? strstr(fmt, "%d") : NULL;
    if (!d || strncmp(scope, fmt, (size_t)(d - fmt))) return -1;
    const char *p = scope + (d - fmt), *rest = d + 2;
    if (*p < '0' || *p > '9') return -1;
    char *q;
    long i = strtol(p, &q, 10);
    size_t nr = strlen(rest);
    if (strncmp(q, rest, nr) || (q[nr] != '\0' && q[nr] != '.') || i > 1 << 30) return -1;
    return (int)i;
}

/* Is scope inside one of layers [a, b)? */
static bool in_layers(const char *scope, const mg_recompute_options *o, int a, int b) {
    int i = layer_of(scope, o->layer_scope);
    return i >= a && i < b;
}

typedef struct rewrite {
    mg_graph *g;
    int n_nodes, n_t;       /* before this segment's clones */
    mg_node **ord;          /* own copy of the topo order */
    int *pos;               /* [n_nodes] topo position of node id */
    bool *seg_fwd;          /* [n_nodes] */
    bool *seg_bwd;          /* [n_nodes] */
    bool *clone;            /* [n_nodes] */
    char *state;            /* [n_t] per tensor: 0, 'k' kept, 'n' needed by the backward, 'c' by clones only */
    mg_tensor **map;        /* [n_t] clone of a produced tensor, or gate of an outside input */
    mg_tensor **after;      /* what the gates wait for: after[0] is the incoming gradient */
    int n_after;
} rewrite;

static void rw_free(rewrite *r) {
    free(r->ord);
    free(r->pos);
    free(r->seg_fwd);
    free(r->seg_bwd);
    free(r->clone);
    free(r->state);
    free(r->map);
    free(r->after);
}

static mg_node *clone_node(mg_graph *g, const mg_node *n, mg_tensor *const *in) {
    char nm[512];
    snprintf(nm, sizeof nm, "%s.recompute", n->out[0]->name);
    mg_scope_set(g, NULL); /* the name is absolute */
    mg_graph_set_mb(g, n->mb);
    mg_node *c = mg_node_new(g, n->op, &n->attrs, n->n_in, in, nm);
    if (!c) return NULL;
    char *scope = strdup(n->scope ? n->scope : "");
    if (scope) {
        free(c->scope);
        c->scope = scope;
    }
    c->stage = n->stage;
    c->layer = n->layer; /* (a logical graph's pipeline stages place it with its layer) */
    for (int j = 0; j < c->n_out && j < n->n_out; j++) {
        c->out[j]->logical = n->out[j]->logical; /* RNG keys and offsets: the same bits */
        c->out[j]->place = n->out[j]->place;
        c->out[j]->storage = n->out[j]->storage; /* and the same rounding */
    }
    return c;
}

/* recompute_gate(x, after...) */
static mg_node *gate(mg_graph *g, const rewrite *r, mg_tensor *x, int layer, const char *name) {
    mg_tensor **in = malloc(((size_t)r->n_after + 1) * sizeof *in);
    if (!in) {
        mg_graph_fail(g, MG_ERR_NOMEM, "recompute: out of memory");
        return NULL;
    }
    in[0] = x;
    memcpy(in + 1, r->after, (size_t)r->n_after * sizeof *in);
    mg_node *gn = mg_node_new(g, MG_OP_RECOMPUTE_GATE, NULL, r->n_after + 1, in, name);
    free(in);
    if (gn && x->src) gn->stage = x->src->stage; /* the pipeline chunk of the segment it feeds */
    if (gn) gn->layer = layer;                 /* (with the layer it feeds, in a logical graph) */
    return gn;
}

/* Segment [a, b) of the block of layers ending at `end` (the later layers whose
 * backward the gates wait for are those of the same block). */
static int segment(mg_graph *g, const mg_recompute_options *o, int a, int b, int end, int *n_cloned, mg_error *err) {
    rewrite r = {.g = g};
    mg_node **ord;
    int n;
    int rc = mg_graph_topo(g, &ord, &n, err);
    if (rc) return rc;
    r.n_nodes = g->n_nodes;
    r.n_t = g->n_tensors;
    r.ord = malloc((size_t)n * sizeof *r.ord + 1);
    r.pos = calloc((size_t)r.n_nodes + 1, sizeof *r.pos);
    r.seg_fwd = calloc((size_t)r.n_nodes + 1, 1);
    r.seg_bwd = calloc((size_t)r.n_nodes + 1, 1);
    r.clone = calloc((size_t)r.n_nodes + 1, 1);
    r.state = calloc((size_t)r.n_t + 1, 1);
    r.map = calloc((size_t)r.n_t + 1, sizeof *r.map);
    if (!r.ord || !r.pos || !r.seg_fwd || !r.seg_bwd || !r.clone || !r.state || !r.map) {
        rw_free(&r);
        return mg_error_set(err, MG_ERR_NOMEM, "recompute: out of memory");
    }
    memcpy(r.ord, ord, (size_t)n * sizeof *ord);
    for (int k = 0; k < n; k++) {
        mg_node *nd = r.ord[k];
        r.pos[nd->id] = k;
        bool in = in_layers(nd->scope, o, a, b);
        r.seg_fwd[nd->id] = in && nd->phase == MG_PHASE_FORWARD;
        r.seg_bwd[nd->id] = in && nd->phase == MG_PHASE_BACKWARD;
    }
    /* kept / needed */
    for (int k = 0; k < n; k++) {
        mg_node *nd = r.ord[k];
        for (int j = 0; j < nd->n_in; j++) {
            mg_tensor *t = nd->in[j];
            if (!t->src || !r.seg_fwd[t->src->id] || r.seg_fwd[nd->id]) continue;
            if (nd->phase == MG_PHASE_BACKWARD) {
                if (r.state[t->id] != 'k') r.state[t->id] = 'n';
            } else {
                r.state[t->id] = 'k';
            }
        }
    }
    for (int i = 0; i < r.n_t; i++)
        if (r.state[i] == 'n' && g->tensors[i]->persistent) r.state[i] = 'k';
    /* the clones: producers of needed tensors, closed over their inputs inside F */
    int count = 0;
    for (int k = n - 1; k >= 0; k--) {
        mg_node *nd = r.ord[k];
        if (!r.seg_fwd[nd->id]) continue;
        bool want = false;
        for (int j = 0; j < nd->n_out; j++) want |= r.state[nd->out[j]->id] == 'n' || r.state[nd->out[j]->id] == 'c';
        if (!want) continue;
        if (mg_op_def_get(nd->op)->flags & MG_OPF_COMM) {
            rw_free(&r);
            return mg_error_set(err, MG_ERR_UNSUPPORTED,
                                "--recompute-granularity full: layer scope '%s' runs a collective (%s) in its forward; "
                                "recomputing collectives (tensor parallelism) is not supported yet",
                                nd->scope, mg_op_name(nd->op));
        }
        r.clone[nd->id] = true;
        count++;
        for (int j = 0; j < nd->n_in; j++) {
            mg_tensor *t = nd->in[j];
            if (t->src && r.seg_fwd[t->src->id] && r.state[t->id] != 'k' && r.state[t->id] != 'n') r.state[t->id] = 'c';
        }
    }
    if (!count) {
        rw_free(&r);
        return MG_OK;
    }
    /* What the gates wait for (`after`): the latest gradient a backward node outside the
     * segment hands it (the gradient of its output), and what the later layers'
     * backward leaves behind for no other backward node of theirs (weight gradients):
     * then every buffer the later layers' backward freed is reusable by the clones. */
    mg_tensor *token = NULL;
    for (int k = 0; k < n; k++) {
        mg_node *nd = r.ord[k];
        if (!r.seg_bwd[nd->id]) continue;
        for (int j = 0; j < nd->n_in; j++) {
            mg_tensor *t = nd->in[j];
            if (t->src && t->src->phase == MG_PHASE_BACKWARD && !r.seg_bwd[t->src->id] &&
                (!token || r.pos[t->src->id] > r.pos[token->src->id]))
                token = t;
        }
    }
    if (token && !(r.after = malloc(((size_t)r.n_t + 1) * sizeof *r.after))) {
        rw_free(&r);
        return mg_error_set(err, MG_ERR_NOMEM, "recompute: out of memory");
    }
    if (token) {
        r.after[r.n_after++] = token;
        bool *later = calloc((size_t)r.n_nodes + 1, 1);
        if (!later) {
            rw_free(&r);
            return mg_error_set(err, MG_ERR_NOMEM, "recompute: out of memory");
        }
        for (int k = 0; k < n; k++) {
            mg_node *nd = r.ord[k];
            later[nd->id] = nd->phase == MG_PHASE_BACKWARD && nd->mb >= 0 && in_layers(nd->scope, o, b, end);
        }
        char *used = calloc((size_t)r.n_t + 1, 1);
        if (!used) {
            free(later);
            rw_free(&r);
            return mg_error_set(err, MG_ERR_NOMEM, "recompute: out of memory");
        }
        for (int k = 0; k < n; k++) /* consumed inside the later backward: not left behind */
            if (later[r.ord[k]->id])
                for (int j = 0; j < r.ord[k]->n_in; j++) used[r.ord[k]->in[j]->id] = 1;
        for (int k = 0; k < n; k++) {
            mg_node *nd = r.ord[k];
            if (!later[nd->id]) continue;
            for (int j = 0; j < nd->n_out; j++)
                if (!used[nd->out[j]->id] && nd->out[j] != token) r.after[r.n_after++] = nd->out[j];
        }
        free(used);
        free(later);
    }
    if (!token) {
        rw_free(&r);
        return mg_error_set(err, MG_ERR_INVALID,
                            "recompute: no gradient enters the backward of layers %d..%d (scope '%s')", a, b - 1,
                            o->layer_scope);
    }
    /* clone in topological order */
    mg_phase saved_phase = g->phase;
    int saved_mb = g->mb;
    mg_graph_set_phase(g, MG_PHASE_BACKWARD);
    for (int k = 0; k < n && !rc; k++) {
        mg_node *nd = r.ord[k];
        if (!r.clone[nd->id]) continue;
        mg_tensor *in[MG_MAX_SPLIT * 4];
        bool gated = false;
        if (nd->n_in > (int)(sizeof in / sizeof *in)) {
            rc = mg_error_set(err, MG_ERR_UNSUPPORTED, "recompute: %s has too many inputs", mg_op_name(nd->op));
            break;
        }
        for (int j = 0; j < nd->n_in; j++) {
            mg_tensor *t = nd->in[j];
            in[j] = t;
            if (t->src && r.seg_fwd[t->src->id] && r.map[t->id]) {
                in[j] = r.map[t->id]; /* recomputed */
                gated = true;
            } else if (t->src && !r.seg_fwd[t->src->id]) {
                /* from outside the segment: its checkpointed input */
                if (!r.map[t->id]) {
                    char nm[512];
                    snprintf(nm, sizeof nm, "%s.recompute_gate", t->name);
                    mg_scope_set(g, NULL);
                    mg_graph_set_mb(g, nd->mb);
                    mg_node *gn = gate(g, &r, t, nd->layer, nm);
                    if (!gn) break;
                    gn->out[0]->logical = t->logical;
                    gn->out[0]->place = t->place;
                    r.map[t->id] = gn->out[0];
                }
                in[j] = r.map[t->id];
                gated = true;
            }
        }
        if (!g->error.code && !gated && nd->n_in) {
            /* reads only leaves (weights, inputs): gate one so it waits too */
            char nm[512];
            snprintf(nm, sizeof nm, "%s.recompute_gate", nd->out[0]->name);
            mg_scope_set(g, NULL);
            mg_graph_set_mb(g, nd->mb);
            mg_node *gn = gate(g, &r, in[0], nd->layer, nm);
            if (gn) {
                gn->out[0]->logical = in[0]->logical;
                gn->out[0]->place = in[0]->place;
                in[0] = gn->out[0];
            }
        }
        mg_node *c = g->error.code ? NULL : clone_node(g, nd, in);
        if (!c) {
            rc = mg_error_set(err, g->error.code ? g->error.code : MG_ERR_RUNTIME, "recompute: %s", g->error.msg);
            break;
        }
        for (int j = 0; j < nd->n_out; j++) r.map[nd->out[j]->id] = c->out[j];
    }
    mg_scope_set(g, NULL);
    mg_graph_set_phase(g, saved_phase);
    mg_graph_set_mb(g, saved_mb);
    /* the backward reads the clones */
    for (int k = 0; k < n && !rc; k++) {
        mg_node *nd = r.ord[k];
        if (nd->phase != MG_PHASE_BACKWARD) continue;
        for (int j = 0; j < nd->n_in; j++) {
            mg_tensor *t = nd->in[j];
            if (t->id < r.n_t && r.state[t->id] == 'n' && r.map[t->id]) {
                t->n_uses--;
                nd->in[j] = r.map[t->id];
                nd->in[j]->n_uses++;
            }
        }
    }
    g->order_valid = 0;
    *n_cloned += count;
    rw_free(&r);
    return rc;
}

/* The rewrite, as Megatron's transformer block does it, counts in blocks: a pipeline
 * rank recomputes within each of its model chunks, uniform segments and block's first
 * N layers counting from the chunk's first layer. A graph holds one run of consecutive
 * layers per chunk (all the model's layers when not pipelined): runs[k] = [lo, hi). */
static int layer_runs(mg_graph *g, const mg_recompute_options *o, int (*runs)[2], int *n_runs, mg_error *err) {
    int *stage = malloc(((size_t)o->n_layers + 1) * sizeof *stage);
    if (!stage) return mg_error_set(err, MG_ERR_NOMEM, "recompute: out of memory");
    for (int i = 0; i < o->n_layers; i++) stage[i] = -1;
    for (int k = 0; k < g->n_nodes; k++) {
        int i = layer_of(g->nodes[k]->scope, o->layer_scope);
        if (i >= 0 && i < o->n_layers) stage[i] = o->layer_chunk ? o->layer_chunk[i] : g->nodes[k]->stage;
    }
    *n_runs = 0;
    for (int i = 0; i < o->n_layers; i++) {
        if (stage[i] < 0) continue;
        if (*n_runs && runs[*n_runs - 1][1] == i && stage[i - 1] == stage[i]) runs[*n_runs - 1][1] = i + 1;
        else {
            runs[*n_runs][0] = i;
            runs[(*n_runs)++][1] = i + 1;
        }
    }
    free(stage);
    return MG_OK;
}

int mg_graph_recompute(mg_graph *g, const mg_recompute_options *o, int *n_cloned, mg_error *err) {
    int total = 0;
    if (n_cloned) *n_cloned = 0;
    if (!g || !o) return mg_error_set(err, MG_ERR_INVALID, "mg_graph_recompute: NULL argument");
    if (o->granularity != MG_RECOMPUTE_FULL) return MG_OK; /* selective: see recompute.h */
    if (o->num_layers < 1 || !o->layer_scope || o->n_layers < 1)
        return mg_error_set(err, MG_ERR_INVALID, "--recompute-num-layers must be >= 1 (got %d)", o->num_layers);
    if (o->method == MG_RECOMPUTE_BLOCK && o->num_layers > o->n_layers)
        return mg_error_set(err, MG_ERR_INVALID, "--recompute-method block: --recompute-num-layers %d exceeds the %d layers",
                            o->num_layers, o->n_layers);
    int (*runs)[2] = malloc(((size_t)o->n_layers + 1) * sizeof *runs), n_runs = 0;
    if (!runs) return mg_error_set(err, MG_ERR_NOMEM, "recompute: out of memory");
    int rc = layer_runs(g, o, runs, &n_runs, err);
    /* the last segment first: its clones' ids then come before the earlier segments',
     * so a topological order that breaks ties by id recomputes in backward order */
    for (int r = n_runs - 1; r >= 0 && !rc; r--) {
        int lo = runs[r][0], hi = runs[r][1], n = hi - lo, N = o->num_layers;
        if (o->method == MG_RECOMPUTE_UNIFORM) {
            for (int s = (n + N - 1) / N - 1; s >= 0 && !rc; s--) {
                int a = lo + s * N, b = a + N < hi ? a + N : hi;
                rc = segment(g, o, a, b, hi, &total, err);
            }
        } else {
            for (int l = (N < n ? N : n) - 1; l >= 0 && !rc; l--) rc = segment(g, o, lo + l, lo + l + 1, hi, &total, err);
        }
    }
    free(runs);
    /* (the collectives keep their seq numbers: the graph's order follows them whatever
     * the rewrite did to when their inputs become ready, see mg_graph_topo) */
    if (n_cloned) *n_cloned = total;
    if (!rc) rc = mg_graph_validate(g, err);
    return rc;
}

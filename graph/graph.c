/* Graph lifetime, name scopes, tensors and node creation. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/graph_internal.h"
#include "ops/op.h"

mg_graph *mg_graph_new(void) {
    mg_graph *g = calloc(1, sizeof *g);
    if (g) {
        g->mb = -1;
        g->layer = MG_LAYER_NONE;
    }
    return g;
}

static void node_free(mg_node *n) {
    free(n->in);
    free(n->out);
    free(n->scope);
    free(n);
}

void mg_graph_free(mg_graph *g) {
    if (!g) return;
    for (int i = 0; i < g->n_tensors; i++) {
        free(g->tensors[i]->name);
        free(g->tensors[i]);
    }
    for (int i = 0; i < g->n_nodes; i++) node_free(g->nodes[i]);
    for (int i = 0; i < g->n_scopes; i++) free(g->scopes[i]);
    free(g->tensors);
    free(g->nodes);
    free(g->order);
    mg_name_map_free(&g->names);
    mg_suffix_map_free(&g->suffixes);
    free(g);
}

const mg_error *mg_graph_error(const mg_graph *g) { return &g->error; }

int mg_graph_fail(mg_graph *g, int code, const char *fmt, ...) {
    if (g->error.code == MG_OK) {
        va_list ap;
        va_start(ap, fmt);
        g->error.code = code;
        vsnprintf(g->error.msg, sizeof g->error.msg, fmt, ap);
        va_end(ap);
    }
    return code;
}

int mg_graph_n_tensors(const mg_graph *g) { return g->n_tensors; }
int mg_graph_n_nodes(const mg_graph *g) { return g->n_nodes; }
mg_tensor *mg_graph_tensor(const mg_graph *g, int id) {
    return id >= 0 && id < g->n_tensors ? g->tensors[id] : NULL;
}
mg_node *mg_graph_node(const mg_graph *g, int id) { return id >= 0 && id < g->n_nodes ? g->nodes[id] : NULL; }
mg_tensor *mg_graph_find(const mg_graph *g, const char *name) { return mg_name_map_get(&g->names, name); }

/* ---- scopes ---------------------------------------------------------------- */
void mg_scope_push(mg_graph *g, const char *fmt, ...) {
    char part[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(part, sizeof part, fmt, ap);
    va_end(ap);
    if (g->n_scopes >= MG_SCOPE_MAX) {
        mg_graph_fail(g, MG_ERR_INVALID, "name scopes nested deeper than %d at '%s'", MG_SCOPE_MAX, part);
        return;
    }
    const char *outer = g->n_scopes ? g->scopes[g->n_scopes - 1] : "";
    size_t len = strlen(outer) + strlen(part) + 2;
    char *s = malloc(len);
    if (!s) {
        mg_graph_fail(g, MG_ERR_NOMEM, "out of memory in mg_scope_push");
        return;
    }
    snprintf(s, len, "%s%s%s", outer, *outer ? "." : "", part);
    g->scopes[g->n_scopes++] = s;
}

void mg_scope_pop(mg_graph *g) {
    if (g->n_scopes > 0) free(g->scopes[--g->n_scopes]);
}

const char *mg_scope_current(const mg_graph *g) { return g->n_scopes ? g->scopes[g->n_scopes - 1] : ""; }

void mg_scope_set(mg_graph *g, const char *scope) {
    if (scope && *scope && g->n_scopes == 1 && !strcmp(g->scopes[0], scope)) return; /* already there */
    char *s = scope && *scope ? strdup(scope) : NULL;
    if (scope && *scope && !s) {
        mg_graph_fail(g, MG_ERR_NOMEM, "out of memory in mg_scope_set");
        return;
    }
    while (g->n_scopes) mg_scope_pop(g);
    if (s) g->scopes[g->n_scopes++] = s;
}
void mg_graph_set_phase(mg_graph *g, mg_phase phase) { g->phase = phase; }
void mg_graph_set_mb(mg_graph *g, int mb) { g->mb = mb; }
void mg_graph_set_layer(mg_graph *g, int layer) { g->layer = layer; }
int mg_graph_layer(const mg_graph *g) { return g->layer; }

/* ---- tensors --------------------------------------------------------------- */
static int grow_array(void **arr, int *cap, int need, size_t elem) {
    if (need <= *cap) return MG_OK;
    int nc = *cap ? *cap * 2 : 64;
    while (nc < need) nc *= 2;
    void *p = realloc(*arr, (size_t)nc * elem);
    if (!p) return MG_ERR_NOMEM;
    *arr = p;
    *cap = nc;
    return MG_OK;
}

static char *scoped_name(const mg_graph *g, const char *name) {
    const char *sc = mg_scope_current(g);
    size_t len = strlen(sc) + strlen(name) + 16;
    char *s = malloc(len);
    if (s) snprintf(s, len, "%s%s%s", sc, *sc ? "." : "", name);
    return s;
}

mg_tensor *mg_tensor_new(mg_graph *g, const char *name, bool uniquify, mg_dtype dt, mg_role role, int ndim,
                         const int64_t *shape) {
    if (ndim < 1 || ndim > MG_MAX_DIMS) {
        mg_graph_fail(g, MG_ERR_SHAPE, "tensor '%s': rank %d outside 1..%d", name, ndim, MG_MAX_DIMS);
        return NULL;
    }
    for (int i = 0; i < ndim; i++)
        if (shape[i] < 1) {
            mg_graph_fail(g, MG_ERR_SHAPE, "tensor '%s': dimension %d has size %lld", name, i,
                          (long long)shape[i]);
            return NULL;
        }
    if (grow_array((void **)&g->tensors, &g->cap_tensors, g->n_tensors + 1, sizeof *g->tensors)) {
        mg_graph_fail(g, MG_ERR_NOMEM, "out of memory creating tensor '%s'", name);
        return NULL;
    }
    mg_tensor *t = calloc(1, sizeof *t);
    char *full = scoped_name(g, name);
    if (!t || !full) {
        free(t);
        free(full);
        mg_graph_fail(g, MG_ERR_NOMEM, "out of memory creating tensor '%s'", name);
        return NULL;
    }
    if (mg_name_map_get(&g->names, full)) {
        if (!uniquify) {
            mg_graph_fail(g, MG_ERR_INVALID, "tensor name '%s' is already used", full);
            free(t);
            free(full);
            return NULL;
        }
        size_t len = strlen(full) + 16;
        char *u = malloc(len);
        int *hint = u ? mg_suffix_map_at(&g->suffixes, full) : NULL;
        if (!hint) {
            free(u);
            u = NULL;
        }
        for (int k = hint ? *hint : 1; u; k++) {
            snprintf(u, len, "%s_%d", full, k);
            if (!mg_name_map_get(&g->names, u)) {
                *hint = k + 1;
                break;
            }
        }
        free(full);
        full = u;
        if (!full) {
            free(t);
            mg_graph_fail(g, MG_ERR_NOMEM, "out of memory naming tensor '%s'", name);
            return NULL;
        }
    }
    t->id = g->n_tensors;
    t->name = full;
    t->dtype = dt;
    t->role = role;
    t->ndim = ndim;
    for (int i = 0; i < MG_MAX_DIMS; i++) t->shape[i] = i < ndim ? shape[i] : 1;
    t->logical.key = mg_hash_name(full);
    t->logical.ndim = ndim;
    memcpy(t->logical.shape, t->shape, sizeof t->shape);
    for (int a = 0; a < MG_MESH_AXES; a++) t->place.ax[a] = (mg_sharding){MG_SHARD_FULL, -1, (mg_group)a};
    if (mg_name_map_put(&g->names, t)) {
        free(t->name);
        free(t);
        mg_graph_fail(g, MG_ERR_NOMEM, "out of memory indexing tensor '%s'", name);
        return NULL;
    }
    g->tensors[g->n_tensors++] = t;
    g->order_valid = 0;
    return t;
}

mg_tensor *mg_input(mg_graph *g, const char *name, mg_dtype dt, int ndim, const int64_t *shape) {
    mg_tensor *t = mg_tensor_new(g, name, false, dt, MG_ROLE_INPUT, ndim, shape);
    if (t) t->persistent = true; /* written by the host before each step */
    return t;
}

mg_tensor *mg_param(mg_graph *g, const char *name, int ndim, const int64_t *shape, mg_init init) {
    mg_tensor *t = mg_tensor_new(g, name, false, MG_F32, MG_ROLE_PARAM, ndim, shape);
    if (t) {
        t->init = init;
        t->requires_grad = true;
        t->persistent = true;
    }
    return t;
}

mg_tensor *mg_set_layout(mg_tensor *t, mg_layout layout) {
    if (t && layout >= 0 && layout < MG_LAYOUT_COUNT) t->layout = layout;
    return t;
}

bool mg_layout_is_expert(mg_layout layout) {
    return layout == MG_LAYOUT_EXPERT_COLUMN || layout == MG_LAYOUT_EXPERT_ROW;
}

mg_tensor *mg_state(mg_graph *g, const char *name, mg_dtype dt, int ndim, const int64_t *shape, mg_init init) {
    mg_tensor *t = mg_tensor_new(g, name, false, dt, MG_ROLE_OPT_STATE, ndim, shape);
    if (t) {
        t->init = init;
        t->persistent = true;
    }
    return t;
}

mg_tensor *mg_set_name(mg_graph *g, mg_tensor *t, const char *name) {
    if (!t) return NULL;
    char *full = scoped_name(g, name);
    if (!full) {
        mg_graph_fail(g, MG_ERR_NOMEM, "out of memory renaming '%s'", t->name);
        return NULL;
    }
    if (strcmp(full, t->name) == 0) {
        free(full);
        return t;
    }
    if (mg_name_map_get(&g->names, full)) {
        mg_graph_fail(g, MG_ERR_INVALID, "cannot rename '%s': name '%s' is already used", t->name, full);
        free(full);
        return NULL;
    }
    mg_name_map_del(&g->names, t->name);
    mg_suffix_map_freed(&g->suffixes, t->name); /* its suffix may be given again */
    free(t->name);
    t->name = full;
    t->logical.key = mg_hash_name(full);
    mg_name_map_put(&g->names, t); /* cannot fail: a slot was just freed */
    return t;
}

/* ---- nodes ----------------------------------------------------------------- */
mg_node *mg_node_new(mg_graph *g, mg_op op, const mg_attrs *attrs, int n_in, mg_tensor *const *in, const char *name) {
    if (g->error.code) return NULL; /* building stops at the first error */
    const mg_op_def *def = mg_op_def_get(op);
    if (!def || !def->infer) {
        mg_graph_fail(g, MG_ERR_UNSUPPORTED, "op %s is not implemented", mg_op_name(op));
        return NULL;
    }
    for (int i = 0; i < n_in; i++)
        if (!in[i]) {
            mg_graph_fail(g, MG_ERR_INVALID, "%s: input %d is NULL", def->name, i);
            return NULL;
        }
    if (n_in < def->min_in || (def->max_in >= 0 && n_in > def->max_in)) {
        mg_graph_fail(g, MG_ERR_INVALID, "%s: takes %d..%d inputs, got %d", def->name, def->min_in, def->max_in, n_in);
        return NULL;
    }
    if (grow_array((void **)&g->nodes, &g->cap_nodes, g->n_nodes + 1, sizeof *g->nodes)) {
        mg_graph_fail(g, MG_ERR_NOMEM, "out of memory creating a %s node", def->name);
        return NULL;
    }
    mg_node *n = calloc(1, sizeof *n);
    if (!n || !(n->in = calloc((size_t)(n_in ? n_in : 1), sizeof *n->in))) {
        free(n);
        mg_graph_fail(g, MG_ERR_NOMEM, "out of memory creating a %s node", def->name);
        return NULL;
    }
    n->op = op;
    if (attrs) n->attrs = *attrs;
    n->n_in = n_in;
    if (n_in) memcpy(n->in, in, (size_t)n_in * sizeof *in);
    n->phase = g->phase;
    n->mb = g->mb;
    n->layer = g->layer;

    mg_tensor_desc out[MG_MAX_OUT];
    memset(out, 0, sizeof out);
    int n_out = def->infer(n, out, &g->error);
    if (n_out < 1) {
        if (!g->error.code) mg_graph_fail(g, MG_ERR_SHAPE, "%s: shape rule failed", def->name);
        node_free(n);
        return NULL;
    }
    n->out = calloc((size_t)n_out, sizeof *n->out);
    n->scope = strdup(mg_scope_current(g));
    if (!n->out || !n->scope) {
        node_free(n);
        mg_graph_fail(g, MG_ERR_NOMEM, "out of memory creating a %s node", def->name);
        return NULL;
    }
    mg_role role = MG_ROLE_ACT;
    if (g->phase == MG_PHASE_BACKWARD) role = MG_ROLE_GRAD;
    if (g->phase == MG_PHASE_OPTIMIZER) role = MG_ROLE_OPT_STATE;
    for (int i = 0; i < n_out; i++) {
        char nm[256];
        const char *base = name ? name : def->name;
        if (i == 0) snprintf(nm, sizeof nm, "%s", base);
        else snprintf(nm, sizeof nm, "%s.%d", base, i);
        mg_tensor *t = mg_tensor_new(g, nm, true, out[i].dtype, role, out[i].ndim, out[i].shape);
        if (!t) {
            for (int j = 0; j < n->n_out; j++) n->out[j]->src = NULL; /* they stay, unproduced */
            node_free(n);
            return NULL;
        }
        t->src = n;
        t->src_slot = i;
        t->storage = out[i].storage;
        n->out[i] = t;
        n->n_out = i + 1;
    }
    for (int i = 0; i < n_in; i++) in[i]->n_uses++;
    n->id = g->n_nodes;
    g->nodes[g->n_nodes++] = n;
    g->order_valid = 0;
    return n;
}

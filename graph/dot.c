/* DOT dump: deterministic, clustered by name scope, coloured by role. */
#include "mgraph/dot.h"
#include "mgraph/outfile.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "ops/op.h"

/* Fill colours by role; collectives get their own. */
static const char *role_colour(mg_role r) {
    switch (r) {
    case MG_ROLE_INPUT: return "#d9d9d9";
    case MG_ROLE_PARAM: return "#ffe08a";
    case MG_ROLE_ACT: return "#b7d7f0";
    case MG_ROLE_GRAD: return "#b9e6b0";
    case MG_ROLE_OPT_STATE: return "#d7c4ec";
    case MG_ROLE_LOSS: return "#f4a6a6";
    default: return "white";
    }
}
#define COMM_COLOUR "#ffb347"

/* Quoted labels need quotes and backslashes escaped. */
static void esc(FILE *f, const char *s) {
    for (; *s; s++) {
        if (*s == '"' || *s == '\\') fputc('\\', f);
        fputc(*s, f);
    }
}

static void shape_txt(const mg_tensor *t, char *buf, size_t len) {
    char b[96];
    snprintf(buf, len, "%s %s", mg_dtype_name(t->dtype), mg_shape_str(t, b, sizeof b));
}

/* ---- scope tree: "mb0.h.3.attn" -> mb0 > h.3 > attn (numbers stay with the name
 * before them, so a layer is one cluster) ------------------------------------------ */
typedef struct scope_node {
    char *path;                   /* full scope path */
    struct scope_node **kids;
    int n_kids;
    int *items;                   /* DOT item ids: >= 0 node id, < 0: -(tensor id) - 1 */
    int n_items;
} scope_node;

static scope_node *scope_new(const char *path) {
    scope_node *s = calloc(1, sizeof *s);
    if (s) s->path = strdup(path);
    return s;
}

static void scope_free(scope_node *s) {
    if (!s) return;
    for (int i = 0; i < s->n_kids; i++) scope_free(s->kids[i]);
    free(s->kids);
    free(s->items);
    free(s->path);
    free(s);
}

static int push_int(int **a, int *n, int v) {
    int *p = realloc(*a, (size_t)(*n + 1) * sizeof **a);
    if (!p) return -1;
    p[(*n)++] = v;
    *a = p;
    return 0;
}

/* Length of the next scope component of s (a component followed by ".<digits>" keeps them). */
static size_t component_len(const char *s) {
    const char *d = strchr(s, '.');
    if (!d) return strlen(s);
    const char *q = d + 1;
    while (*q >= '0' && *q <= '9') q++;
    if (q > d + 1 && (*q == '.' || *q == '\0')) return (size_t)(q - s);
    return (size_t)(d - s);
}

static scope_node *scope_find(scope_node *root, const char *scope) {
    scope_node *cur = root;
    size_t off = 0, len = strlen(scope);
    while (off < len) {
        size_t c = component_len(scope + off);
        char path[512];
        snprintf(path, sizeof path, "%.*s", (int)(off + c), scope);
        scope_node *kid = NULL;
        for (int i = 0; i < cur->n_kids; i++)
            if (strcmp(cur->kids[i]->path, path) == 0) kid = cur->kids[i];
        if (!kid) {
            kid = scope_new(path);
            if (!kid) return NULL;
            scope_node **k = realloc(cur->kids, (size_t)(cur->n_kids + 1) * sizeof *k);
            if (!k) {
                scope_free(kid);
                return NULL;
            }
            k[cur->n_kids++] = kid;
            cur->kids = k;
        }
        cur = kid;
        off += c;
        if (scope[off] == '.') off++;
    }
    return cur;
}

/* Scope of a leaf: its name without the last component. */
static void leaf_scope(const mg_tensor *t, char *buf, size_t len) {
    snprintf(buf, len, "%s", t->name);
    char *d = strrchr(buf, '.');
    if (d) *d = '\0';
    else buf[0] = '\0';
}

typedef struct dump_ctx {
    const mg_graph *g;
    FILE *f;
    const bool *shown;
} dump_ctx;

static void emit_node(dump_ctx *c, const mg_node *n) {
    const mg_op_def *d = mg_op_def_get(n->op);
    const mg_tensor *t = n->out[0];
    char sh[128];
    shape_txt(t, sh, sizeof sh);
    FILE *f = c->f;
    if (d->flags & MG_OPF_COMM) {
        const mg_attr_comm *a = &n->attrs.comm;
        /* place in this communicator's order: collectives of the same group issued
         * before it (seq is the rank's order over all groups) */
        long long nth = 0;
        for (int i = 0; i < mg_graph_n_nodes(c->g); i++) {
            const mg_node *m = mg_graph_node(c->g, i);
            if ((mg_op_def_get(m->op)->flags & MG_OPF_COMM) && m->attrs.comm.group == a->group &&
                m->attrs.comm.seq < a->seq)
                nth++;
        }
        double bytes = 0;
        for (int i = 0; i < n->n_in; i++) bytes += (double)mg_numel(n->in[i]) * mg_dtype_size(n->in[i]->dtype);
        fprintf(f, "    n%d [shape=hexagon, style=\"filled,bold\", fillcolor=\"%s\", label=\"%s\\n", n->id,
                COMM_COLOUR, d->name);
        esc(f, t->name);
        fprintf(f, "\\ngroup %s (%d ranks), #%lld in its order\\n%.0f bytes\"];\n", mg_group_name(a->group), a->nranks,
                nth, bytes);
        return;
    }
    fprintf(f, "    n%d [shape=box, style=\"rounded,filled\", fillcolor=\"%s\", label=\"%s\\n", n->id,
            role_colour(t->role), d->name);
    esc(f, t->name);
    fprintf(f, "\\n%s", sh);
    if (n->n_out > 1) fprintf(f, " (+%d outputs)", n->n_out - 1);
    fprintf(f, "\"];\n");
}

static void emit_leaf(dump_ctx *c, const mg_tensor *t) {
    char sh[128];
    shape_txt(t, sh, sizeof sh);
    const char *shape = t->role == MG_ROLE_PARAM ? "box3d" : t->role == MG_ROLE_INPUT ? "invhouse" : "note";
    fprintf(c->f, "    t%d [shape=%s, style=filled, fillcolor=\"%s\", label=\"", t->id, shape, role_colour(t->role));
    esc(c->f, t->name);
    fprintf(c->f, "\\n%s\"];\n", sh);
}

static void emit_scope(dump_ctx *c, const scope_node *s, int depth, int *cluster) {
    char ind[40];
    snprintf(ind, sizeof ind, "%*s", depth * 2, "");
    if (depth > 0) {
        fprintf(c->f, "%ssubgraph cluster_%d {\n%s  label=\"", ind, (*cluster)++, ind);
        esc(c->f, s->path);
        fprintf(c->f, "\"; style=rounded; color=\"#8899aa\";\n");
    }
    for (int i = 0; i < s->n_items; i++) {
        int it = s->items[i];
        if (it >= 0) emit_node(c, mg_graph_node(c->g, it));
        else emit_leaf(c, mg_graph_tensor(c->g, -it - 1));
    }
    for (int i = 0; i < s->n_kids; i++) emit_scope(c, s->kids[i], depth + 1, cluster);
    if (depth > 0) fprintf(c->f, "%s}\n", ind);
}

static void emit_legend(FILE *f) {
    fprintf(f, "  subgraph cluster_legend {\n    label=\"legend\"; style=dashed;\n");
    static const struct { const char *name; mg_role role; } items[] = {
        {"parameter", MG_ROLE_PARAM}, {"input", MG_ROLE_INPUT},     {"activation", MG_ROLE_ACT},
        {"gradient", MG_ROLE_GRAD},   {"optimizer", MG_ROLE_OPT_STATE}, {"loss", MG_ROLE_LOSS},
    };
    for (size_t i = 0; i < sizeof items / sizeof *items; i++)
        fprintf(f, "    legend_%zu [shape=box, style=filled, fillcolor=\"%s\", label=\"%s\"];\n", i,
                role_colour(items[i].role), items[i].name);
    fprintf(f, "    legend_comm [shape=hexagon, style=\"filled,bold\", fillcolor=\"%s\", label=\"collective / "
               "send-recv\"];\n",
            COMM_COLOUR);
    fprintf(f, "  }\n");
}

int mg_graph_dump_dot(const mg_graph *g, FILE *f, const mg_dot_options *opt, mg_error *err) {
    mg_dot_options o = {0};
    if (opt) o = *opt;
    int nn = mg_graph_n_nodes(g), nt = mg_graph_n_tensors(g);
    bool *shown = calloc((size_t)nn + 1, sizeof *shown);
    bool *leaf_used = calloc((size_t)nt + 1, sizeof *leaf_used);
    scope_node *root = scope_new("");
    int rc = MG_OK;
    if (!shown || !leaf_used || !root) {
        rc = mg_error_set(err, MG_ERR_NOMEM, "dot: out of memory");
        goto out;
    }
    for (int i = 0; i < nn; i++) {
        const mg_node *n = mg_graph_node(g, i);
        shown[i] = !((o.hide_backward && n->phase == MG_PHASE_BACKWARD) ||
                     (o.hide_optimizer && n->phase == MG_PHASE_OPTIMIZER));
        if (!shown[i]) continue;
        for (int j = 0; j < n->n_in; j++)
            if (!n->in[j]->src) leaf_used[n->in[j]->id] = true;
        scope_node *s = scope_find(root, n->scope);
        if (!s || push_int(&s->items, &s->n_items, i)) {
            rc = mg_error_set(err, MG_ERR_NOMEM, "dot: out of memory");
            goto out;
        }
    }
    for (int t = 0; t < nt; t++) {
        if (!leaf_used[t]) continue;
        char sc[512];
        leaf_scope(mg_graph_tensor(g, t), sc, sizeof sc);
        scope_node *s = scope_find(root, sc);
        if (!s || push_int(&s->items, &s->n_items, -t - 1)) {
            rc = mg_error_set(err, MG_ERR_NOMEM, "dot: out of memory");
            goto out;
        }
    }
    fprintf(f, "digraph mgraph {\n  rankdir=TB; newrank=true;\n  node [fontname=\"Helvetica\", fontsize=10];\n"
               "  edge [fontname=\"Helvetica\", fontsize=8, color=\"#555555\"];\n");
    if (o.title) {
        fprintf(f, "  label=\"");
        esc(f, o.title);
        fprintf(f, "\"; labelloc=t;\n");
    }
    dump_ctx c = {g, f, shown};
    int cluster = 0;
    emit_scope(&c, root, 0, &cluster);
    for (int i = 0; i < nn; i++) {
        if (!shown[i]) continue;
        const mg_node *n = mg_graph_node(g, i);
        for (int j = 0; j < n->n_in; j++) {
            const mg_tensor *t = n->in[j];
            char b[96];
            if (t->src && !shown[t->src->id]) continue;
            if (t->src) fprintf(f, "  n%d -> n%d", t->src->id, i);
            else fprintf(f, "  t%d -> n%d", t->id, i);
            fprintf(f, " [label=\"%s\"%s];\n", mg_shape_str(t, b, sizeof b),
                    t->role == MG_ROLE_GRAD ? ", style=dashed" : "");
        }
    }
    emit_legend(f);
    fprintf(f, "}\n");
    if (ferror(f)) rc = mg_error_set(err, MG_ERR_IO, "dot: write failed");
out:
    scope_free(root);
    free(shown);
    free(leaf_used);
    return rc;
}

/* Through mg_outfile: a temporary file renamed into place when whole; a failure removes
 * only that temporary file, never the path named (a device, a symlink, an older file). */
int mg_graph_dump_dot_file(const mg_graph *g, const char *path, const mg_dot_options *opt, mg_error *err) {
    mg_outfile *o;
    int rc = mg_outfile_open(path, "DOT file", NULL, &o, err);
    if (rc) return rc;
    errno = 0;
    rc = mg_graph_dump_dot(g, mg_outfile_stream(o), opt, err);
    if (rc == MG_ERR_IO) { /* a write failed: name the file and the reason */
        int e = errno ? errno : EIO;
        mg_error_clear(err);
        rc = mg_error_set(err, MG_ERR_IO, "writing DOT file %s failed: %s", path, strerror(e));
    }
    if (rc) {
        mg_outfile_abort(o);
        return rc;
    }
    return mg_outfile_commit(o, err);
}

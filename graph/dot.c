/* DOT dumps: the full graph (deterministic, clustered by name scope, coloured by
 * role) and its scope-collapsed summary. Files are written through mg_outfile. */
#include "mgraph/dot.h"
#include "mgraph/outfile.h"

#include <errno.h>
#include <fnmatch.h>
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
    snprintf(buf, len, "%s %s", mg_dtype_name(mg_tensor_storage(t)), mg_shape_str(t, b, sizeof b));
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
    if (d->flags & MG_OPF_P2P) { /* a pipeline transfer: its peer stage, tag and micro-batch */
        const mg_attr_comm *a = &n->attrs.comm;
        const mg_tensor *x = n->op == MG_OP_SEND ? n->in[0] : t;
        fprintf(f, "    n%d [shape=cds, style=\"filled,bold\", fillcolor=\"%s\", label=\"%s %s stage %d\\n", n->id,
                COMM_COLOUR, d->name, n->op == MG_OP_SEND ? "to" : "from", a->peer);
        esc(f, x->name);
        fprintf(f, "\\ntag %d, %s, %.0f bytes\"];\n", a->tag, n->mb >= 0 ? "each micro-batch" : "once per step",
                (double)mg_tensor_bytes(x));
        return;
    }
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
        for (int i = 0; i < n->n_in; i++) bytes += (double)mg_tensor_bytes(n->in[i]);
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
static int dump_to_file(const char *path, int (*dump)(const mg_graph *, FILE *, const void *, mg_error *),
                        const mg_graph *g, const void *opt, mg_error *err) {
    mg_outfile *o;
    int rc = mg_outfile_open(path, "DOT file", NULL, &o, err);
    if (rc) return rc;
    errno = 0;
    rc = dump(g, mg_outfile_stream(o), opt, err);
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

static int dump_full(const mg_graph *g, FILE *f, const void *opt, mg_error *err) {
    return mg_graph_dump_dot(g, f, opt, err);
}

int mg_graph_dump_dot_file(const mg_graph *g, const char *path, const mg_dot_options *opt, mg_error *err) {
    return dump_to_file(path, dump_full, g, opt, err);
}

/* ---- summary: one DOT node per (scope, phase) ------------------------------------- */
typedef struct sum_group {
    char scope[256];   /* collapsed scope ("" = top level) */
    mg_phase phase;
    int op;            /* collectives: their op; -1 for compute groups */
    int grp, nranks;   /* collectives: group and its size */
    int n_ops;
    double flops, bytes, comm_bytes;
    double leaf_bytes[MG_ROLE_COUNT]; /* distinct leaves read, by role */
} sum_group;

typedef struct sum_edge { int from, to, tensor; } sum_edge;
typedef struct sum_leaf { int group, tensor; } sum_leaf;

static int cmp_edge(const void *a, const void *b) {
    const sum_edge *x = a, *y = b;
    if (x->from != y->from) return x->from < y->from ? -1 : 1;
    if (x->to != y->to) return x->to < y->to ? -1 : 1;
    return (x->tensor > y->tensor) - (x->tensor < y->tensor);
}

static int cmp_leaf(const void *a, const void *b) {
    const sum_leaf *x = a, *y = b;
    if (x->group != y->group) return x->group < y->group ? -1 : 1;
    return (x->tensor > y->tensor) - (x->tensor < y->tensor);
}

/* The first `depth` components of scope (component_len: "h.3" is one). */
static void collapse_scope(const char *scope, int depth, char *out, size_t len) {
    size_t off = 0, n = strlen(scope);
    for (int d = 0; d < depth && off < n; d++) {
        off += component_len(scope + off);
        if (d + 1 < depth && scope[off] == '.') off++;
    }
    if (off > 0 && scope[off - 1] == '.') off--;
    snprintf(out, len, "%.*s", (int)off, scope);
}

static const char *phase_name(mg_phase p) {
    return p == MG_PHASE_FORWARD ? "forward" : p == MG_PHASE_BACKWARD ? "backward" : "optimizer";
}

static const char *phase_colour(mg_phase p) {
    return p == MG_PHASE_FORWARD ? "#b7d7f0" : p == MG_PHASE_BACKWARD ? "#b9e6b0" : "#d7c4ec";
}

/* "12.3 MiB" */
static void fmt_bytes(double b, char *buf, size_t len) {
    static const char *u[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int k = 0;
    while (b >= 1024 && k < 4) b /= 1024, k++;
    snprintf(buf, len, k ? "%.1f %s" : "%.0f %s", b, u[k]);
}

/* "3.25 GFLOP" */
static void fmt_flops(double f, char *buf, size_t len) {
    static const char *u[] = {"", "k", "M", "G", "T", "P"};
    int k = 0;
    while (f >= 1000 && k < 5) f /= 1000, k++;
    snprintf(buf, len, k ? "%.2f %sFLOP" : "%.0f %sFLOP", f, u[k]);
}

int mg_dot_parse_phases(const char *list, unsigned *mask, mg_error *err) {
    unsigned m = 0;
    const char *p = list ? list : "";
    while (*p) {
        size_t k = strcspn(p, ",");
        if (k == 7 && strncmp(p, "forward", k) == 0) m |= 1u << MG_PHASE_FORWARD;
        else if (k == 8 && strncmp(p, "backward", k) == 0) m |= 1u << MG_PHASE_BACKWARD;
        else if (k == 9 && strncmp(p, "optimizer", k) == 0) m |= 1u << MG_PHASE_OPTIMIZER;
        else
            return mg_error_set(err, MG_ERR_INVALID, "unknown phase '%.*s' (want a comma-separated list of forward, "
                                "backward, optimizer)", (int)k, p);
        p += k;
        if (*p == ',') p++;
    }
    if (!m) return mg_error_set(err, MG_ERR_INVALID, "empty phase list (want forward, backward and/or optimizer)");
    *mask = m;
    return MG_OK;
}

static int find_group(sum_group **gs, int *n, int *cap, const sum_group *key) {
    for (int i = *n - 1; i >= 0; i--) {
        const sum_group *x = &(*gs)[i];
        if (x->phase == key->phase && x->op == key->op && x->grp == key->grp && strcmp(x->scope, key->scope) == 0)
            return i;
    }
    if (*n == *cap) {
        int nc = *cap ? *cap * 2 : 64;
        sum_group *p = realloc(*gs, (size_t)nc * sizeof *p);
        if (!p) return -1;
        *gs = p;
        *cap = nc;
    }
    (*gs)[*n] = *key;
    return (*n)++;
}

static void emit_group(FILE *f, int id, const sum_group *x) {
    char a[32], b[32];
    if (x->op >= 0) {
        fmt_bytes(x->comm_bytes, a, sizeof a);
        fprintf(f, "    g%d [shape=hexagon, style=\"filled,bold\", fillcolor=\"%s\", label=\"%s x%d\\n", id,
                COMM_COLOUR, mg_op_name((mg_op)x->op), x->n_ops);
        esc(f, x->scope[0] ? x->scope : "(top)");
        fprintf(f, ", %s\\ngroup %s (%d ranks)\\n%s in\"];\n", phase_name(x->phase), mg_group_name((mg_group)x->grp),
                x->nranks, a);
        return;
    }
    fmt_flops(x->flops, a, sizeof a);
    fmt_bytes(x->bytes, b, sizeof b);
    fprintf(f, "    g%d [shape=box, style=\"rounded,filled\", fillcolor=\"%s\", label=\"", id, phase_colour(x->phase));
    esc(f, x->scope[0] ? x->scope : "(top)");
    fprintf(f, "\\n%s: %d ops\\n%s, %s moved", phase_name(x->phase), x->n_ops, a, b);
    static const struct { mg_role role; const char *name; } leaves[] = {
        {MG_ROLE_PARAM, "params"}, {MG_ROLE_OPT_STATE, "optimizer state"}, {MG_ROLE_INPUT, "inputs"}};
    for (size_t i = 0; i < sizeof leaves / sizeof *leaves; i++)
        if (x->leaf_bytes[leaves[i].role] > 0) {
            fmt_bytes(x->leaf_bytes[leaves[i].role], a, sizeof a);
            fprintf(f, "\\n%s %s", leaves[i].name, a);
        }
    fprintf(f, "\"];\n");
}

int mg_graph_dump_dot_summary(const mg_graph *g, FILE *f, const mg_dot_summary_options *opt, mg_error *err) {
    mg_dot_summary_options o = {0};
    if (opt) o = *opt;
    if (o.depth <= 0) o.depth = 2;
    if (!o.phases) o.phases = (1u << MG_PHASE_FORWARD) | (1u << MG_PHASE_BACKWARD) | (1u << MG_PHASE_OPTIMIZER);
    int nn = mg_graph_n_nodes(g), ng = 0, cap = 0, rc = MG_OK;
    int *group_of = malloc(((size_t)nn + 1) * sizeof *group_of);
    sum_group *gs = NULL;
    sum_edge *edges = NULL;
    sum_leaf *leaves = NULL;
    size_t n_edges = 0, n_leaves = 0, cap_edges = 0, cap_leaves = 0;
    if (!group_of) return mg_error_set(err, MG_ERR_NOMEM, "dot summary: out of memory");
    int shown_ops = 0;
    double tot_flops = 0;
    for (int i = 0; i < nn && !rc; i++) {
        const mg_node *n = mg_graph_node(g, i);
        group_of[i] = -1;
        if (!(o.phases & (1u << n->phase))) continue;
        if (o.scope_glob && fnmatch(o.scope_glob, n->scope, 0) != 0) continue;
        const mg_op_def *d = mg_op_def_get(n->op);
        sum_group key = {.phase = n->phase, .op = -1, .grp = -1};
        collapse_scope(n->scope, o.depth, key.scope, sizeof key.scope);
        if (d->flags & MG_OPF_COMM) {
            key.op = (int)n->op;
            key.grp = (int)n->attrs.comm.group;
            key.nranks = n->attrs.comm.nranks;
        }
        int k = find_group(&gs, &ng, &cap, &key);
        if (k < 0) {
            rc = mg_error_set(err, MG_ERR_NOMEM, "dot summary: out of memory");
            break;
        }
        group_of[i] = k;
        sum_group *x = &gs[k];
        double fl = 0, by = 0;
        mg_op_cost(n, &fl, &by);
        x->n_ops++;
        x->flops += fl;
        x->bytes += by;
        tot_flops += fl;
        shown_ops++;
        for (int j = 0; j < n->n_in; j++) {
            const mg_tensor *t = n->in[j];
            if (d->flags & MG_OPF_COMM) x->comm_bytes += (double)mg_tensor_bytes(t);
            if (!t->src) {
                if (n_leaves == cap_leaves) {
                    size_t c2 = cap_leaves ? cap_leaves * 2 : 256;
                    sum_leaf *p = realloc(leaves, c2 * sizeof *p);
                    if (!p) {
                        rc = mg_error_set(err, MG_ERR_NOMEM, "dot summary: out of memory");
                        break;
                    }
                    leaves = p;
                    cap_leaves = c2;
                }
                leaves[n_leaves++] = (sum_leaf){k, t->id};
            }
        }
    }
    /* edges between groups: one (from, to, tensor) triple per tensor, then summed */
    for (int i = 0; i < nn && !rc; i++) {
        if (group_of[i] < 0) continue;
        const mg_node *n = mg_graph_node(g, i);
        for (int j = 0; j < n->n_in; j++) {
            const mg_tensor *t = n->in[j];
            if (!t->src || group_of[t->src->id] < 0 || group_of[t->src->id] == group_of[i]) continue;
            if (n_edges == cap_edges) {
                size_t c2 = cap_edges ? cap_edges * 2 : 256;
                sum_edge *p = realloc(edges, c2 * sizeof *p);
                if (!p) {
                    rc = mg_error_set(err, MG_ERR_NOMEM, "dot summary: out of memory");
                    break;
                }
                edges = p;
                cap_edges = c2;
            }
            edges[n_edges++] = (sum_edge){group_of[t->src->id], group_of[i], t->id};
        }
    }
    if (rc) goto out;
    if (n_leaves) qsort(leaves, n_leaves, sizeof *leaves, cmp_leaf);
    for (size_t i = 0; i < n_leaves; i++) {
        if (i && leaves[i].group == leaves[i - 1].group && leaves[i].tensor == leaves[i - 1].tensor) continue;
        const mg_tensor *t = mg_graph_tensor(g, leaves[i].tensor);
        if ((int)t->role >= 0 && t->role < MG_ROLE_COUNT)
            gs[leaves[i].group].leaf_bytes[t->role] += (double)mg_tensor_bytes(t);
    }
    if (n_edges) qsort(edges, n_edges, sizeof *edges, cmp_edge);

    char fl[32];
    fmt_flops(tot_flops, fl, sizeof fl);
    fprintf(f, "digraph mgraph_summary {\n  rankdir=TB; newrank=true;\n  node [fontname=\"Helvetica\", fontsize=10];\n"
               "  edge [fontname=\"Helvetica\", fontsize=8, color=\"#555555\"];\n  label=\"");
    if (o.title) {
        esc(f, o.title);
        fprintf(f, "\\n");
    }
    fprintf(f, "summary: %d of %d ops in %d boxes (scope depth %d", shown_ops, nn, ng, o.depth);
    if (o.scope_glob) {
        fprintf(f, ", scopes ");
        esc(f, o.scope_glob);
    }
    fprintf(f, "), %s\"; labelloc=t;\n", fl);
    /* one cluster per top-level scope component (a layer), in order of appearance */
    bool *done = calloc((size_t)ng + 1, sizeof *done);
    if (!done) {
        rc = mg_error_set(err, MG_ERR_NOMEM, "dot summary: out of memory");
        goto out;
    }
    int cluster = 0;
    for (int i = 0; i < ng; i++) {
        if (done[i]) continue;
        char top[256];
        collapse_scope(gs[i].scope, 1, top, sizeof top);
        bool clustered = o.depth > 1 && top[0];
        if (clustered) {
            fprintf(f, "  subgraph cluster_%d {\n    label=\"", cluster++);
            esc(f, top);
            fprintf(f, "\"; style=rounded; color=\"#8899aa\";\n");
        }
        for (int j = i; j < ng; j++) {
            char tj[256];
            if (done[j]) continue;
            collapse_scope(gs[j].scope, 1, tj, sizeof tj);
            if (j != i && (!clustered || strcmp(tj, top) != 0)) continue;
            done[j] = true;
            emit_group(f, j, &gs[j]);
        }
        if (clustered) fprintf(f, "  }\n");
    }
    free(done);
    for (size_t i = 0; i < n_edges;) {
        size_t j = i;
        double bytes = 0;
        int nt = 0;
        bool all_grad = true;
        for (; j < n_edges && edges[j].from == edges[i].from && edges[j].to == edges[i].to; j++) {
            if (j > i && edges[j].tensor == edges[j - 1].tensor) continue;
            const mg_tensor *t = mg_graph_tensor(g, edges[j].tensor);
            bytes += (double)mg_tensor_bytes(t);
            nt++;
            all_grad = all_grad && t->role == MG_ROLE_GRAD;
        }
        char b[32];
        fmt_bytes(bytes, b, sizeof b);
        /* xlabel, not label: a label becomes a node of the layout and made graphviz 5x slower */
        fprintf(f, "  g%d -> g%d [xlabel=\"%d tensor%s\\n%s\"%s];\n", edges[i].from, edges[i].to, nt, nt == 1 ? "" : "s", b,
                all_grad ? ", style=dashed" : "");
        i = j;
    }
    fprintf(f, "  subgraph cluster_legend {\n    label=\"legend\"; style=dashed;\n");
    for (int p = MG_PHASE_FORWARD; p <= MG_PHASE_OPTIMIZER; p++)
        fprintf(f, "    legend_%d [shape=box, style=\"rounded,filled\", fillcolor=\"%s\", label=\"%s ops of a scope\"];\n", p,
                phase_colour((mg_phase)p), phase_name((mg_phase)p));
    fprintf(f, "    legend_comm [shape=hexagon, style=\"filled,bold\", fillcolor=\"%s\", label=\"collectives of a scope "
               "(count, bytes in)\"];\n    legend_grad [shape=plaintext, label=\"dashed edge: gradients only\"];\n  }\n}\n",
            COMM_COLOUR);
    if (ferror(f)) rc = mg_error_set(err, MG_ERR_IO, "dot summary: write failed");
out:
    free(group_of);
    free(gs);
    free(edges);
    free(leaves);
    return rc;
}

static int dump_summary(const mg_graph *g, FILE *f, const void *opt, mg_error *err) {
    return mg_graph_dump_dot_summary(g, f, opt, err);
}

int mg_graph_dump_dot_summary_file(const mg_graph *g, const char *path, const mg_dot_summary_options *opt,
                                   mg_error *err) {
    return dump_to_file(path, dump_summary, g, opt, err);
}

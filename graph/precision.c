/* Mixed precision as graph rewrites (include/mgraph/precision.h): the model copies of
 * the parameters, and the storage dtype of every tensor. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/graph_internal.h"
#include "mgraph/ops.h"
#include "mgraph/precision.h"
#include "ops/op.h"

mg_precision_options mg_precision_defaults(void) {
    return (mg_precision_options){.params = MG_F32, .main_grads = MG_F32, .exp_avg = MG_F32, .exp_avg_sq = MG_F32};
}

static bool is_float_storage(mg_dtype d) { return d == MG_F32 || d == MG_BF16 || d == MG_F16; }

const char *mg_precision_invalid(const mg_precision_options *o) {
    if (o->params != MG_F32 && o->params != MG_BF16 && o->params != MG_F16) return "the model's precision must be fp32, bf16 or fp16";
    if (!is_float_storage(o->main_grads) || !is_float_storage(o->exp_avg) || !is_float_storage(o->exp_avg_sq))
        return "main gradients and Adam moments must be stored as fp32, bf16 or fp16";
    return NULL;
}

static const char *copy_suffix(mg_dtype d) { return d == MG_F16 ? ".fp16" : ".bf16"; }

const char *mg_param_name(const mg_tensor *t, char *buf, size_t len) {
    if (!t->model_copy) return t->name;
    size_t n = strlen(t->name);
    snprintf(buf, len, "%s", t->name);
    for (int i = 0; i < 2; i++) {
        const char *suf = i ? ".fp16" : ".bf16";
        size_t k = strlen(suf);
        if (n > k && n - k < len && !strcmp(t->name + n - k, suf)) buf[n - k] = '\0';
    }
    return buf;
}

/* ---- model copies ------------------------------------------------------------------------------ */
/* The copy of parameter p that forward and backward read: same identity (key, logical
 * shape, placement, init), narrow storage, no gradient of its own. */
static mg_tensor *model_copy(mg_graph *g, mg_tensor *p, mg_dtype dt) {
    char nm[512];
    snprintf(nm, sizeof nm, "%s%s", p->name, copy_suffix(dt));
    int saved = g->n_scopes;
    g->n_scopes = 0; /* the name is absolute, the parameter's */
    mg_tensor *c = mg_tensor_new(g, nm, false, MG_F32, MG_ROLE_PARAM, p->ndim, p->shape);
    g->n_scopes = saved;
    if (!c) return NULL;
    c->init = p->init;
    c->logical = p->logical; /* the parameter's values: its init stream and checkpoint entry */
    c->place = p->place;
    c->persistent = true;
    c->embedding_or_output = p->embedding_or_output;
    c->layout = p->layout;
    c->no_weight_decay = p->no_weight_decay;
    c->storage = dt;
    c->model_copy = true;
    c->copy_of = p;
    return c;
}

/* Readers in the per-micro-batch part (forward, backward, recompute) read the copy. */
static int redirect_readers(mg_graph *g, mg_tensor *p, mg_tensor *c) {
    int moved = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        mg_node *n = g->nodes[i];
        if (n->mb < 0 || n->phase == MG_PHASE_OPTIMIZER) continue;
        for (int k = 0; k < n->n_in; k++)
            if (n->in[k] == p) {
                n->in[k] = c;
                p->n_uses--;
                c->n_uses++;
                moved++;
            }
    }
    if (moved) g->order_valid = 0;
    return moved;
}

/* After the optimizer step: the updated main parameter cast into the copy. */
static int update_copy(mg_graph *g, mg_tensor *p, mg_tensor *c, mg_dtype dt) {
    mg_node *adamw = NULL;
    for (int i = 0; i < g->n_nodes && !adamw; i++)
        if (g->nodes[i]->op == MG_OP_ADAMW && g->nodes[i]->in[0] == p) adamw = g->nodes[i];
    if (!adamw) return MG_OK; /* an evaluation graph: the copy is the training graph's */
    mg_phase phase = g->phase;
    int mb = g->mb, layer = g->layer, saved = g->n_scopes;
    g->phase = MG_PHASE_OPTIMIZER;
    g->mb = -1;
    g->layer = MG_LAYER_NONE;
    g->n_scopes = 0; /* an absolute output name; the node takes the optimizer's scope below */
    char nm[512];
    snprintf(nm, sizeof nm, "%s.new", c->name);
    mg_attrs at = {.cast = {dt}};
    mg_node *n = mg_node_new(g, MG_OP_CAST, &at, 1, &adamw->out[0], nm);
    g->phase = phase;
    g->mb = mb;
    g->layer = layer;
    g->n_scopes = saved;
    if (!n) return g->error.code;
    free(n->scope);
    n->scope = strdup(adamw->scope);
    n->out[0]->updates = c;
    n->out[0]->role = adamw->out[0]->role;
    return n->scope ? MG_OK : mg_graph_fail(g, MG_ERR_NOMEM, "out of memory");
}

static int add_model_copies(mg_graph *g, mg_dtype dt) {
    int nt = g->n_tensors;
    for (int i = 0; i < nt; i++) {
        mg_tensor *p = g->tensors[i];
        if (p->role != MG_ROLE_PARAM || p->src || !p->requires_grad || p->model_copy || p->dtype != MG_F32) continue;
        bool read = false;
        for (int k = 0; k < g->n_nodes && !read; k++) {
            const mg_node *n = g->nodes[k];
            if (n->mb < 0 || n->phase == MG_PHASE_OPTIMIZER) continue;
            for (int j = 0; j < n->n_in && !read; j++) read = n->in[j] == p;
        }
        if (!read) continue;
        mg_tensor *c = model_copy(g, p, dt);
        if (!c) return g->error.code;
        redirect_readers(g, p, c);
        int rc = update_copy(g, p, c, dt);
        if (rc) return rc;
    }
    return MG_OK;
}

/* ---- storage ------------------------------------------------------------------------------------ */
/* Ops whose output holds its input's bytes moved or summed: stored as the input is. */
static bool moves_or_sums(const mg_node *n) {
    if (n->op == MG_OP_CAST || n->op == MG_OP_ZEROS || n->op == MG_OP_RECV) return false;
    return (mg_op_def_get(n->op)->flags & MG_OPF_STORAGE) || n->op == MG_OP_ALLREDUCE || n->op == MG_OP_REDUCE_SCATTER;
}

static bool is_real(const mg_tensor *t) { return t->dtype == MG_F32; }

/* The storage a moving or summing node gives its outputs: its (first) input's; a
 * concatenation's parts' when they agree, else f32 (widening loses nothing). */
static mg_dtype moved_storage(const mg_node *n) {
    if (n->op != MG_OP_CONCAT) return n->n_in ? mg_tensor_storage(n->in[0]) : MG_F32;
    mg_dtype st = mg_tensor_storage(n->in[0]);
    for (int i = 1; i < n->n_in; i++)
        if (mg_tensor_storage(n->in[i]) != st) return MG_F32;
    return st;
}

static void complete_sweep(mg_node **ord, int n) {
    for (int k = 0; k < n; k++) {
        const mg_node *nd = ord[k];
        for (int j = 0; j < nd->n_out; j++) {
            mg_tensor *t = nd->out[j];
            if (!is_real(t)) continue;
            if (t->updates) t->storage = mg_tensor_storage(t->updates);
            else if (moves_or_sums(nd)) t->storage = moved_storage(nd);
        }
    }
}

void mg_precision_complete(mg_graph *g) {
    mg_node **ord;
    int n;
    if (mg_graph_topo(g, &ord, &n, NULL)) return; /* (mg_memplan_build reports the cycle) */
    complete_sweep(ord, n);
    /* zeros that pad a concatenation (the distributed optimizer's buckets) are stored as
     * its other parts are, so that the whole keeps their storage */
    bool again = false;
    for (int k = 0; k < n; k++) {
        const mg_node *nd = ord[k];
        if (nd->op != MG_OP_CONCAT) continue;
        mg_dtype st = MG_DTYPE_COUNT;
        for (int i = 0; i < nd->n_in; i++) {
            const mg_tensor *x = nd->in[i];
            if (x->src && x->src->op == MG_OP_ZEROS) continue;
            if (st == MG_DTYPE_COUNT) st = mg_tensor_storage(x);
            else if (st != mg_tensor_storage(x)) st = MG_F32;
        }
        for (int i = 0; st != MG_DTYPE_COUNT && i < nd->n_in; i++) {
            mg_tensor *x = nd->in[i];
            if (x->src && x->src->op == MG_OP_ZEROS && is_real(x) && x->n_uses == 1 && x->storage != st) {
                x->storage = st;
                again = true;
            }
        }
    }
    if (again) complete_sweep(ord, n);
}

/* Ops a parameter-gradient term flows through on its way into an accumulator. */
static bool passes_terms(mg_op op) {
    switch (op) {
    case MG_OP_ADD: case MG_OP_SCALE: case MG_OP_RESHAPE: case MG_OP_TRANSPOSE: case MG_OP_SLICE:
    case MG_OP_CONCAT: case MG_OP_SPLIT: case MG_OP_PAD: case MG_OP_SUM_TO: case MG_OP_ALLREDUCE:
    case MG_OP_REDUCE_SCATTER: return true;
    default: return false;
    }
}

/* term[t]: everything t flows into ends in accumulators (a parameter gradient on its way
 * into main_grad, a metric into its step sum): such values are produced in f32 and the
 * accumulator's storage decides their rounding. Reverse topological order. */
static bool *accumulated_terms(mg_graph *g, mg_node **ord, int n) {
    int nt = g->n_tensors;
    bool *term = calloc((size_t)nt + 1, sizeof *term);
    int *uses = calloc((size_t)nt + 1, sizeof *uses), *ok = calloc((size_t)nt + 1, sizeof *ok);
    if (!term || !uses || !ok) {
        free(term);
        free(uses);
        free(ok);
        return NULL;
    }
    for (int k = 0; k < n; k++)
        for (int i = 0; i < ord[k]->n_in; i++) uses[ord[k]->in[i]->id]++;
    for (int k = n - 1; k >= 0; k--) {
        const mg_node *nd = ord[k];
        /* the outputs' verdicts are final: every reader comes later in topo order */
        for (int j = 0; j < nd->n_out; j++) {
            const mg_tensor *t = nd->out[j];
            term[t->id] = uses[t->id] > 0 && ok[t->id] == uses[t->id];
        }
        bool all_out = nd->n_out > 0;
        for (int j = 0; j < nd->n_out; j++) all_out &= term[nd->out[j]->id];
        for (int i = 0; i < nd->n_in; i++) {
            const mg_tensor *x = nd->in[i];
            bool into_acc = nd->op == MG_OP_ACCUMULATE && i == 1 && nd->out[0]->updates;
            if (into_acc || (passes_terms(nd->op) && all_out)) ok[x->id]++;
        }
    }
    free(uses);
    free(ok);
    return term;
}

/* Parameter-gradient terms kept in f32: weight gradients of matrix products (Transformer
 * Engine's fused accumulation into main_grad, Megatron's default) and sums of terms.
 * Other terms (embedding, bias and norm gradients) are Megatron's param.grad, in the
 * model's precision, added into main_grad. */
static bool fused_into_main_grad(mg_op op) {
    return op == MG_OP_MATMUL || op == MG_OP_MOE_GROUPED_MATMUL_DW || op == MG_OP_ADD;
}

static void set_leaf_storage(mg_graph *g, const mg_precision_options *o) {
    for (int i = 0; i < g->n_nodes; i++) {
        mg_node *n = g->nodes[i];
        if (n->op == MG_OP_ADAMW) {
            if (!n->in[2]->src) n->in[2]->storage = o->exp_avg;
            if (!n->in[3]->src) n->in[3]->storage = o->exp_avg_sq;
        }
    }
    for (int i = 0; i < g->n_tensors; i++) {
        mg_tensor *p = g->tensors[i];
        /* main_grad: the accumulator the parameter's gradient sums into */
        if (p->role == MG_ROLE_PARAM && !p->model_copy && p->grad && p->grad->updates)
            p->grad->updates->storage = o->main_grads;
    }
}

static int assign_storage(mg_graph *g, const mg_precision_options *o, mg_error *err) {
    mg_node **ord;
    int n, rc = mg_graph_topo(g, &ord, &n, err);
    if (rc) return rc;
    set_leaf_storage(g, o);
    bool *term = o->params != MG_F32 ? accumulated_terms(g, ord, n) : NULL;
    if (o->params != MG_F32 && !term) return mg_error_set(err, MG_ERR_NOMEM, "precision: out of memory");
    for (int k = 0; k < n; k++) {
        const mg_node *nd = ord[k];
        const mg_op_def *d = mg_op_def_get(nd->op);
        for (int j = 0; j < nd->n_out; j++) {
            mg_tensor *t = nd->out[j];
            if (!is_real(t) || nd->op == MG_OP_CAST) continue;
            if (t->updates) t->storage = mg_tensor_storage(t->updates);
            else if (moves_or_sums(nd)) t->storage = moved_storage(nd);
            else if (!term || nd->mb < 0 || nd->phase == MG_PHASE_OPTIMIZER) t->storage = MG_F32;
            else if (mg_numel(t) == 1 || (d->f32_out >> j & 1u) || (term[t->id] && fused_into_main_grad(nd->op)))
                t->storage = MG_F32;
            else t->storage = o->params;
        }
    }
    free(term);
    return MG_OK;
}

int mg_precision_rewrite(mg_graph *g, const mg_precision_options *o, mg_error *err) {
    const char *bad = mg_precision_invalid(o);
    if (bad) return mg_error_set(err, MG_ERR_INVALID, "precision: %s", bad);
    if (g->error.code) return mg_error_set(err, g->error.code, "%s", g->error.msg);
    if (o->params == MG_F32 && o->main_grads == MG_F32 && o->exp_avg == MG_F32 && o->exp_avg_sq == MG_F32)
        return MG_OK; /* fp32: every storage is already f32 */
    if (o->params != MG_F32 && add_model_copies(g, o->params))
        return mg_error_set(err, g->error.code, "precision: %s", g->error.msg);
    return assign_storage(g, o, err);
}

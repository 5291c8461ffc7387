/* Reverse-mode autodiff as a graph rewrite: each op's gradient rule (ops table)
 * emits ordinary nodes; this pass decides what to differentiate and accumulates. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/graph_internal.h"
#include "mgraph/train.h"
#include "ops/op.h"

/* Scope of the forward node, so backward nodes land in the same DOT cluster. */
static void enter_scope(mg_graph *g, const char *full) {
    if (g->n_scopes < MG_SCOPE_MAX) g->scopes[g->n_scopes++] = strdup(full);
}

/* The gradient seed d(loss)/d(loss) = 1: a persistent tensor initialised to one. */
static mg_tensor *seed_of(mg_graph *g, const mg_tensor *loss) {
    char nm[512];
    snprintf(nm, sizeof nm, "%s.grad_seed", loss->name);
    mg_tensor *s = mg_tensor_new(g, nm, true, MG_F32, MG_ROLE_GRAD, loss->ndim, loss->shape);
    if (s) {
        s->init.kind = MG_INIT_ONES;
        s->persistent = true;
    }
    return s;
}

int mg_graph_backward(mg_graph *g, mg_tensor *loss, mg_error *err) {
    if (g->error.code) return mg_error_set(err, g->error.code, "%s", g->error.msg);
    if (!loss || mg_numel(loss) != 1 || loss->dtype != MG_F32)
        return mg_error_set(err, MG_ERR_INVALID, "backward: the loss must be an f32 scalar");
    mg_node **ord;
    int n_nodes;
    int rc = mg_graph_topo(g, &ord, &n_nodes, err);
    if (rc) return rc;
    int n_t = g->n_tensors;
    /* Copy the order: emitting nodes invalidates the cached one. */
    mg_node **fwd = malloc(((size_t)n_nodes + 1) * sizeof *fwd);
    bool *needs = calloc((size_t)n_t + 1, sizeof *needs);      /* depends on a requires_grad tensor */
    bool *reaches = calloc((size_t)n_t + 1, sizeof *reaches);  /* the loss depends on it */
    mg_tensor **grad = calloc((size_t)n_t + 1, sizeof *grad);  /* accumulated gradient */
    int *grad_mb = malloc(((size_t)n_t + 1) * sizeof *grad_mb);
    if (!fwd || !needs || !reaches || !grad || !grad_mb) {
        rc = mg_error_set(err, MG_ERR_NOMEM, "backward: out of memory");
        goto out;
    }
    memcpy(fwd, ord, (size_t)n_nodes * sizeof *fwd);
    for (int i = 0; i < n_t; i++) needs[i] = g->tensors[i]->requires_grad;
    for (int i = 0; i < n_nodes; i++) {
        mg_node *nd = fwd[i];
        bool any = false;
        for (int j = 0; j < nd->n_in; j++) any |= needs[nd->in[j]->id];
        const mg_op_def *d = mg_op_def_get(nd->op);
        if (any && (d->flags & MG_OPF_NO_GRAD)) any = false; /* optimizer/bwd ops stop gradients */
        for (int j = 0; j < nd->n_out; j++) needs[nd->out[j]->id] |= any;
    }
    reaches[loss->id] = true;
    for (int i = n_nodes - 1; i >= 0; i--) {
        mg_node *nd = fwd[i];
        bool any = false;
        for (int j = 0; j < nd->n_out; j++) any |= reaches[nd->out[j]->id];
        if (any)
            for (int j = 0; j < nd->n_in; j++) reaches[nd->in[j]->id] = true;
    }
    if (!needs[loss->id]) {
        rc = mg_error_set(err, MG_ERR_INVALID, "backward: loss '%s' does not depend on any parameter", loss->name);
        goto out;
    }

    int saved_scopes = g->n_scopes;
    mg_phase saved_phase = g->phase;
    int saved_mb = g->mb, saved_layer = g->layer;
    g->phase = MG_PHASE_BACKWARD;
    g->layer = loss->src ? loss->src->layer : MG_LAYER_NONE;
    grad[loss->id] = seed_of(g, loss);
    grad_mb[loss->id] = loss->src ? loss->src->mb : -1;

    for (int i = n_nodes - 1; i >= 0 && !rc; i--) {
        mg_node *nd = fwd[i];
        const mg_op_def *d = mg_op_def_get(nd->op);
        bool any_out = false, any_need = false;
        for (int j = 0; j < nd->n_out; j++) any_out |= grad[nd->out[j]->id] != NULL;
        bool need[MG_MAX_SPLIT * 4];
        if (nd->n_in > (int)(sizeof need / sizeof *need)) {
            rc = mg_error_set(err, MG_ERR_UNSUPPORTED, "backward: %s has too many inputs", d->name);
            break;
        }
        for (int j = 0; j < nd->n_in; j++) {
            need[j] = needs[nd->in[j]->id] && reaches[nd->in[j]->id];
            any_need |= need[j];
        }
        if (!any_out || !any_need) continue;
        if (!d->grad) {
            rc = mg_error_set(err, MG_ERR_UNSUPPORTED, "backward: op %s (node '%s') has no gradient rule", d->name,
                              nd->out[0]->name);
            break;
        }
        mg_tensor *dout[MG_MAX_OUT] = {0}, *din[MG_MAX_SPLIT * 4] = {0};
        for (int j = 0; j < nd->n_out; j++) dout[j] = grad[nd->out[j]->id];
        while (g->n_scopes > saved_scopes) mg_scope_pop(g);
        enter_scope(g, nd->scope);
        g->mb = nd->mb;
        g->layer = nd->layer;
        rc = d->grad(g, nd, dout, need, din);
        if (!rc && g->error.code) rc = g->error.code;
        if (rc) {
            if (g->error.code) mg_error_set(err, g->error.code, "backward of %s: %s", d->name, g->error.msg);
            else mg_error_set(err, rc, "backward of %s failed", d->name);
            break;
        }
        for (int j = 0; j < nd->n_in && !rc; j++) {
            if (!need[j] || !din[j]) continue;
            const mg_tensor *x = nd->in[j];
            if (!mg_same_shape(din[j], x)) {
                char b1[64], b2[64];
                rc = mg_error_set(err, MG_ERR_SHAPE, "backward of %s: gradient %s for input '%s' of shape %s", d->name,
                                  mg_shape_str(din[j], b1, sizeof b1), x->name, mg_shape_str(x, b2, sizeof b2));
                break;
            }
            mg_tensor *prev = grad[x->id];
            if (!prev) {
                grad[x->id] = din[j];
                grad_mb[x->id] = nd->mb;
            } else {
                /* Accumulation across micro-batches belongs to no micro-batch: a data-
                 * parallel plan turns exactly these adds into its reduction. */
                g->mb = grad_mb[x->id] == nd->mb ? nd->mb : -1;
                /* ... and a parameter's to no layer: one used by two pipeline stages
                 * (tied embeddings) gets one contribution from each, summed over the
                 * stages (Megatron's embedding group) rather than sent across. (An
                 * activation's contributions add up in its earliest consumer's
                 * layer, which is where its gradient is needed.) */
                int layer = g->layer;
                if (!x->src) g->layer = MG_LAYER_NONE;
                grad[x->id] = mg_add(g, prev, din[j]);
                g->layer = layer;
                grad_mb[x->id] = g->mb;
                if (!grad[x->id]) rc = mg_error_set(err, g->error.code, "backward: %s", g->error.msg);
            }
        }
    }
    while (g->n_scopes > saved_scopes) mg_scope_pop(g);
    g->phase = saved_phase;
    g->mb = saved_mb;
    g->layer = saved_layer;
    if (rc) goto out;

    for (int i = 0; i < n_t; i++) {
        mg_tensor *t = g->tensors[i];
        if (!t->requires_grad || !grad[i]) continue;
        mg_tensor *gt = grad[i];
        if (gt->role == MG_ROLE_GRAD && gt->src && !strstr(gt->name, ".grad")) {
            char nm[512];
            snprintf(nm, sizeof nm, "%s.grad", t->name);
            int saved = g->n_scopes;
            g->n_scopes = 0; /* the name is already absolute */
            mg_set_name(g, gt, nm);
            g->n_scopes = saved;
        }
        t->grad = gt;
    }
    if (g->error.code) rc = mg_error_set(err, g->error.code, "backward: %s", g->error.msg);
out:
    free(fwd);
    free(needs);
    free(reaches);
    free(grad);
    free(grad_mb);
    return rc;
}

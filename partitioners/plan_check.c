/* A plan against the graph it is to partition (mg_plan_check_graph): what the
 * partitioner would otherwise take silently, a rule that does nothing or a graph whose
 * whole batch every data-parallel rank would compute, is an error naming the cause. */
#include <fnmatch.h>
#include <stdlib.h>
#include <string.h>

#include "mgraph/plan.h"

/* The rule that applies to parameter t: the last one matching (as tp.c reads them). */
static const mg_shard_rule *rule_of(const mg_plan *p, const mg_tensor *t) {
    for (int k = p->n_rules - 1; k >= 0; k--)
        if (fnmatch(p->rules[k].pattern, t->name, 0) == 0) return &p->rules[k];
    return NULL;
}

static int check_rules(const mg_plan *p, const mg_graph *L, mg_error *err) {
    bool matched[MG_PLAN_MAX_RULES] = {false};
    const char *example = NULL; /* a parameter's name, for the message */
    for (int i = 0; i < mg_graph_n_tensors(L); i++) {
        const mg_tensor *t = mg_graph_tensor(L, i);
        if (t->role != MG_ROLE_PARAM) continue;
        if (!example) example = t->name;
        for (int k = 0; k < p->n_rules; k++)
            if (!matched[k] && fnmatch(p->rules[k].pattern, t->name, 0) == 0) matched[k] = true;
        const mg_shard_rule *r = rule_of(p, t);
        if (!r) continue;
        if (r->dim >= t->ndim) /* (-1: kept whole) */
            return mg_error_set(err, MG_ERR_INVALID, "plan: shard rule '%s %d' applies to %s, which has %d dimension%s (0..%d)",
                                r->pattern, r->dim, t->name, t->ndim, t->ndim == 1 ? "" : "s", t->ndim - 1);
        if (p->tp > 1 && r->dim >= 0 && t->shape[r->dim] % p->tp)
            return mg_error_set(err, MG_ERR_INVALID,
                                "plan: shard rule '%s %d' applies to %s, whose dimension %d (%lld) is not divisible by the "
                                "tensor-parallel size %d",
                                r->pattern, r->dim, t->name, r->dim, (long long)t->shape[r->dim], p->tp);
    }
    /* a rule that matches nothing is a typo or another model's (the model declares its
     * layout: rules only override it) */
    for (int k = 0; k < p->n_rules; k++)
        if (!matched[k])
            return mg_error_set(err, MG_ERR_INVALID,
                                "plan: shard rule '%s %d' matches no parameter of the model%s%s%s", p->rules[k].pattern,
                                p->rules[k].dim, example ? " (its parameters are named like '" : "",
                                example ? example : "", example ? "')" : "");
    return MG_OK;
}

int mg_plan_check_graph(const mg_plan *p, int world, const mg_graph *L, mg_error *err) {
    int rc = check_rules(p, L, err);
    if (rc) return rc;
    for (int i = 0; p->etp > 1 && p->etp != p->tp && p->tp > 1 && i < mg_graph_n_tensors(L); i++)
        if (mg_layout_is_expert(mg_graph_tensor(L, i)->layout))
            return mg_error_set(err, MG_ERR_UNSUPPORTED,
                                "--expert-tensor-parallel-size %d other than 1 or --tensor-model-parallel-size %d is "
                                "supported with --tensor-model-parallel-size 1 only (the expert tensor group is then "
                                "ranks holding other tokens, gathered for the experts)",
                                p->etp, p->tp);
    int inner = p->tp * p->pp * p->cp, dp = inner > 0 ? world / inner : 1, n_layers = 0;
    bool per_mb = false, layers = false;
    for (int i = 0; i < mg_graph_n_nodes(L); i++) {
        const mg_node *n = mg_graph_node(L, i);
        per_mb |= n->mb >= 0;
        layers |= n->mb >= 0 && n->layer >= 0;
        if (n->layer >= n_layers) n_layers = n->layer + 1; /* as partitioners/pp.c counts them */
    }
    if (!per_mb && (dp > 1 || p->pp > 1 || p->distributed_optimizer)) {
        char what[96];
        if (dp > 1) snprintf(what, sizeof what, "under data parallelism (dp %d) every rank would compute the same whole batch", dp);
        else if (p->pp > 1) snprintf(what, sizeof what, "pipeline stages (pp %d) would have no micro-batches to stream", p->pp);
        else snprintf(what, sizeof what, "the distributed optimizer would have no gradients to reduce-scatter");
        return mg_error_set(err, MG_ERR_INVALID,
                            "plan: the graph has no per-micro-batch part (no node with mb >= 0): %s. Build the step with "
                            "mg_train_step_build (mgraph/step.h), which makes one micro-batch's forward and backward that "
                            "part, or mark them with mg_graph_set_mb(g, 0) and their inputs per_microbatch",
                            what);
    }
    if (p->pp > 1 && !layers)
        return mg_error_set(err, MG_ERR_INVALID,
                            "plan: pipeline parallelism (pp %d) places layers on stages, and the model marks none: call "
                            "mg_graph_set_layer(g, i) before building layer i (MG_LAYER_PRE for the embedding, "
                            "MG_LAYER_POST for the head and loss)",
                            p->pp);
    if (p->pp > 1) { /* the layers split over the stages as the plan says (or its rule is named), found
                      * here by every rank alike rather than while partitioning */
        int *vstage = malloc(((size_t)n_layers + 1) * sizeof *vstage);
        if (!vstage) return mg_error_set(err, MG_ERR_NOMEM, "plan: out of memory");
        rc = mg_plan_layer_vstages(p, n_layers, vstage, NULL, NULL, err);
        free(vstage);
    }
    return rc;
}

int mg_plan_add_rule(mg_plan *p, const char *pattern, int dim, mg_error *err) {
    if (!pattern || !*pattern || strlen(pattern) >= sizeof p->rules[0].pattern)
        return mg_error_set(err, MG_ERR_INVALID, "plan: a shard rule needs a name pattern of 1..%zu characters",
                            sizeof p->rules[0].pattern - 1);
    if (dim < -1 || dim >= MG_MAX_DIMS)
        return mg_error_set(err, MG_ERR_INVALID, "plan: shard rule '%s %d': the dimension must be in 0..%d (or -1: whole)",
                            pattern, dim, MG_MAX_DIMS - 1);
    if (p->n_rules >= MG_PLAN_MAX_RULES)
        return mg_error_set(err, MG_ERR_INVALID, "plan: more than %d shard rules", MG_PLAN_MAX_RULES);
    mg_shard_rule *r = &p->rules[p->n_rules++];
    memset(r, 0, sizeof *r);
    strcpy(r->pattern, pattern);
    r->dim = dim;
    return MG_OK;
}

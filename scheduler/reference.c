/* Reference executor: the step's nodes in topological order on the calling thread.
 *
 * The ground truth for the StarPU engine: same kernels, same storage, no concurrency,
 * and, as in StarPU workers, one BLAS thread per kernel (blas_threads.h). The
 * per-micro-batch part (nodes with mb >= 0) runs once per instance of the step's
 * micro-batch schedule, then the once-per-step part (mb < 0) runs (mg_exec_info).
 */
#include <stdlib.h>

#include "mgraph/engine.h"
#include "ops/op.h"
#include "scheduler/blas_threads.h"

static int run_node(const mg_node *nd, mg_storage *s, const mg_exec_info *info, int mb, void **ptrs, mg_error *err) {
    const mg_op_def *def = mg_op_def_get(nd->op);
    if (!def || !def->cpu)
        return mg_error_set(err, MG_ERR_UNSUPPORTED, "op %s has no CPU kernel (node %d)", mg_op_name(nd->op), nd->id);
    for (int i = 0; i < nd->n_in; i++) ptrs[i] = mg_storage_data_mb(s, nd->in[i], mb);
    for (int o = 0; o < nd->n_out; o++) ptrs[nd->n_in + o] = mg_storage_data_mb(s, nd->out[o], mb);
    for (int i = 0; i < nd->n_in + nd->n_out; i++)
        if (!ptrs[i])
            return mg_error_set(err, MG_ERR_INVALID, "node %d (%s): no storage for micro-batch instance %d", nd->id,
                                mg_op_name(nd->op), mb);
    mg_exec_info k = mg_exec_instance(info, mb);
    mg_kernel_args a = {.node = nd, .in = ptrs, .out = ptrs + nd->n_in, .info = &k};
    int rc = def->cpu(&a, err);
    if (rc && err && !err->code) mg_error_set(err, rc, "op %s (node %d) failed", mg_op_name(nd->op), nd->id);
    return rc;
}

int mg_exec_reference(mg_graph *g, mg_storage *s, const mg_exec_info *info, mg_error *err) {
    if (!g || !s || !info) return mg_error_set(err, MG_ERR_INVALID, "mg_exec_reference: NULL argument");
    mg_node **ord;
    int n, rc = mg_graph_topo(g, &ord, &n, err);
    if (rc) return rc;
    int n_micro = mg_exec_n_micro(info);
    if (n_micro > mg_storage_n_micro(s))
        return mg_error_set(err, MG_ERR_INVALID, "step of %d micro-batches, storage holds inputs for %d", n_micro,
                            mg_storage_n_micro(s));
    int max_ptrs = 1;
    for (int k = 0; k < n; k++)
        if (ord[k]->n_in + ord[k]->n_out > max_ptrs) max_ptrs = ord[k]->n_in + ord[k]->n_out;
    void **ptrs = malloc((size_t)max_ptrs * sizeof *ptrs);
    if (!ptrs) return mg_error_set(err, MG_ERR_NOMEM, "out of memory running the graph");
    mg_blas_single_acquire();
    for (int mb = 0; mb < n_micro && !rc; mb++)
        for (int k = 0; k < n && !rc; k++)
            if (ord[k]->mb >= 0) rc = run_node(ord[k], s, info, mb, ptrs, err);
    for (int k = 0; k < n && !rc; k++)
        if (ord[k]->mb < 0) rc = run_node(ord[k], s, info, -1, ptrs, err);
    mg_blas_single_release();
    free(ptrs);
    return rc;
}

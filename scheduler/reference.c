/* Reference executor: every node in topological order on the calling thread.
 *
 * The ground truth for the StarPU engine: same kernels, same storage, no concurrency,
 * and, as in StarPU workers, one BLAS thread per kernel (blas_threads.h).
 */
#include <stdlib.h>

#include "mgraph/engine.h"
#include "ops/op.h"
#include "scheduler/blas_threads.h"

int mg_exec_reference(mg_graph *g, mg_storage *s, const mg_exec_info *info, mg_error *err) {
    if (!g || !s || !info) return mg_error_set(err, MG_ERR_INVALID, "mg_exec_reference: NULL argument");
    mg_node **ord;
    int n, rc = mg_graph_topo(g, &ord, &n, err);
    if (rc) return rc;
    int max_ptrs = 1;
    for (int k = 0; k < n; k++)
        if (ord[k]->n_in + ord[k]->n_out > max_ptrs) max_ptrs = ord[k]->n_in + ord[k]->n_out;
    void **ptrs = malloc((size_t)max_ptrs * sizeof *ptrs);
    if (!ptrs) return mg_error_set(err, MG_ERR_NOMEM, "out of memory running the graph");
    mg_blas_single_acquire();
    for (int k = 0; k < n && !rc; k++) {
        const mg_node *nd = ord[k];
        const mg_op_def *def = mg_op_def_get(nd->op);
        if (!def || !def->cpu) {
            rc = mg_error_set(err, MG_ERR_UNSUPPORTED, "op %s has no CPU kernel (node %d)", mg_op_name(nd->op), nd->id);
            break;
        }
        for (int i = 0; i < nd->n_in; i++) ptrs[i] = mg_storage_data(s, nd->in[i]);
        for (int o = 0; o < nd->n_out; o++) ptrs[nd->n_in + o] = mg_storage_data(s, nd->out[o]);
        mg_kernel_args a = {.node = nd, .in = ptrs, .out = ptrs + nd->n_in, .info = info};
        rc = def->cpu(&a, err);
        if (rc && err && !err->code) mg_error_set(err, rc, "op %s (node %d) failed", mg_op_name(nd->op), nd->id);
    }
    mg_blas_single_release();
    free(ptrs);
    return rc;
}

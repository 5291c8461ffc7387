/* The op table: one entry per op kind, generated from include/mgraph/op_list.h.
 * A CUDA build returns copies of the defs with the cuda slot filled from the CUDA
 * backend's kernel table (ops/cuda/registry.c); the defs themselves stay untouched. */
#include "ops/op.h"

#ifdef MG_CUDA
#include <pthread.h>

#include "ops/cuda/cuda_common.h"
#endif

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static const mg_op_def *const table[MG_OP_COUNT] = {
#define MG_OP(e, s) [MG_OP_##e] = &mg_opdef_##e,
#include "mgraph/op_list.h"
#undef MG_OP
};

#ifdef MG_CUDA
static mg_op_def with_cuda[MG_OP_COUNT];
static pthread_once_t with_cuda_once = PTHREAD_ONCE_INIT;

static void fill_cuda_slots(void) {
    for (int op = 0; op < MG_OP_COUNT; op++) {
        with_cuda[op] = *table[op];
        if (mg_cuda_kernels[op]) with_cuda[op].cuda = mg_cuda_kernels[op];
    }
}

const mg_op_def *mg_op_def_get(mg_op op) {
    if (op < 0 || op >= MG_OP_COUNT) return NULL;
    pthread_once(&with_cuda_once, fill_cuda_slots);
    return &with_cuda[op];
}
#else
const mg_op_def *mg_op_def_get(mg_op op) {
    return (op >= 0 && op < MG_OP_COUNT) ? table[op] : NULL;
}
#endif

void mg_op_cost(const mg_node *n, double *flops, double *bytes) {
    const mg_op_def *d = mg_op_def_get(n->op);
    *flops = 0;
    *bytes = 0;
    if (d && d->cost) {
        d->cost(n, flops, bytes);
        return;
    }
    for (int i = 0; i < n->n_in; i++) *bytes += (double)mg_numel(n->in[i]) * mg_dtype_size(n->in[i]->dtype);
    for (int i = 0; i < n->n_out; i++) *bytes += (double)mg_numel(n->out[i]) * mg_dtype_size(n->out[i]->dtype);
}

const char *mg_dims_str(int ndim, const int64_t *shape, char *buf, size_t len) {
    size_t o = 0;
    o += (size_t)snprintf(buf + o, len - o, "[");
    for (int i = 0; i < ndim && o < len; i++)
        o += (size_t)snprintf(buf + o, len - o, i ? ", %lld" : "%lld", (long long)shape[i]);
    if (o < len) snprintf(buf + o, len - o, "]");
    return buf;
}

int mg_shape_error(mg_error *err, const mg_node *n, const char *fmt, ...) {
    char msg[256], shapes[256] = "", b[64];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    size_t o = 0;
    for (int i = 0; i < n->n_in && o < sizeof shapes; i++)
        o += (size_t)snprintf(shapes + o, sizeof shapes - o, "%sin%d=%s", i ? ", " : "", i,
                              mg_dims_str(n->in[i]->ndim, n->in[i]->shape, b, sizeof b));
    return mg_error_set(err, MG_ERR_SHAPE, "%s: %s (%s)", mg_op_name(n->op), msg, shapes);
}

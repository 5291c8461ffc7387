/* The op table: one entry per op kind, generated from include/mgraph/op_list.h.
 *
 * What mg_op_def_get returns are copies of the defs whose kernel slots convert narrow
 * storage: a node whose tensors are stored in bf16 or f16 (mixed precision,
 * graph/precision.c) runs its op's f32 kernel on f32 copies of its inputs, and its
 * outputs are rounded into their storage afterwards. Ops marked MG_OPF_STORAGE (byte
 * movers, casts) handle storage themselves. A node whose tensors are all f32 calls the
 * kernel directly: fp32 runs are untouched. A CUDA build also fills the cuda slots from
 * the CUDA backend's kernel table (ops/cuda/registry.c) and its converting wrapper. The
 * defs themselves stay untouched. */
#include "ops/op.h"

#include <pthread.h>

#ifdef MG_CUDA
#include "ops/cuda/cuda_common.h"
#endif

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/convert.h"

static const mg_op_def *const table[MG_OP_COUNT] = {
#define MG_OP(e, s) [MG_OP_##e] = &mg_opdef_##e,
#include "mgraph/op_list.h"
#undef MG_OP
};

/* ---- narrow storage around f32 kernels ------------------------------------------------------ */
bool mg_node_needs_convert(const mg_node *n) {
    if (mg_op_def_get(n->op)->flags & MG_OPF_STORAGE) return false;
    for (int i = 0; i < n->n_in; i++)
        if (mg_tensor_storage(n->in[i]) != n->in[i]->dtype) return true;
    for (int i = 0; i < n->n_out; i++)
        if (mg_tensor_storage(n->out[i]) != n->out[i]->dtype) return true;
    return false;
}

/* One growing scratch area per thread (StarPU's workers, the communication thread, the
 * reference executor's caller), freed when the thread ends. */
typedef struct scratch {
    void *p;
    size_t cap;
} scratch;
static pthread_key_t g_scratch_key;
static pthread_once_t g_scratch_once = PTHREAD_ONCE_INIT;
static void scratch_free(void *v) {
    scratch *s = v;
    if (s) free(s->p);
    free(s);
}
static void scratch_key(void) { pthread_key_create(&g_scratch_key, scratch_free); }

static void *scratch_get(size_t bytes) {
    pthread_once(&g_scratch_once, scratch_key);
    scratch *s = pthread_getspecific(g_scratch_key);
    if (!s) {
        if (!(s = calloc(1, sizeof *s))) return NULL;
        pthread_setspecific(g_scratch_key, s);
    }
    if (bytes > s->cap) {
        free(s->p);
        s->cap = 0;
        if (!(s->p = aligned_alloc(64, (bytes + 63) / 64 * 64))) return NULL;
        s->cap = bytes;
    }
    return s->p;
}

static size_t f32_bytes(const mg_tensor *t) { return ((size_t)mg_numel(t) * sizeof(float) + 63) / 64 * 64; }

/* The CPU kernel of every op that is not MG_OPF_STORAGE: the op's f32 kernel between
 * conversions. An output that is an input's buffer (an in-place update) gets that
 * input's f32 copy, so the kernel sees the aliasing it was written for. */
static int cpu_converting(const mg_kernel_args *a, mg_error *err) {
    const mg_node *n = a->node;
    mg_kernel_fn k = table[n->op]->cpu;
    if (!mg_node_needs_convert(n)) return k(a, err);
    int np = n->n_in + n->n_out;
    size_t total = 0;
    for (int i = 0; i < np; i++) {
        const mg_tensor *t = i < n->n_in ? n->in[i] : n->out[i - n->n_in];
        if (mg_tensor_storage(t) != t->dtype) total += f32_bytes(t);
    }
    void **ptr = malloc((size_t)np * sizeof *ptr);
    char *s = ptr ? scratch_get(total) : NULL;
    if (!s) {
        free(ptr);
        return mg_error_set(err, MG_ERR_NOMEM, "%s: out of memory converting %zu bytes of narrow storage",
                            mg_op_name(n->op), total);
    }
    for (int i = 0; i < n->n_in; i++) {
        const mg_tensor *t = n->in[i];
        ptr[i] = a->in[i];
        if (mg_tensor_storage(t) == t->dtype) continue;
        ptr[i] = s;
        s += f32_bytes(t);
        mg_convert(ptr[i], MG_F32, a->in[i], mg_tensor_storage(t), mg_numel(t));
    }
    for (int o = 0; o < n->n_out; o++) {
        const mg_tensor *t = n->out[o];
        void **p = &ptr[n->n_in + o];
        *p = a->out[o];
        if (mg_tensor_storage(t) == t->dtype) continue;
        for (int i = 0; i < n->n_in; i++)
            if (a->in[i] == a->out[o] && mg_tensor_storage(n->in[i]) == mg_tensor_storage(t)) *p = ptr[i];
        if (*p == a->out[o]) {
            *p = s;
            s += f32_bytes(t);
        }
    }
    mg_kernel_args b = {.node = n, .in = ptr, .out = ptr + n->n_in, .info = a->info};
    int rc = k(&b, err);
    for (int o = 0; o < n->n_out && !rc; o++) {
        const mg_tensor *t = n->out[o];
        if (mg_tensor_storage(t) != t->dtype) mg_convert(a->out[o], mg_tensor_storage(t), ptr[n->n_in + o], MG_F32, mg_numel(t));
    }
    free(ptr);
    return rc;
}

static mg_op_def g_defs[MG_OP_COUNT];
static pthread_once_t g_defs_once = PTHREAD_ONCE_INIT;

static void fill_defs(void) {
    for (int op = 0; op < MG_OP_COUNT; op++) {
        g_defs[op] = *table[op];
        if (table[op]->cpu && !(table[op]->flags & MG_OPF_STORAGE)) g_defs[op].cpu = cpu_converting;
#ifdef MG_CUDA
        if (mg_cuda_kernels[op])
            g_defs[op].cuda = (table[op]->flags & MG_OPF_STORAGE) ? mg_cuda_kernels[op] : mg_cuda_converting;
#endif
    }
}

const mg_op_def *mg_op_def_get(mg_op op) {
    if (op < 0 || op >= MG_OP_COUNT) return NULL;
    pthread_once(&g_defs_once, fill_defs);
    return &g_defs[op];
}

void mg_op_cost(const mg_node *n, double *flops, double *bytes) {
    const mg_op_def *d = mg_op_def_get(n->op);
    *flops = 0;
    *bytes = 0;
    if (d && d->cost) {
        d->cost(n, flops, bytes);
        return;
    }
    for (int i = 0; i < n->n_in; i++) *bytes += (double)mg_tensor_bytes(n->in[i]);
    for (int i = 0; i < n->n_out; i++) *bytes += (double)mg_tensor_bytes(n->out[i]);
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

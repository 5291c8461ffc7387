/* Host storage for a graph: one 64-byte-aligned allocation per memory-plan buffer.
 *
 * The plan decides sharing; storage only materialises it, so every executor
 * (reference, StarPU, later CUDA device copies) sees the same bytes for a tensor.
 */
#include <stdlib.h>
#include <string.h>

#include "mgraph/engine.h"
#include "mgraph/rng.h"
#include "scheduler/storage_internal.h"

struct mg_storage {
    mg_graph *g;
    const mg_memplan *plan;
    int n_buffers;
    void **data;      /* [n_buffers] */
};

enum { MG_STORAGE_ALIGN = 64 };

void mg_storage_free(mg_storage *s) {
    if (!s) return;
    for (int b = 0; b < s->n_buffers; b++) free(s->data[b]);
    free(s->data);
    free(s);
}

int mg_storage_new(mg_graph *g, const mg_memplan *plan, mg_storage **out, mg_error *err) {
    *out = NULL;
    if (!g || !plan) return mg_error_set(err, MG_ERR_INVALID, "mg_storage_new: NULL graph or plan");
    if (plan->n_tensors != mg_graph_n_tensors(g))
        return mg_error_set(err, MG_ERR_INVALID, "mg_storage_new: plan is for %d tensors, graph has %d",
                            plan->n_tensors, mg_graph_n_tensors(g));
    mg_storage *s = calloc(1, sizeof *s);
    if (!s || !(s->data = calloc((size_t)plan->n_buffers + 1, sizeof *s->data))) {
        free(s);
        return mg_error_set(err, MG_ERR_NOMEM, "out of memory allocating storage");
    }
    s->g = g;
    s->plan = plan;
    for (int b = 0; b < plan->n_buffers; b++) {
        /* aligned_alloc wants a multiple of the alignment; a zero-size buffer still gets
         * one line so that every buffer has a distinct, non-NULL address. */
        size_t bytes = (plan->buffer_bytes[b] + MG_STORAGE_ALIGN - 1) / MG_STORAGE_ALIGN * MG_STORAGE_ALIGN;
        if (!bytes) bytes = MG_STORAGE_ALIGN;
        s->data[b] = aligned_alloc(MG_STORAGE_ALIGN, bytes);
        if (!s->data[b]) {
            mg_storage_free(s);
            return mg_error_set(err, MG_ERR_NOMEM, "out of memory allocating buffer %d (%zu bytes)", b, bytes);
        }
        s->n_buffers = b + 1;
        /* Zeroed so that runs are reproducible even when a kernel reads padding or a
         * host forgets to fill an input. */
        memset(s->data[b], 0, bytes);
    }
    *out = s;
    return MG_OK;
}

void *mg_storage_data(const mg_storage *s, const mg_tensor *t) {
    if (!s || !t || t->id < 0 || t->id >= s->plan->n_tensors) return NULL;
    return s->data[s->plan->buffer_of[t->id]];
}

int mg_storage_buffer_of(const mg_storage *s, const mg_tensor *t) {
    if (!s || !t || t->id < 0 || t->id >= s->plan->n_tensors) return -1;
    return s->plan->buffer_of[t->id];
}

int mg_storage_n_buffers(const mg_storage *s) { return s ? s->n_buffers : 0; }

void *mg_storage_buffer(const mg_storage *s, int buffer) {
    return s && buffer >= 0 && buffer < s->n_buffers ? s->data[buffer] : NULL;
}

size_t mg_storage_buffer_bytes(const mg_storage *s, int buffer) {
    return s && buffer >= 0 && buffer < s->n_buffers ? s->plan->buffer_bytes[buffer] : 0;
}

int mg_storage_init(mg_storage *s, uint64_t seed, mg_error *err) {
    if (!s) return mg_error_set(err, MG_ERR_INVALID, "mg_storage_init: NULL storage");
    for (int i = 0; i < mg_graph_n_tensors(s->g); i++) {
        const mg_tensor *t = mg_graph_tensor(s->g, i);
        if (t->src || t->updates) continue; /* produced by the graph: nothing to initialise */
        void *dst = mg_storage_data(s, t);
        size_t bytes = (size_t)mg_numel(t) * mg_dtype_size(t->dtype);
        if (t->init.kind == MG_INIT_ONES || t->init.kind == MG_INIT_NORMAL) {
            if (t->dtype != MG_F32)
                return mg_error_set(err, MG_ERR_UNSUPPORTED, "tensor '%s': random/ones init of %s tensors is not supported",
                                    t->name, mg_dtype_name(t->dtype));
            mg_rng_init_tensor(t, seed, dst);
        } else {
            /* zeros, no init spec, inputs (i32 ids and targets): all zeros */
            memset(dst, 0, bytes);
        }
    }
    return MG_OK;
}

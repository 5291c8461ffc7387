/* Host storage for a graph: 64-byte-aligned allocations for the memory plan's buffers,
 * replicated per micro-batch instance (MICROBATCH) or per slot (SLOT) as the schedule
 * needs them (include/mgraph/memplan.h).
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
    int n_micro, n_slots;
    int *first;       /* [plan buffers]: index of the buffer's first copy in data */
    int n_data;
    void **data;      /* [n_data]: every copy of every plan buffer */
    size_t *bytes;    /* [n_data] */
    /* Set by an engine whose buffers may have newer copies on a device: called before
     * the host touches copy i (mg_storage_data[_mb] / mg_storage_buffer). */
    void (*host_access)(void *ctx, int buffer);
    void *host_ctx;
    const mg_storage *lender;  /* params_from */
    int *borrowed;    /* [n_data]: the lender's copy index this copy is, or -1 (owned) */
};

void mg_storage_set_host_access(mg_storage *s, void (*fn)(void *ctx, int buffer), void *ctx) {
    if (!s) return;
    s->host_access = fn;
    s->host_ctx = ctx;
}

enum { MG_STORAGE_ALIGN = 64 };

void mg_storage_free(mg_storage *s) {
    if (!s) return;
    for (int b = 0; b < s->n_data; b++)
        if (!s->borrowed || s->borrowed[b] < 0) free(s->data[b]);
    free(s->borrowed);
    free(s->data);
    free(s->bytes);
    free(s->first);
    free(s);
}

/* The lender's copy holding the same parameter block as tensor t, or -1. */
static int lender_copy(const mg_storage *from, const mg_tensor *t) {
    const mg_graph *g = from->g;
    for (int i = 0; i < mg_graph_n_tensors(g); i++) {
        const mg_tensor *u = mg_graph_tensor(g, i);
        if (u->role != MG_ROLE_PARAM || u->src || u->logical.key != t->logical.key || u->dtype != t->dtype ||
            u->ndim != t->ndim || u->logical.ndim != t->logical.ndim)
            continue;
        bool same = true;
        for (int d = 0; d < t->ndim && same; d++) same = u->shape[d] == t->shape[d];
        for (int d = 0; d < t->logical.ndim && same; d++)
            same = u->logical.shape[d] == t->logical.shape[d] && u->logical.offset[d] == t->logical.offset[d];
        int b = same ? from->plan->buffer_of[u->id] : -1;
        if (b >= 0 && from->plan->buffer_kind[b] == MG_BUF_PERSISTENT) return from->first[b];
    }
    return -1;
}

static int copies_of(const mg_storage *s, int b) {
    switch (s->plan->buffer_kind[b]) {
    case MG_BUF_MICROBATCH: return s->n_micro;
    case MG_BUF_SLOT: return s->n_slots;
    default: return 1;
    }
}

int mg_storage_new_ex(mg_graph *g, const mg_memplan *plan, const mg_storage_options *opt, mg_storage **out,
                      mg_error *err) {
    *out = NULL;
    if (!g || !plan) return mg_error_set(err, MG_ERR_INVALID, "mg_storage_new: NULL graph or plan");
    if (plan->n_tensors != mg_graph_n_tensors(g))
        return mg_error_set(err, MG_ERR_INVALID, "mg_storage_new: plan is for %d tensors, graph has %d",
                            plan->n_tensors, mg_graph_n_tensors(g));
    int n_micro = opt && opt->n_micro > 0 ? opt->n_micro : 1, n_slots = opt && opt->n_slots > 0 ? opt->n_slots : 1;
    mg_storage *s = calloc(1, sizeof *s);
    if (!s) return mg_error_set(err, MG_ERR_NOMEM, "out of memory allocating storage");
    s->g = g;
    s->plan = plan;
    s->n_micro = n_micro;
    s->n_slots = n_slots;
    s->first = malloc(((size_t)plan->n_buffers + 1) * sizeof *s->first);
    int64_t total = 0;
    for (int b = 0; s->first && b < plan->n_buffers; b++) {
        s->first[b] = (int)total;
        total += copies_of(s, b);
    }
    if (!s->first || total > (1 << 30) || !(s->data = calloc((size_t)total + 1, sizeof *s->data)) ||
        !(s->bytes = calloc((size_t)total + 1, sizeof *s->bytes))) {
        mg_storage_free(s);
        return mg_error_set(err, MG_ERR_NOMEM, "out of memory allocating storage");
    }
    if (!(s->borrowed = malloc(((size_t)total + 1) * sizeof *s->borrowed))) {
        mg_storage_free(s);
        return mg_error_set(err, MG_ERR_NOMEM, "out of memory allocating storage");
    }
    for (int64_t i = 0; i < total; i++) s->borrowed[i] = -1;
    if (opt && opt->params_from) {
        s->lender = opt->params_from;
        for (int i = 0; i < mg_graph_n_tensors(g); i++) {
            const mg_tensor *t = mg_graph_tensor(g, i);
            int b = plan->buffer_of[i];
            if (t->role != MG_ROLE_PARAM || t->src || b < 0 || plan->buffer_kind[b] != MG_BUF_PERSISTENT) continue;
            int l = lender_copy(s->lender, t);
            if (l >= 0 && s->lender->bytes[l] == plan->buffer_bytes[b]) s->borrowed[s->first[b]] = l;
        }
    }
    for (int b = 0; b < plan->n_buffers; b++)
        for (int c = 0; c < copies_of(s, b); c++) {
            int i = s->first[b] + c;
            if (s->borrowed[i] >= 0) {
                s->data[i] = s->lender->data[s->borrowed[i]];
                s->bytes[i] = plan->buffer_bytes[b];
                s->n_data = i + 1;
                continue;
            }
            /* aligned_alloc wants a multiple of the alignment; a zero-size buffer still
             * gets one line so that every buffer has a distinct, non-NULL address. */
            size_t bytes = (plan->buffer_bytes[b] + MG_STORAGE_ALIGN - 1) / MG_STORAGE_ALIGN * MG_STORAGE_ALIGN;
            if (!bytes) bytes = MG_STORAGE_ALIGN;
            s->data[i] = aligned_alloc(MG_STORAGE_ALIGN, bytes);
            if (!s->data[i]) {
                s->n_data = i;
                mg_storage_free(s);
                return mg_error_set(err, MG_ERR_NOMEM, "out of memory allocating buffer %d (%zu bytes)", b, bytes);
            }
            s->bytes[i] = plan->buffer_bytes[b];
            s->n_data = i + 1;
            /* Zeroed so that runs are reproducible even when a kernel reads padding or a
             * host forgets to fill an input. */
            memset(s->data[i], 0, bytes);
        }
    *out = s;
    return MG_OK;
}

int mg_storage_new(mg_graph *g, const mg_memplan *plan, mg_storage **out, mg_error *err) {
    return mg_storage_new_ex(g, plan, NULL, out, err);
}

int mg_storage_copy_of(const mg_storage *s, int b, int mb) {
    if (!s || b < 0 || b >= s->plan->n_buffers) return -1;
    int c = 0;
    if (mb > 0) {
        if (s->plan->buffer_kind[b] == MG_BUF_MICROBATCH) c = mb < s->n_micro ? mb : -1;
        else if (s->plan->buffer_kind[b] == MG_BUF_SLOT) c = mb % s->n_slots;
    }
    return c < 0 ? -1 : s->first[b] + c;
}

void *mg_storage_data_mb(const mg_storage *s, const mg_tensor *t, int mb) {
    int i = mg_storage_copy_of(s, mg_storage_buffer_of(s, t), mb);
    if (i < 0) return NULL;
    if (s->host_access) s->host_access(s->host_ctx, i);
    return s->data[i];
}

void *mg_storage_data(const mg_storage *s, const mg_tensor *t) { return mg_storage_data_mb(s, t, 0); }

int mg_storage_buffer_of(const mg_storage *s, const mg_tensor *t) {
    if (!s || !t || t->id < 0 || t->id >= s->plan->n_tensors) return -1;
    return s->plan->buffer_of[t->id];
}

int mg_storage_n_micro(const mg_storage *s) { return s ? s->n_micro : 0; }

void mg_storage_refresh_borrowed(mg_storage *s) {
    if (!s || !s->lender) return;
    for (int i = 0; i < s->n_data; i++) {
        if (s->borrowed[i] < 0) continue;
        if (s->lender->host_access) s->lender->host_access(s->lender->host_ctx, s->borrowed[i]);
        if (s->host_access) s->host_access(s->host_ctx, i);
    }
}

int mg_storage_n_borrowed(const mg_storage *s) {
    int n = 0;
    for (int i = 0; s && s->borrowed && i < s->n_data; i++) n += s->borrowed[i] >= 0;
    return n;
}
int mg_storage_n_slots(const mg_storage *s) { return s ? s->n_slots : 0; }
int mg_storage_n_buffers(const mg_storage *s) { return s ? s->n_data : 0; }

void *mg_storage_buffer(const mg_storage *s, int buffer) {
    if (!s || buffer < 0 || buffer >= s->n_data) return NULL;
    if (s->host_access) s->host_access(s->host_ctx, buffer);
    return s->data[buffer];
}

size_t mg_storage_buffer_bytes(const mg_storage *s, int buffer) {
    return s && buffer >= 0 && buffer < s->n_data ? s->bytes[buffer] : 0;
}

int mg_storage_init(mg_storage *s, uint64_t seed, mg_error *err) {
    if (!s) return mg_error_set(err, MG_ERR_INVALID, "mg_storage_init: NULL storage");
    for (int i = 0; i < mg_graph_n_tensors(s->g); i++) {
        const mg_tensor *t = mg_graph_tensor(s->g, i);
        if (t->src || t->updates) continue; /* produced by the graph: nothing to initialise */
        int ci = mg_storage_copy_of(s, mg_storage_buffer_of(s, t), 0);
        if (ci >= 0 && s->borrowed[ci] >= 0) continue; /* the lender's value */
        void *dst = mg_storage_data(s, t);
        size_t bytes = (size_t)mg_numel(t) * mg_dtype_size(t->dtype);
        if (t->init.kind == MG_INIT_ONES || t->init.kind == MG_INIT_NORMAL || t->init.kind == MG_INIT_CONSTANT) {
            if (t->dtype != MG_F32)
                return mg_error_set(err, MG_ERR_UNSUPPORTED, "tensor '%s': random/ones init of %s tensors is not supported",
                                    t->name, mg_dtype_name(t->dtype));
            mg_rng_init_tensor(t, seed, dst);
        } else {
            /* zeros, no init spec, inputs (i32 ids and targets): all zeros */
            for (int c = 0; c < (t->per_microbatch ? s->n_micro : 1); c++) memset(mg_storage_data_mb(s, t, c), 0, bytes);
        }
    }
    return MG_OK;
}

/* Host storage for a graph: 64-byte-aligned allocations for the memory plan's buffers,
 * replicated per micro-batch instance (MICROBATCH) or per slot (SLOT) as the schedule
 * needs them (include/mgraph/memplan.h).
 *
 * The plan decides sharing; storage only materialises it, so every executor
 * (reference, StarPU, later CUDA device copies) sees the same bytes for a tensor.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "mgraph/engine.h"
#include "mgraph/rng.h"
#include "ops/rng_init.h"
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
    size_t *mapped;   /* [n_data]: length of an mmap'd copy (0: aligned_alloc) */
    unsigned char *fresh; /* [n_data]: still all zeros as allocated (no pointer handed out yet) */
};

void mg_storage_set_host_access(mg_storage *s, void (*fn)(void *ctx, int buffer), void *ctx) {
    if (!s) return;
    s->host_access = fn;
    s->host_ctx = ctx;
}

enum { MG_STORAGE_ALIGN = 64 };
/* Buffers from this size on are mapped: the kernel hands out zero pages as they are
 * first written (no zeroing pass here; mg_storage_init then writes each weight page
 * once, on the thread that computes it). No MADV_HUGEPAGE: with the kernel's default
 * defrag policy its faults compact memory synchronously, which made start-up 2.7x and
 * the first step 1.3x slower here (measured on the 124M model). */
enum { MG_STORAGE_MAP_MIN = 1 << 20 };

/* Every storage of the process together (mg_memory_get_stats): storages may be made and
 * freed on any thread, so the counters are atomic. The peaks are raised by compare-and-
 * swap so that two threads allocating at once never lower one. */
static struct {
    size_t allocated, max_allocated, reserved, max_reserved;
    int64_t count;
} stats;

static void raise_peak(size_t *peak, size_t now) {
    size_t seen = __atomic_load_n(peak, __ATOMIC_RELAXED);
    while (now > seen && !__atomic_compare_exchange_n(peak, &seen, now, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
    }
}

/* what copy i took from the system: a mapping's pages, or the aligned allocation */
static size_t reserved_of(const mg_storage *s, int i) {
    if (s->mapped[i]) return s->mapped[i];
    size_t b = (s->bytes[i] + MG_STORAGE_ALIGN - 1) / MG_STORAGE_ALIGN * MG_STORAGE_ALIGN;
    return b ? b : MG_STORAGE_ALIGN;
}

static void count_buffer(const mg_storage *s, int i, int sign) {
    size_t a = s->bytes[i], r = reserved_of(s, i);
    if (sign > 0) {
        raise_peak(&stats.max_allocated, __atomic_add_fetch(&stats.allocated, a, __ATOMIC_RELAXED));
        raise_peak(&stats.max_reserved, __atomic_add_fetch(&stats.reserved, r, __ATOMIC_RELAXED));
        __atomic_add_fetch(&stats.count, 1, __ATOMIC_RELAXED);
    } else {
        __atomic_sub_fetch(&stats.allocated, a, __ATOMIC_RELAXED);
        __atomic_sub_fetch(&stats.reserved, r, __ATOMIC_RELAXED);
        __atomic_sub_fetch(&stats.count, 1, __ATOMIC_RELAXED);
    }
}

void mg_memory_get_stats(mg_memory_stats *st) {
    memset(st, 0, sizeof *st);
    st->allocated_bytes = __atomic_load_n(&stats.allocated, __ATOMIC_RELAXED);
    st->max_allocated_bytes = __atomic_load_n(&stats.max_allocated, __ATOMIC_RELAXED);
    st->reserved_bytes = __atomic_load_n(&stats.reserved, __ATOMIC_RELAXED);
    st->max_reserved_bytes = __atomic_load_n(&stats.max_reserved, __ATOMIC_RELAXED);
    st->allocation_count = __atomic_load_n(&stats.count, __ATOMIC_RELAXED);
}

void mg_storage_free(mg_storage *s) {
    if (!s) return;
    for (int b = 0; b < s->n_data; b++) {
        if (s->borrowed && s->borrowed[b] >= 0) continue;
        count_buffer(s, b, -1);
        if (s->mapped && s->mapped[b]) munmap(s->data[b], s->mapped[b]);
        else free(s->data[b]);
    }
    free(s->mapped);
    free(s->fresh);
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
            mg_tensor_storage(u) != mg_tensor_storage(t) ||
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
    if (!(s->borrowed = malloc(((size_t)total + 1) * sizeof *s->borrowed)) ||
        !(s->mapped = calloc((size_t)total + 1, sizeof *s->mapped)) || !(s->fresh = calloc((size_t)total + 1, 1))) {
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
            if (bytes >= MG_STORAGE_MAP_MIN) {
                size_t len = (bytes + 4095) / 4096 * 4096;
                void *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
                if (m != MAP_FAILED) {
                    s->data[i] = m;
                    s->mapped[i] = len;
                }
            } else if ((s->data[i] = aligned_alloc(MG_STORAGE_ALIGN, bytes))) {
                memset(s->data[i], 0, bytes);
            }
            if (!s->data[i]) {
                s->n_data = i;
                mg_storage_free(s);
                return mg_error_set(err, MG_ERR_NOMEM, "out of memory allocating buffer %d (%zu bytes)", b, bytes);
            }
            /* Zeroed (by memset or by the kernel) so that runs are reproducible even when a
             * kernel reads padding or a host forgets to fill an input. */
            s->fresh[i] = 1;
            s->bytes[i] = plan->buffer_bytes[b];
            s->n_data = i + 1;
            count_buffer(s, i, +1);
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
    s->fresh[i] = 0; /* the caller may write it */
    return (char *)s->data[i] + mg_storage_offset_of(s, t); /* a view: at its offset */
}

void *mg_storage_data(const mg_storage *s, const mg_tensor *t) { return mg_storage_data_mb(s, t, 0); }

int mg_storage_buffer_of(const mg_storage *s, const mg_tensor *t) {
    if (!s || !t || t->id < 0 || t->id >= s->plan->n_tensors) return -1;
    return s->plan->buffer_of[t->id];
}

size_t mg_storage_offset_of(const mg_storage *s, const mg_tensor *t) {
    return mg_storage_buffer_of(s, t) < 0 ? 0 : s->plan->offset_of[t->id];
}

bool mg_storage_partial(const mg_storage *s, const mg_tensor *t) {
    return mg_storage_buffer_of(s, t) >= 0 && s->plan->partial[t->id];
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
    s->fresh[buffer] = 0; /* the caller may write it */
    return s->data[buffer];
}

size_t mg_storage_buffer_bytes(const mg_storage *s, int buffer) {
    return s && buffer >= 0 && buffer < s->n_data ? s->bytes[buffer] : 0;
}

/* Copy i for the host to write (host_access first), without marking it written. */
static void *init_target(mg_storage *s, int i) {
    if (s->host_access) s->host_access(s->host_ctx, i);
    return s->data[i];
}

static int by_address(const void *a, const void *b) {
    uintptr_t x = (uintptr_t)((const mg_init_item *)a)->dst, y = (uintptr_t)((const mg_init_item *)b)->dst;
    return (x > y) - (x < y);
}

/* Every weight and state tensor from its init spec, in parallel chunks
 * (mg_rng_init_items); zeros are written only where the buffer may not be zero any more. */
int mg_storage_init(mg_storage *s, uint64_t seed, mg_error *err) {
    if (!s) return mg_error_set(err, MG_ERR_INVALID, "mg_storage_init: NULL storage");
    int n_items = 0, cap = 0;
    mg_init_item *items = NULL;
    int *written = NULL; /* copies the items write */
    int n_written = 0;
    int rc = MG_OK;
    for (int i = 0; i < mg_graph_n_tensors(s->g) && !rc; i++) {
        const mg_tensor *t = mg_graph_tensor(s->g, i);
        if (t->src || t->updates) continue; /* produced by the graph: nothing to initialise */
        int b = mg_storage_buffer_of(s, t), ci = mg_storage_copy_of(s, b, 0);
        if (ci < 0) continue;
        if (s->borrowed[ci] >= 0) continue; /* the lender's value */
        bool random = t->init.kind == MG_INIT_ONES || t->init.kind == MG_INIT_NORMAL || t->init.kind == MG_INIT_CONSTANT;
        if (random && t->dtype != MG_F32) {
            rc = mg_error_set(err, MG_ERR_UNSUPPORTED, "tensor '%s': random/ones init of %s tensors is not supported",
                              t->name, mg_dtype_name(t->dtype));
            break;
        }
        int copies = random ? 1 : (t->per_microbatch ? s->n_micro : 1);
        size_t bytes = mg_tensor_bytes(t);
        for (int c = 0; c < copies; c++) {
            int k = mg_storage_copy_of(s, b, c);
            if (k < 0) continue;
            /* zeros, no init spec, inputs (i32 ids and targets): all zeros, already so when fresh */
            if (!random && s->fresh[k]) continue;
            if (n_items == cap) {
                int nc = cap ? 2 * cap : 64;
                mg_init_item *ni = realloc(items, (size_t)nc * sizeof *ni);
                int *nw = realloc(written, (size_t)nc * sizeof *nw);
                if (ni) items = ni;
                if (nw) written = nw;
                if (!ni || !nw) {
                    rc = mg_error_set(err, MG_ERR_NOMEM, "out of memory listing the tensors to initialise");
                    break;
                }
                cap = nc;
            }
            items[n_items++] = (mg_init_item){t, (char *)init_target(s, k) + mg_storage_offset_of(s, t), random ? 0 : bytes};
            written[n_written++] = k;
        }
    }
    /* two tensors over the same bytes (not in plans mgraph builds; parts placed in one
     * buffer do not overlap): in order, one thread, as listed */
    bool shared = false;
    mg_init_item *by_dst = rc ? NULL : malloc(((size_t)n_items + 1) * sizeof *by_dst);
    if (!rc && !by_dst) rc = mg_error_set(err, MG_ERR_NOMEM, "out of memory listing the tensors to initialise");
    if (!rc && n_items > 1) { /* sorted by address, overlaps are between neighbours */
        memcpy(by_dst, items, (size_t)n_items * sizeof *by_dst);
        qsort(by_dst, (size_t)n_items, sizeof *by_dst, by_address);
        for (int i = 0; i + 1 < n_items && !shared; i++)
            shared = (const char *)by_dst[i].dst + mg_tensor_bytes(by_dst[i].t) >
                     (const char *)by_dst[i + 1].dst;
    }
    free(by_dst);
    if (!rc) mg_rng_init_items(items, n_items, seed, shared ? 1 : 0);
    for (int i = 0; !rc && i < n_written; i++) s->fresh[written[i]] = 0;
    free(items);
    free(written);
    return rc;
}

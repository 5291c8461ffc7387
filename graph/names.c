/* Name -> tensor map, and base name -> suffix hint: open addressing, linear probing,
 * grow at 1/2 load. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "graph/graph_internal.h"

static size_t slot_of(const mg_name_map *m, const char *name) {
    size_t i = (size_t)mg_hash_name(name) & (m->cap - 1);
    while (m->slots[i] && strcmp(m->slots[i]->name, name) != 0) i = (i + 1) & (m->cap - 1);
    return i;
}

static int grow(mg_name_map *m) {
    mg_name_map n = {.cap = m->cap ? m->cap * 2 : 64};
    n.slots = calloc(n.cap, sizeof *n.slots);
    if (!n.slots) return MG_ERR_NOMEM;
    for (size_t i = 0; i < m->cap; i++)
        if (m->slots[i]) n.slots[slot_of(&n, m->slots[i]->name)] = m->slots[i];
    n.len = m->len;
    free(m->slots);
    *m = n;
    return MG_OK;
}

int mg_name_map_put(mg_name_map *m, mg_tensor *t) {
    if ((m->len + 1) * 2 > m->cap) {
        int rc = grow(m);
        if (rc) return rc;
    }
    size_t i = slot_of(m, t->name);
    if (m->slots[i]) return MG_ERR_INVALID;
    m->slots[i] = t;
    m->len++;
    return MG_OK;
}

mg_tensor *mg_name_map_get(const mg_name_map *m, const char *name) {
    if (!m->cap) return NULL;
    return m->slots[slot_of(m, name)];
}

void mg_name_map_del(mg_name_map *m, const char *name) {
    if (!m->cap) return;
    size_t i = slot_of(m, name);
    if (!m->slots[i]) return;
    m->slots[i] = NULL;
    m->len--;
    /* re-insert the rest of the probe run so lookups still find them */
    for (size_t j = (i + 1) & (m->cap - 1); m->slots[j]; j = (j + 1) & (m->cap - 1)) {
        mg_tensor *t = m->slots[j];
        m->slots[j] = NULL;
        m->slots[slot_of(m, t->name)] = t;
    }
}

void mg_name_map_free(mg_name_map *m) {
    free(m->slots);
    m->slots = NULL;
    m->cap = m->len = 0;
}

static size_t hint_slot(const mg_suffix_map *m, const char *base) {
    size_t i = (size_t)mg_hash_name(base) & (m->cap - 1);
    while (m->slots[i].base && strcmp(m->slots[i].base, base) != 0) i = (i + 1) & (m->cap - 1);
    return i;
}

int *mg_suffix_map_at(mg_suffix_map *m, const char *base) {
    if ((m->len + 1) * 2 > m->cap) {
        mg_suffix_map n = {.cap = m->cap ? m->cap * 2 : 64, .len = m->len};
        n.slots = calloc(n.cap, sizeof *n.slots);
        if (!n.slots) return NULL;
        for (size_t i = 0; i < m->cap; i++)
            if (m->slots[i].base) n.slots[hint_slot(&n, m->slots[i].base)] = m->slots[i];
        free(m->slots);
        *m = n;
    }
    size_t i = hint_slot(m, base);
    if (!m->slots[i].base) {
        if (!(m->slots[i].base = strdup(base))) return NULL;
        m->slots[i].next = 1;
        m->len++;
    }
    return &m->slots[i].next;
}

void mg_suffix_map_freed(mg_suffix_map *m, const char *name) {
    const char *us = strrchr(name, '_'), *d = us ? us + 1 : NULL;
    if (!d || *d < '1' || *d > '9' || !m->cap) return; /* not a "base_k" that uniquifying makes */
    long k = 0;
    for (; *d; d++) {
        if (*d < '0' || *d > '9' || k > INT_MAX / 10) return;
        k = k * 10 + (*d - '0');
    }
    char *base = strndup(name, (size_t)(us - name));
    if (!base) { /* cannot look it up: forget every hint instead (they are only hints) */
        mg_suffix_map_free(m);
        return;
    }
    size_t i = hint_slot(m, base);
    if (m->slots[i].base && m->slots[i].next > k) m->slots[i].next = (int)k;
    free(base);
}

void mg_suffix_map_free(mg_suffix_map *m) {
    for (size_t i = 0; i < m->cap; i++) free(m->slots[i].base);
    free(m->slots);
    m->slots = NULL;
    m->cap = m->len = 0;
}

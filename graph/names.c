/* Name -> tensor map: open addressing, linear probing, grows at 1/2 load. */
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

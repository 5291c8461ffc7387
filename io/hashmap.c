/* Open addressing with linear probing: the maps are built once (vocab, merges) or
 * cleared wholesale (word cache), so no deletion is needed and probing stays short
 * at load factor <= 1/2. */
#include "io/hashmap.h"

#include <stdlib.h>
#include <string.h>

uint64_t mg_mix64(uint64_t x) { /* splitmix64 finaliser */
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    x ^= x >> 31;
    return x;
}

uint64_t mg_hash_bytes(const void *data, size_t len, uint64_t seed) {
    const unsigned char *p = data;
    uint64_t h = seed ^ (len * 0x9e3779b97f4a7c15ULL);
    while (len >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        h = mg_mix64(h ^ w) * 0x9e3779b97f4a7c15ULL;
        p += 8;
        len -= 8;
    }
    uint64_t w = 0;
    memcpy(&w, p, len);
    return mg_mix64(h ^ w ^ ((uint64_t)len << 56));
}

static size_t pow2_at_least(size_t n) {
    size_t c = 16;
    while (c < n) c <<= 1;
    return c;
}

int mg_strmap_init(mg_strmap *m, size_t expected) {
    memset(m, 0, sizeof *m);
    m->cap = pow2_at_least(expected * 2);
    m->slots = calloc(m->cap, sizeof *m->slots);
    return m->slots ? 0 : -1;
}

void mg_strmap_free(mg_strmap *m) {
    free(m->slots);
    free(m->arena);
    memset(m, 0, sizeof *m);
}

void mg_strmap_clear(mg_strmap *m) {
    memset(m->slots, 0, m->cap * sizeof *m->slots);
    m->count = 0;
    m->arena_len = 0;
}

static uint64_t key_hash(const char *key, size_t len) {
    uint64_t h = mg_hash_bytes(key, len, 0x51ed270b27a1f6d1ULL);
    return h ? h : 1; /* 0 marks an empty slot */
}

int mg_strmap_get(const mg_strmap *m, const char *key, size_t len, uint64_t *val) {
    uint64_t h = key_hash(key, len);
    size_t mask = m->cap - 1;
    for (size_t i = h & mask;; i = (i + 1) & mask) {
        const mg_strmap_entry *e = &m->slots[i];
        if (e->hash == 0) return 0;
        if (e->hash == h && e->klen == len && memcmp(m->arena + e->koff, key, len) == 0) {
            *val = e->val;
            return 1;
        }
    }
}

static int strmap_grow(mg_strmap *m) {
    size_t ncap = m->cap * 2;
    mg_strmap_entry *ns = calloc(ncap, sizeof *ns);
    if (!ns) return -1;
    for (size_t i = 0; i < m->cap; i++) {
        if (!m->slots[i].hash) continue;
        size_t j = m->slots[i].hash & (ncap - 1);
        while (ns[j].hash) j = (j + 1) & (ncap - 1);
        ns[j] = m->slots[i];
    }
    free(m->slots);
    m->slots = ns;
    m->cap = ncap;
    return 0;
}

int mg_strmap_put(mg_strmap *m, const char *key, size_t len, uint64_t val) {
    if ((m->count + 1) * 2 > m->cap && strmap_grow(m)) return -1;
    uint64_t h = key_hash(key, len);
    size_t mask = m->cap - 1;
    size_t i = h & mask;
    for (;; i = (i + 1) & mask) {
        mg_strmap_entry *e = &m->slots[i];
        if (e->hash == 0) break;
        if (e->hash == h && e->klen == len && memcmp(m->arena + e->koff, key, len) == 0) {
            e->val = val;
            return 0;
        }
    }
    if (m->arena_len + len + 1 > m->arena_cap) {
        size_t nc = m->arena_cap ? m->arena_cap : 4096;
        while (nc < m->arena_len + len + 1) nc *= 2;
        char *na = realloc(m->arena, nc);
        if (!na) return -1;
        m->arena = na;
        m->arena_cap = nc;
    }
    if (len) memcpy(m->arena + m->arena_len, key, len);
    mg_strmap_entry *e = &m->slots[i];
    e->hash = h;
    e->koff = m->arena_len;
    e->klen = (uint32_t)len;
    e->val = val;
    m->arena_len += len;
    m->count++;
    return 0;
}

int mg_u64map_init(mg_u64map *m, size_t expected) {
    memset(m, 0, sizeof *m);
    m->cap = pow2_at_least(expected * 2);
    m->keys = malloc(m->cap * sizeof *m->keys);
    m->vals = malloc(m->cap * sizeof *m->vals);
    m->used = calloc(m->cap, 1);
    if (!m->keys || !m->vals || !m->used) {
        mg_u64map_free(m);
        return -1;
    }
    return 0;
}

void mg_u64map_free(mg_u64map *m) {
    free(m->keys);
    free(m->vals);
    free(m->used);
    memset(m, 0, sizeof *m);
}

int mg_u64map_get(const mg_u64map *m, uint64_t key, uint64_t *val) {
    size_t mask = m->cap - 1;
    for (size_t i = mg_mix64(key) & mask; m->used[i]; i = (i + 1) & mask) {
        if (m->keys[i] == key) {
            *val = m->vals[i];
            return 1;
        }
    }
    return 0;
}

int mg_u64map_put(mg_u64map *m, uint64_t key, uint64_t val) {
    if ((m->count + 1) * 2 > m->cap) {
        mg_u64map n;
        if (mg_u64map_init(&n, m->cap)) return -1;
        for (size_t i = 0; i < m->cap; i++)
            if (m->used[i]) mg_u64map_put(&n, m->keys[i], m->vals[i]);
        mg_u64map_free(m);
        *m = n;
    }
    size_t mask = m->cap - 1;
    size_t i = mg_mix64(key) & mask;
    for (; m->used[i]; i = (i + 1) & mask) {
        if (m->keys[i] == key) {
            m->vals[i] = val;
            return 0;
        }
    }
    m->used[i] = 1;
    m->keys[i] = key;
    m->vals[i] = val;
    m->count++;
    return 0;
}

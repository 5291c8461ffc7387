/* Internal open-addressing hash maps used by the tokenizers (vocab, merges, word cache). */
#ifndef MGRAPH_IO_HASHMAP_H
#define MGRAPH_IO_HASHMAP_H

#include <stddef.h>
#include <stdint.h>

/* Byte-string keys (copied into an arena owned by the map) -> uint64 values. */
typedef struct mg_strmap_entry {
    uint64_t hash; /* 0 = empty slot */
    uint64_t koff;
    uint64_t val;
    uint32_t klen;
} mg_strmap_entry;

typedef struct mg_strmap {
    mg_strmap_entry *slots;
    size_t cap, count; /* cap is a power of two */
    char *arena;
    size_t arena_len, arena_cap;
} mg_strmap;

int mg_strmap_init(mg_strmap *m, size_t expected); /* 0 or -1 (no memory) */
void mg_strmap_free(mg_strmap *m);
void mg_strmap_clear(mg_strmap *m);
/* 1 and *val when found, 0 otherwise. */
int mg_strmap_get(const mg_strmap *m, const char *key, size_t len, uint64_t *val);
/* Inserts or overwrites; 0 or -1 (no memory). */
int mg_strmap_put(mg_strmap *m, const char *key, size_t len, uint64_t val);

/* uint64 keys (any value) -> uint64 values. */
typedef struct mg_u64map {
    uint64_t *keys, *vals;
    unsigned char *used;
    size_t cap, count;
} mg_u64map;

int mg_u64map_init(mg_u64map *m, size_t expected);
void mg_u64map_free(mg_u64map *m);
int mg_u64map_get(const mg_u64map *m, uint64_t key, uint64_t *val);
int mg_u64map_put(mg_u64map *m, uint64_t key, uint64_t val);

uint64_t mg_hash_bytes(const void *data, size_t len, uint64_t seed);
uint64_t mg_mix64(uint64_t x);

#endif

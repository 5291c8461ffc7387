/* Small descriptive helpers: dtypes, roles, op names, shapes, name hashing. */
#include <stdio.h>
#include <string.h>

#include "mgraph/graph.h"

int64_t mg_numel(const mg_tensor *t) {
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= t->shape[i];
    return n;
}

size_t mg_dtype_size(mg_dtype dt) {
    switch (dt) {
    case MG_F32: return 4;
    case MG_BF16: return 2;
    case MG_F16: return 2;
    case MG_I32: return 4;
    case MG_F8E4M3: return 1;
    case MG_F8E5M2: return 1;
    default: return 0;
    }
}

mg_dtype mg_tensor_storage(const mg_tensor *t) { return t->dtype == MG_F32 ? t->storage : t->dtype; }
size_t mg_tensor_esize(const mg_tensor *t) { return mg_dtype_size(mg_tensor_storage(t)); }
size_t mg_tensor_bytes(const mg_tensor *t) { return (size_t)mg_numel(t) * mg_tensor_esize(t); }
bool mg_dtype_is_low(mg_dtype dt) { return dt == MG_BF16 || dt == MG_F16 || dt == MG_F8E4M3 || dt == MG_F8E5M2; }

const char *mg_dtype_name(mg_dtype dt) {
    static const char *names[] = {"f32", "bf16", "f16", "i32", "f8e4m3", "f8e5m2"};
    return dt >= 0 && dt < MG_DTYPE_COUNT ? names[dt] : "?";
}

const char *mg_role_name(mg_role r) {
    static const char *names[] = {"input", "param", "act", "grad", "opt_state", "loss"};
    return r >= 0 && r < MG_ROLE_COUNT ? names[r] : "?";
}

const char *mg_op_name(mg_op op) {
    static const char *names[] = {
#define MG_OP(e, s) [MG_OP_##e] = s,
#include "mgraph/op_list.h"
#undef MG_OP
    };
    return op >= 0 && op < MG_OP_COUNT ? names[op] : "?";
}

const char *mg_group_name(mg_group grp) {
    static const char *names[] = {"tp", "cp", "ep", "dp", "pp", "etp", "edp", "dp_cp", "world", "emb"};
    return grp >= 0 && grp < MG_GROUP_COUNT ? names[grp] : "none";
}

const char *mg_layout_name(mg_layout layout) {
    static const char *names[] = {"replicated", "column", "row", "vocab", "expert_column", "expert_row"};
    return layout >= 0 && layout < MG_LAYOUT_COUNT ? names[layout] : "?";
}

const char *mg_shape_str(const mg_tensor *t, char *buf, size_t len) {
    size_t o = (size_t)snprintf(buf, len, "[");
    for (int i = 0; i < t->ndim && o < len; i++)
        o += (size_t)snprintf(buf + o, len - o, i ? ", %lld" : "%lld", (long long)t->shape[i]);
    if (o < len) snprintf(buf + o, len - o, "]");
    return buf;
}

/* FNV-1a then a splitmix finaliser: cheap, stable across platforms and runs. */
uint64_t mg_hash_name(const char *s) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
    h ^= h >> 30;
    h *= 0xbf58476d1ce4e5b9ull;
    h ^= h >> 27;
    h *= 0x94d049bb133111ebull;
    return h ^ (h >> 31);
}

bool mg_same_shape(const mg_tensor *a, const mg_tensor *b) {
    if (a->ndim != b->ndim) return false;
    for (int i = 0; i < a->ndim; i++)
        if (a->shape[i] != b->shape[i]) return false;
    return true;
}

/* A restricted unpickler (include/mgraph/torchfile.h): the data-building opcodes of pickle
 * protocols 2-5 (and the few protocol-0/1 ones torch and older files use), a stack
 * machine that never imports nor calls. Calls are recorded as objects; the rebuild
 * functions of torch's tensors and a few containers are interpreted. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/torch_internal.h"

typedef struct up {
    mg_arena *a;
    const unsigned char *p, *end, *start;
    const char *name;
    mg_pk_storage_fn storage;
    void *ctx;
    mg_torch_file *file;
    mg_pk **stack;
    size_t sp, scap;
    size_t *marks;
    size_t nmarks, mcap;
    mg_pk **memo;
    size_t memo_cap, memo_count;
    size_t ops;
    mg_error *err;
} up;

#define FAIL(...) mg_error_set(u->err, MG_ERR_IO, __VA_ARGS__)

static size_t at(const up *u) { return (size_t)(u->p - u->start); }

static mg_pk *val(up *u, mg_pk_kind k) {
    mg_pk *v = mg_arena_alloc(u->a, sizeof *v);
    if (v) v->kind = k;
    return v;
}

static int nomem(up *u) { return mg_error_set(u->err, MG_ERR_NOMEM, "out of memory reading %s", u->name); }

static int push(up *u, mg_pk *v) {
    if (!v) return nomem(u);
    if (u->sp == u->scap) {
        size_t cap = u->scap ? 2 * u->scap : 64;
        mg_pk **s = realloc(u->stack, cap * sizeof *s);
        if (!s) return nomem(u);
        u->stack = s, u->scap = cap;
    }
    u->stack[u->sp++] = v;
    return MG_OK;
}

/* the items above the innermost mark (the stack floor when there is no mark: an error) */
static int mark_base(up *u, size_t *base) {
    *base = 0;
    if (!u->nmarks) return FAIL("%s: pickle opcode at byte %zu needs a mark and there is none", u->name, at(u) - 1);
    *base = u->marks[u->nmarks - 1];
    if (*base > u->sp) return FAIL("%s: pickle stack under its mark at byte %zu", u->name, at(u) - 1);
    return MG_OK;
}

static int pop(up *u, mg_pk **v) {
    *v = NULL;
    size_t floor = u->nmarks ? u->marks[u->nmarks - 1] : 0;
    if (u->sp <= floor) return FAIL("%s: pickle stack underflow at byte %zu", u->name, at(u) - 1);
    *v = u->stack[--u->sp];
    return MG_OK;
}

static int need(up *u, size_t n) {
    if ((size_t)(u->end - u->p) < n) return FAIL("%s: the pickle ends inside an opcode (truncated?)", u->name);
    return MG_OK;
}

static uint64_t rd(up *u, int n) {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--) v = v << 8 | u->p[i];
    u->p += n;
    return v;
}

/* Appends to a container's items (LIST, TUPLE being built, SET, DICT, OBJECT). The
 * items array's capacity is the smallest power of two >= max(len, 8): it grows when len
 * reaches it. */
static int add_item(up *u, mg_pk *c, mg_pk *v) {
    size_t n = c->len;
    if (n == 0 || (n >= 8 && (n & (n - 1)) == 0)) {
        if (n > SIZE_MAX / 4 / sizeof(mg_pk *)) return nomem(u);
        mg_pk **items = mg_arena_alloc(u->a, (n ? 2 * n : 8) * sizeof *items);
        if (!items) return nomem(u);
        if (n) memcpy(items, c->items, n * sizeof *items);
        c->items = items;
    }
    c->items[c->len++] = v;
    return MG_OK;
}

static mg_pk *make_str(up *u, mg_pk_kind k, const unsigned char *s, size_t n) {
    mg_pk *v = val(u, k);
    char *c = v ? mg_arena_alloc(u->a, n + 1) : NULL;
    if (!c) return NULL;
    memcpy(c, s, n);
    v->s = c, v->len = n;
    return v;
}

static int op_string(up *u, mg_pk_kind k, int lenbytes) {
    int rc = need(u, (size_t)lenbytes);
    if (rc) return rc;
    uint64_t n = rd(u, lenbytes);
    if (n > (uint64_t)(u->end - u->p)) return FAIL("%s: a string of %llu bytes runs past the pickle's end", u->name,
                                                   (unsigned long long)n);
    mg_pk *v = make_str(u, k, u->p, (size_t)n);
    u->p += n;
    return push(u, v);
}

static int op_long(up *u, int lenbytes) {
    int rc = need(u, (size_t)lenbytes);
    if (rc) return rc;
    uint64_t n = rd(u, lenbytes);
    if (n > (uint64_t)(u->end - u->p)) return FAIL("%s: a long integer runs past the pickle's end", u->name);
    if (n > 8) return mg_error_set(u->err, MG_ERR_UNSUPPORTED, "%s: an integer wider than 64 bits at byte %zu", u->name, at(u));
    uint64_t x = 0;
    for (size_t i = 0; i < n; i++) x |= (uint64_t)u->p[i] << (8 * i);
    if (n && n < 8 && (u->p[n - 1] & 0x80)) x |= ~(uint64_t)0 << (8 * n); /* sign-extend */
    u->p += n;
    mg_pk *v = val(u, MG_PK_INT);
    if (v) v->i = (int64_t)x;
    return push(u, v);
}

/* A sequence of the items above the mark. */
static int from_mark(up *u, mg_pk_kind k) {
    size_t base;
    int rc = mark_base(u, &base);
    if (rc) return rc;
    mg_pk *v = val(u, k);
    if (!v) return nomem(u);
    for (size_t i = base; i < u->sp; i++)
        if ((rc = add_item(u, v, u->stack[i]))) return rc;
    u->sp = base;
    u->nmarks--;
    return push(u, v);
}

static int tuple_n(up *u, int n) {
    if (u->sp < (size_t)n + (u->nmarks ? u->marks[u->nmarks - 1] : 0))
        return FAIL("%s: pickle stack underflow at byte %zu", u->name, at(u) - 1);
    mg_pk *v = val(u, MG_PK_TUPLE);
    if (!v) return nomem(u);
    for (int i = n; i > 0; i--) {
        int rc = add_item(u, v, u->stack[u->sp - (size_t)i]);
        if (rc) return rc;
    }
    u->sp -= (size_t)n;
    return push(u, v);
}

/* The container that APPEND(S) / SETITEM(S) / ADDITEMS modify: what the stack holds
 * below the mark (or below the pushed items). */
static int container_at(up *u, size_t idx, mg_pk **c, const char *what) {
    *c = NULL;
    if (idx == 0 || idx > u->sp) return FAIL("%s: %s with nothing to add to at byte %zu", u->name, what, at(u) - 1);
    *c = u->stack[idx - 1];
    mg_pk_kind k = (*c)->kind;
    if (k != MG_PK_LIST && k != MG_PK_DICT && k != MG_PK_SET && k != MG_PK_OBJECT)
        return FAIL("%s: %s on a value that is not a container at byte %zu", u->name, what, at(u) - 1);
    return MG_OK;
}

static int add_items(up *u, bool pairs, const char *what) {
    size_t base;
    int rc = mark_base(u, &base);
    mg_pk *c;
    if (!rc) rc = container_at(u, base, &c, what);
    if (!rc && pairs && (u->sp - base) % 2) rc = FAIL("%s: %s with an odd number of items", u->name, what);
    for (size_t i = base; !rc && i < u->sp; i++) rc = add_item(u, c, u->stack[i]);
    if (rc) return rc;
    u->sp = base;
    u->nmarks--;
    return MG_OK;
}

static int memo_put(up *u, uint64_t idx) {
    if (!u->sp) return FAIL("%s: memo put of an empty stack", u->name);
    if (idx > u->ops + 1024) return FAIL("%s: memo index %llu out of range", u->name, (unsigned long long)idx);
    if (idx >= u->memo_cap) {
        size_t cap = u->memo_cap ? u->memo_cap : 256;
        while (cap <= idx) cap *= 2;
        mg_pk **m = realloc(u->memo, cap * sizeof *m);
        if (!m) return nomem(u);
        memset(m + u->memo_cap, 0, (cap - u->memo_cap) * sizeof *m);
        u->memo = m, u->memo_cap = cap;
    }
    if (!u->memo[idx]) u->memo_count++;
    u->memo[idx] = u->stack[u->sp - 1];
    return MG_OK;
}

static int memo_get(up *u, uint64_t idx) {
    if (idx >= u->memo_cap || !u->memo[idx]) return FAIL("%s: memo index %llu was never set", u->name, (unsigned long long)idx);
    return push(u, u->memo[idx]);
}

static int op_global(up *u) {
    /* "module\nname\n" */
    const unsigned char *nl1 = memchr(u->p, '\n', (size_t)(u->end - u->p));
    const unsigned char *nl2 = nl1 ? memchr(nl1 + 1, '\n', (size_t)(u->end - nl1 - 1)) : NULL;
    if (!nl2) return FAIL("%s: a GLOBAL without its two lines", u->name);
    size_t m = (size_t)(nl1 - u->p), n = (size_t)(nl2 - nl1 - 1);
    mg_pk *v = val(u, MG_PK_GLOBAL);
    char *s = v ? mg_arena_alloc(u->a, m + n + 2) : NULL;
    if (!s) return nomem(u);
    memcpy(s, u->p, m);
    s[m] = '.';
    memcpy(s + m + 1, nl1 + 1, n);
    v->s = s, v->len = m + n + 1;
    u->p = nl2 + 1;
    return push(u, v);
}

static int op_stack_global(up *u) {
    mg_pk *name, *mod;
    int rc = pop(u, &name);
    if (!rc) rc = pop(u, &mod);
    if (rc) return rc;
    if (name->kind != MG_PK_STR || mod->kind != MG_PK_STR) return FAIL("%s: STACK_GLOBAL of non-strings", u->name);
    mg_pk *v = val(u, MG_PK_GLOBAL);
    char *s = v ? mg_arena_alloc(u->a, mod->len + name->len + 2) : NULL;
    if (!s) return nomem(u);
    memcpy(s, mod->s, mod->len);
    s[mod->len] = '.';
    memcpy(s + mod->len + 1, name->s, name->len);
    v->s = s, v->len = mod->len + name->len + 1;
    return push(u, v);
}

/* ---- what calls build ------------------------------------------------------------------ */
static const struct { const char *name; mg_torch_dtype dt; } storages[] = {
    {"torch.DoubleStorage", MG_T_F64}, {"torch.FloatStorage", MG_T_F32},  {"torch.HalfStorage", MG_T_F16},
    {"torch.BFloat16Storage", MG_T_BF16}, {"torch.LongStorage", MG_T_I64}, {"torch.IntStorage", MG_T_I32},
    {"torch.ShortStorage", MG_T_I16}, {"torch.CharStorage", MG_T_I8},    {"torch.ByteStorage", MG_T_U8},
    {"torch.BoolStorage", MG_T_BOOL}, {"torch.UntypedStorage", MG_T_U8},
};

/* BINPERSID: ('storage', torch.XStorage, key, location, numel) */
static int persistent(up *u) {
    mg_pk *pid;
    int rc = pop(u, &pid);
    if (rc) return rc;
    if (!u->storage) return FAIL("%s: a persistent id in a plain pickle", u->name);
    if (pid->kind != MG_PK_TUPLE || pid->len < 5 || pid->items[0]->kind != MG_PK_STR || strcmp(pid->items[0]->s, "storage") ||
        pid->items[1]->kind != MG_PK_GLOBAL || pid->items[2]->kind != MG_PK_STR || pid->items[4]->kind != MG_PK_INT ||
        pid->items[4]->i < 0)
        return FAIL("%s: a persistent id that is not torch's ('storage', type, key, location, numel)", u->name);
    mg_pk *v = val(u, MG_PK_STORAGE);
    mg_torch_tensor *t = v ? mg_arena_alloc(u->a, sizeof *t) : NULL;
    if (!t) return nomem(u);
    t->dtype = MG_T_COUNT;
    for (size_t i = 0; i < sizeof storages / sizeof *storages; i++)
        if (!strcmp(pid->items[1]->s, storages[i].name)) t->dtype = storages[i].dt;
    t->key = pid->items[2]->s;
    t->storage_numel = pid->items[4]->i;
    t->file = u->file;
    size_t bytes = 0;
    if ((rc = u->storage(u->ctx, t->key, &t->data, &bytes, u->err))) return rc;
    size_t es = mg_torch_dtype_size(t->dtype);
    if (es && (uint64_t)t->storage_numel > bytes / es)
        return FAIL("%s: storage %s holds %zu bytes, fewer than its %lld elements of %s", u->name, t->key, bytes,
                    (long long)t->storage_numel, mg_torch_dtype_name(t->dtype));
    v->tensor = t;
    return push(u, v);
}

static bool is_int_tuple(const mg_pk *v, size_t n) {
    if (!v || (v->kind != MG_PK_TUPLE && v->kind != MG_PK_LIST) || (n != SIZE_MAX && v->len != n)) return false;
    for (size_t i = 0; i < v->len; i++)
        if (v->items[i]->kind != MG_PK_INT) return false;
    return true;
}

/* _rebuild_tensor_v2(storage, storage_offset, size, stride, ...) */
static int rebuild_tensor(up *u, const mg_pk *args, mg_pk **out) {
    if (args->len < 4 || args->items[0]->kind != MG_PK_STORAGE || args->items[1]->kind != MG_PK_INT ||
        !is_int_tuple(args->items[2], SIZE_MAX) || !is_int_tuple(args->items[3], args->items[2]->len))
        return FAIL("%s: a tensor rebuilt from arguments that are not (storage, offset, size, stride)", u->name);
    const mg_pk *size = args->items[2], *stride = args->items[3];
    if (size->len > MG_TORCH_MAX_DIMS)
        return mg_error_set(u->err, MG_ERR_UNSUPPORTED, "%s: a tensor of %zu dimensions", u->name, size->len);
    mg_pk *v = val(u, MG_PK_TENSOR);
    mg_torch_tensor *t = v ? mg_arena_alloc(u->a, sizeof *t) : NULL;
    if (!t) return nomem(u);
    *t = *args->items[0]->tensor;
    t->ndim = (int)size->len;
    t->offset = args->items[1]->i;
    const int64_t lim = (int64_t)1 << 48;
    for (int d = 0; d < t->ndim; d++) {
        t->shape[d] = size->items[d]->i;
        t->stride[d] = stride->items[d]->i;
        if (t->shape[d] < 0 || t->shape[d] > lim || t->stride[d] < 0 || t->stride[d] > lim)
            return FAIL("%s: a tensor with size or stride out of range", u->name);
    }
    if (t->offset < 0 || t->offset > lim) return FAIL("%s: a tensor with a storage offset out of range", u->name);
    int64_t n = 1;
    for (int d = 0; d < t->ndim; d++)
        if ((n = t->shape[d] ? (n > lim / t->shape[d] ? lim + 1 : n * t->shape[d]) : 0) > lim)
            return FAIL("%s: a tensor of more than 2^48 elements", u->name);
    v->tensor = t;
    *out = v;
    return MG_OK;
}

/* Protocol 2's bytes: _codecs.encode(str, 'latin1'), the str's code points as bytes. */
static int latin1(up *u, const mg_pk *s, mg_pk **out) {
    mg_pk *v = val(u, MG_PK_BYTES);
    unsigned char *b = v ? mg_arena_alloc(u->a, s->len + 1) : NULL;
    if (!b) return nomem(u);
    size_t n = 0;
    for (size_t i = 0; i < s->len;) {
        unsigned char c = (unsigned char)s->s[i];
        if (c < 0x80) b[n++] = c, i++;
        else if ((c & 0xE0) == 0xC0 && i + 1 < s->len) b[n++] = (unsigned char)(((c & 0x1F) << 6) | (s->s[i + 1] & 0x3F)), i += 2;
        else return FAIL("%s: _codecs.encode of a string that is not latin-1", u->name);
    }
    v->s = (const char *)b, v->len = n;
    *out = v;
    return MG_OK;
}

static int apply_call(up *u, mg_pk *fn, mg_pk *args, mg_pk **out);

static int op_reduce(up *u) {
    mg_pk *args, *fn, *v = NULL;
    int rc = pop(u, &args);
    if (!rc) rc = pop(u, &fn);
    if (!rc && args->kind != MG_PK_TUPLE) rc = FAIL("%s: REDUCE with arguments that are not a tuple", u->name);
    if (!rc) rc = apply_call(u, fn, args, &v);
    return rc ? rc : push(u, v);
}

static int apply_call(up *u, mg_pk *fn, mg_pk *args, mg_pk **out) {
    const char *name = fn->kind == MG_PK_GLOBAL ? fn->s : "";
    char py3[128]; /* protocol 2 names Python 3's builtins as Python 2's __builtin__ */
    if (!strncmp(name, "__builtin__.", 12)) {
        snprintf(py3, sizeof py3, "builtins.%s", name + 12);
        name = py3;
    }
    if (!strcmp(name, "collections.OrderedDict") && args->len == 0) {
        *out = val(u, MG_PK_DICT);
        return *out ? MG_OK : nomem(u);
    }
    if ((!strcmp(name, "torch.Size") || !strcmp(name, "builtins.tuple")) && args->len == 1 &&
        (args->items[0]->kind == MG_PK_TUPLE || args->items[0]->kind == MG_PK_LIST)) {
        mg_pk *v = val(u, MG_PK_TUPLE);
        if (!v) return nomem(u);
        v->items = args->items[0]->items, v->len = args->items[0]->len;
        *out = v;
        return MG_OK;
    }
    if ((!strcmp(name, "builtins.set") || !strcmp(name, "builtins.frozenset")) &&
        (args->len == 0 || (args->len == 1 && (args->items[0]->kind == MG_PK_LIST || args->items[0]->kind == MG_PK_TUPLE)))) {
        mg_pk *v = val(u, MG_PK_SET);
        if (!v) return nomem(u);
        for (size_t i = 0; args->len && i < args->items[0]->len; i++) {
            int rc = add_item(u, v, args->items[0]->items[i]);
            if (rc) return rc;
        }
        *out = v;
        return MG_OK;
    }
    if (!strcmp(name, "_codecs.encode") && args->len == 2 && args->items[0]->kind == MG_PK_STR)
        return latin1(u, args->items[0], out);
    if (!strcmp(name, "torch._utils._rebuild_tensor_v2") || !strcmp(name, "torch._utils._rebuild_tensor"))
        return rebuild_tensor(u, args, out);
    if ((!strcmp(name, "torch._utils._rebuild_parameter") || !strcmp(name, "torch._utils._rebuild_parameter_with_state")) &&
        args->len >= 1 && args->items[0]->kind == MG_PK_TENSOR) {
        *out = args->items[0];
        return MG_OK;
    }
    /* _rebuild_from_type_v2(func, new_type, args, state): a tensor subclass (Parameter) */
    if (!strcmp(name, "torch._tensor._rebuild_from_type_v2") && args->len == 4 && args->items[2]->kind == MG_PK_TUPLE)
        return apply_call(u, args->items[0], args->items[2], out);
    mg_pk *v = val(u, MG_PK_OBJECT);
    if (!v) return nomem(u);
    v->call = fn, v->args = args;
    *out = v;
    return MG_OK;
}

static int op_newobj(up *u, bool ex) {
    mg_pk *kw = NULL, *args, *cls;
    int rc = ex ? pop(u, &kw) : MG_OK;
    if (!rc) rc = pop(u, &args);
    if (!rc) rc = pop(u, &cls);
    if (rc) return rc;
    if (args->kind != MG_PK_TUPLE) return FAIL("%s: NEWOBJ with arguments that are not a tuple", u->name);
    /* cls.__new__(cls, *args): an empty OrderedDict / dict subclass is still a dict */
    if (cls->kind == MG_PK_GLOBAL && !strcmp(cls->s, "collections.OrderedDict")) return push(u, val(u, MG_PK_DICT));
    mg_pk *v = val(u, MG_PK_OBJECT);
    if (!v) return nomem(u);
    v->call = cls, v->args = args;
    (void)kw;
    return push(u, v);
}

static int op_build(up *u) {
    mg_pk *state, *obj;
    int rc = pop(u, &state);
    if (!rc) rc = pop(u, &obj);
    if (rc) return rc;
    if (obj->kind == MG_PK_OBJECT || obj->kind == MG_PK_DICT) obj->state = state;
    /* (BUILD on a tensor: its Python attributes, nothing torch's data needs) */
    return push(u, obj);
}

int mg_pk_load(mg_arena *a, const unsigned char *p, size_t n, const char *name, mg_pk_storage_fn storage, void *ctx,
               mg_torch_file *file, mg_pk **root, mg_error *err) {
    up uu = {.a = a, .p = p, .end = p + n, .start = p, .name = name, .storage = storage, .ctx = ctx, .file = file, .err = err};
    up *u = &uu;
    int rc = MG_OK;
    *root = NULL;
    while (!rc) {
        if (u->p >= u->end) {
            rc = FAIL("%s: the pickle ends without STOP (truncated?)", name);
            break;
        }
        unsigned char op = *u->p++;
        u->ops++;
        mg_pk *v = NULL, *x = NULL, *c = NULL;
        switch (op) {
        case 0x80: /* PROTO */
            if (!(rc = need(u, 1)) && *u->p > 5) rc = mg_error_set(err, MG_ERR_UNSUPPORTED, "%s: pickle protocol %d", name, *u->p);
            u->p++;
            break;
        case 0x95: /* FRAME: a length to skip */
            if (!(rc = need(u, 8))) rd(u, 8);
            break;
        case '.': /* STOP */
            if (u->sp != 1 || u->nmarks) rc = FAIL("%s: STOP with %zu values on the stack", name, u->sp);
            else {
                *root = u->stack[0];
                free(u->stack);
                free(u->marks);
                free(u->memo);
                return MG_OK;
            }
            break;
        case '(': /* MARK */
            if (u->nmarks == u->mcap) {
                size_t cap = u->mcap ? 2 * u->mcap : 32;
                size_t *m = realloc(u->marks, cap * sizeof *m);
                if (!m) {
                    rc = nomem(u);
                    break;
                }
                u->marks = m, u->mcap = cap;
            }
            u->marks[u->nmarks++] = u->sp;
            break;
        case ')': rc = push(u, val(u, MG_PK_TUPLE)); break;
        case ']': rc = push(u, val(u, MG_PK_LIST)); break;
        case '}': rc = push(u, val(u, MG_PK_DICT)); break;
        case 0x8f: rc = push(u, val(u, MG_PK_SET)); break; /* EMPTY_SET */
        case 'N': rc = push(u, val(u, MG_PK_NONE)); break;
        case 0x88: case 0x89: /* NEWTRUE, NEWFALSE */
            if ((v = val(u, MG_PK_BOOL))) v->i = op == 0x88;
            rc = push(u, v);
            break;
        case 'J': case 'K': case 'M': { /* BININT (signed 4), BININT1, BININT2 (unsigned) */
            int w = op == 'J' ? 4 : op == 'K' ? 1 : 2;
            if ((rc = need(u, (size_t)w))) break;
            uint64_t x64 = rd(u, w);
            if ((v = val(u, MG_PK_INT))) v->i = op == 'J' ? (int64_t)(int32_t)(uint32_t)x64 : (int64_t)x64;
            rc = push(u, v);
            break;
        }
        case 0x8a: rc = op_long(u, 1); break; /* LONG1 */
        case 0x8b: rc = op_long(u, 4); break; /* LONG4 */
        case 'G': { /* BINFLOAT: big-endian double */
            if ((rc = need(u, 8))) break;
            uint64_t b = 0;
            for (int i = 0; i < 8; i++) b = b << 8 | *u->p++;
            if ((v = val(u, MG_PK_FLOAT))) memcpy(&v->f, &b, 8);
            rc = push(u, v);
            break;
        }
        case 'X': rc = op_string(u, MG_PK_STR, 4); break;     /* BINUNICODE */
        case 0x8c: rc = op_string(u, MG_PK_STR, 1); break;    /* SHORT_BINUNICODE */
        case 0x8d: rc = op_string(u, MG_PK_STR, 8); break;    /* BINUNICODE8 */
        case 'T': rc = op_string(u, MG_PK_STR, 4); break;     /* BINSTRING (Python 2 str) */
        case 'U': rc = op_string(u, MG_PK_STR, 1); break;     /* SHORT_BINSTRING */
        case 'B': rc = op_string(u, MG_PK_BYTES, 4); break;   /* BINBYTES */
        case 'C': rc = op_string(u, MG_PK_BYTES, 1); break;   /* SHORT_BINBYTES */
        case 0x8e: rc = op_string(u, MG_PK_BYTES, 8); break;  /* BINBYTES8 */
        case 0x96: rc = op_string(u, MG_PK_BYTES, 8); break;  /* BYTEARRAY8 */
        case 't': rc = from_mark(u, MG_PK_TUPLE); break;
        case 'l': rc = from_mark(u, MG_PK_LIST); break;
        case 'd': { /* DICT from the pairs above the mark */
            size_t base;
            if ((rc = mark_base(u, &base))) break;
            if ((u->sp - base) % 2) {
                rc = FAIL("%s: DICT with an odd number of items", name);
                break;
            }
            rc = from_mark(u, MG_PK_DICT);
            break;
        }
        case 0x91: rc = from_mark(u, MG_PK_SET); break;       /* FROZENSET */
        case 0x85: rc = tuple_n(u, 1); break;
        case 0x86: rc = tuple_n(u, 2); break;
        case 0x87: rc = tuple_n(u, 3); break;
        case 'a': /* APPEND */
            if (!(rc = pop(u, &x)) && !(rc = container_at(u, u->sp, &c, "APPEND"))) rc = add_item(u, c, x);
            break;
        case 's': { /* SETITEM */
            mg_pk *k;
            if (!(rc = pop(u, &x)) && !(rc = pop(u, &k)) && !(rc = container_at(u, u->sp, &c, "SETITEM")) &&
                !(rc = add_item(u, c, k)))
                rc = add_item(u, c, x);
            break;
        }
        case 'e': rc = add_items(u, false, "APPENDS"); break;
        case 'u': rc = add_items(u, true, "SETITEMS"); break;
        case 0x90: rc = add_items(u, false, "ADDITEMS"); break;
        case 'q': if (!(rc = need(u, 1))) rc = memo_put(u, rd(u, 1)); break;  /* BINPUT */
        case 'r': if (!(rc = need(u, 4))) rc = memo_put(u, rd(u, 4)); break;  /* LONG_BINPUT */
        case 0x94: rc = memo_put(u, u->memo_count); break; /* MEMOIZE: at len(memo) */
        case 'h': if (!(rc = need(u, 1))) rc = memo_get(u, rd(u, 1)); break;  /* BINGET */
        case 'j': if (!(rc = need(u, 4))) rc = memo_get(u, rd(u, 4)); break;  /* LONG_BINGET */
        case 'c': rc = op_global(u); break;
        case 0x93: rc = op_stack_global(u); break;
        case 'R': rc = op_reduce(u); break;
        case 0x81: rc = op_newobj(u, false); break;
        case 0x92: rc = op_newobj(u, true); break;
        case 'b': rc = op_build(u); break;
        case 'Q': rc = persistent(u); break;
        case '0': rc = pop(u, &x); break; /* POP */
        case '1': /* DUP */
            if (!u->sp) rc = FAIL("%s: DUP of an empty stack", name);
            else rc = push(u, u->stack[u->sp - 1]);
            break;
        case '2': { /* POP_MARK */
            size_t base;
            if (!(rc = mark_base(u, &base))) u->sp = base, u->nmarks--;
            break;
        }
        default:
            rc = mg_error_set(err, MG_ERR_UNSUPPORTED, "%s: pickle opcode 0x%02x at byte %zu is not one this reader "
                              "runs (it builds data only)", name, op, at(u) - 1);
        }
    }
    free(u->stack);
    free(u->marks);
    free(u->memo);
    return rc;
}

/* ---- navigation -------------------------------------------------------------------------- */
const mg_pk *mg_pk_get(const mg_pk *d, const char *key) {
    if (!d || d->kind != MG_PK_DICT) return NULL;
    for (size_t i = 0; i + 1 < d->len; i += 2)
        if (d->items[i]->kind == MG_PK_STR && !strcmp(d->items[i]->s, key)) return d->items[i + 1];
    return NULL;
}

const mg_pk *mg_pk_get_int(const mg_pk *d, int64_t key) {
    if (!d || d->kind != MG_PK_DICT) return NULL;
    for (size_t i = 0; i + 1 < d->len; i += 2)
        if (d->items[i]->kind == MG_PK_INT && d->items[i]->i == key) return d->items[i + 1];
    return NULL;
}

const mg_pk *mg_pk_attr(const mg_pk *o, const char *name) {
    if (!o || o->kind != MG_PK_OBJECT || !o->state) return NULL;
    const mg_pk *s = o->state;
    if (s->kind == MG_PK_TUPLE && s->len == 2) { /* (dict, slots) */
        const mg_pk *v = mg_pk_get(s->items[0], name);
        return v ? v : mg_pk_get(s->items[1], name);
    }
    return mg_pk_get(s, name);
}

bool mg_pk_is_global(const mg_pk *v, const char *name) { return v && v->kind == MG_PK_GLOBAL && !strcmp(v->s, name); }

const char *mg_pk_call_name(const mg_pk *v) {
    return v && v->kind == MG_PK_OBJECT && v->call && v->call->kind == MG_PK_GLOBAL ? v->call->s : "";
}

bool mg_pk_int(const mg_pk *v, int64_t *out) {
    if (!v || (v->kind != MG_PK_INT && v->kind != MG_PK_BOOL)) return false;
    *out = v->i;
    return true;
}

bool mg_pk_num(const mg_pk *v, double *out) {
    if (v && v->kind == MG_PK_FLOAT) *out = v->f;
    else if (v && (v->kind == MG_PK_INT || v->kind == MG_PK_BOOL)) *out = (double)v->i;
    else return false;
    return true;
}

const char *mg_pk_str(const mg_pk *v) { return v && v->kind == MG_PK_STR ? v->s : NULL; }

bool mg_pk_truthy(const mg_pk *v) {
    if (!v) return false;
    switch (v->kind) {
    case MG_PK_BOOL: case MG_PK_INT: return v->i != 0;
    case MG_PK_FLOAT: return v->f != 0.0;
    case MG_PK_STR: case MG_PK_BYTES: case MG_PK_LIST: case MG_PK_TUPLE: case MG_PK_SET: case MG_PK_DICT: return v->len != 0;
    case MG_PK_NONE: return false;
    default: return true;
    }
}

void mg_pk_describe(const mg_pk *v, char *buf, size_t n) {
    if (!v) {
        snprintf(buf, n, "nothing");
        return;
    }
    switch (v->kind) {
    case MG_PK_NONE: snprintf(buf, n, "None"); break;
    case MG_PK_BOOL: snprintf(buf, n, "%s", v->i ? "True" : "False"); break;
    case MG_PK_INT: snprintf(buf, n, "int %lld", (long long)v->i); break;
    case MG_PK_FLOAT: snprintf(buf, n, "float %g", v->f); break;
    case MG_PK_STR: snprintf(buf, n, "str '%.60s'", v->s); break;
    case MG_PK_BYTES: snprintf(buf, n, "%zu bytes", v->len); break;
    case MG_PK_LIST: snprintf(buf, n, "a list of %zu", v->len); break;
    case MG_PK_TUPLE: snprintf(buf, n, "a tuple of %zu", v->len); break;
    case MG_PK_SET: snprintf(buf, n, "a set of %zu", v->len); break;
    case MG_PK_DICT: snprintf(buf, n, "a dict of %zu items", v->len / 2); break;
    case MG_PK_GLOBAL: snprintf(buf, n, "%.80s", v->s); break;
    case MG_PK_OBJECT: snprintf(buf, n, "a %.80s object", mg_pk_call_name(v)[0] ? mg_pk_call_name(v) : "Python"); break;
    case MG_PK_TENSOR: snprintf(buf, n, "a %s tensor of %d dims", mg_torch_dtype_name(v->tensor->dtype), v->tensor->ndim); break;
    case MG_PK_STORAGE: snprintf(buf, n, "a storage"); break;
    }
}

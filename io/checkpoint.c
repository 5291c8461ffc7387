/* Checkpoint directories: writing (per-rank files, index, tracker, retention) and
 * reading (validation, resharding fill). See include/mgraph/checkpoint.h. */
#include "mgraph/checkpoint.h"
#include "mgraph/megatron_ckpt.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <stdatomic.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "mgraph/outfile.h"
#include "mgraph/infile.h"
#include "mgraph/safetensors.h"
#include "ops/convert.h"

#define TRACKER "latest_checkpointed_iteration.txt"
#define INDEX "index.json"
#define FORMAT "mgraph-checkpoint"

/* ---- small helpers ------------------------------------------------------------------ */
int64_t mg_ckpt_piece_numel(const mg_ckpt_piece *p) {
    if (p->hi) return p->hi - p->lo;
    int64_t n = 1;
    for (int d = 0; d < p->ndim; d++) n *= p->block[d];
    return n;
}

static int64_t block_numel(int ndim, const int64_t *b) {
    int64_t n = 1;
    for (int d = 0; d < ndim; d++) n *= b[d];
    return n;
}

void mg_ckpt_iter_dir(const char *root, int64_t iteration, char *buf, size_t len) {
    snprintf(buf, len, "%s/iter_%07" PRId64, root, iteration);
}

/* 64-bit checksum of a piece's bytes (word-wise multiply-xorshift; detects flipped
 * bits and torn writes, not an adversary). */
static uint64_t ckpt_hash(const void *data, size_t n) {
    const uint8_t *p = data;
    uint64_t h = 0x9E3779B97F4A7C15ull ^ (uint64_t)n;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, p + i, 8);
        h = (h ^ w) * 0xFF51AFD7ED558CCDull;
        h ^= h >> 32;
    }
    for (; i < n; i++) h = (h ^ p[i]) * 0x100000001B3ull;
    h ^= h >> 29;
    h *= 0xC4CEB9FE1A85EC53ull;
    return h ^ (h >> 32);
}

/* Checks a piece's geometry: dims in range, block inside the shape, range inside the block. */
static int ckpt_check_piece(const mg_ckpt_piece *p, const char *what, mg_error *err) {
    if (!p->name || !*p->name) return mg_error_set(err, MG_ERR_INVALID, "%s: a piece has no name", what);
    if (p->ndim < 0 || p->ndim > MG_MAX_DIMS)
        return mg_error_set(err, MG_ERR_INVALID, "%s: '%s' has %d dims", what, p->name, p->ndim);
    if ((int)p->dtype < 0 || p->dtype >= MG_DTYPE_COUNT)
        return mg_error_set(err, MG_ERR_INVALID, "%s: '%s' has an unknown dtype", what, p->name);
    for (int d = 0; d < p->ndim; d++)
        if (p->shape[d] < 0 || p->block[d] < 0 || p->offset[d] < 0 || p->offset[d] + p->block[d] > p->shape[d])
            return mg_error_set(err, MG_ERR_INVALID, "%s: '%s': block [%" PRId64 ", +%" PRId64 ") outside dim %d of size %" PRId64,
                                what, p->name, p->offset[d], p->block[d], d, p->shape[d]);
    int64_t n = block_numel(p->ndim, p->block);
    if (p->hi && (p->lo < 0 || p->hi < p->lo || p->hi > n))
        return mg_error_set(err, MG_ERR_INVALID, "%s: '%s': range [%" PRId64 ", %" PRId64 ") outside a block of %" PRId64,
                            what, p->name, p->lo, p->hi, n);
    return MG_OK;
}

static json_t *dims_json(int ndim, const int64_t *v) {
    json_t *a = json_array();
    for (int d = 0; d < ndim; d++) json_array_append_new(a, json_integer(v[d]));
    return a;
}

/* ---- removing what this module wrote, and only that ---------------------------------- */
static bool is_rank_file(const char *s) {
    int r, n = 0;
    return sscanf(s, "rank_%5d.safetensors%n", &r, &n) == 1 && n == (int)strlen(s) && strlen(s) == 22;
}

/* Names this module (or mg_outfile on its behalf) creates inside an iteration directory. */
static bool is_ours(const char *name) {
    if (!strcmp(name, INDEX) || is_rank_file(name)) return true;
    if (name[0] != '.') return false;
    const char *t = strstr(name, ".tmp-");
    if (!t) return false;
    char base[64];
    size_t len = (size_t)(t - name - 1);
    if (len >= sizeof base) return false;
    memcpy(base, name + 1, len);
    base[len] = '\0';
    return !strcmp(base, INDEX) || is_rank_file(base);
}

/* Removes an iteration directory whose every entry is one this module writes. A
 * directory holding anything else is left whole and reported. */
static int remove_iter_dir(const char *dir, mg_error *err) {
    DIR *d = opendir(dir);
    if (!d) return errno == ENOENT ? MG_OK : mg_error_set(err, MG_ERR_IO, "cannot read %s: %s", dir, strerror(errno));
    struct dirent *de;
    int rc = MG_OK;
    while ((de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
        if (!is_ours(de->d_name)) {
            rc = mg_error_set(err, MG_ERR_IO, "%s holds '%s', which mgraph did not write: not removing it", dir, de->d_name);
            break;
        }
    }
    if (!rc) {
        rewinddir(d);
        char p[PATH_MAX];
        while ((de = readdir(d))) {
            if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
            snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
            if (unlink(p) != 0 && errno != ENOENT) {
                rc = mg_error_set(err, MG_ERR_IO, "cannot remove %s: %s", p, strerror(errno));
                break;
            }
        }
    }
    closedir(d);
    if (!rc && rmdir(dir) != 0 && errno != ENOENT) rc = mg_error_set(err, MG_ERR_IO, "cannot remove %s: %s", dir, strerror(errno));
    return rc;
}

static int sync_dir(const char *dir, mg_error *err) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return mg_error_set(err, MG_ERR_IO, "cannot open %s: %s", dir, strerror(errno));
    int rc = fsync(fd);
    int e = errno;
    close(fd);
    return rc ? mg_error_set(err, MG_ERR_IO, "cannot sync %s: %s", dir, strerror(e)) : MG_OK;
}

/* ---- writing --------------------------------------------------------------------------- */
static void partial_dir(const char *root, int64_t iteration, char *buf, size_t len) {
    snprintf(buf, len, "%s/iter_%07" PRId64 ".partial", root, iteration);
}

/* The partial directory of the save under way in this process (mg_ckpt_discard_partial):
 * rank 0's from begin to the end of finish, another rank's while it writes its file. */
static char g_partial[PATH_MAX];
static _Atomic int g_partial_set;

static void partial_register(const char *dir) {
    atomic_store(&g_partial_set, 0);
    snprintf(g_partial, sizeof g_partial, "%s", dir);
    atomic_store(&g_partial_set, 1);
}

/* is_ours without stdio (async-signal-safe) */
static bool ours_safe(const char *n) {
    size_t len = strlen(n);
    if (!strcmp(n, INDEX)) return true;
    if (len == 22 && !strncmp(n, "rank_", 5) && !strcmp(n + 10, ".safetensors")) {
        for (int i = 5; i < 10; i++)
            if (n[i] < '0' || n[i] > '9') return false;
        return true;
    }
    return n[0] == '.' && strstr(n, ".tmp-") != NULL && (strstr(n, "rank_") == n + 1 || strstr(n, INDEX) == n + 1);
}

void mg_ckpt_discard_partial(void) {
    if (!atomic_load(&g_partial_set)) return;
    atomic_store(&g_partial_set, 0);
    int fd = open(g_partial, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return;
    char buf[4096];
    bool foreign = false;
    for (;;) {
        long n = syscall(SYS_getdents64, fd, buf, sizeof buf);
        if (n <= 0) break;
        for (long off = 0; off < n;) {
            /* struct linux_dirent64: ino (8), off (8), reclen (2), type (1), name */
            unsigned short reclen;
            memcpy(&reclen, buf + off + 16, sizeof reclen);
            const char *name = buf + off + 19;
            if (strcmp(name, ".") && strcmp(name, "..")) {
                if (ours_safe(name)) unlinkat(fd, name, 0);
                else foreign = true;
            }
            off += reclen;
        }
    }
    close(fd);
    if (!foreign) rmdir(g_partial);
}

int mg_ckpt_begin(const char *root, int64_t iteration, mg_error *err) {
    if (iteration < 0) return mg_error_set(err, MG_ERR_INVALID, "checkpoint iteration %" PRId64 " < 0", iteration);
    if (mkdir(root, 0777) != 0 && errno != EEXIST)
        return mg_error_set(err, MG_ERR_IO, "cannot create checkpoint directory %s: %s", root, strerror(errno));
    struct stat sb;
    if (stat(root, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return mg_error_set(err, MG_ERR_IO, "checkpoint path %s is not a directory", root);
    char dir[PATH_MAX];
    partial_dir(root, iteration, dir, sizeof dir);
    int rc = remove_iter_dir(dir, err); /* a save that died half-way */
    if (rc) return rc;
    if (mkdir(dir, 0777) != 0) return mg_error_set(err, MG_ERR_IO, "cannot create %s: %s", dir, strerror(errno));
    partial_register(dir);
    return MG_OK;
}

void mg_ckpt_abort(const char *root, int64_t iteration) {
    char dir[PATH_MAX];
    partial_dir(root, iteration, dir, sizeof dir);
    mg_error ignored = {0};
    remove_iter_dir(dir, &ignored);
    atomic_store(&g_partial_set, 0);
}

int mg_ckpt_write_rank(const char *root, int64_t iteration, int rank, const mg_ckpt_piece *pieces, int n,
                       const char *const *held, int n_held, mg_error *err) {
    char dir[PATH_MAX], path[PATH_MAX + 32];
    partial_dir(root, iteration, dir, sizeof dir);
    snprintf(path, sizeof path, "%s/rank_%05d.safetensors", dir, rank);
    bool registered_here = !atomic_load(&g_partial_set);
    if (registered_here) partial_register(dir);
    mg_st_out *out = calloc((size_t)n + 1, sizeof *out);
    char **keys = calloc((size_t)n + 1, sizeof *keys);
    int64_t (*shapes)[1] = calloc((size_t)n + 1, sizeof *shapes);
    json_t *list = json_array();
    int rc = out && keys && shapes && list ? MG_OK : mg_error_set(err, MG_ERR_NOMEM, "out of memory");
    for (int i = 0; i < n && !rc; i++) {
        const mg_ckpt_piece *p = &pieces[i];
        rc = ckpt_check_piece(p, "checkpoint save", err);
        if (rc) break;
        int64_t bn = block_numel(p->ndim, p->block), lo = p->hi ? p->lo : 0, hi = p->hi ? p->hi : bn;
        size_t len = strlen(p->name) + 16;
        keys[i] = malloc(len);
        if (!keys[i]) {
            rc = mg_error_set(err, MG_ERR_NOMEM, "out of memory");
            break;
        }
        snprintf(keys[i], len, "%s#%d", p->name, i); /* a rank may hold several pieces of one tensor */
        bool whole = lo == 0 && hi == bn;
        out[i] = (mg_st_out){keys[i], p->dtype, whole ? p->ndim : 1, whole ? p->block : shapes[i], p->data};
        shapes[i][0] = hi - lo;
        char hash[24];
        snprintf(hash, sizeof hash, "%016" PRIx64, ckpt_hash(p->data, (size_t)(hi - lo) * mg_dtype_size(p->dtype)));
        json_t *e = json_pack("{s:s, s:s, s:o, s:o, s:o, s:I, s:I, s:s}", "key", keys[i], "name", p->name, "shape",
                              dims_json(p->ndim, p->shape), "offset", dims_json(p->ndim, p->offset), "block",
                              dims_json(p->ndim, p->block), "lo", (json_int_t)lo, "hi", (json_int_t)hi, "hash", hash);
        if (!e || json_array_append_new(list, e)) rc = mg_error_set(err, MG_ERR_NOMEM, "out of memory");
    }
    /* what the rank holds without writing it: finish checks that another rank did */
    json_t *holds = json_array();
    if (!holds) rc = mg_error_set(err, MG_ERR_NOMEM, "out of memory");
    for (int i = 0; i < n_held && !rc; i++)
        if (!held[i] || json_array_append_new(holds, json_string(held[i])))
            rc = mg_error_set(err, MG_ERR_INVALID, "checkpoint save: held tensor %d has no name", i);
    char *meta = NULL;
    if (!rc) {
        json_t *m = json_pack("{s:i, s:O, s:O}", "version", 1, "pieces", list, "holds", holds);
        meta = m ? json_dumps(m, JSON_COMPACT) : NULL;
        json_decref(m);
        if (!meta) rc = mg_error_set(err, MG_ERR_NOMEM, "out of memory");
    }
    if (!rc) {
        const char *mk[] = {"format", "mgraph"}, *mv[] = {"pt", meta};
        rc = mg_st_write(path, out, n, mk, mv, 2, true, err);
    }
    free(meta);
    json_decref(list);
    json_decref(holds);
    for (int i = 0; keys && i < n; i++) free(keys[i]);
    free(keys);
    free(shapes);
    free(out);
    if (registered_here) atomic_store(&g_partial_set, 0);
    return rc;
}

/* Reads rank r's piece list (its __metadata__["mgraph"]) into the index's tensors, and
 * the names it holds into held (name -> the first rank holding it). */
static int index_rank(const char *dir, int r, json_t *tensors, json_t *held, mg_error *err) {
    char path[PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/rank_%05d.safetensors", dir, r);
    mg_st_file *f = NULL;
    int rc = mg_st_open(path, &f, err);
    if (rc) return rc;
    const char *m = mg_st_metadata(f, "mgraph");
    json_t *meta = m ? json_loads(m, 0, NULL) : NULL, *pieces = json_object_get(meta, "pieces"), *p;
    size_t i;
    if (!json_is_array(pieces)) rc = mg_error_set(err, MG_ERR_IO, "%s: no mgraph piece list in __metadata__", path);
    json_array_foreach(pieces, i, p) {
        if (rc) break;
        const char *name = json_string_value(json_object_get(p, "name"));
        const char *key = json_string_value(json_object_get(p, "key"));
        const mg_st_entry *e = key ? mg_st_find(f, key) : NULL;
        if (!name || !e) {
            rc = mg_error_set(err, MG_ERR_IO, "%s: piece %zu has no name or no tensor", path, i);
            break;
        }
        json_t *t = json_object_get(tensors, name);
        if (!t) {
            t = json_pack("{s:s, s:O, s:[]}", "dtype", mg_st_dtype_name(e->dtype), "shape", json_object_get(p, "shape"),
                          "pieces");
            json_object_set_new(tensors, name, t);
        } else if (!json_equal(json_object_get(t, "shape"), json_object_get(p, "shape")) ||
                   strcmp(json_string_value(json_object_get(t, "dtype")), mg_st_dtype_name(e->dtype))) {
            rc = mg_error_set(err, MG_ERR_INVALID, "checkpoint save: ranks disagree on the shape or dtype of '%s'", name);
            break;
        }
        json_t *q = json_deep_copy(p);
        json_object_del(q, "name");
        json_object_del(q, "shape");
        json_object_set_new(q, "file", json_integer(r));
        json_array_append_new(json_object_get(t, "pieces"), q);
    }
    json_t *holds = json_object_get(meta, "holds"), *h; /* (absent from files written before it) */
    json_array_foreach(holds, i, h) {
        if (rc) break;
        if (!json_is_string(h)) {
            rc = mg_error_set(err, MG_ERR_IO, "%s: a held tensor's name is not a string", path);
            break;
        }
        if (!json_object_get(held, json_string_value(h))) json_object_set_new(held, json_string_value(h), json_integer(r));
    }
    json_decref(meta);
    mg_st_close(f);
    return rc;
}

/* ---- a save is whole: every held tensor written, each covered exactly once ------------- */
typedef struct cover_piece { int64_t off[MG_MAX_DIMS], blk[MG_MAX_DIMS], lo, hi; } cover_piece;

static int cmp_cover(const void *a, const void *b) {
    const cover_piece *x = a, *y = b;
    for (int d = 0; d < MG_MAX_DIMS; d++) {
        if (x->off[d] != y->off[d]) return x->off[d] < y->off[d] ? -1 : 1;
        if (x->blk[d] != y->blk[d]) return x->blk[d] < y->blk[d] ? -1 : 1;
    }
    return (x->lo > y->lo) - (x->lo < y->lo);
}

static bool same_block(const cover_piece *x, const cover_piece *y) {
    return !memcmp(x->off, y->off, sizeof x->off) && !memcmp(x->blk, y->blk, sizeof x->blk);
}

static bool blocks_meet(const cover_piece *x, const cover_piece *y, int ndim) {
    for (int d = 0; d < ndim; d++)
        if (x->off[d] + x->blk[d] <= y->off[d] || y->off[d] + y->blk[d] <= x->off[d]) return false;
    return true;
}

/* Tensor t of the index (its pieces as index_rank wrote them) is covered exactly once:
 * pieces of one block have disjoint ranges, distinct blocks do not meet, and the
 * elements add up to the tensor's. Sorting makes it O(n log n) in the pieces, plus
 * the square of the distinct blocks (a few: tp x ep blocks, not dp segments). */
static int check_cover(const char *name, json_t *t, mg_error *err) {
    json_t *shape = json_object_get(t, "shape"), *pieces = json_object_get(t, "pieces");
    int ndim = (int)json_array_size(shape);
    size_t n = json_array_size(pieces);
    int64_t total = 1;
    for (int d = 0; d < ndim; d++) total *= json_integer_value(json_array_get(shape, (size_t)d));
    cover_piece *v = calloc(n + 1, sizeof *v);
    if (!v) return mg_error_set(err, MG_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < n; i++) {
        json_t *p = json_array_get(pieces, i), *o = json_object_get(p, "offset"), *b = json_object_get(p, "block");
        for (int d = 0; d < ndim; d++) {
            v[i].off[d] = json_integer_value(json_array_get(o, (size_t)d));
            v[i].blk[d] = json_integer_value(json_array_get(b, (size_t)d));
        }
        v[i].lo = json_integer_value(json_object_get(p, "lo"));
        v[i].hi = json_integer_value(json_object_get(p, "hi"));
    }
    qsort(v, n, sizeof *v, cmp_cover);
    int64_t sum = 0;
    const char *why = NULL;
    size_t *heads = calloc(n + 1, sizeof *heads), nh = 0; /* the first piece of each distinct block */
    if (!heads) {
        free(v);
        return mg_error_set(err, MG_ERR_NOMEM, "out of memory");
    }
    for (size_t i = 0; i < n && !why; i++) {
        sum += v[i].hi - v[i].lo;
        if (i > 0 && same_block(&v[i], &v[i - 1])) {
            if (v[i].lo < v[i - 1].hi) why = "two pieces hold the same elements";
        } else {
            for (size_t k = 0; k < nh && !why; k++)
                if (blocks_meet(&v[heads[k]], &v[i], ndim)) why = "two blocks overlap";
            heads[nh++] = i;
        }
    }
    free(heads);
    free(v);
    if (!why && sum != total) why = "its pieces do not cover it";
    if (why)
        return mg_error_set(err, MG_ERR_RUNTIME,
                            "checkpoint save: tensor '%s' is not written whole (%s: %lld of %lld elements written)",
                            name, why, (long long)sum, (long long)total);
    return MG_OK;
}

static int check_whole(json_t *tensors, json_t *held, mg_error *err) {
    const char *name;
    json_t *v;
    json_object_foreach(held, name, v) {
        if (!json_object_get(tensors, name))
            return mg_error_set(err, MG_ERR_RUNTIME,
                                "checkpoint save: no rank wrote '%s', which rank %lld holds (every state tensor must "
                                "have a rank that writes it): the checkpoint is not put in place",
                                name, (long long)json_integer_value(v));
    }
    json_object_foreach(tensors, name, v) {
        int rc = check_cover(name, v, err);
        if (rc) return rc;
    }
    return MG_OK;
}

/* The index's own checksum: of its compact, key-sorted text without the "checksum"
 * field (jansson prints integers, strings and doubles the same way after a reload). */
static int index_hash(json_t *idx, uint64_t *h, mg_error *err) {
    json_t *copy = json_copy(idx);
    if (copy) json_object_del(copy, "checksum");
    char *text = copy ? json_dumps(copy, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
    json_decref(copy);
    if (!text) return mg_error_set(err, MG_ERR_NOMEM, "out of memory");
    *h = ckpt_hash(text, strlen(text));
    free(text);
    return MG_OK;
}

static int seal_index(json_t *idx, mg_error *err) {
    uint64_t h;
    int rc = index_hash(idx, &h, err);
    char hex[24];
    snprintf(hex, sizeof hex, "%016" PRIx64, h);
    if (!rc) json_object_set_new(idx, "checksum", json_string(hex));
    return rc;
}

typedef struct iter_entry { int64_t it; char name[256]; } iter_entry;

static int cmp_iter(const void *a, const void *b) {
    const iter_entry *x = a, *y = b;
    return (x->it < y->it) - (x->it > y->it); /* newest first */
}

/* "iter_0000100" exactly: 7+ digits, nothing else. */
static bool parse_iter_name(const char *s, int64_t *it) {
    if (strncmp(s, "iter_", 5)) return false;
    const char *d = s + 5;
    size_t n = strlen(d);
    if (n < 7 || n > 18) return false;
    for (size_t i = 0; i < n; i++)
        if (d[i] < '0' || d[i] > '9') return false;
    *it = strtoll(d, NULL, 10);
    return true;
}

/* Keeps the current iteration and the retain-1 newest older ones this module wrote;
 * directories of later iterations (a run resumed from an earlier checkpoint) are left
 * alone. */
static int retain_newest(const char *root, int64_t current, int retain, mg_error *err) {
    if (retain <= 0) return MG_OK;
    DIR *d = opendir(root);
    if (!d) return mg_error_set(err, MG_ERR_IO, "cannot read %s: %s", root, strerror(errno));
    iter_entry *v = NULL;
    int n = 0, cap = 0, rc = MG_OK;
    struct dirent *de;
    while ((de = readdir(d))) {
        int64_t it;
        if (!parse_iter_name(de->d_name, &it) || it >= current) continue;
        char idx[PATH_MAX];
        snprintf(idx, sizeof idx, "%s/%s/" INDEX, root, de->d_name);
        if (access(idx, F_OK) != 0) continue; /* not recognisably ours */
        if (n == cap) {
            cap = cap ? 2 * cap : 16;
            iter_entry *nv = realloc(v, (size_t)cap * sizeof *v);
            if (!nv) {
                rc = mg_error_set(err, MG_ERR_NOMEM, "out of memory");
                break;
            }
            v = nv;
        }
        v[n].it = it;
        snprintf(v[n].name, sizeof v[n].name, "%s", de->d_name);
        n++;
    }
    closedir(d);
    if (!rc && n) qsort(v, (size_t)n, sizeof *v, cmp_iter);
    for (int i = retain - 1; !rc && i < n; i++) {
        char p[PATH_MAX];
        snprintf(p, sizeof p, "%s/%s", root, v[i].name);
        rc = remove_iter_dir(p, err);
    }
    free(v);
    return rc;
}

int mg_ckpt_finish(const char *root, int64_t iteration, int nranks, const char *meta_json, int retain,
                   mg_error *err) {
    char dir[PATH_MAX], final[PATH_MAX], path[PATH_MAX + 32];
    partial_dir(root, iteration, dir, sizeof dir);
    mg_ckpt_iter_dir(root, iteration, final, sizeof final);
    json_error_t je;
    json_t *meta = json_loads(meta_json ? meta_json : "{}", 0, &je);
    if (!json_is_object(meta)) {
        json_decref(meta);
        return mg_error_set(err, MG_ERR_INVALID, "checkpoint metadata is not a JSON object: %s", je.text);
    }
    json_t *files = json_array(), *tensors = json_object(), *held = json_object();
    int rc = MG_OK;
    for (int r = 0; r < nranks && !rc; r++) {
        snprintf(path, sizeof path, "rank_%05d.safetensors", r);
        json_array_append_new(files, json_string(path));
        rc = index_rank(dir, r, tensors, held, err);
    }
    if (!rc) rc = check_whole(tensors, held, err);
    json_decref(held);
    if (rc) { /* an incomplete save is not kept half-way either */
        mg_error ignored = {0};
        remove_iter_dir(dir, &ignored);
        atomic_store(&g_partial_set, 0);
    }
    json_t *idx = json_pack("{s:s, s:i, s:I, s:o, s:o, s:o}", "format", FORMAT, "version", 1, "iteration",
                            (json_int_t)iteration, "files", files, "tensors", tensors, "meta", meta);
    if (idx && !rc) rc = seal_index(idx, err);
    char *text = idx && !rc ? json_dumps(idx, JSON_INDENT(1) | JSON_SORT_KEYS) : NULL;
    json_decref(idx);
    if (!rc && !text) rc = mg_error_set(err, MG_ERR_NOMEM, "out of memory");
    mg_outfile_options fs = {true, false};
    if (!rc) {
        snprintf(path, sizeof path, "%s/" INDEX, dir);
        rc = mg_write_file_atomic(path, "checkpoint index", text, strlen(text), &fs, err);
    }
    free(text);
    if (!rc) rc = sync_dir(dir, err);
    /* an iteration directory left by a run that died before updating the tracker */
    if (!rc) rc = remove_iter_dir(final, err);
    if (!rc && rename(dir, final) != 0) rc = mg_error_set(err, MG_ERR_IO, "cannot rename %s to %s: %s", dir, final, strerror(errno));
    atomic_store(&g_partial_set, 0); /* (in place, or left for the next save to remove) */
    if (!rc) rc = sync_dir(root, err);
    if (!rc) {
        char num[32];
        int len = snprintf(num, sizeof num, "%" PRId64 "\n", iteration);
        snprintf(path, sizeof path, "%s/" TRACKER, root);
        rc = mg_write_file_atomic(path, "checkpoint tracker", num, (size_t)len, &fs, err);
    }
    if (!rc) rc = retain_newest(root, iteration, retain, err);
    return rc;
}

/* ---- reading --------------------------------------------------------------------------- */
typedef struct stored_piece {
    int file;
    const mg_st_entry *e;
    int64_t offset[MG_MAX_DIMS], block[MG_MAX_DIMS];
    int64_t lo, hi;
    uint64_t hash;
    bool verified;
} stored_piece;

typedef struct stored_tensor {
    char *name;
    mg_dtype dtype;
    int ndim;
    int64_t shape[MG_MAX_DIMS];
    stored_piece *p;
    int n;
} stored_tensor;

struct mg_ckpt {
    char *dir;
    int64_t iteration;
    char *meta;
    mg_st_file **files;
    int n_files;
    stored_tensor *t;
    int n_t;
};

void mg_ckpt_close(mg_ckpt *c) {
    if (!c) return;
    for (int i = 0; i < c->n_files; i++) mg_st_close(c->files[i]);
    free(c->files);
    for (int i = 0; i < c->n_t; i++) {
        free(c->t[i].name);
        free(c->t[i].p);
    }
    free(c->t);
    free(c->meta);
    free(c->dir);
    free(c);
}

int64_t mg_ckpt_iteration(const mg_ckpt *c) { return c->iteration; }
const char *mg_ckpt_meta(const mg_ckpt *c) { return c->meta; }
const char *mg_ckpt_dir(const mg_ckpt *c) { return c->dir; }
int mg_ckpt_n_tensors(const mg_ckpt *c) { return c->n_t; }
const char *mg_ckpt_tensor_name(const mg_ckpt *c, int i) { return i >= 0 && i < c->n_t ? c->t[i].name : NULL; }

static stored_tensor *find_tensor(const mg_ckpt *c, const char *name) {
    int lo = 0, hi = c->n_t - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2, k = strcmp(c->t[mid].name, name);
        if (!k) return &c->t[mid];
        if (k < 0) lo = mid + 1;
        else hi = mid - 1;
    }
    return NULL;
}

bool mg_ckpt_has(const mg_ckpt *c, const char *name, mg_dtype *dtype, int *ndim, int64_t shape[MG_MAX_DIMS]) {
    stored_tensor *t = find_tensor(c, name);
    if (!t) return false;
    if (dtype) *dtype = t->dtype;
    if (ndim) *ndim = t->ndim;
    if (shape) memcpy(shape, t->shape, sizeof t->shape);
    return true;
}

/* An array of ndim integers in [0, max]. */
static bool get_dims(json_t *a, int ndim, int64_t *out, int64_t max) {
    if (!json_is_array(a) || (int)json_array_size(a) != ndim) return false;
    for (int d = 0; d < ndim; d++) {
        json_t *v = json_array_get(a, (size_t)d);
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > max) return false;
        out[d] = json_integer_value(v);
    }
    return true;
}

static int parse_piece(mg_ckpt *c, const char *ipath, stored_tensor *t, json_t *jp, stored_piece *sp, mg_error *err) {
    const char *what = t->name;
    json_t *file = json_object_get(jp, "file"), *key = json_object_get(jp, "key"), *lo = json_object_get(jp, "lo"),
           *hi = json_object_get(jp, "hi"), *hash = json_object_get(jp, "hash");
    if (!json_is_integer(file) || json_integer_value(file) < 0 || json_integer_value(file) >= c->n_files)
        return mg_error_set(err, MG_ERR_IO, "%s: '%s': a piece's file is not an index into files", ipath, what);
    sp->file = (int)json_integer_value(file);
    mg_st_file *f = c->files[sp->file];
    if (!json_is_string(key) || !(sp->e = mg_st_find(f, json_string_value(key))))
        return mg_error_set(err, MG_ERR_IO, "%s: '%s': piece key missing from %s", ipath, what, mg_st_path(f));
    for (int d = t->ndim; d < MG_MAX_DIMS; d++) sp->offset[d] = 0, sp->block[d] = 1;
    if (!get_dims(json_object_get(jp, "offset"), t->ndim, sp->offset, INT64_C(1) << 40) ||
        !get_dims(json_object_get(jp, "block"), t->ndim, sp->block, INT64_C(1) << 40))
        return mg_error_set(err, MG_ERR_IO, "%s: '%s': a piece's offset or block is malformed", ipath, what);
    for (int d = 0; d < t->ndim; d++)
        if (sp->offset[d] + sp->block[d] > t->shape[d])
            return mg_error_set(err, MG_ERR_IO, "%s: '%s': a piece's block leaves the tensor on dim %d", ipath, what, d);
    int64_t bn = block_numel(t->ndim, sp->block);
    if (!json_is_integer(lo) || !json_is_integer(hi) || json_integer_value(lo) < 0 ||
        json_integer_value(hi) < json_integer_value(lo) || json_integer_value(hi) > bn)
        return mg_error_set(err, MG_ERR_IO, "%s: '%s': a piece's range [lo, hi) is not inside its block", ipath, what);
    sp->lo = json_integer_value(lo);
    sp->hi = json_integer_value(hi);
    if (!json_is_string(hash) || strlen(json_string_value(hash)) != 16 ||
        sscanf(json_string_value(hash), "%16" SCNx64, &sp->hash) != 1)
        return mg_error_set(err, MG_ERR_IO, "%s: '%s': a piece's hash is not 16 hex digits", ipath, what);
    if (sp->e->dtype != t->dtype ||
        (uint64_t)(sp->hi - sp->lo) * mg_dtype_size(t->dtype) != sp->e->end - sp->e->begin)
        return mg_error_set(err, MG_ERR_IO, "%s: '%s' in %s has dtype %s and %llu bytes, the index says %s x %lld", ipath,
                            what, mg_st_path(f), mg_st_dtype_name(sp->e->dtype),
                            (unsigned long long)(sp->e->end - sp->e->begin), mg_st_dtype_name(t->dtype),
                            (long long)(sp->hi - sp->lo));
    return MG_OK;
}

static int cmp_tensor(const void *a, const void *b) {
    return strcmp(((const stored_tensor *)a)->name, ((const stored_tensor *)b)->name);
}

static int parse_index(mg_ckpt *c, const char *ipath, json_t *idx, mg_error *err) {
    json_t *fmt = json_object_get(idx, "format"), *ver = json_object_get(idx, "version"),
           *it = json_object_get(idx, "iteration"), *files = json_object_get(idx, "files"),
           *tensors = json_object_get(idx, "tensors"), *meta = json_object_get(idx, "meta");
    if (!json_is_string(fmt) || strcmp(json_string_value(fmt), FORMAT))
        return mg_error_set(err, MG_ERR_IO, "%s: not an mgraph checkpoint index (format is not \"" FORMAT "\")", ipath);
    if (!json_is_integer(ver) || json_integer_value(ver) != 1)
        return mg_error_set(err, MG_ERR_IO, "%s: unsupported checkpoint version (this mgraph reads version 1)", ipath);

    if (!json_is_integer(it) || json_integer_value(it) < 0)
        return mg_error_set(err, MG_ERR_IO, "%s: iteration missing or negative", ipath);
    c->iteration = json_integer_value(it);
    if (!json_is_object(meta)) return mg_error_set(err, MG_ERR_IO, "%s: meta missing or not an object", ipath);
    if (!(c->meta = json_dumps(meta, JSON_COMPACT | JSON_SORT_KEYS))) return mg_error_set(err, MG_ERR_NOMEM, "out of memory");
    if (!json_is_array(files) || json_array_size(files) == 0 || json_array_size(files) > 1000000)
        return mg_error_set(err, MG_ERR_IO, "%s: files missing or empty", ipath);
    c->n_files = 0;
    c->files = calloc(json_array_size(files), sizeof *c->files);
    if (!c->files) return mg_error_set(err, MG_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < json_array_size(files); i++) {
        const char *fn = json_string_value(json_array_get(files, i));
        if (!fn || !is_rank_file(fn)) /* never a path leaving the directory */
            return mg_error_set(err, MG_ERR_IO, "%s: files[%zu] is not a rank_NNNNN.safetensors name", ipath, i);
        char p[PATH_MAX + 32];
        snprintf(p, sizeof p, "%s/%s", c->dir, fn);
        int rc = mg_st_open(p, &c->files[c->n_files], err);
        if (rc) return rc;
        c->n_files++;
    }
    if (!json_is_object(tensors)) return mg_error_set(err, MG_ERR_IO, "%s: tensors missing or not an object", ipath);
    c->t = calloc(json_object_size(tensors) + 1, sizeof *c->t);
    if (!c->t) return mg_error_set(err, MG_ERR_NOMEM, "out of memory");
    const char *name;
    json_t *jt;
    json_object_foreach(tensors, name, jt) {
        stored_tensor *t = &c->t[c->n_t];
        if (!(t->name = strdup(name))) return mg_error_set(err, MG_ERR_NOMEM, "out of memory");
        c->n_t++;
        json_t *dt = json_object_get(jt, "dtype"), *sh = json_object_get(jt, "shape"), *ps = json_object_get(jt, "pieces");
        if (!json_is_string(dt) || !mg_st_dtype_parse(json_string_value(dt), &t->dtype))
            return mg_error_set(err, MG_ERR_IO, "%s: '%s': dtype missing or unknown", ipath, name);
        if (!json_is_array(sh) || json_array_size(sh) > MG_MAX_DIMS)
            return mg_error_set(err, MG_ERR_IO, "%s: '%s': shape missing or more than %d dims", ipath, name, MG_MAX_DIMS);
        t->ndim = (int)json_array_size(sh);
        if (!get_dims(sh, t->ndim, t->shape, INT64_C(1) << 40))
            return mg_error_set(err, MG_ERR_IO, "%s: '%s': shape is not non-negative integers", ipath, name);
        if (!json_is_array(ps) || json_array_size(ps) == 0 || json_array_size(ps) > 1000000)
            return mg_error_set(err, MG_ERR_IO, "%s: '%s': pieces missing or empty", ipath, name);
        if (!(t->p = calloc(json_array_size(ps), sizeof *t->p))) return mg_error_set(err, MG_ERR_NOMEM, "out of memory");
        for (size_t k = 0; k < json_array_size(ps); k++) {
            int rc = parse_piece(c, ipath, t, json_array_get(ps, k), &t->p[k], err);
            if (rc) return rc;
            t->n++;
        }
    }
    qsort(c->t, (size_t)c->n_t, sizeof *c->t, cmp_tensor);
    /* last, so that the field checks above name what is wrong in an edited index */
    uint64_t want = 0, got = 0;
    json_t *sum = json_object_get(idx, "checksum");
    if (!json_is_string(sum) || strlen(json_string_value(sum)) != 16 ||
        sscanf(json_string_value(sum), "%16" SCNx64, &want) != 1)
        return mg_error_set(err, MG_ERR_IO, "%s: checksum missing or not 16 hex digits", ipath);
    int hrc = index_hash(idx, &got, err);
    if (hrc) return hrc;
    if (got != want) return mg_error_set(err, MG_ERR_IO, "%s fails its checksum: the file is corrupt or was edited", ipath);
    return MG_OK;
}

/* The iteration the tracker of root names, -1 when root has no tracker, -2 for
 * Megatron's "release" (the checkpoint is DIR/release). Like Megatron's read_metadata,
 * the text is read without its surrounding whitespace. */
static int read_tracker(const char *root, int64_t *it, mg_error *err) {
    char p[PATH_MAX + 40], buf[64];
    snprintf(p, sizeof p, "%s/" TRACKER, root);
    FILE *f = NULL;
    *it = -1;
    if (access(p, F_OK) != 0 && errno == ENOENT) return MG_OK;
    int rc = mg_input_fopen(p, "checkpoint tracker", &f, err);
    if (rc) return rc;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    /* a NUL inside would end the string early and let "3\0junk" read as 3 */
    if (memchr(buf, '\0', n)) return mg_error_set(err, MG_ERR_IO, "%s does not hold an iteration number", p);
    char *s = buf, *end = NULL;
    while (*s == ' ' || *s == '\t' || *s == '\n' || *s == '\r') s++;
    size_t len = strlen(s);
    while (len && (s[len - 1] == ' ' || s[len - 1] == '\t' || s[len - 1] == '\n' || s[len - 1] == '\r')) s[--len] = '\0';
    if (!strcmp(s, "release")) {
        *it = -2;
        return MG_OK;
    }
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (!n || errno || !end || *end || v < 0 || s[0] < '0' || s[0] > '9')
        return mg_error_set(err, MG_ERR_IO, "%s does not hold an iteration number", p);
    *it = v;
    return MG_OK;
}

int mg_ckpt_open(const char *path, mg_ckpt **out, mg_error *err) {
    *out = NULL;
    /* Megatron-LM's checkpoints share the tracker and the iteration directories' names */
    mg_megatron_info mi;
    int rc = mg_megatron_probe(path, &mi, err);
    if (rc) return rc;
    if (mi.format != MG_MEGATRON_NONE)
        return mg_error_set(err, MG_ERR_UNSUPPORTED, "%s is a Megatron-LM checkpoint (--ckpt-format %s, %s %" PRId64 "), "
                            "not mgraph's: convert it first with mgraph-convert --from-megatron %s --save NEW_DIR "
                            "(the model, iteration, schedule and optimizer state), then load NEW_DIR", path,
                            mg_megatron_format_name(mi.format), mi.release ? "release" : "iteration", mi.iteration, path);
    int64_t tracked;
    rc = read_tracker(path, &tracked, err);
    if (rc) return rc;
    mg_ckpt *c = calloc(1, sizeof *c);
    char dir[PATH_MAX], ipath[PATH_MAX + 16];
    if (!c) return mg_error_set(err, MG_ERR_NOMEM, "out of memory");
    if (tracked >= 0) mg_ckpt_iter_dir(path, tracked, dir, sizeof dir);
    else if (tracked == -2) snprintf(dir, sizeof dir, "%s/release", path);
    else snprintf(dir, sizeof dir, "%s", path);
    snprintf(ipath, sizeof ipath, "%s/" INDEX, dir);
    if (!(c->dir = strdup(dir))) rc = mg_error_set(err, MG_ERR_NOMEM, "out of memory");
    json_error_t je;
    json_t *idx = NULL;
    if (!rc && access(ipath, F_OK) != 0 && errno == ENOENT)
        rc = tracked == -2 ? mg_error_set(err, MG_ERR_IO, "%s names the release checkpoint, but %s is missing", path, ipath)
             : tracked >= 0 ? mg_error_set(err, MG_ERR_IO, "%s names iteration %" PRId64 ", but %s is missing",
                                         path, tracked, ipath)
                          : mg_error_set(err, MG_ERR_IO, "%s is not a checkpoint (no " TRACKER " and no " INDEX ")", path);
    FILE *jf = NULL;
    if (!rc) rc = mg_input_fopen(ipath, "checkpoint index", &jf, err);
    if (!rc && !(idx = json_loadf(jf, JSON_REJECT_DUPLICATES, &je)))
        rc = mg_error_set(err, MG_ERR_IO, "%s: not valid JSON (line %d: %s)", ipath, je.line, je.text);
    if (jf) fclose(jf);
    if (!rc && !json_is_object(idx)) rc = mg_error_set(err, MG_ERR_IO, "%s: not a JSON object", ipath);
    if (!rc) rc = parse_index(c, ipath, idx, err);
    if (!rc && tracked >= 0 && c->iteration != tracked)
        rc = mg_error_set(err, MG_ERR_IO, "%s: iteration %" PRId64 ", the tracker says %" PRId64, ipath, c->iteration, tracked);
    json_decref(idx);
    if (rc) {
        mg_ckpt_close(c);
        return rc;
    }
    *out = c;
    return MG_OK;
}

/* ---- filling (resharding) ---------------------------------------------------------------- */
static int verify(mg_ckpt *c, stored_tensor *t, stored_piece *sp, mg_error *err) {
    if (sp->verified) return MG_OK;
    mg_st_file *f = c->files[sp->file];
    uint64_t h = ckpt_hash(mg_st_data(f, sp->e), (size_t)(sp->e->end - sp->e->begin));
    if (h != sp->hash)
        return mg_error_set(err, MG_ERR_IO, "%s: the data of '%s' (%s) fails its checksum: the file is corrupt",
                            mg_st_path(f), t->name, sp->e->key);
    sp->verified = true;
    return MG_OK;
}

static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }
static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* Copies the elements stored piece sp shares with wanted piece w (both of tensor t,
 * normalised to >= 1 dims) and marks them in `seen`. Works row by row along the last
 * dimension, where both pieces are contiguous. */
static bool boxes_meet(const stored_piece *sp, int nd, const int64_t *wo, const int64_t *wb) {
    for (int d = 0; d < nd; d++)
        if (sp->offset[d] >= wo[d] + wb[d] || wo[d] >= sp->offset[d] + sp->block[d]) return false;
    return true;
}

static void copy_overlap(const mg_ckpt *c, const stored_tensor *t, const stored_piece *sp, const mg_ckpt_piece *w,
                         int nd, const int64_t *wo, const int64_t *wb, int64_t wlo, int64_t whi, uint8_t *seen) {
    size_t es = mg_dtype_size(t->dtype), ew = mg_dtype_size(w->dtype);
    const uint8_t *src = mg_st_data(c->files[sp->file], sp->e);
    uint8_t *dst = w->data;
    int L = nd - 1;
    int64_t wrow = wb[L], srow = sp->block[L];
    if (whi <= wlo || wrow == 0) return;
    for (int64_t r = wlo / wrow; r <= (whi - 1) / wrow; r++) {
        /* the row's coordinates in the logical tensor, and its row index in the stored block */
        int64_t rem = r, rs = 0, stride = 1;
        bool inside = true;
        for (int d = L - 1; d >= 0; d--) {
            int64_t g = wo[d] + rem % wb[d];
            rem /= wb[d];
            if (g < sp->offset[d] || g >= sp->offset[d] + sp->block[d]) {
                inside = false;
                break;
            }
            rs += (g - sp->offset[d]) * stride;
            stride *= sp->block[d];
        }
        if (!inside) continue;
        int64_t c0 = max64(wo[L], sp->offset[L]), c1 = min64(wo[L] + wrow, sp->offset[L] + srow);
        c0 = max64(c0, wlo - r * wrow + wo[L]);
        c1 = min64(c1, whi - r * wrow + wo[L]);
        c0 = max64(c0, sp->lo - rs * srow + sp->offset[L]);
        c1 = min64(c1, sp->hi - rs * srow + sp->offset[L]);
        if (c1 <= c0) continue;
        int64_t fw = r * wrow + (c0 - wo[L]) - wlo, fs = rs * srow + (c0 - sp->offset[L]) - sp->lo;
        if (t->dtype == w->dtype) memcpy(dst + (size_t)fw * es, src + (size_t)fs * es, (size_t)(c1 - c0) * es);
        else mg_convert(dst + (size_t)fw * ew, w->dtype, src + (size_t)fs * es, t->dtype, c1 - c0);
        memset(seen + fw, 1, (size_t)(c1 - c0));
    }
}

static bool is_float(mg_dtype d) { return d == MG_F32 || mg_dtype_is_low(d); }

int mg_ckpt_fill(mg_ckpt *c, const mg_ckpt_piece *want, int n, mg_error *err) {
    for (int i = 0; i < n; i++) {
        const mg_ckpt_piece *w = &want[i];
        int rc = ckpt_check_piece(w, "checkpoint load", err);
        if (rc) return rc;
        stored_tensor *t = find_tensor(c, w->name);
        if (!t) return mg_error_set(err, MG_ERR_INVALID, "%s: the checkpoint has no tensor '%s'", c->dir, w->name);
        /* real values convert between float storages (a bf16 model copy loads an f32
         * parameter, f32 moments load narrow ones and back) */
        bool same = t->ndim == w->ndim && (t->dtype == w->dtype || (is_float(t->dtype) && is_float(w->dtype)));
        for (int d = 0; same && d < t->ndim; d++) same = t->shape[d] == w->shape[d];
        if (!same) {
            char a[128] = "", b[128] = "";
            for (int d = 0; d < t->ndim; d++) snprintf(a + strlen(a), sizeof a - strlen(a), "%s%lld", d ? ", " : "", (long long)t->shape[d]);
            for (int d = 0; d < w->ndim; d++) snprintf(b + strlen(b), sizeof b - strlen(b), "%s%lld", d ? ", " : "", (long long)w->shape[d]);
            return mg_error_set(err, MG_ERR_INVALID, "%s: '%s' is %s [%s] in the checkpoint, the model wants %s [%s]", c->dir,
                                w->name, mg_st_dtype_name(t->dtype), a, mg_st_dtype_name(w->dtype), b);
        }
        /* scalars as one-element vectors */
        int nd = t->ndim ? t->ndim : 1;
        int64_t wo[MG_MAX_DIMS], wb[MG_MAX_DIMS];
        for (int d = 0; d < nd; d++) {
            wo[d] = t->ndim ? w->offset[d] : 0;
            wb[d] = t->ndim ? w->block[d] : 1;
        }
        int64_t bn = block_numel(nd, wb), wlo = w->hi ? w->lo : 0, whi = w->hi ? w->hi : bn;
        uint8_t *seen = calloc((size_t)(whi - wlo) + 1, 1);
        if (!seen) return mg_error_set(err, MG_ERR_NOMEM, "out of memory");
        for (int k = 0; k < t->n && !rc; k++) {
            stored_piece *sp = &t->p[k];
            if (!boxes_meet(sp, nd, wo, wb)) continue; /* a rank reads (and checks) only what it needs */
            rc = verify(c, t, sp, err);
            if (!rc) copy_overlap(c, t, sp, w, nd, wo, wb, wlo, whi, seen);
        }
        int64_t missing = 0;
        for (int64_t e = 0; !rc && e < whi - wlo; e++) missing += !seen[e];
        free(seen);
        if (rc) return rc;
        if (missing)
            return mg_error_set(err, MG_ERR_INVALID, "%s: the checkpoint's pieces of '%s' miss %lld of the %lld elements wanted",
                                c->dir, w->name, (long long)missing, (long long)(whi - wlo));
    }
    return MG_OK;
}

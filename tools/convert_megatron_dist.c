/* Megatron's --ckpt-format torch_dist read as logical tensors (convert_megatron_internal.h).
 *
 * The iteration directory holds metadata.json ({"sharded_backend": "torch_dist", ...}),
 * PyTorch Distributed Checkpoint's .metadata (a pickle of its Metadata dataclass:
 * state_dict_metadata {key: TensorStorageMetadata(properties, size, chunks =
 * [ChunkStorageMetadata(offsets, sizes)]) or BytesStorageMetadata()}, storage_data
 * {MetadataIndex(fqn, offset, index): _StorageInfo(relative_path, offset, length)}) and
 * the __R_N.distcp files the storage entries point into: each chunk a torch.save archive,
 * each object (Megatron's ShardedObject) a torch.save of a list of its values. The
 * common state (args, iteration, the scheduler, the optimizer's param groups) is the
 * object "common_state" (Megatron-Core >= 0.15) or common.pt beside (older).
 *
 * Megatron-Core's keys are the modules' names with the layers stacked: every layer's
 * tensor is one tensor "decoder.layers.<name>" of [num_layers, ...] (its pipeline offset a
 * prepended axis), or "decoder.layers.<i>.<name>" when the layers are not homogeneous.
 * linear_fc1 of a gated MLP is stored as [gate; up] (apply_swiglu_sharded_factory), or as
 * "<key>_w" and "<key>_v" with singleton local shards. The distributed optimizer's state is
 * in model space with --dist-ckpt-optim-fully-reshardable ("optimizer.state.param.<key>",
 * ".exp_avg.", ".exp_avg_sq."; "fp32_param" in the older fully_sharded_model_space), or
 * in its flat per-bucket buffers by default (dp_reshardable, "optimizer.distributed.
 * dp_group_idx_N...."), which this reader does not place: such a checkpoint converts
 * with --no-load-optim only (model, iteration and schedule). */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "convert_megatron_internal.h"
#include "mgraph/infile.h"

#define MAXD 6

typedef struct dchunk {
    int64_t off[MAXD], size[MAXD];
    const char *file;          /* relative path */
    int64_t at, len;           /* byte range in it */
} dchunk;

typedef struct dtensor {
    const char *fqn;
    int ndim;
    int64_t size[MAXD];
    dchunk *c;
    int n;
    bool used;                 /* asked for (a whole tensor) */
    unsigned char *layer_used; /* stacked: which layers were asked for */
} dtensor;

typedef struct dfile {
    char path[4400];
    const void *map;
    size_t len;
} dfile;

typedef struct dsrc {
    ms_src base;
    char dir[4200], what[256];
    mg_torch_file *meta, *common_file;
    const mg_pk *common;
    dtensor *t;
    int nt;
    dfile files[256];
    int nfiles;
    int64_t layers;
    const char *opt_prefix[3];  /* "optimizer.state.param." or fp32_param, exp_avg, exp_avg_sq */
} dsrc;

static int cmp_fqn(const void *a, const void *b) { return strcmp(((const dtensor *)a)->fqn, ((const dtensor *)b)->fqn); }

static dtensor *find_t(dsrc *s, const char *fqn) {
    dtensor key = {.fqn = fqn};
    return s->nt ? bsearch(&key, s->t, (size_t)s->nt, sizeof key, cmp_fqn) : NULL;
}

static bool dims_of(const mg_pk *v, int64_t *out, int *n) {
    if (!v || (v->kind != MG_PK_TUPLE && v->kind != MG_PK_LIST) || v->len > MAXD) return false;
    for (size_t i = 0; i < v->len; i++)
        if (!mg_pk_int(v->items[i], &out[i]) || out[i] < 0 || out[i] > ((int64_t)1 << 40)) return false;
    *n = (int)v->len;
    return true;
}

static int map_file(dsrc *s, const char *rel, dfile **out, mg_error *err) {
    for (int i = 0; i < s->nfiles; i++)
        if (!strcmp(strrchr(s->files[i].path, '/') + 1, rel)) {
            *out = &s->files[i];
            return MG_OK;
        }
    if (s->nfiles == 256) return mg_error_set(err, MG_ERR_UNSUPPORTED, "%s: more than 256 .distcp files", s->dir);
    if (strchr(rel, '/') || !strcmp(rel, "..")) return mg_error_set(err, MG_ERR_IO, "%s/.metadata names a file %s outside it", s->dir, rel);
    dfile *f = &s->files[s->nfiles];
    snprintf(f->path, sizeof f->path, "%s/%s", s->dir, rel);
    int rc = mg_input_map(f->path, "torch_dist checkpoint file", &f->map, &f->len, err);
    if (rc) return rc;
    s->nfiles++;
    *out = f;
    return MG_OK;
}

/* The torch.save archive a storage entry names. */
static int open_item(dsrc *s, const char *rel, int64_t at, int64_t len, const char *what, mg_torch_file **out,
                     mg_error *err) {
    dfile *f = NULL;
    int rc = map_file(s, rel, &f, err);
    if (rc) return rc;
    if (at < 0 || len <= 0 || (uint64_t)at > f->len || (uint64_t)len > f->len - (uint64_t)at)
        return mg_error_set(err, MG_ERR_IO, "%s: %s's bytes [%lld, +%lld) run past its end (%zu bytes: truncated?)", f->path,
                            what, (long long)at, (long long)len, f->len);
    char name[4600];
    snprintf(name, sizeof name, "%s (%s)", f->path, what);
    rc = mg_torch_open_mem((const char *)f->map + at, (size_t)len, name, out, err);
    if (!rc) rc = mg_torch_verify(*out, err);
    return rc;
}

/* .metadata: every tensor's chunks and where each is stored. */
static int read_metadata(dsrc *s, mg_error *err) {
    char path[4400];
    snprintf(path, sizeof path, "%s/.metadata", s->dir);
    int rc = mg_torch_open(path, "torch_dist metadata", true, &s->meta, err);
    if (rc) return rc;
    const mg_pk *md = mg_torch_root(s->meta);
    const mg_pk *sdm = mg_pk_attr(md, "state_dict_metadata"), *sd = mg_pk_attr(md, "storage_data");
    if (!sdm || sdm->kind != MG_PK_DICT || !sd || sd->kind != MG_PK_DICT)
        return mg_error_set(err, MG_ERR_IO, "%s: not PyTorch Distributed Checkpoint's Metadata (no state_dict_metadata / "
                            "storage_data)", path);
    s->t = calloc(sdm->len / 2 + 1, sizeof *s->t);
    if (!s->t) return mg_error_set(err, MG_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i + 1 < sdm->len; i += 2) {
        const char *fqn = mg_pk_str(sdm->items[i]);
        const mg_pk *tm = sdm->items[i + 1];
        if (!fqn) return mg_error_set(err, MG_ERR_IO, "%s: a key that is not a string", path);
        if (strstr(mg_pk_call_name(tm), "BytesStorageMetadata")) continue;
        const mg_pk *chunks = mg_pk_attr(tm, "chunks");
        dtensor *t = &s->t[s->nt];
        t->fqn = fqn;
        if (!dims_of(mg_pk_attr(tm, "size"), t->size, &t->ndim) || !chunks || chunks->kind != MG_PK_LIST)
            return mg_error_set(err, MG_ERR_IO, "%s: tensor %s has no size / chunks", path, fqn);
        if (!(t->c = calloc(chunks->len + 1, sizeof *t->c))) return mg_error_set(err, MG_ERR_NOMEM, "out of memory");
        for (size_t k = 0; k < chunks->len; k++) {
            int a = 0, b = 0;
            dchunk *c = &t->c[t->n++];
            if (!dims_of(mg_pk_attr(chunks->items[k], "offsets"), c->off, &a) ||
                !dims_of(mg_pk_attr(chunks->items[k], "sizes"), c->size, &b) || a != t->ndim || b != t->ndim)
                return mg_error_set(err, MG_ERR_IO, "%s: tensor %s has a malformed chunk", path, fqn);
            for (int d = 0; d < t->ndim; d++)
                if (c->off[d] + c->size[d] > t->size[d])
                    return mg_error_set(err, MG_ERR_IO, "%s: a chunk of %s reaches past its size", path, fqn);
        }
        s->nt++;
    }
    qsort(s->t, (size_t)s->nt, sizeof *s->t, cmp_fqn);
    for (size_t i = 0; i + 1 < sd->len; i += 2) {
        const mg_pk *idx = sd->items[i], *info = sd->items[i + 1];
        const char *fqn = mg_pk_str(mg_pk_attr(idx, "fqn")), *rel = mg_pk_str(mg_pk_attr(info, "relative_path"));
        int64_t off[MAXD], at, len;
        int nd = 0;
        dtensor *t = fqn ? find_t(s, fqn) : NULL;
        if (!t) continue; /* an object's bytes */
        if (mg_pk_truthy(mg_pk_attr(info, "transform_descriptors")))
            return mg_error_set(err, MG_ERR_UNSUPPORTED, "%s: %s is stored transformed (compressed?)", path, fqn);
        if (!rel || !dims_of(mg_pk_attr(idx, "offset"), off, &nd) || nd != t->ndim ||
            !mg_pk_int(mg_pk_attr(info, "offset"), &at) || !mg_pk_int(mg_pk_attr(info, "length"), &len))
            return mg_error_set(err, MG_ERR_IO, "%s: a malformed storage entry of %s", path, fqn);
        for (int k = 0; k < t->n; k++)
            if (!memcmp(t->c[k].off, off, (size_t)nd * sizeof *off)) t->c[k].file = rel, t->c[k].at = at, t->c[k].len = len;
    }
    for (int i = 0; i < s->nt; i++)
        for (int k = 0; k < s->t[i].n; k++)
            if (!s->t[i].c[k].file)
                return mg_error_set(err, MG_ERR_IO, "%s: a chunk of %s has no storage entry", path, s->t[i].fqn);
    return MG_OK;
}

/* The common state: the "common_state" object, or common.pt. */
static int read_common(dsrc *s, mg_error *err) {
    char path[4400];
    snprintf(path, sizeof path, "%s/common.pt", s->dir);
    FILE *f = fopen(path, "rb");
    if (f) {
        fclose(f);
        int rc = mg_torch_open(path, "torch_dist common state", false, &s->common_file, err);
        if (rc) return rc;
        s->common = mg_torch_root(s->common_file);
        return MG_OK;
    }
    const mg_pk *sd = mg_pk_attr(mg_torch_root(s->meta), "storage_data");
    for (size_t i = 0; i + 1 < sd->len; i += 2) {
        const char *fqn = mg_pk_str(mg_pk_attr(sd->items[i], "fqn"));
        if (!fqn || strncmp(fqn, "common_state/", 13)) continue;
        int64_t at, len;
        const char *rel = mg_pk_str(mg_pk_attr(sd->items[i + 1], "relative_path"));
        if (!rel || !mg_pk_int(mg_pk_attr(sd->items[i + 1], "offset"), &at) ||
            !mg_pk_int(mg_pk_attr(sd->items[i + 1], "length"), &len))
            return mg_error_set(err, MG_ERR_IO, "%s/.metadata: a malformed storage entry of %s", s->dir, fqn);
        int rc = open_item(s, rel, at, len, "common_state", &s->common_file, err);
        if (rc) return rc;
        const mg_pk *l = mg_torch_root(s->common_file);
        s->common = l->kind == MG_PK_LIST && l->len == 1 ? l->items[0] : NULL;
        return MG_OK;
    }
    return mg_error_set(err, MG_ERR_IO, "%s: neither common.pt nor a common_state object (the args, iteration and "
                        "schedule)", s->dir);
}

/* The step of the first param group found under v (the optimizer's common part). */
static bool find_step(const mg_pk *v, int depth, int64_t *step) {
    if (!v || depth > 8) return false;
    const mg_pk *g = mg_pk_get(v, "param_groups");
    double d;
    if (g && g->kind == MG_PK_LIST && g->len && mg_pk_num(mg_pk_get(g->items[0], "step"), &d)) {
        *step = (int64_t)d;
        return true;
    }
    if (v->kind == MG_PK_DICT)
        for (size_t i = 1; i < v->len; i += 2)
            if (find_step(v->items[i], depth + 1, step)) return true;
    if (v->kind == MG_PK_LIST)
        for (size_t i = 0; i < v->len; i++)
            if (find_step(v->items[i], depth + 1, step)) return true;
    return false;
}

/* Copies the part of chunk c inside box [lo, lo + n) of t into out (the box, row-major). */
static int copy_chunk(dsrc *s, const dtensor *t, const dchunk *c, const int64_t *lo, const int64_t *n, float *out,
                      mg_error *err) {
    int nd = t->ndim;
    int64_t a[MAXD], b[MAXD], cnt = 1, cn = 1;
    for (int d = 0; d < nd; d++) {
        a[d] = c->off[d] > lo[d] ? c->off[d] : lo[d];
        b[d] = c->off[d] + c->size[d] < lo[d] + n[d] ? c->off[d] + c->size[d] : lo[d] + n[d];
        if (a[d] >= b[d]) return MG_OK;
        cnt *= b[d] - a[d];
        cn *= c->size[d];
    }
    mg_torch_file *f = NULL;
    int rc = open_item(s, c->file, c->at, c->len, t->fqn, &f, err);
    const mg_pk *root = rc ? NULL : mg_torch_root(f);
    if (!rc && (root->kind != MG_PK_TENSOR || mg_torch_numel(root->tensor) != cn))
        rc = mg_error_set(err, MG_ERR_IO, "%s: a chunk of %s is not a tensor of its %lld elements", s->dir, t->fqn,
                          (long long)cn);
    float *buf = rc ? NULL : malloc((size_t)cn * sizeof *buf);
    if (!rc && !buf) rc = mg_error_set(err, MG_ERR_NOMEM, "out of memory");
    if (!rc) rc = mg_torch_tensor_f32(root->tensor, buf, t->fqn, err);
    /* row by row along the last dimension */
    int64_t idx[MAXD];
    for (int d = 0; d < nd; d++) idx[d] = a[d];
    int64_t run = b[nd - 1] - a[nd - 1];
    for (int64_t done = 0; !rc && done < cnt; done += run) {
        int64_t so = 0, dst = 0;
        for (int d = 0; d < nd; d++) {
            so = so * c->size[d] + (idx[d] - c->off[d]);
            dst = dst * n[d] + (idx[d] - lo[d]);
        }
        memcpy(out + dst, buf + so, (size_t)run * sizeof *out);
        for (int d = nd - 2; d >= 0; d--) {
            if (++idx[d] < b[d]) break;
            idx[d] = a[d];
        }
    }
    free(buf);
    mg_torch_close(f);
    return rc;
}

/* The box [lo, lo + n) of t, checked to be wholly covered by its chunks. */
static int read_box(dsrc *s, const dtensor *t, const int64_t *lo, const int64_t *n, float *out, mg_error *err) {
    int64_t total = 1, covered = 0;
    for (int d = 0; d < t->ndim; d++) total *= n[d];
    for (int k = 0; k < t->n; k++) {
        int64_t part = 1;
        for (int d = 0; d < t->ndim; d++) {
            int64_t a = t->c[k].off[d] > lo[d] ? t->c[k].off[d] : lo[d];
            int64_t b = t->c[k].off[d] + t->c[k].size[d] < lo[d] + n[d] ? t->c[k].off[d] + t->c[k].size[d] : lo[d] + n[d];
            part *= b > a ? b - a : 0;
        }
        if (!part) continue;
        covered += part;
        int rc = copy_chunk(s, t, &t->c[k], lo, n, out, err);
        if (rc) return rc;
    }
    if (covered != total)
        return mg_error_set(err, MG_ERR_IO, "%s: the chunks of %s cover %lld of the %lld elements asked for", s->dir, t->fqn,
                            (long long)covered, (long long)total);
    return MG_OK;
}

/* name with prefix: the tensor holding it and the box (a stacked layer's slice). */
static dtensor *locate(dsrc *s, const char *prefix, const char *name, int64_t lo[MAXD], int64_t n[MAXD], int *ndim,
                       int *layer_dim) {
    char fqn[700];
    snprintf(fqn, sizeof fqn, "%s%s", prefix, name);
    dtensor *t = find_t(s, fqn);
    int layer;
    *layer_dim = 0;
    if (!t && sscanf(name, "decoder.layers.%d.", &layer) == 1) { /* stacked */
        const char *rest = strchr(name + strlen("decoder.layers."), '.') + 1;
        snprintf(fqn, sizeof fqn, "%sdecoder.layers.%s", prefix, rest);
        t = find_t(s, fqn);
        if (!t || t->ndim < 2 || t->size[0] != s->layers || layer >= s->layers) return NULL;
        lo[0] = layer, n[0] = 1;
        for (int d = 1; d < t->ndim; d++) lo[d] = 0, n[d] = t->size[d];
        *ndim = t->ndim - 1;
        *layer_dim = 1;
        return t;
    }
    if (!t) return NULL;
    for (int d = 0; d < t->ndim; d++) lo[d] = 0, n[d] = t->size[d];
    *ndim = t->ndim;
    return t;
}

static int dget(ms_src *base, const char *name, int what, int *ndim, int64_t shape[2], float **out, mg_error *err) {
    dsrc *s = (dsrc *)base;
    *ndim = 0;
    if (out) *out = NULL;
    int64_t lo[MAXD], n[MAXD], lo2[MAXD], n2[MAXD];
    int nd = 0, ld = 0, nd2, ld2;
    dtensor *t = locate(s, "", name, lo, n, &nd, &ld); /* (the model's: it says whether the name exists) */
    if (!t) return MG_OK;
    if (nd < 1 || nd > 2)
        return mg_error_set(err, MG_ERR_UNSUPPORTED, "%s: %s has %d dimensions", s->dir, t->fqn, nd);
    dtensor *src = t;
    if (what != MS_PARAM || s->opt_prefix[MS_PARAM]) {
        if (!s->opt_prefix[what]) return mg_error_set(err, MG_ERR_IO, "%s: no optimizer state for %s", s->dir, name);
        src = locate(s, s->opt_prefix[what], name, lo2, n2, &nd2, &ld2);
        if (!src || nd2 != nd || ld2 != ld || memcmp(n2, n, sizeof(int64_t) * (size_t)src->ndim))
            return mg_error_set(err, MG_ERR_IO, "%s: the optimizer state %s%s is missing or not the parameter's shape",
                                s->dir, s->opt_prefix[what], name);
        memcpy(lo, lo2, sizeof lo2), memcpy(n, n2, sizeof n2);
    }
    shape[0] = n[ld], shape[1] = nd == 2 ? n[ld + 1] : 0;
    *ndim = nd;
    if (!ld) t->used = true;
    else if (t->layer_used || (t->layer_used = calloc((size_t)s->layers, 1))) t->layer_used[lo[0]] = 1;
    if (!out) return MG_OK;
    float *buf = malloc((size_t)(shape[0] * (nd == 2 ? shape[1] : 1)) * sizeof *buf + 1);
    if (!buf) return mg_error_set(err, MG_ERR_NOMEM, "out of memory");
    int rc = read_box(s, src, lo, n, buf, err);
    if (rc) {
        free(buf);
        return rc;
    }
    *out = buf;
    return MG_OK;
}

static const char *dunused(ms_src *base, const char *ignore) {
    dsrc *s = (dsrc *)base;
    for (int i = 0; i < s->nt; i++) {
        const dtensor *t = &s->t[i];
        if (!strncmp(t->fqn, "optimizer.", 10) || (ignore && !strcmp(t->fqn, ignore))) continue;
        bool all = t->used;
        if (!all && t->layer_used) {
            all = true;
            for (int64_t l = 0; l < s->layers; l++) all &= t->layer_used[l] != 0;
        }
        if (!all) return t->fqn;
    }
    return NULL;
}

static void dclose(ms_src *base) {
    dsrc *s = (dsrc *)base;
    for (int i = 0; s->t && i < s->nt; i++) free(s->t[i].c), free(s->t[i].layer_used);
    free(s->t);
    for (int i = 0; i < s->nfiles; i++) mg_input_unmap(s->files[i].map, s->files[i].len);
    mg_torch_close(s->meta);
    mg_torch_close(s->common_file);
    free(s);
}

int ms_open_dist(const mg_megatron_info *info, ms_src **out, mg_error *err) {
    *out = NULL;
    dsrc *s = calloc(1, sizeof *s);
    if (!s) return mg_error_set(err, MG_ERR_NOMEM, "out of memory");
    s->base.get = dget, s->base.unused = dunused, s->base.close = dclose, s->base.what = s->what;
    s->base.adam_step = -1;
    snprintf(s->dir, sizeof s->dir, "%s", info->dir);
    char path[4400];
    snprintf(path, sizeof path, "%s/metadata.json", s->dir);
    json_error_t je;
    json_t *mj = json_load_file(path, 0, &je);
    const char *backend = json_string_value(json_object_get(mj, "sharded_backend"));
    int rc = MG_OK;
    if (!json_is_object(mj)) rc = mg_error_set(err, MG_ERR_IO, "%s: not a JSON object (%s)", path, je.text);
    else if (!backend || strcmp(backend, "torch_dist"))
        rc = mg_error_set(err, MG_ERR_UNSUPPORTED, "%s: sharded_backend '%s' (mgraph-convert reads torch_dist)", path,
                          backend ? backend : "?");
    json_decref(mj);
    if (!rc) rc = read_metadata(s, err);
    if (!rc) rc = read_common(s, err);
    if (!rc) {
        s->base.args = mg_pk_get(s->common, "args");
        if (!s->base.args || strcmp(mg_pk_call_name(s->base.args), "argparse.Namespace"))
            rc = mg_error_set(err, MG_ERR_IO, "%s: the common state has no args (argparse.Namespace)", s->dir);
    }
    if (!rc) {
        if (!mg_pk_int(mg_pk_get(s->common, "iteration"), &s->base.iteration)) s->base.iteration = info->iteration;
        s->base.scheduler = mg_pk_get(s->common, "opt_param_scheduler");
        ms_arg_int(s->base.args, "num_layers", &s->layers);
        /* the optimizer's state, in model space (fully reshardable) or not placed here */
        bool fp32 = false, dp_flat = false;
        for (int i = 0; i < s->nt; i++) {
            if (!strncmp(s->t[i].fqn, "optimizer.state.exp_avg.", 24)) s->base.has_moments = true;
            if (!strncmp(s->t[i].fqn, "optimizer.state.fp32_param.", 27)) fp32 = true;
            if (!strncmp(s->t[i].fqn, "optimizer.distributed.", 22)) dp_flat = true;
        }
        bool param = false;
        for (int i = 0; i < s->nt; i++) param |= !strncmp(s->t[i].fqn, "optimizer.state.param.", 22);
        if (s->base.has_moments) {
            s->opt_prefix[MS_PARAM] = param ? "optimizer.state.param." : fp32 ? "optimizer.state.fp32_param." : NULL;
            s->opt_prefix[MS_EXP_AVG] = "optimizer.state.exp_avg.";
            s->opt_prefix[MS_EXP_AVG_SQ] = "optimizer.state.exp_avg_sq.";
            find_step(mg_pk_get(s->common, "optimizer"), 0, &s->base.adam_step);
        } else if (dp_flat) {
            s->base.moments_unread = "the distributed optimizer's state is in its flat dp_reshardable buffers (Megatron's "
                                     "default), which mgraph-convert does not place; save with "
                                     "--dist-ckpt-optim-fully-reshardable to convert it";
        }
        int64_t tp = 1, pp = 1;
        ms_arg_int(s->base.args, "tensor_model_parallel_size", &tp);
        ms_arg_int(s->base.args, "pipeline_model_parallel_size", &pp);
        snprintf(s->what, sizeof s->what, "torch_dist format, saved under tensor %lld x pipeline %lld, %s", (long long)tp,
                 (long long)pp,
                 s->base.has_moments ? "optimizer state in model space"
                 : dp_flat           ? "optimizer state in dp_reshardable buffers not converted"
                                     : "no optimizer state");
    }
    if (rc) {
        dclose(&s->base);
        return rc;
    }
    *out = &s->base;
    return MG_OK;
}

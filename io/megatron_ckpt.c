/* Megatron-LM checkpoint directories recognised (include/mgraph/megatron_ckpt.h). */
#include "mgraph/megatron_ckpt.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

const char *mg_megatron_format_name(mg_megatron_format f) {
    return f == MG_MEGATRON_TORCH ? "torch" : f == MG_MEGATRON_TORCH_DIST ? "torch_dist" : "none";
}

static bool is_dir(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

static bool is_file(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

/* "mp_rank_00", "mp_rank_00_001", "mp_rank_00_001_002": the numbers (-1: not this form) */
static int parse_rank_dir(const char *name, int v[3]) {
    if (strncmp(name, "mp_rank_", 8)) return -1;
    const char *p = name + 8;
    int n = 0;
    while (n < 3) {
        int digits = 0, x = 0;
        while (isdigit((unsigned char)p[digits]) && digits < 6) x = x * 10 + (p[digits] - '0'), digits++;
        if (digits != (n == 0 ? 2 : 3)) return -1;
        v[n++] = x;
        p += digits;
        if (!*p) return n;
        if (*p++ != '_') return -1;
    }
    return -1;
}

/* What the iteration directory dir holds. */
static int classify(const char *dir, mg_megatron_info *info, mg_error *err) {
    char p[4200];
    snprintf(p, sizeof p, "%s/metadata.json", dir);
    if (is_file(p)) {
        info->format = MG_MEGATRON_TORCH_DIST;
        return MG_OK;
    }
    DIR *d = opendir(dir);
    if (!d) return MG_OK;
    struct dirent *e;
    int rc = MG_OK, parts = 0;
    while ((e = readdir(d))) {
        if (strncmp(e->d_name, "mp_rank_", 8)) continue;
        int v[3];
        int n = parse_rank_dir(e->d_name, v);
        if (n < 0 || (parts && n != parts)) {
            rc = mg_error_set(err, MG_ERR_IO, "%s: rank directory %s is not Megatron's mp_rank_TT[_PPP][_EEE] (or "
                              "differs in form from the others)", dir, e->d_name);
            break;
        }
        parts = n;
        if (v[0] + 1 > info->tp) info->tp = v[0] + 1;
        info->n_rank_dirs++;
    }
    closedir(d);
    if (!rc && parts) info->format = MG_MEGATRON_TORCH, info->n_parts = parts;
    return rc;
}

int mg_megatron_probe(const char *path, mg_megatron_info *info, mg_error *err) {
    memset(info, 0, sizeof *info);
    char tracker[4200];
    snprintf(tracker, sizeof tracker, "%s/latest_checkpointed_iteration.txt", path);
    FILE *f = is_file(tracker) ? fopen(tracker, "r") : NULL;
    if (!f) { /* an iteration directory itself? */
        snprintf(info->dir, sizeof info->dir, "%s", path);
        int rc = classify(path, info, err);
        if (rc || info->format == MG_MEGATRON_NONE) {
            info->format = MG_MEGATRON_NONE;
            return rc;
        }
        /* (the iteration from the directory's name when it has Megatron's) */
        const char *base = strrchr(path, '/');
        base = base ? base + 1 : path;
        if (!strncmp(base, "iter_", 5)) info->iteration = strtoll(base + 5, NULL, 10);
        info->release = !strcmp(base, "release");
        return MG_OK;
    }
    char buf[64] = {0};
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    char *s = buf, *e = buf + n;
    while (s < e && isspace((unsigned char)*s)) s++;
    while (e > s && isspace((unsigned char)e[-1])) *--e = '\0';
    char *end = NULL;
    long long it = strtoll(s, &end, 10);
    if (!strcmp(s, "release")) {
        info->release = true;
        snprintf(info->dir, sizeof info->dir, "%s/release", path);
    } else if (end && end != s && !*end && it >= 0) {
        info->iteration = it;
        snprintf(info->dir, sizeof info->dir, "%s/iter_%07lld", path, it);
    } else {
        return MG_OK; /* not a tracker Megatron writes: someone else's question */
    }
    char idx[4300];
    snprintf(idx, sizeof idx, "%s/index.json", info->dir);
    if (is_file(idx)) { /* mgraph's own (same tracker and directory names) */
        info->format = MG_MEGATRON_NONE;
        return MG_OK;
    }
    if (!is_dir(info->dir)) return MG_OK; /* (mgraph's reader says what is missing) */
    int rc = classify(info->dir, info, err);
    if (rc) info->format = MG_MEGATRON_NONE;
    return rc;
}

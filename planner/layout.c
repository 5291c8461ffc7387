/* Which blocks each pipeline stage and model chunk holds, by Megatron's rules
 * (megatron/core/transformer/transformer_block.py get_num_layers_to_build,
 * transformer_config.py, pipeline_parallel_layer_layout.py):
 *
 *   an equal share: L / (pp v) layers per chunk;
 *   --decoder-first/last-pipeline-num-layers f, l: f (l) layers on the first (last)
 *     stage, the rest shared equally by the stages between; with v chunks each stage's
 *     layers split equally among its chunks;
 *   --account-for-embedding/loss-in-pipeline-split: the embedding (loss) counts as a
 *     layer, so L + 1 (+ 1) splits equally and the first (last) chunk holds one layer
 *     fewer beside it;
 *   --pipeline-model-parallel-layout: pp x v segments separated by '|', in the order
 *     chunk 0 of stages 0..pp-1, then chunk 1 ...; E the embedding, t a layer, L the
 *     output layer and loss; X*n repeats a symbol, (...)*n a group; commas are cosmetic.
 * Layers are numbered in that segment order (the model's forward order).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "planner/planner_internal.h"

/* Unrolled layouts longer than this are refused (the layers are bounded far below). */
#define LAYOUT_MAX_CHARS (1 << 22)

/* A growing string. */
typedef struct sbuf {
    char *s;
    size_t len, cap;
} sbuf;

static int append(sbuf *b, const char *s, size_t n, long reps, mg_error *err) {
    if ((double)n * reps + b->len > LAYOUT_MAX_CHARS)
        return mg_error_set(err, MG_ERR_INVALID, "--pipeline-model-parallel-layout unrolls to more than %d characters",
                            LAYOUT_MAX_CHARS);
    size_t need = b->len + n * (size_t)reps + 1;
    if (need > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < need) cap *= 2;
        char *ns = realloc(b->s, cap);
        if (!ns) return mg_error_set(err, MG_ERR_NOMEM, "planner: out of memory");
        b->s = ns;
        b->cap = cap;
    }
    for (long r = 0; r < reps; r++, b->len += n) memcpy(b->s + b->len, s, n);
    b->s[b->len] = '\0';
    return MG_OK;
}

/* "*n" at s: n (and *end past it), or -1. */
static long repeat_at(const char *s, const char **end) {
    if (s[0] != '*' || s[1] < '0' || s[1] > '9') return -1;
    char *e;
    long n = strtol(s + 1, &e, 10);
    *end = e;
    return n > LAYOUT_MAX_CHARS ? LAYOUT_MAX_CHARS + 1 : n;
}

/* Megatron's parse_str_to_list: drop the commas, unroll every "(x)*n" (x without ')'),
 * then every "c*n". */
static int unroll(const char *in, char **out, mg_error *err) {
    if (strlen(in) > LAYOUT_MAX_CHARS)
        return mg_error_set(err, MG_ERR_INVALID, "--pipeline-model-parallel-layout is longer than %d characters",
                            LAYOUT_MAX_CHARS);
    sbuf a = {0}, b = {0};
    int rc = append(&a, "", 0, 1, err);
    for (const char *s = in; *s && !rc; s++)
        if (*s != ',') rc = append(&a, s, 1, 1, err);
    for (const char *s = a.s; !rc && *s;) {
        const char *close = *s == '(' ? strchr(s + 1, ')') : NULL, *end;
        long n = close && close > s + 1 ? repeat_at(close + 1, &end) : -1;
        if (n >= 0) {
            rc = append(&b, s + 1, (size_t)(close - s - 1), n, err);
            s = end;
        } else {
            rc = append(&b, s++, 1, 1, err);
        }
    }
    free(a.s);
    a = (sbuf){0};
    if (!rc) rc = append(&a, "", 0, 1, err);
    for (const char *s = b.s; !rc && s && *s;) {
        const char *end;
        long n = repeat_at(s + 1, &end);
        if (n >= 0) {
            rc = append(&a, s, 1, n, err);
            s = end;
        } else {
            rc = append(&a, s++, 1, 1, err);
        }
    }
    free(b.s);
    if (rc) {
        free(a.s);
        return rc;
    }
    *out = a.s;
    return MG_OK;
}

static int parse_layout(const mg_plan_query *q, mg_planner_layout_t *l, mg_error *err) {
    const char *src = q->pp_layout;
    int pp = q->plan.pp, L = q->model.num_layers;
    if (q->plan.pp_first_layers || q->plan.pp_last_layers || q->account_embedding || q->account_loss)
        return mg_error_set(err, MG_ERR_INVALID,
                            "--pipeline-model-parallel-layout cannot be combined with --decoder-first/last-pipeline-num-"
                            "layers or --account-for-embedding/loss-in-pipeline-split");
    char *u = NULL;
    int rc = unroll(src, &u, err);
    if (rc) return rc;
    long segs = 1;
    for (const char *s = u; *s; s++) {
        if (*s == '|') segs++;
        else if (*s == 'm') {
            free(u);
            return mg_error_set(err, MG_ERR_UNSUPPORTED,
                                "--pipeline-model-parallel-layout '%s': multi-token prediction layers (m) are not part of "
                                "mgraph's models", src);
        } else if (*s != 'E' && *s != 't' && *s != 'L') {
            char bad = *s;
            free(u);
            return mg_error_set(err, MG_ERR_INVALID,
                                "--pipeline-model-parallel-layout '%s': invalid layer character '%c' (known: E, t, L; '|' "
                                "separates stages, X*n and (...)*n repeat)", src, bad);
        }
    }
    if (segs % pp) {
        free(u);
        return mg_error_set(err, MG_ERR_INVALID,
                            "--pipeline-model-parallel-layout '%s' has %ld stages, not a multiple of "
                            "--pipeline-model-parallel-size %d", src, segs, pp);
    }
    int vp = (int)(segs / pp);
    if (q->virtual_stages > 1 && q->virtual_stages != vp) {
        free(u);
        return mg_error_set(err, MG_ERR_INVALID,
                            "--pipeline-model-parallel-layout '%s' gives %d virtual stages per pipeline rank, the "
                            "virtual-stage flag %d", src, vp, q->virtual_stages);
    }
    l->pp = pp;
    l->vp = vp;
    l->chunk = calloc((size_t)pp * vp, sizeof *l->chunk);
    if (!l->chunk) {
        free(u);
        return mg_error_set(err, MG_ERR_NOMEM, "planner: out of memory");
    }
    /* segment k is chunk k / pp of stage k % pp */
    int layer = 0, n_e = 0, n_l = 0;
    long k = 0;
    bool bad_order = false;
    mg_planner_chunk_t *ch = &l->chunk[0];
    ch->first = 0;
    for (const char *s = u;; s++) {
        if (*s == '|' || !*s) {
            if (!*s) break;
            k++;
            ch = &l->chunk[(k % pp) * vp + k / pp];
            ch->first = layer;
            continue;
        }
        if (*s == 'E') {
            if (layer > 0 || n_l || ch->n) bad_order = true;
            n_e++;
            ch->emb = true;
        } else if (*s == 'L') {
            n_l++;
            ch->loss = true;
        } else {
            if (n_l || ch->loss) bad_order = true;
            ch->n++;
            layer++;
        }
    }
    free(u);
    if (n_e != 1 || n_l != 1 || layer != L || bad_order || !l->chunk[0].emb || !l->chunk[(pp - 1) * vp + vp - 1].loss) {
        mg_planner_layout_free(l);
        return mg_error_set(err, MG_ERR_INVALID,
                            "--pipeline-model-parallel-layout '%s': the embedding (E) must come first and the loss (L) "
                            "last, each exactly once, with --num-layers %d layers (t) between (found %d E, %d t, %d L)",
                            src, L, n_e, layer, n_l);
    }
    return MG_OK;
}

/* Numbers the layers of chunks in forward order (chunk c of every stage before c + 1). */
static void number(mg_planner_layout_t *l) {
    int first = 0;
    for (int c = 0; c < l->vp; c++)
        for (int p = 0; p < l->pp; p++) {
            mg_planner_chunk_t *ch = &l->chunk[p * l->vp + c];
            ch->first = first;
            first += ch->n;
        }
    l->chunk[0].emb = true;
    l->chunk[l->pp * l->vp - 1].loss = true;
}

int mg_planner_layout(const mg_plan_query *q, mg_planner_layout_t *l, mg_error *err) {
    memset(l, 0, sizeof *l);
    int pp = q->plan.pp, v = q->virtual_stages > 0 ? q->virtual_stages : 1, L = q->model.num_layers;
    if (pp < 1 || pp > MG_PLANNER_MAX_PP)
        return mg_error_set(err, MG_ERR_INVALID, "--pipeline-model-parallel-size must be in 1..%d (got %d)",
                            MG_PLANNER_MAX_PP, pp);
    if (q->pp_layout && *q->pp_layout) return parse_layout(q, l, err);
    if (v > 1 && pp < 2)
        return mg_error_set(err, MG_ERR_INVALID, "an interleaved schedule (virtual stages %d) needs pipeline parallelism", v);
    int f = q->plan.pp_first_layers, la = q->plan.pp_last_layers;
    bool acc = q->account_embedding || q->account_loss;
    if ((f || la) && acc)
        return mg_error_set(err, MG_ERR_INVALID,
                            "--decoder-first/last-pipeline-num-layers cannot be combined with "
                            "--account-for-embedding/loss-in-pipeline-split");
    int *per_stage = calloc((size_t)pp, sizeof *per_stage);
    if (!per_stage) return mg_error_set(err, MG_ERR_NOMEM, "planner: out of memory");
    int rc = MG_OK;
    if (f || la) {
        int mids = pp - (f > 0) - (la > 0), rest = L - f - la;
        if (pp < 2) rc = mg_error_set(err, MG_ERR_INVALID, "--decoder-first/last-pipeline-num-layers need pipeline parallelism");
        else if (rest < 0 || (mids == 0) != (rest == 0) || (mids > 0 && rest % mids))
            rc = mg_error_set(err, MG_ERR_INVALID,
                              "--num-layers %d does not split as %d on the first pipeline stage, %d on the last and an "
                              "equal share on each of the %d stages between",
                              L, f, la, mids);
        for (int p = 0; p < pp && !rc; p++) per_stage[p] = mids ? rest / mids : 0;
        if (f) per_stage[0] = f;
        if (la) per_stage[pp - 1] = la;
        for (int p = 0; p < pp && !rc; p++)
            if (per_stage[p] % v)
                rc = mg_error_set(err, MG_ERR_INVALID,
                                  "%d layers on pipeline stage %d do not divide into %d virtual stages", per_stage[p], p, v);
    } else {
        int Lx = L + q->account_embedding + q->account_loss;
        if (Lx % pp)
            rc = mg_error_set(err, MG_ERR_INVALID, "--num-layers %d%s is not divisible by --pipeline-model-parallel-size %d",
                              L, acc ? " + the embedding / loss counted as layers" : "", pp);
        else if ((Lx / pp) % v)
            rc = mg_error_set(err, MG_ERR_INVALID,
                              "--num-layers %d is not divisible by pipeline size %d x virtual stages %d", L, pp, v);
        for (int p = 0; p < pp && !rc; p++) per_stage[p] = Lx / pp;
    }
    if (!rc) {
        l->pp = pp;
        l->vp = v;
        l->chunk = calloc((size_t)pp * v, sizeof *l->chunk);
        if (!l->chunk) rc = mg_error_set(err, MG_ERR_NOMEM, "planner: out of memory");
    }
    for (int p = 0; p < pp && !rc; p++)
        for (int c = 0; c < v; c++) l->chunk[p * v + c].n = per_stage[p] / v;
    if (!rc && q->account_embedding && --l->chunk[0].n < 0)
        rc = mg_error_set(err, MG_ERR_INVALID, "not enough layers in the first virtual pipeline stage for the embedding");
    if (!rc && q->account_loss && --l->chunk[pp * v - 1].n < 0)
        rc = mg_error_set(err, MG_ERR_INVALID, "not enough layers in the last virtual pipeline stage for the loss");
    free(per_stage);
    if (rc) {
        mg_planner_layout_free(l);
        return rc;
    }
    number(l);
    return MG_OK;
}

void mg_planner_layout_free(mg_planner_layout_t *l) {
    free(l->chunk);
    l->chunk = NULL;
}

void mg_planner_layout_describe(const mg_planner_layout_t *l, int stage, char *buf, size_t n) {
    int layers = 0, empty = 0;
    bool emb = false, loss = false;
    for (int c = 0; c < l->vp; c++) {
        const mg_planner_chunk_t *ch = &l->chunk[stage * l->vp + c];
        layers += ch->n;
        emb |= ch->emb;
        loss |= ch->loss;
        empty += !ch->n && !ch->emb && !ch->loss;
    }
    snprintf(buf, n, "pipeline stage %d: %s%d layer%s%s%s", stage, emb ? "embedding + " : "", layers, layers == 1 ? "" : "s",
             loss ? " + output layer and loss" : "", "");
    if (l->vp > 1) {
        size_t m = strlen(buf);
        snprintf(buf + m, n - m, " in %d chunks", l->vp);
    }
}

/* The distributed optimizer (Megatron's, ZeRO-1 style), as a partitioning rule.
 *
 * Parameters are laid end to end in a flat buffer, in reverse order (the order their
 * gradients become final in backward), and cut into buckets of about
 * plan->bucket_numel elements, each padded to a multiple of dp. Data-parallel rank r
 * owns the contiguous range [r S, (r+1) S) of every bucket (S = padded / dp),
 * whatever parameter boundaries fall inside it. Then:
 *   - when the last gradient of a bucket is final, the bucket's gradients are
 *     flattened and reduce-scattered: rank r receives the sum over dp of its range
 *     (overlapping the rest of the backward pass);
 *   - the gradient norm sums the squares of this rank's ranges (a partial sum over dp);
 *   - AdamW runs on the segments of each parameter inside the rank's range; its two
 *     moments exist only for those segments (the 1/dp optimizer state);
 *   - when every parameter of a bucket has been updated, the updated ranges are
 *     all-gathered and each parameter is rebuilt from the gathered buffer, written in
 *     place of the old value.
 * With tensor parallelism, the buffer holds each rank's tensor-parallel blocks. With
 * context parallelism the shards are over dp x cp (dp_grad_group), as Megatron shards
 * over its data-parallel group with context parallelism.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "partitioners/partition_internal.h"

typedef struct dparam {
    const mg_tensor *p;      /* logical parameter */
    int bucket;
    int64_t off, n;          /* place in the bucket, local (tp block) numel */
    mg_tensor *grad;         /* final gradient (a dp share), in the parameter's tp state */
    mg_tensor *seg_new;      /* updated segment (NULL: no segment on this rank) */
    const mg_tensor *new_lt; /* the logical updated parameter (AdamW's output 0) */
    bool updated;
} dparam;

typedef struct dbucket {
    int first, count;        /* params [first, first + count) of the params array */
    int64_t numel, padded;
    int n_final, n_updated;
    mg_tensor *shard_grad;   /* [S]: this rank's range of the reduced gradients */
} dbucket;

typedef struct dist_opt {
    dparam *params;
    int n_params;
    int *param_of;           /* logical tensor id -> index in params, or -1 */
    dbucket *buckets;
    int n_buckets;
} dist_opt;

static dist_opt *dopt(const part_ctx *c) { return c->axis[PART_DOPT]; }
static int gdp(const part_ctx *c) { return part_size(c, dp_grad_group(c)); }
static int gdp_rank(const part_ctx *c) { return part_coord(c, dp_grad_group(c)); }

static int64_t local_numel(part_ctx *c, const mg_tensor *p) {
    mg_sharding s = part_size(c, MG_GROUP_TP) > 1 ? tp_param_state(c, p) : sh_full();
    int64_t n = mg_numel(p);
    return s.kind == MG_SHARD_SPLIT ? n / part_size(c, MG_GROUP_TP) : n;
}

static int dopt_init(part_ctx *c, mg_node *const *ord, int n_ord) {
    (void)ord, (void)n_ord;
    if (!c->plan->distributed_optimizer || c->plan->fsdp != MG_FSDP_NONE || gdp(c) == 1) return MG_OK;
    dist_opt *d = calloc(1, sizeof *d);
    int nt = mg_graph_n_tensors(c->L);
    if (!d) return part_fail(c, MG_ERR_NOMEM, "distributed optimizer: out of memory");
    c->axis[PART_DOPT] = d;
    d->param_of = malloc((size_t)nt * sizeof *d->param_of);
    d->params = calloc((size_t)nt, sizeof *d->params);
    d->buckets = calloc((size_t)nt + 1, sizeof *d->buckets);
    if (!d->param_of || !d->params || !d->buckets) return part_fail(c, MG_ERR_NOMEM, "distributed optimizer: out of memory");
    for (int i = 0; i < nt; i++) d->param_of[i] = -1;
    /* reverse parameter order: the last layers' gradients are final first */
    for (int i = nt - 1; i >= 0; i--) {
        const mg_tensor *p = mg_graph_tensor(c->L, i);
        /* expert weights under expert parallelism keep the plain data-parallel step over
         * their own group (edp): ep.c */
        if (!p->requires_grad || !p->grad || !pp_here(c, p->grad)) continue; /* (another stage's) */
        if (ep_places_experts(c) && ep_is_expert_param(p)) continue;
        dparam *dp = &d->params[d->n_params];
        dp->p = p;
        dp->n = local_numel(c, p);
        d->param_of[p->id] = d->n_params++;
    }
    dbucket *b = NULL;
    for (int k = 0; k < d->n_params; k++) {
        if (!b || b->numel >= c->plan->bucket_numel) {
            b = &d->buckets[d->n_buckets++];
            b->first = k;
        }
        d->params[k].bucket = (int)(b - d->buckets);
        d->params[k].off = b->numel;
        b->numel += d->params[k].n;
        b->count++;
    }
    for (int i = 0; i < d->n_buckets; i++)
        d->buckets[i].padded = (d->buckets[i].numel + gdp(c) - 1) / gdp(c) * gdp(c);
    return MG_OK;
}

bool dopt_has_param(const part_ctx *c, int pid) { return dopt(c) && pid >= 0 && dopt(c)->param_of[pid] >= 0; }

static void dopt_release(part_ctx *c) {
    dist_opt *d = dopt(c);
    if (!d) return;
    free(d->params);
    free(d->param_of);
    free(d->buckets);
    free(d);
    c->axis[PART_DOPT] = NULL;
}

/* ---- helpers ------------------------------------------------------------------------------ */
static mg_tensor *flat(part_ctx *c, mg_tensor *t) {
    int64_t n = mg_numel(t);
    return t->ndim == 1 ? t : mg_reshape(c->P, t, 1, &n);
}

static void name_bucket(part_ctx *c, mg_tensor *t, const char *fmt, int bucket) {
    char nm[256];
    snprintf(nm, sizeof nm, fmt, bucket);
    part_rename(c, t, nm);
}

static int64_t range_lo(const part_ctx *c, const dbucket *b) { return (int64_t)gdp_rank(c) * (b->padded / gdp(c)); }
static int64_t range_hi(const part_ctx *c, const dbucket *b) { return range_lo(c, b) + b->padded / gdp(c); }

/* This rank's segment of a parameter: [a, z) in bucket coordinates (a == z: none). */
static void segment(const part_ctx *c, const dist_opt *d, const dparam *p, int64_t *a, int64_t *z) {
    const dbucket *b = &d->buckets[p->bucket];
    int64_t lo = range_lo(c, b), hi = range_hi(c, b);
    *a = p->off > lo ? p->off : lo;
    *z = p->off + p->n < hi ? p->off + p->n : hi;
    if (*z < *a) *z = *a;
}

/* ---- gradients: bucket reduce-scatter --------------------------------------------------------------- */
static int bucket_reduce(part_ctx *c, int bi) {
    dist_opt *d = dopt(c);
    dbucket *b = &d->buckets[bi];
    mg_tensor *acc = NULL;
    int k = 0;
    /* one concat node over every gradient of the bucket (concat is variadic) */
    mg_tensor **all = malloc(((size_t)b->count + 1) * sizeof *all);
    if (!all) return part_fail(c, MG_ERR_NOMEM, "distributed optimizer: out of memory");
    for (int i = 0; i < b->count; i++) {
        all[k] = flat(c, d->params[b->first + i].grad);
        if (!all[k++]) {
            free(all);
            return part_graph_error(c);
        }
    }
    if (b->padded > b->numel) {
        int64_t padn = b->padded - b->numel;
        all[k++] = mg_zeros(c->P, MG_F32, 1, &padn);
    }
    acc = k == 1 ? all[0] : mg_concat(c->P, k, all, 0);
    free(all);
    if (!acc) {
        return part_graph_error(c);
    }
    if (acc->src && acc->src->op == MG_OP_CONCAT) name_bucket(c, acc, "grad_bucket%d", bi);
    b->shard_grad = mg_reduce_scatter(c->P, acc, dp_grad_group(c), gdp(c), 0, c->seq++);
    if (!b->shard_grad) {
        return part_graph_error(c);
    }
    name_bucket(c, b->shard_grad, "grad_bucket%d@dp_reduce_scatter", bi);
    return MG_OK;
}

static int dopt_after(part_ctx *c, const mg_node *n) {
    dist_opt *d = dopt(c);
    if (!d) return MG_OK;
    for (int j = 0; j < n->n_out; j++) {
        const mg_tensor *lo = n->out[j];
        int pid = c->final_grad_of[lo->id];
        if (pid < 0 || !c->st[lo->id].t) continue;
        int k = d->param_of[pid];
        if (k < 0) continue;
        part_enter_step_context(c); /* reduced once per step, after the last micro-batch */
        dparam *p = &d->params[k];
        mg_sharding want = part_state(c, p->p, MG_GROUP_TP);
        /* whole over tp in the parameter's state; still a share over dp */
        p->grad = part_get(c, lo, MG_GROUP_TP, want);
        if (!p->grad) return c->err->code ? c->err->code : MG_ERR_RUNTIME;
        dbucket *b = &d->buckets[p->bucket];
        if (++b->n_final == b->count) {
            int rc = bucket_reduce(c, p->bucket);
            if (rc) return rc;
        }
    }
    return MG_OK;
}

/* ---- sum of squares over this rank's ranges -------------------------------------------------------------- */
static int dopt_sumsq(part_ctx *c, const mg_node *n) {
    dist_opt *d = dopt(c);
    const mg_tensor *g = n->in[0];
    int pid = c->final_grad_of[g->id];
    int k = pid >= 0 ? d->param_of[pid] : -1;
    if (n->n_in != 1 || k < 0) return 0;
    dparam *p = &d->params[k];
    dbucket *b = &d->buckets[p->bucket];
    int64_t a, z;
    segment(c, d, p, &a, &z);
    mg_sharding ps = part_state(c, p->p, MG_GROUP_TP);
    /* a tensor-parallel replicated parameter is counted on tp rank 0 only */
    bool count = z > a && !(part_size(c, MG_GROUP_TP) > 1 && ps.kind == MG_SHARD_FULL && part_coord(c, MG_GROUP_TP) != 0);
    mg_tensor *out;
    if (count) {
        mg_tensor *seg = mg_slice(c->P, b->shard_grad, 0, a - range_lo(c, b), z - a);
        mg_node *sq = seg ? mg_node_new(c->P, MG_OP_SUMSQ, &n->attrs, 1, &seg, NULL) : NULL; /* (zeros: a count) */
        out = sq ? sq->out[0] : NULL;
    } else {
        out = mg_zeros(c->P, MG_F32, 1, (int64_t[]){1});
    }
    if (!out) {
        return part_graph_error(c);
    }
    /* a share of the sum over dp (x cp: the ranges are cut over both), and over tp
     * where tp splits parameters */
    mg_placement os = mg_placement_full();
    if (part_size(c, MG_GROUP_TP) > 1) os.ax[MG_GROUP_TP] = sh_partial();
    os.ax[MG_GROUP_DP] = mg_place_partial(MG_GROUP_DP);
    if (dp_grad_group(c) == MG_GROUP_DP_CP) os.ax[MG_GROUP_CP] = mg_place_partial(MG_GROUP_CP);
    part_set_identity(c, out, n->out[0], &os);
    c->st[n->out[0]->id] = (pt){out, os};
    return 1;
}

/* ---- AdamW on segments; parameter all-gather per bucket ------------------------------------------------------- */
static int bucket_gather(part_ctx *c, int bi) {
    dist_opt *d = dopt(c);
    dbucket *b = &d->buckets[bi];
    int64_t S = b->padded / gdp(c), covered = 0;
    mg_tensor **segs = malloc(((size_t)b->count + 1) * sizeof *segs);
    if (!segs) return part_fail(c, MG_ERR_NOMEM, "distributed optimizer: out of memory");
    int k = 0;
    for (int i = 0; i < b->count; i++) {
        dparam *p = &d->params[b->first + i];
        if (p->seg_new) {
            segs[k++] = p->seg_new;
            covered += mg_numel(p->seg_new);
        }
    }
    if (covered < S) { /* the padding at the end of the last rank's range */
        int64_t padn = S - covered;
        segs[k++] = mg_zeros(c->P, MG_F32, 1, &padn);
    }
    mg_tensor *shard = k == 1 ? segs[0] : mg_concat(c->P, k, segs, 0);
    free(segs);
    mg_tensor *full = shard ? mg_allgather(c->P, shard, dp_grad_group(c), gdp(c), 0, c->seq++) : NULL;
    if (!full) {
        return part_graph_error(c);
    }
    name_bucket(c, full, "param_bucket%d@dp_allgather", bi);
    for (int i = 0; i < b->count; i++) {
        dparam *p = &d->params[b->first + i];
        mg_tensor *old = c->st[p->p->id].t;
        mg_tensor *piece = mg_slice(c->P, full, 0, p->off, p->n);
        mg_tensor *upd = piece ? mg_reshape(c->P, piece, old->ndim, old->shape) : NULL;
        if (!upd) {
            return part_graph_error(c);
        }
        char nm[512];
        snprintf(nm, sizeof nm, "%s.new", p->p->name);
        part_rename(c, upd, nm);
        upd->logical = old->logical;
        upd->place = old->place;
        upd->updates = old; /* written in place of the old value */
        upd->role = MG_ROLE_OPT_STATE;
        /* readers of the updated parameter (--log-params-norm's sum of squares) get it here */
        if (p->new_lt) c->st[p->new_lt->id] = (pt){upd, c->st[p->p->id].pl};
    }
    return MG_OK;
}

static mg_tensor *moment_segment(part_ctx *c, const mg_tensor *lm, mg_sharding tp_state, int64_t len,
                                  int64_t flat_off, mg_tensor *param) {
    mg_tensor *t = part_new_leaf(c, lm->name, MG_F32, MG_ROLE_OPT_STATE, 1, &len);
    if (!t) return NULL;
    t->init = lm->init;
    t->persistent = true;
    t->state_of = param; /* the parameter (this rank's tp block) whose flat segment it is */
    t->state_flat = true;
    t->storage = lm->storage; /* (the precision-aware optimizer's moment dtypes) */
    /* identity: the flattened moment (of this rank's tensor-parallel block), this range */
    t->logical.key = lm->logical.key;
    t->logical.ndim = 1;
    t->logical.shape[0] = mg_numel(lm);
    t->logical.offset[0] = flat_off;
    /* a dp-split (flat) block of the moment of the parameter's tp block; split over
     * dp x cp under context parallelism (cp innermost, as the dp_cp group numbers its
     * ranks), so every rank of the group owns, and a checkpoint writes, its own range */
    t->place = mg_placement_full();
    t->place.ax[MG_GROUP_TP] = tp_state;
    t->place.ax[MG_GROUP_DP] = mg_place_split(MG_GROUP_DP, 0);
    if (dp_grad_group(c) == MG_GROUP_DP_CP) t->place.ax[MG_GROUP_CP] = mg_place_split(MG_GROUP_CP, 0);
    return t;
}

static int dopt_adamw(part_ctx *c, const mg_node *n) {
    dist_opt *d = dopt(c);
    int k = d->param_of[n->in[0]->id];
    if (k < 0) return 0;
    dparam *p = &d->params[k];
    dbucket *b = &d->buckets[p->bucket];
    int64_t a, z;
    segment(c, d, p, &a, &z);
    mg_sharding ps = part_state(c, p->p, MG_GROUP_TP);
    mg_tensor *pp = part_get(c, p->p, MG_GROUP_TP, ps);
    unsigned rep = dp_replica_axes();
    mg_tensor *lr = part_get_summed(c, n->in[4], MG_GROUP_TP, sh_full(), rep);
    mg_tensor *coef = part_get_summed(c, n->in[5], MG_GROUP_TP, sh_full(), rep);
    mg_tensor *wd = n->n_in > 6 ? part_get_summed(c, n->in[6], MG_GROUP_TP, sh_full(), rep) : NULL; /* a scheduled decay */
    if (!pp || !lr || !coef || (n->n_in > 6 && !wd)) return c->err->code ? c->err->code : MG_ERR_RUNTIME;
    if (z > a) {
        mg_tensor *in[7];
        in[0] = mg_slice(c->P, flat(c, pp), 0, a - p->off, z - a);
        in[1] = mg_slice(c->P, b->shard_grad, 0, a - range_lo(c, b), z - a);
        in[2] = moment_segment(c, n->in[2], ps, z - a, a - p->off, c->st[p->p->id].t);
        in[3] = moment_segment(c, n->in[3], ps, z - a, a - p->off, c->st[p->p->id].t);
        in[4] = lr;
        in[5] = coef;
        in[6] = wd;
        for (int i = 0; i < 4; i++)
            if (!in[i]) {
                return part_graph_error(c);
            }
        mg_node *an = mg_node_new(c->P, MG_OP_ADAMW, &n->attrs, n->n_in, in, NULL);
        if (!an) {
            return part_graph_error(c);
        }
        free(an->scope);
        an->scope = strdup(n->scope);
        an->out[1]->updates = in[2];
        an->out[2]->updates = in[3];
        p->seg_new = an->out[0];
    }
    p->updated = true;
    /* the moments are read by nothing; the parameter is produced by the bucket's all-gather */
    for (int j = 0; j < n->n_out; j++) c->st[n->out[j]->id] = (pt){NULL, mg_placement_full()};
    p->new_lt = n->out[0];
    if (++b->n_updated == b->count) return bucket_gather(c, p->bucket) ? c->err->code : 1;
    return 1;
}

/* The gradient norm's sum of squares and AdamW of the bucketed parameters. */
static int dopt_node(part_ctx *c, const mg_node *n) {
    if (!dopt(c)) return PART_NEXT;
    int h = n->op == MG_OP_SUMSQ ? dopt_sumsq(c, n) : n->op == MG_OP_ADAMW ? dopt_adamw(c, n) : 0;
    return h < 0 ? h : h ? PART_DONE : PART_NEXT;
}

const part_axis part_axis_dopt = {
    .name = "dist_opt", .init = dopt_init, .release = dopt_release, .node = dopt_node, .after = dopt_after};

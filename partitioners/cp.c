/* Context parallelism (Megatron's --context-parallel-size, --cp-comm-type p2p).
 *
 * Layout. The sequence of every micro-batch is cut into 2C chunks of length
 * cl = s / 2C; cp rank r holds chunks r and 2C-1-r, in that order (Megatron's load
 * balancing for causal attention: cp 2 gives rank 0 chunks {0, 3}, rank 1 {1, 2}).
 * A placement SPLIT(d) over the cp axis therefore always means this zigzag block of
 * dimension d (the sequence: dim 0 of [s, b, ...] activations, dim 2 of attention's
 * lse [b, nh, s]); the conversions from and to it are here (cp_convert: two
 * slices and a concat, or an all-gather and a reorder). Under sequence parallelism
 * tp splits the rank's block further (cp outer, tp inner, placement.h).
 *
 * Ops. Every op runs on its rank's tokens: each op's own sharding rule (the one tp
 * uses, mg_op_def.shard) is applied over the cp axis, with three exceptions that
 * know what a token split means: the embedding lookup (the rank's tokens' rows),
 * the cross-entropy (the rank's tokens' terms divided by the micro-batch's count of
 * kept tokens, an input counted on the whole labels: a partial sum over cp, the
 * rank's share of the mean, with or without an ignore index) and attention (below).
 * Weight gradients come out as partial sums over cp (the matmul, norm and embedding
 * rules say so), and are summed with the data-parallel reduction, over the combined
 * dp x cp group (partition.c). Tokens, labels and positions are replicated leaves; the first op
 * that wants them split slices the rank's two chunks, so RoPE sees global positions.
 *
 * Positions and RNG. A zigzag block is not one contiguous range of the sequence, so
 * its logical offset (placement.h) is that of the block in cp order. The two ops that
 * depend on where a token sits are given their chunks with their true offsets:
 * attention (causal mask, dropout mask) works chunk by chunk; dropout is emitted per
 * run of rows contiguous in the sequence, each with its global offset, so every plan
 * draws the serial masks.
 *
 * Attention: a K/V ring. Why graph nodes rather than one CP-attention op with the ring
 * inside its kernel: the ring is C-1 ring_shift collectives (ops/ring_shift.c) and
 * the partial attentions are the existing fused attention op on chunk pairs, so the
 * dataflow overlaps the transfer of the next K/V block with the attention on the
 * current one with no threads in a kernel, every transfer is counted, traced and
 * drawn in the DOT dump, and no new attention kernel (nor its CUDA twin) is needed.
 * Forward on rank r: K_0, V_0 = the rank's own; K_t, V_t = ring_shift(K_{t-1}, +1)
 * hold rank (r-t)'s chunks. Each of the rank's two query chunks attends to each K/V
 * chunk that is not entirely in its future (chunk j <= chunk i; the diagonal pair is
 * causal inside), and the partial results are merged by attention_merge (online
 * softmax). Backward: with the merged y and lse, attention_bwd on each pair gives the
 * exact dQ, dK, dV contributions (ops/attention_cp.c says why); dQ sums over pairs;
 * the dK/dV of ring step t travel back one rank per step (ring_shift by -1) while
 * collecting the contributions of the ranks they pass: G_{C-1} = contrib_{C-1},
 * G_t = contrib_t + shift_{-1}(G_{t+1}), dK = G_0. The received K/V blocks are kept
 * from forward to backward (the backward sends only dK/dV: C-1 blocks of each per
 * layer instead of Megatron's re-sent K/V, for one more K/V block of activation
 * memory per ring step, as sequence parallelism here keeps its gathered inputs).
 * Within documents (--reset-attention-mask), each query chunk carries its rows of
 * doc_start, which hold logical key positions: every pair masks the keys before its
 * queries' documents with no shift, and nothing more travels around the ring. With a
 * sliding window (attribute window), a pair whose keys all lie before every one of its
 * queries' windows is skipped like a future one (its block still travels on).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/shard.h"
#include "partitioners/partition_internal.h"

/* The forward ring of one attention node, kept for its backward. */
typedef struct cp_ring {
    int k_lid, v_lid, mb;
    mg_tensor *q[2];      /* the rank's query chunks (with their global offsets) */
    mg_tensor *ds[2];     /* their doc_start chunks (attention within documents), or NULL */
    mg_tensor **kc, **vc; /* [t * 2 + e]: chunk e of the K/V block of ring step t (NULL: unused) */
} cp_ring;

struct cp_state {
    cp_ring *rings;
    int n, cap;
};

static int cp_size(const part_ctx *c) { return c->mesh->size[MG_GROUP_CP]; }
static int cp_rank(const part_ctx *c) { return c->mesh->coord[MG_GROUP_CP]; }

static struct cp_state *cps(const part_ctx *c) { return c->axis[PART_CP]; }

static void cp_release(part_ctx *c) {
    struct cp_state *s = cps(c);
    if (!s) return;
    for (int i = 0; i < s->n; i++) {
        free(s->rings[i].kc);
        free(s->rings[i].vc);
    }
    free(s->rings);
    free(s);
    c->axis[PART_CP] = NULL;
}

static int oom(part_ctx *c) { return part_fail(c, MG_ERR_NOMEM, "context parallelism: out of memory"); }
static int built(part_ctx *c, const void *p) { return p ? MG_OK : (c->err->code ? c->err->code : part_graph_error(c)); }

/* ---- conversions over the cp axis (partition.c convert_axis) ----------------------------- */
/* Global chunk held at cp-order position k (rank k/2's first or second chunk). */
static int64_t global_chunk(int C, int64_t k) { return k % 2 ? 2 * C - 1 - k / 2 : k / 2; }

static mg_tensor *zigzag_slice(part_ctx *c, mg_tensor *x, int d) {
    int C = cp_size(c), r = cp_rank(c);
    int64_t cl = x->shape[d] / (2 * C);
    mg_tensor *p[2] = {mg_slice(c->P, x, d, r * cl, cl), mg_slice(c->P, x, d, (2 * C - 1 - r) * cl, cl)};
    return p[0] && p[1] ? mg_concat(c->P, 2, p, d) : NULL;
}

/* One step of a conversion over cp (partition.c asks every axis): to and from this
 * file's zigzag blocks. */
static mg_tensor *cp_convert(part_ctx *c, const mg_tensor *lt, mg_tensor *x, mg_placement *cur, int a, mg_sharding to,
                             bool *handled) {
    mg_sharding from = cur->ax[MG_GROUP_CP];
    int C = cp_size(c);
    if (a != MG_GROUP_CP || C == 1 || (from.kind != MG_SHARD_SPLIT && to.kind != MG_SHARD_SPLIT)) return NULL;
    *handled = true;
    cur->ax[a] = to;
    if (from.kind == MG_SHARD_SPLIT) { /* to FULL: gather the zigzag blocks, put the chunks in order */
        int d = from.dim;
        mg_tensor *g = mg_allgather(c->P, x, MG_GROUP_CP, C, d, c->seq++);
        if (!g) return NULL;
        int64_t cl = g->shape[d] / (2 * C);
        mg_tensor **parts = malloc((size_t)(2 * C) * sizeof *parts);
        if (!parts) return NULL;
        for (int64_t k = 0; k < 2 * C; k++) parts[global_chunk(C, k)] = mg_slice(c->P, g, d, k * cl, cl);
        mg_tensor *y = mg_concat(c->P, 2 * C, parts, d);
        free(parts);
        return part_named(c, y, lt, "cp_allgather", cur);
    }
    if (from.kind == MG_SHARD_PARTIAL) { /* to SPLIT: the sum, then the rank's chunks */
        x = mg_allreduce(c->P, x, MG_GROUP_CP, C, MG_REDUCE_SUM, c->seq++);
        if (!x) return NULL;
    }
    return part_named(c, zigzag_slice(c, x, to.dim), lt, "cp_zigzag", cur);
}

/* ---- runs of rows contiguous in the sequence ------------------------------------------------ */
typedef struct cp_run { int64_t local0, len, global0; } cp_run;

/* The runs of the local block of dimension d (split over cp, and maybe inside it over
 * tp) of a tensor of logical shape lt placed as pl: the block lies in the rank's two
 * chunks, so there are one or two; -1 past max (a placement this file did not make). */
static int cp_runs(part_ctx *c, const mg_tensor *lt, const mg_placement *pl, int d, cp_run *runs, int max) {
    int64_t local[MG_MAX_DIMS], off[MG_MAX_DIMS];
    mg_error e = {0};
    if (mg_placement_local(pl, c->mesh, lt->ndim, lt->shape, local, off, &e)) return -1;
    int C = cp_size(c), n = 0;
    int64_t cl = lt->shape[d] / (2 * C), p = off[d], end = off[d] + local[d];
    while (p < end) {
        if (n == max) return -1;
        int64_t k = p / cl, stop = (k + 1) * cl < end ? (k + 1) * cl : end;
        runs[n++] = (cp_run){p - off[d], stop - p, global_chunk(C, k) * cl + p % cl};
        p = stop;
    }
    return n;
}

/* t (a block of lt's dimension d rows local0..) gets lt's identity with its true
 * offset along d. */
static void chunk_identity(part_ctx *c, mg_tensor *t, const mg_tensor *lt, const mg_placement *pl, int d,
                           int64_t global0) {
    part_set_identity(c, t, lt, pl);
    t->logical.offset[d] = global0;
}

/* ---- dropout: masks by global position ------------------------------------------------------- */
static int cp_dropout(part_ctx *c, const mg_node *n) {
    const mg_tensor *lx = n->in[0];
    mg_placement want = *part_placement(c, lx);
    int d = want.ax[MG_GROUP_CP].dim;
    if (want.ax[MG_GROUP_TP].kind == MG_SHARD_PARTIAL) want.ax[MG_GROUP_TP] = tp_resolve_partial(c, lx, true);
    mg_tensor *x = part_get_pl(c, lx, &want);
    if (!x) return built(c, x);
    cp_run runs[4];
    int nr = cp_runs(c, lx, &want, d, runs, 4);
    if (nr < 1) return part_fail(c, MG_ERR_RUNTIME, "context parallelism: no row runs for '%s'", lx->name);
    /* The kernel draws the mask by the output's identity, or by the input's when the
     * output is whole. One run (the block is contiguous in the sequence: under sequence
     * parallelism, a chunk): the output, bound to the logical tensor, gets its true
     * offset. Several: each run's input block carries its offset (x itself keeps its
     * identity: a conversion or the logical tensor's value may have other readers). */
    if (nr == 1) {
        mg_node *nd = mg_node_new(c->P, MG_OP_DROPOUT, &n->attrs, 1, &x, "cp_dropout");
        if (!nd) return built(c, nd);
        if (part_bind(c, n, n->out[0], nd->out[0], &want)) return c->err->code;
        nd->out[0]->logical.offset[d] = runs[0].global0;
        return 1;
    }
    mg_tensor *outs[4];
    for (int i = 0; i < nr; i++) {
        mg_tensor *xs = mg_slice(c->P, x, d, runs[i].local0, runs[i].len);
        if (!xs) return built(c, xs);
        chunk_identity(c, xs, lx, &want, d, runs[i].global0);
        mg_node *nd = mg_node_new(c->P, MG_OP_DROPOUT, &n->attrs, 1, &xs, "cp_dropout");
        if (!nd) return built(c, nd);
        outs[i] = nd->out[0];
    }
    mg_tensor *y = mg_concat(c->P, nr, outs, d);
    if (!y) return built(c, y);
    return part_bind(c, n, n->out[0], y, &want) ? c->err->code : 1;
}

/* ---- attention: the K/V ring --------------------------------------------------------------------- */
static cp_ring *ring_new(part_ctx *c) {
    if (!cps(c) && !(c->axis[PART_CP] = calloc(1, sizeof(struct cp_state)))) return NULL;
    struct cp_state *s = cps(c);
    if (s->n == s->cap) {
        int cap = s->cap ? 2 * s->cap : 16;
        cp_ring *r = realloc(s->rings, (size_t)cap * sizeof *r);
        if (!r) return NULL;
        s->rings = r;
        s->cap = cap;
    }
    cp_ring *r = &s->rings[s->n];
    memset(r, 0, sizeof *r);
    int C = cp_size(c);
    r->kc = calloc((size_t)(2 * C), sizeof *r->kc);
    r->vc = calloc((size_t)(2 * C), sizeof *r->vc);
    if (!r->kc || !r->vc) {
        free(r->kc);
        free(r->vc);
        return NULL;
    }
    s->n++;
    return r;
}

static cp_ring *ring_find(part_ctx *c, int k_lid, int v_lid) {
    struct cp_state *s = cps(c);
    for (int i = s ? s->n - 1 : -1; i >= 0; i--)
        if (s->rings[i].k_lid == k_lid && s->rings[i].v_lid == v_lid) return &s->rings[i];
    return NULL;
}

/* Placements of attention's operands: heads as tp has them (split on dim 2, or
 * whole), the sequence zigzag-split over cp; the lse [b, nh, s] follows. */
static mg_sharding attn_tp_state(part_ctx *c, const mg_tensor *lq) {
    if (part_size(c, MG_GROUP_TP) == 1) return sh_full();
    mg_sharding s = part_state(c, lq, MG_GROUP_TP);
    return s.kind == MG_SHARD_SPLIT && (s.dim == 1 || s.dim == 2) ? s : sh_full();
}

static mg_placement attn_pl(part_ctx *c, const mg_tensor *lt, mg_sharding tp, bool lse) {
    mg_placement p = *part_placement(c, lt);
    p.ax[MG_GROUP_TP] = tp;
    if (lse && tp.kind == MG_SHARD_SPLIT) p.ax[MG_GROUP_TP] = sh_split(tp.dim == 2 ? 1 : 0);
    p.ax[MG_GROUP_CP] = mg_place_split(MG_GROUP_CP, lse ? 2 : 0);
    return p;
}

/* doc_start [s, b]: the sequence as the queries', the batch as tp splits it (whole
 * under a heads split). Its values are logical key positions: a chunk needs no shift. */
static mg_placement doc_start_pl(part_ctx *c, const mg_tensor *lds, mg_sharding tp) {
    mg_placement p = *part_placement(c, lds);
    p.ax[MG_GROUP_TP] = tp.kind == MG_SHARD_SPLIT && tp.dim == 1 ? tp : sh_full();
    p.ax[MG_GROUP_CP] = mg_place_split(MG_GROUP_CP, 0);
    return p;
}

static mg_tensor *get_as(part_ctx *c, const mg_tensor *lt, const mg_placement *p) { return part_get_pl(c, lt, p); }

/* Chunk e (0: the first, 1: the second) of a rank's block along d, standing for
 * global chunk g of lt. */
static mg_tensor *chunk_of(part_ctx *c, mg_tensor *x, const mg_tensor *lt, const mg_placement *pl, int d, int e,
                           int64_t g, const char *name) {
    int64_t cl = x->shape[d] / 2;
    mg_tensor *y = mg_slice(c->P, x, d, e * cl, cl);
    if (!y) return NULL;
    (void)name; /* slices are named by the builder; the chunk is in the scope */
    chunk_identity(c, y, lt, pl, d, g * cl);
    return y;
}

/* Whether some query of global chunk qg sees some key of chunk kg (chunks of cl
 * positions): not all in its future, and with a window, not all before it (the chunk's
 * last key against the window of its first query). */
static bool pair_visible(const mg_node *n, int64_t qg, int64_t kg, int64_t cl) {
    int64_t w = n->attrs.attention.window;
    return kg <= qg && (w == 0 || (kg + 1) * cl - 1 >= qg * cl - w + 1);
}

static int cp_attention_fwd(part_ctx *c, const mg_node *n) {
    int C = cp_size(c), r = cp_rank(c), rc = MG_OK;
    const mg_tensor *lq = n->in[0], *lk = n->in[1], *lv = n->in[2];
    mg_sharding ts = attn_tp_state(c, lq);
    mg_placement pq = attn_pl(c, lq, ts, false), pk = attn_pl(c, lk, ts, false), pv = attn_pl(c, lv, ts, false);
    mg_tensor *q = get_as(c, lq, &pq), *k = get_as(c, lk, &pk), *v = get_as(c, lv, &pv);
    if (!q || !k || !v) return built(c, NULL);
    cp_ring *ring = ring_new(c);
    if (!ring) return oom(c);
    ring->k_lid = lk->id, ring->v_lid = lv->id, ring->mb = n->mb;
    int64_t qg[2] = {r, 2 * C - 1 - r}, cl = lq->shape[0] / (2 * C);
    for (int a = 0; a < 2; a++)
        if (!(ring->q[a] = chunk_of(c, q, lq, &pq, 0, a, qg[a], "cp_q"))) return built(c, NULL);
    if (n->n_in > 3) { /* within documents: each query chunk with its rows' document starts */
        const mg_tensor *lds = n->in[3];
        mg_placement pds = doc_start_pl(c, lds, ts);
        mg_tensor *ds = get_as(c, lds, &pds);
        for (int a = 0; a < 2; a++)
            if (!ds || !(ring->ds[a] = chunk_of(c, ds, lds, &pds, 0, a, qg[a], "cp_doc_start"))) return built(c, NULL);
    }
    int n_attn = ring->ds[0] ? 4 : 3;
    /* per query chunk: (y, lse) of each visible K/V chunk, in ring order */
    mg_tensor **parts = malloc((size_t)(8 * C) * sizeof *parts);
    int np[2] = {0, 0};
    if (!parts) return oom(c);
    mg_tensor *kt = k, *vt = v;
    for (int t = 0; t < C && !rc; t++) {
        if (t > 0) { /* the next block: sent while the attention on this one computes */
            kt = mg_ring_shift(c->P, kt, MG_GROUP_CP, C, 1, c->seq++);
            vt = kt ? mg_ring_shift(c->P, vt, MG_GROUP_CP, C, 1, c->seq++) : NULL;
            if (!vt) {
                rc = built(c, NULL);
                break;
            }
        }
        int src = (r - t + C) % C;
        int64_t kg[2] = {src, 2 * C - 1 - src};
        for (int e = 0; e < 2 && !rc; e++) {
            if (!pair_visible(n, qg[0], kg[e], cl) && !pair_visible(n, qg[1], kg[e], cl)) continue; /* seen by neither */
            mg_tensor *kc = chunk_of(c, kt, lk, &pk, 0, e, kg[e], "cp_k"), *vc = chunk_of(c, vt, lv, &pv, 0, e, kg[e], "cp_v");
            ring->kc[2 * t + e] = kc, ring->vc[2 * t + e] = vc;
            if (!kc || !vc) {
                rc = built(c, NULL);
                break;
            }
            for (int a = 0; a < 2; a++) {
                if (!pair_visible(n, qg[a], kg[e], cl)) continue;
                mg_tensor *in[4] = {ring->q[a], kc, vc, ring->ds[a]};
                mg_node *nd = mg_node_new(c->P, MG_OP_ATTENTION, &n->attrs, n_attn, in, "cp_attention");
                if (!nd) {
                    rc = built(c, NULL);
                    break;
                }
                parts[a * 4 * C + np[a]++] = nd->out[0];
                parts[a * 4 * C + np[a]++] = nd->out[1];
            }
        }
    }
    mg_tensor *ys[2] = {0}, *ls[2] = {0};
    for (int a = 0; a < 2 && !rc; a++) {
        mg_tensor **p = parts + a * 4 * C;
        if (np[a] == 2) {
            ys[a] = p[0], ls[a] = p[1];
            continue;
        }
        mg_node *m = mg_node_new(c->P, MG_OP_ATTENTION_MERGE, NULL, np[a], p, "cp_merge");
        if (!m) rc = built(c, NULL);
        else ys[a] = m->out[0], ls[a] = m->out[1];
    }
    free(parts);
    if (rc) return rc;
    mg_tensor *y = mg_concat(c->P, 2, ys, 0), *lse = y ? mg_concat(c->P, 2, ls, 2) : NULL;
    if (!lse) return built(c, NULL);
    mg_placement pl = attn_pl(c, lq, ts, true);
    if (part_bind(c, n, n->out[0], y, &pq) || part_bind(c, n, n->out[1], lse, &pl)) return c->err->code;
    return 1;
}

static mg_tensor *sum2(part_ctx *c, mg_tensor *a, mg_tensor *b) { return a ? mg_add(c->P, a, b) : b; }

static int cp_attention_bwd(part_ctx *c, const mg_node *n) {
    int C = cp_size(c), r = cp_rank(c), rc = MG_OK;
    const mg_tensor *ldy = n->in[0], *lq = n->in[1], *lk = n->in[2], *lv = n->in[3], *ly = n->in[4], *ll = n->in[5];
    cp_ring *ring = ring_find(c, lk->id, lv->id);
    if (!ring)
        return part_fail(c, MG_ERR_UNSUPPORTED,
                         "context parallelism: attention_bwd '%s' has no forward ring (its forward was not partitioned "
                         "first)",
                         n->out[0]->name);
    mg_sharding ts = attn_tp_state(c, lq);
    mg_placement pq = attn_pl(c, lq, ts, false), pl = attn_pl(c, ll, ts, true);
    mg_placement pdy = attn_pl(c, ldy, ts, false), py = attn_pl(c, ly, ts, false);
    mg_placement pk = attn_pl(c, lk, ts, false), pv = attn_pl(c, lv, ts, false);
    mg_tensor *dy = get_as(c, ldy, &pdy), *y = get_as(c, ly, &py), *lse = get_as(c, ll, &pl);
    if (!dy || !y || !lse) return built(c, NULL);
    int64_t qg[2] = {r, 2 * C - 1 - r}, cl = lq->shape[0] / (2 * C);
    mg_tensor *dyc[2], *yc[2], *lc[2], *dq[2] = {0};
    for (int a = 0; a < 2; a++) {
        dyc[a] = chunk_of(c, dy, ldy, &pdy, 0, a, qg[a], "cp_dy");
        yc[a] = chunk_of(c, y, ly, &py, 0, a, qg[a], "cp_y");
        lc[a] = chunk_of(c, lse, ll, &pl, 2, a, qg[a], "cp_lse");
        if (!dyc[a] || !yc[a] || !lc[a]) return built(c, NULL);
    }
    mg_tensor *gk = NULL, *gv = NULL;
    for (int t = C - 1; t >= 0 && !rc; t--) {
        int src = (r - t + C) % C;
        int64_t kg[2] = {src, 2 * C - 1 - src};
        mg_tensor *dk[2] = {0}, *dv[2] = {0};
        for (int e = 0; e < 2 && !rc; e++) {
            mg_tensor *kc = ring->kc[2 * t + e], *vc = ring->vc[2 * t + e];
            for (int a = 0; a < 2 && kc; a++) {
                if (!pair_visible(n, qg[a], kg[e], cl)) continue;
                mg_tensor *in[7] = {dyc[a], ring->q[a], kc, vc, yc[a], lc[a], ring->ds[a]};
                mg_node *b = mg_node_new(c->P, MG_OP_ATTENTION_BWD, &n->attrs, ring->ds[a] ? 7 : 6, in,
                                         "cp_attention_bwd");
                if (!b) {
                    rc = built(c, NULL);
                    break;
                }
                dq[a] = sum2(c, dq[a], b->out[0]);
                dk[e] = sum2(c, dk[e], b->out[1]);
                dv[e] = sum2(c, dv[e], b->out[2]);
            }
            if (!rc && !dk[e]) { /* no query of this rank sees the chunk (v's head size may differ from k's) */
                const mg_tensor *ks = ring->kc[0], *vs = ring->vc[0];
                dk[e] = mg_zeros(c->P, MG_F32, ks->ndim, ks->shape);
                dv[e] = mg_zeros(c->P, MG_F32, vs->ndim, vs->shape);
            }
        }
        if (rc) break;
        mg_tensor *ck = mg_concat(c->P, 2, dk, 0), *cv = mg_concat(c->P, 2, dv, 0);
        if (gk) { /* the gradient of block t+1 comes back from the next rank */
            gk = mg_ring_shift(c->P, gk, MG_GROUP_CP, C, -1, c->seq++);
            gv = mg_ring_shift(c->P, gv, MG_GROUP_CP, C, -1, c->seq++);
            gk = gk && ck ? mg_add(c->P, ck, gk) : NULL;
            gv = gv && cv ? mg_add(c->P, cv, gv) : NULL;
        } else {
            gk = ck, gv = cv;
        }
        if (!gk || !gv) rc = built(c, NULL);
    }
    if (rc) return rc;
    mg_tensor *dqa = dq[0] && dq[1] ? mg_concat(c->P, 2, dq, 0) : NULL;
    if (!dqa) return built(c, NULL);
    if (part_bind(c, n, n->out[0], dqa, &pq) || part_bind(c, n, n->out[1], gk, &pk) ||
        part_bind(c, n, n->out[2], gv, &pv))
        return c->err->code;
    return 1;
}

/* ---- the walk's hooks -------------------------------------------------------------------------- */
static bool is_split(mg_sharding s) { return s.kind == MG_SHARD_SPLIT; }

static int cp_node(part_ctx *c, const mg_node *n) {
    if (cp_size(c) == 1) return PART_NEXT;
    if (n->n_in > MG_SHARD_MAX_IO || n->n_out > MG_SHARD_MAX_IO)
        return part_fail(c, MG_ERR_UNSUPPORTED, "partitioning: %s has too many inputs", mg_op_name(n->op));
    int rc = part_state_leaves(c, n); /* (an accumulator of a partial sum over cp is one too) */
    if (rc) return rc;
    mg_shard_io io;
    memset(&io, 0, sizeof io);
    mg_sharding in[MG_SHARD_MAX_IO];
    bool any = false;
    for (int i = 0; i < n->n_in; i++) {
        /* a leaf not made yet is replicated over cp (parameters, inputs); an input an
         * earlier axis already chose its cp state for (fsdp.c's gathered shards) in that state */
        const pt *q = &c->st[n->in[i]->id];
        in[i] = io.in[i] = c->want_set[i] >> MG_GROUP_CP & 1 ? c->want[i].ax[MG_GROUP_CP]
                           : q->t                           ? q->pl.ax[MG_GROUP_CP]
                                                            : mg_place_full(MG_GROUP_CP);
        io.in[i].group = MG_GROUP_NONE;
        any |= io.in[i].kind != MG_SHARD_FULL;
    }
    if (c->err->code) return c->err->code;
    /* Where the sequence enters: the token lookup takes the rank's tokens (its ids,
     * replicated leaves fed whole by the host, are sliced to its two chunks). */
    bool lookup = n->op == MG_OP_EMBEDDING && n->in[0]->ndim >= 1 && n->in[0]->shape[0] % (2 * cp_size(c)) == 0 &&
                  io.in[0].kind != MG_SHARD_PARTIAL && io.in[1].kind == MG_SHARD_FULL;
    if (!any && !lookup) return PART_NEXT; /* replicated over cp: outputs too */
    switch (n->op) {
    case MG_OP_ATTENTION:
        if (is_split(io.in[0]) && io.in[0].dim == 0) return cp_attention_fwd(c, n);
        break;
    case MG_OP_ATTENTION_BWD:
        if (is_split(io.in[1]) && io.in[1].dim == 0) return cp_attention_bwd(c, n);
        break;
    case MG_OP_DROPOUT:
        if (is_split(io.in[0]) && n->attrs.dropout.p > 0.0f) return cp_dropout(c, n);
        break;
    default:
        break;
    }
    int last = n->in[0]->ndim - 1;
    if (lookup) { /* the rank's tokens' rows */
        io.want[0] = is_split(io.in[0]) ? io.in[0] : mg_sh_split(0);
        io.want[1] = mg_sh_full();
        io.out[0] = io.want[0];
    } else if (n->op == MG_OP_CROSS_ENTROPY && is_split(io.in[0]) && io.in[0].dim < last) {
        /* the rank's tokens' terms over the micro-batch's count: a term of the mean */
        io.want[0] = io.want[1] = io.in[0];
        io.want[2] = mg_sh_full();
        io.out[0] = mg_sh_partial();
        io.out[1] = io.in[0];
    } else if (n->op == MG_OP_CROSS_ENTROPY_BWD && is_split(io.in[1]) && io.in[1].dim < n->in[1]->ndim - 1) {
        io.want[0] = io.want[4] = mg_sh_full();
        io.want[1] = io.want[2] = io.want[3] = io.out[0] = io.in[1];
    } else { /* every other op by its own rule, over the sequence split */
        rc = part_apply_rule(c, n, MG_GROUP_CP, in, NULL, &io);
        if (rc) return rc;
        if (io.expand || io.count_once)
            return part_fail(c, MG_ERR_UNSUPPORTED, "context parallelism: op %s (node '%s') cannot run on a sequence "
                             "split", mg_op_name(n->op), n->out[0]->name);
        return PART_NEXT;
    }
    for (int i = 0; i < n->n_in; i++) part_want(c, i, MG_GROUP_CP, io.want[i]);
    for (int j = 0; j < n->n_out; j++) part_out(c, j, MG_GROUP_CP, io.out[j]);
    return PART_NEXT;
}

static int cp_after(part_ctx *c, const mg_node *n) {
    /* with dp > 1, dp.c reduces over dp x cp; the distributed optimizer reduce-scatters
     * its buckets over dp x cp (dist_opt.c), whatever dp is */
    if (cp_size(c) == 1 || part_size(c, MG_GROUP_DP) > 1) return MG_OK;
    for (int j = 0; j < n->n_out; j++) {
        const mg_tensor *lo = n->out[j];
        pt *p = &c->st[lo->id];
        if (c->final_grad_of[lo->id] < 0 || !p->t || p->pl.ax[MG_GROUP_CP].kind != MG_SHARD_PARTIAL) continue;
        if (dopt_has_param(c, c->final_grad_of[lo->id])) continue;
        part_enter_step_context(c); /* reduced once per step, as soon as it is final */
        mg_placement want = p->pl;
        want.ax[MG_GROUP_CP] = mg_place_full(MG_GROUP_CP);
        mg_tensor *t = part_get_pl(c, lo, &want);
        if (!t) return built(c, NULL);
        *p = (pt){t, want};
    }
    return MG_OK;
}

const part_axis part_axis_cp = {
    .name = "cp", .release = cp_release, .node = cp_node, .convert = cp_convert, .after = cp_after};

/* Text generation from a GPT-family model's weights (include/mgraph/generate.h): a prefill
 * graph runs the prompt at once, then a decode graph one token at a time, reading the
 * earlier tokens' keys and values from a cache that the host appends to
 * (models/gpt_decode.c); both borrow the weights from the storage that holds them (a
 * checkpoint loaded by mgraph-generate, or a training run's own storage for mgraph-run's
 * samples). The next token: transformers' logits processors in its order (temperature,
 * then top-k, then top-p), then one draw from what is left. The draw is a counter-based
 * uniform (mgraph's Philox, include/mgraph/rng.h) of (seed, sequence, step): a prompt's
 * tokens depend on the seed and its place among the prompts only (not on the machine,
 * the threads or the time). The reference executor runs the graphs on the calling thread.
 */
#define _GNU_SOURCE /* qsort_r */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mgraph/generate.h"
#include "mgraph/plan.h"
#include "mgraph/rng.h"

int mg_sampler_init(mg_sampler *s, int64_t v) {
    s->v = v;
    s->p = malloc((size_t)v * sizeof *s->p);
    s->order = malloc((size_t)v * sizeof *s->order);
    return s->p && s->order ? MG_OK : MG_ERR_NOMEM;
}

void mg_sampler_free(mg_sampler *s) {
    free(s->p);
    free(s->order);
    s->p = NULL, s->order = NULL;
}

static int by_value_desc(const void *a, const void *b, void *keys) {
    const float *k = keys;
    float x = k[*(const int32_t *)a], y = k[*(const int32_t *)b];
    if (x != y) return x > y ? -1 : 1;
    return *(const int32_t *)a - *(const int32_t *)b;
}

int32_t mg_sample(mg_sampler *s, const mg_sampling *o, const float *logits, uint64_t seq, uint64_t step,
                   double *logprob) {
    int64_t v = s->v;
    /* log-softmax of the raw logits, for the chosen token's log-probability */
    double mx = -INFINITY, sum = 0;
    for (int64_t i = 0; i < v; i++) mx = logits[i] > mx ? logits[i] : mx;
    for (int64_t i = 0; i < v; i++) sum += exp((double)logits[i] - mx);
    double lse = mx + log(sum);
    int32_t pick = 0;
    if (o->greedy) {
        for (int64_t i = 1; i < v; i++)
            if (logits[i] > logits[pick]) pick = (int32_t)i;
        *logprob = logits[pick] - lse;
        return pick;
    }
    /* p = logits / temperature; filtered entries -inf */
    float *p = s->p;
    for (int64_t i = 0; i < v; i++) p[i] = logits[i] / o->temperature;
    bool sorted = false;
    if ((o->top_k > 0 && o->top_k < v) || (o->top_p > 0 && o->top_p < 1)) {
        for (int64_t i = 0; i < v; i++) s->order[i] = (int32_t)i;
        qsort_r(s->order, (size_t)v, sizeof *s->order, by_value_desc, p);
        sorted = true;
    }
    if (sorted && o->top_k > 0 && o->top_k < v) { /* keep what is >= the k-th largest */
        float kth = p[s->order[o->top_k - 1]];
        for (int64_t i = 0; i < v; i++)
            if (p[i] < kth) p[i] = -INFINITY;
    }
    if (sorted && o->top_p > 0 && o->top_p < 1) {
        /* transformers' TopPLogitsWarper: drop the tokens whose ascending cumulative
         * probability stays <= 1 - top_p, keeping at least the largest */
        double m2 = p[s->order[0]], z = 0;
        for (int64_t i = 0; i < v; i++) z += isinf(p[i]) ? 0 : exp((double)p[i] - m2);
        /* the ascending cumulative sum up to rank r (descending order) is 1 - the mass of ranks < r */
        double above = 0;
        for (int64_t r = 0; r < v; r++) {
            int32_t t = s->order[r];
            double pr = isinf(p[t]) ? 0 : exp((double)p[t] - m2) / z;
            double asc_cum = 1.0 - above;
            above += pr;
            if (r > 0 && asc_cum <= 1.0 - o->top_p) p[t] = -INFINITY;
        }
    }
    double m3 = -INFINITY, z3 = 0;
    for (int64_t i = 0; i < v; i++) m3 = p[i] > m3 ? p[i] : m3;
    for (int64_t i = 0; i < v; i++) z3 += isinf(p[i]) ? 0 : exp((double)p[i] - m3);
    double u = mg_rng_uniform(o->seed, 0x67656e6572617465ull /* "generate" */, seq, step) * z3, acc = 0;
    pick = -1;
    for (int64_t i = 0; i < v; i++) {
        if (isinf(p[i])) continue;
        acc += exp((double)p[i] - m3);
        pick = (int32_t)i;
        if (acc > u) break;
    }
    *logprob = logits[pick] - lse;
    return pick;
}

/* ---- the graphs --------------------------------------------------------------------------------- */
typedef struct gen_graph {
    mg_graph *g;          /* the logical graph */
    mg_gpt m;
    mg_gpt_decode d;      /* its tensors (logical) */
    bool part;            /* tensor parallelism: R is this rank's graph, run in place of g */
    mg_rank_graph R;
    mg_tensor **whole;    /* [logical tensors]: the host-read outputs' whole values on this rank */
    mg_comm *comm;
    mg_memplan *plan;
    mg_storage *st;
} gen_graph;

static void graph_free(gen_graph *x) {
    mg_storage_free(x->st);
    mg_memplan_free(x->plan);
    mg_gpt_decode_release(&x->d);
    mg_gpt_release(&x->m);
    if (x->part) mg_rank_graph_release(&x->R);
    free(x->whole);
    mg_graph_free(x->g);
    memset(x, 0, sizeof *x);
}

static mg_graph *run_graph(const gen_graph *x) { return x->part ? x->R.graph : x->g; }

/* The rank's tensor the host writes logical input lt through (its block) */
static mg_tensor *rank_in(const gen_graph *x, mg_tensor *lt) { return x->part ? mg_rank_tensor(&x->R, lt) : lt; }

/* The whole value of host-read output lt on this rank */
static void *out_data(const gen_graph *x, mg_tensor *lt) {
    return mg_storage_data(x->st, x->part ? x->whole[lt->id] : lt);
}

/* Copies the block rank tensor t holds of a logical tensor from `full` (the whole
 * logical tensor, row-major) into dst, element size es. */
static void copy_block(void *dst, const void *full, const mg_tensor *t, size_t es) {
    int nd = t->ndim;
    int64_t w = t->shape[nd - 1], rows = mg_numel(t) / (w > 0 ? w : 1);
    for (int64_t r = 0; r < rows; r++) {
        int64_t rem = r, off = 0, stride = t->logical.shape[nd - 1];
        for (int d = nd - 2; d >= 0; d--) {
            int64_t i = rem % t->shape[d];
            rem /= t->shape[d];
            off += (i + t->logical.offset[d]) * stride;
            stride *= t->logical.shape[d];
        }
        memcpy((char *)dst + (size_t)(r * w) * es, (const char *)full + (size_t)(off + t->logical.offset[nd - 1]) * es,
               (size_t)w * es);
    }
}

/* Writes logical input lt's value `full` (whole) into this rank's block of it. */
static void put_input(gen_graph *x, mg_tensor *lt, const void *full) {
    mg_tensor *t = rank_in(x, lt);
    size_t es = lt->dtype == MG_I32 ? sizeof(int32_t) : sizeof(float);
    if (t == lt) memcpy(mg_storage_data(x->st, t), full, (size_t)mg_numel(lt) * es);
    else copy_block(mg_storage_data(x->st, t), full, t, es);
}

static bool block_is_whole(const mg_tensor *t) {
    if (t->ndim != t->logical.ndim) return false;
    for (int d = 0; d < t->ndim; d++)
        if (t->shape[d] != t->logical.shape[d] || t->logical.offset[d]) return false;
    return true;
}

/* Tensor parallelism: partitions x->g for this rank, gathers the host-read outputs that
 * the rank holds a tensor-parallel block of (the logits' vocabulary, the new keys' and
 * values' heads) with all-gathers after the rank's own collectives. */
static int partition(gen_graph *x, const mg_generate_parallel *par, mg_error *err) {
    int rc = mg_partition(x->g, par->plan, par->mesh, &x->R, err);
    if (rc) return rc;
    x->part = true;
    x->comm = par->comm;
    int nl = mg_graph_n_tensors(x->g);
    if (!(x->whole = calloc((size_t)nl, sizeof *x->whole))) return mg_error_set(err, MG_ERR_NOMEM, "out of memory");
    mg_graph *P = x->R.graph;
    int64_t seq = 0;
    for (int i = 0; i < mg_graph_n_nodes(P); i++) {
        const mg_node *n = mg_graph_node(P, i);
        if (n->op >= MG_OP_ALLREDUCE && n->op <= MG_OP_RECV && n->attrs.comm.seq >= seq) seq = n->attrs.comm.seq + 1;
        if (n->op == MG_OP_RING_SHIFT && n->attrs.comm.seq >= seq) seq = n->attrs.comm.seq + 1;
    }
    int tp = par->plan->tp;
    for (int i = 0; i < nl && !rc; i++) {
        mg_tensor *lt = mg_graph_tensor(x->g, i), *t = mg_rank_tensor(&x->R, lt);
        if (!lt->persistent || !t) continue;
        if (block_is_whole(t)) {
            x->whole[i] = t;
            continue;
        }
        const mg_sharding *sh = &t->place.ax[MG_GROUP_TP];
        for (int a = 0; a < MG_MESH_AXES; a++)
            if (a != MG_GROUP_TP && t->place.ax[a].kind != MG_SHARD_FULL)
                return mg_error_set(err, MG_ERR_UNSUPPORTED, "generate: %s is split on an axis other than tp", lt->name);
        if (sh->kind != MG_SHARD_SPLIT)
            return mg_error_set(err, MG_ERR_UNSUPPORTED, "generate: %s is not whole on this rank", lt->name);
        t->persistent = false;
        mg_tensor *y = mg_allgather(P, t, MG_GROUP_TP, tp, sh->dim, seq++);
        if (!y) break;
        y->persistent = true;
        y->logical = lt->logical; /* (the whole) */
        x->whole[i] = y;
    }
    if (mg_graph_error(P)->code) return mg_error_set(err, mg_graph_error(P)->code, "generate: %s", mg_graph_error(P)->msg);
    return rc;
}

static bool same_block(const mg_tensor *a, const mg_tensor *b) {
    if (a->ndim != b->ndim || a->logical.ndim != b->logical.ndim) return false;
    for (int d = 0; d < a->ndim; d++)
        if (a->shape[d] != b->shape[d] || a->logical.offset[d] != b->logical.offset[d]) return false;
    return true;
}

/* The parameters' blocks of this rank, from the weights: whole (a checkpoint loaded
 * on every rank), or this rank's same blocks (a training rank graph of the same
 * tensor parallelism: mgraph-run's samples). */
static int fill_params(gen_graph *x, const mg_generate_parallel *par, const mg_storage *weights, mg_error *err) {
    for (int i = 0; i < mg_graph_n_tensors(x->g); i++) {
        mg_tensor *lt = mg_graph_tensor(x->g, i), *t = mg_rank_tensor(&x->R, lt);
        if (lt->role != MG_ROLE_PARAM || lt->src || !t) continue;
        const mg_tensor *w = mg_graph_find(par->weights_graph, lt->name);
        bool ok = w && w->dtype == MG_F32 && lt->dtype == MG_F32 && t->ndim == t->logical.ndim;
        if (ok && same_block(w, t))
            memcpy(mg_storage_data(x->st, t), mg_storage_data(weights, w), (size_t)mg_numel(t) * sizeof(float));
        else if (ok && mg_numel(w) == mg_numel(lt) && block_is_whole(w))
            copy_block(mg_storage_data(x->st, t), mg_storage_data(weights, w), t, sizeof(float));
        else
            return mg_error_set(err, MG_ERR_INVALID, "generate: the weights hold no f32 %s, whole or this rank's block",
                                lt->name);
    }
    return MG_OK;
}

/* A forward over n new tokens after cache_len cached ones, on the loaded weights. */
static int graph_new(const mg_gpt_config *model, const mg_storage *weights, const mg_generate_parallel *par, int n,
                     int cache_len, gen_graph *x, mg_error *err) {
    memset(x, 0, sizeof *x);
    x->g = mg_graph_new();
    int rc = x->g ? MG_OK : mg_error_set(err, MG_ERR_NOMEM, "out of memory");
    /* MoE: no expert capacity (a token's experts must not depend on what else the call
     * holds: the prefill's prompt, or one token), as transformers' and Megatron's inference */
    mg_gpt_config c = *model;
    c.moe.capacity_factor = 0, c.moe.pad_to_capacity = false;
    if (!rc) rc = mg_gpt2_params(x->g, &c, &x->m, err);
    if (!rc) rc = mg_gpt_decode_build(x->g, &x->m, n, cache_len, &x->d, err);
    if (!rc && par) rc = partition(x, par, err);
    if (!rc) rc = mg_memplan_build(run_graph(x), true, &x->plan, err);
    /* one rank: the weights borrowed; tensor parallelism: this rank's blocks copied */
    mg_storage_options so = {.params_from = par ? NULL : weights};
    if (!rc) rc = mg_storage_new_ex(run_graph(x), x->plan, &so, &x->st, err);
    if (!rc) rc = mg_storage_init(x->st, 0, err); /* (inputs with an init: --qk-l2-norm's ones) */
    if (!rc && par) rc = fill_params(x, par, weights, err);
    if (rc) graph_free(x);
    return rc;
}

static int graph_run(gen_graph *x, mg_error *err) {
    mg_exec_info info = {.comm = x->comm};
    mg_storage_refresh_borrowed(x->st); /* (a device engine may hold newer copies of the weights) */
    return mg_exec_reference(run_graph(x), x->st, &info, err);
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* ---- one prompt ---------------------------------------------------------------------------------- */

static int write_tokens(gen_graph *x, const int32_t *ids, int64_t n, int64_t p0, mg_error *err) {
    int32_t *pos = malloc((size_t)n * sizeof *pos);
    if (!pos) return mg_error_set(err, MG_ERR_NOMEM, "out of memory");
    for (int64_t i = 0; i < n; i++) pos[i] = (int32_t)(p0 + i);
    put_input(x, x->d.tokens, ids);
    put_input(x, x->d.positions, pos);
    free(pos);
    return MG_OK;
}

/* Appends the graph's new keys and values (rows 0..n) to the decode graph's cache at row
 * p: the whole rows into this rank's block of them (the cache is not split by rows). */
static void append_cache(const gen_graph *from, gen_graph *dec, int64_t p) {
    for (int i = 0; i < from->d.n_layers; i++) {
        mg_tensor *nk[2] = {from->d.new_k[i], from->d.new_v[i]}, *ck[2] = {dec->d.cache_k[i], dec->d.cache_v[i]};
        for (int j = 0; j < 2; j++) {
            const float *src = out_data(from, nk[j]);
            mg_tensor *t = rank_in(dec, ck[j]);
            int64_t rows = nk[j]->shape[0], row = mg_numel(t) / t->shape[0];
            float *dst = (float *)mg_storage_data(dec->st, t) + (size_t)p * (size_t)row;
            if (t == ck[j]) {
                memcpy(dst, src, (size_t)mg_numel(nk[j]) * sizeof(float));
                continue;
            }
            /* the block of the rows' other dimensions: a tensor of the rows' shape, t's offsets */
            mg_tensor blk = *t;
            blk.shape[0] = rows;
            blk.logical.shape[0] = rows;
            copy_block(dst, src, &blk, sizeof(float));
        }
    }
}

int mg_gpt_generate(const mg_gpt_config *model, const mg_storage *weights, const int32_t *prompt, int64_t n_prompt,
                    const mg_generate_options *o, uint64_t seq, mg_sampler *smp, mg_generation *res, mg_error *err) {
    memset(res, 0, sizeof *res);
    int64_t P = n_prompt, N = o->max_new;
    if (P < 1 || N < 1 || P + N > model->max_position)
        return mg_error_set(err, MG_ERR_INVALID, "generate: %lld prompt tokens and %lld new ones need %lld positions, the "
                            "model has %lld", (long long)P, (long long)N, (long long)(P + N), (long long)model->max_position);
    int32_t eod = o->eod;
    res->logprobs = calloc((size_t)N, sizeof *res->logprobs);
    int rc = res->logprobs ? mg_ids_reserve(&res->ids, (size_t)(P + N), err)
                           : mg_error_set(err, MG_ERR_NOMEM, "out of memory");
    for (int64_t i = 0; !rc && i < P; i++) rc = mg_ids_push(&res->ids, prompt[i], err);
    if (rc) {
        mg_generation_free(res);
        return rc;
    }

    res->stop = "length";
    gen_graph pre = {0}, dec = {0};
    float *mask = malloc((size_t)(P + N) * sizeof *mask); /* (one row: [1, cache_len + 1]) */
    if (!mask) rc = mg_error_set(err, MG_ERR_NOMEM, "out of memory");
    double t0 = now_s();
    /* the prompt at once (or, --no-kv-cache, the whole sequence for every token) */
    if (!rc) rc = graph_new(model, weights, o->parallel, (int)P, 0, &pre, err);
    if (!rc && !o->no_cache && N > 1) rc = graph_new(model, weights, o->parallel, 1, (int)(P + N - 2), &dec, err);
    if (!rc) rc = write_tokens(&pre, prompt, P, 0, err);
    if (!rc) rc = graph_run(&pre, err);
    if (!rc && dec.g) append_cache(&pre, &dec, 0);
    res->prefilled = P;
    double t1 = now_s();
    res->prefill_s = t1 - t0;
    gen_graph *last = &pre;
    for (int64_t k = 0; !rc && k < N; k++) {
        int32_t tok = mg_sample(smp, &o->sampling, out_data(last, last->d.logits), seq, (uint64_t)k, &res->logprobs[k]);
        rc = mg_ids_push(&res->ids, tok, err);
        if (rc || tok == eod) {
            if (tok == eod) res->stop = "eos";
            break;
        }
        if (k + 1 == N) break;
        int64_t p = P + k; /* the new token's position */
        if (o->no_cache) {
            graph_free(&pre);
            rc = graph_new(model, weights, o->parallel, (int)(p + 1), 0, &pre, err);
            if (!rc) rc = write_tokens(&pre, res->ids.data, p + 1, 0, err);
        } else {
            rc = write_tokens(&dec, &tok, 1, p, err);
            mg_gpt_decode_fill_mask(1, dec.d.cache_len, p, 0, mask);
            put_input(&dec, dec.d.mask, mask);
            if (dec.d.mask_window) {
                mg_gpt_decode_fill_mask(1, dec.d.cache_len, p, model->window, mask);
                put_input(&dec, dec.d.mask_window, mask);
            }
            last = &dec;
        }
        if (!rc) rc = graph_run(last, err);
        /* (the last token's keys are never read: the cache holds P + N - 2 rows) */
        if (!rc && !o->no_cache && p < dec.d.cache_len) append_cache(&dec, &dec, p);
    }
    res->decode_s = now_s() - t1;
    graph_free(&pre);
    graph_free(&dec);
    free(mask);
    if (rc) mg_generation_free(res);
    return rc;
}

void mg_generation_free(mg_generation *g) {
    mg_ids_free(&g->ids);
    free(g->logprobs);
    g->logprobs = NULL;
}


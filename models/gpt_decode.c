/* The GPT family's forward for text generation with a key/value cache (mgraph/model.h,
 * mg_gpt_decode). The layers are the training forward's (gpt_attn_qkv, gpt_mlp_block,
 * the model's norms); only attention differs: without a cache it is the fused causal
 * attention the training step runs, with one it reads the cached keys and values the
 * host appended after earlier calls plus the new tokens' own, under a mask the host
 * writes, as four ops (scores, mask, softmax, weighted sum), so that the decode graph
 * needs no op of its own and stays an ordinary graph the executors and the partitioner
 * know. Multi-latent attention caches the keys and values its up projections expand for
 * every head (not the compressed latent: simpler, and more memory); MoE layers route
 * the call's tokens as training does. Batch 1: one sequence per call. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/model_internal.h"

void mg_gpt_decode_fill_mask(int n, int cache_len, int64_t p, int64_t window, float *mask) {
    int64_t cols = (int64_t)cache_len + n;
    for (int i = 0; i < n; i++) {
        int64_t qpos = p + i;
        for (int64_t j = 0; j < cols; j++) {
            /* the key's position: cache row j holds position j; new key k position p + k */
            int64_t kpos = j < cache_len ? j : p + (j - cache_len);
            bool valid = j < cache_len ? j < p : kpos <= qpos;
            bool seen = valid && (window <= 0 || kpos > qpos - window);
            mask[(int64_t)i * cols + j] = seen ? 0.0f : -INFINITY;
        }
    }
}

/* softmax(q kᵀ · scale + mask) v over the cache and the new keys, per head: q [n, 1, nh, hd],
 * keys [T, 1, G, hd], values [T, 1, G, hv] (T = cache_len + n, the cache first), mask [n, T].
 * Query head h reads group h / (nh / G), as mg_attention. Returns [n, 1, nh·hv]. */
static mg_tensor *cached_attention(mg_graph *g, const mg_gpt_config *c, mg_tensor *q, mg_tensor *keys,
                                   mg_tensor *values, mg_tensor *mask) {
    int64_t n = q->shape[0], nh = q->shape[2], hd = q->shape[3], T = keys->shape[0], G = keys->shape[2];
    int64_t hv = values->shape[3], r = nh / G;
    /* queries grouped by their key group: [G, r·n, hd] (rows: head in group, then token) */
    mg_tensor *qg = mg_reshape(g, q, 4, (int64_t[]){n, G, r, hd});
    qg = mg_transpose(g, qg, (int[]){1, 2, 0, 3});
    qg = mg_reshape(g, qg, 3, (int64_t[]){G, r * n, hd});
    mg_tensor *kg = mg_transpose(g, mg_reshape(g, keys, 3, (int64_t[]){T, G, hd}), (int[]){1, 0, 2});   /* [G, T, hd] */
    mg_tensor *vg = mg_transpose(g, mg_reshape(g, values, 3, (int64_t[]){T, G, hv}), (int[]){1, 0, 2}); /* [G, T, hv] */
    mg_tensor *s = mg_scale(g, mg_matmul(g, qg, kg, false, true), mg_gpt_softmax_scale(c)); /* [G, r·n, T] */
    s = mg_add(g, mg_reshape(g, s, 4, (int64_t[]){G, r, n, T}), mask);                     /* mask [n, T] broadcast */
    mg_tensor *p = mg_reshape(g, mg_softmax(g, s), 3, (int64_t[]){G, r * n, T});
    mg_tensor *y = mg_reshape(g, mg_matmul(g, p, vg, false, false), 4, (int64_t[]){G, r, n, hv});
    y = mg_transpose(g, y, (int[]){2, 0, 1, 3}); /* [n, G, r, hv]: head h = group·r + i */
    return mg_reshape(g, y, 3, (int64_t[]){n, 1, nh * hv});
}

static mg_tensor *keep(mg_tensor *t) {
    if (t) t->persistent = true; /* read by the host after the run */
    return t;
}

int mg_gpt_decode_build(mg_graph *g, const mg_gpt *m, int n_new, int cache_len, mg_gpt_decode *d, mg_error *err) {
    const mg_gpt_config *c = &m->cfg;
    memset(d, 0, sizeof *d);
    if (n_new < 1 || cache_len < 0 || (int64_t)cache_len + n_new > c->max_position)
        return mg_error_set(err, MG_ERR_INVALID, "decode: %d new tokens after %d cached do not fit the %d positions", n_new,
                            cache_len, c->max_position);
    int L = c->num_layers;
    /* multi-latent attention caches each head's expanded keys and values (not the latent) */
    int64_t n = n_new, h = c->hidden, G = c->mla.enabled ? c->heads : mg_gpt_kv_groups(c), hd = mg_gpt_head_dim(c);
    int64_t hv = mg_gpt_value_head_dim(c);
    d->n_new = n_new, d->cache_len = cache_len, d->n_layers = L;
    mg_tensor ***lists[4] = {&d->cache_k, &d->cache_v, &d->new_k, &d->new_v};
    for (int i = 0; i < 4; i++)
        if (!(*lists[i] = calloc((size_t)L, sizeof(mg_tensor *)))) {
            mg_gpt_decode_release(d);
            return mg_error_set(err, MG_ERR_NOMEM, "decode: out of memory");
        }
    bool gpt2 = mg_gpt_is_gpt2(c);
    bool any_window = false;
    for (int i = 0; i < L; i++) any_window |= mg_gpt_layer_window(c, i) > 0;
    int outer_layer = mg_graph_layer(g);
    mg_graph_set_layer(g, MG_LAYER_PRE);
    d->tokens = mg_input(g, "decode.input_ids", MG_I32, 2, (int64_t[]){n, 1});
    d->positions = mg_input(g, "decode.position_ids", MG_I32, 1, &n);
    if (cache_len > 0) {
        d->mask = mg_input(g, "decode.mask", MG_F32, 2, (int64_t[]){n, cache_len + n});
        if (any_window) d->mask_window = mg_input(g, "decode.mask_window", MG_F32, 2, (int64_t[]){n, cache_len + n});
    }
    mg_tensor *x = mg_embedding(g, d->tokens, m->wte); /* [n, 1, h] */
    if (m->wpe) x = mg_add(g, x, mg_reshape(g, mg_embedding(g, d->positions, m->wpe), 3, (int64_t[]){n, 1, h}));
    for (int i = 0; i < L; i++) {
        const mg_gpt_layer *l = &m->layers[i];
        int64_t window = mg_gpt_layer_window(c, i);
        char nm[64];
        if (cache_len > 0) {
            snprintf(nm, sizeof nm, "decode.cache_k.%d", i);
            d->cache_k[i] = mg_input(g, nm, MG_F32, 4, (int64_t[]){cache_len, 1, G, hd});
            snprintf(nm, sizeof nm, "decode.cache_v.%d", i);
            d->cache_v[i] = mg_input(g, nm, MG_F32, 4, (int64_t[]){cache_len, 1, G, hv});
        }
        mg_scope_push(g, gpt2 ? "h.%d" : "model.layers.%d", i);
        mg_graph_set_layer(g, i);
        mg_tensor *a = gpt_norm(g, c, x, l->ln1_w, l->ln1_b);
        mg_scope_push(g, l->qkv_w ? "attn" : "self_attn");
        mg_tensor *q = NULL, *k = NULL, *v = NULL;
        if (a && c->mla.enabled) mg_mla_qkv(g, m, l, a, d->positions, &q, &k, &v);
        else if (a) gpt_attn_qkv(g, m, l, a, d->positions, &q, &k, &v);
        d->new_k[i] = keep(k), d->new_v[i] = keep(v);
        mg_tensor *y;
        if (cache_len == 0) {
            y = c->mla.enabled ? mg_attention_scaled(g, q, k, v, NULL, window, 0.0f, mg_gpt_softmax_scale(c))
                               : mg_attention_masked(g, q, k, v, NULL, window, 0.0f);
            y = mg_reshape(g, y, 3, (int64_t[]){n, 1, c->heads * hv});
        } else {
            mg_tensor *keys = mg_concat(g, 2, (mg_tensor *[]){d->cache_k[i], k}, 0);
            mg_tensor *values = mg_concat(g, 2, (mg_tensor *[]){d->cache_v[i], v}, 0);
            y = q && keys && values ? cached_attention(g, c, q, keys, values, window > 0 ? d->mask_window : d->mask) : NULL;
        }
        y = mg_linear(g, y, l->proj_w, l->proj_b);
        mg_scope_pop(g);
        x = mg_add(g, x, y);
        mg_tensor *f = gpt_norm(g, c, x, l->ln2_w, l->ln2_b);
        /* (MoE: the router sees only this call's tokens; mg_gpt_generate drops no token) */
        x = mg_add(g, x, l->router_w ? mg_moe_block(g, m, l, f, false, NULL) : gpt_mlp_block(g, m, l, f, false));
        mg_scope_pop(g);
    }
    mg_graph_set_layer(g, MG_LAYER_POST);
    if (x && n > 1) x = mg_slice(g, x, 0, n - 1, 1); /* only the last token's logits are sampled from */
    x = gpt_norm(g, c, x, m->lnf_w, m->lnf_b);
    d->logits = keep(mg_matmul(g, x, m->lm_head ? m->lm_head : m->wte, false, true)); /* [1, 1, V] */
    mg_graph_set_layer(g, outer_layer);
    if (mg_graph_error(g)->code) {
        int code = mg_graph_error(g)->code;
        mg_error_set(err, code, "decode graph: %s", mg_graph_error(g)->msg);
        mg_gpt_decode_release(d);
        return code;
    }
    return MG_OK;
}

void mg_gpt_decode_release(mg_gpt_decode *d) {
    free(d->cache_k);
    free(d->cache_v);
    free(d->new_k);
    free(d->new_v);
    d->cache_k = d->cache_v = d->new_k = d->new_v = NULL;
}

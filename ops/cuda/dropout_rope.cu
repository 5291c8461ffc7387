/* dropout (same counter RNG and logical indices as ops/dropout.c: identical masks) and
 * rotary position embedding (ops/rope.c: frequencies from mg_rope_inv_freq, angles in double, either pairing). */
#include <math.h>

#include "mgraph/rng.h"
#include "ops/cuda/cuda_common.h"
#include "ops/cuda/philox.cuh"

/* Logical index of a local element, for a block of a same-rank logical tensor
 * (mg_logical_index in ops/rng.c). */
typedef struct logical_map {
    int ndim;
    bool whole;
    int64_t shape[MG_MAX_DIMS], lshape[MG_MAX_DIMS], off[MG_MAX_DIMS];
} logical_map;

__device__ inline uint64_t logical_index(const logical_map &m, int64_t i) {
    if (m.whole) return (uint64_t)i;
    int64_t idx[MG_MAX_DIMS];
    for (int d = m.ndim - 1; d >= 0; d--) {
        idx[d] = i % m.shape[d];
        i /= m.shape[d];
    }
    uint64_t g = 0;
    for (int d = 0; d < m.ndim; d++) g = g * (uint64_t)m.lshape[d] + (uint64_t)(idx[d] + m.off[d]);
    return g;
}

__global__ void k_dropout(const float *__restrict__ x, float *y, int64_t n, logical_map m, uint64_t key,
                          int64_t iteration, int64_t sample0, uint64_t B, uint64_t R, float p, float scale) {
    MG_GRID_STRIDE(i, n) {
        uint64_t stream, idx;
        mg_rng_dropout_site(logical_index(m, i), B, R, iteration, sample0, &stream, &idx);
        float u = mg_uniform_dev(key, stream, idx);
        y[i] = u >= p ? x[i] * scale : 0.0f;
    }
}

extern "C" int mg_cuda_dropout(const mg_kernel_args *a, mg_error *err) {
    const mg_node *n = a->node;
    const mg_tensor *yt = n->out[0];
    const mg_tensor *lt = mg_is_whole(yt) && !mg_is_whole(n->in[0]) ? n->in[0] : yt;
    int64_t ne = mg_numel(yt);
    float p = n->attrs.dropout.p;
    if (ne == 0) return MG_OK;
    if (!a->info->training || p == 0.0f) {
        if (a->out[0] == a->in[0]) return MG_OK;
        return mg_cuda_check(cudaMemcpyAsync(a->out[0], a->in[0], (size_t)ne * sizeof(float), cudaMemcpyDeviceToDevice,
                                             mg_cuda_stream()),
                             "dropout", err);
    }
    logical_map m;
    memset(&m, 0, sizeof m);
    m.whole = mg_is_whole(lt);
    m.ndim = lt->ndim;
    for (int d = 0; d < lt->ndim; d++) {
        m.shape[d] = lt->shape[d];
        m.lshape[d] = lt->logical.shape[d];
        m.off[d] = lt->logical.offset[d];
    }
    uint64_t key = mg_philox_mix_key(a->info->seed, n->attrs.dropout.rng_key);
    uint64_t B, R; /* masks per sample, as ops/dropout.c */
    mg_rng_batch_dims(lt, &B, &R);
    int64_t sample0 = mg_exec_first_sample(a->info, (int64_t)B);
    k_dropout<<<mg_cuda_blocks(ne, MG_CUDA_THREADS), MG_CUDA_THREADS, 0, mg_cuda_stream()>>>(
        (const float *)a->in[0], (float *)a->out[0], ne, m, key, a->info->iteration, sample0, B, R, p, 1.0f / (1.0f - p));
    return mg_cuda_check_launch("dropout", err);
}

/* The pairs' frequencies (mg_rope_inv_freq, computed on the host as the CPU kernel does),
 * passed by value: heads of up to 2 x MG_CUDA_ROPE_PAIRS rotated channels. */
#define MG_CUDA_ROPE_PAIRS 256
struct rope_freqs {
    double f[MG_CUDA_ROPE_PAIRS];
};

/* One thread per rotated pair (s, r, i): (x_i, x_i+h), or (x_2i, x_2i+1) interleaved. */
__global__ void k_rope(const float *__restrict__ x, const int32_t *__restrict__ pos, float *y, int64_t pairs,
                       int64_t rows, int64_t pb, int64_t hd, rope_freqs fr, double sgn, double m, int interleaved) {
    int64_t h = hd / 2, per = rows / pb; /* head vectors per position (pos [s] or [s, b]) */
    int64_t step = interleaved ? 2 : 1, off = interleaved ? 1 : h;
    MG_GRID_STRIDE(t, pairs) {
        int64_t i = t % h, sr = t / h, s = sr / rows;
        double ang = (double)pos[s * pb + (sr % rows) / per] * fr.f[i];
        float c = (float)(m * cos(ang)), sn = (float)(m * sgn * sin(ang));
        const float *x0 = x + sr * hd;
        float *y0 = y + sr * hd;
        int64_t ia = i * step, ib = ia + off;
        float a0 = x0[ia], a1 = x0[ib]; /* y may alias x */
        y0[ia] = a0 * c - a1 * sn;
        y0[ib] = a1 * c + a0 * sn;
    }
}

extern "C" int mg_cuda_rope(const mg_kernel_args *a, mg_error *err) {
    const mg_node *n = a->node;
    const mg_attr_rope *o = &n->attrs.rope;
    const mg_tensor *xt = n->in[0];
    int64_t S = xt->shape[0], hd = xt->shape[xt->ndim - 1];
    if (mg_numel(xt) == 0) return MG_OK;
    if (hd / 2 > MG_CUDA_ROPE_PAIRS)
        return mg_error_set(err, MG_ERR_UNSUPPORTED, "rope: the CUDA kernel rotates at most %d channels per head (got %lld)",
                            2 * MG_CUDA_ROPE_PAIRS, (long long)hd);
    rope_freqs fr;
    for (int64_t i = 0; i < hd / 2; i++) fr.f[i] = mg_rope_inv_freq(o, hd, i);
    int64_t rows = mg_numel(xt) / (S * hd), pairs = mg_numel(xt) / 2;
    int64_t pb = n->in[1]->ndim == 2 ? n->in[1]->shape[1] : 1;
    k_rope<<<mg_cuda_blocks(pairs, MG_CUDA_THREADS), MG_CUDA_THREADS, 0, mg_cuda_stream()>>>(
        (const float *)a->in[0], (const int32_t *)a->in[1], (float *)a->out[0], pairs, rows, pb, hd, fr,
        o->inverse ? -1.0 : 1.0, o->mscale > 0 ? (double)o->mscale : 1.0, o->interleaved ? 1 : 0);
    return mg_cuda_check_launch("rope", err);
}

/* Elementwise ops with broadcasting (add, sub, mul, scale, bias_add, expand) and
 * sum_to, their gradients' reduction. Same semantics as ops/elementwise.c.
 *
 * Broadcast indexing: the output index is unravelled over the output shape and dotted
 * with each operand's broadcast strides (0 along broadcast dimensions). Same-shape
 * operands take a flat path. sum_to accumulates in double in a fixed order, so it is
 * deterministic (no atomics).
 */
#include <string.h>

#include "ops/cuda/cuda_common.h"
extern "C" {
#include "ops/broadcast.h"
}

typedef struct bcast {
    int n;
    int64_t shape[MG_MAX_DIMS], sa[MG_MAX_DIMS], sb[MG_MAX_DIMS];
} bcast;

static bcast bcast_of(const mg_tensor *out, const mg_tensor *a, const mg_tensor *b) {
    bcast w;
    memset(&w, 0, sizeof w);
    w.n = out->ndim;
    for (int i = 0; i < MG_MAX_DIMS; i++) w.shape[i] = out->shape[i];
    mg_bcast_strides(a->ndim, a->shape, out->ndim, out->shape, w.sa);
    if (b) mg_bcast_strides(b->ndim, b->shape, out->ndim, out->shape, w.sb);
    return w;
}

__device__ inline void bcast_offsets(const bcast &w, int64_t o, int64_t *pa, int64_t *pb) {
    int64_t a = 0, b = 0;
    for (int d = w.n - 1; d >= 0; d--) {
        int64_t i = o % w.shape[d];
        o /= w.shape[d];
        a += i * w.sa[d];
        b += i * w.sb[d];
    }
    *pa = a;
    *pb = b;
}

enum { OP_ADD, OP_SUB, OP_MUL };

template <int OP>
__device__ inline float binop(float x, float y) {
    return OP == OP_ADD ? x + y : OP == OP_SUB ? x - y : x * y;
}

template <int OP>
__global__ void k_binary_flat(const float *__restrict__ x, const float *__restrict__ y, float *z, int64_t n) {
    MG_GRID_STRIDE(i, n) z[i] = binop<OP>(x[i], y[i]);
}

template <int OP>
__global__ void k_binary_bcast(const float *__restrict__ x, const float *__restrict__ y, float *z, int64_t n, bcast w) {
    MG_GRID_STRIDE(i, n) {
        int64_t pa, pb;
        bcast_offsets(w, i, &pa, &pb);
        z[i] = binop<OP>(x[pa], y[pb]);
    }
}

template <int OP>
static int binary(const mg_kernel_args *a, mg_error *err) {
    const mg_node *n = a->node;
    int64_t ne = mg_numel(n->out[0]);
    if (ne == 0) return MG_OK;
    const float *x = (const float *)a->in[0], *y = (const float *)a->in[1];
    float *z = (float *)a->out[0];
    unsigned blocks = mg_cuda_blocks(ne, MG_CUDA_THREADS);
    if (mg_numel(n->in[0]) == ne && mg_numel(n->in[1]) == ne)
        k_binary_flat<OP><<<blocks, MG_CUDA_THREADS, 0, mg_cuda_stream()>>>(x, y, z, ne);
    else
        k_binary_bcast<OP><<<blocks, MG_CUDA_THREADS, 0, mg_cuda_stream()>>>(x, y, z, ne,
                                                                              bcast_of(n->out[0], n->in[0], n->in[1]));
    return mg_cuda_check_launch(mg_op_name(n->op), err);
}

extern "C" int mg_cuda_add(const mg_kernel_args *a, mg_error *err) { return binary<OP_ADD>(a, err); }
extern "C" int mg_cuda_sub(const mg_kernel_args *a, mg_error *err) { return binary<OP_SUB>(a, err); }
extern "C" int mg_cuda_mul(const mg_kernel_args *a, mg_error *err) { return binary<OP_MUL>(a, err); }

__global__ void k_scale(const float *__restrict__ x, float *y, float s, int64_t n) {
    MG_GRID_STRIDE(i, n) y[i] = s * x[i];
}

extern "C" int mg_cuda_scale(const mg_kernel_args *a, mg_error *err) {
    int64_t ne = mg_numel(a->node->out[0]);
    if (ne == 0) return MG_OK;
    k_scale<<<mg_cuda_blocks(ne, MG_CUDA_THREADS), MG_CUDA_THREADS, 0, mg_cuda_stream()>>>(
        (const float *)a->in[0], (float *)a->out[0], a->node->attrs.scale.value, ne);
    return mg_cuda_check_launch("scale", err);
}

__global__ void k_bias(const float *__restrict__ x, const float *__restrict__ b, float *y, int64_t n, int64_t N) {
    MG_GRID_STRIDE(i, n) y[i] = x[i] + b[i % N];
}

extern "C" int mg_cuda_bias_add(const mg_kernel_args *a, mg_error *err) {
    int64_t ne = mg_numel(a->node->in[0]), N = a->node->in[1]->shape[0];
    if (ne == 0) return MG_OK;
    k_bias<<<mg_cuda_blocks(ne, MG_CUDA_THREADS), MG_CUDA_THREADS, 0, mg_cuda_stream()>>>(
        (const float *)a->in[0], (const float *)a->in[1], (float *)a->out[0], ne, N);
    return mg_cuda_check_launch("bias_add", err);
}

__global__ void k_expand(const float *__restrict__ x, float *y, int64_t n, bcast w) {
    MG_GRID_STRIDE(i, n) {
        int64_t pa, pb;
        bcast_offsets(w, i, &pa, &pb);
        y[i] = x[pa];
    }
}

extern "C" int mg_cuda_expand(const mg_kernel_args *a, mg_error *err) {
    int64_t ne = mg_numel(a->node->out[0]);
    if (ne == 0) return MG_OK;
    k_expand<<<mg_cuda_blocks(ne, MG_CUDA_THREADS), MG_CUDA_THREADS, 0, mg_cuda_stream()>>>(
        (const float *)a->in[0], (float *)a->out[0], ne, bcast_of(a->node->out[0], a->node->in[0], NULL));
    return mg_cuda_check_launch("expand", err);
}

/* sum_to: x (shape X, rank n) summed down to y (right-aligned, broadcastable to X).
 * Output element o's inputs: its kept coordinates (base offset `kb`) plus every
 * combination of the reduced dimensions (sizes rs, x strides rst). */
typedef struct sumto {
    int n_keep, n_red;
    int64_t ks[MG_MAX_DIMS], kst[MG_MAX_DIMS]; /* kept dims of x: sizes, x strides */
    int64_t rs[MG_MAX_DIMS], rst[MG_MAX_DIMS]; /* reduced dims of x */
    int64_t red;                               /* prod(rs) */
} sumto;

__device__ inline int64_t unravel_dot(int64_t i, int n, const int64_t *sz, const int64_t *st) {
    int64_t off = 0;
    for (int d = n - 1; d >= 0; d--) {
        off += (i % sz[d]) * st[d];
        i /= sz[d];
    }
    return off;
}

/* one thread per output (many outputs: bias gradients) */
__global__ void k_sum_to_thread(const float *__restrict__ x, float *y, int64_t ny, sumto s) {
    MG_GRID_STRIDE(o, ny) {
        int64_t base = unravel_dot(o, s.n_keep, s.ks, s.kst);
        double acc = 0;
        for (int64_t r = 0; r < s.red; r++) acc += x[base + unravel_dot(r, s.n_red, s.rs, s.rst)];
        y[o] = (float)acc;
    }
}

/* one block per output (few outputs, long reductions) */
__global__ void k_sum_to_block(const float *__restrict__ x, float *y, sumto s) {
    __shared__ double sh[32];
    int64_t o = blockIdx.x;
    int64_t base = unravel_dot(o, s.n_keep, s.ks, s.kst);
    double acc = 0;
    for (int64_t r = threadIdx.x; r < s.red; r += blockDim.x) acc += x[base + unravel_dot(r, s.n_red, s.rs, s.rst)];
    acc = mg_block_sum(acc, sh);
    if (threadIdx.x == 0) y[o] = (float)acc;
}

extern "C" int mg_cuda_sum_to(const mg_kernel_args *a, mg_error *err) {
    const mg_tensor *xt = a->node->in[0], *yt = a->node->out[0];
    int64_t ny = mg_numel(yt);
    if (ny == 0) return MG_OK;
    sumto s;
    memset(&s, 0, sizeof s);
    int64_t st = 1;
    int64_t kst_rev[MG_MAX_DIMS], ks_rev[MG_MAX_DIMS], rs_rev[MG_MAX_DIMS], rst_rev[MG_MAX_DIMS];
    int nk = 0, nr = 0;
    for (int d = xt->ndim - 1; d >= 0; d--) {
        int k = yt->ndim - xt->ndim + d;
        int64_t dy = k >= 0 ? yt->shape[k] : 1, dx = xt->shape[d];
        if (dy == dx) {
            ks_rev[nk] = dx;
            kst_rev[nk++] = st;
        } else {
            rs_rev[nr] = dx;
            rst_rev[nr++] = st;
        }
        st *= dx;
    }
    s.n_keep = nk;
    s.n_red = nr;
    s.red = 1;
    for (int i = 0; i < nk; i++) {
        s.ks[i] = ks_rev[nk - 1 - i];
        s.kst[i] = kst_rev[nk - 1 - i];
    }
    for (int i = 0; i < nr; i++) {
        s.rs[i] = rs_rev[nr - 1 - i];
        s.rst[i] = rst_rev[nr - 1 - i];
        s.red *= s.rs[i];
    }
    const float *x = (const float *)a->in[0];
    float *y = (float *)a->out[0];
    if (ny >= 4096 || s.red < 1024)
        k_sum_to_thread<<<mg_cuda_blocks(ny, MG_CUDA_THREADS), MG_CUDA_THREADS, 0, mg_cuda_stream()>>>(x, y, ny, s);
    else
        k_sum_to_block<<<(unsigned)ny, MG_CUDA_THREADS, 0, mg_cuda_stream()>>>(x, y, s);
    return mg_cuda_check_launch("sum_to", err);
}

/* Weight initialisation at memory speed: vectorised Philox + Box-Muller with its own log
 * and cos, checked against the float rounding so that every value is the scalar
 * definition's (ops/rng_init.h says why that holds), split over threads.
 *
 * Before this, a 124M-parameter model spent about 4 s of its start-up here on one
 * thread: one Philox call and libm's log and cos per element. */
#define _GNU_SOURCE
#include "ops/convert.h"
#include "ops/rng_init.h"

#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "mgraph/rng.h"
#include "ops/philox_vec.h"


/* Lanes per block: two vectors of 8 doubles (GCC vector extensions, lowered to what
 * each target function below allows: AVX-512, AVX2 or SSE2). */
#define VL 8
#define LANES (2 * VL)
typedef double vd __attribute__((vector_size(VL * sizeof(double))));
typedef uint64_t vu __attribute__((vector_size(VL * sizeof(uint64_t))));
typedef int64_t vi __attribute__((vector_size(VL * sizeof(int64_t))));

/* Helpers as macros: vectors passed by value to functions change the ABI with the target. */
#define SPLAT(a) ((vd){0} + (a))
#define AS_VD(a) ((vd)(a))   /* same-size vector casts reinterpret the bits */
#define AS_VU(a) ((vu)(a))
/* mask ? a : b, mask lanes all ones or all zeros (a vector comparison's result) */
#define VSEL(mask, a, b) AS_VD((AS_VU(a) & (vu)(mask)) | (AS_VU(b) & ~(vu)(mask)))
/* Exact conversions of small integers through the bits of 2^52 + n (n < 2^52): AVX2 and
 * SSE2 have no 64-bit integer <-> double conversion, and GCC's emulation of
 * __builtin_convertvector goes lane by lane. */
#define TWO52 4503599627370496.0
#define U_TO_VD(u) (AS_VD((u) | 0x4330000000000000ull) - TWO52) /* u < 2^52 */
#define VD_TO_U(d) (AS_VU((d) + TWO52) & 0x000fffffffffffffull)  /* d integral, 0 <= d < 2^52 */

/* Box-Muller doubles v[i] = sqrt(-2 log u1) * cos(2 pi u2) of VL counters whose Philox
 * words 0 and 1 are w[0], w[1], with u1, u2 and the argument 2 pi u2 formed exactly as
 * mg_rng_normal forms them. */
static inline __attribute__((always_inline)) void normal_vec(const mg_vu64 *w, double *restrict v) {
    vu c0 = w[0], c1 = w[1];
    vd u1 = (U_TO_VD(c0) + 1.0) / 4294967296.0; /* in (0, 1]: exact, as mg_rng_normal */
    vd x = 6.283185307179586 * (U_TO_VD(c1) / 4294967296.0);

    /* log(u1): u1 = 2^e m, m in [sqrt(1/2), sqrt(2)); log m = 2 atanh(s), s = (m-1)/(m+1),
     * |s| <= 0.172, series to s^21 (next term < 1e-18 relative) */
    vu b = AS_VU(u1);
    vd e = U_TO_VD(b >> 52) - 1023.0;
    vd m = AS_VD((b & 0x000fffffffffffffull) | 0x3ff0000000000000ull);
    vi big = m > 1.4142135623730951;
    m = VSEL(big, m * 0.5, m);
    e = VSEL(big, e + 1.0, e);
    vd f = m - 1.0, s = f / (2.0 + f), z = s * s;
    vd p = SPLAT(1.0 / 21);
    p = p * z + 1.0 / 19;
    p = p * z + 1.0 / 17;
    p = p * z + 1.0 / 15;
    p = p * z + 1.0 / 13;
    p = p * z + 1.0 / 11;
    p = p * z + 1.0 / 9;
    p = p * z + 1.0 / 7;
    p = p * z + 1.0 / 5;
    p = p * z + 1.0 / 3;
    vd logm = 2.0 * s + 2.0 * s * (z * p);
    /* ln 2 split so that e * hi is exact (fdlibm's constants) */
    vd lg = e * 6.93147180369123816490e-01 + (e * 1.90821492927058770002e-10 + logm);

    /* cos(x), x in [0, 2 pi): x = k pi/2 + r, |r| <= pi/4, pi/2 in four parts (fdlibm's
     * 33-bit pieces: k * piece is exact), then cos or sin of r by Taylor series */
    vd k = (x * 6.36619772367581382433e-01 + 6755399441055744.0) - 6755399441055744.0;
    vd r = x - k * 1.57079632673412561417e+00;
    r = r - k * 6.07710050630396597660e-11;
    r = r - k * 2.02226624871116645580e-21;
    r = r - k * 8.47842766036889956997e-32;
    z = r * r;
    vd c = SPLAT(1.0 / 20922789888000.0);
    c = c * z - 1.0 / 87178291200.0;
    c = c * z + 1.0 / 479001600.0;
    c = c * z - 1.0 / 3628800.0;
    c = c * z + 1.0 / 40320.0;
    c = c * z - 1.0 / 720.0;
    c = c * z + 1.0 / 24.0;
    c = c * z - 0.5;
    c = c * z + 1.0;
    vd sn = SPLAT(1.0 / 355687428096000.0);
    sn = sn * z - 1.0 / 1307674368000.0;
    sn = sn * z + 1.0 / 6227020800.0;
    sn = sn * z - 1.0 / 39916800.0;
    sn = sn * z + 1.0 / 362880.0;
    sn = sn * z - 1.0 / 5040.0;
    sn = sn * z + 1.0 / 120.0;
    sn = sn * z - 1.0 / 6.0;
    sn = r + r * (z * sn);
    /* quadrant k mod 4 (k in 0..4): 0 cos, 1 -sin, 2 -cos, 3 sin */
    vu q = VD_TO_U(k);
    vd y = VSEL((vu){0} - (q & 1), sn, c);                  /* odd quadrant: sin */
    vd cs = AS_VD(AS_VU(y) ^ (((q + 1) & 2) << 62));         /* quadrants 1, 2: sign flipped */
    vd t = -2.0 * lg;
    for (int i = 0; i < VL; i++) t[i] = sqrt(t[i]); /* IEEE sqrt: vsqrtpd where the target has it */
    vd out = t * cs;
    memcpy(v, &out, sizeof out);
}

/* The Philox words of a block: counters first + VL h + lane in w[h][word][lane]. */
static inline __attribute__((always_inline)) void philox_block(uint64_t key, uint64_t stream, uint64_t first,
                                                               mg_vu64 (*w)[4]) {
    mg_philox_vec(key, stream, first, w[0]);
    mg_philox_vec(key, stream, first + VL, w[1]);
}
static inline __attribute__((always_inline)) void normal_lanes(mg_vu64 (*w)[4], double *restrict v) {
    normal_vec(w[0], v);
    normal_vec(w[1], v + VL);
}

/* One block: out[i] = std * (float)v[i], doubt[i] != 0 where the rounding is not certain. */
typedef float vf __attribute__((vector_size(VL * sizeof(float))));
typedef int32_t vi32 __attribute__((vector_size(VL * sizeof(int32_t))));
static inline __attribute__((always_inline)) void fill_lanes(mg_vu64 (*w)[4], float std, float *restrict out,
                                                             int32_t *restrict doubt) {
    double v[LANES];
    normal_lanes(w, v);
    for (int h = 0; h < LANES; h += VL) {
        vd x;
        memcpy(&x, v + h, sizeof x);
        /* margin 2^-40 (+ the rounding of lo and hi themselves); the 2^-100 puts 0 in doubt
         * (its sign comes from libm's log(1)), and |v| >= 1e-21 for every nonzero draw */
        vd a = AS_VD(AS_VU(x) & 0x7fffffffffffffffull) * 0x1p-39 + 0x1p-100;
        vf lo = __builtin_convertvector(x - a, vf), hi = __builtin_convertvector(x + a, vf);
        vi32 d = lo != hi;
        vf o = __builtin_convertvector(x, vf) * std;
        memcpy(out + h, &o, sizeof o);
        memcpy(doubt + h, &d, sizeof d);
    }
}

typedef void (*fill_fn)(uint64_t, uint64_t, uint64_t, float, float *, int32_t *);
typedef void (*approx_fn)(uint64_t, uint64_t, uint64_t, double *);

static void fill_generic(uint64_t k, uint64_t s, uint64_t f, float std, float *o, int32_t *d) {
    mg_vu64 w[2][4];
    philox_block(k, s, f, w);
    fill_lanes(w, std, o, d);
}
static void approx_generic(uint64_t k, uint64_t s, uint64_t f, double *v) {
    mg_vu64 w[2][4];
    philox_block(k, s, f, w);
    normal_lanes(w, v);
}
#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("avx512f,avx512dq,avx512vl,avx512bw,avx2,fma"))) static void
fill_avx512(uint64_t k, uint64_t s, uint64_t f, float std, float *o, int32_t *d) {
    mg_vu64 w[2][4];
    philox_block(k, s, f, w); /* (AVX-512DQ's vpmullq: GCC's lowering is fine here) */
    fill_lanes(w, std, o, d);
}
/* AVX2: the Philox rounds through vpmuludq (mg_philox_avx2), 4 counters per vector. */
__attribute__((target("avx2,fma"))) static void fill_avx2(uint64_t k, uint64_t s, uint64_t f, float std, float *o,
                                                          int32_t *d) {
    __m256i q[LANES / 4][4];
    mg_philox_avx2(k, s, f, LANES / 4, q);
    mg_vu64 w[2][4];
    for (int h = 0; h < 2; h++)
        for (int l = 0; l < 4; l++) { /* lanes 0-3 from vector 2h, 4-7 from 2h + 1 */
            memcpy((char *)&w[h][l], &q[2 * h][l], sizeof q[0][0]);
            memcpy((char *)&w[h][l] + sizeof q[0][0], &q[2 * h + 1][l], sizeof q[0][0]);
        }
    fill_lanes(w, std, o, d);
}
__attribute__((target("avx512f,avx512dq,avx512vl,avx512bw,avx2,fma"))) static void
approx_avx512(uint64_t k, uint64_t s, uint64_t f, double *v) {
    mg_vu64 w[2][4];
    philox_block(k, s, f, w);
    normal_lanes(w, v);
}
#endif

/* The widest instruction set the paths below have and this CPU runs: 2 AVX-512, 1 AVX2
 * with FMA, 0 generic vectors. */
static int widest_isa(void) {
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
        __builtin_cpu_supports("avx512bw"))
        return 2;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return 1;
#endif
    return 0;
}

/* The path for one instruction set (0 generic, 1 AVX2, 2 AVX-512), NULL where the CPU
 * lacks it; -1: the widest the CPU has. */
static fill_fn fill_for(int isa) {
    int have = widest_isa();
    if (isa < 0) isa = have;
    if (isa > have) return NULL;
#if defined(__x86_64__) && defined(__GNUC__)
    if (isa == 2) return fill_avx512;
    if (isa == 1) return fill_avx2;
#endif
    return isa == 0 ? fill_generic : NULL;
}

static approx_fn pick_approx(void) {
#if defined(__x86_64__) && defined(__GNUC__)
    if (widest_isa() == 2) return approx_avx512;
#endif
    return approx_generic;
}

static int64_t normal_fill_with(fill_fn fill, uint64_t seed, uint64_t key, uint64_t stream, uint64_t first, int64_t n, float std,
                           float *dst) {
    uint64_t k = mg_rng_key(seed, key);
    int64_t slow = 0;
    float out[LANES];
    int32_t doubt[LANES];
    for (int64_t i = 0; i < n; i += LANES) {
        int64_t m = n - i < LANES ? n - i : LANES;
        fill(k, stream, first + (uint64_t)i, std, out, doubt);
        for (int64_t j = 0; j < m; j++) {
            if (doubt[j]) {
                out[j] = std * mg_rng_normal(seed, key, stream, first + (uint64_t)(i + j));
                slow++;
            }
        }
        memcpy(dst + i, out, (size_t)m * sizeof *dst);
    }
    return slow;
}

int64_t mg_rng_normal_fill(uint64_t seed, uint64_t key, uint64_t stream, uint64_t first, int64_t n, float std,
                           float *dst) {
    return normal_fill_with(fill_for(-1), seed, key, stream, first, n, std, dst);
}

int64_t mg_rng_normal_fill_isa(int isa, uint64_t seed, uint64_t key, uint64_t stream, uint64_t first, int64_t n,
                               float std, float *dst) {
    fill_fn fill = fill_for(isa);
    return fill ? normal_fill_with(fill, seed, key, stream, first, n, std, dst) : -1;
}

void mg_rng_normal_approx(uint64_t seed, uint64_t key, uint64_t stream, uint64_t first, int64_t n, double *out) {
    approx_fn approx = pick_approx();
    uint64_t k = mg_rng_key(seed, key);
    double v[LANES];
    for (int64_t i = 0; i < n; i += LANES) {
        approx(k, stream, first + (uint64_t)i, v);
        memcpy(out + i, v, (size_t)(n - i < LANES ? n - i : LANES) * sizeof *out);
    }
}

/* Elements [begin, end) of t's init into o[0 .. end - begin). */
static void fill_range(const mg_tensor *t, uint64_t seed, int64_t begin, int64_t end, float *o) {
    switch (t->init.kind) {
    case MG_INIT_NONE:
    case MG_INIT_ZEROS: memset(o, 0, (size_t)(end - begin) * sizeof *o); return;
    case MG_INIT_ONES:
    case MG_INIT_CONSTANT: {
        float c = t->init.kind == MG_INIT_ONES ? 1.0f : t->init.std;
        for (int64_t i = begin; i < end; i++) o[i - begin] = c;
        return;
    }
    case MG_INIT_NORMAL: break;
    }
    if (mg_is_whole(t)) {
        mg_rng_normal_fill(seed, t->logical.key, MG_RNG_STREAM_INIT, (uint64_t)begin, end - begin, t->init.std, o);
        return;
    }
    if (t->logical.ndim != t->ndim) { /* not a block of a same-rank tensor: element by element */
        for (int64_t i = begin; i < end; i++)
            o[i - begin] = t->init.std * mg_rng_normal(seed, t->logical.key, MG_RNG_STREAM_INIT, mg_logical_index(t, i));
        return;
    }
    /* a block: each run along the last dimension is consecutive in the logical tensor */
    int64_t row = t->shape[t->ndim - 1];
    for (int64_t i = begin; i < end;) {
        int64_t run = row - i % row;
        if (run > end - i) run = end - i;
        mg_rng_normal_fill(seed, t->logical.key, MG_RNG_STREAM_INIT, mg_logical_index(t, i), run, t->init.std,
                           o + (i - begin));
        i += run;
    }
}

void mg_rng_init_range(const mg_tensor *t, uint64_t seed, int64_t begin, int64_t end, float *dst) {
    fill_range(t, seed, begin, end, dst + begin);
}

/* The same into t's storage (dst: its whole local buffer): narrow storage holds the f32
 * values rounded (a model copy starts as its parameter's init, rounded). */
static void init_stored(const mg_tensor *t, uint64_t seed, int64_t begin, int64_t end, void *dst) {
    mg_dtype st = mg_tensor_storage(t);
    if (st == MG_F32) {
        fill_range(t, seed, begin, end, (float *)dst + begin);
        return;
    }
    enum { PIECE = 1 << 14 };
    float tmp[PIECE];
    size_t es = mg_dtype_size(st);
    for (int64_t b = begin; b < end; b += PIECE) {
        int64_t e = end - b < PIECE ? end : b + PIECE;
        fill_range(t, seed, b, e, tmp);
        mg_convert((char *)dst + (size_t)b * es, st, tmp, MG_F32, e - b);
    }
}

/* ---- threads ------------------------------------------------------------------------------- */

enum { CHUNK = 1 << 20 }; /* elements (or zero bytes / 4) per task: 4 MiB */

typedef struct chunk {
    int item;
    int64_t begin, end; /* elements, or bytes for zero items */
} chunk;

typedef struct pool {
    const mg_init_item *items;
    const chunk *chunks;
    int n_chunks;
    uint64_t seed;
    atomic_int next;
} pool;

static void *worker(void *arg) {
    pool *p = arg;
    for (int c; (c = atomic_fetch_add(&p->next, 1)) < p->n_chunks;) {
        const chunk *k = &p->chunks[c];
        const mg_init_item *it = &p->items[k->item];
        if (it->zero_bytes) memset((char *)it->dst + k->begin, 0, (size_t)(k->end - k->begin));
        else init_stored(it->t, p->seed, k->begin, k->end, it->dst);
    }
    return NULL;
}

static int cpus_available(void) {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) {
        int n = CPU_COUNT(&set);
        if (n > 0) return n;
    }
    return 1;
}

void mg_rng_init_items(const mg_init_item *items, int n, uint64_t seed, int n_threads) {
    int64_t n_chunks = 0;
    for (int i = 0; i < n; i++) {
        int64_t len = items[i].zero_bytes ? (int64_t)items[i].zero_bytes : mg_numel(items[i].t);
        int64_t step = items[i].zero_bytes ? (int64_t)CHUNK * 4 : CHUNK;
        n_chunks += (len + step - 1) / step;
    }
    chunk *chunks = malloc((size_t)(n_chunks > 0 ? n_chunks : 1) * sizeof *chunks);
    pool p = {items, chunks, 0, seed, 0};
    if (!chunks || n_chunks > (1 << 30)) { /* no room for the task list: one item at a time here */
        free(chunks);
        for (int i = 0; i < n; i++)
            if (items[i].zero_bytes) memset(items[i].dst, 0, items[i].zero_bytes);
            else init_stored(items[i].t, seed, 0, mg_numel(items[i].t), items[i].dst);
        return;
    }
    for (int i = 0; i < n; i++) {
        int64_t len = items[i].zero_bytes ? (int64_t)items[i].zero_bytes : mg_numel(items[i].t);
        int64_t step = items[i].zero_bytes ? (int64_t)CHUNK * 4 : CHUNK;
        for (int64_t b = 0; b < len; b += step) chunks[p.n_chunks++] = (chunk){i, b, b + step < len ? b + step : len};
    }
    if (n_threads <= 0) n_threads = cpus_available();
    if (n_threads > p.n_chunks) n_threads = p.n_chunks;
    if (n_threads > 256) n_threads = 256;
    pthread_t tid[256];
    int started = 0;
    for (; started < n_threads - 1; started++)
        if (pthread_create(&tid[started], NULL, worker, &p)) break;
    worker(&p); /* the calling thread takes chunks too (all of them if no thread started) */
    for (int i = 0; i < started; i++) pthread_join(tid[i], NULL);
    free(chunks);
}

/* CUDA kernels against the CPU kernels, node by node, on random inputs.
 *
 * Each case builds a small graph (forward, backward and, for the optimizer, the AdamW
 * step), fills every leaf with random values and walks the nodes in topological order
 * like the reference executor. Before a node runs on the CPU, its inputs are copied
 * to the GPU; the op's CUDA kernel runs there on the same values and every output is
 * compared with the CPU's. So each kernel is checked on the shapes and values a real
 * graph gives it, backward ops included.
 *
 *   test_cuda_ops <op>[@fp32|tf32|bf16]   compare every node of kind <op> in every case
 *                                         (fails if no case contains one)
 *   test_cuda_ops list                    the ops with CUDA kernels, one per line
 *   test_cuda_ops registry <op>...        the listed ops, and only they, have CUDA kernels
 *   test_cuda_ops cases <op>...           the harness itself, without a GPU: every case
 *                                         builds and runs, and contains each listed op,
 *                                         with the CPU kernel standing in for the CUDA one
 *
 * Without a CUDA device the comparisons exit 77 (ctest: skipped) with the reason.
 */
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "ops/convert.h"
#include "ops/cuda/cuda_common.h"
#include "ops/op.h"
#include "mgraph/comm.h"
#include "mgraph/moe.h"
#include "testkit.h"

#define SKIP 77

typedef struct cuda_case {
    const char *name;
    /* Builds the graph; returns the scalar loss to differentiate (NULL: forward only;
     * a graph error fails the case). */
    mg_tensor *(*build)(mg_graph *g);
    int32_t ids_hi; /* i32 leaves are uniform in [0, ids_hi) */
    int optimizer;  /* append the AdamW step: 1, 2 with a scheduled weight decay (its 7th input) */
    int mb_local;   /* the micro-batch instance the kernels see (accumulate: 0 copies, > 0 adds) */
} cuda_case;

/* ---- graphs ------------------------------------------------------------------------ */
static int64_t *dims(int n, ...) {
    static int64_t s[8][MG_MAX_DIMS];
    static int k;
    int64_t *d = s[k++ & 7];
    va_list ap;
    va_start(ap, n);
    for (int i = 0; i < n; i++) d[i] = va_arg(ap, int64_t);
    va_end(ap);
    return d;
}
#define D(...) dims(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t), __VA_ARGS__)
#define ND(...) (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t))
#define PARAM(g, name, ...) mg_param(g, name, ND(__VA_ARGS__), D(__VA_ARGS__), (mg_init){MG_INIT_NORMAL, 0.5f})
#define INPUT(g, name, dt, ...) mg_input(g, name, dt, ND(__VA_ARGS__), D(__VA_ARGS__))

/* sum(y * r) with a random r: every element of y gets its own gradient */
static mg_tensor *loss_of(mg_graph *g, mg_tensor *y) {
    if (!y) return NULL;
    char name[32];
    snprintf(name, sizeof name, "loss_weights.%d", mg_graph_n_tensors(g));
    mg_tensor *r = mg_input(g, name, MG_F32, y->ndim, y->shape);
    return mg_sum(g, mg_mul(g, y, r), MG_ALL_AXES, false);
}

static mg_tensor *g_matmul(mg_graph *g) {
    /* all transpose combinations, batched and shared-B, and odd sizes */
    mg_tensor *a = PARAM(g, "a", 3, 37, 19), *b = PARAM(g, "b", 19, 23), *bt = PARAM(g, "bt", 23, 19);
    mg_tensor *c = PARAM(g, "c", 3, 19, 37), *d = PARAM(g, "d", 3, 19, 23);
    mg_tensor *y1 = mg_matmul(g, a, b, false, false);   /* [3, 37, 23] shared B */
    mg_tensor *y2 = mg_matmul(g, a, bt, false, true);   /* [3, 37, 23] */
    mg_tensor *y3 = mg_matmul(g, c, d, true, false);    /* [3, 37, 23] batched, trans_a */
    mg_tensor *y4 = mg_matmul(g, a, mg_transpose(g, d, (int[]){0, 2, 1}), false, true); /* batched NT */
    mg_tensor *y5 = mg_linear(g, mg_reshape(g, a, 2, D(111, 19)), bt, PARAM(g, "bias", 23));
    mg_tensor *s = mg_add(g, mg_add(g, y1, y2), mg_add(g, y3, y4));
    return mg_add(g, loss_of(g, s), loss_of(g, y5));
}

static mg_tensor *g_elementwise(mg_graph *g) {
    mg_tensor *x = PARAM(g, "x", 4, 5, 6), *row = PARAM(g, "row", 6), *col = PARAM(g, "col", 4, 1, 6);
    mg_tensor *y = mg_mul(g, mg_sub(g, x, row), col);           /* broadcasts both ways */
    y = mg_add(g, mg_scale(g, y, -0.75f), mg_bias_add(g, x, row));
    y = mg_add(g, y, mg_expand(g, PARAM(g, "e", 5, 1), 3, D(4, 5, 6)));
    y = mg_add(g, y, mg_expand(g, mg_sum_to(g, PARAM(g, "big", 4, 300, 6), 3, D(4, 1, 6)), 3, D(4, 5, 6)));
    y = mg_add(g, y, mg_expand(g, mg_sum_to(g, PARAM(g, "long", 2, 3000, 6), 2, D(1, 6)), 3, D(4, 5, 6)));
    return loss_of(g, y);
}

static mg_tensor *g_activation(mg_graph *g) {
    mg_tensor *x = PARAM(g, "x", 7, 3, 40);
    mg_tensor *y = mg_add(g, mg_add(g, mg_gelu(g, x), mg_silu(g, x)), mg_squared_relu(g, x));
    y = mg_add(g, y, mg_gelu_erf(g, x));
    return mg_add(g, loss_of(g, y), loss_of(g, mg_swiglu(g, x)));
}

static mg_tensor *g_norm(mg_graph *g) {
    /* a row longer than a block, one shorter, and more rows than a dw chunk */
    mg_tensor *x = PARAM(g, "x", 300, 3, 37), *w = PARAM(g, "w", 37), *b = PARAM(g, "b", 37);
    mg_tensor *x2 = PARAM(g, "x2", 5, 700), *w2 = PARAM(g, "w2", 700);
    mg_tensor *l = mg_add(g, loss_of(g, mg_layernorm(g, x, w, b, 1e-5f)), loss_of(g, mg_rmsnorm(g, x, w, 1e-6f)));
    l = mg_add(g, l, loss_of(g, mg_layernorm(g, x2, w2, NULL, 1e-5f)));
    return mg_add(g, l, loss_of(g, mg_rmsnorm(g, x2, w2, 1e-5f)));
}

static mg_tensor *g_softmax(mg_graph *g) {
    mg_tensor *x = PARAM(g, "x", 6, 5, 333);
    return loss_of(g, mg_softmax(g, mg_scale(g, x, 4.0f)));
}

/* targets in [0, 50): the ignore index 7 occurs */
static mg_tensor *g_xent(mg_graph *g) {
    mg_tensor *x = PARAM(g, "logits", 9, 4, 50), *t = INPUT(g, "targets", MG_I32, 9, 4);
    return mg_cross_entropy(g, mg_scale(g, x, 3.0f), t, 7);
}

/* the vocab-parallel pieces on one rank's block [20, 50) of a 50-word vocabulary */
static mg_tensor *g_xent_vp(mg_graph *g) {
    mg_tensor *x = PARAM(g, "logits", 9, 4, 30), *t = INPUT(g, "targets", MG_I32, 9, 4);
    mg_attrs at;
    memset(&at, 0, sizeof at);
    at.xent.ignore_index = 7;
    at.xent.vocab_offset = 20;
    mg_node *mx = mg_node_new(g, MG_OP_XENT_VP_MAX, &at, 1, &x, NULL);
    if (!mx) return NULL;
    mg_tensor *pin[3] = {x, t, mx->out[0]};
    mg_node *parts = mg_node_new(g, MG_OP_XENT_VP_PARTS, &at, 3, pin, NULL);
    if (!parts) return NULL;
    mg_node *cnt = mg_node_new(g, MG_OP_XENT_COUNT, &at, 1, &t, NULL);
    if (!cnt) return NULL;
    mg_tensor *lin[4] = {parts->out[0], mx->out[0], t, cnt->out[0]};
    mg_node_new(g, MG_OP_XENT_VP_LOSS, &at, 4, lin, NULL);
    return NULL; /* forward only: these pieces have no gradient rules */
}

/* ids in [0, 50) against 40 rows: zero rows for 40..49, repeated ids */
static mg_tensor *g_embedding(mg_graph *g) {
    mg_tensor *ids = INPUT(g, "ids", MG_I32, 33, 5), *table = PARAM(g, "table", 40, 24);
    return loss_of(g, mg_embedding(g, ids, table));
}

static mg_tensor *g_dropout(mg_graph *g) {
    mg_tensor *x = PARAM(g, "x", 6, 4, 50), *x2 = PARAM(g, "x2", 3, 10);
    mg_tensor *y = mg_dropout(g, x, 0.3f);
    mg_tensor *y2 = mg_dropout(g, x2, 0.5f);
    if (!y2) return NULL;
    /* y2 as rows 4..6, columns 10..19 of a logical [8, 30] tensor (a tensor-parallel
     * block): the mask must use the logical indices */
    y2->logical.ndim = 2;
    y2->logical.shape[0] = 8;
    y2->logical.shape[1] = 30;
    y2->logical.offset[0] = 4;
    y2->logical.offset[1] = 10;
    return mg_add(g, loss_of(g, y), loss_of(g, y2));
}

/* positions in [0, 100): shared by the samples, and each sample its own */
static mg_tensor *g_rope(mg_graph *g) {
    mg_tensor *x = PARAM(g, "x", 10, 2, 3, 16), *pos = INPUT(g, "pos", MG_I32, 10);
    mg_tensor *x2 = PARAM(g, "x2", 10, 3, 2, 8), *pos2 = INPUT(g, "pos2", MG_I32, 10, 3);
    /* and interleaved pairs with YaRN's frequencies and attention factor (MLA's), Llama 3.1's */
    mg_attr_rope yarn = {.theta = 10000.0f, .interleaved = true, .scaling = MG_ROPE_YARN, .factor = 40.0f,
                         .original_max_pos = 64, .beta_fast = 32.0f, .beta_slow = 1.0f, .mscale = 1.2f};
    mg_attr_rope l3 = {.theta = 500000.0f, .scaling = MG_ROPE_LLAMA3, .factor = 8.0f, .original_max_pos = 32,
                       .low_freq_factor = 1.0f, .high_freq_factor = 4.0f};
    mg_tensor *l = mg_add(g, loss_of(g, mg_rope(g, x, pos, 10000.0f)), loss_of(g, mg_rope(g, x2, pos2, 10000.0f)));
    l = mg_add(g, l, loss_of(g, mg_rope_ex(g, x, pos, &yarn)));
    return mg_add(g, l, loss_of(g, mg_rope_ex(g, x2, pos2, &l3)));
}

static mg_tensor *attn(mg_graph *g, const char *p, int64_t s, int64_t b, int64_t nh, int64_t ng, int64_t hd,
                       bool causal, float drop) {
    char n[3][32];
    snprintf(n[0], sizeof n[0], "%s.q", p);
    snprintf(n[1], sizeof n[1], "%s.k", p);
    snprintf(n[2], sizeof n[2], "%s.v", p);
    mg_tensor *q = PARAM(g, n[0], s, b, nh, hd), *k = PARAM(g, n[1], s, b, ng, hd), *v = PARAM(g, n[2], s, b, ng, hd);
    return mg_attention(g, q, k, v, causal, drop);
}

static mg_tensor *g_attention(mg_graph *g) {
    mg_tensor *l = loss_of(g, attn(g, "a", 70, 2, 4, 2, 16, true, 0.0f));   /* causal, GQA */
    l = mg_add(g, l, loss_of(g, attn(g, "b", 33, 3, 3, 3, 8, false, 0.0f))); /* full, MHA */
    l = mg_add(g, l, loss_of(g, attn(g, "c", 40, 2, 4, 1, 32, true, 0.2f))); /* dropout, MQA */
    /* a sequence block: queries 0..23 of the logical sequence against keys 8..31, so
     * the first rows see no key */
    mg_tensor *q = PARAM(g, "d.q", 24, 2, 2, 8), *k = PARAM(g, "d.k", 24, 2, 2, 8), *v = PARAM(g, "d.v", 24, 2, 2, 8);
    if (!q || !k || !v) return NULL;
    k->logical.shape[0] = 32;
    k->logical.offset[0] = 8;
    q->logical.shape[0] = 32;
    l = mg_add(g, l, loss_of(g, mg_attention(g, q, k, v, true, 0.1f)));
    /* within documents: doc_start uniform in [0, 40) (the case's ids_hi), rows that see
     * no key included */
    mg_tensor *eq = PARAM(g, "e.q", 40, 2, 4, 8), *ek = PARAM(g, "e.k", 40, 2, 2, 8), *ev = PARAM(g, "e.v", 40, 2, 2, 8);
    mg_tensor *ds = INPUT(g, "e.doc_start", MG_I32, 40, 2);
    l = mg_add(g, l, loss_of(g, mg_attention_masked(g, eq, ek, ev, ds, 0, 0.1f)));
    /* a sliding window of 9 keys, alone and with the documents */
    mg_tensor *wq = PARAM(g, "w.q", 40, 2, 4, 8), *wk = PARAM(g, "w.k", 40, 2, 2, 8), *wv = PARAM(g, "w.v", 40, 2, 2, 8);
    l = mg_add(g, l, loss_of(g, mg_attention_masked(g, wq, wk, wv, NULL, 9, 0.1f)));
    /* values of another head size than q and k (multi-latent attention), a given scale, GQA */
    mg_tensor *mq = PARAM(g, "m.q", 70, 2, 4, 24), *mk = PARAM(g, "m.k", 70, 2, 2, 24), *mv = PARAM(g, "m.v", 70, 2, 2, 16);
    l = mg_add(g, l, loss_of(g, mg_attention_scaled(g, mq, mk, mv, NULL, 0, 0.1f, 0.3f)));
    return mg_add(g, l, loss_of(g, mg_attention_masked(g, wq, wk, wv, ds, 9, 0.0f)));
}

static mg_tensor *g_reduce(mg_graph *g) {
    mg_tensor *x = PARAM(g, "x", 4, 300, 5), *big = PARAM(g, "big", 3, 20000);
    mg_tensor *l = loss_of(g, mg_sum(g, x, 1, false));
    l = mg_add(g, l, loss_of(g, mg_mean(g, x, 2, true)));
    l = mg_add(g, l, loss_of(g, mg_mean(g, x, MG_ALL_AXES, false)));
    l = mg_add(g, l, loss_of(g, mg_sum(g, big, 1, true)));
    return mg_add(g, l, loss_of(g, mg_mean(g, big, MG_ALL_AXES, true)));
}

static mg_tensor *g_shape(mg_graph *g) {
    mg_tensor *x = PARAM(g, "x", 4, 6, 10), *parts[3];
    if (mg_split(g, x, 2, 3, (int64_t[]){2, 5, 3}, parts)) return NULL;
    /* part 1 unused: its gradient is a zeros node */
    mg_tensor *c = mg_concat(g, 2, (mg_tensor *[]){parts[2], parts[0]}, 2);            /* [4, 6, 5] */
    mg_tensor *t = mg_transpose(g, c, (int[]){2, 0, 1});                                 /* [5, 4, 6] */
    mg_tensor *s = mg_slice(g, t, 1, 1, 2);                                              /* [5, 2, 6] */
    mg_tensor *p = mg_pad(g, s, 2, 3, 11);                                               /* [5, 2, 11] */
    mg_tensor *r = mg_reshape(g, p, 2, D(10, 11));
    return loss_of(g, r);
}

/* a small model's AdamW step: sumsq, clip_coef, lr_schedule, adamw */
static mg_tensor *g_optimizer(mg_graph *g) {
    mg_tensor *x = INPUT(g, "x", MG_F32, 8, 12), *w = PARAM(g, "w", 7, 12), *b = PARAM(g, "b", 7);
    b->no_weight_decay = true;
    return loss_of(g, mg_gelu(g, mg_linear(g, x, w, b)));
}

/* collectives over a group of one rank (no communicator): device copies; the NCCL
 * paths need several GPUs (gpu-check.sh runs what one GPU allows) */
static mg_tensor *g_collective(mg_graph *g) {
    mg_tensor *x = PARAM(g, "x", 4, 6);
    mg_tensor *y = mg_allreduce(g, x, MG_GROUP_TP, 1, MG_REDUCE_SUM, 0);
    y = mg_allgather(g, y, MG_GROUP_TP, 1, 1, 1);
    y = mg_reduce_scatter(g, y, MG_GROUP_DP, 1, 0, 2);
    y = mg_broadcast(g, y, MG_GROUP_DP, 1, 0, 3);
    (void)y;
    return NULL;
}

/* a step's gradient accumulation into a persistent buffer, and a recompute gate (a copy
 * that waits for its other inputs); forward only */
static mg_tensor *g_step(mg_graph *g) {
    mg_tensor *x = PARAM(g, "x", 5, 7), *y = PARAM(g, "y", 3, 4);
    mg_tensor *acc = mg_state(g, "acc", MG_F32, 2, D(5, 7), (mg_init){MG_INIT_ZEROS, 0});
    if (!x || !y || !acc) return NULL;
    mg_node *n = mg_node_new(g, MG_OP_ACCUMULATE, NULL, 2, (mg_tensor *[]){acc, x}, "acc.out");
    if (!n) return NULL;
    n->out[0]->updates = acc;
    (void)mg_node_new(g, MG_OP_RECOMPUTE_GATE, NULL, 2, (mg_tensor *[]){y, n->out[0]}, "gate");
    return NULL;
}

/* MoE balancing: the normalised sigmoid scores (and their gradient), the router's
 * per-expert token counts (whole and per sample) and the expert biases' step */
static mg_tensor *g_moe_balance(mg_graph *g) {
    mg_tensor *x = PARAM(g, "x", 40, 16), *bias = PARAM(g, "bias", 16), *p, *m;
    if (!x || !bias) return NULL;
    mg_moe_route_opts o = {.topk = 4, .score = MG_MOE_SIGMOID, .num_groups = 4, .group_topk = 2, .expert_bias = bias};
    if (mg_moe_route(g, x, &o, &p, &m)) return NULL;
    mg_tensor *cnt = mg_moe_map_count(g, m);
    mg_attrs at = {.moe = {.samples = 5}};
    mg_node *per = mg_node_new(g, MG_OP_MOE_MAP_COUNT, &at, 1, &m, "count_per_sample");
    mg_tensor *nb = mg_moe_expert_bias_update(g, bias, cnt, 1e-3f);
    (void)per, (void)nb;
    return loss_of(g, mg_sigmoid_norm(g, x));
}

/* narrow storage (mgraph/precision.h): casts to every format, exact f32 arithmetic between
 * conversions (the converting wrapper), a concat of parts stored differently, an
 * in-place accumulate into a bf16 accumulator; forward only */
static mg_tensor *g_precision(mg_graph *g) {
    mg_tensor *x = PARAM(g, "x", 6, 40), *z = PARAM(g, "z", 6, 40);
    mg_tensor *acc = mg_state(g, "acc", MG_F32, 2, D(6, 40), (mg_init){MG_INIT_ZEROS, 0});
    mg_tensor *xb = mg_cast(g, x, MG_BF16), *xh = mg_cast(g, x, MG_F16);
    mg_tensor *x8 = mg_cast(g, mg_scale(g, x, 300.0f), MG_F8E4M3), *x5 = mg_cast(g, mg_scale(g, x, 3e4f), MG_F8E5M2);
    mg_tensor *s = mg_add(g, xb, z), *m = mg_mul(g, xh, mg_cast(g, x8, MG_F32));
    if (!s || !m || !x5 || !acc) return NULL;
    s->storage = MG_BF16;
    m->storage = MG_F16;
    (void)mg_cast(g, x5, MG_F16);
    (void)mg_concat(g, 3, (mg_tensor *[]){s, z, m}, 0);
    acc->storage = MG_BF16;
    mg_node *n = mg_node_new(g, MG_OP_ACCUMULATE, NULL, 2, (mg_tensor *[]){acc, s}, "acc.out");
    if (n) n->out[0]->updates = acc;
    return NULL;
}

/* shift: f32 along dims 0 and 1 both ways (with its gradient), i32 token ids and labels */
static mg_tensor *g_shift(mg_graph *g) {
    mg_tensor *x = PARAM(g, "x", 9, 4, 6), *ids = INPUT(g, "ids", MG_I32, 16, 3);
    if (!x || !ids) return NULL;
    (void)mg_shift(g, ids, 0, 1, 0);
    (void)mg_shift(g, ids, 0, 2, -100);
    return mg_add(g, loss_of(g, mg_shift(g, x, 0, 2, 0.5)), loss_of(g, mg_shift(g, x, 1, -1, 0)));
}

static const cuda_case g_cases[] = {
    {"moe_balance", g_moe_balance, 0, 0, 0},
    {"precision", g_precision, 0, 0, 0},
    {"precision (later micro-batch)", g_precision, 0, 0, 1},
    {"shift", g_shift, 100, 0, 0},
    {"matmul", g_matmul, 0, 0, 0},
    {"elementwise", g_elementwise, 0, 0, 0},
    {"activation", g_activation, 0, 0, 0},
    {"norm", g_norm, 0, 0, 0},
    {"softmax", g_softmax, 0, 0, 0},
    {"cross_entropy", g_xent, 50, 0, 0},
    {"xent_vp", g_xent_vp, 50, 0, 0},
    {"embedding", g_embedding, 50, 0, 0},
    {"dropout", g_dropout, 0, 0, 0},
    {"rope", g_rope, 100, 0, 0},
    {"attention", g_attention, 40, 0, 0},
    {"reduce", g_reduce, 0, 0, 0},
    {"shape", g_shape, 0, 0, 0},
    {"optimizer", g_optimizer, 0, 1, 0},
    {"optimizer (scheduled weight decay)", g_optimizer, 0, 2, 0},
    {"collective", g_collective, 0, 0, 0},
    {"step (first micro-batch)", g_step, 0, 0, 0},
    {"step (later micro-batch)", g_step, 0, 0, 1},
};
enum { N_CASES = sizeof g_cases / sizeof g_cases[0] };

/* ---- tolerances ----------------------------------------------------------------------- */
static void tolerance(mg_op op, mg_cuda_gemm prec, double *rtol, double *atol) {
    *rtol = 1e-5;
    *atol = 1e-5;
    switch (op) {
    case MG_OP_MATMUL:
        /* fp32 cuBLAS sums in another order than OpenBLAS; TF32 keeps 10 mantissa bits,
         * bf16 7: errors ~ sqrt(K) * 2^-11 / 2^-8 relative to the |a||b| scale */
        *rtol = prec == MG_CUDA_GEMM_FP32 ? 1e-5 : prec == MG_CUDA_GEMM_TF32 ? 5e-3 : 3e-2;
        *atol = prec == MG_CUDA_GEMM_FP32 ? 1e-5 : prec == MG_CUDA_GEMM_TF32 ? 5e-3 : 3e-2;
        break;
    case MG_OP_ATTENTION:
    case MG_OP_ATTENTION_BWD:
        /* P and dS go through two GEMM stages summed in another order than OpenBLAS's */
        *rtol = 1e-4;
        break;
    default: break;
    }
}

/* |got - want| <= atol + rtol |want| elementwise; non-finite values must match exactly
 * (an attention row that sees no key has lse = -inf on both sides). */
static void expect_close(const char *what, const float *got, const float *want, int64_t n, double rtol, double atol) {
    int64_t bad = 0, first = -1;
    double worst = 0;
    for (int64_t i = 0; i < n; i++) {
        double g = got[i], w = want[i], e;
        if (!isfinite(g) || !isfinite(w)) e = (isnan(g) && isnan(w)) || g == w ? 0 : INFINITY;
        else e = fabs(g - w) / (atol + rtol * fabs(w));
        if (e > 1) {
            if (first < 0) first = i;
            bad++;
        }
        if (e > worst) worst = e;
    }
    TK_CHECK(bad == 0, "%s: %lld of %lld elements off (first %lld: got %.9g want %.9g; worst %.3g x tolerance, rtol %g atol %g)",
             what, (long long)bad, (long long)n, (long long)first, first >= 0 ? got[first] : 0.0,
             first >= 0 ? want[first] : 0.0, worst, rtol, atol);
}

/* ---- the walk ---------------------------------------------------------------------------- */
static tk_rng g_rng = {20260616};

static void fill_leaves(tk_run *r, const cuda_case *c) {
    for (int i = 0; i < mg_graph_n_tensors(r->g); i++) {
        const mg_tensor *t = mg_graph_tensor(r->g, i);
        if (t->src) continue;
        int64_t n = mg_numel(t);
        if (t->dtype == MG_I32) {
            int32_t *p = tk_i32(r, t);
            for (int64_t k = 0; k < n; k++) p[k] = (int32_t)tk_uniform(&g_rng, 0, (float)c->ids_hi) % (c->ids_hi ? c->ids_hi : 1);
        } else if (t->dtype == MG_F32) {
            /* Adam moments: v >= 0; narrow storage holds the values rounded */
            float *v = mg_tensor_storage(t) == MG_F32 ? tk_f32(r, t) : malloc((size_t)n * sizeof *v);
            if (t->role == MG_ROLE_OPT_STATE && t->persistent) tk_fill(&g_rng, v, n, 0.0f, 0.1f);
            else tk_fill(&g_rng, v, n, -1.0f, 1.0f);
            if (v != tk_f32(r, t)) {
                mg_convert(tk_f32(r, t), mg_tensor_storage(t), v, MG_F32, n);
                free(v);
            }
        }
    }
}

static size_t bytes_of(const mg_tensor *t) { return mg_tensor_bytes(t); /* in its storage */ }

/* Harness self-check: host memory and the CPU kernel instead of the device. */
static bool g_host_mode;

static cudaError_t dev_alloc(void **p, size_t b) {
    if (!g_host_mode) return cudaMalloc(p, b);
    *p = malloc(b);
    return *p ? cudaSuccess : cudaErrorMemoryAllocation;
}
static cudaError_t dev_copy(void *dst, const void *src, size_t b, enum cudaMemcpyKind k) {
    if (!g_host_mode) return cudaMemcpy(dst, src, b, k);
    memcpy(dst, src, b);
    return cudaSuccess;
}
static cudaError_t dev_set(void *p, int v, size_t b) {
    if (!g_host_mode) return cudaMemset(p, v, b);
    memset(p, v, b);
    return cudaSuccess;
}
static void dev_free(void *p) {
    if (g_host_mode) free(p);
    else cudaFree(p);
}

/* Runs node nd on the GPU with copies of its (current) host inputs; returns the
 * device outputs copied back into host buffers gpu_out[]. */
static int run_on_gpu(tk_run *r, const mg_node *nd, void **gpu_out, mg_error *err) {
    const mg_op_def *def = mg_op_def_get(nd->op);
    void *dptr[2 * MG_MAX_OUT + 64] = {0};
    void *hptr[2 * MG_MAX_OUT + 64] = {0};
    int np = nd->n_in + nd->n_out, rc = MG_OK;
    if (np > (int)(sizeof dptr / sizeof dptr[0])) return mg_error_set(err, MG_ERR_UNSUPPORTED, "too many operands");
    for (int i = 0; i < np && !rc; i++) {
        const mg_tensor *t = i < nd->n_in ? nd->in[i] : nd->out[i - nd->n_in];
        hptr[i] = mg_storage_data(r->st, t);
        for (int j = 0; j < i; j++)
            if (hptr[j] == hptr[i]) dptr[i] = dptr[j]; /* in place, or the same tensor twice */
        if (dptr[i]) continue;
        size_t b = bytes_of(t) ? bytes_of(t) : 4;
        rc = mg_cuda_check(dev_alloc(&dptr[i], b), "cudaMalloc", err);
        if (rc) break;
        if (i < nd->n_in) rc = mg_cuda_check(dev_copy(dptr[i], hptr[i], bytes_of(t), cudaMemcpyHostToDevice), "H2D", err);
        else rc = mg_cuda_check(dev_set(dptr[i], 0xff, b), "memset", err); /* NaN: unwritten outputs show */
    }
    if (!rc) {
        mg_kernel_args ka = {.node = nd, .in = dptr, .out = dptr + nd->n_in, .info = &r->info};
        rc = (g_host_mode ? def->cpu : def->cuda)(&ka, err);
        if (!rc && !g_host_mode) rc = mg_cuda_check(cudaDeviceSynchronize(), mg_op_name(nd->op), err);
    }
    for (int o = 0; o < nd->n_out && !rc; o++)
        rc = mg_cuda_check(dev_copy(gpu_out[o], dptr[nd->n_in + o], bytes_of(nd->out[o]), cudaMemcpyDeviceToHost), "D2H", err);
    for (int i = 0; i < np; i++) {
        bool dup = false;
        for (int j = 0; j < i; j++) dup |= dptr[j] == dptr[i];
        if (!dup && dptr[i]) dev_free(dptr[i]);
    }
    return rc;
}

/* Walks case c; compares nodes of kind `only`. Returns the number compared. */
static int walk_case(const cuda_case *c, mg_op only, mg_cuda_gemm prec) {
    mg_graph *g = mg_graph_new();
    mg_error err = {0};
    mg_tensor *loss = c->build(g);
    if (loss && mg_graph_backward(g, loss, &err)) TK_CHECK(0, "%s: backward: %s", c->name, err.msg);
    if (c->optimizer) {
        mg_adamw_config cfg = mg_adamw_defaults();
        cfg.lr.lr = 1e-3f;
        if (c->optimizer == 2) /* cosine from 0.02 to 0.1 */
            cfg.lr.wd_style = MG_WD_COSINE, cfg.lr.wd_start = 0.02f, cfg.lr.wd_end = 0.1f, cfg.lr.wd_incr_steps = 10;
        mg_optimizer_outputs oo;
        if (mg_graph_add_adamw(g, &cfg, &oo, &err)) TK_CHECK(0, "%s: adamw: %s", c->name, err.msg);
    }
    tk_run r;
    int compared = 0;
    if (tk_failures || tk_prepare(&r, g)) {
        TK_CHECK(0, "%s: building the graph failed", c->name);
        mg_graph_free(g);
        return 0;
    }
    r.info.iteration = 3;
    r.info.mb_local = c->mb_local;
    fill_leaves(&r, c);
    mg_node **ord;
    int n;
    if (mg_graph_topo(g, &ord, &n, &err)) TK_CHECK(0, "%s: topo: %s", c->name, err.msg);
    for (int k = 0; k < n && !tk_failures; k++) {
        const mg_node *nd = ord[k];
        const mg_op_def *def = mg_op_def_get(nd->op);
        bool check = nd->op == only && (def->cuda || g_host_mode);
        void *gpu_out[MG_MAX_OUT] = {0};
        if (check) {
            for (int o = 0; o < nd->n_out; o++) gpu_out[o] = malloc(bytes_of(nd->out[o]) + 4);
            mg_error kerr = {0};
            if (run_on_gpu(&r, nd, gpu_out, &kerr)) {
                TK_CHECK(0, "%s: node %d (%s): %s", c->name, nd->id, mg_op_name(nd->op), kerr.msg);
                check = false;
            }
        }
        void *ptrs[2 * MG_MAX_OUT + 64];
        for (int i = 0; i < nd->n_in; i++) ptrs[i] = mg_storage_data(r.st, nd->in[i]);
        for (int o = 0; o < nd->n_out; o++) ptrs[nd->n_in + o] = mg_storage_data(r.st, nd->out[o]);
        mg_kernel_args ka = {.node = nd, .in = ptrs, .out = ptrs + nd->n_in, .info = &r.info};
        mg_error kerr = {0};
        if (def->cpu(&ka, &kerr)) TK_CHECK(0, "%s: CPU node %d (%s): %s", c->name, nd->id, mg_op_name(nd->op), kerr.msg);
        for (int o = 0; check && o < nd->n_out; o++) {
            const mg_tensor *t = nd->out[o];
            char what[160];
            snprintf(what, sizeof what, "%s: node %d %s output %d '%s'", c->name, nd->id, mg_op_name(nd->op), o, t->name);
            if (t->dtype == MG_F32 && mg_tensor_storage(t) == MG_F32) {
                double rtol, atol;
                tolerance(nd->op, prec, &rtol, &atol);
                expect_close(what, gpu_out[o], ptrs[nd->n_in + o], mg_numel(t), rtol, atol);
            } else {
                TK_CHECK(!memcmp(gpu_out[o], ptrs[nd->n_in + o], bytes_of(t)), "%s differs", what);
            }
        }
        if (check) compared++;
        for (int o = 0; o < nd->n_out; o++) free(gpu_out[o]);
    }
    tk_release(&r);
    mg_graph_free(g);
    return compared;
}

static int find_op(const char *name) {
    for (int op = 0; op < MG_OP_COUNT; op++)
        if (!strcmp(mg_op_name((mg_op)op), name)) return op;
    return -1;
}

static int check_registry(int argc, char **argv) {
    bool listed[MG_OP_COUNT] = {0};
    for (int i = 0; i < argc; i++) {
        int op = find_op(argv[i]);
        TK_CHECK(op >= 0, "registry: unknown op '%s'", argv[i]);
        if (op >= 0) listed[op] = true;
    }
    for (int op = 0; op < MG_OP_COUNT; op++) {
        bool has = mg_op_def_get((mg_op)op)->cuda != NULL;
        TK_CHECK(has == listed[op], "op %s: %s", mg_op_name((mg_op)op),
                 has ? "has a CUDA kernel but no cuda.<op> test" : "is listed but has no CUDA kernel");
    }
    /* The probe must succeed (0 devices without a driver), never crash or abort. */
    int nd = mg_cuda_device_count();
    printf("registry: %d CUDA devices%s%s\n", nd, nd ? "" : "; ", mg_cuda_status());
    return tk_failures ? 1 : 0;
}

static int check_cases(int argc, char **argv) {
    g_host_mode = true;
    for (int i = 0; i < argc; i++) {
        int op = find_op(argv[i]), total = 0;
        TK_CHECK(op >= 0, "cases: unknown op '%s'", argv[i]);
        for (int c = 0; op >= 0 && c < N_CASES && !tk_failures; c++) total += walk_case(&g_cases[c], (mg_op)op, MG_CUDA_GEMM_FP32);
        TK_CHECK(op < 0 || total > 0, "no case has a %s node", argv[i]);
    }
    if (!tk_failures) printf("cases: every listed op occurs in a case; all cases build and run\n");
    return tk_failures ? 1 : 0;
}

int main(int argc, char **argv) {
    if (argc >= 2 && !strcmp(argv[1], "registry")) return check_registry(argc - 2, argv + 2);
    if (argc >= 2 && !strcmp(argv[1], "cases")) return check_cases(argc - 2, argv + 2);
    if (argc == 2 && !strcmp(argv[1], "list")) { /* the ops with CUDA kernels (gpu-check.sh) */
        for (int op = 0; op < MG_OP_COUNT; op++)
            if (mg_op_def_get((mg_op)op)->cuda) printf("%s\n", mg_op_name((mg_op)op));
        return 0;
    }
    if (argc != 2) {
        fprintf(stderr, "usage: test_cuda_ops <op>[@fp32|tf32|bf16] | list | registry <op>... | cases <op>...\n");
        return 2;
    }
    char name[64];
    snprintf(name, sizeof name, "%s", argv[1]);
    mg_cuda_gemm prec = MG_CUDA_GEMM_FP32;
    char *at = strchr(name, '@');
    if (at) {
        *at++ = 0;
        mg_error err = {0};
        if (mg_cuda_gemm_parse(at, &prec, &err)) {
            fprintf(stderr, "%s\n", err.msg);
            return 2;
        }
    }
    int op = find_op(name);
    if (op < 0 || !mg_op_def_get((mg_op)op)->cuda) {
        fprintf(stderr, "op '%s' has no CUDA kernel\n", name);
        return 2;
    }
    if (mg_cuda_device_count() == 0) {
        printf("SKIP cuda.%s: %s\n", argv[1], mg_cuda_status());
        return SKIP;
    }
    mg_cuda_set_gemm_precision(prec);
    int total = 0;
    for (int c = 0; c < N_CASES; c++) {
        int k = walk_case(&g_cases[c], (mg_op)op, prec);
        if (k) printf("%s: %d %s nodes match the CPU\n", g_cases[c].name, k, name);
        total += k;
    }
    TK_CHECK(total > 0, "no case has a %s node", name);
    if (!tk_failures) printf("cuda.%s: %d nodes OK\n", argv[1], total);
    return tk_failures ? 1 : 0;
}

/* The planner's unit costs: which link a group's collectives cross, an alpha-beta
 * model of each collective on it, and a roofline for kernels. */
#include <math.h>

#include "planner/planner_internal.h"

void mg_planner_link(const mg_cluster *c, long stride, int n, mg_planner_link_t *l) {
    int G = c->gpus_per_node;
    l->base_s = c->collective_base_latency_us * 1e-6;
    l->inter = (long)(n - 1) * stride >= G;
    if (!l->inter) {
        l->gbps = c->intra_gbps;
        l->latency_s = c->intra_latency_us * 1e-6;
        return;
    }
    /* members sharing a node: each has its own NIC, NCCL runs one ring per NIC */
    long k = stride >= G ? 1 : G / stride;
    if (k > n) k = n;
    double per_gpu = c->inter_gbps;
    /* nodes the group spans: past a leaf switch the spine's taper applies */
    double nodes = ((double)(n - 1) * stride) / G + 1;
    if (c->leaf_nodes > 0 && c->oversubscription > 1 && nodes > c->leaf_nodes) per_gpu /= c->oversubscription;
    double bw = (double)k * per_gpu;
    l->gbps = bw < c->intra_gbps ? bw : c->intra_gbps;
    l->latency_s = c->inter_latency_us * 1e-6;
}

/* Alpha-beta time of one collective of `bytes` input payload over n ranks: ring, or a
 * (double binary) tree for all-reduce when that is faster (small messages). As NCCL's
 * own tuning model (src/graph/tuning.cc: latency = baseLat + nsteps x hwLat, then
 * bytes / bandwidth), a collective pays a base latency once besides its steps'; a
 * point-to-point transfer pays one step. */
double mg_planner_collective_s(mg_op op, int n, double bytes, const mg_planner_link_t *l) {
    if (n <= 1) return 0;
    double a = l->latency_s, a0 = l->base_s, B = l->gbps * 1e9, N = n;
    switch (op) {
    case MG_OP_ALLREDUCE: {
        double ring = 2 * (N - 1) * a + 2 * (N - 1) / N * bytes / B;
        double tree = 2 * ceil(log2(N)) * a + 2 * bytes / B;
        return a0 + (ring < tree ? ring : tree);
    }
    case MG_OP_ALLGATHER: return a0 + (N - 1) * a + (N - 1) * bytes / B;          /* input is one shard */
    case MG_OP_REDUCE_SCATTER: return a0 + (N - 1) * a + (N - 1) / N * bytes / B; /* input is the whole */
    case MG_OP_BROADCAST: return a0 + (N - 1) * a + bytes / B;                      /* pipelined ring */
    case MG_OP_ALLTOALL:
    case MG_OP_ALLTOALL_COUNTS: return a0 + (N - 1) * a + (N - 1) / N * bytes / B;
    default: return a + bytes / B; /* send, ring shift and any other point-to-point transfer */
    }
}

double mg_planner_gemm_efficiency(const mg_cluster *c, double flops) {
    double half = c->gemm_half_gflops * 1e9;
    return c->gemm_efficiency * (flops / (flops + half));
}

double mg_planner_kernel_s(const mg_cluster *c, mg_precision prec, mg_planner_kernel_kind kind, double flops,
                           double bytes) {
    if (flops <= 0 && bytes <= 0) return 0; /* nothing runs (a gate, an empty op) */
    double t_mem = bytes / (c->hbm_gbps * 1e9 * c->memory_efficiency), t_flop;
    if (kind == MG_KERNEL_VECTOR || flops <= 0) {
        t_flop = flops / (c->vector_tflops * 1e12);
    } else {
        double eff = mg_planner_gemm_efficiency(c, flops);
        if (kind == MG_KERNEL_ATTENTION || kind == MG_KERNEL_ATTENTION_BWD) eff *= c->attention_efficiency;
        /* 0 (a cluster built in code without it): the forward's rate */
        if (kind == MG_KERNEL_ATTENTION_BWD && c->attention_backward_efficiency > 0) eff *= c->attention_backward_efficiency;
        t_flop = flops / (c->peak_tflops[prec] * 1e12 * eff);
    }
    return c->kernel_overhead_us * 1e-6 + (t_mem > t_flop ? t_mem : t_flop);
}

double mg_planner_attention_scores(const mg_node *n) {
    /* attention: q [Sq, b, heads, hd], k [Sk, ...]; its backward reads (o, q, k, ...) */
    const mg_tensor *q = n->op == MG_OP_ATTENTION ? n->in[0] : n->in[1];
    const mg_tensor *k = n->op == MG_OP_ATTENTION ? n->in[1] : n->in[2];
    return (double)q->shape[0] * (double)k->shape[0] * (double)q->shape[1] * (double)q->shape[2];
}

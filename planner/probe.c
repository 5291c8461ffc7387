/* The block cost table: what the embedding, each kind of transformer layer and the
 * output layer + loss cost one rank per micro-batch, read off mgraph's own rank graph
 * of a probe model (include/mgraph/planner.h).
 *
 * The probe has the query's widths, micro-batch and plan (tp, cp, ep, sequence
 * parallelism) and one layer per layer kind: layer i of the model is an MoE layer when
 * i % --moe-layer-freq == 0 and a full-attention one when (i + 1) % --window-attn-skip-
 * freq == 0, so the kinds repeat with the least common multiple of the two, and layer
 * i costs what probe layer i % period costs. A --moe-layer-freq list ([0]*3+[1]*58) has
 * no period: the probe has the window period's layers twice, dense then MoE (MoE then
 * dense when the model's last layer is dense, so that a multi-token prediction layer,
 * of the last layer's kind, is the model's), and layer i costs the probe layer of its
 * MoE-ness and i % the window period. Multi-token prediction (norms, eh_proj, its
 * decoder layer, its loss) is priced with the output layer, on the last stage, as
 * Megatron places it. Pipeline and data parallelism are left out
 * of the probe (schedule.c prices them from the table), so one probe serves every
 * pipeline split, virtual-stage count, data-parallel size and recompute setting.
 *
 * Sequences longer than MG_PLANNER_PROBE_SEQ tokens (mgraph refuses to build attention
 * over more than 2^31 score elements, and a planner must not build what it only
 * prices) are probed at a shorter length and scaled: every node's FLOPs, bytes, saved
 * tensors and collective payloads are linear in the tokens except attention's FLOPs,
 * which follow its score pairs (s^2 / 2 causal; s w within a window of w keys). Kernel
 * launches do not scale.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mgraph/comm.h"
#include "ops/comm_api.h"
#include "ops/op.h"
#include "planner/planner_internal.h"

/* Attention's score pairs over s tokens with a window of w keys (0: none), causal. */
static double attention_pairs(double s, double w) {
    if (w > 0 && w < s) return s * w - w * w / 2;
    return s * s / 2;
}

static int gcd(int a, int b) { return b ? gcd(b, a % b) : a; }

/* Layer index of a parameter's name ("h.12.attn.c_attn.weight", "model.layers.12..."),
 * -1 outside layers. */
static int layer_of_name(const char *name) {
    if (!name) return -1;
    const char *p = NULL;
    if (!strncmp(name, "h.", 2)) p = name + 2;
    else if (!strncmp(name, "model.layers.", 13)) p = name + 13;
    if (!p || *p < '0' || *p > '9') return -1;
    return atoi(p);
}

static bool is_embedding_name(const char *name) {
    return !strncmp(name, "wte.", 4) || !strncmp(name, "wpe.", 4) || !strncmp(name, "model.embed_tokens.", 19) ||
           !strncmp(name, "model.embed_positions.", 22);
}
static bool is_position_table(const char *name) {
    return !strncmp(name, "wpe.", 4) || !strncmp(name, "model.embed_positions.", 22);
}

/* Megatron's unfused attention: QK^T written (S), scale-mask-softmax reads and writes
 * it, dropout reads it and writes P' and a byte mask, P'V reads P' (6.5 S, in the
 * activation type); the backward reads the mask, P and the incoming gradient and
 * writes two gradients of S (8.5 S), with 4 matmuls where the fused kernel recomputes
 * P (5). Three extra kernels each way. */
static void unfused_attention(const mg_cluster *c, mg_precision prec, const mg_node *n, double score_scale,
                              double *flops, double *extra_s) {
    double S = mg_planner_attention_scores(n) * score_scale, ab = prec == MG_PREC_BF16 ? 2 : 4;
    double bytes = (n->op == MG_OP_ATTENTION ? 6.5 : 8.5) * S * ab;
    if (n->op == MG_OP_ATTENTION_BWD) *flops *= 0.8;
    *extra_s = bytes / (c->hbm_gbps * 1e9 * c->memory_efficiency) + 3 * c->kernel_overhead_us * 1e-6;
}

/* Payload bytes of a collective in the run's precision: activations (and their
 * gradients) are 16-bit in mixed precision. Expert parallelism's exchange moves the
 * token side's rows under a balanced routing (as its cost function says), whatever
 * static bound its buffers carry. */
static double comm_payload(const mg_node *n, const mg_plan_query *q) {
    const mg_tensor *t = n->n_in > 0 ? n->in[0] : n->out[0];
    double b = (double)mg_numel(t) * (double)mg_dtype_size(t->dtype);
    if (n->op == MG_OP_ALLTOALL) {
        double rows = (double)(n->attrs.comm.dim == 0 ? n->in[0]->shape[0] : n->attrs.comm.rows);
        b = rows * (double)n->in[0]->shape[1] * (double)mg_dtype_size(t->dtype);
    }
    if (q->precision == MG_PREC_BF16 && t->dtype == MG_F32) b *= 0.5;
    return b;
}

/* Distance between consecutive members of rank 0's group: the mesh's (graph/mesh.c), in
 * the plan's rank order (a world with just enough data parallelism for ep). */
static long group_stride(const mg_plan *p, mg_group g) {
    int dp = p->ep > p->cp ? p->ep : 1;
    mg_mesh m;
    if (mg_plan_mesh(p, p->tp * p->cp * p->pp * dp, 0, &m, NULL)) return 1;
    return mg_mesh_stride(&m, g);
}

static mg_planner_block_t *block_of(mg_planner_costs_t *k, int layer) {
    if (layer >= 0) return layer < k->period ? &k->kind[layer] : NULL;
    if (layer == MG_LAYER_PRE) return &k->emb;
    if (layer == MG_LAYER_POST) return &k->head;
    return NULL;
}

/* The block of a parameter (or its gradient's accumulation) by name: a layer's, the
 * embedding's, or the output layer's, which also holds the multi-token prediction
 * layers (named as the layers after the model's: model.layers.{N+k}.*) */
static mg_planner_block_t *block_of_name(mg_planner_costs_t *k, const char *name) {
    int layer = layer_of_name(name);
    if (layer >= 0 && layer < k->period) return &k->kind[layer];
    return layer < 0 && name && is_embedding_name(name) ? &k->emb : &k->head;
}

static int lcm_capped(int a, int b, int cap) {
    long l = (long)a / gcd(a, b) * b;
    return l > cap ? cap + 1 : (int)l;
}

/* Walks the probe's rank graph into the table. */
static int walk(const mg_cluster *c, const mg_plan_query *q, const mg_plan *plan, const mg_graph *g, double r_lin,
                double r_att, double pos_scale, mg_planner_costs_t *k, mg_error *err) {
    mg_precision prec = q->precision;
    double act_scale = prec == MG_PREC_BF16 ? 0.5 : 1.0;
    mg_planner_link_t links[MG_GROUP_COUNT];
    bool have_link[MG_GROUP_COUNT] = {false};
    int ep = plan->ep;
    const mg_moe_config *moe = &q->model.moe;
    /* expert-parallel buffers are sized for the worst routing (include/mgraph/moe.h);
     * the experts' GEMMs run on the balanced routing's rows: topk / min(ep topk, E) of it */
    double expert_balance = 1;
    if (ep > 1 && moe->num_experts > 0) {
        double bound = (double)ep * moe->topk < moe->num_experts ? (double)ep * moe->topk : moe->num_experts;
        expert_balance = moe->topk / bound;
    }
    double step_compute = 0;
    int nn = mg_graph_n_nodes(g);
    k->nodes = nn;
    for (int i = 0; i < nn; i++) {
        const mg_node *n = mg_graph_node(g, i);
        bool per_mb = n->mb >= 0, fwd = n->phase == MG_PHASE_FORWARD;
        int d = fwd ? 0 : 1;
        mg_planner_block_t *b = block_of(k, n->layer);
        if (mg_op_def_get(n->op)->flags & MG_OPF_COMM) {
            /* a transfer is charged once, to its sender (the receiver waits for the same bytes) */
            if (n->op == MG_OP_RECV || (n->n_in == 0 && n->n_out == 0)) continue;
            mg_group grp = n->attrs.comm.group;
            if (grp < 0 || grp >= MG_GROUP_COUNT) continue;
            /* data parallelism (and its combination with cp) is priced by schedule.c */
            if (grp == MG_GROUP_DP || grp == MG_GROUP_DP_CP || grp == MG_GROUP_EDP || grp == MG_GROUP_PP) continue;
            int nr = n->attrs.comm.nranks;
            if (!have_link[grp]) {
                mg_planner_link(c, group_stride(plan, grp), nr > 1 ? nr : 2, &links[grp]);
                have_link[grp] = true;
            }
            k->group_ranks[grp] = nr;
            k->group_inter[grp] = links[grp].inter;
            double payload = comm_payload(n, q) * (per_mb ? r_lin : 1);
            double t = mg_planner_collective_s(n->op, nr, payload, &links[grp]);
            if (!per_mb || !b) {
                k->step_other_comm_s += t;
                continue;
            }
            b->comm_s[d][grp] += t;
            b->comm_n[d][grp]++;
            b->comm_bytes[grp] += mg_comm_wire_bytes(n->op, nr, payload);
            continue;
        }
        double flops = 0, bytes = 0;
        mg_op_cost(n, &flops, &bytes);
        bool attention = n->op == MG_OP_ATTENTION || n->op == MG_OP_ATTENTION_BWD;
        bool gemm = n->op == MG_OP_MATMUL || n->op == MG_OP_MOE_GROUPED_MATMUL || n->op == MG_OP_MOE_GROUPED_MATMUL_DW;
        bool expert = n->op == MG_OP_MOE_GROUPED_MATMUL || n->op == MG_OP_MOE_GROUPED_MATMUL_DW;
        if (attention && n->attrs.attention.causal) {
            /* the op's cost counts every (query, key) pair; a causal kernel skips those in
             * the future (and outside a window): half the square on the diagonal */
            const mg_tensor *qt = n->op == MG_OP_ATTENTION ? n->in[0] : n->in[1];
            double S = (double)qt->shape[0], w = (double)n->attrs.attention.window;
            flops *= attention_pairs(S, w) / (S * S);
        }
        if (per_mb) {
            flops *= attention ? r_att : r_lin;
            bytes *= r_lin;
        }
        if (expert) flops *= expert_balance, bytes *= expert_balance;
        /* the graph is fp32; in mixed precision activations are 16-bit, the optimizer's
         * state (master weights, moments, fp32 gradients) stays fp32 */
        if (n->phase != MG_PHASE_OPTIMIZER) bytes *= act_scale;
        double extra = 0;
        if (q->attention_unfused && attention) unfused_attention(c, prec, n, r_att, &flops, &extra);
        /* the fused kernel's backward runs at its own share of the forward's rate (Megatron's
         * unfused attention of 2021-22 is matmuls and memory passes: priced above) */
        mg_planner_kernel_kind kk = !attention ? (gemm ? MG_KERNEL_GEMM : MG_KERNEL_VECTOR)
                                    : n->op == MG_OP_ATTENTION_BWD && !q->attention_unfused ? MG_KERNEL_ATTENTION_BWD
                                                                                             : MG_KERNEL_ATTENTION;
        double t = mg_planner_kernel_s(c, prec, kk, flops, bytes) + extra;
        if (!per_mb) {
            step_compute += t;
            continue;
        }
        if (!b) {
            /* per-micro-batch work outside the model: gradient accumulation into the fp32
             * main gradients. Megatron's mixed precision accumulates inside the weight-
             * gradient GEMM (--gradient-accumulation-fusion, its default); mgraph's fp32
             * runs do it as nodes, charged to the parameter's layer */
            if (prec == MG_PREC_BF16 || n->n_out < 1) continue;
            b = block_of_name(k, n->out[0]->name);
        }
        b->compute_s[d] += t;
        b->flops[d] += flops;
        b->nodes++;
        if (gemm) b->gemm_s[d] += t, b->gemm_flops[d] += flops;
        if (attention) b->attn_s[d] += t, b->attn_flops[d] += flops;
        if (expert) b->expert_s[d] += t;
        if (n->scope && strstr(n->scope, "shared_experts")) b->shared_s[d] += t;
    }
    /* saved activations: one pass over the backward nodes' inputs */
    int nt = mg_graph_n_tensors(g);
    unsigned char *counted = calloc((size_t)nt, 1);
    if (!counted) return mg_error_set(err, MG_ERR_NOMEM, "planner: out of memory");
    for (int i = 0; i < nn; i++) {
        const mg_node *n = mg_graph_node(g, i);
        if (n->phase != MG_PHASE_BACKWARD || n->mb < 0) continue;
        for (int j = 0; j < n->n_in; j++) {
            const mg_tensor *t = n->in[j];
            if (counted[t->id] || !t->src || t->persistent) continue;
            const mg_node *s = t->src;
            if (s->phase != MG_PHASE_FORWARD || s->mb < 0) continue;
            counted[t->id] = 1;
            mg_planner_block_t *b = block_of(k, s->layer);
            if (!b) continue;
            double bytes = (double)mg_numel(t) * (double)mg_dtype_size(t->dtype) * (t->dtype == MG_F32 ? act_scale : 1.0);
            /* a forward value the backward first reduce-scatters over tp (the partitioner
             * converts where a value is first needed: a bias-free layer's residual sum can
             * stay a partial sum until the backward): Megatron keeps the sequence-parallel
             * shard, as the forward could have */
            if (n->op == MG_OP_REDUCE_SCATTER && n->attrs.comm.group == MG_GROUP_TP && n->attrs.comm.nranks > 1)
                bytes /= n->attrs.comm.nranks;
            b->saved_bytes += bytes * r_lin;
        }
        /* unfused attention keeps its s^2 tensors (5 a s^2 b bytes in 16 bits) */
        if (q->attention_unfused && n->op == MG_OP_ATTENTION_BWD) {
            mg_planner_block_t *b = block_of(k, n->layer);
            double S = 5.0 * mg_planner_attention_scores(n) * r_att * (prec == MG_PREC_BF16 ? 1 : 2);
            if (b) b->saved_bytes += S, b->scores_saved += S;
        }
    }
    free(counted);
    /* parameters by block */
    double total = 0;
    for (int i = 0; i < nt; i++) {
        const mg_tensor *t = mg_graph_tensor(g, i);
        if (!t->persistent || t->updates || t->src || t->role != MG_ROLE_PARAM || !t->name) continue;
        double e = (double)mg_numel(t);
        total += e;
        mg_planner_block_t *b = block_of_name(k, t->name);
        if (is_position_table(t->name)) e *= pos_scale;
        if (strstr(t->name, ".experts.")) b->expert_params += e;
        else b->params += e;
    }
    k->opt_s_per_elem = total > 0 ? step_compute / total : 0;
    return MG_OK;
}

int mg_planner_probe(const mg_cluster *c, const mg_plan_query *q, mg_planner_costs_t *k, mg_error *err) {
    memset(k, 0, sizeof *k);
    const mg_gpt_config *m = &q->model;
    const mg_plan *p = &q->plan;
    /* one probe layer per layer kind */
    int period = 1, wperiod = m->window > 0 && m->window_skip_freq > 1 ? m->window_skip_freq : 1;
    bool by_pattern = m->moe.num_experts > 0 && m->moe.pattern_len > 0;
    if (by_pattern) {
        if (m->moe.pattern_len != m->num_layers)
            return mg_error_set(err, MG_ERR_INVALID, "--moe-layer-freq lists %d layers, the model has --num-layers %d",
                                m->moe.pattern_len, m->num_layers);
        period = wperiod > MG_PLANNER_MAX_KINDS / 2 ? MG_PLANNER_MAX_KINDS + 1 : 2 * wperiod;
    } else {
        if (m->moe.num_experts > 0 && m->moe.layer_freq > 1) period = m->moe.layer_freq;
        if (wperiod > 1) period = lcm_capped(period, wperiod, MG_PLANNER_MAX_KINDS);
    }
    if (period > MG_PLANNER_MAX_KINDS)
        return mg_error_set(err, MG_ERR_UNSUPPORTED,
                            "the layer kinds (--moe-layer-freq %s%d, --window-attn-skip-freq %d) repeat every more than %d "
                            "layers: the planner prices at most %d kinds",
                            by_pattern ? "a list, " : "", by_pattern ? 0 : m->moe.layer_freq, m->window_skip_freq,
                            by_pattern ? MG_PLANNER_MAX_KINDS / 2 : MG_PLANNER_MAX_KINDS, MG_PLANNER_MAX_KINDS);
    k->period = period;
    k->by_pattern = by_pattern;
    k->wperiod = wperiod;
    k->last_moe = by_pattern && mg_moe_is_layer(m, m->num_layers - 1);
    k->moe = m->moe.num_experts > 0;
    /* the probe's sequence: the model's, or the longest multiple of what the plan cuts
     * a sequence into (2 cp chunks, each split over tp under sequence parallelism)
     * under MG_PLANNER_PROBE_SEQ */
    int s = m->seq_length, sp_len = s;
    if (s > MG_PLANNER_PROBE_SEQ) {
        long unit = 2L * p->cp * (p->sequence_parallel ? p->tp : 1);
        if (unit > MG_PLANNER_PROBE_SEQ)
            return mg_error_set(err, MG_ERR_UNSUPPORTED,
                                "context parallel %d x tensor parallel %d cut a sequence into more than %d pieces: too "
                                "many for the planner's probe",
                                p->cp, p->tp, MG_PLANNER_PROBE_SEQ);
        sp_len = (int)(MG_PLANNER_PROBE_SEQ / unit * unit);
    }
    double r_lin = (double)s / sp_len;
    /* attention's score pairs: the same window on every windowed layer; full layers
     * scale by s^2 (the few full layers of a windowed model are priced with the windowed
     * ratio's counterpart below) */
    double r_att = attention_pairs(s, 0) / attention_pairs(sp_len, 0);
    k->seq_scale = (double)sp_len / s;
    k->probe_seq = sp_len;
    k->probe_layers = period;
    mg_step_config sc;
    memset(&sc, 0, sizeof sc);
    sc.model = *m;
    sc.model.num_layers = period;
    if (by_pattern) {
        /* probe layers [0, wperiod) of the kind the model's last layer is not, [wperiod,
         * 2 wperiod) of its kind */
        memset(sc.model.moe.layer_pattern, 0, sizeof sc.model.moe.layer_pattern);
        sc.model.moe.pattern_len = period;
        for (int i = 0; i < period; i++)
            if ((i >= wperiod) == k->last_moe) sc.model.moe.layer_pattern[i / 64] |= (uint64_t)1 << (i % 64);
    }
    /* a shared expert the query gives apart from the model (mg_plan_query.moe_shared_ffn) */
    if (!sc.model.moe.shared_ffn && q->moe_shared_ffn > 0) sc.model.moe.shared_ffn = q->moe_shared_ffn;
    sc.model.seq_length = sp_len;
    double pos_scale = 1;
    if (sc.model.max_position < sp_len) sc.model.max_position = sp_len;
    if (sp_len < s && m->pos_emb == MG_POS_LEARNED) {
        sc.model.max_position = sp_len;
        pos_scale = (double)m->max_position / sp_len;
    }
    if (sc.model.window > 0 && sc.model.window >= sp_len && sp_len < s) sc.model.window = sp_len - 1;
    sc.micro_batch = q->micro_batch;
    sc.n_micro = 1;
    sc.training = true;
    sc.optim = mg_adamw_defaults();
    /* rank 0 of tp x cp x the data-parallel ranks expert parallelism needs */
    mg_plan plan = *p;
    plan.pp = 1;
    plan.vpp = 1;
    plan.pp_first_layers = plan.pp_last_layers = 0;
    plan.distributed_optimizer = false;
    plan.matmul_tiles = 1; /* one kernel per matmul, as a GPU runs it */
    plan.micro_batch_split = 1;
    int dp = p->ep / gcd(p->ep, p->cp);
    int world = p->tp * p->cp * dp;
    mg_error perr = {0};
    int rc = mg_plan_check(&plan, world, &perr);
    if (rc) return mg_error_set(err, rc, "the partitioner cannot build this plan's layers: %s", perr.msg);
    mg_plan_model pm = {.hidden = m->hidden,
                        .heads = m->heads,
                        .ffn_hidden = m->ffn_hidden,
                        .seq_length = sp_len,
                        .vocab = m->vocab,
                        .global_batch = q->micro_batch * dp,
                        .micro_batch = q->micro_batch,
                        .query_groups = mg_gpt_kv_groups(m),
                        .num_layers = period};
    rc = mg_plan_check_model(&plan, world, &pm, err);
    if (rc) return rc;
    mg_step st;
    rc = mg_step_build(&sc, &st, err);
    if (rc) {
        mg_step_release(&st);
        return rc;
    }
    mg_rank_graph R = {0};
    if (world == 1) {
        rc = mg_rank_graph_serial(st.g, &R, err);
    } else {
        mg_mesh mesh;
        rc = mg_mesh_init(&mesh, world, 0, plan.tp, plan.cp, plan.ep, 1, err);
        if (!rc) rc = mg_partition(st.g, &plan, &mesh, &R, err);
    }
    /* a windowed model's full-attention layers: the ratio of whole-sequence pairs; the
     * windowed ones: of window pairs (walk() scales every attention by r_att, so the
     * windowed kinds are corrected after it) */
    if (!rc) rc = walk(c, q, &plan, R.graph, r_lin, r_att, pos_scale, k, err);
    mg_rank_graph_release(&R);
    mg_step_release(&st);
    if (rc) return rc;
    if (m->window > 0 && sp_len < s) {
        double rw = attention_pairs(s, m->window) / attention_pairs(sp_len, sc.model.window);
        for (int i = 0; i < period; i++) {
            if (!mg_gpt_layer_window(m, i)) continue;
            for (int d = 0; d < 2; d++) {
                double a = k->kind[i].attn_s[d], a2 = a * rw / r_att;
                k->kind[i].attn_s[d] = a2;
                k->kind[i].compute_s[d] += a2 - a;
            }
        }
    }
    return MG_OK;
}

/* Expert parallelism == serial: a MoE model's training run under ep reproduces the
 * single-rank run (the harness of tests/partitioners/test_equivalence.c, for MoE).
 *
 * Run under mpirun: test_ep_equivalence TP EP [ITERS [ACT [CAPACITY [DISTOPT [SP]]]]]
 *   dp = world / tp; ACT swiglu (default), gelu or gelu_erf (the exact GELU); CAPACITY a capacity factor (default 0:
 *   dropless); DISTOPT 1: the distributed optimizer (dense parameters); SP 1: sequence
 *   parallelism. A LLaMA-style model (RMSNorm, RoPE) of 2 layers, both MoE with 4 experts,
 *   top-2, load-balancing and z losses on, dropout on, 2 micro-batches per rank.
 * Every iteration: lm loss, load-balancing loss and gradient norm within 1e-5 relative of
 * the serial run; at the end every parameter block within 1e-5 (2-norm, relative). The
 * plan must really split: each rank holds E/ep experts of every expert weight (all of
 * every other parameter, tp rules aside), runs grouped matmuls over E/ep experts, and
 * its non-ep collectives send what the graph counts; the all-to-all bytes are printed
 * against the graph's balanced-routing estimate.
 *
 * test_ep_equivalence bytes TP EP: one micro-batch per rank, one step, no buffer reuse;
 * the bytes the ep group sent must equal the analytic count from the routing this step
 * made: per MoE layer (ep - 1) E/ep x 4 for the counts, and for the rows: the forward
 * dispatch sends the rank's rows for other ranks' experts, the forward combine returns
 * the rows it received, and the backward repeats both (the reverse exchanges):
 * 2 x (rows out + rows in) x hidden x 4.
 */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mgraph/comm.h"
#include "mgraph/engine.h"
#include "mgraph/model.h"
#include "mgraph/plan.h"
#include "mgraph/trainer.h"

static int rank_, failures;

#define CHECK(cond, ...)                                                  \
    do {                                                                  \
        if (!(cond)) {                                                    \
            fprintf(stderr, "[rank %d] FAIL: ", rank_);                   \
            fprintf(stderr, __VA_ARGS__);                                 \
            fprintf(stderr, "\n");                                        \
            failures++;                                                   \
        }                                                                 \
    } while (0)

static void die(const char *what, const mg_error *e) {
    fprintf(stderr, "[rank %d] %s: %s\n", rank_, what, e->msg);
    MPI_Abort(MPI_COMM_WORLD, 1);
}

static int32_t token(int it, int k, int t, int j, int vocab) {
    uint64_t z = (uint64_t)it * 1000003u + (uint64_t)k * 7919u + (uint64_t)t * 131u + (uint64_t)j * 17u + 12345u;
    z ^= z >> 13;
    z *= 0x9E3779B97F4A7C15ull;
    return (int32_t)((z >> 32) % (uint64_t)vocab);
}

/* The trainer's feed: global micro-batch k of iteration it (Megatron's sampler order is
 * the trainer's), or with instance -1 the positions shared by every sample. */
typedef struct feed_ctx { int s, b, vocab; } feed_ctx;

static int feed(void *user, const mg_feed *f, mg_error *err) {
    (void)err;
    const feed_ctx *c = user;
    const mg_tensor *local;
    int32_t *p = mg_feed_data(f, "position_ids", &local);
    if (f->instance < 0) {
        for (int64_t t = 0; p && t < mg_numel(local); t++) p[t] = (int32_t)(local->logical.offset[0] + t);
        return MG_OK;
    }
    int32_t *x = mg_feed_data(f, "input_ids", NULL), *y = mg_feed_data(f, "labels", NULL);
    for (int t = 0; x && y && t < c->s; t++)
        for (int j = 0; j < c->b; j++) {
            x[t * c->b + j] = token((int)f->iteration, f->micro_batch, t, j, c->vocab);
            y[t * c->b + j] = token((int)f->iteration, f->micro_batch, t + 1, j, c->vocab);
        }
    return MG_OK;
}

/* A trainer for the MoE step of sc under plan (serial: this process alone, the reference
 * executor); reuse false keeps every tensor's value after the step. */
static mg_trainer *trainer(const mg_step_config *sc, const mg_plan *plan, bool serial, bool reuse, feed_ctx *fc) {
    mg_trainer_config c = mg_trainer_defaults();
    c.model = (mg_model){.name = "gpt", .forward = mg_gpt_forward_fn, .user = (void *)sc,
                         .num_layers = sc->model.num_layers, .whole_micro_batches = true};
    c.data = (mg_data_source){.user = fc, .feed = feed};
    if (serial) mg_plan_defaults(&c.plan);
    else c.plan = *plan;
    c.micro_batch = sc->micro_batch;
    c.global_batch = sc->micro_batch * sc->n_micro;
    c.optim = sc->optim;
    c.seed = 42;
    c.serial = serial;
    c.reference = serial;
    c.cpu_workers = 1;
    c.no_buffer_reuse = !reuse;
    c.check_nan = false;
    mg_trainer *t = NULL;
    mg_error err = {0};
    if (mg_trainer_new(&c, &t, &err) || mg_trainer_start(t, &err)) die(serial ? "serial build" : "build", &err);
    return t;
}

static double compare_block(const mg_tensor *pt, const float *pv, const mg_tensor *st, const float *sv) {
    double d2 = 0, s2 = 0;
    int64_t n = mg_numel(pt), idx[MG_MAX_DIMS];
    for (int64_t i = 0; i < n; i++) {
        int64_t r = i;
        for (int d = pt->ndim - 1; d >= 0; d--) {
            idx[d] = r % pt->shape[d];
            r /= pt->shape[d];
        }
        int64_t g = 0;
        for (int d = 0; d < st->ndim; d++) g = g * st->shape[d] + idx[d] + pt->logical.offset[d];
        double diff = (double)pv[i] - sv[g];
        d2 += diff * diff;
        s2 += (double)sv[g] * sv[g];
    }
    return sqrt(d2) / (1e-5 * sqrt(s2) + 1e-12);
}

static bool is_expert(const char *name) { return strstr(name, "mlp.experts.") != NULL; }

/* experts the rank's grouped matmuls run over (their weight's first dimension) */
static int64_t gmm_experts(const mg_graph *g, int64_t *n_gmm) {
    int64_t e = -1;
    *n_gmm = 0;
    for (int i = 0; i < mg_graph_n_nodes(g); i++) {
        const mg_node *n = mg_graph_node(g, i);
        if (n->op != MG_OP_MOE_GROUPED_MATMUL) continue;
        (*n_gmm)++;
        if (e < 0 || n->in[2]->shape[0] > e) e = n->in[2]->shape[0];
    }
    return e;
}

static int experts_ = 4;

static void model(mg_step_config *sc, int tp, int dp, const char *act, double capacity, int n_local) {
    memset(sc, 0, sizeof *sc);
    sc->model = mg_gpt_defaults();
    sc->model.num_layers = 2;
    sc->model.hidden = 32;
    sc->model.heads = 4;
    sc->model.ffn_hidden = 64;
    sc->model.seq_length = 8;
    sc->model.max_position = 8;
    sc->model.vocab = 128 * tp;
    sc->model.norm = MG_NORM_RMSNORM;
    sc->model.pos_emb = MG_POS_ROPE;
    sc->model.swiglu = strcmp(act, "gelu") != 0 && strcmp(act, "gelu_erf") != 0;
    sc->model.gelu_exact = strcmp(act, "gelu_erf") == 0;
    sc->model.untie_embeddings = true;
    sc->model.disable_bias_linear = true;
    sc->model.moe.num_experts = experts_;
    sc->model.moe.ffn_hidden = 24;
    sc->model.moe.topk = 2;
    sc->model.moe.aux_loss_coeff = 1e-2f;
    sc->model.moe.z_loss_coeff = 1e-3f;
    sc->model.moe.layer_freq = 1;
    sc->model.moe.capacity_factor = capacity;
    sc->micro_batch = 2;
    sc->n_micro = n_local * dp;
    sc->training = true;
    sc->optim = mg_adamw_defaults();
    sc->optim.lr = (mg_lr_schedule){.lr = 3e-3f, .min_lr = 3e-4f, .decay_steps = 10, .style = MG_LR_COSINE};
    sc->optim.eps = 1e-5f; /* see tests/partitioners/test_equivalence.c */
}

/* The exact bytes of one step against the routing it made (see the header). */
static void bytes_mode(int tp, int ep) {
    int world;
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    mg_error err = {0};
    mg_mesh mesh;
    if (mg_mesh_init(&mesh, world, rank_, tp, 1, ep, 1, &err)) die("mesh", &err);
    int dp = mesh.size[MG_GROUP_DP];
    mg_plan plan;
    mg_plan_defaults(&plan);
    plan.tp = tp;
    plan.ep = ep;
    if (mg_plan_check(&plan, world, &err)) die("plan", &err);
    mg_step_config sc;
    model(&sc, tp, dp, "swiglu", 0, 1);
    feed_ctx fc = {sc.model.seq_length, sc.micro_batch, 100};
    mg_trainer *T = trainer(&sc, &plan, false, false, &fc);
    const mg_rank_graph *R = mg_trainer_rank_graph(T, false);
    mg_storage *ps = mg_trainer_storage(T, false);
    mg_comm *comm = mg_trainer_comm(T);
    mg_comm_reset_bytes(comm);
    mg_step_result r;
    if (mg_trainer_step(T, &r, &err)) die("run", &err);
    double sent[MG_GROUP_COUNT], est[MG_GROUP_COUNT];
    mg_comm_bytes(comm, sent);
    mg_plan_comm_bytes(R->graph, 1, est);
    /* the analytic count from this step's routing: every counts exchange node's input
     * (the rank's rows per expert) and output (the rows it receives per local expert) */
    int me = mesh.coord[MG_GROUP_EP], layers = 0;
    int64_t h = sc.model.hidden, El = experts_ / ep;
    double want = 0, rows_out = 0, rows_in = 0;
    for (int i = 0; i < mg_graph_n_nodes(R->graph); i++) {
        const mg_node *n = mg_graph_node(R->graph, i);
        if (n->op != MG_OP_ALLTOALL_COUNTS) continue;
        layers++;
        const int32_t *cnt = mg_storage_data(ps, n->in[0]), *spl = mg_storage_data(ps, n->out[0]);
        double out = 0, in = 0;
        for (int e = 0; e < experts_; e++)
            if (e / El != me) out += cnt[e];
        for (int j = 0; j < ep; j++)
            for (int e = 0; e < El && j != me; e++) in += spl[j * El + e];
        rows_out += out, rows_in += in;
        want += (double)(ep - 1) * El * 4 + 2.0 * (out + in) * h * 4;
    }
    /* plus the gradient norm's sums of squares of expert blocks, all-reduced over ep */
    double norm_bytes = 0;
    for (int i = 0; i < mg_graph_n_nodes(R->graph); i++) {
        const mg_node *n = mg_graph_node(R->graph, i);
        if (n->op != MG_OP_ALLREDUCE || n->attrs.comm.group != MG_GROUP_EP) continue;
        norm_bytes += 2.0 * (ep - 1) / ep * (double)mg_numel(n->in[0]) * 4; /* ring all-reduce */
    }
    CHECK(norm_bytes > 0 && norm_bytes <= 64, "the gradient norm's ep all-reduces: %.0f bytes", norm_bytes);
    want += norm_bytes;
    CHECK(layers == sc.model.num_layers, "%d counts exchanges, want one per MoE layer (%d)", layers, sc.model.num_layers);
    CHECK(sent[MG_GROUP_EP] == want, "ep bytes sent %.0f, analytic count from the routing %.0f", sent[MG_GROUP_EP], want);
    for (int g = 0; g < MG_GROUP_WORLD; g++)
        if (g != MG_GROUP_EP)
            CHECK(sent[g] == est[g], "group %s: sent %.0f, graph counts %.0f", mg_group_name((mg_group)g), sent[g], est[g]);
    double all[4] = {sent[MG_GROUP_EP], want, est[MG_GROUP_EP], rows_out}, tot[4];
    MPI_Allreduce(all, tot, 4, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    if (rank_ == 0)
        printf("bytes tp=%d ep=%d dp=%d: all-to-all bytes per step over all ranks %.0f (analytic from the routing %.0f; "
               "balanced-routing estimate %.0f); %d MoE layers, %.0f rows sent off-rank per dispatch (all ranks)\n",
               tp, ep, dp, tot[0], tot[1], tot[2], layers, tot[3]);
    mg_trainer_free(T);
}

int main(int argc, char **argv) {
    int provided;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
    int world;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    alarm(300); /* never hang a test run */
    if (argc >= 4 && !strcmp(argv[1], "bytes")) {
        bytes_mode(atoi(argv[2]), atoi(argv[3]));
        int tf;
        MPI_Allreduce(&failures, &tf, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        MPI_Finalize();
        return tf ? 1 : 0;
    }
    if (argc < 3) {
        fprintf(stderr, "usage: test_ep_equivalence TP EP [ITERS [swiglu|gelu|gelu_erf [CAPACITY]]] | bytes TP EP\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    mg_plan plan;
    mg_plan_defaults(&plan);
    plan.tp = atoi(argv[1]);
    plan.ep = atoi(argv[2]);
    int iters = argc > 3 ? atoi(argv[3]) : 3;
    const char *act = argc > 4 ? argv[4] : "swiglu";
    double capacity = argc > 5 ? atof(argv[5]) : 0;
    plan.distributed_optimizer = argc > 6 && atoi(argv[6]);
    plan.sequence_parallel = argc > 7 && atoi(argv[7]);
    plan.bucket_numel = 20000; /* several buckets even on a tiny model */
    /* MG_TEST_ETP=1: expert tensor parallelism (--expert-tensor-parallel-size = tp): every
     * expert's rows (fc1) and columns (fc2) split over the tensor-parallel group too */
    if (getenv("MG_TEST_ETP") && !strcmp(getenv("MG_TEST_ETP"), "1")) plan.etp = plan.tp;
    /* MG_TEST_ETP_SIZE=N: --expert-tensor-parallel-size N (other than tp: the experts over
     * an expert tensor group of their own, whose ranks hold other tokens); MG_TEST_CP=N:
     * --context-parallel-size N (each cp rank dispatches its block of the sequence) */
    if (getenv("MG_TEST_ETP_SIZE")) plan.etp = atoi(getenv("MG_TEST_ETP_SIZE"));
    if (getenv("MG_TEST_CP")) plan.cp = atoi(getenv("MG_TEST_CP"));
    /* MG_TEST_FSDP=optim_grads_params | optim_grads: Megatron-FSDP (partitioners/fsdp.c),
     * the expert weights sharded over their own replicas, edp */
    if (getenv("MG_TEST_FSDP") && *getenv("MG_TEST_FSDP") && mg_plan_set_fsdp(&plan, getenv("MG_TEST_FSDP"))) {
        fprintf(stderr, "test_ep_equivalence: unknown MG_TEST_FSDP %s\n", getenv("MG_TEST_FSDP"));
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    bool etp_own = plan.etp > 1 && plan.etp != plan.tp;
    int etp = mg_plan_expert_tp(&plan) ? plan.tp : etp_own ? plan.etp : 1;
    mg_error err = {0};
    mg_mesh mesh;
    if (mg_plan_mesh(&plan, world, rank_, &mesh, &err)) die("mesh", &err);
    int dp = mesh.size[MG_GROUP_DP], ep = plan.ep;
    /* ZeRO-3 shards every expert weight over edp too (these sizes divide) */
    int edp_shard = plan.fsdp == MG_FSDP_OPTIM_GRADS_PARAMS ? mesh.size[MG_GROUP_EDP] : 1;
    mg_step_config sc;
    model(&sc, plan.tp, dp, act, capacity, 2);
    mg_plan_model pm = {sc.model.hidden, sc.model.heads, sc.model.ffn_hidden, sc.model.seq_length,
                        sc.model.vocab, sc.micro_batch * sc.n_micro, sc.micro_batch, mg_gpt_kv_groups(&sc.model), 0};
    if (mg_plan_check_model(&plan, world, &pm, &err)) die("plan", &err);

    /* serial reference */
    feed_ctx fc = {sc.model.seq_length, sc.micro_batch, 100};
    mg_trainer *ser = trainer(&sc, &plan, true, true, &fc);
    const mg_train_step *sst = mg_trainer_train_step(ser);
    CHECK(mg_train_step_metric(sst, "load_balancing_loss") != NULL, "the model has a load-balancing loss");
    double *sl = calloc((size_t)iters * 3, sizeof *sl);
    for (int it = 0; it < iters; it++) {
        mg_step_result r;
        if (mg_trainer_step(ser, &r, &err)) die("serial run", &err);
        sl[3 * it] = r.loss;
        sl[3 * it + 1] = r.grad_norm;
        sl[3 * it + 2] = r.metrics[0]; /* load_balancing_loss */
    }

    /* the plan */
    mg_trainer *par = trainer(&sc, &plan, false, true, &fc);
    const mg_graph *L = mg_trainer_train_step(par)->g, *SL = sst->g;
    const mg_rank_graph *R = mg_trainer_rank_graph(par, false);
    mg_comm *comm = mg_trainer_comm(par);
    int n_local = mg_trainer_local_micro(par, &mesh, sc.micro_batch * sc.n_micro);
    /* the plan split the experts */
    int n_expert_params = 0;
    for (int i = 0; i < mg_graph_n_tensors(L); i++) {
        const mg_tensor *s = mg_graph_tensor(L, i);
        if (s->role != MG_ROLE_PARAM || !is_expert(s->name)) continue;
        const mg_tensor *p = mg_rank_tensor(R, s);
        n_expert_params++;
        CHECK(p && p->shape[0] == s->shape[0] / ep && mg_numel(p) == mg_numel(s) / ep / etp / edp_shard,
              "expert parameter %s: %lld experts, %lld elements on this rank, want %lld / ep %d (and / etp %d, / edp %d)",
              s->name, p ? (long long)p->shape[0] : -1LL, p ? (long long)mg_numel(p) : -1LL, (long long)s->shape[0], ep,
              etp, edp_shard);
    }
    CHECK(n_expert_params == 2 * sc.model.num_layers, "%d expert parameters, want 2 per layer", n_expert_params);
    int64_t ng, ngs, eg = gmm_experts(R->graph, &ng), egs = gmm_experts(SL, &ngs);
    CHECK(ng == ngs && eg * ep == egs, "grouped matmuls over %lld experts (%lld of them), serial %lld (%lld)", (long long)eg,
          (long long)ng, (long long)egs, (long long)ngs);
    int n_rs = 0;
    for (int i = 0; i < mg_graph_n_nodes(R->graph); i++) {
        /* (fsdp's over dp, then cp: its shards are of dp x cp) */
        mg_group gq = mg_graph_node(R->graph, i)->attrs.comm.group;
        n_rs += mg_graph_node(R->graph, i)->op == MG_OP_REDUCE_SCATTER &&
                (gq == (plan.cp > 1 ? MG_GROUP_DP_CP : MG_GROUP_DP) ||
                 (plan.fsdp != MG_FSDP_NONE && (gq == MG_GROUP_DP || gq == MG_GROUP_CP)));
    }
    CHECK((n_rs > 0) == ((plan.distributed_optimizer || plan.fsdp != MG_FSDP_NONE) && dp * plan.cp > 1),
          "%d gradient reduce-scatters over dp (x cp) with distopt %d, fsdp %s", n_rs, plan.distributed_optimizer,
          mg_fsdp_name(plan.fsdp));
    if (plan.fsdp != MG_FSDP_NONE && mesh.size[MG_GROUP_EDP] > 1) { /* expert gradients reduce-scattered over edp */
        int n_ers = 0;
        for (int i = 0; i < mg_graph_n_nodes(R->graph); i++)
            n_ers += mg_graph_node(R->graph, i)->op == MG_OP_REDUCE_SCATTER &&
                     mg_graph_node(R->graph, i)->attrs.comm.group == MG_GROUP_EDP;
        CHECK(n_ers > 0, "fsdp: no expert gradient reduce-scattered over edp");
    }
    const mg_train_step *pst = mg_trainer_train_step(par);
    CHECK(mg_rank_tensor(R, pst->loss) && mg_rank_tensor(R, pst->opt.grad_norm) && mg_rank_tensor(R, pst->metrics[0]),
          "the rank graph binds lm loss, grad norm and load-balancing loss");
    mg_comm_reset_bytes(comm);
    double worst[3] = {0, 0, 0};
    const char *what[3] = {"lm loss", "grad norm", "load-balancing loss"};
    for (int it = 0; it < iters; it++) {
        mg_step_result r;
        if (mg_trainer_step(par, &r, &err)) die("parallel run", &err);
        double v[3] = {r.loss, r.grad_norm, r.metrics[0]};
        for (int k = 0; k < 3; k++) {
            double rel = fabs(v[k] - sl[3 * it + k]) / fabs(sl[3 * it + k]);
            if (rel > worst[k]) worst[k] = rel;
            CHECK(rel <= 1e-5, "iteration %d: %s %.9g, serial %.9g (relative error %.3g > 1e-5)", it + 1, what[k], v[k],
                  sl[3 * it + k], rel);
        }
    }
    double sent[MG_GROUP_COUNT], counted[MG_GROUP_COUNT];
    mg_comm_bytes(comm, sent);
    mg_plan_comm_bytes(R->graph, n_local, counted);
    for (int g = 0; g < MG_GROUP_WORLD; g++)
        if (g != MG_GROUP_EP)
            CHECK(sent[g] == iters * counted[g], "group %s: sent %.0f bytes in %d steps, the graph counts %.0f per step",
                  mg_group_name((mg_group)g), sent[g], iters, counted[g]);
    CHECK((sent[MG_GROUP_EP] > 0) == (ep > 1), "the ep group sent %.0f bytes with ep %d", sent[MG_GROUP_EP], ep);
    CHECK(etp == 1 || sent[ep > 1 || etp_own ? MG_GROUP_ETP : MG_GROUP_TP] > 0, "expert tensor parallelism %d sent nothing",
          etp);
    CHECK(plan.cp == 1 || sent[MG_GROUP_CP] > 0, "context parallelism %d sent nothing", plan.cp);
    /* (the two trainers build the same logical graph: a parameter has one id in both) */
    double worst_param = 0;
    for (int i = 0; i < mg_graph_n_tensors(SL); i++) {
        const mg_tensor *s = mg_graph_tensor(SL, i), *t = NULL;
        if (s->role != MG_ROLE_PARAM) continue;
        const float *pv = mg_trainer_data(par, mg_graph_tensor(L, i), &t);
        CHECK(t != NULL, "parameter %s is bound on this rank", s->name);
        if (!t) continue;
        double e = compare_block(t, pv, s, mg_trainer_data(ser, s, NULL));
        if (e > worst_param) worst_param = e;
        CHECK(e <= 1.0, "parameter %s differs from the serial run (%.3g x tolerance)", t->name, e);
    }
    double all[6] = {worst[0], worst[1], worst[2], worst_param, sent[MG_GROUP_EP] / iters, counted[MG_GROUP_EP]}, red[6];
    MPI_Allreduce(all, red, 4, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    MPI_Allreduce(all + 4, red + 4, 2, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    int total_fail;
    MPI_Allreduce(&failures, &total_fail, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank_ == 0)
        printf("moe %s plan tp=%d ep=%d etp=%d cp=%d dp=%d capacity=%g distopt=%d sp=%d fsdp=%s: %d iterations, worst relative error: lm loss %.3g, grad norm %.3g, "
               "load-balancing loss %.3g; worst parameter error %.3g of tolerance; all-to-all bytes per step (all ranks) "
               "%.0f measured, %.0f balanced-routing estimate: %s\n",
               act, plan.tp, ep, etp, plan.cp, dp, capacity, plan.distributed_optimizer, plan.sequence_parallel, mg_fsdp_name(plan.fsdp), iters, red[0], red[1], red[2], red[3], red[4], red[5],
               total_fail ? "FAILED" : "ok");
    mg_trainer_free(par);
    mg_trainer_free(ser);
    free(sl);
    MPI_Finalize();
    return total_fail ? 1 : 0;
}

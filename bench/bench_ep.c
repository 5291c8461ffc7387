/* Expert parallelism's step time and all-to-all traffic: one Mixtral-style MoE model run
 * as 1 rank x 2 workers (serial), 2 ranks x 1 worker with the experts replicated (dp2:
 * every rank holds all experts, their gradients all-reduced) and 2 ranks x 1 worker with
 * the experts split (ep2: tokens exchanged by all-to-all). Built, not run by ctest;
 * bench/run_ep.sh runs the three interleaved and prints one table (README, Expert
 * parallelism). Asserts nothing.
 *
 *   mpirun -np 1 bench_ep serial [reps] [steps]
 *   mpirun -np 2 bench_ep dp2|ep2 [reps] [steps]
 *
 * Model: 4 layers, hidden 256, 8 heads, seq 128, vocabulary 256 (byte level), RMSNorm,
 * RoPE, no biases, untied output layer; every layer MoE with 8 SwiGLU experts of ffn 512,
 * top-2, load-balancing loss 1e-2, dropless; micro-batch 4, global batch 8 (2 micro-
 * batches: serial runs both, dp2 and ep2 one per rank). Synthetic tokens, the same on
 * every configuration; AdamW.
 *
 * Per repetition (after BENCH_WARMUP=2 warm-up steps, an MPI_Barrier, `steps` steps), a
 * "REP" line:
 *   step_s   repetition wall time / steps, max over ranks;
 *   tok_s    global-batch tokens / step_s;
 *   a2a_B    bytes this rank sent into ep-group collectives per step (mg_comm_bytes: the
 *            all-to-alls' real rows, routing as it fell, + counts + the gradient norm's
 *            few ep bytes), mean over ranks;
 *   est_B    the graph's count for the same group under balanced routing
 *            (mg_plan_comm_bytes): per MoE layer and micro-batch 4 (EP-1)/EP T k rows of
 *            h floats (dispatch and combine, forward and backward) + the counts;
 *   other_B  bytes of every other collective per step (dp gradients, loss), mean;
 *   a2a_s    seconds inside the ep group's MPI calls per step (mg_comm_group_seconds:
 *            transfer + waiting for the peer), mean over ranks; share = a2a_s / step_s;
 *   comm_s   seconds inside all collective calls per step, mean over ranks.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mgraph/comm.h"
#include "mgraph/engine.h"
#include "mgraph/model.h"
#include "mgraph/plan.h"
#include "bench_util.h"

static int rank_, world_;

static void die(const char *what, const mg_error *e) {
    fprintf(stderr, "[rank %d] %s: %s\n", rank_, what, e->msg);
    MPI_Abort(MPI_COMM_WORLD, 1);
}

typedef struct config {
    const char *name;
    int ranks, ep, workers;
} config;

static const config CONFIGS[] = {{"serial", 1, 1, 2}, {"dp2", 2, 1, 1}, {"ep2", 2, 2, 1}};

static mg_step_config bench_model(void) {
    mg_step_config sc = {0};
    sc.model = mg_gpt_defaults();
    sc.model.num_layers = 4;
    sc.model.hidden = 256;
    sc.model.heads = 8;
    sc.model.ffn_hidden = 512;
    sc.model.seq_length = 128;
    sc.model.max_position = 128;
    sc.model.vocab = 256;
    sc.model.norm = MG_NORM_RMSNORM;
    sc.model.pos_emb = MG_POS_ROPE;
    sc.model.swiglu = true;
    sc.model.untie_embeddings = true;
    sc.model.disable_bias_linear = true;
    sc.model.moe.num_experts = 8;
    sc.model.moe.ffn_hidden = 512;
    sc.model.moe.topk = 2;
    sc.model.moe.aux_loss_coeff = 1e-2f;
    sc.model.moe.layer_freq = 1;
    sc.micro_batch = 4;
    sc.n_micro = 2;
    sc.training = true;
    sc.optim = mg_adamw_defaults();
    sc.optim.lr = (mg_lr_schedule){.lr = 1e-4f, .min_lr = 1e-5f, .decay_steps = 1000, .style = MG_LR_COSINE};
    return sc;
}

int main(int argc, char **argv) {
    int provided;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &world_);
    const config *cf = NULL;
    for (size_t i = 0; argc > 1 && i < sizeof CONFIGS / sizeof *CONFIGS; i++)
        if (!strcmp(argv[1], CONFIGS[i].name)) cf = &CONFIGS[i];
    int reps = argc > 2 ? atoi(argv[2]) : 3, steps = argc > 3 ? atoi(argv[3]) : 5;
    if (!cf || reps < 1 || steps < 1 || cf->ranks != world_) {
        if (!rank_)
            fprintf(stderr, "usage: mpirun -np 1 bench_ep serial [reps] [steps]\n"
                            "       mpirun -np 2 bench_ep dp2|ep2 [reps] [steps]\n");
        MPI_Finalize();
        return 2;
    }
    alarm(1200);

    mg_step_config sc = bench_model();
    mg_plan plan;
    mg_plan_defaults(&plan);
    plan.ep = cf->ep;
    mg_error err = {0};
    mg_mesh mesh;
    if (mg_mesh_init(&mesh, world_, rank_, 1, 1, plan.ep, 1, &err)) die("mesh", &err);
    if (mg_plan_check(&plan, world_, &err)) die("plan", &err);
    bench_data data;
    mg_trainer *T = bench_trainer(&sc, &plan, cf->workers, false, &data, &err);
    if (!T) die("trainer", &err);
    mg_graph *G = mg_trainer_rank_graph(T, false)->graph;
    mg_comm *comm = mg_trainer_comm(T);
    int dp = mesh.size[MG_GROUP_DP];
    double gb[MG_GROUP_COUNT];
    mg_plan_comm_bytes(G, sc.n_micro / dp, gb);
    if (!rank_) {
        const mg_gpt_config *c = &sc.model;
        printf("== %s: %d rank(s) x %d worker(s); ep %d, dp %d; load %.2f\n", cf->name, world_, cf->workers, plan.ep, dp,
               bench_load1());
        printf("  model: %d layers, hidden %d, heads %d, seq %d, %d experts (ffn %d) top-%d, micro-batch %d x %d; %lld "
               "params; rank graph %d nodes\n",
               c->num_layers, c->hidden, c->heads, c->seq_length, c->moe.num_experts, c->moe.ffn_hidden, c->moe.topk,
               sc.micro_batch, sc.n_micro, (long long)mg_gpt_num_params(c), mg_graph_n_nodes(G));
        fflush(stdout);
    }

    int64_t it = 0;
    int warmup = getenv("BENCH_WARMUP") ? atoi(getenv("BENCH_WARMUP")) : 2;
    mg_step_result res;
    for (int w = 0; w < warmup; w++, it++)
        if (mg_trainer_step(T, &res, &err)) die("warm-up step", &err);
    for (int r = 0; r < reps; r++) {
        MPI_Barrier(MPI_COMM_WORLD);
        mg_comm_reset_bytes(comm);
        double t0 = MPI_Wtime();
        for (int k = 0; k < steps; k++, it++)
            if (mg_trainer_step(T, &res, &err)) die("step", &err);
        double rep_s = (MPI_Wtime() - t0) / steps;
        double mb[MG_GROUP_COUNT];
        mg_comm_bytes(comm, mb);
        double v[6] = {rep_s, mb[MG_GROUP_EP] / steps, gb[MG_GROUP_EP], (mb[MG_GROUP_WORLD] - mb[MG_GROUP_EP]) / steps,
                       mg_comm_group_seconds(comm, MG_GROUP_EP) / steps, mg_comm_seconds(comm) / steps};
        double mx[6], sm[6];
        MPI_Allreduce(v, mx, 6, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        MPI_Allreduce(v, sm, 6, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        if (!rank_) {
            printf("REP config=%s rep=%d ranks=%d workers=%d step_s=%.4f tok_s=%.1f a2a_B=%.0f est_B=%.0f other_B=%.0f "
                   "a2a_s=%.5f comm_s=%.5f load=%.2f\n",
                   cf->name, r, world_, cf->workers, mx[0],
                   (double)sc.micro_batch * sc.n_micro * sc.model.seq_length / mx[0], sm[1] / world_, sm[2] / world_,
                   sm[3] / world_, sm[4] / world_, sm[5] / world_, bench_load1());
            fflush(stdout);
        }
    }
    mg_trainer_free(T);
    bench_data_free(&data);
    MPI_Finalize();
    return 0;
}

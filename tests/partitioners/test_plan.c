/* Partition plans: defaults, plan files, and every rule a plan must satisfy. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "mgraph/mgraph.h"
#include "mgraph/plan.h"
#include "testkit.h"

static const char *write_plan(const char *text) {
    static char path[64];
    snprintf(path, sizeof path, "/tmp/mg_plan_%d.plan", (int)getpid());
    FILE *f = fopen(path, "w");
    fputs(text, f);
    fclose(f);
    return path;
}

static void defaults(void) {
    mg_plan p;
    mg_plan_defaults(&p);
    TK_CHECK(p.tp == 1 && p.pp == 1 && p.cp == 1 && p.ep == 1, "serial sizes");
    TK_CHECK(!p.sequence_parallel && !p.distributed_optimizer && p.matmul_tiles == 1, "features off");
    /* no name rules: tensor parallelism follows the layout roles the model declares */
    TK_CHECK(p.n_rules == 0, "%d default shard rules", p.n_rules);
    mg_error err = {0};
    TK_CHECK(mg_plan_check(&p, 1, &err) == MG_OK, "serial plan on one rank: %s", err.msg);
}

static void file_ok(void) {
    mg_plan p;
    mg_plan_defaults(&p);
    mg_error err = {0};
    const char *path = write_plan("# a plan\ntensor-model-parallel-size 4   # tp\n\nsequence-parallel true\n"
                                  "use-distributed-optimizer yes\nbucket-size 1000\nmatmul-tiles 2\n"
                                  "shard-clear\nshard h.*.mlp.c_fc.weight 0\n");
    TK_CHECK(mg_plan_read(&p, path, &err) == MG_OK, "read: %s", err.msg);
    TK_CHECK(p.tp == 4 && p.sequence_parallel && p.distributed_optimizer && p.bucket_numel == 1000 &&
                 p.matmul_tiles == 2,
             "settings read");
    TK_CHECK(p.n_rules == 1 && p.rules[0].dim == 0 && !strcmp(p.rules[0].pattern, "h.*.mlp.c_fc.weight"),
             "shard-clear then one rule");
    remove(path);
}

/* "shard PATTERN none" keeps what matches whole (overriding a declared layout role). */
static void file_none(void) {
    mg_plan p;
    mg_plan_defaults(&p);
    mg_error err = {0};
    const char *path = write_plan("tensor-model-parallel-size 2\nshard lm_head.weight none\nshard *.q_proj.weight 1\n");
    TK_CHECK(mg_plan_read(&p, path, &err) == MG_OK, "read: %s", err.msg);
    TK_CHECK(p.n_rules == 2 && p.rules[0].dim == -1 && p.rules[1].dim == 1, "rules read: %d", p.n_rules);
    char buf[4096] = "";
    FILE *f = fmemopen(buf, sizeof buf, "w");
    mg_plan_print(&p, f);
    fclose(f);
    TK_CHECK(strstr(buf, "shard lm_head.weight none\n") && strstr(buf, "shard *.q_proj.weight 1\n"), "printed: %s", buf);
    remove(path);
}

/* The mesh's settings: the rank order (Megatron's --use-tp-pp-dp-mapping, or any order)
 * and the expert tensor-parallel size; the mesh follows them (mg_plan_mesh). */
static void file_mesh(void) {
    mg_plan p;
    mg_plan_defaults(&p);
    mg_error err = {0};
    const char *path = write_plan("tensor-model-parallel-size 2\npipeline-model-parallel-size 2\n"
                                  "use-tp-pp-dp-mapping true\nexpert-tensor-parallel-size 2\n");
    TK_CHECK(mg_plan_read(&p, path, &err) == MG_OK, "read: %s", err.msg);
    TK_CHECK(!strcmp(p.order, "tp-pp-dp") && p.etp == 2, "order '%s', etp %d", p.order, p.etp);
    TK_CHECK(mg_plan_check(&p, 8, &err) == MG_OK, "check: %s", err.msg);
    mg_mesh m;
    TK_CHECK(mg_plan_mesh(&p, 8, 1, &m, &err) == MG_OK && mg_mesh_peer(&m, MG_GROUP_DP, 1) == 5 &&
                 mg_mesh_peer(&m, MG_GROUP_PP, 1) == 3,
             "tp-pp-dp: rank 1's dp peer %d (want 5), pp peer %d (want 3)", mg_mesh_peer(&m, MG_GROUP_DP, 1),
             mg_mesh_peer(&m, MG_GROUP_PP, 1));
    char buf[4096] = "";
    FILE *f = fmemopen(buf, sizeof buf, "w");
    mg_plan_print(&p, f);
    fclose(f);
    TK_CHECK(strstr(buf, "order tp-pp-dp\n") && strstr(buf, "expert-tensor-parallel-size 2\n"), "printed: %s", buf);
    remove(path);
    path = write_plan("order tp-dp-cp-pp\n");
    TK_CHECK(mg_plan_read(&p, path, &err) == MG_OK && !strcmp(p.order, "tp-dp-cp-pp"), "order read: %s", err.msg);
    remove(path);
}

static void expect_file_error(const char *text, const char *needle) {
    mg_plan p;
    mg_plan_defaults(&p);
    mg_error err = {0};
    const char *path = write_plan(text);
    int rc = mg_plan_read(&p, path, &err);
    TK_CHECK(rc == MG_ERR_INVALID, "'%s' must be rejected (rc %d)", text, rc);
    TK_CHECK(strstr(err.msg, needle) != NULL, "message '%s' lacks '%s'", err.msg, needle);
    remove(path);
}

static void file_errors(void) {
    expect_file_error("tensor-model-parallel-size two\n", ":1: tensor-model-parallel-size expects");
    expect_file_error("\n\nsequence-paralel true\n", ":3: unknown setting 'sequence-paralel'");
    expect_file_error("sequence-parallel maybe\n", "expects true or false");
    expect_file_error("shard wte.weight\n", "shard expects a name pattern and a dimension");
    expect_file_error("order tp-xx-dp\n", "unknown axis 'xx'");
    expect_file_error("use-tp-pp-dp-mapping maybe\n", "expects true or false");
    expect_file_error("expert-tensor-parallel-size 0\n", "expects one positive integer");
    expect_file_error("matmul-tiles 0\n", "matmul-tiles expects");
    expect_file_error("tensor-model-parallel-size 2 3\n", "expects one positive integer");
    mg_plan p;
    mg_error err = {0};
    TK_CHECK(mg_plan_read(&p, "/nonexistent/x.plan", &err) == MG_ERR_IO, "missing file is an I/O error");
}

static void expect_rule(mg_plan *p, int world, const mg_plan_model *m, int code, const char *needle) {
    mg_error err = {0};
    int rc = m ? mg_plan_check_model(p, world, m, &err) : mg_plan_check(p, world, &err);
    TK_CHECK(rc == code, "rc %d, want %d (%s)", rc, code, err.msg);
    TK_CHECK(!needle || strstr(err.msg, needle), "message '%s' lacks '%s'", err.msg, needle);
}

static void rules(void) {
    mg_plan p;
    mg_plan_model m = {.hidden = 64, .heads = 4, .ffn_hidden = 256, .seq_length = 32, .vocab = 256,
                       .global_batch = 8, .micro_batch = 2};
    mg_plan_defaults(&p);
    p.tp = 2;
    expect_rule(&p, 3, NULL, MG_ERR_INVALID, "world size 3 is not a multiple");
    expect_rule(&p, 4, &m, MG_OK, NULL);
    m.heads = 3;
    expect_rule(&p, 2, &m, MG_ERR_INVALID, "--num-attention-heads 3 is not divisible by tensor-parallel size 2");
    m.heads = 4;
    m.ffn_hidden = 255;
    expect_rule(&p, 2, &m, MG_ERR_INVALID, "--ffn-hidden-size 255");
    m.ffn_hidden = 256;
    m.global_batch = 6;
    expect_rule(&p, 4, &m, MG_ERR_INVALID, "--global-batch-size 6 is not a multiple");
    m.global_batch = 8;
    p.sequence_parallel = true;
    m.seq_length = 31;
    expect_rule(&p, 2, &m, MG_ERR_INVALID, "--seq-length 31 is not divisible");
    m.seq_length = 32;
    p.tp = 1;
    expect_rule(&p, 2, NULL, MG_ERR_INVALID, "--sequence-parallel needs");
    p.sequence_parallel = false;
    p.vpp = 2;
    expect_rule(&p, 2, NULL, MG_ERR_INVALID, "needs --pipeline-model-parallel-size > 1");
    p.pp = 2;
    p.pp_first_layers = 1;
    expect_rule(&p, 2, NULL, MG_ERR_INVALID, "cannot be combined with virtual pipeline stages");
    p.pp_first_layers = 0;
    m.num_layers = 6; /* pp 2 x 2 chunks: 4 ranges */
    expect_rule(&p, 2, &m, MG_ERR_INVALID, "--num-layers 6 is not divisible by pipeline stages x virtual stages");
    m.num_layers = 8;
    m.global_batch = 6; /* 3 micro-batches of 2 */
    m.micro_batch = 2;
    expect_rule(&p, 2, &m, MG_ERR_INVALID, "interleaved pipeline schedule needs the micro-batches per data-parallel rank (3");
    m.global_batch = 8;
    p.pp_schedule = MG_PP_SCHEDULE_1F1B;
    expect_rule(&p, 2, NULL, MG_ERR_INVALID, "1F1B pipeline schedule runs one model chunk per stage");
    p.pp_schedule = MG_PP_SCHEDULE_AUTO;
    p.vpp = 1;
    p.pp_last_layers = 7; /* 8 layers: 1 on the first stage, 7 on the last */
    expect_rule(&p, 2, &m, MG_OK, NULL);
    p.pp_last_layers = 9;
    expect_rule(&p, 2, &m, MG_ERR_INVALID, "does not split as 0 on the first pipeline stage, 9 on the last");
    p.pp_last_layers = 0;
    p.cp = 2; /* pipeline x context parallelism: world a multiple of pp x cp */
    expect_rule(&p, 4, &m, MG_OK, NULL);
    expect_rule(&p, 6, NULL, MG_ERR_INVALID, "--context-parallel-size 2");
    p.pp = 1;
    /* context parallelism: 2·cp chunks per sequence; with SP, tp splits each rank's tokens */
    p.cp = 2;
    expect_rule(&p, 2, &m, MG_OK, NULL);
    expect_rule(&p, 3, NULL, MG_ERR_INVALID, "--context-parallel-size 2");
    m.seq_length = 30;
    expect_rule(&p, 2, &m, MG_ERR_INVALID, "--seq-length 30 is not divisible by 2 x context-parallel size (2 x 2)");
    m.seq_length = 36;
    p.tp = 4;
    p.sequence_parallel = true;
    expect_rule(&p, 8, &m, MG_ERR_INVALID, "18 tokens per rank is not divisible by tensor-parallel size 4");
    m.seq_length = 32;
    expect_rule(&p, 8, &m, MG_OK, NULL);
    p.distributed_optimizer = true;
    expect_rule(&p, 8, &m, MG_OK, NULL); /* sharded over dp x cp (dist_opt.c) */
    p.distributed_optimizer = false;
    p.tp = 1;
    p.sequence_parallel = false;
    p.cp = 1;
    p.ep = 2;
    expect_rule(&p, 3, NULL, MG_ERR_INVALID, "--expert-model-parallel-size 2 does not divide the data-parallel");
    TK_CHECK(mg_plan_check(&p, 4, NULL) == MG_OK, "ep 2 on 4 ranks is a plan");
}

/* An op without a sharding rule fails partitioning with a message naming it (here an
 * op the partitioner only ever emits itself, placed in a logical graph). */
static void no_rule(void) {
    mg_graph *g = mg_graph_new();
    mg_tensor *x = mg_param(g, "x", 2, (int64_t[]){4, 8}, (mg_init){MG_INIT_ONES, 0});
    mg_node *n = mg_node_new(g, MG_OP_XENT_VP_MAX, NULL, 1, &x, "row_max");
    n->out[0]->persistent = true;
    mg_plan p;
    mg_plan_defaults(&p);
    p.tp = 2;
    mg_mesh mesh;
    mg_error err = {0};
    TK_CHECK(n && mg_mesh_init(&mesh, 2, 0, 2, 1, 1, 1, &err) == MG_OK, "setup: %s", err.msg);
    mg_rank_graph R;
    int rc = mg_partition(g, &p, &mesh, &R, &err);
    TK_CHECK(rc == MG_ERR_UNSUPPORTED && R.graph == NULL && R.local == NULL,
             "partitioning an op without a rule must fail (rc %d)", rc);
    TK_CHECK(strstr(err.msg, "xent_vp_max") && strstr(err.msg, "no sharding rule"), "message: %s",
             err.msg);
    mg_rank_graph_release(&R);
    mg_graph_free(g);
}

/* The README's API example: a graph with no per-micro-batch part and its own names. */
static mg_graph *readme_graph(void) {
    mg_graph *g = mg_graph_new();
    mg_tensor *x = mg_input(g, "x", MG_F32, 2, (int64_t[]){32, 64});
    mg_tensor *y = mg_input(g, "y", MG_F32, 2, (int64_t[]){32, 10});
    mg_scope_push(g, "mlp");
    mg_tensor *w1 = mg_param(g, "fc1.weight", 2, (int64_t[]){128, 64}, (mg_init){MG_INIT_NORMAL, 0.02f});
    mg_tensor *w2 = mg_param(g, "fc2.weight", 2, (int64_t[]){10, 128}, (mg_init){MG_INIT_NORMAL, 0.02f});
    mg_tensor *h = mg_gelu(g, mg_linear(g, x, w1, NULL));
    mg_tensor *d = mg_sub(g, mg_linear(g, h, w2, NULL), y);
    mg_scope_pop(g);
    mg_tensor *loss = mg_mean(g, mg_mul(g, d, d), MG_ALL_AXES, false);
    mg_adamw_config opt = mg_adamw_defaults();
    mg_error err = {0};
    TK_CHECK(!mg_graph_error(g)->code && !mg_graph_backward(g, loss, &err) && !mg_graph_add_adamw(g, &opt, NULL, &err),
             "the README graph: %s%s", mg_graph_error(g)->msg, err.msg);
    return g;
}

/* mg_partition(g, plan, tp x dp mesh of `world`) must fail with MG_ERR_INVALID and
 * a message holding both needles (needle NULL: must succeed). */
static void expect_partition(mg_graph *g, const mg_plan *p, int world, const char *needle, const char *needle2) {
    mg_mesh mesh;
    mg_error err = {0};
    TK_CHECK(mg_mesh_init(&mesh, world, 0, p->tp, 1, 1, 1, &err) == MG_OK, "mesh: %s", err.msg);
    mg_rank_graph R;
    int rc = mg_partition(g, p, &mesh, &R, &err);
    if (!needle) {
        TK_CHECK(rc == MG_OK && R.graph, "tp %d on %d ranks must partition: %s", p->tp, world, err.msg);
    } else {
        TK_CHECK(rc == MG_ERR_INVALID && !R.graph && !R.local, "tp %d on %d ranks: rc %d, want MG_ERR_INVALID (%s)",
                 p->tp, world, rc, needle);
        TK_CHECK(strstr(err.msg, needle) && (!needle2 || strstr(err.msg, needle2)), "message lacks '%s' / '%s': %s",
                 needle, needle2 ? needle2 : "", err.msg);
    }
    mg_rank_graph_release(&R);
}

/* What the partitioner would take silently is the library's error (issue 34 item 3),
 * whoever calls mg_partition: a data-parallel plan on a graph with no per-micro-batch
 * part (every rank would compute the whole batch, no gradient all-reduce), a shard rule
 * naming no parameter, a dimension its parameter lacks, one tp does not divide. */
static void graph_checks(void) {
    mg_graph *g = readme_graph();
    mg_plan p;
    mg_plan_defaults(&p);
    expect_partition(g, &p, 2, "no per-micro-batch part", "dp 2");
    mg_error err = {0};
    p.tp = 2;
    TK_CHECK(mg_plan_add_rule(&p, "mlp.fc1.weigth", 0, &err) == MG_OK, "%s", err.msg); /* (misspelt) */
    expect_partition(g, &p, 2, "shard rule 'mlp.fc1.weigth 0' matches no parameter", "mlp.fc1.weight");
    p.n_rules = 0;
    TK_CHECK(mg_plan_add_rule(&p, "mlp.fc1.weight", 2, &err) == MG_OK, "%s", err.msg);
    expect_partition(g, &p, 2, "shard rule 'mlp.fc1.weight 2' applies to mlp.fc1.weight, which has 2 dimensions", NULL);
    p.n_rules = 0;
    p.tp = 4; /* fc2.weight's 10 rows over 4 */
    TK_CHECK(mg_plan_add_rule(&p, "mlp.fc2.weight", 0, &err) == MG_OK, "%s", err.msg);
    expect_partition(g, &p, 4, "shard rule 'mlp.fc2.weight 0'", "not divisible by the tensor-parallel size 4");
    /* control: the rules Megatron's column / row split would give, under tp 2 */
    p.n_rules = 0;
    p.tp = 2;
    TK_CHECK(mg_plan_add_rule(&p, "mlp.fc1.weight", 0, &err) == MG_OK && mg_plan_add_rule(&p, "mlp.fc2.weight", 1, &err) == MG_OK,
             "%s", err.msg);
    expect_partition(g, &p, 2, NULL, NULL);
    mg_graph_free(g);
}

/* A step of two marked layers: x [b, 8] -> layer 0 -> layer 1 -> mean square. */
static int two_layers(mg_graph *g, void *user, mg_microbatch *mb, mg_error *err) {
    (void)user, (void)err;
    mg_tensor *x = mg_step_input(g, "x", MG_F32, 2, (int64_t[]){mb->batch, 8});
    for (int l = 0; l < 2; l++) {
        mg_graph_set_layer(g, l);
        mg_scope_push(g, "layer.%d", l);
        x = mg_gelu(g, mg_linear(g, x, mg_param(g, "weight", 2, (int64_t[]){8, 8}, (mg_init){MG_INIT_NORMAL, 0.1f}), NULL));
        mg_scope_pop(g);
    }
    mg_graph_set_layer(g, MG_LAYER_POST);
    mb->loss = mg_mean(g, mg_mul(g, x, x), MG_ALL_AXES, false);
    return MG_OK;
}

/* Pipeline stages the model's layers do not split into are the plan check's error (every
 * rank finds it before partitioning, naming the count), not the partitioner's. */
static void graph_check_layers(void) {
    mg_step_options o = {.micro_batch = 2, .n_micro = 2, .training = true, .optim = mg_adamw_defaults()};
    mg_train_step st;
    mg_error err = {0};
    TK_CHECK(mg_train_step_build(&o, two_layers, NULL, &st, &err) == MG_OK, "step: %s", err.msg);
    mg_plan p;
    mg_plan_defaults(&p);
    p.pp = 3;
    int rc = mg_plan_check_graph(&p, 3, st.g, &err);
    TK_CHECK(rc == MG_ERR_INVALID && strstr(err.msg, "2 layers do not divide into 3 stages"), "pp 3: rc %d: %s", rc,
             err.msg);
    p.pp = 2;
    err = (mg_error){0};
    TK_CHECK(mg_plan_check_graph(&p, 2, st.g, &err) == MG_OK, "pp 2 over 2 layers: %s", err.msg);
    mg_train_step_release(&st);
}

int main(int argc, char **argv) {
    static const tk_case cases[] = {{"defaults", defaults}, {"file_ok", file_ok}, {"file_errors", file_errors},
                                    {"rules", rules}, {"file_none", file_none}, {"file_mesh", file_mesh},       {"no_rule", no_rule},
                                    {"graph_checks", graph_checks}, {"graph_check_layers", graph_check_layers}};
    return tk_main(argc, argv, cases, (int)(sizeof cases / sizeof *cases));
}

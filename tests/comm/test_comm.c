/* Mesh layout and collective ops on one process (no MPI): Megatron's rank order,
 * group membership, the layout rules' errors, collective shape rules, builders,
 * costs, and the single-rank kernels (copies). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mgraph/comm.h"
#include "ops/op.h"
#include "testkit.h"

static void expect_group(const char *what, int world, int tp, int cp, int ep, int pp, mg_group grp,
                         int n_groups, int size, const int *groups /* [n_groups][size] */) {
    for (int gi = 0; gi < n_groups; gi++) {
        const int *members = groups + gi * size;
        for (int k = 0; k < size; k++) {
            mg_mesh m;
            mg_error err = {0};
            int rc = mg_mesh_init(&m, world, members[k], tp, cp, ep, pp, &err);
            TK_CHECK(rc == MG_OK, "%s: mesh_init rank %d: %s", what, members[k], err.msg);
            if (rc) continue;
            TK_CHECK(m.size[grp] == size, "%s: %s size %d, want %d", what, mg_group_name(grp), m.size[grp], size);
            TK_CHECK(m.coord[grp] == k, "%s: rank %d has %s coordinate %d, want %d", what, members[k],
                     mg_group_name(grp), m.coord[grp], k);
            for (int j = 0; j < size; j++)
                TK_CHECK(mg_mesh_peer(&m, grp, j) == members[j], "%s: rank %d %s peer %d is %d, want %d", what,
                         members[k], mg_group_name(grp), j, mg_mesh_peer(&m, grp, j), members[j]);
        }
    }
}

/* world 8, tp 2, pp 2 -> dp 2; the groups Megatron-Core builds for it. */
static void mesh_layout(void) {
    mg_mesh m;
    mg_error err = {0};
    TK_CHECK(mg_mesh_init(&m, 8, 5, 2, 1, 1, 2, &err) == MG_OK, "init: %s", err.msg);
    TK_CHECK(m.world == 8 && m.rank == 5, "world/rank");
    TK_CHECK(m.size[MG_GROUP_TP] == 2 && m.size[MG_GROUP_CP] == 1 && m.size[MG_GROUP_EP] == 1 &&
                 m.size[MG_GROUP_DP] == 2 && m.size[MG_GROUP_PP] == 2 && m.size[MG_GROUP_WORLD] == 8,
             "sizes tp %d cp %d ep %d dp %d pp %d world %d", m.size[0], m.size[1], m.size[2], m.size[3], m.size[4],
             m.size[MG_GROUP_WORLD]);
    /* rank 5 = tp 1 + 2 * (dp 0 + 2 * pp 1) */
    TK_CHECK(m.coord[MG_GROUP_TP] == 1 && m.coord[MG_GROUP_CP] == 0 && m.coord[MG_GROUP_EP] == 0 &&
                 m.coord[MG_GROUP_DP] == 0 && m.coord[MG_GROUP_PP] == 1 && m.coord[MG_GROUP_WORLD] == 5,
             "rank 5 coordinates tp %d cp %d ep %d dp %d pp %d", m.coord[0], m.coord[1], m.coord[2], m.coord[3],
             m.coord[4]);
    static const int tp[] = {0, 1, 2, 3, 4, 5, 6, 7};
    static const int dp[] = {0, 2, 1, 3, 4, 6, 5, 7};
    static const int pp[] = {0, 4, 1, 5, 2, 6, 3, 7};
    static const int ep[] = {0, 1, 2, 3, 4, 5, 6, 7};
    static const int world[] = {0, 1, 2, 3, 4, 5, 6, 7};
    expect_group("tp2 pp2", 8, 2, 1, 1, 2, MG_GROUP_TP, 4, 2, tp);
    expect_group("tp2 pp2", 8, 2, 1, 1, 2, MG_GROUP_DP, 4, 2, dp);
    expect_group("tp2 pp2", 8, 2, 1, 1, 2, MG_GROUP_PP, 4, 2, pp);
    expect_group("tp2 pp2", 8, 2, 1, 1, 2, MG_GROUP_EP, 8, 1, ep);
    expect_group("tp2 pp2", 8, 2, 1, 1, 2, MG_GROUP_CP, 8, 1, ep);
    expect_group("tp2 pp2", 8, 2, 1, 1, 2, MG_GROUP_WORLD, 1, 8, world);
    /* cp sits between tp and dp: world 16, tp 2, cp 2, pp 2 -> dp 2. */
    static const int cp16[] = {0, 2, 1, 3, 4, 6, 5, 7, 8, 10, 9, 11, 12, 14, 13, 15};
    static const int dp16[] = {0, 4, 1, 5, 2, 6, 3, 7, 8, 12, 9, 13, 10, 14, 11, 15};
    static const int pp16[] = {0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15};
    expect_group("tp2 cp2 pp2", 16, 2, 2, 1, 2, MG_GROUP_CP, 8, 2, cp16);
    expect_group("tp2 cp2 pp2", 16, 2, 2, 1, 2, MG_GROUP_DP, 8, 2, dp16);
    expect_group("tp2 cp2 pp2", 16, 2, 2, 1, 2, MG_GROUP_PP, 8, 2, pp16);
    /* dp x cp: the ranks that share tp and pp, cp innermost */
    static const int dpcp16[] = {0, 2, 4, 6, 1, 3, 5, 7, 8, 10, 12, 14, 9, 11, 13, 15};
    expect_group("tp2 cp2 pp2", 16, 2, 2, 1, 2, MG_GROUP_DP_CP, 4, 4, dpcp16);
    expect_group("tp2 pp2", 8, 2, 1, 1, 2, MG_GROUP_DP_CP, 4, 2, dp);
    /* Expert parallelism over dp: world 8, tp 2, ep 2 (dp 4), as Megatron's expert
     * rank generator (tp-ep-dp-pp with expert tp = tp) lays it out. */
    static const int ep8[] = {0, 2, 1, 3, 4, 6, 5, 7};
    static const int dp8[] = {0, 2, 4, 6, 1, 3, 5, 7};
    expect_group("tp2 ep2", 8, 2, 1, 2, 1, MG_GROUP_EP, 4, 2, ep8);
    expect_group("tp2 ep2", 8, 2, 1, 2, 1, MG_GROUP_DP, 2, 4, dp8);
    /* ep over dp x cp: world 8, cp 2, ep 4 (dp 4): ep groups are 4 consecutive (cp, dp) slots. */
    static const int ep_cp[] = {0, 1, 2, 3, 4, 5, 6, 7};
    expect_group("cp2 ep4", 8, 1, 2, 4, 1, MG_GROUP_EP, 2, 4, ep_cp);
    printf("ok mesh_layout\n");
}

/* Every member of every group agrees on the group, and its coordinate is its index. */
static void mesh_consistency(void) {
    static const int cfg[][5] = {{8, 2, 1, 1, 2}, {16, 2, 2, 1, 2}, {16, 1, 2, 4, 1}, {24, 2, 1, 3, 2},
                                 {12, 3, 1, 1, 1}, {1, 1, 1, 1, 1}, {32, 2, 2, 2, 2}};
    int checked = 0;
    for (size_t c = 0; c < sizeof cfg / sizeof cfg[0]; c++) {
        int world = cfg[c][0];
        for (int r = 0; r < world; r++) {
            mg_mesh m;
            mg_error err = {0};
            if (mg_mesh_init(&m, world, r, cfg[c][1], cfg[c][2], cfg[c][3], cfg[c][4], &err)) {
                TK_CHECK(0, "config %zu rank %d: %s", c, r, err.msg);
                continue;
            }
            TK_CHECK(m.size[MG_GROUP_TP] * m.size[MG_GROUP_CP] * m.size[MG_GROUP_DP] * m.size[MG_GROUP_PP] == world,
                     "config %zu: tp*cp*dp*pp != world", c);
            for (int g = 0; g < MG_GROUP_COUNT; g++) {
                if (m.coord[g] < 0) { /* not a member: the embedding group's middle stages */
                    TK_CHECK(g == MG_GROUP_EMB && m.coord[MG_GROUP_PP] > 0 &&
                                 m.coord[MG_GROUP_PP] < m.size[MG_GROUP_PP] - 1,
                             "config %zu rank %d: outside group %s", c, r, mg_group_name((mg_group)g));
                    continue;
                }
                TK_CHECK(mg_mesh_peer(&m, (mg_group)g, m.coord[g]) == r, "config %zu rank %d: %s peer of itself", c, r,
                         mg_group_name((mg_group)g));
                TK_CHECK(mg_mesh_peer(&m, (mg_group)g, -1) == -1 && mg_mesh_peer(&m, (mg_group)g, m.size[g]) == -1,
                         "out-of-range index gives -1");
                for (int k = 0; k < m.size[g]; k++) {
                    int p = mg_mesh_peer(&m, (mg_group)g, k);
                    mg_mesh q;
                    TK_CHECK(p >= 0 && p < world && !mg_mesh_init(&q, world, p, cfg[c][1], cfg[c][2], cfg[c][3],
                                                                  cfg[c][4], NULL),
                             "config %zu: bad peer %d", c, p);
                    if (p < 0 || p >= world) continue;
                    TK_CHECK(q.coord[g] == k, "config %zu: peer %d of rank %d in %s has index %d, want %d", c, p, r,
                             mg_group_name((mg_group)g), q.coord[g], k);
                    for (int j = 0; j < m.size[g]; j++)
                        TK_CHECK(mg_mesh_peer(&q, (mg_group)g, j) == mg_mesh_peer(&m, (mg_group)g, j),
                                 "config %zu: ranks %d and %d disagree on %s member %d", c, r, p,
                                 mg_group_name((mg_group)g), j);
                    /* Members differ from r only in g's coordinates (ep: in dp and cp; dp_cp: in both). */
                    for (int h = 0; h < MG_GROUP_WORLD; h++) {
                        if (h == g || g == MG_GROUP_WORLD) continue;
                        if (g == MG_GROUP_EMB && h == MG_GROUP_PP) continue; /* first and last stage */
                        if (g == MG_GROUP_EP && (h == MG_GROUP_DP || h == MG_GROUP_CP)) continue;
                        if (h == MG_GROUP_EP && (g == MG_GROUP_DP || g == MG_GROUP_CP)) continue;
                        /* dp x cp: its members differ in dp, cp (and so ep) and vice versa */
                        bool in_dpcp = h == MG_GROUP_DP || h == MG_GROUP_CP || h == MG_GROUP_EP;
                        if (g == MG_GROUP_DP_CP && in_dpcp) continue;
                        if (h == MG_GROUP_DP_CP && (g == MG_GROUP_DP || g == MG_GROUP_CP || g == MG_GROUP_EP)) continue;
                        /* edp (same experts): its members differ in dp, cp, dp_cp, but agree on ep */
                        if (g == MG_GROUP_EDP && (h == MG_GROUP_DP || h == MG_GROUP_CP || h == MG_GROUP_DP_CP)) continue;
                        if (h == MG_GROUP_EDP && (g == MG_GROUP_DP || g == MG_GROUP_CP || g == MG_GROUP_DP_CP)) continue;
                        /* etp (expert tensor parallelism, = tp here): its members differ in tp */
                        if ((g == MG_GROUP_ETP && h == MG_GROUP_TP) || (h == MG_GROUP_ETP && g == MG_GROUP_TP)) continue;
                        TK_CHECK(q.coord[h] == m.coord[h], "config %zu: %s peer %d of %d differs in %s", c,
                                 mg_group_name((mg_group)g), p, r, mg_group_name((mg_group)h));
                    }
                    checked++;
                }
            }
        }
    }
    printf("ok mesh_consistency: %d memberships\n", checked);
}

/* Members of rank r's group grp under spec s (world ranks). */
static void expect_spec_group(const char *what, int world, const mg_mesh_spec *s, int r, mg_group grp, int n,
                              const int *want) {
    mg_mesh m;
    mg_error err = {0};
    TK_CHECK(mg_mesh_init_spec(&m, world, r, s, &err) == MG_OK, "%s: %s", what, err.msg);
    TK_CHECK(m.size[grp] == n, "%s: rank %d's %s group has %d members, want %d", what, r, mg_group_name(grp),
             m.size[grp], n);
    for (int j = 0; j < n && m.size[grp] == n; j++)
        TK_CHECK(mg_mesh_peer(&m, grp, j) == want[j], "%s: rank %d's %s member %d is %d, want %d", what, r,
                 mg_group_name(grp), j, mg_mesh_peer(&m, grp, j), want[j]);
}

/* The mesh as data: Megatron's RankGenerator for other orders, and the expert generator
 * with its own tensor-parallel size (generate_masked_orthogonal_rank_groups' examples). */
static void mesh_order(void) {
    /* its docstring: order tp-dp-pp, tp 2, dp 3, pp 4: dp_group[0] = [0, 2, 4], dp_group[7] = [19, 21, 23] */
    mg_mesh_spec a = {.tp = 2, .cp = 1, .ep = 1, .pp = 4, .order = "tp-dp-pp"};
    expect_spec_group("tp-dp-pp", 24, &a, 0, MG_GROUP_DP, 3, (int[]){0, 2, 4});
    expect_spec_group("tp-dp-pp", 24, &a, 23, MG_GROUP_DP, 3, (int[]){19, 21, 23});
    expect_spec_group("tp-dp-pp", 24, &a, 23, MG_GROUP_PP, 4, (int[]){5, 11, 17, 23});
    /* order tp-pp-dp (Megatron's --use-tp-pp-dp-mapping), 8 ranks of tp 2, pp 2, dp 2:
     * dp groups [0, 4], [1, 5], [2, 6], [3, 7]; pp groups [0, 2], ... */
    mg_mesh_spec b = {.tp = 2, .cp = 1, .ep = 1, .pp = 2, .order = "tp-pp-dp"};
    for (int r = 0; r < 4; r++) expect_spec_group("tp-pp-dp", 8, &b, r, MG_GROUP_DP, 2, (int[]){r, r + 4});
    expect_spec_group("tp-pp-dp", 8, &b, 1, MG_GROUP_PP, 2, (int[]){1, 3});
    expect_spec_group("tp-pp-dp", 8, &b, 5, MG_GROUP_EMB, 2, (int[]){5, 7});
    /* experts with their own tensor parallelism: tp 2, etp 1, ep 2 on 8 ranks. The
     * expert generator lays out etp 1 x ep 2 x edp 4: an ep group is two consecutive
     * ranks (a dense tp group), an edp group every second rank */
    mg_mesh_spec c = {.tp = 2, .cp = 1, .ep = 2, .pp = 1, .etp = 1};
    expect_spec_group("tp2 etp1 ep2", 8, &c, 2, MG_GROUP_EP, 2, (int[]){2, 3});
    expect_spec_group("tp2 etp1 ep2", 8, &c, 3, MG_GROUP_EDP, 4, (int[]){1, 3, 5, 7});
    expect_spec_group("tp2 etp1 ep2", 8, &c, 3, MG_GROUP_ETP, 1, (int[]){3});
    expect_spec_group("tp2 etp1 ep2", 8, &c, 3, MG_GROUP_TP, 2, (int[]){2, 3});
    /* tp 1, etp 2, ep 2 on 4 ranks: etp pairs of consecutive ranks, ep across them */
    mg_mesh_spec d = {.tp = 1, .cp = 1, .ep = 2, .pp = 1, .etp = 2};
    expect_spec_group("tp1 etp2 ep2", 4, &d, 0, MG_GROUP_ETP, 2, (int[]){0, 1});
    expect_spec_group("tp1 etp2 ep2", 4, &d, 1, MG_GROUP_EP, 2, (int[]){1, 3});
    expect_spec_group("tp1 etp2 ep2", 4, &d, 1, MG_GROUP_DP, 4, (int[]){0, 1, 2, 3});
    /* etp = tp (the default): ep within a (tp, pp) slice's dp x cp ranks, etp the tp group */
    mg_mesh_spec e = {.tp = 2, .cp = 2, .ep = 2, .pp = 1};
    expect_spec_group("tp2 cp2 ep2", 8, &e, 5, MG_GROUP_EP, 2, (int[]){5, 7});
    expect_spec_group("tp2 cp2 ep2", 8, &e, 5, MG_GROUP_ETP, 2, (int[]){4, 5});
    expect_spec_group("tp2 cp2 ep2", 8, &e, 5, MG_GROUP_EDP, 2, (int[]){1, 5});
    /* strides: what the planner asks to place a group on the network */
    mg_mesh m;
    mg_error err = {0};
    TK_CHECK(mg_mesh_init_spec(&m, 16, 0, &(mg_mesh_spec){.tp = 2, .cp = 2, .ep = 2, .pp = 2}, &err) == MG_OK, "%s",
             err.msg);
    long want[][2] = {{MG_GROUP_TP, 1}, {MG_GROUP_CP, 2}, {MG_GROUP_DP, 4}, {MG_GROUP_DP_CP, 2}, {MG_GROUP_EP, 2},
                      {MG_GROUP_EDP, 4}, {MG_GROUP_PP, 8}, {MG_GROUP_EMB, 8}, {MG_GROUP_ETP, 1}};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        TK_CHECK(mg_mesh_stride(&m, (mg_group)want[i][0]) == want[i][1], "stride of %s: %ld, want %ld",
                 mg_group_name((mg_group)want[i][0]), mg_mesh_stride(&m, (mg_group)want[i][0]), want[i][1]);
    TK_CHECK(!strcmp(mg_mesh_order(&m), "tp-cp-ep-dp-pp"), "default order %s", mg_mesh_order(&m));
    /* malformed orders, an axis of size > 1 left out, pp groups the two generators disagree on */
    const struct { mg_mesh_spec s; int world; const char *needle; } bad[] = {
        {{.tp = 1, .cp = 1, .ep = 1, .pp = 1, .order = "tp-xp"}, 2, "unknown axis 'xp'"},
        {{.tp = 1, .cp = 1, .ep = 1, .pp = 1, .order = "tp-dp-tp"}, 2, "repeated axis 'tp'"},
        {{.tp = 1, .cp = 1, .ep = 1, .pp = 1, .order = "tp-"}, 2, "ends with '-'"},
        {{.tp = 1, .cp = 2, .ep = 1, .pp = 1, .order = "tp-pp-dp"}, 4, "does not name cp, whose size is 2"},
        {{.tp = 1, .cp = 1, .ep = 2, .pp = 2, .order = "tp-pp-cp-ep-dp"}, 4, "put pp last"},
        {{.tp = 1, .cp = 1, .ep = 4, .pp = 1, .etp = 4}, 8, "not a multiple of etp*ep*pp = 4*4*1"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        memset(&err, 0, sizeof err);
        int rc = mg_mesh_init_spec(&m, bad[i].world, 0, &bad[i].s, &err);
        TK_CHECK(rc == MG_ERR_INVALID && strstr(err.msg, bad[i].needle), "bad mesh %zu: rc %d, '%s' lacks '%s'", i, rc,
                 err.msg, bad[i].needle);
    }
    printf("ok mesh_order\n");
}

static void expect_error(const char *what, int rc, const mg_error *err, int code, const char *needle) {
    TK_CHECK(rc == code, "%s: status %d, want %d (%s)", what, rc, code, err->msg);
    TK_CHECK(err->code == code, "%s: recorded code %d", what, err->code);
    TK_CHECK(strstr(err->msg, needle) != NULL, "%s: message '%s' lacks '%s'", what, err->msg, needle);
}

static void mesh_errors(void) {
    mg_mesh m;
    mg_error err = {0};
    expect_error("world 6, tp 4", mg_mesh_init(&m, 6, 0, 4, 1, 1, 1, &err), &err, MG_ERR_INVALID,
                 "not a multiple of tp*cp*pp");
    mg_error_clear(&err);
    expect_error("world 8, tp 2 cp 2 pp 4", mg_mesh_init(&m, 8, 0, 2, 2, 1, 4, &err), &err, MG_ERR_INVALID,
                 "not a multiple of tp*cp*pp = 2*2*4 = 16");
    mg_error_clear(&err);
    expect_error("world 12, tp 2, pp 4", mg_mesh_init(&m, 12, 0, 2, 1, 1, 4, &err), &err, MG_ERR_INVALID,
                 "world size 12");
    mg_error_clear(&err);
    expect_error("ep 3 over dp 4", mg_mesh_init(&m, 8, 0, 2, 1, 3, 1, &err), &err, MG_ERR_INVALID,
                 "ep=3 does not divide dp*cp = 4*1 = 4");
    mg_error_clear(&err);
    expect_error("ep 4 over dp 1 cp 2", mg_mesh_init(&m, 4, 0, 2, 2, 4, 1, &err), &err, MG_ERR_INVALID,
                 "does not divide dp*cp");
    mg_error_clear(&err);
    expect_error("rank 8 of 8", mg_mesh_init(&m, 8, 8, 2, 1, 1, 1, &err), &err, MG_ERR_INVALID, "rank 8");
    mg_error_clear(&err);
    expect_error("tp 0", mg_mesh_init(&m, 8, 0, 0, 1, 1, 1, &err), &err, MG_ERR_INVALID, "at least 1");
    mg_error_clear(&err);
    expect_error("world 0", mg_mesh_init(&m, 0, 0, 1, 1, 1, 1, &err), &err, MG_ERR_INVALID, "world size 0");
    TK_CHECK(mg_mesh_init(&m, 8, 0, 2, 1, 2, 1, NULL) == MG_OK, "ep 2 over dp 4 is valid");
    TK_CHECK(mg_mesh_peer(NULL, MG_GROUP_TP, 0) == -1 && mg_mesh_peer(&m, MG_GROUP_NONE, 0) == -1,
             "peer of nothing is -1");
    printf("ok mesh_errors\n");
}

/* ---- collective ops on one process ---------------------------------------------- */
static mg_tensor *input(mg_graph *g, const char *name, int ndim, int64_t a, int64_t b, int64_t c) {
    int64_t s[3] = {a, b, c};
    return mg_input(g, name, MG_F32, ndim, s);
}

static void shapes(void) {
    mg_graph *g = mg_graph_new();
    mg_tensor *x = input(g, "x", 3, 2, 6, 4);
    mg_tensor *ar = mg_allreduce(g, x, MG_GROUP_TP, 2, MG_REDUCE_SUM, 0);
    mg_tensor *ag0 = mg_allgather(g, x, MG_GROUP_TP, 2, 0, 1);
    mg_tensor *ag1 = mg_allgather(g, x, MG_GROUP_DP, 4, 1, 2);
    mg_tensor *ag2 = mg_allgather(g, x, MG_GROUP_TP, 2, 2, 3);
    mg_tensor *rs0 = mg_reduce_scatter(g, x, MG_GROUP_TP, 2, 0, 4);
    mg_tensor *rs1 = mg_reduce_scatter(g, x, MG_GROUP_DP, 3, 1, 5);
    mg_tensor *rs2 = mg_reduce_scatter(g, x, MG_GROUP_TP, 4, 2, 6);
    mg_tensor *bc = mg_broadcast(g, x, MG_GROUP_PP, 4, 3, 7);
    mg_scope_push(g, "blk");
    mg_tensor *y = input(g, "y", 1, 8, 1, 1);
    mg_tensor *ary = mg_allreduce(g, y, MG_GROUP_TP, 2, MG_REDUCE_MAX, 8);
    mg_tensor *ary2 = mg_allreduce(g, y, MG_GROUP_TP, 2, MG_REDUCE_MAX, 9);
    mg_scope_pop(g);
    TK_CHECK(!mg_graph_error(g)->code, "build: %s", mg_graph_error(g)->msg);
    if (mg_graph_error(g)->code) {
        mg_graph_free(g);
        return;
    }
    char b[64];
#define SHAPE_IS(t, want) TK_CHECK(strcmp(mg_shape_str(t, b, sizeof b), want) == 0, "%s: %s, want %s", t->name, b, want)
    SHAPE_IS(ar, "[2, 6, 4]");
    SHAPE_IS(ag0, "[4, 6, 4]");
    SHAPE_IS(ag1, "[2, 24, 4]");
    SHAPE_IS(ag2, "[2, 6, 8]");
    SHAPE_IS(rs0, "[1, 6, 4]");
    SHAPE_IS(rs1, "[2, 2, 4]");
    SHAPE_IS(rs2, "[2, 6, 1]");
    SHAPE_IS(bc, "[2, 6, 4]");
#undef SHAPE_IS
    TK_CHECK(strcmp(ar->name, "x.allreduce") == 0, "name %s", ar->name);
    TK_CHECK(strcmp(rs1->name, "x.reduce_scatter_1") == 0, "name %s", rs1->name);
    TK_CHECK(strcmp(ary->name, "blk.y.allreduce") == 0, "name %s", ary->name);
    TK_CHECK(strcmp(ary2->name, "blk.y.allreduce_1") == 0, "name %s", ary2->name);
    const mg_attr_comm *a = &ag1->src->attrs.comm;
    TK_CHECK(a->group == MG_GROUP_DP && a->nranks == 4 && a->dim == 1 && a->seq == 2, "allgather attrs");
    TK_CHECK(bc->src->attrs.comm.peer == 3, "broadcast root");
    TK_CHECK(ar->src->phase == MG_PHASE_FORWARD, "phase stamped");
    for (mg_op op = MG_OP_ALLREDUCE; op <= MG_OP_RECV; op++) {
        const mg_op_def *d = mg_op_def_get(op);
        /* the all-to-all of expert parallelism has a gradient (the reverse exchange) */
        bool grad = op == MG_OP_ALLTOALL;
        TK_CHECK(d && (d->flags & MG_OPF_COMM) && !(d->flags & MG_OPF_NO_GRAD) == grad && d->infer && !d->grad == !grad,
                 "%s: comm, %s", mg_op_name(op), grad ? "gradient" : "no gradient");
    }
    /* Costs: 0 FLOPs; ring bytes. x is 48 floats = 192 bytes. */
    double fl, by;
    mg_op_cost(ar->src, &fl, &by);
    TK_CHECK(fl == 0 && fabs(by - 192.0) < 1e-9, "allreduce n=2 cost %g %g, want 0 192", fl, by);
    mg_op_cost(ag1->src, &fl, &by);
    TK_CHECK(fl == 0 && fabs(by - 3 * 192.0) < 1e-9, "allgather n=4 cost %g, want 576", by);
    mg_op_cost(rs1->src, &fl, &by);
    TK_CHECK(fabs(by - 128.0) < 1e-9, "reduce_scatter n=3 cost %g, want 128", by);
    mg_op_cost(bc->src, &fl, &by);
    TK_CHECK(fabs(by - 144.0) < 1e-9, "broadcast n=4 cost %g, want 144", by);
    mg_error err = {0};
    TK_CHECK(mg_graph_validate(g, &err) == MG_OK, "validate: %s", err.msg);
    mg_graph_free(g);
    printf("ok shapes\n");
}

typedef mg_tensor *(*bad_fn)(mg_graph *g, mg_tensor *x);
static mg_tensor *bad_rs(mg_graph *g, mg_tensor *x) { return mg_reduce_scatter(g, x, MG_GROUP_TP, 4, 1, 0); }
static mg_tensor *bad_ag_dim(mg_graph *g, mg_tensor *x) { return mg_allgather(g, x, MG_GROUP_TP, 2, 3, 0); }
static mg_tensor *bad_rs_dim(mg_graph *g, mg_tensor *x) { return mg_reduce_scatter(g, x, MG_GROUP_TP, 2, -1, 0); }
static mg_tensor *bad_root(mg_graph *g, mg_tensor *x) { return mg_broadcast(g, x, MG_GROUP_DP, 2, 2, 0); }
static mg_tensor *bad_group(mg_graph *g, mg_tensor *x) { return mg_allreduce(g, x, MG_GROUP_NONE, 2, MG_REDUCE_SUM, 0); }
static mg_tensor *bad_nranks(mg_graph *g, mg_tensor *x) { return mg_allreduce(g, x, MG_GROUP_TP, 0, MG_REDUCE_SUM, 0); }
static mg_tensor *bad_op(mg_graph *g, mg_tensor *x) { return mg_allreduce(g, x, MG_GROUP_TP, 2, (mg_reduce_op)7, 0); }
static mg_tensor *bad_alltoall(mg_graph *g, mg_tensor *x) {
    mg_attrs at = {.comm = {.group = MG_GROUP_EP, .nranks = 2}};
    mg_node *n = mg_node_new(g, MG_OP_ALLTOALL, &at, 1, &x, NULL);
    return n ? n->out[0] : NULL;
}
static mg_tensor *bad_send(mg_graph *g, mg_tensor *x) {
    mg_attrs at = {.comm = {.group = MG_GROUP_PP, .nranks = 2, .peer = 2}};
    mg_node *n = mg_node_new(g, MG_OP_SEND, &at, 1, &x, NULL);
    return n ? n->out[0] : NULL;
}
static mg_tensor *bad_recv(mg_graph *g, mg_tensor *x) {
    (void)x;
    mg_attrs at = {.comm = {.group = MG_GROUP_PP, .nranks = 2, .peer = 0, .dtype = MG_F32, .ndim = 0}};
    mg_node *n = mg_node_new(g, MG_OP_RECV, &at, 0, NULL, NULL);
    return n ? n->out[0] : NULL;
}
static mg_tensor *bad_null(mg_graph *g, mg_tensor *x) {
    (void)x;
    return mg_allreduce(g, NULL, MG_GROUP_TP, 2, MG_REDUCE_SUM, 0);
}

static void shape_errors(void) {
    static const struct {
        const char *what;
        bad_fn fn;
        int code;
        const char *needle;
    } cases[] = {
        {"reduce_scatter 6 over 4", bad_rs, MG_ERR_SHAPE, "reduce_scatter: dimension 1 (size 6) does not divide by the tp group size 4"},
        {"allgather dim 3", bad_ag_dim, MG_ERR_SHAPE, "allgather: dimension 3 outside 0..2"},
        {"reduce_scatter dim -1", bad_rs_dim, MG_ERR_SHAPE, "dimension -1"},
        {"broadcast root 2 of 2", bad_root, MG_ERR_SHAPE, "root 2 outside 0..1"},
        {"group none", bad_group, MG_ERR_SHAPE, "not a mesh group"},
        {"nranks 0", bad_nranks, MG_ERR_SHAPE, "group size 0"},
        {"reduce op 7", bad_op, MG_ERR_SHAPE, "not sum or max"},
        {"alltoall with one input", bad_alltoall, MG_ERR_INVALID, "alltoall: takes 3..3 inputs, got 1"},
        {"send to peer 2 of 2", bad_send, MG_ERR_SHAPE, "peer 2 outside 0..1 of the pp group"},
        {"recv of rank 0", bad_recv, MG_ERR_SHAPE, "rank 0 outside 1.."},
        {"NULL input", bad_null, MG_ERR_INVALID, "input 0 is NULL"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        mg_graph *g = mg_graph_new();
        mg_tensor *x = input(g, "x", 3, 2, 6, 4);
        mg_tensor *y = cases[i].fn(g, x);
        const mg_error *e = mg_graph_error(g);
        TK_CHECK(y == NULL, "%s: built", cases[i].what);
        TK_CHECK(e->code == cases[i].code, "%s: code %d, want %d (%s)", cases[i].what, e->code, cases[i].code, e->msg);
        TK_CHECK(strstr(e->msg, cases[i].needle) != NULL, "%s: '%s' lacks '%s'", cases[i].what, e->msg,
                 cases[i].needle);
        /* Builders propagate: a NULL input after an error stays an error without a crash. */
        TK_CHECK(mg_allgather(g, y, MG_GROUP_TP, 2, 0, 1) == NULL, "%s: propagation", cases[i].what);
        mg_graph_free(g);
    }
    /* i32 is allowed, bf16 is not. */
    mg_graph *g = mg_graph_new();
    int64_t s[1] = {4};
    mg_tensor *ids = mg_input(g, "ids", MG_I32, 1, s);
    TK_CHECK(mg_broadcast(g, ids, MG_GROUP_TP, 2, 0, 0) != NULL, "i32 broadcast: %s", mg_graph_error(g)->msg);
    mg_tensor *h = mg_input(g, "h", MG_BF16, 1, s);
    TK_CHECK(mg_allreduce(g, h, MG_GROUP_TP, 2, MG_REDUCE_SUM, 1) == NULL &&
                 strstr(mg_graph_error(g)->msg, "f32 or i32, got bf16"),
             "bf16 rejected: %s", mg_graph_error(g)->msg);
    mg_graph_free(g);
    TK_CHECK(mg_allreduce(NULL, NULL, MG_GROUP_TP, 2, MG_REDUCE_SUM, 0) == NULL, "NULL graph");
    printf("ok shape_errors\n");
}

/* No communicator: groups of one rank copy; a node over more ranks is an error, not
 * a silent identity. */
static void single_rank(void) {
    mg_graph *g = mg_graph_new();
    mg_tensor *x = input(g, "x", 3, 2, 3, 4);
    mg_tensor *outs[5] = {
        mg_allreduce(g, x, MG_GROUP_TP, 1, MG_REDUCE_SUM, 0), mg_allgather(g, x, MG_GROUP_DP, 1, 1, 1),
        mg_reduce_scatter(g, x, MG_GROUP_WORLD, 1, 2, 2), mg_broadcast(g, x, MG_GROUP_PP, 1, 0, 3),
        mg_allreduce(g, x, MG_GROUP_CP, 1, MG_REDUCE_MAX, 4)};
    tk_run r;
    if (tk_prepare(&r, g)) {
        tk_failures++;
        mg_graph_free(g);
        return;
    }
    tk_rng rng = {7};
    tk_fill(&rng, tk_f32(&r, x), mg_numel(x), -1, 1);
    TK_CHECK(tk_exec(&r) == 0, "exec");
    for (int i = 0; i < 5; i++)
        TK_CHECK(memcmp(tk_f32(&r, outs[i]), tk_f32(&r, x), 24 * sizeof(float)) == 0, "%s is not a copy",
                 outs[i]->name);
    tk_release(&r);
    mg_graph_free(g);

    g = mg_graph_new();
    x = input(g, "x", 1, 4, 1, 1);
    mg_allreduce(g, x, MG_GROUP_TP, 2, MG_REDUCE_SUM, 0);
    if (!tk_prepare(&r, g)) {
        mg_error err = {0};
        int rc = mg_exec_reference(g, r.st, &r.info, &err);
        TK_CHECK(rc == MG_ERR_INVALID && strstr(err.msg, "mg_exec_info.comm is NULL") &&
                     strstr(err.msg, "tp group of 2 ranks"),
                 "tp 2 without a communicator: %d %s", rc, err.msg);
        tk_release(&r);
    } else {
        tk_failures++;
    }
    mg_graph_free(g);
    /* The communicator queries accept NULL. */
    double by[MG_GROUP_COUNT];
    mg_comm_bytes(NULL, by);
    TK_CHECK(by[0] == 0 && mg_comm_seconds(NULL) == 0 && mg_comm_mesh(NULL) == NULL, "NULL comm queries");
    mg_comm_free(NULL);
    mg_comm *c = (mg_comm *)&c;
    mg_error err = {0};
    mg_mesh m;
    mg_mesh_init(&m, 1, 0, 1, 1, 1, 1, NULL);
    TK_CHECK(mg_comm_new(&m, &c, &err) == MG_ERR_INVALID && c == NULL && strstr(err.msg, "not initialised"),
             "mg_comm_new before MPI_Init: %s", err.msg);
    printf("ok single_rank\n");
}

int main(int argc, char **argv) {
    static const tk_case cases[] = {
        {"mesh_layout", mesh_layout}, {"mesh_consistency", mesh_consistency}, {"mesh_errors", mesh_errors},
        {"mesh_order", mesh_order},
        {"shapes", shapes},           {"shape_errors", shape_errors},         {"single_rank", single_rank},
    };
    return tk_main(argc, argv, cases, (int)(sizeof cases / sizeof cases[0]));
}

/* Placements on the mesh: every rank's block, offsets of nested splits, ownership. */
#include <stdlib.h>
#include <string.h>

#include "mgraph/placement.h"
#include "testkit.h"

/* Counts, per element of a [R, C] logical tensor, how many ranks of a
 * tp x cp x dp world hold it (and how many own it), from mg_placement_local. */
static void coverage(const mg_placement *p, int world, int tp, int cp, int R, int C, int *held, int *owned) {
    memset(held, 0, sizeof(int) * (size_t)(R * C));
    memset(owned, 0, sizeof(int) * (size_t)(R * C));
    for (int r = 0; r < world; r++) {
        mg_mesh m;
        mg_error err = {0};
        TK_CHECK(mg_mesh_init(&m, world, r, tp, cp, 1, 1, &err) == MG_OK, "mesh: %s", err.msg);
        int64_t lg[2] = {R, C}, loc[2], off[2];
        TK_CHECK(mg_placement_local(p, &m, 2, lg, loc, off, &err) == MG_OK, "rank %d: %s", r, err.msg);
        bool own = mg_placement_owner(p, &m);
        for (int64_t i = off[0]; i < off[0] + loc[0]; i++)
            for (int64_t j = off[1]; j < off[1] + loc[1]; j++) {
                held[i * C + j]++;
                owned[i * C + j] += own;
            }
    }
}

/* The sequence split over cp and, inside each cp block, over tp (SP under CP), the
 * hidden dimension over dp: 8 ranks hold 8 disjoint blocks; cp is the outer split. */
static void nested(void) {
    enum { R = 8, C = 6 };
    int held[R * C], owned[R * C];
    mg_placement p = mg_placement_full();
    p.ax[MG_GROUP_CP] = mg_place_split(MG_GROUP_CP, 0);
    p.ax[MG_GROUP_TP] = mg_place_split(MG_GROUP_TP, 0);
    p.ax[MG_GROUP_DP] = mg_place_split(MG_GROUP_DP, 1);
    coverage(&p, 8, 2, 2, R, C, held, owned);
    for (int e = 0; e < R * C; e++) TK_CHECK(held[e] == 1 && owned[e] == 1, "element %d held %d times", e, held[e]);
    /* rank 2 = (tp 0, cp 1, dp 0): the second cp half, its first tp quarter */
    mg_mesh m;
    mg_error err = {0};
    TK_CHECK(mg_mesh_init(&m, 8, 2, 2, 2, 1, 1, &err) == MG_OK, "mesh");
    int64_t lg[2] = {R, C}, loc[2], off[2];
    TK_CHECK(mg_placement_local(&p, &m, 2, lg, loc, off, &err) == MG_OK, "%s", err.msg);
    TK_CHECK(loc[0] == 2 && loc[1] == 3 && off[0] == 4 && off[1] == 0, "rank 2 block [%lld,%lld] at [%lld,%lld]",
             (long long)loc[0], (long long)loc[1], (long long)off[0], (long long)off[1]);
    char buf[64];
    TK_CHECK(!strcmp(mg_placement_str(&p, buf, sizeof buf), "tp:S0 cp:S0 dp:S1"), "str: %s", buf);
}

/* Replicated axes: every rank of them holds the block, exactly one owns it. */
static void replicated(void) {
    enum { R = 4, C = 6 };
    int held[R * C], owned[R * C];
    mg_placement p = mg_placement_full();
    p.ax[MG_GROUP_TP] = mg_place_split(MG_GROUP_TP, 1);
    coverage(&p, 8, 2, 2, R, C, held, owned);
    for (int e = 0; e < R * C; e++) TK_CHECK(held[e] == 4 && owned[e] == 1, "element %d: held %d owned %d", e, held[e], owned[e]);
    p.ax[MG_GROUP_DP] = mg_place_partial(MG_GROUP_DP);
    mg_mesh m;
    mg_error err = {0};
    TK_CHECK(mg_mesh_init(&m, 8, 0, 2, 2, 1, 1, &err) == MG_OK, "mesh");
    TK_CHECK(!mg_placement_owner(&p, &m), "a partial sum is owned by nobody");
    char buf[64];
    TK_CHECK(!strcmp(mg_placement_str(&p, buf, sizeof buf), "tp:S1 dp:P"), "str: %s", buf);
    mg_placement f = mg_placement_full();
    TK_CHECK(!strcmp(mg_placement_str(&f, buf, sizeof buf), "replicated"), "str: %s", buf);
}

/* Under expert parallelism (ep reuses the dp x cp ranks): a distributed-optimizer
 * segment (split over dp) is owned by every dp rank whatever its ep coordinate, a
 * replicated tensor by one rank, an expert block (split over ep) by the first rank of
 * its expert-data group. Issue 36: ranks with ep index != 0 wrote no segment. */
static void expert_mesh(void) {
    const int world = 8, tp = 2, cp = 1, ep = 2; /* dp 4, edp 2 */
    mg_placement seg = mg_placement_full(), rep = mg_placement_full(), exp = mg_placement_full();
    seg.ax[MG_GROUP_DP] = mg_place_split(MG_GROUP_DP, 0);
    exp.ax[MG_GROUP_EP] = mg_place_split(MG_GROUP_EP, 0);
    int seg_owners[4] = {0}, rep_owners = 0, exp_owners[2] = {0};
    for (int r = 0; r < world; r++) {
        mg_mesh m;
        mg_error err = {0};
        TK_CHECK(mg_mesh_init(&m, world, r, tp, cp, ep, 1, &err) == MG_OK, "mesh: %s", err.msg);
        if (m.coord[MG_GROUP_TP] != 0) continue; /* (tp 0's blocks) */
        seg_owners[m.coord[MG_GROUP_DP]] += mg_placement_owner(&seg, &m);
        rep_owners += mg_placement_owner(&rep, &m);
        exp_owners[m.coord[MG_GROUP_EP]] += mg_placement_owner(&exp, &m);
    }
    for (int d = 0; d < 4; d++) TK_CHECK(seg_owners[d] == 1, "dp segment %d owned by %d ranks", d, seg_owners[d]);
    TK_CHECK(rep_owners == 1, "a replicated tensor owned by %d ranks", rep_owners);
    for (int e = 0; e < 2; e++) TK_CHECK(exp_owners[e] == 1, "expert block %d owned by %d ranks", e, exp_owners[e]);
}

static void errors(void) {
    mg_mesh m;
    mg_error err = {0};
    TK_CHECK(mg_mesh_init(&m, 8, 0, 2, 2, 1, 1, &err) == MG_OK, "mesh");
    mg_placement p = mg_placement_full();
    p.ax[MG_GROUP_CP] = mg_place_split(MG_GROUP_CP, 0);
    p.ax[MG_GROUP_TP] = mg_place_split(MG_GROUP_TP, 0);
    int64_t lg[2] = {6, 4}, loc[2];
    TK_CHECK(mg_placement_local(&p, &m, 2, lg, loc, NULL, &err) == MG_ERR_INVALID, "6 split 4 ways must fail");
    TK_CHECK(strstr(err.msg, "dimension 0") && strstr(err.msg, "4 ways"), "message: %s", err.msg);
    memset(&err, 0, sizeof err);
    p = mg_placement_full();
    p.ax[MG_GROUP_TP] = mg_place_split(MG_GROUP_TP, 2);
    TK_CHECK(mg_placement_local(&p, &m, 2, lg, loc, NULL, &err) == MG_ERR_INVALID, "dim 2 of a 2-d tensor must fail");
    TK_CHECK(strstr(err.msg, "tp splits dimension 2"), "message: %s", err.msg);
}

int main(int argc, char **argv) {
    static const tk_case cases[] = {{"nested", nested}, {"replicated", replicated}, {"expert_mesh", expert_mesh},
                                      {"errors", errors}};
    return tk_main(argc, argv, cases, (int)(sizeof cases / sizeof *cases));
}

/* The device mesh as data: Megatron's RankGenerator, pure arithmetic (no MPI).
 *
 * An order string names the mesh's axes, innermost first (Megatron's default
 * "tp-cp-ep-dp-pp"): a rank is the mixed-radix number of its coordinates in that order,
 *     rank = sum over axes a of coord[a] * stride[a],  stride[a] = product of the sizes before a.
 * Two rank generators read the same order (Megatron's initialize_model_parallel):
 *   dense:  tp, cp, dp, pp            (ep 1):  attention, dense MLPs, embeddings;
 *   expert: etp, ep, edp, pp          (cp 1):  the experts, with edp = world / (etp ep pp).
 * A process group is a generator and the axes it spans (the table `groups` below): the
 * ranks that agree on every other axis of that generator. Its members are numbered by
 * the spanned axes' coordinates, mixed-radix in the order's nesting (dp_cp: cp
 * innermost under the default order). The embedding group is the first and the last
 * member of the pipeline group (Megatron's), WORLD every rank. With etp = tp and the
 * default order, an expert-parallel group is ep consecutive ranks of a (tp, pp) slice's
 * dp x cp ranks, as it always was here.
 */
#include <stdio.h>
#include <string.h>

#include "mgraph/comm.h"

enum { GEN_DENSE, GEN_EXPERT };
#define BIT(a) (1u << (a))

/* Every group the mesh has: which generator, which axes. */
static const struct {
    mg_group g;
    int gen;
    unsigned axes; /* BIT(MG_MESH_AXIS_*) */
} groups[] = {
    {MG_GROUP_TP, GEN_DENSE, BIT(MG_MESH_AXIS_TP)},
    {MG_GROUP_CP, GEN_DENSE, BIT(MG_MESH_AXIS_CP)},
    {MG_GROUP_DP, GEN_DENSE, BIT(MG_MESH_AXIS_DP)},
    {MG_GROUP_PP, GEN_DENSE, BIT(MG_MESH_AXIS_PP)},
    {MG_GROUP_DP_CP, GEN_DENSE, BIT(MG_MESH_AXIS_DP) | BIT(MG_MESH_AXIS_CP)},
    {MG_GROUP_EMB, GEN_DENSE, BIT(MG_MESH_AXIS_PP)}, /* its first and last member */
    {MG_GROUP_EP, GEN_EXPERT, BIT(MG_MESH_AXIS_EP)},
    {MG_GROUP_EDP, GEN_EXPERT, BIT(MG_MESH_AXIS_DP)},
    {MG_GROUP_ETP, GEN_EXPERT, BIT(MG_MESH_AXIS_TP)},
    {MG_GROUP_WORLD, GEN_DENSE, ~0u},
};
enum { N_GROUPS = sizeof groups / sizeof groups[0] };

static const char *const axis_names[MG_MESH_AXIS_COUNT] = {"tp", "cp", "ep", "dp", "pp"};

const char *mg_mesh_default_order(void) { return "tp-cp-ep-dp-pp"; }

/* Parses an order string into the axes, innermost first; missing axes are appended
 * (Megatron's: they must have size 1, which the caller checks). */
static int parse_order(const char *s, int perm[MG_MESH_AXIS_COUNT], bool seen[MG_MESH_AXIS_COUNT], mg_error *err) {
    int n = 0;
    const char *p = s;
    while (*p) {
        const char *e = strchr(p, '-');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        int a = -1;
        for (int k = 0; k < MG_MESH_AXIS_COUNT; k++)
            if (strlen(axis_names[k]) == len && !strncmp(p, axis_names[k], len)) a = k;
        if (a < 0 || seen[a])
            return mg_error_set(err, MG_ERR_INVALID,
                                "mesh: order '%s': %s '%.*s' (the axes are tp, cp, ep, dp and pp, each at most once, "
                                "joined by '-', innermost first)",
                                s, a < 0 ? "unknown axis" : "repeated axis", (int)len, p);
        seen[a] = true;
        perm[n++] = a;
        if (!e) break;
        p = e + 1;
        if (!*p) return mg_error_set(err, MG_ERR_INVALID, "mesh: order '%s' ends with '-'", s);
    }
    for (int k = 0; k < MG_MESH_AXIS_COUNT; k++)
        if (!seen[k]) perm[n++] = k;
    return MG_OK;
}

/* This rank's index in group entry gi, and the group's size. */
static void member_of(const mg_mesh *m, int gi, int *size, int *coord) {
    int gen = groups[gi].gen, n = 1, idx = 0;
    for (int k = 0; k < MG_MESH_AXIS_COUNT; k++) {
        int a = m->order[k];
        if (!(groups[gi].axes & BIT(a))) continue;
        idx += m->axis_coord[gen][a] * n;
        n *= m->axis_size[gen][a];
    }
    *size = n;
    *coord = idx;
}

int mg_mesh_init_spec(mg_mesh *m, int world, int rank, const mg_mesh_spec *s, mg_error *err) {
    if (!m || !s) return mg_error_set(err, MG_ERR_INVALID, "mg_mesh_init: NULL mesh or spec");
    memset(m, 0, sizeof *m);
    int tp = s->tp, cp = s->cp, ep = s->ep, pp = s->pp, etp = s->etp ? s->etp : s->tp;
    if (world < 1) return mg_error_set(err, MG_ERR_INVALID, "mesh: world size %d must be at least 1", world);
    if (rank < 0 || rank >= world)
        return mg_error_set(err, MG_ERR_INVALID, "mesh: rank %d outside 0..%d (world size %d)", rank, world - 1, world);
    if (tp < 1 || cp < 1 || ep < 1 || pp < 1 || etp < 1)
        return mg_error_set(err, MG_ERR_INVALID, "mesh: tp=%d, cp=%d, ep=%d, pp=%d, etp=%d must all be at least 1", tp,
                            cp, ep, pp, etp);
    long long tcp = (long long)tp * cp * pp;
    if (tcp > world || world % tcp != 0)
        return mg_error_set(err, MG_ERR_INVALID,
                            "mesh: world size %d is not a multiple of tp*cp*pp = %d*%d*%d = %lld "
                            "(world = tp*cp*dp*pp)",
                            world, tp, cp, pp, tcp);
    int dp = (int)(world / tcp);
    if (etp == tp && (dp * cp) % ep != 0)
        return mg_error_set(err, MG_ERR_INVALID,
                            "mesh: ep=%d does not divide dp*cp = %d*%d = %d "
                            "(expert parallelism reuses the ranks of dp x cp)",
                            ep, dp, cp, dp * cp);
    long long tep = (long long)etp * ep * pp;
    if (world % tep != 0)
        return mg_error_set(err, MG_ERR_INVALID,
                            "mesh: world size %d is not a multiple of etp*ep*pp = %d*%d*%d = %lld (the expert layers' "
                            "world = etp*ep*edp*pp)",
                            world, etp, ep, pp, tep);
    int edp = (int)(world / tep);
    const char *order = s->order && *s->order ? s->order : mg_mesh_default_order();
    if (strlen(order) >= sizeof m->order_str)
        return mg_error_set(err, MG_ERR_INVALID, "mesh: order '%s' is too long", order);
    int perm[MG_MESH_AXIS_COUNT];
    bool named[MG_MESH_AXIS_COUNT] = {false};
    int rc = parse_order(order, perm, named, err);
    if (rc) return rc;
    snprintf(m->order_str, sizeof m->order_str, "%s", order);
    const int sizes[2][MG_MESH_AXIS_COUNT] = {{tp, cp, 1, dp, pp}, {etp, 1, ep, edp, pp}};
    for (int a = 0; a < MG_MESH_AXIS_COUNT; a++) /* Megatron's: only an axis of size 1 may go unnamed */
        if (!named[a] && (sizes[0][a] > 1 || sizes[1][a] > 1))
            return mg_error_set(err, MG_ERR_INVALID, "mesh: order '%s' does not name %s, whose size is %d", order,
                                axis_names[a], sizes[0][a] > 1 ? sizes[0][a] : sizes[1][a]);
    for (int gen = 0; gen < 2; gen++) {
        int stride = 1;
        for (int k = 0; k < MG_MESH_AXIS_COUNT; k++) {
            int a = perm[k];
            m->order[k] = a;
            m->axis_size[gen][a] = sizes[gen][a];
            m->axis_stride[gen][a] = stride;
            m->axis_coord[gen][a] = rank / stride % sizes[gen][a];
            stride *= sizes[gen][a];
        }
    }
    /* Megatron's: both generators must see the same pipeline groups, and without pp
     * outermost the attention and the experts must agree on data parallelism */
    if (m->axis_stride[GEN_DENSE][MG_MESH_AXIS_PP] != m->axis_stride[GEN_EXPERT][MG_MESH_AXIS_PP] ||
        (perm[MG_MESH_AXIS_COUNT - 1] != MG_MESH_AXIS_PP && pp > 1 && edp != dp))
        return mg_error_set(err, MG_ERR_INVALID,
                            "mesh: order '%s' gives the expert layers (etp %d x ep %d) other pipeline groups than the "
                            "dense layers (tp %d x cp %d): put pp last",
                            order, etp, ep, tp, cp);
    m->world = world;
    m->rank = rank;
    for (int gi = 0; gi < N_GROUPS; gi++) member_of(m, gi, &m->size[groups[gi].g], &m->coord[groups[gi].g]);
    m->size[MG_GROUP_WORLD] = world;
    m->coord[MG_GROUP_WORLD] = rank;
    /* the embedding group: stage 0 (index 0) and the last stage (index 1); the
     * stages between are not members (coordinate -1) */
    int st = m->coord[MG_GROUP_PP];
    m->size[MG_GROUP_EMB] = pp > 1 ? 2 : 1;
    m->coord[MG_GROUP_EMB] = st == 0 ? 0 : st == pp - 1 ? 1 : -1;
    return MG_OK;
}

int mg_mesh_init(mg_mesh *m, int world, int rank, int tp, int cp, int ep, int pp, mg_error *err) {
    mg_mesh_spec s = {.tp = tp, .cp = cp, .ep = ep, .pp = pp};
    return mg_mesh_init_spec(m, world, rank, &s, err);
}

static int group_entry(mg_group grp) {
    for (int gi = 0; gi < N_GROUPS; gi++)
        if (groups[gi].g == grp) return gi;
    return -1;
}

int mg_mesh_peer(const mg_mesh *m, mg_group grp, int idx) {
    int gi = group_entry(grp);
    if (!m || gi < 0 || m->world < 1) return -1;
    if (idx < 0 || idx >= m->size[grp]) return -1;
    if (grp == MG_GROUP_WORLD) return idx;
    int gen = groups[gi].gen;
    if (grp == MG_GROUP_EMB) idx = idx == 0 ? 0 : m->axis_size[gen][MG_MESH_AXIS_PP] - 1; /* the stage */
    int rank = 0;
    for (int k = 0; k < MG_MESH_AXIS_COUNT; k++) {
        int a = m->order[k], c = m->axis_coord[gen][a], n = m->axis_size[gen][a];
        if (groups[gi].axes & BIT(a)) {
            c = idx % n;
            idx /= n;
        }
        rank += c * m->axis_stride[gen][a];
    }
    return rank;
}

long mg_mesh_stride(const mg_mesh *m, mg_group grp) {
    int gi = group_entry(grp);
    if (!m || gi < 0 || m->world < 1) return 0;
    if (grp == MG_GROUP_WORLD) return 1;
    if (grp == MG_GROUP_EMB) return (long)m->axis_stride[GEN_DENSE][MG_MESH_AXIS_PP] * (m->size[MG_GROUP_PP] - 1);
    for (int k = 0; k < MG_MESH_AXIS_COUNT; k++) { /* the innermost axis it spans that has more than one rank */
        int a = m->order[k];
        if ((groups[gi].axes & BIT(a)) && m->axis_size[groups[gi].gen][a] > 1) return m->axis_stride[groups[gi].gen][a];
    }
    return 1;
}

unsigned mg_mesh_group_axes(mg_group grp, bool *expert) {
    int gi = group_entry(grp);
    if (expert) *expert = gi >= 0 && groups[gi].gen == GEN_EXPERT;
    return gi < 0 || grp == MG_GROUP_WORLD ? 0 : groups[gi].axes;
}

const char *mg_mesh_order(const mg_mesh *m) { return m && m->order_str[0] ? m->order_str : mg_mesh_default_order(); }

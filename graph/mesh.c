/* The device mesh: Megatron's rank order, pure arithmetic (no MPI).
 *
 * Ranks are laid out innermost first as tp, cp, dp, pp:
 *     rank = tp_i + tp * (cp_i + cp * (dp_i + dp * pp_i))
 * so tensor-parallel groups are consecutive ranks. Expert parallelism reuses the
 * dp x cp ranks of a (tp_i, pp_i) slice, as Megatron-Core's expert rank generator
 * does with expert-tp == tp: with j = cp_i + cp * dp_i (0 <= j < cp * dp), the expert
 * coordinate is j % ep and an ep group is the ep consecutive values of j that share
 * j / ep. With ep == 1 the ep group is the rank alone. The expert-data-parallel
 * group (edp) holds the ranks of the slice with the same expert coordinate j % ep
 * (dp*cp/ep of them, index j / ep): they hold the same experts. The embedding group
 * holds the first and the last pipeline stage of a (tp, cp, dp) position: tied word
 * embeddings live on both, and their gradients are summed over it.
 */
#include <string.h>

#include "mgraph/comm.h"

int mg_mesh_init(mg_mesh *m, int world, int rank, int tp, int cp, int ep, int pp, mg_error *err) {
    if (!m) return mg_error_set(err, MG_ERR_INVALID, "mg_mesh_init: NULL mesh");
    memset(m, 0, sizeof *m);
    if (world < 1) return mg_error_set(err, MG_ERR_INVALID, "mesh: world size %d must be at least 1", world);
    if (rank < 0 || rank >= world)
        return mg_error_set(err, MG_ERR_INVALID, "mesh: rank %d outside 0..%d (world size %d)", rank, world - 1, world);
    if (tp < 1 || cp < 1 || ep < 1 || pp < 1)
        return mg_error_set(err, MG_ERR_INVALID, "mesh: tp=%d, cp=%d, ep=%d, pp=%d must all be at least 1", tp, cp,
                            ep, pp);
    long long tcp = (long long)tp * cp * pp;
    if (tcp > world || world % tcp != 0)
        return mg_error_set(err, MG_ERR_INVALID,
                            "mesh: world size %d is not a multiple of tp*cp*pp = %d*%d*%d = %lld "
                            "(world = tp*cp*dp*pp)",
                            world, tp, cp, pp, tcp);
    int dp = (int)(world / tcp);
    if ((dp * cp) % ep != 0)
        return mg_error_set(err, MG_ERR_INVALID,
                            "mesh: ep=%d does not divide dp*cp = %d*%d = %d "
                            "(expert parallelism reuses the ranks of dp x cp)",
                            ep, dp, cp, dp * cp);
    m->world = world;
    m->rank = rank;
    m->size[MG_GROUP_TP] = tp;
    m->size[MG_GROUP_CP] = cp;
    m->size[MG_GROUP_EP] = ep;
    m->size[MG_GROUP_DP] = dp;
    m->size[MG_GROUP_PP] = pp;
    m->size[MG_GROUP_DP_CP] = dp * cp;
    m->size[MG_GROUP_EDP] = dp * cp / ep;
    m->size[MG_GROUP_WORLD] = world;
    int r = rank;
    m->coord[MG_GROUP_TP] = r % tp;
    r /= tp;
    m->coord[MG_GROUP_CP] = r % cp;
    r /= cp;
    m->coord[MG_GROUP_DP] = r % dp;
    r /= dp;
    m->coord[MG_GROUP_PP] = r;
    int j = m->coord[MG_GROUP_CP] + cp * m->coord[MG_GROUP_DP];
    m->coord[MG_GROUP_EP] = j % ep;
    m->coord[MG_GROUP_DP_CP] = j; /* cp innermost, as the ranks lie */
    m->coord[MG_GROUP_EDP] = j / ep;
    m->coord[MG_GROUP_WORLD] = rank;
    /* the embedding group: stage 0 (index 0) and the last stage (index 1); the
     * stages between are not members (coordinate -1) */
    m->size[MG_GROUP_EMB] = pp > 1 ? 2 : 1;
    m->coord[MG_GROUP_EMB] = m->coord[MG_GROUP_PP] == 0 ? 0 : m->coord[MG_GROUP_PP] == pp - 1 ? 1 : -1;
    return MG_OK;
}

static int rank_of(const mg_mesh *m, int tp_i, int cp_i, int dp_i, int pp_i) {
    return tp_i + m->size[MG_GROUP_TP] * (cp_i + m->size[MG_GROUP_CP] * (dp_i + m->size[MG_GROUP_DP] * pp_i));
}

int mg_mesh_peer(const mg_mesh *m, mg_group grp, int idx) {
    if (!m || grp < 0 || grp >= MG_GROUP_COUNT || m->world < 1) return -1;
    if (idx < 0 || idx >= m->size[grp]) return -1;
    int t = m->coord[MG_GROUP_TP], c = m->coord[MG_GROUP_CP], d = m->coord[MG_GROUP_DP], p = m->coord[MG_GROUP_PP];
    switch (grp) {
    case MG_GROUP_TP: return rank_of(m, idx, c, d, p);
    case MG_GROUP_CP: return rank_of(m, t, idx, d, p);
    case MG_GROUP_DP: return rank_of(m, t, c, idx, p);
    case MG_GROUP_PP: return rank_of(m, t, c, d, idx);
    case MG_GROUP_EP: {
        int cp = m->size[MG_GROUP_CP], ep = m->size[MG_GROUP_EP];
        int j = c + cp * d;
        int j2 = (j / ep) * ep + idx;
        return rank_of(m, t, j2 % cp, j2 / cp, p);
    }
    case MG_GROUP_EDP: {
        int cp = m->size[MG_GROUP_CP], ep = m->size[MG_GROUP_EP];
        int j2 = idx * ep + (c + cp * d) % ep;
        return rank_of(m, t, j2 % cp, j2 / cp, p);
    }
    case MG_GROUP_DP_CP: return rank_of(m, t, idx % m->size[MG_GROUP_CP], idx / m->size[MG_GROUP_CP], p);
    case MG_GROUP_WORLD: return idx;
    case MG_GROUP_EMB: return rank_of(m, t, c, d, idx == 0 ? 0 : m->size[MG_GROUP_PP] - 1);
    default: return -1;
    }
}

/* Placements on the device mesh (include/mgraph/placement.h). */
#include <stdio.h>
#include <string.h>

#include "mgraph/placement.h"

mg_sharding mg_place_full(mg_group axis) { return (mg_sharding){MG_SHARD_FULL, -1, axis}; }
mg_sharding mg_place_split(mg_group axis, int dim) { return (mg_sharding){MG_SHARD_SPLIT, dim, axis}; }
mg_sharding mg_place_partial(mg_group axis) { return (mg_sharding){MG_SHARD_PARTIAL, -1, axis}; }

mg_placement mg_placement_full(void) {
    mg_placement p;
    for (int a = 0; a < MG_MESH_AXES; a++) p.ax[a] = mg_place_full((mg_group)a);
    return p;
}

bool mg_sharding_eq(mg_sharding a, mg_sharding b) {
    return a.kind == b.kind && (a.kind != MG_SHARD_SPLIT || a.dim == b.dim);
}

bool mg_placement_eq(const mg_placement *a, const mg_placement *b) {
    for (int a_ = 0; a_ < MG_MESH_AXES; a_++)
        if (!mg_sharding_eq(a->ax[a_], b->ax[a_])) return false;
    return true;
}

int mg_placement_local(const mg_placement *p, const mg_mesh *mesh, int ndim, const int64_t *logical, int64_t *local,
                       int64_t *offset, mg_error *err) {
    for (int d = 0; d < ndim; d++) {
        /* the block index along d, nesting the axes that split d from outer to inner */
        int64_t parts = 1, idx = 0;
        for (int a = MG_MESH_AXES - 1; a >= 0; a--) {
            mg_sharding s = p->ax[a];
            if (s.kind != MG_SHARD_SPLIT || s.dim != d) continue;
            int n = mesh->size[a] > 0 ? mesh->size[a] : 1;
            parts *= n;
            idx = idx * n + mesh->coord[a];
        }
        if (logical[d] % parts)
            return mg_error_set(err, MG_ERR_INVALID, "placement: dimension %d of size %lld is split %lld ways", d,
                                (long long)logical[d], (long long)parts);
        int64_t len = logical[d] / parts;
        if (local) local[d] = len;
        if (offset) offset[d] = idx * len;
    }
    for (int a = 0; a < MG_MESH_AXES; a++)
        if (p->ax[a].kind == MG_SHARD_SPLIT && (p->ax[a].dim < 0 || p->ax[a].dim >= ndim))
            return mg_error_set(err, MG_ERR_INVALID, "placement: %s splits dimension %d of a %d-dimensional tensor",
                                mg_group_name((mg_group)a), p->ax[a].dim, ndim);
    return MG_OK;
}

bool mg_placement_expert(const mg_placement *p) {
    return p->ax[MG_GROUP_EP].kind != MG_SHARD_FULL || p->ax[MG_GROUP_ETP].kind != MG_SHARD_FULL ||
           p->ax[MG_GROUP_EDP].kind != MG_SHARD_FULL;
}

bool mg_placement_owner(const mg_placement *p, const mg_mesh *mesh) {
    /* Each rank generator's axes number every rank once (mesh.c): the dense tensor's tp,
     * cp, dp, pp; the expert tensor's etp, ep, edp, pp. On the axes of its own generator
     * a block is held by the ranks it is replicated over: the first of them writes it. */
    static const mg_group dense[] = {MG_GROUP_TP, MG_GROUP_CP, MG_GROUP_DP, MG_GROUP_PP},
                          expert[] = {MG_GROUP_ETP, MG_GROUP_EP, MG_GROUP_EDP, MG_GROUP_PP};
    const mg_group *axes = mg_placement_expert(p) ? expert : dense;
    for (int a = 0; a < MG_MESH_AXES; a++)
        if (p->ax[a].kind == MG_SHARD_PARTIAL) return false;
    for (int k = 0; k < 4; k++)
        if (p->ax[axes[k]].kind == MG_SHARD_FULL && mesh->coord[axes[k]] != 0) return false;
    return true;
}

const char *mg_placement_str(const mg_placement *p, char *buf, size_t len) {
    size_t k = 0;
    if (len) buf[0] = 0;
    for (int a = 0; a < MG_MESH_AXES && k < len; a++) {
        mg_sharding s = p->ax[a];
        if (s.kind == MG_SHARD_FULL) continue;
        int w = s.kind == MG_SHARD_SPLIT ? snprintf(buf + k, len - k, "%s%s:S%d", k ? " " : "", mg_group_name((mg_group)a), s.dim)
                                         : snprintf(buf + k, len - k, "%s%s:P", k ? " " : "", mg_group_name((mg_group)a));
        if (w < 0) break;
        k += (size_t)w;
    }
    if (len && !buf[0]) snprintf(buf, len, "replicated");
    return buf;
}

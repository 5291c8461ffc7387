/* The graph's private state (graph/ only). */
#ifndef MG_GRAPH_INTERNAL_H
#define MG_GRAPH_INTERNAL_H

#include "mgraph/graph.h"

/* Open-addressing map name -> tensor, for unique names and lookups. */
typedef struct mg_name_map {
    size_t cap, len;
    mg_tensor **slots;
} mg_name_map;

int mg_name_map_put(mg_name_map *m, mg_tensor *t);       /* 0, or MG_ERR_INVALID if taken */
mg_tensor *mg_name_map_get(const mg_name_map *m, const char *name);
void mg_name_map_del(mg_name_map *m, const char *name);
void mg_name_map_free(mg_name_map *m);

/* Base name -> the smallest k for which "base_k" may still be free. Uniquifying a name
 * used many times ("attn.add" once per layer and micro-batch) would otherwise try
 * _1, _2, ... each time: quadratic in the repeats (the planner builds graphs of 100+
 * layers per candidate plan). A hint only skips suffixes known to be taken, so names are
 * the same as a search from 1; a rename frees a name, and when that name is "base_k",
 * base's hint goes back to k (mg_suffix_map_freed). */
typedef struct mg_suffix_hint {
    char *base;
    int next;
} mg_suffix_hint;
typedef struct mg_suffix_map {
    size_t cap, len;
    mg_suffix_hint *slots;
} mg_suffix_map;

int *mg_suffix_map_at(mg_suffix_map *m, const char *base); /* NULL: out of memory */
void mg_suffix_map_freed(mg_suffix_map *m, const char *name); /* name is no longer used */
void mg_suffix_map_free(mg_suffix_map *m);

#define MG_SCOPE_MAX 16

struct mg_graph {
    mg_tensor **tensors;
    int n_tensors, cap_tensors;
    mg_node **nodes;
    int n_nodes, cap_nodes;
    mg_name_map names;
    mg_suffix_map suffixes;       /* hints for uniquified names */
    char *scopes[MG_SCOPE_MAX];   /* full scope strings, innermost last */
    int n_scopes;
    mg_phase phase;
    int mb;
    int layer;                    /* stamped on new nodes (mg_node.layer) */
    mg_error error;
    mg_node **order;              /* cached topological order */
    int order_valid;
};

/* Creates a tensor named "<scope>.<name>" (unique; ".N" appended on a clash when
 * uniquify is set). */
mg_tensor *mg_tensor_new(mg_graph *g, const char *name, bool uniquify, mg_dtype dt, mg_role role,
                         int ndim, const int64_t *shape);

#endif

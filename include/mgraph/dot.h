/* Graphviz DOT dump of a graph (logical or a rank's physical graph).
 *
 * Stable ids (node and tensor ids, never addresses), so two dumps of the same graph
 * are byte-identical and diffable. Op nodes are boxes "op / output name / shape",
 * coloured by the role of what they produce; leaves (parameters, inputs, optimizer
 * state) are drawn as their own shapes; collectives and send/recv are orange
 * hexagons labelled with their group, bytes and place in the communicator's order.
 * Nodes are clustered by name scope (one cluster per layer); edges carry shapes.
 *
 * The full dump has a box per node: graphviz needs minutes or more to lay out a real
 * model's step (the default 4-layer step: 652 nodes, 1,393 edges). The summary is the
 * picture a person reads at any size: one box per (scope cut to `depth` components,
 * phase) with its op count, FLOPs, bytes moved and the parameters / optimizer state it
 * reads; collectives in their own hexagons per (scope, phase, op, group) with their
 * count and bytes; one edge per pair of boxes with the number and bytes of the tensors
 * that cross it. Both are written through mg_outfile (whole or not at all; an existing
 * file is replaced only on success).
 */
#ifndef MGRAPH_DOT_H
#define MGRAPH_DOT_H

#include <stdio.h>

#include "mgraph/graph.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mg_dot_options {
    const char *title;     /* graph label; NULL: none */
    bool hide_backward;    /* drop backward-phase nodes (a forward-only picture) */
    bool hide_optimizer;   /* drop optimizer-phase nodes */
} mg_dot_options;

int mg_graph_dump_dot(const mg_graph *g, FILE *f, const mg_dot_options *opt, mg_error *err);
int mg_graph_dump_dot_file(const mg_graph *g, const char *path, const mg_dot_options *opt, mg_error *err);

typedef struct mg_dot_summary_options {
    const char *title;      /* first line of the graph label; NULL: none */
    int depth;              /* scope components kept ("h.3" is one component); <= 0: 2 */
    const char *scope_glob; /* only nodes whose full scope matches (fnmatch); NULL: all */
    unsigned phases;        /* mask of 1u << MG_PHASE_*; 0: all */
} mg_dot_summary_options;

int mg_graph_dump_dot_summary(const mg_graph *g, FILE *f, const mg_dot_summary_options *opt, mg_error *err);
int mg_graph_dump_dot_summary_file(const mg_graph *g, const char *path, const mg_dot_summary_options *opt,
                                   mg_error *err);
/* "forward,backward" -> the phase mask; MG_ERR_INVALID naming an unknown phase. */
int mg_dot_parse_phases(const char *list, unsigned *mask, mg_error *err);

#ifdef __cplusplus
}
#endif
#endif

/* Graphviz DOT dump of a graph (logical or a rank's physical graph).
 *
 * Stable ids (node and tensor ids, never addresses), so two dumps of the same graph
 * are byte-identical and diffable. Op nodes are boxes "op / output name / shape",
 * coloured by the role of what they produce; leaves (parameters, inputs, optimizer
 * state) are drawn as their own shapes; collectives and send/recv are orange
 * hexagons labelled with their group, bytes and place in the communicator's order.
 * Nodes are clustered by name scope (one cluster per layer); edges carry shapes.
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

#ifdef __cplusplus
}
#endif
#endif

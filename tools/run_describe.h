/* mgraph-run's descriptions of a plan: the start-up lines, the DOT dumps of a rank's
 * graph, full recompute's options and the dry run (--dry-run, --world-size). */
#ifndef MG_TOOLS_RUN_DESCRIBE_H
#define MG_TOOLS_RUN_DESCRIBE_H

#include "mgraph/trainer.h"
#include "run_config.h"

/* --dump-dot under mpirun needs %r (every rank writes its graph), and a path that fits. */
int mg_run_check_dump_dot(const mg_run_config *c, int world, mg_error *err);
/* --dump-dot and --dump-dot-summary of a rank's graph ("mgraph MODEL training step" in
 * the title); all: every rank writes, else rank 0 unless the path has %r. */
int mg_run_dump_dots(const mg_run_config *c, const mg_plan *p, const char *model, const mg_graph *g, int rank, int world,
                     bool all, mg_error *err);
/* "mgraph-run: MODEL; micro-batch ... tp ... per rank per step" (model: the model's part). */
void mg_run_print_plan(const mg_run_config *c, const mg_trainer *t, const char *model, int experts);
/* The rank's micro-batches, collectives, bytes and memory (and pipeline stage). */
void mg_run_describe(const mg_run_config *c, const mg_trainer *t, const mg_graph *g, const mg_mesh *m, int rank);
/* --recompute-granularity / -method / -num-layers, checked against the model's layers. */
int mg_run_recompute_options(const mg_run_config *c, int layers, mg_recompute_options *o, mg_error *err);
void mg_run_print_recompute(const mg_recompute_options *o, int cloned);
/* Partition and describe every rank of the planned world here (one rank each under mpirun). */
int mg_run_dry_run(const mg_run_config *c, mg_trainer *t, const char *model, int mpi_world, mg_error *err);

#endif

/* PLACEHOLDER: reduce ops not implemented yet (mg_node_new reports it). */
#include "ops/op.h"

const mg_op_def mg_opdef_SUM = {.name = "sum"};
const mg_op_def mg_opdef_MEAN = {.name = "mean"};
const mg_op_def mg_opdef_SUMSQ = {.name = "sumsq"};

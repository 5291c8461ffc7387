/* PLACEHOLDER: norm ops not implemented yet (mg_node_new reports it). */
#include "ops/op.h"

const mg_op_def mg_opdef_LAYERNORM = {.name = "layernorm"};
const mg_op_def mg_opdef_RMSNORM = {.name = "rmsnorm"};
const mg_op_def mg_opdef_LAYERNORM_BWD = {.name = "layernorm_bwd"};
const mg_op_def mg_opdef_RMSNORM_BWD = {.name = "rmsnorm_bwd"};

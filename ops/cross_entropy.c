/* PLACEHOLDER: cross_entropy ops not implemented yet (mg_node_new reports it). */
#include "ops/op.h"

const mg_op_def mg_opdef_CROSS_ENTROPY = {.name = "cross_entropy"};
const mg_op_def mg_opdef_CROSS_ENTROPY_BWD = {.name = "cross_entropy_bwd"};

/* PLACEHOLDER: shape ops not implemented yet (mg_node_new reports it). */
#include "ops/op.h"

const mg_op_def mg_opdef_RESHAPE = {.name = "reshape"};
const mg_op_def mg_opdef_TRANSPOSE = {.name = "transpose"};
const mg_op_def mg_opdef_SPLIT = {.name = "split"};
const mg_op_def mg_opdef_CONCAT = {.name = "concat"};
const mg_op_def mg_opdef_SLICE = {.name = "slice"};
const mg_op_def mg_opdef_PAD = {.name = "pad"};
const mg_op_def mg_opdef_ZEROS = {.name = "zeros"};

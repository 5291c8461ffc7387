/* PLACEHOLDER: dropout ops not implemented yet (mg_node_new reports it). */
#include "ops/op.h"

const mg_op_def mg_opdef_DROPOUT = {.name = "dropout"};

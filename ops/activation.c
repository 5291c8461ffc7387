/* PLACEHOLDER: activation ops not implemented yet (mg_node_new reports it). */
#include "ops/op.h"

const mg_op_def mg_opdef_GELU = {.name = "gelu"};
const mg_op_def mg_opdef_SILU = {.name = "silu"};
const mg_op_def mg_opdef_SWIGLU = {.name = "swiglu"};
const mg_op_def mg_opdef_GELU_BWD = {.name = "gelu_bwd"};
const mg_op_def mg_opdef_SILU_BWD = {.name = "silu_bwd"};
const mg_op_def mg_opdef_SWIGLU_BWD = {.name = "swiglu_bwd"};

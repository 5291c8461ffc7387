/* PLACEHOLDER: collective ops not implemented yet (mg_node_new reports it). */
#include "ops/op.h"

const mg_op_def mg_opdef_ALLREDUCE = {.name = "allreduce"};
const mg_op_def mg_opdef_ALLGATHER = {.name = "allgather"};
const mg_op_def mg_opdef_REDUCE_SCATTER = {.name = "reduce_scatter"};
const mg_op_def mg_opdef_BROADCAST = {.name = "broadcast"};
const mg_op_def mg_opdef_ALLTOALL = {.name = "alltoall"};
const mg_op_def mg_opdef_SEND = {.name = "send"};
const mg_op_def mg_opdef_RECV = {.name = "recv"};

/* PLACEHOLDER: optimizer ops not implemented yet (mg_node_new reports it). */
#include "ops/op.h"

const mg_op_def mg_opdef_CLIP_COEF = {.name = "clip_coef"};
const mg_op_def mg_opdef_LR_SCHEDULE = {.name = "lr_schedule"};
const mg_op_def mg_opdef_ADAMW = {.name = "adamw"};

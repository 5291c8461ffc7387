/* The distributed optimizer (written next). */
#include "partitioners/partition_internal.h"

int dopt_init(part_ctx *c) {
    return part_fail(c, MG_ERR_UNSUPPORTED, "--use-distributed-optimizer is not supported yet");
}
void dopt_free(part_ctx *c) { (void)c; }
int dopt_partition_node(part_ctx *c, const mg_node *n) {
    (void)c;
    (void)n;
    return 0;
}
int dopt_after_node(part_ctx *c, const mg_node *n) {
    (void)c;
    (void)n;
    return MG_OK;
}

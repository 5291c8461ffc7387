mg_op_tests(moe
  FORWARD moe_route moe_route_capacity moe_router_counts moe_permute moe_grouped_matmul moe_losses errors_moe alltoall
  GRAD moe_route moe_permute moe_unpermute moe_grouped_matmul moe_losses moe_layer alltoall)

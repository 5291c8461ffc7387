mg_op_tests(dropout
  FORWARD dropout dropout_slice dropout_sub_batches uniform_block dropout_keep_fraction errors_dropout
  GRAD dropout)
# (forward.uniform_block calls the generator's per-instruction-set paths: ops/rng_init.h)
target_include_directories(test_ops_dropout PRIVATE ${CMAKE_SOURCE_DIR})

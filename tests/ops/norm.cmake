mg_op_tests(norm
  FORWARD layernorm rmsnorm errors_norm
  GRAD layernorm rmsnorm)

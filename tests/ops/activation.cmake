mg_op_tests(activation
  FORWARD gelu silu swiglu errors_activation
  GRAD gelu silu swiglu)

mg_op_tests(activation
  FORWARD gelu silu swiglu squared_relu gelu_erf errors_activation
  GRAD gelu silu swiglu squared_relu gelu_erf)

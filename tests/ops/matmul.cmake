mg_op_tests(matmul
  FORWARD matmul linear errors_matmul
  GRAD matmul linear)

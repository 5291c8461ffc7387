mg_op_tests(cross_entropy
  FORWARD cross_entropy cross_entropy_bwd errors_cross_entropy
  GRAD cross_entropy)

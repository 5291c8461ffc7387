mg_op_tests(softmax
  FORWARD softmax softmax_bwd errors_softmax
  GRAD softmax)

mg_op_tests(elementwise
  FORWARD add sub mul scale bias_add expand sum_to sum mean sumsq errors_elementwise
  GRAD add sub mul scale bias_add expand sum_to sum mean)

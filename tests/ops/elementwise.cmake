mg_op_tests(elementwise
  FORWARD add sub mul scale bias_add expand sum_to sum mean sumsq sumsq_zeros errors_elementwise
  GRAD add sub mul scale bias_add expand sum_to sum mean)

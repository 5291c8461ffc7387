mg_op_tests(dropout
  FORWARD dropout dropout_slice dropout_keep_fraction errors_dropout
  GRAD dropout)

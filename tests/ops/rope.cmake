mg_op_tests(rope
  FORWARD rope errors_rope rope_partial
  GRAD rope rope_partial)

mg_op_tests(rope
  FORWARD rope errors_rope
  GRAD rope)

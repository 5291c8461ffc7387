mg_op_tests(rope
  FORWARD rope errors_rope rope_partial rope_frequencies rope_scaled
  GRAD rope rope_partial rope_scaled)

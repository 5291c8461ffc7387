mg_op_tests(attention_cp
  FORWARD attention_merge attention_cp_ring errors_attention_merge
  GRAD ring_shift)

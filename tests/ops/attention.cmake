mg_op_tests(attention
  FORWARD attention attention_dropout attention_split errors_attention
  GRAD attention attention_dropout)

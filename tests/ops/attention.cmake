mg_op_tests(attention
  FORWARD attention attention_dropout attention_split attention_docs errors_attention
  GRAD attention attention_dropout attention_docs)

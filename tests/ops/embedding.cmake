mg_op_tests(embedding
  FORWARD embedding embedding_bwd errors_embedding
  GRAD embedding)

mg_op_tests(shape
  FORWARD reshape transpose split concat slice pad zeros shift errors_shape
  GRAD reshape transpose split concat slice pad shift)

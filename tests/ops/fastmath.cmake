# mg_expf: the vectorisable exp the activations use (ops/fastmath.h).
add_executable(test_ops_fastmath test_fastmath.c)
target_link_libraries(test_ops_fastmath PRIVATE mg_testkit)
target_include_directories(test_ops_fastmath PRIVATE ${CMAKE_SOURCE_DIR})
add_test(NAME ops.forward.fast_exp COMMAND test_ops_fastmath forward.fast_exp)

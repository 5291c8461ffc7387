# fp8 matrix products (ops/gemm_fp8.c, graph/fp8.c): the kernel against the element-wise
# definition bit for bit, amax, and the delayed-scaling recipe's state.
add_executable(test_ops_gemm_fp8 test_gemm_fp8.c)
target_link_libraries(test_ops_gemm_fp8 PRIVATE mg_testkit)
target_include_directories(test_ops_gemm_fp8 PRIVATE ${CMAKE_SOURCE_DIR})
foreach(c gemm_fp8_portable gemm_fp8_native fp8_delayed_state fp8_current_scale)
  add_test(NAME ops.forward.${c} COMMAND test_ops_gemm_fp8 forward.${c})
  set_tests_properties(ops.forward.${c} PROPERTIES ENVIRONMENT "${MG_TEST_ENV}" SKIP_RETURN_CODE 77)
endforeach()

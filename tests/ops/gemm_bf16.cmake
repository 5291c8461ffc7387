# bf16 matrix products (ops/gemm_bf16.c): rounding, the portable kernel and the
# AVX512-BF16 kernel against the arithmetic's definition, and the precision switch.
add_executable(test_ops_gemm_bf16 test_gemm_bf16.c)
target_link_libraries(test_ops_gemm_bf16 PRIVATE mg_testkit)
target_include_directories(test_ops_gemm_bf16 PRIVATE ${CMAKE_SOURCE_DIR})
foreach(c bf16_round gemm_bf16_portable gemm_bf16_native gemm_precision)
  add_test(NAME ops.forward.${c} COMMAND test_ops_gemm_bf16 forward.${c})
  set_tests_properties(ops.forward.${c} PROPERTIES ENVIRONMENT "${MG_TEST_ENV}" SKIP_RETURN_CODE 77)
endforeach()

# GPU tests (docs/CUDA.md): built everywhere, skipped (exit 77) without the CUDA module or a GPU.
# `make test-gpu` runs them with --require-gpu (a skip is then a failure).
add_executable(test_gpu ${CMAKE_CURRENT_SOURCE_DIR}/gpu/test_gpu.c ${CMAKE_CURRENT_SOURCE_DIR}/gpu/gpu_harness.c
  ${CMAKE_CURRENT_SOURCE_DIR}/gpu/gpu_cases.c ${CMAKE_CURRENT_SOURCE_DIR}/gpu/gpu_lowp.c ${CMAKE_CURRENT_SOURCE_DIR}/gpu/gpu_models.c
  ${CMAKE_CURRENT_SOURCE_DIR}/gpu/gpu_upsample.c ${CMAKE_CURRENT_SOURCE_DIR}/gpu/gpu_int8.c
  ${CMAKE_CURRENT_SOURCE_DIR}/gpu/gpu_stem.c)
target_include_directories(test_gpu PRIVATE ${CMAKE_SOURCE_DIR}/src ${CMAKE_CURRENT_SOURCE_DIR}/unit)
target_link_libraries(test_gpu PRIVATE kilnlib)
set_target_properties(test_gpu PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR})
add_test(NAME gpu/test_gpu COMMAND test_gpu WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
set_tests_properties(gpu/test_gpu PROPERTIES LABELS "gpu" SKIP_RETURN_CODE 77 TIMEOUT 1200)
# the one-node cases on the CPU alone: keeps the harness itself checked where there is no GPU
add_test(NAME gpu/test_gpu_cases COMMAND test_gpu --cpu-only WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
set_tests_properties(gpu/test_gpu_cases PROPERTIES LABELS "unit;sanitize")
# --device where the module cannot be used: clean errors; the kiln binary does not link CUDA
add_test(NAME gpu/device_cli COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/gpu/test_device_cli.sh $<TARGET_FILE:kiln>
         WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
set_tests_properties(gpu/device_cli PROPERTIES LABELS "cli;sanitize")
# ptxas's report on the wgmma kernels: no serialized wgmma (C7515), which no output check can see
if(TARGET kiln_cuda)
  add_test(NAME gpu/ptxas_wgmma COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/gpu/ptxas_wgmma.sh ${CMAKE_CUDA_COMPILER} ${CMAKE_SOURCE_DIR})
  set_tests_properties(gpu/ptxas_wgmma PROPERTIES LABELS "cli" TIMEOUT 1200)
  # the INT8 kernels' addressing against the one it replaced, on the host (no GPU needed)
  add_executable(test_i8_addr ${CMAKE_CURRENT_SOURCE_DIR}/gpu/test_i8_addr.cu)
  set_property(TARGET test_i8_addr PROPERTY COMPILE_OPTIONS "")   # (the C warning options are not nvcc's)
  target_compile_options(test_i8_addr PRIVATE -Xcompiler=-Wall,-Wextra -gencode=arch=compute_90a,code=sm_90a)
  set_target_properties(test_i8_addr PROPERTIES CUDA_ARCHITECTURES OFF CUDA_STANDARD 17)
  target_include_directories(test_i8_addr PRIVATE ${CMAKE_SOURCE_DIR}/src ${CMAKE_SOURCE_DIR}/include)
  add_test(NAME unit/test_i8_addr COMMAND test_i8_addr)
  set_tests_properties(unit/test_i8_addr PROPERTIES LABELS "unit")
endif()

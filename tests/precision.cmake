# Precision: explicit Q/DQ models fused into integer layers (fuse-qdq), and kiln build --precision.
add_test(NAME fuse_qdq COMMAND ${CMAKE_SOURCE_DIR}/tests/passes/run_qdq.sh $<TARGET_FILE:kiln>
  WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
set_tests_properties(fuse_qdq PROPERTIES LABELS "passes;sanitize" TIMEOUT 600
  ENVIRONMENT KILN_CHECK_IR=1)
# kiln build --precision fp16|bf16|int8, --layer-precision, --precision-fallback, inspect's columns
add_test(NAME cli_precision COMMAND ${CMAKE_SOURCE_DIR}/tests/cli/test_precision.sh $<TARGET_FILE:kiln>
  WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
set_tests_properties(cli_precision PROPERTIES LABELS "cli;sanitize" SKIP_RETURN_CODE 77 TIMEOUT 300)
# integer layers the fast INT8 kernels leave to the reference (QGemm bias shapes, per-row A scales / zero points, 3-D
# QLinearConv, also on computed inputs), QGemm transA, and an int8 engine on a host without SIMD: engine files that
# run, equal to the unoptimized model (tests/precision/gen_int8_fallback.py)
add_test(NAME cli_int8_fallback COMMAND ${CMAKE_SOURCE_DIR}/tests/cli/test_int8_fallback.sh $<TARGET_FILE:kiln>
  WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
set_tests_properties(cli_int8_fallback PROPERTIES LABELS "cli;sanitize" TIMEOUT 300)
# engine size per precision on ResNet-50 (fp16 <= 0.52x fp32) and outputs against fp32
add_test(NAME precision_resnet50 COMMAND ${CMAKE_SOURCE_DIR}/tests/cli/test_precision_resnet.sh $<TARGET_FILE:kiln>
  WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
set_tests_properties(precision_resnet50 PROPERTIES LABELS "models" SKIP_RETURN_CODE 77 TIMEOUT 900)
# kiln build --precision fp8|nvfp4|mxfp4|int4: realized per layer, sizes, accuracy, rules, fallback, verify
add_test(NAME cli_precision_lowbit COMMAND ${CMAKE_SOURCE_DIR}/tests/cli/test_precision_lowbit.sh $<TARGET_FILE:kiln>
  WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
set_tests_properties(cli_precision_lowbit PROPERTIES LABELS "cli;sanitize" SKIP_RETURN_CODE 77 TIMEOUT 300)
# the precision planner: kiln build --precision auto and kiln debug precision on a generated model
# with layers made deliberately sensitive (tests/precision/gen_sensitive.py)
add_test(NAME cli_auto_precision COMMAND ${CMAKE_SOURCE_DIR}/tests/cli/test_auto_precision.sh $<TARGET_FILE:kiln>
  WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
set_tests_properties(cli_auto_precision PROPERTIES LABELS "cli;sanitize" TIMEOUT 600)
# which layers --precision lowers: weights reached through Identity / Reshape / Transpose / Cast chains (lowered,
# realized, computed so per kiln verify --per-layer)
add_test(NAME cli_precision_weights COMMAND ${CMAKE_SOURCE_DIR}/tests/cli/test_precision_weights.sh $<TARGET_FILE:kiln>
  WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
set_tests_properties(cli_precision_weights PROPERTIES LABELS "cli;sanitize" TIMEOUT 300)
# a model's own Q/DQ (tests/precision/gen_qdq_explicit.py): Q/DQ realized in their quantized type (fp8, int16, int8)
add_test(NAME cli_qdq_precision COMMAND ${CMAKE_SOURCE_DIR}/tests/cli/test_qdq_precision.sh $<TARGET_FILE:kiln>
  WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
set_tests_properties(cli_qdq_precision PROPERTIES LABELS "cli;sanitize" TIMEOUT 300)

# Fusion patterns: small generated models must fuse as expected and keep their outputs.
add_test(NAME fusion_patterns COMMAND ${CMAKE_SOURCE_DIR}/tests/passes/run_patterns.sh $<TARGET_FILE:kiln>
  WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
set_tests_properties(fusion_patterns PROPERTIES LABELS "passes;sanitize" TIMEOUT 600
  ENVIRONMENT KILN_CHECK_IR=1)   # the use index is verified after every pass

# The ONNX backend test suite (Debian libonnx-testdata), run by `kiln conformance`.
# Fails on any test in the checked-in pass list that no longer passes, and on crashes/hangs
# (a crash or hang is a failure, and every test that ever passed is in the list).
set(ONNX_TESTDATA /usr/share/libonnx-testdata/data)
add_test(NAME conformance
  COMMAND ${CMAKE_SOURCE_DIR}/tests/conformance/run.sh $<TARGET_FILE:kiln> ${ONNX_TESTDATA}
  WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
set_tests_properties(conformance PROPERTIES LABELS "conformance;sanitize" TIMEOUT 3000)
# The same suite through the optimizer (every model built into an engine first): the passes
# must not break any test that passes unoptimized.
add_test(NAME conformance_optimized
  COMMAND ${CMAKE_SOURCE_DIR}/tests/conformance/run.sh $<TARGET_FILE:kiln> ${ONNX_TESTDATA} --optimize
  WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
set_tests_properties(conformance_optimized PROPERTIES LABELS "conformance;sanitize" TIMEOUT 3000
  ENVIRONMENT KILN_CHECK_IR=1)   # the use index is verified after every pass

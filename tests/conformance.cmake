# The ONNX backend test suite (Debian libonnx-testdata), run by `kiln conformance`.
# Fails on any test in the checked-in pass list that no longer passes, and on crashes/hangs
# (a crash or hang is a failure, and every test that ever passed is in the list).
set(ONNX_TESTDATA /usr/share/libonnx-testdata/data)
add_test(NAME conformance
  COMMAND ${CMAKE_SOURCE_DIR}/tests/conformance/run.sh $<TARGET_FILE:kiln> ${ONNX_TESTDATA}
  WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
set_tests_properties(conformance PROPERTIES LABELS "conformance;sanitize" TIMEOUT 3000)

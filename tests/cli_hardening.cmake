# Hardening of the command line (issue 6): escapes, atomic writes, output names, strict parsing.
add_test(NAME cli_hardening COMMAND ${CMAKE_SOURCE_DIR}/tests/cli/test_hardening.sh $<TARGET_FILE:kiln> WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
set_tests_properties(cli_hardening PROPERTIES LABELS "cli;sanitize" SKIP_RETURN_CODE 77 TIMEOUT 600)

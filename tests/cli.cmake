# End-to-end command-line checks (build/run/inspect/bench/info, errors, external data).
add_test(NAME cli COMMAND ${CMAKE_SOURCE_DIR}/tests/cli/test_cli.sh $<TARGET_FILE:kiln> WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
set_tests_properties(cli PROPERTIES LABELS "cli;sanitize" SKIP_RETURN_CODE 77 TIMEOUT 600)

# SIGINT ends `kiln run` / `kiln bench` cleanly (exit 130); `kiln build --build-run-budget`.
add_test(NAME cli_interrupt COMMAND ${CMAKE_SOURCE_DIR}/tests/cli/test_interrupt.sh $<TARGET_FILE:kiln>
         WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
set_tests_properties(cli_interrupt PROPERTIES LABELS "cli;sanitize" SKIP_RETURN_CODE 77 TIMEOUT 120)

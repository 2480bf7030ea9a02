# Hardening of the command line (issue 6): escapes, atomic writes, output names, strict parsing.
add_test(NAME cli_hardening COMMAND ${CMAKE_SOURCE_DIR}/tests/cli/test_hardening.sh $<TARGET_FILE:kiln> WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
set_tests_properties(cli_hardening PROPERTIES LABELS "cli;sanitize" SKIP_RETURN_CODE 77 TIMEOUT 600)
# kiln bench's bounded latency statistics (a CLI source file, so built here rather than in unit/)
add_executable(test_latency ${CMAKE_CURRENT_SOURCE_DIR}/cli/test_latency.c ${CMAKE_SOURCE_DIR}/tools/kiln/latency.c)
target_include_directories(test_latency PRIVATE ${CMAKE_SOURCE_DIR}/tools/kiln)   # like the CLI: kiln.h only
target_link_libraries(test_latency PRIVATE kilnlib)
add_test(NAME cli/test_latency COMMAND test_latency WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
set_tests_properties(cli/test_latency PROPERTIES LABELS "unit;sanitize")

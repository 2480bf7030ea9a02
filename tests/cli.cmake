# End-to-end command-line checks (build/run/inspect/bench/info, errors, external data).
add_test(NAME cli COMMAND ${CMAKE_SOURCE_DIR}/tests/cli/test_cli.sh $<TARGET_FILE:kiln> WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
set_tests_properties(cli PROPERTIES LABELS "cli;sanitize" SKIP_RETURN_CODE 77 TIMEOUT 600)
# the CPU features an engine needs are checked from checksummed bytes (its packed blobs), not only from the
# header's unchecksummed target-arch field: an edited header does not get an AVX-512 engine past an AVX2 host
add_test(NAME cli_engine_isa COMMAND ${CMAKE_SOURCE_DIR}/tests/cli/test_engine_isa.sh $<TARGET_FILE:kiln> WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
set_tests_properties(cli_engine_isa PROPERTIES LABELS "cli;sanitize" SKIP_RETURN_CODE 77 TIMEOUT 120)
# every command answers --help / -h with its usage on stdout and exit status 0
add_test(NAME cli_help COMMAND ${CMAKE_SOURCE_DIR}/tests/cli/test_help.sh $<TARGET_FILE:kiln> WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
set_tests_properties(cli_help PROPERTIES LABELS "cli;sanitize" TIMEOUT 60)
# the CLI compiles against kiln.h alone (no private includes, no kiln__ calls, no src/ include path)
add_test(NAME cli_boundary COMMAND ${CMAKE_SOURCE_DIR}/tests/cli/test_boundary.sh WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
set_tests_properties(cli_boundary PROPERTIES LABELS "cli" TIMEOUT 60)
# the CLI on the public API: synthetic inputs (dtypes without synthetic values never hang a build),
# declared types of any rank
add_test(NAME cli_api COMMAND ${CMAKE_SOURCE_DIR}/tests/cli/test_api.sh $<TARGET_FILE:kiln> WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
set_tests_properties(cli_api PROPERTIES LABELS "cli;sanitize" SKIP_RETURN_CODE 77 TIMEOUT 300)
# usage rules shared by the commands (exit 2 and why), options that cannot apply refused or warned about, reports
# that say what the engine does; tests/fakedev for the --device cuda paths without a GPU
add_test(NAME cli_usage COMMAND ${CMAKE_SOURCE_DIR}/tests/cli/test_usage.sh $<TARGET_FILE:kiln> $<TARGET_FILE:kiln_fakedev>
         WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
set_tests_properties(cli_usage PROPERTIES LABELS "cli;sanitize" SKIP_RETURN_CODE 77 TIMEOUT 300)
# models the ONNX specification forbids are errors, not runs with other numbers; the wording of the
# warning when the builder's run on synthetic data fails
add_test(NAME cli_invalid_models COMMAND ${CMAKE_SOURCE_DIR}/tests/cli/test_invalid_models.sh $<TARGET_FILE:kiln> WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
set_tests_properties(cli_invalid_models PROPERTIES LABELS "cli;sanitize" TIMEOUT 120)

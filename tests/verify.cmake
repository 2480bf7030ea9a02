# kiln verify end to end (FP32 vs FP32 within tight budgets, perturbed / NaN / QDQ candidates outside
# them, --per-layer, --data, --json, exit statuses, usage errors).
add_test(NAME cli_verify COMMAND ${CMAKE_SOURCE_DIR}/tests/cli/test_verify.sh $<TARGET_FILE:kiln> $<TARGET_FILE:kiln_fakedev>
         WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
set_tests_properties(cli_verify PROPERTIES LABELS "cli;sanitize" SKIP_RETURN_CODE 77 TIMEOUT 300)

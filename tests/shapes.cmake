# kiln info: inferred value shapes (symbolic / concrete, text and JSON) and its errors;
# kiln build: fold-shapes by inference (no run).
add_test(NAME shapes_cli
  COMMAND ${CMAKE_SOURCE_DIR}/tests/shapes/test_shapes_cli.sh $<TARGET_FILE:kiln>
  WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
set_tests_properties(shapes_cli PROPERTIES LABELS "cli;sanitize" SKIP_RETURN_CODE 77 TIMEOUT 300)

# kiln calibrate end to end (NumPy-generated calibration data, cache reuse and refusals).
add_test(NAME cli_calibrate COMMAND ${CMAKE_SOURCE_DIR}/tests/cli/test_calibrate.sh $<TARGET_FILE:kiln> WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
set_tests_properties(cli_calibrate PROPERTIES LABELS "cli;sanitize" SKIP_RETURN_CODE 77 TIMEOUT 300)
# --calib-images: PNG / JPEG text lines decoded and preprocessed exactly as the NumPy pipeline
add_test(NAME cli_calib_images COMMAND ${CMAKE_SOURCE_DIR}/tests/cli/test_calib_images.sh $<TARGET_FILE:kiln>
  WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
set_tests_properties(cli_calib_images PROPERTIES LABELS "cli;sanitize" SKIP_RETURN_CODE 77 TIMEOUT 300)

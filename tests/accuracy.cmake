# The real-task accuracy check (docs/VERIFY.md): PaddleOCR cls/rec through kiln on 48 rendered text
# lines, FP32 above measured floors, a broken classifier showing its drop. ctest -L accuracy.
add_test(NAME accuracy_ocr COMMAND ${CMAKE_SOURCE_DIR}/tests/accuracy/test_ocr_accuracy.sh $<TARGET_FILE:kiln>
         $<TARGET_FILE:kiln_fakedev> WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
set_tests_properties(accuracy_ocr PROPERTIES LABELS "accuracy" SKIP_RETURN_CODE 77 TIMEOUT 300)

# Five models (ResNet-50, BERT-base, PaddleOCR det/rec/cls) at two shapes each vs ONNX Runtime.
add_test(NAME models_vs_onnxruntime
  COMMAND ${CMAKE_SOURCE_DIR}/tests/models/run_models.sh $<TARGET_FILE:kiln>
  WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
set_tests_properties(models_vs_onnxruntime PROPERTIES LABELS "models" TIMEOUT 2400)

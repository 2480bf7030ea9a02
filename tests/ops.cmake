# The operator arity table (src/ir/ops.def) against the ONNX operator schemas (python3-onnx).
add_test(NAME ops_arity COMMAND /usr/bin/python3 ${CMAKE_SOURCE_DIR}/tests/ops/check_arity.py
  ${CMAKE_SOURCE_DIR}/src/ir/ops.def)
set_tests_properties(ops_arity PROPERTIES LABELS "unit")
# TopK / Unique on long inputs with many ties against NumPy (the merge sort's runs and merges).
add_test(NAME ops_sort COMMAND /usr/bin/python3 ${CMAKE_SOURCE_DIR}/tests/ops/check_sort_ops.py $<TARGET_FILE:kiln>)
set_tests_properties(ops_sort PROPERTIES LABELS "unit")

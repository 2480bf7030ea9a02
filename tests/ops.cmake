# The operator arity table (src/ir/ops.def) against the ONNX operator schemas (python3-onnx).
add_test(NAME ops_arity COMMAND /usr/bin/python3 ${CMAKE_SOURCE_DIR}/tests/ops/check_arity.py
  ${CMAKE_SOURCE_DIR}/src/ir/ops.def)
set_tests_properties(ops_arity PROPERTIES LABELS "unit")

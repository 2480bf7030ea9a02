#!/usr/bin/env bash
# The CLI on the public API. Synthetic inputs come from the library's one generator (builder
# calibration, bench, inspect):
# a model whose input dtype has no synthetic values (fp8) still builds (calibration is skipped;
# before, the builder looped forever in the fp8 element setter), and bench/inspect refuse it with
# a clean error instead of hanging; bench on a dynamic model needs --shapes and names the dim.
# Declared types through kiln_model_io_type/_io_dim: a declared rank above KILN_MAX_DIMS is printed
# in full (not read past the type's dims).
set -uo pipefail
KILN=$1
. "$(dirname "$0")/../lib.sh"
$PY -c "import onnx" 2> /dev/null || { echo "SKIP: python3 onnx missing"; exit 77; }
$PY - "$T/fp8.onnx" <<'PYEOF'
import sys
from onnx import helper, TensorProto
x = helper.make_tensor_value_info("x", 17, [2, 3])   # FLOAT8E4M3FN
y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])
g = helper.make_graph([helper.make_node("Cast", ["x"], ["y"], to=TensorProto.FLOAT)], "g", [x], [y])
m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 19)])
open(sys.argv[1], "wb").write(m.SerializeToString())
PYEOF
timeout 60 "$KILN" build "$T/fp8.onnx" -o "$T/fp8.kiln" > "$T/out.txt" 2>&1
rc=$?
[ $rc -eq 0 ] && ok "build: fp8 input (no synthetic values) skips calibration" || bad "build fp8 input (rc=$rc): $(tail -2 "$T/out.txt")"
expect_err "bench: fp8 input refused" "has dtype fp8e4m3, which has no synthetic values" "$KILN" bench "$T/fp8.onnx" --iterations 1
expect_err "inspect: fp8 input refused" "no synthetic values" "$KILN" inspect "$T/fp8.onnx"
$PY - "$T/r10.onnx" <<'PYEOF'
import sys
from onnx import helper, TensorProto
x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 3, 4, 5, 6, 7, 8, 9, "ten"])
y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y])
open(sys.argv[1], "wb").write(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]).SerializeToString())
PYEOF
timeout 60 "$KILN" info "$T/r10.onnx" > "$T/out.txt" 2>&1
grep -q "x  *float32  \[1, 2, 3, 4, 5, 6, 7, 8, 9, ten\]" "$T/out.txt" && ok "info: declared rank 10 printed in full" ||
  bad "info rank 10: $(grep -m1 ' x ' "$T/out.txt")"
# a graph output that is an initializer: its own type (it was reported as unknown rank)
$PY - "$T/constout.onnx" <<'PYEOF'
import sys
import numpy as np
from onnx import helper, numpy_helper, TensorProto
x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])
w = helper.make_tensor_value_info("W", TensorProto.FLOAT, [4])
g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y, w],
                      [numpy_helper.from_array(np.arange(4, dtype=np.float32), "W")])
open(sys.argv[1], "wb").write(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]).SerializeToString())
PYEOF
timeout 60 "$KILN" info "$T/constout.onnx" > "$T/out.txt" 2>&1
grep -q "W  *float32  \[4\]" "$T/out.txt" && ok "info: an initializer output's type" ||
  bad "info initializer output: $(grep -m1 ' W ' "$T/out.txt")"
M=models/tiny_bert.onnx
if [ -f "$M" ]; then
  expect_err "bench: dynamic dim needs a shape" "dim 1 is dynamic (sequence)" "$KILN" bench "$M" --iterations 1
  timeout 120 "$KILN" bench "$M" --iterations 2 --shapes input_ids:2x8,attention_mask:2x8,token_type_ids:2x8 > "$T/out.txt" 2>&1 &&
    ok "bench: synthetic ids/mask/type inputs run" || bad "bench tiny_bert: $(tail -2 "$T/out.txt")"
fi
finish

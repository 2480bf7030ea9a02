#!/usr/bin/env bash
# Shape inference from the command line. kiln info: inferred dtype and shape of every value,
# symbolic without --shapes, concrete with them, as text and as JSON ("values": [{"name","dtype",
# "shape"}]); clean errors for bad specs and for models whose shapes are inconsistent.
# kiln build: fold-shapes works from inference, without running the model.
set -uo pipefail
KILN=$1
. "$(dirname "$0")/../lib.sh"
M=models/tiny_bert.onnx
C=models/tiny_cnn.onnx
[ -f "$M" ] && [ -f "$C" ] || { echo "SKIP: models missing (run scripts/bootstrap.sh)"; exit 77; }

"$KILN" info "$C" > "$T/cnn.txt" 2>&1 && grep -q "values (" "$T/cnn.txt" && ok "info lists values" || bad "info values"
grep -q "(height+1)/2" "$T/cnn.txt" && ok "info: symbolic conv output dims" || bad "symbolic dims: $(grep -m3 conv "$T/cnn.txt")"

"$KILN" info "$M" --json > "$T/sym.json" 2>&1 || bad "info --json: $(tail -1 "$T/sym.json")"
"$KILN" info "$M" --json --shapes input_ids:2x7,attention_mask:2x7,token_type_ids:2x7 > "$T/con.json" 2>&1 ||
  bad "info --json --shapes: $(tail -1 "$T/con.json")"
$PY - "$T/sym.json" "$T/con.json" <<'PYEOF' && ok "info JSON: symbolic and concrete values" || bad "info JSON"
import json, sys
sym = json.load(open(sys.argv[1]))["values"]
con = json.load(open(sys.argv[2]))["values"]
assert len(sym) == len(con) > 100, (len(sym), len(con))
names = [v["name"] for v in sym]
assert len(set(names)) == len(names), "a value listed twice"
assert names[:3] == ["input_ids", "attention_mask", "token_type_ids"], names[:3]
for s, c in zip(sym, con):
    assert s["name"] == c["name"] and s["dtype"] == c["dtype"] and s["dtype"] not in ("?", "non-tensor"), s
    assert isinstance(s["shape"], list) and isinstance(c["shape"], list), (s, c)
    assert len(s["shape"]) == len(c["shape"]), (s, c)
    for d in c["shape"]:
        assert isinstance(d, int) and d >= 0, c           # concrete with --shapes
    for d in s["shape"]:
        assert isinstance(d, int) or (isinstance(d, str) and "?" not in d), s   # no unknown dims
byname = {v["name"]: v for v in sym}
assert byname["last_hidden_state"]["shape"] == ["batch", "sequence", 64], byname["last_hidden_state"]
assert {v["name"]: v for v in con}["last_hidden_state"]["shape"] == [2, 7, 64]
PYEOF

expect_err "unknown input in --shapes" "no input 'nope'" "$KILN" info "$M" --shapes nope:1x2
expect_err "rank mismatch in --shapes" "rank 3" "$KILN" info "$M" --shapes input_ids:1x2x3
expect_err "static dim mismatch in --shapes" "declares" "$KILN" info "$C" --shapes input:1x4x32x32

# a model whose shapes cannot fit: the error names the node
$PY - "$T/badmm.onnx" <<'PYEOF'
import sys
from onnx import helper, TensorProto
x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
w = helper.make_tensor_value_info("w", TensorProto.FLOAT, [4, 5])
y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"], name="the_matmul")], "g", [x, w], [y])
import onnx
onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), sys.argv[1])
PYEOF
expect_err "inconsistent model names the node" "the_matmul" "$KILN" info "$T/badmm.onnx"
$PY - "$T/badadd.onnx" <<'PYEOF'
import sys, onnx
from onnx import helper, TensorProto
x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3])
w = helper.make_tensor_value_info("w", TensorProto.FLOAT, [4])
y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
g = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"], name="the_add")], "g", [x, w], [y])
onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), sys.argv[1])
PYEOF
expect_err "incompatible broadcast names the node" "node 'the_add' (Add): cannot broadcast" "$KILN" info "$T/badadd.onnx"
# declared shapes of intermediates and outputs are ignored (exporters get them wrong)
$PY - "$T/lies.onnx" <<'PYEOF'
import sys, onnx
from onnx import helper, TensorProto
x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 6])
y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [5, 5, 5])        # wrong
t = helper.make_tensor_value_info("t", TensorProto.INT64, [9])               # wrong dtype and shape
g = helper.make_graph([helper.make_node("Transpose", ["x"], ["t"]), helper.make_node("Relu", ["t"], ["y"])],
                      "g", [x], [y], value_info=[t])
onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), sys.argv[1])
PYEOF
"$KILN" info "$T/lies.onnx" --json > "$T/lies.json" 2>&1 || bad "info on declared-wrong model: $(tail -1 "$T/lies.json")"
$PY - "$T/lies.json" <<'PYEOF' && ok "declared intermediate/output shapes are not used" || bad "declared shapes leaked into inference"
import json, sys
v = {x["name"]: x for x in json.load(open(sys.argv[1]))["values"]}
assert v["t"]["dtype"] == "float32" and v["t"]["shape"] == [6, "n"], v["t"]
assert v["y"]["dtype"] == "float32" and v["y"]["shape"] == [6, "n"], v["y"]
PYEOF

# fold-shapes must not need a run: this model's run fails on synthetic data (the builder feeds
# index inputs 1, out of range here), yet its Shape -> Reshape chain still folds at fixed shapes
$PY - "$T/fold.onnx" <<'PYEOF'
import sys, onnx
from onnx import helper, TensorProto
x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
idx = helper.make_tensor_value_info("idx", TensorProto.INT64, [1])
y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
z = helper.make_tensor_value_info("z", TensorProto.FLOAT, None)
table = helper.make_tensor("table", TensorProto.FLOAT, [1, 4], [1, 2, 3, 4])
nodes = [
    helper.make_node("Gather", ["table", "idx"], ["y"]),
    helper.make_node("Shape", ["x"], ["sx"]),
    helper.make_node("ReduceProd", ["sx"], ["n"], keepdims=1),
    helper.make_node("Reshape", ["x", "n"], ["z"]),
]
g = helper.make_graph(nodes, "g", [x, idx], [y, z], initializer=[table])
onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), sys.argv[1])
PYEOF
"$KILN" build "$T/fold.onnx" -o "$T/fold.kiln" --passes-report > "$T/fold.txt" 2>&1 || bad "build: $(tail -1 "$T/fold.txt")"
grep -q "^fold-shapes *[1-9]" "$T/fold.txt" && ok "fold-shapes without a run" || bad "fold-shapes without a run: $(cat "$T/fold.txt")"
"$KILN" info "$T/fold.kiln" > /dev/null 2>&1   # (engine files are not models: just must not crash)
[ $? -lt 128 ] && ok "info on an engine file fails cleanly" || bad "info on an engine file crashed"

finish

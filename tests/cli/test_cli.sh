#!/usr/bin/env bash
# End-to-end CLI checks: build / run / inspect / bench / info on a small CNN and a small BERT,
# engine vs model outputs, profiles, JSON outputs, external-data models, and clean errors for
# bad inputs (truncated engine, out-of-profile shape, missing file, unsupported op).
set -uo pipefail
KILN=$1
. "$(dirname "$0")/../lib.sh"

M=models/tiny_cnn.onnx
[ -f "$M" ] || { echo "SKIP: $M missing (run scripts/bootstrap.sh)"; exit 77; }
$PY scripts/make_inputs.py "$M" --shape input=2x3x32x40 --out "$T/in" --seed 3 > /dev/null

expect_ok "build with profile" "$KILN" build "$M" -o "$T/m.kiln" --min-shapes input:1x3x16x16 --opt-shapes input:2x3x32x40 \
  --max-shapes input:4x3x64x64 --passes-report
grep -q "fold-batchnorm" "$T/out.txt" && ok "passes report lists passes" || bad "passes report"
expect_ok "run engine" "$KILN" run "$T/m.kiln" --input input="$T/in/input.npy" --output-dir "$T/e"
expect_ok "run model (optimized)" "$KILN" run "$M" --input input="$T/in/input.npy" --output-dir "$T/o"
expect_ok "run model (no optimize)" "$KILN" run "$M" --no-optimize --input input="$T/in/input.npy" --output-dir "$T/r"
expect_ok "engine == model" $PY scripts/compare_npy.py "$T/e" "$T/o" --rtol 1e-5 --atol 1e-6
expect_ok "optimized ~ unoptimized" $PY scripts/compare_npy.py "$T/e" "$T/r" --rtol 1e-3 --atol 1e-4
expect_ok "inspect --json --profile" "$KILN" inspect "$T/m.kiln" --json --profile --iterations 3
$PY -c "
import json,sys
d=json.load(open('$T/out.txt'))
assert isinstance(d['layers'], list) and len(d['layers']) > 0
for l in d['layers']:
    for k in ('name','op','precision','tactic','fused_from','inputs','outputs','time_ms','share'): assert k in l, k
assert d['memory']['peak_activation_bytes'] <= d['memory']['naive_activation_bytes']
" && ok "inspect JSON schema" || bad "inspect JSON schema"
expect_ok "inspect --profile --threads 1" "$KILN" inspect "$T/m.kiln" --profile --threads 1 --iterations 2
grep -q "total: .* ms per run (2 runs)" "$T/out.txt" && ok "inspect --threads profiles" || bad "inspect --threads profiles"
expect_rc "inspect --threads -1" 2 "--threads" "$KILN" inspect "$T/m.kiln" --profile --threads -1
# shapes are printed whole: a two-input layer at a large batch is wider than its column (they were cut there, the
# second input's shape lost and the outputs run into it)
expect_ok "build batch 1000" "$KILN" build "$M" -o "$T/big.kiln" --shapes input:1000x3x64x64
expect_ok "inspect batch 1000" "$KILN" inspect "$T/big.kiln"
grep -Eq 'FusedConvSum .* float32\[1000,8,16,16\] float32\[1000,8,16,16\] +float32\[1000,32,16,16\] ' "$T/out.txt" &&
  ok "inspect prints whole shapes" || bad "inspect prints whole shapes"
expect_ok "bench --json" "$KILN" bench "$T/m.kiln" --iterations 5 --warmup 1 --json
$PY -c "
import json
d=json.loads(open('$T/out.txt').read())
assert d['throughput'] > 0 and d['batch'] == 2
for k in ('mean','p50','p90','p99','min','max'): assert d['latency_ms'][k] > 0
assert d['latency_ms']['min'] <= d['latency_ms']['p50'] <= d['latency_ms']['max']
assert d['precision'] == 'fp32' and d['device'] == 'cpu' and d['threads'] >= 1
known = 'avx2 fma f16c avx512f avx512dq avx512vnni avx512bf16 avx512vbmi amx-bf16 amx-int8'.split()
isa = d['cpu_isa'].split()
assert all(f in known for f in isa) and isa == sorted(isa, key=known.index), isa
" && ok "bench JSON schema" || bad "bench JSON schema"
expect_ok "bench --duration --batch" "$KILN" bench "$M" --shapes input:1x3x32x32 --batch 3 --duration 0.2
expect_ok "info" "$KILN" info "$M"
grep -q "unsupported: none" "$T/out.txt" && ok "info: no unsupported ops" || bad "info"

# errors
$PY scripts/make_inputs.py "$M" --shape input=8x3x32x40 --out "$T/big" > /dev/null
expect_err "out-of-profile shape" "outside profile" "$KILN" run "$T/m.kiln" --input input="$T/big/input.npy" --output-dir "$T/x"
# two profiles (--shapes and a range): the error says why for each (it named only the last one)
expect_ok "build with --shapes and a range" "$KILN" build "$M" -o "$T/m2.kiln" --shapes input:1x3x16x16 \
  --min-shapes input:2x3x32x32 --opt-shapes input:3x3x32x40 --max-shapes input:4x3x32x40
expect_err "out-of-profile shape, two profiles" "outside profile 0's range .*; .*outside profile 1's range" \
  "$KILN" run "$T/m2.kiln" --input input="$T/big/input.npy" --output-dir "$T/x"
head -c 1000 "$T/m.kiln" > "$T/trunc.kiln"
expect_err "truncated engine" "truncated" "$KILN" run "$T/trunc.kiln" --input input="$T/in/input.npy" --output-dir "$T/x"
expect_err "missing model" "cannot open" "$KILN" run "$T/nope.onnx" --input input="$T/in/input.npy" --output-dir "$T/x"
expect_err "garbage model" "not a valid ONNX model" "$KILN" info "$T/in/input.npy"
expect_err "wrong input name" "no input named" "$KILN" run "$M" --input wrong="$T/in/input.npy" --output-dir "$T/x"

# unsupported ops are listed in one error; external data is read from next to the model
$PY - "$T" <<'PYEOF'
import sys, numpy as np, onnx
from onnx import helper, TensorProto, numpy_helper
t = sys.argv[1]
x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
n1 = helper.make_node("Relu", ["x"], ["a"])
n2 = helper.make_node("FancyOp", ["a"], ["b"], domain="com.example")
n3 = helper.make_node("FancyOp", ["b"], ["y"], domain="com.example")
m = helper.make_model(helper.make_graph([n1, n2, n3], "g", [x], [y]),
                      opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("com.example", 1)])
onnx.save(m, f"{t}/unsupported.onnx")
w = np.arange(12, dtype=np.float32).reshape(3, 4)
g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g", [x], [y], [numpy_helper.from_array(w, "w")])
m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
onnx.save_model(m, f"{t}/ext.onnx", save_as_external_data=True, all_tensors_to_one_file=True,
                location="ext.bin", size_threshold=0)
np.save(f"{t}/ext_x.npy", np.ones((2, 3), np.float32))
np.save(f"{t}/ext_y.npy", np.ones((2, 3), np.float32) @ w)
PYEOF
expect_err "unsupported ops listed" "FancyOp (domain 'com.example', opset 1) x2" "$KILN" run "$T/unsupported.onnx" \
  --input x="$T/ext_x.npy" --output-dir "$T/x"
"$KILN" info "$T/unsupported.onnx" > "$T/info.txt" 2>&1 && grep -q "unsupported: 2 node" "$T/info.txt" && ok "info lists unsupported" \
  || bad "info unsupported"
expect_ok "external data" "$KILN" run "$T/ext.onnx" --input x="$T/ext_x.npy" --output-dir "$T/ext"
mkdir -p "$T/exp" && cp "$T/ext_y.npy" "$T/exp/y.npy"
expect_ok "external data values" $PY scripts/compare_npy.py "$T/ext" "$T/exp" --rtol 1e-6 --atol 1e-6
rm "$T/ext.bin"
expect_err "missing external data" "external data" "$KILN" run "$T/ext.onnx" --input x="$T/ext_x.npy" --output-dir "$T/x"

# kiln serve / loadgen exec kiln-serve (beside kiln, else on the PATH): same exit status; missing, a clear error
expect_rc "serve via kiln-serve" 2 "usage: kiln serve" "$KILN" serve --no-such-option
mkdir -p "$T/solo" && cp "$KILN" "$T/solo/kiln"
expect_rc "kiln-serve missing" 1 "cannot run kiln-serve" env PATH=/usr/bin:/bin "$T/solo/kiln" loadgen --help

finish

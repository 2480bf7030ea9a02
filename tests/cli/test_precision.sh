#!/usr/bin/env bash
# kiln build --precision end to end on tiny_cnn: int8 with NumPy calibration data (integer layers
# in the engine, accuracy against fp32, the same engine from the calibration cache), fp16/bf16
# weights stored reduced (engine shrinks, realized precision), --layer-precision honoured exactly,
# the error naming layers that cannot run as requested and --precision-fallback listing them,
# requested/realized precision in kiln inspect (text and JSON), usage errors.
set -uo pipefail
KILN=$1
. "$(dirname "$0")/../lib.sh"
# check NAME PYTHON-ASSERTIONS: runs Python with `d` = the JSON of the last inspect, `out` = run outputs
check() {
  local name=$1 code=$2
  if $PY - "$T" > "$T/py.txt" 2>&1 <<PYEOF
import json, sys
import numpy as np
t = sys.argv[1]
d = json.load(open(t + "/inspect.json"))
L = d["layers"]
def out(p): return np.load(f"{t}/{p}/logits.npy").astype(np.float64).ravel()
def cos(a, b): return float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))
$code
PYEOF
  then ok "$name"; cat "$T/py.txt"; else bad "$name: $(tail -3 "$T/py.txt")"; fi
}
inspect() { "$KILN" inspect "$1" --json --shapes input:1x3x32x32 > "$T/inspect.json" 2> "$T/stderr.txt" || bad "inspect $1: $(tail -1 "$T/stderr.txt")"; }
run() { "$KILN" run "$1" --input "input=$T/x.npy" --output-dir "$T/$2" > /dev/null 2>&1 || bad "run $1"; }

M=models/tiny_cnn.onnx
[ -f "$M" ] || { echo "SKIP: $M missing (run scripts/bootstrap.sh)"; exit 77; }
mkdir -p "$T/cal"
$PY - "$T" <<'PY' || { echo "FAIL numpy data"; exit 1; }
import numpy as np, sys
t = sys.argv[1]
rng = np.random.default_rng(5)
for i in range(6):
    np.save(f"{t}/cal/s{i}.npy", rng.standard_normal((2, 3, 32, 32)).astype(np.float32))
np.save(f"{t}/x.npy", rng.standard_normal((1, 3, 32, 32)).astype(np.float32))
PY

expect_ok "help lists --precision" "$KILN" build --help
grep -q -- "--layer-precision" "$T/out.txt" && grep -q -- "--precision-fallback" "$T/out.txt" && ok "help text" || bad "help text"

# fp32 reference engine: no requests, every layer realized fp32
expect_ok "build fp32" "$KILN" build "$M" -o "$T/f32.kiln"
run "$T/f32.kiln" o32
inspect "$T/f32.kiln"
check "fp32: no requests" '
assert all(l["requested_precision"] is None and l["precision"] == "fp32" for l in L), L'

# int8 with calibration data
expect_ok "build int8" "$KILN" build "$M" -o "$T/i8.kiln" --precision int8 --calib "$T/cal" --calib-method minmax --calib-cache "$T/c.cache"
grep -q "kept in fp32: conv1_Conv_0 (Conv, the first layer" "$T/out.txt" && grep -q "kept in fp32: fc_Gemm (Gemm, the last layer" "$T/out.txt" \
  && ok "int8 says which layers stay fp32" || bad "int8 report: $(cat "$T/out.txt")"
run "$T/i8.kiln" o8
inspect "$T/i8.kiln"
check "int8: integer layers, requests honoured, accurate" '
q = [l for l in L if l["op"] in ("QLinearConv", "QLinearConvAdd")]
assert len(q) == 8 and sum(l["op"] == "QLinearConvAdd" for l in q) == 1, [l["op"] for l in L]
assert all(l["requested_precision"] == "int8" and l["precision"] == "int8" for l in q), q
assert not any(l["op"] in ("Conv", "FusedConv") and l["requested_precision"] == "int8" for l in L)
assert [l["precision"] for l in L if l["name"] in ("conv1_Conv_0", "fc_Gemm")] == ["fp32", "fp32"]
c = cos(out("o8"), out("o32"))
print("int8 cosine vs fp32", c)
assert c > 0.999, c'
# activations stay 8-bit between the int8 layers: the residual Add of the first block (its Relu
# output read by the next block's convs) is one integer layer with the block's last (1x1) conv, a
# QLinearConvAdd with one rounding (kiln calibrated it: docs/OPS.md); the only QuantizeLinear is the
# network input's (after the fp32 first conv and MaxPool), the only DequantizeLinears feed the last
# block's Add, whose result goes to the float GlobalAveragePool / fc
check "int8: no Q/DQ pairs between integer layers" '
ops = [l["op"] for l in L]
assert ops.count("QLinearConvAdd") == 1 and ops.count("QLinearAdd") == 0 and ops.count("Add") == 1, ops
assert ops.count("QuantizeLinear") == 1 and ops.count("DequantizeLinear") == 2, ops
first = ops.index("QuantizeLinear")
tail = min(i for i, o in enumerate(ops) if o == "DequantizeLinear")
assert all(o in ("QLinearConv", "QLinearConvAdd") for o in ops[first + 1:tail]), ops
assert all(i["dtype"] in ("uint8", "int8") for l in L if l["op"].startswith("QLinear") for i in l["inputs"]), L
print("int8 layers:", " ".join(ops))'
# the same engine from the calibration cache alone (deterministic build)
expect_ok "int8 from cache" "$KILN" build "$M" -o "$T/i8c.kiln" --precision int8 --calib-method minmax --calib-cache "$T/c.cache"
grep -q "(from cache)" "$T/out.txt" && ok "cache reused" || bad "cache not reused: $(cat "$T/out.txt")"
cmp -s "$T/i8.kiln" "$T/i8c.kiln" && ok "byte-identical engine from the cache" || bad "engines differ"
expect_rc "int8 needs calibration" 1 "need calibration data" "$KILN" build "$M" -o "$T/x.kiln" --precision int8

# a GPU INT8 engine with half float activations (--float-activations, TensorRT's --int8 --fp16): the INT8 layers
# that write float32 -- DequantizeLinear, QLinear layers with float outputs -- are marked fp16 (the GPU holds their
# outputs so; inspect's output_storage, the manifest), nothing else changes: on the CPU the engine computes exactly
# what the engine without it computes (no GPU is needed to build either)
expect_ok "int8 --device cuda --float-activations fp16" "$KILN" build "$M" -o "$T/i8h.kiln" --precision int8 \
  --calib-cache "$T/c.cache" --calib-method minmax --device cuda --float-activations fp16
nh=$(sed -n 's/^float activations: \([0-9]*\) INT8 layers write their float32 outputs in fp16.*/\1/p' "$T/out.txt")
[ -n "$nh" ] && [ "$nh" -gt 0 ] && ok "build says how many ($nh)" || bad "float activations report: $(cat "$T/out.txt")"
expect_ok "int8 --device cuda" "$KILN" build "$M" -o "$T/i8d.kiln" --precision int8 --calib-cache "$T/c.cache" \
  --calib-method minmax --device cuda
grep -q "float activations: $nh INT8 layers write float32 on the GPU.*--float-activations fp16" "$T/out.txt" \
  && ok "without it: the hint" || bad "float activations hint: $(cat "$T/out.txt")"
run "$T/i8h.kiln" o8h
run "$T/i8d.kiln" o8d
cmp -s "$T/o8h/logits.npy" "$T/o8d/logits.npy" && ok "the CPU ignores the half marks (same outputs)" \
  || bad "half marks changed the CPU's outputs"
inspect "$T/i8d.kiln"
check "no marks without the option" '
assert all(l["output_storage"] is None for l in L), [l["output_storage"] for l in L]
assert "float_activations" not in d["manifest"]["options"], d["manifest"]'
inspect "$T/i8h.kiln"
check "half marks exactly on the INT8 layers writing float32" "
h = [l for l in L if l['output_storage'] == 'fp16']
assert len(h) == $nh and all(l['output_storage'] in (None, 'fp16') for l in L), \\
    [(l['op'], l['output_storage']) for l in L]
assert all(l['op'] == 'DequantizeLinear' or l['op'].startswith('QLinear') for l in h), [l['op'] for l in h]
assert all(o['dtype'] == 'float32' for l in h for o in l['outputs']), h
assert d['manifest']['options']['float_activations'] == 'fp16', d['manifest']"
expect_rc "--float-activations needs --device cuda" 2 "needs --device cuda" "$KILN" build "$M" -o "$T/x.kiln" \
  --precision int8 --calib-cache "$T/c.cache" --float-activations fp16
expect_rc "--float-activations bad value" 2 "takes fp16, bf16 or fp32" "$KILN" build "$M" -o "$T/x.kiln" \
  --device cuda --float-activations fp8
expect_ok "--float-activations without INT8 layers" "$KILN" build "$M" -o "$T/nohalf.kiln" --device cuda \
  --float-activations bf16
grep -q "no INT8 layer writes a float32 output" "$T/out.txt" && ok "says it changes nothing" \
  || bad "no-op float activations not said: $(cat "$T/out.txt")"

# fp16 / bf16: weights stored reduced, engine smaller, outputs close
for p in fp16 bf16; do
  expect_ok "build $p" "$KILN" build "$M" -o "$T/$p.kiln" --precision $p
  run "$T/$p.kiln" "o$p"
  inspect "$T/$p.kiln"
  check "$p: realized, smaller, close" "
convs = [l for l in L if l['op'] in ('Conv', 'FusedConv', 'Gemm')]
assert len(convs) == 10 and all(l['requested_precision'] == l['precision'] == '$p' for l in convs), convs
import os
r = os.path.getsize(t + '/$p.kiln') / os.path.getsize(t + '/f32.kiln')
print('$p engine size ratio', r)
assert r < 0.85, r
c = cos(out('o$p'), out('o32'))
assert c > (0.99999 if '$p' == 'fp16' else 0.9999), c"
done

# kiln bench says what an engine computes in (not "fp32" whatever the engine holds)
bench_prec() {   # ENGINE EXPECTED-PRECISION PYTHON-CHECK-OF-layer_precisions
  "$KILN" bench "$1" --shapes input:1x3x32x32 --iterations 1 --warmup 0 --json > "$T/bench.json" 2> "$T/stderr.txt" \
    || { bad "bench $1: $(tail -1 "$T/stderr.txt")"; return; }
  $PY -c "
import json; d = json.load(open('$T/bench.json')); lp = d['layer_precisions']
assert d['precision'] == '$2', d
$3" > "$T/py.txt" 2>&1 && ok "bench reports $2 ($(basename "$1"))" || bad "bench precision $1: $(tail -1 "$T/py.txt")"
}
bench_prec "$T/f32.kiln" fp32 "assert list(lp) == ['fp32'], lp"
bench_prec "$T/fp16.kiln" fp16 "assert lp['fp16'] == 10 and set(lp) == {'fp16', 'fp32'}, lp"
bench_prec "$T/bf16.kiln" bf16 "assert lp['bf16'] == 10 and set(lp) == {'bf16', 'fp32'}, lp"

# --layer-precision: honoured exactly, later rules win, any op
expect_ok "layer rules" "$KILN" build "$M" -o "$T/mix.kiln" --precision int8 --calib-cache "$T/c.cache" --calib-method minmax \
  --layer-precision 'layer2_*:fp16' --layer-precision 'layer2_0_conv2*:int8' --layer-precision 'conv1_Conv_0:bf16'
# the glob also matched layer2_0_bn2_BN_0, folded into the int8 layer2_0_conv2_Conv_0: it follows that layer, said
grep -q "^fused: layer2_0_bn2_BN_0 (BatchNormalization, fused into layer2_0_conv2_Conv_0) requested fp16 by a pattern, runs in int8" \
  "$T/out.txt" && ok "glob-matched fused op follows its layer, said" || bad "fused note: $(cat "$T/out.txt")"
inspect "$T/mix.kiln"
check "layer rules honoured" '
by = {l["name"]: l for l in L}
assert by["conv1_Conv_0"]["requested_precision"] == by["conv1_Conv_0"]["precision"] == "bf16"
assert by["layer2_0_conv1_Conv_0"]["precision"] == "fp16" and by["layer2_0_conv2_Conv_0"]["precision"] == "int8"
assert by["layer1_0_conv1_Conv_0"]["precision"] == "int8"
assert all(l["requested_precision"] in (None, l["precision"]) for l in L), [(l["name"], l["requested_precision"], l["precision"]) for l in L]'
bench_prec "$T/mix.kiln" mixed "assert {'bf16', 'fp16', 'int8'} <= set(lp), lp"
expect_rc "rule matching nothing" 1 "no layer name or op type matches 'nope\*'" "$KILN" build "$M" -o "$T/x.kiln" --layer-precision 'nope*:fp16'
expect_rc "bad rule" 1 "want PATTERN:PRECISION" "$KILN" build "$M" -o "$T/x.kiln" --layer-precision 'conv1_Conv_0'
expect_rc "bad precision" 1 "want one of fp32, fp16, bf16, int8, fp8, nvfp4 (or fp4), mxfp4, int4" "$KILN" build "$M" -o "$T/x.kiln" --precision int3
expect_rc "auto needs a budget" 2 "needs --accuracy-budget" "$KILN" build "$M" -o "$T/x.kiln" --precision auto
expect_rc "fp8 without calibration" 1 "fp8 layers need calibration data" "$KILN" build "$M" -o "$T/x.kiln" --precision fp8

# a Gemm (the last layer) lowered by a rule: com.microsoft QGemm with an int32 bias
expect_ok "fc int8 by rule" "$KILN" build "$M" -o "$T/fc8.kiln" --precision int8 --calib-cache "$T/c.cache" --calib-method minmax \
  --layer-precision 'fc_Gemm:int8'
grep -q "kept in fp32: fc_Gemm" "$T/out.txt" && bad "fc said kept in fp32 although a rule lowered it" || ok "rule overrides the fp32 default"
run "$T/fc8.kiln" ofc8
inspect "$T/fc8.kiln"
check "fc int8" '
fc = [l for l in L if l["name"] == "fc_Gemm"][0]
assert fc["op"] == "QGemm" and fc["requested_precision"] == fc["precision"] == "int8", fc
c = cos(out("ofc8"), out("o32"))
print("int8 with the fc: cosine vs fp32", c)
assert c > 0.999, c'

# never silent: a request that cannot be realized fails naming the layer; --precision-fallback lists it
expect_rc "unrealizable request fails" 1 "2 layers cannot run in the requested precision: GlobalAveragePool_0 (GlobalAveragePool: fp32), Flatten_0 (Flatten: fp32)" \
  "$KILN" build "$M" -o "$T/x.kiln" --precision int8 --calib-cache "$T/c.cache" --calib-method minmax \
  --layer-precision 'Flatten*:fp16' --layer-precision 'GlobalAveragePool:int8'
[ -e "$T/x.kiln" ] && bad "failed build wrote an engine" || ok "failed build wrote nothing"
expect_ok "fallback" "$KILN" build "$M" -o "$T/fb.kiln" --precision int8 --calib-cache "$T/c.cache" --calib-method minmax \
  --layer-precision 'GlobalAveragePool_0:int8' --precision-fallback
grep -q "fallback: GlobalAveragePool_0 (GlobalAveragePool) requested int8, runs in fp32" "$T/out.txt" && ok "fallback listed" || bad "fallback not listed: $(cat "$T/out.txt")"
inspect "$T/fb.kiln"
check "inspect shows the fallback" '
p = [l for l in L if l["name"] == "GlobalAveragePool_0"][0]
assert p["requested_precision"] == "int8" and p["precision"] == "fp32", p'
"$KILN" inspect "$T/fb.kiln" --shapes input:1x3x32x32 > "$T/text.txt" 2>&1
grep -E "^[0-9]+ +GlobalAveragePool_0 +GlobalAveragePool +int8 +fp32 " "$T/text.txt" > /dev/null && ok "text inspect: req and prec columns" \
  || bad "text inspect: $(grep GlobalAveragePool_0 "$T/text.txt")"

# requests on ops the optimizer fuses into another layer (bn1_BN_0 and Relu_0 into conv1_Conv_0, kept fp32 by
# int8): a rule naming the op exactly is checked against the layer's realized precision like any request -- the
# build fails naming both, as it does for the unfused Relu_6 -- or --precision-fallback lists them; honoured ones
# pass silently
F7=(--precision int8 --calib-cache "$T/c.cache" --calib-method minmax)
expect_rc "fused ops named exactly: unmet" 1 "2 layers cannot run in the requested precision: bn1_BN_0 (BatchNormalization fused into conv1_Conv_0: fp32), Relu_0 (Relu fused into conv1_Conv_0: fp32)" \
  "$KILN" build "$M" -o "$T/x.kiln" "${F7[@]}" --layer-precision 'Relu_0:fp16' --layer-precision 'bn1_BN_0:int8'
expect_rc "unfused op: the same error" 1 "1 layer cannot run in the requested precision: Relu_6 (Relu: fp32)" \
  "$KILN" build "$M" -o "$T/x.kiln" "${F7[@]}" --layer-precision 'Relu_6:int8'
expect_ok "fused ops named exactly, fallback" "$KILN" build "$M" -o "$T/x.kiln" "${F7[@]}" --layer-precision 'Relu_0:fp16' \
  --layer-precision 'bn1_BN_0:int8' --precision-fallback
grep -q "^fallback: Relu_0 (Relu, fused into conv1_Conv_0) requested fp16, runs in fp32$" "$T/out.txt" &&
  grep -q "^fallback: bn1_BN_0 (BatchNormalization, fused into conv1_Conv_0) requested int8, runs in fp32$" "$T/out.txt" &&
  ok "fused fallbacks listed" || bad "fused fallbacks: $(cat "$T/out.txt")"
expect_ok "fused ops named exactly, honoured" "$KILN" build "$M" -o "$T/x.kiln" --precision fp16 \
  --layer-precision 'Relu_0:fp16' --layer-precision 'bn1_BN_0:fp16' --layer-precision 'Relu:fp16'
grep -Eq "^(fused|fallback):" "$T/out.txt" && bad "honoured fused requests said: $(cat "$T/out.txt")" || ok "honoured: nothing said"

# a transformer: weight MatMuls become QLinearMatMul; attention (MatMuls of two computed operands)
# is kept in fp32 by default like the first and last layers: said, requested fp32, realized fp32
B=models/tiny_bert.onnx
mkdir -p "$T/bcal"
$PY - "$T" <<'PY' || bad "numpy bert data"
import numpy as np, sys
t = sys.argv[1]
rng = np.random.default_rng(1)
for k in range(3):
    np.save(f"{t}/bcal/input_ids_{k}.npy", rng.integers(0, 100, (2, 16)).astype(np.int64))
    np.save(f"{t}/bcal/attention_mask_{k}.npy", np.ones((2, 16), np.int64))
    np.save(f"{t}/bcal/token_type_ids_{k}.npy", np.zeros((2, 16), np.int64))
PY
BI=()
for n in input_ids attention_mask token_type_ids; do BI+=(--input "$n=$T/bcal/${n}_0.npy"); done
expect_ok "bert int8" "$KILN" build "$B" -o "$T/b8.kiln" --precision int8 --calib "$T/bcal" --calib-method minmax
n=$(grep -c "kept in fp32: MatMul_[0-9]* (MatMul, both operands computed: attention" "$T/out.txt")
[ "$n" = 4 ] && ok "bert int8 says the 4 attention MatMuls stay fp32" || bad "bert attention report ($n): $(cat "$T/out.txt")"
expect_ok "bert fp32" "$KILN" build "$B" -o "$T/b32.kiln"
"$KILN" run "$T/b8.kiln" "${BI[@]}" --output-dir "$T/ob8" > /dev/null 2>&1 || bad "run bert int8"
"$KILN" run "$T/b32.kiln" "${BI[@]}" --output-dir "$T/ob32" > /dev/null 2>&1 || bad "run bert fp32"
"$KILN" inspect "$T/b8.kiln" --json --shapes input_ids:2x16,attention_mask:2x16,token_type_ids:2x16 > "$T/inspect.json" 2>&1
check "bert int8" '
q = [l for l in L if l["op"] == "QLinearMatMul"]
assert len(q) >= 10 and all(l["requested_precision"] == "int8" for l in q), len(q)
att = [l for l in L if l["op"] == "Attention"]
assert len(att) == 2 and all(l["requested_precision"] == "fp32" and l["precision"] == "fp32" for l in att), att
# bias Adds (and the FFN activation) fused into the QLinearMatMuls: no DQ / Add / Gelu pass between
# them; projections read in float (attention, residual) have float outputs
assert not [l for l in L if l["op"] in ("DequantizeLinear", "Gelu")], [l["op"] for l in L]
assert all(any(f.startswith("Add") for f in l["fused_from"]) for l in q), [l["fused_from"] for l in q]
assert sum(l["outputs"][0]["dtype"] == "float32" for l in q) >= len(q) // 2, [l["outputs"] for l in q]
a, b = [np.load(f"{t}/{d}/last_hidden_state.npy").astype(np.float64).ravel() for d in ("ob8", "ob32")]
print("bert int8 cosine vs fp32", cos(a, b))
assert cos(a, b) > 0.999'

# a rule overrides the attention default; no integer kernel takes two computed operands, so the
# request is not realized: an error naming the layer, or with --precision-fallback a listed fallback
expect_rc "attention int8 by rule" 1 "MatMul_4" "$KILN" build "$B" -o "$T/b8r.kiln" --precision int8 --calib "$T/bcal" \
  --calib-method minmax --layer-precision 'MatMul_4:int8'
expect_ok "attention int8 by rule, fallback" "$KILN" build "$B" -o "$T/b8r.kiln" --precision int8 --calib "$T/bcal" \
  --calib-method minmax --layer-precision 'MatMul_4:int8' --precision-fallback
grep -q "kept in fp32: MatMul_4 " "$T/out.txt" && bad "MatMul_4 said kept although a rule asked int8" || ok "rule overrides the attention default"
grep -q "fallback: MatMul_4 .*requested int8, runs in fp32" "$T/out.txt" && ok "attention fallback listed" || bad "no fallback: $(cat "$T/out.txt")"
# the other MatMul of that attention (fused into the layer named MatMul_4): its request is not
# dropped with it, but checked like the layer's own
expect_rc "fused attention MatMul by rule" 1 "MatMul_3 (MatMul fused into MatMul_4: fp32)" "$KILN" build "$B" \
  -o "$T/b8r.kiln" --precision int8 --calib "$T/bcal" --calib-method minmax --layer-precision 'MatMul_3:int8'
expect_ok "fused attention MatMul by rule, fallback" "$KILN" build "$B" -o "$T/b8r.kiln" --precision int8 --calib "$T/bcal" \
  --calib-method minmax --layer-precision 'MatMul_3:int8' --precision-fallback
grep -q "fallback: MatMul_3 (MatMul, fused into MatMul_4) requested int8, runs in fp32" "$T/out.txt" &&
  ok "fused MatMul fallback listed" || bad "no fused fallback: $(cat "$T/out.txt")"

# activations bounded below: Conv -> HardSwish -> (x * 0.5 + 0.1) -> Conv and Conv -> x*Sigmoid(x) ->
# Conv; the second conv of each reads uint8 (zero point: the bound on the grid), the output stays
# close to fp32 (PRECISION.md, "Implicit INT8")
$PY - "$T" <<'PY' || bad "gen bounded"
import numpy as np, onnx, sys
from onnx import TensorProto, helper, numpy_helper
t = sys.argv[1]
rng = np.random.default_rng(3)
W = {k: (rng.standard_normal(s) * 0.3).astype(np.float32) for k, s in
     {"w0": (8, 3, 3, 3), "w1": (8, 8, 1, 1), "w2": (8, 3, 3, 3), "w3": (8, 8, 1, 1)}.items()}
W["a"], W["b"] = np.array(0.5, np.float32), np.array(0.1, np.float32)
N = helper.make_node
nodes = [N("Conv", ["x", "w0"], ["c0"], name="C0", pads=[1, 1, 1, 1]), N("HardSwish", ["c0"], ["h"], name="H"),
         N("Mul", ["h", "a"], ["ha"], name="A"), N("Add", ["ha", "b"], ["hb"], name="B"),
         N("Conv", ["hb", "w1"], ["y1"], name="C1"),
         N("Conv", ["x", "w2"], ["c2"], name="C2", pads=[1, 1, 1, 1]), N("Sigmoid", ["c2"], ["s"], name="S"),
         N("Mul", ["c2", "s"], ["sw"], name="SW"), N("Conv", ["sw", "w3"], ["y2"], name="C3"),
         N("Add", ["y1", "y2"], ["y"], name="Y")]
g = helper.make_graph(nodes, "bounded", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 12, 12])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                      [numpy_helper.from_array(v, k) for k, v in W.items()])
m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 14)])
m.ir_version = 8
onnx.save(m, f"{t}/bounded.onnx")
import os
os.makedirs(f"{t}/bcal2", exist_ok=True)
for i in range(4):
    np.save(f"{t}/bcal2/s{i}.npy", rng.standard_normal((2, 3, 12, 12)).astype(np.float32))
PY
expect_ok "bounded int8" "$KILN" build "$T/bounded.onnx" -o "$T/bd8.kiln" --precision int8 --calib "$T/bcal2" \
  --layer-precision 'C0:int8' --layer-precision 'C3:int8'
"$KILN" inspect "$T/bd8.kiln" --json > "$T/inspect.json" 2>&1
check "bounded activations read as uint8" '
q = {l["name"]: l for l in L if l["op"] == "QLinearConv"}
assert set(q) == {"C0", "C1", "C2", "C3"}, [(l["name"], l["op"]) for l in L]
assert q["C1"]["inputs"][0]["dtype"] == "uint8" and q["C3"]["inputs"][0]["dtype"] == "uint8", q'
expect_ok "bounded verify" "$KILN" verify "$T/bd8.kiln" --reference "$T/bounded.onnx" --data "$T/bcal2" --budget 'cosine>=0.999'

# an explicit QDQ model needs no option: its integer layers are realized int8
$PY tests/passes/gen_qdq.py "$T" > /dev/null || bad "gen_qdq"
expect_ok "build QDQ model" "$KILN" build "$T/qdq_chain.onnx" -o "$T/qdq.kiln"
"$KILN" inspect "$T/qdq.kiln" --json --shapes x:1x8x9x11 > "$T/inspect.json" 2>&1
check "QDQ model realized int8" '
q = [l for l in L if l["op"] == "QLinearConv"]
assert len(q) == 2 and all(l["precision"] == "int8" and l["requested_precision"] is None for l in q), q'

# a model carrying kiln's internal fused-request attribute itself: malformed lines (too few fields,
# empty fields, an unknown op or precision, overlong text) are skipped without harm; a well-formed
# one is checked like any fused request (here: int8 asked of a MatMul that runs fp32)
$PY - "$T" <<'PYEOF' || bad "write kiln_prec_fused model"
import sys, numpy as np, onnx
from onnx import helper, numpy_helper, TensorProto
t = sys.argv[1]
def model(fused):
    w = numpy_helper.from_array(np.ones((4, 3), np.float32), "w")
    n = helper.make_node("MatMul", ["x", "w"], ["y"], name="mm", kiln_prec_fused=fused)
    g = helper.make_graph([n], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])], [w])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
junk = "\n".join(["", "\t", "a\t\t", "b\t\tRelu\tint8", "c\t\tMatMul\tint9", "d" * 5000 + "\t" + "e" * 5000,
                   "f\tno.such\tMatMul\tint8", "\t\t\t\t\t"])
onnx.save(model(junk), f"{t}/junk_fused.onnx")
onnx.save(model(junk + "\nA\t\tMatMul\tint8"), f"{t}/fake_fused.onnx")
onnx.save(model(junk + "\nB\t\tRelu\tint8\t1"), f"{t}/exact_fused.onnx")   # a Relu a rule named exactly
PYEOF
expect_ok "malformed fused requests ignored" "$KILN" build "$T/junk_fused.onnx" -o "$T/jf.kiln"
expect_rc "well-formed fused request checked" 1 "A (MatMul fused into mm: fp32)" "$KILN" build "$T/fake_fused.onnx" -o "$T/jf.kiln"
expect_rc "exactly named fused request checked" 1 "B (Relu fused into mm: fp32)" "$KILN" build "$T/exact_fused.onnx" -o "$T/jf.kiln"

# fp16 weights past FP16's range: clamped to +-65504 and said, never left to round to infinity (an audit found the
# engine silently writing inf); bf16 keeps the range
$PY - "$T" <<'PYEOF' || bad "write big-weight model"
import sys, numpy as np, onnx
from onnx import helper, numpy_helper, TensorProto
t = sys.argv[1]
w = np.full((4, 2), 0.5, np.float32); w[1, 0] = 1e5; w[2, 1] = -7e4
n = helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")
g = helper.make_graph([n], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2])], [numpy_helper.from_array(w, "w")])
onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), f"{t}/bigw.onnx")
np.save(f"{t}/bx.npy", np.ones((1, 4), np.float32))
PYEOF
"$KILN" build "$T/bigw.onnx" -o "$T/bigw16.kiln" --precision fp16 > "$T/b16.txt" 2>&1 || bad "build fp16 big weights"
grep -q "fp16 weights clamped: w (mm): 2 values outside FP16's range (largest |w| 100000)" "$T/b16.txt" &&
  ok "fp16 clamping said" || bad "fp16 clamping said: $(cat "$T/b16.txt")"
"$KILN" run "$T/bigw16.kiln" --input "x=$T/bx.npy" --output-dir "$T/b16" > /dev/null 2>&1 || bad "run fp16 big weights"
$PY -c "
import numpy as np, sys
y = np.load(sys.argv[1]).ravel()
assert np.isfinite(y).all() and abs(y[0] - 65505.5) < 1 and abs(y[1] + 65502.5) < 1, y" "$T/b16/y.npy" &&
  ok "fp16 clamped weights finite" || bad "fp16 clamped weights finite"

# fp16 weights below FP16's range: values flushed to 0 or left with at most 5 significant bits (subnormals under
# 2^-19) are said per weight when they are at least 1% of its nonzero values (an audit found 1e-8 weights flushed in
# silence, the layer's output gone); a few such values, exact zeros and subnormals that keep most of their bits are
# not; bf16 keeps the range
$PY - "$T" <<'PYEOF' || bad "write tiny-weight model"
import sys, numpy as np, onnx
from onnx import helper, numpy_helper, TensorProto
t = sys.argv[1]
tiny = np.full((8, 2), 0.5, np.float32)
tiny.flat[:8] = 1e-9        # flushed to 0
tiny.flat[8:12] = -1e-6     # subnormal, 5 significant bits at most
fine = np.full((8, 32), 0.5, np.float32)
fine.flat[:100] = 0         # exact zeros: not counted
fine.flat[100] = 1e-9       # 1 of 156 nonzero values: under 1%
fine.flat[101:121] = 3e-5   # subnormal, but 9 significant bits left
n = [helper.make_node("MatMul", ["x", "wt"], ["y1"], name="tiny"), helper.make_node("MatMul", ["x", "wf"], ["y2"], name="fine")]
g = helper.make_graph(n, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
                      [helper.make_tensor_value_info("y1", TensorProto.FLOAT, [1, 2]),
                       helper.make_tensor_value_info("y2", TensorProto.FLOAT, [1, 32])],
                      [numpy_helper.from_array(tiny, "wt"), numpy_helper.from_array(fine, "wf")])
onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), f"{t}/tinyw.onnx")
PYEOF
"$KILN" build "$T/tinyw.onnx" -o "$T/tiny16.kiln" --precision fp16 > "$T/t16.txt" 2>&1 || bad "build fp16 tiny weights"
grep -q "^fp16 weights underflow: wt (tiny): 12 of 16 nonzero values below 1.9e-06, where FP16 keeps at most 5 significant bits: 8 flushed to 0, the others subnormal (smallest |w| 1e-09; bf16 keeps the range; or --layer-precision tiny:fp32)$" \
  "$T/t16.txt" && ok "fp16 underflow said" || bad "fp16 underflow said: $(cat "$T/t16.txt")"
grep -q "underflow: wf" "$T/t16.txt" && bad "fp16 underflow said of a weight with few tiny values: $(cat "$T/t16.txt")" \
  || ok "fp16 underflow: a few tiny values, zeros and 9-bit subnormals not said"
"$KILN" build "$T/tinyw.onnx" -o "$T/tiny_bf16.kiln" --precision bf16 > "$T/tb16.txt" 2>&1 || bad "build bf16 tiny weights"
grep -q "underflow" "$T/tb16.txt" && bad "bf16 said to underflow: $(cat "$T/tb16.txt")" || ok "bf16: no underflow"

finish "precision CLI"

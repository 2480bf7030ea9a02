#!/usr/bin/env bash
# kiln verify end to end on tiny_cnn: FP32 vs FP32 (model built in memory, engine file) within tight
# budgets; deliberately broken candidates outside them (perturbed weights, an engine built from the
# perturbed model, a NaN weight, a QDQ model with an 8-bit activation); --per-layer finds the layer
# where the error starts (and compares the QuantizeLinear output dequantized); --data with --batch;
# --json schema; exit statuses; quiet in pipes; usage errors.
set -uo pipefail
KILN=$1
. "$(dirname "$0")/../lib.sh"
expect_out() { # name rc pattern cmd...: exit status exactly rc, pattern in stdout+stderr (kept apart:
               # stdout in $T/out.txt for the JSON checks, stderr in $T/err.txt)
  local name=$1 want=$2 pat=$3; shift 3
  timeout 120 "$@" > "$T/out.txt" 2> "$T/err.txt"
  local rc=$?
  # grep reads the files itself: `cat | grep -q` under pipefail fails when grep stops at an early match while cat
  # still writes (SIGPIPE), which long outputs (--per-layer) made happen now and then
  if [ $rc -eq "$want" ] && grep -q -- "$pat" "$T/out.txt" "$T/err.txt"; then ok "$name"
  else bad "$name (rc=$rc, want $want, pattern '$pat'): $(tail -3 "$T/out.txt") / $(tail -3 "$T/err.txt")"; fi
}
json_check() { # name python-assertions (d = the JSON of $T/out.txt)
  if $PY -c "import json; d = json.load(open('$T/out.txt')); $2" > "$T/py.txt" 2>&1; then ok "$1"; else bad "$1: $(tail -3 "$T/py.txt")"; fi
}

M=models/tiny_cnn.onnx
[ -f "$M" ] || { echo "SKIP: $M missing (run scripts/bootstrap.sh)"; exit 77; }
$PY - "$T" "$M" <<'PY' || { echo "FAIL generating models"; exit 1; }
import sys, os, numpy as np, onnx
from onnx import helper, numpy_helper, TensorProto
t, src = sys.argv[1], sys.argv[2]
rng = np.random.default_rng(3)

def with_weight(name, fn, out):
    m = onnx.load(src)
    for i, init in enumerate(m.graph.initializer):
        if init.name == name:
            w = numpy_helper.to_array(init).copy()
            m.graph.initializer[i].CopyFrom(numpy_helper.from_array(fn(w).astype(np.float32), name))
    onnx.save(m, os.path.join(t, out))

# 20% multiplicative noise on one mid-network conv: the error starts at Relu_2
with_weight("layer1.0.conv2.weight", lambda w: w * (1 + 0.2 * rng.standard_normal(w.shape)), "perturbed.onnx")
with_weight("fc.weight", lambda w: np.where(np.arange(w.size).reshape(w.shape) == 0, np.nan, w), "nan.onnx")
with_weight("fc.weight", lambda w: w * np.nan, "allnan.onnx")   # every logit NaN: nothing to compare

# an 8-bit activation: QuantizeLinear/DequantizeLinear after MaxPool_0 (uint8, scale 0.02)
m = onnx.load(src)
g = m.graph
for n in g.node:
    for k, x in enumerate(n.input):
        if x == "MaxPool_0_output_0":
            n.input[k] = "mp_dq"
g.initializer.extend([numpy_helper.from_array(np.array(0.02, np.float32), "mp_scale"),
                      numpy_helper.from_array(np.array(0, np.uint8), "mp_zp")])
pos = [i for i, n in enumerate(g.node) if n.name == "MaxPool_0"][0]
g.node.insert(pos + 1, helper.make_node("QuantizeLinear", ["MaxPool_0_output_0", "mp_scale", "mp_zp"], ["mp_q"], name="mp_Q"))
g.node.insert(pos + 2, helper.make_node("DequantizeLinear", ["mp_q", "mp_scale", "mp_zp"], ["mp_dq"], name="mp_DQ"))
onnx.save(m, os.path.join(t, "qdq.onnx"))
# the same pair in FP8 E4M3 (opset 19; Debian's onnx 1.12 has no FP8 enum: data_type 17 by number)
zp8 = onnx.TensorProto()
zp8.name, zp8.data_type, zp8.raw_data = "mp_zp8", 17, bytes([0])
g.initializer.append(zp8)
for n in g.node:
    if n.name in ("mp_Q", "mp_DQ"):
        n.input[2] = "mp_zp8"
m.opset_import[0].version = 19
onnx.save(m, os.path.join(t, "qdq8.onnx"))

# a quantized layer in the place of a float one (as fuse-qdq makes it): reference Conv c -> Relu r ->
# MaxPool mp -> Flatten; candidate QuantizeLinear -> QLinearConv c (uint8, zero point 0: the Relu is
# in the saturation) -> MaxPool mp on uint8 -> DequantizeLinear -> Flatten
W = rng.uniform(-1, 1, (4, 3, 3, 3)).astype(np.float32)
conv = dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1])
x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 12, 12])
y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
ref = helper.make_graph([helper.make_node("Conv", ["x", "W"], ["c_out"], name="c", **conv),
                         helper.make_node("Relu", ["c_out"], ["r_out"], name="r"),
                         helper.make_node("MaxPool", ["r_out"], ["mp_out"], name="mp", kernel_shape=[2, 2], strides=[2, 2]),
                         helper.make_node("Flatten", ["mp_out"], ["y"], name="fl")],
                        "ref", [x], [y], [numpy_helper.from_array(W, "W")])
onnx.save(helper.make_model(ref, opset_imports=[helper.make_opsetid("", 13)]), os.path.join(t, "qref.onnx"))
ws = np.abs(W).reshape(4, -1).max(axis=1) / 127
wq = np.round(W / ws[:, None, None, None]).astype(np.int8)
ys = float(np.abs(W).reshape(4, -1).sum(axis=1).max()) / 255   # |x| <= 1: never saturates
init = [numpy_helper.from_array(np.array(1 / 127, np.float32), "xs"), numpy_helper.from_array(np.array(128, np.uint8), "xz"),
        numpy_helper.from_array(wq, "wq"), numpy_helper.from_array(ws.astype(np.float32), "ws"),
        numpy_helper.from_array(np.zeros(4, np.int8), "wz"), numpy_helper.from_array(np.array(ys, np.float32), "ys"),
        numpy_helper.from_array(np.array(0, np.uint8), "yz")]
cand = helper.make_graph([helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"], name="xQ"),
                          helper.make_node("QLinearConv", ["xq", "xs", "xz", "wq", "ws", "wz", "ys", "yz"], ["c_q"], name="c", **conv),
                          helper.make_node("MaxPool", ["c_q"], ["mp_q"], name="mp", kernel_shape=[2, 2], strides=[2, 2]),
                          helper.make_node("DequantizeLinear", ["mp_q", "ys", "yz"], ["mp_dq"], name="mpDQ"),
                          helper.make_node("Flatten", ["mp_dq"], ["y"], name="fl")], "cand", [x], [y], init)
onnx.save(helper.make_model(cand, opset_imports=[helper.make_opsetid("", 13)]), os.path.join(t, "qcand.onnx"))

# names with terminal control sequences (printed escaped)
m = onnx.load(src)
for n in m.graph.node:
    if n.name == "Relu_0":
        n.name = "Relu\x1b[31m_0"
    n.input[:] = ["Relu\x1b]0;x\x07_out" if x == "Relu_0_output_0" else x for x in n.input]
    n.output[:] = ["Relu\x1b]0;x\x07_out" if x == "Relu_0_output_0" else x for x in n.output]
onnx.save(m, os.path.join(t, "names.onnx"))

# QGemm (com.microsoft) in the place of a Gemm: its uint8 output is compared dequantized
G = rng.uniform(-1, 1, (8, 4)).astype(np.float32)
gx = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])
gref = helper.make_graph([helper.make_node("Gemm", ["x", "G"], ["g_out"], name="g"),
                          helper.make_node("Identity", ["g_out"], ["y"], name="id")],
                         "gref", [gx], [y], [numpy_helper.from_array(G, "G")])
onnx.save(helper.make_model(gref, opset_imports=[helper.make_opsetid("", 13)]), os.path.join(t, "gref.onnx"))
gs = float(np.abs(G).max()) / 127
gys = float(np.abs(G).sum(axis=0).max()) / 127
ginit = [numpy_helper.from_array(np.array(1 / 127, np.float32), "xs"), numpy_helper.from_array(np.array(128, np.uint8), "xz"),
         numpy_helper.from_array(np.round(G / gs).astype(np.int8), "gq"), numpy_helper.from_array(np.array(gs, np.float32), "gs"),
         numpy_helper.from_array(np.array(0, np.int8), "gz"), numpy_helper.from_array(np.array(gys, np.float32), "ys"),
         numpy_helper.from_array(np.array(128, np.uint8), "yz")]
gcand = helper.make_graph([helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"], name="xQ"),
                           helper.make_node("QGemm", ["xq", "xs", "xz", "gq", "gs", "gz", "", "ys", "yz"], ["g_q"], name="g",
                                            domain="com.microsoft"),
                           helper.make_node("DequantizeLinear", ["g_q", "ys", "yz"], ["y"], name="gDQ")],
                          "gcand", [gx], [y], ginit)
onnx.save(helper.make_model(gcand, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("com.microsoft", 1)]),
          os.path.join(t, "gcand.onnx"))

os.makedirs(os.path.join(t, "data"))
for k in range(3):
    np.save(os.path.join(t, "data", f"s{k}.npy"), rng.uniform(-1, 1, (4, 3, 20, 20)).astype(np.float32))
np.save(os.path.join(t, "x1.npy"), rng.uniform(-1, 1, (1, 3, 24, 24)).astype(np.float32))
# several inputs: NAME_KEY.npy (tiny_bert), plus a stray file of another input's name prefix
os.makedirs(os.path.join(t, "bert"))
for k in ("a", "b"):
    np.save(os.path.join(t, "bert", f"input_ids_{k}.npy"), rng.integers(0, 100, (2, 7)).astype(np.int64))
    np.save(os.path.join(t, "bert", f"attention_mask_{k}.npy"), np.ones((2, 7), np.int64))
    np.save(os.path.join(t, "bert", f"token_type_ids_{k}.npy"), np.zeros((2, 7), np.int64))
PY

TIGHT=(--budget 'cosine>=0.99999' --budget 'snr>=80db' --budget 'top1>=100%' --budget 'top5>=100%' --budget 'maxrel<=1e-3')

expect_out "help" 0 "usage: kiln verify" "$KILN" verify --help
expect_out "fp32 model vs itself within tight budgets" 0 "^PASS" "$KILN" verify "$M" --reference "$M" \
  --shapes input:2x3x32x32 "${TIGHT[@]}"
[ ! -s "$T/err.txt" ] && ok "quiet stderr in a pipe" || bad "stderr not empty: $(head -3 "$T/err.txt")"
grep -q "snr_db" "$T/out.txt" && grep -q "top1 agreement 100" "$T/out.txt" && ok "text lists metrics" || bad "text metrics"

"$KILN" build "$M" -o "$T/fp32.kiln" --shapes input:2x3x32x32 > /dev/null 2>&1 || bad "build engine"
expect_out "fp32 engine within tight budgets (json)" 0 '"pass": true' "$KILN" verify "$T/fp32.kiln" --reference "$M" \
  "${TIGHT[@]}" --samples 3 --json
json_check "json schema" "
o = d['outputs'][0]
assert d['samples'] == 3 and d['inputs'] == 'synthetic' and d['pass'] is True, d
assert o['name'] == 'logits' and o['reference_name'] == 'logits' and o['shape'] == [2, 10] and o['samples'] == 3, o
for k in ('max_abs', 'max_rel', 'mean_abs', 'cosine', 'snr_db'):
    assert k in o['worst'] and k in o['mean'], k
assert o['worst']['cosine'] >= 0.99999 and o['worst']['snr_db'] >= 80 and o['top1'] == 1.0 and o['rows'] == 6, o
assert o['nonfinite'] == 0
assert len(d['budgets']) == 5 and all(b['pass'] and b['output'] == 'logits' for b in d['budgets']), d['budgets']
assert 'per_layer' not in d"

expect_out "per-layer on an engine file (layer plan restored)" 0 "^matched [1-9]" "$KILN" verify "$T/fp32.kiln" \
  --reference "$M" --per-layer --samples 1 "${TIGHT[@]}"
expect_out "perturbed weights violate the budgets" 3 "FAIL: " "$KILN" verify "$T/perturbed.onnx" --reference "$M" \
  --shapes input:2x3x32x32 "${TIGHT[@]}"
grep -q "FAIL budget snr>=80db" "$T/out.txt" && ok "names the failed budget" || bad "failed budget line"
"$KILN" build "$T/perturbed.onnx" -o "$T/perturbed.kiln" --shapes input:2x3x32x32 > /dev/null 2>&1 || bad "build perturbed"
expect_out "engine of another model violates cosine (json)" 3 '"pass": false' "$KILN" verify "$T/perturbed.kiln" \
  --reference "$M" --budget 'cosine>=0.99999' --json
json_check "json of a violation" "
b = d['budgets'][0]
assert b['metric'] == 'cosine' and b['threshold'] == 0.99999 and b['pass'] is False and b['value'] < 0.99999, b"
expect_out "loose budget passes the perturbed model" 0 "^PASS" "$KILN" verify "$T/perturbed.onnx" --reference "$M" \
  --shapes input:2x3x32x32 --budget 'cosine>=0.5'
expect_out "NaN output fails without budgets" 3 "NaN/Inf" "$KILN" verify "$T/nan.onnx" --reference "$M" \
  --shapes input:1x3x16x16
# no budget: the outputs are compared, nothing but NaN/Inf is checked, and the last line says so (no PASS), exit 0
expect_out "no budget: compared only" 0 "^COMPARED ONLY: no --budget given" "$KILN" verify "$T/perturbed.onnx" \
  --reference "$M" --shapes input:2x3x32x32
grep -q "^PASS" "$T/out.txt" && bad "no budget: PASS claimed" || ok "no budget: no PASS claimed"
expect_out "no budget (json): verdict compared" 0 '"verdict": "compared"' "$KILN" verify "$T/perturbed.onnx" \
  --reference "$M" --shapes input:2x3x32x32 --json
json_check "no budget (json)" "assert d['budgets'] == [] and d['pass'] is True and d['verdict'] == 'compared', d"
expect_out "budgets met (json): verdict pass" 0 '"verdict": "pass"' "$KILN" verify "$M" --reference "$M" \
  --shapes input:2x3x32x32 --budget 'cosine>=0.99999' --json
# every output element NaN: no element where both are finite, so every metric is n/a (null), not a perfect match
expect_out "all-NaN output: metrics n/a" 3 "NaN/Inf: 20 elements" "$KILN" verify "$T/allnan.onnx" --reference "$M" \
  --shapes input:2x3x16x16 --samples 1 --budget 'cosine>=0.5'
grep -Eq '^  cosine +n/a +n/a$' "$T/out.txt" && grep -Eq '^  snr_db +n/a +n/a$' "$T/out.txt" \
  && grep -Eq '^  max_abs +n/a +n/a$' "$T/out.txt" && ok "all-NaN: rows say n/a" || bad "all-NaN rows: $(cat "$T/out.txt")"
grep -q "FAIL budget cosine>=0.5 on 'logits': n/a (no element where both are finite)" "$T/out.txt" \
  && ok "all-NaN: the budget's value n/a" || bad "all-NaN budget line: $(grep budget "$T/out.txt")"
expect_out "all-NaN output (json)" 3 '"verdict": "fail"' "$KILN" verify "$T/allnan.onnx" --reference "$M" \
  --shapes input:2x3x16x16 --samples 3 --json --budget 'snr>=10db'
json_check "all-NaN (json): metrics null" "
o = d['outputs'][0]
assert all(o[w][k] is None for w in ('worst', 'mean') for k in ('max_abs', 'max_rel', 'mean_abs', 'cosine', 'snr_db')), o
assert o['nonfinite'] == 60 and d['budgets'][0]['value'] is None and d['budgets'][0]['pass'] is False and not d['pass'], d"
expect_out "all-NaN per layer (json)" 3 '"per_layer"' "$KILN" verify "$T/allnan.onnx" --reference "$M" \
  --shapes input:1x3x16x16 --per-layer --json
json_check "all-NaN per layer: the logits row null, a jump" "
r = [x for x in d['per_layer']['layers'] if x['value'] == 'logits'][0]
assert r['cosine'] is None and r['snr_db'] is None and r['max_abs'] is None and r['mean_abs'] is None, r
assert r['nonfinite'] == 10 and r['jump'] is True, r"

expect_out "per-layer (perturbed)" 3 "<-- jump" "$KILN" verify "$T/perturbed.onnx" --reference "$M" \
  --shapes input:1x3x32x32 --per-layer --budget 'snr>=80db'
first=$(grep -m1 -- "<-- jump" "$T/out.txt" | awk '{print $2}')
[ "$first" = "Relu_2_output_0" ] && ok "first jump at the perturbed conv's output" || bad "first jump at '$first'"
grep -q "^matched [1-9][0-9]* of [0-9]* reference float values" "$T/out.txt" && ok "matched count" || bad "matched count"

expect_out "per-layer qdq (json)" 3 '"per_layer"' "$KILN" verify "$T/qdq.onnx" --reference "$M" \
  --shapes input:1x3x32x32 --per-layer --json --budget 'snr>=80db' --budget 'cosine>=0.99'
json_check "dequantized QuantizeLinear output compared" "
p = d['per_layer']
rows = {r['value']: r for r in p['layers']}
q = rows['MaxPool_0_output_0']   # its last row: the quantized form, after the float value's row
f = [r for r in p['layers'] if r['value'] == 'MaxPool_0_output_0' and r['matched_by'] == 'name'][0]
assert f['snr_db'] > 100 and f['jump'] is False and f['candidate_dtype'] == 'float32', f
assert q['matched_by'] == 'quantizes' and q['dequantized_from'] == 'mp_q' and q['candidate_dtype'] == 'uint8', q
assert q['node'] == 'MaxPool_0', q
assert 25 < q['snr_db'] < 60 and q['cosine'] > 0.999 and q['jump'] is True, q
first = [r for r in p['layers'] if r['jump']][0]
assert first['value'] == 'MaxPool_0_output_0', first
assert rows['Relu_0_output_0']['snr_db'] > 100 and rows['Relu_0_output_0']['dequantized_from'] is None
assert p['matched'] == len(rows) == len(p['layers']) - 1 > 5 and p['reference_values'] >= p['matched'], p
b = {x['metric']: x for x in d['budgets']}
assert b['cosine']['pass'] and not b['snr']['pass'], b"

expect_out "per-layer qdq fp8 (json)" 0 '"per_layer"' "$KILN" verify "$T/qdq8.onnx" --reference "$M" \
  --shapes input:1x3x32x32 --per-layer --json
json_check "FP8 QuantizeLinear output dequantized" "
q = {r['value']: r for r in d['per_layer']['layers']}['MaxPool_0_output_0']
assert q['dequantized_from'] == 'mp_q' and q['candidate_dtype'] != 'float32' and q['matched_by'] == 'quantizes', q
assert 15 < q['snr_db'] < 60 and q['jump'] is True, q"
expect_out "per-layer: quantized layers matched by node name" 0 '"per_layer"' "$KILN" verify "$T/qcand.onnx" \
  --reference "$T/qref.onnx" --per-layer --json --budget 'cosine>=0.99'
json_check "QLinearConv dequantized against the Relu it folds in, MaxPool on uint8" "
rows = {r['value']: r for r in d['per_layer']['layers']}
assert 'c_out' not in rows, rows.keys()
r = rows['r_out']
assert r['matched_by'] == 'node' and r['candidate_value'] == 'c_q' and r['candidate_dtype'] == 'uint8', r
assert 20 < r['snr_db'] < 70 and r['cosine'] > 0.99 and r['node'] == 'r', r
m = rows['mp_out']
assert m['matched_by'] == 'node' and m['candidate_value'] == 'mp_q' and m['candidate_dtype'] == 'uint8' and m['snr_db'] > 20, m
assert rows['y']['matched_by'] == 'name' and rows['y']['candidate_dtype'] == 'float32'
assert d['per_layer']['matched'] == 3, d['per_layer']"
"$KILN" verify "$T/qcand.onnx" --reference "$T/qref.onnx" --per-layer > "$T/out.txt" 2>&1
grep -q "r_out .*(by node name: c_q)" "$T/out.txt" && ok "text names the matched quantized value" || bad "text: $(cat "$T/out.txt")"
expect_out "per-layer, control characters in names" 0 "COMPARED ONLY" "$KILN" verify "$T/names.onnx" --reference "$T/names.onnx" \
  --shapes input:1x3x16x16 --per-layer
$PY -c "
import sys; b = open('$T/out.txt', 'rb').read()
assert b'x1b[31m_0' in b and not any(c < 0x20 and c != 0x0a for c in b), 'raw control bytes'" 2> "$T/py.txt" \
  && ok "names printed escaped" || bad "escaping: $(cat "$T/py.txt")"
expect_out "per-layer: QGemm" 0 '"per_layer"' "$KILN" verify "$T/gcand.onnx" --reference "$T/gref.onnx" --per-layer --json
json_check "QGemm output dequantized, matched to the Gemm" "
r = {x['value']: x for x in d['per_layer']['layers']}['g_out']
assert r['matched_by'] == 'node' and r['candidate_value'] == 'g_q' and r['candidate_dtype'] == 'uint8', r
assert 25 < r['snr_db'] < 70 and r['cosine'] > 0.99, r"
# a real INT8 engine (kiln build --precision int8): QLinearConv layers matched through fused_from;
# the error starts at the first quantized value, float values before it are exact
if "$KILN" build "$M" -o "$T/int8.kiln" --precision int8 --calib "$T/data" > "$T/b.txt" 2>&1; then
  expect_out "per-layer on an int8 engine" 3 '"per_layer"' "$KILN" verify "$T/int8.kiln" --reference "$M" \
    --data "$T/data" --samples 1 --per-layer --json --budget 'snr>=80db'
  json_check "int8 layers compared dequantized" "
L = d['per_layer']['layers']
q = [r for r in L if r['candidate_dtype'] in ('int8', 'uint8')]
assert len([r for r in q if r['matched_by'] == 'node']) >= 3 and all(r['dequantized_from'] for r in q), L
k = L.index(q[0])
assert all(r['snr_db'] > 100 and not r['jump'] for r in L[:k]) and L[k]['jump'], L[:k + 1]
assert d['per_layer']['matched'] >= 10 and d['outputs'][0]['worst']['snr_db'] < 80"
else
  bad "kiln build --precision int8: $(tail -2 "$T/b.txt")"
fi
expect_out "--data with --batch" 0 '"samples": 6' "$KILN" verify "$M" --reference "$M" --data "$T/data" --batch 2 --json
json_check "data samples" "assert d['inputs'] == 'data' and d['outputs'][0]['shape'] == [2, 10]"
expect_out "--data --samples caps" 0 '"samples": 2' "$KILN" verify "$M" --reference "$M" --data "$T/data" --samples 2 --json
expect_out "--data, several inputs (NAME_KEY.npy)" 0 '"samples": 2' "$KILN" verify models/tiny_bert.onnx \
  --reference models/tiny_bert.onnx --data "$T/bert" --json --budget 'cosine>=0.99999'
json_check "two outputs, hidden state per token" "
o = {x['name']: x for x in d['outputs']}
assert o['last_hidden_state']['shape'] == [2, 7, 64] and o['last_hidden_state']['rows'] == 28, o
assert o['pooler_output']['shape'] == [2, 64] and len(d['budgets']) == 2 and d['pass'], d"
rm "$T/bert/token_type_ids_b.npy"
expect_out "--data, a missing input file" 1 "token_type_ids_b.npy" "$KILN" verify models/tiny_bert.onnx \
  --reference models/tiny_bert.onnx --data "$T/bert"
expect_out "--input file" 0 "1 sample (input files)" "$KILN" verify "$M" --reference "$M" --input "input=$T/x1.npy"

expect_out "no reference" 2 "need --reference" "$KILN" verify "$M"
expect_out "malformed budget" 2 "bad budget 'cosine>0.9'" "$KILN" verify "$M" --reference "$M" --budget 'cosine>0.9'
expect_out "budget wrong direction" 2 "its budget is maxrel<=X" "$KILN" verify "$M" --reference "$M" --budget 'maxrel>=0.1'
expect_out "unknown option" 2 "unknown option" "$KILN" verify "$M" --reference "$M" --bogus
expect_out "--data excludes --input" 2 "excludes" "$KILN" verify "$M" --reference "$M" --data "$T/data" --input "input=$T/x1.npy"
expect_out "bad --samples" 2 "samples" "$KILN" verify "$M" --reference "$M" --samples 0
expect_out "missing data dir" 1 "cannot open directory" "$KILN" verify "$M" --reference "$M" --data "$T/nope"
mkdir -p "$T/empty"
expect_out "empty data dir" 1 "holds no" "$KILN" verify "$M" --reference "$M" --data "$T/empty"
expect_out "missing reference" 1 "loading the reference" "$KILN" verify "$M" --reference "$T/nope.onnx"
expect_out "reference with other outputs" 1 "the reference has no output" "$KILN" verify "$M" --reference models/tiny_bert.onnx

# --device cuda through tests/fakedev (a device module on host memory, $2): every sample runs in one context, so
# samples 4.. replay the CUDA graph captured at the third; an elementwise model runs entirely on that device, tiny_cnn
# with its convolutions falling back to the CPU
if [ -n "${2:-}" ] && [ -f "$2" ]; then
  $PY - "$T" <<'PY' || bad "generating the elementwise model"
import sys, os, numpy as np, onnx
from onnx import helper, numpy_helper, TensorProto
x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 5, 4])
y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
c = numpy_helper.from_array(np.array([0.5, -1.0, 2.0], np.float32).reshape(1, 3, 1, 1), "c")
g = helper.make_graph([helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Mul", ["r", "c"], ["m"]),
                       helper.make_node("Sigmoid", ["m"], ["s"]), helper.make_node("Add", ["s", "x"], ["y"])],
                      "elementwise", [x], [y], [c])
onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), os.path.join(sys.argv[1], "ew.onnx"))
g.input[0].CopyFrom(helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 5, 4]))   # a dynamic batch
onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), os.path.join(sys.argv[1], "ewd.onnx"))
# a CPU-run Split into 20 parts whose outputs the device's Sigmoids read (moved to the device after the Split)
x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 20, 3, 4])
parts = ["p%d" % i for i in range(20)]
nodes = [helper.make_node("Split", ["x"], parts, axis=1)]
nodes += [helper.make_node("Sigmoid", [p], ["s" + p]) for p in parts]
nodes += [helper.make_node("Concat", ["s" + p for p in parts], ["y"], axis=1)]
g = helper.make_graph(nodes, "split20", [x], [y])
onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), os.path.join(sys.argv[1], "split20.onnx"))
PY
  expect_out "fake device: replays match" 0 "PASS" env KILN_CUDA_MODULE="$2" "$KILN" verify "$T/ew.onnx" \
    --reference "$T/ew.onnx" --device cuda --samples 6 --budget 'maxabs<=1e-6'
  expect_out "fake device: fallbacks" 0 "PASS" env KILN_CUDA_MODULE="$2" "$KILN" verify "$M" --reference "$M" \
    --device cuda --samples 5 --shapes input:2x3x32x32 --budget 'cosine>=0.99999'
  # per layer on the device: every value the fake device holds (4-D ones channels-last) copied back for the compare
  expect_out "fake device: per layer" 0 "matched 4 of 4" env KILN_CUDA_MODULE="$2" "$KILN" verify "$T/ew.onnx" \
    --reference "$T/ew.onnx" --device cuda --samples 1 --per-layer
  # a value held only in E4M3 on the device (FP8 storage) cannot be read back: counted and said, not compared
  expect_out "fake device: per layer, an E4M3-held value" 0 "1 more candidate value held only in E4M3" env \
    KILN_CUDA_MODULE="$2" KILN_FAKEDEV_E4M3=Sigmoid "$KILN" verify "$T/ew.onnx" --reference "$T/ew.onnx" --device cuda \
    --samples 1 --per-layer
  grep -q "matched 3 of 4" "$T/out.txt" && ok "fake device: the other values compared" \
    || bad "fake device: the other values compared: $(grep matched "$T/out.txt")"
  expect_out "fake device: per layer, E4M3 (json)" 0 '"device_e4m3_values": 1' env KILN_CUDA_MODULE="$2" \
    KILN_FAKEDEV_E4M3=Sigmoid "$KILN" verify "$T/ew.onnx" --reference "$T/ew.onnx" --device cuda --samples 1 \
    --per-layer --json
  # the storage the device realized, said per layer and counted: the fake module flags Relu's output as FP16-held
  expect_out "fake device: inspect marks half storage" 0 "1 layer held a float32 output in FP16" env \
    KILN_CUDA_MODULE="$2" KILN_FAKEDEV_F16=Relu "$KILN" inspect "$T/ew.onnx" --device cuda
  grep -Eq '^0 .*float32\[2,3,5,4\] fp16 ' "$T/out.txt" && ok "fake device: the Relu row says fp16" \
    || bad "fake device: the Relu row says fp16: $(grep -E '^0 ' "$T/out.txt")"
  expect_out "fake device: inspect --json half storage" 0 '"half_storage_layers"' env KILN_CUDA_MODULE="$2" \
    KILN_FAKEDEV_F16=Relu "$KILN" inspect "$T/ew.onnx" --device cuda --json
  json_check "fake device: output_storage as realized" "
L = d['layers']; assert [l['output_storage'] for l in L] == ['fp16', None, None, None], [l['output_storage'] for l in L]
assert d['device']['half_storage_layers'] == 1, d['device']"
  expect_out "fake device: bench counts half storage" 0 '"half_storage_layers": 1' env KILN_CUDA_MODULE="$2" \
    KILN_FAKEDEV_F16=Relu "$KILN" bench "$T/ew.onnx" --device cuda --iterations 5 --json
  expect_out "fake device: bench without half storage" 0 '"half_storage_layers": 0' env KILN_CUDA_MODULE="$2" \
    "$KILN" bench "$T/ew.onnx" --device cuda --iterations 5 --json
  expect_out "fake device: verify says half storage" 0 "half storage: 1 layer held a float32 output" env \
    KILN_CUDA_MODULE="$2" KILN_FAKEDEV_F16=Relu "$KILN" verify "$T/ew.onnx" --reference "$T/ew.onnx" --device cuda \
    --samples 2
  expect_out "fake device: verify --json half storage" 0 '"half_storage_layers": 1' env KILN_CUDA_MODULE="$2" \
    KILN_FAKEDEV_F16=Relu "$KILN" verify "$T/ew.onnx" --reference "$T/ew.onnx" --device cuda --samples 2 --json
  expect_out "fake device: verify without half storage says nothing" 0 "COMPARED ONLY" env KILN_CUDA_MODULE="$2" "$KILN" \
    verify "$T/ew.onnx" --reference "$T/ew.onnx" --device cuda --samples 2
  grep -q "half storage" "$T/out.txt" && bad "fake device: verify spoke of half storage without any" \
    || ok "fake device: no half-storage line without it"
  expect_out "fake device: per layer, a 20-output node" 0 "matched 41 of 41" env KILN_CUDA_MODULE="$2" "$KILN" verify \
    "$T/split20.onnx" --reference "$T/split20.onnx" --device cuda --samples 1 --per-layer --budget 'maxabs<=1e-6'
  expect_out "fake device: per layer (json)" 0 '"per_layer"' env KILN_CUDA_MODULE="$2" "$KILN" verify "$M" \
    --reference "$M" --device cuda --samples 1 --shapes input:2x3x32x32 --per-layer --json
  json_check "fake device: per layer values match" "
p = d['per_layer']; L = p['layers']
assert d['device'] == 'cuda' and p['jumps'] == 0 and p['matched'] >= 10 and len(L) == p['matched'] and p['device_e4m3_values'] == 0, p
assert all(r['cosine'] >= 0.999999 and r['nonfinite'] == 0 for r in L), [(r['value'], r['cosine']) for r in L]"
  # device tactics: kiln build --device cuda stores the choices timed on the device (the fake module "times" one per
  # op and dims: 4 at the min shapes, 4 more at the opt shapes), a context of the saved engine times nothing
  FD=(env KILN_CUDA_MODULE="$2")
  expect_out "fake device: build stores tactics" 0 "device tactics: 8 kernel choices timed on fake device" \
    "${FD[@]}" "$KILN" build "$T/ewd.onnx" -o "$T/ew.kiln" --device cuda --min-shapes x:1x3x5x4 \
    --opt-shapes x:2x3x5x4 --max-shapes x:4x3x5x4
  expect_out "fake device: inspect shows tactics" 0 "device tactics: 8 kernel choices timed on fake device" \
    "$KILN" inspect "$T/ew.kiln"
  expect_out "fake device: inspect --json" 0 "device_tactics" "$KILN" inspect "$T/ew.kiln" --json
  json_check "fake device: inspect --json tactics" \
    "t = d['device_tactics']; assert t['choices'] == 8 and t['timed_on'].startswith('fake device'), t"
  expect_out "fake device: bench takes the tactics" 0 "throughput" "${FD[@]}" "$KILN" bench "$T/ew.kiln" \
    --device cuda --iterations 3 --shapes x:2x3x5x4 --json
  json_check "fake device: nothing timed" "t = d['tactics']; assert t == {'loaded': 8, 'timed': 0}, t"
  expect_out "fake device: bench at other shapes times them" 0 "throughput" "${FD[@]}" "$KILN" bench "$T/ew.kiln" \
    --device cuda --iterations 3 --shapes x:3x3x5x4 --json
  json_check "fake device: timed at new shapes" "t = d['tactics']; assert t == {'loaded': 8, 'timed': 4}, t"
  expect_out "fake device: other versions time again" 0 "timed again" env KILN_CUDA_MODULE="$2" \
    KILN_FAKEDEV_SIGNATURE="fake device (host memory, tests/fakedev), driver 2" "$KILN" bench "$T/ew.kiln" \
    --device cuda --iterations 3 --shapes x:2x3x5x4
  expect_out "fake device: another GPU refuses the engine" 1 "rebuild it here" env KILN_CUDA_MODULE="$2" \
    KILN_FAKEDEV_SIGNATURE="another GPU" "$KILN" bench "$T/ew.kiln" --device cuda --iterations 3
fi
finish

#!/usr/bin/env bash
# Which layers --precision lowers (tests/precision/gen_weight_chains.py's models): Conv / MatMul / Gemm whose
# constant weight reaches them through Identity (PyTorch's tied weights), Reshape, Transpose, Cast (FP16-stored
# weights) or a chain of them are lowered like those reading an initializer, in every precision -- requested,
# realized (kiln inspect) and really computed so (kiln verify --per-layer: the first lowered layer's error jumps,
# the fp32 ones before it match); int8 keeps the first and last of them in fp32 and says so (not "attention").
# A ConvTranspose with a constant weight has no kernel in any reduced precision: every --precision keeps it in fp32
# and says so ("kept in fp32: ct (ConvTranspose: no kernel in P)"), requested and realized fp32; a rule asking
# another precision of it fails the build naming it, or is listed with --precision-fallback.
set -uo pipefail
KILN=$1
. "$(dirname "$0")/../lib.sh"
# check NAME PYTHON: runs Python with `L` = the layers of $T/inspect.json, `V` = the per-layer rows of $T/verify.json
check() {
  local name=$1 code=$2
  if $PY - "$T" > "$T/py.txt" 2>&1 <<PYEOF
import json, sys
t = sys.argv[1]
L = json.load(open(t + "/inspect.json"))["layers"]
try:
    V = json.load(open(t + "/verify.json"))
except FileNotFoundError:
    V = None
$code
PYEOF
  then ok "$name"; cat "$T/py.txt"; else bad "$name: $(tail -3 "$T/py.txt")"; fi
}
inspect() { "$KILN" inspect "$1" --json > "$T/inspect.json" 2> "$T/stderr.txt" || bad "inspect $1: $(tail -1 "$T/stderr.txt")"; }
verify() {   # ENGINE MODEL: per-layer comparison with the model on one validation sample
  rm -f "$T/verify.json"
  "$KILN" verify "$1" --reference "$T/$2.onnx" --data "$T/val_$2" --samples 1 --per-layer --json > "$T/verify.json" \
    2> "$T/stderr.txt" || bad "verify $1: $(tail -1 "$T/stderr.txt")"
}

$PY tests/precision/gen_weight_chains.py "$T" || { echo "FAIL gen_weight_chains.py"; exit 1; }

# every weight layer of chains.onnx reads its weight through another op but c0; the output's SNR floor per precision
declare -A SNR=([fp16]=55 [bf16]=35 [int8]=25 [fp8]=18 [nvfp4]=12 [mxfp4]=6 [int4]=12)
for p in fp16 bf16 int8 fp8 nvfp4 mxfp4 int4; do
  extra=()
  case $p in int8|fp8) extra=(--calib "$T/cal_chains") ;; esac
  expect_ok "chains $p" "$KILN" build "$T/chains.onnx" -o "$T/ch_$p.kiln" --precision $p "${extra[@]}"
  cp "$T/out.txt" "$T/build_$p.txt"
  inspect "$T/ch_$p.kiln"
  verify "$T/ch_$p.kiln" chains
  check "chains $p: every weight layer lowered, computed so" "
names = ['c0', 'c1', 'c2', 'm0', 'g0', 'm1']
by = {l['name']: l for l in L}
ends = '$p' not in ('fp16', 'bf16')   # the low-bit precisions keep the first and last weight layers in fp32
for n in names:
    want = 'fp32' if ends and n in ('c0', 'm1') else '$p'
    assert by[n]['requested_precision'] == by[n]['precision'] == want, (n, by[n]['requested_precision'], by[n]['precision'])
rows = V['per_layer']['layers']
first = 'c1' if ends else 'c0'
for r in rows:   # fp32 layers before the first lowered one match the model; that one's output does not
    if r['candidate_op'] == 'QuantizeLinear':
        continue   # (int8: the first int8 layer's quantized input)
    if r['candidate_layer'] == first:
        assert r['snr_db'] < 100, r
        break
    assert r['snr_db'] > 100, r
else:
    raise AssertionError('no row of ' + first)
snr = V['outputs'][0]['worst']['snr_db']
print('$p: output SNR', round(snr, 2), 'dB')
assert ${SNR[$p]} < snr < 100, snr"
done
grep -q "both operands computed" "$T/build_int8.txt" && bad "int8 calls weight layers attention: $(cat "$T/build_int8.txt")" \
  || ok "int8: no weight layer called attention"
grep -q "kept in fp32: c0 (Conv, the first layer" "$T/build_int8.txt" && grep -q "kept in fp32: m1 (MatMul, the last layer" \
  "$T/build_int8.txt" && ok "int8: first and last weight layers said kept" || bad "int8 report: $(cat "$T/build_int8.txt")"
# without the passes nothing folds the chains into constants: the requests cannot be met, and the build says so
expect_rc "chains bf16 --no-optimize: unmet, said" 1 "cannot run in the requested precision: c1 (Conv: fp32)" \
  "$KILN" build "$T/chains.onnx" -o "$T/x.kiln" --precision bf16 --no-optimize

# ConvTranspose (convt.onnx: c0 -> ct -> c1 -> c2): kept in fp32 in every precision, said, the convolutions lowered
for p in fp16 bf16 int8 fp8 nvfp4 int4; do
  extra=()
  case $p in int8|fp8) extra=(--calib "$T/cal_convt") ;; esac
  expect_ok "convt $p" "$KILN" build "$T/convt.onnx" -o "$T/ct_$p.kiln" --precision $p "${extra[@]}"
  grep -q "^kept in fp32: ct (ConvTranspose: no kernel in $p)$" "$T/out.txt" && ok "convt $p: kept in fp32, said" \
    || bad "convt $p report: $(cat "$T/out.txt")"
  inspect "$T/ct_$p.kiln"
  check "convt $p: ConvTranspose requested and realized fp32, convolutions lowered" "
by = {l['name']: l for l in L}
assert by['ct']['op'] == 'ConvTranspose' and by['ct']['requested_precision'] == by['ct']['precision'] == 'fp32', by['ct']
low = ['c0', 'c1', 'c2'] if '$p' in ('fp16', 'bf16') else ['c1']
assert all(by[n]['requested_precision'] == by[n]['precision'] == '$p' for n in low), [by[n] for n in low]"
done
"$KILN" bench "$T/ct_fp16.kiln" --iterations 1 --warmup 0 --json > "$T/bench.json" 2> "$T/stderr.txt" || bad "bench convt fp16"
$PY -c "
import json; d = json.load(open('$T/bench.json'))
assert d['precision'] == 'mixed' and d['layer_precisions']['fp32'] >= 1, d" 2> "$T/py.txt" \
  && ok "bench: an fp16 build with a kept ConvTranspose is mixed" || bad "bench convt: $(tail -1 "$T/py.txt")"
expect_ok "convt fp16 with --precision-fallback" "$KILN" build "$T/convt.onnx" -o "$T/x.kiln" --precision fp16 \
  --precision-fallback
grep -q "^kept in fp32: ct (ConvTranspose: no kernel in fp16)$" "$T/out.txt" && ok "fallback build says it too" \
  || bad "convt fallback report: $(cat "$T/out.txt")"
expect_rc "convt asked fp16 by a rule: unmet" 1 "1 layer cannot run in the requested precision: ct (ConvTranspose: fp32)" \
  "$KILN" build "$T/convt.onnx" -o "$T/x.kiln" --precision fp16 --layer-precision 'ct:fp16'
expect_ok "convt asked fp16 by a rule, fallback" "$KILN" build "$T/convt.onnx" -o "$T/x.kiln" --precision fp16 \
  --layer-precision 'ConvTranspose:fp16' --precision-fallback
grep -q "^fallback: ct (ConvTranspose) requested fp16, runs in fp32$" "$T/out.txt" && ok "convt fallback listed" \
  || bad "convt fallback: $(cat "$T/out.txt")"
expect_ok "convt fp32" "$KILN" build "$T/convt.onnx" -o "$T/x.kiln" --precision fp32
grep -q "kept in" "$T/out.txt" && bad "fp32 build says kept: $(cat "$T/out.txt")" || ok "fp32: nothing kept, nothing said"

finish "precision weights CLI"

#!/usr/bin/env bash
# What kiln realizes and reports for a model's own Q/DQ (tests/precision/gen_qdq_explicit.py, docs/PRECISION.md
# "Explicit quantization"): the realized precision of QuantizeLinear / DequantizeLinear follows their quantized type
# (fp8, int16, int8) and requests are checked against it.
set -uo pipefail
KILN=$1
. "$(dirname "$0")/../lib.sh"
$PY tests/precision/gen_qdq_explicit.py "$T" || { echo "FAIL: generating the models"; exit 1; }
mkdir -p "$T/cal8" "$T/calq"
cp "$T/q_fp8_x.npy" "$T/cal8/a.npy"
cp "$T/qat3_x.npy" "$T/calq/a.npy"
# precs ENGINE: "name=precision ..." of its layers (kiln inspect --json)
precs() {
  "$KILN" inspect "$1" --json > "$T/inspect.json" 2> "$T/stderr.txt" || { echo "inspect failed: $(tail -1 "$T/stderr.txt")"; return; }
  $PY -c "import json,sys; print(' '.join(f\"{l['name'] or l['op']}={l['precision']}\" for l in json.load(open(sys.argv[1]))['layers']))" "$T/inspect.json"
}
# has NAME ENGINE WORD...: each WORD is in the engine's precs
has() {
  local name=$1 e=$2; shift 2
  local p; p=" $(precs "$e") "
  for w in "$@"; do case "$p" in *" $w "*) ;; *) bad "$name: want $w, have$p"; return;; esac; done
  ok "$name"
}

# ---- F3: Q/DQ realize their quantized type ----
expect_ok "build fp8 e4m3 Q/DQ" "$KILN" build "$T/q_fp8.onnx" -o "$T/q_fp8.kiln"
has "e4m3 Q/DQ realized fp8" "$T/q_fp8.kiln" q=fp8 dq=fp8
expect_ok "build fp8 e5m2 Q/DQ" "$KILN" build "$T/q_fp8e5.onnx" -o "$T/q_fp8e5.kiln"
has "e5m2 Q/DQ realized fp8" "$T/q_fp8e5.kiln" q=fp8 dq=fp8
expect_ok "build int16 Q/DQ" "$KILN" build "$T/q16.onnx" -o "$T/q16.kiln"
has "int16 Q/DQ realized int16" "$T/q16.kiln" q=int16 dq=int16
expect_ok "build int8 Q/DQ" "$KILN" build "$T/conv_pc.onnx" -o "$T/conv_pc.kiln"
has "uint8 Q realized int8" "$T/conv_pc.kiln" qx=int8 conv=int8
expect_err "int8 asked of an fp8 quantizer: unmet" "q (QuantizeLinear: fp8)" \
  "$KILN" build "$T/q_fp8.onnx" -o "$T/r.kiln" --layer-precision q:int8 --calib "$T/cal8"
expect_ok "fp8 asked of an fp8 quantizer: honoured" \
  "$KILN" build "$T/q_fp8.onnx" -o "$T/r.kiln" --layer-precision q:fp8 --layer-precision dq:fp8 --calib "$T/cal8"
has "fp8 requests kept" "$T/r.kiln" q=fp8 dq=fp8
expect_ok "int16 asked of an int16 quantizer: honoured" \
  "$KILN" build "$T/q16.onnx" -o "$T/r.kiln" --layer-precision 'QuantizeLinear:int16'
expect_err "int8 asked of an int16 quantizer: unmet" "q (QuantizeLinear: int16)" \
  "$KILN" build "$T/q16.onnx" -o "$T/r.kiln" --layer-precision 'QuantizeLinear:int8' --calib "$T/cal8"
expect_err "--precision int16 refused" "only a model's own 16-bit" \
  "$KILN" build "$T/q16.onnx" -o "$T/r.kiln" --precision int16

# ---- F4: explicit Q/DQ take precedence over --precision and calibration ----
# same NAME A B: the two npy outputs are equal (max |a - b| <= TOL, default 0)
same() {
  if $PY -c "import numpy as np,sys; a,b=np.load(sys.argv[1]),np.load(sys.argv[2]); d=float(np.abs(a.astype(np.float64)-b).max()); print('max diff',d); sys.exit(0 if a.shape==b.shape and d<=float(sys.argv[3]) else 1)" "$2" "$3" "${4:-0}" > "$T/same.txt" 2>&1
  then ok "$1"; else bad "$1: $(cat "$T/same.txt")"; fi
}
runx() { "$KILN" run "$1" --input "x=$2" --output-dir "$3" > /dev/null 2>&1 || bad "run $1"; }
expect_ok "qat3 plain" "$KILN" build "$T/qat3.onnx" -o "$T/qat3.kiln"
"$KILN" run "$T/qat3.onnx" --no-optimize --input "x=$T/qat3_x.npy" --output-dir "$T/qat3.ref" > /dev/null 2>&1 || bad "run qat3 reference"
runx "$T/qat3.kiln" "$T/qat3_x.npy" "$T/qat3.o"
same "qat3 plain = the model's Q/DQ semantics" "$T/qat3.o/y.npy" "$T/qat3.ref/y.npy" 1e-5
expect_ok "qat3 --precision int8" "$KILN" build "$T/qat3.onnx" -o "$T/qat3i8.kiln" --precision int8 --calib "$T/calq"
grep -q "kept in fp32" "$T/out.txt" && bad "first/last rule applied to explicitly quantized layers: $(grep kept "$T/out.txt")" || ok "no first/last override of explicit layers"
grep -q "explicit Q/DQ: 3 layers keep the model's own quantization" "$T/out.txt" && ok "explicit layers said" || bad "explicit line: $(cat "$T/out.txt")"
has "qat3 int8: the model's convs stay integer" "$T/qat3i8.kiln" conv0=int8 conv1=int8
runx "$T/qat3i8.kiln" "$T/qat3_x.npy" "$T/qat3i8.o"
same "qat3 --precision int8 = the model's Q/DQ semantics" "$T/qat3i8.o/y.npy" "$T/qat3.ref/y.npy" 1e-5
"$KILN" inspect "$T/qat3i8.kiln" --json > "$T/i.json" 2>&1
grep -q '"QLookup"\|__kiln_quantize' "$T/i.json" && bad "calibrated Q/DQ stacked on the model's" || ok "no calibrated Q/DQ on explicit layers"
for p in int8 fp16 bf16 fp8 nvfp4; do
  expect_ok "one-layer Q/DQ model --precision $p" "$KILN" build "$T/conv_pc.onnx" -o "$T/pc_$p.kiln" --precision $p --calib "$T/calq"
  has "one-layer Q/DQ --precision $p: int8 realized" "$T/pc_$p.kiln" conv=int8
  # int8 asked of a model whose only layer is its own Q/DQ's: the calibration data goes unused, and is said so
  case $p in int8)
    grep -q "calibration: not run (the calibration data given is unused)" "$T/out.txt" &&
      ok "one-layer Q/DQ --precision $p: the unused --calib said" ||
      bad "one-layer Q/DQ --precision $p: --calib unused silently: $(tr '\n' ' ' < "$T/out.txt")" ;;
  esac
done
expect_ok "int8 asked of an explicit layer: honoured, no calibration needed" \
  "$KILN" build "$T/conv_pc.onnx" -o "$T/r.kiln" --layer-precision conv:int8
expect_err "fp16 asked of an explicit int8 layer: unmet, said so" "conv (QLinearConv: int8, as the model's own Q/DQ" \
  "$KILN" build "$T/conv_pc.onnx" -o "$T/r.kiln" --layer-precision conv:fp16
# a float layer before the model's own Q: calibrated input, the model's Q as its output quantization (no second
# rounding: no QLookup requantization), the model's conv1 untouched
expect_ok "mixed: float conv0 asked int8 before the model's Q" \
  "$KILN" build "$T/mixed.onnx" -o "$T/mixed.kiln" --precision int8 --layer-precision conv0:int8 --calib "$T/calq"
grep -q "calibration: not run" "$T/out.txt" && bad "mixed: calibration said unused where it ran" ||
  ok "mixed: calibration run, not said unused"
has "mixed: conv0 integer" "$T/mixed.kiln" conv0=int8
"$KILN" inspect "$T/mixed.kiln" --json > "$T/i.json" 2>&1
grep -q '"QLookup"' "$T/i.json" && bad "mixed: conv0's output rounded twice (QLookup)" || ok "mixed: conv0 writes the model's Q directly"

# ---- F6: explicit Q/DQ layers left float are said, one line each, and stay numerically right ----
for c in "conv_floatout|conv (Conv) runs in fp32.*not quantized by a QuantizeLinear" \
         "mm_floatout|mm (MatMul) runs in fp32.*not quantized by a QuantizeLinear" \
         "conv_actpc|conv (Conv) runs in fp32.*quantized per channel" \
         "conv_axis1|conv (.*Conv) runs in fp32.*weight scales are neither" \
         "gemm_tb_ax1|gemm (Gemm) runs in fp32.*weight scales are neither" \
         "qat3|conv2 (.*Conv) runs in fp32.*not quantized by a QuantizeLinear"; do
  m=${c%%|*} pat=${c#*|}
  expect_ok "build $m" "$KILN" build "$T/$m.onnx" -o "$T/$m.kiln"
  grep -q "not fused: $pat" "$T/out.txt" && ok "$m: not fused said" || bad "$m: no 'not fused' line: $(cat "$T/out.txt")"
  [ "$(grep -c "not fused:" "$T/out.txt")" = 1 ] && ok "$m: one line" || bad "$m: $(grep -c "not fused:" "$T/out.txt") lines"
  "$KILN" run "$T/$m.onnx" --no-optimize --input "x=$T/${m}_x.npy" --output-dir "$T/$m.ref" > /dev/null 2>&1 || bad "run $m reference"
  runx "$T/$m.kiln" "$T/${m}_x.npy" "$T/$m.o"
  same "$m: fake quantization = the model's semantics" "$T/$m.o/y.npy" "$T/$m.ref/y.npy" 1e-4
done
expect_ok "fused conv: no 'not fused' line" "$KILN" build "$T/conv_pc.onnx" -o "$T/r.kiln"
grep -q "not fused" "$T/out.txt" && bad "conv_pc: $(cat "$T/out.txt")" || ok "conv_pc: silent when fused"

finish

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

finish

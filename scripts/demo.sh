#!/usr/bin/env bash
# The demo: kiln imports and runs the three real PaddleOCR models (text detector, recognizer,
# orientation classifier) and checks every output against ONNX Runtime on the same inputs.
set -euo pipefail
BUILD=${1:-build}
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
KILN="$BUILD/kiln"
OUT=out/demo
rm -rf "$OUT"
mkdir -p "$OUT"
PY=/usr/bin/python3
now() { date +%s.%N; }

echo "== kiln info (text detector) =="
"$KILN" info models/ocr/ch_PP-OCRv4_det_infer.onnx | sed -n '1,12p'
echo

run_one() { # name model shape
  local name=$1 model=$2 shape=$3
  local d="$OUT/$name"
  mkdir -p "$d/in"
  $PY scripts/make_inputs.py "$model" --shape "x=$shape" --out "$d/in" --seed 1 >/dev/null
  local t0 t1 t2
  t0=$(now)
  "$KILN" run "$model" --input "x=$d/in/x.npy" --output-dir "$d/kiln" >/dev/null
  t1=$(now)
  node scripts/ort_run.js "$model" --input "x=$d/in/x.npy" --output-dir "$d/ort" >/dev/null
  t2=$(now)
  printf "== %-4s %-28s x=%-12s kiln %.2fs  onnxruntime %.2fs (wall, incl. load)\n" "$name" "$(basename "$model")" \
    "$shape" "$($PY -c "print($t1 - $t0)")" "$($PY -c "print($t2 - $t1)")"
  $PY scripts/compare_npy.py "$d/kiln" "$d/ort" --rtol 1e-3 --atol 1e-4
}

run_one det models/ocr/ch_PP-OCRv4_det_infer.onnx 1x3x640x640
run_one rec models/ocr/ch_PP-OCRv4_rec_infer.onnx 1x3x48x320
run_one cls models/ocr/ch_ppocr_mobile_v2.0_cls_infer.onnx 1x3x48x192
echo
echo "demo: all kiln outputs match ONNX Runtime (outputs under $OUT)"

#!/usr/bin/env bash
# The demo: kiln imports the three real PaddleOCR models (text detector, recognizer, orientation
# classifier), optimizes each into an engine file, checks the engine's outputs against ONNX Runtime
# on the same inputs, and benchmarks both side by side on this CPU.
set -euo pipefail
BUILD=${1:-build}
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
KILN="$BUILD/kiln"
OUT=out/demo
rm -rf "$OUT"
mkdir -p "$OUT"
PY=/usr/bin/python3
THREADS=${THREADS:-$(nproc)}
ITERS=${ITERS:-20}

echo "== kiln info (text detector) =="
"$KILN" info models/ocr/ch_PP-OCRv4_det_infer.onnx | sed -n '1,10p'
echo

run_one() { # name model input-shape min max
  local name=$1 model=$2 shape=$3 min=$4 max=$5
  local d="$OUT/$name"
  mkdir -p "$d/in"
  echo "== $name: $(basename "$model"), x=$shape"
  "$KILN" build "$model" -o "$d/$name.kiln" --min-shapes "x:$min" --opt-shapes "x:$shape" --max-shapes "x:$max" \
    --passes-report | grep -E "^nodes|^engine"
  $PY scripts/make_inputs.py "$model" --shape "x=$shape" --out "$d/in" --seed 1 >/dev/null
  "$KILN" run "$d/$name.kiln" --input "x=$d/in/x.npy" --output-dir "$d/kiln" >/dev/null
  node scripts/ort_run.js "$model" --input "x=$d/in/x.npy" --output-dir "$d/ort" >/dev/null 2>&1
  $PY scripts/compare_npy.py "$d/kiln" "$d/ort" --rtol 1e-3 --atol 1e-4 | sed 's/^/   /'
  local k o
  k=$("$KILN" bench "$d/$name.kiln" --shapes "x:$shape" --threads "$THREADS" --iterations "$ITERS" --json)
  o=$(node scripts/ort_run.js "$model" --input "x=$d/in/x.npy" --output-dir "$d/ort" --threads "$THREADS" --bench "$ITERS" 2>/dev/null | tail -1)
  $PY - "$k" "$o" <<'PYEOF'
import json, sys
k, o = json.loads(sys.argv[1]), json.loads(sys.argv[2])
km, om = k["latency_ms"]["p50"], o["ort_ms_p50"]
print(f"   latency p50: kiln {km:.2f} ms, onnxruntime {om:.2f} ms  (kiln/ort = {km/om:.2f}x, {k['threads']} threads)")
PYEOF
  echo
}

run_one det models/ocr/ch_PP-OCRv4_det_infer.onnx 1x3x640x640 1x3x32x32 1x3x960x960
run_one rec models/ocr/ch_PP-OCRv4_rec_infer.onnx 1x3x48x320 1x3x48x32 8x3x48x1280
run_one cls models/ocr/ch_ppocr_mobile_v2.0_cls_infer.onnx 1x3x48x192 1x3x48x32 16x3x48x640
echo "demo: every engine's outputs match ONNX Runtime (artifacts under $OUT)"

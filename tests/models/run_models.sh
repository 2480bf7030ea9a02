#!/usr/bin/env bash
# The five reference models, two input shapes each: kiln's outputs must match ONNX Runtime's
# (npm onnxruntime-node, run here on the same inputs) within rtol 1e-3 / atol 1e-4.
set -uo pipefail
KILN=$1
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$ROOT"
PY=/usr/bin/python3
OUT="$(dirname "$KILN")/models-vs-ort"
rm -rf "$OUT"
mkdir -p "$OUT"
fails=0
passes=0

check() { # label model shape-args...
  local label=$1 model=$2
  shift 2
  local d="$OUT/$label"
  mkdir -p "$d/in"
  if [ ! -f "$model" ]; then
    echo "FAIL $label: $model missing (run scripts/bootstrap.sh)"
    fails=$((fails + 1))
    return
  fi
  local shapes=() inputs=()
  for s in "$@"; do shapes+=(--shape "$s"); done
  $PY scripts/make_inputs.py "$model" "${shapes[@]}" --out "$d/in" --seed 7 >/dev/null || { echo "FAIL $label: make_inputs"; fails=$((fails+1)); return; }
  for f in "$d"/in/*.npy; do n=$(basename "$f" .npy); inputs+=(--input "$n=$f"); done
  local t0 t1 t2
  t0=$(date +%s.%N)
  if ! "$KILN" run "$model" "${inputs[@]}" --output-dir "$d/kiln" > "$d/kiln.log" 2>&1; then
    echo "FAIL $label: kiln run failed: $(tail -1 "$d/kiln.log")"
    fails=$((fails + 1))
    return
  fi
  t1=$(date +%s.%N)
  if ! node scripts/ort_run.js "$model" "${inputs[@]}" --output-dir "$d/ort" > "$d/ort.log" 2>&1; then
    echo "FAIL $label: onnxruntime failed: $(tail -1 "$d/ort.log")"
    fails=$((fails + 1))
    return
  fi
  t2=$(date +%s.%N)
  if $PY scripts/compare_npy.py "$d/kiln" "$d/ort" --rtol 1e-3 --atol 1e-4 > "$d/compare.log" 2>&1; then
    passes=$((passes + 1))
    printf "pass %-28s kiln %6.2fs  ort %6.2fs  %s\n" "$label" "$($PY -c "print($t1-$t0)")" "$($PY -c "print($t2-$t1)")" \
      "$(grep -m1 -o 'max abs err [^ ]*' "$d/compare.log")"
  else
    fails=$((fails + 1))
    echo "FAIL $label:"
    sed 's/^/    /' "$d/compare.log"
  fi
}

ids() { echo "input_ids=$1" "attention_mask=$1" "token_type_ids=$1"; }

check resnet50_1x224      models/resnet50.onnx input=1x3x224x224
check resnet50_2x160      models/resnet50.onnx input=2x3x160x192
check bert_base_1x128     models/bert_base.onnx $(ids 1x128)
check bert_base_2x37      models/bert_base.onnx $(ids 2x37)
check ocr_det_1x640x640   models/ocr/ch_PP-OCRv4_det_infer.onnx x=1x3x640x640
check ocr_det_1x320x480   models/ocr/ch_PP-OCRv4_det_infer.onnx x=1x3x320x480
check ocr_rec_1x48x320    models/ocr/ch_PP-OCRv4_rec_infer.onnx x=1x3x48x320
check ocr_rec_2x48x160    models/ocr/ch_PP-OCRv4_rec_infer.onnx x=2x3x48x160
check ocr_cls_1x48x192    models/ocr/ch_ppocr_mobile_v2.0_cls_infer.onnx x=1x3x48x192
check ocr_cls_3x48x192    models/ocr/ch_ppocr_mobile_v2.0_cls_infer.onnx x=3x3x48x192
echo "$passes passed, $fails failed"
[ "$fails" -eq 0 ]

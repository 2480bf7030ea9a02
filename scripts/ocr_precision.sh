#!/usr/bin/env bash
# The real-task accuracy table per precision: builds the PaddleOCR direction classifier (cls) and
# text recognizer (rec) at every precision kiln realizes, int8 once per calibration method
# (calibrated on the set's own calibration lines, disjoint from the evaluation lines; fp8 takes
# its activation scales, bias correction and weight-scale recipe from the same lines), and
# prints scripts/ocr_accuracy.py's table (accuracy and drop versus FP32) for each model.
#
#   scripts/ocr_precision.sh [--data DIR] [--limit N] [--precision LIST] [--methods LIST] [--json]
#
#   --data DIR        evaluation set (made by scripts/ocr_eval_data.py when DIR has none; default out/ocr)
#   --limit N         first N evaluation samples only (a quick look; default all)
#   --precision LIST  default fp32,fp16,bf16,int8,fp8,nvfp4,mxfp4,auto (fp32 is always first: the baseline); auto is
#                     --precision auto --allow $AUTO_ALLOW --accuracy-budget $AUTO_BUDGET (environment;
#                     default int8,fp16 and cosine>=0.99), planned on the calibration lines;
#                     int8-keep is int8 with the layers kiln debug precision --budget $KEEP_BUDGET
#                     (default top1>=99.5%) says must stay fp32, fp8-keep fp8 with those it says
#                     must stay fp16 (not in the default list: slow)
#   --methods LIST    int8 calibration methods, default minmax,entropy,percentile:99.99,mse
# Engines go to DIR/engines/ (built for batch 32, the batch the set is stored in; with
# --precision-fallback, each build's log beside its engine lists the layers kept in higher
# precision). Build progress on stderr when it is a terminal.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
DATA=out/ocr LIMIT="" PRECS=fp32,fp16,bf16,int8,fp8,nvfp4,mxfp4,auto METHODS=minmax,entropy,percentile:99.99,mse JSON=()
KILN="${KILN:-build/kiln}"
PY=/usr/bin/python3
AUTO_ALLOW="${AUTO_ALLOW:-int8,fp16}" AUTO_BUDGET="${AUTO_BUDGET:-cosine>=0.99}" KEEP_BUDGET="${KEEP_BUDGET:-top1>=99.5%}"
usage() { sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
  case "$1" in
    --data) DATA=$2; shift 2 ;;
    --limit) LIMIT=$2; shift 2 ;;
    --precision) PRECS=$2; shift 2 ;;
    --methods) METHODS=$2; shift 2 ;;
    --json) JSON=(--json); shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "ocr_precision: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[ -x "$KILN" ] || { echo "ocr_precision: $KILN not found (make build)" >&2; exit 2; }
log() { [ -t 2 ] && printf '\r\033[K%s' "$*" >&2 || true; }
[ -f "$DATA/eval/labels.json" ] || { log "rendering the evaluation set into $DATA"; $PY scripts/ocr_eval_data.py --out "$DATA" >/dev/null; }
E="$DATA/engines"
mkdir -p "$E"
declare -A MODEL=([cls]=models/ocr/ch_ppocr_mobile_v2.0_cls_infer.onnx [rec]=models/ocr/ch_PP-OCRv4_rec_infer.onnx)
declare -A SHAPE=([cls]=x:32x3x48x192 [rec]=x:32x3x48x320)
IFS=, read -ra PL <<< "$PRECS"
IFS=, read -ra ML <<< "$METHODS"
args=()
for m in cls rec; do
  list=(fp32)
  for p in "${PL[@]}"; do [ "$p" = fp32 ] || list+=("$p"); done
  for p in "${list[@]}"; do
    if [ "$p" = int8 ]; then
      for meth in "${ML[@]}"; do
        tag="int8-${meth%%:*}"
        log "building $m $tag"
        "$KILN" build "${MODEL[$m]}" -o "$E/$m.$tag.kiln" --shapes "${SHAPE[$m]}" --build-run-budget 900 --precision int8 --precision-fallback \
            --calib "$DATA/calib/$m" --calib-method "$meth" > "$E/$m.$tag.log" 2>&1 || { cat "$E/$m.$tag.log" >&2; exit 1; }
        args+=("--$m" "$tag=$E/$m.$tag.kiln")
      done
    elif [ "$p" = auto ]; then
      log "building $m auto (planning: probes every layer)"
      "$KILN" build "${MODEL[$m]}" -o "$E/$m.auto.kiln" --shapes "${SHAPE[$m]}" --build-run-budget 900 --precision auto --allow "$AUTO_ALLOW" \
          --accuracy-budget "$AUTO_BUDGET" --calib "$DATA/calib/$m" > "$E/$m.auto.log" 2>&1 || { cat "$E/$m.auto.log" >&2; exit 1; }
      args+=("--$m" "auto=$E/$m.auto.kiln")
    elif [ "$p" = int8-keep ] || [ "$p" = fp8-keep ]; then
      low=${p%-keep} hi=fp32
      [ "$low" = fp8 ] && hi=fp16
      log "debugging $m $low (which layers must stay $hi)"
      "$KILN" debug precision "${MODEL[$m]}" --precision "$low" --keep "$hi" --budget "$KEEP_BUDGET" --calib "$DATA/calib/$m" \
          --shapes "${SHAPE[$m]}" --build-run-budget 900 > "$E/$m.$p.debug" 2>&1 || { cat "$E/$m.$p.debug" >&2; exit 1; }
      eval "keep=($(tail -1 "$E/$m.$p.debug"))"
      "$KILN" build "${MODEL[$m]}" -o "$E/$m.$p.kiln" --shapes "${SHAPE[$m]}" --build-run-budget 900 "${keep[@]}" \
          --calib "$DATA/calib/$m" > "$E/$m.$p.log" 2>&1 || { cat "$E/$m.$p.log" >&2; exit 1; }
      args+=("--$m" "$p=$E/$m.$p.kiln")
    else
      log "building $m $p"
      calib=()   # fp8: activation scales (amax / 448), bias correction and weight recipe from the calibration lines
      [ "$p" = fp8 ] && calib=(--calib "$DATA/calib/$m")
      "$KILN" build "${MODEL[$m]}" -o "$E/$m.$p.kiln" --shapes "${SHAPE[$m]}" --build-run-budget 900 --precision "$p" --precision-fallback \
          "${calib[@]}" > "$E/$m.$p.log" 2>&1 || { cat "$E/$m.$p.log" >&2; exit 1; }
      args+=("--$m" "$p=$E/$m.$p.kiln")
    fi
  done
done
log ""
$PY scripts/ocr_accuracy.py --data "$DATA" --kiln "$KILN" ${LIMIT:+--limit "$LIMIT"} "${JSON[@]}" "${args[@]}"
# precision is never silently other than asked: the layers each build could not lower (--precision-fallback)
[ ${#JSON[@]} -gt 0 ] || for f in "$E"/*.log; do
  n=$(grep -ci "fallback" "$f" || true)
  [ "$n" -eq 0 ] || echo "$(basename "$f" .log): $n fallback line(s), see $f"
done

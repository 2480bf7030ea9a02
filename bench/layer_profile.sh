#!/usr/bin/env bash
# Per-layer kiln vs ONNX Runtime, side by side: the table of bench/layer_compare.py.
#
#   bench/layer_profile.sh [--build DIR] [--threads N] [--rounds R] [--iterations N] [--only NAME,...] [--top N]
#
# For each model of bench/models.sh (default: resnet50,bert_base) it builds the FP32 kiln engine for
# the fixed shape, then alternates R rounds of `kiln inspect --profile --json` and ONNX Runtime's
# profiler (scripts/ort_run.js --profile, same thread count, N timed runs after 3 warm-ups) and
# prints per model the op-type, layer-class and top-N-layer tables (markdown), averaged over the
# rounds. Files go to out/layer-profile/MODEL/. Say the machine's load with the numbers.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
BUILD=build THREADS=1 ROUNDS=2 ITERS=10 ONLY=resnet50,bert_base TOP=20
while [ $# -gt 0 ]; do
  case "$1" in
    --build) BUILD=$2; shift 2 ;;
    --threads) THREADS=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --iterations) ITERS=$2; shift 2 ;;
    --only) ONLY=$2; shift 2 ;;
    --top) TOP=$2; shift 2 ;;
    -h|--help) sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "layer_profile: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
for v in "$THREADS" "$ROUNDS" "$ITERS" "$TOP"; do
  [[ "$v" =~ ^[1-9][0-9]{0,5}$ ]] || { echo "layer_profile: '$v' is not a positive count" >&2; exit 2; }
done
KILN="$BUILD/kiln"
[ -x "$KILN" ] || { echo "layer_profile: $KILN not found (run make build)" >&2; exit 2; }
PY=/usr/bin/python3
. "$ROOT/bench/models.sh"

for entry in "${MODELS[@]}"; do
  read -r name model spec <<< "$entry"
  [[ ",$ONLY," == *",$name,"* ]] || continue
  [ -f "$model" ] || { echo "layer_profile: $model missing (run scripts/bootstrap.sh)" >&2; exit 2; }
  d="out/layer-profile/$name"
  rm -rf "$d" && mkdir -p "$d/in"
  mk=()
  IFS=, read -ra parts <<< "$spec"
  for p in "${parts[@]}"; do mk+=(--shape "${p%%:*}=${p#*:}"); done
  $PY scripts/make_inputs.py "$model" "${mk[@]}" --out "$d/in" --seed 1 >/dev/null
  "$KILN" build "$model" -o "$d/$name.kiln" --shapes "$spec" > "$d/build.log" 2>&1 || { cat "$d/build.log" >&2; exit 1; }
  ks=() os=()
  for r in $(seq 1 "$ROUNDS"); do
    log "$name: round $r/$ROUNDS kiln"
    "$KILN" inspect "$d/$name.kiln" --profile --json --threads "$THREADS" --iterations "$ITERS" > "$d/kiln.$r.json"
    ks+=("$d/kiln.$r.json")
    log "$name: round $r/$ROUNDS onnxruntime"
    node scripts/ort_run.js "$model" --input-dir "$d/in" --threads "$THREADS" --bench "$ITERS" \
        --profile "$d/ort.$r" >/dev/null 2>&1
    os+=("$(ls -t "$d"/ort."$r"_*.json | head -1)")
  done
  log ""
  (IFS=,; $PY bench/layer_compare.py --kiln "${ks[*]}" --ort "${os[*]}" --top "$TOP" \
      --title "$name, $THREADS thread(s), $ROUNDS alternated rounds of $ITERS runs, load $(cut -d' ' -f1-3 /proc/loadavg)")
  echo
done

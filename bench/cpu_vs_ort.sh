#!/usr/bin/env bash
# kiln vs ONNX Runtime on this CPU, side by side in one invocation.
#
#   bench/cpu_vs_ort.sh [--build DIR] [--threads N] [--rounds R] [--iterations N] [--only NAME,...] [--json]
#
# For each model (ResNet-50 1x3x224x224, BERT-base 1x128, PaddleOCR det 1x3x640x640, rec 1x3x48x320,
# cls 1x3x48x192; batch 1) it builds a kiln engine for the fixed shape, then alternates R rounds of
# `kiln bench` and ONNX Runtime (scripts/ort_run.js --bench, same inputs shape, same thread count),
# so both see the same machine state. Each round gives a p50; the table shows the median over rounds
# and the ratio kiln/ORT (< 1 means kiln is faster). Measure on an idle machine: under load ONNX
# Runtime's spinning threads suffer more than kiln's and the ratio flatters kiln.
# Progress goes to stderr; the table (or --json: one object with a "models" array) to stdout.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
BUILD=build THREADS=2 ROUNDS=3 ITERS=20 ONLY="" JSON=0
usage() { sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
  case "$1" in
    --build) BUILD=$2; shift 2 ;;
    --threads) THREADS=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --iterations) ITERS=$2; shift 2 ;;
    --only) ONLY=$2; shift 2 ;;
    --json) JSON=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "cpu_vs_ort: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
for v in "$THREADS" "$ROUNDS" "$ITERS"; do
  [[ "$v" =~ ^[1-9][0-9]{0,5}$ ]] || { echo "cpu_vs_ort: '$v' is not a positive count" >&2; exit 2; }
done
KILN="$BUILD/kiln"
[ -x "$KILN" ] || { echo "cpu_vs_ort: $KILN not found (run make build)" >&2; exit 2; }
PY=/usr/bin/python3
OUT=out/bench-cpu
mkdir -p "$OUT"

. "$ROOT/bench/models.sh"

results=()
for entry in "${MODELS[@]}"; do
  read -r name model spec <<< "$entry"
  if [ -n "$ONLY" ] && [[ ",$ONLY," != *",$name,"* ]]; then continue; fi
  [ -f "$model" ] || { echo "cpu_vs_ort: $model missing (run scripts/bootstrap.sh)" >&2; exit 2; }
  d="$OUT/$name"
  mkdir -p "$d/in"
  log "$name: building engine"
  "$KILN" build "$model" -o "$d/$name.kiln" --shapes "$spec" >/dev/null
  mk=()
  IFS=, read -ra parts <<< "$spec"
  for p in "${parts[@]}"; do mk+=(--shape "${p%%:*}=${p#*:}"); done
  $PY scripts/make_inputs.py "$model" "${mk[@]}" --out "$d/in" --seed 1 >/dev/null
  kp=() op=()
  for r in $(seq 1 "$ROUNDS"); do
    log "$name: round $r/$ROUNDS kiln"
    k=$("$KILN" bench "$d/$name.kiln" --shapes "$spec" --threads "$THREADS" --iterations "$ITERS" --json)
    kp+=("$(printf '%s' "$k" | $PY -c 'import json,sys; print(json.load(sys.stdin)["latency_ms"]["p50"])')")
    log "$name: round $r/$ROUNDS onnxruntime"
    o=$(node scripts/ort_run.js "$model" --input-dir "$d/in" --output-dir "$d/ort" --threads "$THREADS" \
          --bench "$ITERS" 2>/dev/null | tail -1)
    op+=("$(printf '%s' "$o" | $PY -c 'import json,sys; print(json.load(sys.stdin)["ort_ms_p50"])')")
  done
  results+=("$name ${kp[*]} | ${op[*]}")
done
log ""

$PY - "$JSON" "$THREADS" "$ROUNDS" "$ITERS" "${results[@]}" <<'PYEOF'
import json, statistics, sys
as_json, threads, rounds, iters = sys.argv[1] == "1", int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
rows = []
for line in sys.argv[5:]:
    name, rest = line.split(" ", 1)
    k, o = rest.split("|")
    k = [float(x) for x in k.split()]
    o = [float(x) for x in o.split()]
    km, om = statistics.median(k), statistics.median(o)
    rows.append({"model": name, "kiln_p50_ms": round(km, 3), "ort_p50_ms": round(om, 3),
                 "ratio": round(km / om, 3), "kiln_rounds_ms": k, "ort_rounds_ms": o})
if as_json:
    print(json.dumps({"threads": threads, "rounds": rounds, "iterations": iters, "models": rows}))
else:
    print(f"threads {threads}, {rounds} alternated rounds of {iters} iterations, batch 1, median of round p50s")
    print(f"| {'model':<10} | {'kiln p50 ms':>11} | {'ORT p50 ms':>10} | {'kiln/ORT':>8} |")
    print(f"|{'-'*12}|{'-'*13}|{'-'*12}|{'-'*10}|")
    for r in rows:
        print(f"| {r['model']:<10} | {r['kiln_p50_ms']:>11.2f} | {r['ort_p50_ms']:>10.2f} | {r['ratio']:>8.2f} |")
PYEOF

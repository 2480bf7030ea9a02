#!/usr/bin/env bash
# kiln vs ONNX Runtime on this CPU, side by side in one invocation.
#
#   bench/cpu_vs_ort.sh [--build DIR] [--threads N] [--rounds R] [--iterations N] [--only NAME,...]
#                       [--precision fp32,fp16,bf16,int8] [--json]
#
# For each model (ResNet-50 1x3x224x224, BERT-base 1x128, PaddleOCR det 1x3x640x640, rec 1x3x48x320,
# cls 1x3x48x192; batch 1) it builds a kiln engine for the fixed shape, then alternates R rounds of
# `kiln bench` and ONNX Runtime (scripts/ort_run.js --bench, same inputs shape, same thread count),
# so both see the same machine state. Each round gives a p50; the table shows the median over rounds
# and the ratio kiln/ORT (< 1 means kiln is faster). Measure on an idle machine: under load ONNX
# Runtime's spinning threads suffer more than kiln's and the ratio flatters kiln.
# --precision adds a kiln engine per listed precision (`kiln build --precision P`; int8 calibrated on 8
# seeded random samples, so the speed is real but the scales mean little) next to ONNX Runtime FP32;
# each row also gives the time relative to kiln's own FP32 engine. Layers with no kernel in the
# precision stay in a higher one (--precision-fallback; out/bench-cpu/MODEL/*.build.log lists them).
# Host check: before every round, build/host_probe (bench/host_probe.c) times a 2-thread FMA loop against a
# 1-thread one; a ratio near 2 means the two CPUs shared one core at that moment (a VM's vCPUs placed on one
# physical core by the host), which slows either runtime's round ~1.3-1.8x. The ratios are listed under the
# table (JSON: kiln_probe / ort_probe per row) so rounds taken in such a phase can be told apart; "+N" after a
# ratio: about N other processes of this machine were runnable then (/proc/stat procs_running; JSON
# kiln_busy / ort_busy), e.g. a build sharing the CPUs.
# Progress goes to stderr; the table (or --json: one object with a "models" array) to stdout.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
BUILD=build THREADS=2 ROUNDS=3 ITERS=20 ONLY="" JSON=0 PRECS=fp32
usage() { sed -n '2,23p' "$0" | sed 's/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
  case "$1" in
    --build) BUILD=$2; shift 2 ;;
    --threads) THREADS=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --iterations) ITERS=$2; shift 2 ;;
    --only) ONLY=$2; shift 2 ;;
    --precision) PRECS=$2; shift 2 ;;
    --json) JSON=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "cpu_vs_ort: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
IFS=, read -ra PREC_LIST <<< "$PRECS"
for p in "${PREC_LIST[@]}"; do
  case "$p" in fp32|fp16|bf16|int8) ;; *) echo "cpu_vs_ort: unknown precision '$p' (fp32,fp16,bf16,int8)" >&2; exit 2 ;; esac
done
[[ ",$PRECS," == *",fp32,"* ]] || PREC_LIST=(fp32 "${PREC_LIST[@]}")   # the baseline of the last column
for v in "$THREADS" "$ROUNDS" "$ITERS"; do
  [[ "$v" =~ ^[1-9][0-9]{0,5}$ ]] || { echo "cpu_vs_ort: '$v' is not a positive count" >&2; exit 2; }
done
KILN="$BUILD/kiln"
[ -x "$KILN" ] || { echo "cpu_vs_ort: $KILN not found (run make build)" >&2; exit 2; }
PY=/usr/bin/python3
PROBE="$BUILD/host_probe"
# RATIO:OTHERS (see the header); RATIO "-" without the probe, OTHERS "-" without /proc/stat
probe() {
  local r=- n
  [ -x "$PROBE" ] && r=$("$PROBE" | cut -d' ' -f1)
  # the fewest of 5 readings 10 ms apart, minus awk itself (a process that just exited is still counted briefly)
  n=$(for i in 1 2 3 4 5; do awk '/^procs_running/ {print $2 - 1}' /proc/stat 2>/dev/null; sleep 0.01; done | sort -n | head -1)
  echo "$r:${n:--}"
}
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
  mk=()
  IFS=, read -ra parts <<< "$spec"
  for p in "${parts[@]}"; do mk+=(--shape "${p%%:*}=${p#*:}"); done
  $PY scripts/make_inputs.py "$model" "${mk[@]}" --out "$d/in" --seed 1 >/dev/null
  for p in "${PREC_LIST[@]}"; do
    log "$name: building $p engine"
    extra=()
    if [ "$p" = int8 ]; then
      mkdir -p "$d/calib"
      for s in 1 2 3 4 5 6 7 8; do
        $PY scripts/make_inputs.py "$model" "${mk[@]}" --out "$d/calib/s$s" --seed "$((100 + s))" >/dev/null
        for f in "$d/calib/s$s"/*.npy; do b=$(basename "$f" .npy); mv "$f" "$d/calib/${b}_$s.npy"; done
        rmdir "$d/calib/s$s"
      done
      extra=(--calib "$d/calib")
    fi
    # layers without a kernel in p stay in higher precision and are listed in the build log
    [ "$p" = fp32 ] || extra+=(--precision-fallback)
    "$KILN" build "$model" -o "$d/$name.$p.kiln" --shapes "$spec" --precision "$p" "${extra[@]}" \
        > "$d/$name.$p.build.log" 2>&1 || { cat "$d/$name.$p.build.log" >&2; exit 1; }
  done
  declare -A kp=() kq=()
  op=() oq=()
  for r in $(seq 1 "$ROUNDS"); do
    for p in "${PREC_LIST[@]}"; do
      log "$name: round $r/$ROUNDS kiln $p"
      kq[$p]+=" $(probe)"
      k=$("$KILN" bench "$d/$name.$p.kiln" --shapes "$spec" --threads "$THREADS" --iterations "$ITERS" --json)
      kp[$p]+=" $(printf '%s' "$k" | $PY -c 'import json,sys; print(json.load(sys.stdin)["latency_ms"]["p50"])')"
    done
    log "$name: round $r/$ROUNDS onnxruntime"
    oq+=("$(probe)")
    o=$(node scripts/ort_run.js "$model" --input-dir "$d/in" --output-dir "$d/ort" --threads "$THREADS" \
          --bench "$ITERS" 2>/dev/null | tail -1)
    op+=("$(printf '%s' "$o" | $PY -c 'import json,sys; print(json.load(sys.stdin)["ort_ms_p50"])')")
  done
  for p in "${PREC_LIST[@]}"; do results+=("$name $p ${kp[$p]} | ${op[*]} | ${kq[$p]} | ${oq[*]}"); done
  unset kp kq
done
log ""

$PY - "$JSON" "$THREADS" "$ROUNDS" "$ITERS" "${results[@]}" <<'PYEOF'
import json, statistics, sys
as_json, threads, rounds, iters = sys.argv[1] == "1", int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
rows = []
fp32 = {}
for line in sys.argv[5:]:
    name, prec, rest = line.split(" ", 2)
    k, o, kq, oq = rest.split("|")
    k = [float(x) for x in k.split()]
    o = [float(x) for x in o.split()]
    num = lambda x, f: None if x == "-" else f(x)
    probe = lambda s: [num(x.split(":")[0], float) for x in s.split()]
    busy = lambda s: [num(x.split(":")[1], int) for x in s.split()]
    km, om = statistics.median(k), statistics.median(o)
    if prec == "fp32":
        fp32[name] = km
    rows.append({"model": name, "precision": prec, "kiln_p50_ms": round(km, 3), "ort_fp32_p50_ms": round(om, 3),
                 "ratio": round(km / om, 3), "kiln_rounds_ms": k, "ort_rounds_ms": o,
                 "kiln_probe": probe(kq), "ort_probe": probe(oq), "kiln_busy": busy(kq), "ort_busy": busy(oq)})
for r in rows:
    r["vs_kiln_fp32"] = round(r["kiln_p50_ms"] / fp32[r["model"]], 3)
if as_json:
    print(json.dumps({"threads": threads, "rounds": rounds, "iterations": iters, "models": rows}))
else:
    print(f"threads {threads}, {rounds} alternated rounds of {iters} iterations, batch 1, median of round p50s")
    print(f"| {'model':<10} | {'precision':<9} | {'kiln p50 ms':>11} | {'ORT fp32 p50 ms':>15} | {'kiln/ORT':>8} | {'vs kiln fp32':>12} |")
    print(f"|{'-'*12}|{'-'*11}|{'-'*13}|{'-'*17}|{'-'*10}|{'-'*14}|")
    for r in rows:
        print(f"| {r['model']:<10} | {r['precision']:<9} | {r['kiln_p50_ms']:>11.2f} | {r['ort_fp32_p50_ms']:>15.2f} | "
              f"{r['ratio']:>8.2f} | {r['vs_kiln_fp32']:>12.2f} |")
    if any(x is not None for r in rows for x in r["kiln_probe"] + r["ort_probe"]):
        f = lambda v: " ".join("-" if x is None else f"{x:.2f}" for x in v)
        fb = lambda v, b: " ".join(("-" if x is None else f"{x:.2f}") + (f"+{n}" if n else "") for x, n in zip(v, b))
        print("host probe before each round (2-thread / 1-thread FMA time; ~1: separate cores, ~2: one shared core;"
              " +N: N other processes runnable):")
        for r in rows:
            print(f"  {r['model']} {r['precision']}: kiln rounds {f(r['kiln_rounds_ms'])} ms, probe "
                  f"{fb(r['kiln_probe'], r['kiln_busy'])}; ORT rounds {f(r['ort_rounds_ms'])} ms, probe "
                  f"{fb(r['ort_probe'], r['ort_busy'])}")
PYEOF

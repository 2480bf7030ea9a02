#!/usr/bin/env bash
# Engine load time and memory vs ONNX Runtime session creation, in one invocation.
#
#   bench/engine_load.sh [--build DIR] [--threads N] [--rounds R] [--only NAME,...] [--rebuild] [--json]
#
# For each model (ResNet-50 1x3x224x224, BERT-base 1x128, PaddleOCR det 1x3x640x640, rec 1x3x48x320,
# cls 1x3x48x192) it builds a kiln engine for the fixed shape once (out/bench-load/NAME.kiln; reused
# unless --rebuild or older than the kiln binary), then alternates R rounds of
#   - `kiln bench ENGINE --iterations 1 --warmup 0` (process wall time and peak RSS from
#     /usr/bin/time: exec, load, verify, first run, exit), memory-mapped (default) and --no-mmap;
#   - the engine load alone (build/engine_hold: exec, map, verify, parse, exit);
#   - one steady-state run (p50 of `kiln bench --iterations 5 --warmup 2`): what a first run cannot
#     beat, so load + first run >= load only + steady run;
#   - ONNX Runtime's session creation for the same model (scripts/ort_run.js --session-only, the
#     time of InferenceSession.create inside the node process, i.e. without node's own start-up).
# The table shows medians over rounds, kiln's load + first run / ORT's session creation, and
# kiln's peak RSS / the engine's weight bytes (the WEIGHTS and PACKED sections). Last, two engine_hold
# processes load the same engine: the PSS the second one adds (/proc/PID/smaps_rollup, sum of both
# after minus the first alone) as a share of the weight bytes. The page cache is warm (each model
# is loaded once before measuring), as for a server restarting or a second worker starting.
# Progress goes to stderr; the table (or --json) to stdout.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
BUILD=build THREADS=2 ROUNDS=3 ONLY="" JSON=0 REBUILD=0
usage() { sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
  case "$1" in
    --build) BUILD=$2; shift 2 ;;
    --threads) THREADS=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --only) ONLY=$2; shift 2 ;;
    --rebuild) REBUILD=1; shift ;;
    --json) JSON=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "engine_load: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
for v in "$THREADS" "$ROUNDS"; do
  [[ "$v" =~ ^[1-9][0-9]{0,5}$ ]] || { echo "engine_load: '$v' is not a positive count" >&2; exit 2; }
done
KILN="$BUILD/kiln" HOLD="$BUILD/engine_hold" TIME=/usr/bin/time PY=/usr/bin/python3
for f in "$KILN" "$HOLD"; do [ -x "$f" ] || { echo "engine_load: $f not found (run make build)" >&2; exit 2; }; done
[ -x "$TIME" ] || { echo "engine_load: $TIME (GNU time) not found" >&2; exit 2; }
OUT=out/bench-load
mkdir -p "$OUT"

. "$ROOT/bench/models.sh"

# wall seconds (bash's clock, microseconds) and peak RSS (KB, /usr/bin/time) of one command: "WALL MAXRSS"
timed() {
  local t0=$EPOCHREALTIME t1
  "$TIME" -f '%M' -o "$OUT/time.txt" "$@" >/dev/null 2>"$OUT/stderr.txt" || { cat "$OUT/stderr.txt" >&2; exit 1; }
  t1=$EPOCHREALTIME
  echo "$($PY -c "print(round($t1 - $t0, 4))") $(cat "$OUT/time.txt")"
}
# weight bytes of an engine: the WEIGHTS section (kind 3) plus the prepared blobs of PACKED (kind 7)
weight_bytes() { $PY - "$1" <<'PYEOF'
import struct, sys
b = open(sys.argv[1], "rb").read(64 + 32 * 32)
ns = struct.unpack_from("<I", b, 40)[0]
total = 0
for i in range(ns):
    kind, _, off, size = struct.unpack_from("<IIQQ", b, 64 + 32 * i)
    if kind in (3, 7):
        total += size
print(total)
PYEOF
}
pss_kb() { awk '/^Pss:/ {print $2}' "/proc/$1/smaps_rollup"; }
wait_loaded() {
  until grep -q loaded "$1" 2>/dev/null; do
    kill -0 "$2" 2>/dev/null || { echo "engine_load: engine_hold failed" >&2; exit 1; }
    sleep 0.05
  done
}
# PSS (KB) the second of two processes holding engine $1 adds: "ALONE_KB ADDED_KB"
second_pss() {
  local d="$OUT/pss" pa pb alone both
  rm -rf "$d"; mkdir -p "$d"; mkfifo "$d/a" "$d/b"
  "$HOLD" "$1" <"$d/a" >"$d/a.out" & pa=$!
  exec 7>"$d/a"
  wait_loaded "$d/a.out" "$pa"
  alone=$(pss_kb "$pa")
  "$HOLD" "$1" <"$d/b" >"$d/b.out" & pb=$!
  exec 8>"$d/b"
  wait_loaded "$d/b.out" "$pb"
  both=$(( $(pss_kb "$pa") + $(pss_kb "$pb") ))
  exec 8>&- 7>&-
  wait "$pb" "$pa" || true
  echo "$alone $((both - alone))"
}

results=()
for entry in "${MODELS[@]}"; do
  read -r name model spec <<< "$entry"
  if [ -n "$ONLY" ] && [[ ",$ONLY," != *",$name,"* ]]; then continue; fi
  [ -f "$model" ] || { echo "engine_load: $model missing (run scripts/bootstrap.sh)" >&2; exit 2; }
  eng="$OUT/$name.kiln"
  if [ "$REBUILD" = 1 ] || [ ! -f "$eng" ] || [ "$KILN" -nt "$eng" ]; then
    log "$name: building engine"
    "$KILN" build "$model" -o "$eng" --shapes "$spec" >/dev/null
  fi
  wb=$(weight_bytes "$eng")
  "$KILN" bench "$eng" --shapes "$spec" --threads "$THREADS" --iterations 1 --warmup 0 >/dev/null   # warm the page cache
  km=() kr=() cm=() cr=() om=() lo=() sr=()
  for r in $(seq 1 "$ROUNDS"); do
    log "$name: round $r/$ROUNDS kiln (mmap)"
    read -r w m < <(timed "$KILN" bench "$eng" --shapes "$spec" --threads "$THREADS" --iterations 1 --warmup 0)
    km+=("$w") kr+=("$m")
    log "$name: round $r/$ROUNDS kiln load only"
    read -r w m < <(timed "$HOLD" "$eng" </dev/null)
    lo+=("$w")
    log "$name: round $r/$ROUNDS kiln steady run"
    sr+=("$("$KILN" bench "$eng" --shapes "$spec" --threads "$THREADS" --iterations 5 --warmup 2 --json | \
      $PY -c 'import json,sys; print(json.load(sys.stdin)["latency_ms"]["p50"] / 1000)')")
    log "$name: round $r/$ROUNDS kiln (--no-mmap)"
    read -r w m < <(timed "$KILN" bench "$eng" --shapes "$spec" --threads "$THREADS" --iterations 1 --warmup 0 --no-mmap)
    cm+=("$w") cr+=("$m")
    log "$name: round $r/$ROUNDS onnxruntime session"
    o=$(node scripts/ort_run.js "$model" --session-only --threads "$THREADS" 2>/dev/null | tail -1)
    om+=("$(printf '%s' "$o" | $PY -c 'import json,sys; print(json.load(sys.stdin)["ort_session_ms"] / 1000)')")
  done
  log "$name: second process PSS"
  read -r alone added < <(second_pss "$eng")
  results+=("$name $wb $alone $added ${km[*]} | ${kr[*]} | ${cm[*]} | ${cr[*]} | ${om[*]} | ${lo[*]} | ${sr[*]}")
done
log ""

$PY - "$JSON" "$THREADS" "$ROUNDS" "${results[@]}" <<'PYEOF'
import json, statistics, sys
as_json, threads, rounds = sys.argv[1] == "1", int(sys.argv[2]), int(sys.argv[3])
med = lambda s: statistics.median(float(x) for x in s.split())
rows = []
for line in sys.argv[4:]:
    head, kr, cm, cr, om, lo, sr = line.split("|")
    name, wb, alone, added = head.split()[:4]
    km = " ".join(head.split()[4:])
    wb, added = int(wb), int(added) * 1024
    r = {"model": name, "weight_mb": wb / 2**20,
         "kiln_s": med(km), "kiln_rss_mb": med(kr) / 1024, "copy_s": med(cm), "copy_rss_mb": med(cr) / 1024,
         "ort_session_s": med(om), "second_pss_mb": added / 2**20, "load_only_s": med(lo),
         "steady_run_s": med(sr)}
    r["load_vs_ort"] = r["kiln_s"] / r["ort_session_s"]
    r["rss_vs_weights"] = r["kiln_rss_mb"] / r["weight_mb"] if wb else None
    r["second_pss_vs_weights"] = added / wb if wb else None
    rows.append(r)
if as_json:
    print(json.dumps({"threads": threads, "rounds": rounds, "models": rows}))
    sys.exit(0)
print(f"threads {threads}, median of {rounds} alternated rounds, warm page cache; kiln = process wall time and peak RSS of "
      "`kiln bench ENGINE --iterations 1 --warmup 0` (load + first run); ORT = InferenceSession.create")
print("| model | weights MB | kiln load+run s | ORT session s | kiln/ORT | kiln load only s | load/ORT | steady run s | peak RSS MB "
      "| RSS/weights | --no-mmap s | --no-mmap RSS MB | 2nd process PSS MB (of weights) |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for r in rows:
    rw = f"{r['rss_vs_weights']:.2f}" if r["rss_vs_weights"] is not None else "-"
    sp = f"{100 * r['second_pss_vs_weights']:.1f}%" if r["second_pss_vs_weights"] is not None else "-"
    print(f"| {r['model']} | {r['weight_mb']:.1f} | {r['kiln_s']:.3f} | {r['ort_session_s']:.3f} | {r['load_vs_ort']:.2f} "
          f"| {r['load_only_s']:.3f} | {r['load_only_s'] / r['ort_session_s']:.2f} | {r['steady_run_s']:.3f} | {r['kiln_rss_mb']:.1f} | {rw} | {r['copy_s']:.3f} | {r['copy_rss_mb']:.1f} | {r['second_pss_mb']:.1f} ({sp}) |")
PYEOF

#!/usr/bin/env bash
# Runs the fuzz harnesses one after another for SECONDS each (default 300):
#   tests/fuzz/run.sh [SECONDS] [HARNESS...]         (BUILD=build-fuzz, FUZZ_SEED=N optional)
# Seeds: BUILD/seeds/<h> (tests/fuzz/make_corpus.sh); the growing corpus: BUILD/corpus/<h>;
# crashes, OOMs and timeouts: BUILD/artifacts/<h>/ (see docs/FUZZING.md to add a reproducer).
# Exits non-zero when a harness finds something. By default a harness stops at its first finding
# (CI); FUZZ_KEEP_GOING=1 runs libFuzzer's fork mode, which records every crash/OOM/timeout and goes on.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
SECONDS_EACH="${1:-300}"
shift || true
BUILD="${BUILD:-build-fuzz}"
HARNESSES=("$@")
[ "${#HARNESSES[@]}" -gt 0 ] || HARNESSES=(onnx build npy tensor_pb engine timing_cache calib_cache device_tactics serve image)
declare -A DICT=([onnx]=onnx.dict [build]=onnx.dict [tensor_pb]=onnx.dict [npy]=npy.dict [engine]=engine.dict
                 [timing_cache]=timing_cache.dict [calib_cache]=calib_cache.dict [device_tactics]=device_tactics.dict
                 [serve]=serve.dict [image]=image.dict)
fail=0
for h in "${HARNESSES[@]}"; do
  bin="$BUILD/fuzz/fuzz_$h"
  [ -x "$bin" ] || { echo "fuzz: $bin not built (make build-fuzz)" >&2; exit 2; }
  seeds="$BUILD/seeds/$h"
  [ "$h" = build ] && seeds="$BUILD/seeds/onnx"   # same inputs as the import harness
  mkdir -p "$BUILD/corpus/$h" "$BUILD/artifacts/$h" "$seeds"
  log="$BUILD/artifacts/$h.log"
  echo "fuzz: $h for ${SECONDS_EACH}s (log: $log)"
  # -max_len: the suite's models are < 8 KiB, engines < 64 KiB; limits make OOM and hangs findings
  "$bin" "$BUILD/corpus/$h" "$seeds" -dict="tests/fuzz/${DICT[$h]}" \
      -max_total_time="$SECONDS_EACH" -max_len=65536 -timeout=20 -rss_limit_mb=2560 -malloc_limit_mb=2048 \
      -artifact_prefix="$BUILD/artifacts/$h/" -print_final_stats=1 ${FUZZ_SEED:+-seed=$FUZZ_SEED} \
      ${FUZZ_KEEP_GOING:+-fork=1 -ignore_crashes=1 -ignore_ooms=1 -ignore_timeouts=1} > "$log" 2>&1
  rc=$?
  grep -E "^#[0-9]+ +(INITED|DONE)|^stat::number_of_executed_units|^stat::peak_rss_mb" "$log" | sed "s/^/fuzz: $h: /"
  if [ -n "${FUZZ_KEEP_GOING:-}" ]; then
    grep -E "^#[0-9]+: cov:" "$log" | tail -n 1 | sed "s/^/fuzz: $h: /"
    n=$(find "$BUILD/artifacts/$h" -type f | wc -l)
    [ "$n" -eq 0 ] || { echo "fuzz: $h: $n artifact(s) in $BUILD/artifacts/$h/" >&2; rc=1; }
  fi
  if [ "$rc" -ne 0 ]; then
    fail=1
    echo "fuzz: $h FOUND A PROBLEM (exit $rc):" >&2
    grep -E "ERROR: |SUMMARY: |^artifact_prefix|Test unit written" "$log" | head -n 8 | sed 's/^/  /' >&2
  fi
done
exit "$fail"

#!/usr/bin/env bash
# Runs the whole ONNX backend suite; fails on a regression against expected_passes.txt or on
# any crash / hang anywhere in the suite. Writes the full report to build output for reading.
set -uo pipefail
KILN=$1
DATA=$2
shift 2
HERE=$(cd "$(dirname "$0")" && pwd)
OUT=$(dirname "$KILN")/conformance${1:+-opt}
mkdir -p "$OUT"
"$KILN" conformance "$DATA" --expect "$HERE/expected_passes.txt" --write-passes "$OUT/passes.txt" \
    --timeout 300 "$@" > "$OUT/report.txt"
rc=$?
tail -1 "$OUT/report.txt"
grep -E "^REGRESSION|CRASH|HANG" "$OUT/report.txt" && rc=1
new=$(comm -13 <(sort "$HERE/expected_passes.txt") <(sort "$OUT/passes.txt") | wc -l)
echo "conformance: report in $OUT/report.txt; $new passing test(s) not yet in expected_passes.txt"
exit $rc

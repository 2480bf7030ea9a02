#!/usr/bin/env bash
# kiln stops long runs cleanly: SIGINT during `kiln run` / `kiln bench` -> message and exit 130;
# `kiln build --build-run-budget` -> a clean error when the calibration run exceeds the budget.
# Usage: tests/cli/test_interrupt.sh path/to/kiln   (from the repository root)
set -u
KILN="$1"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail=0
/usr/bin/python3 -c "import numpy as np; np.save('$T/x.npy', np.zeros(1, np.float32)); \
np.save('$T/trips.npy', np.array(10**15, np.int64))" || { echo "SKIP: numpy missing"; exit 77; }

# runs "$@" in the background, sends SIGINT 1 s after kiln is up, expects exit 130 and a message soon after
interrupt() {
    local what="$1"; shift
    # the watchdog is timeout(1) (a watchdog subshell killed
    # right after its fork could run this script's EXIT trap and delete $T under the test)
    timeout -s KILL 30 "$@" >"$T/out" 2>"$T/err" &
    local pid=$! t0 kpid="" i mask
    # wait until kiln (timeout's child) has its SIGINT handler (SigCgt bit 2): a slow start (ASan, a
    # loaded machine) must not turn the test into "killed by the default action before main ran"
    for i in $(seq 300); do
        kpid=$(pgrep -P "$pid" | head -n 1)
        mask=$(awk '/^SigCgt/ {print $2}' "/proc/${kpid:-none}/status" 2>/dev/null)
        [ -n "$mask" ] && (( 0x$mask & 2 )) && break
        sleep 0.1
    done
    sleep 1   # then well inside the run
    t0=$SECONDS
    # to kiln itself: timeout(1) would forward it AND send it to its process group, i.e. twice,
    # and kiln's second SIGINT kills as usual (racing the first one's clean exit)
    kill -INT "${kpid:-$pid}"
    wait "$pid"; local rc=$?
    if [ "$rc" != 130 ] || ! grep -q interrupted "$T/err" || [ $((SECONDS - t0)) -gt 10 ]; then
        echo "FAIL: $what: exit $rc after $((SECONDS - t0)) s, stderr: $(cat "$T/err")"; fail=1
    else
        echo "ok: $what: $(cat "$T/err")"
    fi
}
interrupt "kiln run" "$KILN" run tests/data/loop_trips.onnx --input x="$T/x.npy" --input trips="$T/trips.npy" \
    --output-dir "$T/o"
"$KILN" build tests/data/loop_trips.onnx -o "$T/trips.kiln" >/dev/null || { echo "FAIL: build"; fail=1; }
interrupt "kiln bench" "$KILN" bench "$T/trips.kiln" --input x="$T/x.npy" --input trips="$T/trips.npy"

t0=$SECONDS
"$KILN" build tests/data/loop_forever.onnx -o "$T/forever.kiln" --build-run-budget 0.3 >"$T/out" 2>"$T/err"
rc=$?
if [ "$rc" = 0 ] || ! grep -q "budget" "$T/err" || [ $((SECONDS - t0)) -gt 10 ] || [ -e "$T/forever.kiln" ]; then
    echo "FAIL: over-budget build: exit $rc after $((SECONDS - t0)) s: $(cat "$T/err")"; fail=1
else
    echo "ok: over-budget build: $(cat "$T/err")"
fi
"$KILN" build tests/data/loop_forever.onnx -o "$T/x.kiln" --build-run-budget abc 2>/dev/null && { echo "FAIL: budget abc"; fail=1; }
exit $fail

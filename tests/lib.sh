# Shared preamble of kiln's shell tests (tests/cli, tests/shapes, ...). Source it with KILN set:
#     KILN=$1
#     . "$(dirname "$0")/../lib.sh"
# It moves to the repository root and gives:
#   ROOT, PY (Debian's python3 with numpy/onnx), T (a temporary directory removed at exit
#   unless KEEP=1)
#   ok NAME / bad NAME      count a passed / failed check (passes, fails)
#   expect_ok NAME CMD...   CMD succeeds (stdout+stderr in $T/out.txt)
#   expect_err NAME PAT CMD...  a clean error: CMD exits non-zero without a signal or a timeout
#                           (60 s) and its output matches PAT (grep pattern; output in $T/err.txt)
#   expect_rc NAME RC PAT CMD...  CMD exits with exactly RC and its output matches PAT
#   finish [LABEL]          prints the tally; its status is the test's (use it last)
: "${KILN:?KILN must point at the kiln binary}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PY=/usr/bin/python3
T=$(mktemp -d)
[ -n "${KEEP:-}" ] || trap 'rm -rf "$T"' EXIT   # KEEP=1: leave $T for a look
fails=0
passes=0
ok() { passes=$((passes + 1)); echo "pass $1"; }
bad() { fails=$((fails + 1)); echo "FAIL $1"; }
expect_ok() { local name=$1; shift; if "$@" > "$T/out.txt" 2>&1; then ok "$name"; else bad "$name: $(tail -2 "$T/out.txt")"; fi; }
expect_err() {
  local name=$1 pat=$2; shift 2
  timeout 60 "$@" > "$T/err.txt" 2>&1
  local rc=$?
  if [ $rc -ne 0 ] && [ $rc -lt 124 ] && grep -q -- "$pat" "$T/err.txt"; then ok "$name"; else bad "$name (rc=$rc): $(tail -2 "$T/err.txt")"; fi
}
expect_rc() {
  local name=$1 want=$2 pat=$3; shift 3
  timeout 60 "$@" > "$T/err.txt" 2>&1
  local rc=$?
  if [ $rc -eq "$want" ] && grep -q -- "$pat" "$T/err.txt"; then ok "$name"; else bad "$name (rc=$rc): $(tail -2 "$T/err.txt")"; fi
}
finish() { echo "${1:+$1: }$passes passed, $fails failed"; [ "$fails" -eq 0 ]; }

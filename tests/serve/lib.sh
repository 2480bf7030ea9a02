# Shared helpers of the kiln serve tests (sourced). Usage: lib.sh is sourced with KILN set.
set -euo pipefail
: "${KILN:?KILN must point at the kiln binary}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
MODELS="${KILN_MODELS:-$ROOT/models}"
# the tests' Python clients import tests/serve/kv2http.py (the HTTP call)
export PYTHONPATH="$ROOT/tests/serve${PYTHONPATH:+:$PYTHONPATH}"
CLS_MODEL="$MODELS/ocr/ch_ppocr_mobile_v2.0_cls_infer.onnx"
TMP="$(mktemp -d)"
SPID=""
PORT=""
cleanup() {
  if [ -n "$SPID" ] && kill -0 "$SPID" 2>/dev/null; then kill -KILL "$SPID" 2>/dev/null || true; fi
  rm -rf "$TMP"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; [ -f "$TMP/server.log" ] && tail -20 "$TMP/server.log" >&2; exit 1; }
pass() { echo "ok: $*"; }

TINY_CONFIG='max_batch_size: 8
input [ { name: "input" data_type: TYPE_FP32 dims: [3, 32, 32] } ]
dynamic_batching { preferred_batch_size: [4, 8] max_queue_delay_microseconds: 2000 }
instance_group [ { count: 2 kind: KIND_CPU } ]'
CLS_CONFIG='max_batch_size: 8
input [ { name: "x", data_type: TYPE_FP32, dims: [ 3, 48, 192 ] } ]
dynamic_batching { }'
# make_repo DIR [tiny_cnn config.pbtxt text] [cls config.pbtxt text]: tiny_cnn and the OCR classifier.
make_repo() {
  local d="$1"
  mkdir -p "$d/tiny_cnn/1" "$d/cls/1"
  cp "$MODELS/tiny_cnn.onnx" "$d/tiny_cnn/1/model.onnx"
  cp "$CLS_MODEL" "$d/cls/1/model.onnx"
  printf '%s\n' "${2:-$TINY_CONFIG}" > "$d/tiny_cnn/config.pbtxt"
  printf '%s\n' "${3:-$CLS_CONFIG}" > "$d/cls/config.pbtxt"
}

# start_server REPO [extra args...]: runs kiln serve on a free loopback port; sets PORT and SPID.
start_server() {
  local repo="$1"; shift
  "$KILN" serve --model-repository "$repo" --http-port 0 --threads 1 "$@" > "$TMP/server.log" 2>&1 &
  SPID=$!
  for _ in $(seq 1 600); do
    PORT="$(grep -o 'listening on port [0-9]*' "$TMP/server.log" | grep -o '[0-9]*$' || true)"
    [ -n "$PORT" ] && break
    kill -0 "$SPID" 2>/dev/null || fail "server exited during start"
    sleep 0.1
  done
  [ -n "$PORT" ] || fail "server did not start"
  URL="http://127.0.0.1:$PORT"
}

# stop_server: SIGTERM, expects exit status 0.
stop_server() {
  kill -TERM "$SPID"
  local rc=0
  wait "$SPID" || rc=$?
  SPID=""
  [ "$rc" -eq 0 ] || fail "server exited with $rc after SIGTERM"
}

# onnx_python: a Python that imports onnx and numpy (Debian's python3-onnx first, then PATH's).
onnx_python() {
  local p
  for p in /usr/bin/python3 python3; do
    "$p" -c 'import onnx, numpy' 2>/dev/null && { echo "$p"; return; }
  done
  fail "no Python with onnx and numpy (scripts/bootstrap.sh installs python3-onnx)"
}

rss_kb() { awk '/^VmRSS/ {print $2}' "/proc/$SPID/status"; }
# http_code METHOD PATH [curl args...]: prints the status code; the body goes to $TMP/body
http_code() {
  local m="$1" p="$2"; shift 2
  curl -s -o "$TMP/body" -w '%{http_code}' -X "$m" -H 'Expect:' "$@" "$URL$p"
}

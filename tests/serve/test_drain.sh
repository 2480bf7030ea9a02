#!/usr/bin/env bash
# SIGTERM drains: requests queued when the signal arrives still get their 200 with the right
# result, new connections are refused, and the server exits 0. usage: test_drain.sh KILN
KILN="$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"
source "$(dirname "$0")/lib.sh"
# one request alone waits 1.5 s in the queue for a batch of 8 that never comes
make_repo "$TMP/repo" "${TINY_CONFIG/\[4, 8\] max_queue_delay_microseconds: 2000/[8] max_queue_delay_microseconds: 1500000}"
mkdir -p "$TMP/repo/tiny_p2/1" && cp "$MODELS/tiny_cnn.onnx" "$TMP/repo/tiny_p2/1/model.onnx"
printf '%s\n' "${TINY_CONFIG/\[4, 8\] max_queue_delay_microseconds: 2000/[2] max_queue_delay_microseconds: 1500000}" > "$TMP/repo/tiny_p2/config.pbtxt"
start_server "$TMP/repo"

# a request that alone reaches the preferred batch (4 rows >= 2) runs at once, without the delay
python3 -c 'import json; json.dump({"inputs": [{"name": "input", "shape": [4, 3, 32, 32], "datatype": "FP32", "data": [0.25] * 4 * 3072}]}, open("'"$TMP"'/req4.json", "w"))'
t=$(curl -s -o /dev/null -w '%{http_code} %{time_total}' -H 'Expect:' --data-binary @"$TMP/req4.json" "$URL/v2/models/tiny_p2/infer")
python3 -c 'import sys; c, s = sys.argv[1].split(); assert c == "200" and float(s) < 1.0, sys.argv[1]' "$t" ||
  fail "a request already at the preferred batch waited for the queue delay ($t)"
pass "a full batch does not wait for the queue delay ($t)"
python3 -c 'import json; json.dump({"inputs": [{"name": "input", "shape": [1, 3, 32, 32], "datatype": "FP32", "data": [0.25] * 3072}]}, open("'"$TMP"'/req.json", "w"))'
pids=()
for i in 1 2 3; do
  curl -s -o "$TMP/resp$i" -w '%{http_code}' -H 'Expect:' --data-binary @"$TMP/req.json" "$URL/v2/models/tiny_cnn/infer" > "$TMP/code$i" &
  pids+=($!)
done
sleep 0.5
t0=$(date +%s%N)
kill -TERM "$SPID"
sleep 0.2
code="$(curl -s -o /dev/null -w '%{http_code}' "$URL/v2/health/live" || true)"
[ "$code" = 000 ] || fail "a new connection was accepted while draining (HTTP $code)"
rc=0
wait "$SPID" || rc=$?
SPID=""
[ "$rc" -eq 0 ] || fail "server exited with $rc"
for i in 0 1 2; do wait "${pids[$i]}"; done
for i in 1 2 3; do
  [ "$(cat "$TMP/code$i")" = 200 ] || fail "queued request $i got $(cat "$TMP/code$i")"
  cmp -s "$TMP/resp1" "$TMP/resp$i" || fail "responses differ"
done
python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); assert r["outputs"][0]["shape"]==[1,10]' "$TMP/resp1" || fail "bad response"
echo "drain took $(( ($(date +%s%N) - t0) / 1000000 )) ms"
pass "SIGTERM: 3 queued requests answered 200, new connections refused, exit 0"

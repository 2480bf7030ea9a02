#!/usr/bin/env bash
# kiln serve under load: >= 10,000 binary requests at concurrency 64 (plus JSON ones) with zero
# errors, the server's memory flat, and the metrics accounting for every request.
# usage: test_load.sh KILN
KILN="$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"
source "$(dirname "$0")/lib.sh"
make_repo "$TMP/repo"
# glibc gives each contending thread its own malloc arena (up to 8 per core) and their
# fragmentation grows RSS for a while even without a leak; two arenas make growth mean a leak
export MALLOC_ARENA_MAX=2
start_server "$TMP/repo"
# warm-up with every payload kind, so that allocator arenas of all threads exist before measuring
"$KILN" loadgen --url "$URL" -m tiny_cnn --concurrency 64 --requests 3000 --binary --batch 2 > "$TMP/warm.txt" &&
  "$KILN" loadgen --url "$URL" -m tiny_cnn --concurrency 64 --requests 500 >> "$TMP/warm.txt" &&
  "$KILN" loadgen --url "$URL" -m tiny_cnn --concurrency 8 --requests 200 --request-rate 1000 --binary >> "$TMP/warm.txt" ||
  fail "warm-up: $(cat "$TMP/warm.txt")"
rss0="$(rss_kb)"
"$KILN" loadgen --url "$URL" -m tiny_cnn --concurrency 64 --requests 10000 --binary --batch 2 --json > "$TMP/load.json" ||
  fail "load: $(cat "$TMP/load.json")"
"$KILN" loadgen --url "$URL" -m tiny_cnn --concurrency 64 --requests 1000 > "$TMP/json.txt" || fail "json load: $(cat "$TMP/json.txt")"
"$KILN" loadgen --url "$URL" -m tiny_cnn --concurrency 8 --requests 500 --request-rate 1000 --binary > "$TMP/rate.txt" ||
  fail "rate mode: $(cat "$TMP/rate.txt")"
rss1="$(rss_kb)"
cat "$TMP/warm.txt" "$TMP/json.txt" "$TMP/rate.txt"
curl -s "$URL/metrics" > "$TMP/metrics"
python3 - "$TMP/load.json" "$TMP/metrics" "$rss0" "$rss1" <<'PY' || fail "load checks"
import json, re, sys
r = json.load(open(sys.argv[1]))["levels"][0]
print("10,000 requests at concurrency 64: %.0f infer/s, p50 %.2f ms, p99 %.2f ms, %d errors" %
      (r["infer_per_sec"], r["p50_ms"], r["p99_ms"], r["errors"]))
assert r["requests"] == 10000 and r["errors"] == 0, r
m = {}
for line in open(sys.argv[2]):
    g = re.match(r'(\w+)\{model="tiny_cnn",version="1"\} (\d+)', line)
    if g:
        m[g.group(1)] = int(g.group(2))
assert m["nv_inference_request_success"] == 3700 + 10000 + 1000 + 500, m
assert m["nv_inference_request_failure"] == 0, m
assert m["nv_inference_count"] == 6000 + 500 + 200 + 20000 + 1000 + 500, m
print("metrics: %d requests in %d executions" % (m["nv_inference_request_success"], m["nv_inference_exec_count"]))
rss0, rss1 = int(sys.argv[3]), int(sys.argv[4])
print("server RSS: %d kB after warm-up, %d kB after 11,500 more requests" % (rss0, rss1))
assert rss1 - rss0 < 4 * 1024, "server memory grew by %d kB" % (rss1 - rss0)
PY
pass "load: zero errors, memory flat, metrics exact"
stop_server

#!/usr/bin/env bash
# Model lifecycle through the repository extension, as Triton's: server readiness follows the
# models asked to be loaded (a directory the index finds does not count; unloading a model that
# failed to load restores readiness); an unload sent while the model loads wins (the last request
# decides); a reload keeps the loaded version serving until the new one is ready (no failed request,
# no unready moment; a failed reload keeps it), and the load runs off the HTTP threads.
# usage: test_lifecycle.sh KILN
KILN="$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"
source "$(dirname "$0")/lib.sh"
mkdir -p "$TMP/repo/tiny/1"
cp "$MODELS/tiny_cnn.onnx" "$TMP/repo/tiny/1/model.onnx"
# cls: no preferred batch sizes, so that every load measures batches 1..32 (a load of 0.4 s or more)
mkdir -p "$TMP/repo/cls/1"
cp "$CLS_MODEL" "$TMP/repo/cls/1/model.onnx"
printf '%s\n' 'max_batch_size: 32' 'input [ { name: "x" dims: [3, 48, 192] } ]' 'dynamic_batching { }' \
  'parameters { key: "threads" value: { string_value: "1" } }' > "$TMP/repo/cls/config.pbtxt"
start_server "$TMP/repo"
ready() { http_code GET /v2/health/ready; }
# reloads: how many reloads of cls the server has logged; await_reload N: until more than N (at most ~5 s)
reloads() { grep -c "reloading 'cls'" "$TMP/server.log" || true; }
await_reload() {
  for _ in $(seq 1 500); do
    [ "$(reloads)" -gt "$1" ] && return
    sleep 0.01
  done
}
index() { http_code POST /v2/repository/index > /dev/null; cat "$TMP/body"; }
# state NAME: "STATE reason" of NAME in the index ("absent" if not listed)
state() {
  index | python3 -c 'import json, sys; e = [x for x in json.load(sys.stdin) if x["name"] == sys.argv[1]]; print("%s %s" % (e[0]["state"], e[0].get("reason", "")) if e else "absent")' "$1"
}

# 1. readiness: a new directory listed by the index, a failed load, an unload
[ "$(ready)" = 200 ] || fail "not ready at start"
mkdir "$TMP/repo/incoming"   # e.g. a model being copied in
[ "$(state incoming)" = "UNAVAILABLE " ] || fail "the index does not list the new directory: $(cat "$TMP/body")"
[ "$(ready)" = 200 ] || fail "a directory found by the index (never loaded) made the server unready"
rmdir "$TMP/repo/incoming"
[ "$(state incoming)" = absent ] || fail "the index still lists a directory that is gone: $(cat "$TMP/body")"
mkdir -p "$TMP/repo/broken/1" && echo "not onnx" > "$TMP/repo/broken/1/model.onnx"
[ "$(http_code POST /v2/repository/models/broken/load)" = 400 ] || fail "loading a broken model: $(cat "$TMP/body")"
[ "$(ready)" = 503 ] || fail "ready although a model asked to be loaded failed"
[ "$(http_code POST /v2/repository/models/broken/unload)" = 200 ] || fail "unloading the broken model: $(cat "$TMP/body")"
[ "$(ready)" = 200 ] || fail "still unready after the model that failed was unloaded"
[ "$(state broken)" = "UNAVAILABLE unloaded" ] || fail "index after the unload: $(cat "$TMP/body")"
[ "$(http_code POST /v2/repository/models/tiny/unload)" = 200 ] && [ "$(ready)" = 200 ] || fail "unloading a ready model"
[ "$(http_code POST /v2/repository/models/tiny/load)" = 200 ] && [ "$(ready)" = 200 ] || fail "loading it again"
pass "readiness follows the models asked to be loaded (index, failed load, unload)"

# 2. unload while the model is loading (nothing served yet): the unload wins, the load answers 409
[ "$(http_code POST /v2/repository/models/cls/unload)" = 200 ] || fail "unloading cls"
caught=""
for attempt in 1 2 3 4 5; do
  curl -s -o "$TMP/load_body" -w '%{http_code}' -X POST "$URL/v2/repository/models/cls/load" > "$TMP/load_code" &
  lpid=$!
  for _ in $(seq 1 400); do   # until the index shows the load in progress
    index | grep -q '"name":"cls","state":"LOADING"' && { caught=1; break; }   # grep: python starts too slowly
    kill -0 "$lpid" 2>/dev/null || break
  done
  if [ -n "$caught" ]; then
    [ "$(http_code POST /v2/repository/models/cls/unload)" = 200 ] || fail "unload during the load: $(cat "$TMP/body")"
  fi
  wait "$lpid" || true
  [ -n "$caught" ] && break
  [ "$(http_code POST /v2/repository/models/cls/unload)" = 200 ] || fail "unloading cls"
done
[ -n "$caught" ] || fail "never caught cls loading (5 loads)"
[ "$(cat "$TMP/load_code")" = 409 ] && grep -q "unloaded while it was loading" "$TMP/load_body" ||
  fail "the load overtaken by an unload answered $(cat "$TMP/load_code") $(cat "$TMP/load_body")"
[ "$(state cls)" = "UNAVAILABLE unloaded" ] || fail "cls after an unload during its load: $(cat "$TMP/body")"
[ "$(http_code GET /v2/models/cls/ready)" = 400 ] || fail "cls is ready after the unload sent during its load"
[ "$(ready)" = 200 ] || fail "server unready after the unload during a load"
[ "$(http_code POST /v2/repository/models/cls/load)" = 200 ] && [ "$(http_code GET /v2/models/cls/ready)" = 200 ] ||
  fail "loading cls again: $(cat "$TMP/body")"
pass "an unload sent during a load wins: the load answers 409, the model ends unloaded"

# 3. reloads while requests run: the loaded version serves until the new one is ready (zero failed
# requests, the server ready throughout); a reload that fails keeps it serving and says why
cat > "$TMP/hammer.py" <<'PYEOF'
import json, struct, sys, threading, time, urllib.error, urllib.request
url, model, steps = sys.argv[1], sys.argv[2], sys.argv[3:]
x = struct.pack("<%df" % (3 * 48 * 192), *[(i % 97) / 97.0 for i in range(3 * 48 * 192)])
hdr = json.dumps({"inputs": [{"name": "x", "shape": [1, 3, 48, 192], "datatype": "FP32",
                              "parameters": {"binary_data_size": len(x)}}]}).encode()
def call(method, path, body=None, headers=None):
    req = urllib.request.Request(url + path, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()
    except Exception as e:   # a reset or closed connection is a failure too, not a dead thread
        return 0, repr(e).encode()
stop, bad, counts = False, [], {"infer": 0, "ready": 0}
def infer():
    while not stop:
        s, b = call("POST", "/v2/models/%s/infer" % model, hdr + x, {"Inference-Header-Content-Length": str(len(hdr))})
        counts["infer"] += 1
        if s != 200:
            bad.append("infer %d %s" % (s, b[:200]))
def ready():
    while not stop:
        for path in ("/v2/health/ready", "/v2/models/%s/ready" % model):
            s, b = call("GET", path)
            counts["ready"] += 1
            if s != 200:
                bad.append("%s %d" % (path, s))
        time.sleep(0.01)
ts = [threading.Thread(target=infer) for _ in range(2)] + [threading.Thread(target=ready)]
for t in ts:
    t.start()
time.sleep(0.3)
for step in steps:   # "load:CODE": a load that must answer CODE
    want = int(step.split(":")[1])
    s, b = call("POST", "/v2/repository/models/%s/load" % model)
    if s != want:
        bad.append("load answered %d, expected %d: %s" % (s, want, b[:200]))
time.sleep(0.3)
stop = True
for t in ts:
    t.join()
print("  %d infer and %d readiness requests during %d reloads, %d failed" % (counts["infer"], counts["ready"], len(steps), len(bad)))
assert counts["infer"] > 0 and not bad, bad[:5]
PYEOF
python3 "$TMP/hammer.py" "$URL" cls load:200 load:200 load:200 || fail "requests failed during reloads"
[ "$(grep -c "reloading 'cls' (version 1 serves until the new one is ready)" "$TMP/server.log" || true)" -ge 3 ] || fail "no reload logged"
cp "$TMP/repo/cls/config.pbtxt" "$TMP/cls_config"
echo 'bogus_field: 1' >> "$TMP/repo/cls/config.pbtxt"
python3 "$TMP/hammer.py" "$URL" cls load:400 || fail "requests failed during a failed reload"
[ "$(state cls | cut -d' ' -f1)" = READY ] && grep -q "bogus_field" <<< "$(state cls)" ||
  fail "after a failed reload the index should show cls READY with the reason: $(cat "$TMP/body")"
[ "$(ready)" = 200 ] || fail "a failed reload (the old version serving) made the server unready"
cp "$TMP/cls_config" "$TMP/repo/cls/config.pbtxt"
[ "$(http_code POST /v2/repository/models/cls/load)" = 200 ] && [ "$(state cls)" = "READY " ] ||
  fail "reload after the config was fixed: $(cat "$TMP/body")"
pass "reloads under load: zero failed requests, ready throughout; a failed reload keeps the old version serving"

# 4. unload during a reload: the old version goes out of service at once, the reload is dropped
caught=""
for attempt in 1 2 3 4 5; do
  [ "$(http_code GET /v2/models/cls/ready)" = 200 ] || [ "$(http_code POST /v2/repository/models/cls/load)" = 200 ] ||
    fail "loading cls: $(cat "$TMP/body")"
  n0="$(reloads)"
  curl -s -o "$TMP/load_body" -w '%{http_code}' -X POST "$URL/v2/repository/models/cls/load" > "$TMP/load_code" &
  lpid=$!
  await_reload "$n0"
  [ "$(http_code POST /v2/repository/models/cls/unload)" = 200 ] || fail "unload during a reload: $(cat "$TMP/body")"
  [ "$(http_code GET /v2/models/cls/ready)" = 400 ] || fail "the old version still serves after the unload"
  wait "$lpid" || true
  [ "$(cat "$TMP/load_code")" = 409 ] && { caught=1; break; }   # else the reload ended before the unload came
done
[ -n "$caught" ] || fail "the reload overtaken by an unload answered $(cat "$TMP/load_code") $(cat "$TMP/load_body") (5 tries)"
[ "$(state cls)" = "UNAVAILABLE unloaded" ] && [ "$(http_code GET /v2/models/cls/ready)" = 400 ] ||
  fail "cls after an unload during its reload: $(cat "$TMP/body")"
pass "an unload sent during a reload takes the old version out at once and drops the reload"

# 5. a load runs off the HTTP threads: with one HTTP thread, readiness probes are answered while a
# reload builds (they used to wait for it, and were dropped past the 30 s connection timeout)
stop_server
rm -rf "$TMP/repo/broken"
start_server "$TMP/repo" --http-threads 1
caught=""
for attempt in 1 2 3; do
  n0="$(grep -c "loaded 'cls'" "$TMP/server.log" || true)"
  r0="$(reloads)"
  curl -s -o "$TMP/load_body" -w '%{http_code}' -X POST "$URL/v2/repository/models/cls/load" > "$TMP/load_code" &
  lpid=$!
  await_reload "$r0"
  code="$(ready)$(http_code GET /v2/models/cls/ready)"
  n1="$(grep -c "loaded 'cls'" "$TMP/server.log" || true)"
  wait "$lpid" || true
  [ "$code" = 200200 ] || fail "readiness during a reload: $code"
  [ "$(cat "$TMP/load_code")" = 200 ] || fail "reload: $(cat "$TMP/load_code") $(cat "$TMP/load_body")"
  [ "$n1" = "$n0" ] && { caught=1; break; }   # answered while the reload was still building
done
[ -n "$caught" ] || fail "with one HTTP thread, readiness probes waited for the reload to finish (3 tries)"
pass "a load runs off the HTTP threads: probes are answered while it builds"

stop_server

#!/usr/bin/env bash
# kiln serve end to end: metadata, config, JSON and binary infer equal to `kiln run` (curl and a
# Python urllib client, concurrent requests merged by dynamic batching), repository extension,
# metrics. usage: test_infer.sh KILN
KILN="$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"
source "$(dirname "$0")/lib.sh"
make_repo "$TMP/repo" "${TINY_CONFIG/\[4, 8\] max_queue_delay_microseconds: 2000/[8] max_queue_delay_microseconds: 300000}"
mkdir -p "$TMP/repo/auto/1" && cp "$MODELS/tiny_cnn.onnx" "$TMP/repo/auto/1/model.onnx"   # no config.pbtxt
start_server "$TMP/repo"

# metadata and config
[ "$(http_code GET /v2/health/live)" = 200 ] || fail "live"
[ "$(http_code GET /v2/health/ready)" = 200 ] || fail "ready"
[ "$(http_code GET /v2/models/tiny_cnn)" = 200 ] || fail "metadata"
grep -q '"shape":\[-1,3,32,32\]' "$TMP/body" || fail "metadata shape: $(cat "$TMP/body")"
[ "$(http_code GET /v2/models/tiny_cnn/versions/1/ready)" = 200 ] || fail "version ready"
[ "$(http_code GET /v2/models/cls/config)" = 200 ] || fail "config"
python3 - "$TMP/body" <<'PY' || fail "cls config: $(cat "$TMP/body")"
import json, sys
c = json.load(open(sys.argv[1]))
b = c["kiln_batching"]
assert c["max_batch_size"] == 8 and b["source"] == "measured", b
assert set(b["latency_us"]) == {"1", "2", "4", "8"}, b
pref = c["dynamic_batching"]["preferred_batch_size"]
per = {int(k): v for k, v in b["per_item_us"].items()}
assert per == {k: v / k for k, v in ((int(k), v) for k, v in b["latency_us"].items())}, b
# the rule, checked against the curve the server shows: the smallest batch within 10% of the best
assert pref == [min(k for k in per if per[k] <= 1.1 * min(per.values()))], (pref, b)
assert 0 < c["dynamic_batching"]["max_queue_delay_microseconds"] <= b["latency_us"]["1"] / 2 + 1, c
PY
[ "$(http_code GET /v2/models/auto/config)" = 200 ] || fail "auto config"
python3 - "$TMP/body" <<'PY' || fail "auto-completed config: $(cat "$TMP/body")"
import json, sys
c = json.load(open(sys.argv[1]))
assert c["max_batch_size"] == 8 and c["input"] == [{"name": "input", "data_type": "TYPE_FP32", "dims": [3, -1, -1]}], c
assert c["output"] == [{"name": "logits", "data_type": "TYPE_FP32", "dims": [10]}], c
assert c["kiln_batching"]["source"] == "default" and "dynamic dimension" in c["kiln_batching"]["reason"], c
PY
python3 -c 'import json; print(json.dumps({"inputs": [{"name": "input", "shape": [2, 3, 16, 24], "datatype": "FP32", "data": [0.5] * 2 * 3 * 16 * 24}]}))' > "$TMP/auto.json"
[ "$(http_code POST /v2/models/auto/infer --data-binary @"$TMP/auto.json")" = 200 ] && grep -q '"shape":\[2,10\]' "$TMP/body" ||
  fail "auto infer at dynamic dims: $(cat "$TMP/body")"
pass "metadata, readiness, config (batching measured from the engine; auto-complete without config.pbtxt)"

# engine cache beside the model, written atomically (no temporary left behind)
ls "$TMP/repo/tiny_cnn/1/".kiln-cache-*.kiln >/dev/null 2>&1 || fail "no engine cache"
! ls "$TMP/repo/tiny_cnn/1/" | grep -q tmp || fail "temporary cache file left"

# curl: JSON infer equals kiln run byte for byte (floats are printed with 17 digits)
python3 - "$TMP" <<'PY'
import json, random, struct, sys
t = sys.argv[1]
random.seed(3)
vals = [struct.unpack("<f", struct.pack("<f", random.uniform(-1, 1)))[0] for _ in range(2 * 3 * 32 * 32)]
json.dump({"id": "curl-1", "inputs": [{"name": "input", "shape": [2, 3, 32, 32], "datatype": "FP32", "data": vals}]},
          open(t + "/req.json", "w"))
raw = struct.pack("<%df" % len(vals), *vals)
hdr = json.dumps({"inputs": [{"name": "input", "shape": [2, 3, 32, 32], "datatype": "FP32",
                              "parameters": {"binary_data_size": len(raw)}}],
                  "parameters": {"binary_data_output": True}}).encode()
open(t + "/req.bin", "wb").write(hdr + raw)
open(t + "/req.hl", "w").write(str(len(hdr)))
h = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3, 32, 32), }"
h += " " * ((64 - (10 + len(h) + 1) % 64) % 64) + "\n"
open(t + "/in.npy", "wb").write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(h)) + h.encode() + raw)
PY
"$KILN" run "$TMP/repo/tiny_cnn/1/model.onnx" --input input="$TMP/in.npy" --output-dir "$TMP/ref" --threads 1 >/dev/null
[ "$(http_code POST /v2/models/tiny_cnn/infer -H 'Content-Type: application/json' --data-binary @"$TMP/req.json")" = 200 ] ||
  fail "json infer: $(cat "$TMP/body")"
cp "$TMP/body" "$TMP/resp.json"
[ "$(http_code POST /v2/models/tiny_cnn/infer -H "Inference-Header-Content-Length: $(cat "$TMP/req.hl")" \
      --data-binary @"$TMP/req.bin" -D "$TMP/hdrs")" = 200 ] || fail "binary infer: $(cat "$TMP/body")"
python3 - "$TMP" <<'PY' || fail "curl responses differ from kiln run"
import json, re, struct, sys
t = sys.argv[1]
ref = open(t + "/ref/logits.npy", "rb").read()
hl = struct.unpack("<H", ref[8:10])[0]
ref = list(struct.unpack("<20f", ref[10 + hl:]))
r = json.load(open(t + "/resp.json"))
assert r["id"] == "curl-1" and r["outputs"][0]["shape"] == [2, 10], r
assert r["outputs"][0]["data"] == ref, "JSON output is not byte-exact"
body = open(t + "/body", "rb").read()
m = re.search(r"(?i)inference-header-content-length: *(\d+)", open(t + "/hdrs").read())
n = int(m.group(1))
j = json.loads(body[:n])
assert j["outputs"][0]["parameters"]["binary_data_size"] == 80, j
assert list(struct.unpack("<20f", body[n:])) == ref, "binary output is not byte-exact"
PY
pass "curl JSON and binary infer equal kiln run byte for byte"

# Python standard-library client: concurrent requests (merged by the batcher) vs unbatched kiln run
python3 "$ROOT/tests/serve/client.py" "$URL" tiny_cnn "$TMP/repo/tiny_cnn/1/model.onnx" "$KILN" "$TMP" 8 || fail "python client (tiny_cnn)"
python3 "$ROOT/tests/serve/client.py" "$URL" cls "$TMP/repo/cls/1/model.onnx" "$KILN" "$TMP" 4 || fail "python client (cls)"
curl -s "$URL/metrics" > "$TMP/metrics"
python3 - "$TMP/metrics" <<'PY' || fail "metrics: $(grep tiny_cnn "$TMP/metrics")"
import re, sys
m = {}
for line in open(sys.argv[1]):
    g = re.match(r'(\w+)\{model="tiny_cnn",version="1"\} (\d+)', line)
    if g:
        m[g.group(1)] = int(g.group(2))
for k in ("nv_inference_request_success", "nv_inference_request_failure", "nv_inference_count", "nv_inference_exec_count",
          "nv_inference_queue_duration_us", "nv_inference_compute_input_duration_us",
          "nv_inference_compute_infer_duration_us", "nv_inference_compute_output_duration_us"):
    assert k in m, k
assert m["nv_inference_request_success"] == 18 and m["nv_inference_request_failure"] == 0, m
assert m["nv_inference_exec_count"] < m["nv_inference_request_success"], "no request was batched: %r" % m
print("metrics: %d requests, %d inferences in %d executions" % (m["nv_inference_request_success"], m["nv_inference_count"], m["nv_inference_exec_count"]))
PY
pass "metrics (requests were batched)"

# kiln loadgen with a given .npy input (batch 2 from the file), JSON and binary
"$KILN" loadgen --url "$URL" -m tiny_cnn --input input="$TMP/in.npy" --concurrency 4 --requests 50 > "$TMP/lg.txt" &&
  "$KILN" loadgen --url "$URL" -m tiny_cnn --input input="$TMP/in.npy" --concurrency 4 --requests 50 --binary >> "$TMP/lg.txt" ||
  fail "loadgen --input: $(cat "$TMP/lg.txt")"
# the file's batch is the batch: infer/s counts the inferences the server did (nv_inference_count), and a --batch
# other than the file's is refused (it would count inferences never sent)
count() { curl -s "$URL/metrics" | sed -n 's/^nv_inference_count{model="tiny_cnn",version="1"} //p'; }
c0="$(count)"
"$KILN" loadgen --url "$URL" -m tiny_cnn --input input="$TMP/in.npy" --requests 10 --json > "$TMP/lg.json" ||
  fail "loadgen --input --json: $(cat "$TMP/lg.json")"
python3 - "$TMP/lg.json" "$c0" "$(count)" <<'PY' || fail "loadgen --input reports another batch than the file's: $(cat "$TMP/lg.json")"
import json, sys
r, done = json.load(open(sys.argv[1])), int(sys.argv[3]) - int(sys.argv[2])
l = r["levels"][0]
assert r["batch"] == 2 and l["requests"] == 10 and done == 20, (r["batch"], l["requests"], done)
assert abs(l["infer_per_sec"] * l["seconds"] - done) < 0.01 * done, l
PY
rc=0; "$KILN" loadgen --url "$URL" -m tiny_cnn --input input="$TMP/in.npy" --batch 3 --requests 10 > "$TMP/lg.txt" 2>&1 || rc=$?
[ "$rc" = 2 ] && grep -q "has batch 2 .* --batch is 3" "$TMP/lg.txt" || fail "loadgen --batch 3 with a batch-2 file: exit $rc: $(cat "$TMP/lg.txt")"
"$KILN" loadgen --url "$URL" -m tiny_cnn --input input="$TMP/in.npy" --batch 2 --requests 10 > "$TMP/lg.txt" ||
  fail "loadgen --batch 2 with a batch-2 file: $(cat "$TMP/lg.txt")"
pass "loadgen with .npy inputs"

# repository extension
[ "$(http_code POST /v2/repository/index)" = 200 ] && grep -q '"name":"cls","state":"READY","version":"1"' "$TMP/body" && grep -q '"name":"auto","state":"READY"' "$TMP/body" ||
  fail "index: $(cat "$TMP/body")"
[ "$(http_code POST /v2/repository/models/cls/unload)" = 200 ] || fail "unload"
[ "$(http_code GET /v2/models/cls/ready)" = 400 ] || fail "unloaded model still ready"
[ "$(http_code POST /v2/repository/index -d '{"ready":true}')" = 200 ] && ! grep -q '"cls"' "$TMP/body" || fail "ready index"
[ "$(http_code POST /v2/repository/models/cls/load)" = 200 ] || fail "load: $(cat "$TMP/body")"
[ "$(http_code GET /v2/models/cls/ready)" = 200 ] || fail "reloaded model not ready"
grep -q "engine from cache .*/cls/1/.kiln-cache-" "$TMP/server.log" || fail "the reload did not use the engine cache"
# a corrupt cache entry is rebuilt, not trusted
for f in "$TMP/repo/cls/1/".kiln-cache-*.kiln; do printf 'garbage' > "$f"; done
[ "$(http_code POST /v2/repository/models/cls/load)" = 200 ] || fail "load over a corrupt cache: $(cat "$TMP/body")"
[ "$(grep -c "engine from cache .*/cls/1/" "$TMP/server.log")" = 1 ] || fail "a corrupt cache was used"
pass "repository index/unload/load"

# metrics on their own port (only /metrics there)
stop_server
start_server "$TMP/repo" --metrics-port 0
MPORT="$(grep -o 'metrics on port [0-9]*' "$TMP/server.log" | grep -o '[0-9]*$')"
curl -s "http://127.0.0.1:$MPORT/metrics" | grep -q '^nv_inference_count{model="cls",version="1"} 0$' || fail "metrics port"
[ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$MPORT/v2")" = 404 ] || fail "metrics port serves /v2"
stop_server
pass "metrics port; SIGTERM exits 0"

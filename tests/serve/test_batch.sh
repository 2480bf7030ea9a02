#!/usr/bin/env bash
# Dynamic batching against what the engine runs: max_batch_size checked against the engine's optimization
# profiles at load, merged batches that always fit a profile, the load-time probe's failures respected; a request
# that fails in a merged batch fails alone (its batch-mates answered as if they had run by themselves), and the
# metrics count successful inferences only. usage: test_batch.sh KILN
KILN="$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"
source "$(dirname "$0")/lib.sh"
PY="$(onnx_python)"
R="$TMP/repo"
mkdir -p "$R/gap/1" "$R/over/1" "$R/auto4/1" "$R/upto4/1" "$R/bert/1"
cp "$MODELS/tiny_bert.onnx" "$R/bert/1/model.onnx"
printf 'max_batch_size: 8\ndynamic_batching { preferred_batch_size: [4] max_queue_delay_microseconds: 500000 }\n' \
  > "$R/bert/config.pbtxt"
# tiny_cnn engines: one profile of batch 1-4; two profiles, batch 1-4 and batch 8 (nothing between)
"$KILN" build "$MODELS/tiny_cnn.onnx" -o "$R/over/1/model.kiln" --min-shapes input:1x3x32x32 \
  --opt-shapes input:2x3x32x32 --max-shapes input:4x3x32x32 > /dev/null || fail "kiln build (one profile)"
cp "$R/over/1/model.kiln" "$R/auto4/1/model.kiln"
"$KILN" build "$MODELS/tiny_cnn.onnx" -o "$R/gap/1/model.kiln" --min-shapes input:1x3x32x32 \
  --opt-shapes input:2x3x32x32 --max-shapes input:4x3x32x32 --shapes input:8x3x32x32 > /dev/null ||
  fail "kiln build (two profiles)"
printf 'max_batch_size: 8\n' > "$R/over/config.pbtxt"
printf 'max_batch_size: 8\ndynamic_batching { preferred_batch_size: [8] max_queue_delay_microseconds: 400000 }\n' \
  > "$R/gap/config.pbtxt"
# y = x + table[batch] with a table of 5 zeros: runs at batch 1-4, fails at 5 and above (the probe fails at batch 8)
"$PY" - "$R/upto4/1/model.onnx" <<'PY'
import sys
import numpy as np
from onnx import TensorProto as T, helper as h, numpy_helper, save
x, y = h.make_tensor_value_info("x", T.FLOAT, ["b", 3]), h.make_tensor_value_info("y", T.FLOAT, ["b", 3])
inits = [numpy_helper.from_array(np.zeros(5, np.float32), "table"), numpy_helper.from_array(np.array(0, np.int64), "zero")]
nodes = [h.make_node("Shape", ["x"], ["s"]), h.make_node("Gather", ["s", "zero"], ["n"]),
         h.make_node("Gather", ["table", "n"], ["v"]), h.make_node("Add", ["x", "v"], ["y"])]
save(h.make_model(h.make_graph(nodes, "upto4", [x], [y], inits), opset_imports=[h.make_opsetid("", 17)]), sys.argv[1])
PY
printf 'max_batch_size: 8\ninput [ { name: "x" dims: [3] } ]\ndynamic_batching { max_queue_delay_microseconds: 400000 }\n' \
  > "$R/upto4/config.pbtxt"
start_server "$R"

python3 - "$URL" <<'PY' || fail "batching against the engine's profiles"
import json, struct, sys, threading
import kv2http
URL = sys.argv[1]
def http(method, path, body=None):
    return kv2http.status_body(URL, method, path, body)
# a max_batch_size above the profiles' largest batch is refused at load (as Triton's TensorRT backend does)
st, body = http("POST", "/v2/repository/index")
idx = {e["name"]: e for e in json.loads(body)}
assert idx["over"]["state"] == "UNAVAILABLE", idx["over"]
assert "max_batch_size 8 is more than the engine runs" in idx["over"]["reason"] and "up to 4" in idx["over"]["reason"], idx
# without a config, auto-complete takes the profiles' largest batch when it is below the default 8
st, body = http("GET", "/v2/models/auto4/config")
assert st == 200 and json.loads(body)["max_batch_size"] == 4, body
# the probe failed at batch 8: the preferred size comes from the batches that ran, and no merge goes past them
st, body = http("GET", "/v2/models/upto4/config")
c = json.loads(body)
assert c["max_batch_size"] == 8 and c["dynamic_batching"]["preferred_batch_size"][0] <= 4, c
assert "failed at batch 8" in c["kiln_batching"]["reason"], c["kiln_batching"]
assert set(c["kiln_batching"]["latency_us"]) == {"1", "2", "4"}, c["kiln_batching"]
print("load: max_batch_size 8 over a batch-4 profile refused; auto-complete 4; probe failure respected")

def burst(model, shape_tail, batches, dtype="FP32"):
    res = {}
    def go(i, b):
        n = b
        for d in shape_tail:
            n *= d
        body = json.dumps({"id": str(i), "inputs": [{"name": "input" if model != "upto4" else "x",
                           "shape": [b] + shape_tail, "datatype": dtype, "data": [0.25 + i] * n}]}).encode()
        res[i] = http("POST", "/v2/models/%s/infer" % model, body)
    ts = [threading.Thread(target=go, args=(i, b)) for i, b in enumerate(batches)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return res
# requests of 2, 2 and 1 rows within one queue delay: each fits, 5 rows fit neither profile (1-4, 8)
for rnd in range(2):
    res = burst("gap", [3, 32, 32], [2, 2, 1])
    for i, (st, body) in res.items():
        assert st == 200, ("gap", i, st, body)
        assert json.loads(body)["outputs"][0]["shape"] == [[2, 2, 1][i], 10], body
    res = burst("upto4", [3], [2, 2, 1])
    for i, (st, body) in res.items():
        assert st == 200, ("upto4", i, st, body)
        o = json.loads(body)["outputs"][0]
        assert o["shape"] == [[2, 2, 1][i], 3] and o["data"] == [0.25 + i] * (3 * [2, 2, 1][i]), o
# 4 + 4 rows merge into the batch-8 profile
res = burst("gap", [3, 32, 32], [4, 4])
assert all(st == 200 for st, _ in res.values()), res
print("merged batches stay inside the engine's profiles (2+2+1 rows: never 5)")
PY
pass "max_batch_size checked against the profiles; merged batches fit the engine"

python3 - "$URL" <<'PY' || fail "a bad request in a merged batch"
import json, re, sys, threading
import kv2http
URL = sys.argv[1]
def http(method, path, body=None):
    return kv2http.status_body(URL, method, path, body)
def bert(ids):
    t = lambda name, v: {"name": name, "shape": [1, 4], "datatype": "INT64", "data": v}
    return json.dumps({"inputs": [t("input_ids", ids), t("attention_mask", [1, 1, 1, 1]),
                                  t("token_type_ids", [0, 0, 0, 0])]}).encode()
def metrics():
    st, body = http("GET", "/metrics")
    m = {}
    for line in body.decode().splitlines():
        g = re.match(r'(\w+)\{model="bert",version="1"\} (\d+)$', line)
        if g:
            m[g.group(1)] = int(g.group(2))
    return m
st, body = http("POST", "/v2/models/bert/infer", bert([1, 2, 3, 1]))
assert st == 200, body
ref = {o["name"]: o["data"] for o in json.loads(body)["outputs"]}
# four requests merged into one batch; request 0 has a token id outside the vocabulary
res = {}
def go(i):
    res[i] = http("POST", "/v2/models/bert/infer", bert([1, 2, 3, 999999] if i == 0 else [1, 2, 3, i]))
ts = [threading.Thread(target=go, args=(i,)) for i in range(4)]
for t in ts:
    t.start()
for t in ts:
    t.join()
st, body = res[0]
assert st == 400 and "999999" in json.loads(body)["error"], (st, body)
for i in (1, 2, 3):
    st, body = res[i]
    assert st == 200, (i, st, body)
got = {o["name"]: o["data"] for o in json.loads(res[1][1])["outputs"]}
for k, v in ref.items():
    assert all(abs(a - b) <= 1e-5 * max(1.0, abs(b)) for a, b in zip(got[k], v)), k
print("the bad request alone failed (its own error); its three batch-mates answered 200")
# Triton's counting: inferences, executions and durations cover successful requests only
m = metrics()
assert m["nv_inference_request_success"] == 4 and m["nv_inference_request_failure"] == 1, m
assert m["nv_inference_count"] == 4 and 1 <= m["nv_inference_exec_count"] <= 4, m
st, body = http("POST", "/v2/models/bert/infer", bert([999999, 1, 1, 1]))
assert st == 400, body
m2 = metrics()
assert m2["nv_inference_request_failure"] == 2, m2
for k in ("nv_inference_count", "nv_inference_exec_count", "nv_inference_queue_duration_us",
          "nv_inference_compute_input_duration_us", "nv_inference_compute_infer_duration_us",
          "nv_inference_compute_output_duration_us"):
    assert m2[k] == m[k], (k, m, m2)
print("metrics: %d successes, %d failures, %d inferences in %d executions" % (
    m2["nv_inference_request_success"], m2["nv_inference_request_failure"], m2["nv_inference_count"],
    m2["nv_inference_exec_count"]))
PY
pass "a failing request does not fail its batch-mates; metrics count successes only"
stop_server

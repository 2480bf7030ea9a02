#!/usr/bin/env bash
# kiln serve --device cuda through the public API (kiln_context_set_device on every instance):
# a model whose instance_group kind is KIND_AUTO runs on the GPU, one with KIND_CPU stays on the
# CPU. Without a GPU (or without libkiln_cuda.so) the GPU model is UNAVAILABLE with a clean reason
# while the CPU model keeps serving; with one, both answer and agree. usage: test_device.sh KILN
KILN="$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"
source "$(dirname "$0")/lib.sh"
R="$TMP/repo"
mkdir -p "$R/gpu/1" "$R/cpu/1"
cp "$MODELS/tiny_cnn.onnx" "$R/gpu/1/model.onnx"
cp "$MODELS/tiny_cnn.onnx" "$R/cpu/1/model.onnx"
printf 'max_batch_size: 4\ninput [ { name: "input" data_type: TYPE_FP32 dims: [3, 32, 32] } ]\ndynamic_batching { }\n' > "$R/gpu/config.pbtxt"
printf 'max_batch_size: 4\ninstance_group [ { count: 1 kind: KIND_CPU } ]\n' > "$R/cpu/config.pbtxt"
start_server "$R" --device cuda
python3 - "$URL" <<'PY' || fail "device placement"
import json, struct, sys, urllib.error, urllib.request
URL = sys.argv[1]
def call(path, body=None):
    req = urllib.request.Request(URL + path, data=body, method="POST" if body is not None else "GET")
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()
st, idx = call("/v2/repository/index", b"{}")
state = {m["name"]: m for m in json.loads(idx)}
assert state["cpu"]["state"] == "READY", state
st, cfg = call("/v2/models/cpu/config")
assert json.loads(cfg)["instance_group"] == [{"count": 1, "kind": "KIND_CPU"}], cfg
x = [((i * 37) % 101) / 101.0 - 0.5 for i in range(2 * 3 * 32 * 32)]
req = json.dumps({"inputs": [{"name": "input", "shape": [2, 3, 32, 32], "datatype": "FP32", "data": x}]}).encode()
st, body = call("/v2/models/cpu/infer", req)
assert st == 200, body
ref = json.loads(body)["outputs"][0]["data"]
if state["gpu"]["state"] != "READY":
    # no GPU here: a clean reason, readiness says so, the CPU model is unaffected
    reason = state["gpu"].get("reason", "")
    assert "GPU" in reason or "cuda" in reason, state["gpu"]
    assert call("/v2/health/ready")[0] == 503
    st, body = call("/v2/models/gpu/infer", req)
    assert st in (400, 404) and "error" in json.loads(body), (st, body)
    print("no usable GPU: 'gpu' unavailable (%s); 'cpu' served" % reason)
else:
    st, cfg = call("/v2/models/gpu/config")
    c = json.loads(cfg)
    assert c["instance_group"] == [{"count": 1, "kind": "KIND_GPU"}], c
    assert c["kiln_batching"]["source"] == "measured", c   # the probe ran on the GPU
    st, body = call("/v2/models/gpu/infer", req)
    assert st == 200, body
    out = json.loads(body)["outputs"][0]["data"]
    err = max(abs(a - b) / max(1.0, abs(b)) for a, b in zip(out, ref))
    assert len(out) == len(ref) and err < 1e-4, err
    print("GPU instance answers; max relative difference to the CPU instance %.2e" % err)
PY
kill -0 "$SPID" || fail "server died"
pass "--device cuda: KIND_AUTO on the GPU, KIND_CPU on the CPU, clean refusal without a GPU"
stop_server

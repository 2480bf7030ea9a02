#!/usr/bin/env bash
# kiln's own config parameters: precision (fp32, fp16, bf16, int8) and, for int8, a calibration
# directory of .npy samples beside the model. Each engine answers close to the FP32 one, shows
# its parameters in its config, is cached, and is rebuilt when the calibration data changes.
# usage: test_precision.sh KILN
KILN="$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"
source "$(dirname "$0")/lib.sh"
R="$TMP/repo"
for m in fp32 bf16 int8; do mkdir -p "$R/$m/1"; cp "$MODELS/tiny_cnn.onnx" "$R/$m/1/model.onnx"; done
cfg() { printf 'max_batch_size: 4\ninput [ { name: "input" data_type: TYPE_FP32 dims: [3, 16, 16] } ]\n'
        for kv in "$@"; do printf 'parameters { key: "%s" value: { string_value: "%s" } }\n' "${kv%%=*}" "${kv#*=}"; done; }
cfg > "$R/fp32/config.pbtxt"
cfg precision=bf16 > "$R/bf16/config.pbtxt"
cfg precision=int8 calibration=calib calibration_method=minmax > "$R/int8/config.pbtxt"
mkdir -p "$R/int8/calib"
python3 - "$R/int8/calib" <<'PY'
import random, struct, sys
random.seed(5)
h = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3, 16, 16), }"
h += " " * ((64 - (10 + len(h) + 1) % 64) % 64) + "\n"
for i in range(4):
    raw = struct.pack("<1536f", *[random.uniform(-1, 1) for _ in range(1536)])
    open("%s/s%d.npy" % (sys.argv[1], i), "wb").write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(h)) + h.encode() + raw)
PY
start_server "$R"
check() {
python3 - "$URL" <<'PY'
import json, math, random, sys, urllib.request
URL = sys.argv[1]
def get(p):
    with urllib.request.urlopen(URL + p, timeout=60) as r:
        return json.loads(r.read())
random.seed(9)
x = [random.uniform(-1, 1) for _ in range(3 * 3 * 16 * 16)]
req = json.dumps({"inputs": [{"name": "input", "shape": [3, 3, 16, 16], "datatype": "FP32", "data": x}]}).encode()
out = {}
for m in ("fp32", "bf16", "int8"):
    r = urllib.request.Request(URL + "/v2/models/%s/infer" % m, data=req, method="POST")
    with urllib.request.urlopen(r, timeout=60) as resp:
        out[m] = json.loads(resp.read())["outputs"][0]["data"]
    assert get("/v2/models/%s/config" % m)["parameters"]["precision"] == {"string_value": m}, m
assert get("/v2/models/int8/config")["parameters"]["calibration"] == {"string_value": "calib"}
def cos(a, b):
    return sum(x * y for x, y in zip(a, b)) / math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))
ref = out["fp32"]
rel = max(abs(a - b) for a, b in zip(out["bf16"], ref)) / max(abs(v) for v in ref)
assert rel < 0.05, ("bf16", rel)
assert out["int8"] != ref and cos(out["int8"], ref) > 0.99, ("int8", cos(out["int8"], ref))
print("bf16: max error %.3g of the largest output; int8: cosine %.5f to fp32" % (rel, cos(out["int8"], ref)))
PY
}
check || fail "precision engines"
ls "$R/int8/1/".kiln-cache-*.kiln > "$TMP/caches1" || fail "no int8 engine cache"
[ "$(http_code POST /v2/repository/models/int8/load)" = 200 ] || fail "reload: $(cat "$TMP/body")"
[ "$(grep -c "engine from cache .*/int8/1/" "$TMP/server.log")" = 1 ] || fail "the int8 reload did not use its cache"
# other calibration data: another cache key, a new build
python3 -c 'import sys; p = sys.argv[1]; b = bytearray(open(p, "rb").read()); b[-4:] = bytes(4); open(p, "wb").write(bytes(b))' "$R/int8/calib/s0.npy"
[ "$(http_code POST /v2/repository/models/int8/load)" = 200 ] || fail "reload: $(cat "$TMP/body")"
[ "$(grep -c "engine from cache .*/int8/1/" "$TMP/server.log")" = 1 ] || fail "changed calibration data reused the old engine"
[ "$(ls "$R/int8/1/".kiln-cache-*.kiln | wc -l)" = 2 ] || fail "no second int8 cache entry"
check || fail "precision engines after the rebuild"
pass "precision parameters: bf16 and int8 (calibrated beside the model) engines close to fp32, cached per calibration data"
stop_server

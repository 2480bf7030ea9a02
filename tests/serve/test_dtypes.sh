#!/usr/bin/env bash
# Every KServe datatype kiln carries (BOOL, UINT8, INT8, INT32, INT64, UINT64, FP16, BF16, FP32), in
# JSON and binary, through an Identity model generated with python3-onnx: values come back unchanged
# (UINT64 past 2^63 too, which jansson's int64 integers cannot hold), out-of-range JSON values are
# refused. usage: test_dtypes.sh KILN
KILN="$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"
source "$(dirname "$0")/lib.sh"
mkdir -p "$TMP/repo/ident/1"
/usr/bin/python3 - "$TMP/repo/ident/1/model.onnx" <<'PY'   # Debian's python3-onnx (scripts/bootstrap.sh)
import sys
from onnx import TensorProto as T, helper as h, save
types = [("b", T.BOOL), ("u8", T.UINT8), ("i8", T.INT8), ("i32", T.INT32), ("i64", T.INT64), ("u64", T.UINT64), ("f16", T.FLOAT16),
         ("bf16", T.BFLOAT16), ("f32", T.FLOAT)]
ins = [h.make_tensor_value_info("in_" + n, t, ["batch", 3]) for n, t in types]
outs = [h.make_tensor_value_info("out_" + n, t, ["batch", 3]) for n, t in types]
nodes = [h.make_node("Identity", ["in_" + n], ["out_" + n]) for n, _ in types]
save(h.make_model(h.make_graph(nodes, "ident", ins, outs), opset_imports=[h.make_opsetid("", 17)]), sys.argv[1])
PY
printf 'max_batch_size: 4\n' > "$TMP/repo/ident/config.pbtxt"
start_server "$TMP/repo"
python3 - "$URL" <<'PY' || fail "datatype round trips"
import json, struct, sys, urllib.error, urllib.request
URL = sys.argv[1]
def post(body, headers={}):
    req = urllib.request.Request(URL + "/v2/models/ident/infer", data=body, method="POST", headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()
vals = {"BOOL": [True, False, True, False, True, True], "UINT8": [0, 1, 255, 7, 128, 3], "INT8": [-128, 127, 0, -1, 5, 9],
        "INT32": [-2**31, 2**31 - 1, 0, 5, -5, 42], "INT64": [-2**63, 2**63 - 1, 0, 1, -1, 2**40],
        "UINT64": [0, 1, 2**63, 2**64 - 1, 2**63 - 1, 2**63 + 12345],
        "FP16": [0.5, -1.25, 65504.0, 0.0, 3.0, -0.099975586], "BF16": [0.5, -1.25, 3.0e38, 0.0, 1.0, -2.0],
        "FP32": [0.1, -1e30, 3.5, 0.0, 1e-7, -2.0]}
names = {"BOOL": "b", "UINT8": "u8", "INT8": "i8", "INT32": "i32", "INT64": "i64", "UINT64": "u64", "FP16": "f16",
         "BF16": "bf16", "FP32": "f32"}
pack = {"BOOL": "?", "UINT8": "B", "INT8": "b", "INT32": "i", "INT64": "q", "UINT64": "Q", "FP16": "e", "FP32": "f"}
def raw(dt, v):
    if dt == "BF16":   # round to nearest even, as the server converts JSON numbers
        bits = [struct.unpack("<I", struct.pack("<f", x))[0] for x in v]
        return b"".join(struct.pack("<H", (u + 0x7FFF + ((u >> 16) & 1)) >> 16) for u in bits)
    return struct.pack("<%d%s" % (len(v), pack[dt]), *v)
def unraw(dt, b):
    if dt == "BF16":
        return [struct.unpack("<f", b"\0\0" + b[i:i + 2])[0] for i in range(0, len(b), 2)]
    return list(struct.unpack("<%d%s" % (len(b) // struct.calcsize(pack[dt]), pack[dt]), b))
f32 = lambda x: struct.unpack("<f", struct.pack("<f", x))[0]
# JSON in, JSON out
req = {"inputs": [{"name": "in_" + names[d], "shape": [2, 3], "datatype": d, "data": v} for d, v in vals.items()]}
st, _, body = post(json.dumps(req).encode())
assert st == 200, body
outs = {o["name"]: o for o in json.loads(body)["outputs"]}
for d, v in vals.items():
    o = outs["out_" + names[d]]
    assert o["datatype"] == d and o["shape"] == [2, 3], o
    want = [f32(x) for x in v] if d == "FP32" else unraw(d, raw(d, v)) if d in ("FP16", "BF16") else v
    assert o["data"] == want, (d, o["data"], want)
# binary in, binary out
hdr = {"inputs": [{"name": "in_" + names[d], "shape": [2, 3], "datatype": d,
                   "parameters": {"binary_data_size": len(raw(d, v))}} for d, v in vals.items()],
       "parameters": {"binary_data_output": True}}
hb = json.dumps(hdr).encode()
st, h, body = post(hb + b"".join(raw(d, v) for d, v in vals.items()), {"Inference-Header-Content-Length": str(len(hb))})
assert st == 200, body
hl = int({k.lower(): x for k, x in h.items()}["inference-header-content-length"])
off = hl
for o in json.loads(body[:hl])["outputs"]:
    d = o["datatype"]
    n = o["parameters"]["binary_data_size"]
    assert body[off:off + n] == raw(d, vals[d]), d
    off += n
assert off == len(body)
# binary in, JSON out: UINT64 past 2^63 printed unsigned (the digits as sent)
hdr_j = {"inputs": hdr["inputs"], "outputs": [{"name": "out_u64"}]}
hj = json.dumps(hdr_j).encode()
st, h, body = post(hj + b"".join(raw(d, v) for d, v in vals.items()), {"Inference-Header-Content-Length": str(len(hj))})
assert st == 200, body
assert b"18446744073709551615" in body and json.loads(body)["outputs"][0]["data"] == vals["UINT64"], body
# out-of-range or wrongly typed JSON values
for d, bad in (("INT8", 300), ("UINT8", -1), ("BOOL", 2), ("INT32", 2**31), ("INT64", 0.5), ("FP16", "x"),
               ("INT64", 2**63), ("UINT64", -1), ("UINT64", 2**64), ("UINT64", 0.5), ("UINT64", "\u0000u64:5"),
               ("UINT64", "\\u0000u64:5")):
    r = json.loads(json.dumps(req))
    for i in r["inputs"]:
        if i["datatype"] == d:
            i["data"] = [bad] + i["data"][1:]   # (the rest holds 2^63 and 2^64-1)
    st, _, body = post(json.dumps(r).encode())
    assert st == 400 and "error" in json.loads(body), (d, bad, st, body)
    if d == "UINT64" and bad in (-1, 2**64):
        assert "18446744073709551615]" in json.loads(body)["error"], body
print("9 datatypes round-trip in JSON and binary; out-of-range values refused")
PY
pass "datatypes"
stop_server

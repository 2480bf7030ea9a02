#!/usr/bin/env bash
# KServe v2 / Triton protocol details of kiln serve, over a generated Identity model: an empty binary output still
# carries Inference-Header-Content-Length; request ids are echoed in full; gzip and deflate request bodies
# (Content-Encoding) are inflated within --max-body-mb (a zip bomb gets a 413, not the server's memory), other
# codings get a 415; a 405 names the allowed methods (Allow); model readiness is 200, 400 or 404. usage:
# test_protocol.sh KILN
KILN="$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"
source "$(dirname "$0")/lib.sh"
PY="$(onnx_python)"
mkdir -p "$TMP/repo/idn/1"
"$PY" - "$TMP/repo/idn/1/model.onnx" <<'PY'
import sys
from onnx import TensorProto as T, helper as h, save
x, y = h.make_tensor_value_info("x", T.FLOAT, ["b", "n"]), h.make_tensor_value_info("y", T.FLOAT, ["b", "n"])
save(h.make_model(h.make_graph([h.make_node("Identity", ["x"], ["y"])], "idn", [x], [y]),
                  opset_imports=[h.make_opsetid("", 17)]), sys.argv[1])
PY
start_server "$TMP/repo" --max-body-mb 2
# h.py: the client helpers every step below imports (the HTTP call: tests/serve/kv2http.py, on PYTHONPATH)
cat > "$TMP/h.py" <<'PY'
import json, struct, sys
import kv2http
URL = sys.argv[1]
def http(method, path, body=None, headers=None):
    return kv2http.http(URL, method, path, body, headers)
def infer(obj, headers=None, raw=None):
    body = raw if raw is not None else json.dumps(obj).encode()
    return http("POST", "/v2/models/idn/infer", body, dict({"Content-Type": "application/json"}, **(headers or {})))
def req(vals, **kw):
    return dict({"inputs": [{"name": "x", "shape": [1, len(vals)], "datatype": "FP32", "data": vals}]}, **kw)
PY

export PYTHONPATH="$TMP:$PYTHONPATH"
python3 - "$URL" <<'PY' || fail "empty binary output"
from h import *
# a binary output of zero bytes: the response is still in the binary form, with the header length
st, h, body = infer(req([], outputs=[{"name": "y", "parameters": {"binary_data": True}}]))
assert st == 200, body
assert h.get("content-type") == "application/octet-stream", h
assert h.get("inference-header-content-length") == str(len(body)), (h, body)
o = json.loads(body)["outputs"][0]
assert o["shape"] == [1, 0] and o["parameters"]["binary_data_size"] == 0, o
# JSON outputs only: no header
st, h, body = infer(req([1.5]))
assert st == 200 and "inference-header-content-length" not in h and h["content-type"] == "application/json", h
print("an empty binary output keeps Inference-Header-Content-Length")
PY
pass "empty binary output"

python3 - "$URL" <<'PY' || fail "request ids"
from h import *
# the id comes back in full (the KServe v2 response id is the request's): 300 characters, and 100 KB
for n in (300, 100000):
    rid = "".join("abcdefghij"[i % 10] for i in range(n))
    st, h, body = infer(req([1.0], id=rid))
    assert st == 200 and json.loads(body)["id"] == rid, (n, st, body[:200])
# an id that is not a string (a number past 2^63 included) is refused
for bad in ("5", "18446744073709551615"):
    st, h, body = infer(None, raw=b'{"id": %s, "inputs": [{"name": "x", "shape": [1, 1], "datatype": "FP32", "data": [1]}]}' % bad.encode())
    assert st == 400 and '"id" must be a string' in json.loads(body)["error"], (bad, st, body)
print("request ids echoed in full (300 and 100000 characters)")
PY
pass "request ids"

python3 - "$URL" "$SPID" <<'PY' || fail "Content-Encoding"
import gzip, zlib
from h import *
js = json.dumps(req([1.0, 2.5, -3.0], id="z")).encode()
want = [1.0, 2.5, -3.0]
def ok(body, headers, what):
    st, h, out = infer(None, dict({"Content-Encoding": headers}), raw=body)
    assert st == 200, (what, st, out)
    assert json.loads(out)["outputs"][0]["data"] == want, (what, out)
ok(gzip.compress(js), "gzip", "gzip")
ok(gzip.compress(js), " GZIP ", "gzip, any case")
ok(gzip.compress(js[:10]) + gzip.compress(js[10:]), "gzip", "two gzip members")
ok(zlib.compress(js), "deflate", "deflate (zlib)")
co = zlib.compressobj(wbits=-15)
ok(co.compress(js) + co.flush(), "deflate", "raw deflate")
ok(js, "identity", "identity")
# the binary extension: Inference-Header-Content-Length counts the inflated body
raw = struct.pack("<3f", *want)
hdr = json.dumps({"inputs": [{"name": "x", "shape": [1, 3], "datatype": "FP32", "parameters": {"binary_data_size": 12}}]}).encode()
st, h, out = infer(None, {"Content-Encoding": "gzip", "Inference-Header-Content-Length": str(len(hdr))},
                   raw=gzip.compress(hdr + raw))
assert st == 200 and json.loads(out)["outputs"][0]["data"] == want, (st, out)
print("gzip, deflate (zlib and raw), identity and a gzip binary request accepted")
def err(body, coding, code, text):
    st, h, out = infer(None, {"Content-Encoding": coding}, raw=body)
    e = json.loads(out)["error"]
    assert st == code and text in e, (coding, st, out)
    print("  %d %s: %s" % (st, coding, e))
    return h
gz = gzip.compress(js)
err(gz[:len(gz) // 2], "gzip", 400, "ends early")                                    # truncated
err(gz[:12] + bytes(b ^ 0x5A for b in gz[12:]), "gzip", 400, "corrupt gzip data")   # corrupt
err(js, "gzip", 400, "corrupt gzip data")                                           # not gzip at all
err(zlib.compress(js) + b"junk", "deflate", 400, "data after the end")
h = err(gz, "br", 415, "not supported")
assert h.get("accept-encoding") == "gzip, deflate", h
err(gz, "gzip, br", 415, "not supported")
# a zip bomb: 1 MB of gzip that inflates to 1 GiB; --max-body-mb 2 bounds what the server holds
co = zlib.compressobj(9, zlib.DEFLATED, 31)
chunk = bytes(1 << 20)
bomb = b"".join(co.compress(chunk) for _ in range(1024)) + co.flush()
assert len(bomb) < (2 << 20), len(bomb)
err(bomb, "gzip", 413, "inflates (Content-Encoding: gzip) past the limit (2097152 bytes")
hwm = int([l.split()[1] for l in open("/proc/%s/status" % sys.argv[2]) if l.startswith("VmHWM")][0])
assert hwm < 200 * 1024, "server peak RSS %d kB after the bomb" % hwm
print("zip bomb refused; server peak RSS %d MB" % (hwm // 1024))
st, h, out = infer(req([4.0]))
assert st == 200, out
PY
pass "Content-Encoding gzip / deflate"

python3 - "$URL" <<'PY' || fail "405 Allow"
from h import *
# a 405 names the methods the resource takes (RFC 9110 15.5.6)
for method, path, allow in (("GET", "/v2/models/idn/infer", "POST"), ("PUT", "/v2/models/idn/infer", "POST"),
                            ("POST", "/v2/health/live", "GET, HEAD"), ("DELETE", "/v2/models/idn", "GET, HEAD"),
                            ("POST", "/v2", "GET, HEAD"), ("GET", "/v2/repository/index", "POST"),
                            ("POST", "/metrics", "GET, HEAD")):
    st, h, body = http(method, path)
    assert st == 405 and h.get("allow") == allow, (method, path, st, h)
# model readiness: 200 ready, 400 known but not ready, 404 unknown model or version (docs/SERVE.md)
assert http("GET", "/v2/models/idn/ready")[0] == 200
assert http("GET", "/v2/models/nosuch/ready")[0] == 404
assert http("GET", "/v2/models/idn/versions/9/ready")[0] == 404
assert http("POST", "/v2/repository/models/idn/unload")[0] == 200
assert http("GET", "/v2/models/idn/ready")[0] == 400
assert http("POST", "/v2/repository/models/idn/load")[0] == 200
print("405 responses carry Allow; model ready 200/400/404")
PY
pass "405 Allow; model readiness"
stop_server

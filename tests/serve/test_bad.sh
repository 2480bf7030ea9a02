#!/usr/bin/env bash
# Bad requests never hurt kiln serve: each class gets a 4xx with a JSON {"error": ...} body, and
# the server keeps answering correct requests. usage: test_bad.sh KILN
KILN="$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"
source "$(dirname "$0")/lib.sh"
make_repo "$TMP/repo"
# command-line errors: exit status 2 with a message, nothing started
for args in "--http-port 99999" "--http-port 12x" "--max-body-mb 0" "--device tpu" "--bogus 1" "--threads"; do
  rc=0; "$KILN" serve --model-repository "$TMP/repo" $args > "$TMP/cli.txt" 2>&1 || rc=$?
  [ "$rc" = 2 ] && [ -s "$TMP/cli.txt" ] || fail "kiln serve $args: exit $rc"
done
for args in "--url http://example.com:80 -m tiny_cnn" "--url http://127.0.0.1:1 -m ../x" "--url http://127.0.0.1:1 -m m --requests 0" \
            "--url http://127.0.0.1:1 -m m --concurrency 1,,2"; do
  rc=0; "$KILN" loadgen $args > "$TMP/cli.txt" 2>&1 || rc=$?
  [ "$rc" = 2 ] && [ -s "$TMP/cli.txt" ] || fail "kiln loadgen $args: exit $rc"
done
pass "command-line errors"
mkdir -p "$TMP/repo/broken/1" && echo "not onnx" > "$TMP/repo/broken/1/model.onnx"
mkdir -p "$TMP/repo/corruptkiln/1" && "$KILN" build "$MODELS/tiny_cnn.onnx" -o "$TMP/engine.kiln" > /dev/null &&
  head -c 4096 "$TMP/engine.kiln" > "$TMP/repo/corruptkiln/1/model.kiln"
mkdir -p "$TMP/repo/badcfg/1" && cp "$MODELS/tiny_cnn.onnx" "$TMP/repo/badcfg/1/model.onnx"
printf 'max_batch_size: 8\nbogus_field: 1\n' > "$TMP/repo/badcfg/config.pbtxt"
for m in badsyntax baddims badbatch badprec int8nocal badcal dupin dupout nancfg infcfg dircfg; do
  mkdir -p "$TMP/repo/$m/1" && cp "$MODELS/tiny_cnn.onnx" "$TMP/repo/$m/1/model.onnx"
done
printf 'max_batch_size: 8\ninput [ { name: "input" dims: [3, 32, 32] }\n' > "$TMP/repo/badsyntax/config.pbtxt"
printf 'max_batch_size: 8\noutput [ { name: "logits" dims: [11] } ]\n' > "$TMP/repo/baddims/config.pbtxt"
printf 'max_batch_size: 8\ndynamic_batching { preferred_batch_size: [16] }\n' > "$TMP/repo/badbatch/config.pbtxt"
# the same input (or output) twice, the second with another dtype or dims: refused, not the second silently dropped
printf 'max_batch_size: 8\ninput [ { name: "input" dims: [3, -1, -1] }, { name: "input" dims: [3, 16, 16] } ]\n' \
  > "$TMP/repo/dupin/config.pbtxt"
printf 'output [ { name: "logits" data_type: TYPE_FP32 } ]\noutput [ { name: "logits" data_type: TYPE_INT64 } ]\n' \
  > "$TMP/repo/dupout/config.pbtxt"
printf 'dynamic_batching { max_queue_delay_microseconds: -nan }\n' > "$TMP/repo/nancfg/config.pbtxt"
printf 'dynamic_batching { max_queue_delay_microseconds: +inf }\n' > "$TMP/repo/infcfg/config.pbtxt"
mkdir -p "$TMP/repo/dircfg/config.pbtxt"
param() { printf 'parameters { key: "%s" value: { string_value: "%s" } }\n' "$1" "$2"; }
param precision fp12 > "$TMP/repo/badprec/config.pbtxt"
param precision int8 > "$TMP/repo/int8nocal/config.pbtxt"
{ param precision int8; param calibration ../../etc; } > "$TMP/repo/badcal/config.pbtxt"
start_server "$TMP/repo" --max-body-mb 1

# a port in use (the HTTP or the metrics one) is refused: exit 1 naming the cause, not a second
# listener sharing the port and taking some of its requests
mkdir -p "$TMP/repo1/tiny_cnn/1" && cp "$MODELS/tiny_cnn.onnx" "$TMP/repo1/tiny_cnn/1/model.onnx"
for args in "--http-port $PORT" "--http-port 0 --metrics-port $PORT"; do
  rc=0; timeout 20 "$KILN" serve --model-repository "$TMP/repo1" --threads 1 $args > "$TMP/cli.txt" 2>&1 || rc=$?
  [ "$rc" = 1 ] && grep -qi "already in use" "$TMP/cli.txt" || fail "kiln serve $args on a port in use: exit $rc: $(cat "$TMP/cli.txt")"
done
pass "a port in use is refused"

# expect CODE DESCRIPTION METHOD PATH [curl args...]
expect() {
  local want="$1" what="$2"; shift 2
  local got
  got="$(http_code "$@")"
  [ "$got" = "$want" ] || fail "$what: HTTP $got, expected $want: $(head -c 300 "$TMP/body")"
  local body
  body="$(cat "$TMP/body")"
  # the server writes compact JSON: exactly one "error" member with a non-empty string
  [[ "$body" == '{"error":"'?*'"}' ]] || fail "$what: body is not {\"error\": ...}: $(head -c 300 "$TMP/body")"
  echo "  $want $what: ${body:10:100}"
  printf '%s\n' "$body" >> "$TMP/bodies"
}
ok_infer() {
  local got
  got="$(http_code POST /v2/models/tiny_cnn/infer --data-binary @"$TMP/good.json")"
  [ "$got" = 200 ] || fail "good request after '$1' got $got: $(cat "$TMP/body")"
}
python3 - "$TMP" <<'PY'
import json, sys
t = sys.argv[1]
good = {"inputs": [{"name": "input", "shape": [1, 3, 32, 32], "datatype": "FP32", "data": [0.5] * 3072}]}
json.dump(good, open(t + "/good.json", "w"))
def w(name, obj): open(t + "/" + name, "w").write(obj if isinstance(obj, str) else json.dumps(obj))
inp = lambda **k: {"inputs": [dict({"name": "input", "shape": [1, 3, 32, 32], "datatype": "FP32", "data": [0.5] * 3072}, **k)]}
w("malformed.json", '{"inputs": [ {"name": "input", ')
w("notobj.json", "[1, 2, 3]")
w("dtype.json", inp(datatype="INT32", data=[1] * 3072))
w("bytes.json", inp(datatype="BYTES", data=["a"] * 3072))
w("unkdtype.json", inp(datatype="FP128"))
w("shape.json", inp(shape=[1, 3, 32, 31]))
w("rank.json", inp(shape=[3, 32, 32]))
w("batch.json", inp(shape=[9, 3, 32, 32], data=[0.5] * 9 * 3072))
w("count.json", inp(data=[0.5] * 3071))
w("toomany.json", inp(data=[0.5] * 3073))
w("hugeshape.json", inp(shape=[1, 3, 1 << 30, 1 << 30]))
w("notnum.json", inp(data=["x"] * 3072))
w("missing.json", {"inputs": []})
w("extra.json", {"inputs": good["inputs"] + [{"name": "extra", "shape": [1], "datatype": "FP32", "data": [1]}]})
w("dup.json", {"inputs": good["inputs"] * 2})
w("dupkey.json", '{"inputs": [], "inputs": []}')
w("badout.json", dict(good, outputs=[{"name": "nope"}]))
w("badid.json", dict(good, id=5))
rows = lambda n: [[[0.5] * 32] * 32] * n
w("ragged.json", inp(data=[rows(2) + [[[0.5] * 32] * 31 + [[0.5] * 31]]]))   # 3071 numbers, the last row short
w("ragged2.json", inp(data=[[0.5] * 3071, [0.5]]))                           # 3072 numbers in rows of 3071 and 1
w("mixed.json", inp(data=[rows(2) + [[0.5] * 1024]]))                        # a flat channel beside nested ones
w("negshape.json", inp(shape=[-1, 3, 32, 32]))
w("fracshape.json", inp(shape=[1.5, 3, 32, 32]))
hdr = json.dumps({"inputs": [{"name": "input", "shape": [1, 3, 32, 32], "datatype": "FP32",
                              "parameters": {"binary_data_size": 12288}}]}).encode()
open(t + "/hl.txt", "w").write(str(len(hdr)))
open(t + "/bin_ok.bin", "wb").write(hdr + b"\0" * 12288)
open(t + "/bin_short.bin", "wb").write(hdr + b"\0" * 1000)
open(t + "/bin_long.bin", "wb").write(hdr + b"\0" * 12300)
hdr2 = hdr.replace(b"12288", b"12284")
open(t + "/hl2.txt", "w").write(str(len(hdr2)))
open(t + "/bin_size.bin", "wb").write(hdr2 + b"\0" * 12284)
hdr3 = json.dumps({"inputs": [{"name": "input", "shape": [1, 3, 32, 32], "datatype": "FP32", "data": [0.5] * 3072,
                               "parameters": {"binary_data_size": 12288}}]}).encode()
open(t + "/hl3.txt", "w").write(str(len(hdr3)))
open(t + "/bin_both.bin", "wb").write(hdr3 + b"\0" * 12288)
json.dump({"inputs": [dict(good["inputs"][0], data=[rows(3)])]}, open(t + "/nested.json", "w"))
open(t + "/big.json", "w").write('{"inputs": [' + " " * (2 << 20) + "]}")
PY
H="$(cat "$TMP/hl.txt")"
ok_infer start
[ "$(http_code POST /v2/models/tiny_cnn/infer -H "Inference-Header-Content-Length: $H" --data-binary @"$TMP/bin_ok.bin")" = 200 ] ||
  fail "good binary request: $(cat "$TMP/body")"
for f in malformed notobj dtype bytes unkdtype shape rank batch count toomany hugeshape notnum missing extra dup dupkey badout badid; do
  expect 400 "$f" POST /v2/models/tiny_cnn/infer --data-binary @"$TMP/$f.json"
done
ok_infer "json classes"
# data nested as the shape is fine; ragged or mixed nesting is refused (not flattened), and so is a shape with a
# negative or fractional dim, or an input with both data and binary_data_size
[ "$(http_code POST /v2/models/tiny_cnn/infer --data-binary @"$TMP/nested.json")" = 200 ] || fail "nested data: $(cat "$TMP/body")"
for f in ragged ragged2 mixed; do
  expect 400 "$f data" POST /v2/models/tiny_cnn/infer --data-binary @"$TMP/$f.json"
  grep -q "nested data does not follow the shape" "$TMP/body" || fail "$f: $(cat "$TMP/body")"
done
for f in negshape fracshape; do
  expect 400 "$f" POST /v2/models/tiny_cnn/infer --data-binary @"$TMP/$f.json"
  grep -q "invalid shape: dims must be non-negative integers" "$TMP/body" || fail "$f: $(cat "$TMP/body")"
done
expect 400 "both data and binary_data_size" POST /v2/models/tiny_cnn/infer -H "Inference-Header-Content-Length: $(cat "$TMP/hl3.txt")" --data-binary @"$TMP/bin_both.bin"
grep -q "not both" "$TMP/body" || fail "data and binary_data_size: $(cat "$TMP/body")"
ok_infer "nesting, shape and data/binary classes"
expect 400 "binary header longer than the body" POST /v2/models/tiny_cnn/infer -H "Inference-Header-Content-Length: 999999" --data-binary @"$TMP/bin_ok.bin"
expect 400 "binary header length not a number" POST /v2/models/tiny_cnn/infer -H "Inference-Header-Content-Length: 12abc" --data-binary @"$TMP/bin_ok.bin"
expect 400 "binary header cutting the JSON" POST /v2/models/tiny_cnn/infer -H "Inference-Header-Content-Length: 20" --data-binary @"$TMP/bin_ok.bin"
expect 400 "binary data shorter than claimed" POST /v2/models/tiny_cnn/infer -H "Inference-Header-Content-Length: $H" --data-binary @"$TMP/bin_short.bin"
expect 400 "binary data longer than claimed" POST /v2/models/tiny_cnn/infer -H "Inference-Header-Content-Length: $H" --data-binary @"$TMP/bin_long.bin"
expect 400 "binary_data_size not matching the shape" POST /v2/models/tiny_cnn/infer -H "Inference-Header-Content-Length: $(cat "$TMP/hl2.txt")" --data-binary @"$TMP/bin_size.bin"
expect 400 "binary_data_size without the header" POST /v2/models/tiny_cnn/infer --data-binary @"$TMP/bin_ok.bin"
expect 413 "body over --max-body-mb" POST /v2/models/tiny_cnn/infer --data-binary @"$TMP/big.json"
expect 413 "chunked body over --max-body-mb" POST /v2/models/tiny_cnn/infer -H "Transfer-Encoding: chunked" --data-binary @"$TMP/big.json"
# a body declared past 4x the limit is refused from its headers, before any of it is read (the client sends none,
# or one byte): every Content-Length up to 2^64-1 (from 2^63 on one went unanswered until the 30 s timeout)
python3 - "$PORT" <<'PY' || fail "a body declared far over --max-body-mb: no 413 from the headers alone"
import json, socket, sys
for n, extra in [(104857600, b""), (2**63 - 1, b"x"), (2**63, b"x"), (2**64 - 1, b"x")]:
    s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=10)
    s.sendall(b"POST /v2/models/tiny_cnn/infer HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % n + extra)
    r = b""
    while b"\r\n\r\n" not in r or not r.rstrip().endswith(b"}"):
        d = s.recv(65536)
        if not d:
            break
        r += d
    head, _, body = r.partition(b"\r\n\r\n")
    assert head.split(b" ")[1] == b"413", (n, head)
    e = json.loads(body)
    assert list(e) == ["error"] and "over the limit" in e["error"], body
    print("  413 body declared far over --max-body-mb (Content-Length %d): %s" % (n, e["error"][:60]))
PY
ok_infer "binary and size classes"
expect 404 "unknown model" POST /v2/models/nosuch/infer --data-binary @"$TMP/good.json"
expect 404 "unknown version" POST /v2/models/tiny_cnn/versions/7/infer --data-binary @"$TMP/good.json"
expect 400 "bad version" GET /v2/models/tiny_cnn/versions/1x
expect 400 "model that failed to load" POST /v2/models/broken/infer --data-binary @"$TMP/good.json"
expect 400 "path traversal (..)" GET "/v2/models/%2e%2e/config" --path-as-is
expect 404 "path traversal (encoded /, decoded into segments)" POST "/v2/repository/models/..%2f..%2fetc/load" --path-as-is
expect 400 "path traversal (load ..)" POST "/v2/repository/models/%2e%2e/load" --path-as-is
expect 404 "unknown repository model" POST /v2/repository/models/nosuch/load
expect 400 "broken model load" POST /v2/repository/models/broken/load
expect 400 "truncated model.kiln load" POST /v2/repository/models/corruptkiln/load
[ "$(grep -o "corruptkiln/1/model.kiln" "$TMP/body" | wc -l)" = 1 ] && grep -q "truncated" "$TMP/body" ||
  fail "a truncated engine's reason names its path once: $(cat "$TMP/body")"
expect 400 "unsupported config field" POST /v2/repository/models/badcfg/load
grep -q "bogus_field" "$TMP/body" || fail "config error does not name the field"
expect 400 "config.pbtxt syntax error" POST /v2/repository/models/badsyntax/load
expect 400 "config dims disagreeing with the model" POST /v2/repository/models/baddims/load
expect 400 "preferred batch over max_batch_size" POST /v2/repository/models/badbatch/load
expect 400 "unknown precision" POST /v2/repository/models/badprec/load
expect 400 "int8 without calibration data" POST /v2/repository/models/int8nocal/load
expect 400 "calibration directory outside the model's" POST /v2/repository/models/badcal/load
expect 400 "an input listed twice in config.pbtxt" POST /v2/repository/models/dupin/load
grep -q "input 'input' is listed twice" "$TMP/body" || fail "duplicate input: $(cat "$TMP/body")"
expect 400 "an output listed twice in config.pbtxt" POST /v2/repository/models/dupout/load
grep -q "output 'logits' is listed twice" "$TMP/body" || fail "duplicate output: $(cat "$TMP/body")"
for m in nancfg infcfg; do
  expect 400 "a non-finite number in config.pbtxt ($m)" POST /v2/repository/models/$m/load
  grep -q "config.pbtxt line 1: not a finite number" "$TMP/body" || fail "$m: $(cat "$TMP/body")"
done
expect 400 "config.pbtxt that is a directory" POST /v2/repository/models/dircfg/load
grep -q "dircfg/config.pbtxt is not a regular file" "$TMP/body" || fail "dircfg: $(cat "$TMP/body")"
expect 404 "unknown endpoint" GET /v2/nothing
expect 404 "outside /v2" GET /../../etc/passwd --path-as-is
expect 405 "wrong method" GET /v2/models/tiny_cnn/infer
expect 405 "wrong method on repository" GET /v2/repository/index
ok_infer "model and path classes"
# kiln loadgen shows the server's error message (the body's "error"), not just the status
python3 - "$TMP/b9.npy" <<'PY'
import struct, sys
h = "{'descr': '<f4', 'fortran_order': False, 'shape': (9, 3, 32, 32), }"
h += " " * (63 - (10 + len(h)) % 64) + "\n"
open(sys.argv[1], "wb").write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(h)) + h.encode() + b"\0" * (9 * 3072 * 4))
PY
rc=0; "$KILN" loadgen --url "$URL" -m tiny_cnn --input input="$TMP/b9.npy" --requests 2 > "$TMP/lg.txt" 2>&1 || rc=$?
[ "$rc" = 1 ] && grep -q "first error: HTTP 400: input 'input': batch 9 is outside" "$TMP/lg.txt" ||
  fail "loadgen's first error does not carry the server's message: exit $rc: $(cat "$TMP/lg.txt")"
pass "loadgen reports the server's error message"

# vanished and slow clients: a client that sends half a body and disappears, one that connects and
# says nothing, one that disconnects while its request is queued
python3 - "$PORT" "$TMP/good.json" <<'PY'
import socket, sys, time
port, good = int(sys.argv[1]), open(sys.argv[2], "rb").read()
half = socket.create_connection(("127.0.0.1", port))
half.sendall(b"POST /v2/models/tiny_cnn/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n{\"inputs\": [")
half.close()
idle = socket.create_connection(("127.0.0.1", port))
for _ in range(20):
    q = socket.create_connection(("127.0.0.1", port))
    q.sendall(b"POST /v2/models/tiny_cnn/infer HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(good) + good)
    q.close()
time.sleep(0.5)
idle.close()
PY
ok_infer "vanished clients"
python3 - "$TMP/bodies" <<'PY' || fail "an error body is not valid JSON"
import json, sys
n = 0
for line in open(sys.argv[1]):
    e = json.loads(line)
    assert list(e) == ["error"] and isinstance(e["error"], str) and e["error"], line
    n += 1
print("%d error bodies are JSON objects {\"error\": \"...\"}" % n)
PY
kill -0 "$SPID" || fail "server died"
pass "every bad request class answered with a 4xx JSON error; the server kept serving"
stop_server

#!/usr/bin/env python3
"""A second, independent KServe v2 client for the kiln serve tests: Python's standard library only
(urllib, json, struct, threading). Checks server/model metadata, then sends concurrent JSON and
binary (Triton extension) infer requests of random inputs with assorted batch sizes and compares
every response with an unbatched `kiln run` of the same input (|diff| <= 1e-6 * max(1, |ref|)).

usage: client.py URL MODEL MODEL.onnx KILN WORKDIR NREQ
"""
import ast
import json
import os
import random
import struct
import subprocess
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kv2http  # noqa: E402

URL, MODEL, ONNX, KILN, WORK, NREQ = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5], int(sys.argv[6])


def http(method, path, body=None, headers=None):
    return kv2http.http(URL, method, path, body, headers)


def write_npy(path, shape, values):
    header = "{'descr': '<f4', 'fortran_order': False, 'shape': (%s), }" % "".join("%d, " % d for d in shape)
    header += " " * ((64 - (10 + len(header) + 1) % 64) % 64) + "\n"
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode())
        f.write(struct.pack("<%df" % len(values), *values))


def read_npy(path):
    with open(path, "rb") as f:
        data = f.read()
    assert data[:6] == b"\x93NUMPY"
    major = data[6]
    hl, off = (struct.unpack("<H", data[8:10])[0], 10) if major == 1 else (struct.unpack("<I", data[8:12])[0], 12)
    hdr = ast.literal_eval(data[off:off + hl].decode())
    assert hdr["descr"] == "<f4", hdr
    body = data[off + hl:]
    return list(hdr["shape"]), list(struct.unpack("<%df" % (len(body) // 4), body))


def check(got, ref, what):
    assert len(got) == len(ref), "%s: %d values, expected %d" % (what, len(got), len(ref))
    worst = 0.0
    for g, r in zip(got, ref):
        d = abs(g - r)
        assert d <= 1e-6 * max(1.0, abs(r)), "%s: %r vs kiln run %r" % (what, g, r)
        worst = max(worst, d)
    return worst


def main():
    st, _, body = http("GET", "/v2")
    assert st == 200 and json.loads(body)["name"] == "kiln", body
    st, _, _ = http("GET", "/v2/health/ready")
    assert st == 200, st
    st, _, body = http("GET", "/v2/models/" + MODEL)
    assert st == 200, body
    meta = json.loads(body)
    assert meta["name"] == MODEL and meta["platform"] == "kiln", meta
    (inp,), (out,) = meta["inputs"], meta["outputs"]
    assert inp["datatype"] == "FP32" and inp["shape"][0] == -1, inp
    st, _, body = http("GET", "/v2/models/%s/config" % MODEL)
    max_batch = json.loads(body)["max_batch_size"]

    rng = random.Random(7)
    reqs = []
    for i in range(NREQ):
        b = 1 + i % min(3, max_batch)
        shape = [b] + inp["shape"][1:]
        n = 1
        for d in shape:
            n *= d
        vals = list(struct.unpack("<%df" % n, struct.pack("<%df" % n, *[rng.uniform(-1, 1) for _ in range(n)])))
        path = os.path.join(WORK, "in%d.npy" % i)
        write_npy(path, shape, vals)
        od = os.path.join(WORK, "out%d" % i)
        subprocess.run([KILN, "run", ONNX, "--input", "%s=%s" % (inp["name"], path), "--output-dir", od, "--threads", "1"],
                       check=True, stdout=subprocess.DEVNULL)
        safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in out["name"])
        reqs.append((shape, vals, read_npy(os.path.join(od, safe + ".npy"))))

    worst = [0.0]
    errors = []

    def one(i, binary):
        shape, vals, (rshape, ref) = reqs[i]
        try:
            if binary:
                raw = struct.pack("<%df" % len(vals), *vals)
                hdr = json.dumps({"id": "b%d" % i, "inputs": [{"name": inp["name"], "shape": shape, "datatype": "FP32",
                                  "parameters": {"binary_data_size": len(raw)}}],
                                  "outputs": [{"name": out["name"], "parameters": {"binary_data": True}}]}).encode()
                st, h, body = http("POST", "/v2/models/%s/infer" % MODEL, hdr + raw,
                                   {"Inference-Header-Content-Length": str(len(hdr)),
                                    "Content-Type": "application/octet-stream"})
                assert st == 200, body
                hl = int(h["inference-header-content-length"])
                resp = json.loads(body[:hl])
                o = resp["outputs"][0]
                size = o["parameters"]["binary_data_size"]
                got = list(struct.unpack("<%df" % (size // 4), body[hl:hl + size]))
                assert len(body) == hl + size
            else:
                st, _, body = http("POST", "/v2/models/%s/infer" % MODEL,
                                   json.dumps({"id": "j%d" % i, "inputs": [{"name": inp["name"], "shape": shape,
                                               "datatype": "FP32", "data": vals}]}).encode(),
                                   {"Content-Type": "application/json"})
                assert st == 200, body
                resp = json.loads(body)
                o = resp["outputs"][0]
                got = o["data"]
            assert resp["id"] == ("b%d" if binary else "j%d") % i, resp.get("id")
            assert resp["model_name"] == MODEL and o["name"] == out["name"] and o["datatype"] == "FP32", resp
            assert o["shape"] == rshape, (o["shape"], rshape)
            worst[0] = max(worst[0], check(got, ref, "request %d (%s)" % (i, "binary" if binary else "json")))
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append("request %d (%s): %s" % (i, "binary" if binary else "json", e))

    for binary in (False, True):
        threads = [threading.Thread(target=one, args=(i, binary)) for i in range(NREQ)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    if errors:
        print("\n".join(errors), file=sys.stderr)
        sys.exit(1)
    print("python client: %d JSON + %d binary requests to %s match kiln run (max |diff| %.3g)" % (NREQ, NREQ, MODEL, worst[0]))


main()

#!/usr/bin/python3
"""TopK and Unique on inputs long enough to reach every stage of kiln's merge sort (insertion-
sorted runs, then merges), with many ties, against NumPy's stable sort.

Usage: check_sort_ops.py KILN_BINARY
ONNX ties: TopK returns equal values in ascending index order; Unique (sorted=1) returns the
first-occurrence index of each value and inverse indices / counts."""
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper

kiln = sys.argv[1]
rng = np.random.default_rng(5)
fails = 0


def run(model, feeds, tmp):
    path = os.path.join(tmp, "m.onnx")
    onnx.save(model, path)
    args = [kiln, "run", path, "--output-dir", os.path.join(tmp, "out")]
    for name, arr in feeds.items():
        f = os.path.join(tmp, name + ".npy")
        np.save(f, arr)
        args += ["--input", f"{name}={f}"]
    subprocess.run(args, check=True, capture_output=True)
    return lambda name: np.load(os.path.join(tmp, "out", name + ".npy"))


def check(what, got, want):
    global fails
    if got.shape != want.shape or not np.array_equal(got, want):
        fails += 1
        print(f"FAIL {what}: got {got.ravel()[:8]}..., want {want.ravel()[:8]}...")
    else:
        print(f"pass {what}")


def topk_case(n, k, largest, dtype, tp, tmp):
    x = rng.integers(0, 40, size=(3, n)).astype(dtype)   # heavy ties
    g = helper.make_graph(
        [helper.make_node("TopK", ["x", "k"], ["v", "i"], axis=1, largest=largest, sorted=1)], "g",
        [helper.make_tensor_value_info("x", tp, [3, n])],
        [helper.make_tensor_value_info("v", tp, None), helper.make_tensor_value_info("i", TensorProto.INT64, None)],
        [helper.make_tensor("k", TensorProto.INT64, [1], [k])])
    out = run(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), {"x": x}, tmp)
    key = -x.astype(np.float64) if largest else x.astype(np.float64)
    idx = np.argsort(key, axis=1, kind="stable")[:, :k]
    check(f"TopK n={n} k={k} largest={largest} {np.dtype(dtype).name} indices", out("i"), idx)
    check(f"TopK n={n} k={k} largest={largest} {np.dtype(dtype).name} values", out("v"), np.take_along_axis(x, idx, 1))


def unique_case(n, tmp, rows=False):
    x = rng.integers(-30, 30, size=n).astype(np.float32)
    attrs = {"sorted": 1}
    if rows:   # rows of 3 values from a small set: many equal rows (the multi-key sort)
        x = rng.integers(0, 3, size=(n, 3)).astype(np.float32)
        attrs["axis"] = 0
    g = helper.make_graph(
        [helper.make_node("Unique", ["x"], ["y", "idx", "inv", "cnt"], **attrs)], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)] +
        [helper.make_tensor_value_info(o, TensorProto.INT64, None) for o in ("idx", "inv", "cnt")])
    out = run(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), {"x": x}, tmp)
    y, idx, inv, cnt = np.unique(x, return_index=True, return_inverse=True, return_counts=True,
                                 axis=0 if rows else None)
    n = f"{n} rows" if rows else n
    check(f"Unique n={n} values", out("y"), y)
    check(f"Unique n={n} first indices", out("idx"), idx.astype(np.int64))
    check(f"Unique n={n} inverse", out("inv"), inv.astype(np.int64).ravel())
    check(f"Unique n={n} counts", out("cnt"), cnt.astype(np.int64))


with tempfile.TemporaryDirectory() as tmp:
    for n, k in ((17, 17), (100, 37), (1000, 1000), (4099, 129)):
        topk_case(n, k, 1, np.float32, TensorProto.FLOAT, tmp)
        topk_case(n, k, 0, np.int32, TensorProto.INT32, tmp)
    for n in (15, 16, 33, 1000, 5001):
        unique_case(n, tmp)
        unique_case(n, tmp, rows=True)
print(f"sort ops: {fails} failed")
sys.exit(1 if fails else 0)

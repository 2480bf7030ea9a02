#!/usr/bin/python3
"""A small MLP for the precision planner's tests, with two layers made deliberately sensitive to
INT8: layer L1 writes an activation whose channel 0 is 500x larger than the others (its weight
column 0 is scaled up), and L2 reads it with its row 0 scaled down by as much, so the output
depends on the small channels. A per-tensor INT8 scale for that activation (L1's output, L2's
input) is set by channel 0 and rounds the other channels to a few levels: lowering L1 or L2 to
int8 breaks the output, lowering L0, L3 or the final Gemm L4 does not. Writes DIR/sensitive.onnx
and calibration / validation data DIR/cal/*.npy, DIR/val/*.npy ([8, 64] float32 each)."""
import os
import sys
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

out = sys.argv[1]
rng = np.random.default_rng(3)
H = 128


def w(shape):
    return (rng.standard_normal(shape) / np.sqrt(shape[0])).astype(np.float32)


W = {"W0": w((64, H)), "W1": w((H, H)), "W2": w((H, H)), "W3": w((H, H)), "W4": w((H, 10)), "B4": np.zeros(10, np.float32)}
W["W1"][:, 0] *= 500.0
W["W2"][0, :] /= 500.0
N = helper.make_node
nodes = [
    N("MatMul", ["x", "W0"], ["h0"], name="L0"), N("Relu", ["h0"], ["r0"], name="R0"),
    N("MatMul", ["r0", "W1"], ["h1"], name="L1"), N("Relu", ["h1"], ["r1"], name="R1"),
    N("MatMul", ["r1", "W2"], ["h2"], name="L2"), N("Relu", ["h2"], ["r2"], name="R2"),
    N("MatMul", ["r2", "W3"], ["h3"], name="L3"), N("Relu", ["h3"], ["r3"], name="R3"),
    N("Gemm", ["r3", "W4", "B4"], ["y"], name="L4"),
]
g = helper.make_graph(nodes, "sensitive", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 64])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 10])],
                      [numpy_helper.from_array(v, k) for k, v in W.items()])
m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
m.ir_version = 8
onnx.checker.check_model(m)
onnx.save(m, os.path.join(out, "sensitive.onnx"))
for d, n in (("cal", 4), ("val", 3)):
    os.makedirs(os.path.join(out, d), exist_ok=True)
    for i in range(n):
        np.save(os.path.join(out, d, f"b{i}.npy"), rng.standard_normal((8, 64)).astype(np.float32))

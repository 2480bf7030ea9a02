"""Models whose constant weights reach their layers through the ops exporters put in between
(tests/cli/test_precision_weights.sh):

chains.onnx   x[2,4,8,8] -> Conv c0 (W direct) -> Relu -> Conv c1 (Identity(W): PyTorch's tied weights)
              -> Relu -> Conv c2 (Reshape(W flat, shape)) -> Relu -> Flatten -> MatMul m0 (Transpose(W))
              -> Relu -> Gemm g0 (Cast(W fp16), transB=1, bias) -> Relu -> MatMul m1 (Identity(Transpose(W)))
              -> y[2,16]
convt.onnx    x[1,4,6,6] -> Conv c0 -> Relu -> ConvTranspose ct (W direct, stride 2) -> Relu -> Conv c1
              -> Relu -> Conv c2 -> y
and calibration / validation data (.npy) for each in DIR/cal_NAME, DIR/val_NAME.
Usage: gen_weight_chains.py DIR"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

d = sys.argv[1]
rng = np.random.default_rng(11)
N = helper.make_node


def w(*shape, scale=0.3):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def save(name, nodes, inits, x_shape):
    g = helper.make_graph(nodes, name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          [numpy_helper.from_array(v, k) for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, f"{d}/{name}.onnx")
    for sub, seed in (("cal", 1), ("val", 2)):
        os.makedirs(f"{d}/{sub}_{name}", exist_ok=True)
        r = np.random.default_rng(seed)
        for i in range(4):
            np.save(f"{d}/{sub}_{name}/s{i}.npy", r.standard_normal(x_shape).astype(np.float32))


inits = {"W0": w(8, 4, 3, 3), "W1": w(8, 8, 3, 3, scale=0.15), "W2flat": w(8 * 8 * 9, scale=0.15),
         "W2shape": np.array([8, 8, 3, 3], np.int64), "W3": w(16, 512, scale=0.06),
         "W4h": w(16, 16).astype(np.float16), "b4": w(16), "W5": w(16, 16)}
nodes = [N("Conv", ["x", "W0"], ["c0"], name="c0", pads=[1, 1, 1, 1]), N("Relu", ["c0"], ["r0"], name="r0"),
         N("Identity", ["W1"], ["W1i"], name="tie"),
         N("Conv", ["r0", "W1i"], ["c1"], name="c1", pads=[1, 1, 1, 1]), N("Relu", ["c1"], ["r1"], name="r1"),
         N("Reshape", ["W2flat", "W2shape"], ["W2"], name="reshape_w"),
         N("Conv", ["r1", "W2"], ["c2"], name="c2", pads=[1, 1, 1, 1]), N("Relu", ["c2"], ["r2"], name="r2"),
         N("Flatten", ["r2"], ["f"], name="flat"), N("Transpose", ["W3"], ["W3t"], name="tr3", perm=[1, 0]),
         N("MatMul", ["f", "W3t"], ["m0"], name="m0"), N("Relu", ["m0"], ["r3"], name="r3"),
         N("Cast", ["W4h"], ["W4"], name="cast4", to=TensorProto.FLOAT),
         N("Gemm", ["r3", "W4", "b4"], ["g0"], name="g0", transB=1), N("Relu", ["g0"], ["r4"], name="r4"),
         N("Transpose", ["W5"], ["W5t"], name="tr5", perm=[1, 0]), N("Identity", ["W5t"], ["W5ti"], name="tie5"),
         N("MatMul", ["r4", "W5ti"], ["y"], name="m1")]
save("chains", nodes, inits, [2, 4, 8, 8])

inits = {"W0": w(8, 4, 3, 3), "Wt": w(8, 8, 2, 2, scale=0.2), "W1": w(8, 8, 3, 3, scale=0.15),
         "W2": w(4, 8, 1, 1)}
nodes = [N("Conv", ["x", "W0"], ["c0"], name="c0", pads=[1, 1, 1, 1]), N("Relu", ["c0"], ["r0"], name="r0"),
         N("ConvTranspose", ["r0", "Wt"], ["ct"], name="ct", strides=[2, 2]), N("Relu", ["ct"], ["r1"], name="r1"),
         N("Conv", ["r1", "W1"], ["c1"], name="c1", pads=[1, 1, 1, 1]), N("Relu", ["c1"], ["r2"], name="r2"),
         N("Conv", ["r2", "W2"], ["y"], name="c2")]
save("convt", nodes, inits, [1, 4, 6, 6])

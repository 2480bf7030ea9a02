#!/usr/bin/python3
"""Small ONNX models, each holding one op pattern a fusion pass must recognize.
Writes DIR/<name>.onnx and DIR/expect.txt lines "name|ops that must remain|ops that must be gone|input=shape,...".
"""
import sys
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

out = sys.argv[1]
rng = np.random.default_rng(7)
expect = []


def f32(*shape, scale=0.5):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def save(name, nodes, inputs, outputs, inits, must_have, must_not, shapes, opset=13):
    g = helper.make_graph(nodes, name, inputs, outputs, [numpy_helper.from_array(v, k) for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8

    onnx.save(m, f"{out}/{name}.onnx")
    expect.append(f"{name}|{','.join(must_have)}|{','.join(must_not)}|{shapes}")


def vi(name, shape, t=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, t, shape)


def c(name, value, dtype=np.float32):
    return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(np.array(value, dtype), name))


X4 = vi("x", ["n", 8, 9, 11])
Y = vi("y", None)
conv = lambda o: helper.make_node("Conv", ["x", "w", "b"], [o], pads=[1, 1, 1, 1], kernel_shape=[3, 3])
cw = {"w": f32(16, 8, 3, 3), "b": f32(16)}

# Conv + SiLU (x * sigmoid(x))
save("silu", [conv("c"), helper.make_node("Sigmoid", ["c"], ["s"]), helper.make_node("Mul", ["c", "s"], ["y"])],
     [X4], [Y], cw, ["FusedConv"], ["Sigmoid", "Mul"], "x=2x8x9x11")
# Conv + HardSwish written as x * HardSigmoid(x; 1/6, 0.5)
save("hardswish", [conv("c"), helper.make_node("HardSigmoid", ["c"], ["h"], alpha=1.0 / 6, beta=0.5),
                   helper.make_node("Mul", ["h", "c"], ["y"])],
     [X4], [Y], cw, ["FusedConv"], ["HardSigmoid", "Mul", "HardSwish"], "x=1x8x9x11")
# Conv + Relu6 (Clip with constant inputs, opset 13)
save("relu6", [conv("c"), c("lo", 0.0), c("hi", 6.0), helper.make_node("Clip", ["c", "lo", "hi"], ["y"])],
     [X4], [Y], cw, ["FusedConv"], ["Clip"], "x=1x8x9x11")
# Conv + residual Add + LeakyRelu
save("residual_leaky", [conv("c"), helper.make_node("Add", ["x2", "c"], ["a"]),
                        helper.make_node("LeakyRelu", ["a"], ["y"], alpha=0.1)],
     [X4, vi("x2", ["n", 16, 9, 11])], [Y], cw, ["FusedConv"], ["Add", "LeakyRelu"], "x=2x8x9x11,x2=2x16x9x11")
# MatMul + bias + tanh-GELU (0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3))))
X3 = vi("x", ["b", "s", 32])
save("gelu_tanh",
     [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Add", ["m", "bias"], ["h"]),
      c("three", 3.0), helper.make_node("Pow", ["h", "three"], ["p"]), c("k", 0.044715),
      helper.make_node("Mul", ["p", "k"], ["pk"]), helper.make_node("Add", ["h", "pk"], ["inner"]),
      c("r", np.sqrt(2 / np.pi)), helper.make_node("Mul", ["inner", "r"], ["ir"]), helper.make_node("Tanh", ["ir"], ["t"]),
      c("one", 1.0), helper.make_node("Add", ["t", "one"], ["t1"]), c("half", 0.5),
      helper.make_node("Mul", ["h", "half"], ["hh"]), helper.make_node("Mul", ["hh", "t1"], ["y"])],
     [X3], [Y], {"w": f32(32, 48), "bias": f32(48)}, ["FusedMatMul"], ["Tanh", "Pow", "Gelu", "Add"], "x=2x5x32")
# erf-GELU with Mul(1/sqrt2) and the 0.5 applied last, standalone -> Gelu
save("gelu_erf_mul",
     [c("r", 1 / np.sqrt(2)), helper.make_node("Mul", ["x", "r"], ["xr"]), helper.make_node("Erf", ["xr"], ["e"]),
      c("one", 1.0), helper.make_node("Add", ["one", "e"], ["e1"]), helper.make_node("Mul", ["x", "e1"], ["xe"]),
      c("half", 0.5), helper.make_node("Mul", ["xe", "half"], ["y"])],
     [X3], [Y], {}, ["Gelu"], ["Erf", "Mul"], "x=3x4x32")
# attention with Mul scale and a Where mask
Q, K, V = vi("q", ["b", 2, "s", 8]), vi("k", ["b", 2, "s", 8]), vi("v", ["b", 2, "s", 8])
M = vi("mask", ["b", 1, 1, "s"], TensorProto.BOOL)
save("attention_where",
     [helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]), helper.make_node("MatMul", ["q", "kt"], ["qk"]),
      c("sc", 1 / np.sqrt(8)), helper.make_node("Mul", ["qk", "sc"], ["s"]), c("neg", -1e9),
      helper.make_node("Where", ["mask", "s", "neg"], ["sm"]), helper.make_node("Softmax", ["sm"], ["p"], axis=-1),
      helper.make_node("MatMul", ["p", "v"], ["y"])],
     [Q, K, V, M], [Y], {}, ["Attention"], ["Softmax", "Where", "MatMul"], "q=2x2x6x8,k=2x2x6x8,v=2x2x6x8,mask=2x1x1x6")
# transpose pair cancels, reshape pair merges, Identity / Dropout vanish
save("cancel",
     [helper.make_node("Identity", ["x"], ["i"]), helper.make_node("Transpose", ["i"], ["t1"], perm=[0, 2, 1]),
      helper.make_node("Transpose", ["t1"], ["t2"], perm=[0, 2, 1]), helper.make_node("Dropout", ["t2"], ["d"]),
      c("s1", [6, -1], np.int64), helper.make_node("Reshape", ["d", "s1"], ["r1"]),
      c("s2", [-1, 4], np.int64), helper.make_node("Reshape", ["r1", "s2"], ["r2"]),
      helper.make_node("Relu", ["r2"], ["y"])],
     [vi("x", [3, 4, 8])], [Y], {}, ["Reshape", "Relu"], ["Transpose", "Identity", "Dropout"], "x=3x4x8")
# Gemm + BatchNormalization folds; ConvTranspose + BatchNormalization folds
bn = lambda i, o, n: helper.make_node("BatchNormalization", [i, f"{n}g", f"{n}b", f"{n}m", f"{n}v"], [o], epsilon=1e-3)
bnp = lambda n, c_: {f"{n}g": f32(c_) + 1, f"{n}b": f32(c_), f"{n}m": f32(c_), f"{n}v": np.abs(f32(c_)) + 0.5}
save("gemm_bn", [helper.make_node("Gemm", ["x", "w", "c"], ["g"], transB=1, beta=0.5), bn("g", "y", "n")],
     [vi("x", ["m", 12])], [Y], {"w": f32(10, 12), "c": f32(10), **bnp("n", 10)}, ["Gemm"], ["BatchNormalization"],
     "x=5x12")
save("convtranspose_bn",
     [helper.make_node("ConvTranspose", ["x", "w"], ["ct"], strides=[2, 2], group=2), bn("ct", "y", "n")],
     [vi("x", [1, 4, 5, 6])], [Y], {"w": f32(4, 3, 3, 3), **bnp("n", 6)}, ["ConvTranspose"], ["BatchNormalization"],
     "x=1x4x5x6")
# PaddleOCR block: Conv -> learnable affine (Mul, Add scalars) -> hardswish as x*Clip(x+3,0,6)/6
save("paddle_affine_hardswish",
     [conv("c"), c("s", [1.5]), helper.make_node("Mul", ["s", "c"], ["cs"]), c("t", [0.25]),
      helper.make_node("Add", ["cs", "t"], ["a"]), c("three", 3.0), helper.make_node("Add", ["a", "three"], ["a3"]),
      c("lo", 0.0), c("hi", 6.0), helper.make_node("Clip", ["a3", "lo", "hi"], ["cl"]),
      helper.make_node("Mul", ["a", "cl"], ["m"]), c("six", 6.0), helper.make_node("Div", ["m", "six"], ["y"])],
     [X4], [Y], cw, ["FusedConv"], ["Mul", "Add", "Clip", "Div", "HardSwish"], "x=1x8x9x11")
# per-channel scale after a bias-free conv, Clip as attributes (opset 9)
save("scale_channel_opset9",
     [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], kernel_shape=[3, 3]),
      helper.make_node("Mul", ["c", "k"], ["ck"]), helper.make_node("Clip", ["ck"], ["y"], min=0.0, max=6.0)],
     [X4], [Y], {"w": f32(16, 8, 3, 3), "k": f32(16, 1, 1) + 1}, ["FusedConv"], ["Mul", "Clip"], "x=2x8x9x11", opset=9)
with open(f"{out}/expect.txt", "w") as f:
    f.write("\n".join(expect) + "\n")

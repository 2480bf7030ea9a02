#!/usr/bin/python3
"""Small QDQ models (explicit quantization, as ONNX Runtime's quantize_static and QAT exports write
them) for the fuse-qdq pass. Writes DIR/<name>.onnx and DIR/expect.txt lines
"name|ops that must remain|ops that must be gone|input=shape,...|max DequantizeLinear layers|y step"
("Op:N": exactly N layers of Op; y step: the output's quantization step, fused and reference
outputs may differ by at most one step).
"""
import sys
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

out = sys.argv[1]
rng = np.random.default_rng(11)
expect = []
N = helper.make_node


def save(name, nodes, inits, must_have, must_not, shapes, max_dq, ystep, in_shape=("n", 8, 9, 11)):
    g = helper.make_graph(nodes, name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(in_shape))],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          [numpy_helper.from_array(v, k) for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    onnx.save(m, f"{out}/{name}.onnx")
    expect.append(f"{name}|{','.join(must_have)}|{','.join(must_not)}|{shapes}|{max_dq}|{ystep!r}")


def qweight(shape, axis):
    """Symmetric per-channel int8 weight along `axis`: (int8 data, float32 scales)."""
    w = (rng.standard_normal(shape) * 0.3).astype(np.float32)
    red = tuple(d for d in range(len(shape)) if d != axis)
    s = (np.abs(w).max(axis=red) / 127).astype(np.float32)
    bs = s.reshape([-1 if d == axis else 1 for d in range(len(shape))])
    return np.clip(np.rint(w / bs), -127, 127).astype(np.int8), s


def qdq(x, y, s, z, inits, q=True, dq=True):
    """x -> Q(s, z) -> DQ -> y (scalar params named after y)."""
    inits[f"{y}_s"] = np.array(s, np.float32)
    inits[f"{y}_z"] = z
    return [N("QuantizeLinear", [x, f"{y}_s", f"{y}_z"], [f"{y}_q"]),
            N("DequantizeLinear", [f"{y}_q", f"{y}_s", f"{y}_z"], [y])]


def conv_w(name, cout, cin, inits, bias="float", xs=None):
    w, s = qweight((cout, cin, 3, 3), 0)
    inits[f"{name}_wq"], inits[f"{name}_ws"] = w, s
    nodes = [N("DequantizeLinear", [f"{name}_wq", f"{name}_ws"], [f"{name}_w"], axis=0)]
    ins = [f"{name}_w"]
    b = (rng.standard_normal(cout) * 0.2).astype(np.float32)
    if bias == "float":
        inits[f"{name}_b"] = b
        ins.append(f"{name}_b")
    elif bias == "int32":   # ONNX Runtime's form: DQ(int32, x_scale * w_scale, axis 0)
        bs = (np.float32(xs) * s).astype(np.float32)
        inits[f"{name}_bq"], inits[f"{name}_bs"] = np.rint(b / bs).astype(np.int32), bs
        nodes.append(N("DequantizeLinear", [f"{name}_bq", f"{name}_bs"], [f"{name}_b"], axis=0))
        ins.append(f"{name}_b")
    return nodes, ins


U8, S8 = (lambda v: np.array(v, np.uint8)), (lambda v: np.array(v, np.int8))

# Conv + Relu, uint8 activations (input zero point 128, output zero point 0: Relu implied by saturation)
i = {}
w, wi = conv_w("c", 16, 8, i)
save("qdq_conv_relu",
     qdq("x", "xd", 0.02, U8(128), i) + w + [N("Conv", ["xd"] + wi, ["c"], pads=[1, 1, 1, 1]), N("Relu", ["c"], ["r"])]
     + qdq("r", "y", 0.03, U8(0), i),
     i, ["QLinearConv:1", "QuantizeLinear:1"], ["Conv", "Relu"], "x=2x8x9x11", 1, 0.03)

# Conv with ONNX Runtime's int32 bias, int8 activations, strided, no activation
i = {}
w, wi = conv_w("c", 12, 8, i, bias="int32", xs=0.02)
save("qdq_conv_s8_int32bias",
     qdq("x", "xd", 0.02, S8(0), i) + w + [N("Conv", ["xd"] + wi, ["c"], pads=[1, 1, 1, 1], strides=[2, 2])]
     + qdq("c", "y", 0.05, S8(3), i),
     i, ["QLinearConv"], ["Conv"], "x=1x8x9x11", 1, 0.05)

# Relu6 as Clip(0, 6) before a uint8 Q whose range ends at 6 (y_scale 6/255): implied
i = {}
w, wi = conv_w("c", 16, 8, i)
i["lo"], i["hi"] = np.array(0, np.float32), np.array(6, np.float32)
save("qdq_conv_relu6",
     qdq("x", "xd", 0.02, U8(128), i) + w + [N("Conv", ["xd"] + wi, ["c"], pads=[1, 1, 1, 1]),
                                            N("Clip", ["c", "lo", "hi"], ["r"])]
     + qdq("r", "y", 6 / 255, U8(0), i),
     i, ["QLinearConv"], ["Conv", "Clip"], "x=2x8x9x11", 1, 6 / 255)

# MatMul with per-column int8 weight scales on a 3-D input, int8 activations
i = {}
bq, bs = qweight((16, 24), 1)
i["bq"], i["bs"] = bq, bs
save("qdq_matmul",
     qdq("x", "xd", 0.02, S8(0), i) + [N("DequantizeLinear", ["bq", "bs"], ["b"], axis=1),
                                        N("MatMul", ["xd", "b"], ["m"])] + qdq("m", "y", 0.04, S8(0), i),
     i, ["QLinearMatMul"], ["MatMul"], "x=2x5x16", 1, 0.04, in_shape=("n", 5, 16))

# MatMul + bias Add (+ an activation) before a Q, as `--precision int8` leaves a transformer's
# projections: one QLinearMatMul with kiln's int32 bias (input 8) and the activation as kiln_act
i = {}
i["bq"], i["bs"] = qweight((16, 24), 1)
i["mb"] = (rng.standard_normal(24) * 0.2).astype(np.float32)
save("qdq_matmul_bias",
     qdq("x", "xd", 0.02, S8(0), i) + [N("DequantizeLinear", ["bq", "bs"], ["b"], axis=1),
                                        N("MatMul", ["xd", "b"], ["m"]), N("Add", ["m", "mb"], ["ma"]),
                                        N("LeakyRelu", ["ma"], ["l"], alpha=0.1)] + qdq("l", "y", 0.04, S8(3), i),
     i, ["QLinearMatMul:1"], ["MatMul", "Add", "LeakyRelu"], "x=2x5x16", 1, 0.04, in_shape=("n", 5, 16))

# the same MatMul + bias (bias first) consumed in float: QLinearMatMul with kiln_out_float, no DQ
# left; the only difference to the reference is the bias rounded to int32 (as qdq_gemm_float)
i = {}
i["bq"], i["bs"] = qweight((16, 24), 1)
i["mb"] = (rng.standard_normal(24) * 0.2).astype(np.float32)
save("qdq_matmul_bias_float",
     qdq("x", "xd", 0.02, U8(128), i) + [N("DequantizeLinear", ["bq", "bs"], ["b"], axis=1),
                                          N("MatMul", ["xd", "b"], ["m"]), N("Add", ["mb", "m"], ["y"])],
     i, ["QLinearMatMul:1"], ["MatMul", "Add", "DequantizeLinear"], "x=2x5x16", 0, 0.001, in_shape=("n", 5, 16))

# Gemm (transB, alpha, beta, float bias) + Relu before a uint8 Q -> com.microsoft QGemm (int32 bias)
i = {}
gq, gs = qweight((24, 16), 0)
i["gq"], i["gs"], i["gc"] = gq, gs, (rng.standard_normal(24) * 0.2).astype(np.float32)
save("qdq_gemm",
     qdq("x", "xd", 0.02, U8(128), i) + [N("DequantizeLinear", ["gq", "gs"], ["gw"], axis=0),
                                          N("Gemm", ["xd", "gw", "gc"], ["m"], transB=1, alpha=0.5, beta=2.0),
                                          N("Relu", ["m"], ["r"])] + qdq("r", "y", 0.01, U8(0), i),
     i, ["QGemm:1"], ["Gemm", "Relu"], "x=3x16", 1, 0.01, in_shape=("n", 16))

# the same Gemm consumed in float (no Q after it): QGemm without y_scale, float32 output; the
# only difference to the reference is the bias rounded to int32 (half a unit of a_scale * b_scale)
i = {}
i["gq"], i["gs"], i["gc"] = gq, gs, (rng.standard_normal(24) * 0.2).astype(np.float32)
save("qdq_gemm_float",
     qdq("x", "xd", 0.02, U8(128), i) + [N("DequantizeLinear", ["gq", "gs"], ["gw"], axis=0),
                                          N("Gemm", ["xd", "gw", "gc"], ["y"], transB=1, alpha=0.5, beta=2.0)],
     i, ["QGemm:1"], ["Gemm", "DequantizeLinear"], "x=3x16", 0, 0.001, in_shape=("n", 16))

# Gemm with transA (A [K, M]: the fast kernel reads A's columns) and a weight [K, N], into a uint8 Q and
# consumed in float: QGemm with transA (its packed weights, the only copy an engine keeps, must be read)
i = {}
gq, gs = qweight((16, 24), 1)
i["gq"], i["gs"], i["gc"] = gq, gs, (rng.standard_normal(24) * 0.2).astype(np.float32)
save("qdq_gemm_transa",
     qdq("x", "xd", 0.02, U8(128), i) + [N("DequantizeLinear", ["gq", "gs"], ["gw"], axis=1),
                                          N("Gemm", ["xd", "gw", "gc"], ["m"], transA=1, alpha=0.5),
                                          N("Relu", ["m"], ["r"])] + qdq("r", "y", 0.01, U8(0), i),
     i, ["QGemm:1"], ["Gemm", "Relu"], "x=16x5", 1, 0.01, in_shape=(16, "n"))
save("qdq_gemm_transa_float",
     qdq("x", "xd", 0.02, S8(3), i) + [N("DequantizeLinear", ["gq", "gs"], ["gw"], axis=1),
                                        N("Gemm", ["xd", "gw", "gc"], ["y"], transA=1, beta=2.0)],
     i, ["QGemm:1"], ["Gemm", "DequantizeLinear"], "x=16x5", 0, 0.001, in_shape=(16, "n"))

# two quantized convs with a MaxPool and a Reshape pair between them: activations stay uint8
# throughout (DQ -> MaxPool -> Q on one scale runs MaxPool on uint8; DQ -> Q on one scale is dropped)
i = {}
w1, wi1 = conv_w("c1", 8, 8, i)
w2, wi2 = conv_w("c2", 8, 8, i)
i["shp"], i["shp2"] = np.array([0, 8, -1], np.int64), np.array([0, 8, 4, 5], np.int64)
save("qdq_chain",
     qdq("x", "xd", 0.02, U8(128), i) + w1 + w2
     + [N("Conv", ["xd"] + wi1, ["c1"], pads=[1, 1, 1, 1]), N("Relu", ["c1"], ["r1"])] + qdq("r1", "a", 0.03, U8(0), i)
     + [N("MaxPool", ["a"], ["p"], kernel_shape=[2, 2], strides=[2, 2])] + qdq("p", "pd", 0.03, U8(0), i)
     + [N("Reshape", ["pd", "shp"], ["rs"])] + qdq("rs", "rd", 0.03, U8(0), i)
     + [N("Reshape", ["rd", "shp2"], ["rs2"])] + qdq("rs2", "rd2", 0.03, U8(0), i)
     + [N("Conv", ["rd2"] + wi2, ["c2"], pads=[1, 1, 1, 1])] + qdq("c2", "y", 0.05, U8(128), i),
     i, ["QLinearConv:2", "MaxPool:1", "Reshape:2", "QuantizeLinear:1"], ["Conv", "Relu"], "x=2x8x9x11", 1, 0.05)

# residual blocks: DQ, DQ -> Add [-> Relu] -> Q becomes com.microsoft QLinearAdd (exactly the float
# operations it replaces), so activations stay 8-bit from block to block: a uint8 block output
# (Relu implied by the Q), then an Add without activation into int8 with a zero point
i = {}
w1, wi1 = conv_w("c1", 8, 8, i)
w2, wi2 = conv_w("c2", 8, 8, i)
w3, wi3 = conv_w("c3", 8, 8, i)
save("qdq_residual",
     qdq("x", "xd", 0.02, U8(128), i) + w1 + w2 + w3
     + [N("Conv", ["xd"] + wi1, ["c1"], pads=[1, 1, 1, 1]), N("Relu", ["c1"], ["r1"])] + qdq("r1", "a", 0.03, U8(0), i)
     + [N("Conv", ["a"] + wi2, ["c2"], pads=[1, 1, 1, 1])] + qdq("c2", "c2d", 0.04, S8(0), i)
     + [N("Add", ["c2d", "xd"], ["s1"]), N("Relu", ["s1"], ["r2"])] + qdq("r2", "b", 0.05, U8(0), i)
     + [N("Conv", ["b"] + wi3, ["c3"], pads=[1, 1, 1, 1])] + qdq("c3", "c3d", 0.05, S8(0), i)
     + [N("Add", ["b", "c3d"], ["s2"])] + qdq("s2", "y", 0.1, S8(-7), i),
     i, ["QLinearConv:3", "QLinearAdd:2", "QuantizeLinear:1"], ["Conv", "Add", "Relu"], "x=2x8x9x11", 1, 0.1)

# activations the Q does not imply become kiln_act (applied in float before requantization):
# Sigmoid, LeakyRelu, and a Relu before an int8 Q with zero point 0 (negative codes exist)
i = {}
w1, wi1 = conv_w("c1", 8, 8, i)
w2, wi2 = conv_w("c2", 8, 8, i)
w3, wi3 = conv_w("c3", 8, 8, i)
save("qdq_kiln_act",
     qdq("x", "xd", 0.02, U8(128), i) + w1 + w2 + w3
     + [N("Conv", ["xd"] + wi1, ["c1"], pads=[1, 1, 1, 1]), N("Sigmoid", ["c1"], ["s1"])] + qdq("s1", "a", 0.004, U8(0), i)
     + [N("Conv", ["a"] + wi2, ["c2"], pads=[1, 1, 1, 1]), N("Relu", ["c2"], ["r2"])] + qdq("r2", "b", 0.02, S8(0), i)
     + [N("Conv", ["b"] + wi3, ["c3"], pads=[1, 1, 1, 1]), N("LeakyRelu", ["c3"], ["l3"], alpha=0.1)]
     + qdq("l3", "y", 0.03, S8(-5), i),
     i, ["QLinearConv:3", "QuantizeLinear:1"], ["Conv", "Sigmoid", "Relu", "LeakyRelu"], "x=2x8x9x11", 1, 0.03)

# not fusable, must stay correct as fake quantization: Softmax between the layer and Q, and a
# layer whose output is consumed in float (no Q after it)
i = {}
w1, wi1 = conv_w("c1", 8, 8, i)
w2, wi2 = conv_w("c2", 8, 8, i)
save("qdq_unfusable",
     qdq("x", "xd", 0.02, U8(128), i) + w1 + w2
     + [N("Conv", ["xd"] + wi1, ["c1"], pads=[1, 1, 1, 1]), N("Softmax", ["c1"], ["s1"], axis=1)]
     + qdq("s1", "a", 0.004, U8(0), i)
     + [N("Conv", ["a"] + wi2, ["c2"], pads=[1, 1, 1, 1]), N("Tanh", ["c2"], ["y"])],
     i, ["QuantizeLinear:2", "Softmax:1"], ["QLinearConv"], "x=2x8x9x11", 2, 0.05)

with open(f"{out}/expect.txt", "w") as f:
    f.write("\n".join(expect) + "\n")

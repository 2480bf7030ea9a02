#!/usr/bin/python3
"""Explicitly quantized (Q/DQ) models for tests/cli/test_qdq_precision.sh: what kiln realizes and reports for a
model's own QuantizeLinear / DequantizeLinear (docs/PRECISION.md, "Explicit quantization"). Writes DIR/<name>.onnx
(input x, output y) and DIR/<name>_x.npy:
  q_fp8, q_fp8e5   Q -> DQ to float8e4m3fn / float8e5m2 (opset 19)
  q16              Q -> DQ to int16 (opset 21)
  qat3             three QAT convs Q(x) -> DQ -> Conv(DQ(w int8 per channel)) -> Relu; the last one has no Q after it
  conv_pc          one conv: uint8 Q/DQ input, per-channel weight, bias, Relu, uint8 Q/DQ output
  conv_floatout    a conv without bias, Q/DQ input and weight, output consumed in float (no Q)
  mm_floatout      the same for a MatMul
  conv_actpc       a conv whose input is quantized per channel (axis 1)
  conv_axis1       a conv whose weight scales are per input channel (axis 1)
  gemm_tb_ax1      a transB Gemm whose weight scales are per K (axis 1)
  mixed            a float conv (no Q/DQ) -> Relu -> a QAT conv (Q/DQ input and weight) -> a float conv: calibration
                   applies to the float convs only
"""
import sys
import numpy as np
import onnx
from onnx import TensorProto as T, helper as h, numpy_helper as nh

D = sys.argv[1]
r = np.random.default_rng(11)


def C(name, a):
    return nh.from_array(np.asarray(a), name)


def save(name, nodes, inits, xshape, opset=13, scale=1.0):
    g = h.make_graph(nodes, name, [h.make_tensor_value_info("x", T.FLOAT, xshape)],
                     [h.make_tensor_value_info("y", T.FLOAT, None)], inits)
    m = h.make_model(g, opset_imports=[h.make_opsetid("", opset)])
    m.ir_version = 9 if opset >= 19 else 8
    onnx.save(m, f"{D}/{name}.onnx")
    np.save(f"{D}/{name}_x.npy", (r.standard_normal(xshape) * scale).astype(np.float32))


def qw(w, axis):
    """symmetric int8 quantization of w along axis: (int8 values, float32 scales)"""
    red = tuple(i for i in range(w.ndim) if i != axis)
    s = (np.abs(w).max(axis=red) / 127).astype(np.float32)
    sh = [1] * w.ndim
    sh[axis] = -1
    return np.clip(np.rint(w / s.reshape(sh)), -127, 127).astype(np.int8), s


def zero(name, dt):
    t = onnx.TensorProto()
    t.name, t.data_type = name, dt
    t.raw_data = b"\x00" * (2 if dt in (T.INT16, T.UINT16) else 1)
    return t


# FP8 and int16 Q -> DQ
for name, dt in (("q_fp8", 17), ("q_fp8e5", 19)):   # FLOAT8E4M3FN, FLOAT8E5M2 (onnx 1.12 has no names for them)
    save(name, [h.make_node("QuantizeLinear", ["x", "s", "z"], ["a"], name="q"),
                h.make_node("DequantizeLinear", ["a", "s", "z"], ["y"], name="dq")],
         [C("s", np.float32(0.5)), zero("z", dt)], [4, 16], opset=19, scale=3)
save("q16", [h.make_node("QuantizeLinear", ["x", "s", "z"], ["a"], name="q"),
             h.make_node("DequantizeLinear", ["a", "s", "z"], ["y"], name="dq")],
     [C("s", np.float32(0.001)), zero("z", T.INT16)], [4, 16], opset=21)


def qat_conv(i, cur, nodes, inits, cin=8, cout=8, q=True):
    """Q(cur) -> DQ -> Conv(DQ(w per channel)) -> Relu (q=False: a float conv); returns the Relu's output"""
    w = (r.standard_normal((cout, cin, 3, 3)) * 0.2).astype(np.float32)
    if q:
        wq, ws = qw(w, 0)
        inits += [C(f"w{i}", wq), C(f"ws{i}", ws)]
        nodes += [h.make_node("QuantizeLinear", [cur, "s", "z"], [f"q{i}"], name=f"Q{i}"),
                  h.make_node("DequantizeLinear", [f"q{i}", "s", "z"], [f"d{i}"], name=f"DQ{i}"),
                  h.make_node("DequantizeLinear", [f"w{i}", f"ws{i}"], [f"wd{i}"], axis=0, name=f"DQW{i}")]
        xin, win = f"d{i}", f"wd{i}"
    else:
        inits.append(C(f"w{i}", w))
        xin, win = cur, f"w{i}"
    nodes += [h.make_node("Conv", [xin, win], [f"c{i}"], pads=[1, 1, 1, 1], name=f"conv{i}"),
              h.make_node("Relu", [f"c{i}"], [f"r{i}"], name=f"relu{i}")]
    return f"r{i}"


nodes, inits, cur = [], [C("s", np.float32(0.05)), C("z", np.array(0, np.int8))], "x"
for i in range(3):
    cur = qat_conv(i, cur, nodes, inits)
nodes[-1].output[0] = "y"
save("qat3", nodes, inits, [1, 8, 8, 8])

nodes, inits, cur = [], [C("s", np.float32(0.05)), C("z", np.array(0, np.int8))], "x"
for i, q in enumerate((False, True, False)):
    cur = qat_conv(i, cur, nodes, inits, q=q)
nodes[-1].output[0] = "y"
save("mixed", nodes, inits, [1, 8, 8, 8])

# one quantized conv, uint8 activations
w = (r.standard_normal((8, 8, 3, 3)) * 0.3).astype(np.float32)
wq, ws = qw(w, 0)
inits = [C("xs", np.float32(0.03)), C("xz", np.array(128, np.uint8)), C("wq", wq), C("ws", ws),
         C("b", (r.standard_normal(8) * 0.1).astype(np.float32)), C("ys", np.float32(0.05)),
         C("yz", np.array(0, np.uint8))]
save("conv_pc", [h.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"], name="qx"),
                 h.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"], name="dqx"),
                 h.make_node("DequantizeLinear", ["wq", "ws"], ["wd"], axis=0, name="dqw"),
                 h.make_node("Conv", ["xd", "wd", "b"], ["c"], pads=[1, 1, 1, 1], name="conv"),
                 h.make_node("Relu", ["c"], ["cr"], name="relu"),
                 h.make_node("QuantizeLinear", ["cr", "ys", "yz"], ["yq"], name="qy"),
                 h.make_node("DequantizeLinear", ["yq", "ys", "yz"], ["y"], name="dqy")], inits, [1, 8, 8, 8])


def float_out(name, op, wshape, waxis, xshape, xs=0.03, xaxis=None, xn=1, extra=None, **attrs):
    """Q/DQ input and weight, the layer's output consumed in float (a graph output)"""
    w = (r.standard_normal(wshape) * 0.3).astype(np.float32)
    wq, ws = qw(w, waxis)
    sc = np.float32(xs) if xaxis is None else (np.arange(xn) + 1).astype(np.float32) * 0.01
    zp = np.array(0, np.int8) if xaxis is None else np.zeros(xn, np.int8)
    qa = {} if xaxis is None else {"axis": xaxis}
    inits = [C("xs", sc), C("xz", zp), C("wq", wq), C("ws", ws)] + (extra or [])
    save(name, [h.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"], name="qx", **qa),
                h.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"], name="dqx", **qa),
                h.make_node("DequantizeLinear", ["wq", "ws"], ["wd"], axis=waxis, name="dqw"),
                h.make_node(op, ["xd", "wd"] + (["c"] if extra else []), ["y"], name=name.split("_")[0], **attrs)],
         inits, xshape)


float_out("conv_floatout", "Conv", (8, 8, 3, 3), 0, [1, 8, 8, 8], pads=[1, 1, 1, 1])
float_out("mm_floatout", "MatMul", (16, 12), 1, [4, 16])
float_out("conv_actpc", "Conv", (8, 4, 3, 3), 0, [1, 4, 8, 8], xaxis=1, xn=4, pads=[1, 1, 1, 1])
float_out("conv_axis1", "Conv", (8, 8, 3, 3), 1, [1, 8, 8, 8], pads=[1, 1, 1, 1])
float_out("gemm_tb_ax1", "Gemm", (16, 16), 1, [16, 16], extra=[C("c", (r.standard_normal(16) * 0.1).astype(np.float32))],
          transB=1)

#!/usr/bin/python3
"""Integer layers (ONNX QLinearConv / QLinearMatMul / MatMulInteger, com.microsoft QGemm) in the shapes the fast
INT8 kernels leave to the reference kernel, or that need a case of their own: QGemm with transA, or a bias C of
[M, N], [1] or [M, 1] (the fast kernel takes one of N); a per-row a_scale or a_zero_point; a 3-D convolution; and
the same refusals on a computed input (a graph input, not a constant at build time). Writes DIR/<name>.onnx, its
inputs DIR/<name>.in/<input>.npy and DIR/list.txt ("name input,input,..."): tests/cli/test_int8_fallback.sh runs
each engine against the unoptimized model.
"""
import os
import sys
import numpy as np
import onnx
from onnx import TensorProto as T, helper as h, numpy_helper as nh

out = sys.argv[1]
rng = np.random.default_rng(5)
lines = []
U8, S8 = np.uint8, np.int8


def C(name, a):
    return nh.from_array(np.asarray(a), name)


def save(name, node, inits, inputs, ydt, ms=False):
    """inputs: name -> array (graph inputs, saved as .npy)"""
    vis = [h.make_tensor_value_info(k, {U8: T.UINT8, S8: T.INT8, np.int32: T.INT32}[v.dtype.type], list(v.shape))
           for k, v in inputs.items()]
    g = h.make_graph([node], name, vis, [h.make_tensor_value_info("y", ydt, None)], inits)
    ops = [h.make_opsetid("", 13)] + ([h.make_opsetid("com.microsoft", 1)] if ms else [])
    m = h.make_model(g, opset_imports=ops)
    m.ir_version = 8
    onnx.save(m, f"{out}/{name}.onnx")
    os.makedirs(f"{out}/{name}.in", exist_ok=True)
    for k, v in inputs.items():
        np.save(f"{out}/{name}.in/{k}.npy", v)
    lines.append(f"{name} {','.join(inputs)}")


def q8(shape, dt):
    return rng.integers(0, 256, shape).astype(U8) if dt == U8 else rng.integers(-128, 128, shape).astype(S8)


M, K, N = 5, 20, 24
x = q8((M, K), U8)
qp = [C("as", np.float32(0.02)), C("az", U8(128)), C("bs", (rng.random(N) * 0.02 + 0.005).astype(np.float32)),
      C("ys", np.float32(0.4)), C("yz", U8(100))]

# QGemm: B [N, K] (transB) of uint8 with a zero point; A [K, M] with transA
for name, c, ta, c_in in [("qgemm_transa", None, 1, False), ("qgemm_c_mn", (M, N), 0, False),
                          ("qgemm_c_1", (1,), 0, False), ("qgemm_c_m1", (M, 1), 0, False),
                          ("qgemm_c_mn_input", (M, N), 0, True)]:
    inits = qp + [C("b", q8((N, K), U8)), C("bz", U8(131))]
    ins = ["x", "as", "az", "b", "bs", "bz", "", "ys", "yz"]
    inputs = {"x": x.T.copy() if ta else x}
    if c is not None:
        cv = rng.integers(-20000, 20000, c).astype(np.int32)
        ins[6] = "c"
        if c_in:   # C computed: a graph input
            inputs["c"] = cv
        else:
            inits.append(C("c", cv))
    save(name, h.make_node("QGemm", ins, ["y"], domain="com.microsoft", transA=ta, transB=1, alpha=0.75), inits,
         inputs, T.UINT8, ms=True)

# per-row a_scale (QLinearMatMul), per-row a_zero_point (MatMulInteger; constant, then a graph input)
b = q8((K, N), S8)
inits = [C("as", (rng.random(M) * 0.02 + 0.005).astype(np.float32)), C("az", U8(128)), C("b", b),
         C("bs", np.float32(0.01)), C("bz", S8(0)), C("ys", np.float32(0.4)), C("yz", U8(100))]
save("qlinearmatmul_row_scale", h.make_node("QLinearMatMul", ["x", "as", "az", "b", "bs", "bz", "ys", "yz"], ["y"]),
     inits, {"x": x}, T.UINT8)
azr = rng.integers(100, 156, M).astype(U8)
save("matmulinteger_row_zp", h.make_node("MatMulInteger", ["x", "b", "az"], ["y"]), [C("b", b), C("az", azr)],
     {"x": x}, T.INT32)
save("matmulinteger_row_zp_input", h.make_node("MatMulInteger", ["x", "b", "az"], ["y"]), [C("b", b)],
     {"x": x, "az": azr}, T.INT32)

# a 3-D convolution (the fast kernel takes 1-D and 2-D ones)
w = q8((8, 4, 3, 3, 3), S8)
inits = [C("xs", np.float32(0.02)), C("xz", U8(128)), C("w", w), C("ws", np.float32(0.01)), C("wz", S8(0)),
         C("ys", np.float32(0.3)), C("yz", U8(100))]
save("qlinearconv_3d", h.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz"], ["y"], pads=[1] * 6),
     inits, {"x": q8((1, 4, 6, 5, 6), U8)}, T.UINT8)

with open(f"{out}/list.txt", "w") as f:
    f.write("\n".join(lines) + "\n")

#!/usr/bin/python3
"""Writes a fully connected classifier (Gemm + Relu layers, Softmax) as ONNX: the kind of model
whose batch-1 run streams every weight from memory once per request (a GEMV per layer), so that
a batch of n requests reads the weights once instead of n times. Used by the batching benchmarks
(tests/serve/bench_batching.sh, bench_batching_gpu.sh).

usage: gen_mlp.py OUT.onnx [WIDTHS]   WIDTHS default 1024,4096,4096,1024,16 (24M weights, 96 MB)
Deterministic (seeded). Needs python3-onnx and numpy (scripts/bootstrap.sh installs both)."""
import sys

import numpy as np
from onnx import TensorProto, helper, numpy_helper, save


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    widths = [int(w) for w in (sys.argv[2] if len(sys.argv) == 3 else "1024,4096,4096,1024,16").split(",")]
    if len(widths) < 2 or min(widths) < 1:
        sys.exit("gen_mlp.py: WIDTHS needs at least two positive numbers")
    rng = np.random.default_rng(7)
    inits, nodes, x = [], [], "x"
    for i in range(len(widths) - 1):
        w = (rng.standard_normal((widths[i], widths[i + 1])) / np.sqrt(widths[i])).astype(np.float32)
        b = (rng.standard_normal(widths[i + 1]) * 0.01).astype(np.float32)
        inits += [numpy_helper.from_array(w, "w%d" % i), numpy_helper.from_array(b, "b%d" % i)]
        last = i == len(widths) - 2
        y = "logits" if last else "h%d" % i
        nodes.append(helper.make_node("Gemm", [x, "w%d" % i, "b%d" % i], [y if last else y + "_pre"], name="fc%d" % i))
        if not last:
            nodes.append(helper.make_node("Relu", [y + "_pre"], [y], name="relu%d" % i))
        x = y
    nodes.append(helper.make_node("Softmax", ["logits"], ["prob"], axis=1, name="softmax"))
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", widths[0]])],
                              [helper.make_tensor_value_info("prob", TensorProto.FLOAT, ["batch", widths[-1]])], inits)
    save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], producer_name="kiln-gen_mlp"), sys.argv[1])


if __name__ == "__main__":
    main()

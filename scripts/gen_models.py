#!/usr/bin/python3
"""Generate kiln's synthetic test models (deterministic, seeded random weights).

Usage:
    gen_models.py --out models [--only NAME[,NAME...]] [--force] [--no-check] [--list]

Models (NAME -> file):
    resnet50   resnet50.onnx    ResNet-50 v1 (torchvision layout), BN kept as separate nodes
    bert_base  bert_base.onnx   BERT-base encoder, op pattern of HuggingFace's torch.onnx export
    tiny_cnn   tiny_cnn.onnx    same generator as resnet50, 2 narrow stages, 10 classes
    tiny_bert  tiny_bert.onnx   same generator as bert_base, 2 layers, hidden 64, 4 heads, vocab 100

Existing files are skipped unless --force.  Every model is opset 13, IR version 8.
Weights are stored as raw_data initializers; the same seed gives byte-identical files.
"""
import argparse
import os
import sys
import time

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 13
IR_VERSION = 8
PRODUCER = "kiln-gen_models"


class GraphBuilder:
    """Minimal helper: unique names, initializers, Constant nodes."""

    def __init__(self, seed):
        self.nodes = []
        self.inits = []
        self.rng = np.random.default_rng(seed)
        self._counter = {}

    def uname(self, base):
        n = self._counter.get(base, 0)
        self._counter[base] = n + 1
        return f"{base}_{n}"

    def init(self, name, arr):
        self.inits.append(numpy_helper.from_array(np.ascontiguousarray(arr), name))
        return name

    def const(self, value, dtype, base="Constant"):
        """A Constant node (the way torch.onnx emits scalars/shape constants)."""
        arr = np.array(value, dtype=dtype)
        name = self.uname(base)
        out = name + "_output_0"
        self.nodes.append(helper.make_node("Constant", [], [out], name=name,
                                           value=numpy_helper.from_array(arr, out)))
        return out

    def op(self, op_type, inputs, n_out=1, base=None, **attrs):
        name = self.uname(base or op_type)
        outs = [f"{name}_output_{i}" for i in range(n_out)]
        self.nodes.append(helper.make_node(op_type, list(inputs), outs, name=name, **attrs))
        return outs[0] if n_out == 1 else outs

    def normal(self, shape, std, dtype=np.float32):
        return (self.rng.standard_normal(size=shape, dtype=np.float32) * np.float32(std)).astype(dtype, copy=False)

    def uniform(self, shape, lo, hi):
        return self.rng.uniform(lo, hi, size=shape).astype(np.float32)


def finish_model(b, name, inputs, outputs, doc):
    graph = helper.make_graph(b.nodes, name, inputs, outputs, initializer=b.inits)
    model = helper.make_model(graph, producer_name=PRODUCER, producer_version="1",
                              opset_imports=[helper.make_opsetid("", OPSET)], doc_string=doc)
    model.ir_version = IR_VERSION
    return model


# ----------------------------------------------------------------------------------------------
# ResNet (torchvision Bottleneck layout: stride on the 3x3 conv, "v1.5")
# ----------------------------------------------------------------------------------------------
def build_resnet(name="resnet50", layers=(3, 4, 6, 3), widths=(64, 128, 256, 512), stem=64,
                 expansion=4, num_classes=1000, seed=50):
    b = GraphBuilder(seed)

    def conv(x, cin, cout, k, stride, pad, prefix):
        # He (kaiming normal, fan_in) init, no bias (torchvision convs have bias=False)
        w = b.normal((cout, cin, k, k), np.sqrt(2.0 / (cin * k * k)))
        wn = b.init(prefix + ".weight", w)
        return b.op("Conv", [x, wn], base=prefix.replace(".", "_") + "_Conv",
                    kernel_shape=[k, k], strides=[stride, stride], pads=[pad] * 4,
                    dilations=[1, 1], group=1)

    def bn(x, c, prefix, gamma_range=(0.8, 1.2)):
        # Realistic inference statistics: var in [0.5,1.5], small mean/beta.
        g = b.uniform((c,), *gamma_range)
        beta = b.normal((c,), 0.05)
        mean = b.normal((c,), 0.1)
        var = b.uniform((c,), 0.5, 1.5)
        ins = [x] + [b.init(f"{prefix}.{p}", a) for p, a in
                     (("weight", g), ("bias", beta), ("running_mean", mean), ("running_var", var))]
        return b.op("BatchNormalization", ins, base=prefix.replace(".", "_") + "_BN",
                    epsilon=1e-5, momentum=0.9)

    x = "input"
    h = conv(x, 3, stem, 7, 2, 3, "conv1")
    h = bn(h, stem, "bn1")
    h = b.op("Relu", [h])
    h = b.op("MaxPool", [h], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    cin = stem
    for si, (nblocks, width) in enumerate(zip(layers, widths)):
        for bi in range(nblocks):
            stride = 2 if (si > 0 and bi == 0) else 1
            p = f"layer{si + 1}.{bi}"
            cout = width * expansion
            idn = h
            t = conv(h, cin, width, 1, 1, 0, p + ".conv1")
            t = bn(t, width, p + ".bn1")
            t = b.op("Relu", [t])
            t = conv(t, width, width, 3, stride, 1, p + ".conv2")
            t = bn(t, width, p + ".bn2")
            t = b.op("Relu", [t])
            t = conv(t, width, cout, 1, 1, 0, p + ".conv3")
            # small gamma on the last BN of each residual branch keeps 50 layers stable
            t = bn(t, cout, p + ".bn3", gamma_range=(0.1, 0.2))
            if bi == 0 and (stride != 1 or cin != cout):
                idn = conv(h, cin, cout, 1, stride, 0, p + ".downsample.0")
                idn = bn(idn, cout, p + ".downsample.1")
            t = b.op("Add", [t, idn])
            h = b.op("Relu", [t])
            cin = cout
    h = b.op("GlobalAveragePool", [h])
    h = b.op("Flatten", [h], axis=1)
    fw = b.init("fc.weight", b.normal((num_classes, cin), 1.0 / np.sqrt(cin)))
    fb = b.init("fc.bias", b.normal((num_classes,), 0.01))
    b.nodes.append(helper.make_node("Gemm", [h, fw, fb], ["logits"], name="fc_Gemm",
                                    alpha=1.0, beta=1.0, transB=1))
    inputs = [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", 3, "height", "width"])]
    outputs = [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", num_classes])]
    doc = f"synthetic ResNet layers={list(layers)} widths={list(widths)} seed={seed}"
    return finish_model(b, name, inputs, outputs, doc)


# ----------------------------------------------------------------------------------------------
# BERT encoder, op-for-op like HuggingFace BertModel exported by torch.onnx (opset 13, eval)
# ----------------------------------------------------------------------------------------------
def build_bert(name="bert_base", layers=12, hidden=768, heads=12, intermediate=3072,
               vocab=30522, max_pos=512, type_vocab=2, seed=768, mask_value=None):
    assert hidden % heads == 0
    head = hidden // heads
    if mask_value is None:
        mask_value = float(np.finfo(np.float32).min)  # transformers >= 4.2x: torch.finfo(dtype).min
    b = GraphBuilder(seed)
    std = 0.02

    def linear_w(prefix, din, dout):
        # torch Linear on a 3-D input exports as MatMul(x, W^T) + Add(bias); W^T is folded.
        w = b.init(prefix + ".weight_T", b.normal((din, dout), std))
        bias = b.init(prefix + ".bias", b.normal((dout,), std))
        return w, bias

    def linear(x, prefix, din, dout):
        w, bias = linear_w(prefix, din, dout)
        t = b.op("MatMul", [x, w])
        return b.op("Add", [bias, t])

    def layer_norm(x, prefix, eps=1e-12):
        g = b.init(prefix + ".weight", np.ones((hidden,), np.float32))
        be = b.init(prefix + ".bias", np.zeros((hidden,), np.float32))
        mu = b.op("ReduceMean", [x], axes=[-1], keepdims=1)
        d = b.op("Sub", [x, mu])
        sq = b.op("Pow", [d, b.const(2.0, np.float32)])
        var = b.op("ReduceMean", [sq], axes=[-1], keepdims=1)
        ve = b.op("Add", [var, b.const(eps, np.float32)])
        sd = b.op("Sqrt", [ve])
        n = b.op("Div", [d, sd])
        m = b.op("Mul", [n, g])
        return b.op("Add", [m, be])

    def dim_of(x, i):
        """Shape(x) -> Gather(i) -> Unsqueeze(0): a 1-element int64 tensor."""
        s = b.op("Shape", [x])
        g = b.op("Gather", [s, b.const(i, np.int64)], axis=0)
        return b.op("Unsqueeze", [g, b.const([0], np.int64)])

    def split_heads(x):
        # x.view(x.size()[:-1] + (heads, head)).permute(0, 2, 1, 3)
        shape = b.op("Concat", [dim_of(x, 0), dim_of(x, 1), b.const([heads], np.int64),
                                b.const([head], np.int64)], axis=0)
        return b.op("Reshape", [x, shape])

    # --- embeddings ---
    word = b.init("embeddings.word_embeddings.weight", b.normal((vocab, hidden), std))
    pos = b.init("embeddings.position_embeddings.weight", b.normal((max_pos, hidden), std))
    ttype = b.init("embeddings.token_type_embeddings.weight", b.normal((type_vocab, hidden), std))
    pos_ids = b.init("embeddings.position_ids", np.arange(max_pos, dtype=np.int64)[None, :])

    seq_len = dim_of("input_ids", 1)  # input_shape[1]
    pos_slice = b.op("Slice", [pos_ids, b.const([0], np.int64), seq_len, b.const([1], np.int64),
                               b.const([1], np.int64)])
    we = b.op("Gather", [word, "input_ids"], axis=0)
    te = b.op("Gather", [ttype, "token_type_ids"], axis=0)
    e = b.op("Add", [we, te])
    pe = b.op("Gather", [pos, pos_slice], axis=0)
    e = b.op("Add", [e, pe])
    h = layer_norm(e, "embeddings.LayerNorm")

    # --- extended attention mask: (1 - mask[:, None, None, :].float()) * finfo.min ---
    m = b.op("Unsqueeze", ["attention_mask", b.const([1], np.int64)])
    m = b.op("Unsqueeze", [m, b.const([2], np.int64)])
    m = b.op("Cast", [m], to=TensorProto.FLOAT)
    m = b.op("Sub", [b.const(1.0, np.float32), m])
    ext_mask = b.op("Mul", [m, b.const(mask_value, np.float32)])

    scale = float(np.sqrt(head))
    for li in range(layers):
        p = f"encoder.layer.{li}"
        q = linear(h, p + ".attention.self.query", hidden, hidden)
        k = linear(h, p + ".attention.self.key", hidden, hidden)
        v = linear(h, p + ".attention.self.value", hidden, hidden)
        kt = b.op("Transpose", [split_heads(k)], perm=[0, 2, 3, 1])  # permute + transpose(-1,-2) fused
        vt = b.op("Transpose", [split_heads(v)], perm=[0, 2, 1, 3])
        qt = b.op("Transpose", [split_heads(q)], perm=[0, 2, 1, 3])
        s = b.op("MatMul", [qt, kt])
        s = b.op("Div", [s, b.const(scale, np.float32)])
        s = b.op("Add", [s, ext_mask])
        pr = b.op("Softmax", [s], axis=-1)
        c = b.op("MatMul", [pr, vt])
        c = b.op("Transpose", [c], perm=[0, 2, 1, 3])
        cshape = b.op("Concat", [dim_of(c, 0), dim_of(c, 1), b.const([hidden], np.int64)], axis=0)
        c = b.op("Reshape", [c, cshape])
        ao = linear(c, p + ".attention.output.dense", hidden, hidden)
        ao = b.op("Add", [ao, h])
        h1 = layer_norm(ao, p + ".attention.output.LayerNorm")
        it = linear(h1, p + ".intermediate.dense", hidden, intermediate)
        # exact GELU as torch.onnx exports aten::gelu: x * (erf(x / sqrt(2)) + 1) * 0.5
        gd = b.op("Div", [it, b.const(1.4142135381698608, np.float32)])
        ge = b.op("Erf", [gd])
        ga = b.op("Add", [ge, b.const(1.0, np.float32)])
        gm = b.op("Mul", [it, ga])
        gl = b.op("Mul", [gm, b.const(0.5, np.float32)])
        o = linear(gl, p + ".output.dense", intermediate, hidden)
        o = b.op("Add", [o, h1])
        h = layer_norm(o, p + ".output.LayerNorm")

    # last_hidden_state: rename the final LayerNorm output
    b.nodes[-1].output[0] = "last_hidden_state"
    h = "last_hidden_state"
    # --- pooler: tanh(dense(hidden[:, 0])) ---
    first = b.op("Gather", [h, b.const(0, np.int64)], axis=1)
    pw = b.init("pooler.dense.weight", b.normal((hidden, hidden), std))
    pb = b.init("pooler.dense.bias", b.normal((hidden,), std))
    g = b.op("Gemm", [first, pw, pb], alpha=1.0, beta=1.0, transB=1)
    b.nodes.append(helper.make_node("Tanh", [g], ["pooler_output"], name="pooler_Tanh"))

    ints = [helper.make_tensor_value_info(n, TensorProto.INT64, ["batch", "sequence"])
            for n in ("input_ids", "attention_mask", "token_type_ids")]
    outs = [helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, ["batch", "sequence", hidden]),
            helper.make_tensor_value_info("pooler_output", TensorProto.FLOAT, ["batch", hidden])]
    doc = (f"synthetic BERT layers={layers} hidden={hidden} heads={heads} intermediate={intermediate} "
           f"vocab={vocab} max_pos={max_pos} seed={seed}")
    return finish_model(b, name, ints, outs, doc)


MODELS = {
    "resnet50": lambda: build_resnet("resnet50"),
    "bert_base": lambda: build_bert("bert_base"),
    "tiny_cnn": lambda: build_resnet("tiny_cnn", layers=(1, 1), widths=(8, 16), stem=8, num_classes=10, seed=7),
    "tiny_bert": lambda: build_bert("tiny_bert", layers=2, hidden=64, heads=4, intermediate=256, vocab=100,
                                    max_pos=128, seed=64),
}


def op_histogram(model):
    h = {}
    for n in model.graph.node:
        h[n.op_type] = h.get(n.op_type, 0) + 1
    return dict(sorted(h.items(), key=lambda kv: (-kv[1], kv[0])))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="models", help="output directory (default: models)")
    ap.add_argument("--only", action="append", default=[],
                    help="model name(s) to generate, repeatable or comma separated: " + ", ".join(MODELS))
    ap.add_argument("--force", action="store_true", help="overwrite existing files")
    ap.add_argument("--no-check", action="store_true", help="skip onnx.checker")
    ap.add_argument("--list", action="store_true", help="list model names and exit")
    ap.add_argument("--stats", action="store_true", help="print node count and op histogram")
    a = ap.parse_args(argv)
    if a.list:
        print("\n".join(MODELS))
        return 0
    names = [n for s in a.only for n in s.split(",") if n] or list(MODELS)
    bad = [n for n in names if n not in MODELS]
    if bad:
        ap.error(f"unknown model(s) {bad}; known: {list(MODELS)}")
    os.makedirs(a.out, exist_ok=True)
    for n in names:
        path = os.path.join(a.out, n + ".onnx")
        if os.path.exists(path) and not a.force:
            print(f"gen_models: {path} exists, skipping (use --force)")
            continue
        t0 = time.time()
        model = MODELS[n]()
        tmp = path + ".tmp"
        data = model.SerializeToString()
        with open(tmp, "wb") as f:
            f.write(data)
        if not a.no_check:
            if len(data) > 100 * 1024 * 1024:
                onnx.checker.check_model(tmp)  # path-based: no 2 GiB proto limit, no copy
            else:
                onnx.checker.check_model(model, full_check=True)
        os.replace(tmp, path)
        msg = (f"gen_models: wrote {path} ({len(data) / 1e6:.1f} MB, {len(model.graph.node)} nodes, "
               f"{len(model.graph.initializer)} initializers) in {time.time() - t0:.1f}s")
        print(msg, flush=True)
        if a.stats:
            print("  ops:", op_histogram(model))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""A small ONNX-graph interpreter in PyTorch, for bench/gpu_vs_torch.py's models PyTorch has no
definition of (PP-OCRv4 det). `OnnxModule(path)` is an nn.Module that walks the graph's nodes in
order with torch.nn.functional ops; weights (Constant nodes or initializers) become buffers, so
`.to(device / dtype)` converts them (floating ones only). Everything that depends on a constant's
value (Clip bounds, Resize scales, attributes) is read once in __init__: forward has no Python
that looks at tensor values, so it runs eagerly, under CUDA graph capture and under torch.compile.

Ops: Constant, Add, Sub, Mul, Div, Conv, ConvTranspose, Clip, Relu, HardSigmoid, Sigmoid,
GlobalAveragePool, Resize (mode nearest, coordinate_transformation_mode asymmetric, nearest_mode
floor, constant scales or sizes), BatchNormalization (inference), Concat. Any other op, or an
attribute value outside that, raises NotImplementedError naming the node.
"""
import onnx
from onnx import helper, numpy_helper
import torch
import torch.nn as nn
import torch.nn.functional as F

OPS = ("Constant", "Add", "Sub", "Mul", "Div", "Conv", "ConvTranspose", "Clip", "Relu", "HardSigmoid",
       "Sigmoid", "GlobalAveragePool", "Resize", "BatchNormalization", "Concat")


def _attrs(node):
    out = {}
    for a in node.attribute:
        v = helper.get_attribute_value(a)
        out[a.name] = v.decode() if isinstance(v, bytes) else v
    return out


class OnnxModule(nn.Module):
    def __init__(self, path, outputs=None):
        """outputs: the value names forward returns (default the graph's outputs)."""
        super().__init__()
        m = onnx.load(path, load_external_data=True)
        g = m.graph
        self.consts = {i.name: numpy_helper.to_array(i) for i in g.initializer}
        for n in g.node:
            if n.op_type == "Constant":
                a = [x for x in n.attribute if x.name == "value"]
                if not a:
                    raise NotImplementedError(f"Constant {n.name or n.output[0]}: only the 'value' attribute")
                self.consts[n.output[0]] = numpy_helper.to_array(a[0].t)
        self.inputs = [i.name for i in g.input if i.name not in self.consts]
        self.outputs = list(outputs) if outputs else [o.name for o in g.output]
        self.bufname = {}  # constant value name -> buffer attribute name
        self.steps = []  # (fn, input names (None = absent), output name)
        for n in g.node:
            if n.op_type == "Constant":
                continue
            if n.op_type not in OPS:
                raise NotImplementedError(f"onnx_torch: op {n.op_type} (node {n.name or n.output[0]}) is not "
                                          f"implemented (supported: {', '.join(OPS)})")
            if len(n.output) != 1:
                raise NotImplementedError(f"{n.op_type} {n.name}: only one output is supported")
            self.steps.append(self._lower(n))
        # only the steps the outputs need, in order
        need = set(self.outputs)
        for k in range(len(self.steps) - 1, -1, -1):
            if self.steps[k][2] in need:
                need.update(i for i in self.steps[k][1] if i is not None)
        self.steps = [st for st in self.steps if st[2] in need]
        # free each value after its last use (eager memory at large batches)
        last = {}
        for k, (_, ins, out) in enumerate(self.steps):
            for i in ins:
                if i is not None:
                    last[i] = k
        keep = set(self.outputs)
        self.drop = [[] for _ in self.steps]
        for name, k in last.items():
            if name not in keep and name not in self.bufname:
                self.drop[k].append(name)
        del self.consts

    # ------------------------------------------------------------------ lowering
    def _buf(self, name):
        """A constant used as a tensor operand: a buffer (floating ones follow .to(dtype))."""
        if name not in self.bufname:
            b = f"c{len(self.bufname)}"
            self.register_buffer(b, torch.from_numpy(self.consts[name].copy()))
            self.bufname[name] = b
        return name

    def _scalar(self, node, name, default):
        if not name:
            return default
        if name not in self.consts:
            raise NotImplementedError(f"{node.op_type} {node.name}: input {name} must be a constant")
        v = self.consts[name]
        if v.size != 1:
            raise NotImplementedError(f"{node.op_type} {node.name}: input {name} must be a scalar")
        return float(v.reshape(()))

    def _lower(self, n):
        op, a, out = n.op_type, _attrs(n), n.output[0]
        ins = [i if i else None for i in n.input]
        for i in ins:
            if i is not None and i in self.consts and op not in ("Clip", "Resize"):
                self._buf(i)
        where = f"{op} {n.name or out}"
        if op in ("Add", "Sub", "Mul", "Div"):
            fn = {"Add": torch.add, "Sub": torch.sub, "Mul": torch.mul, "Div": torch.div}[op]
            return fn, ins, out
        if op == "Relu":
            return F.relu, ins, out
        if op == "Sigmoid":
            return torch.sigmoid, ins, out
        if op == "HardSigmoid":
            al, be = float(a.get("alpha", 0.2)), float(a.get("beta", 0.5))
            return (lambda x: torch.clamp(x * al + be, 0.0, 1.0)), ins, out
        if op == "Clip":
            lo = self._scalar(n, ins[1] if len(ins) > 1 else None, a.get("min"))
            hi = self._scalar(n, ins[2] if len(ins) > 2 else None, a.get("max"))
            return (lambda x: torch.clamp(x, lo, hi)), ins[:1], out
        if op == "GlobalAveragePool":
            return (lambda x: x.mean(dim=tuple(range(2, x.dim())), keepdim=True)), ins, out
        if op == "Concat":
            ax = int(a["axis"])
            return (lambda *xs: torch.cat(xs, dim=ax)), ins, out
        if op == "BatchNormalization":
            if a.get("training_mode", 0):
                raise NotImplementedError(f"{where}: training_mode")
            eps = float(a.get("epsilon", 1e-5))
            return (lambda x, s, b, mu, var: F.batch_norm(x, mu, var, s, b, False, 0.0, eps)), ins, out
        if op in ("Conv", "ConvTranspose"):
            return self._conv(n, a, ins, out, where)
        if op == "Resize":
            return self._resize(n, a, ins, out, where)
        raise NotImplementedError(where)

    def _conv(self, n, a, ins, out, where):
        if a.get("auto_pad", "NOTSET") != "NOTSET":
            raise NotImplementedError(f"{where}: auto_pad {a['auto_pad']}")
        if ins[1] not in self.consts:
            raise NotImplementedError(f"{where}: the weight must be a constant")
        nd = self.consts[ins[1]].ndim - 2
        if nd not in (1, 2, 3):
            raise NotImplementedError(f"{where}: {nd}-d convolution")
        st = tuple(a.get("strides", [1] * nd))
        dil = tuple(a.get("dilations", [1] * nd))
        grp = int(a.get("group", 1))
        pads = list(a.get("pads", [0] * (2 * nd)))
        begin, end = pads[:nd], pads[nd:]
        if n.op_type == "Conv":
            conv = (F.conv1d, F.conv2d, F.conv3d)[nd - 1]
            if begin == end:
                p = tuple(begin)
                return (lambda x, w, b=None: conv(x, w, b, st, p, dil, grp)), ins, out
            fpad = []  # F.pad: last dim first
            for d in reversed(range(nd)):
                fpad += [begin[d], end[d]]
            return (lambda x, w, b=None: conv(F.pad(x, fpad), w, b, st, 0, dil, grp)), ins, out
        if "output_shape" in a:
            raise NotImplementedError(f"{where}: output_shape")
        if begin != end:
            raise NotImplementedError(f"{where}: asymmetric pads {pads}")
        conv = (F.conv_transpose1d, F.conv_transpose2d, F.conv_transpose3d)[nd - 1]
        p, op_ = tuple(begin), tuple(a.get("output_padding", [0] * nd))
        return (lambda x, w, b=None: conv(x, w, b, st, p, op_, grp, dil)), ins, out

    def _resize(self, n, a, ins, out, where):
        mode = a.get("mode", "nearest")
        ctm = a.get("coordinate_transformation_mode", "half_pixel")
        nm = a.get("nearest_mode", "round_prefer_floor")
        if (mode, ctm, nm) != ("nearest", "asymmetric", "floor"):
            raise NotImplementedError(f"{where}: mode={mode} coordinate_transformation_mode={ctm} "
                                      f"nearest_mode={nm} (only nearest / asymmetric / floor)")
        scales = ins[2] if len(ins) > 2 else None
        sizes = ins[3] if len(ins) > 3 else None
        for v in (scales, sizes):
            if v is not None and v not in self.consts:
                raise NotImplementedError(f"{where}: {v} must be a constant")
        sc = self.consts[scales] if scales is not None else None
        if sc is not None and sc.size:
            sc = [float(v) for v in sc.reshape(-1)]
            if sc[0] != 1.0 or sc[1] != 1.0:
                raise NotImplementedError(f"{where}: scales {sc} resize N or C")
            fs = tuple(sc[2:])
            # torch's nearest with scale_factor (recompute_scale_factor off): src = floor(dst / scale),
            # out = floor(in * scale): ONNX's asymmetric + floor
            return (lambda x: F.interpolate(x, scale_factor=fs, mode="nearest")), ins[:1], out
        if sizes is None:
            raise NotImplementedError(f"{where}: neither scales nor sizes")
        sz = [int(v) for v in self.consts[sizes].reshape(-1)]
        # with a size, torch's nearest uses scale in/out, src = floor(dst * in / out): the same rule
        return (lambda x: F.interpolate(x, size=tuple(sz[2:]), mode="nearest")), ins[:1], out

    # ------------------------------------------------------------------ run
    def forward(self, *xs):
        env = dict(zip(self.inputs, xs))
        for name, b in self.bufname.items():
            env[name] = getattr(self, b)
        for (fn, ins, out), drop in zip(self.steps, self.drop):
            env[out] = fn(*[env[i] for i in ins if i is not None])
            for d in drop:
                del env[d]
        outs = tuple(env[o] for o in self.outputs)
        return outs[0] if len(outs) == 1 else outs

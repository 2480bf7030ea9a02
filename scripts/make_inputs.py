#!/usr/bin/python3
"""Write seeded random .npy inputs for every graph input of an ONNX model.

Usage:
    make_inputs.py MODEL.onnx --out DIR [--shape NAME=1x3x224x224 ...] [--dim PARAM=VALUE ...] [--seed S]

Shapes: --shape gives an input's full concrete shape; otherwise the model's static dims are used,
with symbolic dims (dim_param) resolved by --dim PARAM=VALUE (e.g. --dim batch=1 --dim sequence=128).
Inputs that are also initializers (old-style optional inputs) are skipped.

Values, by element type and input name (case-insensitive):
    float/double/half   *mask*: as the int mask below; else N(0, 1)
    integer, *mask*     ones, with the last quarter of the sequence axis (axis 1, or 0 for rank 1) zero
    integer, *type*     token_type_ids-style: zeros for the first half of the sequence axis, ones after
    integer, *ids*      uniform in [0, 100)  (valid for any vocabulary of >= 100 tokens)
    integer, other      uniform in [0, 10)
    bool                uniform random
Files: DIR/<name>.npy, with characters outside [A-Za-z0-9._-] replaced by '_' (same rule as ort_run.js).
"""
import argparse
import os
import re
import sys

import numpy as np
import onnx
from onnx import TensorProto

try:
    from onnx import helper
    _np_of = helper.tensor_dtype_to_np_dtype  # onnx >= 1.13
except AttributeError:  # onnx 1.12 (Debian bookworm)
    from onnx.mapping import TENSOR_TYPE_TO_NP_TYPE

    def _np_of(t):
        return TENSOR_TYPE_TO_NP_TYPE[t]


def safe_name(name):
    s = re.sub(r"[^A-Za-z0-9._-]", "_", name)
    if not s or s[0] == ".":
        s = "_" + s
    return s


def parse_shape(s):
    s = s.strip()
    if s in ("", "scalar", "()"):
        return ()
    return tuple(int(x) for x in re.split(r"[x,]", s))


def seq_axis(shape):
    return 1 if len(shape) >= 2 else 0


def make_value(name, elem, shape, rng):
    lname = name.lower()
    dt = np.dtype(_np_of(elem))
    if elem == TensorProto.BOOL:
        return rng.integers(0, 2, size=shape).astype(np.bool_)
    if "mask" in lname:
        v = np.ones(shape, dtype=dt)
        if len(shape):
            ax = seq_axis(shape)
            n = shape[ax]
            z = n // 4
            if z:
                idx = [slice(None)] * len(shape)
                idx[ax] = slice(n - z, n)
                v[tuple(idx)] = 0
        return v
    if dt.kind == "f":
        return rng.standard_normal(size=shape).astype(dt)
    if dt.kind in "iu":
        if "type" in lname:
            v = np.zeros(shape, dtype=dt)
            if len(shape):
                ax = seq_axis(shape)
                idx = [slice(None)] * len(shape)
                idx[ax] = slice(shape[ax] // 2, shape[ax])
                v[tuple(idx)] = 1
            return v
        hi = 100 if "ids" in lname else 10
        return rng.integers(0, hi, size=shape).astype(dt)
    raise SystemExit(f"make_inputs: input '{name}' has unsupported element type {TensorProto.DataType.Name(elem)}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model")
    ap.add_argument("--shape", action="append", default=[], metavar="NAME=DxDxD",
                    help="concrete shape of one input, e.g. input=1x3x224x224 (repeatable)")
    ap.add_argument("--dim", action="append", default=[], metavar="PARAM=N",
                    help="value of a symbolic dimension, e.g. batch=1 (repeatable)")
    ap.add_argument("--out", required=True, help="output directory")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)

    shapes, dims = {}, {}
    for s in a.shape:
        k, _, v = s.partition("=")
        if not v:
            ap.error(f"--shape wants NAME=DxD..., got {s!r}")
        shapes[k] = parse_shape(v)
    for s in a.dim:
        k, _, v = s.partition("=")
        if not v:
            ap.error(f"--dim wants PARAM=N, got {s!r}")
        dims[k] = int(v)

    model = onnx.load(a.model)
    g = model.graph
    inits = {i.name for i in g.initializer} | {i.name for i in g.sparse_initializer}
    inputs = [i for i in g.input if i.name not in inits]
    unknown = set(shapes) - {i.name for i in inputs}
    if unknown:
        sys.exit(f"make_inputs: model has no input(s) {sorted(unknown)}; inputs: {[i.name for i in inputs]}")
    os.makedirs(a.out, exist_ok=True)
    rng = np.random.default_rng(a.seed)
    for vi in inputs:
        tt = vi.type.tensor_type
        if not vi.type.HasField("tensor_type"):
            sys.exit(f"make_inputs: input '{vi.name}' is not a tensor")
        if vi.name in shapes:
            shape = shapes[vi.name]
            if tt.HasField("shape") and len(tt.shape.dim) != len(shape):
                sys.exit(f"make_inputs: --shape {vi.name} has rank {len(shape)}, model says {len(tt.shape.dim)}")
        else:
            shape = []
            for j, d in enumerate(tt.shape.dim):
                if d.HasField("dim_value"):
                    shape.append(d.dim_value)
                elif d.dim_param and d.dim_param in dims:
                    shape.append(dims[d.dim_param])
                else:
                    sym = d.dim_param or "?"
                    sys.exit(f"make_inputs: input '{vi.name}' dim {j} is symbolic ({sym}): "
                             f"give --shape {vi.name}=... or --dim {sym}=N")
            shape = tuple(shape)
        v = make_value(vi.name, tt.elem_type, shape, rng)
        path = os.path.join(a.out, safe_name(vi.name) + ".npy")
        np.save(path, v)
        print(f"{vi.name} {v.dtype} {'x'.join(map(str, v.shape)) or 'scalar'} -> {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

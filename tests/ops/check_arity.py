#!/usr/bin/python3
"""Checks the input/output counts in src/ir/ops.def against the operator schemas of Debian's
ONNX (every opset version): each range must equal the union over all versions, except for the
ops that newer opsets (after ONNX 1.12) widened, listed below with the spec change."""
import re, sys
from onnx import defs

NEWER = {  # op: (min_in, max_in, min_out, max_out) per the operator docs of ONNX >= 1.13
    **{op: (1, 2, 1, 1) for op in ["ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceMax",
                                   "ReduceMean", "ReduceMin", "ReduceProd", "ReduceSumSquare"]},  # opset 18 axes
    "Pad": (1, 4, 1, 1),                 # opset 18: optional axes input
    "DFT": (1, 3, 1, 1),                 # opset 20: optional axis input
    "Gelu": (1, 1, 1, 1), "Mish": (1, 1, 1, 1), "GroupNormalization": (3, 3, 1, 1),
    "BitwiseAnd": (2, 2, 1, 1), "BitwiseOr": (2, 2, 1, 1), "BitwiseXor": (2, 2, 1, 1), "BitwiseNot": (1, 1, 1, 1),
}
VAR = 2**31 - 1
src = open(sys.argv[1]).read()
ops = re.findall(r"\bX\((\w+), (\d+), (\d+|VAR), (\d+), (\d+|VAR)\)", src)
schemas = {}
for s in defs.get_all_schemas_with_history():
    if s.domain in ("", "ai.onnx"):
        a = schemas.setdefault(s.name, [VAR, 0, VAR, 0])
        a[0] = min(a[0], s.min_input); a[1] = max(a[1], min(s.max_input, VAR))
        a[2] = min(a[2], s.min_output); a[3] = max(a[3], min(s.max_output, VAR))
bad = 0
for name, *nums in ops:
    have = tuple(VAR if v == "VAR" else int(v) for v in nums)
    want = NEWER.get(name) or (tuple(schemas[name]) if name in schemas else None)
    if want is None:
        print(f"{name}: no ONNX schema and not in NEWER"); bad += 1
    elif have != want:
        print(f"{name}: ops.def has {have}, the ONNX specification says {want}"); bad += 1
print(f"{len(ops)} ONNX ops checked, {bad} mismatches")
sys.exit(1 if bad or len(ops) < 150 else 0)

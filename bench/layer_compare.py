#!/usr/bin/python3
"""kiln's per-layer profile next to ONNX Runtime's per-node profile of the same model.

Usage:
    layer_compare.py --kiln INSPECT.json[,...] --ort ORT_PROFILE.json[,...] [--skip N] [--top N] [--title T]

--kiln: the output of `kiln inspect ENGINE --profile --json [--threads N] [--iterations R]` (mean ms
per layer); --ort: the trace `node scripts/ort_run.js MODEL --bench R --profile PREFIX` writes
(PREFIX_<date>.json). Several files per side (comma separated, e.g. alternated rounds) are averaged.
--skip: ORT runs to drop at the start of each trace (the first run and ort_run.js's 3 warm-ups: 4).

Prints markdown: the time per op type on each side (the two runtimes fuse differently, so op types
are each side's own), then layers grouped by class (conv: input shape, output shape, residual or
not; matmul: input and output shape; other ops: op type and output shape) with count, kiln ms, ORT
ms and the ratio, and the top-N kiln layers, each paired with the ORT node of the same class and
occurrence. Times are means per inference in ms.
"""
import argparse
import collections
import json
import sys

CONV = {"Conv", "FusedConv"}
MATMUL = {"MatMul", "FusedMatMul", "Gemm", "FusedGemm"}


def family(op):
    return "conv" if op in CONV else "matmul" if op in MATMUL else op


def shape(s):
    return "x".join(str(d) for d in s) if s else "?"


def klass(op, ins, outs, residual):
    """A layer's class: what both runtimes compute the same way whatever they fuse."""
    f = family(op)
    out = shape(outs[0]) if outs else "?"
    if f == "conv":
        return f"conv {shape(ins[0])} -> {out}{' +res' if residual else ''}"
    if f == "matmul":
        return f"matmul {shape(ins[0])} -> {out}"
    return f"{op} -> {out}"


def kiln_layers(path):
    """[(name, op, class, ms)] of one `kiln inspect --profile --json` output."""
    with open(path) as f:
        d = json.load(f)
    rows = []
    for L in d["layers"]:
        ins = [x.get("shape") for x in L["inputs"] if x.get("shape") is not None]
        outs = [x.get("shape") for x in L["outputs"] if x.get("shape") is not None]
        rows.append((L["name"] or L["op"], L["op"], klass(L["op"], ins, outs, family(L["op"]) == "conv" and len(ins) > 1),
                     L["time_ms"]))
    return rows


def ort_nodes(path, skip):
    """[(name, op, class, ms)] of one ORT profile: each node's mean over the runs after `skip`."""
    with open(path) as f:
        ev = json.load(f)
    runs = sorted((e["ts"], e["ts"] + e["dur"]) for e in ev if e.get("cat") == "Session" and e.get("name") == "model_run")
    runs = runs[skip:]
    if not runs:
        sys.exit(f"layer_compare: {path}: no runs left after --skip {skip}")
    order, tot, info = [], collections.defaultdict(float), {}
    for e in ev:
        if e.get("cat") != "Node" or not e["name"].endswith("_kernel_time"):
            continue
        if not any(a <= e["ts"] <= b for a, b in runs):
            continue
        n = e["name"][: -len("_kernel_time")]
        if n not in info:
            a = e["args"]
            op = a.get("op_name", "?")
            ins = [next(iter(t.values())) for t in a.get("input_type_shape", [])]
            outs = [next(iter(t.values())) for t in a.get("output_type_shape", [])]
            info[n] = (op, klass(op, ins, outs, family(op) == "conv" and len(ins) > 3))
            order.append(n)
        tot[n] += e["dur"] / 1000.0
    return [(n, info[n][0], info[n][1], tot[n] / len(runs)) for n in order]


def average(lists):
    """Element-wise mean of per-file lists of (name, op, class, ms) of the same model."""
    base = lists[0]
    for other in lists[1:]:
        if [r[0] for r in other] != [r[0] for r in base]:
            sys.exit("layer_compare: the files of one side list different layers")
    return [(r[0], r[1], r[2], sum(lst[i][3] for lst in lists) / len(lists)) for i, r in enumerate(base)]


def by(rows, key):
    d = collections.OrderedDict()
    for r in rows:
        c, t = d.get(key(r), (0, 0.0))
        d[key(r)] = (c + 1, t + r[3])
    return d


def ratio(k, o):
    return f"{k / o:.2f}" if o > 0 else "-"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--ort", required=True)
    ap.add_argument("--skip", type=int, default=4)
    ap.add_argument("--top", type=int, default=20)
    ap.add_argument("--title", default="")
    a = ap.parse_args()
    K = average([kiln_layers(p) for p in a.kiln.split(",")])
    O = average([ort_nodes(p, a.skip) for p in a.ort.split(",")])
    kt, ot = sum(r[3] for r in K), sum(r[3] for r in O)
    if a.title:
        print(f"### {a.title}\n")
    print(f"Sum of layer times: kiln {kt:.2f} ms, ORT {ot:.2f} ms, ratio {ratio(kt, ot)}\n")

    print("| kiln op | n | ms | share | | ORT op | n | ms | share |")
    print("|---|---|---|---|---|---|---|---|---|")
    ko = sorted(by(K, lambda r: r[1]).items(), key=lambda x: -x[1][1])
    oo = sorted(by(O, lambda r: r[1]).items(), key=lambda x: -x[1][1])
    for i in range(max(len(ko), len(oo))):
        left = f"{ko[i][0]} | {ko[i][1][0]} | {ko[i][1][1]:.3f} | {100 * ko[i][1][1] / kt:.1f}%" if i < len(ko) else " | | |"
        right = f"{oo[i][0]} | {oo[i][1][0]} | {oo[i][1][1]:.3f} | {100 * oo[i][1][1] / ot:.1f}%" if i < len(oo) else " | | |"
        print(f"| {left} | | {right} |")

    print("\n| class | kiln n | kiln ms | ORT n | ORT ms | kiln/ORT |")
    print("|---|---|---|---|---|---|")
    kc, oc = by(K, lambda r: r[2]), by(O, lambda r: r[2])
    for c in sorted(set(kc) | set(oc), key=lambda c: -max(kc.get(c, (0, 0))[1], oc.get(c, (0, 0))[1])):
        kn, km = kc.get(c, (0, 0.0))
        on, om = oc.get(c, (0, 0.0))
        if max(km, om) < 0.01 * max(kt, ot) / 10:
            continue
        print(f"| {c} | {kn} | {km:.3f} | {on} | {om:.3f} | {ratio(km, om) if kn and on else '-'} |")

    # pair each kiln layer with the ORT node of the same class and occurrence
    seen, occ = collections.Counter(), collections.defaultdict(list)
    for r in O:
        occ[r[2]].append(r)
    pair = []
    for r in K:
        lst = occ.get(r[2], [])
        pair.append(lst[seen[r[2]]] if seen[r[2]] < len(lst) else None)
        seen[r[2]] += 1
    print(f"\n| # | kiln layer | class | kiln ms | ORT node | ORT ms | kiln/ORT |")
    print("|---|---|---|---|---|---|---|")
    top = sorted(range(len(K)), key=lambda i: -K[i][3])[: a.top]
    for i in top:
        n, op, c, ms = K[i]
        p = pair[i]
        print(f"| {i} | {n} ({op}) | {c} | {ms:.3f} | {p[0] if p else '-'} | {p[3] if p else 0:.3f} | "
              f"{ratio(ms, p[3]) if p else '-'} |")


if __name__ == "__main__":
    main()

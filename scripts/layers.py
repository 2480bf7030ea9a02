#!/usr/bin/env python3
"""kiln's module layering, read from the #include lines of the tree.

    scripts/layers.py            print the module graph (module -> modules it includes, with counts)
    scripts/layers.py --check    also check it against the intended layering below; exit 1 on any
                                 include that is neither allowed nor a listed known violation, and
                                 on a known violation that no longer exists (so the list only shrinks)
    scripts/layers.py --dot      the graph in Graphviz dot

A module is a folder under src/ (src/backend/cpu/ref/k_conv.c is in `backend`), `kiln.h` is the
public header, `tools` the CLI (tools/kiln/, server included), `examples` the API examples.
"""
import os
import re
import sys
from collections import defaultdict

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Intended direction (docs/ARCHITECTURE.md): each module may include only these.
ALLOWED = {
    "core":     {"kiln.h"},
    "ir":       {"core", "kiln.h"},
    "onnx":     {"ir", "core", "kiln.h"},
    "passes":   {"ir", "core", "kiln.h"},
    "backend":  {"ir", "core", "kiln.h"},
    "engine":   {"ir", "core", "kiln.h"},   # passive artifact: format, sections, read/write, memory plan type
    # the builder; runtime: the one arrow back down the table -- it runs the interpreter to time
    # tactics and to record the calibration run's value sizes for the memory plan, checks kernel
    # support, and prepares the layer plan (runtime/layers.c). The runtime never includes build.
    "build":    {"ir", "passes", "backend", "engine", "onnx", "quant", "runtime", "core", "kiln.h"},
    "runtime":  {"engine", "backend", "ir", "onnx", "quant", "core", "kiln.h"},
    "quant":    {"ir", "core", "kiln.h"},
    "verify":   {"core", "kiln.h"},   # accuracy metrics and budgets: math over tensors
    "tools":    {"kiln.h"},
    "examples": {"kiln.h"},
}

# Where today's code still breaks the layering: (from, to) -> why. Remove an entry when it is
# fixed; --check fails on an entry that no longer occurs.
KNOWN = {
}

INC = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def module_of(rel):
    parts = rel.split(os.sep)
    if parts[0] == "src" and len(parts) > 2:
        return parts[1]
    if parts[0] == "include":
        return "kiln.h"
    if parts[0] in ("tools", "examples"):
        return parts[0]
    return None


def resolve(src_rel, inc):
    """The repository path an include names (relative to the including file, then src/, include/)."""
    cands = [os.path.join(os.path.dirname(src_rel), inc), os.path.join("src", inc), os.path.join("include", inc)]
    for c in cands:
        c = os.path.normpath(c)
        if os.path.isfile(os.path.join(ROOT, c)):
            return c
    return None


def edges():
    e = defaultdict(lambda: defaultdict(list))
    for top in ("src", "include", "tools", "examples"):
        for d, _, files in os.walk(os.path.join(ROOT, top)):
            for f in files:
                if not f.endswith((".c", ".h", ".def")):
                    continue
                rel = os.path.relpath(os.path.join(d, f), ROOT)
                m = module_of(rel)
                with open(os.path.join(ROOT, rel), encoding="utf-8", errors="replace") as fh:
                    text = fh.read()
                for inc in INC.findall(text):
                    t = resolve(rel, inc)
                    tm = module_of(t) if t else None
                    if tm and m and tm != m:
                        e[m][tm].append(f"{rel} -> {t}")
    return e


def main():
    args = sys.argv[1:]
    if any(a in ("-h", "--help") for a in args):
        print(__doc__.strip())
        return 0
    e = edges()
    if "--dot" in args:
        print("digraph kiln {\n  rankdir=BT;")
        for m in sorted(e):
            for t in sorted(e[m]):
                bad = t not in ALLOWED.get(m, set())
                print(f'  "{m}" -> "{t}" [label={len(e[m][t])}{", color=red" if bad else ""}];')
        print("}")
        return 0
    for m in sorted(e):
        print(f"{m:9} -> " + ", ".join(f"{t} ({len(e[m][t])})" for t in sorted(e[m])))
    if "--check" not in args:
        return 0
    rc = 0
    seen = set()
    for m in sorted(e):
        for t in sorted(e[m]):
            if t in ALLOWED.get(m, set()):
                continue
            seen.add((m, t))
            if (m, t) in KNOWN:
                print(f"known violation {m} -> {t}: {KNOWN[(m, t)]} ({len(e[m][t])} includes)")
            else:
                rc = 1
                print(f"LAYER VIOLATION {m} -> {t}:")
                for x in e[m][t]:
                    print(f"    {x}")
    for k in sorted(set(KNOWN) - seen):
        rc = 1
        print(f"FIXED {k[0]} -> {k[1]}: remove it from KNOWN in scripts/layers.py")
    print("layers: ok" if rc == 0 else "layers: FAILED")
    return rc


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/python3
"""Compare every .npy in DIR_B (the reference) with the same file in DIR_A.

Usage:
    compare_npy.py DIR_A DIR_B [--rtol 1e-3] [--atol 1e-4]

For each DIR_B/*.npy: DIR_A must hold a file of the same name, shape and dtype.
Floating point: PASS when |a - b| <= atol + rtol * |b| elementwise (numpy.allclose with b as the
reference), NaN positions equal, and infinities equal (same sign, same place).
Integer and bool arrays must be equal exactly.
Prints one line per file: name, shape, dtype, max abs err, max rel err (|a-b|/|b| where b != 0), PASS/FAIL.
Exit status: 0 when all files pass, 1 when any fails or is missing (or DIR_B holds no .npy), 2 on usage errors.
"""
import argparse
import os
import sys

import numpy as np


def compare(a, b, rtol, atol):
    """Return (ok, max_abs, max_rel, note)."""
    if a.shape != b.shape:
        return False, float("nan"), float("nan"), f"shape {a.shape} != {b.shape}"
    if a.dtype != b.dtype:
        return False, float("nan"), float("nan"), f"dtype {a.dtype} != {b.dtype}"
    if a.size == 0:
        return True, 0.0, 0.0, "empty"
    if a.dtype.kind in "fc":
        a64 = a.astype(np.complex128 if a.dtype.kind == "c" else np.float64)
        b64 = b.astype(a64.dtype)
        an, bn = np.isnan(a64), np.isnan(b64)
        notes = []
        ok = True
        if (an != bn).any():
            ok = False
            notes.append(f"NaN mismatch at {int((an != bn).sum())} elements")
        ai, bi = np.isinf(a64), np.isinf(b64)
        inf_bad = (ai | bi) & ~(an | bn) & (a64 != b64)
        if inf_bad.any():
            ok = False
            notes.append(f"inf mismatch at {int(inf_bad.sum())} elements")
        fin = np.isfinite(a64) & np.isfinite(b64)
        if fin.any():
            d = np.abs(a64[fin] - b64[fin])
            ref = np.abs(b64[fin])
            bad = d > atol + rtol * ref
            max_abs = float(d.max())
            nz = ref > 0
            max_rel = float((d[nz] / ref[nz]).max()) if nz.any() else 0.0
            if bad.any():
                ok = False
                notes.append(f"{int(bad.sum())}/{a.size} elements out of tolerance")
        else:
            max_abs = max_rel = 0.0
        if inf_bad.any():
            max_abs = max_rel = float("inf")
        return ok, max_abs, max_rel, "; ".join(notes)
    # integers / bool: exact
    if a.dtype.kind == "b":
        diff = a != b
        max_abs = float(diff.any())
        max_rel = max_abs
    else:
        d = np.abs(a.astype(np.float64) - b.astype(np.float64))
        diff = a != b
        max_abs = float(d.max())
        ref = np.abs(b.astype(np.float64))
        nz = ref > 0
        max_rel = float((d[nz] / ref[nz]).max()) if nz.any() else 0.0
    n = int(diff.sum())
    return n == 0, max_abs, max_rel, (f"{n}/{a.size} elements differ" if n else "")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dir_a", help="directory under test")
    ap.add_argument("dir_b", help="reference directory (every .npy here is checked)")
    ap.add_argument("--rtol", type=float, default=1e-3)
    ap.add_argument("--atol", type=float, default=1e-4)
    a = ap.parse_args(argv)
    for d in (a.dir_a, a.dir_b):
        if not os.path.isdir(d):
            print(f"compare_npy: {d} is not a directory", file=sys.stderr)
            return 2
    files = sorted(f for f in os.listdir(a.dir_b) if f.endswith(".npy"))
    if not files:
        print(f"compare_npy: no .npy files in {a.dir_b}")
        return 1
    failed = 0
    w = max(len(f) for f in files)
    for f in files:
        pa = os.path.join(a.dir_a, f)
        if not os.path.exists(pa):
            print(f"{f:<{w}}  MISSING in {a.dir_a}  FAIL")
            failed += 1
            continue
        try:
            x = np.load(pa, allow_pickle=False)
            y = np.load(os.path.join(a.dir_b, f), allow_pickle=False)
        except Exception as e:  # noqa: BLE001 - report and count as failure
            print(f"{f:<{w}}  cannot load: {e}  FAIL")
            failed += 1
            continue
        ok, ma, mr, note = compare(x, y, a.rtol, a.atol)
        failed += not ok
        shape = "x".join(map(str, y.shape)) or "scalar"
        print(f"{f:<{w}}  {shape:>14} {str(y.dtype):<8} max_abs={ma:.3e} max_rel={mr:.3e}  "
              f"{'PASS' if ok else 'FAIL'}{'  (' + note + ')' if note else ''}")
    print(f"compare_npy: {len(files) - failed}/{len(files)} files match (rtol={a.rtol:g}, atol={a.atol:g})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

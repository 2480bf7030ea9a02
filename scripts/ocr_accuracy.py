#!/usr/bin/python3
"""Real-task accuracy of the PaddleOCR direction classifier (cls) and text recognizer (rec) under kiln,
for any list of engines (one per precision), with the drop versus the first (the FP32 baseline).

    scripts/ocr_eval_data.py --out /tmp/ocr                       # the evaluation set (once)
    scripts/ocr_accuracy.py --data /tmp/ocr [--cls NAME=ENGINE ...] [--rec NAME=ENGINE ...]
                            [--only cls|rec] [--limit N] [--batch N] [--device cpu|cuda] [--json]
                            [--min-cls A --min-rec-exact A --min-rec-char A]

Without --cls / --rec, each defaults to fp32 = the ONNX model in models/ocr/. An ONNX model is
built once into a temporary engine (`kiln build`); a .kiln engine is used as is. Every engine runs
through `kiln run` on the .npy batches of DATA/eval, so what is measured is the CLI a user runs; --device cuda
runs them on the GPU (`kiln run --device cuda`; engines built for the GPU, e.g. `kiln build --device cuda
--precision fp16`, are used as they are; give --batch 100000 for one run per engine: each `kiln run` process
loads the CUDA libraries again).

Metrics (PaddleOCR's ClsMetric / RecMetric, spaces ignored as RecMetric's ignore_space does):
    cls accuracy       arg max of the 2-way softmax ('0', '180') equals the rendered rotation
    rec exact match    CTC greedy decoding (arg max per step, repeats merged, blank 0 dropped; class k
                       is dictionary line k, the last class a space) equals the text
    rec char accuracy  1 - mean normalized edit distance (Levenshtein / max(len))
The --min-* floors (fractions) apply to the first engine of each model; missing one exits 1.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OCR = os.path.join(ROOT, "models", "ocr")
DEFAULT = {"cls": os.path.join(OCR, "ch_ppocr_mobile_v2.0_cls_infer.onnx"),
           "rec": os.path.join(OCR, "ch_PP-OCRv4_rec_infer.onnx")}


def load_dict(path):
    with open(path, encoding="utf-8") as f:
        return ["<blank>"] + [line.rstrip("\n") for line in f] + [" "]


def ctc_greedy(probs, chars):
    """probs [T, C] -> text."""
    idx = probs.argmax(axis=1)
    out, prev = [], -1
    for k in idx:
        if k != prev and k != 0:
            out.append(chars[k] if k < len(chars) else "")
        prev = k
    return "".join(out)


def edit_distance(a, b):
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        cur = [i]
        for j, cb in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb)))
        prev = cur
    return prev[-1]


def chunks(batches, limit, rows, tmp):
    """The batch files cut to at most `limit` samples in all and `rows` per run (0: as stored)."""
    n = 0
    for b in batches:
        x = np.load(b)
        step = rows or len(x)
        for k in range(0, len(x), step):
            if n >= limit:
                return
            part = x[k:k + min(step, limit - n)]
            if len(part) == len(x):
                yield b
            else:
                path = os.path.join(tmp, "chunk.npy")
                np.save(path, part)
                yield path
            n += len(part)


def run_engine(kiln, engine, batches, limit, tmp, threads, rows, device="cpu"):
    """Runs `engine` on every batch (on `device`); returns the concatenated first output (at most limit rows)."""
    outs = []
    for b in chunks(batches, limit, rows, tmp):
        od = os.path.join(tmp, "out")
        cmd = [kiln, "run", engine, "--input", f"x={b}", "--output-dir", od]
        if threads:
            cmd += ["--threads", str(threads)]
        if device != "cpu":
            cmd += ["--device", device]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit(f"ocr_accuracy: {' '.join(cmd)} failed ({r.returncode}):\n{r.stderr}")
        with open(os.path.join(od, "outputs.json")) as f:
            files = json.load(f)
        outs.append(np.load(os.path.join(od, next(iter(files.values())))))
    return np.concatenate(outs)


def prepare(kiln, spec, kind, tmp):
    name, _, path = spec.partition("=")
    if not path:
        sys.exit(f"ocr_accuracy: --{kind} expects NAME=ENGINE, got '{spec}'")
    if not os.path.isfile(path):
        sys.exit(f"ocr_accuracy: --{kind} {name}: no file '{path}'")
    if path.endswith(".onnx"):
        eng = os.path.join(tmp, f"{kind}_{len(os.listdir(tmp))}.kiln")
        r = subprocess.run([kiln, "build", path, "-o", eng], capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit(f"ocr_accuracy: kiln build {path} failed:\n{r.stderr}")
        path = eng
    return name, path


def evaluate(a, labels, tmp):
    texts = [t.replace(" ", "") for t in labels["texts"]][:a.limit]
    rotated = np.array(labels["rotated"][:a.limit])
    chars = load_dict(a.dict)
    results = {"samples": len(texts), "device": a.device, "cls": [], "rec": []}
    for kind in a.only or ("cls", "rec"):
        batches = sorted(os.path.join(a.data, "eval", kind, f) for f in os.listdir(os.path.join(a.data, "eval", kind))
                         if f.endswith(".npy"))
        for spec in getattr(a, kind) or [f"fp32={DEFAULT[kind]}"]:
            name, eng = prepare(a.kiln, spec, kind, tmp)
            y = run_engine(a.kiln, eng, batches, len(texts), tmp, a.threads, a.batch, a.device)
            if len(y) != len(texts):
                sys.exit(f"ocr_accuracy: {name}: {len(y)} outputs for {len(texts)} samples")
            if kind == "cls":
                r = {"name": name, "accuracy": float(np.mean(y.argmax(axis=1) == rotated))}
            else:
                pred = [ctc_greedy(p, chars).replace(" ", "") for p in y]
                exact = np.mean([p == t for p, t in zip(pred, texts)])
                ned = np.mean([edit_distance(p, t) / max(len(p), len(t), 1) for p, t in zip(pred, texts)])
                r = {"name": name, "exact": float(exact), "char": float(1 - ned),
                     "errors": [[t, p] for p, t in zip(pred, texts) if p != t][:5]}
            results[kind].append(r)
    return results


def print_table(res):
    print(f"PaddleOCR on {res['samples']} rendered text lines (scripts/ocr_eval_data.py)")
    print(f"{'model':5} {'engine':16} {'metric':18} {'value':>8} {'drop vs first':>14}")
    for kind, metrics in (("cls", [("accuracy", "accuracy")]),
                          ("rec", [("exact", "exact match"), ("char", "char accuracy")])):
        if not res[kind]:
            continue
        base = res[kind][0]
        for r in res[kind]:
            for key, label in metrics:
                drop = 100 * (base[key] - r[key])
                print(f"{kind:5} {r['name']:16} {label:18} {100 * r[key]:7.2f}% {drop:+13.2f} pt")
    for r in res["rec"]:
        if r["errors"]:
            print(f"rec {r['name']}: first misreads (truth -> read): " +
                  ", ".join(f"{t!r}->{p!r}" for t, p in r["errors"]))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", required=True, help="directory written by scripts/ocr_eval_data.py")
    ap.add_argument("--kiln", default=os.path.join(ROOT, "build", "kiln"))
    ap.add_argument("--cls", action="append", help="NAME=ENGINE|MODEL.onnx (repeatable; the first is the baseline)")
    ap.add_argument("--rec", action="append", help="NAME=ENGINE|MODEL.onnx (repeatable; the first is the baseline)")
    ap.add_argument("--dict", default=os.path.join(OCR, "ppocr_keys_v1.txt"))
    ap.add_argument("--limit", type=int, default=1 << 30, help="use the first N samples")
    ap.add_argument("--batch", type=int, default=0, help="samples per kiln run (default: as stored, 32); "
                    "e.g. 1 for engines built for batch 1")
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="where kiln runs the engines")
    ap.add_argument("--only", choices=("cls", "rec"), action="append", help="evaluate only this model")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--min-cls", type=float, help="floor for the baseline's cls accuracy (fraction)")
    ap.add_argument("--min-rec-exact", type=float, help="floor for the baseline's rec exact match")
    ap.add_argument("--min-rec-char", type=float, help="floor for the baseline's rec char accuracy")
    a = ap.parse_args()
    if a.limit < 1 or a.batch < 0 or a.threads < 0:
        ap.error("--limit must be >= 1, --batch and --threads >= 0")
    with open(os.path.join(a.data, "eval", "labels.json")) as f:
        labels = json.load(f)
    with tempfile.TemporaryDirectory() as tmp:
        res = evaluate(a, labels, tmp)
    if a.json:
        json.dump(res, sys.stdout, indent=1)
        print()
    else:
        print_table(res)
    first = {k: res[k][0] if res[k] else {} for k in ("cls", "rec")}
    fails = [f"{what} {100 * v:.2f}% < floor {100 * floor:.2f}%" for what, v, floor in (
        ("cls accuracy", first["cls"].get("accuracy"), a.min_cls),
        ("rec exact match", first["rec"].get("exact"), a.min_rec_exact),
        ("rec char accuracy", first["rec"].get("char"), a.min_rec_char)) if floor is not None and (v is None or v < floor)]
    for f in fails:
        print(f"ocr_accuracy: FAIL {f}", file=sys.stderr)
    sys.exit(1 if fails else 0)


if __name__ == "__main__":
    main()

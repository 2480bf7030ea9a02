#!/usr/bin/python3
"""The real-task OCR evaluation set: text lines rendered with Debian's DejaVu fonts by ImageMagick,
ground truth known, preprocessed exactly as PaddleOCR does, for the PaddleOCR direction classifier
(cls) and text recognizer (rec) in models/ocr/.

    scripts/ocr_eval_data.py --out DIR [--eval 320] [--calib 128] [--seed 2026] [--batch 32]

Writes
    DIR/eval/cls/bNNN.npy     float32 [B,3,48,192]: half the lines rotated 180 degrees
    DIR/eval/rec/bNNN.npy     float32 [B,3,48,320]: the same lines, upright
    DIR/eval/labels.json      {"texts": [...], "rotated": [0|1, ...], "fonts": [...], ...} (sample order)
    DIR/calib/cls/*.npy, DIR/calib/rec/*.npy   a calibration set: other texts (disjoint from the
                              evaluation texts), other seed; for kiln calibrate / build --calib
Deterministic for a seed. Text: words and numbers over letters, digits and a little punctuation, all
in the rec model's dictionary (models/ocr/ppocr_keys_v1.txt; checked). Preprocessing (PaddleOCR's
resize_norm_img of predict_cls.py / predict_rec.py): BGR, resize to height 48 keeping the aspect
ratio (width ceil(48*w/h), at most 192 / 320; bilinear with half-pixel centres as cv2.INTER_LINEAR),
x/255, (x-0.5)/0.5, zero padding on the right.
"""
import argparse
import json
import math
import os
import subprocess
import sys
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DICT = os.path.join(ROOT, "models", "ocr", "ppocr_keys_v1.txt")
CONVERT = "/usr/bin/convert"   # Debian's imagemagick (scripts/bootstrap.sh)
FONT_DIR = "/usr/share/fonts/truetype/dejavu"   # fonts-dejavu-core
FONTS = ["DejaVuSans.ttf", "DejaVuSans-Bold.ttf", "DejaVuSerif.ttf", "DejaVuSerif-Bold.ttf",
         "DejaVuSansMono.ttf", "DejaVuSansMono-Bold.ttf"]
WORDS = """time year people way day man thing woman life child world school state family student group
country problem hand part place case week company system program question work government number
night point home water room mother area money story fact month lot right study book eye job word
business issue side kind head house service friend father power hour game line end member law car
city community name president team minute idea kid body information back parent face others level
office door health person art war history party result change morning reason research girl guy
moment air teacher force education foot boy age policy music market sense nation plan college
interest death experience effect use class control care field development role effort rate heart
drug show leader light voice wife police mind price report decision son view relationship town road
arm difference value building action model season society tax director position player record paper
space ground form event official matter center couple site project activity star table need court
oil situation cost industry figure street image phone data picture practice piece land product
doctor wall patient worker news test movie north love support technology step baby computer type
attention film tree source organization hair window evidence population site garden river kiln
engine layer tensor batch scale quantum vector matrix signal sample token kernel""".split()
PUNCT = "-.,:/"
CLS_W, REC_W, H = 192, 320, 48


def check_charset(texts):
    with open(DICT, encoding="utf-8") as f:
        keys = set(line.rstrip("\n") for line in f)
    for t in texts:
        bad = [c for c in t if c != " " and c not in keys]
        if bad:
            sys.exit(f"ocr_eval_data: characters {bad} of '{t}' are not in {DICT}")


def make_text(rng):
    kind = rng.integers(0, 6)
    if kind == 0:                       # a number: integer, decimal, date-like or code
        f = rng.integers(0, 4)
        if f == 0:
            return str(rng.integers(0, 10 ** int(rng.integers(2, 9))))
        if f == 1:
            return f"{rng.integers(0, 1000)}.{rng.integers(0, 100):02d}"
        if f == 2:
            return f"{rng.integers(1990, 2040)}-{rng.integers(1, 13):02d}-{rng.integers(1, 29):02d}"
        return f"{rng.integers(10, 100)}:{rng.integers(0, 60):02d}"
    n = int(rng.integers(1, 4))
    words = [WORDS[int(rng.integers(0, len(WORDS)))] for _ in range(n)]
    style = rng.integers(0, 4)
    if style == 1:
        words = [w.capitalize() for w in words]
    elif style == 2:
        words = [w.upper() for w in words]
    text = " ".join(words)
    if kind == 1:
        text += f" {rng.integers(0, 1000)}"
    elif kind == 2:
        text += PUNCT[int(rng.integers(0, len(PUNCT)))]
    return text


def render(specs, tmp):
    """specs: (text, font, pointsize, grey, rotate). One convert call renders a chunk of lines."""
    out = []
    for start in range(0, len(specs), 64):
        chunk = specs[start:start + 64]
        args = [CONVERT]
        for text, font, size, grey, rotate in chunk:
            # label: text never starts with '@' (a file) and holds no '%' or '\\' (escapes): the
            # character set above has none of them
            args += ["(", "-background", "white", "-fill", f"rgb({grey},{grey},{grey})", "-font",
                     os.path.join(FONT_DIR, font), "-pointsize", str(size), "label:" + text,
                     "-bordercolor", "white", "-border", f"{int(size * 0.3)}x{int(size * 0.2)}"]
            if rotate:
                args += ["-rotate", "180"]
            args += [")"]
        pattern = os.path.join(tmp, "img_%04d.ppm")
        args += ["-depth", "8", "+adjoin", pattern]
        subprocess.run(args, check=True)
        for k in range(len(chunk)):
            out.append(read_ppm(pattern % k))
    return out


def read_ppm(path):
    with open(path, "rb") as f:
        data = f.read()
    fields, pos = [], 0
    while len(fields) < 4:   # magic, width, height, maxval (whitespace separated, no comments from convert)
        while data[pos:pos + 1].isspace():
            pos += 1
        end = pos
        while not data[end:end + 1].isspace():
            end += 1
        fields.append(data[pos:end])
        pos = end
    if fields[0] != b"P6" or fields[3] != b"255":
        sys.exit(f"ocr_eval_data: {path}: not an 8-bit binary PPM")
    w, h = int(fields[1]), int(fields[2])
    img = np.frombuffer(data, np.uint8, w * h * 3, pos + 1).reshape(h, w, 3)
    return img[:, :, ::-1].astype(np.float32)   # RGB -> BGR, as cv2.imread gives PaddleOCR


def resize_bilinear(img, out_h, out_w):
    """cv2.resize(..., INTER_LINEAR): half-pixel centres, edge clamping, no antialiasing."""
    h, w = img.shape[:2]

    def coords(n_out, n_in):
        x = (np.arange(n_out) + 0.5) * (n_in / n_out) - 0.5
        x = np.clip(x, 0, n_in - 1)
        x0 = np.floor(x).astype(np.int64)
        x1 = np.minimum(x0 + 1, n_in - 1)
        return x0, x1, (x - x0).astype(np.float32)

    y0, y1, fy = coords(out_h, h)
    x0, x1, fx = coords(out_w, w)
    top = img[y0][:, x0] * (1 - fx)[None, :, None] + img[y0][:, x1] * fx[None, :, None]
    bot = img[y1][:, x0] * (1 - fx)[None, :, None] + img[y1][:, x1] * fx[None, :, None]
    return top * (1 - fy)[:, None, None] + bot * fy[:, None, None]


def resize_norm(img, width):
    """PaddleOCR's resize_norm_img: keep ratio at height 48, normalize, pad to `width` with zeros."""
    h, w = img.shape[:2]
    rw = min(width, int(math.ceil(H * w / h)))
    x = resize_bilinear(img, H, rw).transpose(2, 0, 1) / 255.0
    x = (x - 0.5) / 0.5
    out = np.zeros((3, H, width), np.float32)
    out[:, :, :rw] = x
    return out


def make_set(rng, n, avoid):
    texts, specs, rotated, fonts = [], [], [], []
    while len(texts) < n:
        t = make_text(rng)
        if t in avoid or t in texts:
            continue
        font = FONTS[int(rng.integers(0, len(FONTS)))]
        size = int(rng.integers(26, 44))
        grey = int(rng.integers(0, 80))
        rot = len(texts) % 2   # half the lines upside down (cls label 1 = '180')
        texts.append(t)
        rotated.append(rot)
        fonts.append(font)
        specs.append((t, font, size, grey, rot))
    return texts, specs, rotated, fonts


def write_set(out, texts, specs, rotated, fonts, batch, tmp, seed):
    os.makedirs(os.path.join(out, "cls"), exist_ok=True)
    os.makedirs(os.path.join(out, "rec"), exist_ok=True)
    imgs = render(specs, tmp)
    cls = np.stack([resize_norm(im, CLS_W) for im in imgs])
    # rec sees the line upright (in a full pipeline cls turns it back first)
    rec = np.stack([resize_norm(im[::-1, ::-1] if r else im, REC_W) for im, r in zip(imgs, rotated)])
    for b in range(0, len(texts), batch):
        np.save(os.path.join(out, "cls", f"b{b // batch:03d}.npy"), cls[b:b + batch])
        np.save(os.path.join(out, "rec", f"b{b // batch:03d}.npy"), rec[b:b + batch])
    with open(os.path.join(out, "labels.json"), "w") as f:
        json.dump({"texts": texts, "rotated": rotated, "fonts": fonts, "batch": batch, "seed": seed,
                   "cls_shape": [3, H, CLS_W], "rec_shape": [3, H, REC_W]}, f, indent=1)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--eval", type=int, default=320, help="evaluation samples (default 320)")
    ap.add_argument("--calib", type=int, default=128, help="calibration samples (default 128; 0: none)")
    ap.add_argument("--seed", type=int, default=2026)
    ap.add_argument("--batch", type=int, default=32, help="samples per .npy file (default 32)")
    a = ap.parse_args()
    if a.eval < 1 or a.calib < 0 or a.batch < 1:
        ap.error("--eval and --batch must be >= 1, --calib >= 0")
    for tool, what in ((CONVERT, "imagemagick"), (os.path.join(FONT_DIR, FONTS[0]), "fonts-dejavu-core")):
        if not os.path.exists(tool):
            sys.exit(f"ocr_eval_data: {tool} missing: install Debian's {what} (scripts/bootstrap.sh)")
    ev = make_set(np.random.default_rng(a.seed), a.eval, set())
    cal = make_set(np.random.default_rng(a.seed + 7919), a.calib, set(ev[0])) if a.calib else None
    check_charset(ev[0] + (cal[0] if cal else []))
    with tempfile.TemporaryDirectory() as tmp:
        write_set(os.path.join(a.out, "eval"), *ev, a.batch, tmp, a.seed)
        if cal:
            write_set(os.path.join(a.out, "calib"), *cal, a.batch, tmp, a.seed + 7919)
    print(f"ocr_eval_data: {a.eval} evaluation samples in {a.out}/eval, {a.calib} calibration samples"
          f"{' in ' + a.out + '/calib' if a.calib else ''} (disjoint texts)")


if __name__ == "__main__":
    main()

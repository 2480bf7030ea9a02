#!/usr/bin/env bash
# --calib-images DIR --preprocess SPEC: PaddleOCR-style text lines rendered to PNG and JPEG with
# ImageMagick; kiln's decoding and preprocessing (resize=48x192,keep-ratio,pad,mean=0.5,std=0.5,bgr)
# must give exactly the tensors of scripts/ocr_eval_data.py's NumPy pipeline for the PNGs (same
# calibration data hash, same scales) and calibrate / build / debug precision take the images;
# bad specs and files are clean errors.
set -uo pipefail
KILN=$1
. "$(dirname "$0")/../lib.sh"
CLS=models/ocr/ch_ppocr_mobile_v2.0_cls_infer.onnx
for f in "$CLS" /usr/bin/convert /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf; do
  [ -e "$f" ] || { echo "SKIP: $f missing (run scripts/bootstrap.sh)"; exit 77; }
done
mkdir -p "$T/png" "$T/jpg" "$T/ref" "$T/tmp"
i=0
for t in "kiln 2026" "calibration" "Hello, world" "a" "precision planner budget" "0123456789"; do
  i=$((i + 1))
  /usr/bin/convert -background white -fill "rgb(30,30,30)" -font /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf \
    -pointsize $((24 + 3 * i)) "label:$t" -bordercolor white -border 8x5 -depth 8 -type TrueColor "$T/png/line$i.png" || bad "render $i"
  /usr/bin/convert "$T/png/line$i.png" -quality 95 "$T/jpg/line$i.jpg" || bad "jpeg $i"
done
$PY - "$T" <<'PY' && ok "NumPy reference" || bad "reference"
import importlib.util, subprocess, sys, os, numpy as np
t = sys.argv[1]
spec = importlib.util.spec_from_file_location("ocr", "scripts/ocr_eval_data.py")
ocr = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ocr)
imgs = []
for k in range(1, 7):
    subprocess.run(["/usr/bin/convert", f"{t}/png/line{k}.png", "-depth", "8", f"{t}/l.ppm"], check=True)
    imgs.append(ocr.resize_norm(ocr.read_ppm(f"{t}/l.ppm"), ocr.CLS_W))   # BGR, keep ratio, (x/255-0.5)/0.5, pad
np.save(f"{t}/ref/lines.npy", np.stack(imgs).astype(np.float32))
PY
P="resize=48x192,keep-ratio,pad,mean=0.5,std=0.5,bgr"
export TMPDIR=$T/tmp   # where --calib-images puts its temporary .npy (checked empty at the end)
"$KILN" calibrate "$CLS" --calib "$T/ref" --calib-method minmax --json > "$T/ref.json" 2> "$T/err.txt" || bad "calibrate npy: $(cat "$T/err.txt")"
"$KILN" calibrate "$CLS" --calib-images "$T/png" --preprocess "$P" --calib-method minmax --json > "$T/png.json" 2> "$T/err.txt" \
  && ok "calibrate --calib-images" || bad "calibrate images: $(cat "$T/err.txt")"
$PY - "$T" <<'PY' > "$T/py.txt" 2>&1 && ok "PNG lines: the same tensors as the NumPy pipeline (data hash, scales)" || bad "$(cat "$T/py.txt")"
import json, sys
t = sys.argv[1]
a, b = (json.load(open(f"{t}/{n}.json")) for n in ("ref", "png"))
assert a["data_hash"] == b["data_hash"], (a["data_hash"], b["data_hash"])
assert a["samples"] == b["samples"] == 6
PY
"$KILN" calibrate "$CLS" --calib-images "$T/jpg" --preprocess "$P" --calib-method minmax --json > "$T/jpg.json" 2> "$T/err.txt" \
  && ok "JPEG lines" || bad "calibrate jpeg: $(cat "$T/err.txt")"
$PY - "$T" <<'PY' > "$T/py.txt" 2>&1 && ok "JPEG scales close to the PNG ones" || bad "$(cat "$T/py.txt")"
import json, sys
t = sys.argv[1]
a, b = (json.load(open(f"{t}/{n}.json")) for n in ("png", "jpg"))
sa = {x["name"]: x["scale"] for x in a["tensors"]}
sb = {x["name"]: x["scale"] for x in b["tensors"]}
assert sa.keys() == sb.keys()
worst = max(abs(sa[k] - sb[k]) / max(sa[k], 1e-12) for k in sa)
print("worst relative scale difference", worst)
assert worst < 0.25, worst
PY
expect_ok "build int8 from images" "$KILN" build "$CLS" -o "$T/c.kiln" --shapes x:6x3x48x192 --precision int8 --precision-fallback \
  --calib-images "$T/png" --preprocess "$P"
[ -z "$(ls -A "$T/tmp")" ] && ok "temporary files removed" || bad "temporary files left: $(ls "$T/tmp")"
expect_rc "spec needed" 2 "go together" "$KILN" calibrate "$CLS" --calib-images "$T/png"
expect_rc "bad spec" 2 "is not one of" "$KILN" calibrate "$CLS" --calib-images "$T/png" --preprocess "resize=48x192,wobble"
expect_rc "keep-ratio without pad" 2 "go together" "$KILN" calibrate "$CLS" --calib-images "$T/png" --preprocess "resize=48x192,keep-ratio"
expect_rc "both sources" 2 "exclude each other" "$KILN" calibrate "$CLS" --calib "$T/ref" --calib-images "$T/png" --preprocess "$P"
mkdir -p "$T/badimg" && echo "not an image" > "$T/badimg/x.png"
expect_rc "corrupt image" 2 "neither PNG nor JPEG" "$KILN" calibrate "$CLS" --calib-images "$T/badimg" --preprocess "$P"
expect_rc "no images" 2 "holds no .png" "$KILN" calibrate "$CLS" --calib-images "$T/ref" --preprocess "$P"
expect_rc "build: corrupt image" 1 "neither PNG nor JPEG" "$KILN" build "$CLS" -o "$T/x.kiln" --precision int8 --calib-images "$T/badimg" --preprocess "$P"
finish "calib images"

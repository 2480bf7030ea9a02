#!/usr/bin/env bash
# The real-task accuracy check on a small subset (CI): 48 rendered text lines, PaddleOCR cls and rec
# through kiln (scripts/ocr_eval_data.py, scripts/ocr_accuracy.py). FP32 must stay above floors
# measured on this subset with margin (measured: 97.9% cls, 100% rec exact and char on these 48 lines;
# 99.4% / 99.7% / 99.8% on the full 320-line set); a deliberately broken classifier (its logits
# negated) must show a large drop, so the metric can fail; kiln verify on the rec data agrees per step.
set -uo pipefail
KILN=$1
. "$(dirname "$0")/../lib.sh"
CLS=models/ocr/ch_ppocr_mobile_v2.0_cls_infer.onnx
REC=models/ocr/ch_PP-OCRv4_rec_infer.onnx
for f in "$CLS" "$REC" /usr/bin/convert /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf; do
  [ -e "$f" ] || { echo "SKIP: $f missing (run scripts/bootstrap.sh)"; exit 77; }
done

if scripts/ocr_eval_data.py --out "$T/ocr" --eval 48 --calib 16 --batch 24 > "$T/gen.txt" 2>&1; then ok "render + preprocess"
else bad "ocr_eval_data: $(tail -3 "$T/gen.txt")"; fi
$PY - "$T/ocr" <<'PY' && ok "set layout, disjoint calibration texts" || bad "set layout"
import json, sys, os, numpy as np
d = sys.argv[1]
ev, ca = (json.load(open(os.path.join(d, s, "labels.json"))) for s in ("eval", "calib"))
assert len(ev["texts"]) == 48 and len(ca["texts"]) == 16 and not set(ev["texts"]) & set(ca["texts"])
assert sum(ev["rotated"]) == 24
c, r = np.load(os.path.join(d, "eval/cls/b000.npy")), np.load(os.path.join(d, "eval/rec/b001.npy"))
assert c.shape == (24, 3, 48, 192) and r.shape == (24, 3, 48, 320) and c.dtype == np.float32
assert -1.0001 <= r.min() and r.max() <= 1.0001 and (r[:, :, :, -1] == 0).mean() > 0.5   # normalized, zero padded
PY

# a broken classifier: its logits negated before the final Softmax, which swaps the two classes
$PY - "$CLS" "$T/cls_broken.onnx" <<'PY' || bad "broken cls model"
import sys, onnx
from onnx import helper
m = onnx.load(sys.argv[1])
sm = [n for n in m.graph.node if n.op_type == "Softmax"][-1]
pos = list(m.graph.node).index(sm)
m.graph.node.insert(pos, helper.make_node("Neg", [sm.input[0]], ["broken_logits"], name="broken_Neg"))
sm.input[0] = "broken_logits"
onnx.save(m, sys.argv[2])
PY

if scripts/ocr_accuracy.py --data "$T/ocr" --kiln "$KILN" --cls "fp32=$CLS" --cls "broken=$T/cls_broken.onnx" \
     --rec "fp32=$REC" --json --min-cls 0.90 --min-rec-exact 0.90 --min-rec-char 0.97 > "$T/acc.json" 2> "$T/acc.err"; then
  ok "FP32 above the floors (cls >= 90%, rec exact >= 90%, rec char >= 97%)"
else bad "ocr_accuracy: $(cat "$T/acc.err" | tail -3)"; fi
$PY -c "
import json; d = json.load(open('$T/acc.json'))
c = {r['name']: r for r in d['cls']}
assert d['samples'] == 48 and c['fp32']['accuracy'] - c['broken']['accuracy'] > 0.5, d
print('cls fp32 %.4f broken %.4f, rec exact %.4f char %.4f' % (c['fp32']['accuracy'], c['broken']['accuracy'], d['rec'][0]['exact'], d['rec'][0]['char']))
" > "$T/py.txt" 2>&1 && ok "broken classifier shows the drop ($(cat "$T/py.txt"))" || bad "drop: $(cat "$T/py.txt")"
if scripts/ocr_accuracy.py --data "$T/ocr" --kiln "$KILN" --cls "broken=$T/cls_broken.onnx" --rec "fp32=$REC" --limit 24 --batch 16 \
     --min-cls 0.95 > /dev/null 2> "$T/acc.err"; then bad "floor not enforced"
else grep -q "FAIL cls accuracy" "$T/acc.err" && ok "a floor missed exits 1" || bad "floor message: $(cat "$T/acc.err")"; fi

# --device cuda through tests/fakedev ($2: a device module on host memory; the convolutions fall back to the CPU):
# the same accuracy as on the CPU
if [ -n "${2:-}" ] && [ -f "$2" ]; then
  if KILN_CUDA_MODULE="$2" scripts/ocr_accuracy.py --data "$T/ocr" --kiln "$KILN" --cls "fp32=$CLS" --only cls --device cuda \
       --batch 100000 --json > "$T/accd.json" 2> "$T/accd.err" &&
     $PY -c "
import json; d, c = json.load(open('$T/accd.json')), json.load(open('$T/acc.json'))
assert d['device'] == 'cuda' and d['cls'][0]['accuracy'] == [r for r in c['cls'] if r['name'] == 'fp32'][0]['accuracy'], d
" > "$T/py.txt" 2>&1; then ok "--device cuda (fake device): the CPU's cls accuracy"
  else bad "--device cuda: $(tail -3 "$T/accd.err") $(cat "$T/py.txt")"; fi
fi

if "$KILN" verify "$REC" --reference "$REC" --data "$T/ocr/eval/rec" --samples 1 --budget 'top1>=99%' \
     --budget 'cosine>=0.9999' > "$T/v.txt" 2>&1; then ok "kiln verify rec on the OCR data"
else bad "verify rec: $(tail -5 "$T/v.txt")"; fi
finish

#!/usr/bin/env bash
# Engine sizes per precision on ResNet-50 (issue 8: FP16 <= 0.52x FP32, INT8 <= 0.27x) and outputs
# against FP32 (cosine, top-1), with a little calibration data at 64x64 so the test stays quick.
# Sizes are checked against the model file (its fp32 weights): the fp32 engine also holds packed
# (Winograd / GEMM-panel) copies, which would make any ratio to it look better than it is; both
# ratios are printed. INT8 keeps the first conv and the fc in fp32 by default (the fc alone is
# 8.2 MB of fp32: 0.314x, bound 0.32); with the fc lowered too (--layer-precision fc_Gemm:int8) it
# meets the issue's 0.27x. NVFP4 (0.5625 B per weight) keeps them in fp32 too (0.21x); with the fc
# lowered (--layer-precision fc_Gemm:nvfp4) it meets the issue's 0.16x. FP8 reuses the int8
# calibration cache (its activation scales are the calibrated amax / 448).
set -uo pipefail
KILN=$1
. "$(dirname "$0")/../lib.sh"
M=models/resnet50.onnx
[ -f "$M" ] || { echo "SKIP: $M missing (run scripts/bootstrap.sh)"; exit 77; }
mkdir -p "$T/cal"
$PY -c "
import numpy as np
rng = np.random.default_rng(9)
np.save('$T/cal/c.npy', rng.standard_normal((4, 3, 64, 64)).astype(np.float32))
np.save('$T/x.npy', rng.standard_normal((1, 3, 64, 64)).astype(np.float32))" || exit 1
fails=0
for p in fp32 fp16 bf16 int8 int8fc fp8 nvfp4 nvfp4fc; do
  extra=()
  case $p in
    int8) extra=(--calib "$T/cal" --calib-method percentile --calib-cache "$T/c.cache") ;;
    int8fc) extra=(--calib-cache "$T/c.cache" --calib-method percentile --layer-precision 'fc_Gemm:int8') ;;
    fp8) extra=(--calib-cache "$T/c.cache" --calib-method percentile) ;;
    nvfp4fc) extra=(--layer-precision 'fc_Gemm:nvfp4') ;;
  esac
  "$KILN" build "$M" -o "$T/$p.kiln" --precision ${p%fc} --no-tactics "${extra[@]}" > "$T/$p.log" 2>&1 || { echo "FAIL build $p: $(tail -1 "$T/$p.log")"; fails=1; continue; }
  "$KILN" run "$T/$p.kiln" --input "input=$T/x.npy" --output-dir "$T/o_$p" > /dev/null 2>&1 || { echo "FAIL run $p"; fails=1; }
done
[ $fails = 0 ] || exit 1
$PY - "$T" <<'PY'
import numpy as np, os, sys
t = sys.argv[1]
r = np.load(f"{t}/o_fp32/logits.npy").astype(np.float64).ravel()
limits = {"fp16": (0.52, 0.99999), "bf16": (0.52, 0.9999), "int8": (0.32, 0.999), "int8fc": (0.27, 0.999),
          "fp8": (0.32, 0.995), "nvfp4": (0.22, 0.98), "nvfp4fc": (0.16, 0.98)}
bad = 0
for p, (size_max, cos_min) in limits.items():
    a = np.load(f"{t}/o_{p}/logits.npy").astype(np.float64).ravel()
    ratio = os.path.getsize(f"{t}/{p}.kiln") / os.path.getsize("models/resnet50.onnx")
    vs_engine = os.path.getsize(f"{t}/{p}.kiln") / os.path.getsize(f"{t}/fp32.kiln")
    cos = a @ r / np.linalg.norm(a) / np.linalg.norm(r)
    ok = ratio <= size_max and cos >= cos_min and a.argmax() == r.argmax()
    bad += not ok
    print(f"{'pass' if ok else 'FAIL'} {p}: engine {ratio:.3f}x the fp32 model (<= {size_max}), {vs_engine:.3f}x the fp32 engine, cosine {cos:.6f} (>= {cos_min}), "
          f"max |diff| / max |ref| {abs(a - r).max() / abs(r).max():.4g}, top-1 {'same' if a.argmax() == r.argmax() else 'differs'}")
sys.exit(1 if bad else 0)
PY

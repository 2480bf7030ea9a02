#!/usr/bin/env bash
# Integer layers the fast INT8 kernels leave to the reference kernel (tests/precision/gen_int8_fallback.py: QGemm
# with a bias of [M, N], [1] or [M, 1], per-row a_scale / a_zero_point, a 3-D QLinearConv, the same with the
# refusing operand a graph input) and QGemm with transA: each builds into an engine file that runs, and its output
# equals the unoptimized model's (kiln's reference kernels) byte for byte. An engine used to store such a layer's
# weights only in the fast kernel's packed layout, which the reference cannot read: every run failed with "input N
# is stored only in a packed layout that does not fit this layer".
set -uo pipefail
KILN=$1
. "$(dirname "$0")/../lib.sh"
$PY tests/precision/gen_int8_fallback.py "$T" || { echo "FAIL: generating the models"; exit 1; }
while read -r name inputs; do
  [ -z "$name" ] && continue
  ins=()
  for i in ${inputs//,/ }; do ins+=(--input "$i=$T/$name.in/$i.npy"); done
  if ! "$KILN" build "$T/$name.onnx" -o "$T/$name.kiln" > "$T/b.txt" 2>&1; then
    bad "$name: build: $(tail -1 "$T/b.txt")"; continue
  fi
  if ! "$KILN" run "$T/$name.kiln" "${ins[@]}" --output-dir "$T/$name.eng" > "$T/r.txt" 2>&1; then
    bad "$name: engine run: $(tail -1 "$T/r.txt")"; continue
  fi
  "$KILN" run "$T/$name.onnx" --no-optimize "${ins[@]}" --output-dir "$T/$name.ref" > /dev/null 2>&1 \
    || { bad "$name: reference run"; continue; }
  $PY -c "
import numpy as np, sys
a, b = np.load('$T/$name.eng/y.npy'), np.load('$T/$name.ref/y.npy')
sys.exit(0 if a.dtype == b.dtype and a.shape == b.shape and (a == b).all() else 1)" \
    && ok "$name: the engine's output equals the reference's" || bad "$name: outputs differ"
done < "$T/list.txt"

# a host without AVX2 (KILN_MAX_CPU_ISA=none) adds QLinearConvAdd's residual on the reference, whose scalar
# QLinearConv could not read the packed weights an int8 engine stores there either: tiny_cnn int8 built and run so
# must match the same engine run with every ISA (its float layers may round differently)
M=models/tiny_cnn.onnx
if [ -f "$M" ]; then
  mkdir -p "$T/cal"
  $PY -c "
import numpy as np
r = np.random.default_rng(0)
for i in range(4): np.save('$T/cal/s%d.npy' % i, r.standard_normal((1, 3, 32, 32)).astype(np.float32))"
  if KILN_MAX_CPU_ISA=none "$KILN" build "$M" -o "$T/cnn.kiln" --precision int8 --calib "$T/cal" > "$T/b.txt" 2>&1 &&
     KILN_MAX_CPU_ISA=none "$KILN" run "$T/cnn.kiln" --input "input=$T/cal/s0.npy" --output-dir "$T/none" > "$T/r.txt" 2>&1 &&
     "$KILN" run "$T/cnn.kiln" --input "input=$T/cal/s0.npy" --output-dir "$T/all" > /dev/null 2>&1 &&
     $PY -c "
import numpy as np, sys
a, b = np.load('$T/none/logits.npy'), np.load('$T/all/logits.npy')
sys.exit(0 if np.abs(a - b).max() <= 1e-4 * max(1.0, np.abs(b).max()) else 1)"; then
    ok "tiny_cnn int8 without SIMD runs its QLinearConvAdd layers"
  else
    bad "tiny_cnn int8 without SIMD: $(tail -1 "$T/b.txt") $(tail -1 "$T/r.txt")"
  fi
fi
finish "int8 fallback layers"

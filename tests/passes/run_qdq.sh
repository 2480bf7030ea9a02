#!/usr/bin/env bash
# fuse-qdq on generated QDQ models (tests/passes/gen_qdq.py): each built engine must hold the
# expected integer layers and no DQ -> Conv/MatMul -> Q left (ops that remain / are gone / at most
# N DequantizeLinear layers, read with `kiln inspect --json`), and its output must match the
# unoptimized model (run as fake quantization by the reference kernels) within one quantization
# step of the output: the fused layer rounds its int32 bias once and requantizes the exact
# integer accumulator with one float multiply, where the reference adds a float bias to a float
# convolution, so a value lying within float error of a rounding midpoint may round the other way.
set -uo pipefail
KILN=$1
. "$(dirname "$0")/../lib.sh"
$PY tests/passes/gen_qdq.py "$T" || { echo "FAIL: generating QDQ models"; exit 1; }
while IFS='|' read -r name have gone shapes maxdq step; do
  [ -z "$name" ] && continue
  args=()
  for s in ${shapes//,/ }; do args+=(--shape "$s"); done
  $PY scripts/make_inputs.py "$T/$name.onnx" "${args[@]}" --out "$T/$name.in" --seed 2 > /dev/null
  ins=()
  for f in "$T/$name.in"/*.npy; do ins+=(--input "$(basename "$f" .npy)=$f"); done
  ok=1
  "$KILN" build "$T/$name.onnx" -o "$T/$name.kiln" > "$T/$name.build" 2>&1 || { ok=0; echo "FAIL $name: build: $(tail -1 "$T/$name.build")"; }
  "$KILN" run "$T/$name.kiln" "${ins[@]}" --output-dir "$T/$name.opt" > /dev/null 2>&1 || { ok=0; echo "FAIL $name: run engine"; }
  "$KILN" run "$T/$name.onnx" --no-optimize "${ins[@]}" --output-dir "$T/$name.ref" > /dev/null 2>&1 || { ok=0; echo "FAIL $name: run reference"; }
  spec=""
  for s in ${shapes//,/ }; do spec+="${spec:+,}${s/=/:}"; done
  [ $ok = 1 ] && { "$KILN" inspect "$T/$name.kiln" --json --shapes "$spec" > "$T/$name.json" 2>&1 || { ok=0; echo "FAIL $name: inspect"; }; }
  if [ $ok = 1 ]; then
    $PY - "$T" "$name" "$have" "$gone" "$maxdq" "$step" <<'PYEOF' || ok=0
import json, sys
import numpy as np
t, name, have, gone, maxdq, step = sys.argv[1:]
ops = [l["op"] for l in json.load(open(f"{t}/{name}.json"))["layers"]]
bad = []
for h in filter(None, have.split(",")):
    op, _, n = h.partition(":")
    if (ops.count(op) != int(n)) if n else op not in ops:
        bad.append(f"want {h}, have {ops.count(op)}")
bad += [f"still has {o}" for o in filter(None, gone.split(",")) if o in ops]
if ops.count("DequantizeLinear") > int(maxdq):
    bad.append(f"{ops.count('DequantizeLinear')} DequantizeLinear layers (at most {maxdq})")
a, b = np.load(f"{t}/{name}.opt/y.npy"), np.load(f"{t}/{name}.ref/y.npy")
d = np.abs(a.astype(np.float64) - b)
if a.shape != b.shape or d.max() > float(step) * (1 + 1e-4):
    bad.append(f"outputs differ by {d.max():.6g} (one step {float(step):.6g})")
if bad:
    print(f"FAIL {name}: {'; '.join(bad)}; layers: {ops}")
    sys.exit(1)
print(f"{name}: {', '.join(ops)}; {100 * (d == 0).mean():.2f}% of outputs identical, max diff {d.max() / float(step):.3g} steps")
PYEOF
  fi
  if [ $ok = 1 ]; then passes=$((passes + 1)); echo "pass $name"; else fails=$((fails + 1)); fi
done < "$T/expect.txt"
echo "$passes passed, $fails failed"
[ "$fails" -eq 0 ] && [ "$passes" -gt 0 ]

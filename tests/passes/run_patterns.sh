#!/usr/bin/env bash
# Each pattern model must fuse as expected (ops that remain / ops that are gone, read from the
# built engine with `kiln inspect --json`) and give the same outputs as the unoptimized model.
set -uo pipefail
KILN=$1
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$ROOT"
PY=/usr/bin/python3
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
$PY tests/passes/gen_patterns.py "$T" || { echo "FAIL: generating pattern models"; exit 1; }
fails=0
passes=0
while IFS='|' read -r name have gone shapes; do
  [ -z "$name" ] && continue
  args=()
  for s in ${shapes//,/ }; do args+=(--shape "$s"); done
  $PY scripts/make_inputs.py "$T/$name.onnx" "${args[@]}" --out "$T/$name.in" --seed 2 > /dev/null
  ins=()
  for f in "$T/$name.in"/*.npy; do ins+=(--input "$(basename "$f" .npy)=$f"); done
  # boolean masks: make_inputs writes ones; make some false so the mask matters
  if [ -f "$T/$name.in/mask.npy" ]; then
    $PY -c "import numpy as np; m=np.load('$T/$name.in/mask.npy'); m[...,-2:]=False; np.save('$T/$name.in/mask.npy', m)"
  fi
  ok=1
  "$KILN" build "$T/$name.onnx" -o "$T/$name.kiln" > "$T/$name.build" 2>&1 || { ok=0; echo "FAIL $name: build: $(tail -1 "$T/$name.build")"; }
  "$KILN" run "$T/$name.kiln" "${ins[@]}" --output-dir "$T/$name.opt" > /dev/null 2>&1 || { ok=0; echo "FAIL $name: run engine"; }
  "$KILN" run "$T/$name.onnx" --no-optimize "${ins[@]}" --output-dir "$T/$name.ref" > /dev/null 2>&1 || { ok=0; echo "FAIL $name: run reference"; }
  if [ $ok = 1 ]; then
    $PY scripts/compare_npy.py "$T/$name.opt" "$T/$name.ref" --rtol 1e-4 --atol 1e-5 > "$T/$name.cmp" 2>&1 || { ok=0; echo "FAIL $name: outputs differ"; cat "$T/$name.cmp"; }
    spec=""
    for s in ${shapes//,/ }; do spec+="${spec:+,}${s/=/:}"; done
    "$KILN" inspect "$T/$name.kiln" --json --shapes "$spec" > "$T/$name.json" 2>&1 || { ok=0; echo "FAIL $name: inspect"; }
    $PY - "$T/$name.json" "$have" "$gone" <<'PYEOF' || ok=0
import json, sys
d = json.load(open(sys.argv[1]))
ops = [l["op"] for l in d["layers"]]
have = [o for o in sys.argv[2].split(",") if o]
gone = [o for o in sys.argv[3].split(",") if o]
bad = [f"missing {o}" for o in have if o not in ops] + [f"still has {o}" for o in gone if o in ops]
if bad:
    print(f"FAIL {sys.argv[1]}: {', '.join(bad)}; layers: {ops}")
    sys.exit(1)
PYEOF
  fi
  if [ $ok = 1 ]; then passes=$((passes + 1)); echo "pass $name"; else fails=$((fails + 1)); fi
done < "$T/expect.txt"
echo "$passes passed, $fails failed"
[ "$fails" -eq 0 ]

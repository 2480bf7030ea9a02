#!/usr/bin/env bash
# The precision planner end to end (kiln build --precision auto, kiln debug precision) on a
# generated MLP with two layers made deliberately sensitive to int8 (tests/precision/gen_sensitive.py):
# the sensitive layers are kept out of int8, the others lowered; the engine meets the budget when
# verified independently with kiln verify on other data; inspect shows requested "auto" and the
# realized precision; the speed objective lowers only layers whose kernel measured faster; the
# debugger's minimal set is exactly the sensitive layers and its ready --layer-precision line builds
# an engine meeting the budget; budgets that cannot be met exit 3; usage errors are clean.
set -uo pipefail
KILN=$1
. "$(dirname "$0")/../lib.sh"
$PY tests/precision/gen_sensitive.py "$T" || { echo "FAIL gen_sensitive"; exit 1; }
M=$T/sensitive.onnx
check() {   # check NAME PYTHON (d = JSON of $T/j.json)
  if $PY - "$T" > "$T/py.txt" 2>&1 <<PYEOF
import json, sys
d = json.load(open(sys.argv[1] + "/j.json"))
$2
PYEOF
  then ok "$1"; else bad "$1: $(tail -3 "$T/py.txt")"; fi
}

expect_ok "help" "$KILN" build --help
grep -q -- "--accuracy-budget" "$T/out.txt" && grep -q -- "--allow" "$T/out.txt" && ok "build help lists auto" || bad "build help"
expect_ok "debug help" "$KILN" debug precision --help

# size objective: every layer the budget allows, int8 where it holds alone, else fp16
expect_ok "auto (size)" "$KILN" build "$M" -o "$T/a.kiln" --precision auto --allow int8,fp16 --accuracy-budget 'cosine>=0.99' \
  --calib "$T/cal" --auto-objective size
cp "$T/out.txt" "$T/auto.txt"
grep -q "^auto: budget cosine>=0.99 reached: 0\.99" "$T/auto.txt" && ok "prints the budget reached" || bad "no budget line: $(cat "$T/auto.txt")"
grep -q "estimated speed-up" "$T/auto.txt" && ok "prints the speed-up estimate" || bad "no speed-up"
"$KILN" inspect "$T/a.kiln" --json --shapes x:8x64 > "$T/j.json" 2>&1 || bad "inspect"
check "sensitive layers kept out of int8, the others lowered, requests recorded as auto" '
L = {l["name"]: l for l in d["layers"]}
for n in ("L1", "L2"):
    assert L[n]["requested_precision"] == "auto" and L[n]["precision"] != "int8", L[n]
for n in ("L0", "L3", "L4"):
    assert L[n]["requested_precision"] == "auto" and L[n]["precision"] == "int8", L[n]
assert all(l["requested_precision"] in (None, "auto") for l in d["layers"])'
expect_ok "verified independently on other data" "$KILN" verify "$T/a.kiln" --reference "$M" --data "$T/val" --budget 'cosine>=0.99'

# int8 only: the sensitive layers stay fp32
expect_ok "auto int8 only" "$KILN" build "$M" -o "$T/b.kiln" --precision auto --allow int8 --accuracy-budget 'snr>=20db' \
  --calib "$T/cal" --auto-objective size
grep -q "auto: L1 (MatMul) kept in fp32: misses the budget alone" "$T/out.txt" && grep -q "auto: L2 (MatMul) kept in fp32" "$T/out.txt" \
  && ok "says why a layer is kept" || bad "kept reasons: $(cat "$T/out.txt")"
expect_ok "int8 plan verified" "$KILN" verify "$T/b.kiln" --reference "$M" --data "$T/val" --budget 'snr>=20db'

# speed objective: a layer is lowered only where its kernel measured faster
expect_ok "auto (speed)" "$KILN" build "$M" -o "$T/c.kiln" --precision auto --allow int8,fp16 --accuracy-budget 'cosine>=0.99' --calib "$T/cal"
$PY - "$T/out.txt" > "$T/py.txt" 2>&1 <<'PY' && ok "speed: every lowered layer measured faster" || bad "speed: $(cat "$T/py.txt")"
import re, sys
lines = [l for l in open(sys.argv[1]) if " -> " in l and "kernel" in l]
for l in lines:
    a, b = map(float, re.search(r"kernel ([0-9.]+) -> ([0-9.]+) ms", l).groups())
    assert b <= a, l
assert not any(re.search(r"auto: L[12] \(MatMul\) -> int8", l) for l in lines), lines
print(len(lines), "lowered")
PY
expect_ok "speed plan verified" "$KILN" verify "$T/c.kiln" --reference "$M" --data "$T/val" --budget 'cosine>=0.99'

# kiln debug precision: the minimal set is the sensitive layers; the ready line reproduces it
"$KILN" debug precision "$M" --precision int8 --budget 'cosine>=0.99' --calib "$T/cal" --json > "$T/j.json" 2> "$T/err.txt" \
  && ok "debug precision" || bad "debug precision: $(cat "$T/err.txt")"
check "minimal set = the sensitive layers" '
assert d["met"] and sorted(d["keep_layers"]) == ["L1", "L2"], d
assert d["value_lowered"] < 0.99 <= d["value_final"], d
assert "L1:fp32" in d["layer_precision"] and "L2:fp32" in d["layer_precision"]
assert all(l["realizable"] for l in d["layers"])'
"$KILN" debug precision "$M" --precision int8 --budget 'cosine>=0.99' --calib "$T/cal" > "$T/text.txt" 2>&1 || bad "debug text"
line=$(tail -1 "$T/text.txt")
grep -q "^2 of 5 layers must stay in fp32" "$T/text.txt" && ok "text: the set" || bad "text: $(cat "$T/text.txt")"
case "$line" in --precision\ int8*) ok "text: ready line";; *) bad "ready line: $line";; esac
eval "args=($line)"
expect_ok "build with the ready line" "$KILN" build "$M" -o "$T/d.kiln" "${args[@]}" --calib "$T/cal"
expect_ok "ready line meets the budget" "$KILN" verify "$T/d.kiln" --reference "$M" --data "$T/val" --budget 'cosine>=0.99'

# fp8 too: its activation scales come from the one calibration, so every layer is realizable in fp8
"$KILN" debug precision "$M" --precision fp8 --keep fp16 --budget 'cosine>=0.999' --calib "$T/cal" --json > "$T/j.json" \
  2> "$T/err.txt" && ok "debug precision fp8" || bad "debug precision fp8: $(cat "$T/err.txt")"
check "fp8: every layer realizable, the set meets the budget" '
assert d["met"] and d["value_final"] >= 0.999 and len(d["layers"]) == 5, d
assert all(l["realizable"] for l in d["layers"]), d["layers"]'

# budgets that cannot be met: exit 3 with a message
expect_rc "auto: unmeetable budget exits 3" 3 "cannot be met" "$KILN" build "$M" -o "$T/x.kiln" --precision auto --allow int8 \
  --accuracy-budget 'cosine>=0.99' --calib "$T/cal" --layer-precision 'L2:int8'
[ -e "$T/x.kiln" ] && bad "unmet budget wrote an engine" || ok "unmet budget wrote nothing"
expect_rc "debug: unmeetable budget exits 3" 3 "missed even with every layer in fp32" "$KILN" debug precision "$M" --precision int8 \
  --budget 'cosine>=0.99' --calib "$T/cal" --layer-precision 'L1:int8'

# usage errors
expect_rc "auto needs a budget" 2 "needs --accuracy-budget" "$KILN" build "$M" -o "$T/x.kiln" --precision auto --calib "$T/cal"
expect_rc "budget needs auto" 2 "go with --precision auto" "$KILN" build "$M" -o "$T/x.kiln" --accuracy-budget 'cosine>=0.9'
expect_rc "bad budget" 1 "cosine" "$KILN" build "$M" -o "$T/x.kiln" --precision auto --accuracy-budget 'cosine>=2' --calib "$T/cal"
expect_rc "allow fp32" 1 "want lower precisions" "$KILN" build "$M" -o "$T/x.kiln" --precision auto --allow fp32 --accuracy-budget 'cosine>=0.9' --calib "$T/cal"
expect_rc "allow an unknown precision" 1 "int3" "$KILN" build "$M" -o "$T/x.kiln" --precision auto --allow int3 --accuracy-budget 'cosine>=0.9' --calib "$T/cal"
# the low-bit formats plan like the others: the sensitive layers stay out, the plan meets the budget
expect_ok "auto fp8/nvfp4 (size)" "$KILN" build "$M" -o "$T/e.kiln" --precision auto --allow fp8,nvfp4 --accuracy-budget 'cosine>=0.99' \
  --calib "$T/cal" --auto-objective size
"$KILN" inspect "$T/e.kiln" --json --shapes x:8x64 > "$T/j.json" 2>&1 || bad "inspect fp8/nvfp4 plan"
check "fp8/nvfp4 plan: some layers lowered to a low-bit format, every request auto" '
L = {l["name"]: l for l in d["layers"]}
assert any(L[n]["precision"] in ("fp8", "nvfp4") for n in ("L0", "L3", "L4")), L
assert all(l["requested_precision"] in (None, "auto") for l in d["layers"])'
expect_ok "fp8/nvfp4 plan verified" "$KILN" verify "$T/e.kiln" --reference "$M" --data "$T/val" --budget 'cosine>=0.99'
expect_rc "int8 needs calibration" 1 "need calibration data" "$KILN" build "$M" -o "$T/x.kiln" --precision auto --allow int8 --accuracy-budget 'cosine>=0.9' --val "$T/val"
expect_rc "no data" 1 "needs data" "$KILN" build "$M" -o "$T/x.kiln" --precision auto --allow fp16 --accuracy-budget 'cosine>=0.9'
expect_rc "bad objective" 2 "want speed or size" "$KILN" build "$M" -o "$T/x.kiln" --precision auto --auto-objective fast
expect_rc "debug: fp32 is not lower" 1 "want fp16, bf16, int8, fp8" "$KILN" debug precision "$M" --precision fp32 --budget 'cosine>=0.9' --calib "$T/cal"
expect_rc "debug: keep = precision" 1 "want a precision other than" "$KILN" debug precision "$M" --precision fp16 --keep fp16 --budget 'cosine>=0.9' --val "$T/val"
expect_rc "debug: needs budget" 2 "need MODEL, --precision and --budget" "$KILN" debug precision "$M" --precision int8
expect_rc "debug: no subcommand" 2 "want a subcommand" "$KILN" debug
finish "auto precision"

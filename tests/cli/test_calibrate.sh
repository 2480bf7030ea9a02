#!/usr/bin/env bash
# kiln calibrate end to end: calibration data generated with NumPy for tiny_cnn, every method, JSON,
# the cache (written, reused without data, byte-identical under shuffled file names, stale/foreign
# refused and left untouched), quiet in pipes, usage errors.
set -uo pipefail
KILN=$1
. "$(dirname "$0")/../lib.sh"
expect_ok() { local name=$1; shift; if "$@" > "$T/out.txt" 2> "$T/stderr.txt"; then ok "$name"; else bad "$name: $(tail -2 "$T/stderr.txt")"; fi; }

M=models/tiny_cnn.onnx
[ -f "$M" ] || { echo "SKIP: $M missing (run scripts/bootstrap.sh)"; exit 77; }
mkdir -p "$T/a" "$T/b"
$PY - "$T" <<'PY' || { echo "FAIL numpy data"; exit 1; }
import numpy as np, sys, os
t = sys.argv[1]
rng = np.random.default_rng(7)
names = [f"x{i:02d}.npy" for i in range(12)]
shuffled = list(reversed(names))
for i, n in enumerate(names):
    a = (rng.standard_normal((1 + i % 3, 3, 24, 24)) * (1 + i)).astype(np.float32)
    np.save(os.path.join(t, "a", n), a)
    np.save(os.path.join(t, "b", "renamed_" + shuffled[i]), a)
PY

expect_ok "help" "$KILN" calibrate --help
grep -q -- "--calib-method" "$T/out.txt" && ok "help lists options" || bad "help text"
for m in entropy minmax percentile percentile:99.9 mse; do
  want=$m; [ "$m" = percentile ] && want=percentile:99.99
  expect_ok "method $m" "$KILN" calibrate "$M" --calib "$T/a" --calib-method "$m" --json
  $PY -c "
import json,sys; d=json.load(open('$T/out.txt'))
assert d['samples'] == 24 and not d['from_cache'], d
assert d['tensors'][0]['name'] == 'input'
for t in d['tensors']:
    assert t['scale'] > 0 and t['threshold'] <= t['amax'] * 1.0001 + 1e-30, t
assert d['method'] == '$want', d['method']" > "$T/m.txt" 2>&1 && ok "json $m" || bad "json $m: $(cat "$T/m.txt")"
  [ -s "$T/stderr.txt" ] && bad "quiet in a pipe ($m): $(head -c 200 "$T/stderr.txt")" || ok "quiet in a pipe ($m)"
done

# without --calib-method: mse (docs/CALIBRATION.md says why)
expect_ok "default method" "$KILN" calibrate "$M" --calib "$T/a" --json
$PY -c "import json; d=json.load(open('$T/out.txt')); assert d['method'] == 'mse', d['method']" > "$T/m.txt" 2>&1 \
  && ok "default method is mse" || bad "default method: $(cat "$T/m.txt")"

expect_ok "write cache" "$KILN" calibrate "$M" --calib "$T/a" --calib-cache "$T/a.cache"
head -1 "$T/a.cache" | grep -q "^# kiln calibration cache" && ok "cache header" || bad "cache header"
expect_ok "shuffled names" "$KILN" calibrate "$M" --calib "$T/b" --calib-cache "$T/b.cache"
cmp -s "$T/a.cache" "$T/b.cache" && ok "byte-identical cache under shuffled names" || bad "caches differ"
expect_ok "reuse without data" "$KILN" calibrate "$M" --calib-cache "$T/a.cache"
grep -q "(from cache)" "$T/out.txt" && ok "reused" || bad "not reused: $(head -1 "$T/out.txt")"
cp "$T/a.cache" "$T/keep.cache"
expect_rc "other method refused" 1 "stale or foreign" "$KILN" calibrate "$M" --calib "$T/a" --calib-cache "$T/a.cache" --calib-method percentile
expect_rc "other model refused" 1 "model hash" "$KILN" calibrate models/ocr/ch_ppocr_mobile_v2.0_cls_infer.onnx --calib-cache "$T/a.cache"
cp "$T/a/x00.npy" "$T/a/x99.npy"
expect_rc "other data refused" 1 "data hash" "$KILN" calibrate "$M" --calib "$T/a" --calib-cache "$T/a.cache"
cmp -s "$T/a.cache" "$T/keep.cache" && ok "refused cache untouched" || bad "refused cache was changed"
printf 'garbage\n' > "$T/g.cache"
expect_rc "garbage cache refused" 1 "not a kiln calibration cache" "$KILN" calibrate "$M" --calib "$T/a" --calib-cache "$T/g.cache"
[ "$(cat "$T/g.cache")" = garbage ] && ok "garbage untouched" || bad "garbage cache changed"
expect_rc "directory cache refused" 1 "not a regular file" "$KILN" calibrate "$M" --calib "$T/a" --calib-cache "$T/a"
expect_rc "bad method" 2 "unknown calibration method" "$KILN" calibrate "$M" --calib "$T/a" --calib-method kl
expect_rc "bad percentile" 2 "unknown calibration method" "$KILN" calibrate "$M" --calib "$T/a" --calib-method percentile:200
expect_rc "no data" 2 "need MODEL" "$KILN" calibrate "$M"
expect_rc "missing dir" 1 "cannot open directory" "$KILN" calibrate "$M" --calib "$T/nope"
expect_rc "unknown option" 2 "unknown option" "$KILN" calibrate "$M" --calib "$T/a" --frobnicate

# values no calibration writes: a scale far from its amax (1e30 or 1e-45 for an amax of a few units), a tensor on
# two lines; refused with the line, left untouched (the 1e-45 scale used to fail the build as "2 layers cannot run
# in the requested precision", 1e30 and the duplicate were used)
line=$(grep -m1 '^"Relu_1_output_0" ' "$T/keep.cache")
for v in 1e30 1e-45; do
  sed "s/^\"Relu_1_output_0\" [^ ]*/\"Relu_1_output_0\" $v/" "$T/keep.cache" > "$T/edit.cache"
  cp "$T/edit.cache" "$T/edit.orig"
  expect_rc "scale $v refused" 1 '("Relu_1_output_0"): scale .* does not fit amax' "$KILN" calibrate "$M" \
    --calib-cache "$T/edit.cache"
  expect_rc "scale $v refused by build" 1 "does not fit amax" "$KILN" build "$M" -o "$T/e.kiln" --precision int8 \
    --calib-cache "$T/edit.cache"
  cmp -s "$T/edit.cache" "$T/edit.orig" && ok "edited cache untouched ($v)" || bad "edited cache changed ($v)"
done
n=$(grep -c '^"' "$T/keep.cache")
{ sed "s/^tensors $n\$/tensors $((n + 1))/" "$T/keep.cache"; echo "$line"; } > "$T/dup.cache"
expect_rc "duplicated tensor refused" 1 "both name \"Relu_1_output_0\"" "$KILN" calibrate "$M" --calib-cache "$T/dup.cache"

# calibration data of NaN/Inf only: no tensor has a range, an error naming the first (it gave every scale 1)
mkdir -p "$T/nan"
$PY -c "import numpy as np; np.save('$T/nan/x.npy', np.full((2, 3, 24, 24), np.nan, np.float32))"
expect_rc "all-NaN data refused" 1 "tensor 'input' held no finite value in the calibration data" "$KILN" calibrate \
  "$M" --calib "$T/nan" --calib-cache "$T/nan.cache"
[ -e "$T/nan.cache" ] && bad "a cache was written for all-NaN data" || ok "no cache for all-NaN data"
expect_rc "all-NaN data refused by build" 1 "held no finite value" "$KILN" build "$M" -o "$T/e.kiln" --precision int8 \
  --calib "$T/nan"

finish "calibrate CLI"

#!/usr/bin/env bash
# Usage rules every command shares, and what the CLI reports about options: usage errors exit 2 with a message
# that says why; options that cannot apply are refused or warned about, never silently ignored; reports say what
# the engine does. $2: tests/fakedev (a device module on host memory) for the --device cuda paths.
set -uo pipefail
KILN=$1
FAKEDEV=${2:-}
. "$(dirname "$0")/../lib.sh"

M=models/tiny_cnn.onnx
[ -f "$M" ] || { echo "SKIP: $M missing (run scripts/bootstrap.sh)"; exit 77; }
expect_ok "build fixed" "$KILN" build "$M" -o "$T/cnn.kiln" --shapes input:1x3x32x32
$PY -c "import numpy as np; np.save('$T/x.npy', np.zeros((1, 3, 32, 32), np.float32))"

# --tf32 / --strict-device change only how the CUDA module runs layers: without --device cuda they are refused
# by every command that takes them, as kiln build refuses --strict-device (bench used to report "precision: tf32"
# for a CPU run that computed plain float32)
for flag in --tf32 --strict-device; do
  want="--tf32 applies to --device cuda"
  [ "$flag" = --strict-device ] && want="--strict-device needs --device cuda"
  expect_rc "bench $flag on the cpu" 2 "$want" "$KILN" bench "$T/cnn.kiln" --iterations 1 $flag
  expect_rc "bench $flag --device cpu" 2 "$want" "$KILN" bench "$T/cnn.kiln" --iterations 1 --device cpu $flag
  expect_rc "run $flag on the cpu" 2 "$want" "$KILN" run "$T/cnn.kiln" --input input="$T/x.npy" --output-dir "$T/o" $flag
  expect_rc "verify $flag on the cpu" 2 "$want" "$KILN" verify "$T/cnn.kiln" --reference "$M" $flag
  expect_rc "inspect $flag on the cpu" 2 "$want" "$KILN" inspect "$T/cnn.kiln" $flag
  expect_rc "conformance $flag on the cpu" 2 "$want" "$KILN" conformance tests $flag
done
expect_rc "build --strict-device on the cpu" 2 "needs --device cuda" "$KILN" build "$M" -o "$T/y.kiln" --strict-device
# on a device, tf32 is claimed only for float32 convolutions / GEMMs that ran there: the fake device runs none of
# tiny_cnn's (every layer falls back to the CPU), so nothing is tf32 (it said "tf32 11", pooling and Flatten too)
if [ -n "$FAKEDEV" ]; then
  expect_ok "bench --device cuda --tf32 (fake device)" env KILN_CUDA_MODULE="$FAKEDEV" "$KILN" bench "$T/cnn.kiln" \
    --device cuda --tf32 --iterations 1 --json
  grep -q '"precision": "fp32"' "$T/out.txt" && grep -q '"layer_precisions": {"fp32": 11}' "$T/out.txt" &&
    ok "no tf32 claimed for layers that fell back" || bad "tf32 claimed: $(grep precision "$T/out.txt")"
fi

# fixed shapes the build cannot run at (an input over the tensor size limit): a warning with the true reason, with
# or without --passes-report (the report said "no fixed calibration shapes (give a profile)", and nothing else did)
expect_ok "build over the size limit" "$KILN" build "$M" -o "$T/big.kiln" --shapes input:100000x3x224x224
grep -q "warning: no tactics timed and no memory plan at build time (no synthetic input 'input' at 100000x3x224x224: .*limit" \
  "$T/out.txt" && ok "size limit warned about" || bad "size limit warning: $(cat "$T/out.txt")"
expect_ok "build over the size limit --passes-report" "$KILN" build "$M" -o "$T/big.kiln" --shapes input:100000x3x224x224 \
  --passes-report
grep -q "tactics/memory plan: none (no synthetic input 'input' at 100000x3x224x224: .*limit" "$T/out.txt" &&
  ! grep -q "no fixed calibration shapes" "$T/out.txt" && ok "passes report gives the reason" ||
  bad "passes report: $(grep -i plan "$T/out.txt")"
expect_ok "build without shapes --passes-report" "$KILN" build "$M" -o "$T/dyn.kiln" --passes-report
grep -q "no fixed calibration shapes" "$T/out.txt" && ! grep -q "warning" "$T/out.txt" &&
  ok "no shapes: the report says so, no warning" || bad "no shapes: $(cat "$T/out.txt")"

# bench --input: the file's shape runs, so --batch / --shapes that contradict it are a usage error (they were
# ignored: "batch: 1" for --batch 4); options that agree with the file are accepted
expect_ok "build dynamic" "$KILN" build "$M" -o "$T/dyn.kiln" --min-shapes input:1x3x16x16 --opt-shapes input:1x3x32x32 \
  --max-shapes input:8x3x64x64
$PY -c "import numpy as np; np.save('$T/x16.npy', np.zeros((1, 3, 16, 16), np.float32)); np.save('$T/x4.npy', np.zeros((4, 3, 16, 16), np.float32))"
expect_rc "bench --input --batch (conflict)" 2 "--batch 4 conflicts with --input 'input', a file of shape 1x3x16x16" \
  "$KILN" bench "$T/dyn.kiln" --input input="$T/x16.npy" --batch 4 --shapes input:1x3x16x16 --iterations 1
expect_rc "bench --input --shapes (conflict)" 2 "--shapes gives 'input' 1x3x32x32, but its --input file holds 1x3x16x16" \
  "$KILN" bench "$T/dyn.kiln" --input input="$T/x16.npy" --shapes input:1x3x32x32 --iterations 1
expect_ok "bench --input --batch --shapes (agreeing)" "$KILN" bench "$T/dyn.kiln" --input input="$T/x4.npy" --batch 4 \
  --shapes input:4x3x16x16 --iterations 1
grep -q "batch: 4" "$T/out.txt" && ok "agreeing --batch: batch 4" || bad "agreeing --batch: $(grep batch "$T/out.txt")"

# usage errors exit 2 in run and build as in the other commands (they exited 1)
expect_rc "run, no arguments" 2 "usage: kiln run" "$KILN" run
expect_rc "run, unknown option" 2 "unknown option '--bogus'" "$KILN" run "$M" --bogus
expect_rc "run, a second model" 2 "unexpected argument 'two.onnx'" "$KILN" run "$M" two.onnx
expect_rc "run, no --output-dir" 2 "usage: kiln run" "$KILN" run "$M" --input input="$T/x.npy"
expect_rc "run, bad --threads" 2 "--threads" "$KILN" run "$M" --input input="$T/x.npy" --output-dir "$T/o" --threads x
expect_rc "run, bad --input" 2 "expects NAME=FILE" "$KILN" run "$M" --input x.npy --output-dir "$T/o"
expect_rc "build, no -o" 2 "usage: kiln build" "$KILN" build "$M"
expect_rc "build, unknown option" 2 "unknown option '--bogus'" "$KILN" build "$M" -o "$T/z.kiln" --bogus
expect_rc "build, auto without a budget" 2 "needs --accuracy-budget" "$KILN" build "$M" -o "$T/z.kiln" --precision auto
expect_rc "build, bad --calib-method" 2 "--calib-method" "$KILN" build "$M" -o "$T/z.kiln" --calib-method nope
expect_rc "build, bad --shapes" 2 "--shapes" "$KILN" build "$M" -o "$T/z.kiln" --shapes input:1xx3
expect_rc "build, min without max" 2 "the same number of times" "$KILN" build "$M" -o "$T/z.kiln" --min-shapes input:1x3x8x8
cp "$M" "$T/m.onnx"   # a copy: a regression must not clobber the repository's model
expect_rc "build, -o names the model" 2 "refusing to overwrite" "$KILN" build "$T/m.onnx" -o "$T/m.onnx"
cmp -s "$M" "$T/m.onnx" && ok "model left untouched" || bad "model overwritten"
[ -e "$T/z.kiln" ] && bad "a usage error wrote an engine" || ok "no engine after usage errors"

# messages that say why: exclusive options, a value missing at the end, every precision --allow takes, the dtype of
# a big-endian .npy (it read "unsupported .npy dtype '>f4', ' (need ...")
expect_rc "bench --iterations and --duration" 2 "--iterations and --duration exclude each other" \
  "$KILN" bench "$T/cnn.kiln" --iterations 5 --duration 1
expect_rc "build -o without a value" 2 "kiln build: missing value for -o" "$KILN" build "$M" -o
expect_rc "bench --iterations without a value" 2 "kiln bench: missing value for --iterations" "$KILN" bench "$T/cnn.kiln" --iterations
expect_rc "run --output-dir without a value" 2 "kiln run: missing value for --output-dir" "$KILN" run "$M" --output-dir
expect_rc "inspect --shapes without a value" 2 "kiln inspect: missing value for --shapes" "$KILN" inspect "$T/cnn.kiln" --shapes
expect_rc "inspect, unknown option" 2 "kiln inspect: unknown option '--bogus'" "$KILN" inspect "$T/cnn.kiln" --bogus
expect_rc "verify --reference without a value" 2 "kiln verify: missing value for --reference" "$KILN" verify "$T/cnn.kiln" --reference
expect_rc "calibrate --calib without a value" 2 "kiln calibrate: missing value for --calib" "$KILN" calibrate "$M" --calib
expect_rc "conformance --jobs without a value" 2 "kiln conformance: missing value for --jobs" "$KILN" conformance tests --jobs
expect_rc "build --allow lists every precision" 1 "want lower precisions among fp16, bf16, int8, fp8, nvfp4 (or fp4), mxfp4, int4" \
  "$KILN" build "$M" -o "$T/z.kiln" --precision auto --accuracy-budget 'cosine>=0.9' --allow fp3
$PY -c "import numpy as np; np.save('$T/be.npy', np.zeros((1, 3, 32, 32), '>f4'))"
expect_rc "big-endian .npy" 1 "unsupported .npy dtype '>f4' (need little-endian numeric)" \
  "$KILN" run "$T/cnn.kiln" --input input="$T/be.npy" --output-dir "$T/o"

# calibration options on a build that calibrates nothing (fp32, fp16): a warning (they were ignored silently); a
# build that calibrates (here an int8 rule without data) does not warn; build --help shows '%', not '%%'
expect_ok "build fp32 --calib --calib-method" "$KILN" build "$M" -o "$T/z.kiln" --calib "$T" --calib-method minmax
grep -q "warning: --calib has no effect without an int8, fp8 or auto precision" "$T/out.txt" &&
  ok "fp32 build warns about --calib" || bad "no --calib warning: $(cat "$T/out.txt")"
expect_ok "build fp16 --calib-method" "$KILN" build "$M" -o "$T/z.kiln" --precision fp16 --calib-method minmax
grep -q "warning: --calib-method has no effect" "$T/out.txt" && ok "fp16 build warns about --calib-method" ||
  bad "no --calib-method warning: $(cat "$T/out.txt")"
expect_rc "int8 rule --calib-method" 1 "need calibration data" "$KILN" build "$M" -o "$T/z.kiln" --calib-method minmax \
  --layer-precision 'layer1*:int8'
grep -q "has no effect" "$T/err.txt" && bad "int8 rule: calibration warned as unused" || ok "int8 rule: no warning"
expect_ok "build --help" "$KILN" build --help
grep -q 'top1>=99%,' "$T/out.txt" && ! grep -q '%%' "$T/out.txt" && ok "build --help: top1>=99%" || bad "build --help: %%"

# verify --input with --shapes: the same rule (--shapes naming the file's input with other dims was ignored and the
# file's shape verified); --batch with --input is refused as before ("--batch applies to --data only"); kiln run
# takes neither --shapes nor --batch
expect_rc "verify --input --shapes (conflict)" 2 "--shapes gives 'input' 1x3x32x32, but its --input file holds 1x3x16x16" \
  "$KILN" verify "$T/dyn.kiln" --reference "$M" --input input="$T/x16.npy" --shapes input:1x3x32x32
expect_rc "verify --input --batch" 2 "--batch applies to --data only" \
  "$KILN" verify "$T/dyn.kiln" --reference "$M" --input input="$T/x4.npy" --batch 4
expect_ok "verify --input --shapes (agreeing)" "$KILN" verify "$T/dyn.kiln" --reference "$M" --input input="$T/x4.npy" \
  --shapes input:4x3x16x16 --json
grep -q '"samples": 1' "$T/out.txt" && ok "agreeing --shapes: verified" || bad "agreeing --shapes: $(cat "$T/out.txt")"

finish cli_usage

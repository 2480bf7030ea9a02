#!/usr/bin/env bash
# --device on the CLI where the CUDA module cannot be used: one clean error, never a crash, on any
# machine (KILN_CUDA_MODULE names a file that does not exist / is not a module); a bad device name
# is a usage error. And the default kiln binary does not link CUDA (docs/CUDA.md).
KILN="$1"
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$ROOT"
fails=0
check() {   # check NAME WANT_RC PATTERN CMD...
  local name=$1 want=$2 pat=$3
  shift 3
  local out rc
  out=$("$@" 2>&1); rc=$?
  if [ "$rc" -ne "$want" ] || ! grep -q -- "$pat" <<<"$out"; then
    echo "FAIL $name (rc=$rc, want $want): $out"; fails=$((fails + 1))
  else
    echo "pass $name"
  fi
}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
check "bench, no module" 1 "could not be loaded" env KILN_CUDA_MODULE="$tmp/none.so" \
  "$KILN" bench models/tiny_cnn.onnx --shapes input:1x3x32x32 --device cuda --iterations 1
echo "not a module" > "$tmp/bad.so"
check "bench, not a module" 1 "could not be loaded" env KILN_CUDA_MODULE="$tmp/bad.so" \
  "$KILN" bench models/tiny_cnn.onnx --shapes input:1x3x32x32 --device cuda --iterations 1
# a float32 [1,3,32,32] .npy of zeros (written here: no numpy needed)
hdr="{'descr': '<f4', 'fortran_order': False, 'shape': (1, 3, 32, 32), }"
while [ $(( (10 + ${#hdr} + 1) % 64 )) -ne 0 ]; do hdr="$hdr "; done
{ printf '\x93NUMPY\x01\x00'; printf "\\x$(printf %02x $(( (${#hdr} + 1) % 256 )))\\x$(printf %02x $(( (${#hdr} + 1) / 256 )))"; \
  printf '%s\n' "$hdr"; head -c $((3 * 32 * 32 * 4)) /dev/zero; } > "$tmp/x.npy"
check "run, no module" 1 "--device cuda" env KILN_CUDA_MODULE="$tmp/none.so" \
  "$KILN" run models/tiny_cnn.onnx --input input="$tmp/x.npy" --output-dir "$tmp/o" --device cuda
check "verify, no module" 1 "could not be loaded" env KILN_CUDA_MODULE="$tmp/none.so" \
  "$KILN" verify models/tiny_cnn.onnx --reference models/tiny_cnn.onnx --shapes input:1x3x32x32 --device cuda
check "verify --per-layer on cuda, no module" 1 "could not be loaded" env KILN_CUDA_MODULE="$tmp/none.so" \
  "$KILN" verify models/tiny_cnn.onnx --reference models/tiny_cnn.onnx --shapes input:1x3x32x32 --per-layer --device cuda
check "verify --device cpu" 0 "on cpu" "$KILN" verify models/tiny_cnn.onnx --reference models/tiny_cnn.onnx \
  --shapes input:1x3x32x32 --samples 1 --device cpu
check "inspect, no module" 1 "could not be loaded" env KILN_CUDA_MODULE="$tmp/none.so" \
  "$KILN" inspect models/tiny_cnn.onnx --shapes input:1x3x32x32 --device cuda
check "inspect --profile on cuda" 2 "KILN_CUDA_PROFILE" "$KILN" inspect models/tiny_cnn.onnx --profile --device cuda
check "bad device name (inspect)" 2 "cpu or cuda" "$KILN" inspect models/tiny_cnn.onnx --device gpu
check "bad device name" 2 "cpu or cuda" "$KILN" bench models/tiny_cnn.onnx --device gpu
check "bad device name (verify)" 2 "cpu or cuda" "$KILN" verify models/tiny_cnn.onnx --reference models/tiny_cnn.onnx --device gpu
check "bad device name (run)" 2 "cpu or cuda" "$KILN" run models/tiny_cnn.onnx --device gpu
check "device cpu" 0 "device: cpu" "$KILN" bench models/tiny_cnn.onnx --shapes input:1x3x32x32 --device cpu --iterations 2
# the engine says what its layers were prepared for (no GPU needed to build for one)
target_of() { "$KILN" inspect "$1" --json | grep -o '"target": *"[a-z]*"' | grep -o '[a-z]*"$' | tr -d '"'; }
for d in cpu cuda; do
  if "$KILN" build models/tiny_cnn.onnx -o "$tmp/$d.kiln" --shapes input:1x3x32x32 --device $d > /dev/null 2>&1 &&
     [ "$(target_of "$tmp/$d.kiln")" = "$d" ]; then
    echo "pass build --device $d: manifest target $d"
  else
    echo "FAIL build --device $d: manifest target '$(target_of "$tmp/$d.kiln")'"; fails=$((fails + 1))
  fi
done
# the build's device check: without a usable GPU nothing is checked (a note; an error with --strict-device,
# and then no engine file)
check "build --device cuda, no module: note" 0 "not checked against the GPU" env KILN_CUDA_MODULE="$tmp/none.so" \
  "$KILN" build models/tiny_cnn.onnx -o "$tmp/n.kiln" --shapes input:1x3x32x32 --device cuda
check "build --strict-device, no module: error" 1 "not checked against the GPU" env KILN_CUDA_MODULE="$tmp/none.so" \
  "$KILN" build models/tiny_cnn.onnx -o "$tmp/s.kiln" --shapes input:1x3x32x32 --device cuda --strict-device
if [ -e "$tmp/s.kiln" ]; then echo "FAIL build --strict-device wrote an engine"; fails=$((fails + 1)); fi
check "build --strict-device without --device cuda" 2 "needs --device cuda" \
  "$KILN" build models/tiny_cnn.onnx -o "$tmp/t.kiln" --strict-device
if ldd "$KILN" | grep -E -q "libcuda|libcudart|libcudnn|libcublas"; then
  echo "FAIL: kiln links CUDA libraries"; fails=$((fails + 1))
else
  echo "pass kiln does not link CUDA"
fi
[ $fails -eq 0 ]

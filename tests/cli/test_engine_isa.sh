#!/usr/bin/env bash
# The CPU features an engine needs are checked from checksummed bytes: the header's target-arch
# field has no checksum, so an engine whose weights are stored only in layouts prepared for
# AVX2/AVX-512 is refused on a host without them (KILN_MAX_CPU_ISA caps this host) even when that
# field is edited to claim nothing. usage: test_engine_isa.sh KILN
set -uo pipefail
KILN=$1
. "$(dirname "$0")/../lib.sh"

"$KILN" build models/tiny_cnn.onnx -o "$T/e.kiln" > "$T/build.txt" 2>&1 || { cat "$T/build.txt"; exit 1; }
arch=$($PY -c 'import struct, sys; print(struct.unpack_from("<I", open(sys.argv[1], "rb").read(), 36)[0])' "$T/e.kiln")
if [ "$arch" -le 1 ]; then
  echo "skip: this host packs no weights for AVX2 or AVX-512 (target arch $arch)"
  exit 77
fi
# header: target arch (offset 36) 0 or x86-64 only; nothing else changes (the header has no checksum)
for v in 0 1 65535; do
  $PY -c 'import struct, sys; b = bytearray(open(sys.argv[1], "rb").read()); struct.pack_into("<I", b, 36, int(sys.argv[3])); open(sys.argv[2], "wb").write(b)' \
    "$T/e.kiln" "$T/e$v.kiln" "$v"
done
$PY -c 'import numpy as np; np.save("'"$T"'/x.npy", np.full((1, 3, 32, 32), 0.5, np.float32))'

expect_ok "engine runs here" "$KILN" run "$T/e.kiln" --input input="$T/x.npy" --output-dir "$T/o"
expect_ok "edited header (arch 0) runs here too" "$KILN" run "$T/e0.kiln" --input input="$T/x.npy" --output-dir "$T/o"
# a host with none of the features (x86-64 only)
export KILN_MAX_CPU_ISA=none
expect_err "unedited engine refused on an x86-64-only host" "CPU features this machine lacks" "$KILN" inspect "$T/e.kiln"
for v in 0 1; do
  for mode in "" --no-mmap; do
    expect_err "header arch $v: refused on an x86-64-only host (inspect $mode)" \
      "CPU features this machine lacks (.*): it stores weights only in layouts prepared for them (its header, which does not list them, was altered)" \
      "$KILN" inspect $mode "$T/e$v.kiln"
  done
  expect_err "header arch $v: run refused on an x86-64-only host" "CPU features this machine lacks" \
    "$KILN" run "$T/e$v.kiln" --input input="$T/x.npy" --output-dir "$T/o"
done
unset KILN_MAX_CPU_ISA
# bits this kiln does not know are named by value, not left out of the list
expect_err "header arch with unknown bits" "CPU features this machine lacks (unknown bits 0xfff8)" "$KILN" inspect "$T/e65535.kiln"
finish "engine CPU features"

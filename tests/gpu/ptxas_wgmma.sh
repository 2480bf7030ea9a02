#!/usr/bin/env bash
# ptxas must not serialize the wgmma kernels (info C7515: "wgmma.mma_async instructions are serialized ..."). The
# kernels still compile and pass every check when it does, only slower (session 30: the INT8 BN 128 / 256
# convolutions 1.3-2x), so nothing else would catch it. Compiles each file that issues wgmma for sm_90a alone
# (device code, -cubin) with ptxas's report and fails on any C7515 line, naming the kernels.
#   tests/gpu/ptxas_wgmma.sh NVCC SOURCE_DIR
set -u
NVCC=$1
SRC=$2
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
files=$(grep -l 'wgmma\|wg_fence' "$SRC"/src/backend/cuda/*.cu)
[ -n "$files" ] || { echo "ptxas_wgmma: no wgmma source found under $SRC/src/backend/cuda" >&2; exit 1; }
fail=0
for f in $files; do
    name=$(basename "$f")
    if ! "$NVCC" -std=c++17 -O2 -DNDEBUG -I"$SRC/include" -I"$SRC/src" -gencode=arch=compute_90a,code=sm_90a -cubin \
        -Xptxas -v -o "$out/$name.cubin" "$f" > "$out/$name.log" 2>&1; then
        echo "FAIL $name: nvcc failed"
        tail -20 "$out/$name.log"
        fail=1
        continue
    fi
    if grep -q 'C7515' "$out/$name.log"; then
        echo "FAIL $name: ptxas serialized wgmma (C7515) in:"
        grep 'C7515' "$out/$name.log" | sed "s/.*in the function '\([^']*\)'.*/\1/" |
            { if command -v c++filt > /dev/null; then c++filt; else cat; fi; } | sed 's/^/  /'
        fail=1
    else
        echo "ok   $name: $(grep -c 'Compiling entry' "$out/$name.log") kernels, no serialized wgmma"
    fi
done
exit $fail

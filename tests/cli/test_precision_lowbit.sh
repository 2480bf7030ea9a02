#!/usr/bin/env bash
# kiln build --precision fp8|nvfp4|mxfp4|int4 end to end on tiny_cnn (and tiny_bert's MatMuls):
# every requested layer realized in its format (kiln inspect), the first and last layers kept
# fp32 and said so, engines smaller, outputs close to fp32, fp4 = nvfp4, --layer-precision mixes
# formats exactly, a layer that cannot take a low-bit weight fails the build naming it (or is
# listed with --precision-fallback), FP8 needs calibration and reuses the cache (byte-identical
# engine), kiln verify --per-layer shows the low-bit layers' errors, and a corrupted engine blob
# is refused by the checksum.
set -uo pipefail
KILN=$1
. "$(dirname "$0")/../lib.sh"
check() {
  local name=$1 code=$2
  if $PY - "$T" > "$T/py.txt" 2>&1 <<PYEOF
import json, os, sys
import numpy as np
t = sys.argv[1]
d = json.load(open(t + "/inspect.json"))
L = d["layers"]
def out(p, n="logits"): return np.load(f"{t}/{p}/{n}.npy").astype(np.float64).ravel()
def cos(a, b): return float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))
def size(p): return os.path.getsize(f"{t}/{p}.kiln")
$code
PYEOF
  then ok "$name"; cat "$T/py.txt"; else bad "$name: $(tail -3 "$T/py.txt")"; fi
}
inspect() { "$KILN" inspect "$1" --json --shapes input:1x3x32x32 > "$T/inspect.json" 2> "$T/stderr.txt" || bad "inspect $1: $(tail -1 "$T/stderr.txt")"; }
run() { "$KILN" run "$1" --input "input=$T/x.npy" --output-dir "$T/$2" > /dev/null 2>&1 || bad "run $1"; }

M=models/tiny_cnn.onnx
[ -f "$M" ] || { echo "SKIP: $M missing (run scripts/bootstrap.sh)"; exit 77; }
mkdir -p "$T/cal"
$PY - "$T" <<'PY' || { echo "FAIL numpy data"; exit 1; }
import numpy as np, sys
t = sys.argv[1]
rng = np.random.default_rng(7)
for i in range(4):
    np.save(f"{t}/cal/s{i}.npy", rng.standard_normal((2, 3, 32, 32)).astype(np.float32))
np.save(f"{t}/x.npy", rng.standard_normal((1, 3, 32, 32)).astype(np.float32))
PY

expect_ok "build fp32" "$KILN" build "$M" -o "$T/f32.kiln"
run "$T/f32.kiln" o32
# cosine bounds vs fp32 on this random network (FP8 keeps 3 mantissa bits, the 4-bit formats 1)
declare -A COS=([fp8]=0.999 [nvfp4]=0.99 [mxfp4]=0.98 [int4]=0.99)
for p in fp8 nvfp4 mxfp4 int4; do
  extra=()
  [ $p = fp8 ] && extra=(--calib "$T/cal" --calib-cache "$T/c.cache")
  expect_ok "build $p" "$KILN" build "$M" -o "$T/$p.kiln" --precision $p "${extra[@]}"
  cp "$T/out.txt" "$T/$p.log"
  grep -q "kept in fp32: conv1_Conv_0 (Conv, the first layer" "$T/out.txt" && grep -q "kept in fp32: fc_Gemm (Gemm, the last layer" "$T/out.txt" \
    && ok "$p says which layers stay fp32" || bad "$p report: $(cat "$T/out.txt")"
  run "$T/$p.kiln" "o$p"
  inspect "$T/$p.kiln"
  check "$p: realized, smaller, close" "
conv = [l for l in L if l['op'] in ('Conv', 'FusedConv', 'Gemm')]
low = [l for l in conv if l['name'] not in ('conv1_Conv_0', 'fc_Gemm')]
assert len(low) == 8 and all(l['requested_precision'] == l['precision'] == '$p' for l in low), low
assert all(l['precision'] == 'fp32' for l in conv if l not in low)
assert all(l['requested_precision'] in (None, l['precision']) for l in L)
r = size('$p') / size('f32')
c = cos(out('o$p'), out('o32'))
print('$p: engine', round(r, 3), 'x fp32, cosine', c)
assert r < 0.8 and c > ${COS[$p]}, (r, c)"
done
expect_rc "fp8 needs calibration" 1 "fp8 layers need calibration data" "$KILN" build "$M" -o "$T/x.kiln" --precision fp8
grep -q "fp8 bias correction: [0-9]* layers, measured on" "$T/fp8.log" && ok "fp8 bias correction reported" \
  || bad "fp8 report: $(cat "$T/fp8.log")"
# the weight-scale recipe is measured per model: both trials' SNRs and the choice reported
grep -q "fp8 weight scales per output channel: mean output SNR [0-9.]* dB" "$T/fp8.log" \
  && grep -q "fp8 weight scales per tensor: mean output SNR [0-9.]* dB" "$T/fp8.log" \
  && grep -Eq "fp8 weight scales: per (output channel|tensor) \(the highest SNR\)" "$T/fp8.log" \
  && ok "fp8 weight-scale recipe chosen and reported" || bad "fp8 recipe report: $(cat "$T/fp8.log")"
# forced recipes (measurements): per tensor marks every fp8 layer, per layer reports its count; a bad value is an error
KILN_FP8_WQ=tensor expect_ok "fp8 forced per tensor" "$KILN" build "$M" -o "$T/fp8t.kiln" --precision fp8 --calib "$T/cal"
grep -q "fp8 weight scales: per tensor on 8 of 8 layers" "$T/out.txt" && grep -q "per tensor (KILN_FP8_WQ)" "$T/out.txt" \
  && ok "KILN_FP8_WQ=tensor honoured" || bad "forced per tensor: $(cat "$T/out.txt")"
KILN_FP8_WQ=layer expect_ok "fp8 forced per layer" "$KILN" build "$M" -o "$T/fp8l.kiln" --precision fp8 --calib "$T/cal"
grep -q "fp8 weight scales: per tensor on [0-8] of 8 layers" "$T/out.txt" && grep -q "per layer (KILN_FP8_WQ)" "$T/out.txt" \
  && ok "KILN_FP8_WQ=layer honoured" || bad "forced per layer: $(cat "$T/out.txt")"
KILN_FP8_WQ=bogus expect_rc "KILN_FP8_WQ checked" 1 "want auto, channel, tensor or layer" "$KILN" build "$M" -o "$T/x.kiln" \
  --precision fp8 --calib "$T/cal"
# the cache gives the scales (no calibration run); the bias correction is measured on the data again
expect_ok "fp8 from the cache" "$KILN" build "$M" -o "$T/fp8c.kiln" --precision fp8 --calib-cache "$T/c.cache" --calib "$T/cal"
grep -q "(from cache)" "$T/out.txt" && ok "fp8 cache reused" || bad "cache not reused: $(cat "$T/out.txt")"
cmp -s "$T/fp8.kiln" "$T/fp8c.kiln" && ok "fp8: byte-identical engine from the cache" || bad "fp8 engines differ"
# the cache alone: scales only, so the build says the bias correction was not done
expect_ok "fp8 from the cache alone" "$KILN" build "$M" -o "$T/fp8n.kiln" --precision fp8 --calib-cache "$T/c.cache"
grep -q "fp8 bias correction: not done" "$T/out.txt" && ok "fp8 without data: bias correction said not done" \
  || bad "cache-only report: $(cat "$T/out.txt")"

# fp4 is nvfp4; every layer lowered by rules, formats mixed, realized exactly
expect_ok "mixed rules" "$KILN" build "$M" -o "$T/mix.kiln" --precision fp4 --calib-cache "$T/c.cache" \
  --layer-precision 'layer2_*:mxfp4' --layer-precision 'layer2_0_conv2*:int4' --layer-precision 'conv1_Conv_0:fp8' \
  --layer-precision 'fc_Gemm:int4'
grep -q "kept in fp32" "$T/out.txt" && bad "rules lowered both ends but the report says kept" || ok "rules override the fp32 ends"
run "$T/mix.kiln" omix
inspect "$T/mix.kiln"
check "mixed formats honoured" '
by = {l["name"]: l for l in L}
want = {"conv1_Conv_0": "fp8", "layer1_0_conv1_Conv_0": "nvfp4", "layer2_0_conv1_Conv_0": "mxfp4",
        "layer2_0_conv2_Conv_0": "int4", "fc_Gemm": "int4"}
for n, p in want.items():
    assert by[n]["precision"] == p, (n, by[n])
assert by["layer1_0_conv1_Conv_0"]["requested_precision"] == "nvfp4"
assert all(l["requested_precision"] in (None, l["precision"]) for l in L)
assert cos(out("omix"), out("o32")) > 0.98'
"$KILN" inspect "$T/mix.kiln" --shapes input:1x3x32x32 > "$T/text.txt" 2>&1
grep -E "^[0-9]+ +layer2_0_conv2_Conv_0 +FusedConv +int4 +int4 " "$T/text.txt" > /dev/null && ok "text inspect: int4 layer" \
  || bad "text inspect: $(grep layer2_0_conv2 "$T/text.txt")"

# never silent: a layer without a weight cannot be fp8 / nvfp4; fallback lists it
expect_rc "unrealizable low-bit request" 1 "1 layer cannot run in the requested precision: GlobalAveragePool_0 (GlobalAveragePool: fp32)" \
  "$KILN" build "$M" -o "$T/x.kiln" --layer-precision 'GlobalAveragePool_0:nvfp4'
expect_ok "low-bit fallback" "$KILN" build "$M" -o "$T/fb.kiln" --layer-precision 'GlobalAveragePool_0:mxfp4' --precision-fallback
grep -q "fallback: GlobalAveragePool_0 (GlobalAveragePool) requested mxfp4, runs in fp32" "$T/out.txt" && ok "fallback listed" \
  || bad "fallback not listed: $(cat "$T/out.txt")"

# kiln verify --per-layer: the low-bit layers' outputs (float32, from dequantized weights) vs fp32
expect_ok "verify --per-layer nvfp4" "$KILN" verify "$T/nvfp4.kiln" --reference "$M" --data "$T/cal" --samples 1 --per-layer --json
cp "$T/out.txt" "$T/verify.json"
$PY - "$T" > "$T/py.txt" 2>&1 <<'PY' && ok "per-layer errors of nvfp4 layers" || bad "per-layer: $(tail -3 "$T/py.txt")"
import json, sys
d = json.load(open(sys.argv[1] + "/verify.json"))
pl = d["per_layer"]["layers"]
names = [v["candidate_layer"] for v in pl]
assert "layer1_0_conv1_Conv_0" in names and len(pl) >= 10, names
snr = [v["snr_db"] for v in pl if v["candidate_layer"] == "layer1_0_conv1_Conv_0"][0]
print("nvfp4 first lowered layer SNR", snr)
assert 5 < snr < 60, snr
PY

# a flipped byte in a low-bit blob: the engine's checksum refuses the file
$PY - "$T/nvfp4.kiln" "$T/bad.kiln" <<'PY'
import sys
b = bytearray(open(sys.argv[1], "rb").read())
i = b.find(b"KILNPRP1")
assert i > 0
b[i + 200] ^= 0xFF
open(sys.argv[2], "wb").write(b)
PY
expect_rc "corrupted blob refused" 1 "checksum" "$KILN" run "$T/bad.kiln" --input "input=$T/x.npy" --output-dir "$T/obad"

# a transformer's weight MatMuls and large embedding tables in nvfp4 (FP16 activations), attention kept in fp32
# (requested and realized)
B=models/tiny_bert.onnx
BI=()
mkdir -p "$T/b" "$T/bcal"
$PY - "$T" <<'PY' || bad "numpy bert data"
import numpy as np, sys
t = sys.argv[1]
rng = np.random.default_rng(1)
np.save(f"{t}/b/input_ids.npy", rng.integers(0, 100, (2, 16)).astype(np.int64))
np.save(f"{t}/b/attention_mask.npy", np.ones((2, 16), np.int64))
np.save(f"{t}/b/token_type_ids.npy", np.zeros((2, 16), np.int64))
for i in range(3):   # calibration samples (NAME_KEY.npy)
    np.save(f"{t}/bcal/input_ids_s{i}.npy", rng.integers(0, 100, (2, 16)).astype(np.int64))
    np.save(f"{t}/bcal/attention_mask_s{i}.npy", np.ones((2, 16), np.int64))
    np.save(f"{t}/bcal/token_type_ids_s{i}.npy", np.zeros((2, 16), np.int64))
PY
for n in input_ids attention_mask token_type_ids; do BI+=(--input "$n=$T/b/$n.npy"); done
expect_ok "bert nvfp4" "$KILN" build "$B" -o "$T/b4.kiln" --precision nvfp4
expect_ok "bert fp32" "$KILN" build "$B" -o "$T/b32.kiln"
"$KILN" run "$T/b4.kiln" "${BI[@]}" --output-dir "$T/ob4" > /dev/null 2>&1 || bad "run bert nvfp4"
"$KILN" run "$T/b32.kiln" "${BI[@]}" --output-dir "$T/ob32" > /dev/null 2>&1 || bad "run bert fp32"
"$KILN" inspect "$T/b4.kiln" --json --shapes input_ids:2x16,attention_mask:2x16,token_type_ids:2x16 > "$T/inspect.json" 2>&1
check "bert nvfp4" '
q = [l for l in L if l["precision"] == "nvfp4"]
e = sorted(l["name"] for l in q if l["op"] == "Gather")   # the word and position tables (not the 2-row token types)
assert e == ["Gather_1", "Gather_3"], e
assert len(q) >= 12 and all(l["op"] in ("MatMul", "FusedMatMul", "Gemm", "FusedGemm", "Gather") for l in q), [(l["name"], l["op"]) for l in q]
assert all(l["requested_precision"] == "fp32" and l["precision"] == "fp32" for l in L if l["op"] == "Attention")
a, b = out("ob4", "last_hidden_state"), out("ob32", "last_hidden_state")
print("bert nvfp4 cosine vs fp32", cos(a, b))
assert cos(a, b) > 0.99'

# a --device cuda fp8 build (no GPU needed to build it): the FFN-up GELU GEMMs, read only by the FFN-down FP8 GEMMs,
# hold their output only in E4M3 (kiln inspect's output_storage, the build report); the rest as their dtype; the CPU
# emulation of the engine runs and stays close to fp32
expect_ok "bert fp8 --device cuda" "$KILN" build "$B" -o "$T/b8.kiln" --precision fp8 --device cuda --calib "$T/bcal" \
  --shapes input_ids:2x16,attention_mask:2x16,token_type_ids:2x16
grep -q "fp8 storage: 2 layer outputs held only in E4M3" "$T/out.txt" && ok "fp8 storage reported" \
  || bad "fp8 storage report: $(cat "$T/out.txt")"
grep -q "fp8 outputs: [1-9][0-9]* FP8 layers write FP16 on the GPU" "$T/out.txt" && ok "fp8 half outputs said at build" \
  || bad "fp8 outputs report: $(cat "$T/out.txt")"
"$KILN" inspect "$T/b8.kiln" --json --shapes input_ids:2x16,attention_mask:2x16,token_type_ids:2x16 > "$T/inspect.json" 2>&1
"$KILN" inspect "$T/b8.kiln" --shapes input_ids:2x16,attention_mask:2x16,token_type_ids:2x16 > "$T/inspect.txt" 2>&1
"$KILN" run "$T/b8.kiln" "${BI[@]}" --output-dir "$T/ob8" > /dev/null 2>&1 || bad "run bert fp8 (cuda engine, CPU)"
check "bert fp8 e4m3 storage" '
held = sorted(l["name"] for l in L if l["output_storage"] == "e4m3")
assert held == ["MatMul_14", "MatMul_6"], held
assert all(l["output_storage"] is None for l in L if l["name"] not in held)
assert all(l["op"] == "FusedMatMul" and l["precision"] == "fp8" for l in L if l["name"] in held)
txt = open(t + "/inspect.txt").read().splitlines()
assert sum(" e4m3 " in s for s in txt) == 2, [s for s in txt if "e4m3" in s]
a, b = out("ob8", "last_hidden_state"), out("ob32", "last_hidden_state")
print("bert fp8 (cuda engine on the CPU) cosine vs fp32", cos(a, b))
assert cos(a, b) > 0.999'
finish "precision low-bit CLI"

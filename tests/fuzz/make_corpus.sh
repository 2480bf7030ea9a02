#!/usr/bin/env bash
# Generates the seed corpora of the fuzz harnesses into OUT/<harness>/ (default build-fuzz/seeds):
#   onnx          model.onnx files of the ONNX backend suite (/usr/share/libonnx-testdata/data,
#                 those under 64 KiB) and models/tiny_cnn.onnx
#   tensor_pb     input/output .pb files of the suite under 4 KiB (deduplicated, at most 600)
#   npy           small .npy files written by NumPy: every dtype kiln reads, ranks 0-4, empty
#                 arrays, format versions 1-3, Fortran order, a few malformed headers
#   engine        engines built by `kiln build` from tiny_cnn (fixed shapes, a profile, a timing
#                 cache) and from a few suite models (control flow, recurrent, indexing ops)
#   timing_cache  the cache `kiln build --timing-cache` writes, plus invalid ones
#   calib_cache   calibration caches with the header the harness expects (its fixed hashes and
#                 method), valid ones (quoted/escaped names, extreme floats) and malformed ones
#   device_tactics  device tactics texts (src/core/devtac.h): valid, CRLF, malformed lines, no header
#   serve         KServe v2 infer requests (JSON, nested, binary extension, missing inputs, huge shapes) and
#                 config.pbtxt texts, each behind the byte that picks fuzz_serve's target
#   image         small PNG and JPEG files written by ImageMagick (colour, grey, palette, 16-bit, alpha,
#                 interlaced, progressive, CMYK), a truncated one of each
# Usage: tests/fuzz/make_corpus.sh [KILN_BINARY] [OUT]      (idempotent; rerun to refresh)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
KILN="${1:-}"
OUT="${2:-build-fuzz/seeds}"
SUITE=/usr/share/libonnx-testdata/data
if [ -z "$KILN" ]; then
  # the plain build is much faster than the sanitized one; either makes the same engines
  if [ -x build/kiln ]; then KILN=build/kiln; else KILN=build-fuzz/kiln; fi
fi
[ -x "$KILN" ] || { echo "make_corpus: $KILN not built (make build-fuzz)" >&2; exit 1; }
[ -d "$SUITE" ] || { echo "make_corpus: $SUITE missing (scripts/bootstrap.sh)" >&2; exit 1; }
rm -rf "$OUT.tmp"
mkdir -p "$OUT.tmp"/{onnx,tensor_pb,npy,engine,timing_cache,calib_cache,device_tactics,serve,image}
T="$OUT.tmp"

# content-addressed copy: identical seeds collapse, names are stable across runs
put() { local h; h=$(sha1sum "$1" | cut -c1-16); cp "$1" "$T/$2/$h"; }

# ---- onnx
while IFS= read -r f; do put "$f" onnx; done < <(find "$SUITE" -name model.onnx -size -64k | sort)
put models/tiny_cnn.onnx onnx

# ---- tensor_pb
find "$SUITE" -name '*.pb' -size -4k | sort | while IFS= read -r f; do put "$f" tensor_pb; done
ls "$T/tensor_pb" | sort | tail -n +601 | while read -r f; do rm "$T/tensor_pb/$f"; done

# ---- npy
/usr/bin/python3 - "$T/npy" <<'PY'
import sys, os, io
import numpy as np
out = sys.argv[1]
rng = np.random.default_rng(1)
n = 0
def save(arr, version=None, name=None):
    global n
    b = io.BytesIO()
    if version is None:
        np.save(b, arr, allow_pickle=False)
    else:
        np.lib.format.write_array(b, arr, version=version, allow_pickle=False)
    open(os.path.join(out, name or "np%03d.npy" % n), "wb").write(b.getvalue())
    n += 1
for dt in ["<f4", "<f8", "<f2", "<i8", "<i4", "<i2", "i1", "u1", "<u2", "<u4", "<u8", "?"]:
    for shape in [(), (0,), (3,), (2, 3), (1, 2, 1, 2)]:
        save((rng.standard_normal(shape) * 10).astype(dt))
save(np.zeros((2, 2), "<f4"), version=(2, 0))
save(np.zeros((2, 2), "<f4"), version=(3, 0))
save(np.asfortranarray(np.arange(6, dtype="<f4").reshape(2, 3)))
save(np.arange(4, dtype=">f4"))          # big-endian: refused
save(np.zeros(2, dtype="<c8"))           # complex: refused
def raw(hdr, data=b"", version=1, name=None):
    global n
    h = hdr.encode("latin1")
    pre = b"\x93NUMPY" + bytes([version, 0]) + (len(h).to_bytes(2, "little") if version == 1 else len(h).to_bytes(4, "little"))
    open(os.path.join(out, name or "raw%03d.npy" % n), "wb").write(pre + h + data)
    n += 1
raw("{'descr': '<f4', 'fortran_order': False, 'shape': (2147483647,), }\n")   # no data for a huge shape
raw("{'descr': '<f4', 'fortran_order': False, 'shape': (3, -1), }\n", b"\0" * 12)
raw("{'descr': '<f4', 'fortran_order': False, 'shape': (1,1,1,1,1,1,1,1,1), }\n", b"\0" * 4)
raw("{'descr': '<f4', 'shape': (2,), }\n", b"\0" * 8)
raw("{'descr': '<f4', 'fortran_order': False, 'shape': (2L, 3L), }\n", b"\0" * 24)
PY

# ---- engine and timing_cache
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp" "$OUT.tmp"' EXIT
build() { "$KILN" build "$@" >/dev/null 2>&1 || echo "make_corpus: kiln build $* failed (skipped)" >&2; }
build models/tiny_cnn.onnx -o "$tmp/cnn_fixed.kiln" --shapes input:1x3x16x16 --timing-cache "$tmp/cache.json"
build models/tiny_cnn.onnx -o "$tmp/cnn_profile.kiln" --min-shapes input:1x3x8x8 --opt-shapes input:1x3x16x16 \
      --max-shapes input:2x3x32x32
build models/tiny_cnn.onnx -o "$tmp/cnn_noopt.kiln" --shapes input:1x3x8x8 --no-optimize --no-tactics
for t in conv_with_strides_padding gemm_default_matrix_bias lstm_defaults gru_defaults if loop11 scan9_sum \
         matmul_2d add_bcast maxpool_2d_default averagepool_2d_pads softmax_axis_0 resize_upsample_scales_linear \
         gather_0 gathernd_example_int32 scatternd reshape_extended_dims batchnorm_epsilon \
         layer_normalization_2d_axis0 einsum_batch_matmul convtranspose nonmaxsuppression_center_point_box_format \
         roialign_aligned_false tile expand_dim_changed slice concat_2d_axis_0 cumsum_1d onehot_with_axis \
         where_example cast_FLOAT_to_FLOAT16 dequantizelinear dft transpose_default split_equal_parts_1d; do
  [ -f "$SUITE/node/test_$t/model.onnx" ] && build "$SUITE/node/test_$t/model.onnx" -o "$tmp/$t.kiln"
done
for f in "$tmp"/*.kiln; do put "$f" engine; done
[ -s "$tmp/cache.json" ] && put "$tmp/cache.json" timing_cache
c="$T/timing_cache"
printf '' > "$c/empty"
printf '{}' > "$c/empty_object"
printf '{"kiln_timing_cache": 1, "entries": []}' > "$c/entries_array"
printf '{"kiln_timing_cache": 1, "entries": {"k": {"tactic": 5}, "k2": "st", "k3": {"tactic": "zz"}}}' > "$c/bad_entries"
printf '{"kiln_timing_cache": 1, "entries": {"\\u0000": {"tactic": "st", "ms": 1e999}}}' > "$c/odd_key"
printf '{"kiln_timing_cache": 1, "entries": {"a": {"tactic": "mt"' > "$c/truncated"
head -c 200 models/tiny_cnn.onnx > "$c/not_json"

c="$T/calib_cache"
hdr() { printf '# kiln calibration cache\nversion 1\nkiln 0.1.0\nmodel 0123456789abcdef\ndata fedcba9876543210\nmethod minmax\nsamples %s\ntensors %s\n' "$1" "$2"; }
{ hdr 8 2; printf '"input" 0.0078740157 1\n"conv1 out" 0.031 4.2\n'; } > "$c/valid"
{ hdr 1 3; printf '"a\\"b\\\\c" 1e-30 0\n"\\x01\\xff\\x7f" 3.40282347e+38 3.40282347e+38\n"" 1 1\n'; } > "$c/escapes_extremes"
{ hdr 0 0; } > "$c/no_tensors"
{ hdr 1 2; printf '"x" 1 1\n'; } > "$c/too_few_lines"
{ hdr 1 1; printf '"x" -1 1\n'; } > "$c/negative_scale"
{ hdr 1 1; printf '"x 1 1\n'; } > "$c/unterminated_name"
{ hdr 1 1; printf '"x" nan inf\n'; } > "$c/nonfinite"
{ hdr 1 99999999999; } > "$c/huge_count"
{ hdr 1 1; printf '"x" 1 1\nextra\n'; } > "$c/trailing_text"
printf '# kiln calibration cache\nversion 2\n' > "$c/future_version"
head -c 200 models/tiny_cnn.onnx > "$c/not_text"

c="$T/device_tactics"
sig='NVIDIA H200 (sm_90, 132 SMs, 140 GiB), driver 13.0, runtime 13.0, cuDNN 91400, cuBLASLt 130100'
printf 'kiln device tactics 1\t%s\ng 0100000000000000020000000000000003 7\n8 ff00 2\nm 0a0b0c 1\n' "$sig" > "$c/valid"
printf 'kiln device tactics 1\t%s\r\ng 0102 4\r\nm ff 0' "$sig" > "$c/crlf_no_final_newline"
printf 'kiln device tactics 1\tx\nzz\ng nothex 3\nm 0102 -1\ng 010 1\ng 0102 99999999999\n\ng 0A 1\n' > "$c/malformed"
printf 'g 0102 4\n' > "$c/no_header"
printf 'kiln device tactics 2\tx\ng 0102 4\n' > "$c/other_version"

# ---- serve: byte 0 picks the target (tests/fuzz/fuzz_serve.c): 0-3 an infer request for model 0-3 (bytes 1-2 the
# binary header length, little-endian, 0: none), 0x80 a config.pbtxt
c="$T/serve"
req() { printf "\\x$(printf %02x "$1")\\x$(printf %02x $(($2 & 255)))\\x$(printf %02x $(($2 >> 8)))"; printf '%s' "$3"; }
req 0 0 '{"id":"a","inputs":[{"name":"x","datatype":"FP32","shape":[2,3,1],"data":[1,2,3,4,5,6]},{"name":"ids","datatype":"INT64","shape":[2,4],"data":[[1,2,3,4],[5,6,7,8]]}],"outputs":[{"name":"y","parameters":{"binary_data":true}}]}' > "$c/batch_json"
j='{"inputs":[{"name":"x","datatype":"FP32","shape":[1,3,1],"parameters":{"binary_data_size":12}},{"name":"ids","datatype":"INT64","shape":[1,4],"parameters":{"binary_data_size":32}}],"parameters":{"binary_data_output":true}}'
{ req 0 ${#j} "$j"; head -c 44 /dev/zero | tr '\0' '\1'; } > "$c/batch_binary"
req 1 0 '{"inputs":[{"name":"h","datatype":"FP16","shape":[2,2],"data":[1.5,-2,65504,1e-8]},{"name":"mask","datatype":"BOOL","shape":[3],"data":[true,false,true]},{"name":"px","datatype":"UINT8","shape":[2,3],"data":[0,1,2,253,254,255]}]}' > "$c/fixed_json"
req 2 0 '{"inputs":[{"name":"b","datatype":"BF16","shape":[1,2,2],"data":[[[1,2],[3.5,-0.25]]]}],"outputs":[{"name":"b"}]}' > "$c/bf16_nested"
req 3 0 '{"inputs":[{"name":"i0","datatype":"INT32","shape":[1,2],"data":[1,2]},{"name":"i1","datatype":"INT32","shape":[1,0],"data":[]}]}' > "$c/missing_inputs"
req 0 0 '{"inputs":[{"name":"x","datatype":"FP32","shape":[99999999,3,99999999],"data":[]}]}' > "$c/huge_shape"
printf '\x80max_batch_size: 8\ninput [ { name: "x" data_type: TYPE_FP32 dims: [ 3, -1 ] } ]\noutput [ { name: "y" data_type: TYPE_FP32 dims: [ -1 ] } ]\ndynamic_batching { preferred_batch_size: [ 2, 4 ] max_queue_delay_microseconds: 100 }\ninstance_group [ { count: 2 kind: KIND_CPU } ]\nparameters { key: "precision" value: { string_value: "fp16" } }\n' > "$c/config"
printf '\x80name: "m" # comment\ninput { name: "a\\"b" dims: [1, 2, 3, 4, 5, 6, 7, 8, 9] }\nmax_batch_size: -5\n' > "$c/config_bad"

# ---- image: ImageMagick's convert (tests/cli/test_calib_images.sh uses it too); skipped without it
c="$T/image"
if [ -x /usr/bin/convert ]; then
  im() { /usr/bin/convert "$@" 2>/dev/null || echo "make_corpus: convert $* failed (skipped)" >&2; }
  im -size 7x5 gradient:red-blue -strip -depth 8 "$c/rgb.png"
  im -size 9x3 gradient:white-black -strip -colorspace Gray -depth 8 "$c/grey.png"
  im -size 4x6 gradient:red-green -strip -depth 16 "$c/rgb16.png"
  im -size 5x5 gradient:red-blue -strip -colors 4 "PNG8:$c/palette.png"
  im -size 6x4 gradient:red-none -strip -depth 8 "PNG32:$c/alpha.png"
  im -size 8x8 gradient:blue-yellow -strip -interlace PNG "$c/interlaced.png"
  im -size 11x7 gradient:red-blue -strip -quality 80 "$c/rgb.jpg"
  im -size 9x9 gradient:white-black -strip -colorspace Gray -quality 90 "$c/grey.jpg"
  im -size 17x9 gradient:red-blue -strip -interlace JPEG "$c/progressive.jpg"
  im -size 16x16 gradient:red-blue -strip -sampling-factor 2x2 -quality 50 "$c/subsampled.jpg"
  im -size 4x4 gradient:red-blue -strip -colorspace CMYK "$c/cmyk.jpg"
  [ -s "$c/rgb.png" ] && head -c 60 "$c/rgb.png" > "$c/truncated.png"
  [ -s "$c/rgb.jpg" ] && head -c 150 "$c/rgb.jpg" > "$c/truncated.jpg"
else
  echo "make_corpus: /usr/bin/convert missing: no image seeds" >&2
fi

rm -rf "$OUT"
mv "$OUT.tmp" "$OUT"
for h in onnx tensor_pb npy engine timing_cache calib_cache device_tactics serve image; do
  printf 'make_corpus: %-13s %4d seeds\n' "$h" "$(ls "$OUT/$h" | wc -l)"
done

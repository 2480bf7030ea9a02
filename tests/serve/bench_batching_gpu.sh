#!/usr/bin/env bash
# Dynamic batching on the GPU, one command on a machine with an NVIDIA GPU (reported, not a CI
# test): builds kiln with the CUDA module, generates the models, serves them with
# `kiln serve --device cuda` and runs `kiln loadgen` at concurrency 32 with batching off, derived
# from the engine, and forced to batches of 8 (tests/serve/bench_batching.sh prints the table).
#
#   tests/serve/bench_batching_gpu.sh [REQUESTS] [MODELS]      (from the repository root)
#
# REQUESTS per run (default 4000; ResNet-50 runs REQUESTS/8, the MLP REQUESTS/4); MODELS a subset
# of "resnet50 mlp tiny cls" (default "resnet50 mlp tiny", plus cls when models/ocr has it).
# Needs what the CUDA helper's builds need (cmake, gcc, nvcc with cuDNN/cuBLASLt, protobuf-c,
# jansson, xxhash, libmicrohttpd, libcurl) and a Python with onnx + numpy for the generators.
# Environment: BUILD (default build-gpu), KILN_MODELS (default models/, missing models are
# generated into it with scripts/gen_models.py), THREADS (host threads per context, default 4).
set -euo pipefail
cd "$(dirname "$0")/../.."
REQUESTS="${1:-4000}"
BUILD="${BUILD:-build-gpu}"
export KILN_MODELS="${KILN_MODELS:-$PWD/models}"
THREADS="${THREADS:-4}"
command -v nvidia-smi > /dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true

PY=""
for p in /usr/bin/python3 python3; do "$p" -c 'import onnx, numpy' 2>/dev/null && { PY="$p"; break; }; done
[ -n "$PY" ] || { echo "bench_batching_gpu: no Python with onnx and numpy" >&2; exit 1; }

cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo > "$BUILD.cmake.log" 2>&1 || { tail -20 "$BUILD.cmake.log"; exit 1; }
cmake --build "$BUILD" --target kiln -j"$(nproc)" > "$BUILD.build.log" 2>&1 || { tail -30 "$BUILD.build.log"; exit 1; }
cmake --build "$BUILD" --target kiln_cuda -j"$(nproc)" >> "$BUILD.build.log" 2>&1 ||
  { tail -30 "$BUILD.build.log"; echo "bench_batching_gpu: libkiln_cuda.so was not built (no nvcc/cuDNN? see $BUILD.cmake.log)" >&2; exit 1; }

mkdir -p "$KILN_MODELS"
"$PY" scripts/gen_models.py --out "$KILN_MODELS" --only resnet50 --only tiny_cnn > /dev/null
DEFAULT="resnet50 mlp tiny"
[ -f "$KILN_MODELS/ocr/ch_ppocr_mobile_v2.0_cls_infer.onnx" ] && DEFAULT="$DEFAULT cls"
DEVICE=cuda exec tests/serve/bench_batching.sh "$BUILD/kiln" "$THREADS" "$REQUESTS" "${2:-$DEFAULT}"

#!/usr/bin/env bash
# Builds the kiln serve container image from deploy/Dockerfile and checks that it serves: a
# container over a model repository on a volume answers metadata and an inference equal to
# `kiln run`, its HEALTHCHECK turns healthy, and `docker stop` (SIGTERM) ends it with status 0.
# Not a CI test (CI has no Docker daemon); run by hand where Docker works:
#
#   deploy/test_image.sh [build/kiln]      (from the repository root; build/kiln makes the reference)
#   SKIP_BUILD=1 TAG=kiln:0.1.0 deploy/test_image.sh     (an image already built)
#
# Base images: debian:bookworm and debian:bookworm-slim are used when present or pullable; where
# no registry but Debian's is reachable, DEBOOTSTRAP=1 makes both from deb.debian.org with
# debootstrap (a minbase bookworm root file system imported as both tags).
set -euo pipefail
cd "$(dirname "$0")/.."
KILN_REF="${1:-build/kiln}"
TAG="${TAG:-kiln:test}"
# SETUP=1 (root, Debian): installs Debian's docker.io and debootstrap when missing and starts
# dockerd when none answers (what was done to run this on the development machine)
if [ "${SETUP:-0}" = 1 ]; then
  command -v dockerd > /dev/null && command -v debootstrap > /dev/null ||
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends docker.io debootstrap; }
  if ! docker info > /dev/null 2>&1; then
    dockerd > /var/log/dockerd-kiln-test.log 2>&1 &
    for _ in $(seq 1 60); do docker info > /dev/null 2>&1 && break; sleep 0.5; done
  fi
fi
docker info > /dev/null 2>&1 || { echo "test_image: no Docker daemon (docker info failed; SETUP=1 starts one)" >&2; exit 1; }
if ! docker image inspect debian:bookworm > /dev/null 2>&1 && ! docker pull -q debian:bookworm > /dev/null 2>&1; then
  [ "${DEBOOTSTRAP:-0}" = 1 ] || { echo "test_image: no debian:bookworm image (set DEBOOTSTRAP=1 to make one)" >&2; exit 1; }
  root="$(mktemp -d)"
  debootstrap --variant=minbase bookworm "$root" http://deb.debian.org/debian > "$root.log" 2>&1 ||
    { tail -5 "$root.log"; exit 1; }
  tar -C "$root" -c . | docker import -c 'CMD ["bash"]' - debian:bookworm > /dev/null
  rm -rf "$root" "$root.log"
fi
docker image inspect debian:bookworm-slim > /dev/null 2>&1 || docker pull -q debian:bookworm-slim > /dev/null 2>&1 ||
  docker tag debian:bookworm debian:bookworm-slim
if [ "${SKIP_BUILD:-0}" != 1 ]; then   # SKIP_BUILD=1: test the image TAG as it is
  log="$(mktemp)"
  DOCKER_BUILDKIT=0 docker build -f deploy/Dockerfile -t "$TAG" . > "$log" 2>&1 ||
    { tail -20 "$log"; echo "test_image: docker build failed (log: $log)" >&2; exit 1; }
  rm -f "$log"
fi
echo "image $TAG: $(docker image inspect -f '{{.Size}}' "$TAG" | awk '{printf "%.0f MB", $1 / 1e6}')"

TMP="$(mktemp -d)"
NAME="kiln-test-$$"
cleanup() { docker rm -f "$NAME" > /dev/null 2>&1 || true; rm -rf "$TMP"; }
trap cleanup EXIT
mkdir -p "$TMP/repo/tiny_cnn/1"
cp "${KILN_MODELS:-models}/tiny_cnn.onnx" "$TMP/repo/tiny_cnn/1/model.onnx"
printf 'max_batch_size: 4\ninput [ { name: "input" data_type: TYPE_FP32 dims: [3, 32, 32] } ]\n' > "$TMP/repo/tiny_cnn/config.pbtxt"
chmod -R a+rwX "$TMP/repo"   # the image runs as uid 10001: the engine cache is written beside the model
docker run -d --name "$NAME" -p 127.0.0.1::8000 -v "$TMP/repo:/models" "$TAG" > /dev/null
PORT="$(docker port "$NAME" 8000/tcp | head -1 | sed 's/.*://')"
for _ in $(seq 1 120); do
  [ "$(docker inspect -f '{{.State.Health.Status}}' "$NAME")" = healthy ] && break
  sleep 1
done
[ "$(docker inspect -f '{{.State.Health.Status}}' "$NAME")" = healthy ] ||
  { docker logs "$NAME" | tail -20; echo "test_image: the container did not become healthy" >&2; exit 1; }
curl -sf "http://127.0.0.1:$PORT/v2/models/tiny_cnn" > /dev/null
python3 - "$TMP" <<'PY'
import json, struct, sys
t = sys.argv[1]
vals = [((i * 29) % 97) / 97.0 - 0.5 for i in range(3 * 32 * 32)]
json.dump({"inputs": [{"name": "input", "shape": [1, 3, 32, 32], "datatype": "FP32", "data": vals}]}, open(t + "/req.json", "w"))
h = "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 3, 32, 32), }"
h += " " * ((64 - (10 + len(h) + 1) % 64) % 64) + "\n"
open(t + "/in.npy", "wb").write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(h)) + h.encode() + struct.pack("<3072f", *vals))
PY
curl -sf -X POST "http://127.0.0.1:$PORT/v2/models/tiny_cnn/infer" --data-binary @"$TMP/req.json" > "$TMP/resp.json"
"$KILN_REF" run "$TMP/repo/tiny_cnn/1/model.onnx" --input input="$TMP/in.npy" --output-dir "$TMP/ref" > /dev/null
python3 - "$TMP" <<'PY'
import json, struct, sys
t = sys.argv[1]
ref = open(t + "/ref/logits.npy", "rb").read()
ref = struct.unpack("<10f", ref[10 + struct.unpack("<H", ref[8:10])[0]:])
out = json.load(open(t + "/resp.json"))["outputs"][0]["data"]
err = max(abs(a - b) for a, b in zip(out, ref))
assert len(out) == 10 and err < 1e-5, err
print("container inference equals kiln run (max difference %.2g)" % err)
PY
docker stop -t 30 "$NAME" > /dev/null
rc="$(docker inspect -f '{{.State.ExitCode}}' "$NAME")"
[ "$rc" = 0 ] || { docker logs "$NAME" | tail -5; echo "test_image: exit status $rc after docker stop" >&2; exit 1; }
docker logs "$NAME" 2>&1 | grep -q "SIGTERM: draining" || { echo "test_image: no drain on SIGTERM" >&2; exit 1; }
echo "test_image: $TAG builds, serves (healthy, metadata, inference) and stops cleanly on SIGTERM"

#!/usr/bin/env bash
# Model lifecycle through the repository extension, as Triton's: server readiness follows the
# models asked to be loaded (a directory the index finds does not count; unloading a model that
# failed to load restores readiness). usage: test_lifecycle.sh KILN
KILN="$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"
source "$(dirname "$0")/lib.sh"
mkdir -p "$TMP/repo/tiny/1"
cp "$MODELS/tiny_cnn.onnx" "$TMP/repo/tiny/1/model.onnx"
start_server "$TMP/repo"
ready() { http_code GET /v2/health/ready; }
index() { http_code POST /v2/repository/index > /dev/null; cat "$TMP/body"; }

# 1. readiness: a new directory listed by the index, a failed load, an unload
[ "$(ready)" = 200 ] || fail "not ready at start"
mkdir "$TMP/repo/incoming"   # e.g. a model being copied in
index | grep -q '"name":"incoming","state":"UNAVAILABLE"' || fail "the index does not list the new directory: $(cat "$TMP/body")"
[ "$(ready)" = 200 ] || fail "a directory found by the index (never loaded) made the server unready"
rmdir "$TMP/repo/incoming"
index | grep -q '"incoming"' && fail "the index still lists a directory that is gone: $(cat "$TMP/body")"
mkdir -p "$TMP/repo/broken/1" && echo "not onnx" > "$TMP/repo/broken/1/model.onnx"
[ "$(http_code POST /v2/repository/models/broken/load)" = 400 ] || fail "loading a broken model: $(cat "$TMP/body")"
[ "$(ready)" = 503 ] || fail "ready although a model asked to be loaded failed"
[ "$(http_code POST /v2/repository/models/broken/unload)" = 200 ] || fail "unloading the broken model: $(cat "$TMP/body")"
[ "$(ready)" = 200 ] || fail "still unready after the model that failed was unloaded"
index | grep -q '"name":"broken","state":"UNAVAILABLE","reason":"unloaded"' || fail "index after the unload: $(cat "$TMP/body")"
[ "$(http_code POST /v2/repository/models/tiny/unload)" = 200 ] && [ "$(ready)" = 200 ] || fail "unloading a ready model"
[ "$(http_code POST /v2/repository/models/tiny/load)" = 200 ] && [ "$(ready)" = 200 ] || fail "loading it again"
pass "readiness follows the models asked to be loaded (index, failed load, unload)"

stop_server

#!/usr/bin/env bash
# Files of the model repository changed under a running server: a model.kiln overwritten or
# truncated in place does not touch the loaded model (it was read into memory, as Triton reads
# model files), and the server keeps answering. usage: test_repo_files.sh KILN
KILN="$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"
source "$(dirname "$0")/lib.sh"
mkdir -p "$TMP/repo/eng/1"
"$KILN" build "$MODELS/tiny_cnn.onnx" -o "$TMP/repo/eng/1/model.kiln" > /dev/null || fail "kiln build"
"$KILN" build "$MODELS/tiny_cnn.onnx" -o "$TMP/other.kiln" --shapes input:1x3x32x32 > /dev/null || fail "kiln build --shapes"
cmp -s "$TMP/repo/eng/1/model.kiln" "$TMP/other.kiln" && fail "the two engines should differ"
python3 -c 'import json; json.dump({"inputs": [{"name": "input", "shape": [1, 3, 32, 32], "datatype": "FP32", "data": [((i * 37) % 101) / 101.0 for i in range(3072)]}]}, open("'"$TMP"'/req.json", "w"))'
start_server "$TMP/repo"
infer() { http_code POST "/v2/models/$1/infer" --data-binary @"$TMP/req.json"; }

# 1. model.kiln rewritten in place (cp truncates and writes the same inode), then truncated
[ "$(infer eng)" = 200 ] || fail "first request: $(cat "$TMP/body")"
cp "$TMP/body" "$TMP/first.json"
cp "$TMP/other.kiln" "$TMP/repo/eng/1/model.kiln"
[ "$(infer eng)" = 200 ] || fail "request after model.kiln was overwritten in place: $(cat "$TMP/body")"
cmp -s "$TMP/body" "$TMP/first.json" || fail "the loaded model changed when its file was overwritten"
truncate -s 8192 "$TMP/repo/eng/1/model.kiln"
code="$(infer eng || true)"
kill -0 "$SPID" 2>/dev/null || fail "the server died when model.kiln was truncated under it"
[ "$code" = 200 ] || fail "request after model.kiln was truncated: HTTP $code $(cat "$TMP/body")"
cmp -s "$TMP/body" "$TMP/first.json" || fail "the loaded model changed when its file was truncated"
pass "model.kiln overwritten and truncated in place: the loaded model keeps answering, unchanged"

stop_server

#!/usr/bin/env bash
# Files of the model repository changed under a running server: a model.kiln overwritten or
# truncated in place does not touch the loaded model (it was read into memory, as Triton reads
# model files), and the server keeps answering; an ONNX model's external data replaced is served
# after a reload or a restart (the engine cache is keyed by it). usage: test_repo_files.sh KILN
KILN="$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"
source "$(dirname "$0")/lib.sh"
PY="$(onnx_python)"
mkdir -p "$TMP/repo/eng/1"
"$KILN" build "$MODELS/tiny_cnn.onnx" -o "$TMP/repo/eng/1/model.kiln" > /dev/null || fail "kiln build"
"$KILN" build "$MODELS/tiny_cnn.onnx" -o "$TMP/other.kiln" --shapes input:1x3x32x32 > /dev/null || fail "kiln build --shapes"
cmp -s "$TMP/repo/eng/1/model.kiln" "$TMP/other.kiln" && fail "the two engines should differ"
python3 -c 'import json; json.dump({"inputs": [{"name": "input", "shape": [1, 3, 32, 32], "datatype": "FP32", "data": [((i * 37) % 101) / 101.0 for i in range(3072)]}]}, open("'"$TMP"'/req.json", "w"))'
"$PY" -c 'import json, numpy as np, sys; d = json.load(open(sys.argv[1]))["inputs"][0]; np.save(sys.argv[2], np.array(d["data"], np.float32).reshape(d["shape"]))' "$TMP/req.json" "$TMP/x.npy"

# ext: tiny_cnn with its weights in external data (weights.bin); new/: the same with the
# classifier's weights tripled, model.onnx byte-identical
mkdir -p "$TMP/repo/ext/1" "$TMP/new"
"$PY" - "$MODELS/tiny_cnn.onnx" "$TMP" <<'PYEOF' || fail "writing the external-data model"
import sys, onnx
from onnx import numpy_helper
src, t = sys.argv[1], sys.argv[2]
m = onnx.load(src)
onnx.save(m, t + "/repo/ext/1/model.onnx", save_as_external_data=True, all_tensors_to_one_file=True,
          location="weights.bin", size_threshold=0)
m = onnx.load(src)
for w in m.graph.initializer:
    if "fc" in w.name:
        w.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(w) * 3, w.name))
onnx.save(m, t + "/new/model.onnx", save_as_external_data=True, all_tensors_to_one_file=True,
          location="weights.bin", size_threshold=0)
PYEOF
cmp -s "$TMP/repo/ext/1/model.onnx" "$TMP/new/model.onnx" || fail "the two model.onnx should be identical"
cmp -s "$TMP/repo/ext/1/weights.bin" "$TMP/new/weights.bin" && fail "the two weights.bin should differ"

start_server "$TMP/repo"
infer() { http_code POST "/v2/models/$1/infer" --data-binary @"$TMP/req.json"; }
# same_as_run: the last response's output equals `kiln run` of ext's files as they are now
same_as_run() {
  rm -rf "$TMP/run" && "$KILN" run "$TMP/repo/ext/1/model.onnx" --input input="$TMP/x.npy" --output-dir "$TMP/run" > /dev/null ||
    fail "kiln run"
  "$PY" - "$TMP/body" "$TMP/run" <<'PYEOF'
import json, os, sys, numpy as np
out = json.load(open(sys.argv[1]))["outputs"][0]
ref = np.load(os.path.join(sys.argv[2], out["name"] + ".npy")).ravel()
got = np.array(out["data"], np.float32)
assert np.abs(got - ref).max() <= 1e-5 * max(1.0, np.abs(ref).max()), (got[:3], ref[:3])
PYEOF
}

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

# 2. an ONNX model's external data replaced (model.onnx unchanged): a reload, and a restart, serve
# the new weights; the engine cache is keyed by them
[ "$(infer ext)" = 200 ] || fail "ext: $(cat "$TMP/body")"
same_as_run || fail "ext: the first answer differs from kiln run"
cp "$TMP/body" "$TMP/ext_old.json"
cp "$TMP/new/weights.bin" "$TMP/repo/ext/1/weights.bin"
[ "$(http_code POST /v2/repository/models/ext/load)" = 200 ] || fail "ext reload: $(cat "$TMP/body")"
[ "$(infer ext)" = 200 ] || fail "ext after the reload: $(cat "$TMP/body")"
cmp -s "$TMP/body" "$TMP/ext_old.json" && fail "the reload kept serving the old external weights"
same_as_run || fail "ext: the answer after the reload differs from kiln run of the new weights"
stop_server
rm -f "$TMP/repo/eng/1/model.kiln"   # truncated above
start_server "$TMP/repo"
grep -q "engine from cache .*/ext/1/.kiln-cache-" "$TMP/server.log" || fail "the restart did not reuse the new weights' cached engine"
[ "$(infer ext)" = 200 ] || fail "ext after the restart: $(cat "$TMP/body")"
same_as_run || fail "ext: the answer after the restart differs from kiln run of the new weights"
n="$(ls -A "$TMP/repo/ext/1" | grep -c '^\.kiln-cache-' || true)"
[ "$n" = 2 ] || fail "expected one cached engine per weights, found $n: $(ls -A "$TMP/repo/ext/1")"
pass "external data replaced: a reload and a restart serve the new weights (the cache is keyed by them)"

stop_server

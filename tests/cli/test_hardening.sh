#!/usr/bin/env bash
# Hardening checks of the command line (issue 6): terminal escapes in model-supplied names,
# files kiln writes (atomic replacement, -o naming the model, timing caches that are not
# timing caches), output file names (injective, long names, outputs.json), non-regular and
# lying input files, strict number/shape/--input parsing in every command.
set -uo pipefail
KILN=$1
. "$(dirname "$0")/../lib.sh"
same() { cmp -s "$1" "$2"; }

M=models/tiny_cnn.onnx
[ -f "$M" ] || { echo "SKIP: $M missing (run scripts/bootstrap.sh)"; exit 77; }
S=input:1x3x32x32
$PY scripts/make_inputs.py "$M" --shape input=1x3x32x32 --out "$T/in" --seed 3 > /dev/null
cp "$M" "$T/model.onnx"
cp "$M" "$T/model.orig"

# ---- item 3: control characters in model-supplied names never reach the terminal raw
$PY - "$T" <<'PYEOF'
import sys, numpy as np, onnx
from onnx import helper, TensorProto
t = sys.argv[1]
E = "\x1b]0;pwned\x07\x1b[31m"
x = helper.make_tensor_value_info("x" + E, TensorProto.FLOAT, [2, 3])
outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2, 3]) for n in ("y" + E + "\r\n\x9b", "a/b", "a_b", ".", "..", "L" * 300, "%2F")]
nodes = [helper.make_node("Relu", ["x" + E], [o.name], name="node" + E + "\u009b" + str(i)) for i, o in enumerate(outs)]
m = helper.make_model(helper.make_graph(nodes, "g" + E, [x], outs), opset_imports=[helper.make_opsetid("", 13)],
                      producer_name="evil" + E)
onnx.save(m, f"{t}/names.onnx")
bad = helper.make_model(helper.make_graph([helper.make_node("Fancy" + E, ["x" + E], ["y"], domain="ex" + E)], "g",
                        [x], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]),
                        opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("ex" + E, 1)])
onnx.save(bad, f"{t}/badop.onnx")
np.save(f"{t}/x.npy", np.arange(6, dtype=np.float32).reshape(2, 3) - 3)
PYEOF
X="x"$'\x1b]0;pwned\x07\x1b[31m'
raw_ctrl() { # no C0 control (other than \n), DEL or UTF-8 C1 control in the file
  $PY - "$1" <<'PYEOF'
import sys
b = open(sys.argv[1], "rb").read()
bad = [c for c in b if (c < 0x20 and c != 0x0a) or c == 0x7f]
s = b.decode("utf-8", "replace")
bad += [c for c in s if 0x80 <= ord(c) <= 0x9f]
sys.exit(1 if bad else 0)
PYEOF
}
check_clean() { # name cmd...: output (stdout+stderr) has no raw control characters
  local name=$1; shift
  timeout 60 "$@" > "$T/esc.txt" 2>&1
  if raw_ctrl "$T/esc.txt"; then ok "$name"; else bad "$name: raw control characters: $(head -c 300 "$T/esc.txt" | od -c | head -3)"; fi
}
check_clean "escape: info" "$KILN" info "$T/names.onnx"
grep -q 'x\\x1b\]0;pwned\\x07' "$T/esc.txt" && ok "escape: info shows \\xNN" || bad "escape: info shows \\xNN: $(head -5 "$T/esc.txt")"
check_clean "escape: run" "$KILN" run "$T/names.onnx" --input "$X=$T/x.npy" --output-dir "$T/names_out"
check_clean "escape: build --passes-report" "$KILN" build "$T/names.onnx" -o "$T/names.kiln" --passes-report
check_clean "escape: inspect" "$KILN" inspect "$T/names.onnx"
check_clean "escape: inspect --json" "$KILN" inspect "$T/names.onnx" --json
check_clean "escape: error quoting an op type" "$KILN" run "$T/badop.onnx" --input "$X=$T/x.npy" --output-dir "$T/x"
check_clean "escape: info of unsupported ops" "$KILN" info "$T/badop.onnx"
check_clean "escape: error quoting --input" "$KILN" run "$T/names.onnx" --input $'q\x1b[2J=/nonexistent' --output-dir "$T/x"

# ---- item 6: output file names are injective, bounded, indexed in outputs.json
$PY - "$T/names_out" "$T/x.npy" <<'PYEOF' && ok "outputs: one file per output, all values, outputs.json" || bad "outputs: injective names / outputs.json"
import sys, os, json, numpy as np
d, x = sys.argv[1], np.load(sys.argv[2])
idx = json.load(open(os.path.join(d, "outputs.json")))
E = "\x1b]0;pwned\x07\x1b[31m"
names = ["y" + E + "\r\n\x9b", "a/b", "a_b", ".", "..", "L" * 300, "%2F"]
assert list(idx) == names, list(idx)
files = list(idx.values())
assert len(set(f.lower() for f in files)) == len(files), files
for f in files:
    assert "/" not in f and not f.startswith(".") and len(f) <= 255 and f.endswith(".npy"), f
    np.testing.assert_array_equal(np.load(os.path.join(d, f)), np.maximum(x, 0))
assert sorted(os.listdir(d)) == sorted(files + ["outputs.json"]), os.listdir(d)
PYEOF

# an output file never replaces an input file or the model
mkdir -p "$T/io"
cp "$T/in/input.npy" "$T/io/logits.npy"
cp "$T/io/logits.npy" "$T/io.orig"
expect_err "output would replace an input" "refusing to overwrite" "$KILN" run "$M" --input input="$T/io/logits.npy" --output-dir "$T/io"
same "$T/io/logits.npy" "$T/io.orig" && ok "input file untouched" || bad "input file overwritten by an output"

# ---- item 5: every file is replaced atomically; -o never names the input model
expect_ok "build an engine" "$KILN" build "$M" -o "$T/e.kiln" --shapes $S
cp "$T/e.kiln" "$T/e.orig"
# a write that fails half-way (file size limit) must leave the previous engine byte-identical
(ulimit -f 8; trap '' XFSZ; exec "$KILN" build "$M" -o "$T/e.kiln" --shapes input:2x3x32x32) > "$T/err.txt" 2>&1
rc=$?
if [ $rc -ne 0 ] && same "$T/e.kiln" "$T/e.orig"; then ok "failed engine write keeps the old engine"; else bad "failed engine write keeps the old engine (rc=$rc)"; fi
[ -z "$(ls -A "$T" | grep '\.tmp-')" ] && ok "failed write leaves no temporary" || bad "temporary left: $(ls -A "$T")"
# a build killed while writing (SIGXFSZ at the file size limit) leaves the previous engine too
{ (ulimit -f 8; exec "$KILN" build "$M" -o "$T/e.kiln" --shapes input:2x3x32x32) > "$T/err.txt" 2>&1; } 2> /dev/null
rc=$?
if [ $rc -ge 128 ] && same "$T/e.kiln" "$T/e.orig"; then ok "killed engine write keeps the old engine"; else bad "killed engine write keeps the old engine (rc=$rc)"; fi
rm -f "$T"/.e.kiln.tmp-*
expect_err "failed build (bad option)" "bad shape" "$KILN" build "$M" -o "$T/e.kiln" --shapes input:1x3xx32
same "$T/e.kiln" "$T/e.orig" && ok "failed build keeps the old engine" || bad "failed build keeps the old engine"
expect_err "failed build (unsupported op)" "unsupported" "$KILN" build "$T/badop.onnx" -o "$T/e.kiln"
same "$T/e.kiln" "$T/e.orig" && ok "failed build (unsupported op) keeps the old engine" || bad "unsupported op build changed the engine"
ln "$T/model.onnx" "$T/hard.onnx"
ln -s model.onnx "$T/sym.onnx"
mkdir -p "$T/sub"
for o in "$T/model.onnx" "$T/./model.onnx" "$T/sub/../model.onnx" "$T/hard.onnx" "$T/sym.onnx"; do
  expect_err "-o is the model ($o)" "names the input model" "$KILN" build "$T/model.onnx" -o "$o" --shapes $S
done
expect_err "-o is the model (model given via symlink)" "names the input model" "$KILN" build "$T/sym.onnx" -o "$T/model.onnx"
same "$T/model.onnx" "$T/model.orig" && [ -L "$T/sym.onnx" ] && ok "model untouched by -o" || bad "model changed by -o"
# engines written through a symlink replace its target; a directory is not replaced
ln -s e.kiln "$T/elink.kiln"
expect_ok "build to a symlink" "$KILN" build "$M" -o "$T/elink.kiln" --shapes input:2x3x32x32
[ -L "$T/elink.kiln" ] && ! same "$T/e.kiln" "$T/e.orig" && ok "symlink kept, target replaced" || bad "symlink replaced"
mkdir "$T/adir"
expect_err "-o a directory" "not a regular file" "$KILN" build "$M" -o "$T/adir" --shapes $S
# concurrent readers never see a partial engine while builds replace it
cp "$T/e.orig" "$T/c.kiln"
( for i in 1 2 3 4 5 6; do "$KILN" build "$M" -o "$T/c.kiln" --shapes $S --no-tactics > /dev/null 2>&1; done ) &
bpid=$!
torn=0
while kill -0 $bpid 2> /dev/null; do
  "$KILN" inspect "$T/c.kiln" > /dev/null 2>&1 || torn=$((torn + 1))
done
wait $bpid
[ $torn -eq 0 ] && ok "concurrent readers see whole engines" || bad "concurrent readers saw $torn broken engine(s)"

# conformance --write-passes replaces its list atomically, never appends to or truncates it early
$PY - "$T/conf/node/test_relu" <<'PYEOF'
import sys, os, numpy as np, onnx
from onnx import helper, TensorProto, numpy_helper
d = sys.argv[1]
os.makedirs(f"{d}/test_data_set_0")
x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])
y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])
onnx.save(helper.make_model(helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y]),
          opset_imports=[helper.make_opsetid("", 13)]), f"{d}/model.onnx")
a = np.array([-1, 0, 2], np.float32)
open(f"{d}/test_data_set_0/input_0.pb", "wb").write(numpy_helper.from_array(a, "x").SerializeToString())
open(f"{d}/test_data_set_0/output_0.pb", "wb").write(numpy_helper.from_array(np.maximum(a, 0), "y").SerializeToString())
PYEOF
printf 'old/list\n' > "$T/passes.txt"
expect_ok "conformance --write-passes" "$KILN" conformance "$T/conf" --write-passes "$T/passes.txt"
[ "$(cat "$T/passes.txt")" = "node/test_relu" ] && ok "pass list replaced" || bad "pass list: $(cat "$T/passes.txt")"
expect_err "conformance --write-passes to a directory" "not a regular file" "$KILN" conformance "$T/conf" --write-passes "$T/adir"
# --jobs N: tests run in parallel processes, reported in order with the same verdicts as --jobs 1,
# a failing test and a hanging one (killed by --timeout) included
$PY - "$T/conf/node" <<'PYEOF'
import sys, os, numpy as np, onnx
from onnx import helper, TensorProto, numpy_helper
def save(d, nodes, ins, outs, feeds, expect):
    os.makedirs(f"{d}/test_data_set_0")
    onnx.save(helper.make_model(helper.make_graph(nodes, "g", ins, outs), opset_imports=[helper.make_opsetid("", 13)]),
              f"{d}/model.onnx")
    for i, (n, a) in enumerate(feeds):
        open(f"{d}/test_data_set_0/input_{i}.pb", "wb").write(numpy_helper.from_array(a, n).SerializeToString())
    open(f"{d}/test_data_set_0/output_0.pb", "wb").write(numpy_helper.from_array(expect, "y").SerializeToString())
v = lambda n, t, s: helper.make_tensor_value_info(n, t, s)
a = np.array([-1, 0, 2], np.float32)
save(f"{sys.argv[1]}/test_neg_wrong", [helper.make_node("Neg", ["x"], ["y"])], [v("x", TensorProto.FLOAT, [3])],
     [v("y", TensorProto.FLOAT, [3])], [("x", a)], a)          # expects x itself: fails
body = helper.make_graph([helper.make_node("Identity", ["c"], ["c_out"]), helper.make_node("Identity", ["s"], ["s_out"])],
                         "body", [v("i", TensorProto.INT64, []), v("c", TensorProto.BOOL, []), v("s", TensorProto.FLOAT, [3])],
                         [v("c_out", TensorProto.BOOL, []), v("s_out", TensorProto.FLOAT, [3])])
save(f"{sys.argv[1]}/test_loop_hang", [helper.make_node("Loop", ["m", "c", "x"], ["y"], body=body)],
     [v("m", TensorProto.INT64, []), v("c", TensorProto.BOOL, []), v("x", TensorProto.FLOAT, [3])],
     [v("y", TensorProto.FLOAT, [3])], [("m", np.array(1 << 50, np.int64)), ("c", np.array(True)), ("x", a)], a)
PYEOF
"$KILN" conformance "$T/conf" --timeout 2 > "$T/j1.txt" 2>&1
"$KILN" conformance "$T/conf" --timeout 2 --jobs 3 > "$T/j3.txt" 2>&1
if cmp -s "$T/j1.txt" "$T/j3.txt" && grep -q "^FAIL   node/test_loop_hang: HANG" "$T/j3.txt" &&
   grep -q "^FAIL   node/test_neg_wrong: set 0" "$T/j3.txt" && grep -q "^pass   node/test_relu" "$T/j3.txt" &&
   tail -1 "$T/j3.txt" | grep -q "^1 passed, 2 failed, 0 skipped"; then
  ok "conformance --jobs 3 = --jobs 1 (pass, fail, hang)"
else
  bad "conformance --jobs: $(cat "$T/j1.txt") /// $(cat "$T/j3.txt")"
fi
expect_err "conformance --jobs 0" "--jobs" "$KILN" conformance "$T/conf" --jobs 0

# ---- item 4: --timing-cache never replaces a file that is not a kiln timing cache
head -c 3000 /dev/urandom > "$T/garbage.bin"
cp "$T/garbage.bin" "$T/garbage.orig"
echo '{"entries": {}}' > "$T/other.json"
cp "$T/other.json" "$T/other.orig"
for c in "$T/model.onnx:$T/model.orig" "$T/garbage.bin:$T/garbage.orig" "$T/other.json:$T/other.orig"; do
  f=${c%%:*}; o=${c#*:}
  expect_err "timing cache: $(basename "$f") refused" "not a kiln timing cache" "$KILN" build "$M" -o "$T/tc.kiln" --shapes $S --timing-cache "$f"
  same "$f" "$o" && ok "timing cache: $(basename "$f") untouched" || bad "timing cache: $(basename "$f") was overwritten"
done
expect_err "timing cache: a directory" "not a regular file" "$KILN" build "$M" -o "$T/tc.kiln" --shapes $S --timing-cache "$T/adir"
expect_ok "timing cache: created" "$KILN" build "$M" -o "$T/tc1.kiln" --shapes $S --timing-cache "$T/cache.json"
expect_ok "timing cache: reused" "$KILN" build "$M" -o "$T/tc2.kiln" --shapes $S --timing-cache "$T/cache.json"
same "$T/tc1.kiln" "$T/tc2.kiln" && ok "timing cache: same engine" || bad "timing cache: engines differ"
expect_err "-o is the timing cache" "names the timing cache" "$KILN" build "$M" -o "$T/cache.json" --shapes $S --timing-cache "$T/cache.json"

# ---- item 7: non-regular files and .npy files that claim more data than they hold
expect_err "directory as model" "not a regular file" "$KILN" info "$T/adir"
expect_err "directory as input" "not a regular file" "$KILN" run "$M" --input input="$T/adir" --output-dir "$T/x"
mkfifo "$T/fifo"
expect_err "FIFO as input" "not a regular file" "$KILN" run "$M" --input input="$T/fifo" --output-dir "$T/x"
expect_err "FIFO as model (engine probe must not block)" "not a regular file" "$KILN" run "$T/fifo" --output-dir "$T/x"
$PY - "$T/huge.npy" <<'PYEOF'
import sys
h = b"{'descr': '<f4', 'fortran_order': False, 'shape': (2147483647,), }"
h += b" " * (64 - 10 - len(h) - 1 + 64) + b"\n"
h = h[:118] + b"\n" if len(h) > 118 else h
open(sys.argv[1], "wb").write(b"\x93NUMPY\x01\x00" + bytes([len(h), 0]) + h + bytes(16))
PYEOF
[ "$(stat -c %s "$T/huge.npy")" -eq 144 ] || bad "huge.npy is not 144 bytes"
expect_err "144-byte .npy claiming 8 GiB" "data is truncated" "$KILN" run "$M" --input input="$T/huge.npy" --output-dir "$T/x"

# ---- item 10: every number of every command is parsed strictly
E=models/tiny_cnn.onnx
for a in "--threads abc" "--threads -1" "--threads 1e11" "--threads 4x" "--iterations abc" "--iterations 0" \
         "--iterations -5" "--iterations 99999999999999999999" "--batch 0" "--batch -3" "--batch 2.5" "--warmup x" \
         "--duration nan" "--duration inf" "--duration -1" "--duration 0" "--duration 1s" "--duration 0x10"; do
  expect_err "bench $a" "${a%% *}" "$KILN" bench "$E" --shapes $S $a
done
for s in "input:1x3x32x99999999999999999999" "input:1x3x32" "input:1x3xx32" "input:1x3x32x" "input:" "input:1x3x32x32x1x1x1x1x1" \
         "input:-1x3x32x32" "input:1x3x32x+32" ":1x3x32x32" "input1x3x32x32" "input:1x3x32x32,,b:1" "input:1,input:2" "nosuch:1x2"; do
  expect_err "bench --shapes $s" "shape\|not an input\|input named twice" "$KILN" bench "$E" --iterations 1 --shapes "$s"
  expect_err "inspect --shapes $s" "shape\|not an input\|input named twice" "$KILN" inspect "$E" --shapes "$s"
done
for s in "input:1x3x32x99999999999999999999" "input:1x3xx32" "input:1x3x32x32x1x1x1x1x1" ":1x3x32x32" "input:1,input:2"; do
  expect_err "build --shapes $s" "bad shape" "$KILN" build "$E" -o "$T/s.kiln" --shapes "$s"
  expect_err "build --min-shapes $s" "bad shape" "$KILN" build "$E" -o "$T/s.kiln" --min-shapes "$s" --max-shapes "$S"
done
expect_err "run --threads abc" "--threads" "$KILN" run "$E" --threads abc --input input="$T/in/input.npy" --output-dir "$T/x"
expect_err "inspect --iterations 0" "--iterations" "$KILN" inspect "$E" --iterations 0
expect_err "inspect --iterations 1e3" "--iterations" "$KILN" inspect "$E" --iterations 1e3
expect_err "conformance --timeout abc" "--timeout" "$KILN" conformance "$T/conf" --timeout abc
expect_err "conformance --timeout 0" "--timeout" "$KILN" conformance "$T/conf" --timeout 0
expect_err "conformance --threads -2" "--threads" "$KILN" conformance "$T/conf" --threads -2
expect_ok "bench --duration 0.05" "$KILN" bench "$E" --shapes $S --duration 0.05 --warmup 0
# a huge --iterations allocates bounded memory (it used to malloc 8 bytes per iteration up front)
if { (ulimit -v 2000000; "$KILN" --version) > /dev/null 2>&1; } 2> /dev/null; then   # not under ASan, which needs a large address space
  (ulimit -v 2000000; timeout 3 "$KILN" bench "$E" --shapes $S --iterations 2000000000 --warmup 0) > "$T/err.txt" 2>&1
  rc=$?
  [ $rc -eq 124 ] && ok "bench --iterations 2000000000 runs in bounded memory" || bad "bench --iterations 2e9 (rc=$rc): $(tail -2 "$T/err.txt")"
fi

# ---- item 13 (CLI): --input twice, or naming something that is not an input
expect_err "run --input twice" "given twice" "$KILN" run "$E" --input input="$T/in/input.npy" --input input="$T/in/input.npy" --output-dir "$T/x"
expect_err "bench --input twice" "given twice" "$KILN" bench "$E" --input input="$T/in/input.npy" --input input="$T/in/input.npy"
expect_err "bench --input not an input" "not an input" "$KILN" bench "$E" --input nosuch="$T/in/input.npy" --shapes $S
expect_err "run --input not an input" "no input named" "$KILN" run "$E" --input nosuch="$T/in/input.npy" --output-dir "$T/x"

finish

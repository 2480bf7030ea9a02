#!/usr/bin/env bash
# Models the ONNX specification forbids (and ONNX Runtime rejects) are errors, never a run with
# different numbers: an attribute of the wrong type (it was dropped and the default used), Resize
# with both scales and sizes (sizes was used), Softmax of a scalar, float Mod with fmod=0. And a
# valid model whose build-time run on synthetic data fails warns in docs/CLI.md's words (it said
# "calibration run skipped" on fp32 builds).
set -uo pipefail
KILN=$1
. "$(dirname "$0")/../lib.sh"

$PY - "$T" <<'PYEOF'
import sys, numpy as np, onnx
from onnx import helper as oh, numpy_helper as nh, TensorProto as TP
t = sys.argv[1]
def write(name, nodes, x, inits=(), opset=17, ydt=TP.FLOAT):
    g = oh.make_graph(nodes, name, [oh.make_tensor_value_info('x', onnx.mapping.NP_TYPE_TO_TENSOR_TYPE[x.dtype], x.shape)],
                      [oh.make_tensor_value_info('out', ydt, None)], [nh.from_array(v, n) for n, v in inits])
    m = oh.make_model(g, opset_imports=[oh.make_opsetid('', opset)])
    m.ir_version = 8
    onnx.save(m, f'{t}/{name}.onnx')
    np.save(f'{t}/{name}.npy', x)
x = np.random.RandomState(0).randn(2, 3, 4).astype(np.float32)
write('attr_float_axis', [oh.make_node('Softmax', ['x'], ['out'], axis=1.0)], x)
write('attr_ok_axis', [oh.make_node('Softmax', ['x'], ['out'], axis=1)], x)
write('attr_int_alpha', [oh.make_node('LeakyRelu', ['x'], ['out'], alpha=1)], x)   # INT for FLOAT: kept
write('attr_str_pads', [oh.make_node('Pad', ['x', 'p'], ['out'], mode=3)], x, [('p', np.zeros(6, np.int64))])
write('resize_both', [oh.make_node('Resize', ['x', '', 'sc', 'sz'], ['out'])], x.reshape(1, 2, 3, 4),
      [('sc', np.array([1, 1, 2, 2], np.float32)), ('sz', np.array([1, 2, 5, 5], np.int64))])
write('resize_sizes', [oh.make_node('Resize', ['x', '', '', 'sz'], ['out'])], x.reshape(1, 2, 3, 4),
      [('sz', np.array([1, 2, 5, 5], np.int64))])
# scales and sizes as inputs of unknown length: only the kernel sees that both are given
g = oh.make_graph([oh.make_node('Resize', ['x', '', 'sc', 'sz'], ['out'])], 'g',
                  [oh.make_tensor_value_info('x', TP.FLOAT, [1, 2, 3, 4]), oh.make_tensor_value_info('sc', TP.FLOAT, ['n']),
                   oh.make_tensor_value_info('sz', TP.INT64, ['m'])], [oh.make_tensor_value_info('out', TP.FLOAT, None)])
m = oh.make_model(g, opset_imports=[oh.make_opsetid('', 17)])
m.ir_version = 8
onnx.save(m, f'{t}/resize_both_dyn.onnx')
np.save(f'{t}/sc.npy', np.array([1, 1, 2, 2], np.float32))
np.save(f'{t}/sz.npy', np.array([1, 2, 5, 5], np.int64))
write('softmax_scalar', [oh.make_node('Softmax', ['x'], ['out'])], np.array(1.5, np.float32))
write('mod_float_fmod0', [oh.make_node('Mod', ['x', 'd'], ['out'])], x, [('d', np.array(0.7, np.float32))])
write('mod_float_fmod1', [oh.make_node('Mod', ['x', 'd'], ['out'], fmod=1)], x, [('d', np.array(0.7, np.float32))])
write('mod_int_fmod0', [oh.make_node('Mod', ['x', 'd'], ['out'])], np.arange(-6, 6, dtype=np.int32).reshape(3, 4),
      [('d', np.array(4, np.int32))], ydt=TP.INT32)
write('reshape_input', [oh.make_node('Reshape', ['x', 's'], ['out'])], x, [('s', np.array([0, -1], np.int64))])
# the shape as a graph input, not an initializer: the builder's synthetic run cannot know it
m = onnx.load(f'{t}/reshape_input.onnx')
m.graph.initializer.pop()
m.graph.input.append(oh.make_tensor_value_info('s', TP.INT64, [2]))
onnx.save(m, f'{t}/reshape_input.onnx')
np.save(f'{t}/s.npy', np.array([0, -1], np.int64))
PYEOF

# `run NAME`: kiln run of $T/NAME.onnx on $T/NAME.npy (a script, so that expect_err can time it out)
printf '#!/usr/bin/env bash\nexec "%s" run "%s/$1.onnx" --input "x=%s/$1.npy" --output-dir "%s/o_$1"\n' \
  "$KILN" "$T" "$T" "$T" > "$T/run"
chmod +x "$T/run"

# (a) attribute types against the operator schema
expect_err "Softmax axis as a FLOAT is an error naming node, attribute and both types" \
  "attribute 'axis' is FLOAT, but Softmax takes INT" "$T/run" attr_float_axis
expect_err "kiln build refuses it too" "attribute 'axis' is FLOAT" "$KILN" build "$T/attr_float_axis.onnx" -o "$T/a.kiln"
expect_err "Pad mode as an INT is an error" "attribute 'mode' is INT, but Pad takes STRING" "$T/run" attr_str_pads
expect_ok "Softmax axis as an INT runs" "$T/run" attr_ok_axis
expect_ok "an INT for a FLOAT attribute (LeakyRelu alpha=1) is still accepted" "$T/run" attr_int_alpha
# (b) Resize
expect_err "Resize with both scales and sizes is an error" "only one of 'scales' and 'sizes'" "$T/run" resize_both
expect_err "... also when they are runtime inputs" "only one of 'scales' and 'sizes'" "$KILN" run "$T/resize_both_dyn.onnx" \
  --input "x=$T/resize_sizes.npy" --input "sc=$T/sc.npy" --input "sz=$T/sz.npy" --output-dir "$T/o_rbd"
expect_ok "Resize with sizes alone runs" "$T/run" resize_sizes
# (c) Softmax of a scalar
expect_err "Softmax of a rank-0 input is an error" "needs rank >= 1" "$T/run" softmax_scalar
# (d) Mod
expect_err "float Mod with fmod=0 is an error" "fmod=0 is not allowed for float32" "$T/run" mod_float_fmod0
expect_ok "float Mod with fmod=1 runs" "$T/run" mod_float_fmod1
expect_ok "integer Mod with fmod=0 runs" "$T/run" mod_int_fmod0

# the synthetic build-time run failing on a valid model: the documented warning, no "calibration"
for how in run build; do
  if [ $how = run ]; then
    "$KILN" run "$T/reshape_input.onnx" --input "x=$T/reshape_input.npy" --input "s=$T/s.npy" --output-dir "$T/o_r" > "$T/w.txt" 2>&1
  else
    "$KILN" build "$T/reshape_input.onnx" -o "$T/r.kiln" > "$T/w.txt" 2>&1
  fi
  rc=$?
  if [ $rc = 0 ] && ! grep -qi "calibration" "$T/w.txt" &&
     grep -q "no tactics timed and no memory plan at build time (the run on synthetic data failed: " "$T/w.txt"; then
    ok "kiln $how: synthetic-run warning in CLI.md's words"
  else
    bad "kiln $how: synthetic-run warning (rc=$rc): $(cat "$T/w.txt")"
  fi
done
$PY - "$T/o_r" <<'PYEOF' && ok "its output is right" || bad "reshape_input output"
import sys, glob, numpy as np
o = np.load(glob.glob(sys.argv[1] + '/*.npy')[0])
assert o.shape == (2, 12), o.shape
PYEOF
# an engine file (*.kiln) that is empty or damaged gets the engine loader's message, not the ONNX parser's
: > "$T/empty.kiln"
printf 'KILNEN' > "$T/short.kiln"
for f in empty short; do
  expect_err "kiln run $f.kiln: not a kiln engine" "$f.kiln: not a kiln engine file (bad magic)" \
    "$KILN" run "$T/$f.kiln" --input "x=$T/attr_ok_axis.npy" --output-dir "$T/o_e"
  expect_err "kiln inspect $f.kiln: not a kiln engine" "$f.kiln: not a kiln engine file (bad magic)" "$KILN" inspect "$T/$f.kiln"
done
finish test_invalid_models

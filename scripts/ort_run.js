#!/usr/bin/env node
// Run an ONNX model with ONNX Runtime (onnxruntime-node, CPU) on .npy inputs; write .npy outputs.
//
//   node scripts/ort_run.js MODEL.onnx [--input NAME=FILE.npy ...] [--input-dir DIR]
//        [--output-dir DIR] [--threads N] [--bench N] [--opt all|extended|basic|disabled] [--session-only]
//        [--profile PREFIX]
//
// Inputs: each --input NAME=FILE.npy; --input-dir DIR fills every model input not given
// explicitly from DIR/<sanitized name>.npy (the layout scripts/make_inputs.py writes).
// Outputs: DIR/<name>.npy for every model output, where <name> is the output name with every
// character outside [A-Za-z0-9._-] replaced by '_' (and a leading '_' added when the result
// would be empty or start with '.').
// --bench N: after the outputs are written, 3 warm-up runs then N timed runs; prints ONE JSON
// line to stdout: {"ort_ms_mean":..,"ort_ms_p50":..,"ort_ms_min":..,"iters":N,"threads":T}.
// --session-only: create the session, print ONE JSON line {"ort_session_ms":..,"threads":T} to
// stdout and exit (no inputs needed; for bench/engine_load.sh).
// --profile PREFIX: ONNX Runtime's per-node profiler on (every run, warm-ups included); its JSON trace
// is written as PREFIX_<date>.json at the end (bench/layer_compare.py reads it).
// Everything else goes to stderr, so stdout stays machine-readable.
// The onnxruntime-node package is loaded from third_party/npm/node_modules (scripts/bootstrap.sh),
// or from $KILN_ORT_NODE when set.
'use strict';
const fs = require('fs');
const path = require('path');
const { performance } = require('perf_hooks');

function die(msg) {
  process.stderr.write(`ort_run: ${msg}\n`);
  process.exit(2);
}

function loadOrt() {
  const p = process.env.KILN_ORT_NODE ||
    path.join(__dirname, '..', 'third_party', 'npm', 'node_modules', 'onnxruntime-node');
  try {
    return require(p);
  } catch (e) {
    die(`cannot load onnxruntime-node from ${p}: ${e.message}\n(run scripts/bootstrap.sh)`);
  }
}

// ---------------------------------------------------------------- .npy reader / writer
// descr -> [ORT tensor type, TypedArray ctor, element size]
const NPY_TYPES = {
  '<f4': ['float32', Float32Array, 4],
  '<f8': ['float64', Float64Array, 8],
  '<f2': ['float16', Uint16Array, 2], // raw IEEE half bits
  '<i8': ['int64', BigInt64Array, 8],
  '<i4': ['int32', Int32Array, 4],
  '<i2': ['int16', Int16Array, 2],
  '|i1': ['int8', Int8Array, 1],
  '<u8': ['uint64', BigUint64Array, 8],
  '<u4': ['uint32', Uint32Array, 4],
  '<u2': ['uint16', Uint16Array, 2],
  '|u1': ['uint8', Uint8Array, 1],
  '|b1': ['bool', Uint8Array, 1],
};
const ORT_TO_DESCR = {};
for (const [d, [t]] of Object.entries(NPY_TYPES)) ORT_TO_DESCR[t] = d;
// numpy also writes these spellings for 1-byte types / native order
const DESCR_ALIASES = { '<i1': '|i1', '<u1': '|u1', '<b1': '|b1', '=f4': '<f4', '=f8': '<f8',
  '=f2': '<f2', '=i8': '<i8', '=i4': '<i4', '=i2': '<i2', '=u8': '<u8', '=u4': '<u4', '=u2': '<u2',
  'i1': '|i1', 'u1': '|u1', 'b1': '|b1', '?': '|b1', '|?': '|b1' };

function readNpy(file) {
  let buf;
  try { buf = fs.readFileSync(file); } catch (e) { die(`cannot read ${file}: ${e.message}`); }
  const bad = (m) => die(`${file}: not a supported .npy file: ${m}`);
  if (buf.length < 10 || buf[0] !== 0x93 || buf.toString('latin1', 1, 6) !== 'NUMPY') bad('bad magic');
  const major = buf[6];
  let hlen, off;
  if (major === 1) { hlen = buf.readUInt16LE(8); off = 10; }
  else if (major === 2 || major === 3) { hlen = buf.readUInt32LE(8); off = 12; }
  else bad(`version ${major}`);
  const header = buf.toString(major === 3 ? 'utf8' : 'latin1', off, off + hlen);
  const dm = header.match(/'descr'\s*:\s*'([^']*)'/);
  const fm = header.match(/'fortran_order'\s*:\s*(True|False)/);
  const sm = header.match(/'shape'\s*:\s*\(([^)]*)\)/);
  if (!dm || !fm || !sm) bad(`header ${JSON.stringify(header)}`);
  let descr = DESCR_ALIASES[dm[1]] || dm[1];
  if (fm[1] === 'True') bad('fortran_order=True (write C-order arrays)');
  if (!NPY_TYPES[descr]) bad(`dtype ${dm[1]} (supported: ${Object.keys(NPY_TYPES).join(' ')})`);
  const dims = sm[1].split(',').map((s) => s.trim()).filter((s) => s.length).map((s) => {
    const v = Number(s.replace(/L$/, ''));
    if (!Number.isInteger(v) || v < 0) bad(`shape ${sm[1]}`);
    return v;
  });
  const [type, Ctor, esize] = NPY_TYPES[descr];
  const count = dims.reduce((a, b) => a * b, 1);
  const start = off + hlen;
  if (buf.length - start < count * esize) bad(`truncated data (${buf.length - start} < ${count * esize} bytes)`);
  // copy into a fresh, aligned ArrayBuffer
  const ab = new ArrayBuffer(count * esize);
  new Uint8Array(ab).set(buf.subarray(start, start + count * esize));
  let data = new Ctor(ab);
  if (type === 'bool') data = Uint8Array.from(data, (v) => (v ? 1 : 0));
  return { type, dims, data };
}

function writeNpy(file, type, dims, data) {
  let descr = ORT_TO_DESCR[type];
  if (!descr) throw new Error(`output tensor type ${type} has no .npy mapping`);
  const shape = dims.length === 0 ? '()' : dims.length === 1 ? `(${dims[0]},)` : `(${dims.join(', ')})`;
  let h = `{'descr': '${descr}', 'fortran_order': False, 'shape': ${shape}, }`;
  let major = 1;
  let pre = 10;
  if (h.length + 1 + pre > 65535) { major = 2; pre = 12; }
  const total = Math.ceil((pre + h.length + 1) / 64) * 64;
  h = h + ' '.repeat(total - pre - h.length - 1) + '\n';
  const head = Buffer.alloc(pre);
  head[0] = 0x93; head.write('NUMPY', 1, 'latin1'); head[6] = major; head[7] = 0;
  if (major === 1) head.writeUInt16LE(h.length, 8); else head.writeUInt32LE(h.length, 8);
  let body;
  if (type === 'bool') body = Buffer.from(Uint8Array.from(data, (v) => (v ? 1 : 0)));
  else body = Buffer.from(data.buffer, data.byteOffset, data.byteLength);
  fs.writeFileSync(file, Buffer.concat([head, Buffer.from(h, 'latin1'), body]));
}

function safeName(name) {
  let s = String(name).replace(/[^A-Za-z0-9._-]/g, '_');
  if (s.length === 0 || s[0] === '.') s = '_' + s;
  return s;
}

// ---------------------------------------------------------------- CLI
function parseArgs(argv) {
  const a = { model: null, inputs: [], inputDir: null, outDir: null, threads: 0, bench: 0, opt: 'all' };
  const need = (i, f) => { if (i + 1 >= argv.length) die(`${f} needs a value`); return argv[i + 1]; };
  for (let i = 0; i < argv.length; i++) {
    const s = argv[i];
    let m;
    if ((m = s.match(/^(--[a-z-]+)=(.*)$/)) && m[1] !== '--input') { argv.splice(i, 1, m[1], m[2]); }
    const f = argv[i];
    if (f === '--input' || f === '-i') {
      const v = need(i, f); i++;
      const eq = v.indexOf('=');
      if (eq <= 0) die(`--input wants NAME=FILE.npy, got ${v}`);
      a.inputs.push([v.slice(0, eq), v.slice(eq + 1)]);
    } else if (f.startsWith('--input=')) {
      const v = f.slice(8); const eq = v.indexOf('=');
      if (eq <= 0) die(`--input wants NAME=FILE.npy, got ${v}`);
      a.inputs.push([v.slice(0, eq), v.slice(eq + 1)]);
    } else if (f === '--input-dir') { a.inputDir = need(i, f); i++; }
    else if (f === '--output-dir' || f === '-o') { a.outDir = need(i, f); i++; }
    else if (f === '--threads') { a.threads = parseInt(need(i, f), 10); i++; }
    else if (f === '--bench') { a.bench = parseInt(need(i, f), 10); i++; }
    else if (f === '--opt') { a.opt = need(i, f); i++; }
    else if (f === '--session-only') { a.sessionOnly = true; }
    else if (f === '--profile') { a.profile = need(i, f); i++; }
    else if (f === '-h' || f === '--help') {
      process.stderr.write(fs.readFileSync(__filename, 'utf8').split('\n').filter((l) => l.startsWith('//'))
        .map((l) => l.slice(3)).join('\n') + '\n');
      process.exit(0);
    } else if (f.startsWith('-')) die(`unknown option ${f}`);
    else if (!a.model) a.model = f;
    else die(`unexpected argument ${f}`);
  }
  if (!a.model) die('usage: ort_run.js MODEL.onnx --input NAME=FILE.npy ... --output-dir DIR [--threads N] [--bench N]');
  if (!Number.isInteger(a.threads) || a.threads < 0) die('--threads wants a non-negative integer');
  if (!Number.isInteger(a.bench) || a.bench < 0) die('--bench wants a non-negative integer');
  if (!['all', 'extended', 'basic', 'disabled'].includes(a.opt)) die('--opt wants all|extended|basic|disabled');
  return a;
}

async function main() {
  const a = parseArgs(process.argv.slice(2));
  const ort = loadOrt();
  const opts = { graphOptimizationLevel: a.opt, executionProviders: ['cpu'], logSeverityLevel: 3,
    executionMode: 'sequential' };
  if (a.threads > 0) { opts.intraOpNumThreads = a.threads; opts.interOpNumThreads = 1; }
  if (a.profile) { opts.enableProfiling = true; opts.profileFilePrefix = a.profile; }
  let sess;
  const t0 = performance.now();
  try { sess = await ort.InferenceSession.create(a.model, opts); } catch (e) { die(`cannot load ${a.model}: ${e.message}`); }
  const tLoad = performance.now() - t0;
  if (a.sessionOnly) {
    process.stdout.write(JSON.stringify({ ort_session_ms: +tLoad.toFixed(3), threads: a.threads }) + '\n');
    return;
  }

  const feeds = {};
  for (const [name, file] of a.inputs) {
    if (!sess.inputNames.includes(name)) die(`model has no input '${name}' (inputs: ${sess.inputNames.join(', ')})`);
    const t = readNpy(file);
    feeds[name] = new ort.Tensor(t.type, t.data, t.dims);
  }
  for (const name of sess.inputNames) {
    if (feeds[name]) continue;
    if (a.inputDir) {
      const f = path.join(a.inputDir, safeName(name) + '.npy');
      if (fs.existsSync(f)) { const t = readNpy(f); feeds[name] = new ort.Tensor(t.type, t.data, t.dims); continue; }
    }
    die(`no value for model input '${name}' (give --input ${name}=FILE.npy${a.inputDir ? '' : ' or --input-dir'})`);
  }
  for (const [n, t] of Object.entries(feeds)) process.stderr.write(`ort_run: input  ${n} ${t.type} [${t.dims.join(',')}]\n`);

  let out;
  const t1 = performance.now();
  try { out = await sess.run(feeds); } catch (e) { die(`run failed: ${e.message}`); }
  const tRun = performance.now() - t1;
  process.stderr.write(`ort_run: load ${tLoad.toFixed(1)} ms, first run ${tRun.toFixed(1)} ms\n`);

  if (a.outDir) fs.mkdirSync(a.outDir, { recursive: true });
  for (const name of sess.outputNames) {
    const t = out[name];
    process.stderr.write(`ort_run: output ${name} ${t.type} [${t.dims.join(',')}]\n`);
    if (a.outDir) writeNpy(path.join(a.outDir, safeName(name) + '.npy'), t.type, t.dims, t.data);
  }

  if (a.bench > 0) {
    for (let i = 0; i < 3; i++) await sess.run(feeds);
    const ms = [];
    for (let i = 0; i < a.bench; i++) {
      const s = performance.now();
      await sess.run(feeds);
      ms.push(performance.now() - s);
    }
    const sorted = ms.slice().sort((x, y) => x - y);
    const mid = sorted.length >> 1;
    const p50 = sorted.length % 2 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2;
    const mean = ms.reduce((x, y) => x + y, 0) / ms.length;
    const r = (v) => Math.round(v * 1000) / 1000;
    process.stdout.write(JSON.stringify({ ort_ms_mean: r(mean), ort_ms_p50: r(p50), ort_ms_min: r(sorted[0]),
      iters: a.bench, threads: a.threads || null }) + '\n');
  }
  if (a.profile) sess.endProfiling();
  if (typeof sess.release === 'function') await sess.release();
}

main().catch((e) => die(e && e.stack ? e.stack : String(e)));

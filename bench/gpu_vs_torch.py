#!/usr/bin/env python3
"""kiln --device cuda vs PyTorch on the same ONNX models, one command on a GPU machine.

    python3 bench/gpu_vs_torch.py [--kiln build/kiln] [--models models] [--iters 30] [--json OUT.json]
        [--precisions fp32,fp16,bf16,fp8,int8] [--compile max-autotune|none|MODE]
        [--compile-precisions fp16] [--tf32]
        [--resnet-batches 1,64,256] [--bert-batches 1,64] [--ocr-batches 1,16] [--ocr-size 640]
        [--only resnet50,bert_base,ocr_det]
    python3 bench/gpu_vs_torch.py --check-ocr-cpu [--kiln build/kiln]   # no GPU needed

Models: ResNet-50 (batch 1 and large batches) and BERT-base (sequence 128) from
scripts/gen_models.py (generated into --models when missing), and PP-OCRv4 det
(--models/ocr/ch_PP-OCRv4_det_infer.onnx, input x [N,3,H,W], timed at --ocr-size square). PyTorch
runs the same weights: torchvision's resnet50 with the ONNX initializers loaded by name, a BERT
encoder written here op for op like the ONNX graph (exact GELU, additive mask, LayerNorm eps 1e-12)
with F.scaled_dot_product_attention, and for PP-OCRv4 det bench/onnx_torch.py, a small ONNX-graph
interpreter (an nn.Module walking the nodes with torch.nn.functional ops).

Precision. FP32 with TF32 off on both sides (kiln's default; torch.backends.*.allow_tf32 = False),
TF32 on both sides with --tf32. FP16 / BF16: kiln engines from `kiln build --precision fp16|bf16
--device cuda --no-tactics` against PyTorch's model converted to that dtype (ResNet-50 and the OCR
model channels_last). FP8 / INT8 (and other low-bit kiln precisions): engines built with --calib
on a few random samples written to the temp dir (BERT: token ids in the vocabulary, a mask, types;
images uniform [-1, 1]); PyTorch has no FP8 / INT8 inference path for these models, so those kiln
rows are compared with PyTorch's FP16 rows (the table repeats them under the kiln precision, marked
"(fp16)"). Accuracy: each kiln precision's outputs are checked against PyTorch FP32 (max relative
error, batch 2 / one OCR image), and by `kiln verify ENGINE --reference MODEL.onnx --device cuda
--json --samples 4 --shapes ...` against the FP32 ONNX model on kiln's CPU reference interpreter
(worst over outputs and samples: cosine, SNR dB, max relative error).

Timing. kiln: `kiln bench --device cuda --json` (host wall clock around kiln_context_run: it
includes copying the inputs from host memory to the GPU and the outputs back), p50 / p99 from its
latency percentiles. When its timed runs replayed a CUDA graph, "kiln device (replay)" is the
device time of a replay (inputs already in pinned memory, their DMA included) and "kiln GPU
compute" the same without the DMA of the inputs (trtexec's "GPU Compute Time"): the numbers to
compare with PyTorch's rows, whose inputs are already on the GPU ("kiln dev/this"). PyTorch: p50 /
p99 of --iters CUDA-event timings (with 30, p99 is about the slowest run) of (a) eager, (b) a
captured CUDA graph, (c) torch.compile(mode=--compile) after compiling, for the torch precisions
in --compile-precisions (default fp16; mode default max-autotune, which compiles for minutes per
model, precision and batch: about 4 min for ResNet-50 FP16 batch 256; the compile time, first two
calls, is logged and kept as compile_s; "none" skips it; a failure is logged and the run goes on;
inductor's on-disk caches make a second run on the same machine compile much faster), and (d)
eager including the host->GPU input copy and the outputs' copy back (what kiln's whole-run number
includes). The table: items/s at p50, p50 / p99 ms, kiln / this row and kiln GPU compute / this
row, compile seconds, and on kiln's rows the kiln verify metrics of that precision.

--json OUT writes {"gpu", "nvidia_smi", "torch", "tf32", "compile", "compile_precisions", "iters",
"rows"}; rows are
  timing rows: {"model", "prec" (what this impl ran in), "batch", "impl" ("kiln cuda", "kiln device
    (replay)", "kiln GPU compute", "torch eager", "torch CUDA graph", "torch.compile <mode>",
    "torch eager +copies"), "throughput" (items/s), "p50_ms", "p99_ms" (null where not measured)};
    "kiln cuda" rows add "fallback_layers", "graph_replays", "kiln_precision" (what kiln bench
    reports), "build_s", "precision_fallback" (the build needed --precision-fallback: some layers
    kept in a higher precision; the table says "(fallback)"), "verify_cosine", "verify_snr_db",
    "verify_max_rel"; "torch.compile" rows add "compile_s";
  check rows: {"check": model, "prec", "max_rel_err" (kiln cuda vs PyTorch FP32), "precision_fallback",
    "verify_cosine", "verify_snr_db", "verify_max_rel", "verify_pass", "verify_samples"} (verify
    keys null when kiln verify failed);
  error rows: {"check" or "model"/"prec"/"batch"/"impl", "error"}.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnx
from onnx import numpy_helper

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from onnx_torch import OnnxModule  # noqa: E402

TORCH_PRECS = ("fp32", "fp16", "bf16")
OCR_MODEL = os.path.join("ocr", "ch_PP-OCRv4_det_infer.onnx")


def log(*a):
    print(*a, flush=True)


def onnx_weights(path):
    m = onnx.load(path, load_external_data=True)
    return {i.name: numpy_helper.to_array(i) for i in m.graph.initializer}


# ---------------------------------------------------------------------------- torch models
def torch_resnet50(weights):
    import torchvision
    net = torchvision.models.resnet50(weights=None)
    sd = net.state_dict()
    new = {}
    for k, v in sd.items():
        if k.endswith("num_batches_tracked"):
            new[k] = v
            continue
        if k not in weights:
            raise KeyError(f"resnet50: ONNX has no initializer {k}")
        new[k] = torch.from_numpy(weights[k].copy())
    net.load_state_dict(new)
    return net.eval()


class Bert(nn.Module):
    """BERT-base as scripts/gen_models.py builds it (HuggingFace BertModel's op pattern)."""

    def __init__(self, w, layers=12, hidden=768, heads=12):
        super().__init__()
        t = lambda a: nn.Parameter(torch.from_numpy(a.copy()), requires_grad=False)
        self.heads, self.hidden = heads, hidden
        self.word = t(w["embeddings.word_embeddings.weight"])
        self.pos = t(w["embeddings.position_embeddings.weight"])
        self.ttype = t(w["embeddings.token_type_embeddings.weight"])
        self.ln = [(t(w[f"embeddings.LayerNorm.weight"]), t(w[f"embeddings.LayerNorm.bias"]))]
        self.params = nn.ParameterList([p for p in self.ln[0]])
        self.layers = []
        for i in range(layers):
            p = f"encoder.layer.{i}"
            d = {}
            for name in ("attention.self.query", "attention.self.key", "attention.self.value",
                         "attention.output.dense", "intermediate.dense", "output.dense"):
                d[name] = (t(w[f"{p}.{name}.weight_T"]), t(w[f"{p}.{name}.bias"]))
            for name in ("attention.output.LayerNorm", "output.LayerNorm"):
                d[name] = (t(w[f"{p}.{name}.weight"]), t(w[f"{p}.{name}.bias"]))
            self.layers.append(d)
            for v in d.values():
                self.params.extend(v)
        self.pool = (t(w["pooler.dense.weight"]), t(w["pooler.dense.bias"]))
        self.params.extend([self.word, self.pos, self.ttype, *self.pool])

    def forward(self, ids, mask, types):
        B, S = ids.shape
        H, D = self.heads, self.hidden // self.heads
        x = self.word[ids] + self.ttype[types] + self.pos[:S][None]
        x = F.layer_norm(x, (self.hidden,), *self.ln[0], eps=1e-12)
        m = (1.0 - mask[:, None, None, :].to(x.dtype)) * torch.finfo(x.dtype).min
        lin = lambda v, wb: torch.matmul(v, wb[0]) + wb[1]
        for d in self.layers:
            q = lin(x, d["attention.self.query"]).view(B, S, H, D).transpose(1, 2)
            k = lin(x, d["attention.self.key"]).view(B, S, H, D).transpose(1, 2)
            v = lin(x, d["attention.self.value"]).view(B, S, H, D).transpose(1, 2)
            c = F.scaled_dot_product_attention(q, k, v, attn_mask=m)
            c = c.transpose(1, 2).reshape(B, S, self.hidden)
            a = F.layer_norm(lin(c, d["attention.output.dense"]) + x, (self.hidden,),
                             *d["attention.output.LayerNorm"], eps=1e-12)
            i = F.gelu(lin(a, d["intermediate.dense"]))
            x = F.layer_norm(lin(i, d["output.dense"]) + a, (self.hidden,), *d["output.LayerNorm"], eps=1e-12)
        pooled = torch.tanh(F.linear(x[:, 0], self.pool[0], self.pool[1]))
        return x, pooled


# ---------------------------------------------------------------------------- timing (CUDA only)
def time_cuda(fn, iters, warmup=5):
    """CUDA-event times (ms) of `iters` calls after `warmup`."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(iters):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        e.synchronize()
        ts.append(s.elapsed_time(e))
    return ts


def timing_row(model, prec, batch, impl, ts, **extra):
    p50, p99 = float(np.percentile(ts, 50)), float(np.percentile(ts, 99))
    return {"model": model, "prec": prec, "batch": batch, "impl": impl, "throughput": batch / (p50 / 1e3),
            "p50_ms": p50, "p99_ms": p99, **extra}


def torch_rows(a, name, prec, model, inputs, batch, iters):
    """eager, CUDA graph and torch.compile (inputs resident on the GPU), and eager with host copies."""
    dev = [x.cuda() for x in inputs]
    rows = []
    row = lambda impl, ts, **kw: rows.append(timing_row(name, prec, batch, impl, ts, **kw))
    with torch.no_grad():
        row("torch eager", time_cuda(lambda: model(*dev), iters))
        try:
            static = [x.clone() for x in dev]
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                for _ in range(3):
                    model(*static)
            torch.cuda.current_stream().wait_stream(s)
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                model(*static)
            row("torch CUDA graph", time_cuda(g.replay, iters))
            del g
        except Exception as ex:  # noqa: BLE001 - report and go on
            log(f"  {name} {prec} b{batch}: CUDA graph capture failed: {ex}")
        if a.compile != "none" and prec in a.compile_precs:
            impl = f"torch.compile {a.compile}"
            try:
                import torch._dynamo as dynamo
                dynamo.reset()
                cm = torch.compile(model, mode=a.compile)
                t0 = time.time()
                cm(*dev)
                cm(*dev)  # CUDA-graph modes record on a later call
                torch.cuda.synchronize()
                cs = time.time() - t0
                log(f"  {name} {prec} b{batch}: torch.compile(mode={a.compile}) compiled in {cs:.1f} s")
                row(impl, time_cuda(lambda: cm(*dev), iters), compile_s=cs)
                del cm
            except Exception as ex:  # noqa: BLE001 - report and go on
                log(f"  {name} {prec} b{batch}: torch.compile(mode={a.compile}) FAILED: {str(ex)[-600:]}")
                rows.append({"model": name, "prec": prec, "batch": batch, "impl": impl, "error": str(ex)[-2000:]})
            try:
                import torch._dynamo as dynamo
                dynamo.reset()  # frees the compiled graphs (and their CUDA-graph memory pools)
            except Exception:  # noqa: BLE001
                pass
        host = inputs

        def e2e():
            out = model(*[x.cuda(non_blocking=False) for x in host])
            out = out if isinstance(out, tuple) else (out,)
            return [o.cpu() for o in out]
        row("torch eager +copies", time_cuda(e2e, max(5, iters // 3)))
    return rows


def half_model(model, prec, channels_last=False):
    import copy
    dt = {"fp16": torch.float16, "bf16": torch.bfloat16}[prec]
    m = copy.deepcopy(model).to(dt)
    return m.to(memory_format=torch.channels_last) if channels_last else m


# ---------------------------------------------------------------------------- kiln (subprocesses)
CALIB_PRECS = ("int8", "fp8")


def kiln_engine(kiln, model, prec, tmpdir, calib):
    """(path, build seconds, fallback): the model itself for fp32; else an engine built for the GPU.
    A build refused because some layers cannot run in PREC (PP-OCRv4 det in int8) is retried with
    --precision-fallback (those layers in the precision they can run in); fallback is then True."""
    if prec == "fp32":
        return model, 0.0, False
    out = os.path.join(tmpdir, os.path.basename(model).replace(".onnx", f".{prec}.kiln"))
    cmd = [kiln, "build", model, "-o", out, "--precision", prec, "--device", "cuda", "--no-tactics"]
    if prec in CALIB_PRECS:
        cmd += ["--calib", calib]
    t0 = time.time()
    r = subprocess.run(cmd, capture_output=True, text=True)
    fallback = r.returncode != 0 and "cannot run in the requested precision" in r.stderr
    if fallback:
        log(f"  kiln build --precision {prec}: {r.stderr.strip()[-400:]}; retrying with --precision-fallback")
        cmd.append("--precision-fallback")
        t0 = time.time()
        r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({r.returncode}): {r.stderr.strip()[-800:]}")
    dt = time.time() - t0
    log(f"  built {os.path.basename(out)} in {dt:.1f} s" + (" (with --precision-fallback)" if fallback else ""))
    return out, dt, fallback


def kiln_bench(kiln, model, shapes, iters, tf32):
    cmd = [kiln, "bench", model, "--shapes", shapes, "--device", "cuda", "--iterations", str(iters),
           "--warmup", "5", "--json"] + (["--tf32"] if tf32 else [])
    t0 = time.time()
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        log(f"  kiln bench failed ({r.returncode}): {r.stderr.strip()[-800:]}")
        return None
    j = json.loads(r.stdout.strip().splitlines()[-1])
    j["wall_s"] = time.time() - t0
    return j


VERIFY_KEYS = ("verify_cosine", "verify_snr_db", "verify_max_rel")


def kiln_verify(kiln, engine, model, shapes, tf32, samples=4):
    """`kiln verify` of the engine (on the GPU) against the FP32 ONNX model (kiln's CPU reference):
    the worst over outputs and samples of cosine, SNR (dB) and max relative error. Four samples: verify runs
    them in one context, so the fourth replays the CUDA graph captured at the third (replays checked too)."""
    cmd = [kiln, "verify", engine, "--reference", model, "--device", "cuda", "--json", "--samples", str(samples),
           "--shapes", shapes] + (["--tf32"] if tf32 else [])
    out = {k: None for k in VERIFY_KEYS}
    out.update(verify_pass=None, verify_samples=None)
    r = subprocess.run(cmd, capture_output=True, text=True)
    try:
        j = json.loads(r.stdout)
    except ValueError:
        log(f"  kiln verify failed ({r.returncode}): {r.stderr.strip()[-800:]}")
        return out

    def worst(key, pick):
        v = [o.get("worst", {}).get(key) for o in j.get("outputs", [])]
        return None if not v or any(x is None for x in v) else float(pick(v))
    out.update(verify_cosine=worst("cosine", min), verify_snr_db=worst("snr_db", min),
               verify_max_rel=worst("max_rel", max), verify_pass=j.get("pass"), verify_samples=j.get("samples"))
    return out


def kiln_rows(rows, model, prec, bsz, k, extra):
    """kiln's rows: whole runs (host copies included) and, when the runs replayed a CUDA graph, the
    device time of a replay (events around the graph launch; inputs already in pinned memory, like
    PyTorch's inputs already on the GPU, except the graph's own DMA of them) and its compute time."""
    if not k:
        return
    lat = k["latency_ms"]
    rows.append({"model": model, "prec": prec, "batch": bsz, "impl": "kiln cuda", "throughput": k["throughput"],
                 "p50_ms": lat["p50"], "p99_ms": lat.get("p99"), "fallback_layers": k.get("fallback_layers"),
                 "graph_replays": k.get("graph_replays"), "kiln_precision": k.get("precision"), **extra})
    for key, impl in (("graph_ms", "kiln device (replay)"), ("compute_ms", "kiln GPU compute")):
        g = k.get(key)
        if g and g.get("p50", 0) > 0:
            rows.append({"model": model, "prec": prec, "batch": bsz, "impl": impl,
                         "throughput": bsz / (g["p50"] / 1e3), "p50_ms": g["p50"], "p99_ms": g.get("p99")})


def kiln_run_outputs(kiln, model, feeds, tf32, device="cuda"):
    with tempfile.TemporaryDirectory() as d:
        args = []
        for name, arr in feeds.items():
            p = os.path.join(d, name + ".npy")
            np.save(p, arr)
            args += ["--input", f"{name}={p}"]
        od = os.path.join(d, "out")
        os.makedirs(od)
        r = subprocess.run([kiln, "run", model, *args, "--output-dir", od, "--device", device] +
                           (["--tf32"] if tf32 else []), capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"kiln run failed: {r.stderr.strip()[-800:]}")
        outs = {}
        for f in os.listdir(od):
            if f.endswith(".npy"):
                outs[f[:-4]] = np.load(os.path.join(od, f))
        return outs, r.stderr


def rel_err(a, b):
    a = np.asarray(a, np.float64)
    b = np.asarray(b, np.float64)
    return float(np.max(np.abs(a - b)) / max(1.0, float(np.max(np.abs(b)))))


def pick_output(outs, name):
    if name in outs:
        return outs[name]
    if len(outs) == 1:
        return next(iter(outs.values()))
    raise KeyError(f"kiln run wrote no output {name} ({sorted(outs)})")


# ---------------------------------------------------------------------------- models
class Spec:
    """What the generic section needs of one model."""

    def __init__(self, **kw):
        self.__dict__.update(kw)


def bert_feeds(rng, b, S=128):
    ids = rng.integers(0, 30522, (b, S)).astype(np.int64)
    mask = np.ones((b, S), np.int64)
    for i in range(1, b, 2):
        mask[i, S - 28:] = 0
    types = np.zeros((b, S), np.int64)
    types[:, S // 2:] = 1
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}


def specs(a, rng):
    batches = lambda s: [int(v) for v in s.split(",") if v]
    S, H = 128, a.ocr_size
    img = lambda shape: rng.uniform(-1, 1, shape).astype(np.float32)
    bert_shapes = lambda b: f"input_ids:{b}x{S},attention_mask:{b}x{S},token_type_ids:{b}x{S}"
    return [
        Spec(name="resnet50", path=os.path.join(a.models, "resnet50.onnx"), channels_last=True,
             build=lambda p: torch_resnet50(onnx_weights(p)), outputs=["logits"],
             check_feeds=lambda: {"input": img((2, 3, 224, 224))}, batches=batches(a.resnet_batches),
             shapes=lambda b: f"input:{b}x3x224x224", calib=lambda: {"input": img((4, 3, 224, 224))},
             torch_inputs=lambda b: [torch.from_numpy(img((b, 3, 224, 224)))]),
        Spec(name="bert_base", path=os.path.join(a.models, "bert_base.onnx"), channels_last=False,
             build=lambda p: Bert(onnx_weights(p)), outputs=["last_hidden_state", "pooler_output"],
             check_feeds=lambda: bert_feeds(rng, 2), batches=batches(a.bert_batches), shapes=bert_shapes,
             calib=lambda: bert_feeds(rng, 4),
             torch_inputs=lambda b: [torch.from_numpy(rng.integers(0, 30522, (b, S)).astype(np.int64)),
                                     torch.ones((b, S), dtype=torch.int64), torch.zeros((b, S), dtype=torch.int64)]),
        Spec(name="ocr_det", path=os.path.join(a.models, OCR_MODEL), channels_last=True,
             build=lambda p: OnnxModule(p), outputs=["sigmoid_0.tmp_0"],
             check_feeds=lambda: {"x": img((1, 3, H, H))}, batches=batches(a.ocr_batches),
             shapes=lambda b: f"x:{b}x3x{H}x{H}", calib=lambda: {"x": img((4, 3, H, H))},
             torch_inputs=lambda b: [torch.from_numpy(img((b, 3, H, H)))]),
    ]


def write_calib(tmp, name, feeds):
    """kiln's calibration directory: one-input models any *.npy, several inputs NAME_KEY.npy."""
    d = os.path.join(tmp, f"calib_{name}")
    os.makedirs(d, exist_ok=True)
    for k, v in feeds.items():
        np.save(os.path.join(d, "calib.npy" if len(feeds) == 1 else f"{k}_0.npy"), v)
    return d


def section(a, s, rows):
    net = s.build(s.path).cuda().eval()
    feeds = s.check_feeds()
    with torch.no_grad():
        ref = net(*[torch.from_numpy(v).cuda() for v in feeds.values()])
    ref = [t.float().cpu().numpy() for t in (ref if isinstance(ref, tuple) else (ref,))]
    calib = write_calib(a.tmp, s.name, s.calib()) if any(p in CALIB_PRECS for p in a.precs) else None
    vshape = s.shapes(next(iter(feeds.values())).shape[0])
    engines = {}
    for prec in a.precs:
        try:
            eng, build_s, fb = kiln_engine(a.kiln, s.path, prec, a.tmp, calib)
            outs, err = kiln_run_outputs(a.kiln, eng, feeds, a.tf32)
            e = max(rel_err(pick_output(outs, n), r) for n, r in zip(s.outputs, ref))
            v = kiln_verify(a.kiln, eng, s.path, vshape, a.tf32)
            f = lambda x, spec: "n/a" if x is None else format(x, spec)
            log(f"{s.name} {vshape} {prec}: kiln cuda vs torch fp32 max rel err {e:.3g}; kiln verify vs FP32 "
                f"ONNX: cosine {f(v['verify_cosine'], '.6f')}, SNR {f(v['verify_snr_db'], '.1f')} dB, max rel "
                f"{f(v['verify_max_rel'], '.3g')}" +
                (f"  [{err.strip()[-300:]}]" if err.strip() else ""))
            rows.append({"check": s.name, "prec": prec, "max_rel_err": e, "precision_fallback": fb, **v})
            engines[prec] = (eng, {"build_s": build_s, "precision_fallback": fb, **{k: v[k] for k in VERIFY_KEYS}})
        except Exception as ex:  # noqa: BLE001 - the other precisions still come
            log(f"{s.name} {prec}: FAILED: {ex}")
            rows.append({"check": s.name, "prec": prec, "error": str(ex)})
    tmodels, done = {}, set()
    for prec in a.precs:
        if prec not in engines:
            continue
        tp = prec if prec in TORCH_PRECS else "fp16"
        for bsz in s.batches:
            first = len(rows)
            iters = a.iters if bsz < 128 else max(10, a.iters // 2)
            k = kiln_bench(a.kiln, engines[prec][0], s.shapes(bsz), iters, a.tf32)
            kiln_rows(rows, s.name, prec, bsz, k, engines[prec][1])
            if (tp, bsz) not in done:
                done.add((tp, bsz))
                if tp not in tmodels:
                    tmodels[tp] = net if tp == "fp32" else half_model(net, tp, s.channels_last)
                xs = s.torch_inputs(bsz)
                if tp != "fp32":
                    dt = {"fp16": torch.float16, "bf16": torch.bfloat16}[tp]
                    cl = lambda x: x.contiguous(memory_format=torch.channels_last) if s.channels_last else x
                    xs = [cl(x.to(dt)) if x.is_floating_point() else x for x in xs]
                try:
                    rows.extend(torch_rows(a, s.name, tp, tmodels[tp], xs, bsz, iters))
                except Exception as ex:  # noqa: BLE001 - kiln's rows and the other batches still come
                    log(f"  {s.name} {tp} batch {bsz}: torch FAILED: {ex}")
                    rows.append({"model": s.name, "prec": tp, "batch": bsz, "impl": "torch", "error": str(ex)})
            for r in rows[first:]:  # as they come: a run cut short still shows its numbers
                if "error" not in r:
                    log(f"    {r['impl']:<28} {r['prec']:<5} b{r['batch']:<4} {r['throughput']:>10.1f}/s  p50 "
                        f"{r['p50_ms']:.3f} ms  p99 {r['p99_ms'] if r.get('p99_ms') is None else round(r['p99_ms'], 3)} ms")
            log(f"  {s.name} {prec} batch {bsz} done")
            a.save(rows)
    del tmodels, net


def print_table(rows, precs):
    log("")
    log("items/s at the p50 latency; kiln/this = kiln cuda (whole runs, host copies included) / this row, "
        "kdev/this = kiln GPU compute (else replay) / this row; verify = kiln verify of the engine against "
        "the FP32 ONNX model (worst cosine, SNR dB, max rel err); kiln fp8/int8 are compared with PyTorch "
        "FP16 (marked '(fp16)': PyTorch has no FP8/INT8 inference path for these models)")
    log(f"{'model':<9} {'prec':<5} {'batch':>5}  {'impl':<34} {'items/s':>10} {'p50 ms':>9} {'p99 ms':>9} "
        f"{'kiln/this':>9} {'kdev/this':>9} {'compile s':>9}  {'cosine':>8} {'SNR dB':>7} {'max rel':>8}")
    t = [r for r in rows if "impl" in r and "error" not in r]
    find = lambda m, p, b, impl: next((q for q in t if (q["model"], q["prec"], q["batch"], q["impl"]) == (m, p, b, impl)),
                                      None)
    fmt = lambda v, f: "" if v is None else format(v, f)
    models = list(dict.fromkeys(r["model"] for r in t))
    for m in models:
        for prec in precs:
            tp = prec if prec in TORCH_PRECS else "fp16"
            for b in sorted({r["batch"] for r in t if r["model"] == m}):
                kiln = find(m, prec, b, "kiln cuda")
                kdev = find(m, prec, b, "kiln GPU compute") or find(m, prec, b, "kiln device (replay)")
                group = [r for r in t if (r["model"], r["prec"], r["batch"]) == (m, prec, b) and r["impl"].startswith("kiln")]
                if not group and prec not in TORCH_PRECS:
                    continue  # no kiln engine in this precision (its build failed): no comparison
                group += [r for r in t if (r["model"], r["prec"], r["batch"]) == (m, tp, b) and r["impl"].startswith("torch")]
                for r in group:
                    own = r["impl"].startswith("kiln")
                    impl = r["impl"] + (f" ({tp})" if not own and tp != prec else "")
                    impl += " (fallback)" if r.get("precision_fallback") else ""
                    ratio = f"{kiln['throughput'] / r['throughput']:.2f}" if kiln and not own else ""
                    dratio = f"{kdev['throughput'] / r['throughput']:.2f}" if kdev and not own else ""
                    log(f"{m:<9} {prec:<5} {b:>5}  {impl:<34} {r['throughput']:>10.1f} {r['p50_ms']:>9.3f} "
                        f"{fmt(r.get('p99_ms'), '.3f'):>9} {ratio:>9} {dratio:>9} {fmt(r.get('compile_s'), '.0f'):>9}  "
                        f"{fmt(r.get('verify_cosine'), '.6f'):>8} {fmt(r.get('verify_snr_db'), '.1f'):>7} "
                        f"{fmt(r.get('verify_max_rel'), '.2e'):>8}")


def check_ocr_cpu(a):
    """The PP-OCRv4 det interpreter (bench/onnx_torch.py) in FP32 on the CPU against `kiln run` on the
    CPU, on the output and on intermediate values made graph outputs (every Concat, and the logits the
    last node reads: a random image's probabilities are all near 0); no GPU needed. Exit status 0 when
    every max relative error (to the value's max magnitude) is <= 1e-4."""
    path = os.path.join(a.models, OCR_MODEL)
    mp = onnx.load(path)
    nodes = [n for n in mp.graph.node if n.op_type != "Constant"]
    names = [n.output[0] for n in nodes if n.op_type == "Concat"] + [nodes[-1].input[0]]
    names += [o.name for o in mp.graph.output]
    for v in names[:-len(mp.graph.output)]:
        mp.graph.output.append(onnx.helper.make_empty_tensor_value_info(v))
    m = OnnxModule(path, outputs=names).eval()
    x = np.random.default_rng(0).uniform(-1, 1, (1, 3, 320, 320)).astype(np.float32)
    with torch.no_grad():
        ys = m(torch.from_numpy(x))
    with tempfile.TemporaryDirectory() as d:
        p = os.path.join(d, "ocr_det_probe.onnx")
        onnx.save(mp, p)
        outs, _ = kiln_run_outputs(a.kiln, p, {"x": x}, False, device="cpu")
    worst = 0.0
    for v, y in zip(names, ys):
        y, k = y.numpy(), pick_output(outs, v)
        e = float(np.max(np.abs(y.astype(np.float64) - k))) / max(1e-30, float(np.max(np.abs(k))))
        e = e if y.shape == k.shape else float("inf")
        worst = max(worst, e)
        log(f"ocr_det 1x3x320x320 fp32 {v}: torch interpreter {tuple(y.shape)} vs kiln cpu {tuple(k.shape)}: "
            f"max |diff| / max |kiln| {e:.3g} (max |kiln| {float(np.max(np.abs(k))):.4g})")
    return 0 if worst <= 1e-4 else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kiln", default="build/kiln")
    ap.add_argument("--models", default="models")
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--resnet-batches", default="1,64,256")
    ap.add_argument("--bert-batches", default="1,64")
    ap.add_argument("--ocr-batches", default="1,16")
    ap.add_argument("--ocr-size", type=int, default=640, help="PP-OCRv4 det input height = width")
    ap.add_argument("--only", default="resnet50,bert_base,ocr_det", help="models to run")
    ap.add_argument("--tf32", action="store_true", help="TF32 for FP32 on both sides")
    ap.add_argument("--json", help="write all rows here")
    ap.add_argument("--precisions", default="fp32",
                    help="kiln precisions, e.g. fp32,fp16,bf16,fp8,int8 (torch the same; fp16 for kiln's fp8/int8)")
    ap.add_argument("--compile", default="max-autotune",
                    help="torch.compile mode (max-autotune compiles for minutes per model/precision/batch); none skips")
    ap.add_argument("--compile-precisions", default="fp16",
                    help="torch precisions timed under torch.compile too (default fp16; e.g. fp32,fp16,bf16)")
    ap.add_argument("--check-ocr-cpu", action="store_true",
                    help="only check bench/onnx_torch.py on PP-OCRv4 det against kiln on the CPU (no GPU)")
    a = ap.parse_args()
    if a.check_ocr_cpu:
        sys.exit(check_ocr_cpu(a))

    torch.backends.cuda.matmul.allow_tf32 = a.tf32
    torch.backends.cudnn.allow_tf32 = a.tf32
    torch.backends.cudnn.benchmark = True
    here = os.path.dirname(os.path.abspath(__file__))
    gen = os.path.join(here, "..", "scripts", "gen_models.py")
    only = [m for m in a.only.split(",") if m]
    for m in ("resnet50", "bert_base"):
        if m in only and not os.path.exists(os.path.join(a.models, m + ".onnx")):
            log(f"generating {m} ...")
            subprocess.run([sys.executable, gen, "--out", a.models, "--only", m], check=True)
    prop = torch.cuda.get_device_properties(0)
    try:
        smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True).stdout.strip()
    except OSError as ex:
        smi = f"nvidia-smi: {ex}"
    log(f"GPU: {prop.name} ({smi}); torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}; "
        f"precision {'TF32' if a.tf32 else 'FP32 (TF32 off)'}; torch.compile mode {a.compile}")
    rows = []
    a.precs = [p for p in a.precisions.split(",") if p]
    a.compile_precs = [p for p in a.compile_precisions.split(",") if p]
    a.tmp = tempfile.mkdtemp(prefix="kiln_bench_")
    rng = np.random.default_rng(0)

    def save(rows):
        if a.json:  # rewritten after every batch: a run cut short keeps what it measured
            with open(a.json, "w") as f:
                json.dump({"gpu": prop.name, "nvidia_smi": smi, "torch": torch.__version__, "tf32": a.tf32,
                           "compile": a.compile, "compile_precisions": a.compile_precs, "iters": a.iters,
                           "rows": rows}, f, indent=1)
    a.save = save
    for s in specs(a, rng):
        if s.name not in only:
            continue
        try:
            section(a, s, rows)
        except Exception as ex:  # noqa: BLE001 - the other models and the table still come
            log(f"{s.name}: FAILED: {ex}")
            rows.append({"check": s.name, "error": str(ex)})
        torch.cuda.empty_cache()
    shutil.rmtree(a.tmp, ignore_errors=True)
    print_table(rows, a.precs)
    save(rows)


if __name__ == "__main__":
    main()

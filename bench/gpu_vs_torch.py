#!/usr/bin/env python3
"""kiln --device cuda vs PyTorch on the same ONNX weights, one command on a GPU machine.

    python3 bench/gpu_vs_torch.py [--kiln build/kiln] [--models models] [--iters 30] [--json OUT.json]
                                  [--precisions fp32,fp16,bf16]

Models: ResNet-50 (batch 1 and large batches) and BERT-base (sequence 128) from
scripts/gen_models.py (generated into --models when missing). PyTorch runs the same weights:
torchvision's resnet50 with the ONNX initializers loaded by name, and a BERT encoder written here
op for op like the ONNX graph (exact GELU, additive mask, LayerNorm eps 1e-12), with
F.scaled_dot_product_attention. Precision: FP32 with TF32 off on both sides (kiln's default;
torch.backends.*.allow_tf32 = False), and TF32 on both sides with --tf32. FP16 / BF16: kiln engines
built with `kiln build --precision fp16|bf16 --device cuda` (half weights and activations on the
GPU, FP32 accumulation) against PyTorch's model converted to that dtype (ResNet-50 channels_last),
eager and CUDA graph; each kiln precision's outputs are checked against PyTorch FP32.

Timing. kiln: `kiln bench --device cuda --json` (host wall clock around kiln_context_run: it
includes copying the inputs from host memory to the GPU and the outputs back). PyTorch: median of
CUDA-event timings of (a) eager and (b) a captured CUDA graph with the input already on the GPU,
and (c) eager including the host->GPU input copy and the output copy back (what kiln's number
includes). When kiln's timed runs replay its CUDA graph, a second kiln row gives the device time
of a replay (`graph_ms`: CUDA events around the graph launch, inputs already in pinned memory, their DMA
included) and a third its GPU compute time (`compute_ms`: the same without the DMA of the inputs that
begins the replay, trtexec's "GPU Compute Time"), the number to compare with PyTorch's eager and graph
rows ("kiln dev/this"). Before timing, each model's kiln output
is checked against PyTorch's (max relative error printed). The table: throughput (items/s), p50
latency (ms), kiln / PyTorch and kiln device / PyTorch throughput.
"""
import argparse
import json
import os
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


# ---------------------------------------------------------------------------- timing
def time_cuda(fn, iters, warmup=5):
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
    return float(np.median(ts))


def torch_rows(name, model, inputs, batch, iters):
    """eager, CUDA graph (inputs resident on the GPU) and eager with host copies."""
    dev = [x.cuda() for x in inputs]
    rows = []
    with torch.no_grad():
        ms = time_cuda(lambda: model(*dev), iters)
        rows.append(("torch eager", ms))
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
            ms = time_cuda(g.replay, iters)
            rows.append(("torch CUDA graph", ms))
            del g
        except Exception as ex:  # noqa: BLE001 - report and go on
            log(f"  {name} b{batch}: CUDA graph capture failed: {ex}")
        host = inputs

        def e2e():
            out = model(*[x.cuda(non_blocking=False) for x in host])
            out = out if isinstance(out, tuple) else (out,)
            return [o.cpu() for o in out]
        ms = time_cuda(e2e, max(5, iters // 3))
        rows.append(("torch eager +copies", ms))
    return [(impl, batch / (ms / 1e3), ms) for impl, ms in rows]


def kiln_engine(kiln, model, prec, tmpdir):
    """The model itself for fp32; else an engine built for the GPU in that precision."""
    if prec == "fp32":
        return model
    out = os.path.join(tmpdir, os.path.basename(model).replace(".onnx", f".{prec}.kiln"))
    if not os.path.exists(out):
        t0 = time.time()
        r = subprocess.run([kiln, "build", model, "-o", out, "--precision", prec, "--device", "cuda", "--no-tactics"],
                           capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"kiln build --precision {prec} failed: {r.stderr.strip()[-800:]}")
        log(f"  built {os.path.basename(out)} in {time.time() - t0:.1f} s")
    return out


def half_model(model, prec, channels_last=False):
    import copy
    dt = {"fp16": torch.float16, "bf16": torch.bfloat16}[prec]
    m = copy.deepcopy(model).to(dt)
    return m.to(memory_format=torch.channels_last) if channels_last else m


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


def kiln_rows(rows, model, prec, bsz, k):
    """kiln's rows: whole runs (host copies included) and, when the runs replayed a CUDA graph, the
    device time of a replay (events around the graph launch; inputs already in pinned memory, like
    PyTorch's inputs already on the GPU, except the graph's own DMA of them)."""
    if not k:
        return
    rows.append({"model": model, "prec": prec, "batch": bsz, "impl": "kiln cuda", "throughput": k["throughput"],
                 "p50_ms": k["latency_ms"]["p50"], "fallback_layers": k.get("fallback_layers"),
                 "graph_replays": k.get("graph_replays")})
    g = k.get("graph_ms")
    if g and g.get("p50", 0) > 0:
        rows.append({"model": model, "prec": prec, "batch": bsz, "impl": "kiln device (replay)",
                     "throughput": bsz / (g["p50"] / 1e3), "p50_ms": g["p50"]})
    c = k.get("compute_ms")
    if c and c.get("p50", 0) > 0:
        rows.append({"model": model, "prec": prec, "batch": bsz, "impl": "kiln GPU compute",
                     "throughput": bsz / (c["p50"] / 1e3), "p50_ms": c["p50"]})


def kiln_run_outputs(kiln, model, feeds, tf32):
    with tempfile.TemporaryDirectory() as d:
        args = []
        for name, arr in feeds.items():
            p = os.path.join(d, name + ".npy")
            np.save(p, arr)
            args += ["--input", f"{name}={p}"]
        od = os.path.join(d, "out")
        os.makedirs(od)
        r = subprocess.run([kiln, "run", model, *args, "--output-dir", od, "--device", "cuda"] +
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


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kiln", default="build/kiln")
    ap.add_argument("--models", default="models")
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--resnet-batches", default="1,64,256")
    ap.add_argument("--bert-batches", default="1,64")
    ap.add_argument("--tf32", action="store_true", help="TF32 for FP32 on both sides")
    ap.add_argument("--json", help="write all rows here")
    ap.add_argument("--precisions", default="fp32", help="kiln precisions, e.g. fp32,fp16,bf16 (torch the same)")
    a = ap.parse_args()

    torch.backends.cuda.matmul.allow_tf32 = a.tf32
    torch.backends.cudnn.allow_tf32 = a.tf32
    torch.backends.cudnn.benchmark = True
    here = os.path.dirname(os.path.abspath(__file__))
    gen = os.path.join(here, "..", "scripts", "gen_models.py")
    for m in ("resnet50", "bert_base"):
        if not os.path.exists(os.path.join(a.models, m + ".onnx")):
            log(f"generating {m} ...")
            subprocess.run([sys.executable, gen, "--out", a.models, "--only", m], check=True)
    prop = torch.cuda.get_device_properties(0)
    smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                         capture_output=True, text=True).stdout.strip()
    log(f"GPU: {prop.name} ({smi}); torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}; "
        f"precision {'TF32' if a.tf32 else 'FP32 (TF32 off)'}")
    rows = []
    a.precs = [p for p in a.precisions.split(",") if p]
    a.tmp = tempfile.mkdtemp(prefix="kiln_bench_")
    rn = os.path.join(a.models, "resnet50.onnx")
    bt = os.path.join(a.models, "bert_base.onnx")
    rng = np.random.default_rng(0)

    def resnet_section():
        _resnet(a, rn, rng, rows)

    def bert_section():
        _bert(a, bt, rng, rows)

    for name, sec in (("resnet50", resnet_section), ("bert_base", bert_section)):
        try:
            sec()
        except Exception as ex:  # noqa: BLE001 - the other model and the table still come
            log(f"{name}: FAILED: {ex}")
            rows.append({"check": name, "error": str(ex)})
        torch.cuda.empty_cache()
    print_table(rows)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"gpu": prop.name, "nvidia_smi": smi, "torch": torch.__version__, "tf32": a.tf32,
                       "rows": rows}, f, indent=1)


def _resnet(a, rn, rng, rows):
    net = torch_resnet50(onnx_weights(rn)).cuda()
    x = rng.uniform(-1, 1, (2, 3, 224, 224)).astype(np.float32)
    with torch.no_grad():
        ref = net(torch.from_numpy(x).cuda()).cpu().numpy()
    for prec in a.precs:
        eng = kiln_engine(a.kiln, rn, prec, a.tmp)
        outs, err = kiln_run_outputs(a.kiln, eng, {"input": x}, a.tf32)
        e = rel_err(outs["logits"], ref)
        log(f"resnet50 batch 2 {prec}: kiln cuda vs torch fp32 max rel err {e:.3g}" +
            (f"  [{err.strip()[-300:]}]" if err.strip() else ""))
        rows.append({"check": "resnet50", "prec": prec, "max_rel_err": e})
    for prec in a.precs:
        eng = kiln_engine(a.kiln, rn, prec, a.tmp)
        tnet = net if prec == "fp32" else half_model(net, prec, channels_last=True)
        for bsz in [int(v) for v in a.resnet_batches.split(",") if v]:
            iters = a.iters if bsz < 128 else max(10, a.iters // 2)
            k = kiln_bench(a.kiln, eng, f"input:{bsz}x3x224x224", iters, a.tf32)
            kiln_rows(rows, "resnet50", prec, bsz, k)
            xt = torch.from_numpy(rng.uniform(-1, 1, (bsz, 3, 224, 224)).astype(np.float32))
            if prec != "fp32":
                xt = xt.to(next(tnet.parameters()).dtype).contiguous(memory_format=torch.channels_last)
            for impl, thr, ms in torch_rows("resnet50", tnet, [xt], bsz, iters):
                rows.append({"model": "resnet50", "prec": prec, "batch": bsz, "impl": impl, "throughput": thr,
                             "p50_ms": ms})
            log(f"  resnet50 {prec} batch {bsz} done")


def _bert(a, bt, rng, rows):
    bert = Bert(onnx_weights(bt)).cuda().eval()
    S = 128
    ids = rng.integers(0, 30522, (2, S)).astype(np.int64)
    mask = np.ones((2, S), np.int64)
    mask[1, 100:] = 0
    types = np.zeros((2, S), np.int64)
    with torch.no_grad():
        h, p = bert(*[torch.from_numpy(v).cuda() for v in (ids, mask, types)])
    for prec in a.precs:
        eng = kiln_engine(a.kiln, bt, prec, a.tmp)
        outs, err = kiln_run_outputs(a.kiln, eng, {"input_ids": ids, "attention_mask": mask, "token_type_ids": types},
                                     a.tf32)
        e = max(rel_err(outs["last_hidden_state"], h.cpu().numpy()), rel_err(outs["pooler_output"], p.cpu().numpy()))
        log(f"bert_base batch 2 seq {S} {prec}: kiln cuda vs torch fp32 max rel err {e:.3g}" +
            (f"  [{err.strip()[-300:]}]" if err.strip() else ""))
        rows.append({"check": "bert_base", "prec": prec, "max_rel_err": e})
    for prec in a.precs:
        eng = kiln_engine(a.kiln, bt, prec, a.tmp)
        tb = bert if prec == "fp32" else half_model(bert, prec)
        for bsz in [int(v) for v in a.bert_batches.split(",") if v]:
            k = kiln_bench(a.kiln, eng, f"input_ids:{bsz}x{S},attention_mask:{bsz}x{S},token_type_ids:{bsz}x{S}",
                           a.iters, a.tf32)
            kiln_rows(rows, "bert_base", prec, bsz, k)
            tin = [torch.from_numpy(rng.integers(0, 30522, (bsz, S)).astype(np.int64)),
                   torch.ones((bsz, S), dtype=torch.int64), torch.zeros((bsz, S), dtype=torch.int64)]
            for impl, thr, ms in torch_rows("bert_base", tb, tin, bsz, a.iters):
                rows.append({"model": "bert_base", "prec": prec, "batch": bsz, "impl": impl, "throughput": thr,
                             "p50_ms": ms})
            log(f"  bert_base {prec} batch {bsz} done")


def print_table(rows):
    log("")
    log(f"{'model':<10} {'prec':<5} {'batch':>5}  {'impl':<20} {'items/s':>10} {'p50 ms':>9} {'kiln/this':>9} "
        f"{'kiln dev/this':>13}")

    def kiln_of(r, impl):
        return next((q for q in rows if q.get("impl") == impl and q.get("model") == r["model"] and
                     q.get("batch") == r["batch"] and q.get("prec") == r.get("prec")), None)
    for r in rows:
        if "impl" not in r:
            continue
        kiln = kiln_of(r, "kiln cuda")
        kdev = kiln_of(r, "kiln GPU compute") or kiln_of(r, "kiln device (replay)")
        own = r["impl"].startswith("kiln")
        ratio = f"{kiln['throughput'] / r['throughput']:.2f}" if kiln and not own else ""
        dratio = f"{kdev['throughput'] / r['throughput']:.2f}" if kdev and not own else ""
        log(f"{r['model']:<10} {r.get('prec', 'fp32'):<5} {r['batch']:>5}  {r['impl']:<20} {r['throughput']:>10.1f} "
            f"{r['p50_ms']:>9.3f} {ratio:>9} {dratio:>13}")


if __name__ == "__main__":
    main()

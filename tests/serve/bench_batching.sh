#!/usr/bin/env bash
# Benchmark (reported, not a CI test): kiln serve throughput at concurrency 32 with dynamic
# batching off, derived from the engine, and forced to batches of 8, on the PaddleOCR direction
# classifier and tiny_cnn; binary payloads, one instance, THREADS threads per context.
# usage: tests/serve/bench_batching.sh build/kiln [THREADS] [REQUESTS]
KILN="$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"
THREADS="${2:-2}"
N="${3:-2000}"
source "$(dirname "$0")/lib.sh"
B="$TMP/repo"
for m in cls tiny; do
  if [ $m = cls ]; then src="$CLS_MODEL"; in='input [ { name: "x", data_type: TYPE_FP32, dims: [ 3, 48, 192 ] } ]'
  else src="$MODELS/tiny_cnn.onnx"; in='input [ { name: "input", data_type: TYPE_FP32, dims: [ 3, 32, 32 ] } ]'; fi
  for v in off auto b8; do mkdir -p "$B/${m}_$v/1"; cp "$src" "$B/${m}_$v/1/model.onnx"; done
  printf 'max_batch_size: 16\n%s\n' "$in" > "$B/${m}_off/config.pbtxt"
  printf 'max_batch_size: 16\n%s\ndynamic_batching { }\n' "$in" > "$B/${m}_auto/config.pbtxt"
  printf 'max_batch_size: 16\n%s\ndynamic_batching { preferred_batch_size: [8] max_queue_delay_microseconds: 2000 }\n' "$in" > "$B/${m}_b8/config.pbtxt"
done
"$KILN" serve --model-repository "$B" --http-port 0 --threads "$THREADS" > "$TMP/server.log" 2>&1 &
SPID=$!
for _ in $(seq 1 600); do grep -q 'listening on port' "$TMP/server.log" && break; sleep 0.1; done
URL="http://127.0.0.1:$(grep -o 'listening on port [0-9]*' "$TMP/server.log" | grep -o '[0-9]*$')"
echo "machine: $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg); $THREADS threads per context, concurrency 32, binary payloads, $N requests per run"
for m in cls tiny; do
  curl -s "$URL/v2/models/${m}_auto/config" | python3 -c 'import json,sys; c=json.load(sys.stdin); print("  %s derived: %s (%s)" % (sys.argv[1], c["dynamic_batching"], c["kiln_batching"]["reason"]))' "$m"
done
printf '| model | batching | infer/s | p50 ms | p99 ms | inferences per execution |\n|---|---|---|---|---|---|\n'
for m in cls tiny; do
  for v in off auto b8; do
    for round in 1 2; do   # two rounds, alternated; the better one is reported
      "$KILN" loadgen --url "$URL" -m "${m}_$v" --concurrency 32 --requests "$N" --binary --json > "$TMP/r_${m}_${v}_$round.json"
    done
  done
  for v in off auto b8; do
    before_exec=0
    curl -s "$URL/metrics" > "$TMP/metrics"
    python3 - "$m" "$v" "$TMP/r_${m}_${v}_1.json" "$TMP/r_${m}_${v}_2.json" "$TMP/metrics" <<'PY'
import json, re, sys
m, v = sys.argv[1], sys.argv[2]
rs = [json.load(open(f))["levels"][0] for f in sys.argv[3:5]]
r = max(rs, key=lambda x: x["infer_per_sec"])
met = {}
for line in open(sys.argv[5]):
    g = re.match(r'(\w+)\{model="%s_%s",version="1"\} (\d+)' % (m, v), line)
    if g:
        met[g.group(1)] = int(g.group(2))
ratio = met["nv_inference_count"] / max(1, met["nv_inference_exec_count"])
name = {"cls": "OCR cls", "tiny": "tiny_cnn"}[m]
label = {"off": "off", "auto": "derived", "b8": "preferred 8, 2 ms"}[v]
print("| %s | %s | %.0f | %.2f | %.2f | %.2f |" % (name, label, r["infer_per_sec"], r["p50_ms"], r["p99_ms"], ratio))
PY
  done
done
stop_server

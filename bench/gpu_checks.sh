#!/usr/bin/env bash
# The GPU checks a device session starts with, in one call and one log (a device call returns few files).
#
#   bash bench/gpu_checks.sh [--bin DIR] [--libs DIR] [--log FILE] STEP [STEP ...]
#
# --bin DIR   where kiln, test_gpu and libkiln_cuda.so are (default build)
# --libs DIR  extra shared libraries for the loader (a machine without kiln's Debian packages)
# --log FILE  the log (default $OUT/gpu_checks.log when $OUT is set, else gpu_checks.log); the running step's whole
#             output is in FILE with .part.txt for .log (what a call cut short brings back)
# Steps (each time-boxed; the log keeps every step's status and tail):
#   models     generate resnet50 / tiny_cnn / bert_base when missing (scripts/gen_models.py)
#   ocr-half   test_gpu's PP-OCRv4 det FP32, FP16 and BF16 model cases (CUDA graph replays against the CPU)
#   cases      test_gpu's one-node cases (no models)
#   gpu-all    test_gpu with its default models
#   ocr-bench  bench/gpu_vs_torch.py --only ocr_det, FP32 and FP16, batches 1 and 16
#   r50-ab     ResNet-50 batch 256 FP16 against FP8 (kiln bench compute_ms, alternated twice)
#   int8       test_gpu's INT8 cases (QuantizeLinear, DequantizeLinear, QLinearAdd, QLinearConv, QLinearConvAdd,
#              QLinearMatMul in each kernel configuration, against the CPU) and the ResNet-50 and BERT-base INT8 model
#              cases (batch 2)
#   bert-int8  BERT-base seq 128 batch 128 FP16 against INT8 (kiln bench compute_ms, alternated twice; with MODULE_B
#              an INT8 engine built and run with that module too, bi8-b), then
#              KILN_CUDA_PROFILE=layers of INT8 into $OUT/prof_bert_int8.txt; then the engine built with
#              --float-activations fp16 (bench with its half_storage_layers, profile, test_gpu's int8+fp16 model case)
#   r50-int8   ResNet-50 batch 256 FP16 against INT8 and INT8 with --float-activations fp16 (ri8m; kiln bench
#              compute_ms, alternated twice; the INT8 convolutions'
#              timed configurations into $OUT/int8_choices.txt), then KILN_CUDA_PROFILE=layers of INT8 into
#              $OUT/prof_r50_int8.txt and its `kiln inspect --device cuda` into $OUT/inspect_r50_int8.txt; with
#              MODULE_B=PATH (another build's libkiln_cuda.so) an INT8 engine built with that module (its own kernel
#              choices) is benched with it in each round (ri8-b) and profiled into $OUT/prof_r50_int8_b.txt; the FP16
#              engine's layers into $OUT/prof_r50_fp16.txt; NCU=N: ncu's sections of the INT8 engine's first N integer
#              convolutions into $OUT/ncu_r50_int8.txt
#   tcache     KILN_CUDA_TIMING_CACHE: PP-OCRv4 det FP16 and ResNet-50 FP8 `kiln bench` processes timed without the
#              cache, filling it, then reading it (the wall time of each process and its p50)
#   tactics    device tactics in the engine: PP-OCRv4 det FP16 (1x3x640x640) built without them (no module at build
#              time) and with them (`kiln build --device cuda` times at the opt shapes), each engine's `kiln bench`
#              process timed (wall time, p50, "tactics" of the JSON), then KILN_CUDA_PROFILE=1 per-op sums of the FP16
#              and FP32 engines into $OUT/prof_fp16.txt, $OUT/prof_fp32.txt
#   r50-tac    ResNet-50 batch 256 FP16 and FP8 engines built with device tactics (`kiln build --device cuda`, the
#              wall time of each build: the issue's "build under 60 s"), each `kiln bench` process timed ("tactics" of
#              the JSON, compute_ms), alternated twice, then KILN_CUDA_PROFILE=layers of both into
#              $OUT/prof_r50_fp16.txt, $OUT/prof_r50_fp8.txt
#   bert-tac   BERT-base seq 128 batch 128 FP16 with device tactics, cuBLASLt's GEMM algorithms among them (kind l):
#              build, two bench processes ("tactics": loaded / timed; compute_ms) against an engine without them
#   buildtime  ResNet-50 FP16 batch 256 `kiln build --device cuda` (device tactics timed) three times (the first
#              loads the libraries from the disk); each build's wall time and the module's account of its cuDNN engine
#              choices (KILN_CUDA_CONV_GRAPH=2: heuristics, plans finalized, timed), then the last two engines benched
#   bert-verify  `kiln verify` of a BERT-base FP16 engine with device tactics (batch 2) against the ONNX model
#   compile-r50, compile-bert  bench/gpu_vs_torch.py FP16 with the torch.compile max-autotune rows (ResNet-50 batches
#              1 and 256, BERT-base batches 1 and 128; minutes of compiling each), JSON into $OUT/compile_MODEL.json
#   ocr-acc    PaddleOCR cls / rec real-task accuracy on the GPU, FP32 and FP16 engines (scripts/ocr_accuracy.py
#              --device cuda) on $OCR_EVAL (default .dev/ocr_eval), made on a machine with ImageMagick and carried:
#              `scripts/ocr_eval_data.py --out .dev/ocr_eval --batch 320` (one batch file: one kiln run an engine,
#              each run loading the CUDA libraries again; $OCR_BATCH, default 320, must be that batch)
# The first kiln process on a fresh machine spends ~50 s loading the CUDA libraries: the time boxes allow it.
set -u
BIN=build
LIBS=""
LOG="${OUT:+$OUT/}gpu_checks.log"
steps=()
while [ $# -gt 0 ]; do
    case "$1" in
    --bin) BIN=$2; shift 2 ;;
    --libs) LIBS=$2; shift 2 ;;
    --log) LOG=$2; shift 2 ;;
    -h|--help) sed -n '2,/^set -u/p' "$0" | grep '^#' | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "gpu_checks.sh: unknown option $1" >&2; exit 2 ;;
    *) steps+=("$1"); shift ;;
    esac
done
[ ${#steps[@]} -gt 0 ] || { echo "gpu_checks.sh: no step (--help)" >&2; exit 2; }
export LD_LIBRARY_PATH="${LIBS:+$LIBS:}$BIN${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
K=$BIN/kiln
T=$BIN/test_gpu
OCR=models/ocr/ch_PP-OCRv4_det_infer.onnx
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
log() { echo "[$(date +%T)] $*" >> "$LOG"; }
# run NAME SECONDS TAIL_LINES CMD...: the command's output into the log's tail, its status on the step line; while it
# runs its output goes to $PART (beside the log), so a device call cut short still brings back the running step's
PART="${LOG%.log}.part.txt"
run() {
    local name=$1 secs=$2 lines=$3
    shift 3
    log "== $name"
    timeout "$secs" "$@" > "$PART" 2>&1
    local rc=$?
    tail -n "$lines" "$PART" >> "$LOG"
    log "$name rc=$rc$([ $rc = 124 ] && echo ' (timed out)')"
}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> "$LOG" 2>&1
for s in "${steps[@]}"; do
    case "$s" in
    models) run models 240 5 python3 scripts/gen_models.py --out models --only resnet50,tiny_cnn,bert_base --no-check ;;
    ocr-half) run ocr-half 300 40 env KILN_TEST_GPU_ONLY=models "$T" --require-gpu "$OCR@x:2x3x96x128" \
                  "$OCR@x:2x3x96x128#fp16" "$OCR@x:2x3x96x128#bf16" ;;
    cases) run cases ${CASES_BOX:-420} 60 "$T" --require-gpu models/absent.onnx ;;   # the model given is absent: skipped
    gpu-all) run gpu-all 600 80 "$T" --require-gpu ;;
    ocr-bench) run ocr-bench 420 40 python3 bench/gpu_vs_torch.py --kiln "$K" --only ocr_det --precisions fp32,fp16 \
                   --ocr-batches 1,16 --iters 20 --compile none ;;
    int8) run int8 ${CASES_BOX:-300} 90 env KILN_TEST_GPU_ONLY=int8 "$T" --require-gpu \
              "models/resnet50.onnx@input:2x3x224x224#int8" \
              "models/bert_base.onnx@input_ids:2x128,attention_mask:2x128,token_type_ids:2x128#int8" ;;
    bert-int8)
        S=input_ids:128x128,attention_mask:128x128,token_type_ids:128x128
        mkdir -p "$TMP/bcal"
        python3 scripts/make_inputs.py models/bert_base.onnx --shape input_ids=4x128 --shape attention_mask=4x128 \
            --shape token_type_ids=4x128 --out "$TMP/bcal" --seed 5 > /dev/null
        for f in "$TMP/bcal"/*.npy; do mv "$f" "${f%.npy}_0.npy"; done   # NAME_KEY.npy: one sample key, batch 4
        run bert-build16 240 3 "$K" build models/bert_base.onnx -o "$TMP/b16.kiln" --precision fp16 --device cuda \
            --no-tactics --shapes $S
        run bert-buildi8 300 6 "$K" build models/bert_base.onnx -o "$TMP/bi8.kiln" --precision int8 --calib "$TMP/bcal" \
            --device cuda --no-tactics --shapes $S
        # MODULE_B's engine built with MODULE_B (its own timed kernel choices: the two modules may offer different
        # configurations, so neither runs the other's engine)
        [ -n "${MODULE_B:-}" ] && run bert-buildi8-b 300 3 env KILN_CUDA_MODULE="$MODULE_B" "$K" build \
            models/bert_base.onnx -o "$TMP/bi8-b.kiln" --precision int8 --calib "$TMP/bcal" --device cuda --no-tactics \
            --shapes $S
        for round in 1 2; do
            for e in b16 bi8 ${MODULE_B:+bi8-b}; do
                mod=""
                [ "$e" = bi8-b ] && mod=$MODULE_B
                env ${mod:+KILN_CUDA_MODULE=$mod} timeout 120 "$K" bench "$TMP/$e.kiln" --device cuda --batch 128 \
                    --iterations 20 --json > "$TMP/b.json" 2>&1
                log "bench $e round $round rc=$? $(grep -o '"compute_ms"[^,]*' "$TMP/b.json" | head -1) $(grep -o '"fallback[^,]*' "$TMP/b.json" | head -2 | tr '\n' ' ')"
            done
        done
        KILN_CUDA_PROFILE=layers timeout 150 "$K" bench "$TMP/bi8.kiln" --device cuda --batch 128 --iterations 3 \
            > "${OUT:-.}/prof_bert_int8.txt" 2>&1
        log "profile bert int8 rc=$?"
        # the INT8 layers' float outputs in FP16 storage (kiln build --float-activations fp16): speed, the half storage
        # the GPU realized, and the model check's accuracy against the CPU
        run bert-buildi8h 300 6 "$K" build models/bert_base.onnx -o "$TMP/bi8h.kiln" --precision int8 \
            --calib "$TMP/bcal" --device cuda --no-tactics --shapes $S --float-activations fp16
        for round in 1 2; do
            for e in bi8 bi8h; do
                timeout 120 "$K" bench "$TMP/$e.kiln" --device cuda --batch 128 --iterations 20 --json > "$TMP/b.json" 2>&1
                log "bench $e round $round rc=$? $(grep -o '"compute_ms"[^,]*' "$TMP/b.json" | head -1) $(grep -o '"half_storage_layers"[^,}]*' "$TMP/b.json")"
            done
        done
        KILN_CUDA_PROFILE=layers timeout 150 "$K" bench "$TMP/bi8h.kiln" --device cuda --batch 128 --iterations 3 \
            > "${OUT:-.}/prof_bert_int8_f16.txt" 2>&1
        run bert-int8-f16 200 60 env KILN_TEST_GPU_ONLY=models "$T" --require-gpu \
            "models/bert_base.onnx@input_ids:2x128,attention_mask:2x128,token_type_ids:2x128#int8+fp16"
        ;;
    r50-int8)
        S=input:256x3x224x224
        mkdir -p "$TMP/cal"
        python3 -c "import numpy as np; np.save('$TMP/cal/x.npy', np.random.default_rng(0).standard_normal((4,3,224,224)).astype('float32'))"
        run r50-build16 240 3 "$K" build models/resnet50.onnx -o "$TMP/r16.kiln" --precision fp16 --device cuda \
            --no-tactics --shapes $S
        # KILN_CUDA_CONV_GRAPH=2: each INT8 convolution's configurations as the build's device-tactics run times them
        # (a bench of the engine takes the stored choices and times nothing)
        run r50-buildi8 240 6 env KILN_CUDA_CONV_GRAPH=2 "$K" build models/resnet50.onnx -o "$TMP/ri8.kiln" \
            --precision int8 --calib "$TMP/cal" --device cuda --no-tactics --shapes $S
        cp "$PART" "${OUT:-.}/int8_choices.txt"
        log "int8 choices: $(grep -c 'INT8 conv' "${OUT:-.}/int8_choices.txt") lines; $(grep -i 'fallback\|on the CPU' "${OUT:-.}/int8_choices.txt" | head -3)"
        # TensorRT's --int8 --fp16: the float outputs of the INT8 layers held in FP16 too (the first and last layers,
        # kept out of INT8, are FP16 in --device cuda builds already)
        run r50-buildi8m 240 6 "$K" build models/resnet50.onnx -o "$TMP/ri8m.kiln" --precision int8 --calib "$TMP/cal" \
            --device cuda --no-tactics --shapes $S --float-activations fp16
        # MODULE_B's engine built with MODULE_B (its own timed kernel choices, as for BERT above)
        [ -n "${MODULE_B:-}" ] && run r50-buildi8-b 240 3 env KILN_CUDA_MODULE="$MODULE_B" "$K" build \
            models/resnet50.onnx -o "$TMP/ri8-b.kiln" --precision int8 --calib "$TMP/cal" --device cuda --no-tactics \
            --shapes $S
        for round in 1 2; do
            for e in r16 ri8 ri8m ${MODULE_B:+ri8-b}; do
                mod=""
                [ "$e" = ri8-b ] && mod=$MODULE_B
                env ${mod:+KILN_CUDA_MODULE=$mod} timeout 120 "$K" bench "$TMP/$e.kiln" --device cuda --batch 256 \
                    --iterations 20 --json > "$TMP/b.json" 2>&1
                log "bench $e round $round rc=$? $(grep -o '"compute_ms"[^,]*' "$TMP/b.json" | head -1)"
            done
        done
        KILN_CUDA_PROFILE=layers timeout 150 "$K" bench "$TMP/ri8.kiln" --device cuda --batch 256 --iterations 3 \
            > "${OUT:-.}/prof_r50_int8.txt" 2>&1
        log "profile int8 rc=$?"
        # where each layer ran and in which precision / storage (the half-stored layers a run reports)
        timeout 120 "$K" inspect "$TMP/ri8.kiln" --device cuda > "${OUT:-.}/inspect_r50_int8.txt" 2>&1
        log "inspect int8 rc=$?"
        # the FP16 engine's layers on the same GPU (which INT8 layers lose to FP16, and by how much)
        KILN_CUDA_PROFILE=layers timeout 150 "$K" bench "$TMP/r16.kiln" --device cuda --batch 256 --iterations 3 \
            > "${OUT:-.}/prof_r50_fp16.txt" 2>&1
        log "profile fp16 rc=$?"
        # NCU=N: Nsight Compute's speed-of-light, occupancy and warp-state sections of the INT8 engine's first N integer
        # convolutions (layer1's come first) into $OUT/ncu_r50_int8.txt: what bounds them (where ncu can read counters)
        if [ -n "${NCU:-}" ] && command -v ncu > /dev/null; then
            timeout 240 ncu --clock-control none --kernel-name regex:k_conv_i8 --launch-count "$NCU" \
                --section SpeedOfLight --section Occupancy --section WarpStateStats --section LaunchStats \
                --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis --section InstructionStats \
                "$K" bench "$TMP/ri8.kiln" --device cuda --batch 256 --warmup 0 --iterations 1 \
                > "${OUT:-.}/ncu_r50_int8.txt" 2>&1
            log "ncu int8 rc=$?"
        fi
        if [ -n "${MODULE_B:-}" ]; then
            KILN_CUDA_MODULE=$MODULE_B KILN_CUDA_PROFILE=layers timeout 150 "$K" bench "$TMP/ri8-b.kiln" --device cuda \
                --batch 256 --iterations 3 > "${OUT:-.}/prof_r50_int8_b.txt" 2>&1
            log "profile int8 (MODULE_B) rc=$?"
        fi
        ;;
    r50-ab)
        S=input:256x3x224x224
        mkdir -p "$TMP/cal"
        python3 -c "import numpy as np; np.save('$TMP/cal/x.npy', np.random.default_rng(0).standard_normal((4,3,224,224)).astype('float32'))"
        run r50-build16 240 3 "$K" build models/resnet50.onnx -o "$TMP/r16.kiln" --precision fp16 --device cuda \
            --no-tactics --shapes $S
        run r50-build8 240 3 "$K" build models/resnet50.onnx -o "$TMP/r8.kiln" --precision fp8 --calib "$TMP/cal" \
            --device cuda --no-tactics --shapes $S
        for round in 1 2; do
            for e in r16 r8; do
                timeout 120 "$K" bench "$TMP/$e.kiln" --device cuda --batch 256 --iterations 20 --json > "$TMP/b.json" 2>&1
                log "bench $e round $round rc=$? $(grep -o '"compute_ms"[^,]*' "$TMP/b.json" | head -1)"
            done
        done ;;
    tcache)
        mkdir -p "$TMP/cal"
        python3 -c "import numpy as np; np.save('$TMP/cal/x.npy', np.random.default_rng(0).standard_normal((4,3,224,224)).astype('float32'))"
        run tc-build-ocr 240 3 "$K" build "$OCR" -o "$TMP/o16.kiln" --precision fp16 --device cuda --no-tactics \
            --shapes x:1x3x640x640
        run tc-build-r50 240 3 "$K" build models/resnet50.onnx -o "$TMP/r8.kiln" --precision fp8 --calib "$TMP/cal" \
            --device cuda --no-tactics --shapes input:64x3x224x224
        for e in o16 r8; do
            for mode in none fill read; do
                cache=""
                [ $mode != none ] && cache="$TMP/tc_$e.txt"
                t0=$(date +%s%N)
                KILN_CUDA_TIMING_CACHE="$cache" timeout 200 "$K" bench "$TMP/$e.kiln" --device cuda --iterations 10 \
                    --json > "$TMP/b.json" 2>&1
                rc=$?
                log "tcache $e $mode rc=$rc wall $(( ($(date +%s%N) - t0) / 1000000 )) ms $(grep -o '"p50": [0-9.]*' "$TMP/b.json" | head -1) entries $( [ -n "$cache" ] && wc -l < "$cache")"
            done
        done ;;
    tactics)
        S=x:1x3x640x640
        run tac-build-plain 120 3 env KILN_CUDA_MODULE=/nonexistent "$K" build "$OCR" -o "$TMP/plain.kiln" \
            --precision fp16 --device cuda --shapes $S
        t0=$(date +%s%N)
        run tac-build 300 6 "$K" build "$OCR" -o "$TMP/tac.kiln" --precision fp16 --device cuda --shapes $S
        log "tac-build wall $(( ($(date +%s%N) - t0) / 1000000 )) ms"
        run tac-inspect 60 3 "$K" inspect "$TMP/tac.kiln"
        for e in plain tac plain tac; do
            t0=$(date +%s%N)
            timeout 200 "$K" bench "$TMP/$e.kiln" --device cuda --iterations 10 --json > "$TMP/b.json" 2>&1
            rc=$?
            log "tac bench $e rc=$rc wall $(( ($(date +%s%N) - t0) / 1000000 )) ms $(grep -o '"p50": [0-9.]*' "$TMP/b.json" | head -1) $(grep -o '"compute_ms": {"p50": [0-9.]*' "$TMP/b.json") $(grep -o '"tactics": {[^}]*}' "$TMP/b.json")"
        done
        run tac-build32 300 3 "$K" build "$OCR" -o "$TMP/t32.kiln" --device cuda --shapes $S
        for e in tac t32; do
            KILN_CUDA_PROFILE=1 timeout 200 "$K" bench "$TMP/$e.kiln" --device cuda --iterations 10 \
                > "${OUT:-.}/prof_$e.txt" 2>&1
            log "profile $e rc=$?"
        done ;;
    r50-tac)
        S=input:256x3x224x224
        mkdir -p "$TMP/cal"
        python3 -c "import numpy as np; np.save('$TMP/cal/x.npy', np.random.default_rng(0).standard_normal((4,3,224,224)).astype('float32'))"
        t0=$(date +%s%N)
        run r50-tac-build16 240 4 "$K" build models/resnet50.onnx -o "$TMP/r16.kiln" --precision fp16 --device cuda --shapes $S
        log "r50-tac-build16 wall $(( ($(date +%s%N) - t0) / 1000000 )) ms"
        t0=$(date +%s%N)
        run r50-tac-build8 300 4 "$K" build models/resnet50.onnx -o "$TMP/r8.kiln" --precision fp8 --calib "$TMP/cal" \
            --device cuda --shapes $S
        log "r50-tac-build8 wall $(( ($(date +%s%N) - t0) / 1000000 )) ms"
        for round in 1 2; do
            for e in r16 r8; do
                t0=$(date +%s%N)
                timeout 150 "$K" bench "$TMP/$e.kiln" --device cuda --batch 256 --iterations 20 --json > "$TMP/b.json" 2>&1
                log "bench $e round $round rc=$? wall $(( ($(date +%s%N) - t0) / 1000000 )) ms $(grep -o '"compute_ms"[^,]*' "$TMP/b.json" | head -1) $(grep -o '"tactics": {[^}]*}' "$TMP/b.json")"
            done
        done
        for e in r16 r8; do
            KILN_CUDA_PROFILE=layers timeout 150 "$K" bench "$TMP/$e.kiln" --device cuda --batch 256 --iterations 3 \
                > "${OUT:-.}/prof_r50_${e#r}.txt" 2>&1
            log "profile $e rc=$?"
        done ;;
    bert-tac)
        S=input_ids:128x128,attention_mask:128x128,token_type_ids:128x128
        run bert-build-plain 240 3 "$K" build models/bert_base.onnx -o "$TMP/b16p.kiln" --precision fp16 --device cuda \
            --no-tactics --shapes $S
        t0=$(date +%s%N)
        run bert-build-tac 300 4 "$K" build models/bert_base.onnx -o "$TMP/b16t.kiln" \
            --precision fp16 --device cuda --shapes $S
        log "bert-build-tac wall $(( ($(date +%s%N) - t0) / 1000000 )) ms"
        run bert-inspect 60 3 "$K" inspect "$TMP/b16t.kiln"
        for e in b16p b16t b16p b16t; do
            t0=$(date +%s%N)
            timeout 200 "$K" bench "$TMP/$e.kiln" --device cuda --iterations 20 --json \
                > "$TMP/b.json" 2>&1
            log "bert bench $e rc=$? wall $(( ($(date +%s%N) - t0) / 1000000 )) ms $(grep -o '"compute_ms"[^,]*' "$TMP/b.json" | head -1) $(grep -o '"tactics": {[^}]*}' "$TMP/b.json")"
        done
        ;;
    buildtime)
        S=input:256x3x224x224
        for m in warm 1 2; do
            t0=$(date +%s%N)
            KILN_CUDA_CONV_GRAPH=2 timeout 240 "$K" build models/resnet50.onnx \
                -o "$TMP/bt_$m.kiln" --precision fp16 --device cuda --shapes $S > "$TMP/bt.txt" 2>&1
            rc=$?
            log "buildtime $m rc=$rc wall $(( ($(date +%s%N) - t0) / 1000000 )) ms"
            grep -E "cuDNN graph engines chosen|device tactics:" "$TMP/bt.txt" >> "$LOG"
            [ $rc = 0 ] || tail -5 "$TMP/bt.txt" >> "$LOG"
        done
        for e in bt_1 bt_2 bt_1 bt_2; do
            timeout 120 "$K" bench "$TMP/$e.kiln" --device cuda --batch 256 --iterations 20 --json > "$TMP/b.json" 2>&1
            log "bench $e rc=$? $(grep -o '"compute_ms"[^,]*' "$TMP/b.json" | head -1) $(grep -o '"tactics": {[^}]*}' "$TMP/b.json")"
        done ;;
    bert-verify)
        S=input_ids:2x128,attention_mask:2x128,token_type_ids:2x128
        run bert-vbuild 240 3 "$K" build models/bert_base.onnx -o "$TMP/bv.kiln" --precision fp16 --device cuda --shapes $S
        run bert-verify 240 12 "$K" verify "$TMP/bv.kiln" --reference models/bert_base.onnx --device cuda --samples 2 \
            --shapes $S ;;
    compile-r50) run compile-r50 ${COMPILE_BOX:-560} 40 python3 bench/gpu_vs_torch.py --kiln "$K" --only resnet50 \
                     --precisions fp16 --resnet-batches 1,256 --iters 30 --compile max-autotune --compile-precisions fp16 \
                     --json "${OUT:-.}/compile_resnet50.json" ;;
    compile-bert) run compile-bert ${COMPILE_BOX:-560} 40 python3 bench/gpu_vs_torch.py --kiln "$K" --only bert_base \
                      --precisions fp16 --bert-batches 1,128 --iters 30 --compile max-autotune --compile-precisions fp16 \
                      --json "${OUT:-.}/compile_bert_base.json" ;;
    ocr-acc)
        EV=${OCR_EVAL:-.dev/ocr_eval}
        CLS=models/ocr/ch_ppocr_mobile_v2.0_cls_infer.onnx
        REC=models/ocr/ch_PP-OCRv4_rec_infer.onnx
        run ocr-acc-build-cls 240 3 "$K" build "$CLS" -o "$TMP/cls16.kiln" --precision fp16 --device cuda --no-tactics \
            --shapes "x:${OCR_BATCH:-320}x3x48x192"
        run ocr-acc-build-rec 240 3 "$K" build "$REC" -o "$TMP/rec16.kiln" --precision fp16 --device cuda --no-tactics \
            --shapes "x:${OCR_BATCH:-320}x3x48x320"
        run ocr-acc 420 20 python3 scripts/ocr_accuracy.py --data "$EV" --kiln "$K" --device cuda --batch 100000 \
            --cls "fp32=$CLS" --cls "fp16=$TMP/cls16.kiln" --rec "fp32=$REC" --rec "fp16=$TMP/rec16.kiln" ;;
    *) log "unknown step $s" ;;
    esac
done
log done

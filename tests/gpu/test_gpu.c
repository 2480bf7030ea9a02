/* GPU tests of the CUDA backend (docs/CUDA.md): `make test-gpu` on a machine with an NVIDIA GPU;
 * the CTest entry gpu/test_gpu exits 77 (skipped) with a message where there is no CUDA module or
 * no GPU, so CI passes.
 *
 * 1. Per-layer checks: one-node graphs over random, odd-sized inputs run by the interpreter on the
 *    CPU (the reference kernels) and with --device cuda; every layer must run on the device (not
 *    fall back) and match: max |gpu - cpu| <= tol * max(1, max |cpu|), NaN never passes, and
 *    integer / data-movement outputs exactly. Device memory is poisoned (KILN_CUDA_POISON: every
 *    block the CUDA backend hands out is filled with NaN), so unwritten elements fail.
 * 2. Model checks: the models given on the command line (default: models/tiny_cnn.onnx,
 *    models/tiny_bert.onnx, and models/resnet50.onnx, models/bert_base.onnx when present) built
 *    and run on the CPU and on the GPU from the same synthetic inputs; the max relative error is
 *    printed per output, and the whole model must run on the device; the fourth run must replay the
 *    context's CUDA graph, and a replay on new inputs must match the CPU on those.
 * 3. FP16 / BF16: layers with FP16 / BF16 weights, and every layer case again with the module holding
 *    float activations in FP16, then BF16 (KILN_CUDA_ACT), half convolutions channels-last; models
 *    given as MODEL.onnx@SHAPES#fp16|bf16 are built in that precision (#fp8, #nvfp4, #mxfp4, #int4 too:
 *    those hold their low-bit weights on the GPU only packed, checked by their weight bytes).
 * Usage: test_gpu [--require-gpu] [MODEL.onnx@SHAPES ...]; test_gpu --cpu-only runs the one-node cases on
 * the CPU alone (CI: checks the cases themselves). */
#include "gpu_harness.h"

static void layer_cases(void)
{
    binary_cases();
    unary_cases();
    cast_where_cases();
    shape_cases();
    nn_cases();
    conv_cases();
    gemm_cases();
    attention_cases();
    upsample_cases();
}

/* The device closed and opened again (its settings read from the environment anew); false, with a message, when it
 * does not open. */
static bool reopen(void)
{
    kiln__dev_close(dev);
    if (kiln__dev_open(KILN_DEVICE_CUDA, 0, &dev) == KILN_OK)
        return true;
    printf("FAIL reopening the device: %s\n", kiln_last_error());
    return false;
}

/* Every one-node case, the half-weight cases, the --strict-device checks and the 4-bit cases on the GPU. */
static void device_cases(void)
{
    layer_cases();
    half_weight_cases();
    strict_check("ReduceMean", reduce_mean_graph);
    strict_check("FP8 MatMul K 33", fp8_illegal_graph);
    strict_check("FP8 Gemm transA", fp8_trans_a_graph);
    strict_check("FP8 MatMul per-channel weight scales", fp8_per_channel_graph);
    strict_check("FP8 Conv 17 channels", fp8_conv_illegal_graph);
    fp4_cases();
    int8_cases();
}

/* FP8 GEMMs with each output storage: float32, FP16 (the default) and BF16 (plus their rounding of the
 * output). The quantized operands are the CPU's exactly; the sums differ: Hopper's FP8 tensor cores add
 * inside each MMA keeping about 14 bits (DeepSeek-V3 report, sec. 3.3.2). These cases (but one: the 1152-long
 * reduction, whose bound for kiln's wgmma kernels fp8_conv_cases_in derives from the same model) sum up to 96
 * products of operands in [-1, 1] to partial sums of magnitude ~8, whose 14-bit ulp is 4.9e-4: a few
 * such roundings per output. Measured on the H200: up to 3.6e-4 on one draw of the data, 1.04e-3 on
 * another (float32 outputs), so float32 outputs get 2e-3 (4 ulps), like FP16's own rounding. That bound holds for
 * FP32 accumulation across MMAs, so the float32 run sets KILN_CUDA_FP8_FAST_ACCUM=0: with cuBLASLt's fast
 * accumulation (the FP8 MatMul / Gemm default since session 16) the running sum itself passes through the MMA's
 * adder at every 32-deep step, and the chained case (GELU GEMM -> FP8 GEMM) then flips E4M3 bytes of its
 * intermediate against the CPU's (H200: max rel err 3.4e-3). The FP16 / BF16 runs keep the default, fast
 * accumulation, under their tolerances. The caller's KILN_CUDA_FP8_OUT and KILN_CUDA_FP8_FAST_ACCUM are restored
 * after (the models run with them). */
static bool fp8_output_cases(void)
{
    static const char *outs[3] = {"fp32", "fp16", "bf16"};
    static const double out_tol[3] = {2e-3, 2e-3, 1.6e-2};
    const char *fp8_out = getenv("KILN_CUDA_FP8_OUT"), *fast = getenv("KILN_CUDA_FP8_FAST_ACCUM");
    char fp8_keep[16], fast_keep[16];
    snprintf(fp8_keep, sizeof fp8_keep, "%s", fp8_out ? fp8_out : "");
    snprintf(fast_keep, sizeof fast_keep, "%s", fast ? fast : "");
    bool ok = true;
    for (int k = 0; k < 3 && ok; k++) {
        setenv("KILN_CUDA_FP8_OUT", outs[k], 1);
        if (k == 0)
            setenv("KILN_CUDA_FP8_FAST_ACCUM", "0", 1);
        else if (fast_keep[0])
            setenv("KILN_CUDA_FP8_FAST_ACCUM", fast_keep, 1);
        else
            unsetenv("KILN_CUDA_FP8_FAST_ACCUM");
        if ((ok = reopen())) {
            printf("test_gpu: FP8 GEMMs with %s outputs (KILN_CUDA_FP8_OUT=%s%s)\n", outs[k], outs[k],
                   k == 0 ? ", KILN_CUDA_FP8_FAST_ACCUM=0" : "");
            fp8_cases(out_tol[k]);
        }
    }
    if (fp8_keep[0])
        setenv("KILN_CUDA_FP8_OUT", fp8_keep, 1);
    else
        unsetenv("KILN_CUDA_FP8_OUT");
    if (fast_keep[0])
        setenv("KILN_CUDA_FP8_FAST_ACCUM", fast_keep, 1);
    else
        unsetenv("KILN_CUDA_FP8_FAST_ACCUM");
    return ok;
}

/* The fused attention's blocks each walk several jobs (16-128 query rows of one lead index) with the next one's loads
 * in flight; the cases are small enough that the default grid gives most of them one job a block, so they run
 * again on a grid of 3 blocks (jobs 0, 3, 6, ... in one block: Q buffers, stage parity and the job's offsets across
 * jobs) and of one block a job. The caller's KILN_CUDA_ATTN_GRID is restored after. */
static bool fused_attention_walk(void)
{
    static const char *grids[2] = {"3", "jobs"};
    const char *keep = getenv("KILN_CUDA_ATTN_GRID");
    char was[16];
    snprintf(was, sizeof was, "%s", keep ? keep : "");
    bool ok = true;
    for (int g = 0; g < 2 && ok; g++) {
        setenv("KILN_CUDA_ATTN_GRID", grids[g], 1);
        if ((ok = reopen())) {
            printf("test_gpu: fused attention, KILN_CUDA_ATTN_GRID=%s\n", grids[g]);
            attention_cases();
        }
    }
    if (was[0])
        setenv("KILN_CUDA_ATTN_GRID", was, 1);
    else
        unsetenv("KILN_CUDA_ATTN_GRID");
    return ok && reopen();
}

/* The half convolutions again through cuDNN's legacy API (the graph API's fallback), then every layer again with
 * its float activations held in FP16, then BF16 (attention fused and as two GEMMs and a softmax). */
static bool legacy_and_half_cases(void)
{
    setenv("KILN_CUDA_CONV_GRAPH", "0", 1);
    if (!reopen())
        return false;
    printf("test_gpu: half convolutions through cuDNN's legacy API (KILN_CUDA_CONV_GRAPH=0)\n");
    half_weight_cases();
    unsetenv("KILN_CUDA_CONV_GRAPH");
    for (int h = 0; h < 2; h++) {
        setenv("KILN_CUDA_ACT", h ? "bf16" : "fp16", 1);
        setenv("KILN_CUDA_FUSED_ATTN", "1", 1);   /* the fused kernel, whatever the default */
        if (!reopen())
            return false;
        half_mode = h ? KILN_DT_BFLOAT16 : KILN_DT_FLOAT16;
        half_tol = h ? 1.6e-2 : 2e-3;
        printf("test_gpu: float activations held as %s (tol %.1g)\n", h ? "BF16" : "FP16", half_tol);
        layer_cases();
        fp4_gather_cases();
        fp8_feed_case(half_tol);
        if (!fused_attention_walk())
            return false;
        setenv("KILN_CUDA_FUSED_ATTN", "0", 1);
        if (!reopen())
            return false;
        printf("test_gpu: %s attention as two GEMMs and a softmax (KILN_CUDA_FUSED_ATTN=0)\n", h ? "BF16" : "FP16");
        attention_cases();
        unsetenv("KILN_CUDA_FUSED_ATTN");
    }
    half_mode = KILN_DT_UNDEFINED;
    unsetenv("KILN_CUDA_ACT");
    return true;
}

/* KILN_TEST_GPU_ONLY=upsample: the Resize / Upsample / ConvTranspose cases in float32, then held in FP16 and BF16 */
static bool upsample_only(void)
{
    upsample_cases();
    for (int h = 0; h < 2; h++) {
        setenv("KILN_CUDA_ACT", h ? "bf16" : "fp16", 1);
        if (!reopen())
            return false;
        half_mode = h ? KILN_DT_BFLOAT16 : KILN_DT_FLOAT16;
        half_tol = h ? 1.6e-2 : 2e-3;
        printf("test_gpu: upsampling layers held as %s (tol %.1g)\n", h ? "BF16" : "FP16", half_tol);
        upsample_cases();
    }
    half_mode = KILN_DT_UNDEFINED;
    unsetenv("KILN_CUDA_ACT");
    return reopen();
}

/* KILN_TEST_GPU_ONLY=attention: the attention cases alone, fused in FP16 and BF16, on each grid */
static bool attention_only(void)
{
    for (int h = 0; h < 2; h++) {
        setenv("KILN_CUDA_ACT", h ? "bf16" : "fp16", 1);
        setenv("KILN_CUDA_FUSED_ATTN", "1", 1);
        if (!reopen())
            return false;
        half_mode = h ? KILN_DT_BFLOAT16 : KILN_DT_FLOAT16;
        half_tol = h ? 1.6e-2 : 2e-3;
        printf("test_gpu: %s fused attention\n", h ? "BF16" : "FP16");
        attention_cases();
        fp8_feed_case(half_tol);   /* the fused attention's FP8 feed among them */
        if (!fused_attention_walk())
            return false;
        unsetenv("KILN_CUDA_FUSED_ATTN");
    }
    half_mode = KILN_DT_UNDEFINED;
    unsetenv("KILN_CUDA_ACT");
    return true;
}

int main(int argc, char **argv)
{
    bool require = false, cpu_only = false;
    int first_model = argc;
    setvbuf(stdout, NULL, _IOLBF, 0);
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--require-gpu"))
            require = true;
        else if (!strcmp(argv[i], "--cpu-only"))
            cpu_only = true;
        else if (first_model == argc)
            first_model = i;
    }
    if (cpu_only) {   /* the one-node cases on the CPU alone (checks this harness without a GPU) */
        layer_cases();
        half_weight_cases();
        fp8_cases(0);
        fp4_cases();
        int8_cases();
        printf("test_gpu --cpu-only: ");
        return TEST_SUMMARY();
    }
    setenv("KILN_CUDA_POISON", "1", 1);
    setenv("KILN_CUDA_UNVERIFIED", "1", 1);   /* code no GPU has run yet (none at present) is under test here */
    if (!getenv("KILN_CUDA_NHWC"))   /* half convolutions channels-last at every batch size (the cases are small) */
        setenv("KILN_CUDA_NHWC", "1", 1);
    if (kiln__dev_open(KILN_DEVICE_CUDA, 0, &dev) != KILN_OK) {
        printf("test_gpu: SKIP: %s\n", kiln_last_error());
        return require ? 1 : 77;
    }
    kiln_device_stats st;
    kiln__dev_stats(dev, &st);
    printf("test_gpu: %s\n", st.description);
    /* KILN_TEST_GPU_ONLY=fp8: only the FP8 cases (each output storage) and the models (a short device call);
     * =fp8conv: of those only the FP8 convolution cases (every kernel and configuration) and the E4M3-storage case;
     * =attention: only the attention cases (attention_only); =upsample: only the Resize / Upsample / ConvTranspose
     * cases (upsample_only) and the models; =models: only the models; =int8: only the INT8 cases, then the models named
     * on the command line (none by default); =int8new: of those the QLookup and CUDA-core convolution cases (int8_new_cases) */
    const char *only = getenv("KILN_TEST_GPU_ONLY");
    bool fp8_only = only && (!strcmp(only, "fp8") || !strcmp(only, "fp8conv")),
         models_only = only && (!strcmp(only, "models") || !strcmp(only, "upsample"));
    if (only && !strcmp(only, "upsample") && !upsample_only())
        return 1;
    if (only && (!strcmp(only, "int8") || !strcmp(only, "int8new"))) {   /* int8new: int8_new_cases only */
        if (!strcmp(only, "int8"))
            int8_cases();
        else
            int8_new_cases();
        kiln__dev_close(dev);
        for (int i = first_model; i < argc; i++)
            if (strcmp(argv[i], "--require-gpu"))
                model_case(argv[i]);
        printf("test_gpu: ");
        return TEST_SUMMARY();
    }
    if (only && !strcmp(only, "fp8acc")) {   /* a diagnostic: fp8_accuracy_sweep with float32 and FP16 outputs */
        static const char *const outs[2] = {"fp32", "fp16"};
        for (int k = 0; k < 2; k++) {
            setenv("KILN_CUDA_FP8_OUT", outs[k], 1);
            if (!reopen())
                break;
            printf("test_gpu: KILN_CUDA_FP8_OUT=%s\n", outs[k]);
            fp8_accuracy_sweep(2e-3);
        }
        kiln__dev_close(dev);
        printf("test_gpu: ");
        return TEST_SUMMARY();
    }
    if (only && !strcmp(only, "attention")) {
        bool ok = attention_only();
        kiln__dev_close(dev);
        printf("test_gpu: ");
        return ok ? TEST_SUMMARY() : 1;
    }
    if (!fp8_only && !models_only)
        device_cases();
    if (!models_only && (!fp8_output_cases() || (!fp8_only && !legacy_and_half_cases())))
        return 1;
    kiln__dev_close(dev);
    static const char *defaults[] = {
        "models/tiny_cnn.onnx@input:2x3x32x32",
        "models/tiny_bert.onnx@input_ids:2x16,attention_mask:2x16,token_type_ids:2x16",
        "models/resnet50.onnx@input:2x3x224x224",
        "models/bert_base.onnx@input_ids:2x128,attention_mask:2x128,token_type_ids:2x128",
        "models/tiny_cnn.onnx@input:2x3x32x32#fp16",
        "models/tiny_bert.onnx@input_ids:2x16,attention_mask:2x16,token_type_ids:2x16#bf16",
        "models/resnet50.onnx@input:2x3x224x224#fp16",
        "models/resnet50.onnx@input:2x3x224x224#bf16",
        "models/bert_base.onnx@input_ids:2x128,attention_mask:2x128,token_type_ids:2x128#fp16",
        "models/bert_base.onnx@input_ids:2x128,attention_mask:2x128,token_type_ids:2x128#bf16",
        "models/tiny_bert.onnx@input_ids:2x16,attention_mask:2x16,token_type_ids:2x16#fp8",
        "models/bert_base.onnx@input_ids:2x128,attention_mask:2x128,token_type_ids:2x128#fp8",
        "models/resnet50.onnx@input:2x3x224x224#fp8",
        "models/resnet50.onnx@input:2x3x224x224#int8",
        "models/bert_base.onnx@input_ids:2x128,attention_mask:2x128,token_type_ids:2x128#int8",
        "models/tiny_bert.onnx@input_ids:2x16,attention_mask:2x16,token_type_ids:2x16#int8+fp16",
        "models/tiny_bert.onnx@input_ids:2x16,attention_mask:2x16,token_type_ids:2x16#nvfp4",
        "models/tiny_bert.onnx@input_ids:2x16,attention_mask:2x16,token_type_ids:2x16#mxfp4",
        "models/bert_base.onnx@input_ids:2x128,attention_mask:2x128,token_type_ids:2x128#nvfp4",
        "models/ocr/ch_PP-OCRv4_det_infer.onnx@x:2x3x96x128",
        "models/ocr/ch_PP-OCRv4_det_infer.onnx@x:2x3x96x128#fp16"};
    if (first_model < argc) {
        for (int i = first_model; i < argc; i++)
            if (strcmp(argv[i], "--require-gpu"))
                model_case(argv[i]);
    } else {
        for (size_t i = 0; i < sizeof defaults / sizeof *defaults; i++)
            model_case(defaults[i]);
    }
    printf("test_gpu: ");
    return TEST_SUMMARY();
}

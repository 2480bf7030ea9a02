/* test_gpu: FP8 (GEMMs, convolutions, feeds) and 4-bit layer cases. */
#include "gpu_harness.h"

/* ---- FP8 layers (what `--precision fp8` engines hold): kiln_wq / kiln_aq "fp8" and the activation's
 * scale; the CPU reference is the CPU's FP8 emulation (both operands quantize-dequantized, float32 sums),
 * the GPU runs cuBLASLt's FP8 GEMM with the same quantization */

static void mark_fp8(tgraph *t, float amax)
{
    kiln__node_set_attr_s(tg_node(t), KILN_ATTR_WQ, "fp8");
    kiln__node_set_attr_s(tg_node(t), KILN_ATTR_AQ, "fp8");
    kiln__node_set_attr_f(tg_node(t), KILN_ATTR_AQ_SCALE, amax / 448.0f);
    kiln__node_set_attr_i(tg_node(t), KILN_ATTR_WQ_TENSOR, 1);   /* as a --device cuda build marks them */
}

/* mark_fp8 on node nd of t's graph */
static void mark_fp8_node(tgraph *t, int nd, float amax)
{
    int keep = t->node;
    t->node = nd;
    mark_fp8(t, amax);
    t->node = keep;
}

/* An fp8 MatMul [5, k] x [k, 16] (constant weight). */
static tgraph fp8_matmul(int64_t k)
{
    tgraph t = tg_new(KILN_OP_MatMul, 13);
    tg_in(&t, RT(2, 5, k), false);
    tg_in(&t, RT(2, k, 16), true);
    tg_outs(&t, 1);
    mark_fp8(&t, 1.0f);
    return t;
}

/* FP8 weights with one scale per output channel (a CPU engine's FP8): not what the GPU's GEMM computes */
tgraph fp8_per_channel_graph(void)
{
    tgraph t = fp8_matmul(32);
    kiln__node_set_attr_i(tg_node(&t), KILN_ATTR_WQ_TENSOR, 0);
    return t;
}

/* K = 33: not a multiple of 16, so cuBLASLt's FP8 GEMM cannot take it */
tgraph fp8_illegal_graph(void) { return fp8_matmul(33); }

tgraph fp8_trans_a_graph(void)
{
    tgraph t = tg_new(KILN_OP_Gemm, 13);
    tg_in(&t, RT(2, 32, 7), false);
    tg_in(&t, RT(2, 32, 16), true);
    tg_outs(&t, 1);
    kiln__node_set_attr_i(tg_node(&t), "transA", 1);
    mark_fp8(&t, 1.0f);
    return t;
}

/* inputs in [-1, 1]: amax 0.8 saturates the largest fifth of them, amax 50 puts small ones in E4M3's
 * subnormals; odd M, K and N multiples of 16 (what cuBLASLt's FP8 kernels take) */
static void fp8_shared_input_case(double tol);
static void fp8_midpoint_case(double tol);

/* A long reduction (1152: 9 steps of 128 bytes, 18 of 64, past every pipeline's depth), 3 row tiles, bias + Relu */
static tgraph fp8_red1152_graph(void)
{
    tgraph t = tg_new(KILN_OP_FusedConv, 1);
    tg_in(&t, RT(4, 2, 128, 13, 11), false);
    tg_in(&t, RT(4, 64, 128, 3, 3), true);
    tg_in(&t, RT(1, 64), true);
    tg_outs(&t, 1);
    attr_ints(&t, "pads", 4, D(1, 1, 1, 1));
    set_act(&t, KILN_FUSED_RELU, 0, 0);
    mark_fp8(&t, 1.0f);
    return t;
}

/* Its bound in kernel mode `how`: the wgmma kernels (wgN, tmaN) chain all 36 of an output's k32 MMAs in one
 * accumulator, and each MMA adds to the running sum keeping ~14 bits (test_gpu.c, fp8_output_cases): up to 36
 * truncations of ulp 2^-13 relative to the sum, 4.4e-3 (measured: 600 draws, KILN_TEST_GPU_ONLY=fp8acc, median 1.2e-3,
 * largest 2.0e-3; 3.1e-3 on one draw of a full run). The chained sum is what these kernels compute (as cuBLASLt's
 * fast accumulation), so their bound is that one; cuDNN's and the mma.sync kernel's sums keep the case's tolerance. */
static double fp8_red1152_tol(const char *how, double tol)
{
    return !strncmp(how, "wg", 2) || !strncmp(how, "tma", 3) ? fmax(tol, 36 * 0x1p-13) : tol;
}

/* FP8 convolutions (cuda_conv_fp8.c: kiln's E4M3 implicit GEMM or cuDNN's graph, channels-last, scale + bias +
 * residual + ReLU fused): 3x3 with everything fused, 1x1 stride 2 saturating, 3x3 stride 2 with small inputs in
 * E4M3's subnormals, SiLU (kiln's epilogue after), a dilated one over several tiles with partial ones */
static void fp8_conv_cases_in(double tol, const char *how)
{
    char name[96];
    tgraph t = tg_new(KILN_OP_FusedConv, 1);
    tg_in(&t, RT(4, 2, 32, 9, 11), false);
    tg_in(&t, RT(4, 48, 32, 3, 3), true);
    tg_in(&t, RT(1, 48), true);
    tg_in(&t, RT(4, 2, 48, 9, 11), false);
    tg_outs(&t, 1);
    attr_ints(&t, "pads", 4, D(1, 1, 1, 1));
    set_act(&t, KILN_FUSED_RELU, 0, 0);
    mark_fp8(&t, 1.0f);
    snprintf(name, sizeof name, "%s (%s)", "FP8 FusedConv 3x3 bias+res+Relu", how);
    run_case(name, &t, tol);
    /* 1x1 stride 1 over 297 pixels: also cuBLASLt's FP8 GEMM (cuda_conv_gemm.c) */
    t = tg_new(KILN_OP_FusedConv, 1);
    tg_in(&t, RT(4, 3, 32, 9, 11), false);
    tg_in(&t, RT(4, 48, 32, 1, 1), true);
    tg_in(&t, RT(1, 48), true);
    tg_in(&t, RT(4, 3, 48, 9, 11), false);
    tg_outs(&t, 1);
    set_act(&t, KILN_FUSED_RELU, 0, 0);
    mark_fp8(&t, 1.0f);
    snprintf(name, sizeof name, "%s (%s)", "FP8 FusedConv 1x1 bias+res+Relu", how);
    run_case(name, &t, tol);
    t = tg_new(KILN_OP_Conv, 13);
    tg_in(&t, RT(4, 3, 64, 14, 13), false);
    tg_in(&t, RT(4, 32, 64, 1, 1), true);
    tg_outs(&t, 1);
    attr_ints(&t, "strides", 2, D(2, 2));
    mark_fp8(&t, 0.8f);
    snprintf(name, sizeof name, "%s (%s)", "FP8 Conv 1x1 s2 saturating", how);
    run_case(name, &t, tol);
    t = tg_new(KILN_OP_FusedConv, 1);
    tg_in(&t, RT(4, 2, 16, 15, 15), false);
    tg_in(&t, RT(4, 16, 16, 3, 3), true);
    tg_in(&t, RT(1, 16), true);
    tg_outs(&t, 1);
    attr_ints(&t, "pads", 4, D(1, 1, 1, 1));
    attr_ints(&t, "strides", 2, D(2, 2));
    set_act(&t, KILN_FUSED_RELU, 0, 0);
    mark_fp8(&t, 50.0f);
    snprintf(name, sizeof name, "%s (%s)", "FP8 FusedConv 3x3 s2 subnormal", how);
    run_case(name, &t, tol);
    t = tg_new(KILN_OP_FusedConv, 1);
    tg_in(&t, RT(4, 1, 32, 8, 8), false);
    tg_in(&t, RT(4, 16, 32, 3, 3), true);
    tg_in(&t, RT(1, 16), true);
    tg_outs(&t, 1);
    attr_ints(&t, "pads", 4, D(1, 1, 1, 1));
    set_act(&t, KILN_FUSED_SILU, 0, 0);
    mark_fp8(&t, 1.0f);
    snprintf(name, sizeof name, "%s (%s)", "FP8 FusedConv bias+SiLU", how);
    run_case(name, &t, tol);
    /* several row tiles with a partial one (1449 pixels), two column tiles with a partial one (144 outputs), a
     * reduction of 432 (a partial 64-byte step, 48 channels: pieces of one step in different (r, s)), dilated */
    t = tg_new(KILN_OP_FusedConv, 1);
    tg_in(&t, RT(4, 3, 48, 23, 21), false);
    tg_in(&t, RT(4, 144, 48, 3, 3), true);
    tg_in(&t, RT(1, 144), true);
    tg_in(&t, RT(4, 3, 144, 23, 21), false);
    tg_outs(&t, 1);
    attr_ints(&t, "pads", 4, D(2, 2, 2, 2));
    attr_ints(&t, "dilations", 2, D(2, 2));
    set_act(&t, KILN_FUSED_RELU, 0, 0);
    mark_fp8(&t, 1.0f);
    snprintf(name, sizeof name, "%s (%s)", "FP8 FusedConv 3x3 d2 48->144 1449 px", how);
    run_case(name, &t, tol);
    /* a long reduction, its bound per kernel (fp8_red1152_tol) */
    t = fp8_red1152_graph();
    snprintf(name, sizeof name, "%s (%s)", "FP8 FusedConv 3x3 128->64 red 1152", how);
    run_case(name, &t, fp8_red1152_tol(how, tol));
}

/* KILN_TEST_GPU_ONLY=fp8acc: the long-reduction FP8 convolution (1152 products an output) on data drawn from seeds
 * 1 .. 16 (KILN_TEST_FP8ACC_SEEDS=N: 1 .. N, configuration 4 alone), each seed's data through cuDNN, the mma.sync kernel and every wgmma configuration: whether configurations
 * given the same operands give the same sums, and how the error against the CPU's float32 sums spreads over draws
 * (Hopper's FP8 MMAs add with ~14 bits, docs/CUDA.md). Prints one line a seed and kernel. */
void fp8_accuracy_sweep(double tol)
{
    static const char *const all[6] = {"cudnn", "kiln", "wg4", "wg5", "wg6", "wg2"};
    const char *const *modes = all;
    int n_modes = 6;
    unsigned long long n_seeds = 16;
    const char *e = getenv("KILN_TEST_FP8ACC_SEEDS");   /* N: seeds 1 .. N through wg4 alone */
    if (e && atoi(e) > 0) {
        n_seeds = (unsigned long long)atoi(e);
        modes = all + 2;
        n_modes = 1;
    }
    for (unsigned long long seed = 1; seed <= n_seeds; seed++)
        for (int m = 0; m < n_modes; m++) {
            setenv("KILN_CUDA_FP8_CONV", modes[m], 1);
            rng = 0x9E3779B97F4A7C15ull * seed;
            tgraph t = fp8_red1152_graph();
            char name[96];
            snprintf(name, sizeof name, "FP8 red 1152 seed %llu (%s)", seed, modes[m]);
            run_case(name, &t, fp8_red1152_tol(modes[m], tol));
        }
    unsetenv("KILN_CUDA_FP8_CONV");
}

/* kiln's wgmma kernel's tile configurations (kernels_conv_fp8_wg.cu), each forced by KILN_CUDA_FP8_CONV=wgN */
/* and the TMA kernel's (kernels_conv_fp8_tma.cu; 1x1 stride-1 layers, the others through cuDNN when forced) */
static const char *const wg_modes[10] = {"wg0", "wg1", "wg2", "wg3", "wg4", "wg5", "wg6", "tma0", "tma1", "tma2"};

/* each case through cuDNN's graph, kiln's kernel (kernels_conv_fp8.cu) and, 1x1 ones, cuBLASLt's GEMM; by default
 * each layer takes the fastest (the model cases run that) */
static void fp8_conv_cases(double tol)
{
    setenv("KILN_CUDA_FP8_CONV", "cudnn", 1);
    fp8_conv_cases_in(tol, "cudnn");
    setenv("KILN_CUDA_FP8_CONV", "kiln", 1);
    fp8_conv_cases_in(tol, "kiln");
    setenv("KILN_CUDA_FP8_CONV", "gemm", 1);
    fp8_conv_cases_in(tol, "gemm");
    for (int i = 0; i < 10; i++) {
        setenv("KILN_CUDA_FP8_CONV", wg_modes[i], 1);
        fp8_conv_cases_in(tol, wg_modes[i]);
    }
    unsetenv("KILN_CUDA_FP8_CONV");
}

/* 17 input channels: cuDNN's FP8 convolution wants multiples of 16, so the layer stays on the CPU */
tgraph fp8_conv_illegal_graph(void)
{
    tgraph t = tg_new(KILN_OP_Conv, 13);
    tg_in(&t, RT(4, 1, 17, 6, 6), false);
    tg_in(&t, RT(4, 16, 17, 3, 3), true);
    tg_outs(&t, 1);
    mark_fp8(&t, 1.0f);
    return t;
}

void fp8_cases(double tol)
{
    const char *only = getenv("KILN_TEST_GPU_ONLY");
    if (only && !strcmp(only, "fp8conv")) {   /* the FP8 convolution kernels alone (a short device call) */
        fp8_conv_cases(tol);
        fp8_store_case();
        return;
    }
    tgraph t = tg_new(KILN_OP_MatMul, 13);
    tg_in(&t, RT(3, 3, 17, 48), false);
    tg_in(&t, RT(2, 48, 32), true);
    tg_outs(&t, 1);
    mark_fp8(&t, 0.8f);
    run_case("FP8 MatMul saturating", &t, tol);
    t = tg_new(KILN_OP_MatMul, 13);
    tg_in(&t, RT(1, 64), false);
    tg_in(&t, RT(2, 64, 16), true);
    tg_outs(&t, 1);
    mark_fp8(&t, 1.0f);
    run_case("FP8 MatMul 1-D A", &t, tol);
    t = tg_new(KILN_OP_FusedMatMul, 1);
    tg_in(&t, RT(3, 2, 19, 64), false);
    tg_in(&t, RT(2, 64, 80), true);
    tg_in(&t, RT(1, 80), true);
    tg_in(&t, RT(3, 2, 19, 80), false);
    tg_outs(&t, 1);
    set_act(&t, KILN_FUSED_GELU, 0, 0);
    mark_fp8(&t, 1.0f);
    run_case("FP8 FusedMatMul bias+res+Gelu", &t, tol);
    t = tg_new(KILN_OP_FusedMatMul, 1);
    tg_in(&t, RT(2, 37, 96), false);
    tg_in(&t, RT(2, 96, 48), true);
    tg_in(&t, RT(1, 48), true);
    tg_outs(&t, 1);
    set_act(&t, KILN_FUSED_RELU, 0, 0);
    mark_fp8(&t, 50.0f);
    run_case("FP8 FusedMatMul bias+Relu subnormal", &t, tol);
    t = tg_new(KILN_OP_Gemm, 13);
    tg_in(&t, RT(2, 7, 128), false);
    tg_in(&t, RT(2, 48, 128), true);
    tg_in(&t, RT(1, 48), true);
    tg_outs(&t, 1);
    kiln__node_set_attr_i(tg_node(&t), "transB", 1);
    kiln__node_set_attr_f(tg_node(&t), "alpha", 0.5f);
    mark_fp8(&t, 1.0f);
    run_case("FP8 Gemm transB bias alpha", &t, tol);
    t = tg_new(KILN_OP_Gemm, 13);
    tg_in(&t, RT(2, 9, 32), false);
    tg_in(&t, RT(2, 32, 16), true);
    tg_in(&t, RT(2, 9, 16), true);
    tg_outs(&t, 1);
    kiln__node_set_attr_f(tg_node(&t), "beta", 0.3f);
    mark_fp8(&t, 0.9f);
    run_case("FP8 Gemm C[M,N] beta", &t, tol);
    t = tg_new(KILN_OP_FusedGemm, 1);
    tg_in(&t, RT(2, 5, 64), false);
    tg_in(&t, RT(2, 64, 48), true);
    tg_in(&t, RT(1, 48), true);
    tg_outs(&t, 1);
    set_act(&t, KILN_FUSED_TANH, 0, 0);
    mark_fp8(&t, 1.0f);
    run_case("FP8 FusedGemm Tanh", &t, tol);
    fp8_conv_cases(tol);
    fp8_shared_input_case(tol);
    fp8_midpoint_case(tol ? tol : 1);
    fp8_feed_case(tol);
    fp8_block_case();
    fp8_store_case();
}

/* The GPU's activation quantization byte for byte (the kernels skip the IEEE division where the product with the
 * reciprocal decides the byte, kernels_common.cuh to_e4m3): an FP8 MatMul with an identity weight returns its
 * quantized activations. Activations at E4M3 rounding midpoints (times the scale, +-1 ulp or exact), and random
 * ones, in one binade range so that one E4M3 step is >= 0.9% of the largest output: with float32 outputs any byte
 * that differs from the CPU's emulation fails the 1e-5 tolerance (FP16 outputs: 2e-3). */
static void fp8_midpoint_case(double tol)
{
    const char *out = getenv("KILN_CUDA_FP8_OUT");
    if (out && !strcmp(out, "fp32"))
        tol = fmin(tol, 1e-5);
    const float amax = 3.7f, s = amax / 448.0f;
    tgraph t = tg_new(KILN_OP_MatMul, 13);
    kiln_tensor x = RT(2, 37, 64), w = rand_tensor(F32, 2, D(64, 64), 0, 0);
    float *xv = x.data, *wv = w.data;
    for (int k = 0; k < 64; k++)
        wv[k * 64 + k] = 1.0f;
    for (int i = 0; i < 37 * 64; i++) {
        double u = (test_randf(&rng) + 1.0) * 0.5;
        if (i % 5 == 4) {   /* a random value in range */
            xv[i] = (float)((u * 352 + 64) * s) * (i % 2 ? -1.0f : 1.0f);
            continue;
        }
        uint8_t c = (uint8_t)(0x60 + (int)(u * 29));   /* 64 .. 416 */
        float e = kiln__fp8_to_f32(KILN_DT_FP8E4M3, c), e1 = kiln__fp8_to_f32(KILN_DT_FP8E4M3, (uint8_t)(c + 1));
        float v = ((e + e1) * 0.5f) * s;
        v = i % 3 == 0 ? nextafterf(v, INFINITY) : i % 3 == 1 ? nextafterf(v, -INFINITY) : v;
        xv[i] = i % 2 ? -v : v;
    }
    tg_in(&t, x, false);
    tg_in(&t, w, true);
    tg_outs(&t, 1);
    mark_fp8(&t, amax);
    run_case("FP8 activations at E4M3 midpoints", &t, tol);
}

/* FP8 layers reading one tensor (BERT's Q, K and V GEMMs): the GPU quantizes it once and the next layers with the
 * same scale reuse it; a layer with another scale quantizes again. Run twice with other data in the same graph
 * input (the kept quantization must not outlive the upload), each run against the CPU. */
static void fp8_shared_input_case(double tol)
{
    tgraph t = tg_new(KILN_OP_MatMul, 13);
    tg_in(&t, RT(3, 2, 9, 64), false);
    tg_in(&t, RT(2, 64, 32), true);
    mark_fp8(&t, 1.0f);
    int x = tg_node(&t)->in[0];
    const float amax[2] = {1.0f, 0.5f};   /* the second scale saturates: results differ if it reused the first */
    for (int k = 0; k < 2; k++) {
        int in[2] = {x, tg_const(t.g, k ? "w_other" : "w_same", RT(2, 64, 48))};
        int nd = tg_node_add(t.g, KILN_OP_MatMul, 13, k ? "other_scale" : "same_scale", 2, in, k ? "y_other" : "y_same");
        mark_fp8_node(&t, nd, amax[k]);
    }
    tg_outs(&t, 1);   /* the first node's output, then the other two as graph outputs */
    for (int n = 1; n <= 2; n++)
        tg_output(t.g, n);
    for (int run = 0; run < 2; run++) {
        if (run) {   /* other data in the same input for the second run */
            kiln__tensor_release(&t.feed[0]);
            t.feed[0] = rand_tensor(F32, 3, D(2, 9, 64), -1, 1);
        }
        char name[64];
        snprintf(name, sizeof name, "FP8 shared input, run %d", run + 1);
        check_case(name, &t, tol);
    }
    tg_free(&t);
}

/* ---- FP8 feeds (docs/CUDA.md, "FP8 GEMMs"): a layer marked KILN_ATTR_FP8_FEED (the builder marks the producers of
 * FP8 layers' inputs; LayerNormalization and the FP8 GEMMs' GELU epilogue honour it) writes the E4M3 copy of its
 * output in its own kernel and the FP8 layers reading it skip their
 * quantization pass. The outputs must be bit-identical to a device whose FP8 layers quantize every input themselves
 * (KILN_CUDA_FP8_FEED=0), the device's counts must show the feeds read and no pass run, and both must match the CPU. */
static void mark_feed(kiln_graph *g, int nd, float amax)
{
    kiln__node_set_attr_f(&g->nodes[nd], KILN_ATTR_FP8_FEED, amax / 448.0f);
}

/* LayerNormalization -> FP8 MatMul (a first reader of its feed) and FP8 FusedMatMul bias + GELU -> FP8 MatMul (the
 * GELU epilogue's feed), as in a BERT layer: 3 FP8 layers fed, 0 passes (2 without feeds). */
static tgraph feed_graph(void)
{
    tgraph t = tg_new(KILN_OP_LayerNormalization, 17);
    kiln_graph *g = t.g;
    int h;
    tg_in(&t, RT(3, 2, 9, 64), false);
    tg_in(&t, rand_tensor(F32, 1, D(64), 0.5, 1.5), true);
    tg_in(&t, RT(1, 64), true);
    h = tg_out1(g, t.node, "h1");
    kiln__node_set_attr_i(tg_node(&t), "axis", -1);
    mark_feed(g, t.node, 4.0f);
    int in1[2] = {h, tg_const(g, "w1", RT(2, 64, 32))};
    int n1 = tg_node_add(g, KILN_OP_MatMul, 13, "side", 2, in1, "y1");
    mark_fp8_node(&t, n1, 4.0f);
    int in2[3] = {h, tg_const(g, "w2", RT(2, 64, 96)), tg_const(g, "b2", RT(1, 96))};
    int n2 = tg_node_add(g, KILN_OP_FusedMatMul, 1, "ffn1", 3, in2, "h2");
    int keep = t.node;
    t.node = n2;
    set_act(&t, KILN_FUSED_GELU, 0, 0);
    t.node = keep;
    mark_fp8_node(&t, n2, 4.0f);
    mark_feed(g, n2, 2.0f);
    int in3[2] = {g->nodes[n2].out[0], tg_const(g, "w3", RT(2, 96, 48))};
    int n3 = tg_node_add(g, KILN_OP_MatMul, 13, "ffn2", 2, in3, "y0");
    mark_fp8_node(&t, n3, 2.0f);
    tg_output(g, n3);
    tg_output(g, n1);
    return t;
}

/* Two runs of t on device d (the first uploads the weights, which drops any kept quantization): the second's outputs
 * into got, its counts into st; false (and a message) on failure. */
static bool feed_run(kiln_dev *d, tgraph *t, kiln_tensor *got, kiln_device_stats *st)
{
    const kiln_tensor *feed[8];
    for (int i = 0; i < t->n_feed; i++)
        feed[i] = &t->feed[i];
    kiln_run_env gpu = {.nthreads = 1, .dev = d, .backend = kiln__dev_backend(d)};
    kiln_status s = KILN_OK;
    for (int run = 0; run < 2 && s == KILN_OK; run++) {
        for (int o = 0; run && o < t->g->n_outputs; o++)
            kiln__tensor_release(&got[o]);
        kiln__dev_run_begin(d);
        s = kiln__exec_graph(t->g, NULL, feed, got, &gpu, 0);
    }
    kiln__dev_stats(d, st);
    kiln__dev_weights_clear(d);
    if (s != KILN_OK)
        printf("FAIL FP8 feeds: %s\n", kiln_last_error());
    else if (st->device_layers != t->g->n_nodes)
        printf("FAIL FP8 feeds: %d of %d layers on the device (%d fallbacks: %s)\n", st->device_layers,
               t->g->n_nodes, st->fallback_layers, st->fallback_ops);
    return s == KILN_OK && st->device_layers == t->g->n_nodes;
}

/* The CPU's reference of t into ref, then t on the test device (got, counts on) and on one without feeds (off, counts
 * no): 1 when all ran, 0 when the CPU reference failed or no GPU is present (printed and counted), -1 when a device
 * run failed (printed by feed_run; the caller counts it). lt_gelu non-NULL: "on" runs on a device opened with
 * KILN_CUDA_FP8_LT_GELU set to it instead of the test device. */
static int feeds_on_off(tgraph *t, const char *name, const char *lt_gelu, kiln_tensor *ref, kiln_tensor *got,
                        kiln_tensor *off, kiln_device_stats *on, kiln_device_stats *no)
{
    const kiln_tensor *feed[8];
    for (int i = 0; i < t->n_feed; i++)
        feed[i] = &t->feed[i];
    kiln_run_env cpu = {.nthreads = 1};
    test_checks++;
    bool ok = kiln__exec_graph(t->g, NULL, feed, ref, &cpu, 0) == KILN_OK;
    if (!ok || !dev) {
        printf("%s %s%s\n", ok ? "cpu " : "FAIL", name, ok ? "" : ": CPU reference failed");
        test_failures += !ok;
        return 0;
    }
    kiln_dev *d0 = NULL, *d1 = NULL;
    setenv("KILN_CUDA_FP8_FEED", "0", 1);
    bool opened = kiln__dev_open(KILN_DEVICE_CUDA, 0, &d0) == KILN_OK;
    unsetenv("KILN_CUDA_FP8_FEED");
    if (lt_gelu) {
        const char *keep = getenv("KILN_CUDA_FP8_LT_GELU");
        char kept[16];
        snprintf(kept, sizeof kept, "%s", keep ? keep : "");
        setenv("KILN_CUDA_FP8_LT_GELU", lt_gelu, 1);
        opened = opened && kiln__dev_open(KILN_DEVICE_CUDA, 0, &d1) == KILN_OK;
        if (keep)
            setenv("KILN_CUDA_FP8_LT_GELU", kept, 1);
        else
            unsetenv("KILN_CUDA_FP8_LT_GELU");
    }
    ok = opened && feed_run(d1 ? d1 : dev, t, got, on) && feed_run(d0, t, off, no);
    if (d0)
        kiln__dev_close(d0);
    if (d1)
        kiln__dev_close(d1);
    return ok ? 1 : -1;
}

/* The feed cases' bound on outputs against the CPU (feed_case's comment says why): with half storage (of the
 * activations, or of the FP8 GEMMs' outputs: KILN_CUDA_FP8_OUT fp16 / bf16, FP16 unset) the cosine decides, within one
 * E4M3 step of an intermediate; with float32 storage tol, or the E4M3 residual case's bound. */
static bool feed_near(double worst, double cos, double tol)
{
    const char *fo = getenv("KILN_CUDA_FP8_OUT");
    bool half_store = half_mode != KILN_DT_UNDEFINED || !fo || strcmp(fo, "fp32");
    return !half_store ? worst <= tol || (cos >= 0.99999 && worst <= 0.02) : cos >= 0.999 && worst <= 0.1;
}

/* store: ffn1's GELU output also held only as E4M3 (KILN_ATTR_FP8_STORE, ffn2's scale: docs/CUDA.md "E4M3
 * storage"), ffn2 reading those bytes as its input. lt false: kiln's epilogue writes them, into h2's own buffer
 * (KILN_CUDA_FP8_LT_GELU=0): the same bytes as a quantization pass of the stored FP16 values, so the outputs stay
 * bit-identical to the device without feeds (which stores nothing), and the counts those of the feeds. lt true
 * (the default): with a half output cuBLASLt's GEMM writes them itself, GELU in its epilogue in the tanh form
 * (counted: fp8_gelu_tanh 1); its bytes may then lie one E4M3 step from the CPU's (the cosine decides, as with half
 * storage); with float32 outputs kiln's epilogue again (counted 0, bit-identical). */
static void feed_case(double tol, bool store, bool lt)
{
    tgraph t = feed_graph();
    kiln_graph *g = t.g;
    tg_round_half(&t);
    for (int i = 0; store && i < g->n_nodes; i++)
        if (g->nodes[i].name && !strcmp(g->nodes[i].name, "ffn1"))
            kiln__node_set_attr_f(&g->nodes[i], KILN_ATTR_FP8_STORE, 2.0f / 448.0f);
    kiln_tensor ref[4] = {0}, got[4] = {0}, off[4] = {0};
    kiln_device_stats on = {0}, no = {0};
    const char *name = !store ? "FP8 feeds: LayerNorm, GELU" : lt ? "FP8 storage: GELU GEMM (cuBLASLt)"
                                                                  : "FP8 storage: GELU GEMM (kiln)";
    int ran = feeds_on_off(&t, name, store ? (lt ? "1" : "0") : NULL, ref, got, off, &on, &no);
    if (ran) {
        bool ok = ran > 0;
        double worst = 0, cos = 1, same = 0;
        for (int o = 0; ok && o < g->n_outputs; o++) {
            worst = fmax(worst, compare(&got[o], &ref[o]));
            cos = fmin(cos, cosine(&got[o], &ref[o]));
            same = fmax(same, got[o].nbytes == off[o].nbytes && !memcmp(got[o].data, off[o].data, got[o].nbytes)
                                  ? 0.0 : 1.0);
        }
        /* with half storage (of the activations, or of the FP8 GEMMs' outputs: KILN_CUDA_FP8_OUT fp16 / bf16, FP16
         * unset) the CPU quantizes float32 values the GPU holds rounded to half: some land on the other side of an
         * E4M3 rounding midpoint (one E4M3 step), so the cosine decides there. With float32 storage too the GPU's
         * LayerNorm and GEMM sums differ from the CPU's in order, so an intermediate lying within that difference of a
         * midpoint still lands one step away now and then (H200: 5.9e-3 on one draw, cosine 0.999995, the outputs
         * bit-identical to the device without feeds): the bound of the E4M3 residual case below, not tol, which
         * bounds one GEMM's sums */
        const char *fo = getenv("KILN_CUDA_FP8_OUT");
        bool half_store = half_mode != KILN_DT_UNDEFINED || !fo || strcmp(fo, "fp32");
        bool near = feed_near(worst, cos, tol);
        const unsigned long long want_fed = 3, want_off = 2, want_held = store, want_tanh = store && lt && half_store;
        bool counts = ok && on.fp8_fed_inputs == want_fed && on.fp8_quant_passes == 0 && no.fp8_fed_inputs == 0 &&
                      no.fp8_quant_passes == want_off && on.fp8_held_outputs == want_held && no.fp8_held_outputs == 0 &&
                      on.fp8_gelu_tanh == want_tanh && no.fp8_gelu_tanh == 0;
        bool good = ok && near && (same == 0 || want_tanh) && counts;
        printf("%s %-34s max rel err %.3g cosine %.6f (tol %.1g); bit-identical to no feeds: %s%s; fed %llu passes "
               "%llu held %llu tanh GELU %llu (want held %llu, tanh %llu; without feeds: %llu / %llu / %llu)\n",
               good ? "ok  " : "FAIL", name, worst, cos, tol, same == 0 ? "yes" : "NO",
               want_tanh ? " (not required)" : "", on.fp8_fed_inputs, on.fp8_quant_passes, on.fp8_held_outputs,
               on.fp8_gelu_tanh, want_held, want_tanh, no.fp8_fed_inputs, no.fp8_quant_passes, no.fp8_held_outputs);
        test_failures += !good;
    }
    for (int o = 0; o < 4; o++) {
        kiln__tensor_release(&ref[o]);
        kiln__tensor_release(&got[o]);
        kiln__tensor_release(&off[o]);
    }
    tg_free(&t);
}

/* Attention -> FP8 MatMul (BERT's attention output read by its projection), the attention marked: with half
 * activations the fused kernel writes its output as 16-byte pieces and the E4M3 feed beside them (1 fed, 0 passes);
 * with float32 ones the two-GEMM path runs, which writes no feed (0 fed, 1 pass). Q, K^T, V of 2 x 3 heads, 40 rows and
 * keys (a partial chunk, rows past the last 16-row tile), D 64, an additive mask; Y in [B, H, S, Dv]. The outputs must
 * be bit-identical to the device without feeds (the feed's bytes are the pass's) and near the CPU's (the cosine
 * decides with half storage, as in feed_case). */
static void attn_feed_case(double tol)
{
    tgraph t = tg_new(KILN_OP_Attention, 1);
    kiln_graph *g = t.g;
    tg_in(&t, RT(4, 2, 3, 40, 64), false);
    tg_in(&t, RT(4, 2, 3, 64, 40), false);
    tg_in(&t, RT(4, 2, 3, 40, 64), false);
    tg_in(&t, rand_tensor(F32, 4, D(2, 1, 1, 40), -3, 0), false);
    int h = tg_out1(g, t.node, "att");
    kiln__node_set_attr_f(tg_node(&t), "scale", 0.125f);
    mark_feed(g, t.node, 1.0f);
    int in1[2] = {h, tg_const(g, "wo", RT(2, 64, 32))};   /* N a multiple of 16 (cuBLASLt FP8) */
    int n1 = tg_node_add(g, KILN_OP_MatMul, 13, "proj", 2, in1, "y");
    mark_fp8_node(&t, n1, 1.0f);
    tg_output(g, n1);
    tg_round_half(&t);
    kiln_tensor ref[1] = {0}, got[1] = {0}, off[1] = {0};
    kiln_device_stats on = {0}, no = {0};
    const char *name = "FP8 feeds: fused attention";
    int ran = feeds_on_off(&t, name, NULL, ref, got, off, &on, &no);
    if (ran) {
        bool ok = ran > 0;
        double worst = ok ? compare(&got[0], &ref[0]) : 0, cos = ok ? cosine(&got[0], &ref[0]) : 0;
        bool same = ok && got[0].nbytes == off[0].nbytes && !memcmp(got[0].data, off[0].data, got[0].nbytes);
        const bool fused = half_mode != KILN_DT_UNDEFINED;
        bool near = feed_near(worst, cos, tol);
        bool counts = ok && on.fp8_fed_inputs == (fused ? 1u : 0u) && on.fp8_quant_passes == (fused ? 0u : 1u) &&
                      no.fp8_fed_inputs == 0 && no.fp8_quant_passes == 1;
        bool good = ok && near && same && counts;
        printf("%s %-34s max rel err %.3g cosine %.6f (tol %.1g); bit-identical to no feeds: %s; fed %llu passes %llu "
               "(want %d / %d; without feeds: %llu / %llu)\n", good ? "ok  " : "FAIL", name, worst, cos, tol,
               same ? "yes" : "NO", on.fp8_fed_inputs, on.fp8_quant_passes, fused ? 1 : 0, fused ? 0 : 1,
               no.fp8_fed_inputs, no.fp8_quant_passes);
        test_failures += !good;
    }
    kiln__tensor_release(&ref[0]);
    kiln__tensor_release(&got[0]);
    kiln__tensor_release(&off[0]);
    tg_free(&t);
}

void fp8_feed_case(double tol)
{
    feed_case(tol, false, false);
    feed_case(tol, true, false);
    feed_case(tol, true, true);
    attn_feed_case(tol);
}

/* ---- 4-bit weight-only layers (`--precision nvfp4|mxfp4|int4` engines): kiln_wq the format, kiln_aq "fp16".
 * The GPU decodes the CPU backend's packing of the weight to the emulation's FP16 weights exactly and
 * multiplies FP16-rounded activations with FP32 sums; its output is FP16 (one rounding: 2e-3). Sizes off
 * every tile: K not a multiple of the 16 / 32-element blocks, several 128-row / 128-column tiles, N odd. */
static void mark_fp4(tgraph *t, const char *fmt)
{
    kiln__node_set_attr_s(tg_node(t), KILN_ATTR_WQ, fmt);
    kiln__node_set_attr_s(tg_node(t), KILN_ATTR_AQ, "fp16");
}

/* ResNet's stem pool and a bottleneck in FP8 with a downsampling branch: c0 (3x3) -> MaxPool -> X; X -> c1 (1x1) ->
 * c2 (3x3) -> c3 (1x1) + ds(X) (1x1), ReLUs. The pool, c1 and c2 write feeds; the block input X is read by c1 and,
 * after c1 and c2 wrote their own feeds, by ds: ds must find X's E4M3 copy still kept (cu_be.fp8_kept) instead of
 * quantizing X again. With feeds: 1 pass (c0's graph input), 4 inputs fed (c1, c2, ds, c3); float32 outputs (the
 * pool writes no feed over float32): 2 passes (c0, c1's X), 2 fed; without feeds: 4 passes (c0, c1's X, c2's h1,
 * c3's h2; ds reuses c1's), 0 fed. Outputs against the CPU's emulation. */
static tgraph block_graph(void)
{
    tgraph t = tg_new(KILN_OP_FusedConv, 1);
    kiln_graph *g = t.g;
    tg_in(&t, RT(4, 2, 32, 9, 11), false);
    tg_in(&t, RT(4, 32, 32, 3, 3), true);
    tg_in(&t, RT(1, 32), true);
    int p0 = tg_out1(g, t.node, "p");
    attr_ints(&t, "pads", 4, D(1, 1, 1, 1));
    set_act(&t, KILN_FUSED_RELU, 0, 0);
    mark_fp8(&t, 1.0f);
    int keep = t.node;
    int mp = t.node = tg_node_add(g, KILN_OP_MaxPool, 12, "pool", 1, &p0, "X");
    int x = g->nodes[mp].out[0];
    attr_ints(&t, "kernel_shape", 2, D(3, 3));
    attr_ints(&t, "pads", 4, D(1, 1, 1, 1));
    mark_feed(g, mp, 4.0f);
    int in1[3] = {x, tg_const(g, "w1", RT(4, 16, 32, 1, 1)), tg_const(g, "b1", RT(1, 16))};
    int c1 = t.node = tg_node_add(g, KILN_OP_FusedConv, 1, "c1", 3, in1, "h1");
    set_act(&t, KILN_FUSED_RELU, 0, 0);
    mark_fp8(&t, 4.0f);
    mark_feed(g, c1, 4.0f);
    int in2[3] = {g->nodes[c1].out[0], tg_const(g, "w2", RT(4, 16, 16, 3, 3)), tg_const(g, "b2", RT(1, 16))};
    int c2 = t.node = tg_node_add(g, KILN_OP_FusedConv, 1, "c2", 3, in2, "h2");
    attr_ints(&t, "pads", 4, D(1, 1, 1, 1));
    set_act(&t, KILN_FUSED_RELU, 0, 0);
    mark_fp8(&t, 4.0f);
    mark_feed(g, c2, 4.0f);
    int ind[2] = {x, tg_const(g, "wd", RT(4, 48, 32, 1, 1))};
    int ds = tg_node_add(g, KILN_OP_Conv, 13, "ds", 2, ind, "r");
    mark_fp8_node(&t, ds, 4.0f);
    int in3[4] = {g->nodes[c2].out[0], tg_const(g, "w3", RT(4, 48, 16, 1, 1)), tg_const(g, "b3", RT(1, 48)),
                  g->nodes[ds].out[0]};
    int c3 = t.node = tg_node_add(g, KILN_OP_FusedConv, 1, "c3", 4, in3, "y");
    set_act(&t, KILN_FUSED_RELU, 0, 0);
    mark_fp8(&t, 4.0f);
    tg_output(g, c3);
    t.node = keep;
    return t;
}

void fp8_block_case(void)
{
    tgraph t = block_graph();
    kiln_tensor ref[1] = {0}, got[1] = {0}, off[1] = {0};
    kiln_device_stats on = {0}, no = {0};
    const char *name = "FP8 block: kept block input";
    int ran = feeds_on_off(&t, name, NULL, ref, got, off, &on, &no);
    if (ran) {
        bool ok = ran > 0;
        double worst = 0, cos = 1, worst0 = 0, cos0 = 1;
        if (ok) {
            worst = compare(&got[0], &ref[0]);
            cos = cosine(&got[0], &ref[0]);
            worst0 = compare(&off[0], &ref[0]);
            cos0 = cosine(&off[0], &ref[0]);
        }
        /* FP16 outputs: values landing on the other side of an E4M3 rounding midpoint move one E4M3 step */
        bool near = cos >= 0.999 && worst <= 0.1 && cos0 >= 0.999 && worst0 <= 0.1;
        const char *fo = getenv("KILN_CUDA_FP8_OUT");
        const bool f32 = fo && !strcmp(fo, "fp32");
        const unsigned long long want_fed = f32 ? 2 : 4, want_pass = f32 ? 2 : 1;
        bool counts = ok && on.fp8_quant_passes == want_pass && on.fp8_fed_inputs == want_fed &&
                      no.fp8_quant_passes == 4 && no.fp8_fed_inputs == 0;
        bool good = ok && near && counts;
        printf("%s %-28s max rel err %.3g cosine %.6f (without feeds %.3g / %.6f); fed %llu passes %llu (want %llu / "
               "%llu; without feeds: %llu / %llu, want 0 / 4)\n", good ? "ok  " : "FAIL", name, worst, cos, worst0, cos0,
               on.fp8_fed_inputs, on.fp8_quant_passes, want_fed, want_pass, no.fp8_fed_inputs, no.fp8_quant_passes);
        test_failures += !good;
    }
    kiln__tensor_release(&ref[0]);
    kiln__tensor_release(&got[0]);
    kiln__tensor_release(&off[0]);
    tg_free(&t);
}

/* FP8 storage (docs/CUDA.md): c0 (3x3, ReLU) -> X1 held only as E4M3 (KILN_ATTR_FP8_STORE, its readers' scale);
 * X1 -> c1 (1x1, ReLU) -> h; c2 = ReLU(conv(h) + X1) -> y, X1 read back as an E4M3 residual by kiln's kernel. The CPU
 * emulation rounds X1 through E4M3 alike. Counts: c0's graph input quantized (1 pass), c1 reads the held bytes and
 * c2 h's feed (2 fed). */
static tgraph store_graph(void)
{
    tgraph t = tg_new(KILN_OP_FusedConv, 1);
    kiln_graph *g = t.g;
    tg_in(&t, RT(4, 2, 32, 9, 11), false);
    tg_in(&t, RT(4, 32, 32, 3, 3), true);
    tg_in(&t, RT(1, 32), true);
    int x1 = tg_out1(g, t.node, "X1");
    attr_ints(&t, "pads", 4, D(1, 1, 1, 1));
    set_act(&t, KILN_FUSED_RELU, 0, 0);
    mark_fp8(&t, 1.0f);
    mark_feed(g, t.node, 4.0f);
    kiln__node_set_attr_f(tg_node(&t), KILN_ATTR_FP8_STORE, 4.0f / 448.0f);
    int keep = t.node;
    int in1[3] = {x1, tg_const(g, "w1", RT(4, 16, 32, 1, 1)), tg_const(g, "b1", RT(1, 16))};
    int c1 = t.node = tg_node_add(g, KILN_OP_FusedConv, 1, "c1", 3, in1, "h");
    set_act(&t, KILN_FUSED_RELU, 0, 0);
    mark_fp8(&t, 4.0f);
    mark_feed(g, c1, 4.0f);
    int in2[4] = {g->nodes[c1].out[0], tg_const(g, "w2", RT(4, 32, 16, 1, 1)), tg_const(g, "b2", RT(1, 32)), x1};
    int c2 = t.node = tg_node_add(g, KILN_OP_FusedConv, 1, "c2", 4, in2, "y");
    set_act(&t, KILN_FUSED_RELU, 0, 0);
    mark_fp8(&t, 4.0f);
    tg_output(g, c2);
    t.node = keep;
    return t;
}

/* one run of the case with the kernel KILN_CUDA_FP8_CONV names (how: NULL, the fastest of kiln's) */
static void fp8_store_case_in(const char *how)
{
    tgraph t = store_graph();
    kiln_tensor ref[1] = {0}, got[1] = {0}, off[1] = {0};
    kiln_device_stats on = {0}, no = {0};
    char name[64];
    snprintf(name, sizeof name, "FP8 storage: E4M3 residual%s%s%s", how ? " (" : "", how ? how : "", how ? ")" : "");
    if (how)
        setenv("KILN_CUDA_FP8_CONV", how, 1);
    int ran = feeds_on_off(&t, name, NULL, ref, got, off, &on, &no);
    if (ran) {
        bool ok = ran > 0;
        double worst = ok ? compare(&got[0], &ref[0]) : 1, cos = ok ? cosine(&got[0], &ref[0]) : 0;
        /* FP16 / BF16 outputs: a value on the other side of an E4M3 rounding midpoint moves one E4M3 step */
        const char *fo = getenv("KILN_CUDA_FP8_OUT");
        bool f32 = fo && !strcmp(fo, "fp32");
        bool near = f32 ? cos >= 0.99999 && worst <= 0.02 : cos >= 0.999 && worst <= 0.1;
        bool counts = ok && on.fp8_quant_passes == 1 && on.fp8_fed_inputs == 2 && on.fp8_held_outputs == 1 &&
                      no.fp8_held_outputs == 0;
        bool good = ok && near && counts;
        printf("%s %-28s max rel err %.3g cosine %.6f; fed %llu passes %llu held %llu (want 2 / 1 / 1; without feeds "
               "held %llu)\n", good ? "ok  " : "FAIL", name, worst, cos, on.fp8_fed_inputs, on.fp8_quant_passes,
               on.fp8_held_outputs, no.fp8_held_outputs);
        test_failures += !good;
    }
    unsetenv("KILN_CUDA_FP8_CONV");
    kiln__tensor_release(&ref[0]);
    kiln__tensor_release(&got[0]);
    kiln__tensor_release(&off[0]);
    tg_free(&t);
}

/* with each of kiln's kernels that hold E4M3 (mma.sync, wgmma in each tile), then the fastest. wgmma's FP8 sums keep
 * fewer bits than float32 between MMAs (cuBLASLt's fast accumulation), which the float32-output bound does not
 * allow for: with KILN_CUDA_FP8_FAST_ACCUM=0 (that run) the runtime does not choose it, nor does this case force it. */
void fp8_store_case(void)
{
    const char *fa = getenv("KILN_CUDA_FP8_FAST_ACCUM");
    fp8_store_case_in("kiln");
    if (fa && !strcmp(fa, "0"))
        printf("skip FP8 storage: E4M3 residual with kiln's wgmma kernel: KILN_CUDA_FP8_FAST_ACCUM=0\n");
    else
        for (int i = 0; i < 10; i++)
            fp8_store_case_in(wg_modes[i]);
    fp8_store_case_in(NULL);
}

/* 4-bit embedding tables (PRECISION.md "4-bit embedding tables"): a Gather so marked keeps only the CPU backend's
 * packing of its table on the GPU and decodes the gathered rows as the GEMM decodes its weights, to the emulation's
 * FP16 values exactly, in float32 storage (tol 0; the half passes: that storage's rounding). Row lengths odd, below
 * one block and of several blocks; int64 and int32 indices of ranks 1 to 3 with negative ones (they wrap). */
void fp4_gather_cases(void)
{
    static const char *fmts[3] = {"nvfp4", "mxfp4", "int4"};
    char name[64];
    for (int f = 0; f < 3; f++) {
        tgraph t = tg_new(KILN_OP_Gather, 13);
        tg_in(&t, rand_tensor(F32, 2, D(1000, 77), -0.2, 0.2), true);
        tg_in(&t, rand_tensor(KILN_DT_INT64, 2, D(3, 129), -1000, 999), false);
        tg_outs(&t, 1);
        mark_fp4(&t, fmts[f]);
        snprintf(name, sizeof name, "%s Gather 1000x77 int64", fmts[f]);
        run_case(name, &t, 0);
        t = tg_new(KILN_OP_Gather, 13);
        tg_in(&t, RT(2, 50, 7), true);
        tg_in(&t, rand_tensor(KILN_DT_INT32, 1, D(33), -50, 49), false);
        tg_outs(&t, 1);
        mark_fp4(&t, fmts[f]);
        snprintf(name, sizeof name, "%s Gather 50x7 int32", fmts[f]);
        run_case(name, &t, 0);
    }
    tgraph t = tg_new(KILN_OP_Gather, 13);
    tg_in(&t, RT(2, 300, 768), true);
    tg_in(&t, rand_tensor(KILN_DT_INT64, 3, D(2, 3, 40), -300, 299), false);
    tg_outs(&t, 1);
    kiln__node_set_attr_i(tg_node(&t), "axis", -2);
    mark_fp4(&t, "nvfp4");
    run_case("nvfp4 Gather 300x768 axis -2", &t, 0);
}

void fp4_cases(void)
{
    static const char *fmts[3] = {"nvfp4", "mxfp4", "int4"};
    char name[64];
    for (int f = 0; f < 3; f++) {
        tgraph t = tg_new(KILN_OP_MatMul, 13);
        tg_in(&t, RT(3, 3, 17, 70), false);
        tg_in(&t, RT(2, 70, 33), true);
        tg_outs(&t, 1);
        mark_fp4(&t, fmts[f]);
        snprintf(name, sizeof name, "%s MatMul K 70 N 33", fmts[f]);
        run_case(name, &t, 2e-3);
        t = tg_new(KILN_OP_FusedMatMul, 1);
        tg_in(&t, RT(3, 2, 150, 768), false);
        tg_in(&t, RT(2, 768, 200), true);
        tg_in(&t, RT(1, 200), true);
        tg_in(&t, RT(3, 2, 150, 200), false);
        tg_outs(&t, 1);
        set_act(&t, KILN_FUSED_GELU, 0, 0);
        mark_fp4(&t, fmts[f]);
        snprintf(name, sizeof name, "%s FusedMatMul 300x768x200 Gelu", fmts[f]);
        run_case(name, &t, 2e-3);
    }
    tgraph t = tg_new(KILN_OP_MatMul, 13);
    tg_in(&t, RT(1, 64), false);
    tg_in(&t, RT(2, 64, 16), true);
    tg_outs(&t, 1);
    mark_fp4(&t, "nvfp4");
    run_case("nvfp4 MatMul 1-D A", &t, 2e-3);
    t = tg_new(KILN_OP_Gemm, 13);
    tg_in(&t, RT(2, 7, 130), false);
    tg_in(&t, RT(2, 48, 130), true);
    tg_in(&t, RT(1, 48), true);
    tg_outs(&t, 1);
    kiln__node_set_attr_i(tg_node(&t), "transB", 1);
    mark_fp4(&t, "mxfp4");
    run_case("mxfp4 Gemm transB bias", &t, 2e-3);
    t = tg_new(KILN_OP_FusedGemm, 1);
    tg_in(&t, RT(2, 5, 64), false);
    tg_in(&t, RT(2, 64, 48), true);
    tg_in(&t, RT(1, 48), true);
    tg_outs(&t, 1);
    set_act(&t, KILN_FUSED_RELU, 0, 0);
    mark_fp4(&t, "int4");
    run_case("int4 FusedGemm bias Relu", &t, 2e-3);
    fp4_gather_cases();
}

/* test_gpu: INT8 layers (cuda_int8.c) against the CPU reference, byte for byte: QuantizeLinear, DequantizeLinear,
 * QLinearAdd, and QLinearConv in every kernel configuration (mma.sync, the three wgmma tiles) over u8 and s8 inputs
 * (each configuration takes both),
 * u8 / s8 / float32 outputs, padding, strides, dilation, partial row and column tiles, an input zero point folded
 * into the bias; kiln's QLinearConvAdd (the residual add in the convolution's epilogue); QLinearMatMul (s8 / u8 A with
 * a zero point, float32 / s8 outputs, and GELU before a u8 output as BERT's FFN has it); outputs requantized through
 * a non-linear activation may differ by one step in at most 1% of the values. */
#include "gpu_harness.h"
#include "passes/rewrite.h"
#include <math.h>
#include <stdlib.h>

/* a scalar tensor of dtype dt holding v */
static kiln_tensor scalar(kiln_dtype dt, double v)
{
    kiln_tensor t;
    if (kiln__tensor_alloc(&t, dt, 0, NULL) != KILN_OK)
        exit(2);
    if (dt == KILN_DT_FLOAT32)
        *(float *)t.data = (float)v;
    else
        kiln__set_i64(dt, t.data, 0, (int64_t)v);
    return t;
}

static void quant_cases(void)
{
    /* float -> u8 with a zero point (some values saturate at both ends), -> s8 */
    tgraph t = tg_new(KILN_OP_QuantizeLinear, 13);
    tg_in(&t, RT(4, 2, 16, 5, 7), false);
    tg_in(&t, scalar(F32, 0.006), true);
    tg_in(&t, scalar(KILN_DT_UINT8, 40), true);
    tg_outs(&t, 1);
    run_case("INT8 QuantizeLinear u8 zp 40", &t, 0);
    t = tg_new(KILN_OP_QuantizeLinear, 13);
    tg_in(&t, RT(3, 3, 37, 11), false);
    tg_in(&t, scalar(F32, 0.01), true);
    tg_in(&t, scalar(KILN_DT_INT8, -5), true);
    tg_outs(&t, 1);
    run_case("INT8 QuantizeLinear s8 zp -5", &t, 0);
    t = tg_new(KILN_OP_DequantizeLinear, 13);
    tg_in(&t, rand_tensor(KILN_DT_INT8, 3, D(2, 33, 7), -128, 128), false);
    tg_in(&t, scalar(F32, 0.05), true);
    tg_in(&t, scalar(KILN_DT_INT8, -3), true);
    tg_outs(&t, 1);
    run_case("INT8 DequantizeLinear s8", &t, 0);
    t = tg_new(KILN_OP_DequantizeLinear, 13);
    tg_in(&t, rand_tensor(KILN_DT_UINT8, 4, D(1, 16, 9, 9), 0, 256), false);
    tg_in(&t, scalar(F32, 0.02), true);
    tg_outs(&t, 1);
    run_case("INT8 DequantizeLinear u8 no zp", &t, 0);
}

/* kiln's QLookup: u8 -> s8 and s8 -> u8 tables over a 16-byte multiple and an odd count (the vector loop and the
 * tail), every byte equal */
static void qlookup_cases(void)
{
    for (int c = 0; c < 4; c++) {
        bool s8 = c % 2;
        tgraph t = tg_new(KILN_OP_QLookup, 1);
        kiln_dtype xdt = s8 ? KILN_DT_INT8 : KILN_DT_UINT8, tdt = s8 ? KILN_DT_UINT8 : KILN_DT_INT8;
        tg_in(&t, c < 2 ? rand_tensor(xdt, 4, D(2, 24, 9, 16), s8 ? -128 : 0, s8 ? 128 : 256)
                        : rand_tensor(xdt, 3, D(3, 37, 41), s8 ? -128 : 0, s8 ? 128 : 256), false);
        tg_in(&t, rand_tensor(tdt, 1, D(256), s8 ? 0 : -128, s8 ? 256 : 128), true);
        tg_outs(&t, 1);
        char name[64];
        snprintf(name, sizeof name, "INT8 QLookup %s%s", s8 ? "s8 -> u8" : "u8 -> s8", c < 2 ? "" : " (odd count)");
        run_case(name, &t, 0);
    }
}

/* QLinearAdd: a (u8, zp 10) + b (s8, zp -2) -> c (u8 zp 5), activation act ("" none) */
/* sa, sb, sc: A's, B's and C's scales (0.5, 0.5, 1: every odd sum an exact tie, where the GPU's quick rounding
 * declines and the element divides) */
static void qadd_case(const char *name, const char *act, float lo, float hi, float sa, float sb, float sc)
{
    tgraph t = tg_new(KILN_OP_QLinearAdd, 1);
    tg_in(&t, rand_tensor(KILN_DT_UINT8, 4, D(2, 32, 6, 5), 0, 256), false);
    tg_in(&t, scalar(F32, sa), true);
    tg_in(&t, scalar(KILN_DT_UINT8, 10), true);
    tg_in(&t, rand_tensor(KILN_DT_INT8, 4, D(2, 32, 6, 5), -128, 128), false);
    tg_in(&t, scalar(F32, sb), true);
    tg_in(&t, scalar(KILN_DT_INT8, -2), true);
    tg_in(&t, scalar(F32, sc), true);
    tg_in(&t, scalar(KILN_DT_UINT8, 5), true);
    tg_outs(&t, 1);
    if (act[0]) {
        kiln__node_set_attr_s(tg_node(&t), "kiln_act", act);
        if (!strcmp(act, "Clip")) {
            kiln__node_set_attr_f(tg_node(&t), "kiln_act_alpha", lo);
            kiln__node_set_attr_f(tg_node(&t), "kiln_act_beta", hi);
        }
    }
    run_case(name, &t, 0);
}

typedef struct qconv_spec {
    const char *name;
    int64_t n, c, h, w, k, r, s;
    int64_t pad, stride, dil;
    kiln_dtype xdt;        /* UINT8 / INT8 */
    int xzp;
    kiln_dtype ydt;        /* UINT8 / INT8, FLOAT32 for kiln_out_float */
    int yzp;
    bool per_channel, bias;
    const char *act;       /* "" none, "Relu", "Clip" (-1, 2) */
    float ys;              /* y's scale (0: 0.6) */
} qconv_spec;

/* A QLinearConv of spec p in `group` groups: acc ~ sqrt(C R S / group) * 128 * 64, scales that put y around +-100 */
static tgraph qconv_graph_g(const qconv_spec *p, int64_t group)
{
    tgraph t = tg_new(KILN_OP_QLinearConv, 10);
    double xlo = p->xdt == KILN_DT_UINT8 ? 0 : -128, xhi = p->xdt == KILN_DT_UINT8 ? 256 : 128;
    tg_in(&t, rand_tensor(p->xdt, 4, D(p->n, p->c, p->h, p->w), xlo, xhi), false);
    tg_in(&t, scalar(F32, 0.01), true);
    tg_in(&t, scalar(p->xdt, p->xzp), true);
    int64_t cg = p->c / group;
    tg_in(&t, rand_tensor(KILN_DT_INT8, 4, D(p->k, cg, p->r, p->s), -127, 128), true);
    double ws = 0.4 / sqrt((double)(cg * p->r * p->s));
    tg_in(&t, p->per_channel ? rand_tensor(F32, 1, D(p->k), ws * 0.5, ws * 1.5) : scalar(F32, ws), true);
    tg_in(&t, p->per_channel ? rand_tensor(KILN_DT_INT8, 1, D(p->k), 0, 1) : scalar(KILN_DT_INT8, 0), true);
    tg_in(&t, scalar(F32, p->ys > 0 ? p->ys : 0.6), true);
    tg_in(&t, scalar(p->ydt == KILN_DT_FLOAT32 ? KILN_DT_UINT8 : p->ydt, p->yzp), true);
    if (p->bias)
        tg_in(&t, rand_tensor(KILN_DT_INT32, 1, D(p->k), -20000, 20000), true);
    tg_outs(&t, 1);
    attr_ints(&t, "pads", 4, D(p->pad, p->pad, p->pad, p->pad));
    attr_ints(&t, "strides", 2, D(p->stride, p->stride));
    attr_ints(&t, "dilations", 2, D(p->dil, p->dil));
    if (p->ydt == KILN_DT_FLOAT32)
        kiln__node_set_attr_i(tg_node(&t), "kiln_out_float", 1);
    if (group > 1)
        kiln__node_set_attr_i(tg_node(&t), "group", group);
    if (p->act[0]) {
        kiln__node_set_attr_s(tg_node(&t), "kiln_act", p->act);
        if (!strcmp(p->act, "Clip")) {
            kiln__node_set_attr_f(tg_node(&t), "kiln_act_alpha", -1.0f);
            kiln__node_set_attr_f(tg_node(&t), "kiln_act_beta", 2.0f);
        }
    }
    return t;
}

static tgraph qconv_graph(const qconv_spec *p) { return qconv_graph_g(p, 1); }

/* The convolution of p made a QLinearConvAdd with R (rdt, the output's shape, zero point rz, scale rs) as inputs 9-11
 * (input 8, the bias, left empty where p has none) */
static tgraph qconv_res_graph(const qconv_spec *p, kiln_dtype rdt, int rz, float rs)
{
    tgraph t = qconv_graph(p);
    if (!p->bias)   /* input 8 left empty */
        kiln__node_add_input(t.g, t.node, -1);
    int64_t ho = (p->h + 2 * p->pad - p->dil * (p->r - 1) - 1) / p->stride + 1;
    int64_t wo = (p->w + 2 * p->pad - p->dil * (p->s - 1) - 1) / p->stride + 1;
    double rlo = rdt == KILN_DT_UINT8 ? 0 : -128, rhi = rdt == KILN_DT_UINT8 ? 256 : 128;
    tg_in(&t, rand_tensor(rdt, 4, D(p->n, p->k, ho, wo), rlo, rhi), false);
    tg_in(&t, scalar(F32, rs), true);
    tg_in(&t, scalar(rdt, rz), true);
    kiln__node_set_op(tg_node(&t), KILN_OP_QLinearConvAdd, KILN_DOMAIN, 1);
    return t;
}

/* QLinearConvAdd (passes/p_qres.c): the convolution of p (a quantized output), then its add with R (rdt, shape of the
 * output, zero point rz, scale rs) into C (cdt, zero point cz, scale cs) with the activation res_act ("" none, "Relu");
 * cdt float32: the float tail (kiln_res_float: Y and R dequantized and summed in float32) */
static tgraph qconv_add_graph(const qconv_spec *p, kiln_dtype rdt, int rz, kiln_dtype cdt, int cz, const char *res_act,
                              float rs, float cs)
{
    tgraph t = qconv_res_graph(p, rdt, rz, rs);
    if (cdt != F32) {   /* float32 C: kiln_res_float, no C_scale / C_zero_point */
        tg_in(&t, scalar(F32, cs), true);
        tg_in(&t, scalar(cdt, cz), true);
    }
    kiln_node *n = tg_node(&t);
    if (cdt == F32)
        kiln__node_set_attr_i(n, "kiln_res_float", 1);
    if (res_act[0])
        kiln__node_set_attr_s(n, "kiln_res_act", res_act);
    return t;
}

/* QLinearConvAdd with one rounding (kiln_res_once, implicit INT8 blocks: passes/p_qres.c): p's output quantization and
 * activation are C's (inputs 6, 7 and kiln_act), R (rdt, the output's shape, zero point rz, scale rs) is added to the
 * convolution's sum before its only rounding */
static tgraph qconv_once_graph(const qconv_spec *p, kiln_dtype rdt, int rz, float rs)
{
    tgraph t = qconv_res_graph(p, rdt, rz, rs);
    kiln__node_set_attr_i(tg_node(&t), "kiln_res_once", 1);
    return t;
}

/* QLinearConvSum (passes/p_qres.c fuse_sum): the convolution of p (its output quantization and activation C's) and a
 * second one, 1x1 over x2 (p's activation type, [n, c2, h2, w2], zero point x2z) at strides s2, its products summed
 * before the one rounding; with or without B2 */
static tgraph qconv_sum_graph(const qconv_spec *p, int64_t c2, int64_t h2, int64_t w2, int s2, int x2z, bool bias2)
{
    tgraph t = qconv_graph(p);
    if (!p->bias)   /* input 8 left empty */
        kiln__node_add_input(t.g, t.node, -1);
    double xlo = p->xdt == KILN_DT_UINT8 ? 0 : -128, xhi = p->xdt == KILN_DT_UINT8 ? 256 : 128;
    tg_in(&t, rand_tensor(p->xdt, 4, D(p->n, c2, h2, w2), xlo, xhi), false);
    tg_in(&t, scalar(F32, 0.012), true);
    tg_in(&t, scalar(p->xdt, x2z), true);
    tg_in(&t, rand_tensor(KILN_DT_INT8, 4, D(p->k, c2, 1, 1), -127, 128), true);
    double ws = 0.4 / sqrt((double)c2);
    tg_in(&t, rand_tensor(F32, 1, D(p->k), ws * 0.5, ws * 1.5), true);
    tg_in(&t, scalar(KILN_DT_INT8, 0), true);
    if (bias2)
        tg_in(&t, rand_tensor(KILN_DT_INT32, 1, D(p->k), -20000, 20000), true);
    kiln__node_set_op(tg_node(&t), KILN_OP_QLinearConvSum, KILN_DOMAIN, 1);
    attr_ints(&t, "kiln_sum_strides", 2, D(s2, s2));
    return t;
}

static const qconv_spec qconv_specs[] = {
    {"3x3 u8->u8 Relu", 2, 32, 9, 11, 48, 3, 3, 1, 1, 1, KILN_DT_UINT8, 0, KILN_DT_UINT8, 0, true, true, "Relu", 0},
    {"1x1 s2 u8->s8 zp", 3, 64, 14, 13, 32, 1, 1, 0, 2, 1, KILN_DT_UINT8, 0, KILN_DT_INT8, -3, false, false, "", 0},
    {"1x1 x_zp 7 ->f32", 1, 16, 7, 9, 24, 1, 1, 0, 1, 1, KILN_DT_UINT8, 7, KILN_DT_FLOAT32, 0, true, true, "", 0},
    {"3x3 s8->s8 Clip", 2, 16, 8, 8, 16, 3, 3, 1, 1, 1, KILN_DT_INT8, 0, KILN_DT_INT8, 0, true, true, "Clip", 0},
    {"3x3 dil2 tiles", 1, 48, 40, 37, 144, 3, 3, 2, 1, 2, KILN_DT_UINT8, 0, KILN_DT_UINT8, 12, true, true, "", 0},
    {"3x3 s2 ->f32 Relu", 2, 64, 15, 15, 272, 3, 3, 1, 2, 1, KILN_DT_UINT8, 0, KILN_DT_FLOAT32, 0, true, true, "Relu", 0},
    /* a GEMM for the weight-stationary configurations (wg8 / wg9): 3 reduction steps, the last one half zeros; 3 / 5
     * filter slices, the last 16 channels wide; 190 row tiles, more than the stages times the blocks of a slice, so
     * every stage is refilled; the input zero point folded into the bias */
    {"1x1 c160 k272 rows", 2, 160, 110, 110, 272, 1, 1, 0, 1, 1, KILN_DT_UINT8, 3, KILN_DT_UINT8, 5, true, true, "Relu", 0},
    /* the 3x3 patch kernels (wg10 / wg11): two 64-channel steps, the second a quarter full; partial patches at the
     * bottom and right of each of 3 images; 72 outputs (a partial column tile); s8 input, float32 output (the
     * epilogue's other path) over 192 channels, 136 outputs */
    {"3x3 c80 k72 patches", 3, 80, 19, 13, 72, 3, 3, 1, 1, 1, KILN_DT_UINT8, 0, KILN_DT_UINT8, 4, true, true, "Relu", 0},
    {"3x3 s8 c192 ->f32", 1, 192, 17, 9, 136, 3, 3, 1, 1, 1, KILN_DT_INT8, 0, KILN_DT_FLOAT32, 0, true, true, "", 0},
    /* one 64-channel step over 528 patches: wg10's persistent blocks walk several each (two halo buffers in turn) */
    {"3x3 c32 528 patches", 16, 32, 40, 83, 40, 3, 3, 1, 1, 1, KILN_DT_UINT8, 0, KILN_DT_UINT8, 2, true, true, "Relu", 0},
    /* the TMA kernels' im2col walk (wg12 / wg13, session 46: channels a multiple of 64): 128-channel steps over 3
     * images whose row tiles start mid-row and cross from one image into the next, 9 taps; stride 2 over 64-channel
     * steps into a partial column tile (K 160); dilation 2 with padding 2 */
    {"3x3 c128 k128 images", 3, 128, 17, 15, 128, 3, 3, 1, 1, 1, KILN_DT_UINT8, 0, KILN_DT_UINT8, 3, true, true, "Relu", 0},
    {"3x3 s2 c192 k160 s8", 2, 192, 15, 15, 160, 3, 3, 1, 2, 1, KILN_DT_INT8, 0, KILN_DT_INT8, -2, true, false, "", 0},
    {"3x3 dil2 c64 k48", 2, 64, 20, 20, 48, 3, 3, 2, 1, 2, KILN_DT_UINT8, 0, KILN_DT_UINT8, 0, true, true, "Clip", 0.05f},
    /* at most 64 output channels: the TMA kernels' 64-channel tiles (ResNet's layer1 conv1 shape; a float output over
     * a partial 48-channel tile) */
    {"1x1 c256 k64 rows", 2, 256, 30, 31, 64, 1, 1, 0, 1, 1, KILN_DT_UINT8, 0, KILN_DT_UINT8, 0, true, true, "Relu", 0},
    {"1x1 c64 k48 s8 ->f32", 3, 64, 9, 13, 48, 1, 1, 0, 1, 1, KILN_DT_INT8, 0, KILN_DT_FLOAT32, 0, true, true, "", 0},
};

/* The layers the tensor-core kernels do not take, on the CUDA cores (kernels_conv_i8_direct.cu), byte for byte:
 * depthwise (PP-OCR's 3x3 and 5x5, stride 1 and 2, four channels a thread and, with 6 channels, one), grouped,
 * input channels not a multiple of 16 (a 3-channel stem) or outputs not of 8, a padded input with a zero point
 * (the padding read as it) */
static const struct {
    qconv_spec p;
    int64_t group;
} direct_specs[] = {
    {{"dw 3x3 u8->u8 Relu", 2, 48, 19, 23, 48, 3, 3, 1, 1, 1, KILN_DT_UINT8, 0, KILN_DT_UINT8, 0, true, true, "Relu", 0}, 48},
    {{"dw 5x5 s2 s8->f32", 1, 40, 17, 16, 40, 5, 5, 2, 2, 1, KILN_DT_INT8, 0, KILN_DT_FLOAT32, 0, true, true, "", 0}, 40},
    {{"dw 3x3 x_zp 9 ->s8", 2, 24, 9, 10, 24, 3, 3, 1, 1, 1, KILN_DT_UINT8, 9, KILN_DT_INT8, -4, true, false, "", 0}, 24},
    {{"dw c6 dil2 s8 Clip", 1, 6, 13, 11, 6, 3, 3, 2, 1, 2, KILN_DT_INT8, -3, KILN_DT_INT8, 2, false, true, "Clip", 0.05f}, 6},
    {{"g4 3x3 c32 k16", 2, 32, 11, 9, 16, 3, 3, 1, 1, 1, KILN_DT_UINT8, 0, KILN_DT_UINT8, 3, true, true, "Relu", 0}, 4},
    {{"1x1 c24 k6 ->u8", 1, 24, 20, 21, 6, 1, 1, 0, 1, 1, KILN_DT_UINT8, 5, KILN_DT_UINT8, 1, true, true, "", 0}, 1},
    {{"3x3 s2 c3 k16 zp 128", 2, 3, 33, 30, 16, 3, 3, 1, 2, 1, KILN_DT_UINT8, 128, KILN_DT_UINT8, 0, true, true, "Relu", 0}, 1},
};

/* Like check_case, for 8-bit outputs computed through a non-linear activation (the GPU's expf / erf approximations
 * may move a requantized value by one step): at most 1 step apart, in at most 1% of the elements */
static void run_case_step(const char *name, tgraph *t)
{
    kiln_tensor ref[1] = {0}, got[1] = {0};
    const char *why;
    if (tg_run_both(dev, name, t, ref, got, &why)) {
        tg_free(t);
        return;
    }
    if (!why && (got[0].dtype != ref[0].dtype || got[0].nbytes != ref[0].nbytes))
        why = "another output";
    int64_t n = kiln_tensor_numel(&ref[0]), differ = 0;
    int worst = 0;
    for (int64_t i = 0; !why && i < n; i++) {
        int a = ref[0].dtype == KILN_DT_INT8 ? ((int8_t *)ref[0].data)[i] : ((uint8_t *)ref[0].data)[i];
        int b = got[0].dtype == KILN_DT_INT8 ? ((int8_t *)got[0].data)[i] : ((uint8_t *)got[0].data)[i];
        differ += a != b;
        worst = abs(a - b) > worst ? abs(a - b) : worst;
    }
    bool ok = !why && worst <= 1 && differ * 100 <= n;
    printf("%s %-28s %lld of %lld values one step apart (max %d)%s%s\n", ok ? "ok  " : "FAIL", name, (long long)differ,
           (long long)n, worst, why ? ": " : "", why ? why : "");
    test_failures += !ok;
    if (!ok && !why)
        print_diff(&got[0], &ref[0]);
    tg_release(t, ref, got);
    tg_free(t);
}

/* QLinearMatMul with a constant s8 B [k, n] over A (adt) [2, m, k], zero point az; output ydt (FLOAT32: kiln_out_float)
 * with zero point yz; bias; activation act */
static tgraph qmm_graph(kiln_dtype adt, int az, int64_t m, int64_t k, int64_t n, kiln_dtype ydt, int yz, bool bias,
                        const char *act)
{
    tgraph t = tg_new(KILN_OP_QLinearMatMul, 10);
    double lo = adt == KILN_DT_UINT8 ? 0 : -128, hi = adt == KILN_DT_UINT8 ? 256 : 128;
    tg_in(&t, rand_tensor(adt, 3, D(2, m, k), lo, hi), false);
    tg_in(&t, scalar(F32, 0.02), true);
    tg_in(&t, scalar(adt, az), true);
    tg_in(&t, rand_tensor(KILN_DT_INT8, 2, D(k, n), -127, 128), true);
    double ws = 0.25 / sqrt((double)k);
    tg_in(&t, rand_tensor(F32, 1, D(n), ws * 0.5, ws * 1.5), true);
    tg_in(&t, scalar(KILN_DT_INT8, 0), true);
    tg_in(&t, scalar(F32, 0.05), true);
    tg_in(&t, scalar(ydt == KILN_DT_FLOAT32 ? KILN_DT_UINT8 : ydt, yz), true);
    if (bias)
        tg_in(&t, rand_tensor(KILN_DT_INT32, 1, D(n), -5000, 5000), true);
    tg_outs(&t, 1);
    if (ydt == KILN_DT_FLOAT32)
        kiln__node_set_attr_i(tg_node(&t), "kiln_out_float", 1);
    if (act[0])
        kiln__node_set_attr_s(tg_node(&t), "kiln_act", act);
    return t;
}

static void qmm_cases(const char *mode)
{
    char name[96];
    tgraph t;
    snprintf(name, sizeof name, "INT8 QLinearMatMul s8->f32 bias (%s)", mode);
    t = qmm_graph(KILN_DT_INT8, 0, 37, 64, 48, KILN_DT_FLOAT32, 0, true, "");
    run_case(name, &t, 0);
    snprintf(name, sizeof name, "INT8 QLinearMatMul u8 zp 9->s8 (%s)", mode);
    t = qmm_graph(KILN_DT_UINT8, 9, 130, 96, 264, KILN_DT_INT8, -4, true, "");
    run_case(name, &t, 0);
    snprintf(name, sizeof name, "INT8 QLinearMatMul Gelu->u8 (%s)", mode);   /* BERT's FFN up */
    t = qmm_graph(KILN_DT_INT8, 0, 65, 128, 256, KILN_DT_UINT8, 20, true, "Gelu");
    run_case_step(name, &t);
    /* float outputs through GELU (the inlined GELU of f_vals8 in the wgmma configurations): the GPU's erf form */
    snprintf(name, sizeof name, "INT8 QLinearMatMul s8 Gelu->f32 (%s)", mode);
    t = qmm_graph(KILN_DT_INT8, 0, 65, 128, 256, KILN_DT_FLOAT32, 0, true, "Gelu");
    run_case(name, &t, 1e-5);
    snprintf(name, sizeof name, "INT8 QLinearConv HardSwish->u8 (%s)", mode);
    static const qconv_spec hs = {"", 2, 32, 9, 11, 48, 3, 3, 1, 1, 1, KILN_DT_UINT8, 0, KILN_DT_UINT8, 30, true, true,
                                  "HardSwish", 0};
    t = qconv_graph(&hs);
    run_case_step(name, &t);
}

/* A float output in FP16 storage (KILN_CUDA_INT8_OUT=fp16, on device d): within half's rounding of the CPU's float32
 * (tol relative to max |cpu|), and not equal to it (an error of 0 would mean the storage was not half) */
static void half_out_case(kiln_dev *d, const char *name, tgraph *t, double tol)
{
    kiln_tensor ref[1] = {0}, got[1] = {0};
    const char *why;
    if (tg_run_both(d, name, t, ref, got, &why)) {
        tg_free(t);
        return;
    }
    double err = why ? INFINITY : compare(&got[0], &ref[0]);
    bool ok = !why && err > 0 && err <= tol;
    printf("%s %-28s max rel err %.3g (tol %.1g, > 0: FP16 storage)%s%s\n", ok ? "ok  " : "FAIL", name, err, tol,
           why ? ": " : "", why ? why : "");
    test_failures += !ok;
    tg_release(t, ref, got);
    tg_free(t);
}

static void half_out_cases(void)
{
    kiln_dev *d = NULL;
    setenv("KILN_CUDA_INT8_OUT", "fp16", 1);
    if (dev && kiln__dev_open(KILN_DEVICE_CUDA, 0, &d) != KILN_OK)
        d = NULL;
    unsetenv("KILN_CUDA_INT8_OUT");
    if (dev && !d) {
        printf("FAIL INT8 float outputs in FP16: no second device context\n");
        test_checks++;
        test_failures++;
        return;
    }
    tgraph t = tg_new(KILN_OP_DequantizeLinear, 13);
    tg_in(&t, rand_tensor(KILN_DT_INT8, 3, D(2, 33, 8), -128, 128), false);
    tg_in(&t, scalar(F32, 0.05), true);
    tg_in(&t, scalar(KILN_DT_INT8, -3), true);
    tg_outs(&t, 1);
    half_out_case(d, "INT8 DequantizeLinear ->fp16", &t, 1e-3);
    t = qconv_graph(&qconv_specs[5]);   /* 3x3 s2 ->f32 Relu */
    half_out_case(d, "INT8 QLinearConv ->fp16 Relu", &t, 1e-3);
    t = qmm_graph(KILN_DT_INT8, 0, 37, 64, 48, KILN_DT_FLOAT32, 0, true, "");
    half_out_case(d, "INT8 QLinearMatMul ->fp16", &t, 1e-3);
    if (d)
        kiln__dev_close(d);
}

/* The CUDA-core convolutions (direct_specs) */
static void direct_cases(void)
{
    {
        for (size_t i = 0; i < sizeof direct_specs / sizeof *direct_specs; i++) {
            char name[96];
            snprintf(name, sizeof name, "INT8 QLinearConv %s (CUDA cores)", direct_specs[i].p.name);
            tgraph t = qconv_graph_g(&direct_specs[i].p, direct_specs[i].group);
            run_case(name, &t, 0);
        }
        /* a non-linear activation (the epilogue's act_call): the GPU's approximations may move a byte by one step */
        static const qconv_spec dhs = {"", 2, 40, 13, 12, 40, 5, 5, 2, 1, 1, KILN_DT_UINT8, 0, KILN_DT_UINT8, 30, true,
                                       true, "HardSwish", 0};
        tgraph t = qconv_graph_g(&dhs, 40);
        run_case_step("INT8 QLinearConv dw 5x5 HardSwish (CUDA cores)", &t);
    }
}

/* KILN_TEST_GPU_ONLY=int8new: the cases of the kernels first run on a GPU in session 44 (QLookup, the CUDA-core convolutions) */
void int8_new_cases(void)
{
    qlookup_cases();
    direct_cases();
}

/* KILN_TEST_INT8_MODES=wg12,all: only those configurations' passes over the convolution cases (a device call's
 * time on one new kernel); unset: every one */
static bool mode_wanted(const char *mode)
{
    const char *want = getenv("KILN_TEST_INT8_MODES");
    if (!want || !*want)
        return true;
    size_t n = strlen(mode);
    for (const char *p = want; (p = strstr(p, mode)); p += n)
        if ((p == want || p[-1] == ',') && (p[n] == ',' || !p[n]))
            return true;
    return false;
}

void int8_cases(void)
{
    quant_cases();
    qlookup_cases();
    qadd_case("INT8 QLinearAdd", "", 0, 0, 0.03f, 0.05f, 0.04f);
    qadd_case("INT8 QLinearAdd Relu", "Relu", 0, 0, 0.03f, 0.05f, 0.04f);
    qadd_case("INT8 QLinearAdd Clip", "Clip", -0.5f, 3.0f, 0.03f, 0.05f, 0.04f);
    qadd_case("INT8 QLinearAdd ties", "", 0, 0, 0.5f, 0.5f, 1.0f);
    /* every kernel configuration (KILN_CUDA_INT8_CONV, read per run), then the timed choice */
    static const char *const modes[] = {"mma", "wg1", "wg2", "wg3", "wg4",  "wg5", "wg6",
                                        "wg7", "wg8", "wg9", "wg10", "wg11", "wg12", "wg13", "all"};
    const char *keep = getenv("KILN_CUDA_INT8_CONV");
    char *saved = keep ? strdup(keep) : NULL;
    for (size_t m = 0; m < sizeof modes / sizeof *modes; m++) {
        if (!mode_wanted(modes[m]))
            continue;
        setenv("KILN_CUDA_INT8_CONV", modes[m], 1);
        for (size_t i = 0; i < sizeof qconv_specs / sizeof *qconv_specs; i++) {
            char name[96];
            snprintf(name, sizeof name, "INT8 QLinearConv %s (%s)", qconv_specs[i].name, modes[m]);
            tgraph t = qconv_graph(&qconv_specs[i]);
            run_case(name, &t, 0);
        }
    }
    /* more than 65535 row tiles of 128 pixels (8.4 M pixels): the wgmma configurations' launch falls back from the
     * 2-D grid (column tile, row tile) to a 1-D one divided in the kernel (kernels_conv_i8.cu); one configuration of
     * each kind (the others share the launch) */
    static const qconv_spec big = {"", 1, 16, 2899, 2900, 8, 1, 1, 0, 1, 1, KILN_DT_UINT8, 0, KILN_DT_UINT8, 3, true,
                                   true, "Relu", 0};
    static const char *const big_modes[] = {"wg4", "wg7"};
    for (size_t m = 0; m < sizeof big_modes / sizeof *big_modes; m++) {
        if (!mode_wanted(big_modes[m]))
            continue;
        setenv("KILN_CUDA_INT8_CONV", big_modes[m], 1);
        char name[96];
        snprintf(name, sizeof name, "INT8 QLinearConv 8.4M rows 1-D grid (%s)", big_modes[m]);
        tgraph t = qconv_graph(&big);
        run_case(name, &t, 0);
    }
    for (size_t m = 0; m < sizeof modes / sizeof *modes; m++) {
        if (!mode_wanted(modes[m]))
            continue;
        setenv("KILN_CUDA_INT8_CONV", modes[m], 1);
        /* ResNet's block end: Y s8 (no activation) + the block input u8, Relu, into u8; and s8 everywhere */
        static const qconv_spec y8 = {"", 2, 32, 9, 11, 48, 1, 1, 0, 1, 1, KILN_DT_UINT8, 0, KILN_DT_INT8, 0, true,
                                      true, "", 0};
        static const qconv_spec y3 = {"", 1, 48, 12, 13, 64, 3, 3, 1, 2, 1, KILN_DT_UINT8, 0, KILN_DT_INT8, 4, false,
                                      false, "Relu", 0};
        char name[96];
        snprintf(name, sizeof name, "INT8 QLinearConvAdd 1x1 +u8 Relu (%s)", modes[m]);
        tgraph t = qconv_add_graph(&y8, KILN_DT_UINT8, 0, KILN_DT_UINT8, 0, "Relu", 0.45f, 0.7f);
        run_case(name, &t, 0);
        snprintf(name, sizeof name, "INT8 QLinearConvAdd 3x3 s2 +s8 (%s)", modes[m]);
        t = qconv_add_graph(&y3, KILN_DT_INT8, -6, KILN_DT_INT8, 3, "", 0.45f, 0.7f);
        run_case(name, &t, 0);
        /* s8 activations, 40 channels (the residual tile copied in 8-byte pieces), a partial row tile */
        static const qconv_spec y40 = {"", 2, 16, 7, 9, 40, 1, 1, 0, 1, 1, KILN_DT_INT8, 0, KILN_DT_UINT8, 3, true,
                                       true, "", 0};
        snprintf(name, sizeof name, "INT8 QLinearConvAdd s8 K40 +s8 Relu (%s)", modes[m]);
        t = qconv_add_graph(&y40, KILN_DT_INT8, 2, KILN_DT_UINT8, 0, "Relu", 0.45f, 0.7f);
        run_case(name, &t, 0);
        /* A and R at scale 0.5, C at 1: every odd A + R an exact tie, so nearly every group of eight has elements the
         * epilogue's quick rounding declines and divides (kernels_conv_i8.cu q_bytes8) */
        static const qconv_spec yt = {"", 2, 32, 9, 11, 48, 1, 1, 0, 1, 1, KILN_DT_UINT8, 0, KILN_DT_INT8, 3, true,
                                      true, "", 0.5f};
        /* the weight-stationary configurations' residual stages: s8 everywhere, 2 steps (the second half zeros),
         * 2 / 3 filter slices, 190 row tiles */
        static const qconv_spec yw = {"", 2, 96, 110, 110, 144, 1, 1, 0, 1, 1, KILN_DT_INT8, 0, KILN_DT_INT8, 2, true,
                                      true, "", 0};
        snprintf(name, sizeof name, "INT8 QLinearConvAdd 1x1 rows +s8 (%s)", modes[m]);
        t = qconv_add_graph(&yw, KILN_DT_INT8, -2, KILN_DT_INT8, 1, "", 0.45f, 0.7f);
        run_case(name, &t, 0);
        /* the float tail (ResNet-50's last block): a 1x1 GEMM the weight-stationary configurations take, u8 R, Relu;
         * a 3x3 stride-2 layer with s8 R and none */
        snprintf(name, sizeof name, "INT8 QLinearConvAdd 1x1 +u8 Relu ->f32 (%s)", modes[m]);
        t = qconv_add_graph(&y8, KILN_DT_UINT8, 3, F32, 0, "Relu", 0.45f, 0);
        run_case(name, &t, 0);
        snprintf(name, sizeof name, "INT8 QLinearConvAdd 3x3 s2 +s8 ->f32 (%s)", modes[m]);
        t = qconv_add_graph(&y3, KILN_DT_INT8, -6, F32, 0, "", 0.45f, 0);
        run_case(name, &t, 0);
        snprintf(name, sizeof name, "INT8 QLinearConvAdd ties +s8 Relu (%s)", modes[m]);
        t = qconv_add_graph(&yt, KILN_DT_INT8, -1, KILN_DT_UINT8, 2, "Relu", 0.5f, 1.0f);
        run_case(name, &t, 0);
        /* one rounding (kiln_res_once): ResNet's block end into u8 with Relu; s8 stride 2 with none; a Clip; the
         * weight-stationary rows; C's scale 1 and R's 0.5 (odd R an exact tie of the sum wherever t is an integer) */
        static const qconv_spec o8 = {"", 2, 32, 9, 11, 48, 1, 1, 0, 1, 1, KILN_DT_UINT8, 0, KILN_DT_UINT8, 0, true,
                                      true, "Relu", 0.7f};
        static const qconv_spec o3 = {"", 1, 48, 12, 13, 64, 3, 3, 1, 2, 1, KILN_DT_UINT8, 0, KILN_DT_INT8, 3, false,
                                      false, "", 0.7f};
        static const qconv_spec oc = {"", 2, 16, 7, 9, 40, 1, 1, 0, 1, 1, KILN_DT_INT8, 0, KILN_DT_INT8, -2, true,
                                      true, "Clip", 0.05f};
        static const qconv_spec ow = {"", 2, 96, 110, 110, 144, 1, 1, 0, 1, 1, KILN_DT_INT8, 0, KILN_DT_INT8, 1, true,
                                      true, "", 0.7f};
        static const qconv_spec ot = {"", 2, 32, 9, 11, 48, 1, 1, 0, 1, 1, KILN_DT_UINT8, 0, KILN_DT_INT8, 2, true,
                                      true, "Relu", 1.0f};
        static const struct {
            const char *label;
            const qconv_spec *p;
            kiln_dtype rdt;
            int rz;
            float rs;
        } once[] = {{"1x1 +u8 Relu", &o8, KILN_DT_UINT8, 0, 0.45f}, {"3x3 s2 +s8", &o3, KILN_DT_INT8, -6, 0.45f},
                    {"s8 K40 +u8 Clip", &oc, KILN_DT_UINT8, 7, 0.02f}, {"1x1 rows +s8", &ow, KILN_DT_INT8, -2, 0.45f},
                    {"ties +s8 Relu", &ot, KILN_DT_INT8, -1, 0.5f}};
        for (size_t i = 0; i < sizeof once / sizeof *once; i++) {
            snprintf(name, sizeof name, "INT8 QLinearConvAdd once %s (%s)", once[i].label, modes[m]);
            t = qconv_once_graph(once[i].p, once[i].rdt, once[i].rz, once[i].rs);
            run_case(name, &t, 0);
        }
        /* ResNet's layer1 conv3 + residual with many tiles a block (wg12: 1,058 tiles of 128 x 128 over at most 132
         * blocks, so its rings of 6 stages and 4 residual buffers wrap several times and both consumers take many
         * tiles; the last row tile partial) */
        static const qconv_spec om = {"", 4, 64, 130, 130, 256, 1, 1, 0, 1, 1, KILN_DT_UINT8, 0, KILN_DT_UINT8, 0,
                                      true, true, "Relu", 0.7f};
        /* a 3x3 layer with a residual by im2col: 9 taps of 64 channels a tile over 6 stages (with the residual ring),
         * so the stage ring wraps within every tile; 144 tiles over at most 132 blocks (some take two) */
        static const qconv_spec oi = {"", 8, 64, 48, 48, 128, 3, 3, 1, 1, 1, KILN_DT_UINT8, 0, KILN_DT_UINT8, 0,
                                      true, true, "Relu", 0.7f};
        if (!strcmp(modes[m], "wg12") || !strcmp(modes[m], "wg13") || !strcmp(modes[m], "all")) {
            snprintf(name, sizeof name, "INT8 QLinearConvAdd once many tiles (%s)", modes[m]);
            t = qconv_once_graph(&om, KILN_DT_UINT8, 0, 0.45f);
            run_case(name, &t, 0);
            snprintf(name, sizeof name, "INT8 QLinearConvAdd once 3x3 im2col tiles (%s)", modes[m]);
            t = qconv_once_graph(&oi, KILN_DT_UINT8, 0, 0.45f);
            run_case(name, &t, 0);
            snprintf(name, sizeof name, "INT8 QLinearConvAdd 3x3 im2col +s8 (%s)", modes[m]);
            t = qconv_add_graph(&oi, KILN_DT_INT8, -6, KILN_DT_UINT8, 0, "Relu", 0.45f, 0.7f);
            run_case(name, &t, 0);
        }
        /* QLinearConvSum (the block's last 1x1 and its shortcut): ResNet's stride-2 downsample into u8 with Relu; a
         * stride-1 one with s8 activations and 40 channels; a 3x3 main convolution with Clip; many rows and three
         * column tiles with both zero points folded; in the configurations without wgmma, configuration 7 */
        static const qconv_spec s1 = {"", 2, 32, 5, 6, 48, 1, 1, 0, 1, 1, KILN_DT_UINT8, 0, KILN_DT_UINT8, 0, true,
                                      true, "Relu", 0.7f};
        static const qconv_spec s2 = {"", 2, 16, 7, 9, 40, 1, 1, 0, 1, 1, KILN_DT_INT8, 0, KILN_DT_INT8, -4, true,
                                      false, "", 0.7f};
        static const qconv_spec s3 = {"", 1, 48, 12, 13, 64, 3, 3, 1, 1, 1, KILN_DT_UINT8, 0, KILN_DT_INT8, 3, true,
                                      true, "Clip", 0.05f};
        static const qconv_spec s4 = {"", 2, 64, 55, 55, 144, 1, 1, 0, 1, 1, KILN_DT_UINT8, 3, KILN_DT_UINT8, 0, true,
                                      true, "Relu", 0.7f};
        snprintf(name, sizeof name, "INT8 QLinearConvSum 1x1 s2 Relu (%s)", modes[m]);
        t = qconv_sum_graph(&s1, 64, 9, 11, 2, 0, true);
        run_case(name, &t, 0);
        snprintf(name, sizeof name, "INT8 QLinearConvSum s8 K40 s1 (%s)", modes[m]);
        t = qconv_sum_graph(&s2, 32, 7, 9, 1, -3, false);
        run_case(name, &t, 0);
        snprintf(name, sizeof name, "INT8 QLinearConvSum 3x3 s2 Clip (%s)", modes[m]);
        t = qconv_sum_graph(&s3, 32, 24, 25, 2, 0, true);
        run_case(name, &t, 0);
        snprintf(name, sizeof name, "INT8 QLinearConvSum rows zp (%s)", modes[m]);
        t = qconv_sum_graph(&s4, 256, 110, 110, 2, 5, true);
        run_case(name, &t, 0);
        /* ResNet's layer1 block end (64 + 64 -> 256, stride 1) over 1,568 pixels: 13's 128 x 64 tiles (52; "rows
         * zp" above gives its blocks several tiles: 144), one step of x2 then one of the main reduction */
        static const qconv_spec s5 = {"", 2, 64, 28, 28, 256, 1, 1, 0, 1, 1, KILN_DT_UINT8, 0, KILN_DT_UINT8, 0, true,
                                      true, "Relu", 0.7f};
        if (!strcmp(modes[m], "wg12") || !strcmp(modes[m], "wg13") || !strcmp(modes[m], "all")) {
            snprintf(name, sizeof name, "INT8 QLinearConvSum layer1 s1 (%s)", modes[m]);
            t = qconv_sum_graph(&s5, 64, 28, 28, 1, 0, true);
            run_case(name, &t, 0);
        }
        qmm_cases(modes[m]);
    }
    direct_cases();
    half_out_cases();
    stem_pool_cases();   /* the INT8 engines' stem: its pool's quantization in the convolution's kernel */
    if (saved)
        setenv("KILN_CUDA_INT8_CONV", saved, 1);
    else
        unsetenv("KILN_CUDA_INT8_CONV");
    free(saved);
}

/* FusedConvPool on the GPU (kernels_stem.cu, kernels_stem_rows.cu): a stem convolution (7x7 stride 2 pad 3 over
 * <= 4 channels, FP16 / BF16 filter), its max pool (3x3 stride 2 pad 1) and the pool's quantization in one kernel.
 *  - float output (held in the half format): against the CPU's float32 reference within the half-weight cases'
 *    bounds (the GPU rounds the convolution's output to the half format before the pool);
 *  - quantized output (uint8 / int8): every byte is QuantizeLinear's of the GPU's own half value (the float case's
 *    output on the same operands: kernels_int8.cuh's rounding, computed here), and within one step of the CPU's bytes.
 * Sizes: pooled outputs not a multiple of the 7 x 7 tile (partial tiles, the last row and column of the image's
 * padding), 1, 3 and 4 channels, 64 and 128 outputs (two column blocks), Relu and none, several tiles a block; the
 * float32 NCHW input read by the kernel or through the NHWC4 copy, a half channels-last one (after a 1x1 half
 * convolution) through the copy; the MMAs on wgmma and on mma.sync; on Hopper the row kernel (bands of whole rows: a
 * band starting mid-image, the last band short, blocks walking several bands, rows 4-byte and 16-byte copied) and the
 * tiled one (KILN_CUDA_STEM), an image too wide for the row kernel. */
#include "gpu_harness.h"
#include <stdlib.h>
#include <string.h>

static kiln_tensor copy_of(const kiln_tensor *t)
{
    kiln_tensor c = {0};
    if (kiln__tensor_clone(&c, t) != KILN_OK)
        exit(2);
    return c;
}

static kiln_tensor stem_half(kiln_dtype h, int nd, const int64_t *dims, bool round)
{
    kiln_tensor f = rand_tensor(F32, nd, dims, -1, 1);
    if (round) {   /* an activation: float32 values the half format holds */
        round_half(&f, h);
        return f;
    }
    kiln_tensor t;
    if (kiln__tensor_alloc(&t, h, nd, dims) != KILN_OK)
        exit(2);
    for (int64_t i = 0; i < kiln_tensor_numel(&f); i++)
        ((uint16_t *)t.data)[i] = h == KILN_DT_FLOAT16 ? kiln__f32_to_f16(((const float *)f.data)[i])
                                                       : kiln__f32_to_bf16(((const float *)f.data)[i]);
    kiln__tensor_release(&f);
    return t;
}

/* The layer on copies of x, w, b; with a quantization (zdt uint8 / int8) when scale > 0; after a 1x1 half
 * convolution by pre (its output held in the half format, channels-last) unless NULL */
static tgraph stem_graph(const kiln_tensor *x, const kiln_tensor *pre, const kiln_tensor *w, const kiln_tensor *b,
                         bool relu, float scale, kiln_dtype zdt, int zp)
{
    tgraph t = tg_new(pre ? KILN_OP_FusedConv : KILN_OP_FusedConvPool, 1);
    tg_in(&t, copy_of(x), false);
    if (pre) {
        tg_in(&t, copy_of(pre), true);
        tg_then(&t, KILN_OP_FusedConvPool, 1);
    }
    tg_in(&t, copy_of(w), true);
    tg_in(&t, copy_of(b), true);
    if (scale > 0) {
        kiln_tensor s, z;
        if (kiln__tensor_alloc(&s, F32, 0, NULL) != KILN_OK || kiln__tensor_alloc(&z, zdt, 0, NULL) != KILN_OK)
            exit(2);
        *(float *)s.data = scale;
        kiln__set_i64(zdt, z.data, 0, zp);
        tg_in(&t, s, true);
        tg_in(&t, z, true);
    }
    tg_outs(&t, 1);
    attr_ints(&t, "pads", 4, D(3, 3, 3, 3));
    attr_ints(&t, "strides", 2, D(2, 2));
    attr_ints(&t, "kiln_pool_kernel", 2, D(3, 3));
    attr_ints(&t, "kiln_pool_strides", 2, D(2, 2));
    attr_ints(&t, "kiln_pool_pads", 4, D(1, 1, 1, 1));
    if (relu)
        set_act(&t, KILN_FUSED_RELU, 0, 0);
    return t;
}

/* QuantizeLinear's byte of v (ref/k_quant.c: rint(v / s) + z in float32, clamped) */
static int quant1(float v, float s, int z, int lo, int hi)
{
    float r = rintf(v / s) + (float)z;
    if (r != r)
        return 0;
    return r < (float)lo ? lo : r > (float)hi ? hi : (int)r;
}

static void stem_case(kiln_dtype h, const int64_t *xd, int K, bool relu, bool pre)
{
    const char *hn = h == KILN_DT_FLOAT16 ? "FP16" : "BF16";
    double tol = h == KILN_DT_FLOAT16 ? 2e-3 : 1.6e-2;
    kiln_tensor x = stem_half(h, 4, xd, true), w = stem_half(h, 4, D(K, xd[1], 7, 7), false);
    kiln_tensor b = rand_tensor(F32, 1, D(K), -0.5, 0.5), p = {0};
    if (pre)
        p = stem_half(h, 4, D(xd[1], xd[1], 1, 1), false);
    char name[96];
    snprintf(name, sizeof name, "FusedConvPool %s %lldch %lldx%lld K%d%s%s", hn, (long long)xd[1], (long long)xd[2],
             (long long)xd[3], K, relu ? " Relu" : "", pre ? " after a half conv" : "");
    /* the float layer: its GPU output is the half value the quantized layers round */
    tgraph tf = stem_graph(&x, pre ? &p : NULL, &w, &b, relu, 0, KILN_DT_UINT8, 0);
    kiln_tensor fref[1] = {0}, fgot[1] = {0};
    const char *why;
    int r = tg_run_both(dev, name, &tf, fref, fgot, &why);
    if (r == 0) {
        double worst = why ? INFINITY : compare(&fgot[0], &fref[0]);
        bool ok = !why && worst <= tol;
        printf("%s %-28s max rel err %.3g (tol %.1g)%s%s\n", ok ? "ok  " : "FAIL", name, worst, tol, why ? ": " : "",
               why ? why : "");
        test_failures += !ok;
    }
    static const struct { kiln_dtype zdt; int zp; float s; } qs[2] = {{KILN_DT_UINT8, 3, 0.0123f},
                                                                       {KILN_DT_INT8, -5, 0.0271f}};
    for (int k = 0; k < 2 && r >= 0; k++) {
        char qn[112];
        snprintf(qn, sizeof qn, "%s -> %s", name, kiln_dtype_name(qs[k].zdt));
        tgraph tq = stem_graph(&x, pre ? &p : NULL, &w, &b, relu, qs[k].s, qs[k].zdt, qs[k].zp);
        kiln_tensor qref[1] = {0}, qgot[1] = {0};
        int rq = tg_run_both(dev, qn, &tq, qref, qgot, &why);
        if (rq == 0 && r == 0) {
            int lo = qs[k].zdt == KILN_DT_INT8 ? -128 : 0, hi = qs[k].zdt == KILN_DT_INT8 ? 127 : 255;
            int64_t n = kiln_tensor_numel(&qref[0]), own = 0, far = 0;
            bool shaped = !why && fgot[0].data && qgot[0].data && qgot[0].dtype == qs[k].zdt &&
                          kiln_tensor_numel(&qgot[0]) == n && kiln_tensor_numel(&fgot[0]) == n;
            for (int64_t i = 0; shaped && i < n; i++) {
                int64_t g = kiln__get_i64(qs[k].zdt, qgot[0].data, i), c = kiln__get_i64(qs[k].zdt, qref[0].data, i);
                own += g != quant1(((const float *)fgot[0].data)[i], qs[k].s, qs[k].zp, lo, hi);
                far += g - c > 1 || c - g > 1;
            }
            bool ok = shaped && !own && !far;
            printf("%s %-28s %lld bytes not the quantization of the GPU's half values, %lld more than one step from "
                   "the CPU's%s%s\n", ok ? "ok  " : "FAIL", qn, (long long)own, (long long)far, why ? ": " : "",
                   why ? why : "");
            test_failures += !ok;
        }
        tg_release(&tq, qref, qgot);
        tg_free(&tq);
    }
    tg_release(&tf, fref, fgot);
    tg_free(&tf);
    kiln__tensor_release(&x);
    kiln__tensor_release(&w);
    kiln__tensor_release(&b);
    kiln__tensor_release(&p);
}

void stem_pool_cases(void)
{
    /* KILN_CUDA_STEM: the kernel's ways -- on sm_90 the row kernel where it fits (a warpgroup lagging or both in
     * lockstep), else the tiled one (wgmma or mma.sync), the float32 input read by the kernel itself or through the
     * separate half copy (a half input always so, in the tiled kernel) */
    static const char *modes[] = {"", "lock", "tile", "mma", "copy", "mma+copy"};
    const char *keep = getenv("KILN_CUDA_STEM");
    char *saved = keep ? strdup(keep) : NULL;   /* setenv may free what getenv returned */
    for (int m = 0; m < 6; m++) {
        setenv("KILN_CUDA_STEM", modes[m], 1);
        printf("     KILN_CUDA_STEM=%s\n", modes[m][0] ? modes[m] : "(unset)");
        stem_case(KILN_DT_FLOAT16, D(2, 3, 37, 45), 64, true, false);     /* pooled 10 x 12: partial tiles both ways */
        stem_case(KILN_DT_FLOAT16, D(3, 4, 64, 29), 128, false, false);   /* two column blocks, no activation */
        stem_case(KILN_DT_BFLOAT16, D(1, 1, 9, 120), 64, true, false);    /* one channel, pooled 3 x 30 */
        stem_case(KILN_DT_FLOAT16, D(4, 3, 112, 112), 64, true, false);   /* 8 x 8 tiles an image */
        /* 832 tiles: more than a grid's blocks (2 an SM on 132 SMs), so each walks 3-4 (the next halo in flight) */
        stem_case(KILN_DT_FLOAT16, D(13, 3, 224, 224), 64, true, false);
        /* 480 pooled rows of 160 images: the row kernel's blocks walk 2 bands each (3 rows a band, 132 SMs) */
        stem_case(KILN_DT_BFLOAT16, D(160, 1, 9, 24), 64, true, false);
        stem_case(KILN_DT_FLOAT16, D(1, 3, 21, 230), 64, true, false);    /* 115 convolution columns: tiled */
        stem_case(KILN_DT_FLOAT16, D(2, 3, 41, 23), 64, true, true);      /* a half channels-last input */
        stem_case(KILN_DT_BFLOAT16, D(1, 4, 30, 31), 64, false, true);
    }
    if (saved)
        setenv("KILN_CUDA_STEM", saved, 1);
    else
        unsetenv("KILN_CUDA_STEM");
    free(saved);
}

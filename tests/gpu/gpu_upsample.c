/* test_gpu: the upsampling layers (cuda_upsample.c) against the CPU's kernels: Resize in every mode and
 * coordinate transformation PP-OCR and the ONNX tests use (scales and sizes, down- and upsampling, rank 3 and 4,
 * tf_crop_and_resize with extrapolation), Upsample, and ConvTranspose (PP-OCR det's 2x2 / 2 head, groups, output
 * padding, dilations, asymmetric and SAME pads, output_shape, 1-D). */
#include "gpu_harness.h"

/* a constant float32 vector of n values (n = 0: Resize's absent roi / scales) */
static kiln_tensor floats(int n, const float *v)
{
    kiln_tensor t;
    int64_t d = n;
    CHECK(kiln__tensor_alloc(&t, F32, 1, &d) == KILN_OK);
    if (n)
        memcpy(t.data, v, sizeof(float) * (size_t)n);
    return t;
}

typedef struct rz_case {
    const char *name, *mode, *ctm, *nearest;   /* NULL: the attribute's default */
    int nd;
    int64_t x[4];
    float scales[4];   /* used when sizes[0] == 0 */
    int64_t sizes[4];
    const float *roi;  /* 2 * nd values, or NULL */
    float extrap;
    double tol;
} rz_case;

static void resize_case(const rz_case *c)
{
    tgraph t = tg_new(KILN_OP_Resize, 13);
    tg_in(&t, rand_tensor(F32, c->nd, c->x, -1, 1), false);
    tg_in(&t, floats(c->roi ? 2 * c->nd : 0, c->roi), true);
    if (c->sizes[0]) {
        tg_in(&t, floats(0, NULL), true);
        tg_in(&t, ints_tensor(c->nd, c->sizes), true);
    } else {
        tg_in(&t, floats(c->nd, c->scales), true);
    }
    tg_outs(&t, 1);
    kiln_node *n = tg_node(&t);
    if (c->mode)
        kiln__node_set_attr_s(n, "mode", c->mode);
    if (c->ctm)
        kiln__node_set_attr_s(n, "coordinate_transformation_mode", c->ctm);
    if (c->nearest)
        kiln__node_set_attr_s(n, "nearest_mode", c->nearest);
    if (c->extrap)
        kiln__node_set_attr_f(n, "extrapolation_value", c->extrap);
    run_case(c->name, &t, c->tol);
}

static void convt_case(const char *name, int nd, const int64_t *x, const int64_t *w, bool bias, int64_t group,
                       const int64_t *strides, const int64_t *pads, const int64_t *opad, const int64_t *dil,
                       const char *auto_pad, const int64_t *oshape)
{
    int nsp = nd - 2;
    tgraph t = tg_new(KILN_OP_ConvTranspose, 11);
    tg_in(&t, rand_tensor(F32, nd, x, -1, 1), false);
    tg_in(&t, rand_tensor(F32, nd, w, -1, 1), true);
    if (bias)
        tg_in(&t, rand_tensor(F32, 1, D(w[1] * group), -1, 1), true);
    tg_outs(&t, 1);
    kiln__node_set_attr_i(tg_node(&t), "group", group);
    if (strides)
        attr_ints(&t, "strides", nsp, strides);
    if (pads)
        attr_ints(&t, "pads", 2 * nsp, pads);
    if (opad)
        attr_ints(&t, "output_padding", nsp, opad);
    if (dil)
        attr_ints(&t, "dilations", nsp, dil);
    if (oshape)
        attr_ints(&t, "output_shape", nsp, oshape);
    if (auto_pad)
        kiln__node_set_attr_s(tg_node(&t), "auto_pad", auto_pad);
    run_case(name, &t, 1e-5);
}

void upsample_cases(void)
{
    static const float roi[8] = {0, 0, 0.2f, -0.3f, 1, 1, 0.9f, 1.4f};
    static const rz_case rz[] = {
        {"Resize nearest x2 asymmetric floor (PP-OCR)", "nearest", "asymmetric", "floor", 4, {2, 5, 7, 9},
         {1, 1, 2, 2}, {0}, NULL, 0, 0},
        {"Resize nearest sizes half_pixel", "nearest", NULL, NULL, 4, {1, 3, 10, 13}, {0}, {1, 3, 17, 8}, NULL, 0, 0},
        {"Resize nearest x4 rank 3 round_prefer_ceil", "nearest", "tf_half_pixel_for_nn", "round_prefer_ceil", 3,
         {3, 6, 10}, {1, 1, 4}, {0}, NULL, 0, 0},
        {"Resize linear half_pixel 1.7 x 0.6", "linear", NULL, NULL, 4, {2, 3, 11, 14}, {1, 1, 1.7f, 0.6f}, {0}, NULL,
         0, 1e-6},
        {"Resize linear align_corners sizes", "linear", "align_corners", NULL, 4, {2, 3, 5, 8}, {0}, {2, 3, 9, 21},
         NULL, 0, 1e-6},
        {"Resize linear rank 3 pytorch_half_pixel", "linear", "pytorch_half_pixel", NULL, 3, {3, 6, 10},
         {1, 1.5f, 2}, {0}, NULL, 0, 1e-6},
        {"Resize cubic 2.5 x 1.5", "cubic", "pytorch_half_pixel", NULL, 4, {1, 2, 7, 9}, {1, 1, 2.5f, 1.5f}, {0},
         NULL, 0, 1e-5},
        {"Resize tf_crop_and_resize extrapolation", "linear", "tf_crop_and_resize", NULL, 4, {1, 3, 9, 8}, {0},
         {1, 3, 7, 11}, roi, 7.5f, 1e-6},
    };
    for (size_t i = 0; i < sizeof rz / sizeof *rz; i++)
        resize_case(&rz[i]);
    tgraph t = tg_new(KILN_OP_Upsample, 9);
    tg_in(&t, RT(4, 2, 3, 5, 6), false);
    tg_in(&t, floats(4, (const float[]){1, 1, 2, 3}), true);
    tg_outs(&t, 1);
    run_case("Upsample nearest 2 x 3", &t, 0);

    convt_case("ConvTranspose 2x2 s2 bias (PP-OCR det)", 4, D(2, 24, 9, 11), D(24, 24, 2, 2), true, 1, D(2, 2), NULL,
               NULL, NULL, NULL, NULL);
    convt_case("ConvTranspose 3x3 s2 p1 opad 1 group 2", 4, D(2, 6, 5, 7), D(6, 4, 3, 3), true, 2, D(2, 2),
               D(1, 1, 1, 1), D(1, 1), NULL, NULL, NULL);
    convt_case("ConvTranspose d2 s(1,2) asymmetric pads", 4, D(1, 5, 6, 4), D(5, 3, 3, 2), false, 1, D(1, 2),
               D(0, 1, 2, 0), NULL, D(2, 2), NULL, NULL);
    convt_case("ConvTranspose SAME_UPPER s2", 4, D(1, 4, 5, 5), D(4, 2, 3, 3), true, 1, D(2, 2), NULL, NULL, NULL,
               "SAME_UPPER", NULL);
    convt_case("ConvTranspose output_shape", 4, D(1, 2, 4, 4), D(2, 3, 3, 3), false, 1, D(2, 2), NULL, NULL, NULL,
               NULL, D(9, 10));
    convt_case("ConvTranspose 1-D s2 group 3", 3, D(2, 3, 11), D(3, 2, 3), true, 3, D(2), NULL, NULL, NULL, NULL,
               NULL);
}

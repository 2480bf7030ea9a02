/* Scalar references of FP8 layers shared by the FP8 calibration tests (test_calib_bias.c,
 * test_calib_wq.c): E4M3 rounding with a scale, the weight quantized as the fp8 layers store it
 * (per output channel or per tensor, amax / 448), and direct 2-D convolution / GEMM in double. */
#ifndef KILN_TEST_FP8_REF_H
#define KILN_TEST_FP8_REF_H
#include "core/numfmt.h"
#include "test.h"
#include "test_graph.h"
#include <string.h>

static inline float test_fp8(float x, float s)
{
    return kiln__fp8_to_f32(KILN_DT_FP8E4M3, kiln__f32_to_fp8(KILN_DT_FP8E4M3, x / s, true)) * s;
}

/* W quantized as the fp8 layers store it (PRECISION.md, "FP8 layers"): one scale amax / 448 per
 * output channel (a row of rows x k, or a column of a [k, rows] weight when kn), or one for the
 * whole tensor when tensor. */
static inline float *test_wq_of(const kiln_tensor *w, int64_t rows, bool kn, bool tensor)
{
    int64_t n = kiln_tensor_numel(w), k = n / rows;
    const float *x = w->data;
    float *y = kiln__malloc(sizeof(float) * (size_t)n), all = 0;
    for (int64_t i = 0; i < n; i++)
        all = fmaxf(all, fabsf(x[i]));
    for (int64_t r = 0; r < rows; r++) {
        float amax = 0;
        for (int64_t i = 0; i < k; i++)
            amax = fmaxf(amax, fabsf(x[kn ? i * rows + r : r * k + i]));
        for (int64_t i = 0; i < k; i++)
            y[kn ? i * rows + r : r * k + i] = test_fp8(x[kn ? i * rows + r : r * k + i], (tensor ? all : amax) / 448.0f);
    }
    return y;
}

/* A list attribute of ints on node i of g. */
static inline void test_set_ints(kiln_graph *g, int i, const char *name, int n, const int64_t *v)
{
    CHECK(kiln__node_set_attr_i(&g->nodes[i], name, 0) == KILN_OK);
    kiln_attr *a = (kiln_attr *)kiln__attr(&g->nodes[i], name);
    a->type = KILN_ATTR_INTS;
    a->n = n;
    a->ints = kiln__malloc(sizeof(int64_t) * (size_t)n);
    memcpy(a->ints, v, sizeof(int64_t) * (size_t)n);
}

typedef struct test_geo {
    int64_t grp, sh, sw, pads[4], dh, dw;
} test_geo;

static inline int64_t test_conv_dim(int64_t in, int64_t k, int64_t pb, int64_t pe, int64_t d, int64_t s)
{
    return (in + pb + pe - d * (k - 1) - 1) / s + 1;
}

/* y[n, m, oh, ow] = conv(x, w) (no bias; x rounded with s when s > 0), in double; returns the
 * number of output positions per channel (N * OH * OW). y may be NULL: only the count. */
static inline double test_conv_out(const kiln_tensor *x, const float *w, const int64_t *wd, const test_geo *q, float s,
                                   double *y)
{
    int64_t N = x->dims[0], C = x->dims[1], H = x->dims[2], W = x->dims[3], M = wd[0], Cg = wd[1], KH = wd[2], KW = wd[3];
    int64_t OH = test_conv_dim(H, KH, q->pads[0], q->pads[2], q->dh, q->sh);
    int64_t OW = test_conv_dim(W, KW, q->pads[1], q->pads[3], q->dw, q->sw);
    const float *xd = x->data;
    for (int64_t n = 0; y && n < N; n++)
        for (int64_t m = 0; m < M; m++)
            for (int64_t oh = 0; oh < OH; oh++)
                for (int64_t ow = 0; ow < OW; ow++) {
                    double acc = 0;
                    for (int64_t c = 0; c < Cg; c++)
                        for (int64_t kh = 0; kh < KH; kh++)
                            for (int64_t kw = 0; kw < KW; kw++) {
                                int64_t ih = oh * q->sh - q->pads[0] + kh * q->dh, iw = ow * q->sw - q->pads[1] + kw * q->dw;
                                if (ih < 0 || ih >= H || iw < 0 || iw >= W)
                                    continue;
                                int64_t ci = m / (M / q->grp) * Cg + c;
                                float v = xd[((n * C + ci) * H + ih) * W + iw];
                                acc += (double)w[((m * Cg + c) * KH + kh) * KW + kw] * (s > 0 ? test_fp8(v, s) : v);
                            }
                    y[((n * M + m) * OH + oh) * OW + ow] = acc;
                }
    return (double)(N * OH * OW);
}

/* y[r, n] = alpha * (x B)[r, n] (x rounded with s when s > 0; B [K, N], or [N, K] when tb), in
 * double; returns the rows of x. */
static inline double test_gemm_out(const kiln_tensor *x, const float *b, int64_t K, int64_t N, bool tb, float alpha,
                                   float s, double *y)
{
    int64_t rows = kiln_tensor_numel(x) / K;
    const float *xd = x->data;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t n = 0; n < N; n++) {
            double acc = 0;
            for (int64_t k = 0; k < K; k++) {
                float v = xd[r * K + k];
                acc += (double)b[tb ? n * K + k : k * N + n] * (s > 0 ? test_fp8(v, s) : v);
            }
            y[r * N + n] = alpha * acc;
        }
    return (double)rows;
}

#endif

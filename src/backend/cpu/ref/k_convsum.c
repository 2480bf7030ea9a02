/* FusedConvSum(X, X2, W, B?) = act(Conv(X, W1) + Conv(X2, W2, strides) + B), kiln's op for a residual block whose
 * shortcut is a 1x1 convolution (ResNet's downsample, passes/p_shortcut.c): both convolutions 1x1, unpadded,
 * undilated, one group; W = [W1 | W2] is [M, C1 + C2, 1...] (W1's C1 columns, then W2's C2), X [N, C1, spatial]
 * gives the output's spatial size, X2 [N, C2, spatial2] is read at the strides (attribute "strides" of X2's
 * convolution; X's is 1). One GEMM per image over the stacked K, W x [X ; X2 subsampled] (kiln_gemm.B2), with the
 * bias and the activation in its tile stores: the shortcut's output is never written. float32 only. */
#include "../../kernel.h"
#include "../conv.h"
#include "../cpu_kernels.h"
#include "../epilogue.h"
#include "../gemm.h"
#include "../scratch.h"

typedef int64_t (*gather2_fn)(float *dst, const float *src, int64_t n, int64_t avail);

/* The geometry FusedConvSum takes (checked against its inputs). */
typedef struct sum_geom {
    int64_t N, C1, C2, M, H, W, H2, W2, sh, sw;
} sum_geom;

static kiln_status sum_setup(const kiln_kctx *ctx, const kiln_tensor *x, const kiln_tensor *x2,
                             const kiln_tensor *w, const kiln_tensor *b, sum_geom *g)
{
    int nd = x->ndim;
    if (nd < 3 || nd > 4 || x2->ndim != nd || w->ndim != nd)
        return kiln__kerr(ctx, KILN_ERR_SHAPE, "X, X2 and W must all be 3-D or 4-D (ranks %d, %d, %d)", x->ndim,
                          x2->ndim, w->ndim);
    *g = (sum_geom){.N = x->dims[0], .C1 = x->dims[1], .C2 = x2->dims[1], .M = w->dims[0], .H = 1, .H2 = 1,
                    .W = x->dims[nd - 1], .W2 = x2->dims[nd - 1], .sh = 1, .sw = 1};
    if (nd == 4) {
        g->H = x->dims[2];
        g->H2 = x2->dims[2];
    }
    const int64_t *s;
    int ns = kiln__attr_ints(ctx->node, "strides", &s);
    if (ns >= 0 && ns != nd - 2)
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "strides has %d values, expected %d", ns, nd - 2);
    if (ns > 0) {
        g->sw = s[ns - 1];
        g->sh = ns == 2 ? s[0] : 1;
    }
    if (g->sh < 1 || g->sw < 1)
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "strides must be positive");
    int np = kiln__attr_ints(ctx->node, "pads", &s);
    for (int i = 0; i < np; i++)
        if (s[i] != 0)
            return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "FusedConvSum takes no padding");
    if (kiln__attr_i(ctx->node, "group", 1) != 1)
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "FusedConvSum takes one group");
    bool ok = x2->dims[0] == g->N && w->dims[1] == g->C1 + g->C2;
    for (int d = 2; d < nd; d++)
        ok = ok && w->dims[d] == 1;
    /* X2's 1x1 convolution at the strides, unpadded, gives X's spatial size */
    ok = ok && (g->H == 0 ? g->H2 == 0 : g->H2 >= 1 && (g->H2 - 1) / g->sh + 1 == g->H);
    ok = ok && (g->W == 0 ? g->W2 == 0 : g->W2 >= 1 && (g->W2 - 1) / g->sw + 1 == g->W);
    if (!ok)
        return kiln__kerr(ctx, KILN_ERR_SHAPE, "X, X2 and W do not fit (W must be [M, C1 + C2, 1...], X2's "
                          "strided 1x1 output X's size)");
    if (b && (b->dtype != KILN_DT_FLOAT32 || kiln_tensor_numel(b) != g->M))
        return kiln__kerr(ctx, KILN_ERR_SHAPE, "B must be float32 with M = %lld elements", (long long)g->M);
    return KILN_OK;
}

kiln_status kiln__fused_conv_sum(kiln_kctx *ctx, gather2_fn gather2)
{
    const kiln_tensor *x = kiln__kin(ctx, 0), *x2 = kiln__kin(ctx, 1), *w = kiln__kin(ctx, 2), *b = kiln__kin(ctx, 3);
    if (!x || !x2 || !w)
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "missing input X, X2 or W");
    if (x->dtype != KILN_DT_FLOAT32 || x2->dtype != KILN_DT_FLOAT32 || w->dtype != KILN_DT_FLOAT32)
        return kiln__kerr(ctx, KILN_ERR_DTYPE, "FusedConvSum is float32 only");
    sum_geom g = {0};
    KILN_TRY(sum_setup(ctx, x, x2, w, b, &g));
    kiln_act act;
    KILN_TRY(kiln__act_from_node(ctx, &act));
    int64_t dims[KILN_MAX_DIMS];
    memcpy(dims, x->dims, sizeof(int64_t) * (size_t)x->ndim);
    dims[1] = g.M;
    KILN_TRY(kiln__kout_uninit(ctx, 0, KILN_DT_FLOAT32, x->ndim, dims));
    const int64_t S = g.H * g.W, S2 = g.H2 * g.W2, K = g.C1 + g.C2;
    if (g.N == 0 || g.M == 0 || S == 0)
        return KILN_OK;
    const bool strided = g.sh != 1 || g.sw != 1;
    float *sub = NULL;
    if (strided && g.C2 > 0) {
        sub = kiln__scratch(KILN_SCRATCH_CONV, (size_t)(g.C2 * S) * sizeof(float));
        if (!sub)
            return kiln__kerr(ctx, KILN_ERR_NOMEM, "out of memory (subsampled X2 of %lld elements)",
                              (long long)(g.C2 * S));
    }
    kiln_epi e = {.bias = b ? b->data : NULL, .row_bias = true, .act = act};
    float *y = ctx->out[0]->data;
    for (int64_t n = 0; n < g.N; n++) {
        const float *x2n = (const float *)x2->data + n * g.C2 * S2;
        if (sub)
            kiln__conv_subsample(ctx->pool, ctx->nthreads, x2n, g.C2, g.H2, g.W2, g.sh, g.sw, g.H, g.W, sub, gather2);
        kiln_gemm gm = {.M = g.M, .N = S, .K = K, .alpha = 1.0f, .beta = 0.0f, .A = w->data, .lda = K,
                        .B = (const float *)x->data + n * g.C1 * S, .ldb = S, .B2 = sub ? sub : x2n, .kb2 = g.C1,
                        .C = y + n * g.M * S, .ldc = S, .epi = &e};
        kiln__sgemm_ex(ctx->pool, ctx->nthreads, &gm);
    }
    return KILN_OK;
}

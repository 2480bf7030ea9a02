/* Normalization and pooling layers on the GPU: Softmax, LayerNormalization, MaxPool / AveragePool
 * (2-D), GlobalAveragePool; and the window geometry shared with Conv (cuda_conv.c). */
#include "cuda_internal.h"
#include <math.h>

#define IN(i) (i < ctx->n_in ? ctx->in[i] : NULL)

/* x in the layer's activation storage (a copy in tmp when converted); its kernel code in *fdt */
static kiln_status act_in(cu_be *b, kiln_kctx *ctx, const kiln_tensor **x, kiln_tensor *tmp, int *fdt)
{
    kiln_dtype sdt = cu_act_sdt(b, ctx, 1u);
    *fdt = cu_fdt(sdt);
    return cu_as(b, *x, sdt, tmp, x);
}

/* Scale / bias input as float32 (LayerNorm's kernels read them so). */
static kiln_status f32_in(cu_be *b, const kiln_tensor **x, kiln_tensor *tmp)
{
    return cu_as(b, *x, KILN_DT_FLOAT32, tmp, x);
}

kiln_status cu_geometry(cu_be *b, const kiln_kctx *ctx, const kiln_tensor *x, const int64_t *kernel, bool ceil_ok,
                        cu_geom *g)
{
    memset(g, 0, sizeof *g);
    int nsp = g->nsp = x->ndim - 2;
    if (nsp < 1 || nsp > 3)
        return cu_kerr(b, ctx, KILN_ERR_UNSUPPORTED, "%d spatial dims", nsp);
    const kiln_node *n = ctx->node;
    const int64_t *v;
    int c;
    const char *ap = b->host->attr_s(n, "auto_pad", "NOTSET");
    if (!ap[0])
        ap = "NOTSET";
    bool same = !strcmp(ap, "SAME_UPPER") || !strcmp(ap, "SAME_LOWER");
    if (!same && strcmp(ap, "NOTSET") && strcmp(ap, "VALID"))
        return cu_kerr(b, ctx, KILN_ERR_INVALID_ARG, "unknown auto_pad '%s'", ap);
    bool ceil_mode = ceil_ok && b->host->attr_i(n, "ceil_mode", 0) != 0;
    int64_t pads[6] = {0};
    if ((c = b->host->attr_ints(n, "pads", &v)) >= 0) {
        if (c != 2 * nsp)
            return cu_kerr(b, ctx, KILN_ERR_INVALID_ARG, "pads has %d entries", c);
        memcpy(pads, v, sizeof(int64_t) * (size_t)c);
    }
    for (int i = 0; i < nsp; i++) {
        g->k[i] = kernel[i];
        g->s[i] = g->d[i] = 1;
    }
    if ((c = b->host->attr_ints(n, "strides", &v)) >= 0) {
        if (c != nsp)
            return cu_kerr(b, ctx, KILN_ERR_INVALID_ARG, "strides has %d entries", c);
        memcpy(g->s, v, sizeof(int64_t) * (size_t)c);
    }
    if ((c = b->host->attr_ints(n, "dilations", &v)) >= 0) {
        if (c != nsp)
            return cu_kerr(b, ctx, KILN_ERR_INVALID_ARG, "dilations has %d entries", c);
        memcpy(g->d, v, sizeof(int64_t) * (size_t)c);
    }
    for (int i = 0; i < nsp; i++) {
        int64_t in = x->dims[2 + i], effk = (g->k[i] - 1) * g->d[i] + 1;
        if (g->k[i] < 1 || g->s[i] < 1 || g->d[i] < 1 || pads[i] < 0 || pads[nsp + i] < 0)
            return cu_kerr(b, ctx, KILN_ERR_INVALID_ARG, "bad kernel / stride / dilation / pad");
        if (same) {
            int64_t o = (in + g->s[i] - 1) / g->s[i], tot = (o - 1) * g->s[i] + effk - in;
            tot = tot < 0 ? 0 : tot;
            g->pb[i] = !strcmp(ap, "SAME_UPPER") ? tot / 2 : tot - tot / 2;
            g->pe[i] = tot - g->pb[i];
            g->out[i] = o;
            continue;
        }
        if (strcmp(ap, "VALID")) {
            g->pb[i] = pads[i];
            g->pe[i] = pads[nsp + i];
        }
        int64_t span = in + g->pb[i] + g->pe[i] - effk;
        if (span < 0)
            return cu_kerr(b, ctx, KILN_ERR_SHAPE, "kernel larger than the padded input");
        int64_t o = (ceil_mode ? (span + g->s[i] - 1) / g->s[i] : span / g->s[i]) + 1;
        if (ceil_mode && o > 1 && (o - 1) * g->s[i] >= in + g->pb[i])
            o--;
        g->out[i] = o;
    }
    return KILN_OK;
}

/* ---- Softmax */

static kiln_status k_softmax(cu_be *b, kiln_kctx *ctx)
{
    const kiln_tensor *x = IN(0);
    bool legacy = ctx->node->opset < 13;
    int axis;
    if (!x || !cu_axis(b->host->attr_i(ctx->node, "axis", legacy ? 1 : -1), x->ndim, &axis))
        return cu_kerr(b, ctx, KILN_ERR_INVALID_ARG, "bad axis");
    kiln_tensor tmp;
    int fdt;
    kiln_status st = act_in(b, ctx, &x, &tmp, &fdt);
    if (st == KILN_OK)
        st = cu_out_like(b, ctx, 0, x, x->ndim, x->dims);
    if (st != KILN_OK) {
        cu_tmp_free(b, &tmp);
        return st;
    }
    kiln_tensor *y = ctx->out[0];
    int64_t outer = 1, len = 1, inner = 1;
    for (int d = 0; d < x->ndim; d++) {
        if (d < axis)
            outer *= x->dims[d];
        else if (d == axis || legacy)
            len *= x->dims[d];
        else
            inner *= x->dims[d];
    }
    if (inner == 1)
        st = cu_check(b, cuk_softmax_rows(fdt, x->data, y->data, outer, len, b->stream), "softmax");
    else
        st = cu_check(b, cuk_softmax_strided(fdt, x->data, y->data, outer, len, inner, b->stream), "softmax");
    cu_tmp_free(b, &tmp);
    return st;
}

/* ---- LayerNormalization (Mean / InvStdDev outputs not produced on the GPU) */

static bool sup_layernorm(const kiln_bk_query *q)
{
    for (int o = 1; o < q->node->n_out; o++)
        if (q->node->out[o] >= 0)
            return false;
    return cu_q_f32(q, 7u);
}

static kiln_status layernorm_run(cu_be *b, kiln_kctx *ctx, const kiln_tensor *x, const kiln_tensor *sc,
                                 const kiln_tensor *bias, int fdt, int64_t rows, int64_t cols)
{
    KILN_TRY(cu_out_like(b, ctx, 0, x, x->ndim, x->dims));
    kiln_tensor *y = ctx->out[0];
    float eps = b->host->attr_f(ctx->node, "epsilon", 1e-5f), fs = 0;
    uint8_t *fq = cu_fp8_feed(b, ctx, y, &fs);   /* BERT: the next Q / K / V or FFN1 FP8 GEMMs' input */
    kiln_status st = cu_check(b, cuk_layernorm(fdt, x->data, sc->data, bias ? bias->data : NULL, y->data, rows, cols,
                                               eps, fq, fs, b->stream), "layernorm");
    if (st == KILN_OK && fq)
        cu_fp8_fed(b, y, fs);
    return st;
}

static bool acc_layernorm(cu_be *b, const kiln_node *n, int n_in, const kiln_tensor *const *in)
{
    (void)b;
    (void)n;
    if (n_in < 2 || !in[0] || !in[1] || in[0]->ndim < 1)
        return false;
    /* Scale and B must hold exactly the normalized block (axis resolved at run time: last dims) */
    int64_t last = 1;
    for (int d = in[0]->ndim - 1; d >= 0; d--) {
        last *= in[0]->dims[d];
        if (cu_numel(in[1]) == last)
            return n_in < 3 || !in[2] || cu_numel(in[2]) == last;
    }
    return false;
}

static kiln_status k_layernorm(cu_be *b, kiln_kctx *ctx)
{
    const kiln_tensor *x = IN(0), *sc = IN(1), *bias = IN(2);
    int axis;
    if (!x || !sc || !cu_axis(b->host->attr_i(ctx->node, "axis", -1), x->ndim, &axis))
        return cu_kerr(b, ctx, KILN_ERR_INVALID_ARG, "bad inputs or axis");
    int64_t rows = 1, cols = 1;
    for (int d = 0; d < x->ndim; d++)
        *(d < axis ? &rows : &cols) *= x->dims[d];
    if (cu_numel(sc) != cols || (bias && cu_numel(bias) != cols))
        return cu_kerr(b, ctx, KILN_ERR_SHAPE, "Scale / B must have the normalized block's %lld elements",
                       (long long)cols);
    kiln_tensor tmp[3];
    int fdt;
    memset(tmp, 0, sizeof tmp);
    kiln_status st = act_in(b, ctx, &x, &tmp[0], &fdt);
    if (st == KILN_OK)
        st = f32_in(b, &sc, &tmp[1]);
    if (st == KILN_OK)
        st = f32_in(b, &bias, &tmp[2]);
    if (st == KILN_OK)
        st = layernorm_run(b, ctx, x, sc, bias, fdt, rows, cols);
    for (int i = 0; i < 3; i++)
        cu_tmp_free(b, &tmp[i]);
    return st;
}

/* ---- pooling */

static bool sup_pool(const kiln_bk_query *q)
{
    if (q->node->n_out > 1 && q->node->out[1] >= 0)
        return false;   /* MaxPool's Indices */
    return cu_q_f32(q, 1u);
}

static bool acc_pool2d(cu_be *b, const kiln_node *n, int n_in, const kiln_tensor *const *in)
{
    (void)b;
    (void)n;
    return n_in >= 1 && in[0] && in[0]->ndim == 4;
}

static kiln_status k_pool(cu_be *b, kiln_kctx *ctx)
{
    const kiln_tensor *x = IN(0);
    const int64_t *kv;
    int nk = b->host->attr_ints(ctx->node, "kernel_shape", &kv);
    if (!x || x->ndim != 4 || nk != 2)
        return cu_kerr(b, ctx, KILN_ERR_UNSUPPORTED, "only 2-D pooling with kernel_shape");
    cu_geom g;
    KILN_TRY(cu_geometry(b, ctx, x, kv, true, &g));
    int64_t dims[4] = {x->dims[0], x->dims[1], g.out[0], g.out[1]};
    kiln_tensor tmp;
    int fdt;
    kiln_status st = act_in(b, ctx, &x, &tmp, &fdt);
    if (st == KILN_OK)
        st = cu_out_like(b, ctx, 0, x, 4, dims);
    if (st != KILN_OK) {
        cu_tmp_free(b, &tmp);
        return st;
    }
    if (cu_is_nhwc(x))   /* channels-last in, channels-last out */
        ctx->out[0]->flags |= KILN_TENSOR_DEV_NHWC;
    kiln_tensor *y = ctx->out[0];
    cuk_pool p = {.kind = ctx->node->op == KILN_OP_MaxPool ? 0 : 1, .nc = x->dims[0] * x->dims[1], .h = x->dims[2],
                  .w = x->dims[3], .oh = g.out[0], .ow = g.out[1], .kh = (int)g.k[0], .kw = (int)g.k[1],
                  .sh = (int)g.s[0], .sw = (int)g.s[1], .ph = (int)g.pb[0], .pw = (int)g.pb[1], .dh = (int)g.d[0],
                  .dw = (int)g.d[1], .peh = (int)g.pe[0], .pew = (int)g.pe[1],
                  .count_include_pad = b->host->attr_i(ctx->node, "count_include_pad", 0) != 0,
                  .c = cu_is_nhwc(x) ? x->dims[1] : 0};
    float fs = 0;   /* ResNet's stem pool: the E4M3 input of the first block's FP8 convolutions */
    uint8_t *fq = cuk_pool2d_feeds(fdt, &p, x->data, y->data) ? cu_fp8_feed(b, ctx, y, &fs) : NULL;
    st = cu_check(b, cuk_pool2d(fdt, &p, x->data, y->data, fq, fs, b->stream), "pool");
    if (st == KILN_OK && fq)
        cu_fp8_fed(b, y, fs);
    cu_tmp_free(b, &tmp);
    return st;
}

static bool acc_gap(cu_be *b, const kiln_node *n, int n_in, const kiln_tensor *const *in)
{
    (void)b;
    (void)n;
    return n_in >= 1 && in[0] && in[0]->ndim >= 3;
}

static kiln_status k_gap(cu_be *b, kiln_kctx *ctx)
{
    const kiln_tensor *x = IN(0);
    if (!x || x->ndim < 3)
        return cu_kerr(b, ctx, KILN_ERR_SHAPE, "input must have rank >= 3");
    int64_t dims[KILN_MAX_DIMS], hw = 1;
    for (int d = 0; d < x->ndim; d++) {
        dims[d] = d < 2 ? x->dims[d] : 1;
        if (d >= 2)
            hw *= x->dims[d];
    }
    kiln_tensor tmp;
    int fdt;
    kiln_status st = act_in(b, ctx, &x, &tmp, &fdt);
    if (st == KILN_OK)
        st = cu_out_like(b, ctx, 0, x, x->ndim, dims);
    kiln_tensor *y = ctx->out[0];
    if (st == KILN_OK && !hw)
        st = cu_check(b, cuk_fill(fdt, y->data, cu_numel(y), NAN, b->stream), "fill");
    else if (st == KILN_OK && cu_is_nhwc(x)) {   /* [N, C, 1, 1] is the same in either layout */
        void *part = NULL;
        st = cu_alloc(b, cuk_global_avgpool_nhwc_scratch(x->dims[0], x->dims[1], hw), &part);
        if (st == KILN_OK)
            st = cu_check(b, cuk_global_avgpool_nhwc(fdt, x->data, y->data, x->dims[0], x->dims[1], hw, part, b->stream),
                          "pool");
        if (part)
            cu_free(b, part);
    } else if (st == KILN_OK)
        st = cu_check(b, cuk_global_avgpool(fdt, x->data, y->data, x->dims[0] * x->dims[1], hw, b->stream), "pool");
    cu_tmp_free(b, &tmp);
    return st;
}

static bool sup_f32(const kiln_bk_query *q) { return cu_q_f32(q, 1u); }

const cu_op cu_ops_nn[] = {
    {KILN_OP_Softmax, k_softmax, sup_f32, NULL, 0},
    {KILN_OP_LayerNormalization, k_layernorm, sup_layernorm, acc_layernorm, 0},
    {KILN_OP_MaxPool, k_pool, sup_pool, acc_pool2d, 0},
    {KILN_OP_AveragePool, k_pool, sup_pool, acc_pool2d, 0},
    {KILN_OP_GlobalAveragePool, k_gap, sup_f32, acc_gap, 0},
    {KILN_OP_COUNT, NULL, NULL, NULL, 0},
};

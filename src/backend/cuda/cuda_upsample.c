/* A decoder's upsampling layers on the GPU: Resize / Upsample and ConvTranspose (kernels_upsample.cu).
 * Their geometry is the CPU kernels' own (host services resize_plan / convt_geom, backend/layer_geom.h):
 * a Resize's per-axis tap tables are built on the host once per input shape and scales / sizes, uploaded,
 * and kept as the layer's state; a ConvTranspose's output size and pads are read each run. Both take
 * float32 or half storage, NCHW or NHWC. */
#include "cuda_internal.h"
#include <stdlib.h>
#include <string.h>

#define IN(i) (i < ctx->n_in ? ctx->in[i] : NULL)

/* logical (n, c, h, w) element strides of a 4-D tensor of dims d, NCHW or NHWC */
static void strides4(const int64_t *d, bool nhwc, int64_t *s)
{
    if (nhwc) {
        s[1] = 1;
        s[3] = d[1];
        s[2] = d[1] * d[3];
        s[0] = d[1] * d[2] * d[3];
    } else {
        s[3] = 1;
        s[2] = d[3];
        s[1] = d[2] * d[3];
        s[0] = d[1] * d[2] * d[3];
    }
}

/* ---- Resize / Upsample */

typedef struct rz_state {
    void *dev;                /* the tables: per axis int32 indices, float weights, outside flags */
    cuk_resize_args p;             /* with device pointers into dev; dims, strides and nhwc set per run */
    int ndim;
    int64_t ydims[KILN_MAX_DIMS];
} rz_state;

static void rz_state_free(void *p)
{
    rz_state *s = p;
    if (s->dev)
        cudaFree(s->dev);
    free(s);
}

/* FNV-1a over the bytes of the host inputs 1..3 (roi, scales, sizes): part of the state's key */
static int64_t host_inputs_hash(const kiln_kctx *ctx)
{
    uint64_t h = 1469598103934665603ull;
    for (int i = 1; i < ctx->n_in && i < 4; i++) {
        const kiln_tensor *t = ctx->in[i];
        h = (h ^ (uint64_t)(t ? t->nbytes + 1 : 0)) * 1099511628211ull;
        for (size_t k = 0; t && t->data && k < t->nbytes; k++)
            h = (h ^ ((const uint8_t *)t->data)[k]) * 1099511628211ull;
    }
    return (int64_t)(h >> 1);
}

/* The tables of plan pl (rank <= 4, padded in front to 4 axes) in one device block */
static kiln_status rz_upload(cu_be *b, const kiln_kctx *ctx, const kiln_resize_plan *pl, rz_state *s)
{
    int off = 4 - pl->ndim;
    size_t bytes = 0, at[4][3];
    for (int d = 0; d < 4; d++) {
        const kiln_resize_axis *a = d >= off ? &pl->ax[d - off] : NULL;
        int64_t out = a ? a->out : 1, nt = a ? a->ntaps : 1;
        if (a && a->in > INT32_MAX)
            return cu_kerr(b, ctx, KILN_ERR_UNSUPPORTED, "axis %d has more than 2^31 elements", d - off);
        at[d][0] = bytes;
        bytes += (size_t)(out * nt) * sizeof(int32_t);
        at[d][1] = bytes;
        bytes += (size_t)(out * nt) * sizeof(float);
        at[d][2] = bytes;
        bytes += a && a->any_outside ? (size_t)out : 0;
        bytes = (bytes + 15) & ~(size_t)15;
    }
    uint8_t *host = malloc(bytes ? bytes : 1);
    if (!host)
        return cu_err(b, KILN_ERR_NOMEM, "out of memory");
    for (int d = 0; d < 4; d++) {
        const kiln_resize_axis *a = d >= off ? &pl->ax[d - off] : NULL;
        int64_t n = a ? a->out * a->ntaps : 1;
        int32_t *ix = (int32_t *)(host + at[d][0]);
        float *w = (float *)(host + at[d][1]);
        for (int64_t k = 0; k < n; k++) {
            ix[k] = a ? (int32_t)a->idx[k] : 0;
            w[k] = a ? a->w[k] : 1.0f;
        }
        if (a && a->any_outside)
            memcpy(host + at[d][2], a->outside, (size_t)a->out);
    }
    kiln_status st = cu_check(b, cudaMalloc(&s->dev, bytes ? bytes : 1), "allocating a Resize's tables");
    if (st == KILN_OK)
        st = cu_check(b, cudaMemcpy(s->dev, host, bytes, cudaMemcpyHostToDevice), "copying a Resize's tables");
    free(host);
    if (st != KILN_OK)
        return st;
    for (int d = 0; d < 4; d++) {
        const kiln_resize_axis *a = d >= off ? &pl->ax[d - off] : NULL;
        s->p.out[d] = a ? a->out : 1;
        s->p.nt[d] = a ? a->ntaps : 1;
        s->p.idx[d] = (const int32_t *)((uint8_t *)s->dev + at[d][0]);
        s->p.w[d] = (const float *)((uint8_t *)s->dev + at[d][1]);
        s->p.outside[d] = a && a->any_outside ? (const uint8_t *)s->dev + at[d][2] : NULL;
    }
    s->p.extrap = pl->extrapolation;
    s->p.nearest = pl->nearest;
    s->ndim = pl->ndim;
    for (int d = 0; d < pl->ndim; d++)
        s->ydims[d] = pl->ax[d].out;
    return KILN_OK;
}

static kiln_status rz_state_of(cu_be *b, kiln_kctx *ctx, const kiln_tensor *x, bool nhwc, rz_state **out)
{
    int64_t key[8] = {0, x->ndim, 0, 0, 0, 0, nhwc, host_inputs_hash(ctx)};
    for (int d = 0; d < x->ndim && d < 4; d++)
        key[2 + d] = x->dims[d];
    if ((*out = cu_state_get(b, ctx->node, key, 8)))
        return KILN_OK;
    if (b->capturing)
        return cu_not_in_capture(b, "building a Resize's tables");
    kiln_resize_plan pl;
    kiln_status st = b->host->resize_plan(ctx->node, ctx->n_in, ctx->in, &pl);
    rz_state *s = st == KILN_OK ? calloc(1, sizeof *s) : NULL;
    if (st == KILN_OK && !s)
        st = cu_err(b, KILN_ERR_NOMEM, "out of memory");
    if (st == KILN_OK)
        st = rz_upload(b, ctx, &pl, s);
    b->host->resize_plan_free(&pl);
    if (st != KILN_OK) {
        if (s)
            rz_state_free(s);
        return st;
    }
    KILN_TRY(cu_state_put(b, ctx->node, key, 8, s, rz_state_free));   /* freed there on failure */
    *out = s;
    return KILN_OK;
}

static bool sup_resize(const kiln_bk_query *q)
{
    return cu_q_f32(q, 1u);
}

static bool acc_resize(cu_be *b, const kiln_node *n, int n_in, const kiln_tensor *const *in)
{
    (void)b;
    (void)n;
    return n_in >= 1 && in[0] && in[0]->ndim >= 1 && in[0]->ndim <= 4;
}

static kiln_status k_resize(cu_be *b, kiln_kctx *ctx)
{
    const kiln_tensor *x = IN(0);
    if (!x || x->ndim < 1 || x->ndim > 4)
        return cu_kerr(b, ctx, KILN_ERR_UNSUPPORTED, "only ranks 1 to 4");
    bool nhwc = cu_is_nhwc(x);
    rz_state *s;
    KILN_TRY(rz_state_of(b, ctx, x, nhwc, &s));
    kiln_tensor tmp;
    kiln_dtype sdt = cu_act_sdt(b, ctx, 1u);
    int fdt = cu_fdt(sdt);
    kiln_status st = cu_as(b, x, sdt, &tmp, &x);
    if (st == KILN_OK)
        st = cu_out_like(b, ctx, 0, x, s->ndim, s->ydims);
    if (st != KILN_OK) {
        cu_tmp_free(b, &tmp);
        return st;
    }
    kiln_tensor *y = ctx->out[0];
    cuk_resize_args p = s->p;
    int64_t xd[4] = {1, 1, 1, 1};
    for (int d = 0; d < x->ndim; d++)
        xd[4 - x->ndim + d] = x->dims[d];
    if (nhwc)   /* channels-last in, channels-last out (4-D: cu_is_nhwc) */
        y->flags |= KILN_TENSOR_DEV_NHWC;
    strides4(xd, nhwc, p.xs);
    strides4(p.out, nhwc, p.ys);
    p.nhwc = nhwc;
    st = cu_check(b, cuk_resize(fdt, &p, x->data, y->data, b->stream), "resize");
    cu_tmp_free(b, &tmp);
    return st;
}

/* ---- ConvTranspose */

static bool acc_convt(cu_be *b, const kiln_node *n, int n_in, const kiln_tensor *const *in)
{
    (void)b;
    (void)n;
    return n_in >= 2 && in[0] && in[1] && (in[0]->ndim == 3 || in[0]->ndim == 4) && in[1]->ndim == in[0]->ndim &&
           (n_in < 3 || !in[2] || in[2]->ndim == 1);
}

static kiln_status k_convt(cu_be *b, kiln_kctx *ctx)
{
    const kiln_tensor *x = IN(0), *w = IN(1), *bias = IN(2);
    if (!x || !w || (x->ndim != 3 && x->ndim != 4) || w->ndim != x->ndim)
        return cu_kerr(b, ctx, KILN_ERR_UNSUPPORTED, "only 1-D and 2-D ConvTranspose");
    kiln_convt_geom g;
    KILN_TRY(b->host->convt_geom(ctx->node, x->ndim, x->dims, w->dims, &g));
    if (bias && cu_numel(bias) != g.ydims[1])
        return cu_kerr(b, ctx, KILN_ERR_SHAPE, "B has %lld values for %lld output channels", (long long)cu_numel(bias),
                       (long long)g.ydims[1]);
    bool d1 = x->ndim == 3, nhwc = cu_is_nhwc(x);
    cuk_convt_args p = {.n = x->dims[0], .cin = x->dims[1], .cout = g.ydims[1], .h = d1 ? 1 : x->dims[2],
                   .w = x->dims[x->ndim - 1], .oh = d1 ? 1 : g.ydims[2], .ow = g.ydims[x->ndim - 1], .group = g.group,
                   .kh = d1 ? 1 : (int)w->dims[2], .kw = (int)w->dims[w->ndim - 1], .sh = d1 ? 1 : (int)g.s[0],
                   .sw = (int)g.s[g.nsp - 1], .dh = d1 ? 1 : (int)g.d[0], .dw = (int)g.d[g.nsp - 1],
                   .ph = d1 ? 0 : (int)g.pb[0], .pw = (int)g.pb[g.nsp - 1], .nhwc = nhwc};
    kiln_tensor tmp[3];
    memset(tmp, 0, sizeof tmp);
    kiln_dtype sdt = cu_act_sdt(b, ctx, 1u);
    int fdt = cu_fdt(sdt);
    kiln_status st = cu_as(b, x, sdt, &tmp[0], &x);
    if (st == KILN_OK)
        st = cu_as(b, w, KILN_DT_FLOAT32, &tmp[1], &w);
    if (st == KILN_OK)
        st = cu_as(b, bias, KILN_DT_FLOAT32, &tmp[2], &bias);
    if (st == KILN_OK)
        st = cu_out_like(b, ctx, 0, x, x->ndim, g.ydims);
    if (st == KILN_OK) {
        kiln_tensor *y = ctx->out[0];
        if (nhwc)
            y->flags |= KILN_TENSOR_DEV_NHWC;
        int64_t xd[4] = {p.n, p.cin, p.h, p.w}, yd[4] = {p.n, p.cout, p.oh, p.ow};
        strides4(xd, nhwc, p.xs);
        strides4(yd, nhwc, p.ys);
        st = cu_check(b, cuk_convt(fdt, &p, x->data, w->data, bias ? bias->data : NULL, y->data, b->stream),
                      "conv transpose");
    }
    for (int i = 0; i < 3; i++)
        cu_tmp_free(b, &tmp[i]);
    return st;
}

const cu_op cu_ops_upsample[] = {
    {KILN_OP_Resize, k_resize, sup_resize, acc_resize, 14u},     /* roi, scales, sizes on the host */
    {KILN_OP_Upsample, k_resize, sup_resize, acc_resize, 2u},    /* scales on the host */
    {KILN_OP_ConvTranspose, k_convt, sup_resize, acc_convt, 0},
    {KILN_OP_COUNT, NULL, NULL, NULL, 0},
};

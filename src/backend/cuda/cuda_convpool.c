/* FusedConvPool on the GPU (passes/p_convpool.c): a network's stem, its max pool and the pool's quantization as one
 * kernel (kernels_stem.cu). The layer exists only where the builder found the geometry that kernel takes; a layer
 * the kernel does not take (another geometry, a float32 filter, a scale on the device) is left to the CPU. */
#include "cuda_internal.h"
#include "../qexact.h"
#include <stdlib.h>
#include <string.h>

#define IN(i) (i < ctx->n_in ? ctx->in[i] : NULL)

typedef struct stem_state {
    void *w;             /* the filter as [K][7][8][4] in its half format */
    const void *src;     /* of this weight data, */
    unsigned long gen;   /* weights generation */
} stem_state;

static void stem_free(void *p)
{
    stem_state *s = p;
    if (s->w)
        cudaFree(s->w);
    free(s);
}

/* The geometry, the activation and the operands the kernel takes; *d, *po, *qo, *q filled */
static bool stem_desc(cu_be *b, const kiln_node *n, int n_in, const kiln_tensor *const *in, cuk_conv_desc *d, int *po,
                      int *qo, cuk_stem_q *q)
{
    const kiln_tensor *x = in[0], *w = n_in > 1 ? in[1] : NULL;
    const int64_t *pk, *ps, *pp;
    if (!x || !w || x->ndim != 4 || w->ndim != 4 || (w->dtype != KILN_DT_FLOAT16 && w->dtype != KILN_DT_BFLOAT16) ||
        w->dims[1] != x->dims[1] || b->host->attr_i(n, "group", 1) != 1 ||
        b->host->attr_ints(n, "kiln_pool_kernel", &pk) != 2 || b->host->attr_ints(n, "kiln_pool_strides", &ps) != 2 ||
        b->host->attr_ints(n, "kiln_pool_pads", &pp) != 4 || pk[0] != 3 || pk[1] != 3 || ps[0] != 2 || ps[1] != 2 ||
        pp[0] != 1 || pp[1] != 1 || pp[2] != 1 || pp[3] != 1)
        return false;
    int act = CUK_IDENTITY;
    float aa = 0, ab = 0;
    if (!cu_fused_act(b, n, &act, &aa, &ab) || (act != CUK_IDENTITY && act != CUK_RELU))
        return false;
    for (int i = 0; i < 4; i++)
        if (x->dims[i] > 0x7fffffff || w->dims[i] > 0x7fffffff)
            return false;
    kiln_kctx ctx = {.node = n, .n_in = n_in, .in = in};
    cu_geom g;
    if (cu_conv_geom(b, &ctx, x, w, &g) != KILN_OK || g.pb[0] != g.pe[0] || g.pb[1] != g.pe[1])
        return false;
    *d = (cuk_conv_desc){.n = (int)x->dims[0], .c = (int)x->dims[1], .h = (int)x->dims[2], .w = (int)x->dims[3],
                         .k = (int)w->dims[0], .r = (int)w->dims[2], .s = (int)w->dims[3], .p = (int)g.out[0],
                         .q = (int)g.out[1], .sh = (int)g.s[0], .sw = (int)g.s[1], .ph = (int)g.pb[0],
                         .pw = (int)g.pb[1], .dh = (int)g.d[0], .dw = (int)g.d[1], .y_nhwc = 1,
                         .relu = act == CUK_RELU, .v4 = 1};
    *po = d->p >= 1 ? (d->p - 1) / 2 + 1 : 0;
    *qo = d->q >= 1 ? (d->q - 1) / 2 + 1 : 0;
    if (!cuk_stem_pool_fits(d, *po, *qo) || (n_in > 2 && in[2] && cu_numel(in[2]) != w->dims[0]))
        return false;
    *q = (cuk_stem_q){0};
    const kiln_tensor *sc = n_in > 3 ? in[3] : NULL, *zp = n_in > 4 ? in[4] : NULL;
    if (!sc)
        return !zp;
    if ((sc->flags & KILN_TENSOR_ON_DEVICE) || sc->dtype != KILN_DT_FLOAT32 || cu_numel(sc) != 1 ||
        (zp && ((zp->flags & KILN_TENSOR_ON_DEVICE) || !cu_is_q8(zp->dtype) || cu_numel(zp) != 1)))
        return false;
    q->scale = *(const float *)sc->data;
    q->inv = kq_inv(q->scale);
    q->kind = zp && zp->dtype == KILN_DT_INT8 ? 2 : 1;
    q->zp = !zp ? 0 : zp->dtype == KILN_DT_UINT8 ? ((const uint8_t *)zp->data)[0] : ((const int8_t *)zp->data)[0];
    return true;
}

static bool acc_convpool(cu_be *b, const kiln_node *n, int n_in, const kiln_tensor *const *in)
{
    cuk_conv_desc d;
    int po, qo;
    cuk_stem_q q;
    return n_in >= 2 && stem_desc(b, n, n_in, in, &d, &po, &qo, &q);
}

static bool sup_convpool(const kiln_bk_query *q)
{
    if (!q->in_dtype)
        return true;
    kiln_dtype x = q->in_dtype[0], w = q->n_in > 1 ? q->in_dtype[1] : KILN_DT_UNDEFINED;
    kiln_dtype s = q->n_in > 3 ? q->in_dtype[3] : KILN_DT_UNDEFINED, z = q->n_in > 4 ? q->in_dtype[4] : KILN_DT_UNDEFINED;
    return (x == KILN_DT_FLOAT32 || x == KILN_DT_UNDEFINED) &&
           (w == KILN_DT_FLOAT16 || w == KILN_DT_BFLOAT16 || w == KILN_DT_UNDEFINED) &&
           (s == KILN_DT_FLOAT32 || s == KILN_DT_UNDEFINED) && (z == KILN_DT_UNDEFINED || cu_is_q8(z));
}

/* The filter reordered for the kernel, kept per node and weights generation */
static kiln_status stem_weights(cu_be *b, kiln_kctx *ctx, const cuk_conv_desc *d, const void **out)
{
    const kiln_tensor *w = IN(1);
    kiln_dtype sdt = w->dtype;
    /* this path's state slot (101) and what sizes its buffer */
    int64_t key[4] = {101, w->dims[0], w->dims[1], sdt};
    stem_state *s = cu_state_get(b, ctx->node, key, 4);
    unsigned long gen = cu_weights_gen();
    if (s && s->src == w->data && s->gen == gen) {
        *out = s->w;
        return KILN_OK;
    }
    if (!s) {
        s = calloc(1, sizeof *s);
        if (!s)
            return cu_err(b, KILN_ERR_NOMEM, "out of memory");
        kiln_status st =
            cu_check(b, cudaMalloc(&s->w, (size_t)d->k * (size_t)cuk_stem_kp() * cu_es(sdt)), "allocating a filter");
        if (st == KILN_OK)
            st = cu_state_put(b, ctx->node, key, 4, s, stem_free);
        else
            stem_free(s);
        KILN_TRY(st);
    }
    kiln_tensor tmp;
    memset(&tmp, 0, sizeof tmp);
    const kiln_tensor *wh;
    KILN_TRY(cu_as(b, w, sdt, &tmp, &wh));
    kiln_status st = cu_check(b, cuk_stem_weights(cu_fdt(sdt), wh->data, s->w, d->k, d->c, b->stream),
                              "reordering a filter");
    cu_tmp_free(b, &tmp);
    KILN_TRY(st);
    s->src = w->data;
    s->gen = gen;
    *out = s->w;
    return KILN_OK;
}

static kiln_status k_convpool(cu_be *b, kiln_kctx *ctx)
{
    cuk_conv_desc d;
    int po, qo;
    cuk_stem_q q;
    if (!stem_desc(b, ctx->node, ctx->n_in, ctx->in, &d, &po, &qo, &q))
        return cu_kerr(b, ctx, KILN_ERR_UNSUPPORTED, "not the stem geometry the fused kernel takes");
    const kiln_tensor *x = IN(0), *w = IN(1);
    kiln_dtype sdt = w->dtype;
    cu_conv_x_strides(x, &d);
    const void *wp = NULL;
    KILN_TRY(stem_weights(b, ctx, &d, &wp));
    int64_t yd[4] = {x->dims[0], w->dims[0], po, qo};
    kiln_dtype odt = q.kind == 0 ? KILN_DT_FLOAT32 : q.kind == 1 ? KILN_DT_UINT8 : KILN_DT_INT8;
    KILN_TRY(q.kind ? cu_out(b, ctx, 0, odt, 4, yd) : cu_out_s(b, ctx, 0, KILN_DT_FLOAT32, sdt, 4, yd));
    kiln_tensor *y = ctx->out[0];
    y->flags |= KILN_TENSOR_DEV_NHWC;
    /* KILN_CUDA_STEM (read per call, an A/B switch): "mma" runs mma.sync where wgmma would, "tile" the tiled
     * kernel where the row kernel would, "lock" the row kernel's warpgroups in lockstep, "copy" the float32 input's
     * [n][h][w][4] half copy as its own kernel first (always so for a half-stored input; the tiled kernel then) */
    const char *how = getenv("KILN_CUDA_STEM");
    if (!how)
        how = "";
    const int flags = (strstr(how, "mma") ? CUK_STEM_MMA : 0) | (strstr(how, "tile") ? CUK_STEM_TILE : 0) |
                      (strstr(how, "lock") ? CUK_STEM_LOCK : 0);
    const bool direct = cu_sdt(x) == KILN_DT_FLOAT32 && !strstr(how, "copy");
    kiln_tensor tmp[2];
    memset(tmp, 0, sizeof tmp);
    const kiln_tensor *bias = NULL;
    kiln_status st = KILN_OK;
    if (!direct) {
        st = cu_tmp(b, &tmp[0], sdt, 4, (int64_t[]){x->dims[0], x->dims[2], x->dims[3], 4});
        if (st == KILN_OK)
            st = cu_check(b, cuk_conv_to_nhwc4(cu_fdt(cu_sdt(x)), cu_fdt(sdt), x->data, tmp[0].data, &d, b->stream),
                          "stem input");
    }
    if (st == KILN_OK)
        st = cu_as(b, IN(2), KILN_DT_FLOAT32, &tmp[1], &bias);
    if (st == KILN_OK)
        st = cu_check(b, cuk_stem_pool(cu_fdt(sdt), direct ? CUK_F32 : cu_fdt(sdt), direct ? x->data : tmp[0].data,
                                       wp, bias ? bias->data : NULL, y->data, &d, po, qo, &q, flags, b->stream),
                      "stem convolution and pool");
    for (int i = 0; i < 2; i++)
        cu_tmp_free(b, &tmp[i]);
    return st;
}

const cu_op cu_ops_convpool[] = {
    {KILN_OP_FusedConvPool, k_convpool, sup_convpool, acc_convpool, 0x18u},   /* y_scale, y_zero_point on the host */
    {KILN_OP_COUNT, NULL, NULL, NULL, 0},
};

/* Reference kernels: QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear, QLinearConv. */
#include "../../kernel.h"
#include <math.h>

/* Saturation range of a quantized integer type; false if unsupported. */
static bool q_range(kiln_dtype dt, double *lo, double *hi)
{
    switch (dt) {
    case KILN_DT_UINT8: *lo = 0; *hi = 255; return true;
    case KILN_DT_INT8: *lo = -128; *hi = 127; return true;
    case KILN_DT_UINT16: *lo = 0; *hi = 65535; return true;
    case KILN_DT_INT16: *lo = -32768; *hi = 32767; return true;
    default: return false;
    }
}

static int64_t numel_of(const kiln_tensor *t)
{
    return kiln__shape_numel(t->ndim, t->dims);
}

/* Resolves per-tensor vs per-axis quantization parameters. On success *nch is 1 (per-tensor)
 * or the size of the quantized axis, and *inner is the element stride of that axis. */
static kiln_status q_axis(kiln_kctx *ctx, const kiln_tensor *x, const kiln_tensor *scale, const kiln_tensor *zp,
                          int64_t *nch, int64_t *inner)
{
    int64_t ns = numel_of(scale);
    if (ns < 1)
        return kiln__kerr(ctx, KILN_ERR_SHAPE, "scale must not be empty");
    if (zp && numel_of(zp) != ns)
        return kiln__kerr(ctx, KILN_ERR_SHAPE, "zero point has %lld elements, scale has %lld",
                          (long long)numel_of(zp), (long long)ns);
    *nch = 1;
    *inner = 1;
    if (scale->ndim == 0 || (ns == 1 && ctx->node->opset < 13))
        return KILN_OK;
    if (scale->ndim != 1)
        return kiln__kerr(ctx, KILN_ERR_SHAPE, "scale must be a scalar or 1-D (rank %d)", scale->ndim);
    if (ctx->node->opset < 13 && ns != 1)
        return kiln__kerr(ctx, KILN_ERR_SHAPE, "per-axis quantization needs opset 13");
    int axis;
    KILN_TRY(kiln__norm_axis(ctx, kiln__attr_i(ctx->node, "axis", 1), x->ndim, &axis));
    if (x->ndim == 0) {
        if (ns == 1)
            return KILN_OK;
        return kiln__kerr(ctx, KILN_ERR_SHAPE, "per-axis scale on a scalar input");
    }
    if (x->dims[axis] != ns) {
        if (ns == 1)
            return KILN_OK;
        return kiln__kerr(ctx, KILN_ERR_SHAPE, "scale has %lld elements but axis %d has size %lld", (long long)ns,
                          axis, (long long)x->dims[axis]);
    }
    int64_t in = 1;
    for (int d = axis + 1; d < x->ndim; d++)
        in *= x->dims[d];
    *nch = ns;
    *inner = in;
    return KILN_OK;
}

static kiln_status check_scale_dtype(kiln_kctx *ctx, const kiln_tensor *scale)
{
    if (scale->dtype != KILN_DT_FLOAT32 && scale->dtype != KILN_DT_FLOAT16 && scale->dtype != KILN_DT_FLOAT64 &&
        scale->dtype != KILN_DT_BFLOAT16)
        return kiln__kerr(ctx, KILN_ERR_DTYPE, "scale must be a float tensor, got %s", kiln_dtype_name(scale->dtype));
    return KILN_OK;
}

static float sat_round_f(float v, float lo, float hi)
{
    v = rintf(v);
    if (v != v)
        return 0;
    return v < lo ? lo : (v > hi ? hi : v);
}

/* QuantizeLinear / DequantizeLinear with an FP8 quantized type (opset 19): y = fp8(x / s + z)
 * with ONNX Cast's 'saturate' rule, and x = (float(q) - float(z)) * s, in float32. */
static kiln_status fp8_qdq(kiln_kctx *ctx, const kiln_tensor *x, const kiln_tensor *scale, const kiln_tensor *zp,
                           bool quantize)
{
    kiln_dtype qdt = quantize ? (zp ? zp->dtype : KILN_DT_UINT8) : x->dtype;
    if (zp && zp->dtype != qdt)
        return kiln__kerr(ctx, KILN_ERR_DTYPE, "zero point dtype %s differs from input dtype %s",
                          kiln_dtype_name(zp->dtype), kiln_dtype_name(qdt));
    if (quantize && (kiln_dtype_size(x->dtype) == 0 || !kiln__dtype_is_float(x->dtype)))
        return kiln__kerr(ctx, KILN_ERR_DTYPE, "unsupported input dtype %s", kiln_dtype_name(x->dtype));
    int64_t nch, inner;
    KILN_TRY(q_axis(ctx, x, scale, zp, &nch, &inner));
    kiln_dtype odt = quantize ? qdt : scale->dtype;
    int64_t n = numel_of(x);
    KILN_TRY(kiln__kout(ctx, 0, odt, x->ndim, x->dims));
    if (nch == 1)
        inner = n;
    bool sat = kiln__attr_i(ctx->node, "saturate", 1) != 0;
    void *y = ctx->out[0]->data;
    for (int64_t c = 0, i = 0; i < n; c = (c + 1) % nch) {
        float s = (float)kiln__get_f64(scale->dtype, scale->data, c);
        float z = zp ? kiln__fp8_to_f32(qdt, ((const uint8_t *)zp->data)[c]) : 0.f;
        for (int64_t end = i + inner; i < end; i++) {
            float v = (float)kiln__get_f64(x->dtype, x->data, i);
            if (quantize)
                ((uint8_t *)y)[i] = kiln__f32_to_fp8(qdt, v / s + z, sat);
            else
                kiln__set_f64(odt, y, i, (double)((v - z) * s));
        }
    }
    return KILN_OK;
}

static kiln_status k_quantize(kiln_kctx *ctx)
{
    const kiln_tensor *x = kiln__kin(ctx, 0), *scale = kiln__kin(ctx, 1), *zp = kiln__kin(ctx, 2);
    if (!x || !scale)
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "missing input");
    KILN_TRY(check_scale_dtype(ctx, scale));
    if (!kiln__dtype_is_float(x->dtype) && x->dtype != KILN_DT_INT32)
        return kiln__kerr(ctx, KILN_ERR_DTYPE, "unsupported input dtype %s", kiln_dtype_name(x->dtype));
    if (kiln_dtype_size(x->dtype) == 0)
        return kiln__kerr(ctx, KILN_ERR_DTYPE, "unsupported input dtype %s", kiln_dtype_name(x->dtype));
    kiln_dtype odt = zp ? zp->dtype : KILN_DT_UINT8;
    if (kiln__dtype_is_fp8(odt))
        return fp8_qdq(ctx, x, scale, zp, true);
    double lo, hi;
    if (!q_range(odt, &lo, &hi))
        return kiln__kerr(ctx, KILN_ERR_DTYPE, "unsupported quantized dtype %s", kiln_dtype_name(odt));
    int64_t nch, inner;
    KILN_TRY(q_axis(ctx, x, scale, zp, &nch, &inner));
    int64_t n = numel_of(x);
    KILN_TRY(kiln__kout(ctx, 0, odt, x->ndim, x->dims));
    if (n <= 0)
        return KILN_OK;
    if (nch == 1)
        inner = n;
    void *y = ctx->out[0]->data;
    if (x->dtype == KILN_DT_FLOAT32 && scale->dtype == KILN_DT_FLOAT32) {
        const float *xs = x->data, *sc = scale->data;
        float flo = (float)lo, fhi = (float)hi;
        for (int64_t c = 0, i = 0; i < n; c = (c + 1) % nch) {
            float s = sc[c];
            float z = zp ? (float)kiln__get_i64(zp->dtype, zp->data, c) : 0.f;
            int64_t end = i + inner;
            if (odt == KILN_DT_UINT8) {
                uint8_t *yo = y;
                for (; i < end; i++)
                    yo[i] = (uint8_t)sat_round_f(rintf(xs[i] / s) + z, flo, fhi);
            } else if (odt == KILN_DT_INT8) {
                int8_t *yo = y;
                for (; i < end; i++)
                    yo[i] = (int8_t)sat_round_f(rintf(xs[i] / s) + z, flo, fhi);
            } else {
                for (; i < end; i++)
                    kiln__set_i64(odt, y, i, (int64_t)sat_round_f(rintf(xs[i] / s) + z, flo, fhi));
            }
        }
        return KILN_OK;
    }
    for (int64_t c = 0, i = 0; i < n; c = (c + 1) % nch) {
        double s = kiln__get_f64(scale->dtype, scale->data, c);
        double z = zp ? (double)kiln__get_i64(zp->dtype, zp->data, c) : 0.0;
        for (int64_t end = i + inner; i < end; i++) {
            double v = nearbyint(kiln__get_f64(x->dtype, x->data, i) / s) + z;
            if (v != v)
                v = 0;
            v = v < lo ? lo : (v > hi ? hi : v);
            kiln__set_i64(odt, y, i, (int64_t)v);
        }
    }
    return KILN_OK;
}

static kiln_status k_dequantize(kiln_kctx *ctx)
{
    const kiln_tensor *x = kiln__kin(ctx, 0), *scale = kiln__kin(ctx, 1), *zp = kiln__kin(ctx, 2);
    if (!x || !scale)
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "missing input");
    KILN_TRY(check_scale_dtype(ctx, scale));
    if (kiln__dtype_is_fp8(x->dtype))
        return fp8_qdq(ctx, x, scale, zp, false);
    double lo, hi;
    if (!q_range(x->dtype, &lo, &hi) && x->dtype != KILN_DT_INT32)
        return kiln__kerr(ctx, KILN_ERR_DTYPE, "unsupported quantized input dtype %s", kiln_dtype_name(x->dtype));
    if (zp && zp->dtype != x->dtype)
        return kiln__kerr(ctx, KILN_ERR_DTYPE, "zero point dtype %s differs from input dtype %s",
                          kiln_dtype_name(zp->dtype), kiln_dtype_name(x->dtype));
    int64_t nch, inner;
    KILN_TRY(q_axis(ctx, x, scale, zp, &nch, &inner));
    if (x->dtype == KILN_DT_INT32 && zp) {
        for (int64_t c = 0; c < nch; c++)
            if (kiln__get_i64(zp->dtype, zp->data, c) != 0)
                return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "int32 input requires a zero zero-point");
    }
    kiln_dtype odt = scale->dtype;
    int64_t n = numel_of(x);
    KILN_TRY(kiln__kout(ctx, 0, odt, x->ndim, x->dims));
    if (n <= 0)
        return KILN_OK;
    if (nch == 1)
        inner = n;
    if (odt == KILN_DT_FLOAT32) {
        float *y = ctx->out[0]->data;
        const float *sc = scale->data;
        for (int64_t c = 0, i = 0; i < n; c = (c + 1) % nch) {
            float s = sc[c];
            int32_t z = zp ? (int32_t)kiln__get_i64(zp->dtype, zp->data, c) : 0;
            int64_t end = i + inner;
            if (x->dtype == KILN_DT_UINT8) {
                const uint8_t *xs = x->data;
                for (; i < end; i++)
                    y[i] = (float)((int32_t)xs[i] - z) * s;
            } else if (x->dtype == KILN_DT_INT8) {
                const int8_t *xs = x->data;
                for (; i < end; i++)
                    y[i] = (float)((int32_t)xs[i] - z) * s;
            } else {
                for (; i < end; i++)
                    y[i] = (float)(kiln__get_i64(x->dtype, x->data, i) - z) * s;
            }
        }
        return KILN_OK;
    }
    for (int64_t c = 0, i = 0; i < n; c = (c + 1) % nch) {
        double s = kiln__get_f64(scale->dtype, scale->data, c);
        int64_t z = zp ? kiln__get_i64(zp->dtype, zp->data, c) : 0;
        for (int64_t end = i + inner; i < end; i++)
            kiln__set_f64(odt, ctx->out[0]->data, i, (double)(kiln__get_i64(x->dtype, x->data, i) - z) * s);
    }
    return KILN_OK;
}

static kiln_status k_dynquant(kiln_kctx *ctx)
{
    const kiln_tensor *x = kiln__kin(ctx, 0);
    if (!x)
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "missing input");
    if (x->dtype != KILN_DT_FLOAT32)
        return kiln__kerr(ctx, KILN_ERR_DTYPE, "input must be float32, got %s", kiln_dtype_name(x->dtype));
    int64_t n = numel_of(x);
    const float *xs = x->data;
    float mn = 0.f, mx = 0.f;
    for (int64_t i = 0; i < n; i++) {
        if (xs[i] < mn)
            mn = xs[i];
        if (xs[i] > mx)
            mx = xs[i];
    }
    float scale = (mx - mn) / 255.f;
    float zpf = 0.f;
    if (scale == 0.f || !isfinite(scale))
        scale = 1.f; /* all zeros (or non-finite input): as ONNX Runtime, scale 1, zero point 0 */
    else
        zpf = sat_round_f(0.f - mn / scale, 0.f, 255.f);
    KILN_TRY(kiln__kout(ctx, 0, KILN_DT_UINT8, x->ndim, x->dims));
    uint8_t *y = ctx->out[0]->data;
    for (int64_t i = 0; i < n; i++)
            y[i] = (uint8_t)sat_round_f(rintf(xs[i] / scale) + zpf, 0.f, 255.f);
    if (ctx->n_out > 1 && ctx->out[1]) {
        KILN_TRY(kiln__kout(ctx, 1, KILN_DT_FLOAT32, 0, NULL));
        *(float *)ctx->out[1]->data = scale;
    }
    if (ctx->n_out > 2 && ctx->out[2]) {
        KILN_TRY(kiln__kout(ctx, 2, KILN_DT_UINT8, 0, NULL));
        *(uint8_t *)ctx->out[2]->data = (uint8_t)zpf;
    }
    return KILN_OK;
}

/* ---- QLinearConv ---- */

#define QC_MAX_SP (KILN_MAX_DIMS - 2)

typedef struct qconv_geom {
    int nsp;                     /* spatial rank */
    int64_t N, C, M, group;
    int64_t in[QC_MAX_SP], k[QC_MAX_SP], out[QC_MAX_SP];
    int64_t stride[QC_MAX_SP], dil[QC_MAX_SP], pad_b[QC_MAX_SP];
} qconv_geom;

static kiln_status conv_geom(kiln_kctx *ctx, const kiln_tensor *x, const kiln_tensor *w, qconv_geom *g)
{
    const kiln_node *nd = ctx->node;
    if (x->ndim < 3 || w->ndim != x->ndim)
        return kiln__kerr(ctx, KILN_ERR_SHAPE, "x (rank %d) and w (rank %d) must have the same rank >= 3", x->ndim,
                          w->ndim);
    int nsp = x->ndim - 2;
    g->nsp = nsp;
    g->N = x->dims[0];
    g->C = x->dims[1];
    g->M = w->dims[0];
    g->group = kiln__attr_i(nd, "group", 1);
    if (g->group < 1 || g->C % g->group || g->M % g->group || w->dims[1] * g->group != g->C)
        return kiln__kerr(ctx, KILN_ERR_SHAPE, "inconsistent channels: C=%lld, w dim1=%lld, M=%lld, group=%lld",
                          (long long)g->C, (long long)w->dims[1], (long long)g->M, (long long)g->group);
    const int64_t *ks = NULL, *st = NULL, *dl = NULL, *pd = NULL;
    int nk = kiln__attr_ints(nd, "kernel_shape", &ks);
    int ns = kiln__attr_ints(nd, "strides", &st);
    int ndl = kiln__attr_ints(nd, "dilations", &dl);
    int np = kiln__attr_ints(nd, "pads", &pd);
    if ((nk >= 0 && nk != nsp) || (ns >= 0 && ns != nsp) || (ndl >= 0 && ndl != nsp) || (np >= 0 && np != 2 * nsp))
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "kernel_shape/strides/dilations/pads lengths do not match rank");
    const char *ap = kiln__attr_s(nd, "auto_pad", "NOTSET");
    for (int d = 0; d < nsp; d++) {
        g->in[d] = x->dims[2 + d];
        g->k[d] = w->dims[2 + d];
        if (nk >= 0 && ks[d] != g->k[d])
            return kiln__kerr(ctx, KILN_ERR_SHAPE, "kernel_shape does not match the weight shape");
        g->stride[d] = ns >= 0 ? st[d] : 1;
        g->dil[d] = ndl >= 0 ? dl[d] : 1;
        if (g->stride[d] < 1 || g->dil[d] < 1 || g->stride[d] > (1 << 30) || g->dil[d] > (1 << 30))
            return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "invalid strides/dilations");
        int64_t pb = np >= 0 ? pd[d] : 0, pe = np >= 0 ? pd[d + nsp] : 0;
        if (pb < 0 || pe < 0 || pb > ((int64_t)1 << 40) || pe > ((int64_t)1 << 40))
            return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "invalid pads");
        int64_t ek = (g->k[d] - 1) * g->dil[d] + 1;
        if (!strcmp(ap, "SAME_UPPER") || !strcmp(ap, "SAME_LOWER")) {
            int64_t o = (g->in[d] + g->stride[d] - 1) / g->stride[d];
            int64_t tot = (o - 1) * g->stride[d] + ek - g->in[d];
            if (tot < 0)
                tot = 0;
            pb = !strcmp(ap, "SAME_UPPER") ? tot / 2 : tot - tot / 2;
            pe = tot - pb;
        } else if (!strcmp(ap, "VALID")) {
            pb = pe = 0;
        } else if (strcmp(ap, "NOTSET") != 0) {
            return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "unknown auto_pad '%s'", ap);
        }
        g->pad_b[d] = pb;
        int64_t span = g->in[d] + pb + pe - ek;
        if (g->k[d] < 1 || span < 0)
            return kiln__kerr(ctx, KILN_ERR_SHAPE, "kernel larger than padded input on spatial axis %d", d);
        g->out[d] = span / g->stride[d] + 1;
    }
    return KILN_OK;
}

typedef struct qconv_job {
    const qconv_geom *g;
    const int32_t *xi, *wi;
    const int64_t *koff;
    const float *ws;
    int64_t nws;
    const int32_t *bias;
    void *y;
    kiln_dtype odt;
    int64_t osp, isp, ksz;
    float xs, ys, yz, lo, hi;
} qconv_job;

/* Computes output planes [begin, end) of the N*M (batch, output channel) planes. */
static void qconv_worker(void *arg, int64_t begin, int64_t end)
{
    const qconv_job *j = arg;
    const qconv_geom *g = j->g;
    int64_t cpg = g->C / g->group, mpg = g->M / g->group;
    for (int64_t nm = begin; nm < end; nm++) {
        int64_t n = nm / g->M, m = nm % g->M;
        int64_t grp = m / mpg;
        float mult = j->xs * j->ws[j->nws == 1 ? 0 : m] / j->ys;
        const int32_t *wm = j->wi + m * cpg * j->ksz;
        for (int64_t o = 0; o < j->osp; o++) {
            int64_t base[QC_MAX_SP], r = o;
            for (int d = g->nsp - 1; d >= 0; d--) {
                base[d] = (r % g->out[d]) * g->stride[d] - g->pad_b[d];
                r /= g->out[d];
            }
            int64_t acc = j->bias ? j->bias[m] : 0;
            for (int64_t kk = 0; kk < j->ksz; kk++) {
                int64_t pos = 0;
                bool ok = true;
                for (int d = 0; d < g->nsp; d++) {
                    int64_t p = base[d] + j->koff[kk * g->nsp + d];
                    if (p < 0 || p >= g->in[d]) {
                        ok = false;
                        break;
                    }
                    pos = pos * g->in[d] + p;
                }
                if (!ok)
                    continue;
                const int32_t *xp = j->xi + (n * g->C + grp * cpg) * j->isp + pos;
                const int32_t *wp = wm + kk;
                for (int64_t c = 0; c < cpg; c++)
                    acc += (int64_t)xp[c * j->isp] * wp[c * j->ksz];
            }
            float v = sat_round_f(rintf((float)acc * mult) + j->yz, j->lo, j->hi);
            int64_t oi = nm * j->osp + o;
            if (j->odt == KILN_DT_UINT8)
                ((uint8_t *)j->y)[oi] = (uint8_t)v;
            else if (j->odt == KILN_DT_INT8)
                ((int8_t *)j->y)[oi] = (int8_t)v;
            else
                kiln__set_i64(j->odt, j->y, oi, (int64_t)v);
        }
    }
}

static kiln_status k_qlinearconv(kiln_kctx *ctx)
{
    const kiln_tensor *x = kiln__kin(ctx, 0), *xs = kiln__kin(ctx, 1), *xz = kiln__kin(ctx, 2);
    const kiln_tensor *w = kiln__kin(ctx, 3), *ws = kiln__kin(ctx, 4), *wz = kiln__kin(ctx, 5);
    const kiln_tensor *ys = kiln__kin(ctx, 6), *yz = kiln__kin(ctx, 7), *b = kiln__kin(ctx, 8);
    if (!x || !xs || !w || !ws || !ys)
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "missing input");
    double lo, hi;
    if ((x->dtype != KILN_DT_UINT8 && x->dtype != KILN_DT_INT8) || (w->dtype != KILN_DT_UINT8 && w->dtype != KILN_DT_INT8))
        return kiln__kerr(ctx, KILN_ERR_DTYPE, "x and w must be uint8/int8");
    if ((xz && xz->dtype != x->dtype) || (wz && wz->dtype != w->dtype))
        return kiln__kerr(ctx, KILN_ERR_DTYPE, "zero point dtype mismatch");
    kiln_dtype odt = yz ? yz->dtype : x->dtype;
    if (!q_range(odt, &lo, &hi))
        return kiln__kerr(ctx, KILN_ERR_DTYPE, "unsupported output dtype %s", kiln_dtype_name(odt));
    if (xs->dtype != KILN_DT_FLOAT32 || ws->dtype != KILN_DT_FLOAT32 || ys->dtype != KILN_DT_FLOAT32)
        return kiln__kerr(ctx, KILN_ERR_DTYPE, "scales must be float32");
    if (b && b->dtype != KILN_DT_INT32)
        return kiln__kerr(ctx, KILN_ERR_DTYPE, "bias must be int32");
    qconv_geom g;
    memset(&g, 0, sizeof g);
    KILN_TRY(conv_geom(ctx, x, w, &g));
    if (numel_of(xs) != 1 || numel_of(ys) != 1 || (xz && numel_of(xz) != 1) || (yz && numel_of(yz) != 1))
        return kiln__kerr(ctx, KILN_ERR_SHAPE, "x/y scale and zero point must be scalars");
    int64_t nws = numel_of(ws);
    if (nws != 1 && nws != g.M)
        return kiln__kerr(ctx, KILN_ERR_SHAPE, "w_scale must have 1 or M=%lld elements", (long long)g.M);
    if (wz && numel_of(wz) != 1 && numel_of(wz) != g.M)
        return kiln__kerr(ctx, KILN_ERR_SHAPE, "w_zero_point must have 1 or M elements");
    if (b && numel_of(b) != g.M)
        return kiln__kerr(ctx, KILN_ERR_SHAPE, "bias must have M=%lld elements", (long long)g.M);

    int64_t odims[KILN_MAX_DIMS];
    odims[0] = g.N;
    odims[1] = g.M;
    int64_t osp = 1, isp = 1, ksz = 1;
    for (int d = 0; d < g.nsp; d++) {
        odims[2 + d] = g.out[d];
        osp *= g.out[d];
        isp *= g.in[d];
        ksz *= g.k[d];
    }
    KILN_TRY(kiln__kout(ctx, 0, odt, x->ndim, odims));
    int64_t nw = numel_of(w), nx = numel_of(x);
    if (kiln__shape_numel(x->ndim, odims) == 0 || nw == 0)
        goto fill_bias_only;
    /* work estimate guard: N * out_spatial * numel(w) MACs */
    if ((double)g.N * (double)osp * (double)nw > 4e11)
        return kiln__kerr(ctx, KILN_ERR_LIMIT, "convolution is too large for the reference kernel");

    {
        int32_t *xi = kiln__malloc(sizeof(int32_t) * (size_t)(nx ? nx : 1));
        int32_t *wi = kiln__malloc(sizeof(int32_t) * (size_t)nw);
        int64_t *koff = kiln__malloc(sizeof(int64_t) * (size_t)ksz * (size_t)g.nsp);
        if (!xi || !wi || !koff) {
            kiln__free(xi);
            kiln__free(wi);
            kiln__free(koff);
            return kiln__kerr(ctx, KILN_ERR_NOMEM, "out of memory");
        }
        int32_t xzv = xz ? (int32_t)kiln__get_i64(xz->dtype, xz->data, 0) : 0;
        for (int64_t i = 0; i < nx; i++)
            xi[i] = (int32_t)kiln__get_i64(x->dtype, x->data, i) - xzv;
        int64_t wper = nw / g.M;
        for (int64_t m = 0; m < g.M; m++) {
            int32_t z = wz ? (int32_t)kiln__get_i64(wz->dtype, wz->data, numel_of(wz) == 1 ? 0 : m) : 0;
            for (int64_t j = 0; j < wper; j++)
                wi[m * wper + j] = (int32_t)kiln__get_i64(w->dtype, w->data, m * wper + j) - z;
        }
        /* kernel offsets (dilated), per spatial dim */
        for (int64_t kk = 0; kk < ksz; kk++) {
            int64_t r = kk;
            for (int d = g.nsp - 1; d >= 0; d--) {
                koff[kk * g.nsp + d] = (r % g.k[d]) * g.dil[d];
                r /= g.k[d];
            }
        }
        qconv_job job = {.g = &g, .xi = xi, .wi = wi, .koff = koff, .ws = ws->data, .nws = nws,
                         .bias = b ? b->data : NULL, .y = ctx->out[0]->data, .odt = odt, .osp = osp, .isp = isp,
                         .ksz = ksz, .lo = (float)lo, .hi = (float)hi};
        job.xs = *(const float *)xs->data;
        job.ys = *(const float *)ys->data;
        job.yz = yz ? (float)kiln__get_i64(yz->dtype, yz->data, 0) : 0.f;
        int64_t per = osp * (g.C / g.group) * ksz;
        kiln__parallel_for(ctx->pool, ctx->nthreads, g.N * g.M, per > 0 ? 1 + (int64_t)(1 << 16) / per : 1, qconv_worker, &job);
        kiln__free(xi);
        kiln__free(wi);
        kiln__free(koff);
        return KILN_OK;
    }
fill_bias_only:
    /* empty weights / output: y = saturate(round(bias * mult) + y_zero_point) */
    {
        int64_t total = kiln__shape_numel(x->ndim, odims);
        float xsv = *(const float *)xs->data, ysv = *(const float *)ys->data;
        float yzv = yz ? (float)kiln__get_i64(yz->dtype, yz->data, 0) : 0.f;
        for (int64_t i = 0; i < total; i++) {
            int64_t m = (i / (osp ? osp : 1)) % (g.M ? g.M : 1);
            float mult = xsv * ((const float *)ws->data)[nws == 1 ? 0 : m] / ysv;
            float acc = b ? (float)((const int32_t *)b->data)[m] : 0.f;
            kiln__set_i64(odt, ctx->out[0]->data, i, (int64_t)sat_round_f(rintf(acc * mult) + yzv, (float)lo, (float)hi));
        }
    }
    return KILN_OK;
}

const kiln_kernel_reg kiln__ref_quant[] = {
    {KILN_OP_QuantizeLinear, k_quantize},
    {KILN_OP_DequantizeLinear, k_dequantize},
    {KILN_OP_DynamicQuantizeLinear, k_dynquant},
    {KILN_OP_QLinearConv, k_qlinearconv},
    {KILN_OP_COUNT, NULL},
};

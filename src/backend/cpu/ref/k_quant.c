/* Reference kernels: QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear, QLinearConv,
 * com.microsoft QGemm, and kiln's QLookup. The quantized layers requantize through qgemm.h's epilogue (kiln__qepi_*),
 * the definition the fast kernels match (docs/PRECISION.md, INT8 kernels). */
#include "../prep.h"
#include "../qgemm.h"
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

kiln_status kiln__qconv_geom(const kiln_kctx *ctx, const kiln_tensor *x, const kiln_tensor *w, kiln_qconv_geom *g)
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
    const kiln_qconv_geom *g;
    const int32_t *xi, *wi;
    const int64_t *koff;
    const int32_t *bias;
    const kiln_qepi *e;   /* requantization (qgemm.h), channel = output channel */
    const kiln_tensor *res;   /* QLinearConvAdd with one rounding: R (the output's shape), else NULL */
    const float *t2;          /* QLinearConvSum: the second convolution's product (the output's shape), else NULL */
    void *y;
    kiln_dtype odt;
    int64_t osp, isp, ksz;
} qconv_job;

/* Computes output planes [begin, end) of the N*M (batch, output channel) planes. */
static void qconv_worker(void *arg, int64_t begin, int64_t end)
{
    const qconv_job *j = arg;
    const kiln_qconv_geom *g = j->g;
    int64_t cpg = g->C / g->group, mpg = g->M / g->group;
    for (int64_t nm = begin; nm < end; nm++) {
        int64_t n = nm / g->M, m = nm % g->M;
        int64_t grp = m / mpg;
        const int32_t *wm = j->wi + m * cpg * j->ksz;
        for (int64_t o = 0; o < j->osp; o++) {
            int64_t base[KILN_QC_MAX_SP], r = o;
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
            int64_t oi = nm * j->osp + o;
            if (j->t2)
                kiln__set_i64(j->odt, j->y, oi, kiln__qepi_qt(j->e, (int32_t)acc, m, j->t2[oi]));
            else if (j->res)
                kiln__set_i64(j->odt, j->y, oi,
                              kiln__qepi_qr(j->e, (int32_t)acc, m, (int32_t)kiln__get_i64(j->res->dtype, j->res->data, oi)));
            else if (j->odt == KILN_DT_FLOAT32)
                ((float *)j->y)[oi] = kiln__qepi_f(j->e, (int32_t)acc, m);
            else
                kiln__set_i64(j->odt, j->y, oi, kiln__qepi_q(j->e, (int32_t)acc, m));
        }
    }
}

/* kiln's QLinearConvAdd with one rounding (kiln_res_once = 1, cpu/qadd.h): R (input 9, the output's shape and an
 * 8-bit type), R_scale (10, a float32 scalar, finite and > 0), R_zero_point (11, absent or a scalar of R's type) into
 * e's residual terms; the output quantized (inputs 6, 7: C's), its activation linear (kiln_act none, Relu, Clip) */
kiln_status kiln__qconv_once_res(kiln_kctx *ctx, kiln_qepi *e, kiln_dtype odt, int nd, const int64_t *odims, float ys,
                                 const kiln_tensor **res)
{
    const kiln_tensor *r = kiln__kin(ctx, 9), *rs = kiln__kin(ctx, 10), *rz = kiln__kin(ctx, 11);
    if (ctx->n_in != 12 || kiln__attr_i(ctx->node, "kiln_res_float", 0) || odt == KILN_DT_FLOAT32)
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG,
                          "a one-rounding QLinearConvAdd has 12 inputs and a quantized output (no float form)");
    if (!e->lin || (e->out != KILN_QOUT_U8 && e->out != KILN_QOUT_S8) || odt == KILN_DT_UINT16 || odt == KILN_DT_INT16)
        return kiln__kerr(ctx, KILN_ERR_UNSUPPORTED,
                          "a one-rounding QLinearConvAdd needs an 8-bit output and a linear activation (none, Relu, Clip)");
    if (!r || (r->dtype != KILN_DT_UINT8 && r->dtype != KILN_DT_INT8) || r->ndim != nd ||
        memcmp(r->dims, odims, sizeof(int64_t) * (size_t)nd))
        return kiln__kerr(ctx, KILN_ERR_SHAPE, "R must be uint8/int8 of the convolution output's shape");
    if (!rs || rs->dtype != KILN_DT_FLOAT32 || numel_of(rs) != 1 || !(*(const float *)rs->data > 0) ||
        !isfinite(*(const float *)rs->data))
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "R_scale must be a float32 scalar, finite and > 0");
    if (rz && (rz->dtype != r->dtype || numel_of(rz) != 1))
        return kiln__kerr(ctx, KILN_ERR_DTYPE, "R_zero_point must be a scalar of R's type");
    e->res_k = *(const float *)rs->data / ys;
    e->res_zp = rz ? (int32_t)kiln__get_i64(rz->dtype, rz->data, 0) : 0;
    *res = r;
    return KILN_OK;
}

/* QLinearConvSum's second convolution (inputs 9-15: x2, x2_scale, x2_zero_point, w2, w2_scale, w2_zero_point, B2):
 * a 1x1 filter, no padding, strides kiln_sum_strides (default 1), one group, over the output's pixels (N, M, P, Q =
 * odims); its product t2 = (float)(acc2 + B2[m]) * mult2[m], mult2 = x2_scale * w2_scale[m] / C_scale (QLinearConv's
 * requantizing multiplier for an output of scale C_scale, kiln__qepi_setup's), into *out (kiln__malloc'd, the
 * output's shape, NCHW) */
typedef struct qsum_job {
    const kiln_tensor *x, *w, *b, *xz, *wz;
    const float *mult;
    float *t2;
    int64_t C, H, W, P, Q, M, sh, sw;
} qsum_job;

static void qsum_worker(void *arg, int64_t begin, int64_t end)
{
    const qsum_job *j = arg;
    int32_t xz = j->xz ? (int32_t)kiln__get_i64(j->xz->dtype, j->xz->data, 0) : 0;
    for (int64_t nm = begin; nm < end; nm++) {
        int64_t n = nm / j->M, m = nm % j->M;
        int32_t wz = j->wz ? (int32_t)kiln__get_i64(j->wz->dtype, j->wz->data, numel_of(j->wz) == 1 ? 0 : m) : 0;
        for (int64_t p = 0; p < j->P; p++)
            for (int64_t q = 0; q < j->Q; q++) {
                int64_t acc = j->b ? ((const int32_t *)j->b->data)[m] : 0;
                for (int64_t c = 0; c < j->C; c++) {
                    int64_t xi = ((n * j->C + c) * j->H + p * j->sh) * j->W + q * j->sw;
                    acc += (int64_t)((int32_t)kiln__get_i64(j->x->dtype, j->x->data, xi) - xz) *
                           ((int32_t)kiln__get_i64(j->w->dtype, j->w->data, m * j->C + c) - wz);
                }
                j->t2[(nm * j->P + p) * j->Q + q] = (float)(int32_t)acc * j->mult[m];
            }
    }
}

static kiln_status qconv_sum_t2(kiln_kctx *ctx, const kiln_qepi *e, kiln_dtype odt, int nd, const int64_t *odims,
                                float **out)
{
    *out = NULL;
    if (ctx->n_in < 15 || odt == KILN_DT_FLOAT32 || !e->lin || (e->out != KILN_QOUT_U8 && e->out != KILN_QOUT_S8) ||
        odt == KILN_DT_UINT16 || odt == KILN_DT_INT16)
        return kiln__kerr(ctx, KILN_ERR_UNSUPPORTED,
                          "QLinearConvSum needs 15 or 16 inputs, an 8-bit output and a linear activation (none, Relu, Clip)");
    const kiln_tensor *x = kiln__kin(ctx, 9), *xs = kiln__kin(ctx, 10), *xz = kiln__kin(ctx, 11);
    const kiln_tensor *w = kiln__kin(ctx, 12), *ws = kiln__kin(ctx, 13), *wz = kiln__kin(ctx, 14);
    const kiln_tensor *b = kiln__kin(ctx, 15), *ys = kiln__kin(ctx, 6), *yz = kiln__kin(ctx, 7);
    if (!x || !xs || !w || !ws || nd != 4)
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "QLinearConvSum: x2, x2_scale, w2, w2_scale and a 2-D image");
    if (kiln__prep_dropped(w))
        return kiln__prep_missing(ctx, 12);
    if ((x->dtype != KILN_DT_UINT8 && x->dtype != KILN_DT_INT8) || (w->dtype != KILN_DT_UINT8 && w->dtype != KILN_DT_INT8))
        return kiln__kerr(ctx, KILN_ERR_DTYPE, "x2 and w2 must be uint8/int8");
    if ((xz && (xz->dtype != x->dtype || numel_of(xz) != 1)) || (wz && wz->dtype != w->dtype))
        return kiln__kerr(ctx, KILN_ERR_DTYPE, "x2 / w2 zero points: their tensor's type, x2's a scalar");
    if (xs->dtype != KILN_DT_FLOAT32 || ws->dtype != KILN_DT_FLOAT32 || numel_of(xs) != 1)
        return kiln__kerr(ctx, KILN_ERR_DTYPE, "x2_scale (a scalar) and w2_scale must be float32");
    if (b && (b->dtype != KILN_DT_INT32 || numel_of(b) != odims[1]))
        return kiln__kerr(ctx, KILN_ERR_SHAPE, "B2 must be int32 of M=%lld elements", (long long)odims[1]);
    const int64_t *st;
    int nst = kiln__attr_ints(ctx->node, "kiln_sum_strides", &st);
    int64_t sh = nst == 2 ? st[0] : 1, sw = nst == 2 ? st[1] : 1;
    if ((nst >= 0 && nst != 2) || sh < 1 || sw < 1)
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "kiln_sum_strides: two strides >= 1");
    if (x->ndim != 4 || w->ndim != 4 || w->dims[0] != odims[1] || w->dims[1] != x->dims[1] || w->dims[2] != 1 ||
        w->dims[3] != 1 || x->dims[0] != odims[0] || x->dims[2] < 1 || x->dims[3] < 1 ||
        (x->dims[2] - 1) / sh + 1 != odims[2] || (x->dims[3] - 1) / sw + 1 != odims[3])
        return kiln__kerr(ctx, KILN_ERR_SHAPE, "QLinearConvSum: the second convolution (1x1) must give the output's shape");
    int64_t nws = numel_of(ws);
    if ((nws != 1 && nws != odims[1]) || (wz && numel_of(wz) != 1 && numel_of(wz) != odims[1]))
        return kiln__kerr(ctx, KILN_ERR_SHAPE, "w2_scale / w2_zero_point must have 1 or M elements");
    int64_t total = odims[0] * odims[1] * odims[2] * odims[3];
    if ((double)total * (double)x->dims[1] > 4e11)
        return kiln__kerr(ctx, KILN_ERR_LIMIT, "convolution is too large for the reference kernel");
    kiln_qepi e2;
    float *buf = NULL;
    KILN_TRY(kiln__qepi_setup(ctx, &e2, odt, true, odims[1], *(const float *)xs->data, ws, 1.0f, ys, yz, &buf));
    float *t2 = kiln__malloc(sizeof(float) * (size_t)(total ? total : 1));
    if (!t2) {
        kiln__free(buf);
        return kiln__kerr(ctx, KILN_ERR_NOMEM, "out of memory");
    }
    qsum_job j = {.x = x, .w = w, .b = b, .xz = xz, .wz = wz, .mult = e2.mult, .t2 = t2, .C = x->dims[1],
                  .H = x->dims[2], .W = x->dims[3], .P = odims[2], .Q = odims[3], .M = odims[1], .sh = sh, .sw = sw};
    int64_t per = odims[2] * odims[3] * x->dims[1];
    kiln__parallel_for(ctx->pool, ctx->nthreads, odims[0] * odims[1], per > 0 ? 1 + (int64_t)(1 << 16) / per : 1,
                       qsum_worker, &j);
    kiln__free(buf);
    *out = t2;
    return KILN_OK;
}

static kiln_status k_qlinearconv(kiln_kctx *ctx)
{
    const kiln_tensor *x = kiln__kin(ctx, 0), *xs = kiln__kin(ctx, 1), *xz = kiln__kin(ctx, 2);
    const kiln_tensor *w = kiln__kin(ctx, 3), *ws = kiln__kin(ctx, 4), *wz = kiln__kin(ctx, 5);
    const kiln_tensor *ys = kiln__kin(ctx, 6), *yz = kiln__kin(ctx, 7), *b = kiln__kin(ctx, 8);
    if (!x || !xs || !w || !ws || !ys)
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "missing input");
    if (kiln__prep_dropped(w)) /* stored only packed, for the fast kernel of another host */
        return kiln__prep_missing(ctx, 3);
    double lo, hi;
    if ((x->dtype != KILN_DT_UINT8 && x->dtype != KILN_DT_INT8) || (w->dtype != KILN_DT_UINT8 && w->dtype != KILN_DT_INT8))
        return kiln__kerr(ctx, KILN_ERR_DTYPE, "x and w must be uint8/int8");
    if ((xz && xz->dtype != x->dtype) || (wz && wz->dtype != w->dtype))
        return kiln__kerr(ctx, KILN_ERR_DTYPE, "zero point dtype mismatch");
    kiln_dtype odt = kiln__attr_i(ctx->node, "kiln_out_float", 0) ? KILN_DT_FLOAT32 : yz ? yz->dtype : x->dtype;
    if (odt != KILN_DT_FLOAT32 && !q_range(odt, &lo, &hi))
        return kiln__kerr(ctx, KILN_ERR_DTYPE, "unsupported output dtype %s", kiln_dtype_name(odt));
    if (xs->dtype != KILN_DT_FLOAT32 || ws->dtype != KILN_DT_FLOAT32 || ys->dtype != KILN_DT_FLOAT32)
        return kiln__kerr(ctx, KILN_ERR_DTYPE, "scales must be float32");
    if (b && b->dtype != KILN_DT_INT32)
        return kiln__kerr(ctx, KILN_ERR_DTYPE, "bias must be int32");
    kiln_qconv_geom g;
    memset(&g, 0, sizeof g);
    KILN_TRY(kiln__qconv_geom(ctx, x, w, &g));
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
    /* work estimate guard: N * out_spatial * numel(w) MACs */
    if ((double)g.N * (double)osp * (double)nw > 4e11)
        return kiln__kerr(ctx, KILN_ERR_LIMIT, "convolution is too large for the reference kernel");
    kiln_qepi e;
    float *sbuf = NULL;
    const kiln_tensor *res = NULL;
    KILN_TRY(kiln__qepi_setup(ctx, &e, odt, true, g.M, *(const float *)xs->data, ws, 1.0f, ys, yz, &sbuf));
    if (kiln__qconv_once(ctx->node)) {
        kiln_status rst = kiln__qconv_once_res(ctx, &e, odt, x->ndim, odims, *(const float *)ys->data, &res);
        if (rst != KILN_OK) {
            kiln__free(sbuf);
            return rst;
        }
    }
    float *t2 = NULL;   /* QLinearConvSum: the second convolution's product */
    if (ctx->node->op == KILN_OP_QLinearConvSum) {
        kiln_status rst = qconv_sum_t2(ctx, &e, odt, x->ndim, odims, &t2);
        if (rst != KILN_OK) {
            kiln__free(sbuf);
            return rst;
        }
    }
    if (kiln__shape_numel(x->ndim, odims) == 0 || nw == 0)
        goto fill_bias_only;

    {
        int32_t *xi = kiln__malloc(sizeof(int32_t) * (size_t)(nx ? nx : 1));
        int32_t *wi = kiln__malloc(sizeof(int32_t) * (size_t)nw);
        int64_t *koff = kiln__malloc(sizeof(int64_t) * (size_t)ksz * (size_t)g.nsp);
        if (!xi || !wi || !koff) {
            kiln__free(xi);
            kiln__free(wi);
            kiln__free(koff);
            kiln__free(sbuf);
            kiln__free(t2);
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
        qconv_job job = {.g = &g, .xi = xi, .wi = wi, .koff = koff, .bias = b ? b->data : NULL, .e = &e, .res = res,
                         .t2 = t2, .y = ctx->out[0]->data, .odt = odt, .osp = osp, .isp = isp, .ksz = ksz};
        int64_t per = osp * (g.C / g.group) * ksz;
        kiln__parallel_for(ctx->pool, ctx->nthreads, g.N * g.M, per > 0 ? 1 + (int64_t)(1 << 16) / per : 1, qconv_worker, &job);
        kiln__free(xi);
        kiln__free(wi);
        kiln__free(koff);
        kiln__free(sbuf);
        kiln__free(t2);
        return KILN_OK;
    }
fill_bias_only:
    /* empty weights / output: y = requantized bias */
    {
        int64_t total = kiln__shape_numel(x->ndim, odims);
        for (int64_t i = 0; i < total; i++) {
            int64_t m = (i / (osp ? osp : 1)) % (g.M ? g.M : 1);
            int32_t acc = b ? ((const int32_t *)b->data)[m] : 0;
            if (t2)
                kiln__set_i64(odt, ctx->out[0]->data, i, kiln__qepi_qt(&e, acc, m, t2[i]));
            else if (res)
                kiln__set_i64(odt, ctx->out[0]->data, i,
                              kiln__qepi_qr(&e, acc, m, (int32_t)kiln__get_i64(res->dtype, res->data, i)));
            else if (odt == KILN_DT_FLOAT32)
                ((float *)ctx->out[0]->data)[i] = kiln__qepi_f(&e, acc, m);
            else
                kiln__set_i64(odt, ctx->out[0]->data, i, kiln__qepi_q(&e, acc, m));
        }
    }
    kiln__free(sbuf);
    kiln__free(t2);
    return KILN_OK;
}

/* ---- com.microsoft QGemm ---- */

/* element (i, j) of op(T) for a 2-D u8/s8 tensor, t = transposed */
static int32_t q2d(const kiln_tensor *T, bool t, int64_t i, int64_t j)
{
    int64_t at = t ? j * T->dims[1] + i : i * T->dims[1] + j;
    return T->dtype == KILN_DT_UINT8 ? ((const uint8_t *)T->data)[at] : ((const int8_t *)T->data)[at];
}

/* Y = requant(alpha * a_scale * b_scale[n] * ((A - a_zp) x (B - b_zp[n]) + C)), C int32 broadcast to
 * [M, N]; y_scale absent: float32 Y. The node's kiln_act applies before requantization. */
static kiln_status k_qgemm(kiln_kctx *ctx)
{
    const kiln_tensor *a = kiln__kin(ctx, 0), *as = kiln__kin(ctx, 1), *az = kiln__kin(ctx, 2);
    const kiln_tensor *b = kiln__kin(ctx, 3), *bs = kiln__kin(ctx, 4), *bz = kiln__kin(ctx, 5);
    const kiln_tensor *c = kiln__kin(ctx, 6), *ys = kiln__kin(ctx, 7), *yz = kiln__kin(ctx, 8);
    if (!a || !as || !b || !bs)
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "missing input");
    if (kiln__prep_dropped(b))
        return kiln__prep_missing(ctx, 3);
    if ((a->dtype != KILN_DT_UINT8 && a->dtype != KILN_DT_INT8) || (b->dtype != KILN_DT_UINT8 && b->dtype != KILN_DT_INT8))
        return kiln__kerr(ctx, KILN_ERR_DTYPE, "A and B must be uint8/int8");
    if (a->ndim != 2 || b->ndim != 2)
        return kiln__kerr(ctx, KILN_ERR_SHAPE, "A and B must be 2-D (ranks %d, %d)", a->ndim, b->ndim);
    bool ta = kiln__attr_i(ctx->node, "transA", 0) != 0, tb = kiln__attr_i(ctx->node, "transB", 0) != 0;
    int64_t M = a->dims[ta ? 1 : 0], K = a->dims[ta ? 0 : 1], N = b->dims[tb ? 0 : 1];
    if (b->dims[tb ? 1 : 0] != K)
        return kiln__kerr(ctx, KILN_ERR_SHAPE, "inner dims differ: %lld vs %lld", (long long)K,
                          (long long)b->dims[tb ? 1 : 0]);
    KILN_TRY(check_scale_dtype(ctx, as));
    KILN_TRY(check_scale_dtype(ctx, bs));
    if (numel_of(as) != 1 || (az && (numel_of(az) != 1 || az->dtype != a->dtype)))
        return kiln__kerr(ctx, KILN_ERR_SHAPE, "a_scale and a_zero_point must be scalars of A's type");
    if ((numel_of(bs) != 1 && numel_of(bs) != N) || (bz && ((numel_of(bz) != 1 && numel_of(bz) != N) || bz->dtype != b->dtype)))
        return kiln__kerr(ctx, KILN_ERR_SHAPE, "b_scale / b_zero_point must have 1 or N=%lld elements of B's type", (long long)N);
    int64_t cr = 0, cc = 0; /* C's extent along M and N after broadcasting: 1 or the full size */
    if (c) {
        if (c->dtype != KILN_DT_INT32 || c->ndim > 2)
            return kiln__kerr(ctx, KILN_ERR_DTYPE, "C must be an int32 tensor of rank <= 2");
        cc = c->ndim >= 1 ? c->dims[c->ndim - 1] : 1;
        cr = c->ndim == 2 ? c->dims[0] : 1;
        if ((cc != 1 && cc != N) || (cr != 1 && cr != M))
            return kiln__kerr(ctx, KILN_ERR_SHAPE, "C does not broadcast to [%lld, %lld]", (long long)M, (long long)N);
    }
    if (ys) {
        KILN_TRY(check_scale_dtype(ctx, ys));
        if (numel_of(ys) != 1 || (yz && numel_of(yz) != 1))
            return kiln__kerr(ctx, KILN_ERR_SHAPE, "y_scale and y_zero_point must be scalars");
    }
    kiln_dtype odt = !ys ? KILN_DT_FLOAT32 : yz ? yz->dtype : a->dtype;
    if (odt != KILN_DT_FLOAT32 && odt != KILN_DT_UINT8 && odt != KILN_DT_INT8)
        return kiln__kerr(ctx, KILN_ERR_DTYPE, "unsupported output dtype %s", kiln_dtype_name(odt));
    if ((double)M * (double)N * (double)K > 4e11)
        return kiln__kerr(ctx, KILN_ERR_LIMIT, "QGemm is too large for the reference kernel");
    kiln_qepi e;
    float *sbuf = NULL;
    KILN_TRY(kiln__qepi_setup(ctx, &e, odt, false, N, (float)kiln__get_f64(as->dtype, as->data, 0), bs,
                              kiln__attr_f(ctx->node, "alpha", 1.0f), ys, yz, &sbuf));
    int64_t dims[2] = {M, N};
    kiln_status st = kiln__kout(ctx, 0, odt, 2, dims);
    int32_t za = az ? (int32_t)kiln__get_i64(az->dtype, az->data, 0) : 0;
    for (int64_t i = 0; st == KILN_OK && i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            int32_t zb = bz ? (int32_t)kiln__get_i64(bz->dtype, bz->data, numel_of(bz) == 1 ? 0 : j) : 0;
            int64_t acc = 0;
            for (int64_t k = 0; k < K; k++)
                acc += (int64_t)(q2d(a, ta, i, k) - za) * (q2d(b, tb, k, j) - zb);
            if (c)
                acc += ((const int32_t *)c->data)[(cr == 1 ? 0 : i) * cc + (cc == 1 ? 0 : j)];
            kiln__qepi_store(&e, ctx->out[0]->data, N, i, j, (int32_t)(uint32_t)(uint64_t)acc);
        }
    kiln__free(sbuf);
    return st;
}

/* kiln's QLookup (passes/p_qlookup.c): Y[i] = T[X[i]'s byte], T 256 values of Y's type. Shared with the fast
 * kernel, which takes the same checks (qgemm.h). */
kiln_status kiln__qlookup_check(kiln_kctx *ctx, const kiln_tensor **x, const kiln_tensor **t)
{
    *x = kiln__kin(ctx, 0);
    *t = kiln__kin(ctx, 1);
    if (!*x || !*t)
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "QLookup needs X and its table T");
    if ((*x)->dtype != KILN_DT_UINT8 && (*x)->dtype != KILN_DT_INT8)
        return kiln__kerr(ctx, KILN_ERR_DTYPE, "QLookup's X must be uint8 or int8, not %s",
                          kiln_dtype_name((*x)->dtype));
    if (((*t)->dtype != KILN_DT_UINT8 && (*t)->dtype != KILN_DT_INT8) || numel_of(*t) != 256 || !(*t)->data)
        return kiln__kerr(ctx, KILN_ERR_SHAPE, "QLookup's table T must hold 256 uint8 or int8 values (%s, %lld)",
                          kiln_dtype_name((*t)->dtype), (long long)numel_of(*t));
    return kiln__kout_uninit(ctx, 0, (*t)->dtype, (*x)->ndim, (*x)->dims);   /* y[i] = t[x[i]] for every i */
}

static kiln_status k_qlookup(kiln_kctx *ctx)
{
    const kiln_tensor *x, *t;
    KILN_TRY(kiln__qlookup_check(ctx, &x, &t));
    const uint8_t *xs = x->data, *tb = t->data;
    uint8_t *y = ctx->out[0]->data;
    for (int64_t i = 0, n = numel_of(x); i < n; i++)
        y[i] = tb[xs[i]];
    return KILN_OK;
}

const kiln_kernel_reg kiln__ref_quant[] = {
    {KILN_OP_QuantizeLinear, k_quantize},
    {KILN_OP_DequantizeLinear, k_dequantize},
    {KILN_OP_DynamicQuantizeLinear, k_dynquant},
    {KILN_OP_QLinearConv, k_qlinearconv},
    {KILN_OP_QLinearConvSum, k_qlinearconv},
    {KILN_OP_QGemm, k_qgemm},
    {KILN_OP_QLookup, k_qlookup},
    {KILN_OP_COUNT, NULL},
};

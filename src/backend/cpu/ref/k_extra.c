/* Reference kernels: extra.
 *   losses:  NegativeLogLikelihoodLoss, SoftmaxCrossEntropyLoss
 *   sampling: GridSample (4-D; bilinear / nearest / bicubic; zeros / border / reflection padding)
 *   signal:  DFT, STFT, HannWindow, HammingWindow, BlackmanWindow, MelWeightMatrix
 *   linalg:  Det (LU with partial pivoting)
 * Math is done in double; float32 tensors are read and written with plain contiguous loops,
 * other float dtypes go through kiln__convert. */
#include "../../kernel.h"
#include <math.h>
#include <stdatomic.h>
#include <stdint.h>

#ifndef M_PI
#define M_PI 3.14159265358979323846
#endif

/* ------------------------------------------------------------------------------------------ */
/* helpers                                                                                    */
/* ------------------------------------------------------------------------------------------ */

static bool is_float_dt(kiln_dtype dt)
{
    return dt == KILN_DT_FLOAT32 || dt == KILN_DT_FLOAT64 || dt == KILN_DT_FLOAT16 || dt == KILN_DT_BFLOAT16;
}

static int64_t tnumel(const kiln_tensor *t)
{
    return kiln__shape_numel(t->ndim, t->dims);
}

/* Allocates n doubles (at least one); NULL on failure or absurd n. */
static double *dbuf(int64_t n)
{
    if (n < 0 || (uint64_t)n > SIZE_MAX / (2 * sizeof(double)))
        return NULL;
    return kiln__malloc((size_t)(n > 0 ? n : 1) * sizeof(double));
}

/* Checks that t holds at least n elements of its dtype. */
static bool has_data(const kiln_tensor *t, int64_t n)
{
    size_t es = kiln_dtype_size(t->dtype);
    if (n < 0 || !es)
        return false;
    if (n == 0)
        return true;
    return t->data && (uint64_t)n <= t->nbytes / es;
}

/* Reads n elements of t as doubles. */
static kiln_status load_f64(const kiln_kctx *ctx, const kiln_tensor *t, double *dst, int64_t n)
{
    if (!has_data(t, n))
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "tensor data is missing or shorter than its shape");
    if (n == 0)
        return KILN_OK;
    if (t->dtype == KILN_DT_FLOAT32) {
        const float *s = t->data;
        for (int64_t i = 0; i < n; i++)
            dst[i] = s[i];
        return KILN_OK;
    }
    if (t->dtype == KILN_DT_FLOAT64) {
        memcpy(dst, t->data, (size_t)n * sizeof(double));
        return KILN_OK;
    }
    return kiln__convert(KILN_DT_FLOAT64, dst, t->dtype, t->data, n);
}

/* Writes n doubles into t (converting to its dtype). */
static kiln_status store_f64(kiln_tensor *t, const double *src, int64_t n)
{
    if (n <= 0)
        return KILN_OK;
    if (t->dtype == KILN_DT_FLOAT32) {
        float *d = t->data;
        for (int64_t i = 0; i < n; i++)
            d[i] = (float)src[i];
        return KILN_OK;
    }
    if (t->dtype == KILN_DT_FLOAT64) {
        memcpy(t->data, src, (size_t)n * sizeof(double));
        return KILN_OK;
    }
    return kiln__convert(t->dtype, t->data, KILN_DT_FLOAT64, src, n);
}

static kiln_status scalar_i64(const kiln_kctx *ctx, const kiln_tensor *t, const char *what, int64_t *v)
{
    if (!t)
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "missing input '%s'", what);
    if (!kiln__dtype_is_int(t->dtype))
        return kiln__kerr(ctx, KILN_ERR_DTYPE, "'%s' must be an integer tensor, got %s", what,
                          kiln_dtype_name(t->dtype));
    if (t->ndim > 1 || tnumel(t) != 1 || !has_data(t, 1))
        return kiln__kerr(ctx, KILN_ERR_SHAPE, "'%s' must be a scalar", what);
    *v = kiln__get_i64(t->dtype, t->data, 0);
    return KILN_OK;
}

static kiln_status scalar_f64(const kiln_kctx *ctx, const kiln_tensor *t, const char *what, double *v)
{
    if (!t)
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "missing input '%s'", what);
    if (!is_float_dt(t->dtype) && !kiln__dtype_is_int(t->dtype))
        return kiln__kerr(ctx, KILN_ERR_DTYPE, "'%s' must be a numeric tensor, got %s", what,
                          kiln_dtype_name(t->dtype));
    if (t->ndim > 1 || tnumel(t) != 1 || !has_data(t, 1))
        return kiln__kerr(ctx, KILN_ERR_SHAPE, "'%s' must be a scalar", what);
    *v = kiln__get_f64(t->dtype, t->data, 0);
    return KILN_OK;
}

/* ------------------------------------------------------------------------------------------ */
/* NegativeLogLikelihoodLoss / SoftmaxCrossEntropyLoss                                        */
/* ------------------------------------------------------------------------------------------ */

enum { RED_NONE, RED_SUM, RED_MEAN };

static kiln_status parse_reduction(const kiln_kctx *ctx, int *red)
{
    const char *r = kiln__attr_s(ctx->node, "reduction", "mean");
    if (!strcmp(r, "none"))
        *red = RED_NONE;
    else if (!strcmp(r, "sum"))
        *red = RED_SUM;
    else if (!strcmp(r, "mean"))
        *red = RED_MEAN;
    else
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "unknown reduction '%s'", r);
    return KILN_OK;
}

/* Validates input [N,C,d...], target [N,d...], weight [C]; returns N, C, D = prod(d). */
static kiln_status loss_check(const kiln_kctx *ctx, const kiln_tensor *x, const kiln_tensor *tg,
                              const kiln_tensor *w, int64_t *N, int64_t *C, int64_t *D)
{
    if (!x || !tg)
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "missing input");
    if (!is_float_dt(x->dtype))
        return kiln__kerr(ctx, KILN_ERR_DTYPE, "input must be float, got %s", kiln_dtype_name(x->dtype));
    if (tg->dtype != KILN_DT_INT32 && tg->dtype != KILN_DT_INT64)
        return kiln__kerr(ctx, KILN_ERR_DTYPE, "target must be int32 or int64, got %s",
                          kiln_dtype_name(tg->dtype));
    if (x->ndim < 2)
        return kiln__kerr(ctx, KILN_ERR_SHAPE, "input must have rank >= 2, got %d", x->ndim);
    if (tg->ndim != x->ndim - 1)
        return kiln__kerr(ctx, KILN_ERR_SHAPE, "target rank %d must be input rank %d - 1", tg->ndim, x->ndim);
    if (tg->dims[0] != x->dims[0])
        return kiln__kerr(ctx, KILN_ERR_SHAPE, "target batch %lld != input batch %lld",
                          (long long)tg->dims[0], (long long)x->dims[0]);
    for (int i = 1; i < tg->ndim; i++)
        if (tg->dims[i] != x->dims[i + 1])
            return kiln__kerr(ctx, KILN_ERR_SHAPE, "target dim %d (%lld) != input dim %d (%lld)", i,
                              (long long)tg->dims[i], i + 1, (long long)x->dims[i + 1]);
    int64_t nx = tnumel(x), nt = tnumel(tg);
    if (nx < 0 || nt < 0)
        return kiln__kerr(ctx, KILN_ERR_SHAPE, "invalid shape");
    if (!has_data(x, nx) || !has_data(tg, nt))
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "tensor data is missing or shorter than its shape");
    *N = x->dims[0];
    *C = x->dims[1];
    int64_t d = 1;
    for (int i = 2; i < x->ndim; i++)
        d *= x->dims[i];   /* cannot overflow: nx did not */
    *D = d;
    if (w) {
        if (!is_float_dt(w->dtype))
            return kiln__kerr(ctx, KILN_ERR_DTYPE, "weight must be float, got %s", kiln_dtype_name(w->dtype));
        if (w->ndim != 1 || w->dims[0] != *C)
            return kiln__kerr(ctx, KILN_ERR_SHAPE, "weight must have shape [C=%lld]", (long long)*C);
    }
    return KILN_OK;
}

/* loss[n,d] = -logp[n, t, d] * w[t] (0 where t == ignore_index), then the reduction; writes output 0. */
static kiln_status nll_core(kiln_kctx *ctx, const double *logp, const kiln_tensor *tg, const kiln_tensor *w,
                            int64_t N, int64_t C, int64_t D, kiln_dtype odt)
{
    int red = RED_MEAN;
    KILN_TRY(parse_reduction(ctx, &red));
    const kiln_attr *iia = kiln__attr(ctx->node, "ignore_index");
    bool has_ii = iia && iia->type == KILN_ATTR_INT;
    int64_t ii = has_ii ? iia->i : 0;
    int64_t nt = N * D;
    kiln_status st = KILN_OK;
    double *wt = NULL, *res = NULL;
    if (w) {
        wt = dbuf(C);
        if (!wt)
            return kiln__kerr(ctx, KILN_ERR_NOMEM, "out of memory");
        st = load_f64(ctx, w, wt, C);
        if (st != KILN_OK)
            goto done;
    }
    if (red == RED_NONE) {
        res = dbuf(nt);
        if (!res) {
            st = kiln__kerr(ctx, KILN_ERR_NOMEM, "out of memory");
            goto done;
        }
    }
    double sum = 0, wsum = 0;
    const int32_t *t32 = tg->dtype == KILN_DT_INT32 ? tg->data : NULL;
    const int64_t *t64 = tg->dtype == KILN_DT_INT64 ? tg->data : NULL;
    for (int64_t n = 0; n < N; n++) {
        for (int64_t d = 0; d < D; d++) {
            int64_t k = n * D + d;
            int64_t t = t32 ? t32[k] : t64[k];
            double l = 0, wk = 0;
            if (!(has_ii && t == ii)) {
                if (t < 0 || t >= C) {
                    st = kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "target value %lld is out of range [0, %lld)",
                                    (long long)t, (long long)C);
                    goto done;
                }
                wk = wt ? wt[t] : 1.0;
                l = -logp[(n * C + t) * D + d] * wk;
            }
            if (res)
                res[k] = l;
            sum += l;
            wsum += wk;
        }
    }
    if (red == RED_NONE) {
        st = kiln__kout(ctx, 0, odt, tg->ndim, tg->dims);
        if (st == KILN_OK)
            st = store_f64(ctx->out[0], res, nt);
    } else {
        double v = red == RED_SUM ? sum : sum / wsum;
        int64_t one = 1;
        st = kiln__kout(ctx, 0, odt, 0, &one);
        if (st == KILN_OK)
            st = store_f64(ctx->out[0], &v, 1);
    }
done:
    kiln__free(wt);
    kiln__free(res);
    return st;
}

static kiln_status k_nllloss(kiln_kctx *ctx)
{
    const kiln_tensor *x = kiln__kin(ctx, 0), *tg = kiln__kin(ctx, 1), *w = kiln__kin(ctx, 2);
    int64_t N = 0, C = 0, D = 0;
    KILN_TRY(loss_check(ctx, x, tg, w, &N, &C, &D));
    int64_t nx = N * C * D;
    double *xb = dbuf(nx);
    if (!xb)
        return kiln__kerr(ctx, KILN_ERR_NOMEM, "out of memory");
    kiln_status st = load_f64(ctx, x, xb, nx);
    if (st == KILN_OK)
        st = nll_core(ctx, xb, tg, w, N, C, D, x->dtype);
    kiln__free(xb);
    return st;
}

static kiln_status k_sce(kiln_kctx *ctx)
{
    const kiln_tensor *x = kiln__kin(ctx, 0), *tg = kiln__kin(ctx, 1), *w = kiln__kin(ctx, 2);
    int64_t N = 0, C = 0, D = 0;
    KILN_TRY(loss_check(ctx, x, tg, w, &N, &C, &D));
    int64_t nx = N * C * D;
    double *xb = dbuf(nx);
    if (!xb)
        return kiln__kerr(ctx, KILN_ERR_NOMEM, "out of memory");
    kiln_status st = load_f64(ctx, x, xb, nx);
    if (st != KILN_OK)
        goto done;
    /* log_softmax over axis 1 */
    for (int64_t n = 0; n < N; n++) {
        double *b = xb + n * C * D;
        for (int64_t d = 0; d < D; d++) {
            double mx = -INFINITY;
            for (int64_t c = 0; c < C; c++)
                if (b[c * D + d] > mx)
                    mx = b[c * D + d];
            double s = 0;
            for (int64_t c = 0; c < C; c++)
                s += exp(b[c * D + d] - mx);
            double ls = mx + log(s);
            for (int64_t c = 0; c < C; c++)
                b[c * D + d] -= ls;
        }
    }
    st = nll_core(ctx, xb, tg, w, N, C, D, x->dtype);
    if (st == KILN_OK && ctx->n_out > 1 && ctx->out[1]) {
        st = kiln__kout(ctx, 1, x->dtype, x->ndim, x->dims);
        if (st == KILN_OK)
            st = store_f64(ctx->out[1], xb, nx);
    }
done:
    kiln__free(xb);
    return st;
}

/* ------------------------------------------------------------------------------------------ */
/* GridSample (PyTorch grid_sample semantics)                                                 */
/* ------------------------------------------------------------------------------------------ */

enum { GS_BILINEAR, GS_NEAREST, GS_BICUBIC };
enum { GS_ZEROS, GS_BORDER, GS_REFLECTION };

typedef struct gs_job {
    int mode, pad;
    bool align;
    int64_t N, C, H, W, Ho, Wo;
    const double *grid;         /* [N, Ho, Wo, 2] */
    const float *xf;            /* float32 input, or */
    const double *xd;           /* double input */
    float *yf;
    double *yd;
} gs_job;

static double gs_unnormalize(double c, int64_t size, bool align)
{
    return align ? (c + 1) / 2 * (double)(size - 1) : ((c + 1) * (double)size - 1) / 2;
}

static double gs_clip(double c, int64_t size)
{
    return fmin((double)(size - 1), fmax(c, 0));
}

static double gs_reflect(double c, double twice_low, double twice_high)
{
    if (twice_low == twice_high)
        return 0;
    double mn = twice_low / 2, span = (twice_high - twice_low) / 2;
    c = fabs(c - mn);
    double extra = fmod(c, span);
    double flips = floor(c / span);
    return fmod(flips, 2) == 0 ? extra + mn : span - extra + mn;
}

static double gs_coord(double c, int64_t size, int pad, bool align)
{
    if (pad == GS_BORDER) {
        c = gs_clip(c, size);
    } else if (pad == GS_REFLECTION) {
        if (align)
            c = gs_reflect(c, 0, 2 * (double)(size - 1));
        else
            c = gs_reflect(c, -1, 2 * (double)size - 1);
        c = gs_clip(c, size);
    }
    return c;
}

/* Integer index of a tap coordinate (truncated like PyTorch), false when outside [0, size). */
static bool gs_inb(double c, int64_t size, int64_t *i)
{
    if (!(c > -1.0 && c < (double)size))
        return false;
    int64_t v = (int64_t)c;
    if (v < 0 || v >= size)
        return false;
    *i = v;
    return true;
}

static double cubic1(double x)
{
    const double A = -0.75;
    return ((A + 2) * x - (A + 3)) * x * x + 1;
}

static double cubic2(double x)
{
    const double A = -0.75;
    return ((A * x - 5 * A) * x + 8 * A) * x - 4 * A;
}

static void gs_task(void *p, int64_t begin, int64_t end)
{
    const gs_job *j = p;
    int64_t HW = j->H * j->W, HoWo = j->Ho * j->Wo;
    for (int64_t q = begin; q < end; q++) {
        int64_t n = q / HoWo, pix = q % HoWo;
        double gx = j->grid[q * 2], gy = j->grid[q * 2 + 1];
        int64_t idx[16];
        double wt[16];
        int nt = 0;
        if (j->mode == GS_BICUBIC) {
            double ix = gs_unnormalize(gx, j->W, j->align), iy = gs_unnormalize(gy, j->H, j->align);
            double x0 = floor(ix), y0 = floor(iy), tx = ix - x0, ty = iy - y0;
            double cx[4] = {cubic2(tx + 1), cubic1(tx), cubic1(1 - tx), cubic2(2 - tx)};
            double cy[4] = {cubic2(ty + 1), cubic1(ty), cubic1(1 - ty), cubic2(2 - ty)};
            for (int a = 0; a < 4; a++) {
                int64_t yi;
                if (!gs_inb(gs_coord(y0 - 1 + a, j->H, j->pad, j->align), j->H, &yi))
                    continue;
                for (int b = 0; b < 4; b++) {
                    int64_t xi;
                    if (!gs_inb(gs_coord(x0 - 1 + b, j->W, j->pad, j->align), j->W, &xi))
                        continue;
                    idx[nt] = yi * j->W + xi;
                    wt[nt++] = cx[b] * cy[a];
                }
            }
        } else {
            double ix = gs_coord(gs_unnormalize(gx, j->W, j->align), j->W, j->pad, j->align);
            double iy = gs_coord(gs_unnormalize(gy, j->H, j->align), j->H, j->pad, j->align);
            if (j->mode == GS_NEAREST) {
                int64_t xi, yi;
                if (gs_inb(nearbyint(ix), j->W, &xi) && gs_inb(nearbyint(iy), j->H, &yi)) {
                    idx[0] = yi * j->W + xi;
                    wt[0] = 1;
                    nt = 1;
                }
            } else {
                double x0 = floor(ix), y0 = floor(iy), tx = ix - x0, ty = iy - y0;
                for (int a = 0; a < 2; a++) {
                    int64_t yi;
                    if (!gs_inb(y0 + a, j->H, &yi))
                        continue;
                    for (int b = 0; b < 2; b++) {
                        int64_t xi;
                        if (!gs_inb(x0 + b, j->W, &xi))
                            continue;
                        idx[nt] = yi * j->W + xi;
                        wt[nt++] = (a ? ty : 1 - ty) * (b ? tx : 1 - tx);
                    }
                }
            }
        }
        int64_t xbase = n * j->C * HW, ybase = n * j->C * HoWo + pix;
        if (j->xf) {
            for (int64_t c = 0; c < j->C; c++) {
                const float *xp = j->xf + xbase + c * HW;
                double acc = 0;
                for (int k = 0; k < nt; k++)
                    acc += wt[k] * xp[idx[k]];
                j->yf[ybase + c * HoWo] = (float)acc;
            }
        } else {
            for (int64_t c = 0; c < j->C; c++) {
                const double *xp = j->xd + xbase + c * HW;
                double acc = 0;
                for (int k = 0; k < nt; k++)
                    acc += wt[k] * xp[idx[k]];
                j->yd[ybase + c * HoWo] = acc;
            }
        }
    }
}

static kiln_status k_gridsample(kiln_kctx *ctx)
{
    const kiln_tensor *x = kiln__kin(ctx, 0), *g = kiln__kin(ctx, 1);
    if (!x || !g)
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "missing input");
    gs_job j;
    memset(&j, 0, sizeof j);
    const char *mode = kiln__attr_s(ctx->node, "mode", "bilinear");
    if (!strcmp(mode, "bilinear") || !strcmp(mode, "linear"))
        j.mode = GS_BILINEAR;
    else if (!strcmp(mode, "nearest"))
        j.mode = GS_NEAREST;
    else if (!strcmp(mode, "bicubic") || !strcmp(mode, "cubic"))
        j.mode = GS_BICUBIC;
    else
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "unknown mode '%s'", mode);
    const char *pad = kiln__attr_s(ctx->node, "padding_mode", "zeros");
    if (!strcmp(pad, "zeros"))
        j.pad = GS_ZEROS;
    else if (!strcmp(pad, "border"))
        j.pad = GS_BORDER;
    else if (!strcmp(pad, "reflection"))
        j.pad = GS_REFLECTION;
    else
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "unknown padding_mode '%s'", pad);
    j.align = kiln__attr_i(ctx->node, "align_corners", 0) != 0;
    if (x->ndim != 4 || g->ndim != 4)
        return kiln__kerr(ctx, x->ndim == 5 ? KILN_ERR_UNSUPPORTED : KILN_ERR_SHAPE,
                          "only 4-D input [N,C,H,W] with grid [N,Ho,Wo,2] is supported (got ranks %d, %d)",
                          x->ndim, g->ndim);
    if (g->dims[0] != x->dims[0] || g->dims[3] != 2)
        return kiln__kerr(ctx, KILN_ERR_SHAPE, "grid must have shape [N=%lld, Ho, Wo, 2]", (long long)x->dims[0]);
    if (!is_float_dt(g->dtype))
        return kiln__kerr(ctx, KILN_ERR_DTYPE, "grid must be float, got %s", kiln_dtype_name(g->dtype));
    if (kiln_dtype_size(x->dtype) == 0 || x->dtype == KILN_DT_STRING || x->dtype >= KILN_DT_FP8E4M3 ||
        x->dtype == KILN_DT_COMPLEX64 || x->dtype == KILN_DT_COMPLEX128)
        return kiln__kerr(ctx, KILN_ERR_DTYPE, "unsupported input dtype %s", kiln_dtype_name(x->dtype));
    j.N = x->dims[0];
    j.C = x->dims[1];
    j.H = x->dims[2];
    j.W = x->dims[3];
    j.Ho = g->dims[1];
    j.Wo = g->dims[2];
    int64_t nx = tnumel(x), ng = tnumel(g);
    if (nx < 0 || ng < 0)
        return kiln__kerr(ctx, KILN_ERR_SHAPE, "invalid shape");
    if (!has_data(x, nx) || !has_data(g, ng))
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "tensor data is missing or shorter than its shape");
    int64_t od[4] = {j.N, j.C, j.Ho, j.Wo};
    KILN_TRY(kiln__kout(ctx, 0, x->dtype, 4, od));
    kiln_tensor *y = ctx->out[0];
    int64_t ny = kiln__shape_numel(4, od);
    if (ny == 0)
        return KILN_OK;
    double *gd = dbuf(ng), *xd = NULL, *yd = NULL;
    kiln_status st = KILN_OK;
    if (!gd) {
        st = kiln__kerr(ctx, KILN_ERR_NOMEM, "out of memory");
        goto done;
    }
    st = load_f64(ctx, g, gd, ng);
    if (st != KILN_OK)
        goto done;
    j.grid = gd;
    if (x->dtype == KILN_DT_FLOAT32) {
        j.xf = x->data;
        j.yf = y->data;
    } else if (x->dtype == KILN_DT_FLOAT64) {
        j.xd = x->data;
        j.yd = y->data;
    } else {
        xd = dbuf(nx);
        yd = dbuf(ny);
        if (!xd || !yd) {
            st = kiln__kerr(ctx, KILN_ERR_NOMEM, "out of memory");
            goto done;
        }
        st = kiln__convert(KILN_DT_FLOAT64, xd, x->dtype, x->data, nx);
        if (st != KILN_OK)
            goto done;
        j.xd = xd;
        j.yd = yd;
    }
    int64_t pixels = j.N * j.Ho * j.Wo;
    int64_t grain = 1 + 4096 / (j.C + 1);
    kiln__parallel_for(ctx->pool, ctx->nthreads, pixels, grain, gs_task, &j);
    if (yd)
        st = kiln__convert(y->dtype, y->data, KILN_DT_FLOAT64, yd, ny);
done:
    kiln__free(gd);
    kiln__free(xd);
    kiln__free(yd);
    return st;
}

/* ------------------------------------------------------------------------------------------ */
/* FFT: radix-2 for powers of two, direct DFT for small sizes, Bluestein otherwise            */
/* ------------------------------------------------------------------------------------------ */

#define FFT_MAX_N ((int64_t)1 << 26)

enum { FFT_DIRECT, FFT_RADIX2, FFT_BLUESTEIN };

typedef struct fft_plan {
    int64_t n;        /* transform size */
    int kind;
    double sign;      /* -1 forward, +1 inverse (unscaled) */
    int64_t m;        /* radix-2 size (n, or Bluestein's padded size) */
    double *tw;       /* DIRECT: e^{sign*2pi*i*k/n}, k < n; RADIX2/BLUESTEIN: e^{-2pi*i*k/m}, k < m/2 */
    double *chirp;    /* BLUESTEIN: e^{sign*pi*i*k^2/n}, k < n */
    double *bf;       /* BLUESTEIN: forward FFT (size m) of the conjugate chirp filter */
} fft_plan;

static bool is_pow2(int64_t n)
{
    return n > 0 && (n & (n - 1)) == 0;
}

/* In-place radix-2 FFT of m complex values; sign -1 forward, +1 inverse (unscaled). */
static void fft_pow2(double *a, int64_t m, const double *tw, double sign)
{
    for (int64_t i = 1, j = 0; i < m; i++) {
        int64_t bit = m >> 1;
        for (; j & bit; bit >>= 1)
            j ^= bit;
        j ^= bit;
        if (i < j) {
            double tr = a[2 * i], ti = a[2 * i + 1];
            a[2 * i] = a[2 * j];
            a[2 * i + 1] = a[2 * j + 1];
            a[2 * j] = tr;
            a[2 * j + 1] = ti;
        }
    }
    for (int64_t len = 2; len <= m; len <<= 1) {
        int64_t half = len >> 1, step = m / len;
        for (int64_t i = 0; i < m; i += len) {
            for (int64_t k = 0; k < half; k++) {
                /* tw holds e^{-2pi i k/m}; the inverse uses its conjugate */
                double wr = tw[2 * k * step], wi = sign < 0 ? tw[2 * k * step + 1] : -tw[2 * k * step + 1];
                double *u = a + 2 * (i + k), *v = a + 2 * (i + k + half);
                double vr = v[0] * wr - v[1] * wi, vi = v[0] * wi + v[1] * wr;
                v[0] = u[0] - vr;
                v[1] = u[1] - vi;
                u[0] += vr;
                u[1] += vi;
            }
        }
    }
}

static void fft_plan_free(fft_plan *p)
{
    kiln__free(p->tw);
    kiln__free(p->chirp);
    kiln__free(p->bf);
    memset(p, 0, sizeof *p);
}

static bool fft_plan_init(fft_plan *p, int64_t n, bool inverse)
{
    memset(p, 0, sizeof *p);
    p->n = n;
    p->sign = inverse ? 1.0 : -1.0;
    if (is_pow2(n)) {
        p->kind = FFT_RADIX2;
        p->m = n;
    } else if (n <= 64) {
        p->kind = FFT_DIRECT;
        p->tw = dbuf(2 * n);
        if (!p->tw)
            return false;
        for (int64_t k = 0; k < n; k++) {
            double ang = p->sign * 2 * M_PI * (double)k / (double)n;
            p->tw[2 * k] = cos(ang);
            p->tw[2 * k + 1] = sin(ang);
        }
        return true;
    } else {
        p->kind = FFT_BLUESTEIN;
        int64_t m = 1;
        while (m < 2 * n - 1)
            m <<= 1;
        p->m = m;
    }
    int64_t m = p->m;
    p->tw = dbuf(m > 1 ? m : 2);
    if (!p->tw)
        return false;
    for (int64_t k = 0; k < m / 2; k++) {
        double ang = -2 * M_PI * (double)k / (double)m;
        p->tw[2 * k] = cos(ang);
        p->tw[2 * k + 1] = sin(ang);
    }
    if (p->kind == FFT_BLUESTEIN) {
        p->chirp = dbuf(2 * n);
        p->bf = dbuf(2 * m);
        if (!p->chirp || !p->bf)
            return false;
        int64_t k2 = 0;   /* k^2 mod 2n */
        for (int64_t k = 0; k < n; k++) {
            if (k > 0)
                k2 = (k2 + 2 * k - 1) % (2 * n);
            double ang = p->sign * M_PI * (double)k2 / (double)n;
            p->chirp[2 * k] = cos(ang);
            p->chirp[2 * k + 1] = sin(ang);
        }
        memset(p->bf, 0, (size_t)(2 * m) * sizeof(double));
        for (int64_t k = 0; k < n; k++) {
            p->bf[2 * k] = p->chirp[2 * k];
            p->bf[2 * k + 1] = -p->chirp[2 * k + 1];
            if (k > 0) {
                p->bf[2 * (m - k)] = p->chirp[2 * k];
                p->bf[2 * (m - k) + 1] = -p->chirp[2 * k + 1];
            }
        }
        fft_pow2(p->bf, m, p->tw, -1.0);
    }
    return true;
}

/* Scratch doubles fft_exec needs. */
static int64_t fft_scratch(const fft_plan *p)
{
    return p->kind == FFT_RADIX2 ? 0 : p->kind == FFT_DIRECT ? 2 * p->n : 2 * p->m;
}

/* Transforms the n complex values in a (interleaved re, im) in place, unscaled. */
static void fft_exec(const fft_plan *p, double *a, double *scratch)
{
    int64_t n = p->n;
    if (p->kind == FFT_RADIX2) {
        fft_pow2(a, n, p->tw, p->sign);
    } else if (p->kind == FFT_DIRECT) {
        for (int64_t k = 0; k < n; k++) {
            double sr = 0, si = 0;
            int64_t t = 0;
            for (int64_t j = 0; j < n; j++) {
                double wr = p->tw[2 * t], wi = p->tw[2 * t + 1];
                sr += a[2 * j] * wr - a[2 * j + 1] * wi;
                si += a[2 * j] * wi + a[2 * j + 1] * wr;
                t += k;
                if (t >= n)
                    t -= n;
            }
            scratch[2 * k] = sr;
            scratch[2 * k + 1] = si;
        }
        memcpy(a, scratch, (size_t)(2 * n) * sizeof(double));
    } else {
        int64_t m = p->m;
        double *b = scratch;
        memset(b, 0, (size_t)(2 * m) * sizeof(double));
        for (int64_t k = 0; k < n; k++) {
            double xr = a[2 * k], xi = a[2 * k + 1], wr = p->chirp[2 * k], wi = p->chirp[2 * k + 1];
            b[2 * k] = xr * wr - xi * wi;
            b[2 * k + 1] = xr * wi + xi * wr;
        }
        fft_pow2(b, m, p->tw, -1.0);
        for (int64_t k = 0; k < m; k++) {
            double xr = b[2 * k], xi = b[2 * k + 1], fr = p->bf[2 * k], fi = p->bf[2 * k + 1];
            b[2 * k] = xr * fr - xi * fi;
            b[2 * k + 1] = xr * fi + xi * fr;
        }
        fft_pow2(b, m, p->tw, 1.0);
        double inv = 1.0 / (double)m;
        for (int64_t k = 0; k < n; k++) {
            double xr = b[2 * k] * inv, xi = b[2 * k + 1] * inv, wr = p->chirp[2 * k], wi = p->chirp[2 * k + 1];
            a[2 * k] = xr * wr - xi * wi;
            a[2 * k + 1] = xr * wi + xi * wr;
        }
    }
}

/* One transform per "line": gathers nvalid values (zero-padding to n), optionally windows them,
 * transforms, scales and writes the first nout bins. */
typedef struct fft_job {
    const fft_plan *p;
    const double *in;
    double *out;
    const double *win;          /* STFT window (length n) or NULL */
    int64_t n, nout, nvalid, comp;
    double scale;
    bool stft;
    /* DFT addressing */
    int64_t L, inner;
    /* STFT addressing */
    int64_t frames, step;
    atomic_int failed;
} fft_job;

static void fft_task(void *vp, int64_t begin, int64_t end)
{
    fft_job *j = vp;
    int64_t n = j->n;
    double *buf = dbuf(2 * n + fft_scratch(j->p));
    if (!buf) {
        atomic_store(&j->failed, 1);
        return;
    }
    double *scratch = buf + 2 * n;
    for (int64_t line = begin; line < end; line++) {
        int64_t ibase, jstride, obase, kstride;
        if (j->stft) {
            int64_t b = line / j->frames, f = line % j->frames;
            ibase = (b * j->L + f * j->step) * j->comp;
            jstride = j->comp;
            obase = line * j->nout * 2;
            kstride = 2;
        } else {
            int64_t o = line / j->inner, i = line % j->inner;
            ibase = (o * j->L * j->inner + i) * j->comp;
            jstride = j->inner * j->comp;
            obase = (o * j->nout * j->inner + i) * 2;
            kstride = j->inner * 2;
        }
        for (int64_t t = 0; t < n; t++) {
            double re = 0, im = 0;
            if (t < j->nvalid) {
                const double *s = j->in + ibase + t * jstride;
                re = s[0];
                im = j->comp == 2 ? s[1] : 0;
                if (j->win) {
                    re *= j->win[t];
                    im *= j->win[t];
                }
            }
            buf[2 * t] = re;
            buf[2 * t + 1] = im;
        }
        fft_exec(j->p, buf, scratch);
        for (int64_t k = 0; k < j->nout; k++) {
            j->out[obase + k * kstride] = buf[2 * k] * j->scale;
            j->out[obase + k * kstride + 1] = buf[2 * k + 1] * j->scale;
        }
    }
    kiln__free(buf);
}

/* Runs the job's lines, input already loaded as doubles; writes output tensor y. */
static kiln_status fft_run(kiln_kctx *ctx, fft_job *j, int64_t lines, bool inverse, kiln_tensor *y, int64_t ny)
{
    if (ny == 0 || lines == 0)
        return KILN_OK;
    if (j->n > FFT_MAX_N)
        return kiln__kerr(ctx, KILN_ERR_LIMIT, "transform length %lld is too large", (long long)j->n);
    fft_plan p;
    double *yd = NULL;
    kiln_status st = KILN_OK;
    if (!fft_plan_init(&p, j->n, inverse)) {
        st = kiln__kerr(ctx, KILN_ERR_NOMEM, "out of memory");
        goto done;
    }
    if (y->dtype == KILN_DT_FLOAT64) {
        j->out = y->data;
    } else {
        yd = dbuf(ny);
        if (!yd) {
            st = kiln__kerr(ctx, KILN_ERR_NOMEM, "out of memory");
            goto done;
        }
        j->out = yd;
    }
    j->p = &p;
    j->scale = inverse ? 1.0 / (double)j->n : 1.0;
    atomic_init(&j->failed, 0);
    int64_t grain = 1 + 65536 / (j->n * 8 + 1);
    kiln__parallel_for(ctx->pool, ctx->nthreads, lines, grain, fft_task, j);
    if (atomic_load(&j->failed)) {
        st = kiln__kerr(ctx, KILN_ERR_NOMEM, "out of memory");
        goto done;
    }
    if (yd)
        st = store_f64(y, yd, ny);
done:
    fft_plan_free(&p);
    kiln__free(yd);
    return st;
}

static kiln_status k_dft(kiln_kctx *ctx)
{
    const kiln_tensor *x = kiln__kin(ctx, 0);
    if (!x)
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "missing input");
    if (!is_float_dt(x->dtype))
        return kiln__kerr(ctx, KILN_ERR_DTYPE, "input must be float, got %s", kiln_dtype_name(x->dtype));
    int r = x->ndim;
    if (r < 2)
        return kiln__kerr(ctx, KILN_ERR_SHAPE, "input must have rank >= 2, got %d", r);
    int64_t comp = x->dims[r - 1];
    if (comp != 1 && comp != 2)
        return kiln__kerr(ctx, KILN_ERR_SHAPE, "last dimension must be 1 (real) or 2 (complex), got %lld",
                          (long long)comp);
    int64_t axis;
    if (ctx->node->opset >= 20) {
        axis = -2;
        if (kiln__kin(ctx, 2))
            KILN_TRY(scalar_i64(ctx, kiln__kin(ctx, 2), "axis", &axis));
    } else {
        axis = kiln__attr_i(ctx->node, "axis", 1);
    }
    int64_t axis0 = axis;
    if (axis < 0)
        axis += r;
    if (axis < 0 || axis > r - 2)
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "axis %lld is out of range for rank %d", (long long)axis0, r);
    bool inverse = kiln__attr_i(ctx->node, "inverse", 0) != 0;
    bool onesided = kiln__attr_i(ctx->node, "onesided", 0) != 0;
    int64_t L = x->dims[axis], n = L;
    if (kiln__kin(ctx, 1)) {
        KILN_TRY(scalar_i64(ctx, kiln__kin(ctx, 1), "dft_length", &n));
        if (n < 1)
            return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "dft_length must be positive, got %lld", (long long)n);
    }
    if (n > FFT_MAX_N)
        return kiln__kerr(ctx, KILN_ERR_LIMIT, "transform length %lld is too large", (long long)n);
    int64_t nout = onesided && n > 0 ? n / 2 + 1 : n;
    int64_t od[KILN_MAX_DIMS];
    for (int i = 0; i < r; i++)
        od[i] = x->dims[i];
    od[axis] = nout;
    od[r - 1] = 2;
    int64_t nx = tnumel(x), ny = kiln__shape_numel(r, od);
    if (nx < 0 || ny < 0)
        return kiln__kerr(ctx, KILN_ERR_SHAPE, "invalid shape");
    if (!has_data(x, nx))
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "tensor data is missing or shorter than its shape");
    KILN_TRY(kiln__kout(ctx, 0, x->dtype, r, od));
    int64_t outer = 1, inner = 1;
    for (int i = 0; i < axis; i++)
        outer *= x->dims[i];
    for (int i = axis + 1; i < r - 1; i++)
        inner *= x->dims[i];
    /* outer * inner can only overflow if the output is empty (nout or some dim 0) */
    if (ny == 0)
        return KILN_OK;
    int64_t lines = outer * inner;
    double *xd = dbuf(nx);
    if (!xd)
        return kiln__kerr(ctx, KILN_ERR_NOMEM, "out of memory");
    kiln_status st = load_f64(ctx, x, xd, nx);
    if (st == KILN_OK) {
        fft_job j;
        memset(&j, 0, sizeof j);
        j.in = xd;
        j.n = n;
        j.nout = nout;
        j.nvalid = L < n ? L : n;
        j.comp = comp;
        j.L = L;
        j.inner = inner;
        st = fft_run(ctx, &j, lines, inverse, ctx->out[0], ny);
    }
    kiln__free(xd);
    return st;
}

static kiln_status k_stft(kiln_kctx *ctx)
{
    const kiln_tensor *x = kiln__kin(ctx, 0), *win = kiln__kin(ctx, 2), *fl_t = kiln__kin(ctx, 3);
    if (!x)
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "missing input");
    if (!is_float_dt(x->dtype))
        return kiln__kerr(ctx, KILN_ERR_DTYPE, "signal must be float, got %s", kiln_dtype_name(x->dtype));
    if (x->ndim != 3 || (x->dims[2] != 1 && x->dims[2] != 2))
        return kiln__kerr(ctx, KILN_ERR_SHAPE, "signal must have shape [batch, length, 1 or 2]");
    int64_t step;
    KILN_TRY(scalar_i64(ctx, kiln__kin(ctx, 1), "frame_step", &step));
    if (step < 1)
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "frame_step must be positive, got %lld", (long long)step);
    int64_t fl = -1;
    if (fl_t) {
        KILN_TRY(scalar_i64(ctx, fl_t, "frame_length", &fl));
        if (fl < 1)
            return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "frame_length must be positive, got %lld", (long long)fl);
    }
    if (win) {
        if (!is_float_dt(win->dtype))
            return kiln__kerr(ctx, KILN_ERR_DTYPE, "window must be float, got %s", kiln_dtype_name(win->dtype));
        if (win->ndim != 1)
            return kiln__kerr(ctx, KILN_ERR_SHAPE, "window must have rank 1");
        if (fl >= 0 && win->dims[0] != fl)
            return kiln__kerr(ctx, KILN_ERR_SHAPE, "window length %lld != frame_length %lld",
                              (long long)win->dims[0], (long long)fl);
        fl = win->dims[0];
        if (!has_data(win, fl))
            return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "window data is missing");
    }
    if (fl < 1)
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "need a window or frame_length (got neither, or an empty one)");
    int64_t B = x->dims[0], L = x->dims[1], comp = x->dims[2];
    if (fl > L)
        return kiln__kerr(ctx, KILN_ERR_SHAPE, "frame length %lld exceeds the signal length %lld", (long long)fl,
                          (long long)L);
    if (fl > FFT_MAX_N)
        return kiln__kerr(ctx, KILN_ERR_LIMIT, "frame length %lld is too large", (long long)fl);
    bool onesided = kiln__attr_i(ctx->node, "onesided", 1) != 0;
    int64_t frames = (L - fl) / step + 1;
    int64_t nout = onesided ? fl / 2 + 1 : fl;
    int64_t od[4] = {B, frames, nout, 2};
    int64_t nx = tnumel(x), ny = kiln__shape_numel(4, od);
    if (nx < 0 || ny < 0)
        return kiln__kerr(ctx, KILN_ERR_SHAPE, "invalid shape");
    if (!has_data(x, nx))
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "tensor data is missing or shorter than its shape");
    KILN_TRY(kiln__kout(ctx, 0, x->dtype, 4, od));
    if (ny == 0)
        return KILN_OK;
    double *xd = dbuf(nx), *wd = win ? dbuf(fl) : NULL;
    kiln_status st = KILN_OK;
    if (!xd || (win && !wd)) {
        st = kiln__kerr(ctx, KILN_ERR_NOMEM, "out of memory");
        goto done;
    }
    st = load_f64(ctx, x, xd, nx);
    if (st == KILN_OK && win)
        st = load_f64(ctx, win, wd, fl);
    if (st == KILN_OK) {
        fft_job j;
        memset(&j, 0, sizeof j);
        j.in = xd;
        j.win = wd;
        j.n = fl;
        j.nout = nout;
        j.nvalid = fl;
        j.comp = comp;
        j.stft = true;
        j.L = L;
        j.frames = frames;
        j.step = step;
        st = fft_run(ctx, &j, B * frames, false, ctx->out[0], ny);
    }
done:
    kiln__free(xd);
    kiln__free(wd);
    return st;
}

/* ------------------------------------------------------------------------------------------ */
/* Windows and MelWeightMatrix                                                                */
/* ------------------------------------------------------------------------------------------ */

static kiln_status out_datatype(const kiln_kctx *ctx, kiln_dtype *dt)
{
    int64_t v = kiln__attr_i(ctx->node, "output_datatype", KILN_DT_FLOAT32);
    switch (v) {
    case KILN_DT_UINT8: case KILN_DT_UINT16: case KILN_DT_UINT32: case KILN_DT_UINT64:
    case KILN_DT_INT8: case KILN_DT_INT16: case KILN_DT_INT32: case KILN_DT_INT64:
    case KILN_DT_FLOAT16: case KILN_DT_FLOAT32: case KILN_DT_FLOAT64: case KILN_DT_BFLOAT16:
        *dt = (kiln_dtype)v;
        return KILN_OK;
    default:
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "unsupported output_datatype %lld", (long long)v);
    }
}

enum { WIN_HANN, WIN_HAMMING, WIN_BLACKMAN };

static kiln_status window_common(kiln_kctx *ctx, int kind)
{
    int64_t size;
    KILN_TRY(scalar_i64(ctx, kiln__kin(ctx, 0), "size", &size));
    if (size < 0)
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "size must be non-negative, got %lld", (long long)size);
    kiln_dtype dt = KILN_DT_FLOAT32;
    KILN_TRY(out_datatype(ctx, &dt));
    KILN_TRY(kiln__kout(ctx, 0, dt, 1, &size));
    if (size == 0)
        return KILN_OK;
    bool periodic = kiln__attr_i(ctx->node, "periodic", 1) != 0;
    double denom = (double)(periodic ? size : size - 1);
    double *v = dbuf(size);
    if (!v)
        return kiln__kerr(ctx, KILN_ERR_NOMEM, "out of memory");
    for (int64_t i = 0; i < size; i++) {
        double a = denom > 0 ? 2 * M_PI * (double)i / denom : 0;
        switch (kind) {
        case WIN_HANN:
            v[i] = 0.5 - 0.5 * cos(a);
            break;
        case WIN_HAMMING:
            v[i] = 25.0 / 46.0 - 21.0 / 46.0 * cos(a);
            break;
        default:
            v[i] = 0.42 - 0.5 * cos(a) + 0.08 * cos(2 * a);
            break;
        }
    }
    kiln_status st = store_f64(ctx->out[0], v, size);
    kiln__free(v);
    return st;
}

static kiln_status k_hann(kiln_kctx *ctx)
{
    return window_common(ctx, WIN_HANN);
}

static kiln_status k_hamming(kiln_kctx *ctx)
{
    return window_common(ctx, WIN_HAMMING);
}

static kiln_status k_blackman(kiln_kctx *ctx)
{
    return window_common(ctx, WIN_BLACKMAN);
}

static kiln_status k_melweight(kiln_kctx *ctx)
{
    int64_t nmel = 0, dftlen = 0, rate = 0;
    double lo, hi;
    KILN_TRY(scalar_i64(ctx, kiln__kin(ctx, 0), "num_mel_bins", &nmel));
    KILN_TRY(scalar_i64(ctx, kiln__kin(ctx, 1), "dft_length", &dftlen));
    KILN_TRY(scalar_i64(ctx, kiln__kin(ctx, 2), "sample_rate", &rate));
    KILN_TRY(scalar_f64(ctx, kiln__kin(ctx, 3), "lower_edge_hertz", &lo));
    KILN_TRY(scalar_f64(ctx, kiln__kin(ctx, 4), "upper_edge_hertz", &hi));
    if (nmel < 1 || dftlen < 1 || rate < 1)
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG,
                          "num_mel_bins (%lld), dft_length (%lld) and sample_rate (%lld) must be positive",
                          (long long)nmel, (long long)dftlen, (long long)rate);
    if (!isfinite(lo) || !isfinite(hi))
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "edge frequencies must be finite");
    kiln_dtype dt = KILN_DT_FLOAT32;
    KILN_TRY(out_datatype(ctx, &dt));
    int64_t nspec = dftlen / 2 + 1;
    int64_t od[2] = {nspec, nmel};
    KILN_TRY(kiln__kout(ctx, 0, dt, 2, od));
    int64_t ny = nspec * nmel;   /* kiln__kout accepted the shape, so no overflow */
    double *out = dbuf(ny), *bins = dbuf(nmel + 2);
    kiln_status st = KILN_OK;
    if (!out || !bins) {
        st = kiln__kerr(ctx, KILN_ERR_NOMEM, "out of memory");
        goto done;
    }
    memset(out, 0, (size_t)ny * sizeof(double));
    double lo_mel = 2595.0 * log10(1.0 + lo / 700.0), hi_mel = 2595.0 * log10(1.0 + hi / 700.0);
    double mel_step = (hi_mel - lo_mel) / (double)(nmel + 2);
    for (int64_t i = 0; i < nmel + 2; i++) {
        double mel = (double)i * mel_step + lo_mel;
        double hz = 700.0 * (pow(10.0, mel / 2595.0) - 1.0);
        double b = floor((double)(dftlen + 1) * hz / (double)rate);
        if (!isfinite(b) || fabs(b) > 9.0e15) {
            st = kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "edge frequencies give an invalid frequency bin");
            goto done;
        }
        bins[i] = b;
    }
    for (int64_t i = 0; i < nmel; i++) {
        int64_t left = (int64_t)bins[i], center = (int64_t)bins[i + 1], right = (int64_t)bins[i + 2];
        int64_t l2c = center - left, c2h = right - center;
        if (l2c == 0) {
            if (center >= 0 && center < nspec)
                out[center * nmel + i] = 1;
        } else {
            int64_t a = left < 0 ? 0 : left, b = center > nspec - 1 ? nspec - 1 : center;
            for (int64_t jj = a; jj <= b; jj++)
                out[jj * nmel + i] = (double)(jj - left) / (double)l2c;
        }
        if (c2h > 0) {
            int64_t a = center < 0 ? 0 : center, b = right > nspec ? nspec : right;
            for (int64_t jj = a; jj < b; jj++)
                out[jj * nmel + i] = (double)(right - jj) / (double)c2h;
        }
    }
    st = store_f64(ctx->out[0], out, ny);
done:
    kiln__free(out);
    kiln__free(bins);
    return st;
}

/* ------------------------------------------------------------------------------------------ */
/* Det                                                                                        */
/* ------------------------------------------------------------------------------------------ */

static double det_lu(double *a, int64_t m)
{
    double det = 1;
    for (int64_t k = 0; k < m; k++) {
        int64_t p = k;
        double best = fabs(a[k * m + k]);
        for (int64_t i = k + 1; i < m; i++) {
            double v = fabs(a[i * m + k]);
            if (v > best) {
                best = v;
                p = i;
            }
        }
        if (best == 0)
            return 0;
        if (p != k) {
            for (int64_t c = 0; c < m; c++) {
                double t = a[k * m + c];
                a[k * m + c] = a[p * m + c];
                a[p * m + c] = t;
            }
            det = -det;
        }
        double piv = a[k * m + k];
        det *= piv;
        for (int64_t i = k + 1; i < m; i++) {
            double f = a[i * m + k] / piv;
            if (f == 0)
                continue;
            for (int64_t c = k + 1; c < m; c++)
                a[i * m + c] -= f * a[k * m + c];
        }
    }
    return det;
}

static kiln_status k_det(kiln_kctx *ctx)
{
    const kiln_tensor *x = kiln__kin(ctx, 0);
    if (!x)
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "missing input");
    if (!is_float_dt(x->dtype))
        return kiln__kerr(ctx, KILN_ERR_DTYPE, "input must be float, got %s", kiln_dtype_name(x->dtype));
    int r = x->ndim;
    if (r < 2 || x->dims[r - 1] != x->dims[r - 2])
        return kiln__kerr(ctx, KILN_ERR_SHAPE, "input must have shape [..., M, M]");
    int64_t m = x->dims[r - 1], nx = tnumel(x);
    int64_t od[KILN_MAX_DIMS];
    for (int i = 0; i < r - 2; i++)
        od[i] = x->dims[i];
    int64_t batch = kiln__shape_numel(r - 2, od);
    if (nx < 0 || batch < 0)
        return kiln__kerr(ctx, KILN_ERR_SHAPE, "invalid shape");
    if (!has_data(x, nx))
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "tensor data is missing or shorter than its shape");
    KILN_TRY(kiln__kout(ctx, 0, x->dtype, r - 2, od));
    if (batch == 0)
        return KILN_OK;
    double *res = dbuf(batch), *a = dbuf(nx);
    kiln_status st = KILN_OK;
    if (!res || !a) {
        st = kiln__kerr(ctx, KILN_ERR_NOMEM, "out of memory");
        goto done;
    }
    st = load_f64(ctx, x, a, nx);
    if (st != KILN_OK)
        goto done;
    for (int64_t b = 0; b < batch; b++)
        res[b] = det_lu(a + b * m * m, m);
    st = store_f64(ctx->out[0], res, batch);
done:
    kiln__free(res);
    kiln__free(a);
    return st;
}

const kiln_kernel_reg kiln__ref_extra[] = {
    {KILN_OP_NegativeLogLikelihoodLoss, k_nllloss},
    {KILN_OP_SoftmaxCrossEntropyLoss, k_sce},
    {KILN_OP_GridSample, k_gridsample},
    {KILN_OP_DFT, k_dft},
    {KILN_OP_STFT, k_stft},
    {KILN_OP_HannWindow, k_hann},
    {KILN_OP_HammingWindow, k_hamming},
    {KILN_OP_BlackmanWindow, k_blackman},
    {KILN_OP_MelWeightMatrix, k_melweight},
    {KILN_OP_Det, k_det},
    {KILN_OP_COUNT, NULL},
};

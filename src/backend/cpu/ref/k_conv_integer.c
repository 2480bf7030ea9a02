/* Reference kernel: ConvInteger (1-D, 2-D, 3-D and up to 6 spatial dims): int8 / uint8 x and w less their zero
 * points (scalar, or per output channel for w), converted to double and run through Conv's direct loops with double
 * accumulation (kiln__conv_double_task, k_conv.c; exact for integers), int32 output. */
#include "../../kernel.h"
#include "../prep.h"
#include "window.h"
#include "k_conv.h"

/* Reads a zero point: NULL -> 0; must be a scalar (or 1-element) unless per-channel (n = M). */
static kiln_status zero_point(const kiln_kctx *ctx, const kiln_tensor *zp, kiln_dtype dt, int64_t per_channel,
                              const char *what)
{
    if (!zp)
        return KILN_OK;
    if (zp->dtype != dt)
        return kiln__kerr(ctx, KILN_ERR_DTYPE, "%s has dtype %s, expected %s", what, kiln_dtype_name(zp->dtype),
                          kiln_dtype_name(dt));
    int64_t n = kiln_tensor_numel(zp);
    if (zp->ndim > 1 || (n != 1 && n != per_channel))
        return kiln__kerr(ctx, KILN_ERR_SHAPE, "%s must be a scalar%s", what, per_channel > 1 ? " or per output channel" : "");
    return KILN_OK;
}

kiln_status kiln__k_conv_integer(kiln_kctx *ctx)
{
    const kiln_tensor *x = kiln__kin(ctx, 0), *w = kiln__kin(ctx, 1), *xz = kiln__kin(ctx, 2),
                      *wz = kiln__kin(ctx, 3);
    if (!x || !w)
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "missing input x or w");
    if (kiln__prep_dropped(w)) /* stored only packed (INT8 fast kernel's layout) */
        return kiln__prep_missing(ctx, 1);
    if ((x->dtype != KILN_DT_UINT8 && x->dtype != KILN_DT_INT8) ||
        (w->dtype != KILN_DT_UINT8 && w->dtype != KILN_DT_INT8))
        return kiln__kerr(ctx, KILN_ERR_DTYPE, "x and w must be int8 or uint8 (got %s, %s)", kiln_dtype_name(x->dtype),
                          kiln_dtype_name(w->dtype));
    conv_geom g;
    KILN_TRY(kiln__conv_setup(ctx, x, w, &g));
    KILN_TRY(zero_point(ctx, xz, x->dtype, 1, "x_zero_point"));
    KILN_TRY(zero_point(ctx, wz, w->dtype, g.M, "w_zero_point"));
    int64_t dims[KILN_MAX_DIMS] = {g.N, g.M};
    for (int i = 0; i < g.nsp; i++)
        dims[2 + i] = g.out[i];
    KILN_TRY(kiln__kout(ctx, 0, KILN_DT_INT32, x->ndim, dims));
    int64_t nx = kiln_tensor_numel(x), nw = kiln_tensor_numel(w), ny = kiln_tensor_numel(ctx->out[0]);
    double *dx = NULL, *dw = NULL, *dy = NULL;
    kiln_status st = kiln__win_scratch(ctx, nx, sizeof(double), (void **)&dx);
    if (st == KILN_OK)
        st = kiln__win_scratch(ctx, nw, sizeof(double), (void **)&dw);
    if (st == KILN_OK)
        st = kiln__win_scratch(ctx, ny, sizeof(double), (void **)&dy);
    if (st == KILN_OK) {
        double zx = xz ? (double)kiln__get_i64(xz->dtype, xz->data, 0) : 0.0;
        for (int64_t i = 0; i < nx; i++)
            dx[i] = (double)kiln__get_i64(x->dtype, x->data, i) - zx;
        int64_t per_m = g.M ? nw / g.M : 0, nz = wz ? kiln_tensor_numel(wz) : 0;
        for (int64_t i = 0; i < nw; i++) {
            int64_t m = per_m ? i / per_m : 0;
            double zw = wz ? (double)kiln__get_i64(wz->dtype, wz->data, nz == 1 ? 0 : m) : 0.0;
            dw[i] = (double)kiln__get_i64(w->dtype, w->data, i) - zw;
        }
        kiln_conv_double_job j = {.g = &g, .x = dx, .w = dw, .b = NULL, .y = dy};
        kiln__parallel_for(ctx->pool, ctx->nthreads, g.N * g.M,
                           kiln__conv_double_grain(&g, mul_chk(g.out_sz, g.C / g.G)), kiln__conv_double_task, &j);
        int32_t *y = ctx->out[0]->data;
        for (int64_t i = 0; i < ny; i++)
            y[i] = (int32_t)(int64_t)dy[i];
    }
    kiln__free(dx);
    kiln__free(dw);
    kiln__free(dy);
    return st;
}

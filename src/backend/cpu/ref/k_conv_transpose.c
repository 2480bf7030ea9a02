/* Reference kernel: ConvTranspose (1-D, 2-D, 3-D and up to 6 spatial dims), and kiln__convt_geom, its output
 * geometry for the device modules (layer_geom.h). The geometry is the adjoint Conv's (conv_geom in k_conv.h): "in" is
 * the ConvTranspose output image, "out" its input. float32 is a GEMM W^T x X into a column buffer followed by col2im
 * (k_conv.c's, multithreaded over output channels), or, where every output pixel takes one tap of one input pixel
 * (kernel = stride, no padding), the column buffer written straight to the output; a 1x1 stride-1 layer is one GEMM
 * per image and group onto the bias. float16 / bfloat16 go through float32 and float64 uses direct loops in double
 * (kiln__conv_run_float). */
#include "../../kernel.h"
#include "../gemm.h"
#include "window.h"
#include "k_conv.h"
#include "../../layer_geom.h"

/* ------------------------------------------------------------------------------------------
 * float32 ConvTranspose (geometry in the adjoint view, see conv_geom)
 * ------------------------------------------------------------------------------------------ */

typedef struct bias_job {
    float *y;
    int64_t ld, n;
    const float *b;
} bias_job;

static void bias_task(void *ctx, int64_t r0, int64_t r1)
{
    const bias_job *j = ctx;
    for (int64_t m = r0; m < r1; m++) {
        float v = j->b[m], *yr = j->y + m * j->ld;
        for (int64_t i = 0; i < j->n; i++)
            yr[i] = v;
    }
}

/* y[m, 0:n] = b[m] for m < rows (row stride ld), multithreaded when large */
static void fill_bias(kiln_pool *pool, int nt, float *y, int64_t rows, int64_t ld, int64_t n, const float *b)
{
    bias_job j = {.y = y, .ld = ld, .n = n, .b = b};
    kiln__parallel_for(pool, nt, rows, 1 + 32768 / (n + 1), bias_task, &j);
}

/* Whether each ConvTranspose output pixel takes exactly one tap of one input pixel: 2-D, kernel = stride, dilation 1,
 * no padding and no output padding (PP-OCR det's 2x2 stride-2 upsampling heads) */
static bool convt_tiled(const conv_geom *g)
{
    if (g->nsp != 2)
        return false;
    for (int i = 0; i < 2; i++)
        if (g->k[i] != g->s[i] || g->d[i] != 1 || g->pb[i] != 0 || g->in[i] != g->out[i] * g->s[i])
            return false;
    return true;
}

typedef struct tile_job {
    const conv_geom *g;
    float *img;          /* channel 0 of the group's output */
    const float *col;    /* [Cyg * k_sz][ncols]: row (channel, kh, kw) */
    const float *b;      /* the group's biases, or NULL */
    int64_t q0, q1, ncols;
} tile_job;

/* Writes the output rows of channels [c0, c1) that input rows [q0, q1) cover: pixel (ih * sh + kh, iw * sw + kw) is
 * col row (c, kh, kw) at column (ih - q0) * Wx + iw, plus the bias (no fill before, no accumulation) */
static void tile_task(void *arg, int64_t c0, int64_t c1)
{
    const tile_job *j = arg;
    const conv_geom *g = j->g;
    int64_t sh = g->s[0], sw = g->s[1], Wx = g->out[1], Wy = g->in[1];
    for (int64_t c = c0; c < c1; c++) {
        float bv = j->b ? j->b[c] : 0.0f;
        for (int64_t q = j->q0; q < j->q1; q++)
            for (int64_t kh = 0; kh < sh; kh++) {
                float *dst = j->img + c * g->in_sz + (q * sh + kh) * Wy;
                const float *src = j->col + (c * g->k_sz + kh * sw) * j->ncols + (q - j->q0) * Wx;
                if (sw == 2) {
                    const float *s1 = src + j->ncols;
                    for (int64_t i = 0; i < Wx; i++) {
                        dst[2 * i] = src[i] + bv;
                        dst[2 * i + 1] = s1[i] + bv;
                    }
                } else {
                    for (int64_t kw = 0; kw < sw; kw++)
                        for (int64_t i = 0; i < Wx; i++)
                            dst[i * sw + kw] = src[kw * j->ncols + i] + bv;
                }
            }
    }
}

/* Per image, group and chunk of input rows: col = W^T X over the chunk (K2 x nc), then its columns to the output --
 * written with the bias straight to their pixels where `tiled` (convt_tiled's geometry; chunks of a quarter of
 * COL_BUDGET (k_conv.c), so col stays in L2 while they are written), else accumulated by col2im onto the bias already
 * there */
static kiln_status convt_chunks(const kiln_kctx *ctx, const conv_geom *g, const float *x, const float *w,
                                const float *b, float *y, bool tiled)
{
    int nt = ctx->nthreads;
    int64_t Cx = g->M, Cy = g->C, Cxg = Cx / g->G, Cyg = Cy / g->G, K2 = Cyg * g->k_sz;
    int64_t ys = g->in_sz, xs = g->out_sz, Wx = g->out[g->nsp - 1], outer = xs / Wx;
    int64_t qc = kiln__conv_chunk_rows(mul_chk(mul_chk(K2, Wx), tiled ? 4 : 1), outer);
    float *col;
    KILN_TRY(kiln__win_scratch(ctx, mul_chk(mul_chk(K2, qc), Wx), sizeof(float), (void **)&col));
    for (int64_t n = 0; n < g->N; n++)
        for (int64_t gi = 0; gi < g->G; gi++) {
            const float *xg = x + (n * Cx + gi * Cxg) * xs, *wg = w + gi * Cxg * K2;
            float *img = y + (n * Cy + gi * Cyg) * ys;
            for (int64_t q0 = 0; q0 < outer; q0 += qc) {
                int64_t q1 = q0 + qc < outer ? q0 + qc : outer, nc = (q1 - q0) * Wx;
                kiln__sgemm(ctx->pool, nt, true, false, K2, nc, Cxg, 1.0f, wg, K2, xg + q0 * Wx, xs, 0.0f, col, nc);
                if (tiled) {
                    tile_job j = {.g = g, .img = img, .col = col, .b = b ? b + gi * Cyg : NULL, .q0 = q0, .q1 = q1,
                                  .ncols = nc};
                    kiln__parallel_for(ctx->pool, nt, Cyg, 1, tile_task, &j);
                } else {
                    kiln_conv_col_job j = {.g = g, .img = img, .col = col, .q0 = q0, .q1 = q1, .ncols = nc};
                    kiln__parallel_for(ctx->pool, nt, Cyg, 1, kiln__conv_col2im_task, &j);
                }
            }
        }
    kiln__free(col);
    return KILN_OK;
}

static kiln_status convt_f32(const kiln_kctx *ctx, const kiln_conv_isa *isa, const conv_geom *g, const float *x,
                             const float *w, const float *b, float *y)
{
    (void)isa;   /* no hooks: GEMM + col2im */
    int nt = ctx->nthreads;
    /* ConvTranspose: X [N, g->M, out...], W [g->M, Cg, k...], Y [N, g->C, in...] */
    int64_t Cx = g->M, Cy = g->C, Cxg = Cx / g->G, Cyg = Cy / g->G, K2 = Cyg * g->k_sz;
    int64_t ys = g->in_sz, xs = g->out_sz;
    if (g->N == 0 || Cy == 0 || ys == 0)
        return KILN_OK;
    if (xs > 0 && convt_tiled(g))
        return convt_chunks(ctx, g, x, w, b, y, true);
    if (b)
        for (int64_t n = 0; n < g->N; n++)
            fill_bias(ctx->pool, nt, y + n * Cy * ys, Cy, ys, ys, b);
    if (xs == 0)
        return KILN_OK;
    bool direct = g->k_sz == 1;
    for (int i = 0; i < g->nsp; i++)
        if (g->s[i] != 1 || g->pb[i] != 0 || g->in[i] != g->out[i])
            direct = false;
    if (direct) {
        for (int64_t n = 0; n < g->N; n++)
            for (int64_t gi = 0; gi < g->G; gi++)
                kiln__sgemm(ctx->pool, nt, true, false, Cyg, xs, Cxg, 1.0f, w + gi * Cxg * K2, K2,
                            x + (n * Cx + gi * Cxg) * xs, xs, 1.0f, y + (n * Cy + gi * Cyg) * ys, ys);
        return KILN_OK;
    }
    return convt_chunks(ctx, g, x, w, b, y, false);
}

/* ------------------------------------------------------------------------------------------
 * direct double path (float64)
 * ------------------------------------------------------------------------------------------ */

/* ConvTranspose (adjoint view): one task per (image, ConvTranspose output channel) plane. */
static void convt_direct_task(void *ctx, int64_t b0, int64_t e0)
{
    const kiln_conv_double_job *j = ctx;
    const conv_geom *g = j->g;
    int64_t Cx = g->M, Cy = g->C, Cxg = Cx / g->G, Cyg = Cy / g->G;
    for (int64_t pl = b0; pl < e0; pl++) {
        int64_t n = pl / Cy, m = pl % Cy, gi = m / Cyg, mm = m % Cyg;
        double *yp = j->y + pl * g->in_sz;
        for (int64_t i = 0; i < g->in_sz; i++)
            yp[i] = j->b ? j->b[m] : 0.0;
        for (int64_t c = 0; c < Cxg; c++) {
            const double *xc = j->x + (n * Cx + gi * Cxg + c) * g->out_sz;
            const double *wc = j->w + ((gi * Cxg + c) * Cyg + mm) * g->k_sz;
            int64_t o[SP_MAX] = {0};
            for (int64_t op = 0; op < g->out_sz; op++) {
                double xv = xc[op];
                int64_t kk[SP_MAX] = {0};
                for (int64_t kp = 0; kp < g->k_sz; kp++) {
                    int64_t idx = kiln__conv_tap_index(g, o, kk);
                    if (idx >= 0)
                        yp[idx] += xv * wc[kp];
                    kiln__conv_odo_next(kk, g->k, g->nsp);
                }
                kiln__conv_odo_next(o, g->out, g->nsp);
            }
        }
    }
}

/* ------------------------------------------------------------------------------------------
 * kernel
 * ------------------------------------------------------------------------------------------ */

/* ConvTranspose's geometry in the adjoint view ("in": its output image, "out": its input), from X's and W's
 * dims and the node's attributes */
static kiln_status convt_setup(const kiln_kctx *ctx, const kiln_tensor *x, const kiln_tensor *w, conv_geom *out)
{
    KILN_TRY(kiln__win_check_dims(ctx, x, "X"));
    KILN_TRY(kiln__win_check_dims(ctx, w, "W"));
    conv_geom g;
    memset(&g, 0, sizeof g);
    int nsp = g.nsp = x->ndim - 2;
    g.N = x->dims[0];
    g.M = x->dims[1]; /* adjoint view: the ConvTranspose input is the "conv output" */
    g.G = kiln__attr_i(ctx->node, "group", 1);
    if (g.G < 1 || g.G > LIM)
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "group %lld is invalid", (long long)g.G);
    if (w->dims[0] != g.M || g.M % g.G)
        return kiln__kerr(ctx, KILN_ERR_SHAPE, "W has %lld input channels, X has %lld (group %lld)",
                          (long long)w->dims[0], (long long)g.M, (long long)g.G);
    g.C = mul_chk(w->dims[1], g.G);
    if (g.C < 0 || g.C > LIM)
        return kiln__kerr(ctx, KILN_ERR_LIMIT, "too many output channels");
    for (int i = 0; i < nsp; i++) {
        g.out[i] = x->dims[2 + i];
        g.k[i] = w->dims[2 + i];
        if (g.k[i] < 1)
            return kiln__kerr(ctx, KILN_ERR_SHAPE, "kernel dimension %d is empty", i);
    }
    KILN_TRY(kiln__conv_check_kernel_shape(ctx, &g));
    int64_t pads[2 * SP_MAX], opad[SP_MAX], oshape[SP_MAX + 2];
    int ap = AP_NOTSET;
    bool has_os = false;
    KILN_TRY(kiln__win_ints(ctx, "strides", nsp, 1, 1, g.s, NULL));
    KILN_TRY(kiln__win_ints(ctx, "dilations", nsp, 1, 1, g.d, NULL));
    KILN_TRY(kiln__win_ints(ctx, "pads", 2 * nsp, 0, 0, pads, NULL));
    KILN_TRY(kiln__win_ints(ctx, "output_padding", nsp, 0, 0, opad, NULL));
    KILN_TRY(kiln__win_auto_pad(ctx, &ap));
    {
        const int64_t *v;
        int c = kiln__attr_ints(ctx->node, "output_shape", &v);
        if (c >= 0) {
            if (c != nsp && c != nsp + 2)
                return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "output_shape has %d values, expected %d", c, nsp);
            for (int i = 0; i < nsp; i++) {
                oshape[i] = v[c - nsp + i];
                if (oshape[i] < 0 || oshape[i] > LIM)
                    return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "output_shape value %lld is out of range",
                                      (long long)oshape[i]);
            }
            has_os = true;
        }
    }
    for (int i = 0; i < nsp; i++) {
        /* the spec requires output_padding < stride or dilation (ONNX Runtime rejects it too): a larger one only
         * appends rows no input pixel reaches */
        if (opad[i] >= (g.s[i] > g.d[i] ? g.s[i] : g.d[i]))
            return kiln__kerr(ctx, KILN_ERR_INVALID_ARG,
                              "attribute 'output_padding' value %lld on axis %d must be less than the stride (%lld) "
                              "or the dilation (%lld)",
                              (long long)opad[i], i + 2, (long long)g.s[i], (long long)g.d[i]);
    }
    for (int i = 0; i < nsp; i++) {
        int64_t effk = (g.k[i] - 1) * g.d[i] + 1;
        int64_t full = g.s[i] * (g.out[i] - 1) + opad[i] + effk; /* output size without padding */
        if (g.out[i] == 0)
            full = 0;
        if (has_os || ap == AP_SAME_UPPER || ap == AP_SAME_LOWER) {
            int64_t target = has_os ? oshape[i] : g.out[i] * g.s[i];
            int64_t tot = full - target;
            if (tot < 0)
                tot = 0;
            /* the ONNX spec's split: SAME_UPPER puts the odd unit of padding at the end, every other auto_pad
             * (NOTSET and VALID with output_shape, SAME_LOWER) at the start; ONNX Runtime does the same */
            g.pb[i] = ap == AP_SAME_UPPER ? tot / 2 : tot - tot / 2;
            g.pe[i] = tot - g.pb[i];
            g.in[i] = target;
        } else {
            if (ap == AP_VALID)
                g.pb[i] = g.pe[i] = 0;
            else {
                g.pb[i] = pads[i];
                g.pe[i] = pads[nsp + i];
            }
            g.in[i] = full - g.pb[i] - g.pe[i];
            if (g.in[i] < 0)
                return kiln__kerr(ctx, KILN_ERR_SHAPE, "pads make the output negative on axis %d", i + 2);
        }
    }
    KILN_TRY(kiln__win_sizes(ctx, &g));
    *out = g;
    return KILN_OK;
}

kiln_status kiln__k_conv_transpose(kiln_kctx *ctx)
{
    const kiln_tensor *x = kiln__kin(ctx, 0), *w = kiln__kin(ctx, 1), *b = kiln__kin(ctx, 2);
    KILN_TRY(kiln__conv_float_operands(ctx, x, w));
    if (x->ndim < 3)
        return kiln__kerr(ctx, KILN_ERR_SHAPE, "X must have rank >= 3, got %d", x->ndim);
    if (w->ndim != x->ndim)
        return kiln__kerr(ctx, KILN_ERR_SHAPE, "W has rank %d, X has rank %d", w->ndim, x->ndim);
    conv_geom g;
    KILN_TRY(convt_setup(ctx, x, w, &g));
    KILN_TRY(kiln__conv_check_bias(ctx, b, x->dtype, g.C));
    int64_t dims[KILN_MAX_DIMS] = {g.N, g.C};
    for (int i = 0; i < g.nsp; i++)
        dims[2 + i] = g.in[i];
    KILN_TRY(kiln__kout(ctx, 0, x->dtype, x->ndim, dims));
    return kiln__conv_run_float(ctx, NULL, &g, x, w, b, ctx->out[0], convt_f32, convt_direct_task, g.N * g.C,
                                mul_chk(g.out_sz, g.M / g.G));
}

kiln_status kiln__convt_geom(const kiln_node *n, int ndim, const int64_t *xdims, const int64_t *wdims,
                             kiln_convt_geom *out)
{
    kiln_kctx c = {.node = n};
    if (ndim < 3 || ndim > KILN_MAX_DIMS)
        return kiln__kerr(&c, KILN_ERR_SHAPE, "X must have rank 3..%d, got %d", KILN_MAX_DIMS, ndim);
    kiln_tensor x = {.dtype = KILN_DT_FLOAT32, .ndim = ndim}, w = {.dtype = KILN_DT_FLOAT32, .ndim = ndim};
    memcpy(x.dims, xdims, sizeof(int64_t) * (size_t)ndim);
    memcpy(w.dims, wdims, sizeof(int64_t) * (size_t)ndim);
    conv_geom g;
    KILN_TRY(convt_setup(&c, &x, &w, &g));
    memset(out, 0, sizeof *out);
    out->nsp = g.nsp;
    out->group = g.G;
    out->ydims[0] = g.N;
    out->ydims[1] = g.C;
    for (int i = 0; i < g.nsp; i++) {
        out->ydims[2 + i] = g.in[i];
        out->s[i] = g.s[i];
        out->d[i] = g.d[i];
        out->pb[i] = g.pb[i];
    }
    return KILN_OK;
}

/* Reference kernel: Conv (1-D, 2-D, 3-D and up to 6 spatial dims), and the helpers it shares with ConvTranspose
 * (k_conv_transpose.c) and ConvInteger (k_conv_integer.c), declared in k_conv.h; the table registering all three.
 *
 * float32 Conv is the hot path of CNNs. The float32 driver (kiln__conv, conv.h) is shared with
 * the x86 kernels (cpu/x86/conv_*.c), which register over these by ISA and differ only in the
 * hooks they pass (kiln_conv_isa): vectorized depthwise rows, im2col panels and strided gathers,
 * and whole-layer strategies tried first (Winograd for 3x3 stride-1 layers with its filters
 * transformed at build time, a direct convolution for few output channels and wide rows). The
 * reference passes no hooks: portable scalar loops around the shared GEMM (cpu/gemm.c).
 * Every float32 path writes each output element exactly once (the output is allocated
 * uninitialized) and applies the layer's epilogue (bias, and for the fused FusedConv layer a
 * residual and an activation) while the values are in registers. Strategies, chosen per layer:
 *   - depthwise (one input channel per group, 1-D/2-D): rows of the plane are copied into a
 *     zero-padded band buffer, then every output row is computed without bounds checks (the
 *     isa's dw_row for strides 1 and 2); multithreaded over (image, channel) planes;
 *   - pointwise (1x1, stride 1, no padding): one GEMM per image and group, W x X; strided 1x1
 *     convolutions subsample the input first;
 *   - other 1-D / 2-D layers: an implicit-im2col GEMM whose B packer gathers the column
 *     matrix straight from the image into the GEMM's panels;
 *   - 3-D and up: im2col of a chunk of output rows into a scratch buffer (multithreaded over
 *     its rows), then one GEMM W[M/g, K] x col[K, chunk] with the epilogue.
 * float16 / bfloat16 go through float32 (kiln__conv_run_float, ConvTranspose's too); float64 and
 * ConvInteger use direct loops with double accumulation (exact for the integer case). */
#include "../../kernel.h"
#include "../gemm.h"
#include "../conv.h"
#include "../prep.h"
#include "../lowbit.h"
#include "../qgemm_bf16.h"
#include "../scratch.h"
#include "window.h"
#include "k_conv.h"
#include <math.h>

#ifndef COL_BUDGET
#define COL_BUDGET ((int64_t)1 << 20) /* floats in one im2col chunk (soft target) */
#endif

/* Checks the kernel_shape attribute (optional) against the weight's spatial dims. */
kiln_status kiln__conv_check_kernel_shape(const kiln_kctx *ctx, const conv_geom *g)
{
    int64_t ks[SP_MAX];
    bool has;
    KILN_TRY(kiln__win_ints(ctx, "kernel_shape", g->nsp, 1, 1, ks, &has));
    if (has)
        for (int i = 0; i < g->nsp; i++)
            if (ks[i] != g->k[i])
                return kiln__kerr(ctx, KILN_ERR_SHAPE, "kernel_shape[%d] = %lld does not match the weight (%lld)", i,
                                  (long long)ks[i], (long long)g->k[i]);
    return KILN_OK;
}

/* Conv / ConvInteger geometry from X [N, C, spatial], W [M, C/group, kernel] and attributes. */
kiln_status kiln__conv_setup(const kiln_kctx *ctx, const kiln_tensor *x, const kiln_tensor *w, conv_geom *g)
{
    memset(g, 0, sizeof *g);
    if (x->ndim < 3)
        return kiln__kerr(ctx, KILN_ERR_SHAPE, "X must have rank >= 3, got %d", x->ndim);
    if (w->ndim != x->ndim)
        return kiln__kerr(ctx, KILN_ERR_SHAPE, "W has rank %d, X has rank %d", w->ndim, x->ndim);
    KILN_TRY(kiln__win_check_dims(ctx, x, "X"));
    KILN_TRY(kiln__win_check_dims(ctx, w, "W"));
    g->nsp = x->ndim - 2;
    g->N = x->dims[0];
    g->C = x->dims[1];
    g->M = w->dims[0];
    g->G = kiln__attr_i(ctx->node, "group", 1);
    if (g->G < 1 || g->G > LIM)
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "group %lld is invalid", (long long)g->G);
    if (g->C % g->G || g->M % g->G)
        return kiln__kerr(ctx, KILN_ERR_SHAPE, "channels (%lld in, %lld out) are not divisible by group %lld",
                          (long long)g->C, (long long)g->M, (long long)g->G);
    if (w->dims[1] != g->C / g->G)
        return kiln__kerr(ctx, KILN_ERR_SHAPE, "W has %lld input channels per group, expected %lld",
                          (long long)w->dims[1], (long long)(g->C / g->G));
    for (int i = 0; i < g->nsp; i++) {
        g->in[i] = x->dims[2 + i];
        g->k[i] = w->dims[2 + i];
        if (g->k[i] < 1)
            return kiln__kerr(ctx, KILN_ERR_SHAPE, "kernel dimension %d is empty", i);
    }
    KILN_TRY(kiln__conv_check_kernel_shape(ctx, g));
    return kiln__win_setup(ctx, g, false);
}


/* ------------------------------------------------------------------------------------------
 * im2col / col2im over a chunk of "outer rows" (all output dims but the last)
 * ------------------------------------------------------------------------------------------ */


/* Processes col rows [r0, r1): im2col (acc == false) or col2im (acc == true). */
static void col_rows(const kiln_conv_col_job *j, int64_t r0, int64_t r1, bool acc)
{
    const conv_geom *g = j->g;
    int L = g->nsp - 1;
    int64_t Wo = g->out[L], Wi = g->in[L], sl = g->s[L];
    for (int64_t r = r0; r < r1; r++) {
        int64_t c = r / g->k_sz, kk = r % g->k_sz, kidx[SP_MAX], o[SP_MAX];
        for (int d = L; d >= 0; d--) {
            kidx[d] = kk % g->k[d];
            kk /= g->k[d];
        }
        float *ic = j->img + c * g->in_sz;
        float *dst = j->col + r * j->ncols;
        int64_t off = kidx[L] * g->d[L] - g->pb[L], xa, xb;
        valid_range(off, sl, Wi, Wo, &xa, &xb);
        int64_t q = j->q0;
        for (int d = L - 1; d >= 0; d--) {
            o[d] = q % g->out[d];
            q /= g->out[d];
        }
        for (q = j->q0; q < j->q1; q++, dst += Wo) {
            int64_t base = 0;
            bool ok = true;
            for (int d = 0; d < L; d++) {
                int64_t i = o[d] * g->s[d] - g->pb[d] + kidx[d] * g->d[d];
                if (i < 0 || i >= g->in[d]) {
                    ok = false;
                    break;
                }
                base = base * g->in[d] + i;
            }
            kiln__conv_odo_next(o, g->out, L); /* advance the outer odometer */
            if (acc) {
                if (!ok || xa >= xb)
                    continue;
                float *src = ic + base * Wi + off + xa * sl; /* >= row start */
                const float *cv = dst + xa;
                int64_t n = xb - xa;
                if (sl == 1)
                    for (int64_t x = 0; x < n; x++)
                        src[x] += cv[x];
                else
                    for (int64_t x = 0; x < n; x++)
                        src[x * sl] += cv[x];
                continue;
            }
            if (!ok || xa >= xb) {
                memset(dst, 0, sizeof(float) * (size_t)Wo);
                continue;
            }
            const float *src = ic + base * Wi + off + xa * sl;
            if (xa > 0)
                memset(dst, 0, sizeof(float) * (size_t)xa);
            if (sl == 1) {
                memcpy(dst + xa, src, sizeof(float) * (size_t)(xb - xa));
            } else {
                int64_t x = xa;
                if (sl == 2 && j->gather2)
                    x += j->gather2(dst + xa, src, xb - xa, Wi - (off + xa * 2));
                for (; x < xb; x++)
                    dst[x] = src[(x - xa) * sl];
            }
            if (xb < Wo)
                memset(dst + xb, 0, sizeof(float) * (size_t)(Wo - xb));
        }
    }
}

static void im2col_task(void *ctx, int64_t b, int64_t e) { col_rows(ctx, b, e, false); }

/* col2im: work split by image channel so no two tasks write the same plane */
void kiln__conv_col2im_task(void *ctx, int64_t b, int64_t e)
{
    const kiln_conv_col_job *j = ctx;
    col_rows(j, b * j->g->k_sz, e * j->g->k_sz, true);
}

/* Outer rows per chunk so that rows * row_floats stays near the budget. */
int64_t kiln__conv_chunk_rows(int64_t row_floats, int64_t outer)
{
    int64_t q = row_floats > 0 ? COL_BUDGET / row_floats : outer;
    if (q < 1)
        q = 1;
    if (q > outer)
        q = outer;
    /* balance the chunks */
    if (q > 0) {
        int64_t nch = cdiv(outer, q);
        q = cdiv(outer, nch);
    }
    return q;
}

/* ------------------------------------------------------------------------------------------
 * depthwise float32 (C/group == 1), 2-D (1-D as H = 1)
 * ------------------------------------------------------------------------------------------ */

/* The band buffer (kiln_conv2d's Wp, band, band_rows): Wp columns (input column c - pw), rows
 * for `band` output rows. */
typedef kiln_conv2d dw_geom;
typedef void (*dw_row_fn)(const dw_geom *p, const float *rb, const float *wk, float bias, float *yr);

typedef struct dw_job {
    const conv_geom *g;
    dw_geom p;
    const float *x, *w, *b;
    float *y;
    dw_row_fn row;          /* the isa's vectorized row (strides 1 and 2), or NULL */
    const kiln_epi *post;   /* residual / activation (no bias) over [N*M, out_sz], or NULL */
    bool round_bf16;        /* the input read rounded to BF16 (kiln_kctx.x_bf16) */
} dw_job;

#define DW_BAND_FLOATS ((int64_t)1 << 16)

/* Band buffer layout (conv.h). Outputs are computed 8 at a time (the last block of a row partially
 * stored), stride-2 blocks read 16 consecutive floats: Wp leaves room for all of that. */
void kiln__conv_dw_plan(kiln_conv2d *p)
{
    int64_t wov = (p->Wo + 7) / 8 * 8;
    int64_t a = mul_chk(wov, p->sw), b = mul_chk(p->kw - 1, p->dw), ekh = mul_chk(p->kh - 1, p->dh);
    p->band = 1;
    p->band_rows = 0; /* 0: no buffer, bounds-checked path */
    if (a < 0 || b < 0 || ekh < 0 || a > LIM * 4 || b > LIM * 4 || ekh > LIM * 4)
        return;
    p->Wp = a + b + 16;
    int64_t per = mul_chk(p->sh, p->Wp), extra = mul_chk(ekh + 1, p->Wp);
    if (per < 0 || extra < 0)
        return;
    p->band = DW_BAND_FLOATS > extra ? (DW_BAND_FLOATS - extra) / per + 1 : 1;
    if (p->band > p->Ho)
        p->band = p->Ho;
    if (p->band < 1)
        p->band = 1;
    int64_t rows = mul_chk(p->band - 1, p->sh);
    if (rows < 0 || rows > LIM * 4)
        return;
    rows += ekh + 1;
    /* absurd strides / dilations / pads: keep the bounds-checked path */
    int64_t need = mul_chk(rows, p->Wp), plane = mul_chk(p->H + 16, p->W + 16);
    if (need < 0 || (need > ((int64_t)1 << 22) && (plane < 0 || need > 4 * plane)))
        return;
    p->band_rows = rows;
}

/* Copies input rows [r0 - ph, ...) of the plane into the zero-padded band buffer (rounded to BF16 where asked:
 * while the row is in L1, instead of a rounded copy of the whole input first -- PP-OCRv4 det bf16's depthwise
 * layers spent more on that copy than on the convolution). */
static void dw_fill(const dw_geom *p, const float *xp, int64_t r0, int64_t nrows, float *buf, bool round)
{
    for (int64_t r = 0; r < nrows; r++) {
        float *row = buf + r * p->Wp;
        int64_t iy = r0 + r - p->ph;
        if (iy < 0 || iy >= p->H) {
            memset(row, 0, sizeof(float) * (size_t)p->Wp);
        } else {
            kiln__conv_pad_row(row, p->Wp, xp + iy * p->W, p->W, p->pw);
            if (round)   /* the values kiln__run_mixed's rounded copy would hold */
                kiln__f32_round_bf16_array(row + p->pw, row + p->pw, p->W);
        }
    }
}


static void dw_row_scalar(const dw_geom *p, const float *rb, const float *wk, float bias, float *yr)
{
    for (int64_t ox = 0; ox < p->Wo; ox++) {
        float acc = bias;
        for (int64_t ki = 0; ki < p->kh; ki++) {
            const float *xr = rb + ki * p->dh * p->Wp + ox * p->sw, *wr = wk + ki * p->kw;
            for (int64_t kj = 0; kj < p->kw; kj++)
                acc += wr[kj] * xr[kj * p->dw];
        }
        yr[ox] = acc;
    }
}

static void dw_plane(const dw_geom *p, dw_row_fn row, const float *xp, const float *wk, float bias, float *yp,
                     float *buf, const kiln_epi *post, int64_t pl, bool round)
{
    for (int64_t oy0 = 0; oy0 < p->Ho; oy0 += p->band) {
        int64_t oy1 = oy0 + p->band < p->Ho ? oy0 + p->band : p->Ho;
        dw_fill(p, xp, oy0 * p->sh, (oy1 - oy0 - 1) * p->sh + (p->kh - 1) * p->dh + 1, buf, round);
        for (int64_t oy = oy0; oy < oy1; oy++) {
            const float *rb = buf + (oy - oy0) * p->sh * p->Wp;
            if (row && (p->sw == 1 || p->sw == 2))
                row(p, rb, wk, bias, yp + oy * p->Wo);
            else
                dw_row_scalar(p, rb, wk, bias, yp + oy * p->Wo);
            if (post)
                kiln__epi_apply_f32(post, yp + oy * p->Wo, 0, 1, p->Wo, pl, oy * p->Wo);
        }
    }
}

/* Fallback without a band buffer (allocation failed): bounds-checked taps (round: each input value rounded to BF16). */
static void dw_plane_checked(const dw_geom *p, const float *xp, const float *wk, float bias, float *yp,
                             const kiln_epi *post, int64_t pl, bool round)
{
    for (int64_t oy = 0; oy < p->Ho; oy++) {
        int64_t iy0 = oy * p->sh - p->ph, kia, kib;
        valid_range(iy0, p->dh, p->H, p->kh, &kia, &kib);
        for (int64_t ox = 0; ox < p->Wo; ox++) {
            int64_t ix0 = ox * p->sw - p->pw, kja, kjb;
            valid_range(ix0, p->dw, p->W, p->kw, &kja, &kjb);
            float acc = bias;
            for (int64_t ki = kia; ki < kib; ki++) {
                const float *xr = xp + (iy0 + ki * p->dh) * p->W;
                const float *wr = wk + ki * p->kw;
                for (int64_t kj = kja; kj < kjb; kj++) {
                    float v = xr[ix0 + kj * p->dw];
                    acc += wr[kj] * (round ? kiln__bf16_to_f32(kiln__f32_to_bf16(v)) : v);
                }
            }
            yp[oy * p->Wo + ox] = acc;
        }
        if (post)
            kiln__epi_apply_f32(post, yp + oy * p->Wo, 0, 1, p->Wo, pl, oy * p->Wo);
    }
}

static void dw_task(void *ctx, int64_t b, int64_t e)
{
    const dw_job *j = ctx;
    const conv_geom *g = j->g;
    int64_t Mg = g->M / g->G;
    float *buf = j->p.band_rows ? kiln__malloc(sizeof(float) * (size_t)(j->p.band_rows * j->p.Wp)) : NULL;
    for (int64_t pl = b; pl < e; pl++) {
        int64_t n = pl / g->M, m = pl % g->M, c = m / Mg;
        const float *xp = j->x + (n * g->C + c) * g->in_sz, *wk = j->w + m * g->k_sz;
        float bias = j->b ? j->b[m] : 0.0f, *yp = j->y + pl * g->out_sz;
        if (buf)
            dw_plane(&j->p, j->row, xp, wk, bias, yp, buf, j->post, pl, j->round_bf16);
        else
            dw_plane_checked(&j->p, xp, wk, bias, yp, j->post, pl, j->round_bf16);
    }
    kiln__free(buf);
}

void kiln__conv2d_view(const conv_geom *g, kiln_conv2d *p)
{
    memset(p, 0, sizeof *p);
    int L = g->nsp - 1;
    bool two = g->nsp == 2;
    p->H = two ? g->in[0] : 1;
    p->kh = two ? g->k[0] : 1;
    p->sh = two ? g->s[0] : 1;
    p->dh = two ? g->d[0] : 1;
    p->ph = two ? g->pb[0] : 0;
    p->Ho = two ? g->out[0] : 1;
    p->W = g->in[L];
    p->kw = g->k[L];
    p->sw = g->s[L];
    p->dw = g->d[L];
    p->pw = g->pb[L];
    p->Wo = g->out[L];
}

/* ------------------------------------------------------------------------------------------
 * float32 Conv
 * ------------------------------------------------------------------------------------------ */

/* Implicit im2col for 2-D (and 1-D as H = 1) convolutions: packs rows [k0, k0+kc) x columns
 * [j0, j0+nc) of the virtual column matrix (row r = (c, ki, kj), column j = (oy, ox)) of one
 * image and group straight into the GEMM's B panels, so no column buffer is written and read
 * back. Each panel's columns are split once into segments that stay within one output row;
 * for every K row a segment is one strided copy from an input row (zero outside the image). */
typedef struct im2col_job {
    kiln_im2col c;
    /* the isa's 32- and 16-column panel packers (column strides 1 and 2), or NULL */
    void (*panel32)(const kiln_im2col *c, const kiln_im2col_seg *segs, int ns, int width, int64_t k0, int64_t kc,
                    float *d);
    void (*panel16)(const kiln_im2col *c, const kiln_im2col_seg *segs, int ns, int width, int64_t k0, int64_t kc,
                    float *d);
} im2col_job;

/* The segments of the panel of `width` columns starting at column j; returns their count. */
static int im2col_segs(const kiln_im2col *c, int64_t j, int width, kiln_im2col_seg *segs)
{
    int ns = 0, lane = 0;
    int64_t oy = j / c->Wo, ox = j % c->Wo;
    while (lane < width && ns < KILN_IM2COL_SEG_MAX) {
        int len = (int)(c->Wo - ox < width - lane ? c->Wo - ox : width - lane);
        segs[ns++] = (kiln_im2col_seg){lane, len, oy * c->sh - c->ph, ox * c->sw - c->pw};
        lane += len;
        ox += len;
        if (ox == c->Wo) {
            ox = 0;
            oy++;
        }
    }
    return ns;
}

/* Rows [k0, k0 + kc) of one panel of nr columns (width of them from the segments, the rest zero). */
static void im2col_panel(const kiln_im2col *c, const kiln_im2col_seg *segs, int ns, int width, int nr, int64_t k0,
                         int64_t kc, float *d)
{
    const int64_t ksz = c->kh * c->kw, plane = c->H * c->W;
    int64_t ch = k0 / ksz, kk = k0 % ksz, ki = kk / c->kw, kj = kk % c->kw;
    for (int64_t k = 0; k < kc; k++, d += nr) {
        const float *xc = c->x + ch * plane;
        int64_t dy = ki * c->dh, dx = kj * c->dw;
        for (int s = 0; s < ns; s++) {
            const kiln_im2col_seg *sg = &segs[s];
            float *ds = d + sg->lane;
            int64_t iy = sg->y0 + dy;
            if (iy < 0 || iy >= c->H) {
                memset(ds, 0, sizeof(float) * (size_t)sg->len);
                continue;
            }
            const float *row = xc + iy * c->W;
            int64_t ix0 = sg->x0 + dx, sw = c->sw;
            /* lanes [ta, tb) read inside the row (ix0 + t * sw in [0, W)), zeros around them */
            int64_t ta = ix0 >= 0 ? 0 : (-ix0 + sw - 1) / sw, tb = c->W - ix0 <= 0 ? 0 : (c->W - ix0 + sw - 1) / sw;
            if (tb > sg->len)
                tb = sg->len;
            if (ta > tb)
                ta = tb;
            for (int64_t t = 0; t < ta; t++)
                ds[t] = 0.0f;
            if (sw == 1 && tb > ta)
                memcpy(ds + ta, row + ix0 + ta, sizeof(float) * (size_t)(tb - ta));
            else
                for (int64_t t = ta; t < tb; t++)
                    ds[t] = row[ix0 + t * sw];
            for (int64_t t = tb; t < sg->len; t++)
                ds[t] = 0.0f;
        }
        if (width < nr)
            memset(d + width, 0, sizeof(float) * (size_t)(nr - width));
        if (++kj == c->kw) {
            kj = 0;
            if (++ki == c->kh) {
                ki = 0;
                ch++;
            }
        }
    }
}

/* The GEMM's B packer (kiln_gemm.packb) */
static void im2col_pack(void *vctx, int64_t k0, int64_t kc, int64_t j0, int64_t nc, int nr, float *dst)
{
    const im2col_job *job = vctx;
    const kiln_im2col *c = &job->c;
    bool vec = job->panel32 && nr == 32 && c->sw <= 2, vec16 = job->panel16 && nr == 16 && c->sw <= 2;
    kiln_im2col_seg segs[KILN_IM2COL_SEG_MAX];
    for (int64_t p = 0; p * nr < nc; p++) {
        int width = (int)(nc - p * nr < nr ? nc - p * nr : nr);
        int ns = im2col_segs(c, j0 + p * nr, width, segs);
        float *d = dst + p * kc * nr;
        if (vec)
            job->panel32(c, segs, ns, width, k0, kc, d);
        else if (vec16)
            job->panel16(c, segs, ns, width, k0, kc, d);
        else
            im2col_panel(c, segs, ns, width, nr, k0, kc, d);
    }
}

/* dst[c, oy, ox] = x[c, oy*sh, ox*sw] for channels [c0, c1) (1x1 strided conv input) */
typedef struct subsample_job {
    const kiln_im2col *c;
    float *dst;
    int64_t Ho;
    int64_t (*gather2)(float *dst, const float *src, int64_t n, int64_t avail);   /* kiln_conv_isa's, or NULL */
} subsample_job;

static void subsample_task(void *vctx, int64_t c0, int64_t c1)
{
    const subsample_job *j = vctx;
    const kiln_im2col *c = j->c;
    for (int64_t ch = c0; ch < c1; ch++) {
        const float *xc = c->x + ch * c->H * c->W;
        float *d = j->dst + ch * j->Ho * c->Wo;
        for (int64_t oy = 0; oy < j->Ho; oy++, d += c->Wo) {
            const float *row = xc + oy * c->sh * c->W;
            if (c->sw == 1) {
                memcpy(d, row, sizeof(float) * (size_t)c->Wo);
                continue;
            }
            int64_t ox = 0;
            if (c->sw == 2 && j->gather2)   /* vector loads may read on into the plane's next rows */
                ox = j->gather2(d, row, c->Wo, (c->H - oy * c->sh) * c->W);
            for (; ox < c->Wo; ox++)
                d[ox] = row[ox * c->sw];
        }
    }
}

void kiln__conv_subsample(kiln_pool *pool, int nthreads, const float *x, int64_t C, int64_t H, int64_t W, int64_t sh,
                          int64_t sw, int64_t Ho, int64_t Wo, float *dst,
                          int64_t (*gather2)(float *dst, const float *src, int64_t n, int64_t avail))
{
    kiln_im2col c = {.x = x, .H = H, .W = W, .sh = sh, .sw = sw, .Wo = Wo};
    subsample_job sj = {.c = &c, .dst = dst, .Ho = Ho, .gather2 = gather2};
    kiln__parallel_for(pool, nthreads, C, 1 + 16384 / (Ho * Wo + 1), subsample_task, &sj);
}

kiln_epi kiln__conv_epi(const conv_geom *g, const float *b, const kiln_epi *post, int64_t gi, int64_t row0)
{
    kiln_epi e = {.bias = b ? b + gi * (g->M / g->G) : NULL, .row_bias = true};
    if (post) {
        e.res = post->res ? post->res + row0 * g->out_sz : NULL;
        e.ldr = g->out_sz;
        e.act = post->act;
    }
    return e;
}

bool kiln__conv_pointwise(const conv_geom *g)
{
    bool pointwise = g->k_sz == 1;
    for (int i = 0; i < g->nsp; i++)
        if (g->s[i] != 1 || g->pb[i] != 0 || g->pe[i] != 0)
            pointwise = false;
    return pointwise;
}

/* 1-D / 2-D 1x1 with strides and no padding (ResNet downsampling): subsample the input once,
 * then a pointwise GEMM (cheaper than gathering the strided columns in every GEMM task). */
static bool strided_1x1(const conv_geom *g)
{
    bool ok = g->k_sz == 1 && g->nsp <= 2 && !kiln__conv_pointwise(g);
    for (int i = 0; i < g->nsp; i++)
        if (g->pb[i] != 0 || g->pe[i] != 0)
            ok = false;
    return ok;
}

/* One GEMM per image and group, W[Mg, K] x cols[K, out_sz], epilogue = bias + post: pointwise
 * (B = the image), strided 1x1 (B = the subsampled image) or 1-D / 2-D implicit im2col. */
static kiln_status conv_gemm(const kiln_kctx *ctx, const kiln_conv_isa *isa, const conv_geom *g, const float *x,
                             const float *w, const float *b, float *y, const kiln_epi *post)
{
    int nt = ctx->nthreads;
    int64_t Cg = g->C / g->G, Mg = g->M / g->G, K = Cg * g->k_sz;
    bool pointwise = kiln__conv_pointwise(g), strided1x1 = strided_1x1(g);
    float *sub = NULL;
    if (strided1x1) {
        int64_t cnt = mul_chk(Cg, g->out_sz);
        if (cnt < 0 || (uint64_t)cnt > kiln__max_tensor_bytes() / sizeof(float))
            return kiln__kerr(ctx, KILN_ERR_LIMIT, "scratch buffer of %lld elements is too large", (long long)cnt);
        sub = kiln__scratch(KILN_SCRATCH_CONV, (size_t)cnt * sizeof(float));
        if (!sub)
            return kiln__kerr(ctx, KILN_ERR_NOMEM, "out of memory (scratch buffer of %lld elements)", (long long)cnt);
    }
    bool implicit = !pointwise && !strided1x1 && K > 0;
    im2col_job ic = {.panel32 = isa ? isa->im2col_panel32 : NULL, .panel16 = isa ? isa->im2col_panel16 : NULL};
    if (implicit || strided1x1) {
        kiln_conv2d p;
        kiln__conv2d_view(g, &p);
        ic.c = (kiln_im2col){.H = p.H, .W = p.W, .kh = p.kh, .kw = p.kw, .sh = p.sh, .sw = p.sw, .dh = p.dh,
                             .dw = p.dw, .ph = p.ph, .pw = p.pw, .Wo = p.Wo};
    }
    for (int64_t n = 0; n < g->N; n++)
        for (int64_t gi = 0; gi < g->G; gi++) {
            int64_t row0 = n * g->M + gi * Mg;
            kiln_epi e = kiln__conv_epi(g, b, post, gi, row0);
            const float *xg = x + (n * g->C + gi * Cg) * g->in_sz;
            kiln_gemm gm = {.M = Mg, .N = g->out_sz, .K = K, .alpha = 1.0f, .beta = 0.0f, .A = w + gi * Mg * K,
                            .lda = K, .C = y + row0 * g->out_sz, .ldc = g->out_sz, .epi = &e};
            if (implicit) {
                ic.c.x = xg;
                gm.packb = im2col_pack;
                gm.packb_ctx = &ic;
            } else if (strided1x1) {
                kiln__conv_subsample(ctx->pool, nt, xg, Cg, ic.c.H, ic.c.W, ic.c.sh, ic.c.sw, g->out_sz / ic.c.Wo,
                                     ic.c.Wo, sub, isa ? isa->gather2 : NULL);
                gm.B = sub;
                gm.ldb = g->out_sz;
            } else {
                gm.B = xg;
                gm.ldb = g->in_sz;
            }
            kiln__sgemm_ex(ctx->pool, nt, &gm);
        }
    return KILN_OK;
}

/* N-D: explicit im2col of chunks of output rows into a scratch buffer (multithreaded over its
 * rows), then one GEMM per chunk with the epilogue. */
static kiln_status conv_im2col(const kiln_kctx *ctx, const kiln_conv_isa *isa, const conv_geom *g, const float *x,
                               const float *w, const float *b, float *y, const kiln_epi *post)
{
    int nt = ctx->nthreads;
    int64_t Cg = g->C / g->G, Mg = g->M / g->G, K = Cg * g->k_sz;
    int L = g->nsp - 1;
    int64_t Wo = g->out[L], outer = g->out_sz / Wo;
    int64_t qc = kiln__conv_chunk_rows(mul_chk(K, Wo), outer);
    float *col;
    KILN_TRY(kiln__win_scratch(ctx, mul_chk(mul_chk(K, qc), Wo), sizeof(float), (void **)&col));
    int64_t grain = 1 + 8192 / (qc * Wo);
    for (int64_t n = 0; n < g->N; n++)
        for (int64_t gi = 0; gi < g->G; gi++) {
            int64_t row0 = n * g->M + gi * Mg;
            float *yg = y + row0 * g->out_sz;
            const float *wg = w + gi * Mg * K;
            for (int64_t q0 = 0; q0 < outer; q0 += qc) {
                int64_t q1 = q0 + qc < outer ? q0 + qc : outer, nc = (q1 - q0) * Wo;
                kiln_conv_col_job j = {.g = g, .img = (float *)(x + (n * g->C + gi * Cg) * g->in_sz), .col = col,
                             .q0 = q0, .q1 = q1, .ncols = nc, .gather2 = isa ? isa->gather2 : NULL};
                kiln__parallel_for(ctx->pool, nt, K, grain, im2col_task, &j);
                kiln_epi e = kiln__conv_epi(g, b, post, gi, row0);
                if (e.res)
                    e.res += q0 * Wo;
                kiln_gemm gm = {.M = Mg, .N = nc, .K = K, .alpha = 1.0f, .beta = 0.0f, .A = wg, .lda = K,
                                .B = col, .ldb = nc, .C = yg + q0 * Wo, .ldc = g->out_sz, .epi = &e};
                kiln__sgemm_ex(ctx->pool, nt, &gm);
            }
        }
    kiln__free(col);
    return KILN_OK;
}

/* float32 Conv with the hooks of isa (NULL: none); post (optional, no bias): residual
 * [N, M, out...] and activation applied to the output. Every element of y is written. w is NULL
 * when the weights were stored only prepared (an isa layer strategy may still run the layer). */
static kiln_status conv_f32_ex(const kiln_kctx *ctx, const kiln_conv_isa *isa, const conv_geom *g, const float *x,
                               const float *w, const float *b, float *y, const kiln_epi *post)
{
    if (g->N == 0 || g->M == 0 || g->out_sz == 0)
        return KILN_OK;
    if (kiln__epi_is_noop(post))
        post = NULL;
    const bool dw = g->C / g->G == 1 && g->nsp <= 2;
    if (ctx->x_bf16 && !dw)
        return kiln__kerr(ctx, KILN_ERR_INTERNAL, "BF16 input rounding asked of a convolution that is not depthwise");
    if (isa && isa->layer && !ctx->x_bf16) {   /* (the isa's layers are not depthwise) */
        bool done = false;
        KILN_TRY(isa->layer(ctx, g, x, w, b, y, post, &done));
        if (done)
            return KILN_OK;
    }
    if (!w)
        return kiln__prep_missing(ctx, 1);   /* weights stored only in a layout that does not fit */
    if (dw) {
        dw_job j = {.g = g, .x = x, .w = w, .b = b, .y = y, .row = isa ? isa->dw_row : NULL, .post = post,
                    .round_bf16 = ctx->x_bf16};
        kiln__conv2d_view(g, &j.p);
        kiln__conv_dw_plan(&j.p);
        int64_t per = mul_chk(g->out_sz, g->k_sz), grain = per >= 0 && per < 16384 ? 16384 / (per + 1) + 1 : 1;
        kiln__parallel_for(ctx->pool, ctx->nthreads, g->N * g->M, grain, dw_task, &j);
        return KILN_OK;
    }
    /* one GEMM per image and group (pointwise, 1-D / 2-D), else the N-D im2col in chunks */
    bool gemm = kiln__conv_pointwise(g) || (g->nsp <= 2 && (g->C / g->G * g->k_sz > 0 || strided_1x1(g)));
    return gemm ? conv_gemm(ctx, isa, g, x, w, b, y, post) : conv_im2col(ctx, isa, g, x, w, b, y, post);
}

static kiln_status conv_f32(const kiln_kctx *ctx, const kiln_conv_isa *isa, const conv_geom *g, const float *x,
                            const float *w, const float *b, float *y)
{
    return conv_f32_ex(ctx, isa, g, x, w, b, y, NULL);
}

/* ------------------------------------------------------------------------------------------
 * direct double paths (float64, ConvInteger)
 * ------------------------------------------------------------------------------------------ */

/* Conv: one task per (image, output channel) plane. */
void kiln__conv_double_task(void *ctx, int64_t b0, int64_t e0)
{
    const kiln_conv_double_job *j = ctx;
    const conv_geom *g = j->g;
    int64_t Cg = g->C / g->G, Mg = g->M / g->G;
    for (int64_t pl = b0; pl < e0; pl++) {
        int64_t n = pl / g->M, m = pl % g->M, gi = m / Mg;
        double *yp = j->y + pl * g->out_sz;
        int64_t o[SP_MAX] = {0};
        for (int64_t op = 0; op < g->out_sz; op++) {
            double acc = j->b ? j->b[m] : 0.0;
            for (int64_t c = 0; c < Cg; c++) {
                const double *xc = j->x + (n * g->C + gi * Cg + c) * g->in_sz;
                const double *wc = j->w + (m * Cg + c) * g->k_sz;
                int64_t kk[SP_MAX] = {0};
                for (int64_t kp = 0; kp < g->k_sz; kp++) {
                    int64_t idx = kiln__conv_tap_index(g, o, kk);
                    if (idx >= 0)
                        acc += xc[idx] * wc[kp];
                    kiln__conv_odo_next(kk, g->k, g->nsp);
                }
            }
            yp[op] = acc;
            kiln__conv_odo_next(o, g->out, g->nsp);
        }
    }
}

int64_t kiln__conv_double_grain(const conv_geom *g, int64_t per_plane)
{
    int64_t work = mul_chk(per_plane, g->k_sz);
    return work > 0 && work < 65536 ? 65536 / work : 1;
}

/* ------------------------------------------------------------------------------------------
 * kernels
 * ------------------------------------------------------------------------------------------ */

static bool is_float_dt(kiln_dtype dt)
{
    return dt == KILN_DT_FLOAT32 || dt == KILN_DT_FLOAT64 || dt == KILN_DT_FLOAT16 || dt == KILN_DT_BFLOAT16;
}

kiln_status kiln__conv_float_operands(const kiln_kctx *ctx, const kiln_tensor *x, const kiln_tensor *w)
{
    if (!x || !w)
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "missing input X or W");
    if (!is_float_dt(x->dtype))
        return kiln__kerr(ctx, KILN_ERR_DTYPE, "unsupported dtype %s", kiln_dtype_name(x->dtype));
    if (w->dtype != x->dtype)
        return kiln__kerr(ctx, KILN_ERR_DTYPE, "W has dtype %s, X has %s", kiln_dtype_name(w->dtype),
                          kiln_dtype_name(x->dtype));
    return KILN_OK;
}

kiln_status kiln__conv_check_bias(const kiln_kctx *ctx, const kiln_tensor *b, kiln_dtype dt, int64_t M)
{
    if (!b)
        return KILN_OK;
    if (b->dtype != dt)
        return kiln__kerr(ctx, KILN_ERR_DTYPE, "B has dtype %s, expected %s", kiln_dtype_name(b->dtype),
                          kiln_dtype_name(dt));
    if (b->ndim != 1 || b->dims[0] != M)
        return kiln__kerr(ctx, KILN_ERR_SHAPE, "B must be 1-D with %lld elements", (long long)M);
    return KILN_OK;
}

/* Converts n elements of t's data to a new float (or double) buffer. */
static kiln_status to_buf(const kiln_kctx *ctx, const kiln_tensor *t, int64_t n, kiln_dtype dt, void **out)
{
    *out = NULL;
    if (!t)
        return KILN_OK;
    KILN_TRY(kiln__win_scratch(ctx, n, kiln_dtype_size(dt), out));
    kiln_status st = kiln__convert(dt, *out, t->dtype, t->data, n);
    if (st != KILN_OK) {
        kiln__free(*out);
        *out = NULL;
    }
    return st;
}

/* Runs the float32 or double implementation for any float dtype: float32 / float64 in place,
 * float16 / bfloat16 converted to float32 and back. */
kiln_status kiln__conv_run_float(kiln_kctx *ctx, const kiln_conv_isa *isa, const conv_geom *g, const kiln_tensor *x,
                                 const kiln_tensor *w, const kiln_tensor *b, kiln_tensor *y, kiln_conv_f32_fn f32,
                                 kiln__par_fn dtask, int64_t planes, int64_t per_plane)
{
    kiln_dtype dt = x->dtype;
    int64_t nx = kiln_tensor_numel(x), nw = kiln_tensor_numel(w), ny = kiln_tensor_numel(y);
    if (dt == KILN_DT_FLOAT32)
        return f32(ctx, isa, g, x->data, w->data, b ? b->data : NULL, y->data);
    if (dt == KILN_DT_FLOAT64) {
        kiln_conv_double_job j = {.g = g, .x = x->data, .w = w->data, .b = b ? b->data : NULL, .y = y->data};
        kiln__parallel_for(ctx->pool, ctx->nthreads, planes, kiln__conv_double_grain(g, per_plane), dtask, &j);
        return KILN_OK;
    }
    float *fx = NULL, *fw = NULL, *fb = NULL, *fy = NULL;
    kiln_status st = to_buf(ctx, x, nx, KILN_DT_FLOAT32, (void **)&fx);
    if (st == KILN_OK)
        st = to_buf(ctx, w, nw, KILN_DT_FLOAT32, (void **)&fw);
    if (st == KILN_OK && b)
        st = to_buf(ctx, b, b->dims[0], KILN_DT_FLOAT32, (void **)&fb);
    if (st == KILN_OK)
        st = kiln__win_scratch(ctx, ny, sizeof(float), (void **)&fy);
    if (st == KILN_OK) {
        memset(fy, 0, sizeof(float) * (size_t)ny);
        st = f32(ctx, isa, g, fx, fw, fb, fy);
    }
    if (st == KILN_OK)
        st = kiln__convert(dt, y->data, KILN_DT_FLOAT32, fy, ny);
    kiln__free(fx);
    kiln__free(fw);
    kiln__free(fb);
    kiln__free(fy);
    return st;
}

/* Conv, optionally with a fused residual (same shape as the output) and activation. *handled
 * is set false (and nothing done) when the fused form does not apply: a residual or
 * activation with a dtype other than float32, or a residual of another shape. */
static kiln_status conv_run(kiln_kctx *ctx, const kiln_conv_isa *isa, const kiln_tensor *res, const kiln_act *act, bool *handled)
{
    const kiln_tensor *x = kiln__kin(ctx, 0), *w = kiln__kin(ctx, 1), *b = kiln__kin(ctx, 2);
    bool fused = res || (act && act->kind != KILN_ACT_NONE);
    *handled = true;
    KILN_TRY(kiln__conv_float_operands(ctx, x, w));
    if (kiln__prep_dropped(w) && x->dtype != KILN_DT_FLOAT32)
        return kiln__prep_missing(ctx, 1);
    conv_geom g;
    KILN_TRY(kiln__conv_setup(ctx, x, w, &g));
    KILN_TRY(kiln__conv_check_bias(ctx, b, x->dtype, g.M));
    int64_t dims[KILN_MAX_DIMS] = {g.N, g.M};
    for (int i = 0; i < g.nsp; i++)
        dims[2 + i] = g.out[i];
    if (fused) {
        bool ok = x->dtype == KILN_DT_FLOAT32;
        if (ok && res) {
            /* same element count and the same dims after leading ones */
            ok = res->dtype == KILN_DT_FLOAT32 && res->ndim <= x->ndim &&
                 kiln_tensor_numel(res) == kiln__shape_numel(x->ndim, dims);
            for (int d = 0; ok && d < res->ndim; d++)
                ok = res->dims[d] == dims[x->ndim - res->ndim + d];
        }
        if (!ok) {
            *handled = false;
            return KILN_OK;
        }
    }
    if (x->dtype == KILN_DT_FLOAT32) {
        /* every element of the output is written */
        KILN_TRY(kiln__kout_uninit(ctx, 0, x->dtype, x->ndim, dims));
        kiln_epi post = {.res = res ? res->data : NULL, .ldr = g.out_sz};
        if (act)
            post.act = *act;
        return conv_f32_ex(ctx, isa, &g, x->data, w->data, b ? b->data : NULL, ctx->out[0]->data, &post);
    }
    KILN_TRY(kiln__kout(ctx, 0, x->dtype, x->ndim, dims));
    return kiln__conv_run_float(ctx, isa, &g, x, w, b, ctx->out[0], conv_f32, kiln__conv_double_task, g.N * g.M,
                                mul_chk(g.out_sz, g.C / g.G));
}

kiln_status kiln__conv(kiln_kctx *ctx, const kiln_conv_isa *isa, kiln_kernel_fn self)
{
    if (kiln__lowbit_layer(ctx)) /* FP8 / FP4 / INT4 weights (lowbit.h) */
        return kiln__run_lowbit(ctx, self);
    if (kiln__mixed_weight(ctx, 1)) /* float32 X, FP16 / BF16 W (qgemm_bf16.h) */
        return kiln__run_mixed(ctx, 1, self);
    bool handled;
    return conv_run(ctx, isa, NULL, NULL, &handled);
}

static kiln_status k_conv(kiln_kctx *ctx) { return kiln__conv(ctx, NULL, k_conv); }

bool kiln__conv_res_in_place_ok(const kiln_kctx *ctx, const kiln_tensor *res)
{
    const kiln_tensor *x = kiln__kin(ctx, 0), *w = kiln__kin(ctx, 1);
    conv_geom g;
    if (!x || !w || !res || x->dtype != KILN_DT_FLOAT32 || w->dtype != KILN_DT_FLOAT32 ||
        res->dtype != KILN_DT_FLOAT32 || kiln__prep_dropped(w) || res->ndim > x->ndim)
        return false;
    /* the geometry conv_run derives (a geometry it refuses: not in place; the run reports it), pointwise (1x1,
     * stride 1, no padding) and not depthwise (C / G == 1 runs the depthwise rows) */
    if (kiln__conv_setup(ctx, x, w, &g) != KILN_OK || !kiln__conv_pointwise(&g) || g.C / g.G == 1)
        return false;
    /* the output [N, M, spatial of X] is the residual's shape */
    int64_t dims[KILN_MAX_DIMS] = {g.N, g.M};
    for (int d = 0; d < g.nsp; d++)
        dims[2 + d] = g.out[d];
    int off = x->ndim - res->ndim;
    for (int d = 0; d < off; d++)
        if (dims[d] != 1)
            return false;
    for (int d = 0; d < res->ndim; d++)
        if (res->dims[d] != dims[off + d])
            return false;
    /* one GEMM per image and group, W[M/G, C/G] x X[C/G, spatial], reading the residual as its own output */
    return kiln__sgemm_res_in_place(g.M / g.G, g.out_sz, g.C / g.G);
}

kiln_status kiln__conv_fused(kiln_kctx *ctx, const kiln_conv_isa *isa, const kiln_tensor *res, const kiln_act *act,
                             bool *handled)
{
    return conv_run(ctx, isa, res, act, handled);
}

/* Build time: BF16 weights become the BF16 convolution's rows; float32 weights are read as they
 * are (the x86 kernels register a prepare function over this one: Winograd-transformed filters,
 * cpu/x86/conv_wino.c). */
static kiln_status prep_conv(const kiln_node *n, int n_in, const kiln_tensor *const *consts, void **blob,
                             size_t *size)
{
    *blob = NULL;
    *size = 0;
    const kiln_tensor *w = consts && n_in > 1 ? consts[1] : NULL;
    if (w && w->dtype == KILN_DT_BFLOAT16)   /* BF16 weights: the BF16 conv's rows */
        return kiln__bconv_prep(n, n_in, consts, blob, size);
    return KILN_OK;
}

const kiln_prep_reg kiln__prep_conv[] = {
    {KILN_OP_Conv, prep_conv},
    {KILN_OP_FusedConv, prep_conv},
    {KILN_OP_COUNT, NULL},
};

const kiln_kernel_reg kiln__ref_conv[] = {
    {KILN_OP_Conv, k_conv},
    {KILN_OP_ConvTranspose, kiln__k_conv_transpose},
    {KILN_OP_ConvInteger, kiln__k_conv_integer},
    {KILN_OP_COUNT, NULL},
};

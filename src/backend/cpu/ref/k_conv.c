/* Reference kernels: Conv, ConvTranspose, ConvInteger (1-D, 2-D, 3-D and up to 6 spatial dims).
 *
 * float32 Conv is the hot path of CNNs. Every float32 path writes each output element exactly
 * once (the output is allocated uninitialized) and applies the layer's epilogue (bias, and for
 * the fused FusedConv layer a residual and an activation) while the values are in registers.
 * Strategies, chosen per layer:
 *   - depthwise (one input channel per group, 1-D/2-D): rows of the plane are copied into a
 *     zero-padded band buffer, then every output row is computed without bounds checks,
 *     AVX2-vectorized for strides 1 and 2; multithreaded over (image, channel) planes;
 *   - Winograd for 3x3 stride-1 convolutions with enough channels and tiles (wino.h; see
 *     conv_wino): F(2x2, 3x3), 16 GEMMs instead of 36 multiplies per tile and channel pair;
 *     with filters transformed at build time (prep_conv: a KILN_PREP_WINO_F43 blob, F(4x4, 3x3),
 *     for up to 2^14 channel pairs, else KILN_PREP_WINO_F23) for every tile count, and then
 *     the original weights are not read;
 *   - direct convolution (AVX-512) for 2-D layers with few output channels and wide rows: the
 *     input is copied once into a zero-padded, phase-split layout and the GEMM micro-kernel
 *     reads its B operand straight from it through an offset table (no im2col, no packing);
 *   - pointwise (1x1, stride 1, no padding): one GEMM per image and group, W x X; strided 1x1
 *     convolutions subsample the input first;
 *   - other 1-D / 2-D layers: an implicit-im2col GEMM whose B packer gathers the column
 *     matrix straight from the image into the GEMM's panels;
 *   - 3-D and up: im2col of a chunk of output rows into a scratch buffer (multithreaded over
 *     its rows), then one GEMM W[M/g, K] x col[K, chunk] with the epilogue.
 * float32 ConvTranspose is a GEMM W^T x X into a column buffer followed by col2im
 * (multithreaded over output channels). float16 / bfloat16 go through float32; float64 and
 * ConvInteger use direct loops with double accumulation (exact for the integer case). */
#include "../../kernel.h"
#include "../gemm.h"
#include "../fused.h"
#include "../prep.h"
#include "../lowbit.h"
#include "../qgemm_bf16.h"
#include "../scratch.h"
#include "../vmath.h"
#include "window.h"
#include "wino.h"
#include <math.h>

#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#define CONV_X86 1
#include <immintrin.h>
#else
#define CONV_X86 0
#endif

#ifndef COL_BUDGET
#define COL_BUDGET ((int64_t)1 << 20) /* floats in one im2col chunk (soft target) */
#endif

/* Geometry in the convolution's view (window.h). For Conv: "in" is the input image, "out" the
 * output. For ConvTranspose (the adjoint of a Conv): "in" is the ConvTranspose OUTPUT image (C =
 * its channels) and "out" is the ConvTranspose input (M = its channels), so im2col / col2im index
 * the same way for both. */
typedef kiln_window conv_geom;

/* Checks the kernel_shape attribute (optional) against the weight's spatial dims. */
static kiln_status check_kernel_shape(const kiln_kctx *ctx, const conv_geom *g)
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
static kiln_status conv_setup(const kiln_kctx *ctx, const kiln_tensor *x, const kiln_tensor *w, conv_geom *g)
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
    KILN_TRY(check_kernel_shape(ctx, g));
    return kiln__win_setup(ctx, g, false);
}

static int have_avx2(void)
{
#if CONV_X86
    return kiln__cpu_has(KILN_CPU_AVX2_FMA);
#else
    return 0;
#endif
}

/* ------------------------------------------------------------------------------------------
 * im2col / col2im over a chunk of "outer rows" (all output dims but the last)
 * ------------------------------------------------------------------------------------------ */

#if CONV_X86
__attribute__((target("avx2,fma"))) static inline __m256 even8(const float *q)
{
    __m256 a = _mm256_loadu_ps(q), b = _mm256_loadu_ps(q + 8);
    __m256 t = _mm256_shuffle_ps(a, b, _MM_SHUFFLE(2, 0, 2, 0));
    return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(t), _MM_SHUFFLE(3, 1, 2, 0)));
}

/* dst[i] = src[2 i] for i < n while the 16-float loads stay below src + avail; returns i reached */
__attribute__((target("avx2,fma"))) static int64_t gather2_avx2(float *dst, const float *src, int64_t n,
                                                                int64_t avail)
{
    int64_t i = 0;
    for (; i + 8 <= n && 2 * i + 16 <= avail; i += 8)
        _mm256_storeu_ps(dst + i, even8(src + 2 * i));
    return i;
}
#endif

typedef struct col_job {
    const conv_geom *g;
    float *img;        /* image: channel 0 of the group (read by im2col, accumulated by col2im) */
    float *col;        /* [rows, ncols] */
    int64_t q0, q1;    /* outer rows of the chunk */
    int64_t ncols;     /* (q1 - q0) * out[last] */
    bool avx2;
} col_job;

/* Processes col rows [r0, r1): im2col (acc == false) or col2im (acc == true). */
static void col_rows(const col_job *j, int64_t r0, int64_t r1, bool acc)
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
            for (int d = L - 1; d >= 0; d--) { /* advance the outer odometer */
                if (++o[d] < g->out[d])
                    break;
                o[d] = 0;
            }
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
#if CONV_X86
                if (sl == 2 && j->avx2)
                    x += gather2_avx2(dst + xa, src, xb - xa, Wi - (off + xa * 2));
#endif
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
static void col2im_task(void *ctx, int64_t b, int64_t e)
{
    const col_job *j = ctx;
    col_rows(j, b * j->g->k_sz, e * j->g->k_sz, true);
}

/* Outer rows per chunk so that rows * row_floats stays near the budget. */
static int64_t chunk_rows(int64_t row_floats, int64_t outer)
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

typedef struct dw_geom {
    int64_t H, W, kh, kw, sh, sw, dh, dw, ph, pw, Ho, Wo;
    /* padded band buffer: Wp columns (input column c - pw), rows for `band` output rows */
    int64_t Wp, band, band_rows;
} dw_geom;

typedef struct dw_job {
    const conv_geom *g;
    dw_geom p;
    const float *x, *w, *b;
    float *y;
    bool avx2;
    const kiln_epi *post;   /* residual / activation (no bias) over [N*M, out_sz], or NULL */
} dw_job;

#define DW_BAND_FLOATS ((int64_t)1 << 16)

/* Band buffer layout. Outputs are computed 8 at a time (the last block of a row partially
 * stored), stride-2 blocks read 16 consecutive floats: Wp leaves room for all of that. */
static void dw_plan(dw_geom *p)
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

/* Copies input rows [r0 - ph, ...) of the plane into the zero-padded band buffer. */
static void dw_fill(const dw_geom *p, const float *xp, int64_t r0, int64_t nrows, float *buf)
{
    int64_t ncopy = p->W < p->Wp - p->pw ? p->W : p->Wp - p->pw, lead = p->pw < p->Wp ? p->pw : p->Wp;
    if (ncopy < 0)
        ncopy = 0;
    for (int64_t r = 0; r < nrows; r++) {
        float *row = buf + r * p->Wp;
        int64_t iy = r0 + r - p->ph;
        if (iy < 0 || iy >= p->H) {
            memset(row, 0, sizeof(float) * (size_t)p->Wp);
            continue;
        }
        memset(row, 0, sizeof(float) * (size_t)lead);
        memcpy(row + lead, xp + iy * p->W, sizeof(float) * (size_t)ncopy);
        memset(row + lead + ncopy, 0, sizeof(float) * (size_t)(p->Wp - lead - ncopy));
    }
}

#if CONV_X86
__attribute__((target("avx2,fma"))) static inline void store_part(float *y, int64_t n, __m256 v)
{
    if (n >= 8) {
        _mm256_storeu_ps(y, v);
        return;
    }
    __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    _mm256_maskstore_ps(y, mask, v);
}

/* One output row from the padded rows starting at rb (tap (0,0) of output 0), strides 1 or 2. */
__attribute__((target("avx2,fma"))) static void dw_row_avx2(const dw_geom *p, const float *rb, const float *wk,
                                                            float bias, float *yr)
{
    const int64_t kh = p->kh, kw = p->kw, dw = p->dw, rs = p->dh * p->Wp, Wo = p->Wo;
    int64_t ox = 0;
    if (p->sw == 1) {
        for (; ox + 32 <= Wo; ox += 32) {
            __m256 a0 = _mm256_set1_ps(bias), a1 = a0, a2 = a0, a3 = a0;
            for (int64_t ki = 0; ki < kh; ki++) {
                const float *xr = rb + ki * rs + ox, *wr = wk + ki * kw;
                for (int64_t kj = 0; kj < kw; kj++) {
                    const float *q = xr + kj * dw;
                    __m256 wv = _mm256_broadcast_ss(wr + kj);
                    a0 = _mm256_fmadd_ps(wv, _mm256_loadu_ps(q), a0);
                    a1 = _mm256_fmadd_ps(wv, _mm256_loadu_ps(q + 8), a1);
                    a2 = _mm256_fmadd_ps(wv, _mm256_loadu_ps(q + 16), a2);
                    a3 = _mm256_fmadd_ps(wv, _mm256_loadu_ps(q + 24), a3);
                }
            }
            _mm256_storeu_ps(yr + ox, a0);
            _mm256_storeu_ps(yr + ox + 8, a1);
            _mm256_storeu_ps(yr + ox + 16, a2);
            _mm256_storeu_ps(yr + ox + 24, a3);
        }
        for (; ox < Wo; ox += 8) {
            __m256 a0 = _mm256_set1_ps(bias);
            for (int64_t ki = 0; ki < kh; ki++) {
                const float *xr = rb + ki * rs + ox, *wr = wk + ki * kw;
                for (int64_t kj = 0; kj < kw; kj++)
                    a0 = _mm256_fmadd_ps(_mm256_broadcast_ss(wr + kj), _mm256_loadu_ps(xr + kj * dw), a0);
            }
            store_part(yr + ox, Wo - ox, a0);
        }
    } else {
        for (; ox + 16 <= Wo; ox += 16) {
            __m256 a0 = _mm256_set1_ps(bias), a1 = a0;
            for (int64_t ki = 0; ki < kh; ki++) {
                const float *xr = rb + ki * rs + 2 * ox, *wr = wk + ki * kw;
                for (int64_t kj = 0; kj < kw; kj++) {
                    const float *q = xr + kj * dw;
                    __m256 wv = _mm256_broadcast_ss(wr + kj);
                    a0 = _mm256_fmadd_ps(wv, even8(q), a0);
                    a1 = _mm256_fmadd_ps(wv, even8(q + 16), a1);
                }
            }
            _mm256_storeu_ps(yr + ox, a0);
            _mm256_storeu_ps(yr + ox + 8, a1);
        }
        for (; ox < Wo; ox += 8) {
            __m256 a0 = _mm256_set1_ps(bias);
            for (int64_t ki = 0; ki < kh; ki++) {
                const float *xr = rb + ki * rs + 2 * ox, *wr = wk + ki * kw;
                for (int64_t kj = 0; kj < kw; kj++)
                    a0 = _mm256_fmadd_ps(_mm256_broadcast_ss(wr + kj), even8(xr + kj * dw), a0);
            }
            store_part(yr + ox, Wo - ox, a0);
        }
    }
}
#endif

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

static void dw_plane(const dw_geom *p, bool avx2, const float *xp, const float *wk, float bias, float *yp,
                     float *buf, const kiln_epi *post, int64_t pl)
{
    for (int64_t oy0 = 0; oy0 < p->Ho; oy0 += p->band) {
        int64_t oy1 = oy0 + p->band < p->Ho ? oy0 + p->band : p->Ho;
        dw_fill(p, xp, oy0 * p->sh, (oy1 - oy0 - 1) * p->sh + (p->kh - 1) * p->dh + 1, buf);
        for (int64_t oy = oy0; oy < oy1; oy++) {
            const float *rb = buf + (oy - oy0) * p->sh * p->Wp;
#if CONV_X86
            if (avx2 && (p->sw == 1 || p->sw == 2))
                dw_row_avx2(p, rb, wk, bias, yp + oy * p->Wo);
            else
#endif
                dw_row_scalar(p, rb, wk, bias, yp + oy * p->Wo);
            if (post)
                kiln__epi_apply_f32(post, yp + oy * p->Wo, 0, 1, p->Wo, pl, oy * p->Wo);
        }
    }
}

/* Fallback without a band buffer (allocation failed): bounds-checked taps. */
static void dw_plane_checked(const dw_geom *p, const float *xp, const float *wk, float bias, float *yp,
                             const kiln_epi *post, int64_t pl)
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
                for (int64_t kj = kja; kj < kjb; kj++)
                    acc += wr[kj] * xr[ix0 + kj * p->dw];
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
            dw_plane(&j->p, j->avx2, xp, wk, bias, yp, buf, j->post, pl);
        else
            dw_plane_checked(&j->p, xp, wk, bias, yp, j->post, pl);
    }
    kiln__free(buf);
}

/* 2-D view of a 1-D or 2-D geometry */
static void dw_view(const conv_geom *g, dw_geom *p)
{
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

/* Implicit im2col for 2-D (and 1-D as H = 1) convolutions: packs rows [k0, k0+kc) x columns
 * [j0, j0+nc) of the virtual column matrix (row r = (c, ki, kj), column j = (oy, ox)) of one
 * image and group straight into the GEMM's B panels, so no column buffer is written and read
 * back. Each panel's columns are split once into segments that stay within one output row;
 * for every K row a segment is one strided copy from an input row (zero outside the image). */
typedef struct im2col_ctx {
    const float *x;                     /* image, channel 0 of the group */
    int64_t H, W, kh, kw, sh, sw, dh, dw, ph, pw, Wo;
    bool avx512;
} im2col_ctx;

#define SEG_MAX 64                      /* segments per 32-column panel: at most 32 (+ slack) */

typedef struct seg {
    int lane, len;                      /* position in the panel */
    int64_t y0, x0;                     /* oy * sh - ph, ox * sw - pw of its first column */
} seg;

#if CONV_X86
/* bits [lo, hi) of a 32-bit mask, lo and hi clamped to [0, 32] */
static inline uint32_t bits32(int64_t lo, int64_t hi)
{
    lo = lo < 0 ? 0 : lo > 32 ? 32 : lo;
    hi = hi < 0 ? 0 : hi > 32 ? 32 : hi;
    if (hi <= lo)
        return 0;
    uint32_t h = hi == 32 ? 0xFFFFFFFFu : (1u << hi) - 1u;
    return h & ~((1u << lo) - 1u);
}

/* AVX-512 version for panels of 32 columns and column strides 1 and 2 (see im2col_pack). */
__attribute__((target("avx512f"))) static void im2col_pack512(const im2col_ctx *c, int64_t k0, int64_t kc, int64_t j0,
                                                              int64_t nc, float *dst)
{
    enum { NR = 32 };
    const int64_t ksz = c->kh * c->kw, plane = c->H * c->W, W = c->W, sw = c->sw;
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    seg segs[SEG_MAX];
    for (int64_t p = 0; p * NR < nc; p++) {
        int ns = 0, lane = 0, width = (int)(nc - p * NR < NR ? nc - p * NR : NR);
        int64_t j = j0 + p * NR, oy = j / c->Wo, ox = j % c->Wo;
        while (lane < width && ns < SEG_MAX) {
            int len = (int)(c->Wo - ox < width - lane ? c->Wo - ox : width - lane);
            segs[ns++] = (seg){lane, len, oy * c->sh - c->ph, ox * sw - c->pw};
            lane += len;
            ox += len;
            if (ox == c->Wo) {
                ox = 0;
                oy++;
            }
        }
        float *d = dst + p * kc * NR;
        int64_t ch = k0 / ksz, kk = k0 % ksz, ki = kk / c->kw, kj = kk % c->kw;
        const __mmask16 pad_lo = (__mmask16)~bits32(0, width), pad_hi = (__mmask16)(~bits32(0, width) >> 16);
        for (int64_t k = 0; k < kc; k++, d += NR) {
            const float *xc = c->x + ch * plane;
            const int64_t dy = ki * c->dh, dx = kj * c->dw;
            for (int s = 0; s < ns; s++) {
                const seg *sg = &segs[s];
                float *ds = d + sg->lane;
                const int len = sg->len;
                const __mmask16 st0 = (__mmask16)bits32(0, len), st1 = (__mmask16)(bits32(0, len) >> 16);
                const int64_t iy = sg->y0 + dy, ix0 = sg->x0 + dx;
                __m512 v0 = _mm512_setzero_ps(), v1 = v0;
                if (iy >= 0 && iy < c->H) {
                    const float *row = xc + iy * W;
                    if (sw == 1) {
                        uint32_t m = ix0 >= 0 && ix0 + len <= W ? bits32(0, len) : bits32(-ix0, W - ix0) & bits32(0, len);
                        v0 = _mm512_maskz_loadu_ps((__mmask16)m, row + ix0);
                        if (len > 16)
                            v1 = _mm512_maskz_loadu_ps((__mmask16)(m >> 16), row + ix0 + 16);
                    } else {
                        /* stride 2: raw elements ix0 .. ix0 + 2 len - 1, evens picked by permutes */
                        for (int h = 0; h < 2 && h * 16 < len; h++) {
                            int64_t base = ix0 + 32 * h;
                            int cnt = len - 16 * h < 16 ? len - 16 * h : 16;
                            uint32_t m = bits32(-base, W - base) & bits32(0, 2 * cnt - 1);
                            __m512 a = _mm512_maskz_loadu_ps((__mmask16)m, row + base);
                            __m512 b = _mm512_maskz_loadu_ps((__mmask16)(m >> 16), row + base + 16);
                            __m512 v = _mm512_permutex2var_ps(a, even, b);
                            if (h == 0)
                                v0 = v;
                            else
                                v1 = v;
                        }
                    }
                }
                _mm512_mask_storeu_ps(ds, st0, v0);
                if (len > 16)
                    _mm512_mask_storeu_ps(ds + 16, st1, v1);
            }
            if (width < NR) {
                _mm512_mask_storeu_ps(d, pad_lo, _mm512_setzero_ps());
                _mm512_mask_storeu_ps(d + 16, pad_hi, _mm512_setzero_ps());
            }
            if (++kj == c->kw) {
                kj = 0;
                if (++ki == c->kh) {
                    ki = 0;
                    ch++;
                }
            }
        }
    }
}
#endif

static void im2col_pack(void *vctx, int64_t k0, int64_t kc, int64_t j0, int64_t nc, int nr, float *dst)
{
    const im2col_ctx *c = vctx;
#if CONV_X86
    if (c->avx512 && nr == 32 && c->sw <= 2) {
        im2col_pack512(c, k0, kc, j0, nc, dst);
        return;
    }
#endif
    const int64_t ksz = c->kh * c->kw, plane = c->H * c->W;
    seg segs[SEG_MAX];
    for (int64_t p = 0; p * nr < nc; p++) {
        /* the panel's segments */
        int ns = 0, lane = 0, width = (int)(nc - p * nr < nr ? nc - p * nr : nr);
        int64_t j = j0 + p * nr, oy = j / c->Wo, ox = j % c->Wo;
        while (lane < width && ns < SEG_MAX) {
            int len = (int)(c->Wo - ox < width - lane ? c->Wo - ox : width - lane);
            segs[ns++] = (seg){lane, len, oy * c->sh - c->ph, ox * c->sw - c->pw};
            lane += len;
            ox += len;
            if (ox == c->Wo) {
                ox = 0;
                oy++;
            }
        }
        float *d = dst + p * kc * nr;
        int64_t ch = k0 / ksz, kk = k0 % ksz, ki = kk / c->kw, kj = kk % c->kw;
        for (int64_t k = 0; k < kc; k++, d += nr) {
            const float *xc = c->x + ch * plane;
            int64_t dy = ki * c->dh, dx = kj * c->dw;
            for (int s = 0; s < ns; s++) {
                const seg *sg = &segs[s];
                float *ds = d + sg->lane;
                int64_t iy = sg->y0 + dy;
                if (iy < 0 || iy >= c->H) {
                    memset(ds, 0, sizeof(float) * (size_t)sg->len);
                    continue;
                }
                const float *row = xc + iy * c->W;
                int64_t ix0 = sg->x0 + dx;
                for (int t = 0; t < sg->len; t++) {
                    int64_t ix = ix0 + t * c->sw;
                    ds[t] = ix >= 0 && ix < c->W ? row[ix] : 0.0f;
                }
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
}

/* dst[c, oy, ox] = x[c, oy*sh, ox*sw] for channels [c0, c1) (1x1 strided conv input) */
typedef struct subsample_job {
    const im2col_ctx *c;
    float *dst;
    int64_t Ho;
} subsample_job;

static void subsample_task(void *vctx, int64_t c0, int64_t c1)
{
    const subsample_job *j = vctx;
    const im2col_ctx *c = j->c;
    for (int64_t ch = c0; ch < c1; ch++) {
        const float *xc = c->x + ch * c->H * c->W;
        float *d = j->dst + ch * j->Ho * c->Wo;
        for (int64_t oy = 0; oy < j->Ho; oy++, d += c->Wo) {
            const float *row = xc + oy * c->sh * c->W;
            if (c->sw == 1)
                memcpy(d, row, sizeof(float) * (size_t)c->Wo);
            else
                for (int64_t ox = 0; ox < c->Wo; ox++)
                    d[ox] = row[ox * c->sw];
        }
    }
}

static bool have_avx512(void)
{
#if CONV_X86
    return kiln__cpu_has(KILN_CPU_AVX512F);
#else
    return false;
#endif
}

/* ---- direct convolution (no im2col): zero-padded, phase-split input + offset table ---- */

/* Geometry of the padded copy: P phases (the column stride), each [Hp][Cg][Wq]. Padded row r
 * holds input row r - ph; padded column u = w' * sw + p holds input column u - pw. */
typedef struct convd_geom {
    dw_geom p;              /* 2-D view */
    int64_t P, Hp, Wq, tw;  /* phases, padded rows, columns per phase, 32-pixel tiles per row */
    int64_t Cg;
    const float *x;         /* image, channel 0 of the group */
    float *xp;
} convd_geom;

/* Padded rows [r0, r1) of every channel and phase. Layout [P][Hp][Cg][Wq]: the rows the taps
 * of one output row read are close together (few pages), whatever the channel count. */
static void convd_fill_task(void *vctx, int64_t r0, int64_t r1)
{
    const convd_geom *q = vctx;
    const dw_geom *p = &q->p;
    for (int64_t ph = 0; ph < q->P; ph++)
        for (int64_t r = r0; r < r1; r++) {
            float *d = q->xp + ((ph * q->Hp + r) * q->Cg) * q->Wq;
            int64_t iy = r - p->ph;
            if (iy < 0 || iy >= p->H) {
                memset(d, 0, sizeof(float) * (size_t)(q->Cg * q->Wq));
                continue;
            }
            for (int64_t ch = 0; ch < q->Cg; ch++, d += q->Wq) {
                const float *row = q->x + (ch * p->H + iy) * p->W;
                if (q->P == 1) {
                    /* columns: pw zeros, the row, zeros */
                    int64_t lead = p->pw < q->Wq ? p->pw : q->Wq;
                    int64_t ncopy = p->W < q->Wq - lead ? p->W : q->Wq - lead;
                    memset(d, 0, sizeof(float) * (size_t)lead);
                    memcpy(d + lead, row, sizeof(float) * (size_t)ncopy);
                    memset(d + lead + ncopy, 0, sizeof(float) * (size_t)(q->Wq - lead - ncopy));
                } else {
                    for (int64_t w = 0; w < q->Wq; w++) {
                        int64_t ix = w * q->P + ph - p->pw;
                        d[w] = ix >= 0 && ix < p->W ? row[ix] : 0.0f;
                    }
                }
            }
        }
}

/* Whether the direct path beats im2col + packing: it wastes the lanes of partial 32-pixel
 * tiles, im2col spends ~24 / M of the GEMM time packing. */
static bool direct_conv_pays(const conv_geom *g, int64_t Mg, int64_t K)
{
    if (!kiln__conv_direct_available() || K < 16 || Mg < 1)
        return false;
    dw_geom p;
    dw_view(g, &p);
    if (p.sw > 4 || p.Wo < 16)
        return false;
    double lane_eff = (double)p.Wo / (double)(cdiv(p.Wo, 32) * 32);
    return 1.0 / lane_eff - 1.0 + 0.05 < 24.0 / (double)Mg;
}

static kiln_status conv_direct(const kiln_kctx *ctx, const conv_geom *g, const float *x, const float *w,
                               const float *b, float *y, const kiln_epi *post)
{
    int nt = ctx->nthreads;
    int64_t Cg = g->C / g->G, Mg = g->M / g->G, K = Cg * g->k_sz;
    convd_geom q = {.Cg = Cg};
    dw_view(g, &q.p);
    const dw_geom *p = &q.p;
    q.P = p->sw;
    q.tw = cdiv(p->Wo, 32);
    /* rows read: (Ho-1)*sh + (kh-1)*dh; columns per phase: the tiles plus the kernel's reach */
    q.Hp = (p->Ho - 1) * p->sh + (p->kh - 1) * p->dh + 1;
    q.Wq = q.tw * 32 + ((p->kw - 1) * p->dw) / q.P + 1;
    int64_t img = mul_chk(mul_chk(q.P * Cg, q.Hp), q.Wq);
    if (img < 0 || img > ((int64_t)1 << 40) || K > ((int64_t)1 << 40))
        return kiln__kerr(ctx, KILN_ERR_LIMIT, "direct convolution buffer is too large");
    int64_t img_pad = (img + 64 + 15) / 16 * 16; /* the image, 64 floats of slack, 64-byte aligned */
    size_t bytes = (size_t)img_pad * sizeof(float) + (size_t)K * sizeof(int64_t);
    if ((uint64_t)bytes > kiln__max_tensor_bytes())
        return kiln__kerr(ctx, KILN_ERR_LIMIT, "direct convolution buffer is too large");
    float *buf = kiln__scratch(KILN_SCRATCH_CONV, bytes);
    if (!buf)
        return kiln__kerr(ctx, KILN_ERR_NOMEM, "out of memory (direct convolution buffer)");
    q.xp = buf;
    memset(buf + img, 0, (size_t)(img_pad - img) * sizeof(float));
    int64_t *off = (int64_t *)(void *)(buf + img_pad);
    /* k = (c, ki, kj): padded column kj*dw = floor(kj*dw / P) * P + phase */
    for (int64_t k = 0, c = 0; c < Cg; c++)
        for (int64_t ki = 0; ki < p->kh; ki++)
            for (int64_t kj = 0; kj < p->kw; kj++, k++) {
                int64_t u = kj * p->dw;
                off[k] = (((u % q.P) * q.Hp + ki * p->dh) * Cg + c) * q.Wq + u / q.P;
            }
    for (int64_t n = 0; n < g->N; n++)
        for (int64_t gi = 0; gi < g->G; gi++) {
            int64_t row0 = n * g->M + gi * Mg;
            q.x = x + (n * g->C + gi * Cg) * g->in_sz;
            kiln__parallel_for(ctx->pool, nt, q.Hp, 1 + 8192 / (Cg * q.Wq * q.P + 1), convd_fill_task, &q);
            kiln_epi e = {.bias = b ? b + gi * Mg : NULL, .row_bias = true};
            if (post) {
                e.res = post->res ? post->res + row0 * g->out_sz : NULL;
                e.ldr = g->out_sz;
                e.act = post->act;
            }
            kiln_convd d = {.M = Mg, .K = K, .A = w + gi * Mg * K, .lda = K, .xp = q.xp, .off = off, .Ho = p->Ho,
                            .Wo = p->Wo, .row_stride = p->sh * Cg * q.Wq, .C = y + row0 * g->out_sz, .ldc = g->out_sz,
                            .epi = &e};
            kiln__conv_direct_f32(ctx->pool, nt, &d);
        }
    return KILN_OK;
}

/* Zero-padded copy [Cg][Hp][Wq] of channels [c0, c1) (P == 1): padded row r holds input row
 * r - ph, padded column u input column u - pw. */
static void wino_fill_task(void *vctx, int64_t c0, int64_t c1)
{
    const convd_geom *q = vctx;
    const dw_geom *p = &q->p;
    for (int64_t ch = c0; ch < c1; ch++) {
        float *d = q->xp + ch * q->Hp * q->Wq;
        for (int64_t r = 0; r < q->Hp; r++, d += q->Wq) {
            int64_t iy = r - p->ph;
            if (iy < 0 || iy >= p->H) {
                memset(d, 0, sizeof(float) * (size_t)q->Wq);
                continue;
            }
            int64_t lead = p->pw < q->Wq ? p->pw : q->Wq;
            int64_t ncopy = p->W < q->Wq - lead ? p->W : q->Wq - lead;
            memset(d, 0, sizeof(float) * (size_t)lead);
            memcpy(d + lead, q->x + (ch * p->H + iy) * p->W, sizeof(float) * (size_t)ncopy);
            memset(d + lead + ncopy, 0, sizeof(float) * (size_t)(q->Wq - lead - ncopy));
        }
    }
}

/* ---- Winograd for 3x3 stride-1 convolutions (wino.h: F(2x2, 3x3) and F(4x4, 3x3)) ----
 *
 * The np element-wise products of a variant, summed over channels, are np GEMMs
 * U[xi] (M x C) x V[xi] (C x tiles). The weights are transformed at build time (prep_conv) or
 * once per call by one GEMM (U = Tw x W^T, Tw = G (x) G, np x 9); the input is copied into a
 * zero-padded buffer; then blocks of tile rows are processed independently (one per task):
 * input transform into V (np x C x tiles, L2-sized), np GEMMs into P (np x M x tiles), output
 * transform with the epilogue. The transforms work on 16 tiles at a time with AVX-512.
 * F(4x4, 3x3) does 4/9 of F(2x2)'s multiplies per output and moves less data through V and P,
 * but its filters are 36/16 the size: it is taken where the filters are small (few channel
 * pairs), i.e. in a CNN's early, large-image layers; F(2x2) for the wider ones. */
#define WINO43_MAX_PAIRS ((int64_t)1 << 14)

static void wino_task(void *vctx, int64_t b0, int64_t b1)
{
    wino_job *j = vctx;
    const int64_t Cg = j->Cg, Mg = j->Mg, T = j->tH * j->tW, NP = j->k->np;
    for (int64_t blk = b0; blk < b1; blk++) {
        int64_t t0 = blk * j->R, t1 = t0 + j->R < T ? t0 + j->R : T, Tb = t1 - t0;
        const int64_t np = cdiv(Tb, 32), sv = wino_stride(np * 32 * Cg), sp = wino_stride(Mg * Tb);
        float *V = kiln__scratch(KILN_SCRATCH_WINO, sizeof(float) * (size_t)(NP * (sv + sp) + 64));
        if (!V) {
            j->failed = true;
            return;
        }
        float *P = V + NP * sv;
        kiln__wino_zero_tail(V, sv, (int)NP, Cg, Tb); /* the last panel's unused lanes: keep them finite */
        j->k->in(j, t0, t1, V, 0, Cg);
        for (int64_t q = 0; q < NP; q++) {
            kiln_gemm gm = {.M = Mg, .N = Tb, .K = Cg, .alpha = 1.0f, .beta = 0.0f, .A = j->U + q * Mg * Cg,
                            .lda = Cg, .bpack = V + q * sv, .C = P + q * sp, .ldc = Tb};
            kiln__sgemm_ex(NULL, 1, &gm);
        }
        j->k->out(j, t0, t1, P, 0, Mg);
    }
}

/* Few tiles (one block): the phases run one after the other, each split over the threads
 * (channels for the input transform, the np products for the GEMMs, output channels last). */
typedef struct wino_phase {
    wino_job *j;
    float *V, *P;
    int64_t sv, sp, T;
} wino_phase;

static void wino_ph_in(void *vctx, int64_t c0, int64_t c1)
{
    const wino_phase *w = vctx;
    w->j->k->in(w->j, 0, w->T, w->V, c0, c1);
}

static void wino_ph_gemm(void *vctx, int64_t q0, int64_t q1)
{
    const wino_phase *w = vctx;
    const wino_job *j = w->j;
    for (int64_t q = q0; q < q1; q++) {
        kiln_gemm gm = {.M = j->Mg, .N = w->T, .K = j->Cg, .alpha = 1.0f, .beta = 0.0f,
                        .A = j->U + q * j->Mg * j->Cg, .lda = j->Cg, .bpack = w->V + q * w->sv, .C = w->P + q * w->sp,
                        .ldc = w->T};
        kiln__sgemm_ex(NULL, 1, &gm);
    }
}

static void wino_ph_out(void *vctx, int64_t m0, int64_t m1)
{
    const wino_phase *w = vctx;
    w->j->k->out(w->j, 0, w->T, w->P, m0, m1);
}

/* Whether the Winograd path can run this layer: 2-D 3x3, stride and dilation 1, pads <= 2,
 * enough channels, AVX-512 GEMM panels (everything but the tile count). */
static bool wino_geom(const conv_geom *g, int64_t Cg, int64_t Mg)
{
    if (!have_avx512() || kiln__sgemm_nr() != 32 || g->nsp != 2 || g->k[0] != 3 || g->k[1] != 3)
        return false;
    for (int i = 0; i < 2; i++)
        if (g->s[i] != 1 || g->d[i] != 1 || g->pb[i] > 2 || g->pe[i] > 2)
            return false;
    return Cg >= 16 && Mg >= 16 && Cg * Mg <= ((int64_t)1 << 22);
}

/* Winograd pays when there are enough tiles to amortize the weight transform (16 M C floats
 * written per call): roughly 100 tiles and more. With the filters transformed at build time
 * there is no transform to amortize and it is taken for every tile count. */
static bool wino_pays(const conv_geom *g, int64_t Cg, int64_t Mg)
{
    int64_t tiles = cdiv(g->out[0], 2) * cdiv(g->out[1], 2);
#ifndef WINO_MIN_TILES
#define WINO_MIN_TILES 40
#endif
    return wino_geom(g, Cg, Mg) && tiles >= WINO_MIN_TILES;
}

/* The variant for a layer's channel pairs (prepared or not): F(4x4) for small filters. */
static const wino_kind *wino_kind_for(int64_t Cg, int64_t Mg)
{
    return Cg * Mg <= WINO43_MAX_PAIRS ? &kiln__wino_f43 : &kiln__wino_f23;
}

/* Floats of the transformed filters U of all groups: [G][np][Mg][Cg]. */
static int64_t wino_u_floats(const conv_geom *g, const wino_kind *k)
{
    return k->np * (g->M / g->G) * (g->C / g->G) * g->G;
}

/* The layer's build-time transformed filters of variant k, when ctx->prepared holds them. */
static const float *wino_prepared(const kiln_kctx *ctx, const conv_geom *g, const wino_kind *k)
{
    int64_t dims[3] = {g->M, g->C / g->G, g->G};
    return kiln__prep_check(ctx, k->layout, KILN_DT_FLOAT32, 3, dims, (uint64_t)wino_u_floats(g, k) * sizeof(float));
}

/* U[np][Mg*Cg] = Tw[np x 9] x W^T for one group's filters W [Mg*Cg][9] (tw: np x 9 scratch). */
static void wino_transform(kiln_pool *pool, int nt, const wino_kind *k, const float *w, int64_t Mg, int64_t Cg,
                           float *tw, float *U)
{
    k->tw(tw);
    kiln_gemm gw = {.M = k->np, .N = Mg * Cg, .K = 9, .alpha = 1.0f, .beta = 0.0f, .trans_b = true, .A = tw,
                    .lda = 9, .B = w, .ldb = 9, .C = U, .ldc = Mg * Cg};
    kiln__sgemm_ex(pool, nt, &gw);
}

/* Up: the filters of variant k transformed at build time ([G][np][Mg][Cg]), or NULL:
 * transformed from w here. */
static kiln_status conv_wino(const kiln_kctx *ctx, const conv_geom *g, const wino_kind *k, const float *x,
                             const float *w, const float *Up, const float *b, float *y, const kiln_epi *post)
{
    int nt = ctx->nthreads;
    const int64_t NP = k->np, tm = k->m;
    int64_t Cg = g->C / g->G, Mg = g->M / g->G, Ho = g->out[0], Wo = g->out[1];
    wino_job j = {.g = g, .k = k, .Cg = Cg, .Mg = Mg, .tH = cdiv(Ho, tm), .tW = cdiv(Wo, tm)};
    j.Hp = tm * j.tH + 2;
    j.Wp = tm * j.tW + 2;
    /* tiles per block (R): a multiple of 32 (the GEMM panels), V and P within ~1.5 MB, and
     * several blocks per thread where the tiles allow */
    int64_t T = j.tH * j.tW, rmax = 393216 / (16 * (Cg + Mg)) * 16 / NP / 32 * 32;
    if (rmax < 32)
        rmax = 32;
    j.R = cdiv(cdiv(T, 3 * nt), 32) * 32;
    if (j.R < 64)
        j.R = 64;
    if (j.R > rmax)
        j.R = rmax;
    /* one block for everything and too few blocks for the threads: phased instead */
    bool phased = nt > 1 && cdiv(T, j.R) < 2 * nt && T <= rmax;
    int64_t svp = phased ? wino_stride(cdiv(T, 32) * 32 * Cg) : 0, spp = phased ? wino_stride(Mg * T) : 0;
    size_t nU = Up ? 0 : (size_t)(NP * Mg * Cg), nX = (size_t)(Cg * j.Hp * j.Wp), nV = (size_t)(NP * (svp + spp));
    nU = (nU + 15) / 16 * 16;
    nX = (nX + 15) / 16 * 16;
    float *buf = kiln__scratch(KILN_SCRATCH_CONV, sizeof(float) * (nU + nX + nV + (size_t)NP * 9 + 64));
    if (!buf)
        return kiln__kerr(ctx, KILN_ERR_NOMEM, "out of memory (Winograd buffers)");
    float *U = buf, *xp = buf + nU, *Vph = xp + nX, *tw = Vph + nV;
    j.xp = xp;
    convd_geom q = {.Cg = Cg, .P = 1, .Hp = j.Hp, .Wq = j.Wp, .xp = xp};
    dw_view(g, &q.p);
    for (int64_t n = 0; n < g->N; n++)
        for (int64_t gi = 0; gi < g->G; gi++) {
            /* U[np][Mg*Cg] = Tw[np x 9] x W^T, W viewed as [Mg*Cg][9] (or transformed at build time) */
            if (Up)
                j.U = Up + gi * NP * Mg * Cg;
            else if (n == 0 || g->G > 1)
                wino_transform(ctx->pool, nt, k, w + gi * Mg * Cg * 9, Mg, Cg, tw, U);
            if (!Up)
                j.U = U;
            /* zero-padded input [Cg][Hp][Wp]: padded row r = input row r - ph, column u = u - pw */
            q.x = x + (n * g->C + gi * Cg) * g->in_sz;
            kiln__parallel_for(ctx->pool, nt, Cg, 1, wino_fill_task, &q);
            j.row0 = n * g->M + gi * Mg;
            j.y = y + j.row0 * g->out_sz;
            j.e = (kiln_epi){.bias = b ? b + gi * Mg : NULL, .row_bias = true};
            if (post) {
                j.e.res = post->res ? post->res + j.row0 * g->out_sz : NULL;
                j.e.ldr = g->out_sz;
                j.e.act = post->act;
            }
            j.failed = false;
            if (phased) {
                wino_phase ph = {.j = &j, .V = Vph, .P = Vph + NP * svp, .sv = svp, .sp = spp, .T = T};
                kiln__wino_zero_tail(Vph, svp, (int)NP, Cg, T);
                kiln__parallel_for(ctx->pool, nt, Cg, 1 + 64 / cdiv(T, 16), wino_ph_in, &ph);
                kiln__parallel_for(ctx->pool, nt, NP, 1, wino_ph_gemm, &ph);
                kiln__parallel_for(ctx->pool, nt, Mg, 1 + 64 / cdiv(T, 16), wino_ph_out, &ph);
            } else {
                kiln__parallel_for(ctx->pool, nt, cdiv(j.tH * j.tW, j.R), 1, wino_task, &j);
            }
            if (j.failed)
                return kiln__kerr(ctx, KILN_ERR_NOMEM, "out of memory (Winograd block buffers)");
        }
    return KILN_OK;
}

/* float32 Conv; post (optional, no bias): residual [N, M, out...] and activation applied to the
 * output. Every element of y is written. */
static kiln_status conv_f32_ex(const kiln_kctx *ctx, const conv_geom *g, const float *x, const float *w,
                               const float *b, float *y, const kiln_epi *post)
{
    int nt = ctx->nthreads;
    int64_t Cg = g->C / g->G, Mg = g->M / g->G, K = Cg * g->k_sz;
    if (g->N == 0 || g->M == 0 || g->out_sz == 0)
        return KILN_OK;
    if (kiln__epi_is_noop(post))
        post = NULL;
    /* Winograd: the prepared filters' variant; unprepared layers (transformed per call) F(2x2) */
    const wino_kind *wk = &kiln__wino_f23;
    const float *Up = NULL;
    if (wino_geom(g, Cg, Mg)) {
        const float *u43 = wino_prepared(ctx, g, &kiln__wino_f43), *u23 = u43 ? NULL : wino_prepared(ctx, g, &kiln__wino_f23);
        Up = u43 ? u43 : u23;
        wk = u43 ? &kiln__wino_f43 : u23 ? &kiln__wino_f23 : wk;
    }
    if (!w && !Up)
        return kiln__prep_missing(ctx, 1);   /* weights stored only in a layout that does not fit */
    if (Up || wino_pays(g, Cg, Mg))
        return conv_wino(ctx, g, wk, x, w, Up, b, y, post);
    if (Cg == 1 && g->nsp <= 2) {
        dw_job j = {.g = g, .x = x, .w = w, .b = b, .y = y, .avx2 = have_avx2(), .post = post};
        dw_view(g, &j.p);
        dw_plan(&j.p);
        int64_t per = mul_chk(g->out_sz, g->k_sz), grain = per >= 0 && per < 16384 ? 16384 / (per + 1) + 1 : 1;
        kiln__parallel_for(ctx->pool, nt, g->N * g->M, grain, dw_task, &j);
        return KILN_OK;
    }
    bool pointwise = g->k_sz == 1;
    for (int i = 0; i < g->nsp; i++)
        if (g->s[i] != 1 || g->pb[i] != 0 || g->pe[i] != 0)
            pointwise = false;
    if (g->nsp <= 2 && !pointwise && direct_conv_pays(g, Mg, K))
        return conv_direct(ctx, g, x, w, b, y, post);
    /* 1x1 with strides and no padding (ResNet downsampling): subsample the input once, then
     * a pointwise GEMM (cheaper than gathering the strided columns in every GEMM task) */
    bool strided1x1 = g->k_sz == 1 && g->nsp <= 2 && !pointwise;
    for (int i = 0; i < g->nsp; i++)
        if (g->pb[i] != 0 || g->pe[i] != 0)
            strided1x1 = false;
    float *sub = NULL;
    if (strided1x1) {
        int64_t cnt = mul_chk(Cg, g->out_sz);
        if (cnt < 0 || (uint64_t)cnt > kiln__max_tensor_bytes() / sizeof(float))
            return kiln__kerr(ctx, KILN_ERR_LIMIT, "scratch buffer of %lld elements is too large", (long long)cnt);
        sub = kiln__scratch(KILN_SCRATCH_CONV, (size_t)cnt * sizeof(float));
        if (!sub)
            return kiln__kerr(ctx, KILN_ERR_NOMEM, "out of memory (scratch buffer of %lld elements)", (long long)cnt);
    }
    /* one GEMM per image and group: W[Mg, K] x cols[K, out_sz], epilogue = bias + post */
    bool implicit = g->nsp <= 2 && !pointwise && !strided1x1 && K > 0;
    if (pointwise || implicit || strided1x1) {
        im2col_ctx ic = {0};
        if (implicit || strided1x1) {
            dw_geom p;
            dw_view(g, &p);
            ic = (im2col_ctx){.H = p.H, .W = p.W, .kh = p.kh, .kw = p.kw, .sh = p.sh, .sw = p.sw, .dh = p.dh,
                              .dw = p.dw, .ph = p.ph, .pw = p.pw, .Wo = p.Wo, .avx512 = have_avx512()};
        }
        for (int64_t n = 0; n < g->N; n++)
            for (int64_t gi = 0; gi < g->G; gi++) {
                int64_t row0 = n * g->M + gi * Mg;
                kiln_epi e = {.bias = b ? b + gi * Mg : NULL, .row_bias = true};
                if (post) {
                    e.res = post->res ? post->res + row0 * g->out_sz : NULL;
                    e.ldr = g->out_sz;
                    e.act = post->act;
                }
                const float *xg = x + (n * g->C + gi * Cg) * g->in_sz;
                kiln_gemm gm = {.M = Mg, .N = g->out_sz, .K = K, .alpha = 1.0f, .beta = 0.0f,
                                .A = w + gi * Mg * K, .lda = K, .C = y + row0 * g->out_sz, .ldc = g->out_sz,
                                .epi = &e};
                if (implicit) {
                    ic.x = xg;
                    gm.packb = im2col_pack;
                    gm.packb_ctx = &ic;
                } else if (strided1x1) {
                    ic.x = xg;
                    subsample_job sj = {.c = &ic, .dst = sub, .Ho = g->out_sz / ic.Wo};
                    kiln__parallel_for(ctx->pool, nt, Cg, 1 + 16384 / (g->out_sz + 1), subsample_task, &sj);
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
    /* N-D: explicit im2col of chunks of output rows into a scratch buffer (multithreaded over
     * its rows), then one GEMM per chunk with the epilogue */
    int L = g->nsp - 1;
    int64_t Wo = g->out[L], outer = g->out_sz / Wo;
    int64_t qc = chunk_rows(mul_chk(K, Wo), outer);
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
                col_job j = {.g = g, .img = (float *)(x + (n * g->C + gi * Cg) * g->in_sz), .col = col,
                             .q0 = q0, .q1 = q1, .ncols = nc, .avx2 = have_avx2()};
                kiln__parallel_for(ctx->pool, nt, K, grain, im2col_task, &j);
                kiln_epi e = {.bias = b ? b + gi * Mg : NULL, .row_bias = true};
                if (post) {
                    e.res = post->res ? post->res + row0 * g->out_sz + q0 * Wo : NULL;
                    e.ldr = g->out_sz;
                    e.act = post->act;
                }
                kiln_gemm gm = {.M = Mg, .N = nc, .K = K, .alpha = 1.0f, .beta = 0.0f, .A = wg, .lda = K,
                                .B = col, .ldb = nc, .C = yg + q0 * Wo, .ldc = g->out_sz, .epi = &e};
                kiln__sgemm_ex(ctx->pool, nt, &gm);
            }
        }
    kiln__free(col);
    return KILN_OK;
}

static kiln_status conv_f32(const kiln_kctx *ctx, const conv_geom *g, const float *x, const float *w,
                            const float *b, float *y)
{
    return conv_f32_ex(ctx, g, x, w, b, y, NULL);
}

/* ------------------------------------------------------------------------------------------
 * float32 ConvTranspose (geometry in the adjoint view, see conv_geom)
 * ------------------------------------------------------------------------------------------ */

static kiln_status convt_f32(const kiln_kctx *ctx, const conv_geom *g, const float *x, const float *w,
                             const float *b, float *y)
{
    int nt = ctx->nthreads;
    /* ConvTranspose: X [N, g->M, out...], W [g->M, Cg, k...], Y [N, g->C, in...] */
    int64_t Cx = g->M, Cy = g->C, Cxg = Cx / g->G, Cyg = Cy / g->G, K2 = Cyg * g->k_sz;
    int64_t ys = g->in_sz, xs = g->out_sz;
    if (g->N == 0 || Cy == 0 || ys == 0)
        return KILN_OK;
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
    int L = g->nsp - 1;
    int64_t Wx = g->out[L], outer = xs / Wx;
    int64_t qc = chunk_rows(mul_chk(K2, Wx), outer);
    float *col;
    KILN_TRY(kiln__win_scratch(ctx, mul_chk(mul_chk(K2, qc), Wx), sizeof(float), (void **)&col));
    for (int64_t n = 0; n < g->N; n++)
        for (int64_t gi = 0; gi < g->G; gi++) {
            const float *xg = x + (n * Cx + gi * Cxg) * xs, *wg = w + gi * Cxg * K2;
            for (int64_t q0 = 0; q0 < outer; q0 += qc) {
                int64_t q1 = q0 + qc < outer ? q0 + qc : outer, nc = (q1 - q0) * Wx;
                kiln__sgemm(ctx->pool, nt, true, false, K2, nc, Cxg, 1.0f, wg, K2, xg + q0 * Wx, xs, 0.0f, col, nc);
                col_job j = {.g = g, .img = y + (n * Cy + gi * Cyg) * ys, .col = col, .q0 = q0, .q1 = q1,
                             .ncols = nc};
                kiln__parallel_for(ctx->pool, nt, Cyg, 1, col2im_task, &j);
            }
        }
    kiln__free(col);
    return KILN_OK;
}

/* ------------------------------------------------------------------------------------------
 * direct double paths (float64, ConvInteger)
 * ------------------------------------------------------------------------------------------ */

typedef struct direct_job {
    const conv_geom *g;
    const double *x, *w, *b;
    double *y;
} direct_job;

/* Conv: one task per (image, output channel) plane. */
static void conv_direct_task(void *ctx, int64_t b0, int64_t e0)
{
    const direct_job *j = ctx;
    const conv_geom *g = j->g;
    int nsp = g->nsp;
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
                    int64_t idx = 0;
                    bool ok = true;
                    for (int d = 0; d < nsp; d++) {
                        int64_t i = o[d] * g->s[d] - g->pb[d] + kk[d] * g->d[d];
                        if (i < 0 || i >= g->in[d]) {
                            ok = false;
                            break;
                        }
                        idx = idx * g->in[d] + i;
                    }
                    if (ok)
                        acc += xc[idx] * wc[kp];
                    for (int d = nsp - 1; d >= 0; d--) {
                        if (++kk[d] < g->k[d])
                            break;
                        kk[d] = 0;
                    }
                }
            }
            yp[op] = acc;
            for (int d = nsp - 1; d >= 0; d--) {
                if (++o[d] < g->out[d])
                    break;
                o[d] = 0;
            }
        }
    }
}

/* ConvTranspose (adjoint view): one task per (image, ConvTranspose output channel) plane. */
static void convt_direct_task(void *ctx, int64_t b0, int64_t e0)
{
    const direct_job *j = ctx;
    const conv_geom *g = j->g;
    int nsp = g->nsp;
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
                    int64_t idx = 0;
                    bool ok = true;
                    for (int d = 0; d < nsp; d++) {
                        int64_t i = o[d] * g->s[d] - g->pb[d] + kk[d] * g->d[d];
                        if (i < 0 || i >= g->in[d]) {
                            ok = false;
                            break;
                        }
                        idx = idx * g->in[d] + i;
                    }
                    if (ok)
                        yp[idx] += xv * wc[kp];
                    for (int d = nsp - 1; d >= 0; d--) {
                        if (++kk[d] < g->k[d])
                            break;
                        kk[d] = 0;
                    }
                }
                for (int d = nsp - 1; d >= 0; d--) {
                    if (++o[d] < g->out[d])
                        break;
                    o[d] = 0;
                }
            }
        }
    }
}

static int64_t direct_grain(const conv_geom *g, int64_t per_plane)
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

static kiln_status check_bias(const kiln_kctx *ctx, const kiln_tensor *b, kiln_dtype dt, int64_t M)
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
typedef kiln_status (*f32_impl)(const kiln_kctx *, const conv_geom *, const float *, const float *, const float *,
                                float *);

static kiln_status run_float(kiln_kctx *ctx, const conv_geom *g, const kiln_tensor *x, const kiln_tensor *w,
                             const kiln_tensor *b, kiln_tensor *y, f32_impl f32, kiln__par_fn dtask,
                             int64_t planes, int64_t per_plane)
{
    kiln_dtype dt = x->dtype;
    int64_t nx = kiln_tensor_numel(x), nw = kiln_tensor_numel(w), ny = kiln_tensor_numel(y);
    if (dt == KILN_DT_FLOAT32)
        return f32(ctx, g, x->data, w->data, b ? b->data : NULL, y->data);
    if (dt == KILN_DT_FLOAT64) {
        direct_job j = {.g = g, .x = x->data, .w = w->data, .b = b ? b->data : NULL, .y = y->data};
        kiln__parallel_for(ctx->pool, ctx->nthreads, planes, direct_grain(g, per_plane), dtask, &j);
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
        st = f32(ctx, g, fx, fw, fb, fy);
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
static kiln_status conv_run(kiln_kctx *ctx, const kiln_tensor *res, const kiln_act *act, bool *handled)
{
    const kiln_tensor *x = kiln__kin(ctx, 0), *w = kiln__kin(ctx, 1), *b = kiln__kin(ctx, 2);
    bool fused = res || (act && act->kind != KILN_ACT_NONE);
    *handled = true;
    if (!x || !w)
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "missing input X or W");
    if (!is_float_dt(x->dtype))
        return kiln__kerr(ctx, KILN_ERR_DTYPE, "unsupported dtype %s", kiln_dtype_name(x->dtype));
    if (w->dtype != x->dtype)
        return kiln__kerr(ctx, KILN_ERR_DTYPE, "W has dtype %s, X has %s", kiln_dtype_name(w->dtype),
                          kiln_dtype_name(x->dtype));
    if (kiln__prep_dropped(w) && x->dtype != KILN_DT_FLOAT32)
        return kiln__prep_missing(ctx, 1);
    conv_geom g;
    KILN_TRY(conv_setup(ctx, x, w, &g));
    KILN_TRY(check_bias(ctx, b, x->dtype, g.M));
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
        return conv_f32_ex(ctx, &g, x->data, w->data, b ? b->data : NULL, ctx->out[0]->data, &post);
    }
    KILN_TRY(kiln__kout(ctx, 0, x->dtype, x->ndim, dims));
    return run_float(ctx, &g, x, w, b, ctx->out[0], conv_f32, conv_direct_task, g.N * g.M,
                     mul_chk(g.out_sz, g.C / g.G));
}

static kiln_status k_conv(kiln_kctx *ctx)
{
    if (kiln__lowbit_layer(ctx)) /* FP8 / FP4 / INT4 weights (lowbit.h) */
        return kiln__run_lowbit(ctx, k_conv);
    if (kiln__mixed_weight(ctx, 1)) /* float32 X, FP16 / BF16 W (qgemm_bf16.h) */
        return kiln__run_mixed(ctx, 1, k_conv);
    bool handled;
    return conv_run(ctx, NULL, NULL, &handled);
}

kiln_status kiln__conv_fused(kiln_kctx *ctx, const kiln_tensor *res, const kiln_act *act, bool *handled)
{
    return conv_run(ctx, res, act, handled);
}

static kiln_status k_conv_transpose(kiln_kctx *ctx)
{
    const kiln_tensor *x = kiln__kin(ctx, 0), *w = kiln__kin(ctx, 1), *b = kiln__kin(ctx, 2);
    if (!x || !w)
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "missing input X or W");
    if (!is_float_dt(x->dtype))
        return kiln__kerr(ctx, KILN_ERR_DTYPE, "unsupported dtype %s", kiln_dtype_name(x->dtype));
    if (w->dtype != x->dtype)
        return kiln__kerr(ctx, KILN_ERR_DTYPE, "W has dtype %s, X has %s", kiln_dtype_name(w->dtype),
                          kiln_dtype_name(x->dtype));
    if (x->ndim < 3)
        return kiln__kerr(ctx, KILN_ERR_SHAPE, "X must have rank >= 3, got %d", x->ndim);
    if (w->ndim != x->ndim)
        return kiln__kerr(ctx, KILN_ERR_SHAPE, "W has rank %d, X has rank %d", w->ndim, x->ndim);
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
    KILN_TRY(check_kernel_shape(ctx, &g));
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
        int64_t effk = (g.k[i] - 1) * g.d[i] + 1;
        int64_t full = g.s[i] * (g.out[i] - 1) + opad[i] + effk; /* output size without padding */
        if (g.out[i] == 0)
            full = 0;
        if (has_os || ap == AP_SAME_UPPER || ap == AP_SAME_LOWER) {
            int64_t target = has_os ? oshape[i] : g.out[i] * g.s[i];
            int64_t tot = full - target;
            if (tot < 0)
                tot = 0;
            /* the extra padding goes at the end for SAME_UPPER (and NOTSET), at the start for SAME_LOWER */
            g.pb[i] = ap == AP_SAME_LOWER ? tot - tot / 2 : tot / 2;
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
    KILN_TRY(check_bias(ctx, b, x->dtype, g.C));
    int64_t dims[KILN_MAX_DIMS] = {g.N, g.C};
    for (int i = 0; i < nsp; i++)
        dims[2 + i] = g.in[i];
    KILN_TRY(kiln__kout(ctx, 0, x->dtype, x->ndim, dims));
    return run_float(ctx, &g, x, w, b, ctx->out[0], convt_f32, convt_direct_task, g.N * g.C,
                     mul_chk(g.out_sz, g.M / g.G));
}

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

static kiln_status k_conv_integer(kiln_kctx *ctx)
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
    KILN_TRY(conv_setup(ctx, x, w, &g));
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
        direct_job j = {.g = &g, .x = dx, .w = dw, .b = NULL, .y = dy};
        kiln__parallel_for(ctx->pool, ctx->nthreads, g.N * g.M, direct_grain(&g, mul_chk(g.out_sz, g.C / g.G)),
                           conv_direct_task, &j);
        int32_t *y = ctx->out[0]->data;
        for (int64_t i = 0; i < ny; i++)
            y[i] = (int32_t)(int64_t)dy[i];
    }
    kiln__free(dx);
    kiln__free(dw);
    kiln__free(dy);
    return st;
}

/* Build time: Winograd-transformed filters for layers whose attributes and weights take the
 * Winograd path (every tile count, once prepared), so the runtime never transforms them. Not for
 * filters whose transform exceeds 4 MiB (Cg * Mg > 2^16): with few tiles (a 7x7 image) Winograd
 * is then bound by reading U from memory and im2col wins (measured: 512 x 512 channels at 7x7,
 * 3.0 ms against 2.3 ms), so those keep the unprepared choice. The other float32 paths read the
 * weights as they are (the AVX-512 GEMM reads row-major A in place): no prepared copy. */
#define WINO_PREP_MAX_PAIRS ((int64_t)1 << 16)
static kiln_status prep_conv(const kiln_node *n, int n_in, const kiln_tensor *const *consts, void **blob,
                             size_t *size)
{
    *blob = NULL;
    *size = 0;
    const kiln_tensor *w = consts && n_in > 1 ? consts[1] : NULL;
    if (w && w->dtype == KILN_DT_BFLOAT16)   /* BF16 weights: the BF16 conv's rows */
        return kiln__bconv_prep(n, n_in, consts, blob, size);
    if (!w || !w->data || w->dtype != KILN_DT_FLOAT32 || w->ndim != 4)
        return KILN_OK;
    const kiln_kctx c = {.node = n};
    conv_geom g = {.nsp = 2, .M = w->dims[0], .G = kiln__attr_i(n, "group", 1), .k = {w->dims[2], w->dims[3]}};
    int64_t pads[4];
    int ap;
    bool bad = g.G < 1 || g.G > LIM || g.M % g.G || w->dims[1] < 1 || w->dims[1] > LIM;
    bad = bad || kiln__win_ints(&c, "strides", 2, 1, 1, g.s, NULL) != KILN_OK;
    bad = bad || kiln__win_ints(&c, "dilations", 2, 1, 1, g.d, NULL) != KILN_OK;
    bad = bad || kiln__win_ints(&c, "pads", 4, 0, 0, pads, NULL) != KILN_OK || kiln__win_auto_pad(&c, &ap) != KILN_OK;
    if (bad) {
        kiln_clear_last_error();   /* the kernel reports bad attributes when it runs */
        return KILN_OK;
    }
    g.C = w->dims[1] * g.G;
    for (int i = 0; i < 2; i++) {   /* 3x3 stride 1: SAME pads 1 + 1, VALID 0 */
        g.pb[i] = ap == AP_NOTSET ? pads[i] : ap == AP_VALID ? 0 : 1;
        g.pe[i] = ap == AP_NOTSET ? pads[2 + i] : ap == AP_VALID ? 0 : 1;
    }
    int64_t Cg = g.C / g.G, Mg = g.M / g.G;
    if (!wino_geom(&g, Cg, Mg) || Cg * Mg > WINO_PREP_MAX_PAIRS)
        return KILN_OK;
    const wino_kind *k = wino_kind_for(Cg, Mg);
    int64_t dims[3] = {g.M, Cg, g.G};
    float *U = kiln__prep_alloc(k->layout, 1u << 1, KILN_DT_FLOAT32, 3, dims,
                                (uint64_t)wino_u_floats(&g, k) * sizeof(float), blob, size);
    if (!U)
        return kiln__err(KILN_ERR_NOMEM, "out of memory preparing Winograd filters of node '%s'", n->name);
    float tw[36 * 9];
    for (int64_t gi = 0; gi < g.G; gi++)
        wino_transform(NULL, 1, k, (const float *)w->data + gi * Mg * Cg * 9, Mg, Cg, tw, U + gi * k->np * Mg * Cg);
    return KILN_OK;
}

const kiln_prep_reg kiln__prep_conv[] = {
    {KILN_OP_Conv, prep_conv},
    {KILN_OP_FusedConv, prep_conv},
    {KILN_OP_COUNT, NULL},
};

const kiln_kernel_reg kiln__ref_conv[] = {
    {KILN_OP_Conv, k_conv},
    {KILN_OP_ConvTranspose, k_conv_transpose},
    {KILN_OP_ConvInteger, k_conv_integer},
    {KILN_OP_COUNT, NULL},
};

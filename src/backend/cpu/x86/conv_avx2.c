/* AVX2 + FMA float32 Conv / FusedConv: the reference kernels (cpu/ref/k_conv.c) with the
 * depthwise rows (strides 1 and 2) and the N-D im2col's stride-2 gathers vectorized (the AVX-512
 * kernels, conv_avx512.c, reuse the gathers; their depthwise rows are 16 wide), 16-column implicit-im2col panels (the AVX2 GEMM's), and Winograd for 3x3 stride-1 layers (conv_wino.c with the
 * AVX2 transforms of wino_avx2.c) and the direct convolution (conv_direct.c with convd_avx2.c's tiles), registered
 * over them for hosts with AVX2 and FMA. */
#include "../cpu_kernels.h"
#include "conv_x86.h"

#if KILN_CONV_X86
#include <immintrin.h>

__attribute__((target("avx2,fma"))) static inline __m256 even8(const float *q)
{
    __m256 a = _mm256_loadu_ps(q), b = _mm256_loadu_ps(q + 8);
    __m256 t = _mm256_shuffle_ps(a, b, _MM_SHUFFLE(2, 0, 2, 0));
    return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(t), _MM_SHUFFLE(3, 1, 2, 0)));
}

/* dst[i] = src[2 i] for i < n while the 16-float loads stay below src + avail; returns i reached */
__attribute__((target("avx2,fma"))) int64_t kiln__conv_gather2_avx2(float *dst, const float *src, int64_t n,
                                                                    int64_t avail)
{
    int64_t i = 0;
    for (; i + 8 <= n && 2 * i + 16 <= avail; i += 8)
        _mm256_storeu_ps(dst + i, even8(src + 2 * i));
    return i;
}

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
__attribute__((target("avx2,fma"))) void kiln__conv_dw_row_avx2(const kiln_conv2d *p, const float *rb,
                                                                const float *wk, float bias, float *yr)
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

/* kiln_conv_isa.im2col_panel16: rows [k0, k0 + kc) of one 16-column panel, column strides 1 and
 * 2. Each row is assembled in t (segments in lane order, 8-float stores whose lanes past a
 * segment are overwritten by the next one or zeroed past width), then stored whole; loads are
 * masked where a segment's reads leave the input row (nothing outside it is read). */
__attribute__((target("avx2,fma"))) static void im2col_panel16(const kiln_im2col *c, const kiln_im2col_seg *segs,
                                                                int ns, int width, int64_t k0, int64_t kc, float *d)
{
    enum { NR = 16 };
    const int64_t ksz = c->kh * c->kw, plane = c->H * c->W, W = c->W, sw = c->sw;
    const __m256i iota = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256 zero = _mm256_setzero_ps();
    float t[NR + 16] __attribute__((aligned(32)));
    int64_t ch = k0 / ksz, kk = k0 % ksz, ki = kk / c->kw, kj = kk % c->kw;
    /* one segment over the whole panel: its stores go to d itself (through t, the two 8-float
     * loads of t after stores at other offsets wait for them: no store forwarding) */
    const bool whole = ns == 1 && width == NR;
    for (int64_t k = 0; k < kc; k++, d += NR) {
        const float *xc = c->x + ch * plane;
        const int64_t dy = ki * c->dh, dx = kj * c->dw;
        float *tb = whole ? d : t;
        for (int s = 0; s < ns; s++) {
            const kiln_im2col_seg *sg = &segs[s];
            float *ts = tb + sg->lane;
            const int len = sg->len;
            const int64_t iy = sg->y0 + dy, ix0 = sg->x0 + dx;
            if (iy < 0 || iy >= c->H) {
                _mm256_storeu_ps(ts, zero);
                if (len > 8)
                    _mm256_storeu_ps(ts + 8, zero);
                continue;
            }
            const float *row = xc + iy * W;
            for (int g = 0; g < len; g += 8) {
                /* raw positions p + i (i < 8 stride 1, < 16 stride 2) read where 0 <= p + i < W */
                const int64_t p = ix0 + sw * g, span = 8 * sw;
                __m256 a, b = zero;
                if (p >= 0 && p + span <= W) {
                    a = _mm256_loadu_ps(row + p);
                    if (sw == 2)
                        b = _mm256_loadu_ps(row + p + 8);
                } else {
                    const int64_t lo = -p < -1 ? -1 : -p > 16 ? 16 : -p, hi = W - p < -1 ? -1 : W - p > 16 ? 16 : W - p;
                    const __m256i vlo = _mm256_set1_epi32((int)lo - 1), vhi = _mm256_set1_epi32((int)hi);
                    const __m256i i8 = _mm256_add_epi32(iota, _mm256_set1_epi32(8));
                    __m256i ma = _mm256_and_si256(_mm256_cmpgt_epi32(iota, vlo), _mm256_cmpgt_epi32(vhi, iota));
                    __m256i mb = sw == 2 ? _mm256_and_si256(_mm256_cmpgt_epi32(i8, vlo), _mm256_cmpgt_epi32(vhi, i8))
                                         : ma;
                    const int64_t at = iy * W + p;
                    if (at >= 0 && at + span <= plane) {
                        /* inside the channel's plane (a row's pad reads its neighbour row): plain
                         * loads with the lanes outside the row zeroed (masked loads are slow on
                         * AMD) */
                        a = _mm256_and_ps(_mm256_loadu_ps(row + p), _mm256_castsi256_ps(ma));
                        if (sw == 2)
                            b = _mm256_and_ps(_mm256_loadu_ps(row + p + 8), _mm256_castsi256_ps(mb));
                    } else {
                        a = _mm256_maskload_ps(row + p, ma);
                        if (sw == 2)
                            b = _mm256_maskload_ps(row + p + 8, mb);
                    }
                }
                if (sw == 2) {   /* the even raw positions */
                    __m256 e = _mm256_shuffle_ps(a, b, _MM_SHUFFLE(2, 0, 2, 0));
                    a = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(e), _MM_SHUFFLE(3, 1, 2, 0)));
                }
                _mm256_storeu_ps(ts + g, a);
            }
        }
        if (width < NR) {
            _mm256_storeu_ps(t + width, zero);
            if (width < 8)
                _mm256_storeu_ps(t + 8, zero);
        }
        if (!whole) {
            _mm256_storeu_ps(d, _mm256_load_ps(t));
            _mm256_storeu_ps(d + 8, _mm256_load_ps(t + 8));
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

/* kiln_conv_isa.layer: Winograd (AVX2 transforms) where it applies or its filters were prepared,
 * else the direct convolution (16-pixel tiles) where it pays */
static kiln_status layer_avx2(const kiln_kctx *ctx, const kiln_window *g, const float *x, const float *w,
                              const float *b, float *y, const kiln_epi *post, bool *done)
{
    KILN_TRY(kiln__conv_wino_layer(ctx, &kiln__wino_set_avx2, g, x, w, b, y, post, done));
    if (*done)
        return KILN_OK;
    return kiln__conv_direct_layer_avx2(ctx, g, x, w, b, y, post, done);
}

static const kiln_conv_isa isa_avx2 = {.dw_row = kiln__conv_dw_row_avx2,
                                       .gather2 = kiln__conv_gather2_avx2,
                                       .im2col_panel16 = im2col_panel16,
                                       .layer = layer_avx2};

static kiln_status k_conv_avx2(kiln_kctx *ctx) { return kiln__conv(ctx, &isa_avx2, k_conv_avx2); }
static kiln_status k_fused_conv_avx2(kiln_kctx *ctx) { return kiln__fused_conv(ctx, &isa_avx2, k_fused_conv_avx2); }
static kiln_status k_fused_conv_sum_avx2(kiln_kctx *ctx) { return kiln__fused_conv_sum(ctx, kiln__conv_gather2_avx2); }

const kiln_kernel_isa_reg kiln__x86_conv_avx2[] = {
    {KILN_OP_Conv, k_conv_avx2, KILN_CPU_AVX2_FMA, "Conv/avx2"},
    {KILN_OP_FusedConv, k_fused_conv_avx2, KILN_CPU_AVX2_FMA, "FusedConv/avx2"},
    {KILN_OP_FusedConvSum, k_fused_conv_sum_avx2, KILN_CPU_AVX2_FMA, "FusedConvSum/avx2"},
    {KILN_OP_COUNT, NULL, 0, NULL},
};
#else
const kiln_kernel_isa_reg kiln__x86_conv_avx2[] = {{KILN_OP_COUNT, NULL, 0, NULL}};
#endif

/* AVX2 + FMA float32 Conv / FusedConv: the reference kernels (cpu/ref/k_conv.c) with the
 * depthwise rows (strides 1 and 2) and the N-D im2col's stride-2 gathers vectorized (the AVX-512
 * kernels, conv_avx512.c, reuse both) and Winograd for 3x3 stride-1 layers (conv_wino.c with the
 * AVX2 transforms of wino_avx2.c), registered over them for hosts with AVX2 and FMA. */
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

/* kiln_conv_isa.layer: Winograd (AVX2 transforms) where it applies or its filters were prepared */
static kiln_status layer_avx2(const kiln_kctx *ctx, const kiln_window *g, const float *x, const float *w,
                              const float *b, float *y, const kiln_epi *post, bool *done)
{
    return kiln__conv_wino_layer(ctx, &kiln__wino_set_avx2, g, x, w, b, y, post, done);
}

static const kiln_conv_isa isa_avx2 = {
    .dw_row = kiln__conv_dw_row_avx2, .gather2 = kiln__conv_gather2_avx2, .layer = layer_avx2};

static kiln_status k_conv_avx2(kiln_kctx *ctx) { return kiln__conv(ctx, &isa_avx2, k_conv_avx2); }
static kiln_status k_fused_conv_avx2(kiln_kctx *ctx) { return kiln__fused_conv(ctx, &isa_avx2, k_fused_conv_avx2); }

const kiln_kernel_isa_reg kiln__x86_conv_avx2[] = {
    {KILN_OP_Conv, k_conv_avx2, KILN_CPU_AVX2_FMA, "Conv/avx2"},
    {KILN_OP_FusedConv, k_fused_conv_avx2, KILN_CPU_AVX2_FMA, "FusedConv/avx2"},
    {KILN_OP_COUNT, NULL, 0, NULL},
};
#else
const kiln_kernel_isa_reg kiln__x86_conv_avx2[] = {{KILN_OP_COUNT, NULL, 0, NULL}};
#endif

/* The direct float32 convolution's AVX2 + FMA tiles (conv_direct.c lays the input out and builds
 * the offset table; kiln__conv_direct_f32 in gemm.c is the AVX-512 twin): 6 output channels x 16
 * pixels of one output row per tile, the weights read in place (6 rows, stride lda), the input
 * through the offset table (B[k][j] = xb[off[k] + j]): no im2col and no packing. Bias, residual
 * and Relu / no activation are applied in registers; other activations by the epilogue's rows
 * over the stored tile. ResNet-50's 7x7/2 stem (3 -> 64 channels, K = 147) on AVX2 spent a third
 * of its time in the im2col panels. */
#include "../gemm.h"
#include "conv_x86.h"

#if KILN_CONV_X86
#include <immintrin.h>

enum { MR = 6, TW = 16, KC = 256 };

/* One tile: rows [0, m) of the R-row block at a (m <= R), n <= 16 columns of C at c; beta 0 or 1
 * (later K slices accumulate); e (last K slice only) at global (i0, j0). */
__attribute__((target("avx2,fma"), always_inline)) static inline void tile_rows(int64_t kc, const float *a,
                                                                               int64_t lda, const float *xb,
                                                                               const int64_t *off, float *c,
                                                                               int64_t ldc, int m, int n,
                                                                               bool acc, const kiln_epi *e,
                                                                               int64_t i0, int64_t j0, const int R)
{
    __m256 c0[MR], c1[MR];
    const float *ar[MR];
#pragma GCC unroll 8
    for (int i = 0; i < R; i++) {
        c0[i] = c1[i] = _mm256_setzero_ps();
        ar[i] = a + (i < m ? i : m - 1) * lda;   /* rows past m repeat the last one (not stored) */
    }
#pragma GCC unroll 2
    for (int64_t k = 0; k < kc; k++) {
        const float *src = xb + off[k];
        __m256 b0 = _mm256_loadu_ps(src), b1 = _mm256_loadu_ps(src + 8);
#pragma GCC unroll 8
        for (int i = 0; i < R; i++) {
            __m256 av = _mm256_broadcast_ss(ar[i] + k);
            c0[i] = _mm256_fmadd_ps(av, b0, c0[i]);
            c1[i] = _mm256_fmadd_ps(av, b1, c1[i]);
        }
    }
    const bool in_regs = !e || ((e->act.kind == KILN_ACT_NONE || e->act.kind == KILN_ACT_RELU) &&
                                (!e->bias || e->row_bias));
    const bool relu = e && in_regs && e->act.kind == KILN_ACT_RELU;
    const float *rb = e && in_regs && e->bias ? e->bias + i0 : NULL;
    const float *rr = e && in_regs && e->res ? e->res + i0 * e->ldr + j0 : NULL;
    float tt[2 * 8] __attribute__((aligned(32)));
#pragma GCC unroll 8
    for (int i = 0; i < R; i++) {
        if (i >= m)
            break;
        float *cr = c + i * ldc;
        __m256 r0 = c0[i], r1 = c1[i];
        if (n == TW) {
            if (acc) {
                r0 = _mm256_add_ps(r0, _mm256_loadu_ps(cr));
                r1 = _mm256_add_ps(r1, _mm256_loadu_ps(cr + 8));
            }
            if (rb) {
                __m256 bv = _mm256_broadcast_ss(rb + i);
                r0 = _mm256_add_ps(r0, bv), r1 = _mm256_add_ps(r1, bv);
            }
            if (rr) {
                r0 = _mm256_add_ps(r0, _mm256_loadu_ps(rr + i * e->ldr));
                r1 = _mm256_add_ps(r1, _mm256_loadu_ps(rr + i * e->ldr + 8));
            }
            if (relu) {   /* NaN -> 0, like the epilogue */
                r0 = _mm256_max_ps(_mm256_setzero_ps(), r0);   /* NaN stays */
                r1 = _mm256_max_ps(_mm256_setzero_ps(), r1);
            }
            _mm256_storeu_ps(cr, r0);
            _mm256_storeu_ps(cr + 8, r1);
        } else {
            _mm256_store_ps(tt, r0);
            _mm256_store_ps(tt + 8, r1);
            for (int j = 0; j < n; j++) {
                float v = tt[j] + (acc ? cr[j] : 0.0f);
                if (rb)
                    v += rb[i];
                if (rr)
                    v += rr[i * e->ldr + j];
                cr[j] = relu ? kiln__act_scalar(&e->act, v) : v;
            }
        }
    }
    if (e && !in_regs)
        kiln__epi_apply_f32(e, c, ldc, m, n, i0, j0);
}

__attribute__((target("avx2,fma"))) static void tile(int64_t kc, const float *a, int64_t lda, const float *xb,
                                                     const int64_t *off, float *c, int64_t ldc, int m, int n,
                                                     bool acc, const kiln_epi *e, int64_t i0, int64_t j0)
{
    if (m > 4)
        tile_rows(kc, a, lda, xb, off, c, ldc, m, n, acc, e, i0, j0, 6);
    else if (m > 2)
        tile_rows(kc, a, lda, xb, off, c, ldc, m, n, acc, e, i0, j0, 4);
    else
        tile_rows(kc, a, lda, xb, off, c, ldc, m, n, acc, e, i0, j0, 2);
}

/* Tiles [t0, t1): all output channels of one output row's 16 pixels each, K in slices of <= 256. */
static void convd2_task(void *ctx, int64_t t0, int64_t t1)
{
    const kiln_convd_job *j = ctx;   /* j->tw: 16-pixel tiles per output row */
    const kiln_convd *d = j->d;
    const int64_t M = d->M, K = d->K;
    const int64_t kb = (K + KC - 1) / KC, kcs = (K + kb - 1) / kb;
    for (int64_t t = t0; t < t1; t++) {
        int64_t oy = t / j->tw, ox0 = (t % j->tw) * TW;
        int n = (int)(d->Wo - ox0 < TW ? d->Wo - ox0 : TW);
        const float *xb = d->xp + oy * d->row_stride + ox0;
        int64_t col = oy * d->Wo + ox0;
        for (int64_t pc = 0; pc < K; pc += kcs) {
            int64_t kc = K - pc < kcs ? K - pc : kcs;
            const kiln_epi *e = pc + kc >= K ? d->epi : NULL;
            for (int64_t ir = 0; ir < M; ir += MR) {
                int m = (int)(M - ir < MR ? M - ir : MR);
                tile(kc, d->A + ir * d->lda + pc, d->lda, xb, d->off + pc, d->C + ir * d->ldc + col, d->ldc, m, n,
                     pc > 0, e, ir, col);
            }
        }
    }
}

void kiln__conv_direct_f32_avx2(kiln_pool *pool, int nthreads, const kiln_convd *d)
{
    kiln__conv_direct_drive(pool, nthreads, d, TW, convd2_task);
}
#endif

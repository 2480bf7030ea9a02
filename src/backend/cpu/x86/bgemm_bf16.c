/* AVX512-BF16 GEMM micro-kernel (vdpbf16ps): up to 8 rows of BF16 A (a pair of k broadcast to
 * every lane) by up to 3 panels of 16 columns (a pair of k per lane), 24 float32 accumulators,
 * passed through the GEMM's float epilogue (bias, residual, activation: the operations of
 * kiln__epi_apply_f32, in its order) while in registers and stored with masked stores
 * (qgemm_bf16.h). */
#include "../qgemm.h"
#include "../qgemm_bf16.h"
#include "../vmath.h"
#include "../../../core/numfmt_v512.h"

#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#include <immintrin.h>

/* every AVX512-BF16 host has AVX512DQ and FMA (what the vector activations use) */
#define TBF16 __attribute__((target("avx512f,avx512dq,fma,avx512bf16")))

#define BROW(i)                                                                                                 \
    {                                                                                                           \
        int32_t pair;                                                                                           \
        memcpy(&pair, ar##i + gk * 2, 4);                                                                       \
        __m512bh av = (__m512bh)_mm512_set1_epi32(pair);                                                        \
        c##i##0 = _mm512_dpbf16_ps(c##i##0, av, b0);                                                              \
        if (NV > 1)                                                                                             \
            c##i##1 = _mm512_dpbf16_ps(c##i##1, av, b1);                                                          \
        if (NV > 2)                                                                                             \
            c##i##2 = _mm512_dpbf16_ps(c##i##2, av, b2);                                                          \
    }
#define BSAVE(i) acc[i][0] = c##i##0, acc[i][1] = c##i##1, acc[i][2] = c##i##2;

TBF16 __attribute__((always_inline)) static inline void tile_body(const kiln_bgemm *g, const uint16_t *a,
                                                                   const uint16_t *bs, int64_t i0, int m, int64_t j0,
                                                                   int ncols, const int NV)
{
    int64_t kp2 = (g->K + 1) & ~(int64_t)1, ng = kp2 / 2, pstride = kp2 * 16;
    /* rows beyond m read row 0 again (their results are not stored) */
    const uint16_t *ar0 = a, *ar1 = a + (1 < m ? kp2 : 0), *ar2 = a + (2 < m ? 2 * kp2 : 0);
    const uint16_t *ar3 = a + (3 < m ? 3 * kp2 : 0), *ar4 = a + (4 < m ? 4 * kp2 : 0);
    const uint16_t *ar5 = a + (5 < m ? 5 * kp2 : 0), *ar6 = a + (6 < m ? 6 * kp2 : 0);
    const uint16_t *ar7 = a + (7 < m ? 7 * kp2 : 0);
    const __m512 z = _mm512_setzero_ps();
    __m512 c00 = z, c01 = z, c02 = z, c10 = z, c11 = z, c12 = z, c20 = z, c21 = z, c22 = z, c30 = z, c31 = z,
           c32 = z, c40 = z, c41 = z, c42 = z, c50 = z, c51 = z, c52 = z, c60 = z, c61 = z, c62 = z, c70 = z,
           c71 = z, c72 = z;
    for (int64_t gk = 0; gk < ng; gk++) {
        __m512bh b0 = (__m512bh)_mm512_loadu_si512((const void *)(bs + gk * 32)), b1 = b0, b2 = b0;
        if (NV > 1)
            b1 = (__m512bh)_mm512_loadu_si512((const void *)(bs + pstride + gk * 32));
        if (NV > 2)
            b2 = (__m512bh)_mm512_loadu_si512((const void *)(bs + 2 * pstride + gk * 32));
        BROW(0) BROW(1) BROW(2) BROW(3) BROW(4) BROW(5) BROW(6) BROW(7)
    }
    __m512 acc[8][3];
    BSAVE(0) BSAVE(1) BSAVE(2) BSAVE(3) BSAVE(4) BSAVE(5) BSAVE(6) BSAVE(7)
    const kiln_epi *e = kiln__epi_is_noop(g->epi) ? NULL : g->epi;
    for (int i = 0; i < m; i++) {
        int64_t gi = i0 + i;
        const __m512 vb = _mm512_set1_ps(e && e->bias && e->row_bias ? e->bias[gi] : 0.0f);
        for (int v = 0; v < NV; v++) {
            int rem = ncols - v * 16;
            if (rem <= 0)
                break;
            __mmask16 km = kiln_v_mask16(rem);
            int64_t j = j0 + v * 16;
            __m512 y = acc[i][v];
            if (e) { /* y = act(y + bias + residual), as kiln__epi_apply_f32 */
                y = _mm512_add_ps(y, e->bias && !e->row_bias ? _mm512_maskz_loadu_ps(km, e->bias + j) : vb);
                if (e->res)
                    y = _mm512_add_ps(y, _mm512_maskz_loadu_ps(km, e->res + gi * e->ldr + j));
                y = kiln_v_act(&e->act, y);
            }
            _mm512_mask_storeu_ps(g->C + gi * g->ldc + j, km, y);
        }
    }
}
#undef BROW
#undef BSAVE

#define TILE_FN(nv)                                                                                              \
    TBF16 static void tile##nv(const kiln_bgemm *g, const uint16_t *a, const uint16_t *bs, int64_t i0, int m,      \
                               int64_t j0, int n)                                                                \
    {                                                                                                            \
        tile_body(g, a, bs, i0, m, j0, n, nv);                                                                    \
    }
TILE_FN(1) TILE_FN(2) TILE_FN(3)
#undef TILE_FN

void kiln__bgemm_tile_bf16(const kiln_bgemm *g, const uint16_t *a, const uint16_t *bs, int64_t i0, int m, int64_t j0,
                           int ncols)
{
    if (ncols > 32)
        tile3(g, a, bs, i0, m, j0, ncols);
    else if (ncols > 16)
        tile2(g, a, bs, i0, m, j0, ncols);
    else
        tile1(g, a, bs, i0, m, j0, ncols);
}

__attribute__((target("avx512f"))) void kiln__bpack_f32_pairs_avx512(const float *x, int64_t hw, int64_t K, int64_t j0,
                                                                       uint16_t *dst)
{
    const int64_t kp2 = (K + 1) & ~(int64_t)1;
    const __m512i hi = _mm512_set1_epi32((int)0xffff0000u);
    for (int64_t k0 = 0; k0 < kp2; k0 += 2) {
        const float *r0 = x + k0 * hw, *r1 = k0 + 1 < K ? x + (k0 + 1) * hw : NULL;
        for (int p = 0; p < KILN_QGEMM_NV; p++) {
            int64_t c = j0 + 16 * p;
            __mmask16 m = kiln_v_mask16(hw - c);
            __m512i a = kiln__v512_bf16_hi(_mm512_maskz_loadu_epi32(m, r0 + c));
            __m512i b = r1 ? kiln__v512_bf16_hi(_mm512_maskz_loadu_epi32(m, r1 + c)) : _mm512_setzero_si512();
            __m512i v = _mm512_or_si512(_mm512_srli_epi32(a, 16), _mm512_and_si512(b, hi));
            _mm512_storeu_si512((void *)(dst + p * kp2 * 16 + k0 * 16), _mm512_maskz_mov_epi32(m, v));
        }
    }
}

#else
void kiln__bgemm_tile_bf16(const kiln_bgemm *g, const uint16_t *a, const uint16_t *bs, int64_t i0, int m, int64_t j0,
                           int ncols)
{
    (void)g, (void)a, (void)bs, (void)i0, (void)m, (void)j0, (void)ncols;
}
void kiln__bpack_f32_pairs_avx512(const float *x, int64_t hw, int64_t K, int64_t j0, uint16_t *dst)
{
    (void)x, (void)hw, (void)K, (void)j0, (void)dst;
}
#endif

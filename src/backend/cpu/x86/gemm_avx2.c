/* AVX2 + FMA single-precision GEMM micro-kernels and packers (the 6 x 16 tile and its edge variants) for the
 * CPU GEMM driver (gemm.c; shared types in gemm_impl.h). */
#include "../gemm_impl.h"
#include "../vmath_avx2.h"

#if GEMM_X86
/* ------------------------------------------------------------------------------------------
 * AVX2 + FMA micro-kernel: 6 x 16
 * ------------------------------------------------------------------------------------------ */

#define MR_AVX2 6
#define NR_AVX2 16

/* The 6 x 16 tile computed for its first R rows only (R = 6, 4 or 2, m <= R): an edge tile of
 * one or two rows (BERT's M = 128 = 21 x 6 + 2) does not pay for six. X17: a 17-column tile (n ==
 * 17), the 17th column (t->colv[k], contiguous: column 0 of the next panel) times the packed A
 * column as one vector (rows in lanes 0-5; lanes 6-7 are the next k's rows, ignored): 13 FMAs per
 * k for 17 columns, where a 16-column and a 1-column tile take 24. A 7x7 map's N = 49 = 16 + 16 +
 * 17 (ResNet-50's stage 4) runs 3 tiles instead of 4. */
__attribute__((target("avx2,fma"), always_inline)) static inline void ukr_avx2_rows(int64_t kc, const float *pa,
                                                                                   const float *pb, float *c,
                                                                                   int64_t ldc, int m, int n,
                                                                                   const tile_args *t, const int R,
                                                                                   const bool X17)
{
    __m256 c0[MR_AVX2], c1[MR_AVX2], cx = _mm256_setzero_ps();
    const float *cv = t->colv;
#pragma GCC unroll 8
    for (int i = 0; i < R; i++)
        c0[i] = c1[i] = _mm256_setzero_ps();
    /* the tile's rows of C and of the residual (both lines of a row that straddles two), fetched
     * while the k loop runs: a C larger than L2 (ResNet-50's 256->1024 @14 with the residual) */
    for (int i = 0; i < m; i++) {
        _mm_prefetch((const char *)(c + i * ldc), _MM_HINT_T0);
        _mm_prefetch((const char *)(c + i * ldc + NR_AVX2 - 1), _MM_HINT_T0);
    }
    if (t->epi && t->epi->res) {
        const float *rr = t->epi->res + t->i0 * t->epi->ldr + t->j0;
        for (int i = 0; i < m; i++) {
            _mm_prefetch((const char *)(rr + i * t->epi->ldr), _MM_HINT_T0);
            _mm_prefetch((const char *)(rr + i * t->epi->ldr + NR_AVX2 - 1), _MM_HINT_T0);
        }
    }
    /* X17: the last k reads its A column without the 2 floats past it (the panel may end there) */
    const int64_t kv = X17 ? kc - 1 : kc;
#pragma GCC unroll 4
    for (int64_t k = 0; k < kv; k++) {
        __m256 b0 = _mm256_load_ps(pb), b1 = _mm256_load_ps(pb + 8);
#pragma GCC unroll 8
        for (int i = 0; i < R; i++) {
            __m256 a = _mm256_broadcast_ss(pa + i);
            c0[i] = _mm256_fmadd_ps(a, b0, c0[i]);
            c1[i] = _mm256_fmadd_ps(a, b1, c1[i]);
        }
        if (X17)
            cx = _mm256_fmadd_ps(_mm256_broadcast_ss(cv + k), _mm256_loadu_ps(pa), cx);
        pa += MR_AVX2;
        pb += NR_AVX2;
    }
    if (X17 && kc > 0) {
        __m256 b0 = _mm256_load_ps(pb), b1 = _mm256_load_ps(pb + 8);
#pragma GCC unroll 8
        for (int i = 0; i < R; i++) {
            __m256 a = _mm256_broadcast_ss(pa + i);
            c0[i] = _mm256_fmadd_ps(a, b0, c0[i]);
            c1[i] = _mm256_fmadd_ps(a, b1, c1[i]);
        }
        __m256 al = _mm256_castps128_ps256(_mm_loadu_ps(pa));
        al = _mm256_insertf128_ps(al, _mm_castpd_ps(_mm_load_sd((const double *)(pa + 4))), 1);
        cx = _mm256_fmadd_ps(_mm256_broadcast_ss(cv + kc - 1), al, cx);
    }
    if (X17) {
        /* column 16: alpha * acc + beta * C, then the epilogue over that column */
        float x[8] __attribute__((aligned(32)));
        _mm256_store_ps(x, cx);
        for (int i = 0; i < m; i++) {
            float *cp = c + i * ldc + NR_AVX2;
            *cp = t->beta == 0.0f ? t->alpha * x[i] : t->alpha * x[i] + t->beta * *cp;
        }
        if (t->epi)
            kiln__epi_apply_f32(t->epi, c + NR_AVX2, ldc, m, 1, t->i0, t->j0 + NR_AVX2);
        n = NR_AVX2;
    }
    if (n == NR_AVX2) {
        /* bias, residual and Relu / GELU (BERT's FFN up) / no activation in registers, in
         * kiln__epi_apply_f32's order with its vector math (the same results); other activations
         * by its (AVX2) rows over the stored tile, still in L1 */
        const kiln_epi *e = t->epi;
        const bool in_regs =
            e && (e->act.kind == KILN_ACT_NONE || e->act.kind == KILN_ACT_RELU || e->act.kind == KILN_ACT_GELU);
        const bool relu = in_regs && e->act.kind == KILN_ACT_RELU, gelu = in_regs && e->act.kind == KILN_ACT_GELU;
        const float *rb = in_regs && e->bias && e->row_bias ? e->bias + t->i0 : NULL;
        const float *cb = in_regs && e->bias && !e->row_bias ? e->bias + t->j0 : NULL;
        const float *rr = in_regs && e->res ? e->res + t->i0 * e->ldr + t->j0 : NULL;
        __m256 va = _mm256_set1_ps(t->alpha), vb = _mm256_set1_ps(t->beta);
        __m256 cb0 = cb ? _mm256_loadu_ps(cb) : va, cb1 = cb ? _mm256_loadu_ps(cb + 8) : va;
#pragma GCC unroll 8
        for (int i = 0; i < R; i++) {
            if (i >= m)
                break;
            float *cr = c + i * ldc;
            __m256 r0 = _mm256_mul_ps(c0[i], va), r1 = _mm256_mul_ps(c1[i], va);
            if (t->beta != 0.0f) {
                r0 = _mm256_fmadd_ps(_mm256_loadu_ps(cr), vb, r0);
                r1 = _mm256_fmadd_ps(_mm256_loadu_ps(cr + 8), vb, r1);
            }
            if (rb) {
                __m256 b = _mm256_broadcast_ss(rb + i);
                r0 = _mm256_add_ps(r0, b), r1 = _mm256_add_ps(r1, b);
            } else if (cb) {
                r0 = _mm256_add_ps(r0, cb0), r1 = _mm256_add_ps(r1, cb1);
            }
            if (rr) {
                r0 = _mm256_add_ps(r0, _mm256_loadu_ps(rr + i * e->ldr));
                r1 = _mm256_add_ps(r1, _mm256_loadu_ps(rr + i * e->ldr + 8));
            }
            if (relu) {   /* NaN -> 0, like the epilogue */
                r0 = _mm256_max_ps(_mm256_setzero_ps(), r0);   /* NaN stays */
                r1 = _mm256_max_ps(_mm256_setzero_ps(), r1);
            } else if (gelu) {
                r0 = kiln_v8_act(KILN_ACT_GELU, 0.0f, 0.0f, r0);
                r1 = kiln_v8_act(KILN_ACT_GELU, 0.0f, 0.0f, r1);
            }
            _mm256_storeu_ps(cr, r0);
            _mm256_storeu_ps(cr + 8, r1);
        }
        if (e && !in_regs)
            kiln__epi_apply_f32(e, c, ldc, m, NR_AVX2, t->i0, t->j0);
    } else {
        float tt[MR_AVX2 * NR_AVX2] __attribute__((aligned(32)));
#pragma GCC unroll 8
        for (int i = 0; i < R; i++) {
            _mm256_store_ps(tt + i * NR_AVX2, c0[i]);
            _mm256_store_ps(tt + i * NR_AVX2 + 8, c1[i]);
        }
        store_tile(tt, NR_AVX2, c, ldc, m, n, t);
    }
}

/* An edge tile of at most 8 columns (a 14x14 map's N = 196 = 12 x 16 + 4): the panel's first 8
 * columns only, half the FMAs of the 6 x 16 tile (the packed A rows past m are zeros). */
__attribute__((target("avx2,fma"))) static void ukr_avx2_n8(int64_t kc, const float *pa, const float *pb, float *c,
                                                             int64_t ldc, int m, int n, const tile_args *t)
{
    __m256 c0[MR_AVX2];
#pragma GCC unroll 8
    for (int i = 0; i < MR_AVX2; i++)
        c0[i] = _mm256_setzero_ps();
#pragma GCC unroll 4
    for (int64_t k = 0; k < kc; k++) {
        __m256 b0 = _mm256_load_ps(pb);
#pragma GCC unroll 8
        for (int i = 0; i < MR_AVX2; i++)
            c0[i] = _mm256_fmadd_ps(_mm256_broadcast_ss(pa + i), b0, c0[i]);
        pa += MR_AVX2;
        pb += NR_AVX2;
    }
    float tt[MR_AVX2 * 8] __attribute__((aligned(32)));
#pragma GCC unroll 8
    for (int i = 0; i < MR_AVX2; i++)
        _mm256_store_ps(tt + i * 8, c0[i]);
    store_tile(tt, 8, c, ldc, m, n, t);
}

__attribute__((target("avx2,fma"))) static void ukr_avx2(int64_t kc, const float *pa, int64_t lda, const float *pb,
                                                          float *c, int64_t ldc, int m, int n, const tile_args *t)
{
    (void)lda; /* always packed */
    if (n <= 8 && m > 2)
        ukr_avx2_n8(kc, pa, pb, c, ldc, m, n, t);
    else if (n == NR_AVX2 + 1) {   /* (t->colv set: see panel_at) */
        if (m > 4)
            ukr_avx2_rows(kc, pa, pb, c, ldc, m, n, t, 6, true);
        else if (m > 2)
            ukr_avx2_rows(kc, pa, pb, c, ldc, m, n, t, 4, true);
        else
            ukr_avx2_rows(kc, pa, pb, c, ldc, m, n, t, 2, true);
    } else if (m > 4)
        ukr_avx2_rows(kc, pa, pb, c, ldc, m, n, t, 6, false);
    else if (m > 2)
        ukr_avx2_rows(kc, pa, pb, c, ldc, m, n, t, 4, false);
    else
        ukr_avx2_rows(kc, pa, pb, c, ldc, m, n, t, 2, false);
}

/* A row-major (sk == 1, e.g. convolution weights): full 6-row panels transposed 4 k at a time in
 * SSE registers (rows 0-3 as a 4 x 4 transpose, rows 4-5 interleaved), the rest by pack_generic. */
__attribute__((target("avx2,fma"))) static void pack_avx2_a(const float *src, int64_t si, int64_t sk, int64_t n,
                                                             int64_t kc, float *dst)
{
    if (sk != 1 || kc < 4) {
        pack_generic(src, si, sk, n, kc, dst, MR_AVX2);
        return;
    }
    int64_t p = 0;
    for (; p + MR_AVX2 <= n; p += MR_AVX2, dst += kc * MR_AVX2) {
        const float *s = src + p * si;
        int64_t k = 0;
        for (; k + 4 <= kc; k += 4) {
            __m128 r0 = _mm_loadu_ps(s + k), r1 = _mm_loadu_ps(s + si + k), r2 = _mm_loadu_ps(s + 2 * si + k),
                   r3 = _mm_loadu_ps(s + 3 * si + k), r4 = _mm_loadu_ps(s + 4 * si + k),
                   r5 = _mm_loadu_ps(s + 5 * si + k);
            _MM_TRANSPOSE4_PS(r0, r1, r2, r3);   /* r0: rows 0-3 at k, r1 at k + 1, ... */
            __m128 u = _mm_unpacklo_ps(r4, r5), v = _mm_unpackhi_ps(r4, r5);   /* (4,5) at k, k+1 / k+2, k+3 */
            float *d = dst + k * MR_AVX2;
            _mm_storeu_ps(d, r0);
            _mm_storel_pi((__m64 *)(d + 4), u);
            _mm_storeu_ps(d + 6, r1);
            _mm_storeh_pi((__m64 *)(d + 10), u);
            _mm_storeu_ps(d + 12, r2);
            _mm_storel_pi((__m64 *)(d + 16), v);
            _mm_storeu_ps(d + 18, r3);
            _mm_storeh_pi((__m64 *)(d + 22), v);
        }
        for (; k < kc; k++)
            for (int i = 0; i < MR_AVX2; i++)
                dst[k * MR_AVX2 + i] = s[i * si + k];
    }
    if (p < n)
        pack_generic(src + p * si, si, sk, n - p, kc, dst, MR_AVX2);
}
/* B row-major (si == 1: a conv's activations, [K][N]): row by row, each source row read once
 * left to right (panel by panel, every panel would walk all kc rows, a page each on a 56x56 map). */
__attribute__((target("avx2,fma"))) static void pack_avx2_b(const float *src, int64_t si, int64_t sk, int64_t n,
                                                             int64_t kc, float *dst)
{
    if (si != 1) {
        pack_generic(src, si, sk, n, kc, dst, NR_AVX2);
        return;
    }
    const int64_t full = n / NR_AVX2, rem = n % NR_AVX2, ps = kc * NR_AVX2;
    for (int64_t k = 0; k < kc; k++) {
        const float *s = src + k * sk;
        float *d = dst + k * NR_AVX2;
        for (int64_t p = 0; p < full; p++, s += NR_AVX2, d += ps) {
            _mm256_storeu_ps(d, _mm256_loadu_ps(s));
            _mm256_storeu_ps(d + 8, _mm256_loadu_ps(s + 8));
        }
        if (rem) {
            for (int64_t j = 0; j < rem; j++)
                d[j] = s[j];
            for (int64_t j = rem; j < NR_AVX2; j++)
                d[j] = 0.0f;
        }
    }
}

const gemm_impl kiln__gemm_impl_avx2 = {MR_AVX2, NR_AVX2, ukr_avx2, pack_avx2_a, pack_avx2_b, 144, 256, 1024, false, 0, NULL,
                                    true, false};

#endif

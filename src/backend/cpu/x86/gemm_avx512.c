/* AVX-512F + FMA single-precision GEMM micro-kernels (8 x 32, 12 x 32 tall, edge variants), packers, the one-row
 * GEMV against pre-packed B and the direct convolution task, for the CPU GEMM driver (gemm.c; gemm_impl.h). */
#include "../gemm_impl.h"
#include "../vmath_avx2.h"

#if GEMM_X86
/* ------------------------------------------------------------------------------------------
 * AVX-512F + FMA micro-kernel: 8 x 32
 * ------------------------------------------------------------------------------------------ */

#define MR_512 8
#define NR_512 32
/* The tile's m output rows (n columns) and its residual rows into L1 before the k loop: the epilogue's stores
 * and loads then find them there. */
__attribute__((always_inline)) static inline void prefetch_tile_out(const float *c, int64_t ldc, int m, int n,
                                                                    const tile_args *t)
{
    for (int i = 0; i < m; i++) {
        _mm_prefetch((const char *)(c + i * ldc), _MM_HINT_T0);
        _mm_prefetch((const char *)(c + i * ldc + n - 1), _MM_HINT_T0);
    }
    if (t->epi && t->epi->res)
        for (int i = 0; i < m; i++) {
            const float *r = t->epi->res + (t->i0 + i) * t->epi->ldr + t->j0;
            _mm_prefetch((const char *)r, _MM_HINT_T0);
            _mm_prefetch((const char *)(r + n - 1), _MM_HINT_T0);
        }
}

#define T512 __attribute__((target("avx512f,avx512dq,fma")))

/* Edge-tile variants of the 8 x 32 kernel, so a narrow last panel does not pay for 32 columns. */
enum { W_FULL, W_17, W_16, W_1 };

/* r (columns jo.. of row i of the tile, lanes in mask k) through the epilogue */
T512 __attribute__((always_inline)) static inline __m512 epi512(const tile_args *t, __m512 r, int i, int jo,
                                                                __mmask16 k)
{
    const kiln_epi *e = t->epi;
    if (e->bias)
        r = _mm512_add_ps(r, e->row_bias ? _mm512_set1_ps(e->bias[t->i0 + i])
                                         : _mm512_maskz_loadu_ps(k, e->bias + t->j0 + jo));
    if (e->res)
        r = _mm512_add_ps(r, _mm512_maskz_loadu_ps(k, e->res + (t->i0 + i) * e->ldr + t->j0 + jo));
    return kiln_v_act(&e->act, r);
}

/* Stores an accumulated tile (c0: columns 0-15, c1: 16-31, cx: the extra column of W_17 / W_1)
 * with alpha, beta and the epilogue (see tile_args). */
T512 __attribute__((always_inline)) static inline void store512(const __m512 *c0, const __m512 *c1, __m256 cx, float *c,
                                                                int64_t ldc, int m, int n, const tile_args *t,
                                                                const int variant)
{
    const float alpha = t->alpha, beta = t->beta;
    if (variant != W_1) {
        __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
        int n0 = variant == W_17 ? 16 : n;   /* columns held in c0 */
        __mmask16 k0 = kiln_v_mask16(n0);
        __mmask16 k1 = kiln_v_mask16(n - 16);
#pragma GCC unroll 8
        for (int i = 0; i < MR_512; i++) {
            if (i >= m)
                break;
            float *cr = c + i * ldc;
            __m512 r0 = _mm512_mul_ps(c0[i], va);
            if (beta != 0.0f)
                r0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(k0, cr), vb, r0);
            if (t->epi)
                r0 = epi512(t, r0, i, 0, k0);
            _mm512_mask_storeu_ps(cr, k0, r0);
            if (variant == W_FULL && k1) {
                __m512 r1 = _mm512_mul_ps(c1[i], va);
                if (beta != 0.0f)
                    r1 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(k1, cr + 16), vb, r1);
                if (t->epi)
                    r1 = epi512(t, r1, i, 16, k1);
                _mm512_mask_storeu_ps(cr + 16, k1, r1);
            }
        }
    }
    if (variant == W_17 || variant == W_1) {
        float x[8] __attribute__((aligned(32)));
        _mm256_store_ps(x, cx);
        int col = variant == W_17 ? 16 : 0;
        for (int i = 0; i < m; i++) {
            float *cp = c + i * ldc + col;
            float v = beta == 0.0f ? alpha * x[i] : alpha * x[i] + beta * *cp;
            *cp = t->epi ? epi_scalar(t->epi, v, t->i0 + i, t->j0 + col) : v;
        }
    }
}

/* direct: all 8 A rows read in place (a + i*lda, m == 8); else packed. Direct mode has only
 * the W_FULL and W_16 variants (an extra column needs the 8 A values of one k side by side).
 * Direct rows are addressed from two moving pointers (rows 0-3 and 4-7) with lda / 2 lda /
 * 3 lda offsets, so the loop needs few general registers and nothing spills. */
T512 __attribute__((always_inline)) static inline void ukr512_body(int64_t kc, const float *a, int64_t lda,
                                                                   const float *pb, float *c, int64_t ldc, int m,
                                                                   int n, const tile_args *t, const int variant,
                                                                   const bool direct)
{
    __m512 c0[MR_512], c1[MR_512];
    __m256 cx = _mm256_setzero_ps();   /* extra column (W_17: column 16, W_1: column 0), 8 rows */
#pragma GCC unroll 8
    for (int i = 0; i < MR_512; i++)
        c0[i] = c1[i] = _mm512_setzero_ps();
    prefetch_tile_out(c, ldc, m, n, t);
    const int64_t l1 = direct ? lda : 1, l2 = 2 * l1, l3 = 3 * l1, as = direct ? 1 : MR_512;
    const float *q0 = a, *q4 = a + 4 * l1;
#define A_PTR(i) ((i) < 4 ? q0 + ((i) == 0 ? 0 : (i) == 1 ? l1 : (i) == 2 ? l2 : l3) \
                          : q4 + ((i) == 4 ? 0 : (i) == 5 ? l1 : (i) == 6 ? l2 : l3))
#define A_AT(i) (*A_PTR(i))
#define STEP_FULL()                                                                                      \
    do {                                                                                                 \
        __m512 b0 = _mm512_loadu_ps(pb), b1 = _mm512_loadu_ps(pb + 16);                                 \
        _Pragma("GCC unroll 8") for (int i = 0; i < MR_512; i++)                                         \
        {                                                                                                \
            __m512 av = _mm512_set1_ps(A_AT(i));                                                         \
            c0[i] = _mm512_fmadd_ps(av, b0, c0[i]);                                                      \
            c1[i] = _mm512_fmadd_ps(av, b1, c1[i]);                                                      \
        }                                                                                                \
        q0 += as;                                                                                        \
        q4 += as;                                                                                        \
        pb += NR_512;                                                                                    \
    } while (0)
    if (variant == W_FULL) {
        int64_t k = 0;
        const float *pf = direct ? t->pf_a : NULL;
        if (pf) {
            /* one cache line of each of the next tile's 8 rows every 16 steps */
            for (; k + 16 <= kc; k += 16) {
#pragma GCC unroll 8
                for (int i = 0; i < MR_512; i++)
                    _mm_prefetch((const char *)(pf + i * lda + k), _MM_HINT_T0);
#pragma GCC unroll 4
                for (int u = 0; u < 16; u++)
                    STEP_FULL();
            }
        }
#pragma GCC unroll 4
        for (; k < kc; k++)
            STEP_FULL();
    } else if (variant == W_17 && direct) {
        /* columns 0-15 as W_16; column 16 as 8 dot products along k of the A rows (contiguous)
         * with the panel's column 16 (t->colv), reduced at the end */
        __m512 dx[MR_512];
#pragma GCC unroll 8
        for (int i = 0; i < MR_512; i++)
            dx[i] = _mm512_setzero_ps();
        const float *cv = t->colv;
        for (int64_t k0 = 0; k0 < kc; k0 += 16) {
            int r = kc - k0 < 16 ? (int)(kc - k0) : 16;
            __mmask16 km = kiln_v_mask16(r);
            __m512 vc = _mm512_maskz_loadu_ps(km, cv + k0);
#pragma GCC unroll 8
            for (int i = 0; i < MR_512; i++)
                dx[i] = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(km, A_PTR(i)), vc, dx[i]);
            for (int u = 0; u < r; u++) {
                __m512 b0 = _mm512_loadu_ps(pb);
#pragma GCC unroll 8
                for (int i = 0; i < MR_512; i++)
                    c0[i] = _mm512_fmadd_ps(_mm512_set1_ps(A_AT(i)), b0, c0[i]);
                q0 += as;
                q4 += as;
                pb += NR_512;
            }
        }
        float xs[MR_512] __attribute__((aligned(32)));
#pragma GCC unroll 8
        for (int i = 0; i < MR_512; i++)
            xs[i] = _mm512_reduce_add_ps(dx[i]);
        cx = _mm256_load_ps(xs);
    } else if (variant == W_17 || variant == W_16) {
#pragma GCC unroll 4
        for (int64_t k = 0; k < kc; k++) {
            __m512 b0 = _mm512_loadu_ps(pb + k * NR_512);
#pragma GCC unroll 8
            for (int i = 0; i < MR_512; i++)
                c0[i] = _mm512_fmadd_ps(_mm512_set1_ps(A_AT(i)), b0, c0[i]);
            q0 += as;
            q4 += as;
            if (variant == W_17)
                cx = _mm256_fmadd_ps(_mm256_load_ps(a + k * MR_512), _mm256_set1_ps(pb[k * NR_512 + 16]), cx);
        }
    } else {
        /* one column: four independent chains hide the FMA latency */
        const float *pa = a;
        __m256 cy[4] = {cx, cx, cx, cx};
        int64_t k = 0;
        for (; k + 4 <= kc; k += 4) {
#pragma GCC unroll 4
            for (int u = 0; u < 4; u++)
                cy[u] = _mm256_fmadd_ps(_mm256_load_ps(pa + u * MR_512), _mm256_set1_ps(pb[u * NR_512]), cy[u]);
            pa += 4 * MR_512;
            pb += 4 * NR_512;
        }
        for (; k < kc; k++) {
            cy[0] = _mm256_fmadd_ps(_mm256_load_ps(pa), _mm256_set1_ps(pb[0]), cy[0]);
            pa += MR_512;
            pb += NR_512;
        }
        cx = _mm256_add_ps(_mm256_add_ps(cy[0], cy[1]), _mm256_add_ps(cy[2], cy[3]));
    }
#undef A_AT
#undef A_PTR
#undef STEP_FULL

    store512(c0, c1, cx, c, ldc, m, n, t, variant);
}

/* Transposes up to 8 lines (src + i*si, i < nrows) x up to 16 consecutive k (kt <= 16) into
 * out[q] = {k = 2q: lines 0..7, k = 2q+1: lines 0..7}; missing lines / k read as zero. */
__attribute__((target("avx512f,fma"), always_inline)) static inline void tr8x16(const float *src, int64_t si,
                                                                                int nrows, int kt, __m512 out[8])
{
    __mmask16 km = kiln_v_mask16(kt);
    __m512 r[8], t[8], u[8], p[4], q[4];
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++)
        r[i] = i < nrows ? _mm512_maskz_loadu_ps(km, src + i * si) : _mm512_setzero_ps();
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) {
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    /* u[c], 128-bit lane L: k = 4L+c of lines 0..3; u[4+c]: the same for lines 4..7 */
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++) {
        u[4 * h + 0] = _mm512_shuffle_ps(t[4 * h], t[4 * h + 2], 0x44);
        u[4 * h + 1] = _mm512_shuffle_ps(t[4 * h], t[4 * h + 2], 0xEE);
        u[4 * h + 2] = _mm512_shuffle_ps(t[4 * h + 1], t[4 * h + 3], 0x44);
        u[4 * h + 3] = _mm512_shuffle_ps(t[4 * h + 1], t[4 * h + 3], 0xEE);
    }
#pragma GCC unroll 4
    for (int c = 0; c < 4; c++) {
        p[c] = _mm512_shuffle_f32x4(u[c], u[4 + c], 0x44);
        q[c] = _mm512_shuffle_f32x4(u[c], u[4 + c], 0xEE);
    }
#pragma GCC unroll 2
    for (int c = 0; c < 4; c += 2) {
        out[0 + c / 2] = _mm512_shuffle_f32x4(p[c], p[c + 1], 0x88);
        out[2 + c / 2] = _mm512_shuffle_f32x4(p[c], p[c + 1], 0xDD);
        out[4 + c / 2] = _mm512_shuffle_f32x4(q[c], q[c + 1], 0x88);
        out[6 + c / 2] = _mm512_shuffle_f32x4(q[c], q[c + 1], 0xDD);
    }
}

/* A panels, width 8 */
__attribute__((target("avx512f,fma"))) static void pack_avx512_a(const float *src, int64_t si, int64_t sk,
                                                                  int64_t n, int64_t kc, float *dst)
{
    if (sk == 1) {
        /* rows of op(A) contiguous along k (A not transposed): 8 x 16 transposes */
        for (int64_t p = 0; p < n; p += 8, dst += kc * 8) {
            int nw = (int)min64(8, n - p);
            const float *s = src + p * si;
            for (int64_t k = 0; k < kc; k += 16) {
                int kt = (int)min64(16, kc - k);
                __m512 o[8];
                tr8x16(s + k, si, nw, kt, o);
                float *d = dst + k * 8;
                int nv = kt / 2;
#pragma GCC unroll 8
                for (int v = 0; v < 8; v++)
                    if (v < nv)
                        _mm512_storeu_ps(d + 16 * v, o[v]);
                if (kt & 1)
                    _mm512_mask_storeu_ps(d + 16 * nv, 0x00FF, o[nv & 7]);
            }
        }
    } else if (si == 1) {
        /* columns of op(A) contiguous (A transposed): copy 8 floats per k */
        for (int64_t p = 0; p < n; p += 8, dst += kc * 8) {
            int nw = (int)min64(8, n - p);
            __mmask16 m = kiln_v_mask16(nw);
            const float *s = src + p;
            int64_t k = 0;
            for (; k + 2 <= kc; k += 2) {
                __m512 v = _mm512_maskz_loadu_ps(m, s + k * sk);
                __m512 w = _mm512_maskz_loadu_ps(m, s + (k + 1) * sk);
                _mm512_storeu_ps(dst + k * 8, _mm512_shuffle_f32x4(v, w, 0x44));
            }
            if (k < kc)
                _mm512_mask_storeu_ps(dst + k * 8, 0x00FF, _mm512_maskz_loadu_ps(m, s + k * sk));
        }
    } else {
        pack_generic(src, si, sk, n, kc, dst, MR_512);
    }
}

/* B panels, width 32 */
__attribute__((target("avx512f,fma"))) static void pack_avx512_b(const float *src, int64_t si, int64_t sk,
                                                                  int64_t n, int64_t kc, float *dst)
{
    if (si == 1) {
        /* rows of op(B) contiguous (B not transposed): read row by row, so the source streams
         * sequentially (a weight matrix usually comes from memory, not cache) */
        int64_t full = n / 32, nw = n - full * 32;
        __mmask16 m0 = kiln_v_mask16(nw);
        __mmask16 m1 = kiln_v_mask16(nw - 16);
        enum { PF_ROWS = 16 };   /* rows prefetched ahead, into L2 */
        for (int64_t k = 0; k < kc; k++) {
            const float *s = src + k * sk;
            float *d = dst + k * 32;
            if (k + PF_ROWS < kc)
                for (int64_t j = 0; j < n; j += 16)
                    _mm_prefetch((const char *)(src + (k + PF_ROWS) * sk + j), _MM_HINT_T1);
            for (int64_t p = 0; p < full; p++, s += 32, d += kc * 32) {
                _mm512_store_ps(d, _mm512_loadu_ps(s));
                _mm512_store_ps(d + 16, _mm512_loadu_ps(s + 16));
            }
            if (nw) {
                _mm512_store_ps(d, _mm512_maskz_loadu_ps(m0, s));
                _mm512_store_ps(d + 16, _mm512_maskz_loadu_ps(m1, s + 16));
            }
        }
    } else if (sk == 1) {
        /* columns of op(B) contiguous along k (B transposed): 8 x 16 transposes */
        for (int64_t p = 0; p < n; p += 32, dst += kc * 32) {
            int nw = (int)min64(32, n - p);
            for (int g = 0; g < 4; g++) {
                int rows = nw - 8 * g;
                rows = rows < 0 ? 0 : rows > 8 ? 8 : rows;
                const float *s = rows ? src + (p + 8 * g) * si : src;
                for (int64_t k = 0; k < kc; k += 16) {
                    int kt = (int)min64(16, kc - k);
                    __m512 o[8];
                    tr8x16(s + (rows ? k : 0), si, rows, kt, o);
                    float *d = dst + k * 32 + 8 * g;
#pragma GCC unroll 8
                    for (int v = 0; v < 8; v++) {
                        if (2 * v < kt)
                            _mm512_mask_storeu_ps(d + 2 * v * 32, 0x00FF, o[v]);
                        if (2 * v + 1 < kt)   /* upper 8 lanes land at d + (2v+1)*32 */
                            _mm512_mask_storeu_ps(d + (2 * v + 1) * 32 - 8, 0xFF00, o[v]);
                    }
                }
            }
        }
    } else {
        pack_generic(src, si, sk, n, kc, dst, NR_512);
    }
}

/* Row sums of four vectors: {sum(a0), sum(a1), sum(a2), sum(a3)}. */
T512 __attribute__((always_inline)) static inline __m128 hsum4(__m512 a0, __m512 a1, __m512 a2, __m512 a3)
{
    __m256 s0 = _mm256_add_ps(_mm512_castps512_ps256(a0), _mm512_extractf32x8_ps(a0, 1));
    __m256 s1 = _mm256_add_ps(_mm512_castps512_ps256(a1), _mm512_extractf32x8_ps(a1, 1));
    __m256 s2 = _mm256_add_ps(_mm512_castps512_ps256(a2), _mm512_extractf32x8_ps(a2, 1));
    __m256 s3 = _mm256_add_ps(_mm512_castps512_ps256(a3), _mm512_extractf32x8_ps(a3, 1));
    __m256 h = _mm256_hadd_ps(_mm256_hadd_ps(s0, s1), _mm256_hadd_ps(s2, s3));
    return _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
}

/* A narrow last panel (n <= DOT_COLS columns) with all 8 A rows read in place: each element of the tile is a dot
 * product along k of an A row (contiguous) with a B column (t->colv: DOT_COLS columns of kc floats, zero past n),
 * 16 k per FMA, four rows at a time (16 accumulators), reduced at the end. A 14x14 map's last 4 columns (N = 196)
 * cost 32 FMAs per 16 k instead of the 16-column tile's 128. */
T512 static void ukr512_dot(int64_t kc, const float *a, int64_t lda, float *c, int64_t ldc, int n, const tile_args *t)
{
    const float *cv = t->colv;
    __m128 sums[MR_512];
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++) {
        const float *ar = a + 4 * h * lda;
        __m512 acc[4][DOT_COLS];
#pragma GCC unroll 4
        for (int r = 0; r < 4; r++)
#pragma GCC unroll 4
            for (int q = 0; q < DOT_COLS; q++)
                acc[r][q] = _mm512_setzero_ps();
        for (int64_t k0 = 0; k0 < kc; k0 += 16) {
            __mmask16 km = kiln_v_mask16(kc - k0);
            __m512 bv[DOT_COLS];
#pragma GCC unroll 4
            for (int q = 0; q < DOT_COLS; q++)
                bv[q] = _mm512_maskz_loadu_ps(km, cv + q * kc + k0);
#pragma GCC unroll 4
            for (int r = 0; r < 4; r++) {
                __m512 av = _mm512_maskz_loadu_ps(km, ar + r * lda + k0);
#pragma GCC unroll 4
                for (int q = 0; q < DOT_COLS; q++)
                    acc[r][q] = _mm512_fmadd_ps(av, bv[q], acc[r][q]);
            }
        }
#pragma GCC unroll 4
        for (int r = 0; r < 4; r++)
            sums[4 * h + r] = hsum4(acc[r][0], acc[r][1], acc[r][2], acc[r][3]);
    }
    const __mmask16 kn = kiln_v_mask16(n);
    const __m512 va = _mm512_set1_ps(t->alpha), vb = _mm512_set1_ps(t->beta);
#pragma GCC unroll 8
    for (int i = 0; i < MR_512; i++) {
        float *cr = c + i * ldc;
        __m512 r0 = _mm512_mul_ps(_mm512_zextps128_ps512(sums[i]), va);
        if (t->beta != 0.0f)
            r0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(kn, cr), vb, r0);
        if (t->epi)
            r0 = epi512(t, r0, i, 0, kn);
        _mm512_mask_storeu_ps(cr, kn, r0);
    }
}

/* The 49-column tile (W49_COLS: a 7x7 map's N = 49, panels of 32 + 17 columns), all 8 A rows read in place, packed B:
 * columns 0-31 from the panel pb, 32-47 from the next panel t->pbn, 24 accumulators (each A value loaded feeds 3
 * FMAs, where the 32- and 17-column tiles feed 2 and 1 and read the A rows twice); column 48 (t->colv, contiguous)
 * as 8 dot products along k of the A rows, after the k loop (the rows are in L1 then). */
T512 static void ukr512_w49(int64_t kc, const float *a, int64_t lda, const float *pb, float *c, int64_t ldc,
                            const tile_args *t)
{
    __m512 c0[MR_512], c1[MR_512], c2[MR_512];
#pragma GCC unroll 8
    for (int i = 0; i < MR_512; i++)
        c0[i] = c1[i] = c2[i] = _mm512_setzero_ps();
    tile_args t2 = *t;   /* columns 32-48 */
    t2.j0 = t->j0 + 32;
    prefetch_tile_out(c, ldc, MR_512, 32, t);
    prefetch_tile_out(c + 32, ldc, MR_512, 17, &t2);
    const float *pn = t->pbn;
    const int64_t l1 = lda, l2 = 2 * lda, l3 = 3 * lda;
    const float *q0 = a, *q4 = a + 4 * lda;
#define A_AT(i) (((i) < 4 ? q0 : q4)[(i) % 4 == 0 ? 0 : (i) % 4 == 1 ? l1 : (i) % 4 == 2 ? l2 : l3])
#define STEP_49()                                                                                        \
    do {                                                                                                 \
        __m512 b0 = _mm512_loadu_ps(pb), b1 = _mm512_loadu_ps(pb + 16), b2 = _mm512_loadu_ps(pn);      \
        _Pragma("GCC unroll 8") for (int i = 0; i < MR_512; i++)                                         \
        {                                                                                                \
            __m512 av = _mm512_set1_ps(A_AT(i));                                                         \
            c0[i] = _mm512_fmadd_ps(av, b0, c0[i]);                                                      \
            c1[i] = _mm512_fmadd_ps(av, b1, c1[i]);                                                      \
            c2[i] = _mm512_fmadd_ps(av, b2, c2[i]);                                                      \
        }                                                                                                \
        q0++;                                                                                            \
        q4++;                                                                                            \
        pb += NR_512;                                                                                    \
        pn += NR_512;                                                                                    \
    } while (0)
    int64_t k = 0;
    const float *pf = t->pf_a;
    if (pf) {
        /* one cache line of each of the next tile's 8 rows every 16 steps */
        for (; k + 16 <= kc; k += 16) {
#pragma GCC unroll 8
            for (int i = 0; i < MR_512; i++)
                _mm_prefetch((const char *)(pf + i * lda + k), _MM_HINT_T0);
#pragma GCC unroll 4
            for (int u = 0; u < 16; u++)
                STEP_49();
        }
    }
#pragma GCC unroll 4
    for (; k < kc; k++)
        STEP_49();
#undef STEP_49
#undef A_AT
    /* column 48: 8 dot products, 16 k per FMA */
    __m512 dx[MR_512];
#pragma GCC unroll 8
    for (int i = 0; i < MR_512; i++)
        dx[i] = _mm512_setzero_ps();
    const float *cv = t->colv;
    for (int64_t k0 = 0; k0 < kc; k0 += 16) {
        __mmask16 km = kiln_v_mask16(kc - k0 < 16 ? (int)(kc - k0) : 16);
        __m512 vc = _mm512_maskz_loadu_ps(km, cv + k0);
#pragma GCC unroll 8
        for (int i = 0; i < MR_512; i++)
            dx[i] = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(km, a + i * lda + k0), vc, dx[i]);
    }
    float xs[MR_512] __attribute__((aligned(32)));
#pragma GCC unroll 8
    for (int i = 0; i < MR_512; i++)
        xs[i] = _mm512_reduce_add_ps(dx[i]);
    store512(c0, c1, _mm256_setzero_ps(), c, ldc, MR_512, 32, t, W_FULL);
    store512(c2, c1, _mm256_load_ps(xs), c + 32, ldc, MR_512, 17, &t2, W_17);
}

T512 static void ukr_avx512(int64_t kc, const float *a, int64_t lda, const float *pb, float *c, int64_t ldc, int m,
                            int n, const tile_args *t)
{
    if (n == W49_COLS) {
        if (lda && m == MR_512) {
            ukr512_w49(kc, a, lda, pb, c, ldc, t);
        } else {
            /* as the two tiles it replaces: 32 columns of pb, 17 of the next panel */
            tile_args t2 = *t;
            t2.j0 = t->j0 + 32;
            ukr_avx512(kc, a, lda, pb, c, ldc, m, 32, t);
            ukr_avx512(kc, a, lda, t->pbn, c + 32, ldc, m, 17, &t2);
        }
        return;
    }
    if (lda && m < MR_512) {
        /* edge rows: pack them (zero padded) and take the packed variants, KC_EDGE steps at a time */
        enum { KC_EDGE = 256 };
        float pk[MR_512 * KC_EDGE] __attribute__((aligned(64)));
        tile_args ts = *t;
        for (int64_t k0 = 0; k0 < kc; k0 += KC_EDGE) {
            int64_t ks = min64(KC_EDGE, kc - k0);
            ts.beta = k0 == 0 ? t->beta : 1.0f;
            ts.epi = k0 + ks >= kc ? t->epi : NULL;
            pack_avx512_a(a + k0, lda, 1, m, ks, pk);
            ukr_avx512(ks, pk, 0, pb + k0 * NR_512, c, ldc, m, n, &ts);
        }
        return;
    }
    if (lda) {
        if (n <= DOT_COLS && t->colv)
            ukr512_dot(kc, a, lda, c, ldc, n, t);
        else if (n == 17 && t->colv)
            ukr512_body(kc, a, lda, pb, c, ldc, m, n, t, W_17, true);
        else if (n > 16)
            ukr512_body(kc, a, lda, pb, c, ldc, m, n, t, W_FULL, true);
        else
            ukr512_body(kc, a, lda, pb, c, ldc, m, n, t, W_16, true);
    } else if (n > 17) {
        ukr512_body(kc, a, 0, pb, c, ldc, m, n, t, W_FULL, false);
    } else if (n == 17) {
        ukr512_body(kc, a, 0, pb, c, ldc, m, n, t, W_17, false);
    } else if (n > 1) {
        ukr512_body(kc, a, 0, pb, c, ldc, m, n, t, W_16, false);
    } else {
        ukr512_body(kc, a, 0, pb, c, ldc, m, n, t, W_1, false);
    }
}

/* The tall direct-A tile: 12 rows x up to 32 columns (more than 17), A read in place. 24
 * accumulators: each B vector loaded feeds 12 FMAs instead of 8, so a B panel slice that streams
 * from L2 (or memory) is read 1.5x less often per flop. Rows 0-3 / 4-7 / 8-11 are addressed from
 * three moving pointers. */
#define MR_TALL 12
T512 static void ukr512_tall(int64_t kc, const float *a, int64_t lda, const float *pb, float *c, int64_t ldc, int m,
                             int n, const tile_args *t)
{
    (void)m;   /* always MR_TALL */
    __m512 c0[MR_TALL], c1[MR_TALL];
#pragma GCC unroll 12
    for (int i = 0; i < MR_TALL; i++)
        c0[i] = c1[i] = _mm512_setzero_ps();
    prefetch_tile_out(c, ldc, MR_TALL, n, t);
    const int64_t l1 = lda, l2 = 2 * lda, l3 = 3 * lda;
    const float *q0 = a, *q4 = a + 4 * lda, *q8 = a + 8 * lda;
#define A_AT(i) (((i) < 4 ? q0 : (i) < 8 ? q4 : q8)[(i) % 4 == 0 ? 0 : (i) % 4 == 1 ? l1 : (i) % 4 == 2 ? l2 : l3])
#define STEP_TALL()                                                                                      \
    do {                                                                                                 \
        __m512 b0 = _mm512_load_ps(pb), b1 = _mm512_load_ps(pb + 16);                                   \
        _Pragma("GCC unroll 12") for (int i = 0; i < MR_TALL; i++)                                       \
        {                                                                                                \
            __m512 av = _mm512_set1_ps(A_AT(i));                                                         \
            c0[i] = _mm512_fmadd_ps(av, b0, c0[i]);                                                      \
            c1[i] = _mm512_fmadd_ps(av, b1, c1[i]);                                                      \
        }                                                                                                \
        q0++;                                                                                            \
        q4++;                                                                                            \
        q8++;                                                                                            \
        pb += NR_512;                                                                                    \
    } while (0)
    int64_t k = 0;
    /* A lines prefetched into L1, one of each row every 16 steps: with kc <= 256 (B's panel slice stays in L1) the
     * next tile's rows at the same k (t->pf_a); with longer slices this tile's own rows TALL_PF_A floats (4 lines)
     * ahead of the k loop instead: with K = 768 in one slice each tile streams its 96 KB B panel slice through L1
     * (48 KB), which evicted the next tile's lines prefetched at the same k long before that tile read them, so every
     * row's lines came from L2 as the loop reached them. BERT-base's FusedMatMul layers (bench/env_ab, 100 pairs,
     * 2 threads): 0.974 median (67/100 pairs faster); 32 or 128 floats ahead 0.97 too. */
    enum { TALL_PF_A = 64 };
    const bool own = kc > 256;
    const float *pf = own ? a + TALL_PF_A : t->pf_a;
    const int pf_rows = own ? MR_TALL : t->pf_rows;
    const char *pfb = t->pf_b;
    int nbl = pfb ? t->pf_b_lines : 0;
    /* the next B panel's lines (from memory: MatMul weights), a few every 16 steps rather than all before the
     * tile: BERT-base's K = 768 GEMMs with the weights from DRAM 0.98 (bench_gemm_f32, 12 layers, 2 threads) */
    const int bper = kc >= 16 ? (int)((nbl + kc / 16 - 1) / (kc / 16)) : 0;
    if (pf || nbl) {
        for (; k + 16 <= kc; k += 16) {
            if (pf)
                for (int i = 0; i < pf_rows; i++)
                    _mm_prefetch((const char *)(pf + i * lda + k), _MM_HINT_T0);
            for (int l = 0; l < bper && nbl > 0; l++, nbl--, pfb += 64)
                _mm_prefetch(pfb, _MM_HINT_T1);
#pragma GCC unroll 2
            for (int u = 0; u < 16; u++)
                STEP_TALL();
        }
    }
    for (; nbl > 0; nbl--, pfb += 64)
        _mm_prefetch(pfb, _MM_HINT_T1);
#pragma GCC unroll 2
    for (; k < kc; k++)
        STEP_TALL();
#undef STEP_TALL
#undef A_AT
    tile_args t8 = *t;
    store512(c0, c1, _mm256_setzero_ps(), c, ldc, MR_512, n, t, W_FULL);
    t8.i0 = t->i0 + MR_512;
    store512(c0 + MR_512, c1 + MR_512, _mm256_setzero_ps(), c + MR_512 * ldc, ldc, MR_TALL - MR_512, n, &t8, W_FULL);
}

/* Direct convolution tile: like the direct-A W_FULL / W_16 kernel, with B(k, l) = xb[off[k] + l] for pixels l < 16
 * and xb[off[k] + d1 + l - 16] for the others (d1 = 16 within an output row; a flattened tile's second half may start
 * on the next output row: kiln_convd_job.flat).
 * Edge rows (m < 8) are copied into a full 8-row block first (kc <= KC_CONV). */
#define KC_CONV 256
T512 static void ukr512_conv(int64_t kc, const float *a, int64_t lda, const float *xb, int64_t d1, const int64_t *off,
                             float *c, int64_t ldc, int m, int n, const tile_args *t)
{
    float abuf[MR_512 * KC_CONV] __attribute__((aligned(64)));
    if (m < MR_512) {
        for (int i = 0; i < MR_512; i++)
            memcpy(abuf + i * kc, a + (i < m ? i : m - 1) * lda, sizeof(float) * (size_t)kc);
        a = abuf;
        lda = kc;
    }
    __m512 c0[MR_512], c1[MR_512];
#pragma GCC unroll 8
    for (int i = 0; i < MR_512; i++)
        c0[i] = c1[i] = _mm512_setzero_ps();
    prefetch_tile_out(c, ldc, m, n, t);
    const int64_t l1 = lda, l2 = 2 * lda, l3 = 3 * lda;
    const float *q0 = a, *q4 = a + 4 * lda;
#define A_AT(i) ((i) < 4 ? q0[(i) == 0 ? 0 : (i) == 1 ? l1 : (i) == 2 ? l2 : l3] \
                         : q4[(i) == 4 ? 0 : (i) == 5 ? l1 : (i) == 6 ? l2 : l3])
    const float *pf = t->pf_a;
    if (n > 16) {
        int64_t k = 0;
        for (;;) {
            int64_t ke = k + 16 < kc ? k + 16 : kc;
            if (pf && ke - k == 16)
#pragma GCC unroll 8
                for (int i = 0; i < MR_512; i++)
                    _mm_prefetch((const char *)(pf + i * lda + k), _MM_HINT_T0);
#pragma GCC unroll 4
            for (; k < ke; k++) {
                const float *src = xb + off[k];
                __m512 b0 = _mm512_loadu_ps(src), b1 = _mm512_loadu_ps(src + d1);
#pragma GCC unroll 8
                for (int i = 0; i < MR_512; i++) {
                    __m512 av = _mm512_set1_ps(A_AT(i));
                    c0[i] = _mm512_fmadd_ps(av, b0, c0[i]);
                    c1[i] = _mm512_fmadd_ps(av, b1, c1[i]);
                }
                q0++;
                q4++;
            }
            if (k >= kc)
                break;
        }
        store512(c0, c1, _mm256_setzero_ps(), c, ldc, m, n, t, W_FULL);
    } else {
#pragma GCC unroll 4
        for (int64_t k = 0; k < kc; k++) {
            __m512 b0 = _mm512_loadu_ps(xb + off[k]);
#pragma GCC unroll 8
            for (int i = 0; i < MR_512; i++)
                c0[i] = _mm512_fmadd_ps(_mm512_set1_ps(A_AT(i)), b0, c0[i]);
            q0++;
            q4++;
        }
        store512(c0, c1, _mm256_setzero_ps(), c, ldc, m, n, t, W_16);
    }
#undef A_AT
}

/* One row of C (M == 1) against pre-packed B panels [p0, p1) (a classifier's last Gemm: the weights
 * stream from memory once, 2 FMAs per 128 bytes): c[j] = epi(alpha * sum_k a[k*as] B(k, j) + beta * c[j]).
 * Four accumulator pairs along k hide the FMA latency. t: alpha, beta, epilogue (i0 = 0). */
T512 void kiln__gemm_row512(int64_t K, const float *a, int64_t as, const float *bpack, int64_t p0, int64_t p1, int64_t N,
                        float *c, const tile_args *t)
{
    for (int64_t p = p0; p < p1; p++) {
        const float *pb = bpack + p * K * NR_512;
        __m512 s0[4], s1[4];
#pragma GCC unroll 4
        for (int u = 0; u < 4; u++)
            s0[u] = s1[u] = _mm512_setzero_ps();
        int64_t k = 0;
        for (; k + 4 <= K; k += 4, pb += 4 * NR_512) {
#pragma GCC unroll 4
            for (int u = 0; u < 4; u++) {
                __m512 av = _mm512_set1_ps(a[(k + u) * as]);
                s0[u] = _mm512_fmadd_ps(av, _mm512_load_ps(pb + u * NR_512), s0[u]);
                s1[u] = _mm512_fmadd_ps(av, _mm512_load_ps(pb + u * NR_512 + 16), s1[u]);
            }
        }
        for (; k < K; k++, pb += NR_512) {
            __m512 av = _mm512_set1_ps(a[k * as]);
            s0[0] = _mm512_fmadd_ps(av, _mm512_load_ps(pb), s0[0]);
            s1[0] = _mm512_fmadd_ps(av, _mm512_load_ps(pb + 16), s1[0]);
        }
        __m512 c0 = _mm512_add_ps(_mm512_add_ps(s0[0], s0[1]), _mm512_add_ps(s0[2], s0[3]));
        __m512 c1 = _mm512_add_ps(_mm512_add_ps(s1[0], s1[1]), _mm512_add_ps(s1[2], s1[3]));
        tile_args tp = *t;
        tp.j0 = p * NR_512;
        store512(&c0, &c1, _mm256_setzero_ps(), c + tp.j0, 0, 1, (int)min64(NR_512, N - tp.j0), &tp, W_FULL);
    }
}


/* kiln__conv_direct_drive's task over tiles [t0, t1). Tiles of one output row run row tile by row tile across the
 * row when the row has at most CONVD_ROW_TILES of them (the stem: 112 pixels, K = 147): each A row tile (8 rows x
 * kc, from L2) is then read once per output row from L1 rather than once per tile, while the row's image rows stay
 * in L1 for every row tile. ResNet-50's stem (bench/env_ab, 300 pairs, 2 threads): stem + MaxPool 0.982 (222/300).
 * The same sums in the same order: each C element still takes its K slices in order. Wider rows (more image per
 * row than L1 holds) run tile by tile, every row tile of a tile against its B in L1. Flattened tiles
 * (kiln_convd_job.flat: rows of 32 q + 16 pixels) run in groups of CONVD_FLAT_GROUP consecutive tiles alike: the stem's
 * 392 tiles in groups of 16 (512 pixels) rather than 4, stem + MaxPool (bench/env_ab, 300 pairs, 2 threads, both orders
 * twice): 16 as B 0.989 / 0.991 median (195 / 179 pairs below 1), 4 as B 1.014 / 1.016 (110 / 112); 8 0.991, 32 0.986,
 * 7 0.996, 2 1.009. */
#define CONVD_ROW_TILES 4
#define CONVD_FLAT_GROUP 16
T512 void kiln__gemm_convd_task(void *ctx, int64_t t0, int64_t t1)
{
    const kiln_convd_job *j = ctx;
    const kiln_convd *d = j->d;
    const int64_t M = d->M, K = d->K;
    int64_t kb = ceil_div(K, KC_CONV), kcs = ceil_div(K, kb);
    const int64_t group = j->tw <= CONVD_ROW_TILES ? j->tw : 1, npix = d->Ho * d->Wo;
    for (int64_t tile = t0; tile < t1;) {
        /* tiles [tile, te): one tile, or the rest of this output row within the task (flat: of its group of
         * CONVD_ROW_TILES consecutive tiles) */
        int64_t oy = tile / j->tw, te = j->flat    ? min64(t1, (tile / CONVD_FLAT_GROUP + 1) * CONVD_FLAT_GROUP)
                                        : group > 1 ? min64(t1, (oy + 1) * j->tw)
                                                    : tile + 1;
        for (int64_t pc = 0; pc < K; pc += kcs) {
            int64_t kc = min64(kcs, K - pc);
            tile_args t = {.alpha = 1.0f, .beta = pc == 0 ? 0.0f : 1.0f, .epi = pc + kc >= K ? d->epi : NULL};
            for (int64_t ir = 0; ir < M; ir += MR_512) {
                int m = (int)min64(MR_512, M - ir);
                const float *a = d->A + ir * d->lda + pc;
                t.i0 = ir;
                for (int64_t tt = tile; tt < te; tt++) {
                    int64_t col, n;
                    const float *xb;
                    int64_t d1 = 16;
                    if (j->flat) {   /* pixels [col, col + n) of the flattened output, halves from their rows */
                        col = tt * 32;
                        n = min64(32, npix - col);
                        int64_t p1 = col + 16;
                        xb = d->xp + col / d->Wo * d->row_stride + col % d->Wo;
                        if (n > 16)
                            d1 = d->xp + p1 / d->Wo * d->row_stride + p1 % d->Wo - xb;
                    } else {
                        int64_t ox0 = (tt % j->tw) * 32;
                        col = oy * d->Wo + ox0;
                        n = min64(32, d->Wo - ox0);
                        xb = d->xp + oy * d->row_stride + ox0;
                    }
                    t.j0 = col;
                    /* the next row tile's A during this one's last tile */
                    t.pf_a = tt + 1 == te && ir + 2 * MR_512 <= M ? a + MR_512 * d->lda : NULL;
                    ukr512_conv(kc, a, d->lda, xb, d1, d->off + pc, d->C + ir * d->ldc + col, d->ldc, m, (int)n, &t);
                }
            }
        }
        tile = te;
    }
}

#ifndef GEMM_MC512
#define GEMM_MC512 192
#endif
#ifndef GEMM_KC512
#define GEMM_KC512 256
#endif
#ifndef GEMM_NC512
#define GEMM_NC512 1024
#endif
const gemm_impl kiln__gemm_impl_avx512 = {MR_512, NR_512, ukr_avx512, pack_avx512_a, pack_avx512_b,
                                      GEMM_MC512, GEMM_KC512, GEMM_NC512, true, MR_TALL, ukr512_tall, false, true};
#endif

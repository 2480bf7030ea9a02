/* AVX2 INT8 GEMM tile (hosts with AVX2 + FMA but no AVX512-VNNI): the contract of
 * kiln__qgemm_tile_vnni (qgemm.h) on the same packed operands, with the exact int32 sums of the
 * portable tile, so every output equals the scalar reference's.
 *
 * vpmaddubsw would add two u8 x s8 products in saturating int16 (255 * 127 * 2 > 32767), so the
 * bytes are widened to int16 instead (with their stored signedness) and multiplied with vpmaddwd,
 * whose int32 pair sums are exact. A panel's k-group (16 columns x 4 k, 64 bytes) is 4 vectors of
 * 4 columns; one widened vector holds 4 columns x 4 k, and vpmaddwd with the row's 4 k (widened
 * once per tile into a16, broadcast as 64 bits) leaves two partial sums per column, added pairwise
 * at the end (vphaddd). Register tile: 4 rows x 2 vectors (8 columns): 8 accumulators, 2 widened
 * B vectors, the broadcast and a product (4 x 3 spills: vpmaddwd needs a temporary). Sums go through an 8-wide twin of the VNNI epilogue (zero-point
 * compensation, bias, scale, kiln_v8_act activation, requantization: the scalar operations). */
#include "../qgemm.h"
#include "../vmath_avx2.h"

#if KILN_VMATH_X86
#define TAVX2 __attribute__((target("avx2,fma")))
#define KC 128    /* k-groups (4 k) of A widened at a time: 8 rows x 512 int16 = 8 KiB */
#define VMAX 12   /* 4-column vectors in a strip of 48 */

/* sums[r][4 v0 .. 4 (v0 + NV)) += rows r < 4 (a16 rows ar[r]) x vectors v0 .. v0 + NV - 1 of the strip,
 * k-groups [0, ng) of the pointers given (bv[v] at k-group 0 of vector v) */
TAVX2 __attribute__((always_inline)) static inline void block4(const int16_t *const *ar, const uint8_t *const *bv,
                                                                int64_t ng, bool b_s8, const int NV, int32_t *sums,
                                                                int ld)
{
    const __m256i z = _mm256_setzero_si256();
    __m256i c00 = z, c01 = z, c10 = z, c11 = z, c20 = z, c21 = z, c30 = z, c31 = z;
    const uint8_t *p0 = bv[0], *p1 = bv[NV > 1 ? 1 : 0];
    const int16_t *a0 = ar[0], *a1 = ar[1], *a2 = ar[2], *a3 = ar[3];
#define WIDEN(p) (b_s8 ? _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(p))) \
                       : _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(p))))
#define AROW(i)                                                                                                 \
    {                                                                                                           \
        int64_t q;                                                                                              \
        memcpy(&q, a##i + gk * 4, 8);                                                                           \
        __m256i a = _mm256_set1_epi64x(q);                                                                      \
        c##i##0 = _mm256_add_epi32(c##i##0, _mm256_madd_epi16(a, b0));                                          \
        if (NV > 1)                                                                                             \
            c##i##1 = _mm256_add_epi32(c##i##1, _mm256_madd_epi16(a, b1));                                      \
    }
    for (int64_t gk = 0; gk < ng; gk++) {
        __m256i b0 = WIDEN(p0 + gk * 64), b1 = z;
        if (NV > 1)
            b1 = WIDEN(p1 + gk * 64);
        AROW(0) AROW(1) AROW(2) AROW(3)
    }
#undef AROW
#undef WIDEN
    /* lane pairs (k 0-1, k 2-3) of a column added: hadd(x, y) = x's columns 0 1, y's 0 1 | x's 2 3, y's 2 3 */
#define RED(i)                                                                                                  \
    {                                                                                                           \
        int32_t *s = sums + i * ld;                                                                             \
        if (NV > 1) {                                                                                           \
            __m256i h = _mm256_permute4x64_epi64(_mm256_hadd_epi32(c##i##0, c##i##1), 0xD8);                   \
            _mm256_storeu_si256((__m256i *)s, _mm256_add_epi32(_mm256_loadu_si256((const __m256i *)s), h));      \
        } else {                                                                                                \
            __m128i h = _mm256_castsi256_si128(_mm256_permute4x64_epi64(_mm256_hadd_epi32(c##i##0, c##i##0), 0xD8)); \
            _mm_storeu_si128((__m128i *)s, _mm_add_epi32(_mm_loadu_si128((const __m128i *)s), h));              \
        }                                                                                                       \
    }
    RED(0) RED(1) RED(2) RED(3)
#undef RED
}

/* the block with NV and B's signedness constants (a branch on it in the loop costs ~10%) */
#define BLOCK_FN(nv, s8)                                                                                         \
    TAVX2 static void block4_##nv##_##s8(const int16_t *const *ar, const uint8_t *const *bv, int64_t ng,        \
                                         int32_t *sums, int ld)                                                  \
    {                                                                                                            \
        block4(ar, bv, ng, s8, nv, sums, ld);                                                                    \
    }
BLOCK_FN(1, 0) BLOCK_FN(2, 0) BLOCK_FN(1, 1) BLOCK_FN(2, 1)
#undef BLOCK_FN

/* bytes [0, n) of src (s8 or u8) widened to int16 */
TAVX2 __attribute__((always_inline)) static inline void widen_row_k(int16_t *dst, const uint8_t *src, int64_t n,
                                                                     const bool s8)
{
    int64_t k = 0;
    for (; k + 16 <= n; k += 16) {
        __m128i b = _mm_loadu_si128((const __m128i *)(src + k));
        _mm256_storeu_si256((__m256i *)(dst + k), s8 ? _mm256_cvtepi8_epi16(b) : _mm256_cvtepu8_epi16(b));
    }
    for (; k < n; k++)
        dst[k] = s8 ? (int16_t)(int8_t)src[k] : (int16_t)src[k];
}

TAVX2 static void widen_row(int16_t *dst, const uint8_t *src, int64_t n, bool s8)
{
    if (s8)
        widen_row_k(dst, src, n, true);
    else
        widen_row_k(dst, src, n, false);
}

/* The epilogue of n <= 48 sums s of row gi, columns j0 .., bsum their column sums (or NULL): the
 * operations of compensate() and kiln__qepi_store in qgemm.c, 8 lanes at a time. */
TAVX2 __attribute__((always_inline)) static inline void epi_row_k(const kiln_qgemm *g, const int32_t *bsum,
                                                                   const int32_t *s, int64_t gi, int64_t j0, int n,
                                                                   kiln_act_kind ak)
{
    const kiln_qepi *e = &g->epi;
    const int32_t za = g->a_zp ? g->a_zp[gi] : g->a_zp0;
    const int32_t r = g->a_sum ? (int32_t)((uint32_t)g->a_sum[gi] - (uint32_t)g->K * (uint32_t)za) : 0;
    const float *sv = e->lin && e->out != KILN_QOUT_F32 ? e->mult : e->scale;
    for (int j = 0; j < n; j += 8) {
        const int cnt = n - j < 8 ? n - j : 8;
        const __m256i km = kiln_v8_mask(cnt);
        const int64_t gj = j0 + j, at = gi * g->ldc + gj;
        __m256i acc = _mm256_loadu_si256((const __m256i *)(s + j));   /* s has 48 entries */
        if (g->a_sum) { /* - zb[n] * (rowsum(A)[m] - K za[m]) */
            __m256i zb = g->b_zp ? _mm256_maskload_epi32(g->b_zp + gj, km) : _mm256_set1_epi32(g->b_zp0);
            acc = _mm256_sub_epi32(acc, _mm256_mullo_epi32(zb, _mm256_set1_epi32(r)));
        }
        if (bsum) /* - za[m] * colsum(B)[n] */
            acc = _mm256_sub_epi32(acc, _mm256_mullo_epi32(_mm256_set1_epi32(za), _mm256_maskload_epi32(bsum + j, km)));
        if (e->bias)
            acc = _mm256_add_epi32(acc, e->ch_row ? _mm256_set1_epi32(e->bias[gi])
                                                  : _mm256_maskload_epi32(e->bias + gj, km));
        if (e->out == KILN_QOUT_S32) {
            _mm256_maskstore_epi32((int32_t *)g->c + at, km, acc);
            continue;
        }
        __m256 v = _mm256_cvtepi32_ps(acc);
        v = _mm256_mul_ps(v, e->ch_row ? _mm256_set1_ps(sv[gi]) : _mm256_maskload_ps(sv + gj, km));
        if (e->out == KILN_QOUT_F32) {
            _mm256_maskstore_ps((float *)g->c + at, km, kiln_v8_act(ak, e->act.alpha, e->act.beta, v));
            continue;
        }
        if (!e->lin)
            v = _mm256_mul_ps(kiln_v8_act(ak, e->act.alpha, e->act.beta, v), _mm256_set1_ps(e->inv_ys));
        v = _mm256_max_ps(v, _mm256_set1_ps((float)(e->lo - e->zp))); /* NaN -> lo, like the scalar code */
        v = _mm256_min_ps(v, _mm256_set1_ps((float)(e->hi - e->zp)));
        __m256i q = _mm256_add_epi32(_mm256_cvtps_epi32(v), _mm256_set1_epi32(e->zp));
        /* the low byte of each lane (the scalar (u)int8_t conversion) */
        const __m256i pick = _mm256_setr_epi8(0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, 0, 4, 8,
                                              12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
        __m256i p = _mm256_shuffle_epi8(q, pick);
        __m128i b8 = _mm_unpacklo_epi32(_mm256_castsi256_si128(p), _mm256_extracti128_si256(p, 1));
        uint8_t *dst = (uint8_t *)g->c + at;
        if (cnt == 8) {
            _mm_storel_epi64((__m128i *)dst, b8);
        } else {
            uint8_t t[16];
            _mm_storeu_si128((__m128i *)t, b8);
            memcpy(dst, t, (size_t)cnt);
        }
    }
}

TAVX2 static void epi_row(const kiln_qgemm *g, const int32_t *bsum, const int32_t *s, int64_t gi, int64_t j0, int n)
{
    switch (g->epi.act.kind) { /* the usual kinds with the activation a constant */
    case KILN_ACT_NONE: epi_row_k(g, bsum, s, gi, j0, n, KILN_ACT_NONE); break;
    case KILN_ACT_RELU: epi_row_k(g, bsum, s, gi, j0, n, KILN_ACT_RELU); break;
    case KILN_ACT_CLIP: epi_row_k(g, bsum, s, gi, j0, n, KILN_ACT_CLIP); break;
    default: epi_row_k(g, bsum, s, gi, j0, n, g->epi.act.kind); break;
    }
}

TAVX2 void kiln__qgemm_tile_avx2(const kiln_qgemm *g, const uint8_t *bs, const int32_t *bsum, int64_t i0, int m,
                                 int64_t j0, int ncols)
{
    int64_t kp = kiln__qgemm_kp(g->K), ng = kp / 4;
    int nvec = (ncols + 3) / 4;   /* vectors of 4 columns; those past ncols lie in a (padded) panel */
    int32_t sums[KILN_QGEMM_MR + 3][KILN_QGEMM_STRIP];   /* rows past m: scratch */
    _Alignas(32) int16_t a16[KILN_QGEMM_MR][KC * 4];
    memset(sums, 0, sizeof sums);
    const uint8_t *bv[VMAX];
    for (int v = 0; v < nvec; v++)
        bv[v] = bs + (v / 4) * kp * KILN_QGEMM_NR + (v % 4) * 16;
    for (int64_t g0 = 0; g0 < ng; g0 += KC) {
        int64_t gn = ng - g0 < KC ? ng - g0 : KC;
        for (int r = 0; r < m; r++)
            widen_row(a16[r], g->a + (i0 + r) * g->lda + g0 * 4, gn * 4, g->a_s8);
        /* a chunk's 8 columns of B stay in L1 for every row group */
        for (int v0 = 0; v0 < nvec; v0 += 2) {
            const uint8_t *b2[2] = {bv[v0] + g0 * 64, v0 + 1 < nvec ? bv[v0 + 1] + g0 * 64 : NULL};
            for (int r0 = 0; r0 < m; r0 += 4) {
                /* rows past m repeat row r0 (their sums land in scratch rows) */
                const int16_t *ar[4];
                for (int r = 0; r < 4; r++)
                    ar[r] = a16[r0 + r < m ? r0 + r : r0];
                int32_t *s = &sums[r0][v0 * 4];
                if (g->a_s8) /* B holds u8 */
                    (b2[1] ? block4_2_0 : block4_1_0)(ar, b2, gn, s, KILN_QGEMM_STRIP);
                else
                    (b2[1] ? block4_2_1 : block4_1_1)(ar, b2, gn, s, KILN_QGEMM_STRIP);
            }
        }
    }
    for (int r = 0; r < m; r++)
        epi_row(g, bsum, sums[r], i0 + r, j0, ncols);
}
#else
void kiln__qgemm_tile_avx2(const kiln_qgemm *g, const uint8_t *bs, const int32_t *bsum, int64_t i0, int m,
                           int64_t j0, int ncols)
{
    (void)g, (void)bs, (void)bsum, (void)i0, (void)m, (void)j0, (void)ncols;
}
#endif

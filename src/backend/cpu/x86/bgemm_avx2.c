/* AVX2 + FMA BF16 GEMM tile (hosts without AVX512-BF16): the contract of kiln__bgemm_tile_bf16
 * (qgemm_bf16.h) on the same packed operands, storing the plain sums (the driver applies the
 * float epilogue after it, as after the portable tile).
 *
 * A BF16 value is the high half of its float32, so widening is a shift or a mask: a panel's
 * k pair of 8 columns (32 bytes, k0 in the low half of each 32-bit lane, k1 in the high half)
 * gives the k0 floats by a 16-bit left shift and the k1 floats by clearing the low halves. The
 * products of BF16 values are exact in float32; they are accumulated with FMA in float32 (the
 * portable tile's operations, sums in another order). The rows of A are widened to float32 once
 * per tile (a32, in chunks of k) and broadcast. Register tile: 4 rows x 3 vectors (24 columns),
 * 12 accumulators. */
#include "../qgemm.h"
#include "../qgemm_bf16.h"

#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#include <immintrin.h>

#define TAVX2 __attribute__((target("avx2,fma")))

/* a float at p broadcast; an asm load, so that the compiler reloads it from L1 for each vector
 * instead of keeping 8 broadcasts live across the three (which spills accumulators) */
TAVX2 __attribute__((always_inline)) static inline __m256 bcast(const float *p)
{
    __m256 r;
    __asm__ volatile("vbroadcastss %1, %0" : "=x"(r) : "m"(*p));
    return r;
}
#define KC2 128   /* k pairs of A widened at a time: 8 rows x 256 floats = 8 KiB */
#define SW 48     /* columns of a strip (KILN_QGEMM_STRIP) */

/* sums[r][8 v0 ..) += rows r < 4 (ar[r], float32, 2 per k pair) x vectors bv[0 .. NV) (8 columns
 * each, at k pair 0), k pairs [0, np) */
TAVX2 __attribute__((always_inline)) static inline void block4(const float *const *ar, const uint16_t *const *bv,
                                                                int64_t np, const int NV, float *sums, int ld)
{
    const __m256 z = _mm256_setzero_ps();
    const __m256i hi = _mm256_set1_epi32((int)0xFFFF0000u);
    __m256 c00 = z, c01 = z, c02 = z, c10 = z, c11 = z, c12 = z, c20 = z, c21 = z, c22 = z, c30 = z, c31 = z,
           c32 = z;
    const uint16_t *p0 = bv[0], *p1 = bv[NV > 1 ? 1 : 0], *p2 = bv[NV > 2 ? 2 : 0];
    const float *a0 = ar[0], *a1 = ar[1], *a2 = ar[2], *a3 = ar[3];
    /* one vector at a time (its k0 floats, then its k1 floats), the broadcasts reloaded from L1: 12
     * accumulators, the loaded pair, its widened half, the mask and a broadcast fit the 16 registers
     * (all three vectors widened at once spill accumulators) */
#define VEC(v)                                                                                                  \
    {                                                                                                           \
        __m256i x = _mm256_loadu_si256((const __m256i *)(p##v + gk * 32));                                    \
        __m256 b = _mm256_castsi256_ps(_mm256_slli_epi32(x, 16));                                               \
        c0##v = _mm256_fmadd_ps(bcast(a0 + 2 * gk), b, c0##v);                                    \
        c1##v = _mm256_fmadd_ps(bcast(a1 + 2 * gk), b, c1##v);                                    \
        c2##v = _mm256_fmadd_ps(bcast(a2 + 2 * gk), b, c2##v);                                    \
        c3##v = _mm256_fmadd_ps(bcast(a3 + 2 * gk), b, c3##v);                                    \
        b = _mm256_castsi256_ps(_mm256_and_si256(x, hi));                                                       \
        c0##v = _mm256_fmadd_ps(bcast(a0 + 2 * gk + 1), b, c0##v);                                \
        c1##v = _mm256_fmadd_ps(bcast(a1 + 2 * gk + 1), b, c1##v);                                \
        c2##v = _mm256_fmadd_ps(bcast(a2 + 2 * gk + 1), b, c2##v);                                \
        c3##v = _mm256_fmadd_ps(bcast(a3 + 2 * gk + 1), b, c3##v);                                \
    }
    for (int64_t gk = 0; gk < np; gk++) {
        VEC(0)
        if (NV > 1)
            VEC(1)
        if (NV > 2)
            VEC(2)
    }
#undef VEC
#define ST(i)                                                                                                   \
    {                                                                                                           \
        float *s = sums + i * ld;                                                                               \
        _mm256_storeu_ps(s, _mm256_add_ps(_mm256_loadu_ps(s), c##i##0));                                        \
        if (NV > 1)                                                                                             \
            _mm256_storeu_ps(s + 8, _mm256_add_ps(_mm256_loadu_ps(s + 8), c##i##1));                            \
        if (NV > 2)                                                                                             \
            _mm256_storeu_ps(s + 16, _mm256_add_ps(_mm256_loadu_ps(s + 16), c##i##2));                          \
    }
    ST(0) ST(1) ST(2) ST(3)
#undef ST
}

#define BLOCK_FN(nv)                                                                                             \
    TAVX2 static void block4_##nv(const float *const *ar, const uint16_t *const *bv, int64_t np, float *sums,    \
                                  int ld)                                                                        \
    {                                                                                                            \
        block4(ar, bv, np, nv, sums, ld);                                                                        \
    }
BLOCK_FN(1) BLOCK_FN(2) BLOCK_FN(3)
#undef BLOCK_FN

/* n BF16 values widened to float32 */
TAVX2 static void widen_row(float *dst, const uint16_t *src, int64_t n)
{
    int64_t k = 0;
    for (; k + 8 <= n; k += 8) {
        __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(src + k)));
        _mm256_storeu_ps(dst + k, _mm256_castsi256_ps(_mm256_slli_epi32(w, 16)));
    }
    for (; k < n; k++) {
        uint32_t u = (uint32_t)src[k] << 16;
        memcpy(dst + k, &u, 4);
    }
}

TAVX2 void kiln__bgemm_tile_avx2(const kiln_bgemm *g, const uint16_t *a, const uint16_t *bs, int64_t i0, int m,
                                 int64_t j0, int ncols)
{
    int64_t kp2 = (g->K + 1) & ~(int64_t)1, npair = kp2 / 2;
    int nvec = (ncols + 7) / 8;   /* vectors of 8 columns; those past ncols lie in a (padded) panel */
    float sums[KILN_QGEMM_MR + 3][SW];   /* rows past m: scratch */
    _Alignas(32) float a32[KILN_QGEMM_MR][KC2 * 2];
    memset(sums, 0, sizeof sums);
    const uint16_t *bv[SW / 8];
    for (int v = 0; v < nvec; v++)
        bv[v] = bs + (v / 2) * kp2 * 16 + (v % 2) * 16;
    for (int64_t g0 = 0; g0 < npair; g0 += KC2) {
        int64_t gn = npair - g0 < KC2 ? npair - g0 : KC2;
        for (int r = 0; r < m; r++)
            widen_row(a32[r], a + r * kp2 + g0 * 2, gn * 2);
        /* a chunk's 24 columns of B (12 KiB) stay in L1 for every row group */
        for (int v0 = 0; v0 < nvec; v0 += 3) {
            const uint16_t *b3[3];
            int nv = nvec - v0 < 3 ? nvec - v0 : 3;
            for (int v = 0; v < nv; v++)
                b3[v] = bv[v0 + v] + g0 * 32;
            for (int r0 = 0; r0 < m; r0 += 4) {
                /* rows past m repeat row r0 (their sums land in scratch rows) */
                const float *ar[4];
                for (int r = 0; r < 4; r++)
                    ar[r] = a32[r0 + r < m ? r0 + r : r0];
                float *s = &sums[r0][v0 * 8];
                if (nv == 3)
                    block4_3(ar, b3, gn, s, SW);
                else if (nv == 2)
                    block4_2(ar, b3, gn, s, SW);
                else
                    block4_1(ar, b3, gn, s, SW);
            }
        }
    }
    for (int r = 0; r < m; r++)
        memcpy(g->C + (i0 + r) * g->ldc + j0, sums[r], sizeof(float) * (size_t)ncols);
}
#else
void kiln__bgemm_tile_avx2(const kiln_bgemm *g, const uint16_t *a, const uint16_t *bs, int64_t i0, int m,
                           int64_t j0, int ncols)
{
    (void)g, (void)a, (void)bs, (void)i0, (void)m, (void)j0, (void)ncols;
}
#endif

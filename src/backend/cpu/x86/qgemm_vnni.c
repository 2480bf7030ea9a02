/* AVX512-VNNI INT8 GEMM micro-kernel (vpdpbusd) with the requantizing epilogue of qgemm.h, the
 * column sums of packed panels, and the registration of the quantized kernels (qgemm_ops.c)
 * over their scalar references on hosts with AVX512-VNNI.
 *
 * Tile: up to 8 rows of A (4 bytes of a row broadcast to every lane) by up to 3 panels of B (16
 * columns, 4 k per lane): 24 int32 accumulators, 3 panel loads and 8 broadcasts per 24
 * vpdpbusd. The accumulators go through the epilogue (zero-point compensation, bias, scale,
 * activation, requantization) while in registers and are stored with masked stores. */
#include "../cpu_kernels.h"
#include "../qgemm.h"
#include "../vmath.h"

#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#include <immintrin.h>

#define TVNNI __attribute__((target("avx512f,avx512dq,fma,avx512vnni")))
#define QMR KILN_QGEMM_MR

TVNNI static inline __m512i bcast4(const uint8_t *p)
{
    int32_t v;
    memcpy(&v, p, 4);
    return _mm512_set1_epi32(v);
}

/* Epilogue and store of one accumulator vector: row gi, columns j .. j+15 (mask km). */
TVNNI __attribute__((always_inline)) static inline void epi_store(const kiln_qgemm *g, const int32_t *bsum,
                                                                   __m512i acc, int64_t gi, int64_t j, __mmask16 km)
{
    const kiln_qepi *e = &g->epi;
    if (g->a_sum) { /* - zb[n] * (rowsum(A)[m] - K za[m]) */
        int32_t za = g->a_zp ? g->a_zp[gi] : g->a_zp0;
        int32_t r = (int32_t)((uint32_t)g->a_sum[gi] - (uint32_t)g->K * (uint32_t)za);
        __m512i zb = g->b_zp ? _mm512_maskz_loadu_epi32(km, g->b_zp + j) : _mm512_set1_epi32(g->b_zp0);
        acc = _mm512_sub_epi32(acc, _mm512_mullo_epi32(zb, _mm512_set1_epi32(r)));
    }
    if (bsum) { /* - za[m] * colsum(B)[n] */
        int32_t za = g->a_zp ? g->a_zp[gi] : g->a_zp0;
        acc = _mm512_sub_epi32(acc, _mm512_mullo_epi32(_mm512_set1_epi32(za), _mm512_maskz_loadu_epi32(km, bsum)));
    }
    if (e->bias)
        acc = _mm512_add_epi32(acc, e->ch_row ? _mm512_set1_epi32(e->bias[gi]) : _mm512_maskz_loadu_epi32(km, e->bias + j));
    if (e->out == KILN_QOUT_S32) {
        _mm512_mask_storeu_epi32((int32_t *)g->c + gi * g->ldc + j, km, acc);
        return;
    }
    __m512 v = _mm512_cvtepi32_ps(acc);
    const float *sv = e->lin && e->out != KILN_QOUT_F32 ? e->mult : e->scale;
    v = _mm512_mul_ps(v, e->ch_row ? _mm512_set1_ps(sv[gi]) : _mm512_maskz_loadu_ps(km, sv + j));
    if (e->out == KILN_QOUT_F32) {
        _mm512_mask_storeu_ps((float *)g->c + gi * g->ldc + j, km, kiln_v_act(&e->act, v));
        return;
    }
    if (!e->lin)
        v = _mm512_mul_ps(kiln_v_act(&e->act, v), _mm512_set1_ps(e->inv_ys));
    v = _mm512_max_ps(v, _mm512_set1_ps((float)(e->lo - e->zp))); /* NaN -> lo, like the scalar code */
    v = _mm512_min_ps(v, _mm512_set1_ps((float)(e->hi - e->zp)));
    __m512i q = _mm512_add_epi32(_mm512_cvtps_epi32(v), _mm512_set1_epi32(e->zp));
    _mm512_mask_cvtepi32_storeu_epi8((uint8_t *)g->c + gi * g->ldc + j, km, q);
}

/* The tile body with NV panels and A's signedness as constants. */
TVNNI __attribute__((always_inline)) static inline void tile_body(const kiln_qgemm *g, const uint8_t *bp,
                                                                   const int32_t *bsum, int64_t i0, int m,
                                                                   int64_t j0, int ncols, const int NV,
                                                                   const bool A_S8)
{
    int64_t kp = kiln__qgemm_kp(g->K), ng = kp / 4;
    const uint8_t *ar[QMR];
    for (int i = 0; i < QMR; i++)
        ar[i] = g->a + (i0 + (i < m ? i : 0)) * g->lda;
    const int64_t pstride = kp * KILN_QGEMM_NR;
    __m512i acc[QMR][KILN_QGEMM_NV];
    for (int i = 0; i < QMR; i++)
        for (int v = 0; v < NV; v++)
            acc[i][v] = _mm512_setzero_si512();
    for (int64_t gk = 0; gk < ng; gk++) {
        __m512i b[KILN_QGEMM_NV];
        for (int v = 0; v < NV; v++)
            b[v] = _mm512_loadu_si512((const void *)(bp + v * pstride + gk * 64));
        for (int i = 0; i < QMR; i++) {
            __m512i a = bcast4(ar[i] + gk * 4);
            for (int v = 0; v < NV; v++)
                acc[i][v] = A_S8 ? _mm512_dpbusd_epi32(acc[i][v], b[v], a) : _mm512_dpbusd_epi32(acc[i][v], a, b[v]);
        }
    }
    for (int i = 0; i < m; i++)
        for (int v = 0; v < NV; v++) {
            int rem = ncols - v * 16;
            if (rem <= 0)
                break;
            __mmask16 km = rem >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << rem) - 1u);
            epi_store(g, bsum ? bsum + v * 16 : NULL, acc[i][v], i0 + i, j0 + v * 16, km);
        }
}

#define TILE_FN(nv, s8)                                                                                          \
    TVNNI static void tile_##nv##_##s8(const kiln_qgemm *g, const uint8_t *bs, const int32_t *bsum, int64_t i0, \
                                       int m, int64_t j0, int ncols)                                             \
    {                                                                                                            \
        tile_body(g, bs, bsum, i0, m, j0, ncols, nv, s8);                                                         \
    }
TILE_FN(1, 0) TILE_FN(2, 0) TILE_FN(3, 0) TILE_FN(1, 1) TILE_FN(2, 1) TILE_FN(3, 1)
#undef TILE_FN

void kiln__qgemm_tile_vnni(const kiln_qgemm *g, const uint8_t *bs, const int32_t *bsum, int64_t i0, int m, int64_t j0,
                           int nv, int ncols)
{
    static void (*const fns[2][3])(const kiln_qgemm *, const uint8_t *, const int32_t *, int64_t, int, int64_t,
                                   int) = {{tile_1_0, tile_2_0, tile_3_0}, {tile_1_1, tile_2_1, tile_3_1}};
    fns[g->a_s8 ? 1 : 0][nv - 1](g, bs, bsum, i0, m, j0, ncols);
}

TVNNI void kiln__qpanel_sums_vnni(const uint8_t *p, int64_t kp, int64_t npanels, bool s8, int32_t *sum)
{
    const __m512i ones = _mm512_set1_epi8(1);
    for (int64_t q = 0; q < npanels; q++) {
        const uint8_t *pp = p + q * kp * KILN_QGEMM_NR;
        __m512i acc = _mm512_setzero_si512();
        for (int64_t gk = 0; gk < kp / 4; gk++) {
            __m512i v = _mm512_loadu_si512((const void *)(pp + gk * 64));
            acc = s8 ? _mm512_dpbusd_epi32(acc, ones, v) : _mm512_dpbusd_epi32(acc, v, ones);
        }
        _mm512_storeu_si512((void *)(sum + q * KILN_QGEMM_NR), acc);
    }
}

#define QISA (KILN_CPU_AVX512_DQ_FMA | KILN_CPU_AVX512VNNI)
const kiln_kernel_isa_reg kiln__x86_qgemm[] = {
    {KILN_OP_QLinearConv, kiln__k_qlinearconv_fast, QISA, "QLinearConv/avx512vnni"},
    {KILN_OP_ConvInteger, kiln__k_convinteger_fast, QISA, "ConvInteger/avx512vnni"},
    {KILN_OP_QLinearMatMul, kiln__k_qlinearmatmul_fast, QISA, "QLinearMatMul/avx512vnni"},
    {KILN_OP_MatMulInteger, kiln__k_matmulinteger_fast, QISA, "MatMulInteger/avx512vnni"},
    {KILN_OP_QGemm, kiln__k_qgemm_fast, QISA, "QGemm/avx512vnni"},
    {KILN_OP_COUNT, NULL, 0, NULL},
};
#else
void kiln__qgemm_tile_vnni(const kiln_qgemm *g, const uint8_t *bs, const int32_t *bsum, int64_t i0, int m, int64_t j0,
                           int nv, int ncols)
{
    (void)g, (void)bs, (void)bsum, (void)i0, (void)m, (void)j0, (void)nv, (void)ncols;
}
void kiln__qpanel_sums_vnni(const uint8_t *p, int64_t kp, int64_t npanels, bool s8, int32_t *sum)
{
    (void)p, (void)kp, (void)npanels, (void)s8, (void)sum;
}
const kiln_kernel_isa_reg kiln__x86_qgemm[] = {{KILN_OP_COUNT, NULL, 0, NULL}};
#endif

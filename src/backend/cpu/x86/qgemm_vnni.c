/* AVX512-VNNI INT8 GEMM micro-kernel (vpdpbusd) with the requantizing epilogue of qgemm.h, the
 * column sums of packed panels, and the registration of the quantized kernels (qgemm_ops.c)
 * over their scalar references: on every host (the INT8 GEMM core with its portable tile, reading
 * the packed weights an engine stores in place of the INT8 weights), and again as the AVX512-VNNI
 * kernels on hosts with AVX512-VNNI (the same functions: the core picks the VNNI tile there).
 *
 * Tile: up to 8 rows of A (4 bytes of a row broadcast to every lane) by up to 3 panels of B (16
 * columns, 4 k per lane): 24 int32 accumulators, 3 panel loads and 8 broadcasts per 24
 * vpdpbusd. The accumulators go through the epilogue (zero-point compensation, bias, scale,
 * activation, requantization) while in registers and are stored with masked stores. */
#include "../cpu_kernels.h"
#include "../qgemm.h"
#include "../vmath.h"

/* qgemm_ops.c's kernels on the portable tile, for every host (isa 0) */
#define QGEMM_PACKED_KERNELS                                                                       \
    {KILN_OP_QLinearConv, kiln__k_qlinearconv_fast, 0, "QLinearConv/packed"},                      \
    {KILN_OP_ConvInteger, kiln__k_convinteger_fast, 0, "ConvInteger/packed"},                      \
    {KILN_OP_QLinearMatMul, kiln__k_qlinearmatmul_fast, 0, "QLinearMatMul/packed"},                \
    {KILN_OP_MatMulInteger, kiln__k_matmulinteger_fast, 0, "MatMulInteger/packed"},                \
    {KILN_OP_QGemm, kiln__k_qgemm_fast, 0, "QGemm/packed"},

#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#include <immintrin.h>

#include "qepi_vnni.h"
#define QMR KILN_QGEMM_MR

TVNNI static inline __m512i bcast4(const uint8_t *p)
{
    int32_t v;
    memcpy(&v, p, 4);
    return _mm512_set1_epi32(v);
}

/* dot of a u8 vector and an s8 vector into acc, the broadcast A value being the s8 one if A_S8 */
#define QDP(acc, av, bv) (A_S8 ? _mm512_dpbusd_epi32(acc, bv, av) : _mm512_dpbusd_epi32(acc, av, bv))
/* one row's broadcast and its NV dot products (named accumulators: GCC keeps them in registers) */
#define QROW(i)                                                                                                 \
    {                                                                                                           \
        __m512i a = bcast4(ar##i + gk * 4);                                                                     \
        c##i##0 = QDP(c##i##0, a, b0);                                                                          \
        if (NV > 1)                                                                                             \
            c##i##1 = QDP(c##i##1, a, b1);                                                                      \
        if (NV > 2)                                                                                             \
            c##i##2 = QDP(c##i##2, a, b2);                                                                      \
    }
#define QSAVE(i) acc[i][0] = c##i##0, acc[i][1] = c##i##1, acc[i][2] = c##i##2;

/* The tile body with NV panels and A's signedness as constants. */
TVNNI __attribute__((always_inline)) static inline void tile_body(const kiln_qgemm *g, const uint8_t *bp,
                                                                   const int32_t *bsum, int64_t i0, int m,
                                                                   int64_t j0, int ncols, const int NV,
                                                                   const bool A_S8)
{
    int64_t kp = kiln__qgemm_kp(g->K), ng = kp / 4;
    const int64_t lda = g->lda;
    const uint8_t *a0 = g->a + i0 * lda;
    /* rows beyond m read row 0 again (their results are not stored) */
    const uint8_t *ar0 = a0, *ar1 = a0 + (1 < m ? lda : 0), *ar2 = a0 + (2 < m ? 2 * lda : 0);
    const uint8_t *ar3 = a0 + (3 < m ? 3 * lda : 0), *ar4 = a0 + (4 < m ? 4 * lda : 0);
    const uint8_t *ar5 = a0 + (5 < m ? 5 * lda : 0), *ar6 = a0 + (6 < m ? 6 * lda : 0);
    const uint8_t *ar7 = a0 + (7 < m ? 7 * lda : 0);
    const uint8_t *bp0 = bp, *bp1 = bp + kp * KILN_QGEMM_NR, *bp2 = bp + 2 * kp * KILN_QGEMM_NR;
    const __m512i z = _mm512_setzero_si512();
    __m512i c00 = z, c01 = z, c02 = z, c10 = z, c11 = z, c12 = z, c20 = z, c21 = z, c22 = z, c30 = z, c31 = z,
            c32 = z, c40 = z, c41 = z, c42 = z, c50 = z, c51 = z, c52 = z, c60 = z, c61 = z, c62 = z, c70 = z,
            c71 = z, c72 = z;
    for (int64_t gk = 0; gk < ng; gk++) {
        __m512i b0 = _mm512_loadu_si512((const void *)(bp0 + gk * 64)), b1 = z, b2 = z;
        if (NV > 1)
            b1 = _mm512_loadu_si512((const void *)(bp1 + gk * 64));
        if (NV > 2)
            b2 = _mm512_loadu_si512((const void *)(bp2 + gk * 64));
        QROW(0) QROW(1) QROW(2) QROW(3) QROW(4) QROW(5) QROW(6) QROW(7)
    }
    __m512i acc[QMR][KILN_QGEMM_NV];
    QSAVE(0) QSAVE(1) QSAVE(2) QSAVE(3) QSAVE(4) QSAVE(5) QSAVE(6) QSAVE(7)
    for (int i = 0; i < m; i++)
        for (int v = 0; v < NV; v++) {
            int rem = ncols - v * 16;
            if (rem <= 0)
                break;
            __mmask16 km = kiln_v_mask16(rem);
            epi_store(g, bsum ? bsum + v * 16 : NULL, acc[i][v], i0 + i, j0 + v * 16, km);
        }
}
#undef QROW
#undef QSAVE
#undef QDP

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

TVNNI void kiln__qepi_row_vnni(const kiln_qepi *e, const int32_t *acc, int64_t n, int64_t ch, void *dst)
{
    kiln_qgemm g = {.K = 0, .c = dst, .ldc = 0, .epi = *e};
    g.epi.ch_row = true;
    for (int64_t j = 0; j < n; j += 16) {
        __mmask16 km = kiln_v_mask16(n - j);
        epi_store(&g, NULL, _mm512_maskz_loadu_epi32(km, acc + j), ch, j, km);
    }
}

TVNNI void kiln__qdw_row_vnni(int32_t *acc, const uint8_t *row, bool s8, int64_t n, int32_t zx, int32_t wv)
{
    const __m512i vz = _mm512_set1_epi32(zx), vw = _mm512_set1_epi32(wv);
    for (int64_t j = 0; j < n; j += 16) {
        __mmask16 km = kiln_v_mask16(n - j);
        __m512i x = kiln_v_load16_8to32(row + j, n - j, s8);
        __m512i a = _mm512_maskz_loadu_epi32(km, acc + j);
        a = _mm512_add_epi32(a, _mm512_mullo_epi32(_mm512_sub_epi32(x, vz), vw));
        _mm512_mask_storeu_epi32(acc + j, km, a);
    }
}

#define QISA (KILN_CPU_AVX512_DQ_FMA | KILN_CPU_AVX512VNNI)
const kiln_kernel_isa_reg kiln__x86_qgemm[] = {
    QGEMM_PACKED_KERNELS
    {KILN_OP_QLinearConv, kiln__k_qlinearconv_fast, QISA, "QLinearConv/avx512vnni"},
    {KILN_OP_ConvInteger, kiln__k_convinteger_fast, QISA, "ConvInteger/avx512vnni"},
    {KILN_OP_QLinearMatMul, kiln__k_qlinearmatmul_fast, QISA, "QLinearMatMul/avx512vnni"},
    {KILN_OP_MatMulInteger, kiln__k_matmulinteger_fast, QISA, "MatMulInteger/avx512vnni"},
    {KILN_OP_QGemm, kiln__k_qgemm_fast, QISA, "QGemm/avx512vnni"},
    {KILN_OP_QuantizeLinear, kiln__k_quantize_fast, KILN_CPU_AVX512F, "QuantizeLinear/avx512"},   /* quant_avx512.c */
    {KILN_OP_DequantizeLinear, kiln__k_dequantize_fast, KILN_CPU_AVX512F, "DequantizeLinear/avx512"},    /* quant_avx512.c */
    {KILN_OP_QLookup, kiln__k_qlookup_fast, KILN_CPU_AVX512F | KILN_CPU_AVX512VBMI, "QLookup/avx512vbmi"},   /* quant_avx512.c */
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
void kiln__qepi_row_vnni(const kiln_qepi *e, const int32_t *acc, int64_t n, int64_t ch, void *dst)
{
    (void)e, (void)acc, (void)n, (void)ch, (void)dst;
}
void kiln__qdw_row_vnni(int32_t *acc, const uint8_t *row, bool s8, int64_t n, int32_t zx, int32_t wv)
{
    (void)acc, (void)row, (void)s8, (void)n, (void)zx, (void)wv;
}
const kiln_kernel_isa_reg kiln__x86_qgemm[] = {QGEMM_PACKED_KERNELS {KILN_OP_COUNT, NULL, 0, NULL}};
#endif

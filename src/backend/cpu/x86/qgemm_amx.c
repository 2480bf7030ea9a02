/* The INT8 GEMM (qgemm.h) on AMX tiles through the tile driver (amx_gemm.h): tdpbusd (u8 A x s8 B) or tdpbsud (s8 A
 * x u8 B, a_s8), the products summed exactly in int32 as vpdpbusd does, so every output byte is the AVX512-VNNI
 * tile's. The packed panels (4 k a lane, 16 columns) are AMX's quad layout and A's rows (kp bytes, zero padded) are
 * read in place; each finished int32 C tile goes through the VNNI tile's epilogue (x86/qepi_vnni.h: zero points,
 * bias, requantization, the one-rounding residual) into C, its residual bytes prefetched when the tile starts. */
#include "../qgemm.h"
#include "amx_gemm.h"

#if defined(__GNUC__) && defined(__x86_64__)
#include "qepi_vnni.h"

typedef struct qamx {
    const kiln_qgemm *g;
    const int32_t *bsum;   /* the strip's column sums, or NULL */
    int64_t j0;
} qamx;

TVNNI static void out_tile(void *ctx, const void *tile, int rows, int64_t i, int p, int cols)
{
    const qamx *q = ctx;
    const int32_t *t = tile;
    __mmask16 km = kiln_v_mask16(cols);
    for (int r = 0; r < rows; r++)
        epi_store(q->g, q->bsum ? q->bsum + 16 * p : NULL, _mm512_load_si512((const void *)(t + r * 16)), i + r,
                  q->j0 + 16 * p, km);
}

static void start_tile(void *ctx, int64_t i, int p)
{
    const qamx *q = ctx;
    const kiln_qepi *e = &q->g->epi;
    if (e->res)
        for (int r = 0; r < 16; r++)
            __builtin_prefetch(e->res + (i + r) * e->res_ld + q->j0 + 16 * p, 0, 3);
}

void kiln__qgemm_rows_amx(const kiln_qgemm *g, const uint8_t *bs, const int32_t *bsum, int64_t i0, int64_t i1,
                          int64_t j0, int ncols)
{
    int64_t kp = kiln__qgemm_kp(g->K);
    qamx q = {.g = g, .bsum = bsum, .j0 = j0};
    kiln_amx_job j = {.dot = g->a_s8 ? KILN_AMX_S8U8 : KILN_AMX_U8S8, .a = g->a, .lda = g->lda, .b = bs,
                      .pstride = kp * KILN_QGEMM_NR, .kb = kp, .ncols = ncols, .out = out_tile, .start = start_tile,
                      .ctx = &q};
    kiln__amx_rows(&j, i0, i1);
}
#else
void kiln__qgemm_rows_amx(const kiln_qgemm *g, const uint8_t *bs, const int32_t *bsum, int64_t i0, int64_t i1,
                          int64_t j0, int ncols)
{
    (void)g, (void)bs, (void)bsum, (void)i0, (void)i1, (void)j0, (void)ncols;   /* never chosen: no AMX */
}
#endif

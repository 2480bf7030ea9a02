/* The BF16 GEMM on AMX tiles (tdpbf16ps) through the tile driver (amx_gemm.h): the packed BF16 panels are AMX's
 * pair layout and A's rows (kp2 BF16 values) are read in place; each finished C tile goes into C through the float
 * epilogue here, while in L1, its residual rows prefetched when the tile starts (ResNet-50 bf16's residuals come
 * from L3 or memory: the epilogue waited on them; in-model 1.8% of its time). */
#include "../qgemm.h"
#include "../qgemm_bf16.h"
#include "../vmath.h"
#include "amx_gemm.h"

#if defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h>

typedef struct bamx {
    const kiln_bgemm *g;
    int64_t j0;
} bamx;

/* rows x cols of a stored C tile (src, 16 floats a row) into C at (i0, j0) through the epilogue e (NULL: none): the
 * operations and order of kiln__epi_apply_f32 (+ bias (0 without one), + residual, activation), 16 lanes a row.
 * epilogue.c's rows taught to read a separate source, called once per tile, ran BERT-base / ResNet-50 bf16 4-10%
 * slower (a call per row); with the rows looped inside one call still 3-5% (env_ab, session 41): kept here. */
__attribute__((target("avx512f,avx512dq,fma"))) static void store_tile(const kiln_epi *e, const float *src, float *c,
                                                                        int64_t ldc, int rows, int cols, int64_t i0,
                                                                        int64_t j0)
{
    __mmask16 k = kiln_v_mask16(cols);
    if (kiln__epi_is_noop(e)) {
        for (int r = 0; r < rows; r++)
            _mm512_mask_storeu_ps(c + r * ldc, k, _mm512_load_ps(src + r * 16));
        return;
    }
    const __m512 bcol = e->bias && !e->row_bias ? _mm512_maskz_loadu_ps(k, e->bias + j0) : _mm512_setzero_ps();
    for (int r = 0; r < rows; r++) {
        __m512 b = e->bias && e->row_bias ? _mm512_set1_ps(e->bias[i0 + r]) : bcol;
        __m512 v = _mm512_add_ps(_mm512_load_ps(src + r * 16), b);
        if (e->res)
            v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(k, e->res + (i0 + r) * e->ldr + j0));
        _mm512_mask_storeu_ps(c + r * ldc, k, kiln_v_act(&e->act, v));
    }
}

static void out_tile(void *ctx, const void *tile, int rows, int64_t i, int p, int cols)
{
    const bamx *b = ctx;
    const kiln_bgemm *g = b->g;
    int64_t j = b->j0 + 16 * p;
    store_tile(g->epi, tile, g->C + i * g->ldc + j, g->ldc, rows, cols, i, j);
}

static void start_tile(void *ctx, int64_t i, int p)
{
    const bamx *b = ctx;
    const kiln_epi *e = b->g->epi;
    if (e && e->res)
        for (int r = 0; r < 16; r++)
            __builtin_prefetch(e->res + (i + r) * e->ldr + b->j0 + 16 * p, 0, 3);
}

void kiln__bgemm_rows_amx(const kiln_bgemm *g, const uint16_t *arows, const uint16_t *bs, int64_t i0, int64_t i1,
                          int64_t j0, int ncols)
{
    int64_t kp2 = (g->K + 1) & ~(int64_t)1;
    bamx b = {.g = g, .j0 = j0};
    kiln_amx_job j = {.dot = KILN_AMX_BF16, .a = (const uint8_t *)arows, .lda = kp2 * 2, .b = (const uint8_t *)bs,
                      .pstride = kp2 * 16 * 2, .kb = kp2 * 2, .ncols = ncols, .out = out_tile, .start = start_tile,
                      .ctx = &b};
    kiln__amx_rows(&j, i0, i1);
}
#else
void kiln__bgemm_rows_amx(const kiln_bgemm *g, const uint16_t *arows, const uint16_t *bs, int64_t i0, int64_t i1,
                          int64_t j0, int ncols)
{
    (void)g, (void)arows, (void)bs, (void)i0, (void)i1, (void)j0, (void)ncols;   /* never chosen: no AMX */
}
#endif

/* AMX BF16 tiles (tdpbf16ps) for the BF16 GEMM (qgemm_bf16.h): a task's rows of C against one strip of up to 3
 * panels of 16 columns. The B panels are already AMX's pair layout (16 columns x 2 k values = 64 bytes a k pair), so
 * a B tile (16 k pairs) and an A tile (16 rows x 32 BF16 k values, A's rows of kp2 values) are read in place. Whole
 * 16-row blocks run as 2 x 2 tiles of C over a pair of panels (four independent accumulations hide tdpbf16ps's
 * latency, each A and B tile feeds two of them), an odd panel as 4 x 1 (1 x 2 / 1 x 1 for what is left); the last
 * rows (< 16) as 1 x 3 with tiles configured with that many rows, so no row past the block is read. C accumulates
 * over the whole of K in the tiles, is stored to a stack tile and goes into C through the epilogue (bias, residual,
 * activation, in kiln__epi_apply_f32's order) while in L1: the epilogue over C after the tiles' stores cost BERT-base
 * 12% of its time (per-row calls of 16 columns, reads waiting on the tile stores).
 *
 * tdpbf16ps adds each pair's two products (exact in float32) to the accumulator with float32 rounding, k pair by k
 * pair (the pair's order differs from vdpbf16ps's: sums can differ from the AVX512-BF16 tile's in the last bit);
 * input denormals are read as zero and denormal results flushed, like vdpbf16ps. A K that is not a multiple of 32
 * ends with a step from zero-padded copies of A's and B's last values (the configuration cannot change
 * mid-product: ldtilecfg clears the tiles). kiln__cpu_has(KILN_CPU_AMX_BF16) includes the kernel's permission to
 * use the tile data (arch_prctl, core/cpu.c). */
#include "../qgemm.h"
#include "../qgemm_bf16.h"
#include "../vmath.h"

#if defined(__GNUC__) && defined(__x86_64__) && (defined(__clang__) || __GNUC__ >= 11)
#include <immintrin.h>
#include <string.h>

#define TAMX __attribute__((target("amx-tile,amx-bf16")))

typedef struct amx_cfg {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} amx_cfg;
_Static_assert(sizeof(amx_cfg) == 64, "the tile configuration is 64 bytes");

/* C (0-2) and A (3) with m rows, B (4-6) 16 k pairs; all 64 bytes a row */
TAMX static void configure(int m)
{
    amx_cfg c;
    memset(&c, 0, sizeof c);
    c.palette = 1;
    for (int t = 0; t < 7; t++) {
        c.rows[t] = (uint8_t)(t < 4 ? m : 16);
        c.colsb[t] = 64;
    }
    _tile_loadconfig(&c);
}

/* One block of m <= 16 rows x np panels: k steps [0, kfull) in place, then the tail (kt values) from at and bt */
#define AMX_BLOCK(NP)                                                                                          \
    TAMX static void block##NP(const uint16_t *a, int64_t astride, const uint16_t *bs, int64_t pstride,          \
                               int64_t kfull, const uint16_t *at, const uint16_t *bt, float *c0, float *c1,      \
                               float *c2, int64_t cstride)                                                     \
    {                                                                                                          \
        _tile_zero(0);                                                                                         \
        if (NP > 1)                                                                                            \
            _tile_zero(1);                                                                                     \
        if (NP > 2)                                                                                            \
            _tile_zero(2);                                                                                     \
        for (int64_t kk = 0; kk < kfull; kk += 32) {                                                           \
            _tile_loadd(3, a + kk, astride);                                                                   \
            _tile_loadd(4, bs + kk * 16, 64);                                                                  \
            _tile_dpbf16ps(0, 3, 4);                                                                           \
            if (NP > 1) {                                                                                      \
                _tile_loadd(5, bs + pstride + kk * 16, 64);                                                    \
                _tile_dpbf16ps(1, 3, 5);                                                                       \
            }                                                                                                  \
            if (NP > 2) {                                                                                      \
                _tile_loadd(6, bs + 2 * pstride + kk * 16, 64);                                                \
                _tile_dpbf16ps(2, 3, 6);                                                                       \
            }                                                                                                  \
        }                                                                                                      \
        if (at) {                                                                                              \
            _tile_loadd(3, at, 64);                                                                            \
            _tile_loadd(4, bt, 64);                                                                            \
            _tile_dpbf16ps(0, 3, 4);                                                                           \
            if (NP > 1) {                                                                                      \
                _tile_loadd(5, bt + 512, 64);                                                                  \
                _tile_dpbf16ps(1, 3, 5);                                                                       \
            }                                                                                                  \
            if (NP > 2) {                                                                                      \
                _tile_loadd(6, bt + 1024, 64);                                                                 \
                _tile_dpbf16ps(2, 3, 6);                                                                       \
            }                                                                                                  \
        }                                                                                                      \
        _tile_stored(0, c0, cstride);                                                                          \
        if (NP > 1)                                                                                            \
            _tile_stored(1, c1, cstride);                                                                      \
        if (NP > 2)                                                                                            \
            _tile_stored(2, c2, cstride);                                                                      \
    }
AMX_BLOCK(1)
AMX_BLOCK(2)
AMX_BLOCK(3)

/* Whole 16-row blocks, every tile configured 16 x 64 bytes; tile numbers: C 0-3, A 4-5, B 6-7. Each k step of 32
 * values loads the blocks' A and the panels' B and runs one tdpbf16ps per C tile: 2 x 2 (4 independent
 * accumulations: tdpbf16ps's latency hidden, each A and B tile used twice), 1 x 2, 4 x 1 (the A tile reloaded per
 * row block), 1 x 1. a[r]: row block r's first row (stride astride bytes), or its tail copy at[r]; b[p]: panel p
 * (stride 64 bytes a k pair), or its tail copy bt[p]; c[t] / cs[t]: where C tile t is stored and its stride. */
typedef struct amx_blk {
    const uint16_t *a[4], *at[4], *b[2], *bt[2];
    int64_t astride, kfull;
    float *c[4];
    int64_t cs[4];
} amx_blk;

TAMX static void k22(const amx_blk *q)
{
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    for (int64_t kk = 0; kk < q->kfull; kk += 32) {
        _tile_loadd(4, q->a[0] + kk, q->astride);
        _tile_loadd(6, q->b[0] + kk * 16, 64);
        _tile_loadd(7, q->b[1] + kk * 16, 64);
        _tile_dpbf16ps(0, 4, 6);
        _tile_loadd(5, q->a[1] + kk, q->astride);
        _tile_dpbf16ps(1, 4, 7);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
    }
    if (q->at[0]) {
        _tile_loadd(4, q->at[0], 64);
        _tile_loadd(6, q->bt[0], 64);
        _tile_loadd(7, q->bt[1], 64);
        _tile_dpbf16ps(0, 4, 6);
        _tile_loadd(5, q->at[1], 64);
        _tile_dpbf16ps(1, 4, 7);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
    }
    _tile_stored(0, q->c[0], q->cs[0]);
    _tile_stored(1, q->c[1], q->cs[1]);
    _tile_stored(2, q->c[2], q->cs[2]);
    _tile_stored(3, q->c[3], q->cs[3]);
}

TAMX static void k12(const amx_blk *q)
{
    _tile_zero(0);
    _tile_zero(1);
    for (int64_t kk = 0; kk < q->kfull; kk += 32) {
        _tile_loadd(4, q->a[0] + kk, q->astride);
        _tile_loadd(6, q->b[0] + kk * 16, 64);
        _tile_loadd(7, q->b[1] + kk * 16, 64);
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
    }
    if (q->at[0]) {
        _tile_loadd(4, q->at[0], 64);
        _tile_loadd(6, q->bt[0], 64);
        _tile_loadd(7, q->bt[1], 64);
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
    }
    _tile_stored(0, q->c[0], q->cs[0]);
    _tile_stored(1, q->c[1], q->cs[1]);
}

TAMX static void k41(const amx_blk *q)
{
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    for (int64_t kk = 0; kk < q->kfull; kk += 32) {
        _tile_loadd(6, q->b[0] + kk * 16, 64);
        _tile_loadd(4, q->a[0] + kk, q->astride);
        _tile_dpbf16ps(0, 4, 6);
        _tile_loadd(5, q->a[1] + kk, q->astride);
        _tile_dpbf16ps(1, 5, 6);
        _tile_loadd(4, q->a[2] + kk, q->astride);
        _tile_dpbf16ps(2, 4, 6);
        _tile_loadd(5, q->a[3] + kk, q->astride);
        _tile_dpbf16ps(3, 5, 6);
    }
    if (q->at[0]) {
        _tile_loadd(6, q->bt[0], 64);
        _tile_loadd(4, q->at[0], 64);
        _tile_dpbf16ps(0, 4, 6);
        _tile_loadd(5, q->at[1], 64);
        _tile_dpbf16ps(1, 5, 6);
        _tile_loadd(4, q->at[2], 64);
        _tile_dpbf16ps(2, 4, 6);
        _tile_loadd(5, q->at[3], 64);
        _tile_dpbf16ps(3, 5, 6);
    }
    _tile_stored(0, q->c[0], q->cs[0]);
    _tile_stored(1, q->c[1], q->cs[1]);
    _tile_stored(2, q->c[2], q->cs[2]);
    _tile_stored(3, q->c[3], q->cs[3]);
}

TAMX static void k11(const amx_blk *q)
{
    _tile_zero(0);
    for (int64_t kk = 0; kk < q->kfull; kk += 32) {
        _tile_loadd(4, q->a[0] + kk, q->astride);
        _tile_loadd(6, q->b[0] + kk * 16, 64);
        _tile_dpbf16ps(0, 4, 6);
    }
    if (q->at[0]) {
        _tile_loadd(4, q->at[0], 64);
        _tile_loadd(6, q->bt[0], 64);
        _tile_dpbf16ps(0, 4, 6);
    }
    _tile_stored(0, q->c[0], q->cs[0]);
}

/* Per-call state of kiln__bgemm_rows_amx: the K tail copies, the stack tiles of partial C tiles */
typedef struct amx_rows {
    const kiln_bgemm *g;
    const uint16_t *arows, *bs;
    int64_t kp2, kfull, kt, pstride, j0;
    int ncols;
    uint16_t bt[3][512] __attribute__((aligned(64)));   /* each panel's last kt / 2 k pairs, zero pairs after */
    uint16_t at[4][512] __attribute__((aligned(64)));   /* a row block's last kt values, zero after, 16 rows */
    float cbuf[4][256] __attribute__((aligned(64)));   /* the call's C tiles */
    int n;                                              /* how many */
    int64_t ti[4];                                      /* their first row ... */
    int tp[4];                                          /* ... and panel */
} amx_rows;

/* Row block r (16 rows from row i) of the next kernel call: its A, and its tail copy into slot r */
static void set_rows(amx_rows *w, amx_blk *q, int r, int64_t i)
{
    q->a[r] = w->arows + i * w->kp2;
    q->at[r] = NULL;
    if (w->kt) {
        memset(w->at[r], 0, sizeof w->at[r]);
        for (int rr = 0; rr < 16; rr++)
            memcpy(w->at[r] + rr * 32, q->a[r] + rr * w->kp2 + w->kfull, (size_t)w->kt * sizeof(uint16_t));
        q->at[r] = w->at[r];
    }
}

/* C tile t of the next kernel call (rows [i, i + 16) x panel p) goes to cbuf[t] (a tile stored straight into C
 * made the epilogue's reads of it wait; storing a block's tiles while the previous block's went out gained
 * nothing) */
static void set_c(amx_rows *w, amx_blk *q, int t, int64_t i, int p)
{
    q->c[t] = w->cbuf[t];
    q->cs[t] = 64;
    w->ti[t] = i;
    w->tp[t] = p;
    w->n = t + 1;
    /* the tile's residual rows, read when it goes out (ResNet-50 bf16's residuals come from L3 or memory: the
     * epilogue waited on them; in-model 1.8% of its time) */
    const kiln_epi *e = w->g->epi;
    if (e && e->res)
        for (int r = 0; r < 16; r++)
            __builtin_prefetch(e->res + (i + r) * e->ldr + w->j0 + 16 * p, 0, 3);
}

/* rows x cols of a stored C tile (src, 16 floats a row) into C at (i0, j0) through the epilogue e (NULL: none): the
 * operations and order of kiln__epi_apply_f32 (+ bias (0 without one), + residual, activation), 16 lanes a row */
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

/* After a kernel call: its tiles (16 rows each) into C through the epilogue */
static void stored(amx_rows *w)
{
    const kiln_bgemm *g = w->g;
    for (int t = 0; t < w->n; t++) {
        int64_t i = w->ti[t];
        int p = w->tp[t], cols = w->ncols - 16 * p < 16 ? w->ncols - 16 * p : 16;
        store_tile(g->epi, w->cbuf[t], g->C + i * g->ldc + w->j0 + 16 * p, g->ldc, 16, cols, i, w->j0 + 16 * p);
    }
    w->n = 0;
}

static void set_b(amx_rows *w, amx_blk *q, int slot, int p)
{
    q->b[slot] = w->bs + p * w->pstride;
    q->bt[slot] = w->bt[p];
}

/* Full 16-row blocks [i, i1): the panel pairs by 2 x 2 (1 x 2 for an odd last block), an odd last panel by 4 x 1
 * (1 x 1 for the blocks left) */
TAMX static void full_rows(amx_rows *w, int64_t i, int64_t i1, int np)
{
    amx_cfg c;
    memset(&c, 0, sizeof c);
    c.palette = 1;
    for (int t = 0; t < 8; t++)
        c.rows[t] = 16, c.colsb[t] = 64;
    _tile_loadconfig(&c);
    amx_blk q;
    memset(&q, 0, sizeof q);
    q.astride = w->kp2 * 2;
    q.kfull = w->kfull;
    for (int p = 0; p + 1 < np; p += 2) {
        set_b(w, &q, 0, p);
        set_b(w, &q, 1, p + 1);
        int64_t r = i;
        for (; r + 32 <= i1; r += 32) {
            set_rows(w, &q, 0, r);
            set_rows(w, &q, 1, r + 16);
            set_c(w, &q, 0, r, p), set_c(w, &q, 1, r, p + 1), set_c(w, &q, 2, r + 16, p), set_c(w, &q, 3, r + 16, p + 1);
            k22(&q);
            stored(w);
        }
        if (r < i1) {
            set_rows(w, &q, 0, r);
            set_c(w, &q, 0, r, p), set_c(w, &q, 1, r, p + 1);
            k12(&q);
            stored(w);
        }
    }
    if (np % 2) {
        int p = np - 1;
        set_b(w, &q, 0, p);
        int64_t r = i;
        for (; r + 64 <= i1; r += 64) {
            for (int b = 0; b < 4; b++) {
                set_rows(w, &q, b, r + 16 * b);
                set_c(w, &q, b, r + 16 * b, p);
            }
            k41(&q);
            stored(w);
        }
        for (; r < i1; r += 16) {
            set_rows(w, &q, 0, r);
            set_c(w, &q, 0, r, p);
            k11(&q);
            stored(w);
        }
    }
}

TAMX void kiln__bgemm_rows_amx(const kiln_bgemm *g, const uint16_t *arows, const uint16_t *bs, int64_t i0, int64_t i1,
                               int64_t j0, int ncols)
{
    amx_rows w;
    w.g = g, w.arows = arows, w.bs = bs, w.j0 = j0, w.ncols = ncols;
    w.n = 0;
    w.kp2 = (g->K + 1) & ~(int64_t)1, w.kfull = w.kp2 & ~(int64_t)31, w.kt = w.kp2 - w.kfull, w.pstride = w.kp2 * 16;
    const int np = (ncols + 15) / 16;
    if (w.kt) {
        memset(w.bt, 0, sizeof w.bt);
        for (int p = 0; p < np; p++)
            memcpy(w.bt[p], bs + p * w.pstride + w.kfull * 16, (size_t)(w.kt * 16) * sizeof(uint16_t));
    }
    int64_t ifull = i0 + (i1 - i0) / 16 * 16;
    if (ifull > i0)
        full_rows(&w, i0, ifull, np);
    if (ifull < i1) {
        /* the last rows (m < 16): tiles configured with m rows, C through cbuf */
        int m = (int)(i1 - ifull);
        configure(m);
        const uint16_t *a = arows + ifull * w.kp2, *atp = NULL;
        if (w.kt) {
            memset(w.at[0], 0, sizeof w.at[0]);
            for (int r = 0; r < m; r++)
                memcpy(w.at[0] + r * 32, a + r * w.kp2 + w.kfull, (size_t)w.kt * sizeof(uint16_t));
            atp = w.at[0];
        }
        const uint16_t *bt = &w.bt[0][0];
        if (np == 1)
            block1(a, w.kp2 * 2, bs, w.pstride, w.kfull, atp, bt, w.cbuf[0], w.cbuf[1], w.cbuf[2], 64);
        else if (np == 2)
            block2(a, w.kp2 * 2, bs, w.pstride, w.kfull, atp, bt, w.cbuf[0], w.cbuf[1], w.cbuf[2], 64);
        else
            block3(a, w.kp2 * 2, bs, w.pstride, w.kfull, atp, bt, w.cbuf[0], w.cbuf[1], w.cbuf[2], 64);
        for (int p = 0; p < np; p++) {
            int cols = ncols - 16 * p < 16 ? ncols - 16 * p : 16;
            store_tile(g->epi, w.cbuf[p], g->C + ifull * g->ldc + j0 + 16 * p, g->ldc, m, cols, ifull, j0 + 16 * p);
        }
    }
    _tile_release();
}
#else
void kiln__bgemm_rows_amx(const kiln_bgemm *g, const uint16_t *arows, const uint16_t *bs, int64_t i0, int64_t i1,
                          int64_t j0, int ncols)
{
    (void)g, (void)arows, (void)bs, (void)i0, (void)i1, (void)j0, (void)ncols;   /* never chosen: no AMX */
}
#endif

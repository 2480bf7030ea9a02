/* The AMX tile driver (amx_gemm.h) of the BF16 and INT8 GEMMs.
 *
 * Whole 16-row blocks run as 2 x 2 tiles of C over a pair of panels (four independent accumulations hide the dot
 * instruction's latency, each A and B tile feeds two of them), an odd panel as 4 x 1 (the A tile reloaded per row
 * block), 1 x 2 / 1 x 1 for what is left; every tile is configured 16 rows x 64 bytes (tile numbers: C 0-3, A 4-5,
 * B 6-7). The last rows (< 16) run as 1 x np with C (0-2) and A (3) configured with that many rows, so no row past
 * the block is read. C accumulates over the whole of K in the tiles and is stored once, to a stack tile the caller's
 * `out` puts into C (through its epilogue, while in L1: BF16 epilogues run over C after tile stores into it cost
 * BERT-base 12% of its time, per-row calls of 16 columns and reads waiting on the tile stores).
 *
 * A K whose bytes are not a multiple of 64 ends with one step from zero-padded copies of A's and B's last k groups
 * (the configuration cannot change mid-product: ldtilecfg clears the tiles). Rounding: tdpbf16ps adds each pair's
 * two products (exact in float32) to the accumulator with float32 rounding, k pair by k pair (the pair's order
 * differs from vdpbf16ps's: sums can differ from the AVX512-BF16 tile's in the last bit), input denormals read as
 * zero, denormal results flushed; tdpbusd / tdpbsud sum the byte products exactly in int32, as vpdpbusd does. */
#include "amx_gemm.h"

#if defined(__GNUC__) && defined(__x86_64__) && (defined(__clang__) || __GNUC__ >= 11)
#include <immintrin.h>
#include <string.h>

#define TAMX __attribute__((target("amx-tile,amx-bf16,amx-int8")))

typedef struct amx_cfg {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} amx_cfg;
_Static_assert(sizeof(amx_cfg) == 64, "the tile configuration is 64 bytes");

/* m < 16: C (0-2) and A (3) with m rows, B (4-6) kb / 4 k groups; m == 16: C (0-3) 16 rows, A (4-5) 16 rows, B (6-7)
 * kb / 4 k groups. Rows of 64 bytes, but A's of kb (64, or all of a K shorter than one step) */
TAMX static void configure(int m, int kb)
{
    amx_cfg c;
    memset(&c, 0, sizeof c);
    c.palette = 1;
    for (int t = 0; t < 8; t++) {
        bool a = m < 16 ? t == 3 : t == 4 || t == 5, b = m < 16 ? t >= 4 && t <= 6 : t >= 6;
        c.rows[t] = (uint8_t)(b ? kb / 4 : m < 16 && t < 4 ? m : 16);
        c.colsb[t] = (uint16_t)(a ? kb : 64);
    }
    /* GCC 12's _tile_loadconfig tells the compiler it reads 8 bytes of the configuration: without a barrier the other
     * stores were dropped as dead (and ldtilecfg faulted on the zero-row tiles) */
    __asm__ volatile("" : : "r"(&c) : "memory");
    _tile_loadconfig(&c);
}

/* One kernel call: a[r] row block r's first row (stride astride) and at[r] its tail copy (NULL: no tail); b[p]
 * panel p and bt[p] its tail copy; c[t] where C tile t is stored (64 bytes a row) */
typedef struct amx_blk {
    const uint8_t *a[4], *at[4], *b[3], *bt[3];
    int64_t astride, kfull;
    void *c[4];
} amx_blk;

#define STEP_22(DOT, A0, A1, B0, B1, AS)                                                                        \
    _tile_loadd(4, A0, AS);                                                                                     \
    _tile_loadd(6, B0, 64);                                                                                     \
    _tile_loadd(7, B1, 64);                                                                                     \
    DOT(0, 4, 6);                                                                                               \
    _tile_loadd(5, A1, AS);                                                                                     \
    DOT(1, 4, 7);                                                                                               \
    DOT(2, 5, 6);                                                                                               \
    DOT(3, 5, 7);
#define STEP_12(DOT, A0, B0, B1, AS)                                                                            \
    _tile_loadd(4, A0, AS);                                                                                     \
    _tile_loadd(6, B0, 64);                                                                                     \
    _tile_loadd(7, B1, 64);                                                                                     \
    DOT(0, 4, 6);                                                                                               \
    DOT(1, 4, 7);
#define STEP_41(DOT, A0, A1, A2, A3, B0, AS)                                                                    \
    _tile_loadd(6, B0, 64);                                                                                     \
    _tile_loadd(4, A0, AS);                                                                                     \
    DOT(0, 4, 6);                                                                                               \
    _tile_loadd(5, A1, AS);                                                                                     \
    DOT(1, 5, 6);                                                                                               \
    _tile_loadd(4, A2, AS);                                                                                     \
    DOT(2, 4, 6);                                                                                               \
    _tile_loadd(5, A3, AS);                                                                                     \
    DOT(3, 5, 6);
#define STEP_11(DOT, A0, B0, AS)                                                                                \
    _tile_loadd(4, A0, AS);                                                                                     \
    _tile_loadd(6, B0, 64);                                                                                     \
    DOT(0, 4, 6);
/* the last rows: 1 x NP with C 0-2, A 3, B 4-6 */
#define STEP_T(DOT, NP, A0, B0, B1, B2, AS)                                                                     \
    _tile_loadd(3, A0, AS);                                                                                     \
    _tile_loadd(4, B0, 64);                                                                                     \
    DOT(0, 3, 4);                                                                                               \
    if (NP > 1) {                                                                                               \
        _tile_loadd(5, B1, 64);                                                                                 \
        DOT(1, 3, 5);                                                                                           \
    }                                                                                                           \
    if (NP > 2) {                                                                                               \
        _tile_loadd(6, B2, 64);                                                                                 \
        DOT(2, 3, 6);                                                                                           \
    }

/* C tiles 0 .. n-1 zeroed / stored (tile numbers are immediates: n a constant, or np's three cases) */
#define ZERO_C(n)                                                                                               \
    _tile_zero(0);                                                                                              \
    if ((n) > 1)                                                                                                \
        _tile_zero(1);                                                                                          \
    if ((n) > 2)                                                                                                \
        _tile_zero(2);                                                                                          \
    if ((n) > 3)                                                                                                \
        _tile_zero(3);
#define STORE_C(q, n)                                                                                           \
    _tile_stored(0, (q)->c[0], 64);                                                                             \
    if ((n) > 1)                                                                                                \
        _tile_stored(1, (q)->c[1], 64);                                                                         \
    if ((n) > 2)                                                                                                \
        _tile_stored(2, (q)->c[2], 64);                                                                         \
    if ((n) > 3)                                                                                                \
        _tile_stored(3, (q)->c[3], 64);
/* One kernel: NC C tiles, FULL the step at byte kk of k, TAIL the step over the tail copies */
#define AMX_KERNEL(NAME, NC, FULL, TAIL)                                                                        \
    TAMX static void NAME(const amx_blk *q, int np)                                                             \
    {                                                                                                           \
        (void)np;                                                                                               \
        ZERO_C(NC)                                                                                              \
        for (int64_t kk = 0; kk < q->kfull; kk += 64) {                                                         \
            FULL                                                                                                \
        }                                                                                                       \
        if (q->at[0]) {                                                                                         \
            TAIL                                                                                                \
        }                                                                                                       \
        STORE_C(q, NC)                                                                                          \
    }
/* The kernels of one dot instruction (name suffix S) */
#define AMX_KERNELS(S, DOT)                                                                                     \
    AMX_KERNEL(k22_##S, 4,                                                                                      \
               STEP_22(DOT, q->a[0] + kk, q->a[1] + kk, q->b[0] + kk * 16, q->b[1] + kk * 16, q->astride),      \
               STEP_22(DOT, q->at[0], q->at[1], q->bt[0], q->bt[1], 64))                                        \
    AMX_KERNEL(k12_##S, 2, STEP_12(DOT, q->a[0] + kk, q->b[0] + kk * 16, q->b[1] + kk * 16, q->astride),        \
               STEP_12(DOT, q->at[0], q->bt[0], q->bt[1], 64))                                                  \
    AMX_KERNEL(k41_##S, 4,                                                                                      \
               STEP_41(DOT, q->a[0] + kk, q->a[1] + kk, q->a[2] + kk, q->a[3] + kk, q->b[0] + kk * 16,          \
                       q->astride),                                                                             \
               STEP_41(DOT, q->at[0], q->at[1], q->at[2], q->at[3], q->bt[0], 64))                              \
    AMX_KERNEL(k11_##S, 1, STEP_11(DOT, q->a[0] + kk, q->b[0] + kk * 16, q->astride),                           \
               STEP_11(DOT, q->at[0], q->bt[0], 64))                                                            \
    AMX_KERNEL(kt_##S, np,                                                                                      \
               STEP_T(DOT, np, q->a[0] + kk, q->b[0] + kk * 16, q->b[1] + kk * 16, q->b[2] + kk * 16,           \
                      q->astride),                                                                              \
               STEP_T(DOT, np, q->at[0], q->bt[0], q->bt[1], q->bt[2], 64))                                     \
    static const amx_kernels kernels_##S = {k22_##S, k12_##S, k41_##S, k11_##S, kt_##S};

typedef struct amx_kernels {
    void (*k22)(const amx_blk *, int), (*k12)(const amx_blk *, int), (*k41)(const amx_blk *, int);
    void (*k11)(const amx_blk *, int), (*kt)(const amx_blk *, int np);
} amx_kernels;

#define DOT_BF16(c, a, b) _tile_dpbf16ps(c, a, b)
#define DOT_U8S8(c, a, b) _tile_dpbusd(c, a, b)
#define DOT_S8U8(c, a, b) _tile_dpbsud(c, a, b)
AMX_KERNELS(bf16, DOT_BF16)
AMX_KERNELS(u8s8, DOT_U8S8)
AMX_KERNELS(s8u8, DOT_S8U8)

/* Per-call state: the K tail copies, the stack tiles the kernels store into */
typedef struct amx_rows {
    const kiln_amx_job *j;
    int64_t kfull, kt;   /* bytes of k: whole 64-byte steps, then the tail */
    int kcfg;            /* A's tile width in bytes: 64, or all of a K shorter than one step (one step, no tail) */
    uint8_t bt[6][1024] __attribute__((aligned(64)));   /* each panel's last kt / 4 k groups, zero groups after */
    uint8_t at[4][1024] __attribute__((aligned(64)));   /* a row block's last kt bytes, zero after, 16 rows */
    uint8_t cbuf[4][1024] __attribute__((aligned(64)));
    int n;              /* the call's C tiles ... */
    int64_t ti[4];      /* ... their first row ... */
    int tp[4];          /* ... and panel */
} amx_rows;

/* Row block r (rows [i, i + m)) of the next kernel call: its A, and its tail copy into slot r */
static void set_rows(amx_rows *w, amx_blk *q, int r, int64_t i, int m)
{
    const kiln_amx_job *j = w->j;
    q->a[r] = j->a + i * j->lda;
    q->at[r] = NULL;
    if (w->kt) {
        memset(w->at[r], 0, sizeof w->at[r]);
        for (int rr = 0; rr < m; rr++)
            memcpy(w->at[r] + rr * 64, q->a[r] + rr * j->lda + w->kfull, (size_t)w->kt);
        q->at[r] = w->at[r];
    }
}

/* C tile t of the next kernel call: rows [i, i + 16) x panel p */
static void set_c(amx_rows *w, amx_blk *q, int t, int64_t i, int p)
{
    q->c[t] = w->cbuf[t];
    w->ti[t] = i;
    w->tp[t] = p;
    w->n = t + 1;
    if (w->j->start)
        w->j->start(w->j->ctx, i, p);
}

/* After a kernel call: its tiles (rows each) out */
static void stored(amx_rows *w, int rows)
{
    const kiln_amx_job *j = w->j;
    for (int t = 0; t < w->n; t++) {
        int p = w->tp[t], cols = j->ncols - 16 * p < 16 ? j->ncols - 16 * p : 16;
        j->out(j->ctx, w->cbuf[t], rows, w->ti[t], p, cols);
    }
    w->n = 0;
}

static void set_b(amx_rows *w, amx_blk *q, int slot, int p)
{
    q->b[slot] = w->j->b + p * w->j->pstride;
    q->bt[slot] = w->bt[p];
}

/* Full 16-row blocks [i, i1): the panel pairs by 2 x 2 (1 x 2 for an odd last block), an odd last panel by 4 x 1
 * (1 x 1 for the blocks left) */
static void full_rows(amx_rows *w, const amx_kernels *k, int64_t i, int64_t i1, int np)
{
    configure(16, w->kcfg);
    amx_blk q;
    memset(&q, 0, sizeof q);
    q.astride = w->j->lda;
    q.kfull = w->kfull;
    for (int p = 0; p + 1 < np; p += 2) {
        set_b(w, &q, 0, p);
        set_b(w, &q, 1, p + 1);
        int64_t r = i;
        for (; r + 32 <= i1; r += 32) {
            set_rows(w, &q, 0, r, 16);
            set_rows(w, &q, 1, r + 16, 16);
            set_c(w, &q, 0, r, p), set_c(w, &q, 1, r, p + 1), set_c(w, &q, 2, r + 16, p), set_c(w, &q, 3, r + 16, p + 1);
            k->k22(&q, 2);
            stored(w, 16);
        }
        if (r < i1) {
            set_rows(w, &q, 0, r, 16);
            set_c(w, &q, 0, r, p), set_c(w, &q, 1, r, p + 1);
            k->k12(&q, 2);
            stored(w, 16);
        }
    }
    if (np % 2) {
        int p = np - 1;
        set_b(w, &q, 0, p);
        int64_t r = i;
        for (; r + 64 <= i1; r += 64) {
            for (int b = 0; b < 4; b++) {
                set_rows(w, &q, b, r + 16 * b, 16);
                set_c(w, &q, b, r + 16 * b, p);
            }
            k->k41(&q, 1);
            stored(w, 16);
        }
        for (; r < i1; r += 16) {
            set_rows(w, &q, 0, r, 16);
            set_c(w, &q, 0, r, p);
            k->k11(&q, 1);
            stored(w, 16);
        }
    }
}

TAMX void kiln__amx_rows(const kiln_amx_job *j, int64_t i0, int64_t i1)
{
    static const amx_kernels *const ks[3] = {&kernels_bf16, &kernels_u8s8, &kernels_s8u8};
    const amx_kernels *k = ks[j->dot];
    amx_rows w;
    w.j = j;
    w.n = 0;
    w.kfull = j->kb & ~(int64_t)63;
    w.kt = j->kb - w.kfull;
    w.kcfg = 64;
    if (w.kfull == 0) {
        /* K shorter than one step (a pointwise convolution over few channels): tiles of exactly K, no tail copies
         * (PP-OCRv4 det's 16 -> 32 @320x320 bf16 spent its time copying tails) */
        w.kfull = w.kcfg = (int)j->kb;
        w.kt = 0;
    }
    const int np = (j->ncols + 15) / 16;
    if (w.kt) {
        memset(w.bt, 0, sizeof w.bt);
        for (int p = 0; p < np; p++)
            memcpy(w.bt[p], j->b + p * j->pstride + w.kfull * 16, (size_t)(w.kt * 16));
    }
    int64_t ifull = i0 + (i1 - i0) / 16 * 16;
    if (ifull > i0)
        full_rows(&w, k, i0, ifull, np);
    if (ifull < i1) {
        int m = (int)(i1 - ifull);
        configure(m, w.kcfg);
        amx_blk q;
        memset(&q, 0, sizeof q);
        q.astride = j->lda;
        q.kfull = w.kfull;
        set_rows(&w, &q, 0, ifull, m);
        for (int p0 = 0; p0 < np; p0 += 3) {   /* up to 3 panels a call */
            const int n = np - p0 < 3 ? np - p0 : 3;
            for (int p = 0; p < n; p++) {
                set_b(&w, &q, p, p0 + p);
                set_c(&w, &q, p, ifull, p0 + p);
            }
            k->kt(&q, n);
            stored(&w, m);
        }
    }
    _tile_release();
}
#else
void kiln__amx_rows(const kiln_amx_job *j, int64_t i0, int64_t i1)
{
    (void)j, (void)i0, (void)i1;   /* never chosen: no AMX */
}
#endif

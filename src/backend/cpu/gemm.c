/* Single-precision GEMM for the CPU backend (Conv, MatMul, Gemm) with fused epilogues.
 *
 * C[M,N] = epi(alpha * op(A)[M,K] * op(B)[K,N] + beta * C), row-major with leading dimensions;
 * epi (optional, epilogue.h) adds a per-row or per-column bias and a residual matrix and
 * applies an activation. kiln__sgemm is the plain BLAS-like entry point, kiln__sgemm_ex
 * (gemm.h) the extended one (epilogue, caller-supplied B packer, pre-packed B); the direct
 * convolution driver kiln__conv_direct_f32 (gemm.h) runs the same micro-kernel with its B
 * operand read through an offset table.
 *
 * Structure (GotoBLAS / BLIS style):
 *   - C is split into a grid of tasks run through kiln__parallel_for; each task allocates its
 *     own packing buffers, so concurrent sgemm calls and threads never share mutable state.
 *   - Inside a task: NC-wide column blocks of C; KC-deep slices of K, for which op(B) is packed
 *     into NR-wide k-major panels (by the built-in packer or a caller-supplied one, e.g. an
 *     implicit im2col); MC-high row blocks; then an MR x NR register-blocked micro-kernel over
 *     each tile. On the last K slice the micro-kernel applies the epilogue before storing.
 *   - A is read in place by the AVX-512 micro-kernel when it is row-major (no packing: conv
 *     weights and activations are used as they are); otherwise it is packed into MR-high
 *     k-major panels. op(B) is always packed: read in place (rows of >= 512 columns, a CNN's
 *     28x28 and larger activations, until session 40) the 56x56 1x1 convs ran 9-22% slower on
 *     the 2-core Xeon, a panel's strided rows missing L1 on every row tile (bench/env_ab;
 *     bench/notes/fp32_vs_ort.md, session 40).
 *   - Micro-kernels, chosen at run time with kiln__cpu_has(): AVX-512F+FMA 8 x 32
 *     (with cheaper variants for 1-, 16- and 17-column edge tiles; with A read in place the
 *     17th column is a dot product along k) and 12 x 32 for A read in place against pre-packed
 *     B (12 FMAs per B vector; mixed with 8-row tiles so that heights split without waste),
 *     AVX2+FMA 6 x 16 (with 4- and 2-row variants for edge tiles; bias, residual, Relu and GELU
 *     applied in registers), and
 *     portable C 6 x 8 (GNU vector extensions). The x86 ones live in x86/gemm_avx2.c and
 *     x86/gemm_avx512.c (with the AVX-512 one-row GEMV and direct-convolution task), over the types of
 *     gemm_impl.h; this file is the driver (blocking, packing, threading) and the portable kernel.
 *   - A read in place whose rows are a multiple of 2 KB apart is first copied to a padded stride
 *     (unalias_a: such rows share L1 sets); pre-packed B panels are prefetched into L2 one panel
 *     ahead (after a block's last panel, the first panel of the next K slice).
 *   - A grid split only along N gives each thread one contiguous task (its columns stay its own from
 *     layer to layer; kiln__sgemm_ex); each thread's packing buffer is a reusable per-thread scratch
 *     buffer (scratch.h). A grid split along M packs op(B) once for all its tasks where packing
 *     costs (share_b); a grid with several tasks along N packs op(A) once for all of them where the
 *     kernel reads packed A (share_a).
 *   - Tiny problems and GEMV shapes (M == 1 or N == 1) take a direct path without packing; one
 *     row against pre-packed B (a classifier's last Gemm) streams the panels once (row512).
 * Edge tiles are handled by zero padding in the packed panels and masked / partial stores, so
 * every size is supported. With beta == 0, C is never read. */
#include "gemm_impl.h"
#include "vmath_avx2.h"
#include <stdatomic.h>

/* ------------------------------------------------------------------------------------------
 * Portable micro-kernel: 6 x 8, written with GNU vector extensions (4 floats per vector)
 * ------------------------------------------------------------------------------------------ */

#define MR_C 6
#define NR_C 8

typedef float gemm_v4 __attribute__((vector_size(16)));

static void ukr_c(int64_t kc, const float *pa, int64_t lda, const float *pb, float *c, int64_t ldc, int m, int n,
                  const tile_args *t)
{
    (void)lda; /* always packed */
    gemm_v4 acc[MR_C][2];
#pragma GCC unroll 8
    for (int i = 0; i < MR_C; i++)
        acc[i][0] = acc[i][1] = (gemm_v4){0, 0, 0, 0};
    for (int64_t k = 0; k < kc; k++) {
        gemm_v4 b0, b1;
        memcpy(&b0, pb, sizeof b0);
        memcpy(&b1, pb + 4, sizeof b1);
#pragma GCC unroll 8
        for (int i = 0; i < MR_C; i++) {
            gemm_v4 a = {pa[i], pa[i], pa[i], pa[i]};
            acc[i][0] += a * b0;
            acc[i][1] += a * b1;
        }
        pa += MR_C;
        pb += NR_C;
    }
    float tt[MR_C * NR_C];
    memcpy(tt, acc, sizeof tt);
    store_tile(tt, NR_C, c, ldc, m, n, t);
}

static void pack_c_a(const float *src, int64_t si, int64_t sk, int64_t n, int64_t kc, float *dst)
{
    pack_generic(src, si, sk, n, kc, dst, MR_C);
}
static void pack_c_b(const float *src, int64_t si, int64_t sk, int64_t n, int64_t kc, float *dst)
{
    pack_generic(src, si, sk, n, kc, dst, NR_C);
}

static const gemm_impl impl_c = {MR_C, NR_C, ukr_c, pack_c_a, pack_c_b, 128, 256, 1024, false, 0, NULL, false, false};


#ifndef GEMM_NC_SPLIT
#define GEMM_NC_SPLIT 128
#endif

/* KILN_GEMM_FORCE_AVX2 / KILN_GEMM_FORCE_C (build-time testing aids) skip the wider kernels. */
static const gemm_impl *select_impl(void)
{
#if GEMM_X86
#if !defined(KILN_GEMM_FORCE_AVX2) && !defined(KILN_GEMM_FORCE_C)
    if (kiln__cpu_has(KILN_CPU_AVX512_DQ_FMA))
        return &kiln__gemm_impl_avx512;
#endif
#if !defined(KILN_GEMM_FORCE_C)
    if (kiln__cpu_has(KILN_CPU_AVX2_FMA))
        return &kiln__gemm_impl_avx2;
#endif
#endif
    return &impl_c;
}

/* ------------------------------------------------------------------------------------------
 * Problem description and the direct (unpacked) path
 * ------------------------------------------------------------------------------------------ */

typedef struct gemm_job {
    const gemm_impl *im;
    int64_t M, N, K;
    float alpha, beta;
    const float *A, *B;
    const float *B2;      /* rows k >= kb2 of op(B) from B2 (kiln_gemm.B2), or NULL */
    int64_t kb2;
    float *C;
    int64_t ldc;
    int64_t a_rs, a_cs;   /* op(A)(i,k) = A[i*a_rs + k*a_cs] */
    int64_t b_rs, b_cs;   /* op(B)(k,j) = B[k*b_rs + j*b_cs] */
    kiln_gemm_packb_fn packb;
    void *packb_ctx;
    const float *bpack;   /* op(B) pre-packed in full-K panels, or NULL */
    const float *apack_next; /* the next call's packed A (kiln_gemm.apack_next), or NULL */
    const float *apack;   /* op(A) in full-K mr-row panels (apack[p*K*mr + k*mr + i] = op(A)(p*mr + i, k)):
                           * given pre-packed (kiln_gemm.apack: the AVX2 Winograd filters) or packed once by
                           * this call for all its tasks (share_a); NULL: each task packs its blocks */
    bool b_shared;        /* bpack was packed by this call for all its tasks (share_b), not given */
    const kiln_epi *epi;  /* NULL when there is nothing to do */
    bool direct_a;        /* the micro-kernel reads A in place */
    /* task grid */
    int64_t tm, tn;       /* tasks along M and N */
    int64_t mstep, nstep; /* the most rows / columns of a task (multiples of mr / nr; task_span) */
    int64_t mc, kc, nc;   /* blocking actually used */
    size_t buf_floats;    /* packing buffer size per task */
    unsigned long long gen;   /* this call's number: panel_at's column copies are reused within one call only */
    bool w49;             /* a block's last 49 columns (two packed panels) as one tile (ukr49; tile_cols) */
} gemm_job;

static atomic_ullong gemm_gen;

/* C = beta * C over an m x n block (beta == 0 writes zeros without reading C). */
static void scale_c(float *C, int64_t ldc, int64_t m, int64_t n, float beta)
{
    for (int64_t i = 0; i < m; i++) {
        float *cr = C + i * ldc;
        if (beta == 0.0f)
            memset(cr, 0, (size_t)n * sizeof(float));
        else if (beta != 1.0f)
            for (int64_t j = 0; j < n; j++)
                cr[j] *= beta;
    }
}

/* Unpacked computation of rows [m0,m1) x columns [n0,n1) of C. The hot inner loops have
 * constant trip counts so they vectorize for the target the body is instantiated with. */
static inline __attribute__((always_inline)) void direct_body(const gemm_job *g, int64_t m0, int64_t m1, int64_t n0,
                                                              int64_t n1)
{
    enum { JB = 512, U = 16 };
    float acc[JB];
    const int64_t K = g->K, a_rs = g->a_rs, a_cs = g->a_cs, b_rs = g->b_rs, b_cs = g->b_cs;
    const float alpha = g->alpha, beta = g->beta;
    for (int64_t i = m0; i < m1; i++) {
        const float *arow = g->A + i * a_rs;
        float *crow = g->C + i * g->ldc;
        for (int64_t j0 = n0; j0 < n1; j0 += JB) {
            int64_t nj = min64(JB, n1 - j0);
            if (b_cs == 1 && nj >= U) {
                /* op(B) rows contiguous: axpy form */
                for (int64_t j = 0; j < nj; j++)
                    acc[j] = 0.0f;
                for (int64_t k = 0; k < K; k++) {
                    float a = arow[k * a_cs];
                    const float *brow = g->B + k * b_rs + j0;
                    int64_t j = 0;
                    for (; j + U <= nj; j += U)
                        for (int u = 0; u < U; u++)
                            acc[j + u] += a * brow[j + u];
                    for (; j < nj; j++)
                        acc[j] += a * brow[j];
                }
            } else {
                /* dot form with U partial sums */
                for (int64_t j = 0; j < nj; j++) {
                    const float *bcol = g->B + (j0 + j) * b_cs;
                    float sum[U] = {0};
                    int64_t k = 0;
                    if (a_cs == 1 && b_rs == 1) {
                        for (; k + U <= K; k += U)
                            for (int u = 0; u < U; u++)
                                sum[u] += arow[k + u] * bcol[k + u];
                    } else {
                        for (; k + U <= K; k += U)
                            for (int u = 0; u < U; u++)
                                sum[u] += arow[(k + u) * a_cs] * bcol[(k + u) * b_rs];
                    }
                    for (int h = U / 2; h > 0; h /= 2)
                        for (int u = 0; u < h; u++)
                            sum[u] += sum[u + h];
                    for (; k < K; k++)
                        sum[0] += arow[k * a_cs] * bcol[k * b_rs];
                    acc[j] = sum[0];
                }
            }
            float *cr = crow + j0;
            if (beta == 0.0f) {
                for (int64_t j = 0; j < nj; j++)
                    cr[j] = alpha * acc[j];
            } else {
                for (int64_t j = 0; j < nj; j++)
                    cr[j] = alpha * acc[j] + beta * cr[j];
            }
            if (g->epi)
                kiln__epi_apply_f32(g->epi, cr, g->ldc, 1, nj, i, j0);
        }
    }
}

static void direct_block_c(const gemm_job *g, int64_t m0, int64_t m1, int64_t n0, int64_t n1)
{
    direct_body(g, m0, m1, n0, n1);
}
#if GEMM_X86
__attribute__((target("avx2,fma"))) static void direct_block_avx2(const gemm_job *g, int64_t m0, int64_t m1,
                                                                   int64_t n0, int64_t n1)
{
    direct_body(g, m0, m1, n0, n1);
}
__attribute__((target("avx512f,fma"))) static void direct_block_avx512(const gemm_job *g, int64_t m0, int64_t m1,
                                                                        int64_t n0, int64_t n1)
{
    direct_body(g, m0, m1, n0, n1);
}
#endif

static void direct_block(const gemm_job *g, int64_t m0, int64_t m1, int64_t n0, int64_t n1)
{
#if GEMM_X86
    if (g->im == &kiln__gemm_impl_avx512)
        direct_block_avx512(g, m0, m1, n0, n1);
    else if (g->im == &kiln__gemm_impl_avx2)
        direct_block_avx2(g, m0, m1, n0, n1);
    else
#endif
        direct_block_c(g, m0, m1, n0, n1);
}

/* Direct path split over rows (or over 256-column chunks when M is small) for the pool. */
static void direct_task_rows(void *ctx, int64_t begin, int64_t end)
{
    const gemm_job *g = ctx;
    direct_block(g, begin, end, 0, g->N);
}
static void direct_task_cols(void *ctx, int64_t begin, int64_t end)
{
    const gemm_job *g = ctx;
    direct_block(g, 0, g->M, begin * 256, min64(g->N, end * 256));
}

#if GEMM_X86
/* M == 1 against pre-packed B (AVX-512): panels [begin, end) by row512 */
static void row_task(void *ctx, int64_t begin, int64_t end)
{
    const gemm_job *g = ctx;
    tile_args t = {.alpha = g->alpha, .beta = g->beta, .epi = g->epi};
    kiln__gemm_row512(g->K, g->A, g->a_cs, g->bpack, begin, end, g->N, g->C, &t);
}
#endif

/* ------------------------------------------------------------------------------------------
 * Packed path
 * ------------------------------------------------------------------------------------------ */

/* Rows of the next tile when r rows are left and the tall kernel may be used: tall tiles while
 * the rest still splits into full tiles (12a + 8b covers every multiple of 4 but 4 and 16). */
static int64_t tile_rows(const gemm_impl *im, int64_t r)
{
    return r >= im->mr_tall && r != 2 * im->mr ? im->mr_tall : im->mr;
}

/* Whether a block runs row tile by row tile across its panels rather than panel by panel: with B
 * packed by the task, one K slice and a C larger than L2 (>= 1 MB), each C tile is
 * computed and stored at once. Row tiles outside make C's rows stream left to right a tile height
 * at a time, which the hardware prefetchers follow (panels outside advance every row of the block
 * one panel at a time: too many streams), and the packed B block (<= 512 KB) stays in L2 for every
 * row tile. Small-K 1x1 convs (ResNet-50's 64->256 @56 with the residual: 2.1-2.5 -> 1.7-1.9 ms on
 * one thread) write C the most per flop; a C that fits in L2 (the Winograd GEMMs) gains nothing.
 * With packed A (AVX2: its mr-row panels of the block) the same: the 64->256 @56 conv with the
 * residual 2.3-2.6 -> 1.3-1.6 ms on one thread (AVX2 on the Zen 4 host, 3 alternated runs). */
static bool rows_outer(const gemm_job *g, int64_t kc, int64_t nc)   /* (mr-row tiles: B is not pre-packed) */
{
    return (!g->bpack || g->b_shared) && kc == g->K && kc * nc <= 128 * 1024 &&
           g->M * g->N >= 256 * 1024;
}

/* Columns of the tile at jr of a block of nc columns: nr, the rest at the end, or nr + 1 where
 * the kernel takes 17 columns and 17 are left (AVX2: 49 = 16 + 16 + 17, not 16 + 16 + 16 + 1). */
static int tile_cols(const gemm_job *g, int64_t jr, int64_t nc, const float *colv)
{
    const int nr = g->im->nr;
    if (g->w49 && colv && nc - jr == W49_COLS)
        return W49_COLS;
    return g->im->ukr17 && colv && nc - jr == nr + 1 ? nr + 1 : (int)min64(nr, nc - jr);
}

/* The K slice [pc, pc+kc) of panel jr of the block at column jc, for the micro-kernels: in the
 * task's packed block pb or in the pre-packed B; sets t's column and, for a 17-column tile (of A
 * read in place, AVX-512; or of the AVX2 kernel: the next panel's column 0), its column 16 side by
 * side (colv).
 * Those columns are copied once per call, panel slice and buffer: a task runs its rows in blocks of mc (ResNet-50's
 * 14x14 layers: up to 3 a task), each of which asked for the same copy again, kc floats a column, each from another
 * line of the panel (N = 196: 4 columns, a quarter of the slice's lines read for 4 floats each); the thread's last copy
 * is kept (its key: the call's number, the panel slice's address, column, K slice and width, and the buffer). */
static const float *panel_at(const gemm_job *g, tile_args *t, const float *pb, float *colv, int64_t jc, int64_t jr,
                             int64_t pc, int64_t kc, int n)
{
    const int nr = g->im->nr;
    const float *bp = g->bpack ? g->bpack + ((jc + jr) / nr) * g->K * nr + pc * nr : pb + jr * kc;
    t->j0 = jc + jr;
    t->colv = NULL;
    const float *bq = bp;   /* the panel whose columns colv holds */
    t->pbn = NULL;
    if (n == W49_COLS)      /* columns 32-48: the next panel, its column 16 in colv */
        t->pbn = bq = bp + (g->bpack ? g->K : kc) * nr;
    const bool narrow = g->direct_a && nr == 32 && n <= DOT_COLS;
    const float *c16 = narrow                                                   ? NULL
                       : g->direct_a && (n == 17 || n == W49_COLS) && nr == 32 ? bq + 16
                       : g->im->ukr17 && n == nr + 1        ? bp + (g->bpack ? g->K : kc) * nr
                                                            : NULL;
    if (!colv || !(narrow || c16))
        return bp;
    t->colv = colv;
    static _Thread_local struct {
        unsigned long long gen;
        const float *bp;
        const float *colv;
        int64_t jc, pc, kc;
        int n;
    } last;
    if (last.gen == g->gen && last.bp == bq && last.colv == colv && last.jc == jc && last.pc == pc && last.kc == kc &&
        last.n == n)
        return bp;   /* copied by this thread for this call's panel slice already */
    last.gen = g->gen;
    last.bp = bq;
    last.colv = colv;
    last.jc = jc;
    last.pc = pc;
    last.kc = kc;
    last.n = n;
    if (narrow) {
        /* a narrow last panel (a 14x14 map's N = 196 = 6 x 32 + 4) with A read in place: its n columns
         * side by side along k, zero columns up to DOT_COLS, for the dot-product tile (colv[c * kc + k]) */
        for (int c = 0; c < DOT_COLS; c++)
            for (int64_t k = 0; k < kc; k++)
                colv[c * kc + k] = c < n ? bq[k * nr + c] : 0.0f;
    } else {
        for (int64_t k = 0; k < kc; k++)
            colv[k] = c16[k * nr];
    }
    return bp;
}

/* One tile: m rows of C from row ir of the block at (ic, pc) (c: its column), panel bp of n columns;
 * more than mr rows (only where the 12-row kernel applies) run the 12-row kernel. */
static void run_tile(const gemm_job *g, tile_args *t, const float *pa, const float *bp, float *c, int64_t ic,
                     int64_t pc, int64_t kc, int64_t ir, int m, int n)
{
    const gemm_impl *im = g->im;
    t->i0 = ic + ir;
    const bool direct = g->direct_a;
    const float *a = direct     ? g->A + (ic + ir) * g->a_rs + pc
                     : g->apack ? g->apack + (ic + ir) / im->mr * g->K * im->mr + pc * im->mr
                                : pa + ir * kc;
    (m > im->mr ? im->ukr_tall : im->ukr)(kc, a, direct ? g->a_rs : 0, bp, c + ir * g->ldc, g->ldc, m, n, t);
}

/* Row-major A packed block by block (the AVX2 kernel's conv weights: ~100 MB per ResNet-50 run,
 * more than L3, so they come from memory): while a block runs, the block packed next (the next
 * row block, else the first of the next K slice) is prefetched into L2, a share per tile, so that
 * its packing does not wait on memory with the FMA units idle. */
typedef struct a_ahead {
    const char *row;    /* the row being fetched, at the block's first column; NULL: nothing to fetch */
    int64_t ld, lpr;    /* bytes between rows, lines per row */
    int64_t rows, step; /* rows left, lines per tile */
    int64_t line;       /* next line of the row */
} a_ahead;

static a_ahead a_ahead_init(const gemm_job *g, int64_t m0, int64_t m1, int64_t ic, int64_t mc, int64_t pc,
                            int64_t kc, int64_t nc)
{
    a_ahead a = {0};
    int64_t i2 = ic + mc, p2 = pc;
    const float *ap = g->apack;
    if (i2 >= m1) {
        i2 = m0;
        p2 = pc + kc;
    }
    if (p2 >= g->K && g->apack_next) {   /* the last block: the next call's first one */
        ap = g->apack_next;
        p2 = 0;
    }
    if (g->direct_a || (!g->apack && g->a_cs != 1) || p2 >= g->K)
        return a;
    int64_t rows = min64(g->mc, m1 - i2), cols = min64(g->kc, g->K - p2);
    if (g->apack) {   /* pre-packed (the Winograd filters): its mr-row panels, kc * mr floats each */
        const int mr = g->im->mr;
        a.row = (const char *)(ap + i2 / mr * g->K * mr + p2 * mr);
        a.ld = g->K * mr * (int64_t)sizeof(float);
        a.lpr = (cols * mr * (int64_t)sizeof(float) + 63) / 64 + 1;
        a.rows = ceil_div(rows, mr);
    } else {
        a.row = (const char *)(g->A + i2 * g->a_rs + p2);
        a.ld = g->a_rs * (int64_t)sizeof(float);
        a.lpr = (cols * (int64_t)sizeof(float) + 63) / 64 + 1;
        a.rows = rows;
    }
    a.step = ceil_div(a.rows * a.lpr, ceil_div(nc, g->im->nr) * ceil_div(mc, g->im->mr));
    return a;
}

static inline void a_ahead_step(a_ahead *a)
{
    for (int64_t s = a->step; s > 0 && a->rows > 0; s--) {
        __builtin_prefetch(a->row + a->line * 64, 0, 2);
        if (++a->line == a->lpr) {
            a->line = 0;
            a->row += a->ld;
            a->rows--;
        }
    }
}

/* Rows [pc, pc+kc) x columns [jc, jc+nc) of op(B) packed into nr-wide panels at pb (the pack_b layout), from B and,
 * for rows >= kb2, from B2: a slice across kb2 is packed panel by panel, each panel's rows from both. */
static void pack_b_rows(const gemm_job *g, int64_t pc, int64_t kc, int64_t jc, int64_t nc, float *pb)
{
    const gemm_impl *im = g->im;
    if (!g->B2 || pc + kc <= g->kb2) {
        im->pack_b(g->B + pc * g->b_rs + jc * g->b_cs, g->b_cs, g->b_rs, nc, kc, pb);
        return;
    }
    if (pc >= g->kb2) {
        im->pack_b(g->B2 + (pc - g->kb2) * g->b_rs + jc * g->b_cs, g->b_cs, g->b_rs, nc, kc, pb);
        return;
    }
    const int64_t nr = im->nr, k1 = g->kb2 - pc;
    for (int64_t j = 0; j < nc; j += nr) {
        int64_t n = min64(nr, nc - j);
        float *d = pb + j / nr * kc * nr;
        im->pack_b(g->B + pc * g->b_rs + (jc + j) * g->b_cs, g->b_cs, g->b_rs, n, k1, d);
        im->pack_b(g->B2 + (jc + j) * g->b_cs, g->b_cs, g->b_rs, n, kc - k1, d + k1 * nr);
    }
}

/* Rows [m0,m1) x columns [n0,n1) of C, with this task's packing buffers pa (unused with
 * direct A) and pb. */
static void packed_block(const gemm_job *g, int64_t m0, int64_t m1, int64_t n0, int64_t n1, float *pa, float *pb,
                         float *colv)
{
    const gemm_impl *im = g->im;
    const int mr = im->mr, nr = im->nr;
    const int64_t K = g->K, ldc = g->ldc;
    const bool direct = g->direct_a;
    /* 12-row tiles against pre-packed B (MatMul / Gemm weights streaming from memory: 1.5x fewer
     * passes over each panel) where A's rows spread over enough L1 sets (see unalias_a). Conv
     * GEMMs keep 8-row tiles: 12 in-model gave them nothing measurable (ResNet-50 per layer 0.93 to
     * 1.04 of the 8-row tiles over five alternated runs at load 3-5). */
    const bool tall_ok = direct && im->ukr_tall && g->bpack && !g->b_shared && g->a_rs % 512 != 0;
    /* the next tile's A rows are prefetched into L1 during a tile, unless A's rows are a multiple of 4 KB
     * apart: then all 16 rows (this tile's and the next's) map to one L1 set of 8 ways and evict each
     * other. ResNet-50's 1x1 convs with K = 1024 / 2048 (conv weights read in place, N <= 196): in-model
     * profile 0.975 (7/8) and 0.917 (8/8), bench_conv_f32 1024->256 @14 0.91 / 0.95, 1024->512 0.91 / 0.94
     * (warm / cold weights). With rows 2 KB apart (4 per set) the prefetch still pays: 512->2048 @7 1.06-1.08
     * without it. */
    const bool pf_next_a = direct && g->a_rs % 1024 != 0;
    for (int64_t jc = n0; jc < n1; jc += g->nc) {
        int64_t nc = min64(g->nc, n1 - jc);
        for (int64_t pc = 0; pc < K; pc += g->kc) {
            int64_t kc = min64(g->kc, K - pc);
            tile_args t = {.alpha = g->alpha, .beta = pc == 0 ? g->beta : 1.0f,   /* later K slices accumulate */
                           .epi = pc + kc >= K ? g->epi : NULL};
            if (g->bpack)
                ; /* panels already in place */
            else if (g->packb)
                g->packb(g->packb_ctx, pc, kc, jc, nc, nr, pb);
            else
                pack_b_rows(g, pc, kc, jc, nc, pb);
            for (int64_t ic = m0; ic < m1; ic += g->mc) {
                int64_t mc = min64(g->mc, m1 - ic);
                if (!direct && !g->apack)
                    im->pack_a(g->A + ic * g->a_rs + pc * g->a_cs, g->a_rs, g->a_cs, mc, kc, pa);
                float *cblk = g->C + ic * ldc + jc;
                if (rows_outer(g, kc, nc)) {
                    /* one K slice: each row tile runs across every panel of the block (see rows_outer) */
                    for (int64_t ir = 0; ir < mc; ir += mr) {
                        for (int64_t jr = 0, n; jr < nc; jr += n) {
                            n = tile_cols(g, jr, nc, colv);
                            const float *bp = panel_at(g, &t, pb, colv, jc, jr, pc, kc, (int)n);
                            /* the next row tile's A (weights, from memory) during the first panel */
                            t.pf_a = direct && jr == 0 && ir + 2 * mr <= mc ? g->A + (ic + ir + mr) * g->a_rs + pc
                                                                            : NULL;
                            t.pf_rows = mr;
                            run_tile(g, &t, pa, bp, cblk + jr, ic, pc, kc, ir, (int)min64(mr, mc - ir), (int)n);
                        }
                    }
                    continue;
                }
                a_ahead ah = a_ahead_init(g, m0, m1, ic, mc, pc, kc, nc);
                for (int64_t jr = 0, n; jr < nc; jr += n) {
                    n = tile_cols(g, jr, nc, colv);
                    const float *bp = panel_at(g, &t, pb, colv, jc, jr, pc, kc, (int)n);
                    /* pre-packed B streams from memory: while this panel slice is used by every row
                     * tile (from L1/L2), the next one is fetched into L2, a share per tile; after the
                     * block's last panel, the first panel of the next K slice (else its first row
                     * tile waits on memory: BERT's 2-thread tasks, 96 columns, start 3 to 12 K slices) */
                    const float *nbp = jr + n < nc ? bp + K * nr
                                       : pc + kc < K && g->bpack ? g->bpack + jc / nr * K * nr + (pc + kc) * nr
                                                                 : NULL;
                    const char *nb = g->bpack && mc > mr ? (const char *)nbp : NULL;
                    const int64_t nb_lines = kc * nr * (int64_t)sizeof(float) / 64;
                    const bool tall = tall_ok && n > 17 && n <= nr;
                    /* the next panel's lines in equal shares over this panel's row tiles (counted as they run:
                     * 12-row tiles are fewer than mc / mr, and shares of mc / mr tiles left a third of the next
                     * panel to be read from memory by its first tile: BERT-base's GEMMs 0.93, bench_gemm_f32) */
                    int64_t ntiles = 0;
                    for (int64_t r = 0; r < mc; ntiles++)
                        r += tall ? tile_rows(im, mc - r) : mr;
                    const int64_t nb_step = ceil_div(nb_lines, ntiles);
                    for (int64_t ir = 0, pl = 0, h; ir < mc; ir += h, pl += nb_step) {
                        h = tall ? tile_rows(im, mc - ir) : mr;
                        int64_t nbl = nb && pl < nb_lines ? min64(pl + nb_step, nb_lines) - pl : 0;
                        t.pf_b = NULL;
                        t.pf_b_lines = 0;
                        if (h > mr && K > im->kc) {
                            /* the tall kernel spreads them over its k loop: MatMul weights from DRAM (K > 256;
                             * the Winograd GEMMs' panels, K <= 256, were just written to L2: a burst as before) */
                            t.pf_b = nbl ? nb + pl * 64 : NULL;
                            t.pf_b_lines = (int)nbl;
                        } else {
                            for (int64_t l = 0; l < nbl; l++)
                                __builtin_prefetch(nb + (pl + l) * 64, 0, 2);
                        }
                        int64_t hn = tall && ir + h < mc ? tile_rows(im, mc - ir - h) : mr;
                        t.pf_a = pf_next_a && ir + h + hn <= mc ? g->A + (ic + ir + h) * g->a_rs + pc : NULL;
                        t.pf_rows = (int)hn;
                        a_ahead_step(&ah);
                        run_tile(g, &t, pa, bp, cblk + jr, ic, pc, kc, ir, (int)min64(h, mc - ir), n);
                    }
                }
            }
        }
    }
}

/* Whether epi's residual is C itself (a FusedConv computed in place over it; beta 0, C's row stride). */
static bool res_is_c(const kiln_epi *epi, const float *C, int64_t ldc, float beta)
{
    return epi && epi->res == C && epi->ldr == ldc && beta == 0.0f;
}

/* An epilogue whose residual is C itself (beta 0) as C = epi'(alpha op(A) op(B) + 1 * C), epi' its bias and
 * activation (own: its storage): for the paths that store into C before the epilogue (several K slices, the
 * direct path). The sum rounds in another order than the epilogue's (bias, then residual). */
static void res_as_c(kiln_epi *own, const kiln_epi **epi, float *beta)
{
    *own = **epi;
    own->res = NULL;
    *epi = kiln__epi_is_noop(own) ? NULL : own;
    *beta = 1.0f;
}

/* Out of memory: the same computation with one-panel blocking and buffers on the stack. */
static void packed_block_small(const gemm_job *g, int64_t m0, int64_t m1, int64_t n0, int64_t n1)
{
    enum { KS = 64, PMAX = 32 };
    float pa[KS * PMAX] __attribute__((aligned(64)));
    float pb[KS * PMAX] __attribute__((aligned(64)));
    gemm_job s = *g;
    kiln_epi e_own;
    if (res_is_c(s.epi, s.C, s.ldc, s.beta))
        res_as_c(&e_own, &s.epi, &s.beta);   /* K in slices of KS: the residual (C itself) read as C first */
    s.kc = KS;
    s.mc = g->im->mr;
    s.nc = g->im->nr;
    packed_block(&s, m0, m1, n0, n1, pa, pb, NULL);
}

/* Task i of t along a dimension of n elements in panels of w: panels [i*p/t, (i+1)*p/t) of the p = ceil(n/w), so
 * the tasks differ by at most one panel (at most ceil(p/t) panels each: mstep / nstep). ResNet-50's 56x56 layers
 * split N = 98 panels into 8 tasks: 13 panels each and 7 for the last one put 52 panels on one thread and 46 on
 * the other; now 12 or 13 each, 49 and 49. Panel-aligned, so every element is computed as before. */
static void task_span(int64_t n, int w, int64_t t, int64_t i, int64_t *b, int64_t *e)
{
    int64_t p = ceil_div(n, w);
    *b = i * p / t * w;
    *e = min64(n, (i + 1) * p / t * w);
}

/* This thread's packing buffers (B block, narrow-panel columns, A block); false when out of memory. */
static bool task_buffers(const gemm_job *g, float **pa, float **pb, float **colv)
{
    void *raw = kiln__scratch(KILN_SCRATCH_GEMM, g->buf_floats * sizeof(float) + 128);
    *pa = *pb = *colv = NULL;
    if (!raw)
        return false;
    *pb = (float *)(((uintptr_t)raw + 63) & ~(uintptr_t)63);
    *colv = *pb + g->nc * g->kc;
    *pa = *colv + DOT_COLS * g->kc;
    *pa = (float *)(((uintptr_t)*pa + 63) & ~(uintptr_t)63);
    return true;
}

static void gemm_task(void *ctx, int64_t begin, int64_t end)
{
    const gemm_job *g = ctx;
    float *pa, *pb, *colv;
    bool raw = task_buffers(g, &pa, &pb, &colv);
    for (int64_t t = begin; t < end; t++) {
        int64_t ti = t / g->tn, tj = t % g->tn;
        int64_t m0, m1, n0, n1;
        task_span(g->M, g->im->mr, g->tm, ti, &m0, &m1);
        task_span(g->N, g->im->nr, g->tn, tj, &n0, &n1);
        if (m0 >= m1 || n0 >= n1)
            continue;
        if (raw)
            packed_block(g, m0, m1, n0, n1, pa, pb, colv);
        else
            packed_block_small(g, m0, m1, n0, n1);
    }
}

/* Direct A whose row stride is a multiple of 4 KB puts the rows of a tile in one L1 set (64 sets of
 * 64-byte lines: a 4 KB period), more rows than the cache has ways: they evict one another on every
 * k step. Such an A (several tiles high) is copied once into a scratch buffer with a row stride of K
 * rounded up to 16 floats plus 16, which spreads the rows over the sets, when C is wide enough
 * (N >= 512) for the copy to cost little next to the product (BERT's FFN down-projection, K = 3072).
 * Rows 2 KB apart (4 per set) are read in place: ResNet-50's 1x1 512->128 and 512->256 @28 (conv
 * weights, from memory in a model run) ran at 0.93-0.96 of their time with the copy (in-model
 * profile, 2 threads, 8 ABBA pairs, 8/8 faster; the calling thread copied while the other waited). */
typedef struct copy_rows_job {
    const float *src;
    float *dst;
    int64_t ls, ld, K;
} copy_rows_job;

static void copy_rows_task(void *ctx, int64_t b, int64_t e)
{
    const copy_rows_job *j = ctx;
    for (int64_t i = b; i < e; i++)
        memcpy(j->dst + i * j->ld, j->src + i * j->ls, (size_t)j->K * sizeof(float));
}

/* The rows are copied by all the threads: BERT-base's FFN down-projection (1.5 MB of A) kept the other
 * thread waiting 150-400 us per layer while the calling thread copied alone. */
static void unalias_a(kiln_pool *pool, int nthreads, gemm_job *g)
{
    if (!g->direct_a || g->M <= g->im->mr || g->N < 512 || g->a_rs % 1024 != 0)
        return;
    int64_t ld = (g->K + 15) / 16 * 16 + 16;
    float *ac = kiln__scratch(KILN_SCRATCH_GEMM_A, (size_t)(g->M * ld) * sizeof(float));
    if (!ac)
        return;   /* out of memory: aliased but correct */
    copy_rows_job j = {.src = g->A, .dst = ac, .ls = g->a_rs, .ld = ld, .K = g->K};
    kiln__parallel_for(pool, nthreads, g->M, 1 + 16384 / g->K, copy_rows_task, &j);
    g->A = ac;
    g->a_rs = ld;
}

/* Row panels [b, e) of op(A) (mr rows each) packed over the whole K into the apack layout. */
static void packa_task(void *ctx, int64_t b, int64_t e)
{
    gemm_job *g = ctx;
    const int mr = g->im->mr;
    int64_t i0 = b * mr, n = min64(e * mr, g->M) - i0;
    g->im->pack_a(g->A + i0 * g->a_rs, g->a_rs, g->a_cs, n, g->K, (float *)g->apack + b * g->K * mr);
}

/* A grid with several tasks along N (BERT's M = 128 GEMMs at 2 threads: 8 column tasks) has every
 * task pack the same rows of op(A), K slice by K slice, for itself: with the micro-kernels that read
 * packed A (AVX2, portable C; AVX-512 reads row-major A in place) a 768 x 768 projection packed all
 * of A 8 times. Here op(A) is packed once, each thread a share of the row panels, into a scratch
 * buffer (up to 16 MB) that every task reads; the products are the same, term for term. */
static void share_a(kiln_pool *pool, int nthreads, gemm_job *g)
{
    if (g->direct_a || g->apack || g->tn < 2)
        return;   /* A read in place, or given packed */
    int64_t pm = ceil_div(g->M, g->im->mr), floats = pm * g->K * g->im->mr;
    if (floats > 4 * 1024 * 1024)
        return;
    /* the slot unalias_a uses: it only runs with direct A */
    float *dst = kiln__scratch(KILN_SCRATCH_GEMM_A, (size_t)floats * sizeof(float));
    if (!dst)
        return;   /* out of memory: each task packs its own */
    g->apack = dst;
    kiln__parallel_for(pool, nthreads, pm, 1, packa_task, g);
}

/* Columns [b*nr, e*nr) of op(B) packed over the whole K into the kiln_gemm.bpack layout at dst. */
typedef struct packb_job {
    const gemm_job *g;
    float *dst;
} packb_job;

static void packb_task(void *ctx, int64_t b, int64_t e)
{
    const packb_job *j = ctx;
    const gemm_job *g = j->g;
    const int nr = g->im->nr;
    int64_t j0 = b * nr, nc = min64(e * nr, g->N) - j0;
    float *d = j->dst + b * g->K * nr;
    if (g->packb)
        g->packb(g->packb_ctx, 0, g->K, j0, nc, nr, d);
    else
        pack_b_rows(g, 0, g->K, j0, nc, d);
}

/* A grid split along M (a small N: a CNN's 28x28 and smaller layers) has every task pack all of
 * op(B) for itself: nthreads packings of the same data. Where packing costs (a caller's packer:
 * implicit im2col, dequantized weights) or K is small (K <= 512), op(B) is instead packed once,
 * each thread a share of the panels, into a scratch buffer that the tasks then read as
 * pre-packed B (up to 16 MB of it). ResNet-50, 2 threads (build/bench_conv_f32, alternated):
 * the 3x3 stride-2 convs 0.87-0.93x, 1x1 128->512 and 512->256 at 28x28 0.88-0.92x; with K >= 1024
 * a plain copy of B is cheap and each thread's own copy stays in its own L2 (sharing: 1.0-1.1x). */
static void share_b(kiln_pool *pool, int nthreads, gemm_job *g)
{
    if (g->tm < 2 || g->bpack || nthreads < 2 || (!g->packb && g->K > 512))
        return;
    int64_t pn = ceil_div(g->N, g->im->nr), floats = pn * g->K * g->im->nr;
    if (floats > 4 * 1024 * 1024)
        return;
    float *dst = kiln__scratch(KILN_SCRATCH_GEMM_B, (size_t)floats * sizeof(float));
    if (!dst)
        return;   /* out of memory: each task packs its own */
    packb_job j = {g, dst};
    kiln__parallel_for(pool, nthreads, pn, 1, packb_task, &j);
    g->bpack = dst;
    g->b_shared = true;
}

/* Picks the task grid tm x tn (tm * tn <= nt) minimizing the largest task plus its packing. */
static void plan_grid(gemm_job *g, int nt)
{
    const int64_t mr = g->im->mr, nr = g->im->nr;
    const int64_t pm = ceil_div(g->M, mr), pn = ceil_div(g->N, nr);
    double best = -1.0;
    int64_t btm = 1, btn = 1;
    for (; nt >= 1 && best < 0.0; nt--) {
        for (int64_t tm = 1; tm <= nt; tm++) {
            if (nt % tm)
                continue;
            int64_t tn = nt / tm;
            if (tm > pm || tn > pn)
                continue;
            double mt = (double)(ceil_div(pm, tm) * mr), ntl = (double)(ceil_div(pn, tn) * nr);
            /* per unit of K: ~2*mt*ntl flops, and (mt + ntl) packed elements at ~24 flops each */
            double cost = 2.0 * mt * ntl + 24.0 * (mt + ntl);
            if (best < 0.0 || cost < best) {
                best = cost;
                btm = tm;
                btn = tn;
            }
        }
    }
    /* op(B) packed by this call (a caller's packer such as the implicit im2col, or plain B) in an M-split grid is
     * packed once, shared (share_b), and every task then reads all of it: where that is more than a core's L2 holds,
     * split N instead when there are panels enough for at least three a thread (each task packs and keeps its own
     * columns; A, the weights, read by both). ResNet-50's 3x3/2 conv at 28x28 (K = 2304, 7 panels, 2 MB of panels):
     * 1/1.113 in the model (bench/env_ab, 193/200 pairs); at 14x14 (2 panels) an N split was 1.045. Plain B since
     * session 40 (it was read in place before): the 1x1 512->256 @28 0.863, layer2's FusedConvSum ([h ; x], 1.2 MB)
     * 0.907, ResNet-50 0.987 (116/150 pairs); PP-OCRv4 det / rec unchanged (0.999 / 1.002). */
    if (btm > 1 && !g->bpack && pn >= 3 * (btm * btn) && (double)g->K * (double)(pn * nr) * 4.0 > 1024.0 * 1024.0) {
        btn *= btm;
        btm = 1;
    }
    g->tm = btm;
    g->tn = btn;
    g->mstep = ceil_div(pm, btm) * mr;
    g->nstep = ceil_div(pn, btn) * nr;
}

#if GEMM_X86
#define GEMM_AVX512_IS(im) ((im) == &kiln__gemm_impl_avx512)
#else
#define GEMM_AVX512_IS(im) false
#endif

/* Tiny problems and GEMV shapes: the direct path (no packing) where op(B) is in memory. */
static bool direct_shape(int64_t M, int64_t N, double flops)
{
    return flops < 65536.0 || M == 1 || N == 1;
}

/* The packed path's K slices (why these sizes: at their use in kiln__sgemm_ex). */
static int64_t k_slices(const gemm_impl *im, bool bpack, bool direct_a, int64_t M, int64_t K)
{
    return bpack && direct_a ? ceil_div(K, (M <= 128 ? 6 : 3) * im->kc)
           : direct_a        ? ceil_div(K, 2 * im->kc)
                             : ceil_div(K, im->kc);
}

/* Whether the packed path's tiles, in kb K slices, read each residual element before they store over it (an
 * epilogue whose residual is C itself): several K slices store partial sums into C; so do the AVX-512 edge rows
 * read in place beyond 256 k; the AVX2 and portable tiles store C before their epilogue reads the residual (the
 * AVX-512 ones read each residual vector before they store over it). */
static bool tiles_read_res_first(const gemm_impl *im, bool direct_a, int64_t M, int64_t K, int64_t kb)
{
    return GEMM_AVX512_IS(im) && kb == 1 && !(direct_a && M % im->mr && K > 256);
}

bool kiln__sgemm_res_in_place(int64_t M, int64_t N, int64_t K)
{
    const gemm_impl *im = select_impl();
    /* as kiln__sgemm_ex decides for A read in place and plain B */
    return im->direct_a && K > 0 && !direct_shape(M, N, 2.0 * (double)M * (double)N * (double)K) &&
           tiles_read_res_first(im, true, M, K, k_slices(im, false, true, M, K));
}

/* The job of GEMM a (kiln__sgemm_ex) with epilogue epi and beta (its residual possibly moved into C), before the
 * grid and blocking are planned. */
static void job_init(gemm_job *g, const kiln_gemm *a, const kiln_epi *epi, float beta)
{
    const gemm_impl *im = select_impl();
    const int64_t K = a->K;
    memset(g, 0, sizeof *g);
    g->im = im;
    g->gen = atomic_fetch_add_explicit(&gemm_gen, 1, memory_order_relaxed) + 1;
    g->M = a->M;
    g->N = a->N;
    g->K = K;
    g->alpha = a->alpha;
    g->beta = beta;
    g->A = a->A;
    g->B = a->B;
    g->B2 = a->B2 && a->kb2 < K && !a->trans_b && !a->packb && !a->bpack ? a->B2 : NULL;
    g->kb2 = a->kb2;
    g->C = a->C;
    g->ldc = a->ldc;
    g->a_rs = a->trans_a ? 1 : a->lda;
    g->a_cs = a->trans_a ? a->lda : 1;
    g->b_rs = a->trans_b ? 1 : a->ldb;
    g->b_cs = a->trans_b ? a->ldb : 1;
    g->packb = a->packb;
    g->bpack = a->bpack;
    g->packb_ctx = a->packb_ctx;
    g->epi = epi;
    g->direct_a = im->direct_a && !a->trans_a && a->lda > 0;
    g->apack = a->apack && kiln__sgemm_apack_mr() > 0 ? a->apack : NULL;
    g->apack_next = g->apack ? a->apack_next : NULL;
}

/* The job's K slices, row and column blocks and 49-column tiles (kiln__sgemm_ex, after plan_grid); an
 * epilogue whose residual is C itself (alias) becomes C with beta 1 where the tiles would store over it first. */
static void plan_blocks(gemm_job *g, bool alias, kiln_epi *e_own)
{
    const gemm_impl *im = g->im;
    const int64_t K = g->K;
    /* blocking, balanced so the last block is not a sliver. Pre-packed B with A read in place (MatMul / Gemm
     * weights) runs K in slices of up to 3 kc (K <= 3 kc in one): no packing buffer to keep small, every C tile is
     * stored 3x less often than with kc slices, and each tile's fixed costs (zeroing, stores, epilogue) are spread
     * over 3x the FMAs. BERT-base's K = 768 GEMMs (bench_gemm_f32, 2 threads): FFN up 0.96, all 0.98. Its FFN down
     * (K = 3072: 4 slices of 768 instead of 12 of 256) in the model: the sum of its 12 layers 1.04-1.11x the FFN
     * ups' in the same profile before, 0.99-1.00x after (8 alternated profiles each); with at most 128 rows slices of
     * up to 6 kc (1536: FFN down in 2), whose A block (768 KB) still fits L2: the same ratio 0.94-0.99 against
     * 0.98-1.00 with 3 kc (5/5 alternated profiles lower). Other GEMMs with A read in place (conv weights) and
     * K <= 2 kc run one slice too: ResNet-50's 8 1x1 convs with K = 512
     * (in-model profile sum, 10 ABBA pairs: 6.17 -> 5.61 ms, paired 0.910, 8/10; 512->2048 @7 +res in bench_conv_f32
     * 0.930, 15/20), each C tile stored once instead of reloaded for a second slice. Beyond that they run K in
     * slices of up to 2 kc too (ResNet-50's 1x1 convs with K = 1024 / 2048 and 3x3 im2col layers with K = 1152 to
     * 4608: in one process, inferences alternated ABBA with kc slices, 300 pairs: those layers 0.976-0.981 (232/300),
     * the whole model 0.994-0.995; slices of 4 kc gained no more, one slice 1.00 against 4 kc). */
    int64_t kb = k_slices(im, g->bpack != NULL, g->direct_a, g->M, K);
    g->kc = ceil_div(K, kb);
    if (alias && !tiles_read_res_first(im, g->direct_a, g->M, K, kb))
        res_as_c(e_own, &g->epi, &g->beta);
    int64_t mb = ceil_div(g->mstep, im->mc);
    g->mc = ceil_div(ceil_div(g->mstep, mb), im->mr) * im->mr;
    /* A grid split along N whose tasks pack B for themselves (ResNet-50's 56x56 1x1 convs) packs it in blocks of
     * at most GEMM_NC_SPLIT columns rather than its whole share: the packed block and the C rows it feeds stay
     * closer (L2). In-model, one process, inferences alternated ABBA with the task-wide blocks (bench/env_ab, 200
     * pairs, 2 threads): those layers 0.967 (146/200; the K = 64 ones 0.94-0.95), the rest 1.001; blocks of 256
     * 0.993, of 64 0.973 (150 pairs). AVX-512 only (not measured with the AVX2 tiles). */
    int64_t nb = ceil_div(g->nstep, GEMM_AVX512_IS(im) && !g->bpack && g->tm == 1 ? GEMM_NC_SPLIT : im->nc);
    g->nc = ceil_div(ceil_div(g->nstep, nb), im->nr) * im->nr;
    /* a block's last 32 + 17 columns as one tile (ukr49): ResNet-50's 7x7 layers (N = 49) and the Winograd GEMMs of
     * 49 tiles (layer2-3's conv2s), in one process against the two tiles (bench/env_ab, 300 pairs, 2 threads, both
     * orders): those layers 0.972 / 1/1.049, the model 0.987 / 1/1.017 */
    g->w49 = im->ukr49 && g->direct_a;
}

void kiln__sgemm_ex(kiln_pool *pool, int nthreads, const kiln_gemm *a)
{
    const int64_t M = a->M, N = a->N, K = a->K;
    if (M <= 0 || N <= 0)
        return;
    const kiln_epi *epi = kiln__epi_is_noop(a->epi) ? NULL : a->epi;
    float beta = a->beta;
    kiln_epi e_own;
    /* the residual is C itself (a FusedConv computed in place over it): read by the tiles' epilogue before they
     * store over it where C is stored once (the AVX-512 packed path in one K slice: the same sums as with the
     * residual elsewhere); else read as C with beta 1 (res_as_c) */
    const bool alias = res_is_c(epi, a->C, a->ldc, beta);
    if (alias && (K <= 0 || a->alpha == 0.0f))
        res_as_c(&e_own, &epi, &beta);
    if (K <= 0 || a->alpha == 0.0f) {
        scale_c(a->C, a->ldc, M, N, beta);
        if (epi)
            kiln__epi_apply_f32(epi, a->C, a->ldc, M, N, 0, 0);
        return;
    }
    gemm_job g;
    job_init(&g, a, epi, beta);

    nthreads = kiln__pool_clamp(pool, nthreads);
    double flops = 2.0 * (double)M * (double)N * (double)K;
    /* at least GEMM_MIN_FLOPS_PER_THREAD of work per thread, or waking threads costs more
     * than it saves */
    if ((double)nthreads * GEMM_MIN_FLOPS_PER_THREAD > flops)
        nthreads = flops < GEMM_MIN_FLOPS_PER_THREAD ? 1 : (int)(flops / GEMM_MIN_FLOPS_PER_THREAD);

    /* tiny problems and GEMV shapes: no packing (needs op(B) in memory) */
    if (!g.packb && !g.bpack && !g.apack && !g.B2 && direct_shape(M, N, flops)) {
        if (alias)   /* C = alpha * acc + beta * C first, the epilogue after */
            res_as_c(&e_own, &g.epi, &g.beta);
        if (nthreads <= 1)
            direct_block(&g, 0, M, 0, N);
        else if (M >= nthreads)
            kiln__parallel_for(pool, nthreads, M, 1, direct_task_rows, &g);
        else
            kiln__parallel_for(pool, nthreads, ceil_div(N, 256), 1, direct_task_cols, &g);
        return;
    }

#if GEMM_X86
    /* one row against pre-packed B: a GEMV over the panels, each streamed once */
    if (g.bpack && M == 1 && g.im == &kiln__gemm_impl_avx512) {
        kiln__parallel_for(pool, nthreads, ceil_div(N, g.im->nr), 1, row_task, &g);
        return;
    }
#endif
    unalias_a(pool, nthreads, &g);
    plan_grid(&g, nthreads);
    int ntask_threads = (int)(g.tm * g.tn);
    /* one task a thread (tm x tn = the threads), so that a thread's columns are the same from layer to layer:
     * a convolution's input (its pixels) is what the thread wrote last, still in its L2 (the caller usually runs
     * the first task), and a MatMul's thread streams one contiguous run of the weight panels. Against several
     * tasks a thread taken dynamically (tapering to one panel at the end; bench/env_ab, 2 threads): ResNet-50
     * 0.990 (196/300 pairs; its 1x1 layers 0.987), PP-OCRv4 det 0.992, rec 0.977 (133/150), BERT-base 0.973
     * (54/60; its MatMuls 0.93-0.98). */
    plan_blocks(&g, alias, &e_own);
    share_a(pool, ntask_threads, &g);
    g.buf_floats = (size_t)(g.nc * g.kc + DOT_COLS * g.kc + 16 + (g.direct_a || g.apack ? 0 : g.mc * g.kc));
    share_b(pool, ntask_threads, &g);
    kiln__parallel_for(pool, ntask_threads, g.tm * g.tn, 1, gemm_task, &g);
}

void kiln__sgemm(kiln_pool *pool, int nthreads, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                 const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc)
{
    kiln_gemm g = {.M = M, .N = N, .K = K, .alpha = alpha, .beta = beta, .trans_a = trans_a, .trans_b = trans_b,
                   .A = A, .lda = lda, .B = B, .ldb = ldb, .C = C, .ldc = ldc};
    kiln__sgemm_ex(pool, nthreads, &g);
}

int kiln__sgemm_nr(void)
{
    return select_impl()->nr;
}

int kiln__sgemm_apack_mr(void)
{
#if GEMM_X86
    const gemm_impl *im = select_impl();
    return im == &kiln__gemm_impl_avx2 ? im->mr : 0;
#else
    return 0;
#endif
}

int64_t kiln__sgemm_apack_floats(int64_t M, int64_t K)
{
    int64_t mr = kiln__sgemm_apack_mr();
    return mr > 0 ? ceil_div(M, mr) * mr * K : 0;
}

bool kiln__sgemm_apack(int64_t M, int64_t K, const float *A, int64_t lda, float *dst)
{
    if (kiln__sgemm_apack_mr() <= 0)
        return false;
    select_impl()->pack_a(A, lda, 1, M, K, dst);
    return true;
}

int kiln__sgemm_kind(void)
{
    const gemm_impl *im = select_impl();
#if GEMM_X86
    if (im == &kiln__gemm_impl_avx512)
        return 3;
    if (im == &kiln__gemm_impl_avx2)
        return 2;
#endif
    (void)im;
    return 1;
}

int64_t kiln__sgemm_bpack_floats(int64_t K, int64_t N)
{
    int64_t nr = select_impl()->nr;
    return ceil_div(N, nr) * K * nr;
}

bool kiln__sgemm_bpack(bool trans_b, int64_t K, int64_t N, const float *B, int64_t ldb, float *dst)
{
    if (K <= 0 || N <= 0)
        return true;
    size_t bytes = (size_t)kiln__sgemm_bpack_floats(K, N) * sizeof(float);
    void *tmp = (uintptr_t)dst % 64 ? kiln__malloc(bytes + 64) : NULL;
    float *d = tmp ? (float *)(((uintptr_t)tmp + 63) & ~(uintptr_t)63) : dst;
    if ((uintptr_t)dst % 64 && !tmp)
        return false;
    /* full-K panels: the packer's line stride is B's column stride, its k stride the row stride */
    select_impl()->pack_b(B, trans_b ? ldb : 1, trans_b ? 1 : ldb, N, K, d);
    if (tmp) {   /* the packers store aligned */
        memcpy(dst, d, bytes);
        kiln__free(tmp);
    }
    return true;
}

/* Plain reference: triple loop with a double accumulator (for tests). */
void kiln__sgemm_ref(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
                     int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc)
{
    for (int64_t i = 0; i < M; i++) {
        for (int64_t j = 0; j < N; j++) {
            double s = 0.0;
            for (int64_t k = 0; k < K; k++) {
                double a = trans_a ? A[k * lda + i] : A[i * lda + k];
                double b = trans_b ? B[j * ldb + k] : B[k * ldb + j];
                s += a * b;
            }
            double r = (double)alpha * s;
            if (beta != 0.0f)
                r += (double)beta * C[i * ldc + j];
            C[i * ldc + j] = (float)r;
        }
    }
}

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
 *     k-major panels.
 *   - Micro-kernels, chosen at run time with kiln__cpu_has(): AVX-512F+FMA 8 x 32
 *     (with cheaper variants for 1-, 16- and 17-column edge tiles; with A read in place the
 *     17th column is a dot product along k) and 12 x 32 for A read in place against pre-packed
 *     B (12 FMAs per B vector; mixed with 8-row tiles so that heights split without waste),
 *     AVX2+FMA 6 x 16 (with 4- and 2-row variants for edge tiles; bias, residual, Relu and GELU
 *     applied in registers), and
 *     portable C 6 x 8 (GNU vector extensions).
 *   - A read in place whose rows are a multiple of 2 KB apart is first copied to a padded stride
 *     (unalias_a: such rows share L1 sets); pre-packed B panels are prefetched into L2 one panel
 *     ahead (after a block's last panel, the first panel of the next K slice).
 *   - A grid split only along N gets several tasks per thread (dynamic scheduling); each
 *     thread's packing buffer is a reusable per-thread scratch buffer (scratch.h). A grid split
 *     along M packs op(B) once for all its tasks where packing costs (share_b); a grid with
 *     several tasks along N packs op(A) once for all of them where the kernel reads packed A
 *     (share_a).
 *   - Tiny problems and GEMV shapes (M == 1 or N == 1) take a direct path without packing; one
 *     row against pre-packed B (a classifier's last Gemm) streams the panels once (row512).
 * Edge tiles are handled by zero padding in the packed panels and masked / partial stores, so
 * every size is supported. With beta == 0, C is never read. */
#include "gemm.h"
#include "scratch.h"
#include "vmath_avx2.h"

#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#define GEMM_X86 1
#include <immintrin.h>
#else
#define GEMM_X86 0
#endif

/* How a micro-kernel stores its tile: C = alpha * acc + beta * C (beta == 0: C not read),
 * then, on the last K slice (epi != NULL), the epilogue at global coordinates (i0, j0). */
typedef struct tile_args {
    float alpha, beta;
    const kiln_epi *epi;
    int64_t i0, j0;
    const float *pf_a;   /* direct A: the next tile's rows (pf_a + i*lda), prefetched meanwhile; or NULL */
    int pf_rows;         /* how many rows of pf_a (tall kernel; the 8-row kernels prefetch 8) */
    const float *colv;   /* direct A, 17-column tile: column 16 of the B panel, contiguous (AVX-512) */
} tile_args;

/* Micro-kernel over kc steps. A: lda > 0: row-major rows a + i*lda (k contiguous; only for
 * kernels with direct_a); lda == 0: a packed panel a[k*mr + i]. B: packed panel pb[k*nr + j].
 * The tile is m <= mr rows by n <= nr columns of C at c (row stride ldc). */
typedef void (*gemm_ukr_fn)(int64_t kc, const float *a, int64_t lda, const float *pb, float *c, int64_t ldc, int m,
                            int n, const tile_args *t);
/* Packs n lines (line i starts at src + i*si, consecutive k at stride sk) into panels of width w,
 * k-major: dst[p*kc*w + k*w + r] = element k of line p*w + r; the last panel is zero padded. */
typedef void (*gemm_pack_fn)(const float *src, int64_t si, int64_t sk, int64_t n, int64_t kc, float *dst);

typedef struct gemm_impl {
    int mr, nr;
    gemm_ukr_fn ukr;
    gemm_pack_fn pack_a, pack_b;   /* pack_a: width mr, pack_b: width nr */
    int64_t mc, kc, nc;            /* cache blocking targets */
    bool direct_a;                 /* the micro-kernel can read row-major A in place */
    int mr_tall;                   /* rows of ukr_tall (0: none) */
    gemm_ukr_fn ukr_tall;          /* full-height tiles of direct A, more than nr/2 + 1 columns: more
                                    * rows per B load (mr_tall > mr) */
    bool ukr17;                    /* ukr takes n == nr + 1 columns (packed A; column nr in t->colv) */
} gemm_impl;

static inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* ------------------------------------------------------------------------------------------
 * Generic packing, instantiated with a constant width
 * ------------------------------------------------------------------------------------------ */

static inline __attribute__((always_inline)) void pack_generic(const float *src, int64_t si, int64_t sk, int64_t n,
                                                               int64_t kc, float *dst, const int w)
{
    for (int64_t p = 0; p < n; p += w, dst += kc * w) {
        int64_t nw = min64(w, n - p);
        const float *s = src + p * si;
        if (si == 1 && nw == w) {
            for (int64_t k = 0; k < kc; k++)
                memcpy(dst + k * w, s + k * sk, (size_t)w * sizeof(float));
        } else if (sk == 1) {
            /* lines contiguous along k: transpose in blocks of 4 k */
            int64_t k = 0;
            for (; k + 4 <= kc; k += 4) {
                float *d = dst + k * w;
                for (int64_t i = 0; i < nw; i++) {
                    const float *sp = s + i * si + k;
                    d[i] = sp[0];
                    d[w + i] = sp[1];
                    d[2 * w + i] = sp[2];
                    d[3 * w + i] = sp[3];
                }
                for (int64_t i = nw; i < w; i++)
                    d[i] = d[w + i] = d[2 * w + i] = d[3 * w + i] = 0.0f;
            }
            for (; k < kc; k++) {
                float *d = dst + k * w;
                for (int64_t i = 0; i < nw; i++)
                    d[i] = s[i * si + k];
                for (int64_t i = nw; i < w; i++)
                    d[i] = 0.0f;
            }
        } else {
            for (int64_t k = 0; k < kc; k++) {
                float *d = dst + k * w;
                for (int64_t i = 0; i < nw; i++)
                    d[i] = s[i * si + k * sk];
                for (int64_t i = nw; i < w; i++)
                    d[i] = 0.0f;
            }
        }
    }
}

/* Scalar epilogue of one element at global (i, j). */
static inline float epi_scalar(const kiln_epi *e, float v, int64_t i, int64_t j)
{
    if (e->bias)
        v += e->bias[e->row_bias ? i : j];
    if (e->res)
        v += e->res[i * e->ldr + j];
    return kiln__act_scalar(&e->act, v);
}

/* C tile update from an accumulator tile acc (row stride ldt). */
static void store_tile(const float *acc, int ldt, float *c, int64_t ldc, int m, int n, const tile_args *t)
{
    for (int i = 0; i < m; i++) {
        float *cr = c + i * ldc;
        const float *tr = acc + i * ldt;
        if (t->beta == 0.0f) {
            for (int j = 0; j < n; j++)
                cr[j] = t->alpha * tr[j];
        } else {
            for (int j = 0; j < n; j++)
                cr[j] = t->alpha * tr[j] + t->beta * cr[j];
        }
    }
    if (t->epi)
        kiln__epi_apply_f32(t->epi, c, ldc, m, n, t->i0, t->j0);
}

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

static const gemm_impl impl_c = {MR_C, NR_C, ukr_c, pack_c_a, pack_c_b, 128, 256, 1024, false, 0, NULL, false};

#if GEMM_X86
/* ------------------------------------------------------------------------------------------
 * AVX2 + FMA micro-kernel: 6 x 16
 * ------------------------------------------------------------------------------------------ */

#define MR_AVX2 6
#define NR_AVX2 16

/* The 6 x 16 tile computed for its first R rows only (R = 6, 4 or 2, m <= R): an edge tile of
 * one or two rows (BERT's M = 128 = 21 x 6 + 2) does not pay for six. X17: a 17-column tile (n ==
 * 17), the 17th column (t->colv[k], contiguous: column 0 of the next panel) times the packed A
 * column as one vector (rows in lanes 0-5; lanes 6-7 are the next k's rows, ignored): 13 FMAs per
 * k for 17 columns, where a 16-column and a 1-column tile take 24. A 7x7 map's N = 49 = 16 + 16 +
 * 17 (ResNet-50's stage 4) runs 3 tiles instead of 4. */
__attribute__((target("avx2,fma"), always_inline)) static inline void ukr_avx2_rows(int64_t kc, const float *pa,
                                                                                   const float *pb, float *c,
                                                                                   int64_t ldc, int m, int n,
                                                                                   const tile_args *t, const int R,
                                                                                   const bool X17)
{
    __m256 c0[MR_AVX2], c1[MR_AVX2], cx = _mm256_setzero_ps();
    const float *cv = t->colv;
#pragma GCC unroll 8
    for (int i = 0; i < R; i++)
        c0[i] = c1[i] = _mm256_setzero_ps();
    /* the tile's rows of C and of the residual (both lines of a row that straddles two), fetched
     * while the k loop runs: a C larger than L2 (ResNet-50's 256->1024 @14 with the residual) */
    for (int i = 0; i < m; i++) {
        _mm_prefetch((const char *)(c + i * ldc), _MM_HINT_T0);
        _mm_prefetch((const char *)(c + i * ldc + NR_AVX2 - 1), _MM_HINT_T0);
    }
    if (t->epi && t->epi->res) {
        const float *rr = t->epi->res + t->i0 * t->epi->ldr + t->j0;
        for (int i = 0; i < m; i++) {
            _mm_prefetch((const char *)(rr + i * t->epi->ldr), _MM_HINT_T0);
            _mm_prefetch((const char *)(rr + i * t->epi->ldr + NR_AVX2 - 1), _MM_HINT_T0);
        }
    }
    /* X17: the last k reads its A column without the 2 floats past it (the panel may end there) */
    const int64_t kv = X17 ? kc - 1 : kc;
#pragma GCC unroll 4
    for (int64_t k = 0; k < kv; k++) {
        __m256 b0 = _mm256_load_ps(pb), b1 = _mm256_load_ps(pb + 8);
#pragma GCC unroll 8
        for (int i = 0; i < R; i++) {
            __m256 a = _mm256_broadcast_ss(pa + i);
            c0[i] = _mm256_fmadd_ps(a, b0, c0[i]);
            c1[i] = _mm256_fmadd_ps(a, b1, c1[i]);
        }
        if (X17)
            cx = _mm256_fmadd_ps(_mm256_broadcast_ss(cv + k), _mm256_loadu_ps(pa), cx);
        pa += MR_AVX2;
        pb += NR_AVX2;
    }
    if (X17 && kc > 0) {
        __m256 b0 = _mm256_load_ps(pb), b1 = _mm256_load_ps(pb + 8);
#pragma GCC unroll 8
        for (int i = 0; i < R; i++) {
            __m256 a = _mm256_broadcast_ss(pa + i);
            c0[i] = _mm256_fmadd_ps(a, b0, c0[i]);
            c1[i] = _mm256_fmadd_ps(a, b1, c1[i]);
        }
        __m256 al = _mm256_castps128_ps256(_mm_loadu_ps(pa));
        al = _mm256_insertf128_ps(al, _mm_castpd_ps(_mm_load_sd((const double *)(pa + 4))), 1);
        cx = _mm256_fmadd_ps(_mm256_broadcast_ss(cv + kc - 1), al, cx);
    }
    if (X17) {
        /* column 16: alpha * acc + beta * C, then the epilogue over that column */
        float x[8] __attribute__((aligned(32)));
        _mm256_store_ps(x, cx);
        for (int i = 0; i < m; i++) {
            float *cp = c + i * ldc + NR_AVX2;
            *cp = t->beta == 0.0f ? t->alpha * x[i] : t->alpha * x[i] + t->beta * *cp;
        }
        if (t->epi)
            kiln__epi_apply_f32(t->epi, c + NR_AVX2, ldc, m, 1, t->i0, t->j0 + NR_AVX2);
        n = NR_AVX2;
    }
    if (n == NR_AVX2) {
        /* bias, residual and Relu / GELU (BERT's FFN up) / no activation in registers, in
         * kiln__epi_apply_f32's order with its vector math (the same results); other activations
         * by its (AVX2) rows over the stored tile, still in L1 */
        const kiln_epi *e = t->epi;
        const bool in_regs =
            e && (e->act.kind == KILN_ACT_NONE || e->act.kind == KILN_ACT_RELU || e->act.kind == KILN_ACT_GELU);
        const bool relu = in_regs && e->act.kind == KILN_ACT_RELU, gelu = in_regs && e->act.kind == KILN_ACT_GELU;
        const float *rb = in_regs && e->bias && e->row_bias ? e->bias + t->i0 : NULL;
        const float *cb = in_regs && e->bias && !e->row_bias ? e->bias + t->j0 : NULL;
        const float *rr = in_regs && e->res ? e->res + t->i0 * e->ldr + t->j0 : NULL;
        __m256 va = _mm256_set1_ps(t->alpha), vb = _mm256_set1_ps(t->beta);
        __m256 cb0 = cb ? _mm256_loadu_ps(cb) : va, cb1 = cb ? _mm256_loadu_ps(cb + 8) : va;
#pragma GCC unroll 8
        for (int i = 0; i < R; i++) {
            if (i >= m)
                break;
            float *cr = c + i * ldc;
            __m256 r0 = _mm256_mul_ps(c0[i], va), r1 = _mm256_mul_ps(c1[i], va);
            if (t->beta != 0.0f) {
                r0 = _mm256_fmadd_ps(_mm256_loadu_ps(cr), vb, r0);
                r1 = _mm256_fmadd_ps(_mm256_loadu_ps(cr + 8), vb, r1);
            }
            if (rb) {
                __m256 b = _mm256_broadcast_ss(rb + i);
                r0 = _mm256_add_ps(r0, b), r1 = _mm256_add_ps(r1, b);
            } else if (cb) {
                r0 = _mm256_add_ps(r0, cb0), r1 = _mm256_add_ps(r1, cb1);
            }
            if (rr) {
                r0 = _mm256_add_ps(r0, _mm256_loadu_ps(rr + i * e->ldr));
                r1 = _mm256_add_ps(r1, _mm256_loadu_ps(rr + i * e->ldr + 8));
            }
            if (relu) {   /* NaN -> 0, like the epilogue */
                r0 = _mm256_max_ps(r0, _mm256_setzero_ps());
                r1 = _mm256_max_ps(r1, _mm256_setzero_ps());
            } else if (gelu) {
                r0 = kiln_v8_act(KILN_ACT_GELU, 0.0f, 0.0f, r0);
                r1 = kiln_v8_act(KILN_ACT_GELU, 0.0f, 0.0f, r1);
            }
            _mm256_storeu_ps(cr, r0);
            _mm256_storeu_ps(cr + 8, r1);
        }
        if (e && !in_regs)
            kiln__epi_apply_f32(e, c, ldc, m, NR_AVX2, t->i0, t->j0);
    } else {
        float tt[MR_AVX2 * NR_AVX2] __attribute__((aligned(32)));
#pragma GCC unroll 8
        for (int i = 0; i < R; i++) {
            _mm256_store_ps(tt + i * NR_AVX2, c0[i]);
            _mm256_store_ps(tt + i * NR_AVX2 + 8, c1[i]);
        }
        store_tile(tt, NR_AVX2, c, ldc, m, n, t);
    }
}

/* An edge tile of at most 8 columns (a 14x14 map's N = 196 = 12 x 16 + 4): the panel's first 8
 * columns only, half the FMAs of the 6 x 16 tile (the packed A rows past m are zeros). */
__attribute__((target("avx2,fma"))) static void ukr_avx2_n8(int64_t kc, const float *pa, const float *pb, float *c,
                                                             int64_t ldc, int m, int n, const tile_args *t)
{
    __m256 c0[MR_AVX2];
#pragma GCC unroll 8
    for (int i = 0; i < MR_AVX2; i++)
        c0[i] = _mm256_setzero_ps();
#pragma GCC unroll 4
    for (int64_t k = 0; k < kc; k++) {
        __m256 b0 = _mm256_load_ps(pb);
#pragma GCC unroll 8
        for (int i = 0; i < MR_AVX2; i++)
            c0[i] = _mm256_fmadd_ps(_mm256_broadcast_ss(pa + i), b0, c0[i]);
        pa += MR_AVX2;
        pb += NR_AVX2;
    }
    float tt[MR_AVX2 * 8] __attribute__((aligned(32)));
#pragma GCC unroll 8
    for (int i = 0; i < MR_AVX2; i++)
        _mm256_store_ps(tt + i * 8, c0[i]);
    store_tile(tt, 8, c, ldc, m, n, t);
}

__attribute__((target("avx2,fma"))) static void ukr_avx2(int64_t kc, const float *pa, int64_t lda, const float *pb,
                                                          float *c, int64_t ldc, int m, int n, const tile_args *t)
{
    (void)lda; /* always packed */
    if (n <= 8 && m > 2)
        ukr_avx2_n8(kc, pa, pb, c, ldc, m, n, t);
    else if (n == NR_AVX2 + 1) {   /* (t->colv set: see panel_at) */
        if (m > 4)
            ukr_avx2_rows(kc, pa, pb, c, ldc, m, n, t, 6, true);
        else if (m > 2)
            ukr_avx2_rows(kc, pa, pb, c, ldc, m, n, t, 4, true);
        else
            ukr_avx2_rows(kc, pa, pb, c, ldc, m, n, t, 2, true);
    } else if (m > 4)
        ukr_avx2_rows(kc, pa, pb, c, ldc, m, n, t, 6, false);
    else if (m > 2)
        ukr_avx2_rows(kc, pa, pb, c, ldc, m, n, t, 4, false);
    else
        ukr_avx2_rows(kc, pa, pb, c, ldc, m, n, t, 2, false);
}

/* A row-major (sk == 1, e.g. convolution weights): full 6-row panels transposed 4 k at a time in
 * SSE registers (rows 0-3 as a 4 x 4 transpose, rows 4-5 interleaved), the rest by pack_generic. */
__attribute__((target("avx2,fma"))) static void pack_avx2_a(const float *src, int64_t si, int64_t sk, int64_t n,
                                                             int64_t kc, float *dst)
{
    if (sk != 1 || kc < 4) {
        pack_generic(src, si, sk, n, kc, dst, MR_AVX2);
        return;
    }
    int64_t p = 0;
    for (; p + MR_AVX2 <= n; p += MR_AVX2, dst += kc * MR_AVX2) {
        const float *s = src + p * si;
        int64_t k = 0;
        for (; k + 4 <= kc; k += 4) {
            __m128 r0 = _mm_loadu_ps(s + k), r1 = _mm_loadu_ps(s + si + k), r2 = _mm_loadu_ps(s + 2 * si + k),
                   r3 = _mm_loadu_ps(s + 3 * si + k), r4 = _mm_loadu_ps(s + 4 * si + k),
                   r5 = _mm_loadu_ps(s + 5 * si + k);
            _MM_TRANSPOSE4_PS(r0, r1, r2, r3);   /* r0: rows 0-3 at k, r1 at k + 1, ... */
            __m128 u = _mm_unpacklo_ps(r4, r5), v = _mm_unpackhi_ps(r4, r5);   /* (4,5) at k, k+1 / k+2, k+3 */
            float *d = dst + k * MR_AVX2;
            _mm_storeu_ps(d, r0);
            _mm_storel_pi((__m64 *)(d + 4), u);
            _mm_storeu_ps(d + 6, r1);
            _mm_storeh_pi((__m64 *)(d + 10), u);
            _mm_storeu_ps(d + 12, r2);
            _mm_storel_pi((__m64 *)(d + 16), v);
            _mm_storeu_ps(d + 18, r3);
            _mm_storeh_pi((__m64 *)(d + 22), v);
        }
        for (; k < kc; k++)
            for (int i = 0; i < MR_AVX2; i++)
                dst[k * MR_AVX2 + i] = s[i * si + k];
    }
    if (p < n)
        pack_generic(src + p * si, si, sk, n - p, kc, dst, MR_AVX2);
}
/* B row-major (si == 1: a conv's activations, [K][N]): row by row, each source row read once
 * left to right (panel by panel, every panel would walk all kc rows, a page each on a 56x56 map). */
__attribute__((target("avx2,fma"))) static void pack_avx2_b(const float *src, int64_t si, int64_t sk, int64_t n,
                                                             int64_t kc, float *dst)
{
    if (si != 1) {
        pack_generic(src, si, sk, n, kc, dst, NR_AVX2);
        return;
    }
    const int64_t full = n / NR_AVX2, rem = n % NR_AVX2, ps = kc * NR_AVX2;
    for (int64_t k = 0; k < kc; k++) {
        const float *s = src + k * sk;
        float *d = dst + k * NR_AVX2;
        for (int64_t p = 0; p < full; p++, s += NR_AVX2, d += ps) {
            _mm256_storeu_ps(d, _mm256_loadu_ps(s));
            _mm256_storeu_ps(d + 8, _mm256_loadu_ps(s + 8));
        }
        if (rem) {
            for (int64_t j = 0; j < rem; j++)
                d[j] = s[j];
            for (int64_t j = rem; j < NR_AVX2; j++)
                d[j] = 0.0f;
        }
    }
}

static const gemm_impl impl_avx2 = {MR_AVX2, NR_AVX2, ukr_avx2, pack_avx2_a, pack_avx2_b, 144, 256, 1024, false, 0, NULL,
                                    true};

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
        __mmask16 k0 = n0 >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << n0) - 1u);
        __mmask16 k1 = n >= 32 ? (__mmask16)0xFFFF : n > 16 ? (__mmask16)((1u << (n - 16)) - 1u) : (__mmask16)0;
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
        __m512 b0 = _mm512_load_ps(pb), b1 = _mm512_load_ps(pb + 16);                                   \
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
            __mmask16 km = r == 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << r) - 1u);
            __m512 vc = _mm512_maskz_loadu_ps(km, cv + k0);
#pragma GCC unroll 8
            for (int i = 0; i < MR_512; i++)
                dx[i] = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(km, A_PTR(i)), vc, dx[i]);
            for (int u = 0; u < r; u++) {
                __m512 b0 = _mm512_load_ps(pb);
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
            __m512 b0 = _mm512_load_ps(pb + k * NR_512);
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
    __mmask16 km = kt >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << kt) - 1u);
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
            __mmask16 m = (__mmask16)((1u << nw) - 1u);
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
        __mmask16 m0 = nw >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << nw) - 1u);
        __mmask16 m1 = nw > 16 ? (__mmask16)((1u << (nw - 16)) - 1u) : (__mmask16)0;
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

T512 static void ukr_avx512(int64_t kc, const float *a, int64_t lda, const float *pb, float *c, int64_t ldc, int m,
                            int n, const tile_args *t)
{
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
        if (n == 17 && t->colv)
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
    const float *pf = t->pf_a;
    if (pf) {
        /* one cache line of each of the next tile's rows every 16 steps */
        for (; k + 16 <= kc; k += 16) {
            for (int i = 0; i < t->pf_rows; i++)
                _mm_prefetch((const char *)(pf + i * lda + k), _MM_HINT_T0);
#pragma GCC unroll 2
            for (int u = 0; u < 16; u++)
                STEP_TALL();
        }
    }
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

/* Direct convolution tile: like the direct-A W_FULL / W_16 kernel, with B(k, l) = xb[off[k] + l].
 * Edge rows (m < 8) are copied into a full 8-row block first (kc <= KC_CONV). */
#define KC_CONV 256
T512 static void ukr512_conv(int64_t kc, const float *a, int64_t lda, const float *xb, const int64_t *off, float *c,
                             int64_t ldc, int m, int n, const tile_args *t)
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
                __m512 b0 = _mm512_loadu_ps(src), b1 = _mm512_loadu_ps(src + 16);
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
T512 static void row512(int64_t K, const float *a, int64_t as, const float *bpack, int64_t p0, int64_t p1, int64_t N,
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

typedef struct convd_job {
    const kiln_convd *d;
    int64_t tw;           /* tiles per output row */
} convd_job;

T512 static void convd_task(void *ctx, int64_t t0, int64_t t1)
{
    const convd_job *j = ctx;
    const kiln_convd *d = j->d;
    const int64_t M = d->M, K = d->K;
    int64_t kb = ceil_div(K, KC_CONV), kcs = ceil_div(K, kb);
    for (int64_t tile = t0; tile < t1; tile++) {
        int64_t oy = tile / j->tw, ox0 = (tile % j->tw) * 32;
        int n = (int)min64(32, d->Wo - ox0);
        const float *xb = d->xp + oy * d->row_stride + ox0;
        int64_t col = oy * d->Wo + ox0;
        for (int64_t pc = 0; pc < K; pc += kcs) {
            int64_t kc = min64(kcs, K - pc);
            tile_args t = {.alpha = 1.0f, .beta = pc == 0 ? 0.0f : 1.0f, .epi = pc + kc >= K ? d->epi : NULL,
                           .j0 = col};
            for (int64_t ir = 0; ir < M; ir += MR_512) {
                int m = (int)min64(MR_512, M - ir);
                const float *a = d->A + ir * d->lda + pc;
                t.i0 = ir;
                t.pf_a = ir + 2 * MR_512 <= M ? a + MR_512 * d->lda : NULL;
                ukr512_conv(kc, a, d->lda, xb, d->off + pc, d->C + ir * d->ldc + col, d->ldc, m, n, &t);
            }
        }
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
static const gemm_impl impl_avx512 = {MR_512, NR_512, ukr_avx512, pack_avx512_a, pack_avx512_b,
                                      GEMM_MC512, GEMM_KC512, GEMM_NC512, true, MR_TALL, ukr512_tall, false};
#endif /* GEMM_X86 */

#ifndef GEMM_MIN_FLOPS_PER_THREAD
#define GEMM_MIN_FLOPS_PER_THREAD 2.0e6
#endif

/* KILN_GEMM_FORCE_AVX2 / KILN_GEMM_FORCE_C (build-time testing aids) skip the wider kernels. */
static const gemm_impl *select_impl(void)
{
#if GEMM_X86
#if !defined(KILN_GEMM_FORCE_AVX2) && !defined(KILN_GEMM_FORCE_C)
    if (kiln__cpu_has(KILN_CPU_AVX512_DQ_FMA))
        return &impl_avx512;
#endif
#if !defined(KILN_GEMM_FORCE_C)
    if (kiln__cpu_has(KILN_CPU_AVX2_FMA))
        return &impl_avx2;
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
    int64_t mstep, nstep; /* rows / columns per task (multiples of mr / nr) */
    int64_t mc, kc, nc;   /* blocking actually used */
    size_t buf_floats;    /* packing buffer size per task */
} gemm_job;

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
    if (g->im == &impl_avx512)
        direct_block_avx512(g, m0, m1, n0, n1);
    else if (g->im == &impl_avx2)
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
    row512(g->K, g->A, g->a_cs, g->bpack, begin, end, g->N, g->C, &t);
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
    return g->im->ukr17 && colv && nc - jr == nr + 1 ? nr + 1 : (int)min64(nr, nc - jr);
}

/* The K slice [pc, pc+kc) of panel jr of the block at column jc, for the micro-kernels: in the
 * task's packed block pb or in the pre-packed B; sets t's column and, for a 17-column tile (of A
 * read in place, AVX-512; or of the AVX2 kernel: the next panel's column 0), its column 16 side by
 * side (colv). */
static const float *panel_at(const gemm_job *g, tile_args *t, const float *pb, float *colv, int64_t jc, int64_t jr,
                             int64_t pc, int64_t kc, int n)
{
    const int nr = g->im->nr;
    const float *bp = g->bpack ? g->bpack + ((jc + jr) / nr) * g->K * nr + pc * nr : pb + jr * kc;
    t->j0 = jc + jr;
    t->colv = NULL;
    const float *c16 = g->direct_a && n == 17 && nr == 32 ? bp + 16
                       : g->im->ukr17 && n == nr + 1  ? bp + (g->bpack ? g->K : kc) * nr
                                                       : NULL;
    if (c16 && colv) {
        for (int64_t k = 0; k < kc; k++)
            colv[k] = c16[k * nr];
        t->colv = colv;
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
                im->pack_b(g->B + pc * g->b_rs + jc * g->b_cs, g->b_cs, g->b_rs, nc, kc, pb);
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
                    const int64_t nb_step = ceil_div(nb_lines, ceil_div(mc, mr));
                    const bool tall = tall_ok && n > 17;
                    for (int64_t ir = 0, pl = 0, h; ir < mc; ir += h, pl += nb_step) {
                        h = tall ? tile_rows(im, mc - ir) : mr;
                        for (int64_t l = pl; nb && l < min64(pl + nb_step, nb_lines); l++)
                            __builtin_prefetch(nb + l * 64, 0, 2);
                        int64_t hn = tall && ir + h < mc ? tile_rows(im, mc - ir - h) : mr;
                        t.pf_a = direct && ir + h + hn <= mc ? g->A + (ic + ir + h) * g->a_rs + pc : NULL;
                        t.pf_rows = (int)hn;
                        a_ahead_step(&ah);
                        run_tile(g, &t, pa, bp, cblk + jr, ic, pc, kc, ir, (int)min64(h, mc - ir), n);
                    }
                }
            }
        }
    }
}

/* Out of memory: the same computation with one-panel blocking and buffers on the stack. */
static void packed_block_small(const gemm_job *g, int64_t m0, int64_t m1, int64_t n0, int64_t n1)
{
    enum { KS = 64, PMAX = 32 };
    float pa[KS * PMAX] __attribute__((aligned(64)));
    float pb[KS * PMAX] __attribute__((aligned(64)));
    gemm_job s = *g;
    s.kc = KS;
    s.mc = g->im->mr;
    s.nc = g->im->nr;
    packed_block(&s, m0, m1, n0, n1, pa, pb, NULL);
}

static void gemm_task(void *ctx, int64_t begin, int64_t end)
{
    const gemm_job *g = ctx;
    void *raw = kiln__scratch(KILN_SCRATCH_GEMM, g->buf_floats * sizeof(float) + 128);
    float *pa = NULL, *pb = NULL, *colv = NULL;
    if (raw) {
        pb = (float *)(((uintptr_t)raw + 63) & ~(uintptr_t)63);
        colv = pb + g->nc * g->kc;
        pa = colv + g->kc;
        pa = (float *)(((uintptr_t)pa + 63) & ~(uintptr_t)63);
    }
    for (int64_t t = begin; t < end; t++) {
        int64_t ti = t / g->tn, tj = t % g->tn;
        int64_t m0 = ti * g->mstep, m1 = min64(g->M, m0 + g->mstep);
        int64_t n0 = tj * g->nstep, n1 = min64(g->N, n0 + g->nstep);
        if (m0 >= m1 || n0 >= n1)
            continue;
        if (raw)
            packed_block(g, m0, m1, n0, n1, pa, pb, colv);
        else
            packed_block_small(g, m0, m1, n0, n1);
    }
}

/* Direct A whose row stride is a multiple of 2 KB puts the rows of a tile in one or two L1 sets
 * (64 sets of 64-byte lines: a 4 KB period), more rows than the cache has ways: they evict one
 * another on every k step. Such an A (several tiles high) is copied once into a scratch buffer
 * with a row stride of K rounded up to 16 floats plus 16, which spreads the rows over the sets,
 * when C is wide enough (N >= 512) for the copy to cost little next to the product. */
static void unalias_a(gemm_job *g)
{
    if (!g->direct_a || g->M <= g->im->mr || g->N < 512 || g->a_rs % 512 != 0)
        return;
    int64_t ld = (g->K + 15) / 16 * 16 + 16;
    float *ac = kiln__scratch(KILN_SCRATCH_GEMM_A, (size_t)(g->M * ld) * sizeof(float));
    if (!ac)
        return;   /* out of memory: aliased but correct */
    for (int64_t i = 0; i < g->M; i++)
        memcpy(ac + i * ld, g->A + i * g->a_rs, (size_t)g->K * sizeof(float));
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
        g->im->pack_b(g->B + j0 * g->b_cs, g->b_cs, g->b_rs, nc, g->K, d);
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
    g->tm = btm;
    g->tn = btn;
    g->mstep = ceil_div(pm, btm) * mr;
    g->nstep = ceil_div(pn, btn) * nr;
}

void kiln__sgemm_ex(kiln_pool *pool, int nthreads, const kiln_gemm *a)
{
    const int64_t M = a->M, N = a->N, K = a->K;
    if (M <= 0 || N <= 0)
        return;
    const kiln_epi *epi = kiln__epi_is_noop(a->epi) ? NULL : a->epi;
    if (K <= 0 || a->alpha == 0.0f) {
        scale_c(a->C, a->ldc, M, N, a->beta);
        if (epi)
            kiln__epi_apply_f32(epi, a->C, a->ldc, M, N, 0, 0);
        return;
    }
    gemm_job g = {0};
    const gemm_impl *im = select_impl();
    g.im = im;
    g.M = M;
    g.N = N;
    g.K = K;
    g.alpha = a->alpha;
    g.beta = a->beta;
    g.A = a->A;
    g.B = a->B;
    g.C = a->C;
    g.ldc = a->ldc;
    g.a_rs = a->trans_a ? 1 : a->lda;
    g.a_cs = a->trans_a ? a->lda : 1;
    g.b_rs = a->trans_b ? 1 : a->ldb;
    g.b_cs = a->trans_b ? a->ldb : 1;
    g.packb = a->packb;
    g.bpack = a->bpack;
    g.packb_ctx = a->packb_ctx;
    g.epi = epi;
    g.direct_a = im->direct_a && !a->trans_a && a->lda > 0;
    g.apack = a->apack && kiln__sgemm_apack_mr() > 0 ? a->apack : NULL;
    g.apack_next = g.apack ? a->apack_next : NULL;

    nthreads = kiln__pool_clamp(pool, nthreads);
    double flops = 2.0 * (double)M * (double)N * (double)K;
    /* at least GEMM_MIN_FLOPS_PER_THREAD of work per thread, or waking threads costs more
     * than it saves */
    if ((double)nthreads * GEMM_MIN_FLOPS_PER_THREAD > flops)
        nthreads = flops < GEMM_MIN_FLOPS_PER_THREAD ? 1 : (int)(flops / GEMM_MIN_FLOPS_PER_THREAD);

    /* tiny problems and GEMV shapes: no packing (needs op(B) in memory) */
    if (!g.packb && !g.bpack && !g.apack && (flops < 65536.0 || M == 1 || N == 1)) {
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
    if (g.bpack && M == 1 && im == &impl_avx512) {
        kiln__parallel_for(pool, nthreads, ceil_div(N, im->nr), 1, row_task, &g);
        return;
    }
#endif
    unalias_a(&g);
    plan_grid(&g, nthreads);
    /* a grid split only along N gets several tasks per thread (taken dynamically by the pool):
     * no operand is packed twice, and a thread that is descheduled for a while (a shared
     * machine) no longer holds everyone up */
    int ntask_threads = (int)(g.tm * g.tn);
    if (g.tm == 1 && g.tn > 1) {
        int64_t pn = ceil_div(N, im->nr);
        int64_t f = 4;
        while (f > 1 && (pn < g.tn * f * 2 || flops / (double)(g.tn * f) < 1.0e6))
            f--;
        if (f > 1) {
            g.tn *= f;
            g.nstep = ceil_div(pn, g.tn) * im->nr;
            g.tn = ceil_div(N, g.nstep);
        }
    }
    /* blocking, balanced so the last block is not a sliver */
    int64_t kb = ceil_div(K, im->kc);
    g.kc = ceil_div(K, kb);
    int64_t mb = ceil_div(g.mstep, im->mc);
    g.mc = ceil_div(ceil_div(g.mstep, mb), im->mr) * im->mr;
    int64_t nb = ceil_div(g.nstep, im->nc);
    g.nc = ceil_div(ceil_div(g.nstep, nb), im->nr) * im->nr;
    share_a(pool, ntask_threads, &g);
    g.buf_floats = (size_t)(g.nc * g.kc + g.kc + 16 + (g.direct_a || g.apack ? 0 : g.mc * g.kc));
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
    return im == &impl_avx2 ? im->mr : 0;
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
    if (im == &impl_avx512)
        return 3;
    if (im == &impl_avx2)
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

bool kiln__conv_direct_available(void)
{
#if GEMM_X86
    return select_impl() == &impl_avx512;
#else
    return false;
#endif
}

void kiln__conv_direct_f32(kiln_pool *pool, int nthreads, const kiln_convd *d)
{
#if GEMM_X86
    if (d->M <= 0 || d->Ho <= 0 || d->Wo <= 0)
        return;
    const kiln_epi *epi = kiln__epi_is_noop(d->epi) ? NULL : d->epi;
    kiln_convd dd = *d;
    dd.epi = epi;
    if (d->K <= 0) {
        for (int64_t i = 0; i < d->M; i++)
            memset(d->C + i * d->ldc, 0, sizeof(float) * (size_t)(d->Ho * d->Wo));
        if (epi)
            kiln__epi_apply_f32(epi, d->C, d->ldc, d->M, d->Ho * d->Wo, 0, 0);
        return;
    }
    convd_job j = {.d = &dd, .tw = ceil_div(d->Wo, 32)};
    int64_t tiles = d->Ho * j.tw;
    double flops = 2.0 * (double)d->M * (double)d->K * 32.0;   /* per tile */
    int64_t grain = flops * 4 >= GEMM_MIN_FLOPS_PER_THREAD ? 1 : (int64_t)(GEMM_MIN_FLOPS_PER_THREAD / (flops * 4)) + 1;
    kiln__parallel_for(pool, nthreads, tiles, grain, convd_task, &j);
#else
    (void)pool;
    (void)nthreads;
    (void)d;
#endif
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

/* Single-precision GEMM for the CPU backend (Conv via im2col, MatMul, Gemm).
 *
 * C[M,N] = alpha * op(A)[M,K] * op(B)[K,N] + beta * C, row-major with leading dimensions.
 *
 * Structure (GotoBLAS / BLIS style):
 *   - C is split into a grid of tasks (about one per thread) run through kiln__parallel_for;
 *     each task allocates its own packing buffers, so concurrent sgemm calls and threads
 *     never share mutable state.
 *   - Inside a task: NC-wide column blocks of C; KC-deep slices of K, for which op(B) is packed
 *     into NR-wide k-major panels; MC-high row blocks, for which op(A) is packed into MR-high
 *     k-major panels; then an MR x NR register-blocked micro-kernel over each tile.
 *   - Micro-kernels, chosen at run time with __builtin_cpu_supports: AVX-512F+FMA 8 x 32
 *     (with cheaper variants for 1-, 16- and 17-column edge tiles), AVX2+FMA 6 x 16, and
 *     portable C 6 x 8 (GNU vector extensions).
 *   - Tiny problems, GEMV shapes (M == 1 or N == 1) and allocation failures take a direct
 *     path without packing.
 * Edge tiles are handled by zero padding in the packed panels and masked / partial stores, so
 * every size is supported. With beta == 0, C is never read. */
#include "../kernel.h"

#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#define GEMM_X86 1
#include <immintrin.h>
#else
#define GEMM_X86 0
#endif

/* Micro-kernel: the C tile at c (m <= mr rows of stride ldc, n <= nr columns) becomes
 * alpha * sum_k pa[k*mr + i] * pb[k*nr + j] + beta * tile, over kc steps. */
typedef void (*gemm_ukr_fn)(int64_t kc, const float *pa, const float *pb, float *c, int64_t ldc, float alpha,
                            float beta, int m, int n);
/* Packs n lines (line i starts at src + i*si, consecutive k at stride sk) into panels of width w,
 * k-major: dst[p*kc*w + k*w + r] = element k of line p*w + r; the last panel is zero padded. */
typedef void (*gemm_pack_fn)(const float *src, int64_t si, int64_t sk, int64_t n, int64_t kc, float *dst);

typedef struct gemm_impl {
    int mr, nr;
    gemm_ukr_fn ukr;
    gemm_pack_fn pack_a, pack_b;   /* pack_a: width mr, pack_b: width nr */
    int64_t mc, kc, nc;            /* cache blocking targets */
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

/* C tile update from an accumulator tile t (row stride ldt). */
static void store_tile(const float *t, int ldt, float *c, int64_t ldc, float alpha, float beta, int m, int n)
{
    for (int i = 0; i < m; i++) {
        float *cr = c + i * ldc;
        const float *tr = t + i * ldt;
        if (beta == 0.0f) {
            for (int j = 0; j < n; j++)
                cr[j] = alpha * tr[j];
        } else {
            for (int j = 0; j < n; j++)
                cr[j] = alpha * tr[j] + beta * cr[j];
        }
    }
}

/* ------------------------------------------------------------------------------------------
 * Portable micro-kernel: 6 x 8, written with GNU vector extensions (4 floats per vector)
 * ------------------------------------------------------------------------------------------ */

#define MR_C 6
#define NR_C 8

typedef float gemm_v4 __attribute__((vector_size(16)));

static void ukr_c(int64_t kc, const float *pa, const float *pb, float *c, int64_t ldc, float alpha, float beta,
                  int m, int n)
{
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
    float t[MR_C * NR_C];
    memcpy(t, acc, sizeof t);
    store_tile(t, NR_C, c, ldc, alpha, beta, m, n);
}

static void pack_c_a(const float *src, int64_t si, int64_t sk, int64_t n, int64_t kc, float *dst)
{
    pack_generic(src, si, sk, n, kc, dst, MR_C);
}
static void pack_c_b(const float *src, int64_t si, int64_t sk, int64_t n, int64_t kc, float *dst)
{
    pack_generic(src, si, sk, n, kc, dst, NR_C);
}

static const gemm_impl impl_c = {MR_C, NR_C, ukr_c, pack_c_a, pack_c_b, 128, 256, 1024};

#if GEMM_X86
/* ------------------------------------------------------------------------------------------
 * AVX2 + FMA micro-kernel: 6 x 16
 * ------------------------------------------------------------------------------------------ */

#define MR_AVX2 6
#define NR_AVX2 16

__attribute__((target("avx2,fma"))) static void ukr_avx2(int64_t kc, const float *pa, const float *pb, float *c,
                                                          int64_t ldc, float alpha, float beta, int m, int n)
{
    __m256 c0[MR_AVX2], c1[MR_AVX2];
#pragma GCC unroll 8
    for (int i = 0; i < MR_AVX2; i++)
        c0[i] = c1[i] = _mm256_setzero_ps();
    for (int i = 0; i < m; i++)
        _mm_prefetch((const char *)(c + i * ldc), _MM_HINT_T0);
#pragma GCC unroll 4
    for (int64_t k = 0; k < kc; k++) {
        __m256 b0 = _mm256_load_ps(pb), b1 = _mm256_load_ps(pb + 8);
#pragma GCC unroll 8
        for (int i = 0; i < MR_AVX2; i++) {
            __m256 a = _mm256_broadcast_ss(pa + i);
            c0[i] = _mm256_fmadd_ps(a, b0, c0[i]);
            c1[i] = _mm256_fmadd_ps(a, b1, c1[i]);
        }
        pa += MR_AVX2;
        pb += NR_AVX2;
    }
    if (m == MR_AVX2 && n == NR_AVX2) {
        __m256 va = _mm256_set1_ps(alpha), vb = _mm256_set1_ps(beta);
#pragma GCC unroll 8
        for (int i = 0; i < MR_AVX2; i++) {
            float *cr = c + i * ldc;
            __m256 r0 = _mm256_mul_ps(c0[i], va), r1 = _mm256_mul_ps(c1[i], va);
            if (beta != 0.0f) {
                r0 = _mm256_fmadd_ps(_mm256_loadu_ps(cr), vb, r0);
                r1 = _mm256_fmadd_ps(_mm256_loadu_ps(cr + 8), vb, r1);
            }
            _mm256_storeu_ps(cr, r0);
            _mm256_storeu_ps(cr + 8, r1);
        }
    } else {
        float t[MR_AVX2 * NR_AVX2] __attribute__((aligned(32)));
#pragma GCC unroll 8
        for (int i = 0; i < MR_AVX2; i++) {
            _mm256_store_ps(t + i * NR_AVX2, c0[i]);
            _mm256_store_ps(t + i * NR_AVX2 + 8, c1[i]);
        }
        store_tile(t, NR_AVX2, c, ldc, alpha, beta, m, n);
    }
}

__attribute__((target("avx2,fma"))) static void pack_avx2_a(const float *src, int64_t si, int64_t sk, int64_t n,
                                                             int64_t kc, float *dst)
{
    pack_generic(src, si, sk, n, kc, dst, MR_AVX2);
}
__attribute__((target("avx2,fma"))) static void pack_avx2_b(const float *src, int64_t si, int64_t sk, int64_t n,
                                                             int64_t kc, float *dst)
{
    pack_generic(src, si, sk, n, kc, dst, NR_AVX2);
}

static const gemm_impl impl_avx2 = {MR_AVX2, NR_AVX2, ukr_avx2, pack_avx2_a, pack_avx2_b, 144, 256, 1024};

/* ------------------------------------------------------------------------------------------
 * AVX-512F + FMA micro-kernel: 8 x 32
 * ------------------------------------------------------------------------------------------ */

#define MR_512 8
#define NR_512 32

/* Edge-tile variants of the 8 x 32 kernel, so a narrow last panel does not pay for 32 columns. */
enum { W_FULL, W_17, W_16, W_1 };

__attribute__((target("avx512f,fma"), always_inline)) static inline void
ukr512_body(int64_t kc, const float *pa, const float *pb, float *c, int64_t ldc, float alpha, float beta, int m,
            int n, const int variant)
{
    __m512 c0[MR_512], c1[MR_512];
    __m256 cx = _mm256_setzero_ps();   /* extra column (W_17: column 16, W_1: column 0), 8 rows */
#pragma GCC unroll 8
    for (int i = 0; i < MR_512; i++)
        c0[i] = c1[i] = _mm512_setzero_ps();
    for (int i = 0; i < m; i++) {
        _mm_prefetch((const char *)(c + i * ldc), _MM_HINT_T0);
        _mm_prefetch((const char *)(c + i * ldc + n - 1), _MM_HINT_T0);
    }
    if (variant == W_FULL) {
#pragma GCC unroll 4
        for (int64_t k = 0; k < kc; k++) {
            __m512 b0 = _mm512_load_ps(pb), b1 = _mm512_load_ps(pb + 16);
#pragma GCC unroll 8
            for (int i = 0; i < MR_512; i++) {
                __m512 a = _mm512_set1_ps(pa[i]);
                c0[i] = _mm512_fmadd_ps(a, b0, c0[i]);
                c1[i] = _mm512_fmadd_ps(a, b1, c1[i]);
            }
            pa += MR_512;
            pb += NR_512;
        }
    } else if (variant == W_17 || variant == W_16) {
#pragma GCC unroll 4
        for (int64_t k = 0; k < kc; k++) {
            __m512 b0 = _mm512_load_ps(pb);
#pragma GCC unroll 8
            for (int i = 0; i < MR_512; i++)
                c0[i] = _mm512_fmadd_ps(_mm512_set1_ps(pa[i]), b0, c0[i]);
            if (variant == W_17)
                cx = _mm256_fmadd_ps(_mm256_load_ps(pa), _mm256_set1_ps(pb[16]), cx);
            pa += MR_512;
            pb += NR_512;
        }
    } else {
        /* one column: four independent chains hide the FMA latency */
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
            _mm512_mask_storeu_ps(cr, k0, r0);
            if (variant == W_FULL) {
                __m512 r1 = _mm512_mul_ps(c1[i], va);
                if (beta != 0.0f)
                    r1 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(k1, cr + 16), vb, r1);
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
            *cp = beta == 0.0f ? alpha * x[i] : alpha * x[i] + beta * *cp;
        }
    }
}

__attribute__((target("avx512f,fma"))) static void ukr_avx512(int64_t kc, const float *pa, const float *pb,
                                                               float *c, int64_t ldc, float alpha, float beta,
                                                               int m, int n)
{
    if (n > 17)
        ukr512_body(kc, pa, pb, c, ldc, alpha, beta, m, n, W_FULL);
    else if (n == 17)
        ukr512_body(kc, pa, pb, c, ldc, alpha, beta, m, n, W_17);
    else if (n > 1)
        ukr512_body(kc, pa, pb, c, ldc, alpha, beta, m, n, W_16);
    else
        ukr512_body(kc, pa, pb, c, ldc, alpha, beta, m, n, W_1);
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
        /* rows of op(B) contiguous (B not transposed) */
        for (int64_t p = 0; p < n; p += 32, dst += kc * 32) {
            int64_t nw = min64(32, n - p);
            const float *s = src + p;
            if (nw == 32) {
                for (int64_t k = 0; k < kc; k++) {
                    _mm512_store_ps(dst + k * 32, _mm512_loadu_ps(s + k * sk));
                    _mm512_store_ps(dst + k * 32 + 16, _mm512_loadu_ps(s + k * sk + 16));
                }
            } else {
                __mmask16 m0 = nw >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << nw) - 1u);
                __mmask16 m1 = nw > 16 ? (__mmask16)((1u << (nw - 16)) - 1u) : (__mmask16)0;
                for (int64_t k = 0; k < kc; k++) {
                    _mm512_store_ps(dst + k * 32, _mm512_maskz_loadu_ps(m0, s + k * sk));
                    _mm512_store_ps(dst + k * 32 + 16, _mm512_maskz_loadu_ps(m1, s + k * sk + 16));
                }
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
                                      GEMM_MC512, GEMM_KC512, GEMM_NC512};
#endif /* GEMM_X86 */

#ifndef GEMM_MIN_FLOPS_PER_THREAD
#define GEMM_MIN_FLOPS_PER_THREAD 2.0e6
#endif

/* KILN_GEMM_FORCE_AVX2 / KILN_GEMM_FORCE_C (build-time testing aids) skip the wider kernels. */
static const gemm_impl *select_impl(void)
{
#if GEMM_X86
#if !defined(KILN_GEMM_FORCE_AVX2) && !defined(KILN_GEMM_FORCE_C)
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("fma"))
        return &impl_avx512;
#endif
#if !defined(KILN_GEMM_FORCE_C)
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
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

/* ------------------------------------------------------------------------------------------
 * Packed path
 * ------------------------------------------------------------------------------------------ */

/* Rows [m0,m1) x columns [n0,n1) of C, with this task's packing buffers pa and pb. */
static void packed_block(const gemm_job *g, int64_t m0, int64_t m1, int64_t n0, int64_t n1, float *pa, float *pb)
{
    const gemm_impl *im = g->im;
    const int mr = im->mr, nr = im->nr;
    const int64_t K = g->K, ldc = g->ldc;
    for (int64_t jc = n0; jc < n1; jc += g->nc) {
        int64_t nc = min64(g->nc, n1 - jc);
        for (int64_t pc = 0; pc < K; pc += g->kc) {
            int64_t kc = min64(g->kc, K - pc);
            float beta = pc == 0 ? g->beta : 1.0f;   /* later K slices accumulate */
            im->pack_b(g->B + pc * g->b_rs + jc * g->b_cs, g->b_cs, g->b_rs, nc, kc, pb);
            for (int64_t ic = m0; ic < m1; ic += g->mc) {
                int64_t mc = min64(g->mc, m1 - ic);
                im->pack_a(g->A + ic * g->a_rs + pc * g->a_cs, g->a_rs, g->a_cs, mc, kc, pa);
                float *cblk = g->C + ic * ldc + jc;
                for (int64_t jr = 0; jr < nc; jr += nr) {
                    int n = (int)min64(nr, nc - jr);
                    for (int64_t ir = 0; ir < mc; ir += mr) {
                        int m = (int)min64(mr, mc - ir);
                        im->ukr(kc, pa + ir * kc, pb + jr * kc, cblk + ir * ldc + jr, ldc, g->alpha, beta, m, n);
                    }
                }
            }
        }
    }
}

static void gemm_task(void *ctx, int64_t begin, int64_t end)
{
    const gemm_job *g = ctx;
    void *raw = kiln__malloc(g->buf_floats * sizeof(float) + 128);
    float *pa = NULL, *pb = NULL;
    if (raw) {
        pa = (float *)(((uintptr_t)raw + 63) & ~(uintptr_t)63);
        pb = pa + g->mc * g->kc;
        pb = (float *)(((uintptr_t)pb + 63) & ~(uintptr_t)63);
    }
    for (int64_t t = begin; t < end; t++) {
        int64_t ti = t / g->tn, tj = t % g->tn;
        int64_t m0 = ti * g->mstep, m1 = min64(g->M, m0 + g->mstep);
        int64_t n0 = tj * g->nstep, n1 = min64(g->N, n0 + g->nstep);
        if (m0 >= m1 || n0 >= n1)
            continue;
        if (raw)
            packed_block(g, m0, m1, n0, n1, pa, pb);
        else
            direct_block(g, m0, m1, n0, n1);   /* out of memory: slow but correct */
    }
    kiln__free(raw);
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

void kiln__sgemm(int nthreads, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                 const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc)
{
    if (M <= 0 || N <= 0)
        return;
    if (K <= 0 || alpha == 0.0f) {
        scale_c(C, ldc, M, N, beta);
        return;
    }
    gemm_job g = {0};
    const gemm_impl *im = select_impl();
    g.im = im;
    g.M = M;
    g.N = N;
    g.K = K;
    g.alpha = alpha;
    g.beta = beta;
    g.A = A;
    g.B = B;
    g.C = C;
    g.ldc = ldc;
    g.a_rs = trans_a ? 1 : lda;
    g.a_cs = trans_a ? lda : 1;
    g.b_rs = trans_b ? 1 : ldb;
    g.b_cs = trans_b ? ldb : 1;

    if (nthreads <= 0)
        nthreads = kiln__default_threads();
    double flops = 2.0 * (double)M * (double)N * (double)K;
    /* at least GEMM_MIN_FLOPS_PER_THREAD of work per thread, or waking threads costs more
     * than it saves */
    if ((double)nthreads * GEMM_MIN_FLOPS_PER_THREAD > flops)
        nthreads = flops < GEMM_MIN_FLOPS_PER_THREAD ? 1 : (int)(flops / GEMM_MIN_FLOPS_PER_THREAD);

    /* tiny problems and GEMV shapes: no packing */
    if (flops < 65536.0 || M == 1 || N == 1) {
        if (nthreads <= 1)
            direct_block(&g, 0, M, 0, N);
        else if (M >= nthreads)
            kiln__parallel_for(nthreads, M, 1, direct_task_rows, &g);
        else
            kiln__parallel_for(nthreads, ceil_div(N, 256), 1, direct_task_cols, &g);
        return;
    }

    plan_grid(&g, nthreads);
    /* blocking, balanced so the last block is not a sliver */
    int64_t kb = ceil_div(K, im->kc);
    g.kc = ceil_div(K, kb);
    int64_t mb = ceil_div(g.mstep, im->mc);
    g.mc = ceil_div(ceil_div(g.mstep, mb), im->mr) * im->mr;
    int64_t nb = ceil_div(g.nstep, im->nc);
    g.nc = ceil_div(ceil_div(g.nstep, nb), im->nr) * im->nr;
    g.buf_floats = (size_t)(g.mc * g.kc + g.nc * g.kc);
    kiln__parallel_for((int)(g.tm * g.tn), g.tm * g.tn, 1, gemm_task, &g);
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

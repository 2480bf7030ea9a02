/* Single-precision GEMM for the CPU backend (Conv via im2col, MatMul, Gemm).
 *
 * C[M,N] = alpha * op(A)[M,K] * op(B)[K,N] + beta * C, row-major with leading dimensions.
 *
 * Structure (GotoBLAS / BLIS style):
 *   - C is split into a grid of tasks (one per thread), run through kiln__parallel_for; each
 *     task owns its packing buffers, so concurrent sgemm calls and threads never share state.
 *   - Inside a task: loop over NC-wide column blocks of C, KC-deep slices of K (op(B) slice
 *     packed into NR-wide k-major panels), MC-high row blocks (op(A) packed into MR-high
 *     k-major panels), then a register-blocked MR x NR micro-kernel.
 *   - Micro-kernels: AVX-512F+FMA (MR512 x 32), AVX2+FMA (6 x 16), and portable C (4 x 16),
 *     picked at run time with __builtin_cpu_supports.
 *   - Tiny problems, GEMV shapes (M == 1 or N == 1) and allocation failures use a direct
 *     path without packing.
 * Partial tiles are handled by zero padding in the packed panels and masked / partial stores,
 * so every size is supported. With beta == 0, C is never read. */
#include "../kernel.h"

#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#define GEMM_X86 1
#include <immintrin.h>
#else
#define GEMM_X86 0
#endif

#ifndef MR512
#define MR512 8
#endif

typedef void (*gemm_ukr_fn)(int64_t kc, const float *pa, const float *pb, float *c, int64_t ldc, float alpha,
                            float beta, int m, int n);
/* Packs `n` lines (line i starts at src + i*si, consecutive k at stride sk) into panels of
 * width w, k-major: dst[p*kc*w + k*w + i'] = line (p*w + i') at k; the last panel is zero padded. */
typedef void (*gemm_pack_fn)(const float *src, int64_t si, int64_t sk, int64_t n, int64_t kc, float *dst);

typedef struct gemm_impl {
    int mr, nr;
    gemm_ukr_fn ukr;
    gemm_pack_fn pack_a, pack_b;   /* pack_a: width mr, pack_b: width nr */
    int64_t mc, kc, nc;            /* cache blocking */
} gemm_impl;

static inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static inline int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }
static inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* ------------------------------------------------------------------------------------------
 * Packing (generic; instantiated with a constant width so the copies vectorize)
 * ------------------------------------------------------------------------------------------ */

static inline __attribute__((always_inline)) void pack_generic(const float *src, int64_t si, int64_t sk, int64_t n,
                                                               int64_t kc, float *dst, const int w)
{
    for (int64_t p = 0; p < n; p += w) {
        int64_t nw = min64(w, n - p);
        const float *s = src + p * si;
        if (si == 1 && nw == w) {
            for (int64_t k = 0; k < kc; k++) {
                const float *sp = s + k * sk;
                float *d = dst + k * w;
                for (int i = 0; i < w; i++)
                    d[i] = sp[i];
            }
        } else if (sk == 1) {
            /* lines contiguous along k: transpose in small k blocks to keep stores local */
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
        dst += kc * w;
    }
}

/* ------------------------------------------------------------------------------------------
 * Portable micro-kernel: 4 x 16
 * ------------------------------------------------------------------------------------------ */

#define MR_C 4
#define NR_C 16

static void store_tile(const float *t, int ldt, float *c, int64_t ldc, float alpha, float beta, int m, int n)
{
    for (int i = 0; i < m; i++) {
        float *cr = c + i * ldc;
        const float *tr = t + i * ldt;
        if (beta == 0.0f) {
            for (int j = 0; j < n; j++)
                cr[j] = alpha * tr[j];
        } else if (beta == 1.0f) {
            for (int j = 0; j < n; j++)
                cr[j] += alpha * tr[j];
        } else {
            for (int j = 0; j < n; j++)
                cr[j] = alpha * tr[j] + beta * cr[j];
        }
    }
}

static void ukr_c(int64_t kc, const float *pa, const float *pb, float *c, int64_t ldc, float alpha, float beta,
                  int m, int n)
{
    float acc[MR_C][NR_C] = {{0}};
    for (int64_t k = 0; k < kc; k++) {
        for (int i = 0; i < MR_C; i++) {
            float a = pa[i];
            for (int j = 0; j < NR_C; j++)
                acc[i][j] += a * pb[j];
        }
        pa += MR_C;
        pb += NR_C;
    }
    store_tile(&acc[0][0], NR_C, c, ldc, alpha, beta, m, n);
}

static void pack_c_a(const float *src, int64_t si, int64_t sk, int64_t n, int64_t kc, float *dst)
{
    pack_generic(src, si, sk, n, kc, dst, MR_C);
}
static void pack_c_b(const float *src, int64_t si, int64_t sk, int64_t n, int64_t kc, float *dst)
{
    pack_generic(src, si, sk, n, kc, dst, NR_C);
}

static const gemm_impl impl_c = {MR_C, NR_C, ukr_c, pack_c_a, pack_c_b, 128, 256, 2048};

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
    __m256 va = _mm256_set1_ps(alpha), vb = _mm256_set1_ps(beta);
    if (m == MR_AVX2 && n == NR_AVX2) {
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

static const gemm_impl impl_avx2 = {MR_AVX2, NR_AVX2, ukr_avx2, pack_avx2_a, pack_avx2_b, 144, 256, 2048};

/* ------------------------------------------------------------------------------------------
 * AVX-512F + FMA micro-kernel: MR512 x 32
 * ------------------------------------------------------------------------------------------ */

#define NR_512 32

__attribute__((target("avx512f,fma"))) static void ukr_avx512(int64_t kc, const float *pa, const float *pb,
                                                               float *c, int64_t ldc, float alpha, float beta,
                                                               int m, int n)
{
    __m512 c0[MR512], c1[MR512];
#pragma GCC unroll 16
    for (int i = 0; i < MR512; i++) {
        _mm_prefetch((const char *)(c + i * ldc), _MM_HINT_T0);
        _mm_prefetch((const char *)(c + i * ldc + 31), _MM_HINT_T0);
        c0[i] = c1[i] = _mm512_setzero_ps();
    }
#pragma GCC unroll 4
    for (int64_t k = 0; k < kc; k++) {
        __m512 b0 = _mm512_load_ps(pb), b1 = _mm512_load_ps(pb + 16);
#pragma GCC unroll 16
        for (int i = 0; i < MR512; i++) {
            __m512 a = _mm512_set1_ps(pa[i]);
            c0[i] = _mm512_fmadd_ps(a, b0, c0[i]);
            c1[i] = _mm512_fmadd_ps(a, b1, c1[i]);
        }
        pa += MR512;
        pb += NR_512;
    }
    __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
    __mmask16 k0 = n >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << n) - 1u);
    __mmask16 k1 = n >= 32 ? (__mmask16)0xFFFF : n > 16 ? (__mmask16)((1u << (n - 16)) - 1u) : (__mmask16)0;
#pragma GCC unroll 16
    for (int i = 0; i < MR512; i++) {
        if (i >= m)
            break;
        float *cr = c + i * ldc;
        __m512 r0 = _mm512_mul_ps(c0[i], va), r1 = _mm512_mul_ps(c1[i], va);
        if (beta != 0.0f) {
            r0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(k0, cr), vb, r0);
            r1 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(k1, cr + 16), vb, r1);
        }
        _mm512_mask_storeu_ps(cr, k0, r0);
        _mm512_mask_storeu_ps(cr + 16, k1, r1);
    }
}

__attribute__((target("avx512f,fma"))) static void pack_avx512_a(const float *src, int64_t si, int64_t sk,
                                                                  int64_t n, int64_t kc, float *dst)
{
    pack_generic(src, si, sk, n, kc, dst, MR512);
}
__attribute__((target("avx512f,fma"))) static void pack_avx512_b(const float *src, int64_t si, int64_t sk,
                                                                  int64_t n, int64_t kc, float *dst)
{
    pack_generic(src, si, sk, n, kc, dst, NR_512);
}

#ifndef MC512
#define MC512 192
#endif
#ifndef KC512
#define KC512 256
#endif
#ifndef NC512
#define NC512 2048
#endif
static const gemm_impl impl_avx512 = {MR512, NR_512, ukr_avx512, pack_avx512_a, pack_avx512_b, MC512, KC512, NC512};
#endif /* GEMM_X86 */

static const gemm_impl *select_impl(void)
{
#if GEMM_X86
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("fma"))
        return &impl_avx512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        return &impl_avx2;
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

/* Unpacked computation of rows [m0,m1) x columns [n0,n1) of C. */
static void direct_block(const gemm_job *g, int64_t m0, int64_t m1, int64_t n0, int64_t n1)
{
    enum { JB = 256 };
    float acc[JB];
    const int64_t K = g->K;
    for (int64_t i = m0; i < m1; i++) {
        const float *arow = g->A + i * g->a_rs;
        float *crow = g->C + i * g->ldc;
        for (int64_t j0 = n0; j0 < n1; j0 += JB) {
            int64_t nj = min64(JB, n1 - j0);
            if (g->b_cs == 1) {
                /* op(B) rows contiguous: axpy form */
                for (int64_t j = 0; j < nj; j++)
                    acc[j] = 0.0f;
                for (int64_t k = 0; k < K; k++) {
                    float a = arow[k * g->a_cs];
                    const float *brow = g->B + k * g->b_rs + j0;
                    for (int64_t j = 0; j < nj; j++)
                        acc[j] += a * brow[j];
                }
            } else {
                /* op(B) columns contiguous along k (or strided): dot form, 8 partial sums */
                for (int64_t j = 0; j < nj; j++) {
                    const float *bcol = g->B + (j0 + j) * g->b_cs;
                    float s[8] = {0};
                    int64_t k = 0;
                    for (; k + 8 <= K; k += 8)
                        for (int u = 0; u < 8; u++)
                            s[u] += arow[(k + u) * g->a_cs] * bcol[(k + u) * g->b_rs];
                    for (; k < K; k++)
                        s[0] += arow[k * g->a_cs] * bcol[k * g->b_rs];
                    acc[j] = ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
                }
            }
            float *cr = crow + j0;
            if (g->beta == 0.0f) {
                for (int64_t j = 0; j < nj; j++)
                    cr[j] = g->alpha * acc[j];
            } else {
                for (int64_t j = 0; j < nj; j++)
                    cr[j] = g->alpha * acc[j] + g->beta * cr[j];
            }
        }
    }
}

/* ------------------------------------------------------------------------------------------
 * Packed path
 * ------------------------------------------------------------------------------------------ */

static void packed_block(const gemm_job *g, int64_t m0, int64_t m1, int64_t n0, int64_t n1, float *pa, float *pb)
{
    const gemm_impl *im = g->im;
    const int mr = im->mr, nr = im->nr;
    const int64_t K = g->K;
    const int64_t nkb = ceil_div(K, g->kc);
    const int64_t kcb = ceil_div(K, nkb);   /* balanced K slices */
    for (int64_t jc = n0; jc < n1; jc += g->nc) {
        int64_t nc = min64(g->nc, n1 - jc);
        for (int64_t pc = 0; pc < K; pc += kcb) {
            int64_t kc = min64(kcb, K - pc);
            float beta = pc == 0 ? g->beta : 1.0f;
            im->pack_b(g->B + pc * g->b_rs + jc * g->b_cs, g->b_cs, g->b_rs, nc, kc, pb);
            for (int64_t ic = m0; ic < m1; ic += g->mc) {
                int64_t mc = min64(g->mc, m1 - ic);
                im->pack_a(g->A + ic * g->a_rs + pc * g->a_cs, g->a_rs, g->a_cs, mc, kc, pa);
                float *cblk = g->C + ic * g->ldc + jc;
                for (int64_t jr = 0; jr < nc; jr += nr) {
                    int n = (int)min64(nr, nc - jr);
                    const float *pbp = pb + jr * kc;
                    for (int64_t ir = 0; ir < mc; ir += mr) {
                        int m = (int)min64(mr, mc - ir);
                        im->ukr(kc, pa + ir * kc, pbp, cblk + ir * g->ldc + jr, g->ldc, g->alpha, beta, m, n);
                    }
                }
            }
        }
    }
}

static void gemm_task(void *ctx, int64_t begin, int64_t end)
{
    const gemm_job *g = ctx;
    void *raw = kiln__malloc(g->buf_floats * sizeof(float) + 64);
    float *pa = NULL, *pb = NULL;
    if (raw) {
        pa = (float *)(((uintptr_t)raw + 63) & ~(uintptr_t)63);
        pb = pa + ceil_div(g->mc, g->im->mr) * g->im->mr * g->kc;
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
            direct_block(g, m0, m1, n0, n1);
    }
    kiln__free(raw);
}

/* Direct path split over rows (or columns when M is small) for the thread pool. */
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

/* Picks the task grid tm x tn (tm * tn <= nt) minimizing the largest task plus packing. */
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
            /* compute ~ 2*mt*ntl*K flops; packing ~ (mt + ntl) * K elements, costing ~ 24 flops each */
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
    g.im = select_impl();
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
    /* at least ~1 MFLOP per thread, otherwise threading costs more than it saves */
    int64_t max_par = (int64_t)(flops / 1.0e6);
    if (max_par < 1)
        max_par = 1;
    if (nthreads > max_par)
        nthreads = (int)max_par;

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

    const gemm_impl *im = g.im;
    plan_grid(&g, nthreads);
    /* blocking, balanced so the last block is not a sliver */
    int64_t kb = ceil_div(K, im->kc);
    g.kc = ceil_div(K, kb);
    int64_t mb = ceil_div(g.mstep, im->mc);
    g.mc = ceil_div(ceil_div(g.mstep, mb), im->mr) * im->mr;
    int64_t nb = ceil_div(g.nstep, im->nc);
    g.nc = ceil_div(ceil_div(g.nstep, nb), im->nr) * im->nr;
    g.buf_floats = (size_t)(g.mc * g.kc + g.nc * g.kc + 64);
    kiln__parallel_for((int)(g.tm * g.tn), g.tm * g.tn, 1, gemm_task, &g);
}

/* Plain reference: triple loop with a double accumulator. */
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

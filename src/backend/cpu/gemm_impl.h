/* The CPU GEMM's internals shared by its driver (gemm.c) and its ISA micro-kernels (x86/gemm_avx2.c,
 * x86/gemm_avx512.c): the tile-store arguments, the micro-kernel and packer types, an implementation's table,
 * the generic packer and the scalar tile store. Not a public interface (gemm.h is). */
#ifndef KILN_BACKEND_CPU_GEMM_IMPL_H
#define KILN_BACKEND_CPU_GEMM_IMPL_H
#include "gemm.h"
#include "scratch.h"
#include <string.h>

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
    const char *pf_b;    /* tall kernel: pf_b_lines 64-byte lines from here (this tile's share of the next pre-packed
                          * B panel) prefetched into L2, spread over its k loop; or NULL */
    int pf_b_lines;
    const float *colv;   /* direct A (AVX-512), 17-column tile: column 16 of the B panel, contiguous; or a tile
                          * of n <= DOT_COLS columns: DOT_COLS columns of kc floats each (zero past n); or the
                          * 49-column tile: its column 48 (column 16 of pbn) */
    const float *pbn;    /* the 49-column tile (AVX-512, A in place, packed B: W49_COLS): columns 32-48 of the tile, the
                          * next packed panel at the same k */
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
    bool ukr49;                    /* ukr takes n == W49_COLS columns of two packed panels (t->pbn, t->colv) */
} gemm_impl;

/* A last panel this narrow, with A read in place (AVX-512), runs as dot products along k (see panel_at) */
#define DOT_COLS 4
/* A block whose last 49 columns are two packed panels (32 + 17: a 7x7 map's N = 49) runs them as one tile with A read
 * in place (AVX-512; see packed_block) */
#define W49_COLS 49

static inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* at least this much work (FLOPs) per thread, or waking threads costs more than it saves (GEMMs, the direct
 * convolution's tiles) */
#ifndef GEMM_MIN_FLOPS_PER_THREAD
#define GEMM_MIN_FLOPS_PER_THREAD 2.0e6
#endif

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
static inline void store_tile(const float *acc, int ldt, float *c, int64_t ldc, int m, int n, const tile_args *t)
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


#if GEMM_X86
/* x86/gemm_avx2.c: 6 x 16 AVX2 + FMA; x86/gemm_avx512.c: 8 x 32 (12 x 32 tall) AVX-512F + FMA, its one-row GEMV
 * against pre-packed B and the direct convolution's task */
extern const gemm_impl kiln__gemm_impl_avx2, kiln__gemm_impl_avx512;
void kiln__gemm_row512(int64_t K, const float *a, int64_t as, const float *bpack, int64_t p0, int64_t p1, int64_t N,
                       float *c, const tile_args *t);
void kiln__gemm_convd_task(void *ctx, int64_t t0, int64_t t1);   /* kiln__conv_direct_drive's task, 32 pixels */
#endif
#endif

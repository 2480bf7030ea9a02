/* Extended single-precision GEMM (see gemm.c): fused epilogue and a caller-supplied B packer.
 *
 *   C = epi(alpha * op(A) op(B) + beta * C)       (epi: bias, residual, activation; epilogue.h)
 *
 * The epilogue is applied while each C tile is still in registers (AVX-512) or in L1, so a
 * fused layer writes its output exactly once. Every element of C is written (with beta == 0,
 * C is never read), so C may be uninitialized memory. */
#ifndef KILN_BACKEND_CPU_GEMM_H
#define KILN_BACKEND_CPU_GEMM_H
#include "../kernel.h"
#include "epilogue.h"

/* Packs rows [k0, k0+kc) x columns [j0, j0+nc) of op(B) into nr-wide k-major panels:
 * dst[p*kc*nr + k*nr + r] = op(B)(k0 + k, j0 + p*nr + r), zero for columns >= j0 + nc.
 * Called concurrently from several threads (for disjoint or identical blocks). */
typedef void (*kiln_gemm_packb_fn)(void *ctx, int64_t k0, int64_t kc, int64_t j0, int64_t nc, int nr, float *dst);

typedef struct kiln_gemm {
    int64_t M, N, K;
    float alpha, beta;
    bool trans_a, trans_b;
    const float *A;
    int64_t lda;
    const float *B;              /* ignored when packb is set */
    int64_t ldb;
    const float *B2;             /* or NULL. Rows k >= kb2 of op(B) are read from B2 + (k - kb2) * ldb instead of
                                  * B (row-major, same ldb; not with trans_b, packb or bpack): two operands stacked
                                  * along K without a copy (FusedConvSum: [W1 | W2] x [X1 ; X2]) */
    int64_t kb2;
    kiln_gemm_packb_fn packb;    /* NULL: op(B) read from B / ldb / trans_b */
    void *packb_ctx;
    const float *bpack;          /* or op(B) already packed over the whole K: panel p (columns
                                  * p*nr .. p*nr+nr-1, nr = kiln__sgemm_nr()) at bpack + p*K*nr,
                                  * element (k, p*nr + r) at [k*nr + r]; columns >= N are ignored;
                                  * 64-byte aligned */
    float *C;
    int64_t ldc;
    const kiln_epi *epi;         /* NULL: none. Its residual must not overlap C, unless it is C itself (res == C,
                                  * ldr == ldc, beta == 0; a FusedConv computed in place over its residual,
                                  * runtime/plan.c): see kiln__sgemm_res_in_place. */
    const float *apack;          /* or op(A) already packed over the whole K (kiln__sgemm_apack), used
                                  * where the host's micro-kernel packs A (kiln__sgemm_apack_mr() > 0;
                                  * A must still be given: the other paths read it) */
    const float *apack_next;     /* optional, with apack: the packed A (same M and K) of the caller's
                                  * next GEMM, whose first block is prefetched during the last one */
} kiln_gemm;

void kiln__sgemm_ex(kiln_pool *pool, int nthreads, const kiln_gemm *g);
/* Whether kiln__sgemm_ex, with A row-major and read in place (not transposed), B row-major (no packer, not
 * pre-packed) and an epilogue whose residual is C itself, reads each residual element in the tile that stores over
 * it, with the same sums as a residual elsewhere (the AVX-512 packed path in one K slice). Elsewhere such a residual
 * is read as C with beta 1 before anything is stored: the same values, rounded in another order. */
bool kiln__sgemm_res_in_place(int64_t M, int64_t N, int64_t K);
/* The panel width of the packed B layout (32 with AVX-512). */
int kiln__sgemm_nr(void);
/* Which micro-kernel family runs on this host (1 portable C, 2 AVX2+FMA, 3 AVX-512): packed B
 * panels made for one family are only valid for it (panel width and alignment differ). */
int kiln__sgemm_kind(void);
/* The row-panel height of the pre-packed A layout (kiln_gemm.apack): the micro-kernel's mr where it
 * packs A (6 with AVX2 + FMA), 0 where A is read in place (AVX-512) or not supported (portable C). */
int kiln__sgemm_apack_mr(void);
/* Floats of A [M, K] packed over the whole K: ceil(M/mr)*mr*K (mr = kiln__sgemm_apack_mr() > 0). */
int64_t kiln__sgemm_apack_floats(int64_t M, int64_t K);
/* Packs row-major A [M, K] (leading dim lda) into dst (kiln__sgemm_apack_floats(M, K) floats):
 * panel p (rows p*mr ..) at dst + p*K*mr, element (i, k) at [k*mr + i % mr], zero rows past M;
 * exactly the panels the GEMM would pack itself, so a product over them is bit-identical (except the
 * tiny and GEMV shapes the GEMM computes unpacked: with apack they take the packed path). False
 * where the host's GEMM takes no packed A (kiln__sgemm_apack_mr() == 0). */
bool kiln__sgemm_apack(int64_t M, int64_t K, const float *A, int64_t lda, float *dst);
/* Floats of op(B) [K, N] packed over the whole K (the kiln_gemm.bpack layout): ceil(N/nr)*K*nr. */
int64_t kiln__sgemm_bpack_floats(int64_t K, int64_t N);
/* Packs op(B) (B row-major with leading dim ldb, transposed when trans_b) into dst, which holds
 * kiln__sgemm_bpack_floats(K, N) floats (any alignment; the GEMM reads it 64-byte aligned):
 * exactly the panels the GEMM would pack itself, so a product over them is bit-identical to one
 * over B. False when out of memory (an unaligned dst is packed through a temporary). */
bool kiln__sgemm_bpack(bool trans_b, int64_t K, int64_t N, const float *B, int64_t ldb, float *dst);

/* Direct 2-D convolution tiles ("indirect B"): C[M, Ho*Wo] = epi(A[M, K] x B) where
 *   B(k, oy*Wo + ox) = xp[off[k] + oy*row_stride + ox]
 * i.e. the input was copied once into a zero-padded (and, for column strides > 1, phase-split)
 * layout in which the pixels of one output row are consecutive for every k. No packing: each
 * 32-pixel tile of an output row is read straight from xp (with Wo = 32 q + 16, tiles of 32 consecutive
 * pixels of the flattened output, each 16-pixel half from its own row: kiln_convd_job.flat). xp must be readable up to
 * off[k] + (Ho-1)*row_stride + ceil(Wo/32)*32 for every k. Needs AVX-512 (check
 * kiln__conv_direct_available()). */
typedef struct kiln_convd {
    int64_t M, K;
    const float *A;
    int64_t lda;
    const float *xp;
    const int64_t *off;
    int64_t Ho, Wo, row_stride;
    float *C;
    int64_t ldc;
    const kiln_epi *epi;
} kiln_convd;

bool kiln__conv_direct_available(void);
void kiln__conv_direct_f32(kiln_pool *pool, int nthreads, const kiln_convd *d);

/* The direct convolution's driver, shared by its ISA tiles (kiln__conv_direct_f32 with 32-pixel tiles,
 * x86/convd_avx2.c with 16): nothing for an empty output, zeros (+ epilogue) for K == 0, else `task` over the
 * tiles of tile_w pixels of one output row (ctx: a kiln_convd_job whose d has a no-op epilogue dropped), in
 * grains of at least ~2 MFLOP per 128 pixels a task. */
typedef struct kiln_convd_job {
    const kiln_convd *d;
    int64_t tw;   /* tiles per output row */
    bool flat;    /* tiles of 32 consecutive pixels of the flattened Ho x Wo output, rows of Wo = 32 q + 16 (AVX-512:
                   * a tile's two 16-pixel halves may lie on two output rows); else tw tiles per output row */
} kiln_convd_job;
void kiln__conv_direct_drive(kiln_pool *pool, int nthreads, const kiln_convd *d, int tile_w,
                             void (*task)(void *ctx, int64_t t0, int64_t t1));

#endif

/* BF16 GEMM: float32 activations x BF16 weights -> float32, with AVX512-BF16 vdpbf16ps.
 *
 *   C[M,N] = epi(bf16(A)[M,K] x B[K,N])
 *
 * A (float32, row-major, the activations) is rounded to BF16 while its rows are packed (round to
 * nearest even, docs/PRECISION.md); B (BF16, the constant weights) is packed once into panels of
 * 16 columns with 2 consecutive k per 32-bit lane: element (k, n) at
 *   (n / 16) * kp2 * 16 + (k / 2) * 32 + (n % 16) * 2 + k % 2      (kp2 = K rounded up to even).
 * Products of BF16 values are exact in float32; they are accumulated in float32 (vdpbf16ps
 * adds the two products of a pair, then the accumulator). The epilogue is gemm.h's float
 * epilogue (bias, residual, activation). Hosts without AVX512-BF16 run an AVX2 + FMA tile (BF16
 * widened to float32, FMA) or, without AVX2, a portable C tile, with the same rounding of A (sums
 * in another order). */
#ifndef KILN_BACKEND_CPU_QGEMM_BF16_H
#define KILN_BACKEND_CPU_QGEMM_BF16_H
#include "../kernel.h"
#include "epilogue.h"

typedef struct kiln_bgemm_b {
    int64_t K, N, kp2;
    uint16_t *data;           /* panels, 64-byte aligned */
} kiln_bgemm_b;

/* Packs the K x N BF16 matrix with element (k, n) at src[k*sk + n*sn]. */
kiln_status kiln__bgemm_pack_b(const uint16_t *src, int64_t sk, int64_t sn, int64_t K, int64_t N, kiln_bgemm_b **b);
void kiln__bgemm_free_b(kiln_bgemm_b *b);

/* Packs columns [j0, j0 + n) (n <= 48) of B into dst (3 panels of kp2 x 16, zero padded).
 * Called concurrently from several threads. */
typedef void (*kiln_bpackb_fn)(void *ctx, int64_t j0, int64_t n, uint16_t *dst);

typedef struct kiln_bgemm {
    int64_t M, N, K;
    const float *A;           /* row-major, lda floats per row, rounded to BF16 by the GEMM; or */
    int64_t lda;
    const uint16_t *A16;      /* rows already in BF16: kp2 values per row, zero padded */
    const kiln_bgemm_b *b;    /* B packed; or */
    kiln_bpackb_fn packb;     /* B packed strip by strip (implicit im2col) */
    void *packb_ctx;
    float *C;
    int64_t ldc;
    const kiln_epi *epi;      /* NULL: none; its residual must not overlap C */
} kiln_bgemm;

kiln_status kiln__bgemm(kiln_pool *pool, int nthreads, const kiln_bgemm *g);
/* Columns 16p .. 16p+15 of a strip from two rows of BF16 values (k0 and k0 + 1, 16 each) into the
 * 32 values of their k pair. */
void kiln__bpack_pair16(const uint16_t *r0, const uint16_t *r1, uint16_t *dst);
bool kiln__bgemm_available(void);   /* AVX512-BF16 on this host */
/* The tile kiln__bgemm runs: 3 AMX (x86/bgemm_amx.c), 2 the AVX512-BF16 one, 1 the AVX2 + FMA one
 * (x86/bgemm_avx2.c), 0 the portable C tile; the widest the host has, at most the cap (tests lower it; default 3).
 * With AMX a GEMM where the tiles do not pay (kiln__amx_pays) runs the AVX512-BF16 tile, unless the cap is 4 (tests:
 * the AMX tile for every shape). */
int kiln__bgemm_isa(void);
void kiln__bgemm_set_isa_cap(int cap);

/* x86/bgemm_bf16.c: an m x ncols tile (m <= 8, ncols <= 48) at (i0, j0) from the packed rows
 * a (stride kp2 BF16 values) and the strip's panels bs, stored (plain) into C. */
void kiln__bgemm_tile_bf16(const kiln_bgemm *g, const uint16_t *a, const uint16_t *bs, int64_t i0, int m, int64_t j0,
                           int ncols);

/* x86/bgemm_amx.c: rows [i0, i1) x the strip's ncols (<= 48) columns at j0 with AMX tiles (tdpbf16ps), from A's
 * rows (arows: row i at arows + i * kp2) and the strip's panels bs, stored (plain) into C. Only where
 * kiln__cpu_has(KILN_CPU_AMX_BF16). */
void kiln__bgemm_rows_amx(const kiln_bgemm *g, const uint16_t *arows, const uint16_t *bs, int64_t i0, int64_t i1,
                          int64_t j0, int ncols);

/* x86/bgemm_bf16.c: columns [j0, j0 + 48) of K float32 rows (plane stride hw; columns >= hw taken as 0) rounded to
 * BF16 (kiln__f32_to_bf16's bits) into a strip's 3 panels of pairs (dst, the panel layout above with kp2 pairs): the
 * BF16 pointwise convolution's B, straight from its float32 input. AVX-512F. */
void kiln__bpack_f32_pairs_avx512(const float *x, int64_t hw, int64_t K, int64_t j0, uint16_t *dst);

/* x86/bgemm_avx2.c: the same tile with AVX2 + FMA (BF16 widened to float32, FMA), storing the plain
 * sums (no epilogue). */
void kiln__bgemm_tile_avx2(const kiln_bgemm *g, const uint16_t *a, const uint16_t *bs, int64_t i0, int m, int64_t j0,
                           int ncols);

/* Float32 x FP16 / BF16 weights (Conv, FusedConv, MatMul, FusedMatMul, Gemm, FusedGemm): true
 * when input 0 is float32 and input wi a FLOAT16 or BFLOAT16 tensor. kiln__run_mixed then runs
 * the op: FP16 weights widened to float32 (exact) and the float32 kernel fn; BF16 weights with
 * the activations rounded to BF16 (the vdpbf16ps GEMM for 2-D weights of MatMul / Gemm, else
 * the float32 kernel fn on the rounded activations and widened weights: the same products). */
bool kiln__mixed_weight(const kiln_kctx *ctx, int wi);
/* Build-time packing of a constant 2-D BF16 B of MatMul / Gemm / FusedMatMul / FusedGemm into the
 * BF16 GEMM's panels (a KILN_PREP_BGEMM_B blob, prep.h); the blob replaces the weights only where
 * the node's attributes and constant inputs guarantee the BF16 GEMM takes the layer. */
kiln_status kiln__bgemm_prep(const kiln_node *n, int n_in, const kiln_tensor *const *consts, void **blob,
                             size_t *size);
/* Build-time packing of a constant 4-D BF16 weight of Conv / FusedConv into the BF16 conv's rows (a
 * KILN_PREP_BCONV_W blob); it replaces the weights where the BF16 conv surely takes the layer
 * (stride product <= 16; valid groups). */
kiln_status kiln__bconv_prep(const kiln_node *n, int n_in, const kiln_tensor *const *consts, void **blob,
                             size_t *size);
kiln_status kiln__run_mixed(kiln_kctx *ctx, int wi, kiln_kernel_fn fn);

#endif

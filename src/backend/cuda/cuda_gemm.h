/* cuBLASLt GEMMs shared by the GEMM layers (cuda_gemm.c) and the FP8 layers (cuda_fp8.c). */
#ifndef KILN_BACKEND_CUDA_GEMM_H
#define KILN_BACKEND_CUDA_GEMM_H
#include "cuda_internal.h"

/* One (batched) GEMM in row-major terms: Y = alpha op(A) op(B) + beta C (+ bias, ReLU). */
typedef struct gemm_args {
    bool ta, tb;
    cudaDataType_t ty;        /* C, Y (and A, B unless fp8): CUDA_R_32F, CUDA_R_16F or CUDA_R_16BF; FP32 compute */
    bool fp8;                 /* A, B are FP8 E4M3 (cuBLASLt's "TN" only: tb set, ta clear) */
    const float *b_scale;     /* fp8: device pointer to B's scale (NULL = 1) */
    bool fast;                /* fp8: cuBLASLt's fast accumulation (cu_be.fp8_fast_accum) */
    int64_t M, N, K;
    const void *A, *B;
    void *Y;
    const void *C;            /* beta != 0: the addend (same layout as Y); NULL = Y itself */
    int64_t lda, ldb, ldy;
    float alpha, beta;
    const float *bias;        /* [N] or NULL */
    bool bias_w;              /* bias is a weight (KILN_TENSOR_DEV_WEIGHT): its converted copy is kept */
    bool relu;
    bool gelu;                /* cuBLASLt's GELU epilogue (its tanh form), after the bias */
    bool d_e4m3;              /* Y holds E4M3 bytes: e4m3(d_scale[0] * (the result, epilogue applied)), saturating;
                               * C (ty) then must be a buffer of its own, never read (beta 0) */
    const float *d_scale;     /* d_e4m3: device pointer to the output's 1 / scale */
    int64_t batch, sa, sb, sy;   /* strided batch (batch 1: strides unused) */
} gemm_args;

/* MatMul's shapes: A [..., M, K] @ B [..., K, N] with broadcast batch dims. */
typedef struct mm_shape {
    int64_t M, N, K;
    int nd;                          /* output rank */
    int64_t dims[KILN_MAX_DIMS];
    int nb;                          /* batch rank */
    int64_t bdims[KILN_MAX_DIMS], bsa[KILN_MAX_DIMS], bsb[KILN_MAX_DIMS];   /* batch dims, A / B strides */
    int64_t batch;
} mm_shape;
bool cu_mm_shape(const kiln_tensor *a, const kiln_tensor *b, mm_shape *m);

/* g with its bias / ReLU epilogue (cuBLASLt's where it has one, else kiln's kernel); `slot` tells a
 * layer's GEMMs apart. With gelu or d_e4m3 cuBLASLt's only: KILN_ERR_UNSUPPORTED where it has no algorithm. */
kiln_status cu_gemm_epi(cu_be *b, const kiln_kctx *ctx, int slot, const gemm_args *g);
/* Gemm's C (beta) into g for the output y [M, N] in storage sdt: a float32 row bias with beta 1 as g->bias,
 * else C broadcast into y and g->beta = beta. */
kiln_status cu_gemm_c(cu_be *b, const kiln_kctx *ctx, const kiln_tensor *C, float beta, kiln_dtype sdt,
                      kiln_tensor *y, gemm_args *g);
cudaDataType_t cu_cuda_ty(kiln_dtype sdt);
/* MatMul / FusedMatMul / Gemm / FusedGemm: the ops a low-bit weight GEMM (FP8, 4-bit) runs. */
bool cu_wgemm_op(kiln_op op);
/* Gemm or FusedGemm */
bool cu_is_gemm(kiln_op op);
/* Such a layer's K, N, and whether its 2-D weight w is [K, N] (trans: MatMul, Gemm without transB); false
 * for operands no low-bit GEMM takes (a not float32, Gemm's transA or a non-2-D A, K mismatch). Dims only. */
bool cu_wgemm_dims(const cu_be *b, const kiln_node *n, const kiln_tensor *a, const kiln_tensor *w, int64_t *K,
                   int64_t *N, bool *trans);
/* The rest of such a layer's operands, once its K and N are known: whether it is a Gemm, its fused activation,
 * M = numel(A) / K, the output dims (A's, the last one N), FusedMatMul's bias (input 2, N values) and residual
 * (input 3, M x N); an error for an unknown activation or mismatched sizes. */
typedef struct wgemm_io {
    bool gemm;
    int act;
    float aa, ab;
    int64_t numel, M;
    int nd;
    int64_t dims[KILN_MAX_DIMS];
    const kiln_tensor *bias, *R;
} wgemm_io;
kiln_status cu_wgemm_io(cu_be *b, const kiln_kctx *ctx, int64_t K, int64_t N, wgemm_io *io);
#endif

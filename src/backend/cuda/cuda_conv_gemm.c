/* 1x1 convolutions as cuBLASLt GEMMs. A convolution with a 1x1 filter, stride 1, no padding and one group over
 * channels-last activations is a GEMM: Y [N*H*W, K] = X [N*H*W, C] W^T with the KRSC filter as W [K, C], the bias
 * and ReLU in cuBLASLt's epilogue and the residual as its C (beta 1). cuDNN's engines run these layers (ResNet's
 * reductions and expansions with the residual) well short of the memory bound; cuBLASLt's GEMMs, FP8 ones
 * included, come closer. Each layer takes the faster of the two, timed at its first run (cuda_conv.c for FP16 /
 * BF16, cuda_conv_fp8.c for FP8); KILN_CUDA_CONV_GEMM=0 never takes the GEMM, =1 always where it fits. */
#include "cuda_gemm.h"
#include <stdlib.h>

bool cu_conv_gemm_fits(const int64_t *wd, const cu_geom *g, int64_t group)
{
    if (group != 1 || wd[2] != 1 || wd[3] != 1 || g->nsp != 2)
        return false;
    for (int i = 0; i < 2; i++)
        if (g->s[i] != 1 || g->pb[i] || g->pe[i])
            return false;
    return true;
}

int cu_conv_gemm_mode(void)
{
    const char *e = getenv("KILN_CUDA_CONV_GEMM");
    return !e || !e[0] ? 0 : e[0] == '0' ? -1 : 1;
}

kiln_status cu_conv_gemm(cu_be *b, const kiln_kctx *ctx, const cu_conv_gemm_args *a)
{
    gemm_args g = {.tb = true, .ty = cu_cuda_ty(a->sdt), .fp8 = a->fp8, .b_scale = a->scale, .M = a->M, .N = a->K,
                   .K = a->C, .A = a->x, .B = a->w, .Y = a->y, .C = a->res, .lda = a->C, .ldb = a->C, .ldy = a->K,
                   .alpha = 1.0f, .beta = a->res ? 1.0f : 0.0f, .bias = a->bias, .bias_w = a->bias_w,
                   .relu = a->relu, .batch = 1, .fast = a->fp8 && b->fp8_fast_accum >= 2};
    return cu_gemm_epi(b, ctx, CU_CONV_GEMM_SLOT, &g);
}

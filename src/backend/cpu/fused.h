/* Fused float32 fast paths of the reference kernels, used by the kiln-domain fused layers
 * (k_fused.c; the fused convolution is in conv.h). Each returns with *handled == false, having
 * done nothing, when its fast path does not apply; the caller then runs the generic composition. */
#ifndef KILN_BACKEND_CPU_FUSED_H
#define KILN_BACKEND_CPU_FUSED_H
#include "../kernel.h"
#include "epilogue.h"

/* act(MatMul(A, B) + bias + res), ctx->in = {A, B}: float32, one GEMM (B shared by the whole
 * batch); bias (or NULL) has the last output dim's length, res (or NULL) the output's shape. */
kiln_status kiln__matmul_fused(kiln_kctx *ctx, const kiln_tensor *bias, const kiln_tensor *res, const kiln_act *act,
                               bool *handled);

/* act(Gemm(A, B, C)), ctx->in = {A, B, C?}: float32 2-D; C absent or a bias of the output's
 * last dim ([N] or [1, N]) with beta == 1. */
kiln_status kiln__gemm_fused(kiln_kctx *ctx, const kiln_act *act, bool *handled);

/* Runs kernel `op` on (a, b) (b NULL: a alone) into a fresh heap tensor `out` (no arena), with
 * ctx's node for attributes (k_fused.c). */
kiln_status kiln__kcall(kiln_kctx *ctx, kiln_op op, const kiln_tensor *a, const kiln_tensor *b, kiln_tensor *out);
/* Replaces ctx->out[0] by t (moved). */
void kiln__kreplace_out(kiln_kctx *ctx, kiln_tensor *t);

/* row = softmax(row + add) in place over one row of n floats (add NULL: softmax(row)), NaNs ignored by the
 * maximum; the same values as an add pass over the row followed by the softmax */
typedef void (*kiln_softmax_row_fn)(float *row, const float *add, int64_t n);
/* Attention (k_attention.c; operand permutations of src/ir/fused.h) with a vectorized row softmax (NULL: the scalar loop). */
kiln_status kiln__attention(kiln_kctx *ctx, kiln_softmax_row_fn softmax);

/* one float32 LayerNormalization row of M elements: y = (x - mean) * inv * s + b (b may be NULL),
 * inv = 1 / sqrt(var + eps) (population variance); *mean and *inv returned for the stash outputs */
typedef void (*kiln_layernorm_row_fn)(const float *x, float *y, int64_t M, float eps, const float *s, const float *b,
                                      float *mean, float *inv);
/* LayerNormalization (k_norm.c) with a vectorized float32 row (NULL: the 4-wide loops). */
kiln_status kiln__layernorm(kiln_kctx *ctx, kiln_layernorm_row_fn row);
#endif

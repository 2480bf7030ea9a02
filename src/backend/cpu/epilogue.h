/* Fused epilogues: bias / residual add and an activation applied to a kernel's output. */
#ifndef KILN_BACKEND_EPILOGUE_H
#define KILN_BACKEND_EPILOGUE_H
#include "../kernel.h"

typedef enum kiln_act_kind {
    KILN_ACT_NONE = 0, KILN_ACT_RELU, KILN_ACT_CLIP, KILN_ACT_LEAKYRELU, KILN_ACT_SIGMOID, KILN_ACT_HARDSIGMOID,
    KILN_ACT_HARDSWISH, KILN_ACT_SILU, KILN_ACT_GELU, KILN_ACT_GELU_TANH, KILN_ACT_TANH,
    KILN_ACT_HARDSWISH_AFFINE   /* alpha * HardSwish(x) + beta; the last kind */
} kiln_act_kind;

typedef struct kiln_act {
    kiln_act_kind kind;
    float alpha, beta;   /* Clip: min/max; LeakyRelu: alpha; HardSigmoid, HardSwishAffine: alpha/beta */
} kiln_act;

/* Name of the activation in the IR's fused-op vocabulary (ir/fused.h: "Relu", "Clip", ...), or NULL. */
const char *kiln__act_name(kiln_act_kind k);
/* Reads the fused activation of the node (ir/fused.h) as this epilogue's kind. */
kiln_status kiln__act_from_node(const kiln_kctx *ctx, kiln_act *a);
/* y[i] = act(y[i]) for float32. */
void kiln__act_apply_f32(const kiln_act *a, float *y, int64_t n, kiln_pool *pool, int nthreads);
float kiln__act_scalar(const kiln_act *a, float x);

/* A float32 epilogue applied to a matrix C (rows i, columns j, global coordinates):
 *   C[i,j] = act(C[i,j] + bias + R[i*ldr + j])
 * where bias is bias[i] (row_bias) or bias[j], and bias / res may be NULL. */
typedef struct kiln_epi {
    const float *bias;
    bool row_bias;
    const float *res;
    int64_t ldr;
    kiln_act act;
} kiln_epi;

static inline bool kiln__epi_is_noop(const kiln_epi *e)
{
    return !e || (!e->bias && !e->res && e->act.kind == KILN_ACT_NONE);
}
/* Applies e to the m x n block of C at c (row stride ldc) whose first element has global
 * coordinates (i0, j0). Vectorized (AVX-512, else AVX2 + FMA) where available; scalar semantics otherwise. */
void kiln__epi_apply_f32(const kiln_epi *e, float *c, int64_t ldc, int64_t m, int64_t n, int64_t i0, int64_t j0);
/* Tests: the widest ISA kiln__epi_apply_f32 / kiln__act_apply_f32 use (2 AVX-512, the default; 1 AVX2 + FMA;
 * 0 scalar), so each path can be checked on hosts that have a wider one. Not thread-safe: set it between runs. */
void kiln__epi_set_isa_cap(int cap);
#endif

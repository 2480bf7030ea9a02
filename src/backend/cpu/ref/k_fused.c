/* kiln's fused layers (domain "kiln"), built by the optimization passes:
 *   FusedConv(X, W, B?, R?)     = act(Conv(X, W, B) + R)
 *   FusedMatMul(A, B, bias?, R?) = act(MatMul(A, B) + bias + R)
 *   FusedGemm(A, B, C?)          = act(Gemm(A, B, C))
 *   Attention(Q, KT, V, M?)      = Softmax(Q @ KT * scale + M) @ V   (k_attention.c)
 *   FusedConvSum(X, X2, W, B?)   = act(Conv(X, W1) + Conv(X2, W2) + B), 1x1 convs (k_convsum.c)
 *   FusedConvPool(X, W, B?, s?, z?) = QuantizeLinear?(MaxPool(FusedConv(X, W, B))) (k_convpool.c)
 * float32 takes fast paths that fold the bias, residual and activation into the GEMM /
 * convolution output stores (fused.h); anything else (other dtypes, unusual broadcasting) runs
 * the reference kernel of the main op, then the epilogue as separate passes. */
#include "../../kernel.h"
#include "../epilogue.h"
#include "../conv.h"
#include "../cpu_kernels.h"
#include "../fused.h"
#include "../gemm.h"
#include "../lowbit.h"
#include "../qgemm_bf16.h"
#include <math.h>

kiln_status kiln__kcall(kiln_kctx *ctx, kiln_op op, const kiln_tensor *a, const kiln_tensor *b, kiln_tensor *out)
{
    const kiln_tensor *in[2] = {a, b};
    kiln_tensor *o[1] = {out};
    memset(out, 0, sizeof *out);
    kiln_kctx sub = {.node = ctx->node, .n_in = b ? 2 : 1, .in = in, .n_out = 1, .out = o, .pool = ctx->pool,
                     .nthreads = ctx->nthreads};
    return kiln__ref_kernel(op)(&sub);
}

void kiln__kreplace_out(kiln_kctx *ctx, kiln_tensor *t)
{
    kiln_tensor *y = ctx->out[0];
    kiln__kout_release(ctx, y);
    *y = *t;
    memset(t, 0, sizeof *t);
}

static bool same_shape_or_prefix_ones(const kiln_tensor *r, const kiln_tensor *y)
{
    if (kiln_tensor_numel(r) != kiln_tensor_numel(y) || r->ndim > y->ndim)
        return false;
    int off = y->ndim - r->ndim;
    for (int d = 0; d < off; d++)
        if (y->dims[d] != 1)
            return false;
    for (int d = 0; d < r->ndim; d++)
        if (r->dims[d] != y->dims[off + d])
            return false;
    return true;
}

/* y = y + r (r broadcast); in place for float32 same-shape, else through the Add kernel. */
static kiln_status add_into(kiln_kctx *ctx, const kiln_tensor *r)
{
    kiln_tensor *y = ctx->out[0];
    if (y->dtype == KILN_DT_FLOAT32 && r->dtype == KILN_DT_FLOAT32 && same_shape_or_prefix_ones(r, y)) {
        float *yd = y->data;
        const float *rd = r->data;
        int64_t n = kiln_tensor_numel(y);
        for (int64_t i = 0; i < n; i++)
            yd[i] += rd[i];
        return KILN_OK;
    }
    kiln_tensor t;
    KILN_TRY(kiln__kcall(ctx, KILN_OP_Add, y, r, &t));
    kiln__kreplace_out(ctx, &t);
    return KILN_OK;
}

/* y = y + bias over the last axis (bias has N = last-dim elements), float32 fast path. */
static kiln_status add_bias_last(kiln_kctx *ctx, const kiln_tensor *b)
{
    kiln_tensor *y = ctx->out[0];
    int64_t n = y->ndim ? y->dims[y->ndim - 1] : 1;
    if (y->dtype == KILN_DT_FLOAT32 && b->dtype == KILN_DT_FLOAT32 && kiln_tensor_numel(b) == n && b->ndim <= 1) {
        float *yd = y->data;
        const float *bd = b->data;
        int64_t rows = n ? kiln_tensor_numel(y) / n : 0;
        for (int64_t r = 0; r < rows; r++)
            for (int64_t j = 0; j < n; j++)
                yd[r * n + j] += bd[j];
        return KILN_OK;
    }
    return add_into(ctx, b);
}

static kiln_status apply_act(kiln_kctx *ctx)
{
    kiln_act a;
    KILN_TRY(kiln__act_from_node(ctx, &a));
    if (a.kind == KILN_ACT_NONE)
        return KILN_OK;
    kiln_tensor *y = ctx->out[0];
    int64_t n = kiln_tensor_numel(y);
    if (y->dtype == KILN_DT_FLOAT32) {
        kiln__act_apply_f32(&a, y->data, n, ctx->pool, ctx->nthreads);
        return KILN_OK;
    }
    if (!kiln__dtype_is_float(y->dtype))
        return kiln__kerr(ctx, KILN_ERR_DTYPE, "fused activation on %s", kiln_dtype_name(y->dtype));
    for (int64_t i = 0; i < n; i++)
        kiln__set_f64(y->dtype, y->data, i, kiln__act_scalar(&a, (float)kiln__get_f64(y->dtype, y->data, i)));
    return KILN_OK;
}

/* FusedConv with its output placed over its residual (the memory plan pairs them, runtime/plan.c), on a path that
 * does not read each residual element before storing over it: the same with a copy of the residual. */
static kiln_status fused_conv_res_copy(kiln_kctx *ctx, const kiln_tensor *r, kiln_kernel_fn self)
{
    kiln_tensor rc = *r;
    rc.data = kiln__malloc(r->nbytes);
    if (!rc.data)
        return kiln__kerr(ctx, KILN_ERR_NOMEM, "out of memory (a copy of the residual)");
    memcpy(rc.data, r->data, r->nbytes);
    const kiln_tensor *in[4];
    for (int i = 0; i < 4; i++)
        in[i] = i == 3 ? &rc : kiln__kin(ctx, i);
    kiln_kctx sub = *ctx;
    sub.in = in;
    sub.n_in = 4;
    kiln_status st = self(&sub);
    kiln__free(rc.data);
    return st;
}

kiln_status kiln__fused_conv(kiln_kctx *ctx, const kiln_conv_isa *isa, kiln_kernel_fn self)
{
    const kiln_tensor *res = kiln__kin(ctx, 3);
    if (res && kiln__kout_over(ctx, 0, res) &&
        (kiln__lowbit_layer(ctx) || kiln__mixed_weight(ctx, 1) || !kiln__conv_res_in_place_ok(ctx, res)))
        return fused_conv_res_copy(ctx, res, self);
    if (kiln__lowbit_layer(ctx)) /* FP8 / FP4 / INT4 weights (lowbit.h) */
        return kiln__run_lowbit(ctx, self);
    if (kiln__mixed_weight(ctx, 1)) /* float32 X, FP16 / BF16 weights (qgemm_bf16.h) */
        return kiln__run_mixed(ctx, 1, self);
    kiln_kctx sub = *ctx;
    sub.n_in = ctx->n_in < 3 ? ctx->n_in : 3;
    const kiln_tensor *r = kiln__kin(ctx, 3);
    kiln_act a;
    KILN_TRY(kiln__act_from_node(ctx, &a));
    /* float32: bias, residual and activation applied while the GEMM's tiles are in registers */
    bool handled = false;
    KILN_TRY(kiln__conv_fused(&sub, isa, r, &a, &handled));
    if (handled)
        return KILN_OK;
    /* the Conv kernel of the same kind: the fastest with hooks, the scalar reference without */
    KILN_TRY((isa ? kiln__ref_kernel(KILN_OP_Conv) : kiln__cpu_ref_kernel(KILN_OP_Conv))(&sub));
    if (r)
        KILN_TRY(add_into(ctx, r));
    return apply_act(ctx);
}

static kiln_status k_fused_conv(kiln_kctx *ctx) { return kiln__fused_conv(ctx, NULL, k_fused_conv); }

static kiln_status k_fused_matmul(kiln_kctx *ctx)
{
    if (kiln__lowbit_layer(ctx)) /* FP8 / FP4 / INT4 weights (lowbit.h) */
        return kiln__run_lowbit(ctx, k_fused_matmul);
    if (kiln__mixed_weight(ctx, 1)) /* float32 X, FP16 / BF16 weights (qgemm_bf16.h) */
        return kiln__run_mixed(ctx, 1, k_fused_matmul);
    kiln_kctx sub = *ctx;
    sub.n_in = 2;
    if (ctx->n_in < 2)
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "needs two inputs");
    const kiln_tensor *b = kiln__kin(ctx, 2), *r = kiln__kin(ctx, 3);
    kiln_act a;
    KILN_TRY(kiln__act_from_node(ctx, &a));
    /* float32: bias, residual and activation fused into the GEMM's tile stores */
    bool handled = false;
    KILN_TRY(kiln__matmul_fused(&sub, b, r, &a, &handled));
    if (handled)
        return KILN_OK;
    KILN_TRY(kiln__ref_kernel(KILN_OP_MatMul)(&sub));
    if (b)
        KILN_TRY(add_bias_last(ctx, b));
    if (r)
        KILN_TRY(add_into(ctx, r));
    return apply_act(ctx);
}

static kiln_status k_fused_gemm(kiln_kctx *ctx)
{
    if (kiln__lowbit_layer(ctx)) /* FP8 / FP4 / INT4 weights (lowbit.h) */
        return kiln__run_lowbit(ctx, k_fused_gemm);
    if (kiln__mixed_weight(ctx, 1)) /* float32 X, FP16 / BF16 weights (qgemm_bf16.h) */
        return kiln__run_mixed(ctx, 1, k_fused_gemm);
    kiln_act a;
    KILN_TRY(kiln__act_from_node(ctx, &a));
    bool handled = false;
    KILN_TRY(kiln__gemm_fused(ctx, &a, &handled));
    if (handled)
        return KILN_OK;
    KILN_TRY(kiln__ref_kernel(KILN_OP_Gemm)(ctx));
    return apply_act(ctx);
}

/* FusedConvSum: k_convsum.c */
static kiln_status k_fused_conv_sum(kiln_kctx *ctx) { return kiln__fused_conv_sum(ctx, NULL); }

/* Attention: k_attention.c */
static kiln_status k_attention(kiln_kctx *ctx) { return kiln__attention(ctx, NULL); }

const kiln_kernel_reg kiln__ref_fused[] = {
    {KILN_OP_FusedConv, k_fused_conv},
    {KILN_OP_FusedMatMul, k_fused_matmul},
    {KILN_OP_FusedGemm, k_fused_gemm},
    {KILN_OP_Attention, k_attention},
    {KILN_OP_FusedConvSum, k_fused_conv_sum},
    {KILN_OP_FusedConvPool, kiln__fused_conv_pool},   /* k_convpool.c */
    {KILN_OP_COUNT, NULL},
};

/* kiln's fused layers (domain "kiln"), built by the optimization passes:
 *   FusedConv(X, W, B?, R?)     = act(Conv(X, W, B) + R)
 *   FusedMatMul(A, B, bias?, R?) = act(MatMul(A, B) + bias + R)
 *   FusedGemm(A, B, C?)          = act(Gemm(A, B, C))
 *   Attention(Q, KT, V, M?)      = Softmax(Q @ KT * scale + M) @ V   (softmax over the last axis)
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

/* Runs kernel `op` on (a, b) into a fresh heap tensor `out` (no arena), with the same node. */
static kiln_status call2(kiln_kctx *ctx, kiln_op op, const kiln_tensor *a, const kiln_tensor *b, kiln_tensor *out)
{
    const kiln_tensor *in[2] = {a, b};
    kiln_tensor *o[1] = {out};
    memset(out, 0, sizeof *out);
    kiln_kctx sub = {.node = ctx->node, .n_in = b ? 2 : 1, .in = in, .n_out = 1, .out = o, .pool = ctx->pool,
                     .nthreads = ctx->nthreads};
    return kiln__ref_kernel(op)(&sub);
}

/* Replaces ctx->out[0] by t (moved). */
static void replace_out(kiln_kctx *ctx, kiln_tensor *t)
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
    KILN_TRY(call2(ctx, KILN_OP_Add, y, r, &t));
    replace_out(ctx, &t);
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

kiln_status kiln__fused_conv(kiln_kctx *ctx, const kiln_conv_isa *isa, kiln_kernel_fn self)
{
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

/* ------------------------------------------------------------------ attention */

typedef struct {
    const float *q, *kt, *v, *mask;
    const uint8_t *bmask;             /* boolean mask (Where forms) */
    int mask_kind;                    /* 1 additive, 2 keep where true, 3 fill where true */
    float fill;
    float *out;
    int64_t S, Sk, D, Dv;
    float scale;
    int rank;                         /* rank of the score tensor [lead..., S, Sk] */
    int64_t sdims[KILN_MAX_DIMS];     /* score dims */
    int64_t mstr[KILN_MAX_DIMS];      /* mask strides over score dims (0 = broadcast) */
    float **scratch;
    kiln_softmax_row_fn softmax;      /* in place over one score row */
    kiln_status st;
} attn_job;

/* row = softmax(row) over n elements (NaNs ignored by the maximum) */
static void softmax_row_scalar(float *row, int64_t n)
{
    float mx = -INFINITY, sum = 0;
    for (int64_t k = 0; k < n; k++)
        mx = row[k] > mx ? row[k] : mx;
    for (int64_t k = 0; k < n; k++) {
        row[k] = expf(row[k] - mx);
        sum += row[k];
    }
    float inv = 1.0f / sum;
    for (int64_t k = 0; k < n; k++)
        row[k] *= inv;
}

static void attn_task(void *p, int64_t b0, int64_t b1)
{
    attn_job *j = p;
    int64_t nsc = j->S * j->Sk;
    float *sc = kiln__malloc(sizeof(float) * (size_t)(nsc > 0 ? nsc : 1));
    if (!sc) {
        j->st = KILN_ERR_NOMEM;
        return;
    }
    for (int64_t b = b0; b < b1; b++) {
        kiln__sgemm(NULL, 1, false, false, j->S, j->Sk, j->D, j->scale, j->q + b * j->S * j->D, j->D,
                    j->kt + b * j->D * j->Sk, j->Sk, 0.0f, sc, j->Sk);
        if (j->mask || j->bmask) {
            /* offset of mask element for score (b, s, k): decompose b over the leading dims */
            int64_t moff = 0, rem = b;
            for (int d = j->rank - 3; d >= 0; d--) {
                moff += (rem % j->sdims[d]) * j->mstr[d];
                rem /= j->sdims[d];
            }
            int64_t ss = j->mstr[j->rank - 2], sk = j->mstr[j->rank - 1];
            for (int64_t s = 0; s < j->S; s++)
                for (int64_t k = 0; k < j->Sk; k++) {
                    int64_t mi = moff + s * ss + k * sk;
                    if (j->mask_kind == 1)
                        sc[s * j->Sk + k] += j->mask[mi];
                    else if ((j->bmask[mi] != 0) == (j->mask_kind == 3))
                        sc[s * j->Sk + k] = j->fill;
                }
        }
        for (int64_t s = 0; s < j->S; s++)
            j->softmax(sc + s * j->Sk, j->Sk);
        kiln__sgemm(NULL, 1, false, false, j->S, j->Dv, j->Sk, 1.0f, sc, j->Sk, j->v + b * j->Sk * j->Dv, j->Dv, 0.0f,
                    j->out + b * j->S * j->Dv, j->Dv);
    }
    kiln__free(sc);
}

/* The fast path applies when Q, KT, V are float32 with identical leading dims and the mask is
 * float32 and broadcastable to the score shape. */
static bool attn_fast(kiln_kctx *ctx, kiln_softmax_row_fn softmax, const kiln_tensor *q, const kiln_tensor *kt,
                      const kiln_tensor *v, const kiln_tensor *m, float scale, kiln_status *st)
{
    int kind = (int)kiln__attr_i(ctx->node, "mask_kind", 1);
    if (q->dtype != KILN_DT_FLOAT32 || kt->dtype != KILN_DT_FLOAT32 || v->dtype != KILN_DT_FLOAT32 ||
        (m && m->dtype != (kind == 1 ? KILN_DT_FLOAT32 : KILN_DT_BOOL)) || kind < 1 || kind > 3)
        return false;
    int r = q->ndim;
    if (r < 2 || kt->ndim != r || v->ndim != r || (m && m->ndim > r))
        return false;
    for (int d = 0; d < r - 2; d++)
        if (q->dims[d] != kt->dims[d] || q->dims[d] != v->dims[d])
            return false;
    attn_job j = {.q = q->data, .kt = kt->data, .v = v->data, .scale = scale, .rank = r, .mask_kind = kind,
                  .softmax = softmax ? softmax : softmax_row_scalar,
                  .fill = kiln__attr_f(ctx->node, "mask_fill", 0.0f)};
    if (m && kind == 1)
        j.mask = m->data;
    else if (m)
        j.bmask = m->data;
    j.S = q->dims[r - 2];
    j.D = q->dims[r - 1];
    j.Sk = kt->dims[r - 1];
    j.Dv = v->dims[r - 1];
    if (kt->dims[r - 2] != j.D || v->dims[r - 2] != j.Sk)
        return false;
    for (int d = 0; d < r; d++)
        j.sdims[d] = d < r - 2 ? q->dims[d] : d == r - 2 ? j.S : j.Sk;
    if (m) {
        kiln_tensor sshape = {.dtype = KILN_DT_FLOAT32, .ndim = r};
        memcpy(sshape.dims, j.sdims, sizeof j.sdims);
        int off = r - m->ndim;
        for (int d = 0; d < m->ndim; d++)
            if (m->dims[d] != 1 && m->dims[d] != j.sdims[off + d])
                return false;
        kiln__broadcast_strides(m, r, j.sdims, j.mstr);
    }
    int64_t odims[KILN_MAX_DIMS];
    memcpy(odims, q->dims, sizeof(int64_t) * (size_t)r);
    odims[r - 1] = j.Dv;
    *st = kiln__kout(ctx, 0, KILN_DT_FLOAT32, r, odims);
    if (*st != KILN_OK)
        return true;
    j.out = ctx->out[0]->data;
    int64_t nb = 1;
    for (int d = 0; d < r - 2; d++)
        nb *= q->dims[d];
    j.st = KILN_OK;
    kiln__parallel_for(ctx->pool, ctx->nthreads, nb, 1, attn_task, &j);
    *st = j.st == KILN_OK ? KILN_OK : kiln__kerr(ctx, j.st, "out of memory");
    return true;
}

kiln_status kiln__attention(kiln_kctx *ctx, kiln_softmax_row_fn softmax)
{
    const kiln_tensor *q = kiln__kin(ctx, 0), *kt = kiln__kin(ctx, 1), *v = kiln__kin(ctx, 2), *m = kiln__kin(ctx, 3);
    if (!q || !kt || !v)
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "needs Q, K^T and V");
    float scale = kiln__attr_f(ctx->node, "scale", 1.0f);
    kiln_status st;
    if (attn_fast(ctx, softmax, q, kt, v, m, scale, &st))
        return st;
    /* generic: the same computation through the reference kernels */
    kiln_tensor s = {0}, t = {0}, p = {0};
    st = call2(ctx, KILN_OP_MatMul, q, kt, &s);
    if (st == KILN_OK && kiln__dtype_is_float(s.dtype)) {
        int64_t n = kiln_tensor_numel(&s);
        for (int64_t i = 0; i < n; i++)
            kiln__set_f64(s.dtype, s.data, i, kiln__get_f64(s.dtype, s.data, i) * scale);
    } else if (st == KILN_OK) {
        st = kiln__kerr(ctx, KILN_ERR_DTYPE, "attention on %s", kiln_dtype_name(s.dtype));
    }
    int kind = (int)kiln__attr_i(ctx->node, "mask_kind", 1);
    if (st == KILN_OK && m && kind == 1) {
        st = call2(ctx, KILN_OP_Add, &s, m, &t);
        kiln__tensor_release(&s);
        s = t;
        memset(&t, 0, sizeof t);
    } else if (st == KILN_OK && m) {
        /* Where(cond, scores, fill) or Where(cond, fill, scores) through the Where kernel */
        kiln_tensor fillt;
        st = kiln__tensor_alloc(&fillt, s.dtype, 0, NULL);
        if (st == KILN_OK) {
            kiln__set_f64(s.dtype, fillt.data, 0, kiln__attr_f(ctx->node, "mask_fill", 0.0f));
            const kiln_tensor *in3[3] = {m, kind == 2 ? &s : &fillt, kind == 2 ? &fillt : &s};
            kiln_tensor *o1[1] = {&t};
            kiln_kctx sub = {.node = ctx->node, .n_in = 3, .in = in3, .n_out = 1, .out = o1, .pool = ctx->pool,
                              .nthreads = ctx->nthreads};
            st = kiln__ref_kernel(KILN_OP_Where)(&sub);
            kiln__tensor_release(&fillt);
            kiln__tensor_release(&s);
            s = t;
            memset(&t, 0, sizeof t);
        }
    }
    if (st == KILN_OK)
        st = call2(ctx, KILN_OP_Softmax, &s, NULL, &p);
    if (st == KILN_OK)
        st = call2(ctx, KILN_OP_MatMul, &p, v, &t);
    if (st == KILN_OK)
        replace_out(ctx, &t);
    kiln__tensor_release(&s);
    kiln__tensor_release(&p);
    kiln__tensor_release(&t);
    return st;
}

static kiln_status k_attention(kiln_kctx *ctx) { return kiln__attention(ctx, NULL); }

const kiln_kernel_reg kiln__ref_fused[] = {
    {KILN_OP_FusedConv, k_fused_conv},
    {KILN_OP_FusedMatMul, k_fused_matmul},
    {KILN_OP_FusedGemm, k_fused_gemm},
    {KILN_OP_Attention, k_attention},
    {KILN_OP_COUNT, NULL},
};

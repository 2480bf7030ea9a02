/* 4-bit weight-only layers on the GPU (docs/CUDA.md, "NVFP4, MXFP4 and INT4 weights"): a MatMul /
 * FusedMatMul / Gemm / FusedGemm that the builder marked with an NVFP4, MXFP4 or INT4 weight and FP16
 * activations (kiln_wq "nvfp4" | "mxfp4" | "int4", kiln_aq "fp16": PRECISION.md) runs kiln's weight-only
 * GEMM (kernels_fp4.cu) on the weight exactly as the CPU backend packed it (KILN_PREP_LOWBIT_W): the
 * engine's blob when the runtime hands it over (kiln_devmod.reads_blob), else the CPU backend's packing
 * of the float32 weight (the host service lowbit_prep), cuda_lowbit.c. Those packed bytes are copied to
 * device memory once per layer and are all the layer keeps there: 4.5 (NVFP4), 4.25 (MXFP4) or 4.5 (INT4)
 * bits a weight. The activations are rounded to FP16 (the CPU emulation's rounding), each weight tile is
 * decoded to FP16 in shared memory (value times block scale in FP32, rounded to FP16: the emulation's
 * weight), FP32 accumulation; bias, residual and activation in kiln's epilogue kernel.
 * A Gather so marked (a 4-bit embedding table: PRECISION.md "4-bit embedding tables") keeps only its table's
 * packing on the device too (rows x K, the blob replacing input 0) and decodes the gathered rows with the same
 * decode into float32 storage (the module's Gather of a float32 table; KILN_CUDA_ACT's storage when set). */
#include "cuda_gemm.h"
#include "cuda_lowbit.h"
#include <math.h>
#include <stdlib.h>

#define IN(i) (i < ctx->n_in ? ctx->in[i] : NULL)
#define FP4_SLOT 61   /* the state slot of a layer's packed weight */

bool cu_fp4_layer(const cu_be *b, const kiln_node *n, int *fmt)
{
    if (!n || (!cu_wgemm_op(n->op) && n->op != KILN_OP_Gather))
        return false;
    const char *wq = b->host->attr_s(n, "kiln_wq", NULL), *aq = b->host->attr_s(n, "kiln_aq", NULL);
    if (!wq || !aq || strcmp(aq, "fp16"))
        return false;
    int f = !strcmp(wq, "nvfp4") || !strcmp(wq, "fp4") ? CUK_Q_NVFP4 : !strcmp(wq, "mxfp4") ? CUK_Q_MXFP4
          : !strcmp(wq, "int4")                        ? CUK_Q_INT4
                                                       : -1;
    if (f < 0)
        return false;
    if (fmt)
        *fmt = f;
    return true;
}

/* K, N and whether the weight tensor is [K, N] (MatMul, Gemm without transB). Reads dims only: an
 * engine may keep the weight only packed. */
static bool fp4_dims(const cu_be *b, const kiln_node *n, const kiln_tensor *a, const kiln_tensor *w, int64_t *K,
                     int64_t *N, bool *trans)
{
    return cu_wgemm_dims(b, n, a, w, K, N, trans) && (!cu_is_gemm(n->op) || b->host->attr_f(n, "alpha", 1.0f) == 1.0f);
}

/* The operands the 4-bit GEMM takes (fp4_dims, and Gemm's C a row bias with beta 1): K, N and trans as
 * fp4_dims's; false for anything else. Dims only. */
static bool fp4_operands(const cu_be *b, const kiln_node *n, int n_in, const kiln_tensor *const *in, int64_t *K,
                         int64_t *N, bool *trans)
{
    if (n_in < 2 || !fp4_dims(b, n, in[0], in[1], K, N, trans))
        return false;
    if (cu_is_gemm(n->op) && n_in > 2 && in[2]) {   /* C: a row bias (beta 1) only */
        int64_t c = 1;
        for (int d = 0; d < in[2]->ndim; d++)
            c *= in[2]->dims[d];
        if (c != *N || in[2]->dims[in[2]->ndim > 0 ? in[2]->ndim - 1 : 0] != *N ||
            b->host->attr_f(n, "beta", 1.0f) != 1.0f)
            return false;
    }
    return true;
}

/* The operands the 4-bit Gather takes: a 2-D table (dims only: an engine may keep it only packed) gathered
 * along axis 0 by int32 / int64 indices. */
static bool gather_operands(const cu_be *b, const kiln_node *n, int n_in, const kiln_tensor *const *in)
{
    if (n_in != 2 || !in[0] || !in[1] || in[0]->ndim != 2 || in[0]->dims[0] <= 0 || in[0]->dims[1] <= 0 ||
        (in[1]->dtype != KILN_DT_INT64 && in[1]->dtype != KILN_DT_INT32) || in[1]->ndim + 1 > KILN_MAX_DIMS)
        return false;
    int64_t axis = b->host->attr_i(n, "axis", 0);
    return axis == 0 || axis == -2;
}

bool cu_fp4_accepts(cu_be *b, const kiln_node *n, int n_in, const kiln_tensor *const *in)
{
    int64_t K, N;
    bool trans;
    if (n->op == KILN_OP_Gather)
        return gather_operands(b, n, n_in, in);
    return fp4_operands(b, n, n_in, in, &K, &N, &trans);
}

/* The CPU format of a cuk_qfmt */
static kiln__qfmt qfmt_of(int fmt)
{
    return fmt == CUK_Q_NVFP4 ? KILN_QF_NVFP4 : fmt == CUK_Q_MXFP4 ? KILN_QF_MXFP4 : KILN_QF_INT4;
}

/* The engine's blob fits this layer (checked again against the operands when it runs) */
bool cu_fp4_reads_blob(const cu_be *b, const kiln_node *n, const void *blob, size_t size)
{
    int fmt;
    return cu_fp4_layer(b, n, &fmt) && cu_lowbit_blob_is(blob, size, qfmt_of(fmt), false);
}

kiln_status cu_fp4_run(cu_be *b, kiln_kctx *ctx)
{
    const kiln_node *n = ctx->node;
    const kiln_tensor *A = IN(0);
    int fmt;
    int64_t K, N;
    bool trans;
    if (!cu_fp4_layer(b, n, &fmt) || !fp4_operands(b, n, ctx->n_in, ctx->in, &K, &N, &trans))
        return cu_kerr(b, ctx, KILN_ERR_UNSUPPORTED, "operands the 4-bit GEMM does not take");
    wgemm_io io;
    KILN_TRY(cu_wgemm_io(b, ctx, K, N, &io));
    const int act = io.act;
    const float aa = io.aa, ab = io.ab;
    const int64_t M = io.M;
    const kiln_tensor *R = io.R, *bias = io.gemm ? IN(2) : io.bias;   /* Gemm's C: a row bias (fp4_operands) */
    if (bias && cu_numel(bias) != N)
        return cu_kerr(b, ctx, KILN_ERR_SHAPE, "bias / residual shape");
    cu_lowbit_w *w = NULL;
    KILN_TRY(cu_lowbit_weight(b, ctx, FP4_SLOT, qfmt_of(fmt), false, N, K, 1, &w));
    /* output storage: a half input's, KILN_CUDA_ACT's, else FP16 (what the layer's FP16 rounding makes) */
    kiln_dtype sdt = b->force_act == KILN_DT_BFLOAT16 || (A->flags & KILN_TENSOR_DEV_BF16) ? KILN_DT_BFLOAT16
                                                                                           : KILN_DT_FLOAT16;
    KILN_TRY(cu_out_s(b, ctx, 0, KILN_DT_FLOAT32, sdt, io.nd, io.dims));
    kiln_tensor *y = ctx->out[0];
    if (!y->nbytes)
        return KILN_OK;
    kiln_tensor at, rt, bt;   /* A rounded to FP16 (the layer's activation rounding); residual in sdt; bias */
    memset(&at, 0, sizeof at);
    memset(&rt, 0, sizeof rt);
    memset(&bt, 0, sizeof bt);
    const kiln_tensor *a2 = NULL, *r2 = NULL, *b2 = NULL;
    kiln_status st = cu_as(b, A, KILN_DT_FLOAT16, &at, &a2);
    if (st == KILN_OK && R)
        st = cu_as(b, R, sdt, &rt, &r2);
    if (st == KILN_OK && bias)
        st = cu_as(b, bias, KILN_DT_FLOAT32, &bt, &b2);
    kiln_tensor ws;   /* split K (few output tiles): the parts' FP32 sums */
    memset(&ws, 0, sizeof ws);
    int splits = cuk_fp4_gemm_splits(M, N, K);
    if (st == KILN_OK && splits > 1)
        st = cu_tmp(b, &ws, KILN_DT_FLOAT32, 2, (const int64_t[]){M, N});
    cu_part_mark(b, 4, 0, 2);
    if (st == KILN_OK)
        st = cu_check(b, cuk_fp4_gemm(cu_fdt(sdt), a2->data, K, M, K, w->dev, w->dev + w->L.off_s, fmt, w->L.block,
                                      w->ts, y->data, N, ws.data, splits, b->stream), "4-bit weight GEMM");
    cu_part_mark(b, 4, 1, 2);
    if (st == KILN_OK && (b2 || r2 || act != CUK_IDENTITY))
        st = cu_check(b, cuk_epilogue(cu_fdt(sdt), y->data, M * N, N, 1, b2 ? b2->data : NULL, r2 ? r2->data : NULL,
                                      act, aa, ab, b->stream), "epilogue");
    cu_part_mark(b, 4, 2, 2);
    cu_tmp_free(b, &at);   /* used in stream order only */
    cu_tmp_free(b, &ws);
    cu_tmp_free(b, &rt);
    cu_tmp_free(b, &bt);
    return st;
}

kiln_status cu_fp4_gather(cu_be *b, kiln_kctx *ctx)
{
    const kiln_tensor *T = IN(0), *idx = IN(1);
    int fmt;
    if (!cu_fp4_layer(b, ctx->node, &fmt) || !gather_operands(b, ctx->node, ctx->n_in, ctx->in))
        return cu_kerr(b, ctx, KILN_ERR_UNSUPPORTED, "operands the 4-bit Gather does not take");
    int64_t rows = T->dims[0], K = T->dims[1], dims[KILN_MAX_DIMS];
    /* cu_lowbit_weight takes a layer's float32 weight from input 1: here the table (input 0, which the host service
     * lowbit_prep packs for a Gather) */
    const kiln_tensor *tin[2] = {T, T};
    kiln_kctx tc = *ctx;
    tc.in = tin;
    cu_lowbit_w *w = NULL;
    KILN_TRY(cu_lowbit_weight(b, &tc, FP4_SLOT, qfmt_of(fmt), false, rows, K, 1, &w));
    memcpy(dims, idx->dims, sizeof(int64_t) * (size_t)idx->ndim);
    dims[idx->ndim] = K;
    kiln_dtype sdt = b->force_act != KILN_DT_UNDEFINED ? b->force_act : KILN_DT_FLOAT32;
    KILN_TRY(cu_out_s(b, ctx, 0, KILN_DT_FLOAT32, sdt, idx->ndim + 1, dims));
    kiln_tensor *y = ctx->out[0];
    if (!y->nbytes)
        return KILN_OK;
    return cu_check(b, cuk_fp4_gather(cu_fdt(sdt), w->dev, w->dev + w->L.off_s, fmt, w->L.block, w->ts, rows, K,
                                      idx->data, idx->dtype == KILN_DT_INT64, cu_numel(idx), y->data, b->bad, b->stream),
                    "4-bit Gather");
}

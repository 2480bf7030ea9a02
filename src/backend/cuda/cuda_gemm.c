/* MatMul, Gemm, FusedMatMul (act(A @ B + bias + R)), FusedGemm and Attention
 * (Softmax(Q @ KT * scale + M) @ V) through cuBLASLt, float32 with FP32 compute (TF32 when the
 * context allows it). Row-major tensors are handed to cuBLASLt as their column-major transposes
 * (Y^T = B^T A^T). Bias and ReLU ride on cuBLASLt's epilogue, a residual on C (beta = 1), other
 * activations on kiln's epilogue kernel. Per node and shape the descriptors and an algorithm are
 * kept: the fastest of cuBLASLt's first heuristic candidates, timed once on the layer's own
 * operands (when the output is not also an input). */
#include "cuda_gemm.h"
#include <stdlib.h>

#define IN(i) (i < ctx->n_in ? ctx->in[i] : NULL)
#define LT_WS ((size_t)32 << 20)

typedef struct lt_state {
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t a, b, c, d;   /* d: an E4M3 output's (else D is laid out as c) */
    cublasLtMatmulAlgo_t algo;
    size_t ws;
} lt_state;

static void lt_state_free(void *p)
{
    lt_state *s = p;
    if (s->op) cublasLtMatmulDescDestroy(s->op);
    if (s->a) cublasLtMatrixLayoutDestroy(s->a);
    if (s->b) cublasLtMatrixLayoutDestroy(s->b);
    if (s->c) cublasLtMatrixLayoutDestroy(s->c);
    if (s->d) cublasLtMatrixLayoutDestroy(s->d);
    free(s);
}

static kiln_status layout(cu_be *b, cublasLtMatrixLayout_t *l, cudaDataType_t ty, int64_t rows, int64_t cols,
                          int64_t ld, int64_t batch, int64_t stride)
{
    KILN_TRY(cu_check_lt(b, cublasLtMatrixLayoutCreate(l, ty, (uint64_t)rows, (uint64_t)cols, ld),
                         "cublasLtMatrixLayoutCreate"));
    if (batch > 1) {
        int32_t n = (int32_t)batch;
        KILN_TRY(cu_check_lt(b, cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &n, sizeof n),
                             "batch count"));
        KILN_TRY(cu_check_lt(b, cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                                                 &stride, sizeof stride), "batch stride"));
    }
    return KILN_OK;
}

#define LT_CANDIDATES_FP8 24   /* cuBLASLt's first FP8 guesses were measured slow at BERT-base's shapes */
#define LT_CANDIDATES_MAX 32

static cublasStatus_t lt_matmul(cu_be *b, const lt_state *s, const gemm_args *g, const cublasLtMatmulAlgo_t *algo,
                                void *ws, size_t wsz)
{
    return cublasLtMatmul(b->lt, s->op, &g->alpha, g->B, s->a, g->A, s->b, &g->beta, g->C ? g->C : g->Y, s->c, g->Y,
                          s->d ? s->d : s->c, algo, ws, wsz, b->stream);
}

/* The fastest of the heuristic's candidates on g's operands (1 warm-up + 3 timed runs each; the
 * output is rewritten with the same values, so only when it is not also an input). */
static kiln_status fastest(cu_be *b, const lt_state *s, const gemm_args *g, const cublasLtMatmulHeuristicResult_t *h,
                           int n, int *pick)
{
    size_t wmax = 0;
    for (int i = 0; i < n; i++)
        wmax = h[i].workspaceSize > wmax ? h[i].workspaceSize : wmax;
    void *ws = NULL;
    if (wmax)
        KILN_TRY(cu_workspace(b, wmax, &ws));
    cudaEvent_t e0, e1;
    KILN_TRY(cu_check(b, cudaEventCreate(&e0), "creating an event"));
    if (cudaEventCreate(&e1) != cudaSuccess) {
        cudaEventDestroy(e0);
        return cu_err(b, KILN_ERR_INTERNAL, "creating an event");
    }
    float best = 0;
    for (int i = 0; i < n; i++) {
        if (lt_matmul(b, s, g, &h[i].algo, ws, h[i].workspaceSize) != CUBLAS_STATUS_SUCCESS)
            continue;
        cudaEventRecord(e0, b->stream);
        bool ok = true;
        for (int r = 0; r < 3 && ok; r++)
            ok = lt_matmul(b, s, g, &h[i].algo, ws, h[i].workspaceSize) == CUBLAS_STATUS_SUCCESS;
        cudaEventRecord(e1, b->stream);
        float ms = 0;
        if (ok && cudaEventSynchronize(e1) == cudaSuccess && cudaEventElapsedTime(&ms, e0, e1) == cudaSuccess &&
            (i == 0 || ms < best || best == 0)) {
            best = ms;
            *pick = i;
        }
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    return cu_check(b, cudaGetLastError(), "timing GEMM algorithms");
}

/* FP8: the weight's scale (B in row-major terms, cuBLASLt's A) is read from device memory, and so is an E4M3
 * output's */
static kiln_status lt_scale(cu_be *b, const lt_state *s, const gemm_args *g)
{
    const void *p = g->b_scale, *d = g->d_scale;
    KILN_TRY(cu_check_lt(b, cublasLtMatmulDescSetAttribute(s->op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &p, sizeof p),
                         "FP8 scale"));
    if (!g->d_e4m3)
        return KILN_OK;
    return cu_check_lt(b, cublasLtMatmulDescSetAttribute(s->op, CUBLASLT_MATMUL_DESC_D_SCALE_POINTER, &d, sizeof d),
                       "FP8 output scale");
}

static kiln_status make_lt(cu_be *b, const kiln_kctx *ctx, const gemm_args *g, lt_state **out)
{
    if (b->capturing)
        return cu_not_in_capture(b, "choosing a GEMM algorithm");
    lt_state *s = calloc(1, sizeof *s);
    if (!s)
        return cu_err(b, KILN_ERR_NOMEM, "out of memory");
    bool tf32 = b->tf32 && g->ty == CUDA_R_32F;
    kiln_status st = cu_check_lt(b, cublasLtMatmulDescCreate(&s->op, tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32
                                                                       : CUBLAS_COMPUTE_32F, CUDA_R_32F),
                                 "cublasLtMatmulDescCreate");
    /* column-major view: Y^T[N,M] = op(B^T)[N,K] * op(A^T)[K,M] */
    cublasOperation_t opa = g->tb ? CUBLAS_OP_T : CUBLAS_OP_N, opb = g->ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    if (st == KILN_OK)
        st = cu_check_lt(b, cublasLtMatmulDescSetAttribute(s->op, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa), "transa");
    if (st == KILN_OK)
        st = cu_check_lt(b, cublasLtMatmulDescSetAttribute(s->op, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb), "transb");
    cublasLtEpilogue_t epi = g->gelu ? (g->bias ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_GELU)
                           : g->bias ? (g->relu ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_BIAS)
                                     : (g->relu ? CUBLASLT_EPILOGUE_RELU : CUBLASLT_EPILOGUE_DEFAULT);
    if (st == KILN_OK)
        st = cu_check_lt(b, cublasLtMatmulDescSetAttribute(s->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi),
                         "epilogue");
    if (st == KILN_OK && g->bias) {
        const void *bp = g->bias;   /* the pointer is set per call too; the heuristic wants it present */
        st = cu_check_lt(b, cublasLtMatmulDescSetAttribute(s->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bp, sizeof bp),
                         "bias");
        int32_t bty = g->ty;   /* FP8 GEMMs default to another bias type for some outputs: say which */
        if (st == KILN_OK && g->fp8)
            st = cu_check_lt(b, cublasLtMatmulDescSetAttribute(s->op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bty,
                                                               sizeof bty), "bias type");
    }
    if (st == KILN_OK && g->fp8)
        st = lt_scale(b, s, g);
    int8_t fast = g->fast;
    if (st == KILN_OK && g->fp8 && fast)
        st = cu_check_lt(b, cublasLtMatmulDescSetAttribute(s->op, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast, sizeof fast),
                         "fast accumulation");
    cudaDataType_t in_ty = g->fp8 ? CUDA_R_8F_E4M3 : g->ty;
    if (st == KILN_OK)
        st = g->tb ? layout(b, &s->a, in_ty, g->K, g->N, g->ldb, g->batch, g->sb)
                   : layout(b, &s->a, in_ty, g->N, g->K, g->ldb, g->batch, g->sb);
    if (st == KILN_OK)
        st = g->ta ? layout(b, &s->b, in_ty, g->M, g->K, g->lda, g->batch, g->sa)
                   : layout(b, &s->b, in_ty, g->K, g->M, g->lda, g->batch, g->sa);
    if (st == KILN_OK)
        st = layout(b, &s->c, g->ty, g->N, g->M, g->ldy, g->batch, g->sy);
    if (st == KILN_OK && g->d_e4m3)
        st = layout(b, &s->d, CUDA_R_8F_E4M3, g->N, g->M, g->ldy, g->batch, g->sy);
    cublasLtMatmulPreference_t pref = NULL;
    if (st == KILN_OK)
        st = cu_check_lt(b, cublasLtMatmulPreferenceCreate(&pref), "preference");
    size_t wsmax = LT_WS;
    if (st == KILN_OK)
        st = cu_check_lt(b, cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsmax,
                                                                 sizeof wsmax), "preference");
    cublasLtMatmulHeuristicResult_t h[LT_CANDIDATES_MAX];
    int want = g->fp8 ? LT_CANDIDATES_FP8 : b->lt_candidates;
    int got = 0;
    if (st == KILN_OK) {
        cublasStatus_t e = cublasLtMatmulAlgoGetHeuristic(b->lt, s->op, s->a, s->b, s->c, s->d ? s->d : s->c, pref,
                                                          want, h, &got);
        if (e == CUBLAS_STATUS_NOT_SUPPORTED || e == CUBLAS_STATUS_INVALID_VALUE)
            got = 0;   /* no algorithm for this combination: reported below as unsupported */
        else
            st = cu_check_lt(b, e, "cublasLtMatmulAlgoGetHeuristic");
    }
    if (pref)
        cublasLtMatmulPreferenceDestroy(pref);
    if (st == KILN_OK && got < 1)
        st = cu_kerr(b, ctx, KILN_ERR_UNSUPPORTED, "cuBLASLt has no algorithm for this GEMM");
    int pick = 0;
    /* device tactics (cuda_tcache.c): the index of the algorithm timed before for this GEMM among the same heuristic
     * list (the same GPU and cuBLASLt: the signature) */
    const int64_t tk[21] = {g->ta, g->tb, g->M, g->N, g->K, g->lda, g->ldb, g->ldy, g->bias != NULL, g->relu,
                            g->gelu, g->d_e4m3, g->batch, g->sa, g->sb, g->sy, g->ty, in_ty, g->fast,
                            g->beta != 0.0f, want};
    int cached = st == KILN_OK ? cu_tc_get(b, 'l', tk, sizeof tk) : -1;
    if (st == KILN_OK && got > 1 && cached >= 0 && cached < got) {
        pick = cached;
    } else if (st == KILN_OK && got > 1 && (g->beta == 0.0f || (g->C && g->C != g->Y))) {
        st = fastest(b, s, g, h, got, &pick);
        if (st == KILN_OK)
            cu_tc_put(b, 'l', tk, sizeof tk, pick);
    }
    if (st != KILN_OK) {
        lt_state_free(s);
        return st;
    }
    s->algo = h[pick].algo;
    s->ws = h[pick].workspaceSize;
    *out = s;
    return KILN_OK;
}

/* One (batched) GEMM; `slot` tells a layer's GEMMs apart (Attention has two). */
static kiln_status gemm(cu_be *b, const kiln_kctx *ctx, int slot, const gemm_args *g)
{
    if (g->M <= 0 || g->N <= 0 || g->batch <= 0)
        return KILN_OK;
    if (g->K <= 0)   /* refused by the accepts checks (the host runs empty sums) */
        return cu_kerr(b, ctx, KILN_ERR_UNSUPPORTED, "GEMM with K = 0");
    int64_t key[18] = {slot, g->ta, g->tb, g->M, g->N, g->K, g->lda, g->ldb, g->ldy, g->bias != NULL, g->relu,
                       g->batch, g->sa, g->sb, g->sy, g->ty, g->fp8, g->gelu | g->d_e4m3 << 1};
    lt_state *s = cu_state_get(b, ctx->node, key, 18);
    if (!s) {
        KILN_TRY(make_lt(b, ctx, g, &s));
        KILN_TRY(cu_state_put(b, ctx->node, key, 18, s, lt_state_free));
    }
    if (g->fp8)
        KILN_TRY(lt_scale(b, s, g));
    if (g->bias) {
        const void *bp = g->bias;
        KILN_TRY(cu_check_lt(b, cublasLtMatmulDescSetAttribute(s->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bp, sizeof bp),
                             "bias"));
    }
    void *ws = NULL;
    if (s->ws)
        KILN_TRY(cu_workspace(b, s->ws, &ws));
    return cu_check_lt(b, lt_matmul(b, s, g, &s->algo, ws, s->ws), "cublasLtMatmul");
}

static int fdt_of(cudaDataType_t ty)
{
    return ty == CUDA_R_16F ? CUK_F16 : ty == CUDA_R_16BF ? CUK_BF16 : CUK_F32;
}

static kiln_dtype kiln_ty(cudaDataType_t ty)
{
    return ty == CUDA_R_16F ? KILN_DT_FLOAT16 : ty == CUDA_R_16BF ? KILN_DT_BFLOAT16 : KILN_DT_FLOAT32;
}

/* A weight bias converted to the GEMM's output type, kept per layer (slot + 300) for the bias pointer and the
 * weights' generation: made once, not a conversion kernel per run (BERT-base: 72 a run). */
typedef struct bias_copy {
    void *p;
} bias_copy;

static void bias_copy_free(void *st)
{
    bias_copy *c = st;
    if (c->p)
        cudaFree(c->p);
    free(c);
}

static kiln_status kept_bias(cu_be *b, const kiln_kctx *ctx, int slot, const gemm_args *g, const void **out)
{
    int64_t key[5] = {slot + 300, (int64_t)(intptr_t)g->bias, g->ty, g->N, (int64_t)cu_weights_gen()};
    bias_copy *c = cu_state_get(b, ctx->node, key, 5);
    *out = c ? c->p : NULL;
    if (c || b->capturing)   /* none made while capturing a CUDA graph: the caller converts for the call */
        return KILN_OK;
    c = calloc(1, sizeof *c);
    if (!c)
        return cu_err(b, KILN_ERR_NOMEM, "out of memory");
    size_t bytes = (size_t)g->N * cu_es(kiln_ty(g->ty));
    kiln_status st = cu_check(b, cudaMalloc(&c->p, bytes ? bytes : 1), "allocating a converted bias");
    if (st == KILN_OK)
        st = cu_check(b, cuk_cast(KILN_DT_FLOAT32, g->bias, (int)kiln_ty(g->ty), c->p, g->N, b->stream),
                      "converting a bias");
    if (st == KILN_OK)
        st = cu_state_put(b, ctx->node, key, 5, c, bias_copy_free);
    else
        bias_copy_free(c);
    if (st == KILN_OK)
        *out = c->p;
    return st;
}

/* gemm() with its bias / ReLU epilogue. With half operands cuBLASLt's bias epilogue wants the bias in
 * the operands' type: the float32 bias is converted (N values: once for a weight, kept_bias, else for the
 * call); FP8 GEMMs take it in the output's type; where cuBLASLt still has no algorithm, the GEMM runs plain
 * and kiln's epilogue kernel adds the float32 bias and ReLU. */
kiln_status cu_gemm_epi(cu_be *b, const kiln_kctx *ctx, int slot, const gemm_args *g)
{
    if ((g->ty == CUDA_R_32F && !g->fp8) || (!g->bias && !g->relu))
        return gemm(b, ctx, slot, g);
    int64_t key[18] = {slot + 100, g->ta, g->tb, g->M, g->N, g->K, g->lda, g->ldb, g->ldy, g->bias != NULL, g->relu,
                       g->batch, g->sa, g->sb, g->sy, g->ty, g->fp8, g->gelu | g->d_e4m3 << 1};
    if (!cu_state_get(b, ctx->node, key, 18)) {   /* not yet known to be refused */
        kiln_tensor bf = {.dtype = KILN_DT_FLOAT32, .ndim = 1, .dims = {g->N}, .data = (void *)g->bias,
                          .nbytes = (size_t)g->N * 4, .flags = KILN_TENSOR_BORROWED | KILN_TENSOR_ON_DEVICE};
        kiln_tensor tmp;
        memset(&tmp, 0, sizeof tmp);
        const kiln_tensor *bh = NULL;
        gemm_args p = *g;
        kiln_status st = KILN_OK;
        const void *kb = NULL;
        if (g->bias && g->bias_w && kiln_ty(g->ty) != KILN_DT_FLOAT32)
            st = kept_bias(b, ctx, slot, g, &kb);
        if (kb) {
            p.bias = kb;
        } else if (g->bias && st == KILN_OK) {
            st = cu_as(b, &bf, kiln_ty(g->ty), &tmp, &bh);
            if (st == KILN_OK)
                p.bias = bh->data;
        }
        if (st == KILN_OK)
            st = gemm(b, ctx, slot, &p);
        cu_tmp_free(b, &tmp);   /* used in stream order only */
        if (st != KILN_ERR_UNSUPPORTED || g->gelu || g->d_e4m3)
            return st;   /* kiln's epilogue kernel below neither applies cuBLASLt's GELU nor writes E4M3 */
        KILN_TRY(cu_state_put(b, ctx->node, key, 18, calloc(1, 1), free));
    }
    gemm_args p = *g;
    p.bias = NULL;
    p.relu = false;
    KILN_TRY(gemm(b, ctx, slot, &p));
    if (g->ldy != g->N || (g->batch > 1 && g->sy != g->M * g->N))
        return cu_kerr(b, ctx, KILN_ERR_UNSUPPORTED, "GEMM epilogue on a strided output");
    return cu_check(b, cuk_epilogue(fdt_of(g->ty), g->Y, g->M * g->N * g->batch, g->N, 1, g->bias, NULL,
                                    g->relu ? CUK_RELU : CUK_IDENTITY, 0, 0, b->stream), "epilogue");
}

bool cu_wgemm_op(kiln_op op)
{
    return op == KILN_OP_MatMul || op == KILN_OP_FusedMatMul || op == KILN_OP_Gemm || op == KILN_OP_FusedGemm;
}

bool cu_is_gemm(kiln_op op) { return op == KILN_OP_Gemm || op == KILN_OP_FusedGemm; }

kiln_status cu_wgemm_io(cu_be *b, const kiln_kctx *ctx, int64_t K, int64_t N, wgemm_io *io)
{
    const kiln_node *n = ctx->node;
    const kiln_tensor *A = IN(0);
    const bool fused = n->op == KILN_OP_FusedMatMul || n->op == KILN_OP_FusedGemm;
    memset(io, 0, sizeof *io);
    io->gemm = cu_is_gemm(n->op);
    io->act = CUK_IDENTITY;
    if (fused && !cu_fused_act(b, n, &io->act, &io->aa, &io->ab))
        return cu_kerr(b, ctx, KILN_ERR_UNSUPPORTED, "unknown fused activation");
    io->numel = cu_numel(A);
    io->M = io->numel / K;
    io->nd = A->ndim;
    memcpy(io->dims, A->dims, sizeof(int64_t) * (size_t)io->nd);
    io->dims[io->nd - 1] = N;   /* MatMul of a vector: [K] @ [K, N] -> [N] */
    io->R = !io->gemm && fused ? IN(3) : NULL;
    io->bias = !io->gemm && fused ? IN(2) : NULL;
    if ((io->bias && cu_numel(io->bias) != N) || (io->R && cu_numel(io->R) != io->M * N))
        return cu_kerr(b, ctx, KILN_ERR_SHAPE, "bias / residual shape");
    return KILN_OK;
}

bool cu_wgemm_dims(const cu_be *b, const kiln_node *n, const kiln_tensor *a, const kiln_tensor *w, int64_t *K,
                   int64_t *N, bool *trans)
{
    if (!a || !w || w->ndim != 2 || a->dtype != KILN_DT_FLOAT32 || a->ndim < 1)
        return false;
    bool gemm = cu_is_gemm(n->op);
    if (gemm && (a->ndim != 2 || b->host->attr_i(n, "transA", 0)))
        return false;
    *trans = !(gemm && b->host->attr_i(n, "transB", 0));
    *K = *trans ? w->dims[0] : w->dims[1];
    *N = *trans ? w->dims[1] : w->dims[0];
    return a->dims[a->ndim - 1] == *K && *K > 0 && *N > 0;
}

cudaDataType_t cu_cuda_ty(kiln_dtype sdt)
{
    return sdt == KILN_DT_FLOAT16 ? CUDA_R_16F : sdt == KILN_DT_BFLOAT16 ? CUDA_R_16BF : CUDA_R_32F;
}

/* The storage a GEMM-like layer computes in: a FP16 / BF16 weight's (B, input 1), the forced one, or
 * half when both A and B are half activations; else float32. */
static kiln_dtype gemm_sdt(const cu_be *b, const kiln_kctx *ctx)
{
    const kiln_tensor *B = IN(1);
    if (B && (B->dtype == KILN_DT_FLOAT16 || B->dtype == KILN_DT_BFLOAT16))
        return B->dtype;
    if (b->force_act != KILN_DT_UNDEFINED)
        return b->force_act;
    if (B && (B->flags & KILN_TENSOR_DEV_HALF) && IN(0) && cu_sdt(IN(0)) == cu_sdt(B))
        return cu_sdt(B);
    return KILN_DT_FLOAT32;
}

/* Operands of a GEMM-like layer in storage sdt: A (0), B (1), and with res_i > 0 the residual; the
 * bias (bias_i > 0) as float32. Copies go to tmp[4]; free them with free_ops. */
static kiln_status gemm_ops(cu_be *b, kiln_kctx *ctx, kiln_dtype sdt, int bias_i, int res_i, kiln_tensor *tmp,
                            const kiln_tensor **ops)
{
    memset(tmp, 0, 4 * sizeof *tmp);
    for (int k = 0; k < 4; k++)
        ops[k] = NULL;
    int idx[4] = {0, 1, bias_i, res_i};
    for (int k = 0; k < 4; k++) {
        if (idx[k] <= 0 && k >= 2)
            continue;
        const kiln_tensor *x = IN(idx[k]);
        if (x && x->dtype != KILN_DT_FLOAT32 && x->dtype != sdt && k != 2)
            return cu_kerr(b, ctx, KILN_ERR_UNSUPPORTED, "operand %d has dtype %d for a %d GEMM", idx[k],
                           (int)x->dtype, (int)sdt);
        KILN_TRY(cu_as(b, x, k == 2 ? KILN_DT_FLOAT32 : sdt, &tmp[k], &ops[k]));
    }
    if (ops[2] && ops[2]->dtype != KILN_DT_FLOAT32)
        return cu_kerr(b, ctx, KILN_ERR_UNSUPPORTED, "bias must be float32");
    return KILN_OK;
}

static void free_ops(cu_be *b, kiln_tensor *tmp)
{
    for (int k = 0; k < 4; k++)
        cu_tmp_free(b, &tmp[k]);
}

/* ---- MatMul / FusedMatMul */

bool cu_mm_shape(const kiln_tensor *a, const kiln_tensor *b, mm_shape *m)
{
    memset(m, 0, sizeof *m);
    if (a->ndim < 1 || b->ndim < 1)
        return false;
    int64_t K = a->dims[a->ndim - 1];
    int64_t M = a->ndim >= 2 ? a->dims[a->ndim - 2] : 1;
    int64_t N = b->ndim >= 2 ? b->dims[b->ndim - 1] : 1;
    int64_t Kb = b->ndim >= 2 ? b->dims[b->ndim - 2] : b->dims[0];
    if (K != Kb)
        return false;
    int ra = a->ndim > 2 ? a->ndim - 2 : 0, rb = b->ndim > 2 ? b->ndim - 2 : 0;
    int nb = ra > rb ? ra : rb;
    int64_t sa = M * K, sb = K * N;
    for (int d = nb - 1; d >= 0; d--) {
        int oa = d - (nb - ra), ob = d - (nb - rb);
        int64_t da = oa >= 0 ? a->dims[oa] : 1, db = ob >= 0 ? b->dims[ob] : 1;
        if (da != db && da != 1 && db != 1)
            return false;
        m->bdims[d] = da > db ? da : (db > da ? db : da);
        if (da == 0 || db == 0)
            m->bdims[d] = 0;
        m->bsa[d] = da == 1 ? 0 : sa;
        m->bsb[d] = db == 1 ? 0 : sb;
        sa *= da;
        sb *= db;
    }
    m->nb = nb;
    m->batch = 1;
    for (int d = 0; d < nb; d++) {
        m->dims[m->nd++] = m->bdims[d];
        m->batch *= m->bdims[d];
    }
    if (a->ndim >= 2)
        m->dims[m->nd++] = M;
    if (b->ndim >= 2)
        m->dims[m->nd++] = N;
    m->M = M;
    m->N = N;
    m->K = K;
    return m->nd <= KILN_MAX_DIMS;
}

static bool acc_matmul(cu_be *b, const kiln_node *n, int n_in, const kiln_tensor *const *in)
{
    (void)b;
    mm_shape m;
    if (n_in < 2 || !in[0] || !in[1] || !cu_mm_shape(in[0], in[1], &m) || m.K <= 0)
        return false;
    if (n->op == KILN_OP_FusedMatMul) {
        int64_t ny = m.batch * m.M * m.N;
        if (n_in > 2 && in[2] && cu_numel(in[2]) != m.N)
            return false;
        if (n_in > 3 && in[3] && cu_numel(in[3]) != ny)
            return false;
    }
    return true;
}

/* Y = A @ B (+ bias, + R, act) for the batch layout of m */
static kiln_status matmul_run(cu_be *b, kiln_kctx *ctx, kiln_dtype sdt, const kiln_tensor *A, const kiln_tensor *B,
                              const mm_shape *m, const kiln_tensor *bias, const void *res, int act, float aa,
                              float ab)
{
    KILN_TRY(cu_out_s(b, ctx, 0, KILN_DT_FLOAT32, sdt, m->nd, m->dims));
    kiln_tensor *y = ctx->out[0];
    if (!y->nbytes)
        return KILN_OK;
    size_t es = cu_es(sdt);
    gemm_args g = {.ty = cu_cuda_ty(sdt), .M = m->M, .N = m->N, .K = m->K, .A = A->data, .B = B->data, .Y = y->data, .C = res, .lda = m->K,
                   .ldb = m->N, .ldy = m->N, .alpha = 1.0f, .beta = res ? 1.0f : 0.0f,
                   .bias = bias ? bias->data : NULL, .bias_w = bias && (bias->flags & KILN_TENSOR_DEV_WEIGHT),
                   .relu = act == CUK_RELU, .batch = 1};
    bool a_full = true, b_full = true, b_none = true;
    for (int d = 0; d < m->nb; d++) {
        bool one = m->bdims[d] == 1;
        a_full &= one || m->bsa[d] != 0;
        b_full &= one || m->bsb[d] != 0;
        b_none &= one || m->bsb[d] == 0;
    }
    if (b_none && a_full) {   /* B shared by the whole batch: one GEMM of batch * M rows */
        g.M = m->M * m->batch;
        KILN_TRY(cu_gemm_epi(b, ctx, 0, &g));
    } else if (a_full && b_full) {   /* identical batch dims: strided batched */
        g.batch = m->batch;
        g.sa = m->M * m->K;
        g.sb = m->K * m->N;
        g.sy = m->M * m->N;
        KILN_TRY(cu_gemm_epi(b, ctx, 0, &g));
    } else {   /* other broadcasts of the batch dims: one GEMM per output matrix */
        for (int64_t i = 0; i < m->batch; i++) {
            int64_t oa = 0, ob = 0, rem = i;
            for (int d = m->nb - 1; d >= 0; d--) {
                int64_t k = rem % m->bdims[d];
                rem /= m->bdims[d];
                oa += k * m->bsa[d];
                ob += k * m->bsb[d];
            }
            gemm_args gi = g;
            gi.A = (const char *)A->data + oa * (int64_t)es;
            gi.B = (const char *)B->data + ob * (int64_t)es;
            gi.Y = (char *)y->data + i * m->M * m->N * (int64_t)es;
            gi.C = res ? (const char *)res + i * m->M * m->N * (int64_t)es : NULL;
            KILN_TRY(cu_gemm_epi(b, ctx, 0, &gi));
        }
    }
    if (act == CUK_IDENTITY || act == CUK_RELU)
        return KILN_OK;
    /* (the bias stays in cuBLASLt's epilogue: in kiln's, BERT-base FP16 b128 measured 7.06 / 7.09 ms against 7.05 /
     * 7.06 there, though the GEMM alone is faster without it: bench/cublaslt_fp8.cu, 16384 x 3072 x 768 89 -> 108 us) */
    return cu_check(b, cuk_epilogue(cu_fdt(sdt), y->data, cu_numel(y), 1, 1, NULL, NULL, act, aa, ab, b->stream),
                    "epilogue");
}

static kiln_status k_matmul(cu_be *b, kiln_kctx *ctx)
{
    if (cu_fp8_layer(b, ctx->node, NULL))
        return cu_fp8_run(b, ctx);
    if (cu_fp4_layer(b, ctx->node, NULL))
        return cu_fp4_run(b, ctx);
    const kiln_tensor *A = IN(0), *B = IN(1);
    mm_shape m;
    if (!A || !B || !cu_mm_shape(A, B, &m))
        return cu_kerr(b, ctx, KILN_ERR_SHAPE, "incompatible MatMul operands");
    int act = CUK_IDENTITY;
    float aa = 0, ab = 0;
    bool fused = ctx->node->op == KILN_OP_FusedMatMul;
    if (fused) {
        if (!cu_fused_act(b, ctx->node, &act, &aa, &ab))
            return cu_kerr(b, ctx, KILN_ERR_UNSUPPORTED, "unknown fused activation");
        if ((IN(2) && cu_numel(IN(2)) != m.N) || (IN(3) && cu_numel(IN(3)) != m.batch * m.M * m.N))
            return cu_kerr(b, ctx, KILN_ERR_SHAPE, "bias / residual shape");
    }
    kiln_dtype sdt = gemm_sdt(b, ctx);
    kiln_tensor tmp[4];
    const kiln_tensor *o[4];
    kiln_status st = gemm_ops(b, ctx, sdt, fused ? 2 : 0, fused ? 3 : 0, tmp, o);
    if (st == KILN_OK)
        st = matmul_run(b, ctx, sdt, o[0], o[1], &m, o[2], o[3] ? o[3]->data : NULL, act, aa, ab);
    free_ops(b, tmp);
    return st;
}

/* ---- Gemm / FusedGemm */

static bool acc_gemm(cu_be *b, const kiln_node *n, int n_in, const kiln_tensor *const *in)
{
    if (n_in < 2 || !in[0] || !in[1] || in[0]->ndim != 2 || in[1]->ndim != 2 || (n_in > 2 && in[2] && in[2]->ndim > 2))
        return false;
    int64_t K = in[0]->dims[b->host->attr_i(n, "transA", 0) ? 0 : 1];
    return K > 0;
}

kiln_status cu_gemm_c(cu_be *b, const kiln_kctx *ctx, const kiln_tensor *C, float beta, kiln_dtype sdt,
                      kiln_tensor *y, gemm_args *g)
{
    if (!C || beta == 0.0f)
        return KILN_OK;
    int64_t M = g->M, N = g->N;
    bool row_bias = cu_numel(C) == N && (C->ndim == 1 || (C->ndim == 2 && C->dims[0] == 1));
    if (row_bias && beta == 1.0f && cu_sdt(C) == KILN_DT_FLOAT32) {
        g->bias = C->data;
        return KILN_OK;
    }
    /* C broadcast into Y, then Y = alpha AB + beta Y */
    const kiln_tensor *two[2] = {C, y};
    int nd;
    int64_t bd[KILN_MAX_DIMS];
    cuk_shape sh;
    if (!cu_broadcast(2, two, &nd, bd) || nd != 2 || bd[0] != M || bd[1] != N || !cu_shape_of(1, two, nd, bd, &sh))
        return cu_kerr(b, ctx, KILN_ERR_SHAPE, "C does not broadcast to [%lld, %lld]", (long long)M, (long long)N);
    kiln_tensor cs;   /* C in the output's storage */
    const kiln_tensor *c2;
    KILN_TRY(cu_as(b, C, sdt, &cs, &c2));
    kiln_status st = cu_check(b, cuk_strided_copy(cu_es(sdt), c2->data, 0, y->data, M * N, &sh, b->stream),
                              "broadcast C");
    cu_tmp_free(b, &cs);
    g->beta = beta;
    return st;
}

static kiln_status gemm_run(cu_be *b, kiln_kctx *ctx, kiln_dtype sdt, const kiln_tensor *A, const kiln_tensor *B,
                            const kiln_tensor *C)
{
    const kiln_node *n = ctx->node;
    bool ta = b->host->attr_i(n, "transA", 0) != 0, tb = b->host->attr_i(n, "transB", 0) != 0;
    float alpha = b->host->attr_f(n, "alpha", 1.0f), beta = b->host->attr_f(n, "beta", 1.0f);
    int64_t M = ta ? A->dims[1] : A->dims[0], K = ta ? A->dims[0] : A->dims[1];
    int64_t Kb = tb ? B->dims[1] : B->dims[0], N = tb ? B->dims[0] : B->dims[1];
    if (K != Kb)
        return cu_kerr(b, ctx, KILN_ERR_SHAPE, "inner dims differ (%lld vs %lld)", (long long)K, (long long)Kb);
    int act = CUK_IDENTITY;
    float aa = 0, ab = 0;
    if (n->op == KILN_OP_FusedGemm && !cu_fused_act(b, n, &act, &aa, &ab))
        return cu_kerr(b, ctx, KILN_ERR_UNSUPPORTED, "unknown fused activation");
    int64_t dims[2] = {M, N};
    KILN_TRY(cu_out_s(b, ctx, 0, KILN_DT_FLOAT32, sdt, 2, dims));
    kiln_tensor *y = ctx->out[0];
    if (!y->nbytes)
        return KILN_OK;
    gemm_args g = {.ta = ta, .tb = tb, .ty = cu_cuda_ty(sdt), .M = M, .N = N, .K = K, .A = A->data, .B = B->data,
                   .Y = y->data, .lda = A->dims[1], .ldb = B->dims[1], .ldy = N, .alpha = alpha, .beta = 0.0f,
                   .relu = act == CUK_RELU, .batch = 1};
    KILN_TRY(cu_gemm_c(b, ctx, C, beta, sdt, y, &g));
    KILN_TRY(cu_gemm_epi(b, ctx, 0, &g));
    if (act == CUK_IDENTITY || act == CUK_RELU)
        return KILN_OK;
    return cu_check(b, cuk_epilogue(cu_fdt(sdt), y->data, M * N, 1, 1, NULL, NULL, act, aa, ab, b->stream), "epilogue");
}

static kiln_status k_gemm(cu_be *b, kiln_kctx *ctx)
{
    if (cu_fp8_layer(b, ctx->node, NULL))
        return cu_fp8_run(b, ctx);
    if (cu_fp4_layer(b, ctx->node, NULL))
        return cu_fp4_run(b, ctx);
    if (!IN(0) || !IN(1) || IN(0)->ndim != 2 || IN(1)->ndim != 2)
        return cu_kerr(b, ctx, KILN_ERR_SHAPE, "A and B must be 2-D");
    kiln_dtype sdt = gemm_sdt(b, ctx);
    kiln_tensor tmp[4];
    const kiln_tensor *o[4];
    kiln_status st = gemm_ops(b, ctx, sdt, 0, 0, tmp, o);
    if (st == KILN_OK)
        st = gemm_run(b, ctx, sdt, o[0], o[1], IN(2));
    free_ops(b, tmp);
    return st;
}

/* ---- Attention */

/* A tensor seen through an Attention perm (q_perm, kt_perm, v_perm: the logical operand is
 * Transpose(input, perm)): the logical dims and the element strides of the physical data. */
typedef struct attn_view {
    int64_t dims[KILN_MAX_DIMS], str[KILN_MAX_DIMS];
} attn_view;

static void attn_view_of(const kiln_tensor *t, const int *perm, attn_view *v)
{
    int64_t cs[KILN_MAX_DIMS];
    cu_contig_strides(t->ndim, t->dims, cs);
    for (int j = 0; j < t->ndim; j++) {
        v->dims[j] = t->dims[perm[j]];
        v->str[j] = cs[perm[j]];
    }
}

/* Q, K^T, V (and Y) of an Attention node through its perms */
typedef struct attn_geo {
    int r;
    attn_view q, kt, v;
    int yperm[KILN_MAX_DIMS];       /* y_perm (the identity when absent) */
    int64_t ydims[KILN_MAX_DIMS];   /* logical output [lead..., S, Dv] */
} attn_geo;

static bool attn_geometry(const cu_be *b, const kiln_node *n, const kiln_tensor *q, const kiln_tensor *kt,
                          const kiln_tensor *v, attn_geo *g)
{
    int r = g->r = q->ndim;
    int pq[KILN_MAX_DIMS], pk[KILN_MAX_DIMS], pv[KILN_MAX_DIMS];
    /* the perms as the CPU reads them (ir/fused.c kiln__attn_perm, a host service): a permutation of the
     * r axes each, the identity when absent */
    if (r < 2 || kt->ndim != r || v->ndim != r || r > CUK_MAX_DIMS || !b->host->attn_perm(n, KILN_ATTN_Q, r, pq) ||
        !b->host->attn_perm(n, KILN_ATTN_KT, r, pk) || !b->host->attn_perm(n, KILN_ATTN_V, r, pv) ||
        !b->host->attn_perm(n, KILN_ATTN_Y, r, g->yperm))
        return false;
    attn_view_of(q, pq, &g->q);
    attn_view_of(kt, pk, &g->kt);
    attn_view_of(v, pv, &g->v);
    for (int d = 0; d < r - 2; d++)
        if (g->q.dims[d] != g->kt.dims[d] || g->q.dims[d] != g->v.dims[d])
            return false;
    if (g->kt.dims[r - 2] != g->q.dims[r - 1] || g->v.dims[r - 2] != g->kt.dims[r - 1])
        return false;
    memcpy(g->ydims, g->q.dims, sizeof(int64_t) * (size_t)r);
    g->ydims[r - 1] = g->v.dims[r - 1];
    return true;
}

static bool acc_attention(cu_be *b, const kiln_node *n, int n_in, const kiln_tensor *const *in)
{
    int kind = (int)b->host->attr_i(n, "mask_kind", 1);
    if (n_in < 3 || !in[0] || !in[1] || !in[2] || kind < 1 || kind > 3)
        return false;
    const kiln_tensor *m = n_in > 3 ? in[3] : NULL;
    attn_geo g;
    if (!attn_geometry(b, n, in[0], in[1], in[2], &g))
        return false;
    int r = g.r;
    if (m) {
        if (m->ndim > r || m->dtype != (kind == 1 ? KILN_DT_FLOAT32 : KILN_DT_BOOL))
            return false;
        for (int d = 0; d < m->ndim; d++) {
            int sd = r - m->ndim + d;
            int64_t want = sd == r - 1 ? g.kt.dims[r - 1] : g.q.dims[sd];
            if (m->dims[d] != 1 && m->dims[d] != want)
                return false;
        }
    }
    return true;
}

static bool is_identity(const attn_view *v, int r)
{
    int64_t cs[KILN_MAX_DIMS];
    cu_contig_strides(r, v->dims, cs);
    for (int d = 0; d < r; d++)
        if (v->dims[d] != 1 && v->str[d] != cs[d])
            return false;
    return true;
}

/* t = the logical operand v of x, contiguous (a strided copy unless it already is) */
static kiln_status attn_contig(cu_be *b, const kiln_tensor *x, const attn_view *v, int r, kiln_dtype sdt,
                               kiln_tensor *t, const void **data)
{
    *data = x->data;
    if (is_identity(v, r))
        return KILN_OK;
    KILN_TRY(cu_tmp(b, t, sdt, r, v->dims));
    cuk_shape sh = {.ndim = r};
    for (int d = 0; d < r; d++) {
        sh.dims[d] = v->dims[d];
        sh.str[0][d] = v->str[d];
    }
    *data = t->data;
    return cu_check(b, cuk_strided_copy(sdt == KILN_DT_FLOAT32 ? 4 : 2, x->data, 0, t->data, cu_numel(t), &sh,
                                        b->stream),
                    "attention operand copy");
}

static kiln_status attention_run(cu_be *b, kiln_kctx *ctx, kiln_dtype sdt, const kiln_tensor *q, const kiln_tensor *kt,
                                 const kiln_tensor *v, const kiln_tensor *m)
{
    attn_geo geo;
    if (!attn_geometry(b, ctx->node, q, kt, v, &geo))
        return cu_kerr(b, ctx, KILN_ERR_SHAPE, "unsupported attention shapes");
    int r = geo.r, kind = (int)b->host->attr_i(ctx->node, "mask_kind", 1);
    float scale = b->host->attr_f(ctx->node, "scale", 1.0f), fill = b->host->attr_f(ctx->node, "mask_fill", 0.0f);
    int64_t S = geo.q.dims[r - 2], D = geo.q.dims[r - 1], Sk = geo.kt.dims[r - 1], Dv = geo.v.dims[r - 1], nb = 1;
    for (int d = 0; d < r - 2; d++)
        nb *= geo.q.dims[d];
    /* the physical output: Transpose(logical Y, y_perm); ylog: the logical Y's strides in it */
    int64_t pdims[KILN_MAX_DIMS], pstr[KILN_MAX_DIMS], ylog[KILN_MAX_DIMS], sdims[KILN_MAX_DIMS];
    for (int j = 0; j < r; j++)
        pdims[j] = geo.ydims[geo.yperm[j]];
    cu_contig_strides(r, pdims, pstr);
    for (int j = 0; j < r; j++)
        ylog[geo.yperm[j]] = pstr[j];
    memcpy(sdims, geo.q.dims, sizeof(int64_t) * (size_t)r);
    sdims[r - 1] = Sk;
    KILN_TRY(cu_out_s(b, ctx, 0, KILN_DT_FLOAT32, sdt, r, pdims));
    kiln_tensor *y = ctx->out[0];
    if (!y->nbytes || !S || !Sk)
        return KILN_OK;
    bool half = sdt != KILN_DT_FLOAT32;
    cuk_shape sh = {.ndim = r};
    for (int d = 0; d < r; d++)
        sh.dims[d] = sdims[d];
    if (m) {   /* the mask's strides over the score dims (0 = broadcast) */
        int64_t acc = 1;
        for (int d = r - 1; d >= 0; d--) {
            int md = d - (r - m->ndim);
            int64_t x = md >= 0 ? m->dims[md] : 1;
            sh.str[0][d] = x == 1 ? 0 : acc;
            acc *= x;
        }
    }
    cuk_attn_io io = {.q = q->data, .k = kt->data, .v = v->data, .y = y->data, .nlead = r - 2, .S = S, .Sk = Sk,
                      .D = D, .Dv = Dv, .qs = geo.q.str[r - 2], .qd = geo.q.str[r - 1], .kd = geo.kt.str[r - 2],
                      .ks = geo.kt.str[r - 1], .vs = geo.v.str[r - 2], .vd = geo.v.str[r - 1], .ys = ylog[r - 2],
                      .yd = ylog[r - 1]};
    for (int d = 0; d < r - 2; d++) {
        io.lead[d] = geo.q.dims[d];
        io.ql[d] = geo.q.str[d];
        io.kl[d] = geo.kt.str[d];
        io.vl[d] = geo.v.str[d];
        io.yl[d] = ylog[d];
    }
    if (half && b->fused_attn && cuk_attn_fused_fits(cu_fdt(sdt), &io)) {   /* one kernel */
        cu_part_mark(b, 0, 0, 1);
        /* the FP8 feed (BERT: the output projection's input) written with the output's 16-byte pieces */
        cuk_attn_opts ao = {.grid = b->attn_grid, .scatter = b->attn_store == CU_ATTN_ROWS};
        if (b->attn_store == CU_ATTN_FEED && cuk_attn_fused_feeds(&io))
            ao.feed = cu_fp8_feed(b, ctx, y, &ao.feed_scale);
        kiln_status st = cu_check(b, cuk_attn_fused(cu_fdt(sdt), &io, scale, m ? m->data : NULL, kind, fill, &sh, &ao,
                                                    b->stream), "fused attention");
        if (st == KILN_OK && ao.feed)
            cu_fp8_fed(b, y, ao.feed_scale);
        cu_part_mark(b, 0, 1, 1);
        return st;
    }
    /* two GEMMs and the softmax on contiguous logical operands (strided copies where perms say so) */
    size_t es = half ? 2 : 4;
    kiln_tensor sc, ws, tq, tk, tv, ty;
    memset(&ws, 0, sizeof ws);
    memset(&tq, 0, sizeof tq);
    memset(&tk, 0, sizeof tk);
    memset(&tv, 0, sizeof tv);
    memset(&ty, 0, sizeof ty);
    const void *qd = NULL, *kd = NULL, *vd = NULL;
    attn_view yv = {{0}, {0}};
    memcpy(yv.dims, geo.ydims, sizeof(int64_t) * (size_t)r);
    memcpy(yv.str, ylog, sizeof(int64_t) * (size_t)r);
    bool ycopy = !is_identity(&yv, r);
    kiln_status st = attn_contig(b, q, &geo.q, r, sdt, &tq, &qd);
    if (st == KILN_OK)
        st = attn_contig(b, kt, &geo.kt, r, sdt, &tk, &kd);
    if (st == KILN_OK)
        st = attn_contig(b, v, &geo.v, r, sdt, &tv, &vd);
    if (st == KILN_OK && ycopy)
        st = cu_tmp(b, &ty, sdt, r, geo.ydims);
    void *yd = ycopy ? ty.data : y->data;
    if (st == KILN_OK)
        st = cu_tmp(b, &sc, sdt, r, sdims);
    else
        memset(&sc, 0, sizeof sc);
    /* half scores: the scale goes into the GEMM (they stay in range), the softmax reads them in float32 */
    gemm_args g1 = {.ty = cu_cuda_ty(sdt), .M = S, .N = Sk, .K = D, .A = qd, .B = kd, .Y = sc.data, .lda = D,
                    .ldb = Sk, .ldy = Sk, .alpha = half ? scale : 1.0f, .beta = 0.0f, .batch = nb, .sa = S * D,
                    .sb = D * Sk, .sy = S * Sk};
    cu_part_mark(b, 0, 0, 3);
    if (st == KILN_OK)
        st = gemm(b, ctx, 0, &g1);
    cu_part_mark(b, 0, 1, 3);
    if (st == KILN_OK && !cuk_attn_softmax_fits(nb * S, Sk))
        st = cu_tmp(b, &ws, KILN_DT_FLOAT32, r, sdims);
    if (st == KILN_OK)
        st = cu_check(b, cuk_attn_softmax(cu_fdt(sdt), sc.data, ws.data, nb * S, Sk, half ? 1.0f : scale,
                                          m ? m->data : NULL, kind, fill, &sh, b->stream), "attention softmax");
    gemm_args g2 = {.ty = cu_cuda_ty(sdt), .M = S, .N = Dv, .K = Sk, .A = sc.data, .B = vd, .Y = yd, .lda = Sk,
                    .ldb = Dv, .ldy = Dv, .alpha = 1.0f, .beta = 0.0f, .batch = nb, .sa = S * Sk, .sb = Sk * Dv,
                    .sy = S * Dv};
    cu_part_mark(b, 0, 2, 3);
    if (st == KILN_OK)
        st = gemm(b, ctx, 1, &g2);
    cu_part_mark(b, 0, 3, 3);
    if (st == KILN_OK && ycopy) {   /* physical element j gathers the logical element at ylog's offsets */
        cuk_shape ysh = {.ndim = r};
        int64_t lc[KILN_MAX_DIMS];
        cu_contig_strides(r, geo.ydims, lc);
        for (int j = 0; j < r; j++) {
            ysh.dims[j] = pdims[j];
            ysh.str[0][j] = lc[geo.yperm[j]];
        }
        st = cu_check(b, cuk_strided_copy(es, ty.data, 0, y->data, cu_numel(y), &ysh, b->stream),
                      "attention output copy");
    }
    cu_tmp_free(b, &sc);   /* reused only by later work on this stream */
    cu_tmp_free(b, &ws);
    cu_tmp_free(b, &tq);
    cu_tmp_free(b, &tk);
    cu_tmp_free(b, &tv);
    cu_tmp_free(b, &ty);
    return st;
}

static kiln_status k_attention(cu_be *b, kiln_kctx *ctx)
{
    if (!acc_attention(b, ctx->node, ctx->n_in, ctx->in))
        return cu_kerr(b, ctx, KILN_ERR_SHAPE, "unsupported attention shapes");
    /* Q, K^T, V in the activations' storage; an additive mask in float32 */
    kiln_dtype sdt = cu_act_sdt(b, ctx, 7u);
    kiln_tensor tmp[4];
    const kiln_tensor *x[4];
    memset(tmp, 0, sizeof tmp);
    kiln_status st = KILN_OK;
    for (int i = 0; i < 4 && st == KILN_OK; i++)
        st = cu_as(b, IN(i), i == 3 ? KILN_DT_FLOAT32 : sdt, &tmp[i], &x[i]);
    if (st == KILN_OK)
        st = attention_run(b, ctx, sdt, x[0], x[1], x[2], x[3]);
    for (int i = 0; i < 4; i++)
        cu_tmp_free(b, &tmp[i]);
    return st;
}

/* A, bias, residual float32; B float32 or a FP16 / BF16 weight */
static bool sup_mm(const kiln_bk_query *q)
{
    if (!cu_q_f32(q, 13u))
        return false;
    kiln_dtype w = q->in_dtype && q->n_in > 1 ? q->in_dtype[1] : KILN_DT_FLOAT32;
    return w == KILN_DT_FLOAT32 || w == KILN_DT_FLOAT16 || w == KILN_DT_BFLOAT16 || w == KILN_DT_UNDEFINED;
}
/* Q, K^T, V float32; the mask float32 or bool as mask_kind says (checked by acc_attention) */
static bool sup_attention(const kiln_bk_query *q) { return cu_q_f32(q, 7u); }

const cu_op cu_ops_gemm[] = {
    {KILN_OP_MatMul, k_matmul, sup_mm, acc_matmul, 0},
    {KILN_OP_FusedMatMul, k_matmul, sup_mm, acc_matmul, 0},
    {KILN_OP_Gemm, k_gemm, sup_mm, acc_gemm, 0},
    {KILN_OP_FusedGemm, k_gemm, sup_mm, acc_gemm, 0},
    {KILN_OP_Attention, k_attention, sup_attention, acc_attention, 0},
    {KILN_OP_COUNT, NULL, NULL, NULL, 0},
};

/* MatMul, Gemm, FusedMatMul (act(A @ B + bias + R)), FusedGemm and Attention
 * (Softmax(Q @ KT * scale + M) @ V) through cuBLASLt, float32 with FP32 compute (TF32 when the
 * context allows it). Row-major tensors are handed to cuBLASLt as their column-major transposes
 * (Y^T = B^T A^T). Bias and ReLU ride on cuBLASLt's epilogue, a residual on C (beta = 1), other
 * activations on kiln's epilogue kernel. Per node and shape the descriptors and an algorithm are
 * kept: the fastest of cuBLASLt's first heuristic candidates, timed once on the layer's own
 * operands (when the output is not also an input). */
#include "cuda_internal.h"
#include <stdlib.h>

#define IN(i) (i < ctx->n_in ? ctx->in[i] : NULL)
#define LT_WS ((size_t)32 << 20)

typedef struct gemm_args {
    bool ta, tb;
    int64_t M, N, K;
    const float *A, *B;
    float *Y;
    const float *C;           /* beta != 0: the addend (same layout as Y); NULL = Y itself */
    int64_t lda, ldb, ldy;
    float alpha, beta;
    const float *bias;        /* [N] or NULL */
    bool relu;
    int64_t batch, sa, sb, sy;   /* strided batch (batch 1: strides unused) */
} gemm_args;

typedef struct lt_state {
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t a, b, c;
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
    free(s);
}

static kiln_status layout(cu_be *b, cublasLtMatrixLayout_t *l, int64_t rows, int64_t cols, int64_t ld, int64_t batch,
                          int64_t stride)
{
    KILN_TRY(cu_check_lt(b, cublasLtMatrixLayoutCreate(l, CUDA_R_32F, (uint64_t)rows, (uint64_t)cols, ld),
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

#define LT_CANDIDATES 8

static cublasStatus_t lt_matmul(cu_be *b, const lt_state *s, const gemm_args *g, const cublasLtMatmulAlgo_t *algo,
                                void *ws, size_t wsz)
{
    return cublasLtMatmul(b->lt, s->op, &g->alpha, g->B, s->a, g->A, s->b, &g->beta, g->C ? g->C : g->Y, s->c, g->Y,
                          s->c, algo, ws, wsz, b->stream);
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

static kiln_status make_lt(cu_be *b, const kiln_kctx *ctx, const gemm_args *g, lt_state **out)
{
    lt_state *s = calloc(1, sizeof *s);
    if (!s)
        return cu_err(b, KILN_ERR_NOMEM, "out of memory");
    kiln_status st = cu_check_lt(b, cublasLtMatmulDescCreate(&s->op, b->tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32
                                                                           : CUBLAS_COMPUTE_32F, CUDA_R_32F),
                                 "cublasLtMatmulDescCreate");
    /* column-major view: Y^T[N,M] = op(B^T)[N,K] * op(A^T)[K,M] */
    cublasOperation_t opa = g->tb ? CUBLAS_OP_T : CUBLAS_OP_N, opb = g->ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    if (st == KILN_OK)
        st = cu_check_lt(b, cublasLtMatmulDescSetAttribute(s->op, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa), "transa");
    if (st == KILN_OK)
        st = cu_check_lt(b, cublasLtMatmulDescSetAttribute(s->op, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb), "transb");
    cublasLtEpilogue_t epi = g->bias ? (g->relu ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_BIAS)
                                     : (g->relu ? CUBLASLT_EPILOGUE_RELU : CUBLASLT_EPILOGUE_DEFAULT);
    if (st == KILN_OK)
        st = cu_check_lt(b, cublasLtMatmulDescSetAttribute(s->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi),
                         "epilogue");
    if (st == KILN_OK && g->bias) {
        const void *bp = g->bias;   /* the pointer is set per call too; the heuristic wants it present */
        st = cu_check_lt(b, cublasLtMatmulDescSetAttribute(s->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bp, sizeof bp),
                         "bias");
    }
    if (st == KILN_OK)
        st = g->tb ? layout(b, &s->a, g->K, g->N, g->ldb, g->batch, g->sb) : layout(b, &s->a, g->N, g->K, g->ldb, g->batch, g->sb);
    if (st == KILN_OK)
        st = g->ta ? layout(b, &s->b, g->M, g->K, g->lda, g->batch, g->sa) : layout(b, &s->b, g->K, g->M, g->lda, g->batch, g->sa);
    if (st == KILN_OK)
        st = layout(b, &s->c, g->N, g->M, g->ldy, g->batch, g->sy);
    cublasLtMatmulPreference_t pref = NULL;
    if (st == KILN_OK)
        st = cu_check_lt(b, cublasLtMatmulPreferenceCreate(&pref), "preference");
    size_t wsmax = LT_WS;
    if (st == KILN_OK)
        st = cu_check_lt(b, cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsmax,
                                                                 sizeof wsmax), "preference");
    cublasLtMatmulHeuristicResult_t h[LT_CANDIDATES];
    int got = 0;
    if (st == KILN_OK)
        st = cu_check_lt(b, cublasLtMatmulAlgoGetHeuristic(b->lt, s->op, s->a, s->b, s->c, s->c, pref, LT_CANDIDATES, h,
                                                           &got), "cublasLtMatmulAlgoGetHeuristic");
    if (pref)
        cublasLtMatmulPreferenceDestroy(pref);
    if (st == KILN_OK && got < 1)
        st = cu_kerr(b, ctx, KILN_ERR_UNSUPPORTED, "cuBLASLt has no algorithm for this GEMM");
    int pick = 0;
    if (st == KILN_OK && got > 1 && (g->beta == 0.0f || (g->C && g->C != g->Y)))
        st = fastest(b, s, g, h, got, &pick);
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
    int64_t key[16] = {slot, g->ta, g->tb, g->M, g->N, g->K, g->lda, g->ldb, g->ldy, g->bias != NULL, g->relu,
                       g->batch, g->sa, g->sb, g->sy, 0};
    lt_state *s = cu_state_get(b, ctx->node, key, 16);
    if (!s) {
        KILN_TRY(make_lt(b, ctx, g, &s));
        KILN_TRY(cu_state_put(b, ctx->node, key, 16, s, lt_state_free));
    }
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

/* ---- MatMul / FusedMatMul */

typedef struct mm_shape {
    int64_t M, N, K;
    int nd;                          /* output rank */
    int64_t dims[KILN_MAX_DIMS];
    int nb;                          /* batch rank */
    int64_t bdims[KILN_MAX_DIMS], bsa[KILN_MAX_DIMS], bsb[KILN_MAX_DIMS];   /* batch dims, A / B strides */
    int64_t batch;
} mm_shape;

static bool mm_shape_of(const kiln_tensor *a, const kiln_tensor *b, mm_shape *m)
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
    if (n_in < 2 || !in[0] || !in[1] || !mm_shape_of(in[0], in[1], &m) || m.K <= 0)
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
static kiln_status matmul_run(cu_be *b, kiln_kctx *ctx, const kiln_tensor *A, const kiln_tensor *B, const mm_shape *m,
                              const float *bias, const float *res, int act, float aa, float ab)
{
    KILN_TRY(cu_out(b, ctx, 0, KILN_DT_FLOAT32, m->nd, m->dims));
    kiln_tensor *y = ctx->out[0];
    if (!y->nbytes)
        return KILN_OK;
    gemm_args g = {.M = m->M, .N = m->N, .K = m->K, .A = A->data, .B = B->data, .Y = y->data, .C = res, .lda = m->K,
                   .ldb = m->N, .ldy = m->N, .alpha = 1.0f, .beta = res ? 1.0f : 0.0f, .bias = bias,
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
        KILN_TRY(gemm(b, ctx, 0, &g));
    } else if (a_full && b_full) {   /* identical batch dims: strided batched */
        g.batch = m->batch;
        g.sa = m->M * m->K;
        g.sb = m->K * m->N;
        g.sy = m->M * m->N;
        KILN_TRY(gemm(b, ctx, 0, &g));
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
            gi.A = (const float *)A->data + oa;
            gi.B = (const float *)B->data + ob;
            gi.Y = (float *)y->data + i * m->M * m->N;
            gi.C = res ? res + i * m->M * m->N : NULL;
            KILN_TRY(gemm(b, ctx, 0, &gi));
        }
    }
    if (act == CUK_IDENTITY || act == CUK_RELU)
        return KILN_OK;
    return cu_check(b, cuk_epilogue(y->data, cu_numel(y), 1, 1, NULL, NULL, act, aa, ab, b->stream), "epilogue");
}

static kiln_status k_matmul(cu_be *b, kiln_kctx *ctx)
{
    const kiln_tensor *A = IN(0), *B = IN(1);
    mm_shape m;
    if (!A || !B || !mm_shape_of(A, B, &m))
        return cu_kerr(b, ctx, KILN_ERR_SHAPE, "incompatible MatMul operands");
    int act = CUK_IDENTITY;
    float aa = 0, ab = 0;
    const kiln_tensor *bias = NULL, *res = NULL;
    if (ctx->node->op == KILN_OP_FusedMatMul) {
        if (!cu_fused_act(b, ctx->node, &act, &aa, &ab))
            return cu_kerr(b, ctx, KILN_ERR_UNSUPPORTED, "unknown fused activation");
        bias = IN(2);
        res = IN(3);
        if ((bias && cu_numel(bias) != m.N) || (res && cu_numel(res) != m.batch * m.M * m.N))
            return cu_kerr(b, ctx, KILN_ERR_SHAPE, "bias / residual shape");
    }
    return matmul_run(b, ctx, A, B, &m, bias ? bias->data : NULL, res ? res->data : NULL, act, aa, ab);
}

/* ---- Gemm / FusedGemm */

static bool acc_gemm(cu_be *b, const kiln_node *n, int n_in, const kiln_tensor *const *in)
{
    if (n_in < 2 || !in[0] || !in[1] || in[0]->ndim != 2 || in[1]->ndim != 2 || (n_in > 2 && in[2] && in[2]->ndim > 2))
        return false;
    int64_t K = in[0]->dims[b->host->attr_i(n, "transA", 0) ? 0 : 1];
    return K > 0;
}

static kiln_status k_gemm(cu_be *b, kiln_kctx *ctx)
{
    const kiln_tensor *A = IN(0), *B = IN(1), *C = IN(2);
    if (!A || !B || A->ndim != 2 || B->ndim != 2)
        return cu_kerr(b, ctx, KILN_ERR_SHAPE, "A and B must be 2-D");
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
    KILN_TRY(cu_out(b, ctx, 0, KILN_DT_FLOAT32, 2, dims));
    kiln_tensor *y = ctx->out[0];
    if (!y->nbytes)
        return KILN_OK;
    gemm_args g = {.ta = ta, .tb = tb, .M = M, .N = N, .K = K, .A = A->data, .B = B->data, .Y = y->data,
                   .lda = A->dims[1], .ldb = B->dims[1], .ldy = N, .alpha = alpha, .beta = 0.0f,
                   .relu = act == CUK_RELU, .batch = 1};
    if (C && beta != 0.0f) {
        bool row_bias = cu_numel(C) == N && (C->ndim == 1 || (C->ndim == 2 && C->dims[0] == 1));
        if (row_bias && beta == 1.0f) {
            g.bias = C->data;
        } else {   /* C broadcast into Y, then Y = alpha AB + beta Y */
            const kiln_tensor *two[2] = {C, y};
            int nd;
            int64_t bd[KILN_MAX_DIMS];
            cuk_shape sh;
            if (!cu_broadcast(2, two, &nd, bd) || nd != 2 || bd[0] != M || bd[1] != N ||
                !cu_shape_of(1, two, nd, bd, &sh))
                return cu_kerr(b, ctx, KILN_ERR_SHAPE, "C does not broadcast to [%lld, %lld]", (long long)M,
                               (long long)N);
            KILN_TRY(cu_check(b, cuk_strided_copy(4, C->data, 0, y->data, M * N, &sh, b->stream), "broadcast C"));
            g.beta = beta;
        }
    }
    KILN_TRY(gemm(b, ctx, 0, &g));
    if (act == CUK_IDENTITY || act == CUK_RELU)
        return KILN_OK;
    return cu_check(b, cuk_epilogue(y->data, M * N, 1, 1, NULL, NULL, act, aa, ab, b->stream), "epilogue");
}

/* ---- Attention */

static bool acc_attention(cu_be *b, const kiln_node *n, int n_in, const kiln_tensor *const *in)
{
    int kind = (int)b->host->attr_i(n, "mask_kind", 1);
    if (n_in < 3 || !in[0] || !in[1] || !in[2] || kind < 1 || kind > 3)
        return false;
    const kiln_tensor *q = in[0], *kt = in[1], *v = in[2], *m = n_in > 3 ? in[3] : NULL;
    int r = q->ndim;
    if (r < 2 || kt->ndim != r || v->ndim != r || r > CUK_MAX_DIMS)
        return false;
    for (int d = 0; d < r - 2; d++)
        if (q->dims[d] != kt->dims[d] || q->dims[d] != v->dims[d])
            return false;
    if (kt->dims[r - 2] != q->dims[r - 1] || v->dims[r - 2] != kt->dims[r - 1])
        return false;
    if (m) {
        if (m->ndim > r || m->dtype != (kind == 1 ? KILN_DT_FLOAT32 : KILN_DT_BOOL))
            return false;
        for (int d = 0; d < m->ndim; d++) {
            int sd = r - m->ndim + d;
            int64_t want = sd == r - 1 ? kt->dims[r - 1] : q->dims[sd];
            if (m->dims[d] != 1 && m->dims[d] != want)
                return false;
        }
    }
    return true;
}

static kiln_status k_attention(cu_be *b, kiln_kctx *ctx)
{
    const kiln_tensor *q = IN(0), *kt = IN(1), *v = IN(2), *m = IN(3);
    if (!acc_attention(b, ctx->node, ctx->n_in, ctx->in))
        return cu_kerr(b, ctx, KILN_ERR_SHAPE, "unsupported attention shapes");
    int r = q->ndim, kind = (int)b->host->attr_i(ctx->node, "mask_kind", 1);
    float scale = b->host->attr_f(ctx->node, "scale", 1.0f), fill = b->host->attr_f(ctx->node, "mask_fill", 0.0f);
    int64_t S = q->dims[r - 2], D = q->dims[r - 1], Sk = kt->dims[r - 1], Dv = v->dims[r - 1], nb = 1;
    for (int d = 0; d < r - 2; d++)
        nb *= q->dims[d];
    int64_t odims[KILN_MAX_DIMS], sdims[KILN_MAX_DIMS];
    memcpy(odims, q->dims, sizeof(int64_t) * (size_t)r);
    odims[r - 1] = Dv;
    memcpy(sdims, q->dims, sizeof(int64_t) * (size_t)r);
    sdims[r - 1] = Sk;
    KILN_TRY(cu_out(b, ctx, 0, KILN_DT_FLOAT32, r, odims));
    kiln_tensor *y = ctx->out[0];
    if (!y->nbytes || !S || !Sk)
        return KILN_OK;
    kiln_tensor sc;
    KILN_TRY(cu_tmp(b, &sc, KILN_DT_FLOAT32, r, sdims));
    gemm_args g1 = {.M = S, .N = Sk, .K = D, .A = q->data, .B = kt->data, .Y = sc.data, .lda = D, .ldb = Sk, .ldy = Sk,
                    .alpha = 1.0f, .beta = 0.0f, .batch = nb, .sa = S * D, .sb = D * Sk, .sy = S * Sk};
    cu_part_mark(b, 0, 3);
    kiln_status st = gemm(b, ctx, 0, &g1);
    cu_part_mark(b, 1, 3);
    if (st == KILN_OK) {
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
        st = cu_check(b, cuk_attn_softmax(sc.data, nb * S, Sk, scale, m ? m->data : NULL, kind, fill, &sh, b->stream),
                      "attention softmax");
    }
    gemm_args g2 = {.M = S, .N = Dv, .K = Sk, .A = sc.data, .B = v->data, .Y = y->data, .lda = Sk, .ldb = Dv, .ldy = Dv,
                    .alpha = 1.0f, .beta = 0.0f, .batch = nb, .sa = S * Sk, .sb = Sk * Dv, .sy = S * Dv};
    cu_part_mark(b, 2, 3);
    if (st == KILN_OK)
        st = gemm(b, ctx, 1, &g2);
    cu_part_mark(b, 3, 3);
    cu_tmp_free(b, &sc);   /* reused only by later work on this stream */
    return st;
}

static bool sup_mm(const kiln_bk_query *q) { return cu_q_f32(q, 15u); }
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

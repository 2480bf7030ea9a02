/* Reference kernels: linalg — MatMul, Gemm, Einsum, MatMulInteger, QLinearMatMul (requantized
 * through qgemm.h's epilogue, the contract of the fast INT8 kernels).
 *
 * MatMul follows numpy.matmul: 1-D operands are promoted (and the added dimension removed
 * again), leading (batch) dimensions broadcast. float32 runs on kiln__sgemm: when the right
 * operand has no batch dimensions and the left one is not broadcast, the whole batch is a
 * single sgemm with M = batch * rows; otherwise one sgemm per batch matrix (batches in
 * parallel when they are small). float16 / bfloat16 go through float32; float64 and the
 * integer types use plain loops (integers wrap around like C unsigned arithmetic).
 * A constant float32 2-D right operand (weights) is packed at build time into the GEMM's panel
 * layout (prep_gemm_b, a KILN_PREP_GEMM_B blob in ctx->prepared); the float32 paths then read
 * the panels instead of B, bit-identically to packing B at run time. */
#include "../../kernel.h"
#include "../fused.h"
#include "../gemm.h"
#include "../prep.h"
#include "../qgemm.h"
#include "../lowbit.h"
#include "../qgemm_bf16.h"
#include <math.h>

/* The fallback loops (float64 / integer matmul, integer accumulation) are plain streams; let
 * GCC vectorize them (-O2 uses a very cheap vectorizer cost model that leaves them scalar). */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("O3")
#endif

/* Upper bound on multiply-adds a single node may request (guards against absurd shapes). */
#define LINALG_MAX_WORK 1.0e12
#define LINALG_MAX_WORK_SLOW 1.0e10

static int64_t numel_of(const kiln_tensor *t)
{
    return kiln__shape_numel(t->ndim, t->dims);
}

static bool is_half(kiln_dtype dt)
{
    return dt == KILN_DT_FLOAT16 || dt == KILN_DT_BFLOAT16;
}

/* Converts a float16 / bfloat16 / float32 tensor's data to a new float32 buffer. */
static float *to_f32(const kiln_tensor *t, int64_t n)
{
    float *p = kiln__malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    if (!p)
        return NULL;
    if (kiln__lowp_to_f32_array(t->dtype, p, t->data, n))
        return p;
    if (n)
        memcpy(p, t->data, (size_t)n * sizeof(float));
    return p;
}

static void from_f32(kiln_tensor *t, const float *p, int64_t n)
{
    kiln__f32_to_lowp_array(t->dtype, t->data, p, n, true);
}

/* ------------------------------------------------------------------------------------------
 * Batched matmul plan (numpy semantics)
 * ------------------------------------------------------------------------------------------ */

typedef struct mm_plan {
    int64_t M, N, K;
    int64_t nbatch;
    int bnd;                         /* broadcast batch rank */
    int64_t bdims[KILN_MAX_DIMS];
    int64_t astr[KILN_MAX_DIMS];     /* batch strides, in matrices (0 = broadcast) */
    int64_t bstr[KILN_MAX_DIMS];
    int out_ndim;
    int64_t out_dims[KILN_MAX_DIMS];
    bool b_single;                   /* B is one matrix for every batch */
    bool a_natural;                  /* A's batches are laid out exactly as the output's */
} mm_plan;

static kiln_status mm_plan_make(const kiln_kctx *ctx, const kiln_tensor *a, const kiln_tensor *b, mm_plan *p)
{
    memset(p, 0, sizeof *p);
    if (a->ndim < 1 || b->ndim < 1)
        return kiln__kerr(ctx, KILN_ERR_SHAPE, "operands must have rank >= 1 (got %d and %d)", a->ndim, b->ndim);
    if (a->ndim > KILN_MAX_DIMS || b->ndim > KILN_MAX_DIMS)
        return kiln__kerr(ctx, KILN_ERR_SHAPE, "rank too large");
    int64_t M = a->ndim == 1 ? 1 : a->dims[a->ndim - 2];
    int64_t K = a->dims[a->ndim - 1];
    int64_t Kb = b->ndim == 1 ? b->dims[0] : b->dims[b->ndim - 2];
    int64_t N = b->ndim == 1 ? 1 : b->dims[b->ndim - 1];
    if (K != Kb)
        return kiln__kerr(ctx, KILN_ERR_SHAPE, "inner dimensions differ: %lld vs %lld", (long long)K, (long long)Kb);
    if (M < 0 || N < 0 || K < 0)
        return kiln__kerr(ctx, KILN_ERR_SHAPE, "negative dimension");
    int abr = a->ndim > 2 ? a->ndim - 2 : 0, bbr = b->ndim > 2 ? b->ndim - 2 : 0;
    int bnd = abr > bbr ? abr : bbr;
    for (int d = 0; d < bnd; d++) {
        int64_t ad = d >= bnd - abr ? a->dims[d - (bnd - abr)] : 1;
        int64_t bd = d >= bnd - bbr ? b->dims[d - (bnd - bbr)] : 1;
        if (ad < 0 || bd < 0)
            return kiln__kerr(ctx, KILN_ERR_SHAPE, "negative dimension");
        if (ad != bd && ad != 1 && bd != 1)
            return kiln__kerr(ctx, KILN_ERR_SHAPE, "batch dimensions cannot broadcast: %lld vs %lld (axis %d)",
                              (long long)ad, (long long)bd, d);
        p->bdims[d] = ad == 1 ? bd : ad;
    }
    int64_t as = 1, bs = 1, nat = 1;
    p->a_natural = true;
    p->b_single = true;
    for (int d = bnd - 1; d >= 0; d--) {
        int64_t ad = d >= bnd - abr ? a->dims[d - (bnd - abr)] : 1;
        int64_t bd = d >= bnd - bbr ? b->dims[d - (bnd - bbr)] : 1;
        p->astr[d] = (ad == 1 && p->bdims[d] != 1) ? 0 : as;
        p->bstr[d] = (bd == 1 && p->bdims[d] != 1) ? 0 : bs;
        if (p->bdims[d] != 1) {
            if (p->astr[d] != nat)
                p->a_natural = false;
            if (p->bstr[d] != 0)
                p->b_single = false;
        }
        as *= ad;
        bs *= bd;
        nat *= p->bdims[d];
    }
    p->nbatch = kiln__shape_numel(bnd, p->bdims);
    if (p->nbatch < 0)
        return kiln__kerr(ctx, KILN_ERR_LIMIT, "batch size overflows");
    p->bnd = bnd;
    p->M = M;
    p->N = N;
    p->K = K;
    int r = 0;
    for (int d = 0; d < bnd; d++)
        p->out_dims[r++] = p->bdims[d];
    if (a->ndim > 1)
        p->out_dims[r++] = M;
    if (b->ndim > 1)
        p->out_dims[r++] = N;
    p->out_ndim = r;
    double work = (double)p->nbatch * (double)M * (double)N * (double)K;
    if (work > LINALG_MAX_WORK)
        return kiln__kerr(ctx, KILN_ERR_LIMIT, "matmul of %.3g multiply-adds exceeds the work limit", work);
    return KILN_OK;
}

/* Element offsets of batch matrix bi in A and B. */
static void mm_offsets(const mm_plan *p, int64_t bi, int64_t *ao, int64_t *bo)
{
    int64_t a = 0, b = 0;
    for (int d = p->bnd - 1; d >= 0; d--) {
        int64_t idx = bi % p->bdims[d];
        bi /= p->bdims[d];
        a += idx * p->astr[d];
        b += idx * p->bstr[d];
    }
    *ao = a * p->M * p->K;
    *bo = b * p->K * p->N;
}

/* ---- float32 ---- */

typedef struct mm_f32_job {
    const mm_plan *p;
    const float *A, *B;
    float *Y;
} mm_f32_job;

static void mm_f32_batches(void *arg, int64_t begin, int64_t end)
{
    const mm_f32_job *j = arg;
    const mm_plan *p = j->p;
    for (int64_t bi = begin; bi < end; bi++) {
        int64_t ao, bo;
        mm_offsets(p, bi, &ao, &bo);
        kiln__sgemm(NULL, 1, false, false, p->M, p->N, p->K, 1.0f, j->A + ao, p->K, j->B + bo, p->N, 0.0f,
                    j->Y + bi * p->M * p->N, p->N);
    }
}

/* op(B) [K, N] packed at build time for this layer (kiln_gemm.bpack), or NULL. */
static const float *bpack_prepared(const kiln_kctx *ctx, int64_t K, int64_t N, bool trans_b)
{
    int64_t dims[4] = {K, N, kiln__sgemm_nr(), trans_b};
    return kiln__prep_check(ctx, KILN_PREP_GEMM_B, KILN_DT_FLOAT32, 4, dims,
                            (uint64_t)kiln__sgemm_bpack_floats(K, N) * sizeof(float));
}

/* bpack: B packed at build time (then B is not read; B 2-D, so one GEMM), or NULL. */
static void mm_f32(kiln_pool *pool, int nt, const mm_plan *p, const float *A, const float *B, const float *bpack,
                   float *Y)
{
    if (p->nbatch == 0 || p->M == 0 || p->N == 0)
        return;
    if (p->K == 0) {
        memset(Y, 0, sizeof(float) * (size_t)(p->nbatch * p->M * p->N));
        return;
    }
    if (p->nbatch == 1 || (p->b_single && p->a_natural)) {
        /* one GEMM: [nbatch*M, K] x [K, N] */
        kiln_gemm g = {.M = p->nbatch * p->M, .N = p->N, .K = p->K, .alpha = 1.0f, .A = A, .lda = p->K, .B = B,
                       .ldb = p->N, .bpack = bpack, .C = Y, .ldc = p->N};
        kiln__sgemm_ex(pool, nt, &g);
        return;
    }
    mm_f32_job j = {p, A, B, Y};
    double per = (double)p->M * (double)p->N * (double)p->K;
    if (nt > 1 && (p->nbatch >= nt || per < (double)(1 << 20))) {
        kiln__parallel_for(pool, nt, p->nbatch, 1, mm_f32_batches, &j);
        return;
    }
    for (int64_t bi = 0; bi < p->nbatch; bi++) {
        int64_t ao, bo;
        mm_offsets(p, bi, &ao, &bo);
        kiln__sgemm(pool, nt, false, false, p->M, p->N, p->K, 1.0f, A + ao, p->K, B + bo, p->N, 0.0f, Y + bi * p->M * p->N,
                    p->N);
    }
}

/* ---- generic typed loops (float64 and integers; Y zero-filled on entry) ---- */

#define MM_LOOP(T)                                                                                          \
    do {                                                                                                    \
        const T *A_ = A;                                                                                    \
        const T *B_ = B;                                                                                    \
        T *Y_ = Y;                                                                                          \
        for (int64_t bi = 0; bi < p->nbatch; bi++) {                                                        \
            int64_t ao, bo;                                                                                 \
            mm_offsets(p, bi, &ao, &bo);                                                                    \
            const T *a_ = A_ + ao, *b_ = B_ + bo;                                                           \
            T *y_ = Y_ + bi * p->M * p->N;                                                                  \
            for (int64_t i = 0; i < p->M; i++) {                                                            \
                T *yr = y_ + i * p->N;                                                                      \
                for (int64_t k = 0; k < p->K; k++) {                                                        \
                    T av = a_[i * p->K + k];                                                                \
                    const T *br = b_ + k * p->N;                                                            \
                    for (int64_t n = 0; n < p->N; n++)                                                      \
                        yr[n] += av * br[n];                                                                \
                }                                                                                           \
            }                                                                                               \
        }                                                                                                   \
    } while (0)

static void mm_generic(const mm_plan *p, kiln_dtype dt, const void *A, const void *B, void *Y)
{
    switch (dt) {
    case KILN_DT_FLOAT64: MM_LOOP(double); return;
    case KILN_DT_INT32:
    case KILN_DT_UINT32: MM_LOOP(uint32_t); return;
    case KILN_DT_INT64:
    case KILN_DT_UINT64: MM_LOOP(uint64_t); return;
    default: {
        /* int8 / uint8 / bool: accumulate in 64 bits, store with the type's wrap-around */
        for (int64_t bi = 0; bi < p->nbatch; bi++) {
            int64_t ao, bo;
            mm_offsets(p, bi, &ao, &bo);
            for (int64_t i = 0; i < p->M; i++)
                for (int64_t n = 0; n < p->N; n++) {
                    uint64_t acc = 0;
                    for (int64_t k = 0; k < p->K; k++)
                        acc += (uint64_t)kiln__get_i64(dt, A, ao + i * p->K + k) *
                               (uint64_t)kiln__get_i64(dt, B, bo + k * p->N + n);
                    kiln__set_i64(dt, Y, bi * p->M * p->N + i * p->N + n, (int64_t)acc);
                }
        }
        return;
    }
    }
}

static kiln_status k_matmul(kiln_kctx *ctx)
{
    if (kiln__lowbit_layer(ctx)) /* FP8 / FP4 / INT4 weights (lowbit.h) */
        return kiln__run_lowbit(ctx, k_matmul);
    if (kiln__mixed_weight(ctx, 1)) /* float32 A, FP16 / BF16 B (qgemm_bf16.h) */
        return kiln__run_mixed(ctx, 1, k_matmul);
    const kiln_tensor *a = kiln__kin(ctx, 0), *b = kiln__kin(ctx, 1);
    if (!a || !b)
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "MatMul needs 2 inputs");
    if (a->dtype != b->dtype)
        return kiln__kerr(ctx, KILN_ERR_DTYPE, "operand dtypes differ (%s vs %s)", kiln_dtype_name(a->dtype),
                          kiln_dtype_name(b->dtype));
    kiln_dtype dt = a->dtype;
    bool ok = dt == KILN_DT_FLOAT32 || dt == KILN_DT_FLOAT64 || is_half(dt) || kiln__dtype_is_int(dt);
    if (!ok)
        return kiln__kerr(ctx, KILN_ERR_DTYPE, "unsupported dtype %s", kiln_dtype_name(dt));
    mm_plan p;
    KILN_TRY(mm_plan_make(ctx, a, b, &p));
    const float *bp = dt == KILN_DT_FLOAT32 && b->ndim == 2 ? bpack_prepared(ctx, p.K, p.N, false) : NULL;
    if (kiln__prep_dropped(b) && !bp)
        return kiln__prep_missing(ctx, 1);
    if (!kiln__dtype_is_float(dt) || dt == KILN_DT_FLOAT64) {
        double work = (double)p.nbatch * (double)p.M * (double)p.N * (double)p.K;
        if (work > LINALG_MAX_WORK_SLOW)
            return kiln__kerr(ctx, KILN_ERR_LIMIT, "matmul of %.3g multiply-adds exceeds the work limit", work);
    }
    KILN_TRY(kiln__kout(ctx, 0, dt, p.out_ndim, p.out_dims));
    kiln_tensor *y = ctx->out[0];
    int64_t ny = numel_of(y);
    if (ny == 0 || p.K == 0)
        return KILN_OK;
    int nt = ctx->nthreads;
    if (dt == KILN_DT_FLOAT32) {
        mm_f32(ctx->pool, nt, &p, a->data, b->data, bp, y->data);
        return KILN_OK;
    }
    if (is_half(dt)) {
        float *fa = to_f32(a, numel_of(a)), *fb = to_f32(b, numel_of(b));
        float *fy = kiln__malloc((size_t)ny * sizeof(float));
        if (!fa || !fb || !fy) {
            kiln__free(fa);
            kiln__free(fb);
            kiln__free(fy);
            return kiln__kerr(ctx, KILN_ERR_NOMEM, "out of memory");
        }
        mm_f32(ctx->pool, nt, &p, fa, fb, NULL, fy);
        from_f32(y, fy, ny);
        kiln__free(fa);
        kiln__free(fb);
        kiln__free(fy);
        return KILN_OK;
    }
    mm_generic(&p, dt, a->data, b->data, y->data);
    return KILN_OK;
}

/* ---- fused float32 MatMul (FusedMatMul fast path) ---- */

/* t has n elements laid out as the trailing dims of (ndim, dims), any leading dims being 1 */
static bool trailing_shape(const kiln_tensor *t, int ndim, const int64_t *dims)
{
    if (t->ndim > ndim || kiln_tensor_numel(t) != kiln__shape_numel(ndim, dims))
        return false;
    for (int d = 0; d < t->ndim; d++)
        if (t->dims[d] != dims[ndim - t->ndim + d])
            return false;
    return true;
}

kiln_status kiln__matmul_fused(kiln_kctx *ctx, const kiln_tensor *bias, const kiln_tensor *res, const kiln_act *act,
                               bool *handled)
{
    const kiln_tensor *a = kiln__kin(ctx, 0), *b = kiln__kin(ctx, 1);
    *handled = false;
    if (!a || !b || a->dtype != KILN_DT_FLOAT32 || b->dtype != KILN_DT_FLOAT32)
        return KILN_OK;
    mm_plan p;
    if (a->ndim < 1 || b->ndim < 1 || a->ndim > KILN_MAX_DIMS || b->ndim > KILN_MAX_DIMS)
        return KILN_OK;
    kiln_status st = mm_plan_make(ctx, a, b, &p);
    if (st != KILN_OK) {
        kiln_clear_last_error(); /* the generic path reports it */
        return KILN_OK;
    }
    if (!(p.nbatch == 1 || (p.b_single && p.a_natural)) || p.K == 0)
        return KILN_OK;
    int64_t n1[1] = {p.N};
    if (bias && !(bias->dtype == KILN_DT_FLOAT32 && trailing_shape(bias, 1, n1)))
        return KILN_OK;
    if (res && !(res->dtype == KILN_DT_FLOAT32 && trailing_shape(res, p.out_ndim, p.out_dims)))
        return KILN_OK;
    const float *bp = b->ndim == 2 ? bpack_prepared(ctx, p.K, p.N, false) : NULL;
    if (kiln__prep_dropped(b) && !bp)
        return KILN_OK;   /* the generic path reports it */
    *handled = true;
    /* every element is written by the GEMM */
    KILN_TRY(kiln__kout_uninit(ctx, 0, KILN_DT_FLOAT32, p.out_ndim, p.out_dims));
    kiln_tensor *y = ctx->out[0];
    if (numel_of(y) == 0)
        return KILN_OK;
    kiln_epi e = {.bias = bias ? bias->data : NULL, .row_bias = false, .res = res ? res->data : NULL, .ldr = p.N};
    if (act)
        e.act = *act;
    kiln_gemm g = {.M = p.nbatch * p.M, .N = p.N, .K = p.K, .alpha = 1.0f, .beta = 0.0f, .A = a->data, .lda = p.K,
                   .B = b->data, .ldb = p.N, .bpack = bp, .C = y->data, .ldc = p.N, .epi = &e};
    kiln__sgemm_ex(ctx->pool, ctx->nthreads, &g);
    return KILN_OK;
}

/* act(Gemm(A, B, C)) for float32 2-D A, B and C absent or a bias over the columns ([N] or
 * [1, N]; with beta == 1): one GEMM with the bias and activation in its epilogue. */
kiln_status kiln__gemm_fused(kiln_kctx *ctx, const kiln_act *act, bool *handled)
{
    const kiln_tensor *a = kiln__kin(ctx, 0), *b = kiln__kin(ctx, 1), *c = kiln__kin(ctx, 2);
    *handled = false;
    if (!a || !b || a->ndim != 2 || b->ndim != 2 || a->dtype != KILN_DT_FLOAT32 || b->dtype != KILN_DT_FLOAT32)
        return KILN_OK;
    bool ta = kiln__attr_i(ctx->node, "transA", 0) != 0, tb = kiln__attr_i(ctx->node, "transB", 0) != 0;
    float alpha = kiln__attr_f(ctx->node, "alpha", 1.0f), beta = kiln__attr_f(ctx->node, "beta", 1.0f);
    int64_t M = ta ? a->dims[1] : a->dims[0], K = ta ? a->dims[0] : a->dims[1];
    int64_t Kb = tb ? b->dims[1] : b->dims[0], N = tb ? b->dims[0] : b->dims[1];
    if (K != Kb || M <= 0 || N <= 0 || K <= 0 || (double)M * (double)N * (double)K > LINALG_MAX_WORK)
        return KILN_OK;
    if (c && !(c->dtype == KILN_DT_FLOAT32 && beta == 1.0f &&
               ((c->ndim == 1 && c->dims[0] == N) || (c->ndim == 2 && c->dims[0] == 1 && c->dims[1] == N))))
        return KILN_OK;
    const float *bp = bpack_prepared(ctx, K, N, tb);
    if (kiln__prep_dropped(b) && !bp)
        return KILN_OK;   /* the generic path reports it */
    *handled = true;
    int64_t dims[2] = {M, N};
    KILN_TRY(kiln__kout_uninit(ctx, 0, KILN_DT_FLOAT32, 2, dims));
    kiln_epi e = {.bias = c ? c->data : NULL, .row_bias = false};
    if (act)
        e.act = *act;
    kiln_gemm g = {.M = M, .N = N, .K = K, .alpha = alpha, .beta = 0.0f, .trans_a = ta, .trans_b = tb, .A = a->data,
                   .lda = ta ? M : K, .B = b->data, .ldb = tb ? K : N, .bpack = bp, .C = ctx->out[0]->data, .ldc = N,
                   .epi = &e};
    kiln__sgemm_ex(ctx->pool, ctx->nthreads, &g);
    return KILN_OK;
}

/* ------------------------------------------------------------------------------------------
 * Gemm: Y = alpha * op(A) * op(B) + beta * C
 * ------------------------------------------------------------------------------------------ */

/* One Gemm's operands and attributes (C broadcast through the strides cm, cn). */
typedef struct gemm_op {
    const kiln_tensor *a, *b, *c;
    kiln_tensor *y;
    bool ta, tb, use_c;
    int64_t M, N, K, cm, cn;
    float alpha, beta;
    const float *bp;   /* B's prepared panels, or NULL */
} gemm_op;

/* float32 (and float16 / bfloat16 through float32): Y = C broadcast, then the GEMM with beta. */
static kiln_status gemm_f32(kiln_kctx *ctx, const gemm_op *o)
{
    const int64_t M = o->M, N = o->N, K = o->K;
    bool half = is_half(o->a->dtype), use_c = o->use_c;
    float *fa = (float *)o->a->data, *fb = (float *)o->b->data, *fc = (float *)(o->c ? o->c->data : NULL),
          *fy = o->y->data;
    if (half) {
        fa = to_f32(o->a, M * K);
        fb = to_f32(o->b, K * N);
        fc = use_c ? to_f32(o->c, numel_of(o->c)) : NULL;
        fy = kiln__malloc((size_t)(M * N) * sizeof(float));
        if (!fa || !fb || !fy || (use_c && !fc)) {
            kiln__free(fa);
            kiln__free(fb);
            kiln__free(fc);
            kiln__free(fy);
            return kiln__kerr(ctx, KILN_ERR_NOMEM, "out of memory");
        }
    }
    float bt = 0.0f;
    if (use_c) {
        for (int64_t m = 0; m < M; m++) {
            float *yr = fy + m * N;
            const float *cr = fc + m * o->cm;
            if (o->cn)
                memcpy(yr, cr, sizeof(float) * (size_t)N);
            else
                for (int64_t n = 0; n < N; n++)
                    yr[n] = cr[0];
        }
        bt = o->beta;
    }
    if (K > 0) {
        kiln_gemm g = {.M = M, .N = N, .K = K, .alpha = o->alpha, .beta = bt, .trans_a = o->ta, .trans_b = o->tb,
                       .A = fa, .lda = o->ta ? M : K, .B = fb, .ldb = o->tb ? K : N, .bpack = o->bp, .C = fy, .ldc = N};
        kiln__sgemm_ex(ctx->pool, ctx->nthreads, &g);
    } else {
        for (int64_t i = 0; i < M * N; i++)
            fy[i] *= bt;
    }
    if (half) {
        from_f32(o->y, fy, M * N);
        kiln__free(fa);
        kiln__free(fb);
        kiln__free(fc);
        kiln__free(fy);
    }
    return KILN_OK;
}

/* float64 in double, integers exactly in 64-bit (or in double when alpha / beta are not 1). */
static void gemm_generic(const gemm_op *o)
{
    const kiln_dtype dt = o->a->dtype;
    const int64_t M = o->M, N = o->N, K = o->K;
    const void *A = o->a->data, *B = o->b->data, *C = o->c ? o->c->data : NULL;
    bool exact_int = kiln__dtype_is_int(dt) && o->alpha == 1.0f && (o->beta == 1.0f || !o->use_c);
    for (int64_t m = 0; m < M; m++)
        for (int64_t n = 0; n < N; n++) {
            int64_t oi = m * N + n, ci = m * o->cm + n * o->cn;
            if (exact_int) {
                uint64_t acc = 0;
                for (int64_t k = 0; k < K; k++) {
                    int64_t ai = o->ta ? k * M + m : m * K + k, bi = o->tb ? n * K + k : k * N + n;
                    acc += (uint64_t)kiln__get_i64(dt, A, ai) * (uint64_t)kiln__get_i64(dt, B, bi);
                }
                if (o->use_c)
                    acc += (uint64_t)kiln__get_i64(dt, C, ci);
                kiln__set_i64(dt, o->y->data, oi, (int64_t)acc);
            } else {
                double acc = 0.0;
                for (int64_t k = 0; k < K; k++) {
                    int64_t ai = o->ta ? k * M + m : m * K + k, bi = o->tb ? n * K + k : k * N + n;
                    acc += kiln__get_f64(dt, A, ai) * kiln__get_f64(dt, B, bi);
                }
                double v = (double)o->alpha * acc;
                if (o->use_c)
                    v += (double)o->beta * kiln__get_f64(dt, C, ci);
                kiln__set_f64(dt, o->y->data, oi, v);
            }
        }
}

/* C's strides along m and n for its unidirectional broadcast to [M, N]. */
static kiln_status gemm_c_strides(kiln_kctx *ctx, gemm_op *o)
{
    const kiln_tensor *c = o->c;
    o->cm = o->cn = 0;
    if (!c)
        return KILN_OK;
    if (c->ndim > 2)
        return kiln__kerr(ctx, KILN_ERR_SHAPE, "C has rank %d > 2", c->ndim);
    int64_t c0 = c->ndim == 2 ? c->dims[0] : 1, c1 = c->ndim >= 1 ? c->dims[c->ndim - 1] : 1;
    if ((c0 != o->M && c0 != 1) || (c1 != o->N && c1 != 1))
        return kiln__kerr(ctx, KILN_ERR_SHAPE, "C [%lld,%lld] cannot broadcast to [%lld,%lld]", (long long)c0,
                          (long long)c1, (long long)o->M, (long long)o->N);
    o->cn = c1 == 1 ? 0 : 1;
    o->cm = c0 == 1 ? 0 : c1;
    return KILN_OK;
}

static kiln_status k_gemm(kiln_kctx *ctx)
{
    if (kiln__lowbit_layer(ctx)) /* FP8 / FP4 / INT4 weights (lowbit.h) */
        return kiln__run_lowbit(ctx, k_gemm);
    if (kiln__mixed_weight(ctx, 1)) /* float32 A, FP16 / BF16 B (qgemm_bf16.h) */
        return kiln__run_mixed(ctx, 1, k_gemm);
    gemm_op o = {.a = kiln__kin(ctx, 0), .b = kiln__kin(ctx, 1), .c = kiln__kin(ctx, 2)};
    const kiln_tensor *a = o.a, *b = o.b, *c = o.c;
    if (!a || !b)
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "Gemm needs inputs A and B");
    if (a->ndim != 2 || b->ndim != 2)
        return kiln__kerr(ctx, KILN_ERR_SHAPE, "A and B must be 2-D (got rank %d and %d)", a->ndim, b->ndim);
    if (a->dtype != b->dtype || (c && c->dtype != a->dtype))
        return kiln__kerr(ctx, KILN_ERR_DTYPE, "operand dtypes differ");
    kiln_dtype dt = a->dtype;
    bool ok = dt == KILN_DT_FLOAT32 || dt == KILN_DT_FLOAT64 || is_half(dt) || kiln__dtype_is_int(dt);
    if (!ok)
        return kiln__kerr(ctx, KILN_ERR_DTYPE, "unsupported dtype %s", kiln_dtype_name(dt));
    o.ta = kiln__attr_i(ctx->node, "transA", 0) != 0, o.tb = kiln__attr_i(ctx->node, "transB", 0) != 0;
    o.alpha = kiln__attr_f(ctx->node, "alpha", 1.0f), o.beta = kiln__attr_f(ctx->node, "beta", 1.0f);
    o.M = o.ta ? a->dims[1] : a->dims[0], o.K = o.ta ? a->dims[0] : a->dims[1];
    int64_t Kb = o.tb ? b->dims[1] : b->dims[0];
    o.N = o.tb ? b->dims[0] : b->dims[1];
    if (o.K != Kb)
        return kiln__kerr(ctx, KILN_ERR_SHAPE, "inner dimensions differ: %lld vs %lld", (long long)o.K, (long long)Kb);
    o.bp = dt == KILN_DT_FLOAT32 ? bpack_prepared(ctx, o.K, o.N, o.tb) : NULL;
    if (kiln__prep_dropped(b) && !o.bp)
        return kiln__prep_missing(ctx, 1);
    KILN_TRY(gemm_c_strides(ctx, &o));
    double work = (double)o.M * (double)o.N * (double)o.K;
    if (work > (dt == KILN_DT_FLOAT32 || is_half(dt) ? LINALG_MAX_WORK : LINALG_MAX_WORK_SLOW))
        return kiln__kerr(ctx, KILN_ERR_LIMIT, "gemm of %.3g multiply-adds exceeds the work limit", work);
    int64_t dims[2] = {o.M, o.N};
    KILN_TRY(kiln__kout(ctx, 0, dt, 2, dims));
    o.y = ctx->out[0];
    if (o.M == 0 || o.N == 0)
        return KILN_OK;
    o.use_c = c && numel_of(c) > 0 && o.beta != 0.0f;
    if (dt == KILN_DT_FLOAT32 || is_half(dt))
        return gemm_f32(ctx, &o);
    gemm_generic(&o);
    return KILN_OK;
}

/* ------------------------------------------------------------------------------------------
 * Einsum (generic loop over all label combinations)
 * ------------------------------------------------------------------------------------------ */

#define ES_LETTERS 52
#define ES_MAX_LABELS (ES_LETTERS + KILN_MAX_DIMS)
#define ES_MAX_OPS 64
#define ES_MAX_TERM 16

static int es_letter(char c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return 26 + (c - 'a');
    return -1;
}

typedef struct es_term {
    int n;                    /* number of entries */
    int lab[ES_MAX_TERM];     /* letter index, or -1 for the ellipsis */
    bool has_ell;
} es_term;

/* Parses one term (letters and at most one "..."), ignoring spaces. */
static kiln_status es_parse_term(const kiln_kctx *ctx, const char *s, size_t len, es_term *t)
{
    memset(t, 0, sizeof *t);
    for (size_t i = 0; i < len;) {
        char ch = s[i];
        if (ch == ' ') {
            i++;
            continue;
        }
        if (ch == '.') {
            if (i + 3 > len || s[i + 1] != '.' || s[i + 2] != '.' || t->has_ell)
                return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "bad ellipsis in equation");
            if (t->n >= ES_MAX_TERM)
                return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "equation term too long");
            t->has_ell = true;
            t->lab[t->n++] = -1;
            i += 3;
            continue;
        }
        int l = es_letter(ch);
        if (l < 0)
            return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "invalid character '%c' in equation", ch);
        if (t->n >= ES_MAX_TERM)
            return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "equation term too long");
        t->lab[t->n++] = l;
        i++;
    }
    return KILN_OK;
}

/* Label of every dimension of an operand (the ellipsis expanded, right-aligned). */
static void es_dim_labels(const es_term *t, int ell, int ell_rank, int *dl)
{
    int d = 0;
    for (int j = 0; j < t->n; j++) {
        if (t->lab[j] < 0) {
            for (int q = 0; q < ell; q++)
                dl[d++] = ES_LETTERS + ell_rank - ell + q;
        } else {
            dl[d++] = t->lab[j];
        }
    }
}

/* Copies src (strided) into dst (contiguous, dims in order): dst[i] = src[sum idx_d * sstr_d]. */
static void es_permute_f32(float *dst, const float *src, int nd, const int64_t *dims, const int64_t *sstr)
{
    int64_t n = kiln__shape_numel(nd, dims);
    if (n <= 0)
        return;
    if (nd == 0) {
        dst[0] = src[0];
        return;
    }
    int64_t idx[ES_MAX_TERM] = {0};
    int64_t off = 0, L = dims[nd - 1], ls = sstr[nd - 1];
    for (int64_t i = 0; i < n; i += L) {
        const float *sp = src + off;
        for (int64_t j = 0; j < L; j++)
            dst[i + j] = sp[j * ls];
        for (int d = nd - 2; d >= 0; d--) {
            if (++idx[d] < dims[d]) {
                off += sstr[d];
                break;
            }
            off -= sstr[d] * (dims[d] - 1);
            idx[d] = 0;
        }
    }
}

typedef struct es_mm_job {
    bool ta, tb;
    int64_t M, N, K;
    const float *A, *B;
    float *Y;
} es_mm_job;

static void es_mm_batches(void *arg, int64_t begin, int64_t end)
{
    const es_mm_job *j = arg;
    for (int64_t b = begin; b < end; b++)
        kiln__sgemm(NULL, 1, j->ta, j->tb, j->M, j->N, j->K, 1.0f, j->A + b * j->M * j->K, j->ta ? j->M : j->K,
                    j->B + b * j->K * j->N, j->tb ? j->K : j->N, 0.0f, j->Y + b * j->M * j->N, j->N);
}

/* The batched GEMM an Einsum of two operands reduces to: label groups (batch: in both operands
 * and the output; m: first operand and output; n: second and output; k: summed over both), their
 * sizes, and each operand's position and stride per label. */
typedef struct es_mm_plan {
    int pos[2][ES_MAX_LABELS];          /* dim of each label in operand i, -1 if absent */
    int64_t nstr[2][KILN_MAX_DIMS];     /* natural (contiguous) strides of each operand */
    int bl[ES_MAX_LABELS], ml[ES_MAX_LABELS], nl[ES_MAX_LABELS], kl[ES_MAX_LABELS];
    int nb, nm, nn, nk;
    int64_t B, M, N, K;
    /* wanted layouts: A [b, m, k] or [b, k, m]; B [b, k, n] or [b, n, k]; Y [b, m, n] */
    int wa[2][KILN_MAX_DIMS], wb[2][KILN_MAX_DIMS], wy[KILN_MAX_DIMS];
    int na, nb2, ny;
} es_mm_plan;

/* labels into b/m/n/k groups; false when the equation is not a plain batched GEMM */
static bool es_mm_classify(es_mm_plan *p, const kiln_tensor *const t[2], const int *const dl[2], const int64_t *size,
                           const int *out_lab, int n_out)
{
    int opos[ES_MAX_LABELS];
    for (int l = 0; l < ES_MAX_LABELS; l++)
        p->pos[0][l] = p->pos[1][l] = opos[l] = -1;
    for (int j = 0; j < n_out; j++)
        opos[out_lab[j]] = j;
    for (int i = 0; i < 2; i++) {
        int64_t s = 1;
        for (int d = t[i]->ndim - 1; d >= 0; d--) {
            int l = dl[i][d];
            if (p->pos[i][l] >= 0 || t[i]->dims[d] != size[l])
                return false;
            p->pos[i][l] = d;
            p->nstr[i][d] = s;
            s *= t[i]->dims[d];
        }
    }
    for (int l = 0; l < ES_MAX_LABELS; l++)
        if ((p->pos[0][l] >= 0 || p->pos[1][l] >= 0) && opos[l] < 0 && !(p->pos[0][l] >= 0 && p->pos[1][l] >= 0))
            return false; /* summed over one operand only */
    p->nb = p->nm = p->nn = p->nk = 0;
    for (int j = 0; j < n_out; j++) {
        int l = out_lab[j];
        if (p->pos[0][l] >= 0 && p->pos[1][l] >= 0)
            p->bl[p->nb++] = l;
        else if (p->pos[0][l] >= 0)
            p->ml[p->nm++] = l;
        else if (p->pos[1][l] >= 0)
            p->nl[p->nn++] = l;
        else
            return false;
    }
    for (int d = 0; d < t[0]->ndim; d++)
        if (opos[dl[0][d]] < 0)
            p->kl[p->nk++] = dl[0][d];
    p->B = p->M = p->N = p->K = 1;
    for (int q = 0; q < p->nb; q++)
        p->B *= size[p->bl[q]];
    for (int q = 0; q < p->nm; q++)
        p->M *= size[p->ml[q]];
    for (int q = 0; q < p->nn; q++)
        p->N *= size[p->nl[q]];
    for (int q = 0; q < p->nk; q++)
        p->K *= size[p->kl[q]];
    return true;
}

/* the label orders of A (both transpositions), B (both) and Y; false when they miss an operand dim */
static bool es_mm_layouts(es_mm_plan *p, const kiln_tensor *const t[2], int n_out)
{
    int na = 0, nb2 = 0, ny = 0;
    for (int q = 0; q < p->nb; q++) {
        p->wa[0][na] = p->wa[1][na] = p->bl[q];
        na++;
        p->wb[0][nb2] = p->wb[1][nb2] = p->bl[q];
        nb2++;
        p->wy[ny++] = p->bl[q];
    }
    for (int q = 0; q < p->nm; q++) {
        p->wa[0][na + q] = p->ml[q];
        p->wa[1][na + p->nk + q] = p->ml[q];
        p->wy[ny++] = p->ml[q];
    }
    for (int q = 0; q < p->nk; q++) {
        p->wa[0][na + p->nm + q] = p->kl[q];
        p->wa[1][na + q] = p->kl[q];
        p->wb[0][nb2 + q] = p->kl[q];
        p->wb[1][nb2 + p->nn + q] = p->kl[q];
    }
    for (int q = 0; q < p->nn; q++) {
        p->wb[0][nb2 + p->nk + q] = p->nl[q];
        p->wb[1][nb2 + q] = p->nl[q];
        p->wy[ny++] = p->nl[q];
    }
    p->na = na + p->nm + p->nk;
    p->nb2 = nb2 + p->nn + p->nk;
    p->ny = ny;
    return p->na == t[0]->ndim && p->nb2 == t[1]->ndim && p->ny == n_out;
}

/* which of the two wanted layouts `labels` already has (*trans = it is the second); false: neither */
static bool es_mm_stored_as(const int *labels, int n, const int want[2][KILN_MAX_DIMS], bool *trans)
{
    for (int v = 0; v < 2; v++) {
        bool same = true;
        for (int d = 0; d < n; d++)
            if (labels[d] != want[v][d])
                same = false;
        if (same) {
            *trans = v == 1;
            return true;
        }
    }
    return false;
}

/* a copy of operand i in wanted layout `want` (numel elements), or NULL when out of memory */
static float *es_mm_gather(const es_mm_plan *p, int i, const kiln_tensor *t, const int *want, int n, const int64_t *size,
                           int64_t numel)
{
    int64_t dims[KILN_MAX_DIMS], str[KILN_MAX_DIMS];
    for (int d = 0; d < n; d++) {
        dims[d] = size[want[d]];
        str[d] = p->nstr[i][p->pos[i][want[d]]];
    }
    float *buf = kiln__malloc(sizeof(float) * (size_t)numel);
    if (buf)
        es_permute_f32(buf, t->data, n, dims, str);
    return buf;
}

/* Y[b] = op(A[b]) op(B[b]) for every batch: one GEMM, batches across threads, or GEMMs in turn */
static void es_mm_run(kiln_kctx *ctx, const es_mm_job *j, int64_t B)
{
    int nt = ctx->nthreads;
    int64_t M = j->M, N = j->N, K = j->K;
    if (B == 1) {
        kiln__sgemm(ctx->pool, nt, j->ta, j->tb, M, N, K, 1.0f, j->A, j->ta ? M : K, j->B, j->tb ? K : N, 0.0f, j->Y, N);
    } else if (nt > 1 && (B >= nt || (double)M * (double)N * (double)K < (double)(1 << 20))) {
        kiln__parallel_for(ctx->pool, nt, B, 1, es_mm_batches, (void *)j);
    } else {
        for (int64_t b = 0; b < B; b++)
            kiln__sgemm(ctx->pool, nt, j->ta, j->tb, M, N, K, 1.0f, j->A + b * M * K, j->ta ? M : K, j->B + b * K * N,
                        j->tb ? K : N, 0.0f, j->Y + b * M * N, N);
    }
}

/* Two float32 operands without diagonals, broadcasting or one-sided reductions: a batched
 * GEMM after (possibly no-op) permutations. *done = false when the equation does not fit. */
static kiln_status es_fast2(kiln_kctx *ctx, const int *const dl[2], const int64_t *size, const int *out_lab,
                            int n_out, const int64_t *odims, bool *done)
{
    *done = false;
    const kiln_tensor *t[2] = {kiln__kin(ctx, 0), kiln__kin(ctx, 1)};
    es_mm_plan p;
    if (!es_mm_classify(&p, t, dl, size, out_lab, n_out))
        return KILN_OK;
    if ((double)p.B * (double)p.M * (double)p.N * (double)p.K > LINALG_MAX_WORK)
        return kiln__kerr(ctx, KILN_ERR_LIMIT, "einsum exceeds the work limit");
    if (!es_mm_layouts(&p, t, n_out))
        return KILN_OK;
    /* pick a layout that matches the operand as stored, else copy to the first one */
    bool ta = false, tb = false, copy_y = false;
    bool copy_a = !es_mm_stored_as(dl[0], p.na, p.wa, &ta), copy_b = !es_mm_stored_as(dl[1], p.nb2, p.wb, &tb);
    for (int d = 0; d < p.ny; d++)
        if (p.wy[d] != out_lab[d])
            copy_y = true;
    KILN_TRY(kiln__kout(ctx, 0, KILN_DT_FLOAT32, n_out, odims));
    *done = true;
    kiln_tensor *y = ctx->out[0];
    float *abuf = NULL, *bbuf = NULL, *ybuf = NULL;
    kiln_status st = KILN_OK;
    if (copy_a && !(abuf = es_mm_gather(&p, 0, t[0], p.wa[0], p.na, size, p.B * p.M * p.K)))
        goto nomem;
    if (copy_b && !(bbuf = es_mm_gather(&p, 1, t[1], p.wb[0], p.nb2, size, p.B * p.K * p.N)))
        goto nomem;
    if (copy_y && !(ybuf = kiln__malloc(sizeof(float) * (size_t)(p.B * p.M * p.N))))
        goto nomem;
    es_mm_job j = {ta, tb, p.M, p.N, p.K, copy_a ? abuf : t[0]->data, copy_b ? bbuf : t[1]->data, copy_y ? ybuf : y->data};
    es_mm_run(ctx, &j, p.B);
    if (copy_y) {
        /* ybuf is [b, m, n] (label order wy); the output wants out_lab order */
        int64_t ystr[ES_MAX_LABELS];
        int64_t s = 1;
        for (int d = p.ny - 1; d >= 0; d--) {
            ystr[p.wy[d]] = s;
            s *= size[p.wy[d]];
        }
        int64_t str[KILN_MAX_DIMS];
        for (int d = 0; d < n_out; d++)
            str[d] = ystr[out_lab[d]];
        es_permute_f32(y->data, ybuf, n_out, odims, str);
    }
    goto done;
nomem:
    st = kiln__kerr(ctx, KILN_ERR_NOMEM, "out of memory");
done:
    kiln__free(abuf);
    kiln__free(bbuf);
    kiln__free(ybuf);
    return st;
}

/* An Einsum equation resolved against its inputs: terms, label sizes, output labels and the
 * loop order (output labels, then the reduced ones). Labels ES_LETTERS.. are ellipsis dims. */
typedef struct es_eq {
    int nops;
    kiln_dtype dt;
    es_term terms[ES_MAX_OPS], outt;
    bool arrow;
    int64_t size[ES_MAX_LABELS];   /* -1: label unused */
    int count[ES_MAX_LABELS];      /* occurrences in the inputs */
    int ell_rank, ell_of[ES_MAX_OPS];
    int out_lab[ES_MAX_LABELS], n_out;
    bool in_out[ES_MAX_LABELS];
    int loop[ES_MAX_LABELS], nl;
} es_eq;

static char es_label_char(int l) { return (char)(l < 26 ? 'A' + l : 'a' + (l - 26)); }

/* Inputs present, one supported dtype. */
static kiln_status es_check_inputs(kiln_kctx *ctx, es_eq *q)
{
    q->nops = ctx->n_in;
    if (q->nops < 1 || q->nops > ES_MAX_OPS)
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "Einsum needs 1..%d inputs (got %d)", ES_MAX_OPS, q->nops);
    for (int i = 0; i < q->nops; i++) {
        const kiln_tensor *t = kiln__kin(ctx, i);
        if (!t)
            return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "input %d is missing", i);
        if (i == 0)
            q->dt = t->dtype;
        else if (t->dtype != q->dt)
            return kiln__kerr(ctx, KILN_ERR_DTYPE, "input dtypes differ");
    }
    kiln_dtype dt = q->dt;
    if (!(dt == KILN_DT_FLOAT32 || dt == KILN_DT_FLOAT64 || is_half(dt) || kiln__dtype_is_int(dt) ||
          dt == KILN_DT_BOOL))
        return kiln__kerr(ctx, KILN_ERR_DTYPE, "unsupported dtype %s", kiln_dtype_name(dt));
    return KILN_OK;
}

/* Splits "t0,t1,...->out" into its terms, one per input. */
static kiln_status es_split(kiln_kctx *ctx, const char *eq, es_eq *q)
{
    const char *arrow = strstr(eq, "->");
    size_t lhs_len = arrow ? (size_t)(arrow - eq) : strlen(eq);
    int nt = 0;
    size_t st = 0;
    for (size_t i = 0; i <= lhs_len; i++) {
        if (i == lhs_len || eq[i] == ',') {
            if (nt >= q->nops)
                return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "equation has more terms than the %d inputs", q->nops);
            KILN_TRY(es_parse_term(ctx, eq + st, i - st, &q->terms[nt]));
            nt++;
            st = i + 1;
        }
    }
    if (nt != q->nops)
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "equation has %d terms but there are %d inputs", nt, q->nops);
    q->arrow = arrow != NULL;
    if (arrow) {
        const char *o = arrow + 2;
        if (strstr(o, "->") || strchr(o, ','))
            return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "malformed equation output");
        KILN_TRY(es_parse_term(ctx, o, strlen(o), &q->outt));
    }
    return KILN_OK;
}

/* Size s of one input dim for label l: equal sizes, or 1 broadcasting. */
static kiln_status es_size_label(kiln_kctx *ctx, es_eq *q, int l, int64_t s)
{
    if (s < 0)
        return kiln__kerr(ctx, KILN_ERR_SHAPE, "negative dimension");
    if (q->size[l] < 0 || q->size[l] == 1)
        q->size[l] = s;
    else if (s != q->size[l] && s != 1)
        return l >= ES_LETTERS ? kiln__kerr(ctx, KILN_ERR_SHAPE, "ellipsis dimensions cannot broadcast")
                               : kiln__kerr(ctx, KILN_ERR_SHAPE, "label '%c' has inconsistent sizes %lld and %lld",
                                            es_label_char(l), (long long)q->size[l], (long long)s);
    return KILN_OK;
}

/* The ellipsis rank of every input and the size of every label. */
static kiln_status es_label_sizes(kiln_kctx *ctx, es_eq *q)
{
    for (int l = 0; l < ES_MAX_LABELS; l++) {
        q->size[l] = -1;
        q->count[l] = 0;
    }
    q->ell_rank = 0;
    for (int i = 0; i < q->nops; i++) {
        const kiln_tensor *t = kiln__kin(ctx, i);
        int nlet = q->terms[i].n - (q->terms[i].has_ell ? 1 : 0);
        int e = t->ndim - nlet;
        if (e < 0 || (!q->terms[i].has_ell && e != 0))
            return kiln__kerr(ctx, KILN_ERR_SHAPE, "term %d has %d labels but input rank is %d", i, nlet, t->ndim);
        q->ell_of[i] = e;
        if (e > q->ell_rank)
            q->ell_rank = e;
    }
    for (int i = 0; i < q->nops; i++) {
        const kiln_tensor *t = kiln__kin(ctx, i);
        const es_term *tm = &q->terms[i];
        int d = 0;
        for (int j = 0; j < tm->n; j++) {
            if (tm->lab[j] < 0) {
                for (int e = 0; e < q->ell_of[i]; e++, d++)
                    KILN_TRY(es_size_label(ctx, q, ES_LETTERS + q->ell_rank - q->ell_of[i] + e, t->dims[d]));
                continue;
            }
            q->count[tm->lab[j]]++;
            KILN_TRY(es_size_label(ctx, q, tm->lab[j], t->dims[d++]));
        }
    }
    for (int l = ES_LETTERS; l < ES_LETTERS + q->ell_rank; l++)
        if (q->size[l] < 0)
            q->size[l] = 1;
    return KILN_OK;
}

static void es_add_out(es_eq *q, int l)
{
    q->out_lab[q->n_out++] = l;
    q->in_out[l] = true;
}

/* Output labels (explicit, or the implicit ellipsis + once-seen letters in order), then the loop
 * order: output labels, then the reduced ones. */
static kiln_status es_output_labels(kiln_kctx *ctx, es_eq *q)
{
    q->n_out = 0;
    memset(q->in_out, 0, sizeof q->in_out);
    if (q->arrow) {
        for (int j = 0; j < q->outt.n; j++) {
            int l = q->outt.lab[j];
            if (l < 0) {
                for (int e = 0; e < q->ell_rank; e++)
                    es_add_out(q, ES_LETTERS + e);
                continue;
            }
            if (q->count[l] == 0)
                return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "output label '%c' does not appear in the inputs",
                                  es_label_char(l));
            if (q->in_out[l])
                return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "output label repeated");
            es_add_out(q, l);
        }
    } else {
        for (int e = 0; e < q->ell_rank; e++)
            es_add_out(q, ES_LETTERS + e);
        for (int l = 0; l < ES_LETTERS; l++)
            if (q->count[l] == 1)
                es_add_out(q, l);
    }
    if (q->n_out > KILN_MAX_DIMS)
        return kiln__kerr(ctx, KILN_ERR_SHAPE, "output rank %d exceeds %d", q->n_out, KILN_MAX_DIMS);
    q->nl = 0;
    for (int j = 0; j < q->n_out; j++)
        q->loop[q->nl++] = q->out_lab[j];
    for (int l = 0; l < ES_LETTERS + q->ell_rank; l++)
        if (q->size[l] >= 0 && !q->in_out[l])
            q->loop[q->nl++] = l;
    return KILN_OK;
}

/* Input i as doubles (float dtypes) or int64 (the others), and its stride for each loop label
 * (diagonals add up; broadcast dims of size 1 have stride 0). */
static kiln_status es_stage_input(kiln_kctx *ctx, const es_eq *q, int i, bool is_f, void **vals,
                                  int64_t *str)
{
    const kiln_tensor *t = kiln__kin(ctx, i);
    int64_t n = numel_of(t);
    *vals = kiln__malloc((size_t)(n > 0 ? n : 1) * 8);
    if (!*vals)
        return kiln__kerr(ctx, KILN_ERR_NOMEM, "out of memory");
    for (int64_t e = 0; e < n; e++) {
        if (is_f)
            ((double *)*vals)[e] = kiln__get_f64(q->dt, t->data, e);
        else
            ((int64_t *)*vals)[e] = kiln__get_i64(q->dt, t->data, e);
    }
    int dl[KILN_MAX_DIMS];
    es_dim_labels(&q->terms[i], q->ell_of[i], q->ell_rank, dl);
    int64_t s = 1, lstr[ES_MAX_LABELS] = {0};
    for (int d = t->ndim - 1; d >= 0; d--) {
        if (!(t->dims[d] == 1 && q->size[dl[d]] != 1))
            lstr[dl[d]] += s;
        s *= t->dims[d];
    }
    for (int j = 0; j < q->nl; j++)
        str[j] = lstr[q->loop[j]];
    return KILN_OK;
}

/* The generic path: for each output element, the sum over the reduced labels of the product of
 * the operands, walked with an odometer over the loop labels (double or wrapping int64). */
static void es_loop(const es_eq *q, bool is_f, void *const *vals, const int64_t (*str)[ES_MAX_LABELS], int64_t onum,
                    int64_t rnum, kiln_tensor *y)
{
    int nops = q->nops, nl = q->nl;
    int64_t idx[ES_MAX_LABELS] = {0}, off[ES_MAX_OPS] = {0}, lsz[ES_MAX_LABELS];
    for (int j = 0; j < nl; j++)
        lsz[j] = q->size[q->loop[j]];
    for (int64_t o = 0; o < onum; o++) {
        double accf = 0.0;
        uint64_t acci = 0;
        for (int64_t r = 0; r < rnum; r++) {
            if (is_f) {
                double pr = 1.0;
                for (int i = 0; i < nops; i++)
                    pr *= ((const double *)vals[i])[off[i]];
                accf += pr;
            } else {
                uint64_t pr = 1;
                for (int i = 0; i < nops; i++)
                    pr *= (uint64_t)((const int64_t *)vals[i])[off[i]];
                acci += pr;
            }
            /* advance the odometer */
            for (int j = nl - 1; j >= 0; j--) {
                if (++idx[j] < lsz[j]) {
                    for (int i = 0; i < nops; i++)
                        off[i] += str[i][j];
                    break;
                }
                idx[j] = 0;
                for (int i = 0; i < nops; i++)
                    off[i] -= str[i][j] * (lsz[j] - 1);
            }
        }
        if (is_f)
            kiln__set_f64(q->dt, y->data, o, accf);
        else
            kiln__set_i64(q->dt, y->data, o, (int64_t)acci);
    }
}

static kiln_status k_einsum(kiln_kctx *ctx)
{
    const char *eq = kiln__attr_s(ctx->node, "equation", NULL);
    if (!eq)
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "missing 'equation' attribute");
    es_eq *q = kiln__calloc(1, sizeof *q);
    if (!q)
        return kiln__kerr(ctx, KILN_ERR_NOMEM, "out of memory");
    int64_t (*str)[ES_MAX_LABELS] = NULL;
    void **vals = NULL;
    kiln_status st = es_check_inputs(ctx, q);
    if (st == KILN_OK)
        st = es_split(ctx, eq, q);
    if (st == KILN_OK)
        st = es_label_sizes(ctx, q);
    if (st == KILN_OK)
        st = es_output_labels(ctx, q);
    if (st != KILN_OK)
        goto done;
    int nops = q->nops;
    int64_t odims[KILN_MAX_DIMS];
    for (int j = 0; j < q->n_out; j++)
        odims[j] = q->size[q->out_lab[j]];
    int64_t onum = kiln__shape_numel(q->n_out, odims);
    double red = 1.0;
    bool empty_red = false;
    for (int j = q->n_out; j < q->nl; j++) {
        red *= (double)q->size[q->loop[j]];
        empty_red = empty_red || q->size[q->loop[j]] == 0;
    }
    if (onum < 0) {
        st = kiln__kerr(ctx, KILN_ERR_LIMIT, "output size overflows");
        goto done;
    }
    if (q->dt == KILN_DT_FLOAT32 && nops == 2 && onum > 0 && !empty_red) {
        int dl0[KILN_MAX_DIMS], dl1[KILN_MAX_DIMS];
        es_dim_labels(&q->terms[0], q->ell_of[0], q->ell_rank, dl0);
        es_dim_labels(&q->terms[1], q->ell_of[1], q->ell_rank, dl1);
        const int *dls[2] = {dl0, dl1};
        bool fast = false;
        st = es_fast2(ctx, dls, q->size, q->out_lab, q->n_out, odims, &fast);
        if (st != KILN_OK || fast)
            goto done;
    }
    double work = (double)onum * red * (double)nops;
    if (work > 1.0e9) {
        st = kiln__kerr(ctx, KILN_ERR_LIMIT, "einsum of %.3g operations exceeds the work limit", work);
        goto done;
    }
    st = kiln__kout(ctx, 0, q->dt, q->n_out, odims);
    if (st != KILN_OK || onum == 0 || empty_red)
        goto done;
    str = kiln__calloc((size_t)nops, sizeof *str);
    vals = kiln__calloc((size_t)nops, sizeof(void *));
    if (!str || !vals) {
        st = kiln__kerr(ctx, KILN_ERR_NOMEM, "out of memory");
        goto done;
    }
    bool is_f = kiln__dtype_is_float(q->dt);
    for (int i = 0; i < nops && st == KILN_OK; i++)
        st = es_stage_input(ctx, q, i, is_f, &vals[i], str[i]);
    if (st == KILN_OK)
        es_loop(q, is_f, vals, (const int64_t(*)[ES_MAX_LABELS])str, onum, (int64_t)red, ctx->out[0]);
done:
    if (vals)
        for (int i = 0; i < q->nops; i++)
            kiln__free(vals[i]);
    kiln__free(vals);
    kiln__free(str);
    kiln__free(q);
    return st;
}

/* ------------------------------------------------------------------------------------------
 * MatMulInteger / QLinearMatMul
 * ------------------------------------------------------------------------------------------ */

/* Reads a zero point that is a scalar, or 1-D with `n` entries (per row of A / column of B).
 * Fills zp[0..n) (zp has n entries). */
static kiln_status read_zp(const kiln_kctx *ctx, const kiln_tensor *z, kiln_dtype want, int64_t n, int32_t *zp,
                           const char *what)
{
    for (int64_t i = 0; i < n; i++)
        zp[i] = 0;
    if (!z)
        return KILN_OK;
    if (z->dtype != want)
        return kiln__kerr(ctx, KILN_ERR_DTYPE, "%s has dtype %s, expected %s", what, kiln_dtype_name(z->dtype),
                          kiln_dtype_name(want));
    int64_t zn = numel_of(z);
    if (zn == 1) {
        int32_t v = (int32_t)kiln__get_i64(z->dtype, z->data, 0);
        for (int64_t i = 0; i < n; i++)
            zp[i] = v;
        return KILN_OK;
    }
    if (zn == n) {
        for (int64_t i = 0; i < n; i++)
            zp[i] = (int32_t)kiln__get_i64(z->dtype, z->data, i);
        return KILN_OK;
    }
    return kiln__kerr(ctx, KILN_ERR_UNSUPPORTED, "%s must be a scalar or have %lld elements", what, (long long)n);
}

static kiln_status read_scale(const kiln_kctx *ctx, const kiln_tensor *s, int64_t n, float *out, const char *what)
{
    if (!s)
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "%s is missing", what);
    if (s->dtype != KILN_DT_FLOAT32 && s->dtype != KILN_DT_FLOAT16 && s->dtype != KILN_DT_FLOAT64 &&
        s->dtype != KILN_DT_BFLOAT16)
        return kiln__kerr(ctx, KILN_ERR_DTYPE, "%s must be float", what);
    int64_t sn = numel_of(s);
    if (sn == 1) {
        float v = (float)kiln__get_f64(s->dtype, s->data, 0);
        for (int64_t i = 0; i < n; i++)
            out[i] = v;
        return KILN_OK;
    }
    if (sn == n) {
        for (int64_t i = 0; i < n; i++)
            out[i] = (float)kiln__get_f64(s->dtype, s->data, i);
        return KILN_OK;
    }
    return kiln__kerr(ctx, KILN_ERR_UNSUPPORTED, "%s must be a scalar or have %lld elements", what, (long long)n);
}

typedef struct imm_job {
    const mm_plan *p;
    const int16_t *A, *B;   /* zero points subtracted; B transposed per batch matrix: [K] rows of N */
    int32_t *Y;
    int64_t nbb;            /* number of distinct B matrices */
} imm_job;

static void imm_rows(void *arg, int64_t begin, int64_t end)
{
    const imm_job *j = arg;
    const mm_plan *p = j->p;
    int64_t M = p->M, N = p->N, K = p->K;
    int32_t *acc = kiln__malloc((size_t)(N > 0 ? N : 1) * sizeof(int32_t));
    for (int64_t r = begin; r < end; r++) {
        int64_t bi = r / M, i = r % M;
        int64_t ao, bo;
        mm_offsets(p, bi, &ao, &bo);
        const int16_t *ar = j->A + ao + i * K;
        const int16_t *b = j->B + bo;
        uint32_t *yr = (uint32_t *)(j->Y + bi * M * N + i * N);
        if (acc) {
            for (int64_t n = 0; n < N; n++)
                acc[n] = 0;
            for (int64_t k = 0; k < K; k++) {
                int32_t av = ar[k];
                const int16_t *br = b + k * N;
                for (int64_t n = 0; n < N; n++)
                    acc[n] += av * br[n];   /* |a*b| <= 2^16; K bounded below */
            }
            for (int64_t n = 0; n < N; n++)
                yr[n] = (uint32_t)acc[n];
        } else {
            for (int64_t n = 0; n < N; n++) {
                uint32_t s = 0;
                for (int64_t k = 0; k < K; k++)
                    s += (uint32_t)((int32_t)ar[k] * (int32_t)b[k * N + n]);
                yr[n] = s;
            }
        }
    }
    kiln__free(acc);
}

/* Integer matmul through sgemm where float32 is exact: with |a| <= amax and |b| <= bmax,
 * every partial sum over a K-chunk of (2^24 / (amax * bmax)) terms is an integer below 2^24,
 * so the float result is exact whatever the summation order; chunks are added in int32.
 * Returns false (nothing written) when not applicable or out of memory. */
static bool imm_via_sgemm(kiln_pool *pool, int nt, const mm_plan *p, const int16_t *A, int64_t na, const int16_t *B, int64_t nb,
                          int32_t *Y)
{
    int32_t amax = 0, bmax = 0;
    for (int64_t e = 0; e < na; e++) {
        int32_t v = A[e] < 0 ? -A[e] : A[e];
        if (v > amax)
            amax = v;
    }
    for (int64_t e = 0; e < nb; e++) {
        int32_t v = B[e] < 0 ? -B[e] : B[e];
        if (v > bmax)
            bmax = v;
    }
    if (amax == 0 || bmax == 0)
        return true; /* Y is all zeros */
    int64_t chunk = ((int64_t)1 << 24) / ((int64_t)amax * bmax);
    if (chunk < 64 || (double)p->M * (double)p->N * (double)p->K < 65536.0)
        return false;
    bool merged = p->nbatch == 1 || (p->b_single && p->a_natural);
    int64_t M = merged ? p->nbatch * p->M : p->M, nbat = merged ? 1 : p->nbatch, N = p->N, K = p->K;
    float *fa = kiln__malloc(sizeof(float) * (size_t)na);
    float *fb = kiln__malloc(sizeof(float) * (size_t)nb);
    float *fy = kiln__malloc(sizeof(float) * (size_t)(M * N));
    if (!fa || !fb || !fy) {
        kiln__free(fa);
        kiln__free(fb);
        kiln__free(fy);
        return false;
    }
    for (int64_t e = 0; e < na; e++)
        fa[e] = (float)A[e];
    for (int64_t e = 0; e < nb; e++)
        fb[e] = (float)B[e];
    for (int64_t bi = 0; bi < nbat; bi++) {
        int64_t ao = 0, bo = 0;
        if (!merged)
            mm_offsets(p, bi, &ao, &bo);
        int32_t *y = Y + bi * M * N;
        for (int64_t k0 = 0; k0 < K; k0 += chunk) {
            int64_t kc = K - k0 < chunk ? K - k0 : chunk;
            kiln__sgemm(pool, nt, false, false, M, N, kc, 1.0f, fa + ao + k0, K, fb + bo + k0 * N, N, 0.0f, fy, N);
            if (k0 == 0)
                for (int64_t e = 0; e < M * N; e++)
                    y[e] = (int32_t)fy[e];
            else
                for (int64_t e = 0; e < M * N; e++)
                    y[e] = (int32_t)((uint32_t)y[e] + (uint32_t)(int32_t)fy[e]);
        }
    }
    kiln__free(fa);
    kiln__free(fb);
    kiln__free(fy);
    return true;
}

/* Integer matmul with zero points: Y (int32) = (A - azp) x (B - bzp). */
static kiln_status int_matmul(kiln_kctx *ctx, const kiln_tensor *a, const kiln_tensor *b, const kiln_tensor *azp,
                              const kiln_tensor *bzp, mm_plan *p, int32_t **out)
{
    *out = NULL;
    if (kiln__prep_dropped(b)) /* stored only packed (INT8 fast kernel's layout) */
        return kiln__prep_missing(ctx, ctx->node->op == KILN_OP_MatMulInteger ? 1 : 3);
    if ((a->dtype != KILN_DT_UINT8 && a->dtype != KILN_DT_INT8) ||
        (b->dtype != KILN_DT_UINT8 && b->dtype != KILN_DT_INT8))
        return kiln__kerr(ctx, KILN_ERR_DTYPE, "operands must be uint8 or int8");
    KILN_TRY(mm_plan_make(ctx, a, b, p));
    if ((double)p->nbatch * (double)p->M * (double)p->N * (double)p->K > LINALG_MAX_WORK_SLOW)
        return kiln__kerr(ctx, KILN_ERR_LIMIT, "integer matmul exceeds the work limit");
    if (p->K > 32768) /* keeps the int32 accumulation of int16 products overflow-free */
        return kiln__kerr(ctx, KILN_ERR_UNSUPPORTED, "inner dimension %lld is too large", (long long)p->K);
    int64_t na = numel_of(a), nb = numel_of(b), ny = p->nbatch * p->M * p->N;
    int32_t *zpa = kiln__malloc((size_t)(p->M > 0 ? p->M : 1) * sizeof(int32_t));
    int32_t *zpb = kiln__malloc((size_t)(p->N > 0 ? p->N : 1) * sizeof(int32_t));
    int16_t *A = kiln__malloc((size_t)(na > 0 ? na : 1) * sizeof(int16_t));
    int16_t *B = kiln__malloc((size_t)(nb > 0 ? nb : 1) * sizeof(int16_t));
    int32_t *Y = kiln__calloc((size_t)(ny > 0 ? ny : 1), sizeof(int32_t));
    kiln_status st = KILN_OK;
    if (!zpa || !zpb || !A || !B || !Y) {
        st = kiln__kerr(ctx, KILN_ERR_NOMEM, "out of memory");
        goto fail;
    }
    if ((st = read_zp(ctx, azp, a->dtype, p->M, zpa, "a_zero_point")) != KILN_OK)
        goto fail;
    if ((st = read_zp(ctx, bzp, b->dtype, p->N, zpb, "b_zero_point")) != KILN_OK)
        goto fail;
    {
        /* A: [..., M, K]; row index = (e / K) % M (M = 1 for 1-D A) */
        int64_t K = p->K, N = p->N, M = p->M;
        for (int64_t r = 0; K > 0 && r < na / K; r++) {
            int16_t z = (int16_t)zpa[r % M];
            int16_t *dst = A + r * K;
            if (a->dtype == KILN_DT_UINT8) {
                const uint8_t *src = (const uint8_t *)a->data + r * K;
                for (int64_t k = 0; k < K; k++)
                    dst[k] = (int16_t)(src[k] - z);
            } else {
                const int8_t *src = (const int8_t *)a->data + r * K;
                for (int64_t k = 0; k < K; k++)
                    dst[k] = (int16_t)(src[k] - z);
            }
        }
        const int32_t *zb = zpb;
        for (int64_t r = 0; N > 0 && r < nb / N; r++) {
            int16_t *dst = B + r * N;
            if (b->dtype == KILN_DT_UINT8) {
                const uint8_t *src = (const uint8_t *)b->data + r * N;
                for (int64_t n = 0; n < N; n++)
                    dst[n] = (int16_t)(src[n] - zb[n]);
            } else {
                const int8_t *src = (const int8_t *)b->data + r * N;
                for (int64_t n = 0; n < N; n++)
                    dst[n] = (int16_t)(src[n] - zb[n]);
            }
        }
        imm_job j = {p, A, B, Y, 0};
        if (ny > 0 && K > 0 && !imm_via_sgemm(ctx->pool, ctx->nthreads, p, A, na, B, nb, Y)) {
            double per_row = (double)N * (double)K;
            int64_t grain = per_row > 65536 ? 1 : (int64_t)(65536 / (per_row + 1)) + 1;
            kiln__parallel_for(ctx->pool, ctx->nthreads, p->nbatch * M, grain, imm_rows, &j);
        }
    }
    kiln__free(zpa);
    kiln__free(zpb);
    kiln__free(A);
    kiln__free(B);
    *out = Y;
    return KILN_OK;
fail:
    kiln__free(zpa);
    kiln__free(zpb);
    kiln__free(A);
    kiln__free(B);
    kiln__free(Y);
    return st;
}

static kiln_status k_matmulinteger(kiln_kctx *ctx)
{
    const kiln_tensor *a = kiln__kin(ctx, 0), *b = kiln__kin(ctx, 1);
    if (!a || !b)
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "MatMulInteger needs inputs A and B");
    mm_plan p;
    int32_t *Y;
    KILN_TRY(int_matmul(ctx, a, b, kiln__kin(ctx, 2), kiln__kin(ctx, 3), &p, &Y));
    kiln_status st = kiln__kout(ctx, 0, KILN_DT_INT32, p.out_ndim, p.out_dims);
    if (st == KILN_OK && ctx->out[0]->nbytes)
        memcpy(ctx->out[0]->data, Y, ctx->out[0]->nbytes);
    kiln__free(Y);
    return st;
}

static kiln_status k_qlinearmatmul(kiln_kctx *ctx)
{
    const kiln_tensor *a = kiln__kin(ctx, 0), *b = kiln__kin(ctx, 3);
    if (!a || !b)
        return kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "QLinearMatMul needs inputs a and b");
    const kiln_tensor *yzp = kiln__kin(ctx, 7);
    kiln_dtype ydt = yzp ? yzp->dtype : a->dtype;
    if (ydt != KILN_DT_UINT8 && ydt != KILN_DT_INT8)
        return kiln__kerr(ctx, KILN_ERR_DTYPE, "y_zero_point must be uint8 or int8");
    if (kiln__attr_i(ctx->node, "kiln_out_float", 0))
        ydt = KILN_DT_FLOAT32;
    if (yzp && numel_of(yzp) != 1)
        return kiln__kerr(ctx, KILN_ERR_UNSUPPORTED, "y_zero_point must be a scalar");
    const kiln_tensor *ys = kiln__kin(ctx, 6), *bias = kiln__kin(ctx, 8);   /* 8: kiln's int32 bias */
    if (!ys || numel_of(ys) != 1)
        return kiln__kerr(ctx, KILN_ERR_UNSUPPORTED, "y_scale must be a scalar");
    mm_plan p;
    int32_t *Y;
    KILN_TRY(int_matmul(ctx, a, b, kiln__kin(ctx, 2), kiln__kin(ctx, 5), &p, &Y));
    float *sa = kiln__malloc((size_t)(p.M > 0 ? p.M : 1) * sizeof(float));
    float *sb = kiln__malloc((size_t)(p.N > 0 ? p.N : 1) * sizeof(float));
    float ysc = 1.0f, *ebuf = NULL;
    kiln_qepi e;
    kiln_status st = KILN_OK;
    if (!sa || !sb) {
        st = kiln__kerr(ctx, KILN_ERR_NOMEM, "out of memory");
        goto done;
    }
    if ((st = read_scale(ctx, kiln__kin(ctx, 1), p.M, sa, "a_scale")) != KILN_OK ||
        (st = read_scale(ctx, kiln__kin(ctx, 4), p.N, sb, "b_scale")) != KILN_OK ||
        (st = read_scale(ctx, ys, 1, &ysc, "y_scale")) != KILN_OK)
        goto done;
    /* requantization: qgemm.h's epilogue (docs/PRECISION.md), scales a_scale[m] * b_scale[n] */
    if ((st = kiln__qepi_setup(ctx, &e, ydt, false, p.N, 1.0f, kiln__kin(ctx, 4), 1.0f, ys, yzp, &ebuf)) != KILN_OK)
        goto done;
    if ((st = kiln__kout(ctx, 0, ydt, p.out_ndim, p.out_dims)) != KILN_OK)
        goto done;
    if (bias && (bias->dtype != KILN_DT_INT32 || bias->ndim != 1 || bias->dims[0] != p.N)) {
        st = kiln__kerr(ctx, KILN_ERR_SHAPE, "bias (input 8) must be int32 [%lld]", (long long)p.N);
        goto done;
    }
    e.bias = bias ? bias->data : NULL;
    {
        size_t osz = kiln_dtype_size(ydt);
        for (int64_t r = 0; r < p.nbatch * p.M; r++) {
            for (int64_t n = 0; n < p.N; n++) {
                ebuf[n] = sa[r % p.M] * sb[n];
                ebuf[p.N + n] = ebuf[n] / ysc;
            }
            for (int64_t n = 0; n < p.N; n++)
                kiln__qepi_store(&e, (uint8_t *)ctx->out[0]->data + (size_t)(r * p.N) * osz, p.N, 0, n, Y[r * p.N + n]);
        }
    }
done:
    kiln__free(sa);
    kiln__free(sb);
    kiln__free(ebuf);
    kiln__free(Y);
    return st;
}

/* Build time: op(B) of a float32 2-D constant right operand packed into the GEMM's panels
 * (MatMul, FusedMatMul: B [K, N]; Gemm, FusedGemm: B or B^T by transB). */
static kiln_status prep_gemm_b(const kiln_node *n, int n_in, const kiln_tensor *const *consts, void **blob,
                               size_t *size)
{
    *blob = NULL;
    *size = 0;
    const kiln_tensor *b = consts && n_in > 1 ? consts[1] : NULL;
    if (b && b->dtype == KILN_DT_BFLOAT16)   /* BF16 weights: the BF16 GEMM's panels */
        return kiln__bgemm_prep(n, n_in, consts, blob, size);
    if (!b || !b->data || b->dtype != KILN_DT_FLOAT32 || b->ndim != 2)
        return KILN_OK;
    bool gemm = n->op == KILN_OP_Gemm || n->op == KILN_OP_FusedGemm;
    bool tb = gemm && kiln__attr_i(n, "transB", 0) != 0;
    int64_t K = tb ? b->dims[1] : b->dims[0], N = tb ? b->dims[0] : b->dims[1];
    if (K <= 0 || N <= 0 || (double)K * (double)N > LINALG_MAX_WORK)
        return KILN_OK;
    int64_t dims[4] = {K, N, kiln__sgemm_nr(), tb};
    float *dst = kiln__prep_alloc(KILN_PREP_GEMM_B, 1u << 1, KILN_DT_FLOAT32, 4, dims,
                                  (uint64_t)kiln__sgemm_bpack_floats(K, N) * sizeof(float), blob, size);
    if (!dst)
        return kiln__err(KILN_ERR_NOMEM, "out of memory packing the weights of node '%s'", n->name);
    if (!kiln__sgemm_bpack(tb, K, N, b->data, b->dims[1], dst)) {
        kiln__free(*blob);
        *blob = NULL;
        *size = 0;
        return kiln__err(KILN_ERR_NOMEM, "out of memory packing the weights of node '%s'", n->name);
    }
    return KILN_OK;
}

const kiln_prep_reg kiln__prep_linalg[] = {
    {KILN_OP_MatMul, prep_gemm_b},
    {KILN_OP_Gemm, prep_gemm_b},
    {KILN_OP_FusedMatMul, prep_gemm_b},
    {KILN_OP_FusedGemm, prep_gemm_b},
    {KILN_OP_COUNT, NULL},
};

const kiln_kernel_reg kiln__ref_linalg[] = {
    {KILN_OP_MatMul, k_matmul},
    {KILN_OP_Gemm, k_gemm},
    {KILN_OP_Einsum, k_einsum},
    {KILN_OP_MatMulInteger, k_matmulinteger},
    {KILN_OP_QLinearMatMul, k_qlinearmatmul},
    {KILN_OP_COUNT, NULL},
};

/* BF16 GEMM (qgemm_bf16.h): packing, the driver on the INT8 GEMM's scheduler (qgemm.h), a
 * portable tile, and the float32 x FP16 / BF16 weight paths of Conv / MatMul / Gemm. */
#include "qgemm_bf16.h"
#include "qgemm.h"
#include "../../core/numfmt.h"
#include <stdlib.h>

static inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static inline int64_t kp2_of(int64_t K) { return (K + 1) & ~(int64_t)1; }

bool kiln__bgemm_available(void)
{
    return kiln__cpu_has(KILN_CPU_AVX512F | KILN_CPU_AVX512BF16);
}

kiln_status kiln__bgemm_pack_b(const uint16_t *src, int64_t sk, int64_t sn, int64_t K, int64_t N, kiln_bgemm_b **out)
{
    *out = NULL;
    int64_t kp2 = kp2_of(K), np = (N + 15) / 16;
    kiln_bgemm_b *b = kiln__malloc(sizeof *b);
    if (!b)
        return kiln__err(KILN_ERR_NOMEM, "out of memory");
    size_t bytes = (size_t)(np * kp2 * 16) * sizeof(uint16_t);
    if (posix_memalign((void **)&b->data, 64, bytes ? bytes : 64) != 0) {
        kiln__free(b);
        return kiln__err(KILN_ERR_NOMEM, "out of memory (BF16 weight panels, %zu bytes)", bytes);
    }
    memset(b->data, 0, bytes);
    b->K = K, b->N = N, b->kp2 = kp2;
    for (int64_t n = 0; n < N; n++) {
        uint16_t *d = b->data + (n / 16) * kp2 * 16 + (n % 16) * 2;
        for (int64_t k = 0; k < K; k++)
            d[(k >> 1) * 32 + (k & 1)] = src[k * sk + n * sn];
    }
    *out = b;
    return KILN_OK;
}

void kiln__bgemm_free_b(kiln_bgemm_b *b)
{
    if (b) {
        free(b->data);
        kiln__free(b);
    }
}

typedef struct bjob {
    const kiln_bgemm *g;
    uint16_t *a;           /* A rounded to BF16: M rows of kp2 */
    bool fast;
} bjob;

/* A's rows [r0, r1) rounded to BF16 (numfmt's RNE), zero padded */
static void round_rows(void *arg, int64_t r0, int64_t r1)
{
    const bjob *j = arg;
    int64_t K = j->g->K, kp2 = kp2_of(K);
    for (int64_t r = r0; r < r1; r++) {
        uint16_t *d = j->a + r * kp2;
        kiln__f32_to_bf16_array(d, j->g->A + r * j->g->lda, K);
        if (kp2 > K)
            d[K] = 0;
    }
}

static float bf(uint16_t v)
{
    uint32_t u = (uint32_t)v << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* portable tile: same operands, float32 sums in k order */
static void tile_c(const kiln_bgemm *g, const uint16_t *a, const uint16_t *bs, int64_t i0, int m, int64_t j0, int ncols)
{
    int64_t kp2 = kp2_of(g->K);
    for (int i = 0; i < m; i++)
        for (int c = 0; c < ncols; c++) {
            const uint16_t *bp = bs + (c / 16) * kp2 * 16 + (c % 16) * 2;
            float s = 0;
            for (int64_t k = 0; k < kp2; k++)
                s += bf(a[i * kp2 + k]) * bf(bp[(k >> 1) * 32 + (k & 1)]);
            g->C[(i0 + i) * g->ldc + j0 + c] = s;
        }
}

static void bgemm_task(void *arg, int64_t slot, int64_t strip, int64_t i0, int64_t i1)
{
    (void)slot;
    const bjob *j = arg;
    const kiln_bgemm *g = j->g;
    int64_t kp2 = kp2_of(g->K), j0 = strip * KILN_QGEMM_STRIP;
    int ncols = (int)min64(KILN_QGEMM_STRIP, g->N - j0);
    const uint16_t *bs = g->b->data + strip * KILN_QGEMM_NV * kp2 * 16;
    for (int64_t i = i0; i < i1; i += KILN_QGEMM_MR) {
        int m = (int)min64(KILN_QGEMM_MR, i1 - i);
        if (j->fast)
            kiln__bgemm_tile_bf16(g, j->a + i * kp2, bs, i, m, j0, ncols);
        else
            tile_c(g, j->a + i * kp2, bs, i, m, j0, ncols);
        if (g->epi)
            kiln__epi_apply_f32(g->epi, g->C + i * g->ldc + j0, g->ldc, m, ncols, i, j0);
    }
}

kiln_status kiln__bgemm(kiln_pool *pool, int nthreads, const kiln_bgemm *g)
{
    if (g->M <= 0 || g->N <= 0)
        return KILN_OK;
    if (g->b->K != g->K || g->b->N != g->N)
        return kiln__err(KILN_ERR_INTERNAL, "BF16 panels do not match the GEMM");
    bjob j = {.g = g, .fast = kiln__bgemm_available()};
    size_t bytes = (size_t)(g->M * kp2_of(g->K)) * sizeof(uint16_t);
    if (posix_memalign((void **)&j.a, 64, bytes ? bytes : 64) != 0)
        return kiln__err(KILN_ERR_NOMEM, "out of memory (BF16 activation rows, %zu bytes)", bytes);
    kiln__parallel_for(pool, nthreads, g->M, 1 + 65536 / (g->K + 1), round_rows, &j);
    kiln_sched s;
    kiln__sched_plan(&s, g->M, g->N, g->K, nthreads);
    kiln__sched_run(pool, &s, bgemm_task, &j);
    free(j.a);
    return KILN_OK;
}

/* ---- float32 x FP16 / BF16 weights ---- */

bool kiln__mixed_weight(const kiln_kctx *ctx, int wi)
{
    const kiln_tensor *x = kiln__kin(ctx, 0), *w = kiln__kin(ctx, wi);
    return x && w && x->dtype == KILN_DT_FLOAT32 && (w->dtype == KILN_DT_FLOAT16 || w->dtype == KILN_DT_BFLOAT16);
}

/* a float32 copy of t (BF16 / FP16 widened exactly, or float32 rounded to BF16 and back) */
static kiln_status to_f32(const kiln_kctx *ctx, const kiln_tensor *t, bool round_bf16, kiln_tensor *o)
{
    memset(o, 0, sizeof *o);
    if (kiln__tensor_alloc(o, KILN_DT_FLOAT32, t->ndim, t->dims) != KILN_OK)
        return kiln__kerr(ctx, KILN_ERR_NOMEM, "out of memory");
    int64_t n = kiln_tensor_numel(t);
    if (!round_bf16) {
        kiln__lowp_to_f32_array(t->dtype, o->data, t->data, n);
        return KILN_OK;
    }
    uint16_t *tmp = kiln__malloc(sizeof(uint16_t) * (size_t)(n ? n : 1));
    if (!tmp) {
        kiln__tensor_release(o);
        return kiln__kerr(ctx, KILN_ERR_NOMEM, "out of memory");
    }
    kiln__f32_to_bf16_array(tmp, t->data, n);
    kiln__bf16_to_f32_array(o->data, tmp, n);
    kiln__free(tmp);
    return KILN_OK;
}

/* MatMul / FusedMatMul / Gemm / FusedGemm with a 2-D BF16 B through the BF16 GEMM; *handled false
 * (nothing done) for shapes it does not cover. */
static kiln_status mixed_bgemm(kiln_kctx *ctx, bool *handled)
{
    *handled = false;
    kiln_op op = ctx->node->op;
    bool gemm = op == KILN_OP_Gemm || op == KILN_OP_FusedGemm;
    const kiln_tensor *a = kiln__kin(ctx, 0), *b = kiln__kin(ctx, 1), *bias = NULL, *res = NULL;
    if (b->ndim != 2 || a->ndim < (gemm ? 2 : 1) || (gemm && a->ndim != 2))
        return KILN_OK;
    bool tb = gemm && kiln__attr_i(ctx->node, "transB", 0);
    int64_t K = b->dims[tb ? 1 : 0], N = b->dims[tb ? 0 : 1];
    if (a->dims[a->ndim - 1] != K || K <= 0)
        return KILN_OK;
    if (gemm) {
        const kiln_tensor *c = kiln__kin(ctx, 2);
        if (kiln__attr_i(ctx->node, "transA", 0) || kiln__attr_f(ctx->node, "alpha", 1.0f) != 1.0f)
            return KILN_OK;
        if (c && (c->dtype != KILN_DT_FLOAT32 || kiln__attr_f(ctx->node, "beta", 1.0f) != 1.0f ||
                  kiln_tensor_numel(c) != N || c->dims[c->ndim - 1] != N))
            return KILN_OK;
        bias = c;
    } else if (op == KILN_OP_FusedMatMul) {
        bias = kiln__kin(ctx, 2), res = kiln__kin(ctx, 3);
        if ((bias && (bias->dtype != KILN_DT_FLOAT32 || kiln_tensor_numel(bias) != N)) ||
            (res && res->dtype != KILN_DT_FLOAT32))
            return KILN_OK;
    }
    int64_t M = kiln_tensor_numel(a) / K, odims[KILN_MAX_DIMS];
    for (int d = 0; d < a->ndim - 1; d++)
        odims[d] = a->dims[d];
    odims[a->ndim - 1] = N;
    if (res && kiln_tensor_numel(res) != M * N)
        return KILN_OK;
    kiln_epi e = {.bias = bias ? bias->data : NULL, .res = res ? res->data : NULL, .ldr = N};
    KILN_TRY(kiln__act_from_node(ctx, &e.act));
    *handled = true;
    KILN_TRY(kiln__kout_uninit(ctx, 0, KILN_DT_FLOAT32, a->ndim, odims));
    kiln_bgemm_b *pb;
    KILN_TRY(kiln__bgemm_pack_b(b->data, tb ? 1 : N, tb ? K : 1, K, N, &pb));
    kiln_bgemm g = {.M = M, .N = N, .K = K, .A = a->data, .lda = K, .b = pb, .C = ctx->out[0]->data, .ldc = N,
                    .epi = kiln__epi_is_noop(&e) ? NULL : &e};
    kiln_status st = kiln__bgemm(ctx->pool, ctx->nthreads, &g);
    kiln__bgemm_free_b(pb);
    return st;
}

kiln_status kiln__run_mixed(kiln_kctx *ctx, int wi, kiln_kernel_fn fn)
{
    const kiln_tensor *w = kiln__kin(ctx, wi);
    bool bf16 = w->dtype == KILN_DT_BFLOAT16;
    kiln_op op = ctx->node->op;
    if (bf16 && wi == 1 &&
        (op == KILN_OP_MatMul || op == KILN_OP_FusedMatMul || op == KILN_OP_Gemm || op == KILN_OP_FusedGemm)) {
        bool handled;
        KILN_TRY(mixed_bgemm(ctx, &handled));
        if (handled)
            return KILN_OK;
    }
    /* the float32 kernel on widened weights (and, for BF16, activations rounded to BF16) */
    kiln_tensor wf, xf;
    KILN_TRY(to_f32(ctx, w, false, &wf));
    kiln_status st = bf16 ? to_f32(ctx, ctx->in[0], true, &xf) : KILN_OK;
    if (st != KILN_OK) {
        kiln__tensor_release(&wf);
        return st;
    }
    const kiln_tensor *in[16];
    if (ctx->n_in > 16) {
        st = kiln__kerr(ctx, KILN_ERR_INVALID_ARG, "too many inputs");
    } else {
        for (int i = 0; i < ctx->n_in; i++)
            in[i] = ctx->in[i];
        in[wi] = &wf;
        if (bf16)
            in[0] = &xf;
        kiln_kctx sub = *ctx;
        sub.in = in;
        sub.prepared = NULL, sub.prepared_size = 0; /* prepared data belongs to the original weights */
        st = fn(&sub);
    }
    kiln__tensor_release(&wf);
    if (bf16)
        kiln__tensor_release(&xf);
    return st;
}

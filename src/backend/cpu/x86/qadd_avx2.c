/* AVX2 com.microsoft QLinearAdd (contract in ../qadd.h): the 8-wide twin of x86/qadd_avx512.c for
 * hosts without AVX-512 (registered in its table, below the AVX-512 kernel): the cases of
 * kiln__qadd_vec_ok, 8 elements per step through the reference's float32 operations in the same
 * order (two products, one sum, the activation as max / min, a true division by C_scale, round to
 * nearest even, + C_zero_point, clamp), so every element equals the reference's. */
#include "../cpu_kernels.h"
#include "../qadd.h"

#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#include <immintrin.h>

#define TQA2 __attribute__((target("avx2")))

typedef struct qadd_job {
    const kiln_qadd *p;
    const uint8_t *a, *b;
    bool a_s8, b_s8;
    uint8_t *c;
    int64_t n;
} qadd_job;

/* 8 bytes at s (n of them valid) widened to int32 */
TQA2 static inline __m256i load8(const uint8_t *s, int64_t n, bool s8)
{
    int64_t q = 0;
    memcpy(&q, s, (size_t)(n >= 8 ? 8 : n));
    __m128i v = _mm_cvtsi64_si128(q);
    return s8 ? _mm256_cvtepi8_epi32(v) : _mm256_cvtepu8_epi32(v);
}

/* blocks [b0, b1) of 8 elements */
TQA2 static void qadd_task(void *arg, int64_t b0, int64_t b1)
{
    const qadd_job *j = arg;
    const kiln_qadd *p = j->p;
    const __m256i za = _mm256_set1_epi32(p->za), zb = _mm256_set1_epi32(p->zb);
    const __m256 sa = _mm256_set1_ps(p->sa), sb = _mm256_set1_ps(p->sb), sc = _mm256_set1_ps(p->sc);
    const __m256 zc = _mm256_set1_ps((float)p->zc), lo = _mm256_set1_ps((float)p->lo), hi = _mm256_set1_ps((float)p->hi);
    const __m256 alo = _mm256_set1_ps(p->act.kind == KILN_ACT_CLIP ? p->act.alpha : 0.0f);
    const __m256 ahi = _mm256_set1_ps(p->act.beta);
    /* the low byte of each int32 lane */
    const __m256i pick = _mm256_setr_epi8(0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, 0, 4, 8, 12,
                                          -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
    for (int64_t blk = b0; blk < b1; blk++) {
        int64_t i = blk * 8, n = j->n - i < 8 ? j->n - i : 8;
        __m256 fa = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(load8(j->a + i, n, j->a_s8), za)), sa);
        __m256 fb = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(load8(j->b + i, n, j->b_s8), zb)), sb);
        __m256 v = _mm256_add_ps(fa, fb);
        if (p->act.kind != KILN_ACT_NONE) /* Relu: max(v, 0); Clip: min(beta, max(alpha, v)) */
            v = _mm256_max_ps(v, alo);
        if (p->act.kind == KILN_ACT_CLIP)
            v = _mm256_min_ps(v, ahi);
        __m256 r = _mm256_round_ps(_mm256_div_ps(v, sc), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        r = _mm256_min_ps(_mm256_max_ps(_mm256_add_ps(r, zc), lo), hi);
        __m256i q = _mm256_shuffle_epi8(_mm256_cvtps_epi32(r), pick);
        int64_t out = _mm_cvtsi128_si64(_mm_unpacklo_epi32(_mm256_castsi256_si128(q), _mm256_extracti128_si256(q, 1)));
        memcpy(j->c + i, &out, (size_t)n);
    }
}

static void qadd_run(const kiln_qadd *p, const uint8_t *a, bool a_s8, const uint8_t *b, bool b_s8, uint8_t *c,
                     int64_t n, kiln_pool *pool, int nthreads)
{
    qadd_job j = {.p = p, .a = a, .b = b, .a_s8 = a_s8, .b_s8 = b_s8, .c = c, .n = n};
    kiln__parallel_for(pool, nthreads, (n + 7) / 8, 4096, qadd_task, &j);
}

kiln_status kiln__k_qlinearadd_avx2(kiln_kctx *ctx)
{
    kiln_qadd p;
    if (kiln__qadd_setup(ctx, &p) != KILN_OK)
        return kiln__k_qlinearadd_ref(ctx); /* which reports the error */
    const kiln_tensor *a = kiln__kin(ctx, 0), *b = kiln__kin(ctx, 3);
    if (!kiln__qadd_vec_ok(&p, a, b))
        return kiln__k_qlinearadd_ref(ctx);
    KILN_TRY(kiln__kout_uninit(ctx, 0, p.cdt, a->ndim, a->dims));
    qadd_run(&p, a->data, a->dtype == KILN_DT_INT8, b->data, b->dtype == KILN_DT_INT8, ctx->out[0]->data,
             kiln_tensor_numel(a), ctx->pool, ctx->nthreads);
    return KILN_OK;
}

kiln_status kiln__k_qconv_add_avx2(kiln_kctx *ctx)
{
    return kiln__qconv_add(ctx, kiln__ref_kernel(KILN_OP_QLinearConv), qadd_run);
}
#else
kiln_status kiln__k_qlinearadd_avx2(kiln_kctx *ctx) { return kiln__k_qlinearadd_ref(ctx); }
kiln_status kiln__k_qconv_add_avx2(kiln_kctx *ctx)
{
    return kiln__qconv_add(ctx, kiln__ref_kernel(KILN_OP_QLinearConv), NULL);
}
#endif

/* AVX-512 com.microsoft QLinearAdd (contract in ../qadd.h), registered over the reference for
 * hosts with AVX-512F: A and B of one shape, activation none / Relu / Clip; 16 elements per step
 * through the reference's float32 operations in the same order (two products, one sum, the
 * activation as max / min, a true division by C_scale, round to nearest even, + C_zero_point,
 * clamp), so every element equals the reference's. Anything else runs the reference. The same add finishes kiln's
 * QLinearConvAdd (qadd.h). The table also registers the AVX2 twins (qadd_avx2.c) for hosts without AVX-512. */
#include "../cpu_kernels.h"
#include "../vmath.h"
#include "../qadd.h"

#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#include <immintrin.h>

#define TQA __attribute__((target("avx512f")))

typedef struct qadd_job {
    const kiln_qadd *p;
    const uint8_t *a, *b;
    bool a_s8, b_s8;
    uint8_t *c;
    int64_t n;
} qadd_job;

/* blocks [b0, b1) of 16 elements */
TQA static void qadd_task(void *arg, int64_t b0, int64_t b1)
{
    const qadd_job *j = arg;
    const kiln_qadd *p = j->p;
    const __m512i za = _mm512_set1_epi32(p->za), zb = _mm512_set1_epi32(p->zb);
    const __m512 sa = _mm512_set1_ps(p->sa), sb = _mm512_set1_ps(p->sb), sc = _mm512_set1_ps(p->sc);
    const __m512 zc = _mm512_set1_ps((float)p->zc), lo = _mm512_set1_ps((float)p->lo), hi = _mm512_set1_ps((float)p->hi);
    const __m512 alo = _mm512_set1_ps(p->act.kind == KILN_ACT_CLIP ? p->act.alpha : 0.0f);
    const __m512 ahi = _mm512_set1_ps(p->act.beta);
    for (int64_t blk = b0; blk < b1; blk++) {
        int64_t i = blk * 16, n = j->n - i < 16 ? j->n - i : 16;
        __m512 fa = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(kiln_v_load16_8to32(j->a + i, n, j->a_s8), za)), sa);
        __m512 fb = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(kiln_v_load16_8to32(j->b + i, n, j->b_s8), zb)), sb);
        __m512 v = _mm512_add_ps(fa, fb);
        if (p->act.kind != KILN_ACT_NONE) /* Relu: max(v, 0); Clip: min(beta, max(alpha, v)) */
            v = _mm512_max_ps(v, alo);
        if (p->act.kind == KILN_ACT_CLIP)
            v = _mm512_min_ps(v, ahi);
        __m512 r = _mm512_roundscale_ps(_mm512_div_ps(v, sc), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        r = _mm512_min_ps(_mm512_max_ps(_mm512_add_ps(r, zc), lo), hi);
        __mmask16 km = kiln_v_mask16(n);
        _mm512_mask_cvtepi32_storeu_epi8(j->c + i, km, _mm512_cvtps_epi32(r));
    }
}

static void qadd_run(const kiln_qadd *p, const uint8_t *a, bool a_s8, const uint8_t *b, bool b_s8, uint8_t *c,
                     int64_t n, kiln_pool *pool, int nthreads)
{
    qadd_job j = {.p = p, .a = a, .b = b, .a_s8 = a_s8, .b_s8 = b_s8, .c = c, .n = n};
    kiln__parallel_for(pool, nthreads, (n + 15) / 16, 2048, qadd_task, &j);
}

static kiln_status k_qlinearadd_fast(kiln_kctx *ctx)
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

/* QLinearConvAdd: the fastest QLinearConv kernel, then this add over its output in place */
static kiln_status k_qconv_add_fast(kiln_kctx *ctx)
{
    return kiln__qconv_add(ctx, kiln__ref_kernel(KILN_OP_QLinearConv), qadd_run);
}

const kiln_kernel_isa_reg kiln__x86_qadd[] = {
    {KILN_OP_QLinearAdd, kiln__k_qlinearadd_avx2, KILN_CPU_AVX2, "QLinearAdd/avx2"},   /* qadd_avx2.c */
    {KILN_OP_QLinearConvAdd, kiln__k_qconv_add_avx2, KILN_CPU_AVX2, "QLinearConvAdd/avx2"},
    {KILN_OP_QLinearAdd, k_qlinearadd_fast, KILN_CPU_AVX512F, "QLinearAdd/avx512"},
    {KILN_OP_QLinearConvAdd, k_qconv_add_fast, KILN_CPU_AVX512F, "QLinearConvAdd/avx512"},
    {KILN_OP_COUNT, NULL, 0, NULL},
};
#else
const kiln_kernel_isa_reg kiln__x86_qadd[] = {{KILN_OP_COUNT, NULL, 0, NULL}};
#endif

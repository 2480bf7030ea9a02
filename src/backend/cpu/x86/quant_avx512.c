/* AVX-512 QuantizeLinear and DequantizeLinear, registered over the reference (ref/k_quant.c) with the INT8 kernels
 * (x86/qgemm_vnni.c's table) for hosts with AVX-512F: float32 input, a scalar float32 scale, a
 * scalar uint8 / int8 zero point (or none: uint8 0). 16 elements per step through the
 * reference's float32 operations in the same order (a true division by the scale, round to
 * nearest even, + zero point, NaN -> 0, clamp), so every element equals the reference's; split
 * over the layer's threads. Anything else (per-axis or block scales, other types) runs the
 * reference, which also reports the errors. `--precision int8` leaves one such layer before each
 * group of integer layers reading a float tensor (BERT: the LayerNorm outputs, the attention's).
 * DequantizeLinear (uint8 / int8 -> float32, scalar scale and zero point): (float)(x - z) * s, the
 * reference's two exact steps and one rounding, 16 elements a step -- an INT8 engine keeps one after
 * each integer layer whose output a float layer reads (PP-OCR's affine blocks and hardswish).
 * kiln's QLookup (AVX-512 VBMI): a byte table over 64 bytes a step. */
#include "../cpu_kernels.h"
#include "../vmath.h"
#include "../qgemm.h"

#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#include <immintrin.h>

#define TQ __attribute__((target("avx512f")))

typedef struct quant_job {
    const float *x;
    uint8_t *y;
    int64_t n;
    float s, z, lo, hi;
} quant_job;

/* blocks [b0, b1) of 16 elements */
TQ static void quant_task(void *arg, int64_t b0, int64_t b1)
{
    const quant_job *j = arg;
    const __m512 s = _mm512_set1_ps(j->s), z = _mm512_set1_ps(j->z);
    const __m512 lo = _mm512_set1_ps(j->lo), hi = _mm512_set1_ps(j->hi);
    for (int64_t blk = b0; blk < b1; blk++) {
        int64_t i = blk * 16, n = j->n - i < 16 ? j->n - i : 16;
        __mmask16 km = kiln_v_mask16(n);
        __m512 v = _mm512_maskz_loadu_ps(km, j->x + i);
        __m512 r = _mm512_add_ps(_mm512_roundscale_ps(_mm512_div_ps(v, s), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC), z);
        r = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(r, r, _CMP_ORD_Q), r);   /* NaN -> 0, as the reference */
        r = _mm512_min_ps(_mm512_max_ps(r, lo), hi);
        _mm512_mask_cvtepi32_storeu_epi8(j->y + i, km, _mm512_cvtps_epi32(r));
    }
}

typedef struct dequant_job {
    const uint8_t *x;
    float *y;
    int64_t n;
    float s;
    int32_t z;
    bool s8;
} dequant_job;

TQ static void dequant_task(void *arg, int64_t b0, int64_t b1)
{
    const dequant_job *j = arg;
    const __m512 s = _mm512_set1_ps(j->s);
    const __m512i z = _mm512_set1_epi32(j->z);
    for (int64_t blk = b0; blk < b1; blk++) {
        int64_t i = blk * 16, n = j->n - i < 16 ? j->n - i : 16;
        __m512i v = kiln_v_load16_8to32(j->x + i, n, j->s8);
        _mm512_mask_storeu_ps(j->y + i, kiln_v_mask16(n), _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(v, z)), s));
    }
}

static bool scalar_of(const kiln_tensor *t, kiln_dtype dt)
{
    return t && t->ndim == 0 && t->dtype == dt && t->data;
}

kiln_status kiln__k_quantize_fast(kiln_kctx *ctx)
{
    const kiln_tensor *x = kiln__kin(ctx, 0), *sc = kiln__kin(ctx, 1), *zp = kiln__kin(ctx, 2);
    kiln_kernel_fn ref = kiln__cpu_ref_kernel(KILN_OP_QuantizeLinear);
    kiln_dtype odt = zp ? zp->dtype : KILN_DT_UINT8;
    if (!ref)
        return kiln__kerr(ctx, KILN_ERR_UNSUPPORTED, "no reference kernel");
    if (!x || x->dtype != KILN_DT_FLOAT32 || !scalar_of(sc, KILN_DT_FLOAT32) ||
        (odt != KILN_DT_UINT8 && odt != KILN_DT_INT8) || (zp && !scalar_of(zp, odt)) ||
        kiln__attr_i(ctx->node, "block_size", 0) != 0 || kiln__attr_i(ctx->node, "output_dtype", 0) != 0)
        return ref(ctx);
    KILN_TRY(kiln__kout_uninit(ctx, 0, odt, x->ndim, x->dims));
    bool u8 = odt == KILN_DT_UINT8;
    quant_job j = {.x = x->data, .y = ctx->out[0]->data, .n = kiln_tensor_numel(x), .s = *(const float *)sc->data,
                   .z = !zp ? 0.0f : u8 ? (float)*(const uint8_t *)zp->data : (float)*(const int8_t *)zp->data,
                   .lo = u8 ? 0.0f : -128.0f, .hi = u8 ? 255.0f : 127.0f};
    if (j.n > 0)
        kiln__parallel_for(ctx->pool, ctx->nthreads, (j.n + 15) / 16, 1024, quant_task, &j);
    return KILN_OK;
}

kiln_status kiln__k_dequantize_fast(kiln_kctx *ctx)
{
    const kiln_tensor *x = kiln__kin(ctx, 0), *sc = kiln__kin(ctx, 1), *zp = kiln__kin(ctx, 2);
    kiln_kernel_fn ref = kiln__cpu_ref_kernel(KILN_OP_DequantizeLinear);
    if (!ref)
        return kiln__kerr(ctx, KILN_ERR_UNSUPPORTED, "no reference kernel");
    if (!x || (x->dtype != KILN_DT_UINT8 && x->dtype != KILN_DT_INT8) || !x->data || !scalar_of(sc, KILN_DT_FLOAT32) ||
        (zp && !scalar_of(zp, x->dtype)) || kiln__attr_i(ctx->node, "block_size", 0) != 0)
        return ref(ctx);
    KILN_TRY(kiln__kout_uninit(ctx, 0, KILN_DT_FLOAT32, x->ndim, x->dims));
    bool s8 = x->dtype == KILN_DT_INT8;
    dequant_job j = {.x = x->data, .y = ctx->out[0]->data, .n = kiln_tensor_numel(x), .s = *(const float *)sc->data,
                     .z = !zp ? 0 : s8 ? (int32_t)*(const int8_t *)zp->data : (int32_t)*(const uint8_t *)zp->data,
                     .s8 = s8};
    if (j.n > 0)
        kiln__parallel_for(ctx->pool, ctx->nthreads, (j.n + 15) / 16, 2048, dequant_task, &j);
    return KILN_OK;
}

/* QLookup: 64 bytes a step, each looked up in the table's low and high 128 bytes (vpermi2b takes 7 index bits), the
 * index byte's top bit choosing between the two */
typedef struct lookup_job {
    const uint8_t *x, *t;
    uint8_t *y;
    int64_t n;
} lookup_job;

__attribute__((target("avx512f,avx512bw,avx512vbmi"))) static void lookup_task(void *arg, int64_t b0, int64_t b1)
{
    const lookup_job *j = arg;
    const __m512i t0 = _mm512_loadu_si512(j->t), t1 = _mm512_loadu_si512(j->t + 64);
    const __m512i t2 = _mm512_loadu_si512(j->t + 128), t3 = _mm512_loadu_si512(j->t + 192);
    for (int64_t blk = b0; blk < b1; blk++) {
        int64_t i = blk * 64, n = j->n - i < 64 ? j->n - i : 64;
        __mmask64 km = n == 64 ? ~(__mmask64)0 : ((__mmask64)1 << n) - 1;
        __m512i x = _mm512_maskz_loadu_epi8(km, j->x + i);
        __m512i lo = _mm512_permutex2var_epi8(t0, x, t1), hi = _mm512_permutex2var_epi8(t2, x, t3);
        _mm512_mask_storeu_epi8(j->y + i, km, _mm512_mask_blend_epi8(_mm512_movepi8_mask(x), lo, hi));
    }
}

kiln_status kiln__k_qlookup_fast(kiln_kctx *ctx)
{
    const kiln_tensor *x, *t;
    if (!kiln__cpu_has(KILN_CPU_AVX512F | KILN_CPU_AVX512VBMI))
        return kiln__cpu_ref_kernel(KILN_OP_QLookup)(ctx);
    KILN_TRY(kiln__qlookup_check(ctx, &x, &t));
    lookup_job j = {.x = x->data, .t = t->data, .y = ctx->out[0]->data, .n = kiln_tensor_numel(x)};
    if (j.n > 0)
        kiln__parallel_for(ctx->pool, ctx->nthreads, (j.n + 63) / 64, 512, lookup_task, &j);
    return KILN_OK;
}
#else
kiln_status kiln__k_qlookup_fast(kiln_kctx *ctx)
{
    return kiln__cpu_ref_kernel(KILN_OP_QLookup)(ctx);
}
kiln_status kiln__k_quantize_fast(kiln_kctx *ctx)
{
    return kiln__cpu_ref_kernel(KILN_OP_QuantizeLinear)(ctx);
}
kiln_status kiln__k_dequantize_fast(kiln_kctx *ctx)
{
    return kiln__cpu_ref_kernel(KILN_OP_DequantizeLinear)(ctx);
}
#endif

/* FP16 / BF16 array conversions with x86 fast paths, bit-identical to the scalar reference in
 * numfmt_float.c (tests/unit/test_numfmt.c checks this on random odd-sized arrays):
 *   FP16 <-> FP32: F16C (vcvtps2ph with an immediate round-to-nearest-even, vcvtph2ps).
 *   BF16 <-> FP32: AVX-512F integer ops (the scalar algorithm, 16 lanes), else AVX2 (8 lanes).
 *   vcvtneps2bf16 is not used: it flushes FP32 subnormal inputs to zero, the scalar reference
 *   does not.
 * CPU features come from kiln__cpu_has (cpu.c). */
#include "core.h"
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#include "numfmt_v512.h"
#define NUMFMT_X86 1
#endif

bool kiln__numfmt_has_f16c(void)
{
    return kiln__cpu_has(KILN_CPU_F16C);
}

bool kiln__numfmt_has_avx512(void)
{
    return kiln__cpu_has(KILN_CPU_AVX512F);
}

#ifdef NUMFMT_X86
__attribute__((target("avx,f16c"))) static int64_t f16_to_f32_f16c(float *dst, const uint16_t *src, int64_t n)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i))));
    return i;
}

__attribute__((target("avx,f16c"))) static int64_t f32_to_f16_f16c(uint16_t *dst, const float *src, int64_t n)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(dst + i), _mm256_cvtps_ph(_mm256_loadu_ps(src + i), 0 /* RNE */));
    return i;
}

__attribute__((target("avx512f"))) static int64_t bf16_to_f32_avx512(float *dst, const uint16_t *src, int64_t n)
{
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512i h = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(src + i)));
        _mm512_storeu_si512(dst + i, _mm512_slli_epi32(h, 16));
    }
    return i;
}

/* every element: whole vectors, then one masked step (a short row costs no scalar tail) */
__attribute__((target("avx512f"))) static int64_t f32_to_bf16_avx512(uint16_t *dst, const float *src, int64_t n)
{
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 m = n - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - i)) - 1u);
        __m512i r = kiln__v512_bf16_hi(_mm512_maskz_loadu_epi32(m, src + i));
        _mm512_mask_cvtepi32_storeu_epi16(dst + i, m, _mm512_srli_epi32(r, 16));
    }
    return n;
}

/* the AVX2 twins (hosts without AVX-512): the same integer ops, 8 lanes */
__attribute__((target("avx2"))) static int64_t bf16_to_f32_avx2(float *dst, const uint16_t *src, int64_t n)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256i h = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(src + i)));
        _mm256_storeu_si256((__m256i *)(dst + i), _mm256_slli_epi32(h, 16));
    }
    return i;
}

__attribute__((target("avx2"))) static int64_t f32_to_bf16_avx2(uint16_t *dst, const float *src, int64_t n)
{
    const __m256i absmask = _mm256_set1_epi32(0x7fffffff), inf = _mm256_set1_epi32(0x7f800000);
    const __m256i bias = _mm256_set1_epi32(0x7fff), one = _mm256_set1_epi32(1), quiet = _mm256_set1_epi32(0x400000);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256i x = _mm256_loadu_si256((const __m256i *)(src + i));
        /* |x| <= 0x7fffffff: a signed compare is the unsigned one */
        __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(x, absmask), inf);
        __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(x, 16), one);
        __m256i r = _mm256_add_epi32(x, _mm256_add_epi32(bias, lsb));
        r = _mm256_blendv_epi8(r, _mm256_or_si256(x, quiet), nan);
        r = _mm256_srli_epi32(r, 16);   /* 0 .. 0xffff: packus keeps it */
        __m256i p = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0x08);
        _mm_storeu_si128((__m128i *)(dst + i), _mm256_castsi256_si128(p));
    }
    return i;
}
#endif

void kiln__f16_to_f32_array(float *dst, const uint16_t *src, int64_t n)
{
    int64_t i = 0;
#ifdef NUMFMT_X86
    if (kiln__numfmt_has_f16c())
        i = f16_to_f32_f16c(dst, src, n);
#endif
    kiln__f16_to_f32_array_ref(dst + i, src + i, n - i);
}

void kiln__f32_to_f16_array(uint16_t *dst, const float *src, int64_t n)
{
    int64_t i = 0;
#ifdef NUMFMT_X86
    if (kiln__numfmt_has_f16c())
        i = f32_to_f16_f16c(dst, src, n);
#endif
    kiln__f32_to_f16_array_ref(dst + i, src + i, n - i);
}

void kiln__bf16_to_f32_array(float *dst, const uint16_t *src, int64_t n)
{
    int64_t i = 0;
#ifdef NUMFMT_X86
    if (kiln__numfmt_has_avx512())
        i = bf16_to_f32_avx512(dst, src, n);
    else if (kiln__cpu_has(KILN_CPU_AVX2))
        i = bf16_to_f32_avx2(dst, src, n);
#endif
    kiln__bf16_to_f32_array_ref(dst + i, src + i, n - i);
}

void kiln__f32_to_bf16_array(uint16_t *dst, const float *src, int64_t n)
{
    int64_t i = 0;
#ifdef NUMFMT_X86
    if (kiln__numfmt_has_avx512())
        i = f32_to_bf16_avx512(dst, src, n);
    else if (kiln__cpu_has(KILN_CPU_AVX2))
        i = f32_to_bf16_avx2(dst, src, n);
#endif
    kiln__f32_to_bf16_array_ref(dst + i, src + i, n - i);
}

void kiln__f32_round_bf16_array(float *dst, const float *src, int64_t n)
{
    uint16_t t[256];
    for (int64_t i = 0; i < n; i += 256) {
        int64_t c = n - i < 256 ? n - i : 256;
        kiln__f32_to_bf16_array(t, src + i, c);
        kiln__bf16_to_f32_array(dst + i, t, c);
    }
}

bool kiln__dtype_is_lowp_float(kiln_dtype dt)
{
    return dt == KILN_DT_FLOAT16 || dt == KILN_DT_BFLOAT16 || kiln__dtype_is_fp8(dt);
}

bool kiln__lowp_to_f32_array(kiln_dtype dt, float *dst, const void *src, int64_t n)
{
    if (dt == KILN_DT_FLOAT16)
        kiln__f16_to_f32_array(dst, src, n);
    else if (dt == KILN_DT_BFLOAT16)
        kiln__bf16_to_f32_array(dst, src, n);
    else if (kiln__dtype_is_fp8(dt))
        kiln__fp8_to_f32_array(dt, dst, src, n);
    else
        return false;
    return true;
}

bool kiln__f32_to_lowp_array(kiln_dtype dt, void *dst, const float *src, int64_t n, bool saturate)
{
    if (dt == KILN_DT_FLOAT16)
        kiln__f32_to_f16_array(dst, src, n);
    else if (dt == KILN_DT_BFLOAT16)
        kiln__f32_to_bf16_array(dst, src, n);
    else if (kiln__dtype_is_fp8(dt))
        kiln__f32_to_fp8_array(dt, dst, src, n, saturate);
    else
        return false;
    return true;
}

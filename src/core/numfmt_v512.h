/* The BF16 rounding of numfmt (round to nearest even on the float32 bits, NaN made quiet, subnormals kept: the
 * scalar kiln__f32_to_bf16) on 16 lanes, for the AVX-512 array conversion (numfmt_simd.c) and kernels that round
 * while packing (the BF16 convolution's panels, cpu/x86/bgemm_bf16.c). static inline with a target attribute: use
 * only behind kiln__cpu_has(KILN_CPU_AVX512F). */
#ifndef KILN_CORE_NUMFMT_V512_H
#define KILN_CORE_NUMFMT_V512_H
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

/* 16 float32 (their bits) rounded to BF16, the BF16 value in the upper 16 bits of each lane */
__attribute__((target("avx512f"), always_inline)) static inline __m512i kiln__v512_bf16_hi(__m512i x)
{
    const __m512i absmask = _mm512_set1_epi32(0x7fffffff), inf = _mm512_set1_epi32(0x7f800000);
    __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(x, absmask), inf);
    __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(1));
    __m512i r = _mm512_add_epi32(x, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), lsb));
    return _mm512_mask_mov_epi32(r, nan, _mm512_or_si512(x, _mm512_set1_epi32(0x400000)));
}
#endif
#endif

/* AVX2 + FMA vector math for epilogues: the 8-wide twins of vmath.h's AVX-512 exp, tanh, erf and
 * fused activations, with the same polynomials and the same operation order, so the results match
 * the AVX-512 ones (and kiln__act_scalar within vmath.h's bounds). 2^n is built from the exponent
 * bits in two halves (n in [-150, 128]), which rounds once, like _mm512_scalef_ps.
 *
 * static inline with a target attribute: use only behind kiln__cpu_has(KILN_CPU_AVX2_FMA). */
#ifndef KILN_BACKEND_CPU_VMATH_AVX2_H
#define KILN_BACKEND_CPU_VMATH_AVX2_H
#include "vmath.h"

#if KILN_VMATH_X86
#define KILN_V256 __attribute__((target("avx2,fma"), always_inline)) static inline

KILN_V256 __m256 kiln_v8_exp(__m256 x)
{
    const __m256 x0 = x;
    x = _mm256_min_ps(_mm256_set1_ps(88.7228f), _mm256_max_ps(_mm256_set1_ps(-103.97f), x));
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    __m256 r2 = _mm256_mul_ps(r, r);
    __m256 y = _mm256_add_ps(_mm256_fmadd_ps(p, r2, r), _mm256_set1_ps(1.0f));
    /* y * 2^n as y * 2^h * 2^(n - h), h = n >> 1: both factors normal, the first product exact */
    __m256i ni = _mm256_cvtps_epi32(n), h = _mm256_srai_epi32(ni, 1), l = _mm256_sub_epi32(ni, h);
    const __m256i bias = _mm256_set1_epi32(127);
    __m256 ph = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(h, bias), 23));
    __m256 pl = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(l, bias), 23));
    y = _mm256_mul_ps(_mm256_mul_ps(y, ph), pl);
    /* NaN: y is already NaN; overflow to +inf like expf */
    return _mm256_blendv_ps(y, _mm256_set1_ps(INFINITY), _mm256_cmp_ps(x0, _mm256_set1_ps(88.7228f), _CMP_GT_OQ));
}

KILN_V256 __m256 kiln_v8_abs(__m256 x) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), x); }

/* copies the sign of s onto the non-negative magnitude m */
KILN_V256 __m256 kiln_v8_copysign(__m256 m, __m256 s)
{
    return _mm256_or_ps(m, _mm256_and_ps(s, _mm256_set1_ps(-0.0f)));
}

/* tanh: odd polynomial for |x| < 0.625, else 1 - 2 / (exp(2|x|) + 1) */
KILN_V256 __m256 kiln_v8_tanh(__m256 x)
{
    __m256 a = kiln_v8_abs(x);
    __m256 x2 = _mm256_mul_ps(x, x);
    __m256 p = _mm256_set1_ps(0.0023079763632267714f);
    p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(-0.008359910920262337f));
    p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(0.021774930879473686f));
    p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(-0.053960226476192474f));
    p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(0.13333310186862946f));
    p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(-0.3333333432674408f));
    __m256 small = _mm256_fmadd_ps(_mm256_mul_ps(x, x2), p, x);
    __m256 a10 = _mm256_min_ps(_mm256_set1_ps(10.0f), a);
    __m256 e = kiln_v8_exp(_mm256_add_ps(a10, a10));
    __m256 big = _mm256_sub_ps(_mm256_set1_ps(1.0f),
                               _mm256_div_ps(_mm256_set1_ps(2.0f), _mm256_add_ps(e, _mm256_set1_ps(1.0f))));
    big = kiln_v8_copysign(big, x);
    __m256 r = _mm256_blendv_ps(big, small, _mm256_cmp_ps(a, _mm256_set1_ps(0.625f), _CMP_LT_OQ));
    return _mm256_blendv_ps(r, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
}

/* erf: x P(x^2) for |x| <= 1, else 1 - exp(-x^2) Q(1/|x|) (|x| clamped to [1, 4]) */
KILN_V256 __m256 kiln_v8_erf(__m256 x)
{
    __m256 a = kiln_v8_abs(x);
    __m256 x2 = _mm256_mul_ps(x, x);
    __m256 p = _mm256_set1_ps(7.898209878476337e-05f);
    p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(-0.0008024353883229196f));
    p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(0.00519005348905921f));
    p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(-0.026854809373617172f));
    p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(0.11283612251281738f));
    p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(-0.3761262893676758f));
    p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(1.128379225730896f));
    __m256 small = _mm256_mul_ps(x, p);
    __m256 b = _mm256_min_ps(_mm256_set1_ps(4.0f), _mm256_max_ps(_mm256_set1_ps(1.0f), a));
    __m256 u = _mm256_div_ps(_mm256_set1_ps(1.0f), b);
    __m256 q = _mm256_set1_ps(-0.012079884298145771f);
    q = _mm256_fmadd_ps(q, u, _mm256_set1_ps(0.04147293418645859f));
    q = _mm256_fmadd_ps(q, u, _mm256_set1_ps(-0.003256680676713586f));
    q = _mm256_fmadd_ps(q, u, _mm256_set1_ps(-0.21059322357177734f));
    q = _mm256_fmadd_ps(q, u, _mm256_set1_ps(0.4749651551246643f));
    q = _mm256_fmadd_ps(q, u, _mm256_set1_ps(-0.4620603919029236f));
    q = _mm256_fmadd_ps(q, u, _mm256_set1_ps(0.03947317227721214f));
    q = _mm256_fmadd_ps(q, u, _mm256_set1_ps(0.5594154596328735f));
    q = _mm256_fmadd_ps(q, u, _mm256_set1_ps(0.0002469873579684645f));
    __m256 b2 = _mm256_mul_ps(b, b);
    __m256 lo = _mm256_fmsub_ps(b, b, b2);
    __m256 e = kiln_v8_exp(_mm256_sub_ps(_mm256_setzero_ps(), b2));
    e = _mm256_fnmadd_ps(e, lo, e);
    __m256 big = kiln_v8_copysign(_mm256_fnmadd_ps(e, q, _mm256_set1_ps(1.0f)), x);
    __m256 r = _mm256_blendv_ps(big, small, _mm256_cmp_ps(a, _mm256_set1_ps(1.0f), _CMP_LE_OQ));
    return _mm256_blendv_ps(r, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
}

/* The activation of kind k (alpha, beta its parameters). Matches kiln__act_scalar; k is a
 * constant where the caller hoists its switch out of a loop. */
KILN_V256 __m256 kiln_v8_act(kiln_act_kind k, float alpha, float beta, __m256 x)
{
    const __m256 zero = _mm256_setzero_ps(), one = _mm256_set1_ps(1.0f);
    switch (k) {
    case KILN_ACT_NONE: return x;
    case KILN_ACT_RELU: return _mm256_max_ps(zero, x);   /* NaN and -0 stay (max_ps returns its second operand), like x < 0 ? 0 : x */
    case KILN_ACT_CLIP: return _mm256_min_ps(_mm256_set1_ps(beta), _mm256_max_ps(_mm256_set1_ps(alpha), x));
    case KILN_ACT_LEAKYRELU:
        return _mm256_blendv_ps(x, _mm256_mul_ps(x, _mm256_set1_ps(alpha)), _mm256_cmp_ps(x, zero, _CMP_LT_OQ));
    case KILN_ACT_SIGMOID: return _mm256_div_ps(one, _mm256_add_ps(one, kiln_v8_exp(_mm256_sub_ps(zero, x))));
    case KILN_ACT_HARDSIGMOID: {
        __m256 v = _mm256_fmadd_ps(_mm256_set1_ps(alpha), x, _mm256_set1_ps(beta));
        return _mm256_min_ps(one, _mm256_max_ps(zero, v));
    }
    case KILN_ACT_HARDSWISH: {
        __m256 v = _mm256_add_ps(_mm256_div_ps(x, _mm256_set1_ps(6.0f)), _mm256_set1_ps(0.5f));
        return _mm256_mul_ps(x, _mm256_min_ps(one, _mm256_max_ps(zero, v)));
    }
    case KILN_ACT_SILU: return _mm256_div_ps(x, _mm256_add_ps(one, kiln_v8_exp(_mm256_sub_ps(zero, x))));
    case KILN_ACT_GELU: {
        __m256 e = kiln_v8_erf(_mm256_mul_ps(x, _mm256_set1_ps(0.70710678118654752f)));
        return _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(0.5f), x), _mm256_add_ps(one, e));
    }
    case KILN_ACT_GELU_TANH: {
        __m256 x3 = _mm256_mul_ps(_mm256_mul_ps(x, x), x);
        __m256 t = kiln_v8_tanh(
            _mm256_mul_ps(_mm256_set1_ps(0.7978845608028654f), _mm256_fmadd_ps(_mm256_set1_ps(0.044715f), x3, x)));
        return _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(0.5f), x), _mm256_add_ps(one, t));
    }
    case KILN_ACT_TANH: return kiln_v8_tanh(x);
    case KILN_ACT_HARDSWISH_AFFINE: {
        __m256 v = _mm256_add_ps(_mm256_div_ps(x, _mm256_set1_ps(6.0f)), _mm256_set1_ps(0.5f));
        __m256 h = _mm256_mul_ps(x, _mm256_min_ps(one, _mm256_max_ps(zero, v)));
        return _mm256_add_ps(_mm256_mul_ps(_mm256_set1_ps(alpha), h), _mm256_set1_ps(beta));
    }
    }
    return x;
}

/* lanes [0, n) of an 8-lane mask (n <= 8) */
KILN_V256 __m256i kiln_v8_mask(int64_t n)
{
    return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
#endif

#endif

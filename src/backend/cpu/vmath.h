/* AVX-512 vector math for epilogues: exp, tanh, erf and the fused activations of epilogue.h.
 *
 * Everything here is static inline with a target attribute, so it can be included by any CPU
 * source and used only behind a run-time kiln__cpu_has() check. Accuracy
 * (measured over the whole float range against double precision): exp ~1 ulp, tanh and erf
 * within ~3 ulp (erf: absolute ~2e-7 near |x| = 1); NaN inputs propagate like the scalar
 * kiln__act_scalar (Relu maps NaN to 0, as `x > 0 ? x : 0` does). */
#ifndef KILN_BACKEND_CPU_VMATH_H
#define KILN_BACKEND_CPU_VMATH_H
#include "epilogue.h"
#include <math.h>
#include <string.h>

#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#define KILN_VMATH_X86 1
#include <immintrin.h>

#define KILN_V512 __attribute__((target("avx512f,avx512dq,fma"), always_inline)) static inline

/* the lanes of a 16-lane step with `left` elements still to go: all 16 when left >= 16, none when
 * left <= 0. No target attribute (it is plain integer code), so it inlines into functions compiled
 * for any AVX-512 subset. */
static inline __mmask16 kiln_v_mask16(int64_t left)
{
    return left >= 16 ? (__mmask16)0xFFFF : left <= 0 ? (__mmask16)0 : (__mmask16)((1u << left) - 1u);
}

/* 16 bytes at s, of which n (< 16: a tail) are read and the rest taken as 0, widened to int32 lanes as int8 (s8) or
 * uint8. Without AVX512BW there is no byte-masked load, so a tail goes through a copy. AVX-512F only, so it inlines
 * into any AVX-512 kernel (the INT8 ones: QLinearAdd, DequantizeLinear, the depthwise rows). */
__attribute__((target("avx512f"), always_inline)) static inline __m512i kiln_v_load16_8to32(const uint8_t *s, int64_t n,
                                                                                           bool s8)
{
    __m128i v;
    if (n >= 16) {
        v = _mm_loadu_si128((const __m128i *)s);
    } else {
        uint8_t t[16] = {0};
        memcpy(t, s, (size_t)(n > 0 ? n : 0));
        v = _mm_loadu_si128((const __m128i *)t);
    }
    return s8 ? _mm512_cvtepi8_epi32(v) : _mm512_cvtepu8_epi32(v);
}

/* exp(x) for x in [-103.97, 88.7228] (no clamping): Cody-Waite reduction by ln 2, degree-6
 * polynomial, 2^n by scalef. */
KILN_V512 __m512 kiln_v_exp_inrange(__m512 x)
{
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.9875691500e-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    __m512 r2 = _mm512_mul_ps(r, r);
    __m512 y = _mm512_add_ps(_mm512_fmadd_ps(p, r2, r), _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(y, n);
}

/* exp(x): kiln_v_exp_inrange on x clamped to its range, +inf above it like expf. */
KILN_V512 __m512 kiln_v_exp(__m512 x)
{
    /* max(lo, x) / min(hi, x) keep NaN (the second operand is returned for NaN) */
    const __m512 x0 = x;
    x = _mm512_min_ps(_mm512_set1_ps(88.7228f), _mm512_max_ps(_mm512_set1_ps(-103.97f), x));
    __m512 y = kiln_v_exp_inrange(x);
    /* overflow to +inf like expf (the input was clamped just below the threshold) */
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x0, _mm512_set1_ps(88.7228f), _CMP_GT_OQ), y,
                                _mm512_set1_ps(INFINITY));
}


KILN_V512 __m512 kiln_v_abs(__m512 x)
{
    return _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(x), _mm512_set1_epi32(0x7fffffff)));
}

/* copies the sign of s onto the non-negative magnitude m */
KILN_V512 __m512 kiln_v_copysign(__m512 m, __m512 s)
{
    /* m | (s & sign) in one vpternlogd (a = m, b = s, c = the sign mask: a | (b & c) is 0xF8) */
    return _mm512_castsi512_ps(_mm512_ternarylogic_epi32(_mm512_castps_si512(m), _mm512_castps_si512(s),
                                                         _mm512_set1_epi32((int)0x80000000u), 0xF8));
}

/* tanh: odd polynomial for |x| < 0.625, else 1 - 2 / (exp(2|x|) + 1) */
KILN_V512 __m512 kiln_v_tanh(__m512 x)
{
    __m512 a = kiln_v_abs(x);
    __m512 x2 = _mm512_mul_ps(x, x);
    __m512 p = _mm512_set1_ps(0.0023079763632267714f);
    p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(-0.008359910920262337f));
    p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(0.021774930879473686f));
    p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(-0.053960226476192474f));
    p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(0.13333310186862946f));
    p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(-0.3333333432674408f));
    __m512 small = _mm512_fmadd_ps(_mm512_mul_ps(x, x2), p, x);
    __m512 a10 = _mm512_min_ps(_mm512_set1_ps(10.0f), a); /* tanh(10) rounds to 1 */
    __m512 e = kiln_v_exp(_mm512_add_ps(a10, a10));
    __m512 big = _mm512_sub_ps(_mm512_set1_ps(1.0f),
                               _mm512_div_ps(_mm512_set1_ps(2.0f), _mm512_add_ps(e, _mm512_set1_ps(1.0f))));
    big = kiln_v_copysign(big, x);
    __mmask16 is_small = _mm512_cmp_ps_mask(a, _mm512_set1_ps(0.625f), _CMP_LT_OQ);
    __m512 r = _mm512_mask_blend_ps(is_small, big, small);
    /* NaN: the small-path polynomial of a NaN is NaN */
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), r, x);
}

/* erf: x P(x^2) for |x| <= 1, else 1 - exp(-x^2) Q(1/|x|) (|x| clamped to 4, where erf
 * rounds to 1), with the rounding error of x^2 compensated. */
KILN_V512 __m512 kiln_v_erf(__m512 x)
{
    __m512 a = kiln_v_abs(x);
    __m512 x2 = _mm512_mul_ps(x, x);
    __m512 p = _mm512_set1_ps(7.898209878476337e-05f);
    p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(-0.0008024353883229196f));
    p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(0.00519005348905921f));
    p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(-0.026854809373617172f));
    p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(0.11283612251281738f));
    p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(-0.3761262893676758f));
    p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(1.128379225730896f));
    __m512 small = _mm512_mul_ps(x, p);
    __m512 b = _mm512_min_ps(_mm512_set1_ps(4.0f), _mm512_max_ps(_mm512_set1_ps(1.0f), a));
    __m512 u = _mm512_div_ps(_mm512_set1_ps(1.0f), b);
    __m512 q = _mm512_set1_ps(-0.012079884298145771f);
    q = _mm512_fmadd_ps(q, u, _mm512_set1_ps(0.04147293418645859f));
    q = _mm512_fmadd_ps(q, u, _mm512_set1_ps(-0.003256680676713586f));
    q = _mm512_fmadd_ps(q, u, _mm512_set1_ps(-0.21059322357177734f));
    q = _mm512_fmadd_ps(q, u, _mm512_set1_ps(0.4749651551246643f));
    q = _mm512_fmadd_ps(q, u, _mm512_set1_ps(-0.4620603919029236f));
    q = _mm512_fmadd_ps(q, u, _mm512_set1_ps(0.03947317227721214f));
    q = _mm512_fmadd_ps(q, u, _mm512_set1_ps(0.5594154596328735f));
    q = _mm512_fmadd_ps(q, u, _mm512_set1_ps(0.0002469873579684645f));
    __m512 b2 = _mm512_mul_ps(b, b);
    __m512 lo = _mm512_fmsub_ps(b, b, b2);                      /* b*b - b2, exactly */
    __m512 e = kiln_v_exp_inrange(_mm512_sub_ps(_mm512_setzero_ps(), b2));   /* -b2 in [-16, -1] */
    e = _mm512_fnmadd_ps(e, lo, e);                             /* exp(-b2 - lo) ~ e (1 - lo) */
    __m512 big = kiln_v_copysign(_mm512_fnmadd_ps(e, q, _mm512_set1_ps(1.0f)), x);
    /* NaN: b = min(4, max(1, NaN)) is NaN (the second operand is returned), so big is NaN */
    __mmask16 is_small = _mm512_cmp_ps_mask(a, _mm512_set1_ps(1.0f), _CMP_LE_OQ);
    return _mm512_mask_blend_ps(is_small, big, small);
}

/* The activation of a (a->kind != KILN_ACT_NONE handled too). Matches kiln__act_scalar. */
KILN_V512 __m512 kiln_v_act(const kiln_act *a, __m512 x)
{
    const __m512 zero = _mm512_setzero_ps(), one = _mm512_set1_ps(1.0f);
    switch (a->kind) {
    case KILN_ACT_NONE: return x;
    case KILN_ACT_RELU: return _mm512_max_ps(zero, x);   /* NaN and -0 stay (max_ps returns its second operand), like x < 0 ? 0 : x */
    case KILN_ACT_CLIP:
        return _mm512_min_ps(_mm512_set1_ps(a->beta), _mm512_max_ps(_mm512_set1_ps(a->alpha), x));
    case KILN_ACT_LEAKYRELU: {
        __mmask16 neg = _mm512_cmp_ps_mask(x, zero, _CMP_LT_OQ);
        return _mm512_mask_mul_ps(x, neg, x, _mm512_set1_ps(a->alpha));
    }
    case KILN_ACT_SIGMOID:
        return _mm512_div_ps(one, _mm512_add_ps(one, kiln_v_exp(_mm512_sub_ps(zero, x))));
    case KILN_ACT_HARDSIGMOID: {
        __m512 v = _mm512_fmadd_ps(_mm512_set1_ps(a->alpha), x, _mm512_set1_ps(a->beta));
        return _mm512_min_ps(one, _mm512_max_ps(zero, v));
    }
    case KILN_ACT_HARDSWISH: {
        __m512 v = _mm512_add_ps(_mm512_div_ps(x, _mm512_set1_ps(6.0f)), _mm512_set1_ps(0.5f));
        return _mm512_mul_ps(x, _mm512_min_ps(one, _mm512_max_ps(zero, v)));
    }
    case KILN_ACT_SILU: return _mm512_div_ps(x, _mm512_add_ps(one, kiln_v_exp(_mm512_sub_ps(zero, x))));
    case KILN_ACT_GELU: {
        __m512 e = kiln_v_erf(_mm512_mul_ps(x, _mm512_set1_ps(0.70710678118654752f)));
        __m512 h = _mm512_mul_ps(_mm512_set1_ps(0.5f), x);
        return _mm512_fmadd_ps(h, e, h);   /* h (1 + e), one rounding */
    }
    case KILN_ACT_GELU_TANH: {
        __m512 x3 = _mm512_mul_ps(_mm512_mul_ps(x, x), x);
        __m512 t = kiln_v_tanh(
            _mm512_mul_ps(_mm512_set1_ps(0.7978845608028654f), _mm512_fmadd_ps(_mm512_set1_ps(0.044715f), x3, x)));
        return _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(0.5f), x), _mm512_add_ps(one, t));
    }
    case KILN_ACT_TANH: return kiln_v_tanh(x);
    case KILN_ACT_HARDSWISH_AFFINE: {
        __m512 v = _mm512_add_ps(_mm512_div_ps(x, _mm512_set1_ps(6.0f)), _mm512_set1_ps(0.5f));
        __m512 h = _mm512_mul_ps(x, _mm512_min_ps(one, _mm512_max_ps(zero, v)));
        return _mm512_add_ps(_mm512_mul_ps(_mm512_set1_ps(a->alpha), h), _mm512_set1_ps(a->beta));
    }
    }
    return x;
}
#else
#define KILN_VMATH_X86 0
#endif

#endif

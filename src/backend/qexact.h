/* Exact shortcuts for the requantizing arithmetic of the INT8 epilogues, in C and CUDA (the GPU's INT8 kernels use
 * them; tests/unit/test_qexact.c checks them against the CPU's definitions).
 *
 * On the GPU a float <-> int conversion (I2F, F2I, and rintf's FRND) runs at a quarter of the float rate: the INT8
 * convolutions' epilogue with QLinearConvAdd's residual add did seven an element, and Nsight Compute found those
 * kernels bound by their instructions, not by memory (docs/CUDA.md, session 31). For the small integers of these
 * epilogues the same values come from full-rate float and integer additions: adding 1.5 * 2^23 to a float x with
 * |x| < 2^22 gives a float in [2^23, 2^24), where the spacing is 1, so the sum is x rounded to an integer (to
 * nearest, ties to even: the magic number is even), and its bit pattern is the magic number's plus that integer.
 *
 * Every function gives the bits its reference gives wherever its comment says it applies. */
#ifndef KILN_BACKEND_QEXACT_H
#define KILN_BACKEND_QEXACT_H
#include <stdint.h>

#if defined(__CUDACC__)
#define KQ_FN static __host__ __device__ __forceinline__
#else
#define KQ_FN static inline
#include <math.h>
#include <string.h>
#endif

#define KQ_MAGIC 12582912.0f    /* 1.5 * 2^23 */
#define KQ_MAGIC_BITS 0x4B400000 /* its bits */

/* Each float operation rounded on its own (never fused into a multiply-add by the compiler: nvcc contracts a * b + c
 * by default), and the bit casts. */
#if defined(__CUDA_ARCH__)
KQ_FN float kq_add(float a, float b) { return __fadd_rn(a, b); }
KQ_FN float kq_mul(float a, float b) { return __fmul_rn(a, b); }
KQ_FN float kq_fma(float a, float b, float c) { return __fmaf_rn(a, b, c); }
KQ_FN int32_t kq_bits(float x) { return __float_as_int(x); }
KQ_FN float kq_float(int32_t b) { return __int_as_float(b); }
#else
KQ_FN float kq_add(float a, float b) { return a + b; }
KQ_FN float kq_mul(float a, float b) { return a * b; }
KQ_FN float kq_fma(float a, float b, float c) { return fmaf(a, b, c); }
KQ_FN int32_t kq_bits(float x)
{
    int32_t b;
    memcpy(&b, &x, sizeof b);
    return b;
}
KQ_FN float kq_float(int32_t b)
{
    float x;
    memcpy(&x, &b, sizeof x);
    return x;
}
#endif

/* (float)n for -2^22 <= n <= 2^22 (exact there: no rounding) */
KQ_FN float kq_i2f(int32_t n) { return kq_add(kq_float(KQ_MAGIC_BITS + n), -KQ_MAGIC); }

/* (int32_t)rintf(x), ties to even, for |x| < 2^22 (not NaN) */
KQ_FN int32_t kq_rint(float x) { return kq_bits(kq_add(x, KQ_MAGIC)) - KQ_MAGIC_BITS; }

/* The INT8 epilogue's requantization (cpu/qgemm.c kiln__qepi_q after the scaling): (int32_t)rintf(t) of t clamped to
 * [lo, hi], NaN -> lo, for |lo|, |hi| < 2^22 (the output type's range less its zero point: always) */
KQ_FN int32_t kq_clamp_rint(float t, float lo, float hi) { return kq_rint(fminf(fmaxf(t, lo), hi)); }

/* kq_qadd's isc: 1 / sc rounded, NaN where that is not a normal float (sc zero, subnormal or past 2^126: the relative
 * error kq_qadd counts on would not hold), so that every element divides */
KQ_FN float kq_inv(float sc)
{
    const float i = 1.0f / sc;
    return fabsf(i) >= 1.17549435e-38f && fabsf(i) <= 3.40282347e+38f ? i : NAN;
}

/* q clamped to [lo, hi] (lo <= hi) */
KQ_FN int32_t kq_clamp_i(int32_t q, int32_t lo, int32_t hi) { return q > lo ? (q < hi ? q : hi) : lo; }

/* QLinearAdd's element (cpu/qadd.h kiln__qadd1), kq_qadd below (its halves kq_qadd_sum, kq_qadd_round), for 8-bit
 * a, b, zero points and ranges (|a - za|, |b - zb| <= 2^22; |zc|, |lo|, |hi| <= 2^20, lo <= hi) and act 0 (none)
 * or clamping to [flo, fhi] (Relu, Clip):
 *   v = act((float)(a - za) * sa + (float)(b - zb) * sb),  c = clamp(rintf(v / sc) + zc, lo, hi)
 * without the division: r = v * isc (isc = 1 / sc rounded, a normal float) is within 3 * 2^-24 |r| of the rounded
 * quotient, so where the ends of r (1 -+ 2^-21) give one value of c (exact ends: the products are exact inside the
 * multiply-adds) it is c of the quotient (rint and the clamp are monotonic). Returns 1 with *c set, or 0 where the
 * caller must divide *v (v) by sc (the ends give two values: a quotient near a .5 inside the range; r NaN, e.g. isc
 * NaN where 1 / sc is not a normal float). */

/* kq_qadd's first half: v = act(da * sa + db * sb) for da = a - za, db = b - zb (exact floats) */
KQ_FN float kq_qadd_sum(float da, float sa, float db, float sb, int act, float flo, float fhi)
{
    const float v = kq_add(kq_mul(da, sa), kq_mul(db, sb));
    return act ? fminf(fmaxf(v, flo), fhi) : v;
}

/* kq_qadd's second half: c = clamp(rintf(v / sc) + zc, lo, hi) from r = v * isc; returns 1 with *c set, or 0 where
 * the caller must divide. r is first clamped to [lo - zc - 1, hi - zc + 1] (integers): a quotient past either end gives
 * that end's c, and there the bracket is an integer's, so the clamp leaves one test (the ends round alike) and no
 * range check. No branch: the GPU runs it for every element of an unrolled epilogue. */
KQ_FN int kq_qadd_round(float v, float isc, int32_t zc, int32_t lo, int32_t hi, int32_t *c)
{
    const float r = kq_mul(v, isc);
    const float rc = fminf(fmaxf(r, (float)(lo - zc - 1)), (float)(hi - zc + 1));   /* NaN -> the low end */
    const float l = kq_fma(rc, 0.999999523162841796875f, KQ_MAGIC), h = kq_fma(rc, 1.000000476837158203125f, KQ_MAGIC);
    *c = kq_clamp_i(kq_bits(l) - KQ_MAGIC_BITS + zc, lo, hi);
    return l == h && r == r;
}

KQ_FN int kq_qadd(int32_t a, int32_t za, float sa, int32_t b, int32_t zb, float sb, int act, float flo, float fhi,
                  float isc, int32_t zc, int32_t lo, int32_t hi, int32_t *c, float *vout)
{
    const float v = kq_qadd_sum(kq_i2f(a - za), sa, kq_i2f(b - zb), sb, act, flo, fhi);
    *vout = v;
    return kq_qadd_round(v, isc, zc, lo, hi, c);
}

/* (float)((int32_t)rintf(x) + d) for |x| < 2^22 and an integer d, |d| <= 2^22 (its float passed): the sum
 * x + 1.5 * 2^23 holds rint(x) exactly, and one more addition of the exact d - 1.5 * 2^23 leaves rint(x) + d, exact */
KQ_FN float kq_rint_plus(float x, float d) { return kq_add(kq_add(x, KQ_MAGIC), kq_add(d, -KQ_MAGIC)); }

/* (float)(byte - zb) of the byte whose float 1.5 * 2^23 + byte is mb (its bits: the magic number's with the byte in the
 * lowest 8, e.g. by a byte permute), for |zb| <= 2^22 */
KQ_FN float kq_byte_minus(float mb, int32_t zb) { return kq_add(mb, -kq_add(KQ_MAGIC, (float)zb)); }

#endif

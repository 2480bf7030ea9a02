/* The requantizing division of the AVX-512 INT8 kernels (QuantizeLinear, QLinearAdd): 16 lanes of
 * c = clamp(rintf(v / sc) + zc, lo, hi) (NaN -> 0), each equal to the scalar reference's, with the division's rounding
 * decided from v * (1 / sc) where that is exact (../../qexact.h kq_qadd_round, lane for lane: the quotient clamped to
 * one past the range, its ends r (1 -+ 2^-21) rounded exactly by multiply-adds); the lanes it declines (a quotient
 * near a .5, NaN) divide. Included by the AVX-512 files only (their target attribute). */
#ifndef KILN_BACKEND_CPU_X86_QROUND_AVX512_H
#define KILN_BACKEND_CPU_X86_QROUND_AVX512_H
#include "../../qexact.h"
#include <immintrin.h>

#define KILN_TQR __attribute__((target("avx512f")))

typedef struct kiln_qround512 {
    __m512 sc, isc, rlo, rhi, elo, ehi, mg, zc, lo, hi;
    __m512i kzc, ilo, ihi;
} kiln_qround512;

KILN_TQR static inline void kiln__qround512_init(kiln_qround512 *q, float sc, int32_t zc, int32_t lo, int32_t hi)
{
    q->sc = _mm512_set1_ps(sc);
    q->isc = _mm512_set1_ps(kq_inv(sc));   /* NaN: every lane divides */
    q->rlo = _mm512_set1_ps((float)(lo - zc - 1));
    q->rhi = _mm512_set1_ps((float)(hi - zc + 1));
    q->elo = _mm512_set1_ps(0.999999523162841796875f);
    q->ehi = _mm512_set1_ps(1.000000476837158203125f);
    q->mg = _mm512_set1_ps(KQ_MAGIC);
    q->zc = _mm512_set1_ps((float)zc);
    q->lo = _mm512_set1_ps((float)lo);
    q->hi = _mm512_set1_ps((float)hi);
    q->kzc = _mm512_set1_epi32(zc - KQ_MAGIC_BITS);
    q->ilo = _mm512_set1_epi32(lo);
    q->ihi = _mm512_set1_epi32(hi);
}

/* the lanes km of c for v */
KILN_TQR static inline __m512i kiln__qround512(const kiln_qround512 *q, __m512 v, __mmask16 km)
{
    const __m512 r = _mm512_mul_ps(v, q->isc);
    const __m512 rc = _mm512_min_ps(_mm512_max_ps(r, q->rlo), q->rhi);   /* NaN -> the low end (then divided) */
    const __m512 l = _mm512_fmadd_ps(rc, q->elo, q->mg), h = _mm512_fmadd_ps(rc, q->ehi, q->mg);
    const __mmask16 ok = _mm512_cmp_ps_mask(l, h, _CMP_EQ_OQ) & _mm512_cmp_ps_mask(r, r, _CMP_ORD_Q);
    __m512i c = _mm512_min_epi32(_mm512_max_epi32(_mm512_add_epi32(_mm512_castps_si512(l), q->kzc), q->ilo), q->ihi);
    if ((ok & km) != km) {   /* rare: those lanes divide, as the reference */
        __m512 d = _mm512_add_ps(
            _mm512_roundscale_ps(_mm512_div_ps(v, q->sc), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC), q->zc);
        d = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(d, d, _CMP_ORD_Q), d);   /* NaN -> 0 */
        d = _mm512_min_ps(_mm512_max_ps(d, q->lo), q->hi);
        c = _mm512_mask_blend_epi32(ok, _mm512_cvtps_epi32(d), c);
    }
    return c;
}

#endif

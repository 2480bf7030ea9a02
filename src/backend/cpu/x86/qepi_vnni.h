/* The INT8 GEMM's epilogue on one vector of int32 accumulators (qgemm.h's contract), shared by the AVX512-VNNI tile
 * (x86/qgemm_vnni.c) and the AMX one (x86/qgemm_amx.c): zero-point compensation, bias, scale, activation,
 * requantization (with the one-rounding residual), masked store. */
#ifndef KILN_BACKEND_CPU_X86_QEPI_VNNI_H
#define KILN_BACKEND_CPU_X86_QEPI_VNNI_H
#include "../qgemm.h"
#include "../vmath.h"
#include <immintrin.h>

#define TVNNI __attribute__((target("avx512f,avx512dq,fma,avx512vnni")))

/* Epilogue and store of one accumulator vector: row gi, columns j .. j+15 (mask km). */
TVNNI __attribute__((always_inline)) static inline void epi_store(const kiln_qgemm *g, const int32_t *bsum,
                                                                   __m512i acc, int64_t gi, int64_t j, __mmask16 km)
{
    const kiln_qepi *e = &g->epi;
    if (g->a_sum) { /* - zb[n] * (rowsum(A)[m] - K za[m]) */
        int32_t za = g->a_zp ? g->a_zp[gi] : g->a_zp0;
        int32_t r = (int32_t)((uint32_t)g->a_sum[gi] - (uint32_t)g->K * (uint32_t)za);
        __m512i zb = g->b_zp ? _mm512_maskz_loadu_epi32(km, g->b_zp + j) : _mm512_set1_epi32(g->b_zp0);
        acc = _mm512_sub_epi32(acc, _mm512_mullo_epi32(zb, _mm512_set1_epi32(r)));
    }
    if (bsum) { /* - za[m] * colsum(B)[n] */
        int32_t za = g->a_zp ? g->a_zp[gi] : g->a_zp0;
        acc = _mm512_sub_epi32(acc, _mm512_mullo_epi32(_mm512_set1_epi32(za), _mm512_maskz_loadu_epi32(km, bsum)));
    }
    if (e->bias)
        acc = _mm512_add_epi32(acc, e->ch_row ? _mm512_set1_epi32(e->bias[gi])
                                              : _mm512_maskz_loadu_epi32(km, e->bias + j));
    if (e->out == KILN_QOUT_S32) {
        _mm512_mask_storeu_epi32((int32_t *)g->c + gi * g->ldc + j, km, acc);
        return;
    }
    __m512 v = _mm512_cvtepi32_ps(acc);
    const float *sv = e->lin && e->out != KILN_QOUT_F32 ? e->mult : e->scale;
    v = _mm512_mul_ps(v, e->ch_row ? _mm512_set1_ps(sv[gi]) : _mm512_maskz_loadu_ps(km, sv + j));
    if (e->out == KILN_QOUT_F32) {
        _mm512_mask_storeu_ps((float *)g->c + gi * g->ldc + j, km, kiln_v_act(&e->act, v));
        return;
    }
    if (!e->lin)
        v = _mm512_mul_ps(kiln_v_act(&e->act, v), _mm512_set1_ps(e->inv_ys));
    if (e->res) { /* one rounding: + (float)(r - res_zp) * res_k, fused (kiln__qepi_qr) */
        __m512i r = kiln_v_load16_8to32(e->res + gi * e->res_ld + j, _mm_popcnt_u32(km), e->res_s8);
        v = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(r, _mm512_set1_epi32(e->res_zp))),
                            _mm512_set1_ps(e->res_k), v);
    }
    v = _mm512_max_ps(v, _mm512_set1_ps((float)(e->lo - e->zp))); /* NaN -> lo, like the scalar code */
    v = _mm512_min_ps(v, _mm512_set1_ps((float)(e->hi - e->zp)));
    __m512i q = _mm512_add_epi32(_mm512_cvtps_epi32(v), _mm512_set1_epi32(e->zp));
    _mm512_mask_cvtepi32_storeu_epi8((uint8_t *)g->c + gi * g->ldc + j, km, q);
}

#endif

/* AVX-512 MaxPool / AveragePool: the reference kernels (cpu/ref/k_pool.c) with the interior of
 * each float32 output row vectorized, registered over them for hosts with AVX-512F. */
#include "../cpu_kernels.h"
#include "../pool.h"
#include <math.h>

#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#include <immintrin.h>

/* 16 outputs at column ox: max or sum over the window rows and kw taps (kw constant when
 * instantiated with KW > 0); m: lanes to compute; raw loads are exactly the elements read. */
__attribute__((target("avx512f"), always_inline)) static inline __m512
pool_vec512(bool is_max, const float *const *rows, int nr, int64_t kw, int64_t dw, int64_t sw, int64_t ox, int cnt,
            const int KW)
{
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    __mmask16 m = cnt == 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << cnt) - 1u);
    int rc = 2 * cnt - 1; /* raw elements read for stride 2 */
    __mmask16 m2a = (__mmask16)(rc >= 16 ? 0xFFFFu : (1u << rc) - 1u);
    __mmask16 m2b = (__mmask16)(rc > 16 ? (1u << (rc - 16)) - 1u : 0u);
    __m512 acc = is_max ? _mm512_set1_ps(-INFINITY) : _mm512_setzero_ps();
    const int64_t nk = KW > 0 ? KW : kw;
    for (int r = 0; r < nr; r++) {
        const float *xr = rows[r] + ox * sw;
        for (int64_t kj = 0; kj < nk; kj++) {
            const float *q = xr + kj * dw;
            __m512 v;
            if (sw == 1)
                v = _mm512_maskz_loadu_ps(m, q);
            else
                v = _mm512_permutex2var_ps(_mm512_maskz_loadu_ps(m2a, q), even, _mm512_maskz_loadu_ps(m2b, q + 16));
            acc = is_max ? _mm512_max_ps(v, acc) : _mm512_add_ps(acc, v); /* max: NaN v keeps acc */
        }
    }
    return acc;
}

/* A kiln_pool_row_fn (pool.h), 16 outputs at a time: max (NaN inputs ignored, like the scalar
 * loop) or sum / cnt_f, summed in the scalar loop's order. */
__attribute__((target("avx512f"))) static bool pool_row512(bool is_max, const float *const *rows, int nr, int64_t kw,
                                                           int64_t dw, int64_t sw, int64_t oxa, int64_t oxb,
                                                           float cnt_f, float *yo)
{
    __mmask16 ninf = 0;
    const __m512 vcnt = _mm512_set1_ps(cnt_f), minf = _mm512_set1_ps(-INFINITY);
    for (int64_t ox = oxa; ox < oxb; ox += 16) {
        int cnt = oxb - ox < 16 ? (int)(oxb - ox) : 16;
        __m512 acc = kw == 3 ? pool_vec512(is_max, rows, nr, kw, dw, sw, ox, cnt, 3)
                             : pool_vec512(is_max, rows, nr, kw, dw, sw, ox, cnt, 0);
        __mmask16 m = cnt == 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << cnt) - 1u);
        if (is_max)
            ninf |= _mm512_mask_cmp_ps_mask(m, acc, minf, _CMP_EQ_OQ);
        else
            acc = _mm512_div_ps(acc, vcnt);
        _mm512_mask_storeu_ps(yo + ox, m, acc);
    }
    return ninf != 0;
}

static kiln_status k_maxpool_avx512(kiln_kctx *ctx) { return kiln__maxpool(ctx, pool_row512); }
static kiln_status k_avgpool_avx512(kiln_kctx *ctx) { return kiln__avgpool(ctx, pool_row512); }

const kiln_kernel_isa_reg kiln__x86_pool[] = {
    {KILN_OP_MaxPool, k_maxpool_avx512, KILN_CPU_AVX512F, "MaxPool/avx512f"},
    {KILN_OP_AveragePool, k_avgpool_avx512, KILN_CPU_AVX512F, "AveragePool/avx512f"},
    {KILN_OP_COUNT, NULL, 0, NULL},
};
#else
const kiln_kernel_isa_reg kiln__x86_pool[] = {{KILN_OP_COUNT, NULL, 0, NULL}};
#endif

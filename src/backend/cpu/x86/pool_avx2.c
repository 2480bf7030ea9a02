/* AVX2 MaxPool / AveragePool: the reference kernels (cpu/ref/k_pool.c) with the interior of each
 * float32 output row (kiln_pool_row_fn) and MaxPool's whole rows (kiln_pool_maxrow_fn) done 8
 * outputs at a time; pool_avx512.c's twins, registered over the references for hosts with AVX2
 * (the AVX-512 kernels override them where the host has AVX-512F). */
#include "../cpu_kernels.h"
#include "../pool.h"
#include <math.h>

#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#include <immintrin.h>

#define T2 __attribute__((target("avx2")))

/* lanes [0, n) of an 8-lane mask, n in [0, 8] */
T2 static inline __m256i lanes(int64_t n)
{
    return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* the even elements of q[0, 16) */
T2 static inline __m256 even8(__m256 a, __m256 b)
{
    __m256 t = _mm256_shuffle_ps(a, b, _MM_SHUFFLE(2, 0, 2, 0));
    return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(t), _MM_SHUFFLE(3, 1, 2, 0)));
}

/* 8 outputs at column ox: max or sum over the window rows and kw taps (KW > 0: kw constant); cnt
 * lanes computed; the loads read exactly the elements the outputs use. */
__attribute__((target("avx2"), always_inline)) static inline __m256
pool_vec256(bool is_max, const float *const *rows, int nr, int64_t kw, int64_t dw, int64_t sw, int64_t ox, int cnt,
            const int KW)
{
    const __m256i m = lanes(cnt), m2a = lanes(2 * cnt - 1 < 8 ? 2 * cnt - 1 : 8),
                  m2b = lanes(2 * cnt - 1 > 8 ? 2 * cnt - 9 : 0);
    __m256 acc = is_max ? _mm256_set1_ps(-INFINITY) : _mm256_setzero_ps();
    const int64_t nk = KW > 0 ? KW : kw;
    for (int r = 0; r < nr; r++) {
        const float *xr = rows[r] + ox * sw;
        for (int64_t kj = 0; kj < nk; kj++) {
            const float *q = xr + kj * dw;
            __m256 v;
            if (sw == 1)
                v = cnt == 8 ? _mm256_loadu_ps(q) : _mm256_maskload_ps(q, m);
            else
                v = cnt == 8 ? even8(_mm256_loadu_ps(q), _mm256_maskload_ps(q + 8, m2b))
                             : even8(_mm256_maskload_ps(q, m2a), _mm256_maskload_ps(q + 8, m2b));
            acc = is_max ? _mm256_max_ps(v, acc) : _mm256_add_ps(acc, v);   /* max: NaN v keeps acc */
        }
    }
    return acc;
}

/* A kiln_pool_row_fn (pool.h): max (NaN ignored) or sum / cnt_f in the scalar loop's order. */
T2 static bool pool_row256(bool is_max, const float *const *rows, int nr, int64_t kw, int64_t dw, int64_t sw,
                           int64_t oxa, int64_t oxb, float cnt_f, float *yo)
{
    int ninf = 0;
    const __m256 vcnt = _mm256_set1_ps(cnt_f), minf = _mm256_set1_ps(-INFINITY);
    for (int64_t ox = oxa; ox < oxb; ox += 8) {
        int cnt = oxb - ox < 8 ? (int)(oxb - ox) : 8;
        __m256 acc = kw == 3 ? pool_vec256(is_max, rows, nr, kw, dw, sw, ox, cnt, 3)
                             : pool_vec256(is_max, rows, nr, kw, dw, sw, ox, cnt, 0);
        if (is_max)
            ninf |= _mm256_movemask_ps(_mm256_cmp_ps(acc, minf, _CMP_EQ_OQ)) & ((1 << cnt) - 1);
        else
            acc = _mm256_div_ps(acc, vcnt);
        if (cnt == 8)
            _mm256_storeu_ps(yo + ox, acc);
        else
            _mm256_maskstore_ps(yo + ox, lanes(cnt), acc);
    }
    return ninf != 0;
}

/* The max over the nr rows of input columns [c, c + 8) (c >= 0); lanes from column W on are not read
 * (and not stored by the caller); NaN inputs ignored. */
T2 static inline __m256 col_max8(const float *const *rows, int nr, int64_t c, int64_t W)
{
    const __m256 minf = _mm256_set1_ps(-INFINITY);
    __m256 acc = minf;
    if (c + 8 <= W) {
        for (int r = 0; r < nr; r++)
            acc = _mm256_max_ps(_mm256_loadu_ps(rows[r] + c), acc);   /* NaN keeps acc */
        return acc;
    }
    __m256i m = lanes(W - c);
    for (int r = 0; r < nr; r++)
        acc = _mm256_max_ps(_mm256_maskload_ps(rows[r] + c, m), acc);
    return acc;
}

/* A kiln_pool_maxrow_fn (pool.h): the max over the rows of every input column into v (with -inf
 * for the padding columns on both sides), then the max over kw columns of v at stride sw. */
T2 static bool pool_maxrow256(const float *const *rows, int nr, int64_t W, int64_t kw, int64_t sw, int64_t pw,
                              int64_t Wo, float *yo)
{
    /* v[i] = column i - pw; outputs read v[ox * sw + j], j < kw, plus up to 15 more lanes */
    float v[KILN_POOL_MAXROW_W + 32] __attribute__((aligned(32)));
    int64_t need = (Wo - 1) * sw + kw + 16, fill_end = need > pw + W ? need : pw + W;
    for (int64_t i = 0; i < pw; i++)
        v[i] = -INFINITY;
    for (int64_t i = pw + W; i < fill_end; i++)
        v[i] = -INFINITY;
    for (int64_t x = 0; x < W; x += 8) {
        __m256 c = col_max8(rows, nr, x, W);
        if (W - x >= 8)
            _mm256_storeu_ps(v + pw + x, c);
        else
            _mm256_maskstore_ps(v + pw + x, lanes(W - x), c);
    }
    const __m256 minf = _mm256_set1_ps(-INFINITY);
    int ninf = 0;
    for (int64_t ox = 0; ox < Wo; ox += 8) {
        int cnt = Wo - ox >= 8 ? 8 : (int)(Wo - ox);
        const float *q = v + ox * sw;
        __m256 acc = minf;
        for (int64_t j = 0; j < kw; j++) {
            __m256 c = sw == 1 ? _mm256_loadu_ps(q + j) : even8(_mm256_loadu_ps(q + j), _mm256_loadu_ps(q + j + 8));
            acc = _mm256_max_ps(c, acc);
        }
        ninf |= _mm256_movemask_ps(_mm256_cmp_ps(acc, minf, _CMP_EQ_OQ)) & ((1 << cnt) - 1);
        if (cnt == 8)
            _mm256_storeu_ps(yo + ox, acc);
        else
            _mm256_maskstore_ps(yo + ox, lanes(cnt), acc);
    }
    return ninf != 0;
}

static kiln_status k_maxpool_avx2(kiln_kctx *ctx) { return kiln__maxpool(ctx, pool_row256, pool_maxrow256); }
static kiln_status k_avgpool_avx2(kiln_kctx *ctx) { return kiln__avgpool(ctx, pool_row256); }

const kiln_kernel_isa_reg kiln__x86_pool_avx2[] = {
    {KILN_OP_MaxPool, k_maxpool_avx2, KILN_CPU_AVX2, "MaxPool/avx2"},
    {KILN_OP_AveragePool, k_avgpool_avx2, KILN_CPU_AVX2, "AveragePool/avx2"},
    {KILN_OP_COUNT, NULL, 0, NULL},
};
#else
const kiln_kernel_isa_reg kiln__x86_pool_avx2[] = {{KILN_OP_COUNT, NULL, 0, NULL}};
#endif

/* AVX-512 MaxPool / AveragePool: the reference kernels (cpu/ref/k_pool.c) with the interior of
 * each float32 output row vectorized, registered over them for hosts with AVX-512F; and a float32
 * GlobalAveragePool over 16 planes at a time. */
#include "../cpu_kernels.h"
#include "../vmath.h"
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
    __mmask16 m = kiln_v_mask16(cnt);
    int rc = 2 * cnt - 1; /* raw elements read for stride 2 */
    __mmask16 m2a = kiln_v_mask16(rc);
    __mmask16 m2b = kiln_v_mask16(rc - 16);
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
        __mmask16 m = kiln_v_mask16(cnt);
        if (is_max)
            ninf |= _mm512_mask_cmp_ps_mask(m, acc, minf, _CMP_EQ_OQ);
        else
            acc = _mm512_div_ps(acc, vcnt);
        _mm512_mask_storeu_ps(yo + ox, m, acc);
    }
    return ninf != 0;
}

/* The max over the nr rows of input columns [c, c + 16), -inf for columns outside [0, W) (the
 * padding); NaN inputs ignored. NR > 0: nr known at compile time. */
__attribute__((target("avx512f"), always_inline)) static inline __m512 col_max16(const float *const *rows, int nr,
                                                                                  int64_t c, int64_t W, const int NR)
{
    const __m512 minf = _mm512_set1_ps(-INFINITY);
    const int n = NR > 0 ? NR : nr;
    __m512 acc = minf;
    if (c >= 0 && c + 16 <= W) {
        for (int r = 0; r < n; r++)
            acc = _mm512_max_ps(_mm512_loadu_ps(rows[r] + c), acc);   /* NaN keeps acc */
        return acc;
    }
    int64_t lo = c < 0 ? -c : 0, hi = W - c < 16 ? W - c : 16;   /* lanes [lo, hi) inside the row */
    if (hi <= lo)
        return minf;
    __mmask16 m = (__mmask16)(((1u << hi) - 1u) & ~((1u << lo) - 1u));
    for (int r = 0; r < n; r++)   /* the masked-off lanes (the padding) are not read */
        acc = _mm512_max_ps(_mm512_mask_loadu_ps(minf, m, rows[r] + c), acc);
    return acc;
}

/* 3-wide windows at stride 2 (ResNet's MaxPool after the stem): per 16 outputs the column maxima
 * V0, V1, V2 of 48 columns from c0 = 16 * 2 * block - pw (V2 is the next block's V0); taps 0 and 1
 * are the even and odd lanes of V0:V1, tap 2 the even lanes shifted by one with V2's first lane. */
__attribute__((target("avx512f"), always_inline)) static inline __mmask16
maxrow_k3s2(const float *const *rows, int nr, int64_t W, int64_t pw, int64_t Wo, float *yo, const int NR)
{
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    const __m512 minf = _mm512_set1_ps(-INFINITY);
    __mmask16 ninf = 0;
    __m512 v0 = col_max16(rows, nr, -pw, W, NR);
    for (int64_t ox = 0; ox < Wo; ox += 16) {
        int64_t c0 = 2 * ox - pw;
        __m512 v1 = col_max16(rows, nr, c0 + 16, W, NR), v2 = col_max16(rows, nr, c0 + 32, W, NR);
        __m512 e = _mm512_permutex2var_ps(v0, even, v1), o = _mm512_permutex2var_ps(v0, odd, v1);
        __m512 e2 = _mm512_castsi512_ps(_mm512_alignr_epi32(_mm512_castps_si512(v2), _mm512_castps_si512(e), 1));
        __m512 acc = _mm512_max_ps(_mm512_max_ps(e, o), e2);
        __mmask16 m = kiln_v_mask16(Wo - ox);
        ninf |= _mm512_mask_cmp_ps_mask(m, acc, minf, _CMP_EQ_OQ);
        _mm512_mask_storeu_ps(yo + ox, m, acc);
        v0 = v2;
    }
    return ninf;
}

/* A kiln_pool_maxrow_fn (pool.h). 3 wide at stride 2: maxrow_k3s2. Otherwise the max over the rows
 * of every input column into v (with -inf for the padding columns on both sides), then the max
 * over kw columns of v at stride sw. */
__attribute__((target("avx512f"))) static bool pool_maxrow512(const float *const *rows, int nr, int64_t W, int64_t kw,
                                                              int64_t sw, int64_t pw, int64_t Wo, float *yo)
{
    if (kw == 3 && sw == 2)
        return (nr == 3 ? maxrow_k3s2(rows, nr, W, pw, Wo, yo, 3) : maxrow_k3s2(rows, nr, W, pw, Wo, yo, 0)) != 0;
    /* v[i] = column i - pw; outputs read v[ox * sw + j], j < kw, plus up to 31 more lanes */
    float v[KILN_POOL_MAXROW_W + 64] __attribute__((aligned(64)));
    int64_t need = (Wo - 1) * sw + kw + 32, fill_end = need > pw + W ? need : pw + W;
    for (int64_t i = 0; i < pw; i++)
        v[i] = -INFINITY;
    for (int64_t i = pw + W; i < fill_end; i++)
        v[i] = -INFINITY;
    for (int64_t x = 0; x < W; x += 16) {
        __mmask16 m = kiln_v_mask16(W - x);
        _mm512_mask_storeu_ps(v + pw + x, m, col_max16(rows, nr, x, W, 0));
    }
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512 minf = _mm512_set1_ps(-INFINITY);
    __mmask16 ninf = 0;
    for (int64_t ox = 0; ox < Wo; ox += 16) {
        __mmask16 m = kiln_v_mask16(Wo - ox);
        const float *q = v + ox * sw;
        __m512 acc = minf;
        for (int64_t j = 0; j < kw; j++) {
            __m512 c = sw == 1 ? _mm512_loadu_ps(q + j)
                               : _mm512_permutex2var_ps(_mm512_loadu_ps(q + j), even, _mm512_loadu_ps(q + j + 16));
            acc = _mm512_max_ps(c, acc);
        }
        ninf |= _mm512_mask_cmp_ps_mask(m, acc, minf, _CMP_EQ_OQ);
        _mm512_mask_storeu_ps(yo + ox, m, acc);
    }
    return ninf != 0;
}

/* GlobalAveragePool, float32, 1-D or 2-D planes: 16 planes at a time, one per lane, each summed
 * element by element in the reference's order (so bit-identical to it): 16 columns of the 16
 * planes loaded as rows and transposed in registers (16 x 16), then added column by column. */
typedef struct gap_job {
    const float *x;
    float *y;
    int64_t planes, sz;
} gap_job;

/* out[k] lane p = r[p] lane k */
__attribute__((target("avx512f"), always_inline)) static inline void tr16x16(const __m512 r[16], __m512 out[16])
{
    __m512 t[16], u[16];
#pragma GCC unroll 8
    for (int j = 0; j < 8; j++) {   /* 128-bit lane L: r[2j][4L], r[2j+1][4L], r[2j][4L+1], ... */
        t[2 * j] = _mm512_unpacklo_ps(r[2 * j], r[2 * j + 1]);
        t[2 * j + 1] = _mm512_unpackhi_ps(r[2 * j], r[2 * j + 1]);
    }
#pragma GCC unroll 4
    for (int g = 0; g < 4; g++) {   /* u[4g + c], lane L: rows 4g..4g+3, element 4L + c */
        u[4 * g + 0] = _mm512_shuffle_ps(t[4 * g], t[4 * g + 2], 0x44);
        u[4 * g + 1] = _mm512_shuffle_ps(t[4 * g], t[4 * g + 2], 0xEE);
        u[4 * g + 2] = _mm512_shuffle_ps(t[4 * g + 1], t[4 * g + 3], 0x44);
        u[4 * g + 3] = _mm512_shuffle_ps(t[4 * g + 1], t[4 * g + 3], 0xEE);
    }
#pragma GCC unroll 4
    for (int c = 0; c < 4; c++) {   /* the 4 x 4 transpose of 128-bit lanes (row group, L) */
        __m512 v0 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0x44), v1 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0xEE);
        __m512 w0 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0x44), w1 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0xEE);
        out[c] = _mm512_shuffle_f32x4(v0, w0, 0x88);
        out[4 + c] = _mm512_shuffle_f32x4(v0, w0, 0xDD);
        out[8 + c] = _mm512_shuffle_f32x4(v1, w1, 0x88);
        out[12 + c] = _mm512_shuffle_f32x4(v1, w1, 0xDD);
    }
}

__attribute__((target("avx512f"))) static void gap_task(void *ctx, int64_t b, int64_t e)
{
    const gap_job *j = ctx;
    const __m512 cnt = _mm512_set1_ps((float)j->sz);
    for (int64_t g = b; g < e; g++) {
        int64_t p0 = g * 16, n = j->planes - p0 < 16 ? j->planes - p0 : 16;
        const float *x = j->x + p0 * j->sz;
        __m512 acc = _mm512_setzero_ps();
        for (int64_t i = 0; i < j->sz; i += 16) {
            int64_t w = j->sz - i < 16 ? j->sz - i : 16;
            __mmask16 km = kiln_v_mask16(w);
            __m512 r[16], c[16];
#pragma GCC unroll 16
            for (int p = 0; p < 16; p++)
                r[p] = p < n ? _mm512_maskz_loadu_ps(km, x + p * j->sz + i) : _mm512_setzero_ps();
            tr16x16(r, c);
#pragma GCC unroll 16
            for (int k = 0; k < 16; k++)
                if (k < w)
                    acc = _mm512_add_ps(acc, c[k]);
        }
        __mmask16 m = kiln_v_mask16(n);
        _mm512_mask_storeu_ps(j->y + p0, m, _mm512_div_ps(acc, cnt));
    }
}

/* The reference kernel outside float32 1-D / 2-D planes. */
static kiln_status k_global_avgpool_avx512(kiln_kctx *ctx)
{
    const kiln_tensor *x = kiln__kin(ctx, 0);
    if (!x || x->dtype != KILN_DT_FLOAT32 || x->ndim < 3 || x->ndim > 4)
        return kiln__cpu_ref_kernel(KILN_OP_GlobalAveragePool)(ctx);
    int64_t sz = 1, dims[4] = {x->dims[0], x->dims[1], 1, 1};
    for (int i = 2; i < x->ndim; i++)
        sz *= x->dims[i];
    if (sz <= 0 || x->dims[0] <= 0 || x->dims[1] <= 0)
        return kiln__cpu_ref_kernel(KILN_OP_GlobalAveragePool)(ctx);
    KILN_TRY(kiln__kout_uninit(ctx, 0, KILN_DT_FLOAT32, x->ndim, dims));
    gap_job j = {.x = x->data, .y = ctx->out[0]->data, .planes = x->dims[0] * x->dims[1], .sz = sz};
    int64_t groups = (j.planes + 15) / 16;
    kiln__parallel_for(ctx->pool, ctx->nthreads, groups, 1 + 2048 / sz, gap_task, &j);
    return KILN_OK;
}

static kiln_status k_maxpool_avx512(kiln_kctx *ctx) { return kiln__maxpool(ctx, pool_row512, pool_maxrow512); }
static kiln_status k_avgpool_avx512(kiln_kctx *ctx) { return kiln__avgpool(ctx, pool_row512); }

const kiln_kernel_isa_reg kiln__x86_pool[] = {
    {KILN_OP_MaxPool, k_maxpool_avx512, KILN_CPU_AVX512F, "MaxPool/avx512f"},
    {KILN_OP_AveragePool, k_avgpool_avx512, KILN_CPU_AVX512F, "AveragePool/avx512f"},
    {KILN_OP_GlobalAveragePool, k_global_avgpool_avx512, KILN_CPU_AVX512F, "GlobalAveragePool/avx512f"},
    {KILN_OP_COUNT, NULL, 0, NULL},
};
#else
const kiln_kernel_isa_reg kiln__x86_pool[] = {{KILN_OP_COUNT, NULL, 0, NULL}};
#endif

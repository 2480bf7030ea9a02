/* AVX2 Attention: the reference kernel (cpu/ref/k_attention.c) with the row softmax 8 wide
 * (kiln_v8_exp, vmath_avx2.h); attn_avx512.c's twin, registered over the reference for hosts with
 * AVX2 and FMA (the AVX-512 kernel overrides it where present). */
#include "../cpu_kernels.h"
#include "../fused.h"
#include "../vmath_avx2.h"
#include <math.h>

#if KILN_VMATH_X86
#define T2 __attribute__((target("avx2,fma")))

T2 static inline float hmax8(__m256 v)
{
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
}

T2 static inline float hsum8(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* row = softmax(row + add) over n elements (add NULL: softmax(row)), 8 at a time (NaNs ignored by the maximum,
 * like the scalar loop) */
T2 static void softmax_row256(float *row, const float *add, int64_t n)
{
    const __m256 minf = _mm256_set1_ps(-INFINITY);
    __m256 vmx = minf;
    int64_t k = 0;
    for (; k + 8 <= n; k += 8) {
        __m256 x = _mm256_loadu_ps(row + k);
        if (add) {
            x = _mm256_add_ps(x, _mm256_loadu_ps(add + k));
            _mm256_storeu_ps(row + k, x);
        }
        vmx = _mm256_max_ps(x, vmx);   /* NaN keeps vmx */
    }
    __m256i tm = kiln_v8_mask(n - k);   /* the tail's lanes */
    if (k < n) {
        __m256 x = _mm256_maskload_ps(row + k, tm);
        if (add) {
            x = _mm256_add_ps(x, _mm256_maskload_ps(add + k, tm));
            _mm256_maskstore_ps(row + k, tm, x);
        }
        vmx = _mm256_max_ps(_mm256_blendv_ps(minf, x, _mm256_castsi256_ps(tm)), vmx);
    }
    __m256 vm = _mm256_set1_ps(hmax8(vmx)), vsum = _mm256_setzero_ps();
    for (k = 0; k + 8 <= n; k += 8) {
        __m256 e = kiln_v8_exp(_mm256_sub_ps(_mm256_loadu_ps(row + k), vm));
        _mm256_storeu_ps(row + k, e);
        vsum = _mm256_add_ps(vsum, e);
    }
    if (k < n) {
        __m256 e = kiln_v8_exp(_mm256_sub_ps(_mm256_maskload_ps(row + k, tm), vm));
        _mm256_maskstore_ps(row + k, tm, e);
        vsum = _mm256_add_ps(vsum, _mm256_and_ps(e, _mm256_castsi256_ps(tm)));
    }
    __m256 inv = _mm256_set1_ps(1.0f / hsum8(vsum));
    for (k = 0; k + 8 <= n; k += 8)
        _mm256_storeu_ps(row + k, _mm256_mul_ps(_mm256_loadu_ps(row + k), inv));
    if (k < n)
        _mm256_maskstore_ps(row + k, tm, _mm256_mul_ps(_mm256_maskload_ps(row + k, tm), inv));
}

static kiln_status k_attention_avx2(kiln_kctx *ctx) { return kiln__attention(ctx, softmax_row256); }

const kiln_kernel_isa_reg kiln__x86_attn_avx2[] = {
    {KILN_OP_Attention, k_attention_avx2, KILN_CPU_AVX2_FMA, "Attention/avx2"},
    {KILN_OP_COUNT, NULL, 0, NULL},
};
#else
const kiln_kernel_isa_reg kiln__x86_attn_avx2[] = {{KILN_OP_COUNT, NULL, 0, NULL}};
#endif
